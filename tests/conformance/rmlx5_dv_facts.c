// SPDX-License-Identifier: GPL-2.0
/*
 * Prints what include/uapi/rdma/rmlx5-dv.h says, for rust/mlx5-prm's
 * tests/dv_header.rs to compare with the crate:
 *   const NAME VALUE                 (hex)
 *   offset STRUCT FIELD OFFSET SIZE  (hex)
 *   size STRUCT SIZE                 (hex)
 *   arm SN CMD CI WORD               (rmlx5_dv_cq_arm_word)
 *   owned OP_OWN CI CQE_CNT RESULT   (rmlx5_dv_cqe_sw_owned)
 * and "end". Where mlx5dv.h has the same fact under its own name, a static
 * assertion here checks that the two agree.
 */
#include <stddef.h>
#include <stdio.h>

#include <infiniband/mlx5dv.h>
#include <rdma/rmlx5-dv.h>

_Static_assert(RMLX5_QP_DBR_RECV == MLX5_RCV_DBR, "receive doorbell word");
_Static_assert(RMLX5_QP_DBR_SEND == MLX5_SND_DBR, "send doorbell word");
_Static_assert(RMLX5_CQ_ARM_NEXT == MLX5_CQ_DB_REQ_NOT, "arm: next");
_Static_assert(RMLX5_CQ_ARM_SOLICITED == MLX5_CQ_DB_REQ_NOT_SOL, "arm: solicited");
_Static_assert(RMLX5_UAR_CQ_DOORBELL == MLX5_CQ_DOORBELL, "UAR CQ doorbell");
_Static_assert(RMLX5_SEND_WQE_BB == MLX5_SEND_WQE_BB, "WQEBB");
_Static_assert(RMLX5_SEND_WQE_BB == 1 << MLX5_SEND_WQE_SHIFT, "WQEBB shift");
_Static_assert(RMLX5_SEND_WQE_DS == sizeof(struct mlx5_wqe_data_seg), "DS unit");
_Static_assert(RMLX5_CQE_INIT_OP_OWN >> 4 == MLX5_CQE_INVALID, "initial opcode");
_Static_assert(RMLX5_BF_HALF_SIZE * 2 == RMLX5_BF_REG_SIZE, "BlueFlame halves");

#define CONST(n) printf("const %s %llx\n", #n, (unsigned long long)(n))
#define OFFSET(s, f)                                                           \
	printf("offset %s %s %zx %zx\n", #s, #f, offsetof(struct s, f),        \
	       sizeof(((struct s *)0)->f))

int main(void)
{
	static const unsigned int cis[] = { 0, 1, 15, 16, 17, 255, 256, 0xffffff,
					    0x1000000, 0x1234567, 0xffffffff };
	static const unsigned int cnts[] = { 1, 2, 16, 256, 4096, 1U << 22 };

	CONST(RMLX5_QP_DBR_RECV);
	CONST(RMLX5_QP_DBR_SEND);
	CONST(RMLX5_CQ_DBR_SET_CI);
	CONST(RMLX5_CQ_DBR_ARM);
	CONST(RMLX5_CQ_CI_MASK);
	CONST(RMLX5_CQ_ARM_SN_SHIFT);
	CONST(RMLX5_CQ_ARM_SN_MASK);
	CONST(RMLX5_CQ_ARM_NEXT);
	CONST(RMLX5_CQ_ARM_SOLICITED);
	CONST(RMLX5_UAR_PAGE_SIZE);
	CONST(RMLX5_UAR_CQ_DOORBELL);
	CONST(RMLX5_UAR_BF_OFFSET);
	CONST(RMLX5_BF_REG_SIZE);
	CONST(RMLX5_BF_HALF_SIZE);
	CONST(RMLX5_SEND_WQE_BB);
	CONST(RMLX5_SEND_WQE_DS);
	CONST(RMLX5_MAX_WQE_BBS);
	CONST(RMLX5_CQE_INIT_OP_OWN);

	printf("size rmlx5_wqe_masked_atomic_seg %zx\n",
	       sizeof(struct rmlx5_wqe_masked_atomic_seg));
	OFFSET(rmlx5_wqe_masked_atomic_seg, swap_add);
	OFFSET(rmlx5_wqe_masked_atomic_seg, compare);
	OFFSET(rmlx5_wqe_masked_atomic_seg, swap_add_mask);
	OFFSET(rmlx5_wqe_masked_atomic_seg, compare_mask);

	for (unsigned int sn = 0; sn < 6; sn++)
		for (unsigned int i = 0; i < sizeof(cis) / sizeof(cis[0]); i++) {
			printf("arm %x %x %x %x\n", sn, RMLX5_CQ_ARM_NEXT, cis[i],
			       rmlx5_dv_cq_arm_word(sn, RMLX5_CQ_ARM_NEXT, cis[i]));
			printf("arm %x %x %x %x\n", sn, RMLX5_CQ_ARM_SOLICITED, cis[i],
			       rmlx5_dv_cq_arm_word(sn, RMLX5_CQ_ARM_SOLICITED, cis[i]));
		}
	for (unsigned int op = 0; op < 256; op++)
		for (unsigned int i = 0; i < sizeof(cis) / sizeof(cis[0]); i++)
			for (unsigned int c = 0; c < sizeof(cnts) / sizeof(cnts[0]); c++)
				printf("owned %x %x %x %x\n", op, cis[i], cnts[c],
				       rmlx5_dv_cqe_sw_owned((__u8)op, cis[i], cnts[c]));
	printf("end\n");
	return 0;
}
