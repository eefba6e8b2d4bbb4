// SPDX-License-Identifier: GPL-2.0

//! Flushes, CQ overrun, refused doorbells and object lifetimes.

use hca_model::doorbell::DoorbellError;
use hca_model::error::Error;
use hca_model::mr::Access;
use hca_model::qp::{QpState, RemoteQp};
use hca_model::qp_modify::AttrMask;
use mlx5_prm::eqe::EqeData;
use mlx5_prm::opcode::{CqeOpcode, EventType};

use super::errors::FLUSH;
use super::harness::*;
use super::verbs::Pair;

#[test]
fn modify_to_error_flushes_and_later_posts_flush_too() {
    let mut p = Pair::new(false);
    p.recv_b(1, &[p.bsge(0, 8)]);
    p.recv_b(2, &[p.bsge(0, 8)]);
    let attrs = rts_attrs(RemoteQp::default());
    p.w.modify(&p.b, QpState::Err, AttrMask(0), attrs).unwrap();
    p.w.run();
    assert_eq!(
        p.bpoll()
            .iter()
            .map(|w| (w.wr_id, w.syndrome))
            .collect::<Vec<_>>(),
        [(1, Some(FLUSH)), (2, Some(FLUSH))]
    );
    // A receive posted in ERR is flushed after the receive kick.
    p.recv_b(3, &[p.bsge(0, 8)]);
    p.w.hca(1).recv_doorbell(p.b.qpn).unwrap();
    p.w.run();
    assert_eq!(p.bpoll().iter().map(|w| w.wr_id).collect::<Vec<_>>(), [3]);
    // Without the kick, as a device behind posted writes watches the
    // records of its QPs in ERR: the same flush.
    p.recv_b(5, &[p.bsge(0, 8)]);
    p.w.run();
    assert!(p.bpoll().is_empty(), "nothing without a kick or a watch");
    assert_eq!(p.w.hca(1).watch_err_receives(), 1);
    assert_eq!(p.w.hca(0).watch_err_receives(), 0);
    p.w.run();
    assert_eq!(p.bpoll().iter().map(|w| w.wr_id).collect::<Vec<_>>(), [5]);
    // Sends posted in ERR are flushed; the requester sending to it times out.
    p.w.post_send(&mut p.b, &Wr::new(4, WrOp::Send, &[]))
        .unwrap();
    assert_eq!(
        p.bpoll()
            .iter()
            .map(|w| (w.wr_id, w.opcode, w.syndrome))
            .collect::<Vec<_>>(),
        [(4, CqeOpcode::ReqErr, Some(FLUSH))]
    );
    // ERR -> RESET -> ... -> RTS works again.
    p.w.modify(&p.b, QpState::Reset, AttrMask(0), attrs)
        .unwrap();
    assert_eq!(p.w.state(&p.b), QpState::Reset);
}

#[test]
fn cq_overrun_puts_the_cq_in_error() {
    let mut w = World::new(1);
    let pd = w.pd(0);
    let mut cq = w.cq(0, 2);
    let mut q = w.qp(0, pd, &cq, &cq, QpCaps::default());
    w.connect(&q, &q);
    w.eqes(0, true);
    for i in 0..5 {
        w.post_send(&mut q, &Wr::new(i, WrOp::Nop, &[])).unwrap();
    }
    let info = w.hca(0).query_cq(cq.cqn).unwrap();
    assert!(info.error);
    assert_eq!(info.producer_index, 4);
    let ev = w.eqes(0, true);
    assert_eq!(ev[0].event_type, EventType::CqError);
    assert_eq!(
        ev[0].data,
        EqeData::CqError {
            cqn: cq.cqn,
            syndrome: 1
        }
    );
    assert_eq!(ev[1].event_type, EventType::WqCatasError);
    assert_eq!(w.state(&q), QpState::Err);
    // The four CQEs that fit are intact; nothing is written after.
    assert_eq!(w.poll_all(&mut cq, &[&q]).len(), 4);
    w.post_send(&mut q, &Wr::new(9, WrOp::Nop, &[])).unwrap();
    assert!(w.poll_all(&mut cq, &[&q]).is_empty());
}

#[test]
fn consumed_cqes_make_room() {
    let mut w = World::new(1);
    let pd = w.pd(0);
    let mut cq = w.cq(0, 2);
    let mut q = w.qp(0, pd, &cq, &cq, QpCaps::default());
    w.connect(&q, &q);
    for i in 0..100 {
        w.post_send(&mut q, &Wr::new(i, WrOp::Nop, &[])).unwrap();
        assert_eq!(w.poll_all(&mut cq, &[&q])[0].wr_id, i);
    }
    assert!(!w.hca(0).query_cq(cq.cqn).unwrap().error);
}

#[test]
fn bad_doorbells_execute_nothing() {
    let mut p = Pair::new(false);
    let wr = Wr::new(
        1,
        WrOp::Write {
            raddr: p.bbuf,
            rkey: p.bkey,
        },
        &[p.asge(0, 8)],
    );
    p.w.fill(p.abuf, b"12345678");
    let check = |p: &mut Pair, want: DoorbellError, errors: u64| {
        p.w.run();
        assert_eq!(p.w.read(p.bbuf, 8), vec![0; 8]);
        assert!(p.apoll().is_empty());
        let st = *p.w.hca(0).stats();
        assert_eq!(st.last_doorbell_error, Some(want));
        assert_eq!(st.doorbell_errors, errors);
    };
    // UAR bytes naming another WQE index.
    let (i, n) = p.w.build_wqe(&mut p.a, &wr);
    let r = p.w.ring_sq(&mut p.a, i, n, Ring::Plain);
    assert!(r.is_ok());
    // ... that was fine; now corrupt the register after a new post.
    let (i, n) = p.w.build_wqe(&mut p.a, &wr);
    let reg = p.a.uar + 0xa00 + u64::from(p.a.half) * 256;
    p.w.mem
        .put(p.a.dbr + 4, &mlx5_prm::doorbell::counter_word(p.a.cur_post));
    p.w.fill(reg, &[0, 0, 0, 0x08, 0, 0, 0, 0]);
    let db = hca_model::doorbell::SendDoorbell {
        qpn: p.a.qpn,
        half: p.a.half,
        blueflame_len: 0,
    };
    let mem = &mut p.w.mem;
    assert_eq!(
        p.w.fabric.hca(0).unwrap().send_doorbell(mem, &db),
        Err(DoorbellError::WqeMismatch)
    );
    // The first WQE ran; undo its effect for the checks below.
    p.w.run();
    p.w.fill(p.bbuf, &[0; 8]);
    p.apoll();
    check(&mut p, DoorbellError::WqeMismatch, 1);
    // Ring it properly: accepted.
    p.w.ring_sq(&mut p.a, i, n, Ring::Plain).unwrap();
    p.w.run();
    assert_eq!(p.apoll().len(), 1);
    p.w.fill(p.bbuf, &[0; 8]);

    // Doorbell record claiming more than the SQ holds.
    let (i, n) = p.w.build_wqe(&mut p.a, &wr);
    p.a.cur_post = p.a.cur_post.wrapping_add(100);
    assert_eq!(
        p.w.ring_sq(&mut p.a, i, n, Ring::Plain),
        Err(DoorbellError::BadCounter)
    );
    p.a.cur_post = p.a.cur_post.wrapping_sub(100);
    check(&mut p, DoorbellError::BadCounter, 2);
    // Nothing new posted.
    p.a.cur_post = p.a.cur_post.wrapping_sub(n);
    assert_eq!(
        p.w.ring_sq(&mut p.a, i, n, Ring::Plain),
        Err(DoorbellError::NothingPosted)
    );
    p.a.cur_post = p.a.cur_post.wrapping_add(n);
    check(&mut p, DoorbellError::NothingPosted, 3);
    // BlueFlame copy that differs from the SQ.
    let reg = p.a.uar + 0xa00 + u64::from(p.a.half) * 256;
    p.w.mem
        .put(p.a.dbr + 4, &mlx5_prm::doorbell::counter_word(p.a.cur_post));
    let mut copy = p.w.read(p.a.sq_buf + u64::from(i % 64) * 64, 64);
    copy[40] ^= 0xff;
    p.w.fill(reg, &copy);
    let db = hca_model::doorbell::SendDoorbell {
        qpn: p.a.qpn,
        half: p.a.half,
        blueflame_len: 64,
    };
    let mem = &mut p.w.mem;
    assert_eq!(
        p.w.fabric.hca(0).unwrap().send_doorbell(mem, &db),
        Err(DoorbellError::BlueFlameMismatch)
    );
    check(&mut p, DoorbellError::BlueFlameMismatch, 4);
    // Wrong half index, and a QP that does not exist.
    let db = hca_model::doorbell::SendDoorbell {
        qpn: p.a.qpn,
        half: 2,
        blueflame_len: 0,
    };
    let mem = &mut p.w.mem;
    assert_eq!(
        p.w.fabric.hca(0).unwrap().send_doorbell(mem, &db),
        Err(DoorbellError::BadRegister)
    );
    let db = hca_model::doorbell::SendDoorbell {
        qpn: 0x9999,
        half: 0,
        blueflame_len: 0,
    };
    let mem = &mut p.w.mem;
    assert_eq!(
        p.w.fabric.hca(0).unwrap().send_doorbell(mem, &db),
        Err(DoorbellError::NoSuchObject)
    );
    assert_eq!(p.w.hca(0).stats().doorbell_errors, 6);
}

#[test]
fn objects_in_use_cannot_be_destroyed() {
    let mut p = Pair::new(false);
    assert_eq!(p.w.hca(0).dealloc_pd(0), Err(Error::Busy));
    assert_eq!(p.w.hca(0).destroy_cq(p.acq.cqn), Err(Error::Busy));
    let eqn = p.w.ctx[0].comp.eqn;
    assert_eq!(p.w.hca(0).destroy_eq(eqn), Err(Error::Busy));
    p.w.hca(0).destroy_qp(p.a.qpn).unwrap();
    assert_eq!(p.w.hca(0).destroy_qp(p.a.qpn), Err(Error::NotFound));
    p.w.hca(0).destroy_cq(p.acq.cqn).unwrap();
    p.w.dereg(0, p.akey);
    p.w.hca(0).dealloc_pd(0).unwrap();
    // Invalid creation arguments.
    let bad_mr = hca_model::mr::MrAttr {
        pdn: 5,
        iova: 0,
        length: 1,
        dma_addr: 0,
        access: Access::NONE,
    };
    assert_eq!(p.w.hca(0).create_mr(&bad_mr), Err(Error::NotFound));
    // A send to the destroyed QP times out at the requester.
    let mut p2 = Pair::new(false);
    p2.w.hca(1).destroy_qp(p2.b.qpn).unwrap();
    p2.send_a(&Wr::new(1, WrOp::Send, &[])).unwrap();
    assert!(p2.w.hca(0).query_qp(p2.a.qpn).unwrap().waiting.is_some());
}
