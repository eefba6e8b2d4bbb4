// SPDX-License-Identifier: GPL-2.0

//! Verbs objects: PD, MR, CQ, QP, on any device behind `backend::Backend`
//! (kernel ULPs and ib_core), and the user QPs of the software HCA (`uqp`).

pub mod cq;
pub mod mr;
pub mod qp;
pub(crate) mod uqp;

#[cfg(CONFIG_KUNIT)]
mod race_tests;
#[cfg(CONFIG_KUNIT)]
mod tests;
#[cfg(CONFIG_KUNIT)]
mod timer_tests;
