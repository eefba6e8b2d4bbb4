// SPDX-License-Identifier: GPL-2.0

//! UD and QP1 through the command interface: CREATE_QP with `st` UD and
//! QP1 (one QP1 per function), the transitions with the context fields
//! mlx5_ib writes for them (`q_key`, the fixed `mtu`, QP1's port),
//! INIT2INIT, QUERY_QP reading `st` and `q_key` back, a MAD between the
//! two functions over the fast path, and the transitions' refusals.

use hca_model::fabric::lid_of_index;
use hca_model::fw::reject::Reject;
use hca_model::qp::QpState;
use mlx5_prm::cmd_qp::{
    Init2InitQp, Init2InitQpIn, Init2RtrQp, Init2RtrQpIn, QueryQp, QueryQpIn, Rst2InitQp,
    Rst2InitQpIn, Rtr2RtsQp, Rtr2RtsQpIn,
};
use mlx5_prm::cmd_status::{CmdError, CmdStatus};
use mlx5_prm::cqe::Cqe64;
use mlx5_prm::opcode::CqeOpcode;
use mlx5_prm::qpc::{
    Qpc, MTU_256, MTU_4K, OPTPAR_PRI_PORT, OPTPAR_Q_KEY, OPTPAR_RNR_TIMEOUT, OPTPAR_RRE,
    PM_STATE_MIGRATED, STATE_INIT, STATE_RTS, ST_QP1, ST_RC, ST_UD,
};

use super::cmd_driver::*;
use super::cmd_errors::{last, refused, status};
use super::harness::{QpCaps, Sge, TestCq, TestQp, Wr, WrOp};
use super::ud_setup::{ib_av, poll_raw, QP1_QKEY};

/// The context of a transition as mlx5_ib's `__mlx5_ib_modify_qp` fills
/// it for a UD QP or QP1: `mtu` 4096 (UD) or 256 (QP1) every time, QP1's
/// port, the P_Key index 0.
fn dgram_qpc(st: u8) -> Qpc {
    let mut q = Qpc {
        pm_state: PM_STATE_MIGRATED,
        mtu: if st == ST_QP1 { MTU_256 } else { MTU_4K },
        log_msg_max: if st == ST_QP1 { 8 } else { 12 },
        ..Qpc::default()
    };
    if st == ST_QP1 {
        q.primary_address_path.vhca_port_num = 1;
    }
    q
}

fn query(b: &mut Bed, d: usize, qpn: u32) -> Qpc {
    b.cmd::<QueryQp>(d, &QueryQpIn { qpn }, &[]).unwrap().qpc
}

/// RST2INIT (Q_Key `qkey`, UD's port), INIT2RTR and RTR2RTS of a UD QP or
/// QP1, with the optional-parameter masks mlx5_ib computes (none).
fn to_rts(b: &mut Bed, d: usize, qpn: u32, st: u8, qkey: u32) {
    let mut q = dgram_qpc(st);
    q.primary_address_path.vhca_port_num = 1;
    q.q_key = qkey;
    let init = Rst2InitQpIn {
        qpn,
        qpc: q,
        ..Default::default()
    };
    b.cmd::<Rst2InitQp>(d, &init, &[]).unwrap();
    let rtr = Init2RtrQpIn {
        qpn,
        qpc: dgram_qpc(st),
        ..Default::default()
    };
    b.cmd::<Init2RtrQp>(d, &rtr, &[]).unwrap();
    let mut q = dgram_qpc(st);
    q.next_send_psn = 0x100;
    let rts = Rtr2RtsQpIn {
        qpn,
        qpc: q,
        ..Default::default()
    };
    b.cmd::<Rtr2RtsQp>(d, &rts, &[]).unwrap();
}

/// A buffer of `len` bytes on function `d` with a PA key.
fn buffer(b: &mut Bed, d: usize, pd: u32, len: u64) -> Sge {
    let addr = b.w.buffer(len);
    let lkey = b.reg_mr(d, pd, addr, len, false, 0x31);
    Sge {
        addr,
        len: len as u32,
        lkey,
    }
}

/// A QP of `st` on function `d`, its send and receive CQ `cq`.
fn qp(b: &mut Bed, d: usize, pd: u32, cq: &TestCq, st: u8) -> Result<TestQp, CmdError> {
    b.create_qp_of(d, pd, (cq, cq), QpCaps::default(), false, st)
}

#[test]
fn ud_and_qp1_by_command_then_a_mad() {
    let mut b = Bed::up(2);
    let pd0 = b.alloc_pd(0);
    let pd1 = b.alloc_pd(1);
    let mut cq0 = b.create_cq(0, 6);
    let mut cq1 = b.create_cq(1, 6);
    let mut ud = qp(&mut b, 0, pd0, &cq0, ST_UD).unwrap();
    let mut q1 = qp(&mut b, 1, pd1, &cq1, ST_QP1).unwrap();
    // One QP1 per function.
    let e = qp(&mut b, 1, pd1, &cq1, ST_QP1).err();
    assert!(matches!(
        e,
        Some(CmdError::Failed {
            status: CmdStatus::ResBusy,
            ..
        })
    ));
    assert_eq!(last(&b, 1), Reject::Qp1Exists);

    // Created: `st` as given; QP1's port is its function's.
    let q = query(&mut b, 0, ud.qpn);
    assert_eq!((q.st, q.q_key), (ST_UD, 0));
    let q = query(&mut b, 1, q1.qpn);
    assert_eq!((q.st, q.primary_address_path.vhca_port_num), (ST_QP1, 1));

    // The UD QP: RST2INIT with one Q_Key, INIT2INIT to QP1's.
    let mut init = dgram_qpc(ST_UD);
    init.primary_address_path.vhca_port_num = 1;
    init.q_key = 0x1234;
    b.cmd::<Rst2InitQp>(
        0,
        &Rst2InitQpIn {
            qpn: ud.qpn,
            qpc: init,
            ..Default::default()
        },
        &[],
    )
    .unwrap();
    assert_eq!(query(&mut b, 0, ud.qpn).q_key, 0x1234);
    let mut i2i = Init2InitQpIn {
        qpn: ud.qpn,
        qpc: dgram_qpc(ST_UD),
        ..Default::default()
    };
    i2i.qpc.q_key = QP1_QKEY;
    // Without OPTPAR_Q_KEY the field is not taken.
    b.cmd::<Init2InitQp>(0, &i2i, &[]).unwrap();
    assert_eq!(query(&mut b, 0, ud.qpn).q_key, 0x1234);
    i2i.opt_param_mask = OPTPAR_Q_KEY;
    b.cmd::<Init2InitQp>(0, &i2i, &[]).unwrap();
    let q = query(&mut b, 0, ud.qpn);
    assert_eq!((q.state, q.q_key), (STATE_INIT, QP1_QKEY));
    let rtr = Init2RtrQpIn {
        qpn: ud.qpn,
        qpc: dgram_qpc(ST_UD),
        ..Default::default()
    };
    b.cmd::<Init2RtrQp>(0, &rtr, &[]).unwrap();
    let mut rts = Rtr2RtsQpIn {
        qpn: ud.qpn,
        qpc: dgram_qpc(ST_UD),
        ..Default::default()
    };
    rts.qpc.next_send_psn = 0x77;
    b.cmd::<Rtr2RtsQp>(0, &rts, &[]).unwrap();
    let q = query(&mut b, 0, ud.qpn);
    assert_eq!(
        (q.state, q.st, q.q_key, q.next_send_psn, q.mtu),
        (STATE_RTS, ST_UD, QP1_QKEY, 0x77, 0)
    );
    to_rts(&mut b, 1, q1.qpn, ST_QP1, QP1_QKEY);
    let q = query(&mut b, 1, q1.qpn);
    assert_eq!((q.state, q.st, q.q_key), (STATE_RTS, ST_QP1, QP1_QKEY));

    // A MAD from the UD QP to QP 1 of function 1, and the answer.
    let s0 = buffer(&mut b, 0, pd0, 4096);
    let s1 = buffer(&mut b, 1, pd1, 4096);
    b.w.post_recv(&mut q1, 1, &[s1]);
    b.w.post_recv(&mut ud, 2, &[s0]);
    let mad: Vec<u8> = (0..=255).collect();
    b.w.fill(s0.addr, &mad);
    let mut wr = Wr::new(3, WrOp::Send, &[Sge { len: 256, ..s0 }]);
    wr.av = Some(ib_av(lid_of_index(1), 1, QP1_QKEY, 0));
    b.w.post_send(&mut ud, &wr).unwrap();
    let got = Cqe64::decode(&poll_raw(&mut b.w, &mut cq1).unwrap()).unwrap();
    assert_eq!(got.op_own.opcode, CqeOpcode::RespSend);
    assert_eq!(
        (got.src_qpn, got.qpn, got.pkey(), got.byte_cnt, got.slid),
        (ud.qpn, q1.qpn, 0xffff, 296, lid_of_index(0))
    );
    assert_eq!(b.w.read(s1.addr + 40, 256), mad);
    let mut wr = Wr::new(4, WrOp::Send, &[Sge { len: 100, ..s1 }]);
    wr.av = Some(ib_av(lid_of_index(0), ud.qpn, QP1_QKEY, 0));
    b.w.post_send(&mut q1, &wr).unwrap();
    let back = poll_raw(&mut b.w, &mut cq0).map(|c| Cqe64::decode(&c).unwrap());
    assert_eq!(back.map(|c| c.op_own.opcode), Some(CqeOpcode::Req));
    let back = Cqe64::decode(&poll_raw(&mut b.w, &mut cq0).unwrap()).unwrap();
    assert_eq!((back.src_qpn, back.pkey(), back.byte_cnt), (1, 0, 140));
    assert_eq!(b.w.state(&ud), QpState::Rts);
}

#[test]
fn transition_refusals_for_datagram_qps() {
    let mut b = Bed::up(1);
    let pd = b.alloc_pd(0);
    let cq = b.create_cq(0, 6);
    let ud = qp(&mut b, 0, pd, &cq, ST_UD).unwrap();
    let q1 = qp(&mut b, 0, pd, &cq, ST_QP1).unwrap();
    let rc = qp(&mut b, 0, pd, &cq, ST_RC).unwrap();
    // INIT2INIT needs INIT.
    let i2i = |qpn, opt| Init2InitQpIn {
        qpn,
        opt_param_mask: opt,
        ..Default::default()
    };
    refused!(b, 0, Init2InitQp, i2i(ud.qpn, 0), &[], Reject::BadQpState);
    // UD's port must be the one port.
    let mut bad = dgram_qpc(ST_UD);
    bad.primary_address_path.vhca_port_num = 2;
    let init = |qpn, qpc| Rst2InitQpIn {
        qpn,
        qpc,
        ..Default::default()
    };
    refused!(b, 0, Rst2InitQp, init(ud.qpn, bad), &[], Reject::BadQpAttr);
    let mut good = dgram_qpc(ST_UD);
    good.primary_address_path.vhca_port_num = 1;
    b.cmd::<Rst2InitQp>(0, &init(ud.qpn, good), &[]).unwrap();
    // RC fields are not UD ones, QP1 takes no port after creation.
    refused!(
        b,
        0,
        Init2InitQp,
        i2i(ud.qpn, OPTPAR_RRE),
        &[],
        Reject::BadOptParam
    );
    b.cmd::<Rst2InitQp>(0, &init(q1.qpn, dgram_qpc(ST_QP1)), &[])
        .unwrap();
    refused!(
        b,
        0,
        Init2InitQp,
        i2i(q1.qpn, OPTPAR_PRI_PORT),
        &[],
        Reject::BadOptParam
    );
    let rtr = |qpn, opt| Init2RtrQpIn {
        qpn,
        opt_param_mask: opt,
        qpc: dgram_qpc(ST_UD),
        ..Default::default()
    };
    refused!(
        b,
        0,
        Init2RtrQp,
        rtr(ud.qpn, OPTPAR_RRE),
        &[],
        Reject::BadOptParam
    );
    b.cmd::<Init2RtrQp>(0, &rtr(ud.qpn, OPTPAR_Q_KEY), &[])
        .unwrap();
    let rts = |qpn, opt| Rtr2RtsQpIn {
        qpn,
        opt_param_mask: opt,
        ..Default::default()
    };
    refused!(
        b,
        0,
        Rtr2RtsQp,
        rts(ud.qpn, OPTPAR_RNR_TIMEOUT),
        &[],
        Reject::BadOptParam
    );
    b.cmd::<Rtr2RtsQp>(0, &rts(ud.qpn, OPTPAR_Q_KEY), &[])
        .unwrap();
    assert_eq!(b.w.state(&ud), QpState::Rts);
    // Q_Key is not an RC field; INIT2INIT of an RC QP takes its own.
    let mut q = rc_qpc();
    q.primary_address_path.vhca_port_num = 1;
    b.cmd::<Rst2InitQp>(0, &init(rc.qpn, q), &[]).unwrap();
    refused!(
        b,
        0,
        Init2InitQp,
        i2i(rc.qpn, OPTPAR_Q_KEY),
        &[],
        Reject::BadOptParam
    );
    let mut i = i2i(rc.qpn, OPTPAR_RRE);
    i.qpc.rre = true;
    b.cmd::<Init2InitQp>(0, &i, &[]).unwrap();
    let q = query(&mut b, 0, rc.qpn);
    assert!(q.rre && !q.rwe);
    assert_eq!(status(Reject::Qp1Exists).0, CmdStatus::ResBusy);
}
