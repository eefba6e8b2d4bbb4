// SPDX-License-Identifier: GPL-2.0

//! Memory shared with user space: kernel pages a process maps
//! ([`PageBuf`]: UAR page, CQ and QP buffers, doorbell records) and user
//! pages the module pins for a memory region ([`PinnedPages`]).
//!
//! Both give the kernel one contiguous virtual mapping (`vmap`) of their
//! pages, which is the address the HCA model is handed for them: the model
//! names memory by address and checks every access against registered
//! ranges, so it never needs to know the memory is made of pages.
//!
//! This file and `event_file.rs` are the uverbs layer's unsafe layer.

use core::{
    mem::ManuallyDrop,
    ptr::NonNull, //
};
use kernel::{
    bindings,
    ffi::c_void,
    mm::virt::VmaMixedMap,
    page::{
        Page,
        PAGE_SHIFT,
        PAGE_SIZE, //
    },
    prelude::*,
};

use crate::hca::dma::DmaBacking;

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
    pages: KVVec<Page>,
}

impl PageBuf {
    /// Allocates `len` bytes rounded up to whole pages (at least one).
    pub(crate) fn new(len: usize) -> Result<Self> {
        let n = len.div_ceil(PAGE_SIZE).max(1);
        let mut pages = KVVec::with_capacity(n, GFP_KERNEL)?;
        let mut raw = KVVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            let page = Page::alloc_page(GFP_KERNEL | __GFP_ZERO)?;
            raw.push(page.as_ptr(), GFP_KERNEL)?;
            pages.push(page, GFP_KERNEL)?;
        }
        // SAFETY: `raw` holds the pages of `pages`, which the returned
        // `PageBuf` owns and drops after its `vmap`.
        let vmap = unsafe { Vmap::new(&mut raw)? };
        // INVARIANT: `vmap` maps `pages` in order, and `n >= 1`.
        Ok(Self { vmap, pages })
    }

    /// Size in bytes (whole pages): the exact length a mapping must have.
    pub(crate) fn len(&self) -> usize {
        self.vmap.len
    }

    /// The kernel virtual address of the first byte: the address the HCA
    /// is given for this memory.
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
            vma.vm_insert_page(addr, page)?;
            addr = addr.checked_add(PAGE_SIZE).ok_or(EINVAL)?;
        }
        Ok(())
    }
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
