// SPDX-License-Identifier: GPL-2.0

//! The Rust side of the shim's interrupt controller (`rmlx5_shim.c`): a
//! linear irq domain with one interrupt per EQ, fired from an irq_work, and
//! one platform device per HCA that carries those interrupts.

use kernel::{
    error::to_result,
    ffi::{
        c_int,
        c_uint, //
    },
    prelude::*,
};

extern "C" {
    fn rmlx5_shim_create(nr_hcas: c_uint, irqs_per_hca: c_uint) -> c_int;
    fn rmlx5_shim_destroy();
    fn rmlx5_shim_raise_irq(hwirq: c_uint);
    fn rmlx5_shim_bh_disable();
    fn rmlx5_shim_bh_enable();
    fn rmlx5_shim_handle_irq_now(hwirq: c_uint);
    fn rmlx5_shim_hca_of_irq(virq: c_uint) -> c_int;
}

/// The interrupt controller and the platform devices, removed on drop.
pub(crate) struct Intc(());

impl Intc {
    /// Creates the domain with `nr_hcas * irqs_per_hca` interrupts and one
    /// platform device `rmlx5.<n>` per HCA.
    pub(crate) fn new(nr_hcas: u32, irqs_per_hca: u32) -> Result<Self> {
        // SAFETY: Plain C call; the shim keeps its state in one static and
        // is created once per module load (this type is created once, in
        // module init).
        to_result(unsafe { rmlx5_shim_create(nr_hcas, irqs_per_hca) })?;
        Ok(Self(()))
    }
}

impl Drop for Intc {
    fn drop(&mut self) {
        // SAFETY: `rmlx5_shim_create` succeeded; this unregisters the
        // platform devices, waits for queued irq_works and frees the domain.
        unsafe { rmlx5_shim_destroy() };
    }
}

/// Raises hardware interrupt `hwirq`: queues its irq_work, which calls
/// `generic_handle_irq` in hard-IRQ context. Safe in any context.
pub(crate) fn raise(hwirq: u32) {
    // SAFETY: The shim checks `hwirq` against its domain size and does
    // nothing when it has no domain.
    unsafe { rmlx5_shim_raise_irq(hwirq) };
}

/// Whether this context may deliver interrupts itself
/// ([`DirectIrqs::deliver`]): process context holding no spinlock, with
/// interrupts and bottom halves on ([`crate::work::may_sleep`]). Never on
/// PREEMPT_RT, where a spinlock leaves the preempt count at zero, and never
/// on kernels that do not count preemption, where it cannot be told.
pub(crate) fn may_handle_now() -> bool {
    !cfg!(CONFIG_PREEMPT_RT) && crate::work::may_sleep()
}

/// Bottom halves, and with them preemption and migration, off on this CPU
/// until dropped; made under the fabric lock by
/// [`super::SoftHca::locked_direct`] and given to [`DirectIrqs::deliver`].
pub(crate) struct BhOff(());

impl BhOff {
    /// Turns bottom halves off.
    ///
    /// # Safety
    ///
    /// The value must be dropped on this CPU with interrupts on and the
    /// section it opened properly nested (no spinlock taken after it still
    /// held then).
    pub(crate) unsafe fn new() -> Self {
        // SAFETY: Plain C call; the caller keeps the pairing (above).
        unsafe { rmlx5_shim_bh_disable() };
        Self(())
    }
}

impl Drop for BhOff {
    fn drop(&mut self) {
        // SAFETY: Pairs with `new` (its contract: interrupts on, this CPU,
        // nested). Softirqs raised meanwhile run here.
        unsafe { rmlx5_shim_bh_enable() };
    }
}

/// Interrupts raised under the fabric lock by a caller that delivers them
/// itself once the lock is released ([`super::SoftHca::locked_direct`]),
/// instead of through the shim's irq_work, whose self-IPI costs more than
/// the engine step that raised it under TCG (see
/// Documentation/benchmarking.md, "The interrupt delivered by its raiser").
pub(crate) struct DirectIrqs {
    hw: [u32; DirectIrqs::MAX],
    len: usize,
}

impl DirectIrqs {
    /// Distinct interrupts kept; more go through the irq_work.
    const MAX: usize = 8;

    pub(crate) const fn new() -> Self {
        Self {
            hw: [0; Self::MAX],
            len: 0,
        }
    }

    /// Keeps `hwirq` (once); false when there is no room for it.
    pub(crate) fn push(&mut self, hwirq: u32) -> bool {
        if self.hw[..self.len].contains(&hwirq) {
            return true;
        }
        match self.hw.get_mut(self.len) {
            Some(slot) => {
                *slot = hwirq;
                self.len += 1;
                true
            }
            None => false,
        }
    }

    /// Whether nothing was kept.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Delivers what was kept, in the order it was raised: each flow
    /// handler runs with interrupts off, and the softirqs they raise run
    /// when `bh` is dropped, at the end. Called with interrupts on and no
    /// spinlock held (the handlers take the fabric lock), `bh` made before
    /// the fabric lock was released, so that the task stayed on this CPU.
    pub(crate) fn deliver(&self, bh: BhOff) {
        for &hwirq in &self.hw[..self.len] {
            // SAFETY: The shim checks `hwirq` against its domain size;
            // bottom halves are off (`bh`), interrupts on and no spinlock
            // held (this method's contract), which is what the flow
            // handler needs outside hard-IRQ context.
            unsafe { rmlx5_shim_handle_irq_now(hwirq) };
        }
        drop(bh);
    }
}

/// The HCA whose platform device carries interrupt `virq`.
pub(crate) fn hca_of_irq(virq: u32) -> Result<usize> {
    // SAFETY: Plain C call; the shim only compares `virq` with its table.
    let r = unsafe { rmlx5_shim_hca_of_irq(virq) };
    usize::try_from(r).map_err(|_| ENODEV)
}
