// SPDX-License-Identifier: GPL-2.0

//! Bringing one PCI function up and down in mlx5_core's order, and
//! answering the device's page requests.
//!
//! Up ([`Function::bring_up`]): the command interface
//! ([`CmdIf::init`]: the `initializing` waits, revision, queue address),
//! ENABLE_HCA, QUERY_ISSI and SET_ISSI(1), QUERY_PAGES(boot) and
//! MANAGE_PAGES(give), QUERY_HCA_CAP and SET_HCA_CAP of the general
//! capabilities (the `caps` module), QUERY_PAGES(init) and
//! MANAGE_PAGES(give), INIT_HCA, QUERY_HCA_CAP (current, as mlx5_core
//! reads the capabilities again after INIT_HCA), ALLOC_UAR.
//!
//! Down ([`Function::teardown`]): DEALLOC_UAR, TEARDOWN_HCA, MANAGE_PAGES
//! (take) until every page is back, DISABLE_HCA. Each step of the way up
//! is recorded when it succeeds, and teardown undoes exactly the recorded
//! ones, so it is the error path of a bring-up that failed half way as
//! well as the normal way down. It carries on past a failed step (as
//! mlx5_core does) except after a timeout: a device that stopped answering
//! would only make every further command wait its full timeout.
//!
//! A function must be torn down before it is dropped: the device holds
//! the driver's pages until then, and only a [`Bus`] can take them back.

use super::bus::Bus;
use super::caps::{self, CapSettings};
use super::cmdif::{CmdIf, Timeouts};
use super::cmdmem::CmdMem;
use super::error::Error;
use super::pages::Pages;
use super::prm::cmd_hca::{
    DisableHca, DisableHcaIn, EnableHca, EnableHcaIn, InitHca, InitHcaIn, QueryIssi, QueryIssiIn,
    SetIssi, SetIssiIn, TeardownHca, TeardownHcaIn, ISSI, TEARDOWN_GRACEFUL_CLOSE,
};
use super::prm::cmd_res::{AllocUar, AllocUarIn, DeallocUar, DeallocUarIn};
use super::prm::hca_cap::{HcaCap, CAP_MODE_CUR};
use super::prm::init_seg::FwRev;

/// How to bring a function up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// The bounds of every wait.
    pub timeouts: Timeouts,
    /// What SET_HCA_CAP sets.
    pub caps: CapSettings,
}

/// What a successful bring-up found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    /// The firmware version.
    pub fw_rev: FwRev,
    /// The command interface revision.
    pub cmdif_rev: u16,
    /// The ISSI in force.
    pub issi: u16,
    /// Pages given for boot (QUERY_PAGES boot).
    pub boot_pages: u32,
    /// Pages given before INIT_HCA (QUERY_PAGES init).
    pub init_pages: u32,
    /// Pages the device holds.
    pub pages_lent: u64,
    /// Command checksums are on.
    pub checksums: bool,
    /// log2 of the QPs the function may create.
    pub log_max_qp: u8,
    /// log2 of the CQs.
    pub log_max_cq: u8,
    /// log2 of the EQs.
    pub log_max_eq: u8,
    /// log2 of the protection domains.
    pub log_max_pd: u8,
    /// log2 of the memory keys.
    pub log_max_mkey: u8,
    /// Physical ports.
    pub num_ports: u8,
    /// The driver's own UAR page (for its EQ doorbells).
    pub uar: u32,
}

/// What has been done to the function so far (and not undone).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// The command interface is up.
    pub cmdif: bool,
    /// ENABLE_HCA succeeded.
    pub enabled: bool,
    /// The ISSI set (0 before SET_ISSI).
    pub issi: u16,
    /// INIT_HCA succeeded.
    pub initialized: bool,
    /// The UAR allocated.
    pub uar: Option<u32>,
    /// Pages the device holds.
    pub pages_lent: u64,
}

/// One PCI function as its driver sees it (see the module documentation).
#[derive(Clone, Debug)]
pub struct Function {
    mem: CmdMem,
    cfg: Config,
    cmd: Option<CmdIf>,
    enabled: bool,
    issi: u16,
    initialized: bool,
    uar: Option<u32>,
    pages: Pages,
    caps: HcaCap,
}

impl Function {
    /// A function not brought up, whose command interface will use `mem`.
    pub fn new(mem: CmdMem, cfg: Config) -> Self {
        Function {
            mem,
            cfg,
            cmd: None,
            enabled: false,
            issi: 0,
            initialized: false,
            uar: None,
            pages: Pages::new(),
            caps: HcaCap::default(),
        }
    }

    /// What has been done so far.
    pub fn progress(&self) -> Progress {
        Progress {
            cmdif: self.cmd.is_some(),
            enabled: self.enabled,
            issi: self.issi,
            initialized: self.initialized,
            uar: self.uar,
            pages_lent: self.pages.lent(),
        }
    }

    /// The page accounts.
    pub fn pages(&self) -> &Pages {
        &self.pages
    }

    /// The current general capabilities, as read after INIT_HCA.
    pub fn caps(&self) -> &HcaCap {
        &self.caps
    }

    /// Puts the function in internal error (see
    /// [`CmdIf::set_internal_error`]): its health check failed, so no
    /// command reaches the device any more, and [`Function::teardown`]
    /// only writes the function off. Nothing happens before the command
    /// interface is up.
    pub fn enter_error(&mut self) {
        if let Some(cmd) = self.cmd.as_mut() {
            cmd.set_internal_error();
        }
    }

    /// Whether the function is in internal error.
    pub fn in_error(&self) -> bool {
        self.cmd.as_ref().is_some_and(CmdIf::internal_error)
    }

    /// The command interface, once up, for the commands that create the
    /// function's objects ([`CmdIf::exec`]).
    pub fn cmdif(&mut self) -> Option<&mut CmdIf> {
        self.cmd.as_mut()
    }

    /// Brings the function up (see the module documentation). On an error
    /// the steps done so far stay recorded; call [`Function::teardown`].
    ///
    /// # Errors
    ///
    /// [`Error::State`] unless the function is down; the error of the step
    /// that failed: [`Error::FwNotReady`] and the other errors of
    /// [`CmdIf::init`], [`Error::Unsupported`] without ISSI 1, a command's
    /// [`Error::Cmd`] or [`Error::Timeout`] naming it,
    /// [`Error::PageAlloc`].
    pub fn bring_up<B: Bus>(&mut self, bus: &mut B) -> Result<Summary, Error> {
        if self.progress() != Progress::default() {
            return Err(Error::State {
                what: "function not down: tear it down before bringing it up",
            });
        }
        let cmd = self
            .cmd
            .insert(CmdIf::init(bus, self.mem, self.cfg.timeouts)?);
        cmd.exec::<EnableHca, B>(bus, &EnableHcaIn::default(), &[])?;
        self.enabled = true;
        let issi = cmd.exec::<QueryIssi, B>(bus, &QueryIssiIn::default(), &[])?;
        if issi.supported_issi_dw0 & (1 << ISSI) == 0 {
            return Err(Error::Unsupported { what: "ISSI 1" });
        }
        cmd.exec::<SetIssi, B>(bus, &SetIssiIn { current_issi: ISSI }, &[])?;
        self.issi = ISSI;
        let boot_pages = self.pages.satisfy_startup(cmd, bus, true)?;
        caps::set_general(cmd, bus, &self.cfg.caps)?;
        let init_pages = self.pages.satisfy_startup(cmd, bus, false)?;
        cmd.exec::<InitHca, B>(bus, &InitHcaIn::default(), &[])?;
        self.initialized = true;
        self.caps = caps::query_general(cmd, bus, CAP_MODE_CUR)?;
        let uar = cmd
            .exec::<AllocUar, B>(bus, &AllocUarIn::default(), &[])?
            .uar;
        self.uar = Some(uar);
        let c = &self.caps;
        Ok(Summary {
            fw_rev: cmd.fw_rev(),
            cmdif_rev: cmd.cmdif_rev(),
            issi: self.issi,
            boot_pages,
            init_pages,
            pages_lent: self.pages.lent(),
            checksums: cmd.checksums(),
            log_max_qp: c.log_max_qp,
            log_max_cq: c.log_max_cq,
            log_max_eq: c.log_max_eq,
            log_max_pd: c.log_max_pd,
            log_max_mkey: c.log_max_mkey,
            num_ports: c.num_ports,
            uar,
        })
    }

    /// Undoes what [`Function::bring_up`] recorded, in mlx5_core's order
    /// (see the module documentation). Doing nothing is success; a
    /// function torn down without error is down and may be brought up
    /// again. After an error, what could not be undone stays recorded
    /// ([`Function::progress`]); pages the device kept must not be freed.
    ///
    /// In internal error ([`Function::enter_error`]) no command is sent:
    /// the function is simply written off as down, with every page it
    /// lent, which the embedder must then free itself, and only once the
    /// device can no longer write them (after a reset, or with bus
    /// mastering off).
    ///
    /// # Errors
    ///
    /// The first error met (later steps were still tried unless it was a
    /// timeout), e.g. [`Error::PagesNotReturned`].
    pub fn teardown<B: Bus>(&mut self, bus: &mut B) -> Result<(), Error> {
        let Some(cmd) = self.cmd.as_mut() else {
            return Ok(());
        };
        if cmd.internal_error() {
            // mlx5_core's way down from internal error: every step is
            // taken as done without a command, and the pages are written
            // off (the embedder frees them once the device is stopped).
            self.pages.abandon();
            self.cmd = None;
            self.enabled = false;
            self.issi = 0;
            self.initialized = false;
            self.uar = None;
            return Ok(());
        }
        let mut first: Option<Error> = None;
        let go_on = |first: &Option<Error>| !first.is_some_and(|e| e.is_timeout());
        if let Some(uar) = self.uar {
            match cmd.exec::<DeallocUar, B>(bus, &DeallocUarIn { uar }, &[]) {
                Ok(_) => self.uar = None,
                Err(e) => first = Some(e),
            }
        }
        if self.initialized && go_on(&first) {
            let input = TeardownHcaIn {
                profile: TEARDOWN_GRACEFUL_CLOSE,
            };
            match cmd.exec::<TeardownHca, B>(bus, &input, &[]) {
                Ok(_) => self.initialized = false,
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        if self.pages.lent() > 0 && go_on(&first) {
            let ms = cmd.timeouts().reclaim_pages_ms;
            if let Err(e) = self.pages.reclaim_all(cmd, bus, ms) {
                first.get_or_insert(e);
            }
        }
        if self.enabled && go_on(&first) {
            match cmd.exec::<DisableHca, B>(bus, &DisableHcaIn::default(), &[]) {
                Ok(_) => self.enabled = false,
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        if !self.enabled && self.pages.lent() == 0 {
            // Disabled: the device forgot the ISSI, the UAR and its state.
            self.cmd = None;
            self.issi = 0;
            self.initialized = false;
            self.uar = None;
        }
        first.map_or(Ok(()), Err)
    }

    /// Answers a PAGE_REQUEST event for `num_pages` pages: gives that many
    /// when positive (telling the device with MANAGE_PAGES "allocation
    /// failed" if memory is short), takes up to that many back when
    /// negative. Returns the number of pages moved.
    ///
    /// # Errors
    ///
    /// [`Error::State`] before ENABLE_HCA; as [`Pages::give`] and
    /// [`Pages::take`].
    pub fn page_request<B: Bus>(&mut self, bus: &mut B, num_pages: i32) -> Result<u32, Error> {
        let not_up = Error::State {
            what: "page request for a function that is not enabled",
        };
        if !self.enabled {
            return Err(not_up);
        }
        let Some(cmd) = self.cmd.as_mut() else {
            return Err(not_up);
        };
        let n = num_pages.unsigned_abs();
        if num_pages > 0 {
            self.pages.give(cmd, bus, n, true).map(|()| n)
        } else if num_pages < 0 {
            self.pages.take(cmd, bus, n)
        } else {
            Ok(0)
        }
    }
}
