// SPDX-License-Identifier: GPL-2.0
/*
 * C helpers of rmlx5's uverbs layer: only what the Rust kernel crate lacks.
 * No policy lives here; every decision is taken by the Rust callers.
 */
#include <linux/anon_inodes.h>
#include <linux/capability.h>
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
