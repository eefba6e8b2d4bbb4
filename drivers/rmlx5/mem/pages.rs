// SPDX-License-Identifier: GPL-2.0

//! Memory shared with user space: kernel pages a process maps
//! ([`PageBuf`]: UAR page, CQ and QP buffers, doorbell records) and user
//! pages the module pins for a memory region ([`PinnedPages`]).
//!
//! Both give the kernel one contiguous virtual mapping (`vmap`) of their
//! pages, which is the address the software HCA is handed for them: the
//! model names memory by address and checks every access against
//! registered ranges, so it never needs to know the memory is made of
//! pages. A PCI function is given bus addresses instead: a queue buffer
//! allocated physically contiguous and mapped as one range
//! ([`MappedBuf`]), and the pinned pages of a memory region mapped page by
//! page ([`PageDma`]).
//!
//! This file and `uverbs/event_file.rs` are the unsafe layer of the
//! memory user space shares.

use core::{
    mem::ManuallyDrop,
    ptr::NonNull, //
};
use kernel::{
    bindings, device,
    ffi::c_void,
    mm::virt::VmaMixedMap,
    page::{
        BorrowedPage,
        PAGE_SHIFT,
        PAGE_SIZE, //
    },
    prelude::*,
    sync::{
        aref::ARef,
        Arc, //
    },
};

use super::DmaBacking;

// Kernel structs are passed as `c_void` pointers: their bindgen types are
// not FFI-safe by the compiler's standard (empty arrays inside).
extern "C" {
    fn rmlx5_pinned_charge(npages: usize) -> *mut c_void;
    fn rmlx5_pinned_uncharge(mm: *mut c_void, npages: usize);
    fn rmlx5_pin_user_pages(
        start: usize,
        npages: usize,
        writable: bool,
        pages: *mut c_void,
    ) -> isize;
    fn rmlx5_unpin_user_pages(pages: *mut c_void, npages: usize, dirty: bool);
    fn rmlx5_vmap_pages(pages: *mut c_void, npages: u32) -> *mut c_void;
    fn rmlx5_vunmap(addr: *mut c_void);
    fn rmlx5_alloc_page() -> *mut c_void;
    fn rmlx5_free_page(page: *mut c_void);
    fn rmlx5_dma_map_pages(
        dev: *mut c_void,
        page: *mut c_void,
        len: usize,
        dma: *mut u64,
    ) -> kernel::ffi::c_int;
    fn rmlx5_dma_unmap_pages(dev: *mut c_void, dma: u64, len: usize);
}

/// A `vmap` of pages.
///
/// # Invariants
///
/// `addr` is the start of a live `vmap` of `len` bytes, unmapped on drop
/// (the pages must outlive the value; both owners below drop it first).
struct Vmap {
    addr: NonNull<c_void>,
    len: usize,
}

impl Vmap {
    /// Maps `pages` contiguously.
    ///
    /// # Safety
    ///
    /// Every pointer in `pages` is a page the caller keeps allocated (or
    /// pinned) for the life of the returned value.
    unsafe fn new(pages: &mut [*mut bindings::page]) -> Result<Self> {
        let n = u32::try_from(pages.len()).map_err(|_| ENOMEM)?;
        let len = pages.len().checked_mul(PAGE_SIZE).ok_or(ENOMEM)?;
        // SAFETY: `pages` holds `n` valid page pointers (caller's
        // contract); vmap only reads the array.
        let addr = unsafe { rmlx5_vmap_pages(pages.as_mut_ptr().cast(), n) };
        // INVARIANT: a non-null return is a live vmap of `n` pages.
        Ok(Self {
            addr: NonNull::new(addr).ok_or(ENOMEM)?,
            len,
        })
    }
}

impl Drop for Vmap {
    fn drop(&mut self) {
        // SAFETY: by the type invariant `addr` is a live vmap, unmapped once.
        unsafe { rmlx5_vunmap(self.addr.as_ptr()) };
    }
}

// SAFETY: a `Vmap` is an address range; all access goes through volatile
// copies of the owner, from any thread.
unsafe impl Send for Vmap {}
// SAFETY: as above.
unsafe impl Sync for Vmap {}

/// An order-0 page of the module's, freed on drop (a process that mapped
/// it holds its own reference, so the page lives on until unmapped).
///
/// # Invariants
///
/// The page was allocated by `rmlx5_alloc_page` and is freed once, on
/// drop.
struct OwnedPage(NonNull<bindings::page>);

impl Drop for OwnedPage {
    fn drop(&mut self) {
        // SAFETY: by the type invariant the page is ours, freed once.
        unsafe { rmlx5_free_page(self.0.as_ptr().cast()) };
    }
}

// SAFETY: a page reference may be dropped from any thread.
unsafe impl Send for OwnedPage {}
// SAFETY: `&OwnedPage` offers only the pointer.
unsafe impl Sync for OwnedPage {}

/// Zeroed kernel pages that a process may map, with a kernel mapping.
///
/// Pages inserted into a process with `vm_insert_page` take a page
/// reference each, so a mapping keeps its pages alive after the `PageBuf`
/// is dropped: unmapping frees them. This is the "pages stay valid while
/// mapped" rule of `Documentation/uverbs.md`.
///
/// # Invariants
///
/// `vmap` maps exactly `pages`, in order; `pages` is not empty.
pub(crate) struct PageBuf {
    // Field order: `vmap` is dropped before the pages it maps.
    vmap: Vmap,
    pages: KVVec<OwnedPage>,
}

impl PageBuf {
    /// Allocates `len` bytes rounded up to whole pages (at least one),
    /// page by page.
    pub(crate) fn new(len: usize) -> Result<Self> {
        let n = len.div_ceil(PAGE_SIZE).max(1);
        let mut pages = KVVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            // SAFETY: plain allocation call.
            let p = unsafe { rmlx5_alloc_page() };
            // INVARIANT: allocated just above, owned by `pages`.
            pages.push(OwnedPage(NonNull::new(p.cast()).ok_or(ENOMEM)?), GFP_KERNEL)?;
        }
        Self::map(pages)
    }

    fn map(pages: KVVec<OwnedPage>) -> Result<Self> {
        let mut raw = KVVec::with_capacity(pages.len(), GFP_KERNEL)?;
        for p in pages.iter() {
            raw.push(p.0.as_ptr(), GFP_KERNEL)?;
        }
        // SAFETY: `raw` holds the pages of `pages`, which the returned
        // `PageBuf` owns and drops after its `vmap`.
        let vmap = unsafe { Vmap::new(&mut raw)? };
        // INVARIANT: `vmap` maps `pages` in order, and there is at least one.
        Ok(Self { vmap, pages })
    }

    /// Size in bytes (whole pages): the exact length a mapping must have.
    pub(crate) fn len(&self) -> usize {
        self.vmap.len
    }

    /// The kernel virtual address of the first byte: the address the
    /// software HCA is given for this memory.
    pub(crate) fn kaddr(&self) -> u64 {
        self.vmap.addr.as_ptr() as u64
    }

    /// Copies bytes at `off` out, as a device would: volatile loads racing
    /// with the process's stores (a BlueFlame copy on the UAR page).
    pub(crate) fn read(&self, off: usize, out: &mut [u8]) -> Result {
        match off.checked_add(out.len()) {
            Some(end) if end <= self.len() => {}
            _ => return Err(EINVAL),
        }
        let p = self.vmap.addr.as_ptr().cast::<u8>().wrapping_add(off);
        for (i, b) in out.iter_mut().enumerate() {
            // SAFETY: `off + i < self.len()` (checked above): inside the
            // vmap, which lives as long as `self`.
            *b = unsafe { p.add(i).read_volatile() };
        }
        Ok(())
    }

    /// Reads a native-endian `u32` at byte `off` (a doorbell record word),
    /// as a device would: a volatile load racing with the process's stores.
    #[cfg(CONFIG_KUNIT)]
    pub(crate) fn read_u32(&self, off: usize) -> Result<u32> {
        match off.checked_add(4) {
            Some(end) if end <= self.len() && off % 4 == 0 => {}
            _ => return Err(EINVAL),
        }
        let p = self.vmap.addr.as_ptr().cast::<u8>().wrapping_add(off);
        // SAFETY: `off..off + 4` is inside the vmap (checked above) and
        // 4-byte aligned (the vmap is page aligned), so `p` is valid for
        // an aligned 4-byte read.
        Ok(unsafe { core::ptr::read_volatile(p.cast::<u32>()) })
    }

    /// Inserts every page into `vma`, which must span exactly
    /// [`PageBuf::len`] bytes (the caller checked).
    pub(crate) fn insert_into(&self, vma: &VmaMixedMap) -> Result {
        let mut addr = vma.start();
        for page in self.pages.iter() {
            // SAFETY: the page is ours and stays allocated while `self`
            // lives, longer than this borrow.
            let page = unsafe { BorrowedPage::from_raw(page.0) };
            vma.vm_insert_page(addr, &page)?;
            addr = addr.checked_add(PAGE_SIZE).ok_or(EINVAL)?;
        }
        Ok(())
    }

    /// Maps the buffer for DMA by `dev` (both directions), page by page,
    /// for as long as the returned value lives.
    pub(crate) fn map_for(self: &Arc<Self>, dev: ARef<device::Device>) -> Result<MappedBuf> {
        let map = PageDma::map(dev, self.pages.iter().map(|p| p.0.as_ptr().cast()))?;
        // INVARIANT: `map` maps every page of `buf`.
        Ok(MappedBuf {
            map,
            buf: self.clone(),
        })
    }
}

/// The `struct device *` of `dev`, for the shims.
fn raw_dev(dev: &device::Device) -> *mut c_void {
    // `device::Device` wraps the C struct transparently.
    core::ptr::from_ref(dev).cast::<c_void>().cast_mut()
}

// SAFETY: the vmap of `len()` bytes at `kaddr()` lives, unchanged, as long
// as the `PageBuf`; it is page aligned; the pages are only accessed with
// volatile copies (by the model) and by the process through its mapping.
unsafe impl DmaBacking for PageBuf {
    fn kaddr(&self) -> u64 {
        PageBuf::kaddr(self)
    }

    fn len(&self) -> usize {
        PageBuf::len(self)
    }
}

/// A [`PageBuf`] mapped for a PCI function's DMA page by page: what the
/// function is given of a queue of rmlx5's own provider (a page list in
/// CREATE_CQ / CREATE_QP, so no contiguous allocation is needed).
///
/// # Invariants
///
/// `map` maps every page of `buf` (fields drop in order: the mappings
/// before the pages).
pub(crate) struct MappedBuf {
    map: PageDma,
    buf: Arc<PageBuf>,
}

// SAFETY: as for the `PageBuf` it maps (which it keeps alive); the device
// reaches it at `dma`.
unsafe impl DmaBacking for MappedBuf {
    fn kaddr(&self) -> u64 {
        self.buf.kaddr()
    }

    fn len(&self) -> usize {
        self.buf.len()
    }

    fn dma_addr(&self) -> u64 {
        self.map.addrs().first().copied().unwrap_or(0)
    }

    fn bus_pages(&self) -> Option<&[u64]> {
        Some(self.map.addrs())
    }
}

/// The locked-memory charge of a memory region: `npages` pinned pages
/// counted in the registering process's `pinned_vm` (checked against
/// `RLIMIT_MEMLOCK`, as ib_umem does).
///
/// # Invariants
///
/// `mm` holds an `mmgrab` reference and `npages` of its `pinned_vm` until
/// drop.
struct PinnedCharge {
    mm: NonNull<c_void>,
    npages: usize,
}

impl PinnedCharge {
    fn new(npages: usize) -> Result<Self> {
        // SAFETY: plain FFI call in process context.
        let mm = unsafe { rmlx5_pinned_charge(npages) };
        let err = kernel::error::from_err_ptr(mm)?;
        // INVARIANT: success means the charge and the mm reference are ours.
        Ok(Self {
            mm: NonNull::new(err).ok_or(EINVAL)?,
            npages,
        })
    }
}

impl Drop for PinnedCharge {
    fn drop(&mut self) {
        // SAFETY: by the type invariant the charge and reference are ours,
        // returned once. The mm may have exited: `pinned_vm` lives in the
        // `mm_struct`, which `mmgrab` keeps.
        unsafe { rmlx5_pinned_uncharge(self.mm.as_ptr(), self.npages) };
    }
}

// SAFETY: the charge is a counter in an `mm_struct` kept by `mmgrab`; it
// may be returned from any thread.
unsafe impl Send for PinnedCharge {}
// SAFETY: `&PinnedCharge` offers nothing.
unsafe impl Sync for PinnedCharge {}

/// The pinned pages of a user memory region, with a kernel mapping.
///
/// # Invariants
///
/// `pages` holds `pages.len()` pages pinned with `FOLL_LONGTERM` (and
/// `FOLL_WRITE` if `writable`), unpinned on drop; `vmap` maps them in
/// order; `_charge` accounts them.
pub(crate) struct PinnedPages {
    // Dropped by hand before the pins it maps; the charge goes last.
    vmap: ManuallyDrop<Vmap>,
    pages: KVVec<*mut bindings::page>,
    writable: bool,
    /// Offset of the region's first byte in the first page.
    offset: usize,
    length: u64,
    _charge: PinnedCharge,
}

// SAFETY: the page pointers are pins owned by this value, released from
// any thread; the memory is accessed through volatile copies only.
unsafe impl Send for PinnedPages {}
// SAFETY: `&PinnedPages` offers only addresses.
unsafe impl Sync for PinnedPages {}

impl PinnedPages {
    /// Pins `length` bytes of the current process at `addr`, writable if
    /// asked, after charging them to the process's locked memory.
    ///
    /// # Errors
    ///
    /// `EINVAL` for an empty or wrapping range, `ENOMEM` over
    /// `RLIMIT_MEMLOCK` (without `CAP_IPC_LOCK`) or out of memory,
    /// `EFAULT` for addresses that are not mapped (or not writable when
    /// `writable`), `EINTR` on a fatal signal.
    pub(crate) fn pin(addr: u64, length: u64, writable: bool) -> Result<Self> {
        let start = usize::try_from(addr).map_err(|_| EINVAL)?;
        let len = usize::try_from(length).map_err(|_| EINVAL)?;
        let end = start.checked_add(len).ok_or(EINVAL)?;
        if len == 0 {
            return Err(EINVAL);
        }
        let first = start >> PAGE_SHIFT;
        let last = end.checked_add(PAGE_SIZE - 1).ok_or(EINVAL)? >> PAGE_SHIFT;
        let npages = last - first;
        let charge = PinnedCharge::new(npages)?;
        // Up to `max_mr_size / PAGE_SIZE` pointers (8 MiB): kvmalloc, so a
        // large request falls back to vmalloc instead of a huge kmalloc.
        let mut pages =
            KVVec::from_elem(core::ptr::null_mut::<bindings::page>(), npages, GFP_KERNEL)?;
        // SAFETY: `pages` has room for `npages` pointers; the range
        // starts page aligned.
        let ret = unsafe {
            rmlx5_pin_user_pages(
                first << PAGE_SHIFT,
                npages,
                writable,
                pages.as_mut_ptr().cast(),
            )
        };
        if ret < 0 {
            kernel::error::to_result(i32::try_from(ret).map_err(|_| EFAULT)?)?;
        }
        // SAFETY: all `npages` pointers are pinned pages, and the result
        // keeps them pinned until after the vmap is gone.
        let vmap = match unsafe { Vmap::new(&mut pages) } {
            Ok(v) => v,
            Err(e) => {
                // SAFETY: the pins were taken above and are returned once.
                unsafe { rmlx5_unpin_user_pages(pages.as_mut_ptr().cast(), npages, false) };
                return Err(e);
            }
        };
        // INVARIANT: pinned, mapped and charged above.
        Ok(Self {
            vmap: ManuallyDrop::new(vmap),
            pages,
            writable,
            offset: start & (PAGE_SIZE - 1),
            length,
            _charge: charge,
        })
    }

    /// Number of pinned pages.
    #[expect(
        dead_code,
        reason = "reported by debugfs once the verbs layer is merged"
    )]
    pub(crate) fn npages(&self) -> usize {
        self.pages.len()
    }

    /// The kernel address of the region's first byte (the HCA's "DMA
    /// address" of the region).
    pub(crate) fn kaddr(&self) -> u64 {
        (self.vmap.addr.as_ptr() as u64).wrapping_add(self.offset as u64)
    }

    /// Length of the region in bytes.
    pub(crate) fn length(&self) -> u64 {
        self.length
    }
}

// SAFETY: the vmap covers every pinned page and lives as long as the
// value; `kaddr()..kaddr() + len()` lies inside it (the region starts at
// `offset` in the first page). Callers that give a region to a device
// check that it starts 8-byte aligned (`rmlx5_ibu_*`).
unsafe impl DmaBacking for PinnedPages {
    fn kaddr(&self) -> u64 {
        PinnedPages::kaddr(self)
    }

    fn len(&self) -> usize {
        // `pin` checked that the length fits a `usize`.
        self.length as usize
    }
}

impl PinnedPages {
    /// Maps every pinned page for DMA by `dev` (both directions); the
    /// result must be dropped before `self` (its owner keeps it in a
    /// field before the pages').
    pub(crate) fn map_for(&self, dev: ARef<device::Device>) -> Result<PageDma> {
        PageDma::map(dev, self.pages.iter().map(|&p| p.cast()))
    }

    /// Offset of the region's first byte in its first page.
    pub(crate) fn offset(&self) -> usize {
        self.offset
    }
}

/// The pinned pages of a memory region mapped for a PCI function's DMA,
/// one page at a time: the translation table (MTT) of the region's key.
///
/// # Invariants
///
/// Each of `addrs` is a live mapping of one page for `dev`, unmapped on
/// drop, while the pages are still pinned.
pub(crate) struct PageDma {
    dev: ARef<device::Device>,
    addrs: KVVec<u64>,
}

impl PageDma {
    /// Maps each of `pages` (live pages the caller keeps until the result
    /// is dropped) for DMA by `dev`, both directions.
    fn map(
        dev: ARef<device::Device>,
        pages: impl ExactSizeIterator<Item = *mut c_void>,
    ) -> Result<Self> {
        let mut addrs = KVVec::with_capacity(pages.len(), GFP_KERNEL)?;
        let mut map = PageDma {
            dev,
            addrs: KVVec::new(),
        };
        for page in pages {
            let mut dma = 0u64;
            // SAFETY: `page` is live until the mapping is dropped (the
            // caller's contract); the shim writes `dma` only on success.
            let r = unsafe { rmlx5_dma_map_pages(raw_dev(&map.dev), page, PAGE_SIZE, &mut dma) };
            if let Err(e) = kernel::error::to_result(r) {
                // `map` unmaps what was mapped so far.
                map.addrs = addrs;
                return Err(e);
            }
            // Within the capacity reserved above: no allocation.
            addrs.push(dma, GFP_KERNEL)?;
        }
        map.addrs = addrs;
        Ok(map)
    }

    /// The bus address of each page, in order.
    pub(crate) fn addrs(&self) -> &[u64] {
        &self.addrs
    }
}

/// Pinned pages of a process mapped for a PCI function: a queue buffer or
/// doorbell record of rdma-core's provider on a ConnectX function. The
/// function reaches it page by page ([`DmaBacking::bus_pages`]); the
/// kernel through the pages' vmap.
///
/// # Invariants
///
/// `map` maps every page of `pages` (fields drop in order: the mapping
/// before the pins).
pub(crate) struct PinnedDma {
    map: PageDma,
    pages: PinnedPages,
}

impl PinnedDma {
    /// Maps `pages` for `dev`.
    pub(crate) fn new(pages: PinnedPages, dev: ARef<device::Device>) -> Result<Self> {
        let map = pages.map_for(dev)?;
        // INVARIANT: `map` maps `pages`.
        Ok(Self { map, pages })
    }
}

// SAFETY: the range is the pinned region's (see `PinnedPages`), kept
// alive with its vmap for as long as the value.
unsafe impl DmaBacking for PinnedDma {
    fn kaddr(&self) -> u64 {
        self.pages.kaddr()
    }

    fn len(&self) -> usize {
        DmaBacking::len(&self.pages)
    }

    fn dma_addr(&self) -> u64 {
        let first = self.map.addrs().first().copied().unwrap_or(0);
        first + self.pages.offset() as u64
    }

    fn bus_pages(&self) -> Option<&[u64]> {
        Some(self.map.addrs())
    }
}

impl Drop for PageDma {
    fn drop(&mut self) {
        for &dma in self.addrs.iter() {
            // SAFETY: by the type invariant each mapping is live and ours,
            // unmapped once; its owner drops it only once the device no
            // longer reaches the pages.
            unsafe { rmlx5_dma_unmap_pages(raw_dev(&self.dev), dma, PAGE_SIZE) };
        }
    }
}

impl Drop for PinnedPages {
    fn drop(&mut self) {
        // SAFETY: `vmap` is dropped here once and never used again.
        unsafe { ManuallyDrop::drop(&mut self.vmap) };
        let n = self.pages.len();
        // SAFETY: by the type invariant these are our pins, returned once;
        // a writable region may have been written by the HCA, so the pages
        // are marked dirty.
        unsafe { rmlx5_unpin_user_pages(self.pages.as_mut_ptr().cast(), n, self.writable) };
    }
}
