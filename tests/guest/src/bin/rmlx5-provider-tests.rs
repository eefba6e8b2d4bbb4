// SPDX-License-Identifier: GPL-2.0

//! End-to-end tests of the user-space provider over the kernel module:
//! `rmlx5_0` and `rmlx5_1` through `/dev/rmlx5_uverbsN`, the fast path in
//! this process, the software HCAs in the kernel. `RMLX5_TEST_DEVICES`
//! (`common::TEST_DEVICES`) picks other devices, e.g. `2,2` for pairs
//! looped back on one ConnectX function; what needs the software HCA's
//! debugfs (kick elision counts, object listings) is then left out.
//!
//! The first part is the provider's host scenarios
//! (`userspace/rmlx5/tests/{verbs,events,threads}.rs`), the same code that
//! `cargo test` runs against the in-process model: their `common` module
//! picks the kernel's devices when built outside `cfg(test)`. The second
//! part is what only a real kernel can show: epoll on a completion
//! channel, several processes at once, a process killed in the middle of
//! its traffic, megabyte transfers, the installed tools (rmlx5-perf as a
//! server and a client process over TCP on 127.0.0.1) and a long run.
//!
//! The program also runs as its own helper process: `--child N` does a
//! share of the multi-process test, `--traffic` loops until killed.

// Each scenario file declares `mod common;` for its host test crate, so
// here `common` is loaded once per scenario file (and once more for this
// file): separate copies of stateless helpers.
#![expect(clippy::duplicate_mod)]

use std::io::{BufRead, BufReader, Read};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rmlx5::{Access, ConnectOpts, QpInit, RecvWr, SendFlags, SendOp, SendWr, Wc, WcOpcode};
use rmlx5_abi::uapi::DEVICE_UAR_DOORBELLS;
use rmlx5_guest_tests::{ensure, run_all, test_device, Test, TestResult};

#[path = "../../../../userspace/rmlx5/tests/common/mod.rs"]
mod common;
#[path = "../../../../userspace/rmlx5/tests/events.rs"]
mod events;
#[path = "../../../../userspace/rmlx5/tests/threads.rs"]
mod threads;
#[path = "../../../../userspace/rmlx5/tests/verbs.rs"]
mod verbs;

use common::{pair_with, poll_n, side, Fabric, Pair, WAIT};

/// A [`Test`] running one of the provider's shared scenarios (they report
/// failure by panicking, which the harness turns into a FAIL).
macro_rules! scenario {
    ($module:ident :: $name:ident) => {
        Test {
            name: stringify!($name),
            run: || {
                $module::$name();
                Ok(())
            },
        }
    };
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| {
            (i as u8)
                .wrapping_mul(13)
                .wrapping_add(seed ^ (i >> 12) as u8)
        })
        .collect()
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The event loop an application writes: epoll on the channel fd, read
/// the event, acknowledge it, re-arm, then poll until the CQ is empty.
fn epoll_on_channel_fd() -> TestResult {
    let p = pair_with(&QpInit::default(), &ConnectOpts::default(), false, true);
    let ch = p.b.channel.as_ref().ok_or("no channel")?;
    ch.set_nonblocking(true).map_err(err)?;
    // SAFETY: plain system call, no pointers.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    ensure!(ep >= 0, "epoll_create1 failed");
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: 42,
    };
    // SAFETY: `ev` is a valid epoll_event for the duration of the call.
    let rc = unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, ch.fd().as_raw_fd(), &mut ev) };
    ensure!(rc == 0, "epoll_ctl failed");
    let sge = [p.b.mr.sge(0, 64).map_err(err)?];
    p.b.cq.req_notify(false).map_err(err)?;
    let mut received = 0u64;
    const MESSAGES: u64 = 50;
    let mut result = Ok(());
    for i in 0..MESSAGES {
        p.b.qp.post_recv(&[RecvWr::new(i, &sge)]).map_err(err)?;
    }
    for i in 0..MESSAGES {
        p.a.qp
            .post_send(&[SendWr::inline(i, SendOp::Send, &i.to_le_bytes())])
            .map_err(err)?;
    }
    let start = Instant::now();
    let mut wc = [Wc::default(); 8];
    while received < MESSAGES && result.is_ok() {
        let mut out = [libc::epoll_event { events: 0, u64: 0 }];
        // SAFETY: `out` has room for the one event asked for.
        let n = unsafe { libc::epoll_wait(ep, out.as_mut_ptr(), 1, 20_000) };
        if n != 1 || out[0].u64 != 42 {
            result = Err(format!(
                "epoll_wait returned {n} after {received} completions"
            ));
            break;
        }
        let cq = ch.get_cq_event().map_err(err)?;
        ensure!(cq.same(&p.b.cq), "event for another CQ");
        cq.ack_events(1);
        p.b.cq.req_notify(false).map_err(err)?;
        loop {
            let k = p.b.cq.poll(&mut wc).map_err(err)?;
            if k == 0 {
                break;
            }
            for w in &wc[..k] {
                ensure!(w.is_ok() && w.wr_id == received, "completion {:?}", w);
                received += 1;
            }
        }
        ensure!(start.elapsed() < WAIT, "too slow: {received} completions");
    }
    poll_n(&p.a.cq, MESSAGES as usize);
    // SAFETY: `ep` is the epoll descriptor this test created.
    unsafe { libc::close(ep) };
    result
}

/// 1 MiB WRITE, READ back into another place, and SEND into a 1 MiB
/// receive buffer, each checked byte for byte.
fn megabyte_transfers() -> TestResult {
    const MB: usize = 1 << 20;
    let fabric = Fabric::new(false);
    let init = QpInit::default();
    let a = side(&fabric, 0, &init, false);
    let b = side(&fabric, 1, &init, false);
    a.qp.connect(&b.qp.endpoint(), &ConnectOpts::default())
        .map_err(err)?;
    b.qp.connect(&a.qp.endpoint(), &ConnectOpts::default())
        .map_err(err)?;
    let la = a.pd.reg_mr(4 * MB, Access::ALL).map_err(err)?;
    let lb = b.pd.reg_mr(4 * MB, Access::ALL).map_err(err)?;
    for round in 0..3u8 {
        let data = pattern(MB, round);
        la.write(0, &data).map_err(err)?;
        let sge = [la.sge(0, MB).map_err(err)?];
        let wr = SendWr::new(1, SendOp::Write(lb.remote(MB).map_err(err)?), &sge);
        a.qp.post_send(&[wr]).map_err(err)?;
        let c = poll_n(&a.cq, 1);
        ensure!(c[0].is_ok(), "WRITE failed: {:?}", c[0]);
        ensure!(
            lb.to_vec(MB, MB).map_err(err)? == data,
            "WRITE data differs"
        );
        let back = [la.sge(2 * MB, MB).map_err(err)?];
        let wr = SendWr::new(2, SendOp::Read(lb.remote(MB).map_err(err)?), &back);
        a.qp.post_send(&[wr]).map_err(err)?;
        let c = poll_n(&a.cq, 1);
        ensure!(
            c[0].is_ok() && c[0].opcode == WcOpcode::RdmaRead,
            "READ: {:?}",
            c[0]
        );
        ensure!(
            la.to_vec(2 * MB, MB).map_err(err)? == data,
            "READ data differs"
        );
        let rsge = [lb.sge(3 * MB, MB).map_err(err)?];
        b.qp.post_recv(&[RecvWr::new(3, &rsge)]).map_err(err)?;
        a.qp.post_send(&[SendWr::new(3, SendOp::Send, &sge)])
            .map_err(err)?;
        ensure!(poll_n(&a.cq, 1)[0].is_ok(), "SEND failed");
        let r = poll_n(&b.cq, 1);
        ensure!(
            r[0].is_ok() && r[0].byte_len as usize == MB,
            "recv: {:?}",
            r[0]
        );
        ensure!(
            lb.to_vec(3 * MB, MB).map_err(err)? == data,
            "SEND data differs"
        );
    }
    Ok(())
}

/// Mixed traffic for a while: SENDs, WRITE_IMMs and FAAs of changing
/// sizes, three of four unsignaled, every message checked.
fn traffic(p: &Pair, iterations: u64, seed: u8) -> TestResult {
    let rs = [p.b.mr.sge(0, 4096).map_err(err)?];
    let counter = p.b.mr.remote(8192).map_err(err)?;
    p.b.mr.write_u64(8192, 0).map_err(err)?;
    let mut sends = 0u64;
    for i in 0..iterations {
        let len = 1 + (i as usize * 61) % 4000;
        let data = pattern(len, seed.wrapping_add(i as u8));
        p.a.mr.write(0, &data).map_err(err)?;
        let sge = [p.a.mr.sge(0, len).map_err(err)?];
        let fetch = [p.a.mr.sge(16384, 8).map_err(err)?];
        p.b.qp.post_recv(&[RecvWr::new(i, &rs)]).map_err(err)?;
        let op = if i % 2 == 0 {
            SendOp::Send
        } else {
            SendOp::WriteImm(p.b.mr.remote(0).map_err(err)?, i as u32)
        };
        let signaled = i % 4 == 3;
        let flags = if signaled {
            SendFlags::SIGNALED
        } else {
            SendFlags::NONE
        };
        p.a.qp
            .post_send(&[
                SendWr::new(i, op, &sge).with_flags(SendFlags::NONE),
                SendWr::new(
                    i,
                    SendOp::FetchAdd {
                        remote: counter,
                        add: 1,
                    },
                    &fetch,
                )
                .with_flags(flags),
            ])
            .map_err(err)?;
        sends += 1;
        let r = poll_n(&p.b.cq, 1);
        ensure!(r[0].is_ok() && r[0].wr_id == i, "iteration {i}: {:?}", r[0]);
        ensure!(
            r[0].byte_len as usize == len,
            "iteration {i}: {} bytes",
            r[0].byte_len
        );
        ensure!(
            p.b.mr.to_vec(0, len).map_err(err)? == data,
            "iteration {i}: data"
        );
        if signaled {
            let c = poll_n(&p.a.cq, 1);
            ensure!(c[0].is_ok() && c[0].wr_id == i, "iteration {i}: {:?}", c[0]);
            ensure!(
                p.a.mr.read_u64(16384).map_err(err)? == i,
                "iteration {i}: FAA fetched {}",
                p.a.mr.read_u64(16384).map_err(err)?
            );
        }
    }
    ensure!(
        p.b.mr.read_u64(8192).map_err(err)? == sends,
        "counter {} after {sends} FAAs",
        p.b.mr.read_u64(8192).map_err(err)?
    );
    Ok(())
}

/// A long run: mixed traffic between the two test devices for ten
/// seconds.
fn long_run() -> TestResult {
    let init = QpInit {
        max_send_wr: 64,
        ..QpInit::default()
    };
    let p = pair_with(&init, &ConnectOpts::default(), false, false);
    let start = Instant::now();
    let mut rounds = 0u64;
    while start.elapsed() < Duration::from_secs(10) {
        traffic(&p, 100, rounds as u8)?;
        rounds += 1;
    }
    println!(
        "long_run: {} messages in {:?}",
        rounds * 200,
        start.elapsed()
    );
    ensure!(
        p.fabric.doorbell_errors(0) + p.fabric.doorbell_errors(1) == 0,
        "doorbell errors"
    );
    Ok(())
}

/// A number from a debugfs `stats` file of `rmlx5_<dev>`.
fn stat(dev: u32, name: &str) -> Result<u64, String> {
    let path = format!("/sys/kernel/debug/rmlx5/rmlx5_{dev}/stats");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .ok_or(format!("{path}: no {name}"))
}

/// Kick elision: a stream of 64-byte inline WRITEs, one WR per post with
/// up to 32 outstanding, every eighth signaled, each writing its sequence
/// number into its own slot. Every completion arrives in order and every
/// slot holds the last number written to it; with `kick_elision=1` the
/// module's doorbell watcher took some of the doorbells from their
/// records (so some posts made no KICK call), and no doorbell was
/// refused. On a device that reports `DEVICE_UAR_DOORBELLS` no post makes
/// a KICK call and there is no watcher: only the stream is checked.
fn kick_elision_stream() -> TestResult {
    const MESSAGES: u64 = 20_000;
    const SLOTS: u64 = 256;
    let init = QpInit {
        max_send_wr: 64,
        ..QpInit::default()
    };
    let p = pair_with(&init, &ConnectOpts::default(), false, false);
    let dev = p.fabric.devices()[0].index();
    let flags = p.a.ctx.query_device().map_err(err)?.device_flags;
    let kicked = flags & DEVICE_UAR_DOORBELLS == 0;
    let on = kicked && stat(dev, "kick_elision")? == 1;
    let before = if kicked {
        stat(dev, "watch_doorbells")?
    } else {
        0
    };
    let errors_before = p.fabric.doorbell_errors(0);
    let mut signaled = 0u64;
    let mut done = 0u64;
    let mut wc = [Wc::default(); 16];
    let start = Instant::now();
    for i in 0..MESSAGES {
        let data = [i.to_le_bytes(); 8].concat();
        let flags = if i % 8 == 7 || i + 1 == MESSAGES {
            SendFlags::SIGNALED
        } else {
            SendFlags::NONE
        };
        let remote = p.b.mr.remote((i % SLOTS) as usize * 64).map_err(err)?;
        let wr = SendWr::inline(i, SendOp::Write(remote), &data).with_flags(flags);
        if flags == SendFlags::SIGNALED {
            signaled += 1;
        }
        // At most 32 WRs outstanding: 4 signaled completions.
        while signaled - done > 4 {
            ensure!(start.elapsed() < WAIT * 4, "stream stalled at {i}");
            let n = p.a.cq.poll(&mut wc).map_err(err)?;
            for c in &wc[..n] {
                ensure!(c.is_ok(), "completion {c:?}");
                ensure!(
                    c.wr_id == 8 * done + 7,
                    "completion {} out of order",
                    c.wr_id
                );
                done += 1;
            }
        }
        p.a.qp.post_send(&[wr]).map_err(err)?;
    }
    while done < signaled {
        ensure!(start.elapsed() < WAIT * 4, "stream stalled at the end");
        let n = p.a.cq.poll(&mut wc).map_err(err)?;
        for c in &wc[..n] {
            ensure!(c.is_ok(), "completion {c:?}");
            done += 1;
        }
    }
    for slot in 0..SLOTS {
        let last = (MESSAGES - 1) - (MESSAGES - 1 - slot) % SLOTS;
        let got = p.b.mr.to_vec(slot as usize * 64, 64).map_err(err)?;
        ensure!(
            got == [last.to_le_bytes(); 8].concat(),
            "slot {slot} holds {:?}, expected message {last}",
            &got[..8]
        );
    }
    if !kicked {
        println!(
            "kick_elision_stream: {MESSAGES} WRITEs in {:?} on rmlx5_{dev}, which sees its doorbells (no KICK, no watcher)",
            start.elapsed()
        );
        return Ok(());
    }
    let taken = stat(dev, "watch_doorbells")? - before;
    println!(
        "kick_elision_stream: {MESSAGES} WRITEs in {:?}, {taken} doorbells taken by the watcher (kick_elision={on})",
        start.elapsed()
    );
    ensure!(
        p.fabric.doorbell_errors(0) == errors_before,
        "doorbells refused"
    );
    if on {
        ensure!(taken > 0, "the doorbell watcher took no doorbell");
    }
    Ok(())
}

/// What one helper process does in [`processes_at_once`]: two threads,
/// each with its own QP pair across the two HCAs.
fn child(index: u8) -> TestResult {
    let threads: Vec<_> = (0..2u8)
        .map(|t| {
            std::thread::spawn(move || {
                let p = pair_with(&QpInit::default(), &ConnectOpts::default(), false, false);
                traffic(&p, 200, index * 16 + t)
            })
        })
        .collect();
    for t in threads {
        t.join().map_err(|_| "thread panicked")??;
    }
    Ok(())
}

/// Four processes (two threads each) at once, plus this one.
fn processes_at_once() -> TestResult {
    let exe = std::env::current_exe().map_err(err)?;
    let children: Vec<_> = (0..4u8)
        .map(|i| Command::new(&exe).arg("--child").arg(i.to_string()).spawn())
        .collect::<Result<_, _>>()
        .map_err(err)?;
    let here = pair_with(&QpInit::default(), &ConnectOpts::default(), false, false);
    let mine = traffic(&here, 200, 99);
    for (i, mut c) in children.into_iter().enumerate() {
        let st = c.wait().map_err(err)?;
        ensure!(st.success(), "child {i}: {st}");
    }
    mine
}

/// The test devices (0 and 1, each device once) that debugfs lists the
/// objects of: software HCAs (`rmlx5_<n>/{cqs,qps}`); a ConnectX function
/// has no such listing.
fn listed_devices() -> Result<Vec<u32>, String> {
    let mut v = vec![test_device(0)?, test_device(1)?];
    v.dedup();
    v.retain(|n| std::path::Path::new(&format!("/sys/kernel/debug/rmlx5/rmlx5_{n}/cqs")).exists());
    Ok(v)
}

/// The lines of the debugfs object listings of `devs`.
fn objects(devs: &[u32]) -> Result<Vec<String>, String> {
    let mut v = Vec::new();
    for &dev in devs {
        for f in ["cqs", "qps"] {
            let path = format!("/sys/kernel/debug/rmlx5/rmlx5_{dev}/{f}");
            let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
            v.extend(text.lines().map(|l| format!("{dev}/{f}: {l}")));
        }
    }
    Ok(v)
}

/// A process killed with SIGKILL in the middle of its traffic leaves no
/// CQ or QP behind, and the HCAs keep working. (That the module then
/// unloads and kmemleak stays silent is checked by /init at the end.)
///
/// Without an object listing for the test devices (ConnectX functions)
/// only the kills and the traffic afterwards are checked.
fn sigkill_mid_traffic() -> TestResult {
    let devs = listed_devices()?;
    if devs.is_empty() {
        println!("sigkill_mid_traffic: the test devices have no debugfs object listing: objects not counted");
    }
    let before = objects(&devs)?.len();
    let exe = std::env::current_exe().map_err(err)?;
    for round in 0..2 {
        let mut c = Command::new(&exe)
            .arg("--traffic")
            .stdout(Stdio::piped())
            .spawn()
            .map_err(err)?;
        let mut line = String::new();
        let out = c.stdout.take().ok_or("no stdout")?;
        BufReader::new(out).read_line(&mut line).map_err(err)?;
        ensure!(line.trim() == "traffic running", "helper said {line:?}");
        let during = objects(&devs)?.len();
        ensure!(
            devs.is_empty() || during > before,
            "helper's objects not visible in debugfs"
        );
        std::thread::sleep(Duration::from_millis(300 + 200 * round));
        c.kill().map_err(err)?;
        let st = c.wait().map_err(err)?;
        ensure!(!st.success(), "helper exited by itself: {st}");
    }
    let start = Instant::now();
    loop {
        let now = objects(&devs)?;
        if now.len() == before {
            break;
        }
        ensure!(
            start.elapsed() < WAIT,
            "objects left after SIGKILL:\n{}",
            now.join("\n")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let p = pair_with(&QpInit::default(), &ConnectOpts::default(), false, false);
    traffic(&p, 20, 7)
}

/// The `--traffic` helper: events, many WRs in flight, forever.
fn traffic_forever() -> TestResult {
    let init = QpInit {
        max_send_wr: 128,
        max_recv_wr: 128,
        ..QpInit::default()
    };
    let p = pair_with(&init, &ConnectOpts::default(), false, true);
    let extra = p.a.pd.reg_mr(1 << 20, Access::ALL).map_err(err)?;
    let write = [extra.sge(0, 60_000).map_err(err)?];
    let read = [extra.sge(1 << 19, 4096).map_err(err)?];
    let remote = p.b.mr.remote(0).map_err(err)?;
    p.b.cq.req_notify(false).map_err(err)?;
    let mut i = 0u64;
    loop {
        let rs = [p.b.mr.sge(0, 4096).map_err(err)?];
        let _ = p.b.qp.post_recv(&[RecvWr::new(i, &rs)]);
        let wrs = [
            SendWr::new(i, SendOp::Read(remote), &read).with_flags(SendFlags::NONE),
            SendWr::new(i, SendOp::Write(remote), &write),
            SendWr::inline(i, SendOp::Send, b"ping"),
        ];
        let _ = p.a.qp.post_send(&wrs);
        let mut wc = [Wc::default(); 32];
        let _ = p.a.cq.poll(&mut wc);
        // Receive completions are polled, but their events are left
        // unread and unacknowledged for the kill to clean up.
        let _ = p.b.cq.poll(&mut wc);
        if i == 16 {
            println!("traffic running");
        }
        i += 1;
    }
}

/// The pingpong tool, as a user runs it from /bin, in both modes, between
/// the test devices.
fn pingpong_tool() -> TestResult {
    let devices = [
        "--device".to_string(),
        test_device(0)?.to_string(),
        "--peer-device".to_string(),
        test_device(1)?.to_string(),
    ];
    for mode in [&[][..], &["--events"][..]] {
        let out = Command::new("/bin/rmlx5-pingpong")
            .args(["--size", "4096", "--iters", "200", "--verbose"])
            .args(&devices)
            .args(mode)
            .output()
            .map_err(|e| format!("/bin/rmlx5-pingpong: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        print!("{text}");
        ensure!(
            out.status.success(),
            "rmlx5-pingpong {mode:?}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
        ensure!(
            text.contains("1638400 bytes in"),
            "rmlx5-pingpong {mode:?} printed no bandwidth line"
        );
        // --verbose: each end's first receive names the other end's QP.
        ensure!(
            text.matches(" recv: wr_id 0 byte_len 4096 from QPN")
                .count()
                == 2,
            "rmlx5-pingpong {mode:?} --verbose printed no sender of the receives"
        );
    }
    Ok(())
}

/// Whether a TCP connection over 127.0.0.1 works (the listener must live
/// until the connection is made).
fn loopback_works() -> bool {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr().and_then(TcpStream::connect).map(|_| l))
        .is_ok()
}

/// Brings the loopback interface up: the test guest's /init configures no
/// network, and rmlx5-perf's two processes talk TCP over 127.0.0.1. Uses
/// busybox's `ip` (or `ifconfig`) from /bin; Linux assigns 127.0.0.1 to
/// `lo` when it comes up.
fn loopback_up() -> TestResult {
    if loopback_works() {
        return Ok(());
    }
    let mut tried = Vec::new();
    for cmd in [
        &["ip", "link", "set", "lo", "up"][..],
        &["ifconfig", "lo", "127.0.0.1", "up"][..],
    ] {
        match Command::new(cmd[0]).args(&cmd[1..]).status() {
            Ok(st) => tried.push(format!("{}: {st}", cmd.join(" "))),
            Err(e) => tried.push(format!("{}: {e}", cmd.join(" "))),
        }
        if loopback_works() {
            return Ok(());
        }
    }
    Err(format!(
        "cannot bring up the loopback interface ({})",
        tried.join("; ")
    ))
}

/// Waits for `c` for up to `limit`, killing it after that; returns its
/// exit status and stdout and stderr.
fn finish(mut c: Child, what: &str, limit: Duration) -> Result<(bool, String, String), String> {
    let start = Instant::now();
    let st = loop {
        if let Some(st) = c.try_wait().map_err(err)? {
            break st;
        }
        if start.elapsed() > limit {
            let _ = c.kill();
            let _ = c.wait();
            return Err(format!("{what}: still running after {limit:?}, killed"));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    let mut errs = String::new();
    if let Some(mut o) = c.stdout.take() {
        o.read_to_string(&mut out).map_err(err)?;
    }
    if let Some(mut e) = c.stderr.take() {
        e.read_to_string(&mut errs).map_err(err)?;
    }
    print!("{out}");
    Ok((st.success(), out, errs.trim().to_string()))
}

/// rmlx5-perf's two-process mode as the benchmark runs it: a server
/// process on rmlx5_0 and a client process on rmlx5_1 (or the test
/// devices `RMLX5_TEST_DEVICES` names) talking TCP over
/// 127.0.0.1 (the loopback interface is brought up first), for `write_bw`
/// on four QPs and for `send_lat` in event mode. Both must exit 0, the
/// server after printing `server done`, the client after printing its
/// result line.
fn perf_two_process() -> TestResult {
    use rmlx5_tools::report::{BW_HEADER, LAT_HEADER};
    loopback_up()?;
    let (server_dev, client_dev) = (test_device(0)?.to_string(), test_device(1)?.to_string());
    let runs: [(&str, &[&str], &str); 2] = [
        (
            "18517",
            &[
                "--test",
                "write_bw",
                "--qps",
                "4",
                "--size",
                "4096",
                "--iters",
                "500",
                "--post-list",
                "8",
            ],
            BW_HEADER,
        ),
        (
            "18518",
            &[
                "--test", "send_lat", "--events", "--size", "64", "--iters", "300",
            ],
            LAT_HEADER,
        ),
    ];
    for (port, opts, header) in runs {
        let spawn = |role: &[&str]| {
            Command::new("/bin/rmlx5-perf")
                .args(role)
                .args(["--port", port])
                .args(opts)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("/bin/rmlx5-perf: {e}"))
        };
        let server = spawn(&["--server", "--device", &server_dev])?;
        // The client retries its connection while the server starts.
        let client = spawn(&["--client", "127.0.0.1", "--device", &client_dev])?;
        let limit = Duration::from_secs(120);
        let (c_ok, c_out, c_err) = finish(client, "client", limit)?;
        let (s_ok, s_out, s_err) = finish(server, "server", limit)?;
        ensure!(s_ok, "rmlx5-perf --server {opts:?} failed: {s_err}");
        ensure!(c_ok, "rmlx5-perf --client {opts:?} failed: {c_err}");
        ensure!(
            s_out.contains("server done"),
            "the server {opts:?} did not print \"server done\""
        );
        let mut lines = c_out.lines().skip_while(|l| *l != header);
        let result = lines.nth(1).unwrap_or("");
        let size = opts[opts.iter().position(|o| *o == "--size").unwrap_or(0) + 1];
        let iters = opts[opts.iter().position(|o| *o == "--iters").unwrap_or(0) + 1];
        let fields: Vec<&str> = result.split_whitespace().collect();
        ensure!(
            fields.len() >= 5 && fields[0] == size && fields[1] == iters,
            "the client {opts:?} printed no result line (got {result:?})"
        );
    }
    Ok(())
}

fn main() {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some("--child") => {
            let i = args.next().and_then(|s| s.parse().ok()).unwrap_or(0);
            if let Err(e) = child(i) {
                eprintln!("child {i}: {e}");
                std::process::exit(1);
            }
            return;
        }
        Some("--traffic") => {
            if let Err(e) = traffic_forever() {
                println!("traffic failed: {e}");
            }
            std::process::exit(1);
        }
        _ => {}
    }
    std::process::exit(run_all(&[
        scenario!(verbs::device_and_port_queries),
        scenario!(verbs::send_and_send_imm_across_devices),
        scenario!(verbs::receive_completions_name_the_sender),
        scenario!(verbs::one_device_and_loopback),
        scenario!(verbs::write_write_imm_read_with_sg_lists),
        scenario!(verbs::atomics_plain_and_masked),
        scenario!(verbs::wrap_around_with_inline_and_blueflame),
        scenario!(verbs::selective_signaling),
        scenario!(verbs::fence_and_solicited_flags_reach_the_peer),
        scenario!(verbs::bad_wr_partial_failure),
        scenario!(verbs::error_completions_and_flushes),
        scenario!(verbs::to_error_flushes_receives_and_reset_reuses_the_qp),
        scenario!(verbs::rnr_retries_follow_the_clock),
        scenario!(verbs::cq_destroy_rules),
        scenario!(events::arm_event_ack_rearm_poll),
        scenario!(events::armed_cq_with_a_pending_cqe_fires_at_once),
        scenario!(events::solicited_only),
        scenario!(events::stale_arm_sequence_is_ignored_until_the_event_is_read),
        scenario!(events::destroy_waits_for_acks_then_fails_clearly),
        scenario!(events::destroying_a_cq_takes_back_its_unread_events),
        scenario!(events::async_events_report_qp_errors),
        scenario!(threads::threads_with_their_own_qps),
        scenario!(threads::one_qp_many_posters_one_poller),
        Test {
            name: "epoll_on_channel_fd",
            run: epoll_on_channel_fd,
        },
        Test {
            name: "megabyte_transfers",
            run: megabyte_transfers,
        },
        Test {
            name: "kick_elision_stream",
            run: kick_elision_stream,
        },
        Test {
            name: "processes_at_once",
            run: processes_at_once,
        },
        Test {
            name: "sigkill_mid_traffic",
            run: sigkill_mid_traffic,
        },
        Test {
            name: "pingpong_tool",
            run: pingpong_tool,
        },
        Test {
            name: "perf_two_process",
            run: perf_two_process,
        },
        Test {
            name: "long_run",
            run: long_run,
        },
    ]));
}
