// SPDX-License-Identifier: GPL-2.0

//! One HCA instance's state split into borrows, with the helpers every part
//! of the engine uses to write CQEs, raise events and fail QPs.

use super::caps::Caps;
use super::cq::{CqWriteError, CqeBody};
use super::mem::Platform;
use super::port::Port;
use super::prm::cqe::{ErrCqe, OpOwn};
use super::prm::eqe::{EqeData, CQ_ERROR_SYNDROME_OVERRUN, QUEUE_TYPE_QP};
use super::prm::opcode::{CqeOpcode, CqeSyndrome, EventType};
use super::qp::{Qp, QpService, QpState, QPN_BASE};
use super::sched::Sched;
use super::stats::{bump, Stats};
use super::table::{get_mut, Tables};

/// Mutable access to everything of one HCA instance at once.
pub(super) struct Dev<'a> {
    pub(super) id: u16,
    pub(super) caps: &'a Caps,
    pub(super) t: Tables<'a>,
    pub(super) sched: &'a mut Sched,
    pub(super) stats: &'a mut Stats,
    pub(super) async_eqn: Option<u8>,
    pub(super) port: &'a Port,
    /// Slot of the GSI QP, if one exists.
    pub(super) gsi: Option<u32>,
}

/// The QPN the GSI QP has on the wire (QP1).
pub(super) const GSI_WIRE_QPN: u32 = 1;

/// The slot index of the QP numbered `qpn`, if it is in range.
pub(super) fn qp_slot(qpn: u32) -> Option<u32> {
    qpn.checked_sub(QPN_BASE)
}

impl Dev<'_> {
    /// The QP numbered `qpn`, with its slot index.
    pub(super) fn qp(&mut self, qpn: u32) -> Option<(u32, &mut Qp)> {
        let slot = qp_slot(qpn)?;
        let qp = get_mut(self.t.qps, slot)?;
        (qp.qpn == qpn).then_some((slot, qp))
    }

    /// The UD or GSI QP a datagram addressed to `wire_qpn` is for, with its
    /// slot: QPN 1 names the GSI QP; any other QPN a UD QP by its table
    /// QPN (a GSI QP's table QPN is not its address, and RC QPs take no
    /// datagrams).
    pub(super) fn datagram_qp(&mut self, wire_qpn: u32) -> Option<(u32, &mut Qp)> {
        if wire_qpn == GSI_WIRE_QPN {
            let slot = self.gsi?;
            return get_mut(self.t.qps, slot).map(|qp| (slot, qp));
        }
        self.qp(wire_qpn)
            .filter(|(_, qp)| qp.attr.service == QpService::Ud)
    }

    /// Writes a CQE to CQ `cqn` and delivers the completion event if the
    /// CQ fires. Returns whether the CQE was written.
    pub(super) fn post_cqe<P: Platform>(
        &mut self,
        p: &mut P,
        cqn: u32,
        body: CqeBody,
        notable: bool,
    ) -> bool {
        let Some(cq) = get_mut(self.t.cqs, cqn) else {
            bump(&mut self.stats.cqes_dropped);
            return false;
        };
        let eqn = cq.attr.eqn;
        match cq.write(p, body, notable) {
            Ok(fire) => {
                bump(&mut self.stats.cqes);
                if fire {
                    bump(&mut self.stats.comp_events);
                    self.post_eqe(p, eqn, EventType::Comp, EqeData::Comp { cqn });
                }
                true
            }
            Err(CqWriteError::InError) => {
                bump(&mut self.stats.cqes_dropped);
                false
            }
            Err(CqWriteError::Overrun) => {
                bump(&mut self.stats.cqes_dropped);
                let data = EqeData::CqError {
                    cqn,
                    syndrome: CQ_ERROR_SYNDROME_OVERRUN,
                };
                self.async_event(p, EventType::CqError, data);
                false
            }
        }
    }

    fn post_eqe<P: Platform>(&mut self, p: &mut P, eqn: u8, ty: EventType, data: EqeData) {
        let id = self.id;
        let posted = get_mut(self.t.eqs, u32::from(eqn)).is_some_and(|eq| eq.post(p, id, ty, data));
        if !posted {
            bump(&mut self.stats.events_dropped);
        }
    }

    /// Raises an asynchronous event on the async EQ.
    pub(super) fn async_event<P: Platform>(&mut self, p: &mut P, ty: EventType, data: EqeData) {
        match self.async_eqn {
            Some(eqn) => {
                bump(&mut self.stats.async_events);
                self.post_eqe(p, eqn, ty, data);
            }
            None => bump(&mut self.stats.events_dropped),
        }
    }

    /// Raises a QP-affiliated asynchronous event.
    pub(super) fn qp_event<P: Platform>(&mut self, p: &mut P, ty: EventType, qpn: u32) {
        let data = EqeData::QpSrq {
            queue_type: QUEUE_TYPE_QP,
            qp_srq_n: qpn,
        };
        self.async_event(p, ty, data);
    }

    /// Moves the QP in `slot` to ERR and schedules the flush of its queues.
    pub(super) fn qp_to_error(&mut self, slot: u32) {
        if let Some(qp) = get_mut(self.t.qps, slot) {
            qp.state = QpState::Err;
            qp.wait = None;
            qp.rnr_retries = 0;
            qp.timeout_retries = 0;
            qp.sqd_notify_pending = false;
        }
        self.sched.activate(self.t.qps, slot);
    }

    /// Writes a CQE on behalf of the QP in `slot`. If it cannot be written
    /// (CQ overrun or CQ in error), the QP is fatally broken: it moves to
    /// ERR with a WQ_CATAS_ERROR event, unless it already is in ERR.
    pub(super) fn qp_cqe<P: Platform>(
        &mut self,
        p: &mut P,
        slot: u32,
        cqn: u32,
        body: CqeBody,
        notable: bool,
    ) {
        if self.post_cqe(p, cqn, body, notable) {
            return;
        }
        let Some(qp) = get_mut(self.t.qps, slot) else {
            return;
        };
        if qp.state != QpState::Err {
            let qpn = qp.qpn;
            self.qp_to_error(slot);
            self.qp_event(p, EventType::WqCatasError, qpn);
        }
    }
}

/// The body of an error CQE.
pub(super) fn err_cqe(
    opcode: CqeOpcode,
    syndrome: CqeSyndrome,
    send_opcode: u8,
    qpn: u32,
    wqe_counter: u16,
) -> CqeBody {
    CqeBody::Err(ErrCqe {
        srqn: 0,
        vendor_syndrome: 0,
        syndrome: u8::from(syndrome),
        send_opcode,
        qpn,
        wqe_counter,
        signature: 0,
        op_own: OpOwn {
            opcode,
            format: 0,
            solicited: false,
            owner: false,
        },
    })
}
