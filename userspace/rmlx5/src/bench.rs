// SPDX-License-Identifier: GPL-2.0

//! Measuring the provider alone (feature `bench-backend`, off by default).
//!
//! [`NullHca`] is a device with nothing behind its doorbells. Its contexts
//! run the unchanged fast path of the provider (WQEs built into the SQ,
//! doorbell record, UAR doorbell or BlueFlame copy, CQ polling by owner bit,
//! SET_CI, arming), but the queues, doorbell records and the UAR page are
//! plain process memory that nothing executes, and no doorbell is followed
//! by a kick. What the provider costs is then all that a benchmark measures.
//!
//! The caller plays the device with three views:
//!
//! - [`SendQueue`]: the SQ doorbell record (how far software posted) and
//!   the control segment of any WQE, to find the WQEs posted and decide
//!   which of them get a completion;
//! - [`RecvQueue`]: the receive counter of the doorbell record;
//! - [`CqRing`]: writes whole CQEs (encoded by the caller, e.g. with
//!   `mlx5_prm::cqe::Cqe64`) into a CQ, the body first and `op_own` last,
//!   as a device does, refusing to overrun what software has consumed
//!   (SET_CI).
//!
//! Polling such CQEs runs the provider's real parse and retire path: the
//! wr_id comes from the QP's ring by WQE counter and the queue slots are
//! given back.
//!
//! [`ring_send_doorbell`] rings a QP's send doorbell again for the last
//! WQE posted ([`PostedWqe`]), so that the doorbell and the BlueFlame copy
//! can be timed apart from building the WQE.
//!
//! A null device has no completion channels and no async-event file (those
//! commands fail with `EOPNOTSUPP`).
//!
//! # Example
//!
//! ```
//! use mlx5_prm::cqe::{Cqe64, OpOwn, CQE_SIZE};
//! use mlx5_prm::opcode::CqeOpcode;
//! use mlx5_prm::ring::{owner_bit, wqebb_count};
//! use mlx5_prm::wqe::CtrlSeg;
//! use rmlx5::bench::NullHca;
//! use rmlx5::{QpInit, SendOp, SendWr, Wc};
//!
//! let hca = NullHca::new().unwrap();
//! let ctx = hca.open().unwrap();
//! let pd = ctx.alloc_pd().unwrap();
//! let cq = ctx.create_cq(64, None).unwrap();
//! let qp = pd.create_qp(&cq, &cq, &QpInit::default()).unwrap();
//! qp.post_send(&[SendWr::inline(7, SendOp::Send, b"hello")]).unwrap();
//!
//! // The device: read what was posted, complete it.
//! let sq = hca.send_queue(&qp).unwrap();
//! let ring = hca.cq_ring(&cq).unwrap();
//! assert_eq!(sq.producer(), 1);
//! let ctrl = CtrlSeg::decode(&sq.ctrl(0).unwrap()).unwrap();
//! assert_eq!(wqebb_count(ctrl.ds), 1);
//! let mut cqe = [0u8; CQE_SIZE];
//! Cqe64 {
//!     ml_path: 0,
//!     slid: 0,
//!     grh: 0,
//!     sl: 0,
//!     src_qpn: 0,
//!     srqn_uidx: 0,
//!     imm_inval_rkey: 0,
//!     byte_cnt: 0,
//!     send_opcode: ctrl.opcode.into(),
//!     qpn: ctrl.qpn,
//!     wqe_counter: ctrl.wqe_index,
//!     signature: 0,
//!     op_own: OpOwn {
//!         opcode: CqeOpcode::Req,
//!         format: 0,
//!         solicited: false,
//!         owner: owner_bit(0, ring.log_size()),
//!     },
//! }
//! .encode(&mut cqe);
//! ring.write(0, &cqe).unwrap();
//!
//! let mut wc = [Wc::default(); 4];
//! assert_eq!(cq.poll(&mut wc).unwrap(), 1);
//! assert_eq!(wc[0].wr_id, 7);
//! assert_eq!(ring.set_ci(), 1);
//! ```

use std::sync::{Arc, Mutex, Weak};

use mlx5_prm::cqe::{CQE_SIZE, OP_OWN_OFFSET};
use mlx5_prm::doorbell::{CqDbRec, QpDbRec, CQ_DBR_SIZE, QP_DBR_SIZE};
use mlx5_prm::ring;
use mlx5_prm::wqe::{CtrlSeg, WQEBB_SIZE};

use crate::backend::null::{NullBackend, NullState};
use crate::context::{lock, Context, CtxInner};
use crate::cq::Cq;
use crate::dma::DmaRegion;
use crate::error::{Error, Result};
use crate::qp::Qp;

/// A device that executes nothing: see the [module documentation](self).
#[derive(Debug)]
pub struct NullHca {
    state: Arc<Mutex<NullState>>,
    contexts: Mutex<Vec<Weak<CtxInner>>>,
}

impl NullHca {
    /// A new null device with its own (plain memory) UAR page.
    ///
    /// # Errors
    ///
    /// Allocation errors.
    pub fn new() -> Result<NullHca> {
        Ok(NullHca {
            state: Arc::new(Mutex::new(NullState::new()?)),
            contexts: Mutex::new(Vec::new()),
        })
    }

    /// Opens a context on the device (`rmlx5_0`, LID 1).
    ///
    /// # Errors
    ///
    /// Allocation errors.
    pub fn open(&self) -> Result<Context> {
        let ctx = Context::new(Box::new(NullBackend::new(self.state.clone())), 0)?;
        let mut list = lock(&self.contexts);
        list.retain(|w| w.strong_count() > 0);
        list.push(Arc::downgrade(&ctx.inner));
        Ok(ctx)
    }

    fn check(&self, ctx: &Context) -> Result<()> {
        let mine = lock(&self.contexts)
            .iter()
            .any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(&ctx.inner)));
        if mine {
            Ok(())
        } else {
            Err(Error::Invalid("not an object of this null device"))
        }
    }

    /// The device's side of `cq`: its ring of CQEs and doorbell record.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] if `cq` is not a CQ of this device.
    pub fn cq_ring(&self, cq: &Cq) -> Result<CqRing> {
        self.check(&cq.inner.ctx)?;
        let st = lock(&self.state);
        let c = st
            .cqs
            .get(&cq.inner.handle)
            .ok_or(Error::Invalid("CQ destroyed"))?;
        Ok(CqRing {
            buf: c.buf.slice(0, CQE_SIZE << c.log)?,
            dbr: c.dbr.slice(0, 8)?,
            log: c.log,
        })
    }

    /// The device's view of the send queue of `qp`.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] if `qp` is not a QP of this device.
    pub fn send_queue(&self, qp: &Qp) -> Result<SendQueue> {
        self.check(&qp.inner.pd.ctx)?;
        let st = lock(&self.state);
        let q = st
            .qps
            .get(&qp.inner.handle)
            .ok_or(Error::Invalid("QP destroyed"))?;
        let sq = q.sq()?;
        Ok(SendQueue {
            log: (sq.len() / WQEBB_SIZE).trailing_zeros(),
            sq,
            dbr: q.dbr.slice(0, 8)?,
        })
    }

    /// The device's view of the receive queue of `qp`.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] if `qp` is not a QP of this device.
    pub fn recv_queue(&self, qp: &Qp) -> Result<RecvQueue> {
        self.check(&qp.inner.pd.ctx)?;
        let st = lock(&self.state);
        let q = st
            .qps
            .get(&qp.inner.handle)
            .ok_or(Error::Invalid("QP destroyed"))?;
        Ok(RecvQueue {
            dbr: q.dbr.slice(0, 8)?,
        })
    }
}

/// The QP doorbell record in `r` as the device reads it (whole words),
/// decoded; zero counters if it cannot be read or holds reserved bits
/// (which the provider never writes).
fn qp_record(r: &DmaRegion) -> QpDbRec {
    let mut b = [0u8; QP_DBR_SIZE];
    r.read_u32s(0, &mut b)
        .ok()
        .and_then(|()| QpDbRec::decode(&b).ok())
        .unwrap_or(QpDbRec {
            recv_counter: 0,
            send_counter: 0,
        })
}

/// The CQ doorbell record in `r` as the device reads it (whole words),
/// decoded; `None` if it cannot be read or holds reserved bits (which the
/// provider never writes).
fn cq_record(r: &DmaRegion) -> Option<CqDbRec> {
    let mut b = [0u8; CQ_DBR_SIZE];
    r.read_u32s(0, &mut b).ok()?;
    CqDbRec::decode(&b).ok()
}

/// The device's side of a CQ: see [`NullHca::cq_ring`].
#[derive(Debug)]
pub struct CqRing {
    buf: DmaRegion,
    dbr: DmaRegion,
    log: u32,
}

impl CqRing {
    /// log2 of the entries in the ring (for the owner bit).
    pub fn log_size(&self) -> u32 {
        self.log
    }

    /// Entries in the ring.
    pub fn entries(&self) -> u32 {
        1 << self.log
    }

    /// The SET_CI word of the doorbell record: how far software has
    /// consumed (24 bits).
    pub fn set_ci(&self) -> u32 {
        cq_record(&self.dbr).map_or(0, |r| r.set_ci)
    }

    /// The ARM word of the doorbell record, as a host integer (0 if the
    /// record holds reserved bits).
    pub fn arm_word(&self) -> u32 {
        cq_record(&self.dbr).map_or(0, |r| r.arm.word())
    }

    /// Writes `cqe` as the CQE of producer index `index`: bytes 0..63
    /// first, then `op_own` (with its owner bit, which the caller sets to
    /// the pass parity of `index`), each a release store.
    ///
    /// # Errors
    ///
    /// [`Error::QueueFull`] if the slot still holds a CQE software has not
    /// consumed (per SET_CI).
    pub fn write(&self, index: u32, cqe: &[u8; CQE_SIZE]) -> Result<()> {
        if ring::ci24_distance(self.set_ci(), ring::ci24(index)) >= self.entries() {
            return Err(Error::QueueFull);
        }
        let off = ring::ring_index(index, self.log) as usize * CQE_SIZE;
        let (body, op_own) = cqe.split_at(OP_OWN_OFFSET);
        self.buf.write(off, body)?;
        self.buf.write(off + OP_OWN_OFFSET, op_own)
    }
}

/// The device's view of an SQ: see [`NullHca::send_queue`].
#[derive(Debug)]
pub struct SendQueue {
    sq: DmaRegion,
    dbr: DmaRegion,
    log: u32,
}

impl SendQueue {
    /// Size of the SQ in WQEBBs.
    pub fn wqebbs(&self) -> u32 {
        1 << self.log
    }

    /// The send counter of the doorbell record: the WQEBB index up to
    /// which software has posted.
    pub fn producer(&self) -> u16 {
        qp_record(&self.dbr).send_counter
    }

    /// The control segment of the WQE whose first WQEBB has index
    /// `wqe_index` (decode it with `mlx5_prm::wqe::CtrlSeg::decode`).
    ///
    /// # Errors
    ///
    /// None in practice (the offset is inside the ring).
    pub fn ctrl(&self, wqe_index: u16) -> Result<[u8; CtrlSeg::SIZE]> {
        let mut c = [0u8; CtrlSeg::SIZE];
        self.sq.read(ring::sq_offset(wqe_index, self.log), &mut c)?;
        Ok(c)
    }

    /// The WQE posted at `wqe_index`, named for [`ring_send_doorbell`]
    /// (its size from its control segment's DS count).
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] if the control segment's DS count is 0.
    pub fn wqe(&self, wqe_index: u16) -> Result<PostedWqe> {
        let ds = CtrlSeg::ds_of(&self.ctrl(wqe_index)?);
        if ds == 0 {
            return Err(Error::Invalid("no WQE there"));
        }
        Ok(PostedWqe {
            index: wqe_index,
            bbs: u16::from(ring::wqebb_count(ds)),
        })
    }
}

/// The device's view of an RQ: see [`NullHca::recv_queue`].
#[derive(Debug)]
pub struct RecvQueue {
    dbr: DmaRegion,
}

impl RecvQueue {
    /// The receive counter of the doorbell record: receive WQEs posted.
    pub fn producer(&self) -> u16 {
        qp_record(&self.dbr).recv_counter
    }
}

/// A WQE already in an SQ: see [`SendQueue::wqe`].
#[derive(Clone, Copy, Debug)]
pub struct PostedWqe {
    index: u16,
    bbs: u16,
}

impl PostedWqe {
    /// Its first WQEBB.
    pub fn index(&self) -> u16 {
        self.index
    }

    /// Its size in WQEBBs.
    pub fn wqebbs(&self) -> u16 {
        self.bbs
    }
}

/// Rings the send doorbell of `qp` again, as `post_send` does after its
/// last WQE, for `wqe` (which must be the last WQE posted): the doorbell
/// record with the current producer counter, then under the BlueFlame
/// register's lock either the 8-byte doorbell or, with `blueflame` (and a
/// QP created with [`crate::QpInit::blueflame`], and a WQE that fits a
/// half), the BlueFlame copy of the WQE; the halves alternate. Takes the
/// SQ lock as `post_send` does. A device would see the same doorbell
/// again, which names no new WQE.
///
/// # Errors
///
/// [`Error::Invalid`] if `qp`'s doorbells need a kick (a software HCA,
/// in-process or in the module): meant for a null device. (A device that
/// sees its UAR stores itself, a ConnectX function, is not refused: it
/// sees the same doorbell again.)
pub fn ring_send_doorbell(qp: &Qp, wqe: &PostedWqe, blueflame: bool) -> Result<()> {
    if qp.inner.needs_kick {
        return Err(Error::Invalid("not a QP of a null device"));
    }
    qp.inner.ring_again(wqe.index, wqe.bbs, blueflame)
}
