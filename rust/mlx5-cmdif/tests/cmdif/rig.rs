// SPDX-License-Identifier: GPL-2.0

//! The test bench: a [`Bus`] over host memory in front of hca-model's
//! firmware and one HCA instance. The firmware runs when the driver waits
//! ([`Bus::relax`]) or, in [`Run::OnDoorbell`] mode, inside the doorbell
//! write. The clock is simulated: each relax advances it by `step_ns`.
//!
//! Every page the driver allocates is tracked, so a test can compare the
//! pages the driver has out with the pages the device holds; a driver DMA
//! access outside the command memory, or a device access outside the
//! command memory and the page arena, fails the test.

use std::collections::BTreeSet;

use hca_model::caps::Caps;
use hca_model::fw::pages::PageStore;
use hca_model::fw::{Firmware, FwConfig};
use hca_model::hca::Hca;
use hca_model::mem::{DmaFault, DmaMemory, Interrupt, Platform};
use mlx5_cmdif::bus::{Bus, DmaError, Wait};
use mlx5_cmdif::cmdmem::{CmdMem, CMD_MEM_SIZE};
use mlx5_prm::cmd_queue::{CMD_LAYOUT_SIZE, MAILBOX_SIZE};
use mlx5_prm::init_seg::CMD_DBELL_OFFSET;

/// Where the driver's command memory starts.
pub(crate) const BASE: u64 = 0x1_0000_0000;
/// Where the page arena starts (the driver's pages to lend).
pub(crate) const PAGES_BASE: u64 = 0x2_0000_0000;
/// Where the driver's extra mailbox blocks lie (`CmdIf::exec_ext`).
pub(crate) const EXT_BASE: u64 = 0x3_0000_0000;
/// Their size: 64 blocks of 1 KiB.
pub(crate) const EXT_LEN: usize = 64 * 1024;
/// Pages in the arena, and slots in the device's page table.
pub(crate) const PAGE_SLOTS: usize = 2048;
const PAGE: u64 = 4096;

/// The device's page table: a vector of slots.
pub(crate) struct Store(Vec<u64>);

impl PageStore for Store {
    fn slots(&self) -> &[u64] {
        &self.0
    }
    fn slots_mut(&mut self) -> &mut [u64] {
        &mut self.0
    }
}

pub(crate) use hca_model::vec_storage::VecStorage;

/// Host memory: the command memory and the page arena.
pub(crate) struct HostMem {
    cmd: Vec<u8>,
    pages: Vec<u8>,
    ext: Vec<u8>,
    /// Device accesses outside both.
    pub(crate) violations: Vec<String>,
    /// Interrupts raised (none expected in poll mode).
    pub(crate) irqs: usize,
}

impl HostMem {
    fn range(&mut self, addr: u64, len: usize) -> Option<&mut [u8]> {
        for (base, bytes) in [
            (BASE, &mut self.cmd),
            (PAGES_BASE, &mut self.pages),
            (EXT_BASE, &mut self.ext),
        ] {
            if let Some(off) = addr.checked_sub(base) {
                let off = usize::try_from(off).ok()?;
                if let Some(r) = bytes.get_mut(off..off.checked_add(len)?) {
                    return Some(r);
                }
            }
        }
        None
    }
}

impl DmaMemory for HostMem {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
        match self.range(addr, buf.len()) {
            Some(r) => {
                buf.copy_from_slice(r);
                Ok(())
            }
            None => {
                let len = buf.len();
                self.violations
                    .push(format!("device read {len} at {addr:#x}"));
                Err(DmaFault)
            }
        }
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), DmaFault> {
        match self.range(addr, data.len()) {
            Some(r) => {
                r.copy_from_slice(data);
                Ok(())
            }
            None => {
                let len = data.len();
                self.violations
                    .push(format!("device write {len} at {addr:#x}"));
                Err(DmaFault)
            }
        }
    }
}

impl Platform for HostMem {
    fn interrupt(&mut self, _irq: Interrupt) {
        self.irqs += 1;
    }
}

/// When the firmware runs the commands the driver posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Run {
    /// While the driver waits, as a device running beside the CPU.
    OnRelax,
    /// Inside the doorbell write, before the driver polls.
    OnDoorbell,
}

/// The device, its memory and the driver's pages.
pub(crate) struct Rig {
    pub(crate) fw: Firmware<Store>,
    pub(crate) hca: Hca<VecStorage>,
    pub(crate) mem: HostMem,
    /// The simulated clock, nanoseconds.
    pub(crate) now: u64,
    /// How far one relax moves the clock.
    pub(crate) step_ns: u64,
    pub(crate) run: Run,
    /// The length of the command memory handed to the driver.
    pub(crate) cmd_len: usize,
    free: Vec<u64>,
    /// Pages the driver has allocated and not freed.
    pub(crate) out: BTreeSet<u64>,
    /// Allocations that may still succeed (`None`: unlimited).
    pub(crate) alloc_budget: Option<usize>,
    /// Doorbell writes to ignore from now on.
    pub(crate) drop_doorbells: u32,
    /// Ignore every doorbell once the firmware has completed this many
    /// commands (a device that dies).
    pub(crate) die_after_commands: Option<u64>,
    /// Flip the signature byte of the next queue entry the driver writes.
    pub(crate) corrupt_next_entry: bool,
    /// Flip a data byte of the next whole mailbox block the driver reads.
    pub(crate) corrupt_next_block_read: bool,
    /// Addresses the driver freed that it had not allocated.
    pub(crate) unknown_frees: Vec<u64>,
    /// Calls of `relax`.
    pub(crate) relaxes: u64,
    /// The function vanishes (surprise removal) at this relax count: from
    /// then on its registers read all ones and writes go nowhere.
    pub(crate) vanish_at_relax: Option<u64>,
    /// The embedder's health check fails at this relax count
    /// (`Bus::fatal` answers true from then on).
    pub(crate) fatal_at_relax: Option<u64>,
}

impl Rig {
    /// A device built with `cfg`, whose firmware runs on relax; the
    /// clock moves 10 µs per relax.
    pub(crate) fn new(cfg: FwConfig) -> Rig {
        Rig::with_cmd_len(cfg, CMD_MEM_SIZE)
    }

    /// As [`Rig::new`] with `cmd_len` bytes of command memory.
    pub(crate) fn with_cmd_len(cfg: FwConfig, cmd_len: usize) -> Rig {
        Rig {
            fw: Firmware::new(cfg, Store(vec![0; PAGE_SLOTS])),
            hca: Hca::new(0, Caps::DEFAULT, VecStorage::uniform(64)),
            mem: HostMem {
                cmd: vec![0; cmd_len],
                pages: vec![0; PAGE_SLOTS * PAGE as usize],
                ext: vec![0; EXT_LEN],
                violations: Vec::new(),
                irqs: 0,
            },
            now: 0,
            step_ns: 10_000,
            run: Run::OnRelax,
            cmd_len,
            free: (0..PAGE_SLOTS as u64)
                .rev()
                .map(|i| PAGES_BASE + i * PAGE)
                .collect(),
            out: BTreeSet::new(),
            alloc_budget: None,
            drop_doorbells: 0,
            die_after_commands: None,
            corrupt_next_entry: false,
            corrupt_next_block_read: false,
            unknown_frees: Vec::new(),
            relaxes: 0,
            vanish_at_relax: None,
            fatal_at_relax: None,
        }
    }

    /// Whether the function has vanished.
    pub(crate) fn vanished(&self) -> bool {
        self.vanish_at_relax.is_some_and(|n| self.relaxes >= n)
    }

    /// The command memory to give the driver.
    pub(crate) fn cmd_mem(&self) -> CmdMem {
        CmdMem {
            addr: BASE,
            len: self.cmd_len,
        }
    }

    /// Takes a page of the arena for the test's own use (an EQ ring): it
    /// is never lent to the device.
    pub(crate) fn take_page(&mut self) -> u64 {
        self.free.remove(0)
    }

    /// Reads host memory as the test sees it (the command memory and the
    /// arena).
    pub(crate) fn peek(&mut self, addr: u64, buf: &mut [u8]) {
        buf.copy_from_slice(self.mem.range(addr, buf.len()).expect("host memory"));
    }

    /// Writes host memory outside the command interface (an EQ ring's
    /// owner bytes).
    pub(crate) fn poke(&mut self, addr: u64, data: &[u8]) {
        self.mem
            .range(addr, data.len())
            .expect("host memory")
            .copy_from_slice(data);
    }

    /// Lets the firmware run what is pending.
    pub(crate) fn process(&mut self) -> u32 {
        self.fw.process(&mut self.mem, &mut self.hca)
    }

    /// The pages the device holds are exactly the pages the driver has
    /// out, and no access went astray.
    pub(crate) fn assert_pages_consistent(&self) {
        let held: BTreeSet<u64> = self.fw.held_pages().iter().copied().collect();
        assert_eq!(held, self.out, "device pages differ from the driver's");
        assert!(self.mem.violations.is_empty(), "{:?}", self.mem.violations);
        assert!(self.unknown_frees.is_empty(), "{:?}", self.unknown_frees);
    }

    /// The device holds no page, every page is back in the arena, and
    /// the firmware logged no refusal.
    pub(crate) fn assert_clean(&self) {
        self.assert_pages_consistent();
        assert!(self.out.is_empty(), "{} pages still out", self.out.len());
        assert_eq!(self.free.len(), PAGE_SLOTS);
        let c = self.fw.page_counts();
        assert_eq!((c.held, c.given_total), (0, c.returned_total));
        assert_eq!(
            self.fw.log().total(),
            0,
            "{:?}",
            self.fw.log().iter().collect::<Vec<_>>()
        );
        assert_eq!(self.mem.irqs, 0, "poll mode raises no interrupt");
    }

    fn in_cmd_mem(&self, addr: u64, len: usize) -> bool {
        let inside =
            |base: u64, size: usize| addr >= base && addr + len as u64 <= base + size as u64;
        inside(BASE, self.cmd_len) || inside(EXT_BASE, EXT_LEN)
    }
}

impl Bus for Rig {
    fn read32(&mut self, offset: usize) -> u32 {
        if self.vanished() {
            return u32::MAX;
        }
        self.fw.read32(offset)
    }

    fn write32(&mut self, offset: usize, value: u32) {
        if self.vanished() {
            return;
        }
        if offset == CMD_DBELL_OFFSET {
            let dead = self
                .die_after_commands
                .is_some_and(|n| self.fw.stats().commands >= n);
            if dead || self.drop_doorbells > 0 {
                self.drop_doorbells = self.drop_doorbells.saturating_sub(1);
                return;
            }
        }
        self.fw.write32(offset, value);
        if self.run == Run::OnDoorbell && self.fw.has_pending() {
            self.process();
        }
    }

    fn dma_read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        assert!(
            self.in_cmd_mem(addr, buf.len()),
            "driver read outside its command memory at {addr:#x}"
        );
        buf.copy_from_slice(self.mem.range(addr, buf.len()).ok_or(DmaError)?);
        if self.corrupt_next_block_read && buf.len() == MAILBOX_SIZE {
            self.corrupt_next_block_read = false;
            buf[100] ^= 0x40;
        }
        Ok(())
    }

    fn dma_write(&mut self, addr: u64, data: &[u8]) -> Result<(), DmaError> {
        assert!(
            self.in_cmd_mem(addr, data.len()),
            "driver write outside its command memory at {addr:#x}"
        );
        let corrupt = self.corrupt_next_entry && data.len() == CMD_LAYOUT_SIZE;
        let dst = self.mem.range(addr, data.len()).ok_or(DmaError)?;
        dst.copy_from_slice(data);
        if corrupt {
            self.corrupt_next_entry = false;
            dst[61] ^= 0x01;
        }
        Ok(())
    }

    fn alloc_page(&mut self) -> Option<u64> {
        if let Some(b) = &mut self.alloc_budget {
            *b = b.checked_sub(1)?;
        }
        let p = self.free.pop()?;
        assert!(self.out.insert(p));
        Some(p)
    }

    fn free_page(&mut self, addr: u64) -> bool {
        if self.out.remove(&addr) {
            self.free.push(addr);
            true
        } else {
            self.unknown_frees.push(addr);
            false
        }
    }

    fn now_ns(&mut self) -> u64 {
        self.now
    }

    fn fatal(&mut self) -> bool {
        self.fatal_at_relax.is_some_and(|n| self.relaxes >= n)
    }

    fn relax(&mut self, _wait: Wait) {
        self.relaxes += 1;
        self.now += self.step_ns;
        self.fw.set_time(self.now);
        if self.fw.has_pending() {
            self.process();
        }
    }
}
