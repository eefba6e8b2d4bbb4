// SPDX-License-Identifier: GPL-2.0

//! Guest tests of the `[infinibandevent]` files with real events: the
//! provider's kernel backend creates the objects and produces the
//! completions and async errors (real traffic through the software HCAs),
//! and the checks use the raw descriptors: `read`, `poll`, `epoll`,
//! `O_ASYNC`, and `DESTROY_*` issued on the provider's device file so the
//! kernel's `comp_events_reported` / `async_events_reported` are seen as
//! they are.
//!
//! Handles are `index + 1` per object type and context (the ABI), so in a
//! fresh context the first CQ is handle 1, the second 2, the first QP 1.
//! Objects destroyed here through the raw ioctl are destroyed again by the
//! provider when dropped; that second destroy fails with `EINVAL` and is
//! ignored, and no object is created in a context after that.
//!
//! The loopback tests run on `rmlx5_0`, the pair tests on `rmlx5_0` and
//! `rmlx5_1`, or on the devices `RMLX5_TEST_DEVICES` names
//! (`rmlx5_guest_tests::test_device`).

use std::collections::BTreeSet;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rmlx5::{Access, ConnectOpts, QpInit, RecvWr, RemoteAddr, SendOp, SendWr, Wc};
use rmlx5_abi::ioctl::Command;
use rmlx5_abi::uapi::{self, Destroy};
use rmlx5_guest_tests::raw::{close, errno, poll_fd, read_fd, set_nonblock, Ctx};
use rmlx5_guest_tests::{ensure, run_all, test_device, Test, TestResult};

const SIZE: usize = 4096;
/// How long a test waits for an event that must come.
const WAIT_MS: i32 = 3000;

fn s<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> String {
    move |e| format!("{what}: {e}")
}

/// The descriptors of this process that are open device files.
fn device_fds() -> BTreeSet<RawFd> {
    let mut out = BTreeSet::new();
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        for e in dir.flatten() {
            let Ok(fd) = e.file_name().to_string_lossy().parse::<RawFd>() else {
                continue;
            };
            if std::fs::read_link(e.path())
                .is_ok_and(|p| p.to_string_lossy().starts_with("/dev/rmlx5_uverbs"))
            {
                out.insert(fd);
            }
        }
    }
    out
}

/// Opens the `k`-th test device (`rmlx5_k`, or entry `k` of
/// `RMLX5_TEST_DEVICES`) with the provider and finds the device file
/// descriptor it opened.
fn open(k: usize) -> Result<(rmlx5::Context, RawFd), String> {
    let devs = rmlx5_tools::devices(false)?;
    let index = u64::from(test_device(k)?);
    let before = device_fds();
    let ctx = rmlx5_tools::pick(&devs, index)?.open().map_err(s("open"))?;
    let new: Vec<RawFd> = device_fds().difference(&before).copied().collect();
    match new.as_slice() {
        [fd] => Ok((ctx, *fd)),
        _ => Err(format!("cannot find the context's fd: {new:?}")),
    }
}

/// A raw `DESTROY_*` on the provider's device file `fd`.
fn raw_destroy(fd: RawFd, cmd: Command, handle: u32) -> Result<Destroy, String> {
    // Not ours to close: the provider owns the descriptor.
    let c = ManuallyDrop::new(Ctx { fd });
    c.destroy(cmd, handle)
        .map_err(|e| format!("raw {cmd:?} of handle {handle}: errno {e}"))
}

/// One context with a QP connected to itself: its send CQ (handle 1) and
/// receive CQ (handle 2) report to one completion channel.
struct Loop {
    fd: RawFd,
    ch: rmlx5::CompChannel,
    scq: rmlx5::Cq,
    rcq: rmlx5::Cq,
    qp: rmlx5::Qp,
    mr: rmlx5::Mr,
    ctx: rmlx5::Context,
}

impl Loop {
    fn new(send_cqe: u32) -> Result<Loop, String> {
        let (ctx, fd) = open(0)?;
        let pd = ctx.alloc_pd().map_err(s("alloc_pd"))?;
        let ch = ctx.create_comp_channel().map_err(s("channel"))?;
        let scq = ctx.create_cq(send_cqe, Some(&ch)).map_err(s("scq"))?;
        let rcq = ctx.create_cq(256, Some(&ch)).map_err(s("rcq"))?;
        let init = QpInit {
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 1,
            max_recv_sge: 1,
            user_handle: 0x5150,
            ..QpInit::default()
        };
        let qp = pd.create_qp(&scq, &rcq, &init).map_err(s("create_qp"))?;
        let mr = pd.reg_mr(SIZE, Access::ALL).map_err(s("reg_mr"))?;
        qp.connect(&qp.endpoint(), &ConnectOpts::default())
            .map_err(s("connect"))?;
        Ok(Loop {
            fd,
            ch,
            scq,
            rcq,
            qp,
            mr,
            ctx,
        })
    }

    fn chfd(&self) -> RawFd {
        self.ch.fd().as_raw_fd()
    }

    /// One SEND of 64 bytes to itself (a receive posted first): one
    /// completion on each CQ.
    fn send(&self, id: u64) -> TestResult {
        let sge = [self.mr.sge(0, 64).map_err(s("sge"))?];
        self.qp
            .post_recv(&[RecvWr::new(id, &sge)])
            .map_err(s("post_recv"))?;
        self.qp
            .post_send(&[SendWr::new(id, SendOp::Send, &sge)])
            .map_err(s("post_send"))?;
        Ok(())
    }

    /// Polls `cq` until it returned `n` completions, all successful.
    fn drain(cq: &rmlx5::Cq, n: usize) -> TestResult {
        let deadline = Instant::now() + Duration::from_millis(WAIT_MS as u64);
        let mut wc = [Wc::default(); 16];
        let mut got = 0;
        while got < n {
            let k = cq.poll(&mut wc).map_err(s("poll_cq"))?;
            for w in &wc[..k] {
                ensure!(w.is_ok(), "completion failed: {}", w.status.as_str());
            }
            got += k;
            ensure!(Instant::now() < deadline, "{got} of {n} completions");
        }
        Ok(())
    }

    /// Destroys the QP and both CQs through the raw ioctl; returns the
    /// CQs' answers.
    fn destroy_raw(&self) -> Result<(Destroy, Destroy), String> {
        raw_destroy(self.fd, Command::DestroyQp, 1)?;
        Ok((
            raw_destroy(self.fd, Command::DestroyCq, 1)?,
            raw_destroy(self.fd, Command::DestroyCq, 2)?,
        ))
    }
}

/// Waits until `fd` is readable.
fn wait_readable(fd: RawFd) -> TestResult {
    let re = poll_fd(fd, libc::POLLIN, WAIT_MS).map_err(|e| format!("poll: errno {e}"))?;
    ensure!(
        re & libc::POLLIN != 0,
        "no event within {WAIT_MS} ms ({re:#x})"
    );
    Ok(())
}

/// Reads one completion event; returns the handle.
fn read_comp(fd: RawFd) -> Result<u64, String> {
    let mut b = [0u8; 16];
    let n = read_fd(fd, &mut b).map_err(|e| format!("read: errno {e}"))?;
    ensure!(n == 8, "read returned {n} bytes, want 8");
    let mut h = [0u8; 8];
    h.copy_from_slice(&b[..8]);
    Ok(u64::from_ne_bytes(h))
}

/// Reads one async event: (element, event_type).
fn read_async(fd: RawFd) -> Result<(u64, u32), String> {
    wait_readable(fd)?;
    let mut b = [0u8; 32];
    let n = read_fd(fd, &mut b).map_err(|e| format!("async read: errno {e}"))?;
    ensure!(n == 16, "async read returned {n} bytes, want 16");
    let mut e = [0u8; 8];
    e.copy_from_slice(&b[..8]);
    let mut t = [0u8; 4];
    t.copy_from_slice(&b[8..12]);
    Ok((u64::from_ne_bytes(e), u32::from_ne_bytes(t)))
}

fn expect_empty(fd: RawFd) -> TestResult {
    set_nonblock(fd, true).map_err(|e| format!("nonblock: errno {e}"))?;
    let mut b = [0u8; 16];
    let r = read_fd(fd, &mut b);
    set_nonblock(fd, false).map_err(|e| format!("block: errno {e}"))?;
    ensure!(
        r == Err(libc::EAGAIN),
        "read of an empty file: {r:?}, want EAGAIN"
    );
    ensure!(
        poll_fd(fd, libc::POLLIN, 0) == Ok(0),
        "poll of an empty file is not 0"
    );
    Ok(())
}

/// Two CQs with one event each on one channel: each read returns exactly
/// one 8-byte event even with room for two; a short buffer is EINVAL and
/// leaves the event queued; then EAGAIN; DESTROY_CQ reports the one event
/// each that was read.
fn one_event_per_read() -> TestResult {
    let l = Loop::new(64)?;
    let ch = l.chfd();
    expect_empty(ch)?;
    l.scq.req_notify(false).map_err(s("arm scq"))?;
    l.rcq.req_notify(false).map_err(s("arm rcq"))?;
    l.send(1)?;
    Loop::drain(&l.scq, 1)?;
    Loop::drain(&l.rcq, 1)?;
    wait_readable(ch)?;
    let mut short = [0u8; 7];
    ensure!(
        read_fd(ch, &mut short) == Err(libc::EINVAL),
        "7-byte read: not EINVAL"
    );
    ensure!(
        poll_fd(ch, libc::POLLIN, 0) == Ok(libc::POLLIN),
        "event gone after a short read"
    );
    let mut got = BTreeSet::new();
    got.insert(read_comp(ch)?);
    wait_readable(ch)?;
    got.insert(read_comp(ch)?);
    let want: BTreeSet<u64> = [l.scq.user_handle(), l.rcq.user_handle()].into();
    ensure!(got == want, "events {got:x?}, want {want:x?}");
    expect_empty(ch)?;
    let (d1, d2) = l.destroy_raw()?;
    ensure!(
        d1.comp_events_reported == 1 && d2.comp_events_reported == 1,
        "comp_events_reported {} and {}, want 1 and 1",
        d1.comp_events_reported,
        d2.comp_events_reported
    );
    ensure!(
        d1.async_events_reported == 0 && d2.async_events_reported == 0,
        "async_events_reported not 0"
    );
    Ok(())
}

/// N rounds of arm, traffic, read: DESTROY_CQ reports exactly the events
/// read.
fn comp_events_reported_counts_reads() -> TestResult {
    let l = Loop::new(64)?;
    let ch = l.chfd();
    let rounds = 25;
    for i in 0..rounds {
        l.scq.req_notify(false).map_err(s("arm"))?;
        l.send(i)?;
        Loop::drain(&l.scq, 1)?;
        Loop::drain(&l.rcq, 1)?;
        wait_readable(ch)?;
        // Read through the provider: one 8-byte read of the same file,
        // which also advances the CQ's arm sequence number for the next
        // arm (raw reads would leave it stale).
        let cq = l.ch.get_cq_event().map_err(s("get_cq_event"))?;
        cq.ack_events(1);
        ensure!(
            cq.same(&l.scq),
            "round {i}: event of {:#x}",
            cq.user_handle()
        );
    }
    // An unarmed CQ raises no event.
    l.send(99)?;
    Loop::drain(&l.scq, 1)?;
    Loop::drain(&l.rcq, 1)?;
    expect_empty(ch)?;
    let (d1, d2) = l.destroy_raw()?;
    ensure!(
        d1.comp_events_reported == rounds as u32 && d2.comp_events_reported == 0,
        "comp_events_reported {} and {}, want {rounds} and 0",
        d1.comp_events_reported,
        d2.comp_events_reported
    );
    Ok(())
}

/// epoll is level-triggered: the channel stays ready until read.
fn epoll_level_triggered() -> TestResult {
    let l = Loop::new(64)?;
    let ch = l.chfd();
    // SAFETY: epoll syscalls on descriptors we hold, valid buffers.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    ensure!(ep >= 0, "epoll_create1: errno {}", errno());
    let wait = |ms: i32| -> Result<Vec<(u32, u64)>, String> {
        let mut out = [libc::epoll_event { events: 0, u64: 0 }; 4];
        // SAFETY: `out` holds 4 entries.
        let n = unsafe { libc::epoll_wait(ep, out.as_mut_ptr(), 4, ms) };
        if n < 0 {
            return Err(format!("epoll_wait: errno {}", errno()));
        }
        Ok(out[..n as usize]
            .iter()
            .map(|e| (e.events, e.u64))
            .collect())
    };
    let mut e = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: 42,
    };
    // SAFETY: as above.
    let rc = unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, ch, &mut e) };
    let r = (|| {
        ensure!(rc == 0, "epoll_ctl: errno {}", errno());
        ensure!(wait(0)?.is_empty(), "ready before any event");
        l.scq.req_notify(false).map_err(s("arm"))?;
        l.send(1)?;
        let first = wait(WAIT_MS)?;
        ensure!(
            first.len() == 1 && first[0].1 == 42 && first[0].0 & libc::EPOLLIN as u32 != 0,
            "first epoll_wait: {first:?}"
        );
        for round in 0..3 {
            let again = wait(0)?;
            ensure!(
                again.len() == 1,
                "round {round}: not ready again before read"
            );
        }
        ensure!(read_comp(ch)? == l.scq.user_handle(), "wrong handle");
        ensure!(wait(0)?.is_empty(), "ready after the event was read");
        Ok(())
    })();
    close(ep);
    r
}

/// A blocking read waits, and an event wakes it.
fn blocking_read_woken() -> TestResult {
    let l = Loop::new(64)?;
    let ch = l.chfd();
    l.scq.req_notify(false).map_err(s("arm"))?;
    let start = Instant::now();
    let reader = std::thread::spawn(move || read_comp(ch));
    std::thread::sleep(Duration::from_millis(200));
    ensure!(!reader.is_finished(), "read returned without an event");
    l.send(1)?;
    let h = reader.join().map_err(|_| "reader panicked".to_string())??;
    ensure!(h == l.scq.user_handle(), "woken with {h:#x}");
    ensure!(
        start.elapsed() >= Duration::from_millis(200),
        "read did not block"
    );
    Ok(())
}

extern "C" fn on_alarm(_: libc::c_int) {}

/// A blocking read is interrupted by a signal (EINTR), and the event that
/// comes afterwards is still delivered.
fn read_interrupted_then_event() -> TestResult {
    let l = Loop::new(64)?;
    let ch = l.chfd();
    l.scq.req_notify(false).map_err(s("arm"))?;
    // SAFETY: a handler that does nothing, without SA_RESTART, and a
    // one-shot timer; the default disposition is restored below.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_alarm as *const () as usize;
        libc::sigaction(libc::SIGALRM, &sa, std::ptr::null_mut());
        let t = libc::itimerval {
            it_interval: libc::timeval {
                tv_sec: 0,
                tv_usec: 0,
            },
            it_value: libc::timeval {
                tv_sec: 0,
                tv_usec: 200_000,
            },
        };
        libc::setitimer(libc::ITIMER_REAL, &t, std::ptr::null_mut());
    }
    let mut b = [0u8; 8];
    let r = read_fd(ch, &mut b);
    // SAFETY: restoring the default disposition.
    unsafe { libc::signal(libc::SIGALRM, libc::SIG_DFL) };
    ensure!(r == Err(libc::EINTR), "interrupted read: {r:?}, want EINTR");
    l.send(1)?;
    wait_readable(ch)?;
    ensure!(read_comp(ch)? == l.scq.user_handle(), "wrong handle");
    Ok(())
}

static SIGIO_SEEN: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigio(_: libc::c_int) {
    SIGIO_SEEN.store(true, Ordering::SeqCst);
}

/// F_SETOWN + O_ASYNC: a completion event raises SIGIO.
fn sigio_on_event() -> TestResult {
    let l = Loop::new(64)?;
    let ch = l.chfd();
    SIGIO_SEEN.store(false, Ordering::SeqCst);
    // SAFETY: a handler that only stores to an atomic; fcntl on our fd.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigio as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigaction(libc::SIGIO, &sa, std::ptr::null_mut());
        ensure!(
            libc::fcntl(ch, libc::F_SETOWN, libc::getpid()) == 0,
            "F_SETOWN: errno {}",
            errno()
        );
        let fl = libc::fcntl(ch, libc::F_GETFL);
        ensure!(
            libc::fcntl(ch, libc::F_SETFL, fl | libc::O_ASYNC) == 0,
            "O_ASYNC: errno {}",
            errno()
        );
    }
    let r = (|| {
        std::thread::sleep(Duration::from_millis(50));
        ensure!(!SIGIO_SEEN.load(Ordering::SeqCst), "SIGIO without an event");
        l.scq.req_notify(false).map_err(s("arm"))?;
        l.send(1)?;
        let deadline = Instant::now() + Duration::from_millis(WAIT_MS as u64);
        while !SIGIO_SEEN.load(Ordering::SeqCst) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        ensure!(SIGIO_SEEN.load(Ordering::SeqCst), "no SIGIO");
        ensure!(read_comp(ch)? == l.scq.user_handle(), "wrong handle");
        Ok(())
    })();
    // SAFETY: fcntl on our fd; default SIGIO disposition restored.
    unsafe {
        let fl = libc::fcntl(ch, libc::F_GETFL);
        libc::fcntl(ch, libc::F_SETFL, fl & !libc::O_ASYNC);
        libc::signal(libc::SIGIO, libc::SIG_IGN);
    }
    r
}

/// Destroying a CQ with an unread event removes it: the channel is empty
/// afterwards and the CQ reports 0 events.
fn destroy_removes_unread_event() -> TestResult {
    let l = Loop::new(64)?;
    let ch = l.chfd();
    l.scq.req_notify(false).map_err(s("arm scq"))?;
    l.rcq.req_notify(false).map_err(s("arm rcq"))?;
    l.send(1)?;
    Loop::drain(&l.scq, 1)?;
    Loop::drain(&l.rcq, 1)?;
    // Both events are pending (each CQ's slot is linked at most once).
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS as u64);
    wait_readable(ch)?;
    raw_destroy(l.fd, Command::DestroyQp, 1)?;
    let d1 = raw_destroy(l.fd, Command::DestroyCq, 1)?;
    ensure!(d1.comp_events_reported == 0, "scq reported events");
    // The receive CQ's event may trail the send CQ's; wait until it is in.
    let h = loop {
        if poll_fd(ch, libc::POLLIN, 10) == Ok(libc::POLLIN) {
            break read_comp(ch)?;
        }
        ensure!(Instant::now() < deadline, "rcq event missing");
    };
    ensure!(
        h == l.rcq.user_handle(),
        "read {h:#x}: the destroyed CQ's event is still queued"
    );
    expect_empty(ch)?;
    let d2 = raw_destroy(l.fd, Command::DestroyCq, 2)?;
    ensure!(
        d2.comp_events_reported == 1,
        "rcq reported {}",
        d2.comp_events_reported
    );
    Ok(())
}

/// The channel-close rule: closing the channel file while CQs use it is
/// allowed; the CQs keep completing (events are discarded) and destroy
/// normally.
fn channel_closed_under_cq() -> TestResult {
    let l = Loop::new(64)?;
    let ch = l.chfd();
    l.scq.req_notify(false).map_err(s("arm"))?;
    l.send(1)?;
    Loop::drain(&l.scq, 1)?;
    Loop::drain(&l.rcq, 1)?;
    wait_readable(ch)?;
    // Release the channel file (pending event included) while the CQs
    // still name it. The provider owns the descriptor number, so it is
    // pointed at /dev/null instead of closed under it.
    let null = std::fs::File::open("/dev/null").map_err(s("/dev/null"))?;
    // SAFETY: replaces our descriptor `ch` atomically; the file behind it
    // is released (nothing else holds it).
    let rc = unsafe { libc::dup2(null.as_raw_fd(), ch) };
    ensure!(rc == ch, "dup2: errno {}", errno());
    for i in 0..5 {
        l.scq.req_notify(false).map_err(s("arm after close"))?;
        l.rcq.req_notify(false).map_err(s("arm after close"))?;
        l.send(10 + i)?;
        Loop::drain(&l.scq, 1)?;
        Loop::drain(&l.rcq, 1)?;
    }
    let (d1, d2) = l.destroy_raw()?;
    ensure!(
        d1.comp_events_reported == 0 && d2.comp_events_reported == 0,
        "events reported from a closed channel"
    );
    // The context is still sound: a new context on the device works.
    let c = Ctx::open_test(0)?;
    let pd = c.alloc_pd().map_err(|e| format!("alloc_pd: errno {e}"))?;
    c.destroy(Command::DeallocPd, pd)
        .map_err(|e| format!("dealloc_pd: errno {e}"))?;
    Ok(())
}

/// CQ overrun: a 64-entry send CQ that is never polled gets more signaled
/// sends; the HCA raises CQ_ERROR, delivered on the async file as
/// `EVENT_CQ_ERR` with the CQ's user handle, counted at destroy.
fn async_cq_overrun() -> TestResult {
    let l = Loop::new(64)?;
    ensure!(l.scq.entries() == 64, "scq of {} entries", l.scq.entries());
    let afd = l.ctx.async_fd().map_err(s("async_fd"))?;
    expect_empty(afd)?;
    // Room for all 80 in the queues; nothing is polled. Once the send CQ
    // overruns the model moves the QP to ERR (its later work is flushed),
    // so the completions themselves are not checked.
    for i in 0..80 {
        l.send(i)?;
    }
    let (element, ty) = read_async(afd)?;
    ensure!(
        element == l.scq.user_handle() && ty == uapi::EVENT_CQ_ERR,
        "async event ({element:#x}, {ty}), want ({:#x}, CQ_ERR)",
        l.scq.user_handle()
    );
    // Coalesced: the CQ's later overruns do not queue more events while
    // one is unread, and nothing else is pending for it.
    let mut cq_events = 1;
    set_nonblock(afd, true).map_err(|e| format!("nonblock: errno {e}"))?;
    let mut b = [0u8; 16];
    while read_fd(afd, &mut b).is_ok() {
        let mut e = [0u8; 8];
        e.copy_from_slice(&b[..8]);
        if u64::from_ne_bytes(e) == l.scq.user_handle() {
            cq_events += 1;
        }
    }
    raw_destroy(l.fd, Command::DestroyQp, 1)?;
    let d = raw_destroy(l.fd, Command::DestroyCq, 1)?;
    ensure!(
        d.async_events_reported == cq_events,
        "async_events_reported {}, read {cq_events}",
        d.async_events_reported
    );
    Ok(())
}

/// Requester on test device 0, responder on test device 1 (possibly the
/// same device, see `RMLX5_TEST_DEVICES`); returns both with the
/// responder's device fd. `responder_rts`: whether the responder goes on
/// to RTS (else it stays in RTR, where its first packet raises COMM_EST).
struct Pair {
    a_qp: rmlx5::Qp,
    a_cq: rmlx5::Cq,
    a_mr: rmlx5::Mr,
    b_fd: RawFd,
    b_ctx: rmlx5::Context,
    b_qp: rmlx5::Qp,
    b_mr: rmlx5::Mr,
    _keep: (rmlx5::Context, rmlx5::Cq),
}

fn pair(responder_rts: bool) -> Result<Pair, String> {
    let init = QpInit {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        user_handle: 0xa0,
        ..QpInit::default()
    };
    let (a_ctx, _) = open(0)?;
    let (b_ctx, b_fd) = open(1)?;
    let a_pd = a_ctx.alloc_pd().map_err(s("pd a"))?;
    let b_pd = b_ctx.alloc_pd().map_err(s("pd b"))?;
    let a_cq = a_ctx.create_cq(64, None).map_err(s("cq a"))?;
    let b_cq = b_ctx.create_cq(64, None).map_err(s("cq b"))?;
    let a_qp = a_pd.create_qp(&a_cq, &a_cq, &init).map_err(s("qp a"))?;
    let b_init = QpInit {
        user_handle: 0xb0,
        ..init
    };
    let b_qp = b_pd.create_qp(&b_cq, &b_cq, &b_init).map_err(s("qp b"))?;
    let a_mr = a_pd.reg_mr(SIZE, Access::ALL).map_err(s("mr a"))?;
    let b_mr = b_pd.reg_mr(SIZE, Access::ALL).map_err(s("mr b"))?;
    let o = ConnectOpts::default();
    if responder_rts {
        b_qp.connect(&a_qp.endpoint(), &o).map_err(s("connect b"))?;
    } else {
        b_qp.to_init(o.access).map_err(s("b init"))?;
        b_qp.to_rtr(&a_qp.endpoint(), &o).map_err(s("b rtr"))?;
    }
    a_qp.connect(&b_qp.endpoint(), &o).map_err(s("connect a"))?;
    Ok(Pair {
        a_qp,
        a_cq,
        a_mr,
        b_fd,
        b_ctx,
        b_qp,
        b_mr,
        _keep: (a_ctx, b_cq),
    })
}

/// An RDMA WRITE with a wrong rkey: the requester's WR fails with a remote
/// access error, the responder's QP goes to ERR and its context's async
/// file reports `(qp user_handle, EVENT_QP_ACCESS_ERR)`. `responder_rts`
/// false: the responder is in RTR, so the packet first raises COMM_EST and
/// both events must be delivered (neither may swallow the other).
fn access_error(responder_rts: bool) -> TestResult {
    let p = pair(responder_rts)?;
    let afd = p.b_ctx.async_fd().map_err(s("async_fd"))?;
    expect_empty(afd)?;
    let good = p.b_mr.remote(0).map_err(s("remote"))?;
    let bad = RemoteAddr {
        addr: good.addr,
        rkey: good.rkey ^ 0x5a5a00,
    };
    let sge = [p.a_mr.sge(0, 64).map_err(s("sge"))?];
    p.a_qp
        .post_send(&[SendWr::new(7, SendOp::Write(bad), &sge)])
        .map_err(s("post_send"))?;
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS as u64);
    let mut wc = [Wc::default(); 4];
    loop {
        if p.a_cq.poll(&mut wc).map_err(s("poll"))? > 0 {
            ensure!(
                wc[0].status == rmlx5::WcStatus::RemAccessErr,
                "requester completion {}",
                wc[0].status.as_str()
            );
            break;
        }
        ensure!(Instant::now() < deadline, "no requester completion");
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut want = vec![uapi::EVENT_QP_ACCESS_ERR];
    if !responder_rts {
        want.push(uapi::EVENT_COMM_EST);
    }
    let mut got = Vec::new();
    for _ in 0..want.len() {
        let (element, ty) = read_async(afd)?;
        ensure!(element == 0xb0, "async event of element {element:#x}");
        got.push(ty);
    }
    got.sort_unstable();
    want.sort_unstable();
    ensure!(got == want, "async event types {got:?}, want {want:?}");
    expect_empty(afd)?;
    ensure!(
        p.b_qp.state().map_err(s("query"))? == rmlx5::QpState::Err,
        "responder QP not in ERR"
    );
    let d = raw_destroy(p.b_fd, Command::DestroyQp, 1)?;
    ensure!(
        d.async_events_reported == want.len() as u32,
        "async_events_reported {}, want {}",
        d.async_events_reported,
        want.len()
    );
    Ok(())
}

fn async_qp_access_error() -> TestResult {
    access_error(true)
}

fn async_comm_est_then_access_error() -> TestResult {
    access_error(false)
}

fn main() {
    std::process::exit(run_all(&[
        Test {
            name: "events_one_event_per_read",
            run: one_event_per_read,
        },
        Test {
            name: "events_comp_events_reported_counts_reads",
            run: comp_events_reported_counts_reads,
        },
        Test {
            name: "events_epoll_level_triggered",
            run: epoll_level_triggered,
        },
        Test {
            name: "events_blocking_read_woken",
            run: blocking_read_woken,
        },
        Test {
            name: "events_read_interrupted_then_event",
            run: read_interrupted_then_event,
        },
        Test {
            name: "events_sigio_on_event",
            run: sigio_on_event,
        },
        Test {
            name: "events_destroy_removes_unread_event",
            run: destroy_removes_unread_event,
        },
        Test {
            name: "events_channel_closed_under_cq",
            run: channel_closed_under_cq,
        },
        Test {
            name: "events_async_cq_overrun",
            run: async_cq_overrun,
        },
        Test {
            name: "events_async_qp_access_error",
            run: async_qp_access_error,
        },
        Test {
            name: "events_async_comm_est_then_access_error",
            run: async_comm_est_then_access_error,
        },
    ]));
}
