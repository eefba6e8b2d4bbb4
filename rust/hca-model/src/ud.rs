// SPDX-License-Identifier: GPL-2.0

//! Unreliable datagrams: the send WQEs of UD and GSI QPs, their routing
//! across the fabric, and the receiving QP's side.
//!
//! A UD send WQE is a control segment, a datagram segment (the address
//! vector, `mlx5_wqe_datagram_seg`) and data or inline segments; its
//! opcodes are SEND, SEND_IMM and NOP. One WQE is one packet, so its
//! payload must fit the sending port's MTU. The steps:
//!
//! 1. Local checks, as for RC (`exec`): malformed WQE or other opcode →
//!    LOCAL_QP_OP, bad gather key → LOCAL_PROT; a payload longer than the
//!    port MTU → LOCAL_LENGTH (`MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR`). The
//!    send completes in error and the QP goes to ERR.
//! 2. Addressing, from the sender's port ([`super::port`]): the network
//!    header the receiver will find (`header`), which needs the sender's
//!    GID entry at the address vector's source GID index on RoCE, and on
//!    InfiniBand when the address vector asks for a GRH. No such entry:
//!    dropped, [`Stats::ud_drop_bad_sgid`].
//! 3. Routing: on an InfiniBand port the instance with the address
//!    vector's LID ([`super::fabric::index_of_lid`]), on a RoCE port the
//!    first instance (the sender included) with a GID entry of the address
//!    vector's MAC; either must have the sender's link layer. None:
//!    dropped, [`Stats::ud_drop_no_dest`].
//! 4. Delivery (`recv`): to the UD QP with the destination QPN, or the GSI
//!    QP for QPN 1, if it is ready to receive, its Q_Key matches and it has
//!    a receive WQE; otherwise dropped and counted by the receiver.
//! 5. The send completes successfully whatever became of the datagram
//!    (UD is unreliable), unless the sender's own memory could not be
//!    read (LOCAL_PROT).
//!
//! The Q_Key sent is the WQE's, or the sending QP's own when bit 31 of the
//! WQE's is set (the IB spec's rule for controlled Q_Keys; QP1 MADs carry
//! 0x80010000). Packets of the GSI QP leave with source QPN 1.
//!
//! [`Stats::ud_drop_bad_sgid`]: super::stats::Stats::ud_drop_bad_sgid
//! [`Stats::ud_drop_no_dest`]: super::stats::Stats::ud_drop_no_dest

mod header;
mod recv;

use super::dev::{Dev, GSI_WIRE_QPN};
use super::exec::{cost, end_step, fail, local_pieces, succeed, Local};
use super::fabric::{index_of_lid, lid_of_index, Instances};
use super::mem::Platform;
use super::prm::net_hdr::NET_HDR_SIZE;
use super::prm::opcode::CqeSyndrome;
use super::prm::wqe::DatagramSeg;
use super::qp::{QpAttr, QpService};
use super::stats::bump;
use super::transfer::Pieces;
use super::wqe::{SendWqe, UdOp};

/// Bit 31 of a send WQE's Q_Key: send with the QP's own Q_Key instead.
pub const QKEY_USE_QP: u32 = 1 << 31;

/// The UD send WQE being executed, as the engine hands it over.
pub(super) struct Send<'a, 'w> {
    /// The requester's view of the WQE (slot, QPN, CQ, counters).
    pub(super) l: &'a Local,
    /// The WQE's bytes.
    pub(super) wqe: &'a SendWqe<'w>,
    /// The sending QP's creation attributes.
    pub(super) attr: &'a QpAttr,
    /// The sending QP's Q_Key.
    pub(super) own_qkey: u32,
    /// The SQ position the WQE must carry.
    pub(super) sq_ci: u16,
}

/// A datagram on the wire: what the receiver sees of it.
pub(super) struct Datagram {
    /// Destination QPN (1: the GSI QP).
    dqpn: u32,
    /// Source QPN on the wire (1 for the GSI QP).
    src_qpn: u32,
    /// The sender's LID (InfiniBand), 0 on RoCE.
    slid: u16,
    /// `flags_rqpn` bits 27:24 of the receive CQE: the SL on InfiniBand,
    /// the RoCE L3 header type on RoCE.
    cqe_sl: u8,
    qkey: u32,
    imm: Option<u32>,
    solicited: bool,
    /// Payload bytes.
    len: u64,
    /// The network header, if the packet has one.
    header: Option<[u8; NET_HDR_SIZE]>,
}

/// What became of a datagram at the receiving instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Received: a receive WQE completed.
    Delivered,
    /// Dropped and counted by the receiver.
    Dropped,
    /// The receive WQE completed in error (its QP went to ERR).
    RecvError,
    /// The sender's memory could not be read: nothing was received.
    SourceFault,
}

/// The instance a datagram from a port of link layer `roce` to the
/// address vector `av` reaches, or `None`. Holds each instance it looks at
/// in turn.
fn route<I: Instances + ?Sized>(set: &mut I, roce: bool, av: &DatagramSeg) -> Option<usize> {
    if roce {
        (0..set.count()).find(|&i| {
            set.hold(i)
                .is_some_and(|h| h.port().is_roce() && h.port().has_mac(&av.rmac))
        })
    } else {
        let b = usize::from(index_of_lid(av.rlid)?);
        set.hold(b)
            .is_some_and(|h| !h.port().is_roce())
            .then_some(b)
    }
}

/// A datagram the sender's instance has built: what the later phases of
/// the step need.
pub(super) struct Ready {
    pub(super) d: Datagram,
    pub(super) av: DatagramSeg,
}

pub(super) use recv::Payload;

/// The local half of a UD send on the sender's instance: decodes the WQE,
/// resolves its gather list into `local` and builds the datagram. `Err`
/// means the step is over (the WQE completed, in error or as a NOP or a
/// drop, with the budget it used).
pub(super) fn prepare<P: Platform>(
    dev: &mut Dev<'_>,
    p: &mut P,
    s: &Send<'_, '_>,
    a: usize,
    local: &mut Pieces,
) -> Result<(Datagram, DatagramSeg), u32> {
    let l = s.l;
    let (imm, av, from) = match s.wqe.ud_op() {
        Some((op, from)) if s.wqe.ctrl.wqe_index == s.sq_ci && s.wqe.ctrl.qpn == l.qpn => {
            match op {
                UdOp::Nop => {
                    succeed(dev, p, l, 0);
                    return Err(1);
                }
                UdOp::Send { imm, av } => (imm, av, from),
            }
        }
        _ => {
            fail(dev, p, l, CqeSyndrome::LocalQpOp);
            return Err(1);
        }
    };
    if let Err(syndrome) = local_pieces(dev, s.wqe, from, s.attr, false, local) {
        fail(dev, p, l, syndrome);
        return Err(1);
    }
    let len = local.total();
    if len > u64::from(dev.port.mtu_bytes()) {
        fail(dev, p, l, CqeSyndrome::LocalLength);
        return Err(1);
    }
    let Some((header, l3)) = header::build(dev.port, &av, imm.is_some(), len) else {
        bump(&mut dev.stats.ud_drop_bad_sgid);
        succeed(dev, p, l, len);
        return Err(cost(len));
    };
    let roce = dev.port.is_roce();
    let qkey = if av.qkey & QKEY_USE_QP != 0 {
        s.own_qkey
    } else {
        av.qkey
    };
    let d = Datagram {
        dqpn: av.dqpn,
        src_qpn: if s.attr.service == QpService::Gsi {
            GSI_WIRE_QPN
        } else {
            l.qpn
        },
        slid: if roce {
            0
        } else {
            lid_of_index(u16::try_from(a).unwrap_or(u16::MAX))
        },
        cqe_sl: if roce { l3 } else { av.sl() },
        qkey,
        imm,
        solicited: s.wqe.ctrl.solicited,
        len,
        header,
    };
    Ok((d, av))
}

/// Sends the datagram `r` that the first phase of a step built on
/// instance `a`: routes it, delivers it holding the receiving instance
/// (reading the sender's memory through `payload`), then completes the
/// send holding `a` again, if the QP is still the one that posted it, and
/// ends the step.
/// Returns the budget used.
#[expect(clippy::too_many_arguments)]
pub(super) fn send<I: Instances + ?Sized, P: Platform>(
    set: &mut I,
    p: &mut P,
    a: usize,
    l: &Local,
    r: &Ready,
    payload: Payload<'_>,
    remote: &mut Pieces,
    recv_buf: &mut [u8],
) -> u32 {
    let Some(roce) = set.hold(a).map(|h| h.port().is_roce()) else {
        return 1;
    };
    let b = route(set, roce, &r.av);
    let outcome = match b.and_then(|b| set.hold(b)) {
        Some(mut h) => recv::deliver(&mut h.dev(), p, &r.d, payload, remote, recv_buf),
        None => Outcome::Dropped,
    };
    if let Some(mut h) = set.hold(a) {
        let mut dev = h.dev();
        if b.is_none() {
            bump(&mut dev.stats.ud_drop_no_dest);
        }
        if l.id.find(dev.t.qps).is_some() {
            match outcome {
                Outcome::SourceFault => fail(&mut dev, p, l, CqeSyndrome::LocalProt),
                Outcome::Delivered | Outcome::Dropped | Outcome::RecvError => {
                    succeed(&mut dev, p, l, r.d.len)
                }
            }
        }
        end_step(&mut dev, l.id);
    }
    cost(r.d.len)
}
