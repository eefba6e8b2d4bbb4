// SPDX-License-Identifier: GPL-2.0

//! 64-byte event queue entries (the kernel's `struct mlx5_eqe`).
//!
//! | byte | field |
//! |---|---|
//! | 1 | `type` |
//! | 3 | `sub_type` |
//! | 32..60 | `data` (`union ev_data`, 28 bytes) |
//! | 62 | `signature` |
//! | 63 | `owner` (bit 0) |
//!
//! Poll by reading `owner` alone (at [`OWNER_OFFSET`]), checking it with
//! [`super::ring::eqe_valid`], issuing a read barrier, then decoding.

use super::bytes::{get_u32, get_u8, put_u32, put_u8};
use super::error::Error;
use super::opcode::EventType;

/// Size of an EQE in bytes (`sizeof(struct mlx5_eqe)`).
pub const EQE_SIZE: usize = 64;
/// Offset of `mlx5_eqe.owner`.
pub const OWNER_OFFSET: usize = 63;
/// Offset of `mlx5_eqe.data` (`union ev_data`).
pub const DATA_OFFSET: usize = 32;
/// Size of `union ev_data`.
pub const DATA_SIZE: usize = 28;

/// `mlx5_eqe_qp_srq.type` of an event on a QP (`MLX5_EVENT_QUEUE_TYPE_QP`).
pub const QUEUE_TYPE_QP: u8 = 0;
/// `mlx5_eqe_qp_srq.type` of an event on an RQ (`MLX5_EVENT_QUEUE_TYPE_RQ`).
pub const QUEUE_TYPE_RQ: u8 = 1;
/// `mlx5_eqe_qp_srq.type` of an event on an SQ (`MLX5_EVENT_QUEUE_TYPE_SQ`).
pub const QUEUE_TYPE_SQ: u8 = 2;
/// `mlx5_eqe_qp_srq.type` of an event on a DCT (`MLX5_EVENT_QUEUE_TYPE_DCT`).
pub const QUEUE_TYPE_DCT: u8 = 6;

/// `mlx5_eqe_cq_err.syndrome`: the CQ overran (`MLX5_CQ_ERROR_SYNDROME_CQ_OVERRUN`).
pub const CQ_ERROR_SYNDROME_OVERRUN: u8 = 0x1;
/// `mlx5_eqe_cq_err.syndrome`: the device could not access the CQ buffer
/// (`MLX5_CQ_ERROR_SYNDROME_CQ_ACCESS_VIOLATION_ERROR`).
pub const CQ_ERROR_SYNDROME_ACCESS_VIOLATION: u8 = 0x2;

/// The event data (`mlx5_eqe.data`, 28 bytes); which variant applies
/// follows from the event type. Offsets below are within the EQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EqeData {
    /// `MLX5_EVENT_TYPE_COMP` (`struct mlx5_eqe_comp`).
    Comp {
        /// CQ that produced the completion, 24 bits: `cqn` at byte 56.
        cqn: u32,
    },
    /// `MLX5_EVENT_TYPE_CQ_ERROR` (`struct mlx5_eqe_cq_err`).
    CqError {
        /// CQ in error, 24 bits: `cqn` at byte 32.
        cqn: u32,
        /// Why (`CQ_ERROR_SYNDROME_*`): `syndrome` at byte 43.
        syndrome: u8,
    },
    /// A QP or SRQ affiliated event (`struct mlx5_eqe_qp_srq`; see
    /// [`EventType::is_qp_srq_event`]).
    QpSrq {
        /// Kind of queue (`QUEUE_TYPE_*`): `type` at byte 52.
        queue_type: u8,
        /// QP, RQ, SQ or SRQ number, 24 bits: `qp_srq_n` at byte 56.
        qp_srq_n: u32,
    },
    /// Any other event, as the raw 28 bytes of `data`.
    Raw([u8; DATA_SIZE]),
}

/// An event queue entry (`struct mlx5_eqe`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Eqe {
    /// Event type: `type`, byte 1.
    pub event_type: EventType,
    /// Event sub-type (used by port and general events): `sub_type`, byte 3.
    pub sub_type: u8,
    /// Event data: `data`, bytes 32..60. [`Eqe::decode`] picks the variant
    /// from `event_type`; [`Eqe::encode`] writes whichever variant it is
    /// given.
    pub data: EqeData,
    /// EQE signature byte: `signature`, byte 62.
    pub signature: u8,
    /// Owner bit, the pass parity of the producer index: `owner` bit 0.
    pub owner: bool,
}

impl Eqe {
    /// Writes the EQE into `out`, `owner` included (a device writes byte 63
    /// last, after a write barrier).
    pub fn encode(&self, out: &mut [u8; EQE_SIZE]) {
        *out = [0; EQE_SIZE];
        put_u8(out, 1, u8::from(self.event_type));
        put_u8(out, 3, self.sub_type);
        match self.data {
            EqeData::Comp { cqn } => put_u32(out, 56, cqn & 0xff_ffff),
            EqeData::CqError { cqn, syndrome } => {
                put_u32(out, 32, cqn & 0xff_ffff);
                put_u8(out, 43, syndrome);
            }
            EqeData::QpSrq {
                queue_type,
                qp_srq_n,
            } => {
                put_u8(out, 52, queue_type);
                put_u32(out, 56, qp_srq_n & 0xff_ffff);
            }
            EqeData::Raw(raw) => {
                out[DATA_OFFSET..DATA_OFFSET + DATA_SIZE].copy_from_slice(&raw);
            }
        }
        put_u8(out, 62, self.signature);
        put_u8(out, 63, u8::from(self.owner));
    }

    /// Reads an EQE from `b`.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownEventType`] if `type` is not a known event type. The
    /// entry must still be consumed (and the consumer index advanced).
    pub fn decode(b: &[u8; EQE_SIZE]) -> Result<Self, Error> {
        let event_type = EventType::try_from(get_u8(b, 1))?;
        let data = if event_type == EventType::Comp {
            EqeData::Comp {
                cqn: get_u32(b, 56) & 0xff_ffff,
            }
        } else if event_type == EventType::CqError {
            EqeData::CqError {
                cqn: get_u32(b, 32) & 0xff_ffff,
                syndrome: get_u8(b, 43),
            }
        } else if event_type.is_qp_srq_event() {
            EqeData::QpSrq {
                queue_type: get_u8(b, 52),
                qp_srq_n: get_u32(b, 56) & 0xff_ffff,
            }
        } else {
            let mut raw = [0u8; DATA_SIZE];
            raw.copy_from_slice(&b[DATA_OFFSET..DATA_OFFSET + DATA_SIZE]);
            EqeData::Raw(raw)
        };
        Ok(Eqe {
            event_type,
            sub_type: get_u8(b, 3),
            data,
            signature: get_u8(b, 62),
            owner: get_u8(b, 63) & 1 != 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_event_known_bytes() {
        let e = Eqe {
            event_type: EventType::Comp,
            sub_type: 0,
            data: EqeData::Comp { cqn: 0x12_3456 },
            signature: 0,
            owner: true,
        };
        let mut b = [0xffu8; 64];
        e.encode(&mut b);
        let mut want = [0u8; 64];
        want[56..60].copy_from_slice(&[0, 0x12, 0x34, 0x56]);
        want[63] = 1;
        assert_eq!(b, want);
        assert_eq!(Eqe::decode(&b), Ok(e));
    }

    #[test]
    fn cq_error_and_qp_events() {
        let mut b = [0u8; 64];
        let e = Eqe {
            event_type: EventType::CqError,
            sub_type: 0,
            data: EqeData::CqError {
                cqn: 0x99,
                syndrome: CQ_ERROR_SYNDROME_OVERRUN,
            },
            signature: 0,
            owner: false,
        };
        e.encode(&mut b);
        assert_eq!(b[1], 0x04);
        assert_eq!(b[32..36], [0, 0, 0, 0x99]);
        assert_eq!(b[43], 1);
        assert_eq!(Eqe::decode(&b), Ok(e));

        let e = Eqe {
            event_type: EventType::WqCatasError,
            sub_type: 0,
            data: EqeData::QpSrq {
                queue_type: QUEUE_TYPE_QP,
                qp_srq_n: 0x77,
            },
            signature: 0,
            owner: true,
        };
        e.encode(&mut b);
        assert_eq!(b[1], 0x05);
        assert_eq!(b[52], 0);
        assert_eq!(b[56..60], [0, 0, 0, 0x77]);
        assert_eq!(Eqe::decode(&b), Ok(e));

        b[1] = 0x06;
        assert_eq!(Eqe::decode(&b), Err(Error::UnknownEventType(6)));
        b[1] = 0x09;
        assert!(matches!(Eqe::decode(&b).unwrap().data, EqeData::Raw(_)));
    }
}
