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
//! to the device. Commands complete by polling. After bring-up the function
//! gets its MSI-X vectors and an asynchronous EQ on vector 0
//! ([`eq::PageEq`]) whose threaded interrupt handler answers the device's
//! PAGE_REQUEST events. With `cx_selftest=1`, probe then runs a data-path
//! self-test ([`selftest`]: EQ, PD, memory key, CQ and two RC QPs by
//! command, an RDMA WRITE and a SEND between them). Completion EQs and the
//! verbs objects come next (see `Documentation/pci-backend.md`), so a
//! function that came up is not yet an `rmlx5_N` device.
//!
//! # Locking and lifetimes
//!
//! A function's state (BAR0, command memory, pages, the command interface
//! and the EQ) is behind one mutex, which the threaded interrupt handler
//! owns; probe fills it before the interrupt is requested, the handler and
//! unbind take it. Commands sleep while holding it (one command at a time
//! per function). The MSI-X vector allocation must outlive the interrupt
//! registration that borrows it, in the same driver data: it lives in its
//! own box ([`Vectors`]), declared after the registration so that it is
//! freed after `free_irq`.

mod buf;
mod bus;
#[cfg(CONFIG_KUNIT)]
mod cmdif_tests;
mod eq;
pub(crate) mod registry;
mod selftest;

use core::ptr::NonNull;
use kernel::{
    device::{
        Bound,
        Core, //
    },
    dma::{
        Device as DmaDevice,
        DmaMask, //
    },
    irq::{
        self,
        IrqReturn,
        ThreadedHandler,
        ThreadedRegistration, //
    },
    new_mutex,
    pci::{
        self,
        IrqType,
        IrqTypes,
        IrqVectorRegistration, //
    },
    prelude::*,
    sync::Mutex, //
};

use crate::mlx5_cmdif::{
    cmdif::Timeouts,
    cmdmem::{
        CmdMem,
        CMD_MEM_SIZE, //
    },
    function::{
        Config,
        Function,
        Progress, //
    },
};
use bus::CxBus;
use eq::PageEq;

/// The bring-up's configuration: mlx5_core's timeouts, except the wait
/// for the firmware to accept the initialization segment, which is the
/// `cx_fw_wait_ms` module parameter (default 120 s, as mlx5_core).
fn config() -> Config {
    Config {
        timeouts: Timeouts {
            fw_pre_init_ms: u64::from(crate::module_parameters::cx_fw_wait_ms.value()),
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

kernel::pci_device_table!(
    CX_TABLE,
    <CxDriver as pci::Driver>::IdInfo,
    [
        (
            pci::DeviceId::from_id(pci::Vendor::MELLANOX, 0x1013),
            Model::pf("ConnectX-4")
        ),
        (
            pci::DeviceId::from_id(pci::Vendor::MELLANOX, 0x1014),
            Model::vf("ConnectX-4")
        ),
        (
            pci::DeviceId::from_id(pci::Vendor::MELLANOX, 0x1015),
            Model::pf("ConnectX-4 Lx")
        ),
        (
            pci::DeviceId::from_id(pci::Vendor::MELLANOX, 0x1016),
            Model::vf("ConnectX-4 Lx")
        ),
        (
            pci::DeviceId::from_id(pci::Vendor::MELLANOX, 0x1017),
            Model::pf("ConnectX-5")
        ),
        (
            pci::DeviceId::from_id(pci::Vendor::MELLANOX, 0x1018),
            Model::vf("ConnectX-5")
        ),
        (
            pci::DeviceId::from_id(pci::Vendor::MELLANOX, 0x1019),
            Model::pf("ConnectX-5 Ex")
        ),
        (
            pci::DeviceId::from_id(pci::Vendor::MELLANOX, 0x101a),
            Model::vf("ConnectX-5 Ex")
        ),
        (
            pci::DeviceId::from_id(pci::Vendor::MELLANOX, 0x101b),
            Model::pf("ConnectX-6")
        ),
        (
            pci::DeviceId::from_id(pci::Vendor::MELLANOX, 0x101c),
            Model::vf("ConnectX-6")
        ),
        (
            pci::DeviceId::from_id(pci::Vendor::MELLANOX, 0x101d),
            Model::pf("ConnectX-6 Dx")
        ),
        (
            pci::DeviceId::from_id(pci::Vendor::MELLANOX, 0x101e),
            Model::vf("ConnectX family")
        ),
        (
            pci::DeviceId::from_id(pci::Vendor::MELLANOX, 0x1021),
            Model::pf("ConnectX-7")
        ),
    ]
);

/// The PCI driver of ConnectX functions.
pub(crate) struct CxDriver;

/// A bound ConnectX function.
#[pin_data]
pub(crate) struct CxFunction<'bound> {
    model: Model,
    /// The asynchronous EQ's threaded interrupt; its handler owns the
    /// function's state. Declared before `vectors`, so dropped (free_irq)
    /// before them.
    #[pin]
    irq: ThreadedRegistration<'bound, AsyncIrq<'bound>>,
    /// The MSI-X vectors `irq` borrows.
    vectors: Vectors<'bound>,
}

/// The MSI-X vector allocation, boxed so that the interrupt registration
/// beside it in the driver data can borrow it.
///
/// # Invariants
///
/// `0` comes from `KBox::into_raw` and is freed only by `drop`.
struct Vectors<'bound>(NonNull<IrqVectorRegistration<'bound>>);

// SAFETY: `IrqVectorRegistration` only refers to the bound device; the
// vectors may be freed from any thread.
unsafe impl Send for Vectors<'_> {}

impl<'bound> Vectors<'bound> {
    /// Allocates between 1 and [`MAX_VECTORS`] MSI-X vectors of `pdev`.
    fn alloc(pdev: &'bound pci::Device<Bound>) -> Result<Self> {
        let v = pdev.alloc_irq_vectors(1, MAX_VECTORS, IrqTypes::default().with(IrqType::MsiX))?;
        let raw = KBox::into_raw(KBox::new(v, GFP_KERNEL)?);
        // INVARIANT: `raw` comes from `KBox::into_raw`.
        // SAFETY: `KBox::into_raw` never returns null.
        Ok(Self(unsafe { NonNull::new_unchecked(raw) }))
    }

    /// The allocation, for the interrupt registration of the same
    /// [`CxFunction`].
    ///
    /// # Safety
    ///
    /// What borrows the result must be dropped before `self`.
    unsafe fn get(&self) -> &'bound IrqVectorRegistration<'bound> {
        // SAFETY: The box lives until `self` drops (type invariant), which
        // the caller orders after every borrow.
        unsafe { &*self.0.as_ptr() }
    }
}

impl Drop for Vectors<'_> {
    fn drop(&mut self) {
        // SAFETY: The pointer is the box's (type invariant), and every
        // borrow from `get` is gone (its safety requirement); this frees
        // the vectors (pci_free_irq_vectors).
        drop(unsafe { KBox::from_raw(self.0.as_ptr()) });
    }
}

/// What the function's mutex protects.
struct State<'bound> {
    bus: CxBus<'bound>,
    function: Function,
    /// The asynchronous EQ, while it exists.
    eq: Option<PageEq>,
}

/// The threaded handler of vector 0: polls the asynchronous EQ.
#[pin_data]
struct AsyncIrq<'bound> {
    #[pin]
    state: Mutex<State<'bound>>,
}

impl ThreadedHandler for AsyncIrq<'_> {
    fn handle_threaded(&self) -> IrqReturn {
        let mut st = self.state.lock();
        let State { bus, function, eq } = &mut *st;
        let consumed = eq.as_mut().map_or(0, |eq| eq.poll(bus, function));
        if consumed > 0 {
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
        let model = info.copied().unwrap_or(Model::pf("ConnectX"));
        // Fields are set in this order; if a later step fails, those set
        // are dropped in reverse (free_irq, then the vectors).
        try_pin_init!(CxFunction {
            model,
            vectors: map_function(pdev).and_then(|()| Vectors::alloc(pdev))?,
            irq <- {
                // SAFETY: `irq` is declared before `vectors` in
                // `CxFunction` and so dropped first; on an error below,
                // pin-init drops the fields set so far in reverse order.
                let reg = unsafe { vectors.get() };
                let request = reg.index(0)?;
                let bar = pdev.iomap_region(0, c"rmlx5")?;
                let state = State {
                    bus: CxBus::new(pdev, bar)?,
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
                        }),
                    )
                }
            },
            _: {
                let mut st = irq.handler().state.lock();
                bring_up(pdev, *model, &mut st)?;
                if crate::module_parameters::cx_selftest.value() {
                    // SAFETY: The borrow ends with the self-test, before
                    // this block does.
                    let reg = unsafe { vectors.get() };
                    self_test(pdev, *model, &mut st, reg)?;
                }
            },
        })
    }

    fn unbind<'bound>(pdev: &'bound pci::Device<Core<'_>>, this: Pin<&Self::Data<'bound>>) {
        let mut st = this.irq.handler().state.lock();
        take_down(pdev, this.model, &mut st);
    }
}

/// Enables the function's memory space and bus mastering and sets its DMA
/// mask (before anything is allocated for it).
fn map_function(pdev: &pci::Device<Core<'_>>) -> Result {
    pdev.enable_device_mem()?;
    pdev.set_master();
    // SAFETY: Called in probe, before any DMA allocation or mapping of
    // this device.
    unsafe { pdev.dma_set_mask_and_coherent(DmaMask::new::<64>()) }
}

/// Brings the function up, then creates and arms its asynchronous EQ on
/// vector 0; on failure undoes what was done.
fn bring_up(pdev: &pci::Device<Bound>, model: Model, st: &mut State<'_>) -> Result {
    let State { bus, function, eq } = st;
    // From here the device may hold the command memory.
    bus.set_quiesced(false);
    *function = Function::new(
        CmdMem {
            addr: bus.cmd_mem_addr(),
            len: CMD_MEM_SIZE,
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
    match PageEq::create(bus, function, s.uar, 0) {
        Ok(e) => {
            e.arm(bus);
            dev_info!(pdev, "async EQ {} on MSI-X vector 0\n", e.eqn());
            *eq = Some(e);
            Ok(())
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
    bus.set_quiesced(function.progress() == Progress::default());
    match down {
        Ok(()) => dev_info!(
            pdev,
            "{} down, every page returned ({} in all)\n",
            model.name,
            function.pages().returned_total()
        ),
        Err(e) => dev_err!(pdev, "{} teardown: {}\n", model.name, format_args!("{e}")),
    }
}
