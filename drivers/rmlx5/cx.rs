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
//! to the device. Commands complete by polling in this step: EQs, MSI-X and
//! the verbs objects come next (see `Documentation/pci-backend.md`), so a
//! function that came up is not yet an `rmlx5_N` device.
//!
//! # Locking
//!
//! A function's state is behind one mutex, taken in probe, unbind and (to
//! come) the page-request work; commands sleep while holding it, which the
//! kernel's command interface does too (one command at a time per
//! function in this step).

mod bus;

use kernel::{
    device::Core,
    dma::{
        Device as DmaDevice,
        DmaMask, //
    },
    new_mutex,
    pci,
    prelude::*,
    sync::Mutex, //
};

use crate::mlx5_cmdif::{
    cmdmem::{
        CmdMem,
        CMD_MEM_SIZE, //
    },
    function::{
        Config,
        Function, //
    },
};
use bus::CxBus;

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
    pdev: &'bound pci::Device,
    model: Model,
    /// BAR0 (initialization segment, then UAR pages), the command memory,
    /// the lent pages and the command interface's state.
    #[pin]
    state: Mutex<State<'bound>>,
}

/// What the function's mutex protects.
struct State<'bound> {
    bus: CxBus<'bound>,
    function: Function,
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
        let state = bring_up(pdev, model);
        try_pin_init!(CxFunction {
            pdev,
            model,
            state <- new_mutex!(state?, "rmlx5_cx_function"),
        })
    }

    fn unbind<'bound>(pdev: &'bound pci::Device<Core<'_>>, this: Pin<&Self::Data<'bound>>) {
        let mut st = this.state.lock();
        let State { bus, function } = &mut *st;
        match function.teardown(bus) {
            Ok(()) => dev_info!(pdev, "{} down, every page returned\n", this.model.name),
            // Pages the device still holds stay allocated (CxBus keeps
            // them until it drops, after the device is disabled).
            Err(e) => dev_err!(
                pdev,
                "{} teardown: {}\n",
                this.model.name,
                format_args!("{e}")
            ),
        }
    }
}

/// Enables the function and brings it up; on failure, undoes what was
/// done and returns the error.
fn bring_up<'bound>(pdev: &'bound pci::Device<Core<'_>>, model: Model) -> Result<State<'bound>> {
    pdev.enable_device_mem()?;
    pdev.set_master();
    // SAFETY: Called in probe, before any DMA allocation or mapping of
    // this device.
    unsafe { pdev.dma_set_mask_and_coherent(DmaMask::new::<64>())? };
    let bar = pdev.iomap_region(0, c"rmlx5")?;
    let mut bus = CxBus::new(pdev, bar)?;
    let mem = CmdMem {
        addr: bus.cmd_mem_addr(),
        len: CMD_MEM_SIZE,
    };
    let mut function = Function::new(mem, Config::default());
    match function.bring_up(&mut bus) {
        Ok(s) => {
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
            Ok(State { bus, function })
        }
        Err(e) => {
            // The crate's errors are `core::fmt::Display`; the log macros
            // take the kernel's `Display`, which `Arguments` has.
            dev_err!(
                pdev,
                "{} bring-up failed: {}\n",
                model.name,
                format_args!("{e}")
            );
            if let Err(t) = function.teardown(&mut bus) {
                dev_err!(pdev, "undoing the bring-up: {}\n", format_args!("{t}"));
                // The device may still own pages: they must outlive it.
                bus.keep_pages();
            }
            Err(Error::from_errno(-e.errno()))
        }
    }
}
