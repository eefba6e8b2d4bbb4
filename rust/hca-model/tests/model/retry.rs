// SPDX-License-Identifier: GPL-2.0

//! RNR and transport retries on the embedder's clock.

use hca_model::qp::{QpState, RemoteQp};
use hca_model::qp_modify::AttrMask;
use mlx5_prm::opcode::CqeSyndrome;

use super::errors::{syn, FLUSH};
use super::harness::*;
use super::verbs::Pair;

#[test]
fn rnr_waits_for_a_receive() {
    let mut p = Pair::new(false);
    p.w.fill(p.abuf, b"patience");
    p.send_a(&Wr::new(1, WrOp::Send, &[p.asge(0, 8)])).unwrap();
    assert!(p.apoll().is_empty());
    let info = p.w.hca(0).query_qp(p.a.qpn).unwrap();
    assert!(info.waiting.is_some());
    // RNR timer code 1 is 10 us; nothing happens before it expires.
    p.w.advance(5_000);
    assert!(p.apoll().is_empty());
    p.recv_b(5, &[p.bsge(0, 8)]);
    assert!(p.apoll().is_empty(), "hardware only retries on the timer");
    assert_eq!(p.w.fabric.next_deadline(), Some(10_000));
    p.w.advance(5_000);
    assert_eq!(p.apoll()[0].wr_id, 1);
    assert_eq!(p.bpoll()[0].wr_id, 5);
    assert_eq!(p.w.read(p.bbuf, 8), b"patience");
    // rnr_retry = 7 retries forever.
    p.send_a(&Wr::new(2, WrOp::Send, &[p.asge(0, 8)])).unwrap();
    for _ in 0..100 {
        p.w.advance(10_000);
    }
    assert!(p.apoll().is_empty());
    assert!(p.w.hca(0).stats().rnr_naks >= 100);
}

#[test]
fn rnr_retry_exceeded() {
    let mut p = Pair::new(false);
    let mut attrs = rts_attrs(RemoteQp {
        hca: 1,
        qpn: p.b.qpn,
    });
    attrs.rnr_retry = 2;
    // RTS->RTS cannot change rnr_retry: go through SQD.
    p.w.modify(&p.a, QpState::Sqd, AttrMask(0), attrs).unwrap();
    p.w.modify(&p.a, QpState::Sqd, AttrMask::RNR_RETRY, attrs)
        .unwrap();
    p.w.modify(&p.a, QpState::Rts, AttrMask(0), attrs).unwrap();
    p.w.eqes(0, true);
    p.send_a(&Wr::new(
        1,
        WrOp::WriteImm {
            raddr: p.bbuf,
            rkey: p.bkey,
            imm: 1,
        },
        &[p.asge(0, 8)],
    ))
    .unwrap();
    // The initial attempt and two retries are NAKed: the third NAK fails it.
    p.w.advance(10_000);
    assert!(p.apoll().is_empty());
    p.w.advance(10_000);
    let wcs = p.apoll();
    assert_eq!(
        wcs.iter()
            .map(|w| (w.wr_id, w.syndrome))
            .collect::<Vec<_>>(),
        [(1, syn(CqeSyndrome::RnrRetryExc))]
    );
    assert_eq!(p.w.hca(0).stats().rnr_naks, 3);
    assert_eq!(p.w.state(&p.a), QpState::Err);
    assert_eq!(p.w.state(&p.b), QpState::Rts, "the responder is unaffected");
}

#[test]
fn transport_retry_exceeded() {
    // Responder not ready (INIT), missing, or on a missing instance.
    for case in 0..3 {
        let mut w = World::new(2);
        let pd = w.pd(0);
        let mut cq = w.cq(0, 4);
        let mut a = w.qp(0, pd, &cq, &cq, QpCaps::default());
        let pb = w.pd(1);
        let bcq = w.cq(1, 4);
        let b = w.qp(1, pb, &bcq, &bcq, QpCaps::default());
        let dest = match case {
            0 => RemoteQp { hca: 1, qpn: b.qpn },
            1 => RemoteQp {
                hca: 1,
                qpn: 0x4000,
            },
            _ => RemoteQp { hca: 9, qpn: b.qpn },
        };
        let mut attrs = rts_attrs(dest);
        attrs.retry_cnt = 3;
        attrs.timeout = 1; // 8.192 us
        w.to_rts_with(&a, dest, attrs);
        w.post_send(&mut a, &Wr::new(1, WrOp::Send, &[])).unwrap();
        for _ in 0..3 {
            w.advance(8_192);
            assert!(w.poll_all(&mut cq, &[&a]).is_empty());
        }
        w.advance(8_192);
        let wcs = w.poll_all(&mut cq, &[&a]);
        assert_eq!(
            wcs.iter().map(|w| w.syndrome).collect::<Vec<_>>(),
            [syn(CqeSyndrome::TransportRetryExc)],
            "case {case}"
        );
        assert_eq!(w.hca(0).stats().timeouts, 4);
    }
}

#[test]
fn infinite_timeout_waits_forever() {
    let mut w = World::new(2);
    let pd = w.pd(0);
    let mut cq = w.cq(0, 4);
    let mut a = w.qp(0, pd, &cq, &cq, QpCaps::default());
    let dest = RemoteQp {
        hca: 1,
        qpn: 0x4000,
    };
    let mut attrs = rts_attrs(dest);
    attrs.timeout = 0;
    w.to_rts_with(&a, dest, attrs);
    w.post_send(&mut a, &Wr::new(1, WrOp::Send, &[])).unwrap();
    w.advance(1 << 50);
    assert!(w.poll_all(&mut cq, &[&a]).is_empty());
    // Moving to ERR flushes the waiting WQE.
    w.modify(&a, QpState::Err, AttrMask(0), attrs).unwrap();
    w.run();
    assert_eq!(
        w.poll_all(&mut cq, &[&a])
            .iter()
            .map(|w| w.syndrome)
            .collect::<Vec<_>>(),
        [Some(FLUSH)]
    );
}
