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

mod caps;
mod cmd_hca;
mod cmd_qp;
mod cmd_queue;
mod cmd_res;
mod exec;
pub mod mailbox;
pub mod pages;
mod regs;
pub mod reject;

pub use regs::Readiness;

use super::hca::Hca;
use super::mem::Platform;
use super::prm::eqe::{EqeData, DATA_SIZE};
use super::prm::eqe_async::PageRequestEqe;
use super::prm::hca_cap::HcaCap;
use super::prm::init_seg::FwRev;
use super::prm::opcode::EventType;
use super::table::Storage;
use pages::{PageStore, PageTable};
use regs::{InitSeg, WriteEffect};
use reject::{Code, ErrorLog, ProtocolError, Reject};

/// How the device is built: its version, timing, geometry and the page
/// numbers it asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FwConfig {
    /// Firmware version in `fw_rev` / `cmdif_rev_fw_sub`.
    pub fw_rev: FwRev,
    /// When `initializing` clears, in each of its two waits.
    pub ready: Readiness,
    /// log2 of the command queue's entries (`cmdq_addr_l_sz` bits 7:4);
    /// at most 5 (32 entries, the width of the doorbell).
    pub log_cmdq_size: u8,
    /// log2 of the distance between entries (bits 3:0); at least 6.
    pub log_cmdq_stride: u8,
    /// Pages the device asks for before QUERY_HCA_CAP (QUERY_PAGES boot).
    pub boot_pages: u32,
    /// Further pages it asks for before INIT_HCA (QUERY_PAGES init).
    pub init_pages: u32,
    /// Pages each live EQ, CQ and QP costs after INIT_HCA (asked for with
    /// a PAGE_REQUEST EQE when the device has too few).
    pub pages_per_queue: u32,
    /// Pages for the translation tables of memory keys with scattered
    /// pages, kept free beyond the others: asked for with the init pages
    /// (QUERY_PAGES init), and after INIT_HCA the table pages in use are
    /// added to the need rounded up to a multiple of this many, so the
    /// device asks for more a reserve at a time (one PAGE_REQUEST EQE per
    /// `mtt_reserve` table pages, not one per memory key) and, once the
    /// driver answers, holds at least this many free pages besides its
    /// boot, init and queue pages. 0: each table page is asked for on its
    /// own. The model keeps nothing else in the pages it holds, so a table
    /// takes any held page not in use; a CREATE_MKEY that finds too few
    /// fails ([`Reject::MttNoPages`]). One page holds the table of up to
    /// 2 MiB of 4 KiB pages; a longer list takes one page per 2 MiB and a
    /// directory page.
    pub mtt_reserve: u32,
    /// UAR pages in the BAR; index 0 is never handed out (so that an unset
    /// `uar_page` field is caught), so at most `uars - 1` are allocated.
    /// At most 128.
    pub uars: u32,
    /// The DMA address at which the embedder backs UAR page 0 (see the
    /// module documentation).
    pub uar_base: u64,
    /// MSI-X vectors of the function: an EQ's `intr` must be below.
    pub msix_vectors: u16,
    /// The BlueFlame register (0 to 3) of its UAR page that a QP created
    /// by command rings; the model ties a QP to one register.
    pub qp_bfreg: u8,
    /// Write [`pages::STAMP`] over every page received.
    pub stamp_pages: bool,
    /// Check every queue entry's signature (mlx5_core always signs
    /// entries; mailbox signatures are checked only while
    /// `cmdif_checksum` is enabled).
    pub check_entry_signature: bool,
    /// Nanoseconds per tick of `health_counter` (0: it moves only when a
    /// command runs).
    pub health_tick_ns: u64,
    /// Fail the first [`FwConfig::fail_count`] commands with this opcode
    /// with [`Reject::Injected`] (0: none), so that a driver's error path
    /// can be tested on an otherwise faultless device.
    pub fail_opcode: u16,
    /// How many commands [`FwConfig::fail_opcode`] fails.
    pub fail_count: u32,
}

impl FwConfig {
    /// A ConnectX-5-like function: firmware 16.35.1012, ready at once, 32
    /// entries of 64 bytes, 8 boot and 16 init pages, 1 page per queue, no
    /// reserve for translation tables (they take from the boot and init
    /// pages, which the model leaves unused, and each is asked for again
    /// by page request), 16 UARs from DMA address 0, 64 vectors,
    /// BlueFlame register 0, pages stamped, entry signatures checked, a
    /// health tick per millisecond.
    pub const DEFAULT: FwConfig = FwConfig {
        fw_rev: FwRev {
            major: 16,
            minor: 35,
            subminor: 1012,
        },
        ready: Readiness::AfterReads(0),
        log_cmdq_size: 5,
        log_cmdq_stride: 6,
        boot_pages: 8,
        init_pages: 16,
        pages_per_queue: 1,
        mtt_reserve: 0,
        uars: 16,
        uar_base: 0,
        msix_vectors: 64,
        qp_bfreg: 0,
        stamp_pages: true,
        check_entry_signature: true,
        health_tick_ns: 1_000_000,
        fail_opcode: 0,
        fail_count: 0,
    };
}

impl Default for FwConfig {
    fn default() -> Self {
        FwConfig::DEFAULT
    }
}

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
        if self.state != HcaState::Initialized || self.page_eqn.is_none() {
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
