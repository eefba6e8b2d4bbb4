// SPDX-License-Identifier: GPL-2.0

//! The code spaces of mlx5: send opcodes, CQE opcodes, CQE syndromes and
//! event types.
//!
//! Each enum has the header's values as discriminants. `TryFrom<u8>` turns a
//! raw byte into a variant and returns an [`Error`] for a value that no
//! header defines; `From<Enum> for u8` goes back. `ALL` lists every variant
//! (used by the tests and handy for tables).

use super::error::Error;

/// Declares a `#[repr(u8)]` enum with `ALL`, `From<Self> for u8` and a
/// `TryFrom<u8>` that fails with `Error::$err(raw)` for unknown values.
macro_rules! raw_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident, unknown = $err:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $value:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum $name {
            $( $(#[$vmeta])* $variant = $value, )*
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];
        }

        impl From<$name> for u8 {
            #[inline]
            fn from(v: $name) -> u8 {
                v as u8
            }
        }

        impl TryFrom<u8> for $name {
            type Error = Error;

            #[inline]
            fn try_from(raw: u8) -> Result<Self, Error> {
                match raw {
                    $( $value => Ok($name::$variant), )*
                    _ => Err(Error::$err(raw)),
                }
            }
        }
    };
}

raw_enum! {
    /// A send WQE opcode: `mlx5_wqe_ctrl_seg.opmod_idx_opcode` bits 7:0, and
    /// the top byte of `mlx5_cqe64.sop_drop_qpn` in a requester CQE. Values
    /// are the union of the `MLX5_OPCODE_*` enums of mlx5dv.h and the
    /// kernel's device.h.
    pub enum SendOpcode, unknown = UnknownSendOpcode {
        /// `MLX5_OPCODE_NOP`: no operation; completes like any other WQE.
        Nop = 0x00,
        /// `MLX5_OPCODE_SEND_INVAL`: send, and invalidate the rkey in the
        /// control segment's `imm` at the responder.
        SendInval = 0x01,
        /// `MLX5_OPCODE_RDMA_WRITE`.
        RdmaWrite = 0x08,
        /// `MLX5_OPCODE_RDMA_WRITE_IMM`: RDMA write with immediate data,
        /// which consumes a receive WQE at the responder.
        RdmaWriteImm = 0x09,
        /// `MLX5_OPCODE_SEND`.
        Send = 0x0a,
        /// `MLX5_OPCODE_SEND_IMM`: send with immediate data.
        SendImm = 0x0b,
        /// `MLX5_OPCODE_TSO` (mlx5dv.h) / `MLX5_OPCODE_LSO` (kernel): Ethernet
        /// large send offload.
        Lso = 0x0e,
        /// `MLX5_OPCODE_RDMA_READ`.
        RdmaRead = 0x10,
        /// `MLX5_OPCODE_ATOMIC_CS`: 8-byte compare and swap.
        AtomicCs = 0x11,
        /// `MLX5_OPCODE_ATOMIC_FA`: 8-byte fetch and add.
        AtomicFa = 0x12,
        /// `MLX5_OPCODE_ATOMIC_MASKED_CS`: masked compare and swap.
        AtomicMaskedCs = 0x14,
        /// `MLX5_OPCODE_ATOMIC_MASKED_FA`: masked fetch and add.
        AtomicMaskedFa = 0x15,
        /// `MLX5_OPCODE_BIND_MW` (kernel): bind a memory window.
        BindMw = 0x18,
        /// `MLX5_OPCODE_FMR` (mlx5dv.h): fast memory registration.
        Fmr = 0x19,
        /// `MLX5_OPCODE_LOCAL_INVAL` (mlx5dv.h): local invalidate.
        LocalInval = 0x1b,
        /// `MLX5_OPCODE_CONFIG_CMD`.
        ConfigCmd = 0x1f,
        /// `MLX5_OPCODE_SET_PSV`: set a signature protection value.
        SetPsv = 0x20,
        /// `MLX5_OPCODE_GET_PSV` (kernel).
        GetPsv = 0x21,
        /// `MLX5_OPCODE_CHECK_PSV` (kernel).
        CheckPsv = 0x22,
        /// `MLX5_OPCODE_DUMP` (kernel).
        Dump = 0x23,
        /// `MLX5_OPCODE_UMR`: user-mode memory registration.
        Umr = 0x25,
        /// `MLX5_OPCODE_RGET_PSV` (kernel).
        RgetPsv = 0x26,
        /// `MLX5_OPCODE_RCHECK_PSV` (kernel).
        RcheckPsv = 0x27,
        /// `MLX5_OPCODE_TAG_MATCHING` (mlx5dv.h).
        TagMatching = 0x28,
        /// `MLX5_OPCODE_ENHANCED_MPSW` (kernel): Ethernet multi-packet send.
        EnhancedMpsw = 0x29,
        /// `MLX5_OPCODE_FLOW_TBL_ACCESS`.
        FlowTblAccess = 0x2c,
        /// `MLX5_OPCODE_ACCESS_ASO` (kernel).
        AccessAso = 0x2d,
        /// `MLX5_OPCODE_MMO` (mlx5dv.h): memory-to-memory offload.
        Mmo = 0x2f,
    }
}

raw_enum! {
    /// A CQE opcode: `mlx5_cqe64.op_own` bits 7:4 (`mlx5dv_get_cqe_opcode`).
    pub enum CqeOpcode, unknown = UnknownCqeOpcode {
        /// `MLX5_CQE_REQ`: a send WQE completed successfully.
        Req = 0,
        /// `MLX5_CQE_RESP_WR_IMM`: a receive WQE was consumed by an RDMA
        /// write with immediate.
        RespWrImm = 1,
        /// `MLX5_CQE_RESP_SEND`: a receive WQE was consumed by a send.
        RespSend = 2,
        /// `MLX5_CQE_RESP_SEND_IMM`: ... by a send with immediate.
        RespSendImm = 3,
        /// `MLX5_CQE_RESP_SEND_INV`: ... by a send with invalidate.
        RespSendInv = 4,
        /// `MLX5_CQE_RESIZE_CQ`: marks the end of the old buffer of a
        /// resized CQ.
        ResizeCq = 5,
        /// `MLX5_CQE_NO_PACKET` (mlx5dv.h): a striding RQ filler.
        NoPacket = 6,
        /// `MLX5_CQE_SIG_ERR`: signature error.
        SigErr = 12,
        /// `MLX5_CQE_REQ_ERR`: a send WQE completed in error; the CQE has the
        /// `mlx5_err_cqe` layout.
        ReqErr = 13,
        /// `MLX5_CQE_RESP_ERR`: a receive WQE completed in error; the CQE has
        /// the `mlx5_err_cqe` layout.
        RespErr = 14,
        /// `MLX5_CQE_INVALID`: not written by the device since the buffer was
        /// initialised (op_own 0xf0).
        Invalid = 15,
    }
}

impl CqeOpcode {
    /// Whether a CQE with this opcode has the error layout
    /// (`mlx5_err_cqe`), i.e. the opcode is `MLX5_CQE_REQ_ERR` or
    /// `MLX5_CQE_RESP_ERR`.
    #[inline]
    pub fn is_error(self) -> bool {
        matches!(self, CqeOpcode::ReqErr | CqeOpcode::RespErr)
    }
}

raw_enum! {
    /// Why a work request completed in error: `mlx5_err_cqe.syndrome`, the
    /// `MLX5_CQE_SYNDROME_*` values.
    pub enum CqeSyndrome, unknown = UnknownSyndrome {
        /// `MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR`.
        LocalLength = 0x01,
        /// `MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR`.
        LocalQpOp = 0x02,
        /// `MLX5_CQE_SYNDROME_LOCAL_PROT_ERR`.
        LocalProt = 0x04,
        /// `MLX5_CQE_SYNDROME_WR_FLUSH_ERR`: flushed because the QP is in
        /// the error state.
        WrFlush = 0x05,
        /// `MLX5_CQE_SYNDROME_MW_BIND_ERR`.
        MwBind = 0x06,
        /// `MLX5_CQE_SYNDROME_BAD_RESP_ERR`.
        BadResp = 0x10,
        /// `MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR`.
        LocalAccess = 0x11,
        /// `MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR`.
        RemoteInvalReq = 0x12,
        /// `MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR`.
        RemoteAccess = 0x13,
        /// `MLX5_CQE_SYNDROME_REMOTE_OP_ERR`.
        RemoteOp = 0x14,
        /// `MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR`.
        TransportRetryExc = 0x15,
        /// `MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR`.
        RnrRetryExc = 0x16,
        /// `MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR`.
        RemoteAborted = 0x22,
    }
}

/// `MLX5_CQE_VENDOR_SYNDROME_ODP_PFAULT`: the one named value of
/// `mlx5_err_cqe.vendor_err_synd`.
pub const VENDOR_SYNDROME_ODP_PFAULT: u8 = 0x93;

raw_enum! {
    /// An event type: `mlx5_eqe.type`, the kernel's `enum mlx5_event`
    /// (`MLX5_EVENT_TYPE_*`, without the software-only `NOTIFY_ANY` and
    /// `MAX`).
    pub enum EventType, unknown = UnknownEventType {
        /// `MLX5_EVENT_TYPE_COMP`: a CQ produced a CQE while armed.
        Comp = 0x00,
        /// `MLX5_EVENT_TYPE_PATH_MIG`: path migrated.
        PathMig = 0x01,
        /// `MLX5_EVENT_TYPE_COMM_EST`: communication established.
        CommEst = 0x02,
        /// `MLX5_EVENT_TYPE_SQ_DRAINED`.
        SqDrained = 0x03,
        /// `MLX5_EVENT_TYPE_CQ_ERROR`: CQ overrun or access violation.
        CqError = 0x04,
        /// `MLX5_EVENT_TYPE_WQ_CATAS_ERROR`: local work queue catastrophic
        /// error.
        WqCatasError = 0x05,
        /// `MLX5_EVENT_TYPE_PATH_MIG_FAILED`.
        PathMigFailed = 0x07,
        /// `MLX5_EVENT_TYPE_INTERNAL_ERROR`.
        InternalError = 0x08,
        /// `MLX5_EVENT_TYPE_PORT_CHANGE`.
        PortChange = 0x09,
        /// `MLX5_EVENT_TYPE_CMD`: command completion.
        Cmd = 0x0a,
        /// `MLX5_EVENT_TYPE_PAGE_REQUEST`.
        PageRequest = 0x0b,
        /// `MLX5_EVENT_TYPE_PAGE_FAULT`.
        PageFault = 0x0c,
        /// `MLX5_EVENT_TYPE_NIC_VPORT_CHANGE`.
        NicVportChange = 0x0d,
        /// `MLX5_EVENT_TYPE_ESW_FUNCTIONS_CHANGED`.
        EswFunctionsChanged = 0x0e,
        /// `MLX5_EVENT_TYPE_VHCA_STATE_CHANGE`.
        VhcaStateChange = 0x0f,
        /// `MLX5_EVENT_TYPE_WQ_INVAL_REQ_ERROR`: invalid request local work
        /// queue error.
        WqInvalReqError = 0x10,
        /// `MLX5_EVENT_TYPE_WQ_ACCESS_ERROR`: local access violation work
        /// queue error.
        WqAccessError = 0x11,
        /// `MLX5_EVENT_TYPE_SRQ_CATAS_ERROR`.
        SrqCatasError = 0x12,
        /// `MLX5_EVENT_TYPE_SRQ_LAST_WQE`: last WQE reached on a QP attached
        /// to an SRQ.
        SrqLastWqe = 0x13,
        /// `MLX5_EVENT_TYPE_SRQ_RQ_LIMIT`: SRQ limit reached.
        SrqRqLimit = 0x14,
        /// `MLX5_EVENT_TYPE_GPIO_EVENT`.
        GpioEvent = 0x15,
        /// `MLX5_EVENT_TYPE_PORT_MODULE_EVENT`.
        PortModuleEvent = 0x16,
        /// `MLX5_EVENT_TYPE_TEMP_WARN_EVENT`.
        TempWarnEvent = 0x17,
        /// `MLX5_EVENT_TYPE_XRQ_ERROR`.
        XrqError = 0x18,
        /// `MLX5_EVENT_TYPE_REMOTE_CONFIG`.
        RemoteConfig = 0x19,
        /// `MLX5_EVENT_TYPE_DB_BF_CONGESTION`.
        DbBfCongestion = 0x1a,
        /// `MLX5_EVENT_TYPE_STALL_EVENT`.
        StallEvent = 0x1b,
        /// `MLX5_EVENT_TYPE_DCT_DRAINED`.
        DctDrained = 0x1c,
        /// `MLX5_EVENT_TYPE_DCT_KEY_VIOLATION`.
        DctKeyViolation = 0x1d,
        /// `MLX5_EVENT_TYPE_FPGA_ERROR`.
        FpgaError = 0x20,
        /// `MLX5_EVENT_TYPE_FPGA_QP_ERROR`.
        FpgaQpError = 0x21,
        /// `MLX5_EVENT_TYPE_GENERAL_EVENT`.
        GeneralEvent = 0x22,
        /// `MLX5_EVENT_TYPE_MONITOR_COUNTER`.
        MonitorCounter = 0x24,
        /// `MLX5_EVENT_TYPE_PPS_EVENT`.
        PpsEvent = 0x25,
        /// `MLX5_EVENT_TYPE_DEVICE_TRACER`.
        DeviceTracer = 0x26,
        /// `MLX5_EVENT_TYPE_OBJECT_CHANGE`.
        ObjectChange = 0x27,
    }
}

impl EventType {
    /// Whether the event names a QP, RQ, SQ or SRQ, so that its data is a
    /// `mlx5_eqe_qp_srq` (resource type and number). These are the QP and
    /// SRQ affiliated asynchronous events.
    pub fn is_qp_srq_event(self) -> bool {
        matches!(
            self,
            EventType::PathMig
                | EventType::CommEst
                | EventType::SqDrained
                | EventType::SrqLastWqe
                | EventType::SrqRqLimit
                | EventType::WqCatasError
                | EventType::PathMigFailed
                | EventType::WqInvalReqError
                | EventType::WqAccessError
                | EventType::SrqCatasError
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_converts_or_fails_cleanly() {
        for raw in 0..=u8::MAX {
            match SendOpcode::try_from(raw) {
                Ok(op) => assert_eq!(u8::from(op), raw),
                Err(e) => assert_eq!(e, Error::UnknownSendOpcode(raw)),
            }
            match CqeOpcode::try_from(raw) {
                Ok(op) => assert_eq!(u8::from(op), raw),
                Err(e) => assert_eq!(e, Error::UnknownCqeOpcode(raw)),
            }
            match CqeSyndrome::try_from(raw) {
                Ok(s) => assert_eq!(u8::from(s), raw),
                Err(e) => assert_eq!(e, Error::UnknownSyndrome(raw)),
            }
            match EventType::try_from(raw) {
                Ok(t) => assert_eq!(u8::from(t), raw),
                Err(e) => assert_eq!(e, Error::UnknownEventType(raw)),
            }
        }
    }

    #[test]
    fn all_lists_every_variant_once() {
        let count = |f: fn(u8) -> bool| (0..=u8::MAX).filter(|&b| f(b)).count();
        assert_eq!(
            SendOpcode::ALL.len(),
            count(|b| SendOpcode::try_from(b).is_ok())
        );
        assert_eq!(
            CqeOpcode::ALL.len(),
            count(|b| CqeOpcode::try_from(b).is_ok())
        );
        assert_eq!(
            CqeSyndrome::ALL.len(),
            count(|b| CqeSyndrome::try_from(b).is_ok())
        );
        assert_eq!(
            EventType::ALL.len(),
            count(|b| EventType::try_from(b).is_ok())
        );
    }

    #[test]
    fn values_the_formats_page_names() {
        assert_eq!(u8::from(SendOpcode::Send), 0x0a);
        assert_eq!(u8::from(SendOpcode::SendImm), 0x0b);
        assert_eq!(u8::from(SendOpcode::AtomicCs), 0x11);
        assert_eq!(u8::from(SendOpcode::AtomicMaskedFa), 0x15);
        assert_eq!(u8::from(SendOpcode::Umr), 0x25);
        assert_eq!(u8::from(CqeOpcode::ReqErr), 13);
        assert!(CqeOpcode::RespErr.is_error());
        assert!(!CqeOpcode::Req.is_error());
        assert_eq!(u8::from(CqeSyndrome::RemoteAborted), 0x22);
        assert_eq!(u8::from(EventType::CqError), 0x04);
        assert!(EventType::SrqLastWqe.is_qp_srq_event());
        assert!(!EventType::Comp.is_qp_srq_event());
    }
}
