// SPDX-License-Identifier: GPL-2.0

//! BH dispatch of completion events to CQ completion handlers, and of
//! async events to the ULP event handler.
//!
//! # Why a BH work item and not a tasklet
//!
//! Tasklets are deprecated in favour of BH workqueues (Linux 6.9+), which
//! run in the same softirq context on the CPU that queued them; the kernel
//! crate wraps `system_bh_wq` safely, so the dispatcher needs no C. One
//! work item serves all HCAs; it is queued by the EQ handler (queueing an
//! already queued item is a no-op, which is the coalescing of the work
//! itself) and takes CQs from the per-HCA pending bitmaps, which hold one
//! bit per CQ (coalescing of EQEs: N EQEs for one CQ, one handler call).
//!
//! # CQ lifetime rule
//!
//! A CQ with a completion handler is in its HCA's table from creation to
//! destroy. The dispatcher takes a reference (`Arc`) under the fabric lock,
//! sets the CQ's `busy` flag under that lock, calls the handler with the
//! lock released, then clears `busy`. Destroy removes the CQ from the table
//! and clears its pending bit under the lock, so no dispatch can start
//! afterwards, then waits for `busy` to clear: once destroy returns, the
//! handler is not running and never will again, and the ULP may free its
//! context. Memory is freed when the last `Arc` goes, which may be the
//! dispatcher's (in BH context; only `kfree`s happen then).
//!
//! # Budget
//!
//! At most [`DISPATCH_BUDGET`] handler calls or [`DISPATCH_TIME_US`] per
//! run; then the work requeues itself and returns, so softirq time stays
//! bounded. Nothing here allocates or sleeps.
//!
//! Lock order: the fabric lock is released before the handler slot
//! (`HcaDev::event_handler`) is locked and before any ULP callback runs.

use core::sync::atomic::Ordering;
use kernel::{
    prelude::*,
    sync::Arc,
    time::{
        Delta,
        Instant,
        Monotonic, //
    },
    workqueue::WorkItem,
};

use crate::hca::{
    AsyncEvent,
    HcaTables,
    SoftHca, //
};
use crate::hca_model::qp::QPN_BASE;
use crate::ib::{
    cq::Cq,
    uqp::UserQp, //
};
use crate::mlx5_prm::opcode::EventType;

impl HcaTables {
    /// The user CQ an async event is about, if it is a CQ event of one.
    fn user_cq_of(&self, ev: &AsyncEvent) -> Option<Arc<Cq>> {
        if ev.event_type != u8::from(EventType::CqError) {
            return None;
        }
        let cq = self.cqs.get(ev.element as usize)?.as_ref()?;
        cq.sink()?;
        Some(cq.clone())
    }

    /// The user QP an async event is about, if it is a QP event of one.
    fn user_qp_of(&self, ev: &AsyncEvent) -> Option<Arc<UserQp>> {
        if !EventType::try_from(ev.event_type).is_ok_and(EventType::is_qp_srq_event) {
            return None;
        }
        let slot = ev.element.checked_sub(QPN_BASE)? as usize;
        self.uqps.get(slot)?.clone()
    }
}

/// Handler calls per dispatch run.
pub(crate) const DISPATCH_BUDGET: u32 = 64;
/// Time budget of one dispatch run, in microseconds.
pub(crate) const DISPATCH_TIME_US: i64 = 1000;

enum Next {
    Cq(Arc<Cq>),
    Event(usize, AsyncEvent),
    /// An async event of a user CQ (marked busy).
    UserCqEvent(Arc<Cq>, u8),
    /// An async event of a user QP (marked busy).
    UserQpEvent(Arc<UserQp>, u8),
    Idle,
}

impl SoftHca {
    /// Takes the next pending CQ (marking it busy) or async event.
    fn next_pending(&self, start: usize) -> Next {
        let mut st = self.state.lock();
        let n = st.hcas.len();
        for k in 0..n {
            let h = (start + k).checked_rem(n).unwrap_or(0);
            let Some(t) = st.hcas.get_mut(h) else {
                continue;
            };
            if !t.events.is_empty() {
                let ev = t.events.remove(0);
                if let Ok(ev) = ev {
                    // Events of user objects go to their process; the
                    // busy flag keeps their destroy waiting for delivery.
                    if let Some(cq) = t.user_cq_of(&ev) {
                        cq.set_busy(true);
                        return Next::UserCqEvent(cq, ev.event_type);
                    }
                    if let Some(qp) = t.user_qp_of(&ev) {
                        qp.set_busy(true);
                        return Next::UserQpEvent(qp, ev.event_type);
                    }
                    return Next::Event(h, ev);
                }
            }
            while let Some(bit) = t.pending.next_bit(0) {
                t.pending.clear_bit(bit);
                if let Some(Some(cq)) = t.cqs.get(bit) {
                    cq.set_busy(true);
                    return Next::Cq(cq.clone());
                }
            }
        }
        Next::Idle
    }

    fn deliver_event(&self, hca: usize, ev: AsyncEvent) {
        let Ok(dev) = self.dev(hca) else {
            return;
        };
        let handler = *dev.event_handler.lock();
        if let Some((f, ctx)) = handler {
            crate::ulp::call_event_handler(f, hca, ev, ctx);
        } else {
            pr_debug!(
                "rmlx5_{}: async event {:#x} on {:#x} (no handler)\n",
                hca,
                ev.event_type,
                ev.element
            );
        }
    }
}

impl WorkItem<1> for SoftHca {
    type Pointer = Arc<SoftHca>;

    fn run(this: Arc<SoftHca>) {
        if this.shutting_down.load(Ordering::Acquire) {
            return;
        }
        this.dispatch_runs.fetch_add(1, Ordering::Relaxed);
        let perf = &this.perf;
        let t0 = perf.now();
        if let Some(d) = perf.bh_queued.take(t0) {
            perf.bh_delay.add(d);
        }
        let start = Instant::<Monotonic>::now();
        let mut calls = 0u32;
        let mut cursor = 0usize;
        loop {
            match this.next_pending(cursor) {
                Next::Idle => {
                    perf.bh_run.add(perf.now().saturating_sub(t0));
                    return;
                }
                Next::Event(h, ev) => {
                    cursor = h + 1;
                    this.deliver_event(h, ev);
                }
                Next::UserCqEvent(cq, ty) => {
                    cursor = cq.hca() + 1;
                    cq.call_async(ty);
                    cq.set_busy(false);
                }
                Next::UserQpEvent(qp, ty) => {
                    cursor = qp.hca() + 1;
                    qp.call_async(ty);
                    qp.set_busy(false);
                }
                Next::Cq(cq) => {
                    cursor = cq.hca() + 1;
                    let t = perf.now();
                    cq.call_handler();
                    perf.cq_handler.add(perf.now().saturating_sub(t));
                    this.handler_calls.fetch_add(1, Ordering::Relaxed);
                    // After this store destroy may return; `cq` itself
                    // stays valid through our reference.
                    cq.set_busy(false);
                }
            }
            calls += 1;
            if calls >= DISPATCH_BUDGET || start.elapsed() > Delta::from_micros(DISPATCH_TIME_US) {
                perf.bh_run.add(perf.now().saturating_sub(t0));
                this.kick_dispatch();
                return;
            }
        }
    }
}

impl WorkItem<2> for SoftHca {
    type Pointer = Arc<SoftHca>;

    fn run(this: Arc<SoftHca>) {
        // Process context: run the engine in budgets, releasing the lock
        // (and enabling interrupts) between them.
        for _ in 0..64 {
            if this.shutting_down.load(Ordering::Acquire) {
                return;
            }
            let more = {
                let mut st = this.state.lock();
                this.engine_locked(&mut st)
            };
            if !more {
                return;
            }
        }
        this.kick_engine();
    }
}
