// SPDX-License-Identifier: GPL-2.0

//! The core of the driver (`drivers/rmlx5/core/`): EQs and their interrupt
//! handler, and the BH dispatch of completion and async events. Named
//! `mlx5_core` in the crate because `core` is the Rust core library.

#[path = "core/dispatch.rs"]
pub(crate) mod dispatch;
#[path = "core/eq.rs"]
pub(crate) mod eq;
#[path = "core/events.rs"]
pub(crate) mod events;
