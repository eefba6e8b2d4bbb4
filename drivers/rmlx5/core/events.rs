// SPDX-License-Identifier: GPL-2.0

//! The driver's own lookup tables of one HCA: which CQ a completion EQE
//! names, which QP an async EQE names, which CQs and events wait for the
//! BH dispatcher, and which kernel QP a CQE's wr_id belongs to.
//!
//! The tables hold the objects of the layers above through the traits
//! below ([`CompTarget`], [`QpEvents`], [`WrIds`]), so this layer names no
//! verbs, uverbs or ULP type: `ib::Cq`, `ib::uqp::UserQp` and `ib::Qp`
//! implement them.
//!
//! # Locking
//!
//! One [`EventTables`] per HCA behind its own `SpinLockIrq` (the EQ
//! handler fills it in hard-IRQ context). It is a leaf lock: nothing else
//! is taken while it is held, and nothing runs under it but table updates
//! and the atomic counters of [`CompTarget::note_event`]. In particular it
//! is independent of the backend's lock (the software HCA's fabric lock):
//! the EQ handler reads the EQEs and fills these tables without that lock,
//! and takes it afterwards only to ring the EQ doorbell.

use kernel::{
    bitmap::BitmapVec,
    ffi::{
        c_int,
        c_void, //
    },
    prelude::*,
    sync::Arc,
};

use crate::mlx5_prm::opcode::EventType;

/// Pending asynchronous events kept per HCA before they are dropped.
const ASYNC_RING: usize = 64;

/// CQs the EQ handler delivers to itself, after it has released the table
/// lock (at most [`DirectCqs::MAX`] per EQ pass; the rest go to the BH
/// dispatcher).
pub(crate) struct DirectCqs {
    cqs: [Option<Arc<dyn CompTarget>>; DirectCqs::MAX],
    len: usize,
}

impl DirectCqs {
    pub(crate) const MAX: usize = 8;

    pub(crate) const fn new() -> Self {
        Self {
            cqs: [const { None }; Self::MAX],
            len: 0,
        }
    }

    /// Keeps a reference to `cq`: `Some(true)` if kept now, `Some(false)`
    /// if it was already, `None` when full.
    fn push(&mut self, cq: &Arc<dyn CompTarget>) -> Option<bool> {
        let kept = self.cqs[..self.len]
            .iter()
            .flatten()
            .any(|c| core::ptr::addr_eq(Arc::as_ptr(c), Arc::as_ptr(cq)));
        if kept {
            return Some(false);
        }
        let slot = self.cqs.get_mut(self.len)?;
        *slot = Some(cq.clone());
        self.len += 1;
        Some(true)
    }

    /// How many CQs are kept.
    #[cfg(CONFIG_KUNIT)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Calls the completion handler of each kept CQ, in the order they
    /// were kept, then lowers its busy count (after which its destroy may
    /// return). The caller holds no lock: hard-IRQ context, from the EQ
    /// handler.
    pub(crate) fn deliver(&mut self, perf: &crate::perf::Perf) {
        let n = core::mem::take(&mut self.len);
        for cq in self.cqs[..n].iter_mut().filter_map(Option::take) {
            let t = perf.now();
            cq.complete();
            perf.cq_direct.add(perf.now().saturating_sub(t));
            super::dispatch::release(cq, |c| c.set_busy(false));
        }
    }
}

/// An asynchronous event for the ULP event handler.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AsyncEvent {
    /// `mlx5_prm` event type.
    pub(crate) event_type: u8,
    /// CQN or QPN the event is about.
    pub(crate) element: u32,
}

/// A ULP's async event handler: `(hca index, event type, element, ctx)`.
pub(crate) type EventHandlerFn = unsafe extern "C" fn(c_int, u32, u32, *mut c_void);

/// Calls a ULP's async event handler (BH context).
pub(crate) fn call_event_handler(f: EventHandlerFn, hca: usize, ev: AsyncEvent, ctx: usize) {
    // SAFETY: The ULP registered `f` with `ctx` for this device and keeps
    // both valid until it unregisters the handler.
    unsafe {
        f(
            c_int::try_from(hca).unwrap_or(-1),
            u32::from(ev.event_type),
            ev.element,
            ctx as *mut c_void,
        )
    };
}

/// A CQ that takes completion events, as the EQ handler and the BH
/// dispatcher see it.
///
/// `busy` is set under the table lock when the dispatcher takes the CQ and
/// cleared after the call; the CQ's destroy removes it from the table, then
/// waits for `busy` to clear (see `core/dispatch.rs`).
pub(crate) trait CompTarget: Send + Sync {
    /// A completion EQE named the CQ (hard IRQ, under the table lock:
    /// atomics only).
    fn note_event(&self);
    /// Marks a dispatcher call running or finished.
    fn set_busy(&self, busy: bool);
    /// Calls the completion handler (BH context).
    fn complete(&self);
    /// Whether the CQ takes its own async events (a user CQ: its process'
    /// async file); else they go to the device's ULP event handler.
    fn takes_async(&self) -> bool;
    /// Whether [`CompTarget::complete`] may be called in hard-IRQ context:
    /// a user CQ, whose completion event only queues on a channel under
    /// an interrupt-safe spinlock and wakes its readers. The EQ handler
    /// delivers those itself; kernel ULPs' handlers run in the BH
    /// dispatcher.
    fn irq_safe(&self) -> bool;
    /// Delivers an async event of the CQ itself (BH context).
    fn async_event(&self, event_type: u8);
}

/// A QP that takes its own async events (a user QP), as the dispatcher sees
/// it; `busy` as for [`CompTarget`].
pub(crate) trait QpEvents: Send + Sync {
    /// Marks a dispatcher call running or finished.
    fn set_busy(&self, busy: bool);
    /// Delivers an async event (BH context).
    fn async_event(&self, event_type: u8);
}

/// A kernel QP as the poller of its CQs sees it: the wr_id of the WQE a
/// CQE completes (which also retires the WQEs before it).
pub(crate) trait WrIds: Send + Sync {
    /// The send WQE at `wqe_counter` completed: its wr_id, and the
    /// completion opcode the poster recorded for it if the CQE's send
    /// opcode does not tell (a UMR: registration or invalidation).
    fn complete_send(&self, wqe_counter: u16) -> (u64, Option<u32>);
    /// The receive WQE at `wqe_counter` completed.
    fn complete_recv(&self, wqe_counter: u16) -> u64;
    /// After the device failed (`Device::set_fatal`): takes the oldest
    /// outstanding work request of the QP whose completions go to CQ
    /// `cqn`, as flushed, send queue first. Returns its wr_id, whether it
    /// was a receive, and the completion opcode the poster recorded (or
    /// `None`), or `None` when nothing is outstanding there.
    fn flush_one(&self, cqn: u32) -> Option<(u64, bool, Option<u32>)>;
    /// Gives back a reference taken in a context that may not sleep (a CQ
    /// poll holding its lock with interrupts off): if it is the last one,
    /// the QP, whose queue memory may need to sleep to be freed, is freed
    /// later from process context instead of here.
    fn release(self: Arc<Self>);
}

/// What the dispatcher takes next from one HCA's tables.
pub(crate) enum Pending {
    /// A CQ with completion events (marked busy).
    Cq(Arc<dyn CompTarget>),
    /// An async event for the ULP event handler.
    Event(AsyncEvent),
    /// An async event of a CQ that takes its own (marked busy).
    CqEvent(Arc<dyn CompTarget>, u8),
    /// An async event of a QP that takes its own (marked busy).
    QpEvent(Arc<dyn QpEvents>, u8),
}

/// The lookup tables of one HCA (see the module documentation).
pub(crate) struct EventTables {
    /// CQs that may receive completion events, by CQN. Polling-only CQs
    /// are never here, so an EQE naming one is dropped.
    cqs: KVVec<Option<Arc<dyn CompTarget>>>,
    /// Kernel QPs by slot (QPN - `qpn_base`), for the poller's wr_ids.
    qps: KVVec<Option<Arc<dyn WrIds>>>,
    /// QPs that take their own async events, by slot.
    qp_events: KVVec<Option<Arc<dyn QpEvents>>>,
    /// First QPN of the HCA.
    qpn_base: u32,
    /// CQs queued for dispatch: one bit per CQN, so a CQ is queued at
    /// most once however many EQEs name it.
    pending: BitmapVec,
    /// Async events waiting for the dispatcher (ring of [`ASYNC_RING`]).
    events: KVec<AsyncEvent>,
    /// EQEs naming an unknown, destroyed or polling-only CQ.
    pub(crate) stray_eqes: u64,
    /// Async events dropped because the ring was full.
    pub(crate) events_dropped: u64,
}

fn nones<T: ?Sized>(n: usize) -> Result<KVVec<Option<Arc<T>>>> {
    let mut v = KVVec::with_capacity(n, GFP_KERNEL)?;
    for _ in 0..n {
        v.push(None, GFP_KERNEL)?;
    }
    Ok(v)
}

/// Puts `v` in `slot`: `EINVAL` if the number had no slot (the device
/// numbers its objects beyond what the tables were sized for).
fn put<T: ?Sized>(slot: Option<&mut Option<Arc<T>>>, v: Arc<T>) -> Result {
    *slot.ok_or(EINVAL)? = Some(v);
    Ok(())
}

/// Empties `slot` if it holds the object at `who`; returns whether it did.
fn clear_if<T: ?Sized, U>(slot: Option<&mut Option<Arc<T>>>, who: &U) -> bool {
    let Some(slot) = slot else {
        return false;
    };
    if slot
        .as_ref()
        .is_some_and(|c| core::ptr::addr_eq(Arc::as_ptr(c), who))
    {
        *slot = None;
        return true;
    }
    false
}

impl EventTables {
    /// Empty tables for CQNs below `max_cqs` and QPNs from `qpn_base` on,
    /// `max_qps` of them.
    pub(crate) fn new(max_cqs: usize, max_qps: usize, qpn_base: u32) -> Result<Self> {
        Ok(Self {
            cqs: nones(max_cqs)?,
            qps: nones(max_qps)?,
            qp_events: nones(max_qps)?,
            qpn_base,
            pending: BitmapVec::new(max_cqs, GFP_KERNEL)?,
            events: KVec::with_capacity(ASYNC_RING, GFP_KERNEL)?,
            stray_eqes: 0,
            events_dropped: 0,
        })
    }

    fn qp_slot(&self, qpn: u32) -> Option<usize> {
        qpn.checked_sub(self.qpn_base).map(|s| s as usize)
    }

    /// Enters CQ `cqn` for completion events.
    pub(crate) fn add_cq(&mut self, cqn: u32, cq: Arc<dyn CompTarget>) -> Result {
        put(self.cqs.get_mut(cqn as usize), cq)
    }

    /// Removes CQ `cqn` if it is `who`, with its pending bit: no dispatch
    /// of it starts afterwards.
    pub(crate) fn remove_cq<T>(&mut self, cqn: u32, who: &T) {
        let i = cqn as usize;
        if clear_if(self.cqs.get_mut(i), who) {
            self.pending.clear_bit(i);
        }
    }

    /// Enters kernel QP `qpn` for the poller.
    pub(crate) fn add_qp(&mut self, qpn: u32, qp: Arc<dyn WrIds>) -> Result {
        let s = self.qp_slot(qpn).ok_or(EINVAL)?;
        put(self.qps.get_mut(s), qp)
    }

    /// Removes kernel QP `qpn` if it is `who`.
    pub(crate) fn remove_qp<T>(&mut self, qpn: u32, who: &T) {
        if let Some(s) = self.qp_slot(qpn) {
            clear_if(self.qps.get_mut(s), who);
        }
    }

    /// The kernel QP `qpn`.
    pub(crate) fn qp(&self, qpn: u32) -> Option<Arc<dyn WrIds>> {
        self.qps.get(self.qp_slot(qpn)?)?.clone()
    }

    /// Enters QP `qpn` for its own async events.
    pub(crate) fn add_qp_events(&mut self, qpn: u32, qp: Arc<dyn QpEvents>) -> Result {
        let s = self.qp_slot(qpn).ok_or(EINVAL)?;
        put(self.qp_events.get_mut(s), qp)
    }

    /// Removes QP `qpn` from the async event table if it is `who`.
    pub(crate) fn remove_qp_events<T>(&mut self, qpn: u32, who: &T) {
        if let Some(s) = self.qp_slot(qpn) {
            clear_if(self.qp_events.get_mut(s), who);
        }
    }

    /// The CQ entered as `cqn` (debugfs).
    pub(crate) fn cq(&self, cqn: u32) -> Option<&Arc<dyn CompTarget>> {
        self.cqs.get(cqn as usize)?.as_ref()
    }

    /// Queues CQ `cqn` for dispatch. Returns whether the CQ exists.
    pub(crate) fn queue_cq(&mut self, cqn: u32) -> bool {
        let i = cqn as usize;
        match self.cqs.get(i) {
            Some(Some(cq)) => {
                cq.note_event();
                self.pending.set_bit(i);
                true
            }
            _ => {
                self.stray_eqes += 1;
                false
            }
        }
    }

    /// The EQ handler's [`EventTables::queue_cq`]: a CQ whose handler may
    /// run in hard-IRQ context goes to `direct` (once, marked busy) while it
    /// has room; any other is queued for the BH dispatcher. Returns whether
    /// the dispatcher must run.
    pub(crate) fn queue_cq_irq(&mut self, cqn: u32, direct: &mut DirectCqs) -> bool {
        if let Some(Some(cq)) = self.cqs.get(cqn as usize) {
            if cq.irq_safe() {
                if let Some(new) = direct.push(cq) {
                    cq.note_event();
                    if new {
                        cq.set_busy(true);
                    }
                    return false;
                }
            }
        }
        self.queue_cq(cqn)
    }

    /// Queues every CQ that takes completion events, as if each had an
    /// EQE: after the device failed, their consumers poll once more and
    /// find their flushed work requests.
    pub(crate) fn queue_all_cqs(&mut self) {
        for (i, cq) in self.cqs.iter().enumerate() {
            if let Some(cq) = cq {
                cq.note_event();
                self.pending.set_bit(i);
            }
        }
    }

    /// The QPN of slot 0.
    pub(crate) fn qpn_base(&self) -> u32 {
        self.qpn_base
    }

    /// The number of kernel QP slots.
    pub(crate) fn qp_slots(&self) -> usize {
        self.qps.len()
    }

    /// The kernel QP in slot `slot`, if any.
    pub(crate) fn qp_at(&self, slot: usize) -> Option<Arc<dyn WrIds>> {
        self.qps.get(slot)?.clone()
    }

    /// Queues an async event (no allocation: the ring was reserved).
    pub(crate) fn queue_event(&mut self, ev: AsyncEvent) {
        if self.events.len() < ASYNC_RING {
            // Capacity was reserved at creation, so this does not allocate.
            if self.events.push(ev, GFP_ATOMIC).is_err() {
                self.events_dropped += 1;
            }
        } else {
            self.events_dropped += 1;
        }
    }

    /// Takes the next async event, then the next pending CQ, marking the
    /// object it goes to busy.
    pub(crate) fn take_next(&mut self) -> Option<Pending> {
        if !self.events.is_empty() {
            if let Ok(ev) = self.events.remove(0) {
                return Some(self.route(ev));
            }
        }
        while let Some(bit) = self.pending.next_bit(0) {
            self.pending.clear_bit(bit);
            if let Some(Some(cq)) = self.cqs.get(bit) {
                cq.set_busy(true);
                return Some(Pending::Cq(cq.clone()));
            }
        }
        None
    }

    /// Where an async event goes: a CQ or QP that takes its own events
    /// (then marked busy, which keeps its destroy waiting for the
    /// delivery), else the device's ULP event handler.
    fn route(&self, ev: AsyncEvent) -> Pending {
        if ev.event_type == u8::from(EventType::CqError) {
            if let Some(Some(cq)) = self.cqs.get(ev.element as usize) {
                if cq.takes_async() {
                    cq.set_busy(true);
                    return Pending::CqEvent(cq.clone(), ev.event_type);
                }
            }
        } else if EventType::try_from(ev.event_type).is_ok_and(EventType::is_qp_srq_event) {
            let qp = self
                .qp_slot(ev.element)
                .and_then(|s| self.qp_events.get(s))
                .and_then(|q| q.clone());
            if let Some(qp) = qp {
                qp.set_busy(true);
                return Pending::QpEvent(qp, ev.event_type);
            }
        }
        Pending::Event(ev)
    }
}
