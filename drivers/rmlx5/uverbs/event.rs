// SPDX-License-Identifier: GPL-2.0

//! Event queues behind the `[infinibandevent]` files: completion channels
//! and the async-event file of a context.
//!
//! Each object that can raise an event owns an [`EventSlot`]: the storage
//! for its one possible pending event on one queue. Posting an event links
//! the slot into the queue's FIFO, whose capacity was reserved when the
//! object attached, so the interrupt and BH paths never allocate and an
//! event is never dropped for want of memory. A second event of an object
//! whose first is still unread coalesces with it (the reader learns "this
//! CQ has completions", which is all a completion event says). Async events
//! coalesce per type only: the slot keeps a mask of the pending types, so a
//! QP's `QP_ACCESS_ERR` is not swallowed by its unread `COMM_EST`; each
//! read returns one type (lowest first) and re-queues the slot at the tail
//! while others remain.
//!
//! Lock order: a queue's `inner` spinlock is innermost; nothing else is
//! taken under it (the wake-up and SIGIO happen after it is released).

use core::{
    cell::UnsafeCell,
    sync::atomic::{
        AtomicBool,
        AtomicU32,
        Ordering, //
    },
};
use kernel::{
    bindings, new_poll_condvar, new_spinlock_irq,
    prelude::*,
    sync::{
        poll::PollCondVar,
        Arc,
        SpinLockIrq, //
    },
};

use crate::rmlx5_abi::uapi::{
    AsyncEvent,
    COMP_EVENT_SIZE, //
};
use crate::rmlx5_abi::wire::Wire;

/// `EPOLLIN` (`uapi/linux/eventpoll.h`; bindgen does not see the
/// `__poll_t` casts).
const EPOLLIN: u32 = 0x1;
/// `EPOLLERR`.
pub(crate) const EPOLLERR: u32 = 0x8;
/// `EPOLLRDNORM`.
const EPOLLRDNORM: u32 = 0x40;

/// What a queue's `read()` returns per event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QueueKind {
    /// A completion channel: the CQ's 8-byte user handle.
    Comp,
    /// The async-event file: a 16-byte [`AsyncEvent`].
    Async,
}

impl QueueKind {
    /// Bytes of one event.
    pub(crate) fn event_size(self) -> usize {
        match self {
            QueueKind::Comp => COMP_EVENT_SIZE,
            QueueKind::Async => AsyncEvent::SIZE,
        }
    }
}

/// An object's storage for its one pending event on one queue.
pub(crate) struct EventSlot {
    /// The object's user handle, returned with the event.
    element: u64,
    /// Pending async event types, bit `EVENT_*` set per type; unused for
    /// completions. Changed only under the queue's lock.
    pending_types: AtomicU32,
    /// The slot is linked in its queue's FIFO. Changed only under that
    /// queue's lock.
    queued: AtomicBool,
    /// Events read by the process (`comp_events_reported` or
    /// `async_events_reported`). Changed only under the queue's lock.
    reported: AtomicU32,
}

impl EventSlot {
    /// A slot for an object whose user handle is `element`.
    pub(crate) fn new(element: u64) -> Result<Arc<Self>> {
        Ok(Arc::new(
            Self {
                element,
                pending_types: AtomicU32::new(0),
                queued: AtomicBool::new(false),
                reported: AtomicU32::new(0),
            },
            GFP_KERNEL,
        )?)
    }

    /// Events of this slot the process has read.
    pub(crate) fn reported(&self) -> u32 {
        self.reported.load(Ordering::Relaxed)
    }
}

/// The part of a queue its lock protects.
struct QueueInner {
    /// Pending events, oldest first. Its capacity is at least `attached`.
    fifo: KVec<Arc<EventSlot>>,
    /// Slots that may be linked (objects attached to this queue).
    attached: usize,
    /// The file was released, or the context is gone: new events are
    /// discarded and readers get `EIO`.
    closed: bool,
}

/// The `fasync` list of a file.
struct Fasync(UnsafeCell<*mut bindings::fasync_struct>);

// SAFETY: the list is only touched by `fasync_helper` and `kill_fasync`,
// which synchronise through the list's own lock and RCU.
unsafe impl Send for Fasync {}
// SAFETY: as above.
unsafe impl Sync for Fasync {}

/// An event queue: the state behind one `[infinibandevent]` file.
///
/// # Invariants
///
/// A slot's `queued` flag is set exactly while the slot is in `fifo`;
/// while the queue is open, `fifo.capacity() >= attached >= fifo.len()`.
#[pin_data]
pub(crate) struct EventQueue {
    kind: QueueKind,
    #[pin]
    inner: SpinLockIrq<QueueInner>,
    /// Readers and pollers wait here.
    #[pin]
    wait: PollCondVar,
    fasync: Fasync,
}

impl EventQueue {
    /// An empty, open queue.
    pub(crate) fn new(kind: QueueKind) -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                kind,
                inner <- new_spinlock_irq!(
                    QueueInner {
                        fifo: KVec::new(),
                        attached: 0,
                        closed: false,
                    },
                    "rmlx5_event_queue"
                ),
                wait <- new_poll_condvar!("rmlx5_event_wait"),
                fasync: Fasync(UnsafeCell::new(core::ptr::null_mut())),
            }),
            GFP_KERNEL,
        )
    }

    /// What `read()` returns per event.
    pub(crate) fn kind(&self) -> QueueKind {
        self.kind
    }

    /// Reserves room for one more slot; process context (may sleep).
    pub(crate) fn attach(&self) -> Result {
        loop {
            let want = {
                let mut g = self.inner.lock();
                if g.fifo.capacity() > g.attached {
                    g.attached += 1;
                    return Ok(());
                }
                g.attached.checked_add(1).ok_or(ENOMEM)?.max(4)
            };
            let mut fresh = KVec::with_capacity(want.checked_mul(2).ok_or(ENOMEM)?, GFP_KERNEL)?;
            let mut g = self.inner.lock();
            if g.fifo.capacity() <= g.attached && fresh.capacity() > g.attached {
                for slot in g.fifo.drain_all() {
                    // Cannot fail: `fresh` has room for `attached >= len`.
                    if fresh.push_within_capacity(slot).is_err() {
                        break;
                    }
                }
                core::mem::swap(&mut g.fifo, &mut fresh);
            }
            // The old vector (now `fresh`) is freed after the unlock.
            drop(g);
        }
    }

    /// Releases a slot's reservation, discarding its pending event.
    pub(crate) fn detach(&self, slot: &Arc<EventSlot>) {
        let mut g = self.inner.lock();
        if slot.queued.load(Ordering::Relaxed) {
            g.fifo.retain(|s| !Arc::ptr_eq(s, slot));
            slot.queued.store(false, Ordering::Relaxed);
        }
        g.attached = g.attached.saturating_sub(1);
    }

    /// Posts `slot`'s event of type `event_type`: any context, never
    /// allocates. The slot must be attached to this queue. An async event
    /// type at or above 32 (none exists) is ignored.
    pub(crate) fn post(&self, slot: &Arc<EventSlot>, event_type: u32) {
        let Some(bit) = 1u32.checked_shl(event_type) else {
            return;
        };
        {
            let mut g = self.inner.lock();
            if g.closed {
                return;
            }
            if slot.queued.load(Ordering::Relaxed) {
                // Coalesce: a completion event says only "this CQ has
                // completions"; an async event keeps its type in the mask.
                let old = slot.pending_types.load(Ordering::Relaxed);
                if self.kind == QueueKind::Comp || old & bit != 0 {
                    return;
                }
                slot.pending_types.store(old | bit, Ordering::Relaxed);
                drop(g);
                self.wait.notify_all();
                // SAFETY: `fasync` is this queue's list, see `Fasync`.
                unsafe { super::event_file::kill_fasync(self.fasync.0.get()) };
                return;
            }
            // The reservation made at attach time guarantees room; a
            // failure would be a bookkeeping bug, and then the event is
            // dropped rather than anything allocated here.
            if g.fifo.push_within_capacity(slot.clone()).is_err() {
                return;
            }
            slot.pending_types.store(bit, Ordering::Relaxed);
            slot.queued.store(true, Ordering::Relaxed);
        }
        self.wait.notify_all();
        // SAFETY: `fasync` is this queue's list, see `Fasync`.
        unsafe { super::event_file::kill_fasync(self.fasync.0.get()) };
    }

    /// Marks the queue closed but keeps what is pending: readers get those
    /// events, then `EIO`; later events are discarded.
    pub(crate) fn close_after_pending(&self) {
        self.inner.lock().closed = true;
        self.wait.notify_all();
    }

    /// Marks the queue closed: pending events are dropped, later ones
    /// discarded, and readers and pollers are woken to see `EIO`/`EPOLLERR`.
    pub(crate) fn close(&self) {
        let old = {
            let mut g = self.inner.lock();
            g.closed = true;
            for s in g.fifo.iter() {
                s.queued.store(false, Ordering::Relaxed);
            }
            core::mem::take(&mut g.fifo)
        };
        // The slot references are released after the unlock.
        drop(old);
        self.wait.notify_all();
    }

    /// Takes the oldest event, encoded into `out` (at least
    /// [`QueueKind::event_size`] bytes). Waits unless `nonblock`.
    ///
    /// # Errors
    ///
    /// `EAGAIN` (empty, `nonblock`), `ERESTARTSYS` (signal while
    /// waiting), `EIO` (queue closed and empty), `EINVAL` (`out` too
    /// short; the event stays queued).
    pub(crate) fn pop(&self, out: &mut [u8], nonblock: bool) -> Result<usize> {
        let size = self.kind.event_size();
        let mut g = self.inner.lock();
        while g.fifo.is_empty() {
            if g.closed {
                return Err(EIO);
            }
            if nonblock {
                return Err(EAGAIN);
            }
            if self.wait.wait_interruptible(&mut g) {
                return Err(ERESTARTSYS);
            }
        }
        let buf = out.get_mut(..size).ok_or(EINVAL)?;
        let slot = g.fifo.remove(0).map_err(|_| EINVAL)?;
        slot.reported.fetch_add(1, Ordering::Relaxed);
        let types = slot.pending_types.load(Ordering::Relaxed);
        let event_type = types.trailing_zeros();
        let rest = types & !1u32.checked_shl(event_type).unwrap_or(0);
        slot.pending_types.store(rest, Ordering::Relaxed);
        // Other types of this object stay pending, behind the events
        // queued meanwhile. The slot just left the FIFO, so there is room.
        let requeued = self.kind == QueueKind::Async
            && rest != 0
            && g.fifo.push_within_capacity(slot.clone()).is_ok();
        slot.queued.store(requeued, Ordering::Relaxed);
        drop(g);
        match self.kind {
            QueueKind::Comp => *buf.first_chunk_mut().ok_or(EINVAL)? = slot.element.to_ne_bytes(),
            QueueKind::Async => AsyncEvent {
                element: slot.element,
                event_type,
                reserved: 0,
            }
            .write(buf)
            .ok_or(EINVAL)?,
        }
        Ok(size)
    }

    /// Poll state: readable while events are pending, error once closed.
    pub(crate) fn poll_mask(&self) -> u32 {
        let g = self.inner.lock();
        if !g.fifo.is_empty() {
            EPOLLIN | EPOLLRDNORM
        } else if g.closed {
            EPOLLERR
        } else {
            0
        }
    }

    /// The wait queue pollers register on.
    pub(crate) fn waitq(&self) -> &PollCondVar {
        &self.wait
    }

    /// The file's `fasync` list.
    pub(crate) fn fasync_list(&self) -> *mut *mut bindings::fasync_struct {
        self.fasync.0.get()
    }

    /// The file is gone and no object is attached: nothing can use the
    /// queue any more.
    pub(crate) fn is_unused(&self) -> bool {
        let g = self.inner.lock();
        g.closed && g.attached == 0
    }

    /// Events pending (for the KUnit suites).
    #[cfg(CONFIG_KUNIT)]
    pub(crate) fn pending(&self) -> usize {
        self.inner.lock().fifo.len()
    }
}
