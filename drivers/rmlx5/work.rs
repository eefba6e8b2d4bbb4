// SPDX-License-Identifier: GPL-2.0

//! What the 7.3 workqueue abstraction lacks: waiting for one work item
//! (`flush_work`, through the C shim).

use kernel::bindings;

extern "C" {
    fn rmlx5_shim_flush_work(work: *mut bindings::work_struct);
}

/// Waits until `work` is neither queued nor running.
///
/// # Safety
///
/// `work` must point at an initialised `work_struct` that stays valid
/// during the call.
pub(crate) unsafe fn flush_work(work: *mut bindings::work_struct) {
    // SAFETY: Guaranteed by the caller.
    unsafe { rmlx5_shim_flush_work(work) };
}
