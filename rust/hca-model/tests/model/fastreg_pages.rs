// SPDX-License-Identifier: GPL-2.0

//! Fast MRs of hundreds of scattered pages, as kernel ULPs register them
//! (RDS's 1 MiB MRs of 257 pages, NVMe-oF's and iSER's I/O buffers): a
//! data segment names the whole MR, and the engine translates its pages
//! one by one as the data moves. WRITE, READ and SEND/RECV span every
//! page, with the fast MR on either side of each; and 64 segments may each
//! name a fast MR of many pages. `fastreg_faults.rs` breaks an entry of
//! such a list.

use hca_model::caps::Caps;
use hca_model::mr::Access;
use mlx5_prm::wqe::{mkey_flags, mkey_mask, umr_flags, MkeySeg, UmrCtrlSeg, MTT_EN_RD, MTT_EN_WR};

use super::harness::*;

/// A 4 KiB page.
pub const PAGE: u64 = 4096;
/// The largest IB MTU: the engine gathers a packet this long before it
/// writes any of it.
pub const PACKET: u64 = 4096;

/// The default limits, with room for `pages`-page fast MRs and for the
/// longest gather (62 segments after the control segment: a WQE's DS
/// count is 6 bits, so it has at most 1008 bytes) and scatter (64 in a
/// 1024-byte receive WQE) lists a WQE holds.
pub fn caps(pages: u32) -> Caps {
    Caps {
        max_fast_reg_pages: pages,
        max_send_sge: 62,
        max_recv_sge: 64,
        ..Caps::DEFAULT
    }
}

/// A registered fast MR, as its owner knows it.
pub struct FastMr {
    pub key: u32,
    /// The page list and its key.
    pub list: u64,
    pub list_key: u32,
    /// DMA address of each page, in IOVA order.
    pub pages: Vec<u64>,
    pub page: u64,
    /// The registered range: from `head` bytes into the first page to
    /// `tail` bytes short of the end of the last.
    pub iova: u64,
    pub len: u64,
    pub head: u64,
}

impl FastMr {
    pub fn sge(&self, off: u64, len: u64) -> Sge {
        Sge {
            addr: self.iova + off,
            len: len as u32,
            lkey: self.key,
        }
    }

    /// Where byte `off` of the registered range lives.
    pub fn dma(&self, off: u64) -> u64 {
        let at = self.head + off;
        self.pages[(at / self.page) as usize] + at % self.page
    }

    /// The registered range's bytes, page by page in IOVA order.
    pub fn bytes(&self, w: &World) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len as usize);
        let mut off = 0;
        while off < self.len {
            let n = (self.page - (self.head + off) % self.page).min(self.len - off);
            out.extend(w.read(self.dma(off), n as usize));
            off += n;
        }
        out
    }

    /// Writes `data` over the registered range from its start.
    pub fn fill(&self, w: &mut World, data: &[u8]) {
        let mut off = 0;
        while off < data.len() as u64 {
            let n = (self.page - (self.head + off) % self.page).min(data.len() as u64 - off);
            w.fill(self.dma(off), &data[off as usize..(off + n) as usize]);
            off += n;
        }
    }
}

/// Allocates `n` pages of `page` bytes on instance `h` (separate
/// allocations, so guard zones keep any two apart), lists them out of
/// address order, creates a fast MR of PD `pd` with room for them and
/// registers it through `qp` (whose CQ is `cq`): `n` pages' worth of IOVA
/// from `iova`, minus `head` and `tail` bytes, with local write and remote
/// read and write.
pub fn fast_mr(
    w: &mut World,
    qp: &mut TestQp,
    cq: &mut TestCq,
    pd: u32,
    n: usize,
    page: u64,
    (iova, head, tail): (u64, u64, u64),
) -> FastMr {
    let rights = mkey_flags::LOCAL_WRITE | mkey_flags::REMOTE_WRITE | mkey_flags::REMOTE_READ;
    let h = qp.hca;
    let alloc: Vec<u64> = (0..n)
        .map(|_| {
            // TestMem aligns to 4 KiB: take the aligned page inside twice
            // its size.
            let raw = w.buffer(if page > PAGE { 2 * page } else { page });
            raw.next_multiple_of(page)
        })
        .collect();
    // 97 is prime to every `n` here: a permutation, far from address order.
    let pages: Vec<u64> = (0..n).map(|k| alloc[k * 97 % n]).collect();
    let list_len = (n as u64 * 8).next_multiple_of(64);
    let list = w.buffer(list_len);
    let list_key = w.mr(h, pd, list, list_len, Access::LOCAL_WRITE);
    for (k, p) in pages.iter().enumerate() {
        w.fill(
            list + 8 * k as u64,
            &(p | MTT_EN_RD | MTT_EN_WR).to_be_bytes(),
        );
    }
    let free_key = w.hca(h).create_fast_mr(pd, n as u32).unwrap();
    let key = (free_key & !0xff) | 0x5c;
    let octowords = (list_len / 16) as u16;
    let len = n as u64 * page - head - tail;
    let reg = Wr::new(
        0xfa57,
        WrOp::Umr {
            key,
            ctrl: UmrCtrlSeg {
                flags: umr_flags::CHECK_FREE,
                xlt_octowords: octowords,
                mkey_mask: mkey_mask::FAST_REG | mkey_mask::A,
                ..UmrCtrlSeg::default()
            },
            mkey: MkeySeg {
                flags: rights | mkey_flags::LOCAL_READ | mkey_flags::ACCESS_MODE_MTT,
                qpn_mkey7_0: 0xffff_ff00 | (key & 0xff),
                start_addr: iova + head,
                len,
                xlt_oct_size: u32::from(octowords),
                log2_page_size: page.trailing_zeros() as u8,
                ..MkeySeg::default()
            },
        },
        &[Sge {
            addr: list,
            len: list_len as u32,
            lkey: list_key,
        }],
    );
    w.post_send(qp, &reg).unwrap();
    w.run();
    let wc = w.poll(cq, &[qp]).expect("UMR completion");
    assert!(wc.ok(), "registration of {n} pages failed: {wc:?}");
    // The pages become reachable (for the memory checker) as the MR.
    for p in &pages {
        w.mem.add_mr(*p, page, h, key);
    }
    FastMr {
        key,
        list,
        list_key,
        pages,
        page,
        iova: iova + head,
        len,
        head,
    }
}

/// Two connected QPs, A on instance 0 and B on instance 1, with a linear
/// buffer of `len` bytes each on A (`src`, `dst`, all rights).
pub struct Bed {
    pub w: World,
    pub a: TestQp,
    pub b: TestQp,
    pub acq: TestCq,
    pub bcq: TestCq,
    pub pa: u32,
    pub pb: u32,
    pub src: u64,
    pub dst: u64,
    pub akey: u32,
}

impl Bed {
    pub fn new(pages: u32, qp_caps: QpCaps, len: u64) -> Bed {
        let mut w = World::with_caps(2, caps(pages));
        let (pa, pb) = (w.pd(0), w.pd(1));
        let acq = w.cq(0, 8);
        let bcq = w.cq(1, 8);
        let a = w.qp(0, pa, &acq, &acq, qp_caps);
        let b = w.qp(1, pb, &bcq, &bcq, qp_caps);
        w.connect(&a, &b);
        let src = w.buffer(2 * len);
        let dst = src + len;
        let akey = w.mr(0, pa, src, 2 * len, Access::ALL);
        Bed {
            w,
            a,
            b,
            acq,
            bcq,
            pa,
            pb,
            src,
            dst,
            akey,
        }
    }

    /// B's fast MR of `n` pages.
    pub fn fast(&mut self, n: usize, page: u64, head: u64, tail: u64) -> FastMr {
        self.fast_on(1, n, page, (0x5000_0000_0000, head, tail))
    }

    /// A fast MR of `n` pages on A (`h` 0) or B (1), registered by that
    /// side's QP, with local write and remote read and write.
    pub fn fast_on(&mut self, h: usize, n: usize, page: u64, range: (u64, u64, u64)) -> FastMr {
        let (qp, cq, pd) = if h == 0 {
            (&mut self.a, &mut self.acq, self.pa)
        } else {
            (&mut self.b, &mut self.bcq, self.pb)
        };
        fast_mr(&mut self.w, qp, cq, pd, n, page, range)
    }

    pub fn asge(&self, buf: u64, off: u64, len: u64) -> Sge {
        Sge {
            addr: buf + off,
            len: len as u32,
            lkey: self.akey,
        }
    }

    /// Posts `wr` on A and returns its completion.
    pub fn on_a(&mut self, wr: &Wr) -> Wc {
        self.w.post_send(&mut self.a, wr).unwrap();
        self.w.run();
        self.w
            .poll(&mut self.acq, &[&self.a])
            .expect("A's completion")
    }

    /// Posts `wr` on B and returns its completion.
    pub fn on_b(&mut self, wr: &Wr) -> Wc {
        self.w.post_send(&mut self.b, wr).unwrap();
        self.w.run();
        self.w
            .poll(&mut self.bcq, &[&self.b])
            .expect("B's completion")
    }
}

/// WRITE, READ and SEND/RECV over the whole of a fast MR of `n` pages of
/// `page` bytes (from `head` bytes into the first to `tail` short of the
/// end of the last), with the MR as remote target, remote source,
/// receive buffer, gather list and READ scatter list; data compared.
fn every_page(n: usize, page: u64, head: u64, tail: u64) {
    let len = n as u64 * page;
    let mut s = Bed::new(n as u32, QpCaps::default(), len);
    let mr = s.fast(n, page, head, tail);
    let l = mr.len;
    let mut rng = Rng(0xfa57_0000 ^ n as u64);

    // A WRITEs from its buffer into B's pages.
    let data = rng.bytes(l as usize);
    s.w.fill(s.src, &data);
    let write = Wr::new(
        1,
        WrOp::Write {
            raddr: mr.iova,
            rkey: mr.key,
        },
        &[s.asge(s.src, 0, l)],
    );
    let wc = s.on_a(&write);
    assert!(wc.ok(), "WRITE: {wc:?}");
    assert!(mr.bytes(&s.w) == data, "WRITE: the pages differ");

    // A READs B's pages back.
    let data = rng.bytes(l as usize);
    mr.fill(&mut s.w, &data);
    let read = Wr::new(
        2,
        WrOp::Read {
            raddr: mr.iova,
            rkey: mr.key,
        },
        &[s.asge(s.dst, 0, l)],
    );
    let wc = s.on_a(&read);
    assert!(wc.ok() && wc.byte_len as u64 == l, "READ: {wc:?}");
    assert!(s.w.read(s.dst, l as usize) == data, "READ: the data differ");

    // A SENDs into a receive that names the whole MR.
    let data = rng.bytes(l as usize);
    s.w.fill(s.src, &data);
    s.w.post_recv(&mut s.b, 3, &[mr.sge(0, l)]);
    let wc = s.on_a(&Wr::new(3, WrOp::Send, &[s.asge(s.src, 0, l)]));
    assert!(wc.ok(), "SEND: {wc:?}");
    let rc = s.w.poll(&mut s.bcq, &[&s.b]).expect("receive completion");
    assert!(rc.ok() && rc.byte_len as u64 == l, "RECV: {rc:?}");
    assert!(mr.bytes(&s.w) == data, "RECV: the pages differ");

    // B SENDs from the MR (its gather list) into A's buffer.
    let data = rng.bytes(l as usize);
    mr.fill(&mut s.w, &data);
    let rsge = s.asge(s.dst, 0, l);
    s.w.post_recv(&mut s.a, 4, &[rsge]);
    let wc = s.on_b(&Wr::new(4, WrOp::Send, &[mr.sge(0, l)]));
    assert!(wc.ok(), "SEND from the MR: {wc:?}");
    let rc = s.w.poll(&mut s.acq, &[&s.a]).expect("receive completion");
    assert!(rc.ok() && rc.byte_len as u64 == l, "RECV: {rc:?}");
    assert!(
        s.w.read(s.dst, l as usize) == data,
        "SEND from the MR: differs"
    );

    // B READs A's buffer into the MR (its READ scatter list).
    let data = rng.bytes(l as usize);
    s.w.fill(s.src, &data);
    let read = Wr::new(
        5,
        WrOp::Read {
            raddr: s.src,
            rkey: s.akey,
        },
        &[mr.sge(0, l)],
    );
    let wc = s.on_b(&read);
    assert!(wc.ok(), "READ into the MR: {wc:?}");
    assert!(mr.bytes(&s.w) == data, "READ into the MR: the pages differ");
    assert!(s.w.mem.violations.is_empty());
}

/// 300 scattered 4 KiB pages (more than RDS's 257), the range starting
/// and ending inside a page.
#[test]
fn every_page_of_300() {
    every_page(300, PAGE, 0x100, 0x80);
}

/// 1024 scattered 4 KiB pages: 4 MiB in one segment.
#[test]
fn every_page_of_1024() {
    every_page(1024, PAGE, 0x7f8, 0x10);
}

/// Three 2 MiB pages, 2 MiB aligned and apart.
#[test]
fn every_page_of_three_2mib_pages() {
    every_page(3, 2 << 20, 0x1234, 0x777);
}

/// The device refuses fast MRs longer than its limit.
#[test]
fn the_page_limit_is_enforced() {
    let mut w = World::new(1);
    let pd = w.pd(0);
    let max = Caps::DEFAULT.max_fast_reg_pages;
    assert!(max >= 512, "ULPs need 257 pages or more");
    assert!(w.hca(0).create_fast_mr(pd, max).is_ok());
    assert!(w.hca(0).create_fast_mr(pd, max + 1).is_err());
    let mut w = World::with_caps(1, caps(4096));
    let pd = w.pd(0);
    assert!(w.hca(0).create_fast_mr(pd, 4096).is_ok());
}

/// A SEND whose 62 gather segments each name a whole fast MR of 5 pages
/// into a receive whose 64 scatter segments each name a whole fast MR of
/// 5 pages; then a WRITE from 61 of those gather MRs into one fast MR of
/// 320 pages, and a READ of it back into them (a READ's scatter list of
/// 61 fast MRs). Every page of every MR is compared.
#[test]
fn sixty_four_segments_each_on_a_fast_mr() {
    let qp_caps = QpCaps {
        max_send_sge: 62,
        max_recv_sge: 64,
        ..QpCaps::default()
    };
    let mut s = Bed::new(320, qp_caps, PAGE);
    // Each MR from its own IOVA, starting 16 k bytes into its first page
    // and ending 0x30 short of the end of its fifth.
    let range = |k: usize| {
        (
            0x6000_0000_0000 + k as u64 * 0x100_0000,
            0x10 * k as u64,
            0x30,
        )
    };
    let scatter: Vec<FastMr> = (0..64).map(|k| s.fast_on(1, 5, PAGE, range(k))).collect();
    let gather: Vec<FastMr> = (0..62).map(|k| s.fast_on(0, 5, PAGE, range(k))).collect();
    let mut rng = Rng(64);
    let mut sent = Vec::new();
    for mr in &gather {
        let data = rng.bytes(mr.len as usize);
        mr.fill(&mut s.w, &data);
        sent.extend(data);
    }
    let rsges: Vec<Sge> = scatter.iter().map(|m| m.sge(0, m.len)).collect();
    s.w.post_recv(&mut s.b, 1, &rsges);
    let gsges: Vec<Sge> = gather.iter().map(|m| m.sge(0, m.len)).collect();
    let wc = s.on_a(&Wr::new(1, WrOp::Send, &gsges));
    assert!(wc.ok(), "SEND: {wc:?}");
    let rc = s.w.poll(&mut s.bcq, &[&s.b]).expect("receive completion");
    assert!(rc.ok() && rc.byte_len as usize == sent.len(), "{rc:?}");
    let mut got = Vec::new();
    for mr in &scatter {
        got.extend(mr.bytes(&s.w));
    }
    assert!(got[..sent.len()] == sent[..], "the scatter MRs differ");
    assert!(got[sent.len()..].iter().all(|&b| b == 0));

    // WRITE from 61 of them (the raddr segment leaves room for 61).
    let big = s.fast_on(1, 320, PAGE, (0x7000_0000_0000, 0x200, 0));
    let total: u64 = gather[..61].iter().map(|m| m.len).sum();
    assert!(total <= big.len);
    let write = Wr::new(
        2,
        WrOp::Write {
            raddr: big.iova,
            rkey: big.key,
        },
        &gsges[..61],
    );
    let wc = s.on_a(&write);
    assert!(wc.ok(), "WRITE: {wc:?}");
    assert!(big.bytes(&s.w)[..total as usize] == sent[..total as usize]);

    // READ it back, changed, into the 61 (zeroed first).
    let data = rng.bytes(total as usize);
    big.fill(&mut s.w, &data);
    for mr in &gather {
        mr.fill(&mut s.w, &vec![0; mr.len as usize]);
    }
    let read = Wr::new(
        3,
        WrOp::Read {
            raddr: big.iova,
            rkey: big.key,
        },
        &gsges[..61],
    );
    let wc = s.on_a(&read);
    assert!(wc.ok(), "READ: {wc:?}");
    let mut got = Vec::new();
    for mr in &gather[..61] {
        got.extend(mr.bytes(&s.w));
    }
    assert!(got == data, "the READ's scatter MRs differ");
    assert!(s.w.mem.violations.is_empty());
}
