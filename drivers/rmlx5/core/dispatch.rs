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
//! destroy. The dispatcher takes a reference (`Arc`) under the HCA's table
//! lock (`core/events.rs`), sets the CQ's `busy` flag under that lock,
//! calls the handler with the lock released, then clears `busy`. Destroy
//! removes the CQ from the table and clears its pending bit under the
//! lock, so no dispatch can start
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
//! Lock order: the table lock is released before the handler slot
//! (`HcaDev::event_handler`) is locked and before any callback runs; the
//! dispatcher never takes the backend's lock.

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

use super::events::{
    call_event_handler,
    AsyncEvent,
    Pending, //
};
use crate::hca::SoftHca;

/// Handler calls per dispatch run.
pub(crate) const DISPATCH_BUDGET: u32 = 64;
/// Time budget of one dispatch run, in microseconds.
pub(crate) const DISPATCH_TIME_US: i64 = 1000;

impl SoftHca {
    /// Takes the next pending CQ or async event of the HCAs from `start`
    /// on (round robin), with the HCA it came from.
    fn next_pending(&self, start: usize) -> Option<(usize, Pending)> {
        let n = self.devs.len();
        for k in 0..n {
            let h = (start + k).checked_rem(n).unwrap_or(0);
            let Ok(dev) = self.dev(h) else {
                continue;
            };
            if let Some(p) = dev.events.lock().take_next() {
                return Some((h, p));
            }
        }
        None
    }

    fn deliver_event(&self, hca: usize, ev: AsyncEvent) {
        let Ok(dev) = self.dev(hca) else {
            return;
        };
        let handlers = *dev.event_handler.lock();
        for &(f, ctx) in handlers.iter().flatten() {
            call_event_handler(f, hca, ev, ctx);
        }
        if handlers.iter().all(Option::is_none) {
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
            let Some((h, next)) = this.next_pending(cursor) else {
                perf.bh_run.add(perf.now().saturating_sub(t0));
                return;
            };
            cursor = h + 1;
            match next {
                Pending::Event(ev) => this.deliver_event(h, ev),
                Pending::CqEvent(cq, ty) => {
                    cq.async_event(ty);
                    cq.set_busy(false);
                }
                Pending::QpEvent(qp, ty) => {
                    qp.async_event(ty);
                    qp.set_busy(false);
                }
                Pending::Cq(cq) => {
                    let t = perf.now();
                    cq.complete();
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
