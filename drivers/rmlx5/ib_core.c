// SPDX-License-Identifier: GPL-2.0
/*
 * rmlx5 as an ib_core device: one struct ib_device per software HCA and per
 * ConnectX function that is a verbs device, registered as rmlx5_<n>, so
 * kernel ULPs use the generic ib_* API on it.
 *
 * This file is the ib_device_ops table and the translation between ib_core's
 * structures and the rmlx5_ib_* C ABI (include/rdma/rmlx5_ib.h), which the
 * Rust crate implements (ulp.rs) and which rmlx5's own ULP API exports too.
 * Every object made here is one of those Rust objects underneath, and every
 * decision (argument checks, limits, the QP state machine, the queues) is
 * taken there. ib_core's structures have no Rust bindings for an
 * out-of-tree module and their layout depends on the kernel configuration,
 * so they are read and written only here, where the C compiler checks them;
 * the Rust crate never sees an ib_* pointer. The constants both sides share
 * are checked equal at build time below.
 *
 * What is left out, and what a ULP sees instead: UC, XRC, SRQ and QP0
 * (-EOPNOTSUPP from create_qp), the GSI QP on InfiniBand ports (which
 * advertise no MAD, CM or SA capability, so ib_mad, ib_cm and ib_sa leave
 * them alone; RoCE ports have QP1 and MADs), inline data (max_inline_data
 * 0, IB_SEND_INLINE refused), integrity MRs. User objects
 * (ib_uverbs with mlx5_ib's ABI: udata set) are ib_user.c's, on kernels
 * with CONFIG_INFINIBAND_USER_ACCESS. Fast registration (alloc_mr, map_mr_sg, IB_WR_REG_MR) and
 * IB_WR_LOCAL_INV are UMR WQEs on the QP, executed by the HCA in order.
 *
 * Addressing: the port is InfiniBand, one GID (fe80::/64 + the port GUID),
 * one P_Key (0xffff). A software HCA rmlx5_<n> has LID n + 1 (LID 0 is not
 * a valid unicast LID; the rmlx5_ib ABI names it n) and no DMA device, so
 * ib_dma_map_*() return direct-map addresses (ib_uses_virt_dma), which the
 * DMA MR of each PD (get_dma_mr, its local_dma_lkey) covers. A ConnectX
 * function has its port's LID, as the rmlx5_ib ABI reports it, and the PCI
 * device as DMA device: ib_dma_map_*() return bus addresses, which its DMA
 * MR (a PA key over the whole bus space) covers. Fast registration is
 * advertised only where the device has it (max_fast_reg_pages).
 */
#include <linux/if_ether.h>
#include <linux/irq_poll.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/netdevice.h>
#include <linux/pci.h>
#include <linux/spinlock.h>
#include <linux/xarray.h>
#include <net/net_namespace.h>
#include <rdma/ib_addr.h>
#include <rdma/ib_cache.h>
#include <rdma/ib_mad.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_netlink.h>
#include <rdma/rmlx5_ib.h>

#include "ib_core.h"
#include "ib_priv.h"
#include "rmlx5_shim.h"

/* In the Rust crate (ulp.rs), not exported: ib_core's event handler slot. */
typedef void (*rmlx5_ibc_event_fn)(int dev, u32 event_type, u32 element,
				   void *context);
int rmlx5_ibc_set_event_handler(int index, rmlx5_ibc_event_fn handler,
				void *context);

/* The values the rmlx5_ib ABI shares with ib_verbs.h, checked once. */
static_assert(RMLX5_IB_WR_RDMA_WRITE == IB_WR_RDMA_WRITE);
static_assert(RMLX5_IB_WR_RDMA_WRITE_WITH_IMM == IB_WR_RDMA_WRITE_WITH_IMM);
static_assert(RMLX5_IB_WR_SEND == IB_WR_SEND);
static_assert(RMLX5_IB_WR_SEND_WITH_IMM == IB_WR_SEND_WITH_IMM);
static_assert(RMLX5_IB_WR_RDMA_READ == IB_WR_RDMA_READ);
static_assert(RMLX5_IB_WR_ATOMIC_CMP_AND_SWP == IB_WR_ATOMIC_CMP_AND_SWP);
static_assert(RMLX5_IB_WR_ATOMIC_FETCH_AND_ADD == IB_WR_ATOMIC_FETCH_AND_ADD);
static_assert(RMLX5_IB_WR_MASKED_ATOMIC_CMP_AND_SWP == IB_WR_MASKED_ATOMIC_CMP_AND_SWP);
static_assert(RMLX5_IB_WR_MASKED_ATOMIC_FETCH_AND_ADD == IB_WR_MASKED_ATOMIC_FETCH_AND_ADD);
static_assert(RMLX5_IB_WR_LOCAL_INV == IB_WR_LOCAL_INV);
static_assert(RMLX5_IB_WR_SEND_WITH_INV == IB_WR_SEND_WITH_INV);
static_assert(RMLX5_IB_WC_WITH_INVALIDATE == IB_WC_WITH_INVALIDATE);
static_assert(RMLX5_IB_WR_REG_MR == IB_WR_REG_MR);
static_assert(RMLX5_IB_WC_LOCAL_INV == IB_WC_LOCAL_INV);
static_assert(RMLX5_IB_WC_REG_MR == IB_WC_REG_MR);
static_assert(RMLX5_IB_SEND_FENCE == IB_SEND_FENCE);
static_assert(RMLX5_IB_SEND_SIGNALED == IB_SEND_SIGNALED);
static_assert(RMLX5_IB_SEND_SOLICITED == IB_SEND_SOLICITED);
static_assert(RMLX5_IB_WC_SUCCESS == IB_WC_SUCCESS);
static_assert(RMLX5_IB_WC_LOC_LEN_ERR == IB_WC_LOC_LEN_ERR);
static_assert(RMLX5_IB_WC_LOC_QP_OP_ERR == IB_WC_LOC_QP_OP_ERR);
static_assert(RMLX5_IB_WC_LOC_PROT_ERR == IB_WC_LOC_PROT_ERR);
static_assert(RMLX5_IB_WC_WR_FLUSH_ERR == IB_WC_WR_FLUSH_ERR);
static_assert(RMLX5_IB_WC_LOC_ACCESS_ERR == IB_WC_LOC_ACCESS_ERR);
static_assert(RMLX5_IB_WC_REM_ACCESS_ERR == IB_WC_REM_ACCESS_ERR);
static_assert(RMLX5_IB_WC_REM_OP_ERR == IB_WC_REM_OP_ERR);
static_assert(RMLX5_IB_WC_RETRY_EXC_ERR == IB_WC_RETRY_EXC_ERR);
static_assert(RMLX5_IB_WC_RNR_RETRY_EXC_ERR == IB_WC_RNR_RETRY_EXC_ERR);
static_assert(RMLX5_IB_WC_SEND == IB_WC_SEND);
static_assert(RMLX5_IB_WC_RDMA_WRITE == IB_WC_RDMA_WRITE);
static_assert(RMLX5_IB_WC_RDMA_READ == IB_WC_RDMA_READ);
static_assert(RMLX5_IB_WC_COMP_SWAP == IB_WC_COMP_SWAP);
static_assert(RMLX5_IB_WC_FETCH_ADD == IB_WC_FETCH_ADD);
static_assert(RMLX5_IB_WC_MASKED_COMP_SWAP == IB_WC_MASKED_COMP_SWAP);
static_assert(RMLX5_IB_WC_MASKED_FETCH_ADD == IB_WC_MASKED_FETCH_ADD);
static_assert(RMLX5_IB_WC_RECV == IB_WC_RECV);
static_assert(RMLX5_IB_WC_RECV_RDMA_WITH_IMM == IB_WC_RECV_RDMA_WITH_IMM);
static_assert(RMLX5_IB_WC_WITH_IMM == IB_WC_WITH_IMM);
static_assert(RMLX5_IB_CQ_SOLICITED == IB_CQ_SOLICITED);
static_assert(RMLX5_IB_CQ_NEXT_COMP == IB_CQ_NEXT_COMP);
static_assert(RMLX5_IB_CQ_REPORT_MISSED_EVENTS == IB_CQ_REPORT_MISSED_EVENTS);
static_assert(RMLX5_IB_ACCESS_LOCAL_WRITE == IB_ACCESS_LOCAL_WRITE);
static_assert(RMLX5_IB_ACCESS_REMOTE_WRITE == IB_ACCESS_REMOTE_WRITE);
static_assert(RMLX5_IB_ACCESS_REMOTE_READ == IB_ACCESS_REMOTE_READ);
static_assert(RMLX5_IB_ACCESS_REMOTE_ATOMIC == IB_ACCESS_REMOTE_ATOMIC);
static_assert(RMLX5_IB_QPS_RESET == IB_QPS_RESET);
static_assert(RMLX5_IB_QPS_ERR == IB_QPS_ERR);
static_assert(RMLX5_IB_QP_STATE == IB_QP_STATE);
static_assert(RMLX5_IB_QP_CUR_STATE == IB_QP_CUR_STATE);
static_assert(RMLX5_IB_QP_ACCESS_FLAGS == IB_QP_ACCESS_FLAGS);
static_assert(RMLX5_IB_QP_PKEY_INDEX == IB_QP_PKEY_INDEX);
static_assert(RMLX5_IB_QP_PORT == IB_QP_PORT);
static_assert(RMLX5_IB_QP_AV == IB_QP_AV);
static_assert(RMLX5_IB_QP_PATH_MTU == IB_QP_PATH_MTU);
static_assert(RMLX5_IB_QP_TIMEOUT == IB_QP_TIMEOUT);
static_assert(RMLX5_IB_QP_RETRY_CNT == IB_QP_RETRY_CNT);
static_assert(RMLX5_IB_QP_RNR_RETRY == IB_QP_RNR_RETRY);
static_assert(RMLX5_IB_QP_RQ_PSN == IB_QP_RQ_PSN);
static_assert(RMLX5_IB_QP_MAX_QP_RD_ATOMIC == IB_QP_MAX_QP_RD_ATOMIC);
static_assert(RMLX5_IB_QP_MIN_RNR_TIMER == IB_QP_MIN_RNR_TIMER);
static_assert(RMLX5_IB_QP_SQ_PSN == IB_QP_SQ_PSN);
static_assert(RMLX5_IB_QP_MAX_DEST_RD_ATOMIC == IB_QP_MAX_DEST_RD_ATOMIC);
static_assert(RMLX5_IB_QP_DEST_QPN == IB_QP_DEST_QPN);
static_assert(RMLX5_IB_QP_QKEY == IB_QP_QKEY);
static_assert(RMLX5_IB_WC_GRH == IB_WC_GRH);
static_assert(RMLX5_IB_WC_WITH_NETWORK_HDR_TYPE == IB_WC_WITH_NETWORK_HDR_TYPE);
static_assert(RMLX5_IB_NETWORK_IB == RDMA_NETWORK_IB);
static_assert(RMLX5_IB_NETWORK_ROCE_V1 == RDMA_NETWORK_ROCE_V1);
static_assert(RMLX5_IB_NETWORK_IPV4 == RDMA_NETWORK_IPV4);
static_assert(RMLX5_IB_NETWORK_IPV6 == RDMA_NETWORK_IPV6);
/* SGE lists are handed over as they are. */
static_assert(sizeof(struct rmlx5_ib_sge) == sizeof(struct ib_sge));
static_assert(offsetof(struct rmlx5_ib_sge, addr) == offsetof(struct ib_sge, addr));
static_assert(offsetof(struct rmlx5_ib_sge, length) == offsetof(struct ib_sge, length));
static_assert(offsetof(struct rmlx5_ib_sge, lkey) == offsetof(struct ib_sge, lkey));

/* The modify-QP attributes an RC QP of rmlx5 takes. */
#define RMLX5_IBC_QP_MASK                                                    \
	(IB_QP_STATE | IB_QP_CUR_STATE | IB_QP_ACCESS_FLAGS |                \
	 IB_QP_PKEY_INDEX | IB_QP_PORT | IB_QP_AV | IB_QP_PATH_MTU |         \
	 IB_QP_TIMEOUT | IB_QP_RETRY_CNT | IB_QP_RNR_RETRY | IB_QP_RQ_PSN |  \
	 IB_QP_MAX_QP_RD_ATOMIC | IB_QP_MIN_RNR_TIMER | IB_QP_SQ_PSN |       \
	 IB_QP_MAX_DEST_RD_ATOMIC | IB_QP_DEST_QPN)
/* And what a UD or GSI QP takes (ib_modify_qp_is_ok checks which when). */
#define RMLX5_IBC_UD_QP_MASK                                                 \
	(IB_QP_STATE | IB_QP_CUR_STATE | IB_QP_PKEY_INDEX | IB_QP_PORT |     \
	 IB_QP_QKEY | IB_QP_SQ_PSN)

/* In the Rust crate (ulp.rs), for this file only: the port's link layer
 * and GID table in the device. */
int rmlx5_ibc_set_port(int index, int roce, u32 mtu);
int rmlx5_ibc_set_gid(int index, u32 gid_index, const u8 *gid, int roce_v2,
		      const u8 *mac);

/* Whether user objects (ib_user.c) exist on this kernel. */
#define RMLX5_IBC_USER IS_ENABLED(CONFIG_INFINIBAND_USER_ACCESS)

/* RoCE ports: at most this many GIDs (ib_core fills them from the netdev). */
#define RMLX5_IBC_ROCE_GIDS 16

static char *roce_netdevs;
module_param(roce_netdevs, charp, 0444);
MODULE_PARM_DESC(roce_netdevs,
		 "Comma-separated netdev names: rmlx5_<n> becomes a RoCE device on the n-th (in any network namespace); an empty or missing name keeps rmlx5_<n> InfiniBand");

static unsigned int link_hcas;
module_param(link_hcas, uint, 0444);
MODULE_PARM_DESC(link_hcas,
		 "The last link_hcas software HCAs are not registered at load: each becomes a RoCE device when `rdma link add <name> type rmlx5 netdev <netdev>` names it, as rxe's and siw's devices are made (default 0)");

/*
 * Registered devices. The table changes under rmlx5_ibc_lock, which the
 * netdev notifier (under the RTNL) and the GID lookup of modify_qp take to
 * read it; a device leaves the table before it is unregistered.
 */
static DEFINE_MUTEX(rmlx5_ibc_lock);
static struct rmlx5_ibc_dev *rmlx5_ibc_devs[RMLX5_IBC_MAX_DEVS];
static unsigned int rmlx5_ibc_nr;
static bool rmlx5_ibc_notifier;
/* Software HCAs (rmlx5_ibc_register's nr), the last link_hcas of which
 * wait for `rdma link add`; and whether the link type is registered. */
static unsigned int rmlx5_ibc_soft;
static bool rmlx5_ibc_linked;
static struct rdma_link_ops rmlx5_ibc_link_ops;

/*
 * The identity rmlx5's own uverbs device reports for the same HCA
 * (uverbs/commands.rs, query_device): one device, one name in both views.
 */
#define RMLX5_IBC_FW_VER ((1ULL << 32) | (6ULL << 16))
#define RMLX5_IBC_VENDOR_ID 0x02c9

static __be64 rmlx5_ibc_guid(int index)
{
	return cpu_to_be64(0x0002c90300000000ULL | (u64)index);
}

static void rmlx5_ibc_get_dev_fw_str(struct ib_device *ibdev, char *str)
{
	u64 fw = ibdev->attrs.fw_ver;

	snprintf(str, IB_FW_VERSION_NAME_MAX, "%llu.%llu.%llu", fw >> 32,
		 (fw >> 16) & 0xffff, fw & 0xffff);
}

/* Device and port queries. */

static int rmlx5_ibc_query_device(struct ib_device *ibdev,
				  struct ib_device_attr *props,
				  struct ib_udata *udata)
{
	struct rmlx5_ib_device_attr a;
	int err;

	if (udata && !RMLX5_IBC_USER && (udata->inlen || udata->outlen))
		return -EINVAL;
	err = rmlx5_ib_query_device(to_dev(ibdev)->index, &a);
	if (err)
		return err;
	memset(props, 0, sizeof(*props));
	props->sys_image_guid = ibdev->node_guid;
	props->fw_ver = RMLX5_IBC_FW_VER;
	props->vendor_id = RMLX5_IBC_VENDOR_ID;
	/* A function's PCI device ID; no part for a software HCA (see
	 * DeviceInfo::part_id). */
	props->vendor_part_id = to_dev(ibdev)->pci ?
		to_pci_dev(ibdev->dev.parent)->device : 0;
	props->max_mr_size = a.max_mr_size;
	props->page_size_cap = PAGE_SIZE;
	props->max_qp = a.max_qp;
	props->max_qp_wr = a.max_qp_wr;
	props->device_cap_flags = IB_DEVICE_RC_RNR_NAK_GEN;
	if (a.max_fast_reg_pages) {
		props->device_cap_flags |= IB_DEVICE_MEM_MGT_EXTENSIONS;
		props->max_fast_reg_page_list_len =
			min_t(u32, a.max_fast_reg_pages, RMLX5_IBC_MAX_FAST_PAGES);
	}
	props->max_send_sge = a.max_sge;
	props->max_recv_sge = a.max_sge;
	props->max_sge_rd = a.max_sge;
	props->max_cq = a.max_cq;
	props->max_cqe = min_t(u32, a.max_cqe, RMLX5_IBC_MAX_CQ_ENTRIES) - 1;
	props->max_mr = a.max_mr;
	props->max_pd = a.max_pd;
	props->max_qp_rd_atom = a.max_qp_rd_atom;
	props->max_qp_init_rd_atom = a.max_qp_rd_atom;
	props->max_res_rd_atom = a.max_qp_rd_atom * a.max_qp;
	props->atomic_cap = IB_ATOMIC_HCA;
	props->masked_atomic_cap = IB_ATOMIC_HCA;
	props->max_pkeys = 1;
	props->local_ca_ack_delay = 16;
	/* A device `rdma link add` made, `rdma link delete` may remove. */
	if (to_dev(ibdev)->link)
		props->kernel_cap_flags |= IBK_ALLOW_USER_UNREG;
#if RMLX5_IBC_USER
	if (udata)
		return rmlx5_ibc_user_query_device(ibdev, udata);
#endif
	return 0;
}

static int rmlx5_ibc_query_port(struct ib_device *ibdev, u32 port,
				struct ib_port_attr *props)
{
	struct rmlx5_ib_device_attr a;
	int err;

	if (port != 1)
		return -EINVAL;
	err = rmlx5_ib_query_device(to_dev(ibdev)->index, &a);
	if (err)
		return err;
	if (to_dev(ibdev)->roce) {
		struct net_device *ndev = ib_device_get_netdev(ibdev, 1);
		bool up = ndev && netif_running(ndev) && netif_carrier_ok(ndev);

		/* The port follows its netdev, as for any RoCE device. */
		props->state = up ? IB_PORT_ACTIVE : IB_PORT_DOWN;
		props->phys_state = up ? IB_PORT_PHYS_STATE_LINK_UP :
			IB_PORT_PHYS_STATE_DISABLED;
		props->max_mtu = IB_MTU_4096;
		props->active_mtu = ndev ? iboe_get_mtu(ndev->mtu) : IB_MTU_1024;
		props->gid_tbl_len = RMLX5_IBC_ROCE_GIDS;
		props->ip_gids = true;
		props->pkey_tbl_len = 1;
		props->max_msg_sz = 1U << 30;
		props->max_vl_num = 1;
		props->active_width = IB_WIDTH_4X;
		props->active_speed = IB_SPEED_EDR;
		dev_put(ndev);
		return 0;
	}
	/* ib_core cleared *props; the subnet prefix it fills from the GID. */
	/* A function's port as its firmware reports it (INIT and ARMED
	 * while an SM brings it up). */
	props->state = a.port_state >= IB_PORT_DOWN && a.port_state <= IB_PORT_ACTIVE ?
		a.port_state : IB_PORT_DOWN;
	props->phys_state = props->state == IB_PORT_ACTIVE ?
		IB_PORT_PHYS_STATE_LINK_UP : IB_PORT_PHYS_STATE_DISABLED;
	props->max_mtu = IB_MTU_4096;
	props->active_mtu = IB_MTU_4096;
	props->gid_tbl_len = 1;
	props->pkey_tbl_len = 1;
	props->max_msg_sz = 1U << 30;
	props->lid = to_dev(ibdev)->pci ? a.lid : a.lid + 1;
	props->sm_lid = a.sm_lid;
	props->lmc = 0;
	props->max_vl_num = 1;
	props->active_width = IB_WIDTH_4X;
	props->active_speed = IB_SPEED_EDR;
	return 0;
}

static int rmlx5_ibc_get_port_immutable(struct ib_device *ibdev, u32 port,
					struct ib_port_immutable *imm)
{
	struct ib_port_attr attr = {};
	int err;

	/* Our own query: ib_core's needs the immutable data made here. */
	err = rmlx5_ibc_query_port(ibdev, port, &attr);
	if (err)
		return err;
	imm->pkey_tbl_len = attr.pkey_tbl_len;
	imm->gid_tbl_len = attr.gid_tbl_len;
	/*
	 * A RoCE port (v1 and v2 GIDs) has the GSI QP, so ib_mad opens QP1
	 * on it and ib_cm and rdma_cm connect through it (no SMI: RoCE has
	 * no QP0). An InfiniBand port has neither QP0 nor an SM to answer
	 * SA queries: no MAD, CM or SA capability, so those clients leave it
	 * alone rather than fail.
	 */
	if (to_dev(ibdev)->roce) {
		imm->core_cap_flags = RDMA_CORE_PORT_IBA_ROCE |
			RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP;
		imm->max_mad_size = IB_MGMT_MAD_SIZE;
	} else {
		imm->core_cap_flags = RDMA_CORE_CAP_PROT_IB;
		imm->max_mad_size = 0;
	}
	return 0;
}

static int rmlx5_ibc_query_gid(struct ib_device *ibdev, u32 port, int index,
			       union ib_gid *gid)
{
	/* A RoCE port's GIDs are ib_core's software table. */
	if (port != 1 || index != 0 || to_dev(ibdev)->roce)
		return -EINVAL;
	if (to_dev(ibdev)->pci) {
		struct rmlx5_ib_device_attr a;
		int err = rmlx5_ib_query_device(to_dev(ibdev)->index, &a);

		if (err)
			return err;
		gid->global.subnet_prefix = cpu_to_be64(a.subnet_prefix);
	} else {
		gid->global.subnet_prefix = cpu_to_be64(0xfe80000000000000ULL);
	}
	gid->global.interface_id = ibdev->node_guid;
	return 0;
}

static int rmlx5_ibc_query_pkey(struct ib_device *ibdev, u32 port, u16 index,
				u16 *pkey)
{
	if (port != 1 || index != 0)
		return -EINVAL;
	*pkey = 0xffff;
	return 0;
}

/* Protection domains and memory regions. */

static int rmlx5_ibc_alloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	int err;

	if (udata && !RMLX5_IBC_USER)
		return -EOPNOTSUPP;
	err = rmlx5_ib_alloc_pd(to_dev(ibpd->device)->index, &to_pd(ibpd)->pd);
#if RMLX5_IBC_USER
	if (!err && udata) {
		err = rmlx5_ibc_user_alloc_pd(ibpd, udata);
		if (err)
			rmlx5_ib_dealloc_pd(to_pd(ibpd)->pd);
	}
#endif
	return err;
}

static int rmlx5_ibc_dealloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	return rmlx5_ib_dealloc_pd(to_pd(ibpd)->pd);
}

static struct ib_mr *rmlx5_ibc_get_dma_mr(struct ib_pd *ibpd, int access)
{
	struct rmlx5_ibc_mr *mr;
	u32 key;
	int err;

	/* Optional flags (relaxed ordering) may be ignored; others not. */
	access &= ~IB_ACCESS_OPTIONAL;
	if (access & ~(IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE |
		       IB_ACCESS_REMOTE_READ | IB_ACCESS_REMOTE_ATOMIC))
		return ERR_PTR(-EOPNOTSUPP);
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	err = rmlx5_ib_get_dma_mr(to_pd(ibpd)->pd, access, &mr->mr, &key);
	if (err) {
		kfree(mr);
		return ERR_PTR(err);
	}
	mr->ibmr.lkey = key;
	mr->ibmr.rkey = key;
	return &mr->ibmr;
}

static struct ib_mr *rmlx5_ibc_reg_user_mr(struct ib_pd *ibpd, u64 start,
					   u64 length, u64 virt_addr,
					   int access, struct ib_dmah *dmah,
					   struct ib_udata *udata)
{
#if RMLX5_IBC_USER
	if (dmah)
		return ERR_PTR(-EOPNOTSUPP);
	return rmlx5_ibc_user_reg_mr(ibpd, start, length, virt_addr, access,
				     udata);
#else
	return ERR_PTR(-EOPNOTSUPP);
#endif
}

static struct ib_mr *rmlx5_ibc_alloc_mr(struct ib_pd *ibpd,
					enum ib_mr_type type, u32 max_num_sg)
{
	struct rmlx5_ibc_mr *mr;
	u32 key;
	int err;

	if (type != IB_MR_TYPE_MEM_REG)
		return ERR_PTR(-EOPNOTSUPP);
	if (!max_num_sg || max_num_sg > RMLX5_IBC_MAX_FAST_PAGES)
		return ERR_PTR(-EINVAL);
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	err = rmlx5_ib_alloc_mr(to_pd(ibpd)->pd, max_num_sg, &mr->mr, &key);
	if (err) {
		kfree(mr);
		return ERR_PTR(err);
	}
	mr->max_pages = max_num_sg;
	mr->ibmr.lkey = key;
	mr->ibmr.rkey = key;
	return &mr->ibmr;
}

/* ib_sg_to_pages() callback: one page address into the MR's page list. */
static int rmlx5_ibc_set_page(struct ib_mr *ibmr, u64 addr)
{
	struct rmlx5_ibc_mr *mr = to_mr(ibmr);
	int err;

	if (mr->npages >= mr->max_pages)
		return -ENOMEM;
	err = rmlx5_ib_mr_set_page(mr->mr, mr->npages, addr);
	if (err) {
		mr->set_page_err = err;
		return err;
	}
	mr->npages++;
	return 0;
}

static int rmlx5_ibc_map_mr_sg(struct ib_mr *ibmr, struct scatterlist *sg,
			       int sg_nents, unsigned int *sg_offset)
{
	struct rmlx5_ibc_mr *mr = to_mr(ibmr);
	int n, err;

	mr->npages = 0;
	mr->set_page_err = 0;
	n = ib_sg_to_pages(ibmr, sg, sg_nents, sg_offset, rmlx5_ibc_set_page);
	if (n <= 0)
		return mr->set_page_err ? mr->set_page_err : n;
	err = rmlx5_ib_mr_set_mapping(mr->mr, ibmr->iova, ibmr->length,
				      ilog2(ibmr->page_size), mr->npages);
	return err ? err : n;
}

static int rmlx5_ibc_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata)
{
	struct rmlx5_ibc_mr *mr = to_mr(ibmr);
	int err;

#if RMLX5_IBC_USER
	if (mr->umr)
		return rmlx5_ibc_user_dereg_mr(mr);
#endif
	err = rmlx5_ib_dereg_mr(mr->mr);
	if (!err)
		kfree(mr);
	return err;
}

/* Completion queues. */

/* BH context, from rmlx5's dispatcher; the CQ is not destroyed meanwhile. */
static void rmlx5_ibc_comp(struct rmlx5_ib_cq *cq, void *context)
{
	struct ib_cq *ibcq = context;
	void (*handler)(struct ib_cq *cq, void *cq_context);

	handler = READ_ONCE(ibcq->comp_handler);
	if (handler)
		handler(ibcq, ibcq->cq_context);
}

static int rmlx5_ibc_create_cq(struct ib_cq *ibcq,
			       const struct ib_cq_init_attr *attr,
			       struct uverbs_attr_bundle *attrs)
{
	struct rmlx5_ibc_dev *dev = to_dev(ibcq->device);
	struct rmlx5_ibc_cq *cq = to_cq(ibcq);
	void *old;
	int err;

	if (attrs || attr->flags)
		return -EOPNOTSUPP;
	err = rmlx5_ib_create_cq(dev->index, rmlx5_ibc_comp, ibcq, attr->cqe,
				 attr->comp_vector, &cq->cq);
	if (err)
		return err;
	cq->cqn = rmlx5_ib_cq_num(cq->cq);
	ibcq->cqe = attr->cqe;
	/* A stale entry of a destroyed CQ with the same number is replaced. */
	old = xa_store_bh(&dev->cqs, cq->cqn, cq, GFP_KERNEL);
	if (xa_is_err(old)) {
		rmlx5_ib_destroy_cq(cq->cq);
		return xa_err(old);
	}
	return 0;
}

static int rmlx5_ibc_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata)
{
	struct rmlx5_ibc_dev *dev = to_dev(ibcq->device);
	struct rmlx5_ibc_cq *cq = to_cq(ibcq);
	int err;

#if RMLX5_IBC_USER
	if (cq->ucq)
		return rmlx5_ibc_user_destroy_cq(cq);
#endif
	/*
	 * A CQ that ib_core polls in softirq (ib_alloc_cq, IB_POLL_SOFTIRQ):
	 * ib_free_cq's irq_poll_disable() returns once ib_poll_handler has
	 * called irq_poll_complete(), but the handler then still re-arms
	 * the CQ (ib_req_notify_cq), which would reach the CQ freed below.
	 * The handler runs in softirq, an RCU read-side section: a grace
	 * period lets it finish first. Kernel CQs are destroyed rarely (a
	 * ULP's teardown), so the wait costs little where it is paid.
	 */
	if (ibcq->poll_ctx == IB_POLL_SOFTIRQ && ibcq->iop.poll)
		synchronize_rcu();
	err = rmlx5_ib_destroy_cq(cq->cq);
	if (err)
		return err;
	spin_lock_bh(&dev->ev_lock);
	xa_cmpxchg_bh(&dev->cqs, cq->cqn, cq, NULL, GFP_ATOMIC);
	spin_unlock_bh(&dev->ev_lock);
	return 0;
}

static int rmlx5_ibc_poll_cq(struct ib_cq *ibcq, int num, struct ib_wc *wc)
{
	struct rmlx5_ibc_dev *dev = to_dev(ibcq->device);
	struct rmlx5_ib_wc w[8];
	int done = 0;

	/* A CQ of rdma-core's provider is polled in its process. */
	if (!to_cq(ibcq)->cq)
		return -EOPNOTSUPP;
	while (done < num) {
		int want = min_t(int, num - done, ARRAY_SIZE(w));
		int n = rmlx5_ib_poll_cq(to_cq(ibcq)->cq, want, w);
		int i;

		if (n < 0)
			return done ? done : n;
		for (i = 0; i < n; i++) {
			/* Only the pointer: a QP is not read here, since its
			 * owner may destroy it while CQEs of it remain. */
			struct rmlx5_ibc_qp *qp = xa_load(&dev->qps, w[i].qp_num);

			wc[done + i] = (struct ib_wc){
				.wr_id = w[i].wr_id,
				.status = w[i].status,
				.opcode = w[i].opcode,
				.vendor_err = w[i].vendor_err,
				.byte_len = w[i].byte_len,
				.qp = qp ? &qp->ibqp : NULL,
				.ex.imm_data = w[i].imm_data,
				.src_qp = w[i].src_qp,
				.wc_flags = w[i].wc_flags,
				.slid = w[i].slid,
				.sl = w[i].sl,
				.pkey_index = w[i].pkey_index,
				.network_hdr_type = w[i].network_hdr_type,
				.port_num = 1,
			};
			if (w[i].wc_flags & IB_WC_WITH_INVALIDATE)
				wc[done + i].ex.invalidate_rkey = w[i].imm_data;
		}
		done += n;
		if (n < want)
			break;
	}
	return done;
}

static int rmlx5_ibc_req_notify_cq(struct ib_cq *ibcq,
				   enum ib_cq_notify_flags flags)
{
	/*
	 * As mlx5_ib and rxe read it: solicited-only when the solicited bits
	 * are exactly IB_CQ_SOLICITED, else the next completion (SMC-R arms
	 * with the whole IB_CQ_SOLICITED_MASK).
	 */
	u32 arm = (flags & IB_CQ_SOLICITED_MASK) == IB_CQ_SOLICITED ?
		RMLX5_IB_CQ_SOLICITED : RMLX5_IB_CQ_NEXT_COMP;

	if (!to_cq(ibcq)->cq)
		return -EOPNOTSUPP;
	return rmlx5_ib_req_notify_cq(to_cq(ibcq)->cq,
				      arm | (flags & IB_CQ_REPORT_MISSED_EVENTS));
}

/* Queue pairs. */

static int rmlx5_ibc_create_qp(struct ib_qp *ibqp,
			       struct ib_qp_init_attr *init,
			       struct ib_udata *udata)
{
	struct rmlx5_ibc_dev *dev = to_dev(ibqp->device);
	struct rmlx5_ibc_qp *qp = to_qp(ibqp);
	struct rmlx5_ib_qp_init_attr a = {};
	void *old;
	int err;

#if RMLX5_IBC_USER
	if (udata)
		return rmlx5_ibc_user_create_qp(ibqp, init, udata);
#else
	if (udata)
		return -EOPNOTSUPP;
#endif
	switch (init->qp_type) {
	case IB_QPT_RC:
		a.qp_type = RMLX5_IB_QPT_RC;
		break;
	case IB_QPT_UD:
		a.qp_type = RMLX5_IB_QPT_UD;
		break;
	case IB_QPT_GSI:
		/* ib_mad's QP1, on the port that has one (MAD capability). */
		if (!dev->roce || init->port_num != 1)
			return -EOPNOTSUPP;
		a.qp_type = RMLX5_IB_QPT_GSI;
		break;
	default:
		return -EOPNOTSUPP;
	}
	if (init->srq || init->xrcd || init->rwq_ind_tbl || init->create_flags)
		return -EOPNOTSUPP;
	if (init->cap.max_inline_data || !init->send_cq || !init->recv_cq)
		return -EINVAL;
	a.send_cq = to_cq(init->send_cq)->cq;
	a.recv_cq = to_cq(init->recv_cq)->cq;
	a.max_send_wr = init->cap.max_send_wr;
	a.max_recv_wr = init->cap.max_recv_wr;
	a.max_send_sge = init->cap.max_send_sge;
	a.max_recv_sge = init->cap.max_recv_sge;
	a.sq_sig_all = init->sq_sig_type == IB_SIGNAL_ALL_WR;
	err = rmlx5_ib_create_qp(to_pd(ibqp->pd)->pd, &a, &qp->qp);
	if (err)
		return err;
	qp->qpn = rmlx5_ib_qp_num(qp->qp);
	ibqp->qp_num = init->qp_type == IB_QPT_GSI ? 1 : qp->qpn;
	qp->cap = init->cap;
	qp->sq_sig_type = init->sq_sig_type;
	qp->attr.port_num = 1;
	old = xa_store_bh(&dev->qps, qp->qpn, qp, GFP_KERNEL);
	if (xa_is_err(old)) {
		rmlx5_ib_destroy_qp(qp->qp);
		return xa_err(old);
	}
	return 0;
}

/* The index of the RoCE device whose GID table holds gid, or -EHOSTUNREACH. */
static int rmlx5_ibc_dev_of_gid(const union ib_gid *gid)
{
	static const enum ib_gid_type types[] = {
		IB_GID_TYPE_ROCE, IB_GID_TYPE_ROCE_UDP_ENCAP,
	};
	unsigned int i, t;
	int found = -EHOSTUNREACH;

	mutex_lock(&rmlx5_ibc_lock);
	for (i = 0; i < rmlx5_ibc_nr && found < 0; i++) {
		struct rmlx5_ibc_dev *d = rmlx5_ibc_devs[i];

		if (!d || !d->roce || !d->registered)
			continue;
		for (t = 0; t < ARRAY_SIZE(types); t++) {
			const struct ib_gid_attr *ga =
				rdma_find_gid_by_port(&d->ibdev, gid, types[t], 1, NULL);

			if (!IS_ERR(ga)) {
				rdma_put_gid_attr(ga);
				found = d->index;
				break;
			}
		}
	}
	mutex_unlock(&rmlx5_ibc_lock);
	return found;
}

static int rmlx5_ibc_modify_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr,
			       int mask, struct ib_udata *udata)
{
	struct rmlx5_ibc_qp *qp = to_qp(ibqp);
	/*
	 * Only the fields mask names are read: callers leave the others
	 * uninitialised (ib_mad kmallocs its attributes, rdma_cm fills a
	 * stack copy field by field), and the checks below them would refuse
	 * garbage.
	 */
	struct rmlx5_ib_qp_attr a = {
		.qp_state = mask & IB_QP_STATE ? attr->qp_state : qp->attr.qp_state,
		.cur_qp_state = mask & IB_QP_CUR_STATE ? attr->cur_qp_state : 0,
		.qp_access_flags = mask & IB_QP_ACCESS_FLAGS ? attr->qp_access_flags : 0,
		.path_mtu = mask & IB_QP_PATH_MTU ? attr->path_mtu : 0,
		.dest_qp_num = mask & IB_QP_DEST_QPN ? attr->dest_qp_num : 0,
		.rq_psn = mask & IB_QP_RQ_PSN ? attr->rq_psn : 0,
		.sq_psn = mask & IB_QP_SQ_PSN ? attr->sq_psn : 0,
		.pkey_index = mask & IB_QP_PKEY_INDEX ? attr->pkey_index : 0,
		.port_num = mask & IB_QP_PORT ? attr->port_num : 0,
		.max_rd_atomic = mask & IB_QP_MAX_QP_RD_ATOMIC ? attr->max_rd_atomic : 0,
		.max_dest_rd_atomic = mask & IB_QP_MAX_DEST_RD_ATOMIC ?
			attr->max_dest_rd_atomic : 0,
		.min_rnr_timer = mask & IB_QP_MIN_RNR_TIMER ? attr->min_rnr_timer : 0,
		.timeout = mask & IB_QP_TIMEOUT ? attr->timeout : 0,
		.retry_cnt = mask & IB_QP_RETRY_CNT ? attr->retry_cnt : 0,
		.rnr_retry = mask & IB_QP_RNR_RETRY ? attr->rnr_retry : 0,
		.qkey = mask & IB_QP_QKEY ? attr->qkey : 0,
	};
	bool ud = ibqp->qp_type == IB_QPT_UD || ibqp->qp_type == IB_QPT_GSI;
	int err;

	if (udata && !qp->uqp)
		return -EOPNOTSUPP;
	if (mask & ~(ud ? RMLX5_IBC_UD_QP_MASK : RMLX5_IBC_QP_MASK))
		return -EOPNOTSUPP;
	if ((mask & IB_QP_AV) && to_dev(ibqp->device)->roce) {
		int peer;

		/* The remote device is the one whose GID table holds DGID. */
		if (attr->ah_attr.type != RDMA_AH_ATTR_TYPE_ROCE ||
		    !(rdma_ah_get_ah_flags(&attr->ah_attr) & IB_AH_GRH))
			return -EINVAL;
		peer = rmlx5_ibc_dev_of_gid(&rdma_ah_read_grh(&attr->ah_attr)->dgid);
		if (peer < 0)
			return peer;
		a.dlid = peer;
	} else if (mask & IB_QP_AV) {
		u16 dlid = rdma_ah_get_dlid(&attr->ah_attr);
		bool pci = to_dev(ibqp->device)->pci;

		/* Software HCA rmlx5_<n> has LID n + 1; a function its own, a
		 * unicast LID (below the multicast range). */
		if (attr->ah_attr.type != RDMA_AH_ATTR_TYPE_IB || !dlid ||
		    (!pci && dlid > RMLX5_IBC_MAX_DEVS) ||
		    (pci && dlid >= be16_to_cpu(IB_MULTICAST_LID_BASE)))
			return -EINVAL;
		a.dlid = pci ? dlid : dlid - 1;
	}
#if RMLX5_IBC_USER
	if (qp->uqp)
		err = rmlx5_ibc_user_modify_qp(qp, &a, mask, udata);
	else
#endif
		err = rmlx5_ib_modify_qp(qp->qp, &a, mask);
	if (err)
		return err;
	if (mask & IB_QP_STATE)
		qp->attr.qp_state = attr->qp_state;
	if (mask & IB_QP_ACCESS_FLAGS)
		qp->attr.qp_access_flags = attr->qp_access_flags;
	if (mask & IB_QP_PKEY_INDEX)
		qp->attr.pkey_index = attr->pkey_index;
	if (mask & IB_QP_PORT)
		qp->attr.port_num = attr->port_num;
	if (mask & IB_QP_AV) {
		/* Only what rmlx5 uses, and no GID attribute reference. */
		memset(&qp->attr.ah_attr, 0, sizeof(qp->attr.ah_attr));
		qp->attr.ah_attr.type = attr->ah_attr.type;
		if (attr->ah_attr.type == RDMA_AH_ATTR_TYPE_ROCE) {
			union ib_gid dgid = rdma_ah_read_grh(&attr->ah_attr)->dgid;

			qp->attr.ah_attr.ah_flags = IB_AH_GRH;
			rdma_ah_set_dgid_raw(&qp->attr.ah_attr, dgid.raw);
		} else {
			rdma_ah_set_dlid(&qp->attr.ah_attr,
					 to_dev(ibqp->device)->pci ? a.dlid : a.dlid + 1);
		}
		rdma_ah_set_sl(&qp->attr.ah_attr, rdma_ah_get_sl(&attr->ah_attr));
		rdma_ah_set_port_num(&qp->attr.ah_attr, 1);
	}
	if (mask & IB_QP_PATH_MTU)
		qp->attr.path_mtu = attr->path_mtu;
	if (mask & IB_QP_TIMEOUT)
		qp->attr.timeout = attr->timeout;
	if (mask & IB_QP_RETRY_CNT)
		qp->attr.retry_cnt = attr->retry_cnt;
	if (mask & IB_QP_RNR_RETRY)
		qp->attr.rnr_retry = attr->rnr_retry;
	if (mask & IB_QP_RQ_PSN)
		qp->attr.rq_psn = attr->rq_psn;
	if (mask & IB_QP_MAX_QP_RD_ATOMIC)
		qp->attr.max_rd_atomic = attr->max_rd_atomic;
	if (mask & IB_QP_MIN_RNR_TIMER)
		qp->attr.min_rnr_timer = attr->min_rnr_timer;
	if (mask & IB_QP_SQ_PSN)
		qp->attr.sq_psn = attr->sq_psn;
	if (mask & IB_QP_MAX_DEST_RD_ATOMIC)
		qp->attr.max_dest_rd_atomic = attr->max_dest_rd_atomic;
	if (mask & IB_QP_DEST_QPN)
		qp->attr.dest_qp_num = attr->dest_qp_num;
	if (mask & IB_QP_QKEY)
		qp->attr.qkey = attr->qkey;
	return 0;
}

static int rmlx5_ibc_query_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr,
			      int mask, struct ib_qp_init_attr *init)
{
	struct rmlx5_ibc_qp *qp = to_qp(ibqp);
	int state;

#if RMLX5_IBC_USER
	if (qp->uqp)
		state = rmlx5_ibc_user_qp_state(qp);
	else
#endif
		state = rmlx5_ib_query_qp_state(qp->qp);

	if (state < 0)
		return state;
	*attr = qp->attr;
	attr->qp_state = state;
	attr->cur_qp_state = state;
	attr->cap = qp->cap;
	memset(init, 0, sizeof(*init));
	init->qp_type = ibqp->qp_type;
	init->send_cq = ibqp->send_cq;
	init->recv_cq = ibqp->recv_cq;
	init->cap = qp->cap;
	init->sq_sig_type = qp->sq_sig_type;
	init->qp_context = ibqp->qp_context;
	init->event_handler = ibqp->event_handler;
	return 0;
}

static int rmlx5_ibc_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata)
{
	struct rmlx5_ibc_dev *dev = to_dev(ibqp->device);
	struct rmlx5_ibc_qp *qp = to_qp(ibqp);
	int err;

#if RMLX5_IBC_USER
	if (qp->uqp)
		return rmlx5_ibc_user_destroy_qp(qp);
#endif
	err = rmlx5_ib_destroy_qp(qp->qp);
	if (err)
		return err;
	spin_lock_bh(&dev->ev_lock);
	xa_cmpxchg_bh(&dev->qps, qp->qpn, qp, NULL, GFP_ATOMIC);
	spin_unlock_bh(&dev->ev_lock);
	return 0;
}

static int rmlx5_ibc_post_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
			       const struct ib_send_wr **bad_wr)
{
	struct rmlx5_ib_qp *qp = to_qp(ibqp)->qp;
	int err = 0;

	/* A QP of rdma-core's provider is posted to in its process. */
	if (!qp) {
		*bad_wr = wr;
		return -EOPNOTSUPP;
	}
	for (; wr; wr = wr->next) {
		struct rmlx5_ib_send_wr w = {
			.wr_id = wr->wr_id,
			.sg_list = (const struct rmlx5_ib_sge *)wr->sg_list,
			.num_sge = wr->num_sge,
			.opcode = wr->opcode,
			.send_flags = wr->send_flags,
			.imm_data = wr->ex.imm_data,
		};

		if (wr->send_flags & ~(IB_SEND_FENCE | IB_SEND_SIGNALED |
				       IB_SEND_SOLICITED)) {
			err = -EINVAL;
			break;
		}
		switch (wr->opcode) {
		case IB_WR_SEND:
		case IB_WR_SEND_WITH_IMM:
			if (ibqp->qp_type == IB_QPT_UD ||
			    ibqp->qp_type == IB_QPT_GSI) {
				const struct ib_ud_wr *ud = ud_wr(wr);

				if (!ud->ah || ud->ah->device != ibqp->device) {
					err = -EINVAL;
					break;
				}
				w.av = to_ah(ud->ah)->av;
				w.remote_qpn = ud->remote_qpn;
				w.remote_qkey = ud->remote_qkey;
			}
			break;
		case IB_WR_RDMA_WRITE:
		case IB_WR_RDMA_WRITE_WITH_IMM:
		case IB_WR_RDMA_READ:
			w.remote_addr = rdma_wr(wr)->remote_addr;
			w.rkey = rdma_wr(wr)->rkey;
			break;
		case IB_WR_REG_MR: {
			struct ib_mr *ibmr = reg_wr(wr)->mr;
			struct rmlx5_ibc_mr *mr = to_mr(ibmr);

			/*
			 * The MR's IOVA and length as they are now: a ULP may
			 * change ibmr->iova after ib_map_mr_sg (SMC-R does for
			 * virtually contiguous buffers, RDS zero-bases it).
			 */
			err = rmlx5_ib_mr_set_mapping(mr->mr, ibmr->iova,
						      ibmr->length,
						      ilog2(ibmr->page_size),
						      mr->npages);
			w.mr = mr->mr;
			w.rkey = reg_wr(wr)->key;
			w.access = reg_wr(wr)->access;
			break;
		}
		case IB_WR_LOCAL_INV:
		case IB_WR_SEND_WITH_INV:
			w.rkey = wr->ex.invalidate_rkey;
			break;
		case IB_WR_ATOMIC_CMP_AND_SWP:
		case IB_WR_ATOMIC_FETCH_AND_ADD:
		case IB_WR_MASKED_ATOMIC_CMP_AND_SWP:
		case IB_WR_MASKED_ATOMIC_FETCH_AND_ADD:
			w.remote_addr = atomic_wr(wr)->remote_addr;
			w.rkey = atomic_wr(wr)->rkey;
			w.compare_add = atomic_wr(wr)->compare_add;
			w.swap = atomic_wr(wr)->swap;
			w.compare_add_mask = atomic_wr(wr)->compare_add_mask;
			w.swap_mask = atomic_wr(wr)->swap_mask;
			break;
		default:
			err = -EINVAL;
			break;
		}
		if (!err)
			err = rmlx5_ib_post_send(qp, &w, NULL);
		if (err)
			break;
	}
	if (err)
		*bad_wr = wr;
	return err;
}

static int rmlx5_ibc_post_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
			       const struct ib_recv_wr **bad_wr)
{
	struct rmlx5_ib_qp *qp = to_qp(ibqp)->qp;
	int err = 0;

	if (!qp) {
		*bad_wr = wr;
		return -EOPNOTSUPP;
	}
	for (; wr; wr = wr->next) {
		struct rmlx5_ib_recv_wr w = {
			.wr_id = wr->wr_id,
			.sg_list = (const struct rmlx5_ib_sge *)wr->sg_list,
			.num_sge = wr->num_sge,
		};

		err = rmlx5_ib_post_recv(qp, &w, NULL);
		if (err) {
			*bad_wr = wr;
			break;
		}
	}
	return err;
}

/*
 * Address handles: the address vector is built once, here, as mlx5_ib
 * keeps it in its AH, and copied into every UD send. Called with
 * RDMA_CREATE_AH_SLEEPABLE or without (ib_mad answers MADs from its
 * completion handler): nothing here sleeps or allocates.
 */
static int rmlx5_ibc_create_ah(struct ib_ah *ibah,
			       struct rdma_ah_init_attr *init,
			       struct ib_udata *udata)
{
	struct rmlx5_ibc_dev *dev = to_dev(ibah->device);
	struct rdma_ah_attr *attr = init->ah_attr;
	struct rmlx5_ibc_ah *ah = to_ah(ibah);
	struct rmlx5_ib_ah_attr a = {
		.dlid = rdma_ah_get_dlid(attr),
		.sl = rdma_ah_get_sl(attr),
	};

	if (udata || rdma_ah_get_port_num(attr) != 1)
		return -EINVAL;
	if (dev->roce != (attr->type == RDMA_AH_ATTR_TYPE_ROCE))
		return -EINVAL;
	if (rdma_ah_get_ah_flags(attr) & IB_AH_GRH) {
		const struct ib_global_route *grh = rdma_ah_read_grh(attr);

		memcpy(a.dgid, grh->dgid.raw, sizeof(a.dgid));
		a.flow_label = grh->flow_label;
		a.sgid_index = grh->sgid_index;
		a.hop_limit = grh->hop_limit;
		a.traffic_class = grh->traffic_class;
		a.grh = 1;
	} else if (dev->roce) {
		return -EINVAL;
	}
	if (dev->roce)
		memcpy(a.dmac, attr->roce.dmac, sizeof(a.dmac));
	ah->attr = *attr;
	ah->attr.grh.sgid_attr = NULL;
	return rmlx5_ib_encode_av(dev->index, &a, ah->av);
}

static int rmlx5_ibc_query_ah(struct ib_ah *ibah, struct rdma_ah_attr *attr)
{
	*attr = to_ah(ibah)->attr;
	return 0;
}

static int rmlx5_ibc_destroy_ah(struct ib_ah *ibah, u32 flags)
{
	/* WRs that named it were copied when posted: nothing to wait for. */
	return 0;
}

/*
 * A RoCE port's GID table is ib_core's; the device is told each entry as
 * mlx5_ib does with SET_ROCE_ADDRESS: the GID, its RoCE version and the
 * MAC of its netdev, which is also what datagrams for this port are
 * addressed to.
 */
static int rmlx5_ibc_add_gid(const struct ib_gid_attr *attr, void **context)
{
	u8 mac[ETH_ALEN];
	u16 vlan;
	int err;

	if (attr->port_num != 1)
		return -EINVAL;
	err = rdma_read_gid_l2_fields(attr, &vlan, mac);
	if (err)
		return err;
	/* No VLAN tagging (0xffff: no VLAN): a VLAN netdev's GID is refused. */
	if (vlan != 0xffff)
		return -EOPNOTSUPP;
	return rmlx5_ibc_set_gid(to_dev(attr->device)->index, attr->index,
				 attr->gid.raw,
				 attr->gid_type == IB_GID_TYPE_ROCE_UDP_ENCAP,
				 mac);
}

static int rmlx5_ibc_del_gid(const struct ib_gid_attr *attr, void **context)
{
	return rmlx5_ibc_set_gid(to_dev(attr->device)->index, attr->index,
				 NULL, 0, NULL);
}

/* Asynchronous events: mlx5 event types to ib_event (BH context). */

static void rmlx5_ibc_qp_event(struct rmlx5_ibc_dev *dev, u32 qpn,
			       enum ib_event_type type)
{
	struct rmlx5_ibc_qp *qp;
	struct ib_event ev = { .device = &dev->ibdev, .event = type };

	spin_lock_bh(&dev->ev_lock);
	qp = xa_load(&dev->qps, qpn);
	if (qp && qp->ibqp.event_handler) {
		ev.element.qp = &qp->ibqp;
		qp->ibqp.event_handler(&ev, qp->ibqp.qp_context);
	}
	spin_unlock_bh(&dev->ev_lock);
}

/* The ib_event of an mlx5 QP async event type, or -1 if it is none. */
int rmlx5_ibc_qp_event_type(u8 type)
{
	switch (type) {
	case 0x01: /* MLX5_EVENT_TYPE_PATH_MIG */
		return IB_EVENT_PATH_MIG;
	case 0x02: /* MLX5_EVENT_TYPE_COMM_EST */
		return IB_EVENT_COMM_EST;
	case 0x03: /* MLX5_EVENT_TYPE_SQ_DRAINED */
		return IB_EVENT_SQ_DRAINED;
	case 0x05: /* MLX5_EVENT_TYPE_WQ_CATAS_ERROR */
		return IB_EVENT_QP_FATAL;
	case 0x07: /* MLX5_EVENT_TYPE_PATH_MIG_FAILED */
		return IB_EVENT_PATH_MIG_ERR;
	case 0x10: /* MLX5_EVENT_TYPE_WQ_INVAL_REQ_ERROR */
		return IB_EVENT_QP_REQ_ERR;
	case 0x11: /* MLX5_EVENT_TYPE_WQ_ACCESS_ERROR */
		return IB_EVENT_QP_ACCESS_ERR;
	case 0x13: /* MLX5_EVENT_TYPE_SRQ_LAST_WQE */
		return IB_EVENT_QP_LAST_WQE_REACHED;
	default:
		return -1;
	}
}

static void rmlx5_ibc_event(int index, u32 type, u32 element, void *context)
{
	struct rmlx5_ibc_dev *dev = context;
	struct ib_event ev = { .device = &dev->ibdev };
	struct rmlx5_ibc_cq *cq;
	int qp_event = type <= 0xff ? rmlx5_ibc_qp_event_type(type) : -1;

	if (qp_event >= 0) {
		rmlx5_ibc_qp_event(dev, element, qp_event);
		return;
	}
	switch (type) {
	case 0x04: /* MLX5_EVENT_TYPE_CQ_ERROR */
		spin_lock_bh(&dev->ev_lock);
		cq = xa_load(&dev->cqs, element);
		if (cq && cq->ibcq.event_handler) {
			ev.event = IB_EVENT_CQ_ERR;
			ev.element.cq = &cq->ibcq;
			cq->ibcq.event_handler(&ev, cq->ibcq.cq_context);
		}
		spin_unlock_bh(&dev->ev_lock);
		break;
	case 0x08: /* MLX5_EVENT_TYPE_INTERNAL_ERROR */
		ev.event = IB_EVENT_DEVICE_FATAL;
		ev.element.port_num = 1;
		ib_dispatch_event(&ev);
		break;
	case 0x09: /* MLX5_EVENT_TYPE_PORT_CHANGE: sub_type << 8 | port */
		switch (element >> 8) {
		case 1: /* MLX5_PORT_CHANGE_SUBTYPE_DOWN */
			ev.event = IB_EVENT_PORT_ERR;
			break;
		case 4: /* _ACTIVE */
			ev.event = IB_EVENT_PORT_ACTIVE;
			break;
		case 5: /* _INITIALIZED */
		case 6: /* _LID */
			ev.event = IB_EVENT_LID_CHANGE;
			break;
		case 7: /* _PKEY */
			ev.event = IB_EVENT_PKEY_CHANGE;
			break;
		case 8: /* _GUID */
			ev.event = IB_EVENT_GID_CHANGE;
			break;
		case 9: /* _CLIENT_REREG */
			ev.event = IB_EVENT_CLIENT_REREGISTER;
			break;
		default:
			return;
		}
		ev.element.port_num = element & 0xf;
		ib_dispatch_event(&ev);
		break;
	default:
		dev_dbg(&dev->ibdev.dev, "async event %#x on %#x not forwarded\n",
			type, element);
		break;
	}
}

/*
 * Draining a QP (ib_drain_sq, ib_drain_rq): ib_core's own steps (move the
 * QP to the error state, post a marked work request, wait for its
 * completion), with one more before the wait. On a ConnectX function that
 * failed, nothing writes CQEs: a kernel CQ completes the outstanding work
 * requests, the marked one included, in software when it is polled, and
 * the post dispatches the CQ so that it is. That dispatch may find
 * ib_core's poll of the CQ still running, having polled before the post;
 * the poll then ignores the new call, finishes, and its re-arm cannot
 * report a completion no device will write. The recovery then waited in
 * ib_drain_sq for good (about once in 40 faults). So, as mlx5_ib does for a
 * device in internal error, the drain waits out a running poll of the CQ
 * and calls its handler itself. On a working device this costs one more
 * poll, which finds the flushed CQEs or nothing.
 */
struct rmlx5_ibc_drain {
	struct ib_cqe cqe;
	struct completion done;
};

static void rmlx5_ibc_drain_done(struct ib_cq *cq, struct ib_wc *wc)
{
	complete(&container_of(wc->wr_cqe, struct rmlx5_ibc_drain, cqe)->done);
}

static void rmlx5_ibc_drain_wait(struct ib_cq *cq, struct rmlx5_ibc_drain *d)
{
	if (cq->poll_ctx == IB_POLL_DIRECT) {
		while (wait_for_completion_timeout(&d->done, HZ / 10) <= 0)
			ib_process_cq_direct(cq, -1);
		return;
	}
	switch (cq->poll_ctx) {
	case IB_POLL_SOFTIRQ:
		/* Returns once no poll runs or is scheduled. */
		irq_poll_disable(&cq->iop);
		irq_poll_enable(&cq->iop);
		break;
	case IB_POLL_WORKQUEUE:
	case IB_POLL_UNBOUND_WORKQUEUE:
		cancel_work_sync(&cq->work);
		break;
	default:
		break;
	}
	if (cq->comp_handler)
		cq->comp_handler(cq, cq->cq_context);
	wait_for_completion(&d->done);
}

/*
 * ib_core's first steps of a drain: the QP to the error state, the marked
 * work request made ready. False (with a warning, as ib_core gives) if the
 * QP cannot be moved.
 */
static bool rmlx5_ibc_drain_start(struct ib_qp *qp, struct rmlx5_ibc_drain *d,
				  const char *queue)
{
	struct ib_qp_attr attr = { .qp_state = IB_QPS_ERR };
	int err = ib_modify_qp(qp, &attr, IB_QP_STATE);

	if (err) {
		WARN_ONCE(1, "rmlx5: draining a %s queue: modify failed: %d\n",
			  queue, err);
		return false;
	}
	d->cqe.done = rmlx5_ibc_drain_done;
	init_completion(&d->done);
	return true;
}

static void rmlx5_ibc_drain_sq(struct ib_qp *qp)
{
	struct rmlx5_ibc_drain d;
	struct ib_rdma_wr wr = {
		.wr = {
			.wr_cqe = &d.cqe,
			.opcode = IB_WR_RDMA_WRITE,
		},
	};
	int err;

	if (!rmlx5_ibc_drain_start(qp, &d, "send"))
		return;
	err = ib_post_send(qp, &wr.wr, NULL);
	if (err) {
		WARN_ONCE(1, "rmlx5: draining a send queue: post failed: %d\n", err);
		return;
	}
	rmlx5_ibc_drain_wait(qp->send_cq, &d);
}

static void rmlx5_ibc_drain_rq(struct ib_qp *qp)
{
	struct rmlx5_ibc_drain d;
	struct ib_recv_wr wr = { .wr_cqe = &d.cqe };
	int err;

	if (!rmlx5_ibc_drain_start(qp, &d, "receive"))
		return;
	err = ib_post_recv(qp, &wr, NULL);
	if (err) {
		WARN_ONCE(1, "rmlx5: draining a receive queue: post failed: %d\n", err);
		return;
	}
	rmlx5_ibc_drain_wait(qp->recv_cq, &d);
}

static const struct ib_device_ops rmlx5_ibc_ops = {
	.owner = THIS_MODULE,
	.driver_id = RDMA_DRIVER_UNKNOWN,

	.get_dev_fw_str = rmlx5_ibc_get_dev_fw_str,
	.query_device = rmlx5_ibc_query_device,
	.query_port = rmlx5_ibc_query_port,
	.get_port_immutable = rmlx5_ibc_get_port_immutable,
	.query_gid = rmlx5_ibc_query_gid,
	.query_pkey = rmlx5_ibc_query_pkey,
	.alloc_pd = rmlx5_ibc_alloc_pd,
	.dealloc_pd = rmlx5_ibc_dealloc_pd,
	.get_dma_mr = rmlx5_ibc_get_dma_mr,
	.reg_user_mr = rmlx5_ibc_reg_user_mr,
	.dereg_mr = rmlx5_ibc_dereg_mr,
	.alloc_mr = rmlx5_ibc_alloc_mr,
	.map_mr_sg = rmlx5_ibc_map_mr_sg,
	.create_cq = rmlx5_ibc_create_cq,
	.destroy_cq = rmlx5_ibc_destroy_cq,
	.poll_cq = rmlx5_ibc_poll_cq,
	.req_notify_cq = rmlx5_ibc_req_notify_cq,
	.create_qp = rmlx5_ibc_create_qp,
	.modify_qp = rmlx5_ibc_modify_qp,
	.query_qp = rmlx5_ibc_query_qp,
	.destroy_qp = rmlx5_ibc_destroy_qp,
	.post_send = rmlx5_ibc_post_send,
	.post_recv = rmlx5_ibc_post_recv,
	.drain_sq = rmlx5_ibc_drain_sq,
	.drain_rq = rmlx5_ibc_drain_rq,
	.create_ah = rmlx5_ibc_create_ah,
	.query_ah = rmlx5_ibc_query_ah,
	.destroy_ah = rmlx5_ibc_destroy_ah,

	INIT_RDMA_OBJ_SIZE(ib_pd, rmlx5_ibc_pd, ibpd),
	INIT_RDMA_OBJ_SIZE(ib_ah, rmlx5_ibc_ah, ibah),
	INIT_RDMA_OBJ_SIZE(ib_cq, rmlx5_ibc_cq, ibcq),
	INIT_RDMA_OBJ_SIZE(ib_qp, rmlx5_ibc_qp, ibqp),
};

/* What a RoCE port adds: the device's copy of the GID table. */
static const struct ib_device_ops rmlx5_ibc_roce_ops = {
	.add_gid = rmlx5_ibc_add_gid,
	.del_gid = rmlx5_ibc_del_gid,
};

/* Gives back what a device holds besides its ib_device. */
static void rmlx5_ibc_release(struct rmlx5_ibc_dev *dev)
{
	/* Waits for a dispatcher run that may still call rmlx5_ibc_event. */
	rmlx5_ibc_set_event_handler(dev->index, NULL, NULL);
	/* And for a device-fatal event that run may have queued. */
	flush_workqueue(ib_wq);
	WARN_ON(!xa_empty(&dev->qps) || !xa_empty(&dev->cqs));
	xa_destroy(&dev->qps);
	xa_destroy(&dev->cqs);
	if (dev->roce)
		rmlx5_ibc_set_port(dev->index, 0, IB_MTU_4096);
}

static void rmlx5_ibc_forget(struct rmlx5_ibc_dev *dev);

/*
 * A device `rdma link add` made is freed by ib_core when it unregisters
 * (`rdma link delete`, or rmmod): ib_dealloc_device calls this first.
 */
static void rmlx5_ibc_dealloc_link(struct ib_device *ibdev)
{
	struct rmlx5_ibc_dev *dev = to_dev(ibdev);

	rmlx5_ibc_forget(dev);
	rmlx5_ibc_release(dev);
}

static const struct ib_device_ops rmlx5_ibc_link_dev_ops = {
	.dealloc_driver = rmlx5_ibc_dealloc_link,
};

static void rmlx5_ibc_remove_one(struct rmlx5_ibc_dev *dev)
{
	/* Unregistering frees it (rmlx5_ibc_dealloc_link). */
	if (dev->link && dev->registered) {
		ib_unregister_device(&dev->ibdev);
		return;
	}
	if (dev->registered)
		ib_unregister_device(&dev->ibdev);
	else if (dev->roce)
		ib_device_set_netdev(&dev->ibdev, NULL, 1);
	rmlx5_ibc_release(dev);
	ib_dealloc_device(&dev->ibdev);
}

/* The index-th name of roce_netdevs, in buf: 0, -ENOENT if none, -EINVAL. */
static int rmlx5_ibc_netdev_name(unsigned int index, char *buf, size_t len)
{
	const char *p = roce_netdevs;
	unsigned int i;
	size_t n;

	for (i = 0; p && i < index; i++) {
		p = strchr(p, ',');
		if (p)
			p++;
	}
	if (!p || !*p || *p == ',')
		return -ENOENT;
	n = strcspn(p, ",");
	if (n >= len)
		return -EINVAL;
	strscpy(buf, p, n + 1);
	return 0;
}

/* The netdev called name in any network namespace, held, or NULL. */
static struct net_device *rmlx5_ibc_find_netdev(const char *name)
{
	struct net_device *ndev = NULL;
	struct net *net;

	rcu_read_lock();
	for_each_net_rcu(net) {
		ndev = dev_get_by_name_rcu(net, name);
		if (ndev) {
			dev_hold(ndev);
			break;
		}
	}
	rcu_read_unlock();
	return ndev;
}

/*
 * Makes dev a RoCE device on its netdev from roce_netdevs, if it has one.
 * Under the RTNL, so that the netdev cannot unregister between the lookup
 * and the binding unseen: the notifier (registered before) takes the RTNL
 * too and finds the device already in the table.
 */
static int rmlx5_ibc_bind_netdev(struct rmlx5_ibc_dev *dev,
				 struct net_device *link_ndev)
{
	char name[IFNAMSIZ];
	struct net_device *ndev;
	int err;

	if (link_ndev) {
		strscpy(name, link_ndev->name, sizeof(name));
	} else {
		err = rmlx5_ibc_netdev_name(dev->index, name, sizeof(name));
		if (err == -ENOENT)
			return 0;
		if (err) {
			pr_err("rmlx5: rmlx5_%d: a roce_netdevs name is longer than %d characters\n",
			       dev->index, IFNAMSIZ - 1);
			return err;
		}
	}
	rtnl_lock();
	if (link_ndev) {
		ndev = link_ndev;
		dev_hold(ndev);
	} else {
		ndev = rmlx5_ibc_find_netdev(name);
	}
	if (!ndev || ndev->reg_state != NETREG_REGISTERED) {
		rtnl_unlock();
		dev_put(ndev);
		pr_err("rmlx5: rmlx5_%d: no netdev %s for RoCE (roce_netdevs)\n",
		       dev->index, name);
		return -ENODEV;
	}
	err = rmlx5_ibc_set_port(dev->index, 1, iboe_get_mtu(ndev->mtu));
	if (!err)
		err = ib_device_set_netdev(&dev->ibdev, ndev, 1);
	if (!err) {
		dev->roce = true;
		/* The GID table ib_core fills is mirrored into the device. */
		ib_set_device_ops(&dev->ibdev, &rmlx5_ibc_roce_ops);
	} else {
		rmlx5_ibc_set_port(dev->index, 0, IB_MTU_4096);
	}
	rtnl_unlock();
	dev_put(ndev);
	return err;
}

/*
 * ib_core asks drivers to let go of a netdev that unregisters (which it
 * also does when it moves to another namespace): the port then stays down.
 * Runs under the RTNL.
 */
static int rmlx5_ibc_netdev_event(struct notifier_block *nb,
				  unsigned long event, void *ptr)
{
	struct net_device *ndev = netdev_notifier_info_to_dev(ptr);
	unsigned int i;

	if (event != NETDEV_UNREGISTER)
		return NOTIFY_DONE;
	mutex_lock(&rmlx5_ibc_lock);
	for (i = 0; i < rmlx5_ibc_nr; i++) {
		struct rmlx5_ibc_dev *d = rmlx5_ibc_devs[i];
		struct net_device *bound;

		if (!d || !d->roce)
			continue;
		bound = ib_device_get_netdev(&d->ibdev, 1);
		if (bound == ndev)
			ib_device_set_netdev(&d->ibdev, NULL, 1);
		dev_put(bound);
	}
	mutex_unlock(&rmlx5_ibc_lock);
	return NOTIFY_DONE;
}

static struct notifier_block rmlx5_ibc_netdev_nb = {
	.notifier_call = rmlx5_ibc_netdev_event,
};

/* Takes dev out of the table; the caller then removes it. */
static void rmlx5_ibc_forget(struct rmlx5_ibc_dev *dev)
{
	mutex_lock(&rmlx5_ibc_lock);
	rmlx5_ibc_devs[dev->index] = NULL;
	while (rmlx5_ibc_nr && !rmlx5_ibc_devs[rmlx5_ibc_nr - 1])
		rmlx5_ibc_nr--;
	mutex_unlock(&rmlx5_ibc_lock);
}

/*
 * Registers rmlx5_<index>: a software HCA (dma_device NULL) or a ConnectX
 * function whose PCI device is dma_device.
 */
static int rmlx5_ibc_add_one(unsigned int index, struct device *dma_device,
			     const char *link_name, struct net_device *link_ndev)
{
	struct rmlx5_ib_device_attr a;
	struct rmlx5_ibc_dev *dev;
	char name[IB_DEVICE_NAME_MAX];
	int err;

	err = rmlx5_ib_query_device(index, &a);
	if (err)
		return err;
	dev = ib_alloc_device(rmlx5_ibc_dev, ibdev);
	if (!dev)
		return -ENOMEM;
	dev->index = index;
	/* Their lock nests in ev_lock, which BH takes. */
	xa_init_flags(&dev->qps, XA_FLAGS_LOCK_BH);
	xa_init_flags(&dev->cqs, XA_FLAGS_LOCK_BH);
	spin_lock_init(&dev->ev_lock);
	dev->ibdev.node_type = RDMA_NODE_IB_CA;
	dev->ibdev.phys_port_cnt = 1;
	dev->ibdev.num_comp_vectors = max_t(u32, a.num_comp_vectors, 1);
	/* A function's GUID is its firmware's. */
	dev->ibdev.node_guid = a.node_guid ? cpu_to_be64(a.node_guid) :
		rmlx5_ibc_guid(index);
	dev->pci = dma_device;
	strscpy(dev->ibdev.node_desc,
		dma_device ? "rmlx5 ConnectX function" : "rmlx5 software HCA",
		sizeof(dev->ibdev.node_desc));
	dev->ibdev.dev.parent = dma_device ?: rmlx5_shim_hca_device(index);
	ib_set_device_ops(&dev->ibdev, &rmlx5_ibc_ops);
#if RMLX5_IBC_USER
	/* A uverbs device with mlx5_ib's ABI (alloc_ucontext refuses the
	 * contexts of a function that cannot have them yet). */
	ib_set_device_ops(&dev->ibdev, &rmlx5_ibu_ops);
	/* A function's contexts are disassociated when it goes away. */
	if (dma_device)
		ib_set_device_ops(&dev->ibdev, &rmlx5_ibu_pci_ops);
#endif
	/* In the table before its netdev is bound (see bind_netdev). */
	mutex_lock(&rmlx5_ibc_lock);
	if (rmlx5_ibc_devs[index]) {
		mutex_unlock(&rmlx5_ibc_lock);
		ib_dealloc_device(&dev->ibdev);
		return -EBUSY;
	}
	rmlx5_ibc_devs[index] = dev;
	rmlx5_ibc_nr = max(rmlx5_ibc_nr, index + 1);
	mutex_unlock(&rmlx5_ibc_lock);
	/* roce_netdevs names netdevs for the software HCAs only. */
	err = dma_device ? 0 : rmlx5_ibc_bind_netdev(dev, link_ndev);
	if (err)
		goto fail;
	err = rmlx5_ibc_set_event_handler(index, rmlx5_ibc_event, dev);
	if (err)
		goto fail;
	if (link_name) {
		/*
		 * Made by `rdma link add`: from here ib_dealloc_device, called
		 * by ib_core when it unregisters the device, or below if
		 * registration fails, gives everything back (dealloc_driver).
		 */
		dev->link = true;
		dev->ibdev.link_ops = &rmlx5_ibc_link_ops;
		ib_set_device_ops(&dev->ibdev, &rmlx5_ibc_link_dev_ops);
		strscpy(name, link_name, sizeof(name));
	} else {
		snprintf(name, sizeof(name), "rmlx5_%u", index);
	}
	/* A software HCA has no DMA device: ib_dma_map_*() give direct-map
	 * addresses. A function's give bus addresses. */
	err = ib_register_device(&dev->ibdev, name, dma_device);
	if (err)
		goto fail;
	mutex_lock(&rmlx5_ibc_lock);
	dev->registered = true;
	mutex_unlock(&rmlx5_ibc_lock);
	return 0;
fail:
	if (dev->link) {
		ib_dealloc_device(&dev->ibdev);
		return err;
	}
	rmlx5_ibc_forget(dev);
	rmlx5_ibc_remove_one(dev);
	return err;
}

/*
 * `rdma link add <name> type rmlx5 netdev <netdev>`: the first software
 * HCA of the last link_hcas that has no ib_device becomes the RoCE device
 * <name> on <netdev>. Without one free, -ENOSPC.
 */
static int rmlx5_ibc_newlink(const char *ibdev_name, struct net_device *ndev)
{
	unsigned int i;
	int found = -ENOSPC;

	mutex_lock(&rmlx5_ibc_lock);
	for (i = rmlx5_ibc_soft - link_hcas; i < rmlx5_ibc_soft; i++) {
		if (!rmlx5_ibc_devs[i]) {
			found = i;
			break;
		}
	}
	mutex_unlock(&rmlx5_ibc_lock);
	if (found < 0)
		return found;
	/* add_one claims the slot under the lock (a racing link gets -EBUSY). */
	return rmlx5_ibc_add_one(found, NULL, ibdev_name, ndev);
}

static struct rdma_link_ops rmlx5_ibc_link_ops = {
	.type = "rmlx5",
	.newlink = rmlx5_ibc_newlink,
};

int rmlx5_ibc_register(unsigned int nr)
{
	unsigned int i;
	int err;

	if (nr > RMLX5_IBC_MAX_DEVS || link_hcas > nr)
		return -EINVAL;
	if (roce_netdevs && *roce_netdevs && link_hcas) {
		pr_err("rmlx5: roce_netdevs and link_hcas exclude each other\n");
		return -EINVAL;
	}
	rmlx5_ibc_soft = nr;
	/* First, so that no bound netdev unregisters unseen. */
	if ((roce_netdevs && *roce_netdevs) || link_hcas) {
		err = register_netdevice_notifier(&rmlx5_ibc_netdev_nb);
		if (err)
			return err;
		rmlx5_ibc_notifier = true;
	}
	for (i = 0; i < nr - link_hcas; i++) {
		err = rmlx5_ibc_add_one(i, NULL, NULL, NULL);
		if (err) {
			pr_err("rmlx5: registering rmlx5_%u with ib_core failed: %d\n",
			       i, err);
			rmlx5_ibc_unregister();
			return err;
		}
	}
	if (link_hcas) {
		rdma_link_register(&rmlx5_ibc_link_ops);
		rmlx5_ibc_linked = true;
	}
	return 0;
}

void rmlx5_ibc_unregister(void)
{
	unsigned int i = RMLX5_IBC_MAX_DEVS;

	/* No `rdma link add` from here on (it waits for one in progress). */
	if (rmlx5_ibc_linked) {
		rdma_link_unregister(&rmlx5_ibc_link_ops);
		rmlx5_ibc_linked = false;
	}

	/* The software HCAs; a function leaves through rmlx5_ibc_remove_pci. */
	while (i--) {
		struct rmlx5_ibc_dev *d;

		mutex_lock(&rmlx5_ibc_lock);
		d = rmlx5_ibc_devs[i];
		if (d && d->pci)
			d = NULL;
		mutex_unlock(&rmlx5_ibc_lock);
		if (!d)
			continue;
		rmlx5_ibc_forget(d);
		rmlx5_ibc_remove_one(d);
	}
	/*
	 * Last: unregistering replays NETDEV_UNREGISTER for every netdev,
	 * which must not detach the ports of devices still registered.
	 */
	if (rmlx5_ibc_notifier) {
		unregister_netdevice_notifier(&rmlx5_ibc_netdev_nb);
		rmlx5_ibc_notifier = false;
	}
}

int rmlx5_ibc_add_pci(unsigned int index, struct device *dma_device)
{
	if (index >= RMLX5_IBC_MAX_DEVS || !dma_device)
		return -EINVAL;
	return rmlx5_ibc_add_one(index, dma_device, NULL, NULL);
}

void rmlx5_ibc_remove_pci(unsigned int index)
{
	struct rmlx5_ibc_dev *d;

	if (index >= RMLX5_IBC_MAX_DEVS)
		return;
	mutex_lock(&rmlx5_ibc_lock);
	d = rmlx5_ibc_devs[index];
	mutex_unlock(&rmlx5_ibc_lock);
	if (!d || !d->pci)
		return;
	/*
	 * ib_uverbs disassociates each context by destroying its objects
	 * first and zapping its mappings after: a process still posting
	 * would ring a destroyed QP's doorbell on the function meanwhile.
	 * Its UAR mappings go first, here (later stores land in memory).
	 */
	if (d->registered)
		rdma_user_mmap_disassociate(&d->ibdev);
	rmlx5_ibc_forget(d);
	rmlx5_ibc_remove_one(d);
}
