// SPDX-License-Identifier: GPL-2.0

//! [`Storage`] in `Vec`s, for embedders with an allocator: the in-process
//! backend of the provider, the emulated ConnectX (`cx-emu`) and the host
//! tests. Only with the `alloc` feature; the kernel keeps its own tables in
//! `KVVec`s and never builds this file.

use alloc::vec::Vec;

use super::cq::Cq;
use super::eq::Eq;
use super::mr::Mr;
use super::pd::Pd;
use super::qp::Qp;
use super::table::{Slot, Storage, Tables};

/// How many slots each table has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableSizes {
    /// Protection domains.
    pub pds: usize,
    /// Memory regions (keys).
    pub mrs: usize,
    /// Completion queues.
    pub cqs: usize,
    /// Event queues.
    pub eqs: usize,
    /// Queue pairs.
    pub qps: usize,
}

impl TableSizes {
    /// `n` slots in every table.
    pub const fn uniform(n: usize) -> Self {
        TableSizes {
            pds: n,
            mrs: n,
            cqs: n,
            eqs: n,
            qps: n,
        }
    }
}

/// The five object tables of one model instance.
#[derive(Debug)]
pub struct VecStorage {
    pds: Vec<Slot<Pd>>,
    mrs: Vec<Slot<Mr>>,
    cqs: Vec<Slot<Cq>>,
    eqs: Vec<Slot<Eq>>,
    qps: Vec<Slot<Qp>>,
}

fn slots<T>(n: usize) -> Vec<Slot<T>> {
    (0..n).map(|_| Slot::new()).collect()
}

impl VecStorage {
    /// Empty tables of `sizes`.
    pub fn new(sizes: TableSizes) -> Self {
        VecStorage {
            pds: slots(sizes.pds),
            mrs: slots(sizes.mrs),
            cqs: slots(sizes.cqs),
            eqs: slots(sizes.eqs),
            qps: slots(sizes.qps),
        }
    }

    /// Empty tables of `n` slots each.
    pub fn uniform(n: usize) -> Self {
        Self::new(TableSizes::uniform(n))
    }
}

impl Storage for VecStorage {
    fn tables(&mut self) -> Tables<'_> {
        Tables {
            pds: &mut self.pds,
            mrs: &mut self.mrs,
            cqs: &mut self.cqs,
            eqs: &mut self.eqs,
            qps: &mut self.qps,
        }
    }
}
