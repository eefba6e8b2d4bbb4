// SPDX-License-Identifier: GPL-2.0

//! The responder side: what the QP a request is addressed to does with it.
//!
//! `request` checks a request against the responder QP's state, access
//! rights, MR table and receive queue without changing anything unless it
//! is refused; `finish` then consumes the receive WQE and writes the
//! responder CQE once the data has moved.
//!
//! Which side reports what (the IB spec's responder error classes, as
//! mlx5 reports them):
//!
//! | responder finds | requester CQE | responder |
//! |---|---|---|
//! | QP missing, not RC, not yet RTR, or in ERR | none yet: transport timeout, retries, then TRANSPORT_RETRY_EXC | unchanged |
//! | no receive WQE | none yet: RNR NAK, retries, then RNR_RETRY_EXC | unchanged |
//! | rkey invalid, wrong PD, out of bounds, MR or QP lacks the right | REMOTE_ACCESS | ERR, WQ_ACCESS_ERROR event |
//! | misaligned atomic target | REMOTE_INVAL_REQ | ERR, WQ_INVAL_REQ_ERROR event |
//! | receive WQE scatter entry invalid (key, PD, bounds, no LOCAL_WRITE) | REMOTE_OP | RESP_ERR LOCAL_PROT for that receive, ERR |
//! | receive WQE too small | REMOTE_INVAL_REQ | RESP_ERR LOCAL_LENGTH for that receive, ERR |
//!
//! Found while the data moves (`finish`), as a fault of the responder's
//! memory: a DMA fault, or a page-list entry of an rkey's or a scatter
//! entry's MR that cannot be read. A WRITE or READ then fails with
//! REMOTE_ACCESS (responder to ERR, WQ_ACCESS_ERROR event), a SEND with
//! REMOTE_OP (its receive completes with LOCAL_PROT, ERR). The atomic's
//! target is translated in `request`, so a bad entry there is refused like
//! a bad rkey.
//!
//! A responder in ERR flushes its remaining receives with WR_FLUSH_ERR.

use super::atomic::AtomicOp;
use super::cq::CqeBody;
use super::dev::{err_cqe, Dev};
use super::mem::Platform;
use super::mr::{self, resolve, Access};
use super::prm::cqe::{Cqe64, OpOwn};
use super::prm::doorbell::{QpDbRec, QP_DBR_SIZE};
use super::prm::opcode::{CqeOpcode, CqeSyndrome, EventType};
use super::prm::recv::RecvSegs;
use super::prm::ring;
use super::qp::{QpId, QpService, QpState, Rq};
use super::stats::bump;
use super::table::get_mut;
use super::transfer::{Piece, Pieces};
use super::wqe::seg_len;

/// The kind of a request on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ReqKind {
    /// SEND, SEND_IMM or SEND_INVAL (`inval`: the rkey to invalidate).
    Send {
        imm: Option<u32>,
        inval: Option<u32>,
    },
    /// RDMA_WRITE or RDMA_WRITE_IMM.
    Write { imm: Option<u32> },
    /// RDMA_READ.
    Read,
    /// An 8-byte atomic.
    Atomic(AtomicOp),
}

/// A request as it arrives at the responder.
#[derive(Clone, Copy, Debug)]
pub(super) struct Request {
    pub(super) kind: ReqKind,
    pub(super) dest_qpn: u32,
    /// The requester's QPN, port LID and path SL (the packet's source QP,
    /// LRH source LID and SL).
    pub(super) src_qpn: u32,
    pub(super) slid: u16,
    pub(super) sl: u8,
    pub(super) raddr: u64,
    pub(super) rkey: u32,
    pub(super) len: u64,
    pub(super) solicited: bool,
}

/// What the responder granted. Until [`finish`] or [`release`] takes it
/// back, the responder QP answers no other request (`Qp::responding`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Grant {
    /// The responder QP, to find it again in the phase that finishes.
    id: QpId,
    /// The receive WQE consumed (SEND, WRITE_IMM): its counter.
    recv: Option<u16>,
}

/// The responder's answer.
#[derive(Clone, Copy, Debug)]
pub(super) enum Answer {
    /// Nothing comes back: the requester times out.
    Silent,
    /// RNR NAK carrying the responder's RNR timer (IB encoding).
    Rnr { timer: u8 },
    /// NAK: the requester completes in error with this syndrome (the
    /// responder has already dealt with its own side).
    Nak(CqeSyndrome),
    /// Go ahead.
    Ack(Grant),
}

/// How many receive WQEs are posted to `rq` beyond the consumed ones,
/// according to the doorbell record at `dbr`. A counter claiming more than
/// the ring holds is garbage and counts as none.
pub(super) fn recvs_posted<P: Platform>(p: &mut P, dev_bad: &mut u64, rq: &Rq, dbr: u64) -> u16 {
    let mut b = [0u8; QP_DBR_SIZE];
    let Some(rec) = p
        .read(dbr, &mut b)
        .ok()
        .and_then(|()| QpDbRec::decode(&b).ok())
    else {
        bump(dev_bad);
        return 0;
    };
    let posted = rec.recv_counter.wrapping_sub(rq.ci);
    if u32::from(posted) > (1u32 << rq.log) {
        bump(dev_bad);
        return 0;
    }
    posted
}

/// A responder-side error with no receive WQE to report it on: ERR and an
/// affiliated asynchronous event.
fn fail_no_wqe<P: Platform>(dev: &mut Dev<'_>, p: &mut P, slot: u32, qpn: u32, ev: EventType) {
    dev.qp_to_error(slot);
    dev.qp_event(p, ev, qpn);
}

/// A responder-side error on the receive WQE `counter`: it completes in
/// error (consumed) and the QP moves to ERR.
pub(super) fn fail_recv<P: Platform>(
    dev: &mut Dev<'_>,
    p: &mut P,
    slot: u32,
    qpn: u32,
    cqn: u32,
    counter: u16,
    syndrome: CqeSyndrome,
) {
    if let Some(rq) = get_mut(dev.t.qps, slot).and_then(|q| q.rq.as_mut()) {
        rq.ci = rq.ci.wrapping_add(1);
    }
    let body = err_cqe(CqeOpcode::RespErr, syndrome, 0, qpn, counter);
    dev.qp_cqe(p, slot, cqn, body, true);
    dev.qp_to_error(slot);
}

/// Checks `req` at the responder and reserves what it needs. On
/// [`Answer::Ack`], `remote` holds the responder's side of the transfer:
/// the receive buffers of a SEND, the remote region of a WRITE or READ, the
/// 8-byte target of an atomic.
pub(super) fn request<P: Platform>(
    dev: &mut Dev<'_>,
    p: &mut P,
    req: &Request,
    remote: &mut Pieces,
    recv_buf: &mut [u8],
) -> Answer {
    bump(&mut dev.stats.requests);
    let Some((slot, qp)) = dev.qp(req.dest_qpn) else {
        return Answer::Silent;
    };
    // A QP still finishing another granted request (possible only for a
    // requester that is not its peer, with engines running side by side)
    // drops this one, as a responder drops a packet out of sequence: the
    // requester times out and retries.
    if !qp.state.receives() || qp.attr.service != QpService::Rc || qp.responding {
        return Answer::Silent;
    }
    let qpn = qp.qpn;
    let pdn = qp.attr.pdn;
    let recv_cqn = qp.attr.recv_cqn;
    let access = qp.conn.access;
    let rnr_timer = qp.conn.min_rnr_timer;
    let rq = qp.rq;
    let dbr = qp.attr.dbr_addr;
    let first_packet = qp.state == QpState::Rtr && !qp.comm_established;
    qp.comm_established = true;
    if first_packet {
        dev.qp_event(p, EventType::CommEst, qpn);
    }

    remote.clear();
    let need = match req.kind {
        ReqKind::Send { .. } => None,
        ReqKind::Write { .. } => Some(Access::REMOTE_WRITE),
        ReqKind::Read => Some(Access::REMOTE_READ),
        ReqKind::Atomic(_) => Some(Access::REMOTE_ATOMIC),
    };
    if let Some(need) = need {
        if !access.contains(need) {
            fail_no_wqe(dev, p, slot, qpn, EventType::WqAccessError);
            return Answer::Nak(CqeSyndrome::RemoteAccess);
        }
        if matches!(req.kind, ReqKind::Atomic(_)) && req.raddr & 7 != 0 {
            fail_no_wqe(dev, p, slot, qpn, EventType::WqInvalReqError);
            return Answer::Nak(CqeSyndrome::RemoteInvalReq);
        }
        // The IB spec checks no rkey for a zero-length RDMA transfer.
        if req.len != 0 {
            remote.clear();
            // An atomic's target is one 8-byte word (aligned, so within a
            // page): one DMA range, translated now. A READ's or WRITE's
            // pages are translated by the copy.
            let r = resolve(dev.t.mrs, req.rkey, pdn, req.raddr, req.len, need).and_then(|piece| {
                match req.kind {
                    ReqKind::Atomic(_) => {
                        mr::one_range(p, &piece).map(|addr| Piece::Dma { addr, len: req.len })
                    }
                    _ => Ok(piece),
                }
            });
            if !r.is_ok_and(|piece| remote.push(piece)) {
                fail_no_wqe(dev, p, slot, qpn, EventType::WqAccessError);
                return Answer::Nak(CqeSyndrome::RemoteAccess);
            }
        }
    }

    let wants_recv = matches!(
        req.kind,
        ReqKind::Send { .. } | ReqKind::Write { imm: Some(_) }
    );
    let Some(id) = QpId::of(dev.t.qps, slot) else {
        return Answer::Silent;
    };
    if !wants_recv {
        return grant(dev, id, None);
    }
    let Some(rq) = rq else {
        return Answer::Rnr { timer: rnr_timer };
    };
    if recvs_posted(p, &mut dev.stats.bad_recv_counters, &rq, dbr) == 0 {
        return Answer::Rnr { timer: rnr_timer };
    }
    let counter = rq.ci;
    if !matches!(req.kind, ReqKind::Send { .. }) {
        return grant(dev, id, Some(counter));
    }

    if let Err(s) = scatter_list(dev, p, &rq, pdn, req.len, remote, recv_buf) {
        fail_recv(dev, p, slot, qpn, recv_cqn, counter, s);
        return Answer::Nak(CqeSyndrome::RemoteOp);
    }
    if remote.total() < req.len {
        fail_recv(
            dev,
            p,
            slot,
            qpn,
            recv_cqn,
            counter,
            CqeSyndrome::LocalLength,
        );
        return Answer::Nak(CqeSyndrome::RemoteInvalReq);
    }
    // Remote invalidation, of an MR of this QP's PD, once the message is
    // known to fit: a key that names none is an invalid request.
    if let ReqKind::Send {
        inval: Some(rkey), ..
    } = req.kind
    {
        if mr::invalidate_remote(dev.t.mrs, pdn, rkey).is_err() {
            fail_no_wqe(dev, p, slot, qpn, EventType::WqInvalReqError);
            return Answer::Nak(CqeSyndrome::RemoteInvalReq);
        }
    }
    grant(dev, id, Some(counter))
}

/// Grants a request to the responder QP `id` (found in this same hold):
/// it is busy until the grant is finished or released.
#[inline]
fn grant(dev: &mut Dev<'_>, id: QpId, recv: Option<u16>) -> Answer {
    if let Some(qp) = get_mut(dev.t.qps, id.slot) {
        qp.responding = true;
    }
    Answer::Ack(Grant { id, recv })
}

/// Takes back a grant whose message never ended (the requester's memory
/// faulted): nothing completes, a receive WQE it named stays posted (or is
/// flushed, if the QP went to ERR meanwhile).
pub(super) fn release(dev: &mut Dev<'_>, grant: &Grant) {
    if let Some(qp) = grant.id.find(dev.t.qps) {
        qp.responding = false;
        if qp.state == QpState::Err {
            dev.sched.activate(dev.t.qps, grant.id.slot);
        }
    }
}

/// Reads the receive WQE at the consumer counter of `rq` (of a QP in PD
/// `pdn`) into `recv_buf` and resolves its scatter entries into `remote`
/// until they hold `need` bytes or the list ends (the caller compares
/// `remote.total()` with what it needs).
///
/// # Errors
///
/// LOCAL_QP_OP for a receive WQE that cannot be read or decoded,
/// LOCAL_PROT for a scatter entry whose key, PD, bounds or rights do not
/// allow the write.
pub(super) fn scatter_list<P: Platform>(
    dev: &Dev<'_>,
    p: &mut P,
    rq: &Rq,
    pdn: u32,
    need: u64,
    remote: &mut Pieces,
    recv_buf: &mut [u8],
) -> Result<(), CqeSyndrome> {
    remote.clear();
    let stride = 1usize << rq.log_stride;
    let index = u64::from(ring::ring_index(u32::from(rq.ci), rq.log));
    let read = match recv_buf.get_mut(..stride) {
        Some(w) => rq.buf.read(p, index << rq.log_stride, w).is_ok(),
        None => false,
    };
    let wqe = match recv_buf.get(..stride) {
        Some(w) if read => w,
        _ => return Err(CqeSyndrome::LocalQpOp),
    };
    let segs = RecvSegs::new(wqe).map_err(|_| CqeSyndrome::LocalQpOp)?;
    for seg in segs {
        if remote.total() >= need {
            break;
        }
        let len = seg_len(seg.byte_count);
        let piece = resolve(dev.t.mrs, seg.lkey, pdn, seg.addr, len, Access::LOCAL_WRITE)
            .map_err(|_| CqeSyndrome::LocalProt)?;
        // A receive WQE holds at most MAX_PIECES entries.
        if !remote.push(piece) {
            return Err(CqeSyndrome::LocalProt);
        }
    }
    Ok(())
}

/// Completes a granted request at the responder once the data has moved
/// (`ok`) or could not be (the responder's memory faulted: the receive, if
/// any, completes with LOCAL_PROT and the QP moves to ERR).
pub(super) fn finish<P: Platform>(
    dev: &mut Dev<'_>,
    p: &mut P,
    req: &Request,
    grant: &Grant,
    ok: bool,
) {
    // Destroyed or reset since the grant (engines side by side): the
    // message reached no QP.
    let Some(qp) = grant.id.find(dev.t.qps) else {
        return;
    };
    qp.responding = false;
    // Moved to ERR since the grant: the flush, which left the reserved
    // receive alone while the data moved, completes it now, with
    // WR_FLUSH_ERR.
    if qp.state == QpState::Err {
        dev.sched.activate(dev.t.qps, grant.id.slot);
        return;
    }
    let slot = grant.id.slot;
    let qpn = qp.qpn;
    let cqn = qp.attr.recv_cqn;
    let Some(counter) = grant.recv else {
        if !ok {
            fail_no_wqe(dev, p, slot, qpn, EventType::WqAccessError);
        }
        return;
    };
    if !ok {
        fail_recv(dev, p, slot, qpn, cqn, counter, CqeSyndrome::LocalProt);
        return;
    }
    if let Some(rq) = qp.rq.as_mut() {
        rq.ci = rq.ci.wrapping_add(1);
    }
    bump(&mut dev.stats.recvs_consumed);
    let (opcode, imm) = match req.kind {
        ReqKind::Send {
            inval: Some(rkey), ..
        } => (CqeOpcode::RespSendInv, rkey),
        ReqKind::Send { imm: None, .. } => (CqeOpcode::RespSend, 0),
        ReqKind::Send { imm: Some(i), .. } => (CqeOpcode::RespSendImm, i),
        ReqKind::Write { imm } => (CqeOpcode::RespWrImm, imm.unwrap_or(0)),
        ReqKind::Read | ReqKind::Atomic(_) => return,
    };
    // What an mlx5 HCA reports of the packet on an InfiniBand port: its
    // source QP, LID and SL. No GRH (LID-routed RC) and LMC 0, so the GRH
    // flags and `ml_path` are 0; a RESP_SEND's `imm_inval_pkey` would be
    // the P_Key on QP1 only, and is 0 (P_Key index 0) here.
    let body = CqeBody::Ok(Cqe64 {
        ml_path: 0,
        slid: req.slid,
        grh: 0,
        sl: req.sl,
        src_qpn: req.src_qpn,
        srqn_uidx: 0,
        imm_inval_rkey: imm,
        // The message length is at most 2^31.
        byte_cnt: u32::try_from(req.len).unwrap_or(u32::MAX),
        send_opcode: 0,
        qpn,
        wqe_counter: counter,
        signature: 0,
        op_own: OpOwn {
            opcode,
            format: 0,
            solicited: req.solicited,
            owner: false,
        },
    });
    dev.qp_cqe(p, slot, cqn, body, req.solicited);
}
