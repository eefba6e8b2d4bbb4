// SPDX-License-Identifier: GPL-2.0

//! Scenario `kill_mid_traffic`, and its helper processes (this program
//! re-executed with `--stress-child poll|event|raw`) that run traffic or
//! churn raw objects until they are SIGKILLed.

use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};
use std::process::{Child, Command as Process, Stdio};
use std::time::{Duration, Instant};

use rmlx5_abi::ioctl::Command;
use rmlx5_abi::uapi::*;
use rmlx5_guest_tests::{ensure, TestResult};

use crate::debugfs::{check_eqs, dump_tables, num_hcas, snapshot, wait_baseline};
use crate::knobs::{scale, Gen};
use crate::sys::{
    anon, err, errno_name, mmap_fd, open_dev, poll_now, raw_call, read_fd, Res, PAGE, RW,
};

/// A line from `fd` (a child's stdout) within `limit`.
fn read_line_within(fd: RawFd, limit: Duration) -> Result<String, String> {
    let start = Instant::now();
    let mut line = Vec::new();
    loop {
        let left = limit.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Err(format!(
                "no line within {limit:?} (got {:?})",
                String::from_utf8_lossy(&line)
            ));
        }
        let rev = poll_now(fd, left.as_millis().min(1000) as i32)
            .map_err(|e| format!("poll: {}", errno_name(e)))?;
        if rev == 0 {
            continue;
        }
        let mut b = [0u8; 1];
        match read_fd(fd, &mut b) {
            Ok(0) => {
                return Err(format!(
                    "the child closed its output (got {:?})",
                    String::from_utf8_lossy(&line)
                ))
            }
            Ok(_) if b[0] == b'\n' => return Ok(String::from_utf8_lossy(&line).into_owned()),
            Ok(_) => line.push(b[0]),
            Err(libc::EINTR) => {}
            Err(e) => return Err(format!("read: {}", errno_name(e))),
        }
    }
}

fn kill_child(c: &mut Child) -> Result<(), String> {
    if let Ok(Some(_)) = c.try_wait() {
        // Already reaped: its pid may belong to someone else now.
        return Ok(());
    }
    let pid = c.id() as libc::pid_t;
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match c.try_wait() {
            Ok(Some(_)) => return Ok(()),
            Ok(None) if Instant::now() > deadline => {
                return Err(format!("child {pid} still alive 10 s after SIGKILL"))
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(format!("wait {pid}: {e}")),
        }
    }
}

const CHILD_MODES: [&str; 3] = ["poll", "event", "raw"];

pub(crate) fn kill_mid_traffic() -> TestResult {
    let sc = scale()?;
    let kills = sc.get_in("kills", 5, 0, 1_000_000)?;
    let seed = sc.seed();
    println!("rmlx5-stress: kill seed={seed}");
    let mut g = Gen::new(seed);
    let n = num_hcas();
    let (d0, d1) = pair()?;
    ensure!(
        n >= 2 || d0 != 0 || d1 != 1,
        "needs rmlx5_0 and rmlx5_1, have {n} HCA(s)"
    );
    let base = snapshot(n)?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let start = Instant::now();
    let mut reclaimed = 0u64;
    let mut leaked = 0u64;
    let mut rounds = 0u64;
    let mut failure = None;
    'rounds: for round in 0..kills {
        let mut children = Vec::new();
        for (i, mode) in CHILD_MODES.iter().enumerate() {
            let child = Process::new(&exe)
                .args(["--stress-child", mode, &g.u64().to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .spawn();
            match child {
                Ok(c) => children.push((i, *mode, c)),
                Err(e) => {
                    failure = Some(format!("round {round}: spawn: {e}"));
                    break;
                }
            }
        }
        // One child in four is killed early, at a random point of its
        // setup; the others once they carry traffic.
        let early = if g.chance(1, 4) {
            Some(g.index(children.len()))
        } else {
            None
        };
        if let Some(e) = early {
            std::thread::sleep(Duration::from_millis(g.below(300)));
            if let Some((_, _, c)) = children.get_mut(e) {
                if let Err(x) = kill_child(c) {
                    failure.get_or_insert(format!("round {round}: {x}"));
                }
            }
        }
        for (i, mode, c) in children.iter_mut() {
            if Some(*i) == early || failure.is_some() {
                continue;
            }
            let fd = c.stdout.as_ref().map_or(-1, |o| o.as_raw_fd());
            match read_line_within(fd, Duration::from_secs(60)) {
                Ok(l) if l == "ready" => {}
                Ok(l) => failure = Some(format!("round {round}: {mode} child said {l:?}")),
                Err(e) => failure = Some(format!("round {round}: {mode} child: {e}")),
            }
        }
        let during = match snapshot(n) {
            Ok(s) => s,
            Err(e) => {
                failure.get_or_insert(e);
                base.clone()
            }
        };
        if failure.is_none() {
            std::thread::sleep(Duration::from_millis(g.below(400)));
        }
        let mut order: Vec<usize> = (0..children.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, g.index(i + 1));
        }
        for i in order {
            if let Some((_, _, c)) = children.get_mut(i) {
                if let Err(x) = kill_child(c) {
                    failure.get_or_insert(format!("round {round}: {x}"));
                }
            }
            std::thread::sleep(Duration::from_millis(g.below(30)));
        }
        rounds += 1;
        reclaimed += during.excess_over(&base);
        let (now, back) = match wait_baseline(&base, n, Duration::from_secs(10)) {
            Ok(r) => r,
            Err(e) => {
                failure.get_or_insert(e);
                break 'rounds;
            }
        };
        if !back {
            leaked += now.excess_over(&base);
            failure.get_or_insert(format!(
                "round {round}: objects left 10 s after the kill: {} (baseline {}){}",
                now.describe(),
                base.describe(),
                dump_tables(n)
            ));
        }
        if failure.is_none() {
            if let Err(e) = check_eqs(n, Duration::from_secs(5)) {
                failure = Some(format!("round {round}: {e}"));
            }
        }
        if failure.is_some() {
            break 'rounds;
        }
    }
    // The HCAs still carry traffic.
    if failure.is_none() && kills > 0 {
        if let Err(e) = short_traffic() {
            failure = Some(format!("traffic after the kills: {e}"));
        }
    }
    println!("@@STRESS kill rounds={rounds} objects_reclaimed={reclaimed} leaked={leaked}");
    println!(
        "rmlx5-stress: kill_mid_traffic took {} ms",
        start.elapsed().as_millis()
    );
    match failure {
        Some(f) => Err(f),
        None => Ok(()),
    }
}

/// The two devices the traffic runs between: `dev0` and `dev1` (default
/// rmlx5_0 and rmlx5_1; in the PCI guest, ConnectX functions, or one
/// function twice).
fn pair() -> Result<(usize, usize), String> {
    let sc = scale()?;
    Ok((
        sc.get_in("dev0", 0, 0, 63)? as usize,
        sc.get_in("dev1", 1, 0, 63)? as usize,
    ))
}

/// The two devices of [`pair`], opened.
fn open_pair() -> Result<[rmlx5::Context; 2], String> {
    let (i, j) = pair()?;
    let devs = rmlx5::devices().map_err(err)?;
    let get = |k: usize| devs.get(k).ok_or(format!("no rmlx5_{k}"));
    Ok([get(i)?.open().map_err(err)?, get(j)?.open().map_err(err)?])
}

/// Two QPs across the pair of devices exchange a few SENDs.
fn short_traffic() -> Res {
    use rmlx5::{Access, ConnectOpts, QpInit, RecvWr, SendOp, SendWr, Wc};
    let [a, b] = open_pair()?;
    let (pa, pb) = (a.alloc_pd().map_err(err)?, b.alloc_pd().map_err(err)?);
    let (ca, cb) = (
        a.create_cq(64, None).map_err(err)?,
        b.create_cq(64, None).map_err(err)?,
    );
    let qa = pa.create_qp(&ca, &ca, &QpInit::default()).map_err(err)?;
    let qb = pb.create_qp(&cb, &cb, &QpInit::default()).map_err(err)?;
    qa.connect(&qb.endpoint(), &ConnectOpts::default())
        .map_err(err)?;
    qb.connect(&qa.endpoint(), &ConnectOpts::default())
        .map_err(err)?;
    let mr = pb.reg_mr(4096, Access::ALL).map_err(err)?;
    let sge = [mr.sge(0, 64).map_err(err)?];
    let mut wc = [Wc::default(); 4];
    for i in 0..10u64 {
        qb.post_recv(&[RecvWr::new(i, &sge)]).map_err(err)?;
        qa.post_send(&[SendWr::inline(i, SendOp::Send, &i.to_le_bytes())])
            .map_err(err)?;
        for (cq, what) in [(&cb, "receive"), (&ca, "send")] {
            let start = Instant::now();
            loop {
                let k = cq.poll(&mut wc).map_err(err)?;
                if k > 0 {
                    ensure!(
                        wc[0].is_ok() && wc[0].wr_id == i,
                        "{what} completion {:?}",
                        wc[0]
                    );
                    break;
                }
                ensure!(
                    start.elapsed() < Duration::from_secs(20),
                    "no {what} completion"
                );
                std::thread::yield_now();
            }
        }
    }
    Ok(())
}

// -- the helper processes of kill_mid_traffic -------------------------------

/// How long a helper lives at most (the parent kills it much earlier; this
/// only bounds a helper whose parent died).
const CHILD_LIFETIME: Duration = Duration::from_secs(180);

pub(crate) fn child_main(mode: &str, seed: u64) -> i32 {
    let r = match mode {
        "poll" => child_traffic(seed, false),
        "event" => child_traffic(seed, true),
        "raw" => child_raw(seed),
        _ => Err(format!("unknown helper mode {mode}")),
    };
    match r {
        Ok(()) => 0,
        Err(e) => {
            println!("error: {e}");
            1
        }
    }
}

fn ready() {
    println!("ready");
    let _ = std::io::stdout().flush();
}

/// Traffic between the pair of devices, rmlx5_0 and rmlx5_1 by default
/// (two QP pairs), and a loopback pair on the first: READs and WRITEs unsignaled, SENDs signaled; in event mode
/// every CQ is on a channel and armed, a third of the events stay
/// unacknowledged, and a thread sleeps in a read of an idle channel.
fn child_traffic(seed: u64, events: bool) -> Res {
    use rmlx5::{Access, ConnectOpts, QpInit, RecvWr, SendFlags, SendOp, SendWr, Wc};
    let mut g = Gen::new(seed);
    let ctxs = open_pair()?;
    let chans = if events {
        vec![
            Some(ctxs[0].create_comp_channel().map_err(err)?),
            Some(ctxs[1].create_comp_channel().map_err(err)?),
        ]
    } else {
        vec![None, None]
    };
    let pds = [
        ctxs[0].alloc_pd().map_err(err)?,
        ctxs[1].alloc_pd().map_err(err)?,
    ];
    let mrs = [
        pds[0].reg_mr(1 << 20, Access::ALL).map_err(err)?,
        pds[1].reg_mr(1 << 20, Access::ALL).map_err(err)?,
    ];
    let init = QpInit {
        max_send_wr: 128,
        max_recv_wr: 128,
        ..QpInit::default()
    };
    // (requester side, responder side) per pair; the last is a loopback.
    let sides = [(0usize, 1usize), (1, 0), (0, 0)];
    let mut pairs = Vec::new();
    for (x, y) in sides {
        let cx = ctxs[x].create_cq(512, chans[x].as_ref()).map_err(err)?;
        let cy = ctxs[y].create_cq(512, chans[y].as_ref()).map_err(err)?;
        let qx = pds[x].create_qp(&cx, &cx, &init).map_err(err)?;
        let qy = pds[y].create_qp(&cy, &cy, &init).map_err(err)?;
        qx.connect(&qy.endpoint(), &ConnectOpts::default())
            .map_err(err)?;
        qy.connect(&qx.endpoint(), &ConnectOpts::default())
            .map_err(err)?;
        if events {
            cx.req_notify(false).map_err(err)?;
            cy.req_notify(false).map_err(err)?;
        }
        pairs.push((x, y, cx, cy, qx, qy));
    }
    if events {
        let idle_ch = ctxs[1].create_comp_channel().map_err(err)?;
        let idle_cq = ctxs[1].create_cq(16, Some(&idle_ch)).map_err(err)?;
        idle_cq.req_notify(false).map_err(err)?;
        std::thread::spawn(move || {
            let _keep = idle_cq;
            let _ = idle_ch.get_cq_event();
        });
        for ch in chans.iter().flatten() {
            ch.set_nonblocking(true).map_err(err)?;
        }
    }
    let start = Instant::now();
    let mut wc = [Wc::default(); 32];
    let mut i = 0u64;
    while start.elapsed() < CHILD_LIFETIME {
        for (x, y, cx, cy, qx, qy) in &pairs {
            let rs = [mrs[*y].sge(0, 4096).map_err(err)?];
            let _ = qy.post_recv(&[RecvWr::new(i, &rs)]);
            let len = 1 + g.index(60_000);
            let write = [mrs[*x].sge(65536, len).map_err(err)?];
            let read = [mrs[*x].sge(1 << 19, 4096).map_err(err)?];
            let remote = mrs[*y].remote(65536).map_err(err)?;
            let wrs = [
                SendWr::new(i, SendOp::Read(remote), &read).with_flags(SendFlags::NONE),
                SendWr::new(i, SendOp::Write(remote), &write).with_flags(SendFlags::NONE),
                SendWr::inline(i, SendOp::Send, b"stress"),
            ];
            let _ = qx.post_send(&wrs);
            if events {
                for (side, cq) in [(*x, cx), (*y, cy)] {
                    let Some(ch) = chans[side].as_ref() else {
                        continue;
                    };
                    if let Ok(ev) = ch.get_cq_event() {
                        // A third of the events stay unacknowledged.
                        if g.below(3) != 0 {
                            ev.ack_events(1);
                        }
                        let _ = ev.req_notify(false);
                    }
                    let _ = cq.poll(&mut wc);
                }
            } else {
                let _ = cx.poll(&mut wc);
                let _ = cy.poll(&mut wc);
            }
        }
        if i == 8 {
            ready();
        }
        i += 1;
    }
    Ok(())
}

/// Raw objects of one context: channels, the async file, CQs, QPs (some
/// in RTS with garbage kicked), pinned MRs, mappings, a thread blocked in
/// a channel read; then churn until killed.
fn child_raw(seed: u64) -> Res {
    let mut g = Gen::new(seed);
    let (d0, d1) = pair()?;
    let dev = if g.chance(1, 2) { d0 } else { d1 };
    // The port's LID, where the QPs below point (a software HCA's is its
    // index + 1, a function's what its firmware says).
    let lid = rmlx5::devices()
        .map_err(err)?
        .get(dev)
        .ok_or(format!("no rmlx5_{dev}"))?
        .open()
        .map_err(err)?
        .query_port(1)
        .map_err(err)?
        .lid;
    let fd = open_dev(u32::try_from(dev).map_err(|e| e.to_string())?)?;
    let e = |what: &str, e: i32| format!("{what}: {}", errno_name(e));
    let ch = raw_call(
        fd,
        Command::CreateCompChannel,
        &CreateCompChannel::default(),
    )
    .map_err(|x| e("channel", x))?
    .fd;
    raw_call(fd, Command::GetAsyncFd, &GetAsyncFd::default()).map_err(|x| e("async", x))?;
    let pd = raw_call(fd, Command::AllocPd, &AllocPd::default())
        .map_err(|x| e("pd", x))?
        .pd_handle;
    let mem = anon(64 * PAGE, RW)?;
    let mut qps = Vec::new();
    for i in 0..8u32 {
        let cq = raw_call(
            fd,
            Command::CreateCq,
            &CreateCq {
                user_handle: u64::from(i),
                cqe: 64,
                channel_fd: if i % 2 == 0 { ch } else { -1 },
                ..CreateCq::default()
            },
        )
        .map_err(|x| e("cq", x))?;
        mmap_fd(
            fd,
            cq.buf_mmap_offset,
            cq.buf_size as usize,
            RW,
            libc::MAP_SHARED,
        )
        .map_err(|x| e("map cq", x))?;
        let k = Kick {
            kind: KICK_CQ_ARM,
            handle: cq.cq_handle,
            ..Kick::default()
        };
        let _ = raw_call(fd, Command::Kick, &k);
        let qp = raw_call(
            fd,
            Command::CreateQp,
            &CreateQp {
                pd_handle: pd,
                send_cq_handle: cq.cq_handle,
                recv_cq_handle: cq.cq_handle,
                qp_type: QPT_RC,
                max_send_wr: 32,
                max_recv_wr: 32,
                max_send_sge: 2,
                max_recv_sge: 2,
                ..CreateQp::default()
            },
        )
        .map_err(|x| e("qp", x))?;
        mmap_fd(
            fd,
            qp.buf_mmap_offset,
            qp.buf_size as usize,
            RW,
            libc::MAP_SHARED,
        )
        .map_err(|x| e("map qp", x))?;
        raw_call(
            fd,
            Command::RegMr,
            &RegMr {
                addr: mem as u64,
                length: 64 * PAGE as u64,
                iova: mem as u64,
                pd_handle: pd,
                access: ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE,
                ..RegMr::default()
            },
        )
        .map_err(|x| e("mr", x))?;
        qps.push(qp);
    }
    // Pairs of QPs to RTS, connected to each other, and kicked.
    for (i, q) in qps.iter().enumerate() {
        let peer = qps.get(i ^ 1).map_or(q.qpn, |p| p.qpn);
        for m in [
            ModifyQp {
                qp_handle: q.qp_handle,
                attr_mask: QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS,
                qp_state: QPS_INIT,
                port_num: 1,
                qp_access_flags: ACCESS_REMOTE_WRITE,
                ..ModifyQp::default()
            },
            ModifyQp {
                qp_handle: q.qp_handle,
                attr_mask: QP_STATE
                    | QP_AV
                    | QP_PATH_MTU
                    | QP_DEST_QPN
                    | QP_RQ_PSN
                    | QP_MAX_DEST_RD_ATOMIC
                    | QP_MIN_RNR_TIMER,
                qp_state: QPS_RTR,
                dlid: lid,
                path_mtu: MTU_4096,
                dest_qp_num: peer,
                min_rnr_timer: 1,
                ..ModifyQp::default()
            },
            ModifyQp {
                qp_handle: q.qp_handle,
                attr_mask: QP_STATE
                    | QP_TIMEOUT
                    | QP_RETRY_CNT
                    | QP_RNR_RETRY
                    | QP_SQ_PSN
                    | QP_MAX_QP_RD_ATOMIC,
                qp_state: QPS_RTS,
                timeout: 14,
                retry_cnt: 7,
                rnr_retry: 7,
                ..ModifyQp::default()
            },
        ] {
            raw_call(fd, Command::ModifyQp, &m).map_err(|x| e("modify", x))?;
        }
        let k = Kick {
            kind: KICK_SEND,
            handle: q.qp_handle,
            uar_offset: q.bf_offset,
            ..Kick::default()
        };
        let _ = raw_call(fd, Command::Kick, &k);
    }
    std::thread::spawn(move || {
        let mut b = [0u8; 8];
        // SAFETY: a blocking read into a local buffer.
        unsafe { libc::fcntl(ch, libc::F_SETFL, 0) };
        let _ = read_fd(ch, &mut b);
    });
    ready();
    let start = Instant::now();
    while start.elapsed() < CHILD_LIFETIME {
        let _ = raw_call(fd, Command::AllocPd, &AllocPd::default()).map(|a| {
            raw_call(
                fd,
                Command::DeallocPd,
                &Destroy {
                    handle: a.pd_handle,
                    ..Destroy::default()
                },
            )
        });
        let k = Kick {
            kind: KICK_CQ_ARM,
            handle: 1 + g.below32(8),
            ..Kick::default()
        };
        let _ = raw_call(fd, Command::Kick, &k);
        if let Ok(c) = raw_call(
            fd,
            Command::CreateCq,
            &CreateCq {
                cqe: 1 + g.below32(512),
                channel_fd: -1,
                ..CreateCq::default()
            },
        ) {
            let _ = raw_call(
                fd,
                Command::DestroyCq,
                &Destroy {
                    handle: c.cq_handle,
                    ..Destroy::default()
                },
            );
        }
    }
    Ok(())
}
