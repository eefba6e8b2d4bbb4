// SPDX-License-Identifier: GPL-2.0

//! The emulated ConnectX-5 function: hca-model's firmware in front of one
//! HCA instance, reached through BAR0. The instance lives in the card's
//! fabric (`card.rs`), which the function reaches through a [`Cx`] given to
//! every call; with several functions, each has its own instance there.
//!
//! * Initialization-segment accesses go to `Firmware::read32`/`write32`
//!   (big-endian registers: the bytes of a dword are the value as
//!   `ioread32be` returns it); a command doorbell runs
//!   `Firmware::process`.
//! * Stores to a UAR page are kept in the device's copy of that page
//!   (where the model reads them, see `bus.rs`), then forwarded as the
//!   doorbell they are: CQ arm, EQ arm or update, send (plain or
//!   BlueFlame, told apart by `blueflame.rs`).
//! * After every doorbell, and from the caller's timer while work is left
//!   or a retry is due, `Fabric::run` executes the queues (of every
//!   function of the card: see `card.rs`).
//!
//! Everything the guest does wrong is logged and counted: a command or
//! doorbell the firmware or the model refused, a DMA outside guest memory,
//! a store to BAR0 where no register is. [`Function::failed`] says whether
//! any happened; the process exits non-zero then.
//!
//! A test in the guest makes the device fail, or changes its port,
//! through the emulator's own test register page (`testreg.rs`,
//! `function/faults.rs`). A fatal or silent fault stops the function:
//! commands stay with the device, doorbells are dropped and the queues no
//! longer run, until a reset (DEVICE_RESET or an FLR) builds a new
//! firmware and HCA. None of that counts as the guest's mistake.

use std::time::{Duration, Instant};

use hca_model::doorbell::{DoorbellError, SendDoorbell};
use hca_model::fabric::Fabric;
use hca_model::fw::reject::Reject;
use hca_model::fw::{Firmware, FwConfig, HcaState, Readiness};
use hca_model::hca::Hca;
use mlx5_prm::command::opcode_name;
use mlx5_prm::doorbell::{
    bf_half_offset, CqDbRec, SendDoorbellWord, UarCqDoorbell, CQ_DBR_SIZE, UAR_CQ_DOORBELL_OFFSET,
    UAR_EQ_ARM_OFFSET, UAR_EQ_UPDATE_OFFSET, UAR_PAGE_SIZE,
};
use mlx5_prm::ring;

use crate::bar0::{decode_read, decode_write, uar_register, Target, UarReg};
use crate::blueflame::{BfStore, BlueFlame, Ring};
use crate::bus::{uar_base, Bus};
use crate::card::{new_instance, Cx, Instances};
use crate::log::{debug, error, info, trace};
use crate::storage::VecStorage;
use crate::testreg::Latch;

/// Pages the device can hold (boot + init + one per queue, with room;
/// a page holding a translation table takes a second slot).
const PAGE_SLOTS: usize = 16384;
/// Pages the firmware keeps free for the translation tables of user
/// memory keys (`FwConfig::mtt_reserve`), asked for with the init pages
/// and then a reserve at a time. A 1 MiB MR spans at most 257 pages, whose
/// table fits one page (512 entries), so 64 of them take 64 pages: 128
/// leaves room for twice that (or for larger MRs: 8 MiB takes 5 pages)
/// before the driver answers a single page request, on top of the 24 boot
/// and init pages the model leaves unused. It costs the guest 512 KiB, and
/// at most one PAGE_REQUEST EQE per 128 table pages reaches its page EQ
/// (64 entries in rmlx5), so a burst of registrations cannot overrun it.
const MTT_RESERVE: u32 = 128;
type PageSlots = [u64; PAGE_SLOTS];

/// How the function is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    /// UAR pages in BAR0 (at most 128).
    pub(crate) uars: u32,
    /// MSI-X vectors.
    pub(crate) msix_vectors: u16,
    /// How long a lone BlueFlame-half store waits for the rest of a copy
    /// before it is rung as a plain doorbell.
    pub(crate) bf_idle: Duration,
    /// Commands with this opcode fail (`FwConfig::fail_opcode`; 0: none).
    pub(crate) fail_opcode: u16,
    /// How many of them.
    pub(crate) fail_count: u32,
    /// The firmware never clears `initializing` (a driver must give up).
    pub(crate) never_ready: bool,
    /// Commands with this opcode take `slow` longer than the others (a
    /// busy firmware; 0: none): the device keeps the entry, and goes on
    /// executing queues and raising interrupts, until the time is up.
    pub(crate) slow_opcode: u16,
    /// How much longer.
    pub(crate) slow: Duration,
    /// How long every command takes (0: done within the doorbell write,
    /// which no card does): a doorbell's commands are run this long after
    /// it, with those rung meanwhile; the device keeps the entries until
    /// then, as a firmware busy with them does.
    pub(crate) cmd_latency: Duration,
}

impl Settings {
    /// 128 UARs, 16 vectors, 200 µs.
    pub(crate) const DEFAULT: Settings = Settings {
        uars: 128,
        msix_vectors: 16,
        bf_idle: Duration::from_micros(200),
        fail_opcode: 0,
        fail_count: 0,
        never_ready: false,
        slow_opcode: 0,
        slow: Duration::ZERO,
        cmd_latency: Duration::ZERO,
    };

    /// The firmware's configuration for function `index`.
    fn fw_config(&self, index: u16) -> FwConfig {
        FwConfig {
            uars: self.uars,
            uar_base: uar_base(index),
            msix_vectors: self.msix_vectors,
            mtt_reserve: MTT_RESERVE,
            fail_opcode: self.fail_opcode,
            fail_count: self.fail_count,
            ready: if self.never_ready {
                Readiness::Never
            } else {
                FwConfig::DEFAULT.ready
            },
            ..FwConfig::DEFAULT
        }
    }
}

/// How often the receive doorbell records of QPs in ERR are looked at.
const ERR_WATCH_NS: u64 = 1_000_000;

/// What the function counted besides the model's own statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FnStats {
    /// Doorbells the model accepted.
    pub(crate) doorbells: u64,
    /// Doorbells the model refused.
    pub(crate) doorbell_errors: u64,
    /// Send doorbells rung as BlueFlame copies.
    pub(crate) blueflame: u64,
    /// BlueFlame copies cut short and rung as plain doorbells.
    pub(crate) blueflame_cut: u64,
    /// Plain send doorbells overtaken by the driver's next post (see
    /// `Function::overtaken`).
    pub(crate) overtaken: u64,
    /// Of those, the ones whose record moved on only while the model read
    /// it (found when the model refused the doorbell as not naming the
    /// last WQE).
    pub(crate) overtaken_late: u64,
    /// Refusals in the firmware's log (commands, entries, doorbell bits).
    pub(crate) fw_errors: u64,
    /// Commands made slow on purpose (`Settings::slow_opcode`).
    pub(crate) slowed: u64,
    /// Commands failed on purpose (`Settings::fail_opcode`).
    pub(crate) injected: u64,
    /// BAR0 stores that reached no register.
    pub(crate) stray_writes: u64,
    /// Function resets (DEVICE_RESET and FLR).
    pub(crate) resets: u64,
    /// Function-level resets the guest started (part of `resets`).
    pub(crate) flrs: u64,
    /// Command words the test register page took.
    pub(crate) test_commands: u64,
    /// Faults injected through it that took effect.
    pub(crate) faults: u64,
    /// Port changes made through it (state, LID, SM LID).
    pub(crate) port_changes: u64,
    /// Doorbells dropped while a fault stopped the function.
    pub(crate) halted_doorbells: u64,
    /// Stores to UAR pages allocated before the last reset and not since
    /// (dropped: stale mappings of the old binding).
    pub(crate) stale_doorbells: u64,
    /// Commands a fault left with the device, in firmwares reset since
    /// (the current one's are in its own statistics).
    pub(crate) unanswered: u64,
}

/// One PCI function.
pub(crate) struct Function {
    /// Its number on the card, and its HCA instance's fabric index.
    index: u16,
    settings: Settings,
    fw: Box<Firmware<PageSlots>>,
    /// The function's HCA instance while it is out of the fabric (the
    /// function is stopped, see `card.rs`); the fabric holds an empty
    /// stand-in at its index meanwhile.
    parked: Option<Box<Hca<VecStorage>>>,
    /// The model's view of the machine.
    pub(crate) bus: Bus,
    bf: BlueFlame,
    /// The card's clock origin.
    start: Instant,
    /// When to look at the receive doorbell records of QPs in ERR next
    /// (`Function::tick`); armed after anything ran, disarmed when no QP
    /// is in ERR.
    err_watch_at: Option<u64>,
    /// When the command held by `Settings::slow_opcode` runs.
    slow_until: Option<u64>,
    /// When the commands rung are due (`Settings::cmd_latency`).
    cmd_due: Option<u64>,
    /// Firmware log entries already reported.
    fw_seen: u64,
    state: HcaState,
    /// The test register's command word as stored so far.
    test_latch: Latch,
    /// UAR pages allocated before the last reset and not since, bit `i`
    /// for index `i` (see `uar_write`).
    stale_uars: u128,
    /// Bus Master Enable as the guest last set it in the configuration
    /// space: without it nothing that reaches memory runs (commands,
    /// queues, interrupts), as on a real function.
    bus_master: bool,
    /// The client is gone: the function runs nothing any more.
    detached: bool,
    /// Counters.
    pub(crate) stats: FnStats,
}

fn new_firmware(s: &Settings, index: u16) -> Box<Firmware<PageSlots>> {
    Box::new(Firmware::new(s.fw_config(index), [0u64; PAGE_SLOTS]))
}

/// The HCA instance of function `index`: `parked`, or the fabric's.
fn instance<'a>(
    parked: &'a mut Option<Box<Hca<VecStorage>>>,
    fabric: &'a mut Fabric<Instances>,
    index: u16,
) -> Option<&'a mut Hca<VecStorage>> {
    match parked {
        Some(h) => Some(&mut **h),
        None => fabric.hca(index),
    }
}

/// `instance` of a function and a [`Cx`]: `hca!(self, cx)`.
macro_rules! hca {
    ($f:expr, $cx:expr) => {
        instance(&mut $f.parked, &mut $cx.shared.fabric, $f.index)
    };
}

// After the macro, which it uses.
mod faults;

impl Function {
    /// Function `index` of a card, fresh from reset; `start` is the card's
    /// clock origin. Its HCA instance is the fabric's instance `index`.
    pub(crate) fn new(settings: Settings, index: u16, start: Instant) -> Self {
        Function {
            index,
            settings,
            fw: new_firmware(&settings, index),
            parked: None,
            bus: Bus::new(uar_base(index), settings.uars, settings.msix_vectors),
            bf: BlueFlame::default(),
            start,
            err_watch_at: None,
            slow_until: None,
            cmd_due: None,
            fw_seen: 0,
            state: HcaState::Disabled,
            test_latch: Latch::default(),
            stale_uars: 0,
            bus_master: true,
            detached: false,
            stats: FnStats::default(),
        }
    }

    /// Back to the state after power-on: a new firmware and HCA instance
    /// (every object and held page forgotten), clear UAR pages. DMA maps
    /// and interrupt eventfds are the client's and stay. The new instance
    /// takes the old one's place in the fabric (same index, same LID); the
    /// other functions' instances are not touched, and their QPs that
    /// talked to this one's find none.
    pub(crate) fn reset(&mut self, cx: &mut Cx<'_>) {
        // What the old firmware left undone is counted before it goes.
        self.check_firmware();
        // Processes may still hold mappings of the UAR pages that were
        // allocated: their stores are dropped until the index is
        // allocated again (see `uar_write`).
        self.stale_uars |= self.fw.uars_in_use();
        self.stats.unanswered += self.fw.stats().unanswered;
        self.fw = new_firmware(&self.settings, self.index);
        let fresh = new_instance(self.index);
        match self.parked.as_mut() {
            Some(h) => **h = fresh,
            None => {
                if let Some(h) = cx.shared.fabric.hca(self.index) {
                    *h = fresh;
                }
            }
        }
        cx.shared.refresh_more();
        self.bus.uars.clear();
        self.bf.clear();
        self.slow_until = None;
        self.cmd_due = None;
        self.fw_seen = 0;
        self.state = HcaState::Disabled;
        self.test_latch = Latch::default();
        self.stats.resets += 1;
        self.sync_parking(cx);
    }

    /// Takes the instance out of the fabric while the function is stopped
    /// and puts it back when it runs again (see `card.rs`).
    pub(crate) fn sync_parking(&mut self, cx: &mut Cx<'_>) {
        let stopped = self.stopped();
        if stopped == self.parked.is_some() {
            return;
        }
        let Some(h) = cx.shared.fabric.hca(self.index) else {
            return;
        };
        match self.parked.take() {
            Some(parked) => *h = *parked,
            None => {
                let standin = new_instance(self.index);
                self.parked = Some(Box::new(std::mem::replace(h, standin)));
            }
        }
        cx.shared.refresh_more();
    }

    /// The client is gone: whatever is held is rung and counted, then the
    /// function stops for good and lets go of the client's memory and
    /// eventfds.
    pub(crate) fn detach(&mut self, cx: &mut Cx<'_>) {
        self.finish(cx);
        self.detached = true;
        self.err_watch_at = None;
        self.slow_until = None;
        self.cmd_due = None;
        self.sync_parking(cx);
        let _ = self.bus.mem.unmap(0, 0, true);
        self.bus.vectors.clear();
    }

    /// The DMA address of UAR page `index` (the function's window).
    #[cfg(test)]
    pub(crate) fn uar_addr(&self, index: u32) -> u64 {
        self.fw.uar_addr(index)
    }

    /// The guest set or cleared Bus Master Enable. Commands posted while it
    /// was off run once it is on again.
    pub(crate) fn set_bus_master(&mut self, cx: &mut Cx<'_>, on: bool) {
        if on == self.bus_master {
            return;
        }
        info!(
            "bus mastering {}",
            if on {
                "on"
            } else {
                "off: no DMA, no interrupt"
            }
        );
        self.bus_master = on;
        self.sync_parking(cx);
        if on && self.fw.has_pending() && !self.hold_slow_command() && !self.delay_commands() {
            self.run_commands(cx);
            self.check_firmware();
        }
    }

    /// Whether the function may not run anything: a fault halted its
    /// firmware, its bus mastering is off, or its client is gone.
    pub(crate) fn stopped(&self) -> bool {
        self.fw.halted() || !self.bus_master || self.detached
    }

    /// A function-level reset the guest started: a reset, counted apart.
    pub(crate) fn flr(&mut self, cx: &mut Cx<'_>) {
        self.reset(cx);
        self.stats.flrs += 1;
    }

    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn sync_clock(&mut self, cx: &mut Cx<'_>) {
        let now = self.now();
        self.fw.set_time(now);
        cx.shared.fabric.set_time(now);
    }

    /// A BAR0 read of `data.len()` bytes at `offset`.
    pub(crate) fn bar0_read(&mut self, cx: &mut Cx<'_>, offset: u64, data: &mut [u8]) {
        self.flush_blueflame(cx);
        self.sync_clock(cx);
        data.fill(0);
        match decode_read(offset, self.settings.uars) {
            Target::InitSeg(o) => {
                let end = o + data.len();
                let mut dword = o & !3;
                while dword < end {
                    let bytes = self.fw.read32(dword).to_be_bytes();
                    for (i, b) in bytes.iter().enumerate() {
                        if let Some(d) = (dword + i).checked_sub(o).and_then(|j| data.get_mut(j)) {
                            *d = *b;
                        }
                    }
                    dword += 4;
                }
            }
            Target::Uar { index, offset } => {
                debug!("read of UAR {index} at {offset:#x} (UAR pages are write-only): 0");
            }
            Target::Test(o) => self.test_read(cx, o, data),
            Target::Msix | Target::Unbacked => {
                info!(
                    "BAR0 read of {} bytes at {offset:#x}: nothing there, 0",
                    data.len()
                );
            }
        }
        trace!("BAR0 read {offset:#x} [{}] = {data:02x?}", data.len());
    }

    /// A BAR0 write of `data` at `offset`.
    pub(crate) fn bar0_write(&mut self, cx: &mut Cx<'_>, offset: u64, data: &[u8]) {
        trace!("BAR0 write {offset:#x} [{}] = {data:02x?}", data.len());
        self.sync_clock(cx);
        match decode_write(offset, self.settings.uars) {
            Target::InitSeg(o) => {
                self.flush_blueflame(cx);
                self.init_seg_write(cx, o, data);
            }
            Target::Uar { index, offset: o } => self.uar_write(cx, index, o, data),
            Target::Test(o) => {
                self.flush_blueflame(cx);
                self.test_write(cx, o, data);
            }
            Target::Msix | Target::Unbacked => {
                self.flush_blueflame(cx);
                self.stray(offset, data, "no register there");
            }
        }
        if cx.shared.more {
            self.run_fabric(cx);
        }
    }

    fn stray(&mut self, offset: u64, data: &[u8], why: &str) {
        self.stats.stray_writes += 1;
        error!(
            "BAR0 write of {} bytes at {offset:#x} ({data:02x?}) ignored: {why}",
            data.len()
        );
    }

    fn init_seg_write(&mut self, cx: &mut Cx<'_>, o: usize, data: &[u8]) {
        // Registers are written a dword at a time (iowrite32be); a 64-bit
        // store is two of them, the lower address first.
        if !o.is_multiple_of(4) || !(data.len() == 4 || data.len() == 8) {
            self.stray(
                o as u64,
                data,
                "initialization segment registers are 32-bit",
            );
            return;
        }
        for (i, w) in data.chunks_exact(4).enumerate() {
            let v = u32::from_be_bytes([w[0], w[1], w[2], w[3]]);
            self.fw.write32(o + 4 * i, v);
        }
        if self.fw.has_pending()
            && self.bus_master
            && !self.hold_slow_command()
            && !self.delay_commands()
        {
            self.run_commands(cx);
        }
        self.check_firmware();
    }

    /// Whether the commands rung wait for `Settings::cmd_latency`: the
    /// first doorbell sets when they are due, [`Function::tick`] runs
    /// them (with any rung meanwhile) then.
    fn delay_commands(&mut self) -> bool {
        if self.settings.cmd_latency.is_zero() {
            return false;
        }
        if self.cmd_due.is_none() {
            let ns = u64::try_from(self.settings.cmd_latency.as_nanos()).unwrap_or(u64::MAX);
            self.cmd_due = Some(self.now().saturating_add(ns));
        }
        true
    }

    /// Runs the pending commands.
    fn run_commands(&mut self, cx: &mut Cx<'_>) {
        let Some(hca) = hca!(self, cx) else {
            return;
        };
        let done = self.fw.process(&mut self.bus, hca);
        let s = self.fw.stats();
        debug!(
            "command doorbell: {done} entries handed back ({} commands, {} failed so far)",
            s.commands, s.failed
        );
        self.run_fabric(cx);
    }

    /// Whether the pending command waits (`Settings::slow_opcode`): the
    /// first time it is seen, its deadline is set; [`Function::tick`]
    /// runs it then.
    fn hold_slow_command(&mut self) -> bool {
        if self.slow_until.is_some() {
            return true;
        }
        if self.settings.slow.is_zero()
            || self.fw.pending_opcode(&mut self.bus) != Some(self.settings.slow_opcode)
        {
            return false;
        }
        let ns = u64::try_from(self.settings.slow.as_nanos()).unwrap_or(u64::MAX);
        self.slow_until = Some(self.now().saturating_add(ns));
        self.stats.slowed += 1;
        info!(
            "command {:#06x} held for {} ms (--slow-opcode)",
            self.settings.slow_opcode,
            self.settings.slow.as_millis()
        );
        true
    }

    fn uar_write(&mut self, cx: &mut Cx<'_>, index: u32, o: usize, data: &[u8]) {
        let bit = 1u128.checked_shl(index).unwrap_or(0);
        if self.stale_uars & bit != 0 {
            if self.fw.uar_in_use(index) {
                self.stale_uars &= !bit;
            } else {
                // A page allocated before the last reset and not since:
                // a process of the old binding still rings it, which a
                // ConnectX ignores.
                self.stats.stale_doorbells += 1;
                trace!("store to UAR {index} at {o:#x} dropped: not allocated since the reset");
                return;
            }
        }
        if self.stopped() {
            // A dead device, or one that may not reach memory, takes the
            // store and does nothing with it.
            self.stats.halted_doorbells += 1;
            trace!("store to UAR {index} at {o:#x} dropped: the function is stopped");
            return;
        }
        // A held doorbell is rung before a store that does not continue
        // its copy lands: the model reads the doorbell's 8 bytes from the
        // register half, and another QP ringing the same half (kernel QPs
        // share a register) would have replaced them. A ConnectX takes
        // each doorbell write with the bytes it carried. So no branch
        // below has a held doorbell to ring but a BlueFlame store's own.
        let register = uar_register(o, data.len());
        let continues = match register {
            UarReg::BlueFlame { reg, half, at } => self.bf.continues(BfStore {
                uar: index,
                reg,
                half,
                at,
            }),
            _ => false,
        };
        if !continues {
            self.flush_blueflame(cx);
        }
        if o + data.len() > UAR_PAGE_SIZE || !self.bus.uars.store(index, o, data) {
            self.stray(
                u64::from(index) * UAR_PAGE_SIZE as u64 + o as u64,
                data,
                "store across UAR pages",
            );
            return;
        }
        let uar_addr = self.fw.uar_addr(index);
        let end = o + data.len();
        match register {
            UarReg::BlueFlame { reg, half, at } => {
                let now = self.now();
                let store = BfStore {
                    uar: index,
                    reg,
                    half,
                    at,
                };
                let rings = self.bf.store(store, data, now);
                for r in [rings.earlier, rings.this].into_iter().flatten() {
                    self.ring_send(cx, r);
                }
            }
            UarReg::CqDoorbell => {
                if end == UAR_CQ_DOORBELL_OFFSET + 8 {
                    let Some(hca) = hca!(self, cx) else {
                        return;
                    };
                    let r = hca.cq_doorbell(&mut self.bus, uar_addr);
                    if r == Err(DoorbellError::ArmMismatch) && self.arm_overtaken(cx, uar_addr) {
                        self.stats.overtaken += 1;
                        debug!("CQ arm overtaken by the next arm: the next doorbell arms the CQ");
                        return;
                    }
                    self.count_doorbell(cx, "CQ arm", index, r);
                }
            }
            UarReg::EqArm | UarReg::EqUpdate => {
                let arm = matches!(register, UarReg::EqArm);
                let last = if arm {
                    UAR_EQ_ARM_OFFSET
                } else {
                    UAR_EQ_UPDATE_OFFSET
                } + 4;
                if end == last {
                    let Some(hca) = hca!(self, cx) else {
                        return;
                    };
                    let r = hca.eq_doorbell(&mut self.bus, uar_addr, arm);
                    self.count_doorbell(cx, if arm { "EQ arm" } else { "EQ update" }, index, r);
                }
            }
            UarReg::None => {
                self.stray(
                    u64::from(index) * UAR_PAGE_SIZE as u64 + o as u64,
                    data,
                    "no doorbell register at this UAR offset",
                );
            }
        }
    }

    fn ring_send(&mut self, cx: &mut Cx<'_>, r: Ring) {
        if self.stopped() {
            self.stats.halted_doorbells += 1;
            return;
        }
        if r.blueflame_len != 0 {
            self.stats.blueflame += 1;
        }
        if r.cut {
            self.stats.blueflame_cut += 1;
            debug!(
                "BlueFlame copy to QP {:#x} cut short: rung as a plain doorbell",
                r.qpn
            );
        }
        // A BlueFlame copy is a posted write too: overtaken, its WQE is in
        // the SQ like the others, and the record is walked for it.
        if self.take_overtaken(cx, &r) {
            return;
        }
        let Some(hca) = hca!(self, cx) else {
            return;
        };
        let db = SendDoorbell {
            qpn: r.qpn,
            half: r.half,
            blueflame_len: r.blueflame_len,
        };
        // The register the store landed in: a process's QPs each use one
        // of their UAR page's registers.
        let res = hca.send_doorbell_at(&mut self.bus, &db, r.reg);
        // The record lies in guest memory, which the driver writes while
        // the device reads: it may have moved on between the look above
        // and the model's own read, so that the doorbell no longer names
        // the last WQE announced. Overtaken after all, as a ConnectX would
        // take it (WQEs up to the record's counter).
        if res == Err(DoorbellError::WqeMismatch) && self.take_overtaken(cx, &r) {
            self.stats.overtaken_late += 1;
            return;
        }
        if res.is_err() {
            self.describe_refused(cx, &r);
        }
        self.count_doorbell(cx, "send", r.uar, res);
    }

    /// If send doorbell `r` was overtaken ([`Function::overtaken`]), takes
    /// what waits by walking the record and returns `true`.
    fn take_overtaken(&mut self, cx: &mut Cx<'_>, r: &Ring) -> bool {
        let Some(take) = self.overtaken(cx, r) else {
            return false;
        };
        self.stats.overtaken += 1;
        debug!(
            "send doorbell of QP {:#x} overtaken by the next post: the record is walked",
            r.qpn
        );
        if take {
            let Some(hca) = hca!(self, cx) else {
                return true;
            };
            let res = hca.send_doorbell_record(&mut self.bus, r.qpn).map(drop);
            self.count_doorbell(cx, "send (record)", r.uar, res);
        }
        true
    }

    /// Logs what a refused send doorbell named against what the QP has.
    fn describe_refused(&mut self, cx: &mut Cx<'_>, r: &Ring) {
        let Ok(reg) = bf_half_offset(usize::from(r.reg), r.half) else {
            return;
        };
        let mut bytes = [0u8; 8];
        let at = self.fw.uar_addr(r.uar).saturating_add(reg as u64);
        if hca_model::mem::DmaMemory::read(&mut self.bus, at, &mut bytes).is_err() {
            return;
        }
        let word = SendDoorbellWord::decode(&bytes);
        let Some(hca) = hca!(self, cx) else {
            return;
        };
        let Some(info) = hca.query_qp(r.qpn) else {
            return;
        };
        let posted = hca.send_posted(&mut self.bus, r.qpn);
        let mut rec = [0u8; 8];
        let _ = hca_model::mem::DmaMemory::read(&mut self.bus, info.dbr_addr, &mut rec);
        // (The SQ's slot is not shown: a QP's ring may be paged, and its
        // address in the QP is then an offset in the first page.)
        error!(
            "  record at {:#x}: {rec:02x?}; executed up to {}",
            info.dbr_addr, info.sq_ci
        );
        error!(
            "send doorbell of QP {:#x} (register {} half {}, BlueFlame {} bytes): WQE {} ds {} opcode {:#x}; QP {:?}, SQ of {} WQEBBs, accepted up to {}, record {:?} ahead",
            r.qpn,
            r.reg,
            r.half,
            r.blueflame_len,
            word.wqe_index,
            word.ds,
            word.opcode,
            info.state,
            info.sq_wqebbs,
            info.sq_pi,
            posted
        );
    }

    /// Whether send doorbell `r` (plain, or a BlueFlame copy, which starts
    /// with the same 8 bytes) was overtaken: the driver posted again,
    /// moving the doorbell record on, before this doorbell's store reached
    /// the device. Stores to the BAR are posted writes, which QEMU queues
    /// on the vfio-user socket: under load a doorbell may arrive many
    /// posts late, even more than a ring's worth (the device meanwhile
    /// works from the records). A ConnectX takes WQEs up to the record's
    /// counter whatever index the doorbell names, and ignores a producer
    /// index it is already past; the model is stricter (the doorbell must
    /// name the last WQE the record announces), which a synchronous
    /// software HCA can ask of its providers but a device behind posted
    /// writes cannot.
    ///
    /// `Some(true)`: new WQEs wait and the doorbell does not name the last
    /// of them (it names an earlier one, or one already taken): take them
    /// all by walking the record (each control segment checked).
    /// `Some(false)`: nothing new waits (a walk for an earlier doorbell
    /// took its WQE); a ConnectX ignores it as well. `None`: it names the
    /// last WQE the record announces (a plain ring), or is malformed: the
    /// model checks it.
    fn overtaken(&mut self, cx: &mut Cx<'_>, r: &Ring) -> Option<bool> {
        let reg = bf_half_offset(usize::from(r.reg), r.half).ok()?;
        let addr = self.fw.uar_addr(r.uar).checked_add(reg as u64)?;
        let mut bytes = [0u8; 8];
        hca_model::mem::DmaMemory::read(&mut self.bus, addr, &mut bytes).ok()?;
        let word = SendDoorbellWord::decode(&bytes);
        if word.ds == 0 {
            return None;
        }
        let end = word
            .wqe_index
            .wrapping_add(u16::from(ring::wqebb_count(word.ds)));
        let hca = hca!(self, cx)?;
        let info = hca.query_qp(r.qpn)?;
        let posted = hca.send_posted(&mut self.bus, r.qpn)?;
        let counter = info.sq_pi.wrapping_add(posted);
        // How far past the accepted counter the doorbell's WQE ends, in the
        // 16-bit counters: within what the record announces, or not new.
        let ahead = end.wrapping_sub(info.sq_pi);
        if posted == 0 {
            return Some(false);
        }
        if ahead == 0 || ahead > posted {
            // Older than what was taken; later posts wait, and their own
            // doorbells are queued behind this one: take them now.
            return Some(true);
        }
        if end == counter {
            // It names the last WQE the record announces: a plain ring.
            return None;
        }
        Some(true)
    }

    /// Whether the CQ arm doorbell on the UAR page at `uar_addr` was
    /// overtaken: its CQ's doorbell record already holds another arm,
    /// written by the driver after this doorbell's store, which as a posted
    /// write reached the device late. The later arm's own doorbell follows.
    fn arm_overtaken(&mut self, cx: &mut Cx<'_>, uar_addr: u64) -> bool {
        let mut db = [0u8; 8];
        let at = uar_addr + UAR_CQ_DOORBELL_OFFSET as u64;
        if hca_model::mem::DmaMemory::read(&mut self.bus, at, &mut db).is_err() {
            return false;
        }
        let Ok(db) = UarCqDoorbell::decode(&db) else {
            return false;
        };
        let Some(info) = hca!(self, cx).and_then(|h| h.query_cq(db.cqn)) else {
            return false;
        };
        let mut rec = [0u8; CQ_DBR_SIZE];
        if hca_model::mem::DmaMemory::read(&mut self.bus, info.dbr_addr, &mut rec).is_err() {
            return false;
        }
        let Ok(rec) = CqDbRec::decode(&rec) else {
            return false;
        };
        // Any other arm in the record is a later one: the record is
        // rewritten before every arm doorbell, so it holds the last arm.
        // (A driver that rang without writing the record would leave an
        // arm there that never fires: its CQ's events would not come.)
        rec.arm != db.arm
    }

    fn count_doorbell<E: std::fmt::Debug>(
        &mut self,
        cx: &mut Cx<'_>,
        what: &str,
        uar: u32,
        r: Result<(), E>,
    ) {
        match r {
            Ok(()) => {
                self.stats.doorbells += 1;
                trace!("{what} doorbell on UAR {uar} accepted");
                self.run_fabric(cx);
            }
            Err(e) => {
                self.stats.doorbell_errors += 1;
                error!("{what} doorbell on UAR {uar} refused by the model: {e:?}");
            }
        }
    }

    fn flush_blueflame(&mut self, cx: &mut Cx<'_>) {
        if let Some(r) = self.bf.flush() {
            self.ring_send(cx, r);
        }
    }

    /// Executes the queues of the fabric (this function's and the others'
    /// that are not stopped).
    pub(crate) fn run_fabric(&mut self, cx: &mut Cx<'_>) {
        if self.stopped() {
            // The HCA executes nothing more (see `Firmware::halted`); its
            // instance is out of the fabric, whose work is the others'.
            cx.shared.refresh_more();
            return;
        }
        self.sync_clock(cx);
        cx.run(self.index, &mut self.bus);
        self.arm_err_watch();
    }

    /// Arms the watch of QPs in ERR (a QP may have entered ERR).
    pub(crate) fn arm_err_watch(&mut self) {
        if self.err_watch_at.is_none() {
            self.err_watch_at = Some(self.now().saturating_add(ERR_WATCH_NS));
        }
    }

    /// Reports refusals the firmware logged since the last call, and
    /// life-cycle changes.
    fn check_firmware(&mut self) {
        let total = self.fw.log().total();
        let injected_before = self.stats.injected;
        if total > self.fw_seen {
            let new = total - self.fw_seen;
            let kept: Vec<_> = self.fw.log().iter().copied().collect();
            let shown = kept.len().min(usize::try_from(new).unwrap_or(usize::MAX));
            for e in &kept[kept.len() - shown..] {
                if e.reject == Reject::Injected {
                    info!(
                        "firmware failed {} (opcode {:#06x}) on purpose (--fail-opcode)",
                        opcode_name(e.opcode),
                        e.opcode
                    );
                    self.stats.injected += 1;
                    continue;
                }
                error!(
                    "firmware refused {} (opcode {:#06x}, entry {}): {} (syndrome {:#010x}, {:?})",
                    opcode_name(e.opcode),
                    e.opcode,
                    e.slot,
                    e.reason(),
                    e.syndrome(),
                    e.code()
                );
            }
            if new > shown as u64 {
                error!(
                    "{} more refusals fell out of the firmware's log",
                    new - shown as u64
                );
            }
            // Injected failures were counted apart above (only those
            // still in the log can be told apart; the log keeps the last
            // ones, and injection fails a handful of commands at most).
            self.stats.fw_errors += new.saturating_sub(self.stats.injected - injected_before);
            self.fw_seen = total;
        }
        let state = self.fw.state();
        if state != self.state {
            let p = self.fw.page_counts();
            info!(
                "function {:?} -> {:?} (ISSI {}, {} pages held, {} commands run)",
                self.state,
                state,
                self.fw.issi(),
                p.held,
                self.fw.stats().commands
            );
            self.state = state;
        }
    }

    /// Timer work: rings a held doorbell whose time is up and runs the
    /// queues while work is left or a retry is due.
    pub(crate) fn tick(&mut self, cx: &mut Cx<'_>) {
        if self.detached {
            return;
        }
        let now = self.now();
        if self.slow_until.is_some_and(|d| d <= now) {
            self.slow_until = None;
            self.run_commands(cx);
            self.check_firmware();
        }
        if self.cmd_due.is_some_and(|d| d <= now) {
            self.cmd_due = None;
            if self.bus_master && !self.hold_slow_command() {
                self.run_commands(cx);
            }
            self.check_firmware();
        }
        if self.stopped() {
            // Nothing runs on a halted function; its queues wait for a
            // reset (or for bus mastering). The fabric's other work is
            // the other functions'.
            self.err_watch_at = None;
            cx.shared.refresh_more();
            return;
        }
        if self
            .bf
            .deadline(self.bf_idle_ns())
            .is_some_and(|d| d <= now)
        {
            self.flush_blueflame(cx);
        }
        let due = cx.shared.fabric.next_deadline().is_some_and(|d| d <= now);
        let mut in_err = 0;
        if self.err_watch_at.is_some_and(|d| d <= now) {
            // A ConnectX flushes receives posted to a QP in ERR without a
            // doorbell (mlx5 has no receive doorbell register): look at
            // the records of QPs in ERR, every ERR_WATCH while there are.
            in_err = hca!(self, cx).map_or(0, |h| h.watch_err_receives());
            self.err_watch_at = (in_err != 0).then(|| now.saturating_add(ERR_WATCH_NS));
        }
        // A watch that found no QP in ERR runs nothing (and so does not arm
        // itself again): an idle function does not wake.
        if cx.shared.more || due || in_err != 0 {
            self.run_fabric(cx);
        }
    }

    fn bf_idle_ns(&self) -> u64 {
        u64::try_from(self.settings.bf_idle.as_nanos()).unwrap_or(u64::MAX)
    }

    /// How long the caller may wait for the next message before calling
    /// [`Function::tick`] (`None`: no timer work pending).
    pub(crate) fn next_timeout(&mut self, cx: &mut Cx<'_>) -> Option<Duration> {
        if self.detached {
            return None;
        }
        if cx.shared.more {
            return Some(Duration::ZERO);
        }
        let now = self.now();
        if self.fw.halted() {
            let at = self.slow_until?;
            return Some(Duration::from_nanos(at.saturating_sub(now)));
        }
        let bf = self.bf.deadline(self.bf_idle_ns());
        let retry = cx.shared.fabric.next_deadline();
        let at = [bf, retry, self.err_watch_at, self.slow_until, self.cmd_due]
            .into_iter()
            .flatten()
            .min()?;
        Some(Duration::from_nanos(at.saturating_sub(now)))
    }

    /// Rings what is still held and runs what is left (the client is
    /// gone, but the counts should be final).
    pub(crate) fn finish(&mut self, cx: &mut Cx<'_>) {
        self.flush_blueflame(cx);
        self.check_firmware();
    }

    /// Whether anything the guest did was refused (see the module
    /// documentation).
    pub(crate) fn failed(&mut self, cx: &mut Cx<'_>) -> bool {
        self.stats.doorbell_errors != 0
            || self.stats.fw_errors != 0
            || self.stats.stray_writes != 0
            || self.bus.stats.dma_faults != 0
            || self.events_dropped(cx) != 0
    }

    /// EQEs the device could not write: an EQ overrun (the driver left
    /// more events unconsumed than the EQ holds), which a ConnectX treats
    /// as fatal, or an event with no EQ to go to.
    fn events_dropped(&mut self, cx: &mut Cx<'_>) -> u64 {
        hca!(self, cx).map_or(0, |h| h.stats().events_dropped)
    }

    /// One line per area: what the function did.
    pub(crate) fn summary(&mut self, cx: &mut Cx<'_>) -> Vec<String> {
        let fw = self.fw.stats();
        let p = self.fw.page_counts();
        let s = self.stats;
        let b = self.bus.stats;
        let h = hca!(self, cx).map(|h| *h.stats()).unwrap_or_default();
        vec![
            format!(
                "firmware: state {:?}, {} commands ({} failed, {} delivery errors, {} ignored \
                 doorbell bits), {} refusals logged, {} injected, {} held; pages held {}, \
                 given {}, returned {}",
                self.fw.state(),
                fw.commands,
                fw.failed,
                fw.delivery_errors,
                fw.ignored,
                s.fw_errors,
                s.injected,
                s.slowed,
                p.held,
                p.given_total,
                p.returned_total
            ),
            format!(
                "doorbells: {} accepted, {} refused; {} BlueFlame ({} cut short); {} overtaken by \
                 the next post ({} found late); {} stray BAR0 writes; {} resets ({} FLRs)",
                s.doorbells,
                s.doorbell_errors,
                s.blueflame,
                s.blueflame_cut,
                s.overtaken,
                s.overtaken_late,
                s.stray_writes,
                s.resets,
                s.flrs
            ),
            format!(
                "engine: {} WQEs executed ({} with errors), {} CQEs, {} completion events, {} async \
                 events ({} dropped)",
                h.wqes_executed, h.wqe_errors, h.cqes, h.comp_events, h.async_events, h.events_dropped
            ),
            format!(
                "bus: {} interrupts ({} for vectors without an eventfd), {} DMA faults",
                b.interrupts, b.lost_interrupts, b.dma_faults
            ),
            self.faults_summary(),
        ]
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::bus::UAR_BASE;
    use crate::card::Card;
    use mlx5_prm::init_seg::{CMDIF_REV, CMD_DBELL_OFFSET, FW_REV_OFFSET, INITIALIZING_OFFSET};

    /// One function on its own card, as the tests drive it.
    pub(crate) struct One(pub(crate) Card);

    impl One {
        pub(crate) fn new(s: Settings) -> One {
            One(Card::new(s, 1))
        }

        pub(crate) fn read(&mut self, offset: u64, data: &mut [u8]) {
            self.0.bar0_read(0, offset, data);
        }

        pub(crate) fn write(&mut self, offset: u64, data: &[u8]) {
            self.0.bar0_write(0, offset, data);
        }

        /// The function itself.
        pub(crate) fn f(&mut self) -> &mut Function {
            // PANIC: host test harness: the card has function 0.
            self.0.function(0).unwrap()
        }

        pub(crate) fn failed(&mut self) -> bool {
            self.0.failed(0)
        }

        pub(crate) fn next_timeout(&mut self) -> Option<Duration> {
            self.0.next_timeout()
        }

        pub(crate) fn tick(&mut self) {
            self.0.tick();
        }

        pub(crate) fn reset(&mut self) {
            self.0.reset(0);
        }

        pub(crate) fn flr(&mut self) {
            self.0.flr(0);
        }

        pub(crate) fn summary(&mut self) -> Vec<String> {
            self.0.summary(0)
        }

        pub(crate) fn run_fabric(&mut self) {
            self.0.on(0, |f, cx| f.run_fabric(cx));
        }
    }

    fn read32(f: &mut One, offset: u64) -> u32 {
        let mut b = [0u8; 4];
        f.read(offset, &mut b);
        u32::from_be_bytes(b)
    }

    /// The firmware asks for the reserve of table pages with its init
    /// pages: 64 one-page tables (user MRs of up to 1 MiB) fit it alone.
    #[test]
    fn table_pages_are_reserved() {
        let mut f = One::new(Settings::DEFAULT);
        let cfg = f.f().fw.config();
        assert_eq!(cfg.mtt_reserve, MTT_RESERVE);
        assert!(cfg.mtt_reserve >= 64);
        assert!(PAGE_SLOTS as u32 > 2 * (cfg.boot_pages + cfg.init_pages + cfg.mtt_reserve));
    }

    #[test]
    fn the_init_segment_reads_big_endian() {
        let mut f = One::new(Settings::DEFAULT);
        // fw_rev: minor 35 in the upper half, major 16 in the lower.
        assert_eq!(read32(&mut f, FW_REV_OFFSET as u64), 35 << 16 | 16);
        assert_eq!(read32(&mut f, 4) >> 16, u32::from(CMDIF_REV));
        assert_eq!(read32(&mut f, 4) & 0xffff, 1012);
        // A byte read takes the register's bytes in memory order.
        let mut b = [0u8; 1];
        f.read(3, &mut b);
        assert_eq!(b[0], 16);
        // Ready at once (the default readiness).
        assert_eq!(read32(&mut f, INITIALIZING_OFFSET as u64) >> 31, 0);
        assert!(!f.failed());
    }

    #[test]
    fn a_doorbell_before_the_queue_is_set_up_is_a_protocol_error() {
        let mut f = One::new(Settings::DEFAULT);
        f.write(CMD_DBELL_OFFSET as u64, &1u32.to_be_bytes());
        assert_eq!(f.f().stats.fw_errors, 1);
        assert!(f.failed());
    }

    #[test]
    fn commands_run_when_their_latency_is_up() {
        let mut f = One::new(Settings {
            cmd_latency: Duration::from_millis(30),
            ..Settings::DEFAULT
        });
        // The same protocol error as above, but only once the firmware
        // gets to the command: the doorbell write returns first.
        f.write(CMD_DBELL_OFFSET as u64, &1u32.to_be_bytes());
        assert_eq!(f.f().stats.fw_errors, 0);
        let wait = f.next_timeout().unwrap();
        assert!(wait <= Duration::from_millis(30) && wait > Duration::from_millis(5));
        // A second doorbell meanwhile does not push the time back.
        f.write(CMD_DBELL_OFFSET as u64, &1u32.to_be_bytes());
        assert!(f.next_timeout().unwrap() <= wait);
        std::thread::sleep(wait);
        f.tick();
        assert_eq!(f.f().stats.fw_errors, 1);
        assert!(f.failed());
    }

    #[test]
    fn stores_where_no_register_is_are_counted() {
        let mut f = One::new(Settings::DEFAULT);
        f.write(2 * 4096 + 0x100, &[0; 4]);
        f.write(crate::bar0::BAR0_SIZE - 8, &[0; 8]);
        f.write(0x10, &[0; 2]);
        assert_eq!(f.f().stats.stray_writes, 3);
    }

    #[test]
    fn a_cq_doorbell_for_no_cq_is_refused() {
        let mut f = One::new(Settings::DEFAULT);
        // CQN 5, ARM word 0: no such CQ on UAR 2.
        f.write(2 * 4096 + 0x20, &[0, 0, 0, 0, 0, 0, 0, 5]);
        assert_eq!(f.f().stats.doorbell_errors, 1);
        // The bytes landed in the device's copy of the page.
        let mut b = [0u8; 8];
        hca_model::mem::DmaMemory::read(&mut f.f().bus, UAR_BASE + 2 * 4096 + 0x20, &mut b)
            .unwrap();
        assert_eq!(b[7], 5);
    }

    #[test]
    fn a_lone_blueflame_store_is_rung_when_its_time_is_up() {
        let mut f = One::new(Settings {
            bf_idle: Duration::ZERO,
            ..Settings::DEFAULT
        });
        let mut ctrl = [0u8; 8];
        ctrl[4..].copy_from_slice(&(0x42u32 << 8 | 1).to_be_bytes());
        f.write(3 * 4096 + 0x800, &ctrl);
        assert_eq!(f.f().stats.doorbell_errors, 0, "held, not rung yet");
        assert_eq!(f.next_timeout(), Some(Duration::ZERO));
        f.tick();
        // No QP 0x42: the model refuses it.
        assert_eq!(f.f().stats.doorbell_errors, 1);
        assert_eq!(f.next_timeout(), None);
    }

    #[test]
    fn the_err_watch_stops_when_no_qp_is_in_err() {
        let mut f = One::new(Settings::DEFAULT);
        f.run_fabric();
        let t = f
            .next_timeout()
            .expect("the ERR watch is armed after a run");
        assert!(t <= Duration::from_millis(1));
        std::thread::sleep(t);
        f.tick();
        assert_eq!(
            f.next_timeout(),
            None,
            "no QP in ERR: an idle function sleeps"
        );
    }

    #[test]
    fn reset_starts_over() {
        let mut f = One::new(Settings::DEFAULT);
        f.write(4096 + 0x800, &[1; 8]);
        f.reset();
        assert_eq!(f.next_timeout(), None);
        assert_eq!(f.f().stats.resets, 1);
        let mut b = [0u8; 8];
        hca_model::mem::DmaMemory::read(&mut f.f().bus, UAR_BASE + 4096 + 0x800, &mut b).unwrap();
        assert_eq!(b, [0; 8]);
    }
}
