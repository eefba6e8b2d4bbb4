// SPDX-License-Identifier: GPL-2.0

//! The receiving side of a datagram.
//!
//! The datagram is dropped, and counted in the receiving instance's
//! [`Stats`](super::super::stats::Stats), when its destination QPN names
//! no UD QP (or, for QPN 1, no GSI QP) ready to receive
//! (`ud_drop_bad_qpn`), when its Q_Key differs from the QP's
//! (`ud_drop_qkey`), or when the QP has no receive WQE (`ud_drop_no_recv`;
//! a UD responder sends no RNR NAK).
//!
//! Otherwise the receive WQE's scatter list takes 40 bytes of network
//! header area, then the payload. A list too short for both completes the
//! receive with LOCAL_LENGTH, a scatter entry the QP may not write to with
//! LOCAL_PROT, a WQE that cannot be read with LOCAL_QP_OP; in each case
//! the QP moves to ERR, as for RC. The header area holds the packet's
//! network header, or is left untouched when the packet had none (an
//! InfiniBand packet without GRH).
//!
//! The receive CQE: RESP_SEND, or RESP_SEND_IMM with the immediate data;
//! byte count 40 + payload; `flags_rqpn` with the source QPN (1 from the
//! GSI QP), the GRH bits (`GRH_IN_BUFFER` when a header is in the buffer)
//! and, on InfiniBand, the SL, on RoCE the L3 header type; `slid` the
//! sender's LID on InfiniBand, 0 on RoCE. A RESP_SEND on the GSI QP
//! carries the packet's P_Key (the one P_Key, 0xffff) in
//! `imm_inval_pkey`, where mlx5_ib looks for it; other receives carry 0
//! there (P_Key index 0 for rdma-core).

use super::super::cq::CqeBody;
use super::super::dev::Dev;
use super::super::mem::Platform;
use super::super::port::DEFAULT_PKEY;
use super::super::prm::cqe::{Cqe64, OpOwn, GRH_IN_BUFFER, GRH_NONE};
use super::super::prm::net_hdr::NET_HDR_SIZE;
use super::super::prm::opcode::{CqeOpcode, CqeSyndrome};
use super::super::qp::{QpService, Rq};
use super::super::respond::{fail_recv, recvs_posted, scatter_list};
use super::super::stats::bump;
use super::super::table::get_mut;
use super::super::transfer::{self, CopyFault, Pieces, PACKET};
use super::{Datagram, Outcome};

/// The receiving QP, as far as a datagram needs it.
struct Receiver {
    slot: u32,
    qpn: u32,
    pdn: u32,
    cqn: u32,
    gsi: bool,
    rq: Rq,
}

/// Where a datagram's payload comes from.
pub(in super::super) struct Payload<'a> {
    /// The sender's gather list.
    pub(in super::super) local: &'a Pieces,
    /// The send WQE's bytes, which its inline pieces index.
    pub(in super::super) inline: &'a [u8],
    /// The engine's packet buffer (a datagram is one packet).
    pub(in super::super) packet: &'a mut [u8; PACKET],
}

/// Delivers `d`, whose payload is `src`, at the instance `dev`: finds the
/// QP, checks it, fills a receive WQE through `remote` (and `recv_buf`,
/// the receive WQE's copy) and writes the receive CQE.
pub(super) fn deliver<P: Platform>(
    dev: &mut Dev<'_>,
    p: &mut P,
    d: &Datagram,
    src: Payload<'_>,
    remote: &mut Pieces,
    recv_buf: &mut [u8],
) -> Outcome {
    bump(&mut dev.stats.requests);
    let Some(r) = receiver(dev, p, d) else {
        return Outcome::Dropped;
    };
    let need = (NET_HDR_SIZE as u64).saturating_add(d.len);
    let fail = |dev: &mut Dev<'_>, p: &mut P, s| {
        fail_recv(dev, p, r.slot, r.qpn, r.cqn, r.rq.ci, s);
        Outcome::RecvError
    };
    if let Err(s) = scatter_list(dev, p, &r.rq, r.pdn, need, remote, recv_buf) {
        return fail(dev, p, s);
    }
    if remote.total() < need {
        return fail(dev, p, CqeSyndrome::LocalLength);
    }
    // The payload first: it is one packet, gathered whole before any byte
    // is written, so if the sender's memory fails nothing was sent and the
    // receive WQE stays posted, untouched.
    let Payload {
        local,
        inline,
        packet,
    } = src;
    match transfer::copy_at(p, local, inline, remote, NET_HDR_SIZE as u64, d.len, packet) {
        Ok(()) => {}
        Err(CopyFault::Source) => return Outcome::SourceFault,
        Err(CopyFault::Destination) => return fail(dev, p, CqeSyndrome::LocalProt),
    }
    if let Some(h) = &d.header {
        if transfer::write_at(p, remote, 0, h).is_err() {
            return fail(dev, p, CqeSyndrome::LocalProt);
        }
    }
    complete(dev, p, d, &r);
    Outcome::Delivered
}

/// The QP `d` is for, if it takes it: the drop checks, each counted.
fn receiver<P: Platform>(dev: &mut Dev<'_>, p: &mut P, d: &Datagram) -> Option<Receiver> {
    let Some((slot, qp)) = dev
        .datagram_qp(d.dqpn)
        .filter(|(_, qp)| qp.state.receives())
    else {
        bump(&mut dev.stats.ud_drop_bad_qpn);
        return None;
    };
    if qp.conn.qkey != d.qkey {
        bump(&mut dev.stats.ud_drop_qkey);
        return None;
    }
    let dbr = qp.attr.dbr_addr;
    let r = qp.rq.map(|rq| Receiver {
        slot,
        qpn: qp.qpn,
        pdn: qp.attr.pdn,
        cqn: qp.attr.recv_cqn,
        gsi: qp.attr.service == QpService::Gsi,
        rq,
    });
    match r {
        Some(r) if recvs_posted(p, &mut dev.stats.bad_recv_counters, &r.rq, dbr) != 0 => Some(r),
        _ => {
            bump(&mut dev.stats.ud_drop_no_recv);
            None
        }
    }
}

/// Consumes the receive WQE and writes its CQE.
fn complete<P: Platform>(dev: &mut Dev<'_>, p: &mut P, d: &Datagram, r: &Receiver) {
    if let Some(rq) = get_mut(dev.t.qps, r.slot).and_then(|q| q.rq.as_mut()) {
        rq.ci = rq.ci.wrapping_add(1);
    }
    bump(&mut dev.stats.recvs_consumed);
    let (opcode, imm) = match d.imm {
        Some(i) => (CqeOpcode::RespSendImm, i),
        None if r.gsi => (CqeOpcode::RespSend, u32::from(DEFAULT_PKEY)),
        None => (CqeOpcode::RespSend, 0),
    };
    // The payload is at most 4096 bytes.
    let byte_cnt = u32::try_from(d.len)
        .unwrap_or(u32::MAX)
        .saturating_add(NET_HDR_SIZE as u32);
    let body = CqeBody::Ok(Cqe64 {
        ml_path: 0,
        slid: d.slid,
        grh: if d.header.is_some() {
            GRH_IN_BUFFER
        } else {
            GRH_NONE
        },
        sl: d.cqe_sl,
        src_qpn: d.src_qpn,
        srqn_uidx: 0,
        imm_inval_rkey: imm,
        byte_cnt,
        send_opcode: 0,
        qpn: r.qpn,
        wqe_counter: r.rq.ci,
        signature: 0,
        op_own: OpOwn {
            opcode,
            format: 0,
            solicited: d.solicited,
            owner: false,
        },
    });
    dev.qp_cqe(p, r.slot, r.cqn, body, d.solicited);
}
