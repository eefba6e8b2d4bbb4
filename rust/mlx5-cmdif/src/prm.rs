// SPDX-License-Identifier: GPL-2.0

//! The single path through which this crate reaches the mlx5 formats crate.
//!
//! Every other file names layouts as `super::prm::<module>`. On the host
//! this re-exports the `mlx5-prm` Cargo dependency. rmlx5.ko does not
//! compile this file: it declares the module inline instead, as
//! `mod prm { pub(crate) use crate::mlx5_prm::*; }`, pointing at its own
//! copy of the formats crate (see the crate documentation in `lib.rs`).

pub(crate) use mlx5_prm::*;
