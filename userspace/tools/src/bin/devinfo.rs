// SPDX-License-Identifier: GPL-2.0

//! rmlx5-devinfo (placeholder).

fn main() {}
