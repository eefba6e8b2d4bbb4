// SPDX-License-Identifier: GPL-2.0
/*
 * Stand-ins for the kernel environment of the mlx5 command-layer
 * definitions that rust/mlx5-prm/tests/pci_commands.rs checks against.
 *
 * The test generates one C file: this header; then
 * include/linux/mlx5/mlx5_ifc.h of the Linux tree, #included as it is; then
 * definitions lifted verbatim from device.h, driver.h, qp.h,
 * rdma/ib_verbs.h, mlx5_core's cmd.c / pagealloc.c and mlx5_ib's qp.c (the
 * MLX5_SET family of macros, the command queue and initialization segment
 * structs, status and QP state enums, and a few small static functions);
 * then the stand-ins that need those structs
 * (ifc_shim_post.h) and a main() that prints what the test compares.
 * Nothing from the kernel is stored in this repository.
 */

#include <endian.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
typedef int32_t s32;
typedef uint16_t __be16;
typedef uint32_t __be32;
typedef uint64_t __be64;
typedef uint64_t dma_addr_t;

#define __packed __attribute__((packed))
#define __iomem
#define __force
#define BIT(n) (1UL << (n))
#define BIT_ULL(n) (1ULL << (n))
#define DECLARE_FLEX_ARRAY(TYPE, NAME) \
	struct { struct { } __empty_##NAME; TYPE NAME[]; }
#define likely(x) (x)
#define unlikely(x) (x)
#define struct_group(NAME, ...) \
	union { struct { __VA_ARGS__ }; struct { __VA_ARGS__ } NAME; }

/* The layout macros' compile-time checks; the test checks at run time. */
#define BUILD_BUG_ON(cond) do { } while (0)

#define cpu_to_be16(x) htobe16(x)
#define cpu_to_be32(x) htobe32(x)
#define cpu_to_be64(x) htobe64(x)
#define be16_to_cpu(x) be16toh(x)
#define be32_to_cpu(x) be32toh(x)
#define be64_to_cpu(x) be64toh(x)

#define min_t(type, a, b) ((type)(a) < (type)(b) ? (type)(a) : (type)(b))
#define DIV_ROUND_UP(n, d) (((n) + (d) - 1) / (d))
#define pr_warn(...) do { } while (0)

/* MMIO reads of the fake initialization segment. */
static u32 ioread32be(const volatile void *addr)
{
	u32 v;

	memcpy(&v, (const void *)addr, sizeof(v));
	return be32toh(v);
}

static uint64_t prng_state = 0x69666373u; /* "ifcs" */
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

/* Stores v big-endian in the n bytes at p (n at most 8). */
static void put_be(void *p, size_t n, uint64_t v)
{
	unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		b[n - 1 - i] = (unsigned char)(v >> (8 * i));
}

/* A buffer big enough for every layout the test prints (set_hca_cap_in). */
static unsigned char buf[0x2000] __attribute__((aligned(8)));
