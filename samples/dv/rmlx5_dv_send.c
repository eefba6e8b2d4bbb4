// SPDX-License-Identifier: GPL-2.0
/*
 * rmlx5 from C with direct verbs: one SEND from rmlx5_0 to rmlx5_1 and back
 * through a completion event, posted and polled by hand.
 *
 * Built only from rdma-core's <infiniband/mlx5dv.h> (segment structs and
 * setters, opcodes, CQE layout) and rmlx5's <rdma/rmlx5-abi.h> (commands)
 * and <rdma/rmlx5-dv.h> (doorbell records, UAR, arm word, barriers): no
 * libibverbs call and no rmlx5 Rust code. It opens both devices, creates a
 * PD, an MR, a CQ (B's with a completion channel) and an RC QP on each,
 * connects them (A's path on SL 5), then:
 *   1. B posts a receive; A posts a SEND with a plain doorbell; both CQEs
 *      are polled by owner bit; B's receive CQE must name A's QPN, A's LID
 *      and SL 5 in the raw flags_rqpn and slid bytes, and the data must match;
 *   2. B arms its CQ, A sends again with a BlueFlame copy, B waits for the
 *      completion event on its channel and finds the CQE.
 * Each step prints "rmlx5-test: PASS|FAIL <name>" for the guest runner and
 * the program exits non-zero on the first failure.
 *
 * Usage: rmlx5-dv-c-tests [filter]   (runs only if "dv_c" contains filter)
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <infiniband/mlx5dv.h>
#include <rdma/rmlx5-abi.h>
#include <rdma/rmlx5-dv.h>

#define PAGE 4096
#define MSG_LEN 200
#define SEND_SL 5
#define WAIT_MS 20000

#define CHECK(name, cond, ...)                                                 \
	do {                                                                   \
		if (!(cond)) {                                                 \
			printf("rmlx5-test: FAIL %s: ", name);                 \
			printf(__VA_ARGS__);                                   \
			printf("\n");                                          \
			fflush(stdout);                                        \
			exit(1);                                               \
		}                                                              \
	} while (0)

struct side {
	const char *name;
	int fd;
	__u32 lid, pd, mr, lkey, cq, cqn, cqe_cnt, qp, qpn;
	int channel;
	__u64 cq_user_handle;
	/* Mapped queue memory. */
	uint8_t *cq_buf;
	__be32 *cq_dbr;
	uint8_t *qp_buf;
	__be32 *qp_dbr;
	uint8_t *uar;
	size_t cq_buf_size, qp_buf_size;
	/* Queue geometry and software state. */
	__u32 sq_wqe_cnt, rq_wqe_cnt, rq_stride, sq_off, rq_off;
	__u32 bf_offset, bf_size, bf_half;
	__u16 sq_pi, rq_head;
	__u32 cq_ci, arm_sn;
	uint8_t *data;
};

static int cmd(struct side *s, unsigned long nr, void *arg, __u32 size)
{
	struct rmlx5_cmd_hdr *h = arg;

	h->size = size;
	h->flags = 0;
	return ioctl(s->fd, nr, arg) ? -errno : 0;
}

#define CMD(s, nr, a) cmd(s, nr, &(a), sizeof(a))

static void *map(struct side *s, __u64 off, size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, (off_t)off);

	CHECK("dv_c_setup", p != MAP_FAILED, "%s: mmap %#llx: %s", s->name,
	      (unsigned long long)off, strerror(errno));
	return p;
}

static void open_side(struct side *s, int index, int with_channel)
{
	char path[64];
	struct rmlx5_query_port qport = { .port_num = 1 };
	struct rmlx5_query_device qdev = {};
	struct rmlx5_alloc_pd pd = {};
	struct rmlx5_reg_mr mr = {};
	struct rmlx5_create_comp_channel ch = {};
	struct rmlx5_create_cq cq = {};
	struct rmlx5_create_qp qp = {};
	int rc;

	snprintf(path, sizeof(path), "/dev/rmlx5_uverbs%d", index);
	s->fd = open(path, O_RDWR | O_CLOEXEC);
	CHECK("dv_c_setup", s->fd >= 0, "open %s: %s", path, strerror(errno));
	rc = CMD(s, RMLX5_IOCTL_QUERY_DEVICE, qdev);
	CHECK("dv_c_setup", !rc, "query_device: %d", rc);
	/* mlx5's meaning: the whole register, two halves. */
	CHECK("dv_c_bf_reg_size", qdev.bf_reg_size == RMLX5_BF_REG_SIZE,
	      "bf_reg_size %u", qdev.bf_reg_size);
	rc = CMD(s, RMLX5_IOCTL_QUERY_PORT, qport);
	CHECK("dv_c_setup", !rc && qport.lid != 0, "query_port: %d lid %u", rc, qport.lid);
	s->lid = qport.lid;

	rc = CMD(s, RMLX5_IOCTL_ALLOC_PD, pd);
	CHECK("dv_c_setup", !rc, "alloc_pd: %d", rc);
	s->pd = pd.pd_handle;

	s->data = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK("dv_c_setup", s->data != MAP_FAILED, "anonymous page");
	memset(s->data, 0, PAGE);
	mr.addr = (__u64)(uintptr_t)s->data;
	mr.length = PAGE;
	mr.iova = mr.addr;
	mr.pd_handle = s->pd;
	mr.access = RMLX5_ACCESS_LOCAL_WRITE;
	rc = CMD(s, RMLX5_IOCTL_REG_MR, mr);
	CHECK("dv_c_setup", !rc, "reg_mr: %d", rc);
	s->mr = mr.mr_handle;
	s->lkey = mr.lkey;

	s->channel = -1;
	if (with_channel) {
		rc = CMD(s, RMLX5_IOCTL_CREATE_COMP_CHANNEL, ch);
		CHECK("dv_c_setup", !rc && ch.fd >= 0, "comp channel: %d", rc);
		s->channel = ch.fd;
	}
	s->cq_user_handle = 0xc0ffee00ULL + (__u64)index;
	cq.user_handle = s->cq_user_handle;
	cq.cqe = 16;
	cq.channel_fd = s->channel;
	rc = CMD(s, RMLX5_IOCTL_CREATE_CQ, cq);
	CHECK("dv_c_setup", !rc && cq.cqe_size == 64, "create_cq: %d", rc);
	s->cq = cq.cq_handle;
	s->cqn = cq.cqn;
	s->cqe_cnt = cq.cqe_cnt;
	s->cq_buf_size = cq.buf_size;
	s->cq_buf = map(s, cq.buf_mmap_offset, cq.buf_size);
	s->cq_dbr = map(s, cq.dbr_mmap_offset, PAGE);
	CHECK("dv_c_cq_init", s->cq_buf[63] == RMLX5_CQE_INIT_OP_OWN,
	      "op_own of a new CQE is %#x", s->cq_buf[63]);

	qp.pd_handle = s->pd;
	qp.send_cq_handle = s->cq;
	qp.recv_cq_handle = s->cq;
	qp.qp_type = RMLX5_QPT_RC;
	qp.max_send_wr = 8;
	qp.max_recv_wr = 8;
	qp.max_send_sge = 1;
	qp.max_recv_sge = 1;
	rc = CMD(s, RMLX5_IOCTL_CREATE_QP, qp);
	CHECK("dv_c_setup", !rc, "create_qp: %d", rc);
	s->qp = qp.qp_handle;
	s->qpn = qp.qpn;
	s->sq_wqe_cnt = qp.sq_wqe_cnt;
	s->rq_wqe_cnt = qp.rq_wqe_cnt;
	s->rq_stride = 1U << qp.rq_wqe_shift;
	s->sq_off = qp.sq_buf_offset;
	s->rq_off = qp.rq_buf_offset;
	s->bf_offset = qp.bf_offset;
	s->bf_size = qp.bf_size;
	CHECK("dv_c_bf_reg_size", s->bf_size == RMLX5_BF_HALF_SIZE &&
	      s->bf_offset >= RMLX5_UAR_BF_OFFSET &&
	      s->bf_offset + RMLX5_BF_REG_SIZE <= RMLX5_UAR_PAGE_SIZE,
	      "bf_offset %#x bf_size %u", s->bf_offset, s->bf_size);
	s->qp_buf_size = qp.buf_size;
	s->qp_buf = map(s, qp.buf_mmap_offset, qp.buf_size);
	s->qp_dbr = map(s, qp.dbr_mmap_offset, PAGE);
	s->uar = map(s, qp.uar_mmap_offset, RMLX5_UAR_PAGE_SIZE);
}

static void modify(struct side *s, struct rmlx5_modify_qp m)
{
	int rc;

	m.qp_handle = s->qp;
	rc = CMD(s, RMLX5_IOCTL_MODIFY_QP, m);
	CHECK("dv_c_setup", !rc, "%s: modify_qp to %u: %d", s->name, m.qp_state, rc);
}

static void connect_to(struct side *s, const struct side *peer, __u32 sl)
{
	modify(s, (struct rmlx5_modify_qp){
		.attr_mask = RMLX5_QP_STATE | RMLX5_QP_PKEY_INDEX | RMLX5_QP_PORT |
			     RMLX5_QP_ACCESS_FLAGS,
		.qp_state = RMLX5_QPS_INIT,
		.port_num = 1,
	});
	modify(s, (struct rmlx5_modify_qp){
		.attr_mask = RMLX5_QP_STATE | RMLX5_QP_AV | RMLX5_QP_PATH_MTU |
			     RMLX5_QP_DEST_QPN | RMLX5_QP_RQ_PSN |
			     RMLX5_QP_MAX_DEST_RD_ATOMIC | RMLX5_QP_MIN_RNR_TIMER,
		.qp_state = RMLX5_QPS_RTR,
		.path_mtu = RMLX5_MTU_4096,
		.dest_qp_num = peer->qpn,
		.min_rnr_timer = 12,
		.dlid = peer->lid,
		.sl = sl,
	});
	modify(s, (struct rmlx5_modify_qp){
		.attr_mask = RMLX5_QP_STATE | RMLX5_QP_TIMEOUT | RMLX5_QP_RETRY_CNT |
			     RMLX5_QP_RNR_RETRY | RMLX5_QP_SQ_PSN |
			     RMLX5_QP_MAX_QP_RD_ATOMIC,
		.qp_state = RMLX5_QPS_RTS,
		.timeout = 14,
		.retry_cnt = 7,
		.rnr_retry = 7,
	});
}

static void kick(struct side *s, __u32 kind, __u32 handle, __u32 uar_offset)
{
	struct rmlx5_kick k = { .kind = kind, .handle = handle, .uar_offset = uar_offset };
	int rc = CMD(s, RMLX5_IOCTL_KICK, k);

	CHECK("dv_c_setup", !rc, "%s: kick %u: %d", s->name, kind, rc);
}

/* One receive of len bytes at data + off; the list ends with the invalid
 * lkey when the entry has room for more than one segment. */
static void post_recv(struct side *s, __u32 off, __u32 len)
{
	struct mlx5_wqe_data_seg *seg = (void *)(s->qp_buf + s->rq_off +
		(s->rq_head & (s->rq_wqe_cnt - 1)) * s->rq_stride);

	mlx5dv_set_data_seg(seg, len, s->lkey, (uintptr_t)(s->data + off));
	if (s->rq_stride > sizeof(*seg))
		mlx5dv_set_data_seg(seg + 1, 0, MLX5_INVALID_LKEY, 0);
	s->rq_head++;
	rmlx5_dv_to_device_barrier();
	s->qp_dbr[RMLX5_QP_DBR_RECV] = htobe32(s->rq_head);
}

/* A signaled SEND of len bytes from data + off, one WQEBB, rung with a
 * plain doorbell or a BlueFlame copy. */
static void post_send(struct side *s, __u32 off, __u32 len, int blueflame)
{
	uint8_t *wqe = s->qp_buf + s->sq_off +
		       (s->sq_pi & (s->sq_wqe_cnt - 1)) * RMLX5_SEND_WQE_BB;
	struct mlx5_wqe_ctrl_seg *ctrl = (void *)wqe;
	struct mlx5_wqe_data_seg *dseg = (void *)(wqe + sizeof(*ctrl));
	__u32 ds = (sizeof(*ctrl) + sizeof(*dseg)) / RMLX5_SEND_WQE_DS;
	__u32 uar_off = s->bf_offset + s->bf_half;
	volatile uint64_t *reg = (volatile uint64_t *)(s->uar + uar_off);
	uint64_t words[RMLX5_SEND_WQE_BB / 8];

	memset(wqe, 0, RMLX5_SEND_WQE_BB);
	mlx5dv_set_ctrl_seg(ctrl, s->sq_pi, MLX5_OPCODE_SEND, 0, s->qpn,
			    MLX5_WQE_CTRL_CQ_UPDATE, (uint8_t)ds, 0, 0);
	mlx5dv_set_data_seg(dseg, len, s->lkey, (uintptr_t)(s->data + off));
	s->sq_pi++;

	rmlx5_dv_to_device_barrier();
	s->qp_dbr[RMLX5_QP_DBR_SEND] = htobe32(s->sq_pi);
	rmlx5_dv_wc_start();
	memcpy(words, wqe, sizeof(words));
	if (blueflame) {
		for (unsigned int i = 0; i < RMLX5_SEND_WQE_BB / 8; i++)
			reg[i] = words[i];
	} else {
		reg[0] = words[0];
	}
	rmlx5_dv_flush_writes();
	s->bf_half ^= s->bf_size;
	kick(s, blueflame ? RMLX5_KICK_SEND_BLUEFLAME : RMLX5_KICK_SEND, s->qp, uar_off);
}

/* Polls for one CQE for at most WAIT_MS and returns a copy of it. */
static struct mlx5_cqe64 poll_one(struct side *s, const char *test)
{
	struct mlx5_cqe64 cqe;
	volatile uint8_t *op_own;
	int waited = 0;

	for (;;) {
		uint8_t *e = s->cq_buf + (s->cq_ci & (s->cqe_cnt - 1)) * 64;

		op_own = e + 63;
		if (rmlx5_dv_cqe_sw_owned(*op_own, s->cq_ci, s->cqe_cnt)) {
			rmlx5_dv_from_device_barrier();
			memcpy(&cqe, e, sizeof(cqe));
			break;
		}
		CHECK(test, waited < WAIT_MS, "%s: no CQE after %d ms", s->name, WAIT_MS);
		usleep(1000);
		waited++;
	}
	s->cq_ci++;
	s->cq_dbr[RMLX5_CQ_DBR_SET_CI] = htobe32(s->cq_ci & RMLX5_CQ_CI_MASK);
	return cqe;
}

static void arm(struct side *s)
{
	__u32 word = rmlx5_dv_cq_arm_word(s->arm_sn, RMLX5_CQ_ARM_NEXT, s->cq_ci);
	volatile uint64_t *db = (volatile uint64_t *)(s->uar + RMLX5_UAR_CQ_DOORBELL);
	__be32 bytes[2] = { htobe32(word), htobe32(s->cqn) };
	uint64_t v;

	s->cq_dbr[RMLX5_CQ_DBR_ARM] = htobe32(word);
	memcpy(&v, bytes, sizeof(v));
	rmlx5_dv_wc_start();
	*db = v;
	rmlx5_dv_flush_writes();
	kick(s, RMLX5_KICK_CQ_ARM, s->cq, 0);
}

int main(int argc, char **argv)
{
	struct side a = { .name = "rmlx5_0" }, b = { .name = "rmlx5_1" };
	struct mlx5_cqe64 cqe;
	struct pollfd pfd;
	__u64 handle;
	__u32 flags_rqpn;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc > 1 && argv[1][0] && !strstr("dv_c_send_recv dv_c_arm_event", argv[1]))
		return 0;

	open_side(&a, 0, 0);
	open_side(&b, 1, 1);
	connect_to(&a, &b, SEND_SL);
	connect_to(&b, &a, 0);
	printf("rmlx5-test: PASS dv_c_setup\n");
	printf("rmlx5-test: PASS dv_c_bf_reg_size\n");
	printf("rmlx5-test: PASS dv_c_cq_init\n");

	/* 1. SEND with a plain doorbell; both completions by owner bit. */
	for (int i = 0; i < MSG_LEN; i++)
		a.data[i] = (uint8_t)(i * 7 + 3);
	post_recv(&b, 1024, 512);
	post_send(&a, 0, MSG_LEN, 0);

	cqe = poll_one(&a, "dv_c_send_recv");
	CHECK("dv_c_send_recv", mlx5dv_get_cqe_opcode(&cqe) == MLX5_CQE_REQ,
	      "requester CQE opcode %u", mlx5dv_get_cqe_opcode(&cqe));
	CHECK("dv_c_send_recv", (be32toh(cqe.sop_drop_qpn) & 0xffffff) == a.qpn &&
	      be32toh(cqe.sop_drop_qpn) >> 24 == MLX5_OPCODE_SEND &&
	      be16toh(cqe.wqe_counter) == 0,
	      "requester CQE sop_drop_qpn %#x wqe_counter %u",
	      be32toh(cqe.sop_drop_qpn), be16toh(cqe.wqe_counter));

	cqe = poll_one(&b, "dv_c_send_recv");
	flags_rqpn = be32toh(cqe.flags_rqpn);
	CHECK("dv_c_send_recv", mlx5dv_get_cqe_opcode(&cqe) == MLX5_CQE_RESP_SEND,
	      "responder CQE opcode %u", mlx5dv_get_cqe_opcode(&cqe));
	CHECK("dv_c_send_recv", be32toh(cqe.byte_cnt) == MSG_LEN &&
	      (be32toh(cqe.sop_drop_qpn) & 0xffffff) == b.qpn,
	      "responder byte_cnt %u qpn %#x", be32toh(cqe.byte_cnt),
	      be32toh(cqe.sop_drop_qpn) & 0xffffff);
	/* The sender, as rdma-core and mlx5_ib read it: src_qp, slid, sl, GRH. */
	CHECK("dv_c_send_recv", (flags_rqpn & 0xffffff) == a.qpn,
	      "flags_rqpn source QPN %#x, sender %#x", flags_rqpn & 0xffffff, a.qpn);
	CHECK("dv_c_send_recv", be16toh(cqe.slid) == a.lid,
	      "slid %u, sender's LID %u", be16toh(cqe.slid), a.lid);
	CHECK("dv_c_send_recv", ((flags_rqpn >> 24) & 0xf) == SEND_SL &&
	      ((flags_rqpn >> 28) & 3) == 0 && cqe.ml_path == 0,
	      "sl %u grh %u ml_path %u", (flags_rqpn >> 24) & 0xf,
	      (flags_rqpn >> 28) & 3, cqe.ml_path);
	CHECK("dv_c_send_recv", memcmp(b.data + 1024, a.data, MSG_LEN) == 0,
	      "received data differs");
	printf("rmlx5-test: PASS dv_c_send_recv\n");

	/* 2. Armed CQ, BlueFlame SEND, completion event on the channel. */
	post_recv(&b, 2048, 512);
	arm(&b);
	memset(a.data, 0x5a, MSG_LEN);
	post_send(&a, 0, MSG_LEN, 1);
	cqe = poll_one(&a, "dv_c_arm_event");
	CHECK("dv_c_arm_event", mlx5dv_get_cqe_opcode(&cqe) == MLX5_CQE_REQ &&
	      be16toh(cqe.wqe_counter) == 1,
	      "requester CQE opcode %u wqe_counter %u", mlx5dv_get_cqe_opcode(&cqe),
	      be16toh(cqe.wqe_counter));
	pfd.fd = b.channel;
	pfd.events = POLLIN;
	CHECK("dv_c_arm_event", poll(&pfd, 1, WAIT_MS) == 1, "no completion event");
	CHECK("dv_c_arm_event", read(b.channel, &handle, sizeof(handle)) == RMLX5_COMP_EVENT_SIZE &&
	      handle == b.cq_user_handle, "event names %#llx", (unsigned long long)handle);
	b.arm_sn++;
	cqe = poll_one(&b, "dv_c_arm_event");
	flags_rqpn = be32toh(cqe.flags_rqpn);
	CHECK("dv_c_arm_event", mlx5dv_get_cqe_opcode(&cqe) == MLX5_CQE_RESP_SEND &&
	      (flags_rqpn & 0xffffff) == a.qpn && be16toh(cqe.slid) == a.lid,
	      "responder CQE opcode %u src %#x slid %u", mlx5dv_get_cqe_opcode(&cqe),
	      flags_rqpn & 0xffffff, be16toh(cqe.slid));
	CHECK("dv_c_arm_event", b.data[2048] == 0x5a && b.data[2048 + MSG_LEN - 1] == 0x5a,
	      "received data differs");
	printf("rmlx5-test: PASS dv_c_arm_event\n");

	/* Nothing more may arrive. */
	CHECK("dv_c_arm_event", !rmlx5_dv_cqe_sw_owned(b.cq_buf[(b.cq_ci & (b.cqe_cnt - 1)) * 64 + 63],
						       b.cq_ci, b.cqe_cnt),
	      "an extra CQE");
	close(a.fd);
	close(b.channel);
	close(b.fd);
	return 0;
}
