// SPDX-License-Identifier: GPL-2.0

//! rmlx5-perf's two-process mode, run as a server thread and a client
//! thread of this process over TCP on 127.0.0.1, on the two software HCAs
//! of one in-process fabric (what `--model` uses): the server on
//! `rmlx5_0`, the client on `rmlx5_1`.
//!
//! A third thread calls `SoftFabric::progress` every millisecond: it plays
//! the kernel module's clock timer, which runs RNR and transport retries
//! when they become due (in-process, the fabric otherwise only runs when a
//! thread rings a doorbell).

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rmlx5::SoftFabric;
use rmlx5_tools::remote::{
    pattern, run_client, run_server, seq_byte, Outcome, Params, Test, CONNECT_RETRY,
};
use rmlx5_tools::report::{BW_HEADER, LAT_HEADER};

/// One pair at a time: the sides busy-poll, and the machine may have two
/// CPUs.
static SERIAL: Mutex<()> = Mutex::new(());

struct Fabric {
    fabric: Arc<SoftFabric>,
    stop: Arc<AtomicBool>,
    ticker: Option<JoinHandle<()>>,
    _serial: MutexGuard<'static, ()>,
}

impl Fabric {
    fn new() -> Fabric {
        let serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let fabric = SoftFabric::new(2).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (f, s) = (fabric.clone(), stop.clone());
        let ticker = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                f.progress();
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        Fabric {
            fabric,
            stop,
            ticker: Some(ticker),
            _serial: serial,
        }
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
    }
}

type Side = Result<(Outcome, String), String>;

/// Runs a server with `sp` and a client with `cp`; returns both results
/// with what each printed.
fn pair(sp: &Params, cp: &Params) -> (Side, Side) {
    let f = Fabric::new();
    let devs = f.fabric.devices();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (d0, sp) = (devs[0].clone(), sp.clone());
    let server = std::thread::spawn(move || {
        let mut out = Vec::new();
        run_server(listener, &d0, &sp, &mut out).map(|o| (o, String::from_utf8(out).unwrap()))
    });
    let (d1, cp) = (devs[1].clone(), cp.clone());
    let client = std::thread::spawn(move || {
        let mut out = Vec::new();
        run_client("127.0.0.1", port, CONNECT_RETRY, &d1, &cp, &mut out)
            .map(|o| (o, String::from_utf8(out).unwrap()))
    });
    let c = client.join().unwrap();
    let s = server.join().unwrap();
    (s, c)
}

/// Both sides with the same parameters; both must succeed.
fn ok_pair(p: &Params) -> ((Outcome, String), (Outcome, String)) {
    let (s, c) = pair(p, p);
    let s = s.unwrap_or_else(|e| panic!("server {:?}: {}", p, e));
    let c = c.unwrap_or_else(|e| panic!("client {:?}: {}", p, e));
    assert!(s.1.contains("server done"), "{}", s.1);
    (s, c)
}

/// The values of the result line under `header` in `out`.
fn result_line<'a>(out: &'a str, header: &str) -> Vec<&'a str> {
    let mut lines = out.lines();
    assert!(lines.any(|l| l == header), "no result header in:\n{}", out);
    lines.next().unwrap().split_whitespace().collect()
}

fn lat(test: Test, size: usize, iters: u64, events: bool) -> Params {
    Params {
        size,
        iters,
        events,
        ..Params::new(test)
    }
}

fn bw(test: Test, qps: u32, post_list: u64, iters: u64) -> Params {
    Params {
        size: 512,
        iters,
        qps,
        post_list,
        ..Params::new(test)
    }
}

/// Signaled WRs per QP: one in `cq_mod`, and the last.
fn signaled(iters: u64, cq_mod: u64) -> u64 {
    (0..iters)
        .filter(|id| (id + 1) % cq_mod == 0 || id + 1 == iters)
        .count() as u64
}

fn check_latency(p: &Params) {
    let ((so, sout), (co, cout)) = ok_pair(p);
    let v = result_line(&cout, LAT_HEADER);
    assert_eq!(v.len(), 9, "{}", cout);
    assert_eq!(v[0], p.size.to_string());
    assert_eq!(v[1], p.iters.to_string());
    // t_min <= t_typical <= t_max, as fixed-point text.
    let us = |s: &str| -> u64 { s.replace('.', "").parse().unwrap() };
    assert!(us(v[2]) <= us(v[4]) && us(v[4]) <= us(v[3]), "{}", cout);
    assert!(!sout.contains(LAT_HEADER), "the server prints no result");
    assert!(sout.contains(match p.test {
        Test::SendLat => "Send Latency Test",
        _ => "RDMA_Write Latency Test",
    }));
    assert_eq!(co.samples as u64, p.iters);
    assert_eq!(so.samples, 0);
    for o in [&so, &co] {
        assert_eq!(o.per_qp, vec![p.iters]);
        assert_eq!(o.send_cqes, p.iters);
        let recv = if p.test == Test::SendLat { p.iters } else { 0 };
        assert_eq!(o.recv_cqes, recv);
    }
    assert_eq!(so.local, co.remote);
    assert_eq!(co.local, so.remote);
    assert_ne!(so.local[0].lid, co.local[0].lid);
    // What landed last on each side is the other side's bytes; in
    // write_lat ending with the last iteration's sequence byte.
    let mut from_client = pattern(p.size, false, 0);
    let mut from_server = pattern(p.size, true, 0);
    if p.test == Test::WriteLat {
        let last = seq_byte(p.iters - 1);
        from_client[p.size - 1] = last;
        from_server[p.size - 1] = last;
    }
    assert_eq!(so.received[0], from_client);
    assert_eq!(co.received[0], from_server);
}

fn check_bw(p: &Params) {
    let ((so, sout), (co, cout)) = ok_pair(p);
    let v = result_line(&cout, BW_HEADER);
    assert_eq!(v.len(), 5, "{}", cout);
    assert_eq!(v[0], p.size.to_string());
    assert_eq!(v[1], p.iters.to_string(), "#iterations is per QP");
    assert!(v[3].parse::<u64>().is_err() && v[3].contains('.'));
    assert!(sout.contains(&format!("Number of qps   : {}", p.qps)));
    let qps = p.qps as usize;
    assert_eq!(co.per_qp, vec![p.iters; qps]);
    assert_eq!(
        co.send_cqes,
        signaled(p.iters, p.cq_mod()) * u64::from(p.qps)
    );
    assert_eq!(co.recv_cqes, 0);
    assert_eq!(so.local.len(), qps);
    assert_eq!(so.local, co.remote);
    if p.test == Test::SendBw {
        assert_eq!(so.per_qp, vec![p.iters; qps]);
        assert_eq!(so.recv_cqes, p.iters * u64::from(p.qps));
    } else {
        assert_eq!(so.recv_cqes, 0);
    }
    // Every QP's buffer on the server holds that QP's bytes of the client.
    for (q, got) in so.received.iter().enumerate() {
        assert_eq!(got, &pattern(p.size, false, q), "QP {}", q);
    }
}

#[test]
fn send_lat_polling_inline_and_not() {
    check_latency(&lat(Test::SendLat, 64, 300, false));
    check_latency(&lat(Test::SendLat, 4096, 200, false));
}

#[test]
fn send_lat_events() {
    check_latency(&lat(Test::SendLat, 64, 200, true));
    check_latency(&lat(Test::SendLat, 4096, 100, true));
}

#[test]
fn write_lat_polling_inline_and_not() {
    // 600 iterations: the sequence byte wraps (255 values).
    check_latency(&lat(Test::WriteLat, 8, 600, false));
    check_latency(&lat(Test::WriteLat, 4096, 200, false));
}

#[test]
fn write_lat_events() {
    check_latency(&lat(Test::WriteLat, 8, 200, true));
    check_latency(&lat(Test::WriteLat, 4096, 100, true));
}

#[test]
fn write_bw_post_lists_and_qps() {
    for (qps, list) in [(1, 1), (1, 32), (16, 1), (16, 32)] {
        check_bw(&bw(Test::WriteBw, qps, list, 1000));
    }
}

#[test]
fn send_bw_post_lists_and_qps() {
    // 1500 per QP: more than the 512 receives the server posts up front,
    // so it has to keep restocking its RQs.
    for (qps, list) in [(1, 1), (1, 32), (16, 1), (16, 32)] {
        check_bw(&bw(Test::SendBw, qps, list, 1500));
    }
}

#[test]
fn bw_events_and_explicit_cq_mod() {
    let mut p = bw(Test::SendBw, 4, 32, 700);
    p.events = true;
    p.cq_mod = Some(8);
    check_bw(&p);
    let mut p = bw(Test::WriteBw, 4, 1, 700);
    p.events = true;
    p.tx_depth = Some(16);
    check_bw(&p);
}

#[test]
fn parameter_mismatch_is_refused_on_both_sides() {
    let sp = bw(Test::WriteBw, 4, 1, 100);
    let mut cp = sp.clone();
    cp.size = 1024;
    cp.events = true;
    let (s, c) = pair(&sp, &cp);
    let s = s.unwrap_err();
    let c = c.unwrap_err();
    for e in [&s, &c] {
        assert!(
            e.contains("parameter mismatch")
                && e.contains("size: client 1024, server 512")
                && e.contains("events: client 1, server 0"),
            "{}",
            e
        );
    }
    assert!(c.contains("the server refused the parameters"), "{}", c);
    let mut cp = sp.clone();
    cp.test = Test::SendBw;
    let (s, c) = pair(&sp, &cp);
    assert!(s
        .unwrap_err()
        .contains("test: client send_bw, server write_bw"));
    assert!(c
        .unwrap_err()
        .contains("test: client send_bw, server write_bw"));
}

#[test]
fn latency_tests_refuse_several_qps() {
    let f = Fabric::new();
    let devs = f.fabric.devices();
    let mut p = lat(Test::SendLat, 64, 10, false);
    p.qps = 2;
    let mut out = Vec::new();
    let e = run_client("127.0.0.1", 1, Duration::ZERO, &devs[1], &p, &mut out).unwrap_err();
    assert!(e.contains("--qps 2") && e.contains("one QP pair"), "{}", e);
}

#[test]
fn client_without_server_gives_up_after_the_retry_window() {
    let f = Fabric::new();
    let devs = f.fabric.devices();
    // A port nothing listens on.
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let retry = Duration::from_millis(1500);
    let t = Instant::now();
    let mut out = Vec::new();
    let e = run_client(
        "127.0.0.1",
        port,
        retry,
        &devs[1],
        &lat(Test::WriteLat, 8, 10, false),
        &mut out,
    )
    .unwrap_err();
    let took = t.elapsed();
    assert!(
        e.contains(&format!("connect to 127.0.0.1:{}", port)),
        "{}",
        e
    );
    assert!(
        took >= retry && took < retry + Duration::from_secs(3),
        "{:?}",
        took
    );
}

#[test]
fn server_finds_a_vanished_client() {
    // A client that connects, sends a valid hello and goes away: the
    // server must fail, naming the step, instead of hanging.
    use std::io::{BufRead, BufReader, Write};
    let f = Fabric::new();
    let devs = f.fabric.devices();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let p = bw(Test::SendBw, 2, 1, 100);
    let (d0, sp) = (devs[0].clone(), p.clone());
    let server = std::thread::spawn(move || {
        let mut out = Vec::new();
        run_server(listener, &d0, &sp, &mut out)
    });
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let hello = format!(
        "RMLX5-PERF 1 test=send_bw size=512 iters=100 qps=2 post_list=1 cq_mod={} events=0\n",
        p.cq_mod()
    );
    s.write_all(hello.as_bytes()).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "OK\n");
    drop(r);
    drop(s);
    let e = server.join().unwrap().unwrap_err();
    assert!(e.contains("exchange QP addresses"), "{}", e);
}
