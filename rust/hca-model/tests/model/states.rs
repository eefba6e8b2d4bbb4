// SPDX-License-Identifier: GPL-2.0

//! QP state behaviour beyond errors: SQD and SQ_DRAINED, RTR responders and
//! COMM_EST, and embedder memory faults.

use hca_model::mr::{Access, MrAttr};
use hca_model::qp::{QpState, RemoteQp};
use hca_model::qp_modify::AttrMask;
use mlx5_prm::eqe::EqeData;
use mlx5_prm::opcode::{CqeSyndrome, EventType};

use super::harness::*;
use super::verbs::Pair;

#[test]
fn sqd_stops_new_work_and_reports_drained() {
    let mut p = Pair::new(false);
    p.w.eqes(0, true);
    let mut attrs = rts_attrs(RemoteQp {
        hca: 1,
        qpn: p.b.qpn,
    });
    attrs.sqd_async_notify = true;
    p.w.modify(&p.a, QpState::Sqd, AttrMask::EN_SQD_ASYNC_NOTIFY, attrs)
        .unwrap();
    p.w.run();
    let ev = p.w.eqes(0, true);
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].event_type, EventType::SqDrained);
    assert_eq!(
        ev[0].data,
        EqeData::QpSrq {
            queue_type: 0,
            qp_srq_n: p.a.qpn
        }
    );
    // Work posted in SQD waits for RTS.
    let wr = Wr::new(
        1,
        WrOp::Write {
            raddr: p.bbuf,
            rkey: p.bkey,
        },
        &[p.asge(0, 8)],
    );
    p.send_a(&wr).unwrap();
    assert!(p.apoll().is_empty());
    // SQD -> SQD may change path attributes; then back to RTS.
    attrs.timeout = 20;
    p.w.modify(&p.a, QpState::Sqd, AttrMask::TIMEOUT, attrs)
        .unwrap();
    p.w.modify(&p.a, QpState::Rts, AttrMask(0), attrs).unwrap();
    p.w.run();
    assert_eq!(p.apoll().len(), 1);
    assert_eq!(p.w.hca(0).query_qp(p.a.qpn).unwrap().conn.timeout, 20);
}

#[test]
fn rtr_responder_serves_requests_and_raises_comm_est() {
    let mut w = World::new(2);
    let (pa, pb) = (w.pd(0), w.pd(1));
    let mut acq = w.cq(0, 4);
    let mut bcq = w.cq(1, 4);
    let mut a = w.qp(0, pa, &acq, &acq, QpCaps::default());
    let mut b = w.qp(1, pb, &bcq, &bcq, QpCaps::default());
    let da = RemoteQp { hca: 1, qpn: b.qpn };
    w.to_rts_with(&a, da, rts_attrs(da));
    // B only reaches RTR.
    let db = RemoteQp { hca: 0, qpn: a.qpn };
    let init = AttrMask::PKEY_INDEX
        .or(AttrMask::PORT)
        .or(AttrMask::ACCESS_FLAGS);
    let rtr = AttrMask::AV
        .or(AttrMask::PATH_MTU)
        .or(AttrMask::DEST_QPN)
        .or(AttrMask::RQ_PSN)
        .or(AttrMask::MAX_DEST_RD_ATOMIC)
        .or(AttrMask::MIN_RNR_TIMER);
    w.modify(&b, QpState::Init, init, rts_attrs(db)).unwrap();
    // Receives may be posted in INIT.
    let buf = w.buffer(64);
    let key = w.mr(1, pb, buf, 64, Access::ALL);
    w.post_recv(
        &mut b,
        7,
        &[Sge {
            addr: buf,
            len: 64,
            lkey: key,
        }],
    );
    w.modify(&b, QpState::Rtr, rtr, rts_attrs(db)).unwrap();
    w.eqes(1, true);
    w.post_send(&mut a, &Wr::new(1, WrOp::Send, &[])).unwrap();
    w.post_send(
        &mut a,
        &Wr::new(
            2,
            WrOp::Write {
                raddr: buf,
                rkey: key,
            },
            &[],
        ),
    )
    .unwrap();
    assert_eq!(w.poll_all(&mut bcq, &[&b])[0].wr_id, 7);
    assert_eq!(w.poll_all(&mut acq, &[&a]).len(), 2);
    let ev = w.eqes(1, true);
    assert_eq!(ev.len(), 1, "COMM_EST once");
    assert_eq!(ev[0].event_type, EventType::CommEst);
    // An RTR QP cannot send: its doorbell is accepted, nothing runs.
    w.post_send(&mut b, &Wr::new(3, WrOp::Nop, &[])).unwrap();
    assert!(w.poll_all(&mut bcq, &[&b]).is_empty());
}

#[test]
fn embedder_memory_faults_become_errors() {
    // An MR whose DMA window the embedder cannot reach (a broken
    // embedder): the model reports errors instead of panicking.
    let mut p = Pair::new(false);
    p.w.mem.strict = false;
    let key =
        p.w.hca(1)
            .create_mr(&MrAttr {
                pdn: 0,
                iova: 0x1000,
                length: 4096,
                dma_addr: 0x10,
                access: Access::ALL,
            })
            .unwrap();
    p.w.fill(p.abuf, b"abcdefgh");
    let wr = Wr::new(
        1,
        WrOp::Write {
            raddr: 0x1000,
            rkey: key,
        },
        &[p.asge(0, 8)],
    );
    p.send_a(&wr).unwrap();
    let wcs = p.apoll();
    assert_eq!(wcs[0].syndrome, Some(u8::from(CqeSyndrome::RemoteAccess)));
    assert_eq!(p.w.state(&p.b), QpState::Err);
    assert!(!p.w.mem.violations.is_empty());
}

#[test]
fn modify_qp_refuses_what_the_spec_refuses() {
    let mut p = Pair::new(false);
    let attrs = rts_attrs(RemoteQp {
        hca: 1,
        qpn: p.b.qpn,
    });
    // RTS -> RTR is not a transition; RTS -> RTS may not change the path.
    assert!(p.w.modify(&p.a, QpState::Rtr, AttrMask(0), attrs).is_err());
    assert!(p.w.modify(&p.a, QpState::Rts, AttrMask::AV, attrs).is_err());
    assert!(p
        .w
        .modify(&p.a, QpState::Rts, AttrMask::MIN_RNR_TIMER, attrs)
        .is_ok());
    assert_eq!(p.w.state(&p.a), QpState::Rts);
    assert_eq!(
        p.w.hca(0).modify_qp(0x9999, &Default::default()),
        Err(hca_model::error::Error::NotFound)
    );
}

#[test]
fn sq_drained_waits_for_the_wqe_in_flight() {
    let mut p = Pair::new(false);
    p.w.eqes(0, true);
    // The head WQE waits for a receive (RNR) when the QP enters SQD.
    p.send_a(&Wr::new(1, WrOp::Send, &[])).unwrap();
    let mut attrs = rts_attrs(RemoteQp {
        hca: 1,
        qpn: p.b.qpn,
    });
    attrs.sqd_async_notify = true;
    p.w.modify(&p.a, QpState::Sqd, AttrMask::EN_SQD_ASYNC_NOTIFY, attrs)
        .unwrap();
    p.w.run();
    assert!(p.w.eqes(0, true).is_empty(), "not drained yet");
    p.recv_b(2, &[]);
    p.w.advance(10_000);
    assert_eq!(p.apoll().len(), 1);
    let ev = p.w.eqes(0, true);
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].event_type, EventType::SqDrained);
}
