// SPDX-License-Identifier: GPL-2.0

//! RC queue pairs: creation, the INIT/RTR/RTS connection, queries and
//! destruction. Posting is in [`send`] and [`recv`].

mod recv;
mod send;

use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use mlx5_prm::doorbell::UAR_PAGE_SIZE;
use mlx5_prm::wqe::WQEBB_SHIFT;
use rmlx5_abi::uapi;

use crate::backend::Cmd;
use crate::context::{lock, Context, SpinGuard, SpinLock, Uar};
use crate::cq::Cq;
use crate::dma::{DmaRegion, WordRing, PAGE_SIZE};
use crate::error::{Error, Result};
use crate::mr::Access;
use crate::pd::{Pd, PdInner};

/// QP states (`enum ibv_qp_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpState {
    /// RESET.
    Reset,
    /// INIT.
    Init,
    /// RTR.
    Rtr,
    /// RTS.
    Rts,
    /// SQD.
    Sqd,
    /// SQE.
    Sqe,
    /// ERR.
    Err,
}

impl QpState {
    fn raw(self) -> u32 {
        match self {
            QpState::Reset => uapi::QPS_RESET,
            QpState::Init => uapi::QPS_INIT,
            QpState::Rtr => uapi::QPS_RTR,
            QpState::Rts => uapi::QPS_RTS,
            QpState::Sqd => uapi::QPS_SQD,
            QpState::Sqe => uapi::QPS_SQE,
            QpState::Err => uapi::QPS_ERR,
        }
    }

    fn from_raw(v: u32) -> Option<QpState> {
        Some(match v {
            uapi::QPS_RESET => QpState::Reset,
            uapi::QPS_INIT => QpState::Init,
            uapi::QPS_RTR => QpState::Rtr,
            uapi::QPS_RTS => QpState::Rts,
            uapi::QPS_SQD => QpState::Sqd,
            uapi::QPS_SQE => QpState::Sqe,
            uapi::QPS_ERR => QpState::Err,
            _ => return None,
        })
    }
}

/// What a QP is created with (`ibv_qp_init_attr` caps).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpInit {
    /// Send WRs outstanding.
    pub max_send_wr: u32,
    /// Receive WRs outstanding.
    pub max_recv_wr: u32,
    /// Gather entries per send WR.
    pub max_send_sge: u32,
    /// Scatter entries per receive WR.
    pub max_recv_sge: u32,
    /// Inline bytes per send WR.
    pub max_inline_data: u32,
    /// Signal every send WR, whatever its flags.
    pub sq_sig_all: bool,
    /// Use a BlueFlame copy for a single small WQE (else always the 8-byte
    /// doorbell).
    pub blueflame: bool,
    /// Value returned in the QP's async events.
    pub user_handle: u64,
}

impl Default for QpInit {
    fn default() -> Self {
        QpInit {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 64,
            sq_sig_all: false,
            blueflame: true,
            user_handle: 0,
        }
    }
}

/// How to reach a peer QP: its port's LID (as `QUERY_PORT` reports it) and
/// QPN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The peer port's LID.
    pub lid: u32,
    /// The peer QP number.
    pub qpn: u32,
}

/// Connection attributes for [`Qp::connect`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectOpts {
    /// Remote operations this QP accepts as responder.
    pub access: Access,
    /// Path MTU (`IBV_MTU_*`, 5 = 4096).
    pub path_mtu: u32,
    /// Outstanding READs/atomics as requester.
    pub max_rd_atomic: u32,
    /// Outstanding READs/atomics as responder.
    pub max_dest_rd_atomic: u32,
    /// RNR NAK timer code asked of requesters.
    pub min_rnr_timer: u32,
    /// Local ACK timeout code.
    pub timeout: u32,
    /// Transport retries.
    pub retry_cnt: u32,
    /// RNR retries (7 = forever).
    pub rnr_retry: u32,
    /// First send PSN.
    pub sq_psn: u32,
    /// First expected receive PSN.
    pub rq_psn: u32,
    /// Service level of the path (`ibv_ah_attr.sl`, 0 to 15); the peer's
    /// receive completions report it in [`crate::Wc::sl`].
    pub sl: u32,
}

impl Default for ConnectOpts {
    fn default() -> Self {
        ConnectOpts {
            access: Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
            path_mtu: uapi::MTU_4096,
            max_rd_atomic: 4,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            sq_psn: 0,
            rq_psn: 0,
            sl: 0,
        }
    }
}

/// A QP's state and attributes (`ibv_query_qp`).
pub type QpInfo = uapi::QueryQp;

/// What the CQ poller needs of a QP: the wr_id rings and the tails.
///
/// The poster writes a slot's wr_id and next index before its doorbell
/// (release), the poller reads them after the CQE's owner check (acquire).
#[derive(Debug)]
pub(crate) struct QpShared {
    pub(crate) qpn: u32,
    /// Per WQEBB of the SQ, for the WQE starting there.
    sq_slots: Box<[SqSlot]>,
    sq_tail: AtomicU16,
    /// The count of send WRs posted up to and including the last
    /// completed.
    sq_wr_tail: AtomicU32,
    rq_wrid: Box<[AtomicU64]>,
    rq_tail: AtomicU16,
    /// The QP was seen in error (an error CQE), or moved to ERR: posted
    /// receives then need a kick to be flushed.
    in_error: AtomicBool,
}

/// What the poller needs of the send WQE starting at one WQEBB (one slot,
/// so posting and retiring touch one cache line).
#[derive(Debug, Default)]
struct SqSlot {
    wr_id: AtomicU64,
    /// The producer counter after this WQE (bits 15:0) and the count of
    /// send WRs posted up to and including it (bits 47:16): one store.
    next: AtomicU64,
}

impl SqSlot {
    /// Records a WQE posted (before its doorbell).
    fn set(&self, wr_id: u64, next: u16, wr_next: u32) {
        self.wr_id.store(wr_id, Ordering::Relaxed);
        self.next.store(
            u64::from(wr_next) << 16 | u64::from(next),
            Ordering::Relaxed,
        );
    }

    /// `(next, wr_next)` as [`SqSlot::set`] recorded them.
    fn next(&self) -> (u16, u32) {
        let v = self.next.load(Ordering::Relaxed);
        (v as u16, (v >> 16) as u32)
    }
}

impl QpShared {
    fn sq_slot(&self, counter: u16) -> &SqSlot {
        &self.sq_slots[usize::from(counter) & (self.sq_slots.len() - 1)]
    }

    /// The wr_id of the send WQE at `counter`.
    pub(crate) fn send_wr_id(&self, counter: u16) -> u64 {
        self.sq_slot(counter).wr_id.load(Ordering::Relaxed)
    }

    /// The wr_id of the receive WQE at `counter`.
    pub(crate) fn recv_wr_id(&self, counter: u16) -> u64 {
        let slot = usize::from(counter) & (self.rq_wrid.len() - 1);
        self.rq_wrid[slot].load(Ordering::Relaxed)
    }

    /// The requester completed the WQE at `counter`: everything up to it
    /// is done and its room may be reused. Called only after the CQ's
    /// SET_CI covers the CQE, so new WRs cannot overrun the CQ.
    pub(crate) fn send_retired(&self, counter: u16) {
        let (next, wr_next) = self.sq_slot(counter).next();
        self.sq_wr_tail.store(wr_next, Ordering::Release);
        self.sq_tail.store(next, Ordering::Release);
    }

    /// The receive WQE at `counter` completed (after SET_CI, as above).
    pub(crate) fn recv_retired(&self, counter: u16) {
        self.rq_tail
            .store(counter.wrapping_add(1), Ordering::Release);
    }

    pub(crate) fn mark_error(&self) {
        self.in_error.store(true, Ordering::Relaxed);
    }

    fn reset(&self) {
        self.sq_tail.store(0, Ordering::Relaxed);
        self.sq_wr_tail.store(0, Ordering::Relaxed);
        self.rq_tail.store(0, Ordering::Relaxed);
        self.in_error.store(false, Ordering::Relaxed);
    }
}

/// The SQ's producer side, as a poster holds it under the SQ lock.
#[derive(Debug)]
struct SqState {
    /// Producer counter in WQEBBs (`cur_post`).
    cur_post: u16,
    /// Send WRs posted (free-running), to hold `max_send_wr`: a CQ sized
    /// for the QP's WRs never overruns.
    head_wr: u32,
}

/// The SQ lock and the producer state it guards (read into a [`SqState`]
/// when taken, written back before it is released).
#[derive(Debug, Default)]
struct SqLock {
    lock: SpinLock,
    /// `cur_post` (bits 15:0) and `head_wr` (bits 47:16), one word.
    state: AtomicU64,
}

/// The SQ lock, held, with the producer state.
struct SqGuard<'a> {
    sq: &'a SqLock,
    state: SqState,
    _lock: SpinGuard<'a>,
}

impl SqLock {
    fn lock(&self) -> SqGuard<'_> {
        let g = self.lock.lock();
        // Relaxed: only touched under the lock, whose acquire orders it.
        let v = self.state.load(Ordering::Relaxed);
        SqGuard {
            sq: self,
            state: SqState {
                cur_post: v as u16,
                head_wr: (v >> 16) as u32,
            },
            _lock: g,
        }
    }
}

impl SqGuard<'_> {
    /// Writes the producer state back (before the lock is released).
    fn store(&self) {
        let v = u64::from(self.state.head_wr) << 16 | u64::from(self.state.cur_post);
        self.sq.state.store(v, Ordering::Relaxed);
    }
}

#[derive(Debug)]
struct RqState {
    /// Producer counter in WQEs.
    head: u16,
}

#[derive(Debug)]
pub(crate) struct QpInner {
    pub(crate) pd: Arc<PdInner>,
    send_cq: Cq,
    recv_cq: Cq,
    pub(crate) handle: u32,
    qpn: u32,
    user_handle: u64,
    _buf: DmaRegion,
    /// The SQ, stored to in 64-bit words.
    sq: WordRing,
    rq: DmaRegion,
    dbr: DmaRegion,
    uar: Arc<Uar>,
    bfreg: usize,
    bf_offset: usize,
    bf_size: usize,
    sq_log: u32,
    rq_stride: usize,
    max_send_wr: u32,
    max_send_sge: u32,
    max_recv_sge: u32,
    max_inline: u32,
    sq_sig_all: bool,
    blueflame: bool,
    /// The backend's `needs_kick`, read once.
    pub(crate) needs_kick: bool,
    /// A send kick of this QP succeeded (kick elision applies from then on,
    /// see `send.rs`).
    kicked: AtomicBool,
    shared: Arc<QpShared>,
    sq_lock: SqLock,
    rq_state: Mutex<RqState>,
}

/// An RC queue pair (`ibv_qp`). `Send + Sync`: posting takes the queue's
/// lock, so several threads may post to one QP.
#[derive(Debug)]
pub struct Qp {
    pub(crate) inner: QpInner,
}

fn pow2_ring<T: Default>(n: usize) -> Box<[T]> {
    (0..n).map(|_| T::default()).collect()
}

impl Qp {
    pub(crate) fn new(pd: &Pd, send_cq: &Cq, recv_cq: &Cq, init: &QpInit) -> Result<Qp> {
        let ctx = &pd.inner.ctx;
        for cq in [send_cq, recv_cq] {
            if !Arc::ptr_eq(&cq.inner.ctx.inner, &ctx.inner) {
                return Err(Error::Invalid("CQ of another context"));
            }
        }
        let mut a = uapi::CreateQp {
            user_handle: init.user_handle,
            pd_handle: pd.inner.handle,
            send_cq_handle: send_cq.inner.handle,
            recv_cq_handle: recv_cq.inner.handle,
            qp_type: uapi::QPT_RC,
            max_send_wr: init.max_send_wr,
            max_recv_wr: init.max_recv_wr,
            max_send_sge: init.max_send_sge,
            max_recv_sge: init.max_recv_sge,
            max_inline_data: init.max_inline_data,
            sq_sig_all: u32::from(init.sq_sig_all),
            ..Default::default()
        };
        let backend = ctx.backend();
        backend.command(Cmd::CreateQp(&mut a))?;
        match Self::finish(pd, send_cq, recv_cq, init, &a) {
            Ok(q) => Ok(q),
            Err(e) => {
                let mut d = uapi::Destroy {
                    handle: a.qp_handle,
                    ..Default::default()
                };
                let _ = backend.command(Cmd::DestroyQp(&mut d));
                Err(e)
            }
        }
    }

    fn finish(
        pd: &Pd,
        send_cq: &Cq,
        recv_cq: &Cq,
        init: &QpInit,
        a: &uapi::CreateQp,
    ) -> Result<Qp> {
        let ctx: &Context = &pd.inner.ctx;
        let backend = ctx.backend();
        let bad = Error::Invalid("kernel QP geometry");
        let sq_bytes = (a.sq_wqe_cnt as usize)
            .checked_shl(WQEBB_SHIFT)
            .ok_or(bad.clone())?;
        let rq_stride = 1usize.checked_shl(a.rq_wqe_shift).ok_or(bad.clone())?;
        let rq_bytes = (a.rq_wqe_cnt as usize)
            .checked_mul(rq_stride)
            .ok_or(bad.clone())?;
        let buf_len = usize::try_from(a.buf_size).map_err(|_| bad.clone())?;
        let sq_off = a.sq_buf_offset as usize;
        let rq_off = a.rq_buf_offset as usize;
        if !a.sq_wqe_cnt.is_power_of_two()
            || a.sq_wqe_cnt > 1 << 15
            || a.sq_wqe_shift != WQEBB_SHIFT
            || !a.rq_wqe_cnt.is_power_of_two()
            || a.rq_wqe_cnt > 1 << 15
            || !(4..=10).contains(&a.rq_wqe_shift)
            || sq_off.checked_add(sq_bytes).is_none_or(|e| e > buf_len)
            || rq_off.checked_add(rq_bytes).is_none_or(|e| e > buf_len)
            || a.bf_size == 0
            || !a.bf_size.is_multiple_of(64)
            || a.max_send_wr_out == 0
        {
            return Err(bad);
        }
        let bfreg = Context::bfreg_index(a.bf_offset)?;
        let bf_size = a.bf_size as usize;
        if a.bf_offset as usize + 2 * bf_size > UAR_PAGE_SIZE {
            return Err(bad);
        }
        let buf = backend.map(a.buf_mmap_offset, buf_len)?;
        let dbr = backend.map(a.dbr_mmap_offset, PAGE_SIZE)?;
        let uar = ctx.uar(a.uar_mmap_offset)?;
        let shared = Arc::new(QpShared {
            qpn: a.qpn,
            sq_slots: pow2_ring(a.sq_wqe_cnt as usize),
            sq_tail: AtomicU16::new(0),
            sq_wr_tail: AtomicU32::new(0),
            rq_wrid: pow2_ring(a.rq_wqe_cnt as usize),
            rq_tail: AtomicU16::new(0),
            in_error: AtomicBool::new(false),
        });
        let inner = QpInner {
            pd: pd.inner.clone(),
            send_cq: send_cq.clone(),
            recv_cq: recv_cq.clone(),
            handle: a.qp_handle,
            qpn: a.qpn,
            user_handle: init.user_handle,
            sq: WordRing::new(buf.slice(sq_off, sq_bytes)?).map_err(|_| bad.clone())?,
            rq: buf.slice(rq_off, rq_bytes)?,
            _buf: buf,
            dbr,
            uar,
            bfreg,
            bf_offset: a.bf_offset as usize,
            bf_size,
            sq_log: a.sq_wqe_cnt.trailing_zeros(),
            rq_stride,
            max_send_wr: a.max_send_wr_out,
            max_send_sge: a.max_send_sge_out,
            max_recv_sge: a.max_recv_sge_out,
            max_inline: a.max_inline_data_out,
            sq_sig_all: init.sq_sig_all,
            blueflame: init.blueflame,
            needs_kick: backend.needs_kick(),
            kicked: AtomicBool::new(false),
            shared,
            sq_lock: SqLock::default(),
            rq_state: Mutex::new(RqState { head: 0 }),
        };
        send_cq.inner.attach(a.qpn, &inner.shared);
        recv_cq.inner.attach(a.qpn, &inner.shared);
        Ok(Qp { inner })
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.inner.qpn
    }

    /// The value carried by this QP's async events.
    pub fn user_handle(&self) -> u64 {
        self.inner.user_handle
    }

    /// This QP's address for a peer: the local port's LID and the QPN.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            lid: self.inner.pd.ctx.lid(),
            qpn: self.inner.qpn,
        }
    }

    /// Send WRs the QP was granted.
    pub fn max_send_wr(&self) -> u32 {
        self.inner.max_send_wr
    }

    /// Inline bytes per send WR the QP was granted.
    pub fn max_inline_data(&self) -> u32 {
        self.inner.max_inline
    }

    /// Gather entries per send WR the QP was granted.
    pub fn max_send_sge(&self) -> u32 {
        self.inner.max_send_sge
    }

    /// Scatter entries per receive WR the QP was granted.
    pub fn max_recv_sge(&self) -> u32 {
        self.inner.max_recv_sge
    }

    /// Receive WRs the RQ holds (at least what was asked for).
    pub fn max_recv_wr(&self) -> u32 {
        u32::try_from(self.inner.shared.rq_wrid.len()).unwrap_or(u32::MAX)
    }

    /// The send CQ.
    pub fn send_cq(&self) -> &Cq {
        &self.inner.send_cq
    }

    /// The receive CQ.
    pub fn recv_cq(&self) -> &Cq {
        &self.inner.recv_cq
    }

    fn modify(&self, mut m: uapi::ModifyQp) -> Result<()> {
        m.qp_handle = self.inner.handle;
        let to = (m.attr_mask & uapi::QP_STATE != 0).then_some(m.qp_state);
        if to == Some(uapi::QPS_RESET) {
            // Hold both queue locks so no post races the reset of the
            // counters.
            let mut sq = self.inner.sq_lock.lock();
            let mut rq = lock(&self.inner.rq_state);
            self.inner.pd.ctx.backend().command(Cmd::ModifyQp(&mut m))?;
            sq.state = SqState {
                cur_post: 0,
                head_wr: 0,
            };
            sq.store();
            rq.head = 0;
            self.inner.shared.reset();
            return Ok(());
        }
        self.inner.pd.ctx.backend().command(Cmd::ModifyQp(&mut m))?;
        if to == Some(uapi::QPS_ERR) {
            self.inner.shared.mark_error();
        }
        Ok(())
    }

    /// RESET to INIT: port 1, P_Key index 0, responder `access`.
    ///
    /// # Errors
    ///
    /// The errno of `MODIFY_QP`.
    pub fn to_init(&self, access: Access) -> Result<()> {
        self.modify(uapi::ModifyQp {
            attr_mask: uapi::QP_STATE | uapi::QP_PKEY_INDEX | uapi::QP_PORT | uapi::QP_ACCESS_FLAGS,
            qp_state: uapi::QPS_INIT,
            port_num: 1,
            qp_access_flags: access.0,
            ..Default::default()
        })
    }

    /// INIT to RTR towards `remote`.
    ///
    /// # Errors
    ///
    /// The errno of `MODIFY_QP`.
    pub fn to_rtr(&self, remote: &Endpoint, o: &ConnectOpts) -> Result<()> {
        self.modify(uapi::ModifyQp {
            attr_mask: uapi::QP_STATE
                | uapi::QP_AV
                | uapi::QP_PATH_MTU
                | uapi::QP_DEST_QPN
                | uapi::QP_RQ_PSN
                | uapi::QP_MAX_DEST_RD_ATOMIC
                | uapi::QP_MIN_RNR_TIMER,
            qp_state: uapi::QPS_RTR,
            path_mtu: o.path_mtu,
            dest_qp_num: remote.qpn,
            rq_psn: o.rq_psn,
            max_dest_rd_atomic: o.max_dest_rd_atomic,
            min_rnr_timer: o.min_rnr_timer,
            dlid: remote.lid,
            sl: o.sl,
            ..Default::default()
        })
    }

    /// RTR to RTS.
    ///
    /// # Errors
    ///
    /// The errno of `MODIFY_QP`.
    pub fn to_rts(&self, o: &ConnectOpts) -> Result<()> {
        self.modify(uapi::ModifyQp {
            attr_mask: uapi::QP_STATE
                | uapi::QP_TIMEOUT
                | uapi::QP_RETRY_CNT
                | uapi::QP_RNR_RETRY
                | uapi::QP_SQ_PSN
                | uapi::QP_MAX_QP_RD_ATOMIC,
            qp_state: uapi::QPS_RTS,
            timeout: o.timeout,
            retry_cnt: o.retry_cnt,
            rnr_retry: o.rnr_retry,
            sq_psn: o.sq_psn,
            max_rd_atomic: o.max_rd_atomic,
            ..Default::default()
        })
    }

    /// Connects to `remote` (a QP on this or another device, or this QP
    /// itself): RESET to INIT to RTR to RTS.
    ///
    /// # Errors
    ///
    /// The errno of the `MODIFY_QP` that failed.
    pub fn connect(&self, remote: &Endpoint, o: &ConnectOpts) -> Result<()> {
        self.to_init(o.access)?;
        self.to_rtr(remote, o)?;
        self.to_rts(o)
    }

    /// Moves the QP to ERR: every outstanding WR completes with
    /// [`crate::WcStatus::WrFlushErr`].
    ///
    /// # Errors
    ///
    /// The errno of `MODIFY_QP`.
    pub fn to_error(&self) -> Result<()> {
        self.modify(uapi::ModifyQp {
            attr_mask: uapi::QP_STATE,
            qp_state: uapi::QPS_ERR,
            ..Default::default()
        })
    }

    /// Moves the QP to RESET: both queues are emptied without completions.
    ///
    /// # Errors
    ///
    /// The errno of `MODIFY_QP`.
    pub fn reset(&self) -> Result<()> {
        self.modify(uapi::ModifyQp {
            attr_mask: uapi::QP_STATE,
            qp_state: uapi::QPS_RESET,
            ..Default::default()
        })
    }

    /// The QP's state and attributes.
    ///
    /// # Errors
    ///
    /// The errno of `QUERY_QP`.
    pub fn query(&self) -> Result<QpInfo> {
        let mut q = uapi::QueryQp {
            qp_handle: self.inner.handle,
            ..Default::default()
        };
        self.inner.pd.ctx.backend().command(Cmd::QueryQp(&mut q))?;
        Ok(q)
    }

    /// The QP's current state.
    ///
    /// # Errors
    ///
    /// The errno of `QUERY_QP`; [`Error::Invalid`] for an unknown state.
    pub fn state(&self) -> Result<QpState> {
        QpState::from_raw(self.query()?.qp_state).ok_or(Error::Invalid("QP state"))
    }

    /// Moves to `state` with no other attribute (e.g. SQD, ERR, RESET).
    ///
    /// # Errors
    ///
    /// The errno of `MODIFY_QP`.
    pub fn modify_state(&self, state: QpState) -> Result<()> {
        self.modify(uapi::ModifyQp {
            attr_mask: uapi::QP_STATE,
            qp_state: state.raw(),
            ..Default::default()
        })
    }
}

impl Drop for QpInner {
    fn drop(&mut self) {
        let mut d = uapi::Destroy {
            handle: self.handle,
            ..Default::default()
        };
        let _ = self.pd.ctx.backend().command(Cmd::DestroyQp(&mut d));
        self.send_cq.inner.detach(self.qpn);
        self.recv_cq.inner.detach(self.qpn);
    }
}
