// SPDX-License-Identifier: GPL-2.0
/*
 * rmlx5_cmtest: a kernel ULP of rdma_cm and the generic ib_* API, run on
 * rmlx5's RoCE ports. It uses no rmlx5 symbol: rdma_cm finds the devices
 * from IP addresses, as NVMe over RDMA, RDS and SMB Direct find theirs.
 *
 * Setup it expects (the guest harness makes it before insmod, as the
 * kernel's RDS selftest does for rxe): rmlx5_0 and rmlx5_1 are RoCE
 * devices on veth_r0 and veth_r1, a veth pair in the init namespace with
 * 10.78.0.1/32 and 10.78.0.2/32, a host route to each address through the
 * other's veth, permanent neighbour entries, accept_local=1, rp_filter=0.
 * Then:
 *
 *   insmod rmlx5_cmtest.ko prefix=cm_v2      (src=, dst=, port= optional)
 *
 * The harness picks RoCE v1 or v2 before each load through rdma_cm's
 * configfs (mkdir /sys/kernel/config/rdma_cm/rmlx5_<n>, then write
 * "IB/RoCE v1" or "RoCE v2" to its ports/1/default_roce_mode) and names
 * the run with prefix=. All tests run synchronously in module init, every
 * wait bounded by WAIT_MS; init returns 0 and rmmod has nothing to undo.
 * Each test prints one "rmlx5-test: PASS <prefix>_<test>" or
 * "rmlx5-test: FAIL <prefix>_<test>: why" line ("SKIP" where the device
 * lacks the feature; a step whose prerequisite failed prints FAIL "not
 * run"), so every run prints the same 23 names:
 *
 * - For each CQ poll context (direct, softirq, workqueue, unbound): an RC
 *   connection from src on dev0 to a listener on dst (port + 0..3) on
 *   dev1, the server creating its PD, CQ and QP on the CONNECT_REQUEST's
 *   id and accepting in the handler. connect_<ctx>: ESTABLISHED on both
 *   ids, each on the device expected. data_<ctx>: a 4 KiB SEND to the
 *   server (bytes and byte_len checked), whose reply advertises an 8 KiB
 *   buffer it fast-registered (ib_alloc_mr, ib_map_mr_sg, IB_WR_REG_MR;
 *   the PD's unsafe global rkey on a device without fast registration).
 *   write_<ctx>: an 8 KiB RDMA WRITE into it followed by a SEND, after
 *   which the server finds the bytes. disconnect_<ctx>: rdma_disconnect
 *   from the client, DISCONNECTED on both ids, the QPs flush (checked
 *   under a bound first, since ib_drain_qp waits forever), ib_drain_qp,
 *   and both QPs are in ERR.
 * - loopback: the same connection from src to src (port + 4), both ends
 *   on dev0, SENDs both ways and the disconnect.
 * - UD over RDMA_PS_UDP (port + 5): ud_sidr resolves the server by SIDR
 *   (rdma_connect, ESTABLISHED with the server's QPN and rdma_cm's Q_Key)
 *   and makes an AH from the reply's ah_attr. ud_data: a 256-byte
 *   datagram arrives as 296 bytes with IB_WC_GRH and the network header
 *   type the sender's GID implies, the client's QPN as src_qp, the
 *   payload at offset 40 and the addresses in the header (RoCE v2: the
 *   IPv4 header at offset 20). ud_bad_qkey: a datagram with a wrong Q_Key
 *   is dropped, the next receive takes the following correct one.
 *   ud_over_mtu: a send larger than the port's active MTU completes with
 *   IB_WC_LOC_LEN_ERR and delivers nothing.
 * - ah_unknown_gid: rdma_create_ah on dev0 towards ::ffff:10.78.9.9 (a
 *   RoCE v2 GID nobody has) fails. Such an AH has no next-hop MAC:
 *   rdma_create_ah resolves none (rdma_cm does, for addresses that
 *   resolve), so the device must refuse it rather than send to nobody.
 * - mr_too_many_pages: ib_map_mr_sg of 12 pages into an MR allocated for
 *   4 maps 4 pages and says it mapped fewer entries than it was given.
 *
 * dev0= and dev1= name the devices src and dst must resolve to.
 */
#include <linux/completion.h>
#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/inet.h>
#include <linux/ip.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/wait.h>
#include <net/checksum.h>
#include <net/ipv6.h>
#include <net/net_namespace.h>
#include <rdma/ib_cache.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_cm.h>
#include <rdma/rdma_cm_ib.h>

#define WAIT_MS 10000
/* How long a datagram that must not arrive is given to arrive anyway. */
#define QUIET_MS 200
#define RESOLVE_MS 2000

/* Each side's buffer, mapped once with ib_dma_map_single. */
#define BUF_SIZE 16384
#define OFF_DATA 0		/* 8 KiB: the WRITE's source; UD sends */
#define OFF_MSG 8192		/* 4 KiB: the first SEND */
#define OFF_CTL_TX 12288	/* control messages sent ... */
#define OFF_CTL_RX 12544	/* ... and received */
#define CTL_LEN 256
#define MSG_LEN 4096
#define WRITE_LEN 8192

/* UD: the receive buffers of the server and the client's payloads. */
#define UD_GRH 40
#define UD_LEN 256
#define UD_RX0 0
#define UD_RX1 512
#define UD_RX2 4096		/* the one the over-MTU send must not reach */
#define UD_TX_DATA (OFF_DATA)
#define UD_TX_BAD (OFF_DATA + 512)
#define UD_TX_GOOD (OFF_DATA + 1024)
#define UD_TX_BIG (OFF_DATA + 2048)

#define MR_MAX_SG 4
#define MR_PAGES 12

#define CTL_MAGIC 0x636d7473	/* "cmts" */
#define CTL_REPLY 1
#define CTL_WRITTEN 2

static char *src = "10.78.0.1";
module_param(src, charp, 0444);
MODULE_PARM_DESC(src, "IPv4 address of the client side (on dev0)");

static char *dst = "10.78.0.2";
module_param(dst, charp, 0444);
MODULE_PARM_DESC(dst, "IPv4 address of the server side (on dev1)");

static ushort port = 18515;
module_param(port, ushort, 0444);
MODULE_PARM_DESC(port, "first of the six rdma_cm ports the listeners use");

static char *prefix = "cm";
module_param(prefix, charp, 0444);
MODULE_PARM_DESC(prefix, "prefix of the test names");

static char *dev0 = "rmlx5_0";
module_param(dev0, charp, 0444);
MODULE_PARM_DESC(dev0, "ib_core name of the device src resolves to");

static char *dev1 = "rmlx5_1";
module_param(dev1, charp, 0444);
MODULE_PARM_DESC(dev1, "ib_core name of the device dst resolves to");

static __be32 src_ip, dst_ip;

static void report(const char *name, const char *ctx, int err, const char *why)
{
	if (err)
		pr_info("rmlx5-test: FAIL %s_%s%s: %s\n", prefix, name, ctx, why);
	else
		pr_info("rmlx5-test: PASS %s_%s%s\n", prefix, name, ctx);
}

/* The message the server sends first and the one after the WRITE. */
struct ctl_msg {
	__be32 magic;
	__be32 kind;
	__be64 addr;
	__be32 rkey;
	__be32 len;
};

/* Work request slots of one side; each is posted at most once. */
enum {
	W_SEND0, W_SEND1, W_SEND2, W_SEND3,
	W_RECV0, W_RECV1, W_RECV2,
	W_REG, W_MARK_S, W_MARK_R,
	NR_SLOTS
};

struct twr {
	struct ib_cqe cqe;
	struct completion done;
	struct ib_wc wc;
	bool posted;
	bool finished;		/* set (release) after wc */
};

struct cm_test;

/* The listener, the client or the server of one test. */
struct side {
	struct cm_test *t;
	bool listener;
	struct rdma_cm_id *id;
	struct ib_device *dev;
	struct ib_pd *pd;
	struct ib_cq *cq;
	struct ib_qp *qp;	/* id->qp once rdma_create_qp made it */
	struct ib_mr *mr;
	struct ib_ah *ah;
	u8 *buf;
	u64 dma;
	bool buf_mapped;
	/* The server's WRITE target, mapped as a scatterlist for the MR. */
	u8 *wbuf;
	struct scatterlist sg;
	bool sg_mapped;
	const char *fail_step;
	/* rdma_cm events seen (bit per event) and their status. */
	unsigned long events;
	int status[BITS_PER_LONG];
	/* UD client: what the SIDR reply said. */
	u32 remote_qpn;
	u32 remote_qkey;
	bool have_net_type;
	enum rdma_network_type net_type;
	int ah_err;
	struct twr w[NR_SLOTS];
};

/*
 * One test's connection. The handlers run in rdma_cm's context: lock
 * protects closing and what the listener's and the UD client's handlers
 * create; event bits are published with a barrier and waited on in wq.
 */
struct cm_test {
	/* Serialises the handlers' creations with test_free's closing. */
	struct mutex lock;
	wait_queue_head_t wq;
	bool closing;
	int accept_err;
	bool ud;
	enum ib_poll_context pctx;
	struct sockaddr_in src, dst;
	/* The devices the client's and the server's ids must be on. */
	const char *cdev, *sdev;
	struct side listen, client, server;
	/* The WRITE target the server advertised. */
	u64 raddr;
	u32 rkey;
	/* Why the last step failed, for its FAIL line. */
	char why[192];
};

#define WHY(t, fmt, ...) scnprintf((t)->why, sizeof((t)->why), fmt, ##__VA_ARGS__)

static void twr_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct twr *w = container_of(wc->wr_cqe, struct twr, cqe);

	w->wc = *wc;
	/* Pairs with the acquires in twr_wait: wc before finished. */
	smp_store_release(&w->finished, true);
	complete(&w->done);
}

static bool twr_finished(struct twr *w)
{
	/* Pairs with twr_done's release: w->wc is read after finished. */
	return smp_load_acquire(&w->finished);
}

/* Waits up to ms for w's completion on s's CQ: polls a DIRECT CQ. */
static bool twr_wait(struct side *s, struct twr *w, unsigned int ms)
{
	unsigned long end = jiffies + msecs_to_jiffies(ms);

	if (twr_finished(w))
		return true;
	if (s->cq->poll_ctx != IB_POLL_DIRECT) {
		wait_for_completion_timeout(&w->done, msecs_to_jiffies(ms));
		return twr_finished(w);
	}
	for (;;) {
		ib_process_cq_direct(s->cq, -1);
		if (twr_finished(w))
			return true;
		if (time_after(jiffies, end))
			return false;
		usleep_range(20, 100);
	}
}

/* Waits until every posted WR of s completed (flushed, after ERR). */
static bool wait_outstanding(struct side *s)
{
	unsigned long end = jiffies + msecs_to_jiffies(WAIT_MS);
	int i;

	for (i = 0; i < NR_SLOTS; i++) {
		long left = (long)(end - jiffies);

		if (!s->w[i].posted)
			continue;
		if (left <= 0 || !twr_wait(s, &s->w[i], jiffies_to_msecs(left)))
			return false;
	}
	return true;
}

static int post_send(struct side *s, int slot, struct ib_send_wr *wr)
{
	int err;

	wr->wr_cqe = &s->w[slot].cqe;
	s->w[slot].posted = true;
	err = ib_post_send(s->qp, wr, NULL);
	if (err)
		s->w[slot].posted = false;
	return err;
}

static int post_recv(struct side *s, int slot, u32 off, u32 len)
{
	struct ib_sge sge = { s->dma + off, len, s->pd->local_dma_lkey };
	struct ib_recv_wr wr = { .sg_list = &sge, .num_sge = len ? 1 : 0 };
	int err;

	wr.wr_cqe = &s->w[slot].cqe;
	s->w[slot].posted = true;
	err = ib_post_recv(s->qp, &wr, NULL);
	if (err)
		s->w[slot].posted = false;
	return err;
}

static int wc_check(struct cm_test *t, struct side *s, int slot,
		    enum ib_wc_opcode op, const char *what)
{
	struct ib_wc *wc = &s->w[slot].wc;

	if (wc->status != IB_WC_SUCCESS) {
		WHY(t, "%s: completion status %s (vendor_err %#x)", what,
		    ib_wc_status_msg(wc->status), wc->vendor_err);
		return -EIO;
	}
	if (wc->opcode != op || wc->qp != s->qp) {
		WHY(t, "%s: completion opcode %d on QP %p, expected %d on %p",
		    what, wc->opcode, wc->qp, op, s->qp);
		return -EIO;
	}
	return 0;
}

/* Posts one WR from slot, waits for it and checks its completion. */
static int post_wait(struct cm_test *t, struct side *s, int slot,
		     struct ib_send_wr *wr, enum ib_wc_opcode op,
		     const char *what)
{
	int err = post_send(s, slot, wr);

	if (err) {
		WHY(t, "%s: ib_post_send %d", what, err);
		return err;
	}
	if (!twr_wait(s, &s->w[slot], WAIT_MS)) {
		WHY(t, "%s: no completion within %d ms", what, WAIT_MS);
		return -ETIMEDOUT;
	}
	return wc_check(t, s, slot, op, what);
}

static int send_buf(struct cm_test *t, struct side *s, int slot, u32 off,
		    u32 len, const char *what)
{
	struct ib_sge sge = { s->dma + off, len, s->pd->local_dma_lkey };
	struct ib_send_wr wr = {
		.sg_list = &sge, .num_sge = 1, .opcode = IB_WR_SEND,
		.send_flags = IB_SEND_SIGNALED,
	};

	ib_dma_sync_single_for_device(s->dev, s->dma + off, len,
				      DMA_BIDIRECTIONAL);
	return post_wait(t, s, slot, &wr, IB_WC_SEND, what);
}

/* Waits for a posted receive, checks it and makes its bytes the CPU's. */
static int recv_check(struct cm_test *t, struct side *s, int slot, u32 off,
		      u32 len, const char *what)
{
	int err;

	if (!twr_wait(s, &s->w[slot], WAIT_MS)) {
		WHY(t, "%s: no receive completion within %d ms", what, WAIT_MS);
		return -ETIMEDOUT;
	}
	err = wc_check(t, s, slot, IB_WC_RECV, what);
	if (err)
		return err;
	if (s->w[slot].wc.byte_len != len) {
		WHY(t, "%s: byte_len %u, expected %u", what,
		    s->w[slot].wc.byte_len, len);
		return -EIO;
	}
	ib_dma_sync_single_for_cpu(s->dev, s->dma + off, len,
				   DMA_BIDIRECTIONAL);
	return 0;
}

static void fill(u8 *p, size_t n, u8 seed)
{
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = seed + i * 31 + (i >> 8);
}

/* Index of the first differing byte, or -1. */
static int first_diff(const u8 *a, const u8 *b, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (a[i] != b[i])
			return i;
	return -1;
}

static void side_destroy(struct side *s)
{
	int i;

	/* The QP first (it uses CQ, PD and MR), the PD last. */
	if (s->qp) {
		rdma_destroy_qp(s->id);
		s->qp = NULL;
	}
	if (s->ah) {
		rdma_destroy_ah(s->ah, RDMA_DESTROY_AH_SLEEPABLE);
		s->ah = NULL;
	}
	/* After ib_free_cq no completion handler touches s->w any more. */
	if (s->cq) {
		ib_free_cq(s->cq);
		s->cq = NULL;
	}
	for (i = 0; i < NR_SLOTS; i++) {
		s->w[i].posted = false;
		s->w[i].finished = false;
		reinit_completion(&s->w[i].done);
	}
	if (s->mr) {
		ib_dereg_mr(s->mr);
		s->mr = NULL;
	}
	if (s->sg_mapped) {
		ib_dma_unmap_sg(s->dev, &s->sg, 1, DMA_BIDIRECTIONAL);
		s->sg_mapped = false;
	}
	kfree(s->wbuf);
	s->wbuf = NULL;
	if (s->buf_mapped) {
		ib_dma_unmap_single(s->dev, s->dma, BUF_SIZE, DMA_BIDIRECTIONAL);
		s->buf_mapped = false;
	}
	kfree(s->buf);
	s->buf = NULL;
	if (s->pd) {
		ib_dealloc_pd(s->pd);
		s->pd = NULL;
	}
}

/*
 * Buffer, PD, CQ and QP (through rdma_create_qp, so rdma_cm moves it
 * through its states) on s->id's device; the RC server also gets its
 * WRITE target and a fast-registration MR for it.
 */
static int side_create(struct cm_test *t, struct side *s)
{
	struct ib_device *dev = s->id->device;
	bool fastreg = dev->attrs.device_cap_flags & IB_DEVICE_MEM_MGT_EXTENSIONS;
	bool target = !t->ud && s == &t->server;
	struct ib_qp_init_attr init = {};
	int err;

	s->dev = dev;
	s->fail_step = "buffer";
	s->buf = kzalloc(BUF_SIZE, GFP_KERNEL);
	if (!s->buf)
		return -ENOMEM;
	s->dma = ib_dma_map_single(dev, s->buf, BUF_SIZE, DMA_BIDIRECTIONAL);
	if (ib_dma_mapping_error(dev, s->dma))
		return -ENOMEM;
	s->buf_mapped = true;
	s->fail_step = "ib_alloc_pd";
	s->pd = ib_alloc_pd(dev, target && !fastreg ? IB_PD_UNSAFE_GLOBAL_RKEY : 0);
	if (IS_ERR(s->pd)) {
		err = PTR_ERR(s->pd);
		s->pd = NULL;
		return err;
	}
	s->fail_step = "ib_alloc_cq";
	s->cq = ib_alloc_cq(dev, s, 64, 0, t->pctx);
	if (IS_ERR(s->cq)) {
		err = PTR_ERR(s->cq);
		s->cq = NULL;
		return err;
	}
	init.send_cq = s->cq;
	init.recv_cq = s->cq;
	init.cap.max_send_wr = 16;
	init.cap.max_recv_wr = 16;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	init.sq_sig_type = IB_SIGNAL_REQ_WR;
	init.qp_type = t->ud ? IB_QPT_UD : IB_QPT_RC;
	s->fail_step = "rdma_create_qp";
	err = rdma_create_qp(s->id, s->pd, &init);
	if (err)
		return err;
	s->qp = s->id->qp;
	if (!target)
		return 0;
	s->fail_step = "WRITE target";
	s->wbuf = kzalloc(WRITE_LEN, GFP_KERNEL);
	if (!s->wbuf)
		return -ENOMEM;
	sg_init_one(&s->sg, s->wbuf, WRITE_LEN);
	if (ib_dma_map_sg(dev, &s->sg, 1, DMA_BIDIRECTIONAL) != 1)
		return -ENOMEM;
	s->sg_mapped = true;
	if (!fastreg)
		return 0;
	s->fail_step = "ib_alloc_mr";
	s->mr = ib_alloc_mr(s->pd, IB_MR_TYPE_MEM_REG, WRITE_LEN / PAGE_SIZE + 1);
	if (IS_ERR(s->mr)) {
		err = PTR_ERR(s->mr);
		s->mr = NULL;
		return err;
	}
	return 0;
}

static void note_event(struct cm_test *t, struct side *s, int event, int status)
{
	if (event < 0 || event >= BITS_PER_LONG)
		return;
	s->status[event] = status;
	/* Status and whatever the handler made, before the bit. */
	smp_mb__before_atomic();
	set_bit(event, &s->events);
	wake_up(&t->wq);
}

/*
 * The listener's CONNECT_REQUEST, on the new id: the server's objects are
 * made on its device and it is accepted here, with the handler lock held
 * as rdma_accept wants. On failure everything made is given back and the
 * non-zero return has rdma_cm reject and destroy the new id.
 */
static int server_accept(struct cm_test *t, struct rdma_cm_id *id,
			 struct rdma_cm_event *ev)
{
	struct side *s = &t->server;
	struct rdma_conn_param cp = {};
	struct ib_device_attr *da = &id->device->attrs;
	int err;

	mutex_lock(&t->lock);
	if (t->closing || s->id) {
		mutex_unlock(&t->lock);
		return -ECONNREFUSED;
	}
	s->id = id;
	err = side_create(t, s);
	if (!err && t->ud) {
		s->fail_step = "ib_post_recv";
		err = post_recv(s, W_RECV0, UD_RX0, UD_GRH + UD_LEN);
		if (!err)
			err = post_recv(s, W_RECV1, UD_RX1, UD_GRH + UD_LEN);
		if (!err)
			err = post_recv(s, W_RECV2, UD_RX2, BUF_SIZE - UD_RX2);
	} else if (!err) {
		s->fail_step = "ib_post_recv";
		err = post_recv(s, W_RECV0, OFF_MSG, MSG_LEN);
		if (!err)
			err = post_recv(s, W_RECV1, OFF_CTL_RX, CTL_LEN);
		cp.responder_resources = min_t(int, ev->param.conn.initiator_depth,
					       da->max_qp_rd_atom);
		cp.initiator_depth = min_t(int, ev->param.conn.responder_resources,
					   da->max_qp_init_rd_atom);
		cp.rnr_retry_count = 7;
	}
	if (!err) {
		id->context = s;
		s->fail_step = "rdma_accept";
		/* UD: a SIDR reply with the QP's number and rdma_cm's Q_Key. */
		err = rdma_accept(id, &cp);
	}
	if (err) {
		side_destroy(s);
		s->id = NULL;
		t->accept_err = err;
	}
	note_event(t, s, RDMA_CM_EVENT_CONNECT_REQUEST, err);
	mutex_unlock(&t->lock);
	return err ? -1 : 0;
}

/* The UD client's ESTABLISHED: the SIDR reply, made into an AH here. */
static void ud_established(struct cm_test *t, struct side *s,
			   struct rdma_cm_event *ev)
{
	struct rdma_ah_attr *a = &ev->param.ud.ah_attr;
	struct ib_ah *ah;

	mutex_lock(&t->lock);
	if (!t->closing && !s->ah && s->pd) {
		s->remote_qpn = ev->param.ud.qp_num;
		s->remote_qkey = ev->param.ud.qkey;
		if ((rdma_ah_get_ah_flags(a) & IB_AH_GRH) && a->grh.sgid_attr) {
			s->net_type = rdma_gid_attr_network_type(a->grh.sgid_attr);
			s->have_net_type = true;
		}
		ah = rdma_create_ah(s->pd, a, RDMA_CREATE_AH_SLEEPABLE);
		if (IS_ERR(ah))
			s->ah_err = PTR_ERR(ah);
		else
			s->ah = ah;
	}
	mutex_unlock(&t->lock);
}

/*
 * Every id's handler. It never destroys an id: it always returns 0
 * except to refuse a CONNECT_REQUEST.
 */
static int cm_handler(struct rdma_cm_id *id, struct rdma_cm_event *ev)
{
	struct side *s = id->context;
	struct cm_test *t = s->t;

	if (s->listener) {
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
			return server_accept(t, id, ev);
		return 0;
	}
	if (ev->event == RDMA_CM_EVENT_ESTABLISHED && t->ud && s == &t->client)
		ud_established(t, s, ev);
	note_event(t, s, ev->event, ev->status);
	return 0;
}

/* Waits for one of the events in good (0) or bad (an error, said why). */
static int wait_ev(struct cm_test *t, struct side *s, unsigned long good,
		   unsigned long bad, const char *what)
{
	unsigned long seen;
	int ev;

	wait_event_timeout(t->wq, READ_ONCE(s->events) & (good | bad),
			   msecs_to_jiffies(WAIT_MS));
	seen = READ_ONCE(s->events);
	/* Pairs with note_event's barrier: the status is the bit's. */
	smp_rmb();
	if (seen & good)
		return 0;
	if (!(seen & bad)) {
		WHY(t, "%s: no event within %d ms", what, WAIT_MS);
		return -ETIMEDOUT;
	}
	ev = __ffs(seen & bad);
	if (ev == RDMA_CM_EVENT_REJECTED)
		WHY(t, "%s: REJECTED (%s)%s", what,
		    rdma_reject_msg(s->id, s->status[ev]),
		    t->accept_err ? ", the server's accept failed" : "");
	else
		WHY(t, "%s: %s, status %d", what, rdma_event_msg(ev),
		    s->status[ev]);
	return -EIO;
}

#define EV(e) BIT(RDMA_CM_EVENT_##e)
#define EV_CONN_BAD (EV(REJECTED) | EV(UNREACHABLE) | EV(CONNECT_ERROR) | \
		     EV(DISCONNECTED) | EV(DEVICE_REMOVAL) | EV(ADDR_CHANGE))

static struct cm_test *test_alloc(enum ib_poll_context pctx, bool ud,
				  bool loopback, u16 lport)
{
	struct side *sides[3];
	struct cm_test *t;
	int i, j;

	t = kzalloc_obj(*t, GFP_KERNEL);
	if (!t)
		return NULL;
	mutex_init(&t->lock);
	init_waitqueue_head(&t->wq);
	t->ud = ud;
	t->pctx = pctx;
	t->src.sin_family = AF_INET;
	t->src.sin_addr.s_addr = src_ip;
	t->dst.sin_family = AF_INET;
	t->dst.sin_addr.s_addr = loopback ? src_ip : dst_ip;
	t->dst.sin_port = htons(lport);
	t->cdev = dev0;
	t->sdev = loopback ? dev0 : dev1;
	t->listen.listener = true;
	sides[0] = &t->listen;
	sides[1] = &t->client;
	sides[2] = &t->server;
	for (i = 0; i < 3; i++) {
		sides[i]->t = t;
		for (j = 0; j < NR_SLOTS; j++) {
			sides[i]->w[j].cqe.done = twr_done;
			init_completion(&sides[i]->w[j].done);
		}
	}
	return t;
}

/*
 * Moves a side's QP to ERR (a connected one with rdma_disconnect, which
 * also tells the peer), waits a bounded time for its WRs to flush, and
 * gives everything back, the id last.
 */
static void side_close(struct cm_test *t, struct side *s)
{
	struct ib_qp_attr a = { .qp_state = IB_QPS_ERR };

	if (s->qp) {
		if (!t->ud)
			rdma_disconnect(s->id);
		ib_modify_qp(s->qp, &a, IB_QP_STATE);
		if (!wait_outstanding(s))
			pr_info("rmlx5_cmtest: %s: work requests of a QP in ERR did not flush within %d ms\n",
				dev_name(&s->dev->dev), WAIT_MS);
	}
	side_destroy(s);
	if (s->id)
		rdma_destroy_id(s->id);
	s->id = NULL;
}

static void test_free(struct cm_test *t)
{
	/* From here no handler creates anything or accepts. */
	mutex_lock(&t->lock);
	t->closing = true;
	mutex_unlock(&t->lock);
	/*
	 * Waits for a CONNECT_REQUEST handler in progress: after it, the
	 * server's id is ours alone.
	 */
	if (t->listen.id)
		rdma_destroy_id(t->listen.id);
	t->listen.id = NULL;
	side_close(t, &t->client);
	side_close(t, &t->server);
	mutex_destroy(&t->lock);
	kfree(t);
}

static int start_listen(struct cm_test *t)
{
	struct rdma_cm_id *id;
	int err;

	id = rdma_create_id(&init_net, cm_handler, &t->listen,
			    t->ud ? RDMA_PS_UDP : RDMA_PS_TCP,
			    t->ud ? IB_QPT_UD : IB_QPT_RC);
	if (IS_ERR(id)) {
		WHY(t, "listener: rdma_create_id %ld", PTR_ERR(id));
		return PTR_ERR(id);
	}
	t->listen.id = id;
	err = rdma_bind_addr(id, (struct sockaddr *)&t->dst);
	if (err) {
		WHY(t, "listener: rdma_bind_addr %pI4:%u: %d",
		    &t->dst.sin_addr, ntohs(t->dst.sin_port), err);
		return err;
	}
	err = rdma_listen(id, 4);
	if (err)
		WHY(t, "listener: rdma_listen %d", err);
	return err;
}

/* The client's id: address and route resolved, its objects created. */
static int client_resolve(struct cm_test *t)
{
	struct side *c = &t->client;
	struct rdma_cm_id *id;
	int err;

	id = rdma_create_id(&init_net, cm_handler, c,
			    t->ud ? RDMA_PS_UDP : RDMA_PS_TCP,
			    t->ud ? IB_QPT_UD : IB_QPT_RC);
	if (IS_ERR(id)) {
		WHY(t, "client: rdma_create_id %ld", PTR_ERR(id));
		return PTR_ERR(id);
	}
	c->id = id;
	err = rdma_resolve_addr(id, (struct sockaddr *)&t->src,
				(struct sockaddr *)&t->dst, RESOLVE_MS);
	if (err) {
		WHY(t, "rdma_resolve_addr %pI4 -> %pI4: %d", &t->src.sin_addr,
		    &t->dst.sin_addr, err);
		return err;
	}
	err = wait_ev(t, c, EV(ADDR_RESOLVED), EV(ADDR_ERROR),
		      "address resolution");
	if (err)
		return err;
	if (strcmp(dev_name(&id->device->dev), t->cdev)) {
		WHY(t, "%pI4 resolved to %s, expected %s", &t->src.sin_addr,
		    dev_name(&id->device->dev), t->cdev);
		return -ENODEV;
	}
	err = rdma_resolve_route(id, RESOLVE_MS);
	if (err) {
		WHY(t, "rdma_resolve_route %d", err);
		return err;
	}
	err = wait_ev(t, c, EV(ROUTE_RESOLVED), EV(ROUTE_ERROR),
		      "route resolution");
	if (err)
		return err;
	err = side_create(t, c);
	if (err)
		WHY(t, "client: %s: %d", c->fail_step, err);
	return err;
}

/* The server's id after its CONNECT_REQUEST, on the expected device. */
static int server_check(struct cm_test *t)
{
	struct side *s = &t->server;

	if (!test_bit(RDMA_CM_EVENT_CONNECT_REQUEST, &s->events)) {
		WHY(t, "the listener saw no CONNECT_REQUEST");
		return -EIO;
	}
	if (t->accept_err) {
		WHY(t, "server: %s: %d", s->fail_step, t->accept_err);
		return t->accept_err;
	}
	if (strcmp(dev_name(&s->dev->dev), t->sdev)) {
		WHY(t, "the server's id is on %s, expected %s",
		    dev_name(&s->dev->dev), t->sdev);
		return -ENODEV;
	}
	return 0;
}

static int rc_connect(struct cm_test *t)
{
	struct side *c = &t->client;
	struct rdma_conn_param cp = {};
	struct ib_device_attr *da;
	int err;

	err = start_listen(t);
	if (!err)
		err = client_resolve(t);
	if (err)
		return err;
	err = post_recv(c, W_RECV0, OFF_CTL_RX, CTL_LEN);
	if (err) {
		WHY(t, "client: ib_post_recv %d", err);
		return err;
	}
	da = &c->dev->attrs;
	cp.responder_resources = min(da->max_qp_rd_atom, 1);
	cp.initiator_depth = min(da->max_qp_init_rd_atom, 1);
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;
	err = rdma_connect(c->id, &cp);
	if (err) {
		WHY(t, "rdma_connect %d", err);
		return err;
	}
	err = wait_ev(t, c, EV(ESTABLISHED), EV_CONN_BAD, "client");
	if (err)
		return err;
	err = wait_ev(t, &t->server, EV(ESTABLISHED), EV_CONN_BAD, "server");
	if (!err)
		err = server_check(t);
	return err;
}

/* The server fast-registers its WRITE target (or uses the global rkey). */
static int server_register(struct cm_test *t)
{
	struct side *s = &t->server;
	struct ib_reg_wr reg = {};
	int n, err;

	if (!s->mr) {
		pr_info("rmlx5_cmtest: %s has no fast registration: the WRITE uses the PD's global rkey\n",
			dev_name(&s->dev->dev));
		t->raddr = sg_dma_address(&s->sg);
		t->rkey = s->pd->unsafe_global_rkey;
		return 0;
	}
	ib_update_fast_reg_key(s->mr, ib_inc_rkey(s->mr->rkey));
	n = ib_map_mr_sg(s->mr, &s->sg, 1, NULL, PAGE_SIZE);
	if (n != 1 || s->mr->length != WRITE_LEN) {
		WHY(t, "server: ib_map_mr_sg %d, length %llu", n, s->mr->length);
		return -EIO;
	}
	reg.wr.opcode = IB_WR_REG_MR;
	reg.wr.send_flags = IB_SEND_SIGNALED;
	reg.mr = s->mr;
	reg.key = s->mr->rkey;
	reg.access = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE;
	err = post_wait(t, s, W_REG, &reg.wr, IB_WC_REG_MR, "server REG_MR");
	if (err)
		return err;
	t->raddr = s->mr->iova;
	t->rkey = s->mr->rkey;
	return 0;
}

static int ctl_check(struct cm_test *t, struct ctl_msg *m, u32 kind,
		     const char *what)
{
	if (be32_to_cpu(m->magic) != CTL_MAGIC || be32_to_cpu(m->kind) != kind ||
	    be64_to_cpu(m->addr) != t->raddr || be32_to_cpu(m->rkey) != t->rkey ||
	    be32_to_cpu(m->len) != WRITE_LEN) {
		WHY(t, "%s: message %#x/%u addr %#llx rkey %#x len %u differs from what was sent",
		    what, be32_to_cpu(m->magic), be32_to_cpu(m->kind),
		    be64_to_cpu(m->addr), be32_to_cpu(m->rkey), be32_to_cpu(m->len));
		return -EIO;
	}
	return 0;
}

static void ctl_fill(struct cm_test *t, struct ctl_msg *m, u32 kind)
{
	m->magic = cpu_to_be32(CTL_MAGIC);
	m->kind = cpu_to_be32(kind);
	m->addr = cpu_to_be64(t->raddr);
	m->rkey = cpu_to_be32(t->rkey);
	m->len = cpu_to_be32(WRITE_LEN);
}

/* 4 KiB client -> server, then the server's reply with addr and rkey. */
static int rc_data(struct cm_test *t)
{
	struct side *c = &t->client, *s = &t->server;
	int err, d;

	fill(c->buf + OFF_MSG, MSG_LEN, 0x11);
	err = send_buf(t, c, W_SEND0, OFF_MSG, MSG_LEN, "client 4 KiB SEND");
	if (!err)
		err = recv_check(t, s, W_RECV0, OFF_MSG, MSG_LEN,
				 "server receive of 4 KiB");
	if (err)
		return err;
	d = first_diff(s->buf + OFF_MSG, c->buf + OFF_MSG, MSG_LEN);
	if (d >= 0) {
		WHY(t, "the 4 KiB received differ from those sent at byte %d", d);
		return -EIO;
	}
	err = server_register(t);
	if (err)
		return err;
	ctl_fill(t, (struct ctl_msg *)(s->buf + OFF_CTL_TX), CTL_REPLY);
	err = send_buf(t, s, W_SEND0, OFF_CTL_TX, sizeof(struct ctl_msg),
		       "server reply SEND");
	if (!err)
		err = recv_check(t, c, W_RECV0, OFF_CTL_RX, sizeof(struct ctl_msg),
				 "client receive of the reply");
	if (!err)
		err = ctl_check(t, (struct ctl_msg *)(c->buf + OFF_CTL_RX),
				CTL_REPLY, "client");
	return err;
}

/* 8 KiB RDMA WRITE into the advertised buffer, then a SEND saying so. */
static int rc_write(struct cm_test *t)
{
	struct side *c = &t->client, *s = &t->server;
	struct ib_sge sge = { c->dma + OFF_DATA, WRITE_LEN, c->pd->local_dma_lkey };
	struct ib_rdma_wr w = {
		.wr = { .sg_list = &sge, .num_sge = 1,
			.opcode = IB_WR_RDMA_WRITE,
			.send_flags = IB_SEND_SIGNALED },
		.remote_addr = t->raddr,
		.rkey = t->rkey,
	};
	int err, d;

	fill(c->buf + OFF_DATA, WRITE_LEN, 0x5a);
	ib_dma_sync_single_for_device(c->dev, c->dma + OFF_DATA, WRITE_LEN,
				      DMA_BIDIRECTIONAL);
	err = post_wait(t, c, W_SEND1, &w.wr, IB_WC_RDMA_WRITE,
			"client RDMA WRITE");
	if (err)
		return err;
	ctl_fill(t, (struct ctl_msg *)(c->buf + OFF_CTL_TX), CTL_WRITTEN);
	err = send_buf(t, c, W_SEND2, OFF_CTL_TX, sizeof(struct ctl_msg),
		       "client SEND after the WRITE");
	if (!err)
		err = recv_check(t, s, W_RECV1, OFF_CTL_RX, sizeof(struct ctl_msg),
				 "server receive after the WRITE");
	if (!err)
		err = ctl_check(t, (struct ctl_msg *)(s->buf + OFF_CTL_RX),
				CTL_WRITTEN, "server");
	if (err)
		return err;
	if (!ib_uses_virt_dma(s->dev))
		dma_sync_sg_for_cpu(s->dev->dma_device, &s->sg, 1,
				    DMA_BIDIRECTIONAL);
	d = first_diff(s->wbuf, c->buf + OFF_DATA, WRITE_LEN);
	if (d >= 0) {
		WHY(t, "the 8 KiB written differ at byte %d", d);
		return -EIO;
	}
	return 0;
}

/*
 * A QP in ERR must complete every WR it holds, and the ones posted now,
 * with a flush error: the markers ib_drain_qp posts (an unsignalled WRITE
 * without SGE, an empty receive), waited for under a bound.
 */
static int flush_check(struct cm_test *t, struct side *s, const char *who)
{
	struct ib_rdma_wr swr = { .wr = { .opcode = IB_WR_RDMA_WRITE } };
	int err;

	err = post_send(s, W_MARK_S, &swr.wr);
	if (!err)
		err = post_recv(s, W_MARK_R, 0, 0);
	if (err) {
		WHY(t, "%s: posting to the QP in ERR: %d", who, err);
		return err;
	}
	if (!wait_outstanding(s)) {
		WHY(t, "%s: the QP in ERR left work requests unflushed after %d ms",
		    who, WAIT_MS);
		return -ETIMEDOUT;
	}
	if (s->w[W_MARK_S].wc.status != IB_WC_WR_FLUSH_ERR ||
	    s->w[W_MARK_R].wc.status != IB_WC_WR_FLUSH_ERR) {
		WHY(t, "%s: markers completed with %s and %s, expected flush errors",
		    who, ib_wc_status_msg(s->w[W_MARK_S].wc.status),
		    ib_wc_status_msg(s->w[W_MARK_R].wc.status));
		return -EIO;
	}
	return 0;
}

static int qp_in_err(struct cm_test *t, struct side *s, const char *who)
{
	struct ib_qp_init_attr init;
	struct ib_qp_attr qa = {};
	int err;

	err = ib_query_qp(s->qp, &qa, IB_QP_STATE, &init);
	if (err || qa.qp_state != IB_QPS_ERR) {
		WHY(t, "%s: ib_query_qp %d, state %d, expected ERR", who, err,
		    qa.qp_state);
		return err ?: -EIO;
	}
	return 0;
}

static int rc_disconnect(struct cm_test *t)
{
	struct side *c = &t->client, *s = &t->server;
	int err;

	err = rdma_disconnect(c->id);
	if (err) {
		WHY(t, "client rdma_disconnect %d", err);
		return err;
	}
	err = wait_ev(t, s, EV(DISCONNECTED), 0, "server DISCONNECTED");
	if (err)
		return err;
	/* As NVMe's target and RDS do: the DREP, and the QP to ERR. */
	err = rdma_disconnect(s->id);
	if (err) {
		WHY(t, "server rdma_disconnect after DISCONNECTED: %d", err);
		return err;
	}
	err = wait_ev(t, c, EV(DISCONNECTED), 0, "client DISCONNECTED");
	/* A DREQ that timed out is reported as DISCONNECTED too. */
	if (!err && c->status[RDMA_CM_EVENT_DISCONNECTED]) {
		WHY(t, "client DISCONNECTED with status %d (no DREP)",
		    c->status[RDMA_CM_EVENT_DISCONNECTED]);
		err = -EIO;
	}
	if (!err)
		err = flush_check(t, c, "client");
	if (!err)
		err = flush_check(t, s, "server");
	if (err)
		return err;
	ib_drain_qp(c->qp);
	ib_drain_qp(s->qp);
	err = qp_in_err(t, c, "client");
	if (!err)
		err = qp_in_err(t, s, "server");
	return err;
}

#define NOT_RUN "not run: an earlier step failed"

static void run_rc(enum ib_poll_context pctx, const char *ctx, u16 lport)
{
	struct cm_test *t;
	int conn, data, write, disc;

	t = test_alloc(pctx, false, false, lport);
	if (!t) {
		report("connect", ctx, -ENOMEM, "no memory");
		report("data", ctx, -ENOMEM, "no memory");
		report("write", ctx, -ENOMEM, "no memory");
		report("disconnect", ctx, -ENOMEM, "no memory");
		return;
	}
	conn = rc_connect(t);
	report("connect", ctx, conn, t->why);
	data = conn ?: rc_data(t);
	report("data", ctx, data, conn ? NOT_RUN : t->why);
	/* The WRITE needs the data step's rkey, the disconnect only the connection. */
	write = data ?: rc_write(t);
	report("write", ctx, write, data ? NOT_RUN : t->why);
	disc = conn ?: rc_disconnect(t);
	report("disconnect", ctx, disc, conn ? NOT_RUN : t->why);
	test_free(t);
}

/* Both ends on dev0 (src to src): connect, SENDs both ways, disconnect. */
static void run_loopback(u16 lport)
{
	struct cm_test *t;
	int err;

	t = test_alloc(IB_POLL_SOFTIRQ, false, true, lport);
	if (!t) {
		report("loopback", "", -ENOMEM, "no memory");
		return;
	}
	err = rc_connect(t);
	if (!err)
		err = rc_data(t);
	if (!err)
		err = rc_disconnect(t);
	report("loopback", "", err, t->why);
	test_free(t);
}

static int ud_sidr(struct cm_test *t)
{
	struct side *c = &t->client, *s = &t->server;
	struct rdma_conn_param cp = {};
	int err;

	err = start_listen(t);
	if (!err)
		err = client_resolve(t);
	if (err)
		return err;
	/* UD: rdma_connect sends a SIDR request for dst's port. */
	err = rdma_connect(c->id, &cp);
	if (err) {
		WHY(t, "rdma_connect (SIDR) %d", err);
		return err;
	}
	err = wait_ev(t, c, EV(ESTABLISHED), EV_CONN_BAD | EV(ADDR_ERROR),
		      "SIDR");
	/*
	 * The SIDR reply leaves inside rdma_accept, before the server's
	 * handler has noted its CONNECT_REQUEST.
	 */
	if (!err)
		err = wait_ev(t, s, EV(CONNECT_REQUEST), 0, "server");
	if (!err)
		err = server_check(t);
	if (err)
		return err;
	if (c->ah_err || !c->ah) {
		WHY(t, "rdma_create_ah from the SIDR reply's ah_attr: %d", c->ah_err);
		return c->ah_err ?: -EIO;
	}
	if (c->remote_qpn != s->qp->qp_num || c->remote_qkey != RDMA_UDP_QKEY) {
		WHY(t, "SIDR reply QPN %#x Q_Key %#x, expected %#x and %#x",
		    c->remote_qpn, c->remote_qkey, s->qp->qp_num, RDMA_UDP_QKEY);
		return -EIO;
	}
	return 0;
}

/* Posts one UD send of len bytes at off with qkey and waits for it. */
static int ud_send(struct cm_test *t, int slot, u32 off, u32 len, u32 qkey,
		   const char *what)
{
	struct side *c = &t->client;
	struct ib_sge sge = { c->dma + off, len, c->pd->local_dma_lkey };
	struct ib_ud_wr wr = {
		.wr = { .sg_list = &sge, .num_sge = 1, .opcode = IB_WR_SEND,
			.send_flags = IB_SEND_SIGNALED },
		.ah = c->ah,
		.remote_qpn = c->remote_qpn,
		.remote_qkey = qkey,
	};
	int err;

	ib_dma_sync_single_for_device(c->dev, c->dma + off, len,
				      DMA_BIDIRECTIONAL);
	err = post_send(c, slot, &wr.wr);
	if (err) {
		WHY(t, "%s: ib_post_send %d", what, err);
		return err;
	}
	if (!twr_wait(c, &c->w[slot], WAIT_MS)) {
		WHY(t, "%s: no completion within %d ms", what, WAIT_MS);
		return -ETIMEDOUT;
	}
	return 0;
}

/* The network header in the first 40 bytes of a UD receive. */
static int ud_header_check(struct cm_test *t, const u8 *rx, struct ib_wc *wc)
{
	const struct iphdr *ip = (const struct iphdr *)(rx + 20);
	union ib_gid sgid, dgid, want_s, want_d;
	int err;

	err = ib_get_gids_from_rdma_hdr((const union rdma_network_hdr *)rx,
					wc->network_hdr_type, &sgid, &dgid);
	if (err) {
		WHY(t, "ib_get_gids_from_rdma_hdr (network type %d): %d",
		    wc->network_hdr_type, err);
		return err;
	}
	ipv6_addr_set_v4mapped(src_ip, (struct in6_addr *)&want_s);
	ipv6_addr_set_v4mapped(dst_ip, (struct in6_addr *)&want_d);
	if (memcmp(&sgid, &want_s, sizeof(sgid)) ||
	    memcmp(&dgid, &want_d, sizeof(dgid))) {
		WHY(t, "header source %pI6 destination %pI6, expected %pI6 and %pI6",
		    &sgid, &dgid, &want_s, &want_d);
		return -EIO;
	}
	if (wc->network_hdr_type != RDMA_NETWORK_IPV4)
		return 0;
	/* RoCE v2 over IPv4: the datagram's IPv4 header as it was sent. */
	if (ip->version != 4 || ip->ihl != 5 || ip->protocol != IPPROTO_UDP ||
	    ip->saddr != src_ip || ip->daddr != dst_ip ||
	    ip_fast_csum(ip, ip->ihl)) {
		WHY(t, "IPv4 header at 20: version %u ihl %u protocol %u %pI4 -> %pI4 checksum %s",
		    ip->version, ip->ihl, ip->protocol, &ip->saddr, &ip->daddr,
		    ip_fast_csum(ip, 5) ? "bad" : "good");
		return -EIO;
	}
	return 0;
}

static int ud_data(struct cm_test *t)
{
	struct side *c = &t->client, *s = &t->server;
	struct ib_wc *wc = &s->w[W_RECV0].wc;
	const u32 flags = IB_WC_GRH | IB_WC_WITH_NETWORK_HDR_TYPE;
	int err, d;

	fill(c->buf + UD_TX_DATA, UD_LEN, 0x21);
	err = ud_send(t, W_SEND0, UD_TX_DATA, UD_LEN, c->remote_qkey, "UD send");
	if (!err)
		err = wc_check(t, c, W_SEND0, IB_WC_SEND, "UD send");
	if (!err)
		err = recv_check(t, s, W_RECV0, UD_RX0, UD_GRH + UD_LEN,
				 "server UD receive");
	if (err)
		return err;
	if ((wc->wc_flags & flags) != flags || wc->src_qp != c->qp->qp_num) {
		WHY(t, "wc_flags %#x (GRH and network header type wanted) src_qp %#x, expected %#x",
		    wc->wc_flags, wc->src_qp, c->qp->qp_num);
		return -EIO;
	}
	if (c->have_net_type && wc->network_hdr_type != c->net_type) {
		WHY(t, "network_hdr_type %d, but the sender's GID makes %d",
		    wc->network_hdr_type, c->net_type);
		return -EIO;
	}
	d = first_diff(s->buf + UD_RX0 + UD_GRH, c->buf + UD_TX_DATA, UD_LEN);
	if (d >= 0) {
		WHY(t, "payload at offset 40 differs at byte %d", d);
		return -EIO;
	}
	return ud_header_check(t, s->buf + UD_RX0, wc);
}

static int ud_bad_qkey(struct cm_test *t)
{
	struct side *c = &t->client, *s = &t->server;
	/* Bit 31 clear: a Q_Key with it set would mean the QP's own. */
	u32 bad = (c->remote_qkey ^ 0x00ff00ff) & 0x7fffffff;
	int err, d;

	fill(c->buf + UD_TX_BAD, UD_LEN, 0x42);
	fill(c->buf + UD_TX_GOOD, UD_LEN, 0x63);
	err = ud_send(t, W_SEND1, UD_TX_BAD, UD_LEN, bad, "send with a wrong Q_Key");
	if (!err)
		err = wc_check(t, c, W_SEND1, IB_WC_SEND, "send with a wrong Q_Key");
	if (err)
		return err;
	if (twr_wait(s, &s->w[W_RECV1], QUIET_MS)) {
		WHY(t, "a datagram with Q_Key %#x reached a QP whose Q_Key is %#x (status %s)",
		    bad, c->remote_qkey, ib_wc_status_msg(s->w[W_RECV1].wc.status));
		return -EIO;
	}
	err = ud_send(t, W_SEND2, UD_TX_GOOD, UD_LEN, c->remote_qkey,
		      "send with the right Q_Key");
	if (!err)
		err = wc_check(t, c, W_SEND2, IB_WC_SEND, "send with the right Q_Key");
	if (!err)
		err = recv_check(t, s, W_RECV1, UD_RX1, UD_GRH + UD_LEN,
				 "receive after the wrong Q_Key");
	if (err)
		return err;
	if (!memcmp(s->buf + UD_RX1 + UD_GRH, c->buf + UD_TX_BAD, UD_LEN)) {
		WHY(t, "the wrong Q_Key's datagram was delivered");
		return -EIO;
	}
	d = first_diff(s->buf + UD_RX1 + UD_GRH, c->buf + UD_TX_GOOD, UD_LEN);
	if (d >= 0) {
		WHY(t, "payload after the wrong Q_Key differs at byte %d", d);
		return -EIO;
	}
	return 0;
}

/* Last on the client's QP: the error completion leaves it in ERR. */
static int ud_over_mtu(struct cm_test *t)
{
	struct side *c = &t->client, *s = &t->server;
	struct ib_port_attr pa;
	int err, mtu;
	u32 len;

	err = ib_query_port(c->dev, 1, &pa);
	if (err) {
		WHY(t, "ib_query_port %d", err);
		return err;
	}
	mtu = ib_mtu_enum_to_int(pa.active_mtu);
	if (mtu <= 0 || mtu + UD_LEN > BUF_SIZE - UD_TX_BIG) {
		WHY(t, "active_mtu %d", pa.active_mtu);
		return -EIO;
	}
	len = mtu + UD_LEN;
	fill(c->buf + UD_TX_BIG, len, 0x84);
	err = ud_send(t, W_SEND3, UD_TX_BIG, len, c->remote_qkey,
		      "send larger than the MTU");
	if (err)
		return err;
	if (c->w[W_SEND3].wc.status != IB_WC_LOC_LEN_ERR) {
		WHY(t, "a %u-byte send (active MTU %d) completed with %s, expected %s",
		    len, mtu, ib_wc_status_msg(c->w[W_SEND3].wc.status),
		    ib_wc_status_msg(IB_WC_LOC_LEN_ERR));
		return -EIO;
	}
	if (twr_wait(s, &s->w[W_RECV2], QUIET_MS)) {
		WHY(t, "the server received %u bytes of a send larger than the MTU",
		    s->w[W_RECV2].wc.byte_len);
		return -EIO;
	}
	return 0;
}

static void run_ud(u16 lport)
{
	struct cm_test *t;
	int sidr, err;

	t = test_alloc(IB_POLL_SOFTIRQ, true, false, lport);
	if (!t) {
		report("ud_sidr", "", -ENOMEM, "no memory");
		report("ud_data", "", -ENOMEM, "no memory");
		report("ud_bad_qkey", "", -ENOMEM, "no memory");
		report("ud_over_mtu", "", -ENOMEM, "no memory");
		return;
	}
	sidr = ud_sidr(t);
	report("ud_sidr", "", sidr, t->why);
	if (!sidr && t->client.have_net_type)
		pr_info("rmlx5_cmtest: UD datagrams carry network header type %d (%s)\n",
			t->client.net_type,
			t->client.net_type == RDMA_NETWORK_IPV4 ? "RoCE v2, IPv4" :
			t->client.net_type == RDMA_NETWORK_ROCE_V1 ? "RoCE v1" : "other");
	/*
	 * Each needs only the SIDR's AH; the over-MTU send comes last, as
	 * its error completion moves the client's QP to ERR.
	 */
	err = sidr ?: ud_data(t);
	report("ud_data", "", err, sidr ? "not run: SIDR failed" : t->why);
	err = sidr ?: ud_bad_qkey(t);
	report("ud_bad_qkey", "", err, sidr ? "not run: SIDR failed" : t->why);
	err = sidr ?: ud_over_mtu(t);
	report("ud_over_mtu", "", err, sidr ? "not run: SIDR failed" : t->why);
	test_free(t);
}

/* An AH towards a GID nobody has: rdma_create_ah must refuse it. */
static void test_ah_unknown_gid(struct ib_device *dev, struct ib_pd *pd)
{
	struct rdma_ah_attr attr = {};
	const struct ib_gid_attr *gattr;
	union ib_gid sgid, dgid;
	struct ib_ah *ah;

	ipv6_addr_set_v4mapped(src_ip, (struct in6_addr *)&sgid);
	ipv6_addr_set_v4mapped(in_aton("10.78.9.9"), (struct in6_addr *)&dgid);
	gattr = rdma_find_gid_by_port(dev, &sgid, IB_GID_TYPE_ROCE_UDP_ENCAP, 1,
				      NULL);
	if (IS_ERR(gattr)) {
		pr_info("rmlx5-test: FAIL %s_ah_unknown_gid: no RoCE v2 GID %pI6 on %s: %ld\n",
			prefix, &sgid, dev_name(&dev->dev), PTR_ERR(gattr));
		return;
	}
	attr.type = rdma_ah_find_type(dev, 1);
	rdma_ah_set_port_num(&attr, 1);
	rdma_ah_set_grh(&attr, &dgid, 0, gattr->index, 64, 0);
	ah = rdma_create_ah(pd, &attr, RDMA_CREATE_AH_SLEEPABLE);
	rdma_put_gid_attr(gattr);
	if (!IS_ERR(ah)) {
		pr_info("rmlx5-test: FAIL %s_ah_unknown_gid: rdma_create_ah towards %pI6 succeeded\n",
			prefix, &dgid);
		rdma_destroy_ah(ah, RDMA_DESTROY_AH_SLEEPABLE);
		return;
	}
	pr_info("rmlx5_cmtest: rdma_create_ah towards %pI6: %ld\n", &dgid,
		PTR_ERR(ah));
	pr_info("rmlx5-test: PASS %s_ah_unknown_gid\n", prefix);
}

/* ib_map_mr_sg of more pages than the MR holds maps only what fits. */
static void test_mr_too_many_pages(struct ib_device *dev, struct ib_pd *pd)
{
	struct page **pages;
	struct scatterlist *sg;
	struct ib_mr *mr = NULL;
	int i, n, nents = 0;

	if (!(dev->attrs.device_cap_flags & IB_DEVICE_MEM_MGT_EXTENSIONS)) {
		pr_info("rmlx5-test: SKIP %s_mr_too_many_pages: %s has no fast registration\n",
			prefix, dev_name(&dev->dev));
		return;
	}
	pages = kcalloc(MR_PAGES, sizeof(*pages), GFP_KERNEL);
	sg = kcalloc(MR_PAGES, sizeof(*sg), GFP_KERNEL);
	if (!pages || !sg)
		goto nomem;
	sg_init_table(sg, MR_PAGES);
	for (i = 0; i < MR_PAGES; i++) {
		pages[i] = alloc_page(GFP_KERNEL);
		if (!pages[i])
			goto nomem;
		sg_set_page(&sg[i], pages[i], PAGE_SIZE, 0);
	}
	nents = ib_dma_map_sg(dev, sg, MR_PAGES, DMA_BIDIRECTIONAL);
	if (nents <= 0) {
		pr_info("rmlx5-test: FAIL %s_mr_too_many_pages: ib_dma_map_sg %d\n",
			prefix, nents);
		nents = 0;
		goto out;
	}
	mr = ib_alloc_mr(pd, IB_MR_TYPE_MEM_REG, MR_MAX_SG);
	if (IS_ERR(mr)) {
		pr_info("rmlx5-test: FAIL %s_mr_too_many_pages: ib_alloc_mr %ld\n",
			prefix, PTR_ERR(mr));
		mr = NULL;
		goto out;
	}
	/* Stops at the 5th page: fewer entries than given, 4 pages long. */
	n = ib_map_mr_sg(mr, sg, nents, NULL, PAGE_SIZE);
	if (n < 0 || n >= nents || mr->length != MR_MAX_SG * PAGE_SIZE)
		pr_info("rmlx5-test: FAIL %s_mr_too_many_pages: %d entries into an MR for %d pages: %d mapped, length %llu\n",
			prefix, nents, MR_MAX_SG, n, mr->length);
	else
		pr_info("rmlx5-test: PASS %s_mr_too_many_pages\n", prefix);
	goto out;
nomem:
	pr_info("rmlx5-test: FAIL %s_mr_too_many_pages: no memory\n", prefix);
out:
	if (mr)
		ib_dereg_mr(mr);
	if (nents)
		ib_dma_unmap_sg(dev, sg, MR_PAGES, DMA_BIDIRECTIONAL);
	for (i = 0; pages && i < MR_PAGES; i++)
		if (pages[i])
			__free_page(pages[i]);
	kfree(sg);
	kfree(pages);
}

static int quiet_handler(struct rdma_cm_id *id, struct rdma_cm_event *ev)
{
	return 0;
}

/* Refusals on dev0, found by binding an id to src. */
static void run_refusals(void)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	const char *why = NULL;
	struct rdma_cm_id *id;
	struct ib_pd *pd = NULL;
	long err = 0;

	sin.sin_addr.s_addr = src_ip;
	id = rdma_create_id(&init_net, quiet_handler, NULL, RDMA_PS_TCP,
			    IB_QPT_RC);
	if (IS_ERR(id)) {
		err = PTR_ERR(id);
		why = "rdma_create_id";
		id = NULL;
		goto out;
	}
	err = rdma_bind_addr(id, (struct sockaddr *)&sin);
	if (err) {
		why = "rdma_bind_addr to src";
		goto out;
	}
	if (!id->device || strcmp(dev_name(&id->device->dev), dev0)) {
		err = -ENODEV;
		why = "src is not on dev0";
		goto out;
	}
	pd = ib_alloc_pd(id->device, 0);
	if (IS_ERR(pd)) {
		err = PTR_ERR(pd);
		why = "ib_alloc_pd";
		pd = NULL;
		goto out;
	}
	test_ah_unknown_gid(id->device, pd);
	test_mr_too_many_pages(id->device, pd);
out:
	if (why) {
		pr_info("rmlx5-test: FAIL %s_ah_unknown_gid: %s: %ld\n", prefix,
			why, err);
		pr_info("rmlx5-test: FAIL %s_mr_too_many_pages: %s: %ld\n",
			prefix, why, err);
	}
	if (pd)
		ib_dealloc_pd(pd);
	if (id)
		rdma_destroy_id(id);
}

static int __init cmtest_init(void)
{
	static const struct {
		enum ib_poll_context pctx;
		const char *name;
	} ctxs[] = {
		{ IB_POLL_DIRECT, "_direct" },
		{ IB_POLL_SOFTIRQ, "_softirq" },
		{ IB_POLL_WORKQUEUE, "_workqueue" },
		{ IB_POLL_UNBOUND_WORKQUEUE, "_unbound" },
	};
	int i;

	if (!in4_pton(src, -1, (u8 *)&src_ip, -1, NULL) ||
	    !in4_pton(dst, -1, (u8 *)&dst_ip, -1, NULL) || port > 65535 - 5) {
		pr_err("rmlx5_cmtest: src=%s dst=%s port=%u: two IPv4 addresses and a port below 65531 wanted\n",
		       src, dst, port);
		return -EINVAL;
	}
	for (i = 0; i < ARRAY_SIZE(ctxs); i++)
		run_rc(ctxs[i].pctx, ctxs[i].name, port + i);
	run_loopback(port + 4);
	run_ud(port + 5);
	run_refusals();
	return 0;
}

static void __exit cmtest_exit(void)
{
}

module_init(cmtest_init);
module_exit(cmtest_exit);
MODULE_DESCRIPTION("rmlx5 rdma_cm test ULP (RoCE, rdma_cm and ib_* API only)");
MODULE_LICENSE("GPL");
