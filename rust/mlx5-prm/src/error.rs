// SPDX-License-Identifier: GPL-2.0

//! The one error type of the crate.

/// Why a raw value could not be decoded, or a buffer could not be used.
///
/// Every fallible function of the crate returns this; none of them panics.
/// The kernel side maps it to an errno in one place (`EINVAL` for all of
/// them, except that a device may also turn the opcode and syndrome variants
/// into an error completion).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The opcode byte of a control segment (`mlx5_wqe_ctrl_seg.opmod_idx_opcode`
    /// bits 7:0) is none of the `MLX5_OPCODE_*` values. Carries the raw byte.
    UnknownSendOpcode(u8),
    /// The CQE opcode (`mlx5_cqe64.op_own` bits 7:4) is none of the
    /// `MLX5_CQE_*` opcode values. Carries the raw 4-bit value.
    UnknownCqeOpcode(u8),
    /// An error CQE syndrome (`mlx5_err_cqe.syndrome`) that is none of the
    /// `MLX5_CQE_SYNDROME_*` values. Carries the raw byte.
    UnknownSyndrome(u8),
    /// An EQE type (`mlx5_eqe.type`) that is none of the `MLX5_EVENT_TYPE_*`
    /// values. Carries the raw byte.
    UnknownEventType(u8),
    /// A doorbell word has bits set outside its fields (for example the top
    /// 16 bits of a QP doorbell record counter, or an unknown CQ arm command).
    ReservedBits,
    /// A segment that should be inline data lacks bit 31 (`MLX5_INLINE_SEG`)
    /// in `mlx5_wqe_inl_data_seg.byte_count`.
    NotInline,
    /// A control segment's DS count (`mlx5_wqe_ctrl_seg.qpn_ds` bits 5:0) is
    /// zero, or a WQE would need more than 16 WQEBBs
    /// (`MLX5_SEND_WQE_MAX_WQEBBS`).
    BadDsCount,
    /// A queue buffer whose length is not a non-zero power-of-two number of
    /// 64-byte WQEBBs (`MLX5_SEND_WQE_BB`).
    BadRingSize,
    /// An offset or length falls outside the buffer it indexes, or a copy is
    /// longer than the ring it wraps around.
    OutOfRange,
    /// An offset is not aligned to the unit the layout requires (16 bytes for
    /// a segment, 64 bytes for the start of a WQE).
    Misaligned,
}
