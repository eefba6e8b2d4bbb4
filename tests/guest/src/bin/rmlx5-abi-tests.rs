//! Guest tests of the raw uverbs ABI of `/dev/rmlx5_uverbsN`: every
//! command's success and its classes of error, the `[infinibandevent]`
//! files, mmap rules, close ordering, process exit mid-use, threads, and a
//! sweep of random payloads and random object sequences. They use the
//! structs of `rmlx5-abi` through libc, not the provider.
//!
//! They run on `rmlx5_0` (and `rmlx5_1` where a second device is needed),
//! or on the devices `RMLX5_TEST_DEVICES` names
//! (`rmlx5_guest_tests::test_device`). The limits and the KICK rules they
//! expect are the software HCA's; on a device that reports
//! `DEVICE_UAR_DOORBELLS` the KICK rules are skipped (KICK must fail with
//! `EOPNOTSUPP` there) and its UAR page, a BAR page, is never written.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};

use rmlx5_abi::ioctl::Command;
use rmlx5_abi::mmap::{encode, Kind};
use rmlx5_abi::uapi::*;
use rmlx5_abi::wire::Wire;
use rmlx5_guest_tests::raw::{close, errno, poll_fd, read_fd, set_nonblock, Ctx, HasHdr, Map, Rng};
use rmlx5_guest_tests::{ensure, run_all, test_device, Test, TestResult};

const PAGE: usize = 4096;
const RW: i32 = libc::PROT_READ | libc::PROT_WRITE;

/// Expects `r` to fail with `want`.
fn expect_err<T>(what: &str, r: Result<T, i32>, want: i32) -> TestResult {
    match r {
        Ok(_) => Err(format!("{what}: succeeded, want errno {want}")),
        Err(e) if e == want => Ok(()),
        Err(e) => Err(format!("{what}: errno {e}, want {want}")),
    }
}

fn ok<T>(what: &str, r: Result<T, i32>) -> Result<T, String> {
    r.map_err(|e| format!("{what}: errno {e}"))
}

/// The `VmPin` line of /proc/self/status, in kB.
fn vm_pin_kb() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmPin:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn fd_link(fd: RawFd) -> String {
    std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn query_device_and_port() -> TestResult {
    let (n0, n1) = (test_device(0)?, test_device(1)?);
    let ctx = Ctx::open(n0)?;
    let mut d = QueryDevice::default();
    ok("query_device", ctx.call(Command::QueryDevice, &mut d))?;
    ensure!(d.vendor_id == 0x02c9, "vendor_id {:#x}", d.vendor_id);
    ensure!(
        d.phys_port_cnt == 1 && d.max_cqe.is_power_of_two(),
        "caps {d:?}"
    );
    ensure!(
        d.device_index == n0 && d.uar_size == PAGE as u32,
        "index/uar {d:?}"
    );
    ensure!(
        d.device_flags & !DEVICE_UAR_DOORBELLS == 0,
        "unknown device_flags {:#x}",
        d.device_flags
    );
    // mlx5's meaning: the whole BlueFlame register (two 256-byte halves).
    ensure!(d.bf_reg_size == 512, "bf_reg_size {}", d.bf_reg_size);
    let ctx1 = Ctx::open(n1)?;
    let mut d1 = QueryDevice::default();
    ok("query_device 1", ctx1.call(Command::QueryDevice, &mut d1))?;
    // Another device has another GUID (RMLX5_TEST_DEVICES may name one
    // device twice: the same answer).
    ensure!(
        d1.device_index == n1 && (d1.node_guid == d.node_guid) == (n0 == n1),
        "second HCA {d1:?}"
    );
    // Output fields must be zero on the way in; flags must be zero.
    for mut bad in [
        QueryDevice {
            max_qp: 1,
            ..QueryDevice::default()
        },
        QueryDevice {
            device_flags: DEVICE_UAR_DOORBELLS,
            ..QueryDevice::default()
        },
    ] {
        expect_err(
            "query_device out field",
            ctx.call(Command::QueryDevice, &mut bad),
            libc::EINVAL,
        )?;
    }
    let mut bad = QueryDevice::default();
    bad.hdr.flags = 1;
    expect_err(
        "query_device flags",
        ctx.call(Command::QueryDevice, &mut bad),
        libc::EINVAL,
    )?;
    let mut p = QueryPort {
        port_num: 1,
        ..QueryPort::default()
    };
    ok("query_port", ctx.call(Command::QueryPort, &mut p))?;
    ensure!(p.state == PORT_ACTIVE && p.lid != 0, "port {p:?}");
    // A software HCA's port has LID = index + 1; a ConnectX function's
    // port has the LID of its own fabric.
    ensure!(
        d.device_flags & DEVICE_UAR_DOORBELLS != 0 || p.lid == n0 + 1,
        "software HCA rmlx5_{n0}: LID {}, want {}",
        p.lid,
        n0 + 1
    );
    ensure!(p.link_layer == LINK_LAYER_INFINIBAND, "link layer {p:?}");
    for port in [0, 2, u32::MAX] {
        let mut p = QueryPort {
            port_num: port,
            ..QueryPort::default()
        };
        expect_err(
            "query_port bad port",
            ctx.call(Command::QueryPort, &mut p),
            libc::EINVAL,
        )?;
    }
    Ok(())
}

/// The size rules of `CmdHdr`: too small EINVAL, too large E2BIG, a
/// larger struct with a zero tail works, a non-zero tail is E2BIG, bad
/// pointers EFAULT, and an answer that cannot be written leaves nothing.
fn argument_size_rules() -> TestResult {
    let ctx = Ctx::open_test(0)?;
    let cmd = Command::AllocPd.cmd();
    let mut buf = vec![0u8; 8192];
    let put_size = |b: &mut [u8], s: u32| b[..4].copy_from_slice(&s.to_ne_bytes());
    put_size(&mut buf, 8);
    expect_err(
        "size below struct",
        ctx.raw(cmd, buf.as_mut_ptr()),
        libc::EINVAL,
    )?;
    put_size(&mut buf, 0);
    expect_err("size 0", ctx.raw(cmd, buf.as_mut_ptr()), libc::EINVAL)?;
    put_size(&mut buf, 4097);
    expect_err(
        "size above a page",
        ctx.raw(cmd, buf.as_mut_ptr()),
        libc::E2BIG,
    )?;
    put_size(&mut buf, u32::MAX);
    expect_err("size u32::MAX", ctx.raw(cmd, buf.as_mut_ptr()), libc::E2BIG)?;
    // A newer caller's struct with a zero tail is accepted...
    put_size(&mut buf, 4096);
    ok("zero tail", ctx.raw(cmd, buf.as_mut_ptr()))?;
    let h = u32::from_ne_bytes(buf[8..12].try_into().unwrap_or_default());
    ensure!(h == 1, "first pd handle {h}");
    // ...and a non-zero byte anywhere in it is refused.
    for pos in [16usize, 100, 4095] {
        buf.iter_mut().for_each(|b| *b = 0);
        put_size(&mut buf, 4096);
        buf[pos] = 1;
        expect_err("non-zero tail", ctx.raw(cmd, buf.as_mut_ptr()), libc::E2BIG)?;
    }
    // Bad pointers.
    expect_err("null arg", ctx.raw(cmd, std::ptr::null_mut()), libc::EFAULT)?;
    expect_err(
        "wild arg",
        ctx.raw(cmd, 0xdead_0000_0000usize as *mut u8),
        libc::EFAULT,
    )?;
    // A tail that runs into an unmapped page: EFAULT.
    let two = Map::anon(2 * PAGE, RW).map_err(|e| format!("anon: {e}"))?;
    // SAFETY: unmapping the second page of our own mapping.
    unsafe { libc::munmap(two.ptr.add(PAGE).cast(), PAGE) };
    let at = PAGE - 16;
    // SAFETY: inside the first page of `two`.
    let arg = unsafe { two.ptr.add(at) };
    let mut a = AllocPd::default();
    a.hdr.size = 64;
    let mut tmp = [0u8; 16];
    a.write(&mut tmp).ok_or("encode")?;
    // SAFETY: 16 bytes inside the mapped page.
    unsafe { std::ptr::copy_nonoverlapping(tmp.as_ptr(), arg, 16) };
    expect_err("tail in unmapped page", ctx.raw(cmd, arg), libc::EFAULT)?;
    // A read-only argument: the command runs but cannot answer, so
    // EFAULT and the PD is not left behind (handle 2 is handed out next).
    let ro = Map::anon(PAGE, RW).map_err(|e| format!("anon: {e}"))?;
    let mut a = AllocPd::default();
    a.hdr.size = AllocPd::SIZE as u32;
    let mut tmp = [0u8; 16];
    a.write(&mut tmp).ok_or("encode")?;
    // SAFETY: inside our mapping.
    unsafe { std::ptr::copy_nonoverlapping(tmp.as_ptr(), ro.ptr, 16) };
    // SAFETY: changing protection of our own mapping.
    unsafe { libc::mprotect(ro.ptr.cast(), PAGE, libc::PROT_READ) };
    expect_err("read-only answer", ctx.raw(cmd, ro.ptr), libc::EFAULT)?;
    let h2 = ok("alloc_pd after", ctx.alloc_pd())?;
    ensure!(
        h2 == 2,
        "pd left behind by a failed answer (got handle {h2})"
    );
    Ok(())
}

fn pd_lifecycle() -> TestResult {
    let ctx = Ctx::open_test(0)?;
    let mut hs = Vec::new();
    for _ in 0..100 {
        hs.push(ok("alloc_pd", ctx.alloc_pd())?);
    }
    let mut sorted = hs.clone();
    sorted.dedup();
    ensure!(sorted.len() == 100, "duplicate PD handles");
    let mut a = AllocPd {
        pdn: 5,
        ..AllocPd::default()
    };
    expect_err(
        "alloc_pd out field",
        ctx.call(Command::AllocPd, &mut a),
        libc::EINVAL,
    )?;
    for h in &hs {
        ok("dealloc_pd", ctx.destroy(Command::DeallocPd, *h))?;
    }
    expect_err(
        "double dealloc",
        ctx.destroy(Command::DeallocPd, hs[0]),
        libc::EINVAL,
    )?;
    expect_err("handle 0", ctx.destroy(Command::DeallocPd, 0), libc::EINVAL)?;
    expect_err(
        "huge handle",
        ctx.destroy(Command::DeallocPd, u32::MAX),
        libc::EINVAL,
    )?;
    let pd = ok("alloc_pd", ctx.alloc_pd())?;
    let mut d = Destroy {
        handle: pd,
        reserved: 1,
        ..Destroy::default()
    };
    expect_err(
        "destroy reserved",
        ctx.call(Command::DeallocPd, &mut d),
        libc::EINVAL,
    )?;
    let mut d = Destroy {
        handle: pd,
        comp_events_reported: 1,
        ..Destroy::default()
    };
    expect_err(
        "destroy out field",
        ctx.call(Command::DeallocPd, &mut d),
        libc::EINVAL,
    )?;
    // A PD of another context is not ours to free.
    let other = Ctx::open_test(0)?;
    expect_err(
        "other context's pd",
        other.destroy(Command::DeallocPd, pd),
        libc::EINVAL,
    )?;
    ok("dealloc_pd", ctx.destroy(Command::DeallocPd, pd))?;
    Ok(())
}

fn reg_mr_rules() -> TestResult {
    let ctx = Ctx::open_test(0)?;
    let pd = ok("alloc_pd", ctx.alloc_pd())?;
    let buf = Map::anon(16 * PAGE, RW).map_err(|e| format!("anon: {e}"))?;
    let pin0 = vm_pin_kb();
    let mr = ok(
        "reg_mr",
        ctx.reg_mr(
            pd,
            buf.addr() + 100,
            8 * PAGE as u64,
            ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE,
        ),
    )?;
    ensure!(
        mr.lkey != 0 && mr.rkey != 0 && mr.mr_handle != 0,
        "mr {mr:?}"
    );
    // 8 pages from an unaligned start span 9 pages.
    ensure!(
        vm_pin_kb() == pin0 + 36,
        "VmPin {} kB, want {}",
        vm_pin_kb(),
        pin0 + 36
    );
    expect_err(
        "dealloc pd with mr",
        ctx.destroy(Command::DeallocPd, pd),
        libc::EBUSY,
    )?;
    let a = buf.addr();
    let cases: [(&str, u64, u64, u32, u32, i32); 9] = [
        ("unknown access bit", a, 4096, 1 << 4, pd, libc::EINVAL),
        (
            "remote write without local write",
            a,
            4096,
            ACCESS_REMOTE_WRITE,
            pd,
            libc::EINVAL,
        ),
        (
            "remote atomic without local write",
            a,
            4096,
            ACCESS_REMOTE_ATOMIC,
            pd,
            libc::EINVAL,
        ),
        ("length 0", a, 0, 0, pd, libc::EINVAL),
        ("wrapping range", u64::MAX - 10, 4096, 0, pd, libc::EINVAL),
        ("beyond max_mr_size", a, 1 << 40, 0, pd, libc::EINVAL),
        ("bad pd", a, 4096, 0, pd + 77, libc::EINVAL),
        ("unmapped memory", 0x10_0000_0000, 4096, 0, pd, libc::EFAULT),
        (
            "kernel address",
            0xffff_8880_0000_0000,
            4096,
            0,
            pd,
            libc::EFAULT,
        ),
    ];
    for (what, addr, len, access, pdh, want) in cases {
        expect_err(what, ctx.reg_mr(pdh, addr, len, access), want)?;
    }
    // Read-only memory: fine for a read-only MR, EFAULT with write access.
    let ro = Map::anon(PAGE, libc::PROT_READ).map_err(|e| format!("anon: {e}"))?;
    let r = ok(
        "read-only mr",
        ctx.reg_mr(pd, ro.addr(), 4096, ACCESS_REMOTE_READ),
    )?;
    expect_err(
        "writable mr on read-only",
        ctx.reg_mr(pd, ro.addr(), 4096, ACCESS_LOCAL_WRITE),
        libc::EFAULT,
    )?;
    // Out fields and reserved must be zero.
    let mut bad = RegMr {
        addr: a,
        length: 64,
        iova: a,
        pd_handle: pd,
        lkey: 1,
        ..RegMr::default()
    };
    expect_err(
        "reg_mr out field",
        ctx.call(Command::RegMr, &mut bad),
        libc::EINVAL,
    )?;
    ok("dereg_mr", ctx.destroy(Command::DeregMr, r.mr_handle))?;
    ok("dereg_mr", ctx.destroy(Command::DeregMr, mr.mr_handle))?;
    expect_err(
        "double dereg",
        ctx.destroy(Command::DeregMr, mr.mr_handle),
        libc::EINVAL,
    )?;
    ensure!(
        vm_pin_kb() == pin0,
        "VmPin {} kB after dereg, want {pin0}",
        vm_pin_kb()
    );
    ok("dealloc_pd", ctx.destroy(Command::DeallocPd, pd))?;
    // MRs left at close are unpinned and uncharged too.
    let pd = ok("alloc_pd", ctx.alloc_pd())?;
    ok(
        "reg_mr",
        ctx.reg_mr(pd, buf.addr(), 16 * PAGE as u64, ACCESS_LOCAL_WRITE),
    )?;
    ensure!(vm_pin_kb() == pin0 + 64, "VmPin {}", vm_pin_kb());
    drop(ctx);
    ensure!(
        vm_pin_kb() == pin0,
        "VmPin {} kB after close, want {pin0}",
        vm_pin_kb()
    );
    Ok(())
}

/// Without CAP_IPC_LOCK, pinning is limited by RLIMIT_MEMLOCK (ENOMEM).
fn reg_mr_memlock_limit() -> TestResult {
    let ctx = Ctx::open_test(0)?;
    let pd = ok("alloc_pd", ctx.alloc_pd())?;
    let buf = Map::anon(64 * PAGE, RW).map_err(|e| format!("anon: {e}"))?;
    // SAFETY: fork in a single-threaded test; the child only makes
    // syscalls and exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let lim = libc::rlimit {
            rlim_cur: 16 * PAGE as u64,
            rlim_max: 16 * PAGE as u64,
        };
        // SAFETY: plain syscalls in the child.
        let code = unsafe {
            if libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) != 0 || libc::setuid(65534) != 0 {
                10
            } else if ctx.reg_mr(pd, buf.addr(), 64 * PAGE as u64, ACCESS_LOCAL_WRITE)
                != Err(libc::ENOMEM)
            {
                11
            } else if ctx
                .reg_mr(pd, buf.addr(), 8 * PAGE as u64, ACCESS_LOCAL_WRITE)
                .is_err()
            {
                12
            } else if ctx.reg_mr(pd, buf.addr(), 9 * PAGE as u64, ACCESS_LOCAL_WRITE)
                != Err(libc::ENOMEM)
            {
                13
            } else {
                0
            }
        };
        // SAFETY: leaving the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for our child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    ensure!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status:#x} (10 setup, 11 over limit, 12 within, 13 sum over limit)"
    );
    Ok(())
}

fn comp_channel_file() -> TestResult {
    let ctx = Ctx::open_test(0)?;
    let ch = ok("create_comp_channel", ctx.channel())?;
    ensure!(
        fd_link(ch) == "anon_inode:[infinibandevent]",
        "link {}",
        fd_link(ch)
    );
    // SAFETY: fcntl on our descriptor.
    let (fdfl, fl) = unsafe {
        (
            libc::fcntl(ch, libc::F_GETFD),
            libc::fcntl(ch, libc::F_GETFL),
        )
    };
    ensure!(fdfl & libc::FD_CLOEXEC != 0, "no O_CLOEXEC");
    ensure!(
        fl & libc::O_ACCMODE == libc::O_RDONLY,
        "not O_RDONLY: {fl:#x}"
    );
    let mut ev = [0u8; 8];
    set_nonblock(ch, true).map_err(|e| format!("nonblock {e}"))?;
    expect_err("nonblocking read", read_fd(ch, &mut ev), libc::EAGAIN)?;
    expect_err(
        "nonblocking short read",
        read_fd(ch, &mut ev[..4]),
        libc::EAGAIN,
    )?;
    ensure!(poll_fd(ch, libc::POLLIN, 0) == Ok(0), "poll without events");
    // epoll: nothing ready.
    // SAFETY: plain epoll syscalls on our descriptors.
    unsafe {
        let ep = libc::epoll_create1(libc::EPOLL_CLOEXEC);
        let mut e = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 7,
        };
        ensure!(
            libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, ch, &mut e) == 0,
            "epoll_ctl {}",
            errno()
        );
        let mut out = [libc::epoll_event { events: 0, u64: 0 }; 4];
        ensure!(
            libc::epoll_wait(ep, out.as_mut_ptr(), 4, 10) == 0,
            "epoll ready without events"
        );
        libc::close(ep);
    }
    // Writing, seeking and mapping are not offered.
    // SAFETY: syscalls on our descriptor with a valid buffer.
    unsafe {
        ensure!(
            libc::write(ch, ev.as_ptr().cast(), 8) < 0,
            "write succeeded"
        );
        let p = libc::mmap(
            std::ptr::null_mut(),
            PAGE,
            libc::PROT_READ,
            libc::MAP_SHARED,
            ch,
            0,
        );
        ensure!(p == libc::MAP_FAILED, "mmap of a channel succeeded");
    }
    // O_ASYNC / SIGIO can be set up.
    // SAFETY: fcntl on our descriptor.
    unsafe {
        ensure!(
            libc::fcntl(ch, libc::F_SETOWN, libc::getpid()) == 0,
            "F_SETOWN {}",
            errno()
        );
        ensure!(
            libc::fcntl(ch, libc::F_SETFL, libc::O_ASYNC | libc::O_NONBLOCK) == 0,
            "O_ASYNC {}",
            errno()
        );
    }
    // A blocking read is interrupted by a signal.
    set_nonblock(ch, false).map_err(|e| format!("block {e}"))?;
    interrupted_read(ch)?;
    close(ch);
    Ok(())
}

extern "C" fn on_alarm(_: libc::c_int) {}

/// A blocking read on `fd` ends with EINTR when SIGALRM (no SA_RESTART)
/// arrives.
fn interrupted_read(fd: RawFd) -> TestResult {
    // SAFETY: installing a handler that does nothing, then arming an
    // interval timer; both restored afterwards.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_alarm as *const () as usize;
        sa.sa_flags = 0;
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
    let mut ev = [0u8; 8];
    let r = read_fd(fd, &mut ev);
    // SAFETY: restoring the default disposition.
    unsafe { libc::signal(libc::SIGALRM, libc::SIG_DFL) };
    expect_err("blocking read with a signal", r, libc::EINTR)
}

fn async_event_file() -> TestResult {
    let ctx = Ctx::open_test(0)?;
    let mut a = GetAsyncFd::default();
    ok("get_async_fd", ctx.call(Command::GetAsyncFd, &mut a))?;
    let afd = a.fd;
    ensure!(
        fd_link(afd) == "anon_inode:[infinibandevent]",
        "link {}",
        fd_link(afd)
    );
    let mut again = GetAsyncFd::default();
    expect_err(
        "second get_async_fd",
        ctx.call(Command::GetAsyncFd, &mut again),
        libc::EEXIST,
    )?;
    let mut bad = GetAsyncFd {
        fd: 3,
        ..GetAsyncFd::default()
    };
    expect_err(
        "get_async_fd out field",
        Ctx::open_test(0)?.call(Command::GetAsyncFd, &mut bad),
        libc::EINVAL,
    )?;
    let mut ev = [0u8; 16];
    set_nonblock(afd, true).map_err(|e| format!("{e}"))?;
    expect_err("async read", read_fd(afd, &mut ev), libc::EAGAIN)?;
    // The async file cannot serve as a completion channel.
    expect_err(
        "async fd as channel",
        ctx.create_cq(8, afd, 0),
        libc::EINVAL,
    )?;
    // Once the context is closed, readers see EIO and poll EPOLLERR.
    let ch = ok("channel", ctx.channel())?;
    drop(ctx);
    expect_err("async read after close", read_fd(afd, &mut ev), libc::EIO)?;
    set_nonblock(ch, false).map_err(|e| format!("{e}"))?;
    expect_err(
        "blocking channel read after close",
        read_fd(ch, &mut ev),
        libc::EIO,
    )?;
    let re = poll_fd(ch, libc::POLLIN, 0).map_err(|e| format!("poll {e}"))?;
    ensure!(re & libc::POLLERR != 0, "poll after close: {re:#x}");
    close(afd);
    close(ch);
    Ok(())
}

fn cq_create_destroy() -> TestResult {
    let ctx = Ctx::open_test(0)?;
    let ch = ok("channel", ctx.channel())?;
    for (want_in, want_out) in [
        (1u32, 1u32),
        (2, 2),
        (100, 128),
        (4096, 4096),
        (1 << 16, 1 << 16),
    ] {
        let cq = ok("create_cq", ctx.create_cq(want_in, ch, 0x1234))?;
        ensure!(cq.cqe_cnt == want_out && cq.cqe_size == 64, "cq {cq:?}");
        let bytes = (u64::from(want_out) * 64)
            .max(PAGE as u64)
            .next_multiple_of(PAGE as u64);
        ensure!(
            cq.buf_size == bytes,
            "buf_size {} want {bytes}",
            cq.buf_size
        );
        ensure!(
            cq.buf_mmap_offset == encode(Kind::CqBuf, cq.cq_handle).unwrap_or(0),
            "offset"
        );
        let d = ok("destroy_cq", ctx.destroy(Command::DestroyCq, cq.cq_handle))?;
        ensure!(
            d.comp_events_reported == 0 && d.async_events_reported == 0,
            "counts {d:?}"
        );
    }
    let mut d = QueryDevice::default();
    ok("query", ctx.call(Command::QueryDevice, &mut d))?;
    expect_err("cqe 0", ctx.create_cq(0, -1, 0), libc::EINVAL)?;
    expect_err(
        "cqe above max",
        ctx.create_cq(d.max_cqe + 1, -1, 0),
        libc::EINVAL,
    )?;
    expect_err("cqe u32::MAX", ctx.create_cq(u32::MAX, -1, 0), libc::EINVAL)?;
    let mut c = CreateCq {
        cqe: 8,
        channel_fd: -1,
        comp_vector: d.num_comp_vectors,
        ..CreateCq::default()
    };
    expect_err(
        "comp_vector",
        ctx.call(Command::CreateCq, &mut c),
        libc::EINVAL,
    )?;
    expect_err("channel_fd -2", ctx.create_cq(8, -2, 0), libc::EINVAL)?;
    expect_err("closed fd", ctx.create_cq(8, 999, 0), libc::EBADF)?;
    let devnull = std::fs::File::open("/dev/null").map_err(|e| e.to_string())?;
    use std::os::fd::AsRawFd;
    expect_err(
        "foreign file as channel",
        ctx.create_cq(8, devnull.as_raw_fd(), 0),
        libc::EINVAL,
    )?;
    expect_err(
        "device fd as channel",
        ctx.create_cq(8, ctx.fd, 0),
        libc::EINVAL,
    )?;
    let other = Ctx::open_test(0)?;
    let och = ok("other channel", other.channel())?;
    expect_err(
        "other context's channel",
        ctx.create_cq(8, och, 0),
        libc::EINVAL,
    )?;
    let mut c = CreateCq {
        cqe: 8,
        channel_fd: -1,
        cqn: 1,
        ..CreateCq::default()
    };
    expect_err(
        "out field",
        ctx.call(Command::CreateCq, &mut c),
        libc::EINVAL,
    )?;
    expect_err(
        "destroy missing cq",
        ctx.destroy(Command::DestroyCq, 55),
        libc::EINVAL,
    )?;
    // Many CQs on one channel, destroyed in random order.
    let mut hs = Vec::new();
    for i in 0..200 {
        hs.push(ok("create_cq", ctx.create_cq(16, ch, i))?.cq_handle);
    }
    let mut rng = Rng(0x5eed);
    while !hs.is_empty() {
        let i = rng.below(hs.len() as u64) as usize;
        let h = hs.swap_remove(i);
        ok("destroy_cq", ctx.destroy(Command::DestroyCq, h))?;
    }
    close(ch);
    close(och);
    Ok(())
}

fn mmap_rules() -> TestResult {
    let ctx = Ctx::open_test(0)?;
    let cq = ok("create_cq", ctx.create_cq(256, -1, 1))?;
    let len = cq.buf_size as usize;
    let m = ok("map cq buf", ctx.map_rw(cq.buf_mmap_offset, len))?;
    ensure!(m.touch(), "cq buffer not backed");
    let dbr = ok("map cq dbr", ctx.map_rw(cq.dbr_mmap_offset, PAGE))?;
    ensure!(dbr.touch(), "dbr not backed");
    let uar_off = encode(Kind::Uar, 0).unwrap_or(0);
    let uar = ok("map uar", ctx.map_rw(uar_off, PAGE))?;
    // A ConnectX function's UAR page is its BAR: a store there is a
    // doorbell, not a test of the memory behind it.
    let uar_is_memory = !ctx.uar_doorbells()?;
    if uar_is_memory {
        ensure!(uar.touch(), "uar not backed");
    } else {
        println!("rmlx5-abi-tests: mmap_rules: the UAR page is a device's BAR, not touched");
    }
    // Read-only mappings are allowed too.
    ok(
        "map ro",
        ctx.mmap(cq.buf_mmap_offset, len, libc::PROT_READ, libc::MAP_SHARED),
    )?;
    let bad: [(&str, u64, usize, i32, i32); 11] = [
        (
            "short",
            cq.buf_mmap_offset,
            len - PAGE,
            RW,
            libc::MAP_SHARED,
        ),
        ("long", cq.buf_mmap_offset, len + PAGE, RW, libc::MAP_SHARED),
        (
            "dbr two pages",
            cq.dbr_mmap_offset,
            2 * PAGE,
            RW,
            libc::MAP_SHARED,
        ),
        ("private", cq.buf_mmap_offset, len, RW, libc::MAP_PRIVATE),
        (
            "exec",
            cq.buf_mmap_offset,
            len,
            RW | libc::PROT_EXEC,
            libc::MAP_SHARED,
        ),
        ("offset 0", 0, PAGE, RW, libc::MAP_SHARED),
        ("unknown kind", 6 << 40, PAGE, RW, libc::MAP_SHARED),
        (
            "missing cq",
            encode(Kind::CqBuf, 999).unwrap_or(0),
            PAGE,
            RW,
            libc::MAP_SHARED,
        ),
        (
            "missing qp",
            encode(Kind::QpBuf, 1).unwrap_or(0),
            PAGE,
            RW,
            libc::MAP_SHARED,
        ),
        (
            "uar handle 1",
            (1 << 40) | (1 << 12),
            PAGE,
            RW,
            libc::MAP_SHARED,
        ),
        ("uar two pages", uar_off, 2 * PAGE, RW, libc::MAP_SHARED),
    ];
    for (what, off, l, prot, flags) in bad {
        expect_err(what, ctx.mmap(off, l, prot, flags), libc::EINVAL)?;
    }
    // No exec later either, and no growing.
    // SAFETY: mprotect/mremap on our own mapping.
    unsafe {
        ensure!(
            libc::mprotect(m.ptr.cast(), len, libc::PROT_READ | libc::PROT_EXEC) != 0,
            "mprotect exec"
        );
        let p = libc::mremap(m.ptr.cast(), len, len + PAGE, libc::MREMAP_MAYMOVE);
        ensure!(p == libc::MAP_FAILED, "mremap grew the mapping");
    }
    // Another context cannot map this context's CQ (its handle names
    // nothing there, or its own CQ).
    let other = Ctx::open_test(0)?;
    expect_err(
        "other context",
        other.map_rw(cq.buf_mmap_offset, len),
        libc::EINVAL,
    )?;
    // After destroy, the existing mapping stays valid; new maps fail.
    ok("destroy_cq", ctx.destroy(Command::DestroyCq, cq.cq_handle))?;
    ensure!(m.touch() && dbr.touch(), "mapping invalid after destroy");
    expect_err(
        "map destroyed cq",
        ctx.map_rw(cq.buf_mmap_offset, len),
        libc::EINVAL,
    )?;
    drop(ctx);
    ensure!(
        m.touch() && (!uar_is_memory || uar.touch()),
        "mapping invalid after close"
    );
    Ok(())
}

fn qp_create_query_destroy() -> TestResult {
    let ctx = Ctx::open_test(0)?;
    let pd = ok("pd", ctx.alloc_pd())?;
    let scq = ok("scq", ctx.create_cq(128, -1, 1))?.cq_handle;
    let rcq = ok("rcq", ctx.create_cq(128, -1, 2))?.cq_handle;
    let qp = ok("create_qp", ctx.create_qp(pd, scq, rcq))?;
    ensure!(
        qp.sq_wqe_cnt.is_power_of_two() && qp.rq_wqe_cnt.is_power_of_two(),
        "geometry {qp:?}"
    );
    ensure!(
        qp.max_send_wr_out >= 64 && qp.max_recv_wr_out >= 64,
        "granted {qp:?}"
    );
    ensure!(
        qp.max_send_sge_out >= 2 && qp.max_inline_data_out >= 64,
        "granted {qp:?}"
    );
    ensure!(qp.sq_wqe_shift == 6, "sq stride");
    let rq_bytes = u64::from(qp.rq_wqe_cnt) << qp.rq_wqe_shift;
    ensure!(u64::from(qp.sq_buf_offset) >= rq_bytes, "sq overlaps rq");
    ensure!(
        qp.buf_size >= u64::from(qp.sq_buf_offset) + u64::from(qp.sq_wqe_cnt) * 64
            && qp.buf_size % PAGE as u64 == 0,
        "buf_size {}",
        qp.buf_size
    );
    ensure!(
        qp.bf_offset >= 0x800 && qp.bf_size == 256 && qp.bf_offset + 2 * qp.bf_size <= PAGE as u32,
        "bf {qp:?}"
    );
    let b = ok(
        "map qp buf",
        ctx.map_rw(qp.buf_mmap_offset, qp.buf_size as usize),
    )?;
    ensure!(b.touch(), "qp buf");
    let d = ok("map qp dbr", ctx.map_rw(qp.dbr_mmap_offset, PAGE))?;
    ensure!(d.touch(), "qp dbr");
    ok("map uar", ctx.map_rw(qp.uar_mmap_offset, PAGE))?;
    // Dependencies: CQs and PD cannot go while the QP uses them.
    expect_err(
        "destroy busy scq",
        ctx.destroy(Command::DestroyCq, scq),
        libc::EBUSY,
    )?;
    expect_err(
        "destroy busy rcq",
        ctx.destroy(Command::DestroyCq, rcq),
        libc::EBUSY,
    )?;
    expect_err(
        "dealloc busy pd",
        ctx.destroy(Command::DeallocPd, pd),
        libc::EBUSY,
    )?;
    // Query.
    let mut q = QueryQp {
        qp_handle: qp.qp_handle,
        ..QueryQp::default()
    };
    ok("query_qp", ctx.call(Command::QueryQp, &mut q))?;
    ensure!(
        q.qp_state == QPS_RESET && q.max_send_wr == qp.max_send_wr_out,
        "query {q:?}"
    );
    let mut q = QueryQp {
        qp_handle: qp.qp_handle,
        qp_state: 1,
        ..QueryQp::default()
    };
    expect_err(
        "query out field",
        ctx.call(Command::QueryQp, &mut q),
        libc::EINVAL,
    )?;
    let mut q = QueryQp {
        qp_handle: 77,
        ..QueryQp::default()
    };
    expect_err(
        "query missing",
        ctx.call(Command::QueryQp, &mut q),
        libc::EINVAL,
    )?;
    // Modify: validation first (the state machine is the HCA's).
    let bads: [ModifyQp; 7] = [
        // An SL without the address vector, and an SL beyond 4 bits.
        ModifyQp {
            qp_handle: qp.qp_handle,
            attr_mask: 0,
            sl: 1,
            ..ModifyQp::default()
        },
        ModifyQp {
            qp_handle: qp.qp_handle,
            attr_mask: QP_AV,
            dlid: 1,
            sl: 16,
            ..ModifyQp::default()
        },
        ModifyQp {
            qp_handle: qp.qp_handle,
            attr_mask: 1 << 30,
            ..ModifyQp::default()
        },
        ModifyQp {
            qp_handle: qp.qp_handle,
            attr_mask: QP_STATE,
            qp_state: 9,
            ..ModifyQp::default()
        },
        ModifyQp {
            qp_handle: qp.qp_handle,
            attr_mask: 0,
            path_mtu: 3,
            ..ModifyQp::default()
        },
        ModifyQp {
            qp_handle: qp.qp_handle,
            attr_mask: QP_PORT,
            port_num: 2,
            ..ModifyQp::default()
        },
        ModifyQp {
            qp_handle: 99,
            attr_mask: QP_STATE,
            qp_state: QPS_INIT,
            ..ModifyQp::default()
        },
    ];
    for mut m in bads {
        expect_err(
            "modify_qp invalid",
            ctx.call(Command::ModifyQp, &mut m),
            libc::EINVAL,
        )?;
    }
    // Kick: kind, reserved, and the QP's own BlueFlame register; only on
    // a software HCA. A device that sees its UAR stores refuses even a
    // well-formed KICK.
    if ctx.uar_doorbells()? {
        println!(
            "rmlx5-abi-tests: qp_create_query_destroy: KICK rules skipped: \
             rmlx5_{} reports DEVICE_UAR_DOORBELLS",
            test_device(0)?
        );
        let mut k = Kick {
            kind: KICK_CQ_ARM,
            handle: scq,
            ..Kick::default()
        };
        expect_err(
            "kick with DEVICE_UAR_DOORBELLS",
            ctx.call(Command::Kick, &mut k),
            libc::EOPNOTSUPP,
        )?;
    } else {
        kick_rules(&ctx, qp.qp_handle)?;
    }
    // Create errors.
    let mut c = CreateQp {
        qp_type: 3,
        ..ctx_qp_req(pd, scq, rcq)
    };
    expect_err("qp type", ctx.call(Command::CreateQp, &mut c), libc::EINVAL)?;
    let mut c = CreateQp {
        max_send_wr: 1 << 20,
        ..ctx_qp_req(pd, scq, rcq)
    };
    expect_err(
        "max_send_wr",
        ctx.call(Command::CreateQp, &mut c),
        libc::EINVAL,
    )?;
    let mut c = CreateQp {
        max_recv_sge: 1000,
        ..ctx_qp_req(pd, scq, rcq)
    };
    expect_err(
        "max_recv_sge",
        ctx.call(Command::CreateQp, &mut c),
        libc::EINVAL,
    )?;
    let mut c = CreateQp {
        max_inline_data: 1 << 20,
        ..ctx_qp_req(pd, scq, rcq)
    };
    expect_err(
        "max_inline",
        ctx.call(Command::CreateQp, &mut c),
        libc::EINVAL,
    )?;
    let mut c = CreateQp {
        sq_sig_all: 2,
        ..ctx_qp_req(pd, scq, rcq)
    };
    expect_err(
        "sq_sig_all",
        ctx.call(Command::CreateQp, &mut c),
        libc::EINVAL,
    )?;
    expect_err("bad pd", ctx.create_qp(pd + 9, scq, rcq), libc::EINVAL)?;
    expect_err("bad scq", ctx.create_qp(pd, 999, rcq), libc::EINVAL)?;
    expect_err("bad rcq", ctx.create_qp(pd, scq, 0), libc::EINVAL)?;
    let mut c = CreateQp {
        qpn: 5,
        ..ctx_qp_req(pd, scq, rcq)
    };
    expect_err(
        "qp out field",
        ctx.call(Command::CreateQp, &mut c),
        libc::EINVAL,
    )?;
    // Destroy in dependency order.
    let dq = ok("destroy_qp", ctx.destroy(Command::DestroyQp, qp.qp_handle))?;
    ensure!(dq.async_events_reported == 0, "qp counts {dq:?}");
    expect_err(
        "double destroy_qp",
        ctx.destroy(Command::DestroyQp, qp.qp_handle),
        libc::EINVAL,
    )?;
    ensure!(b.touch(), "qp mapping after destroy");
    ok("destroy scq", ctx.destroy(Command::DestroyCq, scq))?;
    ok("destroy rcq", ctx.destroy(Command::DestroyCq, rcq))?;
    ok("dealloc pd", ctx.destroy(Command::DeallocPd, pd))?;
    Ok(())
}

/// `KICK`'s argument rules on a software HCA's QP `qp`: an unknown kind,
/// a send offset outside the QP's BlueFlame register, a missing CQ and a
/// receive kick with an offset are refused.
fn kick_rules(ctx: &Ctx, qp: u32) -> TestResult {
    let mut k = Kick {
        kind: 9,
        handle: qp,
        ..Kick::default()
    };
    expect_err("kick kind", ctx.call(Command::Kick, &mut k), libc::EINVAL)?;
    let mut k = Kick {
        kind: KICK_SEND,
        handle: qp,
        uar_offset: 0x100,
        ..Kick::default()
    };
    expect_err(
        "kick uar offset",
        ctx.call(Command::Kick, &mut k),
        libc::EINVAL,
    )?;
    let mut k = Kick {
        kind: KICK_CQ_ARM,
        handle: 999,
        ..Kick::default()
    };
    expect_err(
        "kick missing cq",
        ctx.call(Command::Kick, &mut k),
        libc::EINVAL,
    )?;
    let mut k = Kick {
        kind: KICK_RECV,
        handle: qp,
        uar_offset: 8,
        ..Kick::default()
    };
    expect_err(
        "kick recv with offset",
        ctx.call(Command::Kick, &mut k),
        libc::EINVAL,
    )?;
    Ok(())
}

fn ctx_qp_req(pd: u32, scq: u32, rcq: u32) -> CreateQp {
    CreateQp {
        pd_handle: pd,
        send_cq_handle: scq,
        recv_cq_handle: rcq,
        qp_type: QPT_RC,
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        ..CreateQp::default()
    }
}

/// The channel-close rule: a channel fd may be closed while CQs use it;
/// the CQs keep working and their later events are discarded.
fn close_ordering() -> TestResult {
    let ctx = Ctx::open_test(0)?;
    let ch = ok("channel", ctx.channel())?;
    let cq = ok("cq", ctx.create_cq(8, ch, 1))?;
    close(ch);
    let cq2 = ok("cq on other channel", ctx.create_cq(8, -1, 2))?;
    expect_err("closed channel fd", ctx.create_cq(8, ch, 3), libc::EBADF)?;
    ok(
        "destroy cq after channel close",
        ctx.destroy(Command::DestroyCq, cq.cq_handle),
    )?;
    ok(
        "destroy cq2",
        ctx.destroy(Command::DestroyCq, cq2.cq_handle),
    )?;
    // Closing the device first with everything alive (objects, maps,
    // files) tears it all down; the files then report EIO.
    let ctx = Ctx::open_test(1)?;
    let ch = ok("channel", ctx.channel())?;
    let pd = ok("pd", ctx.alloc_pd())?;
    let cq = ok("cq", ctx.create_cq(64, ch, 1))?;
    let qp = ok("qp", ctx.create_qp(pd, cq.cq_handle, cq.cq_handle))?;
    let buf = Map::anon(4 * PAGE, RW).map_err(|e| format!("{e}"))?;
    ok(
        "mr",
        ctx.reg_mr(pd, buf.addr(), 4 * PAGE as u64, ACCESS_LOCAL_WRITE),
    )?;
    let m = ok("map", ctx.map_rw(qp.buf_mmap_offset, qp.buf_size as usize))?;
    // A mapping holds the device file, so the context lives on until the
    // last mapping goes too.
    drop(ctx);
    ensure!(m.touch(), "qp mapping after close");
    let mut ev = [0u8; 8];
    set_nonblock(ch, true).map_err(|e| format!("{e}"))?;
    expect_err("channel while mapped", read_fd(ch, &mut ev), libc::EAGAIN)?;
    drop(m);
    expect_err(
        "channel after device close",
        read_fd(ch, &mut ev),
        libc::EIO,
    )?;
    close(ch);
    Ok(())
}

/// A process that dies mid-use (objects, mappings, pinned memory, files,
/// a thread blocked in read) leaves nothing behind.
fn process_exit_mid_use() -> TestResult {
    for round in 0..6 {
        // SAFETY: fork; the child only runs this crate's code and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let r = child_busy(round);
            // SAFETY: leave the child without unwinding.
            unsafe { libc::_exit(i32::from(r.is_err())) };
        }
        if round % 2 == 1 {
            std::thread::sleep(std::time::Duration::from_millis(50));
            // SAFETY: killing our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let mut status = 0;
        // SAFETY: waiting for our child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        if round % 2 == 0 {
            ensure!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "child {round}: {status:#x}"
            );
        }
    }
    Ok(())
}

fn child_busy(round: u32) -> Result<(), String> {
    let ctx = Ctx::open_test(round as usize % 2)?;
    let ch = ctx.channel().map_err(|e| format!("{e}"))?;
    let mut a = GetAsyncFd::default();
    ctx.call(Command::GetAsyncFd, &mut a)
        .map_err(|e| format!("{e}"))?;
    let pd = ctx.alloc_pd().map_err(|e| format!("{e}"))?;
    let buf = Map::anon(32 * PAGE, RW).map_err(|e| format!("{e}"))?;
    let mut maps = Vec::new();
    for i in 0..20 {
        let cq = ctx.create_cq(64, ch, i).map_err(|e| format!("{e}"))?;
        let qp = ctx
            .create_qp(pd, cq.cq_handle, cq.cq_handle)
            .map_err(|e| format!("{e}"))?;
        maps.push(
            ctx.map_rw(qp.buf_mmap_offset, qp.buf_size as usize)
                .map_err(|e| format!("{e}"))?,
        );
        ctx.reg_mr(pd, buf.addr(), 32 * PAGE as u64, ACCESS_LOCAL_WRITE)
            .map_err(|e| format!("{e}"))?;
    }
    // A thread blocked reading the channel when the process goes.
    std::thread::spawn(move || {
        let mut ev = [0u8; 8];
        let _ = read_fd(ch, &mut ev);
    });
    if round % 2 == 1 {
        // Keep issuing commands until killed.
        loop {
            let _ = ctx.alloc_pd().map(|h| ctx.destroy(Command::DeallocPd, h));
        }
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    // Exit with everything open: the kernel cleans up.
    std::mem::forget(maps);
    std::mem::forget(ctx);
    Ok(())
}

/// Commands from several threads on one context, racing with mmap.
fn threads_share_a_context() -> TestResult {
    let ctx = std::sync::Arc::new(Ctx::open_test(0)?);
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let mut joins = Vec::new();
    for t in 0..4u64 {
        let ctx = ctx.clone();
        let stop = stop.clone();
        joins.push(std::thread::spawn(move || -> Result<u64, String> {
            let mut rng = Rng(0x1234_5678 + t);
            let mut n = 0;
            let pd = ctx.alloc_pd().map_err(|e| format!("pd {e}"))?;
            while !stop.load(Ordering::Relaxed) {
                match rng.below(4) {
                    0 => {
                        if let Ok(cq) = ctx.create_cq(32, -1, t) {
                            if let Ok(qp) = ctx.create_qp(pd, cq.cq_handle, cq.cq_handle) {
                                let _ = ctx.destroy(Command::DestroyQp, qp.qp_handle);
                            }
                            let _ = ctx.destroy(Command::DestroyCq, cq.cq_handle);
                        }
                    }
                    1 => {
                        let h = rng.below(40) as u32;
                        let _ = ctx.destroy(Command::DestroyCq, h);
                    }
                    2 => {
                        let off = encode(Kind::CqBuf, rng.below(40) as u32).unwrap_or(0);
                        if let Ok(m) = ctx.map_rw(off, PAGE * 2) {
                            m.touch();
                        }
                    }
                    _ => {
                        let _ = ctx.destroy(Command::DestroyQp, rng.below(40) as u32);
                    }
                }
                n += 1;
            }
            Ok(n)
        }));
    }
    std::thread::sleep(std::time::Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for j in joins {
        total += j.join().map_err(|_| "thread panicked".to_string())??;
    }
    ensure!(total > 100, "only {total} operations");
    Ok(())
}

/// Errnos a random command may legitimately get.
fn allowed(e: i32) -> bool {
    [
        libc::EINVAL,
        libc::E2BIG,
        libc::EFAULT,
        libc::EBUSY,
        libc::ENOSPC,
        libc::ENOMEM,
        libc::EBADF,
        libc::EEXIST,
        libc::EOPNOTSUPP,
        libc::EMFILE,
        libc::ENOTTY,
    ]
    .contains(&e)
}

/// 100,000 random ioctl payloads: a random command (or a random number),
/// a header size that is mostly plausible, and bytes that are mostly zero
/// with random fields and handles near real ones. Any errno outside the
/// documented set, or a crash, fails.
fn sweep_random_payloads() -> TestResult {
    let mut rng = Rng(0xdead_beef_cafe_f00d);
    let mut ctx = Ctx::open_test(0)?;
    let mut fds: Vec<RawFd> = Vec::new();
    let mut buf = vec![0u8; 8192];
    let mut successes = 0u32;
    let mem = Map::anon(8 * PAGE, RW).map_err(|e| format!("{e}"))?;
    for i in 0..100_000u32 {
        if i % 5000 == 4999 {
            // A fresh context now and then: teardown with whatever is alive.
            ctx = Ctx::open_test(rng.below(2) as usize)?;
            for fd in fds.drain(..) {
                close(fd);
            }
        }
        let cmd = if rng.below(50) == 0 {
            rng.next_u64() as u32
        } else {
            let all = Command::ALL;
            all[rng.below(all.len() as u64) as usize].cmd()
        };
        let min = Command::from_cmd(cmd).map(|c| c.min_size()).unwrap_or(8);
        let size: u32 = match rng.below(10) {
            0 => rng.next_u64() as u32,
            1 => rng.below(4200) as u32,
            2 => min as u32 + 8 * rng.below(8) as u32,
            _ => min as u32,
        };
        let span = (size as usize).clamp(8, 4200);
        buf[..span].iter_mut().for_each(|b| *b = 0);
        buf[..4].copy_from_slice(&size.to_ne_bytes());
        if rng.below(20) == 0 {
            buf[4..8].copy_from_slice(&(rng.next_u64() as u32).to_ne_bytes());
        }
        // A few random fields: small numbers (handles, counts), random
        // words, -1, or an address inside our memory.
        for _ in 0..rng.below(6) {
            let off = 8 + 4 * rng.below((min as u64 - 8) / 4 + 1) as usize;
            if off + 4 > span {
                continue;
            }
            let v: u32 = match rng.below(6) {
                0 => rng.below(8) as u32,
                1 => rng.next_u64() as u32,
                2 => u32::MAX,
                3 => 1 << rng.below(32),
                4 => (mem.addr() as u32).wrapping_add(rng.below(8 * PAGE as u64) as u32),
                _ => (mem.addr() >> 32) as u32,
            };
            buf[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        }
        let ptr = match rng.below(200) {
            0 => std::ptr::null_mut(),
            1 => 0xffff_8000_0000_0000usize as *mut u8,
            _ => buf.as_mut_ptr(),
        };
        match ctx.raw(cmd, ptr) {
            Ok(()) => {
                successes += 1;
                let c = Command::from_cmd(cmd);
                if c == Some(Command::CreateCompChannel) || c == Some(Command::GetAsyncFd) {
                    let fd = i32::from_ne_bytes(buf[8..12].try_into().unwrap_or_default());
                    if fd > 2 {
                        fds.push(fd);
                    }
                }
            }
            Err(e) if allowed(e) => {}
            Err(e) => return Err(format!("payload {i}: cmd {cmd:#x} size {size}: errno {e}")),
        }
        if fds.len() > 64 {
            let k = rng.below(fds.len() as u64) as usize;
            close(fds.swap_remove(k));
        }
    }
    for fd in fds {
        close(fd);
    }
    ensure!(
        successes > 1000,
        "only {successes} payloads were accepted: the sweep is not reaching the commands"
    );
    println!("rmlx5-abi-tests: sweep accepted {successes} of 100000 payloads");
    Ok(())
}

/// Random object sequences: create, destroy out of order, close channel
/// fds in the middle, map and unmap random offsets, close the context.
fn sweep_random_objects() -> TestResult {
    let mut rng = Rng(0x0b1e_c7ed);
    for round in 0..20usize {
        let ctx = Ctx::open_test(round % 2)?;
        // A UAR page that is a device's BAR is mapped but never touched
        // (a store there is a doorbell).
        let uar_is_memory = !ctx.uar_doorbells()?;
        let mem = Map::anon(16 * PAGE, RW).map_err(|e| format!("{e}"))?;
        let mut pds = Vec::new();
        let mut cqs: Vec<CreateCq> = Vec::new();
        let mut qps: Vec<CreateQp> = Vec::new();
        let mut mrs = Vec::new();
        let mut chans: Vec<RawFd> = Vec::new();
        let mut maps = Vec::new();
        for _ in 0..1000 {
            let r = match rng.below(12) {
                0 => ctx.alloc_pd().map(|h| pds.push(h)),
                1 => {
                    let ch = if chans.is_empty() || rng.below(3) == 0 {
                        -1
                    } else {
                        chans[rng.below(chans.len() as u64) as usize]
                    };
                    ctx.create_cq(1 + rng.below(300) as u32, ch, rng.next_u64())
                        .map(|c| cqs.push(c))
                }
                2 if !pds.is_empty() && !cqs.is_empty() => {
                    let pd = pds[rng.below(pds.len() as u64) as usize];
                    let s = cqs[rng.below(cqs.len() as u64) as usize].cq_handle;
                    let r = cqs[rng.below(cqs.len() as u64) as usize].cq_handle;
                    ctx.create_qp(pd, s, r).map(|q| qps.push(q))
                }
                3 if !pds.is_empty() => {
                    let pd = pds[rng.below(pds.len() as u64) as usize];
                    let off = rng.below(8 * PAGE as u64);
                    ctx.reg_mr(
                        pd,
                        mem.addr() + off,
                        1 + rng.below(8 * PAGE as u64),
                        ACCESS_LOCAL_WRITE,
                    )
                    .map(|m| mrs.push(m.mr_handle))
                }
                4 => ctx.channel().map(|fd| chans.push(fd)),
                5 if !chans.is_empty() => {
                    close(chans.swap_remove(rng.below(chans.len() as u64) as usize));
                    Ok(())
                }
                6 if !qps.is_empty() => {
                    let q = qps.swap_remove(rng.below(qps.len() as u64) as usize);
                    ctx.destroy(Command::DestroyQp, q.qp_handle).map(|_| ())
                }
                7 if !cqs.is_empty() => {
                    let k = rng.below(cqs.len() as u64) as usize;
                    match ctx.destroy(Command::DestroyCq, cqs[k].cq_handle) {
                        Ok(_) => {
                            cqs.swap_remove(k);
                            Ok(())
                        }
                        Err(e) => Err(e),
                    }
                }
                8 if !pds.is_empty() => {
                    let k = rng.below(pds.len() as u64) as usize;
                    match ctx.destroy(Command::DeallocPd, pds[k]) {
                        Ok(_) => {
                            pds.swap_remove(k);
                            Ok(())
                        }
                        Err(e) => Err(e),
                    }
                }
                9 if !mrs.is_empty() => {
                    let h = mrs.swap_remove(rng.below(mrs.len() as u64) as usize);
                    ctx.destroy(Command::DeregMr, h).map(|_| ())
                }
                10 => {
                    let kind = [
                        Kind::Uar,
                        Kind::CqBuf,
                        Kind::CqDbr,
                        Kind::QpBuf,
                        Kind::QpDbr,
                    ][rng.below(5) as usize];
                    let off = encode(kind, rng.below(12) as u32).unwrap_or(0)
                        + if rng.below(10) == 0 { PAGE as u64 } else { 0 };
                    let len = PAGE * (1 + rng.below(8) as usize);
                    let touch = uar_is_memory || kind != Kind::Uar;
                    ctx.map_rw(off, len).map(|m| maps.push((m, touch)))
                }
                11 if !maps.is_empty() => {
                    let (m, touch) = maps.swap_remove(rng.below(maps.len() as u64) as usize);
                    if touch {
                        m.touch();
                    }
                    Ok(())
                }
                _ => Ok(()),
            };
            if let Err(e) = r {
                ensure!(allowed(e), "round {round}: errno {e}");
            }
        }
        // Close in a random order relative to the context.
        if rng.below(2) == 0 {
            for fd in chans.drain(..) {
                close(fd);
            }
            drop(ctx);
        } else {
            drop(ctx);
            for fd in chans.drain(..) {
                close(fd);
            }
        }
        for (m, _) in maps.iter().filter(|(_, touch)| *touch) {
            m.touch();
        }
    }
    Ok(())
}

fn hdr_sizes_reported() -> TestResult {
    // Every command refuses a header one byte short of its struct.
    let ctx = Ctx::open_test(0)?;
    for c in Command::ALL {
        let mut buf = vec![0u8; 256];
        let s = (c.min_size() - 1) as u32;
        buf[..4].copy_from_slice(&s.to_ne_bytes());
        expect_err(
            "short header",
            ctx.raw(c.cmd(), buf.as_mut_ptr()),
            libc::EINVAL,
        )?;
        buf[..4].copy_from_slice(&4097u32.to_ne_bytes());
        expect_err(
            "long header",
            ctx.raw(c.cmd(), buf.as_mut_ptr()),
            libc::E2BIG,
        )?;
    }
    let _ = AllocPd::default().hdr_mut();
    Ok(())
}

fn main() {
    std::process::exit(run_all(&[
        Test {
            name: "abi_query_device_and_port",
            run: query_device_and_port,
        },
        Test {
            name: "abi_argument_size_rules",
            run: argument_size_rules,
        },
        Test {
            name: "abi_hdr_sizes_reported",
            run: hdr_sizes_reported,
        },
        Test {
            name: "abi_pd_lifecycle",
            run: pd_lifecycle,
        },
        Test {
            name: "abi_reg_mr_rules",
            run: reg_mr_rules,
        },
        Test {
            name: "abi_reg_mr_memlock_limit",
            run: reg_mr_memlock_limit,
        },
        Test {
            name: "abi_comp_channel_file",
            run: comp_channel_file,
        },
        Test {
            name: "abi_async_event_file",
            run: async_event_file,
        },
        Test {
            name: "abi_cq_create_destroy",
            run: cq_create_destroy,
        },
        Test {
            name: "abi_mmap_rules",
            run: mmap_rules,
        },
        Test {
            name: "abi_qp_create_query_destroy",
            run: qp_create_query_destroy,
        },
        Test {
            name: "abi_close_ordering",
            run: close_ordering,
        },
        Test {
            name: "abi_process_exit_mid_use",
            run: process_exit_mid_use,
        },
        Test {
            name: "abi_threads_share_a_context",
            run: threads_share_a_context,
        },
        Test {
            name: "abi_sweep_random_payloads",
            run: sweep_random_payloads,
        },
        Test {
            name: "abi_sweep_random_objects",
            run: sweep_random_objects,
        },
    ]));
}
