/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The ib_core objects of rmlx5 (ib_core.c) as ib_user.c sees them too, and
 * the functions between the two files and the Rust crate's ibu.rs.
 */
#ifndef _RMLX5_IB_PRIV_H
#define _RMLX5_IB_PRIV_H

#include <linux/spinlock.h>
#include <linux/xarray.h>
#include <rdma/ib_verbs.h>
#include <rdma/rmlx5_ib.h>

/*
 * The largest CQ a verbs user gets (ib_device_attr.max_cqe is one less, as
 * mlx5_ib reports it: the ring holds cqe + 1 entries, a power of two). The
 * model could hold 2^22, a 256 MiB ring to pin or allocate.
 */
#define RMLX5_IBC_MAX_CQ_ENTRIES (1U << 16)

/* Devices rmlx5_0 .. rmlx5_7 (the module's instance numbers). */
#define RMLX5_IBC_MAX_DEVS 8

/* Rust objects of ibu.rs (rdma-core's provider), opaque here. */
struct rmlx5_ibu_cq;
struct rmlx5_ibu_qp;
struct rmlx5_ibu_mr;

struct rmlx5_ibc_dev {
	struct ib_device ibdev;
	int index;
	/*
	 * QPN -> QP (wc->qp, QP events) and CQN -> CQ (CQ events). An event
	 * handler looks up and calls under ev_lock; destroy removes the entry
	 * under it, so no handler runs on an object ib_core is about to free.
	 */
	struct xarray qps;
	struct xarray cqs;
	spinlock_t ev_lock;
	/* A RoCE port (bound to a netdev at registration), else InfiniBand. */
	bool roce;
	/* Registered with ib_core (under rmlx5_ibc_lock). */
	bool registered;
	/* A ConnectX function (rmlx5_ibc_add_pci), not a software HCA. */
	bool pci;
	/* Made by `rdma link add`: ib_core frees it when it unregisters. */
	bool link;
};

struct rmlx5_ibc_pd {
	struct ib_pd ibpd;
	struct rmlx5_ib_pd *pd;
};

struct rmlx5_ibc_mr {
	struct ib_mr ibmr;
	/* A kernel MR, or (umr) a user memory region. */
	struct rmlx5_ib_mr *mr;
	struct rmlx5_ibu_mr *umr;
	/* Fast registration: pages ib_sg_to_pages has set, and the room. */
	u32 npages;
	u32 max_pages;
	int set_page_err;
};

/*
 * Most pages of a fast-registration MR: the software HCA's limit, the same
 * number as hca-model's Caps::max_fast_reg_pages (ib/mr.rs MAX_FAST_PAGES).
 * The model translates a page list page by page while it copies, so the
 * limit is what the list costs: 512 entries are one 4 KiB page, and 512
 * pages cover RDS's 257, NVMe-oF's 257 and SRP's 512.
 */
#define RMLX5_IBC_MAX_FAST_PAGES 512

struct rmlx5_ibc_cq {
	struct ib_cq ibcq;
	/* A kernel CQ, or (ucq) a CQ of rdma-core's provider. */
	struct rmlx5_ib_cq *cq;
	struct rmlx5_ibu_cq *ucq;
	u32 cqn;
};

struct rmlx5_ibc_qp {
	struct ib_qp ibqp;
	/* A kernel QP, or (uqp) a QP of rdma-core's provider. */
	struct rmlx5_ib_qp *qp;
	struct rmlx5_ibu_qp *uqp;
	/* What query_qp reports besides the state: the QP's attributes only
	 * change by modify_qp, so the last accepted values are its own. */
	struct ib_qp_attr attr;
	struct ib_qp_cap cap;
	enum ib_sig_type sq_sig_type;
	/* The number the QP's CQEs and events carry (the key in dev->qps):
	 * ibqp.qp_num, except for the GSI QP, which is QP 1 to ib_core. */
	u32 qpn;
};

struct rmlx5_ibc_ah {
	struct ib_ah ibah;
	/* The address vector UD sends carry (rmlx5_ib_encode_av). */
	u8 av[RMLX5_IB_AV_SIZE];
	/* What query_ah reports (no reference to the source GID's entry). */
	struct rdma_ah_attr attr;
};

static inline struct rmlx5_ibc_dev *to_dev(struct ib_device *ibdev)
{
	return container_of(ibdev, struct rmlx5_ibc_dev, ibdev);
}

static inline struct rmlx5_ibc_pd *to_pd(struct ib_pd *ibpd)
{
	return container_of(ibpd, struct rmlx5_ibc_pd, ibpd);
}

static inline struct rmlx5_ibc_mr *to_mr(struct ib_mr *ibmr)
{
	return container_of(ibmr, struct rmlx5_ibc_mr, ibmr);
}

static inline struct rmlx5_ibc_cq *to_cq(struct ib_cq *ibcq)
{
	return container_of(ibcq, struct rmlx5_ibc_cq, ibcq);
}

static inline struct rmlx5_ibc_qp *to_qp(struct ib_qp *ibqp)
{
	return container_of(ibqp, struct rmlx5_ibc_qp, ibqp);
}

static inline struct rmlx5_ibc_ah *to_ah(struct ib_ah *ibah)
{
	return container_of(ibah, struct rmlx5_ibc_ah, ibah);
}

/* ib_user.c: the uverbs side (CONFIG_INFINIBAND_USER_ACCESS). */
#if IS_ENABLED(CONFIG_INFINIBAND_USER_ACCESS)
extern const struct ib_device_ops rmlx5_ibu_ops;
extern const struct ib_device_ops rmlx5_ibu_pci_ops;
int rmlx5_ibc_user_query_device(struct ib_device *ibdev, struct ib_udata *udata);
int rmlx5_ibc_user_alloc_pd(struct ib_pd *ibpd, struct ib_udata *udata);
struct ib_mr *rmlx5_ibc_user_reg_mr(struct ib_pd *ibpd, u64 start, u64 length,
				     u64 virt_addr, int access,
				     struct ib_udata *udata);
int rmlx5_ibc_user_dereg_mr(struct rmlx5_ibc_mr *mr);
int rmlx5_ibc_user_destroy_cq(struct rmlx5_ibc_cq *cq);
int rmlx5_ibc_user_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init,
			struct ib_udata *udata);
int rmlx5_ibc_user_modify_qp(struct rmlx5_ibc_qp *qp,
			const struct rmlx5_ib_qp_attr *a, int mask,
			struct ib_udata *udata);
int rmlx5_ibc_user_qp_state(struct rmlx5_ibc_qp *qp);
int rmlx5_ibc_user_destroy_qp(struct rmlx5_ibc_qp *qp);
#endif

/* ib_core.c: the ib_event of an mlx5 QP async event type, or -1. */
int rmlx5_ibc_qp_event_type(u8 type);

#endif
