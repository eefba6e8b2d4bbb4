// SPDX-License-Identifier: GPL-2.0

//! QP commands: CREATE_QP, the transitions RST2INIT, INIT2INIT, INIT2RTR,
//! RTR2RTS, 2ERR and 2RST mapped onto the model's modify-QP, QUERY_QP, and
//! DESTROY_QP.
//!
//! CREATE_QP makes an RC, UD or QP1 QP (`st` RC, UD or QP1; one QP1 per
//! function). The buffer holds the receive queue first and the send queue
//! right after it, as mlx5 lays them out. Each transition takes the fields
//! that belong to it from the QP context plus the optional ones
//! `opt_param_mask` names; the QP must be in the transition's source state.
//!
//! | transition | RC | UD | QP1 |
//! |---|---|---|---|
//! | RST2INIT | P_Key index, port, `rre rwe rae` | P_Key index, port, `q_key` | P_Key index, `q_key` |
//! | INIT2INIT | optional: `rre rwe rae`, P_Key index, port | optional: P_Key index, port, `q_key` | optional: P_Key index, `q_key` |
//! | INIT2RTR | path, MTU, remote QPN, receive PSN, responder resources, RNR NAK timer; optional `rre rwe rae`, P_Key index | optional: P_Key index, `q_key` | as UD |
//! | RTR2RTS | ACK timeout, retry counts, send PSN, initiator depth; optional `rre rwe rae`, RNR NAK timer | send PSN; optional `q_key` | as UD |
//!
//! The optional fields are those of mlx5_ib's `opt_mask` table for the
//! service type (QP1 taking UD's), as far as the model has them. mlx5_ib
//! writes a UD QP's context `mtu` as 4096 and a QP1's as 256 in every
//! transition; a datagram QP has no path, so the model ignores `mtu`, the
//! path and, on QP1, the port. An RC path's LID names the peer instance of
//! the fabric (`fabric::index_of_lid`).
//!
//! QUERY_QP encodes the QP as the model has it, state included (a QP the
//! engine moved to ERR reads ERR), each field the inverse of how the
//! transitions and CREATE_QP decode it, so that a driver reads back what
//! it set, with these exceptions:
//!
//! - `log_rra_max` / `log_sra_max` are log2 of the outstanding
//!   reads/atomics rounded up (what mlx5 writes): exact for the powers of
//!   two the transitions store, but a count set through [`Hca::modify_qp`]
//!   directly that is 0 reads as 0 (one), and 3 as 2 (four).
//! - The PSNs are the ones the transitions set: the model does not count
//!   PSNs, where a ConnectX reports the next ones.
//! - The path (`rlid`) reads 0 until INIT2RTR has set it (the model keeps
//!   a peer index, valid once `path_mtu` is set).
//! - Not kept, so read 0: `log_page_size`, `page_offset` (the buffer is kept
//!   as one address or a table), `log_msg_max`, `ts_format`, `rlky`,
//!   `user_index`, `atomic_mode`, `log_ack_req_freq`, and a datagram QP's
//!   `mtu` (QP1's port reads 1); with `no_sq`, `log_sq_size` reads 0; with a
//!   zero-length RQ, so do `log_rq_size` and `log_rq_stride`.
//!   `opt_param_mask` and `ece` are 0. `q_key` reads what the transitions
//!   set (0 on RC).
//!
//! [`Hca::modify_qp`]: super::super::hca::Hca::modify_qp

use super::super::dev::qp_slot;
use super::super::error::Error;
use super::super::fabric::{index_of_lid, lid_of_index};
use super::super::mem::Platform;
use super::super::mr::Access;
use super::super::prm::cmd_qp::{
    CreateQpIn, CreateQpOut, DestroyQpIn, DestroyQpOut, Init2InitQpIn, Init2InitQpOut,
    Init2RtrQpIn, Init2RtrQpOut, Qp2ErrIn, Qp2ErrOut, Qp2RstIn, Qp2RstOut, QueryQpIn, QueryQpOut,
    Rst2InitQpIn, Rst2InitQpOut, Rtr2RtsQpIn, Rtr2RtsQpOut,
};
use super::super::prm::command::{
    OP_2ERR_QP, OP_2RST_QP, OP_INIT2INIT_QP, OP_INIT2RTR_QP, OP_RST2INIT_QP, OP_RTR2RTS_QP,
};
use super::super::prm::ifc::Layout;
use super::super::prm::qpc::{
    Ads, Qpc, OPTPAR_PKEY_INDEX, OPTPAR_PRI_PORT, OPTPAR_Q_KEY, OPTPAR_RAE, OPTPAR_RNR_TIMEOUT,
    OPTPAR_RRE, OPTPAR_RWE, PM_STATE_MIGRATED, RQ_TYPE_REGULAR, RQ_TYPE_ZERO_LEN, STATE_ERR,
    STATE_INIT, STATE_RST, STATE_RTR, STATE_RTS, STATE_SQD, STATE_SQER, ST_QP1, ST_RC, ST_UD,
};
use super::super::qp::{ConnAttrs, QpAttr, QpInfo, QpService, QpState, RemoteQp};
use super::super::qp_modify::{AttrMask, QpModify};
use super::super::table::{get, Storage};
use super::cmd_queue::{doorbell_record, free_queue_table, queue_buffer, uar, BufferDesc};
use super::exec::Cx;
use super::pages::PageStore;
use super::reject::Reject;

type R = Result<(), Reject>;

/// The remote access bits of a QP context.
fn access(q: &Qpc) -> Access {
    let mut a = Access::NONE;
    if q.rre {
        a = a.union(Access::REMOTE_READ);
    }
    if q.rwe {
        a = a.union(Access::REMOTE_WRITE);
    }
    if q.rae {
        a = a.union(Access::REMOTE_ATOMIC);
    }
    a
}

pub(super) fn create_qp<B: PageStore, S: Storage, P: Platform>(cx: &mut Cx<'_, B, S, P>) -> R {
    cx.no_op_mod()?;
    let i: CreateQpIn = cx.read_in()?;
    let q = &i.qpc;
    let service = match q.st {
        ST_RC => QpService::Rc,
        ST_UD => QpService::Ud,
        ST_QP1 => QpService::Gsi,
        _ => return Err(Reject::UnsupportedSt),
    };
    if q.pm_state != PM_STATE_MIGRATED {
        return Err(Reject::BadPmState);
    }
    let caps = *cx.hca.caps();
    let (rq_wqes, rq_stride) = match q.rq_type {
        RQ_TYPE_REGULAR => (1u32 << q.log_rq_size, 16u32 << q.log_rq_stride),
        RQ_TYPE_ZERO_LEN => (0, 16),
        _ => return Err(Reject::UnsupportedRq),
    };
    let sq_wqebbs = if q.no_sq { 0 } else { 1u32 << q.log_sq_size };
    if q.log_rq_size > caps.max_log_rq_wqes || q.log_sq_size > caps.max_log_sq_wqebbs {
        return Err(Reject::QueueTooLarge);
    }
    let uar_addr = uar(cx, q.uar_page)?;
    {
        let t = cx.hca.tables();
        if get(t.pds, q.pd).is_none() {
            return Err(Reject::BadPd);
        }
        if get(t.cqs, q.cqn_snd).is_none() || get(t.cqs, q.cqn_rcv).is_none() {
            return Err(Reject::BadCq);
        }
    }
    let dbr_addr = doorbell_record(cx, q.dbr_addr)?;
    let rq_bytes = u64::from(rq_wqes) * u64::from(rq_stride);
    cx.need_out(CreateQpOut::SIZE)?;
    let buf = queue_buffer(
        cx,
        &BufferDesc {
            pas_offset: CreateQpIn::SIZE,
            log_page_size: q.log_page_size,
            page_offset: q.page_offset,
            size: rq_bytes + u64::from(sq_wqebbs) * 64,
        },
        true,
    )?;
    let start = buf.start;
    let attr = QpAttr {
        service,
        pdn: q.pd,
        send_cqn: q.cqn_snd,
        recv_cqn: q.cqn_rcv,
        sq_wqebbs,
        sq_buf_addr: start.wrapping_add(rq_bytes),
        rq_wqes,
        rq_stride,
        rq_buf_addr: start,
        buf_pages: buf.pages,
        dbr_addr,
        uar_addr,
        bfreg: cx.fw.cfg.qp_bfreg,
        max_send_sge: caps.max_send_sge,
        max_inline_data: caps.max_inline_data,
    };
    let qpn = match cx.hca.create_qp(&attr) {
        Ok(qpn) => qpn,
        Err(e) => {
            free_queue_table(cx, buf.pages);
            return Err(match e {
                Error::NoSpace => Reject::TableFull,
                Error::NotFound => Reject::BadCq,
                Error::Busy => Reject::Qp1Exists,
                _ => Reject::BadQpSize,
            });
        }
    };
    cx.fw.queues = cx.fw.queues.saturating_add(1);
    cx.reply(&CreateQpOut { qpn, ece: 0 })
}

pub(super) fn destroy_qp<B: PageStore, S: Storage, P: Platform>(cx: &mut Cx<'_, B, S, P>) -> R {
    cx.no_op_mod()?;
    let i: DestroyQpIn = cx.read_in()?;
    cx.need_out(DestroyQpOut::SIZE)?;
    let table = qp_slot(i.qpn)
        .and_then(|slot| get(cx.hca.tables().qps, slot))
        .filter(|q| q.qpn == i.qpn)
        .and_then(|q| q.attr.buf_pages);
    cx.hca.destroy_qp(i.qpn).map_err(|_| Reject::BadQp)?;
    free_queue_table(cx, table);
    cx.fw.queues = cx.fw.queues.saturating_sub(1);
    cx.reply(&DestroyQpOut {})
}

/// A transition as the model takes it: the source state it requires and
/// the modify request.
struct Transition {
    qpn: u32,
    from: Option<QpState>,
    m: QpModify,
}

/// What a forward transition of a service type takes: the attributes it
/// always sets, the `opt_param_mask` bits it accepts without effect (the
/// fields it takes anyway), and those that add an optional attribute.
struct Rule {
    from: QpState,
    to: QpState,
    required: AttrMask,
    harmless: u32,
    optional: u32,
}

const OPT_ACCESS: u32 = OPTPAR_RRE | OPTPAR_RWE | OPTPAR_RAE;

/// The rule of forward transition `opcode` for `service`, or `None` for
/// another opcode.
fn rule(opcode: u16, service: QpService) -> Option<Rule> {
    use QpService::{Gsi, Rc, Ud};
    use QpState::{Init, Reset, Rtr, Rts};
    let (from, to) = match opcode {
        OP_RST2INIT_QP => (Reset, Init),
        OP_INIT2INIT_QP => (Init, Init),
        OP_INIT2RTR_QP => (Init, Rtr),
        OP_RTR2RTS_QP => (Rtr, Rts),
        _ => return None,
    };
    let none = AttrMask(0);
    let (required, harmless, optional) = match (opcode, service) {
        // The INIT fields are always taken; naming them is harmless.
        (OP_RST2INIT_QP, Rc) => (
            AttrMask::PKEY_INDEX
                .or(AttrMask::PORT)
                .or(AttrMask::ACCESS_FLAGS),
            OPT_ACCESS | OPTPAR_PKEY_INDEX | OPTPAR_PRI_PORT,
            0,
        ),
        (OP_RST2INIT_QP, Ud) => (
            AttrMask::PKEY_INDEX.or(AttrMask::PORT).or(AttrMask::QKEY),
            OPTPAR_PKEY_INDEX | OPTPAR_PRI_PORT | OPTPAR_Q_KEY,
            0,
        ),
        // QP1's port is its creator's; mlx5_ib writes it, the model has one.
        (OP_RST2INIT_QP, Gsi) => (
            AttrMask::PKEY_INDEX.or(AttrMask::QKEY),
            OPTPAR_PKEY_INDEX | OPTPAR_PRI_PORT | OPTPAR_Q_KEY,
            0,
        ),
        (OP_INIT2INIT_QP, Rc) => (none, 0, OPT_ACCESS | OPTPAR_PKEY_INDEX | OPTPAR_PRI_PORT),
        (OP_INIT2INIT_QP, Ud) => (none, 0, OPTPAR_PKEY_INDEX | OPTPAR_PRI_PORT | OPTPAR_Q_KEY),
        (OP_INIT2INIT_QP, Gsi) => (none, 0, OPTPAR_PKEY_INDEX | OPTPAR_Q_KEY),
        (OP_INIT2RTR_QP, Rc) => (
            AttrMask::AV
                .or(AttrMask::PATH_MTU)
                .or(AttrMask::DEST_QPN)
                .or(AttrMask::RQ_PSN)
                .or(AttrMask::MAX_DEST_RD_ATOMIC)
                .or(AttrMask::MIN_RNR_TIMER),
            0,
            OPT_ACCESS | OPTPAR_PKEY_INDEX,
        ),
        (OP_INIT2RTR_QP, _) => (none, 0, OPTPAR_PKEY_INDEX | OPTPAR_Q_KEY),
        (_, Rc) => (
            AttrMask::TIMEOUT
                .or(AttrMask::RETRY_CNT)
                .or(AttrMask::RNR_RETRY)
                .or(AttrMask::SQ_PSN)
                .or(AttrMask::MAX_QP_RD_ATOMIC),
            0,
            OPT_ACCESS | OPTPAR_RNR_TIMEOUT,
        ),
        (_, _) => (AttrMask::SQ_PSN, 0, OPTPAR_Q_KEY),
    };
    Some(Rule {
        from,
        to,
        required,
        harmless,
        optional,
    })
}

/// The model's attribute bits of the optional fields `opt` names.
fn optional_mask(opt: u32) -> AttrMask {
    let mut mask = AttrMask(0);
    for (bit, attr) in [
        (OPT_ACCESS, AttrMask::ACCESS_FLAGS),
        (OPTPAR_PKEY_INDEX, AttrMask::PKEY_INDEX),
        (OPTPAR_PRI_PORT, AttrMask::PORT),
        (OPTPAR_Q_KEY, AttrMask::QKEY),
        (OPTPAR_RNR_TIMEOUT, AttrMask::MIN_RNR_TIMER),
    ] {
        if opt & bit != 0 {
            mask = mask.or(attr);
        }
    }
    mask
}

/// Reads the input of forward transition `opcode`: QPN, `opt_param_mask`
/// and context (the four inputs share their layout).
fn read_transition<B: PageStore, S: Storage, P: Platform>(
    cx: &mut Cx<'_, B, S, P>,
    opcode: u16,
) -> Result<(u32, u32, Qpc), Reject> {
    Ok(match opcode {
        OP_RST2INIT_QP => {
            let i: Rst2InitQpIn = cx.read_in()?;
            cx.need_out(Rst2InitQpOut::SIZE)?;
            (i.qpn, i.opt_param_mask, i.qpc)
        }
        OP_INIT2INIT_QP => {
            let i: Init2InitQpIn = cx.read_in()?;
            cx.need_out(Init2InitQpOut::SIZE)?;
            (i.qpn, i.opt_param_mask, i.qpc)
        }
        OP_INIT2RTR_QP => {
            let i: Init2RtrQpIn = cx.read_in()?;
            cx.need_out(Init2RtrQpOut::SIZE)?;
            (i.qpn, i.opt_param_mask, i.qpc)
        }
        OP_RTR2RTS_QP => {
            let i: Rtr2RtsQpIn = cx.read_in()?;
            cx.need_out(Rtr2RtsQpOut::SIZE)?;
            (i.qpn, i.opt_param_mask, i.qpc)
        }
        _ => return Err(Reject::BadOpcode),
    })
}

/// Builds the modify request of transition `opcode` from its input.
fn transition<B: PageStore, S: Storage, P: Platform>(
    cx: &mut Cx<'_, B, S, P>,
    opcode: u16,
) -> Result<Transition, Reject> {
    let to = match opcode {
        OP_2ERR_QP => {
            let i: Qp2ErrIn = cx.read_in()?;
            cx.need_out(Qp2ErrOut::SIZE)?;
            Some((i.qpn, QpState::Err))
        }
        OP_2RST_QP => {
            let i: Qp2RstIn = cx.read_in()?;
            cx.need_out(Qp2RstOut::SIZE)?;
            Some((i.qpn, QpState::Reset))
        }
        _ => None,
    };
    if let Some((qpn, state)) = to {
        let m = QpModify {
            mask: AttrMask::STATE,
            state,
            ..QpModify::default()
        };
        return Ok(Transition { qpn, from: None, m });
    }
    let (qpn, opt, q) = read_transition(cx, opcode)?;
    let service = cx.hca.query_qp(qpn).ok_or(Reject::BadQp)?.service;
    let r = rule(opcode, service).ok_or(Reject::BadOpcode)?;
    let opt = opt & !r.harmless;
    if opt & !r.optional != 0 {
        return Err(Reject::BadOptParam);
    }
    let mask = r.required.or(AttrMask::STATE).or(optional_mask(opt));
    let path = &q.primary_address_path;
    let dest_hca = if mask.contains(AttrMask::AV) {
        index_of_lid(path.rlid).ok_or(Reject::BadRlid)?
    } else {
        0
    };
    // `log_*_max` of 0 means one outstanding operation (mlx5 writes 0 for
    // both 0 and 1).
    let pow2 = |log: u8| 1u8.checked_shl(u32::from(log)).unwrap_or(u8::MAX);
    let attrs = ConnAttrs {
        access: access(&q),
        pkey_index: path.pkey_index,
        port: path.vhca_port_num,
        path_mtu: q.mtu,
        dest: RemoteQp {
            hca: dest_hca,
            qpn: q.remote_qpn,
        },
        sl: path.sl,
        rq_psn: q.next_rcv_psn,
        sq_psn: q.next_send_psn,
        max_dest_rd_atomic: pow2(q.log_rra_max),
        max_rd_atomic: pow2(q.log_sra_max),
        min_rnr_timer: q.min_rnr_nak,
        timeout: path.ack_timeout,
        retry_cnt: q.retry_count,
        rnr_retry: q.rnr_retry,
        sqd_async_notify: false,
        qkey: q.q_key,
    };
    Ok(Transition {
        qpn,
        from: Some(r.from),
        m: QpModify {
            mask,
            state: r.to,
            cur_state: r.from,
            attrs,
        },
    })
}

pub(super) fn modify_qp<B: PageStore, S: Storage, P: Platform>(
    cx: &mut Cx<'_, B, S, P>,
    opcode: u16,
) -> R {
    cx.no_op_mod()?;
    let t = transition(cx, opcode)?;
    let info = cx.hca.query_qp(t.qpn).ok_or(Reject::BadQp)?;
    if t.from.is_some_and(|s| s != info.state) {
        return Err(Reject::BadQpState);
    }
    cx.hca.modify_qp(t.qpn, &t.m).map_err(|e| match e {
        Error::NotFound => Reject::BadQp,
        Error::BadTransition => Reject::BadQpState,
        _ => Reject::BadQpAttr,
    })?;
    // Every forward transition's output is the header and the ECE word
    // (0), laid out alike.
    match opcode {
        OP_2ERR_QP => cx.reply(&Qp2ErrOut {}),
        OP_2RST_QP => cx.reply(&Qp2RstOut {}),
        _ => cx.reply(&Rst2InitQpOut { ece: 0 }),
    }
}

/// `qpc.state` of a model state (the model's states are IB's, numbered as
/// `enum ib_qp_state`; mlx5 swaps SQD and SQE).
fn qpc_state(s: QpState) -> u8 {
    match s {
        QpState::Reset => STATE_RST,
        QpState::Init => STATE_INIT,
        QpState::Rtr => STATE_RTR,
        QpState::Rts => STATE_RTS,
        QpState::Sqd => STATE_SQD,
        QpState::Sqe => STATE_SQER,
        QpState::Err => STATE_ERR,
    }
}

/// `log_sra_max` / `log_rra_max` of an outstanding read/atomic count: log2
/// rounded up (mlx5_ib's `fls(n - 1)`), 0 for 0 and 1, at most 7 (3 bits).
/// The inverse of the transitions' `1 << log` for every count they store.
fn log2_up(n: u8) -> u8 {
    let bits = match n.checked_sub(1) {
        Some(m) if m > 0 => u8::BITS - m.leading_zeros(),
        _ => 0,
    };
    u8::try_from(bits).map_or(7, |b| b.min(7))
}

/// The QP context QUERY_QP reports for QP `info`, created with `attr` on
/// UAR page `uar_page` (see the module documentation for what is lost).
fn query_context(info: &QpInfo, attr: &QpAttr, uar_page: u32) -> Qpc {
    let c = &info.conn;
    let log2 = |n: u32| u8::try_from(n.trailing_zeros()).unwrap_or(0);
    // INIT2RTR requires the MTU (1 to 5) and the path together, and a
    // reset clears both: a set MTU says the path is set.
    let rlid = if c.path_mtu != 0 {
        lid_of_index(c.dest.hca)
    } else {
        0
    };
    Qpc {
        state: qpc_state(info.state),
        st: match info.service {
            QpService::Rc => ST_RC,
            QpService::Ud => ST_UD,
            QpService::Gsi => ST_QP1,
        },
        pm_state: PM_STATE_MIGRATED,
        pd: attr.pdn,
        mtu: c.path_mtu,
        log_rq_size: if attr.rq_wqes == 0 {
            0
        } else {
            log2(attr.rq_wqes)
        },
        log_rq_stride: if attr.rq_wqes == 0 {
            0
        } else {
            log2(attr.rq_stride).saturating_sub(4)
        },
        no_sq: attr.sq_wqebbs == 0,
        log_sq_size: if attr.sq_wqebbs == 0 {
            0
        } else {
            log2(attr.sq_wqebbs)
        },
        uar_page,
        remote_qpn: c.dest.qpn,
        primary_address_path: Ads {
            pkey_index: c.pkey_index,
            rlid,
            ack_timeout: c.timeout,
            sl: c.sl,
            // QP1 is bound to its port from creation on (the model's one).
            vhca_port_num: if info.service == QpService::Gsi {
                1
            } else {
                c.port
            },
            ..Ads::default()
        },
        log_sra_max: log2_up(c.max_rd_atomic),
        retry_count: c.retry_cnt,
        rnr_retry: c.rnr_retry,
        next_send_psn: c.sq_psn,
        cqn_snd: attr.send_cqn,
        log_rra_max: log2_up(c.max_dest_rd_atomic),
        rre: c.access.contains(Access::REMOTE_READ),
        rwe: c.access.contains(Access::REMOTE_WRITE),
        rae: c.access.contains(Access::REMOTE_ATOMIC),
        min_rnr_nak: c.min_rnr_timer,
        next_rcv_psn: c.rq_psn,
        cqn_rcv: attr.recv_cqn,
        dbr_addr: attr.dbr_addr,
        q_key: c.qkey,
        rq_type: if attr.rq_wqes == 0 {
            RQ_TYPE_ZERO_LEN
        } else {
            RQ_TYPE_REGULAR
        },
        ..Qpc::default()
    }
}

pub(super) fn query_qp<B: PageStore, S: Storage, P: Platform>(cx: &mut Cx<'_, B, S, P>) -> R {
    cx.no_op_mod()?;
    let i: QueryQpIn = cx.read_in()?;
    cx.need_out(QueryQpOut::SIZE)?;
    let (info, attr) = {
        let mut dev = cx.hca.dev();
        let (_, qp) = dev.qp(i.qpn).ok_or(Reject::BadQp)?;
        (qp.info(), *qp.attr())
    };
    // The inverse of `uar`: the QP's UAR page address back to its index.
    let uar_page = attr.uar_addr.wrapping_sub(cx.fw.cfg.uar_base) / 4096;
    let uar_page = u32::try_from(uar_page).unwrap_or(0);
    cx.reply(&QueryQpOut {
        opt_param_mask: 0,
        ece: 0,
        qpc: query_context(&info, &attr, uar_page),
    })
}

#[cfg(test)]
mod tests {
    use super::super::super::prm::qpc::state_from_ib;
    use super::*;

    #[test]
    fn states_are_mlx5_numbers() {
        for raw in 0..=6 {
            let s = QpState::from_raw(raw).unwrap();
            assert_eq!(Some(qpc_state(s)), state_from_ib(raw as u8), "{s:?}");
        }
    }

    #[test]
    fn log2_up_inverts_the_transitions() {
        // The transitions store `1 << log` (0 and 1 both mean one).
        for log in 0..8u32 {
            let n = 1u8.checked_shl(log).unwrap_or(u8::MAX);
            assert_eq!(u32::from(log2_up(n)), log);
        }
        assert_eq!(log2_up(0), 0);
        assert_eq!(log2_up(3), 2);
        assert_eq!(log2_up(5), 3);
        assert_eq!(log2_up(129), 7);
        assert_eq!(log2_up(255), 7);
    }
}
