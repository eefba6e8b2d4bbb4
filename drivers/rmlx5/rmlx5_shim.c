// SPDX-License-Identifier: GPL-2.0
/*
 * The C side of rmlx5.ko: only what the Rust kernel crate does not offer.
 *
 * Rust code cannot emit EXPORT_SYMBOL_GPL entries, so the ULP API that the
 * Rust crate defines with the C ABI is exported from here. No logic lives in
 * this file.
 */
#include <linux/export.h>
#include <linux/module.h>
#include <rdma/rmlx5_ib.h>

EXPORT_SYMBOL_GPL(rmlx5_ib_num_devices);
