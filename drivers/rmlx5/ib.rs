// SPDX-License-Identifier: GPL-2.0

//! Verbs objects of kernel ULPs: PD, MR, CQ, QP, on top of the software HCA.

pub mod cq;
pub mod mr;
pub mod qp;
pub(crate) mod uqp;

/// Maps a model control error to an errno.
pub(crate) fn model_err(e: crate::hca_model::error::Error) -> kernel::error::Error {
    use crate::hca_model::error::Error as M;
    use kernel::error::code::*;
    match e {
        M::Invalid | M::BadTransition => EINVAL,
        M::NoSpace => ENOMEM,
        M::Busy => EBUSY,
        M::NotFound => ENOENT,
    }
}
#[cfg(CONFIG_KUNIT)]
mod race_tests;
#[cfg(CONFIG_KUNIT)]
mod tests;
#[cfg(CONFIG_KUNIT)]
mod timer_tests;
