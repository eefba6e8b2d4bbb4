// SPDX-License-Identifier: GPL-2.0

//! What the verbs layer needs from a device, whoever implements it.
//!
//! The kernel verbs objects of `ib/` (PD, MR, CQ, QP) keep their queues in
//! memory the device reaches, build WQEs and poll CQEs in mlx5 format, and
//! ask the device for everything else through this trait: object numbers
//! and keys, the doorbells the kernel rings, and the chance to make
//! progress. The software HCA implements it over its model
//! (`hca/backend.rs`); a ConnectX function will implement it with
//! commands. The attribute types are the model's (`hca_model::{cq, mr,
//! qp}`): plain descriptions of an object that a command-based backend
//! translates into its PRM contexts.
//!
//! Every method is one step for the device: the software HCA takes its
//! fabric lock once per call. Methods that create or destroy objects are
//! called in process context; `arm_cq`, `ring_send`, `ring_recv` and `run`
//! also from BH or with interrupts off (a ULP posting from its completion
//! handler), and `ring_eq` from the EQ's hard-IRQ handler, so those never
//! sleep.
//!
//! The trait names nothing above it: the core (`core/device.rs`) holds a
//! backend as an `Arc<dyn Backend>` with the EQs, lookup tables and
//! dispatcher every device has.

use core::sync::atomic::{
    AtomicBool,
    AtomicU64, //
};
use kernel::{
    device,
    mm::virt::VmaNew,
    prelude::*,
    sync::{
        aref::ARef,
        Arc, //
    },
};

use crate::hca_model::{
    caps::Caps,
    cq::CqAttr,
    mr::MrAttr,
    port::GidEntry,
    qp::{
        ConnAttrs,
        QpAttr,
        QpState, //
    },
    qp_modify::QpModify,
};
use crate::mem::DmaBuf;
use crate::mlx5_prm::doorbell::CqArm;

/// The memory an MR covers, as the device must be told to reach it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum MrRegion {
    /// `len` bytes of kernel memory at kernel address `addr`.
    Kernel { addr: u64, len: u64 },
    /// `len` bytes of pinned user pages mapped at kernel address `addr`.
    User { addr: u64, len: u64 },
    /// The kernel's direct map (a DMA MR).
    DirectMap { start: u64, len: u64 },
}

/// The keys of a fast-registration MR: its own (free until a registration
/// WQE) and the linear key of its page list.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FastKeys {
    pub(crate) key: u32,
    pub(crate) list_key: u32,
}

/// What a device reports of itself (`rmlx5_ib_query_device`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DeviceInfo {
    pub(crate) max_qp: u32,
    pub(crate) max_cq: u32,
    pub(crate) max_pd: u32,
    pub(crate) max_mr: u32,
    /// CQEs per CQ.
    pub(crate) max_cqe: u32,
    /// Outstanding RDMA READs and atomics per QP.
    pub(crate) max_qp_rd_atom: u32,
    /// The port's LID: what a peer names this device by in a QP's address
    /// vector.
    pub(crate) lid: u16,
    /// The port's state, as `enum ib_port_state` numbers it (1 down, 4
    /// active).
    pub(crate) port_state: u8,
    /// The LID of the subnet manager.
    pub(crate) sm_lid: u16,
    /// The node GUID, 0 if the device has none of its own (the layers
    /// above then make one up).
    pub(crate) node_guid: u64,
    /// The GID prefix of the port (`fe80::/64` by default).
    pub(crate) subnet_prefix: u64,
    /// Pages of a fast-registration MR, 0 if `create_fast_mr` is not
    /// supported.
    pub(crate) max_fast_reg_pages: u32,
    /// The vendor part ID verbs report: a ConnectX function's PCI device
    /// ID; 0 for a software HCA, which is no ConnectX part (a ConnectX
    /// ID would switch rdma-core's pyverbs tests and perftest onto paths
    /// only the hardware has; Documentation/rdma-core.md).
    pub(crate) part_id: u32,
}

/// A user QP as a KICK names it (see [`UserUar::kick_send`]).
pub(crate) struct KickQp<'a> {
    /// The QP number.
    pub(crate) qpn: u32,
    /// Its BlueFlame register in the context's UAR page.
    pub(crate) bfreg: u8,
    /// When the QP last kicked a send doorbell (perf clock, ns).
    pub(crate) last_kick: &'a AtomicU64,
    /// Set once the QP is being destroyed: a kick then fails with `EINVAL`
    /// (its QPN may already name another QP).
    pub(crate) gone: &'a AtomicBool,
}

/// The UAR page of one user context: the doorbell page its process maps,
/// and that its CQs and QPs are created on.
pub(crate) trait UserUar: Send + Sync {
    /// The address CQs and QPs name the page by ([`CqAttr::uar_addr`],
    /// [`QpAttr::uar_addr`]).
    fn addr(&self) -> u64;

    /// Maps the page into `vma` (one page, shared, not executable: the
    /// caller checked).
    fn mmap(&self, vma: &VmaNew) -> Result;

    /// The physical address of the page, for a UAR page in a PCI BAR
    /// (`EOPNOTSUPP` for a software HCA's, `ENODEV` once the function is
    /// gone).
    fn bar_page(&self) -> Result<u64> {
        Err(EOPNOTSUPP)
    }

    /// Whether the device needs the process's doorbells reported (KICK):
    /// the software HCA cannot see stores to a page; a PCI function's UAR
    /// page is a device page and the stores reach it.
    fn needs_kick(&self) -> bool {
        false
    }

    /// A CQ arm the process wrote to the page (doorbell record, then the
    /// CQ doorbell register). `entry` is when the KICK command started,
    /// on the device's perf clock (`Device::perf`), for the path figures.
    fn kick_arm(&self, _entry: u64) -> Result {
        Err(EOPNOTSUPP)
    }

    /// A send doorbell, or a BlueFlame copy if `blueflame`, the process
    /// wrote at byte `offset` of the page for `qp`; `entry` as for
    /// [`UserUar::kick_arm`].
    fn kick_send(&self, _qp: &KickQp<'_>, _offset: u32, _blueflame: bool, _entry: u64) -> Result {
        Err(EOPNOTSUPP)
    }

    /// Receive WQEs the process posted to QP `qpn` (the doorbell record
    /// holds the counter).
    fn kick_recv(&self, _qpn: u32, _gone: &AtomicBool) -> Result {
        Err(EOPNOTSUPP)
    }

    /// The device is going away under an open context (disassociation):
    /// the page leaves every process that mapped it, later stores to the
    /// mapping land in memory, and new mappings are refused. Process
    /// context. Nothing to do for a page that is not a device's.
    fn revoke(&self) {}

    /// After [`UserUar::revoke`] and once the context's objects are gone:
    /// the page is given back to the device now, while it still runs,
    /// rather than at the context's close.
    fn give_back(&self) {}
}

/// A device the verbs objects run on: one `rmlx5_<n>`.
/// Objects a device holds for its users, as the backend counted the
/// commands that made and destroyed them (debugfs `rmlx5/objects`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LiveObjects {
    pub(crate) pds: u64,
    pub(crate) cqs: u64,
    pub(crate) qps: u64,
    /// Memory keys: kernel, user and fast-registration MRs (one each).
    pub(crate) mrs: u64,
    /// User UAR pages.
    pub(crate) uars: u64,
}

pub(crate) trait Backend: Send + Sync {
    /// What the device holds now, if the backend counts it (the software
    /// HCA's tables are in debugfs already).
    fn live_objects(&self) -> Option<LiveObjects> {
        None
    }

    /// The device's limits and its port's LID.
    fn info(&self) -> Result<DeviceInfo>;

    /// The limits of its queues and work requests.
    fn caps(&self) -> Result<Caps>;

    /// Memory for a queue or a doorbell record, zeroed, that the device can
    /// reach once it is handed to a `create_*` call.
    fn alloc_queue(&self, len: usize) -> Result<DmaBuf>;

    /// The device that memory shared with user space must be mapped for
    /// (by bus address), or `None` if the device reaches kernel addresses
    /// (the software HCA).
    fn dma_device(&self) -> Option<ARef<device::Device>>;

    /// A UAR page for a user context.
    fn alloc_uar(self: Arc<Self>) -> Result<KBox<dyn UserUar>>;

    /// The largest memory region user space may register (QUERY_DEVICE's
    /// `max_mr_size`, at most the ABI's own limit).
    fn max_user_mr(&self) -> u64 {
        u64::MAX
    }

    /// The LID user space sees on the device's port (QUERY_PORT).
    fn port_lid(&self) -> u16;

    /// The peer an address vector with destination LID `dlid` names
    /// ([`RemoteQp::hca`](crate::hca_model::qp::RemoteQp)), `None` if no
    /// device of the fabric has that LID.
    fn peer_of_dlid(&self, dlid: u16) -> Option<u16>;

    /// The destination LID of peer `peer` (the inverse of
    /// [`Backend::peer_of_dlid`]).
    fn dlid_of_peer(&self, peer: u16) -> u16;

    /// The device address of the UAR page kernel objects ring on.
    fn kernel_uar(&self) -> Result<u64>;

    /// Allocates a PD; returns its number.
    fn alloc_pd(&self) -> Result<u32>;

    /// Frees a PD: `EBUSY` while MRs or QPs use it.
    fn dealloc_pd(&self, pdn: u32) -> Result;

    /// Registers `region` under `attr` (whose `dma_addr` is where the
    /// device finds `attr.iova`); returns the key.
    fn create_mr(&self, attr: &MrAttr, region: MrRegion) -> Result<u32>;

    /// Registers user memory `region` (pinned pages) under `attr`;
    /// `pages` are the bus addresses of its pages (empty for a device
    /// without a [`Backend::dma_device`], which reaches `region` itself).
    fn create_user_mr(&self, attr: &MrAttr, region: MrRegion, pages: &[u64]) -> Result<u32> {
        let _ = pages;
        self.create_mr(attr, region)
    }

    /// Deregisters the MR `key` made over `region`.
    fn destroy_mr(&self, key: u32, region: MrRegion) -> Result;

    /// Creates a fast-registration MR of PD `pdn` for up to `max_pages`
    /// pages whose page list the driver keeps in `list`.
    fn create_fast_mr(&self, pdn: u32, max_pages: u32, list: &DmaBuf) -> Result<FastKeys>;

    /// Destroys a fast-registration MR (whatever key a registration gave
    /// it since) and its page list's key.
    fn destroy_fast_mr(&self, keys: FastKeys, list: &DmaBuf) -> Result;

    /// Creates a CQ on `mem` (its ring, then its doorbell record); returns
    /// the CQN.
    fn create_cq(&self, attr: &CqAttr, mem: [&DmaBuf; 2]) -> Result<u32>;

    /// Destroys a CQ: `EBUSY` while QPs use it. The device no longer
    /// writes `mem` once this succeeds.
    fn destroy_cq(&self, cqn: u32, mem: [&DmaBuf; 2]) -> Result;

    /// Rings the CQ doorbell of the kernel UAR page: the arm the caller
    /// already wrote into the CQ's doorbell record.
    fn arm_cq(&self, cqn: u32, arm: CqArm) -> Result;

    /// Creates an EQ of `1 << log_size` EQEs on `ring` (every owner byte
    /// already 1), raising interrupt vector `vector`, with its doorbell on
    /// the kernel UAR page; `async_events`: it receives the asynchronous
    /// events (one EQ of a device does). Returns the EQ number. The EQ is
    /// not armed.
    fn create_eq(&self, log_size: u8, vector: u16, async_events: bool, ring: &DmaBuf)
        -> Result<u8>;

    /// Destroys an EQ; the device no longer writes `ring` once this
    /// succeeds.
    fn destroy_eq(&self, eqn: u8, ring: &DmaBuf) -> Result;

    /// Writes the EQ doorbell of the kernel UAR page: consumer index `ci`,
    /// and arms the EQ (any context, hard IRQ included).
    fn ring_eq(&self, eqn: u8, ci: u32) -> Result;

    /// Creates an RC QP on `mem`: its queue buffer (the RQ at
    /// `attr.rq_buf_addr`, its start, and the SQ after it at
    /// `attr.sq_buf_addr`, as mlx5 lays a QP out) and its doorbell record.
    /// Returns the QPN.
    fn create_qp(&self, attr: &QpAttr, mem: [&DmaBuf; 2]) -> Result<u32>;

    /// Moves a QP (IB modify-QP semantics).
    fn modify_qp(&self, qpn: u32, m: &QpModify) -> Result;

    /// The QP's state as the device has it.
    fn qp_state(&self, qpn: u32) -> Result<QpState>;

    /// The QP's state and connection attributes (QUERY_QP).
    fn query_qp(&self, qpn: u32) -> Result<(QpState, ConnAttrs)>;

    /// Destroys a QP; the device no longer touches `mem` once this
    /// succeeds.
    fn destroy_qp(&self, qpn: u32, mem: [&DmaBuf; 2]) -> Result;

    /// Rings the send doorbell of the kernel UAR page: `ctrl` is the
    /// control segment of the last WQE posted, `half` the BlueFlame
    /// register half.
    fn ring_send(&self, qpn: u32, ctrl: &[u8; 16], half: u8) -> Result;

    /// Tells the device receive WQEs were posted (the doorbell record holds
    /// the counter; real hardware reads it when it needs a WQE).
    fn ring_recv(&self, qpn: u32);

    /// Lets the device make progress after a doorbell or a modify (the
    /// software HCA runs its engine; hardware needs nothing).
    fn run(&self);

    /// Makes the port a RoCE port (`roce`) whose datagrams are at most
    /// `mtu` (`enum ib_mtu`) long, or an InfiniBand port again. Only a
    /// software HCA's port can be bound to a netdev; a function refuses.
    fn set_port(&self, roce: bool, mtu: u8) -> Result {
        let _ = (roce, mtu);
        Err(EOPNOTSUPP)
    }

    /// Writes entry `index` of the port's GID table (`None` clears it), as
    /// mlx5's SET_ROCE_ADDRESS does: the source GID, RoCE version and MAC
    /// of what the port sends from that index, and the MAC datagrams for
    /// the port are addressed to.
    fn set_gid(&self, index: u8, entry: Option<GidEntry>) -> Result {
        let _ = (index, entry);
        Err(EOPNOTSUPP)
    }
}
