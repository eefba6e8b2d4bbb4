// SPDX-License-Identifier: GPL-2.0

//! The ConnectX PCI backend, first step: a PCI driver for the functions
//! mlx5_core binds, which brings each function up through its command
//! interface the way mlx5_core does (initialization segment, command
//! queue, ENABLE_HCA, ISSI, boot and init pages, HCA capabilities,
//! INIT_HCA, a UAR) and takes it down again on unbind, every page given
//! back before DISABLE_HCA.
//!
//! The command interface itself is `rust/mlx5-cmdif` (the same code the
//! host tests run against `hca-model`'s firmware); this file is only its
//! [`Bus`]: BAR0 registers read and written big-endian, one coherent DMA
//! region for the command queue and its mailboxes, and coherent pages lent
//! to the device. Bring-up's commands complete by polling. After bring-up
//! the function gets its MSI-X vectors and an asynchronous EQ on vector 0
//! ([`eq::PageEq`]): its hard handler wakes the waiters of commands that
//! completed (command EQEs, [`events`]), its threaded handler answers the
//! device's PAGE_REQUEST events. With `cx_selftest=1`, probe then runs a data-path
//! self-test ([`selftest`]: EQ, PD, memory key, CQ and two RC QPs by
//! command, an RDMA WRITE and a SEND between them). Last, the function
//! becomes a verbs device `rmlx5_<n>` ([`attach`]): a [`CxBackend`]
//! (`cx/dev.rs`) under the core's device, with an async EQ and completion
//! EQs made by command on its MSI-X vectors, so that the kernel verbs
//! objects (`ib/`) and the ULP API run on it (see
//! `Documentation/pci-backend.md`).
//!
//! # Locking and lifetimes
//!
//! A function's state (the bus over BAR0, command memory, pages, the
//! command interface and the page EQ) is behind one mutex, which the
//! threaded interrupt handler owns; probe fills it before the interrupt is
//! requested, the handler, the backend's commands and unbind take it.
//! Commands through entry 0 sleep while holding it; the verbs backend's
//! commands that fit a lane hold it only to post and to finish, and wait
//! for the device without it, up to seven at once (`cx/events.rs`).
//! BAR0 and the MSI-X vector allocation must outlive what borrows them in
//! the same driver data (the bus, the interrupt registrations, the
//! backend's doorbells): each lives in its own box ([`Owned`]), declared
//! after its borrowers so that it is freed after them. Unbind first
//! detaches the verbs device ([`detach`]: out of the table, completion
//! interrupts freed, EQs destroyed, backend revoked), then takes the
//! function down.

mod bar;
mod buf;
mod bus;
#[cfg(CONFIG_KUNIT)]
mod cmdif_tests;
mod dev;
mod eq;
pub(crate) mod events;
mod health;
pub(crate) mod registry;
mod selftest;

use core::{
    ptr::NonNull,
    sync::atomic::{
        AtomicBool,
        Ordering, //
    },
};
use kernel::{
    device::{
        Bound,
        Core, //
    },
    device_id::IdArray,
    dma::{
        Device as DmaDevice,
        DmaMask, //
    },
    irq::{
        self,
        IrqReturn,
        ThreadedHandler,
        ThreadedIrqReturn,
        ThreadedRegistration, //
    },
    new_mutex, new_spinlock_irq,
    pci::{
        self,
        IrqType,
        IrqTypes,
        IrqVectorRegistration, //
    },
    prelude::*,
    sync::{
        Arc,
        Mutex,
        SpinLockIrq, //
    },
};

use crate::mlx5_cmdif::{
    cmdif::Timeouts,
    cmdmem::{
        CmdMem,
        CMD_MEM_MAX, //
    },
    function::{
        Config,
        Function,
        Progress, //
    },
};
use crate::mlx5_core::{
    device::{
        Device,
        Geometry, //
    },
    eq::{
        eq_interrupt,
        EqIrq, //
    },
};
use bar::CxBar;
use bus::CxBus;
use dev::CxBackend;
use eq::PageEq;
use events::CmdEvents;
use health::{
    Fatal,
    Monitor,
    Poller, //
};

/// The bring-up's configuration: mlx5_core's timeouts, except the wait
/// for the firmware to accept the initialization segment, which is the
/// `cx_fw_wait_ms` module parameter (default 120 s, as mlx5_core).
fn config() -> Config {
    Config {
        timeouts: Timeouts {
            fw_pre_init_ms: u64::from(crate::module_parameters::cx_fw_wait_ms.value()),
            cmd_ms: u64::from(crate::module_parameters::cx_cmd_timeout_ms.value()).max(1),
            ..Timeouts::MLX5_CORE
        },
        ..Config::default()
    }
}

/// MSI-X vectors asked for: vector 0 for the asynchronous EQ, the rest for
/// the completion EQs to come.
const MAX_VECTORS: u32 = 9;

/// The ConnectX generation a PCI device ID names (the IDs mlx5_core
/// binds; `vf` for the virtual functions).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Model {
    /// Marketing name, for the log.
    name: &'static str,
    /// A virtual function.
    vf: bool,
}

impl Model {
    const fn pf(name: &'static str) -> Self {
        Self { name, vf: false }
    }

    const fn vf(name: &'static str) -> Self {
        Self { name, vf: true }
    }
}

/// The functions the driver knows, the IDs mlx5_core binds (vendor
/// 0x15b3): device ID and model.
static MODELS: [(u16, Model); 13] = [
    (0x1013, Model::pf("ConnectX-4")),
    (0x1014, Model::vf("ConnectX-4")),
    (0x1015, Model::pf("ConnectX-4 Lx")),
    (0x1016, Model::vf("ConnectX-4 Lx")),
    (0x1017, Model::pf("ConnectX-5")),
    (0x1018, Model::vf("ConnectX-5")),
    (0x1019, Model::pf("ConnectX-5 Ex")),
    (0x101a, Model::vf("ConnectX-5 Ex")),
    (0x101b, Model::pf("ConnectX-6")),
    (0x101c, Model::vf("ConnectX-6")),
    (0x101d, Model::pf("ConnectX-6 Dx")),
    (0x101e, Model::vf("ConnectX family")),
    (0x1021, Model::pf("ConnectX-7")),
];

/// [`MODELS`] as the PCI driver's ID table.
///
/// Deliberately not a module device table (`pci_device_table!` exports
/// one): modpost would turn it into `alias pci:v000015B3d00001017...`
/// lines, and udev would load rmlx5 for every ConnectX in the machine next
/// to mlx5_core, the two racing for each NIC. rmlx5 takes a function only
/// when a tester names it through its `driver_override` (see
/// [`named_for_us`] and Documentation/pci.md).
static CX_TABLE: IdArray<pci::DeviceId, Model, 13> = IdArray::new(cx_ids());

const fn cx_ids() -> [(pci::DeviceId, &'static Model); 13] {
    let mut ids = [(
        pci::DeviceId::from_id(pci::Vendor::MELLANOX, 0),
        &MODELS[0].1,
    ); 13];
    let mut i = 0;
    while i < MODELS.len() {
        ids[i] = (
            pci::DeviceId::from_id(pci::Vendor::MELLANOX, MODELS[i].0 as u32),
            &MODELS[i].1,
        );
        i += 1;
    }
    ids
}

/// Whether `pdev` was handed to rmlx5 through its `driver_override`. The
/// PCI core offers the driver every unbound function of `CX_TABLE`, but
/// binds a function whose override names another driver to that driver
/// only, so an override set here names `rmlx5_cx`.
fn named_for_us(pdev: &pci::Device<Core<'_>>) -> bool {
    // SAFETY: `pdev` is a live PCI device for the duration of the call.
    unsafe { rmlx5_pci_has_driver_override(raw_device(pdev)) }
}

/// The model of `pdev` if its vendor and device IDs are in `CX_TABLE` (a
/// `driver_override` also binds functions the table does not list).
fn model_of(pdev: &pci::Device<Core<'_>>) -> Option<Model> {
    if pdev.vendor_id() != pci::Vendor::MELLANOX {
        return None;
    }
    MODELS
        .iter()
        .find(|(id, _)| *id == pdev.device_id())
        .map(|(_, m)| *m)
}

/// The C `struct device` of `pdev`, for the shim (`device::Device`
/// wraps it transparently).
fn raw_device(pdev: &pci::Device<Core<'_>>) -> *mut kernel::ffi::c_void {
    let dev: &kernel::device::Device<Core<'_>> = pdev.as_ref();
    core::ptr::from_ref(dev)
        .cast::<kernel::ffi::c_void>()
        .cast_mut()
}

/// The C `struct device` of a bound `pdev`, for the shim.
fn raw_bound(pdev: &pci::Device<Bound>) -> *mut kernel::ffi::c_void {
    let dev: &kernel::device::Device<Bound> = pdev.as_ref();
    core::ptr::from_ref(dev)
        .cast::<kernel::ffi::c_void>()
        .cast_mut()
}

/// Keeps the function enabled with bus mastering on while bound: dropped
/// last (the last field of [`CxFunction`]), it turns bus mastering off
/// and disables the function, after unbind or a failed probe.
struct PciEnabled(*mut kernel::ffi::c_void);

impl PciEnabled {
    fn new(pdev: &pci::Device<Core<'_>>) -> Result<Self> {
        pdev.enable_device_mem()?;
        pdev.set_master();
        Ok(Self(raw_device(pdev)))
    }
}

impl Drop for PciEnabled {
    fn drop(&mut self) {
        // SAFETY: The driver data holding this guard is dropped while the
        // device is still bound (after `unbind`, or on a failed probe), so
        // the device is live; it was enabled by `PciEnabled::new`.
        unsafe { rmlx5_pci_disable(self.0) };
    }
}

// SAFETY: The pointer is only passed to the PCI core, from any thread.
unsafe impl Send for PciEnabled {}
// SAFETY: `&PciEnabled` offers nothing.
unsafe impl Sync for PciEnabled {}

extern "C" {
    fn rmlx5_pci_has_driver_override(dev: *mut kernel::ffi::c_void) -> bool;
    fn rmlx5_pci_disable(dev: *mut kernel::ffi::c_void);
}

/// The PCI driver of ConnectX functions.
pub(crate) struct CxDriver;

/// A bound ConnectX function.
#[pin_data]
pub(crate) struct CxFunction<'bound> {
    /// The health poll (`cx/health.rs`), while the function is up.
    /// Declared first: dropped (the poll stopped) before anything it
    /// looks at.
    #[pin]
    health: Mutex<Option<Poller<'bound>>>,
    model: Model,
    /// The function as a verbs device, while it is one.
    #[pin]
    device: Mutex<Option<Attached>>,
    /// The interrupts of the completion EQs on vectors 1 and up; dropped
    /// (free_irq) before the EQs are destroyed.
    #[pin]
    comp: Mutex<KVec<Pin<KBox<irq::Registration<'bound, EqIrq>>>>>,
    /// The asynchronous EQ's threaded interrupt; its handler owns the
    /// function's state. Declared before `vectors` and `bar`, so dropped
    /// (free_irq) before them.
    #[pin]
    irq: ThreadedRegistration<'bound, AsyncIrq<'bound>>,
    /// The MSI-X vectors `irq` and `comp` borrow.
    vectors: Owned<IrqVectorRegistration<'bound>>,
    /// BAR0, which the state's bus and the backend's doorbells borrow.
    bar: Owned<CxBar>,
    /// The function enabled, bus mastering on: set first, dropped last.
    enabled: PciEnabled,
}

/// A function's verbs device: `rmlx5_<index>` over `backend`.
struct Attached {
    index: u16,
    backend: Arc<CxBackend>,
    /// `/dev/rmlx5_uverbs<index>`, once the device is in the table.
    node: Option<Pin<KBox<crate::uverbs::node::Node>>>,
}

/// A value in its own allocation, so that other fields of the same driver
/// data can borrow it for `'bound`.
///
/// # Invariants
///
/// `0` comes from `KBox::into_raw` and is freed only by `drop`.
struct Owned<T>(NonNull<T>);

// SAFETY: `Owned<T>` owns its `T` like a `KBox<T>` does.
unsafe impl<T: Send> Send for Owned<T> {}
// SAFETY: As above: shared access is to the `T`.
unsafe impl<T: Sync> Sync for Owned<T> {}

impl<T> Owned<T> {
    fn new(v: T) -> Result<Self> {
        let raw = KBox::into_raw(KBox::new(v, GFP_KERNEL)?);
        // INVARIANT: `raw` comes from `KBox::into_raw`.
        // SAFETY: `KBox::into_raw` never returns null.
        Ok(Self(unsafe { NonNull::new_unchecked(raw) }))
    }

    /// The value, for a field of the same driver data.
    ///
    /// # Safety
    ///
    /// What borrows the result must be dropped before `self`.
    unsafe fn get<'a>(&self) -> &'a T {
        // SAFETY: The box lives until `self` drops (type invariant), which
        // the caller orders after every borrow.
        unsafe { &*self.0.as_ptr() }
    }
}

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        // SAFETY: The pointer is the box's (type invariant), and every
        // borrow from `get` is gone (its safety requirement).
        drop(unsafe { KBox::from_raw(self.0.as_ptr()) });
    }
}

/// Allocates between 1 and [`MAX_VECTORS`] MSI-X vectors of `pdev`.
fn alloc_vectors<'bound>(
    pdev: &'bound pci::Device<Bound>,
) -> Result<Owned<IrqVectorRegistration<'bound>>> {
    Owned::new(pdev.alloc_irq_vectors(1, MAX_VECTORS, IrqTypes::default().with(IrqType::MsiX))?)
}

/// What the function's mutex protects.
pub(crate) struct State<'bound> {
    bus: CxBus<'bound>,
    function: Function,
    /// The asynchronous EQ, while it exists.
    eq: Option<PageEq>,
}

/// The handler of vector 0: in hard-IRQ context the core's EQs on vector
/// 0 (the device's async EQ, and the completion EQ when there is only one
/// vector) and the function's page EQ, whose command events wake their
/// waiters there and then (`cx/events.rs`); in its thread, the page
/// requests, answered with MANAGE_PAGES.
///
/// The thread takes the function's mutex, which a command through entry 0
/// holds for as long as the device takes (up to the 60-second command
/// timeout). So the hard handler consumes and re-arms the page EQ itself
/// and wakes the thread only for page requests, once. An interrupt whose
/// EQEs the hard handler consumed is handled there and then; were it
/// passed to a thread stuck behind the mutex, the IRQ core would count it
/// unhandled, and with one vector, where every completion arrives, 100,000
/// of them would have the line disabled ("nobody cared").
#[pin_data]
struct AsyncIrq<'bound> {
    #[pin]
    state: Mutex<State<'bound>>,
    /// The verbs device and the positions of its EQs on vector 0.
    #[pin]
    core: SpinLockIrq<Option<(Arc<Device>, KVec<usize>)>>,
    /// The hard handler consumed EQEs for itself (the core's EQs, command
    /// events).
    core_handled: AtomicBool,
    /// The page EQ's consumer and the command events.
    events: Arc<CmdEvents>,
    /// BAR0, where the page EQ is re-armed.
    bar: &'bound CxBar,
    /// The thread was woken and has not taken its work yet.
    thread_woken: AtomicBool,
}

impl ThreadedHandler for AsyncIrq<'_> {
    fn handle(&self) -> ThreadedIrqReturn {
        let mut core = false;
        if let Some((dev, positions)) = &*self.core.lock() {
            for &p in positions.iter() {
                if eq_interrupt(dev, p).unwrap_or(false) {
                    core = true;
                }
            }
        }
        let (consumed, requests) = self.events.consume(self.bar);
        core |= consumed > 0;
        if requests && !self.thread_woken.swap(true, Ordering::AcqRel) {
            if core {
                self.core_handled.store(true, Ordering::Relaxed);
            }
            return ThreadedIrqReturn::WakeThread;
        }
        if core {
            ThreadedIrqReturn::Handled
        } else {
            ThreadedIrqReturn::None
        }
    }

    fn handle_threaded(&self) -> IrqReturn {
        let mut st = self.state.lock();
        // From here a request the answer below does not see wakes the
        // thread again.
        self.thread_woken.store(false, Ordering::Release);
        let State { bus, function, eq } = &mut *st;
        let answered = eq.as_mut().map_or(0, |eq| eq.answer(bus, function));
        if answered > 0 || self.core_handled.swap(false, Ordering::Relaxed) {
            IrqReturn::Handled
        } else {
            IrqReturn::None
        }
    }
}

impl pci::Driver for CxDriver {
    type IdInfo = Model;
    type Data<'bound> = CxFunction<'bound>;

    const ID_TABLE: pci::IdTable<Self::IdInfo> = &CX_TABLE;

    fn probe<'bound>(
        pdev: &'bound pci::Device<Core<'_>>,
        info: Option<&'bound Self::IdInfo>,
    ) -> impl PinInit<Self::Data<'bound>, Error> + 'bound {
        let _ = info;
        // Fields are set in this order; if a later step fails, those set
        // are dropped in reverse (free_irq, the vectors, the BAR, then the
        // function is disabled).
        try_pin_init!(CxFunction {
            health <- new_mutex!(None, "rmlx5_cx_health"),
            enabled: {
                if !named_for_us(pdev) {
                    dev_info!(
                        pdev.as_ref(),
                        "left alone: rmlx5 takes a function only when its driver_override names rmlx5_cx (Documentation/pci.md)\n"
                    );
                    return Err(ENODEV);
                }
                // A function written off after a failure is reset before
                // it may reach memory again.
                health::reset_if_written_off(pdev)?;
                PciEnabled::new(pdev)?
            },
            model: match model_of(pdev) {
                Some(m) => m,
                None => {
                    dev_err!(
                        pdev.as_ref(),
                        "{:04x}:{:04x} is not a ConnectX function rmlx5 knows\n",
                        pdev.vendor_id().as_raw(),
                        pdev.device_id()
                    );
                    return Err(ENODEV);
                }
            },
            bar: map_function(pdev)
                .and_then(|()| Owned::new(CxBar::new(pdev, raw_device(pdev))?))?,
            vectors: alloc_vectors(pdev)?,
            device <- new_mutex!(None, "rmlx5_cx_device"),
            comp <- new_mutex!(KVec::new(), "rmlx5_cx_comp"),
            irq <- {
                // SAFETY: `irq` is declared before `vectors` and `bar` in
                // `CxFunction` and so dropped first; on an error below,
                // pin-init drops the fields set so far in reverse order.
                let (reg, bar) = unsafe { (vectors.get(), bar.get()) };
                let request = reg.index(0)?;
                let events = CmdEvents::new()?;
                let state = State {
                    bus: CxBus::new(pdev, bar, Fatal::new()?, events.clone())?,
                    function: Function::new(
                        CmdMem {
                            addr: 0,
                            len: 0,
                        },
                        config(),
                    ),
                    eq: None,
                };
                // SAFETY: The registration is stored in the driver data
                // and dropped with it, never forgotten.
                unsafe {
                    ThreadedRegistration::new(
                        request.into(),
                        irq::Flags::TRIGGER_NONE,
                        c"rmlx5_cx_async",
                        try_pin_init!(AsyncIrq {
                            state <- new_mutex!(state, "rmlx5_cx_function"),
                            core <- new_spinlock_irq!(None, "rmlx5_cx_core"),
                            core_handled: AtomicBool::new(false),
                            events,
                            bar,
                            thread_woken: AtomicBool::new(false),
                        }),
                    )
                }
            },
            _: {
                let uar = {
                    let mut st = irq.handler().state.lock();
                    let uar = bring_up(pdev, *model, &mut st)?;
                    if crate::module_parameters::cx_selftest.value() {
                        // SAFETY: The borrow ends with the self-test, before
                        // this block does.
                        let reg = unsafe { vectors.get() };
                        self_test(pdev, *model, &mut st, reg)?;
                    }
                    uar
                };
                // SAFETY: `comp` and `irq` borrow the vectors and are
                // dropped before them (declaration order); the backend's
                // links to the BAR and the state are revoked before either
                // goes (`detach`, at unbind and below).
                let (reg, bar) = unsafe { (vectors.get(), bar.get()) };
                if let Err(e) = attach(pdev, &irq, &comp, &device, reg, bar, uar) {
                    let backend = detach(pdev, &irq, &comp, &device);
                    shut(pdev, *model, &irq, backend.as_deref());
                    return Err(e);
                }
                // SAFETY: `health` is declared first in `CxFunction`, so
                // its poller stops before `irq` drops; unbind stops it
                // before anything else.
                if let Err(e) = unsafe { start_health(pdev, bar, irq.handler(), &health) } {
                    dev_warn!(pdev, "no health poll: error {}\n", e.to_errno());
                }
            },
        })
    }

    fn unbind<'bound>(pdev: &'bound pci::Device<Core<'_>>, this: Pin<&Self::Data<'bound>>) {
        // The poll stops first: nothing it does may race the way down,
        // and a failure it finds meanwhile must not bind the function
        // again.
        let poller = this.health.lock().take();
        if let Some(p) = &poller {
            p.stop_recovery();
        }
        drop(poller);
        let backend = detach(pdev, &this.irq, &this.comp, &this.device);
        shut(pdev, this.model, &this.irq, backend.as_deref());
    }
}

/// Starts the health poll of a function that is up (every `cx_health_ms`,
/// never if 0), which also takes the PCI core's error and reset callbacks.
///
/// # Safety
///
/// `irq` must outlive what is stored in `health`.
unsafe fn start_health<'bound>(
    pdev: &'bound pci::Device<Bound>,
    bar: &'bound CxBar,
    irq: &AsyncIrq<'bound>,
    health: &Mutex<Option<Poller<'bound>>>,
) -> Result {
    // With cx_health_ms=0 nothing polls, but the PCI core's callbacks
    // still reach the monitor.
    let ms = crate::module_parameters::cx_health_ms.value();
    let (fatal, cmdq) = {
        let st = irq.state.lock();
        (st.bus.fatal_flag().clone(), st.bus.cmd_mem_addr())
    };
    // SAFETY: Guaranteed by the caller.
    let monitor = unsafe { Monitor::new(pdev, bar, irq, fatal, cmdq) };
    *health.lock() = Some(Poller::start(monitor, ms)?);
    if ms > 0 {
        dev_info!(pdev, "health poll every {} ms\n", ms);
    }
    Ok(())
}

/// Takes the function down and, if it was a verbs device, cuts its
/// backend from it in the same section (see `CxBackend::revoke_after`).
fn shut<'bound>(
    pdev: &pci::Device<Bound>,
    model: Model,
    irq: &ThreadedRegistration<'bound, AsyncIrq<'bound>>,
    backend: Option<&CxBackend>,
) {
    let down = || {
        let mut st = irq.handler().state.lock();
        take_down(pdev, model, &mut st);
        st.function.progress() == Progress::default()
    };
    match backend {
        Some(b) => b.revoke_after(down),
        None => {
            down();
        }
    }
}

/// Makes a function that is up a verbs device: the backend over its
/// state and BAR, the device `rmlx5_<n>` with its EQs made by command (the
/// async EQ and the completion EQs, on vectors 1 and up, or all on vector
/// 0 if that is the only one), their interrupts, and the entry in the
/// table of devices.
#[allow(clippy::too_many_arguments)]
fn attach<'bound>(
    pdev: &pci::Device<Bound>,
    irq: &ThreadedRegistration<'bound, AsyncIrq<'bound>>,
    comp: &Mutex<KVec<Pin<KBox<irq::Registration<'bound, EqIrq>>>>>,
    device: &Mutex<Option<Attached>>,
    vectors: &'bound IrqVectorRegistration<'bound>,
    bar: &CxBar,
    uar: u32,
) -> Result {
    let nvec = u16::try_from(vectors.len()).unwrap_or(u16::MAX);
    let comp_eqs = usize::from(nvec.saturating_sub(1)).clamp(1, crate::hca::MAX_COMP_EQS);
    let index = crate::mlx5_core::device::reserve_index(crate::soft()?.count())?;
    let (fatal, live) = {
        let st = irq.handler().state.lock();
        (st.bus.fatal_flag().clone(), st.bus.live().clone())
    };
    // SAFETY: `shut` revokes the backend before the state and the BAR go:
    // at unbind, and on every error path of probe after this call.
    let backend =
        match unsafe { CxBackend::new(pdev, &irq.handler().state, bar, uar, nvec, fatal, live) } {
            Ok(b) => b,
            Err(e) => {
                crate::mlx5_core::device::release_index(usize::from(index));
                return Err(e);
            }
        };
    // The port as the firmware reports it; the LID in every address
    // vector to it is this one.
    match backend.query_port() {
        Ok(p) => dev_info!(
            pdev,
            "port 1: LID {}, SM LID {}, state {}, node GUID {:016x}, port GUID {:016x}, GID prefix {:016x}\n",
            p.lid,
            p.sm_lid,
            p.state,
            p.node_guid,
            p.port_guid,
            p.subnet_prefix
        ),
        Err(e) => dev_warn!(pdev, "port 1 not queried: error {}\n", e.to_errno()),
    }
    // From here `detach` undoes whatever was done.
    *device.lock() = Some(Attached {
        index,
        backend: backend.clone(),
        node: None,
    });
    // Vector 0's handler takes the EQs that have no vector of their own:
    // the async EQ (position 0) and completion EQs past the last vector.
    let mut on_zero = KVec::with_capacity(comp_eqs + 1, GFP_KERNEL)?;
    for p in 0..=comp_eqs {
        if backend.vector_of(u16::try_from(p)?) == 0 {
            on_zero.push(p, GFP_KERNEL)?;
        }
    }
    let geo = Geometry {
        comp_eqs,
        max_cqs: crate::hca::MAX_CQS,
        max_qps: crate::hca::MAX_QPS,
        qpn_base: crate::hca_model::qp::QPN_BASE,
    };
    let perf = Arc::new(crate::perf::Perf::new(), GFP_KERNEL)?;
    // Nothing fails between the EQs' creation and the hook through which
    // `detach` destroys them.
    let dev = Device::new(index, backend.clone(), geo, perf)?;
    *irq.handler().core.lock() = Some((dev.clone(), on_zero));
    {
        let mut regs = comp.lock();
        for (p, eq) in dev.eqs.iter().enumerate() {
            let v = backend.vector_of(eq.vector);
            if v == 0 {
                continue;
            }
            let request = vectors.index(usize::from(v))?;
            let handler = Ok::<_, Error>(EqIrq {
                dev: dev.clone(),
                vector: p,
            });
            // SAFETY: The registration is kept in the driver data and
            // dropped at unbind (or below, on error), never forgotten.
            let reg = unsafe {
                irq::Registration::new(
                    request.into(),
                    irq::Flags::TRIGGER_NONE,
                    c"rmlx5_cx_comp",
                    handler,
                )
            };
            regs.push(KBox::pin_init(reg, GFP_KERNEL)?, GFP_KERNEL)?;
        }
    }
    for p in 0..dev.eqs.len() {
        dev.arm_eq(p)?;
    }
    crate::mlx5_core::device::register(&dev)?;
    registry::set_verbs(pdev, Some(index));
    // For user space (uverbs); the device works without.
    match crate::uverbs::node::Node::new(usize::from(index)) {
        Ok(node) => {
            // Its open contexts hear of a failure of the function.
            let listener: Arc<dyn crate::mlx5_core::device::FatalListener> = node.users().clone();
            dev.set_fatal_listener(Some(listener));
            if let Some(a) = &mut *device.lock() {
                a.node = Some(node);
            }
            dev_info!(pdev, "rmlx5_{}: /dev/rmlx5_uverbs{}\n", index, index);
        }
        Err(e) => dev_warn!(
            pdev,
            "rmlx5_{}: no uverbs device node: error {}\n",
            index,
            e.to_errno()
        ),
    }
    // For ULPs of the generic ib_* API too; the device works without.
    #[cfg(CONFIG_INFINIBAND)]
    if crate::module_parameters::ib_core.value() {
        match crate::ibdev::add_pci(index, pdev) {
            Ok(()) => dev_info!(pdev, "rmlx5_{}: registered with ib_core\n", index),
            Err(e) => dev_warn!(
                pdev,
                "rmlx5_{}: not registered with ib_core: error {}\n",
                index,
                e.to_errno()
            ),
        }
    }
    dev_info!(
        pdev,
        "rmlx5_{}: verbs device, async EQ {} and {} completion EQ(s) on MSI-X vector(s) {}..{}\n",
        index,
        dev.eqs.first().map_or(0, |e| e.eqn),
        comp_eqs,
        backend.vector_of(1),
        backend.vector_of(u16::try_from(comp_eqs).unwrap_or(0))
    );
    Ok(())
}

/// Undoes [`attach`], whatever part of it was done: the device leaves the
/// table of devices, the completion interrupts are freed and its EQs are
/// destroyed. Returns the backend, which [`shut`] cuts from the function
/// as it takes it down; objects still created on it then fail or do
/// nothing (see `cx/dev.rs`).
fn detach<'bound>(
    pdev: &pci::Device<Bound>,
    irq: &ThreadedRegistration<'bound, AsyncIrq<'bound>>,
    comp: &Mutex<KVec<Pin<KBox<irq::Registration<'bound, EqIrq>>>>>,
    device: &Mutex<Option<Attached>>,
) -> Option<Arc<CxBackend>> {
    let mut a = device.lock().take()?;
    // No new user context; those open are disassociated: their objects
    // are destroyed and their UAR pages (pages of this BAR) leave their
    // processes while the function still runs.
    if let Some(node) = a.node.take() {
        let users = node.users().clone();
        drop(node);
        users.disassociate(a.index);
    }
    // ib_core's clients destroy their objects while the device still
    // runs; then no new user finds the device, and the layers above
    // release what their users still hold on it.
    #[cfg(CONFIG_INFINIBAND)]
    crate::ibdev::remove_pci(a.index);
    registry::set_verbs(pdev, None);
    let _ = crate::mlx5_core::device::take(usize::from(a.index));
    crate::mlx5_core::device::run_remove_hooks(a.index);
    // free_irq waits for running handlers; vector 0's hard handler
    // finishes with the device under its lock.
    comp.lock().clear();
    let dev = irq.handler().core.lock().take().map(|(d, _)| d);
    if let Some(dev) = dev {
        crate::mlx5_core::device::shut_down(&dev);
        dev_info!(pdev, "rmlx5_{}: verbs device removed\n", dev.index);
    }
    crate::mlx5_core::device::release_index(usize::from(a.index));
    Some(a.backend)
}

/// Sets the function's DMA mask (before anything is allocated for it; the
/// function is enabled by [`PciEnabled`]).
fn map_function(pdev: &pci::Device<Core<'_>>) -> Result {
    // SAFETY: Called in probe, before any DMA allocation or mapping of
    // this device.
    unsafe { pdev.dma_set_mask_and_coherent(DmaMask::new::<64>()) }
}

/// Brings the function up, then creates and arms its asynchronous EQ on
/// vector 0; on failure undoes what was done. Returns the driver's UAR
/// page.
fn bring_up(pdev: &pci::Device<Bound>, model: Model, st: &mut State<'_>) -> Result<u32> {
    let State { bus, function, eq } = st;
    // From here the device may hold the command memory.
    bus.set_quiesced(false);
    *function = Function::new(
        CmdMem {
            addr: bus.cmd_mem_addr(),
            len: CMD_MEM_MAX,
        },
        config(),
    );
    let s = match function.bring_up(bus) {
        Ok(s) => s,
        Err(e) => {
            // The crate's errors are `core::fmt::Display`; the log macros
            // take the kernel's `Display`, which `Arguments` has.
            dev_err!(
                pdev,
                "{} bring-up failed: {}\n",
                model.name,
                format_args!("{e}")
            );
            take_down(pdev, model, st);
            return Err(Error::from_errno(-e.errno()));
        }
    };
    dev_info!(
        pdev,
        "{}{} up: firmware {}.{}.{}, command interface {}, ISSI {}, {} boot + {} init pages, UAR {}\n",
        model.name,
        if model.vf { " VF" } else { "" },
        s.fw_rev.major,
        s.fw_rev.minor,
        s.fw_rev.subminor,
        s.cmdif_rev,
        s.issi,
        s.boot_pages,
        s.init_pages,
        s.uar
    );
    dev_info!(
        pdev,
        "capabilities: 2^{} QPs, 2^{} CQs, 2^{} EQs, 2^{} PDs, 2^{} memory keys, {} port(s)\n",
        s.log_max_qp,
        s.log_max_cq,
        s.log_max_eq,
        s.log_max_pd,
        s.log_max_mkey,
        s.num_ports
    );
    registry::record(pdev, model, &s);
    // The driver's UAR page, mapped uncached for the EQ and CQ doorbells
    // and the kernel's BlueFlame registers (cx/bar.rs).
    if let Err(e) = bus.map_uar(s.uar) {
        dev_err!(pdev, "cannot map UAR page {}: {:?}\n", s.uar, e);
        take_down(pdev, model, st);
        return Err(e);
    }
    match PageEq::create(bus, function, s.uar, 0) {
        Ok(e) => {
            e.arm(bus.bar());
            dev_info!(
                pdev,
                "async EQ {} on MSI-X vector 0{}\n",
                e.eqn(),
                if e.cmd_events() {
                    ", commands completed by event"
                } else {
                    ""
                }
            );
            *eq = Some(e);
            Ok(s.uar)
        }
        Err(e) => {
            take_down(pdev, model, st);
            Err(e)
        }
    }
}

/// Runs the data-path self-test (`cx_selftest=1`, see `cx/selftest.rs`)
/// with the function's lock held; a failure tears the function down and
/// fails the probe.
fn self_test(
    pdev: &pci::Device<Bound>,
    model: Model,
    st: &mut State<'_>,
    vectors: &IrqVectorRegistration<'_>,
) -> Result {
    let State { bus, function, eq } = &mut *st;
    let Some(uar) = function.progress().uar else {
        return Err(ENODEV);
    };
    match selftest::run(bus, function, eq.as_mut(), uar, vectors) {
        Ok(()) => Ok(()),
        Err(e) => {
            dev_err!(pdev, "self-test failed: error {}\n", e.to_errno());
            take_down(pdev, model, st);
            Err(e)
        }
    }
}

/// Destroys the asynchronous EQ and tears the function down, logging the
/// outcome. Pages the device keeps stay allocated (see `CxBus`).
fn take_down(pdev: &pci::Device<Bound>, model: Model, st: &mut State<'_>) {
    registry::forget(pdev);
    let State { bus, function, eq } = st;
    health::at_take_down(pdev, bus.fatal_flag());
    if bus.is_fatal() {
        // The health poll failed the function and stopped its DMA:
        // nothing is sent to it, everything is written off and freed.
        function.enter_error();
    }
    if let Some(e) = eq.take() {
        let (requests, moved) = (e.requests, e.pages_moved);
        if e.destroy(bus, function).is_ok() {
            dev_info!(
                pdev,
                "async EQ destroyed after {} page request(s), {} page(s) moved\n",
                requests,
                moved
            );
        }
    }
    let down = function.teardown(bus);
    let released = bus.release_pages_of_failed();
    bus.set_quiesced(function.progress() == Progress::default());
    match down {
        Ok(()) if bus.is_fatal() => dev_info!(
            pdev,
            "{} written off after its failure: {} page(s) freed with its DMA stopped\n",
            model.name,
            released
        ),
        Ok(()) => dev_info!(
            pdev,
            "{} down, every page returned ({} in all)\n",
            model.name,
            function.pages().returned_total()
        ),
        Err(e) => dev_err!(pdev, "{} teardown: {}\n", model.name, format_args!("{e}")),
    }
}
