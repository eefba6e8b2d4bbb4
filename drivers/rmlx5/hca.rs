// SPDX-License-Identifier: GPL-2.0

//! The software HCA: every instance of `rust/hca-model` joined in one
//! fabric behind one lock, the memory it may reach, its EQs, and the
//! interrupt controller that raises their interrupts.
//!
//! # Locking
//!
//! `SoftHca::state` is a `SpinLockIrq`: the EQ handler runs in hard-IRQ
//! context and must re-arm its EQ through the model, and the model must see
//! one consistent fabric (a send on rmlx5_0 writes memory and CQEs of
//! rmlx5_1). Hold times are bounded by the engine budget
//! ([`ENGINE_BUDGET`]) and the EQ budget. Lock order in the whole module:
//! an object's own lock (`Cq::poll`, `Qp::sq`, `Qp::rq`) may be held while
//! taking `state`, and the ULP layer's registry (`ULP_OBJECTS`, a mutex)
//! before either of them;
//! under `state` only leaf locks are taken: the hrtimer base lock
//! inside `hrtimer_start` (the kernel's, which never calls back into rmlx5
//! while held). Nothing under `state` allocates except `GFP_ATOMIC` pushes
//! of the DMA registry.
//!
//! An interrupt the model raises (an irq_work on this CPU) can fire only
//! once `state` is released, since the lock keeps interrupts off. An
//! engine run therefore ends after the step that raised one
//! (`SoftPlatform::yield_engine`), and [`SoftHca::run_engine`] takes the
//! lock again for the rest of its budget, so a completion's interrupt
//! waits for one WQE, not for the whole budget. A caller in process
//! context that holds no spinlock delivers the interrupts of its section
//! itself once `state` is released, instead of through the irq_work
//! ([`SoftHca::locked_direct`]).
//!
//! # The model's clock
//!
//! Every engine run first sets the fabric's time to the monotonic clock
//! (nanoseconds since the `SoftHca` was created), then, when a QP waits for
//! an RNR or transport retry, arms the `clock` hrtimer (soft mode, so its
//! callback runs in softirq context) at [`Fabric::next_deadline`]. The
//! callback runs one engine budget (which re-arms the timer for the next
//! deadline) and hands any remaining work to the engine work item. The
//! timer is started and its deadline recorded only under `state`, and
//! [`SoftHca::shutdown`] sets `shutting_down` under `state` before it
//! cancels the timer, so nothing can start it again afterwards.

pub(crate) mod backend;
pub(crate) mod dma;
pub(crate) mod irq;
pub(crate) mod store;
pub(crate) mod trap;
pub(crate) mod uar;
pub(crate) mod watch;

use core::sync::atomic::{
    AtomicBool,
    AtomicU64,
    Ordering, //
};
use kernel::{
    bitmap::BitmapVec,
    new_spinlock, new_spinlock_irq, new_work,
    prelude::*,
    sync::{
        Arc,
        SpinLock,
        SpinLockIrq, //
    },
    time::{
        hrtimer::{
            AbsoluteSoftMode,
            HasHrTimer,
            HrTimer,
            HrTimerCallback,
            HrTimerCallbackContext,
            HrTimerRestart, //
        },
        Delta,
        Instant,
        Monotonic, //
    },
    workqueue::{
        self,
        Work, //
    },
};

use crate::hca_model::{
    caps::Caps,
    cq::Cq as ModelCq,
    eq::Eq as ModelEq,
    fabric::{Fabric, HcaSet, RunReport},
    hca::Hca as ModelHca,
    mr::Mr as ModelMr,
    pd::Pd as ModelPd,
    qp::Qp as ModelQp,
    table::{
        Slot,
        Storage,
        Tables, //
    },
    transfer::Scratch,
};
use crate::mlx5_prm::doorbell::UAR_PAGE_SIZE;
use crate::perf::Perf;
use dma::{
    DmaBuf,
    DmaRegistry,
    SoftPlatform, //
};

/// Largest number of completion EQs per HCA (module parameter bound).
pub(crate) const MAX_COMP_EQS: usize = 8;
/// Object table sizes of each instance. 16,384 QPs, CQs and MRs per HCA
/// let a benchmark run 10,000 connected QP pairs (one end on each HCA);
/// the tables are allocated whole at load, in `KVVec`s (a model QP slot is
/// 240 bytes, a CQ slot 96, an MR slot 64: about 6.5 MiB per HCA with the
/// core's event tables, see Documentation/benchmarking.md, "Scale").
pub(crate) const MAX_PDS: usize = 1024;
pub(crate) const MAX_MRS: usize = 16384;
pub(crate) const MAX_CQS: usize = 16384;
pub(crate) const MAX_QPS: usize = 16384;
const MAX_EQS: usize = MAX_COMP_EQS + 1;
/// Budget units of one engine run under the lock (WQEs, 4 KiB moved).
pub(crate) const ENGINE_BUDGET: u32 = 64;

/// One bitmap of `bits` bits per HCA (the watcher's and the trap's sets).
pub(crate) fn per_hca_bitmaps(nr_hcas: usize, bits: usize) -> Result<KVec<BitmapVec>> {
    let mut v = KVec::with_capacity(nr_hcas, GFP_KERNEL)?;
    for _ in 0..nr_hcas {
        v.push(BitmapVec::new(bits, GFP_KERNEL)?, GFP_KERNEL)?;
    }
    Ok(v)
}

/// The object tables of one model instance, in `KVVec`s.
pub(crate) struct KStorage {
    pds: KVVec<Slot<ModelPd>>,
    mrs: KVVec<Slot<ModelMr>>,
    cqs: KVVec<Slot<ModelCq>>,
    eqs: KVVec<Slot<ModelEq>>,
    qps: KVVec<Slot<ModelQp>>,
}

fn slots<T>(n: usize) -> Result<KVVec<Slot<T>>> {
    let mut v = KVVec::with_capacity(n, GFP_KERNEL)?;
    for _ in 0..n {
        v.push(Slot::new(), GFP_KERNEL)?;
    }
    Ok(v)
}

impl KStorage {
    pub(crate) fn new() -> Result<Self> {
        Ok(Self {
            pds: slots(MAX_PDS)?,
            mrs: slots(MAX_MRS)?,
            cqs: slots(MAX_CQS)?,
            eqs: slots(MAX_EQS)?,
            qps: slots(MAX_QPS)?,
        })
    }
}

impl Storage for KStorage {
    fn tables(&mut self) -> Tables<'_> {
        Tables {
            pds: &mut self.pds,
            mrs: &mut self.mrs,
            cqs: &mut self.cqs,
            eqs: &mut self.eqs,
            qps: &mut self.qps,
        }
    }
}

/// The model instances of the fabric.
pub(crate) struct ModelSet(KVec<ModelHca<KStorage>>);

impl HcaSet for ModelSet {
    type Storage = KStorage;

    fn hcas(&mut self) -> &mut [ModelHca<KStorage>] {
        &mut self.0
    }
}

/// The model's fabric as the module holds it: the instances and the
/// engine's scratch space on the heap.
pub(crate) type SoftFabric = Fabric<ModelSet, KBox<Scratch>>;

/// Everything under the fabric lock.
pub(crate) struct Locked {
    /// The model.
    pub(crate) fabric: SoftFabric,
    /// Memory the model may reach.
    pub(crate) dma: DmaRegistry,
    irqs_per_hca: u32,
    /// The model time the clock timer is armed for, if it is armed.
    pub(crate) timer_at: Option<u64>,
    /// Clock timer expiries (debugfs, tests).
    pub(crate) timer_fires: u64,
    /// What the doorbell watcher reads and writes (`hca/watch.rs`).
    pub(crate) watch: watch::WatchSet,
    /// What the UAR trap reads (`hca/trap.rs`).
    pub(crate) trap: trap::TrapSet,
    /// The path figures, shared with [`SoftHca::perf`], so that the
    /// platform can stamp the interrupts it raises.
    perf: Arc<Perf>,
    /// Set for a section whose caller delivers the interrupts raised in
    /// it itself once the lock is released ([`SoftHca::locked_direct`]).
    direct: Option<irq::DirectIrqs>,
}

impl Locked {
    /// Splits the locked state into the model and a platform for it.
    pub(crate) fn split(&mut self) -> (&mut SoftFabric, SoftPlatform<'_>) {
        let (fabric, (p, _)) = self.split_watch();
        (fabric, p)
    }

    /// Sets the model time to `now` and runs the engine for one budget.
    fn run_engine_at(&mut self, now: u64) -> RunReport {
        let (fabric, mut p) = self.split();
        fabric.set_time(now);
        fabric.run(&mut p, ENGINE_BUDGET)
    }
}

/// The software HCAs of the module.
///
/// # Invariants
///
/// The `clock` timer is armed only while `shutting_down` is clear; it is
/// cancelled by [`SoftHca::shutdown`] and again when the `SoftHca` drops.
#[pin_data(PinnedDrop)]
pub(crate) struct SoftHca {
    /// The fabric, the DMA registry and the driver tables.
    #[pin]
    pub(crate) state: SpinLockIrq<Locked>,
    /// The UAR page of each instance: the doorbells of its kernel objects
    /// and EQs are rung on it.
    pub(crate) uars: KVec<DmaBuf>,
    /// Interrupt vectors of each HCA (async + completion EQs).
    pub(crate) irqs_per_hca: u32,
    /// Process-context work continuing the engine after a budget ran out.
    #[pin]
    pub(crate) engine_work: Work<SoftHca, 2>,
    /// The doorbell watcher (`hca/watch.rs`), on the unbound workqueue.
    #[pin]
    pub(crate) watch_work: Work<SoftHca, 3>,
    /// The UAR trap's poller (`hca/trap.rs`), on the unbound workqueue.
    #[pin]
    pub(crate) trap_work: Work<SoftHca, 4>,
    /// The watcher is queued or running.
    pub(crate) watching: AtomicBool,
    /// The watcher is not started before this time (perf clock, ns).
    pub(crate) watch_backoff: AtomicU64,
    /// Held by the watcher while its word is set, so that it is not
    /// preempted while providers count on it.
    #[pin]
    pub(crate) watch_run: SpinLock<()>,
    /// UAR trap (`hca/trap.rs`): a stream of doorbell stores asked the
    /// poller to map the trapped pages and read the records itself.
    pub(crate) trap_stream: AtomicBool,
    /// A trapped UAR page may be mapped (by a fault, or by the poller for
    /// a stream): the poller's run ends by unmapping them.
    pub(crate) trap_mapped: AtomicBool,
    /// A stream-mode run queued its continuation, the pages still mapped.
    pub(crate) trap_again: AtomicBool,
    /// When the last fault that completed a send doorbell store ended
    /// (perf clock, ns).
    pub(crate) trap_last_store: AtomicU64,
    /// No stream mode is started before this time (perf clock, ns).
    pub(crate) trap_backoff: AtomicU64,
    /// Held by the poller while it polls for a stream, so that it is not
    /// preempted while the pages are mapped and processes count on it.
    #[pin]
    pub(crate) trap_run: SpinLock<()>,
    /// Kick elision is on (`kick_elision` module parameter): the doorbell
    /// watcher for rmlx5's provider, stream mode for the UAR trap.
    pub(crate) elision: bool,
    /// [`SoftHca::locked_direct`] delivers interrupts itself (`irq_direct`
    /// module parameter).
    irq_direct: bool,
    /// Set before teardown: the works stop rescheduling themselves.
    pub(crate) shutting_down: AtomicBool,
    /// Where the time of the doorbell and event paths goes (debugfs
    /// `rmlx5/perf`).
    pub(crate) perf: Arc<Perf>,
    /// Origin of the model's clock.
    epoch: Instant<Monotonic>,
    /// Fires at the earliest RNR or transport retry deadline.
    #[pin]
    clock: HrTimer<SoftHca>,
}

kernel::impl_has_work! {
    impl HasWork<Self, 2> for SoftHca { self.engine_work }
    impl HasWork<Self, 3> for SoftHca { self.watch_work }
    impl HasWork<Self, 4> for SoftHca { self.trap_work }
}

#[pinned_drop]
impl PinnedDrop for SoftHca {
    fn drop(self: Pin<&mut Self>) {
        // `shutdown` normally cancelled it already; this keeps the timer
        // from outliving the fabric on every path.
        self.cancel_clock();
    }
}

kernel::impl_has_hr_timer! {
    impl HasHrTimer<Self> for SoftHca {
        mode: AbsoluteSoftMode<Monotonic>,
        field: self.clock,
    }
}

impl HrTimerCallback for SoftHca {
    type Pointer<'a> = Pin<&'a Self>;

    fn run(this: Pin<&Self>, _ctx: HrTimerCallbackContext<'_, Self>) -> HrTimerRestart {
        // Softirq context. `engine_locked` starts the timer again for the
        // next deadline if a QP still waits; a timer started from its own
        // callback stays queued whatever the callback returns.
        let more = {
            let mut st = this.state.lock();
            st.timer_at = None;
            st.timer_fires += 1;
            !this.shutting_down.load(Ordering::Acquire) && this.engine_locked(&mut st)
        };
        if more {
            if let Ok(soft) = crate::soft() {
                soft.kick_engine();
            }
        }
        HrTimerRestart::NoRestart
    }
}

impl SoftHca {
    /// Creates `nr_hcas` instances with `comp_eqs` completion EQs each
    /// (the core creates the EQs through the backend, see
    /// `hca/backend.rs`).
    pub(crate) fn new(nr_hcas: usize, comp_eqs: usize) -> Result<Arc<Self>> {
        let irqs_per_hca = u32::try_from(comp_eqs + 1)?;
        let mut models = KVec::with_capacity(nr_hcas, GFP_KERNEL)?;
        let mut uars = KVec::with_capacity(nr_hcas, GFP_KERNEL)?;
        let mut dma = DmaRegistry::new()?;
        for i in 0..nr_hcas {
            let index = u16::try_from(i)?;
            let model = ModelHca::new(index, Caps::DEFAULT, KStorage::new()?);
            let uar = DmaBuf::new(UAR_PAGE_SIZE, GFP_KERNEL)?;
            dma.add_buf(&uar)?;
            models.push(model, GFP_KERNEL)?;
            uars.push(uar, GFP_KERNEL)?;
        }
        let perf = Arc::new(Perf::new(), GFP_KERNEL)?;
        // The engine's 10 KiB scratch space goes straight into its
        // allocation (copied from the constant), never through the stack.
        let scratch = KBox::new_uninit(GFP_KERNEL)?.write(Scratch::EMPTY);
        let locked = Locked {
            fabric: Fabric::with_scratch(ModelSet(models), scratch),
            dma,
            irqs_per_hca,
            timer_at: None,
            timer_fires: 0,
            watch: watch::WatchSet::new(nr_hcas, MAX_QPS)?,
            trap: trap::TrapSet::new(nr_hcas, MAX_QPS)?,
            perf: perf.clone(),
            direct: None,
        };
        Arc::pin_init(
            pin_init!(Self {
                state <- new_spinlock_irq!(locked, "rmlx5_fabric"),
                uars,
                irqs_per_hca,
                engine_work <- new_work!("rmlx5_engine"),
                watch_work <- new_work!("rmlx5_watch"),
                trap_work <- new_work!("rmlx5_trap"),
                watching: AtomicBool::new(false),
                watch_backoff: AtomicU64::new(0),
                watch_run <- new_spinlock!((), "rmlx5_watch_run"),
                trap_stream: AtomicBool::new(false),
                trap_mapped: AtomicBool::new(false),
                trap_again: AtomicBool::new(false),
                trap_last_store: AtomicU64::new(0),
                trap_backoff: AtomicU64::new(0),
                trap_run <- new_spinlock!((), "rmlx5_trap_run"),
                elision: crate::module_parameters::kick_elision.value(),
                irq_direct: crate::module_parameters::irq_direct.value(),
                shutting_down: AtomicBool::new(false),
                perf,
                epoch: Instant::now(),
                clock <- HrTimer::new(),
            }),
            GFP_KERNEL,
        )
    }

    /// The UAR page of instance `index`.
    pub(crate) fn uar(&self, index: usize) -> Result<&DmaBuf> {
        self.uars.get(index).ok_or(ENODEV)
    }

    /// The number of instances.
    pub(crate) fn count(&self) -> usize {
        self.uars.len()
    }

    /// Queues the engine work (any context).
    pub(crate) fn kick_engine(self: &Arc<Self>) {
        if !self.shutting_down.load(Ordering::Acquire) {
            let _ = crate::work::system_percpu().enqueue::<Arc<Self>, 2>(self.clone());
        }
    }

    /// The model time now: monotonic nanoseconds since `epoch`.
    fn model_now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(0)
    }

    /// Runs the engine for one budget at the current time under the lock
    /// `st`, then arms the clock timer for the earliest retry deadline.
    /// Returns whether work remains that can run now.
    pub(crate) fn engine_locked(&self, st: &mut Locked) -> bool {
        self.engine_report(st).more
    }

    /// As [`SoftHca::engine_locked`], returning what the run did. The run
    /// ends early after a step that raised an interrupt (see
    /// `SoftPlatform::yield_engine`), so that it fires when `st` is
    /// released rather than after the rest of the budget.
    fn engine_report(&self, st: &mut Locked) -> RunReport {
        let start = self.perf.now();
        let report = st.run_engine_at(self.model_now());
        self.arm_clock(st);
        self.perf.engine.add(self.perf.now().saturating_sub(start));
        self.perf
            .engine_units
            .fetch_add(u64::from(report.used), Ordering::Relaxed);
        report
    }

    /// Starts the clock timer at the fabric's next deadline unless it is
    /// already armed for that time or earlier. Called with `state` held.
    fn arm_clock(&self, st: &mut Locked) {
        if self.shutting_down.load(Ordering::Acquire) {
            return;
        }
        // `u64::MAX` is an infinite transport timeout: nothing to arm.
        let Some(deadline) = st.fabric.next_deadline().filter(|&d| d != u64::MAX) else {
            return;
        };
        if st.timer_at.is_some_and(|at| at <= deadline) {
            return;
        }
        let Ok(ns) = i64::try_from(deadline) else {
            return;
        };
        st.timer_at = Some(deadline);
        let this: *const Self = self;
        // SAFETY: `self` lives in an `Arc` that is dropped only after
        // `shutdown` (or `PinnedDrop`) cancelled the timer, and the timer is
        // started only under `state` while `shutting_down` is clear, so the
        // timer never outlives `self`.
        unsafe {
            <Self as HasHrTimer<Self>>::start(this, self.epoch + Delta::from_nanos(ns));
        }
    }

    /// Runs `f` under the fabric lock and delivers the interrupts the
    /// model raised meanwhile on this CPU right after the unlock, instead
    /// of through the irq_work (the raise then costs no self-IPI and the
    /// EQ handler, with the softirq it raises, runs before this returns).
    /// That needs process context holding no spinlock, since the EQ
    /// handler takes the fabric lock; it is checked here
    /// ([`irq::may_handle_now`]), and any other caller gets the irq_work,
    /// as does an interrupt raised with no room left to keep it.
    pub(crate) fn locked_direct<R>(&self, f: impl FnOnce(&mut Locked) -> R) -> R {
        if !self.irq_direct || !irq::may_handle_now() {
            return f(&mut self.state.lock());
        }
        let (r, pending) = {
            let mut st = self.state.lock();
            st.direct = Some(irq::DirectIrqs::new());
            let r = f(&mut st);
            // Bottom halves off before the unlock: from there until the
            // delivery this task is neither preempted nor migrated, since
            // the EQs these interrupts fired stay disarmed until their
            // handler runs.
            let pending = st.direct.take().filter(|d| !d.is_empty()).map(|d| {
                // SAFETY: `bh` is dropped by `deliver` below, on this CPU,
                // after the guard `st` (so with interrupts on), and no
                // spinlock is taken in between.
                (d, unsafe { irq::BhOff::new() })
            });
            (r, pending)
        };
        if let Some((irqs, bh)) = pending {
            irqs.deliver(bh);
        }
        r
    }

    /// Runs the engine for one budget and continues from the engine work
    /// if the budget ran out. A run that yielded after raising an
    /// interrupt releases the lock; the interrupt is delivered there, on
    /// this CPU (by this caller where its context allows it, see
    /// [`SoftHca::locked_direct`], else by its irq_work), and the next run
    /// goes on with what is left of the budget.
    pub(crate) fn run_engine(self: &Arc<Self>) {
        let mut used = 0u32;
        loop {
            let r = self.locked_direct(|st| self.engine_report(st));
            if !r.more {
                return;
            }
            used = used.saturating_add(r.used);
            if r.used == 0 || used >= ENGINE_BUDGET {
                self.kick_engine();
                return;
            }
        }
    }

    /// Cancels the clock timer, waiting for a running callback.
    fn cancel_clock(&self) {
        let this: *const Self = self;
        // SAFETY: `this` points to a valid `SoftHca`, so the timer pointer
        // is valid and the timer was initialised by `HrTimer::new`.
        unsafe {
            let t = <Self as HasHrTimer<Self>>::c_timer_ptr(this);
            kernel::bindings::hrtimer_cancel(t.cast_mut());
        }
    }

    /// Stops the clock timer and the works and waits for them; called once
    /// at unload, after the interrupt handlers are gone.
    pub(crate) fn shutdown(&self) {
        {
            // Under `state`, so no engine run can start the timer after the
            // cancel below.
            let _st = self.state.lock();
            self.shutting_down.store(true, Ordering::Release);
        }
        self.cancel_clock();
        // SAFETY: The pointers are to initialised fields of `self`.
        let works = unsafe {
            [
                Work::<SoftHca, 2>::raw_get(&self.engine_work),
                Work::<SoftHca, 3>::raw_get(&self.watch_work),
                Work::<SoftHca, 4>::raw_get(&self.trap_work),
            ]
        };
        for w in works {
            // SAFETY: The work items are initialised fields of `self`,
            // which outlives this call.
            unsafe { crate::work::flush_work(w) };
        }
    }
}

impl workqueue::WorkItem<2> for SoftHca {
    type Pointer = Arc<SoftHca>;

    fn run(this: Arc<SoftHca>) {
        // Process context: run the engine in budgets, releasing the lock
        // (and enabling interrupts) between them.
        for _ in 0..64 {
            if this.shutting_down.load(Ordering::Acquire) {
                return;
            }
            if !this.locked_direct(|st| this.engine_locked(st)) {
                return;
            }
        }
        this.kick_engine();
    }
}
