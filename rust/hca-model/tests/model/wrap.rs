// SPDX-License-Identifier: GPL-2.0

//! SQ, RQ, CQ and EQ wrap-around, many times over, with WQEs that straddle
//! the end of the SQ and the full event path every time.

use hca_model::mr::Access;
use mlx5_prm::eqe::EqeData;
use mlx5_prm::opcode::CqeOpcode;

use super::harness::*;

#[test]
fn every_ring_wraps_many_times() {
    // SQ of 4 WQEBBs, RQ of 4, CQs of 4, completion EQ of 4.
    let mut w = World::build(2, 8, 2);
    let caps = QpCaps {
        sq_wqebbs: 4,
        rq_wqes: 4,
        max_recv_sge: 2,
        max_send_sge: 2,
        max_inline: 128,
    };
    let (pa, pb) = (w.pd(0), w.pd(1));
    let mut acq = w.cq(0, 2);
    let mut bcq = w.cq(1, 2);
    let mut a = w.qp(0, pa, &acq, &acq, caps);
    let mut b = w.qp(1, pb, &bcq, &bcq, caps);
    w.connect(&a, &b);
    let abuf = w.buffer(4096);
    let bbuf = w.buffer(4096);
    let akey = w.mr(0, pa, abuf, 4096, Access::ALL);
    let bkey = w.mr(1, pb, bbuf, 4096, Access::ALL);
    let mut rng = Rng(7);
    let mut irqs = 0;
    for i in 0..2000u64 {
        let len = 1 + rng.below(120) as usize;
        let data = rng.bytes(len);
        // The 4-entry receive ring wraps every 4 iterations.
        w.post_recv(
            &mut b,
            i,
            &[
                Sge {
                    addr: bbuf,
                    len: 64,
                    lkey: bkey,
                },
                Sge {
                    addr: bbuf + 64,
                    len: 64,
                    lkey: bkey,
                },
            ],
        );
        w.arm_cq(&bcq, false).unwrap();
        let mut wr = Wr::new(i, WrOp::Send, &[]);
        if i % 3 == 0 {
            // Up to 3 WQEBBs: wraps the 4-WQEBB SQ often.
            wr.inline = Some(data.clone());
        } else {
            w.fill(abuf, &data);
            wr.sges = vec![Sge {
                addr: abuf,
                len: len as u32,
                lkey: akey,
            }];
        }
        w.post_send(&mut a, &wr).unwrap();
        let rc = w.poll_all(&mut bcq, &[&b]);
        assert_eq!(rc.len(), 1, "iteration {i}");
        assert_eq!(
            (rc[0].wr_id, rc[0].opcode, rc[0].byte_len as usize),
            (i, CqeOpcode::RespSend, len)
        );
        assert_eq!(w.read(bbuf, len), data, "iteration {i}");
        let sc = w.poll_all(&mut acq, &[&a]);
        assert_eq!(sc.len(), 1);
        assert_eq!(sc[0].wr_id, i);
        // The event path: one COMP EQE for B's CQ, one interrupt, then
        // the handler consumes the EQE and re-arms the EQ.
        let ev = w.eqes(1, false);
        assert_eq!(ev.len(), 1, "iteration {i}");
        assert_eq!(ev[0].data, EqeData::Comp { cqn: bcq.cqn });
        irqs += 1;
        assert_eq!(
            w.mem
                .irqs
                .iter()
                .filter(|q| q.hca == 1 && q.vector == 1)
                .count(),
            irqs
        );
        bcq.arm_sn = bcq.arm_sn.wrapping_add(1);
        w.eq_arm(1, false);
    }
    let cq = w.hca(1).query_cq(bcq.cqn).unwrap();
    assert_eq!(cq.producer_index, 2000);
    assert!(!cq.error);
    assert!(w.mem.violations.is_empty());
    // The 16-bit SQ counter went round too.
    let mut wr = Wr::new(0, WrOp::Nop, &[]);
    for i in 0..70_000u64 {
        wr.id = i;
        wr.signaled = i % 2 == 1;
        w.build_wqe(&mut a, &wr);
        if i % 2 == 1 {
            let idx = a.cur_post.wrapping_sub(1);
            w.ring_sq(&mut a, idx.wrapping_sub(1), 1, Ring::Plain)
                .unwrap_err();
            w.ring_sq(&mut a, idx, 1, Ring::Plain).unwrap();
            w.run();
            let wcs = w.poll_all(&mut acq, &[&a]);
            if wcs.len() != 1 {
                let st = *w.hca(0).stats();
                panic!("{i}: {wcs:?} {st:?} {:?}", w.hca(0).query_qp(a.qpn));
            }
            assert_eq!(wcs[0].wr_id, i);
        }
    }
}
