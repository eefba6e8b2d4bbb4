// SPDX-License-Identifier: GPL-2.0

//! rmlx5-disassoc: what a process sees when the device its context is open
//! on goes away under it (a PCI function's unbind), through the raw ABI.
//!
//! Usage: `rmlx5-disassoc DEVICE [SECONDS]`. Opens `/dev/rmlx5_uverbs<DEVICE>`,
//! takes its async-event file, creates a PD, a CQ on a completion channel
//! and a QP, maps the UAR page and the CQ's buffer, prints `ready`, and
//! waits (at most SECONDS, 120 by default) for the async-event file to
//! report the device fatal. Then it checks, printing one line per check
//! and exiting 1 if any fails:
//! - the UAR mapping takes stores without a signal and reads back what was
//!   stored (it is memory now, not the device's page);
//! - the CQ buffer mapping is still readable;
//! - the async-event file reads `EIO` once the event was taken, and the
//!   completion channel reads `EIO`;
//! - every command (`QUERY_DEVICE`, `DESTROY_QP`) and a new `mmap` of the
//!   UAR page get `EIO`.
//!
//! The caller unbinds the function after `ready` (tests/guest/pci-smoke.sh).

use std::process::ExitCode;
use std::ptr::{read_volatile, write_volatile};

use rmlx5_abi::ioctl::Command;
use rmlx5_abi::mmap::{encode, Kind};
use rmlx5_abi::uapi::*;
use rmlx5_abi::wire::Wire;
use rmlx5_guest_tests::raw::{close, poll_fd, read_fd, set_nonblock, Ctx};

/// What a check found: `Ok` or why not.
type Check = Result<(), String>;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(dev) = args.next().and_then(|a| a.parse::<u32>().ok()) else {
        eprintln!("usage: rmlx5-disassoc DEVICE [SECONDS]");
        return ExitCode::from(2);
    };
    let secs = args
        .next()
        .and_then(|a| a.parse::<i32>().ok())
        .unwrap_or(120);
    match run(dev, secs) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            println!("rmlx5-disassoc: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(dev: u32, secs: i32) -> Result<bool, String> {
    let ctx = Ctx::open(dev)?;
    let mut a = GetAsyncFd::default();
    ctx.call(Command::GetAsyncFd, &mut a)
        .map_err(|e| format!("get_async_fd: errno {e}"))?;
    let async_fd = a.fd;
    let pd = ctx.alloc_pd().map_err(|e| format!("alloc_pd: errno {e}"))?;
    let ch = ctx.channel().map_err(|e| format!("channel: errno {e}"))?;
    let cq = ctx
        .create_cq(64, ch, 1)
        .map_err(|e| format!("create_cq: errno {e}"))?;
    let qp = ctx
        .create_qp(pd, cq.cq_handle, cq.cq_handle)
        .map_err(|e| format!("create_qp: errno {e}"))?;
    let uar_off = encode(Kind::Uar, 0).ok_or("no UAR offset")?;
    let uar = ctx
        .map_rw(uar_off, 4096)
        .map_err(|e| format!("mmap UAR: errno {e}"))?;
    let cq_buf = ctx
        .map_rw(cq.buf_mmap_offset, cq.buf_size as usize)
        .map_err(|e| format!("mmap CQ buffer: errno {e}"))?;
    println!("rmlx5-disassoc: ready on rmlx5_{dev}: QP {}", qp.qpn);

    // The device fatal event, as a provider's async-event thread waits.
    let mut ev = [0u8; AsyncEvent::SIZE];
    let mut waited = 0;
    loop {
        if poll_fd(async_fd, libc::POLLIN, 1000).map_err(|e| format!("poll: errno {e}"))? != 0 {
            break;
        }
        waited += 1;
        if waited >= secs {
            return Err(format!("no async event within {secs} s"));
        }
    }
    read_fd(async_fd, &mut ev).map_err(|e| format!("read async: errno {e}"))?;
    let event = AsyncEvent::read(&ev).ok_or("short async event")?;
    let mut ok = report(
        "device fatal reported",
        if event.event_type == EVENT_DEVICE_FATAL {
            Ok(())
        } else {
            Err(format!("event type {}", event.event_type))
        },
    );

    // Stores to the UAR page: a doorbell and a BlueFlame-sized burst, as a
    // provider unaware of the event would write them. They land in memory.
    let mut stores = Ok(());
    for i in 0..1000u64 {
        let off = if i % 2 == 0 { 0x20 } else { 0x800 };
        // SAFETY: inside our 4 KiB shared mapping of the UAR page.
        unsafe {
            let p = uar.ptr.add(off).cast::<u64>();
            write_volatile(p, 0x5a5a_0000_0000_0000 | i);
            if read_volatile(p) != 0x5a5a_0000_0000_0000 | i {
                stores = Err(format!("store {i} at {off:#x} did not read back"));
            }
        }
    }
    ok &= report("UAR stores land in memory", stores);
    // SAFETY: inside the CQ buffer mapping (`buf_size` bytes).
    let _ = unsafe { read_volatile(cq_buf.ptr.add(cq_buf.len - 1)) };
    ok &= report("CQ buffer still mapped", Ok(()));

    ok &= report("async file then reads EIO", eio_read(async_fd, &mut ev));
    let mut cev = [0u8; 8];
    ok &= report("completion channel reads EIO", eio_read(ch, &mut cev));
    let mut q = QueryDevice::default();
    ok &= report(
        "QUERY_DEVICE gets EIO",
        want_eio(ctx.call(Command::QueryDevice, &mut q)),
    );
    ok &= report(
        "DESTROY_QP gets EIO",
        want_eio(ctx.destroy(Command::DestroyQp, qp.qp_handle).map(|_| ())),
    );
    ok &= report(
        "mmap of the UAR page gets EIO",
        want_eio(ctx.map_rw(uar_off, 4096).map(|_| ())),
    );
    drop(cq_buf);
    drop(uar);
    close(ch);
    close(async_fd);
    drop(ctx);
    println!(
        "rmlx5-disassoc: {}",
        if ok {
            "all checks passed"
        } else {
            "some checks failed"
        }
    );
    Ok(ok)
}

fn report(what: &str, c: Check) -> bool {
    match c {
        Ok(()) => {
            println!("rmlx5-disassoc: ok: {what}");
            true
        }
        Err(e) => {
            println!("rmlx5-disassoc: FAILED: {what}: {e}");
            false
        }
    }
}

fn want_eio(r: Result<(), i32>) -> Check {
    match r {
        Err(libc::EIO) => Ok(()),
        Err(e) => Err(format!("errno {e}")),
        Ok(()) => Err("succeeded".into()),
    }
}

/// The file reports an error to poll (within 5 s), and then a
/// non-blocking read fails with `EIO`.
fn eio_read(fd: i32, buf: &mut [u8]) -> Check {
    let r = poll_fd(fd, libc::POLLIN, 5000).map_err(|e| format!("poll: errno {e}"))?;
    if r & libc::POLLERR == 0 {
        return Err(format!("poll gave {r:#x}, not POLLERR"));
    }
    set_nonblock(fd, true).map_err(|e| format!("O_NONBLOCK: errno {e}"))?;
    want_eio(read_fd(fd, buf).map(|_| ()))
}
