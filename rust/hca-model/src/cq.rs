// SPDX-License-Identifier: GPL-2.0

//! Completion queues: the CQE ring, overrun detection through the SET_CI
//! doorbell record, and the arm state machine.
//!
//! A CQ number is its slot index. The embedder initialises every CQE's
//! `op_own` to 0xf0 (opcode INVALID) before creating the CQ; the model
//! writes each CQE's body first and its `op_own` byte (owner = pass parity
//! of the producer index) last.
//!
//! # Overrun
//!
//! Before writing, the model compares its producer index with the consumer
//! index software last stored in the SET_CI word of the CQ doorbell record
//! (re-reading the record only when the cached value says the ring is
//! full). A CQE that would overwrite an unconsumed one is not written: the
//! CQ enters the error state for good (no further CQE is ever written to
//! it) and a CQ_ERROR event with syndrome "CQ overrun" goes to the async
//! EQ. The QP whose completion was lost moves to ERR with a
//! WQ_CATAS_ERROR event; other QPs using the CQ find out the same way when
//! they next complete something, and their flush CQEs are dropped.
//!
//! # Arming
//!
//! The ARM word carries `sn`, a command (next completion, or solicited
//! only) and the consumer index software has polled up to. The model counts
//! the completion events it generates for the CQ; an arm whose `sn` is not
//! that count modulo 4 is stale (software has not yet read an event the CQ
//! already produced) and is ignored. Arming is one-shot. A CQ armed while it
//! already holds a CQE past the armed consumer index (for "solicited only":
//! a solicited receive CQE or an error CQE) fires at once.

use super::mem::DmaMemory;
use super::prm::cqe::{Cqe64, ErrCqe, CQE_SIZE, OP_OWN_OFFSET};
use super::prm::doorbell::{ArmCmd, CqArm, CqDbRec, CQ_DBR_SIZE};
use super::prm::ring;
use super::ring::{Ring, RingPages};

/// What the embedder gives to create a CQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqAttr {
    /// log2 of the number of CQEs.
    pub log_size: u8,
    /// DMA address of the CQE ring (`64 << log_size` bytes); with
    /// `buf_pages`, the ring's offset in its first page.
    pub buf_addr: u64,
    /// The ring's page table, if its pages are scattered (see
    /// [`super::ring`]).
    pub buf_pages: Option<RingPages>,
    /// DMA address of the 8-byte CQ doorbell record (SET_CI, ARM).
    pub dbr_addr: u64,
    /// EQ that receives this CQ's completion events.
    pub eqn: u8,
    /// DMA address of the UAR page through which this CQ is armed; an arm
    /// doorbell rung on another UAR page is refused.
    pub uar_addr: u64,
}

/// A snapshot of a CQ's state, for debugfs and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqInfo {
    /// CQ number.
    pub cqn: u32,
    /// CQEs written so far (free-running producer counter).
    pub producer_index: u32,
    /// Consumer index last read from the SET_CI word (24 bits).
    pub consumer_index: u32,
    /// The pending arm, if any: solicited-only or not, and its consumer
    /// index.
    pub armed: Option<(bool, u32)>,
    /// Completion events generated modulo 4: the `sn` the next arm must
    /// carry.
    pub arm_sn: u8,
    /// Whether the CQ is in error (overrun).
    pub error: bool,
    /// Completion events generated.
    pub events: u32,
    /// DMA address of the doorbell record.
    pub dbr_addr: u64,
}

/// The body of a CQE to write; the CQ fills in the owner bit.
#[derive(Clone, Copy, Debug)]
pub(super) enum CqeBody {
    /// A successful completion.
    Ok(Cqe64),
    /// An error completion.
    Err(ErrCqe),
}

/// Why a CQE was not written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CqWriteError {
    /// The CQ was already in error; the CQE was dropped.
    InError,
    /// This CQE would have overrun the CQ, which is now in error.
    Overrun,
}

/// What an arm doorbell did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ArmOutcome {
    /// The arm is recorded.
    Armed,
    /// The CQ fires at once: the caller posts the completion event.
    Fire,
    /// Stale sequence number, or CQ in error: ignored.
    Ignored,
}

/// A completion queue.
#[derive(Debug)]
pub struct Cq {
    pub(super) attr: CqAttr,
    pub(super) cqn: u32,
    pub(super) pi: u32,
    pub(super) cached_ci: u32,
    pub(super) arm: Option<(ArmCmd, u32)>,
    pub(super) events: u32,
    pub(super) error: bool,
    /// Producer index of the last solicited or error CQE, for arming
    /// "solicited only" with CQEs already pending.
    pub(super) last_notable: Option<u32>,
    /// QPs that complete to this CQ (send and receive side counted apart).
    pub(super) users: u32,
}

impl Cq {
    pub(super) fn new(cqn: u32, attr: CqAttr) -> Self {
        Cq {
            attr,
            cqn,
            pi: 0,
            cached_ci: 0,
            arm: None,
            events: 0,
            error: false,
            last_notable: None,
            users: 0,
        }
    }

    /// The state of the CQ.
    pub fn info(&self) -> CqInfo {
        CqInfo {
            cqn: self.cqn,
            producer_index: self.pi,
            consumer_index: self.cached_ci,
            armed: self.arm.map(|(cmd, ci)| (cmd == ArmCmd::Solicited, ci)),
            arm_sn: self.sn(),
            error: self.error,
            events: self.events,
            dbr_addr: self.attr.dbr_addr,
        }
    }

    fn size(&self) -> u32 {
        1u32 << self.attr.log_size
    }

    fn log(&self) -> u32 {
        u32::from(self.attr.log_size)
    }

    /// The arm sequence number the next valid arm carries.
    pub(super) fn sn(&self) -> u8 {
        (self.events & 3) as u8
    }

    /// Whether the ring has room for one more CQE, re-reading SET_CI if
    /// the cached value says it is full.
    fn has_room<M: DmaMemory>(&mut self, mem: &mut M) -> bool {
        if ring::ci24_distance(self.cached_ci, self.pi) < self.size() {
            return true;
        }
        // The SET_CI word alone: the ARM word beside it is the arm
        // requests' business (and holds no request before the first).
        let mut rec = [0u8; CQ_DBR_SIZE];
        if mem.read(self.attr.dbr_addr, &mut rec).is_ok() {
            // Reserved bits set, or a consumer index ahead of the
            // producer, is garbage; keep the old one rather than believe
            // the ring has emptied.
            if let Ok(set_ci) = CqDbRec::set_ci_of(&rec) {
                if ring::ci24_distance(set_ci, self.pi) <= self.size() {
                    self.cached_ci = set_ci;
                }
            }
        }
        ring::ci24_distance(self.cached_ci, self.pi) < self.size()
    }

    /// Writes one CQE. `notable` marks a solicited receive CQE or an error
    /// CQE (what a solicited-only arm waits for). Returns whether the CQ
    /// fires: the caller then posts the completion event to the CQ's EQ.
    pub(super) fn write<M: DmaMemory>(
        &mut self,
        mem: &mut M,
        body: CqeBody,
        notable: bool,
    ) -> Result<bool, CqWriteError> {
        if self.error {
            return Err(CqWriteError::InError);
        }
        if !self.has_room(mem) {
            self.error = true;
            self.arm = None;
            return Err(CqWriteError::Overrun);
        }
        let owner = ring::owner_bit(self.pi, self.log());
        let mut bytes = [0u8; CQE_SIZE];
        match body {
            CqeBody::Ok(mut c) => {
                c.op_own.owner = owner;
                c.encode(&mut bytes);
            }
            CqeBody::Err(mut c) => {
                c.op_own.owner = owner;
                c.encode(&mut bytes);
            }
        }
        let index = u64::from(ring::ring_index(self.pi, self.log()));
        let ring = Ring::new(self.attr.buf_addr, self.attr.buf_pages);
        let at = index * CQE_SIZE as u64;
        let (body, op_own) = bytes.split_at(OP_OWN_OFFSET);
        if ring.write(mem, at, body).is_err()
            || ring
                .write(mem, at.wrapping_add(OP_OWN_OFFSET as u64), op_own)
                .is_err()
        {
            // The CQ buffer is unreachable: mlx5 reports this as a CQ access
            // violation; the model treats it like an overrun.
            self.error = true;
            self.arm = None;
            return Err(CqWriteError::Overrun);
        }
        if notable {
            self.last_notable = Some(self.pi);
        }
        self.pi = self.pi.wrapping_add(1);
        let fire = match self.arm {
            Some((ArmCmd::Next, _)) => true,
            Some((ArmCmd::Solicited, _)) => notable,
            None => false,
        };
        if fire {
            self.fired();
        }
        Ok(fire)
    }

    fn fired(&mut self) {
        self.arm = None;
        self.events = self.events.wrapping_add(1);
    }

    /// Applies an arm request (already checked against the UAR doorbell).
    pub(super) fn arm(&mut self, arm: CqArm) -> ArmOutcome {
        if self.error || arm.sn != self.sn() {
            return ArmOutcome::Ignored;
        }
        let ci = ring::ci24(arm.ci);
        let pending = ring::ci24_distance(ci, self.pi);
        let pending_valid = pending != 0 && pending <= self.size();
        let fire_now = pending_valid
            && match arm.cmd {
                ArmCmd::Next => true,
                // The last notable CQE lies in [ci, pi).
                ArmCmd::Solicited => self
                    .last_notable
                    .is_some_and(|n| ring::ci24_distance(ci, n) < pending),
            };
        if fire_now {
            self.fired();
            ArmOutcome::Fire
        } else {
            self.arm = Some((arm.cmd, ci));
            ArmOutcome::Armed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::mem::DmaFault;
    use super::super::prm::cqe::OpOwn;
    use super::super::prm::opcode::CqeOpcode;
    use super::*;

    /// A CQ buffer of 4 CQEs at 0 and its doorbell record at 0x1000.
    struct Mem {
        bytes: [u8; 0x1008],
    }

    impl DmaMemory for Mem {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
            let a = addr as usize;
            buf.copy_from_slice(self.bytes.get(a..a + buf.len()).ok_or(DmaFault)?);
            Ok(())
        }
        fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), DmaFault> {
            let a = addr as usize;
            self.bytes
                .get_mut(a..a + data.len())
                .ok_or(DmaFault)?
                .copy_from_slice(data);
            Ok(())
        }
    }

    fn cqe(solicited: bool) -> CqeBody {
        CqeBody::Ok(Cqe64 {
            ml_path: 0,
            slid: 0,
            grh: 0,
            sl: 0,
            src_qpn: 0,
            srqn_uidx: 0,
            imm_inval_rkey: 0,
            byte_cnt: 0,
            send_opcode: 0,
            qpn: 1,
            wqe_counter: 0,
            signature: 0,
            op_own: OpOwn {
                opcode: CqeOpcode::RespSend,
                format: 0,
                solicited,
                owner: false,
            },
        })
    }

    fn new_cq() -> (Cq, Mem) {
        let attr = CqAttr {
            log_size: 2,
            buf_addr: 0,
            buf_pages: None,
            dbr_addr: 0x1000,
            eqn: 0,
            uar_addr: 0,
        };
        (Cq::new(5, attr), Mem { bytes: [0; 0x1008] })
    }

    fn arm(sn: u8, cmd: ArmCmd, ci: u32) -> CqArm {
        CqArm { sn, cmd, ci }
    }

    #[test]
    fn overrun_after_size_unconsumed() {
        let (mut cq, mut mem) = new_cq();
        for _ in 0..4 {
            assert_eq!(cq.write(&mut mem, cqe(false), false), Ok(false));
        }
        assert_eq!(
            cq.write(&mut mem, cqe(false), false),
            Err(CqWriteError::Overrun)
        );
        assert!(cq.info().error);
        assert_eq!(
            cq.write(&mut mem, cqe(false), false),
            Err(CqWriteError::InError)
        );
    }

    #[test]
    fn set_ci_frees_room() {
        let (mut cq, mut mem) = new_cq();
        for i in 0..40u32 {
            assert_eq!(cq.write(&mut mem, cqe(false), false), Ok(false));
            mem.bytes[0x1000..0x1004].copy_from_slice(&(i + 1).to_be_bytes());
        }
        // Owner bit of entry 0 after 40 CQEs (pass 9): 1.
        assert_eq!(mem.bytes[63] & 1, 1);
    }

    #[test]
    fn arming_rules() {
        let (mut cq, mut mem) = new_cq();
        // Armed "next": the next CQE fires, then the CQ is quiet.
        assert_eq!(cq.arm(arm(0, ArmCmd::Next, 0)), ArmOutcome::Armed);
        assert_eq!(cq.write(&mut mem, cqe(false), false), Ok(true));
        assert_eq!(cq.write(&mut mem, cqe(false), false), Ok(false));
        // Stale sn is ignored.
        assert_eq!(cq.arm(arm(0, ArmCmd::Next, 2)), ArmOutcome::Ignored);
        // Armed with CQEs pending past ci: fires at once.
        assert_eq!(cq.arm(arm(1, ArmCmd::Next, 1)), ArmOutcome::Fire);
        // Nothing pending past ci 2: waits.
        assert_eq!(cq.arm(arm(2, ArmCmd::Solicited, 2)), ArmOutcome::Armed);
        assert_eq!(cq.write(&mut mem, cqe(false), false), Ok(false));
        assert_eq!(cq.write(&mut mem, cqe(true), true), Ok(true));
        // Solicited-only with a notable CQE already pending fires; without
        // one it waits.
        assert_eq!(cq.arm(arm(3, ArmCmd::Solicited, 3)), ArmOutcome::Fire);
        assert_eq!(cq.arm(arm(0, ArmCmd::Solicited, 4)), ArmOutcome::Armed);
        assert_eq!(cq.info().armed, Some((true, 4)));
    }
}
