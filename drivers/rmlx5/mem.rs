// SPDX-License-Identifier: GPL-2.0

//! Memory shared with a device: queue rings, doorbell records, page lists.
//!
//! One type for every backend: [`DmaBuf`] is memory of the module's own
//! (which the software HCA reaches at its kernel address) or memory
//! another owner provides through [`DmaBacking`] (pages a process maps, a
//! PCI function's coherent DMA memory), with the address the device uses
//! beside the kernel's. Every access is a volatile copy: the device writes
//! while consumers read, as a CPU and a device share a DMA buffer.

use kernel::{
    prelude::*,
    sync::Arc, //
};

pub(crate) mod pages;

/// Memory allocated elsewhere that a [`DmaBuf`] can stand for (the pages
/// uverbs shares with a process).
///
/// # Safety
///
/// `kaddr()..kaddr() + len()` must be valid for reads and writes, 8-byte
/// aligned, and constant for as long as the value lives; nothing may
/// access it through a Rust reference (only volatile copies).
pub(crate) unsafe trait DmaBacking: Send + Sync {
    /// The kernel virtual address of the first byte.
    fn kaddr(&self) -> u64;
    /// Length in bytes.
    fn len(&self) -> usize;
    /// The address the device reaches the first byte at: the kernel
    /// address for the software HCA, a bus address for a PCI function.
    fn dma_addr(&self) -> u64 {
        self.kaddr()
    }
    /// The bus address of each page of a buffer a PCI function reaches
    /// page by page (a process's pinned pages), in order, `None` for a
    /// buffer it reaches as one range. Each address is page aligned;
    /// [`DmaBacking::dma_addr`] is the first one plus the buffer's offset
    /// in its first page.
    fn bus_pages(&self) -> Option<&[u64]> {
        None
    }
}

/// What keeps a [`DmaBuf`]'s memory alive.
enum Storage {
    /// Allocated by the buffer itself.
    Own { _words: KVec<u64> },
    /// Shared with another owner (pages a process maps).
    Shared { _backing: Arc<dyn DmaBacking> },
}

/// A zeroed, 8-byte aligned buffer a device may access once it is given
/// to it (the software HCA: once registered; its owner removes it from
/// the registry before dropping it).
///
/// # Invariants
///
/// `ptr` points at `len` bytes kept alive by `_storage`, which are never
/// touched through a reference after construction (only through `ptr`).
pub(crate) struct DmaBuf {
    ptr: *mut u8,
    len: usize,
    /// Where the device reaches `ptr`.
    dma: u64,
    _storage: Storage,
}

// SAFETY: The buffer is plain memory; concurrent access goes through
// volatile copies only.
unsafe impl Send for DmaBuf {}
// SAFETY: As above: `&DmaBuf` only offers volatile copies.
unsafe impl Sync for DmaBuf {}

impl DmaBuf {
    /// Allocates `len` zeroed bytes (rounded up to 8).
    pub(crate) fn new(len: usize, flags: kernel::alloc::Flags) -> Result<Self> {
        let words = len.div_ceil(8).max(1);
        let mut storage = KVec::from_elem(0u64, words, flags)?;
        let ptr = storage.as_mut_ptr().cast::<u8>();
        // INVARIANT: `storage` owns `words * 8 >= len` bytes at `ptr`.
        Ok(Self {
            ptr,
            len,
            dma: ptr as u64,
            _storage: Storage::Own { _words: storage },
        })
    }

    /// A buffer over memory another owner shares (pages a process maps):
    /// the buffer keeps `backing` alive.
    pub(crate) fn shared(backing: Arc<dyn DmaBacking>) -> Self {
        // INVARIANT: by `DmaBacking`'s contract the range is valid while
        // `backing` lives, which `_storage` ensures.
        Self {
            ptr: backing.kaddr() as *mut u8,
            len: backing.len(),
            dma: backing.dma_addr(),
            _storage: Storage::Shared { _backing: backing },
        }
    }

    /// The buffer's kernel virtual address (also where the software HCA
    /// reaches it).
    pub(crate) fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// Where the device reaches the buffer: [`DmaBuf::addr`] for memory of
    /// the module's own, the backing's DMA address for shared memory.
    pub(crate) fn dma_addr(&self) -> u64 {
        self.dma
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The bus addresses of the buffer's pages, for shared memory a PCI
    /// function reaches page by page ([`DmaBacking::bus_pages`]).
    pub(crate) fn bus_pages(&self) -> Option<&[u64]> {
        match &self._storage {
            Storage::Own { .. } => None,
            Storage::Shared { _backing: b } => b.bus_pages(),
        }
    }

    fn range(&self, off: usize, len: usize) -> Result<*mut u8> {
        match off.checked_add(len) {
            Some(end) if end <= self.len => Ok(self.ptr.wrapping_add(off)),
            _ => Err(EINVAL),
        }
    }

    /// Copies bytes out of the buffer at `off`.
    pub(crate) fn read(&self, off: usize, out: &mut [u8]) -> Result {
        let p = self.range(off, out.len())?;
        // SAFETY: `range` checked `p..p + out.len()` lies inside the buffer.
        unsafe { volatile_copy_from(p, out) };
        Ok(())
    }

    /// Reads one byte at `off` (an owner byte).
    pub(crate) fn read_u8(&self, off: usize) -> Result<u8> {
        let p = self.range(off, 1)?;
        // SAFETY: `p` lies inside the buffer.
        Ok(unsafe { p.read_volatile() })
    }

    /// Copies `data` into the buffer at `off`.
    pub(crate) fn write(&self, off: usize, data: &[u8]) -> Result {
        let p = self.range(off, data.len())?;
        // SAFETY: `range` checked `p..p + data.len()` lies inside the buffer.
        unsafe { volatile_copy_to(p, data) };
        Ok(())
    }

    /// Stores the 4-byte word `word` (bytes in memory order) at `off` with
    /// one aligned 32-bit store: how every doorbell-record word is written,
    /// since a device may read it at any moment and must never see part of
    /// the old value and part of the new (a big-endian counter going from
    /// 0x00ff to 0x0100 a byte at a time reads 0x01ff in between).
    ///
    /// # Errors
    ///
    /// `EINVAL` if the word is not inside the buffer or not 4-byte aligned.
    pub(crate) fn write_word(&self, off: usize, word: [u8; 4]) -> Result {
        let p = self.range(off, 4)?;
        if p as usize % 4 != 0 {
            return Err(EINVAL);
        }
        // SAFETY: `range` checked `p..p + 4` lies inside the buffer, and `p`
        // is 4-byte aligned.
        unsafe { p.cast::<u32>().write_volatile(u32::from_ne_bytes(word)) };
        Ok(())
    }

    /// Loads the 4-byte word at `off` (bytes in memory order) with one
    /// aligned 32-bit load, the counterpart of [`DmaBuf::write_word`] (as
    /// a device reads a doorbell record; the KUnit suite reads so).
    ///
    /// # Errors
    ///
    /// `EINVAL` if the word is not inside the buffer or not 4-byte aligned.
    #[cfg(CONFIG_KUNIT)]
    pub(crate) fn read_word(&self, off: usize) -> Result<[u8; 4]> {
        let p = self.range(off, 4)?;
        if p as usize % 4 != 0 {
            return Err(EINVAL);
        }
        // SAFETY: As in `write_word`.
        Ok(unsafe { p.cast::<u32>().read_volatile() }.to_ne_bytes())
    }

    /// Sets every byte at `off + k * stride` (for `k` in `0..count`) to `v`.
    pub(crate) fn fill_strided(&self, off: usize, stride: usize, count: usize, v: u8) -> Result {
        for k in 0..count {
            self.write(off + k * stride, &[v])?;
        }
        Ok(())
    }
}

/// Bytes from `addr` up to the next 8-byte boundary.
fn to_word_boundary(addr: usize) -> usize {
    addr.wrapping_neg() % 8
}

/// Copies device-visible memory out, as a DMA engine reads it: volatile
/// loads in ascending order, aligned 8-byte words where possible (the
/// ends byte by byte), which under emulation costs an eighth of a copy
/// byte by byte.
///
/// # Safety
///
/// `src..src + out.len()` must be valid for reads.
pub(crate) unsafe fn volatile_copy_from(src: *const u8, out: &mut [u8]) {
    let (head, rest) = out.split_at_mut(to_word_boundary(src as usize).min(out.len()));
    for (i, b) in head.iter_mut().enumerate() {
        // SAFETY: `i < head.len() <= out.len()`: inside the caller's range.
        *b = unsafe { src.add(i).read_volatile() };
    }
    // SAFETY: `head.len() <= out.len()`: still inside (or at the end of)
    // the caller's range.
    let src = unsafe { src.add(head.len()) };
    let mut words = rest.chunks_exact_mut(8);
    let mut off = 0;
    for w in &mut words {
        // SAFETY: `src + off` is 8-byte aligned (the head took the
        // misalignment) and `off + 8 <= rest.len()`: inside the range.
        let v = unsafe { src.add(off).cast::<u64>().read_volatile() };
        w.copy_from_slice(&v.to_ne_bytes());
        off += 8;
    }
    for (i, b) in words.into_remainder().iter_mut().enumerate() {
        // SAFETY: `off + i < rest.len()`: inside the range.
        *b = unsafe { src.add(off + i).read_volatile() };
    }
}

/// Copies into device-visible memory, as a DMA engine writes it: volatile
/// stores in ascending order, aligned 8-byte words where possible.
///
/// # Safety
///
/// `dst..dst + data.len()` must be valid for writes.
pub(crate) unsafe fn volatile_copy_to(dst: *mut u8, data: &[u8]) {
    let (head, rest) = data.split_at(to_word_boundary(dst as usize).min(data.len()));
    for (i, b) in head.iter().enumerate() {
        // SAFETY: `i < head.len() <= data.len()`: inside the caller's range.
        unsafe { dst.add(i).write_volatile(*b) };
    }
    // SAFETY: `head.len() <= data.len()`: inside (or at the end of) the
    // caller's range.
    let dst = unsafe { dst.add(head.len()) };
    let mut words = rest.chunks_exact(8);
    let mut off = 0;
    for w in &mut words {
        let mut v = [0u8; 8];
        v.copy_from_slice(w);
        // SAFETY: `dst + off` is 8-byte aligned and `off + 8 <= rest.len()`.
        unsafe {
            dst.add(off)
                .cast::<u64>()
                .write_volatile(u64::from_ne_bytes(v))
        };
        off += 8;
    }
    for (i, b) in words.remainder().iter().enumerate() {
        // SAFETY: `off + i < rest.len()`: inside the range.
        unsafe { dst.add(off + i).write_volatile(*b) };
    }
}

#[kunit_tests(rmlx5_mem)]
mod tests {
    use super::*;
    use crate::mlx5_prm::doorbell::counter_word;
    use core::sync::atomic::{
        AtomicBool,
        AtomicU64,
        Ordering, //
    };
    use kernel::{
        sync::Arc,
        time::{
            delay::fsleep,
            Delta,
            Instant,
            Monotonic, //
        },
    };

    /// What the reading CPU shares with the test.
    struct Sampler {
        buf: DmaBuf,
        stop: AtomicBool,
        done: AtomicBool,
        reads: AtomicU64,
        torn: AtomicU64,
    }

    fn wait(flag: impl Fn() -> bool) -> bool {
        for _ in 0..20000 {
            if flag() {
                return true;
            }
            fsleep(Delta::from_micros(100));
        }
        false
    }

    /// A doorbell-record counter crossing a byte boundary (0x00ff and
    /// 0x0100, big-endian), stored the way the QP and CQ paths store their
    /// record words, while another CPU loads the word as a device would:
    /// every value seen is one of the two, never part of each. (Stored a
    /// byte at a time, as they were, the reader sees 0x01ff or 0.)
    #[test]
    fn doorbell_record_word_is_never_seen_torn() -> Result {
        let old = counter_word(0x00ff);
        let new = counter_word(0x0100);
        let s = Arc::new(
            Sampler {
                buf: DmaBuf::new(8, GFP_KERNEL)?,
                stop: AtomicBool::new(false),
                done: AtomicBool::new(false),
                reads: AtomicU64::new(0),
                torn: AtomicU64::new(0),
            },
            GFP_KERNEL,
        )?;
        s.buf.write_word(0, old)?;
        let r = s.clone();
        crate::work::system_dfl().try_spawn(GFP_KERNEL, move || {
            while !r.stop.load(Ordering::Acquire) {
                if let Ok(w) = r.buf.read_word(0) {
                    r.reads.fetch_add(1, Ordering::Relaxed);
                    if w != old && w != new {
                        r.torn.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            r.done.store(true, Ordering::Release);
        })?;
        let started = wait(|| s.reads.load(Ordering::Relaxed) != 0);
        let before = s.reads.load(Ordering::Relaxed);
        // At least 200,000 stores, and on until the reader made 20,000
        // loads meanwhile (it may share this CPU for a while), at most
        // 10 s.
        let start = Instant::<Monotonic>::now();
        let mut stores = 0u32;
        let wrote = (|| -> Result {
            loop {
                s.buf
                    .write_word(0, if stores % 2 == 0 { new } else { old })?;
                stores += 1;
                if stores >= 200_000
                    && (s.reads.load(Ordering::Relaxed) - before >= 20_000
                        || start.elapsed() > Delta::from_secs(10))
                {
                    return Ok(());
                }
            }
        })();
        let during = s.reads.load(Ordering::Relaxed) - before;
        // The reader stops before anything is asserted.
        s.stop.store(true, Ordering::Release);
        let stopped = wait(|| s.done.load(Ordering::Acquire));
        let torn = s.torn.load(Ordering::Relaxed);
        pr_info!(
            "doorbell word: {during} loads by the reader during {stores} stores, {torn} torn\n"
        );
        wrote?;
        assert!(started && stopped);
        // The reader ran alongside the writer, or the test proves nothing.
        assert!(during > 1000);
        assert_eq!(torn, 0);
        Ok(())
    }
}
