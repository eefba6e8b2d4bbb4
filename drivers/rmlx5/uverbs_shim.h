/* SPDX-License-Identifier: GPL-2.0 */
/*
 * C helpers of the uverbs layer (uverbs_shim.c), for what the Rust kernel
 * crate does not offer: anonymous-inode event files with a C
 * file_operations table whose callbacks are Rust functions, fasync,
 * pinning user pages with locked-memory accounting, vmap, contiguous
 * pages mapped for a device's DMA, and I/O mappings of UAR pages.
 */
#ifndef RMLX5_UVERBS_SHIM_H
#define RMLX5_UVERBS_SHIM_H

#include <linux/types.h>

struct device;
struct fasync_struct;
struct file;
struct mm_struct;
struct page;
struct poll_table_struct;
struct vm_area_struct;

/* Event-file callbacks, implemented in Rust (uverbs/event_file.rs). */
ssize_t rmlx5_event_file_read(struct file *filp, char __user *buf,
			      size_t count, loff_t *pos);
__poll_t rmlx5_event_file_poll(struct file *filp,
			       struct poll_table_struct *wait);
int rmlx5_event_file_fasync(int fd, struct file *filp, int on);
int rmlx5_event_file_release(struct inode *inode, struct file *filp);

struct file *rmlx5_event_file_create(void *priv);
bool rmlx5_is_event_file(struct file *filp);
int rmlx5_fasync_helper(int fd, struct file *filp, int on,
			struct fasync_struct **fa);
void rmlx5_kill_fasync(struct fasync_struct **fa);

struct mm_struct *rmlx5_pinned_charge(unsigned long npages);
void rmlx5_pinned_uncharge(struct mm_struct *mm, unsigned long npages);
long rmlx5_pin_user_pages(unsigned long start, unsigned long npages,
			  bool writable, struct page **pages);
void rmlx5_unpin_user_pages(struct page **pages, unsigned long npages,
			    bool dirty);
void *rmlx5_vmap_pages(struct page **pages, unsigned int npages);
void rmlx5_vunmap(void *addr);

struct page *rmlx5_alloc_page(void);
void rmlx5_free_page(struct page *page);
int rmlx5_dma_map_pages(struct device *dev, struct page *page, size_t len,
			u64 *dma);
void rmlx5_dma_unmap_pages(struct device *dev, u64 dma, size_t len);
int rmlx5_io_map_page(struct vm_area_struct *vma, u64 phys, bool wc,
		      const void *owner, const bool *revoked);
void rmlx5_io_revoke(const void *owner);
/* A store the fault handler completed in the process's place
 * (hca/store.rs: rmlx5_decode_store). */
struct rmlx5_store {
	u64 addr;
	u64 value;
	u32 size;
	u32 len;
};
/* Called after a fault on a page tracked with rmlx5_umap_add: `st` is the
 * store completed there (the page left unmapped), or NULL if the page was
 * mapped for the store to complete. */
typedef void (*rmlx5_umap_fault_fn)(const void *owner,
				    const struct rmlx5_store *st);
int rmlx5_umap_add(struct vm_area_struct *vma, const void *owner,
		   struct page *page, rmlx5_umap_fault_fn on_fault,
		   const bool *revoked);
void rmlx5_umap_zap(const void *owner, bool revoke);
int rmlx5_umap_populate(const void *owner);

#endif
