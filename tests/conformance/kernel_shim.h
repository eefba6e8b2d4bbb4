// SPDX-License-Identifier: GPL-2.0
/*
 * Stand-ins for the kernel types and helpers used by the mlx5 definitions
 * that rust/mlx5-prm/tests/kernel_headers.rs lifts out of the Linux tree.
 *
 * The test builds one C file: this header, then the lifted kernel text
 * (enums, #defines, structs and small static inline functions, verbatim),
 * then kernel_vectors.c.in and a main() that prints constants and layouts.
 * MMIO stores go to a fake UAR page and record where they landed.
 */

#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
typedef uint16_t __be16;
typedef uint32_t __be32;
typedef uint64_t __be64;
#define __packed __attribute__((packed))
#define __iomem
#define __force
#define BITS_PER_LONG 64
#define PAGE_SIZE 4096
#define BIT(n) (1UL << (n))
#define likely(x) (x)
#define unlikely(x) (x)
#define cpu_to_be32(x) htobe32(x)
#define wmb() do { } while (0)
#define struct_group(NAME, ...) \
	union { struct { __VA_ARGS__ }; struct { __VA_ARGS__ } NAME; }

/* A fake UAR page: the MMIO stores record where they went. */
static unsigned char uar_page[4096];
static long last_offset;
static void __raw_writeq(u64 v, volatile void *addr)
{
	last_offset = (unsigned char *)addr - uar_page;
	memcpy((void *)addr, &v, sizeof(v));
}
static void __raw_writel(u32 v, volatile void *addr)
{
	last_offset = (unsigned char *)addr - uar_page;
	memcpy((void *)addr, &v, sizeof(v));
}

/* Just the members the lifted functions touch. */
struct mlx5_core_cq {
	u32 cqn;
	u32 cons_index;
	__be32 *set_ci_db;
	__be32 *arm_db;
	int arm_sn;
};
struct mlx5_frag_buf_ctrl {
	u32 sz_m1;
	u8 log_sz;
};
struct mlx5_eq {
	struct mlx5_frag_buf_ctrl fbc;
	__be32 __iomem *doorbell;
	u32 cons_index;
	u8 eqn;
};
struct mlx5_ib_cq {
	struct { int cqe; } ibcq;
	struct { int cqe_sz; } mcq;
};

static unsigned char queue_buf[1024 * 64];
static void *mlx5_frag_buf_get_wqe(struct mlx5_frag_buf_ctrl *fbc, u32 ix)
{
	(void)fbc;
	return queue_buf + (size_t)ix * 64;
}
static void *get_cqe(struct mlx5_ib_cq *cq, int n)
{
	(void)cq;
	return queue_buf + (size_t)n * 64;
}

static uint64_t prng_state = 0x6b65726eu; /* "kern" */
static uint64_t rnd(void)
{
	uint64_t z = (prng_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}
static void hex(const void *p, size_t n)
{
	const unsigned char *b = p;

	putchar(' ');
	for (size_t i = 0; i < n; i++)
		printf("%02x", b[i]);
}
