/* SPDX-License-Identifier: GPL-2.0 */
/* Functions of ib_core.c called from the Rust crate (drivers/rmlx5/ibdev.rs). */
#ifndef _RMLX5_IB_CORE_H
#define _RMLX5_IB_CORE_H

struct device;

/* Registers rmlx5_0 .. rmlx5_<nr - 1> with ib_core; all or none. */
int rmlx5_ibc_register(unsigned int nr);
/* Unregisters them (ULP clients' remove callbacks run first). */
void rmlx5_ibc_unregister(void);
/* Registers ConnectX function rmlx5_<index>, whose PCI device is dma_device. */
int rmlx5_ibc_add_pci(unsigned int index, struct device *dma_device);
/* Unregisters it, if it was registered (clients' remove callbacks first). */
void rmlx5_ibc_remove_pci(unsigned int index);

#endif
