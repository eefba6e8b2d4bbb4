// SPDX-License-Identifier: GPL-2.0

//! rmlx5-perf: latency and bandwidth tests modelled on perftest
//! (ib_send_lat, ib_write_lat, ib_read_lat, ib_write_bw, ib_send_bw),
//! output laid out like perftest's.
//!
//! In-process mode, both ends in this process:
//! `rmlx5-perf --test send_lat|write_lat|read_lat|write_bw|send_bw
//! [--size 64] [--iters 1000] [--post-list 1] [--cq-mod 1] [--events]
//! [--device 0] [--peer-device 1] [--model]`.
//!
//! `rmlx5-perf --test qp_create --iters N [--device 0]`: creates and
//! destroys N RC QPs on one device and prints the time per QP and the
//! rate (on a ConnectX function: one command each way per QP).
//!
//! Two-process mode, one side per process as perftest runs (see
//! `rmlx5_tools::remote`):
//! `rmlx5-perf --server [--port 18515] [--device 0] OPTIONS` and
//! `rmlx5-perf --client HOST [--port 18515] [--device 1] OPTIONS`, with
//! OPTIONS `--test send_lat|write_lat|send_bw|write_bw [--size 64]
//! [--iters 1000] [--qps 1] [--post-list 1] [--cq-mod N] [--tx-depth N]
//! [--events]`, the same on both sides.

use std::net::TcpListener;
use std::time::Instant;

use rmlx5::{QpInit, RecvWr, SendFlags, SendOp, SendWr, Wc, WcOpcode};
use rmlx5_tools::remote::{self, Params, Test};
use rmlx5_tools::report::{self, LINE};
use rmlx5_tools::{connect, end, fixed3, pick, usec, wait_one, Args, End};

struct Cfg {
    test: String,
    size: usize,
    iters: u64,
    post_list: u64,
    cq_mod: u64,
    events: bool,
}

fn header(c: &Cfg, a: &End, b: &End, title: &str) {
    println!("{}", LINE);
    println!("                    {}", title);
    println!(
        " Dual-port       : OFF\t\tDevice         : {}",
        a.ctx.name()
    );
    println!(" Number of qps   : 1\t\tTransport type : IB");
    println!(" Connection type : RC\t\tUsing SRQ      : OFF");
    println!(
        " TX depth        : {}\t\tPost List      : {}",
        a.qp.max_send_wr(),
        c.post_list
    );
    println!(
        " CQ Moderation   : {}\t\tMtu            : 4096[B]",
        c.cq_mod
    );
    println!(
        " Max inline data : {}[B]\t\tData ex. method : Ethernet-free (in process)",
        a.qp.max_inline_data()
    );
    println!(
        " Completion      : {}",
        if c.events { "events" } else { "polling" }
    );
    println!("{}", LINE);
    for (n, e) in [("local", a), ("remote", b)] {
        let ep = e.qp.endpoint();
        println!(
            " {} address: LID {:#06x} QPN {:#06x} PSN 0x000000 ({})",
            n,
            ep.lid,
            ep.qpn,
            e.ctx.name()
        );
    }
    println!("{}", LINE);
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Waits for one completion of each of `kinds` on `e` (in any order; the
/// caller knows nothing else is outstanding there).
fn wait_for(e: &End, kinds: &[WcOpcode]) -> Result<(), String> {
    let mut need = kinds.to_vec();
    let mut wcs = Vec::new();
    while !need.is_empty() {
        wcs.clear();
        wait_one(e, &mut wcs)?;
        for w in &wcs {
            if let Some(i) = need.iter().position(|k| *k == w.opcode) {
                need.remove(i);
            }
        }
    }
    Ok(())
}

fn latency(c: &Cfg, a: &End, b: &End) -> Result<(), String> {
    let title = match c.test.as_str() {
        "send_lat" => "Send Latency Test",
        "write_lat" => "RDMA_Write Latency Test",
        _ => "RDMA_Read Latency Test",
    };
    header(c, a, b, title);
    let sa = [a.mr.sge(0, c.size).map_err(err)?];
    let sb = [b.mr.sge(0, c.size).map_err(err)?];
    let inline = c.size <= a.qp.max_inline_data() as usize;
    let payload = vec![0xabu8; c.size];
    let remote = b.mr.remote(0).map_err(err)?;
    let mut samples = Vec::with_capacity(c.iters as usize);
    if c.test == "send_lat" {
        a.qp.post_recv(&[RecvWr::new(0, &sa)]).map_err(err)?;
        b.qp.post_recv(&[RecvWr::new(0, &sb)]).map_err(err)?;
    }
    if c.events {
        a.cq.req_notify(false).map_err(err)?;
        b.cq.req_notify(false).map_err(err)?;
    }
    for i in 0..c.iters {
        let t = Instant::now();
        match c.test.as_str() {
            "send_lat" => {
                // Ping-pong of SENDs; half the round trip, as perftest.
                let wr = if inline {
                    SendWr::inline(i, SendOp::Send, &payload)
                } else {
                    SendWr::new(i, SendOp::Send, &sa)
                };
                a.qp.post_send(&[wr]).map_err(err)?;
                wait_for(b, &[WcOpcode::Recv])?;
                b.qp.post_recv(&[RecvWr::new(i, &sb)]).map_err(err)?;
                let back = if inline {
                    SendWr::inline(i, SendOp::Send, &payload)
                } else {
                    SendWr::new(i, SendOp::Send, &sb)
                };
                b.qp.post_send(&[back]).map_err(err)?;
                wait_for(a, &[WcOpcode::Recv, WcOpcode::Send])?;
                samples.push(t.elapsed().as_nanos() / 2);
                a.qp.post_recv(&[RecvWr::new(i, &sa)]).map_err(err)?;
                wait_for(b, &[WcOpcode::Send])?;
            }
            "write_lat" => {
                let wr = if inline {
                    SendWr::inline(i, SendOp::Write(remote), &payload)
                } else {
                    SendWr::new(i, SendOp::Write(remote), &sa)
                };
                a.qp.post_send(&[wr]).map_err(err)?;
                wait_for(a, &[WcOpcode::RdmaWrite])?;
                samples.push(t.elapsed().as_nanos());
            }
            _ => {
                a.qp.post_send(&[SendWr::new(i, SendOp::Read(remote), &sa)])
                    .map_err(err)?;
                wait_for(a, &[WcOpcode::RdmaRead])?;
                samples.push(t.elapsed().as_nanos());
            }
        }
    }
    report::latency(&mut std::io::stdout().lock(), c.size, c.iters, &mut samples)
}

fn bandwidth(c: &Cfg, a: &End, b: &End) -> Result<(), String> {
    let send = c.test == "send_bw";
    header(
        c,
        a,
        b,
        if send {
            "Send BW Test"
        } else {
            "RDMA_Write BW Test"
        },
    );
    let sa = [a.mr.sge(0, c.size).map_err(err)?];
    let sb = [b.mr.sge(0, c.size).map_err(err)?];
    let remote = b.mr.remote(0).map_err(err)?;
    let depth = u64::from(a.qp.max_send_wr());
    let list = c.post_list.clamp(1, depth);
    let cq_mod = c.cq_mod.clamp(1, depth);
    let mut wc = [Wc::default(); 64];
    let (mut posted, mut completed, mut recvd) = (0u64, 0u64, 0u64);
    let mut rposted = 0u64;
    let mut peak_ns = u128::MAX;
    let start = Instant::now();
    let mut last = Instant::now();
    while completed < c.iters {
        if send {
            // Keep the receiver stocked.
            while rposted < c.iters && rposted - recvd < depth / 2 {
                b.qp.post_recv(&[RecvWr::new(rposted, &sb)]).map_err(err)?;
                rposted += 1;
            }
        }
        if posted < c.iters && posted - completed + list <= depth {
            let n = list.min(c.iters - posted);
            let wrs: Vec<SendWr<'_>> = (0..n)
                .map(|k| {
                    let id = posted + k;
                    // Selective signaling: one CQE per cq_mod WRs.
                    let flags = if (id + 1) % cq_mod == 0 || id + 1 == c.iters {
                        SendFlags::SIGNALED
                    } else {
                        SendFlags::NONE
                    };
                    let op = if send {
                        SendOp::Send
                    } else {
                        SendOp::Write(remote)
                    };
                    SendWr::new(id, op, &sa).with_flags(flags)
                })
                .collect();
            match a.qp.post_send(&wrs) {
                Ok(()) => posted += n,
                Err(e) => {
                    posted += e.index as u64;
                    if e.error != rmlx5::Error::QueueFull {
                        return Err(err(e));
                    }
                }
            }
        }
        let k = a.cq.poll(&mut wc).map_err(err)?;
        for w in &wc[..k] {
            if !w.is_ok() {
                return Err(format!("completion failed: {}", w.status.as_str()));
            }
            let done = w.wr_id + 1;
            let burst = done - completed;
            let ns = last.elapsed().as_nanos();
            if burst > 0 {
                peak_ns = peak_ns.min(ns / u128::from(burst));
            }
            last = Instant::now();
            completed = done;
        }
        if send {
            let k = b.cq.poll(&mut wc).map_err(err)?;
            recvd += k as u64;
        }
    }
    let ns = start.elapsed().as_nanos().max(1);
    report::bandwidth(
        &mut std::io::stdout().lock(),
        &report::Bw {
            size: c.size,
            iters: c.iters,
            msgs: c.iters,
            ns,
            // The shortest time per WR between two completions.
            peak: (peak_ns != u128::MAX && peak_ns != 0).then_some((1, peak_ns)),
        },
    )
}

/// The two-process mode: `--server` or `--client HOST`.
fn two_process(args: &Args) -> Result<(), String> {
    if args.flag("model") {
        return Err(
            "--model runs both ends in this process; it cannot be combined with --server/--client"
                .into(),
        );
    }
    if args.flag("server") && args.flag("client") {
        return Err("--server and --client exclude each other".into());
    }
    let u32_arg = |name: &str, default: u64| -> Result<u32, String> {
        u32::try_from(args.num(name, default)?).map_err(|_| format!("--{}: too large", name))
    };
    let p = Params {
        test: Test::parse(&args.str("test", "write_lat"))?,
        size: usize::try_from(args.num("size", 64)?).map_err(err)?,
        iters: args.num("iters", 1000)?,
        qps: u32_arg("qps", 1)?,
        post_list: args.num("post-list", 1)?,
        cq_mod: if args.flag("cq-mod") {
            Some(args.num("cq-mod", 1)?)
        } else {
            None
        },
        events: args.flag("events"),
        tx_depth: if args.flag("tx-depth") {
            Some(u32_arg("tx-depth", 128)?)
        } else {
            None
        },
    };
    p.check()?;
    let port = u16::try_from(args.num("port", u64::from(remote::DEFAULT_PORT))?)
        .map_err(|_| "--port: not a TCP port".to_string())?;
    let devs = rmlx5_tools::devices(false)?;
    let dev = pick(&devs, args.num("device", 0)?)?;
    let mut out = std::io::stdout().lock();
    if args.flag("server") {
        let l = TcpListener::bind(("0.0.0.0", port))
            .map_err(|e| format!("listen on 0.0.0.0:{}: {}", port, e))?;
        remote::run_server(l, &dev, &p, &mut out).map(|_| ())
    } else {
        let host = args.str("client", "");
        remote::run_client(&host, port, remote::CONNECT_RETRY, &dev, &p, &mut out).map(|_| ())
    }
}

fn run() -> Result<(), String> {
    let args = Args::parse(&["events", "model", "server"])?;
    if args.flag("server") || args.flag("client") {
        return two_process(&args);
    }
    for only in ["qps", "tx-depth", "port"] {
        if args.flag(only) {
            return Err(format!("--{} needs --server or --client", only));
        }
    }
    let c = Cfg {
        test: args.str("test", "write_lat"),
        size: usize::try_from(args.num("size", 64)?).map_err(err)?,
        iters: args.num("iters", 1000)?.max(1),
        post_list: args.num("post-list", 1)?.max(1),
        cq_mod: args.num("cq-mod", 1)?.max(1),
        events: args.flag("events"),
    };
    let devs = rmlx5_tools::devices(args.flag("model"))?;
    let da = pick(&devs, args.num("device", 0)?)?;
    if c.test == "qp_create" {
        return qp_create(&da, c.iters);
    }
    let db = pick(
        &devs,
        args.num("peer-device", if devs.len() > 1 { 1 } else { 0 })?,
    )?;
    let init = QpInit {
        max_send_wr: 128,
        max_recv_wr: 128,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 220,
        ..QpInit::default()
    };
    let events = c.events && c.test.ends_with("_lat");
    let a = end(&da, events, c.size.max(8), &init)?;
    let b = end(&db, events, c.size.max(8), &init)?;
    connect(&a, &b)?;
    match c.test.as_str() {
        "send_lat" | "write_lat" | "read_lat" => latency(&c, &a, &b),
        "write_bw" | "send_bw" => bandwidth(&c, &a, &b),
        t => Err(format!("unknown test {}", t)),
    }
}

/// QPs one context makes in `qp_create` (a context holds at most 1,024
/// objects of a kind).
const QPS_PER_CONTEXT: u64 = 1000;

/// `--test qp_create --iters N`: how long creating and destroying `n` RC
/// QPs takes on one device (through the kernel: one CREATE_QP and one
/// DESTROY_QP command each on a ConnectX function), in contexts of
/// [`QPS_PER_CONTEXT`], each with its PD and CQ, made before the clock
/// starts.
fn qp_create(dev: &rmlx5::Device, n: u64) -> Result<(), String> {
    let init = QpInit {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        ..QpInit::default()
    };
    let contexts = n.div_ceil(QPS_PER_CONTEXT);
    let mut sets = Vec::new();
    for _ in 0..contexts {
        let ctx = dev.open().map_err(err)?;
        let pd = ctx.alloc_pd().map_err(err)?;
        let cq = ctx.create_cq(64, None).map_err(err)?;
        sets.push((ctx, pd, cq));
    }
    let mut qps = Vec::new();
    let t0 = Instant::now();
    for i in 0..n {
        let (_, pd, cq) = &sets[(i / QPS_PER_CONTEXT) as usize];
        qps.push(
            pd.create_qp(cq, cq, &init)
                .map_err(|e| format!("QP {} of {}: {}", i + 1, n, e))?,
        );
    }
    let created = t0.elapsed();
    let t1 = Instant::now();
    drop(qps);
    let destroyed = t1.elapsed();
    let line = |what: &str, d: std::time::Duration| {
        let ns = d.as_nanos();
        println!(
            "  {:<8}{:>12} ms in all {:>10} us per QP {:>10} per second",
            what,
            fixed3(ns, 1_000_000),
            usec(ns / u128::from(n)),
            (u128::from(n) * 1_000_000_000).checked_div(ns).unwrap_or(0)
        );
    };
    println!(
        "qp_create: {} RC QPs (16 send / 16 recv WRs) on {} in {} context(s)",
        n,
        dev.name(),
        contexts
    );
    line("create", created);
    line("destroy", destroyed);
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("rmlx5-perf: {}", e);
        std::process::exit(1);
    }
}
