// SPDX-License-Identifier: GPL-2.0

//! A page-list entry the memory refuses, in the middle of a fast MR of 300
//! pages: the engine meets it only when the data reaches that page, and
//! fails the WQE on the side the MR belongs to, having written only what
//! precedes the fault (whole packets when the source faults).

use hca_model::qp::{QpState, RemoteQp};
use hca_model::qp_modify::AttrMask;
use mlx5_prm::opcode::{CqeOpcode, CqeSyndrome};

use super::errors::FLUSH;
use super::fastreg_pages::{Bed, FastMr, PACKET, PAGE};
use super::harness::*;

const N: usize = 300;
/// The page whose entry the memory refuses in the fault tests.
const BAD: u64 = 150;
const HEAD: u64 = 0x100;

/// B's 300-page fast MR, with the list entry of page [`BAD`] refused.
fn faulty() -> (Bed, FastMr) {
    let mut s = Bed::new(N as u32, QpCaps::default(), N as u64 * PAGE);
    let mr = s.fast(N, PAGE, HEAD, 0);
    s.w.mem.refuse(mr.list + 8 * BAD, 8);
    (s, mr)
}

/// Message bytes before the fault: those of the pages before [`BAD`].
const BEFORE_FAULT: u64 = BAD * PAGE - HEAD;

/// A WRITE into the MR, whose translation fails at page 150: the
/// requester gets REMOTE_ACCESS, the responder goes to ERR, and the pages
/// hold the message up to the faulty page, nothing from it on.
#[test]
fn a_bad_entry_of_the_target_fails_a_write() {
    let (mut s, mr) = faulty();
    let data = Rng(1).bytes(mr.len as usize);
    s.w.fill(s.src, &data);
    let write = Wr::new(
        1,
        WrOp::Write {
            raddr: mr.iova,
            rkey: mr.key,
        },
        &[s.asge(s.src, 0, mr.len)],
    );
    let wc = s.on_a(&write);
    assert_eq!(wc.syndrome, Some(u8::from(CqeSyndrome::RemoteAccess)));
    assert_eq!(s.w.state(&s.a), QpState::Err);
    assert_eq!(s.w.state(&s.b), QpState::Err);
    let got = mr.bytes(&s.w);
    let at = BEFORE_FAULT as usize;
    assert!(
        got[..at] == data[..at],
        "what precedes the fault is written"
    );
    assert!(
        got[at..].iter().all(|&b| b == 0),
        "nothing from the fault on"
    );
    assert!(s.w.mem.refusals > 0);
    assert!(s.w.mem.violations.is_empty());
}

/// A READ of the MR: the responder's source fails at page 150, so the
/// requester gets REMOTE_ACCESS, and its buffer holds the whole packets
/// before the one the fault is in, not the readable bytes of that packet.
#[test]
fn a_bad_entry_of_the_source_fails_a_read() {
    let (mut s, mr) = faulty();
    let data = Rng(2).bytes(mr.len as usize);
    mr.fill(&mut s.w, &data);
    let read = Wr::new(
        1,
        WrOp::Read {
            raddr: mr.iova,
            rkey: mr.key,
        },
        &[s.asge(s.dst, 0, mr.len)],
    );
    let wc = s.on_a(&read);
    assert_eq!(wc.syndrome, Some(u8::from(CqeSyndrome::RemoteAccess)));
    assert_eq!(s.w.state(&s.b), QpState::Err);
    let got = s.w.read(s.dst, mr.len as usize);
    let whole = (BEFORE_FAULT / PACKET * PACKET) as usize;
    assert!(
        whole < BEFORE_FAULT as usize,
        "the fault is inside a packet"
    );
    assert!(got[..whole] == data[..whole]);
    assert!(got[whole..].iter().all(|&b| b == 0));
}

/// The MR as a receive buffer: the SEND's requester gets REMOTE_OP, the
/// receive completes with LOCAL_PROT, the responder goes to ERR.
#[test]
fn a_bad_entry_of_a_receive_buffer_fails_the_receive() {
    let (mut s, mr) = faulty();
    let data = Rng(3).bytes(mr.len as usize);
    s.w.fill(s.src, &data);
    s.w.post_recv(&mut s.b, 9, &[mr.sge(0, mr.len)]);
    let wc = s.on_a(&Wr::new(1, WrOp::Send, &[s.asge(s.src, 0, mr.len)]));
    assert_eq!(wc.syndrome, Some(u8::from(CqeSyndrome::RemoteOp)));
    let rc = s.w.poll(&mut s.bcq, &[&s.b]).expect("receive completion");
    assert_eq!(rc.opcode, CqeOpcode::RespErr);
    assert_eq!(rc.syndrome, Some(u8::from(CqeSyndrome::LocalProt)));
    assert_eq!(s.w.state(&s.b), QpState::Err);
    let got = mr.bytes(&s.w);
    let at = BEFORE_FAULT as usize;
    assert!(got[..at] == data[..at]);
    assert!(got[at..].iter().all(|&b| b == 0));
}

/// The MR as B's gather list: B's SEND fails with LOCAL_PROT; at A the
/// message never ended, so nothing completes and the receive stays
/// posted, holding at most the packets before the fault.
#[test]
fn a_bad_entry_of_a_gather_list_fails_the_send_locally() {
    let (mut s, mr) = faulty();
    let data = Rng(4).bytes(mr.len as usize);
    mr.fill(&mut s.w, &data);
    let rsge = s.asge(s.dst, 0, mr.len);
    s.w.post_recv(&mut s.a, 7, &[rsge]);
    let wc = s.on_b(&Wr::new(1, WrOp::Send, &[mr.sge(0, mr.len)]));
    assert_eq!(wc.syndrome, Some(u8::from(CqeSyndrome::LocalProt)));
    assert_eq!(s.w.state(&s.b), QpState::Err);
    assert!(s.w.poll(&mut s.acq, &[&s.a]).is_none(), "no receive CQE");
    assert_eq!(s.w.state(&s.a), QpState::Rts);
    let got = s.w.read(s.dst, mr.len as usize);
    let whole = (BEFORE_FAULT / PACKET * PACKET) as usize;
    assert!(got[..whole] == data[..whole]);
    assert!(got[whole..].iter().all(|&b| b == 0));
    // The receive is still posted: moving A to ERR flushes it.
    let attrs = rts_attrs(RemoteQp::default());
    s.w.modify(&s.a, QpState::Err, AttrMask(0), attrs).unwrap();
    s.w.run();
    let rc = s.w.poll(&mut s.acq, &[&s.a]).expect("the flushed receive");
    assert_eq!((rc.wr_id, rc.syndrome), (7, Some(FLUSH)));
}

/// An access that stays before the bad entry works; one that reaches it
/// fails. The check of the key alone (bounds, rights) succeeds for both.
#[test]
fn only_an_access_that_reaches_the_bad_entry_fails() {
    let (mut s, mr) = faulty();
    let data = Rng(5).bytes(PAGE as usize);
    s.w.fill(s.src, &data);
    let just_before = BEFORE_FAULT - PAGE;
    let write = Wr::new(
        1,
        WrOp::Write {
            raddr: mr.iova + just_before,
            rkey: mr.key,
        },
        &[s.asge(s.src, 0, PAGE)],
    );
    let wc = s.on_a(&write);
    assert!(wc.ok(), "{wc:?}");
    assert!(mr.bytes(&s.w)[just_before as usize..BEFORE_FAULT as usize] == data);
    let write = Wr::new(
        2,
        WrOp::Write {
            raddr: mr.iova + just_before + 1,
            rkey: mr.key,
        },
        &[s.asge(s.src, 0, PAGE)],
    );
    let wc = s.on_a(&write);
    assert_eq!(wc.syndrome, Some(u8::from(CqeSyndrome::RemoteAccess)));
}
