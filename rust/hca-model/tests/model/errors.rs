// SPDX-License-Identifier: GPL-2.0

//! Every error case: the exact syndrome on the right side, the QP states
//! afterwards, and the flush of everything outstanding.

use hca_model::mr::Access;
use hca_model::qp::{QpState, RemoteQp};
use hca_model::qp_modify::AttrMask;
use mlx5_prm::eqe::EqeData;
use mlx5_prm::opcode::{CqeOpcode, CqeSyndrome, EventType, SendOpcode};

use super::harness::*;
use super::verbs::Pair;

/// The WR_FLUSH_ERR syndrome.
pub const FLUSH: u8 = 0x05;

/// A syndrome as a work completion carries it.
pub fn syn(s: CqeSyndrome) -> Option<u8> {
    Some(u8::from(s))
}

/// Posts a failing request on A after two receives on A and B and two more
/// sends behind it; checks the requester's error CQE and flushes.
fn requester_fails(p: &mut Pair, bad: Wr, want: CqeSyndrome) -> Vec<Wc> {
    p.recv_a(90, &[p.asge(0, 8)]);
    let follow1 = Wr::new(
        2,
        WrOp::Write {
            raddr: p.bbuf,
            rkey: p.bkey,
        },
        &[p.asge(0, 8)],
    );
    let mut follow2 = follow1.clone();
    follow2.id = 3;
    follow2.signaled = false;
    p.send_list_a(&[bad, follow1, follow2], Ring::Plain)
        .unwrap();
    let wcs = p.apoll();
    assert_eq!(
        wcs.iter()
            .map(|w| (w.wr_id, w.opcode, w.syndrome))
            .collect::<Vec<_>>(),
        [
            (1, CqeOpcode::ReqErr, syn(want)),
            (2, CqeOpcode::ReqErr, Some(FLUSH)),
            (3, CqeOpcode::ReqErr, Some(FLUSH)),
            (90, CqeOpcode::RespErr, Some(FLUSH)),
        ]
    );
    assert_eq!(p.w.state(&p.a), QpState::Err);
    wcs
}

#[test]
fn local_protection_errors() {
    // Bad lkey, lkey of another PD, out of bounds, read into a buffer
    // without local write.
    let mut p = Pair::new(false);
    let bad = Wr::new(
        1,
        WrOp::Send,
        &[Sge {
            lkey: p.akey ^ 0x100,
            ..p.asge(0, 8)
        }],
    );
    requester_fails(&mut p, bad, CqeSyndrome::LocalProt);
    assert_eq!(p.w.state(&p.b), QpState::Rts, "the responder never saw it");

    let mut p = Pair::new(false);
    let other_pd = p.w.pd(0);
    let buf = p.w.buffer(64);
    let key = p.w.mr(0, other_pd, buf, 64, Access::ALL);
    let bad = Wr::new(
        1,
        WrOp::Send,
        &[Sge {
            addr: buf,
            len: 8,
            lkey: key,
        }],
    );
    requester_fails(&mut p, bad, CqeSyndrome::LocalProt);

    let mut p = Pair::new(false);
    let bad = Wr::new(
        1,
        WrOp::Write {
            raddr: p.bbuf,
            rkey: p.bkey,
        },
        &[p.asge(super::verbs::BUF - 4, 8)],
    );
    requester_fails(&mut p, bad, CqeSyndrome::LocalProt);

    let mut p = Pair::new(false);
    let ro = p.w.buffer(64);
    let ro_key = p.w.mr(0, 0, ro, 64, Access::REMOTE_READ);
    let bad = Wr::new(
        1,
        WrOp::Read {
            raddr: p.bbuf,
            rkey: p.bkey,
        },
        &[Sge {
            addr: ro,
            len: 8,
            lkey: ro_key,
        }],
    );
    requester_fails(&mut p, bad, CqeSyndrome::LocalProt);
    assert_eq!(p.w.read(ro, 8), vec![0; 8]);
}

#[test]
fn stale_key_after_reregistration() {
    let mut p = Pair::new(false);
    let old = p.akey;
    p.w.dereg(0, old);
    let new = p.w.mr(0, 0, p.abuf, super::verbs::BUF, Access::ALL);
    assert_ne!(old, new);
    let bad = Wr::new(
        1,
        WrOp::Send,
        &[Sge {
            lkey: old,
            ..p.asge(0, 8)
        }],
    );
    p.akey = new;
    requester_fails(&mut p, bad, CqeSyndrome::LocalProt);
}

#[test]
fn local_qp_operation_and_length_errors() {
    // Too many gather entries for the QP.
    let mut p = Pair::new(false);
    let sges: Vec<Sge> = (0..9).map(|i| p.asge(i * 8, 8)).collect();
    requester_fails(
        &mut p,
        Wr::new(1, WrOp::Send, &sges),
        CqeSyndrome::LocalQpOp,
    );

    // Inline data beyond the QP's limit.
    let mut p = Pair::new(false);
    let mut big = Wr::new(1, WrOp::Send, &[]);
    big.inline = Some(vec![1; 300]);
    requester_fails(&mut p, big, CqeSyndrome::LocalQpOp);

    // Atomic result buffer of the wrong size.
    let mut p = Pair::new(false);
    let faa = WrOp::Faa {
        raddr: p.bbuf,
        rkey: p.bkey,
        add: 1,
    };
    let bad = Wr::new(1, faa, &[p.asge(0, 16)]);
    requester_fails(&mut p, bad, CqeSyndrome::LocalLength);
}

#[test]
fn malformed_wqes_are_local_qp_operation_errors() {
    // Unknown opcode, wrong QPN, wrong WQE index: corrupt a valid WQE that
    // is followed by a good one (which the doorbell names).
    for corrupt in 0..3 {
        let mut p = Pair::new(false);
        let wr = Wr::new(
            1,
            WrOp::Write {
                raddr: p.bbuf,
                rkey: p.bkey,
            },
            &[p.asge(0, 8)],
        );
        let (index, _) = p.w.build_wqe(&mut p.a, &wr);
        let ctrl = p.a.sq_buf + u64::from(index % 64) * 64;
        let mut bytes = p.w.read(ctrl, 16);
        match corrupt {
            0 => bytes[3] = 0x07,
            1 => bytes[6] ^= 1,
            _ => bytes[2] ^= 1,
        }
        p.w.fill(ctrl, &bytes);
        let good = Wr { id: 2, ..wr };
        let (index, bbs) = p.w.build_wqe(&mut p.a, &good);
        p.w.ring_sq(&mut p.a, index, bbs, Ring::Plain).unwrap();
        p.w.run();
        let wcs = p.apoll();
        assert_eq!(
            wcs.iter()
                .map(|w| (w.wr_id, w.syndrome))
                .collect::<Vec<_>>(),
            [(1, syn(CqeSyndrome::LocalQpOp)), (2, Some(FLUSH))],
            "case {corrupt}"
        );
        assert_eq!(p.w.state(&p.a), QpState::Err);
        assert_eq!(p.w.read(p.bbuf, 8), vec![0; 8]);
    }
}

/// Checks an error detected at the responder without a receive WQE: the
/// requester's syndrome, responder in ERR with its receives flushed and the
/// affiliated event on its async EQ.
fn responder_fails(p: &mut Pair, bad: Wr, want: CqeSyndrome, event: EventType) {
    p.recv_b(70, &[p.bsge(0, 8)]);
    requester_fails(p, bad, want);
    let rc = p.bpoll();
    assert_eq!(
        rc.iter().map(|w| (w.wr_id, w.syndrome)).collect::<Vec<_>>(),
        [(70, Some(FLUSH))]
    );
    assert_eq!(p.w.state(&p.b), QpState::Err);
    let ev = p.w.eqes(p.b.hca, true);
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].event_type, event);
    assert_eq!(
        ev[0].data,
        EqeData::QpSrq {
            queue_type: 0,
            qp_srq_n: p.b.qpn
        }
    );
}

#[test]
fn remote_access_errors() {
    let ops = |p: &Pair| {
        [
            WrOp::Write {
                raddr: p.bbuf,
                rkey: p.bkey ^ 0x300,
            },
            WrOp::Write {
                raddr: p.bbuf + super::verbs::BUF - 4,
                rkey: p.bkey,
            },
            WrOp::Read {
                raddr: p.bbuf - 8,
                rkey: p.bkey,
            },
            WrOp::Faa {
                raddr: p.bbuf + super::verbs::BUF,
                rkey: p.bkey,
                add: 1,
            },
        ]
    };
    for i in 0..4 {
        let mut p = Pair::new(false);
        let op = ops(&p)[i];
        let bad = Wr::new(1, op, &[p.asge(0, 8)]);
        responder_fails(
            &mut p,
            bad,
            CqeSyndrome::RemoteAccess,
            EventType::WqAccessError,
        );
    }
}

#[test]
fn remote_rights_of_mr_and_qp() {
    // MR without the right.
    for (access, op) in [
        (Access::LOCAL_WRITE.union(Access::REMOTE_READ), 0),
        (Access::LOCAL_WRITE.union(Access::REMOTE_WRITE), 1),
        (
            Access::LOCAL_WRITE
                .union(Access::REMOTE_WRITE)
                .union(Access::REMOTE_READ),
            2,
        ),
    ] {
        let mut p = Pair::new(false);
        let buf = p.w.buffer(64);
        let key = p.w.mr(1, 0, buf, 64, access);
        let op = [
            WrOp::Write {
                raddr: buf,
                rkey: key,
            },
            WrOp::Read {
                raddr: buf,
                rkey: key,
            },
            WrOp::Cas {
                raddr: buf,
                rkey: key,
                compare: 0,
                swap: 1,
            },
        ][op];
        let bad = Wr::new(1, op, &[p.asge(0, 8)]);
        responder_fails(
            &mut p,
            bad,
            CqeSyndrome::RemoteAccess,
            EventType::WqAccessError,
        );
        assert_eq!(p.w.read(buf, 8), vec![0; 8]);
    }
    // QP without remote write access.
    let mut p = Pair::new(false);
    let mut attrs = rts_attrs(RemoteQp {
        hca: 0,
        qpn: p.a.qpn,
    });
    attrs.access = Access::REMOTE_READ;
    p.w.modify(&p.b, QpState::Rts, AttrMask::ACCESS_FLAGS, attrs)
        .unwrap();
    let op = WrOp::Write {
        raddr: p.bbuf,
        rkey: p.bkey,
    };
    let bad = Wr::new(1, op, &[p.asge(0, 8)]);
    responder_fails(
        &mut p,
        bad,
        CqeSyndrome::RemoteAccess,
        EventType::WqAccessError,
    );
}

#[test]
fn misaligned_atomic_is_an_invalid_request() {
    let mut p = Pair::new(false);
    let op = WrOp::Cas {
        raddr: p.bbuf + 4,
        rkey: p.bkey,
        compare: 0,
        swap: 1,
    };
    let bad = Wr::new(1, op, &[p.asge(0, 8)]);
    responder_fails(
        &mut p,
        bad,
        CqeSyndrome::RemoteInvalReq,
        EventType::WqInvalReqError,
    );
}

#[test]
fn receive_too_small_and_bad_receive_key() {
    // Too small: responder LOCAL_LENGTH on that receive, requester
    // REMOTE_INVAL_REQ.
    let mut p = Pair::new(false);
    p.recv_b(70, &[p.bsge(0, 4)]);
    p.recv_b(71, &[p.bsge(8, 64)]);
    let bad = Wr::new(1, WrOp::Send, &[p.asge(0, 8)]);
    requester_fails(&mut p, bad, CqeSyndrome::RemoteInvalReq);
    let rc = p.bpoll();
    assert_eq!(
        rc.iter()
            .map(|w| (w.wr_id, w.opcode, w.syndrome))
            .collect::<Vec<_>>(),
        [
            (70, CqeOpcode::RespErr, syn(CqeSyndrome::LocalLength)),
            (71, CqeOpcode::RespErr, Some(FLUSH))
        ]
    );
    assert_eq!(p.w.state(&p.b), QpState::Err);

    // Bad scatter key: responder LOCAL_PROT, requester REMOTE_OP.
    let mut p = Pair::new(false);
    p.recv_b(
        70,
        &[Sge {
            lkey: 0x12345,
            ..p.bsge(0, 64)
        }],
    );
    let bad = Wr::new(1, WrOp::Send, &[p.asge(0, 8)]);
    requester_fails(&mut p, bad, CqeSyndrome::RemoteOp);
    let rc = p.bpoll();
    assert_eq!(
        rc.iter().map(|w| (w.wr_id, w.syndrome)).collect::<Vec<_>>(),
        [(70, syn(CqeSyndrome::LocalProt))]
    );

    // A bad entry the message does not reach is never checked.
    let mut p = Pair::new(false);
    p.recv_b(
        70,
        &[
            p.bsge(0, 64),
            Sge {
                lkey: 0x12345,
                ..p.bsge(0, 64)
            },
        ],
    );
    p.send_a(&Wr::new(1, WrOp::Send, &[p.asge(0, 8)])).unwrap();
    assert!(p.bpoll()[0].ok());
}

#[test]
fn unsignaled_failure_still_completes() {
    let mut p = Pair::new(false);
    let mut bad = Wr::new(
        1,
        WrOp::Write {
            raddr: p.bbuf,
            rkey: 0,
        },
        &[p.asge(0, 8)],
    );
    bad.signaled = false;
    p.send_a(&bad).unwrap();
    let wcs = p.apoll();
    assert_eq!(
        wcs.iter()
            .map(|w| (w.wr_id, w.syndrome, w.send_opcode))
            .collect::<Vec<_>>(),
        [(
            1,
            syn(CqeSyndrome::RemoteAccess),
            u8::from(SendOpcode::RdmaWrite)
        )]
    );
}
