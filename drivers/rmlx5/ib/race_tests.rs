// SPDX-License-Identifier: GPL-2.0

//! KUnit suite `rmlx5_cq_race`: the CQN table racing CQ destroy from two
//! CPUs. A hammer work item on `system_unbound` creates and destroys CQs
//! with completion handlers while the test thread, on the other CPU,
//! queues events naming every CQN the hammer can get (what the EQ handler
//! does for each completion EQE) and kicks the BH dispatcher.
//!
//! Each CQ's handler context is a `KBox` freed as soon as destroy returns,
//! so a handler call after destroy would be a use-after-free KASAN reports;
//! the handler also checks the context's `destroyed` flag.

use core::sync::atomic::{
    AtomicBool,
    AtomicU32,
    AtomicU64,
    Ordering, //
};
use kernel::{
    cpu::CpuId,
    ffi::c_void,
    impl_has_work, new_work,
    prelude::*,
    sync::Arc,
    time::{
        delay::fsleep,
        Delta,
        Instant,
        Monotonic, //
    },
    workqueue::{
        Work,
        WorkItem, //
    },
};

use super::cq::Cq;
use crate::mlx5_core::device::Device;

/// Create/destroy rounds of the hammer.
const ROUNDS: u32 = 3000;
/// CQNs the test thread names (the hammer's CQs get small CQNs).
const CQN_RANGE: u32 = 32;

/// Handler context of one hammer CQ.
struct Ctx {
    destroyed: AtomicBool,
    hammer: Arc<Hammer>,
}

#[pin_data]
struct Hammer {
    dev: Arc<Device>,
    #[pin]
    work: Work<Hammer>,
    rounds: AtomicU32,
    handler_calls: AtomicU64,
    late_calls: AtomicU32,
    failed: AtomicBool,
    done: AtomicBool,
    cpu: AtomicU32,
}

impl_has_work! {
    impl HasWork<Self> for Hammer { self.work }
}

/// Completion handler of the hammer's CQs (BH context).
///
/// # Safety
///
/// `ctx` points at the CQ's live `Ctx`.
unsafe extern "C" fn hammer_handler(_cq: *mut Cq, ctx: *mut c_void) {
    // SAFETY: The context lives until destroy of its CQ returned, and
    // destroy waits for this call; KASAN reports it if that is broken.
    let c = unsafe { &*ctx.cast::<Ctx>() };
    if c.destroyed.load(Ordering::Acquire) {
        c.hammer.late_calls.fetch_add(1, Ordering::Relaxed);
    }
    c.hammer.handler_calls.fetch_add(1, Ordering::Relaxed);
}

impl Hammer {
    fn round(this: &Arc<Self>, i: u32) -> Result {
        let ctx = KBox::new(
            Ctx {
                destroyed: AtomicBool::new(false),
                hammer: this.clone(),
            },
            GFP_KERNEL,
        )?;
        let p: *const Ctx = &*ctx;
        let cq = Cq::new(&this.dev, 4, i % 2, Some((hammer_handler, p as usize)))?;
        if i % 4 == 0 {
            // Some rounds keep the CQ a little longer so events hit it.
            fsleep(Delta::from_micros(10));
        }
        cq.destroy()?;
        ctx.destroyed.store(true, Ordering::Release);
        drop(ctx);
        Ok(())
    }
}

impl WorkItem for Hammer {
    type Pointer = Arc<Hammer>;

    fn run(this: Arc<Hammer>) {
        this.cpu.store(CpuId::current().as_u32(), Ordering::Relaxed);
        for i in 0..ROUNDS {
            if Self::round(&this, i).is_err() {
                this.failed.store(true, Ordering::Release);
                break;
            }
            this.rounds.fetch_add(1, Ordering::Relaxed);
        }
        this.done.store(true, Ordering::Release);
    }
}

#[kunit_tests(rmlx5_cq_race)]
mod race {
    use super::*;

    #[test]
    fn cqn_lookup_races_destroy_on_two_cpus() -> Result {
        let dev = crate::mlx5_core::device::get(0)?;
        let stray_before = dev.events.lock().stray_eqes;
        let hammer_dev = dev.clone();
        let hammer = Arc::pin_init(
            pin_init!(Hammer {
                dev: hammer_dev,
                work <- new_work!("rmlx5_cq_hammer"),
                rounds: AtomicU32::new(0),
                handler_calls: AtomicU64::new(0),
                late_calls: AtomicU32::new(0),
                failed: AtomicBool::new(false),
                done: AtomicBool::new(false),
                cpu: AtomicU32::new(u32::MAX),
            }),
            GFP_KERNEL,
        )?;
        crate::work::system_dfl()
            .enqueue(hammer.clone())
            .map_err(|_| EBUSY)?;
        let start = Instant::<Monotonic>::now();
        let mut passes = 0u64;
        let mut other_cpu = 0u64;
        while !hammer.done.load(Ordering::Acquire) {
            if start.elapsed() > Delta::from_secs(120) {
                pr_err!("cq hammer did not finish\n");
                return Err(ETIMEDOUT);
            }
            {
                let mut t = dev.events.lock();
                for cqn in 0..CQN_RANGE {
                    t.queue_cq(cqn);
                }
            }
            dev.kick_dispatch();
            passes += 1;
            if CpuId::current().as_u32() != hammer.cpu.load(Ordering::Relaxed) {
                other_cpu += 1;
            }
            if passes % 8 == 0 {
                fsleep(Delta::from_micros(20));
            }
        }
        // Let queued dispatches drain before the counters are read.
        fsleep(Delta::from_millis(20));
        let stray = dev.events.lock().stray_eqes - stray_before;
        let rounds = hammer.rounds.load(Ordering::Relaxed);
        let calls = hammer.handler_calls.load(Ordering::Relaxed);
        pr_info!(
            "cq race: {} create/destroy rounds, {} event passes ({} from the other CPU), {} handler calls, {} stray events\n",
            rounds,
            passes,
            other_cpu,
            calls,
            stray
        );
        assert!(!hammer.failed.load(Ordering::Acquire));
        assert_eq!(rounds, ROUNDS);
        assert_eq!(hammer.late_calls.load(Ordering::Relaxed), 0);
        // Events naming CQNs with no CQ are counted, not delivered.
        assert!(stray > 0);
        Ok(())
    }
}
