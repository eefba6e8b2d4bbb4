// SPDX-License-Identifier: GPL-2.0

//! Memory the HCA shares with the process: queue buffers, doorbell records,
//! the UAR page and registered data buffers.
//!
//! This is the one file of the provider that touches raw pointers. Such
//! memory is written by the device (or, in-process, by the software HCA on
//! another thread) while the process reads it, so it is never exposed as a
//! Rust reference: every access is an atomic byte load or store (plain
//! `mov`s on x86-64, and race-free in the Rust memory model), except the
//! 64-bit doorbell stores to the UAR page, which must be aligned 64-bit
//! stores and are volatile writes (device memory in the kernel backend),
//! and the fast-path accesses in whole 64-bit words: WQEs into the SQ and
//! RQ ([`DmaRegion::write_words`], [`WordRing`]) and CQEs out of the CQ
//! ([`WordRing::load`]). Those are atomic too, and are only used where the
//! queue protocol orders every device access to the same bytes before or
//! after them (see their documentation), so bytes and words never race.
//!
//! Doorbell records are the exception to that ordering: the device reads
//! them whenever it likes (the kernel's software HCA with one aligned 64-bit
//! load of the 8-byte record, a ConnectX the 32-bit word), so each of their
//! words is only ever stored whole, with one aligned 32-bit atomic store
//! ([`DmaRegion::store_u32`]), and read whole in-process
//! ([`DmaRegion::read_u32s`]): a reader never sees a counter half updated
//! (0x00ff to 0x0100 read as 0x01ff), and sizes never mix.
//!
//! [`mmio_wc_start`] and [`mmio_flush_writes`] are the barriers around
//! stores to a BlueFlame register.

use std::alloc::Layout;
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{compiler_fence, AtomicU32, AtomicU64, AtomicU8, Ordering};
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

    /// Whether the 4 bytes at `offset` may be accessed as one aligned
    /// 32-bit word: inside the region and 4-byte aligned in memory.
    fn u32_ok(&self, offset: usize) -> bool {
        self.check(offset, 4).is_ok()
            && (self.ptr.as_ptr() as usize)
                .wrapping_add(offset)
                .is_multiple_of(4)
    }

    /// The aligned 32-bit word at `offset`, which the caller checked with
    /// [`DmaRegion::u32_ok`]: a doorbell record word, accessed only whole
    /// (see the [module documentation](self)).
    fn word32(&self, offset: usize) -> &AtomicU32 {
        debug_assert!(self.u32_ok(offset));
        // SAFETY: the caller checked that `offset + 4 <= len`, so the word
        // is inside the region, which is valid for reads and writes while
        // `self` lives (type invariant), and that its address is a multiple
        // of 4, the alignment of `AtomicU32`. The memory is only accessed
        // atomically, and doorbell record words, the only memory accessed
        // through this, are accessed by every party that may run
        // concurrently as whole 32-bit atomics (`store_u32`, `read_u32s`);
        // the byte accesses of a backend (zeroing a fresh record) are
        // ordered before or after by the backend's locks, so sizes never
        // mix without synchronization. The one other word accessed so, the
        // software HCA's watch word in the UAR page, is only loaded here and
        // only written by the kernel, outside this process, like memory a
        // device writes.
        unsafe { AtomicU32::from_ptr(self.ptr.as_ptr().add(offset).cast::<u32>()) }
    }

    /// An atomic OR of `bits` into the aligned 64-bit word at `offset`: the
    /// software HCA's doorbell bits in the UAR page, which the kernel takes
    /// with an atomic swap.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] if the word is outside the region or not 8-byte
    /// aligned in memory.
    pub(crate) fn fetch_or_u64(&self, offset: usize, bits: u64) -> Result<()> {
        if !self.words_ok(offset, 8) {
            self.check(offset, 8)?;
            return Err(Error::Invalid("misaligned word"));
        }
        // Sequentially consistent: the kick-elision handshake orders the
        // next load of the watch word after this (on x86 the locked OR is
        // a full barrier anyway).
        self.word(offset).fetch_or(bits, Ordering::SeqCst);
        Ok(())
    }

    /// One aligned 32-bit load of the word at `offset`: a word the device
    /// (here the software HCA's kernel side) writes, the UAR page's watch
    /// word. Relaxed: the caller orders it with a full fence.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] if the word is outside the region or not 4-byte
    /// aligned in memory.
    pub(crate) fn load_u32(&self, offset: usize) -> Result<u32> {
        if !self.u32_ok(offset) {
            self.check(offset, 4)?;
            return Err(Error::Invalid("misaligned word"));
        }
        Ok(self.word32(offset).load(Ordering::Relaxed))
    }

    /// Stores `bytes` (already in device byte order) at `offset` with one
    /// aligned 32-bit release store: a doorbell record word (a QP's receive
    /// or send counter, a CQ's SET_CI or ARM word), which the device may
    /// read at any time and must never see half written. Release: the
    /// device, or another thread, sees it after anything this thread wrote
    /// before (the fast path also issues the fence rdma-core does first).
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] if the word is outside the region or not 4-byte
    /// aligned in memory (nothing is stored).
    pub(crate) fn store_u32(&self, offset: usize, bytes: [u8; 4]) -> Result<()> {
        if !self.u32_ok(offset) {
            self.check(offset, 4)?;
            return Err(Error::Invalid("misaligned doorbell record"));
        }
        self.word32(offset)
            .store(u32::from_ne_bytes(bytes), Ordering::Release);
        Ok(())
    }

    /// Fills `out` from `offset` as [`DmaRegion::read`] does (acquire
    /// loads), but with one aligned 32-bit load for each whole aligned word
    /// of the range (bytes only where it is not): for reading doorbell
    /// records, whose words [`DmaRegion::store_u32`] stores whole.
    pub(crate) fn read_u32s(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check(offset, out.len())?;
        let mut i = 0;
        while i < out.len() {
            let at = offset + i;
            if out.len() - i >= 4 && self.u32_ok(at) {
                let w = self.word32(at).load(Ordering::Acquire).to_ne_bytes();
                out[i..i + 4].copy_from_slice(&w);
                i += 4;
            } else {
                out[i] = self.byte(at).load(Ordering::Acquire);
                i += 1;
            }
        }
        Ok(())
    }

    /// Whether `offset..offset + len` may be accessed as whole aligned
    /// 64-bit words: inside the region, 8-byte aligned in memory, and a
    /// multiple of 8 bytes long.
    fn words_ok(&self, offset: usize, len: usize) -> bool {
        self.check(offset, len).is_ok()
            && (self.ptr.as_ptr() as usize)
                .wrapping_add(offset)
                .is_multiple_of(8)
            && len.is_multiple_of(8)
    }

    /// The aligned 64-bit word at `offset`.
    ///
    /// Callers must know that the word lies inside the region and is
    /// aligned (checked with [`DmaRegion::words_ok`], or by the invariant
    /// of [`WordRing`]), and must access it only where nothing accesses the
    /// same bytes with another size concurrently (see
    /// [`DmaRegion::write_words`] and [`WordRing`]).
    fn word(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(self.words_ok(offset, 8));
        // SAFETY: the caller knows that `offset + 8 <= len`, so the word is
        // inside the region, which is valid for reads and writes while
        // `self` lives (type invariant), and that its address is a multiple
        // of 8, the alignment of `AtomicU64`. The memory is only accessed
        // atomically; the callers' protocols (documented on `write_words`
        // and `WordRing`) order every byte-sized access to these bytes by
        // another party before or after this word access, so sizes never
        // mix without synchronization.
        unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().add(offset).cast::<u64>()) }
    }

    /// Stores `data` at `offset` as relaxed 64-bit stores (bytes where the
    /// range is not whole aligned words): a WQE into the SQ, a receive WQE
    /// into the RQ.
    ///
    /// For queue memory only: the caller publishes the stores with a
    /// release fence before the doorbell record that lets the device read
    /// them, and reuses a slot only after the device has completed what was
    /// there, so no device access to these bytes can race with this store.
    pub(crate) fn write_words(&self, offset: usize, data: &[u8]) -> Result<()> {
        if !self.words_ok(offset, data.len()) {
            self.check(offset, data.len())?;
            for (i, b) in data.iter().enumerate() {
                self.byte(offset + i).store(*b, Ordering::Relaxed);
            }
            return Ok(());
        }
        for (i, w) in data.as_chunks::<8>().0.iter().enumerate() {
            self.word(offset + i * 8)
                .store(u64::from_ne_bytes(*w), Ordering::Relaxed);
        }
        Ok(())
    }

    /// One aligned volatile 64-bit store of `v` at `offset`, which the
    /// caller checked with [`DmaRegion::words_ok`].
    fn store_volatile(&self, offset: usize, v: u64) {
        debug_assert!(self.words_ok(offset, 8));
        // SAFETY: the caller checked that `offset + 8 <= len`, so the word
        // is inside the region, which is valid (type invariant), and that
        // its address is a multiple of 8, so the `u64` store is aligned.
        // The caller holds the lock of the register (the UAR CQ doorbell or
        // the BlueFlame register), so no other thread stores to these
        // bytes concurrently, and the software HCA reads them only after
        // the kick the same thread makes under that lock.
        unsafe { core::ptr::write_volatile(self.ptr.as_ptr().add(offset).cast::<u64>(), v) }
    }

    /// One aligned 64-bit store of `bytes` (already in device byte order)
    /// at `offset`: the UAR doorbell write.
    pub(crate) fn store_doorbell(&self, offset: usize, bytes: [u8; 8]) -> Result<()> {
        if !self.words_ok(offset, 8) {
            self.check(offset, 8)?;
            return Err(Error::Invalid("misaligned doorbell"));
        }
        self.store_volatile(offset, u64::from_ne_bytes(bytes));
        Ok(())
    }

    /// The BlueFlame copy: `words` words of `sq` from word `first` on (a
    /// WQE just written), as aligned 64-bit stores in address order from
    /// `offset`.
    pub(crate) fn blueflame_copy(
        &self,
        offset: usize,
        sq: &WordRing,
        first: usize,
        words: usize,
    ) -> Result<()> {
        let len = words.saturating_mul(8);
        if !self.words_ok(offset, len) {
            self.check(offset, len)?;
            return Err(Error::Invalid("misaligned doorbell"));
        }
        for i in 0..words {
            self.store_volatile(offset + i * 8, u64::from_ne_bytes(sq.load(first + i)));
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

/// A queue (the SQ) as a ring of aligned 64-bit words.
///
/// # Invariants
///
/// The region is 8-byte aligned in memory and a power of two of 64-bit
/// words long; `mask` is that number of words minus one. So every word
/// index, taken modulo the ring with `mask`, names a whole aligned word
/// inside the region.
#[derive(Debug)]
pub(crate) struct WordRing {
    region: DmaRegion,
    mask: usize,
}

impl WordRing {
    /// The ring over all of `region`.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] if the region is not 8-byte aligned or not a
    /// power of two of words long.
    pub(crate) fn new(region: DmaRegion) -> Result<WordRing> {
        let words = region.len() / 8;
        if !region.words_ok(0, region.len()) || !words.is_power_of_two() {
            return Err(Error::Invalid("queue not a ring of aligned words"));
        }
        // INVARIANT: checked just above.
        Ok(WordRing {
            region,
            mask: words - 1,
        })
    }

    /// Stores word `i` (modulo the ring) with a relaxed store. As for
    /// [`DmaRegion::write_words`]: the caller publishes it with a release
    /// fence before the doorbell record, and reuses a word only after the
    /// device has completed what was there.
    pub(crate) fn store(&self, i: usize, w: [u8; 8]) {
        // In bounds and aligned by the type invariant.
        self.region
            .word((i & self.mask) * 8)
            .store(u64::from_ne_bytes(w), Ordering::Relaxed);
    }

    /// Stores `words` at word `i` on (modulo the ring), as [`WordRing::store`].
    pub(crate) fn store_words(&self, i: usize, words: &[[u8; 8]]) {
        for (k, w) in words.iter().enumerate() {
            self.store(i + k, *w);
        }
    }

    /// Stores `n` zero words at word `i` on (modulo the ring), as
    /// [`WordRing::store`].
    pub(crate) fn zero_words(&self, i: usize, n: usize) {
        for k in 0..n {
            self.store(i + k, [0; 8]);
        }
    }

    /// Word `i` (modulo the ring), a relaxed load: of a WQE this thread
    /// just stored (the BlueFlame copy), or of a CQE whose `op_own` the
    /// caller saw owned by software, with an acquire load and fence (the
    /// device wrote the whole entry before that byte, and writes it again
    /// only after SET_CI gives it back).
    pub(crate) fn load(&self, i: usize) -> [u8; 8] {
        self.region
            .word((i & self.mask) * 8)
            .load(Ordering::Relaxed)
            .to_ne_bytes()
    }
}

/// Orders the stores before it (the doorbell record) before the stores to
/// a BlueFlame register that follow (rdma-core's `mmio_wc_start`). Call it
/// right after taking the register's lock: on x86 the locked instruction
/// of that lock already orders write-combining stores after every earlier
/// store, so only the compiler needs holding back; elsewhere it is a full
/// fence.
pub(crate) fn mmio_wc_start() {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    compiler_fence(Ordering::SeqCst);
    #[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
    std::sync::atomic::fence(Ordering::SeqCst);
}

/// Pushes the stores to a BlueFlame register out before anything after it
/// (rdma-core's `mmio_flush_writes`, `sfence` on x86-64). A full fence: on
/// x86-64 a locked instruction, which drains the write-combining buffers
/// as `sfence` does, costs no more here (measured), and needs no `unsafe`
/// intrinsic.
pub(crate) fn mmio_flush_writes() {
    std::sync::atomic::fence(Ordering::SeqCst);
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
        r.write(PAGE_SIZE - 2, &[1, 2]).unwrap();
        assert_eq!(r.load_u8(PAGE_SIZE - 1).unwrap(), 2);
        assert!(r.store_doorbell(4, [0; 8]).is_err());
        r.store_doorbell(8, [9; 8]).unwrap();
        assert_eq!(r.load_u8(15).unwrap(), 9);
        let s = r.slice(8, 8).unwrap();
        assert_eq!(s.load_u8(0).unwrap(), 9);
        assert!(r.slice(PAGE_SIZE, 1).is_err());
    }

    #[test]
    fn doorbell_record_words() {
        use mlx5_prm::doorbell::{
            counter_word, set_ci_word, CQ_DBR_ARM_OFFSET, CQ_DBR_SET_CI_OFFSET, QP_DBR_RECV_OFFSET,
            QP_DBR_SEND_OFFSET,
        };
        let (_p, r) = HeapPages::alloc(64).unwrap();
        r.write(0, &[0xee; 16]).unwrap();
        // A QP record: receive counter in word 0, send counter in word 1,
        // each big-endian; nothing else touched.
        r.store_u32(QP_DBR_RECV_OFFSET, counter_word(0x0100))
            .unwrap();
        r.store_u32(QP_DBR_SEND_OFFSET, counter_word(0xabcd))
            .unwrap();
        let mut b = [0u8; 12];
        r.read(0, &mut b).unwrap();
        assert_eq!(b, [0, 0, 1, 0, 0, 0, 0xab, 0xcd, 0xee, 0xee, 0xee, 0xee]);
        // A CQ record: SET_CI in word 0, ARM in word 1.
        r.store_u32(CQ_DBR_SET_CI_OFFSET, set_ci_word(0x0112_3456))
            .unwrap();
        r.store_u32(CQ_DBR_ARM_OFFSET, [0x31, 2, 3, 4]).unwrap();
        let mut rec = [0u8; 8];
        r.read_u32s(0, &mut rec).unwrap();
        assert_eq!(rec, [0, 0x12, 0x34, 0x56, 0x31, 2, 3, 4]);
        // Misaligned or outside: refused, nothing stored.
        assert!(r.store_u32(2, [9; 4]).is_err());
        assert!(r.store_u32(PAGE_SIZE - 2, [9; 4]).is_err());
        assert!(r.store_u32(PAGE_SIZE, [9; 4]).is_err());
        r.read(0, &mut rec).unwrap();
        assert_eq!(rec, [0, 0x12, 0x34, 0x56, 0x31, 2, 3, 4]);
        // read_u32s takes bytes where words do not fit.
        let mut odd = [0u8; 7];
        r.read_u32s(1, &mut odd).unwrap();
        assert_eq!(odd, [0x12, 0x34, 0x56, 0x31, 2, 3, 4]);
        assert!(r.read_u32s(PAGE_SIZE - 2, &mut odd).is_err());
        // A sub-region 2 bytes off alignment cannot hold a record.
        let s = r.slice(2, 16).unwrap();
        assert!(s.store_u32(0, [9; 4]).is_err());
    }

    #[test]
    fn a_concurrent_reader_never_sees_half_a_counter() {
        use mlx5_prm::doorbell::{counter_word, QpDbRec, QP_DBR_SEND_OFFSET};
        let (_p, r) = HeapPages::alloc(64).unwrap();
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                // The counter steps across byte boundaries (0x00ff, 0x0100).
                for i in 0..200_000u32 {
                    let c = if i % 2 == 0 { 0x00ff } else { 0x0100 };
                    r.store_u32(QP_DBR_SEND_OFFSET, counter_word(c)).unwrap();
                }
                done.store(true, Ordering::Release);
            });
            while !done.load(Ordering::Acquire) {
                let mut rec = [0u8; 8];
                r.read_u32s(0, &mut rec).unwrap();
                let send = QpDbRec::decode(&rec).unwrap().send_counter;
                assert!(matches!(send, 0 | 0x00ff | 0x0100), "torn {:#x}", send);
            }
        });
    }

    #[test]
    fn words_and_their_fallbacks() {
        let (_p, r) = HeapPages::alloc(64).unwrap();
        let data: [u8; 24] = core::array::from_fn(|i| i as u8 + 1);
        // Aligned: whole words.
        r.write_words(8, &data).unwrap();
        let mut out = [0u8; 24];
        r.read(8, &mut out).unwrap();
        assert_eq!(out, data);
        // Misaligned or ragged: bytes, same result.
        r.write_words(3, &data[..13]).unwrap();
        let mut b = [0u8; 13];
        r.read(3, &mut b).unwrap();
        assert_eq!(b, data[..13]);
        // A sub-region that is not 8-byte aligned in memory.
        let s = r.slice(4, 64).unwrap();
        s.write_words(0, &data[..16]).unwrap();
        let mut c = [0u8; 16];
        r.read(4, &mut c).unwrap();
        assert_eq!(c, data[..16]);
        assert!(s.store_doorbell(0, [0; 8]).is_err());
        // Out of range either way.
        assert!(r.write_words(PAGE_SIZE - 8, &data).is_err());
        // A BlueFlame copy lands in order, taken across the end of a ring.
        let ring = WordRing::new(r.slice(PAGE_SIZE - 64, 64).unwrap()).unwrap();
        for (i, w) in data.as_chunks::<8>().0.iter().enumerate() {
            ring.store(6 + i, *w);
        }
        r.blueflame_copy(64, &ring, 6, 3).unwrap();
        r.read(64, &mut out).unwrap();
        assert_eq!(out, data);
        assert!(r.blueflame_copy(PAGE_SIZE - 16, &ring, 6, 3).is_err());
        assert!(r.blueflame_copy(60, &ring, 6, 3).is_err());
    }

    #[test]
    fn word_ring_wraps() {
        let (_p, r) = HeapPages::alloc(PAGE_SIZE).unwrap();
        assert!(WordRing::new(r.slice(4, 64).unwrap()).is_err());
        assert!(WordRing::new(r.slice(0, 24).unwrap()).is_err());
        let ring = WordRing::new(r.slice(64, 128).unwrap()).unwrap();
        ring.store(15, [1; 8]);
        ring.store(16, [2; 8]);
        assert_eq!(ring.load(31), [1; 8]);
        let mut b = [0u8; 8];
        r.read(64, &mut b).unwrap();
        assert_eq!(b, [2; 8]);
        r.read(64 + 120, &mut b).unwrap();
        assert_eq!(b, [1; 8]);
    }
}
