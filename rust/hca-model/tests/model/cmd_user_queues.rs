// SPDX-License-Identifier: GPL-2.0

//! CQs and QPs over scattered pages, as a driver creates the queues of a
//! process (rdma-core's libmlx5 allocates them in its own memory and the
//! kernel pins them page by page): CREATE_CQ and CREATE_QP with a page list
//! that is not contiguous. The device copies each list into a page it
//! holds and reaches every CQE and WQE through that table; the test's
//! IOMMU window gives the device bus pages that are never adjacent and
//! refuses any access that crosses one.

use hca_model::fw::reject::Reject;
use hca_model::fw::FwConfig;
use mlx5_prm::cmd_cq::CreateCq;
use mlx5_prm::cmd_eq::{CreateEq, CreateEqIn, Eqc};
use mlx5_prm::cmd_hca::{ManagePages, ManagePagesIn, MANAGE_PAGES_ALLOCATION_SUCCESS};

use super::cmd_driver::*;
use super::cmd_errors::{last, refused, status};
use super::harness::{QpCaps, Ring, Rng, Sge, Wr, WrOp};
use super::mem::Kind;

const PAGE: u64 = 4096;

/// Traffic between a QP whose SQ, RQ and CQ are all scattered (on B) and a
/// kernel-style contiguous one (on A), long enough that every ring wraps
/// several times over its page boundaries: SENDs both ways (plain and
/// BlueFlame doorbells), RDMA WRITEs and READs. Each scattered queue holds
/// one table page from CREATE to DESTROY; nothing is left afterwards.
#[test]
fn scattered_queues_carry_traffic_and_free_their_tables() {
    let mut b = Bed::up(2);
    let (pd0, pd1) = (b.alloc_pd(0), b.alloc_pd(1));
    let mut cq0 = b.create_cq(0, 7);
    assert!(b.devs[0].fw.table_pages().is_empty(), "contiguous: linear");
    let before = b.devs[1].fw.page_counts().in_use;
    // 128 CQEs: two pages.
    let mut cq1 = b.create_cq_on(1, 7, true);
    assert_eq!(b.devs[1].fw.page_counts().in_use, before + 1);
    // 256 WQEBBs of SQ after 64 RQ WQEs of 64 bytes: five pages.
    let caps = QpCaps {
        sq_wqebbs: 256,
        ..QpCaps::default()
    };
    let mut qa = b.create_qp(0, pd0, &cq0, &cq0, caps);
    let mut qb = b.create_qp_on(1, pd1, &cq1, &cq1, caps, true);
    assert_eq!(b.devs[1].fw.page_counts().in_use, before + 2);
    b.to_rts(0, &qa, &qb);
    b.to_rts(1, &qb, &qa);

    // A sends from its pages 0-3 and receives into 4-7; B receives into
    // 0-3 and sends from 4-7; page 8 of each is for RDMA.
    let abuf = b.w.buffer(9 * PAGE);
    let bbuf = b.w.buffer(9 * PAGE);
    let akey = b.reg_mr(0, pd0, abuf, 9 * PAGE, true, 0x11);
    let bkey = b.reg_mr(1, pd1, bbuf, 9 * PAGE, true, 0x22);
    let mut rng = Rng(0x0a11_ce55);
    let sge = |addr, len, lkey| Sge { addr, len, lkey };

    for round in 0..20u64 {
        // 30 SENDs each way, one doorbell per direction, 1 to 300 bytes.
        let data = rng.bytes(30 * 512);
        b.w.fill(abuf, &data);
        b.w.fill(bbuf + 4 * PAGE, &data);
        for k in 0..30u64 {
            b.w.post_recv(&mut qa, k, &[sge(abuf + 4 * PAGE + k * 512, 512, akey)]);
            b.w.post_recv(&mut qb, k, &[sge(bbuf + k * 512, 512, bkey)]);
        }
        let len = |k: u64| 1 + ((k * 37 + round * 11) % 300) as u32;
        let to_b: Vec<Wr> = (0..30)
            .map(|k| Wr::new(k, WrOp::Send, &[sge(abuf + k * 512, len(k), akey)]))
            .collect();
        let to_a: Vec<Wr> = (0..30)
            .map(|k| {
                Wr::new(
                    k,
                    WrOp::Send,
                    &[sge(bbuf + 4 * PAGE + k * 512, len(k), bkey)],
                )
            })
            .collect();
        b.w.post_send_list(&mut qa, &to_b, Ring::Plain).unwrap();
        b.w.post_send_list(&mut qb, &to_a, Ring::Plain).unwrap();
        let wa = b.w.poll_all(&mut cq0, &[&qa]);
        let wb = b.w.poll_all(&mut cq1, &[&qb]);
        assert_eq!(wa.len(), 60, "round {round}: {wa:?}");
        assert_eq!(wb.len(), 60, "round {round}: {wb:?}");
        assert!(wa.iter().chain(&wb).all(|w| w.ok()), "{wa:?} {wb:?}");
        for k in 0..30u64 {
            let n = len(k) as usize;
            let at = (k * 512) as usize;
            assert_eq!(b.w.read(bbuf + k * 512, n), data[at..at + n]);
            assert_eq!(b.w.read(abuf + 4 * PAGE + k * 512, n), data[at..at + n]);
        }
        // One RDMA WRITE from B through a BlueFlame copy of its WQE, and
        // one RDMA READ from B.
        let wr = Wr::new(
            100,
            WrOp::Write {
                raddr: abuf + 8 * PAGE,
                rkey: akey,
            },
            &[sge(bbuf + 4 * PAGE, 256, bkey)],
        );
        b.w.post_send_list(&mut qb, &[wr], Ring::BlueFlame).unwrap();
        let wr = Wr::new(
            101,
            WrOp::Read {
                raddr: abuf,
                rkey: akey,
            },
            &[sge(bbuf + 8 * PAGE, 128, bkey)],
        );
        b.w.post_send(&mut qb, &wr).unwrap();
        let wb = b.w.poll_all(&mut cq1, &[&qb]);
        assert!(wb.len() == 2 && wb.iter().all(|w| w.ok()), "{wb:?}");
        assert_eq!(b.w.read(abuf + 8 * PAGE, 256), data[..256]);
        assert_eq!(b.w.read(bbuf + 8 * PAGE, 128), data[..128]);
    }
    // The SQ (256 WQEBBs) and the CQ (128 CQEs) wrapped several times.
    assert!(
        qb.cur_post > 512 && cq1.ci > 3 * 128,
        "{} {}",
        qb.cur_post,
        cq1.ci
    );

    b.destroy_qp(0, qa.qpn);
    b.destroy_qp(1, qb.qpn);
    assert_eq!(b.devs[1].fw.page_counts().in_use, before + 1);
    b.destroy_cq(0, cq0.cqn);
    b.destroy_cq(1, cq1.cqn);
    assert_eq!(b.devs[1].fw.page_counts().in_use, before);
    b.dereg_mr(0, akey);
    b.dereg_mr(1, bkey);
    b.dealloc_pd(0, pd0);
    b.dealloc_pd(1, pd1);
    for d in 0..2 {
        b.tear_down(d);
        let log = b.devs[d].fw.log();
        assert_eq!(log.total(), 0, "{:?}", log.iter().collect::<Vec<_>>());
    }
    assert!(b.w.mem.violations.is_empty(), "{:?}", b.w.mem.violations);
}

/// A scattered queue's table takes a free page like any table: on a
/// function holding two pages, two scattered CQs take both, a third is
/// refused ([`Reject::MttNoPages`]) and marks nothing, and a scattered EQ
/// is refused (only CQs and QPs may be scattered); a page of a scattered
/// ring cannot be given to the device; destroying the CQs frees the
/// pages.
#[test]
fn scattered_queues_need_a_free_page() {
    let cfg = FwConfig {
        boot_pages: 0,
        init_pages: 2,
        pages_per_queue: 0,
        ..FwConfig::DEFAULT
    };
    let mut b = Bed::new(1, cfg);
    b.bring_up(0);
    assert_eq!(b.devs[0].fw.page_counts().held, 2);
    let mut cqs = Vec::new();
    let mut lists = Vec::new();
    for _ in 0..2 {
        let (input, pas, ..) = b.cq_input(0, 7, true);
        cqs.push(b.cmd::<CreateCq>(0, &input, &pas).unwrap().cqn);
        lists.push(pas);
    }
    assert_eq!(b.devs[0].fw.page_counts().in_use, 2);
    // A page of a scattered ring, found through its table, cannot be lent
    // to the device.
    let give = ManagePagesIn {
        op_mod: MANAGE_PAGES_ALLOCATION_SUCCESS,
        input_num_entries: 1,
        ..Default::default()
    };
    refused!(
        b,
        0,
        ManagePages,
        give,
        &[lists[1][1]],
        Reject::PageOverlapsQueue
    );
    let (input, pas, ..) = b.cq_input(0, 7, true);
    refused!(b, 0, CreateCq, input, &pas, Reject::MttNoPages);
    // The same CQ over contiguous pages needs no table.
    let (input, pas, ..) = b.cq_input(0, 7, false);
    cqs.push(b.cmd::<CreateCq>(0, &input, &pas).unwrap().cqn);
    let c = b.devs[0].fw.page_counts();
    assert_eq!((c.in_use, c.held), (2, 2));
    let eq_buf = b.w.mem.alloc(2 * PAGE, Kind::DevWrite);
    let pas = b.w.mem.map_scattered(eq_buf, 2);
    let eq = CreateEqIn {
        eq_context_entry: Eqc {
            log_eq_size: 7,
            uar_page: b.devs[0].uar,
            intr: 2,
            ..Eqc::default()
        },
        event_bitmask: [0; 4],
    };
    refused!(b, 0, CreateEq, eq, &pas, Reject::QueueNotContiguous);
    for cqn in cqs {
        b.destroy_cq(0, cqn);
    }
    assert_eq!(b.devs[0].fw.page_counts().in_use, 0);
    b.tear_down(0);
    // The three refusals above, nothing else.
    assert_eq!(b.devs[0].fw.log().total(), 3);
    assert!(b.w.mem.violations.is_empty(), "{:?}", b.w.mem.violations);
}
