// SPDX-License-Identifier: GPL-2.0

//! The verbs API for kernel ULPs, with the C ABI declared in
//! `include/rdma/rmlx5_ib.h`. The C shim exports these symbols with
//! `EXPORT_SYMBOL_GPL`.

use kernel::ffi::c_int;

/// Number of registered rmlx5 HCAs (`rmlx5_ib_num_devices()` in C).
#[no_mangle]
pub extern "C" fn rmlx5_ib_num_devices() -> c_int {
    c_int::try_from(crate::device::num_registered()).unwrap_or(c_int::MAX)
}
