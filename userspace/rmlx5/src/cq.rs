// SPDX-License-Identifier: GPL-2.0

//! Completion queues: polling by owner bit, SET_CI, arming with the
//! sequence number, and completion-event bookkeeping.

use std::collections::HashMap;
use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use mlx5_prm::cqe::{Cqe64Words, OpOwn, CQE_SIZE, CQE_WORDS, OP_OWN_OFFSET};
use mlx5_prm::doorbell::{
    set_ci_word, ArmCmd, CqArm, UarCqDoorbell, CQ_DBR_ARM_OFFSET, CQ_DBR_SET_CI_OFFSET,
    UAR_CQ_DOORBELL_OFFSET,
};
use mlx5_prm::opcode::CqeOpcode;
use mlx5_prm::ring;
use rmlx5_abi::uapi;

use crate::backend::Cmd;
use crate::channel::{ChannelInner, CompChannel};
use crate::context::{lock, Context};
use crate::dma::{mmio_flush_writes, mmio_wc_start, DmaRegion, WordRing, PAGE_SIZE};
use crate::error::{Error, Result};
use crate::qp::QpShared;
use crate::wc::{Wc, WcFlags, WcOpcode, WcStatus};

/// How long [`Cq::destroy`] waits for unacknowledged events by default.
pub const DEFAULT_DESTROY_WAIT: Duration = Duration::from_secs(2);

#[derive(Debug, Default)]
struct PollState {
    /// Consumer index (free-running).
    ci: u32,
    /// The QP of the last CQE, to skip the lookup in a run of CQEs.
    last: Option<Arc<QpShared>>,
    /// Queue slots of `last` to give back once SET_CI is published: the
    /// latest WQE counter completed on its send and on its receive side.
    last_send: Option<u16>,
    last_recv: Option<u16>,
    /// The same for QPs that were `last` earlier in this poll, in order
    /// (the `Arc` moved here from `last`, so a run of CQEs of one QP clones
    /// and drops no `Arc`).
    retire: Vec<Retire>,
}

/// Queue slots of one QP to give back after SET_CI (see [`PollState`]).
#[derive(Debug)]
struct Retire {
    qp: Arc<QpShared>,
    send: Option<u16>,
    recv: Option<u16>,
}

impl Retire {
    fn apply(&self) {
        if let Some(c) = self.send {
            self.qp.send_retired(c);
        }
        if let Some(c) = self.recv {
            self.qp.recv_retired(c);
        }
    }
}

impl PollState {
    /// Makes `qp` the last QP, parking what is pending for the previous
    /// one in `retire`.
    fn switch_to(&mut self, qp: Arc<QpShared>) {
        let send = self.last_send.take();
        let recv = self.last_recv.take();
        if let Some(prev) = self.last.replace(qp) {
            if send.is_some() || recv.is_some() {
                self.retire.push(Retire {
                    qp: prev,
                    send,
                    recv,
                });
            }
        }
    }

    /// Gives back every queue slot completed in this poll (after SET_CI),
    /// earliest first.
    fn retire_all(&mut self) {
        if !self.retire.is_empty() {
            for r in self.retire.drain(..) {
                r.apply();
            }
        }
        if let Some(qp) = &self.last {
            if let Some(c) = self.last_send.take() {
                qp.send_retired(c);
            }
            if let Some(c) = self.last_recv.take() {
                qp.recv_retired(c);
            }
        }
    }
}

#[derive(Debug, Default)]
struct Events {
    /// Completion events read from the channel.
    read: u32,
    /// Of those, acknowledged.
    acked: u32,
}

#[derive(Debug)]
pub(crate) struct CqInner {
    pub(crate) ctx: Context,
    _channel: Option<Arc<ChannelInner>>,
    pub(crate) handle: u32,
    cqn: u32,
    user_handle: u64,
    log: u32,
    buf: DmaRegion,
    /// The ring of CQEs (the first `1 << log` entries of `buf`) as words.
    words: WordRing,
    dbr: DmaRegion,
    /// The backend's `needs_kick`, read once.
    needs_kick: bool,
    poll: Mutex<PollState>,
    arm_sn: AtomicU32,
    events: Mutex<Events>,
    events_cv: Condvar,
    qps: Mutex<HashMap<u32, Arc<QpShared>>>,
    destroyed: std::sync::atomic::AtomicBool,
}

/// A completion queue (`ibv_cq`). Cheap to clone (the clones are the same
/// CQ); QPs using it keep it alive. `Send + Sync`: polling and arming take
/// the CQ's own lock.
#[derive(Clone, Debug)]
pub struct Cq {
    pub(crate) inner: Arc<CqInner>,
}

/// Why [`Cq::destroy`] failed. If `cq` is `Some`, nothing was destroyed
/// and the CQ is handed back.
#[derive(Debug)]
pub struct CqDestroyError {
    /// What went wrong.
    pub error: Error,
    /// The CQ, still usable, if it was not destroyed.
    pub cq: Option<Cq>,
}

impl std::fmt::Display for CqDestroyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for CqDestroyError {}

impl Cq {
    pub(crate) fn new(ctx: &Context, entries: u32, channel: Option<&CompChannel>) -> Result<Cq> {
        use std::os::fd::AsRawFd;
        if entries == 0 {
            return Err(Error::Invalid("CQ of 0 entries"));
        }
        let user_handle = ctx.new_handle();
        let mut a = uapi::CreateCq {
            user_handle,
            cqe: entries,
            channel_fd: channel.map_or(-1, |c| c.inner.fd.as_raw_fd()),
            ..Default::default()
        };
        let backend = ctx.backend();
        backend.command(Cmd::CreateCq(&mut a))?;
        let mut destroy = uapi::Destroy {
            handle: a.cq_handle,
            ..Default::default()
        };
        let mapped = (|| {
            if !a.cqe_cnt.is_power_of_two()
                || a.cqe_size as usize != CQE_SIZE
                // The kernel maps whole pages: a small CQ's buffer is one
                // page, of which the ring uses the first cqe_cnt entries.
                || a.buf_size < u64::from(a.cqe_cnt) * CQE_SIZE as u64
            {
                return Err(Error::Invalid("kernel CQ geometry"));
            }
            let len = usize::try_from(a.buf_size).map_err(|_| Error::Invalid("CQ size"))?;
            Ok((
                backend.map(a.buf_mmap_offset, len)?,
                backend.map(a.dbr_mmap_offset, PAGE_SIZE)?,
            ))
        })();
        let mapped = mapped.and_then(|(buf, dbr)| {
            let ring = buf.slice(0, a.cqe_cnt as usize * CQE_SIZE)?;
            let words = WordRing::new(ring).map_err(|_| Error::Invalid("kernel CQ geometry"))?;
            Ok((buf, words, dbr))
        });
        let (buf, words, dbr) = match mapped {
            Ok(m) => m,
            Err(e) => {
                let _ = backend.command(Cmd::DestroyCq(&mut destroy));
                return Err(e);
            }
        };
        let inner = Arc::new(CqInner {
            ctx: ctx.clone(),
            _channel: channel.map(|c| c.inner.clone()),
            handle: a.cq_handle,
            cqn: a.cqn,
            user_handle,
            log: a.cqe_cnt.trailing_zeros(),
            words,
            buf,
            dbr,
            needs_kick: backend.needs_kick(),
            poll: Mutex::new(PollState::default()),
            arm_sn: AtomicU32::new(0),
            events: Mutex::new(Events::default()),
            events_cv: Condvar::new(),
            qps: Mutex::new(HashMap::new()),
            destroyed: false.into(),
        });
        ctx.register_cq(user_handle, &inner);
        Ok(Cq { inner })
    }

    pub(crate) fn from_inner(inner: Arc<CqInner>) -> Cq {
        Cq { inner }
    }

    /// The CQ number.
    pub fn cqn(&self) -> u32 {
        self.inner.cqn
    }

    /// Entries in the ring (a power of two).
    pub fn entries(&self) -> u32 {
        1 << self.inner.log
    }

    /// The handle carried by this CQ's events.
    pub fn user_handle(&self) -> u64 {
        self.inner.user_handle
    }

    /// Whether `self` and `other` are the same CQ.
    pub fn same(&self, other: &Cq) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Polls up to `wc.len()` completions into `wc` (`ibv_poll_cq`) and
    /// returns how many were written. No system call.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] if a CQE names a QP not using this CQ (a device
    /// or kernel bug); the completions before it are consumed and counted
    /// in the CQ's consumer index.
    pub fn poll(&self, wc: &mut [Wc]) -> Result<usize> {
        self.inner.poll(wc)
    }

    /// Requests a completion event for the next completion, or with
    /// `solicited_only` for the next solicited receive or error
    /// (`ibv_req_notify_cq`): ARM word in the doorbell record with the arm
    /// sequence number, 64-bit UAR CQ doorbell, kick.
    ///
    /// # Errors
    ///
    /// The errno of the kick; [`Error::Doorbell`] if the software HCA
    /// refused the doorbell.
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        self.inner.arm(solicited_only)
    }

    /// Acknowledges `n` events returned by [`CompChannel::get_cq_event`]
    /// (`ibv_ack_cq_events`); batch them, as acknowledging takes a lock.
    pub fn ack_events(&self, n: u32) {
        let mut e = lock(&self.inner.events);
        e.acked = e.acked.saturating_add(n).min(e.read);
        self.inner.events_cv.notify_all();
    }

    /// Completion events read and not yet acknowledged.
    pub fn unacked_events(&self) -> u32 {
        let e = lock(&self.inner.events);
        e.read - e.acked
    }

    /// Destroys the CQ (`ibv_destroy_cq`), waiting up to
    /// [`DEFAULT_DESTROY_WAIT`] for unacknowledged events.
    ///
    /// # Errors
    ///
    /// See [`Cq::destroy_timeout`].
    pub fn destroy(self) -> core::result::Result<(), CqDestroyError> {
        self.destroy_timeout(DEFAULT_DESTROY_WAIT)
    }

    /// Destroys the CQ, waiting up to `wait` for every completion event read
    /// from its channel to be acknowledged, like `ibv_destroy_cq`, but never
    /// forever.
    ///
    /// # Errors
    ///
    /// [`Error::Busy`] (CQ handed back) while a QP or another handle uses
    /// it; [`Error::UnackedEvents`] naming the count (CQ handed back) if
    /// events stay unacknowledged for `wait`; the errno of `DESTROY_CQ`
    /// (CQ handed back); [`Error::UnackedEvents`] without the CQ if the
    /// kernel reported events that were read but never acknowledged after
    /// it was destroyed.
    pub fn destroy_timeout(self, wait: Duration) -> core::result::Result<(), CqDestroyError> {
        if Arc::strong_count(&self.inner) > 1 {
            return Err(CqDestroyError {
                error: Error::Busy("the CQ is used by a QP or another handle"),
                cq: Some(self),
            });
        }
        if let Err(unacked) = self.inner.wait_acked(None, wait) {
            return Err(CqDestroyError {
                error: Error::UnackedEvents { unacked },
                cq: Some(self),
            });
        }
        let mut d = uapi::Destroy {
            handle: self.inner.handle,
            ..Default::default()
        };
        if let Err(error) = self.inner.ctx.backend().command(Cmd::DestroyCq(&mut d)) {
            return Err(CqDestroyError {
                error,
                cq: Some(self),
            });
        }
        self.inner.destroyed.store(true, Ordering::Relaxed);
        self.inner.ctx.unregister_cq(self.inner.user_handle);
        // Another thread may be between reading an event and counting it.
        match self.inner.wait_acked(Some(d.comp_events_reported), wait) {
            Ok(()) => Ok(()),
            Err(unacked) => Err(CqDestroyError {
                error: Error::UnackedEvents { unacked },
                cq: None,
            }),
        }
    }
}

impl CqInner {
    pub(crate) fn event_read(&self) {
        let mut e = lock(&self.events);
        e.read = e.read.wrapping_add(1);
        // libmlx5's mlx5_cq_event: the next arm carries the next sn.
        self.arm_sn.fetch_add(1, Ordering::Relaxed);
    }

    /// Waits until every event read (and, with `reported`, at least that
    /// many) is acknowledged; on timeout returns the shortfall.
    fn wait_acked(&self, reported: Option<u32>, wait: Duration) -> core::result::Result<(), u32> {
        let deadline = Instant::now() + wait;
        let mut e = lock(&self.events);
        loop {
            let target = reported.map_or(e.read, |r| r.max(e.read));
            if e.acked >= target {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(target - e.acked);
            }
            e = self
                .events_cv
                .wait_timeout(e, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }

    pub(crate) fn attach(&self, qpn: u32, qp: &Arc<QpShared>) {
        lock(&self.qps).insert(qpn, qp.clone());
    }

    pub(crate) fn detach(&self, qpn: u32) {
        lock(&self.qps).remove(&qpn);
        let mut p = lock(&self.poll);
        if p.last.as_ref().is_some_and(|q| q.qpn == qpn) {
            // Nothing is pending outside `poll`.
            p.last = None;
            p.last_send = None;
            p.last_recv = None;
        }
    }

    fn poll(&self, out: &mut [Wc]) -> Result<usize> {
        let mut guard = lock(&self.poll);
        let p = &mut *guard;
        let mut n = 0;
        let mut result = Ok(());
        for slot in out.iter_mut() {
            let ci = p.ci;
            let idx = ring::ring_index(ci, self.log) as usize;
            let op_own = self.buf.load_u8(idx * CQE_SIZE + OP_OWN_OFFSET)?;
            if !ring::cqe_sw_owned(op_own, ci, self.log) {
                break;
            }
            // The body is read only after the owner check (udma_from_device_barrier).
            fence(Ordering::Acquire);
            // The words of the success layout, loaded before the opcode is
            // looked at; an error CQE (rare) adds the one more word its
            // layout needs in `parse`.
            let base = idx * CQE_WORDS;
            let c = Cqe64Words::load(|k| self.words.load(base + k));
            p.ci = ci.wrapping_add(1);
            match self.parse(p, &c, base, op_own) {
                Ok(wc) => {
                    *slot = wc;
                    n += 1;
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if n > 0 || result.is_err() {
            // Publish the consumer index after the CQEs were read, then
            // free their queue slots.
            fence(Ordering::Release);
            self.dbr
                .store_u32(CQ_DBR_SET_CI_OFFSET, set_ci_word(p.ci))?;
            p.retire_all();
        }
        result.map(|()| n)
    }

    /// The QP `qpn`, made the last QP of `p` (looked up only when it
    /// changes).
    #[inline]
    fn qp<'p>(&self, p: &'p mut PollState, qpn: u32) -> Result<&'p QpShared> {
        if p.last.as_ref().is_none_or(|q| q.qpn != qpn) {
            self.switch_qp(p, qpn)?;
        }
        p.last
            .as_deref()
            .ok_or(Error::Invalid("CQE for a QP not on this CQ"))
    }

    #[cold]
    fn switch_qp(&self, p: &mut PollState, qpn: u32) -> Result<()> {
        let q = lock(&self.qps)
            .get(&qpn)
            .cloned()
            .ok_or(Error::Invalid("CQE for a QP not on this CQ"))?;
        p.switch_to(q);
        Ok(())
    }

    /// The completion of the CQE at word `base` of the ring, read as `c`
    /// (the success layout's words), whose `op_own` is `op_own` (owned by
    /// software, after the read barrier).
    fn parse(&self, p: &mut PollState, c: &Cqe64Words, base: usize, op_own: u8) -> Result<Wc> {
        let opcode = OpOwn::opcode_of(op_own).map_err(|_| Error::Invalid("CQE opcode"))?;
        if opcode.is_error() {
            let c = c.err_words(|k| self.words.load(base + k));
            let (qpn, counter) = (c.qpn(), c.wqe_counter());
            let requester = opcode == CqeOpcode::ReqErr;
            let qp = self.qp(p, qpn)?;
            let wr_id = if requester {
                qp.send_wr_id(counter)
            } else {
                qp.recv_wr_id(counter)
            };
            qp.mark_error();
            if requester {
                p.last_send = Some(counter);
            } else {
                p.last_recv = Some(counter);
            }
            return Ok(Wc {
                wr_id,
                status: WcStatus::from_syndrome(c.syndrome()),
                opcode: if requester {
                    WcOpcode::from_send(c.send_opcode())
                } else {
                    WcOpcode::Recv
                },
                vendor_err: u32::from(c.vendor_syndrome()),
                byte_len: 0,
                imm_data: 0,
                qp_num: qpn,
                flags: WcFlags::default(),
                ..Wc::default()
            });
        }
        let (qpn, counter) = (c.qpn(), c.wqe_counter());
        let qp = self.qp(p, qpn)?;
        let mut flags = if OpOwn::solicited_of(op_own) {
            WcFlags::SOLICITED.0
        } else {
            0
        };
        let requester = opcode == CqeOpcode::Req;
        if !requester && c.grh() != 0 {
            flags |= WcFlags::GRH.0;
        }
        let (wr_id, opcode) = match opcode {
            CqeOpcode::Req => (qp.send_wr_id(counter), WcOpcode::from_send(c.send_opcode())),
            CqeOpcode::RespWrImm => {
                flags |= WcFlags::WITH_IMM.0;
                (qp.recv_wr_id(counter), WcOpcode::RecvRdmaWithImm)
            }
            CqeOpcode::RespSendImm => {
                flags |= WcFlags::WITH_IMM.0;
                (qp.recv_wr_id(counter), WcOpcode::Recv)
            }
            _ => (qp.recv_wr_id(counter), WcOpcode::Recv),
        };
        // Retired (latest per side) once SET_CI covers this CQE.
        if requester {
            p.last_send = Some(counter);
        } else {
            p.last_recv = Some(counter);
        }
        Ok(Wc {
            wr_id,
            status: WcStatus::Success,
            opcode,
            vendor_err: 0,
            byte_len: c.byte_cnt(),
            imm_data: if flags & WcFlags::WITH_IMM.0 != 0 {
                c.imm_inval_rkey()
            } else {
                0
            },
            qp_num: qpn,
            // As rdma-core's mlx5 provider: the packet's source fields of a
            // responder CQE (zero in requester CQEs).
            src_qp: c.src_qpn(),
            slid: c.slid(),
            sl: c.sl(),
            dlid_path_bits: c.dlid_path_bits(),
            flags: WcFlags(flags),
        })
    }

    fn arm(&self, solicited_only: bool) -> Result<()> {
        let p = lock(&self.poll);
        let arm = CqArm {
            // Truncated: the ARM word keeps the low bits of the count.
            sn: self.arm_sn.load(Ordering::Relaxed) as u8,
            cmd: if solicited_only {
                ArmCmd::Solicited
            } else {
                ArmCmd::Next
            },
            ci: ring::ci24(p.ci),
        };
        self.dbr.store_u32(CQ_DBR_ARM_OFFSET, arm.to_bytes())?;
        let db = UarCqDoorbell { arm, cqn: self.cqn }.to_bytes();
        let inner = &self.ctx.inner;
        if !self.needs_kick && cfg!(target_pointer_width = "64") {
            // One 64-bit store names the CQ by itself: no lock (rdma-core
            // takes one only where the store is two). The doorbell record
            // must be visible before the UAR store.
            mmio_flush_writes();
            return inner.uar.page.store_doorbell(UAR_CQ_DOORBELL_OFFSET, db);
        }
        // The software HCA reads the doorbell in the kick: store and kick
        // under the lock, so no other CQ's arm comes between.
        let _g = lock(&inner.cq_doorbell);
        mmio_wc_start();
        inner.uar.page.store_doorbell(UAR_CQ_DOORBELL_OFFSET, db)?;
        if self.needs_kick {
            let mut k = uapi::Kick {
                kind: uapi::KICK_CQ_ARM,
                handle: self.handle,
                ..Default::default()
            };
            inner.backend.command(Cmd::Kick(&mut k))?;
        }
        Ok(())
    }
}

impl Drop for CqInner {
    fn drop(&mut self) {
        if !self.destroyed.load(Ordering::Relaxed) {
            self.ctx.unregister_cq(self.user_handle);
            let mut d = uapi::Destroy {
                handle: self.handle,
                ..Default::default()
            };
            // The last handle went without `destroy`: destroy without
            // waiting (nobody is left to acknowledge events).
            let _ = self.ctx.backend().command(Cmd::DestroyCq(&mut d));
        }
    }
}
