// SPDX-License-Identifier: GPL-2.0

//! The object tables of the function's HCA instance, in `Vec`s.

use hca_model::cq::Cq;
use hca_model::eq::Eq;
use hca_model::mr::Mr;
use hca_model::pd::Pd;
use hca_model::qp::Qp;
use hca_model::table::{Slot, Storage, Tables};

/// Table sizes, as the kernel's software HCA has them (the function
/// reports their log2 in QUERY_HCA_CAP).
pub(crate) const PDS: usize = 1024;
/// Memory keys.
pub(crate) const MRS: usize = 4096;
/// Completion queues.
pub(crate) const CQS: usize = 4096;
/// Event queues: the command, async and page EQs plus one per vector.
pub(crate) const EQS: usize = 64;
/// Queue pairs.
pub(crate) const QPS: usize = 4096;

/// The five tables.
#[derive(Debug)]
pub(crate) struct VecStorage {
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
    /// Empty tables of the sizes above.
    pub(crate) fn new() -> Self {
        VecStorage {
            pds: slots(PDS),
            mrs: slots(MRS),
            cqs: slots(CQS),
            eqs: slots(EQS),
            qps: slots(QPS),
        }
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
