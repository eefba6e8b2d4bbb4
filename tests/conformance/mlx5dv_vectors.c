// SPDX-License-Identifier: GPL-2.0
/*
 * Test vectors for rust/mlx5-prm, produced with rdma-core's mlx5dv.h.
 *
 * The layouts, constants and inline helpers all come from
 * <infiniband/mlx5dv.h> (Debian package libibverbs-dev): segments are filled
 * with mlx5dv_set_ctrl_seg() / mlx5dv_set_data_seg() or through the header's
 * struct fields, and CQEs are read back with mlx5dv_get_cqe_*() and the
 * struct fields. Nothing here computes an offset by hand, so a vector is the
 * header's own idea of where a field lives.
 *
 * Output: one record per line on stdout, space-separated; numbers are hex
 * without a prefix; a byte buffer is one hex string (two digits per byte).
 * The consumer is rust/mlx5-prm/tests/conformance.rs, which documents each
 * record. The PRNG is seeded with a constant, so the output is the same on
 * every run; argv[1], if given, is the number of cases per record type.
 */
#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/mlx5dv.h>

static uint64_t prng_state = 0x6d6c7835u; /* "mlx5" */

/* splitmix64: small, fast and good enough to spread bits over every field. */
static uint64_t rnd(void)
{
	uint64_t z = (prng_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint32_t rnd32(void) { return (uint32_t)rnd(); }
static unsigned int below(unsigned int n) { return (unsigned int)(rnd() % n); }

static void rnd_bytes(void *p, size_t n)
{
	unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)rnd();
}

static void hex(const void *p, size_t n)
{
	const unsigned char *b = p;

	putchar(' ');
	for (size_t i = 0; i < n; i++)
		printf("%02x", b[i]);
}

/* A value with a random number of significant bits, so that small and
 * boundary values show up as often as large ones. */
static uint64_t rnd_bits(unsigned int max_bits)
{
	unsigned int bits = below(max_bits + 1);
	uint64_t v = rnd();

	return bits == 64 ? v : v & ((1ull << bits) - 1);
}

#define CONST(name) printf("const %s %llx\n", #name, (unsigned long long)(name))
#define SIZE(s) printf("size %s %zx\n", #s, sizeof(struct s))
#define OFFSET(s, f) \
	printf("offset %s %s %zx %zx\n", #s, #f, offsetof(struct s, f), \
	       sizeof(((struct s *)0)->f))

static void constants(void)
{
	CONST(MLX5_OPCODE_NOP);
	CONST(MLX5_OPCODE_SEND_INVAL);
	CONST(MLX5_OPCODE_RDMA_WRITE);
	CONST(MLX5_OPCODE_RDMA_WRITE_IMM);
	CONST(MLX5_OPCODE_SEND);
	CONST(MLX5_OPCODE_SEND_IMM);
	CONST(MLX5_OPCODE_TSO);
	CONST(MLX5_OPCODE_RDMA_READ);
	CONST(MLX5_OPCODE_ATOMIC_CS);
	CONST(MLX5_OPCODE_ATOMIC_FA);
	CONST(MLX5_OPCODE_ATOMIC_MASKED_CS);
	CONST(MLX5_OPCODE_ATOMIC_MASKED_FA);
	CONST(MLX5_OPCODE_FMR);
	CONST(MLX5_OPCODE_LOCAL_INVAL);
	CONST(MLX5_OPCODE_CONFIG_CMD);
	CONST(MLX5_OPCODE_SET_PSV);
	CONST(MLX5_OPCODE_UMR);
	CONST(MLX5_OPCODE_TAG_MATCHING);
	CONST(MLX5_OPCODE_FLOW_TBL_ACCESS);
	CONST(MLX5_OPCODE_MMO);

	CONST(MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
	CONST(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
	CONST(MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
	CONST(MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
	CONST(MLX5_CQE_SYNDROME_MW_BIND_ERR);
	CONST(MLX5_CQE_SYNDROME_BAD_RESP_ERR);
	CONST(MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR);
	CONST(MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
	CONST(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
	CONST(MLX5_CQE_SYNDROME_REMOTE_OP_ERR);
	CONST(MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
	CONST(MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR);
	CONST(MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR);
	CONST(MLX5_CQE_VENDOR_SYNDROME_ODP_PFAULT);

	CONST(MLX5_CQE_OWNER_MASK);
	CONST(MLX5_CQE_REQ);
	CONST(MLX5_CQE_RESP_WR_IMM);
	CONST(MLX5_CQE_RESP_SEND);
	CONST(MLX5_CQE_RESP_SEND_IMM);
	CONST(MLX5_CQE_RESP_SEND_INV);
	CONST(MLX5_CQE_RESIZE_CQ);
	CONST(MLX5_CQE_NO_PACKET);
	CONST(MLX5_CQE_SIG_ERR);
	CONST(MLX5_CQE_REQ_ERR);
	CONST(MLX5_CQE_RESP_ERR);
	CONST(MLX5_CQE_INVALID);

	CONST(MLX5_CQ_DOORBELL);
	CONST(MLX5_CQ_DB_REQ_NOT_SOL);
	CONST(MLX5_CQ_DB_REQ_NOT);
	CONST(MLX5_RCV_DBR);
	CONST(MLX5_SND_DBR);
	CONST(MLX5_INVALID_LKEY);
	CONST(MLX5_WQE_CTRL_CQ_UPDATE);
	CONST(MLX5_WQE_CTRL_SOLICITED);
	CONST(MLX5_WQE_CTRL_FENCE);
	CONST(MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE);
	CONST(MLX5_SEND_WQE_BB);
	CONST(MLX5_SEND_WQE_SHIFT);
	CONST(MLX5_INLINE_SEG);
}

static void layouts(void)
{
	SIZE(mlx5_wqe_ctrl_seg);
	OFFSET(mlx5_wqe_ctrl_seg, opmod_idx_opcode);
	OFFSET(mlx5_wqe_ctrl_seg, qpn_ds);
	OFFSET(mlx5_wqe_ctrl_seg, signature);
	OFFSET(mlx5_wqe_ctrl_seg, fm_ce_se);
	OFFSET(mlx5_wqe_ctrl_seg, imm);
	SIZE(mlx5_wqe_raddr_seg);
	OFFSET(mlx5_wqe_raddr_seg, raddr);
	OFFSET(mlx5_wqe_raddr_seg, rkey);
	SIZE(mlx5_wqe_atomic_seg);
	OFFSET(mlx5_wqe_atomic_seg, swap_add);
	OFFSET(mlx5_wqe_atomic_seg, compare);
	SIZE(mlx5_wqe_data_seg);
	OFFSET(mlx5_wqe_data_seg, byte_count);
	OFFSET(mlx5_wqe_data_seg, lkey);
	OFFSET(mlx5_wqe_data_seg, addr);
	SIZE(mlx5_wqe_inl_data_seg);
	OFFSET(mlx5_wqe_inl_data_seg, byte_count);
	SIZE(mlx5_cqe64);
	OFFSET(mlx5_cqe64, ml_path);
	OFFSET(mlx5_cqe64, slid);
	OFFSET(mlx5_cqe64, flags_rqpn);
	OFFSET(mlx5_cqe64, srqn_uidx);
	OFFSET(mlx5_cqe64, imm_inval_pkey);
	OFFSET(mlx5_cqe64, byte_cnt);
	OFFSET(mlx5_cqe64, sop_drop_qpn);
	OFFSET(mlx5_cqe64, wqe_counter);
	OFFSET(mlx5_cqe64, signature);
	OFFSET(mlx5_cqe64, op_own);
	SIZE(mlx5_err_cqe);
	OFFSET(mlx5_err_cqe, srqn);
	OFFSET(mlx5_err_cqe, vendor_err_synd);
	OFFSET(mlx5_err_cqe, syndrome);
	OFFSET(mlx5_err_cqe, s_wqe_opcode_qpn);
	OFFSET(mlx5_err_cqe, wqe_counter);
	OFFSET(mlx5_err_cqe, signature);
	OFFSET(mlx5_err_cqe, op_own);
}

static const uint8_t send_opcodes[] = {
	MLX5_OPCODE_NOP, MLX5_OPCODE_SEND_INVAL, MLX5_OPCODE_RDMA_WRITE,
	MLX5_OPCODE_RDMA_WRITE_IMM, MLX5_OPCODE_SEND, MLX5_OPCODE_SEND_IMM,
	MLX5_OPCODE_TSO, MLX5_OPCODE_RDMA_READ, MLX5_OPCODE_ATOMIC_CS,
	MLX5_OPCODE_ATOMIC_FA, MLX5_OPCODE_ATOMIC_MASKED_CS,
	MLX5_OPCODE_ATOMIC_MASKED_FA, MLX5_OPCODE_FMR, MLX5_OPCODE_LOCAL_INVAL,
	MLX5_OPCODE_CONFIG_CMD, MLX5_OPCODE_SET_PSV, MLX5_OPCODE_UMR,
	MLX5_OPCODE_TAG_MATCHING, MLX5_OPCODE_FLOW_TBL_ACCESS, MLX5_OPCODE_MMO,
};

static const uint8_t cqe_opcodes[] = {
	MLX5_CQE_REQ, MLX5_CQE_RESP_WR_IMM, MLX5_CQE_RESP_SEND,
	MLX5_CQE_RESP_SEND_IMM, MLX5_CQE_RESP_SEND_INV, MLX5_CQE_RESIZE_CQ,
	MLX5_CQE_NO_PACKET, MLX5_CQE_SIG_ERR, MLX5_CQE_REQ_ERR,
	MLX5_CQE_RESP_ERR, MLX5_CQE_INVALID,
};

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ctrl pi opcode opmod qpn fm_ce_se ds signature imm BYTES
 * Mostly known opcodes; one in eight is any byte at all. fm_ce_se uses the
 * fence, CE and solicited bits only. imm is the value whose big-endian bytes
 * the segment holds (mlx5dv_set_ctrl_seg stores its imm argument as is). */
static void ctrl_vectors(unsigned int n)
{
	for (unsigned int i = 0; i < n; i++) {
		struct mlx5_wqe_ctrl_seg seg;
		uint16_t pi = (uint16_t)rnd_bits(16);
		uint8_t opcode = below(8) ? send_opcodes[below(ARRAY_LEN(send_opcodes))] : (uint8_t)rnd();
		uint8_t opmod = (uint8_t)rnd_bits(8);
		uint32_t qpn = (uint32_t)rnd_bits(24);
		uint8_t fm_ce_se = (uint8_t)(below(8) << 5 | below(4) << 2 | below(2) << 1);
		uint8_t ds = (uint8_t)below(64);
		uint8_t signature = (uint8_t)rnd_bits(8);
		uint32_t imm = (uint32_t)rnd_bits(32);

		memset(&seg, 0, sizeof(seg));
		mlx5dv_set_ctrl_seg(&seg, pi, opcode, opmod, qpn, fm_ce_se, ds, signature,
				    htobe32(imm));
		printf("ctrl %x %x %x %x %x %x %x %x", pi, opcode, opmod, qpn, fm_ce_se, ds,
		       signature, imm);
		hex(&seg, sizeof(seg));
		putchar('\n');
	}
}

/* data byte_count lkey addr BYTES */
static void data_vectors(unsigned int n)
{
	for (unsigned int i = 0; i < n; i++) {
		struct mlx5_wqe_data_seg seg;
		uint32_t len = (uint32_t)rnd_bits(32);
		uint32_t lkey = (uint32_t)rnd_bits(32);
		uint64_t addr = rnd_bits(64);

		memset(&seg, 0, sizeof(seg));
		mlx5dv_set_data_seg(&seg, len, lkey, (uintptr_t)addr);
		printf("data %x %x %llx", len, lkey, (unsigned long long)addr);
		hex(&seg, sizeof(seg));
		putchar('\n');
	}
}

/* dgram qkey ext dqpn stat_rate_sl fl_mlid rlid tclass hop_limit grh_gid_fl
 * RMAC RGID BYTES (mlx5dv_set_dgram_seg) */
static void dgram_vectors(unsigned int n)
{
	for (unsigned int i = 0; i < n; i++) {
		struct mlx5_wqe_datagram_seg seg;
		uint32_t qkey = (uint32_t)rnd_bits(32);
		uint32_t dqpn = (uint32_t)rnd_bits(24);
		uint8_t ext = below(2), srsl = (uint8_t)rnd(), fl = (uint8_t)rnd();
		uint16_t rlid = (uint16_t)rnd_bits(16);
		uint8_t tclass = (uint8_t)rnd(), hop = (uint8_t)rnd();
		uint32_t ggf = (uint32_t)rnd_bits(32);
		uint8_t rmac[6], rgid[16];

		rnd_bytes(rmac, sizeof(rmac));
		rnd_bytes(rgid, sizeof(rgid));
		memset(&seg, 0xff, sizeof(seg));
		/* The 64-bit key: the Q_Key in its upper half, as mlx5 puts it. */
		mlx5dv_set_dgram_seg(&seg, (uint64_t)qkey << 32, dqpn, ext, srsl, fl,
				     rlid, rmac, tclass, hop, ggf, rgid);
		memset(seg.av.reserved0, 0, sizeof(seg.av.reserved0));
		printf("dgram %x %x %x %x %x %x %x %x %x", qkey, ext, dqpn, srsl, fl,
		       rlid, tclass, hop, ggf);
		hex(rmac, sizeof(rmac));
		hex(rgid, sizeof(rgid));
		hex(&seg, sizeof(seg));
		putchar('\n');
	}
}

/* raddr raddr rkey BYTES (mlx5dv.h has no setter: struct fields) */
static void raddr_vectors(unsigned int n)
{
	for (unsigned int i = 0; i < n; i++) {
		struct mlx5_wqe_raddr_seg seg;
		uint64_t va = rnd_bits(64);
		uint32_t rkey = (uint32_t)rnd_bits(32);

		memset(&seg, 0, sizeof(seg));
		seg.raddr = htobe64(va);
		seg.rkey = htobe32(rkey);
		printf("raddr %llx %x", (unsigned long long)va, rkey);
		hex(&seg, sizeof(seg));
		putchar('\n');
	}
}

/* atomic swap_add compare BYTES */
static void atomic_vectors(unsigned int n)
{
	for (unsigned int i = 0; i < n; i++) {
		struct mlx5_wqe_atomic_seg seg;
		uint64_t swap_add = rnd_bits(64);
		uint64_t compare = rnd_bits(64);

		memset(&seg, 0, sizeof(seg));
		seg.swap_add = htobe64(swap_add);
		seg.compare = htobe64(compare);
		printf("atomic %llx %llx", (unsigned long long)swap_add,
		       (unsigned long long)compare);
		hex(&seg, sizeof(seg));
		putchar('\n');
	}
}

/* inl byte_count BYTES: the inline segment header. */
static void inline_header_vectors(unsigned int n)
{
	for (unsigned int i = 0; i < n; i++) {
		struct mlx5_wqe_inl_data_seg seg;
		uint32_t len = (uint32_t)rnd_bits(31);

		seg.byte_count = htobe32(len | MLX5_INLINE_SEG);
		printf("inl %x", len);
		hex(&seg, sizeof(seg));
		putchar('\n');
	}
}

/* The byte every ring position holds before a vector writes into it. */
static unsigned char ring_fill(size_t i)
{
	return (unsigned char)(i * 7 + 3);
}

/* inlring ring_len offset PAYLOAD RING
 * An inline segment (header, payload, zero padding to 16 bytes) written into
 * a ring of 1..4 WQEBBs pre-filled with ring_fill(), wrapping at the end of
 * the ring, as the mlx5 provider lays inline data into the SQ. */
static void inline_ring_vectors(unsigned int n)
{
	for (unsigned int i = 0; i < n; i++) {
		unsigned char ring[4 * MLX5_SEND_WQE_BB];
		unsigned char payload[4 * MLX5_SEND_WQE_BB];
		size_t ring_len = (size_t)MLX5_SEND_WQE_BB << below(3);
		size_t offset = (size_t)below((unsigned int)(ring_len / 16)) * 16;
		size_t max_payload = ring_len - sizeof(struct mlx5_wqe_inl_data_seg);
		size_t len = below((unsigned int)max_payload + 1);
		size_t seg_size = (len + sizeof(struct mlx5_wqe_inl_data_seg) + 15) / 16 * 16;
		struct mlx5_wqe_inl_data_seg inl;
		size_t pos;

		for (size_t j = 0; j < ring_len; j++)
			ring[j] = ring_fill(j);
		rnd_bytes(payload, len);
		inl.byte_count = htobe32((uint32_t)len | MLX5_INLINE_SEG);
		memcpy(ring + offset, &inl, sizeof(inl));
		pos = offset + sizeof(inl);
		for (size_t j = 0; j < seg_size - sizeof(inl); j++) {
			ring[pos % ring_len] = j < len ? payload[j] : 0;
			pos++;
		}
		printf("inlring %zx %zx", ring_len, offset);
		if (len)
			hex(payload, len);
		else
			printf(" -");
		hex(ring, ring_len);
		putchar('\n');
	}
}

/* recv capacity nsegs BYTES then nsegs times: byte_count lkey addr
 * A receive WQE slot of `capacity` segments holding `nsegs` data segments,
 * then the MLX5_INVALID_LKEY terminator when there is room for it. */
static void recv_vectors(unsigned int n)
{
	for (unsigned int i = 0; i < n; i++) {
		struct mlx5_wqe_data_seg slot[8], segs[8];
		unsigned int capacity = 1u << below(4);
		unsigned int nsegs = below(capacity + 1);

		memset(slot, 0xa5, sizeof(slot));
		for (unsigned int j = 0; j < nsegs; j++) {
			uint32_t len = (uint32_t)rnd_bits(31);
			uint32_t lkey = (uint32_t)rnd_bits(32);

			/* A segment that looks like a terminator would end the list. */
			if (lkey == MLX5_INVALID_LKEY)
				lkey++;
			mlx5dv_set_data_seg(&segs[j], len, lkey, (uintptr_t)rnd_bits(64));
			slot[j] = segs[j];
		}
		if (nsegs < capacity) {
			slot[nsegs].byte_count = 0;
			slot[nsegs].lkey = htobe32(MLX5_INVALID_LKEY);
			slot[nsegs].addr = 0;
		}
		printf("recv %x %x", capacity, nsegs);
		hex(slot, capacity * sizeof(slot[0]));
		for (unsigned int j = 0; j < nsegs; j++)
			printf(" %x %x %llx", be32toh(segs[j].byte_count), be32toh(segs[j].lkey),
			       (unsigned long long)be64toh(segs[j].addr));
		putchar('\n');
	}
}

static void cqe_fields(struct mlx5_cqe64 *cqe)
{
	uint32_t flags_rqpn = be32toh(cqe->flags_rqpn);

	/* The last five the way rdma-core's mlx5 provider fills a responder
	 * work completion on an InfiniBand port: dlid_path_bits from ml_path,
	 * slid, the GRH flag from bits 29:28, sl from 27:24, src_qp from 23:0. */
	printf(" %x %x %x %x %x %x %x %x %x %x %x %x %x %x %x %x",
	       mlx5dv_get_cqe_opcode(cqe), mlx5dv_get_cqe_owner(cqe), mlx5dv_get_cqe_se(cqe),
	       mlx5dv_get_cqe_format(cqe), be32toh(cqe->srqn_uidx) & 0xffffff,
	       be32toh(cqe->imm_inval_pkey), be32toh(cqe->byte_cnt),
	       be32toh(cqe->sop_drop_qpn) >> 24, be32toh(cqe->sop_drop_qpn) & 0xffffff,
	       be16toh(cqe->wqe_counter), cqe->signature,
	       cqe->ml_path, be16toh(cqe->slid), (flags_rqpn >> 28) & 3,
	       (flags_rqpn >> 24) & 0xf, flags_rqpn & 0xffffff);
}

/* cqe MODE BYTES opcode owner se format srqn_uidx imm byte_cnt sop qpn
 *     wqe_counter signature ml_path slid grh sl src_qp
 * MODE "raw": 64 random bytes (reserved bytes included), read back through
 * mlx5dv_get_cqe_*() and the struct fields. MODE "enc": a zeroed CQE whose
 * fields were set through the struct (and mlx5dv_set_cqe_owner), with a
 * known opcode; read back the same way. */
static void cqe_vectors(unsigned int n)
{
	for (unsigned int i = 0; i < n; i++) {
		struct mlx5_cqe64 cqe;
		int raw = i & 1;

		if (raw) {
			rnd_bytes(&cqe, sizeof(cqe));
		} else {
			memset(&cqe, 0, sizeof(cqe));
			cqe.ml_path = (uint8_t)rnd_bits(8);
			cqe.slid = htobe16((uint16_t)rnd_bits(16));
			cqe.flags_rqpn = htobe32((uint32_t)rnd_bits(2) << 28 |
						 (uint32_t)rnd_bits(4) << 24 |
						 (uint32_t)rnd_bits(24));
			cqe.srqn_uidx = htobe32((uint32_t)rnd_bits(24));
			cqe.imm_inval_pkey = htobe32((uint32_t)rnd_bits(32));
			cqe.byte_cnt = htobe32((uint32_t)rnd_bits(32));
			cqe.sop_drop_qpn = htobe32((uint32_t)rnd_bits(8) << 24 |
						   (uint32_t)rnd_bits(24));
			cqe.wqe_counter = htobe16((uint16_t)rnd_bits(16));
			cqe.signature = (uint8_t)rnd_bits(8);
			cqe.op_own = (uint8_t)(cqe_opcodes[below(ARRAY_LEN(cqe_opcodes))] << 4 |
					       below(4) << 2 | below(2) << 1);
			mlx5dv_set_cqe_owner(&cqe, (uint8_t)below(2));
		}
		printf("cqe %s", raw ? "raw" : "enc");
		hex(&cqe, sizeof(cqe));
		cqe_fields(&cqe);
		putchar('\n');
	}
}

/* errcqe MODE BYTES opcode owner srqn vendor_syndrome syndrome sop qpn
 *        wqe_counter signature
 * As for cqe, with the mlx5_err_cqe layout; "enc" uses the REQ_ERR and
 * RESP_ERR opcodes. */
static void err_cqe_vectors(unsigned int n)
{
	for (unsigned int i = 0; i < n; i++) {
		struct mlx5_err_cqe cqe;
		int raw = i & 1;

		if (raw) {
			rnd_bytes(&cqe, sizeof(cqe));
		} else {
			memset(&cqe, 0, sizeof(cqe));
			cqe.srqn = htobe32((uint32_t)rnd_bits(24));
			cqe.vendor_err_synd = (uint8_t)rnd_bits(8);
			cqe.syndrome = (uint8_t)rnd_bits(8);
			cqe.s_wqe_opcode_qpn = htobe32((uint32_t)rnd_bits(8) << 24 |
						       (uint32_t)rnd_bits(24));
			cqe.wqe_counter = htobe16((uint16_t)rnd_bits(16));
			cqe.signature = (uint8_t)rnd_bits(8);
			cqe.op_own = (uint8_t)((below(2) ? MLX5_CQE_REQ_ERR : MLX5_CQE_RESP_ERR) << 4 |
					       below(2));
		}
		printf("errcqe %s", raw ? "raw" : "enc");
		hex(&cqe, sizeof(cqe));
		printf(" %x %x %x %x %x %x %x %x %x",
		       mlx5dv_get_cqe_opcode((struct mlx5_cqe64 *)&cqe),
		       mlx5dv_get_cqe_owner((struct mlx5_cqe64 *)&cqe),
		       be32toh(cqe.srqn) & 0xffffff, cqe.vendor_err_synd, cqe.syndrome,
		       be32toh(cqe.s_wqe_opcode_qpn) >> 24,
		       be32toh(cqe.s_wqe_opcode_qpn) & 0xffffff, be16toh(cqe.wqe_counter),
		       cqe.signature);
		putchar('\n');
	}
}

/* owner log_size ci op_own sw_owned
 * Whether the CQE at consumer index ci of a CQ of 2^log_size entries belongs
 * to software: opcode not INVALID and owner bit equal to the index's pass
 * parity (ci & nent). */
static void owner_vectors(unsigned int n)
{
	for (unsigned int i = 0; i < n; i++) {
		struct mlx5_cqe64 cqe;
		unsigned int log_size = below(25);
		uint32_t nent = 1u << log_size;
		uint32_t ci = (uint32_t)rnd_bits(32);
		int sw;

		memset(&cqe, 0, sizeof(cqe));
		cqe.op_own = below(4) ? (uint8_t)rnd() : MLX5_CQE_INVALID << 4;
		sw = mlx5dv_get_cqe_opcode(&cqe) != MLX5_CQE_INVALID &&
		     !((cqe.op_own & MLX5_CQE_OWNER_MASK) ^ !!(ci & nent));
		printf("owner %x %x %x %x\n", log_size, ci, cqe.op_own, sw);
	}
}

/* qpdbr recv send BYTES: the QP doorbell record, indexed by MLX5_RCV_DBR and
 * MLX5_SND_DBR, each counter & 0xffff in a big-endian word. */
static void qp_dbr_vectors(unsigned int n)
{
	for (unsigned int i = 0; i < n; i++) {
		__be32 db[2];
		uint32_t rq_head = rnd32(), sq_cur_post = rnd32();

		db[MLX5_RCV_DBR] = htobe32(rq_head & 0xffff);
		db[MLX5_SND_DBR] = htobe32(sq_cur_post & 0xffff);
		printf("qpdbr %x %x", rq_head & 0xffff, sq_cur_post & 0xffff);
		hex(db, sizeof(db));
		putchar('\n');
	}
}

/* cqarm sn solicited ci cqn ARM_WORD UAR_DOORBELL
 * The arm request in the CQ doorbell record and the 8 bytes stored at
 * MLX5_CQ_DOORBELL: big-endian (sn & 3) << 28 | cmd | ci & 0xffffff, then
 * the big-endian CQN. */
static void cq_arm_vectors(unsigned int n)
{
	for (unsigned int i = 0; i < n; i++) {
		uint32_t arm_sn = rnd32(), ci = rnd32(), cqn = (uint32_t)rnd_bits(24);
		int solicited = (int)below(2);
		uint32_t cmd = solicited ? MLX5_CQ_DB_REQ_NOT_SOL : MLX5_CQ_DB_REQ_NOT;
		uint32_t word = (arm_sn & 3) << 28 | cmd | (ci & 0xffffff);
		__be32 dbrec_arm = htobe32(word);
		__be32 uar[2] = { htobe32(word), htobe32(cqn) };

		printf("cqarm %x %x %x %x", arm_sn & 3, solicited, ci, cqn);
		hex(&dbrec_arm, sizeof(dbrec_arm));
		hex(uar, sizeof(uar));
		putchar('\n');
	}
}

int main(int argc, char **argv)
{
	unsigned int n = argc > 1 ? (unsigned int)strtoul(argv[1], NULL, 0) : 4000;

	constants();
	layouts();
	ctrl_vectors(n);
	data_vectors(n);
	raddr_vectors(n);
	dgram_vectors(n);
	atomic_vectors(n);
	inline_header_vectors(n);
	inline_ring_vectors(n);
	recv_vectors(n);
	cqe_vectors(n);
	err_cqe_vectors(n);
	owner_vectors(n);
	qp_dbr_vectors(n);
	cq_arm_vectors(n);
	printf("end\n");
	return 0;
}
