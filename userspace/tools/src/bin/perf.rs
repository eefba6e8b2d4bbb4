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
//! Command-interface throughput, on one device:
//! `rmlx5-perf --test qp_create|query_port [--iters 1000] [--device 0]
//! [--threads 1]`. `qp_create` creates N RC QPs and then destroys them;
//! `query_port` queries port 1 N times. With `--threads T` (1 to 64) T
//! threads, each with its own contexts made before the clock starts, do
//! N/T each, started together; the times are wall times of a phase, from
//! the start of the first thread to the end of the last. Both print the
//! time per object and the rate, and the firmware commands that makes on
//! a ConnectX function (qp_create: one CREATE_QP and one DESTROY_QP per
//! QP; query_port: QUERY_HCA_VPORT_CONTEXT and QUERY_HCA_VPORT_GID per
//! query) and their rate.
//!
//! Two-process mode, one side per process as perftest runs (see
//! `rmlx5_tools::remote`):
//! `rmlx5-perf --server [--port 18515] [--device 0] OPTIONS` and
//! `rmlx5-perf --client HOST [--port 18515] [--device 1] OPTIONS`, with
//! OPTIONS `--test send_lat|write_lat|send_bw|write_bw [--size 64]
//! [--iters 1000] [--qps 1] [--post-list 1] [--cq-mod N] [--tx-depth N]
//! [--events]`, the same on both sides.
//!
//! `rmlx5-perf --help` prints the usage.

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

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

/// What `--help` prints.
const USAGE: &str = "\
usage:
  rmlx5-perf --test send_lat|write_lat|read_lat|write_bw|send_bw [--size 64]
      [--iters 1000] [--post-list 1] [--cq-mod 1] [--events] [--device 0]
      [--peer-device 1] [--model]
  rmlx5-perf --test qp_create|query_port [--iters 1000] [--device 0]
      [--threads 1] [--model]
  rmlx5-perf --server [--port 18515] [--device 0] OPTIONS
  rmlx5-perf --client HOST [--port 18515] [--device 1] OPTIONS
      OPTIONS: --test send_lat|write_lat|send_bw|write_bw [--size 64]
      [--iters 1000] [--qps 1] [--post-list 1] [--cq-mod N] [--tx-depth N]
      [--events]
  rmlx5-perf --help

--threads T (1 to 64, qp_create and query_port only): T threads share the
--iters N objects (or queries), each thread with its own contexts.";

/// The most threads `--threads` takes.
const MAX_THREADS: u64 = 64;

/// `--threads T`: 1 if not given; only for the command-interface tests.
fn threads(args: &Args) -> Result<usize, String> {
    let t = args.num("threads", 1)?;
    if !(1..=MAX_THREADS).contains(&t) {
        return Err(format!(
            "--threads: {} threads; give 1 to {}",
            t, MAX_THREADS
        ));
    }
    let test = args.str("test", "write_lat");
    if args.flag("threads") && !matches!(test.as_str(), "qp_create" | "query_port") {
        return Err(format!(
            "--threads applies to --test qp_create and query_port only, not {}",
            test
        ));
    }
    usize::try_from(t).map_err(err)
}

fn run() -> Result<(), String> {
    let args = Args::parse(&["events", "model", "server", "help"])?;
    if args.flag("help") {
        println!("{}", USAGE);
        return Ok(());
    }
    let nthreads = threads(&args)?;
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
    match c.test.as_str() {
        "qp_create" => return qp_create(&da, c.iters, nthreads),
        "query_port" => return query_port(&da, c.iters, nthreads),
        _ => {}
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
        t => Err(format!("unknown test {} (see --help)", t)),
    }
}

/// QPs one context makes in `qp_create` (a context holds at most 1,024
/// objects of a kind).
const QPS_PER_CONTEXT: u64 = 1000;

/// What a thread returns that stopped because another one failed.
const STOPPED: &str = "stopped: another thread failed";

/// Thread `k`'s part of `n` when `t` threads split it as evenly as
/// possible (the first `n % t` threads take one more).
fn share(n: u64, t: u64, k: u64) -> u64 {
    n / t + u64::from(k < n % t)
}

/// When one thread's part of a phase began and ended.
#[derive(Clone, Copy)]
struct Span {
    start: Instant,
    end: Instant,
}

/// The wall time of a phase: from the first thread's start (the barrier's
/// release) to the last thread's end.
fn wall(spans: impl IntoIterator<Item = Span>) -> Duration {
    let mut it = spans.into_iter();
    let Some(first) = it.next() else {
        return Duration::ZERO;
    };
    let (start, end) = it.fold((first.start, first.end), |(s, e), x| {
        (s.min(x.start), e.max(x.end))
    });
    end.saturating_duration_since(start)
}

/// One point where all threads of a test meet before the next phase. A
/// thread that failed says so there, and all then stop at that point
/// together (none is left waiting for it at a later one). One `Meet` per
/// point: a flag used at two points could tell a slow thread of a failure
/// after the first, which the others passed as good.
struct Meet {
    barrier: Barrier,
    failed: AtomicBool,
}

impl Meet {
    fn new(threads: usize) -> Meet {
        Meet {
            barrier: Barrier::new(threads),
            failed: AtomicBool::new(false),
        }
    }

    /// Waits for all threads; whether none failed (`ok` is this one's).
    fn all_ok(&self, ok: bool) -> bool {
        if !ok {
            self.failed.store(true, Ordering::SeqCst);
        }
        // Every store is made before its thread's wait, every load after
        // the release, so all threads see the same answer.
        self.barrier.wait();
        !self.failed.load(Ordering::SeqCst)
    }
}

/// Runs `work(k)` on threads k = 0..`t`, all together, and returns their
/// results, or the first failure (one that was not just [`STOPPED`]).
fn on_threads<R: Send>(
    t: u64,
    work: impl Fn(u64) -> Result<R, String> + Sync,
) -> Result<Vec<R>, String> {
    let results: Vec<Result<R, String>> = std::thread::scope(|s| {
        let work = &work;
        let handles: Vec<_> = (0..t).map(|k| s.spawn(move || work(k))).collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a thread panicked".to_string()))
            })
            .collect()
    });
    let mut ok = Vec::with_capacity(results.len());
    let mut stopped = false;
    for r in results {
        match r {
            Ok(v) => ok.push(v),
            Err(e) if e == STOPPED => stopped = true,
            Err(e) => return Err(e),
        }
    }
    if stopped {
        return Err(STOPPED.into());
    }
    Ok(ok)
}

/// `"thread K: "` when there are several threads, else nothing.
fn who(t: u64, k: u64) -> String {
    if t > 1 {
        format!("thread {}: ", k)
    } else {
        String::new()
    }
}

/// One result line: `what` took `d` for `n` of `unit`.
fn phase_line(what: &str, unit: &str, n: u64, d: Duration) {
    let ns = d.as_nanos();
    println!(
        "  {:<8}{:>12} ms in all {:>10} us per {} {:>10} per second",
        what,
        fixed3(ns, 1_000_000),
        usec(ns / u128::from(n)),
        unit,
        (u128::from(n) * 1_000_000_000).checked_div(ns).unwrap_or(0)
    );
}

/// The line of firmware commands: `cmds` of them in `d`.
fn commands_line(cmds: u64, d: Duration) {
    let ns = d.as_nanos();
    println!(
        "  commands: {} in {} s, {}/s",
        cmds,
        fixed3(ns, 1_000_000_000),
        (u128::from(cmds) * 1_000_000_000)
            .checked_div(ns)
            .unwrap_or(0)
    );
}

/// One thread of `qp_create`: opens its contexts, then with the others
/// creates its part of the QPs and, after all have, destroys them.
fn qp_thread(
    dev: &rmlx5::Device,
    (k, t, n): (u64, u64, u64),
    ready: &Meet,
    created: &Meet,
) -> Result<(Span, Span, Option<u64>), String> {
    let init = QpInit {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        ..QpInit::default()
    };
    let mine = share(n, t, k);
    let who = who(t, k);
    let open = || -> Result<_, String> {
        let mut sets = Vec::new();
        for _ in 0..mine.div_ceil(QPS_PER_CONTEXT) {
            let e = |what: &str, x: rmlx5::Error| format!("{}{}: {}", who, what, x);
            let ctx = dev.open().map_err(|x| e("open", x))?;
            let pd = ctx.alloc_pd().map_err(|x| e("alloc_pd", x))?;
            let cq = ctx.create_cq(64, None).map_err(|x| e("create_cq", x))?;
            sets.push((ctx, pd, cq));
        }
        Ok(sets)
    };
    let sets = open();
    // (Nothing may return between `open` and the meeting.)
    let mut qps = Vec::with_capacity(usize::try_from(mine).unwrap_or(0));
    if !ready.all_ok(sets.is_ok()) {
        sets?;
        return Err(STOPPED.into());
    }
    let sets = sets?;
    let mut res = Ok(());
    // Thread 0 reads the free memory once every thread has its contexts,
    // and again once all have made their QPs.
    let free_before = if k == 0 { mem_free_kib() } else { None };
    let start = Instant::now();
    for i in 0..mine {
        let (_, pd, cq) = &sets[(i / QPS_PER_CONTEXT) as usize];
        match pd.create_qp(cq, cq, &init) {
            Ok(q) => qps.push(q),
            Err(e) => {
                res = Err(format!("{}QP {} of {}: {}", who, i + 1, mine, e));
                break;
            }
        }
    }
    let create = Span {
        start,
        end: Instant::now(),
    };
    if !created.all_ok(res.is_ok()) {
        res?;
        return Err(STOPPED.into());
    }
    let used = match (free_before, mem_free_kib()) {
        (Some(b), Some(a)) if k == 0 => Some(b.saturating_sub(a)),
        _ => None,
    };
    let start = Instant::now();
    drop(qps);
    let destroy = Span {
        start,
        end: Instant::now(),
    };
    Ok((create, destroy, used))
}

/// `MemFree` of /proc/meminfo, in KiB.
fn mem_free_kib() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemFree:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// `--test qp_create --iters N [--threads T]`: how long creating and
/// destroying `n` RC QPs takes on one device (through the kernel: one
/// CREATE_QP and one DESTROY_QP command each on a ConnectX function).
/// `threads` threads make their part of them each, in contexts of
/// [`QPS_PER_CONTEXT`], each with its PD and CQ, opened before the clock
/// starts; all start creating together, and destroying together once all
/// have created theirs.
fn qp_create(dev: &rmlx5::Device, n: u64, threads: usize) -> Result<(), String> {
    let t = u64::try_from(threads).map_err(err)?;
    let (ready, created) = (Meet::new(threads), Meet::new(threads));
    let spans = on_threads(t, |k| qp_thread(dev, (k, t, n), &ready, &created))?;
    let create = wall(spans.iter().map(|s| s.0));
    let destroy = wall(spans.iter().map(|s| s.1));
    let used_kib = spans.iter().find_map(|s| s.2);
    let contexts: u64 = (0..t)
        .map(|k| share(n, t, k).div_ceil(QPS_PER_CONTEXT))
        .sum();
    println!(
        "qp_create: {} RC QPs (16 send / 16 recv WRs) on {} in {} context(s), {} thread(s)",
        n,
        dev.name(),
        contexts,
        t
    );
    phase_line("create", "QP", n, create);
    phase_line("destroy", "QP", n, destroy);
    // What the QPs took: the kernel's objects and queue pages, the model's
    // state (whose tables are allocated at load, so only the queues), and
    // this process's mappings of them.
    if let Some(kib) = used_kib {
        println!(
            "  memory: {} KiB for {} QPs, {} bytes per QP (MemFree before and after creating)",
            kib,
            n,
            kib * 1024 / n.max(1)
        );
    }
    // One CREATE_QP and one DESTROY_QP per QP, in the two phases' time.
    commands_line(2 * n, create + destroy);
    Ok(())
}

/// One thread of `query_port`: opens a context, then with the others
/// queries port 1 its part of `n` times.
fn query_thread(
    dev: &rmlx5::Device,
    (k, t, n): (u64, u64, u64),
    ready: &Meet,
) -> Result<Span, String> {
    let mine = share(n, t, k);
    let who = who(t, k);
    let ctx = dev.open().map_err(|e| format!("{}open: {}", who, e));
    if !ready.all_ok(ctx.is_ok()) {
        ctx?;
        return Err(STOPPED.into());
    }
    let ctx = ctx?;
    let start = Instant::now();
    for i in 0..mine {
        ctx.query_port(1)
            .map_err(|e| format!("{}query {} of {}: {}", who, i + 1, mine, e))?;
    }
    Ok(Span {
        start,
        end: Instant::now(),
    })
}

/// `--test query_port --iters N [--threads T]`: how long querying port 1
/// `n` times takes on one device, `threads` threads each with its own
/// context (opened before the clock starts) making their part of the
/// queries, all starting together.
fn query_port(dev: &rmlx5::Device, n: u64, threads: usize) -> Result<(), String> {
    let t = u64::try_from(threads).map_err(err)?;
    let ready = Meet::new(threads);
    let spans = on_threads(t, |k| query_thread(dev, (k, t, n), &ready))?;
    let d = wall(spans);
    println!(
        "query_port: {} queries of port 1 on {} in {} context(s), {} thread(s)",
        n,
        dev.name(),
        t,
        t
    );
    phase_line("query", "query", n, d);
    // On the ConnectX backend every port query is two firmware commands,
    // QUERY_HCA_VPORT_CONTEXT and QUERY_HCA_VPORT_GID (`CxBackend::query_port`
    // in drivers/rmlx5/cx/dev.rs, through `info`); this count assumes that
    // (a software HCA runs none).
    commands_line(2 * n, d);
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("rmlx5-perf: {}", e);
        std::process::exit(1);
    }
}
