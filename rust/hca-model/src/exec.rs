// SPDX-License-Identifier: GPL-2.0

//! The requester side: executing the send WQE at the head of a QP's SQ.
//!
//! One call executes at most one WQE, start to finish: the local checks,
//! the request to the responder QP (on any instance of the fabric), the
//! data movement, the responder's completion and then the requester's.
//! Because a WQE is never left half done, every earlier RDMA read and
//! atomic has completed before the next WQE starts, which is what a fence
//! asks for; the fence bits therefore need no further handling, and at
//! most one read or atomic is ever outstanding (on mlx5, whose QP context
//! stores log2 of the limits, a `max_rd_atomic` of 0 behaves like 1, so
//! the model does not refuse reads on such QPs either).
//!
//! Local errors, found before anything is sent:
//!
//! | problem | syndrome |
//! |---|---|
//! | control segment unreadable, wrong WQE index or QPN, unknown or unsupported opcode, WQE too short, more gather entries or inline bytes than the QP allows, inline data in a read or atomic | LOCAL_QP_OP |
//! | lkey invalid, other PD, range outside the MR, scatter buffer without LOCAL_WRITE | LOCAL_PROT |
//! | message longer than the device maximum; atomic result buffer not 8 bytes | LOCAL_LENGTH |
//!
//! Keys are checked here, once per data segment; the pages of a page-list
//! MR are translated while the data moves ([`super::transfer`], which also
//! says what a fault leaves written). A fault found then, a DMA fault or a
//! translation entry that cannot be read, fails the WQE by side: in the
//! requester's memory with LOCAL_PROT, and the responder completes nothing
//! (the message never ended; a receive WQE stays posted); in the
//! responder's with REMOTE_OP for a SEND (its receive completes with
//! LOCAL_PROT) and REMOTE_ACCESS for a WRITE or READ, the responder going
//! to ERR as [`super::respond`] says. An atomic's two words are translated
//! before anything is sent.
//!
//! A UMR WQE (fast registration, local invalidation) is executed locally
//! by `mr::umr`, in order with the QP's other WQEs, with its own checks.
//!
//! A WQE that completes in error always produces a CQE, signaled or not;
//! the QP then moves to ERR and the rest of its work is flushed.
//!
//! The WQEs of UD and GSI QPs are read and checked the same way, then
//! handed to [`super::ud`].

use super::cq::CqeBody;
use super::dev::{err_cqe, Dev};
use super::fabric::lid_of_index;
use super::fabric::Instances;
use super::flush;
use super::mem::DmaMemory;
use super::mem::Platform;
use super::mr::{self, resolve, Access};
use super::prm::cqe::{Cqe64, OpOwn};
use super::prm::opcode::{CqeOpcode, CqeSyndrome, EventType};
use super::prm::wqe::{CE_CQ_UPDATE, CE_CQ_UPDATE_AND_EQE};
use super::qp::{QpAttr, QpId, QpState, RemoteQp, WaitKind};
use super::respond::{self, Answer, ReqKind, Request};
use super::stats::bump;
use super::table::get_mut;
use super::timer;
use super::transfer::{self, CopyFault, Piece, Pieces, Scratch};
use super::ud;
use super::wqe::{seg_len, Op, Seg, SendWqe};

/// Cost of one step in budget units: one per WQE, plus one per 4 KiB
/// moved.
pub(super) fn cost(len: u64) -> u32 {
    1u32.saturating_add(u32::try_from(len >> 12).unwrap_or(u32::MAX))
}

/// What the requester knows about the WQE it is executing.
pub(super) struct Local {
    pub(super) slot: u32,
    /// The QP, to find it again in the step's last phase.
    pub(super) id: QpId,
    pub(super) qpn: u32,
    /// LID of the sending port and SL of the QP's path: what the
    /// responder reports as `slid` and `sl`.
    slid: u16,
    sl: u8,
    send_cqn: u32,
    dest: RemoteQp,
    wqe_counter: u16,
    bbs: u16,
    opcode: u8,
    signaled: bool,
}

impl Local {
    /// The QP `id` before the first phase of its step fills in the rest.
    fn blank(id: QpId) -> Self {
        Local {
            slot: id.slot,
            id,
            qpn: 0,
            slid: 0,
            sl: 0,
            send_cqn: 0,
            dest: RemoteQp { hca: 0, qpn: 0 },
            wqe_counter: 0,
            bbs: 1,
            opcode: 0,
            signaled: true,
        }
    }
}

/// Resolves the data segments of `wqe` from byte `from` on: the gather
/// list of a SEND or WRITE (`write` false: pointers and inline data), or
/// the scatter list of a READ (`write` true: pointers only, LOCAL_WRITE),
/// within the limits of the QP created with `attr`. Each pointer's key is
/// checked here; a page-list MR's pages are translated by the copy.
pub(super) fn local_pieces(
    dev: &Dev<'_>,
    wqe: &SendWqe<'_>,
    from: usize,
    attr: &QpAttr,
    write: bool,
    pieces: &mut Pieces,
) -> Result<(), CqeSyndrome> {
    let (pdn, max_sge, max_inline) = (attr.pdn, attr.max_send_sge, attr.max_inline_data);
    pieces.clear();
    let (mut ptrs, mut inline) = (0u32, 0usize);
    for seg in wqe.segs(from) {
        match seg.map_err(|()| CqeSyndrome::LocalQpOp)? {
            Seg::Ptr(d) => {
                ptrs += 1;
                if ptrs > max_sge {
                    return Err(CqeSyndrome::LocalQpOp);
                }
                let len = seg_len(d.byte_count);
                let need = if write {
                    Access::LOCAL_WRITE
                } else {
                    Access::NONE
                };
                let piece = resolve(dev.t.mrs, d.lkey, pdn, d.addr, len, need)
                    .map_err(|_| CqeSyndrome::LocalProt)?;
                // At most MAX_PIECES segments fit in a WQE; a total over
                // 2^64 bytes is not a message either.
                if !pieces.push(piece) {
                    return Err(CqeSyndrome::LocalQpOp);
                }
            }
            Seg::Inline { off, len } => {
                inline = inline.saturating_add(len);
                if write || inline > max_inline as usize || !pieces.push(Piece::Inline { off, len })
                {
                    return Err(CqeSyndrome::LocalQpOp);
                }
            }
        }
    }
    if pieces.total() > u64::from(dev.caps.max_msg_size) {
        return Err(CqeSyndrome::LocalLength);
    }
    Ok(())
}

/// Completes the head WQE in error: error CQE (signaled or not), QP to ERR.
pub(super) fn fail<P: Platform>(dev: &mut Dev<'_>, p: &mut P, l: &Local, syndrome: CqeSyndrome) {
    if let Some(sq) = get_mut(dev.t.qps, l.slot).and_then(|q| q.sq.as_mut()) {
        sq.ci = sq.ci.wrapping_add(l.bbs);
    }
    bump(&mut dev.stats.wqe_errors);
    let body = err_cqe(CqeOpcode::ReqErr, syndrome, l.opcode, l.qpn, l.wqe_counter);
    dev.qp_cqe(p, l.slot, l.send_cqn, body, true);
    dev.qp_to_error(l.slot);
}

/// Completes the head WQE successfully.
pub(super) fn succeed<P: Platform>(dev: &mut Dev<'_>, p: &mut P, l: &Local, len: u64) {
    if let Some(qp) = get_mut(dev.t.qps, l.slot) {
        if let Some(sq) = qp.sq.as_mut() {
            sq.ci = sq.ci.wrapping_add(l.bbs);
        }
        qp.wait = None;
        qp.rnr_retries = 0;
        qp.timeout_retries = 0;
    }
    bump(&mut dev.stats.wqes_executed);
    if !l.signaled {
        return;
    }
    let body = CqeBody::Ok(Cqe64 {
        ml_path: 0,
        slid: 0,
        grh: 0,
        sl: 0,
        src_qpn: 0,
        srqn_uidx: 0,
        imm_inval_rkey: 0,
        byte_cnt: u32::try_from(len).unwrap_or(u32::MAX),
        send_opcode: l.opcode,
        qpn: l.qpn,
        wqe_counter: l.wqe_counter,
        signature: 0,
        op_own: OpOwn {
            opcode: CqeOpcode::Req,
            format: 0,
            solicited: false,
            owner: false,
        },
    });
    dev.qp_cqe(p, l.slot, l.send_cqn, body, false);
}

/// The head WQE must wait for a retry: after an RNR NAK for the
/// responder's RNR timer, unless its RNR retries are spent (it then fails
/// at once); after a request that got no answer for the local ACK timeout
/// (whether retries remain is decided when that timer expires). The wait
/// is recorded in the QP; the step's end files it on the timer list.
fn wait_or_fail<P: Platform>(
    dev: &mut Dev<'_>,
    p: &mut P,
    l: &Local,
    kind: WaitKind,
    rnr_timer: u8,
    now: u64,
) {
    let Some(qp) = get_mut(dev.t.qps, l.slot) else {
        return;
    };
    // Moved to ERR while the request was out (engines side by side): the
    // flush completes the WQE; a wait would hold the flush back.
    if qp.state == QpState::Err {
        return;
    }
    let c = qp.conn;
    let deadline = match kind {
        WaitKind::Rnr => {
            bump(&mut dev.stats.rnr_naks);
            if c.rnr_retry != 7 && qp.rnr_retries >= c.rnr_retry {
                fail(dev, p, l, CqeSyndrome::RnrRetryExc);
                return;
            }
            qp.rnr_retries = qp.rnr_retries.saturating_add(1);
            now.saturating_add(timer::rnr_ns(rnr_timer))
        }
        WaitKind::Timeout => timer::ack_timeout_deadline(now, c.timeout),
    };
    qp.wait = Some((kind, deadline));
}

/// Ends the step of the QP `id`, holding its instance: a QP that still has
/// work it can do now, or was activated meanwhile, goes back on the active
/// list, one that waits for a retry on the timer list. A QP destroyed
/// meanwhile, perhaps with a new QP in its slot, is not the step's to put
/// back; a QP reset meanwhile still is (its running mark is cleared).
#[inline]
pub(super) fn end_step(dev: &mut Dev<'_>, id: QpId) {
    let Some(q) = id.find_object(dev.t.qps) else {
        return;
    };
    let more = q.wait.is_none()
        && match q.state {
            QpState::Rts => q.sq_pending(),
            // The in-flight WQE finished: SQ_DRAINED is now due.
            QpState::Sqd => q.sqd_notify_pending,
            _ => false,
        };
    dev.sched.end_step(dev.t.qps, id.slot, more);
}

/// How the first phase of a step, on the requester's instance, ended. What
/// the later phases need (the requester's view of the WQE, the request,
/// the datagram) it writes into the caller's variables, so that nothing
/// larger than this moves between the phases.
enum Next<'w> {
    /// The step is over, with the budget it used.
    Done(u32),
    /// A UD or GSI datagram is built and ready to route; the WQE's bytes
    /// hold any inline data.
    Datagram(SendWqe<'w>),
    /// An RC request is ready for the responder QP.
    Request(SendWqe<'w>),
}

/// Where the first phase of a step writes what the later ones need.
struct Out<'o> {
    /// The requester's gather or scatter list.
    local: &'o mut Pieces,
    l: &'o mut Local,
    req: &'o mut Request,
    datagram: &'o mut Option<ud::Ready>,
}

/// A request before the first phase fills it in.
const BLANK_REQUEST: Request = Request {
    kind: ReqKind::Read,
    dest_qpn: 0,
    src_qpn: 0,
    slid: 0,
    sl: 0,
    raddr: 0,
    rkey: 0,
    len: 0,
    solicited: false,
};

/// Runs one step of the QP `id` of instance `a`, which the caller has
/// just taken off the active list: executes or flushes one WQE, or raises
/// a pending SQ_DRAINED event. Returns the budget used. The step ends in
/// its last phase on the requester's instance ([`end_step`]).
pub(super) fn step<I: Instances + ?Sized, P: Platform>(
    set: &mut I,
    scratch: &mut Scratch,
    now: u64,
    p: &mut P,
    a: usize,
    id: QpId,
) -> u32 {
    let Scratch {
        wqe: wqe_buf,
        recv: recv_buf,
        local,
        remote,
        packet,
    } = scratch;
    // Phase 1, the requester's instance: read and check the WQE, resolve
    // its local buffers.
    let mut l = Local::blank(id);
    let mut req = BLANK_REQUEST;
    let mut datagram = None;
    let next = match set.hold(a) {
        Some(mut h) => {
            let mut dev = h.dev();
            let out = Out {
                local: &mut *local,
                l: &mut l,
                req: &mut req,
                datagram: &mut datagram,
            };
            let next = begin(&mut dev, now, p, a, id, wqe_buf, out);
            if matches!(next, Next::Done(_)) {
                end_step(&mut dev, id);
            }
            next
        }
        None => return 1,
    };
    let wqe = match next {
        Next::Done(used) => return used,
        Next::Datagram(wqe) => {
            // `begin` built it; without it the step ends here.
            let Some(ready) = datagram else {
                if let Some(mut h) = set.hold(a) {
                    end_step(&mut h.dev(), id);
                }
                return 1;
            };
            let payload = ud::Payload {
                local,
                inline: wqe.bytes(),
                packet,
            };
            return ud::send(set, p, a, &l, &ready, payload, remote, recv_buf);
        }
        Next::Request(wqe) => wqe,
    };
    let (l, req) = (&l, &req);
    let len = req.len;

    // Phase 2, the responder's instance: check the request and reserve
    // what it needs. An atomic is executed here, whole, so that it is
    // atomic with respect to every other through this instance.
    let b = usize::from(l.dest.hca);
    let (answer, atomic_old) = match set.hold(b) {
        Some(mut h) => {
            let mut dev = h.dev();
            let answer = respond::request(&mut dev, p, req, remote, recv_buf);
            let old = match (answer, req.kind) {
                (Answer::Ack(grant), ReqKind::Atomic(op)) => {
                    let old = atomic_target(p, op, remote);
                    respond::finish(&mut dev, p, req, &grant, old.is_ok());
                    Some(old)
                }
                _ => None,
            };
            (answer, old)
        }
        None => (Answer::Silent, None),
    };
    let grant = match answer {
        Answer::Ack(g) => g,
        Answer::Silent | Answer::Rnr { .. } | Answer::Nak(_) => {
            if let Some(mut h) = set.hold(a) {
                let mut dev = h.dev();
                if l.id.find(dev.t.qps).is_some() {
                    match answer {
                        Answer::Rnr { timer } => {
                            wait_or_fail(&mut dev, p, l, WaitKind::Rnr, timer, now)
                        }
                        Answer::Nak(s) => fail(&mut dev, p, l, s),
                        _ => wait_or_fail(&mut dev, p, l, WaitKind::Timeout, 0, now),
                    }
                }
                end_step(&mut dev, id);
            }
            return 1;
        }
    };

    // Phase 3, no instance: the data moves between the ranges resolved.
    let moved = match (req.kind, atomic_old) {
        (ReqKind::Send { .. } | ReqKind::Write { .. }, _) => {
            transfer::copy(p, local, wqe.bytes(), remote, len, packet)
        }
        (ReqKind::Read, _) => transfer::copy(p, remote, &[], local, len, packet)
            // For a read, the source is remote and the destination local.
            .map_err(|f| match f {
                CopyFault::Source => CopyFault::Destination,
                CopyFault::Destination => CopyFault::Source,
            }),
        (ReqKind::Atomic(_), Some(Ok(old))) => match local.first_addr() {
            Some(result) => p.write(result, &old).map_err(|_| CopyFault::Source),
            None => Err(CopyFault::Source),
        },
        (ReqKind::Atomic(_), _) => Err(CopyFault::Destination),
    };

    // Phase 4, the responder's instance: complete there. `Source` now
    // always means the requester's memory failed: the message never ended
    // at the responder (its last packet was never sent), so nothing
    // completes there and a receive WQE it took stays posted. An atomic
    // finished in phase 2.
    if !matches!(req.kind, ReqKind::Atomic(_)) {
        if let Some(mut h) = set.hold(b) {
            let mut dev = h.dev();
            match moved {
                Ok(()) => respond::finish(&mut dev, p, req, &grant, true),
                Err(CopyFault::Destination) => respond::finish(&mut dev, p, req, &grant, false),
                Err(CopyFault::Source) => respond::release(&mut dev, &grant),
            }
        }
    }

    // Phase 5, the requester's instance: its completion, if the QP is
    // still the one that posted the WQE, and the step's end.
    if let Some(mut h) = set.hold(a) {
        let mut dev = h.dev();
        if l.id.find(dev.t.qps).is_some() {
            match moved {
                Ok(()) => succeed(&mut dev, p, l, len),
                Err(CopyFault::Source) => fail(&mut dev, p, l, CqeSyndrome::LocalProt),
                Err(CopyFault::Destination) => {
                    let s = if matches!(req.kind, ReqKind::Send { .. }) {
                        CqeSyndrome::RemoteOp
                    } else {
                        CqeSyndrome::RemoteAccess
                    };
                    fail(&mut dev, p, l, s);
                }
            }
        }
        end_step(&mut dev, id);
    }
    cost(len)
}

/// Phase 1 of a step, holding the requester's instance: the QP's state,
/// its retry wait, the WQE read and checked, its local buffers resolved
/// into `local`. A WQE that completes here (a local error, a NOP, a UMR)
/// ends the step.
fn begin<'w, P: Platform>(
    dev: &mut Dev<'_>,
    now: u64,
    p: &mut P,
    a: usize,
    id: QpId,
    wqe_buf: &'w mut [u8; super::prm::wqe::MAX_WQE_SIZE],
    out: Out<'_>,
) -> Next<'w> {
    let (l, local) = (out.l, out.local);
    let slot = id.slot;
    let Some(qp) = id.find(dev.t.qps) else {
        return Next::Done(1);
    };
    match qp.state {
        QpState::Err => {
            if flush::flush_one(dev, p, slot) {
                dev.sched.activate(dev.t.qps, slot);
            }
            return Next::Done(1);
        }
        QpState::Rts => {}
        QpState::Sqd if qp.wait.is_some() => {}
        QpState::Sqd => {
            if qp.sqd_notify_pending {
                qp.sqd_notify_pending = false;
                let qpn = qp.qpn;
                dev.qp_event(p, EventType::SqDrained, qpn);
            }
            return Next::Done(1);
        }
        _ => return Next::Done(1),
    }
    // A transport timer that expired counts a timeout; with no retry left
    // the WQE fails once it has been read below.
    let mut retries_spent = false;
    if let Some((kind, deadline)) = qp.wait {
        // Not yet due: the step's end files it on the timer list again.
        if deadline > now {
            return Next::Done(1);
        }
        if kind == WaitKind::Timeout {
            bump(&mut dev.stats.timeouts);
            retries_spent = qp.timeout_retries >= qp.conn.retry_cnt;
            qp.timeout_retries = qp.timeout_retries.saturating_add(1);
        }
    }
    let Some(qp) = get_mut(dev.t.qps, slot) else {
        return Next::Done(1);
    };
    let Some(sq) = qp.sq else {
        return Next::Done(1);
    };
    let pending = sq.pi.wrapping_sub(sq.ci);
    if pending == 0 {
        return Next::Done(1);
    }
    let (qpn, attr, conn) = (qp.qpn, qp.attr, qp.conn);
    let (pdn, send_cqn) = (attr.pdn, attr.send_cqn);
    *l = Local {
        slot,
        id,
        qpn,
        slid: lid_of_index(u16::try_from(a).unwrap_or(u16::MAX)),
        sl: conn.sl,
        send_cqn,
        dest: conn.dest,
        wqe_counter: sq.ci,
        bbs: 1,
        opcode: 0,
        signaled: true,
    };
    local.clear();
    let wqe = match SendWqe::read(p, &sq, pending, wqe_buf) {
        Ok(w) => w,
        Err(m) => {
            l.opcode = m.opcode;
            l.bbs = m.bbs;
            fail(dev, p, l, CqeSyndrome::LocalQpOp);
            return Next::Done(1);
        }
    };
    l.opcode = u8::from(wqe.ctrl.opcode);
    l.bbs = wqe.bbs;
    l.signaled = matches!(wqe.ctrl.ce, CE_CQ_UPDATE | CE_CQ_UPDATE_AND_EQE);
    if retries_spent {
        fail(dev, p, l, CqeSyndrome::TransportRetryExc);
        return Next::Done(1);
    }
    if attr.service.is_datagram() {
        let send = ud::Send {
            l,
            wqe: &wqe,
            attr: &attr,
            own_qkey: conn.qkey,
            sq_ci: sq.ci,
        };
        return match ud::prepare(dev, p, &send, a, local) {
            Ok((d, av)) => {
                *out.datagram = Some(ud::Ready { d, av });
                Next::Datagram(wqe)
            }
            Err(used) => Next::Done(used),
        };
    }
    let op = match wqe.op() {
        Some((op, from)) if wqe.ctrl.wqe_index == sq.ci && wqe.ctrl.qpn == qpn => {
            let resolved = match op {
                Op::Nop => Ok(()),
                Op::Send { .. } | Op::Write { .. } => {
                    local_pieces(dev, &wqe, from, &attr, false, local)
                }
                Op::Read { .. } => local_pieces(dev, &wqe, from, &attr, true, local),
                Op::Atomic { .. } => atomic_result(dev, p, &wqe, from, pdn, local),
                Op::Umr { .. } => Ok(()),
            };
            match resolved {
                Ok(()) => op,
                Err(s) => {
                    fail(dev, p, l, s);
                    return Next::Done(1);
                }
            }
        }
        _ => {
            fail(dev, p, l, CqeSyndrome::LocalQpOp);
            return Next::Done(1);
        }
    };
    let len = local.total();
    let req = match op {
        Op::Nop => {
            succeed(dev, p, l, 0);
            return Next::Done(1);
        }
        Op::Umr { ctrl, mkey, xlt } => {
            // Local to this HCA: the MR changes when the WQE executes, in
            // order with the QP's other WQEs.
            match mr::umr(dev.t.mrs, p, pdn, wqe.ctrl.imm, &ctrl, &mkey, xlt.as_ref()) {
                Ok(()) => succeed(dev, p, l, 0),
                Err(s) => fail(dev, p, l, s),
            }
            return Next::Done(1);
        }
        Op::Send { imm, inval } => request(ReqKind::Send { imm, inval }, l, 0, 0, len),
        Op::Write { raddr, imm } => {
            request(ReqKind::Write { imm }, l, raddr.raddr, raddr.rkey, len)
        }
        Op::Read { raddr } => request(ReqKind::Read, l, raddr.raddr, raddr.rkey, len),
        Op::Atomic { raddr, op } => request(ReqKind::Atomic(op), l, raddr.raddr, raddr.rkey, 8),
    };
    *out.req = Request {
        solicited: wqe.ctrl.solicited,
        ..req
    };
    Next::Request(wqe)
}

fn request(kind: ReqKind, l: &Local, raddr: u64, rkey: u32, len: u64) -> Request {
    Request {
        kind,
        dest_qpn: l.dest.qpn,
        src_qpn: l.qpn,
        slid: l.slid,
        sl: l.sl,
        raddr,
        rkey,
        len,
        solicited: false,
    }
}

/// Resolves the one 8-byte result buffer of an atomic WQE.
fn atomic_result<M: DmaMemory + ?Sized>(
    dev: &Dev<'_>,
    mem: &mut M,
    wqe: &SendWqe<'_>,
    from: usize,
    pdn: u32,
    local: &mut Pieces,
) -> Result<(), CqeSyndrome> {
    let mut segs = wqe.segs(from);
    let (Some(Ok(Seg::Ptr(d))), None) = (segs.next(), segs.next()) else {
        return Err(CqeSyndrome::LocalQpOp);
    };
    if seg_len(d.byte_count) != 8 {
        return Err(CqeSyndrome::LocalLength);
    }
    // The result is written as one 8-byte word: one DMA range, translated
    // now (a word across two pages that do not follow each other, or an
    // entry that cannot be read, is a protection error before anything is
    // sent).
    local.clear();
    let addr = resolve(dev.t.mrs, d.lkey, pdn, d.addr, 8, Access::LOCAL_WRITE)
        .and_then(|piece| mr::one_range(mem, &piece))
        .map_err(|_| CqeSyndrome::LocalProt)?;
    local.push(Piece::Dma { addr, len: 8 });
    Ok(())
}

/// Executes an atomic on its remote target, in host byte order (see
/// [`super::atomic`]), and returns the original value for the requester's
/// result buffer. The caller holds the responder's instance.
fn atomic_target<P: Platform>(
    p: &mut P,
    op: super::atomic::AtomicOp,
    remote: &Pieces,
) -> Result<[u8; 8], CopyFault> {
    let Some(target) = remote.first_addr() else {
        return Err(CopyFault::Destination);
    };
    let mut old = [0u8; 8];
    p.read(target, &mut old)
        .map_err(|_| CopyFault::Destination)?;
    let new = op.apply(u64::from_ne_bytes(old));
    p.write(target, &new.to_ne_bytes())
        .map_err(|_| CopyFault::Destination)?;
    Ok(old)
}
