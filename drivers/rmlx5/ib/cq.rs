// SPDX-License-Identifier: GPL-2.0

//! Completion queues of kernel ULPs: CQE ring and doorbell record in module
//! memory, polled by owner bit, armed through the UAR CQ doorbell.
//!
//! A CQ created without a completion handler is polling-only: it is never
//! entered in the dispatch table, cannot be armed, and an EQE naming it is
//! counted and dropped (the CVE-2025-68209 class of bug cannot happen).
//!
//! Lock order: `Cq::poll`, then `Qp::sq`/`Qp::rq` (wr_id lookup), then
//! whatever the backend takes (the software HCA's fabric lock). The QP of a CQE is looked up under the
//! HCA's table lock (`core/events.rs`), a leaf released before the QP's
//! own lock is taken.

use core::mem::ManuallyDrop;
use core::sync::atomic::{
    AtomicBool,
    AtomicU32,
    AtomicU64,
    Ordering, //
};
use kernel::{
    new_mutex, new_spinlock_irq,
    prelude::*,
    sync::{
        barrier::{
            dma_mb,
            Read,
            Write, //
        },
        Arc,
        Mutex,
        SpinLockIrq,
        UniqueArc, //
    },
};

use crate::hca_model::cq::CqAttr;
use crate::mem::DmaBuf;
use crate::mlx5_core::device::Device;
use crate::mlx5_core::events::{
    CompTarget,
    WrIds, //
};
use crate::mlx5_prm::{
    cqe::{
        Cqe64,
        ErrCqe,
        OpOwn,
        CQE_SIZE,
        OP_OWN_OFFSET, //
    },
    doorbell::{
        set_ci_word,
        ArmCmd,
        CqArm,
        CQ_DBR_ARM_OFFSET,
        CQ_DBR_SET_CI_OFFSET,
        CQ_DBR_SIZE, //
    },
    opcode::{
        CqeOpcode,
        CqeSyndrome,
        SendOpcode, //
    },
    ring,
};

/// A completion handler: function and context, called in BH context.
pub(crate) type CompHandler = (unsafe extern "C" fn(*mut Cq, *mut c_void), usize);

/// Where the events of a user-space object go (uverbs: the completion
/// channel and the context's async file). `comp_event` is called in
/// hard-IRQ context by the EQ handler (or in BH context by the dispatcher),
/// `async_event` in BH context: implementations never sleep or allocate,
/// and take only interrupt-safe spinlocks (as ib_uverbs' completion
/// handler, which mlx5_ib calls from its EQ interrupt).
pub(crate) trait EventSink: Send + Sync {
    /// The CQ got a completion while armed.
    fn comp_event(&self);
    /// An async event; `event_type` is the `mlx5_prm` EQE event type.
    fn async_event(&self, event_type: u8);
}

/// Who a CQ's completion events go to.
pub(crate) enum Handler {
    /// A kernel ULP's C function.
    Ulp(CompHandler),
    /// A user-space CQ's event files.
    User(Arc<dyn EventSink>),
}

/// The memory of a CQ created on caller-provided buffers (user CQs): the
/// CQE ring (every `op_own` already 0xf0) and the doorbell record page,
/// and the UAR page its arm doorbells are rung on.
pub(crate) struct CqMem {
    /// The CQE ring, `CQE_SIZE << log_size` bytes or more.
    pub(crate) buf: DmaBuf,
    /// The doorbell record at byte 0 (zeroed).
    pub(crate) dbr: DmaBuf,
    /// DMA address of the UAR page (registered by its owner).
    pub(crate) uar_addr: u64,
}

use kernel::ffi::c_void;

/// Work completion, laid out as `struct rmlx5_ib_wc` in
/// `include/rdma/rmlx5_ib.h`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct Wc {
    /// The work request's id.
    pub wr_id: u64,
    /// `enum rmlx5_ib_wc_status` (= `enum ib_wc_status`).
    pub status: u32,
    /// `enum rmlx5_ib_wc_opcode` (= `enum ib_wc_opcode`).
    pub opcode: u32,
    /// Vendor syndrome of an error completion.
    pub vendor_err: u32,
    /// Bytes transferred.
    pub byte_len: u32,
    /// Local QPN.
    pub qp_num: u32,
    /// Immediate data, big-endian as on the wire.
    pub imm_data: u32,
    /// `RMLX5_IB_WC_WITH_IMM` (2).
    pub wc_flags: u32,
    /// Receive completions: the sender's QP number (the CQE's
    /// `flags_rqpn`), like `ib_wc.src_qp`; 0 for send completions.
    pub src_qp: u32,
    /// Receive completions on an InfiniBand port: the sender's LID.
    pub slid: u16,
    /// Receive completions on an InfiniBand port: the packet's SL.
    pub sl: u8,
    /// Receive completions on a RoCE port: the network header in the
    /// buffer's first 40 bytes (`enum rdma_network_type`), with
    /// `WC_WITH_NETWORK_HDR_TYPE` in `wc_flags`.
    pub network_hdr_type: u8,
    /// P_Key index (the port has one P_Key).
    pub pkey_index: u16,
    /// Padding.
    pub reserved: u16,
}

/// `IB_WC_WITH_INVALIDATE`: the sender invalidated the rkey in
/// `imm_data` (host order).
pub(crate) const WC_WITH_INVALIDATE: u32 = 1 << 2;
/// `IB_WC_GRH`: the first 40 bytes of the receive buffer hold a network
/// header.
pub(crate) const WC_GRH: u32 = 1;
/// `IB_WC_WITH_NETWORK_HDR_TYPE`.
pub(crate) const WC_WITH_NETWORK_HDR_TYPE: u32 = 1 << 6;
// `enum rdma_network_type` values.
const NETWORK_ROCE_V1: u8 = 1;
const NETWORK_IPV4: u8 = 2;
const NETWORK_IPV6: u8 = 3;

/// What a responder CQE says of the packet's path, as mlx5_ib reads it:
/// on an InfiniBand port the sender's LID and SL; on a RoCE port the
/// network header type, carried in the SL's low bits (`flags_rqpn` 25:24:
/// 0 a GRH, RoCE v1; 1 IPv6; 2 IPv4). Returns the `wc_flags` to add.
fn path_of(c: &Cqe64, roce: bool, wc: &mut Wc) -> u32 {
    let mut flags = if c.grh != 0 { WC_GRH } else { 0 };
    if roce {
        wc.network_hdr_type = match c.sl & 0x3 {
            0 => NETWORK_ROCE_V1,
            1 => NETWORK_IPV6,
            _ => NETWORK_IPV4,
        };
        flags |= WC_WITH_NETWORK_HDR_TYPE;
    } else {
        wc.slid = c.slid;
        wc.sl = c.sl;
    }
    flags
}

/// A QP a CQE named, held while the poll lock is: if the QP was destroyed
/// meanwhile this may be its last reference, which must not free it with
/// interrupts off, so it is given back through [`WrIds::release`].
pub(super) struct PolledQp(ManuallyDrop<Arc<dyn WrIds>>);

impl core::ops::Deref for PolledQp {
    type Target = dyn WrIds;

    fn deref(&self) -> &Self::Target {
        &**self.0
    }
}

impl Drop for PolledQp {
    fn drop(&mut self) {
        // SAFETY: `self.0` is taken once, here, and not used afterwards.
        let q = unsafe { ManuallyDrop::take(&mut self.0) };
        q.release();
    }
}

// `enum ib_wc_status` values.
pub(crate) const WC_SUCCESS: u32 = 0;
const WC_LOC_LEN_ERR: u32 = 1;
const WC_LOC_QP_OP_ERR: u32 = 2;
const WC_LOC_PROT_ERR: u32 = 4;
pub(crate) const WC_WR_FLUSH_ERR: u32 = 5;
const WC_MW_BIND_ERR: u32 = 6;
const WC_BAD_RESP_ERR: u32 = 7;
const WC_LOC_ACCESS_ERR: u32 = 8;
const WC_REM_INV_REQ_ERR: u32 = 9;
pub(crate) const WC_REM_ACCESS_ERR: u32 = 10;
const WC_REM_OP_ERR: u32 = 11;
pub(crate) const WC_RETRY_EXC_ERR: u32 = 12;
pub(crate) const WC_RNR_RETRY_EXC_ERR: u32 = 13;
const WC_REM_ABORT_ERR: u32 = 19;
const WC_GENERAL_ERR: u32 = 21;
// `enum ib_wc_opcode` values.
pub(crate) const WC_SEND: u32 = 0;
pub(crate) const WC_RDMA_WRITE: u32 = 1;
pub(crate) const WC_RDMA_READ: u32 = 2;
pub(crate) const WC_COMP_SWAP: u32 = 3;
pub(crate) const WC_FETCH_ADD: u32 = 4;
pub(crate) const WC_MASKED_COMP_SWAP: u32 = 11;
pub(crate) const WC_MASKED_FETCH_ADD: u32 = 12;
pub(crate) const WC_RECV: u32 = 128;
pub(crate) const WC_RECV_RDMA_WITH_IMM: u32 = 129;
/// `IB_WC_WITH_IMM`.
pub(crate) const WC_WITH_IMM: u32 = 2;

/// `IB_CQ_SOLICITED`, `IB_CQ_NEXT_COMP`, `IB_CQ_REPORT_MISSED_EVENTS`.
pub(crate) const CQ_SOLICITED: u32 = 1;
pub(crate) const CQ_NEXT_COMP: u32 = 2;
pub(crate) const CQ_REPORT_MISSED_EVENTS: u32 = 4;

/// Consumer state of a CQ.
struct CqPoll {
    ci: u32,
    /// Set before DESTROY_CQ is sent, and left set if the command fails
    /// (a command that timed out may still have destroyed the CQ): no arm
    /// may reach the device after it, where the CQ may no longer exist.
    closing: bool,
}

/// A completion queue.
///
/// # Invariants
///
/// `buf` holds `1 << log_size` CQEs; `buf` and `dbr` are the device's
/// from creation until `destroy` succeeds (`Backend::create_cq`). `busy`
/// is raised only under the HCA's table lock while the CQ is in its CQN
/// table (by the dispatcher, or the EQ handler delivering to a user CQ
/// directly), and lowered when that handler call returns.
#[pin_data]
pub struct Cq {
    dev: Arc<Device>,
    pub(crate) cqn: u32,
    log_size: u8,
    buf: DmaBuf,
    dbr: DmaBuf,
    /// The UAR page arm doorbells are rung on.
    uar_addr: u64,
    handler: Option<Handler>,
    #[pin]
    poll: SpinLockIrq<CqPoll>,
    /// Completion events received (the low 2 bits are the arm `sn`).
    arm_sn: AtomicU32,
    /// Handler calls running (the dispatcher's and the EQ handler's).
    busy: AtomicU32,
    /// Completion events (debugfs).
    pub(crate) events: AtomicU64,
    destroyed: AtomicBool,
    /// Kernel QPs using the CQ (counted twice by a QP whose send and
    /// receive CQ it is): destroy refuses with `EBUSY` while any does, as
    /// ib_core's use count does, without asking the device.
    qps: AtomicU32,
    /// Held by [`Cq::destroy`] around the device's destroy and `destroyed`.
    #[pin]
    destroy_lock: Mutex<()>,
}

impl Cq {
    /// Creates a CQ of at least `entries` CQEs on completion vector
    /// `vector` (modulo the number of completion EQs). Without a
    /// `handler` the CQ is polling-only.
    pub(crate) fn new(
        dev: &Arc<Device>,
        entries: u32,
        vector: u32,
        handler: Option<CompHandler>,
    ) -> Result<Arc<Self>> {
        let entries = entries.max(2).checked_next_power_of_two().ok_or(EINVAL)?;
        let log_size = u8::try_from(entries.trailing_zeros())?;
        let n = entries as usize;
        let buf = dev.be.alloc_queue(n.checked_mul(CQE_SIZE).ok_or(EINVAL)?)?;
        buf.fill_strided(OP_OWN_OFFSET, CQE_SIZE, n, ring::CQE_INIT_OP_OWN)?;
        let dbr = dev.be.alloc_queue(CQ_DBR_SIZE)?;
        let mem = CqMem {
            buf,
            dbr,
            uar_addr: dev.be.kernel_uar()?,
        };
        Self::create(dev, log_size, mem, vector, handler.map(Handler::Ulp))
    }

    /// Creates a CQ of `1 << log_size` CQEs on memory the caller provides
    /// (a user CQ: the pages the process maps), reporting to `sink`. The
    /// ring must already be initialised (`op_own` 0xf0) and the doorbell
    /// record zeroed.
    pub(crate) fn new_on(
        dev: &Arc<Device>,
        log_size: u8,
        mem: CqMem,
        vector: u32,
        sink: Arc<dyn EventSink>,
    ) -> Result<Arc<Self>> {
        let need = CQE_SIZE.checked_shl(u32::from(log_size)).ok_or(EINVAL)?;
        if mem.buf.len() < need || mem.dbr.len() < CQ_DBR_SIZE {
            return Err(EINVAL);
        }
        Self::create(dev, log_size, mem, vector, Some(Handler::User(sink)))
    }

    fn create(
        dev: &Arc<Device>,
        log_size: u8,
        mem: CqMem,
        vector: u32,
        handler: Option<Handler>,
    ) -> Result<Arc<Self>> {
        let CqMem { buf, dbr, uar_addr } = mem;
        let attr = CqAttr {
            log_size,
            buf_addr: buf.dma_addr(),
            buf_pages: None,
            dbr_addr: dbr.dma_addr(),
            eqn: dev.comp_eqn(vector)?,
            uar_addr,
        };
        // Allocated first, so that nothing can fail between the device's
        // CQ and the `Cq` that owns its memory.
        let slot = UniqueArc::<Self>::new_uninit(GFP_KERNEL)?;
        let cqn = dev.be.create_cq(&attr, [&buf, &dbr])?;
        let r = slot.write_pin_init(pin_init!(Self {
            dev: dev.clone(),
            cqn,
            log_size,
            buf,
            dbr,
            uar_addr,
            handler,
            poll <- new_spinlock_irq!(CqPoll { ci: 0, closing: false }, "rmlx5_cq_poll"),
            arm_sn: AtomicU32::new(0),
            busy: AtomicU32::new(0),
            events: AtomicU64::new(0),
            destroyed: AtomicBool::new(false),
            qps: AtomicU32::new(0),
            destroy_lock <- new_mutex!((), "rmlx5_cq_destroy"),
        }));
        let r: Arc<Self> = match r {
            Ok(r) => r.into(),
            Err(never) => match never {},
        };
        if r.handler.is_some() {
            let added = dev.events.lock().add_cq(cqn, r.clone());
            if let Err(e) = added {
                // A CQN the tables cannot hold: its events could not reach
                // it, so the CQ is not kept.
                if r.destroy().is_err() {
                    // The device keeps the CQ: its memory stays with it.
                    core::mem::forget(r);
                }
                return Err(e);
            }
        }
        Ok(r)
    }

    /// The user-space event sink of a user CQ.
    pub(crate) fn sink(&self) -> Option<&Arc<dyn EventSink>> {
        match &self.handler {
            Some(Handler::User(s)) => Some(s),
            _ => None,
        }
    }

    /// Counts a kernel QP about to be created on the CQ, under the destroy
    /// lock, so that a racing destroy either sees it or has already
    /// destroyed the CQ (`EINVAL`).
    pub(crate) fn hold_for_qp(&self) -> Result {
        let _g = self.destroy_lock.lock();
        if self.destroyed.load(Ordering::Acquire) {
            return Err(EINVAL);
        }
        self.qps.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// A kernel QP counted by [`Cq::hold_for_qp`] no longer uses the CQ.
    pub(crate) fn release_for_qp(&self) {
        self.qps.fetch_sub(1, Ordering::AcqRel);
    }

    /// Whether [`Cq::destroy`] succeeded.
    pub(crate) fn is_destroyed(&self) -> bool {
        self.destroyed.load(Ordering::Acquire)
    }

    /// Index of the HCA.
    pub(crate) fn hca(&self) -> usize {
        usize::from(self.dev.index)
    }

    /// Called by the EQ handler for every completion event of this CQ.
    pub(crate) fn note_event(&self) {
        self.arm_sn.fetch_add(1, Ordering::Relaxed);
        self.events.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a handler call starting (`true`) or finished (`false`): the
    /// BH dispatcher and the EQ handler's direct delivery (a user CQ) may
    /// each have one running.
    pub(crate) fn set_busy(&self, busy: bool) {
        if busy {
            self.busy.fetch_add(1, Ordering::AcqRel);
        } else {
            self.busy.fetch_sub(1, Ordering::Release);
        }
    }

    /// Calls the completion handler (BH context, from the dispatcher).
    pub(crate) fn call_handler(&self) {
        if self.destroyed.load(Ordering::Acquire) {
            return;
        }
        match &self.handler {
            Some(Handler::Ulp((f, ctx))) => {
                let this = core::ptr::from_ref(self).cast_mut();
                // SAFETY: The ULP registered `f` with `ctx` for this CQ; the
                // CQ is live (we hold a reference) and not destroyed, and
                // destroy waits for this call to return before the ULP may
                // free `ctx`.
                unsafe { f(this, *ctx as *mut c_void) };
            }
            Some(Handler::User(sink)) => sink.comp_event(),
            None => {}
        }
    }

    /// Delivers an async event to a user CQ's sink (BH context, from the
    /// dispatcher, with `busy` set like [`Cq::call_handler`]).
    pub(crate) fn call_async(&self, event_type: u8) {
        if self.destroyed.load(Ordering::Acquire) {
            return;
        }
        if let Some(sink) = self.sink() {
            sink.async_event(event_type);
        }
    }

    /// Polls up to `wc.len()` completions; returns how many were written.
    pub(crate) fn poll(&self, wc: &mut [Wc]) -> usize {
        let mut p = self.poll.lock();
        let log = u32::from(self.log_size);
        let mut n = 0;
        while n < wc.len() {
            let off = ring::ring_index(p.ci, log) as usize * CQE_SIZE;
            let Ok(op_own) = self.buf.read_u8(off + OP_OWN_OFFSET) else {
                break;
            };
            if !ring::cqe_sw_owned(op_own, p.ci, log) {
                break;
            }
            dma_mb(Read);
            let mut b = [0u8; CQE_SIZE];
            if self.buf.read(off, &mut b).is_err() {
                break;
            }
            p.ci = p.ci.wrapping_add(1);
            if let Some(w) = self.parse(&b, op_own) {
                if let Some(slot) = wc.get_mut(n) {
                    *slot = w;
                    n += 1;
                }
            }
        }
        if n != 0 {
            // Tell the HCA how far we consumed (overrun detection).
            dma_mb(Write);
            let _ = self.dbr.write_word(CQ_DBR_SET_CI_OFFSET, set_ci_word(p.ci));
        }
        if n < wc.len() && self.dev.is_fatal() {
            n += self.flush_software(wc.get_mut(n..).unwrap_or(&mut []));
        }
        n
    }

    /// On a failed device, which writes no CQE any more: completes the
    /// outstanding work requests of the kernel QPs on this CQ with flush
    /// errors, oldest first, as mlx5_ib's poll does for a device in
    /// internal error, so that ULPs draining their QPs see them finish.
    /// Under the poll lock, like the CQEs it stands for.
    fn flush_software(&self, wc: &mut [Wc]) -> usize {
        let (slots, qpn_base) = {
            let t = self.dev.events.lock();
            (t.qp_slots(), t.qpn_base())
        };
        let mut n = 0;
        for slot in 0..slots {
            if n == wc.len() {
                break;
            }
            let Some(q) = self.dev.events.lock().qp_at(slot) else {
                continue;
            };
            let q = PolledQp(ManuallyDrop::new(q));
            while let Some(out) = wc.get_mut(n) {
                let Some((wr_id, recv, recorded)) = q.flush_one(self.cqn) else {
                    break;
                };
                *out = Wc {
                    wr_id,
                    status: WC_WR_FLUSH_ERR,
                    opcode: match (recv, recorded) {
                        (true, _) => WC_RECV,
                        (false, Some(op)) => op,
                        (false, None) => WC_SEND,
                    },
                    qp_num: qpn_base.wrapping_add(slot as u32),
                    ..Wc::default()
                };
                n += 1;
            }
        }
        n
    }

    /// The kernel QP of a CQE, from the HCA's table (its own leaf lock,
    /// not the fabric lock the engine holds), for the poll lock's section.
    pub(super) fn polled_qp(&self, qpn: u32) -> Option<PolledQp> {
        let q = self.dev.events.lock().qp(qpn);
        q.map(|q| PolledQp(ManuallyDrop::new(q)))
    }

    /// Runs `f` under the poll lock, as [`Cq::poll`] parses CQEs.
    #[cfg(CONFIG_KUNIT)]
    pub(super) fn with_poll_lock<R>(&self, f: impl FnOnce() -> R) -> R {
        let _p = self.poll.lock();
        f()
    }

    fn parse(&self, b: &[u8; CQE_SIZE], op_own: u8) -> Option<Wc> {
        let op = OpOwn::decode(op_own).ok()?;
        let qp = |qpn: u32| self.polled_qp(qpn);
        match op.opcode {
            CqeOpcode::Req => {
                let c = Cqe64::decode(b).ok()?;
                let q = qp(c.qpn)?;
                let (wr_id, recorded) = q.complete_send(c.wqe_counter);
                let opcode = match recorded {
                    Some(op) => op,
                    None => match SendOpcode::try_from(c.send_opcode).ok()? {
                        SendOpcode::RdmaWrite | SendOpcode::RdmaWriteImm => WC_RDMA_WRITE,
                        SendOpcode::RdmaRead => WC_RDMA_READ,
                        SendOpcode::AtomicCs => WC_COMP_SWAP,
                        SendOpcode::AtomicFa => WC_FETCH_ADD,
                        SendOpcode::AtomicMaskedCs => WC_MASKED_COMP_SWAP,
                        SendOpcode::AtomicMaskedFa => WC_MASKED_FETCH_ADD,
                        _ => WC_SEND,
                    },
                };
                Some(Wc {
                    wr_id,
                    status: WC_SUCCESS,
                    opcode,
                    byte_len: c.byte_cnt,
                    qp_num: c.qpn,
                    ..Wc::default()
                })
            }
            CqeOpcode::RespSend
            | CqeOpcode::RespSendImm
            | CqeOpcode::RespSendInv
            | CqeOpcode::RespWrImm => {
                let c = Cqe64::decode(b).ok()?;
                let q = qp(c.qpn)?;
                let wr_id = q.complete_recv(c.wqe_counter);
                let (opcode, flags) = match op.opcode {
                    CqeOpcode::RespWrImm => (WC_RECV_RDMA_WITH_IMM, WC_WITH_IMM),
                    CqeOpcode::RespSendImm => (WC_RECV, WC_WITH_IMM),
                    CqeOpcode::RespSendInv => (WC_RECV, WC_WITH_INVALIDATE),
                    _ => (WC_RECV, 0),
                };
                let mut wc = Wc {
                    wr_id,
                    status: WC_SUCCESS,
                    opcode,
                    byte_len: c.byte_cnt,
                    qp_num: c.qpn,
                    // Immediate data big-endian as on the wire; the
                    // invalidated rkey as the key it is.
                    imm_data: match flags {
                        WC_WITH_IMM => c.imm_inval_rkey.to_be(),
                        WC_WITH_INVALIDATE => c.imm_inval_rkey,
                        _ => 0,
                    },
                    src_qp: c.src_qpn,
                    ..Wc::default()
                };
                wc.wc_flags = flags | path_of(&c, self.dev.roce.load(Ordering::Relaxed), &mut wc);
                Some(wc)
            }
            CqeOpcode::ReqErr | CqeOpcode::RespErr => {
                let e = ErrCqe::decode(b).ok()?;
                let q = qp(e.qpn)?;
                let (wr_id, opcode) = if op.opcode == CqeOpcode::ReqErr {
                    (q.complete_send(e.wqe_counter).0, WC_SEND)
                } else {
                    (q.complete_recv(e.wqe_counter), WC_RECV)
                };
                let status = match CqeSyndrome::try_from(e.syndrome) {
                    Ok(CqeSyndrome::LocalLength) => WC_LOC_LEN_ERR,
                    Ok(CqeSyndrome::LocalQpOp) => WC_LOC_QP_OP_ERR,
                    Ok(CqeSyndrome::LocalProt) => WC_LOC_PROT_ERR,
                    Ok(CqeSyndrome::WrFlush) => WC_WR_FLUSH_ERR,
                    Ok(CqeSyndrome::MwBind) => WC_MW_BIND_ERR,
                    Ok(CqeSyndrome::BadResp) => WC_BAD_RESP_ERR,
                    Ok(CqeSyndrome::LocalAccess) => WC_LOC_ACCESS_ERR,
                    Ok(CqeSyndrome::RemoteInvalReq) => WC_REM_INV_REQ_ERR,
                    Ok(CqeSyndrome::RemoteAccess) => WC_REM_ACCESS_ERR,
                    Ok(CqeSyndrome::RemoteOp) => WC_REM_OP_ERR,
                    Ok(CqeSyndrome::TransportRetryExc) => WC_RETRY_EXC_ERR,
                    Ok(CqeSyndrome::RnrRetryExc) => WC_RNR_RETRY_EXC_ERR,
                    Ok(CqeSyndrome::RemoteAborted) => WC_REM_ABORT_ERR,
                    Err(_) => WC_GENERAL_ERR,
                };
                Some(Wc {
                    wr_id,
                    status,
                    opcode,
                    vendor_err: u32::from(e.vendor_syndrome),
                    qp_num: e.qpn,
                    ..Wc::default()
                })
            }
            _ => None,
        }
    }

    /// Arms the CQ (`CQ_SOLICITED` or `CQ_NEXT_COMP`, optionally with
    /// `CQ_REPORT_MISSED_EVENTS`). Returns 1 if missed events were asked
    /// for and a completion is already waiting, else 0.
    pub(crate) fn req_notify(&self, flags: u32) -> Result<i32> {
        if !matches!(self.handler, Some(Handler::Ulp(_))) {
            return Err(EINVAL);
        }
        let cmd = match flags & (CQ_SOLICITED | CQ_NEXT_COMP) {
            CQ_SOLICITED => ArmCmd::Solicited,
            CQ_NEXT_COMP => ArmCmd::Next,
            _ => return Err(EINVAL),
        };
        let p = self.poll.lock();
        // Destroyed, or being destroyed: `closing` is set under this lock
        // before DESTROY_CQ is sent, so while it is clear the CQ exists on
        // the device until this lock is released.
        if p.closing {
            return Err(EINVAL);
        }
        let arm = CqArm {
            sn: (self.arm_sn.load(Ordering::Relaxed) & 3) as u8,
            cmd,
            ci: p.ci & ring::CI_MASK,
        };
        let mut word = [0u8; 4];
        arm.encode(&mut word);
        self.dbr.write_word(CQ_DBR_ARM_OFFSET, word)?;
        dma_mb(Write);
        self.dev.be.arm_cq(self.cqn, arm)?;
        if flags & CQ_REPORT_MISSED_EVENTS != 0 {
            let log = u32::from(self.log_size);
            let off = ring::ring_index(p.ci, log) as usize * CQE_SIZE;
            let op_own = self.buf.read_u8(off + OP_OWN_OFFSET)?;
            return Ok(i32::from(ring::cqe_sw_owned(op_own, p.ci, log)));
        }
        Ok(0)
    }

    /// Destroys the CQ: `EBUSY` while QPs use it. On success no completion
    /// handler call is running or will start, and a second destroy
    /// succeeds and does nothing (a destroy command ends the CQ while a
    /// racing command may still hold a reference to it).
    pub(crate) fn destroy(&self) -> Result {
        {
            // Two destroys racing: the second waits here, then finds the
            // CQ destroyed.
            let _g = self.destroy_lock.lock();
            // A second destroy only waits for the dispatcher, like the first.
            if !self.destroyed.load(Ordering::Acquire) {
                if self.qps.load(Ordering::Acquire) != 0 {
                    return Err(EBUSY);
                }
                // An arm racing this destroy either rang before this
                // point or sees `closing` and rings nothing.
                self.poll.lock().closing = true;
                self.dev.be.destroy_cq(self.cqn, [&self.buf, &self.dbr])?;
                {
                    let dev = &self.dev;
                    dev.events.lock().remove_cq(self.cqn, self);
                }
                self.destroyed.store(true, Ordering::Release);
            }
        }
        crate::work::wait_not_busy("CQ", self.cqn, || self.busy.load(Ordering::Acquire) != 0);
        Ok(())
    }
}

impl CompTarget for Cq {
    fn note_event(&self) {
        Cq::note_event(self);
    }

    fn set_busy(&self, busy: bool) {
        Cq::set_busy(self, busy);
    }

    fn complete(&self) {
        self.call_handler();
    }

    fn takes_async(&self) -> bool {
        self.sink().is_some()
    }

    fn irq_safe(&self) -> bool {
        matches!(self.handler, Some(Handler::User(_)))
    }

    fn async_event(&self, event_type: u8) {
        self.call_async(event_type);
    }
}
