// SPDX-License-Identifier: GPL-2.0

//! QUERY_QP: the QP context as the device has it. A QP created and moved
//! RESET -> INIT -> RTR -> RTS by command reads back, at each step, its
//! state and exactly the fields the driver set; a QP the engine moved to
//! ERR after an error completion reads ERR; bad QPNs, short outputs, a
//! non-zero op_mod and a query before INIT_HCA are refused.

use hca_model::fabric::lid_of_index;
use hca_model::fw::reject::Reject;
use hca_model::qp::QpState;
use mlx5_prm::cmd_hca::{EnableHca, EnableHcaIn};
use mlx5_prm::cmd_qp::{
    Init2RtrQp, Init2RtrQpIn, Qp2Err, Qp2ErrIn, Qp2Rst, Qp2RstIn, QueryQp, QueryQpIn, QueryQpOut,
    Rst2InitQp, Rst2InitQpIn, Rtr2RtsQp, Rtr2RtsQpIn,
};
use mlx5_prm::cmd_queue::DeliveryStatus;
use mlx5_prm::command::{self, InHeader};
use mlx5_prm::ifc::Layout;
use mlx5_prm::opcode::CqeSyndrome;
use mlx5_prm::qpc::{
    state_to_ib, Ads, Qpc, MTU_2K, MTU_4K, RQ_TYPE_REGULAR, STATE_ERR, STATE_INIT, STATE_RST,
    STATE_RTR, STATE_RTS,
};

use super::cmd_driver::*;
use super::cmd_errors::{fresh, last, refused, status};
use super::harness::{QpCaps, Sge, Wr, WrOp};

/// QUERY_QP of `qpn` on function `d`, as a driver runs it (output of
/// `QueryQpOut::SIZE` bytes).
fn query(b: &mut Bed, d: usize, qpn: u32) -> Qpc {
    b.cmd::<QueryQp>(d, &QueryQpIn { qpn }, &[]).unwrap().qpc
}

/// The queried state as a driver turns it into an IB state.
fn ib_state(q: &Qpc) -> QpState {
    QpState::from_raw(u32::from(state_to_ib(q.state).unwrap())).unwrap()
}

#[test]
fn query_reads_back_every_transition() {
    let mut b = Bed::up(2);
    let pd = b.alloc_pd(0);
    let cq = b.create_cq(0, 6);
    let pd1 = b.alloc_pd(1);
    let cq1 = b.create_cq(1, 6);
    let qa = b.create_qp(0, pd, &cq, &cq, QpCaps::default());
    let qb = b.create_qp(1, pd1, &cq1, &cq1, QpCaps::default());

    // Created: RESET, the creation fields, nothing of a connection.
    let mut want = Qpc {
        state: STATE_RST,
        pd,
        log_rq_size: 6,
        log_rq_stride: 2,
        log_sq_size: 6,
        uar_page: b.devs[0].uar,
        cqn_snd: cq.cqn,
        cqn_rcv: cq.cqn,
        dbr_addr: qa.dbr,
        rq_type: RQ_TYPE_REGULAR,
        ..rc_qpc()
    };
    assert_eq!(query(&mut b, 0, qa.qpn), want);

    // RST2INIT: access bits, P_Key index, port.
    let init = Qpc {
        rre: true,
        rae: true,
        primary_address_path: Ads {
            pkey_index: 0,
            vhca_port_num: 1,
            ..Ads::default()
        },
        ..rc_qpc()
    };
    let input = Rst2InitQpIn {
        qpn: qa.qpn,
        qpc: init,
        ..Default::default()
    };
    b.cmd::<Rst2InitQp>(0, &input, &[]).unwrap();
    want.state = STATE_INIT;
    want.rre = true;
    want.rae = true;
    want.primary_address_path.vhca_port_num = 1;
    let q = query(&mut b, 0, qa.qpn);
    assert_eq!(q, want);
    assert_eq!(ib_state(&q), QpState::Init);

    // INIT2RTR: path (LID of function 1, SL), MTU, remote QPN, receive
    // PSN, responder resources (8, as a log), RNR NAK timer.
    let rtr = Qpc {
        mtu: MTU_2K,
        remote_qpn: qb.qpn,
        next_rcv_psn: 0x12_3456,
        log_rra_max: 3,
        min_rnr_nak: 12,
        primary_address_path: Ads {
            rlid: lid_of_index(1),
            sl: 5,
            vhca_port_num: 1,
            ..Ads::default()
        },
        ..rc_qpc()
    };
    let input = Init2RtrQpIn {
        qpn: qa.qpn,
        qpc: rtr,
        ..Default::default()
    };
    b.cmd::<Init2RtrQp>(0, &input, &[]).unwrap();
    want.state = STATE_RTR;
    want.mtu = MTU_2K;
    want.remote_qpn = qb.qpn;
    want.next_rcv_psn = 0x12_3456;
    want.log_rra_max = 3;
    want.min_rnr_nak = 12;
    want.primary_address_path.rlid = lid_of_index(1);
    want.primary_address_path.sl = 5;
    let q = query(&mut b, 0, qa.qpn);
    assert_eq!(q, want);
    assert_eq!(ib_state(&q), QpState::Rtr);

    // RTR2RTS: ACK timeout, retry counts, send PSN, initiator depth (2).
    let rts = Qpc {
        retry_count: 6,
        rnr_retry: 7,
        next_send_psn: 0xab_cdef,
        log_sra_max: 1,
        primary_address_path: Ads {
            ack_timeout: 14,
            ..Ads::default()
        },
        ..rc_qpc()
    };
    let input = Rtr2RtsQpIn {
        qpn: qa.qpn,
        qpc: rts,
        ..Default::default()
    };
    b.cmd::<Rtr2RtsQp>(0, &input, &[]).unwrap();
    want.state = STATE_RTS;
    want.retry_count = 6;
    want.rnr_retry = 7;
    want.next_send_psn = 0xab_cdef;
    want.log_sra_max = 1;
    want.primary_address_path.ack_timeout = 14;
    let q = query(&mut b, 0, qa.qpn);
    assert_eq!(q, want);
    assert_eq!(ib_state(&q), b.w.state(&qa));
    assert_eq!(ib_state(&q), QpState::Rts);
    // What the model holds, for the fields the query encodes.
    let info = b.hca(0).query_qp(qa.qpn).unwrap();
    assert_eq!(info.conn.dest.hca, 1);
    assert_eq!(
        (info.conn.max_rd_atomic, info.conn.max_dest_rd_atomic),
        (2, 8)
    );

    // mlx5_ib's output length (MLX5_ST_SZ_BYTES(query_qp_out), 464): the
    // same 272 bytes, zeros after them.
    let out = b
        .cmd_out::<QueryQp>(0, &QueryQpIn { qpn: qa.qpn }, &[], 192)
        .unwrap();
    assert_eq!(out.len(), 464);
    let r = command::decode_out::<QueryQp>(&out).unwrap();
    assert_eq!((r.qpc, r.opt_param_mask, r.ece), (want, 0, 0));
    assert!(out[QueryQpOut::SIZE..].iter().all(|&x| x == 0));

    // The other QP was never touched.
    assert_eq!(query(&mut b, 1, qb.qpn).state, STATE_RST);

    b.destroy_qp(0, qa.qpn);
    b.destroy_qp(1, qb.qpn);
    b.destroy_cq(0, cq.cqn);
    b.destroy_cq(1, cq1.cqn);
    b.dealloc_pd(0, pd);
    b.dealloc_pd(1, pd1);
    for d in 0..2 {
        b.tear_down(d);
        assert_eq!(b.devs[d].fw.log().total(), 0);
    }
    assert!(b.w.mem.violations.is_empty());
}

#[test]
fn query_sees_the_device_move_a_qp_to_err() {
    let mut b = Bed::up(2);
    let pd0 = b.alloc_pd(0);
    let pd1 = b.alloc_pd(1);
    let mut cq0 = b.create_cq(0, 6);
    let cq1 = b.create_cq(1, 6);
    let mut qa = b.create_qp(0, pd0, &cq0, &cq0, QpCaps::default());
    let qb = b.create_qp(1, pd1, &cq1, &cq1, QpCaps::default());
    b.to_rts(0, &qa, &qb);
    b.to_rts(1, &qb, &qa);
    let connected = query(&mut b, 0, qa.qpn);
    assert_eq!(connected.state, STATE_RTS);

    // A send with a bad lkey: the engine completes it in error and moves
    // the QP to ERR by itself; QUERY_QP says so, and the connection
    // attributes are still there.
    let buf = b.w.buffer(4096);
    let key = b.reg_mr(0, pd0, buf, 4096, false, 0x33);
    let bad = Wr::new(
        1,
        WrOp::Send,
        &[Sge {
            addr: buf,
            len: 8,
            lkey: key ^ 0x100,
        }],
    );
    b.w.post_send(&mut qa, &bad).unwrap();
    let wcs = b.w.poll_all(&mut cq0, &[&qa]);
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].syndrome, Some(u8::from(CqeSyndrome::LocalProt)));
    assert_eq!(b.w.state(&qa), QpState::Err);
    let q = query(&mut b, 0, qa.qpn);
    assert_eq!(q.state, STATE_ERR);
    assert_eq!(ib_state(&q), QpState::Err);
    assert_eq!(
        q,
        Qpc {
            state: STATE_ERR,
            ..connected
        }
    );
    assert_eq!(q.mtu, MTU_4K);
    assert_eq!(q.remote_qpn, qb.qpn);
    assert_eq!(q.primary_address_path.rlid, lid_of_index(1));
    assert_eq!((q.log_sra_max, q.log_rra_max), (2, 2));
    // The peer saw nothing.
    assert_eq!(query(&mut b, 1, qb.qpn).state, STATE_RTS);

    // 2ERR by command reads ERR too; 2RST clears the connection.
    b.cmd::<Qp2Err>(1, &Qp2ErrIn { qpn: qb.qpn }, &[]).unwrap();
    assert_eq!(query(&mut b, 1, qb.qpn).state, STATE_ERR);
    b.cmd::<Qp2Rst>(0, &Qp2RstIn { qpn: qa.qpn }, &[]).unwrap();
    let q = query(&mut b, 0, qa.qpn);
    assert_eq!(q.state, STATE_RST);
    assert_eq!(
        (q.mtu, q.remote_qpn, q.primary_address_path.rlid, q.rre),
        (0, 0, 0, false)
    );
    assert_eq!((q.pd, q.cqn_snd, q.dbr_addr), (pd0, cq0.cqn, qa.dbr));

    b.w.run();
    b.w.poll_all(&mut cq0, &[&qa]);
    b.destroy_qp(0, qa.qpn);
    b.destroy_qp(1, qb.qpn);
    b.destroy_cq(0, cq0.cqn);
    b.destroy_cq(1, cq1.cqn);
    b.dereg_mr(0, key);
    b.dealloc_pd(0, pd0);
    b.dealloc_pd(1, pd1);
    for d in 0..2 {
        b.tear_down(d);
        assert_eq!(b.devs[d].fw.log().total(), 0);
    }
}

#[test]
fn query_refusals() {
    // Before INIT_HCA, like every QP command.
    let mut b = fresh();
    b.cmd::<EnableHca>(0, &EnableHcaIn::default(), &[]).unwrap();
    refused!(
        b,
        0,
        QueryQp,
        QueryQpIn { qpn: 0x100 },
        &[],
        Reject::NotInitialized
    );

    let mut b = Bed::up(1);
    let pd = b.alloc_pd(0);
    let cq = b.create_cq(0, 4);
    let qp = b.create_qp(0, pd, &cq, &cq, QpCaps::default());
    // QPNs that name no QP: never created, below the first, destroyed.
    refused!(b, 0, QueryQp, QueryQpIn { qpn: 0x7777 }, &[], Reject::BadQp);
    refused!(b, 0, QueryQp, QueryQpIn { qpn: 1 }, &[], Reject::BadQp);
    let gone = b.create_qp(0, pd, &cq, &cq, QpCaps::default());
    b.destroy_qp(0, gone.qpn);
    refused!(
        b,
        0,
        QueryQp,
        QueryQpIn { qpn: gone.qpn },
        &[],
        Reject::BadQp
    );
    // An output shorter than the layout: one byte short, or the header
    // alone.
    let mut msg = [0u8; 16];
    command::encode_in::<QueryQp>(&QueryQpIn { qpn: qp.qpn }, &[], &mut msg).unwrap();
    for outlen in [QueryQpOut::SIZE - 1, 16] {
        let r = b.exec_raw(0, &msg, outlen).unwrap();
        assert_eq!(r.delivery, DeliveryStatus::Ok);
        assert_eq!(r.status(), status(Reject::OutputTooShort), "{outlen}");
        assert_eq!(last(&b, 0), Reject::OutputTooShort);
    }
    // A non-zero op_mod.
    let mut odd = msg;
    InHeader {
        op_mod: 1,
        ..InHeader::decode(&msg).unwrap()
    }
    .encode(&mut odd)
    .unwrap();
    let r = b.exec_raw(0, &odd, QueryQpOut::SIZE).unwrap();
    assert_eq!(r.status(), status(Reject::BadOpMod));
    assert_eq!(last(&b, 0), Reject::BadOpMod);
    // None of it changed the QP.
    assert_eq!(query(&mut b, 0, qp.qpn).state, STATE_RST);
    assert_eq!(b.w.state(&qp), QpState::Reset);
    assert_eq!(b.devs[0].fw.log().total(), 6);

    b.destroy_qp(0, qp.qpn);
    b.destroy_cq(0, cq.cqn);
    b.dealloc_pd(0, pd);
    b.tear_down(0);
}
