// SPDX-License-Identifier: GPL-2.0

//! CQ arming, completion events, EQ arming and interrupts.

use hca_model::doorbell::DoorbellError;
use hca_model::mem::Interrupt;
use mlx5_prm::eqe::EqeData;
use mlx5_prm::opcode::EventType;

use super::harness::*;
use super::verbs::Pair;

/// COMP EQEs on instance `h`'s completion EQ, as CQNs.
fn comp_cqns(w: &mut World, h: usize) -> Vec<u32> {
    w.eqes(h, false)
        .iter()
        .map(|e| {
            assert_eq!(e.event_type, EventType::Comp);
            match e.data {
                EqeData::Comp { cqn } => cqn,
                d => panic!("unexpected data {d:?}"),
            }
        })
        .collect()
}

fn comp_irqs(w: &World, h: usize) -> usize {
    w.mem
        .irqs
        .iter()
        .filter(|i| i.hca == h as u16 && i.vector == 1)
        .count()
}

#[test]
fn arm_is_one_shot() {
    let mut p = Pair::new(false);
    p.w.arm_cq(&p.acq, false).unwrap();
    for i in 0..3 {
        p.send_a(&Wr::new(i, WrOp::Nop, &[])).unwrap();
    }
    assert_eq!(comp_cqns(&mut p.w, 0), [p.acq.cqn]);
    assert_eq!(comp_irqs(&p.w, 0), 1);
    assert_eq!(
        p.w.mem.irqs.last(),
        Some(&Interrupt {
            hca: 0,
            eqn: p.w.ctx[0].comp.eqn,
            vector: 1
        })
    );
    // The provider reads the event (sn + 1), polls, re-arms: the next CQE
    // fires again; the EQ stays quiet until the handler re-arms it.
    p.acq.arm_sn += 1;
    assert_eq!(p.apoll().len(), 3);
    p.w.arm_cq(&p.acq, false).unwrap();
    p.send_a(&Wr::new(9, WrOp::Nop, &[])).unwrap();
    assert_eq!(comp_cqns(&mut p.w, 0), [p.acq.cqn]);
    assert_eq!(comp_irqs(&p.w, 0), 1, "EQ not re-armed: no interrupt");
    p.w.eq_arm(0, false);
    assert_eq!(
        comp_irqs(&p.w, 0),
        1,
        "re-armed with nothing pending: quiet"
    );
    p.acq.arm_sn += 1;
    p.apoll();
    p.w.arm_cq(&p.acq, false).unwrap();
    p.send_a(&Wr::new(10, WrOp::Nop, &[])).unwrap();
    assert_eq!(comp_irqs(&p.w, 0), 2);
}

/// A platform that yields after an interrupt gets the engine back at once:
/// the run that raised it stops after that WQE, with the rest still queued,
/// and the next run goes on where it stopped.
#[test]
fn engine_yields_after_an_interrupt() {
    let mut p = Pair::new(false);
    p.w.arm_cq(&p.acq, false).unwrap();
    p.w.mem.yield_on_irq = true;
    let mut last = (0, 0);
    for i in 0..4 {
        last = p.w.build_wqe(&mut p.a, &Wr::new(i, WrOp::Nop, &[]));
    }
    p.w.ring_sq(&mut p.a, last.0, last.1, Ring::Plain).unwrap();
    let r = p.w.fabric.run(&mut p.w.mem, 64);
    assert_eq!((r.used, r.more), (1, true), "stopped after the first CQE");
    assert_eq!(comp_irqs(&p.w, 0), 1);
    // The arm was one-shot: nothing raises now, so the run goes on to the
    // end of the queue.
    p.w.mem.raised = false;
    let r = p.w.fabric.run(&mut p.w.mem, 64);
    assert_eq!((r.used, r.more), (3, false));
    p.acq.arm_sn += 1;
    let ids: Vec<u64> = p.apoll().iter().map(|wc| wc.wr_id).collect();
    assert_eq!(ids, [0, 1, 2, 3]);
    // Without the yield, one run executes them all.
    p.w.mem.yield_on_irq = false;
    assert_eq!(comp_cqns(&mut p.w, 0), [p.acq.cqn]);
    p.w.eq_arm(0, false);
    p.w.arm_cq(&p.acq, false).unwrap();
    for i in 4..8 {
        last = p.w.build_wqe(&mut p.a, &Wr::new(i, WrOp::Nop, &[]));
    }
    p.w.ring_sq(&mut p.a, last.0, last.1, Ring::Plain).unwrap();
    let r = p.w.fabric.run(&mut p.w.mem, 64);
    assert_eq!((r.used, r.more), (4, false));
    assert_eq!(comp_irqs(&p.w, 0), 2);
}

#[test]
fn armed_with_pending_fires_at_once() {
    let mut p = Pair::new(false);
    p.send_a(&Wr::new(1, WrOp::Nop, &[])).unwrap();
    assert!(comp_cqns(&mut p.w, 0).is_empty());
    // Not polled: the CQE at ci 0 is past the armed index.
    p.w.arm_cq(&p.acq, false).unwrap();
    assert_eq!(comp_cqns(&mut p.w, 0), [p.acq.cqn]);
    assert_eq!(comp_irqs(&p.w, 0), 1);
    // Polled first: arming waits.
    p.acq.arm_sn += 1;
    p.apoll();
    p.w.arm_cq(&p.acq, false).unwrap();
    assert!(comp_cqns(&mut p.w, 0).is_empty());
}

#[test]
fn stale_sequence_number_is_ignored() {
    let mut p = Pair::new(false);
    p.w.arm_cq(&p.acq, false).unwrap();
    p.send_a(&Wr::new(1, WrOp::Nop, &[])).unwrap();
    assert_eq!(comp_cqns(&mut p.w, 0).len(), 1);
    // Arm again without having read the event: sn is stale.
    p.apoll();
    p.w.arm_cq(&p.acq, false).unwrap();
    assert_eq!(p.w.hca(0).stats().stale_arms, 1);
    p.send_a(&Wr::new(2, WrOp::Nop, &[])).unwrap();
    assert!(comp_cqns(&mut p.w, 0).is_empty());
    assert_eq!(p.w.hca(0).query_cq(p.acq.cqn).unwrap().arm_sn, 1);
}

#[test]
fn solicited_only() {
    let mut p = Pair::new(false);
    for i in 0..4 {
        p.recv_b(i, &[p.bsge(0, 64)]);
    }
    p.w.arm_cq(&p.bcq, true).unwrap();
    p.send_a(&Wr::new(1, WrOp::Send, &[p.asge(0, 8)])).unwrap();
    assert!(
        comp_cqns(&mut p.w, 1).is_empty(),
        "unsolicited receive does not fire"
    );
    let mut wr = Wr::new(2, WrOp::Send, &[p.asge(0, 8)]);
    wr.solicited = true;
    p.send_a(&wr).unwrap();
    assert_eq!(comp_cqns(&mut p.w, 1), [p.bcq.cqn]);
    // Armed solicited-only while a solicited CQE is pending: fires at once.
    p.bcq.arm_sn += 1;
    p.w.arm_cq(&p.bcq, true).unwrap();
    assert_eq!(comp_cqns(&mut p.w, 1), [p.bcq.cqn]);
    // Armed past them, an error CQE (flush) fires.
    p.bcq.arm_sn += 1;
    assert_eq!(p.bpoll().len(), 2);
    p.w.arm_cq(&p.bcq, true).unwrap();
    let attrs = rts_attrs(Default::default());
    p.w.modify(
        &p.b,
        hca_model::qp::QpState::Err,
        hca_model::qp_modify::AttrMask(0),
        attrs,
    )
    .unwrap();
    p.w.run();
    assert_eq!(comp_cqns(&mut p.w, 1), [p.bcq.cqn]);
}

#[test]
fn arm_doorbell_checks() {
    let mut p = Pair::new(false);
    // The doorbell record's ARM word must match the UAR doorbell.
    p.w.arm_cq(&p.acq, false).unwrap();
    let uar = p.w.ctx[0].uar;
    p.w.fill(p.acq.dbr + 4, &[0, 0, 0, 5]);
    let mem = &mut p.w.mem;
    assert_eq!(
        p.w.fabric.hca(0).unwrap().cq_doorbell(mem, uar),
        Err(DoorbellError::ArmMismatch)
    );
    // A CQ armed through another process's UAR page is refused.
    let other = p.w.mem.alloc(4096, super::mem::Kind::DevRead);
    p.w.fill(other + 0x20, &p.w.read(uar + 0x20, 8));
    let mem = &mut p.w.mem;
    assert_eq!(
        p.w.fabric.hca(0).unwrap().cq_doorbell(mem, other),
        Err(DoorbellError::WrongUar)
    );
    assert_eq!(p.w.hca(0).stats().doorbell_errors, 2);
}

#[test]
fn eq_rearm_with_pending_eqes_interrupts_at_once() {
    let mut p = Pair::new(false);
    p.w.arm_cq(&p.acq, false).unwrap();
    p.send_a(&Wr::new(1, WrOp::Nop, &[])).unwrap();
    assert_eq!(comp_irqs(&p.w, 0), 1);
    // A second CQ event arrives before the handler re-arms.
    p.acq.arm_sn += 1;
    p.apoll();
    p.w.arm_cq(&p.acq, false).unwrap();
    p.send_a(&Wr::new(2, WrOp::Nop, &[])).unwrap();
    assert_eq!(comp_irqs(&p.w, 0), 1);
    // The handler consumed only the first EQE, then re-arms: fires.
    let eq = &mut p.w.ctx[0].comp;
    eq.ci += 1;
    p.w.eq_arm(0, false);
    assert_eq!(comp_irqs(&p.w, 0), 2);
    // Update without arm does not interrupt.
    p.w.ctx[0].comp.ci += 1;
    p.w.eq_doorbell(0, false, false).unwrap();
    assert_eq!(comp_irqs(&p.w, 0), 2);
    let eqn = p.w.ctx[0].comp.eqn;
    let info = p.w.hca(0).query_eq(eqn).unwrap();
    assert_eq!(
        (info.producer_index, info.consumer_index, info.armed),
        (2, 2, false)
    );
}

/// Writes an ARM word into `cq`'s doorbell record only, as rdma-core's
/// provider does before its UAR doorbell (which the record reader never
/// sees), and lets the model read the record.
fn arm_by_record(w: &mut World, cq: (usize, u32, u64), word: u32, last: &mut u32) -> bool {
    let (hca, cqn, dbr) = cq;
    w.mem.put(
        dbr + mlx5_prm::doorbell::CQ_DBR_ARM_OFFSET as u64,
        &word.to_be_bytes(),
    );
    let mem = &mut w.mem;
    w.fabric
        .hca(hca as u16)
        .unwrap()
        .cq_arm_record(mem, cqn, last)
        .unwrap()
}

fn arm_word(sn: u8, solicited: bool, ci: u32) -> u32 {
    mlx5_prm::doorbell::CqArm {
        sn: sn & 3,
        cmd: if solicited {
            mlx5_prm::doorbell::ArmCmd::Solicited
        } else {
            mlx5_prm::doorbell::ArmCmd::Next
        },
        ci,
    }
    .word()
}

#[test]
fn arm_read_from_the_record_is_the_doorbell() {
    use hca_model::doorbell::CQ_ARM_RECORD_UNARMED;
    let mut p = Pair::new(false);
    let acq = (p.acq.hca, p.acq.cqn, p.acq.dbr);
    // The owner marks the new CQ's record: an unchanged mark arms nothing.
    let mut last = CQ_ARM_RECORD_UNARMED;
    assert!(!arm_by_record(
        &mut p.w,
        acq,
        CQ_ARM_RECORD_UNARMED,
        &mut last
    ));
    p.send_a(&Wr::new(1, WrOp::Nop, &[])).unwrap();
    assert!(comp_cqns(&mut p.w, 0).is_empty(), "not armed: no event");
    // Arm at sn 0, ci 0 (the word a zeroed record would hold) with a CQE
    // pending: fires at once, as the UAR doorbell would.
    assert!(arm_by_record(
        &mut p.w,
        acq,
        arm_word(0, false, 0),
        &mut last
    ));
    assert_eq!(comp_cqns(&mut p.w, 0), [acq.1]);
    // Read again unchanged: nothing new, nothing fires.
    assert!(!arm_by_record(
        &mut p.w,
        acq,
        arm_word(0, false, 0),
        &mut last
    ));
    p.send_a(&Wr::new(2, WrOp::Nop, &[])).unwrap();
    assert!(comp_cqns(&mut p.w, 0).is_empty(), "one shot");
    // The provider read the event (sn 1) and polled both CQEs; the next
    // arm waits for the next CQE.
    p.acq.arm_sn = 1;
    assert_eq!(p.apoll().len(), 2);
    let ci = p.acq.ci;
    assert!(arm_by_record(
        &mut p.w,
        acq,
        arm_word(1, false, ci),
        &mut last
    ));
    assert!(comp_cqns(&mut p.w, 0).is_empty());
    p.send_a(&Wr::new(3, WrOp::Nop, &[])).unwrap();
    assert_eq!(comp_cqns(&mut p.w, 0), [acq.1]);
    // A word with reserved bits is refused and counted, once.
    let errors = p.w.hca(0).stats().doorbell_errors;
    let mut l2 = last;
    let r = {
        p.w.mem.put(
            acq.2 + mlx5_prm::doorbell::CQ_DBR_ARM_OFFSET as u64,
            &0x4000_0000u32.to_be_bytes(),
        );
        let mem = &mut p.w.mem;
        p.w.fabric
            .hca(0)
            .unwrap()
            .cq_arm_record(mem, acq.1, &mut l2)
    };
    assert_eq!(r, Err(DoorbellError::BadCounter));
    assert_eq!(p.w.hca(0).stats().doorbell_errors, errors + 1);
    assert!(!arm_by_record(&mut p.w, acq, 0x4000_0000, &mut l2));
}

#[test]
fn set_ci_is_read_whatever_the_arm_word_holds() {
    use hca_model::doorbell::CQ_ARM_RECORD_UNARMED;
    let mut p = Pair::new(false);
    // A CQ never armed: its ARM word holds the owner's mark, which is no
    // ARM word. The consumer index beside it still frees the ring.
    p.w.mem.put(
        p.acq.dbr + mlx5_prm::doorbell::CQ_DBR_ARM_OFFSET as u64,
        &CQ_ARM_RECORD_UNARMED.to_be_bytes(),
    );
    let n = 1u64 << p.acq.log;
    for i in 0..3 * n {
        p.send_a(&Wr::new(i, WrOp::Nop, &[])).unwrap();
        assert_eq!(p.apoll().len(), 1, "completion {i}");
    }
    assert_eq!(p.w.hca(0).stats().cqes_dropped, 0);
}
