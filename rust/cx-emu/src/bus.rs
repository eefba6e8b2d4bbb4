// SPDX-License-Identifier: GPL-2.0

//! What the model sees of the machine: hca-model's [`Platform`] over the
//! guest's memory, the UAR pages of BAR0 and the MSI-X eventfds.
//!
//! The model reads doorbells and BlueFlame copies from UAR page `i` at the
//! DMA address `uar_base + 4 KiB × i` (`FwConfig::uar_base`). Those pages
//! live here, in the device, filled by the stores the guest makes to
//! BAR0; [`UAR_BASE`] puts them far above any guest physical address, so
//! a DMA address is either a UAR byte or guest memory, never both. Each
//! function of a process has its own UAR window ([`uar_base`]), so that
//! the engine, which runs the queues of every function of the fabric
//! with one platform (`card.rs`), can tell whose UAR page an address is.

use std::fs::File;
use std::io::Write;

use hca_model::mem::{DmaFault, DmaMemory, Interrupt, Platform};
use mlx5_prm::doorbell::UAR_PAGE_SIZE;

use crate::dma::{Fault, GuestMemory};
use crate::log::{error, trace};

/// The DMA address of UAR page 0 of function 0: 2^60, beyond the 52-bit
/// physical addresses x86-64 guests have.
pub(crate) const UAR_BASE: u64 = 1 << 60;
/// log2 of the distance between the UAR windows of two functions (far
/// more than 128 pages of 4 KiB).
const UAR_WINDOW_SHIFT: u32 = 48;

/// The DMA address of UAR page 0 of function `index`: [`UAR_BASE`] for
/// function 0, then a window of 2^48 bytes per function (function 255's
/// still ends below 2^61).
pub(crate) const fn uar_base(index: u16) -> u64 {
    UAR_BASE + ((index as u64) << UAR_WINDOW_SHIFT)
}

/// Faults logged one by one before only the count goes on.
const FAULTS_LOGGED: u64 = 32;

/// The UAR pages as the device holds them.
#[derive(Debug)]
pub(crate) struct UarPages {
    /// The DMA address of page 0.
    base: u64,
    bytes: Vec<u8>,
}

impl UarPages {
    /// `uars` zeroed pages, page 0 at DMA address `base`.
    pub(crate) fn new(base: u64, uars: u32) -> Self {
        UarPages {
            base,
            bytes: vec![0; uars as usize * UAR_PAGE_SIZE],
        }
    }

    /// Keeps a store of `data` at byte `offset` of page `index`. Returns
    /// false if it does not fit the pages.
    pub(crate) fn store(&mut self, index: u32, offset: usize, data: &[u8]) -> bool {
        let at = index as usize * UAR_PAGE_SIZE + offset;
        match self.bytes.get_mut(at..at + data.len()) {
            Some(dst) => {
                dst.copy_from_slice(data);
                true
            }
            None => false,
        }
    }

    /// Zeroes every page (function reset).
    pub(crate) fn clear(&mut self) {
        self.bytes.fill(0);
    }

    /// The bytes at DMA address `addr` if the whole range is UAR bytes.
    pub(crate) fn range(&mut self, addr: u64, len: usize) -> Option<&mut [u8]> {
        let off = usize::try_from(addr.checked_sub(self.base)?).ok()?;
        let end = off.checked_add(len)?;
        self.bytes.get_mut(off..end)
    }
}

/// The MSI-X vectors' eventfds, as SET_IRQS installed them.
#[derive(Debug)]
pub(crate) struct Vectors {
    fds: Vec<Option<File>>,
}

impl Vectors {
    /// `count` vectors, none connected.
    pub(crate) fn new(count: u16) -> Self {
        Vectors {
            fds: (0..count).map(|_| None).collect(),
        }
    }

    /// How many vectors the function has.
    pub(crate) fn count(&self) -> u32 {
        self.fds.len() as u32
    }

    /// Connects (`Some`) or disconnects (`None`) `vector`. Returns false
    /// for a vector the function does not have.
    pub(crate) fn set(&mut self, vector: u32, fd: Option<File>) -> bool {
        match self.fds.get_mut(vector as usize) {
            Some(slot) => {
                *slot = fd;
                true
            }
            None => false,
        }
    }

    /// Disconnects every vector.
    pub(crate) fn clear(&mut self) {
        self.fds.iter_mut().for_each(|f| *f = None);
    }

    /// How many vectors have an eventfd.
    pub(crate) fn connected(&self) -> usize {
        self.fds.iter().filter(|f| f.is_some()).count()
    }

    /// Signals `vector`'s eventfd. Returns false if it has none (the guest
    /// did not enable it) or the write failed.
    pub(crate) fn fire(&mut self, vector: u32) -> bool {
        match self.fds.get_mut(vector as usize) {
            Some(Some(f)) => f.write_all(&1u64.to_ne_bytes()).is_ok(),
            _ => false,
        }
    }
}

/// Counters of what crossed the bus.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct BusStats {
    /// DMA reads and writes refused (outside what the guest mapped).
    pub(crate) dma_faults: u64,
    /// Interrupts delivered to an eventfd.
    pub(crate) interrupts: u64,
    /// Interrupts for a vector without an eventfd.
    pub(crate) lost_interrupts: u64,
}

/// The model's [`Platform`].
#[derive(Debug)]
pub(crate) struct Bus {
    /// Guest memory.
    pub(crate) mem: GuestMemory,
    /// The UAR pages.
    pub(crate) uars: UarPages,
    /// The MSI-X vectors.
    pub(crate) vectors: Vectors,
    /// Counters.
    pub(crate) stats: BusStats,
}

impl Bus {
    /// A bus with `uars` UAR pages from DMA address `uar_base` and
    /// `vectors` MSI-X vectors, no memory.
    pub(crate) fn new(uar_base: u64, uars: u32, vectors: u16) -> Self {
        Bus {
            mem: GuestMemory::default(),
            uars: UarPages::new(uar_base, uars),
            vectors: Vectors::new(vectors),
            stats: BusStats::default(),
        }
    }

    /// Counts and logs a refused DMA access.
    pub(crate) fn fault(&mut self, op: &str, addr: u64, len: usize, f: Fault) -> DmaFault {
        self.stats.dma_faults += 1;
        if self.stats.dma_faults <= FAULTS_LOGGED {
            error!(
                "DMA {op} of {len} bytes at {addr:#x} refused: {:#x} is {}",
                f.addr, f.why
            );
        } else if self.stats.dma_faults == FAULTS_LOGGED + 1 {
            error!("more DMA faults: counting them only");
        }
        DmaFault
    }
}

impl DmaMemory for Bus {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
        if let Some(src) = self.uars.range(addr, buf.len()) {
            buf.copy_from_slice(src);
            return Ok(());
        }
        match self.mem.read(addr, buf) {
            Ok(()) => Ok(()),
            Err(f) => Err(self.fault("read", addr, buf.len(), f)),
        }
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), DmaFault> {
        if let Some(dst) = self.uars.range(addr, data.len()) {
            dst.copy_from_slice(data);
            return Ok(());
        }
        match self.mem.write(addr, data) {
            Ok(()) => Ok(()),
            Err(f) => Err(self.fault("write", addr, data.len(), f)),
        }
    }
}

impl Platform for Bus {
    fn interrupt(&mut self, irq: Interrupt) {
        if self.vectors.fire(u32::from(irq.vector)) {
            self.stats.interrupts += 1;
            trace!("MSI-X vector {} (EQ {})", irq.vector, irq.eqn);
        } else {
            self.stats.lost_interrupts += 1;
            error!(
                "EQ {} fired MSI-X vector {}, which has no eventfd (not enabled by the guest)",
                irq.eqn, irq.vector
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::FromRawFd;

    #[test]
    fn uar_pages_are_reached_at_uar_base() {
        let mut bus = Bus::new(UAR_BASE, 4, 2);
        assert!(bus.uars.store(2, 0x20, &[1, 2, 3, 4, 5, 6, 7, 8]));
        let mut b = [0u8; 8];
        bus.read(UAR_BASE + 2 * 4096 + 0x20, &mut b).unwrap();
        assert_eq!(b, [1, 2, 3, 4, 5, 6, 7, 8]);
        // Past the last page, and storing past it.
        assert!(bus.read(UAR_BASE + 4 * 4096, &mut b).is_err());
        assert!(!bus.uars.store(3, 4092, &[0; 8]));
        assert_eq!(bus.stats.dma_faults, 1);
        // Function 1's window is its own.
        let mut other = Bus::new(uar_base(1), 4, 2);
        assert!(other.uars.store(2, 0x20, &[9; 8]));
        assert!(other.read(UAR_BASE + 2 * 4096 + 0x20, &mut b).is_err());
        other.read(uar_base(1) + 2 * 4096 + 0x20, &mut b).unwrap();
        assert_eq!(b, [9; 8]);
        const { assert!(uar_base(255) + (128 << 12) < 1 << 61) };
    }

    #[test]
    fn guest_addresses_without_memory_fault() {
        let mut bus = Bus::new(UAR_BASE, 4, 2);
        assert_eq!(bus.write(0x1000, &[0; 64]), Err(DmaFault));
        assert_eq!(bus.read(0, &mut [0; 4]), Err(DmaFault));
        assert_eq!(bus.stats.dma_faults, 2);
    }

    #[test]
    fn interrupts_signal_the_vector_eventfd() {
        let mut bus = Bus::new(UAR_BASE, 2, 4);
        // SAFETY: plain syscall.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        assert!(fd >= 0);
        // SAFETY: a new descriptor, owned by this File only.
        let mut f = unsafe { File::from_raw_fd(fd) };
        assert!(bus.vectors.set(3, Some(f.try_clone().unwrap())));
        assert!(!bus.vectors.set(4, None));
        let irq = |vector| Interrupt {
            hca: 0,
            eqn: 1,
            vector,
        };
        bus.interrupt(irq(3));
        bus.interrupt(irq(3));
        bus.interrupt(irq(0));
        let mut b = [0u8; 8];
        f.read_exact(&mut b).unwrap();
        assert_eq!(u64::from_ne_bytes(b), 2);
        assert_eq!((bus.stats.interrupts, bus.stats.lost_interrupts), (2, 1));
    }
}
