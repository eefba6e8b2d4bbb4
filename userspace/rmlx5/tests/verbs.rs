// SPDX-License-Identifier: GPL-2.0

//! Every verb against two in-process software HCAs, with data checks.

mod common;

use common::*;
use rmlx5::{
    ConnectOpts, Error, QpInit, RecvWr, SendFlags, SendOp, SendWr, WcFlags, WcOpcode, WcStatus,
};

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[cfg_attr(test, test)]
pub(crate) fn send_and_send_imm_across_devices() {
    for blueflame in [true, false] {
        let init = QpInit {
            blueflame,
            ..QpInit::default()
        };
        let p = pair_with(&init, &ConnectOpts::default(), false, false);
        let data = pattern(1000, 7);
        p.a.mr.write(0, &data).unwrap();
        let rsge = [p.b.mr.sge(0, 4096).unwrap()];
        p.b.qp
            .post_recv(&[RecvWr::new(11, &rsge), RecvWr::new(12, &rsge[..0])])
            .unwrap();
        let sge = [p.a.mr.sge(0, 1000).unwrap()];
        p.a.qp
            .post_send(&[SendWr::new(1, SendOp::Send, &sge)])
            .unwrap();
        p.a.qp
            .post_send(&[SendWr::new(2, SendOp::SendImm(0xdead_beef), &[])])
            .unwrap();
        let s = poll_n(&p.a.cq, 2);
        assert_eq!(
            (s[0].wr_id, s[0].opcode, s[0].status),
            (1, WcOpcode::Send, WcStatus::Success)
        );
        assert_eq!(s[1].wr_id, 2);
        let r = poll_n(&p.b.cq, 2);
        assert_eq!(
            (r[0].wr_id, r[0].byte_len, r[0].opcode),
            (11, 1000, WcOpcode::Recv)
        );
        assert_eq!(r[0].qp_num, p.b.qp.qpn());
        assert_eq!(r[1].wr_id, 12);
        assert_eq!(r[1].byte_len, 0);
        assert_eq!(r[1].imm_data, 0xdead_beef);
        assert!(r[1].flags.contains(WcFlags::WITH_IMM));
        assert_eq!(p.b.mr.to_vec(0, 1000).unwrap(), data);
        no_doorbell_errors(&p);
    }
}

/// A receive completion names the sender as mlx5 does on an InfiniBand
/// port (rdma-core's `wc.src_qp`, `wc.slid`, `wc.sl`): the peer QP's number,
/// its port's LID and the SL of its path; send completions leave them zero.
#[cfg_attr(test, test)]
pub(crate) fn receive_completions_name_the_sender() {
    let fabric = Fabric::new(true);
    let init = QpInit::default();
    let a = side(&fabric, 0, &init, false);
    let b = side(&fabric, 1, &init, false);
    let (ea, eb) = (a.qp.endpoint(), b.qp.endpoint());
    // Two devices have two LIDs (with RMLX5_TEST_DEVICES both sides may be
    // one device: the same LID, told apart by QPN).
    if !fabric.same_device(0, 1) {
        assert_ne!(ea.lid, eb.lid);
    }
    a.qp.connect(
        &eb,
        &ConnectOpts {
            sl: 6,
            ..ConnectOpts::default()
        },
    )
    .unwrap();
    b.qp.connect(
        &ea,
        &ConnectOpts {
            sl: 11,
            ..ConnectOpts::default()
        },
    )
    .unwrap();
    assert_eq!(a.qp.query().unwrap().sl, 6);
    assert_eq!(b.qp.query().unwrap().sl, 11);
    let rsge = [b.mr.sge(0, 64).unwrap()];
    b.qp.post_recv(&[
        RecvWr::new(1, &rsge),
        RecvWr::new(2, &rsge),
        RecvWr::new(3, &[]),
    ])
    .unwrap();
    let sge = [a.mr.sge(0, 8).unwrap()];
    let write_imm = SendOp::WriteImm(b.mr.remote(256).unwrap(), 9);
    for (id, op) in [(1, SendOp::Send), (2, SendOp::SendImm(5)), (3, write_imm)] {
        a.qp.post_send(&[SendWr::new(id, op, &sge)]).unwrap();
    }
    for w in poll_n(&a.cq, 3) {
        assert_eq!((w.src_qp, w.slid, w.sl), (0, 0, 0), "{w:?}");
    }
    for w in poll_n(&b.cq, 3) {
        assert_eq!(w.status, WcStatus::Success);
        assert_eq!(
            (w.src_qp, u32::from(w.slid), w.sl),
            (ea.qpn, ea.lid, 6),
            "{w:?}"
        );
        assert_eq!(w.dlid_path_bits, 0);
        assert!(!w.flags.contains(WcFlags::GRH));
    }
    // And the other way round, with B's QPN, LID and SL.
    a.qp.post_recv(&[RecvWr::new(7, &[a.mr.sge(64, 64).unwrap()])])
        .unwrap();
    b.qp.post_send(&[SendWr::new(8, SendOp::Send, &[b.mr.sge(0, 4).unwrap()])])
        .unwrap();
    poll_n(&b.cq, 1);
    let w = poll_n(&a.cq, 1)[0];
    assert_eq!(
        (w.wr_id, w.src_qp, u32::from(w.slid), w.sl),
        (7, eb.qpn, eb.lid, 11)
    );
    // A QP connected to itself receives from itself.
    let s = side(&fabric, 1, &init, false);
    s.qp.connect(&s.qp.endpoint(), &ConnectOpts::default())
        .unwrap();
    s.qp.post_recv(&[RecvWr::new(1, &[s.mr.sge(64, 64).unwrap()])])
        .unwrap();
    s.qp.post_send(&[SendWr::new(2, SendOp::Send, &[s.mr.sge(0, 4).unwrap()])])
        .unwrap();
    let both = poll_n(&s.cq, 2);
    let r = both.iter().find(|w| w.opcode == WcOpcode::Recv).unwrap();
    assert_eq!((r.src_qp, u32::from(r.slid)), (s.qp.qpn(), eb.lid));
    assert_eq!(fabric.doorbell_errors(0) + fabric.doorbell_errors(1), 0);
}

#[cfg_attr(test, test)]
pub(crate) fn one_device_and_loopback() {
    let p = pair_with(&QpInit::default(), &ConnectOpts::default(), true, false);
    let data = pattern(64, 1);
    p.a.mr.write(0, &data).unwrap();
    let w = SendWr::new(5, SendOp::Write(p.b.mr.remote(128).unwrap()), &[]);
    let sge = [p.a.mr.sge(0, 64).unwrap()];
    p.a.qp.post_send(&[SendWr { sg_list: &sge, ..w }]).unwrap();
    poll_n(&p.a.cq, 1);
    assert_eq!(p.b.mr.to_vec(128, 64).unwrap(), data);

    // A QP connected to itself.
    let s = side(&p.fabric, 0, &QpInit::default(), false);
    s.qp.connect(&s.qp.endpoint(), &ConnectOpts::default())
        .unwrap();
    s.mr.write(0, b"loop").unwrap();
    let sge = [s.mr.sge(0, 4).unwrap()];
    s.qp.post_send(&[SendWr::new(
        1,
        SendOp::Write(s.mr.remote(100).unwrap()),
        &sge,
    )])
    .unwrap();
    poll_n(&s.cq, 1);
    assert_eq!(s.mr.to_vec(100, 4).unwrap(), b"loop");
    no_doorbell_errors(&p);
}

#[cfg_attr(test, test)]
pub(crate) fn write_write_imm_read_with_sg_lists() {
    let p = pair();
    let data = pattern(3000, 3);
    p.a.mr.write(0, &data).unwrap();
    // Gather from three pieces (one zero-length, which must be left out).
    let sges = [
        p.a.mr.sge(0, 1000).unwrap(),
        p.a.mr.sge(1000, 0).unwrap(),
        p.a.mr.sge(1000, 2000).unwrap(),
    ];
    let remote = p.b.mr.remote(8192).unwrap();
    p.a.qp
        .post_send(&[SendWr::new(1, SendOp::Write(remote), &sges)])
        .unwrap();
    poll_n(&p.a.cq, 1);
    assert_eq!(p.b.mr.to_vec(8192, 3000).unwrap(), data);

    // WRITE_IMM consumes a receive and reports the immediate.
    p.b.qp.post_recv(&[RecvWr::new(77, &[])]).unwrap();
    p.a.qp
        .post_send(&[SendWr::new(
            2,
            SendOp::WriteImm(p.b.mr.remote(0).unwrap(), 0x1234),
            &sges[..1],
        )])
        .unwrap();
    poll_n(&p.a.cq, 1);
    let r = poll_n(&p.b.cq, 1);
    assert_eq!(r[0].opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!((r[0].wr_id, r[0].imm_data), (77, 0x1234));
    assert_eq!(p.b.mr.to_vec(0, 1000).unwrap(), data[..1000]);

    // READ back into two scatter pieces.
    let back = [
        p.a.mr.sge(20_000, 1500).unwrap(),
        p.a.mr.sge(40_000, 1500).unwrap(),
    ];
    p.a.qp
        .post_send(&[SendWr::new(3, SendOp::Read(remote), &back)])
        .unwrap();
    let c = poll_n(&p.a.cq, 1);
    assert_eq!((c[0].opcode, c[0].byte_len), (WcOpcode::RdmaRead, 3000));
    assert_eq!(p.a.mr.to_vec(20_000, 1500).unwrap(), data[..1500]);
    assert_eq!(p.a.mr.to_vec(40_000, 1500).unwrap(), data[1500..]);

    // Scatter a SEND over three receive pieces.
    let rs = [
        p.b.mr.sge(100, 10).unwrap(),
        p.b.mr.sge(200, 0).unwrap(),
        p.b.mr.sge(300, 100).unwrap(),
    ];
    p.b.qp.post_recv(&[RecvWr::new(9, &rs)]).unwrap();
    p.a.qp
        .post_send(&[SendWr::inline(4, SendOp::Send, &data[..50])])
        .unwrap();
    poll_n(&p.a.cq, 1);
    assert_eq!(poll_n(&p.b.cq, 1)[0].byte_len, 50);
    assert_eq!(p.b.mr.to_vec(100, 10).unwrap(), data[..10]);
    assert_eq!(p.b.mr.to_vec(300, 40).unwrap(), data[10..50]);
    no_doorbell_errors(&p);
}

#[cfg_attr(test, test)]
pub(crate) fn atomics_plain_and_masked() {
    let p = pair();
    let target = p.b.mr.remote(64).unwrap();
    p.b.mr.write_u64(64, 100).unwrap();
    let res = [p.a.mr.sge(0, 8).unwrap()];
    let post = |id, op| {
        p.a.qp.post_send(&[SendWr::new(id, op, &res)]).unwrap();
        let c = poll_n(&p.a.cq, 1);
        assert_eq!(c[0].status, WcStatus::Success, "{:?}", c[0]);
        assert_eq!(c[0].byte_len, 8);
        (c[0].opcode, p.a.mr.read_u64(0).unwrap())
    };
    assert_eq!(
        post(
            1,
            SendOp::FetchAdd {
                remote: target,
                add: 5
            }
        ),
        (WcOpcode::FetchAdd, 100)
    );
    assert_eq!(p.b.mr.read_u64(64).unwrap(), 105);
    let cas = SendOp::CompSwap {
        remote: target,
        compare: 105,
        swap: 7,
    };
    assert_eq!(post(2, cas), (WcOpcode::CompSwap, 105));
    assert_eq!(p.b.mr.read_u64(64).unwrap(), 7);
    // A failed compare leaves the target.
    assert_eq!(post(3, cas).1, 7);
    assert_eq!(p.b.mr.read_u64(64).unwrap(), 7);
    // Masked CAS: compare the low byte only, replace the high nibble.
    p.b.mr.write_u64(64, 0x1234_5678).unwrap();
    let mcas = SendOp::MaskedCompSwap {
        remote: target,
        compare: 0x78,
        compare_mask: 0xff,
        swap: 0xf000_0000,
        swap_mask: 0xf000_0000,
    };
    assert_eq!(post(4, mcas), (WcOpcode::MaskedCompSwap, 0x1234_5678));
    assert_eq!(p.b.mr.read_u64(64).unwrap(), 0xf234_5678);
    // Masked FAA with a boundary at bit 31: two 32-bit lanes.
    p.b.mr.write_u64(64, 0x0000_0001_ffff_ffff).unwrap();
    let mfaa = SendOp::MaskedFetchAdd {
        remote: target,
        add: 0x0000_0001_0000_0001,
        boundary: 1 << 31,
    };
    assert_eq!(post(5, mfaa).0, WcOpcode::MaskedFetchAdd);
    assert_eq!(p.b.mr.read_u64(64).unwrap(), 0x0000_0002_0000_0000);
    no_doorbell_errors(&p);
}

#[cfg_attr(test, test)]
pub(crate) fn wrap_around_with_inline_and_blueflame() {
    let init = QpInit {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_inline_data: 200,
        ..QpInit::default()
    };
    let p = pair_with(&init, &ConnectOpts::default(), false, false);
    let rsge = [p.b.mr.sge(0, 512).unwrap()];
    for i in 0..500u64 {
        let len = (i as usize * 37) % 201;
        let data = pattern(len, i as u8);
        p.b.qp.post_recv(&[RecvWr::new(i, &rsge)]).unwrap();
        let wr = SendWr::inline(i, SendOp::SendImm(i as u32), &data);
        if i % 3 == 0 {
            // Two WQEs in one post (8-byte doorbell, not BlueFlame).
            p.b.qp.post_recv(&[RecvWr::new(i + 1000, &rsge)]).unwrap();
            p.a.qp
                .post_send(&[wr, SendWr::new(i + 1000, SendOp::Send, &[])])
                .unwrap();
            poll_n(&p.a.cq, 2);
            let r = poll_n(&p.b.cq, 2);
            assert_eq!((r[0].wr_id, r[1].wr_id), (i, i + 1000));
        } else {
            p.a.qp.post_send(&[wr]).unwrap();
            poll_n(&p.a.cq, 1);
            let r = poll_n(&p.b.cq, 1);
            assert_eq!(
                (r[0].wr_id, r[0].imm_data, r[0].byte_len),
                (i, i as u32, len as u32)
            );
        }
        assert_eq!(p.b.mr.to_vec(0, len).unwrap(), data, "iteration {}", i);
    }
    no_doorbell_errors(&p);
}

#[cfg_attr(test, test)]
pub(crate) fn selective_signaling() {
    let init = QpInit {
        max_send_wr: 16,
        ..QpInit::default()
    };
    let p = pair_with(&init, &ConnectOpts::default(), false, false);
    let sge = [p.a.mr.sge(0, 8).unwrap()];
    let remote = p.b.mr.remote(0).unwrap();
    // Many more WRs than the SQ holds: each signaled one frees the slots
    // of the unsignaled ones before it.
    for round in 0..50u64 {
        let wrs: Vec<SendWr<'_>> = (0..8)
            .map(|k| {
                let wr = SendWr::new(round * 8 + k, SendOp::Write(remote), &sge);
                if k == 7 {
                    wr
                } else {
                    wr.with_flags(SendFlags::NONE)
                }
            })
            .collect();
        p.a.qp.post_send(&wrs).unwrap();
        let c = poll_n(&p.a.cq, 1);
        assert_eq!(c[0].wr_id, round * 8 + 7);
        assert_empty(&p.a.cq);
    }
    // sq_sig_all signals everything.
    let init = QpInit {
        sq_sig_all: true,
        ..QpInit::default()
    };
    let p = pair_with(&init, &ConnectOpts::default(), false, false);
    let sge = [p.a.mr.sge(0, 8).unwrap()];
    let wrs = [
        SendWr::new(1, SendOp::Write(p.b.mr.remote(0).unwrap()), &sge).with_flags(SendFlags::NONE),
        SendWr::new(2, SendOp::Write(p.b.mr.remote(0).unwrap()), &sge).with_flags(SendFlags::NONE),
    ];
    p.a.qp.post_send(&wrs).unwrap();
    assert_eq!(poll_n(&p.a.cq, 2).len(), 2);
    no_doorbell_errors(&p);
}

#[cfg_attr(test, test)]
pub(crate) fn fence_and_solicited_flags_reach_the_peer() {
    let p = pair();
    let rs = [p.b.mr.sge(0, 64).unwrap()];
    p.b.qp
        .post_recv(&[RecvWr::new(1, &rs), RecvWr::new(2, &rs)])
        .unwrap();
    let res = [p.a.mr.sge(0, 8).unwrap()];
    let wrs = [
        SendWr::new(1, SendOp::Read(p.b.mr.remote(0).unwrap()), &res),
        SendWr::inline(2, SendOp::Send, b"x").with_flags(SendFlags::SIGNALED | SendFlags::FENCE),
        SendWr::inline(3, SendOp::Send, b"y")
            .with_flags(SendFlags::SIGNALED | SendFlags::SOLICITED),
    ];
    p.a.qp.post_send(&wrs).unwrap();
    let c = poll_n(&p.a.cq, 3);
    assert_eq!(c.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [1, 2, 3]);
    let r = poll_n(&p.b.cq, 2);
    assert!(!r[0].flags.contains(WcFlags::SOLICITED));
    assert!(r[1].flags.contains(WcFlags::SOLICITED));
}

#[cfg_attr(test, test)]
pub(crate) fn bad_wr_partial_failure() {
    let init = QpInit {
        max_send_wr: 8,
        max_send_sge: 2,
        max_inline_data: 32,
        ..QpInit::default()
    };
    let p = pair_with(&init, &ConnectOpts::default(), false, false);
    let sge = [p.a.mr.sge(0, 8).unwrap()];
    // The device may grant more than was asked for: go one past what the
    // QP reports.
    assert!(p.a.qp.max_send_sge() >= 2 && p.a.qp.max_inline_data() >= 32);
    let too_many = vec![sge[0]; p.a.qp.max_send_sge() as usize + 1];
    let big = vec![0u8; p.a.qp.max_inline_data() as usize + 1];
    let remote = p.b.mr.remote(0).unwrap();
    let cases: [(SendWr<'_>, &str); 4] = [
        (SendWr::new(9, SendOp::Write(remote), &too_many), "SGEs"),
        (SendWr::inline(9, SendOp::Write(remote), &big), "inline"),
        (
            SendWr::new(9, SendOp::FetchAdd { remote, add: 1 }, &[]),
            "atomic",
        ),
        (
            SendWr::new(
                9,
                SendOp::FetchAdd {
                    remote: remote.offset(4),
                    add: 1,
                },
                &sge,
            ),
            "aligned",
        ),
    ];
    for (bad, what) in cases {
        let wrs = [
            SendWr::new(1, SendOp::Write(remote), &sge),
            SendWr::new(2, SendOp::Write(remote), &sge),
            bad,
            SendWr::new(4, SendOp::Write(remote), &sge),
        ];
        let e = p.a.qp.post_send(&wrs).unwrap_err();
        assert_eq!((e.index, e.wr_id), (2, 9), "{}", what);
        assert!(
            matches!(e.error, Error::Invalid(_)),
            "{}: {:?}",
            what,
            e.error
        );
        // The two before it were posted and rung.
        let c = poll_n(&p.a.cq, 2);
        assert_eq!((c[0].wr_id, c[1].wr_id), (1, 2));
    }
    // A full SQ stops the list at the first WR that does not fit.
    let n = u64::from(p.a.qp.max_send_wr()) * 2 + 16;
    let wrs: Vec<SendWr<'_>> = (0..n)
        .map(|i| SendWr::new(i, SendOp::Write(remote), &sge).with_flags(SendFlags::NONE))
        .collect();
    let e = p.a.qp.post_send(&wrs).unwrap_err();
    assert_eq!(e.error, Error::QueueFull);
    assert!(e.index >= 8 && (e.index as u64) < n, "{}", e.index);
    // Receive side: too many SGEs, and a full RQ.
    let too_many = vec![sge[0]; p.b.qp.max_recv_sge() as usize + 1];
    let e = p.b.qp.post_recv(&[RecvWr::new(1, &too_many)]).unwrap_err();
    assert_eq!(e.index, 0);
    let rq = p.b.qp.max_recv_wr() as usize;
    assert!(rq >= 64, "{rq}");
    let recvs: Vec<RecvWr<'_>> = (0..rq as u64 + 10).map(|i| RecvWr::new(i, &[])).collect();
    let e = p.b.qp.post_recv(&recvs).unwrap_err();
    assert_eq!((e.index, e.error), (rq, Error::QueueFull));
    no_doorbell_errors(&p);
}

#[cfg_attr(test, test)]
pub(crate) fn error_completions_and_flushes() {
    let p = pair();
    let sge = [p.a.mr.sge(0, 8).unwrap()];
    let bad = rmlx5::RemoteAddr {
        addr: p.b.mr.addr(),
        rkey: p.b.mr.rkey() ^ 0x55,
    };
    let good = p.b.mr.remote(0).unwrap();
    let wrs = [
        SendWr::new(1, SendOp::Write(bad), &sge),
        SendWr::new(2, SendOp::Write(good), &sge).with_flags(SendFlags::NONE),
        SendWr::new(3, SendOp::Write(good), &sge),
    ];
    p.a.qp.post_send(&wrs).unwrap();
    let c = poll_n(&p.a.cq, 3);
    assert_eq!(c[0].status, WcStatus::RemAccessErr);
    assert_eq!(c[0].wr_id, 1);
    // Flushed, signaled or not.
    assert_eq!((c[1].wr_id, c[1].status), (2, WcStatus::WrFlushErr));
    assert_eq!((c[2].wr_id, c[2].status), (3, WcStatus::WrFlushErr));
    assert_eq!(p.a.qp.state().unwrap(), rmlx5::QpState::Err);
    // Receives posted to a QP in ERR are flushed too (receive kick).
    p.a.qp.post_recv(&[RecvWr::new(40, &sge)]).unwrap();
    let r = poll_n(&p.a.cq, 1);
    assert_eq!(
        (r[0].wr_id, r[0].status, r[0].opcode),
        (40, WcStatus::WrFlushErr, WcOpcode::Recv)
    );
    // Local protection error: bad lkey.
    let q = side(&p.fabric, 0, &QpInit::default(), false);
    let peer = side(&p.fabric, 1, &QpInit::default(), false);
    q.qp.connect(&peer.qp.endpoint(), &ConnectOpts::default())
        .unwrap();
    peer.qp
        .connect(&q.qp.endpoint(), &ConnectOpts::default())
        .unwrap();
    let bad_l = [rmlx5::Sge {
        lkey: q.mr.lkey() ^ 0x77,
        ..q.mr.sge(0, 8).unwrap()
    }];
    q.qp.post_send(&[SendWr::new(
        8,
        SendOp::Write(peer.mr.remote(0).unwrap()),
        &bad_l,
    )])
    .unwrap();
    let c = poll_n(&q.cq, 1);
    assert_eq!(c[0].status, WcStatus::LocProtErr);
    // Connecting a QP that is already connected is refused by MODIFY_QP.
    peer.qp
        .connect(&q.qp.endpoint(), &ConnectOpts::default())
        .unwrap_err();
    no_doorbell_errors(&p);
}

#[cfg_attr(test, test)]
pub(crate) fn to_error_flushes_receives_and_reset_reuses_the_qp() {
    let p = pair();
    let sge = [p.b.mr.sge(0, 64).unwrap()];
    p.b.qp
        .post_recv(&[RecvWr::new(1, &sge), RecvWr::new(2, &sge)])
        .unwrap();
    p.b.qp.to_error().unwrap();
    let r = poll_n(&p.b.cq, 2);
    assert!(r.iter().all(|w| w.status == WcStatus::WrFlushErr));
    assert_eq!((r[0].wr_id, r[1].wr_id), (1, 2));
    // RESET, reconnect, and traffic flows again.
    p.b.qp.reset().unwrap();
    p.a.qp.reset().unwrap();
    p.a.qp
        .connect(&p.b.qp.endpoint(), &ConnectOpts::default())
        .unwrap();
    p.b.qp
        .connect(&p.a.qp.endpoint(), &ConnectOpts::default())
        .unwrap();
    p.b.qp.post_recv(&[RecvWr::new(3, &sge)]).unwrap();
    p.a.qp
        .post_send(&[SendWr::inline(4, SendOp::Send, b"again")])
        .unwrap();
    poll_n(&p.a.cq, 1);
    assert_eq!(poll_n(&p.b.cq, 1)[0].wr_id, 3);
    assert_eq!(p.b.mr.to_vec(0, 5).unwrap(), b"again");
    no_doorbell_errors(&p);
}

#[cfg_attr(test, test)]
pub(crate) fn rnr_retries_follow_the_clock() {
    // rnr_retry 7: waits until a receive is posted.
    let p = pair();
    p.a.qp
        .post_send(&[SendWr::inline(1, SendOp::Send, b"late")])
        .unwrap();
    assert_empty(&p.a.cq);
    p.fabric.advance(1_000_000_000);
    assert_empty(&p.a.cq);
    let sge = [p.b.mr.sge(0, 64).unwrap()];
    p.b.qp.post_recv(&[RecvWr::new(9, &sge)]).unwrap();
    p.fabric.advance(1_000_000_000);
    assert_eq!(poll_n(&p.a.cq, 1)[0].status, WcStatus::Success);
    assert_eq!(poll_n(&p.b.cq, 1)[0].wr_id, 9);

    // rnr_retry 1: gives up.
    let opts = ConnectOpts {
        rnr_retry: 1,
        ..ConnectOpts::default()
    };
    let p = pair_with(&QpInit::default(), &opts, false, false);
    p.a.qp
        .post_send(&[SendWr::inline(1, SendOp::Send, b"never")])
        .unwrap();
    for _ in 0..4 {
        p.fabric.advance(1_000_000_000);
    }
    let c = poll_n(&p.a.cq, 1);
    assert_eq!(c[0].status, WcStatus::RnrRetryExcErr);
    no_doorbell_errors(&p);
}

/// Device and port attributes, and the connection's: A's QP names B's QP
/// and the LID B's port reports. A software HCA (no
/// `DEVICE_UAR_DOORBELLS`) has LID = device index + 1; a ConnectX
/// function's port has its own LID.
#[cfg_attr(test, test)]
pub(crate) fn device_and_port_queries() {
    use rmlx5_abi::uapi::DEVICE_UAR_DOORBELLS;
    let p = pair();
    let devs = p.fabric.devices();
    let d = p.a.ctx.query_device().unwrap();
    assert_eq!(d.vendor_id, 0x02c9);
    assert_eq!(d.device_index, devs[0].index());
    assert!(d.max_qp_wr > 0 && d.max_cqe > 0);
    // The whole BlueFlame register, as mlx5 reports it; a QP uses halves.
    assert_eq!(d.bf_reg_size, 512);
    // No flag but the one defined; the model is a software HCA.
    assert_eq!(d.device_flags & !DEVICE_UAR_DOORBELLS, 0, "{d:?}");
    if matches!(*p.fabric, Fabric::Model(_)) {
        assert_eq!(d.device_flags, 0);
    }
    let db = p.b.ctx.query_device().unwrap();
    let port = p.b.ctx.query_port(1).unwrap();
    assert_ne!(port.lid, 0);
    assert_eq!(port.lid, p.b.ctx.lid());
    if db.device_flags & DEVICE_UAR_DOORBELLS == 0 {
        assert_eq!(port.lid, devs[1].index() + 1);
    }
    assert!(p.b.ctx.query_port(2).is_err());
    let q = p.a.qp.query().unwrap();
    assert_eq!(q.dest_qp_num, p.b.qp.qpn());
    assert_eq!(q.dlid, port.lid);
    assert_eq!(p.a.qp.state().unwrap(), rmlx5::QpState::Rts);
}

#[cfg_attr(test, test)]
pub(crate) fn cq_destroy_rules() {
    let p = pair();
    let extra = p.a.ctx.create_cq(10, None).unwrap();
    assert_eq!(extra.entries(), 16);
    extra.destroy().unwrap();
    // A CQ used by a QP cannot be destroyed; it is handed back.
    let cq = p.a.cq.clone();
    let e = cq.destroy().unwrap_err();
    assert!(matches!(e.error, Error::Busy(_)));
    assert!(e.cq.is_some());
}
