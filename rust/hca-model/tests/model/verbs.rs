// SPDX-License-Identifier: GPL-2.0

//! Every verb's success path, with data checks.

use hca_model::fabric::lid_of_index;
use hca_model::mr::Access;
use hca_model::qp::{ConnAttrs, RemoteQp};
use mlx5_prm::opcode::{CqeOpcode, SendOpcode};

use super::harness::*;

/// Two instances, one PD each, a CQ pair and a connected QP pair, plus a
/// buffer and MR on each side.
pub struct Pair {
    pub w: World,
    pub a: TestQp,
    pub b: TestQp,
    pub acq: TestCq,
    pub bcq: TestCq,
    pub abuf: u64,
    pub bbuf: u64,
    pub akey: u32,
    pub bkey: u32,
}

pub const BUF: u64 = 1 << 16;

impl Pair {
    /// QPs on instances 0 and 1 (or both on `same` instance).
    pub fn new(same: bool) -> Pair {
        Self::with_caps(same, QpCaps::default())
    }

    pub fn with_caps(same: bool, caps: QpCaps) -> Pair {
        let mut w = World::new(2);
        let hb = if same { 0 } else { 1 };
        let pa = w.pd(0);
        let pb = if same { pa } else { w.pd(hb) };
        let acq = w.cq(0, 8);
        let bcq = w.cq(hb, 8);
        let a = w.qp(0, pa, &acq, &acq, caps);
        let b = w.qp(hb, pb, &bcq, &bcq, caps);
        w.connect(&a, &b);
        let abuf = w.buffer(BUF);
        let bbuf = w.buffer(BUF);
        let akey = w.mr(0, pa, abuf, BUF, Access::ALL);
        let bkey = w.mr(hb, pb, bbuf, BUF, Access::ALL);
        Pair {
            w,
            a,
            b,
            acq,
            bcq,
            abuf,
            bbuf,
            akey,
            bkey,
        }
    }

    pub fn asge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: self.abuf + off,
            len,
            lkey: self.akey,
        }
    }

    pub fn bsge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: self.bbuf + off,
            len,
            lkey: self.bkey,
        }
    }

    /// Posts a receive on B.
    pub fn recv_b(&mut self, id: u64, sges: &[Sge]) {
        self.w.post_recv(&mut self.b, id, sges);
    }

    /// Posts a receive on A.
    pub fn recv_a(&mut self, id: u64, sges: &[Sge]) {
        self.w.post_recv(&mut self.a, id, sges);
    }

    /// Posts a send work request on A.
    pub fn send_a(&mut self, wr: &Wr) -> Result<(), hca_model::doorbell::DoorbellError> {
        self.w.post_send(&mut self.a, wr)
    }

    /// Posts a list on A with one doorbell.
    pub fn send_list_a(
        &mut self,
        wrs: &[Wr],
        how: Ring,
    ) -> Result<(), hca_model::doorbell::DoorbellError> {
        self.w.post_send_list(&mut self.a, wrs, how)
    }

    /// Completions on A's CQ.
    pub fn apoll(&mut self) -> Vec<Wc> {
        self.w.poll_all(&mut self.acq, &[&self.a])
    }

    /// Completions on B's CQ.
    pub fn bpoll(&mut self) -> Vec<Wc> {
        self.w.poll_all(&mut self.bcq, &[&self.b])
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn send_recv_across_instances() {
    for same in [false, true] {
        let mut p = Pair::new(same);
        let data = pattern(100, 7);
        p.w.fill(p.abuf, &data);
        let r = p.bsge(0x100, 200);
        p.recv_b(77, &[r]);
        let s = p.asge(0, 100);
        p.send_a(&Wr::new(11, WrOp::Send, &[s])).unwrap();
        let rc = p.bpoll();
        assert_eq!(rc.len(), 1);
        assert_eq!(rc[0].wr_id, 77);
        assert_eq!(rc[0].opcode, CqeOpcode::RespSend);
        assert_eq!(rc[0].byte_len, 100);
        assert_eq!(rc[0].qpn, p.b.qpn);
        let sc = p.apoll();
        assert_eq!(sc.len(), 1);
        assert_eq!(sc[0].wr_id, 11);
        assert_eq!(sc[0].opcode, CqeOpcode::Req);
        assert_eq!(sc[0].send_opcode, u8::from(SendOpcode::Send));
        assert_eq!(p.w.read(p.bbuf + 0x100, 100), data);
        assert!(p.w.mem.violations.is_empty());
    }
}

/// A responder CQE names the packet's source the way an mlx5 HCA does on
/// an InfiniBand port: source QPN and SL in `flags_rqpn`, the sender's LID
/// in `slid`; requester CQEs leave them zero.
#[test]
fn responder_cqe_names_the_sender() {
    let mut w = World::new(3);
    let (pa, pb) = (w.pd(2), w.pd(1));
    let (mut acq, mut bcq) = (w.cq(2, 6), w.cq(1, 6));
    let a = w.qp(2, pa, &acq, &acq, QpCaps::default());
    let mut b = w.qp(1, pb, &bcq, &bcq, QpCaps::default());
    let (da, db) = (
        RemoteQp { hca: 1, qpn: b.qpn },
        RemoteQp { hca: 2, qpn: a.qpn },
    );
    w.to_rts_with(
        &a,
        da,
        ConnAttrs {
            sl: 9,
            ..rts_attrs(da)
        },
    );
    w.to_rts_with(
        &b,
        db,
        ConnAttrs {
            sl: 3,
            ..rts_attrs(db)
        },
    );
    let (abuf, bbuf) = (w.buffer(4096), w.buffer(4096));
    let akey = w.mr(2, pa, abuf, 4096, Access::ALL);
    let bkey = w.mr(1, pb, bbuf, 4096, Access::ALL);
    let mut a = a;
    for (id, op) in [(1, WrOp::Send), (2, WrOp::SendImm(7))] {
        w.post_recv(
            &mut b,
            id,
            &[Sge {
                addr: bbuf,
                len: 64,
                lkey: bkey,
            }],
        );
        w.post_send(
            &mut a,
            &Wr::new(
                id,
                op,
                &[Sge {
                    addr: abuf,
                    len: 8,
                    lkey: akey,
                }],
            ),
        )
        .unwrap();
    }
    let op = WrOp::WriteImm {
        raddr: bbuf + 128,
        rkey: bkey,
        imm: 8,
    };
    let wr = Wr::new(
        3,
        op,
        &[Sge {
            addr: abuf,
            len: 8,
            lkey: akey,
        }],
    );
    w.post_recv(&mut b, 3, &[]);
    w.post_send(&mut a, &wr).unwrap();
    let rc = w.poll_all(&mut bcq, &[&b]);
    assert_eq!(rc.len(), 3);
    for c in &rc {
        // Instance 2's port has LID 3; A's path SL is 9.
        assert_eq!(
            (c.src_qpn, c.slid, c.sl),
            (a.qpn, lid_of_index(2), 9),
            "{c:?}"
        );
        assert_eq!(c.slid, 3);
    }
    let sc = w.poll_all(&mut acq, &[&a]);
    assert_eq!(sc.len(), 3);
    assert!(sc.iter().all(|c| (c.src_qpn, c.slid, c.sl) == (0, 0, 0)));
}

#[test]
fn send_to_itself() {
    let mut w = World::new(1);
    let pd = w.pd(0);
    let mut cq = w.cq(0, 6);
    let mut q = w.qp(0, pd, &cq, &cq, QpCaps::default());
    w.connect(&q, &q);
    let buf = w.buffer(4096);
    let key = w.mr(0, pd, buf, 4096, Access::ALL);
    w.fill(buf, b"loopback");
    w.post_recv(
        &mut q,
        5,
        &[Sge {
            addr: buf + 1024,
            len: 64,
            lkey: key,
        }],
    );
    w.post_send(
        &mut q,
        &Wr::new(
            6,
            WrOp::SendImm(0xabcd),
            &[Sge {
                addr: buf,
                len: 8,
                lkey: key,
            }],
        ),
    )
    .unwrap();
    let wcs = w.poll_all(&mut cq, &[&q]);
    assert_eq!(wcs.len(), 2);
    // The responder completes first, as its ACK precedes the requester's CQE.
    assert_eq!(
        (wcs[0].wr_id, wcs[0].opcode, wcs[0].imm),
        (5, CqeOpcode::RespSendImm, 0xabcd)
    );
    assert_eq!((wcs[1].wr_id, wcs[1].opcode), (6, CqeOpcode::Req));
    assert_eq!(w.read(buf + 1024, 8), b"loopback");
}

#[test]
fn send_imm_and_solicited() {
    let mut p = Pair::new(false);
    p.recv_b(1, &[p.bsge(0, 64)]);
    p.recv_b(2, &[p.bsge(64, 64)]);
    let mut wr = Wr::new(3, WrOp::SendImm(0x1234_5678), &[p.asge(0, 16)]);
    wr.solicited = true;
    p.send_a(&wr).unwrap();
    p.send_a(&Wr::new(4, WrOp::Send, &[p.asge(0, 16)])).unwrap();
    let rc = p.bpoll();
    assert_eq!(rc.len(), 2);
    assert_eq!(rc[0].opcode, CqeOpcode::RespSendImm);
    assert_eq!(rc[0].imm, 0x1234_5678);
    assert!(rc[0].solicited);
    assert_eq!(rc[1].opcode, CqeOpcode::RespSend);
    assert!(!rc[1].solicited);
    assert_eq!(
        p.apoll().iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        [3, 4]
    );
}

#[test]
fn rdma_write_and_write_imm() {
    let mut p = Pair::new(false);
    let data = pattern(3000, 1);
    p.w.fill(p.abuf, &data);
    let wr = Wr::new(
        1,
        WrOp::Write {
            raddr: p.bbuf + 500,
            rkey: p.bkey,
        },
        &[p.asge(0, 3000)],
    );
    p.send_a(&wr).unwrap();
    assert_eq!(p.w.read(p.bbuf + 500, 3000), data);
    assert!(p.bpoll().is_empty(), "a plain write consumes no receive");
    let sc = p.apoll();
    assert_eq!((sc[0].wr_id, sc[0].byte_len), (1, 3000));

    // WRITE_IMM consumes a (zero-segment) receive.
    p.recv_b(9, &[]);
    let wr = Wr::new(
        2,
        WrOp::WriteImm {
            raddr: p.bbuf,
            rkey: p.bkey,
            imm: 42,
        },
        &[p.asge(10, 20)],
    );
    p.send_a(&wr).unwrap();
    let rc = p.bpoll();
    assert_eq!(rc.len(), 1);
    assert_eq!(
        (rc[0].wr_id, rc[0].opcode, rc[0].imm, rc[0].byte_len),
        (9, CqeOpcode::RespWrImm, 42, 20)
    );
    assert_eq!(p.w.read(p.bbuf, 20), data[10..30]);
    assert_eq!(p.apoll().len(), 1);
}

/// `Stats::requests` counts what reached an instance as a responder: a
/// one-way stream of WRITEs and READs leaves the requester's count alone
/// (a READ's data is a response, not a request), and a reply raises it.
#[test]
fn requests_are_counted_by_the_responder() {
    let mut p = Pair::new(false);
    for id in 0..3 {
        let op = if id == 1 {
            WrOp::Read {
                raddr: p.bbuf,
                rkey: p.bkey,
            }
        } else {
            WrOp::Write {
                raddr: p.bbuf,
                rkey: p.bkey,
            }
        };
        p.send_a(&Wr::new(id, op, &[p.asge(0, 64)])).unwrap();
        assert_eq!(p.apoll().len(), 1);
    }
    assert_eq!(p.w.hca(0).stats().requests, 0);
    assert_eq!(p.w.hca(1).stats().requests, 3);

    // The other way: B writes back to A, as a ping-pong's reply does.
    let wr = Wr::new(
        7,
        WrOp::Write {
            raddr: p.abuf,
            rkey: p.akey,
        },
        &[p.bsge(0, 64)],
    );
    p.w.post_send(&mut p.b, &wr).unwrap();
    assert_eq!(p.bpoll().len(), 1);
    assert_eq!(p.w.hca(0).stats().requests, 1);
    assert_eq!(p.w.hca(1).stats().requests, 3);
}

#[test]
fn rdma_read() {
    let mut p = Pair::new(false);
    let data = pattern(5000, 3);
    p.w.fill(p.bbuf + 100, &data);
    let wr = Wr::new(
        1,
        WrOp::Read {
            raddr: p.bbuf + 100,
            rkey: p.bkey,
        },
        &[p.asge(0, 1000), p.asge(2000, 4000)],
    );
    p.send_a(&wr).unwrap();
    let sc = p.apoll();
    assert_eq!(sc.len(), 1);
    assert!(sc[0].ok());
    assert_eq!(sc[0].byte_len, 5000);
    assert_eq!(sc[0].send_opcode, u8::from(SendOpcode::RdmaRead));
    assert_eq!(p.w.read(p.abuf, 1000), data[..1000]);
    assert_eq!(p.w.read(p.abuf + 2000, 4000), data[1000..]);
}

#[test]
fn atomics_return_the_original_value_in_host_order() {
    let mut p = Pair::new(false);
    let target = p.bbuf + 64;
    let result = p.asge(8, 8);
    let val = |p: &Pair, a: u64| u64::from_ne_bytes(p.w.read(a, 8).try_into().unwrap());
    p.w.fill(target, &100u64.to_ne_bytes());

    let faa = WrOp::Faa {
        raddr: target,
        rkey: p.bkey,
        add: 5,
    };
    p.send_a(&Wr::new(1, faa, &[result])).unwrap();
    assert_eq!(val(&p, target), 105);
    assert_eq!(val(&p, p.abuf + 8), 100);

    let cas_miss = WrOp::Cas {
        raddr: target,
        rkey: p.bkey,
        compare: 1,
        swap: 7,
    };
    p.send_a(&Wr::new(2, cas_miss, &[result])).unwrap();
    assert_eq!((val(&p, target), val(&p, p.abuf + 8)), (105, 105));

    let cas_hit = WrOp::Cas {
        raddr: target,
        rkey: p.bkey,
        compare: 105,
        swap: 7,
    };
    p.send_a(&Wr::new(3, cas_hit, &[result])).unwrap();
    assert_eq!((val(&p, target), val(&p, p.abuf + 8)), (7, 105));

    let mcas = WrOp::MaskedCas {
        raddr: target,
        rkey: p.bkey,
        compare: 0x07,
        compare_mask: 0xff,
        swap: 0xaa00,
        swap_mask: 0xff00,
    };
    p.send_a(&Wr::new(4, mcas, &[result])).unwrap();
    assert_eq!((val(&p, target), val(&p, p.abuf + 8)), (0xaa07, 7));

    p.w.fill(target, &0x0000_0001_ffff_ffffu64.to_ne_bytes());
    let mfaa = WrOp::MaskedFaa {
        raddr: target,
        rkey: p.bkey,
        add: 0x1_0000_0001,
        boundary: 0x8000_0000_8000_0000,
    };
    p.send_a(&Wr::new(5, mfaa, &[result])).unwrap();
    assert_eq!(
        (val(&p, target), val(&p, p.abuf + 8)),
        (0x2_0000_0000, 0x1_ffff_ffff)
    );

    let wcs = p.apoll();
    assert_eq!(
        wcs.iter()
            .map(|w| (w.wr_id, w.byte_len, w.ok()))
            .collect::<Vec<_>>(),
        [
            (1, 8, true),
            (2, 8, true),
            (3, 8, true),
            (4, 8, true),
            (5, 8, true)
        ]
    );
}

#[test]
fn inline_send_and_write() {
    let mut p = Pair::new(false);
    let data = pattern(200, 9);
    p.recv_b(1, &[p.bsge(0, 256)]);
    let mut wr = Wr::new(2, WrOp::Send, &[]);
    wr.inline = Some(data.clone());
    p.send_a(&wr).unwrap();
    assert_eq!(p.w.read(p.bbuf, 200), data);
    assert_eq!(p.bpoll()[0].byte_len, 200);
    let mut wr = Wr::new(
        3,
        WrOp::Write {
            raddr: p.bbuf + 1000,
            rkey: p.bkey,
        },
        &[],
    );
    wr.inline = Some(data[..33].to_vec());
    p.send_a(&wr).unwrap();
    assert_eq!(p.w.read(p.bbuf + 1000, 33), data[..33]);
    assert_eq!(p.apoll().len(), 2);
}

#[test]
fn scatter_gather_lists() {
    let mut p = Pair::new(false);
    let data = pattern(700, 5);
    p.w.fill(p.abuf, &data);
    let recv = [
        p.bsge(0, 100),
        p.bsge(1000, 50),
        p.bsge(2000, 300),
        p.bsge(3000, 400),
    ];
    p.recv_b(1, &recv);
    let send = [p.asge(0, 250), p.asge(250, 1), p.asge(251, 449)];
    p.send_a(&Wr::new(2, WrOp::Send, &send)).unwrap();
    let mut got = p.w.read(p.bbuf, 100);
    got.extend(p.w.read(p.bbuf + 1000, 50));
    got.extend(p.w.read(p.bbuf + 2000, 300));
    got.extend(p.w.read(p.bbuf + 3000, 250));
    assert_eq!(got, data);
    // Bytes past the message are untouched.
    assert_eq!(p.w.read(p.bbuf + 3250, 150), vec![0; 150]);
    assert_eq!(p.bpoll()[0].byte_len, 700);
}

#[test]
fn zero_length_messages() {
    let mut p = Pair::new(false);
    // A zero-length send with no SGE lands in a zero-segment receive.
    p.recv_b(1, &[]);
    p.send_a(&Wr::new(2, WrOp::Send, &[])).unwrap();
    let rc = p.bpoll();
    assert_eq!((rc[0].wr_id, rc[0].byte_len, rc[0].ok()), (1, 0, true));
    // Zero-length RDMA checks no rkey.
    p.send_a(&Wr::new(
        3,
        WrOp::Write {
            raddr: 0,
            rkey: 0xdead_be00,
        },
        &[],
    ))
    .unwrap();
    p.send_a(&Wr::new(4, WrOp::Read { raddr: 0, rkey: 0 }, &[]))
        .unwrap();
    let sc = p.apoll();
    assert_eq!(
        sc.iter()
            .map(|w| (w.wr_id, w.ok(), w.byte_len))
            .collect::<Vec<_>>(),
        [(2, true, 0), (3, true, 0), (4, true, 0)]
    );
}

#[test]
fn unsignaled_work_requests_complete_silently() {
    let mut p = Pair::new(false);
    let mut wrs = Vec::new();
    for i in 0..10u64 {
        let mut wr = Wr::new(
            i,
            WrOp::Write {
                raddr: p.bbuf + i * 8,
                rkey: p.bkey,
            },
            &[p.asge(i * 8, 8)],
        );
        wr.signaled = i % 4 == 3;
        wrs.push(wr);
    }
    p.send_list_a(&wrs, Ring::Plain).unwrap();
    assert_eq!(
        p.apoll().iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        [3, 7]
    );
    assert_eq!(p.w.hca(0).stats().wqes_executed, 10);
}

#[test]
fn nop_fence_and_blueflame() {
    let mut p = Pair::new(false);
    p.send_list_a(&[Wr::new(1, WrOp::Nop, &[])], Ring::BlueFlame)
        .unwrap();
    p.w.fill(p.bbuf, b"fenced!!");
    let read = Wr::new(
        2,
        WrOp::Read {
            raddr: p.bbuf,
            rkey: p.bkey,
        },
        &[p.asge(0, 8)],
    );
    // The fenced write sends what the read fetched.
    let mut write = Wr::new(
        3,
        WrOp::Write {
            raddr: p.bbuf + 100,
            rkey: p.bkey,
        },
        &[p.asge(0, 8)],
    );
    write.fence = true;
    p.send_list_a(&[read, write], Ring::Plain).unwrap();
    assert_eq!(p.w.read(p.bbuf + 100, 8), b"fenced!!");
    // A multi-WQEBB WQE by BlueFlame.
    let mut big = Wr::new(
        4,
        WrOp::Write {
            raddr: p.bbuf + 200,
            rkey: p.bkey,
        },
        &[],
    );
    big.inline = Some(pattern(150, 2));
    p.send_list_a(&[big], Ring::BlueFlame).unwrap();
    assert_eq!(p.w.read(p.bbuf + 200, 150), pattern(150, 2));
    assert_eq!(
        p.apoll()
            .iter()
            .map(|w| (w.wr_id, w.ok()))
            .collect::<Vec<_>>(),
        [(1, true), (2, true), (3, true), (4, true)]
    );
    assert_eq!(p.w.hca(0).stats().doorbell_errors, 0);
}

#[test]
fn mr_translates_iova_to_dma() {
    let mut p = Pair::new(false);
    let dma = p.w.buffer(4096);
    let pd = p.w.hca(1).query_qp(p.b.qpn).unwrap();
    let _ = pd;
    let key =
        p.w.hca(1)
            .create_mr(&hca_model::mr::MrAttr {
                pdn: 0,
                iova: 0x7000_0000,
                length: 4096,
                dma_addr: dma,
                access: Access::ALL,
            })
            .unwrap();
    p.w.mem.add_mr(dma, 4096, 1, key);
    p.w.fill(p.abuf, b"translated");
    let wr = Wr::new(
        1,
        WrOp::Write {
            raddr: 0x7000_0010,
            rkey: key,
        },
        &[p.asge(0, 10)],
    );
    p.send_a(&wr).unwrap();
    assert_eq!(p.w.read(dma + 0x10, 10), b"translated");
}

#[test]
fn work_posted_before_rts_runs_at_rts() {
    let mut w = World::new(2);
    let (pa, pb) = (w.pd(0), w.pd(1));
    let mut acq = w.cq(0, 4);
    let bcq = w.cq(1, 4);
    let mut a = w.qp(0, pa, &acq, &acq, QpCaps::default());
    let b = w.qp(1, pb, &bcq, &bcq, QpCaps::default());
    let buf = w.buffer(64);
    let key = w.mr(0, pa, buf, 64, Access::ALL);
    let bbuf = w.buffer(64);
    let bkey = w.mr(1, pb, bbuf, 64, Access::ALL);
    w.fill(buf, b"early");
    let init = hca_model::qp_modify::AttrMask::PKEY_INDEX
        .or(hca_model::qp_modify::AttrMask::PORT)
        .or(hca_model::qp_modify::AttrMask::ACCESS_FLAGS);
    let attrs = rts_attrs(hca_model::qp::RemoteQp { hca: 1, qpn: b.qpn });
    w.modify(&a, hca_model::qp::QpState::Init, init, attrs)
        .unwrap();
    let wr = Wr::new(
        1,
        WrOp::Write {
            raddr: bbuf,
            rkey: bkey,
        },
        &[Sge {
            addr: buf,
            len: 5,
            lkey: key,
        }],
    );
    w.post_send(&mut a, &wr).unwrap();
    assert!(w.poll_all(&mut acq, &[&a]).is_empty());
    w.modify(
        &a,
        hca_model::qp::QpState::Reset,
        hca_model::qp_modify::AttrMask(0),
        attrs,
    )
    .unwrap();
    // RESET dropped it; post again and connect.
    a.cur_post = 0;
    w.fill(a.dbr, &[0; 8]);
    assert_eq!(
        w.post_send(&mut a, &wr),
        Err(hca_model::doorbell::DoorbellError::NotAccepting)
    );
    a.cur_post = 0;
    w.connect(&a, &b);
    w.post_send(&mut a, &wr).unwrap();
    assert_eq!(w.read(bbuf, 5), b"early");
    assert_eq!(w.poll_all(&mut acq, &[&a]).len(), 1);
}
