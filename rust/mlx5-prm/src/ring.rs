// SPDX-License-Identifier: GPL-2.0

//! Ring arithmetic: ownership of CQEs and EQEs, counter wrap, and the size
//! of a WQE in DS units and WQEBBs.
//!
//! Producer and consumer counters are free-running `u32`s (the driver's
//! `cons_index`, the provider's `cur_post`); a queue of `1 << log_size`
//! entries is indexed with the low `log_size` bits, and the next bit up is
//! the "pass" parity that the owner bit is compared with. The device sees
//! only the low 24 bits of a consumer index (CQ and EQ doorbells) and the
//! low 16 bits of a send counter (the WQE index, the SQ doorbell record).

use super::error::Error;
use super::wqe::{DS_SIZE, MAX_WQEBBS, WQEBB_SIZE};

/// Mask of the 24 consumer index bits a CQ or EQ doorbell carries.
pub const CI_MASK: u32 = 0xff_ffff;

/// `op_own` of every CQE of a freshly initialised CQ buffer: opcode
/// `MLX5_CQE_INVALID` in bits 7:4, owner bit 0.
pub const CQE_INIT_OP_OWN: u8 = 0xf0;

/// `mlx5_eqe.owner` of every EQE of a freshly initialised EQ buffer
/// (`MLX5_EQE_OWNER_INIT_VAL`), which makes the first pass invalid.
pub const EQE_INIT_OWNER: u8 = 1;

/// The pass parity of `counter` in a ring of `1 << log_size` entries: bit
/// `log_size` of the counter. This is the owner bit the device writes into
/// the entry it produces at producer index `counter`, and the one software
/// expects in the CQE at consumer index `counter`. A `log_size` of 32 or
/// more yields `false`.
#[inline]
pub fn owner_bit(counter: u32, log_size: u32) -> bool {
    counter.checked_shr(log_size).unwrap_or(0) & 1 != 0
}

/// Position of `counter` in a ring of `1 << log_size` entries (the low
/// `log_size` bits). A `log_size` of 32 or more leaves the counter whole.
#[inline]
pub fn ring_index(counter: u32, log_size: u32) -> u32 {
    match 1u32.checked_shl(log_size) {
        Some(size) => counter & size.wrapping_sub(1),
        None => counter,
    }
}

/// Whether the CQE whose `mlx5_cqe64.op_own` byte is `op_own`, at consumer
/// index `ci` of a CQ of `1 << log_size` entries, belongs to software: its
/// opcode is not `MLX5_CQE_INVALID` and its owner bit (bit 0,
/// `MLX5_CQE_OWNER_MASK`) equals the pass parity of `ci`. Read the rest of
/// the CQE only after a read barrier that follows this check.
#[inline]
pub fn cqe_sw_owned(op_own: u8, ci: u32, log_size: u32) -> bool {
    op_own >> 4 != 0xf && (op_own & 1 != 0) == owner_bit(ci, log_size)
}

/// Whether the EQE whose `mlx5_eqe.owner` byte is `owner`, at consumer index
/// `ci` of an EQ of `1 << log_size` entries, is valid (new):
/// `(owner ^ (ci >> log_size)) & 1 == 0`.
pub fn eqe_valid(owner: u8, ci: u32, log_size: u32) -> bool {
    (owner & 1 != 0) == owner_bit(ci, log_size)
}

/// The low 24 bits of a consumer index, as a CQ or EQ doorbell carries it.
#[inline]
pub fn ci24(ci: u32) -> u32 {
    ci & CI_MASK
}

/// How many entries lie from 24-bit index `from` up to 24-bit index `to`,
/// modulo 2^24 (for comparing an armed consumer index with a producer
/// index).
pub fn ci24_distance(from: u32, to: u32) -> u32 {
    to.wrapping_sub(from) & CI_MASK
}

/// How many WQEBBs lie from 16-bit WQE index `from` up to `to`, modulo 2^16
/// (for mapping a CQE's `wqe_counter` back to the SQ producer counter).
pub fn wqe_counter_distance(from: u16, to: u16) -> u16 {
    to.wrapping_sub(from)
}

/// The DS count (16-byte units, `mlx5_wqe_ctrl_seg.qpn_ds` bits 5:0) of a
/// WQE of `wqe_bytes` bytes, rounding up.
///
/// # Errors
///
/// [`Error::BadDsCount`] if `wqe_bytes` is zero or the WQE would not fit in
/// 16 WQEBBs and a 6-bit DS field (at most 63 units, 1008 bytes).
#[inline]
pub fn ds_count(wqe_bytes: usize) -> Result<u8, Error> {
    let ds = wqe_bytes.div_ceil(DS_SIZE);
    if ds == 0 || ds > 0x3f || ds * DS_SIZE > MAX_WQEBBS * WQEBB_SIZE {
        return Err(Error::BadDsCount);
    }
    u8::try_from(ds).map_err(|_| Error::BadDsCount)
}

/// Sum of segment sizes rounded up to DS units, as the DS count of a WQE
/// made of segments of the given byte sizes (a control segment of 16, a
/// masked atomic of 32, an inline segment of any size...).
///
/// # Errors
///
/// [`Error::BadDsCount`] as for [`ds_count`].
pub fn ds_count_of(segment_bytes: &[usize]) -> Result<u8, Error> {
    let mut ds: usize = 0;
    for &bytes in segment_bytes {
        ds = ds.saturating_add(bytes.div_ceil(DS_SIZE));
    }
    ds_count(ds.saturating_mul(DS_SIZE))
}

/// How many WQEBBs a WQE of `ds` DS units occupies (4 DS per WQEBB,
/// rounding up); the SQ producer counter advances by this much.
#[inline]
pub fn wqebb_count(ds: u8) -> u8 {
    ds.div_ceil(4)
}

/// Byte offset in an SQ buffer of `1 << log_wqebbs` WQEBBs of the WQE whose
/// first WQEBB has index `wqe_index` (the 16-bit counter wraps first; the SQ
/// has at most 2^16 WQEBBs).
pub fn sq_offset(wqe_index: u16, log_wqebbs: u32) -> usize {
    let slot = ring_index(u32::from(wqe_index), log_wqebbs) as usize;
    slot << super::wqe::WQEBB_SHIFT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cq_ownership_over_passes() {
        // A fresh CQ of 4 entries: nothing is software-owned on pass 0.
        for ci in 0..4 {
            assert!(!cqe_sw_owned(CQE_INIT_OP_OWN, ci, 2));
        }
        // The device writes owner = pass parity of its producer index.
        for pi in 0..64u32 {
            let op_own = u8::from(owner_bit(pi, 2));
            assert!(cqe_sw_owned(op_own, pi, 2));
            // One pass later the same entry is stale.
            assert!(!cqe_sw_owned(op_own, pi + 4, 2));
        }
        // Works at the 24-bit and 32-bit wrap.
        assert!(cqe_sw_owned(0, u32::MAX.wrapping_add(1), 10));
        assert!(cqe_sw_owned(1, 0xffff_ffff, 10));
        assert!(!owner_bit(0xffff_ffff, 32));
    }

    #[test]
    fn eq_validity() {
        for ci in 0..8 {
            assert!(!eqe_valid(EQE_INIT_OWNER, ci, 3));
            assert!(eqe_valid(0, ci, 3));
            assert!(eqe_valid(1, ci + 8, 3));
        }
    }

    #[test]
    fn counters_wrap() {
        assert_eq!(ci24(0x1234_5678), 0x34_5678);
        assert_eq!(ci24_distance(0xff_fffe, 1), 3);
        assert_eq!(wqe_counter_distance(0xfffe, 2), 4);
        assert_eq!(ring_index(0x1_0005, 4), 5);
        assert_eq!(ring_index(7, 32), 7);
        assert_eq!(sq_offset(0xffff, 3), 7 * 64);
    }

    #[test]
    fn sizing() {
        assert_eq!(ds_count(16), Ok(1));
        assert_eq!(ds_count(17), Ok(2));
        assert_eq!(ds_count(0), Err(Error::BadDsCount));
        assert_eq!(ds_count(1008), Ok(63));
        assert_eq!(ds_count(1009), Err(Error::BadDsCount));
        assert_eq!(ds_count(usize::MAX), Err(Error::BadDsCount));
        // RDMA write: ctrl + raddr + one data segment.
        assert_eq!(ds_count_of(&[16, 16, 16]), Ok(3));
        // Masked CAS: ctrl + raddr + masked atomic + data.
        assert_eq!(ds_count_of(&[16, 16, 32, 16]), Ok(5));
        // Send with 20 bytes inline: ctrl + 4 + 20 -> 16 + 32.
        assert_eq!(ds_count_of(&[16, 24]), Ok(3));
        assert_eq!(ds_count_of(&[usize::MAX, 16]), Err(Error::BadDsCount));
        assert_eq!(wqebb_count(1), 1);
        assert_eq!(wqebb_count(4), 1);
        assert_eq!(wqebb_count(5), 2);
        assert_eq!(wqebb_count(63), 16);
    }
}
