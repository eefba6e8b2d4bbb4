// SPDX-License-Identifier: GPL-2.0
/*
 * C helpers of rmlx5's uverbs layer: only what the Rust kernel crate lacks.
 * No policy lives here; every decision is taken by the Rust callers.
 */
#include <linux/anon_inodes.h>
#include <linux/capability.h>
#include <linux/dma-mapping.h>
#include <linux/fs.h>
#include <linux/highmem.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/poll.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/sched/task_stack.h>
#include <linux/uaccess.h>
#include <linux/vmalloc.h>
#include <asm/ptrace.h>

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
 * Tracked mappings of one page each: UAR pages mapped into processes,
 * which the driver must be able to take back out of every process that
 * mapped them.
 *
 * - A software HCA's UAR page (ib_user.c, rdma-core's provider) is a
 *   kernel page, trapped: a doorbell store to it faults, and the fault
 *   either completes the store itself, the page left unmapped
 *   (rmlx5_umap_store), or inserts the page; either way it then calls
 *   `on_fault`, which is how the HCA learns of the doorbell. An inserted
 *   page is zapped again when the HCA goes idle, so the next store traps
 *   (rmlx5_umap_zap(.., false)).
 * - A PCI function's UAR page of a /dev/rmlx5_uverbs<n> context is a page
 *   of BAR0 mapped whole at mmap; when the context is disassociated from
 *   a function that goes away under its process, it is revoked
 *   (rmlx5_umap_zap(.., true)): later stores fault into a page of memory
 *   instead of the BAR, as ib_uverbs does for mlx5_ib.
 */
struct rmlx5_umap {
	struct list_head list;
	struct vm_area_struct *vma;
	/* What the mapping is of: zaps name it. */
	const void *owner;
	/* Inserted by the fault handler; NULL for a pre-mapped I/O page. */
	struct page *page;
	rmlx5_umap_fault_fn on_fault;
	/* The zap pass that last reached it. */
	u64 gen;
	/* Revoked: faults get `stand_in` (the entry holds a ref), set first. */
	struct page *stand_in;
	bool revoked;
};

/* Nests inside mmap_lock (VMA open, close and mmap run under it). */
static DEFINE_MUTEX(rmlx5_umaps_lock);
static LIST_HEAD(rmlx5_umaps);
static u64 rmlx5_umaps_gen;

static void rmlx5_umap_vm_open(struct vm_area_struct *vma)
{
	struct rmlx5_umap *old = vma->vm_private_data, *m;

	if (!old)
		return;
	/* A copy of the VMA (mremap): tracked too, or its faults fail. */
	m = kmemdup(old, sizeof(*m), GFP_KERNEL);
	vma->vm_private_data = m;
	if (!m)
		return;
	m->vma = vma;
	if (m->stand_in)
		get_page(m->stand_in);
	mutex_lock(&rmlx5_umaps_lock);
	list_add(&m->list, &rmlx5_umaps);
	mutex_unlock(&rmlx5_umaps_lock);
}

static void rmlx5_umap_vm_close(struct vm_area_struct *vma)
{
	struct rmlx5_umap *m = vma->vm_private_data;

	if (!m)
		return;
	mutex_lock(&rmlx5_umaps_lock);
	list_del(&m->list);
	mutex_unlock(&rmlx5_umaps_lock);
	if (m->stand_in)
		put_page(m->stand_in);
	kfree(m);
}

/* In the Rust crate (hca/store.rs). */
bool rmlx5_decode_store(const u8 *insn, size_t n, const u64 *gpr, u64 ip,
			struct rmlx5_store *out);

/*
 * Completes, in the process's place, the store that faulted on the trapped
 * page `page` of `vmf` (hca/store.rs says why and what is decoded): only
 * a write from user mode of a 64-bit process that is not single-stepping,
 * by an instruction the Rust decoder accepts, to exactly the faulting
 * address and within the page. Writes the bytes into the page, moves the
 * process past the instruction and fills `*st`. False, having changed
 * nothing, for anything else.
 */
static bool rmlx5_umap_store(struct vm_fault *vmf, struct page *page,
			     struct rmlx5_store *st)
{
#ifdef CONFIG_X86_64
	const unsigned long need = FAULT_FLAG_USER | FAULT_FLAG_WRITE;
	struct pt_regs *regs = task_pt_regs(current);
	unsigned long off = vmf->real_address & ~PAGE_MASK;
	/* REX, opcode, ModRM, SIB and a 32-bit displacement at most. */
	u8 insn[8];
	u64 gpr[16];
	void *kaddr;

	if ((vmf->flags & (need | FAULT_FLAG_REMOTE)) != need ||
	    !user_mode(regs) || !user_64bit_mode(regs) ||
	    (regs->flags & X86_EFLAGS_TF))
		return false;
	/* The text page just ran; if the 8 bytes are not all there, the
	 * mapping path takes the store. */
	if (copy_from_user_nofault(insn, (const void __user *)regs->ip,
				   sizeof(insn)))
		return false;
	gpr[0] = regs->ax;
	gpr[1] = regs->cx;
	gpr[2] = regs->dx;
	gpr[3] = regs->bx;
	gpr[4] = regs->sp;
	gpr[5] = regs->bp;
	gpr[6] = regs->si;
	gpr[7] = regs->di;
	gpr[8] = regs->r8;
	gpr[9] = regs->r9;
	gpr[10] = regs->r10;
	gpr[11] = regs->r11;
	gpr[12] = regs->r12;
	gpr[13] = regs->r13;
	gpr[14] = regs->r14;
	gpr[15] = regs->r15;
	if (!rmlx5_decode_store(insn, sizeof(insn), gpr, regs->ip, st))
		return false;
	if (st->addr != vmf->real_address || st->size > sizeof(st->value) ||
	    off + st->size > PAGE_SIZE)
		return false;
	kaddr = kmap_local_page(page);
	memcpy(kaddr + off, &st->value, st->size);
	kunmap_local(kaddr);
	regs->ip += st->len;
	return true;
#else
	return false;
#endif
}

static vm_fault_t rmlx5_umap_vm_fault(struct vm_fault *vmf)
{
	struct rmlx5_store st;
	struct rmlx5_umap *m = vmf->vma->vm_private_data;
	unsigned long addr = vmf->address & PAGE_MASK;
	vm_fault_t ret;

	if (!m)
		return VM_FAULT_SIGBUS;
	/* Pairs with the release in rmlx5_umap_zap: stand_in is set. */
	if (smp_load_acquire(&m->revoked)) {
		if (!m->stand_in)
			return VM_FAULT_SIGBUS;
		return vmf_insert_pfn(vmf->vma, addr, page_to_pfn(m->stand_in));
	}
	/* A pre-mapped I/O page never faults while it is not revoked. */
	if (!m->page)
		return VM_FAULT_SIGBUS;
	/*
	 * A trapped page: complete the store here if it is a doorbell the
	 * decoder knows, leaving the page unmapped so that the next store
	 * faults too; otherwise map the page.
	 */
	if (m->on_fault && rmlx5_umap_store(vmf, m->page, &st)) {
		m->on_fault(m->owner, &st);
		return VM_FAULT_NOPAGE;
	}
	ret = vmf_insert_page(vmf->vma, addr, m->page);
	if (m->on_fault)
		m->on_fault(m->owner, NULL);
	return ret;
}

static const struct vm_operations_struct rmlx5_umap_vm_ops = {
	.open = rmlx5_umap_vm_open,
	.close = rmlx5_umap_vm_close,
	.fault = rmlx5_umap_vm_fault,
};

/*
 * Tracks `vma` (one page, being mapped: its mmap_lock is held) as one of
 * `owner`'s, with `page` inserted at fault and `on_fault` called after, or
 * neither for an I/O page the caller mapped already. `-EIO` if `revoked`
 * is set (read under the lock rmlx5_umap_zap takes after its caller set
 * it, so a mapping is either refused or found by the revocation).
 */
int rmlx5_umap_add(struct vm_area_struct *vma, const void *owner,
		   struct page *page, rmlx5_umap_fault_fn on_fault,
		   const bool *revoked)
{
	struct rmlx5_umap *m = kzalloc(sizeof(*m), GFP_KERNEL);

	if (!m)
		return -ENOMEM;
	m->vma = vma;
	m->owner = owner;
	m->page = page;
	m->on_fault = on_fault;
	mutex_lock(&rmlx5_umaps_lock);
	if (revoked && READ_ONCE(*revoked)) {
		mutex_unlock(&rmlx5_umaps_lock);
		kfree(m);
		return -EIO;
	}
	vma->vm_ops = &rmlx5_umap_vm_ops;
	vma->vm_private_data = m;
	list_add(&m->list, &rmlx5_umaps);
	mutex_unlock(&rmlx5_umaps_lock);
	return 0;
}

/*
 * Calls `fn` on every mapping of `owner`, one process at a time under its
 * mmap_lock (read; which also orders the walk after an mmap still under
 * way) and rmlx5_umaps_lock. Skipped: a mapping whose process is exiting
 * (its mappings go with it), and one that munmap is taking apart: it is
 * out of the tree already, and munmap frees its page tables under the
 * read lock it downgraded to, before the close that untracks it, so
 * neither a zap nor an insertion may walk them. Process context.
 */
static void rmlx5_umap_each(const void *owner,
			    void (*fn)(struct rmlx5_umap *m, void *arg),
			    void *arg)
{
	struct rmlx5_umap *m;
	u64 gen;

	mutex_lock(&rmlx5_umaps_lock);
	gen = ++rmlx5_umaps_gen;
	mutex_unlock(&rmlx5_umaps_lock);
	for (;;) {
		struct mm_struct *mm = NULL;

		mutex_lock(&rmlx5_umaps_lock);
		list_for_each_entry(m, &rmlx5_umaps, list) {
			if (m->owner != owner || m->gen == gen)
				continue;
			if (mmget_not_zero(m->vma->vm_mm)) {
				mm = m->vma->vm_mm;
				break;
			}
			m->gen = gen;
		}
		mutex_unlock(&rmlx5_umaps_lock);
		if (!mm)
			break;
		mmap_read_lock(mm);
		mutex_lock(&rmlx5_umaps_lock);
		list_for_each_entry(m, &rmlx5_umaps, list) {
			if (m->owner != owner || m->gen == gen ||
			    m->vma->vm_mm != mm)
				continue;
			if (vma_lookup(mm, m->vma->vm_start) == m->vma)
				fn(m, arg);
			m->gen = gen;
		}
		mutex_unlock(&rmlx5_umaps_lock);
		mmap_read_unlock(mm);
		mmput(mm);
	}
}

/* What a zap does to each mapping (rmlx5_umap_zap). */
struct rmlx5_umap_zap_args {
	bool revoke;
	/* With `revoke`: the page faults get from then on, or NULL. */
	struct page *stand_in;
};

static void rmlx5_umap_zap_one(struct rmlx5_umap *m, void *arg)
{
	struct rmlx5_umap_zap_args *z = arg;

	/* Before the zap: a fault right after finds it. */
	if (z->revoke && !m->revoked) {
		if (z->stand_in) {
			get_page(z->stand_in);
			m->stand_in = z->stand_in;
		}
		smp_store_release(&m->revoked, true);
	}
	zap_special_vma_range(m->vma, m->vma->vm_start,
			      m->vma->vm_end - m->vma->vm_start);
}

/*
 * Removes the page table entries of every mapping of `owner`, so that the
 * next store faults. With `revoke`, for good: the fault then maps a page
 * of memory (one for all of `owner`'s mappings). Process context.
 */
void rmlx5_umap_zap(const void *owner, bool revoke)
{
	struct rmlx5_umap_zap_args z = {
		.revoke = revoke,
		.stand_in = revoke ? alloc_page(GFP_KERNEL | __GFP_ZERO) : NULL,
	};

	rmlx5_umap_each(owner, rmlx5_umap_zap_one, &z);
	if (z.stand_in)
		put_page(z.stand_in);
}

static void rmlx5_umap_populate_one(struct rmlx5_umap *m, void *arg)
{
	int *mapped = arg;

	/* A trapped page that is not revoked, inserted as its fault would. */
	if (m->page && m->on_fault && !m->revoked &&
	    !vm_insert_page(m->vma, m->vma->vm_start, m->page))
		(*mapped)++;
}

/*
 * Inserts the page of every trapped mapping of `owner` that has none, as a
 * fault on it would (a page already there is left alone), so that the
 * stores that follow no longer fault, until rmlx5_umap_zap removes the
 * entries again. Returns how many it inserted. Process context.
 */
int rmlx5_umap_populate(const void *owner)
{
	int mapped = 0;

	rmlx5_umap_each(owner, rmlx5_umap_populate_one, &mapped);
	return mapped;
}

/*
 * Maps the device page at physical address `phys` (a UAR page in a BAR)
 * into `vma`, write-combined if `wc` (BlueFlame) else uncached, as
 * mlx5_ib maps UAR pages: an I/O mapping that is not copied on fork,
 * tracked as one of `owner`'s (rmlx5_umap_add: `-EIO` once `*revoked`;
 * the failed mmap's page table entries are then removed by the core).
 */
int rmlx5_io_map_page(struct vm_area_struct *vma, u64 phys, bool wc,
		      const void *owner, const bool *revoked)
{
	int err;

	if (vma->vm_end - vma->vm_start != PAGE_SIZE)
		return -EINVAL;
	vma->vm_page_prot = wc ? pgprot_writecombine(vma->vm_page_prot) :
				 pgprot_noncached(vma->vm_page_prot);
	vm_flags_set(vma, VM_IO | VM_PFNMAP | VM_DONTCOPY | VM_DONTEXPAND |
				  VM_DONTDUMP);
	err = io_remap_pfn_range(vma, vma->vm_start, phys >> PAGE_SHIFT,
				 PAGE_SIZE, vma->vm_page_prot);
	if (err)
		return err;
	return rmlx5_umap_add(vma, owner, NULL, NULL, revoked);
}

/* Revokes every mapping of `owner` (see rmlx5_umap_zap). */
void rmlx5_io_revoke(const void *owner)
{
	rmlx5_umap_zap(owner, true);
}
