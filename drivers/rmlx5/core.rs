// SPDX-License-Identifier: GPL-2.0

//! The core of the driver (`drivers/rmlx5/core/`): the devices
//! `rmlx5_<n>` over their backends, their EQs and interrupt handler, their
//! lookup tables, and the BH dispatch of completion and async events.
//! Named `mlx5_core` in the crate because `core` is the Rust core library.
//! It names nothing of the layers above (`ib/`, `uverbs/`, the ULP API)
//! and no backend but through `backend::Backend`.

#[path = "core/device.rs"]
pub(crate) mod device;
#[path = "core/dispatch.rs"]
pub(crate) mod dispatch;
#[path = "core/eq.rs"]
pub(crate) mod eq;
#[path = "core/events.rs"]
pub(crate) mod events;
