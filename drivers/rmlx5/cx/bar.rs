// SPDX-License-Identifier: GPL-2.0

//! BAR0 as the driver maps it for itself: the initialization segment and
//! the driver's own UAR page, uncached, and nothing else, as mlx5_core maps
//! it (`iseg` and its UAR pages, each with its own `ioremap`).
//!
//! The rest of BAR0 is UAR pages the function hands to user contexts,
//! which map them write-combined (`ib_user.c`, `uverbs`). PAT gives a new
//! mapping the memory type of any mapping it overlaps, so a driver that
//! maps the whole BAR uncached (`pci_iomap`) leaves every process's
//! doorbell page uncached too: correct, but no store is combined. The
//! region is still requested whole (`pci_request_region`), so nothing else
//! claims it.
//!
//! The UAR page is known only once the function gave it (ALLOC_UAR during
//! bring-up, while the command interface already uses the initialization
//! segment), so it is mapped then, once, through a shared reference:
//! [`CxBar::map_uar`] publishes it with a release store that accessors read
//! with acquire.

use core::sync::atomic::{
    AtomicBool,
    AtomicU32,
    AtomicUsize,
    Ordering, //
};
use kernel::{
    bindings,
    device::Core,
    ffi::c_void,
    io::{
        Io,
        Mmio,
        MmioRaw,
        Region, //
    },
    pci,
    prelude::*,
};

use crate::mlx5_prm::init_seg::REAL_TIME_L_OFFSET;

/// Bytes of the initialization segment the driver maps: every register it
/// has, up to the real-time clock.
pub(super) const INIT_SEG_LEN: usize = REAL_TIME_L_OFFSET + 4;
/// The size of a UAR page.
const UAR_PAGE: usize = 4096;

/// Whether UAR page `index` shares a page with the initialization segment
/// (which rmlx5 maps uncached): such a page must not go to a process.
pub(super) fn uar_in_init_seg(index: u32) -> bool {
    (index as usize).saturating_mul(UAR_PAGE) < INIT_SEG_LEN
}

extern "C" {
    fn rmlx5_pci_request_bar0(dev: *mut c_void) -> kernel::ffi::c_int;
    fn rmlx5_pci_release_bar0(dev: *mut c_void);
}

/// One uncached `ioremap` of `len` bytes at BAR0 offset `base`.
///
/// # Invariants
///
/// `addr` is a live mapping of `len` bytes, unmapped on drop.
struct Window {
    base: usize,
    addr: usize,
    len: usize,
}

impl Window {
    fn map(phys: u64, base: usize, len: usize) -> Result<Self> {
        let at = phys.checked_add(base as u64).ok_or(EINVAL)?;
        // SAFETY: `at..at + len` lies in BAR0, which the caller requested.
        let addr = unsafe { bindings::ioremap(at, len) } as usize;
        if addr == 0 {
            return Err(ENOMEM);
        }
        // INVARIANT: mapped above.
        Ok(Self { base, addr, len })
    }

    /// The mapping as an I/O view, and the offset in it of BAR0 offset
    /// `off` for an access of `size` bytes, if it lies inside.
    fn view(&self, off: usize, size: usize) -> Option<(Mmio<'_, Region>, usize)> {
        let rel = off.checked_sub(self.base)?;
        if rel.checked_add(size)? > self.len {
            return None;
        }
        let raw = MmioRaw::<Region>::new_region(self.addr, self.len).ok()?;
        // SAFETY: By the type invariant the range is mapped while `self`
        // lives, which outlives the returned view.
        Some((unsafe { Mmio::from_raw(raw) }, rel))
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        // SAFETY: By the type invariant the mapping is ours and live.
        unsafe { bindings::iounmap(self.addr as *mut c_void) };
    }
}

/// The request of BAR0's region, released on drop.
///
/// # Invariants
///
/// `0` is the `struct device` of a bound PCI function whose BAR0 region
/// this value requested.
struct BarRequest(*mut c_void);

impl Drop for BarRequest {
    fn drop(&mut self) {
        // SAFETY: By the type invariant the region is ours to release.
        unsafe { rmlx5_pci_release_bar0(self.0) };
    }
}

/// The driver's mappings of BAR0.
///
/// # Invariants
///
/// `uar_addr` is 0 or the address of a live uncached mapping of UAR page
/// `uar_index` (one page), unmapped on drop; the mappings go before the
/// region's request (field order).
pub(crate) struct CxBar {
    phys: u64,
    len: u64,
    init: Window,
    uar_addr: AtomicUsize,
    uar_index: AtomicU32,
    /// Set by the one [`CxBar::map_uar`] call that maps the page.
    uar_claimed: AtomicBool,
    _request: BarRequest,
}

// SAFETY: The mappings are addresses of I/O memory, usable from any thread;
// the request's device pointer is only passed to the PCI core.
unsafe impl Send for CxBar {}
// SAFETY: As above; the UAR mapping is published atomically.
unsafe impl Sync for CxBar {}

impl CxBar {
    /// Requests BAR0 of `pdev` and maps its initialization segment.
    pub(super) fn new(pdev: &pci::Device<Core<'_>>, dev: *mut c_void) -> Result<Self> {
        let phys = pdev.resource_start(0)?;
        let len = pdev.resource_len(0)?;
        if len < (2 * UAR_PAGE) as u64 {
            return Err(ENODEV);
        }
        // SAFETY: `dev` is the function being probed.
        kernel::error::to_result(unsafe { rmlx5_pci_request_bar0(dev) })?;
        // INVARIANT: requested just above.
        let request = BarRequest(dev);
        let init = Window::map(phys, 0, INIT_SEG_LEN)?;
        // INVARIANT: no UAR mapping yet.
        Ok(Self {
            phys,
            len,
            init,
            uar_addr: AtomicUsize::new(0),
            uar_index: AtomicU32::new(0),
            uar_claimed: AtomicBool::new(false),
            _request: request,
        })
    }

    /// Maps UAR page `index`, the driver's: once, before anything rings
    /// on it. A second call gets `EBUSY` (the page is mapped, or being
    /// mapped by the first).
    pub(super) fn map_uar(&self, index: u32) -> Result {
        if self
            .uar_claimed
            .compare_exchange(false, true, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return Err(EBUSY);
        }
        let base = usize::try_from(index)?
            .checked_mul(UAR_PAGE)
            .filter(|&b| (b + UAR_PAGE) as u64 <= self.len)
            .ok_or(EINVAL)?;
        // The page may share the second page of the initialization
        // segment (UAR 1); both are uncached, PAT allows it.
        let w = match Window::map(self.phys, base, UAR_PAGE) {
            Ok(w) => w,
            Err(e) => {
                self.uar_claimed.store(false, Ordering::Relaxed);
                return Err(e);
            }
        };
        self.uar_index.store(index, Ordering::Relaxed);
        // Ownership of the mapping passes to `uar_addr` (dropped with
        // `self`); only the claimant gets here, so it is stored once, the
        // index before the address that publishes it.
        let addr = w.addr;
        core::mem::forget(w);
        self.uar_addr.store(addr, Ordering::Release);
        Ok(())
    }

    /// The mapping that holds `size` bytes at BAR0 offset `off`, and the
    /// offset in it.
    fn window(&self, off: usize, size: usize) -> Result<(Mmio<'_, Region>, usize)> {
        if let Some(v) = self.init.view(off, size) {
            return Ok(v);
        }
        let addr = self.uar_addr.load(Ordering::Acquire);
        if addr == 0 {
            return Err(EINVAL);
        }
        let base = self.uar_index.load(Ordering::Relaxed) as usize * UAR_PAGE;
        let rel = off.checked_sub(base).ok_or(EINVAL)?;
        if rel.checked_add(size).ok_or(EINVAL)? > UAR_PAGE {
            return Err(EINVAL);
        }
        let raw = MmioRaw::<Region>::new_region(addr, UAR_PAGE)?;
        // SAFETY: By the type invariant `addr` maps the UAR page while
        // `self` lives, which outlives the view.
        Ok((unsafe { Mmio::from_raw(raw) }, rel))
    }

    /// Reads the 32-bit register at BAR0 offset `off` (`EINVAL` outside
    /// the driver's mappings).
    pub(super) fn try_read32(&self, off: usize) -> Result<u32> {
        let (io, rel) = self.window(off, 4)?;
        io.try_read32(rel)
    }

    /// Writes the 32-bit register at BAR0 offset `off`.
    pub(super) fn try_write32(&self, value: u32, off: usize) -> Result {
        let (io, rel) = self.window(off, 4)?;
        io.try_write32(value, rel)
    }

    /// Writes 64 bits at BAR0 offset `off` with one store.
    pub(super) fn try_write64(&self, value: u64, off: usize) -> Result {
        let (io, rel) = self.window(off, 8)?;
        io.try_write64(value, rel)
    }
}

impl Drop for CxBar {
    fn drop(&mut self) {
        let addr = *self.uar_addr.get_mut();
        if addr != 0 {
            // SAFETY: By the type invariant a live mapping of ours.
            unsafe { bindings::iounmap(addr as *mut c_void) };
        }
        // Then the fields: `init` is unmapped, the region released.
    }
}
