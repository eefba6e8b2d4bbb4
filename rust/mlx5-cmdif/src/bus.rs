// SPDX-License-Identifier: GPL-2.0

//! What the command interface needs from its embedder: the initialization
//! segment's registers, the driver's own DMA memory, pages to lend the
//! device, a clock, and somewhere to wait.
//!
//! The kernel's PCI glue implements [`Bus`] over BAR0 (`ioread32be` /
//! `iowrite32be`), a coherent DMA allocation and its page allocator; a host
//! test implements it over a byte array and a device model, running the
//! model's firmware from [`Bus::relax`] (or from the doorbell write).

/// A DMA address the embedder cannot reach: it lies outside the memory it
/// gave the command interface (a driver bug, never a device's doing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaError;

/// What the command interface is waiting for when it calls
/// [`Bus::relax`], so that the embedder can choose how to wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// The firmware's `initializing` bit (milliseconds to seconds: sleep;
    /// mlx5_core sleeps 2 ms between reads).
    FwInit,
    /// The ownership bit of a posted command (microseconds to
    /// milliseconds: `cpu_relax()`, or a short sleep once it takes long).
    Command,
    /// The device has not returned pages yet during teardown (sleep).
    Pages,
}

/// The embedder's side of the command interface (see the module
/// documentation).
///
/// # Ordering
///
/// Calls must reach the device in the order they are made: a DMA write
/// must be visible to the device before a later [`Bus::write32`] (the
/// kernel puts a `wmb()` before the doorbell, or uses `iowrite32be`, which
/// orders earlier coherent-memory stores), and a [`Bus::dma_read`] must not
/// return data older than an earlier one (`dma_rmb()` after reading the
/// ownership bit). The crate reads the ownership bit, then the entry and
/// the output mailboxes, with separate calls.
///
/// # Time
///
/// Every wait of the crate is bounded by [`Bus::now_ns`]: it gives up once
/// the clock has moved past the wait's timeout. The clock must therefore
/// advance while the crate calls [`Bus::relax`].
pub trait Bus {
    /// Reads the 32-bit register at byte `offset` of the initialization
    /// segment (BAR0), as `ioread32be` returns it.
    fn read32(&mut self, offset: usize) -> u32;

    /// Writes the 32-bit register at byte `offset`, as `iowrite32be`.
    fn write32(&mut self, offset: usize, value: u32);

    /// Copies `buf.len()` bytes from the driver's DMA memory at `addr`.
    /// The crate only reads inside the [`CmdMem`](super::cmdmem::CmdMem)
    /// it was given, and the extra blocks given to
    /// [`CmdIf::exec_ext`](super::cmdif::CmdIf::exec_ext).
    ///
    /// # Errors
    ///
    /// [`DmaError`] if the range is not the embedder's memory.
    fn dma_read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError>;

    /// Copies `data` into the driver's DMA memory at `addr` (inside the
    /// [`CmdMem`](super::cmdmem::CmdMem) and the extra blocks only).
    ///
    /// # Errors
    ///
    /// [`DmaError`] if the range is not the embedder's memory; nothing is
    /// written then.
    fn dma_write(&mut self, addr: u64, data: &[u8]) -> Result<(), DmaError>;

    /// Allocates one 4 KiB page, DMA-mapped and 4 KiB aligned, to lend to
    /// the device, and returns its DMA address; `None` if memory is short.
    /// The embedder keeps track of its pages; the crate only passes the
    /// address to the device and back to [`Bus::free_page`].
    fn alloc_page(&mut self) -> Option<u64>;

    /// Frees a page the device returned (or that the crate allocated and
    /// could not give). Returns `false` if `addr` is not a page
    /// [`Bus::alloc_page`] handed out and not yet freed: the device
    /// returned an address it was never given, which the crate reports.
    fn free_page(&mut self, addr: u64) -> bool;

    /// A monotonic clock in nanoseconds.
    fn now_ns(&mut self) -> u64;

    /// Called between two polls of a register or of the command queue.
    /// The kernel sleeps or relaxes the CPU here (see [`Wait`]); a host
    /// test lets its emulated firmware run.
    fn relax(&mut self, wait: Wait);

    /// Whether the embedder has found the function failed (its health
    /// check, run elsewhere: a fatal syndrome, a firmware that stopped
    /// counting, a reset behind the driver's back). A command waiting for
    /// its completion looks about once a millisecond and stops waiting,
    /// instead of running into its 60-second timeout. By default never.
    fn fatal(&mut self) -> bool {
        false
    }

    /// A command timed out: its entry stays with the device, which may
    /// complete it any time or never. The embedder may take that as a
    /// failure of the function. By default nothing happens.
    fn lost_command(&mut self, opcode: u16) {
        let _ = opcode;
    }
}
