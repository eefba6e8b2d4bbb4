// SPDX-License-Identifier: GPL-2.0

//! rmlx5-perf's two-process mode: one side per process, like perftest.
//!
//! The server ([`run_server`]) listens on TCP, the client ([`run_client`])
//! connects to it. Over that connection, in text lines:
//!
//! 1. the client sends its parameters (`RMLX5-PERF 1 test=... size=...
//!    iters=... qps=... post_list=... cq_mod=... events=...`); the server
//!    answers `OK`, or `ERR <why>` if they differ from its own, and both
//!    fail;
//! 2. the server sends one `QP <i> LID .. QPN .. ADDR .. RKEY ..` line per
//!    QP, then the client sends its own;
//! 3. both connect their QPs to the peer's, post the receives the test
//!    starts with, arm their CQs in event mode, and exchange `READY` (the
//!    barrier);
//! 4. both measure; then the client sends `DONE` and the server answers
//!    `DONE` once its own part is over, so neither tears its QPs down while
//!    the other still uses them.
//!
//! A side that fails after the connection is up sends `ERR <why>` before
//! closing, so the other side stops with that message instead of hanging:
//! while it busy-polls it peeks at the connection every so often.
//!
//! The tests do what perftest 4.5's do (ib_send_lat, ib_write_lat,
//! ib_send_bw, ib_write_bw):
//!
//! - `send_lat`: both sides keep one receive posted; the client SENDs, the
//!   server waits for the receive completion and SENDs back, the client
//!   waits for its receive completion. Every SEND is signaled and its
//!   completion polled before waiting for the receive. The client times
//!   each round trip and reports half of it. Inline up to the QP's inline
//!   size. In event mode the receive waits sleep on the completion channel
//!   (get the event, acknowledge it, re-arm, poll); the send completions
//!   are polled.
//! - `write_lat`: a ping-pong of RDMA WRITEs with memory polling. Each side
//!   writes `size` bytes into the peer's buffer whose last byte is a
//!   sequence byte (non-zero, different from one iteration to the next);
//!   the receiving side spins on the last byte of its own buffer until it
//!   holds the expected value, then writes back. Every WRITE is signaled
//!   and its completion waited for. In event mode only that wait sleeps on
//!   the channel: the arrival of the peer's WRITE raises no completion, so
//!   it is always detected by polling memory.
//! - `send_bw`, `write_bw`: the client keeps up to `tx_depth` WRs
//!   outstanding on each QP, posts them in lists of `post_list`, QP after
//!   QP, signals one WR in `cq_mod` (and the last of each QP), and polls
//!   the one send CQ all QPs share. `iters` is per QP. For `send_bw` the
//!   server keeps every RQ stocked and polls its receive CQ until it has
//!   all `iters * qps` messages; for `write_bw` it only waits for `DONE`.
//!   In event mode the client sleeps on the channel when no QP has room
//!   for another list, and the `send_bw` server whenever its receive CQ is
//!   empty.

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use rmlx5::{
    Access, CompChannel, ConnectOpts, Context, Cq, Device, Endpoint, Mr, Qp, QpInit, RecvWr,
    RemoteAddr, SendFlags, SendOp, SendWr, Sge, Wc, WcOpcode,
};

use crate::report::{self, Bw, LINE};

/// perftest's default TCP port.
pub const DEFAULT_PORT: u16 = 18515;

/// How long a client keeps trying to reach the server.
pub const CONNECT_RETRY: Duration = Duration::from_secs(10);

/// Inline bytes asked of the QPs of the latency tests (perftest's write
/// latency default).
pub const MAX_INLINE: u32 = 220;

/// Receives kept posted per QP by the `send_bw` server (perftest's
/// default receive depth).
pub const BW_RX_DEPTH: u32 = 512;

/// Empty polls between two looks at the control connection.
const PEER_CHECK: u32 = 1 << 16;

/// Highest `--qps` (a software HCA has 16,384 QPs; each side makes one
/// QP and one MR per pair on its device).
pub const MAX_QPS: u32 = 16384;

/// Version word of the handshake line.
const HELLO: &str = "RMLX5-PERF 1";

/// The tests of the two-process mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Test {
    /// `send_lat` (ib_send_lat).
    SendLat,
    /// `write_lat` (ib_write_lat).
    WriteLat,
    /// `send_bw` (ib_send_bw).
    SendBw,
    /// `write_bw` (ib_write_bw).
    WriteBw,
}

impl Test {
    /// The test named `s` (`--test`).
    ///
    /// # Errors
    ///
    /// An unknown name, or `read_lat` (in-process only).
    pub fn parse(s: &str) -> Result<Test, String> {
        match s {
            "send_lat" => Ok(Test::SendLat),
            "write_lat" => Ok(Test::WriteLat),
            "send_bw" => Ok(Test::SendBw),
            "write_bw" => Ok(Test::WriteBw),
            "read_lat" => Err("read_lat runs in-process only (without --server/--client)".into()),
            t => Err(format!(
                "unknown test {} (send_lat, write_lat, send_bw, write_bw)",
                t
            )),
        }
    }

    /// The `--test` name.
    pub fn name(self) -> &'static str {
        match self {
            Test::SendLat => "send_lat",
            Test::WriteLat => "write_lat",
            Test::SendBw => "send_bw",
            Test::WriteBw => "write_bw",
        }
    }

    /// A latency test.
    pub fn is_latency(self) -> bool {
        matches!(self, Test::SendLat | Test::WriteLat)
    }

    fn is_send(self) -> bool {
        matches!(self, Test::SendLat | Test::SendBw)
    }

    fn title(self) -> &'static str {
        match self {
            Test::SendLat => "Send Latency Test",
            Test::WriteLat => "RDMA_Write Latency Test",
            Test::SendBw => "Send BW Test",
            Test::WriteBw => "RDMA_Write BW Test",
        }
    }
}

/// The parameters of a run. The client sends all but `tx_depth` to the
/// server, which refuses to run unless they equal its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Params {
    /// The test.
    pub test: Test,
    /// Message size in bytes (at least 1).
    pub size: usize,
    /// Iterations (per QP for the bandwidth tests).
    pub iters: u64,
    /// QP pairs (1 for the latency tests).
    pub qps: u32,
    /// WRs per `post_send` call (bandwidth tests).
    pub post_list: u64,
    /// One signaled WR in this many; `None` for perftest's default: 1 for
    /// the latency tests; for the bandwidth tests the post list if longer
    /// than 1, else 100.
    pub cq_mod: Option<u64>,
    /// Sleep on a completion channel instead of busy polling.
    pub events: bool,
    /// Send WRs outstanding per QP; `None` for 128 (bandwidth) or 1
    /// (latency: one WR is ever outstanding).
    pub tx_depth: Option<u32>,
}

impl Params {
    /// `test` with the defaults: 64 bytes, 1000 iterations, one QP, post
    /// lists of 1, polling.
    pub fn new(test: Test) -> Params {
        Params {
            test,
            size: 64,
            iters: 1000,
            qps: 1,
            post_list: 1,
            cq_mod: None,
            events: false,
            tx_depth: None,
        }
    }

    /// The send depth per QP.
    pub fn tx_depth(&self) -> u32 {
        self.tx_depth
            .unwrap_or(if self.test.is_latency() { 1 } else { 128 })
    }

    /// The CQ moderation in effect (at most the send depth).
    pub fn cq_mod(&self) -> u64 {
        let m = match self.cq_mod {
            Some(m) => m,
            None if self.test.is_latency() => 1,
            None if self.post_list > 1 => self.post_list,
            None => 100,
        };
        m.clamp(1, u64::from(self.tx_depth()))
    }

    /// Checks the parameters.
    ///
    /// # Errors
    ///
    /// What is wrong, naming the option.
    pub fn check(&self) -> Result<(), String> {
        if self.size == 0 || self.size > 1 << 30 {
            return Err(format!("--size {}: must be 1 to 2^30 bytes", self.size));
        }
        if self.iters == 0 || self.iters > u64::from(u32::MAX) {
            return Err(format!("--iters {}: must be 1 to {}", self.iters, u32::MAX));
        }
        if self.qps == 0 || self.qps > MAX_QPS {
            return Err(format!("--qps {}: must be 1 to {}", self.qps, MAX_QPS));
        }
        if self.test.is_latency() && self.qps != 1 {
            return Err(format!(
                "--qps {}: the latency tests run on exactly one QP pair",
                self.qps
            ));
        }
        if self.test.is_latency() && self.post_list != 1 {
            return Err("--post-list: post lists are for the bandwidth tests only".into());
        }
        if self.tx_depth() == 0 {
            return Err("--tx-depth 0: must be at least 1".into());
        }
        if self.post_list == 0 || self.post_list > u64::from(self.tx_depth()) {
            return Err(format!(
                "--post-list {}: must be 1 to the TX depth ({})",
                self.post_list,
                self.tx_depth()
            ));
        }
        match self.cq_mod {
            Some(0) => return Err("--cq-mod 0: must be at least 1".into()),
            Some(m) if self.post_list > 1 && !self.post_list.is_multiple_of(m) => {
                return Err(format!(
                    "--post-list {} must be a multiple of --cq-mod {} (as in perftest)",
                    self.post_list, m
                ))
            }
            _ => {}
        }
        Ok(())
    }

    /// The values both sides must agree on, as (name, value).
    fn wire(&self) -> Vec<(&'static str, String)> {
        vec![
            ("test", self.test.name().to_string()),
            ("size", self.size.to_string()),
            ("iters", self.iters.to_string()),
            ("qps", self.qps.to_string()),
            ("post_list", self.post_list.to_string()),
            ("cq_mod", self.cq_mod().to_string()),
            ("events", u8::from(self.events).to_string()),
        ]
    }

    fn hello(&self) -> String {
        let kv: Vec<String> = self
            .wire()
            .into_iter()
            .map(|(k, v)| format!("{}={}", k, v))
            .collect();
        format!("{} {}", HELLO, kv.join(" "))
    }

    /// Compares a client's hello line with these parameters.
    fn compare(&self, line: &str) -> Result<(), String> {
        let rest = line
            .strip_prefix(HELLO)
            .ok_or_else(|| format!("not an rmlx5-perf client (it sent {:?})", line))?;
        let theirs: Vec<(&str, &str)> = rest
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .collect();
        let mut diff = Vec::new();
        for (k, mine) in self.wire() {
            let t = theirs.iter().find(|(tk, _)| *tk == k).map(|(_, v)| *v);
            if t != Some(mine.as_str()) {
                diff.push(format!(
                    "{}: client {}, server {}",
                    k,
                    t.unwrap_or("(missing)"),
                    mine
                ));
            }
        }
        if diff.is_empty() {
            Ok(())
        } else {
            Err(format!("parameter mismatch: {}", diff.join("; ")))
        }
    }
}

/// Where a QP is and how its buffer is reached: what the sides exchange
/// per QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpAddr {
    /// The port's LID.
    pub lid: u32,
    /// The QP number.
    pub qpn: u32,
    /// The address of the QP's buffer (its MR).
    pub addr: u64,
    /// The buffer's remote key.
    pub rkey: u32,
}

impl QpAddr {
    fn line(&self, i: usize) -> String {
        format!(
            "QP {} LID {} QPN {} ADDR {:#x} RKEY {:#x}",
            i, self.lid, self.qpn, self.addr, self.rkey
        )
    }

    fn parse(line: &str, i: usize) -> Result<QpAddr, String> {
        let bad = || format!("bad QP line {:?} (expected QP {})", line, i);
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.len() != 10
            || w[0] != "QP"
            || w[1] != i.to_string()
            || w[2] != "LID"
            || w[4] != "QPN"
            || w[6] != "ADDR"
            || w[8] != "RKEY"
        {
            return Err(bad());
        }
        let hex = |s: &str| {
            s.strip_prefix("0x")
                .and_then(|h| u64::from_str_radix(h, 16).ok())
        };
        Ok(QpAddr {
            lid: w[3].parse().map_err(|_| bad())?,
            qpn: w[5].parse().map_err(|_| bad())?,
            addr: hex(w[7]).ok_or_else(bad)?,
            rkey: hex(w[9])
                .and_then(|v| u32::try_from(v).ok())
                .ok_or_else(bad)?,
        })
    }
}

/// The bytes a side sends on QP `qp`: a pattern that differs between the
/// sides and between QPs (in `write_lat` the last byte is replaced by the
/// iteration's sequence byte).
pub fn pattern(size: usize, from_server: bool, qp: usize) -> Vec<u8> {
    let base = if from_server { 101u8 } else { 1 };
    (0..size)
        .map(|k| {
            (k as u8)
                .wrapping_mul(13)
                .wrapping_add((qp as u8).wrapping_mul(7))
                .wrapping_add(base)
        })
        .collect()
}

/// The `write_lat` sequence byte of iteration `i`: never 0 (the buffers
/// start zeroed) and never the same twice in a row.
pub fn seq_byte(i: u64) -> u8 {
    u8::try_from(i % 255).unwrap_or(0) + 1
}

/// What one side did, for callers that check a run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// This side's QPs.
    pub local: Vec<QpAddr>,
    /// The peer's QPs.
    pub remote: Vec<QpAddr>,
    /// Iterations finished per QP: round trips (latency), WRs completed
    /// (bandwidth client), messages received (`send_bw` server).
    pub per_qp: Vec<u64>,
    /// Completions polled from the send CQ.
    pub send_cqes: u64,
    /// Completions polled from the receive CQ.
    pub recv_cqes: u64,
    /// Latency samples taken (client of a latency test).
    pub samples: usize,
    /// Per QP, after the run: the `size` bytes the peer's data landed in
    /// (the receive half of a latency test's buffer, the whole buffer of a
    /// bandwidth test).
    pub received: Vec<Vec<u8>>,
}

/// The control connection.
struct Ctl {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Ctl {
    fn new(s: TcpStream) -> Result<Ctl, String> {
        s.set_nodelay(true)
            .map_err(|e| format!("control connection: {}", e))?;
        let w = s
            .try_clone()
            .map_err(|e| format!("control connection: {}", e))?;
        Ok(Ctl {
            r: BufReader::new(s),
            w,
        })
    }

    fn send(&mut self, line: &str, step: &str) -> Result<(), String> {
        self.w
            .write_all(format!("{}\n", line).as_bytes())
            .map_err(|e| format!("{}: send to the peer: {}", step, e))
    }

    /// The next line; the peer's `ERR` line or a closed connection is an
    /// error naming `step`.
    fn recv(&mut self, step: &str) -> Result<String, String> {
        let mut line = String::new();
        match self.r.read_line(&mut line) {
            Ok(0) => Err(format!("{}: the peer closed the connection", step)),
            Ok(_) => {
                let l = line.trim_end().to_string();
                match l.strip_prefix("ERR ") {
                    Some(why) => Err(format!("{}: the peer failed: {}", step, why)),
                    None => Ok(l),
                }
            }
            Err(e) => Err(format!("{}: receive from the peer: {}", step, e)),
        }
    }

    fn expect(&mut self, word: &str, step: &str) -> Result<(), String> {
        let l = self.recv(step)?;
        if l == word {
            Ok(())
        } else {
            Err(format!(
                "{}: expected {:?} from the peer, got {:?}",
                step, word, l
            ))
        }
    }

    /// Tells the peer why this side gives up (best effort).
    fn fail(&mut self, why: &str) {
        let _ = self.send(&format!("ERR {}", why.replace('\n', " ")), "");
    }

    /// Without blocking: an error if the peer has closed the connection or
    /// reported a failure. Anything else it sent stays unread.
    /// Counts one empty poll in `idle` and looks at the connection every
    /// [`PEER_CHECK`] of them.
    fn idle_poll(&self, idle: &mut u32, step: &str) -> Result<(), String> {
        *idle += 1;
        if *idle == PEER_CHECK {
            *idle = 0;
            self.check_peer(step)?;
        }
        Ok(())
    }

    fn check_peer(&self, step: &str) -> Result<(), String> {
        let buffered = self.r.buffer();
        if !buffered.is_empty() {
            return match buffered.strip_prefix(b"ERR ") {
                Some(why) => Err(format!(
                    "{}: the peer failed: {}",
                    step,
                    String::from_utf8_lossy(why).trim_end()
                )),
                None => Ok(()),
            };
        }
        let s = self.r.get_ref();
        s.set_nonblocking(true)
            .map_err(|e| format!("{}: control connection: {}", step, e))?;
        let mut b = [0u8; 256];
        let r = s.peek(&mut b);
        let _ = s.set_nonblocking(false);
        match r {
            Ok(0) => Err(format!("{}: the peer closed the connection", step)),
            Ok(n) => match b[..n].strip_prefix(b"ERR ") {
                Some(why) => Err(format!(
                    "{}: the peer failed: {}",
                    step,
                    String::from_utf8_lossy(why).trim_end()
                )),
                None => Ok(()),
            },
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                Ok(())
            }
            Err(e) => Err(format!("{}: control connection: {}", step, e)),
        }
    }
}

/// One side's verbs objects. Field order is drop order: QPs before their
/// MRs and CQs, the context last.
struct Side {
    qps: Vec<Qp>,
    mrs: Vec<Mr>,
    scq: Cq,
    rcq: Cq,
    channel: Option<CompChannel>,
    ctx: Context,
    /// Send WRs outstanding per QP.
    depth: u64,
    /// Receives kept posted per QP (`send_bw` server).
    rx: u64,
    /// Send small messages inline (latency tests).
    inline: bool,
}

impl Side {
    fn open(dev: &Device, p: &Params, server: bool) -> Result<Side, String> {
        let e = |what: &str, err: rmlx5::Error| format!("{}: {}: {}", dev.name(), what, err);
        let ctx = dev.open().map_err(|x| e("open", x))?;
        let pd = ctx.alloc_pd().map_err(|x| e("alloc_pd", x))?;
        let channel = if p.events {
            Some(
                ctx.create_comp_channel()
                    .map_err(|x| e("create_comp_channel", x))?,
            )
        } else {
            None
        };
        let lat = p.test.is_latency();
        let tx = p.tx_depth();
        let rx = match p.test {
            Test::SendBw if server => BW_RX_DEPTH,
            Test::SendLat => 4,
            _ => 1,
        };
        let init = QpInit {
            max_send_wr: tx,
            max_recv_wr: rx,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: if lat { MAX_INLINE } else { 0 },
            ..QpInit::default()
        };
        let cqe = |per: u32| {
            per.checked_mul(p.qps)
                .and_then(|n| n.checked_add(1))
                .ok_or_else(|| format!("{}: CQ too large", dev.name()))
        };
        let scq = ctx
            .create_cq(cqe(tx)?, channel.as_ref())
            .map_err(|x| e("create_cq (send)", x))?;
        let rcq = ctx
            .create_cq(cqe(rx)?, channel.as_ref())
            .map_err(|x| e("create_cq (receive)", x))?;
        // A latency test's buffer has a send half and a receive half.
        let mr_len = if lat { 2 * p.size } else { p.size };
        let mut qps = Vec::new();
        let mut mrs = Vec::new();
        for q in 0..p.qps as usize {
            let qp = pd
                .create_qp(&scq, &rcq, &init)
                .map_err(|x| e(&format!("create_qp {}", q), x))?;
            let mr = pd
                .reg_mr(mr_len.max(64), Access::ALL)
                .map_err(|x| e(&format!("reg_mr {}", q), x))?;
            mr.write(0, &pattern(p.size, server, q))
                .map_err(|x| e("fill the buffer", x))?;
            qps.push(qp);
            mrs.push(mr);
        }
        let depth = u64::from(tx.min(qps[0].max_send_wr()));
        let inline = lat && p.size <= qps[0].max_inline_data() as usize;
        Ok(Side {
            qps,
            mrs,
            scq,
            rcq,
            channel,
            ctx,
            depth,
            rx: u64::from(rx),
            inline,
        })
    }

    fn addrs(&self) -> Vec<QpAddr> {
        self.qps
            .iter()
            .zip(&self.mrs)
            .map(|(qp, mr)| {
                let ep = qp.endpoint();
                QpAddr {
                    lid: ep.lid,
                    qpn: ep.qpn,
                    addr: mr.addr(),
                    rkey: mr.rkey(),
                }
            })
            .collect()
    }

    fn connect(&self, remote: &[QpAddr]) -> Result<(), String> {
        let o = ConnectOpts::default();
        for (i, (qp, r)) in self.qps.iter().zip(remote).enumerate() {
            qp.connect(
                &Endpoint {
                    lid: r.lid,
                    qpn: r.qpn,
                },
                &o,
            )
            .map_err(|e| format!("connect QP {} to LID {} QPN {:#x}: {}", i, r.lid, r.qpn, e))?;
        }
        Ok(())
    }

    fn received(&self, p: &Params) -> Result<Vec<Vec<u8>>, String> {
        let off = if p.test.is_latency() { p.size } else { 0 };
        self.mrs
            .iter()
            .map(|m| m.to_vec(off, p.size).map_err(|e| e.to_string()))
            .collect()
    }
}

fn check_wc(w: &Wc) -> Result<(), String> {
    if w.is_ok() {
        Ok(())
    } else {
        Err(format!(
            "completion of wr_id {:#x} on QPN {:#x} failed: {} (vendor {:#x})",
            w.wr_id,
            w.qp_num,
            w.status.as_str(),
            w.vendor_err
        ))
    }
}

/// Waits until `cq` yields completions and returns how many it put in
/// `wc`: busy polling (looking at the control connection every
/// [`PEER_CHECK`] empty polls), or with `channel` sleeping on completion
/// events. The event loop arms the CQ only after a poll found it empty,
/// then polls once more before sleeping: arming an mlx5 CQ (and ours) while
/// unpolled CQEs lie past the consumer index raises an event at once, which
/// the "wait, ack, re-arm, then poll" order of perftest and ibv_rc_pingpong
/// would do on every iteration (the CQE that woke it is still there when it
/// re-arms) and the next wait would then take for nothing. An event left
/// over from a CQE that landed between the poll and the arm is harmless:
/// the wait after it finds the CQ empty and sleeps again.
fn wait_cq(
    cq: &Cq,
    channel: Option<&CompChannel>,
    wc: &mut [Wc],
    ctl: &Ctl,
) -> Result<usize, String> {
    let mut idle = 0u32;
    let mut armed = false;
    loop {
        let n = cq.poll(wc).map_err(|e| format!("poll_cq: {}", e))?;
        if n > 0 {
            for w in &wc[..n] {
                check_wc(w)?;
            }
            return Ok(n);
        }
        match channel {
            Some(_) if !armed => {
                cq.req_notify(false)
                    .map_err(|e| format!("req_notify: {}", e))?;
                armed = true;
            }
            Some(ch) => {
                let ev = loop {
                    match ch.get_cq_event() {
                        Ok(c) => break c,
                        Err(e)
                            if std::io::Error::from_raw_os_error(e.errno()).kind()
                                == ErrorKind::Interrupted => {}
                        Err(e) => return Err(format!("get_cq_event: {}", e)),
                    }
                };
                ev.ack_events(1);
                armed = false;
            }
            None => {
                ctl.idle_poll(&mut idle, "waiting for a completion")?;
            }
        }
    }
}

/// Waits for exactly one completion of kind `op` on `cq` (nothing else is
/// outstanding there in the latency tests).
fn wait_one_of(
    cq: &Cq,
    channel: Option<&CompChannel>,
    op: WcOpcode,
    ctl: &Ctl,
) -> Result<Wc, String> {
    let mut wc = [Wc::default(); 1];
    wait_cq(cq, channel, &mut wc, ctl)?;
    if wc[0].opcode != op {
        return Err(format!(
            "expected a {:?} completion, got {:?} (wr_id {:#x})",
            op, wc[0].opcode, wc[0].wr_id
        ));
    }
    Ok(wc[0])
}

fn post_recv(qp: &Qp, q: usize, id: u64, sge: &[Sge]) -> Result<(), String> {
    qp.post_recv(&[RecvWr::new((q as u64) << 32 | id, sge)])
        .map_err(|e| format!("post_recv on QP {}: {}", q, e))
}

fn post_one(qp: &Qp, wr: SendWr<'_>) -> Result<(), String> {
    qp.post_send(&[wr]).map_err(|e| format!("post_send: {}", e))
}

struct Run {
    samples: Vec<u128>,
    per_qp: Vec<u64>,
    send_cqes: u64,
    recv_cqes: u64,
    bw: Option<Bw>,
}

/// Posts what the test needs posted before the barrier.
fn prepare(side: &Side, p: &Params, server: bool) -> Result<(), String> {
    match p.test {
        Test::SendLat => {
            let sge = [side.mrs[0].sge(p.size, p.size).map_err(|e| e.to_string())?];
            post_recv(&side.qps[0], 0, 0, &sge)?;
        }
        Test::SendBw if server => {
            for (q, (qp, mr)) in side.qps.iter().zip(&side.mrs).enumerate() {
                let sge = [mr.sge(0, p.size).map_err(|e| e.to_string())?];
                for id in 0..side.rx.min(p.iters) {
                    post_recv(qp, q, id, &sge)?;
                }
            }
        }
        _ => {}
    }
    // Event mode needs no arming here: `wait_cq` arms a CQ when it finds it
    // empty.
    Ok(())
}

fn send_lat(side: &Side, p: &Params, ctl: &Ctl, client: bool) -> Result<Run, String> {
    let (qp, mr, size) = (&side.qps[0], &side.mrs[0], p.size);
    let ssge = [mr.sge(0, size).map_err(|e| e.to_string())?];
    let rsge = [mr.sge(size, size).map_err(|e| e.to_string())?];
    let payload = mr.to_vec(0, size).map_err(|e| e.to_string())?;
    let ch = side.channel.as_ref();
    let mut samples = Vec::with_capacity(if client { p.iters as usize } else { 0 });
    let send = |i: u64| {
        let wr = if side.inline {
            SendWr::inline(i, SendOp::Send, &payload)
        } else {
            SendWr::new(i, SendOp::Send, &ssge)
        };
        post_one(qp, wr)?;
        // Signaled: reap it (polled, also in event mode, as perftest).
        wait_one_of(&side.scq, None, WcOpcode::Send, ctl).map(|_| ())
    };
    let recv = || -> Result<(), String> {
        let w = wait_one_of(&side.rcq, ch, WcOpcode::Recv, ctl)?;
        if w.byte_len as usize != size {
            return Err(format!("received {} bytes, expected {}", w.byte_len, size));
        }
        Ok(())
    };
    for i in 0..p.iters {
        let more = i + 1 < p.iters;
        if client {
            let t = Instant::now();
            send(i)?;
            recv()?;
            samples.push(t.elapsed().as_nanos() / 2);
            if more {
                post_recv(qp, 0, i + 1, &rsge)?;
            }
        } else {
            recv()?;
            if more {
                post_recv(qp, 0, i + 1, &rsge)?;
            }
            send(i)?;
        }
    }
    Ok(Run {
        samples,
        per_qp: vec![p.iters],
        send_cqes: p.iters,
        recv_cqes: p.iters,
        bw: None,
    })
}

/// Spins until the last byte of `mr`'s receive half is `want`.
fn poll_memory(mr: &Mr, off: usize, want: u8, ctl: &Ctl) -> Result<(), String> {
    let mut b = [0u8; 1];
    let mut idle = 0u32;
    loop {
        // An acquire load of the byte the peer's WRITE ends with (the MR
        // is only ever read through atomics: a volatile read that the
        // compiler cannot hoist out of the loop) ...
        mr.read(off, &mut b).map_err(|e| e.to_string())?;
        if b[0] == want {
            // ... and nothing of the payload is read before it.
            fence(Ordering::Acquire);
            return Ok(());
        }
        std::hint::spin_loop();
        ctl.idle_poll(&mut idle, "waiting for the peer's WRITE")?;
    }
}

fn write_lat(
    side: &Side,
    p: &Params,
    ctl: &Ctl,
    client: bool,
    peer: &QpAddr,
) -> Result<Run, String> {
    let (qp, mr, size) = (&side.qps[0], &side.mrs[0], p.size);
    let sge = [mr.sge(0, size).map_err(|e| e.to_string())?];
    let mut payload = mr.to_vec(0, size).map_err(|e| e.to_string())?;
    // The peer's receive half.
    let remote = RemoteAddr {
        addr: peer.addr + size as u64,
        rkey: peer.rkey,
    };
    let flag = 2 * size - 1;
    // Event mode sleeps only for the own WRITE's completion: the peer's
    // WRITE raises no completion here, so its arrival is always found by
    // polling memory.
    let ch = side.channel.as_ref();
    let mut samples = Vec::with_capacity(if client { p.iters as usize } else { 0 });
    let mut write = |i: u64, seq: u8| -> Result<(), String> {
        let wr = if side.inline {
            payload[size - 1] = seq;
            SendWr::inline(i, SendOp::Write(remote), &payload)
        } else {
            mr.write(size - 1, &[seq]).map_err(|e| e.to_string())?;
            SendWr::new(i, SendOp::Write(remote), &sge)
        };
        post_one(qp, wr)?;
        wait_one_of(&side.scq, ch, WcOpcode::RdmaWrite, ctl).map(|_| ())
    };
    for i in 0..p.iters {
        let seq = seq_byte(i);
        if client {
            let t = Instant::now();
            write(i, seq)?;
            poll_memory(mr, flag, seq, ctl)?;
            samples.push(t.elapsed().as_nanos() / 2);
        } else {
            poll_memory(mr, flag, seq, ctl)?;
            write(i, seq)?;
        }
    }
    Ok(Run {
        samples,
        per_qp: vec![p.iters],
        send_cqes: p.iters,
        recv_cqes: 0,
        bw: None,
    })
}

fn bw_client(side: &Side, p: &Params, ctl: &Ctl, remote: &[QpAddr]) -> Result<Run, String> {
    let nq = side.qps.len();
    let iters = p.iters;
    let depth = side.depth;
    let list = p.post_list.clamp(1, depth);
    let cq_mod = p.cq_mod().clamp(1, depth);
    let send = p.test.is_send();
    let sges = side
        .mrs
        .iter()
        .map(|m| m.sge(0, p.size).map(|s| [s]))
        .collect::<Result<Vec<[Sge; 1]>, _>>()
        .map_err(|e| e.to_string())?;
    let ch = side.channel.as_ref();
    let mut posted = vec![0u64; nq];
    let mut done = vec![0u64; nq];
    let mut finished = 0;
    let mut wc = [Wc::default(); 64];
    let mut wrs: Vec<SendWr<'_>> = Vec::with_capacity(list as usize);
    let mut send_cqes = 0u64;
    let mut idle = 0u32;
    // The best rate seen between two polls that found completions, as
    // (messages, nanoseconds).
    let mut peak: Option<(u128, u128)> = None;
    let start = Instant::now();
    let mut last = start;
    while finished < nq {
        let mut room = false;
        for q in 0..nq {
            // perftest's loop: fill this QP's window, list by list.
            while posted[q] < iters {
                let n = list.min(iters - posted[q]);
                if posted[q] - done[q] + n > depth {
                    break;
                }
                room = true;
                wrs.clear();
                for k in 0..n {
                    let id = posted[q] + k;
                    let flags = if (id + 1).is_multiple_of(cq_mod) || id + 1 == iters {
                        SendFlags::SIGNALED
                    } else {
                        SendFlags::NONE
                    };
                    let op = if send {
                        SendOp::Send
                    } else {
                        SendOp::Write(RemoteAddr {
                            addr: remote[q].addr,
                            rkey: remote[q].rkey,
                        })
                    };
                    wrs.push(SendWr::new((q as u64) << 32 | id, op, &sges[q]).with_flags(flags));
                }
                match side.qps[q].post_send(&wrs) {
                    Ok(()) => posted[q] += n,
                    Err(e) => {
                        posted[q] += e.index as u64;
                        if e.error != rmlx5::Error::QueueFull {
                            return Err(format!("post_send on QP {}: {}", q, e));
                        }
                        break;
                    }
                }
            }
        }
        let mut k = side
            .scq
            .poll(&mut wc)
            .map_err(|e| format!("poll_cq: {}", e))?;
        if k == 0 && !room {
            if ch.is_some() {
                k = wait_cq(&side.scq, ch, &mut wc, ctl)?;
            } else {
                ctl.idle_poll(&mut idle, "waiting for send completions")?;
            }
        }
        if k == 0 {
            continue;
        }
        let now = Instant::now();
        let mut new = 0u64;
        for w in &wc[..k] {
            check_wc(w)?;
            let q = usize::try_from(w.wr_id >> 32).unwrap_or(usize::MAX);
            let id = w.wr_id & 0xffff_ffff;
            if q >= nq || id < done[q] || id >= posted[q] {
                return Err(format!("unexpected completion wr_id {:#x}", w.wr_id));
            }
            new += id + 1 - done[q];
            done[q] = id + 1;
            if done[q] == iters {
                finished += 1;
            }
        }
        send_cqes += k as u64;
        let ns = (now - last).as_nanos();
        let better = match peak {
            None => true,
            Some((m, t)) => u128::from(new) * t > m * ns,
        };
        if ns > 0 && better {
            peak = Some((u128::from(new), ns));
        }
        last = now;
    }
    let ns = start.elapsed().as_nanos();
    Ok(Run {
        samples: Vec::new(),
        per_qp: done,
        send_cqes,
        recv_cqes: 0,
        bw: Some(Bw {
            size: p.size,
            iters,
            msgs: iters * nq as u64,
            ns,
            peak,
        }),
    })
}

fn send_bw_server(side: &Side, p: &Params, ctl: &Ctl) -> Result<Run, String> {
    let nq = side.qps.len();
    let sges = side
        .mrs
        .iter()
        .map(|m| m.sge(0, p.size).map(|s| [s]))
        .collect::<Result<Vec<[Sge; 1]>, _>>()
        .map_err(|e| e.to_string())?;
    let ch = side.channel.as_ref();
    let total = p.iters * nq as u64;
    let mut got = vec![0u64; nq];
    let mut rposted = vec![side.rx.min(p.iters); nq];
    let mut all = 0u64;
    let mut wc = [Wc::default(); 64];
    while all < total {
        let k = wait_cq(&side.rcq, ch, &mut wc, ctl)?;
        for w in &wc[..k] {
            let q = usize::try_from(w.wr_id >> 32).unwrap_or(usize::MAX);
            if q >= nq || w.opcode != WcOpcode::Recv {
                return Err(format!(
                    "unexpected {:?} completion wr_id {:#x}",
                    w.opcode, w.wr_id
                ));
            }
            if w.byte_len as usize != p.size {
                return Err(format!(
                    "QP {}: received {} bytes, expected {}",
                    q, w.byte_len, p.size
                ));
            }
            got[q] += 1;
            all += 1;
            // Keep the RQ stocked.
            if rposted[q] < p.iters {
                post_recv(&side.qps[q], q, rposted[q], &sges[q])?;
                rposted[q] += 1;
            }
        }
    }
    Ok(Run {
        samples: Vec::new(),
        per_qp: got,
        send_cqes: 0,
        recv_cqes: total,
        bw: None,
    })
}

fn header(
    out: &mut dyn Write,
    p: &Params,
    side: &Side,
    local: &[QpAddr],
    remote: &[QpAddr],
) -> Result<(), String> {
    let io = |e: std::io::Error| format!("write the header: {}", e);
    let inline = if side.inline {
        side.qps[0].max_inline_data()
    } else {
        0
    };
    writeln!(out, "{}", LINE).map_err(io)?;
    writeln!(out, "                    {}", p.test.title()).map_err(io)?;
    writeln!(
        out,
        " Dual-port       : OFF\t\tDevice         : {}",
        side.ctx.name()
    )
    .map_err(io)?;
    writeln!(out, " Number of qps   : {}\t\tTransport type : IB", p.qps).map_err(io)?;
    writeln!(out, " Connection type : RC\t\tUsing SRQ      : OFF").map_err(io)?;
    writeln!(
        out,
        " TX depth        : {}\t\tPost List      : {}",
        side.depth, p.post_list
    )
    .map_err(io)?;
    writeln!(
        out,
        " CQ Moderation   : {}\t\tMtu            : 4096[B]",
        p.cq_mod().min(side.depth)
    )
    .map_err(io)?;
    writeln!(
        out,
        " Max inline data : {}[B]\t\tData ex. method : Ethernet (TCP)",
        inline
    )
    .map_err(io)?;
    writeln!(
        out,
        " Completion      : {}",
        if p.events { "events" } else { "polling" }
    )
    .map_err(io)?;
    writeln!(out, "{}", LINE).map_err(io)?;
    for (n, list) in [("local", local), ("remote", remote)] {
        for a in list {
            writeln!(
                out,
                " {} address: LID {:#06x} QPN {:#06x} PSN 0x000000 RKey {:#010x} VAddr {:#018x}",
                n, a.lid, a.qpn, a.rkey, a.addr
            )
            .map_err(io)?;
        }
    }
    writeln!(out, "{}", LINE).map_err(io)
}

/// Sets up `side`, connects it to `remote`, posts what the test starts
/// with, prints the header and passes the barrier.
fn start(
    out: &mut dyn Write,
    p: &Params,
    side: &Side,
    ctl: &mut Ctl,
    server: bool,
    local: &[QpAddr],
    remote: &[QpAddr],
) -> Result<(), String> {
    side.connect(remote)?;
    prepare(side, p, server)?;
    header(out, p, side, local, remote)?;
    ctl.send("READY", "barrier")?;
    ctl.expect("READY", "barrier")
}

/// The server side: accepts one client on `listener`, checks that its
/// parameters equal `p`, runs the test on `dev` and prints the header and
/// `server done` to `out`.
///
/// # Errors
///
/// The failing step and why; the client is told (`ERR`) when it is
/// connected.
pub fn run_server(
    listener: TcpListener,
    dev: &Device,
    p: &Params,
    out: &mut dyn Write,
) -> Result<Outcome, String> {
    p.check()?;
    let side = Side::open(dev, p, true)?;
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    writeln!(
        out,
        "\n************************************\n* Waiting for client to connect... *\n************************************\n (TCP port {})",
        port
    )
    .map_err(|e| e.to_string())?;
    let (s, _) = listener
        .accept()
        .map_err(|e| format!("accept a client on port {}: {}", port, e))?;
    drop(listener);
    let mut ctl = Ctl::new(s)?;
    let r = server_session(out, p, &side, &mut ctl);
    if let Err(e) = &r {
        ctl.fail(e);
    }
    r
}

fn server_session(
    out: &mut dyn Write,
    p: &Params,
    side: &Side,
    ctl: &mut Ctl,
) -> Result<Outcome, String> {
    let hello = ctl.recv("handshake")?;
    if let Err(e) = p.compare(&hello) {
        return Err(format!("handshake: {}", e));
    }
    ctl.send("OK", "handshake")?;
    let local = side.addrs();
    for (i, a) in local.iter().enumerate() {
        ctl.send(&a.line(i), "exchange QP addresses")?;
    }
    let mut remote = Vec::new();
    for i in 0..local.len() {
        let l = ctl.recv("exchange QP addresses")?;
        remote.push(QpAddr::parse(&l, i).map_err(|e| format!("exchange QP addresses: {}", e))?);
    }
    start(out, p, side, ctl, true, &local, &remote)?;
    let run = match p.test {
        Test::SendLat => send_lat(side, p, ctl, false),
        Test::WriteLat => write_lat(side, p, ctl, false, &remote[0]),
        Test::SendBw => send_bw_server(side, p, ctl),
        Test::WriteBw => Ok(Run {
            samples: Vec::new(),
            per_qp: vec![0; local.len()],
            send_cqes: 0,
            recv_cqes: 0,
            bw: None,
        }),
    }
    .map_err(|e| format!("{} (server): {}", p.test.name(), e))?;
    ctl.expect("DONE", "final sync")?;
    ctl.send("DONE", "final sync")?;
    let received = side.received(p)?;
    writeln!(out, "server done").map_err(|e| e.to_string())?;
    Ok(Outcome {
        local,
        remote,
        per_qp: run.per_qp,
        send_cqes: run.send_cqes,
        recv_cqes: run.recv_cqes,
        samples: run.samples.len(),
        received,
    })
}

/// Connects to `host:port`, trying again for up to `retry` (the server may
/// start a moment later).
///
/// # Errors
///
/// The last connection error once `retry` has passed, or an unresolvable
/// host.
pub fn connect_retry(host: &str, port: u16, retry: Duration) -> Result<TcpStream, String> {
    let deadline = Instant::now() + retry;
    loop {
        let addrs: Vec<_> = (host, port)
            .to_socket_addrs()
            .map_err(|e| format!("connect to {}:{}: {}", host, port, e))?
            .collect();
        let mut last = None;
        for a in &addrs {
            match TcpStream::connect_timeout(a, Duration::from_secs(1)) {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "connect to {}:{}: {} (gave up after {:?})",
                host,
                port,
                last.map_or_else(|| "no address".to_string(), |e| e.to_string()),
                retry
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The client side: connects to the server at `host:port` (retrying for
/// `retry`), runs the test on `dev` and prints the header and the result
/// lines to `out`.
///
/// # Errors
///
/// The failing step and why; the server is told (`ERR`) when connected.
pub fn run_client(
    host: &str,
    port: u16,
    retry: Duration,
    dev: &Device,
    p: &Params,
    out: &mut dyn Write,
) -> Result<Outcome, String> {
    p.check()?;
    let side = Side::open(dev, p, false)?;
    let s = connect_retry(host, port, retry)?;
    let mut ctl = Ctl::new(s)?;
    let r = client_session(out, p, &side, &mut ctl);
    if let Err(e) = &r {
        ctl.fail(e);
    }
    r
}

fn client_session(
    out: &mut dyn Write,
    p: &Params,
    side: &Side,
    ctl: &mut Ctl,
) -> Result<Outcome, String> {
    ctl.send(&p.hello(), "handshake")?;
    let reply = ctl.recv("handshake").map_err(|e| {
        e.replace(
            "the peer failed: handshake: ",
            "the server refused the parameters: ",
        )
    })?;
    if reply != "OK" {
        return Err(format!("handshake: unexpected answer {:?}", reply));
    }
    let local = side.addrs();
    let mut remote = Vec::new();
    for i in 0..local.len() {
        let l = ctl.recv("exchange QP addresses")?;
        remote.push(QpAddr::parse(&l, i).map_err(|e| format!("exchange QP addresses: {}", e))?);
    }
    for (i, a) in local.iter().enumerate() {
        ctl.send(&a.line(i), "exchange QP addresses")?;
    }
    start(out, p, side, ctl, false, &local, &remote)?;
    let mut run = match p.test {
        Test::SendLat => send_lat(side, p, ctl, true),
        Test::WriteLat => write_lat(side, p, ctl, true, &remote[0]),
        Test::SendBw | Test::WriteBw => bw_client(side, p, ctl, &remote),
    }
    .map_err(|e| format!("{} (client): {}", p.test.name(), e))?;
    ctl.send("DONE", "final sync")?;
    ctl.expect("DONE", "final sync")?;
    match &run.bw {
        Some(bw) => report::bandwidth(out, bw)?,
        None => report::latency(out, p.size, p.iters, &mut run.samples)?,
    }
    Ok(Outcome {
        local,
        remote,
        per_qp: run.per_qp,
        send_cqes: run.send_cqes,
        recv_cqes: run.recv_cqes,
        samples: run.samples.len(),
        received: side.received(p)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_and_qp_lines_round_trip() {
        let mut p = Params::new(Test::WriteBw);
        p.qps = 4;
        p.post_list = 32;
        assert_eq!(p.cq_mod(), 32);
        assert!(p.compare(&p.hello()).is_ok());
        let mut q = p.clone();
        q.size = 4096;
        q.events = true;
        let e = q.compare(&p.hello()).unwrap_err();
        assert!(
            e.contains("size: client 64, server 4096") && e.contains("events: client 0, server 1"),
            "{}",
            e
        );
        assert!(p.compare("GET / HTTP/1.0").is_err());
        let a = QpAddr {
            lid: 2,
            qpn: 0x1234,
            addr: 0x7f00_0000_1000,
            rkey: 0xdead_beef,
        };
        assert_eq!(QpAddr::parse(&a.line(3), 3), Ok(a));
        assert!(QpAddr::parse(&a.line(3), 2).is_err());
    }

    #[test]
    fn checks() {
        let mut p = Params::new(Test::SendLat);
        p.qps = 2;
        assert!(p.check().unwrap_err().contains("exactly one QP"));
        let mut p = Params::new(Test::SendBw);
        p.post_list = 32;
        p.cq_mod = Some(5);
        assert!(p.check().unwrap_err().contains("multiple"));
        p.cq_mod = Some(8);
        assert!(p.check().is_ok());
        assert_eq!(Params::new(Test::WriteBw).cq_mod(), 100);
        assert_eq!(Params::new(Test::WriteLat).tx_depth(), 1);
        assert!(Test::parse("read_lat").is_err());
        assert!((0..600).all(|i| seq_byte(i) != 0 && seq_byte(i) != seq_byte(i + 1)));
    }
}
