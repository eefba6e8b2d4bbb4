// SPDX-License-Identifier: GPL-2.0

//! Waiting for and checking what the device did: the CQEs, the data,
//! the completion event and its interrupt.

use core::sync::atomic::Ordering;
use kernel::sync::barrier::{
    dma_mb,
    Read, //
};
use kernel::{
    prelude::*,
    time::{
        delay::fsleep,
        Delta,
        Instant,
        Monotonic, //
    }, //
};

use super::{
    mem::Mem,
    CompIrq,
    Ctx,
    CQ_DBR_AT,
    LOG_CQ_SIZE,
    LOG_EQ_SIZE,
    RECV_DST,
    SEND_LEN,
    SEND_SRC,
    WAIT_MS,
    WRITE_DST,
    WRITE_LEN,
    WRITE_SRC, //
};
use crate::mlx5_prm::{
    cqe::{
        Cqe64,
        ErrCqe,
        OpOwn,
        CQE_SIZE,
        OP_OWN_OFFSET, //
    },
    doorbell::{
        set_ci_word,
        CQ_DBR_SET_CI_OFFSET, //
    },
    eqe::{
        Eqe,
        EqeData,
        EQE_SIZE,
        OWNER_OFFSET, //
    },
    opcode::{
        CqeOpcode,
        EventType,
        SendOpcode, //
    },
    ring,
};

/// One completion, the fields the test checks.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Completion {
    qpn: u32,
    opcode: u8,
    send_opcode: u8,
    byte_cnt: u32,
    wqe_counter: u16,
}

impl Ctx<'_, '_> {
    /// Sleeps a little while waiting for the device, answering page
    /// requests; `Err(ETIMEDOUT)` once `start` is `WAIT_MS` old.
    pub(super) fn pause(&mut self, start: Instant<Monotonic>, what: &str) -> Result {
        self.answer_page_requests();
        if start.elapsed() > Delta::from_millis(WAIT_MS) {
            dev_err!(
                self.bus.pdev(),
                "self-test: no {} after {} ms\n",
                what,
                WAIT_MS
            );
            return Err(ETIMEDOUT);
        }
        fsleep(Delta::from_micros(100));
        Ok(())
    }

    /// Waits for the three CQEs and checks them: the RDMA WRITE's and the
    /// SEND's on the first QP (WQE counters 0 and 1), the receive's on the
    /// second (64 bytes, WQE counter 0). Returns how many were consumed.
    pub(super) fn wait_cqes(&mut self, m: &Mem, qpn: [u32; 2]) -> Result<u32> {
        let want = [
            // mlx5 defines no byte count for the requester's CQE of an
            // RDMA WRITE or a SEND: only the responder's is compared.
            Completion {
                qpn: qpn[0],
                opcode: CqeOpcode::Req.into(),
                send_opcode: SendOpcode::RdmaWrite.into(),
                byte_cnt: 0,
                wqe_counter: 0,
            },
            Completion {
                qpn: qpn[0],
                opcode: CqeOpcode::Req.into(),
                send_opcode: SendOpcode::Send.into(),
                byte_cnt: 0,
                wqe_counter: 1,
            },
            Completion {
                qpn: qpn[1],
                opcode: CqeOpcode::RespSend.into(),
                send_opcode: 0,
                byte_cnt: SEND_LEN as u32,
                wqe_counter: 0,
            },
        ];
        let mut seen = [false; 3];
        let log = u32::from(LOG_CQ_SIZE);
        let start = Instant::<Monotonic>::now();
        let mut ci = 0u32;
        while ci < want.len() as u32 {
            let at = ring::ring_index(ci, log) as usize * CQE_SIZE;
            let op_own = m.cq.byte(at + OP_OWN_OFFSET)?;
            if !ring::cqe_sw_owned(op_own, ci, log) {
                self.pause(start, "CQE")?;
                continue;
            }
            // The body only after its owner byte: dma_rmb().
            dma_mb(Read);
            let mut b = [0u8; CQE_SIZE];
            m.cq.read(at, &mut b)?;
            ci += 1;
            m.dbr
                .write_word(CQ_DBR_AT + CQ_DBR_SET_CI_OFFSET, set_ci_word(ci))?;
            let opcode = OpOwn::decode(op_own).map_err(|_| EIO)?.opcode;
            if opcode.is_error() {
                let e = ErrCqe::decode(&b).map_err(|_| EIO)?;
                dev_err!(
                    self.bus.pdev(),
                    "self-test: error CQE on QP {:#x}, WQE {}: syndrome {:#x}, vendor syndrome {:#x}\n",
                    e.qpn,
                    e.wqe_counter,
                    e.syndrome,
                    e.vendor_syndrome
                );
                return Err(EIO);
            }
            let c = Cqe64::decode(&b).map_err(|_| EIO)?;
            let req = opcode == CqeOpcode::Req;
            let got = Completion {
                qpn: c.qpn,
                opcode: opcode.into(),
                send_opcode: if req { c.send_opcode } else { 0 },
                byte_cnt: if req { 0 } else { c.byte_cnt },
                wqe_counter: c.wqe_counter,
            };
            let k = want
                .iter()
                .zip(seen.iter())
                .position(|(w, &s)| !s && *w == got);
            match k.and_then(|k| seen.get_mut(k)) {
                Some(s) => *s = true,
                None => {
                    dev_err!(
                        self.bus.pdev(),
                        "self-test: unexpected CQE: QP {:#x}, opcode {}, send opcode {:#x}, {} bytes, WQE counter {}\n",
                        c.qpn,
                        got.opcode,
                        c.send_opcode,
                        c.byte_cnt,
                        c.wqe_counter
                    );
                    return Err(EIO);
                }
            }
        }
        Ok(ci)
    }

    /// Compares the bytes that arrived with their sources.
    pub(super) fn check_data(&mut self, m: &Mem) -> Result {
        for (src, dst, len, what) in [
            (SEND_SRC, RECV_DST, SEND_LEN, "SEND"),
            (WRITE_SRC, WRITE_DST, WRITE_LEN, "RDMA WRITE"),
        ] {
            let mut a = [0u8; 256];
            let mut b = [0u8; 256];
            let mut off = 0;
            while off < len {
                let n = (len - off).min(a.len());
                m.data.read(src + off, &mut a[..n])?;
                m.data.read(dst + off, &mut b[..n])?;
                if let Some(i) = a[..n].iter().zip(&b[..n]).position(|(x, y)| x != y) {
                    dev_err!(
                        self.bus.pdev(),
                        "self-test: {} data differs at byte {}: {:#04x}, expected {:#04x}\n",
                        what,
                        off + i,
                        b[i],
                        a[i]
                    );
                    return Err(EIO);
                }
                off += n;
            }
        }
        // Nothing beyond the 64 bytes sent reached the receive buffer.
        if m.data.byte(RECV_DST + SEND_LEN)? != 0 {
            dev_err!(
                self.bus.pdev(),
                "self-test: receive buffer written past 64 bytes\n"
            );
            return Err(EIO);
        }
        Ok(())
    }

    /// Waits for the completion event of CQ `cqn` in EQ `eqn` (the CQ was
    /// armed, so its first CQE fired it).
    pub(super) fn wait_event(&mut self, m: &Mem, eqn: u8, cqn: u32) -> Result {
        let log = u32::from(LOG_EQ_SIZE);
        let start = Instant::<Monotonic>::now();
        loop {
            if ring::eqe_valid(m.eq.byte(OWNER_OFFSET)?, 0, log) {
                break;
            }
            self.pause(start, "completion event")?;
        }
        dma_mb(Read);
        let mut b = [0u8; EQE_SIZE];
        m.eq.read(0, &mut b)?;
        match Eqe::decode(&b) {
            Ok(Eqe {
                event_type: EventType::Comp,
                data: EqeData::Comp { cqn: c },
                ..
            }) if c == cqn => Ok(()),
            _ => {
                dev_err!(
                    self.bus.pdev(),
                    "self-test: EQ {} holds no completion event of CQ {:#x}\n",
                    eqn,
                    cqn
                );
                Err(EIO)
            }
        }
    }

    /// Waits for the completion EQ's interrupt; returns how many came.
    pub(super) fn wait_interrupt(&mut self, irq: &CompIrq) -> Result<u32> {
        let start = Instant::<Monotonic>::now();
        loop {
            let n = irq.count.load(Ordering::Relaxed);
            if n > 0 {
                return Ok(n);
            }
            self.pause(start, "completion interrupt")?;
        }
    }
}
