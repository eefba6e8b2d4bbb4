// SPDX-License-Identifier: GPL-2.0

//! rmlx5: an mlx5-style RDMA driver written in Rust.
//!
//! The crate root only declares the module and its parts; see
//! `Documentation/architecture.md` and `Documentation/kernel-core.md` for
//! how they fit together.

use core::sync::atomic::{
    AtomicPtr,
    Ordering, //
};
use kernel::{
    driver, pci, platform,
    prelude::*,
    sync::{
        Arc,
        ArcBorrow, //
    },
};

mod backend;
mod cx;
mod debugfs;
mod device;
mod hca;
pub mod ib;
#[cfg(CONFIG_INFINIBAND)]
mod ibdev;
#[cfg(CONFIG_INFINIBAND_USER_ACCESS)]
pub mod ibu;
mod mem;
#[path = "core.rs"]
mod mlx5_core;
mod perf;
mod prm_tests;
pub mod ulp;
mod uverbs;
mod work;

/// The mlx5 queue formats (`rust/mlx5-prm`), compiled from the same source
/// files as the user-space crate. The module list mirrors
/// `rust/mlx5-prm/src/modules.txt`; every module is `pub` so that items the
/// driver does not use yet are not reported as dead code.
#[path = "../../rust/mlx5-prm/src"]
pub mod mlx5_prm {
    pub mod bytes;
    pub mod cmd_cq;
    pub mod cmd_eq;
    pub mod cmd_hca;
    pub mod cmd_qp;
    pub mod cmd_queue;
    pub mod cmd_res;
    pub mod cmd_status;
    pub mod cmd_vport;
    pub mod command;
    pub mod cqe;
    pub mod doorbell;
    pub mod eqe;
    pub mod eqe_async;
    pub mod error;
    pub mod hca_cap;
    pub mod ifc;
    pub mod init_seg;
    pub mod net_hdr;
    pub mod opcode;
    pub mod qpc;
    pub mod recv;
    pub mod ring;
    pub mod sq;
    pub mod wqe;
}

/// The software HCA model (`rust/hca-model`), compiled from the same
/// source files as the user-space crate (see its `lib.rs`).
#[path = "../../rust/hca-model/src"]
pub mod hca_model {
    mod prm {
        pub(crate) use crate::mlx5_prm::*;
    }
    pub mod atomic;
    pub mod caps;
    pub mod cq;
    pub mod dev;
    pub mod doorbell;
    pub mod eq;
    pub mod error;
    pub mod exec;
    pub mod fabric;
    pub mod flush;
    pub mod fw;
    pub mod hca;
    pub mod mem;
    pub mod mr;
    pub mod pd;
    pub mod port;
    pub mod qp;
    pub mod qp_modify;
    pub mod respond;
    pub mod ring;
    pub mod sched;
    pub mod stats;
    pub mod table;
    pub mod timer;
    pub mod transfer;
    pub mod ud;
    pub mod wqe;
}

/// The driver side of the mlx5 command interface and function bring-up
/// (`rust/mlx5-cmdif`), compiled from the same source files as the
/// user-space crate (see its `lib.rs`); the PCI backend will drive it.
#[path = "../../rust/mlx5-cmdif/src"]
pub mod mlx5_cmdif {
    mod prm {
        pub(crate) use crate::mlx5_prm::*;
    }
    pub mod bus;
    pub mod caps;
    pub mod cmdif;
    pub mod cmdmem;
    pub mod error;
    pub mod function;
    pub mod pages;
}

/// The user/kernel ABI (`rust/rmlx5-abi`), compiled from the same source
/// files as the user-space crate.
#[path = "../../rust/rmlx5-abi/src"]
pub mod rmlx5_abi {
    pub mod check;
    pub mod ioctl;
    pub mod mmap;
    pub mod uapi;
    pub mod wire;
}

module! {
    type: Rmlx5Module,
    name: "rmlx5",
    authors: ["rmlx5 developers"],
    description: "mlx5-style RDMA driver with a software HCA",
    license: "GPL",
    params: {
        num_hcas: u32 {
            default: 2,
            description: "Number of software HCA instances (rmlx5_0 ...), 1 to 8",
        },
        comp_eqs: u32 {
            default: 2,
            description: "Completion EQs (and interrupts) per HCA, 1 to 8",
        },
        kick_elision: bool {
            default: true,
            description: "Software HCA: a doorbell watcher reads the doorbell records of streaming QPs, and their providers skip the KICK call while it runs; for rdma-core's provider, a stream of doorbell stores has the UAR trap's poller map the pages and read the records",
        },
        uar_store_emulation: bool {
            default: true,
            description: "Software HCA, rdma-core's provider: a doorbell store to a trapped UAR page is completed by the fault handler (x86-64), which leaves the page unmapped; off: the page is mapped and a poller reads the records",
        },
        irq_direct: bool {
            default: true,
            description: "Software HCA: an interrupt raised by a caller in process context holding no spinlock (a kick, a UAR trap fault, the engine work, a kernel post) is delivered by that caller right after it releases the fabric lock; off: always through an irq_work (a self-IPI)",
        },
        ib_core: bool {
            default: true,
            description: "Register the software HCAs and the ConnectX functions with the kernel's RDMA core as rmlx5_<n>, for ULPs of the ib_* API (kernels with CONFIG_INFINIBAND)",
        },
        pci: bool {
            default: true,
            description: "Drive ConnectX PCI functions (the software HCAs exist either way)",
        },
        cx_fw_wait_ms: u32 {
            default: 120000,
            description: "How long a ConnectX function's firmware may stay initializing at probe, in ms (mlx5_core: 120000)",
        },
        cx_selftest: bool {
            default: false,
            description: "Run a data-path self-test (CQ, QPs, RDMA WRITE and SEND) on each ConnectX function after bring-up",
        },
        cx_health_ms: u32 {
            default: 2000,
            description: "Period of a ConnectX function's health poll in ms, 0 for none (mlx5_core: 2000)",
        },
        cx_recover: bool {
            default: true,
            description: "Reset and probe a ConnectX function again after its health check failed",
        },
        cx_recover_grace_ms: u32 {
            default: 60000,
            description: "A ConnectX function that fails again within this many ms of its last recovery is left down (mlx5_core's health grace period: 60000)",
        },
        cx_cmd_timeout_ms: u32 {
            default: 60000,
            description: "How long one command may take on a ConnectX function, in ms (mlx5_core: 60000)",
        },
        cx_cmd_mode: u32 {
            default: 2,
            description: "How a ConnectX function's commands run: 0 one at a time through entry 0, polled; 1 up to seven side by side on the lanes, polled; 2 on the lanes, completed by event (debugfs rmlx5/cx_cmd changes it)",
        },
    },
}

/// The software HCA of the loaded module, for the platform driver and the
/// ULP API (an `Arc::into_raw` pointer, or null before init and after
/// exit).
static SOFT: AtomicPtr<hca::SoftHca> = AtomicPtr::new(::core::ptr::null_mut());

/// Returns a reference to the module's software HCA.
///
/// # Errors
///
/// `ENODEV` before module init has created it or after exit began.
pub(crate) fn soft() -> Result<Arc<hca::SoftHca>> {
    let p = SOFT.load(Ordering::Acquire);
    if p.is_null() {
        return Err(ENODEV);
    }
    // SAFETY: `p` came from `Arc::into_raw` in `init` and its reference is
    // released only in `drop`, after every user (platform driver, ULP
    // modules, which depend on this module) is gone.
    Ok(unsafe { ArcBorrow::from_raw(p) }.into())
}

/// The loaded module. Fields drop in order: the software HCAs' ib_core
/// devices (whose clients destroy their objects through the ops as they
/// are removed), the ConnectX PCI driver (unbinding its functions: their
/// ib_core devices go the same way, and the objects kernel ULPs still hold
/// on them are released on the device, their handles left dead), then the
/// objects kernel ULPs left behind are reclaimed (destroyed where still
/// live, and freed) while the software HCAs still run, the platform driver
/// (its unbind frees the EQ interrupts), the works are stopped, then the
/// interrupt controller and the platform devices, the HCAs' device nodes,
/// debugfs, the software HCA itself, and last the reap workqueue (waiting
/// for the frees queued on it).
struct Rmlx5Module {
    #[cfg(CONFIG_INFINIBAND)]
    _ib: Option<ibdev::IbDevices>,
    _cx: Option<Pin<KBox<driver::Registration<pci::Adapter<cx::CxDriver>>>>>,
    _reclaim: ReclaimUlpObjects,
    _driver: Pin<KBox<driver::Registration<platform::Adapter<device::EqDriver>>>>,
    _devices: SoftDevices,
    _quiesce: Quiesce,
    _intc: hca::irq::Intc,
    _nodes: uverbs::node::Nodes,
    _debugfs: debugfs::Debugfs,
    _soft: SoftGuard,
    _reap: work::ReapQueue,
}

impl kernel::Module for Rmlx5Module {
    fn init(module: &'static ThisModule) -> Result<Self> {
        let count = device::check_num_hcas(module_parameters::num_hcas.value())?;
        let comp = match module_parameters::comp_eqs.value() {
            n @ 1..=8 => n as usize,
            n => {
                pr_err!("comp_eqs={} is out of range 1..=8\n", n);
                return Err(EINVAL);
            }
        };
        let reap = work::ReapQueue::new()?;
        // SAFETY: Called once, before anything can use the registry.
        unsafe { ulp::objects::ULP_OBJECTS.init() };
        // SAFETY: Called once, before the PCI driver can probe anything.
        unsafe { cx::registry::CX_FUNCTIONS.init() };
        // SAFETY: Called once, before any device is registered.
        unsafe { mlx5_core::device::DEVICES.init() };
        mlx5_core::device::add_remove_hook(ulp::objects::release_device)?;
        let soft = hca::SoftHca::new(count, comp)?;
        SOFT.store(Arc::into_raw(soft).cast_mut(), Ordering::Release);
        let r = (|| -> Result<Self> {
            let devices = SoftDevices::register(&crate::soft()?, comp)?;
            let nodes = uverbs::node::Nodes::new(count)?;
            let intc = hca::irq::Intc::new(u32::try_from(count)?, u32::try_from(comp + 1)?)?;
            let dbg = debugfs::Debugfs::new(&crate::soft()?)?;
            let drv = KBox::pin_init(driver::Registration::new(c"rmlx5", module), GFP_KERNEL)?;
            // Once the EQ interrupts are bound: ib_core's clients start
            // using the devices during registration.
            #[cfg(CONFIG_INFINIBAND)]
            let ib = if module_parameters::ib_core.value() {
                Some(ibdev::IbDevices::register(count)?)
            } else {
                None
            };
            // Last, so that a function probed at once finds the rest up.
            let cx = if module_parameters::pci.value() {
                Some(KBox::pin_init(
                    driver::Registration::new(c"rmlx5_cx", module),
                    GFP_KERNEL,
                )?)
            } else {
                None
            };
            Ok(Self {
                _cx: cx,
                #[cfg(CONFIG_INFINIBAND)]
                _ib: ib,
                _reclaim: ReclaimUlpObjects,
                _driver: drv,
                _devices: devices,
                _quiesce: Quiesce,
                _intc: intc,
                _nodes: nodes,
                _debugfs: dbg,
                _soft: SoftGuard,
                _reap: reap,
            })
        })();
        match r {
            Ok(m) => {
                pr_info!("registered {} software HCA(s)\n", count);
                Ok(m)
            }
            // The guard was not built: release here.
            Err(e) => {
                release_soft();
                Err(e)
            }
        }
    }
}

fn release_soft() {
    let p = SOFT.swap(::core::ptr::null_mut(), Ordering::AcqRel);
    if !p.is_null() {
        // SAFETY: `p` is the `Arc::into_raw` pointer stored by `init`.
        let soft = unsafe { Arc::from_raw(p) };
        soft.shutdown();
    }
}

/// Destroys the PDs, MRs, CQs and QPs kernel ULPs did not destroy before
/// they unloaded (see `ulp/objects.rs`).
struct ReclaimUlpObjects;

impl Drop for ReclaimUlpObjects {
    fn drop(&mut self) {
        ulp::objects::reclaim();
    }
}

/// The software HCA's instances as devices `rmlx5_0 ..`: registered at
/// init, before the platform driver binds their EQ interrupts;
/// unregistered (dispatchers stopped, EQs destroyed) once those
/// interrupts are freed and before the software HCA stops.
struct SoftDevices {
    count: usize,
}

impl SoftDevices {
    fn register(soft: &Arc<hca::SoftHca>, comp: usize) -> Result<Self> {
        let mut this = Self { count: 0 };
        for i in 0..soft.count() {
            let index = u16::try_from(i)?;
            let geo = mlx5_core::device::Geometry {
                comp_eqs: comp,
                max_cqs: hca::MAX_CQS,
                max_qps: hca::MAX_QPS,
                qpn_base: hca_model::qp::QPN_BASE,
            };
            let dev = mlx5_core::device::Device::new(
                index,
                soft.backend(index)?,
                geo,
                soft.perf.clone(),
            )?;
            if let Err(e) = mlx5_core::device::register(&dev) {
                mlx5_core::device::shut_down(&dev);
                return Err(e);
            }
            this.count += 1;
        }
        Ok(this)
    }
}

impl Drop for SoftDevices {
    fn drop(&mut self) {
        for i in 0..self.count {
            drop(mlx5_core::device::unregister(i));
        }
    }
}

/// Stops the dispatch and engine works once the EQ interrupts are freed
/// and before the interrupt controller goes, so nothing can queue an
/// irq_work into a freed controller.
struct Quiesce;

impl Drop for Quiesce {
    fn drop(&mut self) {
        if let Ok(soft) = soft() {
            soft.shutdown();
        }
    }
}

/// Releases the module's software HCA last: stops its works (the
/// interrupts that queue them are gone by then) and drops the reference.
struct SoftGuard;

impl Drop for SoftGuard {
    fn drop(&mut self) {
        release_soft();
    }
}
