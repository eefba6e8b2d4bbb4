// SPDX-License-Identifier: GPL-2.0

//! The self-test's memory: coherent buffers shared with the device.

use kernel::prelude::*;

use super::{
    DATA_PAGES,
    LOG_CQ_SIZE,
    LOG_EQ_SIZE,
    PAGE,
    SEND_LEN,
    SEND_SRC,
    WRITE_LEN,
    WRITE_SRC, //
};
use crate::cx::{
    buf::Buf,
    bus::CxBus, //
};
use crate::mlx5_prm::{
    cqe::{
        CQE_SIZE,
        OP_OWN_OFFSET, //
    },
    eqe::{
        EQE_SIZE,
        OWNER_OFFSET, //
    },
    ring,
};

/// The memory of the self-test.
pub(super) struct Mem {
    pub(super) eq: Buf,
    pub(super) cq: Buf,
    /// The doorbell records of the CQ and the QPs.
    pub(super) dbr: Buf,
    /// The QPs' buffers: RQ, then SQ.
    pub(super) qp: [Buf; 2],
    pub(super) data: Buf,
}

/// The byte of the test pattern at offset `i` of a source buffer `seed`.
pub(super) fn pattern(seed: u8, i: usize) -> u8 {
    (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8
}

impl Mem {
    /// Allocates everything, with the EQEs' owner bytes and the CQEs'
    /// `op_own` initialised as mlx5 does, and the source patterns written.
    pub(super) fn new(bus: &CxBus<'_>) -> Result<Self> {
        let m = Self {
            eq: bus.alloc_buf(PAGE)?,
            cq: bus.alloc_buf(PAGE)?,
            dbr: bus.alloc_buf(PAGE)?,
            qp: [bus.alloc_buf(PAGE)?, bus.alloc_buf(PAGE)?],
            data: bus.alloc_buf(DATA_PAGES * PAGE)?,
        };
        for i in 0..1usize << LOG_EQ_SIZE {
            m.eq.write(i * EQE_SIZE + OWNER_OFFSET, &[ring::EQE_INIT_OWNER])?;
        }
        for i in 0..1usize << LOG_CQ_SIZE {
            m.cq.write(i * CQE_SIZE + OP_OWN_OFFSET, &[ring::CQE_INIT_OP_OWN])?;
        }
        for i in 0..SEND_LEN {
            m.data.write(SEND_SRC + i, &[pattern(0x5a, i)])?;
        }
        for i in 0..WRITE_LEN {
            m.data.write(WRITE_SRC + i, &[pattern(0xc3, i)])?;
        }
        Ok(m)
    }
}
