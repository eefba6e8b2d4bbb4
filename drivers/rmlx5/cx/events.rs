// SPDX-License-Identifier: GPL-2.0

//! Commands completed by event, and the function's asynchronous EQ as the
//! hard interrupt handler consumes it.
//!
//! The page EQ (`cx/eq.rs`) asks for command events besides page requests
//! (`cx_cmd_mode=2`, the default). Vector 0's hard handler consumes it
//! ([`CmdEvents::consume`]): a command EQE's vector of entries is recorded
//! and the waiters woken, a page request is queued for the threaded
//! handler, which answers it with MANAGE_PAGES under the function's lock;
//! then the EQ is re-armed at once, from the hard handler, so that the
//! next command's EQE raises an interrupt even while the thread waits for
//! the lock.
//!
//! A command started on a lane (`mlx5-cmdif`'s `CmdIf::start`) is waited
//! for without the function's lock ([`CmdEvents::wait`]): sleeping until
//! an EQE names its entry, looking at the entry's ownership byte after
//! every wake and at least once a jiffy (the fallback, as mlx5_core falls
//! back to polling when an event is missed), and every 20 µs in polled
//! mode (`cx_cmd_mode=1`). The ownership byte is the truth; an event is
//! only the reason to look.
//!
//! `cx_cmd_mode` is also `debugfs rmlx5/cx_cmd`, with the counters: write
//! 0, 1 or 2 to change it (0: every command through entry 0 under the
//! lock, polled, the driver before lanes; 1: lanes, polled; 2: lanes,
//! completed by event). Command events are asked for when a function's
//! EQ is made: a function probed in mode 0 or 1 and switched to 2 later
//! completes by the once-a-jiffy look.

use core::sync::atomic::{
    AtomicU32,
    AtomicU64,
    Ordering, //
};
use kernel::{
    new_condvar, new_spinlock_irq,
    prelude::*,
    sync::{
        barrier::{
            dma_mb,
            Read, //
        },
        Arc,
        CondVar,
        CondVarTimeoutResult,
        SpinLockIrq, //
    },
    time::{
        delay::fsleep,
        Delta,
        Instant,
        Monotonic, //
    },
};

use super::{
    bar::CxBar,
    buf::Buf,
    health::Fatal, //
};
use crate::mlx5_cmdif::cmdif::{
    Lost,
    Ticket, //
};
use crate::mlx5_prm::{
    cmd_queue::owned_by_hw,
    doorbell::{
        uar_reg_offset,
        EqDoorbell,
        UAR_EQ_ARM_OFFSET, //
    },
    eqe::{
        Eqe,
        EQE_SIZE,
        OWNER_OFFSET, //
    },
    eqe_async::AsyncEvent,
    init_seg::FW_REV_OFFSET,
    ring,
};

/// log2 of the page EQ's entries: 256 (four 4 KiB pages), room for a
/// completion EQE of every queue entry (32) many times over, and the page
/// requests besides, while the hard handler is held up.
pub(super) const LOG_EQ_SIZE: u8 = 8;
/// EQEs handled per interrupt at most (a ring's worth; if more are
/// waiting, the re-arm makes the device interrupt again at once).
const POLL_BUDGET: u32 = 1 << LOG_EQ_SIZE;
/// Page requests queued for the thread at most (a firmware asks one at a
/// time and waits for the answer; more are merged into the last one, the
/// device's need being the sum of what it asked).
const MAX_REQUESTS: usize = 64;

/// Every command through entry 0, polled, under the function's lock.
pub(crate) const MODE_ENTRY0: u32 = 0;
/// Commands that fit run on the lanes, polled.
pub(crate) const MODE_LANES_POLLED: u32 = 1;
/// Commands that fit run on the lanes, completed by event.
pub(crate) const MODE_LANES_EVENTS: u32 = 2;

/// The mode in force (`cx_cmd_mode`, then debugfs `rmlx5/cx_cmd`).
static MODE: AtomicU32 = AtomicU32::new(u32::MAX);

/// What the command paths did, all functions together.
pub(crate) struct Counters {
    /// Commands of the verbs backend run through entry 0 (long ones, and
    /// all of them in mode 0).
    pub(crate) entry0: AtomicU64,
    /// Commands started on a lane.
    pub(crate) lanes: AtomicU64,
    /// Lane commands found done after a command EQE woke their waiter.
    pub(crate) by_event: AtomicU64,
    /// Lane commands found done by a look after a sleep without an event
    /// (polled mode, or the once-a-jiffy fallback).
    pub(crate) polled: AtomicU64,
    /// Lane commands done at the first look, before any sleep.
    pub(crate) at_once: AtomicU64,
    /// Lane commands given up (timeout, failed function).
    pub(crate) lost: AtomicU64,
    /// Times a command waited for a free lane.
    pub(crate) lane_waits: AtomicU64,
    /// Command EQEs consumed.
    pub(crate) cmd_eqes: AtomicU64,
    /// Most lanes in flight at once on one function.
    pub(crate) max_in_flight: AtomicU64,
}

/// The counters shown by debugfs `rmlx5/cx_cmd`.
pub(crate) static COUNTERS: Counters = Counters {
    entry0: AtomicU64::new(0),
    lanes: AtomicU64::new(0),
    by_event: AtomicU64::new(0),
    polled: AtomicU64::new(0),
    at_once: AtomicU64::new(0),
    lost: AtomicU64::new(0),
    lane_waits: AtomicU64::new(0),
    cmd_eqes: AtomicU64::new(0),
    max_in_flight: AtomicU64::new(0),
};

/// The command mode in force (see the module documentation).
pub(crate) fn mode() -> u32 {
    match MODE.load(Ordering::Relaxed) {
        u32::MAX => crate::module_parameters::cx_cmd_mode
            .value()
            .min(MODE_LANES_EVENTS),
        m => m,
    }
}

/// Sets the command mode (debugfs); `EINVAL` for anything but 0, 1, 2.
pub(crate) fn set_mode(m: u32) -> Result {
    if m > MODE_LANES_EVENTS {
        return Err(EINVAL);
    }
    MODE.store(m, Ordering::Relaxed);
    Ok(())
}

/// Writes the mode and the counters (debugfs `rmlx5/cx_cmd`).
pub(crate) fn show(f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
    let c = &COUNTERS;
    let v = |a: &AtomicU64| a.load(Ordering::Relaxed);
    writeln!(
        f,
        "mode {} ({})",
        mode(),
        match mode() {
            MODE_ENTRY0 => "entry 0, polled",
            MODE_LANES_POLLED => "lanes, polled",
            _ => "lanes, completed by event",
        }
    )?;
    writeln!(
        f,
        "entry0 {}\nlanes {}\nby_event {}\npolled {}\nat_once {}\nlost {}\nlane_waits {}\ncmd_eqes {}\nmax_in_flight {}",
        v(&c.entry0),
        v(&c.lanes),
        v(&c.by_event),
        v(&c.polled),
        v(&c.at_once),
        v(&c.lost),
        v(&c.lane_waits),
        v(&c.cmd_eqes),
        v(&c.max_in_flight)
    )
}

/// What command waiters wait for.
#[derive(Default)]
struct Done {
    /// Entries a command EQE named since their waiter last looked.
    bits: u32,
    /// Lanes freed so far (wrapping).
    freed: u64,
}

/// The page EQ as the hard handler consumes it.
struct Ring {
    ring: Arc<Buf>,
    eqn: u8,
    /// The UAR page whose EQ doorbell arms it.
    uar: u32,
    /// Consumer index (entries consumed so far).
    ci: u32,
    /// Page requests for the thread, in order.
    requests: [i32; MAX_REQUESTS],
    queued: usize,
}

/// A function's command events and its page EQ's consumer (see the module
/// documentation).
#[pin_data]
pub(crate) struct CmdEvents {
    /// The page EQ, while it exists.
    #[pin]
    ring: SpinLockIrq<Option<Ring>>,
    /// Entries a command EQE named since their waiter last looked, and
    /// lanes freed.
    #[pin]
    done: SpinLockIrq<Done>,
    /// Waiters of commands and of free lanes.
    #[pin]
    cv: CondVar,
    /// Lanes in flight now.
    in_flight: AtomicU32,
}

impl CmdEvents {
    /// No EQ yet: commands are polled.
    pub(crate) fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                ring <- new_spinlock_irq!(None, "rmlx5_cx_page_ring"),
                done <- new_spinlock_irq!(Done::default(), "rmlx5_cx_cmd_done"),
                cv <- new_condvar!("rmlx5_cx_cmd_wait"),
                in_flight: AtomicU32::new(0),
            }),
            GFP_KERNEL,
        )
    }

    /// The page EQ `eqn` (ring `ring`, armed through UAR page `uar`) is
    /// made and not armed yet: the hard handler consumes it from here.
    pub(super) fn install(&self, ring: Arc<Buf>, eqn: u8, uar: u32) {
        *self.ring.lock() = Some(Ring {
            ring,
            eqn,
            uar,
            ci: 0,
            requests: [0; MAX_REQUESTS],
            queued: 0,
        });
    }

    /// The page EQ is about to be destroyed: the hard handler leaves it
    /// alone, and waiters fall back to looking once a jiffy.
    pub(super) fn uninstall(&self) {
        // The ring's reference goes after the lock (the page EQ holds one
        // more until the EQ is destroyed).
        let old = self.ring.lock().take();
        drop(old);
        self.cv.notify_all();
    }

    /// Arms the page EQ at its consumer index (after [`CmdEvents::install`],
    /// and after each consumption).
    pub(super) fn arm(&self, bar: &CxBar) {
        if let Some(r) = &*self.ring.lock() {
            arm(bar, r);
        }
    }

    /// Consumes what the device wrote to the page EQ (hard interrupt
    /// context): command EQEs wake their waiters, page requests are queued
    /// for the thread; then re-arms. Returns how many EQEs there were and
    /// whether page requests wait for the thread.
    pub(super) fn consume(&self, bar: &CxBar) -> (u32, bool) {
        let mut vector = 0u32;
        let (n, pending) = {
            let mut guard = self.ring.lock();
            let Some(r) = Option::as_mut(&mut *guard) else {
                return (0, false);
            };
            let mut n = 0u32;
            while n < POLL_BUDGET {
                let Some(entry) = next(r) else {
                    break;
                };
                r.ci = r.ci.wrapping_add(1);
                n += 1;
                match entry.as_ref().and_then(AsyncEvent::from_eqe) {
                    Some(AsyncEvent::Cmd(c)) => {
                        vector |= c.vector;
                        COUNTERS.cmd_eqes.fetch_add(1, Ordering::Relaxed);
                    }
                    Some(AsyncEvent::PageRequest(p)) => {
                        if r.queued < MAX_REQUESTS {
                            if let Some(slot) = r.requests.get_mut(r.queued) {
                                *slot = p.num_pages;
                            }
                            r.queued += 1;
                        } else if let Some(last) = r.requests.last_mut() {
                            *last = last.saturating_add(p.num_pages);
                        }
                    }
                    // Other events are not asked for on this EQ.
                    _ => {}
                }
            }
            if n > 0 {
                arm(bar, r);
            }
            (n, r.queued > 0)
        };
        if vector != 0 {
            self.done.lock().bits |= vector;
            self.cv.notify_all();
        }
        (n, pending)
    }

    /// Takes the queued page requests (for the thread, or a caller that
    /// holds the function's lock and answers them itself).
    pub(super) fn take_requests(&self) -> ([i32; MAX_REQUESTS], usize) {
        match Option::as_mut(&mut *self.ring.lock()) {
            Some(r) => {
                let n = core::mem::take(&mut r.queued);
                (r.requests, n)
            }
            None => ([0; MAX_REQUESTS], 0),
        }
    }

    /// Whether page requests are queued.
    pub(super) fn has_requests(&self) -> bool {
        self.ring.lock().as_ref().is_some_and(|r| r.queued > 0)
    }

    /// A lane was taken: counts it.
    pub(super) fn lane_taken(&self) {
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        COUNTERS.lanes.fetch_add(1, Ordering::Relaxed);
        COUNTERS
            .max_in_flight
            .fetch_max(u64::from(now), Ordering::Relaxed);
    }

    /// A lane was taken by the command of `t`: a completion bit its entry
    /// kept from an earlier command is stale (the waiter looks at the
    /// ownership byte before it sleeps, so nothing of this one is lost).
    pub(super) fn lane_taken_by(&self, t: &Ticket) {
        self.done.lock().bits &= !t.bit();
        self.lane_taken();
    }

    /// A lane was finished or given up: wakes a command waiting for one.
    pub(super) fn lane_freed(&self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        {
            let mut g = self.done.lock();
            g.freed = g.freed.wrapping_add(1);
        }
        self.cv.notify_all();
    }

    /// How many lanes were freed so far, for [`CmdEvents::wait_lane`]
    /// (read while the function's lock still shows every lane busy).
    pub(super) fn lanes_freed(&self) -> u64 {
        self.done.lock().freed
    }

    /// Waits, without the function's lock, for a lane to be freed after
    /// `seen` ([`CmdEvents::lanes_freed`]): one jiffy at most.
    pub(super) fn wait_lane(&self, seen: u64) {
        COUNTERS.lane_waits.fetch_add(1, Ordering::Relaxed);
        let mut g = self.done.lock();
        if g.freed != seen {
            return;
        }
        if let CondVarTimeoutResult::Signal { .. } = self.cv.wait_interruptible_timeout(&mut g, 1) {
            drop(g);
            fsleep(Delta::from_micros(20));
        }
    }

    /// Waits for the device to hand back the entry of `t`, whose queue
    /// lies in `mem`, without the function's lock: until its ownership bit
    /// is clear, the function failed (`fatal`), its BAR0 (`bar`) reads all
    /// ones (gone: looked at once a millisecond, as the polled path does)
    /// or `timeout_ms` passed (see the module documentation).
    pub(super) fn wait(
        &self,
        mem: &Buf,
        bar: &CxBar,
        t: &Ticket,
        fatal: &Fatal,
        timeout_ms: u64,
    ) -> Result<(), Lost> {
        let off = t
            .own_addr()
            .checked_sub(mem.addr())
            .and_then(|o| usize::try_from(o).ok())
            .ok_or(Lost::Gone)?;
        let bit = t.bit();
        let start = Instant::<Monotonic>::now();
        let events = mode() == MODE_LANES_EVENTS;
        let mut slept = false;
        let mut woken = false;
        let mut looked = 0u64;
        loop {
            // A byte the queue does not have reads as a device gone.
            let own = mem.byte(off).map_err(|_| Lost::Gone)?;
            if !owned_by_hw(own) {
                // The entry and outputs only after the ownership bit.
                dma_mb(Read);
                let c = match (slept, woken) {
                    (false, _) => &COUNTERS.at_once,
                    (true, true) => &COUNTERS.by_event,
                    (true, false) => &COUNTERS.polled,
                };
                c.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            if fatal.is_set() {
                COUNTERS.lost.fetch_add(1, Ordering::Relaxed);
                return Err(Lost::Fatal);
            }
            let waited = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
            if waited >= timeout_ms {
                COUNTERS.lost.fetch_add(1, Ordering::Relaxed);
                return Err(Lost::Timeout);
            }
            if waited > looked {
                looked = waited;
                // A surprise removal or a dead link reads all ones.
                if bar
                    .try_read32(FW_REV_OFFSET)
                    .map_or(true, |v| v == u32::MAX)
                {
                    COUNTERS.lost.fetch_add(1, Ordering::Relaxed);
                    return Err(Lost::Gone);
                }
            }
            slept = true;
            if !events {
                fsleep(Delta::from_micros(20));
                continue;
            }
            let mut g = self.done.lock();
            let mut signal = false;
            if g.bits & bit == 0 {
                signal = matches!(
                    self.cv.wait_interruptible_timeout(&mut g, 1),
                    CondVarTimeoutResult::Signal { .. }
                );
            }
            woken = g.bits & bit != 0;
            g.bits &= !bit;
            drop(g);
            if signal && !woken {
                // A signal is pending: the wait would return at once, so
                // look again after a short sleep instead of spinning.
                fsleep(Delta::from_micros(20));
            }
        }
    }
}

/// The EQE at the consumer index, if the device has written one:
/// `Some(None)` for an entry this driver cannot decode (consumed all the
/// same, so that the EQ never stalls on it).
fn next(r: &Ring) -> Option<Option<Eqe>> {
    let log = u32::from(LOG_EQ_SIZE);
    let off = ring::ring_index(r.ci, log) as usize * EQE_SIZE;
    let owner = r.ring.byte(off + OWNER_OFFSET).ok()?;
    if !ring::eqe_valid(owner, r.ci, log) {
        return None;
    }
    // The body only after its owner byte: dma_rmb().
    dma_mb(Read);
    let mut b = [0u8; EQE_SIZE];
    r.ring.read(off, &mut b).ok()?;
    Some(Eqe::decode(&b).ok())
}

/// Arms the EQ of `r` at its consumer index through its UAR page's EQ
/// doorbell (a 32-bit store, big-endian as the device reads it).
fn arm(bar: &CxBar, r: &Ring) {
    let mut word = [0u8; 4];
    EqDoorbell {
        eqn: r.eqn,
        ci: r.ci,
    }
    .encode(&mut word);
    if let Some(off) = uar_reg_offset(r.uar, UAR_EQ_ARM_OFFSET) {
        // writel stores little-endian: the bytes land in memory order.
        let _ = bar.try_write32(u32::from_le_bytes(word), off);
    }
}

/// What the verbs backend's commands made and destroyed on one function
/// (debugfs `rmlx5/objects`): a create counts once its command succeeded,
/// a destroy once its command succeeded or was answered on a failed
/// function. Objects of the driver's own (its UAR page, the EQs) are not
/// counted.
pub(crate) struct Live {
    pds: AtomicU64,
    cqs: AtomicU64,
    qps: AtomicU64,
    mrs: AtomicU64,
    uars: AtomicU64,
}

impl Live {
    /// Nothing yet.
    pub(crate) fn new() -> Result<Arc<Self>> {
        Arc::new(
            Self {
                pds: AtomicU64::new(0),
                cqs: AtomicU64::new(0),
                qps: AtomicU64::new(0),
                mrs: AtomicU64::new(0),
                uars: AtomicU64::new(0),
            },
            GFP_KERNEL,
        )
        .map_err(Into::into)
    }

    /// Command `opcode` succeeded.
    pub(crate) fn note(&self, opcode: u16) {
        use crate::mlx5_prm::command::{
            OP_ALLOC_PD, OP_ALLOC_UAR, OP_CREATE_CQ, OP_CREATE_MKEY, OP_CREATE_QP, OP_DEALLOC_PD,
            OP_DEALLOC_UAR, OP_DESTROY_CQ, OP_DESTROY_MKEY, OP_DESTROY_QP,
        };
        let (c, up) = match opcode {
            OP_ALLOC_PD => (&self.pds, true),
            OP_DEALLOC_PD => (&self.pds, false),
            OP_CREATE_CQ => (&self.cqs, true),
            OP_DESTROY_CQ => (&self.cqs, false),
            OP_CREATE_QP => (&self.qps, true),
            OP_DESTROY_QP => (&self.qps, false),
            OP_CREATE_MKEY => (&self.mrs, true),
            OP_DESTROY_MKEY => (&self.mrs, false),
            OP_ALLOC_UAR => (&self.uars, true),
            OP_DEALLOC_UAR => (&self.uars, false),
            _ => return,
        };
        if up {
            c.fetch_add(1, Ordering::Relaxed);
        } else {
            // A destroy never outnumbers its creates; saturate if a bug
            // made one, rather than wrap.
            let _ = c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(1))
            });
        }
    }

    /// The counts now.
    pub(crate) fn snapshot(&self) -> crate::backend::LiveObjects {
        let v = |a: &AtomicU64| a.load(Ordering::Relaxed);
        crate::backend::LiveObjects {
            pds: v(&self.pds),
            cqs: v(&self.cqs),
            qps: v(&self.qps),
            mrs: v(&self.mrs),
            uars: v(&self.uars),
        }
    }
}
