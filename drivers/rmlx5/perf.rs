// SPDX-License-Identifier: GPL-2.0

//! Where the software HCA's time goes: counts and nanosecond sums along the
//! doorbell path (kick system call, engine runs under the fabric lock) and
//! the event path (interrupt raised → EQ handler in hard IRQ → BH dispatch
//! → CQ handlers), read from debugfs `rmlx5/perf` and zeroed by writing to
//! it. `make bench` reads it around every rmlx5 case, so each benchmark row
//! comes with its breakdown.
//!
//! Everything is a relaxed atomic: the figures are sums for averages, not
//! a consistent snapshot, and cost two clock reads per measured step.

use core::{
    fmt,
    sync::atomic::{
        AtomicU64,
        Ordering, //
    },
};
use kernel::{
    prelude::*,
    time::{
        Instant,
        Monotonic, //
    },
};

/// A count of events and the nanoseconds they took in all.
#[derive(Default)]
pub(crate) struct Timed {
    count: AtomicU64,
    ns: AtomicU64,
}

impl Timed {
    /// Adds one event that took `ns` nanoseconds.
    pub(crate) fn add(&self, ns: u64) {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Adds `count` events that took `ns` nanoseconds in all (or, for a
    /// figure whose second column counts something else, `ns` of that).
    pub(crate) fn add_many(&self, count: u64, ns: u64) {
        self.count.fetch_add(count, Ordering::Relaxed);
        self.ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// The count and the sum (KUnit).
    #[cfg(CONFIG_KUNIT)]
    pub(crate) fn totals(&self) -> (u64, u64) {
        (
            self.count.load(Ordering::Relaxed),
            self.ns.load(Ordering::Relaxed),
        )
    }

    fn reset(&self) {
        self.count.store(0, Ordering::Relaxed);
        self.ns.store(0, Ordering::Relaxed);
    }

    fn show(&self, f: &mut fmt::Formatter<'_>, name: &str, what: &str) -> fmt::Result {
        let (n, ns) = (
            self.count.load(Ordering::Relaxed),
            self.ns.load(Ordering::Relaxed),
        );
        let avg = ns.checked_div(n).unwrap_or(0);
        writeln!(f, "{name:<14} {n:>10} {ns:>14} {avg:>10}  {what}")
    }
}

/// The time a step was first asked for, until the step runs: the first
/// request of a burst stamps it, the run takes the stamp (0 = none).
#[derive(Default)]
pub(crate) struct Stamp(AtomicU64);

impl Stamp {
    /// Records `now` unless an earlier request is still waiting.
    pub(crate) fn mark(&self, now: u64) {
        let _ = self
            .0
            .compare_exchange(0, now.max(1), Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Takes the waiting stamp, if any, and returns how long ago it was.
    pub(crate) fn take(&self, now: u64) -> Option<u64> {
        match self.0.swap(0, Ordering::Relaxed) {
            0 => None,
            t => Some(now.saturating_sub(t)),
        }
    }
}

/// The software HCA's path counters (one set for the whole fabric).
pub(crate) struct Perf {
    /// Origin of [`Perf::now`].
    epoch: Instant<Monotonic>,
    /// `KICK` system calls for a send doorbell, each with its engine run.
    pub(crate) kick_send: Timed,
    /// `KICK` system calls for a CQ arm.
    pub(crate) kick_arm: Timed,
    /// UAR trap (`hca/trap.rs`): faults on a trapped UAR page, each with
    /// its reading of the records and engine run.
    pub(crate) trap_fault: Timed,
    /// Poller queued → its run starts.
    pub(crate) trap_delay: Timed,
    /// Poller runs, first pass to stop (the unmapping included).
    pub(crate) trap_run: Timed,
    /// Unmapping every trapped UAR page (one per idle poller).
    pub(crate) trap_zap: Timed,
    /// Stream mode: a poller run mapping the trapped UAR pages.
    pub(crate) trap_map: Timed,
    /// When the poller was queued and has not started since.
    pub(crate) trap_queued: Stamp,
    /// Doorbell watcher (`hca/watch.rs`): queued → its run starts.
    pub(crate) watch_delay: Timed,
    /// When the watcher was queued and has not started since.
    pub(crate) watch_queued: Stamp,
    /// Watcher runs that stopped because another task wanted the CPU,
    /// and how long they ran.
    pub(crate) watch_busy: Timed,
    /// Watcher runs that stopped after a while with nothing new.
    pub(crate) watch_idle: Timed,
    /// Watcher runs that reached their longest run (or the module's
    /// shutdown) with work still coming.
    pub(crate) watch_max: Timed,
    /// Engine runs (one budget each) and the time they held the lock.
    pub(crate) engine: Timed,
    /// Budget units the engine used (one per WQE, plus one per 4 KiB).
    pub(crate) engine_units: AtomicU64,
    /// The model's memory accesses (reads and writes through the DMA
    /// registry) and the bytes they moved.
    pub(crate) dma: Timed,
    /// The accesses that searched the DMA registry (answered neither by
    /// the platform's ranges nor by the registry's grants; a search that
    /// faults is not counted), and the registry's size at each, dead
    /// regions included (the second column sums it, so its average is
    /// the size searched).
    pub(crate) dma_search: Timed,
    /// Interrupt raised by the model → its EQ handler starts.
    pub(crate) irq_delay: Timed,
    /// EQ handler runs (hard IRQ) and their duration.
    pub(crate) eq_handler: Timed,
    /// First CQ queued by an EQ handler → the BH dispatch starts.
    pub(crate) bh_delay: Timed,
    /// BH dispatch runs and their duration.
    pub(crate) bh_run: Timed,
    /// CQ handler calls made by the dispatch.
    pub(crate) cq_handler: Timed,
    /// User CQs' completion events delivered by the EQ handler itself.
    pub(crate) cq_direct: Timed,
    /// When the model last raised an interrupt nobody handled yet.
    pub(crate) irq_raised: Stamp,
    /// When the first CQ of the next dispatch was queued.
    pub(crate) bh_queued: Stamp,
}

impl Perf {
    /// Every figure zero.
    pub(crate) fn new() -> Self {
        Perf {
            epoch: Instant::now(),
            kick_send: Timed::default(),
            kick_arm: Timed::default(),
            trap_fault: Timed::default(),
            trap_delay: Timed::default(),
            trap_run: Timed::default(),
            trap_zap: Timed::default(),
            trap_map: Timed::default(),
            trap_queued: Stamp::default(),
            watch_delay: Timed::default(),
            watch_queued: Stamp::default(),
            watch_busy: Timed::default(),
            watch_idle: Timed::default(),
            watch_max: Timed::default(),
            engine: Timed::default(),
            engine_units: AtomicU64::new(0),
            dma: Timed::default(),
            dma_search: Timed::default(),
            irq_delay: Timed::default(),
            eq_handler: Timed::default(),
            bh_delay: Timed::default(),
            bh_run: Timed::default(),
            cq_handler: Timed::default(),
            cq_direct: Timed::default(),
            irq_raised: Stamp::default(),
            bh_queued: Stamp::default(),
        }
    }

    /// Monotonic nanoseconds since creation.
    pub(crate) fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(0)
    }

    /// Zeroes every figure.
    pub(crate) fn reset(&self) {
        for t in [
            &self.kick_send,
            &self.kick_arm,
            &self.trap_fault,
            &self.trap_delay,
            &self.trap_run,
            &self.trap_zap,
            &self.trap_map,
            &self.watch_delay,
            &self.watch_busy,
            &self.watch_idle,
            &self.watch_max,
            &self.engine,
            &self.dma,
            &self.dma_search,
            &self.irq_delay,
            &self.eq_handler,
            &self.bh_delay,
            &self.bh_run,
            &self.cq_handler,
            &self.cq_direct,
        ] {
            t.reset();
        }
        self.engine_units.store(0, Ordering::Relaxed);
        let _ = self.irq_raised.take(0);
        let _ = self.bh_queued.take(0);
        let _ = self.trap_queued.take(0);
        let _ = self.watch_queued.take(0);
    }
}

impl fmt::Display for Perf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<14} {:>10} {:>14} {:>10}  what",
            "step", "count", "total_ns", "avg_ns"
        )?;
        self.kick_send
            .show(f, "kick_send", "KICK send ioctl, engine run included")?;
        self.kick_arm.show(f, "kick_arm", "KICK CQ-arm ioctl")?;
        self.trap_fault.show(
            f,
            "trap_fault",
            "UAR trap fault, records read and engine run",
        )?;
        self.trap_delay
            .show(f, "trap_delay", "UAR trap poller queued -> runs")?;
        self.trap_run
            .show(f, "trap_run", "UAR trap poller run, unmapping included")?;
        self.trap_zap
            .show(f, "trap_zap", "unmapping the trapped UAR pages")?;
        self.trap_map.show(
            f,
            "trap_map",
            "UAR trap stream mode: run starts -> pages mapped",
        )?;
        self.watch_delay
            .show(f, "watch_delay", "doorbell watcher queued -> runs")?;
        self.watch_busy.show(
            f,
            "watch_busy",
            "watcher runs stopped for another task (ns: run length)",
        )?;
        self.watch_idle
            .show(f, "watch_idle", "watcher runs stopped with nothing new")?;
        self.watch_max
            .show(f, "watch_max", "watcher runs stopped at their longest")?;
        self.engine
            .show(f, "engine", "one engine budget under the fabric lock")?;
        writeln!(
            f,
            "{:<14} {:>10} {:>14} {:>10}  budget units (WQEs, 4 KiB moved)",
            "engine_units",
            self.engine_units.load(Ordering::Relaxed),
            "-",
            "-"
        )?;
        self.dma.show(
            f,
            "dma_access",
            "model memory accesses (the ns column counts bytes)",
        )?;
        self.dma_search.show(
            f,
            "dma_search",
            "accesses searched in the DMA registry (ns column: regions)",
        )?;
        self.irq_delay
            .show(f, "irq_delay", "interrupt raised -> EQ handler")?;
        self.eq_handler
            .show(f, "eq_handler", "EQ handler (hard IRQ)")?;
        self.bh_delay
            .show(f, "bh_delay", "first CQ queued -> BH dispatch")?;
        self.bh_run.show(f, "bh_run", "BH dispatch run")?;
        self.cq_handler
            .show(f, "cq_handler", "CQ completion handler (wake-up included)")?;
        self.cq_direct.show(
            f,
            "cq_direct",
            "user CQ event from the EQ handler (wake-up included)",
        )
    }
}

#[kunit_tests(rmlx5_perf)]
mod tests {
    use super::*;

    /// The first request of a burst sets the stamp, the run takes it once.
    #[test]
    fn stamp_keeps_the_first_request() -> Result {
        let s = Stamp::default();
        assert_eq!(s.take(10), None);
        s.mark(100);
        s.mark(150);
        assert_eq!(s.take(180), Some(80));
        assert_eq!(s.take(190), None);
        // A clock reading of 0 still counts as a request.
        s.mark(0);
        assert_eq!(s.take(5), Some(4));
        Ok(())
    }

    /// Sums and counts add up; reset zeroes them and drops stamps.
    #[test]
    fn figures_sum_and_reset() -> Result {
        let p = Perf::new();
        p.kick_send.add(300);
        p.kick_send.add(500);
        p.engine_units.fetch_add(7, Ordering::Relaxed);
        p.bh_queued.mark(p.now());
        assert_eq!(p.kick_send.count.load(Ordering::Relaxed), 2);
        assert_eq!(p.kick_send.ns.load(Ordering::Relaxed), 800);
        p.reset();
        assert_eq!(p.kick_send.count.load(Ordering::Relaxed), 0);
        assert_eq!(p.kick_send.ns.load(Ordering::Relaxed), 0);
        assert_eq!(p.engine_units.load(Ordering::Relaxed), 0);
        assert_eq!(p.bh_queued.take(p.now()), None);
        Ok(())
    }
}
