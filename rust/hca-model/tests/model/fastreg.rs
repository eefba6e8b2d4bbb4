// SPDX-License-Identifier: GPL-2.0

//! Fast registration through UMR WQEs, as mlx5_ib posts them for
//! `IB_WR_REG_MR` and `IB_WR_LOCAL_INV`: the MR's pages come from a page
//! list in memory, RDMA moves data to and from those pages in IOVA order,
//! and an invalidated key no longer matches.

use hca_model::mr::Access;
use mlx5_prm::opcode::{CqeOpcode, CqeSyndrome, SendOpcode};
use mlx5_prm::wqe::{
    mkey_flags, mkey_mask, umr_flags, MkeySeg, UmrCtrlSeg, MKEY_STATUS_FREE, MTT_EN_RD, MTT_EN_WR,
};

use super::harness::*;

const PAGE: u64 = 4096;

struct Setup {
    w: World,
    a: TestQp,
    b: TestQp,
    acq: TestCq,
    bcq: TestCq,
    abuf: u64,
    akey: u32,
    /// B's page list, registered on B (`list_key`).
    list: u64,
    list_key: u32,
    /// B's fast MR (its key while free).
    fast: u32,
    /// Three pages of B, far apart, in IOVA order.
    pages: [u64; 3],
}

fn setup() -> Setup {
    let mut w = World::new(2);
    let (pa, pb) = (w.pd(0), w.pd(1));
    let acq = w.cq(0, 8);
    let bcq = w.cq(1, 8);
    let a = w.qp(0, pa, &acq, &acq, QpCaps::default());
    let b = w.qp(1, pb, &bcq, &bcq, QpCaps::default());
    w.connect(&a, &b);
    let abuf = w.buffer(4 * PAGE);
    let akey = w.mr(0, pa, abuf, 4 * PAGE, Access::ALL);
    let list = w.buffer(PAGE);
    let list_key = w.mr(1, pb, list, PAGE, Access::LOCAL_WRITE);
    // Separate allocations: guard zones keep them apart.
    let pages = [w.buffer(PAGE), w.buffer(PAGE), w.buffer(PAGE)];
    let fast = w.hca(1).create_fast_mr(pb, 4).unwrap();
    // Page order deliberately not address order.
    let order = [pages[2], pages[0], pages[1]];
    for (i, p) in order.iter().enumerate() {
        w.fill(
            list + i as u64 * 8,
            &(p | MTT_EN_RD | MTT_EN_WR).to_be_bytes(),
        );
    }
    Setup {
        w,
        a,
        b,
        acq,
        bcq,
        abuf,
        akey,
        list,
        list_key,
        fast,
        pages: order,
    }
}

/// The UMR mlx5_ib builds for `IB_WR_REG_MR`.
fn reg_wr(s: &Setup, key: u32, iova: u64, len: u64, rights: u8) -> Wr {
    let mask = mkey_mask::FAST_REG | mkey_mask::A;
    Wr::new(
        1,
        WrOp::Umr {
            key,
            ctrl: UmrCtrlSeg {
                flags: umr_flags::CHECK_FREE,
                xlt_octowords: 4,
                mkey_mask: mask,
                ..UmrCtrlSeg::default()
            },
            mkey: MkeySeg {
                flags: rights | mkey_flags::LOCAL_READ | mkey_flags::ACCESS_MODE_MTT,
                qpn_mkey7_0: 0xffff_ff00 | (key & 0xff),
                start_addr: iova,
                len,
                xlt_oct_size: 4,
                log2_page_size: 12,
                ..MkeySeg::default()
            },
        },
        &[Sge {
            addr: s.list,
            len: 64,
            lkey: s.list_key,
        }],
    )
}

/// The UMR mlx5_ib builds for `IB_WR_LOCAL_INV`.
fn inv_wr(key: u32) -> Wr {
    Wr::new(
        2,
        WrOp::Umr {
            key,
            ctrl: UmrCtrlSeg {
                flags: umr_flags::INLINE,
                mkey_mask: mkey_mask::FREE,
                ..UmrCtrlSeg::default()
            },
            mkey: MkeySeg {
                status: MKEY_STATUS_FREE,
                ..MkeySeg::default()
            },
        },
        &[],
    )
}

/// Registration, a WRITE and a READ across its three pages, invalidation,
/// then a WRITE with the old key that fails with a remote access error.
#[test]
fn register_write_read_invalidate() {
    let mut s = setup();
    let key = (s.fast & !0xff) | 0x37;
    // IOVA 0x5000_0100, 3 pages' worth minus the head offset.
    let iova = 0x5000_0100u64;
    let len = 3 * PAGE - 0x100;
    let rights = mkey_flags::LOCAL_WRITE | mkey_flags::REMOTE_WRITE | mkey_flags::REMOTE_READ;
    let wr = reg_wr(&s, key, iova, len, rights);
    s.w.post_send(&mut s.b, &wr).unwrap();
    s.w.run();
    let wc = s.w.poll(&mut s.bcq, &[&s.b]).expect("UMR completion");
    assert!(wc.ok(), "UMR failed: {wc:?}");
    assert_eq!(wc.opcode, CqeOpcode::Req);
    assert_eq!(wc.send_opcode, u8::from(SendOpcode::Umr));
    // The pages become reachable (for the memory checker) as B's MR.
    for p in s.pages {
        s.w.mem.add_mr(p, PAGE, 1, key);
    }

    let data = Rng(0x5eed_fa57).bytes(len as usize);
    s.w.fill(s.abuf, &data);
    let write = Wr::new(
        3,
        WrOp::Write {
            raddr: iova,
            rkey: key,
        },
        &[Sge {
            addr: s.abuf,
            len: len as u32,
            lkey: s.akey,
        }],
    );
    s.w.post_send(&mut s.a, &write).unwrap();
    s.w.run();
    let wc = s.w.poll(&mut s.acq, &[&s.a]).expect("WRITE completion");
    assert!(wc.ok(), "WRITE failed: {wc:?}");
    // IOVA order is the list order: page 0 from offset 0x100.
    let head = (PAGE - 0x100) as usize;
    assert_eq!(s.w.read(s.pages[0] + 0x100, head), data[..head]);
    assert_eq!(
        s.w.read(s.pages[1], PAGE as usize),
        data[head..head + PAGE as usize]
    );
    assert_eq!(
        s.w.read(s.pages[2], PAGE as usize),
        data[head + PAGE as usize..]
    );

    // READ 64 bytes straddling the second page boundary.
    let at = iova + (2 * PAGE - 0x100) - 32;
    let read = Wr::new(
        4,
        WrOp::Read {
            raddr: at,
            rkey: key,
        },
        &[Sge {
            addr: s.abuf + 3 * PAGE,
            len: 64,
            lkey: s.akey,
        }],
    );
    s.w.post_send(&mut s.a, &read).unwrap();
    s.w.run();
    let wc = s.w.poll(&mut s.acq, &[&s.a]).expect("READ completion");
    assert!(wc.ok(), "READ failed: {wc:?}");
    let off = (at - iova) as usize;
    assert_eq!(s.w.read(s.abuf + 3 * PAGE, 64), data[off..off + 64]);

    // Invalidate; the old key no longer works.
    s.w.post_send(&mut s.b, &inv_wr(key)).unwrap();
    s.w.run();
    let wc = s.w.poll(&mut s.bcq, &[&s.b]).expect("LOCAL_INV completion");
    assert!(wc.ok(), "LOCAL_INV failed: {wc:?}");
    let again = Wr::new(
        5,
        WrOp::Write {
            raddr: iova,
            rkey: key,
        },
        &[Sge {
            addr: s.abuf,
            len: 8,
            lkey: s.akey,
        }],
    );
    s.w.post_send(&mut s.a, &again).unwrap();
    s.w.run();
    let wc =
        s.w.poll(&mut s.acq, &[&s.a])
            .expect("failed WRITE completion");
    assert_eq!(wc.syndrome, Some(u8::from(CqeSyndrome::RemoteAccess)));
}

/// A UMR that fails (more pages than the MR holds) completes in error and
/// moves the QP to ERR, like any local error; the MR stays free.
#[test]
fn oversized_registration_fails_locally() {
    let mut s = setup();
    let key = s.fast;
    let wr = reg_wr(&s, key, 0x5000_0000, 5 * PAGE, mkey_flags::LOCAL_WRITE);
    s.w.post_send(&mut s.b, &wr).unwrap();
    s.w.run();
    let wc = s.w.poll(&mut s.bcq, &[&s.b]).expect("UMR completion");
    assert_eq!(wc.syndrome, Some(u8::from(CqeSyndrome::LocalLength)));
    assert_eq!(s.w.state(&s.b), hca_model::qp::QpState::Err);
    let mr = s.w.hca(1).query_mr(key).expect("the MR still exists");
    assert_eq!(mr.fast_valid(), Some(false));
}

/// SEND_INVAL (a target answering with IB_WR_SEND_WITH_INV, as nvmet-rdma
/// does): the message lands in B's receive buffer, B's CQE is RESP_SEND_INV
/// naming the key, and B's fast MR is free afterwards, so a WRITE through
/// the key fails. A second SEND_INVAL of the now stale key is an invalid
/// request: the requester gets REMOTE_INVAL_REQ.
#[test]
fn send_with_remote_invalidation() {
    let mut s = setup();
    let key = (s.fast & !0xff) | 0x51;
    let iova = 0x6000_0000u64;
    let rights = mkey_flags::LOCAL_WRITE | mkey_flags::REMOTE_WRITE;
    let wr = reg_wr(&s, key, iova, PAGE, rights);
    s.w.post_send(&mut s.b, &wr).unwrap();
    s.w.run();
    assert!(s.w.poll(&mut s.bcq, &[&s.b]).expect("UMR").ok());
    for p in s.pages {
        s.w.mem.add_mr(p, PAGE, 1, key);
    }
    // B's receive buffer: the second half of its page-list page (an MR
    // of B's PD with local write).
    let (bbuf, bkey) = (s.list + PAGE / 2, s.list_key);
    s.w.post_recv(
        &mut s.b,
        7,
        &[Sge {
            addr: bbuf,
            len: 64,
            lkey: bkey,
        }],
    );
    s.w.fill(s.abuf, b"invalidate me, then answer    ");
    let send = Wr::new(
        8,
        WrOp::SendInv(key),
        &[Sge {
            addr: s.abuf,
            len: 30,
            lkey: s.akey,
        }],
    );
    s.w.post_send(&mut s.a, &send).unwrap();
    s.w.run();
    let wc =
        s.w.poll(&mut s.acq, &[&s.a])
            .expect("SEND_INVAL completion");
    assert!(wc.ok(), "SEND_INVAL failed: {wc:?}");
    let rc = s.w.poll(&mut s.bcq, &[&s.b]).expect("receive completion");
    assert!(rc.ok(), "receive failed: {rc:?}");
    assert_eq!(rc.opcode, CqeOpcode::RespSendInv);
    assert_eq!(rc.imm, key, "the CQE names the invalidated key");
    assert_eq!(rc.byte_len, 30);
    assert_eq!(s.w.read(bbuf, 30), b"invalidate me, then answer    ");
    let mr = s.w.hca(1).query_mr(key).expect("the MR still exists");
    assert_eq!(mr.fast_valid(), Some(false));

    // The stale key: an invalid request, and the QPs go to ERR.
    s.w.post_recv(
        &mut s.b,
        9,
        &[Sge {
            addr: bbuf,
            len: 64,
            lkey: bkey,
        }],
    );
    s.w.post_send(&mut s.a, &Wr::new(10, WrOp::SendInv(key), &[]))
        .unwrap();
    s.w.run();
    let wc = s.w.poll(&mut s.acq, &[&s.a]).expect("failed SEND_INVAL");
    assert_eq!(wc.syndrome, Some(u8::from(CqeSyndrome::RemoteInvalReq)));
    assert_eq!(s.w.state(&s.b), hca_model::qp::QpState::Err);
}
