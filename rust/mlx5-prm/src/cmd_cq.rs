// SPDX-License-Identifier: GPL-2.0

//! Completion queues: the CQ context (`cqc`) and CREATE_CQ / DESTROY_CQ.
//!
//! CREATE_CQ's input is followed by the bus addresses of the CQ buffer's
//! pages; the buffer holds `1 << log_cq_size` CQEs with every `op_own`
//! initialised to `ring::CQE_INIT_OP_OWN`. `dbr_addr` is the bus address
//! of the CQ's 8-byte doorbell record (`doorbell::CqDbRec`), and
//! `c_eqn_or_apu_element` the EQ that receives its completion events.

use super::command::{command, OP_CREATE_CQ, OP_DESTROY_CQ};
use super::ifc::ifc_layout;

/// `cqc.cqe_sz`: 64-byte CQEs (`MLX5_CQC_CQE_SZ_64_BYTES`).
pub const CQE_SZ_64: u8 = 0x0;
/// `cqc.cqe_sz`: 128-byte CQEs (`MLX5_CQC_CQE_SZ_128_BYTES`).
pub const CQE_SZ_128: u8 = 0x1;
/// `cqc.st`: armed for solicited completions only
/// (`MLX5_CQC_ST_SOLICITED_NOTIFICATION_REQUEST_ARMED`).
pub const CQC_ST_SOLICITED_ARMED: u8 = 0x6;
/// `cqc.st`: armed (`MLX5_CQC_ST_NOTIFICATION_REQUEST_ARMED`).
pub const CQC_ST_ARMED: u8 = 0x9;
/// `cqc.st`: an event was generated since the last arm (`MLX5_CQC_ST_FIRED`).
pub const CQC_ST_FIRED: u8 = 0xa;
/// `cqc.cq_period_mode`: the moderation period starts at the event
/// (`MLX5_CQ_PERIOD_MODE_START_FROM_EQE`).
pub const CQ_PERIOD_MODE_START_FROM_EQE: u8 = 0x0;
/// `cqc.cq_period_mode`: the period starts at the first CQE
/// (`MLX5_CQ_PERIOD_MODE_START_FROM_CQE`).
pub const CQ_PERIOD_MODE_START_FROM_CQE: u8 = 0x1;

ifc_layout! {
    /// The completion queue context (`cqc`).
    pub struct Cqc = "cqc", bits 0x200 {
        /// CQE size (`CQE_SZ_*`).
        cqe_sz: u8 = [0x8, 3],
        /// Collapsed CQ: every CQE is written to entry 0.
        cc: bool = [0xb, 1],
        /// Overrun ignore: an overflowing CQ is not an error.
        oi: bool = [0xe, 1],
        /// Moderation period mode (`CQ_PERIOD_MODE_*`).
        cq_period_mode: u8 = [0xf, 2],
        /// Arming state (`CQC_ST_*`); 0 at creation, armed through the
        /// doorbell.
        st: u8 = [0x14, 4],
        /// Offset of the buffer in its first page, in 64-byte units.
        page_offset: u8 = [0x54, 6],
        /// Log2 of the number of CQEs.
        log_cq_size: u8 = [0x63, 5],
        /// UAR page whose CQ doorbell arms this CQ, 24 bits.
        uar_page: u32 = [0x68, 0x18],
        /// Moderation: microseconds to wait before an event, 12 bits.
        cq_period: u16 = [0x84, 0xc],
        /// Moderation: CQEs to wait for before an event.
        cq_max_count: u16 = [0x90, 0x10],
        /// The EQ that receives the CQ's completion events.
        c_eqn_or_apu_element: u32 = [0xa0, 0x20],
        /// Log2 of the buffer's page size minus 12.
        log_page_size: u8 = [0xc3, 5],
        /// Bus address of the CQ's doorbell record (8-byte aligned).
        dbr_addr: u64 = [0x1c0, 0x40],
    }
}

ifc_layout! {
    /// CREATE_CQ input, followed by the buffer's page addresses.
    pub struct CreateCqIn = "create_cq_in", bits 0x880, opcode OP_CREATE_CQ {
        /// The CQ's context.
        cq_context: Cqc = [0x80, 0x200],
    }
}

ifc_layout! {
    /// CREATE_CQ output.
    pub struct CreateCqOut = "create_cq_out", bits 0x80 {
        /// The CQ number, 24 bits.
        cqn: u32 = [0x48, 0x18],
    }
}

ifc_layout! {
    /// DESTROY_CQ input.
    pub struct DestroyCqIn = "destroy_cq_in", bits 0x80, opcode OP_DESTROY_CQ {
        /// The CQ number, 24 bits.
        cqn: u32 = [0x48, 0x18],
    }
}

ifc_layout! {
    /// DESTROY_CQ output: the header only.
    pub struct DestroyCqOut = "destroy_cq_out", bits 0x80 {}
}

command! {
    /// CREATE_CQ (`MLX5_CMD_OP_CREATE_CQ`, 0x400); the page list follows
    /// the input.
    pub struct CreateCq: OP_CREATE_CQ, "CREATE_CQ", CreateCqIn => CreateCqOut, in_pas true;
}

command! {
    /// DESTROY_CQ (`MLX5_CMD_OP_DESTROY_CQ`, 0x401).
    pub struct DestroyCq: OP_DESTROY_CQ, "DESTROY_CQ", DestroyCqIn => DestroyCqOut;
}

#[cfg(test)]
mod tests {
    use super::super::ifc::Layout;
    use super::*;

    #[test]
    fn cq_context_known_bytes() {
        let input = CreateCqIn {
            cq_context: Cqc {
                cqe_sz: CQE_SZ_128,
                log_cq_size: 10,
                uar_page: 3,
                c_eqn_or_apu_element: 7,
                log_page_size: 1,
                dbr_addr: 0x1_0000_0040,
                ..Cqc::default()
            },
        };
        let mut b = [0u8; CreateCqIn::SIZE];
        input.encode(&mut b).unwrap();
        assert_eq!(b[..2], [4, 0]);
        let c = &b[16..80];
        assert_eq!(c[..4], [0, 0x20, 0, 0]);
        assert_eq!(c[12..16], [10, 0, 0, 3]);
        assert_eq!(c[20..28], [0, 0, 0, 7, 1, 0, 0, 0]);
        assert_eq!(c[56..64], [0, 0, 0, 1, 0, 0, 0, 0x40]);
        assert_eq!(CreateCqIn::decode(&b), Ok(input));
    }
}
