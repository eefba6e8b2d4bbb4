/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rmlx5 verbs API for kernel ULPs.
 *
 * The functions are implemented in Rust inside rmlx5.ko and exported with
 * EXPORT_SYMBOL_GPL by drivers/rmlx5/rmlx5_shim.c.
 */
#ifndef _RDMA_RMLX5_IB_H
#define _RDMA_RMLX5_IB_H

/**
 * rmlx5_ib_num_devices() - number of rmlx5 HCAs registered by the module.
 *
 * Return: the count of software HCA instances (rmlx5_0 ... rmlx5_{n-1}).
 */
int rmlx5_ib_num_devices(void);

#endif /* _RDMA_RMLX5_IB_H */
