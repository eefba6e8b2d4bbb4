// SPDX-License-Identifier: GPL-2.0

//! UD and GSI over InfiniBand: datagrams with and without GRH, QP1 with
//! its well-known Q_Key, SEND_IMM, scattered and inline payloads, every
//! way a datagram is dropped, oversized sends and receive buffers too
//! small. Receive CQEs are checked byte for byte and through a reader of
//! what mlx5_ib's `handle_responder` takes from them.

use hca_model::error::Error;
use hca_model::fabric::lid_of_index;
use hca_model::qp::{ConnAttrs, QpService, QpState, RemoteQp};
use hca_model::qp_modify::AttrMask;
use mlx5_prm::cqe::{Cqe64, ErrCqe, CQE_SIZE};
use mlx5_prm::opcode::{CqeOpcode, CqeSyndrome, SendOpcode};

use super::harness::*;
use super::ud_setup::*;

const QKEY: u32 = 0x1111_2222;

/// The receive CQE an mlx5 HCA writes for a UD receive on an InfiniBand
/// port, built byte by byte at the offsets of `struct mlx5_cqe64`.
#[expect(clippy::too_many_arguments)]
fn ib_recv_cqe(
    slid: u16,
    grh: bool,
    sl: u8,
    src_qpn: u32,
    imm_or_pkey: u32,
    byte_cnt: u32,
    qpn: u32,
    counter: u16,
    opcode: CqeOpcode,
    owner: bool,
) -> [u8; CQE_SIZE] {
    let mut b = [0u8; CQE_SIZE];
    b[22..24].copy_from_slice(&slid.to_be_bytes());
    let flags = u32::from(grh) << 28 | u32::from(sl) << 24 | src_qpn;
    b[24..28].copy_from_slice(&flags.to_be_bytes());
    b[36..40].copy_from_slice(&imm_or_pkey.to_be_bytes());
    b[44..48].copy_from_slice(&byte_cnt.to_be_bytes());
    b[56..60].copy_from_slice(&qpn.to_be_bytes());
    b[60..62].copy_from_slice(&counter.to_be_bytes());
    b[63] = u8::from(opcode) << 4 | u8::from(owner);
    b
}

/// The sender's CQE: a successful REQ of `opcode` with `len` bytes.
fn assert_sent(w: &mut World, s: &mut Side, opcode: SendOpcode, len: u32) {
    let c = Cqe64::decode(&poll_raw(w, &mut s.cq).expect("no send CQE")).unwrap();
    assert_eq!(c.op_own.opcode, CqeOpcode::Req);
    assert_eq!(
        (c.send_opcode, c.byte_cnt, c.qpn),
        (u8::from(opcode), len, s.qp.qpn)
    );
}

/// The syndrome of the next CQE of `s`, which must be an error CQE.
fn error_of(w: &mut World, s: &mut Side) -> (CqeOpcode, u8) {
    let e = ErrCqe::decode(&poll_raw(w, &mut s.cq).expect("no CQE")).unwrap();
    (e.op_own.opcode, e.syndrome)
}

fn payload(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + 3) as u8).collect()
}

#[test]
fn ib_datagram_without_grh() {
    let mut w = World::new(2);
    let mut a = side(&mut w, 0, QpService::Ud, QKEY, true);
    let mut b = side(&mut w, 1, QpService::Ud, QKEY, true);
    recv(&mut w, &mut b, 0, 140);
    let data = payload(100);
    let av = ib_av(lid_of_index(1), b.qp.qpn, QKEY, 5);
    send(&mut w, &mut a, av, &data, None);
    assert_sent(&mut w, &mut a, SendOpcode::Send, 100);

    let c = poll_raw(&mut w, &mut b.cq).expect("no receive CQE");
    let want = ib_recv_cqe(
        lid_of_index(0),
        false,
        5,
        a.qp.qpn,
        0,
        140,
        b.qp.qpn,
        0,
        CqeOpcode::RespSend,
        false,
    );
    assert_eq!(c, want);
    assert_eq!(
        kernel_wc(&c, false, false),
        KernelWc {
            opcode: 2,
            byte_len: 140,
            imm: None,
            src_qp: a.qp.qpn,
            grh: false,
            pkey: None,
            slid: 1,
            sl: 5,
            network_hdr_type: None,
            vlan: false,
        }
    );
    // No GRH: the header area is untouched, the payload follows it.
    assert_eq!(w.read(b.buf, 40), vec![0xcc; 40]);
    assert_eq!(w.read(b.buf + 40, 100), data);
    assert!(poll_raw(&mut w, &mut b.cq).is_none());
    let st = *w.hca(1).stats();
    assert_eq!(st.recvs_consumed, 1);
    assert_eq!(st.ud_drop_bad_qpn + st.ud_drop_qkey + st.ud_drop_no_recv, 0);
}

#[test]
fn ib_datagram_with_grh_and_immediate() {
    let mut w = World::new(2);
    w.hca(0)
        .set_gid(0, Some(gid_entry(link_local(1), false, [0; 6])))
        .unwrap();
    w.hca(1)
        .set_gid(0, Some(gid_entry(link_local(2), false, [0; 6])))
        .unwrap();
    let mut a = side(&mut w, 0, QpService::Ud, QKEY, true);
    let mut b = side(&mut w, 1, QpService::Ud, QKEY, true);
    recv(&mut w, &mut b, 0, 256);
    let data = payload(33);
    let av = with_grh(
        ib_av(lid_of_index(1), b.qp.qpn, QKEY, 0xb),
        0,
        link_local(2),
        0xa4,
        7,
        0x5_4321,
    );
    send(&mut w, &mut a, av, &data, Some(0xdead_beef));
    assert_sent(&mut w, &mut a, SendOpcode::SendImm, 33);

    let c = poll_raw(&mut w, &mut b.cq).unwrap();
    let want = ib_recv_cqe(
        1,
        true,
        0xb,
        a.qp.qpn,
        0xdead_beef,
        73,
        b.qp.qpn,
        0,
        CqeOpcode::RespSendImm,
        false,
    );
    assert_eq!(c, want);
    let wc = kernel_wc(&c, false, false);
    assert!(wc.grh);
    assert_eq!(wc.imm, Some(0xdead_beef));
    // The GRH: version 6, traffic class 0xa4, flow label 0x54321, payload
    // length BTH 12 + DETH 8 + ImmDt 4 + 36 (33 padded) + ICRC 4 = 64,
    // next header 0x1b, hop limit 7, SGID, DGID.
    let h = w.read(b.buf, 40);
    assert_eq!(h[..8], [0x6a, 0x45, 0x43, 0x21, 0, 64, 0x1b, 7]);
    let (sgid, dgid) = kernel_gids(&h, 0);
    assert_eq!((sgid, dgid), (link_local(1), link_local(2)));
    assert_eq!(w.read(b.buf + 40, 33), data);
    assert_eq!(w.read(b.buf + 73, 1), [0xcc], "nothing beyond the payload");
}

#[test]
fn gsi_to_gsi_with_the_qp1_qkey() {
    let mut w = World::new(2);
    let mut a = side(&mut w, 0, QpService::Gsi, QP1_QKEY, true);
    let mut b = side(&mut w, 1, QpService::Gsi, QP1_QKEY, true);
    let info = w.hca(1).query_qp(b.qp.qpn).unwrap();
    assert_eq!((info.service, info.conn.qkey), (QpService::Gsi, QP1_QKEY));
    recv(&mut w, &mut b, 0, 296);
    let mad = payload(256);
    // A MAD: to QPN 1 with IB_QP1_QKEY, whose bit 31 says "the QP's own".
    send(
        &mut w,
        &mut a,
        ib_av(lid_of_index(1), 1, QP1_QKEY, 0),
        &mad,
        None,
    );
    assert_sent(&mut w, &mut a, SendOpcode::Send, 256);
    let c = poll_raw(&mut w, &mut b.cq).unwrap();
    // Source QPN 1, the P_Key 0xffff where mlx5_ib reads QP1's P_Key, the
    // table QPN of the receiving QP1.
    let want = ib_recv_cqe(
        1,
        false,
        0,
        1,
        0xffff,
        296,
        b.qp.qpn,
        0,
        CqeOpcode::RespSend,
        false,
    );
    assert_eq!(c, want);
    let wc = kernel_wc(&c, false, true);
    assert_eq!((wc.src_qp, wc.pkey), (1, Some(0xffff)));
    assert_eq!(w.read(b.buf + 40, 256), mad);

    // And back.
    recv(&mut w, &mut a, 0, 296);
    send(
        &mut w,
        &mut b,
        ib_av(lid_of_index(0), 1, QP1_QKEY, 0),
        &mad[..64],
        None,
    );
    let c = poll_raw(&mut w, &mut a.cq).unwrap();
    assert_eq!(Cqe64::decode(&c).unwrap().src_qpn, 1);
    assert_eq!(Cqe64::decode(&c).unwrap().byte_cnt, 104);
}

#[test]
fn ud_to_gsi_and_the_qkey_of_the_qp() {
    let mut w = World::new(2);
    let mut x = side(&mut w, 0, QpService::Ud, 0x1234, true);
    let mut g = side(&mut w, 1, QpService::Gsi, QP1_QKEY, true);
    recv(&mut w, &mut g, 0, 100);
    // Bit 31 set: X sends with its own Q_Key, 0x1234, which QP1 refuses.
    let av = ib_av(lid_of_index(1), 1, QP1_QKEY, 0);
    send(&mut w, &mut x, av, b"hello", None);
    assert_sent(&mut w, &mut x, SendOpcode::Send, 5);
    assert!(poll_raw(&mut w, &mut g.cq).is_none());
    assert_eq!(w.hca(1).stats().ud_drop_qkey, 1);
    // RTS -> RTS with a new Q_Key: now the same WQE gets through, from
    // X's own QPN.
    let attrs = ConnAttrs {
        qkey: QP1_QKEY,
        ..ConnAttrs::default()
    };
    w.modify(&x.qp, QpState::Rts, AttrMask::QKEY, attrs)
        .unwrap();
    send(&mut w, &mut x, av, b"hello", None);
    let c = Cqe64::decode(&poll_raw(&mut w, &mut g.cq).unwrap()).unwrap();
    assert_eq!((c.src_qpn, c.byte_cnt, c.qpn), (x.qp.qpn, 45, g.qp.qpn));
    assert_eq!(w.read(g.buf + 40, 5), b"hello");
    // QP1's table QPN is not its address.
    recv(&mut w, &mut g, 0, 100);
    let av = ib_av(lid_of_index(1), g.qp.qpn, QP1_QKEY, 0);
    send(&mut w, &mut x, av, b"hello", None);
    assert!(poll_raw(&mut w, &mut g.cq).is_none());
    assert_eq!(w.hca(1).stats().ud_drop_bad_qpn, 1);
}

#[test]
fn one_gsi_qp_per_instance() {
    let mut w = World::new(2);
    let g = side(&mut w, 0, QpService::Gsi, QP1_QKEY, false);
    let pd = w.pd(0);
    let cq = w.cq(0, 4);
    let caps = QpCaps::default();
    let second = w.qp_of(0, pd, &cq, &cq, caps, QpService::Gsi);
    assert_eq!(second.err(), Some(Error::Busy));
    // Another instance has its own; after a destroy there is room again.
    let pd1 = w.pd(1);
    let cq1 = w.cq(1, 4);
    assert!(w.qp_of(1, pd1, &cq1, &cq1, caps, QpService::Gsi).is_ok());
    w.hca(0).destroy_qp(g.qp.qpn).unwrap();
    let again = w.qp_of(0, pd, &cq, &cq, caps, QpService::Gsi).unwrap();
    assert_eq!(
        w.hca(0).query_qp(again.qpn).unwrap().service,
        QpService::Gsi
    );
}

#[test]
fn modify_rows_of_datagram_qps() {
    let mut w = World::new(1);
    let u = side(&mut w, 0, QpService::Ud, 0, false);
    let g = side(&mut w, 0, QpService::Gsi, 0, false);
    let a = ConnAttrs {
        port: 1,
        qkey: 7,
        ..ConnAttrs::default()
    };
    let bad = Err(Error::BadTransition);
    // UD needs P_Key index, port and Q_Key; QP1 P_Key index and Q_Key.
    let pk_port = AttrMask::PKEY_INDEX.or(AttrMask::PORT);
    assert_eq!(w.modify(&u.qp, QpState::Init, pk_port, a), bad);
    assert_eq!(
        w.modify(&g.qp, QpState::Init, pk_port.or(AttrMask::QKEY), a),
        bad
    );
    to_rts(&mut w, &u.qp, QpService::Ud, 7);
    to_rts(&mut w, &g.qp, QpService::Gsi, 7);
    assert_eq!(w.state(&u.qp), QpState::Rts);
    // RTS -> SQD -> SQD with a new Q_Key -> RTS.
    w.modify(&u.qp, QpState::Sqd, AttrMask(0), a).unwrap();
    let b = ConnAttrs { qkey: 9, ..a };
    w.modify(&u.qp, QpState::Sqd, AttrMask::QKEY, b).unwrap();
    w.modify(&u.qp, QpState::Rts, AttrMask(0), a).unwrap();
    assert_eq!(w.hca(0).query_qp(u.qp.qpn).unwrap().conn.qkey, 9);
    // RC attributes are not UD ones; Q_Key is not an RC one.
    assert_eq!(
        w.modify(&u.qp, QpState::Rts, AttrMask::MIN_RNR_TIMER, a),
        bad
    );
    let pd = w.pd(0);
    let cq = w.cq(0, 4);
    let rc = w.qp(0, pd, &cq, &cq, QpCaps::default());
    let init = AttrMask::PKEY_INDEX
        .or(AttrMask::PORT)
        .or(AttrMask::ACCESS_FLAGS);
    assert_eq!(
        w.modify(&rc, QpState::Init, init.or(AttrMask::QKEY), a),
        Err(Error::Invalid)
    );
    // RESET clears the Q_Key with the rest.
    w.modify(&u.qp, QpState::Reset, AttrMask(0), a).unwrap();
    assert_eq!(w.hca(0).query_qp(u.qp.qpn).unwrap().conn.qkey, 0);
}

#[test]
fn drops_are_counted_and_the_send_still_succeeds() {
    let mut w = World::new(3);
    w.hca(2).set_link_roce(true);
    let mut a = side(&mut w, 0, QpService::Ud, QKEY, true);
    let mut b = side(&mut w, 1, QpService::Ud, QKEY, true);
    let idle = side(&mut w, 1, QpService::Ud, QKEY, false);
    let pd = w.pd(1);
    let cq = w.cq(1, 4);
    let rc = w.qp(1, pd, &cq, &cq, QpCaps::default());
    recv(&mut w, &mut b, 0, 200);
    let to_b = |qpn, qkey| ib_av(lid_of_index(1), qpn, qkey, 0);
    let cases = [
        // No instance has LID 9; instance 2 is an Ethernet port.
        to_b(b.qp.qpn, QKEY).rlid(lid_of_index(8)),
        to_b(b.qp.qpn, QKEY).rlid(lid_of_index(2)),
        // No such QP, an RC QP, a UD QP still in RESET.
        to_b(0xab_cdef, QKEY),
        to_b(rc.qpn, QKEY),
        to_b(idle.qp.qpn, QKEY),
        // The wrong Q_Key.
        to_b(b.qp.qpn, QKEY ^ 1),
        // A GRH from a source GID index with no entry.
        with_grh(to_b(b.qp.qpn, QKEY), 3, link_local(2), 0, 1, 0),
    ];
    for av in cases {
        send(&mut w, &mut a, av, b"lost", None);
        assert_sent(&mut w, &mut a, SendOpcode::Send, 4);
    }
    assert!(poll_raw(&mut w, &mut b.cq).is_none());
    let sa = *w.hca(0).stats();
    let sb = *w.hca(1).stats();
    assert_eq!((sa.ud_drop_no_dest, sa.ud_drop_bad_sgid), (2, 1));
    assert_eq!((sb.ud_drop_bad_qpn, sb.ud_drop_qkey), (3, 1));
    assert_eq!(sb.ud_drop_no_recv, 0);
    // The receive WQE is still there for a good datagram; then there is
    // none, and the next one is dropped without an RNR NAK.
    send(&mut w, &mut a, to_b(b.qp.qpn, QKEY), b"found", None);
    assert_sent(&mut w, &mut a, SendOpcode::Send, 5);
    let c = Cqe64::decode(&poll_raw(&mut w, &mut b.cq).unwrap()).unwrap();
    assert_eq!(c.byte_cnt, 45);
    send(&mut w, &mut a, to_b(b.qp.qpn, QKEY), b"late", None);
    assert_sent(&mut w, &mut a, SendOpcode::Send, 4);
    assert_eq!(w.hca(1).stats().ud_drop_no_recv, 1);
    assert!(poll_raw(&mut w, &mut b.cq).is_none());
    assert_eq!(w.state(&a.qp), QpState::Rts);
    assert_eq!(w.state(&b.qp), QpState::Rts);
    assert_eq!(w.hca(0).stats().rnr_naks, 0);
}

/// The address vector with another LID (drop tests).
trait WithRlid {
    fn rlid(self, lid: u16) -> Self;
}

impl WithRlid for mlx5_prm::wqe::DatagramSeg {
    fn rlid(self, rlid: u16) -> Self {
        Self { rlid, ..self }
    }
}

#[test]
fn a_datagram_longer_than_the_mtu_fails_locally() {
    let mut w = World::new(2);
    w.hca(0).set_port_mtu(1);
    assert_eq!(w.hca(0).port().mtu_bytes(), 256);
    let mut a = side(&mut w, 0, QpService::Ud, QKEY, true);
    let mut b = side(&mut w, 1, QpService::Ud, QKEY, true);
    recv(&mut w, &mut b, 0, 1024);
    recv(&mut w, &mut b, 1024, 1024);
    let av = ib_av(lid_of_index(1), b.qp.qpn, QKEY, 0);
    // Exactly the MTU goes.
    send(&mut w, &mut a, av, &payload(256), None);
    assert_sent(&mut w, &mut a, SendOpcode::Send, 256);
    assert!(poll_raw(&mut w, &mut b.cq).is_some());
    // One byte more fails with LOCAL_LENGTH; the QP goes to ERR and the
    // next WQE is flushed.
    w.fill(a.buf, &payload(257));
    let mut big = Wr::new(1, WrOp::Send, &[a.sge(0, 257)]);
    big.av = Some(av);
    let mut next = Wr::new(2, WrOp::Send, &[a.sge(0, 8)]);
    next.av = Some(av);
    w.post_send_list(&mut a.qp, &[big, next], Ring::Plain)
        .unwrap();
    let local_length = u8::from(CqeSyndrome::LocalLength);
    assert_eq!(error_of(&mut w, &mut a), (CqeOpcode::ReqErr, local_length));
    assert_eq!(local_length, 0x01, "MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR");
    assert_eq!(
        error_of(&mut w, &mut a),
        (CqeOpcode::ReqErr, u8::from(CqeSyndrome::WrFlush))
    );
    assert_eq!(w.state(&a.qp), QpState::Err);
    assert!(poll_raw(&mut w, &mut b.cq).is_none());
    assert_eq!(w.state(&b.qp), QpState::Rts);
}

#[test]
fn a_receive_buffer_too_small_fails_the_receive() {
    let mut w = World::new(2);
    let mut a = side(&mut w, 0, QpService::Ud, QKEY, true);
    let mut b = side(&mut w, 1, QpService::Ud, QKEY, true);
    recv(&mut w, &mut b, 0, 139);
    recv(&mut w, &mut b, 1024, 1024);
    let av = ib_av(lid_of_index(1), b.qp.qpn, QKEY, 0);
    send(&mut w, &mut a, av, &payload(100), None);
    // UD is unreliable: the sender completes; the receiver's WQE fails
    // with LOCAL_LENGTH, its QP goes to ERR and the other receive is
    // flushed.
    assert_sent(&mut w, &mut a, SendOpcode::Send, 100);
    assert_eq!(
        error_of(&mut w, &mut b),
        (CqeOpcode::RespErr, u8::from(CqeSyndrome::LocalLength))
    );
    assert_eq!(
        error_of(&mut w, &mut b),
        (CqeOpcode::RespErr, u8::from(CqeSyndrome::WrFlush))
    );
    assert_eq!(w.state(&b.qp), QpState::Err);
    assert_eq!(w.state(&a.qp), QpState::Rts);
    // A payload that just fits 40 + payload is fine elsewhere.
    let mut c = side(&mut w, 1, QpService::Ud, QKEY, true);
    recv(&mut w, &mut c, 0, 140);
    send(
        &mut w,
        &mut a,
        ib_av(lid_of_index(1), c.qp.qpn, QKEY, 0),
        &payload(100),
        None,
    );
    assert_eq!(
        Cqe64::decode(&poll_raw(&mut w, &mut c.cq).unwrap())
            .unwrap()
            .byte_cnt,
        140
    );
}

#[test]
fn scattered_receive_and_inline_send() {
    let mut w = World::new(2);
    w.hca(0)
        .set_gid(1, Some(gid_entry(link_local(1), false, [0; 6])))
        .unwrap();
    let mut a = side(&mut w, 0, QpService::Ud, QKEY, true);
    let mut b = side(&mut w, 1, QpService::Ud, QKEY, true);
    // 16 + 30 + 200 bytes: the GRH spans the first two entries, the
    // payload starts 24 bytes into the second.
    w.fill(b.buf, &vec![0xcc; 1024]);
    let sges = [b.sge(0, 16), b.sge(100, 30), b.sge(500, 200)];
    w.post_recv(&mut b.qp, 3, &sges);
    let data = payload(50);
    let av = with_grh(
        ib_av(lid_of_index(1), b.qp.qpn, QKEY, 2),
        1,
        link_local(2),
        0,
        1,
        0,
    );
    let mut wr = Wr::new(4, WrOp::Send, &[]);
    wr.inline = Some(data.clone());
    wr.av = Some(av);
    wr.solicited = true;
    w.post_send(&mut a.qp, &wr).unwrap();
    assert_sent(&mut w, &mut a, SendOpcode::Send, 50);
    let raw = poll_raw(&mut w, &mut b.cq).unwrap();
    let c = Cqe64::decode(&raw).unwrap();
    assert!(c.op_own.solicited);
    assert_eq!((c.byte_cnt, c.grh), (90, 1));
    let mut got = w.read(b.buf, 16);
    got.extend(w.read(b.buf + 100, 30));
    got.extend(w.read(b.buf + 500, 200));
    assert_eq!(got[0] >> 4, 6);
    assert_eq!(got[8..24], link_local(1));
    assert_eq!(got[40..90], data[..]);
    assert_eq!(got[90..], vec![0xcc; 156][..]);
}

#[test]
fn rc_requests_do_not_reach_a_ud_qp() {
    let mut w = World::new(2);
    let mut ud = side(&mut w, 1, QpService::Ud, QKEY, true);
    recv(&mut w, &mut ud, 0, 100);
    let pd = w.pd(0);
    let mut cq = w.cq(0, 4);
    let mut rc = w.qp(0, pd, &cq, &cq, QpCaps::default());
    let dest = RemoteQp {
        hca: 1,
        qpn: ud.qp.qpn,
    };
    let mut attrs = rts_attrs(dest);
    attrs.retry_cnt = 0;
    attrs.timeout = 1;
    w.to_rts_with(&rc, dest, attrs);
    let buf = w.buffer(64);
    let key = w.mr(0, pd, buf, 64, hca_model::mr::Access::LOCAL_WRITE);
    let sge = Sge {
        addr: buf,
        len: 8,
        lkey: key,
    };
    w.post_send(&mut rc, &Wr::new(1, WrOp::Send, &[sge]))
        .unwrap();
    w.advance(1_000_000_000);
    let wcs = w.poll_all(&mut cq, &[&rc]);
    assert_eq!(
        wcs[0].syndrome,
        Some(u8::from(CqeSyndrome::TransportRetryExc))
    );
    assert!(poll_raw(&mut w, &mut ud.cq).is_none());
}
