/* SPDX-License-Identifier: GPL-2.0 */
/* Functions of rmlx5_shim.c called from the Rust crate. */
#ifndef _RMLX5_SHIM_H
#define _RMLX5_SHIM_H

#include <linux/types.h>

struct device;
struct work_struct;
struct workqueue_struct;

int rmlx5_shim_create(unsigned int nr_hcas, unsigned int irqs_per_hca);
void rmlx5_shim_destroy(void);
void rmlx5_shim_raise_irq(unsigned int hwirq);
void rmlx5_shim_bh_disable(void);
void rmlx5_shim_bh_enable(void);
void rmlx5_shim_handle_irq_now(unsigned int hwirq);
int rmlx5_shim_hca_of_irq(unsigned int virq);
void rmlx5_shim_flush_work(struct work_struct *work);
bool rmlx5_shim_queue_work_elsewhere(struct work_struct *work);
bool rmlx5_shim_queue_long(struct work_struct *work, bool here);
void rmlx5_shim_cond_resched(void);
bool rmlx5_may_sleep(void);
bool rmlx5_pci_has_driver_override(struct device *dev);
void rmlx5_pci_disable(struct device *dev);
int rmlx5_pci_request_bar0(struct device *dev);
void rmlx5_pci_release_bar0(struct device *dev);
void rmlx5_pci_clear_master(struct device *dev);
bool rmlx5_pci_decodes(struct device *dev);
struct rmlx5_poller;
struct rmlx5_poller *rmlx5_poller_start(void (*fn)(void *),
					unsigned int (*event)(void *, unsigned int),
					void *ctx, unsigned int ms,
					struct device *dev);
/* What the PCI core tells a function's poller (rmlx5_poller_start). */
enum {
	RMLX5_PCI_NONE = 0,
	RMLX5_PCI_RESET_PREPARE = 1,
	RMLX5_PCI_RESET_DONE = 2,
	RMLX5_PCI_NORMAL = 3,
	RMLX5_PCI_FROZEN = 4,
	RMLX5_PCI_PERM_FAILURE = 5,
	RMLX5_PCI_RESUME = 6,
	/* The answer of a poller that took the event. */
	RMLX5_PCI_TAKEN = 7,
};
void rmlx5_pci_install_err_handlers(struct device *dev);
void rmlx5_poller_stop(struct rmlx5_poller *p);
void rmlx5_pci_note_written_off(struct device *dev);
int rmlx5_pci_reset_if_written_off(struct device *dev);
int rmlx5_pci_recover(struct device *dev, struct workqueue_struct *wq,
		      unsigned int grace_ms);
struct workqueue_struct *rmlx5_reap_wq_alloc(void);
void rmlx5_reap_wq_destroy(struct workqueue_struct *wq);
/* The platform device of software HCA `hca` (parent of its ib_device). */
struct device *rmlx5_shim_hca_device(unsigned int hca);
/* The kernel's direct map, which the DMA MRs of ib_core ULPs cover. */
void rmlx5_shim_direct_map(u64 *start, u64 *len);
/*
 * Maps @len bytes of direct-mapped kernel memory at @addr for DMA by @dev
 * (both directions): the memory of a kernel MR on a PCI function.
 * -EINVAL if the range is not in the direct map, -ENOMEM if it cannot be
 * mapped.
 */
int rmlx5_shim_dma_map(struct device *dev, void *addr, size_t len, u64 *dma);
void rmlx5_shim_dma_unmap(struct device *dev, u64 dma, size_t len);

#endif
