// SPDX-License-Identifier: GPL-2.0

//! mlx5-cmdif against hca-model's firmware: bring-up and teardown, waits
//! that time out, refused and undelivered commands, page requests, and
//! teardown after a bring-up that failed half way, commands in flight side
//! by side on the lanes and their completion events.

mod bringup;
mod errors;
mod lanes;
mod mkey;
mod pages;
mod rig;
mod vport;
