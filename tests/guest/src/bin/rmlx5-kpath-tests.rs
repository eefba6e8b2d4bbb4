// SPDX-License-Identifier: GPL-2.0

//! The kernel path end to end: the provider's kernel backend on
//! `/dev/rmlx5_uverbs0` and `/dev/rmlx5_uverbs1` (or the two devices
//! `RMLX5_TEST_DEVICES` names, possibly one twice), SEND ping-pong and
//! RDMA WRITE/READ between the two software HCAs of rmlx5.ko, polled and
//! with completion events from the channel files. A smoke test of the
//! uverbs-to-verbs connection; the provider's full end-to-end suite lives
//! with the provider.

use rmlx5::{QpInit, RecvWr, SendOp, SendWr};
use rmlx5_guest_tests::{run_all, test_device, Test, TestResult};
use rmlx5_tools::{connect, end, pick, wait_one, End};

const SIZE: usize = 4096;

fn pair(events: bool) -> Result<(End, End), String> {
    let devs = rmlx5_tools::devices(false)?;
    let init = QpInit {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        ..QpInit::default()
    };
    let a = end(
        &pick(&devs, u64::from(test_device(0)?))?,
        events,
        SIZE,
        &init,
    )?;
    let b = end(
        &pick(&devs, u64::from(test_device(1)?))?,
        events,
        SIZE,
        &init,
    )?;
    connect(&a, &b)?;
    if events {
        a.cq.req_notify(false).map_err(|e| e.to_string())?;
        b.cq.req_notify(false).map_err(|e| e.to_string())?;
    }
    Ok((a, b))
}

/// Waits until `end` completed a WR with `opcode`.
fn wait_for(end: &End, opcode: rmlx5::WcOpcode) -> TestResult {
    let mut wcs = Vec::new();
    for _ in 0..1000 {
        wcs.clear();
        wait_one(end, &mut wcs)?;
        if wcs.iter().any(|w| w.opcode == opcode) {
            return Ok(());
        }
    }
    Err(format!("no {opcode:?} completion"))
}

fn pingpong(events: bool, iters: u64) -> TestResult {
    let (a, b) = pair(events)?;
    let msg: Vec<u8> = (0..SIZE).map(|i| (i * 7) as u8).collect();
    a.mr.write(0, &msg).map_err(|e| e.to_string())?;
    let sge_a = [a.mr.sge(0, SIZE).map_err(|e| e.to_string())?];
    let sge_b = [b.mr.sge(0, SIZE).map_err(|e| e.to_string())?];
    let recv = |e: &End, sge: &[rmlx5::Sge], id| {
        e.qp.post_recv(&[RecvWr::new(id, sge)])
            .map_err(|e| e.to_string())
    };
    recv(&b, &sge_b, 0)?;
    for i in 0..iters {
        recv(&a, &sge_a, i)?;
        a.qp.post_send(&[SendWr::new(i, SendOp::Send, &sge_a)])
            .map_err(|e| e.to_string())?;
        wait_for(&b, rmlx5::WcOpcode::Recv)?;
        recv(&b, &sge_b, i + 1)?;
        b.qp.post_send(&[SendWr::new(i, SendOp::Send, &sge_b)])
            .map_err(|e| e.to_string())?;
        wait_for(&a, rmlx5::WcOpcode::Recv)?;
    }
    let got = b.mr.to_vec(0, SIZE).map_err(|e| e.to_string())?;
    if got != msg {
        return Err("data mismatch at the receiver".into());
    }
    Ok(())
}

fn pingpong_polling() -> TestResult {
    pingpong(false, 200)
}

fn pingpong_events() -> TestResult {
    pingpong(true, 200)
}

fn write_then_read() -> TestResult {
    let (a, b) = pair(false)?;
    let msg: Vec<u8> = (0..SIZE).map(|i| (i * 13 + 1) as u8).collect();
    a.mr.write(0, &msg).map_err(|e| e.to_string())?;
    let sge = [a.mr.sge(0, SIZE).map_err(|e| e.to_string())?];
    let remote = b.mr.remote(0).map_err(|e| e.to_string())?;
    a.qp.post_send(&[SendWr::new(1, SendOp::Write(remote), &sge)])
        .map_err(|e| e.to_string())?;
    wait_for(&a, rmlx5::WcOpcode::RdmaWrite)?;
    if b.mr.to_vec(0, SIZE).map_err(|e| e.to_string())? != msg {
        return Err("WRITE: data mismatch".into());
    }
    a.mr.write(0, &vec![0u8; SIZE]).map_err(|e| e.to_string())?;
    a.qp.post_send(&[SendWr::new(2, SendOp::Read(remote), &sge)])
        .map_err(|e| e.to_string())?;
    wait_for(&a, rmlx5::WcOpcode::RdmaRead)?;
    if a.mr.to_vec(0, SIZE).map_err(|e| e.to_string())? != msg {
        return Err("READ: data mismatch".into());
    }
    Ok(())
}

fn main() {
    std::process::exit(run_all(&[
        Test {
            name: "kpath_pingpong_polling",
            run: pingpong_polling,
        },
        Test {
            name: "kpath_pingpong_events",
            run: pingpong_events,
        },
        Test {
            name: "kpath_write_then_read",
            run: write_then_read,
        },
    ]));
}
