// SPDX-License-Identifier: GPL-2.0

//! The QP context (`qpc`) and its address path (`ads`), as CREATE_QP and
//! the state transitions of `cmd_qp` carry them.
//!
//! [`Qpc`] models the fields a driver sets for an RC (and UC/UD) QP over
//! InfiniBand: service type, PD, UAR, queue geometry, CQs, doorbell
//! record, the primary path, PSNs, retry and timeout parameters, the
//! RDMA read/atomic limits and remote access bits, and the Q_Key of UD and
//! QP1 QPs. Each transition reads only the fields that belong to it (RC
//! INIT: pkey index, port, access bits; RTR: path, MTU, remote QPN,
//! receive PSN, responder resources, RNR NAK timer; RTS: send PSN,
//! retries, ACK timeout, initiator depth; UD INIT: pkey index, port,
//! Q_Key; UD RTS: send PSN) plus the optional ones named in
//! `opt_param_mask` (`OPTPAR_*`).
//!
//! Sizes follow mlx5 conventions: `log_rq_size` and `log_sq_size` are log2
//! of the number of WQEs, `log_rq_stride` is log2 of the receive WQE size
//! minus 4, `log_page_size` is log2 of the buffer's page size minus 12,
//! `log_sra_max` / `log_rra_max` are log2 of the initiator depth and
//! responder resources.
//!
//! `state` is written by the device only (QUERY_QP); the inputs leave it 0.
//! Its values are `STATE_*`, which [`state_to_ib`] and [`state_from_ib`]
//! convert to and from `enum ib_qp_state` as mlx5_ib does.

use super::ifc::ifc_layout;

/// `qpc.state`: reset (`MLX5_QP_STATE_RST`, `MLX5_QPC_STATE_RST`).
pub const STATE_RST: u8 = 0x0;
/// `qpc.state`: initialised (`MLX5_QP_STATE_INIT`).
pub const STATE_INIT: u8 = 0x1;
/// `qpc.state`: ready to receive (`MLX5_QP_STATE_RTR`).
pub const STATE_RTR: u8 = 0x2;
/// `qpc.state`: ready to send (`MLX5_QP_STATE_RTS`).
pub const STATE_RTS: u8 = 0x3;
/// `qpc.state`: send queue error (`MLX5_QP_STATE_SQER`).
pub const STATE_SQER: u8 = 0x4;
/// `qpc.state`: send queue drained (`MLX5_QP_STATE_SQD`, qp.h's value,
/// which mlx5_ib reads and writes). mlx5_ifc.h's `MLX5_QPC_STATE_SQD` is
/// 0x7, the value qp.h calls [`STATE_SQ_DRAINING`].
pub const STATE_SQD: u8 = 0x5;
/// `qpc.state`: error (`MLX5_QP_STATE_ERR`, `MLX5_QPC_STATE_ERR`).
pub const STATE_ERR: u8 = 0x6;
/// `qpc.state`: send queue draining, on the way to SQD
/// (`MLX5_QP_STATE_SQ_DRAINING`; mlx5_ifc.h's `MLX5_QPC_STATE_SQD`).
pub const STATE_SQ_DRAINING: u8 = 0x7;
/// `qpc.state`: suspended (`MLX5_QP_STATE_SUSPENDED`).
pub const STATE_SUSPENDED: u8 = 0x9;

/// The `enum ib_qp_state` value of `qpc.state` `state` (`IB_QPS_RESET` 0,
/// `INIT` 1, `RTR` 2, `RTS` 3, `SQD` 4, `SQE` 5, `ERR` 6), as mlx5_ib's
/// `to_ib_qp_state`: SQ draining reads as SQD. `None` for a state IB
/// verbs have no name for (suspended, or an undefined value).
pub const fn state_to_ib(state: u8) -> Option<u8> {
    match state {
        STATE_RST => Some(0),
        STATE_INIT => Some(1),
        STATE_RTR => Some(2),
        STATE_RTS => Some(3),
        STATE_SQD | STATE_SQ_DRAINING => Some(4),
        STATE_SQER => Some(5),
        STATE_ERR => Some(6),
        _ => None,
    }
}

/// The `qpc.state` of the `enum ib_qp_state` value `ib`, as mlx5_ib's
/// `to_mlx5_state`; `None` above `IB_QPS_ERR` (6).
pub const fn state_from_ib(ib: u8) -> Option<u8> {
    match ib {
        0 => Some(STATE_RST),
        1 => Some(STATE_INIT),
        2 => Some(STATE_RTR),
        3 => Some(STATE_RTS),
        4 => Some(STATE_SQD),
        5 => Some(STATE_SQER),
        6 => Some(STATE_ERR),
        _ => None,
    }
}

/// `qpc.st`: reliable connected (`MLX5_QPC_ST_RC`).
pub const ST_RC: u8 = 0x0;
/// `qpc.st`: unreliable connected (`MLX5_QPC_ST_UC`).
pub const ST_UC: u8 = 0x1;
/// `qpc.st`: unreliable datagram (`MLX5_QPC_ST_UD`).
pub const ST_UD: u8 = 0x2;
/// `qpc.st`: XRC (`MLX5_QPC_ST_XRC`).
pub const ST_XRC: u8 = 0x3;
/// `qpc.st`: the subnet management QP, QP0 (`MLX5_QPC_ST_QP0`).
pub const ST_QP0: u8 = 0x7;
/// `qpc.st`: the general services QP, QP1 (`MLX5_QPC_ST_QP1`; mlx5_ib's
/// `MLX5_IB_QPT_HW_GSI`). The device returns an ordinary QPN for it; the
/// driver calls it QP 1, and packets to and from it carry QPN 1.
pub const ST_QP1: u8 = 0x8;

/// `qpc.pm_state`: path migration armed (`MLX5_QPC_PM_STATE_ARMED`).
pub const PM_STATE_ARMED: u8 = 0x0;
/// `qpc.pm_state`: re-arm (`MLX5_QPC_PM_STATE_REARM`).
pub const PM_STATE_REARM: u8 = 0x1;
/// `qpc.pm_state`: migrated, the state a QP without an alternate path is
/// created in (`MLX5_QPC_PM_STATE_MIGRATED`).
pub const PM_STATE_MIGRATED: u8 = 0x3;

/// `qpc.mtu`: 256 bytes (`MLX5_QPC_MTU_256_BYTES`, the IB enum value).
pub const MTU_256: u8 = 0x1;
/// `qpc.mtu`: 512 bytes.
pub const MTU_512: u8 = 0x2;
/// `qpc.mtu`: 1024 bytes.
pub const MTU_1K: u8 = 0x3;
/// `qpc.mtu`: 2048 bytes.
pub const MTU_2K: u8 = 0x4;
/// `qpc.mtu`: 4096 bytes (`MLX5_QPC_MTU_4K_BYTES`).
pub const MTU_4K: u8 = 0x5;

/// `qpc.rq_type`: a regular receive queue (`MLX5_NON_ZERO_RQ`).
pub const RQ_TYPE_REGULAR: u8 = 0x0;
/// `qpc.rq_type`: receives come from the SRQ in `srqn_rmpn_xrqn`
/// (`MLX5_SRQ_RQ`).
pub const RQ_TYPE_SRQ: u8 = 0x1;
/// `qpc.rq_type`: no receive queue (`MLX5_ZERO_LEN_RQ`).
pub const RQ_TYPE_ZERO_LEN: u8 = 0x3;

/// `qpc.atomic_mode`: IB-spec atomics (`MLX5_QPC_ATOMIC_MODE_IB_SPEC`).
pub const ATOMIC_MODE_IB_SPEC: u8 = 0x1;
/// `qpc.atomic_mode`: 8-byte atomics only (`MLX5_QPC_ATOMIC_MODE_ONLY_8B`).
pub const ATOMIC_MODE_ONLY_8B: u8 = 0x2;
/// `qpc.atomic_mode`: atomics up to 8 bytes
/// (`MLX5_QPC_ATOMIC_MODE_UP_TO_8B`).
pub const ATOMIC_MODE_UP_TO_8B: u8 = 0x3;

/// `qpc.ts_format`: free-running timestamps in CQEs
/// (`MLX5_TIMESTAMP_FORMAT_FREE_RUNNING`).
pub const TS_FORMAT_FREE_RUNNING: u8 = 0x0;
/// `qpc.ts_format`: the device's default format
/// (`MLX5_TIMESTAMP_FORMAT_DEFAULT`).
pub const TS_FORMAT_DEFAULT: u8 = 0x1;
/// `qpc.ts_format`: real-time timestamps (`MLX5_TIMESTAMP_FORMAT_REAL_TIME`).
pub const TS_FORMAT_REAL_TIME: u8 = 0x2;

/// `opt_param_mask`: `rre` is given (`MLX5_QP_OPTPAR_RRE`).
pub const OPTPAR_RRE: u32 = 1 << 1;
/// `opt_param_mask`: `rae` is given (`MLX5_QP_OPTPAR_RAE`).
pub const OPTPAR_RAE: u32 = 1 << 2;
/// `opt_param_mask`: `rwe` is given (`MLX5_QP_OPTPAR_RWE`).
pub const OPTPAR_RWE: u32 = 1 << 3;
/// `opt_param_mask`: the path's `pkey_index` is given
/// (`MLX5_QP_OPTPAR_PKEY_INDEX`).
pub const OPTPAR_PKEY_INDEX: u32 = 1 << 4;
/// `opt_param_mask`: `q_key` is given (`MLX5_QP_OPTPAR_Q_KEY`).
pub const OPTPAR_Q_KEY: u32 = 1 << 5;
/// `opt_param_mask`: `min_rnr_nak` is given (`MLX5_QP_OPTPAR_RNR_TIMEOUT`).
pub const OPTPAR_RNR_TIMEOUT: u32 = 1 << 6;
/// `opt_param_mask`: the primary path is given
/// (`MLX5_QP_OPTPAR_PRIMARY_ADDR_PATH`).
pub const OPTPAR_PRIMARY_ADDR_PATH: u32 = 1 << 7;
/// `opt_param_mask`: `log_sra_max` is given (`MLX5_QP_OPTPAR_SRA_MAX`).
pub const OPTPAR_SRA_MAX: u32 = 1 << 8;
/// `opt_param_mask`: `log_rra_max` is given (`MLX5_QP_OPTPAR_RRA_MAX`).
pub const OPTPAR_RRA_MAX: u32 = 1 << 9;
/// `opt_param_mask`: `pm_state` is given (`MLX5_QP_OPTPAR_PM_STATE`).
pub const OPTPAR_PM_STATE: u32 = 1 << 10;
/// `opt_param_mask`: `retry_count` is given (`MLX5_QP_OPTPAR_RETRY_COUNT`).
pub const OPTPAR_RETRY_COUNT: u32 = 1 << 12;
/// `opt_param_mask`: `rnr_retry` is given (`MLX5_QP_OPTPAR_RNR_RETRY`).
pub const OPTPAR_RNR_RETRY: u32 = 1 << 13;
/// `opt_param_mask`: the path's `ack_timeout` is given
/// (`MLX5_QP_OPTPAR_ACK_TIMEOUT`).
pub const OPTPAR_ACK_TIMEOUT: u32 = 1 << 14;
/// `opt_param_mask`: the path's `vhca_port_num` is given
/// (`MLX5_QP_OPTPAR_PRI_PORT`).
pub const OPTPAR_PRI_PORT: u32 = 1 << 16;

ifc_layout! {
    /// An address path (`ads`): where the QP's packets go, for the
    /// InfiniBand link layer. The RoCE fields (`rmac`, `udp_sport`,
    /// `dscp`, `ecn`, `eth_prio`) and the force-loopback bit are not
    /// modelled.
    pub struct Ads = "ads", bits 0x160 {
        /// P_Key index.
        pkey_index: u16 = [0x10, 0x10],
        /// Packets carry a GRH (`rgid_rip`, `hop_limit`, `tclass`,
        /// `flow_label`, `src_addr_index`).
        grh: bool = [0x28, 1],
        /// Source path bits: the low LMC bits of the port's LID, 7 bits.
        mlid: u8 = [0x29, 7],
        /// Destination LID.
        rlid: u16 = [0x30, 0x10],
        /// Local ACK timeout: 4.096 us * 2^ack_timeout, 5 bits (0: none).
        ack_timeout: u8 = [0x40, 5],
        /// Source GID index.
        src_addr_index: u8 = [0x48, 8],
        /// Static rate (0: port rate; else the IB rate enum plus 5), 4 bits.
        stat_rate: u8 = [0x54, 4],
        /// GRH hop limit.
        hop_limit: u8 = [0x58, 8],
        /// GRH traffic class.
        tclass: u8 = [0x64, 8],
        /// GRH flow label, 20 bits.
        flow_label: u32 = [0x6c, 0x14],
        /// Destination GID, 16 bytes, network order.
        rgid_rip: [u8; 16] = [0x80, 8],
        /// Service level, 4 bits.
        sl: u8 = [0x124, 4],
        /// Port, from 1.
        vhca_port_num: u8 = [0x128, 8],
    }
}

ifc_layout! {
    /// The QP context (`qpc`): the fields of an RC/UC/UD QP on
    /// InfiniBand, and the state QUERY_QP reports. Not modelled: the
    /// secondary path, DC, Ethernet offloads, counters, the PSN and WQE
    /// counters the device reports (`last_acked_psn`, `ssn`, `rmsn`,
    /// `hw_sq_wqebb_counter`, ...), user-memory (DEVX) fields.
    pub struct Qpc = "qpc", bits 0x740 {
        /// The QP's state (`STATE_*`), 4 bits: written by QUERY_QP, left 0
        /// in CREATE_QP and the transitions (the device ignores it there).
        state: u8 = [0x0, 4],
        /// Service type (`ST_*`).
        st: u8 = [0x8, 8],
        /// Path migration state (`PM_STATE_*`).
        pm_state: u8 = [0x13, 2],
        /// Protection domain, 24 bits.
        pd: u32 = [0x28, 0x18],
        /// Path MTU (`MTU_*`), 3 bits.
        mtu: u8 = [0x40, 3],
        /// Log2 of the largest message, 5 bits.
        log_msg_max: u8 = [0x43, 5],
        /// Log2 of the number of receive WQEs, 4 bits.
        log_rq_size: u8 = [0x49, 4],
        /// Log2 of the receive WQE size, minus 4, 3 bits.
        log_rq_stride: u8 = [0x4d, 3],
        /// The QP has no send queue.
        no_sq: bool = [0x50, 1],
        /// Log2 of the number of send WQEBBs, 4 bits.
        log_sq_size: u8 = [0x51, 4],
        /// Timestamp format in CQEs (`TS_FORMAT_*`), 2 bits.
        ts_format: u8 = [0x58, 2],
        /// The reserved lkey may be used in the QP's WQEs.
        rlky: bool = [0x5b, 1],
        /// UAR page of the QP's doorbells (its BlueFlame register), 24 bits.
        uar_page: u32 = [0x68, 0x18],
        /// User index reported in CQEs, 24 bits.
        user_index: u32 = [0x88, 0x18],
        /// Log2 of the buffer's page size minus 12, 5 bits.
        log_page_size: u8 = [0xa3, 5],
        /// Remote QP number (RC/UC), 24 bits.
        remote_qpn: u32 = [0xa8, 0x18],
        /// The primary address path.
        primary_address_path: Ads = [0xc0, 0x160],
        /// Log2 of how often responses request ACKs, 4 bits.
        log_ack_req_freq: u8 = [0x380, 4],
        /// Log2 of the outstanding RDMA reads/atomics as requester
        /// (initiator depth), 3 bits.
        log_sra_max: u8 = [0x388, 3],
        /// Transport retries before an error, 3 bits.
        retry_count: u8 = [0x38d, 3],
        /// RNR retries before an error (7: infinite), 3 bits.
        rnr_retry: u8 = [0x390, 3],
        /// PSN of the next packet sent, 24 bits.
        next_send_psn: u32 = [0x3c8, 0x18],
        /// CQ of the send queue, 24 bits.
        cqn_snd: u32 = [0x3e8, 0x18],
        /// Log2 of the outstanding RDMA reads/atomics as responder, 3 bits.
        log_rra_max: u8 = [0x488, 3],
        /// Atomic operation mode (`ATOMIC_MODE_*`), 4 bits.
        atomic_mode: u8 = [0x48c, 4],
        /// Remote reads enabled.
        rre: bool = [0x490, 1],
        /// Remote writes enabled.
        rwe: bool = [0x491, 1],
        /// Remote atomics enabled.
        rae: bool = [0x492, 1],
        /// Offset of the buffer in its first page, in 64-byte units, 6 bits.
        page_offset: u8 = [0x494, 6],
        /// RNR NAK timer the responder advertises (IB encoding), 5 bits.
        min_rnr_nak: u8 = [0x4a3, 5],
        /// PSN expected in the next received packet, 24 bits.
        next_rcv_psn: u32 = [0x4a8, 0x18],
        /// CQ of the receive queue, 24 bits.
        cqn_rcv: u32 = [0x4e8, 0x18],
        /// Bus address of the QP's doorbell record (receive counter at +0,
        /// send counter at +4).
        dbr_addr: u64 = [0x500, 0x40],
        /// Q_Key of a UD or QP1 QP: incoming datagrams must carry it, and
        /// a send whose address vector's Q_Key has bit 31 set uses it
        /// instead. Taken by RST2INIT_QP always and by INIT2INIT_QP,
        /// INIT2RTR_QP and RTR2RTS_QP with `OPTPAR_Q_KEY`.
        q_key: u32 = [0x540, 0x20],
        /// Kind of receive queue (`RQ_TYPE_*`), 3 bits.
        rq_type: u8 = [0x565, 3],
        /// The SRQ, with [`RQ_TYPE_SRQ`], 24 bits.
        srqn_rmpn_xrqn: u32 = [0x568, 0x18],
    }
}

#[cfg(test)]
mod tests {
    use super::super::ifc::Layout;
    use super::*;

    #[test]
    fn rc_context_known_bytes() {
        let mut gid = [0u8; 16];
        gid[0] = 0xfe;
        gid[1] = 0x80;
        gid[15] = 0x01;
        let q = Qpc {
            st: ST_RC,
            pm_state: PM_STATE_MIGRATED,
            pd: 0x12,
            mtu: MTU_4K,
            log_rq_size: 6,
            log_rq_stride: 2,
            log_sq_size: 7,
            uar_page: 0x21,
            remote_qpn: 0xab_cdef,
            primary_address_path: Ads {
                grh: true,
                rlid: 0x0102,
                ack_timeout: 14,
                sl: 3,
                vhca_port_num: 1,
                rgid_rip: gid,
                ..Ads::default()
            },
            retry_count: 7,
            rnr_retry: 7,
            rre: true,
            rwe: true,
            rae: true,
            min_rnr_nak: 12,
            dbr_addr: 0xdead_b000,
            ..Qpc::default()
        };
        let mut b = [0u8; Qpc::SIZE];
        q.encode(&mut b).unwrap();
        assert_eq!(b[..4], [0, 0, 0x18, 0]);
        assert_eq!(b[8..12], [0xa0, 0x32, 0x38, 0]);
        assert_eq!(b[0x14..0x18], [0, 0xab, 0xcd, 0xef]);
        let p = &b[0x18..0x18 + Ads::SIZE];
        assert_eq!(p[4..8], [0, 0x80, 0x01, 0x02]);
        assert_eq!(p[8], 14 << 3);
        assert_eq!(p[16..32], gid);
        assert_eq!(p[36..38], [0x03, 0x01]);
        assert_eq!(b[0x70..0x73], [0, 0x07, 0xe0]);
        assert_eq!(b[0x92], 0xe0);
        assert_eq!(b[0x94], 12);
        assert_eq!(b[0xa0..0xa8], [0, 0, 0, 0, 0xde, 0xad, 0xb0, 0]);
        assert_eq!(Qpc::decode(&b), Ok(q));
        // The state is the top nibble of byte 0, beside `st`'s byte.
        let q = Qpc {
            state: STATE_ERR,
            st: ST_UD,
            ..Qpc::default()
        };
        q.encode(&mut b).unwrap();
        assert_eq!(b[..2], [0x60, 0x02]);
        assert_eq!(Qpc::decode(&b), Ok(q));
    }

    #[test]
    fn states_convert_as_mlx5_ib() {
        for ib in 0..=6u8 {
            let state = state_from_ib(ib).unwrap();
            assert_eq!(state_to_ib(state), Some(ib));
        }
        assert_eq!(state_from_ib(7), None);
        assert_eq!(state_to_ib(STATE_SQ_DRAINING), Some(4));
        assert_eq!(state_to_ib(STATE_SUSPENDED), None);
        assert_eq!(state_to_ib(8), None);
        assert_eq!(state_to_ib(0xf), None);
    }
}
