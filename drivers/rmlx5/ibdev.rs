// SPDX-License-Identifier: GPL-2.0

//! The software HCAs and the ConnectX functions as ib_core devices
//! (`ib_core.c`), so kernel ULPs use the generic `ib_*` API on them. Built
//! only when the kernel has `CONFIG_INFINIBAND`; see
//! `Documentation/ib-core.md`.

use kernel::{
    device::{
        Bound,
        Device, //
    },
    error::to_result,
    ffi::{
        c_int,
        c_uint,
        c_void, //
    },
    pci,
    prelude::*,
};

extern "C" {
    fn rmlx5_ibc_register(nr: c_uint) -> c_int;
    fn rmlx5_ibc_unregister();
    fn rmlx5_ibc_add_pci(index: c_uint, dma_device: *mut c_void) -> c_int;
    fn rmlx5_ibc_remove_pci(index: c_uint);
}

/// Registers ConnectX function `pdev`, the verbs device `rmlx5_<index>`,
/// with ib_core, its PCI device as the DMA device.
///
/// # Errors
///
/// ib_core's, or `EBUSY` if that name is registered already.
pub(crate) fn add_pci(index: u16, pdev: &pci::Device<Bound>) -> Result {
    let dev: &Device<Bound> = pdev.as_ref();
    // `device::Device` is a transparent wrapper of the C `struct device`.
    let raw = core::ptr::from_ref(dev).cast::<c_void>().cast_mut();
    // SAFETY: `raw` is the bound PCI device, which outlives the
    // registration (`remove_pci` runs at unbind, before it goes); the
    // verbs device `rmlx5_<index>` is registered with the core.
    to_result(unsafe { rmlx5_ibc_add_pci(c_uint::from(index), raw) })
}

/// Unregisters ConnectX function `rmlx5_<index>` from ib_core, if it was
/// registered: ib_core's clients destroy their objects on it first.
/// Process context.
pub(crate) fn remove_pci(index: u16) {
    // SAFETY: Plain C call; the C side ignores a number it has not
    // registered as a function.
    unsafe { rmlx5_ibc_remove_pci(c_uint::from(index)) };
}

/// The ib_core registrations of `rmlx5_0 .. rmlx5_<n - 1>`; dropping it
/// unregisters them (ib_core runs its clients' remove callbacks first, so
/// the ULPs' objects are destroyed through the ops before it returns).
pub(crate) struct IbDevices(());

impl IbDevices {
    /// Registers the first `nr` software HCAs, or none.
    pub(crate) fn register(nr: usize) -> Result<Self> {
        let nr = c_uint::try_from(nr)?;
        // SAFETY: The HCAs, their platform devices and their EQ interrupts
        // exist (the module registers this after them and drops it before
        // them); the C side registers all or none.
        to_result(unsafe { rmlx5_ibc_register(nr) })?;
        Ok(Self(()))
    }
}

impl Drop for IbDevices {
    fn drop(&mut self) {
        // SAFETY: Registered by `register`; process context (module exit).
        unsafe { rmlx5_ibc_unregister() };
    }
}
