// SPDX-License-Identifier: GPL-2.0

//! Posting work: arming the completion EQ, the receive and send WQEs,
//! their doorbell records and the send doorbell.

use kernel::prelude::*;
use kernel::sync::barrier::{
    mb,
    Write, //
};

use super::{
    mem::Mem,
    Ctx,
    LOG_SQ_SIZE,
    PAGE,
    QP_DBR_AT,
    RECV_DST,
    RQ_BYTES,
    RQ_STRIDE,
    SEND_LEN,
    SEND_SRC,
    WRITE_DST,
    WRITE_LEN,
    WRITE_SRC, //
};
use crate::mlx5_cmdif::bus::Bus;
use crate::mlx5_prm::{
    doorbell::{
        bf_reg_offset,
        counter_word,
        send_doorbell,
        EqDoorbell,
        QP_DBR_RECV_OFFSET,
        QP_DBR_SEND_OFFSET,
        UAR_EQ_ARM_OFFSET, //
    },
    opcode::SendOpcode,
    recv::write_recv_wqe,
    ring,
    wqe::{
        CtrlSeg,
        DataSeg,
        RaddrSeg,
        CE_CQ_UPDATE,
        WQEBB_SIZE, //
    },
};

impl Ctx<'_, '_> {
    /// Arms EQ `eqn` at consumer index 0.
    pub(super) fn arm_eq(&mut self, eqn: u8) {
        let mut word = [0u8; 4];
        EqDoorbell { eqn, ci: 0 }.encode(&mut word);
        let off = self.uar_reg(UAR_EQ_ARM_OFFSET);
        self.bus.write32(off, u32::from_be_bytes(word));
    }

    /// Posts the receive on the second QP, then the RDMA WRITE and the
    /// SEND on the first, and rings its doorbell once (as one
    /// `ib_post_send` of two work requests does).
    pub(super) fn post(&mut self, m: &Mem, key: u32, qpn: [u32; 2]) -> Result {
        let data = m.data.addr();
        let mut slot = [0u8; RQ_STRIDE];
        write_recv_wqe(
            &mut slot,
            &[DataSeg {
                byte_count: PAGE as u32,
                lkey: key,
                addr: data + RECV_DST as u64,
            }],
        )
        .map_err(|_| EINVAL)?;
        m.qp[1].write(0, &slot)?;
        mb(Write);
        m.dbr
            .write_word(QP_DBR_AT[1] + QP_DBR_RECV_OFFSET, counter_word(1))?;

        let ctrl = |wqe_index: u16, opcode: SendOpcode, ds: u8| CtrlSeg {
            opmod: 0,
            wqe_index,
            opcode,
            qpn: qpn[0],
            ds,
            signature: 0,
            fence_mode: 0,
            ce: CE_CQ_UPDATE,
            solicited: false,
            imm: 0,
        };
        // WQE 0: RDMA WRITE, control + remote address + data segments.
        let mut wqe = [0u8; WQEBB_SIZE];
        let (c, rest) = wqe.split_at_mut(CtrlSeg::SIZE);
        let (r, rest) = rest.split_at_mut(RaddrSeg::SIZE);
        let (d, _) = rest.split_at_mut(DataSeg::SIZE);
        let ds = ring::ds_count_of(&[CtrlSeg::SIZE, RaddrSeg::SIZE, DataSeg::SIZE])
            .map_err(|_| EINVAL)?;
        let mut ctrl0 = [0u8; CtrlSeg::SIZE];
        ctrl(0, SendOpcode::RdmaWrite, ds).encode(&mut ctrl0);
        c.copy_from_slice(&ctrl0);
        RaddrSeg {
            raddr: data + WRITE_DST as u64,
            rkey: key,
        }
        .encode(r.try_into().map_err(|_| EINVAL)?);
        DataSeg {
            byte_count: WRITE_LEN as u32,
            lkey: key,
            addr: data + WRITE_SRC as u64,
        }
        .encode(d.try_into().map_err(|_| EINVAL)?);
        let sq = |index: u16| RQ_BYTES + ring::sq_offset(index, u32::from(LOG_SQ_SIZE));
        m.qp[0].write(sq(0), &wqe)?;
        // WQE 1: SEND, control + data segments.
        let mut wqe = [0u8; WQEBB_SIZE];
        let (c, rest) = wqe.split_at_mut(CtrlSeg::SIZE);
        let (d, _) = rest.split_at_mut(DataSeg::SIZE);
        let ds = ring::ds_count_of(&[CtrlSeg::SIZE, DataSeg::SIZE]).map_err(|_| EINVAL)?;
        let mut ctrl1 = [0u8; CtrlSeg::SIZE];
        ctrl(1, SendOpcode::Send, ds).encode(&mut ctrl1);
        c.copy_from_slice(&ctrl1);
        DataSeg {
            byte_count: SEND_LEN as u32,
            lkey: key,
            addr: data + SEND_SRC as u64,
        }
        .encode(d.try_into().map_err(|_| EINVAL)?);
        m.qp[0].write(sq(1), &wqe)?;

        // The WQEs before the send counter, the counter before the
        // doorbell (mlx5_ib: wmb() around the record update).
        mb(Write);
        m.dbr
            .write_word(QP_DBR_AT[0] + QP_DBR_SEND_OFFSET, counter_word(2))?;
        mb(Write);
        let reg = bf_reg_offset(0).map_err(|_| EINVAL)?;
        let off = self.uar_reg(reg);
        self.bus.write64(off, send_doorbell(&ctrl1));
        Ok(())
    }
}
