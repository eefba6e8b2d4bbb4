// SPDX-License-Identifier: GPL-2.0

//! The sizes of the object tables of the function's HCA instance (in
//! hca-model's `VecStorage`).

use hca_model::vec_storage::TableSizes;
pub(crate) use hca_model::vec_storage::VecStorage;

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

/// The sizes above.
pub(crate) const SIZES: TableSizes = TableSizes {
    pds: PDS,
    mrs: MRS,
    cqs: CQS,
    eqs: EQS,
    qps: QPS,
};
