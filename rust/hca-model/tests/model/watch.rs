// SPDX-License-Identifier: GPL-2.0

//! Send doorbells taken from the doorbell record alone
//! (`Hca::send_doorbell_record`), as the kernel's doorbell watcher does for
//! a provider that skipped its kick.

use hca_model::doorbell::DoorbellError;
use mlx5_prm::doorbell::{counter_word, QP_DBR_SEND_OFFSET};
use mlx5_prm::opcode::CqeOpcode;

use super::harness::*;
use super::verbs::Pair;

/// Builds the WQEs of `wrs` on A and stores only the doorbell record's send
/// counter (no UAR doorbell, no kick).
fn post_record_only(p: &mut Pair, wrs: &[Wr]) {
    for wr in wrs {
        p.w.build_wqe(&mut p.a, wr);
    }
    let counter = counter_word(p.a.cur_post);
    p.w.mem.put(p.a.dbr + QP_DBR_SEND_OFFSET as u64, &counter);
}

fn record(p: &mut Pair) -> Result<bool, DoorbellError> {
    let qpn = p.a.qpn;
    let mem = &mut p.w.mem;
    p.w.fabric.hca(0).unwrap().send_doorbell_record(mem, qpn)
}

#[test]
fn record_only_doorbells_execute_every_new_wqe() {
    let mut p = Pair::new(false);
    // Nothing posted yet: nothing to take, and no error counted.
    assert_eq!(record(&mut p), Ok(false));
    // Three WRITEs of different sizes (one, two and three SGEs) and a
    // SEND, announced by the record alone.
    p.recv_b(9, &[p.bsge(0x800, 64)]);
    let wrs = [
        Wr::new(
            1,
            WrOp::Write {
                raddr: p.bbuf,
                rkey: p.bkey,
            },
            &[p.asge(0, 16)],
        ),
        Wr::new(
            2,
            WrOp::Write {
                raddr: p.bbuf + 64,
                rkey: p.bkey,
            },
            &[p.asge(0, 8), p.asge(8, 8)],
        ),
        Wr::new(
            3,
            WrOp::Write {
                raddr: p.bbuf + 128,
                rkey: p.bkey,
            },
            &[p.asge(0, 8), p.asge(8, 8), p.asge(16, 8)],
        ),
        Wr::new(4, WrOp::Send, &[p.asge(0, 32)]),
    ];
    p.w.fill(p.abuf, &[0x5a; 64]);
    post_record_only(&mut p, &wrs);
    let qpn = p.a.qpn;
    let mem = &mut p.w.mem;
    // 1 + 2 + 2 WQEBBs of WRITEs (3 SGEs spill over), 1 of the SEND.
    let pending = p.w.fabric.hca(0).unwrap().send_posted(mem, qpn);
    assert_eq!(pending, Some(p.a.cur_post));
    assert_eq!(record(&mut p), Ok(true));
    let mem = &mut p.w.mem;
    assert_eq!(p.w.fabric.hca(0).unwrap().send_posted(mem, qpn), Some(0));
    // Taken once: the same record again is nothing new.
    assert_eq!(record(&mut p), Ok(false));
    p.w.run();
    let ids: Vec<u64> = p.apoll().iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, [1, 2, 3, 4]);
    let rc = p.bpoll();
    assert_eq!(rc.len(), 1);
    assert_eq!(rc[0].opcode, CqeOpcode::RespSend);
    assert_eq!(p.w.read(p.bbuf + 128, 24), vec![0x5a; 24]);
    assert_eq!(p.w.hca(0).stats().doorbell_errors, 0);
    assert!(p.w.mem.violations.is_empty());
}

#[test]
fn a_record_that_does_not_chain_is_refused_and_executes_nothing() {
    let mut p = Pair::new(false);
    let wr = Wr::new(
        1,
        WrOp::Write {
            raddr: p.bbuf,
            rkey: p.bkey,
        },
        &[p.asge(0, 16)],
    );
    post_record_only(&mut p, std::slice::from_ref(&wr));
    // The counter claims one WQEBB more than the WQE has.
    let counter = counter_word(p.a.cur_post.wrapping_add(1));
    p.w.mem.put(p.a.dbr + QP_DBR_SEND_OFFSET as u64, &counter);
    assert_eq!(record(&mut p), Err(DoorbellError::WqeMismatch));
    p.w.run();
    assert!(p.apoll().is_empty());
    assert_eq!(p.w.hca(0).stats().doorbell_errors, 1);
    // A counter beyond the SQ's room is refused as such.
    let counter = counter_word(p.a.cur_post.wrapping_add(1 << 12));
    p.w.mem.put(p.a.dbr + QP_DBR_SEND_OFFSET as u64, &counter);
    assert_eq!(record(&mut p), Err(DoorbellError::BadCounter));
    // An unknown QP is not counted as a refused doorbell.
    let mem = &mut p.w.mem;
    assert_eq!(
        p.w.fabric.hca(0).unwrap().send_doorbell_record(mem, 0xdead),
        Err(DoorbellError::NoSuchObject)
    );
    assert_eq!(p.w.hca(0).stats().doorbell_errors, 2);
}

#[test]
fn a_kick_after_the_record_was_taken_finds_nothing_new() {
    let mut p = Pair::new(false);
    let wr = Wr::new(
        1,
        WrOp::Write {
            raddr: p.bbuf,
            rkey: p.bkey,
        },
        &[p.asge(0, 16)],
    );
    let (index, bbs) = p.w.build_wqe(&mut p.a, &wr);
    p.w.mem.put(
        p.a.dbr + QP_DBR_SEND_OFFSET as u64,
        &counter_word(p.a.cur_post),
    );
    assert_eq!(record(&mut p), Ok(true));
    // The provider's kick for the same doorbell comes late: the model
    // reports it as nothing posted (the kernel treats that as done).
    assert_eq!(
        p.w.ring_sq(&mut p.a, index, bbs, Ring::Plain),
        Err(DoorbellError::NothingPosted)
    );
    p.w.run();
    assert_eq!(p.apoll().len(), 1);
}
