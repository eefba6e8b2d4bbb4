// SPDX-License-Identifier: GPL-2.0

//! Doorbells: what the provider stored in the doorbell records and the UAR
//! page, read and cross-checked before anything happens.
//!
//! On real hardware a doorbell is a store to the UAR page. The software HCA
//! cannot see that store, so after performing it the provider makes one
//! "kick" call (an ioctl in the kernel) naming what it rang; the model then
//! reads the UAR page and the doorbell records itself and refuses anything
//! that does not add up. A refused doorbell executes nothing, is counted in
//! [`super::stats::Stats::doorbell_errors`] and is returned as a
//! [`DoorbellError`].
//!
//! # Send doorbell
//!
//! The model reads the send counter of the QP doorbell record (the new SQ
//! producer counter, in WQEBBs) and the 8 bytes at the BlueFlame register
//! half the kick names. Those bytes must equal the first 8 bytes of the
//! control segment of the last posted WQE, i.e. name the same opmod, WQE
//! index, opcode, QPN and DS count; that WQE must end exactly at the send
//! counter, and the posted WQEBBs must fit in the SQ. For a BlueFlame
//! doorbell, the whole copy must equal that WQE's WQEBBs in the SQ. Only
//! then is the producer counter accepted; execution happens in the engine.
//!
//! So the kick must reach the model before the same QP (or another QP
//! sharing its BlueFlame register) rings again: providers ring and kick
//! inside the lock that already serialises posting to the SQ and the
//! register's alternating halves, as libmlx5 does for the ring itself.
//!
//! # CQ doorbell
//!
//! The 64-bit UAR CQ doorbell (ARM word, CQN) must name a CQ armed through
//! this UAR page, and its ARM word must equal the one in the CQ's doorbell
//! record.
//!
//! # EQ doorbell
//!
//! The 32-bit EQ doorbell (EQN, consumer index) at the arm or the update
//! offset must name an EQ of this UAR page with a consumer index within the
//! EQEs written.

use super::cq::ArmOutcome;
use super::dev::Dev;
use super::hca::Hca;
use super::mem::{DmaMemory, Platform};
use super::prm::doorbell::{
    bf_half_offset, send_doorbell, CqArm, CqDbRec, EqDoorbell, QpDbRec, SendDoorbellWord,
    UarCqDoorbell, BF_BUF_SIZE, CQ_DBR_SIZE, QP_DBR_SIZE, UAR_CQ_DOORBELL_OFFSET,
    UAR_EQ_ARM_OFFSET, UAR_EQ_UPDATE_OFFSET,
};
use super::prm::eqe::EqeData;
use super::prm::opcode::EventType;
use super::prm::ring;
use super::prm::wqe::{CtrlSeg, WQEBB_SIZE};
use super::qp::{QpState, Sq};
use super::stats::bump;
use super::table::{get_mut, Storage};
use super::wqe::read_ctrl;

/// A send doorbell as the provider rang it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendDoorbell {
    /// The QP rung.
    pub qpn: u32,
    /// Which half of the QP's BlueFlame register was written (0 or 1; the
    /// halves alternate after every doorbell).
    pub half: u8,
    /// 0 for a plain 8-byte doorbell; otherwise the bytes of WQE copied to
    /// the register half (BlueFlame), a multiple of 64.
    pub blueflame_len: u32,
}

/// Why a doorbell was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DoorbellError {
    /// No QP, CQ or EQ has the number rung.
    NoSuchObject,
    /// The object belongs to another UAR page.
    WrongUar,
    /// A doorbell record, the UAR page or the SQ could not be read.
    Unreadable,
    /// The QP has no SQ, or is in RESET.
    NotAccepting,
    /// The QP doorbell record's send counter equals what was already
    /// accepted: nothing new was posted.
    NothingPosted,
    /// The send counter claims more WQEBBs than the SQ has room for, or a
    /// doorbell word has reserved bits set.
    BadCounter,
    /// The UAR doorbell bytes do not match the control segment of the last
    /// WQE the doorbell record announces.
    WqeMismatch,
    /// Not a register half of the QP (half above 1), or a BlueFlame length
    /// that is not the last WQE's size or exceeds a half.
    BadRegister,
    /// The BlueFlame copy differs from the WQE in the SQ.
    BlueFlameMismatch,
    /// The UAR CQ doorbell and the CQ doorbell record's ARM word differ.
    ArmMismatch,
}

impl<S: Storage> Hca<S> {
    /// Handles a send doorbell (see the module documentation).
    ///
    /// # Errors
    ///
    /// The [`DoorbellError`] that refused it; nothing was executed.
    pub fn send_doorbell<M: DmaMemory>(
        &mut self,
        mem: &mut M,
        db: &SendDoorbell,
    ) -> Result<(), DoorbellError> {
        self.send_doorbell_on(mem, db, None)
    }

    /// Handles a send doorbell rung on BlueFlame register `reg` of the
    /// QP's UAR page: a ConnectX takes a QP's doorbell on any register of
    /// the page its QP context names (a provider gives each QP one of the
    /// page's registers), so a device that sees where the store landed
    /// passes it here; [`Hca::send_doorbell`] reads the QP's own register.
    ///
    /// # Errors
    ///
    /// As [`Hca::send_doorbell`].
    pub fn send_doorbell_at<M: DmaMemory>(
        &mut self,
        mem: &mut M,
        db: &SendDoorbell,
        reg: u8,
    ) -> Result<(), DoorbellError> {
        self.send_doorbell_on(mem, db, Some(reg))
    }

    fn send_doorbell_on<M: DmaMemory>(
        &mut self,
        mem: &mut M,
        db: &SendDoorbell,
        reg: Option<u8>,
    ) -> Result<(), DoorbellError> {
        let mut dev = self.dev();
        let r = send(&mut dev, mem, db, reg);
        match r {
            Ok(()) => bump(&mut dev.stats.doorbells),
            Err(e) => dev.stats.doorbell_error(e),
        }
        r
    }

    /// Takes the send doorbell record of QP `qpn` as rung, with no kick:
    /// the software HCA's doorbell watcher calls this for QPs whose
    /// provider skipped the kick while the watcher was running (see the
    /// module documentation). Every WQE between the accepted producer
    /// counter and the record's must chain exactly (each control
    /// segment's WQE index where the previous WQE ended, the last ending
    /// at the counter), since no UAR doorbell names the last one.
    ///
    /// Returns whether anything new was accepted; a record with nothing
    /// new (or a QP in RESET, or one without an SQ) is not an error.
    ///
    /// # Errors
    ///
    /// [`DoorbellError::NoSuchObject`] for no such QP (not counted), or the
    /// [`DoorbellError`] that refused the record (counted).
    pub fn send_doorbell_record<M: DmaMemory>(
        &mut self,
        mem: &mut M,
        qpn: u32,
    ) -> Result<bool, DoorbellError> {
        let mut dev = self.dev();
        let r = send_record(&mut dev, mem, qpn);
        match r {
            Ok(true) => bump(&mut dev.stats.doorbells),
            Ok(false) | Err(DoorbellError::NoSuchObject) => {}
            Err(e) => dev.stats.doorbell_error(e),
        }
        r
    }

    /// WQEBBs QP `qpn`'s send doorbell record announces beyond what the
    /// model has accepted; `None` for no such QP, one without an SQ or in
    /// RESET, or a record that is unreadable or out of range (what a
    /// doorbell would refuse). Changes nothing and counts nothing.
    pub fn send_posted<M: DmaMemory>(&mut self, mem: &mut M, qpn: u32) -> Option<u16> {
        let mut dev = self.dev();
        let (_, qp) = dev.qp(qpn)?;
        let sq = qp.sq.filter(|_| qp.state != QpState::Reset)?;
        let counter = new_send_counter(mem, qp.attr.dbr_addr, &sq).ok()?;
        Some(counter.wrapping_sub(sq.pi))
    }

    /// Handles a CQ arm doorbell rung on the UAR page at `uar_addr`. A CQ
    /// that already holds a qualifying CQE fires at once (COMP EQE and,
    /// if its EQ is armed, an interrupt). An arm with a stale sequence
    /// number is accepted but ignored ([`super::stats::Stats::stale_arms`]).
    ///
    /// # Errors
    ///
    /// The [`DoorbellError`] that refused it.
    pub fn cq_doorbell<P: Platform>(
        &mut self,
        p: &mut P,
        uar_addr: u64,
    ) -> Result<(), DoorbellError> {
        let mut dev = self.dev();
        let r = arm_cq(&mut dev, p, uar_addr);
        match r {
            Ok(()) => bump(&mut dev.stats.doorbells),
            Err(e) => dev.stats.doorbell_error(e),
        }
        r
    }

    /// Reads CQ `cqn`'s ARM word from its doorbell record and, if it is
    /// not `*last` (the word this caller read before), takes it as the UAR
    /// CQ doorbell that follows it would be taken, and remembers it in
    /// `*last`. This is for a device that cannot see UAR stores and finds
    /// arm requests by reading records (the software HCA under rdma-core's
    /// provider, which stores the ARM word in the record before its UAR
    /// doorbell). A change is an exact stand-in for the doorbell: two arm
    /// requests in a row carry the same word only if no event fired
    /// between them (each fired event bumps the sequence number the next
    /// request carries), and then the second changes nothing on a device
    /// either. A word with reserved bits set is no request: its owner
    /// writes [`CQ_ARM_RECORD_UNARMED`] into the record when it creates the
    /// CQ, so that the zeroed record of a new CQ is not taken for an arm
    /// at sequence number 0 and consumer index 0.
    ///
    /// Returns whether a new request was applied.
    ///
    /// # Errors
    ///
    /// [`DoorbellError::NoSuchObject`] for no such CQ (not counted),
    /// [`DoorbellError::Unreadable`] for an unreadable record, and
    /// [`DoorbellError::BadCounter`] for a new word with reserved bits set
    /// (both counted).
    pub fn cq_arm_record<P: Platform>(
        &mut self,
        p: &mut P,
        cqn: u32,
        last: &mut u32,
    ) -> Result<bool, DoorbellError> {
        let mut dev = self.dev();
        let r = arm_from_record(&mut dev, p, cqn, last);
        match r {
            Ok(true) => bump(&mut dev.stats.doorbells),
            Ok(false) | Err(DoorbellError::NoSuchObject) => {}
            Err(e) => dev.stats.doorbell_error(e),
        }
        r
    }

    /// Handles an EQ doorbell rung on the UAR page at `uar_addr`: at the
    /// arm offset if `arm`, else at the update offset. Arming an EQ that
    /// holds EQEs past the new consumer index raises its interrupt at once.
    ///
    /// # Errors
    ///
    /// The [`DoorbellError`] that refused it.
    pub fn eq_doorbell<P: Platform>(
        &mut self,
        p: &mut P,
        uar_addr: u64,
        arm: bool,
    ) -> Result<(), DoorbellError> {
        let mut dev = self.dev();
        let r = eq(&mut dev, p, uar_addr, arm);
        match r {
            Ok(()) => bump(&mut dev.stats.doorbells),
            Err(e) => dev.stats.doorbell_error(e),
        }
        r
    }

    /// Tells the model that receives were posted to QP `qpn` (the
    /// software-HCA kick for the receive side). mlx5 hardware has no
    /// receive doorbell register and the model reads the doorbell record
    /// whenever it needs a receive, so this is needed only for a QP in ERR,
    /// whose new receives are then flushed.
    ///
    /// # Errors
    ///
    /// [`DoorbellError::NoSuchObject`] if there is no such QP.
    pub fn recv_doorbell(&mut self, qpn: u32) -> Result<(), DoorbellError> {
        let mut dev = self.dev();
        let (slot, qp) = dev.qp(qpn).ok_or(DoorbellError::NoSuchObject)?;
        if qp.state == QpState::Err {
            dev.sched.activate(dev.t.qps, slot);
        }
        Ok(())
    }

    /// What a device behind posted writes does instead of
    /// [`Hca::recv_doorbell`]: it watches the receive doorbell records of
    /// its QPs in ERR, so that receives posted after the error are flushed
    /// (`ib_drain_rq` waits for one). Schedules every QP in ERR for a flush
    /// pass, which finds nothing to do where nothing was posted; returns
    /// how many there are.
    pub fn watch_err_receives(&mut self) -> usize {
        let dev = self.dev();
        let mut n = 0;
        for slot in 0..dev.t.qps.len() {
            let Ok(s) = u32::try_from(slot) else {
                break;
            };
            let in_err = dev
                .t
                .qps
                .get(slot)
                .and_then(|q| q.obj.as_ref())
                .is_some_and(|q| q.state == QpState::Err);
            if in_err {
                dev.sched.activate(dev.t.qps, s);
                n += 1;
            }
        }
        n
    }
}

/// Reads the 8 bytes of an 8-byte record or register.
fn read8<M: DmaMemory>(mem: &mut M, addr: u64) -> Result<[u8; 8], DoorbellError> {
    let mut b = [0u8; 8];
    mem.read(addr, &mut b)
        .map_err(|_| DoorbellError::Unreadable)?;
    Ok(b)
}

/// The size in WQEBBs of the WQE the doorbell bytes `db` name, if it is
/// the last one posted: its WQE index and DS count must place it to end
/// exactly at `end` within the `posted` new WQEBBs, and its control segment
/// in the SQ must begin with the same 8 bytes. (An unknown opcode is left
/// for the engine to report as a local QP operation error.)
fn find_rung_wqe<M: DmaMemory>(
    mem: &mut M,
    sq: &Sq,
    end: u16,
    posted: u16,
    db: &[u8; 8],
) -> Option<u16> {
    let word = SendDoorbellWord::decode(db);
    let bbs = u16::from(ring::wqebb_count(word.ds));
    if bbs == 0 || bbs > posted || word.wqe_index.wrapping_add(bbs) != end {
        return None;
    }
    let bytes: [u8; CtrlSeg::SIZE] = read_ctrl(mem, sq, word.wqe_index)?;
    (send_doorbell(&bytes) == *db).then_some(bbs)
}

fn send<M: DmaMemory>(
    dev: &mut Dev<'_>,
    mem: &mut M,
    db: &SendDoorbell,
    reg: Option<u8>,
) -> Result<(), DoorbellError> {
    let (slot, qp) = dev.qp(db.qpn).ok_or(DoorbellError::NoSuchObject)?;
    let sq = qp.sq.ok_or(DoorbellError::NotAccepting)?;
    if qp.state == QpState::Reset {
        return Err(DoorbellError::NotAccepting);
    }
    let counter = new_send_counter(mem, qp.attr.dbr_addr, &sq)?;
    let posted = counter.wrapping_sub(sq.pi);
    if posted == 0 {
        return Err(DoorbellError::NothingPosted);
    }
    let reg = bf_half_offset(usize::from(reg.unwrap_or(qp.attr.bfreg)), db.half)
        .map_err(|_| DoorbellError::BadRegister)?;
    let reg_addr = qp.attr.uar_addr.wrapping_add(reg as u64);
    let bytes = read8(mem, reg_addr)?;
    let bbs = find_rung_wqe(mem, &sq, counter, posted, &bytes).ok_or(DoorbellError::WqeMismatch)?;
    if db.blueflame_len != 0 {
        check_blueflame(
            mem,
            &sq,
            counter.wrapping_sub(bbs),
            bbs,
            reg_addr,
            db.blueflame_len,
        )?;
    }
    let state = qp.state;
    if let Some(s) = qp.sq.as_mut() {
        s.pi = counter;
    }
    if matches!(state, QpState::Rts | QpState::Err) {
        dev.sched.activate(dev.t.qps, slot);
    }
    Ok(())
}

fn send_record<M: DmaMemory>(
    dev: &mut Dev<'_>,
    mem: &mut M,
    qpn: u32,
) -> Result<bool, DoorbellError> {
    let (slot, qp) = dev.qp(qpn).ok_or(DoorbellError::NoSuchObject)?;
    let Some(sq) = qp.sq else {
        return Ok(false);
    };
    if qp.state == QpState::Reset {
        return Ok(false);
    }
    let counter = new_send_counter(mem, qp.attr.dbr_addr, &sq)?;
    if counter == sq.pi {
        return Ok(false);
    }
    // Walk the new WQEs by their control segments.
    let mut at = sq.pi;
    while at != counter {
        let ctrl: [u8; CtrlSeg::SIZE] = read_ctrl(mem, &sq, at).ok_or(DoorbellError::Unreadable)?;
        let word = SendDoorbellWord::decode(&send_doorbell(&ctrl));
        let bbs = u16::from(ring::wqebb_count(word.ds));
        if word.wqe_index != at || bbs == 0 || bbs > counter.wrapping_sub(at) {
            return Err(DoorbellError::WqeMismatch);
        }
        at = at.wrapping_add(bbs);
    }
    let state = qp.state;
    if let Some(s) = qp.sq.as_mut() {
        s.pi = counter;
    }
    if matches!(state, QpState::Rts | QpState::Err) {
        dev.sched.activate(dev.t.qps, slot);
    }
    Ok(true)
}

/// The send counter of the QP doorbell record at `dbr_addr`, checked to
/// claim no more WQEBBs than `sq` has room for.
fn new_send_counter<M: DmaMemory>(
    mem: &mut M,
    dbr_addr: u64,
    sq: &Sq,
) -> Result<u16, DoorbellError> {
    let rec = read8(mem, dbr_addr)?;
    let rec: &[u8; QP_DBR_SIZE] = &rec;
    let counter = QpDbRec::decode(rec)
        .map_err(|_| DoorbellError::BadCounter)?
        .send_counter;
    if u32::from(counter.wrapping_sub(sq.ci)) > 1u32 << sq.log {
        return Err(DoorbellError::BadCounter);
    }
    Ok(counter)
}

/// Compares a BlueFlame copy of `len` bytes at `reg_addr` with the `bbs`
/// WQEBBs of the WQE at `index`.
fn check_blueflame<M: DmaMemory>(
    mem: &mut M,
    sq: &Sq,
    index: u16,
    bbs: u16,
    reg_addr: u64,
    len: u32,
) -> Result<(), DoorbellError> {
    if len as usize != usize::from(bbs) * WQEBB_SIZE || len as usize > BF_BUF_SIZE {
        return Err(DoorbellError::BadRegister);
    }
    let mut copy = [0u8; WQEBB_SIZE];
    let mut orig = [0u8; WQEBB_SIZE];
    for k in 0..bbs {
        let off = u64::from(k) * WQEBB_SIZE as u64;
        mem.read(reg_addr.wrapping_add(off), &mut copy)
            .map_err(|_| DoorbellError::Unreadable)?;
        let at = ring::sq_offset(index.wrapping_add(k), sq.log) as u64;
        sq.buf
            .read(mem, at, &mut orig)
            .map_err(|_| DoorbellError::Unreadable)?;
        if copy != orig {
            return Err(DoorbellError::BlueFlameMismatch);
        }
    }
    Ok(())
}

fn arm_cq<P: Platform>(dev: &mut Dev<'_>, p: &mut P, uar_addr: u64) -> Result<(), DoorbellError> {
    let db = read8(p, uar_addr.wrapping_add(UAR_CQ_DOORBELL_OFFSET as u64))?;
    let db = UarCqDoorbell::decode(&db).map_err(|_| DoorbellError::BadCounter)?;
    let cq = get_mut(dev.t.cqs, db.cqn).ok_or(DoorbellError::NoSuchObject)?;
    if cq.attr.uar_addr != uar_addr {
        return Err(DoorbellError::WrongUar);
    }
    let rec: [u8; CQ_DBR_SIZE] = read8(p, cq.attr.dbr_addr)?;
    let rec = CqDbRec::decode(&rec).map_err(|_| DoorbellError::ArmMismatch)?;
    if rec.arm != db.arm {
        return Err(DoorbellError::ArmMismatch);
    }
    apply_arm(dev, p, db.cqn, db.arm);
    Ok(())
}

/// What the record holds until the CQ's owner first arms it: not an ARM
/// word (bit 31 is reserved), see [`Hca::cq_arm_record`].
pub const CQ_ARM_RECORD_UNARMED: u32 = 0x8000_0000;

fn arm_from_record<P: Platform>(
    dev: &mut Dev<'_>,
    p: &mut P,
    cqn: u32,
    last: &mut u32,
) -> Result<bool, DoorbellError> {
    let cq = get_mut(dev.t.cqs, cqn).ok_or(DoorbellError::NoSuchObject)?;
    let rec: [u8; CQ_DBR_SIZE] = read8(p, cq.attr.dbr_addr)?;
    let word = CqDbRec::arm_word_of(&rec);
    if word == *last {
        return Ok(false);
    }
    *last = word;
    let arm = CqArm::from_word(word).map_err(|_| DoorbellError::BadCounter)?;
    apply_arm(dev, p, cqn, arm);
    Ok(true)
}

/// Applies an accepted arm request to CQ `cqn`: a CQ that already holds
/// a qualifying CQE fires at once.
fn apply_arm<P: Platform>(dev: &mut Dev<'_>, p: &mut P, cqn: u32, arm: CqArm) {
    let Some(cq) = get_mut(dev.t.cqs, cqn) else {
        return;
    };
    let eqn = cq.attr.eqn;
    match cq.arm(arm) {
        ArmOutcome::Armed => {}
        ArmOutcome::Ignored => bump(&mut dev.stats.stale_arms),
        ArmOutcome::Fire => {
            bump(&mut dev.stats.comp_events);
            let id = dev.id;
            let posted = get_mut(dev.t.eqs, u32::from(eqn))
                .is_some_and(|eq| eq.post(p, id, EventType::Comp, EqeData::Comp { cqn }));
            if !posted {
                bump(&mut dev.stats.events_dropped);
            }
        }
    }
}

fn eq<P: Platform>(
    dev: &mut Dev<'_>,
    p: &mut P,
    uar_addr: u64,
    arm: bool,
) -> Result<(), DoorbellError> {
    let offset = if arm {
        UAR_EQ_ARM_OFFSET
    } else {
        UAR_EQ_UPDATE_OFFSET
    };
    let mut b = [0u8; 4];
    p.read(uar_addr.wrapping_add(offset as u64), &mut b)
        .map_err(|_| DoorbellError::Unreadable)?;
    let db = EqDoorbell::decode(&b);
    let id = dev.id;
    let eq = get_mut(dev.t.eqs, u32::from(db.eqn)).ok_or(DoorbellError::NoSuchObject)?;
    if eq.attr.uar_addr != uar_addr {
        return Err(DoorbellError::WrongUar);
    }
    let info = eq.info();
    if ring::ci24_distance(db.ci, info.producer_index) > 1u32 << eq.attr.log_size {
        return Err(DoorbellError::BadCounter);
    }
    eq.doorbell(p, id, db.ci, arm);
    Ok(())
}
