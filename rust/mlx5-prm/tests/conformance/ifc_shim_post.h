// SPDX-License-Identifier: GPL-2.0
/*
 * Stand-ins that need the lifted structs (see ifc_shim.h): just the
 * members the lifted functions touch.
 */

struct mlx5_core_dev {
	struct mlx5_init_seg *iseg;
};

struct mlx5_cmd_msg {
	u32 len;
	struct mlx5_cmd_first first;
	void *next;
};

static struct mlx5_init_seg init_seg;
static struct mlx5_core_dev core_dev = { .iseg = &init_seg };
