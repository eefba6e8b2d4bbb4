// SPDX-License-Identifier: GPL-2.0

//! BH dispatch of completion events to CQ completion handlers, and of
//! async events to the ULP event handler.
//!
//! # Why a BH work item and not a tasklet
//!
//! Tasklets are deprecated in favour of BH workqueues (Linux 6.9+), which
//! run in the same softirq context on the CPU that queued them; the kernel
//! crate wraps `system_bh_wq` safely, so the dispatcher needs no C. Each
//! device has its work item; it is queued by the device's EQ handler
//! (queueing an already queued item is a no-op, which is the coalescing of
//! the work itself) and takes CQs from the device's pending bitmap, which
//! holds one bit per CQ (coalescing of EQEs: N EQEs for one CQ, one
//! handler call).
//!
//! # CQ lifetime rule
//!
//! A CQ with a completion handler is in its HCA's table from creation to
//! destroy. The dispatcher takes a reference (`Arc`) under the HCA's table
//! lock (`core/events.rs`), sets the CQ's `busy` flag under that lock,
//! calls the handler with the lock released, drops its reference, then
//! clears `busy`. Destroy removes the CQ from the table and clears its
//! pending bit under the lock, so no dispatch can start afterwards, then
//! waits for `busy` to clear: once destroy returns, the handler is not
//! running and never will again, and the ULP may free its context. While
//! `busy` is set the table or the destroyer holds a reference, so the
//! dispatcher's is never the last: memory is freed in process context.
//!
//! # User CQs skip the dispatcher
//!
//! A user CQ's completion event only queues its channel (rmlx5's own, or
//! ib_uverbs' for rdma-core) under an interrupt-safe spinlock and wakes the
//! reader, as mlx5_ib's EQ interrupt does. The EQ handler therefore takes
//! such CQs itself (`EventTables::queue_cq_irq`, at most
//! `DirectCqs::MAX` per pass, busy raised under the table lock like
//! here), releases the table lock and calls their handlers in hard-IRQ
//! context, saving the BH hop. `busy` is a count, since the dispatcher may
//! hold the same CQ at the same time. Kernel ULPs' handlers stay here.
//!
//! # Budget
//!
//! At most [`DISPATCH_BUDGET`] handler calls or [`DISPATCH_TIME_US`] per
//! run; then the work requeues itself and returns, so softirq time stays
//! bounded. Nothing here allocates or sleeps.
//!
//! Lock order: the table lock is released before the handler slot
//! (`Device::event_handler`) is locked and before any callback runs; the
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

use super::{
    device::Device,
    events::{
        call_event_handler,
        AsyncEvent,
        Pending, //
    },
};

/// Handler calls per dispatch run.
pub(crate) const DISPATCH_BUDGET: u32 = 64;
/// Time budget of one dispatch run, in microseconds.
pub(crate) const DISPATCH_TIME_US: i64 = 1000;

/// Drops the dispatcher's reference to an object it marked busy, then
/// clears the flag with `clear`. While the flag is set another reference
/// exists (the table's, or that of the destroy waiting for the flag), so
/// ours is never the last one: an object's memory, a PCI function's
/// coherent DMA memory among it, is never freed here in BH context.
pub(crate) fn release<T: ?Sized>(t: Arc<T>, clear: impl FnOnce(&T)) {
    let p = Arc::as_ptr(&t);
    drop(t);
    // SAFETY: `p` stays valid: the object is busy, so another `Arc` to it
    // lives until `clear` has run (see above and the CQ lifetime rule in
    // the module documentation).
    clear(unsafe { &*p });
}

impl Device {
    fn deliver_event(&self, ev: AsyncEvent) {
        let hca = usize::from(self.index);
        let handlers = *self.event_handler.lock();
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

impl WorkItem for Device {
    type Pointer = Arc<Device>;

    fn run(this: Arc<Device>) {
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
        loop {
            let next = this.events.lock().take_next();
            let Some(next) = next else {
                perf.bh_run.add(perf.now().saturating_sub(t0));
                return;
            };
            match next {
                Pending::Event(ev) => this.deliver_event(ev),
                Pending::CqEvent(cq, ty) => {
                    cq.async_event(ty);
                    release(cq, |c| c.set_busy(false));
                }
                Pending::QpEvent(qp, ty) => {
                    qp.async_event(ty);
                    release(qp, |q| q.set_busy(false));
                }
                Pending::Cq(cq) => {
                    let t = perf.now();
                    cq.complete();
                    perf.cq_handler.add(perf.now().saturating_sub(t));
                    this.handler_calls.fetch_add(1, Ordering::Relaxed);
                    // After this store destroy may return.
                    release(cq, |c| c.set_busy(false));
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
