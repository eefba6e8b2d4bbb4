// SPDX-License-Identifier: GPL-2.0
/*
 * rmlx5_ulp: a sample kernel ULP of rmlx5.ko and its end-to-end test.
 *
 * At load it connects an RC QP on rmlx5_<dev0> (default rmlx5_0) to one on
 * rmlx5_<dev1> (default rmlx5_1; the same device gives a loopback pair, as
 * over one ConnectX function) and runs every verb through the exported API
 * (include/rdma/rmlx5_ib.h), in polling and completion-handler modes,
 * checks the data, then error completions and flushes, RNR and transport
 * retries, and tears everything down. Each case prints "rmlx5-test: PASS
 * <prefix>_name" or "rmlx5-test: FAIL <prefix>_name: why" for make check
 * (prefix "ulp", or the `prefix` parameter).
 *
 * With leak=1 it instead creates a connected pair (PDs, MRs, CQs with
 * handlers, QPs) and unloads without destroying them, freeing only its own
 * buffers: rmlx5 must reclaim the objects at its own unload, without leaks
 * or warnings (the guest checks its "reclaimed" message and kmemleak).
 */
#include <linux/completion.h>
#include <linux/delay.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <rdma/rmlx5_ib.h>

#define BUF_SIZE 8192
#define ACCESS_ALL 0xf

struct side {
	struct rmlx5_ib_pd *pd;
	struct rmlx5_ib_mr *mr;
	u32 key;
	struct rmlx5_ib_cq *cq;
	struct rmlx5_ib_qp *qp;
	u8 *buf;
	struct completion done;
	atomic_t handler_calls;
};

static struct side s[2];
static int failures;

static bool leak;
module_param(leak, bool, 0444);
MODULE_PARM_DESC(leak, "create objects and unload without destroying them");

static int dev0;
module_param(dev0, int, 0444);
MODULE_PARM_DESC(dev0, "device of side 0 (rmlx5_<dev0>)");

static int dev1 = 1;
module_param(dev1, int, 0444);
MODULE_PARM_DESC(dev1, "device of side 1 (rmlx5_<dev1>; dev0 for a loopback pair)");

static bool dma_syncs;
module_param(dma_syncs, bool, 0444);
MODULE_PARM_DESC(dma_syncs, "the device's DMA needs syncs (swiotlb=force): check that MRs are refused, run nothing else");

static char *prefix = "ulp";
module_param(prefix, charp, 0444);
MODULE_PARM_DESC(prefix, "prefix of the test names");

/* The device and the port LID of each side. */
static int devs[2];
static u16 lids[2];

#define PASS(name) pr_info("rmlx5-test: PASS %s_%s\n", prefix, name)
#define FAIL(name, fmt, ...) do { \
	failures++; \
	pr_info("rmlx5-test: FAIL %s_%s: " fmt "\n", prefix, name, \
		##__VA_ARGS__); \
} while (0)

static void comp_handler(struct rmlx5_ib_cq *cq, void *ctx)
{
	struct side *sd = ctx;

	atomic_inc(&sd->handler_calls);
	complete(&sd->done);
}

/* Polls one completion within ~2 s. */
static int poll_one(struct side *sd, struct rmlx5_ib_wc *wc)
{
	int i, n;

	for (i = 0; i < 2000; i++) {
		n = rmlx5_ib_poll_cq(sd->cq, 1, wc);
		if (n)
			return n < 0 ? n : 0;
		usleep_range(500, 1000);
	}
	return -ETIMEDOUT;
}

/* Retry attributes of a connection (IB encodings). */
struct conn {
	u8 min_rnr_timer;
	u8 timeout;
	u8 retry_cnt;
	u8 rnr_retry;
};

static const struct conn conn_default = {
	.min_rnr_timer = 12, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
};

static int qp_to_init(struct rmlx5_ib_qp *qp)
{
	struct rmlx5_ib_qp_attr a = {
		.qp_state = RMLX5_IB_QPS_INIT,
		.qp_access_flags = RMLX5_IB_ACCESS_REMOTE_WRITE |
			RMLX5_IB_ACCESS_REMOTE_READ | RMLX5_IB_ACCESS_REMOTE_ATOMIC,
		.port_num = 1,
	};

	return rmlx5_ib_modify_qp(qp, &a, RMLX5_IB_QP_STATE |
				  RMLX5_IB_QP_ACCESS_FLAGS |
				  RMLX5_IB_QP_PKEY_INDEX | RMLX5_IB_QP_PORT);
}

static int connect_qp(struct rmlx5_ib_qp *qp, u16 dlid, u32 dqpn,
		      const struct conn *c)
{
	struct rmlx5_ib_qp_attr a = {
		.qp_state = RMLX5_IB_QPS_INIT,
		.qp_access_flags = RMLX5_IB_ACCESS_REMOTE_WRITE |
			RMLX5_IB_ACCESS_REMOTE_READ | RMLX5_IB_ACCESS_REMOTE_ATOMIC,
		.port_num = 1,
	};
	int err;

	err = rmlx5_ib_modify_qp(qp, &a, RMLX5_IB_QP_STATE |
				 RMLX5_IB_QP_ACCESS_FLAGS |
				 RMLX5_IB_QP_PKEY_INDEX | RMLX5_IB_QP_PORT);
	if (err)
		return err;
	a.qp_state = RMLX5_IB_QPS_RTR;
	a.path_mtu = 5;
	a.dlid = dlid;
	a.dest_qp_num = dqpn;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = c->min_rnr_timer;
	err = rmlx5_ib_modify_qp(qp, &a, RMLX5_IB_QP_STATE | RMLX5_IB_QP_AV |
				 RMLX5_IB_QP_PATH_MTU | RMLX5_IB_QP_DEST_QPN |
				 RMLX5_IB_QP_RQ_PSN |
				 RMLX5_IB_QP_MAX_DEST_RD_ATOMIC |
				 RMLX5_IB_QP_MIN_RNR_TIMER);
	if (err)
		return err;
	a.qp_state = RMLX5_IB_QPS_RTS;
	a.timeout = c->timeout;
	a.retry_cnt = c->retry_cnt;
	a.rnr_retry = c->rnr_retry;
	a.max_rd_atomic = 4;
	return rmlx5_ib_modify_qp(qp, &a, RMLX5_IB_QP_STATE |
				  RMLX5_IB_QP_TIMEOUT | RMLX5_IB_QP_RETRY_CNT |
				  RMLX5_IB_QP_RNR_RETRY | RMLX5_IB_QP_SQ_PSN |
				  RMLX5_IB_QP_MAX_QP_RD_ATOMIC);
}

/*
 * Creates both sides and connects them with retry attributes @c; with
 * @peer_rtr false side 1 stays in INIT, so side 0 is never answered.
 */
static int setup_conn(bool handlers, const struct conn *c, bool peer_rtr)
{
	struct rmlx5_ib_qp_init_attr qa = {
		.max_send_wr = 64, .max_recv_wr = 64,
		.max_send_sge = 2, .max_recv_sge = 2, .sq_sig_all = 1,
	};
	int i, err;

	for (i = 0; i < 2; i++) {
		struct side *sd = &s[i];

		memset(sd, 0, sizeof(*sd));
		init_completion(&sd->done);
		sd->buf = kzalloc(BUF_SIZE, GFP_KERNEL);
		if (!sd->buf)
			return -ENOMEM;
		err = rmlx5_ib_alloc_pd(devs[i], &sd->pd);
		if (err)
			return err;
		err = rmlx5_ib_reg_mr(sd->pd, sd->buf, BUF_SIZE, ACCESS_ALL,
				      &sd->mr, &sd->key);
		if (err)
			return err;
		err = rmlx5_ib_create_cq(devs[i], handlers ? comp_handler : NULL, sd,
					 256, i, &sd->cq);
		if (err)
			return err;
		qa.send_cq = sd->cq;
		qa.recv_cq = sd->cq;
		err = rmlx5_ib_create_qp(sd->pd, &qa, &sd->qp);
		if (err)
			return err;
	}
	err = connect_qp(s[0].qp, lids[1], rmlx5_ib_qp_num(s[1].qp), c);
	if (err)
		return err;
	if (!peer_rtr)
		return qp_to_init(s[1].qp);
	return connect_qp(s[1].qp, lids[0], rmlx5_ib_qp_num(s[0].qp), c);
}

static int setup(bool handlers)
{
	return setup_conn(handlers, &conn_default, true);
}

static void teardown(void)
{
	int i;

	for (i = 0; i < 2; i++) {
		struct side *sd = &s[i];

		if (sd->qp && rmlx5_ib_destroy_qp(sd->qp))
			FAIL("teardown", "destroy_qp");
		if (sd->cq && rmlx5_ib_destroy_cq(sd->cq))
			FAIL("teardown", "destroy_cq");
		if (sd->mr && rmlx5_ib_dereg_mr(sd->mr))
			FAIL("teardown", "dereg_mr");
		if (sd->pd && rmlx5_ib_dealloc_pd(sd->pd))
			FAIL("teardown", "dealloc_pd");
		kfree(sd->buf);
		memset(sd, 0, sizeof(*sd));
	}
}

static int post_recv(int i, u64 id, u32 off, u32 len)
{
	struct rmlx5_ib_sge sge = {
		.addr = (u64)(uintptr_t)(s[i].buf + off), .length = len,
		.lkey = s[i].key,
	};
	struct rmlx5_ib_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 };

	return rmlx5_ib_post_recv(s[i].qp, &wr, NULL);
}

/* Posts one WR from side 0 whose local SGE is buf[off..off+len). */
static int post0(struct rmlx5_ib_send_wr *wr, u32 off, u32 len)
{
	struct rmlx5_ib_sge sge = {
		.addr = (u64)(uintptr_t)(s[0].buf + off), .length = len,
		.lkey = s[0].key,
	};

	wr->sg_list = len ? &sge : NULL;
	wr->num_sge = len ? 1 : 0;
	wr->send_flags |= RMLX5_IB_SEND_SIGNALED;
	return rmlx5_ib_post_send(s[0].qp, wr, NULL);
}

static u64 remote(u32 off)
{
	return (u64)(uintptr_t)(s[1].buf + off);
}

static bool expect(const char *name, struct side *sd, u32 status, u32 opcode,
		   u64 wr_id)
{
	struct rmlx5_ib_wc wc;
	int err = poll_one(sd, &wc);

	if (err) {
		FAIL(name, "poll: %d", err);
		return false;
	}
	if (wc.status != status || wc.opcode != opcode || wc.wr_id != wr_id) {
		FAIL(name, "wc status %u opcode %u wr_id %llu", wc.status,
		     wc.opcode, wc.wr_id);
		return false;
	}
	return true;
}

static void run_verbs(const char *mode)
{
	struct rmlx5_ib_send_wr wr;
	char name[48];
	u64 *ctr = (u64 *)(s[1].buf + 4096);
	u64 *old = (u64 *)(s[0].buf + 4096);
	int i;

	/* SEND / RECV */
	snprintf(name, sizeof(name), "send_recv_%s", mode);
	for (i = 0; i < 64; i++)
		s[0].buf[i] = i * 3;
	post_recv(1, 10, 0, 64);
	memset(&wr, 0, sizeof(wr));
	wr.opcode = RMLX5_IB_WR_SEND;
	wr.wr_id = 1;
	if (!post0(&wr, 0, 64) &&
	    expect(name, &s[0], 0, RMLX5_IB_WC_SEND, 1) &&
	    expect(name, &s[1], 0, RMLX5_IB_WC_RECV, 10)) {
		if (memcmp(s[0].buf, s[1].buf, 64))
			FAIL(name, "data mismatch");
		else
			PASS(name);
	}

	/* SEND_IMM */
	snprintf(name, sizeof(name), "send_imm_%s", mode);
	post_recv(1, 11, 256, 64);
	memset(&wr, 0, sizeof(wr));
	wr.opcode = RMLX5_IB_WR_SEND_WITH_IMM;
	wr.wr_id = 2;
	wr.imm_data = cpu_to_be32(0x12345678);
	if (!post0(&wr, 0, 16) && expect(name, &s[0], 0, RMLX5_IB_WC_SEND, 2)) {
		struct rmlx5_ib_wc wc;

		if (poll_one(&s[1], &wc) || wc.opcode != RMLX5_IB_WC_RECV ||
		    !(wc.wc_flags & RMLX5_IB_WC_WITH_IMM) ||
		    wc.imm_data != cpu_to_be32(0x12345678) ||
		    wc.src_qp != rmlx5_ib_qp_num(s[0].qp))
			FAIL(name, "recv wc imm %x flags %u src_qp %#x",
			     be32_to_cpu(wc.imm_data), wc.wc_flags, wc.src_qp);
		else
			PASS(name);
	}

	/* WRITE */
	snprintf(name, sizeof(name), "write_%s", mode);
	memset(s[0].buf + 512, 0xab, 128);
	memset(&wr, 0, sizeof(wr));
	wr.opcode = RMLX5_IB_WR_RDMA_WRITE;
	wr.wr_id = 3;
	wr.remote_addr = remote(1024);
	wr.rkey = s[1].key;
	if (!post0(&wr, 512, 128) &&
	    expect(name, &s[0], 0, RMLX5_IB_WC_RDMA_WRITE, 3)) {
		if (memcmp(s[0].buf + 512, s[1].buf + 1024, 128))
			FAIL(name, "data mismatch");
		else
			PASS(name);
	}

	/* WRITE_IMM */
	snprintf(name, sizeof(name), "write_imm_%s", mode);
	post_recv(1, 12, 0, 0);
	memset(&wr, 0, sizeof(wr));
	wr.opcode = RMLX5_IB_WR_RDMA_WRITE_WITH_IMM;
	wr.wr_id = 4;
	wr.imm_data = cpu_to_be32(7);
	wr.remote_addr = remote(2048);
	wr.rkey = s[1].key;
	if (!post0(&wr, 512, 32) &&
	    expect(name, &s[0], 0, RMLX5_IB_WC_RDMA_WRITE, 4) &&
	    expect(name, &s[1], 0, RMLX5_IB_WC_RECV_RDMA_WITH_IMM, 12)) {
		if (memcmp(s[0].buf + 512, s[1].buf + 2048, 32))
			FAIL(name, "data mismatch");
		else
			PASS(name);
	}

	/* READ */
	snprintf(name, sizeof(name), "read_%s", mode);
	memset(s[1].buf + 3072, 0x5c, 64);
	memset(&wr, 0, sizeof(wr));
	wr.opcode = RMLX5_IB_WR_RDMA_READ;
	wr.wr_id = 5;
	wr.remote_addr = remote(3072);
	wr.rkey = s[1].key;
	if (!post0(&wr, 3072, 64) &&
	    expect(name, &s[0], 0, RMLX5_IB_WC_RDMA_READ, 5)) {
		if (memcmp(s[0].buf + 3072, s[1].buf + 3072, 64))
			FAIL(name, "data mismatch");
		else
			PASS(name);
	}

	/* FAA, CAS, masked CAS, masked FAA on a counter at peer buf+4096. */
	*ctr = 100;
	snprintf(name, sizeof(name), "faa_%s", mode);
	memset(&wr, 0, sizeof(wr));
	wr.opcode = RMLX5_IB_WR_ATOMIC_FETCH_AND_ADD;
	wr.wr_id = 6;
	wr.remote_addr = remote(4096);
	wr.rkey = s[1].key;
	wr.compare_add = 5;
	if (!post0(&wr, 4096, 8) &&
	    expect(name, &s[0], 0, RMLX5_IB_WC_FETCH_ADD, 6)) {
		if (*old != 100 || READ_ONCE(*ctr) != 105)
			FAIL(name, "old %llu new %llu", *old, *ctr);
		else
			PASS(name);
	}
	snprintf(name, sizeof(name), "cas_%s", mode);
	wr.opcode = RMLX5_IB_WR_ATOMIC_CMP_AND_SWP;
	wr.wr_id = 7;
	wr.compare_add = 105;
	wr.swap = 0x1111222233334444ULL;
	wr.send_flags = 0;
	if (!post0(&wr, 4096, 8) &&
	    expect(name, &s[0], 0, RMLX5_IB_WC_COMP_SWAP, 7)) {
		if (*old != 105 || READ_ONCE(*ctr) != 0x1111222233334444ULL)
			FAIL(name, "old %llx new %llx", *old, *ctr);
		else
			PASS(name);
	}
	snprintf(name, sizeof(name), "masked_cas_%s", mode);
	wr.opcode = RMLX5_IB_WR_MASKED_ATOMIC_CMP_AND_SWP;
	wr.wr_id = 8;
	wr.compare_add = 0x4444;	/* low 16 bits must be 0x4444 */
	wr.compare_add_mask = 0xffff;
	wr.swap = 0xabcd0000;		/* replace bits 31:16 */
	wr.swap_mask = 0xffff0000;
	wr.send_flags = 0;
	if (!post0(&wr, 4096, 8) &&
	    expect(name, &s[0], 0, RMLX5_IB_WC_MASKED_COMP_SWAP, 8)) {
		if (*old != 0x1111222233334444ULL ||
		    READ_ONCE(*ctr) != 0x11112222abcd4444ULL)
			FAIL(name, "old %llx new %llx", *old, *ctr);
		else
			PASS(name);
	}
	snprintf(name, sizeof(name), "masked_faa_%s", mode);
	*ctr = 0x00ff00ff;
	wr.opcode = RMLX5_IB_WR_MASKED_ATOMIC_FETCH_AND_ADD;
	wr.wr_id = 9;
	wr.compare_add = 0x00010001;	/* add 1 to two 16-bit fields */
	wr.compare_add_mask = 0x80008000; /* field boundaries (MSBs) */
	wr.swap = 0;
	wr.swap_mask = 0;
	wr.send_flags = 0;
	if (!post0(&wr, 4096, 8) &&
	    expect(name, &s[0], 0, RMLX5_IB_WC_MASKED_FETCH_ADD, 9)) {
		if (*old != 0x00ff00ff || READ_ONCE(*ctr) != 0x01000100)
			FAIL(name, "old %llx new %llx", *old, *ctr);
		else
			PASS(name);
	}
}

#define LIST_LEN 40
#define LIST_OFF 6144

/*
 * Posting lists: a chain longer than any batch the post path might convert
 * at once runs whole and in order; in a chain whose middle WR is refused
 * (too many SGEs), the WR before it runs, *bad_wr names the refused one and
 * nothing after it runs. The WRs live on the heap: 40 of them are 4 KiB.
 */
static void run_post_lists(void)
{
	const struct rmlx5_ib_send_wr *bad = NULL;
	struct rmlx5_ib_send_wr *wrs;
	struct rmlx5_ib_sge *sges;
	struct rmlx5_ib_wc wc;
	int i, err, n;

	wrs = kcalloc(LIST_LEN, sizeof(*wrs), GFP_KERNEL);
	sges = kcalloc(LIST_LEN, sizeof(*sges), GFP_KERNEL);
	if (!wrs || !sges) {
		FAIL("post_list_long", "no memory");
		goto out;
	}
	for (i = 0; i < LIST_LEN; i++) {
		memset(s[0].buf + LIST_OFF + 8 * i, 0x40 + i, 8);
		sges[i].addr = (u64)(uintptr_t)(s[0].buf + LIST_OFF + 8 * i);
		sges[i].length = 8;
		sges[i].lkey = s[0].key;
		wrs[i].next = i + 1 < LIST_LEN ? &wrs[i + 1] : NULL;
		wrs[i].wr_id = 100 + i;
		wrs[i].sg_list = &sges[i];
		wrs[i].num_sge = 1;
		wrs[i].opcode = RMLX5_IB_WR_RDMA_WRITE;
		wrs[i].send_flags = RMLX5_IB_SEND_SIGNALED;
		wrs[i].remote_addr = remote(LIST_OFF + 8 * i);
		wrs[i].rkey = s[1].key;
	}
	memset(s[1].buf + LIST_OFF, 0, 8 * LIST_LEN);
	err = rmlx5_ib_post_send(s[0].qp, wrs, &bad);
	for (n = 0; !err && n < LIST_LEN; n++) {
		if (poll_one(&s[0], &wc) || wc.status || wc.wr_id != 100 + n)
			break;
	}
	if (err)
		FAIL("post_list_long", "post %d", err);
	else if (n != LIST_LEN)
		FAIL("post_list_long", "completion %d of %d missing or out of order",
		     n, LIST_LEN);
	else if (memcmp(s[0].buf + LIST_OFF, s[1].buf + LIST_OFF, 8 * LIST_LEN))
		FAIL("post_list_long", "data mismatch");
	else
		PASS("post_list_long");

	/* Three WRs, the second with more SGEs than any QP takes. */
	wrs[2].next = NULL;
	wrs[1].num_sge = 99;
	bad = NULL;
	err = rmlx5_ib_post_send(s[0].qp, wrs, &bad);
	if (err != -EINVAL || bad != &wrs[1]) {
		FAIL("post_list_bad_wr", "post %d, bad_wr is WR %ld", err,
		     bad ? (long)(bad - wrs) : -1L);
	} else if (expect("post_list_bad_wr", &s[0], 0, RMLX5_IB_WC_RDMA_WRITE,
			  100)) {
		msleep(20);
		n = rmlx5_ib_poll_cq(s[0].cq, 1, &wc);
		if (n)
			FAIL("post_list_bad_wr", "a WR after the refused one ran (wr_id %llu)",
			     wc.wr_id);
		else
			PASS("post_list_bad_wr");
	}
out:
	kfree(sges);
	kfree(wrs);
}

static void run_handler_mode(void)
{
	struct rmlx5_ib_send_wr wr = {};
	int calls;

	if (rmlx5_ib_req_notify_cq(s[0].cq, RMLX5_IB_CQ_NEXT_COMP) < 0) {
		FAIL("handler_notify", "req_notify failed");
		return;
	}
	reinit_completion(&s[0].done);
	wr.opcode = RMLX5_IB_WR_RDMA_WRITE;
	wr.wr_id = 20;
	wr.remote_addr = remote(0);
	wr.rkey = s[1].key;
	if (post0(&wr, 0, 8)) {
		FAIL("handler_notify", "post");
		return;
	}
	if (!wait_for_completion_timeout(&s[0].done, 2 * HZ)) {
		FAIL("handler_notify", "handler not called");
		return;
	}
	calls = atomic_read(&s[0].handler_calls);
	if (expect("handler_notify", &s[0], 0, RMLX5_IB_WC_RDMA_WRITE, 20))
		PASS("handler_notify");
	/* Not re-armed: another completion must not call the handler. */
	wr.wr_id = 21;
	post0(&wr, 0, 8);
	expect("handler_one_shot", &s[0], 0, RMLX5_IB_WC_RDMA_WRITE, 21);
	msleep(20);
	if (atomic_read(&s[0].handler_calls) != calls)
		FAIL("handler_one_shot", "handler called without arm");
	else
		PASS("handler_one_shot");
}

static void run_errors(void)
{
	struct rmlx5_ib_send_wr wr = {};

	/* A WRITE with a wrong rkey fails remotely; the QP goes to ERR and
	 * the receive posted on the peer... stays; ours is flushed. */
	post_recv(0, 30, 0, 16);
	wr.opcode = RMLX5_IB_WR_RDMA_WRITE;
	wr.wr_id = 31;
	wr.remote_addr = remote(0);
	wr.rkey = s[1].key ^ 0xff;
	if (post0(&wr, 0, 8)) {
		FAIL("error_rem_access", "post");
		return;
	}
	{
		struct rmlx5_ib_wc wc[2];
		int got = 0, i;

		for (i = 0; i < 2000 && got < 2; i++) {
			got += rmlx5_ib_poll_cq(s[0].cq, 2 - got, wc + got);
			if (got < 2)
				usleep_range(500, 1000);
		}
		if (got < 1 || wc[0].status == RMLX5_IB_WC_SUCCESS)
			FAIL("error_rem_access", "got %d status %u", got,
			     got ? wc[0].status : 0);
		else
			PASS("error_rem_access");
		if (got < 2 || wc[1].status != RMLX5_IB_WC_WR_FLUSH_ERR ||
		    wc[1].wr_id != 30)
			FAIL("error_flush", "got %d status %u wr_id %llu", got,
			     got > 1 ? wc[1].status : 0,
			     got > 1 ? wc[1].wr_id : 0);
		else
			PASS("error_flush");
	}
	if (rmlx5_ib_destroy_cq(s[0].cq) != -EBUSY)
		FAIL("destroy_cq_busy", "destroy_cq with a QP did not fail");
	else
		PASS("destroy_cq_busy");
}

/* Polls two completions of side 0 within ~2 s; returns how many came. */
static int poll_two(struct rmlx5_ib_wc *wc)
{
	int got = 0, i, n;

	for (i = 0; i < 2000 && got < 2; i++) {
		n = rmlx5_ib_poll_cq(s[0].cq, 2 - got, wc + got);
		if (n < 0)
			return n;
		got += n;
		if (got < 2)
			usleep_range(500, 1000);
	}
	return got;
}

/* Posts two SENDs (wr_id 1 and 2) from side 0 and expects @status for the
 * first and a flush for the second. */
static void expect_retry_failure(const char *name, u32 status)
{
	struct rmlx5_ib_send_wr wr = { .opcode = RMLX5_IB_WR_SEND };
	struct rmlx5_ib_wc wc[2];
	int got;

	wr.wr_id = 1;
	if (post0(&wr, 0, 32)) {
		FAIL(name, "post");
		return;
	}
	wr.wr_id = 2;
	wr.send_flags = 0;
	if (post0(&wr, 0, 32)) {
		FAIL(name, "post");
		return;
	}
	got = poll_two(wc);
	if (got < 2 || wc[0].wr_id != 1 || wc[0].status != status ||
	    wc[1].wr_id != 2 || wc[1].status != RMLX5_IB_WC_WR_FLUSH_ERR)
		FAIL(name, "got %d: wr_id %llu status %u, wr_id %llu status %u",
		     got, got > 0 ? wc[0].wr_id : 0, got > 0 ? wc[0].status : 0,
		     got > 1 ? wc[1].wr_id : 0, got > 1 ? wc[1].status : 0);
	else
		PASS(name);
}

/*
 * The model's clock (an hrtimer in rmlx5) drives RNR and transport retries:
 * a SEND without a receive waits forever with rnr_retry 7 and completes
 * once a receive is posted; with rnr_retry 2 it fails with RNR_RETRY_EXC;
 * towards a peer that is not RTR it fails with RETRY_EXC.
 */
static void run_retries(void)
{
	/* RNR timer code 14: 1.28 ms; ACK timeout 10: 4.2 ms. */
	const struct conn forever = {
		.min_rnr_timer = 14, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
	};
	const struct conn rnr2 = {
		.min_rnr_timer = 14, .timeout = 14, .retry_cnt = 7, .rnr_retry = 2,
	};
	const struct conn ack2 = {
		.min_rnr_timer = 14, .timeout = 10, .retry_cnt = 2, .rnr_retry = 7,
	};
	struct rmlx5_ib_send_wr wr = { .opcode = RMLX5_IB_WR_SEND, .wr_id = 40 };
	struct rmlx5_ib_wc wc;
	int err;

	err = setup_conn(false, &forever, true);
	if (err) {
		FAIL("rnr_retry_forever", "setup %d", err);
	} else if (post0(&wr, 0, 32)) {
		FAIL("rnr_retry_forever", "post");
	} else {
		/* Many RNR timer periods without a receive: no completion. */
		msleep(20);
		if (rmlx5_ib_poll_cq(s[0].cq, 1, &wc) != 0)
			FAIL("rnr_retry_forever", "completed without a receive");
		else if (post_recv(1, 41, 0, 64))
			FAIL("rnr_retry_forever", "post_recv");
		else if (expect("rnr_retry_forever", &s[0], 0, RMLX5_IB_WC_SEND, 40) &&
			 expect("rnr_retry_forever", &s[1], 0, RMLX5_IB_WC_RECV, 41))
			PASS("rnr_retry_forever");
	}
	teardown();

	err = setup_conn(false, &rnr2, true);
	if (err)
		FAIL("rnr_retry_exceeded", "setup %d", err);
	else
		expect_retry_failure("rnr_retry_exceeded",
				     RMLX5_IB_WC_RNR_RETRY_EXC_ERR);
	teardown();

	err = setup_conn(false, &ack2, false);
	if (err)
		FAIL("transport_retry_exceeded", "setup %d", err);
	else
		expect_retry_failure("transport_retry_exceeded",
				     RMLX5_IB_WC_RETRY_EXC_ERR);
	teardown();
}

static int __init rmlx5_ulp_init(void)
{
	struct rmlx5_ib_device_attr attr;
	int err, i;

	devs[0] = dev0;
	devs[1] = dev1;
	for (i = 0; i < 2; i++) {
		if (rmlx5_ib_query_device(devs[i], &attr) || attr.atomic_cap != 1) {
			FAIL("setup", "rmlx5_%d: no such device with atomics",
			     devs[i]);
			return 0;
		}
		lids[i] = attr.lid;
	}
	if (dma_syncs) {
		/*
		 * Memory a device reaches only through bounce buffers cannot be
		 * an MR (the device and the CPU would see different copies):
		 * registration must fail with EOPNOTSUPP, not succeed and lose
		 * the data.
		 */
		struct rmlx5_ib_pd *pd;
		struct rmlx5_ib_mr *mr;
		void *buf = kzalloc(BUF_SIZE, GFP_KERNEL);
		u32 key;

		if (!buf || rmlx5_ib_alloc_pd(devs[0], &pd)) {
			FAIL("mr_needing_dma_syncs_refused", "no PD or buffer");
		} else {
			err = rmlx5_ib_reg_mr(pd, buf, BUF_SIZE, ACCESS_ALL, &mr, &key);
			if (err == -EOPNOTSUPP) {
				PASS("mr_needing_dma_syncs_refused");
			} else {
				FAIL("mr_needing_dma_syncs_refused", "reg_mr returned %d", err);
				if (!err)
					rmlx5_ib_dereg_mr(mr);
			}
			rmlx5_ib_dealloc_pd(pd);
		}
		kfree(buf);
		return 0;
	}
	if (leak) {
		/* No work is left posted: the buffers are freed at exit while
		 * the MRs over them stay registered until rmlx5 unloads. */
		err = setup(true);
		if (err)
			FAIL("leak_created", "setup %d", err);
		else
			PASS("leak_created");
		return 0;
	}
	err = setup(false);
	if (err) {
		FAIL("setup_polling", "%d", err);
	} else {
		PASS("setup_polling");
		run_verbs("polling");
		run_post_lists();
		run_errors();
	}
	teardown();
	err = setup(true);
	if (err) {
		FAIL("setup_handler", "%d", err);
	} else {
		PASS("setup_handler");
		run_handler_mode();
		run_verbs("handler");
	}
	teardown();
	run_retries();
	if (!failures)
		PASS("teardown");
	return 0;
}

static void __exit rmlx5_ulp_exit(void)
{
	int i;

	/* In leak mode the rmlx5 objects are deliberately left behind. */
	for (i = 0; leak && i < 2; i++)
		kfree(s[i].buf);
}

module_init(rmlx5_ulp_init);
module_exit(rmlx5_ulp_exit);
MODULE_DESCRIPTION("Sample kernel ULP of rmlx5 and its end-to-end test");
MODULE_LICENSE("GPL");
