// SPDX-License-Identifier: GPL-2.0

//! The rmlx5 user/kernel ABI.
//!
//! Everything a process and `rmlx5.ko` exchange through
//! `/dev/rmlx5_uverbsN`: ioctl numbers, the `#[repr(C)]` argument structs
//! (each one request and response in one, copied in and back out), the
//! values of the enums they carry, and the encoding of mmap offsets. The C
//! view of the same ABI is `include/uapi/rdma/rmlx5-abi.h`; a test compiles
//! that header and checks every size, offset and number against this crate.
//!
//! Rules every command follows:
//!
//! - The argument starts with [`uapi::CmdHdr`]: the size of the struct as
//!   the caller knows it, and flags. The kernel accepts any size from the
//!   first version of the struct up to a page; bytes it does not know must
//!   be zero (so old kernels refuse what they cannot honour, and the ABI can
//!   grow), and it writes back at most `size` bytes.
//! - Every `reserved` field and every unused flag bit must be zero.
//! - Structs have no implicit padding: every hole is a named reserved field,
//!   so the kernel never copies uninitialised bytes to user space.
//!
//! The crate is `no_std` and uses `core` only so the kernel compiles the same
//! files with `#[path]`; as in `mlx5-prm`, this file only declares modules
//! (`check`, `ioctl`, `mmap`, `uapi`, `wire`) and they refer to each other as `super::`.

#![no_std]

pub mod check;
pub mod ioctl;
pub mod mmap;
pub mod uapi;
pub mod wire;
