// SPDX-License-Identifier: GPL-2.0

//! The kernel's rules the fuzzer predicts outcomes from (host-independent:
//! unit-tested on the host): an HCA's limits, CQ and QP geometry, and the
//! RC state machine of MODIFY_QP.

use rmlx5_abi::uapi::*;

use crate::sys::PAGE;

/// An HCA's limits as QUERY_DEVICE reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DevLimits {
    pub(crate) max_qp_wr: u32,
    pub(crate) max_sge: u32,
    pub(crate) max_cqe: u32,
    pub(crate) max_inline: u32,
    pub(crate) vectors: u32,
    /// Outstanding reads/atomics as responder (`max_qp_rd_atom`).
    pub(crate) max_rd_atom: u32,
    /// As requester (`max_qp_init_rd_atom`).
    pub(crate) max_init_rd_atom: u32,
    pub(crate) max_mr_size: u64,
}

impl DevLimits {
    /// The values Documentation/uverbs.md gives (for the host tests).
    #[cfg(test)]
    pub(crate) const DOC: DevLimits = DevLimits {
        max_qp_wr: 2048,
        max_sge: 30,
        max_cqe: 65536,
        max_inline: 512,
        vectors: 2,
        max_rd_atom: 16,
        max_init_rd_atom: 16,
        max_mr_size: 1 << 32,
    };

    pub(crate) fn from_query(q: &QueryDevice) -> DevLimits {
        DevLimits {
            max_qp_wr: q.max_qp_wr,
            max_sge: q.max_sge,
            max_cqe: q.max_cqe,
            max_inline: q.max_inline_data,
            vectors: q.num_comp_vectors,
            max_rd_atom: q.max_qp_rd_atom,
            max_init_rd_atom: q.max_qp_init_rd_atom,
            max_mr_size: q.max_mr_size,
        }
    }
}

/// The ring a CREATE_CQ of `cqe` entries gets: entries (a power of two)
/// and whole-page buffer size; `None` if the request is out of range.
pub(crate) fn cq_geometry(cqe: u32, max_cqe: u32) -> Option<(u32, u64)> {
    let n = cqe.checked_next_power_of_two()?;
    if cqe == 0 || n > max_cqe {
        return None;
    }
    let bytes = (u64::from(n) * 64)
        .max(PAGE as u64)
        .next_multiple_of(PAGE as u64);
    Some((n, bytes))
}

/// A QP's queue geometry as CREATE_QP computes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geom {
    pub(crate) sq_wqe_cnt: u32,
    pub(crate) rq_wqe_cnt: u32,
    pub(crate) rq_wqe_shift: u32,
    pub(crate) sq_buf_offset: u32,
    pub(crate) buf_bytes: u64,
    pub(crate) max_send_wr: u32,
    pub(crate) max_recv_wr: u32,
    pub(crate) max_send_sge: u32,
    pub(crate) max_recv_sge: u32,
}

/// Whether a CREATE_QP's fields pass the argument check (type, caps
/// within the device's limits, `sq_sig_all`).
pub(crate) fn qp_caps_in_range(a: &CreateQp, l: &DevLimits) -> bool {
    a.qp_type == QPT_RC
        && a.max_send_wr <= l.max_qp_wr
        && a.max_recv_wr <= l.max_qp_wr
        && a.max_send_sge <= l.max_sge
        && a.max_recv_sge <= l.max_sge
        && a.max_inline_data <= l.max_inline
        && a.sq_sig_all <= 1
}

/// The geometry of a QP with in-range caps: SQ in 64-byte WQEBBs sized for
/// `max_send_wr` of the largest WQE, RQ of power-of-two stride after it.
pub(crate) fn qp_geometry(a: &CreateQp, l: &DevLimits) -> Option<Geom> {
    let sges = a.max_send_sge.max(1).checked_mul(16)?;
    let inline = a
        .max_inline_data
        .checked_add(4)?
        .checked_next_multiple_of(16)?;
    let wqe = 48u32.checked_add(sges.max(inline))?;
    let per = wqe.div_ceil(64);
    let sq = a
        .max_send_wr
        .max(1)
        .checked_mul(per)?
        .checked_next_power_of_two()?;
    let sq_limit = l.max_qp_wr.checked_mul(per)?.checked_next_power_of_two()?;
    if sq > sq_limit {
        return None;
    }
    let stride = a
        .max_recv_sge
        .max(1)
        .checked_mul(16)?
        .checked_next_power_of_two()?;
    // The RQ fills at least one 64-byte WQEBB; the SQ follows it.
    let rq = a
        .max_recv_wr
        .max(1)
        .checked_next_power_of_two()?
        .max(64 / stride);
    if rq > l.max_qp_wr.checked_next_power_of_two()? {
        return None;
    }
    let sq_off = rq.checked_mul(stride)?;
    let buf = sq_off.checked_add(sq.checked_mul(64)?)?;
    Some(Geom {
        sq_wqe_cnt: sq,
        rq_wqe_cnt: rq,
        rq_wqe_shift: stride.trailing_zeros(),
        sq_buf_offset: sq_off,
        buf_bytes: u64::from(buf),
        max_send_wr: sq / per,
        max_recv_wr: rq,
        max_send_sge: ((per * 64 - 48) / 16).min(l.max_sge),
        max_recv_sge: stride / 16,
    })
}

// Mask bits the ABI does not offer but the state machine's table names.
const QP_EN_SQD_ASYNC_NOTIFY: u32 = 1 << 2;
const QP_ALT_PATH: u32 = 1 << 14;
const QP_PATH_MIG_STATE: u32 = 1 << 18;

/// Required and optional attributes of an RC transition (IB spec table),
/// `None` if it is not allowed.
pub(crate) fn transition(cur: u32, next: u32) -> Option<(u32, u32)> {
    const RESET_INIT_REQ: u32 = QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS;
    const INIT_RTR_REQ: u32 =
        QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN | QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER;
    const INIT_RTR_OPT: u32 = QP_ALT_PATH | QP_ACCESS_FLAGS | QP_PKEY_INDEX;
    const RTR_RTS_REQ: u32 =
        QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_SQ_PSN | QP_MAX_QP_RD_ATOMIC;
    const TO_RTS_OPT: u32 =
        QP_CUR_STATE | QP_ALT_PATH | QP_ACCESS_FLAGS | QP_MIN_RNR_TIMER | QP_PATH_MIG_STATE;
    const SQD_SQD_OPT: u32 = QP_PKEY_INDEX
        | QP_PORT
        | QP_AV
        | QP_ALT_PATH
        | QP_ACCESS_FLAGS
        | QP_TIMEOUT
        | QP_RETRY_CNT
        | QP_RNR_RETRY
        | QP_MAX_QP_RD_ATOMIC
        | QP_MAX_DEST_RD_ATOMIC
        | QP_MIN_RNR_TIMER
        | QP_PATH_MIG_STATE;
    const SQE_RTS_OPT: u32 = QP_CUR_STATE | QP_ACCESS_FLAGS;
    Some(match (cur, next) {
        (_, QPS_RESET) | (_, QPS_ERR) => (0, 0),
        (QPS_RESET, QPS_INIT) => (RESET_INIT_REQ, 0),
        (QPS_INIT, QPS_INIT) => (0, RESET_INIT_REQ),
        (QPS_INIT, QPS_RTR) => (INIT_RTR_REQ, INIT_RTR_OPT),
        (QPS_RTR, QPS_RTS) => (RTR_RTS_REQ, TO_RTS_OPT),
        (QPS_RTS, QPS_RTS) | (QPS_SQD, QPS_RTS) => (0, TO_RTS_OPT),
        (QPS_RTS, QPS_SQD) => (0, QP_EN_SQD_ASYNC_NOTIFY),
        (QPS_SQD, QPS_SQD) => (0, SQD_SQD_OPT),
        (QPS_SQE, QPS_RTS) => (0, SQE_RTS_OPT),
        _ => return None,
    })
}

/// The state a MODIFY_QP of a QP in `cur` leads to, or `None` if it is
/// refused (EINVAL): the ABI's argument check (known mask bits, ranges,
/// attributes outside the mask zero), the peer LID naming an HCA, then the
/// state machine (transition, required and allowed attributes, CUR_STATE).
pub(crate) fn modify_outcome(cur: u32, m: &ModifyQp, l: &DevLimits, num_hcas: u32) -> Option<u32> {
    if !modify_args_ok(m, l) {
        return None;
    }
    let mask = m.attr_mask;
    if mask & QP_AV != 0 && m.dlid > num_hcas {
        return None;
    }
    let next = if mask & QP_STATE != 0 {
        m.qp_state
    } else {
        cur
    };
    if mask & QP_CUR_STATE != 0 && m.cur_qp_state != cur {
        return None;
    }
    let (req, opt) = transition(cur, next)?;
    let given = mask & !QP_STATE;
    if given & req != req || given & !(req | opt) != 0 {
        return None;
    }
    Some(next)
}

/// Whether a MODIFY_QP argument passes the ABI's check (rmlx5-abi
/// `ModifyQp::check`, the same on every device): no flags, known mask
/// bits, each attribute the mask names in its range and every other one
/// zero.
pub(crate) fn modify_args_ok(m: &ModifyQp, l: &DevLimits) -> bool {
    if m.hdr.flags != 0 || m.attr_mask & !QP_ATTR_MASK_ALL != 0 {
        return false;
    }
    let mask = m.attr_mask;
    let attrs: [(u32, u32, bool); 16] = [
        (QP_STATE, m.qp_state, m.qp_state <= QPS_ERR),
        (QP_CUR_STATE, m.cur_qp_state, m.cur_qp_state <= QPS_ERR),
        (
            QP_PATH_MTU,
            m.path_mtu,
            (1..=MTU_4096).contains(&m.path_mtu),
        ),
        (QP_DEST_QPN, m.dest_qp_num, m.dest_qp_num <= 0xff_ffff),
        (QP_RQ_PSN, m.rq_psn, m.rq_psn <= 0xff_ffff),
        (QP_SQ_PSN, m.sq_psn, m.sq_psn <= 0xff_ffff),
        (
            QP_ACCESS_FLAGS,
            m.qp_access_flags,
            m.qp_access_flags & !ACCESS_ALL == 0,
        ),
        (
            QP_MAX_QP_RD_ATOMIC,
            m.max_rd_atomic,
            m.max_rd_atomic <= l.max_init_rd_atom,
        ),
        (
            QP_MAX_DEST_RD_ATOMIC,
            m.max_dest_rd_atomic,
            m.max_dest_rd_atomic <= l.max_rd_atom,
        ),
        (QP_MIN_RNR_TIMER, m.min_rnr_timer, m.min_rnr_timer <= 31),
        (QP_TIMEOUT, m.timeout, m.timeout <= 31),
        (QP_RETRY_CNT, m.retry_cnt, m.retry_cnt <= 7),
        (QP_RNR_RETRY, m.rnr_retry, m.rnr_retry <= 7),
        (QP_PORT, m.port_num, m.port_num == 1),
        (QP_AV, m.dlid, (1..=0xffff).contains(&m.dlid)),
        (QP_AV, m.sl, m.sl <= 15),
    ];
    attrs.iter().all(
        |&(b, value, in_range)| {
            if mask & b == 0 {
                value == 0
            } else {
                in_range
            }
        },
    )
}

/// The first LID that names no port: a ConnectX function takes any
/// unicast LID as a peer (`peer_of_dlid` in drivers/rmlx5/cx/dev.rs; the
/// emulator's fabric, hca-model's `index_of_lid`, the same).
pub(crate) const FIRST_MULTICAST_LID: u32 = 0xc000;

/// What MODIFY_QP does on a ConnectX function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FnModify {
    /// The kernel refuses it before any command reaches the function.
    Refused(i32),
    /// The function accepts the command: the QP's new state.
    Moves(u32),
}

/// What MODIFY_QP `m` does on a ConnectX function to a QP the driver last
/// moved to `cur` (which is the device's state unless the device moved
/// the QP to ERR by itself). The kernel's order (uverbs/commands.rs
/// `modify_qp`, cx/dev.rs `modify_qp`): the ABI's argument check, the
/// peer LID, then a mask without `QP_STATE` is `EOPNOTSUPP` (the function
/// only moves QPs); then the IB spec's transition table, as on the
/// software HCA (`QP_CUR_STATE`, required and allowed attributes; the
/// driver runs hca-model's `qp_modify::check`), and of what it allows only
/// RESET and ERR from anywhere, RESET to INIT, INIT to RTR and RTR to RTS
/// are commands; any other transition is `EINVAL`.
pub(crate) fn fn_modify(cur: u32, m: &ModifyQp, l: &DevLimits) -> FnModify {
    if !modify_args_ok(m, l) {
        return FnModify::Refused(libc::EINVAL);
    }
    let mask = m.attr_mask;
    if mask & QP_AV != 0 && m.dlid >= FIRST_MULTICAST_LID {
        return FnModify::Refused(libc::EINVAL);
    }
    if mask & QP_STATE == 0 {
        return FnModify::Refused(libc::EOPNOTSUPP);
    }
    let next = m.qp_state;
    if mask & QP_CUR_STATE != 0 && m.cur_qp_state != cur {
        return FnModify::Refused(libc::EINVAL);
    }
    let Some((req, opt)) = transition(cur, next) else {
        return FnModify::Refused(libc::EINVAL);
    };
    let given = mask & !QP_STATE;
    if given & req != req || given & !(req | opt) != 0 {
        return FnModify::Refused(libc::EINVAL);
    }
    match (cur, next) {
        (_, QPS_RESET)
        | (_, QPS_ERR)
        | (QPS_RESET, QPS_INIT)
        | (QPS_INIT, QPS_RTR)
        | (QPS_RTR, QPS_RTS) => FnModify::Moves(next),
        _ => FnModify::Refused(libc::EINVAL),
    }
}

/// What MODIFY_QP `m` does on a ConnectX function to a QP whose state is
/// not known (traffic may have moved it to ERR behind the driver's back,
/// and the firmware refuses a command whose source state is not the
/// QP's: the emulator would count that as the driver's mistake), if that
/// is the same whatever the state and no command can meet a firmware
/// that disagrees with the driver about the state: refusals before any
/// command, and moves to RESET or ERR, which the firmware takes from any
/// state. `None` for the rest (never issued).
pub(crate) fn fn_modify_any(m: &ModifyQp, l: &DevLimits) -> Option<FnModify> {
    let first = fn_modify(QPS_RESET, m, l);
    if !(QPS_RESET..=QPS_ERR).all(|s| fn_modify(s, m, l) == first) {
        return None;
    }
    match first {
        FnModify::Moves(n) if n != QPS_RESET && n != QPS_ERR => None,
        o => Some(o),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cq_geometry_rules() {
        let max = DevLimits::DOC.max_cqe;
        assert_eq!(cq_geometry(1, max), Some((1, 4096)));
        assert_eq!(cq_geometry(100, max), Some((128, 8192)));
        assert_eq!(cq_geometry(4096, max), Some((4096, 262_144)));
        assert_eq!(cq_geometry(max, max), Some((max, 4 << 20)));
        assert_eq!(cq_geometry(max / 2 + 1, max), Some((max, 4 << 20)));
        assert_eq!(cq_geometry(0, max), None);
        assert_eq!(cq_geometry(max + 1, max), None);
        assert_eq!(cq_geometry(u32::MAX, max), None);
        assert_eq!(cq_geometry((1 << 31) + 1, max), None);
    }

    fn qp(wr: u32, rwr: u32, sge: u32, rsge: u32, inline: u32) -> CreateQp {
        CreateQp {
            qp_type: QPT_RC,
            max_send_wr: wr,
            max_recv_wr: rwr,
            max_send_sge: sge,
            max_recv_sge: rsge,
            max_inline_data: inline,
            ..CreateQp::default()
        }
    }

    #[test]
    fn qp_geometry_rules() {
        let l = DevLimits::DOC;
        // 48 + max(2 * 16, 68 -> 80) = 128 bytes: 2 WQEBBs per WQE.
        let g = qp_geometry(&qp(64, 64, 2, 2, 64), &l).unwrap();
        assert_eq!(
            g,
            Geom {
                sq_wqe_cnt: 128,
                rq_wqe_cnt: 64,
                rq_wqe_shift: 5,
                sq_buf_offset: 2048,
                buf_bytes: 2048 + 128 * 64,
                max_send_wr: 64,
                max_recv_wr: 64,
                max_send_sge: 5,
                max_recv_sge: 2,
            }
        );
        // Zero caps are treated as one.
        let g = qp_geometry(&qp(0, 0, 0, 0, 0), &l).unwrap();
        assert_eq!((g.sq_wqe_cnt, g.rq_wqe_cnt, g.rq_wqe_shift), (1, 4, 4));
        assert_eq!(g.sq_buf_offset, 64);
        // The largest queues fit.
        let g = qp_geometry(&qp(2048, 2048, 30, 30, 512), &l).unwrap();
        assert_eq!(g.sq_wqe_cnt, 32768);
        assert_eq!(g.max_send_wr, 32768 / 9);
        assert_eq!(g.rq_wqe_shift, 9);
        assert!(qp_caps_in_range(&qp(2048, 2048, 30, 30, 512), &l));
        for bad in [
            qp(2049, 1, 1, 1, 0),
            qp(1, 2049, 1, 1, 0),
            qp(1, 1, 31, 1, 0),
            qp(1, 1, 1, 31, 0),
            qp(1, 1, 1, 1, 513),
            qp(u32::MAX, 1, 1, 1, 0),
            CreateQp {
                qp_type: 3,
                ..qp(1, 1, 1, 1, 0)
            },
            CreateQp {
                sq_sig_all: 2,
                ..qp(1, 1, 1, 1, 0)
            },
        ] {
            assert!(!qp_caps_in_range(&bad, &l), "{bad:?}");
        }
    }

    fn m(mask: u32, state: u32) -> ModifyQp {
        ModifyQp {
            attr_mask: mask,
            qp_state: state,
            ..ModifyQp::default()
        }
    }

    #[test]
    fn modify_outcomes() {
        let l = DevLimits::DOC;
        let to_init = ModifyQp {
            port_num: 1,
            qp_access_flags: ACCESS_REMOTE_WRITE,
            ..m(
                QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS,
                QPS_INIT,
            )
        };
        assert_eq!(modify_outcome(QPS_RESET, &to_init, &l, 2), Some(QPS_INIT));
        // Missing a required attribute, or from the wrong state.
        let mut x = to_init;
        x.attr_mask &= !QP_PKEY_INDEX;
        assert_eq!(modify_outcome(QPS_RESET, &x, &l, 2), None);
        assert_eq!(modify_outcome(QPS_RTS, &to_init, &l, 2), None);
        // INIT -> INIT takes the same attributes as optional ones.
        assert_eq!(modify_outcome(QPS_INIT, &to_init, &l, 2), Some(QPS_INIT));
        // An attribute outside the mask must be zero.
        let mut x = to_init;
        x.timeout = 3;
        assert_eq!(modify_outcome(QPS_RESET, &x, &l, 2), None);
        // An attribute the transition does not allow.
        let mut x = to_init;
        x.attr_mask |= QP_TIMEOUT;
        assert_eq!(modify_outcome(QPS_RESET, &x, &l, 2), None);
        let to_rtr = ModifyQp {
            dlid: 2,
            sl: 15,
            path_mtu: 5,
            dest_qp_num: 0x123,
            max_dest_rd_atomic: 16,
            min_rnr_timer: 31,
            ..m(
                QP_STATE
                    | QP_AV
                    | QP_PATH_MTU
                    | QP_DEST_QPN
                    | QP_RQ_PSN
                    | QP_MAX_DEST_RD_ATOMIC
                    | QP_MIN_RNR_TIMER,
                QPS_RTR,
            )
        };
        assert_eq!(modify_outcome(QPS_INIT, &to_rtr, &l, 2), Some(QPS_RTR));
        // A LID naming no HCA, an SL beyond 4 bits, too many reads.
        for f in [
            |x: &mut ModifyQp| x.dlid = 3,
            |x: &mut ModifyQp| x.dlid = 0,
            |x: &mut ModifyQp| x.sl = 16,
            |x: &mut ModifyQp| x.max_dest_rd_atomic = 17,
            |x: &mut ModifyQp| x.path_mtu = 6,
            |x: &mut ModifyQp| x.dest_qp_num = 1 << 24,
        ] {
            let mut x = to_rtr;
            f(&mut x);
            assert_eq!(modify_outcome(QPS_INIT, &x, &l, 2), None, "{x:?}");
        }
        let to_rts = ModifyQp {
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 16,
            ..m(
                QP_STATE
                    | QP_TIMEOUT
                    | QP_RETRY_CNT
                    | QP_RNR_RETRY
                    | QP_SQ_PSN
                    | QP_MAX_QP_RD_ATOMIC,
                QPS_RTS,
            )
        };
        assert_eq!(modify_outcome(QPS_RTR, &to_rts, &l, 2), Some(QPS_RTS));
        let mut x = to_rts;
        x.attr_mask |= QP_CUR_STATE;
        x.cur_qp_state = QPS_RTR;
        assert_eq!(modify_outcome(QPS_RTR, &x, &l, 2), Some(QPS_RTS));
        x.cur_qp_state = QPS_INIT;
        assert_eq!(modify_outcome(QPS_RTR, &x, &l, 2), None);
        assert_eq!(
            modify_outcome(QPS_RTS, &m(QP_STATE, QPS_SQD), &l, 2),
            Some(QPS_SQD)
        );
        assert_eq!(
            modify_outcome(QPS_SQD, &m(QP_STATE, QPS_RTS), &l, 2),
            Some(QPS_RTS)
        );
        assert_eq!(
            modify_outcome(QPS_SQE, &m(QP_STATE, QPS_RTS), &l, 2),
            Some(QPS_RTS)
        );
        assert_eq!(modify_outcome(QPS_INIT, &m(QP_STATE, QPS_SQD), &l, 2), None);
        // RESET and ERR from anywhere, with nothing else.
        for s in 0..=QPS_ERR {
            assert_eq!(
                modify_outcome(s, &m(QP_STATE, QPS_ERR), &l, 2),
                Some(QPS_ERR)
            );
            assert_eq!(
                modify_outcome(s, &m(QP_STATE, QPS_RESET), &l, 2),
                Some(QPS_RESET)
            );
            let x = ModifyQp {
                cur_qp_state: s,
                ..m(QP_STATE | QP_CUR_STATE, QPS_ERR)
            };
            assert_eq!(modify_outcome(s, &x, &l, 2), None);
        }
        // No state: only the attributes of a same-state transition.
        assert_eq!(modify_outcome(QPS_RESET, &m(0, 0), &l, 2), Some(QPS_RESET));
        assert_eq!(modify_outcome(QPS_RTR, &m(0, 0), &l, 2), None);
        // Unknown or unsupported mask bits, states out of range, flags.
        for bad in [1 << 2, 1 << 6, 1 << 14, 1 << 19, 1 << 21, 1 << 31] {
            assert_eq!(
                modify_outcome(QPS_RESET, &m(QP_STATE | bad, QPS_ERR), &l, 2),
                None
            );
        }
        assert_eq!(modify_outcome(QPS_RESET, &m(QP_STATE, 7), &l, 2), None);
        let mut x = m(QP_STATE, QPS_ERR);
        x.hdr.flags = 1;
        assert_eq!(modify_outcome(QPS_RESET, &x, &l, 2), None);
    }

    #[test]
    fn function_modify_outcomes() {
        use FnModify::{Moves, Refused};
        let l = DevLimits::DOC;
        let inval = Refused(libc::EINVAL);
        // RESET and ERR from anywhere; the three forward moves from their
        // own state only; the rest is the kernel's EINVAL.
        for s in 0..=QPS_ERR {
            assert_eq!(fn_modify(s, &m(QP_STATE, QPS_RESET), &l), Moves(QPS_RESET));
            assert_eq!(fn_modify(s, &m(QP_STATE, QPS_ERR), &l), Moves(QPS_ERR));
            for next in [QPS_SQD, QPS_SQE] {
                assert_eq!(fn_modify(s, &m(QP_STATE, next), &l), inval);
            }
        }
        // The IB table as on the software HCA: required attributes and
        // CUR_STATE are checked before any command.
        let init = m(QP_STATE, QPS_INIT);
        assert_eq!(fn_modify(QPS_RESET, &init, &l), inval);
        assert_eq!(modify_outcome(QPS_RESET, &init, &l, 2), None);
        let init = ModifyQp {
            port_num: 1,
            ..m(
                QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS,
                QPS_INIT,
            )
        };
        assert_eq!(fn_modify(QPS_RESET, &init, &l), Moves(QPS_INIT));
        let x = ModifyQp {
            cur_qp_state: QPS_RTS,
            attr_mask: init.attr_mask | QP_CUR_STATE,
            ..init
        };
        assert_eq!(fn_modify(QPS_RESET, &x, &l), inval);
        let x = ModifyQp {
            timeout: 3,
            attr_mask: init.attr_mask | QP_TIMEOUT,
            ..init
        };
        assert_eq!(fn_modify(QPS_RESET, &x, &l), inval);
        // INIT to INIT is in the table but not a command of the function.
        assert_eq!(fn_modify(QPS_INIT, &m(QP_STATE, QPS_INIT), &l), inval);
        assert_eq!(fn_modify(QPS_RTS, &m(QP_STATE, QPS_RTS), &l), inval);
        assert_eq!(fn_modify(QPS_RTS, &m(QP_STATE, QPS_SQD), &l), inval);
        // INIT to RTR needs its whole path (the firmware would refuse it
        // without one: the kernel refuses it first).
        let (rtr_req, _) = transition(QPS_INIT, QPS_RTR).unwrap_or_default();
        let rtr = ModifyQp {
            dlid: 0xbfff,
            path_mtu: MTU_4096,
            ..m(QP_STATE | rtr_req, QPS_RTR)
        };
        assert_eq!(fn_modify(QPS_INIT, &rtr, &l), Moves(QPS_RTR));
        assert_eq!(modify_outcome(QPS_INIT, &rtr, &l, 0xc000), Some(QPS_RTR));
        assert_eq!(fn_modify(QPS_RESET, &rtr, &l), inval);
        let mut x = rtr;
        x.attr_mask &= !QP_PATH_MTU;
        x.path_mtu = 0;
        assert_eq!(fn_modify(QPS_INIT, &x, &l), inval);
        let mut x = rtr;
        x.attr_mask &= !QP_AV;
        x.dlid = 0;
        assert_eq!(fn_modify(QPS_INIT, &x, &l), inval);
        let rts = ModifyQp {
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            ..m(
                QP_STATE
                    | QP_SQ_PSN
                    | QP_TIMEOUT
                    | QP_RETRY_CNT
                    | QP_RNR_RETRY
                    | QP_MAX_QP_RD_ATOMIC,
                QPS_RTS,
            )
        };
        assert_eq!(fn_modify(QPS_RTR, &rts, &l), Moves(QPS_RTS));
        // A multicast LID, or a bad argument, before anything else.
        let mut x = rtr;
        x.dlid = 0xc000;
        assert_eq!(fn_modify(QPS_INIT, &x, &l), inval);
        let mut x = rtr;
        x.sl = 16;
        assert_eq!(fn_modify(QPS_INIT, &x, &l), inval);
        // Attributes alone: the function only moves QPs.
        let attrs = ModifyQp {
            timeout: 5,
            ..m(QP_TIMEOUT, 0)
        };
        assert_eq!(fn_modify(QPS_RTS, &attrs, &l), Refused(libc::EOPNOTSUPP));
        let mut x = attrs;
        x.retry_cnt = 8;
        x.attr_mask |= QP_RETRY_CNT;
        assert_eq!(fn_modify(QPS_RTS, &x, &l), inval);
        // A QP of unknown state: only what every state gives alike, and no
        // forward move (the firmware checks the source state).
        assert_eq!(
            fn_modify_any(&m(QP_STATE, QPS_ERR), &l),
            Some(Moves(QPS_ERR))
        );
        assert_eq!(
            fn_modify_any(&m(QP_STATE, QPS_RESET), &l),
            Some(Moves(QPS_RESET))
        );
        assert_eq!(fn_modify_any(&m(QP_STATE, QPS_SQD), &l), Some(inval));
        assert_eq!(fn_modify_any(&attrs, &l), Some(Refused(libc::EOPNOTSUPP)));
        assert_eq!(fn_modify_any(&m(QP_STATE, 7), &l), Some(inval));
        // Without their attributes, the forward moves are refused from
        // every state; with them, only from their own.
        for next in [QPS_INIT, QPS_RTR, QPS_RTS] {
            assert_eq!(fn_modify_any(&m(QP_STATE, next), &l), Some(inval), "{next}");
        }
        assert_eq!(fn_modify_any(&rtr, &l), None);
    }

    /// What the function's firmware does with the command cx/dev.rs
    /// makes of `m` for a QP the driver tracks in `tracked` while the
    /// device has it in `device`: `Some(true)` accepted, `Some(false)`
    /// refused, `None` no command.
    fn firmware_takes(tracked: u32, device: u32, m: &ModifyQp, l: &DevLimits) -> Option<bool> {
        match fn_modify(tracked, m, l) {
            FnModify::Refused(_) => None,
            // 2RST and 2ERR from any state; the forward moves only from
            // their own source state.
            FnModify::Moves(QPS_RESET | QPS_ERR) => Some(true),
            FnModify::Moves(_) => Some(tracked == device),
        }
    }

    /// The fuzzer's rule on a function never sends a MODIFY_QP its
    /// firmware refuses: with the state known the driver's and the
    /// device's agree; unknown, the device may have moved a QP the driver
    /// moved to RTR or RTS on to ERR.
    #[test]
    fn function_modifies_sent_are_taken() {
        let l = DevLimits::DOC;
        let mut g = crate::knobs::Gen::new(5);
        let mut sent = 0;
        for _ in 0..20_000 {
            let mut x = ModifyQp {
                attr_mask: g.u32() & QP_ATTR_MASK_ALL,
                qp_state: g.below32(8),
                ..ModifyQp::default()
            };
            // Half of them a transition of the table with its required
            // attributes and some of its optional ones.
            if g.below32(2) == 0 {
                let (cur, next) = (g.below32(QPS_ERR + 1), g.below32(QPS_ERR + 1));
                if let Some((req, opt)) = transition(cur, next) {
                    x.attr_mask = QP_STATE | req | (g.u32() & opt);
                    x.qp_state = next;
                }
            }
            if x.attr_mask & QP_AV != 0 {
                x.dlid = *[1u32, 7, 0xbfff, 0xc000, 0].get(g.index(5)).unwrap_or(&1);
            }
            if x.attr_mask & QP_PATH_MTU != 0 {
                x.path_mtu = g.below32(7);
            }
            if x.attr_mask & QP_PORT != 0 {
                x.port_num = 1;
            }
            for known in 0..=QPS_ERR {
                if firmware_takes(known, known, &x, &l).is_some() {
                    sent += 1;
                }
                assert_ne!(firmware_takes(known, known, &x, &l), Some(false), "{x:?}");
            }
            if fn_modify_any(&x, &l).is_some() {
                for tracked in 0..=QPS_ERR {
                    for device in [tracked, QPS_ERR] {
                        let t = firmware_takes(tracked, device, &x, &l);
                        assert_ne!(t, Some(false), "{tracked} {device} {x:?}");
                    }
                }
            }
        }
        assert!(sent > 1000);
    }
}
