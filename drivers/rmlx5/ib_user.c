// SPDX-License-Identifier: GPL-2.0
/*
 * rmlx5's ib_devices as uverbs devices: mlx5_ib's user ABI, so rdma-core's
 * own mlx5 provider (libmlx5), unmodified, drives rmlx5 through ib_uverbs.
 *
 * This file is what touches ib_core's and mlx5_ib's structures: the user
 * context and its UAR pages, mmap, the driver data of each command
 * (include/uapi/rdma/mlx5-abi.h, checked strictly: a size below the first
 * version, bytes past the known struct that are not zero, unknown flags
 * and reserved fields are -EINVAL; features rmlx5 does not have are
 * -EOPNOTSUPP, so that rdma-core falls back). What the values mean, and the
 * objects, are the Rust crate's (ibu.rs).
 *
 * UAR pages. A context gets the static UAR pages libmlx5 asks for (two
 * bfregs per page, one UAR per page, no BlueFlame: bf_reg_size 0, so the
 * provider rings with plain 8-byte doorbells). On the software HCA they
 * are kernel pages, mapped cached: mapping RAM write-combined would alias
 * the kernel's own mapping with another memory type. They are left
 * unmapped (VM_MIXEDMAP, a fault handler), because the software HCA
 * learns of a doorbell by the provider's store faulting (hca/trap.rs):
 * the fault handler completes a doorbell store itself, the page still
 * unmapped, and the HCA reads the record it names (hca/store.rs); any
 * other store maps the page, the HCA reads every doorbell record, and
 * when its poller goes idle it removes every mapping's page table entry
 * again (rmlx5_ibu_zap_uars), so the next store faults. During a stream
 * of doorbells the poller maps the pages itself (rmlx5_ibu_map_uars) and
 * reads the records while the stores no longer fault. On a
 * ConnectX function each is a page of BAR0 the function gave with
 * ALLOC_UAR, mapped write-combined through rdma_user_mmap_io (ib_core
 * tracks the mapping), and the provider's stores reach the device.
 *
 * Not here (yet): SRQ, UD, dynamic UARs, DEVX, the core clock page, ECE,
 * BlueFlame.
 */
#include <linux/list.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/sched/mm.h>
#include <linux/slab.h>
#include <rdma/ib_verbs.h>
#include <rdma/uverbs_ioctl.h>
#include <rdma/mlx5-abi.h>
#include <rdma/rmlx5_ib.h>

#include "ib_priv.h"
#include "uverbs_shim.h"

/* In the Rust crate (ibu.rs). */
int rmlx5_ibu_supported(int index);
void rmlx5_ibu_uar_fault(void);
void rmlx5_ibu_uar_store(int index, u32 offset, u64 value, u32 size);
struct rmlx5_ibu_uars;
int rmlx5_ibu_uars_new(int index, u32 n, struct rmlx5_ibu_uars **out);
void rmlx5_ibu_uars_free(struct rmlx5_ibu_uars *uars);
int rmlx5_ibu_uars_page(const struct rmlx5_ibu_uars *uars, u32 k, u64 *phys);
int rmlx5_ibu_create_cq(int index, const struct rmlx5_ibu_uars *uars,
			void *ibcq, u64 buf_addr, u64 db_addr, u32 entries,
			u32 comp_vector, struct rmlx5_ibu_cq **out, u32 *cqn);
int rmlx5_ibu_destroy_cq(struct rmlx5_ibu_cq *cq);
struct rmlx5_ibu_qp_args {
	u64 buf_addr;
	u64 db_addr;
	u32 sq_wqe_count;
	u32 rq_wqe_count;
	u32 rq_wqe_shift;
	u32 bfreg;
};
int rmlx5_ibu_create_qp(struct rmlx5_ib_pd *pd,
			const struct rmlx5_ibu_uars *uars,
			struct rmlx5_ibu_cq *send_cq,
			struct rmlx5_ibu_cq *recv_cq, void *ibqp,
			const struct rmlx5_ibu_qp_args *args,
			struct rmlx5_ibu_qp **out, u32 *qpn);
int rmlx5_ibu_modify_qp(struct rmlx5_ibu_qp *qp,
			const struct rmlx5_ib_qp_attr *attr, u32 mask);
int rmlx5_ibu_qp_state(struct rmlx5_ibu_qp *qp);
int rmlx5_ibu_destroy_qp(struct rmlx5_ibu_qp *qp);
int rmlx5_ibu_reg_mr(struct rmlx5_ib_pd *pd, u64 start, u64 length, u64 iova,
		     u32 access, struct rmlx5_ibu_mr **out, u32 *key);
int rmlx5_ibu_dereg_mr(struct rmlx5_ibu_mr *mr);
u32 rmlx5_ibu_pd_num(struct rmlx5_ib_pd *pd);

/* Called from the Rust crate. */
void rmlx5_ibu_cq_comp(struct ib_cq *ibcq);
void rmlx5_ibu_async(void *obj, bool is_qp, u8 type);
void rmlx5_ibu_zap_uars(int index);
int rmlx5_ibu_map_uars(int index);

/* mlx5's limits as the context reports them. */
#define RMLX5_IBU_MAX_BFREGS 512
#define RMLX5_IBU_BFREGS_PER_PAGE 2
/* The largest send WQE (16 WQEBBs; a ConnectX-5 reports the same) and
 * receive WQE. */
#define RMLX5_IBU_SQ_DESC_SZ 1024
#define RMLX5_IBU_RQ_DESC_SZ 512
/*
 * The HCA's QP table (hca.rs: MAX_QPS) and its largest rings (the model's
 * Caps: 2^15 WQEBBs in an SQ, 2^15 WQEs in an RQ), which ibu.rs checks
 * against the model's own figures.
 */
#define RMLX5_IBU_QP_TAB 16384
#define RMLX5_IBU_MAX_SQ_WQEBBS (1U << 15)
#define RMLX5_IBU_MAX_RQ_WQES (1U << 15)

struct rmlx5_ibu_ucontext {
	struct ib_ucontext ibuc;
	int index;
	u32 tot_bfregs;
	u32 nr_uars;
	/* A software HCA's UAR pages: ordinary pages, trapped. */
	struct page **uars;
	/* A ConnectX function's: pages of BAR0 (ibu.rs). */
	struct rmlx5_ibu_uars *cuars;
};

static struct rmlx5_ibu_ucontext *to_uctx(struct ib_ucontext *uc)
{
	return container_of(uc, struct rmlx5_ibu_ucontext, ibuc);
}

/*
 * The software HCAs' UAR mappings are tracked by uverbs_shim.c
 * (rmlx5_umap_add), each under the key of its HCA.
 */
static const char rmlx5_ibu_umap_key[RMLX5_IBC_MAX_DEVS];

/* Driver data: the caller's struct, with any longer tail all zero. */
static int rmlx5_ibu_copy_in(void *dst, size_t size, size_t min,
			     struct ib_udata *udata)
{
	if (udata->inlen < min)
		return -EINVAL;
	if (udata->inlen > size &&
	    !ib_is_udata_cleared(udata, size, udata->inlen - size))
		return -EINVAL;
	memset(dst, 0, size);
	return ib_copy_from_udata(dst, udata, min(udata->inlen, size));
}

static int rmlx5_ibu_copy_out(struct ib_udata *udata, const void *src,
			      size_t size)
{
	return ib_copy_to_udata(udata, (void *)src, min(udata->outlen, size));
}

/* User contexts. */

static void rmlx5_ibu_free_uars(struct rmlx5_ibu_ucontext *ctx)
{
	u32 i;

	for (i = 0; ctx->uars && i < ctx->nr_uars; i++)
		if (ctx->uars[i])
			__free_page(ctx->uars[i]);
	kfree(ctx->uars);
	ctx->uars = NULL;
	rmlx5_ibu_uars_free(ctx->cuars);
	ctx->cuars = NULL;
}

static int rmlx5_ibu_alloc_ucontext(struct ib_ucontext *uc,
				    struct ib_udata *udata)
{
	struct rmlx5_ibu_ucontext *ctx = to_uctx(uc);
	struct mlx5_ib_alloc_ucontext_req_v2 req;
	struct mlx5_ib_alloc_ucontext_resp resp = {};
	u32 total, i;
	int err;

	ctx->index = to_dev(uc->device)->index;
	err = rmlx5_ibu_supported(ctx->index);
	if (err)
		return err;
	/* Version 0 (two words) or version 2 up to lib_caps. */
	if (udata->inlen != sizeof(struct mlx5_ib_alloc_ucontext_req) &&
	    udata->inlen < offsetof(struct mlx5_ib_alloc_ucontext_req_v2,
				    max_cqe_version))
		return -EINVAL;
	err = rmlx5_ibu_copy_in(&req, sizeof(req), 0, udata);
	if (err)
		return err;
	/*
	 * libmlx5 asks for a DEVX context on every open and asks again
	 * without on failure. The request is taken and ignored, not refused:
	 * on 7.3 every failed alloc_ucontext leaks a reference to the
	 * calling task (ib_init_ucontext's error path frees the context
	 * without releasing what rdma_restrack_set_name took). No DEVX
	 * object or method is offered, so DEVX commands still fail.
	 */
	if ((req.flags & ~MLX5_IB_ALLOC_UCTX_DEVX) || req.comp_mask ||
	    req.reserved0 || req.reserved1 || req.reserved2)
		return -EINVAL;
	/* Dynamic UARs are not offered: the static pages below are. */
	if (req.lib_caps & ~(u64)(MLX5_LIB_CAP_4K_UAR | MLX5_LIB_CAP_DYN_UAR))
		return -EINVAL;
	total = ALIGN(req.total_num_bfregs, RMLX5_IBU_BFREGS_PER_PAGE);
	if (!total || req.num_low_latency_bfregs > total - 1)
		return -EINVAL;
	if (total > RMLX5_IBU_MAX_BFREGS)
		return -ENOMEM;
	ctx->tot_bfregs = total;
	ctx->nr_uars = total / RMLX5_IBU_BFREGS_PER_PAGE;
	/* A function's pages come from ALLOC_UAR; a software HCA's below. */
	err = rmlx5_ibu_uars_new(ctx->index, ctx->nr_uars, &ctx->cuars);
	if (err)
		return err;
	ctx->uars = ctx->cuars ? NULL :
		kcalloc(ctx->nr_uars, sizeof(*ctx->uars), GFP_KERNEL);
	if (!ctx->cuars && !ctx->uars)
		return -ENOMEM;
	for (i = 0; ctx->uars && i < ctx->nr_uars; i++) {
		ctx->uars[i] = alloc_page(GFP_KERNEL | __GFP_ZERO);
		if (!ctx->uars[i]) {
			rmlx5_ibu_free_uars(ctx);
			return -ENOMEM;
		}
	}

	resp.qp_tab_size = RMLX5_IBU_QP_TAB;
	resp.bf_reg_size = 0;
	resp.tot_bfregs = total;
	resp.cache_line_size = cache_line_size();
	resp.max_sq_desc_sz = RMLX5_IBU_SQ_DESC_SZ;
	resp.max_rq_desc_sz = RMLX5_IBU_RQ_DESC_SZ;
	resp.max_send_wqebb = RMLX5_IBU_MAX_SQ_WQEBBS;
	resp.max_recv_wr = RMLX5_IBU_MAX_RQ_WQES;
	/* libmlx5 checks an SRQ's size against this before it asks the
	 * kernel, which refuses SRQs with -EOPNOTSUPP (max_srq is 0). */
	resp.max_srq_recv_wr = RMLX5_IBU_MAX_RQ_WQES;
	resp.num_ports = 1;
	resp.cqe_version = 0;
	resp.cmds_supp_uhw = MLX5_USER_CMDS_SUPP_UHW_QUERY_DEVICE;
	if (to_dev(uc->device)->roce)
		resp.eth_min_inline = MLX5_USER_INLINE_MODE_NONE + 1;
	resp.log_uar_size = PAGE_SHIFT;
	resp.num_uars_per_page = 1;
	resp.response_length = min_t(size_t, udata->outlen, sizeof(resp));
	err = rmlx5_ibu_copy_out(udata, &resp, sizeof(resp));
	if (err)
		rmlx5_ibu_free_uars(ctx);
	return err;
}

static void rmlx5_ibu_dealloc_ucontext(struct ib_ucontext *uc)
{
	/* The file is released: no mapping of its pages is left. */
	rmlx5_ibu_free_uars(to_uctx(uc));
}

/*
 * A doorbell store to a UAR page of rmlx5_<index> faulted (in the faulting
 * process): `st` if the fault handler completed it, the page still
 * unmapped, NULL if it mapped the page.
 */
static void rmlx5_ibu_on_fault(const void *owner, const struct rmlx5_store *st)
{
	int index = (const char *)owner - rmlx5_ibu_umap_key;

	if (st)
		rmlx5_ibu_uar_store(index, st->addr & ~PAGE_MASK, st->value,
				    st->size);
	else
		rmlx5_ibu_uar_fault();
}

static int rmlx5_ibu_mmap(struct ib_ucontext *uc, struct vm_area_struct *vma)
{
	struct rmlx5_ibu_ucontext *ctx = to_uctx(uc);
	unsigned long cmd = (vma->vm_pgoff >> 8) & 0xff;
	unsigned long idx = vma->vm_pgoff & 0xff;

	switch (cmd) {
	case MLX5_IB_MMAP_REGULAR_PAGE:
	case MLX5_IB_MMAP_WC_PAGE:
	case MLX5_IB_MMAP_NC_PAGE:
		break;
	case MLX5_IB_MMAP_GET_CONTIGUOUS_PAGES:
		return -ENOSYS;
	case MLX5_IB_MMAP_CORE_CLOCK:
	case MLX5_IB_MMAP_ALLOC_WC:
	case MLX5_IB_MMAP_CLOCK_INFO:
	case MLX5_IB_MMAP_DEVICE_MEM:
		/*
		 * mlx5_ib's, not offered: libmlx5 then does without the clock
		 * pages, and mlx5dv_devx_alloc_uar's legacy path reports that
		 * dynamic UARs are not supported.
		 */
		return -EOPNOTSUPP;
	default:
		return -EINVAL;
	}
	if (vma->vm_pgoff >> 16 || idx >= ctx->nr_uars ||
	    vma->vm_end - vma->vm_start != PAGE_SIZE)
		return -EINVAL;
	if (ctx->cuars) {
		/*
		 * A page of the function's BAR0: write-combined as mlx5_ib
		 * maps it (uncached if asked), tracked by ib_core so that
		 * nothing maps it once the device is gone.
		 */
		pgprot_t prot = cmd == MLX5_IB_MMAP_NC_PAGE ?
			pgprot_noncached(vma->vm_page_prot) :
			pgprot_writecombine(vma->vm_page_prot);
		u64 phys;
		int err = rmlx5_ibu_uars_page(ctx->cuars, idx, &phys);

		if (err)
			return err;
		return rdma_user_mmap_io(uc, vma, phys >> PAGE_SHIFT, PAGE_SIZE,
					 prot, NULL);
	}
	if (ctx->index < 0 || ctx->index >= RMLX5_IBC_MAX_DEVS)
		return -EINVAL;
	vm_flags_set(vma, VM_MIXEDMAP | VM_DONTCOPY | VM_DONTEXPAND |
			  VM_DONTDUMP);
	/* The page goes in at the first store (the provider stored its
	 * doorbell record before it), which tells the HCA. */
	return rmlx5_umap_add(vma, &rmlx5_ibu_umap_key[ctx->index],
			      ctx->uars[idx], rmlx5_ibu_on_fault, NULL);
}

/*
 * Removes the page table entries of every UAR mapping of rmlx5_<index>, so
 * that the next store to one faults (rmlx5_umap_zap). Process context.
 */
void rmlx5_ibu_zap_uars(int index)
{
	if (index >= 0 && index < RMLX5_IBC_MAX_DEVS)
		rmlx5_umap_zap(&rmlx5_ibu_umap_key[index], false);
}

/*
 * Maps every trapped UAR page of rmlx5_<index> into the processes that
 * mapped it, as a fault would (rmlx5_umap_populate), so that their
 * doorbell stores no longer fault: the trap's poller, about to read the
 * records itself during a stream of doorbells (hca/trap.rs). Returns how
 * many pages it mapped. Process context.
 */
int rmlx5_ibu_map_uars(int index)
{
	if (index < 0 || index >= RMLX5_IBC_MAX_DEVS)
		return 0;
	return rmlx5_umap_populate(&rmlx5_ibu_umap_key[index]);
}

/* Events, from the Rust crate (BH context). */

void rmlx5_ibu_cq_comp(struct ib_cq *ibcq)
{
	void (*handler)(struct ib_cq *cq, void *cq_context);

	handler = READ_ONCE(ibcq->comp_handler);
	if (handler)
		handler(ibcq, ibcq->cq_context);
}

void rmlx5_ibu_async(void *obj, bool is_qp, u8 type)
{
	struct ib_event ev = {};

	if (is_qp) {
		struct ib_qp *ibqp = obj;
		int t = rmlx5_ibc_qp_event_type(type);

		if (t < 0 || !ibqp->event_handler)
			return;
		ev.device = ibqp->device;
		ev.event = t;
		ev.element.qp = ibqp;
		ibqp->event_handler(&ev, ibqp->qp_context);
	} else {
		struct ib_cq *ibcq = obj;

		if (type != 0x04 /* MLX5_EVENT_TYPE_CQ_ERROR */ ||
		    !ibcq->event_handler)
			return;
		ev.device = ibcq->device;
		ev.event = IB_EVENT_CQ_ERR;
		ev.element.cq = ibcq;
		ibcq->event_handler(&ev, ibcq->cq_context);
	}
}

/* Device query: mlx5_ib's response, with no offload to report. */

int rmlx5_ibc_user_query_device(struct ib_device *ibdev, struct ib_udata *udata)
{
	struct mlx5_ib_query_device_resp resp = {};

	if (udata->inlen && !ib_is_udata_cleared(udata, 0, udata->inlen))
		return -EINVAL;
	if (!udata->outlen)
		return 0;
	resp.response_length = min_t(size_t, udata->outlen, sizeof(resp));
	return rmlx5_ibu_copy_out(udata, &resp, sizeof(resp));
}

/* Protection domains: the PD number. */

int rmlx5_ibc_user_alloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	struct mlx5_ib_alloc_pd_resp resp = {
		.pdn = rmlx5_ibu_pd_num(to_pd(ibpd)->pd),
	};

	if (udata->inlen && !ib_is_udata_cleared(udata, 0, udata->inlen))
		return -EINVAL;
	return rmlx5_ibu_copy_out(udata, &resp, sizeof(resp));
}

/* Memory regions. */

struct ib_mr *rmlx5_ibc_user_reg_mr(struct ib_pd *ibpd, u64 start, u64 length,
				     u64 virt_addr, int access,
				     struct ib_udata *udata)
{
	struct rmlx5_ibc_mr *mr;
	u32 key;
	int err;

	if (udata->inlen && !ib_is_udata_cleared(udata, 0, udata->inlen))
		return ERR_PTR(-EINVAL);
	access &= ~IB_ACCESS_OPTIONAL;
	if (access & ~(IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE |
		       IB_ACCESS_REMOTE_READ | IB_ACCESS_REMOTE_ATOMIC))
		return ERR_PTR(-EOPNOTSUPP);
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	err = rmlx5_ibu_reg_mr(to_pd(ibpd)->pd, start, length, virt_addr, access,
			       &mr->umr, &key);
	if (err) {
		kfree(mr);
		return ERR_PTR(err);
	}
	mr->ibmr.lkey = key;
	mr->ibmr.rkey = key;
	return &mr->ibmr;
}

int rmlx5_ibc_user_dereg_mr(struct rmlx5_ibc_mr *mr)
{
	int err = rmlx5_ibu_dereg_mr(mr->umr);

	if (!err)
		kfree(mr);
	return err;
}

/* Completion queues: the ring and doorbell record in the process. */

static int rmlx5_ibu_create_user_cq(struct ib_cq *ibcq,
				    const struct ib_cq_init_attr *attr,
				    struct uverbs_attr_bundle *attrs)
{
	struct ib_udata *udata = &attrs->driver_udata;
	struct rmlx5_ibu_ucontext *ctx = rdma_udata_to_drv_context(
		udata, struct rmlx5_ibu_ucontext, ibuc);
	struct rmlx5_ibc_cq *cq = to_cq(ibcq);
	struct mlx5_ib_create_cq ucmd;
	struct mlx5_ib_create_cq_resp resp = {};
	u32 entries;
	int err;

	if (!ctx)
		return -EINVAL;
	if (attr->flags)
		return -EOPNOTSUPP;
	err = rmlx5_ibu_copy_in(&ucmd, sizeof(ucmd),
				offsetof(struct mlx5_ib_create_cq, flags), udata);
	if (err)
		return err;
	/* 128-byte CQEs are mlx5's, not rmlx5's (yet). */
	if (ucmd.cqe_comp_en || ucmd.flags || ucmd.cqe_size == 128)
		return -EOPNOTSUPP;
	if (ucmd.cqe_size != 64 || ucmd.cqe_comp_res_format ||
	    ucmd.uar_page_index || ucmd.reserved0 || ucmd.reserved1)
		return -EINVAL;
	/* As mlx5_ib: one entry more, rounded up to a power of two. */
	if (!attr->cqe || attr->cqe >= RMLX5_IBC_MAX_CQ_ENTRIES)
		return -EINVAL;
	entries = roundup_pow_of_two(attr->cqe + 1);
	err = rmlx5_ibu_create_cq(to_dev(ibcq->device)->index, ctx->cuars, ibcq,
				  ucmd.buf_addr, ucmd.db_addr, entries,
				  attr->comp_vector, &cq->ucq, &cq->cqn);
	if (err)
		return err;
	ibcq->cqe = entries - 1;
	resp.cqn = cq->cqn;
	err = rmlx5_ibu_copy_out(udata, &resp, sizeof(resp));
	if (err) {
		rmlx5_ibu_destroy_cq(cq->ucq);
		cq->ucq = NULL;
	}
	return err;
}

int rmlx5_ibc_user_destroy_cq(struct rmlx5_ibc_cq *cq)
{
	return rmlx5_ibu_destroy_cq(cq->ucq);
}

/* Queue pairs: RC, the buffer (RQ then SQ) and record in the process. */

#define RMLX5_IBU_QP_FLAGS_IGNORED                                           \
	(MLX5_QP_FLAG_SCATTER_CQE | MLX5_QP_FLAG_ALLOW_SCATTER_CQE)
#define RMLX5_IBU_QP_FLAGS_UNSUPPORTED                                       \
	(MLX5_QP_FLAG_SIGNATURE | MLX5_QP_FLAG_TUNNEL_OFFLOADS |             \
	 MLX5_QP_FLAG_TYPE_DCT | MLX5_QP_FLAG_TYPE_DCI |                     \
	 MLX5_QP_FLAG_TIR_ALLOW_SELF_LB_UC | MLX5_QP_FLAG_TIR_ALLOW_SELF_LB_MC | \
	 MLX5_QP_FLAG_PACKET_BASED_CREDIT_MODE | MLX5_QP_FLAG_UAR_PAGE_INDEX | \
	 MLX5_QP_FLAG_DCI_STREAM)

int rmlx5_ibc_user_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init,
			     struct ib_udata *udata)
{
	struct rmlx5_ibu_ucontext *ctx = rdma_udata_to_drv_context(
		udata, struct rmlx5_ibu_ucontext, ibuc);
	struct rmlx5_ibc_qp *qp = to_qp(ibqp);
	struct mlx5_ib_create_qp ucmd;
	struct mlx5_ib_create_qp_resp resp = {};
	struct rmlx5_ibu_qp_args a = {};
	u32 bfreg;
	int err;

	if (!ctx)
		return -EINVAL;
	if (init->qp_type != IB_QPT_RC || init->srq || init->xrcd ||
	    init->rwq_ind_tbl || init->create_flags)
		return -EOPNOTSUPP;
	if (!init->send_cq || !init->recv_cq || !to_cq(init->send_cq)->ucq ||
	    !to_cq(init->recv_cq)->ucq)
		return -EINVAL;
	err = rmlx5_ibu_copy_in(&ucmd, sizeof(ucmd),
				offsetof(struct mlx5_ib_create_qp, sq_buf_addr),
				udata);
	if (err)
		return err;
	if (ucmd.flags & RMLX5_IBU_QP_FLAGS_UNSUPPORTED)
		return -EOPNOTSUPP;
	if (ucmd.flags & ~(RMLX5_IBU_QP_FLAGS_IGNORED | MLX5_QP_FLAG_BFREG_INDEX))
		return -EINVAL;
	if (ucmd.ece_options || ucmd.sq_buf_addr)
		return -EOPNOTSUPP;
	if (ucmd.dci_streams.log_num_concurent ||
	    ucmd.dci_streams.log_num_errored || ucmd.reserved)
		return -EINVAL;
	/*
	 * The answer indexes libmlx5's table of four registers per UAR page
	 * (mlx5_ib's "gross" index). Register 0 is mlx5's shared one, never
	 * BlueFlame: with no BlueFlame at all (bf_reg_size 0) every QP rings
	 * 8-byte doorbells there, and the software HCA reads the records.
	 */
	if (ucmd.flags & MLX5_QP_FLAG_BFREG_INDEX) {
		if (ucmd.bfreg_index >= ctx->nr_uars * 4)
			return -EINVAL;
		bfreg = ucmd.bfreg_index;
	} else {
		bfreg = 0;
	}
	a.buf_addr = ucmd.buf_addr;
	a.db_addr = ucmd.db_addr;
	a.sq_wqe_count = ucmd.sq_wqe_count;
	a.rq_wqe_count = ucmd.rq_wqe_count;
	a.rq_wqe_shift = ucmd.rq_wqe_shift;
	a.bfreg = bfreg;
	err = rmlx5_ibu_create_qp(to_pd(ibqp->pd)->pd, ctx->cuars,
				  to_cq(init->send_cq)->ucq,
				  to_cq(init->recv_cq)->ucq, ibqp, &a, &qp->uqp,
				  &ibqp->qp_num);
	if (err)
		return err;
	qp->qpn = ibqp->qp_num;
	qp->cap = init->cap;
	qp->sq_sig_type = init->sq_sig_type;
	qp->attr.port_num = 1;
	resp.bfreg_index = bfreg;
	err = rmlx5_ibu_copy_out(udata, &resp, sizeof(resp));
	if (err) {
		rmlx5_ibu_destroy_qp(qp->uqp);
		qp->uqp = NULL;
	}
	return err;
}

int rmlx5_ibc_user_modify_qp(struct rmlx5_ibc_qp *qp,
			     const struct rmlx5_ib_qp_attr *a, int mask,
			     struct ib_udata *udata)
{
	struct mlx5_ib_modify_qp_resp resp = {};
	int err;

	/* No ECE, rate limit or DCT: any driver data must be all zero. */
	if (udata->inlen && !ib_is_udata_cleared(udata, 0, udata->inlen))
		return -EOPNOTSUPP;
	err = rmlx5_ibu_modify_qp(qp->uqp, a, mask);
	if (err || !udata->outlen)
		return err;
	resp.response_length = min_t(size_t, udata->outlen, sizeof(resp));
	return rmlx5_ibu_copy_out(udata, &resp, sizeof(resp));
}

int rmlx5_ibc_user_qp_state(struct rmlx5_ibc_qp *qp)
{
	return rmlx5_ibu_qp_state(qp->uqp);
}

int rmlx5_ibc_user_destroy_qp(struct rmlx5_ibc_qp *qp)
{
	return rmlx5_ibu_destroy_qp(qp->uqp);
}

/* What the uverbs side adds to rmlx5's ib_device_ops. */
const struct ib_device_ops rmlx5_ibu_ops = {
	.driver_id = RDMA_DRIVER_MLX5,
	.uverbs_abi_ver = MLX5_IB_UVERBS_ABI_VERSION,

	.alloc_ucontext = rmlx5_ibu_alloc_ucontext,
	.dealloc_ucontext = rmlx5_ibu_dealloc_ucontext,
	.mmap = rmlx5_ibu_mmap,
	.create_user_cq = rmlx5_ibu_create_user_cq,

	INIT_RDMA_OBJ_SIZE(ib_ucontext, rmlx5_ibu_ucontext, ibuc),
};

/*
 * A function's device is removed at unbind with its processes still
 * running: ib_uverbs disassociates their contexts instead of waiting for
 * them to close (ib_uverbs_remove_one). By then it has zapped every UAR
 * mapping (rdma_user_mmap_io tracks them; later stores land in a page of
 * its own) and destroyed the context's objects through the ops; it then
 * frees the context (dealloc_ucontext gives the UARs back while the
 * function still runs). Nothing of the context is left for this hook.
 * A software HCA's mappings are this file's own (rmlx5_ibu_vm_ops, in
 * module text): its contexts are not disassociated, so ib_uverbs holds
 * the module while they are open.
 */
static void rmlx5_ibu_disassociate_ucontext(struct ib_ucontext *uc)
{
	dev_dbg(&uc->device->dev, "user context disassociated\n");
}

const struct ib_device_ops rmlx5_ibu_pci_ops = {
	.disassociate_ucontext = rmlx5_ibu_disassociate_ucontext,
};
