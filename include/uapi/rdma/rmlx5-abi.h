/* SPDX-License-Identifier: ((GPL-2.0 WITH Linux-syscall-note) OR BSD-2-Clause) */
/*
 * The rmlx5 user/kernel ABI: commands of /dev/rmlx5_uverbsN.
 *
 * This is the C view of rust/rmlx5-abi (the authority); a test compiles
 * this header and checks every size, field offset and number against the
 * Rust crate.
 *
 * Every command is _IOWR(RMLX5_IOCTL_MAGIC, nr, struct): the struct is
 * request and response in one. It starts with struct rmlx5_cmd_hdr, whose
 * size field says how large the caller's struct is; the kernel accepts any
 * size from the one below up to a page, requires unknown trailing bytes to
 * be zero, and writes back at most size bytes. All reserved fields, all
 * "out" fields on input and all unknown flag bits must be zero. Values of
 * states, masks, access flags and events are libibverbs' own.
 */
#ifndef RMLX5_ABI_USER_H
#define RMLX5_ABI_USER_H

#include <linux/types.h>
#include <linux/ioctl.h>

#define RMLX5_IOCTL_MAGIC	0x1b
#define RMLX5_IOCTL_NR_BASE	0x80

struct rmlx5_cmd_hdr {
	__u32 size;
	__u32 flags;
};

struct rmlx5_query_device {
	struct rmlx5_cmd_hdr hdr;
	__aligned_u64 fw_ver;		/* out */
	__aligned_u64 node_guid;	/* out */
	__aligned_u64 sys_image_guid;	/* out */
	__aligned_u64 max_mr_size;	/* out */
	__aligned_u64 page_size_cap;	/* out */
	__u32 vendor_id;		/* out */
	__u32 vendor_part_id;		/* out */
	__u32 hw_ver;			/* out */
	__u32 max_qp;			/* out */
	__u32 max_qp_wr;		/* out */
	__u32 max_sge;			/* out */
	__u32 max_cq;			/* out */
	__u32 max_cqe;			/* out */
	__u32 max_mr;			/* out */
	__u32 max_pd;			/* out */
	__u32 max_qp_rd_atom;		/* out */
	__u32 max_qp_init_rd_atom;	/* out */
	__u32 atomic_cap;		/* out */
	__u32 num_comp_vectors;		/* out */
	__u32 max_inline_data;		/* out */
	__u32 phys_port_cnt;		/* out */
	__u32 bf_reg_size;		/* out */
	__u32 uar_size;			/* out */
	__u32 device_index;		/* out */
	__u32 device_flags;		/* out, RMLX5_DEVICE_* */
};

struct rmlx5_query_port {
	struct rmlx5_cmd_hdr hdr;
	__u32 port_num;			/* in, 1-based */
	__u32 state;			/* out */
	__u32 max_mtu;			/* out */
	__u32 active_mtu;		/* out */
	__u32 lid;			/* out */
	__u32 sm_lid;			/* out */
	__u32 port_cap_flags;		/* out */
	__u32 gid_tbl_len;		/* out */
	__u32 active_width;		/* out */
	__u32 active_speed;		/* out */
	__u32 link_layer;		/* out */
	__u32 reserved;
};

struct rmlx5_alloc_pd {
	struct rmlx5_cmd_hdr hdr;
	__u32 pd_handle;		/* out */
	__u32 pdn;			/* out */
};

/* DEALLOC_PD, DEREG_MR, DESTROY_CQ, DESTROY_QP */
struct rmlx5_destroy {
	struct rmlx5_cmd_hdr hdr;
	__u32 handle;			/* in */
	__u32 reserved;
	__u32 comp_events_reported;	/* out (CQ) */
	__u32 async_events_reported;	/* out (CQ, QP) */
};

struct rmlx5_reg_mr {
	struct rmlx5_cmd_hdr hdr;
	__aligned_u64 addr;		/* in */
	__aligned_u64 length;		/* in */
	__aligned_u64 iova;		/* in */
	__u32 pd_handle;		/* in */
	__u32 access;			/* in, RMLX5_ACCESS_* */
	__u32 mr_handle;		/* out */
	__u32 lkey;			/* out */
	__u32 rkey;			/* out */
	__u32 reserved;
};

struct rmlx5_create_comp_channel {
	struct rmlx5_cmd_hdr hdr;
	__s32 fd;			/* out */
	__u32 reserved;
};

struct rmlx5_create_cq {
	struct rmlx5_cmd_hdr hdr;
	__aligned_u64 user_handle;	/* in */
	__u32 cqe;			/* in */
	__s32 channel_fd;		/* in, -1 for none */
	__u32 comp_vector;		/* in */
	__u32 cq_handle;		/* out */
	__u32 cqn;			/* out */
	__u32 cqe_cnt;			/* out, power of two */
	__u32 cqe_size;			/* out, 64 */
	__u32 reserved;
	__aligned_u64 buf_mmap_offset;	/* out */
	__aligned_u64 buf_size;		/* out */
	__aligned_u64 dbr_mmap_offset;	/* out */
};

struct rmlx5_create_qp {
	struct rmlx5_cmd_hdr hdr;
	__aligned_u64 user_handle;	/* in */
	__u32 pd_handle;		/* in */
	__u32 send_cq_handle;		/* in */
	__u32 recv_cq_handle;		/* in */
	__u32 qp_type;			/* in, RMLX5_QPT_RC */
	__u32 max_send_wr;		/* in */
	__u32 max_recv_wr;		/* in */
	__u32 max_send_sge;		/* in */
	__u32 max_recv_sge;		/* in */
	__u32 max_inline_data;		/* in */
	__u32 sq_sig_all;		/* in, 0 or 1 */
	__u32 qp_handle;		/* out */
	__u32 qpn;			/* out */
	__u32 sq_wqe_cnt;		/* out, WQEBBs */
	__u32 sq_wqe_shift;		/* out */
	__u32 rq_wqe_cnt;		/* out */
	__u32 rq_wqe_shift;		/* out */
	__u32 max_send_wr_out;		/* out */
	__u32 max_recv_wr_out;		/* out */
	__u32 max_send_sge_out;		/* out */
	__u32 max_recv_sge_out;		/* out */
	__u32 max_inline_data_out;	/* out */
	__u32 bf_size;			/* out */
	__u32 bf_offset;		/* out */
	__u32 rq_buf_offset;		/* out */
	__u32 sq_buf_offset;		/* out */
	__u32 reserved;
	__aligned_u64 buf_mmap_offset;	/* out */
	__aligned_u64 buf_size;		/* out */
	__aligned_u64 dbr_mmap_offset;	/* out */
	__aligned_u64 uar_mmap_offset;	/* out */
};

struct rmlx5_modify_qp {
	struct rmlx5_cmd_hdr hdr;
	__u32 qp_handle;
	__u32 attr_mask;		/* RMLX5_QP_* */
	__u32 qp_state;
	__u32 cur_qp_state;
	__u32 path_mtu;
	__u32 dest_qp_num;
	__u32 rq_psn;
	__u32 sq_psn;
	__u32 qp_access_flags;
	__u32 max_rd_atomic;
	__u32 max_dest_rd_atomic;
	__u32 min_rnr_timer;
	__u32 timeout;
	__u32 retry_cnt;
	__u32 rnr_retry;
	__u32 port_num;
	__u32 dlid;			/* the peer port's LID */
	__u32 sl;			/* service level, 0..15 (with RMLX5_QP_AV) */
};

struct rmlx5_query_qp {
	struct rmlx5_cmd_hdr hdr;
	__u32 qp_handle;		/* in */
	__u32 reserved;
	__u32 qp_state;			/* out, and all below */
	__u32 path_mtu;
	__u32 dest_qp_num;
	__u32 rq_psn;
	__u32 sq_psn;
	__u32 qp_access_flags;
	__u32 max_rd_atomic;
	__u32 max_dest_rd_atomic;
	__u32 min_rnr_timer;
	__u32 timeout;
	__u32 retry_cnt;
	__u32 rnr_retry;
	__u32 port_num;
	__u32 dlid;
	__u32 max_send_wr;
	__u32 max_recv_wr;
	__u32 max_send_sge;
	__u32 max_recv_sge;
	__u32 max_inline_data;
	__u32 sl;
};

struct rmlx5_kick {
	struct rmlx5_cmd_hdr hdr;
	__u32 kind;			/* RMLX5_KICK_* */
	__u32 handle;			/* QP or CQ handle */
	__u32 uar_offset;		/* send: where the doorbell was written */
	__u32 reserved;
};

struct rmlx5_get_async_fd {
	struct rmlx5_cmd_hdr hdr;
	__s32 fd;			/* out */
	__u32 reserved;
};

/* One read() of the async-event file. */
struct rmlx5_async_event {
	__aligned_u64 element;		/* user_handle of the CQ or QP */
	__u32 event_type;		/* RMLX5_EVENT_* */
	__u32 reserved;
};

/* One read() of a completion channel: the CQ's user_handle. */
#define RMLX5_COMP_EVENT_SIZE	8

#define RMLX5_IOWR(nr, type)	_IOWR(RMLX5_IOCTL_MAGIC, RMLX5_IOCTL_NR_BASE + (nr), type)
#define RMLX5_IOCTL_QUERY_DEVICE	RMLX5_IOWR(0, struct rmlx5_query_device)
#define RMLX5_IOCTL_QUERY_PORT		RMLX5_IOWR(1, struct rmlx5_query_port)
#define RMLX5_IOCTL_ALLOC_PD		RMLX5_IOWR(2, struct rmlx5_alloc_pd)
#define RMLX5_IOCTL_DEALLOC_PD		RMLX5_IOWR(3, struct rmlx5_destroy)
#define RMLX5_IOCTL_REG_MR		RMLX5_IOWR(4, struct rmlx5_reg_mr)
#define RMLX5_IOCTL_DEREG_MR		RMLX5_IOWR(5, struct rmlx5_destroy)
#define RMLX5_IOCTL_CREATE_COMP_CHANNEL	RMLX5_IOWR(6, struct rmlx5_create_comp_channel)
#define RMLX5_IOCTL_CREATE_CQ		RMLX5_IOWR(7, struct rmlx5_create_cq)
#define RMLX5_IOCTL_DESTROY_CQ		RMLX5_IOWR(8, struct rmlx5_destroy)
#define RMLX5_IOCTL_CREATE_QP		RMLX5_IOWR(9, struct rmlx5_create_qp)
#define RMLX5_IOCTL_MODIFY_QP		RMLX5_IOWR(10, struct rmlx5_modify_qp)
#define RMLX5_IOCTL_QUERY_QP		RMLX5_IOWR(11, struct rmlx5_query_qp)
#define RMLX5_IOCTL_DESTROY_QP		RMLX5_IOWR(12, struct rmlx5_destroy)
#define RMLX5_IOCTL_KICK		RMLX5_IOWR(13, struct rmlx5_kick)
#define RMLX5_IOCTL_GET_ASYNC_FD	RMLX5_IOWR(14, struct rmlx5_get_async_fd)

/* mmap offsets: kind << 40 | handle << 12, as returned by the kernel. */
#define RMLX5_MMAP_PAGE_SHIFT	12
#define RMLX5_MMAP_KIND_SHIFT	40
#define RMLX5_MMAP_UAR		1
#define RMLX5_MMAP_CQ_BUF	2
#define RMLX5_MMAP_CQ_DBR	3
#define RMLX5_MMAP_QP_BUF	4
#define RMLX5_MMAP_QP_DBR	5

#define RMLX5_QPT_RC		2

#define RMLX5_QPS_RESET		0
#define RMLX5_QPS_INIT		1
#define RMLX5_QPS_RTR		2
#define RMLX5_QPS_RTS		3
#define RMLX5_QPS_SQD		4
#define RMLX5_QPS_SQE		5
#define RMLX5_QPS_ERR		6

#define RMLX5_QP_STATE			(1U << 0)
#define RMLX5_QP_CUR_STATE		(1U << 1)
#define RMLX5_QP_ACCESS_FLAGS		(1U << 3)
#define RMLX5_QP_PKEY_INDEX		(1U << 4)
#define RMLX5_QP_PORT			(1U << 5)
#define RMLX5_QP_AV			(1U << 7)
#define RMLX5_QP_PATH_MTU		(1U << 8)
#define RMLX5_QP_TIMEOUT		(1U << 9)
#define RMLX5_QP_RETRY_CNT		(1U << 10)
#define RMLX5_QP_RNR_RETRY		(1U << 11)
#define RMLX5_QP_RQ_PSN			(1U << 12)
#define RMLX5_QP_MAX_QP_RD_ATOMIC	(1U << 13)
#define RMLX5_QP_MIN_RNR_TIMER		(1U << 15)
#define RMLX5_QP_SQ_PSN			(1U << 16)
#define RMLX5_QP_MAX_DEST_RD_ATOMIC	(1U << 17)
#define RMLX5_QP_DEST_QPN		(1U << 20)

#define RMLX5_ACCESS_LOCAL_WRITE	(1U << 0)
#define RMLX5_ACCESS_REMOTE_WRITE	(1U << 1)
#define RMLX5_ACCESS_REMOTE_READ	(1U << 2)
#define RMLX5_ACCESS_REMOTE_ATOMIC	(1U << 3)

#define RMLX5_PORT_ACTIVE		4
#define RMLX5_LINK_LAYER_INFINIBAND	1
#define RMLX5_ATOMIC_HCA		1
#define RMLX5_MTU_4096			5

/*
 * device_flags: the device sees the process's stores to its UAR page (a
 * ConnectX PCI function): doorbells and BlueFlame copies need no KICK, and
 * KICK fails with EOPNOTSUPP. Without it (the software HCA) every doorbell
 * must be followed by KICK.
 */
#define RMLX5_DEVICE_UAR_DOORBELLS	(1U << 0)

#define RMLX5_KICK_SEND			1
#define RMLX5_KICK_SEND_BLUEFLAME	2
#define RMLX5_KICK_RECV			3
#define RMLX5_KICK_CQ_ARM		4

/*
 * Software HCA: offset in the UAR page of the doorbell watcher's word
 * (u32, non-zero while it runs; a QP kicked once may then skip its send
 * kick: record store, full fence, load of this word).
 */
#define RMLX5_UAR_WATCH_OFFSET		0x100
/*
 * ... and of its doorbell bits: 64 native-endian u64 words, bit qpn % 4096
 * (bit n % 64 of word n / 64), set with an atomic OR by a provider that
 * skips a send kick.
 */
#define RMLX5_UAR_DOORBELL_BITS_OFFSET	0x200

#define RMLX5_EVENT_CQ_ERR		0
#define RMLX5_EVENT_QP_FATAL		1
#define RMLX5_EVENT_QP_REQ_ERR		2
#define RMLX5_EVENT_QP_ACCESS_ERR	3
#define RMLX5_EVENT_COMM_EST		4
#define RMLX5_EVENT_SQ_DRAINED		5
#define RMLX5_EVENT_DEVICE_FATAL	8
#define RMLX5_EVENT_QP_LAST_WQE_REACHED	16

#endif /* RMLX5_ABI_USER_H */
