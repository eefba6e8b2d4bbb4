// SPDX-License-Identifier: GPL-2.0

//! Queue pairs (RC, UD and the GSI QP): queues, connection attributes and
//! per-QP engine state.
//!
//! A QPN is [`QPN_BASE`] plus the QP's slot index (QPNs 0 and 1 are the
//! special QP0 and QP1 on InfiniBand, so table QPNs start higher). The GSI
//! QP ([`QpService::Gsi`]) has a table QPN like any other, which the
//! embedder reports to its users as 1: datagrams addressed to QPN 1 reach
//! it, and those it sends carry source QPN 1 (see [`super::ud`]).
//!
//! The send queue is a ring of 64-byte WQEBBs in DMA memory and is counted
//! in WQEBBs with 16-bit counters, like the SQ doorbell record. The model
//! keeps two of them: `pi`, the producer counter accepted from the last
//! valid doorbell, and `ci`, the first WQEBB of the next WQE to execute (or
//! flush). The receive queue is a ring of fixed-stride receive WQEs whose
//! producer counter the model reads from the doorbell record whenever it
//! needs a receive; `ci` counts the receives consumed.

use super::mr::Access;
use super::ring::{Ring, RingPages};
use super::table::Slot;

/// QPN of the QP in slot 0.
pub const QPN_BASE: u32 = 0x100;

/// The IB QP states, numbered as `enum ib_qp_state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum QpState {
    /// Reset: nothing is processed; the queues are empty.
    #[default]
    Reset = 0,
    /// Initialised: receives may be posted; nothing is sent or received.
    Init = 1,
    /// Ready to receive: incoming requests are served.
    Rtr = 2,
    /// Ready to send.
    Rts = 3,
    /// Send queue drained: no new send WQE is started.
    Sqd = 4,
    /// Send queue error (UD/UC only). No QP of the model enters it: a UD
    /// send that fails moves its QP to ERR, like an RC one.
    Sqe = 5,
    /// Error: every WQE is flushed.
    Err = 6,
}

impl QpState {
    /// The state with the `enum ib_qp_state` value `v`.
    pub fn from_raw(v: u32) -> Option<QpState> {
        Some(match v {
            0 => QpState::Reset,
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            4 => QpState::Sqd,
            5 => QpState::Sqe,
            6 => QpState::Err,
            _ => return None,
        })
    }

    /// Whether a QP in this state serves incoming requests (RTR and later,
    /// short of ERR).
    pub(super) fn receives(self) -> bool {
        matches!(
            self,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        )
    }
}

/// The transport service of a QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum QpService {
    /// Reliable connected (`IB_QPT_RC`, QPC `st` RC).
    #[default]
    Rc,
    /// Unreliable datagram (`IB_QPT_UD`, QPC `st` UD).
    Ud,
    /// The general services QP, QP1 (`IB_QPT_GSI`, QPC `st` QP1): a UD QP
    /// whose QPN on the wire is 1. At most one per instance.
    Gsi,
}

impl QpService {
    /// Whether the QP sends and receives datagrams (UD or GSI).
    pub fn is_datagram(self) -> bool {
        matches!(self, QpService::Ud | QpService::Gsi)
    }
}

/// What the embedder gives to create a QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpAttr {
    /// RC, UD or GSI.
    pub service: QpService,
    /// PD of the QP: its lkeys and the rkeys aimed at it must belong here.
    pub pdn: u32,
    /// CQ for send completions.
    pub send_cqn: u32,
    /// CQ for receive completions (may equal `send_cqn`).
    pub recv_cqn: u32,
    /// SQ size in WQEBBs: a power of two up to the device limit, or 0 for
    /// a QP without send queue.
    pub sq_wqebbs: u32,
    /// DMA address of the SQ buffer (`64 * sq_wqebbs` bytes); with
    /// `buf_pages`, its offset from the start of the first page.
    pub sq_buf_addr: u64,
    /// RQ size in WQEs: a power of two up to the device limit, or 0 for a
    /// QP without receive queue.
    pub rq_wqes: u32,
    /// Bytes per receive WQE: a power of two from 16 to 16 times the
    /// device's `max_recv_sge` (rounded up to a power of two).
    pub rq_stride: u32,
    /// DMA address of the RQ buffer (`rq_stride * rq_wqes` bytes); with
    /// `buf_pages`, its offset from the start of the first page.
    pub rq_buf_addr: u64,
    /// The page table of the QP's buffer (both rings), if its pages are
    /// scattered (see [`super::ring`]).
    pub buf_pages: Option<RingPages>,
    /// DMA address of the 8-byte QP doorbell record.
    pub dbr_addr: u64,
    /// DMA address of the UAR page holding the QP's BlueFlame register.
    pub uar_addr: u64,
    /// Index of the QP's BlueFlame register in that page (0 to 3).
    pub bfreg: u8,
    /// Largest gather list a send WQE may carry.
    pub max_send_sge: u32,
    /// Largest inline payload a send WQE may carry.
    pub max_inline_data: u32,
}

/// The QP a connected QP sends to: an HCA of the fabric (what the address
/// vector's LID names) and a QPN on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RemoteQp {
    /// Fabric index of the HCA instance.
    pub hca: u16,
    /// QPN on that instance.
    pub qpn: u32,
}

/// Attributes set through modify-QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ConnAttrs {
    /// Remote operations the responder side allows (`qp_access_flags`).
    pub access: Access,
    /// P_Key index (the model's port has one P_Key, index 0).
    pub pkey_index: u16,
    /// Port (the model's HCAs have one port, number 1).
    pub port: u8,
    /// Path MTU, `enum ib_mtu` (1 = 256 ... 5 = 4096).
    pub path_mtu: u8,
    /// Where requests go.
    pub dest: RemoteQp,
    /// Service level of the path to `dest` (address vector), 0 to 15;
    /// carried by every request and reported in the responder's CQE.
    pub sl: u8,
    /// Expected PSN of the first incoming request (kept, not used).
    pub rq_psn: u32,
    /// PSN of the first outgoing request (kept, not used).
    pub sq_psn: u32,
    /// Responder resources: incoming RDMA reads and atomics in flight.
    pub max_dest_rd_atomic: u8,
    /// Initiator depth: outgoing RDMA reads and atomics in flight.
    pub max_rd_atomic: u8,
    /// RNR NAK timer this QP asks requesters to wait (IB encoding 0..31).
    pub min_rnr_timer: u8,
    /// Local ACK timeout, 4.096 us * 2^timeout (0 = infinite).
    pub timeout: u8,
    /// Transport retries before TRANSPORT_RETRY_EXC (0..7).
    pub retry_cnt: u8,
    /// RNR retries before RNR_RETRY_EXC (0..6; 7 = retry forever).
    pub rnr_retry: u8,
    /// Raise SQ_DRAINED when the SQ has drained in SQD.
    pub sqd_async_notify: bool,
    /// Q_Key of a UD or GSI QP ([`super::qp_modify::AttrMask::QKEY`]):
    /// datagrams must carry it to be received, and a send WQE whose Q_Key
    /// has bit 31 set sends with it instead. 0 on RC QPs.
    pub qkey: u32,
}

/// Why the head send WQE is waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitKind {
    /// The responder had no receive WQE (RNR NAK).
    Rnr,
    /// The responder did not answer (transport timeout).
    Timeout,
}

/// A snapshot of a QP's state, for debugfs and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpInfo {
    /// QP number (the table QPN, also for the GSI QP).
    pub qpn: u32,
    /// RC, UD or GSI.
    pub service: QpService,
    /// Current state.
    pub state: QpState,
    /// Connection attributes.
    pub conn: ConnAttrs,
    /// SQ producer counter accepted from doorbells (WQEBBs, 16 bits).
    pub sq_pi: u16,
    /// The SQ's size in WQEBBs (0 without an SQ).
    pub sq_wqebbs: u32,
    /// First WQEBB of the next send WQE to execute.
    pub sq_ci: u16,
    /// Receive WQEs consumed (16 bits).
    pub rq_ci: u16,
    /// The head send WQE is waiting for a retry: why, and until when.
    pub waiting: Option<(WaitKind, u64)>,
    /// DMA address of the doorbell record.
    pub dbr_addr: u64,
    /// DMA address of the SQ.
    pub sq_buf_addr: u64,
}

/// Which engine list a QP is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OnList {
    /// Neither.
    None,
    /// Has work to do now.
    Active,
    /// Waits for its retry deadline.
    Timer,
    /// Taken off the active list by an engine that is executing one of
    /// its WQEs: no other engine may take it until that step ends
    /// (`Sched::end_step`). An activation meanwhile is remembered in
    /// `Qp::rerun`.
    Running,
}

/// The send queue ring.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sq {
    pub(super) log: u32,
    pub(super) buf: Ring,
    pub(super) pi: u16,
    pub(super) ci: u16,
}

/// The receive queue ring.
#[derive(Clone, Copy, Debug)]
pub(super) struct Rq {
    pub(super) log: u32,
    pub(super) log_stride: u32,
    pub(super) buf: Ring,
    pub(super) ci: u16,
}

/// A queue pair.
#[derive(Debug)]
pub struct Qp {
    pub(super) qpn: u32,
    pub(super) attr: QpAttr,
    pub(super) state: QpState,
    pub(super) conn: ConnAttrs,
    pub(super) sq: Option<Sq>,
    pub(super) rq: Option<Rq>,
    /// Retry deadline of the head send WQE, if it waits.
    pub(super) wait: Option<(WaitKind, u64)>,
    /// RNR NAKs and timeouts seen by the head send WQE.
    pub(super) rnr_retries: u8,
    pub(super) timeout_retries: u8,
    /// A COMM_EST event has been raised since the QP entered RTR.
    pub(super) comm_established: bool,
    /// SQ_DRAINED is owed once nothing is in flight.
    pub(super) sqd_notify_pending: bool,
    /// Engine list membership and link (slot index of the next QP).
    pub(super) on_list: OnList,
    pub(super) next: u32,
    /// Activated while `Running`: the step's end puts it on the active
    /// list.
    pub(super) rerun: bool,
    /// A request of this QP's peer was granted and has not finished
    /// (`respond::request` to `respond::finish` or `respond::release`):
    /// a second one meanwhile is not answered, so that a receive WQE is
    /// never granted twice.
    pub(super) responding: bool,
    /// Bumped by every move to RESET: with the slot's variant and the
    /// QPN it tells an engine whose step released the instance between
    /// phases whether it still has the same QP ([`QpId`]).
    pub(super) epoch: u32,
}

/// Which QP an engine step is working for, to find it again in a later
/// phase: the slot, the slot's variant, the QPN and the QP's RESET epoch.
/// If any of them changed (the QP was destroyed, or reset, meanwhile) the
/// phase leaves it alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct QpId {
    pub(super) slot: u32,
    variant: u8,
    qpn: u32,
    epoch: u32,
}

impl QpId {
    /// The identity of the QP in `slot` now, if there is one.
    #[inline]
    pub(super) fn of(qps: &[Slot<Qp>], slot: u32) -> Option<QpId> {
        let s = qps.get(slot as usize)?;
        let qp = s.obj.as_ref()?;
        Some(QpId {
            slot,
            variant: s.variant,
            qpn: qp.qpn,
            epoch: qp.epoch,
        })
    }

    /// The QP this identity names, if it is still in its slot and has not
    /// been reset since.
    #[inline]
    pub(super) fn find<'q>(&self, qps: &'q mut [Slot<Qp>]) -> Option<&'q mut Qp> {
        self.find_object(qps).filter(|qp| qp.epoch == self.epoch)
    }

    /// The same QP object, reset or not since: not destroyed, and no
    /// other QP created in its slot.
    #[inline]
    pub(super) fn find_object<'q>(&self, qps: &'q mut [Slot<Qp>]) -> Option<&'q mut Qp> {
        let s = qps.get_mut(self.slot as usize)?;
        if s.variant != self.variant {
            return None;
        }
        s.obj.as_mut().filter(|qp| qp.qpn == self.qpn)
    }
}

impl Qp {
    pub(super) fn new(qpn: u32, attr: QpAttr) -> Self {
        let log2 = |n: u32| n.trailing_zeros();
        Qp {
            qpn,
            attr,
            state: QpState::Reset,
            conn: ConnAttrs::default(),
            sq: (attr.sq_wqebbs != 0).then(|| Sq {
                log: log2(attr.sq_wqebbs),
                buf: Ring::new(attr.sq_buf_addr, attr.buf_pages),
                pi: 0,
                ci: 0,
            }),
            rq: (attr.rq_wqes != 0).then(|| Rq {
                log: log2(attr.rq_wqes),
                log_stride: log2(attr.rq_stride),
                buf: Ring::new(attr.rq_buf_addr, attr.buf_pages),
                ci: 0,
            }),
            wait: None,
            rnr_retries: 0,
            timeout_retries: 0,
            comm_established: false,
            sqd_notify_pending: false,
            on_list: OnList::None,
            next: u32::MAX,
            rerun: false,
            responding: false,
            epoch: 0,
        }
    }

    /// The state of the QP.
    pub fn info(&self) -> QpInfo {
        QpInfo {
            qpn: self.qpn,
            service: self.attr.service,
            state: self.state,
            conn: self.conn,
            sq_pi: self.sq.map_or(0, |s| s.pi),
            sq_ci: self.sq.map_or(0, |s| s.ci),
            sq_wqebbs: self.attr.sq_wqebbs,
            rq_ci: self.rq.map_or(0, |r| r.ci),
            waiting: self.wait,
            dbr_addr: self.attr.dbr_addr,
            sq_buf_addr: self.attr.sq_buf_addr,
        }
    }

    /// The attributes the QP was created with.
    pub fn attr(&self) -> &QpAttr {
        &self.attr
    }

    /// Whether send WQEs are posted but not yet executed or flushed.
    pub(super) fn sq_pending(&self) -> bool {
        self.sq.is_some_and(|s| s.pi != s.ci)
    }

    /// Empties both queues (transition to RESET).
    pub(super) fn reset_queues(&mut self) {
        if let Some(sq) = &mut self.sq {
            sq.pi = 0;
            sq.ci = 0;
        }
        if let Some(rq) = &mut self.rq {
            rq.ci = 0;
        }
        self.wait = None;
        self.rnr_retries = 0;
        self.timeout_retries = 0;
        self.comm_established = false;
        self.sqd_notify_pending = false;
        self.responding = false;
        self.epoch = self.epoch.wrapping_add(1);
    }
}
