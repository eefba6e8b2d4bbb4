// SPDX-License-Identifier: GPL-2.0

//! Completion channels: arming, solicited-only, the ack/re-arm/poll loop,
//! non-blocking reads, poll(2) on the fd, and CQ destroy with unacked
//! events.

mod common;

use std::os::fd::AsRawFd;
use std::time::Duration;

use common::*;
use rmlx5::{ConnectOpts, Error, QpInit, RecvWr, SendFlags, SendOp, SendWr};

#[cfg_attr(test, test)]
pub(crate) fn arm_event_ack_rearm_poll() {
    let p = pair_with(&QpInit::default(), &ConnectOpts::default(), false, true);
    let ch = p.b.channel.as_ref().unwrap();
    ch.set_nonblocking(true).unwrap();
    assert_eq!(ch.get_cq_event().unwrap_err(), Error::WouldBlock);
    let sge = [p.b.mr.sge(0, 64).unwrap()];
    for round in 0..20u64 {
        p.b.cq.req_notify(false).unwrap();
        assert!(!readable(ch.fd().as_raw_fd()));
        p.b.qp.post_recv(&[RecvWr::new(round, &sge)]).unwrap();
        p.a.qp
            .post_send(&[SendWr::inline(round, SendOp::Send, b"event")])
            .unwrap();
        assert!(readable_within(ch.fd().as_raw_fd(), WAIT));
        let cq = ch.get_cq_event().unwrap();
        assert!(cq.same(&p.b.cq));
        assert_eq!(cq.unacked_events(), 1);
        cq.ack_events(1);
        drop(cq);
        // Re-arm, then poll until empty.
        p.b.cq.req_notify(false).unwrap();
        assert_eq!(poll_n(&p.b.cq, 1)[0].wr_id, round);
        assert_empty(&p.b.cq);
        // The re-arm came before the poll, while the CQE was still
        // there: it fires at once (nothing is lost between poll and arm).
        assert!(readable_within(ch.fd().as_raw_fd(), WAIT));
        ch.get_cq_event().unwrap().ack_events(1);
        assert_empty(&p.b.cq);
        poll_n(&p.a.cq, 1);
    }
    no_doorbell_errors(&p);
}

#[cfg_attr(test, test)]
pub(crate) fn armed_cq_with_a_pending_cqe_fires_at_once() {
    let p = pair_with(&QpInit::default(), &ConnectOpts::default(), false, true);
    let ch = p.a.channel.as_ref().unwrap();
    p.a.qp
        .post_send(&[SendWr::new(
            1,
            SendOp::Write(p.b.mr.remote(0).unwrap()),
            &[],
        )])
        .unwrap();
    p.a.cq.req_notify(false).unwrap();
    let cq = ch.get_cq_event().unwrap();
    cq.ack_events(1);
    poll_n(&p.a.cq, 1);
}

#[cfg_attr(test, test)]
pub(crate) fn solicited_only() {
    let p = pair_with(&QpInit::default(), &ConnectOpts::default(), false, true);
    let ch = p.b.channel.as_ref().unwrap();
    ch.set_nonblocking(true).unwrap();
    let sge = [p.b.mr.sge(0, 64).unwrap()];
    p.b.qp
        .post_recv(&[RecvWr::new(1, &sge), RecvWr::new(2, &sge)])
        .unwrap();
    p.b.cq.req_notify(true).unwrap();
    p.a.qp
        .post_send(&[SendWr::inline(1, SendOp::Send, b"plain")])
        .unwrap();
    // Acknowledged, so the receiver has its CQE: and no event.
    poll_n(&p.a.cq, 1);
    assert!(!readable_within(
        ch.fd().as_raw_fd(),
        Duration::from_millis(100)
    ));
    assert_eq!(ch.get_cq_event().unwrap_err(), Error::WouldBlock);
    p.a.qp
        .post_send(&[SendWr::inline(2, SendOp::Send, b"sol")
            .with_flags(SendFlags::SIGNALED | SendFlags::SOLICITED)])
        .unwrap();
    assert!(readable_within(ch.fd().as_raw_fd(), WAIT));
    let cq = ch.get_cq_event().unwrap();
    cq.ack_events(1);
    assert_eq!(poll_n(&p.b.cq, 2).len(), 2);
    no_doorbell_errors(&p);
}

#[cfg_attr(test, test)]
pub(crate) fn stale_arm_sequence_is_ignored_until_the_event_is_read() {
    // The provider bumps arm_sn when it reads an event; arming twice
    // without reading keeps the same sn and stays valid.
    let p = pair_with(&QpInit::default(), &ConnectOpts::default(), false, true);
    let ch = p.a.channel.as_ref().unwrap();
    for i in 0..10u64 {
        p.a.cq.req_notify(false).unwrap();
        p.a.cq.req_notify(false).unwrap();
        p.a.qp
            .post_send(&[SendWr::new(
                i,
                SendOp::Write(p.b.mr.remote(0).unwrap()),
                &[],
            )])
            .unwrap();
        let cq = ch.get_cq_event().unwrap();
        cq.ack_events(1);
        poll_n(&p.a.cq, 1);
    }
}

#[cfg_attr(test, test)]
pub(crate) fn destroy_waits_for_acks_then_fails_clearly() {
    let fabric = Fabric::new(true);
    let a = side(&fabric, 0, &QpInit::default(), true);
    let b = side(&fabric, 1, &QpInit::default(), false);
    a.qp.connect(&b.qp.endpoint(), &ConnectOpts::default())
        .unwrap();
    b.qp.connect(&a.qp.endpoint(), &ConnectOpts::default())
        .unwrap();
    let ch = a.channel.clone().unwrap();
    let cq2 = a.ctx.create_cq(8, Some(&ch)).unwrap();
    let qp2 = a.pd.create_qp(&cq2, &cq2, &QpInit::default()).unwrap();
    qp2.connect(&b.qp.endpoint(), &ConnectOpts::default())
        .unwrap();
    cq2.req_notify(false).unwrap();
    qp2.post_send(&[SendWr::new(1, SendOp::Write(b.mr.remote(0).unwrap()), &[])])
        .unwrap();
    let ev = ch.get_cq_event().unwrap();
    drop(ev);
    poll_n(&cq2, 1);
    drop(qp2);
    let e = cq2.destroy_timeout(Duration::from_millis(50)).unwrap_err();
    assert_eq!(e.error, Error::UnackedEvents { unacked: 1 });
    assert!(e.error.to_string().contains("1 completion event(s)"));
    let cq2 = e.cq.unwrap();
    // Acknowledged from another thread while destroy waits.
    let c = cq2.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        c.ack_events(1);
    });
    let mut cq2 = Some(cq2);
    // Busy while the other thread holds a handle; retry.
    for _ in 0..100 {
        match cq2.take().unwrap().destroy() {
            Ok(()) => break,
            Err(e) => {
                assert!(matches!(e.error, Error::Busy(_)), "{:?}", e.error);
                cq2 = e.cq;
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
    assert!(cq2.is_none());
    t.join().unwrap();
}

#[cfg_attr(test, test)]
pub(crate) fn destroying_a_cq_takes_back_its_unread_events() {
    let p = pair_with(&QpInit::default(), &ConnectOpts::default(), false, true);
    let ch = p.a.channel.clone().unwrap();
    ch.set_nonblocking(true).unwrap();
    let cq2 = p.a.ctx.create_cq(8, Some(&ch)).unwrap();
    let qp2 = p.a.pd.create_qp(&cq2, &cq2, &QpInit::default()).unwrap();
    qp2.connect(&p.b.qp.endpoint(), &ConnectOpts::default())
        .unwrap();
    cq2.req_notify(false).unwrap();
    qp2.post_send(&[SendWr::new(
        1,
        SendOp::Write(p.b.mr.remote(0).unwrap()),
        &[],
    )])
    .unwrap();
    // The event is queued on the channel...
    assert!(readable_within(ch.fd().as_raw_fd(), WAIT));
    drop(qp2);
    // ... but never read: destroy does not wait for it.
    cq2.destroy_timeout(Duration::from_millis(10)).unwrap();
    assert_eq!(ch.get_cq_event().unwrap_err(), Error::WouldBlock);
}

#[cfg_attr(test, test)]
pub(crate) fn async_events_report_qp_errors() {
    let p = pair();
    let sge = [p.a.mr.sge(0, 8).unwrap()];
    let fd = p.a.ctx.async_fd().unwrap();
    let bad = rmlx5::RemoteAddr {
        addr: 0,
        rkey: p.b.mr.rkey() ^ 1,
    };
    p.a.qp
        .post_send(&[SendWr::new(1, SendOp::Write(bad), &sge)])
        .unwrap();
    poll_n(&p.a.cq, 1);
    if readable(fd) {
        let e = p.a.ctx.get_async_event().unwrap();
        assert_eq!(e.element, p.a.qp.user_handle());
    }
}
