// SPDX-License-Identifier: GPL-2.0

//! Flushing a QP in ERR: every posted send WQE, then every posted receive
//! WQE, completes with a WR_FLUSH error CQE, signaled or not (so the
//! provider can retire every outstanding work request by its WQE counter).
//!
//! The engine flushes one WQE per step. Send WQEs are those accepted by
//! doorbells; receive WQEs are those the doorbell record's receive counter
//! announces, read afresh at every step so that receives posted to a QP
//! already in ERR are flushed too (after a receive kick, see
//! [`super::hca::Hca::recv_doorbell`]).

use super::dev::{err_cqe, Dev};
use super::mem::Platform;
use super::prm::opcode::{CqeOpcode, CqeSyndrome};
use super::prm::ring;
use super::respond::recvs_posted;
use super::stats::bump;
use super::table::get_mut;
use super::wqe::{decode_ctrl, read_ctrl};

/// Flushes one WQE of the QP in `slot`. Returns `false` when nothing is
/// left to flush.
pub(super) fn flush_one<P: Platform>(dev: &mut Dev<'_>, p: &mut P, slot: u32) -> bool {
    let Some(qp) = get_mut(dev.t.qps, slot) else {
        return false;
    };
    let (qpn, send_cqn, recv_cqn, dbr) =
        (qp.qpn, qp.attr.send_cqn, qp.attr.recv_cqn, qp.attr.dbr_addr);
    if let Some(sq) = qp.sq.as_mut().filter(|s| s.pi != s.ci) {
        let pending = sq.pi.wrapping_sub(sq.ci);
        let (opcode, bbs) = match read_ctrl(p, sq, sq.ci).map(|b| decode_ctrl(&b)) {
            Some(Ok(c)) => (u8::from(c.opcode), u16::from(ring::wqebb_count(c.ds))),
            Some(Err(m)) => (m.opcode, m.bbs),
            None => (0, 1),
        };
        let counter = sq.ci;
        sq.ci = sq.ci.wrapping_add(bbs.clamp(1, pending));
        bump(&mut dev.stats.flushed);
        let body = err_cqe(
            CqeOpcode::ReqErr,
            CqeSyndrome::WrFlush,
            opcode,
            qpn,
            counter,
        );
        dev.qp_cqe(p, slot, send_cqn, body, true);
        return true;
    }
    // A receive granted to a request whose data may still be moving
    // (engines side by side) is not flushed under it: `respond::finish`
    // or `release` activates the QP again once the message is over.
    let Some(rq) = qp.rq.filter(|_| !qp.responding) else {
        return false;
    };
    if recvs_posted(p, &mut dev.stats.bad_recv_counters, &rq, dbr) == 0 {
        return false;
    }
    if let Some(rq) = get_mut(dev.t.qps, slot).and_then(|q| q.rq.as_mut()) {
        rq.ci = rq.ci.wrapping_add(1);
    }
    bump(&mut dev.stats.flushed);
    let body = err_cqe(CqeOpcode::RespErr, CqeSyndrome::WrFlush, 0, qpn, rq.ci);
    dev.qp_cqe(p, slot, recv_cqn, body, true);
    true
}
