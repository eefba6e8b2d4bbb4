// SPDX-License-Identifier: GPL-2.0

//! Host tests of the software HCA, driven through a harness that plays the
//! kernel and the provider with the mlx5-prm encoders.

// Host-only test code: the kernel lint set's cast pedantry is relaxed here.
#![allow(missing_docs, unreachable_pub, dead_code)]
#![allow(clippy::cast_lossless, clippy::wrong_self_convention)]

mod cmd_driver;
mod cmd_setup;
mod harness;
mod mem;
mod provider;
mod retry;
mod ud_setup;

mod arming;
mod cmd_bringup;
mod cmd_errors;
mod cmd_faults;
mod cmd_mtt;
mod cmd_objects;
mod cmd_props;
mod cmd_query;
mod cmd_ud;
mod cmd_user_queues;
mod cmd_vport;
mod engines;
mod errors;
mod failure;
mod fastreg;
mod fastreg_faults;
mod fastreg_pages;
mod hostile;
mod props;
mod states;
mod ud;
mod ud_random;
mod ud_roce;
mod verbs;
mod watch;
mod wrap;
