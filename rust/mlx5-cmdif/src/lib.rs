// SPDX-License-Identifier: GPL-2.0

//! The driver side of the mlx5 command interface, and the bring-up and
//! teardown of a PCI function, as mlx5_core does them: written once, run by
//! the kernel's PCI backend over BAR0 and coherent DMA memory, and by host
//! tests over an emulated device (`hca-model`'s `fw::Firmware`).
//!
//! # Layers
//!
//! - `mlx5-prm` knows the bytes: initialization segment, queue entry,
//!   mailbox, command layouts, statuses.
//! - This crate drives them: [`cmdif::CmdIf`] hands the command queue to
//!   the device and runs commands through real queue entries and mailbox
//!   chains ([`cmdmem`]): one at a time through entry 0, polling the
//!   ownership bit, or several side by side on the lanes, started without
//!   waiting and finished once the embedder saw the entry handed back;
//!   [`function::Function`] brings a function up and down and answers
//!   page requests ([`pages`], [`caps`]).
//! - The embedder implements [`bus::Bus`]: registers, its DMA memory,
//!   pages to lend, a clock and a way to wait.
//!
//! See `Documentation/pci-backend.md` for the whole picture.
//!
//! # Using it
//!
//! ```text
//! let mut f = Function::new(CmdMem { addr, len: CMD_MEM_SIZE }, Config::default());
//! match f.bring_up(&mut bus) {
//!     Ok(summary) => { /* f.cmdif() runs further commands */ }
//!     Err(e) => { pr_err!("{e}"); f.teardown(&mut bus)?; }
//! }
//! // On PAGE_REQUEST EQEs: f.page_request(&mut bus, num_pages)?;
//! f.teardown(&mut bus)?;
//! ```
//!
//! The crate itself only polls (entry 0, bring-up, teardown, page
//! requests); a lane command is waited for by the embedder, which may
//! sleep until a command-completion EQE names its entry (the kernel does,
//! `drivers/rmlx5/cx/events.rs`). Every wait of the crate is bounded by
//! [`cmdif::Timeouts`]; every error is an [`error::Error`] that names the
//! command or the wait.
//!
//! # Constraints
//!
//! `no_std`, `core` only, no allocation, no `unsafe`, no panic reachable
//! (slices are reached with `get`, arithmetic is checked or saturating):
//! the same files are compiled into rmlx5.ko.
//!
//! # Building inside rmlx5.ko
//!
//! As for `hca-model`: the kernel includes the module files with `#[path]`,
//!
//! ```text
//! #[path = "../../rust/mlx5-cmdif/src"]
//! pub mod mlx5_cmdif {
//!     mod prm {
//!         pub(crate) use crate::mlx5_prm::*;
//!     }
//!     pub mod bus;
//!     // ... every module of this file except `prm`
//! }
//! ```
//!
//! so this file holds nothing but declarations, every module names its
//! siblings as `super::x` (never `crate::`), and the formats crate is
//! reached only through `super::prm`. Modules (mirror this list in the
//! kernel): bus, caps, cmdif, cmdmem, error, function, pages, prm.

#![no_std]

pub mod bus;
pub mod caps;
pub mod cmdif;
pub mod cmdmem;
pub mod error;
pub mod function;
pub mod pages;
pub mod prm;
