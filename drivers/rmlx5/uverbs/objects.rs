// SPDX-License-Identifier: GPL-2.0

//! The objects a context creates for its process: PDs, MRs, CQs and QPs,
//! with the memory they share with user space and their event slots.
//!
//! Each object is also a verbs object of the context's device
//! (`drivers/rmlx5/ib/`): a PD is an [`ib::mr::Pd`], an MR an
//! [`ib::mr::Mr`] over the pinned pages, a CQ an [`ib::cq::Cq`] on the
//! pages the process maps, a QP an [`ib::uqp::UserQp`]. On a device that
//! reaches memory by bus address (a PCI function), the queue pages are
//! allocated contiguous and mapped for it ([`UserBuf`]), and the pinned
//! pages of an MR are mapped page by page. Dropping an object first takes
//! it out of the device (which then no longer touches its memory) and
//! only then releases the memory; if the device refuses (it should not:
//! the tables' dependency counts destroy users first), the memory is
//! leaked rather than freed under the device.

use core::sync::atomic::{
    AtomicBool,
    Ordering, //
};
use kernel::{
    page::PAGE_SIZE,
    prelude::*,
    sync::Arc, //
};

use super::event::{
    EventQueue,
    EventSlot, //
};
use crate::backend::Backend;
use crate::ib::{
    cq::{
        Cq,
        CqMem,
        EventSink, //
    },
    mr::{
        Mr,
        Pd, //
    },
    uqp::UserQp,
};
use crate::mem::{
    pages::{
        MappedBuf,
        PageBuf,
        PageDma,
        PinnedPages, //
    },
    DmaBuf,
};
use crate::mlx5_core::device::Device;
use crate::mlx5_prm::{
    cqe::{
        CQE_SIZE,
        OP_OWN_OFFSET, //
    },
    doorbell::{
        bf_reg_offset,
        BFREGS_PER_UAR,
        BF_BUF_SIZE, //
    },
    opcode::EventType,
    ring::CQE_INIT_OP_OWN,
    wqe::WQEBB_SIZE,
};
use crate::rmlx5_abi::{
    check::Limits,
    uapi::{
        CreateQp,
        EVENT_COMM_EST,
        EVENT_CQ_ERR,
        EVENT_QP_ACCESS_ERR,
        EVENT_QP_FATAL,
        EVENT_QP_LAST_WQE_REACHED,
        EVENT_QP_REQ_ERR,
        EVENT_SQ_DRAINED, //
    },
};

/// A protection domain: a PD of the HCA.
pub(crate) struct Upd {
    /// The HCA's PD.
    pub(crate) pd: Pd,
}

impl Upd {
    /// Allocates a PD on `dev`.
    pub(crate) fn new(dev: &Arc<Device>) -> Result<Self> {
        Ok(Self { pd: Pd::new(dev)? })
    }
}

/// Pages a process maps and the device reaches: a queue buffer or a
/// doorbell-record page.
pub(crate) struct UserBuf {
    /// The pages, for `mmap`.
    pub(crate) pages: Arc<PageBuf>,
    /// The same memory as the device is given it.
    pub(crate) dma: DmaBuf,
}

impl UserBuf {
    /// `len` zeroed bytes (whole pages) for `be`, page by page; mapped for
    /// DMA page by page for a device with a DMA device, which takes the
    /// queue as a page list.
    pub(crate) fn new(be: &dyn Backend, len: usize) -> Result<Self> {
        match be.dma_device() {
            None => {
                let pages = Arc::new(PageBuf::new(len)?, GFP_KERNEL)?;
                let dma = DmaBuf::shared(pages.clone());
                Ok(Self { pages, dma })
            }
            Some(dev) => {
                let pages = Arc::new(PageBuf::new(len)?, GFP_KERNEL)?;
                let mapped: Arc<MappedBuf> = Arc::new(pages.map_for(dev)?, GFP_KERNEL)?;
                Ok(Self {
                    pages,
                    dma: DmaBuf::shared(mapped),
                })
            }
        }
    }
}

impl Drop for Upd {
    fn drop(&mut self) {
        // The table's dependency counts freed its MRs and QPs first.
        if let Err(e) = self.pd.destroy() {
            pr_warn!("uverbs: PD {} not freed: {:?}\n", self.pd.pdn, e);
        }
    }
}

/// A user memory region: pinned pages, charged to the process, registered
/// with the HCA.
///
/// # Invariants
///
/// `pages` is `Some` until drop; the HCA reaches it through `mr` until
/// `mr` is destroyed.
pub(crate) struct Umr {
    /// The HCA's MR (lkey = rkey = `mr.key`).
    pub(crate) mr: Mr,
    /// The pages' DMA mapping, on a device with a DMA device (dropped
    /// before the pages).
    dma: Option<PageDma>,
    /// The pinned memory.
    pages: Option<PinnedPages>,
    /// Handle of the PD (held: the PD cannot go first).
    pub(crate) pd_handle: u32,
}

impl Umr {
    /// Registers `pages` with IOVA `iova` and `access` on `pd`.
    pub(crate) fn new(
        pd: &Pd,
        pd_handle: u32,
        pages: PinnedPages,
        iova: u64,
        access: u32,
    ) -> Result<Self> {
        let dma = match pd.dev.be.dma_device() {
            Some(dev) => {
                // The key's translation starts at the page holding the
                // first byte: the IOVA must sit at the same offset in its
                // page as the memory does in its.
                if iova % PAGE_SIZE as u64 != pages.offset() as u64 {
                    return Err(EINVAL);
                }
                Some(pages.map_for(dev)?)
            }
            None => None,
        };
        let list = dma.as_ref().map_or(&[][..], |d| d.addrs());
        let mr = Mr::new_user(pd, iova, pages.kaddr(), pages.length(), access, list)?;
        // INVARIANT: `pages` stays until drop, after `mr` is destroyed.
        Ok(Self {
            mr,
            dma,
            pages: Some(pages),
            pd_handle,
        })
    }
}

impl Drop for Umr {
    fn drop(&mut self) {
        let dma = self.dma.take();
        let pages = self.pages.take();
        if let Err(e) = self.mr.destroy() {
            // The HCA may still reach the pages: keep them pinned and
            // mapped forever.
            pr_warn!("uverbs: MR {:#x} not deregistered: {:?}\n", self.mr.key, e);
            core::mem::forget(dma);
            core::mem::forget(pages);
            return;
        }
        drop(dma);
        // Otherwise unpinning and uncharging happen as `pages` drops.
    }
}

/// Where a CQ's events go: its completion channel and the async file.
///
/// # Invariants
///
/// `comp_slot` is attached to `channel` (if any) and `async_slot` to
/// `async_queue` until [`CqEvents::detach`].
struct CqEvents {
    channel: Option<Arc<EventQueue>>,
    comp_slot: Arc<EventSlot>,
    async_queue: Arc<EventQueue>,
    async_slot: Arc<EventSlot>,
    /// The slots were detached (at most once).
    detached: AtomicBool,
}

impl CqEvents {
    /// Detaches the slots, once however often it is called (by DESTROY_CQ
    /// and again by the drop of the last reference).
    fn detach(&self) {
        if self.detached.swap(true, Ordering::AcqRel) {
            return;
        }
        // Destroying a CQ removes its unread events.
        if let Some(ch) = &self.channel {
            ch.detach(&self.comp_slot);
        }
        self.async_queue.detach(&self.async_slot);
    }
}

impl EventSink for CqEvents {
    fn comp_event(&self) {
        if let Some(ch) = &self.channel {
            ch.post(&self.comp_slot, 0);
        }
    }

    fn async_event(&self, event_type: u8) {
        if event_type == u8::from(EventType::CqError) {
            self.async_queue.post(&self.async_slot, EVENT_CQ_ERR);
        }
    }
}

/// A CQ: CQE ring and doorbell-record page in kernel memory the process
/// maps, the HCA's CQ on them, and its event slots.
///
/// # Invariants
///
/// `events`' slots stay attached until drop has destroyed `cq` (after
/// which the dispatcher never calls the sink again).
pub(crate) struct Ucq {
    /// The HCA's CQ.
    pub(crate) cq: Arc<Cq>,
    /// Entries in the ring (a power of two).
    pub(crate) cqe_cnt: u32,
    /// The CQE ring.
    pub(crate) buf: Arc<PageBuf>,
    /// The page holding the doorbell record at byte 0.
    pub(crate) dbr: Arc<PageBuf>,
    events: Arc<CqEvents>,
}

/// Where a CQ is created: device, completion vector, UAR page.
pub(crate) struct CqPlace<'a> {
    pub(crate) dev: &'a Arc<Device>,
    pub(crate) comp_vector: u32,
    pub(crate) uar_addr: u64,
}

impl Ucq {
    /// A CQ of `cqe_cnt` entries (a power of two, already validated)
    /// reporting completion events to `channel`.
    pub(crate) fn new(
        place: &CqPlace<'_>,
        cqe_cnt: u32,
        user_handle: u64,
        channel: Option<Arc<EventQueue>>,
        async_queue: Arc<EventQueue>,
    ) -> Result<Self> {
        let n = cqe_cnt as usize;
        let bytes = n.checked_mul(CQE_SIZE).ok_or(EINVAL)?;
        let log_size = u8::try_from(cqe_cnt.trailing_zeros())?;
        let be = &*place.dev.be;
        let UserBuf {
            pages: buf,
            dma: ring,
        } = UserBuf::new(be, bytes)?;
        let UserBuf {
            pages: dbr,
            dma: dbr_dma,
        } = UserBuf::new(be, 0)?;
        // The HCA owns every CQE until it writes it: op_own 0xf0.
        ring.fill_strided(OP_OWN_OFFSET, CQE_SIZE, n, CQE_INIT_OP_OWN)?;
        let comp_slot = EventSlot::new(user_handle)?;
        let async_slot = EventSlot::new(user_handle)?;
        if let Some(ch) = &channel {
            ch.attach()?;
        }
        if let Err(e) = async_queue.attach() {
            if let Some(ch) = &channel {
                ch.detach(&comp_slot);
            }
            return Err(e);
        }
        // INVARIANT: both slots were attached just above.
        let events = Arc::new(
            CqEvents {
                channel,
                comp_slot,
                async_queue,
                async_slot,
                detached: AtomicBool::new(false),
            },
            GFP_KERNEL,
        );
        let events = events?;
        let mem = CqMem {
            buf: ring,
            dbr: dbr_dma,
            uar_addr: place.uar_addr,
        };
        let sink: Arc<dyn EventSink> = events.clone();
        let cq = match Cq::new_on(place.dev, log_size, mem, place.comp_vector, sink) {
            Ok(cq) => cq,
            Err(e) => {
                events.detach();
                return Err(e);
            }
        };
        Ok(Self {
            cq,
            cqe_cnt,
            buf,
            dbr,
            events,
        })
    }

    /// The CQ number.
    pub(crate) fn cqn(&self) -> u32 {
        self.cq.cqn
    }

    /// Ends the CQ for DESTROY_CQ: out of the device, and its unread
    /// events out of their queues, whoever still holds a reference (the
    /// counts read afterwards are final). On failure nothing changed.
    pub(crate) fn end(&self) -> Result {
        self.cq.destroy()?;
        self.events.detach();
        Ok(())
    }

    /// Completion events the process has read.
    pub(crate) fn comp_events_reported(&self) -> u32 {
        self.events.comp_slot.reported()
    }

    /// Async events the process has read.
    pub(crate) fn async_events_reported(&self) -> u32 {
        self.events.async_slot.reported()
    }
}

impl Drop for Ucq {
    fn drop(&mut self) {
        if let Err(e) = self.cq.destroy() {
            // The HCA may still write the ring: keep the CQ (and with it
            // the pages) forever, and its slots attached.
            pr_warn!("uverbs: CQ {:#x} not destroyed: {:?}\n", self.cq.cqn, e);
            core::mem::forget(self.cq.clone());
            core::mem::forget(self.events.clone());
            return;
        }
        self.events.detach();
    }
}

/// Queue geometry of a QP, as `CREATE_QP` reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct QpGeometry {
    /// SQ size in WQEBBs (power of two).
    pub(crate) sq_wqe_cnt: u32,
    /// RQ size in WQEs (power of two).
    pub(crate) rq_wqe_cnt: u32,
    /// log2 of the RQ stride.
    pub(crate) rq_wqe_shift: u32,
    /// Offset of the SQ in the queue buffer (the RQ is at 0).
    pub(crate) sq_buf_offset: u32,
    /// Bytes of the queue buffer before page rounding.
    pub(crate) buf_bytes: usize,
    /// Send WRs granted.
    pub(crate) max_send_wr: u32,
    /// Receive WRs granted.
    pub(crate) max_recv_wr: u32,
    /// Gather entries granted.
    pub(crate) max_send_sge: u32,
    /// Scatter entries granted.
    pub(crate) max_recv_sge: u32,
    /// Inline bytes granted.
    pub(crate) max_inline_data: u32,
}

/// Bytes of the largest send WQE a QP with these caps may post: control
/// segment, remote-address segment, atomic segment, and the larger of the
/// gather list and the inline data (4-byte header, 16-byte aligned).
fn max_send_wqe_bytes(max_send_sge: u32, max_inline: u32) -> Option<u32> {
    const SEG: u32 = 16;
    let sges = max_send_sge.max(1).checked_mul(SEG)?;
    let inline = max_inline.checked_add(4)?.checked_next_multiple_of(SEG)?;
    (3 * SEG).checked_add(sges.max(inline))
}

/// Computes the queue geometry for a validated `CREATE_QP` request.
///
/// # Errors
///
/// `EINVAL` if the rounded queues exceed the device's limits.
pub(crate) fn qp_geometry(req: &CreateQp, limits: &Limits) -> Result<QpGeometry> {
    let wqe_bytes = max_send_wqe_bytes(req.max_send_sge, req.max_inline_data).ok_or(EINVAL)?;
    let wqebbs_per_wqe = wqe_bytes.div_ceil(WQEBB_SIZE as u32);
    let sq_wqe_cnt = req
        .max_send_wr
        .max(1)
        .checked_mul(wqebbs_per_wqe)
        .and_then(u32::checked_next_power_of_two)
        .ok_or(EINVAL)?;
    // The SQ may hold `max_qp_wr` of the largest WQEs.
    let sq_limit = limits
        .max_qp_wr
        .checked_mul(wqebbs_per_wqe)
        .and_then(u32::checked_next_power_of_two)
        .ok_or(EINVAL)?;
    if sq_wqe_cnt > sq_limit {
        return Err(EINVAL);
    }
    let rq_stride = req
        .max_recv_sge
        .max(1)
        .checked_mul(16)
        .and_then(u32::checked_next_power_of_two)
        .ok_or(EINVAL)?;
    // The RQ fills at least one WQEBB: a ConnectX finds the SQ right after
    // the RQ (its size from `log_rq_size` and `log_rq_stride`), and the SQ
    // must start WQEBB-aligned.
    let rq_wqe_cnt = req
        .max_recv_wr
        .max(1)
        .checked_next_power_of_two()
        .ok_or(EINVAL)?
        .max(WQEBB_SIZE as u32 / rq_stride);
    if rq_wqe_cnt > limits.max_qp_wr.checked_next_power_of_two().ok_or(EINVAL)? {
        return Err(EINVAL);
    }
    let rq_bytes = rq_wqe_cnt.checked_mul(rq_stride).ok_or(EINVAL)?;
    let sq_buf_offset = rq_bytes;
    let sq_bytes = sq_wqe_cnt.checked_mul(WQEBB_SIZE as u32).ok_or(EINVAL)?;
    let buf_bytes = sq_buf_offset.checked_add(sq_bytes).ok_or(EINVAL)?;
    Ok(QpGeometry {
        sq_wqe_cnt,
        rq_wqe_cnt,
        rq_wqe_shift: rq_stride.trailing_zeros(),
        sq_buf_offset,
        buf_bytes: buf_bytes as usize,
        max_send_wr: sq_wqe_cnt / wqebbs_per_wqe,
        max_recv_wr: rq_wqe_cnt,
        max_send_sge: ((wqebbs_per_wqe * WQEBB_SIZE as u32 - 48) / 16).min(limits.max_sge),
        max_recv_sge: rq_stride / 16,
        max_inline_data: req.max_inline_data,
    })
}

/// The BlueFlame register index of a QP and its offset in the UAR page.
pub(crate) fn bfreg_of(qp_handle: u32) -> Result<(u8, u32, u32)> {
    let bfreg = (qp_handle as usize) % BFREGS_PER_UAR;
    let off = bf_reg_offset(bfreg).map_err(|_| EINVAL)?;
    Ok((
        u8::try_from(bfreg)?,
        u32::try_from(off)?,
        u32::try_from(BF_BUF_SIZE)?,
    ))
}

/// Where a QP's async events go: the context's async file.
///
/// # Invariants
///
/// `async_slot` is attached to `async_queue` until [`QpEvents::detach`].
struct QpEvents {
    async_queue: Arc<EventQueue>,
    async_slot: Arc<EventSlot>,
    /// The slot was detached (at most once).
    detached: AtomicBool,
}

impl QpEvents {
    /// Detaches the slot, once however often it is called.
    fn detach(&self) {
        if self.detached.swap(true, Ordering::AcqRel) {
            return;
        }
        self.async_queue.detach(&self.async_slot);
    }
}

impl EventSink for QpEvents {
    fn comp_event(&self) {}

    fn async_event(&self, event_type: u8) {
        let ty = match EventType::try_from(event_type) {
            Ok(EventType::WqCatasError) => EVENT_QP_FATAL,
            Ok(EventType::WqInvalReqError) => EVENT_QP_REQ_ERR,
            Ok(EventType::WqAccessError) => EVENT_QP_ACCESS_ERR,
            Ok(EventType::CommEst) => EVENT_COMM_EST,
            Ok(EventType::SqDrained) => EVENT_SQ_DRAINED,
            Ok(EventType::SrqLastWqe) => EVENT_QP_LAST_WQE_REACHED,
            _ => return,
        };
        self.async_queue.post(&self.async_slot, ty);
    }
}

/// What a QP is created on: PD, CQs, UAR page.
pub(crate) struct QpPlace<'a> {
    pub(crate) pd: &'a Upd,
    pub(crate) send_cq: &'a Ucq,
    pub(crate) recv_cq: &'a Ucq,
    pub(crate) uar_addr: u64,
}

/// An RC QP: queue buffer (RQ then SQ) and doorbell-record page in kernel
/// memory the process maps, and the HCA's QP on them.
///
/// # Invariants
///
/// `events`' slot stays attached until drop has destroyed `qp`.
pub(crate) struct Uqp {
    /// The HCA's QP.
    pub(crate) qp: Arc<UserQp>,
    /// Handles of the PD and CQs (held while the QP lives).
    pub(crate) pd_handle: u32,
    pub(crate) send_cq_handle: u32,
    pub(crate) recv_cq_handle: u32,
    /// Queue geometry.
    pub(crate) geom: QpGeometry,
    /// Queue buffer.
    pub(crate) buf: Arc<PageBuf>,
    /// The page holding the doorbell record at byte 0.
    pub(crate) dbr: Arc<PageBuf>,
    events: Arc<QpEvents>,
}

impl Uqp {
    /// A QP with geometry `geom` (computed by [`qp_geometry`]).
    #[expect(clippy::too_many_arguments)]
    pub(crate) fn new(
        place: &QpPlace<'_>,
        user_handle: u64,
        pd_handle: u32,
        send_cq_handle: u32,
        recv_cq_handle: u32,
        geom: QpGeometry,
        bfreg: u8,
        async_queue: Arc<EventQueue>,
    ) -> Result<Self> {
        let be = &*place.pd.pd.dev.be;
        let UserBuf {
            pages: buf,
            dma: buf_dma,
        } = UserBuf::new(be, geom.buf_bytes)?;
        let UserBuf {
            pages: dbr,
            dma: dbr_dma,
        } = UserBuf::new(be, 0)?;
        let async_slot = EventSlot::new(user_handle)?;
        async_queue.attach()?;
        // INVARIANT: attached just above.
        let events = Arc::new(
            QpEvents {
                async_queue,
                async_slot,
                detached: AtomicBool::new(false),
            },
            GFP_KERNEL,
        );
        let events = events?;
        let mem = crate::ib::uqp::UserQpMem {
            buf: buf_dma,
            dbr: dbr_dma,
            uar_addr: place.uar_addr,
            bfreg,
            sq_wqebbs: geom.sq_wqe_cnt,
            sq_offset: u64::from(geom.sq_buf_offset),
            rq_wqes: geom.rq_wqe_cnt,
            rq_stride: 1u32 << geom.rq_wqe_shift,
            max_send_sge: geom.max_send_sge,
            max_inline_data: geom.max_inline_data,
        };
        let sink: Arc<dyn EventSink> = events.clone();
        let qp = match UserQp::new(
            &place.pd.pd,
            &place.send_cq.cq,
            &place.recv_cq.cq,
            mem,
            sink,
        ) {
            Ok(qp) => qp,
            Err(e) => {
                events.detach();
                return Err(e);
            }
        };
        Ok(Self {
            qp,
            pd_handle,
            send_cq_handle,
            recv_cq_handle,
            geom,
            buf,
            dbr,
            events,
        })
    }

    /// The QP number.
    pub(crate) fn qpn(&self) -> u32 {
        self.qp.qpn
    }

    /// Async events the process has read.
    pub(crate) fn async_events_reported(&self) -> u32 {
        self.events.async_slot.reported()
    }

    /// Ends the QP for DESTROY_QP, as [`Ucq::end`] does a CQ.
    pub(crate) fn end(&self) -> Result {
        self.qp.destroy()?;
        self.events.detach();
        Ok(())
    }
}

impl Drop for Uqp {
    fn drop(&mut self) {
        if let Err(e) = self.qp.destroy() {
            pr_warn!("uverbs: QP {:#x} not destroyed: {:?}\n", self.qp.qpn, e);
            core::mem::forget(self.qp.clone());
            core::mem::forget(self.events.clone());
            return;
        }
        self.events.detach();
    }
}
