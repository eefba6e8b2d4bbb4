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

/// The HCA whose platform device carries interrupt `virq`.
pub(crate) fn hca_of_irq(virq: u32) -> Result<usize> {
    // SAFETY: Plain C call; the shim only compares `virq` with its table.
    let r = unsafe { rmlx5_shim_hca_of_irq(virq) };
    usize::try_from(r).map_err(|_| ENODEV)
}
