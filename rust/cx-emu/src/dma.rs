// SPDX-License-Identifier: GPL-2.0

//! Guest memory as the device reaches it: the ranges QEMU maps with
//! DMA_MAP, each an `mmap` of the memory file it sends along (guest RAM
//! is a `memory-backend-memfd,share=on`, so device and guest share the
//! pages).
//!
//! DMA addresses are guest physical addresses (the machine has no vIOMMU).
//! An access must lie entirely in mapped ranges (adjacent ranges may be
//! crossed) that allow it; anything else is a [`Fault`] and nothing of a
//! refused write lands. Ranges QEMU maps without a descriptor (ROM and
//! other memory it cannot share) are known but unreachable.
//!
//! # Concurrency
//!
//! The guest's vCPUs run in QEMU while the device reads and writes the
//! same pages, as with a real device. Accesses copy through raw pointers
//! and never form Rust references to the shared pages; a release fence
//! before each write and an acquire fence after each read keep the
//! device's accesses in program order, which the model relies on (a CQE's
//! body before its owner byte).

use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};

use crate::vfio_user::wire::vfio;

/// An access outside what the guest mapped for the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fault {
    /// First byte not reachable.
    pub(crate) addr: u64,
    /// Why.
    pub(crate) why: &'static str,
}

/// Why a DMA_MAP or DMA_UNMAP was refused (an `errno` for the reply).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MapError {
    /// Empty, wrapping, or splitting an existing range (`EINVAL`).
    Invalid,
    /// Overlaps a mapped range (`EEXIST`).
    Overlap,
    /// `mmap` failed with this `errno`.
    Mmap(i32),
}

impl MapError {
    /// The `errno` to report.
    pub(crate) fn errno(self) -> i32 {
        match self {
            MapError::Invalid => libc::EINVAL,
            MapError::Overlap => libc::EEXIST,
            MapError::Mmap(e) => e,
        }
    }
}

/// One `mmap` of a memory file, unmapped on drop.
///
/// # Invariants
///
/// `ptr` is the start of a live shared mapping of `len` bytes made by
/// [`Mmap::new`], owned by this value alone.
#[derive(Debug)]
struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

impl Mmap {
    fn new(fd: &OwnedFd, offset: u64, len: usize, prot: libc::c_int) -> Result<Mmap, MapError> {
        let off = libc::off_t::try_from(offset).map_err(|_| MapError::Invalid)?;
        // SAFETY: a new shared mapping chosen by the kernel; no existing
        // memory is affected. The descriptor is open for the call.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                off,
            )
        };
        if p == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            return Err(MapError::Mmap(e.raw_os_error().unwrap_or(libc::EINVAL)));
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or(MapError::Mmap(libc::EINVAL))?;
        // INVARIANT: `ptr` is the mapping just made, `len` bytes long.
        Ok(Mmap { ptr, len })
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: by the type invariant the mapping is live and owned here;
        // no reference into it exists (accesses copy through pointers).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// One DMA_MAP'ed range.
#[derive(Debug)]
struct Range {
    iova: u64,
    size: u64,
    readable: bool,
    writable: bool,
    /// `None`: QEMU gave no descriptor, the device cannot reach it.
    mem: Option<Mmap>,
}

impl Range {
    fn end(&self) -> u64 {
        self.iova + self.size
    }
}

/// The guest memory the device may reach.
#[derive(Debug, Default)]
pub(crate) struct GuestMemory {
    /// Sorted by address, never overlapping.
    ranges: Vec<Range>,
}

impl GuestMemory {
    /// Maps `size` bytes at DMA address `iova`, backed by `fd` at
    /// `offset` (or unreachable without one). `flags` are DMA_MAP's
    /// read/write bits.
    ///
    /// # Errors
    ///
    /// [`MapError`]; nothing is mapped then.
    pub(crate) fn map(
        &mut self,
        iova: u64,
        size: u64,
        offset: u64,
        flags: u32,
        fd: Option<&OwnedFd>,
    ) -> Result<(), MapError> {
        let end = iova.checked_add(size).ok_or(MapError::Invalid)?;
        if size == 0 {
            return Err(MapError::Invalid);
        }
        if self.ranges.iter().any(|r| iova < r.end() && r.iova < end) {
            return Err(MapError::Overlap);
        }
        let readable = flags & vfio::DMA_READ != 0;
        let writable = flags & vfio::DMA_WRITE != 0;
        let mem = match fd {
            None => None,
            Some(fd) => {
                let len = usize::try_from(size).map_err(|_| MapError::Invalid)?;
                let mut prot = 0;
                if readable {
                    prot |= libc::PROT_READ;
                }
                if writable {
                    prot |= libc::PROT_WRITE;
                }
                Some(Mmap::new(fd, offset, len, prot)?)
            }
        };
        let at = self.ranges.partition_point(|r| r.iova < iova);
        self.ranges.insert(
            at,
            Range {
                iova,
                size,
                readable,
                writable,
                mem,
            },
        );
        Ok(())
    }

    /// Unmaps every range inside `[iova, iova + size)` (all of them if
    /// `all`). Returns how many went.
    ///
    /// # Errors
    ///
    /// [`MapError::Invalid`] if a range straddles the bounds; nothing is
    /// unmapped then.
    pub(crate) fn unmap(&mut self, iova: u64, size: u64, all: bool) -> Result<usize, MapError> {
        if all {
            let n = self.ranges.len();
            self.ranges.clear();
            return Ok(n);
        }
        let end = iova.checked_add(size).ok_or(MapError::Invalid)?;
        if self
            .ranges
            .iter()
            .any(|r| r.iova < end && iova < r.end() && (r.iova < iova || r.end() > end))
        {
            return Err(MapError::Invalid);
        }
        let before = self.ranges.len();
        self.ranges.retain(|r| r.iova >= end || r.end() <= iova);
        Ok(before - self.ranges.len())
    }

    /// How many ranges are mapped and how many bytes the device can reach.
    pub(crate) fn extent(&self) -> (usize, u64) {
        let bytes = self
            .ranges
            .iter()
            .filter(|r| r.mem.is_some())
            .map(|r| r.size)
            .sum();
        (self.ranges.len(), bytes)
    }

    /// Walks `[addr, addr + len)` through the ranges, checking each piece
    /// with `allowed`, and calls `each(pointer, piece offset, piece len)`
    /// for every piece only once the whole access is known to be good.
    fn walk(
        &self,
        addr: u64,
        len: usize,
        allowed: fn(&Range) -> bool,
        mut each: impl FnMut(*mut u8, usize, usize),
    ) -> Result<(), Fault> {
        let end = addr
            .checked_add(len as u64)
            .ok_or(Fault { addr, why: "wraps" })?;
        for pass in 0..2 {
            let mut at = addr;
            let mut done = 0usize;
            let mut i = self.ranges.partition_point(|r| r.end() <= at);
            while at < end {
                let r = match self.ranges.get(i) {
                    Some(r) if r.iova <= at => r,
                    _ => {
                        return Err(Fault {
                            addr: at,
                            why: "not mapped by the guest",
                        })
                    }
                };
                let Some(mem) = r.mem.as_ref() else {
                    return Err(Fault {
                        addr: at,
                        why: "mapped without memory (ROM)",
                    });
                };
                if !allowed(r) {
                    return Err(Fault {
                        addr: at,
                        why: "mapped without this access",
                    });
                }
                let n = (end.min(r.end()) - at) as usize;
                if pass == 1 {
                    let off = (at - r.iova) as usize;
                    // `off + n <= mem.len`: the piece lies in the range.
                    each(mem.ptr.as_ptr().wrapping_add(off), done, n);
                }
                at += n as u64;
                done += n;
                i += 1;
            }
        }
        Ok(())
    }

    /// Fills `buf` from DMA address `addr`.
    ///
    /// # Errors
    ///
    /// [`Fault`] at the first byte not readable; `buf` is then unchanged.
    pub(crate) fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), Fault> {
        let dst = buf.as_mut_ptr();
        self.walk(
            addr,
            buf.len(),
            |r| r.readable,
            |src, at, n| {
                // SAFETY: `walk` hands out `n` bytes inside a live mapping
                // (type invariant of `Mmap`) and `at + n <= buf.len()`;
                // the guest's pages and `buf` never overlap.
                unsafe { std::ptr::copy_nonoverlapping(src, dst.add(at), n) }
            },
        )?;
        fence(Ordering::Acquire);
        Ok(())
    }

    /// Stores `data` at DMA address `addr`.
    ///
    /// # Errors
    ///
    /// [`Fault`] at the first byte not writable; nothing is written then.
    pub(crate) fn write(&self, addr: u64, data: &[u8]) -> Result<(), Fault> {
        fence(Ordering::Release);
        let src = data.as_ptr();
        self.walk(
            addr,
            data.len(),
            |r| r.writable,
            |dst, at, n| {
                // SAFETY: as in `read`, the other way round; the mapping
                // is writable (PROT_WRITE since the range allows writes).
                unsafe { std::ptr::copy_nonoverlapping(src.add(at), dst, n) }
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd;

    const RW: u32 = vfio::DMA_READ | vfio::DMA_WRITE;

    /// A memory file of `len` bytes, as QEMU's memfd backend.
    fn memfd(len: u64) -> OwnedFd {
        // SAFETY: the name is a NUL-terminated literal.
        let fd = unsafe { libc::memfd_create(c"cx-emu-test".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: a new descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: plain syscall on a descriptor we own.
        let r = unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) };
        assert_eq!(r, 0);
        fd
    }

    /// Guest RAM as QEMU maps it: low RAM, a ROM hole without memory, and
    /// RAM above it at its own file offset.
    fn guest() -> GuestMemory {
        let fd = memfd(0x40000);
        let mut m = GuestMemory::default();
        m.map(0, 0x10000, 0, RW, Some(&fd)).unwrap();
        m.map(0x10000, 0x10000, 0, vfio::DMA_READ, None).unwrap();
        m.map(0x20000, 0x20000, 0x20000, RW, Some(&fd)).unwrap();
        m
    }

    #[test]
    fn reads_back_what_was_written() {
        let m = guest();
        m.write(0x2_1000, b"CX5-DMA!").unwrap();
        let mut b = [0u8; 8];
        m.read(0x2_1000, &mut b).unwrap();
        assert_eq!(&b, b"CX5-DMA!");
    }

    #[test]
    fn accesses_outside_ram_fault_and_change_nothing() {
        let m = guest();
        let mut b = [0u8; 16];
        assert_eq!(
            m.read(0x4_0000, &mut b).unwrap_err().why,
            "not mapped by the guest"
        );
        assert_eq!(
            m.read(0x1_0000, &mut b).unwrap_err().why,
            "mapped without memory (ROM)"
        );
        // Ending past RAM: refused as a whole, the mapped part untouched.
        assert_eq!(m.write(0x3_fff8, &[0xaa; 16]).unwrap_err().addr, 0x4_0000);
        m.read(0x3_fff0, &mut b).unwrap();
        assert_eq!(b, [0; 16]);
        assert!(m.read(u64::MAX - 3, &mut b).is_err());
    }

    #[test]
    fn adjacent_ranges_are_crossed() {
        let fd = memfd(0x2000);
        let mut m = GuestMemory::default();
        m.map(0x1000, 0x1000, 0x1000, RW, Some(&fd)).unwrap();
        m.map(0, 0x1000, 0, RW, Some(&fd)).unwrap();
        m.write(0xffc, &[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
        let mut b = [0u8; 8];
        m.read(0xffc, &mut b).unwrap();
        assert_eq!(b, [1, 2, 3, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn read_only_ranges_refuse_writes() {
        let fd = memfd(0x1000);
        let mut m = GuestMemory::default();
        m.map(0, 0x1000, 0, vfio::DMA_READ, Some(&fd)).unwrap();
        assert_eq!(
            m.write(0, &[1]).unwrap_err().why,
            "mapped without this access"
        );
        assert!(m.read(0, &mut [0u8; 4]).is_ok());
    }

    #[test]
    fn map_and_unmap_follow_vfio_rules() {
        let mut m = guest();
        assert_eq!(m.map(0x8000, 0x1000, 0, RW, None), Err(MapError::Overlap));
        assert_eq!(m.map(0x5_0000, 0, 0, RW, None), Err(MapError::Invalid));
        // Splitting a range is refused; whole ranges go.
        assert_eq!(m.unmap(0x8000, 0x1000, false), Err(MapError::Invalid));
        assert_eq!(m.unmap(0x10000, 0x30000, false), Ok(2));
        assert_eq!(m.extent(), (1, 0x10000));
        assert_eq!(m.unmap(0, 0, true), Ok(1));
        assert!(m.read(0, &mut [0u8; 1]).is_err());
    }
}
