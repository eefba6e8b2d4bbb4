// SPDX-License-Identifier: GPL-2.0

//! [`Bus`] over a real function: BAR0 registers, one coherent region for
//! the command queue and mailboxes, and coherent pages lent to the device.

use core::mem::ManuallyDrop;
use kernel::sync::barrier::{
    dma_mb,
    Read, //
};
use kernel::{
    device::{
        Bound,
        Core, //
    },
    dma::Coherent,
    pci,
    prelude::*,
    sync::Arc,
    time::{
        delay::fsleep,
        Delta,
        Instant,
        Monotonic, //
    },
};

use super::bar::CxBar;
use super::buf::Buf;
use super::events::{
    CmdEvents,
    Live, //
};
use super::health::Fatal;
use crate::mlx5_cmdif::{
    bus::{
        Bus,
        DmaError,
        Wait, //
    },
    cmdmem::CMD_MEM_MAX,
    pages::PAGE_SIZE,
};

/// One page lent to the device.
type Page = Coherent<[u8; PAGE_SIZE as usize]>;

/// The embedder side of one function's command interface.
///
/// # Invariants
///
/// `cmd_mem` is `CMD_MEM_MAX` bytes of coherent memory mapped for the
/// function; every entry of `pages` is a page the device may own: it is
/// freed only when the device gives it back ([`Bus::free_page`]), and
/// what is left when the bus drops is kept for good.
pub(super) struct CxBus<'bound> {
    pdev: &'bound pci::Device<Bound>,
    bar: &'bound CxBar,
    /// Freed in `drop` only if `quiesced`; shared with the waiters of
    /// lane commands, which look at their entries without the function's
    /// lock.
    cmd_mem: ManuallyDrop<Arc<Buf>>,
    pages: KVec<Page>,
    /// The device holds nothing of `cmd_mem`: no command queue address was
    /// given, or the function was taken down without error since.
    quiesced: bool,
    epoch: Instant<Monotonic>,
    /// Set by the health poll when the function failed.
    fatal: Arc<Fatal>,
    /// Command events and the page EQ's consumer (shared with vector 0's
    /// handler).
    events: Arc<CmdEvents>,
    /// What the verbs backend's commands made and destroyed.
    live: Arc<Live>,
    /// Pages of extra mailbox blocks, four 1 KiB blocks each, for the one
    /// long command in flight (`CmdIf::exec_ext`, under the function's
    /// lock).
    ext: KVec<Buf>,
}

impl<'bound> CxBus<'bound> {
    /// Allocates the command memory of `pdev`, whose BAR0 is `bar`.
    pub(super) fn new(
        pdev: &'bound pci::Device<Core<'_>>,
        bar: &'bound CxBar,
        fatal: Arc<Fatal>,
        events: Arc<CmdEvents>,
    ) -> Result<Self> {
        let cmd_mem = ManuallyDrop::new(Arc::new(Buf::new(pdev, CMD_MEM_MAX)?, GFP_KERNEL)?);
        Ok(Self {
            fatal,
            events,
            live: Live::new()?,
            ext: KVec::new(),
            pdev,
            bar,
            cmd_mem,
            pages: KVec::new(),
            quiesced: true,
            epoch: Instant::now(),
        })
    }

    /// BAR0.
    pub(super) fn bar(&self) -> &'bound CxBar {
        self.bar
    }

    /// The function's device, for logging.
    pub(super) fn pdev(&self) -> &'bound pci::Device<Bound> {
        self.pdev
    }

    /// `len` bytes of zeroed coherent memory of the function (queue
    /// buffers).
    pub(super) fn alloc_buf(&self, len: usize) -> Result<Buf> {
        Buf::new(self.pdev, len)
    }

    /// Stores the 8 bytes `bytes`, in their order, at BAR0 offset
    /// `offset` with one 64-bit write, as mlx5's `mlx5_write64` does for
    /// the doorbells that must reach the device whole: a send doorbell in
    /// a BlueFlame register and the CQ doorbell. A device may take two
    /// 32-bit halves for a different store (the emulated ConnectX rings a
    /// send doorbell only on a store of at least 8 bytes), so this is not
    /// two [`Bus::write32`]s. Like `writel`, `writeq` orders the
    /// coherent-memory stores before it (the WQE and the doorbell record
    /// before the doorbell).
    pub(super) fn write64(&mut self, offset: usize, bytes: [u8; 8]) {
        // writeq stores its value little-endian, so the bytes land in
        // memory order whatever the CPU.
        if self
            .bar
            .try_write64(u64::from_le_bytes(bytes), offset)
            .is_err()
        {
            dev_warn!(self.pdev, "BAR0 write at {:#x} out of range\n", offset);
        }
    }

    /// Maps UAR page `index` (the driver's, from ALLOC_UAR) for its
    /// doorbells ([`CxBar::map_uar`]).
    pub(super) fn map_uar(&self, index: u32) -> Result {
        self.bar.map_uar(index)
    }

    /// The DMA address of the command memory.
    pub(super) fn cmd_mem_addr(&self) -> u64 {
        self.cmd_mem.addr()
    }

    /// The command memory, for a waiter that looks at its entry without
    /// the function's lock (it holds the function up meanwhile, see
    /// `CxBackend`).
    pub(super) fn cmd_mem(&self) -> Arc<Buf> {
        Arc::clone(&self.cmd_mem)
    }

    /// The function's command events.
    pub(super) fn events(&self) -> &Arc<CmdEvents> {
        &self.events
    }

    /// The verbs backend's object counts.
    pub(super) fn live(&self) -> &Arc<Live> {
        &self.live
    }

    /// Records whether the device may still write the command memory
    /// (a function being brought up, or one whose teardown failed).
    pub(super) fn set_quiesced(&mut self, quiesced: bool) {
        self.quiesced = quiesced;
    }

    /// Whether the health poll found the function failed.
    pub(super) fn is_fatal(&self) -> bool {
        self.fatal.is_set()
    }

    /// The failure flag, for the health poll.
    pub(super) fn fatal_flag(&self) -> &Arc<Fatal> {
        &self.fatal
    }

    /// Frees every page lent to the device, after the function failed
    /// and was written off: its bus mastering is off, so it can no longer
    /// write them (`Function::teardown` in internal error). Returns how
    /// many there were.
    pub(super) fn release_pages_of_failed(&mut self) -> usize {
        if !self.fatal.is_set() {
            return 0;
        }
        let n = self.pages.len();
        self.pages.clear();
        n
    }

    /// The buffer of DMA address `addr` and its offset there: the command
    /// memory, or a page of extra blocks.
    fn dma_at(&self, addr: u64) -> Result<(&Buf, usize), DmaError> {
        let cmd: &Buf = &self.cmd_mem;
        if let Some(o) = addr
            .checked_sub(cmd.addr())
            .and_then(|o| usize::try_from(o).ok())
            .filter(|&o| o < CMD_MEM_MAX)
        {
            return Ok((cmd, o));
        }
        self.ext
            .iter()
            .find_map(|b| {
                addr.checked_sub(b.addr())
                    .filter(|&o| o < PAGE_SIZE)
                    .map(|o| (b, o as usize))
            })
            .ok_or(DmaError)
    }

    /// `blocks` extra mailbox blocks (1 KiB aligned, in coherent pages of
    /// the function) for a command longer than entry 0's pool; returns
    /// their addresses. Given back with [`CxBus::free_ext`].
    pub(super) fn alloc_ext(&mut self, blocks: usize) -> Result<KVVec<u64>> {
        const PER_PAGE: usize = PAGE_SIZE as usize / 1024;
        let mut addrs = KVVec::with_capacity(blocks, GFP_KERNEL)?;
        self.ext.reserve(blocks.div_ceil(PER_PAGE), GFP_KERNEL)?;
        while addrs.len() < blocks {
            let page = Buf::new(self.pdev, PAGE_SIZE as usize)?;
            for k in 0..PER_PAGE.min(blocks - addrs.len()) {
                addrs.push(page.addr() + (k * 1024) as u64, GFP_KERNEL)?;
            }
            self.ext.push(page, GFP_KERNEL)?;
        }
        Ok(addrs)
    }

    /// Gives the extra blocks back once their command is over; `kept`
    /// (the command timed out: the device may still read them) leaks
    /// them instead, as the command memory is kept.
    pub(super) fn free_ext(&mut self, kept: bool) {
        if kept {
            for b in self.ext.drain_all() {
                core::mem::forget(b);
            }
        } else {
            self.ext.clear();
        }
    }
}

impl Bus for CxBus<'_> {
    fn read32(&mut self, offset: usize) -> u32 {
        // The registers are big-endian (ioread32be); a read the BAR cannot
        // serve looks like a device that fell off the bus.
        self.bar
            .try_read32(offset)
            .map_or(u32::MAX, u32::swap_bytes)
    }

    fn write32(&mut self, offset: usize, value: u32) {
        // `writel` orders the coherent-memory stores before it (the queue
        // entry before its doorbell), as iowrite32be does.
        if self.bar.try_write32(value.swap_bytes(), offset).is_err() {
            dev_warn!(self.pdev, "BAR0 write at {:#x} out of range\n", offset);
        }
    }

    fn dma_read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        let (mem, off) = self.dma_at(addr)?;
        // Nothing read here may be older than what was read before (the
        // ownership bit before the entry it hands back): dma_rmb().
        dma_mb(Read);
        mem.read(off, buf).map_err(|_| DmaError)
    }

    fn dma_write(&mut self, addr: u64, data: &[u8]) -> Result<(), DmaError> {
        let (mem, off) = self.dma_at(addr)?;
        mem.write(off, data).map_err(|_| DmaError)
    }

    fn alloc_page(&mut self) -> Option<u64> {
        let page = Page::zeroed(self.pdev.as_ref(), GFP_KERNEL).ok()?;
        let addr = page.dma_address();
        self.pages.push(page, GFP_KERNEL).ok()?;
        Some(addr)
    }

    fn free_page(&mut self, addr: u64) -> bool {
        match self.pages.iter().position(|p| p.dma_address() == addr) {
            Some(i) => {
                drop(self.pages.remove(i));
                true
            }
            None => false,
        }
    }

    fn fatal(&mut self) -> bool {
        self.fatal.is_set()
    }

    fn lost_command(&mut self, opcode: u16) {
        self.fatal.note_lost(opcode);
    }

    fn now_ns(&mut self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(0)
    }

    fn relax(&mut self, wait: Wait) {
        // mlx5_core's rhythm: 2 ms between reads of `initializing`, short
        // sleeps while a command runs, longer ones while pages come back.
        let us = match wait {
            Wait::FwInit => 2000,
            Wait::Command => 20,
            Wait::Pages => 1000,
        };
        fsleep(Delta::from_micros(us));
    }
}

impl Drop for CxBus<'_> {
    fn drop(&mut self) {
        // A late command completion would write the queue entry and the
        // output mailboxes: keep them unless the device let go.
        if self.quiesced {
            // SAFETY: `cmd_mem` is not used after this (we are in `drop`),
            // and it is dropped only here.
            unsafe { ManuallyDrop::drop(&mut self.cmd_mem) };
        } else {
            dev_err!(
                self.pdev,
                "keeping the command memory: the function was not taken down\n"
            );
        }
        // Pages the device did not give back may still be written by it
        // (a teardown that failed, or a probe that failed half-way):
        // freeing them could corrupt memory, so they are leaked, loudly.
        if !self.pages.is_empty() {
            dev_err!(
                self.pdev,
                "keeping {} page(s) the device did not return\n",
                self.pages.len()
            );
            for p in self.pages.drain_all() {
                core::mem::forget(p);
            }
        }
    }
}
