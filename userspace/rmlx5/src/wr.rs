// SPDX-License-Identifier: GPL-2.0

//! Work requests (`ibv_send_wr`, `ibv_recv_wr`).

use std::ops::BitOr;

/// A scatter/gather entry: `length` bytes at `addr` of the MR with `lkey`.
/// Plain data: the HCA checks it against the MR, so a wrong entry is an
/// error completion, never a stray access.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sge {
    /// Address (the MR's IOVA space).
    pub addr: u64,
    /// Length in bytes; zero-length entries are left out of the WQE.
    pub length: u32,
    /// Local key.
    pub lkey: u32,
}

/// A remote buffer: address and rkey.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoteAddr {
    /// Remote address.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
}

impl RemoteAddr {
    /// The same buffer `offset` bytes further.
    pub fn offset(self, offset: u64) -> RemoteAddr {
        RemoteAddr {
            addr: self.addr.wrapping_add(offset),
            rkey: self.rkey,
        }
    }
}

/// The operation of a send work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// `IBV_WR_SEND`.
    Send,
    /// `IBV_WR_SEND_WITH_IMM` (immediate in host order).
    SendImm(u32),
    /// `IBV_WR_RDMA_WRITE`.
    Write(RemoteAddr),
    /// `IBV_WR_RDMA_WRITE_WITH_IMM`.
    WriteImm(RemoteAddr, u32),
    /// `IBV_WR_RDMA_READ`.
    Read(RemoteAddr),
    /// `IBV_WR_ATOMIC_CMP_AND_SWP`: one 8-byte SGE receives the old value.
    CompSwap {
        /// Remote 8-byte aligned target.
        remote: RemoteAddr,
        /// Compared with the target.
        compare: u64,
        /// Stored if equal.
        swap: u64,
    },
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD`: one 8-byte SGE receives the old value.
    FetchAdd {
        /// Remote 8-byte aligned target.
        remote: RemoteAddr,
        /// Added to the target.
        add: u64,
    },
    /// Masked compare and swap (`mlx5dv` extended atomic, 8 bytes).
    MaskedCompSwap {
        /// Remote 8-byte aligned target.
        remote: RemoteAddr,
        /// Compared with the target under `compare_mask`.
        compare: u64,
        /// Bits taking part in the comparison.
        compare_mask: u64,
        /// Stored under `swap_mask` if equal.
        swap: u64,
        /// Bits replaced.
        swap_mask: u64,
    },
    /// Masked fetch and add (`mlx5dv` extended atomic, 8 bytes): carries
    /// stop at the bits set in `boundary`.
    MaskedFetchAdd {
        /// Remote 8-byte aligned target.
        remote: RemoteAddr,
        /// Added to the target.
        add: u64,
        /// Field boundaries.
        boundary: u64,
    },
}

/// Send flags (`IBV_SEND_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendFlags(pub u32);

impl SendFlags {
    /// No flag: unsignaled (unless the QP signals all).
    pub const NONE: SendFlags = SendFlags(0);
    /// `IBV_SEND_FENCE`: wait for earlier READs and atomics.
    pub const FENCE: SendFlags = SendFlags(1 << 0);
    /// `IBV_SEND_SIGNALED`: write a completion.
    pub const SIGNALED: SendFlags = SendFlags(1 << 1);
    /// `IBV_SEND_SOLICITED`: the receiver gets a solicited event.
    pub const SOLICITED: SendFlags = SendFlags(1 << 2);

    /// Whether every bit of `other` is set.
    pub fn contains(self, other: SendFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for SendFlags {
    type Output = SendFlags;

    fn bitor(self, rhs: SendFlags) -> SendFlags {
        SendFlags(self.0 | rhs.0)
    }
}

/// A send work request.
#[derive(Clone, Copy, Debug)]
pub struct SendWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Operation.
    pub op: SendOp,
    /// Gather list (or, for READ and atomics, scatter list).
    pub sg_list: &'a [Sge],
    /// Inline payload, copied into the WQE instead of `sg_list`
    /// (`IBV_SEND_INLINE`); SEND and WRITE only.
    pub inline: Option<&'a [u8]>,
    /// Flags.
    pub flags: SendFlags,
}

impl<'a> SendWr<'a> {
    /// A signaled work request with gather list `sg_list`.
    pub fn new(wr_id: u64, op: SendOp, sg_list: &'a [Sge]) -> Self {
        SendWr {
            wr_id,
            op,
            sg_list,
            inline: None,
            flags: SendFlags::SIGNALED,
        }
    }

    /// A signaled work request carrying `data` inline.
    pub fn inline(wr_id: u64, op: SendOp, data: &'a [u8]) -> Self {
        SendWr {
            wr_id,
            op,
            sg_list: &[],
            inline: Some(data),
            flags: SendFlags::SIGNALED,
        }
    }

    /// The same request with `flags`.
    pub fn with_flags(self, flags: SendFlags) -> Self {
        SendWr { flags, ..self }
    }
}

/// A receive work request.
#[derive(Clone, Copy, Debug)]
pub struct RecvWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Scatter list (may be empty: a zero-byte receive).
    pub sg_list: &'a [Sge],
}

impl<'a> RecvWr<'a> {
    /// A receive into `sg_list`.
    pub fn new(wr_id: u64, sg_list: &'a [Sge]) -> Self {
        RecvWr { wr_id, sg_list }
    }
}
