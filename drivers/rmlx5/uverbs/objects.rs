// SPDX-License-Identifier: GPL-2.0

//! The objects a context creates for its process: PDs, MRs, CQs and QPs,
//! with the memory they share with user space and their event slots.
//!
//! Until the verbs layer (`drivers/rmlx5/ib/`, issue 5) is on this branch,
//! the objects here carry only their uverbs side: handles, user memory,
//! event storage and the numbers user space sees. Attaching them to the
//! HCA (`ib::Pd`, `ib::Mr`, `ib::Cq`, `ib::Qp`) is the remaining step; the
//! addresses it needs are [`PageBuf::kaddr`] and [`PinnedPages::kaddr`].

use kernel::{
    prelude::*,
    sync::Arc, //
};

use super::{
    event::{
        EventQueue,
        EventSlot, //
    },
    pages::{
        PageBuf,
        PinnedPages, //
    },
};
use crate::mlx5_prm::{
    cqe::CQE_SIZE,
    doorbell::{
        bf_reg_offset,
        BFREGS_PER_UAR,
        BF_BUF_SIZE, //
    },
    wqe::WQEBB_SIZE,
};
use crate::rmlx5_abi::{
    check::Limits,
    uapi::CreateQp, //
};

/// A protection domain.
pub(crate) struct Upd {
    /// The PD number.
    pub(crate) pdn: u32,
}

/// A user memory region: pinned pages, charged to the process.
#[expect(
    dead_code,
    reason = "read by the verbs layer's MR registration (issue 5)"
)]
pub(crate) struct Umr {
    /// The pinned memory.
    pub(crate) pages: PinnedPages,
    /// Handle of the PD (held: the PD cannot go first).
    pub(crate) pd_handle: u32,
    /// IOVA of the first byte.
    pub(crate) iova: u64,
    /// `ACCESS_*` flags.
    pub(crate) access: u32,
    /// Local key.
    pub(crate) lkey: u32,
    /// Remote key.
    pub(crate) rkey: u32,
}

/// A CQ: CQE ring and doorbell-record page in kernel memory the process
/// maps, and its event slots.
///
/// # Invariants
///
/// `comp_slot` is attached to `channel` (if any) and `async_slot` to
/// `async_queue`, until drop detaches them.
pub(crate) struct Ucq {
    /// The CQ number.
    pub(crate) cqn: u32,
    /// Entries in the ring (a power of two).
    pub(crate) cqe_cnt: u32,
    /// The CQE ring.
    pub(crate) buf: PageBuf,
    /// The page holding the doorbell record at byte 0.
    pub(crate) dbr: PageBuf,
    channel: Option<Arc<EventQueue>>,
    comp_slot: Arc<EventSlot>,
    async_queue: Arc<EventQueue>,
    async_slot: Arc<EventSlot>,
}

impl Ucq {
    /// A CQ of `cqe_cnt` entries (a power of two, already validated)
    /// reporting completion events to `channel`.
    pub(crate) fn new(
        cqn: u32,
        cqe_cnt: u32,
        user_handle: u64,
        channel: Option<Arc<EventQueue>>,
        async_queue: Arc<EventQueue>,
    ) -> Result<Self> {
        let bytes = (cqe_cnt as usize).checked_mul(CQE_SIZE).ok_or(EINVAL)?;
        let buf = PageBuf::new(bytes)?;
        let dbr = PageBuf::new(0)?;
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
        Ok(Self {
            cqn,
            cqe_cnt,
            buf,
            dbr,
            channel,
            comp_slot,
            async_queue,
            async_slot,
        })
    }

    /// A completion event: called by the completion dispatch (BH context)
    /// for an armed CQ that got a CQE. Never sleeps or allocates.
    #[expect(
        dead_code,
        reason = "the completion handler of the verbs layer's CQ (issue 5)"
    )]
    pub(crate) fn comp_event(&self) {
        if let Some(ch) = &self.channel {
            ch.post(&self.comp_slot, 0);
        }
    }

    /// An async event (`EVENT_CQ_ERR`); any context.
    #[expect(dead_code, reason = "raised by the verbs layer's CQ (issue 5)")]
    pub(crate) fn async_event(&self, event_type: u32) {
        self.async_queue.post(&self.async_slot, event_type);
    }

    /// Completion events the process has read.
    pub(crate) fn comp_events_reported(&self) -> u32 {
        self.comp_slot.reported()
    }

    /// Async events the process has read.
    pub(crate) fn async_events_reported(&self) -> u32 {
        self.async_slot.reported()
    }
}

impl Drop for Ucq {
    fn drop(&mut self) {
        // Destroying a CQ removes its unread events.
        if let Some(ch) = &self.channel {
            ch.detach(&self.comp_slot);
        }
        self.async_queue.detach(&self.async_slot);
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
    let rq_wqe_cnt = req
        .max_recv_wr
        .max(1)
        .checked_next_power_of_two()
        .ok_or(EINVAL)?;
    if rq_wqe_cnt > limits.max_qp_wr.checked_next_power_of_two().ok_or(EINVAL)? {
        return Err(EINVAL);
    }
    let rq_stride = req
        .max_recv_sge
        .max(1)
        .checked_mul(16)
        .and_then(u32::checked_next_power_of_two)
        .ok_or(EINVAL)?;
    let rq_bytes = rq_wqe_cnt.checked_mul(rq_stride).ok_or(EINVAL)?;
    let sq_buf_offset = rq_bytes
        .checked_next_multiple_of(WQEBB_SIZE as u32)
        .ok_or(EINVAL)?;
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
        max_send_sge: (wqebbs_per_wqe * WQEBB_SIZE as u32 - 48) / 16,
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

/// An RC QP: queue buffer (RQ then SQ) and doorbell-record page in kernel
/// memory the process maps.
///
/// # Invariants
///
/// `async_slot` is attached to `async_queue` until drop.
pub(crate) struct Uqp {
    /// The QP number.
    pub(crate) qpn: u32,
    /// Handles of the PD and CQs (held while the QP lives).
    pub(crate) pd_handle: u32,
    pub(crate) send_cq_handle: u32,
    pub(crate) recv_cq_handle: u32,
    /// Queue geometry.
    pub(crate) geom: QpGeometry,
    /// BlueFlame register index in the context's UAR page.
    pub(crate) bfreg: u8,
    /// Queue buffer.
    pub(crate) buf: PageBuf,
    /// The page holding the doorbell record at byte 0.
    pub(crate) dbr: PageBuf,
    async_queue: Arc<EventQueue>,
    async_slot: Arc<EventSlot>,
}

impl Uqp {
    /// A QP with geometry `geom` (computed by [`qp_geometry`]).
    #[expect(clippy::too_many_arguments)]
    pub(crate) fn new(
        qpn: u32,
        user_handle: u64,
        pd_handle: u32,
        send_cq_handle: u32,
        recv_cq_handle: u32,
        geom: QpGeometry,
        bfreg: u8,
        async_queue: Arc<EventQueue>,
    ) -> Result<Self> {
        let buf = PageBuf::new(geom.buf_bytes)?;
        let dbr = PageBuf::new(0)?;
        let async_slot = EventSlot::new(user_handle)?;
        async_queue.attach()?;
        // INVARIANT: attached just above.
        Ok(Self {
            qpn,
            pd_handle,
            send_cq_handle,
            recv_cq_handle,
            geom,
            bfreg,
            buf,
            dbr,
            async_queue,
            async_slot,
        })
    }

    /// An async event (`EVENT_QP_*`); any context.
    #[expect(dead_code, reason = "raised by the verbs layer's QP (issue 5)")]
    pub(crate) fn async_event(&self, event_type: u32) {
        self.async_queue.post(&self.async_slot, event_type);
    }

    /// Async events the process has read.
    pub(crate) fn async_events_reported(&self) -> u32 {
        self.async_slot.reported()
    }
}

impl Drop for Uqp {
    fn drop(&mut self) {
        self.async_queue.detach(&self.async_slot);
    }
}
