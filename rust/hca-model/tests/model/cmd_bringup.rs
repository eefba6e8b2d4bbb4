// SPDX-License-Identifier: GPL-2.0

//! The command interface end to end: two functions brought up in
//! mlx5_core's order, objects created by command, two QPs connected by the
//! transition commands, a SEND and an RDMA WRITE through the fast path,
//! and everything torn down until every page is back.

use hca_model::fabric::lid_of_index;
use hca_model::fw::{FwConfig, HcaState, Readiness};
use hca_model::qp::QpState;
use mlx5_prm::cmd_hca::{
    DisableHca, DisableHcaIn, EnableHca, EnableHcaIn, SetIssi, SetIssiIn, QUERY_PAGES_BOOT,
    QUERY_PAGES_INIT, QUERY_PAGES_REGULAR,
};
use mlx5_prm::cmd_qp::{Qp2Err, Qp2ErrIn, Qp2Rst, Qp2RstIn};
use mlx5_prm::eqe::EqeData;
use mlx5_prm::opcode::{CqeOpcode, EventType};

use super::cmd_driver::*;
use super::harness::{QpCaps, Sge, Wr, WrOp};

#[test]
fn two_functions_send_and_write_then_every_page_returns() {
    let mut b = Bed::up(2);
    for d in 0..2 {
        let fw = &b.devs[d].fw;
        assert_eq!(fw.state(), HcaState::Initialized);
        assert_eq!(fw.issi(), 1);
        assert!(!fw.checksums());
        // 8 boot + 16 init pages, and one for each of the four EQs.
        assert_eq!(fw.page_counts().held, 8 + 16 + 4);
        assert!(fw.stats().page_requests >= 1);
    }
    let pd0 = b.alloc_pd(0);
    let pd1 = b.alloc_pd(1);
    let mut cq0 = b.create_cq(0, 6);
    let mut cq1 = b.create_cq(1, 6);
    let mut qa = b.create_qp(0, pd0, &cq0, &cq0, QpCaps::default());
    let mut qb = b.create_qp(1, pd1, &cq1, &cq1, QpCaps::default());
    // A CQ and a QP each cost a page, asked for by event.
    assert_eq!(b.devs[0].fw.page_counts().held, 8 + 16 + 4 + 2);
    b.to_rts(0, &qa, &qb);
    b.to_rts(1, &qb, &qa);
    let info = b.hca(0).query_qp(qa.qpn).unwrap();
    assert_eq!(info.conn.dest.qpn, qb.qpn);
    assert_eq!(info.conn.dest.hca, 1);
    assert_eq!(info.conn.path_mtu, 5);
    assert_eq!(
        (info.conn.max_rd_atomic, info.conn.max_dest_rd_atomic),
        (4, 4)
    );

    // Memory: a PA key on A, an MTT key over three pages on B.
    let abuf = b.w.buffer(8192);
    let bbuf = b.w.buffer(3 * 4096);
    let akey = b.reg_mr(0, pd0, abuf, 8192, false, 0x11);
    let bkey = b.reg_mr(1, pd1, bbuf + 0x100, 2 * 4096, true, 0x22);
    assert_eq!(akey & 0xff, 0x11);
    assert_eq!(bkey & 0xff, 0x22);
    let data: Vec<u8> = (0..1000u32).map(|i| (i * 13 + 5) as u8).collect();
    b.w.fill(abuf, &data);

    // SEND from A to B, B's CQ armed: a completion EQE and an interrupt.
    b.w.post_recv(
        &mut qb,
        77,
        &[Sge {
            addr: bbuf + 0x100,
            len: 4096,
            lkey: bkey,
        }],
    );
    b.w.arm_cq(&cq1, false).unwrap();
    let irqs = b.irqs().len();
    let sge = Sge {
        addr: abuf,
        len: 1000,
        lkey: akey,
    };
    b.w.post_send(&mut qa, &Wr::new(5, WrOp::Send, &[sge]))
        .unwrap();
    let wa = b.w.poll_all(&mut cq0, &[&qa]);
    assert_eq!(wa.len(), 1);
    assert!(wa[0].ok() && wa[0].wr_id == 5 && wa[0].opcode == CqeOpcode::Req);
    let wb = b.w.poll_all(&mut cq1, &[&qb]);
    assert_eq!(wb.len(), 1);
    let r = wb[0];
    assert!(r.ok() && r.wr_id == 77 && r.opcode == CqeOpcode::RespSend);
    assert_eq!(r.byte_len, 1000);
    assert_eq!((r.src_qpn, r.slid, r.sl), (qa.qpn, lid_of_index(0), 3));
    assert_eq!(b.w.read(bbuf + 0x100, 1000), data);
    let comp = b.w.eqes(1, false);
    assert!(matches!(
        comp.as_slice(),
        [e] if e.event_type == EventType::Comp && e.data == EqeData::Comp { cqn: cq1.cqn }
    ));
    let comp_eqn = b.w.ctx[1].comp.eqn;
    assert!(b.irqs()[irqs..]
        .iter()
        .any(|i| i.hca == 1 && i.eqn == comp_eqn && i.vector == 1));

    // RDMA WRITE from B into A's PA key.
    let bsge = Sge {
        addr: bbuf + 0x100,
        len: 512,
        lkey: bkey,
    };
    let wr = Wr::new(
        9,
        WrOp::Write {
            raddr: abuf + 4096,
            rkey: akey,
        },
        &[bsge],
    );
    b.w.post_send(&mut qb, &wr).unwrap();
    let wc = b.w.poll_all(&mut cq1, &[&qb]);
    assert!(wc.len() == 1 && wc[0].ok() && wc[0].wr_id == 9);
    assert_eq!(b.w.read(abuf + 4096, 512), data[..512]);

    // 2ERR flushes a posted receive; 2RST empties the QP.
    b.w.post_recv(&mut qa, 88, &[sge]);
    b.cmd::<Qp2Err>(0, &Qp2ErrIn { qpn: qa.qpn }, &[]).unwrap();
    b.w.run();
    let flushed = b.w.poll_all(&mut cq0, &[&qa]);
    assert!(flushed.len() == 1 && flushed[0].wr_id == 88 && !flushed[0].ok());
    b.cmd::<Qp2Rst>(0, &Qp2RstIn { qpn: qa.qpn }, &[]).unwrap();
    assert_eq!(b.w.state(&qa), QpState::Reset);

    // Down: objects, EQs, UAR, TEARDOWN_HCA, pages, DISABLE_HCA.
    b.destroy_qp(0, qa.qpn);
    b.destroy_qp(1, qb.qpn);
    b.destroy_cq(0, cq0.cqn);
    b.destroy_cq(1, cq1.cqn);
    b.dereg_mr(0, akey);
    b.dereg_mr(1, bkey);
    b.dealloc_pd(0, pd0);
    b.dealloc_pd(1, pd1);
    for d in 0..2 {
        b.tear_down(d);
        let fw = &b.devs[d].fw;
        assert_eq!(fw.state(), HcaState::Disabled);
        assert!(fw.held_pages().is_empty());
        assert_eq!(
            fw.log().total(),
            0,
            "{:?}",
            fw.log().iter().collect::<Vec<_>>()
        );
        assert!(b.devs[d].cmd_events > 10, "commands completed by event");
        assert_eq!(fw.stats().failed + fw.stats().delivery_errors, 0);
    }
    assert!(b.w.mem.violations.is_empty());
}

#[test]
fn polling_only_and_the_error_path_of_mlx5_core() {
    let mut b = Bed::new(1, FwConfig::DEFAULT);
    b.init_cmdq(0).unwrap();
    b.cmd::<EnableHca>(0, &EnableHcaIn::default(), &[]).unwrap();
    b.cmd::<SetIssi>(0, &SetIssiIn { current_issi: 1 }, &[])
        .unwrap();
    assert_eq!(b.query_pages(0, QUERY_PAGES_BOOT), 8);
    b.startup_pages(0, QUERY_PAGES_BOOT);
    assert_eq!(b.query_pages(0, QUERY_PAGES_BOOT), 0);
    assert_eq!(b.query_pages(0, QUERY_PAGES_INIT), 16);
    // mlx5_function_setup fails after the boot pages: mlx5_core reclaims
    // them all before INIT_HCA and disables the function.
    b.reclaim_all(0);
    assert_eq!(b.devs[0].fw.page_counts().held, 0);
    b.cmd::<DisableHca>(0, &DisableHcaIn::default(), &[])
        .unwrap();
    // And again, all the way up (without EQs: polling only) and down.
    b.cmd::<EnableHca>(0, &EnableHcaIn::default(), &[]).unwrap();
    assert_eq!(b.devs[0].fw.issi(), 0, "ENABLE_HCA resets the ISSI");
    b.cmd::<SetIssi>(0, &SetIssiIn { current_issi: 1 }, &[])
        .unwrap();
    b.startup_pages(0, QUERY_PAGES_BOOT);
    b.set_caps(0, mlx5_prm::hca_cap::CMDIF_CHECKSUM_DISABLED);
    b.startup_pages(0, QUERY_PAGES_INIT);
    b.cmd::<mlx5_prm::cmd_hca::InitHca>(0, &Default::default(), &[])
        .unwrap();
    assert_eq!(b.query_pages(0, QUERY_PAGES_REGULAR), 0);
    b.cmd::<mlx5_prm::cmd_hca::TeardownHca>(0, &Default::default(), &[])
        .unwrap();
    assert_eq!(b.query_pages(0, QUERY_PAGES_REGULAR), -24);
    b.reclaim_all(0);
    b.cmd::<DisableHca>(0, &DisableHcaIn::default(), &[])
        .unwrap();
    let c = b.devs[0].fw.page_counts();
    assert_eq!((c.held, c.given_total, c.returned_total), (0, 32, 32));
    assert_eq!(b.devs[0].fw.log().total(), 0);
    assert_eq!(b.devs[0].fw.stats().cmd_events, 0);
}

#[test]
fn command_checksums_sign_every_mailbox() {
    let mut b = Bed::new(1, FwConfig::DEFAULT);
    b.init_cmdq(0).unwrap();
    b.cmd::<EnableHca>(0, &EnableHcaIn::default(), &[]).unwrap();
    b.cmd::<SetIssi>(0, &SetIssiIn { current_issi: 1 }, &[])
        .unwrap();
    b.startup_pages(0, QUERY_PAGES_BOOT);
    b.set_caps(0, mlx5_prm::hca_cap::CMDIF_CHECKSUM_ENABLED);
    assert!(b.devs[0].fw.checksums());
    // The driver signs its input mailboxes and `submit` checks that the
    // device signed every output mailbox (QUERY_ISSI's 112 bytes).
    b.cmd::<mlx5_prm::cmd_hca::QueryIssi>(0, &Default::default(), &[])
        .unwrap();
    b.startup_pages(0, QUERY_PAGES_INIT);
    assert_eq!(b.devs[0].fw.log().total(), 0);
}

#[test]
fn initializing_clears_after_reads_or_time() {
    let cfg = FwConfig {
        ready: Readiness::AfterReads(5),
        ..FwConfig::DEFAULT
    };
    let mut b = Bed::new(1, cfg);
    b.init_cmdq(0).unwrap();
    b.cmd::<EnableHca>(0, &EnableHcaIn::default(), &[]).unwrap();
    let cfg = FwConfig {
        ready: Readiness::AfterTime(1_000_000),
        ..FwConfig::DEFAULT
    };
    let mut b = Bed::new(1, cfg);
    assert!(!b.wait_fw_init(0), "no time passed");
    b.devs[0].fw.set_time(1_000_000);
    assert!(b.wait_fw_init(0));
    b.devs[0].fw.set_time(2_000_000);
    b.init_cmdq(0).unwrap_err();
    b.devs[0].fw.set_time(3_000_000);
    assert!(b.wait_fw_init(0), "queue loaded a millisecond later");
    b.cmd::<EnableHca>(0, &EnableHcaIn::default(), &[]).unwrap();
    // The health counter moves with time and commands.
    let c0 = b.devs[0]
        .fw
        .read32(mlx5_prm::init_seg::HEALTH_COUNTER_OFFSET);
    b.devs[0].fw.set_time(10_000_000);
    let c1 = b.devs[0]
        .fw
        .read32(mlx5_prm::init_seg::HEALTH_COUNTER_OFFSET);
    assert!(c1 >= c0 + 7);
}

#[test]
fn device_asks_for_pages_and_asks_some_back() {
    let mut b = Bed::up(1);
    let start = b.devs[0].fw.page_counts();
    assert_eq!((start.held, start.need), (28, 28));
    // The device gives up five pages and asks for them back by event.
    let irqs = b.irqs().len();
    let h = b.devs[0].h;
    let hca = b.w.fabric.hca(h as u16).unwrap();
    assert_eq!(b.devs[0].fw.ask_pages_back(&mut b.w.mem, hca, 5), 5);
    let page_eqn = b.devs[0].page_eq.as_ref().unwrap().eqn;
    assert!(b.irqs()[irqs..].iter().any(|i| i.eqn == page_eqn));
    assert_eq!(b.devs[0].fw.page_counts().asked_back, 5);
    assert_eq!(b.service_pages(0), vec![-5]);
    let c = b.devs[0].fw.page_counts();
    assert_eq!((c.held, c.need, c.asked_back), (23, 23, 0));
    // Asking more than the surplus beyond the boot pages is capped.
    let hca = b.w.fabric.hca(h as u16).unwrap();
    assert_eq!(b.devs[0].fw.ask_pages_back(&mut b.w.mem, hca, 100), 15);
    assert_eq!(b.service_pages(0), vec![-15]);
    assert_eq!(b.devs[0].fw.page_counts().held, 8);
    // New queues need pages again: asked for with positive requests.
    let cq = b.create_cq(0, 4);
    let c = b.devs[0].fw.page_counts();
    assert_eq!((c.held, c.need, c.requested), (9, 9, 0));
    b.destroy_cq(0, cq.cqn);
    // A destroyed queue's page is surplus; the driver may take it.
    assert_eq!(b.take(0, 10).len(), 1);
    b.tear_down(0);
    assert_eq!(b.devs[0].fw.log().total(), 0);
}
