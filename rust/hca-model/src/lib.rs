// SPDX-License-Identifier: GPL-2.0

//! A software mlx5 HCA: it executes RC and UD queue pairs (and the GSI QP,
//! QP1) exactly as they sit in memory, in mlx5's formats, and answers with
//! mlx5 CQEs, EQEs and interrupts.
//!
//! The provider (user space or a kernel ULP) builds WQEs in the SQ, updates
//! the doorbell record and rings the UAR doorbell as for a ConnectX; the
//! embedder then tells the model (a "kick") and lets the engine run. The
//! model reads the doorbell record and the UAR page, checks them against
//! the SQ, gathers data through lkeys, delivers it to the responder QP on
//! the same or another instance, writes CQEs with the right owner bits,
//! turns armed CQs into COMP EQEs and armed EQs into interrupts.
//!
//! # Using it
//!
//! 1. Implement [`mem::Platform`] (DMA reads and writes, and the interrupt
//!    hook) and [`table::Storage`] (the object tables), or use
//!    [`table::ArrayStorage`].
//! 2. Create instances with [`hca::Hca::new`] and join them with
//!    [`fabric::Fabric::new`]. For datagrams, give each port its identity:
//!    [`hca::Hca::set_link_roce`], [`hca::Hca::set_port_mtu`] and the GID
//!    table ([`hca::Hca::set_gid`], see [`port`]).
//! 3. Create objects on an instance: [`hca::Hca::alloc_pd`],
//!    [`hca::Hca::create_mr`], [`hca::Hca::create_eq`],
//!    [`hca::Hca::create_cq`], [`hca::Hca::create_qp`], then
//!    [`hca::Hca::modify_qp`] through INIT, RTR and RTS with the peer's
//!    instance and QPN (RC) or the Q_Key (UD and GSI, see [`ud`]).
//! 4. After the provider rings a doorbell, call
//!    [`hca::Hca::send_doorbell`], [`hca::Hca::cq_doorbell`] or
//!    [`hca::Hca::eq_doorbell`] (and [`hca::Hca::recv_doorbell`] after
//!    posting receives to a QP in ERR), then [`fabric::Fabric::run`] with a
//!    budget until its report says no work is left.
//! 5. Advance the clock with [`fabric::Fabric::set_time`] (RNR and
//!    transport retries), at [`fabric::Fabric::next_deadline`].
//! 6. Receive interrupts through [`mem::Platform::interrupt`]: the EQ that
//!    fired, once per arming; the handler consumes EQEs by owner bit and
//!    re-arms with [`hca::Hca::eq_doorbell`].
//!
//! For an emulated ConnectX PCI function, [`fw::Firmware`] adds the device
//! side of the mlx5 command interface in front of an instance: the
//! initialization segment, the command queue and its mailboxes, page
//! management and the commands that create, modify and destroy the
//! objects above (see its module documentation).
//!
//! Behaviour choices (byte order of atomics, which side reports which
//! error, overrun, arming) are documented in the modules that implement
//! them: [`atomic`], [`respond`], [`exec`], [`ud`], [`cq`], [`eq`],
//! [`doorbell`], [`flush`].
//!
//! # Tests
//!
//! `cargo test -p hca-model` runs the unit tests and `tests/model`, whose
//! harness plays the kernel and the provider with the mlx5-prm encoders.
//! The randomized tests take `HCA_MODEL_SEED` and `HCA_MODEL_SCALE`
//! (a multiplier of their iteration counts) from the environment for long
//! runs; `cargo bench -p hca-model` prints the host benchmark.
//!
//! # Constraints
//!
//! `no_std`, `core` only, no allocation, no recursion, no `unsafe`, no
//! panic reachable from WQE bytes, doorbells or verbs arguments, bounded
//! work per call: the same files are compiled into rmlx5.ko.
//!
//! # Building inside rmlx5.ko
//!
//! Kbuild compiles one crate per module and has no Cargo dependencies, so
//! the kernel includes the module files below with `#[path]`, e.g.
//!
//! ```text
//! #[path = "../../rust/hca-model/src"]
//! pub(crate) mod hca_model {
//!     mod prm {
//!         pub(crate) use crate::mlx5_prm::*;
//!     }
//!     pub mod atomic;
//!     // ... every module of this file except `prm`
//! }
//! ```
//!
//! which is why this file holds nothing but declarations, why every module
//! names its siblings as `super::x` (never `crate::`), and why the formats
//! crate is reached only through `super::prm`: on the host [`prm`] re-exports
//! the `mlx5-prm` dependency, in the kernel an inline `mod prm` points at the
//! kernel's copy of it. Modules (mirror this list in the kernel):
//! atomic, caps, cq, dev, doorbell, eq, error, exec, fabric, flush, fw, hca,
//! mem, mr, pd, port, prm, qp, qp_modify, respond, ring, sched, stats, table,
//! timer, transfer, ud, wqe. `fw` has submodules in `fw/` (caps, cmd_hca,
//! cmd_qp, cmd_queue, cmd_res, exec, mailbox, pages, regs, reject), which
//! `fw.rs` declares itself, and `ud` in `ud/` (header, recv): the kernel
//! lists only `pub mod fw;` and `pub mod ud;`.

#![no_std]

#[cfg(feature = "alloc")]
extern crate alloc;

pub mod atomic;
pub mod caps;
pub mod cq;
pub mod dev;
pub mod doorbell;
pub mod eq;
pub mod error;
pub mod exec;
pub mod fabric;
pub mod flush;
pub mod fw;
pub mod hca;
pub mod mem;
pub mod mr;
pub mod pd;
pub mod port;
pub mod prm;
pub mod qp;
pub mod qp_modify;
pub mod respond;
pub mod ring;
pub mod sched;
pub mod stats;
pub mod table;
pub mod timer;
pub mod transfer;
pub mod ud;
#[cfg(feature = "alloc")]
pub mod vec_storage;
pub mod wqe;
