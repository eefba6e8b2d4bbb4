// SPDX-License-Identifier: GPL-2.0

//! The software HCAs as ib_core devices (`ib_core.c`), so kernel ULPs use
//! the generic `ib_*` API on them. Built only when the kernel has
//! `CONFIG_INFINIBAND`; see `Documentation/ib-core.md`.

use kernel::{
    error::to_result,
    ffi::{
        c_int,
        c_uint, //
    },
    prelude::*,
};

extern "C" {
    fn rmlx5_ibc_register(nr: c_uint) -> c_int;
    fn rmlx5_ibc_unregister();
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
