// SPDX-License-Identifier: GPL-2.0

//! Scenario `no_lost_event`: poster threads and consumer threads on one
//! completion channel, accounted in the `Ledger`.

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmlx5_guest_tests::TestResult;

use crate::debugfs::{check_eqs, num_hcas, snapshot, wait_baseline};
use crate::knobs::{scale, Gen};
use crate::sys::{err, errno_name, poll_now};

/// Accounting of no_lost_event, shared by the posters and consumers.
struct Ledger {
    /// Per poster and side (0 send, 1 receive): completions seen, by
    /// sequence number.
    seen: Vec<[Vec<AtomicU64>; 2]>,
    /// Per poster and side: how many were seen.
    count: Vec<[AtomicU64; 2]>,
    seen_total: AtomicU64,
    /// Per CQ: arms requested, events read, completions polled.
    arms: Vec<AtomicU64>,
    events: Vec<AtomicU64>,
    polled: Vec<AtomicU64>,
    problems: Mutex<Vec<String>>,
    failed: AtomicBool,
}

impl Ledger {
    fn new(posts: &[u64], cqs: usize) -> Ledger {
        let bitmap = |n: u64| (0..n.div_ceil(64)).map(|_| AtomicU64::new(0)).collect();
        Ledger {
            seen: posts.iter().map(|n| [bitmap(*n), bitmap(*n)]).collect(),
            count: posts
                .iter()
                .map(|_| [AtomicU64::new(0), AtomicU64::new(0)])
                .collect(),
            seen_total: AtomicU64::new(0),
            arms: (0..cqs).map(|_| AtomicU64::new(0)).collect(),
            events: (0..cqs).map(|_| AtomicU64::new(0)).collect(),
            polled: (0..cqs).map(|_| AtomicU64::new(0)).collect(),
            problems: Mutex::new(Vec::new()),
            failed: AtomicBool::new(false),
        }
    }

    fn problem(&self, s: String) {
        self.failed.store(true, Ordering::Release);
        if let Ok(mut p) = self.problems.lock() {
            if p.len() < 20 {
                p.push(s);
            }
        }
    }

    /// A completion of poster `t`, side `side`, sequence `seq` was polled
    /// from CQ `cq`; false (and a problem) if it was seen before or was
    /// never posted.
    fn mark(&self, cq: usize, t: usize, side: usize, seq: u64) -> bool {
        let Some(word) = self
            .seen
            .get(t)
            .and_then(|s| s.get(side))
            .and_then(|b| b.get((seq / 64) as usize))
        else {
            self.problem(format!(
                "CQ {cq}: completion of poster {t} side {side} seq {seq} that was never posted"
            ));
            return false;
        };
        let m = 1u64 << (seq % 64);
        if word.fetch_or(m, Ordering::AcqRel) & m != 0 {
            self.problem(format!(
                "CQ {cq}: completion of poster {t} side {side} seq {seq} polled twice"
            ));
            return false;
        }
        if let Some(c) = self.count.get(t).and_then(|c| c.get(side)) {
            c.fetch_add(1, Ordering::AcqRel);
        }
        if let Some(p) = self.polled.get(cq) {
            p.fetch_add(1, Ordering::Relaxed);
        }
        self.seen_total.fetch_add(1, Ordering::AcqRel);
        true
    }

    /// About to arm CQ `cq`.
    fn arm(&self, cq: usize) {
        if let Some(a) = self.arms.get(cq) {
            a.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// An event of CQ `cq` was read: there must be an arm it answers.
    fn event(&self, cq: usize) -> bool {
        let (Some(e), Some(a)) = (self.events.get(cq), self.arms.get(cq)) else {
            return false;
        };
        let events = e.fetch_add(1, Ordering::AcqRel) + 1;
        let arms = a.load(Ordering::Acquire);
        if events > arms {
            self.problem(format!(
                "CQ {cq}: event {events} after only {arms} arm(s): an event without an arm"
            ));
            return false;
        }
        true
    }

    /// Completions of poster `t` both sides have seen.
    fn done(&self, t: usize) -> u64 {
        self.count.get(t).map_or(0, |c| {
            c[0].load(Ordering::Acquire)
                .min(c[1].load(Ordering::Acquire))
        })
    }

    fn sum(v: &[AtomicU64]) -> u64 {
        v.iter().map(|x| x.load(Ordering::Acquire)).sum()
    }
}

/// The consumer loop: wait for the channel, read an event, acknowledge,
/// re-arm, poll the CQ until it is empty.
fn consumer(
    ch: rmlx5::CompChannel,
    cqs: Vec<rmlx5::Cq>,
    qpns: Arc<BTreeMap<u32, (usize, usize)>>,
    ledger: Arc<Ledger>,
    stop: Arc<AtomicBool>,
) {
    use rmlx5::{Wc, WcFlags};
    let fd = ch.fd().as_raw_fd();
    let mut wc = [Wc::default(); 32];
    while !stop.load(Ordering::Acquire) {
        match poll_now(fd, 50) {
            Ok(r) if r & libc::POLLIN != 0 => {}
            Ok(_) | Err(libc::EINTR) => continue,
            Err(e) => {
                ledger.problem(format!("poll of the channel: {}", errno_name(e)));
                return;
            }
        }
        let cq = match ch.get_cq_event() {
            Ok(cq) => cq,
            Err(rmlx5::Error::WouldBlock) => continue,
            Err(e) => {
                ledger.problem(format!("get_cq_event: {e}"));
                return;
            }
        };
        let Some(c) = cqs.iter().position(|x| x.same(&cq)) else {
            ledger.problem(format!("an event of an unknown CQ {:#x}", cq.cqn()));
            return;
        };
        ledger.event(c);
        cq.ack_events(1);
        ledger.arm(c);
        if let Err(e) = cq.req_notify(false) {
            ledger.problem(format!("CQ {c}: req_notify: {e}"));
            return;
        }
        loop {
            let k = match cq.poll(&mut wc) {
                Ok(k) => k,
                Err(e) => {
                    ledger.problem(format!("CQ {c}: poll: {e}"));
                    return;
                }
            };
            if k == 0 {
                break;
            }
            for w in wc.iter().take(k) {
                let Some(&(t, side)) = qpns.get(&w.qp_num) else {
                    ledger.problem(format!("CQ {c}: completion of unknown QPN {:#x}", w.qp_num));
                    continue;
                };
                let seq = w.wr_id & 0xffff_ffff;
                let good = w.is_ok()
                    && (w.wr_id >> 32) as usize == t
                    && (side == 0
                        || (w.flags.contains(WcFlags::WITH_IMM) && w.imm_data == seq as u32));
                if !good {
                    ledger.problem(format!(
                        "CQ {c}: poster {t} side {side}: bad completion {w:?}"
                    ));
                }
                ledger.mark(c, t, side, seq);
            }
        }
    }
}

/// How long a side may make no progress before the scenario fails.
const STALL: Duration = Duration::from_secs(30);

/// A poster: keeps at most `window` of its messages outstanding, posting
/// the receives then SEND_IMMs and WRITE_IMMs, all signaled, in lists of
/// 1 to 8.
#[expect(clippy::too_many_arguments)]
fn poster(
    t: usize,
    posts: u64,
    window: u64,
    s: Arc<rmlx5::Qp>,
    r: Arc<rmlx5::Qp>,
    rsge: rmlx5::Sge,
    remote: rmlx5::RemoteAddr,
    seed: u64,
    ledger: Arc<Ledger>,
    stop: Arc<AtomicBool>,
) {
    use rmlx5::{RecvWr, SendOp, SendWr};
    let mut g = Gen::new(seed);
    let mut seq = 0u64;
    let mut last_progress = Instant::now();
    let mut last_done = 0;
    while seq < posts && !stop.load(Ordering::Acquire) {
        let done = ledger.done(t);
        if done != last_done {
            last_done = done;
            last_progress = Instant::now();
        }
        let room = window.saturating_sub(seq - done.min(seq));
        if room == 0 {
            if last_progress.elapsed() > STALL {
                ledger.problem(format!(
                    "poster {t}: no completion for {STALL:?} with {} outstanding (seq {seq})",
                    seq - done
                ));
                return;
            }
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        let n = (1 + g.below(8)).min(room).min(posts - seq);
        let sges = [rsge];
        let recvs: Vec<RecvWr<'_>> = (0..n)
            .map(|i| RecvWr::new(((t as u64) << 32) | (seq + i), &sges))
            .collect();
        if let Err(e) = r.post_recv(&recvs) {
            ledger.problem(format!("poster {t}: post_recv: {e}"));
            return;
        }
        let payloads: Vec<[u8; 8]> = (0..n).map(|i| (seq + i).to_le_bytes()).collect();
        let sends: Vec<SendWr<'_>> = (0..n)
            .map(|i| {
                let q = seq + i;
                let wr = ((t as u64) << 32) | q;
                let op = if q.is_multiple_of(2) {
                    SendOp::SendImm(q as u32)
                } else {
                    SendOp::WriteImm(remote.offset((q % 64) * 8), q as u32)
                };
                SendWr::inline(wr, op, payloads.get(i as usize).map_or(&[][..], |p| &p[..]))
            })
            .collect();
        if let Err(e) = s.post_send(&sends) {
            ledger.problem(format!("poster {t}: post_send: {e}"));
            return;
        }
        seq += n;
    }
}

pub(crate) fn no_lost_event() -> TestResult {
    use rmlx5::{Access, ConnectOpts, QpInit};
    let sc = scale()?;
    let completions = sc.get("completions", 200_000).clamp(2, 1 << 32);
    let threads = sc.get_in("threads", 4, 1, 64)? as usize;
    let ncq = sc.get_in("cqs", 4, 1, 256)? as usize;
    let seed = sc.seed();
    let total_posts = completions / 2;
    let posts: Vec<u64> = (0..threads as u64)
        .map(|t| total_posts / threads as u64 + u64::from(t < total_posts % threads as u64))
        .collect();
    const WINDOW: u32 = 32;
    let n = num_hcas();
    check_eqs(n, Duration::from_secs(5)).map_err(|e| format!("before the scenario: {e}"))?;
    let base = snapshot(n)?;
    // dev=N: the device (default rmlx5_0; a ConnectX function in the PCI
    // guest).
    let dev = sc.get_in("dev", 0, 0, 63)? as usize;
    let devs = rmlx5::devices().map_err(err)?;
    let ctx = devs
        .get(dev)
        .ok_or(format!("no rmlx5_{dev}"))?
        .open()
        .map_err(err)?;
    let ch = ctx.create_comp_channel().map_err(err)?;
    ch.set_nonblocking(true).map_err(err)?;
    let depth = (2 * WINDOW as usize * (threads.div_ceil(ncq) + 1))
        .next_power_of_two()
        .clamp(256, 65536) as u32;
    let cqs: Vec<rmlx5::Cq> = (0..ncq)
        .map(|_| ctx.create_cq(depth, Some(&ch)))
        .collect::<Result<_, _>>()
        .map_err(err)?;
    let pd = ctx.alloc_pd().map_err(err)?;
    let mr = pd.reg_mr(threads * 4096, Access::ALL).map_err(err)?;
    let init = QpInit {
        max_send_wr: WINDOW,
        max_recv_wr: WINDOW,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
        ..QpInit::default()
    };
    let mut qpns = BTreeMap::new();
    let mut pairs = Vec::new();
    for t in 0..threads {
        let (a, b) = (&cqs[t % ncq], &cqs[(t + 1) % ncq]);
        let s = Arc::new(pd.create_qp(a, a, &init).map_err(err)?);
        let r = Arc::new(pd.create_qp(b, b, &init).map_err(err)?);
        s.connect(&r.endpoint(), &ConnectOpts::default())
            .map_err(err)?;
        r.connect(&s.endpoint(), &ConnectOpts::default())
            .map_err(err)?;
        qpns.insert(s.qpn(), (t, 0usize));
        qpns.insert(r.qpn(), (t, 1usize));
        pairs.push((s, r));
    }
    let qpns = Arc::new(qpns);
    let ledger = Arc::new(Ledger::new(&posts, ncq));
    let stop = Arc::new(AtomicBool::new(false));
    for (c, cq) in cqs.iter().enumerate() {
        ledger.arm(c);
        cq.req_notify(false).map_err(err)?;
    }
    // inject=P: kmalloc fails with P% probability (failslab, set up by
    // tests/guest/stress.sh to call stacks through rmlx5) from now until
    // the traffic stops: event delivery must not need an allocation.
    let inject = sc.get_in("inject", 0, 0, 100)?;
    let failslab = |p: u64| -> TestResult {
        std::fs::write("/sys/kernel/debug/failslab/probability", format!("{p}\n"))
            .map_err(|e| format!("failslab probability {p}: {e}"))
    };
    // failslab's `times` counts down once per injected failure.
    let failslab_times = || -> u64 {
        std::fs::read_to_string("/sys/kernel/debug/failslab/times")
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0)
    };
    let times_at_start = failslab_times();
    if inject > 0 {
        failslab(inject)?;
    }
    let start = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..threads {
        let (ch, cqs, qpns, ledger, stop) = (
            ch.clone(),
            cqs.clone(),
            qpns.clone(),
            ledger.clone(),
            stop.clone(),
        );
        handles.push(std::thread::spawn(move || {
            consumer(ch, cqs, qpns, ledger, stop)
        }));
    }
    let mut g = Gen::new(seed);
    for (t, (s, r)) in pairs.iter().enumerate() {
        let rsge = mr.sge(t * 4096, 64).map_err(err)?;
        let remote = mr.remote(t * 4096 + 2048).map_err(err)?;
        let (s, r, ledger, stop) = (s.clone(), r.clone(), ledger.clone(), stop.clone());
        let (p, sd) = (posts.get(t).copied().unwrap_or(0), g.u64());
        handles.push(std::thread::spawn(move || {
            poster(
                t,
                p,
                u64::from(WINDOW),
                s,
                r,
                rsge,
                remote,
                sd,
                ledger,
                stop,
            )
        }));
    }
    // Watch: done, failed, or no progress for STALL.
    let expected = total_posts * 2;
    let mut last = 0;
    let mut last_progress = Instant::now();
    let mut stalled = false;
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let seen = ledger.seen_total.load(Ordering::Acquire);
        if seen >= expected || ledger.failed.load(Ordering::Acquire) {
            break;
        }
        if seen != last {
            last = seen;
            last_progress = Instant::now();
        } else if last_progress.elapsed() > STALL {
            stalled = true;
            break;
        }
    }
    let elapsed = start.elapsed();
    stop.store(true, Ordering::Release);
    // The positive control: with the same injection, CQ creation (which
    // allocates in rmlx5) must see ENOMEM, so that failures injected
    // during the traffic (as few as zero: the event path does not
    // allocate) are not few because failslab never reached rmlx5.
    let mut control = None;
    if inject > 0 {
        println!(
            "@@STRESS failslab_traffic injected={}",
            times_at_start.saturating_sub(failslab_times())
        );
        const CREATES: u32 = 200;
        let mut enomem = 0u32;
        let mut other = Vec::new();
        for _ in 0..CREATES {
            match ctx.create_cq(16, None) {
                Ok(cq) => drop(cq),
                Err(e) if e.errno() == libc::ENOMEM => enomem += 1,
                Err(e) => other.push(e.to_string()),
            }
        }
        failslab(0)?;
        println!("@@STRESS failslab_control creates={CREATES} enomem={enomem}");
        control = Some((enomem, other));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut stuck = 0;
    for h in handles {
        while !h.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if h.is_finished() {
            let _ = h.join();
        } else {
            stuck += 1;
        }
    }
    // Completions still in the CQs never got an event that made a
    // consumer poll them.
    let mut left = vec![0u64; ncq];
    if stuck == 0 {
        let mut wc = [rmlx5::Wc::default(); 32];
        for (c, cq) in cqs.iter().enumerate() {
            while let Ok(k) = cq.poll(&mut wc) {
                if k == 0 {
                    break;
                }
                if let Some(l) = left.get_mut(c) {
                    *l += k as u64;
                }
            }
        }
    }
    let seen = ledger.seen_total.load(Ordering::Acquire);
    let events = Ledger::sum(&ledger.events);
    let arms = Ledger::sum(&ledger.arms);
    let lost = expected.saturating_sub(seen);
    println!("@@STRESS events completions={seen} events={events} arms={arms} lost={lost}");
    println!(
        "rmlx5-stress: no_lost_event: {seen} of {expected} completions in {} ms, {threads} posters \
         and consumers, {ncq} CQs of {depth} on one channel, seed {seed}",
        elapsed.as_millis()
    );
    let per_cq: Vec<String> = (0..ncq)
        .map(|c| {
            let get = |v: &[AtomicU64]| v.get(c).map_or(0, |x| x.load(Ordering::Acquire));
            format!(
                "CQ {c} (cqn {:#x}): arms {} events {} polled {} left {}",
                cqs.get(c).map_or(0, |q| q.cqn()),
                get(&ledger.arms),
                get(&ledger.events),
                get(&ledger.polled),
                left.get(c).copied().unwrap_or(0)
            )
        })
        .collect();
    let mut why = Vec::new();
    if let Ok(p) = ledger.problems.lock() {
        why.extend(p.iter().cloned());
    }
    if stalled {
        why.push(format!("no completion seen for {STALL:?}"));
    }
    if let Err(e) = check_eqs(n, Duration::from_secs(2)) {
        why.push(e);
    }
    if stuck > 0 {
        why.push(format!("{stuck} thread(s) did not stop within 20 s"));
    }
    if let Some((enomem, other)) = control {
        if enomem == 0 {
            why.push(
                "failslab control: no CQ creation failed, injection never reached rmlx5".into(),
            );
        }
        if !other.is_empty() {
            why.push(format!(
                "failslab control: errors other than ENOMEM: {other:?}"
            ));
        }
    }
    if lost > 0 {
        why.push(format!(
            "{lost} completion(s) never polled by the event loop"
        ));
    }
    for c in 0..ncq {
        let a = ledger.arms.get(c).map_or(0, |x| x.load(Ordering::Acquire));
        let e = ledger
            .events
            .get(c)
            .map_or(0, |x| x.load(Ordering::Acquire));
        if e > a || a > e + 1 {
            why.push(format!("CQ {c}: {a} arms but {e} events"));
        }
    }
    // Tear down (every event was acknowledged), then back to the baseline.
    drop(pairs);
    drop(cqs);
    drop(ch);
    drop(mr);
    drop(pd);
    drop(ctx);
    if stuck == 0 {
        let (now, back) = wait_baseline(&base, n, Duration::from_secs(10))?;
        if !back {
            why.push(format!(
                "objects left after teardown: {} (baseline {})",
                now.describe(),
                base.describe()
            ));
        }
    }
    if why.is_empty() {
        Ok(())
    } else {
        Err(format!("{}; {}", why.join("; "), per_cq.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ledger_counts_and_catches_doubles() {
        let l = Ledger::new(&[3, 100], 2);
        assert!(l.mark(0, 0, 0, 0));
        assert!(l.mark(0, 0, 1, 0));
        assert_eq!(l.done(0), 1);
        assert!(l.mark(1, 1, 0, 99));
        assert!(!l.failed.load(Ordering::Acquire));
        // Seen twice, or never posted.
        assert!(!l.mark(0, 0, 0, 0));
        assert!(l.failed.load(Ordering::Acquire));
        assert!(!l.mark(0, 0, 0, 64 * 2));
        assert!(!l.mark(0, 5, 0, 0));
        assert_eq!(l.seen_total.load(Ordering::Acquire), 3);
        let l = Ledger::new(&[1], 1);
        l.arm(0);
        assert!(l.event(0));
        // A second event for one arm.
        assert!(!l.event(0));
        assert_eq!(l.problems.lock().unwrap().len(), 1);
        assert_eq!(Ledger::sum(&l.events), 2);
    }
}
