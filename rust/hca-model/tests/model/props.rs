// SPDX-License-Identifier: GPL-2.0

//! Property test: random valid workloads over several instances yield
//! exactly one CQE per signaled WQE, in order per QP, and the data a
//! reference model predicts.

use hca_model::mr::Access;
use mlx5_prm::opcode::CqeOpcode;

use super::harness::*;

const HALF: u64 = 4096;
const TARGET: u64 = 8192;

/// One QP of the workload with its buffers.
struct Node {
    qp: TestQp,
    peer: usize,
    /// Lower half: gather sources; upper half: scatter destinations.
    local: u64,
    lkey: u32,
    /// Target of the peer's RDMA and atomics.
    target: u64,
    tkey: u32,
}

/// Byte-exact reference of every buffer.
struct Shadow {
    bufs: Vec<(u64, Vec<u8>)>,
}

impl Shadow {
    fn at(&mut self, addr: u64) -> (&mut Vec<u8>, usize) {
        let (base, v) = self
            .bufs
            .iter_mut()
            .find(|(b, v)| addr >= *b && addr < *b + v.len() as u64)
            .expect("address in no buffer");
        let off = (addr - *base) as usize;
        (v, off)
    }

    fn read(&mut self, addr: u64, len: usize) -> Vec<u8> {
        let (v, off) = self.at(addr);
        v[off..off + len].to_vec()
    }

    fn write(&mut self, addr: u64, data: &[u8]) {
        let (v, off) = self.at(addr);
        v[off..off + data.len()].copy_from_slice(data);
    }

    fn gather(&mut self, sges: &[Sge]) -> Vec<u8> {
        sges.iter()
            .flat_map(|s| self.read(s.addr, s.len as usize))
            .collect()
    }

    fn scatter(&mut self, sges: &[Sge], data: &[u8]) {
        let mut rest = data;
        for s in sges {
            let n = rest.len().min(s.len as usize);
            self.write(s.addr, &rest[..n]);
            rest = &rest[n..];
        }
    }
}

fn random_sges(rng: &mut Rng, base: u64, key: u32, n: usize, max_total: u64) -> Vec<Sge> {
    (0..n)
        .map(|_| {
            let len = 1 + rng.below(max_total / n as u64) as u32;
            let off = rng.below(HALF - u64::from(len));
            Sge {
                addr: base + off,
                len,
                lkey: key,
            }
        })
        .collect()
}

#[test]
fn random_valid_workloads() {
    let mut rng = Rng(seed(0x5eed_1234));
    let mut w = World::build(3, 32, 6);
    let pds: Vec<u32> = (0..3).map(|h| w.pd(h)).collect();
    let mut scq: Vec<TestCq> = (0..3).map(|h| w.cq(h, 10)).collect();
    let mut rcq: Vec<TestCq> = (0..3).map(|h| w.cq(h, 10)).collect();
    // (hca, peer): two cross-instance pairs, a same-instance pair, a QP
    // connected to itself.
    let layout = [(0, 1), (1, 0), (1, 3), (2, 2), (0, 5), (0, 4), (2, 6)];
    let mut nodes: Vec<Node> = Vec::new();
    let mut shadow = Shadow { bufs: Vec::new() };
    for &(h, peer) in &layout {
        let qp = w.qp(
            h,
            pds[h],
            &scq[h],
            &rcq[h],
            QpCaps {
                max_send_sge: 4,
                max_recv_sge: 8,
                ..QpCaps::default()
            },
        );
        let local = w.buffer(2 * HALF);
        let lkey = w.mr(h, pds[h], local, 2 * HALF, Access::ALL);
        let target = w.buffer(TARGET);
        let tkey = w.mr(h, pds[h], target, TARGET, Access::ALL);
        for (b, len) in [(local, 2 * HALF), (target, TARGET)] {
            let data = rng.bytes(len as usize);
            w.fill(b, &data);
            shadow.bufs.push((b, data));
        }
        nodes.push(Node {
            qp,
            peer,
            local,
            lkey,
            target,
            tkey,
        });
    }
    for i in 0..nodes.len() {
        let (a, b) = (i, nodes[i].peer);
        if a <= b {
            let (qa, qb) = (&nodes[a].qp, &nodes[b].qp);
            let (qa, qb) = (
                TestQp {
                    sq_wrid: vec![],
                    rq_wrid: vec![],
                    ..clone_qp(qa)
                },
                TestQp {
                    sq_wrid: vec![],
                    rq_wrid: vec![],
                    ..clone_qp(qb)
                },
            );
            w.connect(&qa, &qb);
        }
    }

    let batches = 1500 * scale();
    let mut signaled_total = 0u64;
    for batch in 0..batches {
        let q = rng.below(nodes.len() as u64) as usize;
        let r = nodes[q].peer;
        let (qh, rh) = (nodes[q].qp.hca, nodes[r].qp.hca);
        let n = 1 + rng.below(8) as usize;
        let mut wrs = Vec::new();
        let mut want_req = Vec::new();
        let mut want_resp = Vec::new();
        for k in 0..n {
            let id = batch * 100 + k as u64;
            let (loc, lkey) = (nodes[q].local, nodes[q].lkey);
            let (tgt, tkey) = (nodes[r].target, nodes[r].tkey);
            let kind = rng.below(10);
            let inline = kind <= 3 && rng.chance(1, 4);
            let gather = if inline {
                let len = rng.below(200) as u32;
                let off = rng.below(HALF - 200);
                vec![Sge {
                    addr: loc + off,
                    len,
                    lkey,
                }]
            } else {
                let n = 1 + rng.below(4) as usize;
                random_sges(&mut rng, loc, lkey, n, 2048)
            };
            let scatter = |rng: &mut Rng, n: usize| random_sges(rng, loc + HALF, lkey, n, 2048);
            let mut wr = Wr::new(id, WrOp::Nop, &gather);
            wr.signaled = rng.chance(1, 2);
            wr.solicited = rng.chance(1, 3);
            wr.fence = rng.chance(1, 5);
            let taddr = |rng: &mut Rng, len: u64| tgt + rng.below(TARGET - len + 1);
            // Apply to the shadow in execution order, as the model will.
            let data = shadow.gather(&gather);
            let len = data.len() as u64;
            let mut byte_len = len as u32;
            match kind {
                0..=2 => {
                    // SEND / SEND_IMM / WRITE_IMM consume a receive on the peer.
                    let imm = rng.next() as u32;
                    let recv_n = 1 + rng.below(4) as usize;
                    let mut recv =
                        random_sges(&mut rng, nodes[r].local + HALF, nodes[r].lkey, recv_n, 2048);
                    let cap: u64 = recv.iter().map(|s| u64::from(s.len)).sum();
                    if cap < len {
                        recv.push(Sge {
                            addr: nodes[r].local + HALF,
                            len: (len - cap) as u32,
                            lkey: nodes[r].lkey,
                        });
                    }
                    if kind == 2 {
                        recv.clear();
                    }
                    let rid = id + 50;
                    let mut rq = clone_qp(&nodes[r].qp);
                    w.post_recv(&mut rq, rid, &recv);
                    nodes[r].qp.rq_head = rq.rq_head;
                    nodes[r].qp.rq_wrid = rq.rq_wrid;
                    let (op, opcode, imm_seen) = match kind {
                        0 => (WrOp::Send, CqeOpcode::RespSend, 0),
                        1 => (WrOp::SendImm(imm), CqeOpcode::RespSendImm, imm),
                        _ => {
                            let raddr = taddr(&mut rng, len);
                            (
                                WrOp::WriteImm {
                                    raddr,
                                    rkey: tkey,
                                    imm,
                                },
                                CqeOpcode::RespWrImm,
                                imm,
                            )
                        }
                    };
                    wr.op = op;
                    match op {
                        WrOp::WriteImm { raddr, .. } => shadow.write(raddr, &data),
                        _ => shadow.scatter(&recv, &data),
                    }
                    want_resp.push((rid, opcode, len as u32, imm_seen, wr.solicited));
                }
                3 => {
                    let raddr = taddr(&mut rng, len);
                    wr.op = WrOp::Write { raddr, rkey: tkey };
                    shadow.write(raddr, &data);
                }
                4 => {
                    let dn = 1 + rng.below(4) as usize;
                    let dst = scatter(&mut rng, dn);
                    let rlen: u64 = dst.iter().map(|s| u64::from(s.len)).sum();
                    let raddr = taddr(&mut rng, rlen);
                    wr.op = WrOp::Read { raddr, rkey: tkey };
                    wr.sges = dst.clone();
                    let d = shadow.read(raddr, rlen as usize);
                    shadow.scatter(&dst, &d);
                    byte_len = rlen as u32;
                }
                5..=8 => {
                    let raddr = tgt + rng.below(TARGET / 8) * 8;
                    let res = Sge {
                        addr: loc + HALF + rng.below(HALF - 8),
                        len: 8,
                        lkey,
                    };
                    let old = u64::from_ne_bytes(shadow.read(raddr, 8).try_into().unwrap());
                    let (a, b, c, d) = (rng.next(), rng.next(), rng.next(), rng.next());
                    // Make compares hit half of the time.
                    let compare = if rng.chance(1, 2) { old } else { a };
                    let (op, new) = match kind {
                        5 => (
                            WrOp::Cas {
                                raddr,
                                rkey: tkey,
                                compare,
                                swap: b,
                            },
                            if old == compare { b } else { old },
                        ),
                        6 => (
                            WrOp::Faa {
                                raddr,
                                rkey: tkey,
                                add: b,
                            },
                            old.wrapping_add(b),
                        ),
                        7 => {
                            let hit = (old ^ compare) & c == 0;
                            (
                                WrOp::MaskedCas {
                                    raddr,
                                    rkey: tkey,
                                    compare,
                                    compare_mask: c,
                                    swap: b,
                                    swap_mask: d,
                                },
                                if hit { (old & !d) | (b & d) } else { old },
                            )
                        }
                        _ => {
                            // Reference: fieldwise add, bit by bit.
                            let mut out = 0u64;
                            let mut carry = 0u64;
                            for bit in 0..64 {
                                let s = ((old >> bit) & 1) + ((b >> bit) & 1) + carry;
                                out |= (s & 1) << bit;
                                carry = if (c >> bit) & 1 == 1 { 0 } else { s >> 1 };
                            }
                            (
                                WrOp::MaskedFaa {
                                    raddr,
                                    rkey: tkey,
                                    add: b,
                                    boundary: c,
                                },
                                out,
                            )
                        }
                    };
                    wr.op = op;
                    wr.sges = vec![res];
                    shadow.write(raddr, &new.to_ne_bytes());
                    shadow.write(res.addr, &old.to_ne_bytes());
                    byte_len = 8;
                }
                _ => {
                    wr.op = WrOp::Nop;
                    wr.sges.clear();
                    byte_len = 0;
                }
            }
            if inline
                && matches!(
                    wr.op,
                    WrOp::Send | WrOp::SendImm(_) | WrOp::Write { .. } | WrOp::WriteImm { .. }
                )
            {
                wr.inline = Some(data.clone());
                wr.sges.clear();
            }
            if wr.signaled {
                want_req.push((id, byte_len));
            }
            wrs.push(wr);
        }
        let how = if n == 1 && rng.chance(1, 2) {
            Ring::BlueFlame
        } else {
            Ring::Plain
        };
        // A BlueFlame copy must fit in half a register.
        let how = if how == Ring::BlueFlame && wrs[0].inline.as_ref().is_some_and(|d| d.len() > 150)
        {
            Ring::Plain
        } else {
            how
        };
        let mut qp = clone_qp(&nodes[q].qp);
        w.post_send_list(&mut qp, &wrs, how).unwrap();
        nodes[q].qp.cur_post = qp.cur_post;
        nodes[q].qp.half = qp.half;
        nodes[q].qp.sq_wrid = qp.sq_wrid;

        let refs: Vec<&TestQp> = nodes.iter().map(|n| &n.qp).collect();
        let got: Vec<(u64, u32)> = w
            .poll_all(&mut scq[qh], &refs)
            .iter()
            .map(|wc| {
                assert!(wc.ok(), "batch {batch}: {wc:?}");
                assert_eq!(wc.qpn, nodes[q].qp.qpn);
                (wc.wr_id, wc.byte_len)
            })
            .collect();
        assert_eq!(got, want_req, "batch {batch}: requester completions");
        let got: Vec<_> = w
            .poll_all(&mut rcq[rh], &refs)
            .iter()
            .map(|wc| (wc.wr_id, wc.opcode, wc.byte_len, wc.imm, wc.solicited))
            .collect();
        assert_eq!(got, want_resp, "batch {batch}: responder completions");
        signaled_total += want_req.len() as u64;
        if batch % 50 == 0 || batch == batches - 1 {
            for (base, data) in &shadow.bufs {
                assert!(
                    w.read(*base, data.len()) == *data,
                    "batch {batch}: memory at {base:#x} differs"
                );
            }
        }
    }
    assert!(signaled_total > batches);
    for h in 0..3 {
        let st = *w.hca(h).stats();
        assert_eq!(
            (st.doorbell_errors, st.wqe_errors, st.cqes_dropped),
            (0, 0, 0)
        );
    }
}

/// A copy of a QP's provider state.
fn clone_qp(q: &TestQp) -> TestQp {
    TestQp {
        sq_wrid: q.sq_wrid.clone(),
        rq_wrid: q.rq_wrid.clone(),
        ..*q
    }
}
