// SPDX-License-Identifier: GPL-2.0

//! Random datagrams across three instances with random link layers, MTUs
//! and GID tables: random address vectors (LIDs, MACs, QPNs, Q_Keys, GRH
//! bits, GID indexes), payload lengths around the MTU, receive buffers
//! around what the datagram needs, receives posted or not. After every
//! datagram the model must have touched no memory outside registered
//! regions (the guarded memory panics), the send must have completed
//! (successfully, or with LOCAL_LENGTH exactly when the payload exceeds
//! the sender's MTU), at most one receive must have completed, and a
//! datagram that completed no receive must be in exactly one drop counter.

use hca_model::fabric::lid_of_index;
use hca_model::qp::QpService;
use mlx5_prm::cqe::{Cqe64, ErrCqe};
use mlx5_prm::opcode::{CqeOpcode, CqeSyndrome};
use mlx5_prm::wqe::DatagramSeg;

use super::harness::*;
use super::ud_setup::*;

const INSTANCES: usize = 3;
const QKEYS: [u32; 3] = [0x11, 0x22, QP1_QKEY];

/// One datagram QP of the test and what is posted to it.
struct Q {
    h: usize,
    service: QpService,
    qkey: u32,
    s: Side,
    /// Receives posted and not completed: length and buffer offset.
    posted: Vec<(u32, u64)>,
    /// Receives posted so far (their buffer slots go round).
    posts: u64,
}

/// Bytes between receive buffers, and how many there are: with at most
/// `MAX_POSTED` outstanding, consumed in order, a slot comes round again
/// only after its receive completed.
const SLOT: u64 = 4160;
const SLOTS: u64 = 6;
/// Where a sender stages its payload: after the receive slots.
const SEND_OFF: u64 = SLOTS * SLOT;
const MAX_POSTED: usize = 4;

fn new_q(w: &mut World, h: usize, service: QpService, qkey: u32) -> Q {
    let s = side(w, h, service, qkey, true);
    Q {
        h,
        service,
        qkey,
        s,
        posted: Vec::new(),
        posts: 0,
    }
}

/// Replaces `q`'s QP (in ERR, its CQEs polled) by a new one on the same
/// PD, CQ and buffer; the old one goes first (an instance has one GSI QP).
fn replace(w: &mut World, q: &mut Q) {
    w.hca(q.h).destroy_qp(q.s.qp.qpn).unwrap();
    let caps = QpCaps::default();
    let s = &mut q.s;
    s.qp = w.qp_of(q.h, s.pd, &s.cq, &s.cq, caps, q.service).unwrap();
    to_rts(w, &s.qp, q.service, q.qkey);
    q.posted.clear();
}

/// The sum of the drop counters of every instance.
fn drops(w: &mut World) -> u64 {
    (0..INSTANCES)
        .map(|h| {
            let s = *w.hca(h).stats();
            s.ud_drop_no_dest
                + s.ud_drop_bad_sgid
                + s.ud_drop_bad_qpn
                + s.ud_drop_qkey
                + s.ud_drop_no_recv
        })
        .sum()
}

/// A random address vector, aimed (mostly) at a QP on a port of the
/// sender's link layer (`roce` per instance, `from` the sender's).
fn random_av(rng: &mut Rng, qs: &[Q], roce: &[bool], from: usize) -> DatagramSeg {
    let mut t = &qs[rng.below(qs.len() as u64) as usize];
    for _ in 0..4 {
        if roce[t.h] == roce[from] {
            break;
        }
        t = &qs[rng.below(qs.len() as u64) as usize];
    }
    let dqpn = match rng.below(10) {
        0 => 1,
        1 => rng.next() as u32 & 0xff_ffff,
        _ if t.service == QpService::Gsi => 1,
        _ => t.s.qp.qpn,
    };
    let qkey = match rng.below(6) {
        0 => rng.next() as u32,
        1 => QKEYS[rng.below(3) as usize],
        _ => t.qkey,
    };
    let rlid = match rng.below(8) {
        0 => rng.next() as u16,
        1 => lid_of_index(INSTANCES as u16),
        _ => lid_of_index(t.h as u16),
    };
    let rmac = if rng.chance(1, 8) {
        mac(rng.below(8) as u8)
    } else {
        mac(t.h as u8 + 1)
    };
    let mut av = DatagramSeg {
        qkey,
        ext: rng.chance(1, 2),
        dqpn,
        stat_rate_sl: rng.next() as u8,
        rlid,
        rmac,
        ..DatagramSeg::default()
    };
    let gid = if rng.chance(1, 2) {
        link_local(t.h as u8 + 1)
    } else {
        mapped([10, 0, 0, t.h as u8 + 1])
    };
    av = with_grh(
        av,
        if rng.chance(1, 10) {
            4
        } else {
            rng.below(2) as u8
        },
        gid,
        rng.next() as u8,
        rng.next() as u8,
        rng.next() as u32 & 0xf_ffff,
    );
    if rng.chance(1, 2) {
        av.grh_gid_fl &= !DatagramSeg::GRH;
    }
    av
}

fn setup(rng: &mut Rng) -> (World, Vec<Q>) {
    let mut w = World::new(INSTANCES);
    for h in 0..INSTANCES {
        let roce = match h {
            0 => false,
            1 => true,
            _ => rng.chance(1, 2),
        };
        let hca = w.hca(h);
        hca.set_link_roce(roce);
        hca.set_port_mtu(1 + rng.below(5) as u8);
        for index in 0..4u8 {
            let e = match rng.below(8) {
                0 => None,
                1 | 2 => Some(gid_entry(link_local(h as u8 + 1), false, mac(h as u8 + 1))),
                3 | 4 => Some(gid_entry(link_local(h as u8 + 1), true, mac(h as u8 + 1))),
                _ => Some(gid_entry(
                    mapped([10, 0, 0, h as u8 + 1]),
                    true,
                    mac(h as u8 + 1),
                )),
            };
            hca.set_gid(index, e).unwrap();
        }
    }
    let mut qs = Vec::new();
    for h in 0..INSTANCES {
        qs.push(new_q(&mut w, h, QpService::Ud, QKEYS[0]));
        qs.push(new_q(&mut w, h, QpService::Ud, QKEYS[1]));
        qs.push(new_q(&mut w, h, QpService::Gsi, QP1_QKEY));
    }
    (w, qs)
}

/// Checks a successful receive of `len` bytes on `q` (CQE `c`): the byte
/// count, the buffer it took, the header area for the port's kind.
fn check_receive(w: &mut World, q: &mut Q, c: &Cqe64, len: u32) {
    let (posted, off) = q.posted.remove(0);
    assert_eq!(c.byte_cnt, 40 + len);
    assert!(posted >= 40 + len);
    let roce = w.hca(q.h).port().is_roce();
    let h = w.read(q.s.buf + off, 40);
    match (roce, c.grh) {
        (false, 0) => assert_eq!(h, vec![0xcc; 40]),
        (true, 1) if c.roce_l3_header_type() == 2 => assert_eq!(kernel_header_version(&h), 4),
        (_, 1) => assert_eq!(kernel_header_version(&h), 6),
        other => panic!("GRH bits {other:?}"),
    }
}

/// Every CQE of every QP: (QP, opcode, syndrome or 0, bytes).
fn all_cqes(w: &mut World, qs: &mut [Q]) -> Vec<(usize, CqeOpcode, u8, [u8; 64])> {
    let mut v = Vec::new();
    for (i, q) in qs.iter_mut().enumerate() {
        while let Some(raw) = poll_raw(w, &mut q.s.cq) {
            let op = CqeOpcode::try_from(raw[63] >> 4).unwrap();
            let syndrome = if op.is_error() {
                ErrCqe::decode(&raw).unwrap().syndrome
            } else {
                0
            };
            v.push((i, op, syndrome, raw));
        }
    }
    v
}

#[test]
fn random_datagrams_keep_the_books() {
    let mut rng = Rng(seed(0x0d47_a6ea));
    let (mut w, mut qs) = setup(&mut rng);
    let (mut delivered, mut dropped, mut too_long, mut too_short) = (0u64, 0u64, 0u64, 0u64);
    let length = u8::from(CqeSyndrome::LocalLength);
    for _ in 0..600 * scale() {
        for q in qs.iter_mut() {
            if q.posted.is_empty() || (q.posted.len() < MAX_POSTED && rng.chance(1, 3)) {
                // (A byte count of 0 would mean 2 GiB, as on mlx5.)
                let len = match rng.below(8) {
                    0 => 1 + rng.below(64) as u32,
                    _ => 40 + 4096,
                };
                let off = q.posts % SLOTS * SLOT;
                q.posts += 1;
                recv(&mut w, &mut q.s, off, len);
                q.posted.push((len, off));
            }
        }
        let from = rng.below(qs.len() as u64) as usize;
        let roce: Vec<bool> = (0..INSTANCES).map(|h| w.hca(h).port().is_roce()).collect();
        let av = random_av(&mut rng, &qs, &roce, qs[from].h);
        let mtu = w.hca(qs[from].h).port().mtu_bytes();
        let len = match rng.below(10) {
            0 => mtu + 1 + rng.below(64) as u32,
            _ => rng.below(u64::from(mtu) + 1) as u32,
        };
        let data = rng.bytes(len as usize);
        let imm = rng.chance(1, 4).then(|| rng.next() as u32);
        let before = drops(&mut w);
        let s = &mut qs[from].s;
        w.fill(s.buf + SEND_OFF, &data);
        let sges = if len == 0 {
            Vec::new()
        } else {
            vec![s.sge(SEND_OFF, len)]
        };
        let mut wr = Wr::new(1, imm.map_or(WrOp::Send, WrOp::SendImm), &sges);
        wr.av = Some(av);
        w.post_send(&mut s.qp, &wr).unwrap();
        let cqes = all_cqes(&mut w, &mut qs);
        let sends: Vec<_> = cqes
            .iter()
            .filter(|c| matches!(c.1, CqeOpcode::Req | CqeOpcode::ReqErr))
            .collect();
        assert_eq!(sends.len(), 1, "one send completion");
        let (qi, op, syndrome, raw) = *sends[0];
        assert_eq!(qi, from);
        let mut received = 0;
        if len > mtu {
            assert_eq!((op, syndrome), (CqeOpcode::ReqErr, length));
            too_long += 1;
        } else {
            let c = Cqe64::decode(&raw).unwrap();
            assert_eq!((op, c.byte_cnt), (CqeOpcode::Req, len));
            for &(qi, op, syndrome, raw) in &cqes {
                match (op, syndrome) {
                    (CqeOpcode::RespSend | CqeOpcode::RespSendImm, _) => {
                        let c = Cqe64::decode(&raw).unwrap();
                        check_receive(&mut w, &mut qs[qi], &c, len);
                        if op == CqeOpcode::RespSendImm {
                            assert_eq!(Some(c.imm_inval_rkey), imm);
                        }
                        received += 1;
                    }
                    (CqeOpcode::RespErr, s) if s == length => {
                        assert!(qs[qi].posted.remove(0).0 < 40 + len);
                        too_short += 1;
                        received += 1;
                    }
                    _ => {}
                }
            }
        }
        let counted = drops(&mut w) - before;
        if len > mtu {
            assert_eq!((received, counted), (0, 0));
        } else {
            assert!(received + counted == 1, "{received} + {counted}");
        }
        delivered += received;
        dropped += counted;
        // QPs that went to ERR (flushed above) are replaced.
        for q in qs.iter_mut() {
            if w.state(&q.s.qp) == hca_model::qp::QpState::Err {
                replace(&mut w, q);
            }
        }
    }
    println!(
        "{delivered} received ({too_short} too short), {dropped} dropped, {too_long} over the MTU"
    );
    assert!(delivered > 100 && dropped > 150 && too_long > 20 && too_short > 5);
    assert!(w.mem.violations.is_empty());
}
