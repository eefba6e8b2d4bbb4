// SPDX-License-Identifier: GPL-2.0

//! How the model reaches host memory and raises interrupts: the two hooks an
//! embedder implements.
//!
//! The model never dereferences a pointer. Queue buffers, doorbell records,
//! the UAR page and the data buffers behind memory regions are all named by
//! a 64-bit "DMA address" that only the embedder interprets: the kernel maps
//! it to pinned pages, a host test to offsets in a `Vec<u8>`. The model
//! reaches data buffers only after translating an lkey or rkey through its
//! MR table, so an embedder that refuses addresses it never handed out sees
//! every stray access.

/// The embedder could not read or write the requested DMA range (no memory
/// is mapped there). The model turns it into an error completion or an
/// ignored doorbell; it never panics on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaFault;

/// DMA-style access to host memory.
///
/// # Ordering
///
/// Calls must take effect in the order they are made, as seen by other CPUs
/// (the kernel puts `dma_wmb`/`dma_rmb`-strength barriers between calls, or
/// uses release stores and acquire loads). The model relies on it: it writes
/// a CQE's or EQE's body with one call and the byte holding the owner bit
/// with a later call, and reads a doorbell record before the WQEs it
/// announces.
pub trait DmaMemory {
    /// Fills `buf` with the bytes at `addr..addr + buf.len()`.
    ///
    /// # Errors
    ///
    /// [`DmaFault`] if any byte of the range is not accessible.
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), DmaFault>;

    /// Stores `data` at `addr..addr + data.len()`.
    ///
    /// # Errors
    ///
    /// [`DmaFault`] if any byte of the range is not accessible; the embedder
    /// must then not have written any of it.
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), DmaFault>;
}

/// An interrupt the model asks the embedder to raise: the EQ `eqn` of HCA
/// instance `hca` was armed and has received an EQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interrupt {
    /// Fabric index of the HCA instance.
    pub hca: u16,
    /// The EQ that fired.
    pub eqn: u8,
    /// The interrupt vector given when the EQ was created (the MSI-X vector
    /// index a ConnectX would use).
    pub vector: u16,
}

/// Everything the model needs from its embedder: memory and interrupts.
pub trait Platform: DmaMemory {
    /// Raises `irq`. Called at most once per arming of an EQ, from inside
    /// whichever model call wrote the EQE (a doorbell or an engine run), so
    /// the embedder should only queue the interrupt here (the kernel fires
    /// it from an `irq_work`), not handle it in place.
    fn interrupt(&mut self, irq: Interrupt);

    /// Whether [`Fabric::run`](super::fabric::Fabric::run) should stop
    /// after the step it just executed, whatever budget is left. An
    /// embedder whose interrupts can fire only after the engine returns (the
    /// kernel runs it under a lock with interrupts off) answers `true` once
    /// [`Platform::interrupt`] was called, so that a completion's interrupt
    /// is not held back by the rest of the budget. The default never stops.
    fn yield_engine(&self) -> bool {
        false
    }
}
