// SPDX-License-Identifier: GPL-2.0

//! The devices `rmlx5_<n>`: each is a backend (`backend::Backend`: the
//! software HCA's instance `n`, or a ConnectX function) with the core
//! state every device has, whoever drives it: its EQs, its lookup tables,
//! its async event handlers and the BH work that dispatches its events.
//!
//! The verbs objects (`ib/`), the ULP API, uverbs and ib_core reach a
//! device through [`get`] and hold an `Arc<Device>`: they name no backend.
//!
//! # Lifetimes
//!
//! [`register`] enters a device in the table of devices; [`unregister`]
//! takes it out and shuts it down (no dispatch runs afterwards) and
//! destroys its EQs. Objects created on it keep the `Device` allocated,
//! and their calls then fail with the backend's error.

use core::sync::atomic::{
    AtomicBool,
    AtomicU64,
    Ordering, //
};
use kernel::{
    new_spinlock, new_spinlock_irq, new_work,
    prelude::*,
    sync::{
        Arc,
        SpinLock,
        SpinLockIrq,
        UniqueArc, //
    },
    workqueue::{
        self,
        Work, //
    },
};

use super::{
    eq::{
        comp_eq_log_size,
        Eq,
        ASYNC_EQ_LOG_SIZE, //
    },
    events::{
        AsyncEvent,
        EventHandlerFn,
        EventTables, //
    },
};
use crate::backend::Backend;
use crate::mlx5_prm::opcode::EventType;
use crate::perf::Perf;

/// Largest number of devices (software HCAs and PCI functions together).
pub(crate) const MAX_DEVICES: usize = 16;

/// Who an async event handler of a device belongs to.
#[derive(Clone, Copy)]
pub(crate) enum EventSlot {
    /// The kernel ULP of the `rmlx5_ib_*` API.
    Ulp = 0,
    /// The ib_core device (`ib_core.c`).
    IbCore = 1,
}

/// Number of [`EventSlot`]s.
pub(crate) const EVENT_SLOTS: usize = 2;

/// How large a device's tables are.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geometry {
    /// Completion EQs (one per interrupt vector after the async one).
    pub(crate) comp_eqs: usize,
    /// CQNs are below this.
    pub(crate) max_cqs: usize,
    /// QPNs run from `qpn_base` for `max_qps`.
    pub(crate) max_qps: usize,
    pub(crate) qpn_base: u32,
}

/// One device `rmlx5_<n>`.
#[pin_data]
pub(crate) struct Device {
    /// The instance number `n`.
    pub(crate) index: u16,
    /// What runs the device's queues.
    pub(crate) be: Arc<dyn Backend>,
    /// EQs; index = interrupt vector (0 = async, 1.. = completion). The
    /// backend owns the EQs' numbers, the core their rings.
    pub(crate) eqs: KVec<Eq>,
    /// CQN and QPN lookup, dispatch queue (its own leaf lock, see
    /// `core/events.rs`).
    #[pin]
    pub(crate) events: SpinLockIrq<EventTables>,
    /// Asynchronous event handlers (function, context), by [`EventSlot`].
    #[pin]
    pub(crate) event_handler: SpinLockIrq<[Option<(EventHandlerFn, usize)>; EVENT_SLOTS]>,
    /// BH work (system_bh) dispatching queued CQs and async events.
    #[pin]
    pub(crate) dispatch_work: Work<Device>,
    /// Set at [`unregister`]: the dispatcher is no longer queued.
    pub(crate) shutting_down: AtomicBool,
    /// BH dispatch runs and CQ handler calls (debugfs, tests).
    pub(crate) dispatch_runs: AtomicU64,
    pub(crate) handler_calls: AtomicU64,
    /// Where the time of the event path goes (debugfs `rmlx5/perf`).
    pub(crate) perf: Arc<Perf>,
    /// The port is a RoCE port (bound to a netdev by ib_core.c): address
    /// vectors name the next hop by MAC and always carry a GRH.
    pub(crate) roce: AtomicBool,
    /// The device failed (a ConnectX function whose health check failed):
    /// it completes nothing any more, so the CQs of kernel QPs flush what
    /// is outstanding in software ([`Device::set_fatal`]).
    pub(crate) fatal: AtomicBool,
    /// Told when the device fails (the uverbs node's open contexts).
    #[pin]
    fatal_listener: SpinLock<Option<Arc<dyn FatalListener>>>,
}

/// What the layers above do when a device fails ([`Device::set_fatal`]).
pub(crate) trait FatalListener: Send + Sync {
    /// The device failed. Process context.
    fn device_fatal(&self);
}

kernel::impl_has_work! {
    impl HasWork<Self> for Device { self.dispatch_work }
}

impl Device {
    /// Creates device `index` on `be`: the asynchronous EQ on vector 0 and
    /// `geo.comp_eqs` completion EQs, created by the backend but not armed
    /// (they are armed once their interrupt handlers are registered, see
    /// [`Device::arm_eqs`]).
    pub(crate) fn new(
        index: u16,
        be: Arc<dyn Backend>,
        geo: Geometry,
        perf: Arc<Perf>,
    ) -> Result<Arc<Self>> {
        // Allocated first, so that nothing fails once the EQs exist.
        let slot = UniqueArc::<Self>::new_uninit(GFP_KERNEL)?;
        let mut eqs = KVec::with_capacity(geo.comp_eqs + 1, GFP_KERNEL)?;
        let made = (|| -> Result {
            let comp_log = comp_eq_log_size(geo.max_cqs)?;
            for v in 0..=geo.comp_eqs {
                let vector = u16::try_from(v)?;
                let log = if vector == 0 {
                    ASYNC_EQ_LOG_SIZE
                } else {
                    comp_log
                };
                let ring = Eq::alloc_ring(&*be, log)?;
                let eqn = be.create_eq(log, vector, vector == 0, &ring)?;
                // Capacity was reserved above: this does not fail.
                eqs.push(Eq::new(vector, eqn, log, ring), GFP_KERNEL)?;
            }
            Ok(())
        })();
        let tables = made.and_then(|()| EventTables::new(geo.max_cqs, geo.max_qps, geo.qpn_base));
        let tables = match tables {
            Ok(t) => t,
            Err(e) => {
                for eq in eqs.iter() {
                    let _ = eq.destroy(&*be);
                }
                return Err(e);
            }
        };
        let dev = slot.write_pin_init(pin_init!(Self {
            index,
            be,
            eqs,
            events <- new_spinlock_irq!(tables, "rmlx5_events"),
            event_handler <- new_spinlock_irq!([None; EVENT_SLOTS], "rmlx5_event_handler"),
            dispatch_work <- new_work!("rmlx5_dispatch"),
            shutting_down: AtomicBool::new(false),
            dispatch_runs: AtomicU64::new(0),
            handler_calls: AtomicU64::new(0),
            perf,
            roce: AtomicBool::new(false),
            fatal: AtomicBool::new(false),
            fatal_listener <- new_spinlock!(None, "rmlx5_fatal_listener"),
        }));
        match dev {
            Ok(d) => Ok(d.into()),
            Err(never) => match never {},
        }
    }

    /// The number of completion vectors.
    pub(crate) fn comp_vectors(&self) -> usize {
        self.eqs.len().saturating_sub(1).max(1)
    }

    /// The EQ number of completion vector `vector` (modulo the number of
    /// completion vectors).
    pub(crate) fn comp_eqn(&self, vector: u32) -> Result<u8> {
        let k = (vector as usize)
            .checked_rem(self.comp_vectors())
            .unwrap_or(0);
        Ok(self.eqs.get(1 + k).ok_or(EINVAL)?.eqn)
    }

    /// Arms EQ `vector` at its consumer index (its interrupt handler is in
    /// place).
    pub(crate) fn arm_eq(&self, vector: usize) -> Result {
        let eq = self.eqs.get(vector).ok_or(EINVAL)?;
        self.be.ring_eq(eq.eqn, eq.ci.load(Ordering::Relaxed))
    }

    /// Marks the device failed, once: the async event handlers get
    /// `MLX5_EVENT_TYPE_INTERNAL_ERROR` (ib_core's clients see
    /// `IB_EVENT_DEVICE_FATAL`), and from now on kernel CQs complete the
    /// outstanding work requests of their QPs with flush errors, as
    /// mlx5_ib does for a device in internal error; the
    /// [`FatalListener`] is told. Process context.
    pub(crate) fn set_fatal(self: &Arc<Self>) {
        if self.fatal.swap(true, Ordering::AcqRel) {
            return;
        }
        let listener = self.fatal_listener.lock().clone();
        if let Some(l) = listener {
            l.device_fatal();
        }
        self.events.lock().queue_event(AsyncEvent {
            event_type: u8::from(EventType::InternalError),
            element: 0,
        });
        self.kick_dispatch();
        // Consumers waiting on an event get one, to poll their flushes.
        self.events.lock().queue_all_cqs();
        self.kick_dispatch();
    }

    /// Sets who is told when the device fails.
    pub(crate) fn set_fatal_listener(&self, l: Option<Arc<dyn FatalListener>>) {
        *self.fatal_listener.lock() = l;
    }

    /// Whether the device failed ([`Device::set_fatal`]).
    pub(crate) fn is_fatal(&self) -> bool {
        self.fatal.load(Ordering::Acquire)
    }

    /// Queues the BH dispatch work (any context).
    pub(crate) fn kick_dispatch(self: &Arc<Self>) {
        if !self.shutting_down.load(Ordering::Acquire) {
            // Already queued is fine: the queued run will see our CQ.
            let _ = workqueue::system_bh().enqueue(self.clone());
        }
    }

    /// Waits until the BH dispatcher is neither queued nor running, so a
    /// handler it copied out before a change is no longer being called.
    /// Process context.
    pub(crate) fn flush_dispatch(&self) {
        // SAFETY: The work item is an initialised field of `self`, which
        // outlives this call.
        unsafe { crate::work::flush_work(Work::<Device>::raw_get(&self.dispatch_work)) };
    }

    /// Sets the handler of `slot` (or clears it); clearing also waits for
    /// a dispatcher run that may still be calling the old one, so its
    /// context may be freed on return (process context).
    pub(crate) fn set_event_handler(
        &self,
        slot: EventSlot,
        handler: Option<(EventHandlerFn, usize)>,
    ) {
        if let Some(s) = self.event_handler.lock().get_mut(slot as usize) {
            *s = handler;
        }
        if handler.is_none() {
            self.flush_dispatch();
        }
    }
}

/// What a layer above does with a device that goes while its objects may
/// still be held (the ULP API destroys them on the device and leaves their
/// handles dead). Called with the device's number, in process context,
/// while the device still runs.
pub(crate) type RemoveHook = fn(u16);

/// Most [`RemoveHook`]s.
const MAX_HOOKS: usize = 2;

/// The table of devices, by instance number.
pub(crate) struct Table {
    devs: [Option<Arc<Device>>; MAX_DEVICES],
    /// Numbers handed out by [`reserve_index`] and not released yet.
    reserved: [bool; MAX_DEVICES],
    hooks: [Option<RemoveHook>; MAX_HOOKS],
}

impl Table {
    /// No device.
    pub(crate) const fn new() -> Self {
        Self {
            devs: [const { None }; MAX_DEVICES],
            reserved: [false; MAX_DEVICES],
            hooks: [None; MAX_HOOKS],
        }
    }
}

/// Adds a hook run for every device that goes while the module stays (a
/// ConnectX function's unbind).
///
/// # Errors
///
/// `ENOSPC` if [`MAX_HOOKS`] are set.
pub(crate) fn add_remove_hook(f: RemoveHook) -> Result {
    let mut t = DEVICES.lock();
    let slot = t.hooks.iter_mut().find(|h| h.is_none()).ok_or(ENOSPC)?;
    *slot = Some(f);
    Ok(())
}

/// Runs the [`RemoveHook`]s for `rmlx5_<index>`, which is going.
pub(crate) fn run_remove_hooks(index: u16) {
    let hooks = DEVICES.lock().hooks;
    for f in hooks.iter().flatten() {
        f(index);
    }
}

kernel::sync::global_lock! {
    // SAFETY: `init` is called once, in module init, before any device is
    // registered or looked up.
    /// The devices of the module (a plain spinlock: devices are looked up,
    /// entered and removed in process context only).
    pub(crate) unsafe(uninit) static DEVICES: SpinLock<Table> = Table::new();
}

/// Device `rmlx5_<index>`.
///
/// # Errors
///
/// `ENODEV` if there is no such device.
pub(crate) fn get(index: usize) -> Result<Arc<Device>> {
    let t = DEVICES.lock();
    t.devs.get(index).and_then(Clone::clone).ok_or(ENODEV)
}

/// The number of devices registered.
pub(crate) fn count() -> usize {
    DEVICES.lock().devs.iter().filter(|d| d.is_some()).count()
}

/// Enters `dev` as `rmlx5_<dev.index>`.
///
/// # Errors
///
/// `EBUSY` if the number is taken, `EINVAL` if it is out of range.
pub(crate) fn register(dev: &Arc<Device>) -> Result {
    let mut t = DEVICES.lock();
    let slot = t.devs.get_mut(usize::from(dev.index)).ok_or(EINVAL)?;
    if slot.is_some() {
        return Err(EBUSY);
    }
    *slot = Some(dev.clone());
    Ok(())
}

/// Takes the lowest free instance number at or above `from`, for a device
/// to [`register`] later; [`release_index`] gives it back.
///
/// # Errors
///
/// `ENOSPC` if every number is taken.
pub(crate) fn reserve_index(from: usize) -> Result<u16> {
    let mut t = DEVICES.lock();
    let i = (from..MAX_DEVICES)
        .find(|&i| {
            t.devs.get(i).is_some_and(Option::is_none)
                && !t.reserved.get(i).copied().unwrap_or(true)
        })
        .ok_or(ENOSPC)?;
    if let Some(r) = t.reserved.get_mut(i) {
        *r = true;
    }
    u16::try_from(i).map_err(|_| ENOSPC)
}

/// Gives back a number from [`reserve_index`] (its device, if it was
/// registered, must have been taken out).
pub(crate) fn release_index(index: usize) {
    if let Some(r) = DEVICES.lock().reserved.get_mut(index) {
        *r = false;
    }
}

/// Takes `rmlx5_<index>` out of the table: no new user finds it.
pub(crate) fn take(index: usize) -> Option<Arc<Device>> {
    DEVICES.lock().devs.get_mut(index).and_then(Option::take)
}

/// Stops `dev`'s dispatcher and destroys its EQs (their interrupt
/// handlers must be gone). Process context.
pub(crate) fn shut_down(dev: &Device) {
    dev.shutting_down.store(true, Ordering::Release);
    dev.flush_dispatch();
    for eq in dev.eqs.iter() {
        if let Err(e) = eq.destroy(&*dev.be) {
            pr_err!(
                "rmlx5_{}: EQ {} not destroyed (error {})\n",
                dev.index,
                eq.eqn,
                e.to_errno()
            );
        }
    }
}

/// Takes `rmlx5_<index>` out of the table and shuts it down (see
/// [`shut_down`]). Returns the device (objects may still hold it).
pub(crate) fn unregister(index: usize) -> Option<Arc<Device>> {
    let dev = take(index)?;
    shut_down(&dev);
    Some(dev)
}

#[kunit_tests(rmlx5_core_device)]
mod tests {
    use super::*;

    /// Numbers are handed out once until released, never one a device
    /// holds, and never past the table.
    #[test]
    fn reserved_numbers_are_not_handed_out_twice() -> Result {
        let top = MAX_DEVICES - 1;
        let a = reserve_index(top)?;
        assert_eq!(usize::from(a), top);
        assert_eq!(reserve_index(top), Err(ENOSPC));
        assert_eq!(reserve_index(MAX_DEVICES), Err(ENOSPC));
        release_index(top);
        assert_eq!(usize::from(reserve_index(top)?), top);
        release_index(top);
        // The software HCAs of the module hold 0 and up.
        assert!(get(0).is_ok());
        let b = reserve_index(0)?;
        assert!(usize::from(b) >= count());
        assert!(get(usize::from(b)).is_err());
        let c = reserve_index(0)?;
        assert!(c > b);
        release_index(usize::from(c));
        release_index(usize::from(b));
        Ok(())
    }
}
