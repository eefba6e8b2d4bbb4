// SPDX-License-Identifier: GPL-2.0
/*
 * C helpers of rmlx5's uverbs layer: only what the Rust kernel crate lacks.
 * No policy lives here; every decision is taken by the Rust callers.
 */
#include <linux/anon_inodes.h>
#include <linux/capability.h>
#include <linux/dma-mapping.h>
#include <linux/fs.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/poll.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/vmalloc.h>

#include "uverbs_shim.h"

static const struct file_operations rmlx5_event_fops = {
	.owner = THIS_MODULE,
	.read = rmlx5_event_file_read,
	.poll = rmlx5_event_file_poll,
	.release = rmlx5_event_file_release,
	.fasync = rmlx5_event_file_fasync,
};

/*
 * An `[infinibandevent]` file, read-only, with `priv` as private_data.
 * Returns the file (the caller installs it in a reserved fd) or an
 * ERR_PTR. On success the file owns `priv`: its release callback gets it
 * back.
 */
struct file *rmlx5_event_file_create(void *priv)
{
	return anon_inode_getfile("[infinibandevent]", &rmlx5_event_fops, priv,
				  O_RDONLY);
}

int rmlx5_fasync_helper(int fd, struct file *filp, int on,
			struct fasync_struct **fa)
{
	return fasync_helper(fd, filp, on, fa);
}

/* Safe in hard-IRQ and BH context (kill_fasync only takes spinlocks). */
void rmlx5_kill_fasync(struct fasync_struct **fa)
{
	kill_fasync(fa, SIGIO, POLL_IN);
}

/*
 * Charges `npages` pinned pages to the current process, as ib_umem does:
 * against RLIMIT_MEMLOCK unless the caller has CAP_IPC_LOCK. Returns the
 * mm charged (with a reference for rmlx5_pinned_uncharge), or an ERR_PTR.
 */
struct mm_struct *rmlx5_pinned_charge(unsigned long npages)
{
	struct mm_struct *mm = current->mm;
	unsigned long lock_limit;
	u64 new_pinned;

	if (!mm)
		return ERR_PTR(-EINVAL);
	lock_limit = rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT;
	new_pinned = atomic64_add_return(npages, &mm->pinned_vm);
	if (new_pinned > lock_limit && !capable(CAP_IPC_LOCK)) {
		atomic64_sub(npages, &mm->pinned_vm);
		return ERR_PTR(-ENOMEM);
	}
	mmgrab(mm);
	return mm;
}

void rmlx5_pinned_uncharge(struct mm_struct *mm, unsigned long npages)
{
	atomic64_sub(npages, &mm->pinned_vm);
	mmdrop(mm);
}

/*
 * Pins `npages` pages of the current process from `start` (page aligned)
 * for long-term use. Returns npages, or a negative errno with nothing left
 * pinned.
 */
long rmlx5_pin_user_pages(unsigned long start, unsigned long npages,
			  bool writable, struct page **pages)
{
	unsigned int gup_flags = FOLL_LONGTERM | (writable ? FOLL_WRITE : 0);
	unsigned long done = 0;
	long ret;

	while (done < npages) {
		if (fatal_signal_pending(current)) {
			ret = -EINTR;
			goto fail;
		}
		ret = pin_user_pages_fast(start + (done << PAGE_SHIFT),
					  min_t(unsigned long, npages - done,
						PAGE_SIZE / sizeof(struct page *)),
					  gup_flags, pages + done);
		if (ret <= 0) {
			if (ret == 0)
				ret = -EFAULT;
			goto fail;
		}
		done += ret;
		cond_resched();
	}
	return npages;
fail:
	unpin_user_pages(pages, done);
	return ret;
}

void rmlx5_unpin_user_pages(struct page **pages, unsigned long npages,
			    bool dirty)
{
	unpin_user_pages_dirty_lock(pages, npages, dirty);
}

/* A contiguous kernel mapping of `npages` pages, or NULL. */
void *rmlx5_vmap_pages(struct page **pages, unsigned int npages)
{
	return vmap(pages, npages, VM_MAP, PAGE_KERNEL);
}

void rmlx5_vunmap(void *addr)
{
	vunmap(addr);
}

/* Whether `filp` is an `[infinibandevent]` file of this module. */
bool rmlx5_is_event_file(struct file *filp)
{
	return filp->f_op == &rmlx5_event_fops;
}

/*
 * A zeroed page, freed with rmlx5_free_page (it may be mapped into a
 * process with vm_insert_page, which takes a reference on it). NULL if out
 * of memory.
 */
struct page *rmlx5_alloc_page(void)
{
	return alloc_page(GFP_KERNEL_ACCOUNT | __GFP_ZERO | __GFP_NOWARN);
}

void rmlx5_free_page(struct page *page)
{
	__free_pages(page, 0);
}

/*
 * Maps `len` bytes of physically contiguous pages from `page` for DMA by
 * `dev`, both directions; 0 and the bus address in *dma, -ENOMEM, or
 * -EOPNOTSUPP where the mapping would need syncs.
 */
int rmlx5_dma_map_pages(struct device *dev, struct page *page, size_t len,
			u64 *dma)
{
	dma_addr_t a = dma_map_page(dev, page, 0, len, DMA_BIDIRECTIONAL);

	if (dma_mapping_error(dev, a))
		return -ENOMEM;
	/*
	 * The device and the process share the pages for their whole life,
	 * with no syncs in between: a mapping that needs them (a bounce
	 * buffer, a non-coherent device) cannot be used.
	 */
	if (dma_need_sync(dev, a)) {
		dma_unmap_page(dev, a, len, DMA_BIDIRECTIONAL);
		return -EOPNOTSUPP;
	}
	*dma = a;
	return 0;
}

void rmlx5_dma_unmap_pages(struct device *dev, u64 dma, size_t len)
{
	dma_unmap_page(dev, dma, len, DMA_BIDIRECTIONAL);
}

/*
 * Maps the device page at physical address `phys` (a UAR page in a BAR)
 * into `vma`, write-combined if `wc` (BlueFlame) else uncached, as
 * mlx5_ib maps UAR pages: an I/O mapping that is not copied on fork.
 */
int rmlx5_io_map_page(struct vm_area_struct *vma, u64 phys, bool wc)
{
	if (vma->vm_end - vma->vm_start != PAGE_SIZE)
		return -EINVAL;
	vma->vm_page_prot = wc ? pgprot_writecombine(vma->vm_page_prot) :
				 pgprot_noncached(vma->vm_page_prot);
	vm_flags_set(vma, VM_IO | VM_PFNMAP | VM_DONTCOPY | VM_DONTEXPAND |
				  VM_DONTDUMP);
	return io_remap_pfn_range(vma, vma->vm_start, phys >> PAGE_SHIFT,
				  PAGE_SIZE, vma->vm_page_prot);
}
