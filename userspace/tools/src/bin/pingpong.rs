// SPDX-License-Identifier: GPL-2.0

//! rmlx5-pingpong: an RC SEND ping-pong like ibv_rc_pingpong, both ends in
//! this process (two devices, or one with `--peer-device` equal to
//! `--device`), in polling or event mode.
//!
//! Usage: `rmlx5-pingpong [--size 4096] [--iters 1000] [--events]
//! [--device 0] [--peer-device 1] [--model] [--verbose]`.
//!
//! `--verbose` prints the first receive completion at each end with the
//! sender it names (source QPN, SLID, SL), and fails if that is not the
//! peer.

use std::time::Instant;

use rmlx5::{QpInit, RecvWr, SendOp, SendWr};
use rmlx5_tools::{connect, end, fixed3, pick, usec, wait_one, Args};

fn run() -> Result<(), String> {
    let args = Args::parse(&["events", "model", "verbose"])?;
    let verbose = args.flag("verbose");
    let size = usize::try_from(args.num("size", 4096)?).map_err(|_| "size")?;
    let iters = args.num("iters", 1000)?.max(1);
    let events = args.flag("events");
    let devs = rmlx5_tools::devices(args.flag("model"))?;
    let da = pick(&devs, args.num("device", 0)?)?;
    let db = pick(
        &devs,
        args.num("peer-device", if devs.len() > 1 { 1 } else { 0 })?,
    )?;
    let init = QpInit {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        ..QpInit::default()
    };
    let a = end(&da, events, size, &init)?;
    let b = end(&db, events, size, &init)?;
    connect(&a, &b)?;
    for (i, e) in [&a, &b].iter().enumerate() {
        let ep = e.qp.endpoint();
        println!(
            "  {} address: LID 0x{:04x}, QPN 0x{:06x}, PSN 0x000000 ({})",
            if i == 0 { "local " } else { "remote" },
            ep.lid,
            ep.qpn,
            e.ctx.name()
        );
    }
    // Every 4-byte word distinct (its index times an odd constant), so
    // that a page the device translated wrongly cannot match by chance.
    let msg: Vec<u8> = (0..size)
        .map(|i| {
            let word = ((i / 4) as u32).wrapping_mul(0x9e37_79b1);
            word.to_le_bytes()[i % 4]
        })
        .collect();
    a.mr.write(0, &msg).map_err(|e| e.to_string())?;
    if events {
        a.cq.req_notify(false).map_err(|e| e.to_string())?;
        b.cq.req_notify(false).map_err(|e| e.to_string())?;
    }
    let sge_a = [a.mr.sge(0, size).map_err(|e| e.to_string())?];
    let sge_b = [b.mr.sge(0, size).map_err(|e| e.to_string())?];
    let post_recv = |e: &rmlx5_tools::End, sge: &[rmlx5::Sge], id| {
        e.qp.post_recv(&[RecvWr::new(id, sge)])
            .map_err(|e| e.to_string())
    };
    post_recv(&a, &sge_a, 0)?;
    post_recv(&b, &sge_b, 0)?;
    let mut wcs = Vec::new();
    let (mut first_a, mut first_b) = (None, None);
    let mut rtts = Vec::with_capacity(iters as usize);
    let start = Instant::now();
    for i in 0..iters {
        let t = Instant::now();
        a.qp.post_send(&[SendWr::new(i, SendOp::Send, &sge_a)])
            .map_err(|e| e.to_string())?;
        // B: receive, re-post, answer.
        let mut got_recv = false;
        while !got_recv {
            wcs.clear();
            wait_one(&b, &mut wcs)?;
            let recv = wcs.iter().find(|w| w.opcode == rmlx5::WcOpcode::Recv);
            first_b = first_b.or(recv.copied());
            got_recv = recv.is_some();
        }
        post_recv(&b, &sge_b, i + 1)?;
        b.qp.post_send(&[SendWr::new(i, SendOp::Send, &sge_b)])
            .map_err(|e| e.to_string())?;
        // A: its send completion and the answer.
        let (mut sent, mut answered) = (false, false);
        while !(sent && answered) {
            wcs.clear();
            wait_one(&a, &mut wcs)?;
            sent |= wcs.iter().any(|w| w.opcode == rmlx5::WcOpcode::Send);
            let recv = wcs.iter().find(|w| w.opcode == rmlx5::WcOpcode::Recv);
            first_a = first_a.or(recv.copied());
            answered |= recv.is_some();
        }
        post_recv(&a, &sge_a, i + 1)?;
        // B's send completion.
        loop {
            wcs.clear();
            wait_one(&b, &mut wcs)?;
            if wcs.iter().any(|w| w.opcode == rmlx5::WcOpcode::Send) {
                break;
            }
        }
        rtts.push(t.elapsed().as_nanos());
    }
    let ns = start.elapsed().as_nanos().max(1);
    if b.mr.to_vec(0, size).map_err(|e| e.to_string())? != msg {
        return Err("data mismatch at the receiver".into());
    }
    if verbose {
        for (name, wc, sender) in [(&b, first_b, &a), (&a, first_a, &b)]
            .map(|(e, wc, s)| (e.ctx.name(), wc, s.qp.endpoint()))
        {
            let w = wc.ok_or("no receive completion")?;
            println!(
                "  {name} recv: wr_id {} byte_len {} from QPN 0x{:06x} SLID 0x{:04x} SL {}",
                w.wr_id, w.byte_len, w.src_qp, w.slid, w.sl
            );
            if (w.src_qp, u32::from(w.slid)) != (sender.qpn, sender.lid) {
                return Err(format!(
                    "{name}: the receive names QPN 0x{:06x} LID 0x{:04x}, the sender is \
                     QPN 0x{:06x} LID 0x{:04x}",
                    w.src_qp, w.slid, sender.qpn, sender.lid
                ));
            }
        }
    }
    let bytes = u128::from(iters) * 2 * size as u128;
    // Mbit/sec = bits / us.
    println!(
        "{} bytes in {} seconds = {} Mbit/sec",
        bytes,
        fixed3(ns, 1_000_000_000),
        fixed3(bytes * 8 * 1000, ns)
    );
    println!(
        "{} iters in {} seconds = {} usec/iter",
        iters,
        fixed3(ns, 1_000_000_000),
        usec(ns / u128::from(iters))
    );
    rtts.sort_unstable();
    let pct = |p: usize| rtts[(rtts.len() - 1) * p / 100];
    println!(
        "round trip: min {} usec, median {} usec, p99 {} usec ({} mode, {} -> {})",
        usec(rtts[0]),
        usec(pct(50)),
        usec(pct(99)),
        if events { "event" } else { "polling" },
        a.ctx.name(),
        b.ctx.name()
    );
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("rmlx5-pingpong: {}", e);
        std::process::exit(1);
    }
}
