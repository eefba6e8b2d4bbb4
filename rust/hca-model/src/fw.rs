// SPDX-License-Identifier: GPL-2.0

//! The device side of the mlx5 command interface: what a ConnectX's
//! firmware does between the driver and the HCA model, so that an emulated
//! PCI function can be built on it.
//!
//! A [`Firmware`] is one PCI function's firmware in front of one
//! [`Hca`] instance. It shows the initialization segment of BAR0
//! ([`Firmware::read32`], [`Firmware::write32`]); when the driver rings the
//! command doorbell, [`Firmware::process`] reads each posted queue entry
//! and its mailboxes by DMA through [`Platform`], checks them as a device
//! would, runs the command on the model, writes the output and the status,
//! hands the entry back (ownership bit cleared) and, when an EQ receives
//! command events, writes a command-completion EQE and raises its
//! interrupt. Nothing the driver writes can make it panic: every refusal is
//! a delivery status, a command status with a syndrome, or an ignored
//! doorbell, and each is recorded in a bounded log ([`Firmware::log`]).
//!
//! # Bring-up order
//!
//! The device enforces mlx5_core's order (see `Documentation/hca-model.md`
//! for the table of what each state accepts):
//!
//! 1. `initializing` clears ([`Readiness`]); the driver writes the queue
//!    address; `initializing` clears again.
//! 2. ENABLE_HCA; QUERY_ISSI; SET_ISSI(1).
//! 3. QUERY_PAGES(boot) and MANAGE_PAGES(give) of the boot pages.
//! 4. QUERY_HCA_CAP, SET_HCA_CAP (optional).
//! 5. QUERY_PAGES(init) and MANAGE_PAGES(give) of the init pages (and of
//!    the [`FwConfig::mtt_reserve`]).
//! 6. INIT_HCA; then UARs, PDs, memory keys, EQs, CQs, QPs and the QP
//!    transitions, each queue costing [`FwConfig::pages_per_queue`] more
//!    pages, asked for with a PAGE_REQUEST EQE. A memory key whose pages
//!    are scattered keeps its translation table in held pages (see
//!    [`pages`]); the pages tables take are asked for again the same way
//!    (a reserve at a time, see [`FwConfig::mtt_reserve`]).
//! 7. TEARDOWN_HCA (every object freed first); MANAGE_PAGES(take) of every
//!    page; DISABLE_HCA (refused while the device holds a page).
//!
//! # Embedding
//!
//! The embedder maps register accesses of BAR0's first 8 KiB to
//! [`Firmware::read32`] / [`Firmware::write32`] (values as `ioread32be`
//! returns them), calls [`Firmware::process`] after a doorbell write
//! ([`Firmware::has_pending`]), drives [`Firmware::set_time`] from its
//! clock, and backs [`FwConfig::uar_base`]: UAR page `i` is the DMA
//! address `uar_base + i * 4096` of its [`Platform`], where the model reads
//! the doorbells and BlueFlame copies stored in the BAR's UAR pages. The
//! data path stays the model's: the embedder forwards UAR doorbells to
//! [`Hca::send_doorbell`], [`Hca::cq_doorbell`] and [`Hca::eq_doorbell`]
//! and runs [`super::fabric::Fabric::run`] as for the software HCA.
//!
//! # The port and failures
//!
//! The vport commands report the port (state, LID, SM, GUIDs, GIDs; see
//! [`port`]); the embedder changes it at run time with
//! [`Firmware::set_port_state`], [`Firmware::set_lid`] and
//! [`Firmware::set_sm_lid`], each raising a PORT_CHANGE event. The device
//! fails on demand with [`Firmware::inject`] ([`fault`]); while
//! [`Firmware::halted`] says so, the embedder stops running the fabric
//! and drops doorbells. Only a new `Firmware` (a function reset) clears a
//! fault.

mod caps;
mod cmd_hca;
mod cmd_qp;
mod cmd_queue;
mod cmd_res;
mod cmd_vport;
mod config;
mod exec;
pub mod fault;
pub mod mailbox;
pub mod pages;
pub mod port;
mod regs;
pub mod reject;

pub use config::FwConfig;
pub use fault::{Fault, Faults};
pub use port::PortInfo;
pub use regs::Readiness;

use super::hca::Hca;
use super::mem::Platform;
use super::prm::eqe::{EqeData, DATA_SIZE};
use super::prm::eqe_async::PageRequestEqe;
use super::prm::hca_cap::HcaCap;
use super::prm::opcode::EventType;
use super::table::Storage;
use pages::{PageStore, PageTable};
use regs::{InitSeg, WriteEffect};
use reject::{Code, ErrorLog, ProtocolError, Reject};

/// Where the function stands in its life cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HcaState {
    /// Before ENABLE_HCA, or after DISABLE_HCA.
    Disabled,
    /// Between ENABLE_HCA and INIT_HCA (ISSI, pages, capabilities).
    Enabled,
    /// Between INIT_HCA and TEARDOWN_HCA: resources can be created.
    Initialized,
    /// After TEARDOWN_HCA: pages are reclaimed, then DISABLE_HCA.
    TornDown,
}

/// The device's page accounts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageCounts {
    /// Pages the device holds now.
    pub held: u32,
    /// Pages it must keep now (what it would not give back).
    pub need: u32,
    /// Held pages in use as translation tables (part of the need; never
    /// given back).
    pub in_use: u32,
    /// Pages asked for with PAGE_REQUEST EQEs and not given yet.
    pub requested: u32,
    /// Pages asked back with PAGE_REQUEST EQEs and not taken yet.
    pub asked_back: u32,
    /// Pages received since creation.
    pub given_total: u64,
    /// Pages returned since creation.
    pub returned_total: u64,
    /// MANAGE_PAGES "allocation failed" reports.
    pub alloc_failures: u64,
}

/// What the firmware did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FwStats {
    /// Queue entries completed (whatever their status).
    pub commands: u64,
    /// Commands that ran and failed (non-zero status).
    pub failed: u64,
    /// Entries refused with a delivery status.
    pub delivery_errors: u64,
    /// Doorbell bits ignored (queue not ready, entry not owned, ...).
    pub ignored: u64,
    /// Command-completion EQEs written.
    pub cmd_events: u64,
    /// PAGE_REQUEST EQEs written.
    pub page_requests: u64,
    /// PORT_CHANGE EQEs written.
    pub port_events: u64,
    /// Faults injected ([`Firmware::inject`]) that took effect.
    pub faults: u64,
    /// Doorbell bits a fault left with the device: commands never run
    /// (see [`fault`]).
    pub unanswered: u64,
}

/// One PCI function's firmware (see the module documentation). `B` holds
/// the addresses of the pages the driver lends it.
#[derive(Debug)]
pub struct Firmware<B> {
    cfg: FwConfig,
    seg: InitSeg,
    state: HcaState,
    issi: u16,
    max_caps: HcaCap,
    cur_caps: HcaCap,
    pages: PageTable<B>,
    /// Allocated UAR indexes, bit per index.
    uars: u128,
    /// Live EQs, CQs and QPs created by command (the page need).
    queues: u32,
    /// Pages the device gave up with [`Firmware::ask_pages_back`].
    trim: u32,
    counts: PageCounts,
    cmd_eqn: Option<u8>,
    page_eqn: Option<u8>,
    pending: u32,
    log: ErrorLog,
    stats: FwStats,
    /// Injected failures still to come (see [`FwConfig::fail_opcode`]).
    fails_left: u32,
    /// The port as reported (see [`port`]).
    port: port::PortState,
    /// The fatal or silent fault that stopped the firmware.
    halt: Option<Fault>,
    /// A [`Fault::StuckNextCommand`] waits for the next command.
    stick_next: bool,
    /// Entries kept for good by [`Fault::StuckNextCommand`], a bit each.
    stuck: u32,
}

impl<B: PageStore> Firmware<B> {
    /// A function fresh from reset, keeping its pages in `store`.
    pub fn new(cfg: FwConfig, store: B) -> Self {
        let cfg = FwConfig {
            log_cmdq_size: cfg.log_cmdq_size.min(5),
            log_cmdq_stride: cfg.log_cmdq_stride.clamp(6, 12 - cfg.log_cmdq_size.min(5)),
            uars: cfg.uars.min(128),
            qp_bfreg: cfg.qp_bfreg.min(3),
            ..cfg
        };
        Firmware {
            seg: InitSeg::new(
                cfg.fw_rev,
                cfg.ready,
                cfg.log_cmdq_size,
                cfg.log_cmdq_stride,
                cfg.health_tick_ns,
            ),
            cfg,
            state: HcaState::Disabled,
            issi: 0,
            max_caps: HcaCap::default(),
            cur_caps: HcaCap::default(),
            pages: PageTable::new(store),
            uars: 0,
            queues: 0,
            trim: 0,
            counts: PageCounts::default(),
            cmd_eqn: None,
            page_eqn: None,
            pending: 0,
            log: ErrorLog::new(),
            stats: FwStats::default(),
            fails_left: cfg.fail_count,
            port: port::PortState::new(),
            halt: None,
            stick_next: false,
            stuck: 0,
        }
    }

    /// The configuration (after clamping to what the device supports).
    pub fn config(&self) -> &FwConfig {
        &self.cfg
    }

    /// The life-cycle state.
    pub fn state(&self) -> HcaState {
        self.state
    }

    /// The ISSI in force.
    pub fn issi(&self) -> u16 {
        self.issi
    }

    /// The current general capabilities (valid after ENABLE_HCA).
    pub fn caps(&self) -> &HcaCap {
        &self.cur_caps
    }

    /// Whether mailbox signatures are checked and written
    /// (`cmdif_checksum` enabled).
    pub fn checksums(&self) -> bool {
        self.cur_caps.cmdif_checksum == super::prm::hca_cap::CMDIF_CHECKSUM_ENABLED
    }

    /// The DMA address of UAR page `index`.
    pub fn uar_addr(&self, index: u32) -> u64 {
        self.cfg
            .uar_base
            .wrapping_add(u64::from(index).wrapping_mul(4096))
    }

    /// Whether UAR page `index` is allocated (ALLOC_UAR, not yet
    /// DEALLOC_UAR).
    pub fn uar_in_use(&self, index: u32) -> bool {
        cmd_res::uar_allocated(self.uars, index)
    }

    /// The allocated UAR pages, bit `i` for index `i`.
    pub fn uars_in_use(&self) -> u128 {
        self.uars
    }

    /// The EQ that receives command-completion events, if any.
    pub fn cmd_eqn(&self) -> Option<u8> {
        self.cmd_eqn
    }

    /// The EQ that receives page requests, if any.
    pub fn page_eqn(&self) -> Option<u8> {
        self.page_eqn
    }

    /// Reads the 32-bit register at byte `offset` of the initialization
    /// segment (the value `ioread32be` returns; 0 for offsets without a
    /// register). Reading `initializing` counts towards
    /// [`Readiness::AfterReads`].
    pub fn read32(&mut self, offset: usize) -> u32 {
        self.seg.read(offset)
    }

    /// Writes the 32-bit register at byte `offset`. A command doorbell
    /// write marks its entries pending; run them with
    /// [`Firmware::process`].
    pub fn write32(&mut self, offset: usize, value: u32) {
        let enabled = self.state != HcaState::Disabled;
        match self.seg.write(offset, value, enabled) {
            WriteEffect::None => {}
            WriteEffect::Doorbell(bits) => self.pending |= bits,
            WriteEffect::CmdqMoved => self.note(0xff, 0, Reject::CmdqMoved),
        }
    }

    /// Advances the device clock (nanoseconds, never backwards): the
    /// `initializing` waits of [`Readiness::AfterTime`], the health counter
    /// and the internal timer follow it.
    pub fn set_time(&mut self, now: u64) {
        self.seg.set_time(now);
    }

    /// Sets the health buffer's syndrome, as firmware does on a fatal
    /// error (0: healthy).
    pub fn set_health_syndrome(&mut self, synd: u8) {
        self.seg.set_health_syndrome(synd);
    }

    /// Whether doorbell bits wait for [`Firmware::process`].
    pub fn has_pending(&self) -> bool {
        self.pending != 0
    }

    /// The opcode of the first pending command (from its entry's inline
    /// input), for an embedder that lets some commands take longer, as a
    /// busy firmware does. `None` if nothing is pending or the entry cannot
    /// be read.
    pub fn pending_opcode<M: super::mem::DmaMemory>(&self, m: &mut M) -> Option<u16> {
        if self.pending == 0 {
            return None;
        }
        let (base, _, log_stride) = self.seg.cmdq()?;
        let slot = u64::from(self.pending.trailing_zeros());
        let addr = base.checked_add(slot << log_stride)?;
        let mut entry = [0u8; super::prm::cmd_queue::CMD_LAYOUT_SIZE];
        m.read(addr, &mut entry).ok()?;
        let l = super::prm::cmd_queue::CmdLayout::decode(&entry);
        Some(u16::from_be_bytes([l.in_data[0], l.in_data[1]]))
    }

    /// Runs every entry whose doorbell bit is pending, in entry order, on
    /// instance `hca`, reaching memory and raising interrupts through `p`.
    /// Returns how many entries were handed back to the driver.
    pub fn process<S: Storage, P: Platform>(&mut self, p: &mut P, hca: &mut Hca<S>) -> u32 {
        let bits = core::mem::take(&mut self.pending);
        // A fault keeps some entries (or all) with the device.
        let bits = self.screen(bits);
        if bits == 0 {
            return 0;
        }
        self.seg.mark_ready();
        let Some((base, log_sz, log_stride)) = self.seg.cmdq() else {
            self.note(0xff, 0, Reject::DoorbellNotReady);
            return 0;
        };
        let mut done = 0;
        for slot in 0..32u8 {
            if bits & 1 << slot == 0 {
                continue;
            }
            if u32::from(slot) >= 1u32 << log_sz {
                self.note(slot, 0, Reject::EntryBeyondQueue);
                continue;
            }
            let addr = base.wrapping_add(u64::from(slot) << log_stride);
            if self.sticks(p, addr, slot) {
                continue;
            }
            if exec::run_entry(self, p, hca, base, log_stride, slot) {
                done += 1;
            }
        }
        done
    }

    /// The page accounts.
    pub fn page_counts(&self) -> PageCounts {
        PageCounts {
            held: self.held(),
            need: self.need(),
            in_use: self.in_use(),
            ..self.counts
        }
    }

    /// The addresses of the pages the device holds, ascending.
    pub fn held_pages(&self) -> &[u64] {
        self.pages.held()
    }

    /// The held pages in use as translation tables, ascending.
    pub fn table_pages(&self) -> &[u64] {
        self.pages.in_use()
    }

    /// The device decides it can do with `n` fewer pages (never fewer than
    /// its boot pages, and never any its translation tables account for)
    /// and asks the driver to take back what it now holds
    /// beyond its need, up to `n`, with a PAGE_REQUEST EQE carrying the
    /// negative count. Returns the number asked back (0 if it holds no
    /// surplus, is not initialised, or no EQ receives page requests).
    pub fn ask_pages_back<S: Storage, P: Platform>(
        &mut self,
        p: &mut P,
        hca: &mut Hca<S>,
        n: u32,
    ) -> u32 {
        if self.state != HcaState::Initialized || self.page_eqn.is_none() || self.halted() {
            return 0;
        }
        let spare = self
            .need()
            .saturating_sub(self.table_need())
            .saturating_sub(self.cfg.boot_pages);
        self.trim = self.trim.saturating_add(n.min(spare));
        let surplus = self
            .held()
            .saturating_sub(self.need())
            .saturating_sub(self.counts.asked_back);
        let k = n.min(surplus).min(i32::MAX as u32);
        if k == 0 || !self.post_page_request(p, hca, -(k as i32)) {
            return 0;
        }
        self.counts.asked_back = self.counts.asked_back.saturating_add(k);
        k
    }

    /// The protocol error log.
    pub fn log(&self) -> &ErrorLog {
        &self.log
    }

    /// Empties the protocol error log.
    pub fn clear_log(&mut self) {
        self.log.clear();
    }

    /// The counters.
    pub fn stats(&self) -> &FwStats {
        &self.stats
    }

    fn held(&self) -> u32 {
        u32::try_from(self.pages.count()).unwrap_or(u32::MAX)
    }

    fn in_use(&self) -> u32 {
        u32::try_from(self.pages.in_use().len()).unwrap_or(u32::MAX)
    }

    /// What QUERY_PAGES(init) asks to hold: the boot and init pages and
    /// the reserve for translation tables.
    fn init_need(&self) -> u32 {
        self.cfg
            .boot_pages
            .saturating_add(self.cfg.init_pages)
            .saturating_add(self.cfg.mtt_reserve)
    }

    /// The pages translation tables account for: the reserve, plus the
    /// pages in use rounded up to a multiple of it (see
    /// [`FwConfig::mtt_reserve`]). Never less than the pages in use.
    fn table_need(&self) -> u32 {
        let reserve = self.cfg.mtt_reserve;
        let unit = reserve.max(1);
        let used = self.in_use().div_ceil(unit).saturating_mul(unit);
        reserve.saturating_add(used)
    }

    /// The pages the device must keep in its state: after INIT_HCA its
    /// boot and init pages and the queues' (less what it gave up, never
    /// below the boot pages), plus what its translation tables account
    /// for; otherwise none (before INIT_HCA it can hand everything back,
    /// as mlx5_core's error path expects; no table exists then).
    fn need(&self) -> u32 {
        match self.state {
            HcaState::Initialized => {
                let base = self
                    .cfg
                    .boot_pages
                    .saturating_add(self.cfg.init_pages)
                    .saturating_add(self.queues.saturating_mul(self.cfg.pages_per_queue));
                base.saturating_sub(self.trim)
                    .max(self.cfg.boot_pages)
                    .saturating_add(self.table_need())
            }
            _ => 0,
        }
    }

    /// Records a refusal.
    fn note(&mut self, slot: u8, opcode: u16, reject: Reject) {
        self.log.push(ProtocolError {
            opcode,
            slot,
            reject,
        });
        match reject.code() {
            Code::Delivery(_) => self.stats.delivery_errors += 1,
            Code::Status(_) => self.stats.failed += 1,
            Code::Ignored => self.stats.ignored += 1,
        }
    }

    /// Writes a PAGE_REQUEST EQE for `num` pages to the page EQ. Without
    /// one, nothing is posted (the driver learns the count from
    /// QUERY_PAGES), as on a ConnectX whose EQs do not ask for the event.
    fn post_page_request<S: Storage, P: Platform>(
        &mut self,
        p: &mut P,
        hca: &mut Hca<S>,
        num: i32,
    ) -> bool {
        let Some(eqn) = self.page_eqn else {
            return false;
        };
        let mut raw = [0u8; DATA_SIZE];
        PageRequestEqe {
            ec_function: false,
            release_all: false,
            func_id: 0,
            num_pages: num,
        }
        .encode(&mut raw);
        if hca.post_event(p, eqn, EventType::PageRequest, EqeData::Raw(raw)) {
            self.stats.page_requests += 1;
            true
        } else {
            self.note(0xff, 0, Reject::EventLost);
            false
        }
    }

    /// Asks for the pages the device lacks, beyond those already asked
    /// for.
    fn request_missing<S: Storage, P: Platform>(&mut self, p: &mut P, hca: &mut Hca<S>) {
        let short = self
            .need()
            .saturating_sub(self.held())
            .saturating_sub(self.counts.requested)
            .min(i32::MAX as u32);
        if short != 0 && self.post_page_request(p, hca, short as i32) {
            self.counts.requested = self.counts.requested.saturating_add(short);
        }
    }
}
