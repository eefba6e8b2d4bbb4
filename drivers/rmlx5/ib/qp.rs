// SPDX-License-Identifier: GPL-2.0

//! RC queue pairs of kernel ULPs: SQ and RQ rings and the doorbell record
//! in memory the backend gave; WQEs built in mlx5 format and rung through
//! the kernel UAR page exactly as a provider does, then executed by the
//! device (`Backend::ring_send`).
//!
//! Lock order: `Qp::sq` before `Qp::rq` (modify takes both), either before
//! whatever the backend takes (the software HCA's fabric lock).
//! `complete_send`/`complete_recv` are called by `Cq::poll` with `Cq::poll` held, so `Cq::poll` comes before
//! `Qp::sq`/`Qp::rq`.

use core::sync::atomic::{
    AtomicBool,
    AtomicU64,
    Ordering, //
};
use kernel::{
    new_spinlock_irq, new_work,
    prelude::*,
    sync::{
        barrier::{
            dma_mb,
            Write, //
        },
        Arc,
        SpinLockIrq,
        UniqueArc, //
    },
    workqueue::{
        Work,
        WorkItem, //
    },
};

use super::{
    cq::Cq,
    mr::{
        Mr,
        Pd, //
    },
};
use crate::hca_model::{
    mr::Access,
    qp::{
        ConnAttrs,
        QpAttr,
        QpService,
        QpState,
        RemoteQp, //
    },
    qp_modify::{
        AttrMask,
        QpModify, //
    },
};
use crate::mem::DmaBuf;
use crate::mlx5_core::device::Device;
use crate::mlx5_core::events::WrIds;
use crate::mlx5_prm::{
    doorbell::{
        counter_word,
        QP_DBR_RECV_OFFSET,
        QP_DBR_SEND_OFFSET,
        QP_DBR_SIZE, //
    },
    opcode::SendOpcode,
    recv::write_recv_wqe,
    wqe::{
        mkey_flags,
        mkey_mask,
        umr_flags,
        AtomicSeg,
        CtrlSeg,
        DataSeg,
        DatagramSeg,
        MaskedAtomicSeg,
        MkeySeg,
        RaddrSeg,
        UmrCtrlSeg,
        CE_CQ_UPDATE,
        CE_ERROR_ONLY,
        DS_SIZE,
        FENCE_MODE_FENCE,
        FENCE_MODE_NONE,
        MAX_WQE_SIZE,
        MKEY_REMOTE_INVAL,
        MKEY_STATUS_FREE,
        MTT_SIZE,
        WQEBB_SIZE, //
    },
};

// `enum ib_wr_opcode` values.
pub(crate) const WR_RDMA_WRITE: u32 = 0;
pub(crate) const WR_RDMA_WRITE_WITH_IMM: u32 = 1;
pub(crate) const WR_SEND: u32 = 2;
pub(crate) const WR_SEND_WITH_IMM: u32 = 3;
pub(crate) const WR_RDMA_READ: u32 = 4;
pub(crate) const WR_ATOMIC_CMP_AND_SWP: u32 = 5;
pub(crate) const WR_ATOMIC_FETCH_AND_ADD: u32 = 6;
pub(crate) const WR_MASKED_ATOMIC_CMP_AND_SWP: u32 = 12;
pub(crate) const WR_MASKED_ATOMIC_FETCH_AND_ADD: u32 = 13;
pub(crate) const WR_LOCAL_INV: u32 = 7;
pub(crate) const WR_SEND_WITH_INV: u32 = 9;
pub(crate) const WR_REG_MR: u32 = 0x20;
// `enum ib_wc_opcode` values of the two UMR work requests.
const WC_LOCAL_INV: u8 = 6;
const WC_REG_MR: u8 = 10;
/// No completion opcode recorded: the CQE's send opcode decides.
const WC_FROM_CQE: u8 = 0xff;
// `enum ib_send_flags` values.
pub(crate) const SEND_FENCE: u32 = 1;
pub(crate) const SEND_SIGNALED: u32 = 2;
pub(crate) const SEND_SOLICITED: u32 = 4;

/// Largest gather/scatter list of a kernel QP.
pub(crate) const MAX_SGE: usize = 8;
/// Largest `max_send_wr` and `max_recv_wr` of a kernel QP, as
/// `rmlx5_ib_query_device` and ib_core report it: the SQ then holds
/// `4 * MAX_QP_WR` WQEBBs, well inside what its 16-bit counters address.
pub(crate) const MAX_QP_WR: u32 = 1 << 12;
/// Receive WQE stride: `MAX_SGE` data segments.
const RQ_STRIDE: u32 = (MAX_SGE * DS_SIZE) as u32;

/// One scatter/gather entry (`struct rmlx5_ib_sge`).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct Sge {
    /// Kernel virtual address inside an MR.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// The MR's lkey.
    pub lkey: u32,
}

/// A send work request in safe form.
#[derive(Clone, Copy, Default)]
pub(crate) struct SendReq<'a> {
    pub(crate) wr_id: u64,
    pub(crate) sges: &'a [Sge],
    pub(crate) opcode: u32,
    pub(crate) flags: u32,
    /// Immediate data, big-endian as in `ib_send_wr`.
    pub(crate) imm_data: u32,
    pub(crate) remote_addr: u64,
    pub(crate) rkey: u32,
    pub(crate) compare_add: u64,
    pub(crate) swap: u64,
    pub(crate) compare_add_mask: u64,
    pub(crate) swap_mask: u64,
    /// `IB_WR_REG_MR`: the fast MR to register (its key becomes `rkey`)
    /// and the rights (`IB_ACCESS_*`).
    pub(crate) mr: Option<&'a Mr>,
    pub(crate) access: u32,
    /// UD and GSI QPs: where the datagram goes.
    pub(crate) ud: Option<UdDest<'a>>,
}

/// The destination of a UD send: an address vector from
/// `rmlx5_ib_encode_av`, the remote QPN and Q_Key.
#[derive(Clone, Copy)]
pub(crate) struct UdDest<'a> {
    pub(crate) av: &'a [u8; DatagramSeg::SIZE],
    pub(crate) qpn: u32,
    pub(crate) qkey: u32,
}

/// Creation attributes of a QP.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QpCaps {
    pub(crate) service: QpService,
    pub(crate) max_send_wr: u32,
    pub(crate) max_recv_wr: u32,
    pub(crate) max_send_sge: u32,
    pub(crate) max_recv_sge: u32,
    pub(crate) sq_sig_all: bool,
}

/// Modify-QP attributes (`struct rmlx5_ib_qp_attr`).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct QpAttrC {
    /// `enum ib_qp_state`.
    pub qp_state: u32,
    /// `enum ib_qp_state` the caller believes the QP is in.
    pub cur_qp_state: u32,
    /// `IB_ACCESS_*` remote rights.
    pub qp_access_flags: u32,
    /// Path MTU (`enum ib_mtu`).
    pub path_mtu: u32,
    /// Remote QPN.
    pub dest_qp_num: u32,
    /// Receive PSN.
    pub rq_psn: u32,
    /// Send PSN.
    pub sq_psn: u32,
    /// P_Key index.
    pub pkey_index: u16,
    /// Remote HCA (the LID of the address vector: rmlx5_<dlid>).
    pub dlid: u16,
    /// Port (1).
    pub port_num: u8,
    /// Initiator depth.
    pub max_rd_atomic: u8,
    /// Responder resources.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer.
    pub min_rnr_timer: u8,
    /// Local ACK timeout.
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries.
    pub rnr_retry: u8,
    /// Padding.
    pub reserved: u8,
    /// Q_Key (UD and GSI QPs).
    pub qkey: u32,
}

impl QpAttrC {
    /// The device's modify request for these attributes and `mask`
    /// (`IB_QP_*` bits).
    ///
    /// # Errors
    ///
    /// `EINVAL` for a state, access right or MTU out of range.
    pub(crate) fn modify_request(&self, mask: u32) -> Result<QpModify> {
        let a = self;
        let state = QpState::from_raw(a.qp_state).ok_or(EINVAL)?;
        let cur_state = QpState::from_raw(a.cur_qp_state).unwrap_or_default();
        Ok(QpModify {
            mask: AttrMask(mask),
            state,
            cur_state,
            attrs: ConnAttrs {
                access: Access::from_bits(a.qp_access_flags).ok_or(EINVAL)?,
                pkey_index: a.pkey_index,
                port: a.port_num,
                path_mtu: u8::try_from(a.path_mtu).map_err(|_| EINVAL)?,
                dest: RemoteQp {
                    hca: a.dlid,
                    qpn: a.dest_qp_num,
                },
                rq_psn: a.rq_psn,
                sq_psn: a.sq_psn,
                max_dest_rd_atomic: a.max_dest_rd_atomic,
                max_rd_atomic: a.max_rd_atomic,
                min_rnr_timer: a.min_rnr_timer,
                timeout: a.timeout,
                retry_cnt: a.retry_cnt,
                rnr_retry: a.rnr_retry,
                qkey: a.qkey,
                ..ConnAttrs::default()
            },
        })
    }
}

struct SqState {
    /// Producer counter in WQEBBs.
    pi: u16,
    /// Oldest uncompleted WQEBB.
    tail: u16,
    /// BlueFlame register half for the next doorbell.
    half: u8,
    /// wr_id, size (WQEBBs) and the completion opcode of a UMR (else
    /// `WC_FROM_CQE`), by WQEBB index of the first WQEBB.
    wrid: KVec<(u64, u8, u8)>,
}

struct RqState {
    head: u16,
    tail: u16,
    wrid: KVec<u64>,
}

/// QPs whose last reference went away where they could not be freed and
/// that the reap workqueue freed instead.
pub(crate) static QPS_REAPED: AtomicU64 = AtomicU64::new(0);
/// QPs freed in a context that may not sleep (never, by design: a test
/// and a log line watch it).
pub(crate) static QPS_FREED_ATOMIC: AtomicU64 = AtomicU64::new(0);

/// A queue pair: RC, UD or the GSI QP.
///
/// # Invariants
///
/// `sq_wqebbs` and `rq_wqes` are non-zero powers of two (ring indices are
/// masked with `n - 1`); the queue buffer and the doorbell record are the
/// device's from creation until `destroy` succeeds (`Backend::create_qp`).
#[pin_data(PinnedDrop)]
pub struct Qp {
    dev: Arc<Device>,
    pub(crate) qpn: u32,
    service: QpService,
    send_cq: Arc<Cq>,
    recv_cq: Arc<Cq>,
    sq_wqebbs: u32,
    rq_wqes: u32,
    /// The RQ, then the SQ at `sq_offset`, in one buffer as mlx5 lays a
    /// QP out (the device is given one page list).
    buf: DmaBuf,
    sq_offset: usize,
    dbr: DmaBuf,
    sig_all: bool,
    /// Destroyed: its CQs no longer count it.
    gone: AtomicBool,
    #[pin]
    sq: SpinLockIrq<SqState>,
    #[pin]
    rq: SpinLockIrq<RqState>,
    /// Frees the QP from the reap workqueue when a poller held its last
    /// reference (see [`WrIds::release`]); part of the QP, so that queuing
    /// it allocates nothing.
    #[pin]
    reap: Work<Qp>,
}

kernel::impl_has_work! {
    impl HasWork<Self> for Qp { self.reap }
}

impl WorkItem for Qp {
    type Pointer = Arc<Self>;

    fn run(this: Arc<Self>) {
        // Process context on the module's reap workqueue: the last
        // reference, so the QP and its queue memory are freed here.
        drop(this);
        QPS_REAPED.fetch_add(1, Ordering::Relaxed);
    }
}

#[pinned_drop]
impl PinnedDrop for Qp {
    fn drop(self: Pin<&mut Self>) {
        if !crate::work::may_sleep() {
            QPS_FREED_ATOMIC.fetch_add(1, Ordering::Relaxed);
            pr_err!("qp {:#x} freed where it may not sleep\n", self.qpn);
        }
    }
}

/// Writes the gather list `sges` as data segments into `w` from byte
/// `pos`; returns the position after them.
fn put_gather(w: &mut [u8; MAX_WQE_SIZE], mut pos: usize, sges: &[Sge]) -> Result<usize> {
    for s in sges {
        let d = DataSeg {
            byte_count: s.length,
            lkey: s.lkey,
            addr: s.addr,
        };
        let mut b16 = [0u8; DataSeg::SIZE];
        d.encode(&mut b16);
        w.get_mut(pos..pos + DataSeg::SIZE)
            .ok_or(EINVAL)?
            .copy_from_slice(&b16);
        pos += DataSeg::SIZE;
    }
    Ok(pos)
}

fn pow2(n: u32) -> Result<u32> {
    n.max(1).checked_next_power_of_two().ok_or(EINVAL)
}

impl Qp {
    /// Creates a QP in RESET.
    pub(crate) fn new(
        pd: &Pd,
        send_cq: &Arc<Cq>,
        recv_cq: &Arc<Cq>,
        caps: &QpCaps,
    ) -> Result<Arc<Self>> {
        let dev = &pd.dev;
        if caps.max_send_sge as usize > MAX_SGE || caps.max_recv_sge as usize > MAX_SGE {
            return Err(EINVAL);
        }
        if caps.max_send_wr > MAX_QP_WR || caps.max_recv_wr > MAX_QP_WR {
            return Err(EINVAL);
        }
        // A WQE with MAX_SGE data segments and an atomic segment spans at
        // most 3 WQEBBs; size the SQ so `max_send_wr` of them fit.
        let sq_wqebbs = pow2(caps.max_send_wr.checked_mul(4).ok_or(EINVAL)?)?;
        let rq_wqes = pow2(caps.max_recv_wr)?;
        if send_cq.hca() != usize::from(pd.hca()) || recv_cq.hca() != usize::from(pd.hca()) {
            return Err(EINVAL);
        }
        let sq_offset = usize::try_from(rq_wqes.checked_mul(RQ_STRIDE).ok_or(EINVAL)?)?;
        let buf = dev
            .be
            .alloc_queue(sq_offset + sq_wqebbs as usize * WQEBB_SIZE)?;
        let dbr = dev.be.alloc_queue(QP_DBR_SIZE)?;
        let mut wrid = KVec::with_capacity(sq_wqebbs as usize, GFP_KERNEL)?;
        for _ in 0..sq_wqebbs {
            wrid.push((0u64, 1u8, WC_FROM_CQE), GFP_KERNEL)?;
        }
        let mut rwrid = KVec::with_capacity(rq_wqes as usize, GFP_KERNEL)?;
        for _ in 0..rq_wqes {
            rwrid.push(0u64, GFP_KERNEL)?;
        }
        let attr = QpAttr {
            service: caps.service,
            pdn: pd.pdn,
            send_cqn: send_cq.cqn,
            recv_cqn: recv_cq.cqn,
            sq_wqebbs,
            sq_buf_addr: buf.dma_addr() + sq_offset as u64,
            rq_wqes,
            rq_stride: RQ_STRIDE,
            rq_buf_addr: buf.dma_addr(),
            buf_pages: None,
            dbr_addr: dbr.dma_addr(),
            uar_addr: dev.be.kernel_uar()?,
            bfreg: 0,
            max_send_sge: MAX_SGE as u32,
            max_inline_data: 0,
        };
        // Allocated first, so that nothing can fail between the device's
        // QP and the `Qp` that owns its memory.
        let slot = UniqueArc::<Self>::new_uninit(GFP_KERNEL)?;
        pd.check_live()?;
        // The CQs count the QP before it exists, so that neither can be
        // destroyed under it.
        send_cq.hold_for_qp()?;
        if let Err(e) = recv_cq.hold_for_qp() {
            send_cq.release_for_qp();
            return Err(e);
        }
        let release = || {
            send_cq.release_for_qp();
            recv_cq.release_for_qp();
        };
        let qpn = match dev.be.create_qp(&attr, [&buf, &dbr]) {
            Ok(q) => q,
            Err(e) => {
                release();
                return Err(e);
            }
        };
        let qp = slot.write_pin_init(pin_init!(Self {
            dev: dev.clone(),
            qpn,
            service: caps.service,
            send_cq: send_cq.clone(),
            recv_cq: recv_cq.clone(),
            sq_wqebbs,
            rq_wqes,
            buf,
            sq_offset,
            dbr,
            sig_all: caps.sq_sig_all,
            gone: AtomicBool::new(false),
            sq <- new_spinlock_irq!(SqState { pi: 0, tail: 0, half: 0, wrid }, "rmlx5_qp_sq"),
            rq <- new_spinlock_irq!(RqState { head: 0, tail: 0, wrid: rwrid }, "rmlx5_qp_rq"),
            reap <- new_work!("rmlx5_qp_reap"),
        }));
        let qp: Arc<Self> = match qp {
            Ok(qp) => qp.into(),
            Err(never) => match never {},
        };
        let added = dev.events.lock().add_qp(qpn, qp.clone());
        if let Err(e) = added {
            // A QPN the tables cannot hold: its CQEs could not be matched.
            if qp.destroy().is_err() {
                // The device keeps the QP: its memory stays with it.
                core::mem::forget(qp);
            }
            return Err(e);
        }
        Ok(qp)
    }

    /// Destroys the QP: it leaves the device at once (no further CQE), and
    /// the poll lookup table. Polling its CQ afterwards skips its CQEs. A
    /// second destroy (after the device released it, see
    /// `ulp::objects::release_device`) succeeds and does nothing; callers
    /// serialise destroys of one QP.
    pub(crate) fn destroy(&self) -> Result {
        if self.gone.load(Ordering::Acquire) {
            return Ok(());
        }
        self.dev.be.destroy_qp(self.qpn, [&self.buf, &self.dbr])?;
        self.gone.store(true, Ordering::Release);
        self.send_cq.release_for_qp();
        self.recv_cq.release_for_qp();
        self.dev.events.lock().remove_qp(self.qpn, self);
        Ok(())
    }

    /// Index of the device (`rmlx5_<n>`).
    pub(crate) fn hca(&self) -> u16 {
        self.dev.index
    }

    /// Whether the QP is destroyed.
    pub(crate) fn is_destroyed(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    /// The QP's state as the HCA has it (`enum ib_qp_state`): it moves to
    /// ERR by itself on a completion error. `EINVAL` once destroyed.
    pub(crate) fn state(&self) -> Result<u32> {
        if self.gone.load(Ordering::Acquire) {
            return Err(EINVAL);
        }
        Ok(self.dev.be.qp_state(self.qpn)? as u32)
    }

    /// Modifies the QP (IB modify-QP semantics, `IB_QP_*` mask bits);
    /// `EINVAL` once destroyed.
    pub(crate) fn modify(&self, a: &QpAttrC, mask: u32) -> Result {
        if self.gone.load(Ordering::Acquire) {
            return Err(EINVAL);
        }
        let m = a.modify_request(mask)?;
        let state = m.state;
        let to_reset = mask & 1 != 0 && state == QpState::Reset;
        // The backend may sleep (a command to a PCI function): no queue
        // lock is held across it. Posting while the QP is being reset is
        // the ULP's bug either way.
        self.dev.be.modify_qp(self.qpn, &m)?;
        if to_reset {
            let (mut sq, mut rq) = (self.sq.lock(), self.rq.lock());
            sq.pi = 0;
            sq.tail = 0;
            sq.half = 0;
            rq.head = 0;
            rq.tail = 0;
            self.dbr.write(0, &[0u8; QP_DBR_SIZE])?;
        }
        // Moving to ERR schedules flush CQEs: let the device write them.
        self.dev.be.run();
        Ok(())
    }

    /// Builds one WQE at the SQ producer counter. Returns the control
    /// segment's first 16 bytes.
    fn build_wqe(&self, sq: &mut SqState, wr: &SendReq<'_>) -> Result<[u8; 16]> {
        if wr.sges.len() > MAX_SGE {
            return Err(EINVAL);
        }
        if self.service != QpService::Rc {
            return self.build_ud(sq, wr);
        }
        if wr.ud.is_some() {
            return Err(EINVAL);
        }
        if matches!(wr.opcode, WR_REG_MR | WR_LOCAL_INV) {
            return self.build_umr(sq, wr);
        }
        let (opcode, raddr, atomic) = match wr.opcode {
            WR_SEND => (SendOpcode::Send, false, 0),
            WR_SEND_WITH_IMM => (SendOpcode::SendImm, false, 0),
            WR_RDMA_WRITE => (SendOpcode::RdmaWrite, true, 0),
            WR_RDMA_WRITE_WITH_IMM => (SendOpcode::RdmaWriteImm, true, 0),
            WR_RDMA_READ => (SendOpcode::RdmaRead, true, 0),
            WR_SEND_WITH_INV => (SendOpcode::SendInval, false, 0),
            WR_ATOMIC_CMP_AND_SWP => (SendOpcode::AtomicCs, true, 1),
            WR_ATOMIC_FETCH_AND_ADD => (SendOpcode::AtomicFa, true, 1),
            WR_MASKED_ATOMIC_CMP_AND_SWP => (SendOpcode::AtomicMaskedCs, true, 2),
            WR_MASKED_ATOMIC_FETCH_AND_ADD => (SendOpcode::AtomicMaskedFa, true, 2),
            _ => return Err(EINVAL),
        };
        let mut w = [0u8; MAX_WQE_SIZE];
        let mut pos = CtrlSeg::SIZE;
        let seg16 = |w: &mut [u8; MAX_WQE_SIZE], pos: &mut usize, f: &dyn Fn(&mut [u8; 16])| {
            let mut b = [0u8; 16];
            f(&mut b);
            if let Some(d) = w.get_mut(*pos..*pos + 16) {
                d.copy_from_slice(&b);
            }
            *pos += 16;
        };
        if raddr {
            let r = RaddrSeg {
                raddr: wr.remote_addr,
                rkey: wr.rkey,
            };
            seg16(&mut w, &mut pos, &|b| r.encode(b));
        }
        match (wr.opcode, atomic) {
            (WR_ATOMIC_CMP_AND_SWP, 1) => {
                let a = AtomicSeg {
                    swap_add: wr.swap,
                    compare: wr.compare_add,
                };
                seg16(&mut w, &mut pos, &|b| a.encode(b));
            }
            (_, 1) => {
                let a = AtomicSeg {
                    swap_add: wr.compare_add,
                    compare: 0,
                };
                seg16(&mut w, &mut pos, &|b| a.encode(b));
            }
            (_, 2) => {
                let a = if wr.opcode == WR_MASKED_ATOMIC_CMP_AND_SWP {
                    MaskedAtomicSeg {
                        swap_add: wr.swap,
                        compare: wr.compare_add,
                        swap_add_mask: wr.swap_mask,
                        compare_mask: wr.compare_add_mask,
                    }
                } else {
                    MaskedAtomicSeg {
                        swap_add: wr.compare_add,
                        compare: 0,
                        swap_add_mask: wr.compare_add_mask,
                        compare_mask: 0,
                    }
                };
                let mut b = [0u8; 32];
                a.encode(&mut b);
                if let Some(d) = w.get_mut(pos..pos + 32) {
                    d.copy_from_slice(&b);
                }
                pos += 32;
            }
            _ => {}
        }
        pos = put_gather(&mut w, pos, wr.sges)?;
        self.finish_wqe(
            sq,
            &mut w,
            pos,
            opcode,
            wr,
            wr.flags & SEND_SOLICITED != 0,
            // SEND_WITH_INV carries the rkey to invalidate where the
            // others carry immediate data.
            if wr.opcode == WR_SEND_WITH_INV {
                wr.rkey
            } else {
                u32::from_be(wr.imm_data)
            },
            WC_FROM_CQE,
        )
    }

    /// Builds the WQE of a UD or GSI send: control segment, the datagram
    /// segment (the AH's address vector with the destination QPN and
    /// Q_Key), the gather list. Only SEND and SEND with immediate.
    fn build_ud(&self, sq: &mut SqState, wr: &SendReq<'_>) -> Result<[u8; 16]> {
        let ud = wr.ud.ok_or(EINVAL)?;
        let opcode = match wr.opcode {
            WR_SEND => SendOpcode::Send,
            WR_SEND_WITH_IMM => SendOpcode::SendImm,
            _ => return Err(EINVAL),
        };
        if ud.qpn > 0xff_ffff {
            return Err(EINVAL);
        }
        let mut w = [0u8; MAX_WQE_SIZE];
        let mut pos = CtrlSeg::SIZE;
        let mut av = DatagramSeg::decode(ud.av);
        av.qkey = ud.qkey;
        av.dqpn = ud.qpn;
        let mut b = [0u8; DatagramSeg::SIZE];
        av.encode(&mut b);
        w.get_mut(pos..pos + DatagramSeg::SIZE)
            .ok_or(EINVAL)?
            .copy_from_slice(&b);
        pos += DatagramSeg::SIZE;
        pos = put_gather(&mut w, pos, wr.sges)?;
        self.finish_wqe(
            sq,
            &mut w,
            pos,
            opcode,
            wr,
            wr.flags & SEND_SOLICITED != 0,
            u32::from_be(wr.imm_data),
            WC_FROM_CQE,
        )
    }

    /// Builds the UMR WQE of an `IB_WR_REG_MR` or `IB_WR_LOCAL_INV`, as
    /// mlx5_ib does: control segment (`imm`: the mkey), UMR control
    /// segment, mkey context and, for a registration, a data segment
    /// pointing at the MR's page list.
    fn build_umr(&self, sq: &mut SqState, wr: &SendReq<'_>) -> Result<[u8; 16]> {
        if !wr.sges.is_empty() {
            return Err(EINVAL);
        }
        let (umr, mkey, xlt, wc) = if wr.opcode == WR_REG_MR {
            let m = wr.mr.and_then(Mr::fast_mapping).ok_or(EINVAL)?;
            if m.pages == 0 || wr.mr.is_some_and(|mr| mr.hca() != self.dev.index) {
                return Err(EINVAL);
            }
            let atomic = wr.access & Access::REMOTE_ATOMIC.bits() != 0;
            let mut flags =
                mkey_flags::LOCAL_READ | mkey_flags::UMR_EN | mkey_flags::ACCESS_MODE_MTT;
            for (ib, perm) in [
                (Access::LOCAL_WRITE, mkey_flags::LOCAL_WRITE),
                (Access::REMOTE_READ, mkey_flags::REMOTE_READ),
                (Access::REMOTE_WRITE, mkey_flags::REMOTE_WRITE),
                (Access::REMOTE_ATOMIC, mkey_flags::ATOMIC),
            ] {
                if wr.access & ib.bits() != 0 {
                    flags |= perm;
                }
            }
            let list = (m.pages as usize * MTT_SIZE).next_multiple_of(64);
            let octowords = u16::try_from(list / 16).map_err(|_| EINVAL)?;
            let umr = UmrCtrlSeg {
                flags: umr_flags::CHECK_NOT_FREE,
                xlt_octowords: octowords,
                mkey_mask: mkey_mask::FAST_REG | if atomic { mkey_mask::A } else { 0 },
                ..UmrCtrlSeg::default()
            };
            let mkey = MkeySeg {
                flags,
                qpn_mkey7_0: 0xffff_ff00 | (wr.rkey & 0xff),
                flags_pd: MKEY_REMOTE_INVAL,
                start_addr: m.iova,
                len: m.length,
                xlt_oct_size: u32::from(octowords),
                log2_page_size: m.page_shift,
                ..MkeySeg::default()
            };
            let xlt = DataSeg {
                byte_count: list as u32,
                lkey: m.list_key,
                addr: m.list,
            };
            (umr, mkey, Some(xlt), WC_REG_MR)
        } else {
            let umr = UmrCtrlSeg {
                flags: umr_flags::INLINE,
                mkey_mask: mkey_mask::FREE,
                ..UmrCtrlSeg::default()
            };
            let mkey = MkeySeg {
                status: MKEY_STATUS_FREE,
                ..MkeySeg::default()
            };
            (umr, mkey, None, WC_LOCAL_INV)
        };
        let mut w = [0u8; MAX_WQE_SIZE];
        let mut pos = CtrlSeg::SIZE;
        let mut b48 = [0u8; UmrCtrlSeg::SIZE];
        umr.encode(&mut b48);
        w.get_mut(pos..pos + UmrCtrlSeg::SIZE)
            .ok_or(EINVAL)?
            .copy_from_slice(&b48);
        pos += UmrCtrlSeg::SIZE;
        let mut b64 = [0u8; MkeySeg::SIZE];
        mkey.encode(&mut b64);
        w.get_mut(pos..pos + MkeySeg::SIZE)
            .ok_or(EINVAL)?
            .copy_from_slice(&b64);
        pos += MkeySeg::SIZE;
        if let Some(d) = xlt {
            let mut b16 = [0u8; DataSeg::SIZE];
            d.encode(&mut b16);
            w.get_mut(pos..pos + DataSeg::SIZE)
                .ok_or(EINVAL)?
                .copy_from_slice(&b16);
            pos += DataSeg::SIZE;
        }
        self.finish_wqe(sq, &mut w, pos, SendOpcode::Umr, wr, false, wr.rkey, wc)
    }

    /// Completes a WQE whose segments after the control segment are in
    /// `w[16..pos]`: checks the SQ has room, writes the control segment
    /// (`imm` in host order), copies the WQEBBs into the SQ, records the
    /// wr_id and `wc` (the completion opcode when the CQE does not tell,
    /// else `WC_FROM_CQE`) and advances the producer counter. Returns the
    /// control segment's bytes.
    #[allow(clippy::too_many_arguments)]
    fn finish_wqe(
        &self,
        sq: &mut SqState,
        w: &mut [u8; MAX_WQE_SIZE],
        pos: usize,
        opcode: SendOpcode,
        wr: &SendReq<'_>,
        solicited: bool,
        imm: u32,
        wc: u8,
    ) -> Result<[u8; 16]> {
        let ds = u8::try_from(pos / DS_SIZE).map_err(|_| EINVAL)?;
        let wqebbs = pos.div_ceil(WQEBB_SIZE);
        let used = u32::from(sq.pi.wrapping_sub(sq.tail));
        if used + wqebbs as u32 > self.sq_wqebbs {
            return Err(ENOMEM);
        }
        let signaled = self.sig_all || wr.flags & SEND_SIGNALED != 0;
        let ctrl = CtrlSeg {
            opmod: 0,
            wqe_index: sq.pi,
            opcode,
            qpn: self.qpn,
            ds,
            signature: 0,
            fence_mode: if wr.flags & SEND_FENCE != 0 {
                FENCE_MODE_FENCE
            } else {
                FENCE_MODE_NONE
            },
            ce: if signaled {
                CE_CQ_UPDATE
            } else {
                CE_ERROR_ONLY
            },
            solicited,
            imm,
        };
        let mut c = [0u8; 16];
        ctrl.encode(&mut c);
        if let Some(d) = w.get_mut(..16) {
            d.copy_from_slice(&c);
        }
        // `sq_wqebbs` is a power of two (type invariant of `Qp`).
        let n = self.sq_wqebbs as usize;
        for k in 0..wqebbs {
            let idx = (usize::from(sq.pi) + k) & (n - 1);
            let bb = w.get(k * WQEBB_SIZE..(k + 1) * WQEBB_SIZE).ok_or(EINVAL)?;
            self.buf.write(self.sq_offset + idx * WQEBB_SIZE, bb)?;
        }
        let first = usize::from(sq.pi) & (n - 1);
        if let Some(e) = sq.wrid.get_mut(first) {
            *e = (wr.wr_id, wqebbs as u8, wc);
        }
        sq.pi = sq.pi.wrapping_add(wqebbs as u16);
        Ok(c)
    }

    /// Posts send work requests; on error returns the index of the first
    /// one not posted.
    #[cfg(CONFIG_KUNIT)]
    pub(crate) fn post_send(&self, wrs: &[SendReq<'_>]) -> Result<(), (usize, Error)> {
        self.post_send_from(wrs.iter().map(Ok))
    }

    /// Posts the work requests `wrs` yields, under one SQ lock and with one
    /// doorbell, as they come: a caller converting another list (a ULP's
    /// `ib_send_wr` chain) needs no array of requests on its stack. An
    /// `Err` item stops the post there like a request the QP refuses; the
    /// error names its index.
    pub(crate) fn post_send_from<'a, R, I>(&self, wrs: I) -> Result<(), (usize, Error)>
    where
        R: core::borrow::Borrow<SendReq<'a>>,
        I: Iterator<Item = Result<R>>,
    {
        if self.gone.load(Ordering::Acquire) {
            return Err((0, EINVAL));
        }
        let mut sq = self.sq.lock();
        let mut last = None;
        let mut err = None;
        for (i, wr) in wrs.enumerate() {
            match wr.and_then(|wr| self.build_wqe(&mut sq, wr.borrow())) {
                Ok(c) => last = Some(c),
                Err(e) => {
                    err = Some((i, e));
                    break;
                }
            }
        }
        if let Some(ctrl) = last {
            // WQEs before the doorbell record, the record before the
            // doorbell.
            dma_mb(Write);
            let _ = self.dbr.write_word(QP_DBR_SEND_OFFSET, counter_word(sq.pi));
            dma_mb(Write);
            let half = sq.half;
            sq.half ^= 1;
            let r = self.ring_send(&ctrl, half);
            if let Err(e) = r {
                pr_warn!("qp {:#x}: send doorbell refused: {:?}\n", self.qpn, e);
            }
        }
        drop(sq);
        self.dev.be.run();
        if last.is_some() {
            self.after_fatal_post(&self.send_cq);
        }
        err.map_or(Ok(()), Err)
    }

    /// On a failed device the WQEs just posted complete in software, as
    /// flushes ([`Cq::poll`]); a consumer waiting for an event (ib_drain's
    /// completion) gets one, as mlx5_ib calls the handler of a drain on a
    /// device in internal error.
    fn after_fatal_post(&self, cq: &Cq) {
        if !self.dev.is_fatal() {
            return;
        }
        // A polling-only CQ is not in the table: its consumer polls anyway.
        let queued = {
            let mut t = self.dev.events.lock();
            t.cq(cq.cqn).is_some() && t.queue_cq(cq.cqn)
        };
        if queued {
            self.dev.kick_dispatch();
        }
    }

    fn ring_send(&self, ctrl: &[u8; 16], half: u8) -> Result {
        self.dev.be.ring_send(self.qpn, ctrl, half)
    }

    /// Posts receive work requests (`(wr_id, sges)`).
    pub(crate) fn post_recv(&self, wrs: &[(u64, &[Sge])]) -> Result<(), (usize, Error)> {
        if self.gone.load(Ordering::Acquire) {
            return Err((0, EINVAL));
        }
        let mut rq = self.rq.lock();
        let mut err = None;
        let mut posted = false;
        for (i, (wr_id, sges)) in wrs.iter().enumerate() {
            if sges.len() > MAX_SGE {
                err = Some((i, EINVAL));
                break;
            }
            if u32::from(rq.head.wrapping_sub(rq.tail)) >= self.rq_wqes {
                err = Some((i, ENOMEM));
                break;
            }
            let mut segs = [DataSeg::TERMINATOR; MAX_SGE];
            for (d, s) in segs.iter_mut().zip(sges.iter()) {
                *d = DataSeg {
                    byte_count: s.length,
                    lkey: s.lkey,
                    addr: s.addr,
                };
            }
            let mut slot = [0u8; RQ_STRIDE as usize];
            let used = segs.get(..sges.len()).unwrap_or(&[]);
            if write_recv_wqe(&mut slot, used).is_err() {
                err = Some((i, EINVAL));
                break;
            }
            let idx = (u32::from(rq.head) & (self.rq_wqes - 1)) as usize;
            if self.buf.write(idx * RQ_STRIDE as usize, &slot).is_err() {
                err = Some((i, EINVAL));
                break;
            }
            if let Some(e) = rq.wrid.get_mut(idx) {
                *e = *wr_id;
            }
            rq.head = rq.head.wrapping_add(1);
            posted = true;
        }
        if posted {
            dma_mb(Write);
            let _ = self
                .dbr
                .write_word(QP_DBR_RECV_OFFSET, counter_word(rq.head));
            self.dev.be.ring_recv(self.qpn);
        }
        drop(rq);
        self.dev.be.run();
        if posted {
            self.after_fatal_post(&self.recv_cq);
        }
        err.map_or(Ok(()), Err)
    }

    /// The wr_id of the send WQE at `wqe_counter`, retiring it and every
    /// unsignaled WQE before it.
    pub(crate) fn complete_send(&self, wqe_counter: u16) -> (u64, Option<u32>) {
        let mut sq = self.sq.lock();
        let idx = usize::from(wqe_counter) & (self.sq_wqebbs as usize - 1);
        let (wr_id, n, wc) = sq.wrid.get(idx).copied().unwrap_or((0, 1, WC_FROM_CQE));
        sq.tail = wqe_counter.wrapping_add(u16::from(n));
        (wr_id, (wc != WC_FROM_CQE).then_some(u32::from(wc)))
    }

    /// The wr_id of the receive WQE at `counter`.
    pub(crate) fn complete_recv(&self, counter: u16) -> u64 {
        let mut rq = self.rq.lock();
        let idx = (u32::from(counter) & (self.rq_wqes - 1)) as usize;
        rq.tail = counter.wrapping_add(1);
        rq.wrid.get(idx).copied().unwrap_or(0)
    }
}

impl WrIds for Qp {
    fn complete_send(&self, wqe_counter: u16) -> (u64, Option<u32>) {
        Qp::complete_send(self, wqe_counter)
    }

    fn flush_one(&self, cqn: u32) -> Option<(u64, bool, Option<u32>)> {
        if self.send_cq.cqn == cqn {
            let mut sq = self.sq.lock();
            if sq.tail != sq.pi {
                let idx = usize::from(sq.tail) & (self.sq_wqebbs as usize - 1);
                let (wr_id, n, wc) = sq.wrid.get(idx).copied().unwrap_or((0, 1, WC_FROM_CQE));
                sq.tail = sq.tail.wrapping_add(u16::from(n.max(1)));
                return Some((wr_id, false, (wc != WC_FROM_CQE).then_some(u32::from(wc))));
            }
        }
        if self.recv_cq.cqn == cqn {
            let mut rq = self.rq.lock();
            if rq.tail != rq.head {
                let idx = (u32::from(rq.tail) & (self.rq_wqes - 1)) as usize;
                rq.tail = rq.tail.wrapping_add(1);
                return Some((rq.wrid.get(idx).copied().unwrap_or(0), true, None));
            }
        }
        None
    }

    fn complete_recv(&self, wqe_counter: u16) -> u64 {
        Qp::complete_recv(self, wqe_counter)
    }

    fn release(self: Arc<Self>) {
        let Some(last) = Arc::into_unique_or_drop(self) else {
            return;
        };
        let last: Arc<Self> = last.into();
        match crate::work::reap_queue() {
            // The QP's own work item, free since nobody else holds the QP:
            // it is queued, never refused.
            Some(q) => {
                if let Err(qp) = q.enqueue(last) {
                    drop(qp);
                }
            }
            // Only outside the module's lifetime, where no QP exists.
            None => drop(last),
        }
    }
}
