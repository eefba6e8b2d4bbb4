// SPDX-License-Identifier: GPL-2.0

//! Where a queue's bytes are: one linear DMA range, or pages scattered
//! through a translation table in device memory.
//!
//! The kernel's own rings are linear (the software HCA reaches kernel
//! addresses; a ConnectX function's kernel queues are coherent memory or
//! pages allocated contiguous). A queue in a process's memory is not: its
//! pages are pinned one by one. For such a queue the firmware copies the
//! page list of CREATE_CQ or CREATE_QP into pages the driver lent it (the
//! same table a scattered CREATE_MKEY gets, see `fw::cmd_res`), and every
//! access to the ring translates through it: entry `k` of the table is the
//! bus address of page `k` of the buffer, big-endian, and a table longer
//! than one page is reached through a directory page. The cost is one
//! 8-byte read per access (two through a directory), as on hardware
//! without a translation cache.
//!
//! A ring's byte `off` is at position `start + off` of the paged buffer,
//! where `start` is the offset of byte 0 in the first page (the
//! context's `page_offset`). Accesses that cross a page boundary (a
//! multi-WQEBB WQE, an RQ WQE larger than its page's remainder) are split.

use super::mem::{DmaFault, DmaMemory};
use super::mr::table_entry;

/// The translation of a paged ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingPages {
    /// DMA address of the table, or of its directory if `indirect`.
    pub table: u64,
    /// log2 of the page size (12 at least).
    pub log_page: u8,
    /// `table` is a directory of table pages.
    pub indirect: bool,
    /// Entries in the table: the pages of the buffer.
    pub count: u32,
}

/// A queue buffer as the engine reads and writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Ring {
    /// The DMA address of byte 0 (linear), or its offset in the first
    /// page (paged).
    pub(super) start: u64,
    /// The translation, for a paged ring.
    pub(super) pages: Option<RingPages>,
}

impl Ring {
    pub(super) fn new(start: u64, pages: Option<RingPages>) -> Self {
        Ring { start, pages }
    }

    /// Where byte `off` of the ring is, and how many bytes from there on
    /// are contiguous (`u64::MAX` for a linear ring).
    fn locate<M: DmaMemory + ?Sized>(&self, mem: &mut M, off: u64) -> Result<(u64, u64), DmaFault> {
        let Some(p) = self.pages else {
            return Ok((self.start.wrapping_add(off), u64::MAX));
        };
        let pos = self.start.checked_add(off).ok_or(DmaFault)?;
        let index = pos >> p.log_page;
        if index >= u64::from(p.count) {
            return Err(DmaFault);
        }
        let mask = 1u64.checked_shl(u32::from(p.log_page)).ok_or(DmaFault)? - 1;
        let page = table_entry(mem, p.table, p.indirect, index)? & !mask;
        let within = pos & mask;
        Ok((page.wrapping_add(within), mask + 1 - within))
    }

    /// Reads `out.len()` bytes from byte `off` of the ring.
    pub(super) fn read<M: DmaMemory + ?Sized>(
        &self,
        mem: &mut M,
        off: u64,
        out: &mut [u8],
    ) -> Result<(), DmaFault> {
        // A linear ring is one range: a single access, as `locate` would
        // split none (an empty read touches nothing, as below).
        if self.pages.is_none() && !out.is_empty() {
            return mem.read(self.start.wrapping_add(off), out);
        }
        let mut done = 0usize;
        while done < out.len() {
            let (at, room) = self.locate(mem, off.wrapping_add(done as u64))?;
            let n = usize::try_from(room)
                .unwrap_or(usize::MAX)
                .min(out.len() - done);
            let chunk = out.get_mut(done..done + n).ok_or(DmaFault)?;
            mem.read(at, chunk)?;
            done += n;
        }
        Ok(())
    }

    /// Writes `data` at byte `off` of the ring.
    pub(super) fn write<M: DmaMemory + ?Sized>(
        &self,
        mem: &mut M,
        off: u64,
        data: &[u8],
    ) -> Result<(), DmaFault> {
        if self.pages.is_none() && !data.is_empty() {
            return mem.write(self.start.wrapping_add(off), data);
        }
        let mut done = 0usize;
        while done < data.len() {
            let (at, room) = self.locate(mem, off.wrapping_add(done as u64))?;
            let n = usize::try_from(room)
                .unwrap_or(usize::MAX)
                .min(data.len() - done);
            let chunk = data.get(done..done + n).ok_or(DmaFault)?;
            mem.write(at, chunk)?;
            done += n;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 64 KiB of memory at address 0.
    struct Mem([u8; 0x10000]);

    impl DmaMemory for Mem {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
            let a = usize::try_from(addr).map_err(|_| DmaFault)?;
            buf.copy_from_slice(self.0.get(a..a + buf.len()).ok_or(DmaFault)?);
            Ok(())
        }

        fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), DmaFault> {
            let a = usize::try_from(addr).map_err(|_| DmaFault)?;
            self.0
                .get_mut(a..a + data.len())
                .ok_or(DmaFault)?
                .copy_from_slice(data);
            Ok(())
        }
    }

    /// A ring of three 4 KiB pages at 0x8000, 0x3000, 0x5000, its table
    /// at 0xf000 (flag bits set in the entries, as mlx5_ib writes them).
    fn paged(start: u64) -> (Mem, Ring) {
        let mut m = Mem([0; 0x10000]);
        for (k, page) in [0x8000u64, 0x3000, 0x5000].iter().enumerate() {
            m.write(0xf000 + k as u64 * 8, &(page | 3).to_be_bytes())
                .unwrap();
        }
        let pages = RingPages {
            table: 0xf000,
            log_page: 12,
            indirect: false,
            count: 3,
        };
        (m, Ring::new(start, Some(pages)))
    }

    #[test]
    fn accesses_split_at_page_boundaries() {
        let (mut m, r) = paged(0x40);
        let mut data = [0u8; 200];
        for (i, b) in data.iter_mut().enumerate() {
            *b = i as u8;
        }
        // Byte 4000 of the ring is at 0x40 + 4000 = 4064 of the buffer:
        // 32 bytes in page 0, the rest in page 1.
        r.write(&mut m, 4000, &data).unwrap();
        assert_eq!(m.0[0x8000 + 4064..0x9000], data[..32]);
        assert_eq!(m.0[0x3000..0x3000 + 168], data[32..]);
        let mut back = [0u8; 200];
        r.read(&mut m, 4000, &mut back).unwrap();
        assert_eq!(back, data);
    }

    #[test]
    fn past_the_table_faults() {
        let (mut m, r) = paged(0);
        let mut b = [0u8; 8];
        assert!(r.read(&mut m, 3 * 4096 - 8, &mut b).is_ok());
        assert_eq!(r.read(&mut m, 3 * 4096 - 4, &mut b), Err(DmaFault));
        assert_eq!(r.read(&mut m, u64::MAX, &mut b), Err(DmaFault));
    }

    #[test]
    fn linear_rings_are_one_range() {
        let mut m = Mem([0; 0x10000]);
        let r = Ring::new(0x1000, None);
        r.write(&mut m, 4090, &[7u8; 12]).unwrap();
        assert_eq!(m.0[0x1000 + 4090..0x1000 + 4102], [7u8; 12]);
    }
}
