// SPDX-License-Identifier: GPL-2.0

//! UD and GSI on RoCE ports: datagrams routed by MAC through the GID
//! tables, with the network header of the sender's GID entry (RoCE v2 over
//! IPv4 and IPv6, RoCE v1), checked byte for byte and as ib_core parses
//! it; loopback to the sender's own MAC; RoCE drops.

use hca_model::error::Error;
use hca_model::fabric::lid_of_index;
use hca_model::port::GID_TABLE_LEN;
use hca_model::qp::QpService;
use mlx5_prm::cqe::{Cqe64, CQE_SIZE};
use mlx5_prm::opcode::CqeOpcode;
use mlx5_prm::wqe::DatagramSeg;

use super::harness::*;
use super::ud_setup::*;

const QKEY: u32 = 0x0000_beef;

/// The IPv4 address of instance `h`: 10.0.0.(h + 1).
fn ip(h: usize) -> [u8; 4] {
    [10, 0, 0, h as u8 + 1]
}

/// `n` RoCE instances; instance `h` has MAC `mac(h + 1)` and, as the
/// kernel fills a RoCE GID table from the interface's addresses, GID 0
/// RoCE v1 and GID 1 RoCE v2 of `fe80::..<h + 1>`, GID 2 RoCE v2 of its
/// IPv4 address.
fn roce_world(n: usize) -> World {
    let mut w = World::new(n);
    for h in 0..n {
        let m = mac(h as u8 + 1);
        let ll = link_local(h as u8 + 1);
        let hca = w.hca(h);
        hca.set_link_roce(true);
        hca.set_gid(0, Some(gid_entry(ll, false, m))).unwrap();
        hca.set_gid(1, Some(gid_entry(ll, true, m))).unwrap();
        hca.set_gid(2, Some(gid_entry(mapped(ip(h)), true, m)))
            .unwrap();
    }
    w
}

/// The receive CQE of a RoCE UD receive, byte by byte: no SLID, GRH in
/// the buffer, the L3 header type in `flags_rqpn` bits 25:24.
fn roce_recv_cqe(
    l3: u8,
    src_qpn: u32,
    pkey: u32,
    byte_cnt: u32,
    qpn: u32,
    opcode: CqeOpcode,
) -> [u8; CQE_SIZE] {
    let mut b = [0u8; CQE_SIZE];
    let flags = 1 << 28 | u32::from(l3) << 24 | src_qpn;
    b[24..28].copy_from_slice(&flags.to_be_bytes());
    b[36..40].copy_from_slice(&pkey.to_be_bytes());
    b[44..48].copy_from_slice(&byte_cnt.to_be_bytes());
    b[56..60].copy_from_slice(&qpn.to_be_bytes());
    b[63] = u8::from(opcode) << 4;
    b
}

/// An IPv4 header checksum computed the long way (RFC 1071).
fn rfc1071(h: &[u8]) -> u16 {
    let mut sum = 0u32;
    for i in (0..20).step_by(2) {
        if i != 10 {
            sum += u32::from(h[i]) << 8 | u32::from(h[i + 1]);
        }
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[test]
fn roce_v2_over_ipv4() {
    let mut w = roce_world(2);
    let mut a = side(&mut w, 0, QpService::Ud, QKEY, true);
    let mut b = side(&mut w, 1, QpService::Ud, QKEY, true);
    recv(&mut w, &mut b, 0, 2048);
    let data: Vec<u8> = (0..1001).map(|i| (i * 13) as u8).collect();
    let av = roce_av(mac(2), b.qp.qpn, QKEY, 2, mapped(ip(1)));
    send(&mut w, &mut a, av, &data, None);
    assert!(poll_raw(&mut w, &mut a.cq).is_some());

    let c = poll_raw(&mut w, &mut b.cq).expect("not received");
    assert_eq!(
        c,
        roce_recv_cqe(2, a.qp.qpn, 0, 1041, b.qp.qpn, CqeOpcode::RespSend)
    );
    let wc = kernel_wc(&c, true, false);
    assert_eq!(
        (wc.network_hdr_type, wc.grh, wc.slid, wc.sl, wc.vlan),
        (Some(RDMA_NETWORK_IPV4), true, 0, 0, false)
    );
    let h = w.read(b.buf, 40);
    assert_eq!(h[..20], [0; 20], "the unused first 20 bytes are zero");
    // Version 4, IHL 5, TOS = traffic class, total length 20 + UDP 8 +
    // BTH 12 + DETH 8 + 1004 (1001 padded) + ICRC 4 = 1056, ID 0, DF,
    // TTL = hop limit, UDP, checksum, 10.0.0.1 -> 10.0.0.2.
    let csum = rfc1071(&h[20..40]);
    assert_eq!(
        h[20..40],
        [
            0x45,
            0x62,
            0x04,
            0x20,
            0,
            0,
            0x40,
            0,
            64,
            17,
            (csum >> 8) as u8,
            csum as u8,
            10,
            0,
            0,
            1,
            10,
            0,
            0,
            2
        ]
    );
    assert!(ipv4_ok(&h));
    assert_eq!(kernel_header_version(&h), 4);
    assert_eq!(
        kernel_gids(&h, RDMA_NETWORK_IPV4),
        (mapped(ip(0)), mapped(ip(1)))
    );
    assert_eq!(w.read(b.buf + 40, 1001), data);
    assert_eq!(w.read(b.buf + 1041, 1), [0xcc]);
}

#[test]
fn roce_v2_over_ipv6_and_roce_v1() {
    for (sgid_index, l3, next_hdr, paylen) in [
        // UDP 8 + BTH 12 + DETH 8 + 64 + ICRC 4.
        (1u8, 1u8, 17u8, 96u16),
        // BTH 12 + DETH 8 + 64 + ICRC 4.
        (0, 0, 0x1b, 88),
    ] {
        let mut w = roce_world(2);
        let mut a = side(&mut w, 0, QpService::Ud, QKEY, true);
        let mut b = side(&mut w, 1, QpService::Ud, QKEY, true);
        recv(&mut w, &mut b, 0, 200);
        let av = roce_av(mac(2), b.qp.qpn, QKEY, sgid_index, link_local(2));
        send(&mut w, &mut a, av, &[0x5a; 64], None);
        let c = poll_raw(&mut w, &mut b.cq).expect("not received");
        assert_eq!(
            c,
            roce_recv_cqe(l3, a.qp.qpn, 0, 104, b.qp.qpn, CqeOpcode::RespSend)
        );
        let want_type = if l3 == 1 {
            RDMA_NETWORK_IPV6
        } else {
            RDMA_NETWORK_ROCE_V1
        };
        assert_eq!(kernel_wc(&c, true, false).network_hdr_type, Some(want_type));
        let h = w.read(b.buf, 40);
        // Version 6, traffic class 0x62, flow label 0x98765.
        assert_eq!(h[..4], [0x66, 0x29, 0x87, 0x65]);
        assert_eq!(h[4..6], paylen.to_be_bytes());
        assert_eq!((h[6], h[7]), (next_hdr, 64));
        assert_eq!(kernel_header_version(&h), 6);
        assert_eq!(kernel_gids(&h, want_type), (link_local(1), link_local(2)));
        assert_eq!(w.read(b.buf + 40, 64), vec![0x5a; 64]);
    }
}

#[test]
fn a_datagram_to_the_senders_own_mac_loops_back() {
    let mut w = roce_world(2);
    let mut a = side(&mut w, 0, QpService::Ud, QKEY, true);
    let mut a2 = side(&mut w, 0, QpService::Ud, QKEY, true);
    recv(&mut w, &mut a2, 0, 100);
    recv(&mut w, &mut a, 4096, 100);
    let av = roce_av(mac(1), a2.qp.qpn, QKEY, 2, mapped(ip(0)));
    send(&mut w, &mut a, av, b"self", None);
    let c = Cqe64::decode(&poll_raw(&mut w, &mut a2.cq).unwrap()).unwrap();
    assert_eq!((c.src_qpn, c.byte_cnt, c.qpn), (a.qp.qpn, 44, a2.qp.qpn));
    assert_eq!(c.roce_l3_header_type(), 2);
    // And a QP to itself: the send and the receive complete on its CQ.
    let av = roce_av(mac(1), a.qp.qpn, QKEY, 1, link_local(1));
    send(&mut w, &mut a, av, b"me", None);
    let mut ops = Vec::new();
    while let Some(b) = poll_raw(&mut w, &mut a.cq) {
        ops.push(Cqe64::decode(&b).unwrap().op_own.opcode);
    }
    assert_eq!(ops, [CqeOpcode::Req, CqeOpcode::RespSend, CqeOpcode::Req]);
    assert_eq!(w.read(a.buf + 4096 + 40, 2), b"me");
    assert_eq!(w.hca(1).stats().recvs_consumed, 0);
}

#[test]
fn gsi_on_roce() {
    let mut w = roce_world(2);
    let mut a = side(&mut w, 0, QpService::Gsi, QP1_QKEY, true);
    let mut b = side(&mut w, 1, QpService::Gsi, QP1_QKEY, true);
    recv(&mut w, &mut b, 0, 296);
    let av = roce_av(mac(2), 1, QP1_QKEY, 2, mapped(ip(1)));
    send(&mut w, &mut a, av, &[0x11; 256], None);
    let c = poll_raw(&mut w, &mut b.cq).unwrap();
    assert_eq!(
        c,
        roce_recv_cqe(2, 1, 0xffff, 296, b.qp.qpn, CqeOpcode::RespSend)
    );
    let wc = kernel_wc(&c, true, true);
    assert_eq!((wc.src_qp, wc.pkey), (1, Some(0xffff)));
}

#[test]
fn roce_drops_and_gid_table_limits() {
    let mut w = roce_world(3);
    // Instance 2 is InfiniBand but knows MAC 9: no RoCE port has it.
    w.hca(2).set_link_roce(false);
    w.hca(2)
        .set_gid(0, Some(gid_entry(link_local(9), false, mac(9))))
        .unwrap();
    let e = gid_entry(link_local(1), true, mac(1));
    assert_eq!(
        w.hca(0).set_gid(GID_TABLE_LEN as u8, Some(e)),
        Err(Error::Invalid)
    );
    assert_eq!(
        w.hca(0).gid(2),
        Some(gid_entry(mapped(ip(0)), true, mac(1)))
    );
    let mut a = side(&mut w, 0, QpService::Ud, QKEY, true);
    let mut b = side(&mut w, 1, QpService::Ud, QKEY, true);
    recv(&mut w, &mut b, 0, 200);
    let good = roce_av(mac(2), b.qp.qpn, QKEY, 1, link_local(2));
    // An unknown MAC, an InfiniBand port's, an LID (RoCE ignores it), and
    // a source GID index without an entry.
    let cases = [
        DatagramSeg {
            rmac: mac(7),
            ..good
        },
        DatagramSeg {
            rmac: mac(9),
            ..good
        },
        DatagramSeg {
            rmac: [0; 6],
            rlid: lid_of_index(1),
            ..good
        },
        with_grh(good, 5, link_local(2), 0, 64, 0),
    ];
    for av in cases {
        send(&mut w, &mut a, av, b"nowhere", None);
        assert!(poll_raw(&mut w, &mut a.cq).is_some());
    }
    let st = *w.hca(0).stats();
    assert_eq!((st.ud_drop_no_dest, st.ud_drop_bad_sgid), (3, 1));
    assert!(poll_raw(&mut w, &mut b.cq).is_none());
    // A cleared GID entry takes its MAC with it.
    w.hca(1).set_gid(0, None).unwrap();
    w.hca(1).set_gid(1, None).unwrap();
    w.hca(1).set_gid(2, None).unwrap();
    send(&mut w, &mut a, good, b"gone", None);
    assert_eq!(w.hca(0).stats().ud_drop_no_dest, 4);
    // Without the GRH bit a RoCE datagram still carries its header.
    w.hca(1)
        .set_gid(0, Some(gid_entry(link_local(2), false, mac(2))))
        .unwrap();
    let no_grh_bit = DatagramSeg {
        grh_gid_fl: good.grh_gid_fl & !DatagramSeg::GRH,
        ..good
    };
    send(&mut w, &mut a, no_grh_bit, b"still", None);
    let c = Cqe64::decode(&poll_raw(&mut w, &mut b.cq).unwrap()).unwrap();
    assert_eq!((c.grh, c.roce_l3_header_type(), c.byte_cnt), (1, 1, 45));
}
