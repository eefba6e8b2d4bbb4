// SPDX-License-Identifier: GPL-2.0

//! Memory keys over scattered pages, as a driver registers user memory:
//! CREATE_MKEY in MTT mode with one entry per pinned page. The device
//! copies the list into pages the driver lent it, translates every access
//! page by page through that table, keeps the pages out of reclaim while
//! the key lives, frees them at DESTROY_MKEY and asks for replacements as
//! it takes them; no UMR may touch such a key.

use hca_model::fw::FwConfig;
use hca_model::qp::QpState;
use mlx5_prm::cmd_eq::{CreateEq, CreateEqIn, Eqc};
use mlx5_prm::cmd_hca::{ManagePages, ManagePagesIn, MANAGE_PAGES_ALLOCATION_SUCCESS};
use mlx5_prm::cmd_res::{mkey, CreateMkey, CreateMkeyIn, Mkc, ACCESS_MODE_MTT};
use mlx5_prm::opcode::CqeSyndrome;
use mlx5_prm::wqe::{mkey_flags, mkey_mask, umr_flags, MkeySeg, UmrCtrlSeg, MTT_EN_RD, MTT_EN_WR};

use hca_model::fw::reject::Reject;

use super::cmd_driver::*;
use super::cmd_errors::{last, refused, status};
use super::harness::{QpCaps, Rng, Sge, TestCq, TestQp, Wr, WrOp};

const PAGE: u64 = 4096;

/// The CREATE_MKEY input of an MTT key over `len` bytes from `iova`, all
/// rights, whose `k`-th 4 KiB page (from the one holding `iova`) is
/// `pages[k]`, with mlx5_ib's present bits; and the list, padded to whole
/// octwords.
fn mtt_input(pd: u32, iova: u64, len: u64, pages: &[u64], key_7_0: u8) -> (CreateMkeyIn, Vec<u64>) {
    let mut pas: Vec<u64> = pages.iter().map(|p| p | MTT_EN_RD | MTT_EN_WR).collect();
    if pas.len() % 2 == 1 {
        pas.push(0);
    }
    let mut mkc = Mkc {
        a: true,
        rw: true,
        rr: true,
        lw: true,
        lr: true,
        qpn: 0xff_ffff,
        mkey_7_0: key_7_0,
        pd,
        start_addr: iova,
        len,
        log_page_size: 12,
        translations_octword_size: mlx5_prm::cmd_res::mtt_octwords(pas.len() as u32),
        ..Mkc::default()
    };
    mkc.set_access_mode(ACCESS_MODE_MTT);
    let input = CreateMkeyIn {
        pg_access: false,
        memory_key_mkey_entry: mkc,
        translations_octword_actual_size: mkc.translations_octword_size,
    };
    (input, pas)
}

impl Bed {
    /// CREATE_MKEY of a user MR: `len` bytes from `iova` over `pages` (one
    /// per 4 KiB page of the IOVA range); each distinct page becomes
    /// reachable for the memory checker. Returns the key.
    fn reg_user_mr(
        &mut self,
        d: usize,
        pd: u32,
        iova: u64,
        len: u64,
        pages: &[u64],
        key_7_0: u8,
    ) -> u32 {
        assert_eq!(((iova & 0xfff) + len).div_ceil(PAGE), pages.len() as u64);
        let (input, pas) = mtt_input(pd, iova, len, pages, key_7_0);
        let index = self.cmd::<CreateMkey>(d, &input, &pas).unwrap().mkey_index;
        let key = mkey(index, key_7_0);
        let mut distinct = pages.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        let h = self.devs[d].h;
        for p in distinct {
            self.w.mem.add_mr(p, PAGE, h, key);
        }
        key
    }
}

/// Posts `wr` on `qp` and returns its completion on `cq`.
fn complete(b: &mut Bed, qp: &mut TestQp, cq: &mut TestCq, wr: &Wr) -> super::harness::Wc {
    b.w.post_send(qp, wr).unwrap();
    b.w.run();
    let wcs = b.w.poll_all(cq, &[qp]);
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    wcs[0]
}

/// A user MR over three scattered pages on B: a SEND lands across its
/// first page boundary, an RDMA WRITE across the second, an RDMA READ
/// reads across the first; its table is a held page, in use until
/// DESTROY_MKEY, replaced by a page request, and no queue may sit on it.
/// A's kernel-style contiguous MTT key stays linear.
#[test]
fn user_mr_over_scattered_pages() {
    let mut b = Bed::up(2);
    let (pd0, pd1) = (b.alloc_pd(0), b.alloc_pd(1));
    let mut cq0 = b.create_cq(0, 6);
    let mut cq1 = b.create_cq(1, 6);
    let mut qa = b.create_qp(0, pd0, &cq0, &cq0, QpCaps::default());
    let mut qb = b.create_qp(1, pd1, &cq1, &cq1, QpCaps::default());
    b.to_rts(0, &qa, &qb);
    b.to_rts(1, &qb, &qa);

    let abuf = b.w.buffer(4 * PAGE);
    let akey = b.reg_mr(0, pd0, abuf, 4 * PAGE, true, 0x11);
    assert_eq!(b.devs[0].fw.page_counts().in_use, 0, "contiguous: linear");
    assert!(!b.hca(0).query_mr(akey).unwrap().in_device_table());

    // Three pages, apart (guard zones), listed out of address order; the
    // user's buffer starts 0x800 into the first and ends 0x100 short of
    // the end of the last.
    let alloc = [b.w.buffer(PAGE), b.w.buffer(PAGE), b.w.buffer(PAGE)];
    let pages = [alloc[2], alloc[0], alloc[1]];
    let iova = 0x7f12_3456_7800u64;
    let base = iova & !0xfff;
    let len = 3 * PAGE - 0x800 - 0x100;
    let before = b.devs[1].fw.page_counts();
    let bkey = b.reg_user_mr(1, pd1, iova, len, &pages, 0x22);
    assert_eq!(bkey & 0xff, 0x22);
    assert!(b.hca(1).query_mr(bkey).unwrap().in_device_table());
    let fw = &b.devs[1].fw;
    let c = fw.page_counts();
    assert_eq!(
        (c.in_use, c.held, c.need),
        (1, before.held, before.need + 1)
    );
    let table = fw.table_pages()[0];
    assert_eq!(fw.table_pages(), [table]);
    assert!(fw.held_pages().contains(&table));
    assert_eq!(
        table,
        fw.held_pages()[0],
        "the lowest free page is taken first"
    );
    // The entries as the driver wrote them, big-endian.
    for (k, p) in pages.iter().enumerate() {
        let e = b.w.read(table + k as u64 * 8, 8);
        assert_eq!(e, (p | MTT_EN_RD | MTT_EN_WR).to_be_bytes());
    }
    // The device asks for a page to replace the one it took.
    assert_eq!(b.service_pages(1), vec![1]);
    let c = b.devs[1].fw.page_counts();
    assert_eq!((c.held, c.need, c.in_use), (before.held + 1, c.held, 1));

    // SEND: 0x1000 bytes from IOVA base + 0xf00, 0x100 in the first page
    // and 0xf00 in the second.
    let data = Rng(0x5ca7_7e2d).bytes(3 * PAGE as usize);
    b.w.fill(abuf, &data);
    b.w.post_recv(
        &mut qb,
        7,
        &[Sge {
            addr: base + 0xf00,
            len: 0x1000,
            lkey: bkey,
        }],
    );
    let sge = Sge {
        addr: abuf,
        len: 0x1000,
        lkey: akey,
    };
    let wc = complete(&mut b, &mut qa, &mut cq0, &Wr::new(1, WrOp::Send, &[sge]));
    assert!(wc.ok(), "{wc:?}");
    let r = b.w.poll_all(&mut cq1, &[&qb]);
    assert!(
        r.len() == 1 && r[0].ok() && r[0].byte_len == 0x1000,
        "{r:?}"
    );
    assert_eq!(b.w.read(pages[0] + 0xf00, 0x100), data[..0x100]);
    assert_eq!(b.w.read(pages[1], 0xf00), data[0x100..0x1000]);

    // RDMA WRITE of 0x200 bytes across the second boundary.
    let sge = Sge {
        addr: abuf + 0x1000,
        len: 0x200,
        lkey: akey,
    };
    let wr = Wr::new(
        2,
        WrOp::Write {
            raddr: base + 2 * PAGE - 0x100,
            rkey: bkey,
        },
        &[sge],
    );
    let wc = complete(&mut b, &mut qa, &mut cq0, &wr);
    assert!(wc.ok(), "{wc:?}");
    assert_eq!(b.w.read(pages[1] + 0xf00, 0x100), data[0x1000..0x1100]);
    assert_eq!(b.w.read(pages[2], 0x100), data[0x1100..0x1200]);

    // RDMA READ of 0x80 bytes across the first boundary, into A.
    let sge = Sge {
        addr: abuf + 3 * PAGE,
        len: 0x80,
        lkey: akey,
    };
    let wr = Wr::new(
        3,
        WrOp::Read {
            raddr: base + PAGE - 0x40,
            rkey: bkey,
        },
        &[sge],
    );
    let wc = complete(&mut b, &mut qa, &mut cq0, &wr);
    assert!(wc.ok(), "{wc:?}");
    let mut want = b.w.read(pages[0] + 0xfc0, 0x40);
    want.extend(b.w.read(pages[1], 0x40));
    assert_eq!(b.w.read(abuf + 3 * PAGE, 0x80), want);
    // Beyond the region (the last 0x100 bytes of the last page): refused.
    let wr = Wr::new(
        4,
        WrOp::Read {
            raddr: base + 3 * PAGE - 0x100,
            rkey: bkey,
        },
        &[Sge {
            addr: abuf,
            len: 8,
            lkey: akey,
        }],
    );
    let wc = complete(&mut b, &mut qa, &mut cq0, &wr);
    assert_eq!(wc.syndrome, Some(u8::from(CqeSyndrome::RemoteAccess)));

    // Down: DESTROY_MKEY frees the table page; the page it asked for is
    // now surplus.
    b.destroy_qp(0, qa.qpn);
    b.destroy_qp(1, qb.qpn);
    b.destroy_cq(0, cq0.cqn);
    b.destroy_cq(1, cq1.cqn);
    let held = b.devs[1].fw.page_counts().held;
    b.dereg_mr(1, bkey);
    let c = b.devs[1].fw.page_counts();
    assert_eq!((c.in_use, c.held), (0, held));
    assert!(b.devs[1].fw.table_pages().is_empty());
    assert_eq!(b.take(1, 100).len(), (c.held - c.need) as usize);
    b.dereg_mr(0, akey);
    b.dealloc_pd(0, pd0);
    b.dealloc_pd(1, pd1);
    for d in 0..2 {
        b.tear_down(d);
        let log = b.devs[d].fw.log();
        assert_eq!(log.total(), 0, "{:?}", log.iter().collect::<Vec<_>>());
    }
    assert!(b.w.mem.violations.is_empty());
}

/// A table page is device memory: the driver cannot give it again, and no
/// queue buffer may be placed on it.
#[test]
fn a_table_page_is_device_memory() {
    let mut b = Bed::up(1);
    let pd = b.alloc_pd(0);
    let pages = [b.w.buffer(PAGE), b.w.buffer(PAGE)];
    let key = b.reg_user_mr(0, pd, 0x1000, 2 * PAGE, &pages, 1);
    b.settle_pages(0);
    let table = b.devs[0].fw.table_pages()[0];
    let give = ManagePagesIn {
        op_mod: MANAGE_PAGES_ALLOCATION_SUCCESS,
        input_num_entries: 1,
        ..Default::default()
    };
    refused!(b, 0, ManagePages, give, &[table], Reject::PageAlreadyOwned);
    let eq = CreateEqIn {
        eq_context_entry: Eqc {
            log_eq_size: 6,
            uar_page: b.devs[0].uar,
            intr: 2,
            ..Eqc::default()
        },
        event_bitmask: [0; 4],
    };
    refused!(b, 0, CreateEq, eq, &[table], Reject::QueueOverlapsPages);
    assert_eq!(b.devs[0].fw.table_pages(), [table]);
    b.dereg_mr(0, key);
    b.dealloc_pd(0, pd);
    b.tear_down(0);
}

/// A function with no boot pages, two init pages and queues that cost
/// nothing, brought up: it holds exactly two pages.
fn lean() -> Bed {
    let cfg = FwConfig {
        boot_pages: 0,
        init_pages: 2,
        pages_per_queue: 0,
        ..FwConfig::DEFAULT
    };
    let mut b = Bed::new(1, cfg);
    b.bring_up(0);
    assert_eq!(b.devs[0].fw.page_counts().held, 2);
    b
}

/// Reclaim returns the highest pages *not in use*: a table page above
/// free ones stays with the device, and comes back once its key is gone.
#[test]
fn reclaim_never_returns_a_table_page() {
    let mut b = lean();
    let pd = b.alloc_pd(0);
    let data = [b.w.buffer(PAGE), b.w.buffer(PAGE)];
    let ka = b.reg_user_mr(0, pd, 0x10_0000, 2 * PAGE, &data, 1);
    b.settle_pages(0);
    let kb = b.reg_user_mr(0, pd, 0x20_0000, 2 * PAGE, &[data[1], data[0]], 2);
    b.settle_pages(0);
    let held = b.devs[0].fw.held_pages().to_vec();
    assert_eq!(held.len(), 4);
    // A's table is the lowest page, B's the next.
    assert_eq!(b.devs[0].fw.table_pages(), &held[..2]);
    b.dereg_mr(0, ka);
    let tb = held[1];
    assert_eq!(b.devs[0].fw.table_pages(), [tb]);
    // The device gives up all it can: everything but B's table, which is
    // above a free page.
    let h = b.devs[0].h;
    let hca = b.w.fabric.hca(h as u16).unwrap();
    assert_eq!(b.devs[0].fw.ask_pages_back(&mut b.w.mem, hca, 100), 3);
    assert_eq!(b.service_pages(0), vec![-3]);
    assert_eq!(b.devs[0].fw.held_pages(), [tb]);
    assert!(b.take(0, 10).is_empty(), "the table page is the need");
    let c = b.devs[0].fw.page_counts();
    assert_eq!((c.held, c.need, c.in_use), (1, 1, 1));
    // B's table is intact and still translates.
    assert_eq!(
        b.w.read(tb, 8),
        (data[1] | MTT_EN_RD | MTT_EN_WR).to_be_bytes()
    );
    b.dereg_mr(0, kb);
    assert_eq!(b.take(0, 10), vec![tb]);
    b.dealloc_pd(0, pd);
    b.tear_down(0);
    assert_eq!(b.devs[0].fw.log().total(), 0);
}

/// A list of 600 entries: a directory and two table pages. Without three
/// free pages the key is refused (and nothing is taken); with them, a
/// WRITE across the two table pages and a READ of the last page land
/// where entries 511, 512 and 599 say, and one READ of all 600 pages
/// reads every page through its entry. A UMR on the key is refused.
#[test]
fn long_list_two_level_table_and_no_umr() {
    let mut b = lean();
    let pd = b.alloc_pd(0);
    let mut cq = b.create_cq(0, 6);
    let mut qa = b.create_qp(0, pd, &cq, &cq, QpCaps::default());
    let mut qb = b.create_qp(0, pd, &cq, &cq, QpCaps::default());
    b.to_rts(0, &qa, &qb);
    b.to_rts(0, &qb, &qa);
    let abuf = b.w.buffer(2 * PAGE);
    let akey = b.reg_mr(0, pd, abuf, 2 * PAGE, false, 1);

    // 600 pages of IOVA, over three data pages in turn (never adjacent).
    let data = [b.w.buffer(PAGE), b.w.buffer(PAGE), b.w.buffer(PAGE)];
    let list: Vec<u64> = (0..600).map(|k| data[k % 3]).collect();
    let iova = 0x3_0000_0000u64;
    let len = 600 * PAGE;
    let (input, pas) = mtt_input(pd, iova, len, &list, 5);
    refused!(b, 0, CreateMkey, input, &pas, Reject::MttNoPages);
    let c = b.devs[0].fw.page_counts();
    assert_eq!((c.held, c.in_use), (2, 0));
    assert!(b.service_pages(0).is_empty(), "nothing was asked for");
    b.give(0, 1).unwrap();
    let key = b.reg_user_mr(0, pd, iova, len, &list, 5);
    let fw = &b.devs[0].fw;
    assert_eq!(fw.table_pages(), fw.held_pages());
    let c = fw.page_counts();
    assert_eq!((c.held, c.in_use, c.need), (3, 3, 5));
    // The directory (the lowest page) names the two others.
    let t = fw.table_pages().to_vec();
    assert_eq!(b.w.read(t[0], 8), t[1].to_be_bytes());
    assert_eq!(b.w.read(t[0] + 8, 8), t[2].to_be_bytes());
    assert_eq!(
        b.w.read(t[2] + 87 * 8, 8),
        (data[599 % 3] | 3).to_be_bytes()
    );
    assert_eq!(b.service_pages(0), vec![2]);

    // WRITE 0x100 bytes across entries 511 and 512.
    let bytes = Rng(0x600).bytes(0x100);
    b.w.fill(abuf, &bytes);
    let wr = Wr::new(
        1,
        WrOp::Write {
            raddr: iova + 512 * PAGE - 0x80,
            rkey: key,
        },
        &[Sge {
            addr: abuf,
            len: 0x100,
            lkey: akey,
        }],
    );
    let wc = complete(&mut b, &mut qa, &mut cq, &wr);
    assert!(wc.ok(), "{wc:?}");
    assert_eq!(b.w.read(data[511 % 3] + 0xf80, 0x80), bytes[..0x80]);
    assert_eq!(b.w.read(data[512 % 3], 0x80), bytes[0x80..]);
    // READ the last 0x40 bytes of the region (entry 599).
    b.w.fill(data[599 % 3] + 0xfc0, &[0x5a; 0x40]);
    let wr = Wr::new(
        2,
        WrOp::Read {
            raddr: iova + len - 0x40,
            rkey: key,
        },
        &[Sge {
            addr: abuf + PAGE,
            len: 0x40,
            lkey: akey,
        }],
    );
    let wc = complete(&mut b, &mut qa, &mut cq, &wr);
    assert!(wc.ok(), "{wc:?}");
    assert_eq!(b.w.read(abuf + PAGE, 0x40), [0x5a; 0x40]);
    // READ the whole region in one segment: 600 pages, none adjacent to
    // the next, through both table pages.
    let fills: Vec<Vec<u8>> = (0..3)
        .map(|k| Rng(0x601 + k).bytes(PAGE as usize))
        .collect();
    for (p, f) in data.iter().zip(&fills) {
        b.w.fill(*p, f);
    }
    let whole = b.w.buffer(len);
    let wkey = b.reg_mr(0, pd, whole, len, false, 2);
    let wr = Wr::new(
        5,
        WrOp::Read {
            raddr: iova,
            rkey: key,
        },
        &[Sge {
            addr: whole,
            len: len as u32,
            lkey: wkey,
        }],
    );
    let wc = complete(&mut b, &mut qa, &mut cq, &wr);
    assert!(wc.ok(), "{wc:?}");
    for k in 0..600u64 {
        let got = b.w.read(whole + k * PAGE, PAGE as usize);
        assert!(got == fills[(k % 3) as usize], "page {k}");
    }

    // A fast registration naming the key: refused, the QP goes to ERR,
    // the key still translates.
    let umr = Wr::new(
        3,
        WrOp::Umr {
            key,
            ctrl: UmrCtrlSeg {
                flags: umr_flags::CHECK_FREE,
                xlt_octowords: 2,
                mkey_mask: mkey_mask::FAST_REG | mkey_mask::A,
                ..UmrCtrlSeg::default()
            },
            mkey: MkeySeg {
                flags: mkey_flags::LOCAL_WRITE | mkey_flags::ACCESS_MODE_MTT,
                qpn_mkey7_0: 0xffff_ff00 | (key & 0xff),
                start_addr: 0x1000,
                len: PAGE,
                xlt_oct_size: 2,
                log2_page_size: 12,
                ..MkeySeg::default()
            },
        },
        &[Sge {
            addr: abuf,
            len: 32,
            lkey: akey,
        }],
    );
    let wc = complete(&mut b, &mut qb, &mut cq, &umr);
    assert_eq!(wc.syndrome, Some(u8::from(CqeSyndrome::LocalProt)));
    assert_eq!(b.w.state(&qb), QpState::Err);
    let mr = b.hca(0).query_mr(key).unwrap();
    assert!(mr.in_device_table() && mr.key() == key);
    assert_eq!(mr.attr().iova, iova);

    b.w.run();
    b.w.poll_all(&mut cq, &[&qa, &qb]);
    b.destroy_qp(0, qa.qpn);
    b.destroy_qp(0, qb.qpn);
    b.destroy_cq(0, cq.cqn);
    b.dereg_mr(0, key);
    assert_eq!(b.devs[0].fw.page_counts().in_use, 0);
    b.dereg_mr(0, wkey);
    b.dereg_mr(0, akey);
    b.dealloc_pd(0, pd);
    b.tear_down(0);
    assert_eq!(last(&b, 0), Reject::MttNoPages, "the one refusal");
    assert_eq!(b.devs[0].fw.log().total(), 1);
}

/// With cx-emu's reserve of 128 pages, 64 user MRs of 1 MiB (257 entries
/// each with an unaligned start: one table page) registered back to back,
/// the driver answering no page request in between, never run short, and
/// cost one page request (for the next 128 pages), not 64.
#[test]
fn a_burst_of_user_mrs_fits_the_reserve() {
    let cfg = FwConfig {
        mtt_reserve: 128,
        ..FwConfig::DEFAULT
    };
    let mut b = Bed::new(1, cfg);
    b.bring_up(0);
    let base = 8 + 16 + 4;
    let c = b.devs[0].fw.page_counts();
    assert_eq!((c.held, c.need), (base + 128, base + 128));
    let pd = b.alloc_pd(0);
    let data = [b.w.buffer(PAGE), b.w.buffer(PAGE)];
    let list: Vec<u64> = (0..257).map(|k| data[k % 2]).collect();
    let requests = b.devs[0].fw.stats().page_requests;
    let mut keys: Vec<u32> = (0..64u64)
        .map(|i| b.reg_user_mr(0, pd, (i << 24) + 0x800, 1 << 20, &list, i as u8 + 1))
        .collect();
    assert_eq!(b.devs[0].fw.stats().page_requests, requests + 1);
    let c = b.devs[0].fw.page_counts();
    assert_eq!((c.in_use, c.held, c.requested), (64, base + 128, 128));
    assert_eq!(c.need, base + 2 * 128);
    assert_eq!(b.service_pages(0), vec![128]);
    // At least the reserve is free again.
    let c = b.devs[0].fw.page_counts();
    assert_eq!((c.held, c.need), (base + 256, base + 256));
    assert_eq!(c.held - c.in_use, base + 128 + 64);
    // The chunk holds 128 table pages. Drop 17 keys (47 pages left) and
    // add 16 of 8 MiB (a directory and four table pages each): 127 pages,
    // no request; a 17th asks for the next chunk.
    for k in keys.drain(..17) {
        b.dereg_mr(0, k);
    }
    let long: Vec<u64> = (0..2048).map(|k| data[k % 2]).collect();
    for i in 0..17u64 {
        if i == 16 {
            assert_eq!(b.devs[0].fw.page_counts().in_use, 127);
            assert_eq!(b.devs[0].fw.stats().page_requests, requests + 1);
        }
        keys.push(b.reg_user_mr(0, pd, (0x100 + i) << 32, 8 << 20, &long, 0x80 + i as u8));
    }
    assert_eq!(b.service_pages(0), vec![128]);
    assert_eq!(b.devs[0].fw.page_counts().in_use, 132);
    for k in keys {
        b.dereg_mr(0, k);
    }
    let c = b.devs[0].fw.page_counts();
    assert_eq!((c.in_use, c.need), (0, base + 128));
    assert_eq!(b.take(0, 1000).len(), 256);
    assert_eq!(b.devs[0].fw.page_counts().held, base + 128);
    b.dealloc_pd(0, pd);
    b.tear_down(0);
    assert_eq!(b.devs[0].fw.log().total(), 0);
}
