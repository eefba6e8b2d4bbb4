// SPDX-License-Identifier: GPL-2.0
/*
 * rmlx5_ibtest: a kernel ULP of the generic ib_* API, run on rmlx5's
 * ib_core devices. It uses no rmlx5 symbol: it finds rmlx5_0 and rmlx5_1
 * through an ib_client, as any in-tree ULP finds its devices.
 *
 * At load, for each CQ poll context (IB_POLL_DIRECT, IB_POLL_SOFTIRQ,
 * IB_POLL_WORKQUEUE) it connects an RC QP on rmlx5_0 to one on rmlx5_1
 * and checks SEND/RECV, RDMA WRITE and RDMA READ (data and completions,
 * under the PD's DMA MR), fast registration of scattered pages with WRITE,
 * READ and atomics through it, fast MRs of 257 pages (RDS's 1 MiB MRs) on
 * both sides with one WRITE and one READ across all of them, local
 * invalidation (after which the key fails with a remote access error),
 * ib_drain_qp and the QP state after it, then destroys everything in an
 * order that differs per context. Each case prints
 * "rmlx5-test: PASS ib_<case>" or "rmlx5-test: FAIL ib_<case>: why".
 *
 * Before those: UD sends between a UD QP on each device through an IB
 * address handle to dev1's LID (ud_send: data, byte_len with the 40 bytes
 * of GRH space, source QPN and LID, no GRH; ud_bad_qkey: a datagram with
 * another Q_Key is dropped), and the GSI QP refused on an InfiniBand port
 * (gsi_refused).
 *
 * dev0= and dev1= name other devices (the same one twice for a loopback
 * pair, as on one ConnectX function) and prefix= replaces "ib" in the test
 * names. On a device without fast registration (no
 * IB_DEVICE_MEM_MGT_EXTENSIONS) the fast_reg, fast_reg_257 and local_inv
 * cases are skipped, and said so.
 *
 * With hold=1 it runs no test but keeps a PD, a CQ and a QP on every rmlx5
 * device until ib_core removes the device (rmmod rmlx5 while this module is
 * loaded, a ConnectX function's unbind or recovery): the client's remove
 * callback drains the QP, destroys them and reports "ib_remove_<device>".
 */
#include <linux/completion.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <rdma/ib_verbs.h>

#define BUF_SIZE 8192
#define WAIT_MS 5000

static bool hold;
module_param(hold, bool, 0444);
MODULE_PARM_DESC(hold, "keep objects on every rmlx5 device until it is removed");

static char *dev0 = "rmlx5_0";
module_param(dev0, charp, 0444);
MODULE_PARM_DESC(dev0, "ib_core name of side 0's device");

static char *dev1 = "rmlx5_1";
module_param(dev1, charp, 0444);
MODULE_PARM_DESC(dev1, "ib_core name of side 1's device (dev0 for a loopback pair)");

static char *prefix = "ib";
module_param(prefix, charp, 0444);
MODULE_PARM_DESC(prefix, "prefix of the test names");

#define PASS(name, ctx) pr_info("rmlx5-test: PASS %s_%s%s\n", prefix, name, ctx)
#define FAIL(name, ctx, fmt, ...) \
	pr_info("rmlx5-test: FAIL %s_%s%s: " fmt "\n", prefix, name, ctx, \
		##__VA_ARGS__)

static struct ib_device *devs[2];
static struct ib_client ibtest_client;

/* One side of a connection. */
struct end {
	struct ib_device *dev;
	struct ib_pd *pd;
	struct ib_cq *cq;
	struct ib_qp *qp;
	u8 *buf;
	u64 dma;
	u16 lid;
};

/* A work request and its completion. */
struct twr {
	struct ib_cqe cqe;
	struct completion done;
	struct ib_wc wc;
};

static void twr_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct twr *t = container_of(wc->wr_cqe, struct twr, cqe);

	t->wc = *wc;
	complete(&t->done);
}

static void twr_init(struct twr *t)
{
	memset(t, 0, sizeof(*t));
	t->cqe.done = twr_done;
	init_completion(&t->done);
}

/* Waits for t's completion on cq: polls a DIRECT CQ, sleeps otherwise. */
static bool twr_wait(struct ib_cq *cq, struct twr *t)
{
	unsigned long end = jiffies + msecs_to_jiffies(WAIT_MS);

	if (cq->poll_ctx != IB_POLL_DIRECT)
		return wait_for_completion_timeout(&t->done,
						   msecs_to_jiffies(WAIT_MS)) > 0;
	while (!try_wait_for_completion(&t->done)) {
		if (time_after(jiffies, end))
			return false;
		ib_process_cq_direct(cq, -1);
		cond_resched();
	}
	return true;
}

static void end_free(struct end *e, int order)
{
	if (e->buf) {
		ib_dma_unmap_single(e->dev, e->dma, BUF_SIZE, DMA_BIDIRECTIONAL);
		kfree(e->buf);
		e->buf = NULL;
	}
	/* PD and CQ do not depend on each other: both orders are valid. */
	if (order) {
		if (e->pd)
			ib_dealloc_pd(e->pd);
		if (e->cq)
			ib_free_cq(e->cq);
	} else {
		if (e->cq)
			ib_free_cq(e->cq);
		if (e->pd)
			ib_dealloc_pd(e->pd);
	}
	e->pd = NULL;
	e->cq = NULL;
}

static int end_setup(struct end *e, struct ib_device *dev,
		     enum ib_poll_context ctx)
{
	struct ib_qp_init_attr init = {};
	struct ib_port_attr pa;
	int err;

	e->dev = dev;
	err = ib_query_port(dev, 1, &pa);
	if (err)
		return err;
	e->lid = pa.lid;
	e->pd = ib_alloc_pd(dev, IB_PD_UNSAFE_GLOBAL_RKEY);
	if (IS_ERR(e->pd)) {
		err = PTR_ERR(e->pd);
		e->pd = NULL;
		return err;
	}
	e->cq = ib_alloc_cq(dev, NULL, 64, 0, ctx);
	if (IS_ERR(e->cq)) {
		err = PTR_ERR(e->cq);
		e->cq = NULL;
		return err;
	}
	init.send_cq = e->cq;
	init.recv_cq = e->cq;
	init.cap.max_send_wr = 16;
	init.cap.max_recv_wr = 16;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	init.sq_sig_type = IB_SIGNAL_REQ_WR;
	init.qp_type = IB_QPT_RC;
	e->qp = ib_create_qp(e->pd, &init);
	if (IS_ERR(e->qp)) {
		err = PTR_ERR(e->qp);
		e->qp = NULL;
		return err;
	}
	e->buf = kzalloc(BUF_SIZE, GFP_KERNEL);
	if (!e->buf)
		return -ENOMEM;
	e->dma = ib_dma_map_single(dev, e->buf, BUF_SIZE, DMA_BIDIRECTIONAL);
	if (ib_dma_mapping_error(dev, e->dma)) {
		kfree(e->buf);
		e->buf = NULL;
		return -ENOMEM;
	}
	return 0;
}

/* RESET -> INIT -> RTR -> RTS, connected to peer. */
static int end_connect(struct end *e, struct end *peer)
{
	struct ib_qp_attr a = {};
	int err;

	a.qp_state = IB_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = 1;
	a.qp_access_flags = IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_READ |
			    IB_ACCESS_REMOTE_ATOMIC;
	err = ib_modify_qp(e->qp, &a, IB_QP_STATE | IB_QP_PKEY_INDEX |
			   IB_QP_PORT | IB_QP_ACCESS_FLAGS);
	if (err)
		return err;
	memset(&a, 0, sizeof(a));
	a.qp_state = IB_QPS_RTR;
	a.path_mtu = IB_MTU_4096;
	a.dest_qp_num = peer->qp->qp_num;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 12;
	a.ah_attr.type = rdma_ah_find_type(e->dev, 1);
	rdma_ah_set_dlid(&a.ah_attr, peer->lid);
	rdma_ah_set_port_num(&a.ah_attr, 1);
	err = ib_modify_qp(e->qp, &a, IB_QP_STATE | IB_QP_AV | IB_QP_PATH_MTU |
			   IB_QP_DEST_QPN | IB_QP_RQ_PSN |
			   IB_QP_MAX_DEST_RD_ATOMIC | IB_QP_MIN_RNR_TIMER);
	if (err)
		return err;
	memset(&a, 0, sizeof(a));
	a.qp_state = IB_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0;
	a.max_rd_atomic = 4;
	return ib_modify_qp(e->qp, &a, IB_QP_STATE | IB_QP_TIMEOUT |
			    IB_QP_RETRY_CNT | IB_QP_RNR_RETRY | IB_QP_SQ_PSN |
			    IB_QP_MAX_QP_RD_ATOMIC);
}

/* Posts one signalled send-queue WR and waits for its completion. */
static int post_wait(struct end *e, struct ib_send_wr *wr, struct twr *t)
{
	int err;

	twr_init(t);
	wr->wr_cqe = &t->cqe;
	wr->send_flags |= IB_SEND_SIGNALED;
	err = ib_post_send(e->qp, wr, NULL);
	if (err)
		return err;
	return twr_wait(e->cq, t) ? 0 : -ETIMEDOUT;
}

static bool check_wc(const char *name, const char *ctx, struct twr *t,
		     enum ib_wc_opcode op, struct ib_qp *qp)
{
	if (t->wc.status != IB_WC_SUCCESS) {
		FAIL(name, ctx, "status %s", ib_wc_status_msg(t->wc.status));
		return false;
	}
	if (t->wc.opcode != op || t->wc.qp != qp) {
		FAIL(name, ctx, "opcode %d qp %p, expected %d and %p",
		     t->wc.opcode, t->wc.qp, op, qp);
		return false;
	}
	return true;
}

static void test_send_recv(struct end *a, struct end *b, const char *ctx)
{
	struct ib_sge ssge = { a->dma, 64, a->pd->local_dma_lkey };
	struct ib_sge rsge = { b->dma, 256, b->pd->local_dma_lkey };
	struct ib_send_wr swr = { .sg_list = &ssge, .num_sge = 1,
				  .opcode = IB_WR_SEND };
	struct ib_recv_wr rwr = { .sg_list = &rsge, .num_sge = 1 };
	struct twr st, rt;
	int err, i;

	for (i = 0; i < 64; i++)
		a->buf[i] = 0xa0 + i;
	twr_init(&rt);
	rwr.wr_cqe = &rt.cqe;
	err = ib_post_recv(b->qp, &rwr, NULL);
	if (!err)
		err = post_wait(a, &swr, &st);
	if (err) {
		FAIL("send_recv", ctx, "post or wait: %d", err);
		return;
	}
	if (!twr_wait(b->cq, &rt)) {
		FAIL("send_recv", ctx, "no receive completion");
		return;
	}
	if (!check_wc("send_recv", ctx, &st, IB_WC_SEND, a->qp) ||
	    !check_wc("send_recv", ctx, &rt, IB_WC_RECV, b->qp))
		return;
	if (rt.wc.byte_len != 64 || rt.wc.src_qp != a->qp->qp_num) {
		FAIL("send_recv", ctx, "byte_len %u src_qp %#x", rt.wc.byte_len,
		     rt.wc.src_qp);
		return;
	}
	if (memcmp(a->buf, b->buf, 64)) {
		FAIL("send_recv", ctx, "received data differs");
		return;
	}
	PASS("send_recv", ctx);
}

static void test_write_read(struct end *a, struct end *b, const char *ctx)
{
	struct ib_sge sge = { a->dma + 256, 128, a->pd->local_dma_lkey };
	struct ib_rdma_wr w = {
		.wr = { .sg_list = &sge, .num_sge = 1,
			.opcode = IB_WR_RDMA_WRITE },
		.remote_addr = b->dma + 512,
		.rkey = b->pd->unsafe_global_rkey,
	};
	struct twr t;
	int err, i;

	for (i = 0; i < 128; i++)
		a->buf[256 + i] = i ^ 0x5a;
	err = post_wait(a, &w.wr, &t);
	if (err)
		FAIL("rdma_write", ctx, "post or wait: %d", err);
	else if (check_wc("rdma_write", ctx, &t, IB_WC_RDMA_WRITE, a->qp)) {
		if (memcmp(a->buf + 256, b->buf + 512, 128))
			FAIL("rdma_write", ctx, "remote data differs");
		else
			PASS("rdma_write", ctx);
	}

	for (i = 0; i < 128; i++)
		b->buf[1024 + i] = 0xff - i;
	sge.addr = a->dma + 2048;
	w.wr.opcode = IB_WR_RDMA_READ;
	w.wr.send_flags = 0;
	w.remote_addr = b->dma + 1024;
	err = post_wait(a, &w.wr, &t);
	if (err)
		FAIL("rdma_read", ctx, "post or wait: %d", err);
	else if (check_wc("rdma_read", ctx, &t, IB_WC_RDMA_READ, a->qp)) {
		if (memcmp(a->buf + 2048, b->buf + 1024, 128) || t.wc.byte_len != 128)
			FAIL("rdma_read", ctx, "local data differs (byte_len %u)",
			     t.wc.byte_len);
		else
			PASS("rdma_read", ctx);
	}
}

/*
 * Fast registration on b of three separately allocated pages (ib_map_mr_sg,
 * IB_WR_REG_MR with a new key byte), then from a: a WRITE across all three
 * pages, a READ across a page boundary, fetch-and-add and compare-and-swap
 * on the last word; then IB_WR_LOCAL_INV on b, after which a WRITE with the
 * key fails with a remote access error and a's QP is in ERR.
 */
static void test_fast_reg(struct end *a, struct end *b, const char *ctx)
{
	const int access = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE |
			   IB_ACCESS_REMOTE_READ | IB_ACCESS_REMOTE_ATOMIC;
	struct page *pages[3] = {};
	struct scatterlist sg[3];
	struct ib_mr *mr = NULL;
	struct ib_reg_wr reg = {};
	struct ib_send_wr inv = {};
	struct ib_sge sge = { a->dma, 8192, a->pd->local_dma_lkey };
	struct ib_rdma_wr w = {
		.wr = { .sg_list = &sge, .num_sge = 1,
			.opcode = IB_WR_RDMA_WRITE },
	};
	struct ib_atomic_wr at = {
		.wr = { .sg_list = &sge, .num_sge = 1,
			.opcode = IB_WR_ATOMIC_FETCH_AND_ADD },
	};
	struct ib_qp_init_attr init;
	struct ib_qp_attr qa;
	u64 *last, *result = (u64 *)(a->buf + 4096);
	bool mapped = false;
	struct twr t;
	int i, n, err;

	for (i = 0; i < 3; i++) {
		pages[i] = alloc_page(GFP_KERNEL | __GFP_ZERO);
		if (!pages[i]) {
			FAIL("fast_reg", ctx, "no memory");
			goto out;
		}
	}
	sg_init_table(sg, 3);
	for (i = 0; i < 3; i++)
		sg_set_page(&sg[i], pages[i], PAGE_SIZE, 0);
	if (ib_dma_map_sg(b->dev, sg, 3, DMA_BIDIRECTIONAL) != 3) {
		FAIL("fast_reg", ctx, "ib_dma_map_sg");
		goto out;
	}
	mapped = true;
	mr = ib_alloc_mr(b->pd, IB_MR_TYPE_MEM_REG, 4);
	if (IS_ERR(mr)) {
		FAIL("fast_reg", ctx, "ib_alloc_mr: %ld", PTR_ERR(mr));
		mr = NULL;
		goto out;
	}
	n = ib_map_mr_sg(mr, sg, 3, NULL, PAGE_SIZE);
	if (n != 3 || mr->length != 3 * PAGE_SIZE) {
		FAIL("fast_reg", ctx, "ib_map_mr_sg: %d, length %llu", n, mr->length);
		goto out;
	}
	ib_update_fast_reg_key(mr, ib_inc_rkey(mr->rkey));
	reg.wr.opcode = IB_WR_REG_MR;
	reg.mr = mr;
	reg.key = mr->rkey;
	reg.access = access;
	err = post_wait(b, &reg.wr, &t);
	if (err || !check_wc("fast_reg", ctx, &t, IB_WC_REG_MR, b->qp)) {
		if (err)
			FAIL("fast_reg", ctx, "REG_MR post or wait: %d", err);
		goto out;
	}

	/* 8 KiB from 2 KiB into the first page: all three pages. */
	for (i = 0; i < 8192; i++)
		a->buf[i] = i * 7 + 3;
	w.remote_addr = mr->iova + 2048;
	w.rkey = mr->rkey;
	err = post_wait(a, &w.wr, &t);
	if (err || !check_wc("fast_reg", ctx, &t, IB_WC_RDMA_WRITE, a->qp)) {
		if (err)
			FAIL("fast_reg", ctx, "WRITE post or wait: %d", err);
		goto out;
	}
	if (memcmp(page_address(pages[0]) + 2048, a->buf, PAGE_SIZE - 2048) ||
	    memcmp(page_address(pages[1]), a->buf + PAGE_SIZE - 2048, PAGE_SIZE) ||
	    memcmp(page_address(pages[2]), a->buf + 2 * PAGE_SIZE - 2048, 2048)) {
		FAIL("fast_reg", ctx, "written pages differ");
		goto out;
	}
	/* READ 256 bytes across the boundary of pages 1 and 2. */
	sge.addr = a->dma + 6144;
	sge.length = 256;
	w.wr.opcode = IB_WR_RDMA_READ;
	w.wr.send_flags = 0;
	w.remote_addr = mr->iova + 2 * PAGE_SIZE - 128;
	err = post_wait(a, &w.wr, &t);
	if (err || !check_wc("fast_reg", ctx, &t, IB_WC_RDMA_READ, a->qp)) {
		if (err)
			FAIL("fast_reg", ctx, "READ post or wait: %d", err);
		goto out;
	}
	if (memcmp(a->buf + 6144, page_address(pages[1]) + PAGE_SIZE - 128, 128) ||
	    memcmp(a->buf + 6144 + 128, page_address(pages[2]), 128)) {
		FAIL("fast_reg", ctx, "read data differs");
		goto out;
	}
	/* Atomics on the last word of the third page. */
	last = page_address(pages[2]) + PAGE_SIZE - 8;
	*last = 40;
	*result = 0;
	sge.addr = a->dma + 4096;
	sge.length = 8;
	at.remote_addr = mr->iova + 3 * PAGE_SIZE - 8;
	at.rkey = mr->rkey;
	at.compare_add = 2;
	err = post_wait(a, &at.wr, &t);
	if (err || !check_wc("fast_reg", ctx, &t, IB_WC_FETCH_ADD, a->qp) ||
	    *result != 40 || *last != 42) {
		if (err || t.wc.status == IB_WC_SUCCESS)
			FAIL("fast_reg", ctx, "fetch-add: err %d result %llu word %llu",
			     err, *result, *last);
		goto out;
	}
	at.wr.opcode = IB_WR_ATOMIC_CMP_AND_SWP;
	at.wr.send_flags = 0;
	at.compare_add = 42;
	at.swap = 7;
	err = post_wait(a, &at.wr, &t);
	if (err || !check_wc("fast_reg", ctx, &t, IB_WC_COMP_SWAP, a->qp) ||
	    *result != 42 || *last != 7) {
		if (err || t.wc.status == IB_WC_SUCCESS)
			FAIL("fast_reg", ctx, "compare-swap: err %d result %llu word %llu",
			     err, *result, *last);
		goto out;
	}
	PASS("fast_reg", ctx);

	inv.opcode = IB_WR_LOCAL_INV;
	inv.ex.invalidate_rkey = mr->rkey;
	err = post_wait(b, &inv, &t);
	if (err || !check_wc("local_inv", ctx, &t, IB_WC_LOCAL_INV, b->qp)) {
		if (err)
			FAIL("local_inv", ctx, "post or wait: %d", err);
		goto out;
	}
	sge.addr = a->dma;
	sge.length = 64;
	w.wr.opcode = IB_WR_RDMA_WRITE;
	w.wr.send_flags = 0;
	w.remote_addr = mr->iova;
	err = post_wait(a, &w.wr, &t);
	if (err || t.wc.status != IB_WC_REM_ACCESS_ERR) {
		FAIL("local_inv", ctx, "WRITE after invalidation: err %d status %s",
		     err, ib_wc_status_msg(t.wc.status));
		goto out;
	}
	err = ib_query_qp(a->qp, &qa, IB_QP_STATE, &init);
	if (err || qa.qp_state != IB_QPS_ERR) {
		FAIL("local_inv", ctx, "query_qp %d state %d, expected ERR", err,
		     qa.qp_state);
		goto out;
	}
	PASS("local_inv", ctx);
out:
	if (mr)
		ib_dereg_mr(mr);
	if (mapped)
		ib_dma_unmap_sg(b->dev, sg, 3, DMA_BIDIRECTIONAL);
	for (i = 0; i < 3; i++)
		if (pages[i])
			__free_page(pages[i]);
}

/* The pages of an RDS 1 MiB message: 256 pages plus one for the offset. */
#define FR_PAGES 257

/* A fast MR over FR_PAGES separately allocated pages of one side. */
struct fr {
	struct page *pages[FR_PAGES];
	struct scatterlist sg[FR_PAGES];
	struct ib_mr *mr;
	bool mapped;
};

static void fr_free(struct end *e, struct fr *f)
{
	int i;

	if (f->mr)
		ib_dereg_mr(f->mr);
	if (f->mapped)
		ib_dma_unmap_sg(e->dev, f->sg, FR_PAGES, DMA_BIDIRECTIONAL);
	for (i = 0; i < FR_PAGES; i++)
		if (f->pages[i])
			__free_page(f->pages[i]);
	kfree(f);
}

/*
 * Allocates FR_PAGES pages one by one, maps them, and registers them on e
 * as one fast MR (ib_alloc_mr for FR_PAGES pages, ib_map_mr_sg of the
 * FR_PAGES-entry scatterlist, IB_WR_REG_MR with access). NULL, having said
 * why, if anything fails.
 */
static struct fr *fr_register(struct end *e, int access, const char *ctx)
{
	struct ib_reg_wr reg = {};
	struct fr *f;
	struct twr t;
	int i, n, nents, err;

	f = kzalloc(sizeof(*f), GFP_KERNEL);
	if (!f) {
		FAIL("fast_reg_257", ctx, "no memory");
		return NULL;
	}
	sg_init_table(f->sg, FR_PAGES);
	for (i = 0; i < FR_PAGES; i++) {
		f->pages[i] = alloc_page(GFP_KERNEL | __GFP_ZERO);
		if (!f->pages[i]) {
			FAIL("fast_reg_257", ctx, "no memory");
			goto fail;
		}
		sg_set_page(&f->sg[i], f->pages[i], PAGE_SIZE, 0);
	}
	/* An IOMMU may merge entries: register what the mapping made. */
	nents = ib_dma_map_sg(e->dev, f->sg, FR_PAGES, DMA_BIDIRECTIONAL);
	if (nents <= 0) {
		FAIL("fast_reg_257", ctx, "ib_dma_map_sg");
		goto fail;
	}
	f->mapped = true;
	f->mr = ib_alloc_mr(e->pd, IB_MR_TYPE_MEM_REG, FR_PAGES);
	if (IS_ERR(f->mr)) {
		FAIL("fast_reg_257", ctx, "ib_alloc_mr(%d): %ld", FR_PAGES,
		     PTR_ERR(f->mr));
		f->mr = NULL;
		goto fail;
	}
	n = ib_map_mr_sg(f->mr, f->sg, nents, NULL, PAGE_SIZE);
	if (n != nents || f->mr->length != FR_PAGES * PAGE_SIZE) {
		FAIL("fast_reg_257", ctx, "ib_map_mr_sg: %d, length %llu", n,
		     f->mr->length);
		goto fail;
	}
	ib_update_fast_reg_key(f->mr, ib_inc_rkey(f->mr->rkey));
	reg.wr.opcode = IB_WR_REG_MR;
	reg.mr = f->mr;
	reg.key = f->mr->rkey;
	reg.access = access;
	err = post_wait(e, &reg.wr, &t);
	if (err || !check_wc("fast_reg_257", ctx, &t, IB_WC_REG_MR, e->qp)) {
		if (err)
			FAIL("fast_reg_257", ctx, "REG_MR post or wait: %d", err);
		goto fail;
	}
	return f;
fail:
	fr_free(e, f);
	return NULL;
}

/* Byte off of the registered range of f, which starts at the first page. */
static u8 *fr_byte(struct fr *f, size_t off)
{
	return page_address(f->pages[off / PAGE_SIZE]) + off % PAGE_SIZE;
}

static u8 fr_pattern(size_t off, u8 seed)
{
	return (off * 13 + (off >> 12) * 7 + seed) & 0xff;
}

/*
 * Fast MRs of FR_PAGES pages on both sides (what RDS allocates for 1 MiB
 * messages, and more than the 64 rmlx5 took before): one WRITE from a's MR
 * into b's and one READ from b's back into a's, each from 512 bytes into
 * the first page to 512 bytes short of the end of the last, so that one
 * data segment on each side spans all FR_PAGES pages; every byte checked.
 */
static void test_fast_reg_257(struct end *a, struct end *b, const char *ctx)
{
	const size_t head = 512, len = FR_PAGES * PAGE_SIZE - 1024;
	struct fr *fa = NULL, *fb = NULL;
	struct ib_sge sge = {};
	struct ib_rdma_wr w = {
		.wr = { .sg_list = &sge, .num_sge = 1,
			.opcode = IB_WR_RDMA_WRITE },
	};
	struct twr t;
	size_t i;
	int err;

	if (a->dev->attrs.max_fast_reg_page_list_len < FR_PAGES ||
	    b->dev->attrs.max_fast_reg_page_list_len < FR_PAGES) {
		FAIL("fast_reg_257", ctx, "max_fast_reg_page_list_len %u and %u",
		     a->dev->attrs.max_fast_reg_page_list_len,
		     b->dev->attrs.max_fast_reg_page_list_len);
		return;
	}
	fa = fr_register(a, IB_ACCESS_LOCAL_WRITE, ctx);
	if (fa)
		fb = fr_register(b, IB_ACCESS_LOCAL_WRITE |
				 IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_READ,
				 ctx);
	if (!fa || !fb)
		goto out;

	for (i = 0; i < len; i++)
		*fr_byte(fa, head + i) = fr_pattern(i, 1);
	sge.addr = fa->mr->iova + head;
	sge.length = len;
	sge.lkey = fa->mr->lkey;
	w.remote_addr = fb->mr->iova + head;
	w.rkey = fb->mr->rkey;
	err = post_wait(a, &w.wr, &t);
	if (err || !check_wc("fast_reg_257", ctx, &t, IB_WC_RDMA_WRITE, a->qp)) {
		if (err)
			FAIL("fast_reg_257", ctx, "WRITE post or wait: %d", err);
		goto out;
	}
	for (i = 0; i < len; i++) {
		if (*fr_byte(fb, head + i) != fr_pattern(i, 1)) {
			FAIL("fast_reg_257", ctx, "WRITE: byte %zu (page %zu) differs",
			     i, (head + i) / PAGE_SIZE);
			goto out;
		}
	}

	for (i = 0; i < len; i++)
		*fr_byte(fb, head + i) = fr_pattern(i, 2);
	w.wr.opcode = IB_WR_RDMA_READ;
	w.wr.send_flags = 0;
	err = post_wait(a, &w.wr, &t);
	if (err || !check_wc("fast_reg_257", ctx, &t, IB_WC_RDMA_READ, a->qp)) {
		if (err)
			FAIL("fast_reg_257", ctx, "READ post or wait: %d", err);
		goto out;
	}
	if (t.wc.byte_len != len) {
		FAIL("fast_reg_257", ctx, "READ byte_len %u, expected %zu",
		     t.wc.byte_len, len);
		goto out;
	}
	for (i = 0; i < len; i++) {
		if (*fr_byte(fa, head + i) != fr_pattern(i, 2)) {
			FAIL("fast_reg_257", ctx, "READ: byte %zu (page %zu) differs",
			     i, (head + i) / PAGE_SIZE);
			goto out;
		}
	}
	PASS("fast_reg_257", ctx);
out:
	if (fb)
		fr_free(b, fb);
	if (fa)
		fr_free(a, fa);
}

static void test_drain(struct end *a, struct end *b, const char *ctx)
{
	struct ib_qp_init_attr init;
	struct ib_qp_attr qa;
	int err;

	/* Returns once a flushed SQ and RQ marker completed on each. */
	ib_drain_qp(a->qp);
	ib_drain_qp(b->qp);
	err = ib_query_qp(b->qp, &qa, IB_QP_STATE, &init);
	if (err || qa.qp_state != IB_QPS_ERR) {
		FAIL("drain", ctx, "query_qp %d state %d, expected ERR", err,
		     qa.qp_state);
		return;
	}
	PASS("drain", ctx);
}

static void run_ctx(enum ib_poll_context pctx, const char *ctx, int order)
{
	struct end e[2] = {};
	int err;

	err = end_setup(&e[0], devs[0], pctx);
	if (!err)
		err = end_setup(&e[1], devs[1], pctx);
	if (!err)
		err = end_connect(&e[0], &e[1]);
	if (!err)
		err = end_connect(&e[1], &e[0]);
	if (err) {
		FAIL("connect", ctx, "%d", err);
	} else {
		PASS("connect", ctx);
		test_send_recv(&e[0], &e[1], ctx);
		test_write_read(&e[0], &e[1], ctx);
		if (devs[0]->attrs.device_cap_flags &
		    devs[1]->attrs.device_cap_flags &
		    IB_DEVICE_MEM_MGT_EXTENSIONS)
			test_fast_reg_257(&e[0], &e[1], ctx);
		else
			pr_info("rmlx5_ibtest: %s or %s has no fast registration: fast_reg_257%s skipped\n",
				dev_name(&devs[0]->dev),
				dev_name(&devs[1]->dev), ctx);
		if (devs[1]->attrs.device_cap_flags & IB_DEVICE_MEM_MGT_EXTENSIONS)
			test_fast_reg(&e[0], &e[1], ctx);
		else
			pr_info("rmlx5_ibtest: %s has no fast registration: fast_reg%s and local_inv%s skipped\n",
				dev_name(&devs[1]->dev), ctx, ctx);
		test_drain(&e[0], &e[1], ctx);
	}
	/* QPs first (they use the CQs and PDs); then per order. */
	if (order == 1) {
		if (e[1].qp)
			ib_destroy_qp(e[1].qp);
		if (e[0].qp)
			ib_destroy_qp(e[0].qp);
		end_free(&e[1], 1);
		end_free(&e[0], 0);
	} else {
		if (e[0].qp)
			ib_destroy_qp(e[0].qp);
		end_free(&e[0], order);
		if (e[1].qp)
			ib_destroy_qp(e[1].qp);
		end_free(&e[1], order);
	}
	if (!err)
		PASS("destroy", ctx);
}

/*
 * UD sends over InfiniBand ports (UD over RoCE ports is rmlx5_cmtest's): a
 * UD QP on each device (one QP sending to itself on a loopback pair), both
 * at RTS with a Q_Key, an IB address handle to dev1's LID. ud_send checks
 * a 256-byte send and its receive (40 bytes of GRH space, no GRH, the
 * sender's QPN and LID); ud_bad_qkey that a send with another Q_Key is
 * dropped while the next one with the right Q_Key lands in the receive.
 */
#define UD_GRH 40
#define UD_LEN 256
#define UD_BUF 1024
#define UD_QKEY 0x11111111

/* wr_ids, and the index of their completions. */
enum { UD_SEND1 = 1, UD_RECV1, UD_SEND_BAD, UD_SEND2, UD_RECV2, UD_IDS };

struct ud_side {
	struct ib_device *dev;
	struct ib_pd *pd;
	struct ib_cq *cq;
	struct ib_qp *qp;
	u8 *buf;
	u64 dma;
	u16 lid;
};

struct ud_test {
	struct ud_side side[2];
	struct ud_side *s, *r;	/* sender and receiver */
	struct ib_ah *ah;
	struct rdma_ah_attr ah_attr;
	struct ib_ud_wr wr;
	struct ib_recv_wr rwr;
	struct ib_sge sge;
	struct ib_wc wc[UD_IDS];
	unsigned long seen;
	int stray;
};

/* Creates a side's objects; *what names the step that failed. */
static int ud_setup(struct ud_side *u, struct ib_device *dev, const char **what)
{
	struct ib_qp_init_attr init = {};
	struct ib_port_attr pa;
	int err;

	u->dev = dev;
	*what = "query_port";
	err = ib_query_port(dev, 1, &pa);
	if (err)
		return err;
	u->lid = pa.lid;
	*what = "alloc_pd";
	u->pd = ib_alloc_pd(dev, 0);
	if (IS_ERR(u->pd)) {
		err = PTR_ERR(u->pd);
		u->pd = NULL;
		return err;
	}
	*what = "alloc_cq";
	u->cq = ib_alloc_cq(dev, NULL, 16, 0, IB_POLL_DIRECT);
	if (IS_ERR(u->cq)) {
		err = PTR_ERR(u->cq);
		u->cq = NULL;
		return err;
	}
	init.send_cq = u->cq;
	init.recv_cq = u->cq;
	init.cap.max_send_wr = 4;
	init.cap.max_recv_wr = 4;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	init.sq_sig_type = IB_SIGNAL_REQ_WR;
	init.qp_type = IB_QPT_UD;
	*what = "create_qp";
	u->qp = ib_create_qp(u->pd, &init);
	if (IS_ERR(u->qp)) {
		err = PTR_ERR(u->qp);
		u->qp = NULL;
		return err;
	}
	*what = "buffer";
	u->buf = kzalloc(UD_BUF, GFP_KERNEL);
	if (!u->buf)
		return -ENOMEM;
	u->dma = ib_dma_map_single(dev, u->buf, UD_BUF, DMA_BIDIRECTIONAL);
	if (ib_dma_mapping_error(dev, u->dma)) {
		kfree(u->buf);
		u->buf = NULL;
		return -ENOMEM;
	}
	*what = "modify to RTS";
	return 0;
}

static void ud_free(struct ud_side *u)
{
	if (u->qp)
		ib_destroy_qp(u->qp);
	if (u->buf) {
		ib_dma_unmap_single(u->dev, u->dma, UD_BUF, DMA_BIDIRECTIONAL);
		kfree(u->buf);
	}
	if (u->cq)
		ib_free_cq(u->cq);
	if (u->pd)
		ib_dealloc_pd(u->pd);
}

/* RESET -> INIT (P_Key index 0, port 1, the Q_Key) -> RTR -> RTS. */
static int ud_rts(struct ib_qp *qp)
{
	struct ib_qp_attr a = {};
	int err;

	a.qp_state = IB_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = 1;
	a.qkey = UD_QKEY;
	err = ib_modify_qp(qp, &a, IB_QP_STATE | IB_QP_PKEY_INDEX |
			   IB_QP_PORT | IB_QP_QKEY);
	if (err)
		return err;
	a.qp_state = IB_QPS_RTR;
	err = ib_modify_qp(qp, &a, IB_QP_STATE);
	if (err)
		return err;
	a.qp_state = IB_QPS_RTS;
	a.sq_psn = 0;
	return ib_modify_qp(qp, &a, IB_QP_STATE | IB_QP_SQ_PSN);
}

/* Posts a receive of GRH space and UD_LEN bytes at the receiver's buffer. */
static int ud_post_recv(struct ud_test *t, u64 id)
{
	struct ud_side *r = t->r;

	memset(r->buf, 0, UD_GRH + UD_LEN);
	ib_dma_sync_single_for_device(r->dev, r->dma, UD_BUF, DMA_BIDIRECTIONAL);
	t->sge.addr = r->dma;
	t->sge.length = UD_GRH + UD_LEN;
	t->sge.lkey = r->pd->local_dma_lkey;
	memset(&t->rwr, 0, sizeof(t->rwr));
	t->rwr.wr_id = id;
	t->rwr.sg_list = &t->sge;
	t->rwr.num_sge = 1;
	return ib_post_recv(r->qp, &t->rwr, NULL);
}

/* Sends UD_LEN bytes of pattern fill from the sender's buffer at off. */
static int ud_post_send(struct ud_test *t, u64 id, u32 qkey, size_t off, u8 fill)
{
	struct ud_side *s = t->s;
	size_t i;

	for (i = 0; i < UD_LEN; i++)
		s->buf[off + i] = fill ^ (u8)i;
	ib_dma_sync_single_for_device(s->dev, s->dma, UD_BUF, DMA_BIDIRECTIONAL);
	t->sge.addr = s->dma + off;
	t->sge.length = UD_LEN;
	t->sge.lkey = s->pd->local_dma_lkey;
	memset(&t->wr, 0, sizeof(t->wr));
	t->wr.wr.wr_id = id;
	t->wr.wr.sg_list = &t->sge;
	t->wr.wr.num_sge = 1;
	t->wr.wr.opcode = IB_WR_SEND;
	t->wr.wr.send_flags = IB_SEND_SIGNALED;
	t->wr.ah = t->ah;
	t->wr.remote_qpn = t->r->qp->qp_num;
	t->wr.remote_qkey = qkey;
	return ib_post_send(s->qp, &t->wr.wr, NULL);
}

/* Polls both CQs until completion id has come, for WAIT_MS at most. */
static bool ud_wait(struct ud_test *t, u64 id)
{
	unsigned long end = jiffies + msecs_to_jiffies(WAIT_MS);
	struct ib_cq *cqs[2] = { t->s->cq, t->r->cq };
	struct ib_wc wc;
	int i;

	while (!test_bit(id, &t->seen)) {
		if (time_after(jiffies, end))
			return false;
		for (i = 0; i < (cqs[0] == cqs[1] ? 1 : 2); i++) {
			if (ib_poll_cq(cqs[i], 1, &wc) != 1)
				continue;
			if (wc.wr_id >= UD_IDS || test_bit(wc.wr_id, &t->seen)) {
				t->stray++;
				continue;
			}
			t->wc[wc.wr_id] = wc;
			__set_bit(wc.wr_id, &t->seen);
		}
		cond_resched();
	}
	return true;
}

/* Checks receive id against the send of fill at off; 0 or FAILs name. */
static int ud_check_recv(struct ud_test *t, const char *name, u64 id,
			 size_t off)
{
	struct ib_wc *wc = &t->wc[id];

	if (wc->status != IB_WC_SUCCESS || wc->opcode != IB_WC_RECV) {
		FAIL(name, "", "receive status %s opcode %d",
		     ib_wc_status_msg(wc->status), wc->opcode);
		return -EIO;
	}
	if (wc->byte_len != UD_GRH + UD_LEN || wc->src_qp != t->s->qp->qp_num ||
	    wc->slid != t->s->lid || (wc->wc_flags & IB_WC_GRH)) {
		FAIL(name, "", "byte_len %u src_qp %#x slid %u wc_flags %#x, expected %u, %#x, %u, no GRH",
		     wc->byte_len, wc->src_qp, wc->slid, wc->wc_flags,
		     UD_GRH + UD_LEN, t->s->qp->qp_num, t->s->lid);
		return -EIO;
	}
	ib_dma_sync_single_for_cpu(t->r->dev, t->r->dma, UD_BUF, DMA_BIDIRECTIONAL);
	if (memcmp(t->r->buf + UD_GRH, t->s->buf + off, UD_LEN)) {
		FAIL(name, "", "received data differs");
		return -EIO;
	}
	return 0;
}

static bool ud_send_ok(struct ud_test *t, const char *name, u64 id)
{
	if (t->wc[id].status != IB_WC_SUCCESS || t->wc[id].opcode != IB_WC_SEND) {
		FAIL(name, "", "send status %s opcode %d",
		     ib_wc_status_msg(t->wc[id].status), t->wc[id].opcode);
		return false;
	}
	return true;
}

static bool ud_send_case(struct ud_test *t)
{
	int err;

	err = ud_post_recv(t, UD_RECV1);
	if (!err)
		err = ud_post_send(t, UD_SEND1, UD_QKEY, 512, 0x3c);
	if (err) {
		FAIL("ud_send", "", "post %d", err);
		return false;
	}
	if (!ud_wait(t, UD_SEND1) || !ud_wait(t, UD_RECV1)) {
		FAIL("ud_send", "", "no %s completion",
		     test_bit(UD_SEND1, &t->seen) ? "receive" : "send");
		return false;
	}
	if (!ud_send_ok(t, "ud_send", UD_SEND1) ||
	    ud_check_recv(t, "ud_send", UD_RECV1, 512))
		return false;
	PASS("ud_send", "");
	return true;
}

static void ud_run(struct ud_test *t)
{
	int err;

	if (!ud_send_case(t)) {
		FAIL("ud_bad_qkey", "", "not run: ud_send failed");
		return;
	}
	err = ud_post_recv(t, UD_RECV2);
	if (!err)
		err = ud_post_send(t, UD_SEND_BAD, UD_QKEY ^ 1, 512, 0x5a);
	if (!err)
		err = ud_post_send(t, UD_SEND2, UD_QKEY, 768, 0xa5);
	if (err) {
		FAIL("ud_bad_qkey", "", "post %d", err);
		return;
	}
	if (!ud_wait(t, UD_SEND_BAD) || !ud_wait(t, UD_SEND2) ||
	    !ud_wait(t, UD_RECV2)) {
		FAIL("ud_bad_qkey", "", "completions seen %#lx", t->seen);
		return;
	}
	/* A UD send completes whether or not the datagram is taken. */
	if (!ud_send_ok(t, "ud_bad_qkey", UD_SEND_BAD) ||
	    !ud_send_ok(t, "ud_bad_qkey", UD_SEND2) ||
	    ud_check_recv(t, "ud_bad_qkey", UD_RECV2, 768))
		return;
	if (t->stray) {
		FAIL("ud_bad_qkey", "", "%d unexpected completions", t->stray);
		return;
	}
	PASS("ud_bad_qkey", "");
}

static void test_ud(void)
{
	bool loop = devs[0] == devs[1];
	const char *what = "";
	struct ud_test *t;
	int i, err;

	t = kzalloc(sizeof(*t), GFP_KERNEL);
	if (!t) {
		FAIL("ud_send", "", "no memory");
		FAIL("ud_bad_qkey", "", "not run: ud_send failed");
		return;
	}
	t->s = &t->side[0];
	t->r = loop ? t->s : &t->side[1];
	err = ud_setup(t->s, devs[0], &what);
	if (!err && !loop)
		err = ud_setup(t->r, devs[1], &what);
	if (!err)
		err = ud_rts(t->s->qp);
	if (!err && !loop)
		err = ud_rts(t->r->qp);
	if (err == -EOPNOTSUPP && !strcmp(what, "create_qp") &&
	    dev_is_pci(devs[0]->dev.parent)) {
		pr_info("rmlx5_ibtest: %s has no UD QPs: ud_send and ud_bad_qkey skipped\n",
			dev_name(&devs[0]->dev));
		goto out;
	}
	if (err) {
		FAIL("ud_send", "", "%s %d", what, err);
		FAIL("ud_bad_qkey", "", "not run: ud_send failed");
		goto out;
	}
	t->ah_attr.type = RDMA_AH_ATTR_TYPE_IB;
	rdma_ah_set_dlid(&t->ah_attr, t->r->lid);
	rdma_ah_set_sl(&t->ah_attr, 0);
	rdma_ah_set_port_num(&t->ah_attr, 1);
	t->ah = rdma_create_ah(t->s->pd, &t->ah_attr, RDMA_CREATE_AH_SLEEPABLE);
	if (IS_ERR(t->ah)) {
		FAIL("ud_send", "", "create_ah %ld", PTR_ERR(t->ah));
		FAIL("ud_bad_qkey", "", "not run: ud_send failed");
		t->ah = NULL;
		goto out;
	}
	ud_run(t);
	rdma_destroy_ah(t->ah, RDMA_DESTROY_AH_SLEEPABLE);
out:
	for (i = 0; i < (loop ? 1 : 2); i++)
		ud_free(&t->side[i]);
	kfree(t);
}

/*
 * The GSI QP is refused with -EOPNOTSUPP on an InfiniBand port: only a RoCE
 * port has QP1 and MADs.
 */
static void test_refusals(void)
{
	struct ib_qp_init_attr init = {};
	struct ib_pd *pd;
	struct ib_cq *cq;
	struct ib_qp *qp;

	pd = ib_alloc_pd(devs[0], 0);
	if (IS_ERR(pd)) {
		FAIL("gsi_refused", "", "alloc_pd %ld", PTR_ERR(pd));
		return;
	}
	cq = ib_alloc_cq(devs[0], NULL, 16, 0, IB_POLL_DIRECT);
	if (IS_ERR(cq)) {
		FAIL("gsi_refused", "", "alloc_cq %ld", PTR_ERR(cq));
		ib_dealloc_pd(pd);
		return;
	}
	init.send_cq = cq;
	init.recv_cq = cq;
	init.cap.max_send_wr = 4;
	init.cap.max_recv_wr = 4;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	init.qp_type = IB_QPT_GSI;
	init.port_num = 1;
	qp = ib_create_qp(pd, &init);
	if (!IS_ERR(qp)) {
		FAIL("gsi_refused", "", "a GSI QP was created on an InfiniBand port");
		ib_destroy_qp(qp);
	} else if (PTR_ERR(qp) != -EOPNOTSUPP) {
		FAIL("gsi_refused", "", "error %ld, expected -EOPNOTSUPP",
		     PTR_ERR(qp));
	} else {
		PASS("gsi_refused", "");
	}
	ib_free_cq(cq);
	ib_dealloc_pd(pd);
}

static void test_device(void)
{
	struct ib_port_attr pa;
	int i, err;

	for (i = 0; i < 2; i++) {
		err = ib_query_port(devs[i], 1, &pa);
		/* A software HCA rmlx5_<n> has LID n + 1; any device a LID. */
		if (err || pa.state != IB_PORT_ACTIVE || !pa.lid ||
		    (!strcmp(dev_name(&devs[i]->dev), "rmlx5_0") && pa.lid != 1) ||
		    (!strcmp(dev_name(&devs[i]->dev), "rmlx5_1") && pa.lid != 2) ||
		    !rdma_protocol_ib(devs[i], 1) || rdma_cap_ib_mad(devs[i], 1)) {
			FAIL("port", "", "%s: err %d state %d lid %u", dev_name(&devs[i]->dev),
			     err, pa.state, pa.lid);
			return;
		}
	}
	if (devs[0]->attrs.atomic_cap != IB_ATOMIC_HCA ||
	    !devs[0]->attrs.max_qp || devs[0]->attrs.max_send_sge < 1) {
		FAIL("port", "", "device attributes: atomic_cap %d max_qp %d",
		     devs[0]->attrs.atomic_cap, devs[0]->attrs.max_qp);
		return;
	}
	PASS("port", "");
}

/* hold=1: objects kept on a device until ib_core removes it. */
struct held {
	struct ib_pd *pd;
	struct ib_cq *cq;
	struct ib_qp *qp;
};

static int ibtest_add(struct ib_device *dev)
{
	struct ib_qp_init_attr init = {};
	struct held *h;
	int slot;

	if (strncmp(dev_name(&dev->dev), "rmlx5_", 6))
		return -EOPNOTSUPP;
	if (sscanf(dev_name(&dev->dev), "rmlx5_%d", &slot) != 1)
		return -EOPNOTSUPP;
	if (!strcmp(dev_name(&dev->dev), dev0))
		devs[0] = dev;
	if (!strcmp(dev_name(&dev->dev), dev1))
		devs[1] = dev;
	if (!hold)
		return 0;
	h = kzalloc(sizeof(*h), GFP_KERNEL);
	if (!h)
		return -ENOMEM;
	h->pd = ib_alloc_pd(dev, 0);
	if (IS_ERR(h->pd))
		goto fail;
	h->cq = ib_alloc_cq(dev, NULL, 16, 0, IB_POLL_SOFTIRQ);
	if (IS_ERR(h->cq))
		goto fail_pd;
	init.send_cq = h->cq;
	init.recv_cq = h->cq;
	init.cap.max_send_wr = 4;
	init.cap.max_recv_wr = 4;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	init.qp_type = IB_QPT_RC;
	h->qp = ib_create_qp(h->pd, &init);
	if (IS_ERR(h->qp))
		goto fail_cq;
	ib_set_client_data(dev, &ibtest_client, h);
	return 0;
fail_cq:
	ib_free_cq(h->cq);
fail_pd:
	ib_dealloc_pd(h->pd);
fail:
	kfree(h);
	pr_info("rmlx5-test: FAIL ib_hold_%s: could not create objects\n",
		dev_name(&dev->dev));
	return -ENOMEM;
}

static void ibtest_remove(struct ib_device *dev, void *data)
{
	struct held *h = data;
	int i;

	for (i = 0; i < 2; i++)
		if (devs[i] == dev)
			devs[i] = NULL;
	if (!h)
		return;
	/*
	 * The device goes away under us: give everything back first, the
	 * QP drained as ULPs drain theirs (on a failed device the driver
	 * flushes the drain WRs itself, or this would wait forever).
	 */
	ib_drain_qp(h->qp);
	ib_destroy_qp(h->qp);
	ib_free_cq(h->cq);
	ib_dealloc_pd(h->pd);
	kfree(h);
	pr_info("rmlx5-test: PASS ib_remove_%s\n", dev_name(&dev->dev));
}

static struct ib_client ibtest_client = {
	.name = "rmlx5_ibtest",
	.add = ibtest_add,
	.remove = ibtest_remove,
};

static int __init ibtest_init(void)
{
	int err;

	err = ib_register_client(&ibtest_client);
	if (err)
		return err;
	if (hold)
		return 0;
	if (!devs[0] || !devs[1]) {
		pr_info("rmlx5-test: FAIL %s_devices: %s and %s are not both registered with ib_core\n",
			prefix, dev0, dev1);
		return 0;
	}
	PASS("devices", "");
	test_device();
	test_ud();
	test_refusals();
	run_ctx(IB_POLL_DIRECT, "_direct", 0);
	run_ctx(IB_POLL_SOFTIRQ, "_softirq", 1);
	run_ctx(IB_POLL_WORKQUEUE, "_workqueue", 2);
	return 0;
}

static void __exit ibtest_exit(void)
{
	ib_unregister_client(&ibtest_client);
}

module_init(ibtest_init);
module_exit(ibtest_exit);
MODULE_DESCRIPTION("rmlx5 ib_core test ULP (generic ib_* API only)");
MODULE_LICENSE("GPL");
