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
//! taking `state`; `state` is never held while taking another lock. Nothing
//! under `state` allocates except `GFP_ATOMIC` pushes of the DMA registry.

pub(crate) mod dma;
pub(crate) mod irq;

use core::sync::atomic::{
    AtomicBool,
    AtomicU64,
    Ordering, //
};
use kernel::{
    bitmap::BitmapVec,
    new_spinlock_irq, new_work,
    prelude::*,
    sync::{
        Arc,
        SpinLockIrq, //
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
    fabric::{Fabric, HcaSet},
    hca::Hca as ModelHca,
    mr::Mr as ModelMr,
    pd::Pd as ModelPd,
    qp::Qp as ModelQp,
    table::{
        Slot,
        Storage,
        Tables, //
    },
};
use crate::ib::{
    cq::Cq,
    qp::Qp, //
};
use crate::mlx5_core::eq::Eq;
use crate::mlx5_prm::doorbell::UAR_PAGE_SIZE;
use dma::{
    DmaBuf,
    DmaRegistry,
    SoftPlatform, //
};

/// Largest number of completion EQs per HCA (module parameter bound).
pub(crate) const MAX_COMP_EQS: usize = 8;
/// Object table sizes of each instance.
pub(crate) const MAX_PDS: usize = 64;
pub(crate) const MAX_MRS: usize = 256;
pub(crate) const MAX_CQS: usize = 256;
pub(crate) const MAX_QPS: usize = 256;
const MAX_EQS: usize = MAX_COMP_EQS + 1;
/// Budget units of one engine run under the lock (WQEs, 4 KiB moved).
pub(crate) const ENGINE_BUDGET: u32 = 64;
/// Pending asynchronous events kept per HCA before they are dropped.
const ASYNC_RING: usize = 64;

/// The object tables of one model instance, in `KVec`s.
pub(crate) struct KStorage {
    pds: KVec<Slot<ModelPd>>,
    mrs: KVec<Slot<ModelMr>>,
    cqs: KVec<Slot<ModelCq>>,
    eqs: KVec<Slot<ModelEq>>,
    qps: KVec<Slot<ModelQp>>,
}

fn slots<T>(n: usize) -> Result<KVec<Slot<T>>> {
    let mut v = KVec::with_capacity(n, GFP_KERNEL)?;
    for _ in 0..n {
        v.push(Slot::new(), GFP_KERNEL)?;
    }
    Ok(v)
}

impl KStorage {
    fn new() -> Result<Self> {
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

/// An asynchronous event for the ULP event handler.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AsyncEvent {
    /// `mlx5_prm` event type.
    pub(crate) event_type: u8,
    /// CQN or QPN the event is about.
    pub(crate) element: u32,
}

/// Per-HCA lookup tables of the driver, under the fabric lock.
pub(crate) struct HcaTables {
    /// CQs that may receive completion events, by CQN. Polling-only CQs are
    /// never here, so an EQE naming one is dropped.
    pub(crate) cqs: KVec<Option<Arc<Cq>>>,
    /// QPs by slot (QPN - `QPN_BASE`), for poll_cq's wr_id lookup.
    pub(crate) qps: KVec<Option<Arc<Qp>>>,
    /// CQs queued for BH dispatch: one bit per CQN, so a CQ is queued at
    /// most once however many EQEs name it.
    pub(crate) pending: BitmapVec,
    /// Async events waiting for the BH (ring of [`ASYNC_RING`]).
    pub(crate) events: KVec<AsyncEvent>,
    /// EQEs naming an unknown, destroyed or polling-only CQ.
    pub(crate) stray_eqes: u64,
    /// Async events dropped because the ring was full.
    pub(crate) events_dropped: u64,
}

impl HcaTables {
    fn new() -> Result<Self> {
        let mut cqs = KVec::with_capacity(MAX_CQS, GFP_KERNEL)?;
        for _ in 0..MAX_CQS {
            cqs.push(None, GFP_KERNEL)?;
        }
        let mut qps = KVec::with_capacity(MAX_QPS, GFP_KERNEL)?;
        for _ in 0..MAX_QPS {
            qps.push(None, GFP_KERNEL)?;
        }
        Ok(Self {
            cqs,
            qps,
            pending: BitmapVec::new(MAX_CQS, GFP_KERNEL)?,
            events: KVec::with_capacity(ASYNC_RING, GFP_KERNEL)?,
            stray_eqes: 0,
            events_dropped: 0,
        })
    }

    /// Queues CQ `cqn` for dispatch. Returns whether the CQ exists.
    pub(crate) fn queue_cq(&mut self, cqn: u32) -> bool {
        let i = cqn as usize;
        match self.cqs.get(i) {
            Some(Some(cq)) => {
                cq.note_event();
                self.pending.set_bit(i);
                true
            }
            _ => {
                self.stray_eqes += 1;
                false
            }
        }
    }

    /// Queues an async event (no allocation: the ring was reserved).
    pub(crate) fn queue_event(&mut self, ev: AsyncEvent) {
        if self.events.len() < ASYNC_RING {
            // Capacity was reserved at creation, so this does not allocate.
            if self.events.push(ev, GFP_ATOMIC).is_err() {
                self.events_dropped += 1;
            }
        } else {
            self.events_dropped += 1;
        }
    }
}

/// Everything under the fabric lock.
pub(crate) struct Locked {
    /// The model.
    pub(crate) fabric: Fabric<ModelSet>,
    /// Memory the model may reach.
    pub(crate) dma: DmaRegistry,
    /// Driver tables, one per HCA.
    pub(crate) hcas: KVec<HcaTables>,
    irqs_per_hca: u32,
}

impl Locked {
    /// Splits the locked state into the model instance `hca`, a platform
    /// for it, and the driver tables.
    pub(crate) fn split(
        &mut self,
    ) -> (
        &mut Fabric<ModelSet>,
        SoftPlatform<'_>,
        &mut KVec<HcaTables>,
    ) {
        (
            &mut self.fabric,
            SoftPlatform {
                dma: &self.dma,
                irqs_per_hca: self.irqs_per_hca,
            },
            &mut self.hcas,
        )
    }

    /// Runs the engine for one budget. Returns whether work remains.
    pub(crate) fn run_engine(&mut self) -> bool {
        let (fabric, mut p, _) = self.split();
        fabric.run(&mut p, ENGINE_BUDGET).more
    }
}

/// Per-HCA state outside the lock: the UAR page and the EQs.
#[pin_data]
pub(crate) struct HcaDev {
    /// Instance number (fabric index).
    pub(crate) index: u16,
    /// The UAR page all kernel objects of this HCA ring doorbells on.
    pub(crate) uar: DmaBuf,
    /// EQs; index = interrupt vector (0 = async, 1.. = completion).
    pub(crate) eqs: KVec<Eq>,
    /// Asynchronous event handler of the kernel ULP (function, context).
    #[pin]
    pub(crate) event_handler: SpinLockIrq<Option<(crate::ulp::EventHandlerFn, usize)>>,
}

/// The software HCAs of the module.
#[pin_data]
pub(crate) struct SoftHca {
    /// The fabric, the DMA registry and the driver tables.
    #[pin]
    pub(crate) state: SpinLockIrq<Locked>,
    /// Per-HCA state, fixed after creation.
    pub(crate) devs: KVec<Pin<KBox<HcaDev>>>,
    /// Interrupt vectors of each HCA (async + completion EQs).
    pub(crate) irqs_per_hca: u32,
    /// BH work (system_bh) dispatching queued CQs and async events.
    #[pin]
    pub(crate) dispatch_work: Work<SoftHca, 1>,
    /// Process-context work continuing the engine after a budget ran out.
    #[pin]
    pub(crate) engine_work: Work<SoftHca, 2>,
    /// Set before teardown: the works stop rescheduling themselves.
    pub(crate) shutting_down: AtomicBool,
    /// BH dispatch runs and CQ handler calls (debugfs, tests).
    pub(crate) dispatch_runs: AtomicU64,
    pub(crate) handler_calls: AtomicU64,
}

kernel::impl_has_work! {
    impl HasWork<Self, 1> for SoftHca { self.dispatch_work }
    impl HasWork<Self, 2> for SoftHca { self.engine_work }
}

impl SoftHca {
    /// Creates `nr_hcas` instances with `comp_eqs` completion EQs each
    /// (EQs are created in the model but not armed: the platform driver
    /// arms them once their interrupt handlers are registered).
    pub(crate) fn new(nr_hcas: usize, comp_eqs: usize) -> Result<Arc<Self>> {
        let irqs_per_hca = u32::try_from(comp_eqs + 1)?;
        let mut models = KVec::with_capacity(nr_hcas, GFP_KERNEL)?;
        let mut tables = KVec::with_capacity(nr_hcas, GFP_KERNEL)?;
        let mut devs = KVec::with_capacity(nr_hcas, GFP_KERNEL)?;
        let mut dma = DmaRegistry::new();
        for i in 0..nr_hcas {
            let index = u16::try_from(i)?;
            let mut model = ModelHca::new(index, Caps::DEFAULT, KStorage::new()?);
            let uar = DmaBuf::new(UAR_PAGE_SIZE, GFP_KERNEL)?;
            dma.add_buf(&uar)?;
            let mut eqs = KVec::with_capacity(comp_eqs + 1, GFP_KERNEL)?;
            for v in 0..=comp_eqs {
                let eq = Eq::new(index, u16::try_from(v)?, &uar, &mut model, &mut dma)?;
                eqs.push(eq, GFP_KERNEL)?;
            }
            models.push(model, GFP_KERNEL)?;
            tables.push(HcaTables::new()?, GFP_KERNEL)?;
            devs.push(
                KBox::pin_init(
                    pin_init!(HcaDev {
                        index,
                        uar,
                        eqs,
                        event_handler <- new_spinlock_irq!(None, "rmlx5_event_handler"),
                    }),
                    GFP_KERNEL,
                )?,
                GFP_KERNEL,
            )?;
        }
        let locked = Locked {
            fabric: Fabric::new(ModelSet(models)),
            dma,
            hcas: tables,
            irqs_per_hca,
        };
        Arc::pin_init(
            pin_init!(Self {
                state <- new_spinlock_irq!(locked, "rmlx5_fabric"),
                devs,
                irqs_per_hca,
                dispatch_work <- new_work!("rmlx5_dispatch"),
                engine_work <- new_work!("rmlx5_engine"),
                shutting_down: AtomicBool::new(false),
                dispatch_runs: AtomicU64::new(0),
                handler_calls: AtomicU64::new(0),
            }),
            GFP_KERNEL,
        )
    }

    /// The HCA `index`.
    pub(crate) fn dev(&self, index: usize) -> Result<&HcaDev> {
        self.devs.get(index).map(|d| &**d).ok_or(ENODEV)
    }

    /// Queues the BH dispatch work (any context).
    pub(crate) fn kick_dispatch(self: &Arc<Self>) {
        if !self.shutting_down.load(Ordering::Acquire) {
            // Already queued is fine: the queued run will see our CQ.
            let _ = workqueue::system_bh().enqueue::<Arc<Self>, 1>(self.clone());
        }
    }

    /// Queues the engine work (any context).
    pub(crate) fn kick_engine(self: &Arc<Self>) {
        if !self.shutting_down.load(Ordering::Acquire) {
            let _ = workqueue::system().enqueue::<Arc<Self>, 2>(self.clone());
        }
    }

    /// Runs the engine once under the lock and continues from the engine
    /// work if the budget ran out.
    pub(crate) fn run_engine(self: &Arc<Self>) {
        let more = self.state.lock().run_engine();
        if more {
            self.kick_engine();
        }
    }

    /// Stops the works and waits for them; called once at unload, after the
    /// interrupt handlers are gone.
    pub(crate) fn shutdown(&self) {
        self.shutting_down.store(true, Ordering::Release);
        // SAFETY: The pointers are to initialised fields of `self`.
        let works = unsafe {
            [
                Work::<SoftHca, 1>::raw_get(&self.dispatch_work),
                Work::<SoftHca, 2>::raw_get(&self.engine_work),
            ]
        };
        for w in works {
            // SAFETY: The work items are initialised fields of `self`,
            // which outlives this call.
            unsafe { irq::flush_work(w) };
        }
    }
}
