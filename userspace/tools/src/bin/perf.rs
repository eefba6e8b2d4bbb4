// SPDX-License-Identifier: GPL-2.0

//! rmlx5-perf (placeholder).

fn main() {}
