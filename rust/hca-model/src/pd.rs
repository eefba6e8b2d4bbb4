// SPDX-License-Identifier: GPL-2.0

//! Protection domains.
//!
//! A PD number is its slot index. A PD counts the MRs and QPs created in it
//! and cannot be freed while any remain.

/// A protection domain.
#[derive(Debug)]
pub struct Pd {
    /// MRs and QPs that name this PD.
    pub(super) users: u32,
}
