// SPDX-License-Identifier: GPL-2.0

//! What the 7.3 workqueue abstraction lacks: waiting for one work item
//! (`flush_work`, through the C shim), and the module's own workqueue for
//! frees that may not happen where the last reference went away.

use core::{
    ptr,
    sync::atomic::{
        AtomicPtr,
        Ordering, //
    },
};
use kernel::{
    bindings,
    prelude::*,
    time::{
        delay::fsleep,
        Delta, //
    },
    workqueue::{
        Queue,
        RawWorkItem, //
    },
};

extern "C" {
    fn rmlx5_shim_flush_work(work: *mut bindings::work_struct);
    fn rmlx5_shim_queue_work_elsewhere(work: *mut bindings::work_struct) -> bool;
    fn rmlx5_shim_queue_long(work: *mut bindings::work_struct, here: bool) -> bool;
    fn rmlx5_may_sleep() -> bool;
    fn rmlx5_reap_wq_alloc() -> *mut bindings::workqueue_struct;
    fn rmlx5_reap_wq_destroy(wq: *mut bindings::workqueue_struct);
}

/// Waits until `work` is neither queued nor running.
///
/// # Safety
///
/// `work` must point at an initialised `work_struct` that stays valid
/// during the call.
pub(crate) unsafe fn flush_work(work: *mut bindings::work_struct) {
    // SAFETY: Guaranteed by the caller.
    unsafe { rmlx5_shim_flush_work(work) };
}

/// The per-CPU system workqueue, `system_percpu_wq`, for short work items
/// (the 7.3 abstraction's `workqueue::system()` is `system_wq`, which 7.3
/// deprecates: queueing on it prints a warning).
pub(crate) fn system_percpu() -> &'static Queue {
    // SAFETY: `system_percpu_wq` is set at boot, before any module loads,
    // and never freed.
    unsafe { Queue::from_raw(bindings::system_percpu_wq) }
}

/// The unbound system workqueue, `system_dfl_wq` (`system_unbound_wq` is
/// its deprecated name in 7.3). Only the KUnit tests queue on it now.
#[cfg(CONFIG_KUNIT)]
pub(crate) fn system_dfl() -> &'static Queue {
    // SAFETY: `system_dfl_wq` is set at boot, before any module loads, and
    // never freed.
    unsafe { Queue::from_raw(bindings::system_dfl_wq) }
}

/// Queues work item `ID` of `w` on the next online housekeeping CPU after
/// the caller's (not an isolated one), on the per-CPU `system_long_wq`;
/// with no other such CPU, on the unbound `system_dfl_wq`. For polling
/// work that must not take the CPU of the process that asked for it. As
/// `Queue::enqueue`, it fails if the item is queued already.
pub(crate) fn enqueue_elsewhere<W, const ID: u64>(w: W) -> W::EnqueueOutput
where
    W: RawWorkItem<ID> + Send + 'static,
{
    // SAFETY: The closure returns what `queue_work_on` returns, false
    // only for a work item that is queued already. `W` is `Send` and
    // `'static`, so the other conditions of `__enqueue` do not apply. The
    // pointer is valid during the call (`__enqueue`'s guarantee), and
    // stays so until the work runs if it was queued.
    unsafe { w.__enqueue(|work| rmlx5_shim_queue_work_elsewhere(work)) }
}

/// Queues work item `ID` of `w` on the per-CPU `system_long_wq`: of this
/// CPU if `here`, else of the next online housekeeping CPU after the
/// caller's (this one's if there is no other). Every queueing of one work
/// item through this function goes to that one workqueue, so it never runs
/// twice at once. As `Queue::enqueue`, it fails if the item is queued
/// already.
pub(crate) fn enqueue_long<W, const ID: u64>(w: W, here: bool) -> W::EnqueueOutput
where
    W: RawWorkItem<ID> + Send + 'static,
{
    // SAFETY: As for `enqueue_elsewhere`: the closure returns what
    // `queue_work_on` returns.
    unsafe { w.__enqueue(|work| rmlx5_shim_queue_long(work, here)) }
}

/// Sleeps in steps of 100 µs until `busy` returns false: a destroy waiting
/// for the event paths (the dispatcher, the EQ handler) to leave an object
/// they are in a call on, or a disassociation waiting for the commands in
/// flight on a user context. It must wait however long that takes, since
/// what it waits for uses the object after; if it waits for 10 s it says
/// so once (naming the object: `what` and `id`), so that a stuck wait
/// leaves a trace in the log rather than a silent hang. Process context.
pub(crate) fn wait_not_busy(what: &str, id: u32, busy: impl Fn() -> bool) {
    const STEP_US: i64 = 100;
    const WARN_STEPS: u32 = 100_000;
    let mut steps = 0u32;
    while busy() {
        fsleep(Delta::from_micros(STEP_US));
        steps = steps.saturating_add(1);
        if steps == WARN_STEPS {
            pr_warn!("{what} {id:#x}: still in use after 10 s; waiting on\n");
        }
    }
}

/// Whether the current context may sleep (`preemptible()`: no lock held,
/// interrupts and bottom halves on). Always false on kernels without
/// preemption counting, where a spinlock section cannot be told apart.
pub(crate) fn may_sleep() -> bool {
    // SAFETY: A pure query of the current context.
    unsafe { rmlx5_may_sleep() }
}

/// The reap workqueue while the module is loaded (null before init and
/// after exit).
static REAP_WQ: AtomicPtr<bindings::workqueue_struct> = AtomicPtr::new(ptr::null_mut());

/// The module's reap workqueue: objects whose last reference goes away
/// where their memory may not be freed (a CQ poll with interrupts off, a
/// bottom half) are freed from it. Created first at module init and
/// destroyed last, which waits for every queued free.
pub(crate) struct ReapQueue(());

impl ReapQueue {
    /// Creates the workqueue.
    ///
    /// # Errors
    ///
    /// `ENOMEM` if the kernel could not allocate it.
    pub(crate) fn new() -> Result<Self> {
        // SAFETY: No preconditions.
        let wq = unsafe { rmlx5_reap_wq_alloc() };
        if wq.is_null() {
            return Err(ENOMEM);
        }
        REAP_WQ.store(wq, Ordering::Release);
        Ok(Self(()))
    }
}

impl Drop for ReapQueue {
    fn drop(&mut self) {
        let wq = REAP_WQ.swap(ptr::null_mut(), Ordering::AcqRel);
        if !wq.is_null() {
            // SAFETY: `wq` came from `rmlx5_reap_wq_alloc` and is destroyed
            // once (the swap above); destroying drains it first.
            unsafe { rmlx5_reap_wq_destroy(wq) };
        }
    }
}

/// The reap workqueue as the C side takes it (null outside the module's
/// lifetime): for work the C shim queues, which module exit thereby
/// waits for.
pub(crate) fn reap_wq_raw() -> *mut bindings::workqueue_struct {
    REAP_WQ.load(Ordering::Acquire)
}

/// The reap workqueue, or `None` outside the module's lifetime.
pub(crate) fn reap_queue() -> Option<&'static Queue> {
    let wq = REAP_WQ.load(Ordering::Acquire);
    if wq.is_null() {
        return None;
    }
    // SAFETY: `wq` is live until `ReapQueue` drops, the module's last
    // field: every object that queues a free is gone by then, so no caller
    // holds the reference past it.
    Some(unsafe { Queue::from_raw(wq) })
}
