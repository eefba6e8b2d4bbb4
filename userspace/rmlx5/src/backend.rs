// SPDX-License-Identifier: GPL-2.0

//! What the provider needs from below: the control path of the rmlx5 ABI
//! and the mappings it hands out.
//!
//! Two implementations exist. [`kernel`] issues the ioctls on an open
//! `/dev/rmlx5_uverbsN` and mmaps the offsets the kernel returns. [`model`]
//! plays the kernel in-process: it runs `rust/hca-model`, allocates the
//! queue memory in the process, answers the same commands with the same
//! structs and mmap offsets, and makes the kick run the model. The fast
//! path above this trait (WQE building, doorbells, polling, arming) is the
//! same code for both.

pub(crate) mod kernel;
pub(crate) mod model;
#[cfg(feature = "bench-backend")]
pub(crate) mod null;

use std::fmt::Debug;
use std::os::fd::OwnedFd;

use rmlx5_abi::uapi;

use crate::dma::DmaRegion;
use crate::error::Result;

/// One ABI command with its argument (request in, response out).
#[derive(Debug)]
pub(crate) enum Cmd<'a> {
    QueryDevice(&'a mut uapi::QueryDevice),
    QueryPort(&'a mut uapi::QueryPort),
    AllocPd(&'a mut uapi::AllocPd),
    DeallocPd(&'a mut uapi::Destroy),
    RegMr(&'a mut uapi::RegMr),
    DeregMr(&'a mut uapi::Destroy),
    CreateCompChannel(&'a mut uapi::CreateCompChannel),
    CreateCq(&'a mut uapi::CreateCq),
    DestroyCq(&'a mut uapi::Destroy),
    CreateQp(&'a mut uapi::CreateQp),
    ModifyQp(&'a mut uapi::ModifyQp),
    QueryQp(&'a mut uapi::QueryQp),
    DestroyQp(&'a mut uapi::Destroy),
    Kick(&'a mut uapi::Kick),
    GetAsyncFd(&'a mut uapi::GetAsyncFd),
}

impl Cmd<'_> {
    /// The command's name, for errors.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Cmd::QueryDevice(_) => "QUERY_DEVICE",
            Cmd::QueryPort(_) => "QUERY_PORT",
            Cmd::AllocPd(_) => "ALLOC_PD",
            Cmd::DeallocPd(_) => "DEALLOC_PD",
            Cmd::RegMr(_) => "REG_MR",
            Cmd::DeregMr(_) => "DEREG_MR",
            Cmd::CreateCompChannel(_) => "CREATE_COMP_CHANNEL",
            Cmd::CreateCq(_) => "CREATE_CQ",
            Cmd::DestroyCq(_) => "DESTROY_CQ",
            Cmd::CreateQp(_) => "CREATE_QP",
            Cmd::ModifyQp(_) => "MODIFY_QP",
            Cmd::QueryQp(_) => "QUERY_QP",
            Cmd::DestroyQp(_) => "DESTROY_QP",
            Cmd::Kick(_) => "KICK",
            Cmd::GetAsyncFd(_) => "GET_ASYNC_FD",
        }
    }
}

/// An open device context as the provider sees it.
pub(crate) trait Backend: Send + Sync + Debug {
    /// Runs one command. The backend fills in the header's size.
    fn command(&self, cmd: Cmd<'_>) -> Result<()>;

    /// Maps `len` bytes at the mmap `offset` a command returned.
    fn map(&self, offset: u64, len: usize) -> Result<DmaRegion>;

    /// Whether doorbells must be followed by a kick: true for a software
    /// HCA (in the module or in-process), which cannot see the process's
    /// UAR stores; false for a device that sees them itself (a ConnectX
    /// PCI function, whose `QUERY_DEVICE` reports
    /// `uapi::DEVICE_UAR_DOORBELLS`, or the null device). Constant for a
    /// context: the provider reads it once per CQ and QP.
    fn needs_kick(&self) -> bool;

    /// Takes ownership of a file descriptor a command returned.
    fn take_fd(&self, fd: i32) -> Result<OwnedFd>;

    /// Allocates a zeroed, page-aligned data buffer for an MR.
    fn alloc_buffer(&self, len: usize) -> Result<DmaRegion>;

    /// Forgets a buffer from [`Backend::alloc_buffer`] after its MR is
    /// deregistered (or failed to register).
    fn release_buffer(&self, addr: u64);
}
