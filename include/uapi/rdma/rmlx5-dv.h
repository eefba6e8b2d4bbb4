/* SPDX-License-Identifier: ((GPL-2.0 WITH Linux-syscall-note) OR BSD-2-Clause) */
/*
 * rmlx5 direct verbs: driving the mapped queues of /dev/rmlx5_uverbsN from C.
 *
 * A C program that creates its objects with the commands of
 * <rdma/rmlx5-abi.h> posts and polls by itself, exactly as on an mlx5 HCA.
 * rdma-core's <infiniband/mlx5dv.h> already gives it the segment structs
 * (mlx5_wqe_ctrl_seg, mlx5_wqe_raddr_seg, mlx5_wqe_data_seg, ...), their
 * setters (mlx5dv_set_ctrl_seg, mlx5dv_set_data_seg), the opcodes and the
 * CQE layouts (mlx5_cqe64, mlx5_err_cqe). This header adds what mlx5 users
 * otherwise take from rdma-core's private headers or the hardware manual:
 * the doorbell-record words, the UAR page layout, the BlueFlame halves, the
 * CQ arm sequence, the masked-atomic segment, and the memory barriers.
 * rust/mlx5-prm is the authority; a host test checks every value here
 * against it and against mlx5dv.h. samples/dv/rmlx5_dv_send.c uses all of it.
 *
 * Every multi-byte field the HCA reads or writes is big-endian.
 *
 * Posting a send (SQ of sq_wqe_cnt 64-byte WQEBBs at sq_buf_offset in the
 * QP buffer; pi is the 16-bit producer counter in WQEBBs):
 *   1. build the WQE at WQEBB (pi & (sq_wqe_cnt - 1)): a control segment
 *      (WQE index pi, opcode, QPN, DS = size in 16-byte units), then
 *      remote-address, atomic and data or inline segments;
 *   2. rmlx5_dv_to_device_barrier();
 *      dbr[RMLX5_QP_DBR_SEND] = htobe32((pi + WQEBBs) & 0xffff);
 *   3. rmlx5_dv_wc_start();
 *      store the WQE's first 8 bytes with one 64-bit write at the QP's
 *      current BlueFlame half of the UAR page (plain doorbell), or copy the
 *      whole WQE there in 8-byte stores if it fits in one half (BlueFlame);
 *   4. rmlx5_dv_flush_writes(); the next doorbell of this QP uses the other
 *      half (offset ^= bf_size);
 *   5. rmlx5's software HCA only: RMLX5_IOCTL_KICK with RMLX5_KICK_SEND or
 *      RMLX5_KICK_SEND_BLUEFLAME and the offset written in step 3 (a real
 *      HCA sees the UAR store itself).
 * Posting a receive (RQ of rq_wqe_cnt entries of 1 << rq_wqe_shift bytes at
 * rq_buf_offset): write data segments, end a short list with one whose lkey
 * is MLX5_INVALID_LKEY, rmlx5_dv_to_device_barrier(), then
 * dbr[RMLX5_QP_DBR_RECV] = htobe32(head & 0xffff). No doorbell, no kick.
 * Polling a CQ (cqe_cnt entries of 64 bytes; ci counts without wrapping):
 * the entry at ci & (cqe_cnt - 1) is the software's when
 * rmlx5_dv_cqe_sw_owned(op_own, ci, cqe_cnt); then
 * rmlx5_dv_from_device_barrier(), read the rest, and after consuming it
 * dbr[RMLX5_CQ_DBR_SET_CI] = htobe32(++ci & RMLX5_CQ_CI_MASK).
 * Arming a CQ: see rmlx5_dv_cq_arm_word() below.
 */
#ifndef RMLX5_DV_H
#define RMLX5_DV_H

#include <linux/types.h>

/* QP doorbell record (mmap RMLX5_MMAP_QP_DBR): two big-endian 32-bit words,
 * indexes into a __be32 array; 16 bits of each counter are significant.
 * The same indexes as mlx5dv.h's MLX5_RCV_DBR and MLX5_SND_DBR. */
#define RMLX5_QP_DBR_RECV		0	/* receive WQEs posted */
#define RMLX5_QP_DBR_SEND		1	/* send producer counter, WQEBBs */

/* CQ doorbell record (mmap RMLX5_MMAP_CQ_DBR): two big-endian words. */
#define RMLX5_CQ_DBR_SET_CI		0	/* consumer index, 24 bits */
#define RMLX5_CQ_DBR_ARM		1	/* the arm word below */
#define RMLX5_CQ_CI_MASK		0xffffffU

/* The CQ arm word, sn << 28 | cmd | (ci & RMLX5_CQ_CI_MASK):
 * sn is a 2-bit sequence number the program bumps once for every
 * completion event it reads (mlx5's arm_sn), cmd what to wait for. */
#define RMLX5_CQ_ARM_SN_SHIFT		28
#define RMLX5_CQ_ARM_SN_MASK		3U
#define RMLX5_CQ_ARM_NEXT		(0U << 24)	/* MLX5_CQ_DB_REQ_NOT */
#define RMLX5_CQ_ARM_SOLICITED		(1U << 24)	/* MLX5_CQ_DB_REQ_NOT_SOL */

/* The UAR page (mmap RMLX5_MMAP_UAR, RMLX5_UAR_PAGE_SIZE bytes). */
#define RMLX5_UAR_PAGE_SIZE		4096
/* The CQ doorbell (MLX5_CQ_DOORBELL): one 64-bit store of the arm word
 * (bytes 0..3, big-endian) followed by the CQN (bytes 4..7, big-endian). */
#define RMLX5_UAR_CQ_DOORBELL		0x20
/* BlueFlame registers start here; register i is at
 * RMLX5_UAR_BF_OFFSET + i * RMLX5_BF_REG_SIZE. A QP's register is given by
 * create_qp's bf_offset, its half size by bf_size. */
#define RMLX5_UAR_BF_OFFSET		0x800
/* One whole BlueFlame register (query_device's bf_reg_size, mlx5's
 * 1 << log_bf_reg_size): two halves used alternately, one per doorbell. */
#define RMLX5_BF_REG_SIZE		512
/* One half (create_qp's bf_size): the largest WQE one BlueFlame copy carries. */
#define RMLX5_BF_HALF_SIZE		256

/* Send queue geometry. */
#define RMLX5_SEND_WQE_BB		64	/* MLX5_SEND_WQE_BB */
#define RMLX5_SEND_WQE_DS		16	/* the unit of the control segment's DS */
#define RMLX5_MAX_WQE_BBS		16	/* a WQE spans at most 1 KiB */

/* A CQE the HCA has not written yet: opcode MLX5_CQE_INVALID, owner 0. The
 * kernel fills every op_own of a new CQ with it. */
#define RMLX5_CQE_INIT_OP_OWN		0xf0

/* The 32-byte segment of MLX5_OPCODE_ATOMIC_MASKED_CS / _FA on 8 bytes
 * (control, remote address, this, one data segment for the result), which
 * mlx5dv.h does not define. */
struct rmlx5_wqe_masked_atomic_seg {
	__be64 swap_add;	/* swap value (CS) or addend (FA) */
	__be64 compare;		/* compare value (CS) */
	__be64 swap_add_mask;	/* bits to swap (CS) or field ends (FA) */
	__be64 compare_mask;	/* bits that take part in the compare (CS) */
};

/* Whether the CQE at index ci of a CQ of cqe_cnt entries is the software's:
 * its opcode is not MLX5_CQE_INVALID and its owner bit equals the parity of
 * the pass over the ring. */
static inline int rmlx5_dv_cqe_sw_owned(__u8 op_own, __u32 ci, __u32 cqe_cnt)
{
	return (op_own >> 4) != 0xf && (op_own & 1) == !!(ci & cqe_cnt);
}

/* The arm word for sequence number arm_sn (only its low 2 bits count),
 * command cmd (RMLX5_CQ_ARM_NEXT or RMLX5_CQ_ARM_SOLICITED) and consumer
 * index ci, in host order. Arming: write htobe32(word) to
 * dbr[RMLX5_CQ_DBR_ARM], rmlx5_dv_wc_start(), store the 8 bytes
 * htobe32(word), htobe32(cqn) with one 64-bit write at RMLX5_UAR_CQ_DOORBELL,
 * rmlx5_dv_flush_writes(), then (software HCA) RMLX5_IOCTL_KICK with
 * RMLX5_KICK_CQ_ARM. The HCA fires once when a CQE at or after ci exists. */
static inline __u32 rmlx5_dv_cq_arm_word(__u32 arm_sn, __u32 cmd, __u32 ci)
{
	return (arm_sn & RMLX5_CQ_ARM_SN_MASK) << RMLX5_CQ_ARM_SN_SHIFT | cmd |
	       (ci & RMLX5_CQ_CI_MASK);
}

/*
 * Barriers, with the names and meaning of rdma-core's udma_barrier.h:
 *   rmlx5_dv_to_device_barrier(): queue memory (WQEs, receive entries)
 *	before the doorbell record that publishes it;
 *   rmlx5_dv_from_device_barrier(): a CQE's owner byte before its body;
 *   rmlx5_dv_wc_start(): the doorbell record before the UAR store;
 *   rmlx5_dv_flush_writes(): the UAR (write-combined) stores out before
 *	anything else, e.g. the next doorbell or the kick.
 */
#if defined(__x86_64__) || defined(__i386__)
#define rmlx5_dv_to_device_barrier()	__asm__ __volatile__("" ::: "memory")
#define rmlx5_dv_from_device_barrier()	__asm__ __volatile__("" ::: "memory")
#define rmlx5_dv_wc_start()		__asm__ __volatile__("sfence" ::: "memory")
#define rmlx5_dv_flush_writes()		__asm__ __volatile__("sfence" ::: "memory")
#elif defined(__aarch64__)
#define rmlx5_dv_to_device_barrier()	__asm__ __volatile__("dmb oshst" ::: "memory")
#define rmlx5_dv_from_device_barrier()	__asm__ __volatile__("dmb oshld" ::: "memory")
#define rmlx5_dv_wc_start()		__asm__ __volatile__("dmb oshst" ::: "memory")
#define rmlx5_dv_flush_writes()		__asm__ __volatile__("dsb st" ::: "memory")
#else
/* A full barrier everywhere: correct, if slower than needed. */
#define rmlx5_dv_to_device_barrier()	__sync_synchronize()
#define rmlx5_dv_from_device_barrier()	__sync_synchronize()
#define rmlx5_dv_wc_start()		__sync_synchronize()
#define rmlx5_dv_flush_writes()		__sync_synchronize()
#endif

#endif /* RMLX5_DV_H */
