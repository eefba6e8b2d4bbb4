// SPDX-License-Identifier: GPL-2.0

//! The health poll of a ConnectX function, and what happens when it
//! fails.
//!
//! Like mlx5_core's `poll_health`, a periodic work item (every
//! `cx_health_ms`, 2 s by default) reads a few registers of the
//! initialization segment, without the function's mutex (a command may
//! hold it for a minute):
//!
//! - the firmware version: all ones means the device fell off the bus;
//! - the health buffer's syndrome: non-zero after a firmware assert or a
//!   fatal hardware error;
//! - the health counter, which live firmware keeps moving: three polls in
//!   a row with the same value mean the firmware hung
//!   (`MAX_MISSES` in mlx5_core);
//! - the command queue address and the NIC interface state: a function
//!   reset behind the driver's back (an FLR through sysfs, a bus reset)
//!   forgets the address, and a firmware that disabled the interface says
//!   so there.
//!
//! On the first failure the function is *failed*, once:
//!
//! 1. bus mastering goes off, so the device can no longer write memory
//!    the driver is about to free;
//! 2. the shared [`Fatal`] flag is set: a command waiting for its
//!    completion stops within a millisecond, and no command is posted any
//!    more (`Bus::fatal`, the command interface's internal error);
//! 3. the verbs device is marked failed (`Device::set_fatal`): ib_core's
//!    clients get `IB_EVENT_DEVICE_FATAL`, the rmlx5 ULP API's handlers
//!    `MLX5_EVENT_TYPE_INTERNAL_ERROR`, and kernel CQs flush what their
//!    QPs have outstanding;
//! 4. unless `cx_recover=0`, recovery is queued: the function is unbound
//!    (the driver writes it off and frees its memory: nothing is sent to
//!    the device), reset, and probed again, which brings it up from
//!    scratch if the reset revived it. A function that fails again within
//!    `cx_recover_grace_ms` (60 s) of coming back is left down instead, so
//!    that a card that keeps failing is not reset in a loop.

use core::sync::atomic::{
    AtomicBool,
    AtomicU32,
    AtomicU8,
    Ordering, //
};
use kernel::{
    device::{
        Bound,
        Core, //
    },
    ffi::c_void,
    pci,
    prelude::*,
    sync::Arc,
};

use super::bar::CxBar;
use super::AsyncIrq;
use crate::mlx5_prm::init_seg::{
    CmdqAddrLSz,
    HealthBuffer,
    CMDQ_ADDR_H_OFFSET,
    CMDQ_ADDR_L_SZ_OFFSET,
    FW_REV_OFFSET,
    HEALTH_BUFFER_SIZE,
    HEALTH_COUNTER_OFFSET,
    HEALTH_OFFSET,
    NIC_IFC_DISABLED,
    NIC_IFC_SW_RESET, //
};

/// Polls with an unchanged health counter before the firmware is taken
/// for hung (mlx5_core's `MAX_MISSES`).
const MAX_MISSES: u32 = 3;

/// What the PCI core's callbacks tell the poller (`RMLX5_PCI_*` of
/// `rmlx5_shim.h`).
mod pci_event {
    pub(super) const RESET_PREPARE: u32 = 1;
    pub(super) const RESET_DONE: u32 = 2;
    pub(super) const NORMAL: u32 = 3;
    pub(super) const FROZEN: u32 = 4;
    pub(super) const PERM_FAILURE: u32 = 5;
    pub(super) const RESUME: u32 = 6;
    pub(super) const TAKEN: u32 = 7;
}

extern "C" {
    fn rmlx5_pci_clear_master(dev: *mut c_void);
    fn rmlx5_pci_decodes(dev: *mut c_void) -> bool;
    fn rmlx5_poller_start(
        f: unsafe extern "C" fn(*mut c_void),
        event: unsafe extern "C" fn(*mut c_void, u32) -> u32,
        ctx: *mut c_void,
        ms: u32,
        dev: *mut c_void,
    ) -> *mut c_void;
    fn rmlx5_poller_stop(p: *mut c_void);
    fn rmlx5_pci_note_written_off(dev: *mut c_void);
    fn rmlx5_pci_install_err_handlers(dev: *mut c_void);
    fn rmlx5_pci_reset_if_written_off(dev: *mut c_void) -> i32;
    fn rmlx5_pci_recover(
        dev: *mut c_void,
        wq: *mut kernel::bindings::workqueue_struct,
        grace_ms: u32,
    ) -> i32;
}

/// Whether a function failed: set once by the health poll, read by the
/// command interface's waits ([`super::bus::CxBus`]) and by unbind.
pub(crate) struct Fatal {
    /// Published once the function's DMA is off (see [`Fatal::claim`]).
    failed: AtomicBool,
    /// Someone is failing the function (set before `failed`).
    claimed: AtomicBool,
    /// The function is being unbound: a failure found now is not
    /// followed by a recovery (it would bind the function again).
    no_recovery: AtomicBool,
    /// One more than the opcode of a command that timed out, 0 if none:
    /// the next poll fails the function for it.
    lost: AtomicU32,
    /// The function was reset after it failed (its DMA already off), by
    /// the PCI core: its firmware holds none of the driver's addresses,
    /// so take-down does not record it for a reset and its next probe
    /// does not reset it again (see [`Monitor::pci_event`]).
    reset_after_failure: AtomicBool,
}

impl Fatal {
    pub(super) fn new() -> Result<Arc<Self>> {
        Ok(Arc::new(
            Fatal {
                failed: AtomicBool::new(false),
                claimed: AtomicBool::new(false),
                no_recovery: AtomicBool::new(false),
                lost: AtomicU32::new(0),
                reset_after_failure: AtomicBool::new(false),
            },
            GFP_KERNEL,
        )?)
    }

    /// Whether the function failed (and its DMA is off).
    pub(crate) fn is_set(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Claims the failing of the function; returns whether this caller
    /// is the first. The caller stops the DMA, then [`Fatal::publish`]es:
    /// nothing may see the function failed (and free memory a command
    /// had lent it) while the device can still write.
    fn claim(&self) -> bool {
        !self.claimed.swap(true, Ordering::AcqRel)
    }

    /// Publishes the failure (after the DMA was stopped).
    fn publish(&self) {
        self.failed.store(true, Ordering::Release);
    }

    /// Whether the function was reset after it failed (see
    /// [`Fatal::reset_after_failure`]).
    fn was_reset_after_failure(&self) -> bool {
        self.reset_after_failure.load(Ordering::Acquire)
    }

    /// The function is being unbound: no recovery from now on.
    pub(super) fn stop_recovery(&self) {
        self.no_recovery.store(true, Ordering::Release);
    }

    /// A command with `opcode` timed out (from the command interface).
    pub(super) fn note_lost(&self, opcode: u16) {
        let _ = self.lost.compare_exchange(
            0,
            u32::from(opcode) + 1,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }

    /// The opcode of a command that timed out, if one did.
    fn lost(&self) -> Option<u16> {
        let v = self.lost.load(Ordering::Acquire);
        v.checked_sub(1).and_then(|op| u16::try_from(op).ok())
    }
}

/// Why the health check failed.
#[derive(Clone, Copy, Debug)]
enum Failure {
    /// The registers read all ones.
    Gone,
    /// The firmware reported a fatal error.
    Syndrome(HealthBuffer),
    /// The health counter stayed at this value for [`MAX_MISSES`] polls.
    Stalled(u32),
    /// The command queue address reads back as this, not the driver's.
    Reset(u64),
    /// The NIC interface state reads this (disabled or in SW reset).
    NicInterface(u8),
    /// A command with this opcode timed out: its entry (and maybe the
    /// mailboxes) stay with a device that no longer answers it.
    LostCommand(u16),
}

impl core::fmt::Display for Failure {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Failure::Gone => write!(f, "the device is gone (its registers read all ones)"),
            Failure::Syndrome(h) => write!(
                f,
                "fatal syndrome {:#x} (ext {:#x}, irisc {}, severity {}, reset requested {}, assert var0 {:#x} exit {:#x} callra {:#x}, hw id {:#x})",
                h.synd,
                h.ext_synd,
                h.irisc_index,
                h.severity().map_or(-1, i16::from),
                h.reset_requested(),
                h.assert_var[0],
                h.assert_exit_ptr,
                h.assert_callra,
                h.hw_id
            ),
            Failure::Stalled(c) => write!(
                f,
                "the firmware stopped: health counter stuck at {c:#x} for {MAX_MISSES} polls"
            ),
            Failure::Reset(a) => write!(
                f,
                "the function was reset behind the driver (command queue address reads {a:#x})"
            ),
            Failure::NicInterface(s) => write!(f, "the NIC interface state is {s:#x}"),
            Failure::LostCommand(op) => write!(
                f,
                "command {} ({op:#x}) timed out: the firmware lost it",
                crate::mlx5_prm::command::opcode_name(*op)
            ),
        }
    }
}

/// What the health poll looks at and what it acts on (see the module
/// documentation).
///
/// # Invariants
///
/// `irq` points at the function's asynchronous-interrupt handler, which
/// outlives the [`Poller`] running this (the poller is stopped before any
/// field of the driver data is dropped).
pub(super) struct Monitor<'bound> {
    pdev: &'bound pci::Device<Bound>,
    bar: &'bound CxBar,
    irq: *const AsyncIrq<'bound>,
    fatal: Arc<Fatal>,
    /// The bus address of the command queue, as the driver gave it.
    cmdq: u64,
    last_counter: AtomicU32,
    misses: AtomicU32,
    /// The last syndrome reported without a reset request (logged once).
    reported_synd: AtomicU8,
}

// SAFETY: `irq` is only dereferenced while the handler lives (type
// invariant); the rest is `Sync` or atomics.
unsafe impl Send for Monitor<'_> {}
// SAFETY: As above.
unsafe impl Sync for Monitor<'_> {}

impl<'bound> Monitor<'bound> {
    /// A monitor of `pdev`, whose command queue is at bus address `cmdq`.
    ///
    /// # Safety
    ///
    /// `irq` must outlive the [`Poller`] this monitor is given to.
    pub(super) unsafe fn new(
        pdev: &'bound pci::Device<Bound>,
        bar: &'bound CxBar,
        irq: &AsyncIrq<'bound>,
        fatal: Arc<Fatal>,
        cmdq: u64,
    ) -> Self {
        Self {
            pdev,
            bar,
            // INVARIANT: guaranteed by the caller.
            irq: core::ptr::from_ref(irq),
            fatal,
            cmdq,
            last_counter: AtomicU32::new(0),
            misses: AtomicU32::new(0),
            reported_synd: AtomicU8::new(0),
        }
    }

    fn read(&self, off: usize) -> u32 {
        self.bar.try_read32(off).map_or(u32::MAX, u32::swap_bytes)
    }

    fn health_buffer(&self) -> HealthBuffer {
        let mut b = [0u8; HEALTH_BUFFER_SIZE];
        for (i, d) in b.chunks_exact_mut(4).enumerate() {
            d.copy_from_slice(&self.read(HEALTH_OFFSET + 4 * i).to_be_bytes());
        }
        HealthBuffer::decode(&b)
    }

    /// The command queue address the function reads back, with the word
    /// that holds its low half and the NIC interface state.
    fn cmdq_readback(&self) -> (u64, CmdqAddrLSz) {
        let l = CmdqAddrLSz::decode(self.read(CMDQ_ADDR_L_SZ_OFFSET));
        let addr = u64::from(self.read(CMDQ_ADDR_H_OFFSET)) << 32 | u64::from(l.addr_l);
        (addr, l)
    }

    /// One look at the function: why it failed, if it did.
    fn diagnose(&self) -> Option<Failure> {
        if let Some(op) = self.fatal.lost() {
            return Some(Failure::LostCommand(op));
        }
        if self.read(FW_REV_OFFSET) == u32::MAX {
            return Some(Failure::Gone);
        }
        let h = self.health_buffer();
        if h.synd != 0 {
            // As mlx5_core's fatal sensor: a syndrome with the firmware's
            // reset request. Without it the syndrome is only reported.
            if h.reset_requested() {
                return Some(Failure::Syndrome(h));
            }
            if self.reported_synd.swap(h.synd, Ordering::Relaxed) != h.synd {
                dev_warn!(
                    self.pdev,
                    "health: syndrome {:#x} (ext {:#x}) reported without a reset request\n",
                    h.synd,
                    h.ext_synd
                );
            }
        }
        let (addr, l) = self.cmdq_readback();
        if addr != self.cmdq {
            return Some(Failure::Reset(addr));
        }
        if l.nic_interface == NIC_IFC_DISABLED || l.nic_interface == NIC_IFC_SW_RESET {
            return Some(Failure::NicInterface(l.nic_interface));
        }
        let c = self.read(HEALTH_COUNTER_OFFSET);
        if self.last_counter.swap(c, Ordering::Relaxed) == c {
            if self.misses.fetch_add(1, Ordering::Relaxed) + 1 >= MAX_MISSES {
                return Some(Failure::Stalled(c));
            }
        } else {
            self.misses.store(0, Ordering::Relaxed);
        }
        None
    }

    /// The poll (process context, on the system workqueue).
    fn check(&self) {
        if self.fatal.is_set() {
            return;
        }
        let Some(why) = self.diagnose() else {
            return;
        };
        self.fail(format_args!("{why}"));
    }

    /// Fails the function (see the module documentation), once, and
    /// queues its recovery.
    fn fail(&self, why: core::fmt::Arguments<'_>) {
        if self.fail_only(why) {
            self.recover();
        }
    }

    /// Steps 1 to 3 of the module documentation: returns whether this
    /// call failed the function (false if it had failed already).
    fn fail_only(&self, why: core::fmt::Arguments<'_>) -> bool {
        if !self.fatal.claim() {
            return false;
        }
        let raw = super::raw_bound(self.pdev);
        // SAFETY: The function is bound while the poller runs.
        unsafe { rmlx5_pci_clear_master(raw) };
        self.fatal.publish();
        dev_err!(self.pdev, "health: {}; function failed, DMA stopped\n", why);
        // SAFETY: The handler outlives the poller (type invariant).
        let irq = unsafe { &*self.irq };
        let dev = irq.core.lock().as_ref().map(|(d, _)| d.clone());
        if let Some(dev) = dev {
            dev_err!(
                self.pdev,
                "rmlx5_{}: device fatal: outstanding work requests flushed\n",
                dev.index
            );
            dev.set_fatal();
        }
        true
    }

    /// Step 4: queues the recovery of the failed function, unless it is
    /// being unbound, `cx_recover=0`, or it failed within the grace period.
    fn recover(&self) {
        if self.fatal.no_recovery.load(Ordering::Acquire) {
            dev_info!(
                self.pdev,
                "health: the function is being unbound: no recovery\n"
            );
            return;
        }
        if !crate::module_parameters::cx_recover.value() {
            dev_err!(
                self.pdev,
                "health: cx_recover=0, the function stays down until it is unbound\n"
            );
            return;
        }
        let wq = crate::work::reap_wq_raw();
        if wq.is_null() {
            return;
        }
        let grace = crate::module_parameters::cx_recover_grace_ms.value();
        let raw = super::raw_bound(self.pdev);
        // SAFETY: `raw` is the bound function; the queue lives until the
        // module's exit, which waits for it.
        let r = unsafe { rmlx5_pci_recover(raw, wq, grace) };
        if r == 0 {
            dev_info!(self.pdev, "health: recovery queued (unbind, probe)\n");
        } else if r == EBUSY.to_errno() {
            dev_err!(
                self.pdev,
                "health: failed again within {} ms of its last recovery: left down (unbind and bind it to try again: its probe resets it)\n",
                grace
            );
        } else {
            dev_err!(self.pdev, "health: cannot queue recovery: error {}\n", r);
        }
    }

    /// After the PCI core reset the function (a sysfs or bus reset, or the
    /// link reset of AER recovery) with its DMA already off: if the
    /// command queue address reads 0, as a reset leaves it, the firmware
    /// holds none of the driver's memory, and the recovery's probe need
    /// not reset the function a second time. `reset_done` is called even
    /// when the reset failed, and `resume` may come for a function that
    /// was not reset, so the register is read rather than the callback
    /// trusted, and only while reads reach the function: not disconnected,
    /// memory decode on, and the firmware revision neither all ones nor
    /// zero (what a read that does not reach it returns). Otherwise
    /// take-down records the function for a reset by its next probe.
    ///
    /// Bus mastering is cleared first: the core's restore of a config
    /// space saved while it was on (by the probe) may have turned it on
    /// again.
    fn note_reset_after_failure(&self) {
        let raw = super::raw_bound(self.pdev);
        // SAFETY: The function is bound while the poller runs, and the
        // PCI core's callbacks reach the poller only then.
        let decodes = unsafe {
            rmlx5_pci_clear_master(raw);
            rmlx5_pci_decodes(raw)
        };
        let rev = self.read(FW_REV_OFFSET);
        if decodes && rev != u32::MAX && rev != 0 && self.cmdq_readback().0 == 0 {
            self.fatal
                .reset_after_failure
                .store(true, Ordering::Release);
        }
    }

    /// A callback of the PCI core (`rmlx5_shim.c`, under the device lock):
    /// before a reset or on an error AER reported, the function is failed
    /// as the poll fails it, without recovery yet (the core is not done
    /// with the link); after the reset or the link's recovery, the
    /// recovery is queued, and runs once the core lets go of the device.
    fn pci_event(&self, what: u32) -> u32 {
        match what {
            pci_event::RESET_PREPARE => {
                self.fail_only(format_args!("a PCI reset of the function is coming"));
            }
            pci_event::NORMAL | pci_event::FROZEN => {
                let how = if what == pci_event::FROZEN {
                    "frozen"
                } else {
                    "still working"
                };
                self.fail_only(format_args!("PCI error reported, the link {how}"));
            }
            pci_event::PERM_FAILURE => {
                self.fatal.stop_recovery();
                self.fail_only(format_args!("PCI error reported, the link failed for good"));
                dev_err!(
                    self.pdev,
                    "health: the function stays down until it is unbound\n"
                );
            }
            pci_event::RESET_DONE | pci_event::RESUME => {
                let event = if what == pci_event::RESUME {
                    "link recovered"
                } else {
                    "reset done"
                };
                let failed = self.fatal.is_set();
                let then = if failed {
                    "recovering the function"
                } else {
                    "the function had not failed"
                };
                dev_info!(self.pdev, "health: PCI {} ({})\n", event, then);
                if failed {
                    self.note_reset_after_failure();
                    self.recover();
                }
            }
            _ => {}
        }
        pci_event::TAKEN
    }
}

/// At a function's way down (unbind, or a probe that fails), with the
/// poll stopped: a command that timed out since the last poll fails the
/// function all the same (DMA off, written off), without recovery, and a
/// function that failed is recorded as written off, so that its next
/// probe resets it before turning bus mastering on (the firmware may
/// still hold addresses of the memory the driver is about to free).
pub(super) fn at_take_down(pdev: &pci::Device<Bound>, fatal: &Fatal) {
    let raw = super::raw_bound(pdev);
    if let Some(op) = fatal.lost() {
        if fatal.claim() {
            // SAFETY: `pdev` is bound (take_down runs before the driver
            // data goes).
            unsafe { rmlx5_pci_clear_master(raw) };
            fatal.publish();
            dev_err!(
                pdev,
                "command {} ({:#x}) timed out: the firmware lost it; function written off, DMA stopped\n",
                crate::mlx5_prm::command::opcode_name(op),
                op
            );
        }
    }
    if fatal.is_set() {
        if fatal.was_reset_after_failure() {
            dev_info!(
                pdev,
                "reset by the PCI core after it failed: no second reset at its next probe\n"
            );
        } else {
            // SAFETY: As above.
            unsafe { rmlx5_pci_note_written_off(raw) };
        }
    }
}

/// Before a probe turns bus mastering on: resets the function if it was
/// written off after a failure since its last reset (see
/// [`at_take_down`]).
///
/// # Errors
///
/// The PCI core's, if the reset fails: the probe must not go on.
pub(super) fn reset_if_written_off(pdev: &pci::Device<Core<'_>>) -> Result {
    let dev: &kernel::device::Device<Core<'_>> = pdev.as_ref();
    let raw = core::ptr::from_ref(dev).cast::<c_void>().cast_mut();
    // SAFETY: `raw` is the function being probed, its device lock held.
    let r = unsafe { rmlx5_pci_reset_if_written_off(raw) };
    match r {
        0 => Ok(()),
        1 => {
            dev_info!(pdev.as_ref(), "reset: it was written off after a failure\n");
            Ok(())
        }
        e => {
            dev_err!(
                pdev.as_ref(),
                "written off after a failure and cannot be reset (error {}): left unbound\n",
                e
            );
            Err(Error::from_errno(e))
        }
    }
}

/// The poll's callback.
///
/// # Safety
///
/// `ctx` is the [`Monitor`] given to [`Poller::start`], alive until the
/// poller stops.
unsafe extern "C" fn poll(ctx: *mut c_void) {
    // SAFETY: Guaranteed by the caller (the poller's contract).
    let m = unsafe { &*ctx.cast::<Monitor<'_>>() };
    m.check();
}

/// The PCI core's callbacks, through the poller.
///
/// # Safety
///
/// As for [`poll`]: `ctx` is the poller's monitor, alive during the call
/// (the shim calls under the lock `rmlx5_poller_stop` takes).
unsafe extern "C" fn pci_event(ctx: *mut c_void, what: u32) -> u32 {
    // SAFETY: Guaranteed by the caller (the poller's contract).
    let m = unsafe { &*ctx.cast::<Monitor<'_>>() };
    m.pci_event(what)
}

/// A running health poll; stopping it (or dropping it) waits for a poll
/// in progress and frees the monitor.
///
/// # Invariants
///
/// `raw` is a running `rmlx5_poller` whose context is `monitor`, a box
/// leaked by [`Poller::start`].
pub(super) struct Poller<'bound> {
    raw: *mut c_void,
    monitor: *mut Monitor<'bound>,
}

// SAFETY: The poller is only started and stopped, from any thread.
unsafe impl Send for Poller<'_> {}
// SAFETY: `&Poller` offers nothing.
unsafe impl Sync for Poller<'_> {}

impl<'bound> Poller<'bound> {
    /// Starts polling with `monitor` every `ms` milliseconds (never if
    /// 0), and gives the PCI core's error and reset callbacks to the
    /// function: they reach `monitor` through the poller.
    pub(super) fn start(monitor: Monitor<'bound>, ms: u32) -> Result<Self> {
        let dev = super::raw_bound(monitor.pdev);
        let monitor = KBox::into_raw(KBox::new(monitor, GFP_KERNEL)?);
        // SAFETY: `monitor` stays valid until `rmlx5_poller_stop` has
        // returned (see `Drop`); `dev` is the bound function, which
        // outlives the poller (stopped at unbind at the latest).
        let raw = unsafe { rmlx5_poller_start(poll, pci_event, monitor.cast(), ms, dev) };
        if raw.is_null() {
            // SAFETY: Not handed to anyone.
            drop(unsafe { KBox::from_raw(monitor) });
            return Err(ENOMEM);
        }
        // SAFETY: `dev` is bound to this driver (the probe's end).
        unsafe { rmlx5_pci_install_err_handlers(dev) };
        // INVARIANT: started just above with `monitor`.
        Ok(Self { raw, monitor })
    }
}

impl Poller<'_> {
    /// The function is being unbound: a failure the poll finds from now
    /// on queues no recovery.
    pub(super) fn stop_recovery(&self) {
        // SAFETY: Valid while `self` lives (type invariant).
        unsafe { &*self.monitor }.fatal.stop_recovery();
    }
}

impl Drop for Poller<'_> {
    fn drop(&mut self) {
        // SAFETY: Running (type invariant); stopped once, here. The stop
        // waits for a call in progress, so the monitor is free after it.
        unsafe { rmlx5_poller_stop(self.raw) };
        // SAFETY: Leaked by `start`, no longer used.
        drop(unsafe { KBox::from_raw(self.monitor) });
    }
}
