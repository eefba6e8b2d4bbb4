// SPDX-License-Identifier: GPL-2.0

//! Work completions (`ibv_wc`).

use mlx5_prm::opcode::{CqeSyndrome, SendOpcode};

/// Completion status (`enum ibv_wc_status`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WcStatus {
    /// `IBV_WC_SUCCESS`.
    #[default]
    Success,
    /// `IBV_WC_LOC_LEN_ERR`.
    LocLenErr,
    /// `IBV_WC_LOC_QP_OP_ERR`.
    LocQpOpErr,
    /// `IBV_WC_LOC_PROT_ERR`.
    LocProtErr,
    /// `IBV_WC_WR_FLUSH_ERR`.
    WrFlushErr,
    /// `IBV_WC_MW_BIND_ERR`.
    MwBindErr,
    /// `IBV_WC_BAD_RESP_ERR`.
    BadRespErr,
    /// `IBV_WC_LOC_ACCESS_ERR`.
    LocAccessErr,
    /// `IBV_WC_REM_INV_REQ_ERR`.
    RemInvReqErr,
    /// `IBV_WC_REM_ACCESS_ERR`.
    RemAccessErr,
    /// `IBV_WC_REM_OP_ERR`.
    RemOpErr,
    /// `IBV_WC_RETRY_EXC_ERR`.
    RetryExcErr,
    /// `IBV_WC_RNR_RETRY_EXC_ERR`.
    RnrRetryExcErr,
    /// `IBV_WC_REM_ABORT_ERR`.
    RemAbortErr,
    /// `IBV_WC_GENERAL_ERR` (an unknown syndrome).
    GeneralErr,
}

impl WcStatus {
    pub(crate) fn from_syndrome(s: u8) -> WcStatus {
        match CqeSyndrome::try_from(s) {
            Ok(CqeSyndrome::LocalLength) => WcStatus::LocLenErr,
            Ok(CqeSyndrome::LocalQpOp) => WcStatus::LocQpOpErr,
            Ok(CqeSyndrome::LocalProt) => WcStatus::LocProtErr,
            Ok(CqeSyndrome::WrFlush) => WcStatus::WrFlushErr,
            Ok(CqeSyndrome::MwBind) => WcStatus::MwBindErr,
            Ok(CqeSyndrome::BadResp) => WcStatus::BadRespErr,
            Ok(CqeSyndrome::LocalAccess) => WcStatus::LocAccessErr,
            Ok(CqeSyndrome::RemoteInvalReq) => WcStatus::RemInvReqErr,
            Ok(CqeSyndrome::RemoteAccess) => WcStatus::RemAccessErr,
            Ok(CqeSyndrome::RemoteOp) => WcStatus::RemOpErr,
            Ok(CqeSyndrome::TransportRetryExc) => WcStatus::RetryExcErr,
            Ok(CqeSyndrome::RnrRetryExc) => WcStatus::RnrRetryExcErr,
            Ok(CqeSyndrome::RemoteAborted) => WcStatus::RemAbortErr,
            Err(_) => WcStatus::GeneralErr,
        }
    }

    /// The libibverbs name (`ibv_wc_status_str`).
    pub fn as_str(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "Work Request Flushed Error",
            WcStatus::MwBindErr => "memory bind operation error",
            WcStatus::BadRespErr => "bad response error",
            WcStatus::LocAccessErr => "local access error",
            WcStatus::RemInvReqErr => "remote invalid request error",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
            WcStatus::RemAbortErr => "remote aborted error",
            WcStatus::GeneralErr => "general error",
        }
    }
}

/// What completed (`enum ibv_wc_opcode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WcOpcode {
    /// `IBV_WC_SEND`.
    #[default]
    Send,
    /// `IBV_WC_RDMA_WRITE`.
    RdmaWrite,
    /// `IBV_WC_RDMA_READ`.
    RdmaRead,
    /// `IBV_WC_COMP_SWAP`.
    CompSwap,
    /// `IBV_WC_FETCH_ADD`.
    FetchAdd,
    /// `IBV_WC_MASKED_COMP_SWAP`.
    MaskedCompSwap,
    /// `IBV_WC_MASKED_FETCH_ADD`.
    MaskedFetchAdd,
    /// `IBV_WC_RECV`.
    Recv,
    /// `IBV_WC_RECV_RDMA_WITH_IMM`.
    RecvRdmaWithImm,
}

impl WcOpcode {
    pub(crate) fn from_send(op: u8) -> WcOpcode {
        match SendOpcode::try_from(op) {
            Ok(SendOpcode::RdmaWrite | SendOpcode::RdmaWriteImm) => WcOpcode::RdmaWrite,
            Ok(SendOpcode::RdmaRead) => WcOpcode::RdmaRead,
            Ok(SendOpcode::AtomicCs) => WcOpcode::CompSwap,
            Ok(SendOpcode::AtomicFa) => WcOpcode::FetchAdd,
            Ok(SendOpcode::AtomicMaskedCs) => WcOpcode::MaskedCompSwap,
            Ok(SendOpcode::AtomicMaskedFa) => WcOpcode::MaskedFetchAdd,
            _ => WcOpcode::Send,
        }
    }
}

/// Completion flags (`IBV_WC_*` flags, plus the CQE's solicited bit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WcFlags(pub u32);

impl WcFlags {
    /// `IBV_WC_GRH`: the packet carried a GRH (never on rmlx5's LID-routed
    /// InfiniBand ports; decoded from the CQE as rdma-core does).
    pub const GRH: WcFlags = WcFlags(1 << 0);
    /// `IBV_WC_WITH_IMM`: `imm_data` is valid.
    pub const WITH_IMM: WcFlags = WcFlags(1 << 1);
    /// The sender asked for a solicited event (rmlx5 extension).
    pub const SOLICITED: WcFlags = WcFlags(1 << 16);

    /// Whether every bit of `other` is set.
    pub fn contains(self, other: WcFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

/// A work completion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wc {
    /// The `wr_id` of the work request.
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// Operation (meaningful on success, and for send-side errors).
    pub opcode: WcOpcode,
    /// The vendor syndrome of an error completion.
    pub vendor_err: u32,
    /// Bytes received (receives), read or fetched (READ, atomics).
    pub byte_len: u32,
    /// Immediate data (host order) when [`WcFlags::WITH_IMM`] is set.
    pub imm_data: u32,
    /// The local QP number.
    pub qp_num: u32,
    /// Receive completions: the sender's QP number (`flags_rqpn` 23:0).
    pub src_qp: u32,
    /// Receive completions: the sender's LID (`slid`).
    pub slid: u16,
    /// Receive completions: the service level the message came on
    /// (`flags_rqpn` 27:24).
    pub sl: u8,
    /// Receive completions: the DLID path bits of this port (`ml_path`
    /// 6:0; 0 with LMC 0).
    pub dlid_path_bits: u8,
    /// Flags.
    pub flags: WcFlags,
}

impl Wc {
    /// Whether the work request succeeded.
    pub fn is_ok(&self) -> bool {
        self.status == WcStatus::Success
    }
}
