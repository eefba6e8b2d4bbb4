// SPDX-License-Identifier: GPL-2.0

//! Hostile input: random and corrupted WQEs, receive WQEs, doorbell records,
//! UAR doorbells, modify-QP requests and CQ/EQ doorbells. The model must
//! never panic and never touch memory outside a registered MR (the test
//! memory panics on any such access), and what it writes must be valid
//! CQEs and EQEs.

use hca_model::mr::Access;
use hca_model::qp::{ConnAttrs, QpState, RemoteQp};
use hca_model::qp_modify::AttrMask;
use mlx5_prm::cqe::{Cqe64, ErrCqe, CQE_SIZE, OP_OWN_OFFSET};
use mlx5_prm::doorbell::{counter_word, set_ci_word};
use mlx5_prm::eqe::{Eqe, EQE_SIZE, OWNER_OFFSET};
use mlx5_prm::opcode::CqeOpcode;
use mlx5_prm::ring;

use super::harness::*;

/// Consumes every CQE the model wrote, checking it decodes.
fn drain(w: &mut World, cq: &mut TestCq) -> usize {
    let mut n = 0;
    loop {
        let addr = cq.buf + ring::ring_index(cq.ci, cq.log) as u64 * CQE_SIZE as u64;
        let op_own = w.read(addr + OP_OWN_OFFSET as u64, 1)[0];
        if !ring::cqe_sw_owned(op_own, cq.ci, cq.log) {
            break;
        }
        let bytes: [u8; CQE_SIZE] = w.read(addr, CQE_SIZE).try_into().unwrap();
        let op = CqeOpcode::try_from(op_own >> 4).expect("model wrote a bad CQE opcode");
        if op.is_error() {
            let e = ErrCqe::decode(&bytes).unwrap();
            mlx5_prm::opcode::CqeSyndrome::try_from(e.syndrome).expect("unknown syndrome");
        } else {
            Cqe64::decode(&bytes).unwrap();
        }
        cq.ci = cq.ci.wrapping_add(1);
        n += 1;
    }
    w.fill(cq.dbr, &set_ci_word(cq.ci));
    n
}

/// Consumes every EQE of instance `h`'s EQs, checking they decode, and
/// sometimes re-arms.
fn drain_eqs(w: &mut World, h: usize, rng: &mut Rng) {
    for async_eq in [false, true] {
        loop {
            let eq = if async_eq {
                &w.ctx[h].async_eq
            } else {
                &w.ctx[h].comp
            };
            let addr = eq.buf + ring::ring_index(eq.ci, eq.log) as u64 * EQE_SIZE as u64;
            let owner = w.read(addr + OWNER_OFFSET as u64, 1)[0];
            if !ring::eqe_valid(owner, eq.ci, eq.log) {
                break;
            }
            let bytes: [u8; EQE_SIZE] = w.read(addr, EQE_SIZE).try_into().unwrap();
            Eqe::decode(&bytes).expect("model wrote a bad EQE");
            let eq = if async_eq {
                &mut w.ctx[h].async_eq
            } else {
                &mut w.ctx[h].comp
            };
            eq.ci = eq.ci.wrapping_add(1);
        }
        let _ = w.eq_doorbell(h, async_eq, rng.chance(1, 2));
    }
}

struct Keys {
    good: Vec<(usize, u32, u64, u64)>,
}

impl Keys {
    /// A key that is sometimes valid, sometimes of the other instance or
    /// another PD, stale, or random.
    fn pick(&self, rng: &mut Rng) -> (u32, u64, u64) {
        let (_, key, base, len) = self.good[rng.below(self.good.len() as u64) as usize];
        match rng.below(8) {
            0 => (rng.next() as u32, base, len),
            1 => (key ^ (1 << rng.below(32)), base, len),
            2 => (0x100, base, len),
            _ => (key, base, len),
        }
    }
}

fn addr_near(rng: &mut Rng, base: u64, len: u64) -> u64 {
    match rng.below(6) {
        0 => rng.next(),
        1 => base.wrapping_sub(rng.below(64)),
        2 => base + len - rng.below(64).min(len),
        3 => base.wrapping_add(len + rng.below(4096)),
        _ => base + rng.below(len),
    }
}

fn len_of(rng: &mut Rng) -> u32 {
    match rng.below(6) {
        0 => 0,
        1 => rng.next() as u32,
        2 => 0x8000_0000 | rng.below(64) as u32,
        _ => rng.below(300) as u32,
    }
}

/// A random work request: with `sane` = (lkey, local range, rkey, remote
/// range), a well-formed one within those MRs; otherwise anything.
/// An MR as (key, base, length).
type MrRange = (u32, u64, u64);

fn random_wr(rng: &mut Rng, keys: &Keys, sane: Option<(MrRange, MrRange)>) -> Wr {
    let (rkey, rbase, rlen) = match sane {
        Some((_, r)) => r,
        None => keys.pick(rng),
    };
    let raddr = match sane {
        Some(_) => (rbase + rng.below(rlen / 2)) & !7,
        None => addr_near(rng, rbase, rlen),
    };
    let op = match rng.below(10) {
        0 => WrOp::Nop,
        1 => WrOp::Send,
        2 => WrOp::SendImm(rng.next() as u32),
        3 => WrOp::Write { raddr, rkey },
        4 => WrOp::WriteImm {
            raddr,
            rkey,
            imm: 7,
        },
        5 => WrOp::Read { raddr, rkey },
        6 => WrOp::Cas {
            raddr,
            rkey,
            compare: 0,
            swap: 1,
        },
        7 => WrOp::Faa {
            raddr,
            rkey,
            add: 1,
        },
        8 => WrOp::MaskedCas {
            raddr,
            rkey,
            compare: 0,
            compare_mask: 1,
            swap: 2,
            swap_mask: 3,
        },
        _ => WrOp::MaskedFaa {
            raddr,
            rkey,
            add: 1,
            boundary: 1 << 31,
        },
    };
    let n = rng.below(5) as usize;
    let sges = (0..n)
        .map(|_| match sane {
            Some(((lkey, base, len), _)) => {
                let l = 1 + rng.below(len.min(64));
                Sge {
                    addr: base + rng.below(len - l + 1),
                    len: l as u32,
                    lkey,
                }
            }
            None => {
                let (lkey, base, len) = keys.pick(rng);
                Sge {
                    addr: addr_near(rng, base, len),
                    len: len_of(rng),
                    lkey,
                }
            }
        })
        .collect::<Vec<_>>();
    let sges = match op {
        WrOp::Cas { .. } | WrOp::Faa { .. } | WrOp::MaskedCas { .. } | WrOp::MaskedFaa { .. }
            if sane.is_some() =>
        {
            let ((lkey, base, _), _) = sane.unwrap();
            vec![Sge {
                addr: base,
                len: 8,
                lkey,
            }]
        }
        _ => sges,
    };
    let mut wr = Wr::new(rng.next(), op, &sges);
    wr.signaled = rng.chance(1, 2);
    wr.solicited = rng.chance(1, 2);
    wr.fence = rng.chance(1, 4);
    if rng.chance(1, 6) && !matches!(op, WrOp::Read { .. }) {
        let n = rng.below(if sane.is_some() { 200 } else { 300 }) as usize;
        wr.inline = Some(rng.bytes(n));
    }
    wr
}

#[test]
fn random_invalid_input_never_panics_or_strays() {
    let mut rng = Rng(seed(0xbad_5eed));
    let mut w = World::build(2, 16, 3);
    let pds = [w.pd(0), w.pd(1), w.pd(0)];
    let mut cqs: Vec<TestCq> = vec![w.cq(0, 7), w.cq(1, 7), w.cq(0, 3)];
    let mut keys = Keys { good: Vec::new() };
    for (h, pd, access) in [
        (0, pds[0], Access::ALL),
        (0, pds[2], Access::ALL),
        (1, pds[1], Access::ALL),
        (1, pds[1], Access::LOCAL_WRITE.union(Access::REMOTE_READ)),
        (0, pds[0], Access::NONE),
    ] {
        let len = 1 + rng.below(8192);
        let b = w.buffer(len);
        let k = w.mr(h, pd, b, len, access);
        keys.good.push((h, k, b, len));
    }
    let caps = QpCaps {
        sq_wqebbs: 16,
        rq_wqes: 8,
        max_recv_sge: 4,
        max_send_sge: 4,
        max_inline: 256,
    };
    let spec = [(0, 0, 1), (1, 1, 0), (0, 2, 2), (0, 0, 3)];
    let mut qps: Vec<TestQp> = spec
        .iter()
        .map(|&(h, pd, cq)| {
            let cqs_h = if h == 0 { &cqs[cq.min(2)] } else { &cqs[1] };
            let cq = TestCq { ..clone_cq(cqs_h) };
            w.qp(h, pds[pd], &cq, &cq, caps)
        })
        .collect();
    let dests: Vec<RemoteQp> = vec![
        RemoteQp {
            hca: 1,
            qpn: qps[1].qpn,
        },
        RemoteQp {
            hca: 0,
            qpn: qps[0].qpn,
        },
        RemoteQp {
            hca: 0,
            qpn: qps[2].qpn,
        },
        RemoteQp { hca: 0, qpn: 0x777 },
    ];
    for (q, d) in qps.iter().zip(&dests) {
        let mut a = rts_attrs(*d);
        a.timeout = 1;
        a.retry_cnt = 2;
        a.rnr_retry = 3;
        w.to_rts_with(q, *d, a);
    }

    // Per QP: its own MR and its peer's MR, for well-formed requests.
    let mr = |i: usize| {
        let (_, k, b, l) = keys.good[i];
        (k, b, l)
    };
    let sane = [
        (mr(0), mr(2)),
        (mr(2), mr(0)),
        (mr(1), mr(1)),
        (mr(0), mr(0)),
    ];
    let iterations = 50_000 * scale();
    for it in 0..iterations {
        let qi = rng.below(qps.len() as u64) as usize;
        match rng.below(24) {
            0..=12 => {
                let s = if rng.chance(7, 8) {
                    let (l, r) = sane[qi];
                    // Keys may have been re-registered: look them up again.
                    let fresh = |x: (u32, u64, u64)| {
                        keys.good
                            .iter()
                            .find(|g| g.2 == x.1)
                            .map(|g| (g.1, g.2, g.3))
                            .unwrap()
                    };
                    Some((fresh(l), fresh(r)))
                } else {
                    None
                };
                let wr = random_wr(&mut rng, &keys, s);
                // Keep the provider side itself within the SQ.
                let too_big = wr.inline.as_ref().is_some_and(|d| d.len() > 400);
                if too_big {
                    continue;
                }
                let q = &mut qps[qi];
                let (idx, bbs) = w.build_wqe(q, &wr);
                if rng.chance(1, 8) {
                    // Flip bytes of the WQE.
                    for _ in 0..1 + rng.below(4) {
                        let off = (idx as u64 % 16) * 64 + rng.below(u64::from(bbs) * 64);
                        let a = q.sq_buf + off % (16 * 64);
                        let mut b = w.read(a, 1);
                        b[0] ^= 1 << rng.below(8);
                        w.fill(a, &b);
                    }
                }
                let how = if rng.chance(1, 3) {
                    Ring::BlueFlame
                } else {
                    Ring::Plain
                };
                let how = if bbs > 4 { Ring::Plain } else { how };
                let _ = w.ring_sq(q, idx, bbs, how);
            }
            13 => {
                // Garbage in the SQ, and a doorbell record and UAR doorbell
                // that may or may not agree with it.
                let q = &mut qps[qi];
                let n = 1 + rng.below(4);
                let a = q.sq_buf + (q.cur_post as u64 % 16) * 64;
                let junk = rng.bytes((n * 64) as usize);
                let room = (16 - q.cur_post as u64 % 16) * 64;
                w.fill(a, &junk[..junk.len().min(room as usize)]);
                let idx = q.cur_post;
                q.cur_post = q.cur_post.wrapping_add(n as u16);
                if rng.chance(1, 4) {
                    q.cur_post = rng.next() as u16;
                }
                let _ = w.ring_sq(q, idx, n as u16, Ring::Plain);
                // The provider resynchronises with what the device accepted.
                let h = q.hca;
                let qpn = q.qpn;
                q.cur_post = w.hca(h).query_qp(qpn).unwrap().sq_pi;
                let q = &mut qps[qi];
                if rng.chance(1, 2) {
                    let db = hca_model::doorbell::SendDoorbell {
                        qpn: if rng.chance(1, 4) {
                            rng.next() as u32
                        } else {
                            q.qpn
                        },
                        half: rng.below(3) as u8,
                        blueflame_len: [0, 64, 128, 256, 512, rng.next() as u32]
                            [rng.below(6) as usize],
                    };
                    let h = q.hca as u16;
                    let mem = &mut w.mem;
                    let _ = w.fabric.hca(h).unwrap().send_doorbell(mem, &db);
                }
            }
            14..=17 => {
                // Receives with random scatter lists, or garbage slots, and
                // random receive counters.
                let q = &mut qps[qi];
                if rng.chance(1, 4) {
                    let slot = q.rq_buf + (q.rq_head as u64 % 8) * u64::from(q.rq_stride);
                    let junk = rng.bytes(q.rq_stride as usize);
                    w.fill(slot, &junk);
                    q.rq_head = q.rq_head.wrapping_add(1);
                    w.fill(q.dbr, &counter_word(q.rq_head));
                } else {
                    let n = rng.below(5) as usize;
                    let good = rng.chance(7, 8);
                    let (own, _) = sane[qi];
                    let own = keys
                        .good
                        .iter()
                        .find(|g| g.2 == own.1)
                        .map(|g| (g.1, g.2, g.3))
                        .unwrap();
                    let sges: Vec<Sge> = (0..n)
                        .map(|_| {
                            if good {
                                Sge {
                                    addr: own.1,
                                    len: own.2.min(512) as u32,
                                    lkey: own.0,
                                }
                            } else {
                                let (lkey, base, len) = keys.pick(&mut rng);
                                Sge {
                                    addr: addr_near(&mut rng, base, len),
                                    len: len_of(&mut rng),
                                    lkey,
                                }
                            }
                        })
                        .collect();
                    w.post_recv(q, rng.next(), &sges);
                }
                if rng.chance(1, 8) {
                    let v = rng.next() as u32;
                    w.fill(q.dbr, &v.to_be_bytes());
                }
                let _ = w.hca(q.hca).recv_doorbell(q.qpn);
            }
            18 => {
                // Random modify-QP.
                let q = &qps[qi];
                let attrs = ConnAttrs {
                    access: Access::from_bits(rng.below(16) as u32).unwrap(),
                    pkey_index: rng.below(2) as u16,
                    port: rng.below(3) as u8,
                    path_mtu: rng.below(7) as u8,
                    dest: RemoteQp {
                        hca: rng.below(3) as u16,
                        qpn: if rng.chance(1, 2) {
                            qps[rng.below(4) as usize].qpn
                        } else {
                            rng.next() as u32
                        },
                    },
                    sl: rng.below(20) as u8,
                    rq_psn: rng.next() as u32 & 0x1ff_ffff,
                    sq_psn: rng.next() as u32 & 0x1ff_ffff,
                    max_dest_rd_atomic: rng.below(20) as u8,
                    max_rd_atomic: rng.below(20) as u8,
                    min_rnr_timer: rng.below(40) as u8,
                    timeout: rng.below(40) as u8,
                    retry_cnt: rng.below(9) as u8,
                    rnr_retry: rng.below(9) as u8,
                    qkey: rng.next() as u32,
                    sqd_async_notify: rng.chance(1, 2),
                };
                let m = hca_model::qp_modify::QpModify {
                    mask: AttrMask(
                        rng.next() as u32
                            & if rng.chance(1, 2) {
                                0x1f_ffff
                            } else {
                                0x13_bfbf
                            },
                    ),
                    state: QpState::from_raw(rng.below(7) as u32).unwrap(),
                    cur_state: QpState::from_raw(rng.below(7) as u32).unwrap(),
                    attrs,
                };
                let h = q.hca;
                if w.hca(h).modify_qp(q.qpn, &m).is_ok()
                    && m.mask.contains(AttrMask::STATE)
                    && m.state == QpState::Reset
                {
                    let q = &mut qps[qi];
                    q.cur_post = 0;
                    q.rq_head = 0;
                    w.fill(q.dbr, &[0; 8]);
                }
            }
            19 => {
                // CQ doorbells, sane or not.
                let cq = &cqs[rng.below(3) as usize];
                let uar = w.ctx[cq.hca].uar;
                if rng.chance(1, 2) {
                    let _ =
                        w.arm_cq_raw(cq, rng.below(4) as u8, rng.chance(1, 2), rng.next() as u32);
                } else {
                    let junk = rng.bytes(8);
                    w.fill(uar + 0x20, &junk);
                    if rng.chance(1, 50) {
                        let junk = rng.bytes(8);
                        w.fill(cq.dbr, &junk);
                    }
                    let h = cq.hca as u16;
                    let mem = &mut w.mem;
                    let _ = w.fabric.hca(h).unwrap().cq_doorbell(mem, uar);
                }
            }
            20 => {
                // EQ doorbells with random words.
                let h = rng.below(2) as usize;
                let uar = w.ctx[h].uar;
                let junk = rng.bytes(16);
                w.fill(uar + 0x40, &junk);
                let arm = rng.chance(1, 2);
                let mem = &mut w.mem;
                let _ = w.fabric.hca(h as u16).unwrap().eq_doorbell(mem, uar, arm);
            }
            21 => {
                // Re-register an MR: old keys go stale.
                let i = rng.below(keys.good.len() as u64) as usize;
                let (h, k, b, len) = keys.good[i];
                w.dereg(h, k);
                let pd = if h == 0 { pds[0] } else { pds[1] };
                // The MRs the well-formed requests use keep every right.
                let access = if i <= 2 {
                    Access::ALL
                } else {
                    Access::from_bits(rng.below(16) as u32).unwrap()
                };
                let access = if access.contains(Access::REMOTE_WRITE)
                    || access.contains(Access::REMOTE_ATOMIC)
                {
                    access.union(Access::LOCAL_WRITE)
                } else {
                    access
                };
                let k = w.mr(h, pd, b, len, access);
                keys.good[i] = (h, k, b, len);
            }
            22 => {
                let ns = [0, 1000, 10_000, 100_000, 10_000_000, 1 << 33][rng.below(6) as usize];
                let now = w.fabric.now() + ns;
                w.fabric.set_time(now);
            }
            _ => {
                let h = rng.below(2) as usize;
                drain_eqs(&mut w, h, &mut rng);
            }
        }
        for cq in cqs.iter_mut() {
            if rng.chance(1, 2) {
                drain(&mut w, cq);
            }
        }
        let budget = [1, 4, 64, 1 << 20][rng.below(4) as usize];
        w.fabric.run(&mut w.mem, budget);
        if it % 50 == 49 {
            // Bring every QP back to life now and then.
            for (q, d) in qps.iter_mut().zip(&dests) {
                let h = q.hca;
                let m = hca_model::qp_modify::QpModify {
                    mask: AttrMask::STATE,
                    state: QpState::Reset,
                    ..Default::default()
                };
                w.hca(h).modify_qp(q.qpn, &m).unwrap();
                q.cur_post = 0;
                q.rq_head = 0;
                w.fill(q.dbr, &[0; 8]);
                let mut a = rts_attrs(*d);
                a.timeout = 1;
                a.retry_cnt = 2;
                w.to_rts_with(q, *d, a);
            }
        }
    }
    w.run();
    for cq in cqs.iter_mut() {
        drain(&mut w, cq);
    }
    assert!(w.mem.violations.is_empty());
    let st0 = *w.hca(0).stats();
    let st1 = *w.hca(1).stats();
    // The run exercised both the accepting and the refusing paths.
    assert!(st0.doorbell_errors > 0 && st0.doorbells > 0, "{st0:?}");
    assert!(st0.wqe_errors + st1.wqe_errors > 100, "{st0:?} {st1:?}");
    assert!(
        st0.wqes_executed + st1.wqes_executed > 1500,
        "{st0:?} {st1:?}"
    );
    assert!(
        st0.recvs_consumed + st1.recvs_consumed > 150,
        "{st0:?} {st1:?}"
    );
}

fn clone_cq(c: &TestCq) -> TestCq {
    TestCq { ..*c }
}
