// SPDX-License-Identifier: GPL-2.0

//! rmlx5-pingpong (placeholder).

fn main() {}
