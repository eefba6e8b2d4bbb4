// SPDX-License-Identifier: GPL-2.0

//! RC queue pairs of user space: a QP of the device over the queue buffer
//! and doorbell-record page a process maps, on the process's UAR page.
//! Unlike [`super::qp::Qp`] the kernel never builds WQEs here: the
//! provider writes them and rings the doorbell in its mapping (and, on a
//! device that cannot see the stores, kicks: the context hands that to its
//! [`UserUar`](crate::backend::UserUar), with [`UserQp::kick_target`]).
//!
//! Async events of the QP go to its [`EventSink`] (the context's async
//! file). The dispatcher delivers them with the QP's `busy` flag set under
//! the device's event-table lock, and [`UserQp::destroy`] takes the QP out
//! of the table under that lock and then waits for `busy` to clear, the
//! rule CQs follow: once destroy returns, the sink is never called again.

use core::sync::atomic::{
    AtomicBool,
    AtomicU64,
    Ordering, //
};
use kernel::{
    new_mutex,
    prelude::*,
    sync::{
        Arc,
        Mutex,
        UniqueArc, //
    },
};

use super::{
    cq::{
        Cq,
        EventSink, //
    },
    mr::Pd,
};
use crate::backend::KickQp;
use crate::hca_model::{
    qp::{
        ConnAttrs,
        QpAttr,
        QpService,
        QpState, //
    },
    qp_modify::{
        AttrMask,
        QpModify, //
    },
};
use crate::mem::DmaBuf;
use crate::mlx5_core::device::Device;
use crate::mlx5_core::events::QpEvents;
use crate::mlx5_prm::doorbell::QP_DBR_SIZE;

/// The memory and geometry of a user QP.
pub(crate) struct UserQpMem {
    /// The queue buffer: RQ at offset 0, SQ at `sq_offset`.
    pub(crate) buf: DmaBuf,
    /// The doorbell record at byte 0 (zeroed).
    pub(crate) dbr: DmaBuf,
    /// DMA address of the process's UAR page (registered by its owner).
    pub(crate) uar_addr: u64,
    /// BlueFlame register index in that page.
    pub(crate) bfreg: u8,
    /// SQ size in WQEBBs and its offset in `buf`.
    pub(crate) sq_wqebbs: u32,
    pub(crate) sq_offset: u64,
    /// RQ size in WQEs and its stride in bytes.
    pub(crate) rq_wqes: u32,
    pub(crate) rq_stride: u32,
    /// Largest gather list and inline payload of a send WQE.
    pub(crate) max_send_sge: u32,
    pub(crate) max_inline_data: u32,
}

/// A user-space RC QP.
///
/// # Invariants
///
/// The device may reach `buf` and `dbr` from creation until `destroy`
/// succeeds. `busy` is set only by the dispatcher under the event-table
/// lock while the QP is in the device's table.
#[pin_data]
pub(crate) struct UserQp {
    /// The device (its tables hold the QP for its async events).
    dev: Arc<Device>,
    /// The QP number.
    pub(crate) qpn: u32,
    /// BlueFlame register index in the context's UAR page.
    bfreg: u8,
    buf: DmaBuf,
    dbr: DmaBuf,
    sink: Arc<dyn EventSink>,
    /// When the QP last kicked a send doorbell (perf clock, ns).
    last_kick: AtomicU64,
    busy: AtomicBool,
    /// Set when destroy starts (cleared again if the device refuses).
    destroyed: AtomicBool,
    /// Serialises modifies, queries and destroys (the device's state and
    /// `destroyed` change together).
    #[pin]
    modify_lock: Mutex<()>,
}

impl UserQp {
    /// Creates an RC QP in RESET on `pd` with CQs `send_cq` and `recv_cq`
    /// over the memory in `mem`.
    pub(crate) fn new(
        pd: &Pd,
        send_cq: &Cq,
        recv_cq: &Cq,
        mem: UserQpMem,
        sink: Arc<dyn EventSink>,
    ) -> Result<Arc<Self>> {
        let dev = pd.dev.clone();
        if send_cq.hca() != usize::from(dev.index) || recv_cq.hca() != usize::from(dev.index) {
            return Err(EINVAL);
        }
        pd.check_live()?;
        let sq_bytes = u64::from(mem.sq_wqebbs) * 64;
        let rq_bytes = u64::from(mem.rq_wqes) * u64::from(mem.rq_stride);
        let end = mem.sq_offset.checked_add(sq_bytes).ok_or(EINVAL)?;
        if end > mem.buf.len() as u64 || rq_bytes > mem.sq_offset || mem.dbr.len() < QP_DBR_SIZE {
            return Err(EINVAL);
        }
        // The device lays the SQ right after the RQ.
        if rq_bytes != mem.sq_offset {
            return Err(EINVAL);
        }
        let attr = QpAttr {
            service: QpService::Rc,
            pdn: pd.pdn,
            send_cqn: send_cq.cqn,
            recv_cqn: recv_cq.cqn,
            sq_wqebbs: mem.sq_wqebbs,
            sq_buf_addr: mem.buf.dma_addr() + mem.sq_offset,
            rq_wqes: mem.rq_wqes,
            rq_stride: mem.rq_stride,
            rq_buf_addr: mem.buf.dma_addr(),
            buf_pages: None,
            dbr_addr: mem.dbr.dma_addr(),
            uar_addr: mem.uar_addr,
            bfreg: mem.bfreg,
            max_send_sge: mem.max_send_sge,
            max_inline_data: mem.max_inline_data,
        };
        let UserQpMem {
            buf, dbr, bfreg, ..
        } = mem;
        // Allocated first, so that nothing can fail between the device's
        // QP and the `UserQp` that owns its memory.
        let slot = UniqueArc::<Self>::new_uninit(GFP_KERNEL)?;
        let qpn = dev.be.create_qp(&attr, [&buf, &dbr])?;
        let r = slot.write_pin_init(pin_init!(Self {
            dev: pd.dev.clone(),
            qpn,
            bfreg,
            buf,
            dbr,
            sink,
            last_kick: AtomicU64::new(0),
            busy: AtomicBool::new(false),
            destroyed: AtomicBool::new(false),
            modify_lock <- new_mutex!((), "rmlx5_uqp_modify"),
        }));
        let qp: Arc<Self> = match r {
            Ok(r) => r.into(),
            Err(never) => match never {},
        };
        let added = dev.events.lock().add_qp_events(qpn, qp.clone());
        if let Err(e) = added {
            if qp.destroy().is_err() {
                // The device keeps the QP: its memory stays with it.
                core::mem::forget(qp);
            }
            return Err(e);
        }
        Ok(qp)
    }

    pub(crate) fn set_busy(&self, busy: bool) {
        self.busy.store(busy, Ordering::Release);
    }

    /// Delivers an async event (BH context, from the dispatcher).
    pub(crate) fn call_async(&self, event_type: u8) {
        if !self.destroyed.load(Ordering::Acquire) {
            self.sink.async_event(event_type);
        }
    }

    /// What a KICK of this QP names.
    pub(crate) fn kick_target(&self) -> KickQp<'_> {
        KickQp {
            qpn: self.qpn,
            bfreg: self.bfreg,
            last_kick: &self.last_kick,
            gone: &self.destroyed,
        }
    }

    /// Whether the QP is destroyed (or being destroyed).
    pub(crate) fn gone(&self) -> &AtomicBool {
        &self.destroyed
    }

    /// Modifies the QP (IB modify-QP semantics). Moving to RESET zeroes the
    /// doorbell record, as the kernel does for mlx5.
    pub(crate) fn modify(&self, m: &QpModify) -> Result {
        {
            let _g = self.modify_lock.lock();
            self.live()?;
            self.dev.be.modify_qp(self.qpn, m)?;
            if m.mask.contains(AttrMask::STATE) && m.state == QpState::Reset {
                self.dbr.write(0, &[0u8; QP_DBR_SIZE])?;
            }
        }
        // Moving to ERR makes flush CQEs: let the device write them.
        self.dev.be.run();
        Ok(())
    }

    /// The QP's state and attributes as the device has them.
    pub(crate) fn query(&self) -> Result<(QpState, ConnAttrs)> {
        // Under the lock a destroy holds across the device's destroy, so
        // that a reused QPN never answers for this QP.
        let _g = self.modify_lock.lock();
        self.live()?;
        self.dev.be.query_qp(self.qpn)
    }

    /// `EINVAL` once the QP is destroyed: its QPN may already name
    /// another QP.
    fn live(&self) -> Result {
        if self.destroyed.load(Ordering::Acquire) {
            return Err(EINVAL);
        }
        Ok(())
    }

    /// Destroys the QP: it leaves the device at once (no further DMA to
    /// its pages, no CQE; unpolled work is discarded as ib_destroy_qp does)
    /// and the event table; on success no event is delivered afterwards,
    /// and every later call on this object fails with `EINVAL`. A second
    /// destroy succeeds and does nothing, so a destroy command can end the
    /// QP while a racing command still holds a reference to it.
    pub(crate) fn destroy(&self) -> Result {
        {
            let _g = self.modify_lock.lock();
            // Set first, so that a kick checking it under the device's
            // lock after the destroy below never rings a reused QPN.
            if !self.destroyed.swap(true, Ordering::AcqRel) {
                if let Err(e) = self.dev.be.destroy_qp(self.qpn, [&self.buf, &self.dbr]) {
                    self.destroyed.store(false, Ordering::Release);
                    return Err(e);
                }
                self.dev.events.lock().remove_qp_events(self.qpn, self);
            }
        }
        crate::work::wait_not_busy("QP", self.qpn, || self.busy.load(Ordering::Acquire));
        Ok(())
    }
}

impl QpEvents for UserQp {
    fn set_busy(&self, busy: bool) {
        UserQp::set_busy(self, busy);
    }

    fn async_event(&self, event_type: u8) {
        self.call_async(event_type);
    }
}
