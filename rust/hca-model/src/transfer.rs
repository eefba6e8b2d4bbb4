// SPDX-License-Identifier: GPL-2.0

//! Moving message data: lists of checked buffer pieces and the copy loop
//! between them.
//!
//! Keys are checked before any byte moves ([`super::mr::resolve`]: key,
//! PD, bounds and rights, one check per data segment), and each data
//! segment becomes one piece: a DMA range of a linear MR, a range of
//! positions in a page-list MR's translation, or inline bytes of the WQE.
//! The copy translates a page-list piece page by page as it reaches it,
//! reading the MR's table through the same memory as the data (one entry
//! read per page and pass, one more per 512 pages of a two-level table).
//! So one segment may name a page-list MR of any size, over pages in any
//! order, and a list is still one entry per segment ([`MAX_PIECES`]): the
//! engine's scratch space is the same whatever the MRs are.
//!
//! # Faults and partial writes
//!
//! The copy moves the message one packet at a time ([`PACKET`] bytes, the
//! largest IB MTU, counted from the first byte of the message): it reads
//! the whole packet from the source, then writes it to the destination.
//!
//! - A source it cannot read (a DMA fault, or a translation entry that
//!   cannot be read) stops the copy before any byte of that packet is
//!   written: the destination holds the packets before it, which is what
//!   a real HCA, at any path MTU (each divides 4096), could have delivered
//!   before the packet it failed to gather.
//! - A destination it cannot write (the same faults on that side) stops
//!   the copy at the failing page or range: the destination holds the
//!   message up to there, as an HCA writing an arriving packet in order
//!   leaves it.
//!
//! Nothing is written outside the destination's checked range, and nothing
//! past the point of the fault. The WQE then fails as a DMA fault on that
//! side fails (the callers' business: requester LOCAL_PROT for its own
//! memory, the responder's errors for the responder's). The IB spec leaves
//! the destination buffer undefined after an error completion, so the
//! partial message is nothing a consumer may rely on; a datagram (at most
//! one packet) whose source faults writes nothing at all.

use super::mem::{DmaFault, DmaMemory};
use super::mr::Table;

/// Most pieces one side of a transfer has: one per data segment. A send
/// WQE (at most 1008 bytes: its DS count is 6 bits) holds at most 62
/// segments after its control segment, a receive WQE of the largest
/// stride (1024 bytes) 64.
pub(super) const MAX_PIECES: usize = 64;

/// Bytes gathered before any is scattered: the largest IB MTU (see the
/// module documentation).
pub(super) const PACKET: usize = 4096;

/// One contiguous piece of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Piece {
    /// `len` bytes of DMA memory at `addr` (already checked against a
    /// linear MR).
    Dma { addr: u64, len: u64 },
    /// `len` bytes from position `pos` of a page-list MR's translation
    /// (bytes from the start of the table's page 0; already checked
    /// against the MR), translated as the copy reaches each page.
    Paged { table: Table, pos: u64, len: u64 },
    /// `len` bytes at offset `off` of the send WQE (inline data).
    Inline { off: usize, len: usize },
}

impl Piece {
    fn len(&self) -> u64 {
        match *self {
            Piece::Dma { len, .. } | Piece::Paged { len, .. } => len,
            Piece::Inline { len, .. } => len as u64,
        }
    }
}

/// An ordered list of pieces and their total length.
#[derive(Clone, Copy, Debug)]
pub(super) struct Pieces {
    n: usize,
    items: [Piece; MAX_PIECES],
    total: u64,
}

impl Pieces {
    /// No pieces.
    pub(super) const EMPTY: Pieces = Pieces {
        n: 0,
        items: [Piece::Dma { addr: 0, len: 0 }; MAX_PIECES],
        total: 0,
    };

    /// Empties the list (without touching its storage).
    pub(super) fn clear(&mut self) {
        self.n = 0;
        self.total = 0;
    }

    /// Appends a piece. Returns `false` if the list is full or the total
    /// would overflow.
    #[inline]
    pub(super) fn push(&mut self, piece: Piece) -> bool {
        let Some(total) = self.total.checked_add(piece.len()) else {
            return false;
        };
        let Some(slot) = self.items.get_mut(self.n) else {
            return false;
        };
        *slot = piece;
        self.n += 1;
        self.total = total;
        true
    }

    /// Total bytes.
    pub(super) fn total(&self) -> u64 {
        self.total
    }

    /// The DMA address of the first piece, if it is a DMA piece (an
    /// atomic's word, translated when it was resolved).
    pub(super) fn first_addr(&self) -> Option<u64> {
        match self.get(0)? {
            Piece::Dma { addr, .. } => Some(*addr),
            Piece::Paged { .. } | Piece::Inline { .. } => None,
        }
    }

    /// The pieces.
    fn as_slice(&self) -> &[Piece] {
        self.items.get(..self.n).unwrap_or(&[])
    }

    fn get(&self, i: usize) -> Option<&Piece> {
        self.items.get(..self.n)?.get(i)
    }
}

/// Which side of a copy could not be accessed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CopyFault {
    /// Reading the source failed (or it ended early).
    Source,
    /// Writing the destination failed (or it ended early).
    Destination,
}

/// Where the next bytes of a list are.
#[derive(Clone, Copy, Debug)]
enum Span {
    /// At this DMA address.
    Dma(u64),
    /// At this offset of the WQE's inline bytes.
    Inline(usize),
}

/// A position in a [`Pieces`] list, with the translation of the page it
/// is in.
struct Cursor<'a> {
    pieces: &'a Pieces,
    index: usize,
    offset: u64,
    /// The current piece's page translated last: (page index, DMA address).
    page: Option<(u64, u64)>,
    /// The directory entry read last (two-level tables, see
    /// [`Table::page`]).
    leaf: Option<(u64, u64)>,
}

impl Cursor<'_> {
    fn start(pieces: &Pieces) -> Cursor<'_> {
        Cursor {
            pieces,
            index: 0,
            offset: 0,
            page: None,
            leaf: None,
        }
    }

    /// The current piece and the bytes left in it, skipping used-up and
    /// empty pieces.
    fn current(&mut self) -> Option<(Piece, u64)> {
        loop {
            let piece = *self.pieces.get(self.index)?;
            let left = piece.len().saturating_sub(self.offset);
            if left != 0 {
                return Some((piece, left));
            }
            self.index += 1;
            self.offset = 0;
            // The next piece may name another table.
            self.page = None;
            self.leaf = None;
        }
    }

    /// Where the next bytes are and how many follow there contiguously (at
    /// least one), or `None` at the end of the list. A page-list piece's
    /// page is translated when the cursor enters it.
    fn span<M: DmaMemory + ?Sized>(
        &mut self,
        mem: &mut M,
    ) -> Result<Option<(Span, u64)>, DmaFault> {
        let Some((piece, left)) = self.current() else {
            return Ok(None);
        };
        let span = match piece {
            Piece::Dma { addr, .. } => (Span::Dma(addr.wrapping_add(self.offset)), left),
            Piece::Inline { off, .. } => {
                let at = usize::try_from(self.offset)
                    .ok()
                    .and_then(|o| off.checked_add(o))
                    .ok_or(DmaFault)?;
                (Span::Inline(at), left)
            }
            Piece::Paged { table, pos, .. } => {
                let at = pos.checked_add(self.offset).ok_or(DmaFault)?;
                let page = table.page_size();
                let index = at >> (table.log_page & 63);
                let base = match self.page {
                    Some((i, base)) if i == index => base,
                    _ => {
                        let base = table.page(mem, index, &mut self.leaf)?;
                        self.page = Some((index, base));
                        base
                    }
                };
                let within = at & (page - 1);
                let addr = base.checked_add(within).ok_or(DmaFault)?;
                (Span::Dma(addr), left.min(page - within))
            }
        };
        Ok(Some(span))
    }

    fn advance(&mut self, n: u64) {
        self.offset = self.offset.saturating_add(n);
    }

    /// Moves `n` bytes on, across pieces, without translating anything.
    /// Returns `false` if the list ends first. Each round either finishes
    /// or uses up a piece, so the loop is bounded by the number of pieces.
    fn skip(&mut self, mut n: u64) -> bool {
        while n != 0 {
            let Some((_, left)) = self.current() else {
                return false;
            };
            let step = n.min(left);
            self.advance(step);
            n -= step;
        }
        true
    }

    /// Fills `out` from the list (whose inline pieces index `inline`) and
    /// moves on. Fails if a range or translation entry cannot be read or
    /// the list ends first. Each round moves at least one byte.
    fn gather<M: DmaMemory + ?Sized>(
        &mut self,
        mem: &mut M,
        inline: &[u8],
        mut out: &mut [u8],
    ) -> Result<(), DmaFault> {
        while !out.is_empty() {
            let (span, avail) = self.span(mem)?.ok_or(DmaFault)?;
            let n = usize::try_from(avail).map_or(out.len(), |a| a.min(out.len()));
            let (head, tail) = core::mem::take(&mut out).split_at_mut(n);
            match span {
                Span::Dma(addr) => mem.read(addr, head)?,
                Span::Inline(off) => {
                    let bytes = off
                        .checked_add(n)
                        .and_then(|end| inline.get(off..end))
                        .ok_or(DmaFault)?;
                    head.copy_from_slice(bytes);
                }
            }
            self.advance(n as u64);
            out = tail;
        }
        Ok(())
    }

    /// Writes `data` to the list and moves on, range by range in order.
    /// Fails at the first range or translation entry that cannot be
    /// accessed (the ranges before it are written), at an inline piece, or
    /// if the list ends first.
    fn scatter<M: DmaMemory + ?Sized>(
        &mut self,
        mem: &mut M,
        mut data: &[u8],
    ) -> Result<(), DmaFault> {
        while !data.is_empty() {
            let (span, avail) = self.span(mem)?.ok_or(DmaFault)?;
            let Span::Dma(addr) = span else {
                return Err(DmaFault);
            };
            let n = usize::try_from(avail).map_or(data.len(), |a| a.min(data.len()));
            let (head, tail) = data.split_at(n);
            mem.write(addr, head)?;
            self.advance(n as u64);
            data = tail;
        }
        Ok(())
    }
}

/// Copies `len` bytes from `src` (whose inline pieces index `inline`) to
/// the DMA and page-list pieces of `dst`, a packet at a time through
/// `packet` (see the module documentation for what a fault leaves
/// behind). Both lists must hold at least `len` bytes; the caller has
/// checked that.
pub(super) fn copy<M: DmaMemory + ?Sized>(
    mem: &mut M,
    src: &Pieces,
    inline: &[u8],
    dst: &Pieces,
    len: u64,
    packet: &mut [u8; PACKET],
) -> Result<(), CopyFault> {
    copy_at(mem, src, inline, dst, 0, len, packet)
}

/// Writes `bytes` to `dst`, from byte `offset` of the list on (a UD
/// receive's network header, in front of the payload).
pub(super) fn write_at<M: DmaMemory + ?Sized>(
    mem: &mut M,
    dst: &Pieces,
    offset: u64,
    bytes: &[u8],
) -> Result<(), CopyFault> {
    let mut d = Cursor::start(dst);
    if !d.skip(offset) {
        return Err(CopyFault::Destination);
    }
    d.scatter(mem, bytes).map_err(|_| CopyFault::Destination)
}

/// As [`copy`], writing the data to `dst` from byte `dst_offset` of the
/// list on; `dst` must hold `dst_offset + len` bytes.
pub(super) fn copy_at<M: DmaMemory + ?Sized>(
    mem: &mut M,
    src: &Pieces,
    inline: &[u8],
    dst: &Pieces,
    dst_offset: u64,
    len: u64,
    packet: &mut [u8; PACKET],
) -> Result<(), CopyFault> {
    if let Some(r) = copy_direct(mem, src, inline, dst, dst_offset, len, packet) {
        return r;
    }
    let mut s = Cursor::start(src);
    let mut d = Cursor::start(dst);
    if !d.skip(dst_offset) {
        return Err(CopyFault::Destination);
    }
    let mut left = len;
    while left != 0 {
        let n = usize::try_from(left).map_or(PACKET, |l| l.min(PACKET));
        let (bytes, _) = packet.split_at_mut(n);
        s.gather(mem, inline, bytes)
            .map_err(|_| CopyFault::Source)?;
        d.scatter(mem, bytes).map_err(|_| CopyFault::Destination)?;
        left -= n as u64;
    }
    Ok(())
}

/// [`copy_at`] for the common message: one packet or less, from one DMA
/// or inline piece to the start of one DMA piece, each long enough. One
/// read and one write, with the faults [`copy_at`] reports for them;
/// `None` for any other message, which takes the general path.
fn copy_direct<M: DmaMemory + ?Sized>(
    mem: &mut M,
    src: &Pieces,
    inline: &[u8],
    dst: &Pieces,
    dst_offset: u64,
    len: u64,
    packet: &mut [u8; PACKET],
) -> Option<Result<(), CopyFault>> {
    let n = usize::try_from(len)
        .ok()
        .filter(|&n| n != 0 && n <= PACKET)?;
    let &[from] = src.as_slice() else {
        return None;
    };
    let &[Piece::Dma {
        addr: to,
        len: room,
    }] = dst.as_slice()
    else {
        return None;
    };
    if dst_offset != 0 || room < len || from.len() < len {
        return None;
    }
    let (bytes, _) = packet.split_at_mut(n);
    let read = match from {
        Piece::Dma { addr, .. } => mem.read(addr, bytes),
        Piece::Inline { off, .. } => off
            .checked_add(n)
            .and_then(|end| inline.get(off..end))
            .map(|b| bytes.copy_from_slice(b))
            .ok_or(DmaFault),
        Piece::Paged { .. } => return None,
    };
    Some(
        read.map_err(|_| CopyFault::Source)
            .and_then(|()| mem.write(to, bytes).map_err(|_| CopyFault::Destination)),
    )
}

/// Working storage of the engine, kept in the fabric so that executing a
/// WQE neither allocates nor zeroes kilobytes of stack.
#[derive(Debug)]
pub struct Scratch {
    /// The send WQE being executed, copied out of the SQ.
    pub(super) wqe: [u8; super::prm::wqe::MAX_WQE_SIZE],
    /// The receive WQE being consumed.
    pub(super) recv: [u8; super::hca::MAX_RQ_STRIDE as usize],
    /// The requester's gather or scatter list.
    pub(super) local: Pieces,
    /// The responder's side of the transfer.
    pub(super) remote: Pieces,
    /// One packet of message data between its gather and its scatter.
    pub(super) packet: [u8; PACKET],
}

impl Scratch {
    /// Empty scratch storage, as a constant: writing it into a fresh heap
    /// allocation copies it from read-only data, not through the stack.
    pub const EMPTY: Scratch = Scratch {
        wqe: [0; super::prm::wqe::MAX_WQE_SIZE],
        recv: [0; super::hca::MAX_RQ_STRIDE as usize],
        local: Pieces::EMPTY,
        remote: Pieces::EMPTY,
        packet: [0; PACKET],
    };

    /// Empty scratch storage.
    pub const fn new() -> Self {
        Self::EMPTY
    }
}

impl Default for Scratch {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use std::{vec, vec::Vec};

    /// Memory at address 0 that refuses the ranges in `refused` and logs
    /// every access.
    struct Mem {
        bytes: Vec<u8>,
        refused: Vec<(u64, u64)>,
        reads: Vec<(u64, usize)>,
        writes: Vec<(u64, usize)>,
    }

    impl Mem {
        fn new(len: usize) -> Self {
            Mem {
                bytes: vec![0; len],
                refused: Vec::new(),
                reads: Vec::new(),
                writes: Vec::new(),
            }
        }

        fn range(&self, addr: u64, len: usize) -> Result<core::ops::Range<usize>, DmaFault> {
            let end = addr + len as u64;
            if self.refused.iter().any(|&(s, l)| addr < s + l && s < end) {
                return Err(DmaFault);
            }
            let a = usize::try_from(addr).map_err(|_| DmaFault)?;
            let r = a..a + len;
            self.bytes.get(r.clone()).ok_or(DmaFault)?;
            Ok(r)
        }

        /// Big-endian 64-bit `value` at `at` (a translation entry).
        fn put(&mut self, at: u64, value: u64) {
            let a = at as usize;
            self.bytes[a..a + 8].copy_from_slice(&value.to_be_bytes());
        }

        fn at(&self, addr: u64, len: usize) -> &[u8] {
            &self.bytes[addr as usize..addr as usize + len]
        }
    }

    impl DmaMemory for Mem {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
            let r = self.range(addr, buf.len())?;
            self.reads.push((addr, buf.len()));
            buf.copy_from_slice(&self.bytes[r]);
            Ok(())
        }
        fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), DmaFault> {
            let r = self.range(addr, data.len())?;
            self.writes.push((addr, data.len()));
            self.bytes[r].copy_from_slice(data);
            Ok(())
        }
    }

    fn list(pieces: &[Piece]) -> Pieces {
        let mut l = Pieces::EMPTY;
        for p in pieces {
            assert!(l.push(*p));
        }
        l
    }

    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
    }

    #[test]
    fn writes_and_copies_at_an_offset_across_pieces() {
        let mut m = Mem::new(64);
        let mut packet = [0u8; PACKET];
        // The destination: 3 bytes at 40, 0 at 50, 10 at 52.
        let dst = list(&[
            Piece::Dma { addr: 40, len: 3 },
            Piece::Dma { addr: 50, len: 0 },
            Piece::Dma { addr: 52, len: 10 },
        ]);
        assert_eq!(write_at(&mut m, &dst, 2, &[1, 2, 3, 4]), Ok(()));
        assert_eq!(m.at(40, 5), [0, 0, 1, 0, 0]);
        assert_eq!(m.at(52, 4), [2, 3, 4, 0]);
        // Inline source bytes 7, 8, 9 copied after the first 6 bytes.
        let src = list(&[Piece::Inline { off: 1, len: 3 }]);
        let inline = [0, 7, 8, 9];
        assert_eq!(
            copy_at(&mut m, &src, &inline, &dst, 6, 3, &mut packet),
            Ok(())
        );
        assert_eq!(m.at(52, 7), [2, 3, 4, 7, 8, 9, 0]);
        // Past the end of the list.
        assert_eq!(
            write_at(&mut m, &dst, 13, &[1]),
            Err(CopyFault::Destination)
        );
        assert_eq!(
            copy_at(&mut m, &src, &inline, &dst, 14, 1, &mut packet),
            Err(CopyFault::Destination)
        );
        assert_eq!(write_at(&mut m, &dst, 13, &[]), Ok(()));
        // Inline data is never a destination.
        assert_eq!(write_at(&mut m, &src, 0, &[1]), Err(CopyFault::Destination));
    }

    /// A table of 16-byte pages at 0x100 (tiny pages keep the memory
    /// small; the translation works for any power of two).
    fn tiny_table(m: &mut Mem, pages: &[u64]) -> Table {
        for (i, p) in pages.iter().enumerate() {
            // The low bits (mlx5's MTT_EN_RD / MTT_EN_WR) are ignored.
            m.put(0x100 + 8 * i as u64, p | 3);
        }
        Table {
            mtt: 0x100,
            log_page: 4,
            indirect: false,
        }
    }

    /// A page-list piece is translated as the copy reaches each page, each
    /// entry read once, and data lands in list order whatever the
    /// addresses.
    #[test]
    fn page_list_pieces_translate_page_by_page() {
        let mut m = Mem::new(0x1000);
        let mut packet = [0u8; PACKET];
        let table = tiny_table(&mut m, &[0x400, 0x200, 0x600, 0x300]);
        // 50 bytes from byte 4 of page 0: pages 0 to 3.
        let paged = list(&[Piece::Paged {
            table,
            pos: 4,
            len: 50,
        }]);
        let data = pattern(50, 0x5a);
        m.bytes[0x800..0x800 + 50].copy_from_slice(&data);
        let src = list(&[Piece::Dma {
            addr: 0x800,
            len: 50,
        }]);
        assert_eq!(copy(&mut m, &src, &[], &paged, 50, &mut packet), Ok(()));
        assert_eq!(m.at(0x404, 12), &data[..12]);
        assert_eq!(m.at(0x200, 16), &data[12..28]);
        assert_eq!(m.at(0x600, 16), &data[28..44]);
        assert_eq!(m.at(0x300, 6), &data[44..]);
        let entry_reads = m.reads.iter().filter(|r| (0x100..0x120).contains(&r.0));
        assert_eq!(entry_reads.count(), 4, "one entry read per page");
        assert_eq!(
            m.writes,
            vec![(0x404, 12), (0x200, 16), (0x600, 16), (0x300, 6)]
        );
        // And back, from byte 20 of the piece, as a source.
        let back = list(&[Piece::Dma {
            addr: 0xa00,
            len: 30,
        }]);
        let from = list(&[Piece::Paged {
            table,
            pos: 24,
            len: 30,
        }]);
        assert_eq!(copy(&mut m, &from, &[], &back, 30, &mut packet), Ok(()));
        assert_eq!(m.at(0xa00, 30), &data[20..]);
    }

    /// Consecutive pieces of different tables, one of them two-level:
    /// nothing translated for one piece is used for the next.
    #[test]
    fn each_piece_translates_through_its_own_table() {
        let mut m = Mem::new(0x1000);
        let mut packet = [0u8; PACKET];
        let first = tiny_table(&mut m, &[0x400, 0x500]);
        // A directory at 0x180 whose entry 0 names a table page at 0x1c0.
        m.put(0x180, 0x1c0);
        m.put(0x1c0, 0x600);
        m.put(0x1c8, 0x700);
        let second = Table {
            mtt: 0x180,
            log_page: 4,
            indirect: true,
        };
        // Both pieces end and start in their page 1.
        let dst = list(&[
            Piece::Paged {
                table: first,
                pos: 8,
                len: 16,
            },
            Piece::Paged {
                table: second,
                pos: 20,
                len: 8,
            },
        ]);
        let data = pattern(24, 1);
        let src = list(&[Piece::Inline { off: 0, len: 24 }]);
        assert_eq!(copy(&mut m, &src, &data, &dst, 24, &mut packet), Ok(()));
        assert_eq!(m.at(0x408, 8), &data[..8]);
        assert_eq!(m.at(0x500, 8), &data[8..16]);
        assert_eq!(m.at(0x704, 8), &data[16..]);
        assert_eq!(m.at(0x508, 8), [0; 8], "not through the first table");
    }

    /// A source that faults (here a translation entry that cannot be read)
    /// stops the copy before any byte of the packet it is in is written,
    /// even the bytes before the fault; earlier packets are written.
    #[test]
    fn a_source_fault_writes_nothing_of_its_packet() {
        let mut m = Mem::new(0x10000);
        let mut packet = [0u8; PACKET];
        // Source: 4 KiB pages at 0x4000, 0x2000 and 0x6000, listed at 0x100;
        // 0x2800 bytes from 0x800 into page 0.
        for (i, p) in [0x4000u64, 0x2000, 0x6000].iter().enumerate() {
            m.put(0x100 + 8 * i as u64, *p);
        }
        let table = Table {
            mtt: 0x100,
            log_page: 12,
            indirect: false,
        };
        let data = pattern(0x3000, 9);
        m.bytes[0x4800..0x5000].copy_from_slice(&data[..0x800]);
        m.bytes[0x2000..0x3000].copy_from_slice(&data[0x800..0x1800]);
        m.bytes[0x6000..0x7000].copy_from_slice(&data[0x1800..0x2800]);
        let src = list(&[Piece::Paged {
            table,
            pos: 0x800,
            len: 0x2800,
        }]);
        let dst = list(&[Piece::Dma {
            addr: 0x8000,
            len: 0x2800,
        }]);
        assert_eq!(copy(&mut m, &src, &[], &dst, 0x2800, &mut packet), Ok(()));
        assert_eq!(m.at(0x8000, 0x2800), &data[..0x2800]);
        // Page 2's entry refused: the fault is at message byte 0x1800, in
        // the second packet (0x1000..0x2000).
        m.bytes[0x8000..0xa800].fill(0);
        m.refused.push((0x110, 8));
        m.writes.clear();
        assert_eq!(
            copy(&mut m, &src, &[], &dst, 0x2800, &mut packet),
            Err(CopyFault::Source)
        );
        assert_eq!(m.at(0x8000, 0x1000), &data[..0x1000]);
        assert!(m.at(0x9000, 0x1800).iter().all(|&b| b == 0));
        assert_eq!(m.writes, vec![(0x8000, 0x1000)]);
        // A datagram-sized message (one packet) writes nothing at all.
        m.writes.clear();
        let short = list(&[Piece::Paged {
            table,
            pos: 0x1800,
            len: 0x1000,
        }]);
        assert_eq!(
            copy(&mut m, &short, &[], &dst, 0x1000, &mut packet),
            Err(CopyFault::Source)
        );
        assert!(m.writes.is_empty());
    }

    /// The one-piece path (`copy_direct`) makes exactly one read and one
    /// write, and reports what the general path reports: the source's
    /// fault before anything is written, the destination's after.
    #[test]
    fn a_one_piece_message_is_one_read_and_one_write() {
        let data = pattern(64, 7);
        let mut packet = [0u8; PACKET];
        let dst = list(&[Piece::Dma {
            addr: 0x2000,
            len: 128,
        }]);

        let mut m = Mem::new(0x4000);
        m.bytes[0x1000..0x1040].copy_from_slice(&data);
        let src = list(&[Piece::Dma {
            addr: 0x1000,
            len: 64,
        }]);
        assert_eq!(copy(&mut m, &src, &[], &dst, 64, &mut packet), Ok(()));
        assert_eq!(m.reads, vec![(0x1000, 64)]);
        assert_eq!(m.writes, vec![(0x2000, 64)]);
        assert_eq!(m.at(0x2000, 64), &data[..]);

        // Inline data: no read at all.
        let mut m = Mem::new(0x4000);
        let inline = [&[0u8; 16][..], &data[..]].concat();
        let src = list(&[Piece::Inline { off: 16, len: 64 }]);
        assert_eq!(copy(&mut m, &src, &inline, &dst, 64, &mut packet), Ok(()));
        assert!(m.reads.is_empty());
        assert_eq!(m.at(0x2000, 64), &data[..]);
        // Inline bytes the WQE does not hold fail the source.
        assert_eq!(
            copy(&mut m, &src, &inline[..40], &dst, 64, &mut packet),
            Err(CopyFault::Source)
        );

        let src = list(&[Piece::Dma {
            addr: 0x1000,
            len: 64,
        }]);
        let mut m = Mem::new(0x4000);
        m.refused = vec![(0x1020, 1)];
        assert_eq!(
            copy(&mut m, &src, &[], &dst, 64, &mut packet),
            Err(CopyFault::Source)
        );
        assert!(m.writes.is_empty());

        let mut m = Mem::new(0x4000);
        m.refused = vec![(0x2030, 1)];
        assert_eq!(
            copy(&mut m, &src, &[], &dst, 64, &mut packet),
            Err(CopyFault::Destination)
        );
        assert_eq!(m.reads, vec![(0x1000, 64)]);

        // A destination piece too short goes the general way, which
        // fails the destination when the list ends.
        let short = list(&[Piece::Dma {
            addr: 0x2000,
            len: 32,
        }]);
        let mut m = Mem::new(0x4000);
        assert_eq!(
            copy(&mut m, &src, &[], &short, 64, &mut packet),
            Err(CopyFault::Destination)
        );
        assert_eq!(m.writes, vec![(0x2000, 32)]);
    }

    /// The engine's scratch space is the same whatever the MRs: one piece
    /// per segment, 32 bytes each, and one packet.
    #[test]
    fn the_scratch_space_is_fixed_and_small() {
        assert_eq!(core::mem::size_of::<Piece>(), 32);
        assert!(core::mem::size_of::<Scratch>() <= 10 * 1024 + 128);
    }

    /// A destination that faults stops the copy at the failing page: what
    /// precedes it is written, nothing after it.
    #[test]
    fn a_destination_fault_stops_at_the_failing_page() {
        let mut m = Mem::new(0x10000);
        let mut packet = [0u8; PACKET];
        for (i, p) in [0x4000u64, 0x2000, 0x6000].iter().enumerate() {
            m.put(0x100 + 8 * i as u64, *p);
        }
        let table = Table {
            mtt: 0x100,
            log_page: 12,
            indirect: false,
        };
        let data = pattern(0x2800, 3);
        m.bytes[0x8000..0xa800].copy_from_slice(&data);
        let src = list(&[Piece::Dma {
            addr: 0x8000,
            len: 0x2800,
        }]);
        let dst = list(&[Piece::Paged {
            table,
            pos: 0x800,
            len: 0x2800,
        }]);
        // The third page itself refuses writes: message byte 0x1800 on.
        m.refused.push((0x6000, 0x1000));
        assert_eq!(
            copy(&mut m, &src, &[], &dst, 0x2800, &mut packet),
            Err(CopyFault::Destination)
        );
        assert_eq!(m.at(0x4800, 0x800), &data[..0x800]);
        assert_eq!(m.at(0x2000, 0x1000), &data[0x800..0x1800]);
        assert_eq!(
            m.writes,
            vec![(0x4800, 0x800), (0x2000, 0x800), (0x2800, 0x800)]
        );
        // Its entry unreadable instead: the same bytes, the same stop.
        m.refused = vec![(0x110, 8)];
        m.writes.clear();
        assert_eq!(
            copy(&mut m, &src, &[], &dst, 0x2800, &mut packet),
            Err(CopyFault::Destination)
        );
        assert_eq!(
            m.writes,
            vec![(0x4800, 0x800), (0x2000, 0x800), (0x2800, 0x800)]
        );
    }
}
