/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rmlx5 verbs API for kernel ULPs.
 *
 * The functions are implemented in Rust inside rmlx5.ko and exported with
 * EXPORT_SYMBOL_GPL by drivers/rmlx5/rmlx5_shim.c. Shapes, constants and
 * semantics follow <rdma/ib_verbs.h>: the opcode, status, flag and mask
 * values are those of enum ib_wr_opcode, ib_wc_status, ib_wc_opcode,
 * ib_send_flags, ib_qp_attr_mask, ib_qp_state and ib_access_flags.
 *
 * A device is named by its index (rmlx5_<index>): the software HCAs first,
 * then the ConnectX PCI functions; the address vector of a QP names the
 * remote device by the lid rmlx5_ib_query_device() reports for it. Memory
 * registered with rmlx5_ib_reg_mr() is kernel memory addressed by its
 * kernel virtual address in SGEs and remote addresses (kmalloc'd or
 * vmalloc'd on a software HCA, direct-mapped memory such as kmalloc's on a
 * PCI function, which maps it for DMA); it must stay valid until
 * rmlx5_ib_dereg_mr(). All functions return 0 or a negative errno
 * unless documented otherwise, and may sleep except rmlx5_ib_post_send(),
 * rmlx5_ib_post_recv(), rmlx5_ib_poll_cq() and rmlx5_ib_req_notify_cq(),
 * which may be called from a completion handler (BH context).
 */
#ifndef _RDMA_RMLX5_IB_H
#define _RDMA_RMLX5_IB_H

#include <linux/types.h>

struct rmlx5_ib_pd;
struct rmlx5_ib_mr;
struct rmlx5_ib_cq;
struct rmlx5_ib_qp;

enum {
	RMLX5_IB_WR_RDMA_WRITE = 0,
	RMLX5_IB_WR_RDMA_WRITE_WITH_IMM = 1,
	RMLX5_IB_WR_SEND = 2,
	RMLX5_IB_WR_SEND_WITH_IMM = 3,
	RMLX5_IB_WR_RDMA_READ = 4,
	RMLX5_IB_WR_ATOMIC_CMP_AND_SWP = 5,
	RMLX5_IB_WR_ATOMIC_FETCH_AND_ADD = 6,
	RMLX5_IB_WR_LOCAL_INV = 7,
	/* SEND, and invalidate rkey at the responder (remote invalidation). */
	RMLX5_IB_WR_SEND_WITH_INV = 9,
	RMLX5_IB_WR_MASKED_ATOMIC_CMP_AND_SWP = 12,
	RMLX5_IB_WR_MASKED_ATOMIC_FETCH_AND_ADD = 13,
	RMLX5_IB_WR_REG_MR = 0x20,
};

enum {
	RMLX5_IB_SEND_FENCE = 1,
	RMLX5_IB_SEND_SIGNALED = 2,
	RMLX5_IB_SEND_SOLICITED = 4,
};

enum {
	RMLX5_IB_WC_SUCCESS = 0,
	RMLX5_IB_WC_LOC_LEN_ERR = 1,
	RMLX5_IB_WC_LOC_QP_OP_ERR = 2,
	RMLX5_IB_WC_LOC_PROT_ERR = 4,
	RMLX5_IB_WC_WR_FLUSH_ERR = 5,
	RMLX5_IB_WC_LOC_ACCESS_ERR = 8,
	RMLX5_IB_WC_REM_ACCESS_ERR = 10,
	RMLX5_IB_WC_REM_OP_ERR = 11,
	RMLX5_IB_WC_RETRY_EXC_ERR = 12,
	RMLX5_IB_WC_RNR_RETRY_EXC_ERR = 13,
};

enum {
	RMLX5_IB_WC_SEND = 0,
	RMLX5_IB_WC_RDMA_WRITE = 1,
	RMLX5_IB_WC_RDMA_READ = 2,
	RMLX5_IB_WC_COMP_SWAP = 3,
	RMLX5_IB_WC_FETCH_ADD = 4,
	RMLX5_IB_WC_LOCAL_INV = 6,
	RMLX5_IB_WC_REG_MR = 10,
	RMLX5_IB_WC_MASKED_COMP_SWAP = 11,
	RMLX5_IB_WC_MASKED_FETCH_ADD = 12,
	RMLX5_IB_WC_RECV = 128,
	RMLX5_IB_WC_RECV_RDMA_WITH_IMM = 129,
};

#define RMLX5_IB_WC_WITH_IMM 2

enum {
	RMLX5_IB_CQ_SOLICITED = 1,
	RMLX5_IB_CQ_NEXT_COMP = 2,
	RMLX5_IB_CQ_REPORT_MISSED_EVENTS = 4,
};

enum {
	RMLX5_IB_ACCESS_LOCAL_WRITE = 1,
	RMLX5_IB_ACCESS_REMOTE_WRITE = 2,
	RMLX5_IB_ACCESS_REMOTE_READ = 4,
	RMLX5_IB_ACCESS_REMOTE_ATOMIC = 8,
};

enum {
	RMLX5_IB_QPS_RESET, RMLX5_IB_QPS_INIT, RMLX5_IB_QPS_RTR,
	RMLX5_IB_QPS_RTS, RMLX5_IB_QPS_SQD, RMLX5_IB_QPS_SQE, RMLX5_IB_QPS_ERR,
};

enum {
	RMLX5_IB_QP_STATE = 1 << 0,
	RMLX5_IB_QP_CUR_STATE = 1 << 1,
	RMLX5_IB_QP_ACCESS_FLAGS = 1 << 3,
	RMLX5_IB_QP_PKEY_INDEX = 1 << 4,
	RMLX5_IB_QP_PORT = 1 << 5,
	RMLX5_IB_QP_AV = 1 << 7,
	RMLX5_IB_QP_PATH_MTU = 1 << 8,
	RMLX5_IB_QP_TIMEOUT = 1 << 9,
	RMLX5_IB_QP_RETRY_CNT = 1 << 10,
	RMLX5_IB_QP_RNR_RETRY = 1 << 11,
	RMLX5_IB_QP_RQ_PSN = 1 << 12,
	RMLX5_IB_QP_MAX_QP_RD_ATOMIC = 1 << 13,
	RMLX5_IB_QP_MIN_RNR_TIMER = 1 << 15,
	RMLX5_IB_QP_SQ_PSN = 1 << 16,
	RMLX5_IB_QP_MAX_DEST_RD_ATOMIC = 1 << 17,
	RMLX5_IB_QP_DEST_QPN = 1 << 20,
	RMLX5_IB_QP_QKEY = 1 << 6,	/* UD and GSI QPs only */
};

/* Transport of a QP (rmlx5_ib_qp_init_attr.qp_type); 0, RC, is what a
 * zeroed attribute asks for. */
enum {
	RMLX5_IB_QPT_RC = 0,
	RMLX5_IB_QPT_UD = 1,
	/* The GSI QP (QP1) of the device's port: at most one per device; on
	 * the wire and in ib_core it is QP 1, rmlx5_ib_qp_num() gives the
	 * number its CQEs carry. */
	RMLX5_IB_QPT_GSI = 2,
};

/* Work completion flags besides RMLX5_IB_WC_WITH_IMM (ib_wc_flags). */
#define RMLX5_IB_WC_GRH 1
/* The sender invalidated the rkey in imm_data (host order). */
#define RMLX5_IB_WC_WITH_INVALIDATE (1 << 2)
#define RMLX5_IB_WC_WITH_NETWORK_HDR_TYPE (1 << 6)

/* rmlx5_ib_wc.network_hdr_type (enum rdma_network_type). */
enum {
	RMLX5_IB_NETWORK_IB = 0,
	RMLX5_IB_NETWORK_ROCE_V1 = 1,
	RMLX5_IB_NETWORK_IPV4 = 2,
	RMLX5_IB_NETWORK_IPV6 = 3,
};

struct rmlx5_ib_device_attr {
	u32 max_qp, max_cq, max_pd, max_mr;
	u32 max_qp_wr, max_cqe, max_sge, max_qp_rd_atom;
	u64 max_mr_size;
	u32 atomic_cap;		/* 1: IB_ATOMIC_HCA */
	u32 num_comp_vectors;
	u32 port_state;		/* enum ib_port_state: 1 down, 4 active */
	u32 lid;		/* what a peer's dlid names this device by */
	u32 max_fast_reg_pages;	/* pages of a fast-registration MR; 0: none */
	u32 sm_lid;		/* the subnet manager's LID */
	u64 node_guid;		/* from the device's firmware; 0: none */
	u64 subnet_prefix;	/* the port's GID prefix (fe80::/64) */
};

struct rmlx5_ib_wc {
	u64 wr_id;
	u32 status;
	u32 opcode;
	u32 vendor_err;
	u32 byte_len;
	u32 qp_num;
	__be32 imm_data;
	u32 wc_flags;
	u32 src_qp;		/* receives: the sender's QP number */
	/* UD and GSI receives: the sender's LID (InfiniBand ports) and SL,
	 * the network header in the first 40 bytes of the buffer
	 * (RMLX5_IB_NETWORK_*, with RMLX5_IB_WC_WITH_NETWORK_HDR_TYPE on
	 * RoCE ports), the P_Key index. */
	u16 slid;
	u8 sl;
	u8 network_hdr_type;
	u16 pkey_index;
	u16 reserved;
};

struct rmlx5_ib_sge {
	u64 addr;
	u32 length;
	u32 lkey;
};

struct rmlx5_ib_send_wr {
	const struct rmlx5_ib_send_wr *next;
	u64 wr_id;
	const struct rmlx5_ib_sge *sg_list;
	int num_sge;
	u32 opcode;
	u32 send_flags;
	__be32 imm_data;
	u64 remote_addr;
	u32 rkey;
	u32 reserved;
	/* Atomics: compare (CAS) or add (FAA); swap; masks (masked CAS:
	 * compare and swap masks; masked FAA: compare_add_mask is the field
	 * boundary mask). Results are written to sg_list[0] in host order. */
	u64 compare_add;
	u64 swap;
	u64 compare_add_mask;
	u64 swap_mask;
	/* RMLX5_IB_WR_REG_MR: the MR from rmlx5_ib_alloc_mr() to register
	 * with its key's last byte changed to rkey's, and its rights
	 * (RMLX5_IB_ACCESS_*). RMLX5_IB_WR_LOCAL_INV and
	 * RMLX5_IB_WR_SEND_WITH_INV: rkey is the key to
	 * invalidate. */
	struct rmlx5_ib_mr *mr;
	u32 access;
	u32 reserved2;
	/* UD and GSI QPs: the address vector rmlx5_ib_encode_av() made (its
	 * RMLX5_IB_AV_SIZE bytes are read while the WR is posted), the
	 * destination QP and its Q_Key (with bit 31 set, the QP's own). */
	const u8 *av;
	u32 remote_qpn;
	u32 remote_qkey;
};

struct rmlx5_ib_recv_wr {
	const struct rmlx5_ib_recv_wr *next;
	u64 wr_id;
	const struct rmlx5_ib_sge *sg_list;
	int num_sge;
};

struct rmlx5_ib_qp_init_attr {
	struct rmlx5_ib_cq *send_cq;
	struct rmlx5_ib_cq *recv_cq;
	u32 max_send_wr, max_recv_wr;
	u32 max_send_sge, max_recv_sge;	/* at most 8 */
	u32 sq_sig_all;
	u32 qp_type;		/* RMLX5_IB_QPT_* */
};

struct rmlx5_ib_qp_attr {
	u32 qp_state;
	u32 cur_qp_state;
	u32 qp_access_flags;
	u32 path_mtu;
	u32 dest_qp_num;
	u32 rq_psn;
	u32 sq_psn;
	u16 pkey_index;
	u16 dlid;		/* the remote device's lid (query_device) */
	u8 port_num;
	u8 max_rd_atomic;
	u8 max_dest_rd_atomic;
	u8 min_rnr_timer;
	u8 timeout;
	u8 retry_cnt;
	u8 rnr_retry;
	u8 reserved;
	u32 qkey;		/* UD and GSI QPs (RMLX5_IB_QP_QKEY) */
};

/* An address handle's attributes, for rmlx5_ib_encode_av(). */
struct rmlx5_ib_ah_attr {
	u8 dgid[16];
	u32 flow_label;
	u16 dlid;		/* InfiniBand ports: the destination's lid */
	u8 sgid_index;
	u8 hop_limit;
	u8 traffic_class;
	u8 sl;
	u8 grh;			/* send a GRH (always, on RoCE ports) */
	u8 reserved;
	u8 dmac[6];		/* RoCE ports: the next hop's MAC */
	u16 reserved2;
};

#define RMLX5_IB_AV_SIZE 48

/* Called in BH context; must not sleep. */
typedef void (*rmlx5_ib_comp_handler)(struct rmlx5_ib_cq *cq, void *cq_context);
/* (device index, mlx5 event type, CQN or QPN, context); BH context. */
typedef void (*rmlx5_ib_event_handler)(int dev, u32 event_type, u32 element,
				       void *context);

int rmlx5_ib_num_devices(void);
int rmlx5_ib_get_device(int index);
int rmlx5_ib_query_device(int index, struct rmlx5_ib_device_attr *attr);
int rmlx5_ib_set_event_handler(int index, rmlx5_ib_event_handler handler,
			       void *context);

int rmlx5_ib_alloc_pd(int index, struct rmlx5_ib_pd **pd);
int rmlx5_ib_dealloc_pd(struct rmlx5_ib_pd *pd);
int rmlx5_ib_reg_mr(struct rmlx5_ib_pd *pd, void *addr, u64 length,
		    u32 access, struct rmlx5_ib_mr **mr, u32 *key);
/* A DMA MR: every direct-map kernel address is its own IOVA under *key
 * (what ib_core's local_dma_lkey covers for ULPs of the ib_* API). */
int rmlx5_ib_get_dma_mr(struct rmlx5_ib_pd *pd, u32 access,
			struct rmlx5_ib_mr **mr, u32 *key);
/* Fast registration: an MR with room for max_pages pages (at most the
 * device's max_fast_reg_pages, 512 on a software HCA), free until an
 * RMLX5_IB_WR_REG_MR registers the pages written with
 * rmlx5_ib_mr_set_page() (DMA addresses, page-aligned) covering what
 * rmlx5_ib_mr_set_mapping() records. Both may be called in any context,
 * and not while the MR is registered. rmlx5_ib_dereg_mr() frees it. */
int rmlx5_ib_alloc_mr(struct rmlx5_ib_pd *pd, u32 max_pages,
		      struct rmlx5_ib_mr **mr, u32 *key);
int rmlx5_ib_mr_set_page(struct rmlx5_ib_mr *mr, u32 index, u64 addr);
int rmlx5_ib_mr_set_mapping(struct rmlx5_ib_mr *mr, u64 iova, u64 length,
			    u32 page_shift, u32 pages);
int rmlx5_ib_dereg_mr(struct rmlx5_ib_mr *mr);

/* A NULL handler creates a polling-only CQ: it cannot be armed and no
 * event can fire it. rmlx5_ib_destroy_cq() fails with -EBUSY while QPs use
 * the CQ; once it succeeds the handler is not running and never will. */
int rmlx5_ib_create_cq(int index, rmlx5_ib_comp_handler handler, void *context,
		       u32 entries, u32 comp_vector, struct rmlx5_ib_cq **cq);
int rmlx5_ib_destroy_cq(struct rmlx5_ib_cq *cq);
/* The CQ's number, the element of its async events. */
u32 rmlx5_ib_cq_num(struct rmlx5_ib_cq *cq);
/* Returns the number of completions polled. */
int rmlx5_ib_poll_cq(struct rmlx5_ib_cq *cq, int num_entries,
		     struct rmlx5_ib_wc *wc);
/* With RMLX5_IB_CQ_REPORT_MISSED_EVENTS, returns 1 if a completion may
 * have been missed (poll again), else 0. */
int rmlx5_ib_req_notify_cq(struct rmlx5_ib_cq *cq, u32 flags);

int rmlx5_ib_create_qp(struct rmlx5_ib_pd *pd,
		       const struct rmlx5_ib_qp_init_attr *attr,
		       struct rmlx5_ib_qp **qp);
int rmlx5_ib_destroy_qp(struct rmlx5_ib_qp *qp);
u32 rmlx5_ib_qp_num(struct rmlx5_ib_qp *qp);
/* The QP's current state (RMLX5_IB_QPS_*): the HCA moves it to ERR by
 * itself on a completion error. */
int rmlx5_ib_query_qp_state(struct rmlx5_ib_qp *qp);
int rmlx5_ib_modify_qp(struct rmlx5_ib_qp *qp,
		       const struct rmlx5_ib_qp_attr *attr, u32 attr_mask);
/* Checks an address handle's attributes against device index's port and
 * writes the mlx5 address vector UD sends carry (the datagram segment
 * without destination QP and Q_Key) into av. Never sleeps. */
int rmlx5_ib_encode_av(int index, const struct rmlx5_ib_ah_attr *attr,
		       u8 av[RMLX5_IB_AV_SIZE]);
int rmlx5_ib_post_send(struct rmlx5_ib_qp *qp,
		       const struct rmlx5_ib_send_wr *wr,
		       const struct rmlx5_ib_send_wr **bad_wr);
int rmlx5_ib_post_recv(struct rmlx5_ib_qp *qp,
		       const struct rmlx5_ib_recv_wr *wr,
		       const struct rmlx5_ib_recv_wr **bad_wr);

#endif /* _RDMA_RMLX5_IB_H */
