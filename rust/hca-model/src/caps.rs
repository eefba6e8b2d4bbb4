// SPDX-License-Identifier: GPL-2.0

//! Device limits the model enforces (what a device query reports).

/// Limits of one HCA instance, checked when objects are created and when
/// WQEs are executed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// Largest `max_rd_atomic` (initiator depth) a QP may be given.
    pub max_qp_rd_atom: u8,
    /// Largest `max_dest_rd_atomic` (responder resources) a QP may be given.
    pub max_qp_dest_rd_atom: u8,
    /// Largest gather list of a send WQE.
    pub max_send_sge: u32,
    /// Largest scatter list of a receive WQE.
    pub max_recv_sge: u32,
    /// Largest inline payload of a send WQE.
    pub max_inline_data: u32,
    /// log2 of the largest SQ, in WQEBBs.
    pub max_log_sq_wqebbs: u8,
    /// log2 of the largest RQ, in WQEs.
    pub max_log_rq_wqes: u8,
    /// log2 of the largest CQ, in CQEs.
    pub max_log_cq_size: u8,
    /// log2 of the largest EQ, in EQEs.
    pub max_log_eq_size: u8,
    /// Largest message (the IB maximum is 2^31 bytes).
    pub max_msg_size: u32,
    /// Most pages a fast-registration MR may hold (its translation list,
    /// `max_fast_reg_page_list_len`; the firmware reports log2 of it as
    /// `log_max_klm_list_size`, from which mlx5_ib takes that length).
    pub max_fast_reg_pages: u32,
}

impl Caps {
    /// The limits rmlx5 reports: those of a ConnectX-5 where the model can
    /// honour them.
    pub const DEFAULT: Caps = Caps {
        max_qp_rd_atom: 16,
        max_qp_dest_rd_atom: 16,
        max_send_sge: 30,
        max_recv_sge: 32,
        max_inline_data: 512,
        max_log_sq_wqebbs: 15,
        max_log_rq_wqes: 15,
        max_log_cq_size: 22,
        max_log_eq_size: 22,
        max_msg_size: 1 << 31,
        // The engine translates a page list as it copies, so any length
        // would do; the limit is what a driver's list costs. 512 entries
        // are one 4 KiB page (`mr::MTT_PER_PAGE`), so rmlx5 keeps each
        // fast MR's list in one order-0 allocation, and 512 pages of 4 KiB
        // (2 MiB) cover every kernel ULP's registrations: RDS's 257, the
        // NVMe-oF host's and target's 257, SRP's 512, iSER's default 129.
        max_fast_reg_pages: 512,
    };
}

impl Default for Caps {
    fn default() -> Self {
        Caps::DEFAULT
    }
}
