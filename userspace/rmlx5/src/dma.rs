// SPDX-License-Identifier: GPL-2.0

//! Memory the HCA shares with the process: queue buffers, doorbell records,
//! the UAR page and registered data buffers.
//!
//! This is the one file of the provider that touches raw pointers. Such
//! memory is written by the device (or, in-process, by the software HCA on
//! another thread) while the process reads it, so it is never exposed as a
//! Rust reference: every access is an atomic byte load or store (plain
//! `mov`s on x86-64, and race-free in the Rust memory model), except the
//! 64-bit doorbell store to the UAR page, which must be one aligned store
//! and is a volatile write (device memory in the kernel backend).

use std::alloc::Layout;
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};

/// Page size of queue and data allocations.
pub(crate) const PAGE_SIZE: usize = 4096;

/// Whatever keeps a region's memory alive (an mmap, a heap page run).
pub(crate) trait Backing: Send + Sync {}

/// A window onto device-shared memory: `len` bytes at `ptr`, kept alive by
/// `_owner`.
///
/// # Invariants
///
/// `ptr..ptr + len` is valid for reads and writes for as long as `_owner`
/// lives, is never referenced by a Rust reference anywhere, and is only
/// accessed through atomics or volatile stores.
pub(crate) struct DmaRegion {
    ptr: NonNull<u8>,
    len: usize,
    _owner: Arc<dyn Backing>,
}

// SAFETY: the region is plain memory kept alive by a `Send + Sync` owner,
// and every access is atomic (or a volatile store serialised by the
// caller's lock), so moving or sharing the handle between threads cannot
// create a data race.
unsafe impl Send for DmaRegion {}
// SAFETY: as above; `&DmaRegion` only offers atomic accesses.
unsafe impl Sync for DmaRegion {}

impl fmt::Debug for DmaRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DmaRegion({:#x}, {})", self.addr(), self.len)
    }
}

impl DmaRegion {
    /// A region over `len` bytes at `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr..ptr + len` must be valid for reads and writes while `owner`
    /// lives, and must not be accessed through Rust references.
    pub(crate) unsafe fn new(ptr: NonNull<u8>, len: usize, owner: Arc<dyn Backing>) -> Self {
        // INVARIANT: guaranteed by the caller.
        DmaRegion {
            ptr,
            len,
            _owner: owner,
        }
    }

    /// The process address of the first byte (also its DMA address in the
    /// in-process backend, and the IOVA of an MR over it).
    pub(crate) fn addr(&self) -> u64 {
        self.ptr.as_ptr() as usize as u64
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn check(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::Invalid("range outside the buffer")),
        }
    }

    fn byte(&self, offset: usize) -> &AtomicU8 {
        debug_assert!(offset < self.len);
        // SAFETY: callers checked `offset < len`, so the pointer is inside
        // the region, which is valid while `self` lives (type invariant);
        // the memory is only ever accessed atomically, so viewing one byte
        // as an `AtomicU8` is sound (`AtomicU8` has the layout of `u8`).
        unsafe { AtomicU8::from_ptr(self.ptr.as_ptr().add(offset)) }
    }

    /// Stores `data` at `offset` (release stores: the device, or another
    /// thread, sees them after anything this thread wrote before).
    pub(crate) fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check(offset, data.len())?;
        for (i, b) in data.iter().enumerate() {
            self.byte(offset + i).store(*b, Ordering::Release);
        }
        Ok(())
    }

    /// Stores `len` zero bytes at `offset`.
    pub(crate) fn zero(&self, offset: usize, len: usize) -> Result<()> {
        self.check(offset, len)?;
        for i in 0..len {
            self.byte(offset + i).store(0, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Fills `out` from `offset` (acquire loads).
    pub(crate) fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check(offset, out.len())?;
        for (i, b) in out.iter_mut().enumerate() {
            *b = self.byte(offset + i).load(Ordering::Acquire);
        }
        Ok(())
    }

    /// One byte at `offset` (an acquire load), e.g. a CQE's `op_own`.
    pub(crate) fn load_u8(&self, offset: usize) -> Result<u8> {
        self.check(offset, 1)?;
        Ok(self.byte(offset).load(Ordering::Acquire))
    }

    /// Copies `data` into the ring that is the whole region, starting at
    /// `offset` and continuing at 0 past the end (the SQ wrap).
    pub(crate) fn ring_write(&self, offset: usize, data: &[u8]) -> Result<()> {
        if offset >= self.len || data.len() > self.len {
            return Err(Error::Invalid("ring write outside the ring"));
        }
        let first = data.len().min(self.len - offset);
        let (head, tail) = data.split_at(first);
        self.write(offset, head)?;
        self.write(0, tail)
    }

    /// One aligned 64-bit store of `bytes` (already in device byte order)
    /// at `offset`: the UAR doorbell write.
    pub(crate) fn store_doorbell(&self, offset: usize, bytes: [u8; 8]) -> Result<()> {
        self.check(offset, 8)?;
        if !offset.is_multiple_of(8) {
            return Err(Error::Invalid("misaligned doorbell"));
        }
        // SAFETY: `offset + 8 <= len` was checked and the region is valid
        // (type invariant); the base is page aligned and `offset` a multiple
        // of 8, so the `u64` store is aligned. The caller holds the lock of
        // the register (the UAR CQ doorbell or the BlueFlame register), so
        // no other thread stores to these bytes concurrently, and the
        // software HCA reads them only after the kick the same thread
        // makes under that lock.
        unsafe {
            let p = self.ptr.as_ptr().add(offset).cast::<u64>();
            core::ptr::write_volatile(p, u64::from_ne_bytes(bytes));
        }
        Ok(())
    }

    /// A sub-range as a separately owned region.
    pub(crate) fn slice(&self, offset: usize, len: usize) -> Result<DmaRegion> {
        self.check(offset, len)?;
        // SAFETY: the sub-range lies inside this region (checked), which
        // is valid while `_owner` lives; the new region keeps the same
        // owner and follows the same access rules.
        Ok(unsafe {
            DmaRegion::new(
                NonNull::new(self.ptr.as_ptr().add(offset)).ok_or(Error::Invalid("null region"))?,
                len,
                self._owner.clone(),
            )
        })
    }
}

/// Zeroed, page-aligned process memory: the in-process backend's queue
/// buffers, doorbell records and UAR pages, and every backend's MR buffers.
#[derive(Debug)]
pub(crate) struct HeapPages {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the pages are owned exclusively by this value and only accessed
// through `DmaRegion`s (atomics) while it lives.
unsafe impl Send for HeapPages {}
// SAFETY: as above.
unsafe impl Sync for HeapPages {}

impl Backing for HeapPages {}

impl HeapPages {
    /// Allocates at least `len` zeroed bytes (whole pages) and returns the
    /// owner and a region over all of it.
    pub(crate) fn alloc(len: usize) -> Result<(Arc<HeapPages>, DmaRegion)> {
        let size = len
            .max(1)
            .checked_next_multiple_of(PAGE_SIZE)
            .ok_or(Error::Invalid("allocation too large"))?;
        let layout = Layout::from_size_align(size, PAGE_SIZE)
            .map_err(|_| Error::Invalid("allocation too large"))?;
        // SAFETY: `layout` has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or(Error::Os {
            op: "alloc",
            errno: libc::ENOMEM,
        })?;
        let pages = Arc::new(HeapPages { ptr, layout });
        // SAFETY: the allocation is `size` bytes, valid until `pages` is
        // dropped, which the region keeps alive; nothing references it.
        let region = unsafe { DmaRegion::new(ptr, size, pages.clone()) };
        Ok((pages, region))
    }
}

impl Drop for HeapPages {
    fn drop(&mut self) {
        // SAFETY: allocated in `alloc` with this layout, freed only here.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_and_wrap() {
        let (_p, r) = HeapPages::alloc(100).unwrap();
        assert_eq!(r.len(), PAGE_SIZE);
        assert!(r.write(PAGE_SIZE - 1, &[1, 2]).is_err());
        assert!(r.read(usize::MAX, &mut [0]).is_err());
        r.ring_write(PAGE_SIZE - 2, &[1, 2, 3, 4]).unwrap();
        let mut b = [0u8; 2];
        r.read(0, &mut b).unwrap();
        assert_eq!(b, [3, 4]);
        assert_eq!(r.load_u8(PAGE_SIZE - 1).unwrap(), 2);
        assert!(r.store_doorbell(4, [0; 8]).is_err());
        r.store_doorbell(8, [9; 8]).unwrap();
        assert_eq!(r.load_u8(15).unwrap(), 9);
        let s = r.slice(8, 8).unwrap();
        assert_eq!(s.load_u8(0).unwrap(), 9);
        assert!(r.slice(PAGE_SIZE, 1).is_err());
    }
}
