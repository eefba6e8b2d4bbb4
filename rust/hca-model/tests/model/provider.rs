// SPDX-License-Identifier: GPL-2.0

//! The provider half of the harness: building WQEs with the mlx5-prm
//! encoders, ringing doorbells the mlx5 way, posting receives, polling CQEs
//! and EQEs by owner bit, arming CQs and EQs.

use hca_model::doorbell::{DoorbellError, SendDoorbell};
use hca_model::qp::QpState;
use mlx5_prm::cqe::{Cqe64, ErrCqe, CQE_SIZE, OP_OWN_OFFSET};
use mlx5_prm::doorbell::{
    bf_reg_offset, counter_word, send_doorbell, set_ci_word, ArmCmd, CqArm, EqDoorbell,
    UarCqDoorbell, BF_BUF_SIZE, CQ_DBR_ARM_OFFSET, CQ_DBR_SET_CI_OFFSET, QP_DBR_RECV_OFFSET,
    QP_DBR_SEND_OFFSET, UAR_CQ_DOORBELL_OFFSET, UAR_EQ_ARM_OFFSET, UAR_EQ_UPDATE_OFFSET,
};
use mlx5_prm::eqe::{Eqe, EQE_SIZE, OWNER_OFFSET};
use mlx5_prm::opcode::{CqeOpcode, SendOpcode};
use mlx5_prm::recv::write_recv_wqe;
use mlx5_prm::ring;
use mlx5_prm::sq::{ring_write, write_inline};
use mlx5_prm::wqe::{
    AtomicSeg, CtrlSeg, DataSeg, MaskedAtomicSeg, RaddrSeg, CE_CQ_UPDATE, CE_ERROR_ONLY,
    FENCE_MODE_NONE, FENCE_MODE_SMALL_AND_FENCE, WQEBB_SIZE,
};

use super::harness::{Ring, Sge, TestCq, TestQp, Wc, World, Wr, WrOp};

impl World {
    /// Builds the WQE for `wr` at the QP's producer counter without ringing.
    /// Returns the WQE's first WQEBB index and size in WQEBBs.
    pub fn build_wqe(&mut self, qp: &mut TestQp, wr: &Wr) -> (u16, u16) {
        let ring_len = qp.sq_wqebbs as usize * WQEBB_SIZE;
        let start = qp.cur_post;
        let base = ring::sq_offset(start, qp.sq_wqebbs.trailing_zeros());
        let mut off = base + CtrlSeg::SIZE;
        let mask = ring_len - 1;
        let sq = self.mem.slice_mut(qp.sq_buf, ring_len);
        let put = |sq: &mut [u8], off: &mut usize, bytes: &[u8]| {
            ring_write(sq, *off & mask, bytes).unwrap();
            *off += bytes.len();
        };
        let (opcode, imm) = match wr.op {
            WrOp::Nop => (SendOpcode::Nop, 0),
            WrOp::Send => (SendOpcode::Send, 0),
            WrOp::SendImm(i) => (SendOpcode::SendImm, i),
            WrOp::SendInv(rkey) => (SendOpcode::SendInval, rkey),
            WrOp::Write { .. } => (SendOpcode::RdmaWrite, 0),
            WrOp::WriteImm { imm, .. } => (SendOpcode::RdmaWriteImm, imm),
            WrOp::Read { .. } => (SendOpcode::RdmaRead, 0),
            WrOp::Cas { .. } => (SendOpcode::AtomicCs, 0),
            WrOp::Faa { .. } => (SendOpcode::AtomicFa, 0),
            WrOp::MaskedCas { .. } => (SendOpcode::AtomicMaskedCs, 0),
            WrOp::MaskedFaa { .. } => (SendOpcode::AtomicMaskedFa, 0),
            WrOp::Umr { key, .. } => (SendOpcode::Umr, key),
        };
        let raddr = match wr.op {
            WrOp::Write { raddr, rkey }
            | WrOp::WriteImm { raddr, rkey, .. }
            | WrOp::Read { raddr, rkey }
            | WrOp::Cas { raddr, rkey, .. }
            | WrOp::Faa { raddr, rkey, .. }
            | WrOp::MaskedCas { raddr, rkey, .. }
            | WrOp::MaskedFaa { raddr, rkey, .. } => Some(RaddrSeg { raddr, rkey }),
            _ => None,
        };
        if let Some(av) = &wr.av {
            let mut b = [0u8; 48];
            av.encode(&mut b);
            put(sq, &mut off, &b);
        }
        if let Some(r) = raddr {
            let mut b = [0u8; 16];
            r.encode(&mut b);
            put(sq, &mut off, &b);
        }
        match wr.op {
            WrOp::Cas { compare, swap, .. } => {
                let mut b = [0u8; 16];
                AtomicSeg {
                    swap_add: swap,
                    compare,
                }
                .encode(&mut b);
                put(sq, &mut off, &b);
            }
            WrOp::Faa { add, .. } => {
                let mut b = [0u8; 16];
                AtomicSeg {
                    swap_add: add,
                    compare: 0,
                }
                .encode(&mut b);
                put(sq, &mut off, &b);
            }
            WrOp::MaskedCas {
                compare,
                compare_mask,
                swap,
                swap_mask,
                ..
            } => {
                let mut b = [0u8; 32];
                MaskedAtomicSeg {
                    swap_add: swap,
                    compare,
                    swap_add_mask: swap_mask,
                    compare_mask,
                }
                .encode(&mut b);
                put(sq, &mut off, &b);
            }
            WrOp::Umr { ctrl, mkey, .. } => {
                let mut b = [0u8; 48];
                ctrl.encode(&mut b);
                put(sq, &mut off, &b);
                let mut b = [0u8; 64];
                mkey.encode(&mut b);
                put(sq, &mut off, &b);
            }
            WrOp::MaskedFaa { add, boundary, .. } => {
                let mut b = [0u8; 32];
                MaskedAtomicSeg {
                    swap_add: add,
                    compare: 0,
                    swap_add_mask: boundary,
                    compare_mask: 0,
                }
                .encode(&mut b);
                put(sq, &mut off, &b);
            }
            _ => {}
        }
        if let Some(data) = &wr.inline {
            let n = write_inline(sq, off & mask, data).unwrap();
            off += n;
        } else {
            for s in &wr.sges {
                let mut b = [0u8; 16];
                DataSeg {
                    byte_count: s.len,
                    lkey: s.lkey,
                    addr: s.addr,
                }
                .encode(&mut b);
                put(sq, &mut off, &b);
            }
        }
        let ds = ((off - base) / 16) as u8;
        let ctrl = CtrlSeg {
            opmod: 0,
            wqe_index: start,
            opcode,
            qpn: qp.qpn,
            ds,
            signature: 0,
            fence_mode: if wr.fence {
                FENCE_MODE_SMALL_AND_FENCE
            } else {
                FENCE_MODE_NONE
            },
            ce: if wr.signaled {
                CE_CQ_UPDATE
            } else {
                CE_ERROR_ONLY
            },
            solicited: wr.solicited,
            imm,
        };
        let mut c = [0u8; 16];
        ctrl.encode(&mut c);
        ring_write(sq, base, &c).unwrap();
        let bbs = ring::wqebb_count(ds) as u16;
        let slot = (start as usize) & (qp.sq_wqebbs as usize - 1);
        qp.sq_wrid[slot] = wr.id;
        qp.cur_post = start.wrapping_add(bbs);
        (start, bbs)
    }

    /// Stores the SQ doorbell record, then the UAR doorbell (plain or
    /// BlueFlame) for the WQE at `index` of `bbs` WQEBBs, then kicks.
    pub fn ring_sq(
        &mut self,
        qp: &mut TestQp,
        index: u16,
        bbs: u16,
        how: Ring,
    ) -> Result<(), DoorbellError> {
        let db = self.doorbell_stores(qp, index, bbs, how);
        let mem = &mut self.mem;
        self.fabric
            .hca(qp.hca as u16)
            .unwrap()
            .send_doorbell(mem, &db)
    }

    /// The stores of [`World::ring_sq`] (doorbell record, UAR register),
    /// without the doorbell call they lead to, which the caller makes.
    pub fn doorbell_stores(
        &mut self,
        qp: &mut TestQp,
        index: u16,
        bbs: u16,
        how: Ring,
    ) -> SendDoorbell {
        self.mem.put(
            qp.dbr + QP_DBR_SEND_OFFSET as u64,
            &counter_word(qp.cur_post),
        );
        let reg = qp.uar
            + bf_reg_offset(qp.bfreg as usize).unwrap() as u64
            + qp.half as u64 * BF_BUF_SIZE as u64;
        let ring_len = qp.sq_wqebbs as usize * WQEBB_SIZE;
        let off = ring::sq_offset(index, qp.sq_wqebbs.trailing_zeros());
        let mut wqe = vec![0u8; bbs as usize * WQEBB_SIZE];
        mlx5_prm::sq::ring_read(self.mem.get(qp.sq_buf, ring_len), off, &mut wqe).unwrap();
        let blueflame_len = match how {
            Ring::Plain => {
                let ctrl: [u8; 16] = wqe[..16].try_into().unwrap();
                self.mem.put(reg, &send_doorbell(&ctrl));
                0
            }
            Ring::BlueFlame => {
                self.mem.put(reg, &wqe);
                wqe.len() as u32
            }
        };
        let db = SendDoorbell {
            qpn: qp.qpn,
            half: qp.half,
            blueflame_len,
        };
        qp.half ^= 1;
        db
    }

    /// Posts a list of work requests with one doorbell, and runs the engine.
    pub fn post_send_list(
        &mut self,
        qp: &mut TestQp,
        wrs: &[Wr],
        how: Ring,
    ) -> Result<(), DoorbellError> {
        let mut last = (0, 0);
        for wr in wrs {
            last = self.build_wqe(qp, wr);
        }
        let r = self.ring_sq(qp, last.0, last.1, how);
        self.run();
        r
    }

    /// Posts one work request and runs the engine.
    pub fn post_send(&mut self, qp: &mut TestQp, wr: &Wr) -> Result<(), DoorbellError> {
        self.post_send_list(qp, std::slice::from_ref(wr), Ring::Plain)
    }

    /// Posts a receive and updates the doorbell record (no kick: the model
    /// reads the record when it needs a receive).
    pub fn post_recv(&mut self, qp: &mut TestQp, id: u64, sges: &[Sge]) {
        let slot = (qp.rq_head as u32 & (qp.rq_wqes - 1)) as u64;
        let addr = qp.rq_buf + slot * qp.rq_stride as u64;
        let segs: Vec<DataSeg> = sges
            .iter()
            .map(|s| DataSeg {
                byte_count: s.len,
                lkey: s.lkey,
                addr: s.addr,
            })
            .collect();
        write_recv_wqe(self.mem.slice_mut(addr, qp.rq_stride as usize), &segs).unwrap();
        qp.rq_wrid[slot as usize] = id;
        qp.rq_head = qp.rq_head.wrapping_add(1);
        self.mem.put(
            qp.dbr + QP_DBR_RECV_OFFSET as u64,
            &counter_word(qp.rq_head),
        );
    }

    /// Polls one completion; maps its WQE counter back to a wr_id through
    /// `qps` (the QPs completing to this CQ).
    pub fn poll(&mut self, cq: &mut TestCq, qps: &[&TestQp]) -> Option<Wc> {
        let idx = ring::ring_index(cq.ci, cq.log) as u64;
        let addr = cq.buf + idx * CQE_SIZE as u64;
        let op_own = self.mem.get(addr + OP_OWN_OFFSET as u64, 1)[0];
        if !ring::cqe_sw_owned(op_own, cq.ci, cq.log) {
            return None;
        }
        let bytes: [u8; CQE_SIZE] = self.mem.get(addr, CQE_SIZE).try_into().unwrap();
        let opcode = CqeOpcode::try_from(op_own >> 4).unwrap();
        let wc = if opcode.is_error() {
            let e = ErrCqe::decode(&bytes).unwrap();
            Wc {
                wr_id: 0,
                opcode,
                syndrome: Some(e.syndrome),
                byte_len: 0,
                imm: 0,
                qpn: e.qpn,
                wqe_counter: e.wqe_counter,
                send_opcode: e.send_opcode,
                solicited: e.op_own.solicited,
                src_qpn: 0,
                slid: 0,
                sl: 0,
            }
        } else {
            let c = Cqe64::decode(&bytes).unwrap();
            Wc {
                wr_id: 0,
                opcode,
                syndrome: None,
                byte_len: c.byte_cnt,
                imm: c.imm_inval_rkey,
                qpn: c.qpn,
                wqe_counter: c.wqe_counter,
                send_opcode: c.send_opcode,
                solicited: c.op_own.solicited,
                src_qpn: c.src_qpn,
                slid: c.slid,
                sl: c.sl,
            }
        };
        let requester = matches!(opcode, CqeOpcode::Req | CqeOpcode::ReqErr);
        let qp = qps
            .iter()
            .find(|q| q.qpn == wc.qpn && q.hca == cq.hca)
            .expect("CQE for an unknown QP");
        let wr_id = if requester {
            qp.sq_wrid[wc.wqe_counter as usize & (qp.sq_wqebbs as usize - 1)]
        } else {
            qp.rq_wrid[wc.wqe_counter as usize & (qp.rq_wqes as usize - 1)]
        };
        cq.ci = cq.ci.wrapping_add(1);
        self.mem
            .put(cq.dbr + CQ_DBR_SET_CI_OFFSET as u64, &set_ci_word(cq.ci));
        Some(Wc { wr_id, ..wc })
    }

    /// Polls until the CQ is empty.
    pub fn poll_all(&mut self, cq: &mut TestCq, qps: &[&TestQp]) -> Vec<Wc> {
        let mut v = Vec::new();
        while let Some(wc) = self.poll(cq, qps) {
            v.push(wc);
        }
        v
    }

    /// Arms `cq` (ARM word in the doorbell record, then the UAR doorbell).
    pub fn arm_cq(&mut self, cq: &TestCq, solicited: bool) -> Result<(), DoorbellError> {
        self.arm_cq_raw(cq, cq.arm_sn, solicited, cq.ci)
    }

    /// Arms with explicit fields.
    pub fn arm_cq_raw(
        &mut self,
        cq: &TestCq,
        sn: u8,
        solicited: bool,
        ci: u32,
    ) -> Result<(), DoorbellError> {
        let arm = CqArm {
            sn: sn & 3,
            cmd: if solicited {
                ArmCmd::Solicited
            } else {
                ArmCmd::Next
            },
            ci,
        };
        let mut w = [0u8; 4];
        arm.encode(&mut w);
        self.mem.put(cq.dbr + CQ_DBR_ARM_OFFSET as u64, &w);
        let mut db = [0u8; 8];
        UarCqDoorbell { arm, cqn: cq.cqn }.encode(&mut db);
        let uar = self.ctx[cq.hca].uar;
        self.mem.put(uar + UAR_CQ_DOORBELL_OFFSET as u64, &db);
        let mem = &mut self.mem;
        self.fabric
            .hca(cq.hca as u16)
            .unwrap()
            .cq_doorbell(mem, uar)
    }

    /// Reads the new EQEs of instance `h`'s completion (or async) EQ.
    pub fn eqes(&mut self, h: usize, async_eq: bool) -> Vec<Eqe> {
        let mut out = Vec::new();
        loop {
            let eq = if async_eq {
                &self.ctx[h].async_eq
            } else {
                &self.ctx[h].comp
            };
            let idx = ring::ring_index(eq.ci, eq.log) as u64;
            let addr = eq.buf + idx * EQE_SIZE as u64;
            let owner = self.mem.get(addr + OWNER_OFFSET as u64, 1)[0];
            if !ring::eqe_valid(owner, eq.ci, eq.log) {
                break;
            }
            let bytes: [u8; EQE_SIZE] = self.mem.get(addr, EQE_SIZE).try_into().unwrap();
            out.push(Eqe::decode(&bytes).unwrap());
            let eq = if async_eq {
                &mut self.ctx[h].async_eq
            } else {
                &mut self.ctx[h].comp
            };
            eq.ci = eq.ci.wrapping_add(1);
        }
        out
    }

    /// Rings the EQ doorbell of instance `h` (update ci, and arm if `arm`).
    pub fn eq_doorbell(
        &mut self,
        h: usize,
        async_eq: bool,
        arm: bool,
    ) -> Result<(), DoorbellError> {
        let eq = if async_eq {
            &self.ctx[h].async_eq
        } else {
            &self.ctx[h].comp
        };
        let mut b = [0u8; 4];
        EqDoorbell {
            eqn: eq.eqn,
            ci: eq.ci,
        }
        .encode(&mut b);
        let uar = self.ctx[h].uar;
        let off = if arm {
            UAR_EQ_ARM_OFFSET
        } else {
            UAR_EQ_UPDATE_OFFSET
        };
        self.mem.put(uar + off as u64, &b);
        let mem = &mut self.mem;
        self.fabric
            .hca(h as u16)
            .unwrap()
            .eq_doorbell(mem, uar, arm)
    }

    /// Arms instance `h`'s EQ at its current consumer index.
    pub fn eq_arm(&mut self, h: usize, async_eq: bool) {
        self.eq_doorbell(h, async_eq, true).unwrap();
    }

    /// The QP's state.
    pub fn state(&mut self, qp: &TestQp) -> QpState {
        self.hca(qp.hca).query_qp(qp.qpn).unwrap().state
    }

    /// Provider-side memory write.
    pub fn fill(&mut self, addr: u64, data: &[u8]) {
        self.mem.put(addr, data);
    }

    /// Provider-side memory read.
    pub fn read(&self, addr: u64, len: usize) -> Vec<u8> {
        self.mem.get(addr, len).to_vec()
    }
}
