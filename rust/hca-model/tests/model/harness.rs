// SPDX-License-Identifier: GPL-2.0

//! A test harness that plays the kernel and the provider: it allocates queue
//! memory, creates objects, builds WQEs with the mlx5-prm encoders, rings
//! doorbells the mlx5 way and polls CQEs by owner bit.

use hca_model::caps::Caps;
use hca_model::cq::CqAttr;
use hca_model::eq::EqAttr;
use hca_model::fabric::{Fabric, HcaSet};
use hca_model::hca::Hca;
use hca_model::mr::{Access, MrAttr};
use hca_model::qp::{ConnAttrs, QpAttr, QpService, QpState, RemoteQp};
use hca_model::qp_modify::{AttrMask, QpModify};
use mlx5_prm::cqe::{CQE_SIZE, OP_OWN_OFFSET};
use mlx5_prm::doorbell::UAR_PAGE_SIZE;
use mlx5_prm::eqe::{EQE_SIZE, OWNER_OFFSET};
use mlx5_prm::opcode::CqeOpcode;
use mlx5_prm::ring::{CQE_INIT_OP_OWN, EQE_INIT_OWNER};

use super::mem::{Kind, TestMem};

pub use hca_model::vec_storage::VecStorage;

/// The instances of a test fabric.
pub struct Hcas(pub Vec<Hca<VecStorage>>);

impl HcaSet for Hcas {
    type Storage = VecStorage;

    fn hcas(&mut self) -> &mut [Hca<VecStorage>] {
        &mut self.0
    }
}

/// What the "kernel" set up for one instance.
pub struct HcaCtx {
    /// The UAR page the kernel's EQs and the tests' CQs and QPs use.
    pub uar: u64,
    /// The completion EQ.
    pub comp: TestEq,
    /// The async EQ.
    pub async_eq: TestEq,
}

/// An EQ as its consumer sees it.
pub struct TestEq {
    pub eqn: u8,
    pub buf: u64,
    pub log: u32,
    pub ci: u32,
}

/// A scatter/gather entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    pub addr: u64,
    pub len: u32,
    pub lkey: u32,
}

/// The operation of a send work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WrOp {
    Nop,
    Send,
    SendImm(u32),
    /// SEND_INVAL: invalidate this rkey at the responder.
    SendInv(u32),
    Write {
        raddr: u64,
        rkey: u32,
    },
    WriteImm {
        raddr: u64,
        rkey: u32,
        imm: u32,
    },
    Read {
        raddr: u64,
        rkey: u32,
    },
    Cas {
        raddr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    },
    Faa {
        raddr: u64,
        rkey: u32,
        add: u64,
    },
    MaskedCas {
        raddr: u64,
        rkey: u32,
        compare: u64,
        compare_mask: u64,
        swap: u64,
        swap_mask: u64,
    },
    MaskedFaa {
        raddr: u64,
        rkey: u32,
        add: u64,
        boundary: u64,
    },
    /// UMR of the mkey `key` (the control segment's `imm`): its UMR control
    /// and mkey context segments; the page list, if any, is the WR's SGE.
    Umr {
        key: u32,
        ctrl: mlx5_prm::wqe::UmrCtrlSeg,
        mkey: mlx5_prm::wqe::MkeySeg,
    },
}

/// A send work request.
#[derive(Clone, Debug)]
pub struct Wr {
    pub id: u64,
    pub op: WrOp,
    pub sges: Vec<Sge>,
    /// Inline payload (instead of `sges`).
    pub inline: Option<Vec<u8>>,
    /// The datagram segment (address vector) of a UD send, placed right
    /// after the control segment.
    pub av: Option<mlx5_prm::wqe::DatagramSeg>,
    pub signaled: bool,
    pub solicited: bool,
    pub fence: bool,
}

impl Wr {
    /// A signaled work request.
    pub fn new(id: u64, op: WrOp, sges: &[Sge]) -> Self {
        Wr {
            id,
            op,
            sges: sges.to_vec(),
            inline: None,
            av: None,
            signaled: true,
            solicited: false,
            fence: false,
        }
    }
}

/// How the doorbell for a post is rung.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ring {
    /// 8-byte doorbell.
    Plain,
    /// BlueFlame copy.
    BlueFlame,
}

/// A work completion as the provider reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wc {
    pub wr_id: u64,
    pub opcode: CqeOpcode,
    /// `None` for success, else the syndrome.
    pub syndrome: Option<u8>,
    pub byte_len: u32,
    pub imm: u32,
    pub qpn: u32,
    pub wqe_counter: u16,
    pub send_opcode: u8,
    pub solicited: bool,
    /// Responder CQEs: the sender's QPN, LID and SL (`flags_rqpn`, `slid`).
    pub src_qpn: u32,
    pub slid: u16,
    pub sl: u8,
}

impl Wc {
    /// Whether the completion succeeded.
    pub fn ok(&self) -> bool {
        self.syndrome.is_none()
    }
}

/// A CQ as the provider sees it.
pub struct TestCq {
    pub hca: usize,
    pub cqn: u32,
    pub buf: u64,
    pub dbr: u64,
    pub log: u32,
    pub ci: u32,
    pub arm_sn: u8,
}

/// Sizes of a test QP.
#[derive(Clone, Copy, Debug)]
pub struct QpCaps {
    pub sq_wqebbs: u32,
    pub rq_wqes: u32,
    pub max_recv_sge: u32,
    pub max_send_sge: u32,
    pub max_inline: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps {
            sq_wqebbs: 64,
            rq_wqes: 64,
            max_recv_sge: 4,
            max_send_sge: 8,
            max_inline: 256,
        }
    }
}

/// A QP as the provider sees it.
pub struct TestQp {
    pub hca: usize,
    pub qpn: u32,
    pub sq_buf: u64,
    pub sq_wqebbs: u32,
    pub rq_buf: u64,
    pub rq_wqes: u32,
    pub rq_stride: u32,
    pub dbr: u64,
    pub uar: u64,
    pub bfreg: u8,
    pub half: u8,
    /// SQ producer counter (WQEBBs).
    pub cur_post: u16,
    /// RQ producer counter.
    pub rq_head: u16,
    /// wr_id of the WQE starting at each WQEBB index.
    pub sq_wrid: Vec<u64>,
    pub rq_wrid: Vec<u64>,
    pub send_cq: u32,
    pub recv_cq: u32,
}

/// The whole test setup: fabric, memory, per-instance kernel state.
pub struct World {
    pub fabric: Fabric<Hcas>,
    pub mem: TestMem,
    pub ctx: Vec<HcaCtx>,
    /// Work budget per `run` call.
    pub budget: u32,
}

/// The transitions from RESET that bring an RC QP to RTS, with the
/// attributes each sets.
pub const RTS_STEPS: [(QpState, AttrMask); 3] = [
    (
        QpState::Init,
        AttrMask::PKEY_INDEX
            .or(AttrMask::PORT)
            .or(AttrMask::ACCESS_FLAGS),
    ),
    (
        QpState::Rtr,
        AttrMask::AV
            .or(AttrMask::PATH_MTU)
            .or(AttrMask::DEST_QPN)
            .or(AttrMask::RQ_PSN)
            .or(AttrMask::MAX_DEST_RD_ATOMIC)
            .or(AttrMask::MIN_RNR_TIMER),
    ),
    (
        QpState::Rts,
        AttrMask::TIMEOUT
            .or(AttrMask::RETRY_CNT)
            .or(AttrMask::RNR_RETRY)
            .or(AttrMask::SQ_PSN)
            .or(AttrMask::MAX_QP_RD_ATOMIC),
    ),
];

/// The modify-QP attributes that bring an RC QP to RTS.
pub fn rts_attrs(dest: RemoteQp) -> ConnAttrs {
    ConnAttrs {
        access: Access::REMOTE_WRITE
            .union(Access::REMOTE_READ)
            .union(Access::REMOTE_ATOMIC),
        port: 1,
        path_mtu: 5,
        dest,
        max_dest_rd_atomic: 4,
        max_rd_atomic: 4,
        min_rnr_timer: 1,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        ..ConnAttrs::default()
    }
}

impl World {
    /// `n` instances, each with a UAR page, a completion EQ and an async EQ.
    pub fn new(n: usize) -> World {
        Self::with_slots(n, 64)
    }

    /// As [`World::new`] with `slots` entries in every object table.
    pub fn with_slots(n: usize, slots: usize) -> World {
        Self::build(n, slots, 6)
    }

    /// As [`World::new`] with `slots` table entries and EQs of
    /// `1 << eq_log` entries.
    pub fn build(n: usize, slots: usize, eq_log: u32) -> World {
        Self::build_with(n, slots, eq_log, Caps::DEFAULT)
    }

    /// As [`World::new`], every instance with the limits `caps` and 512
    /// entries in every object table.
    pub fn with_caps(n: usize, caps: Caps) -> World {
        Self::build_with(n, 512, 6, caps)
    }

    fn build_with(n: usize, slots: usize, eq_log: u32, caps: Caps) -> World {
        let hcas = (0..n)
            .map(|i| Hca::new(i as u16, caps, VecStorage::uniform(slots)))
            .collect();
        let mut w = World {
            fabric: Fabric::new(Hcas(hcas)),
            mem: TestMem::new(),
            ctx: Vec::new(),
            budget: 1 << 20,
        };
        for i in 0..n {
            let uar = w.mem.alloc(UAR_PAGE_SIZE as u64, Kind::DevRead);
            let comp = w.new_eq(i, uar, eq_log, false);
            let async_eq = w.new_eq(i, uar, 6, true);
            w.ctx.push(HcaCtx {
                uar,
                comp,
                async_eq,
            });
            w.eq_arm(i, false);
            w.eq_arm(i, true);
        }
        w
    }

    fn new_eq(&mut self, h: usize, uar: u64, log: u32, async_events: bool) -> TestEq {
        let size = (EQE_SIZE << log) as u64;
        let buf = self.mem.alloc(size, Kind::DevWrite);
        for i in 0..(1u64 << log) {
            self.mem.put(
                buf + i * EQE_SIZE as u64 + OWNER_OFFSET as u64,
                &[EQE_INIT_OWNER],
            );
        }
        let attr = EqAttr {
            log_size: log as u8,
            buf_addr: buf,
            uar_addr: uar,
            vector: if async_events { 0 } else { 1 },
            async_events,
        };
        let eqn = self.hca(h).create_eq(&attr).unwrap();
        TestEq {
            eqn,
            buf,
            log,
            ci: 0,
        }
    }

    /// Instance `h`.
    pub fn hca(&mut self, h: usize) -> &mut Hca<VecStorage> {
        self.fabric.hca(h as u16).unwrap()
    }

    /// Runs the engine until no work is left.
    pub fn run(&mut self) {
        for _ in 0..1_000_000 {
            let r = self.fabric.run(&mut self.mem, self.budget);
            if !r.more {
                return;
            }
        }
        panic!("engine never ran out of work");
    }

    /// Advances the clock by `ns` and runs.
    pub fn advance(&mut self, ns: u64) {
        let now = self.fabric.now() + ns;
        self.fabric.set_time(now);
        self.run();
    }

    /// Allocates a data buffer.
    pub fn buffer(&mut self, len: u64) -> u64 {
        self.mem.alloc(len, Kind::Data)
    }

    /// Allocates a PD on instance `h`.
    pub fn pd(&mut self, h: usize) -> u32 {
        self.hca(h).alloc_pd().unwrap()
    }

    /// Registers `len` bytes at `addr` (IOVA = DMA address).
    pub fn mr(&mut self, h: usize, pdn: u32, addr: u64, len: u64, access: Access) -> u32 {
        let key = self
            .hca(h)
            .create_mr(&MrAttr {
                pdn,
                iova: addr,
                length: len,
                dma_addr: addr,
                access,
            })
            .unwrap();
        self.mem.add_mr(addr, len, h, key);
        key
    }

    /// Deregisters an MR.
    pub fn dereg(&mut self, h: usize, key: u32) {
        self.hca(h).destroy_mr(key).unwrap();
        self.mem.remove_mr(h, key);
    }

    /// Creates a CQ of `1 << log` entries on instance `h`.
    pub fn cq(&mut self, h: usize, log: u32) -> TestCq {
        let buf = self.mem.alloc((CQE_SIZE << log) as u64, Kind::DevWrite);
        for i in 0..(1u64 << log) {
            self.mem.put(
                buf + i * CQE_SIZE as u64 + OP_OWN_OFFSET as u64,
                &[CQE_INIT_OP_OWN],
            );
        }
        let dbr = self.mem.alloc(8, Kind::DevRead);
        let attr = CqAttr {
            log_size: log as u8,
            buf_addr: buf,
            buf_pages: None,
            dbr_addr: dbr,
            eqn: self.ctx[h].comp.eqn,
            uar_addr: self.ctx[h].uar,
        };
        let cqn = self.hca(h).create_cq(&attr).unwrap();
        TestCq {
            hca: h,
            cqn,
            buf,
            dbr,
            log,
            ci: 0,
            arm_sn: 0,
        }
    }

    /// Creates an RC QP on instance `h`.
    pub fn qp(&mut self, h: usize, pdn: u32, scq: &TestCq, rcq: &TestCq, caps: QpCaps) -> TestQp {
        self.qp_of(h, pdn, scq, rcq, caps, QpService::Rc).unwrap()
    }

    /// Creates a QP of `service` on instance `h`.
    pub fn qp_of(
        &mut self,
        h: usize,
        pdn: u32,
        scq: &TestCq,
        rcq: &TestCq,
        caps: QpCaps,
        service: QpService,
    ) -> Result<TestQp, hca_model::error::Error> {
        let sq_buf = self
            .mem
            .alloc((caps.sq_wqebbs as u64 * 64).max(64), Kind::DevRead);
        let rq_stride = (caps.max_recv_sge.max(1) * 16).next_power_of_two();
        let rq_buf = self
            .mem
            .alloc((caps.rq_wqes * rq_stride).max(16) as u64, Kind::DevRead);
        let dbr = self.mem.alloc(8, Kind::DevRead);
        let uar = self.ctx[h].uar;
        let attr = QpAttr {
            service,
            pdn,
            send_cqn: scq.cqn,
            recv_cqn: rcq.cqn,
            sq_wqebbs: caps.sq_wqebbs,
            sq_buf_addr: sq_buf,
            rq_wqes: caps.rq_wqes,
            rq_stride,
            rq_buf_addr: rq_buf,
            buf_pages: None,
            dbr_addr: dbr,
            uar_addr: uar,
            bfreg: 1,
            max_send_sge: caps.max_send_sge,
            max_inline_data: caps.max_inline,
        };
        let qpn = self.hca(h).create_qp(&attr)?;
        Ok(TestQp {
            hca: h,
            qpn,
            sq_buf,
            sq_wqebbs: caps.sq_wqebbs,
            rq_buf,
            rq_wqes: caps.rq_wqes,
            rq_stride,
            dbr,
            uar,
            bfreg: 1,
            half: 0,
            cur_post: 0,
            rq_head: 0,
            sq_wrid: vec![0; caps.sq_wqebbs.max(1) as usize],
            rq_wrid: vec![0; caps.rq_wqes.max(1) as usize],
            send_cq: scq.cqn,
            recv_cq: rcq.cqn,
        })
    }

    /// Modifies a QP.
    pub fn modify(
        &mut self,
        qp: &TestQp,
        state: QpState,
        mask: AttrMask,
        attrs: ConnAttrs,
    ) -> Result<(), hca_model::error::Error> {
        let m = QpModify {
            mask: mask.or(AttrMask::STATE),
            state,
            cur_state: QpState::Reset,
            attrs,
        };
        self.hca(qp.hca).modify_qp(qp.qpn, &m)
    }

    /// Brings `qp` to RTS sending to `dest` with `attrs` (dest filled in).
    pub fn to_rts_with(&mut self, qp: &TestQp, dest: RemoteQp, attrs: ConnAttrs) {
        let a = ConnAttrs { dest, ..attrs };
        for (state, mask) in RTS_STEPS {
            self.modify(qp, state, mask, a).unwrap();
        }
    }

    /// Connects two QPs (possibly the same) with the default attributes.
    pub fn connect(&mut self, a: &TestQp, b: &TestQp) {
        let da = RemoteQp {
            hca: b.hca as u16,
            qpn: b.qpn,
        };
        let db = RemoteQp {
            hca: a.hca as u16,
            qpn: a.qpn,
        };
        self.to_rts_with(a, da, rts_attrs(da));
        if a.qpn != b.qpn || a.hca != b.hca {
            self.to_rts_with(b, db, rts_attrs(db));
        }
    }
}

/// A small deterministic PRNG (xorshift64*).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True with probability `num / den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// The seed of a randomized test: `HCA_MODEL_SEED` or a fixed default.
pub fn seed(default: u64) -> u64 {
    std::env::var("HCA_MODEL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// A scale factor for long randomized runs: `HCA_MODEL_ITERS` (default 1).
pub fn scale() -> u64 {
    std::env::var("HCA_MODEL_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}
