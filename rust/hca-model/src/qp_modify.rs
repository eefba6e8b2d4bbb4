// SPDX-License-Identifier: GPL-2.0

//! Modify-QP: the RC, UD and GSI rows of the IB spec's state transition
//! table (the kernel's `ib_modify_qp_is_ok`) and attribute range checks.
//!
//! The mask bits have the values of `enum ib_qp_attr_mask`, so the kernel
//! can pass a verbs mask through unchanged. Bits the model does not support
//! (alternate path, path migration state, capability changes, and Q_Key on
//! an RC QP) are refused wherever they appear.
//!
//! UD and GSI QPs have no path: the address of each datagram is in its
//! WQE. Their rows take the P_Key index, the port (UD only) and the
//! Q_Key; RTR to RTS requires the send PSN.

use super::caps::Caps;
use super::error::Error;
use super::mr::Access;
use super::qp::{ConnAttrs, QpService, QpState, RemoteQp};

/// Which fields of a [`QpModify`] are meant, with the `IB_QP_*` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct AttrMask(pub u32);

impl AttrMask {
    /// `IB_QP_STATE`: `state` is the target state.
    pub const STATE: AttrMask = AttrMask(1 << 0);
    /// `IB_QP_CUR_STATE`: `cur_state` must match the current state.
    pub const CUR_STATE: AttrMask = AttrMask(1 << 1);
    /// `IB_QP_EN_SQD_ASYNC_NOTIFY`.
    pub const EN_SQD_ASYNC_NOTIFY: AttrMask = AttrMask(1 << 2);
    /// `IB_QP_ACCESS_FLAGS`.
    pub const ACCESS_FLAGS: AttrMask = AttrMask(1 << 3);
    /// `IB_QP_PKEY_INDEX`.
    pub const PKEY_INDEX: AttrMask = AttrMask(1 << 4);
    /// `IB_QP_PORT`.
    pub const PORT: AttrMask = AttrMask(1 << 5);
    /// `IB_QP_QKEY` (UD and GSI only; refused on RC).
    pub const QKEY: AttrMask = AttrMask(1 << 6);
    /// `IB_QP_AV`: the destination HCA.
    pub const AV: AttrMask = AttrMask(1 << 7);
    /// `IB_QP_PATH_MTU`.
    pub const PATH_MTU: AttrMask = AttrMask(1 << 8);
    /// `IB_QP_TIMEOUT`.
    pub const TIMEOUT: AttrMask = AttrMask(1 << 9);
    /// `IB_QP_RETRY_CNT`.
    pub const RETRY_CNT: AttrMask = AttrMask(1 << 10);
    /// `IB_QP_RNR_RETRY`.
    pub const RNR_RETRY: AttrMask = AttrMask(1 << 11);
    /// `IB_QP_RQ_PSN`.
    pub const RQ_PSN: AttrMask = AttrMask(1 << 12);
    /// `IB_QP_MAX_QP_RD_ATOMIC`.
    pub const MAX_QP_RD_ATOMIC: AttrMask = AttrMask(1 << 13);
    /// `IB_QP_ALT_PATH` (refused: no alternate paths).
    pub const ALT_PATH: AttrMask = AttrMask(1 << 14);
    /// `IB_QP_MIN_RNR_TIMER`.
    pub const MIN_RNR_TIMER: AttrMask = AttrMask(1 << 15);
    /// `IB_QP_SQ_PSN`.
    pub const SQ_PSN: AttrMask = AttrMask(1 << 16);
    /// `IB_QP_MAX_DEST_RD_ATOMIC`.
    pub const MAX_DEST_RD_ATOMIC: AttrMask = AttrMask(1 << 17);
    /// `IB_QP_PATH_MIG_STATE` (refused: no path migration).
    pub const PATH_MIG_STATE: AttrMask = AttrMask(1 << 18);
    /// `IB_QP_CAP` (refused: queues are sized at creation).
    pub const CAP: AttrMask = AttrMask(1 << 19);
    /// `IB_QP_DEST_QPN`.
    pub const DEST_QPN: AttrMask = AttrMask(1 << 20);

    /// Both masks' bits.
    pub const fn or(self, other: AttrMask) -> AttrMask {
        AttrMask(self.0 | other.0)
    }

    /// Whether every bit of `other` is set.
    pub fn contains(self, other: AttrMask) -> bool {
        self.0 & other.0 == other.0
    }
}

/// A modify-QP request: the target state and the attributes named by
/// `mask` (the others are ignored).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct QpModify {
    /// Which fields apply.
    pub mask: AttrMask,
    /// Target state (with [`AttrMask::STATE`]; otherwise the QP stays in
    /// its state and only attributes change).
    pub state: QpState,
    /// The state the caller believes the QP is in ([`AttrMask::CUR_STATE`]).
    pub cur_state: QpState,
    /// Attribute values.
    pub attrs: ConnAttrs,
}

// The RC rows of the IB spec's QP state table: required and optional
// attributes of each allowed transition.
const RESET_INIT_REQ: AttrMask = AttrMask::PKEY_INDEX
    .or(AttrMask::PORT)
    .or(AttrMask::ACCESS_FLAGS);
const INIT_INIT_OPT: AttrMask = RESET_INIT_REQ;
const INIT_RTR_REQ: AttrMask = AttrMask::AV
    .or(AttrMask::PATH_MTU)
    .or(AttrMask::DEST_QPN)
    .or(AttrMask::RQ_PSN)
    .or(AttrMask::MAX_DEST_RD_ATOMIC)
    .or(AttrMask::MIN_RNR_TIMER);
const INIT_RTR_OPT: AttrMask = AttrMask::ALT_PATH
    .or(AttrMask::ACCESS_FLAGS)
    .or(AttrMask::PKEY_INDEX);
const RTR_RTS_REQ: AttrMask = AttrMask::TIMEOUT
    .or(AttrMask::RETRY_CNT)
    .or(AttrMask::RNR_RETRY)
    .or(AttrMask::SQ_PSN)
    .or(AttrMask::MAX_QP_RD_ATOMIC);
const TO_RTS_OPT: AttrMask = AttrMask::CUR_STATE
    .or(AttrMask::ALT_PATH)
    .or(AttrMask::ACCESS_FLAGS)
    .or(AttrMask::MIN_RNR_TIMER)
    .or(AttrMask::PATH_MIG_STATE);
const SQD_SQD_OPT: AttrMask = AttrMask::PKEY_INDEX
    .or(AttrMask::PORT)
    .or(AttrMask::AV)
    .or(AttrMask::ALT_PATH)
    .or(AttrMask::ACCESS_FLAGS)
    .or(AttrMask::TIMEOUT)
    .or(AttrMask::RETRY_CNT)
    .or(AttrMask::RNR_RETRY)
    .or(AttrMask::MAX_QP_RD_ATOMIC)
    .or(AttrMask::MAX_DEST_RD_ATOMIC)
    .or(AttrMask::MIN_RNR_TIMER)
    .or(AttrMask::PATH_MIG_STATE);
const SQE_RTS_OPT: AttrMask = AttrMask::CUR_STATE.or(AttrMask::ACCESS_FLAGS);

// The UD and GSI rows. They differ only in the port: a GSI QP's port is
// fixed when it is created.
const UD_RESET_INIT_REQ: AttrMask = AttrMask::PKEY_INDEX.or(AttrMask::PORT).or(AttrMask::QKEY);
const GSI_RESET_INIT_REQ: AttrMask = AttrMask::PKEY_INDEX.or(AttrMask::QKEY);
const DGRAM_PKEY_QKEY: AttrMask = AttrMask::PKEY_INDEX.or(AttrMask::QKEY);
const DGRAM_TO_RTS_OPT: AttrMask = AttrMask::CUR_STATE.or(AttrMask::QKEY);

const UNSUPPORTED: AttrMask = AttrMask::ALT_PATH
    .or(AttrMask::PATH_MIG_STATE)
    .or(AttrMask::CAP);
const KNOWN: AttrMask = AttrMask((1 << 21) - 1);

/// Required and optional attributes of the transition `cur -> next` of an
/// RC QP, or `None` if the IB spec does not allow it.
fn rc_transition(cur: QpState, next: QpState) -> Option<(AttrMask, AttrMask)> {
    use QpState::*;
    let none = AttrMask(0);
    Some(match (cur, next) {
        (_, Reset) | (_, Err) => (none, none),
        (Reset, Init) => (RESET_INIT_REQ, none),
        (Init, Init) => (none, INIT_INIT_OPT),
        (Init, Rtr) => (INIT_RTR_REQ, INIT_RTR_OPT),
        (Rtr, Rts) => (RTR_RTS_REQ, TO_RTS_OPT),
        (Rts, Rts) | (Sqd, Rts) => (none, TO_RTS_OPT),
        (Rts, Sqd) => (none, AttrMask::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => (none, SQD_SQD_OPT),
        (Sqe, Rts) => (none, SQE_RTS_OPT),
        _ => return None,
    })
}

/// Required and optional attributes of the transition `cur -> next` of a
/// UD QP (`gsi` false) or the GSI QP, or `None` if the IB spec does not
/// allow it.
fn dgram_transition(gsi: bool, cur: QpState, next: QpState) -> Option<(AttrMask, AttrMask)> {
    use QpState::*;
    let none = AttrMask(0);
    let (init_req, init_opt) = if gsi {
        (GSI_RESET_INIT_REQ, DGRAM_PKEY_QKEY)
    } else {
        (UD_RESET_INIT_REQ, UD_RESET_INIT_REQ)
    };
    Some(match (cur, next) {
        (_, Reset) | (_, Err) => (none, none),
        (Reset, Init) => (init_req, none),
        (Init, Init) => (none, init_opt),
        (Init, Rtr) | (Sqd, Sqd) => (none, DGRAM_PKEY_QKEY),
        (Rtr, Rts) => (AttrMask::SQ_PSN, DGRAM_TO_RTS_OPT),
        (Rts, Rts) | (Sqd, Rts) | (Sqe, Rts) => (none, DGRAM_TO_RTS_OPT),
        (Rts, Sqd) => (none, AttrMask::EN_SQD_ASYNC_NOTIFY),
        _ => return None,
    })
}

/// The row of the transition table for `service`.
fn transition(service: QpService, cur: QpState, next: QpState) -> Option<(AttrMask, AttrMask)> {
    match service {
        QpService::Rc => rc_transition(cur, next),
        QpService::Ud => dgram_transition(false, cur, next),
        QpService::Gsi => dgram_transition(true, cur, next),
    }
}

/// Checks `m` against the transition table of `service` and the value
/// ranges, and returns the target state.
///
/// # Errors
///
/// [`Error::BadTransition`] if the transition is not allowed, a required
/// attribute is missing, an attribute is not allowed for it, or
/// `cur_state` does not match; [`Error::Invalid`] if a value is out of
/// range or an unsupported attribute is named (Q_Key on an RC QP
/// included).
pub fn check(
    service: QpService,
    cur: QpState,
    m: &QpModify,
    caps: &Caps,
) -> Result<QpState, Error> {
    let mask = m.mask;
    let rc_qkey = service == QpService::Rc && mask.contains(AttrMask::QKEY);
    if mask.0 & !KNOWN.0 != 0 || mask.0 & UNSUPPORTED.0 != 0 || rc_qkey {
        return Err(Error::Invalid);
    }
    let next = if mask.contains(AttrMask::STATE) {
        m.state
    } else {
        cur
    };
    if mask.contains(AttrMask::CUR_STATE) && m.cur_state != cur {
        return Err(Error::BadTransition);
    }
    let (req, opt) = transition(service, cur, next).ok_or(Error::BadTransition)?;
    let given = AttrMask(mask.0 & !AttrMask::STATE.0);
    if !given.contains(req) || given.0 & !(req.0 | opt.0) != 0 {
        return Err(Error::BadTransition);
    }
    let a = &m.attrs;
    let bad = (mask.contains(AttrMask::PORT) && a.port != 1)
        || (mask.contains(AttrMask::AV) && a.sl > 15)
        || (mask.contains(AttrMask::PKEY_INDEX) && a.pkey_index != 0)
        || (mask.contains(AttrMask::ACCESS_FLAGS) && !Access::ALL.contains(a.access))
        || (mask.contains(AttrMask::PATH_MTU) && !(1..=5).contains(&a.path_mtu))
        || (mask.contains(AttrMask::DEST_QPN) && a.dest.qpn > 0xff_ffff)
        || (mask.contains(AttrMask::RQ_PSN) && a.rq_psn > 0xff_ffff)
        || (mask.contains(AttrMask::SQ_PSN) && a.sq_psn > 0xff_ffff)
        || (mask.contains(AttrMask::MIN_RNR_TIMER) && a.min_rnr_timer > 31)
        || (mask.contains(AttrMask::TIMEOUT) && a.timeout > 31)
        || (mask.contains(AttrMask::RETRY_CNT) && a.retry_cnt > 7)
        || (mask.contains(AttrMask::RNR_RETRY) && a.rnr_retry > 7)
        || (mask.contains(AttrMask::MAX_QP_RD_ATOMIC) && a.max_rd_atomic > caps.max_qp_rd_atom)
        || (mask.contains(AttrMask::MAX_DEST_RD_ATOMIC)
            && a.max_dest_rd_atomic > caps.max_qp_dest_rd_atom);
    if bad {
        return Err(Error::Invalid);
    }
    Ok(next)
}

/// Copies the attributes named by `m.mask` into `conn`.
pub fn apply(conn: &mut ConnAttrs, m: &QpModify) {
    let mask = m.mask;
    let a = &m.attrs;
    if mask.contains(AttrMask::ACCESS_FLAGS) {
        conn.access = a.access;
    }
    if mask.contains(AttrMask::PKEY_INDEX) {
        conn.pkey_index = a.pkey_index;
    }
    if mask.contains(AttrMask::PORT) {
        conn.port = a.port;
    }
    if mask.contains(AttrMask::AV) {
        conn.dest = RemoteQp {
            hca: a.dest.hca,
            qpn: conn.dest.qpn,
        };
        conn.sl = a.sl;
    }
    if mask.contains(AttrMask::DEST_QPN) {
        conn.dest.qpn = a.dest.qpn;
    }
    if mask.contains(AttrMask::PATH_MTU) {
        conn.path_mtu = a.path_mtu;
    }
    if mask.contains(AttrMask::RQ_PSN) {
        conn.rq_psn = a.rq_psn;
    }
    if mask.contains(AttrMask::SQ_PSN) {
        conn.sq_psn = a.sq_psn;
    }
    if mask.contains(AttrMask::MAX_DEST_RD_ATOMIC) {
        conn.max_dest_rd_atomic = a.max_dest_rd_atomic;
    }
    if mask.contains(AttrMask::MAX_QP_RD_ATOMIC) {
        conn.max_rd_atomic = a.max_rd_atomic;
    }
    if mask.contains(AttrMask::MIN_RNR_TIMER) {
        conn.min_rnr_timer = a.min_rnr_timer;
    }
    if mask.contains(AttrMask::TIMEOUT) {
        conn.timeout = a.timeout;
    }
    if mask.contains(AttrMask::RETRY_CNT) {
        conn.retry_cnt = a.retry_cnt;
    }
    if mask.contains(AttrMask::RNR_RETRY) {
        conn.rnr_retry = a.rnr_retry;
    }
    if mask.contains(AttrMask::EN_SQD_ASYNC_NOTIFY) {
        conn.sqd_async_notify = a.sqd_async_notify;
    }
    if mask.contains(AttrMask::QKEY) {
        conn.qkey = a.qkey;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rc(cur: QpState, m: &QpModify, caps: &Caps) -> Result<QpState, Error> {
        check(QpService::Rc, cur, m, caps)
    }

    fn modify(state: QpState, mask: AttrMask) -> QpModify {
        QpModify {
            mask: mask.or(AttrMask::STATE),
            state,
            cur_state: QpState::Reset,
            attrs: ConnAttrs {
                port: 1,
                path_mtu: 5,
                ..ConnAttrs::default()
            },
        }
    }

    #[test]
    fn rc_path_to_rts() {
        let caps = Caps::DEFAULT;
        use QpState::{Init, Reset, Rtr, Rts, Sqd, Sqe};
        assert_eq!(rc(Reset, &modify(Init, RESET_INIT_REQ), &caps), Ok(Init));
        assert_eq!(rc(Init, &modify(Rtr, INIT_RTR_REQ), &caps), Ok(Rtr));
        assert_eq!(rc(Rtr, &modify(Rts, RTR_RTS_REQ), &caps), Ok(Rts));
        assert_eq!(rc(Rts, &modify(Sqd, AttrMask(0)), &caps), Ok(Sqd));
        assert_eq!(rc(Sqd, &modify(Rts, AttrMask(0)), &caps), Ok(Rts));
        for s in [Reset, Init, Rtr, Rts, Sqd, Sqe, QpState::Err] {
            assert_eq!(
                rc(s, &modify(QpState::Err, AttrMask(0)), &caps),
                Ok(QpState::Err)
            );
            assert_eq!(rc(s, &modify(Reset, AttrMask(0)), &caps), Ok(Reset));
        }
    }

    #[test]
    fn missing_extra_and_bad_values() {
        let caps = Caps::DEFAULT;
        use QpState::{Init, Reset, Rtr, Rts, Sqd, Sqe};
        // Missing a required attribute.
        assert_eq!(
            rc(Reset, &modify(Init, AttrMask::PORT), &caps),
            Err(Error::BadTransition)
        );
        // An attribute the transition does not allow.
        let m = modify(Init, RESET_INIT_REQ.or(AttrMask::TIMEOUT));
        assert_eq!(rc(Reset, &m, &caps), Err(Error::BadTransition));
        // Skipping states.
        assert_eq!(
            rc(Reset, &modify(Rts, RTR_RTS_REQ), &caps),
            Err(Error::BadTransition)
        );
        assert_eq!(
            rc(QpState::Err, &modify(Rts, AttrMask(0)), &caps),
            Err(Error::BadTransition)
        );
        assert_eq!(
            rc(Rts, &modify(Sqe, AttrMask(0)), &caps),
            Err(Error::BadTransition)
        );
        // Values out of range.
        let mut m = modify(Init, RESET_INIT_REQ);
        m.attrs.port = 2;
        assert_eq!(rc(Reset, &m, &caps), Err(Error::Invalid));
        let mut m = modify(Rts, RTR_RTS_REQ);
        m.attrs.rnr_retry = 8;
        assert_eq!(rc(Rtr, &m, &caps), Err(Error::Invalid));
        m.attrs.rnr_retry = 7;
        m.attrs.max_rd_atomic = 17;
        assert_eq!(rc(Rtr, &m, &caps), Err(Error::Invalid));
        // The SL is 4 bits and belongs to the address vector.
        let mut m = modify(Rtr, INIT_RTR_REQ);
        m.attrs.sl = 15;
        assert_eq!(rc(Init, &m, &caps), Ok(Rtr));
        m.attrs.sl = 16;
        assert_eq!(rc(Init, &m, &caps), Err(Error::Invalid));
        // Unsupported and unknown bits.
        let m = modify(Rtr, INIT_RTR_REQ.or(AttrMask::ALT_PATH));
        assert_eq!(rc(Init, &m, &caps), Err(Error::Invalid));
        let m = modify(Rtr, INIT_RTR_REQ.or(AttrMask(1 << 25)));
        assert_eq!(rc(Init, &m, &caps), Err(Error::Invalid));
        // CUR_STATE must match.
        let mut m = modify(Rts, AttrMask::CUR_STATE);
        m.cur_state = Sqd;
        assert_eq!(rc(Rts, &m, &caps), Err(Error::BadTransition));
        m.cur_state = Rts;
        assert_eq!(rc(Rts, &m, &caps), Ok(Rts));
        // Attribute-only change without STATE stays in the state.
        let m = QpModify {
            mask: AttrMask::MIN_RNR_TIMER,
            ..modify(Rts, AttrMask(0))
        };
        assert_eq!(rc(Rts, &m, &caps), Ok(Rts));
    }

    #[test]
    fn ud_and_gsi_rows_follow_ib_modify_qp_is_ok() {
        let caps = Caps::DEFAULT;
        use QpService::{Gsi, Rc, Ud};
        use QpState::{Init, Reset, Rtr, Rts, Sqd, Sqe};
        let ud = |cur, m: &QpModify| check(Ud, cur, m, &caps);
        let gsi = |cur, m: &QpModify| check(Gsi, cur, m, &caps);
        // RESET -> INIT: UD needs the port, the GSI QP must not name it.
        let m = modify(Init, UD_RESET_INIT_REQ);
        assert_eq!(ud(Reset, &m), Ok(Init));
        assert_eq!(gsi(Reset, &m), Err(Error::BadTransition));
        assert_eq!(gsi(Reset, &modify(Init, GSI_RESET_INIT_REQ)), Ok(Init));
        assert_eq!(
            ud(Reset, &modify(Init, GSI_RESET_INIT_REQ)),
            Err(Error::BadTransition)
        );
        // An RC attribute is not a UD one, and Q_Key is refused on RC.
        let m = modify(Init, UD_RESET_INIT_REQ.or(AttrMask::ACCESS_FLAGS));
        assert_eq!(ud(Reset, &m), Err(Error::BadTransition));
        let m = modify(Init, RESET_INIT_REQ.or(AttrMask::QKEY));
        assert_eq!(check(Rc, Reset, &m, &caps), Err(Error::Invalid));
        // INIT -> RTR needs nothing; AV, MTU and the rest are refused.
        assert_eq!(ud(Init, &modify(Rtr, AttrMask(0))), Ok(Rtr));
        assert_eq!(gsi(Init, &modify(Rtr, DGRAM_PKEY_QKEY)), Ok(Rtr));
        assert_eq!(
            ud(Init, &modify(Rtr, AttrMask::AV)),
            Err(Error::BadTransition)
        );
        // RTR -> RTS needs the send PSN only.
        assert_eq!(
            ud(Rtr, &modify(Rts, AttrMask(0))),
            Err(Error::BadTransition)
        );
        assert_eq!(ud(Rtr, &modify(Rts, AttrMask::SQ_PSN)), Ok(Rts));
        let m = modify(Rts, AttrMask::SQ_PSN.or(AttrMask::TIMEOUT));
        assert_eq!(gsi(Rtr, &m), Err(Error::BadTransition));
        // Q_Key is optional in every later row, and the rest as for RC.
        for (cur, next) in [(Rts, Rts), (Sqd, Rts), (Sqe, Rts), (Sqd, Sqd), (Init, Init)] {
            assert_eq!(ud(cur, &modify(next, AttrMask::QKEY)), Ok(next));
            assert_eq!(gsi(cur, &modify(next, AttrMask::QKEY)), Ok(next));
        }
        assert_eq!(ud(Init, &modify(Init, AttrMask::PORT)), Ok(Init));
        assert_eq!(
            gsi(Init, &modify(Init, AttrMask::PORT)),
            Err(Error::BadTransition)
        );
        assert_eq!(
            ud(Rts, &modify(Sqd, AttrMask::EN_SQD_ASYNC_NOTIFY)),
            Ok(Sqd)
        );
        assert_eq!(
            ud(Rts, &modify(Rts, AttrMask::PKEY_INDEX)),
            Err(Error::BadTransition)
        );
        assert_eq!(
            ud(Reset, &modify(Rts, AttrMask::SQ_PSN)),
            Err(Error::BadTransition)
        );
        let mut conn = ConnAttrs::default();
        let mut m = modify(Rts, AttrMask::QKEY);
        m.attrs.qkey = 0x8001_0000;
        apply(&mut conn, &m);
        assert_eq!(conn.qkey, 0x8001_0000);
    }
}
