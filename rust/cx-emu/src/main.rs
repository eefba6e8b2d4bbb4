// SPDX-License-Identifier: GPL-2.0

//! rmlx5-cx-emu: an emulated ConnectX-5 PCI function for QEMU.
//!
//! The process is a vfio-user server: QEMU (10.1 or later) started with
//! `-device vfio-user-pci,socket=<path>` shows the guest a PCI function
//! 15b3:1017 whose BAR0 holds the mlx5 initialization segment and UAR
//! pages, with MSI-X interrupts and DMA into guest memory. Behind it runs
//! `rust/hca-model`, unchanged: its firmware (`fw::Firmware`, the command
//! interface and page management) in front of one HCA instance, in one
//! fabric of one. Documentation/cx-emu.md describes the whole route.
//!
//! With `--functions N` (2 to 8) the process is a card of N functions on
//! one fabric (`card.rs`): function `i` is served on its own socket, PATH
//! for function 0 and PATH.i for the others (QEMU attaches one
//! `vfio-user-pci` device to each), has its own firmware and HCA instance
//! `i` (LID `i + 1`), and RC traffic runs between the functions' QPs.
//!
//! ```text
//! rmlx5-cx-emu --socket PATH [--functions N] [--msix N] [--bf-idle-us N] [--fail-opcode OP [--fail-count N]] [--never-ready] [--slow-opcode OP:MS] [--cmd-latency-us N] [-v]... [-q]
//!
//! `--fail-opcode` makes the firmware fail the first `--fail-count`
//! (default 1) commands with that opcode (a test of the driver's error
//! path); those refusals are counted apart and do not fail the run.
//! `--never-ready` keeps `initializing` set forever (a firmware hung in
//! its initialisation: the driver must give up after its timeout).
//! `--slow-opcode OP:MS` holds every command with that opcode MS
//! milliseconds before running it (a busy firmware), while the queues,
//! doorbells and interrupts go on. `--cmd-latency-us N` makes every
//! command take N µs, as a card's firmware does (by default the emulator
//! runs a command within its doorbell write).
//! ```
//!
//! A test in the guest injects faults (fatal error, silent hang, a stuck
//! command) and port changes through BAR0's test register page
//! (`testreg.rs`), and resets the function with an FLR (the Advanced
//! Features capability, `pci.rs`); neither counts against the guest.
//!
//! The socket appears at PATH once it accepts a connection (with several
//! functions, PATH appears last, once every socket does); the process
//! serves one client per function and exits when they have disconnected:
//! 0 if the guest did nothing wrong, 1 if anything was refused on any
//! function (a command, a doorbell, a DMA outside guest memory, a store
//! where no register is, a vfio-user message), an EQE was dropped (an EQ
//! overrun) or a function never got its client, 2 if it could not start.
//! The log goes to stderr.

mod bar0;
mod blueflame;
mod bus;
mod card;
mod dma;
mod function;
mod log;
mod pci;
mod server;
#[cfg(test)]
mod session_tests;
mod storage;
mod testreg;
mod vfio_user;

use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use card::MAX_FUNCTIONS;
use function::Settings;
use log::{error, info};
use server::{Endpoint, Server};

const USAGE: &str = "usage: rmlx5-cx-emu --socket PATH [--functions N] [--msix N] [--bf-idle-us N] [--fail-opcode OP [--fail-count N]] [--never-ready] [--slow-opcode OP:MS] [--cmd-latency-us N] [-v]... [-q]";

struct Args {
    socket: PathBuf,
    functions: usize,
    settings: Settings,
    verbosity: u8,
}

/// The socket of function `i`: PATH for function 0, PATH.i for the others.
fn socket_path(path: &Path, i: usize) -> PathBuf {
    if i == 0 {
        return path.to_path_buf();
    }
    let mut p = path.as_os_str().to_owned();
    p.push(format!(".{i}"));
    PathBuf::from(p)
}

fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut socket = None;
    let mut functions = 1;
    let mut settings = Settings::DEFAULT;
    let mut verbosity = 1u8;
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--socket" => socket = Some(PathBuf::from(value("--socket")?)),
            "--functions" => {
                functions = value("--functions")?
                    .parse()
                    .map_err(|e| format!("--functions: {e}"))?;
                if functions == 0 || functions > MAX_FUNCTIONS {
                    return Err(format!("--functions: 1 to {MAX_FUNCTIONS}"));
                }
            }
            "--msix" => {
                let n: u16 = value("--msix")?
                    .parse()
                    .map_err(|e| format!("--msix: {e}"))?;
                if n == 0 || n > bar0::MAX_MSIX_VECTORS {
                    return Err(format!("--msix: 1 to {}", bar0::MAX_MSIX_VECTORS));
                }
                settings.msix_vectors = n;
            }
            "--bf-idle-us" => {
                let us: u64 = value("--bf-idle-us")?
                    .parse()
                    .map_err(|e| format!("--bf-idle-us: {e}"))?;
                settings.bf_idle = Duration::from_micros(us);
            }
            "--fail-opcode" => {
                let v = value("--fail-opcode")?;
                let op = match v.strip_prefix("0x") {
                    Some(hex) => u16::from_str_radix(hex, 16),
                    None => v.parse(),
                }
                .map_err(|e| format!("--fail-opcode: {e}"))?;
                settings.fail_opcode = op;
                if settings.fail_count == 0 {
                    settings.fail_count = 1;
                }
            }
            "--never-ready" => settings.never_ready = true,
            "--slow-opcode" => {
                // OP:MS, e.g. 0x400:3000 (every CREATE_CQ 3 s longer).
                let v = value("--slow-opcode")?;
                let (op, ms) = v.split_once(':').ok_or("--slow-opcode: OP:MS")?;
                settings.slow_opcode = match op.strip_prefix("0x") {
                    Some(hex) => u16::from_str_radix(hex, 16),
                    None => op.parse(),
                }
                .map_err(|e| format!("--slow-opcode: {e}"))?;
                let ms: u64 = ms.parse().map_err(|e| format!("--slow-opcode: {e}"))?;
                settings.slow = Duration::from_millis(ms);
            }
            "--cmd-latency-us" => {
                let us: u64 = value("--cmd-latency-us")?
                    .parse()
                    .map_err(|e| format!("--cmd-latency-us: {e}"))?;
                settings.cmd_latency = Duration::from_micros(us);
            }
            "--fail-count" => {
                settings.fail_count = value("--fail-count")?
                    .parse()
                    .map_err(|e| format!("--fail-count: {e}"))?;
            }
            "-v" | "--verbose" => verbosity = verbosity.saturating_add(1),
            "-q" | "--quiet" => verbosity = 0,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Args {
        socket: socket.ok_or("--socket is required")?,
        functions,
        settings,
        verbosity,
    })
}

/// Binds the socket under a temporary name and renames it into place, so
/// that PATH exists only once connections are accepted (the guest runner
/// starts QEMU when it appears).
fn listen(path: &Path) -> std::io::Result<UnixListener> {
    if path.exists() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("{} exists (left by an earlier run?)", path.display()),
        ));
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let listener = UnixListener::bind(&tmp)?;
    std::fs::rename(&tmp, path)?;
    Ok(listener)
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("rmlx5-cx-emu: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    log::init(args.verbosity);
    let n = args.functions;
    let tag = |i: usize| (n > 1).then_some(i);
    // The last function's socket first, PATH last: PATH appears once
    // every socket accepts connections.
    let mut endpoints = Vec::new();
    for i in (0..n).rev() {
        let path = socket_path(&args.socket, i);
        match listen(&path) {
            Ok(l) => endpoints.push(Endpoint::Listen(l, path)),
            Err(e) => {
                log::set_function(tag(i));
                error!("cannot listen on {}: {e}", path.display());
                for j in i + 1..n {
                    let _ = std::fs::remove_file(socket_path(&args.socket, j));
                }
                return ExitCode::from(2);
            }
        }
    }
    endpoints.reverse();
    let s = &args.settings;
    if n > 1 {
        info!(
            "{n} functions sharing one fabric: HCA instances 0 to {}, port LIDs 1 to {n}",
            n - 1
        );
    }
    for i in 0..n {
        log::set_function(tag(i));
        info!(
            "ConnectX-5 15b3:1017 on {}: BAR0 32 MiB, {} UARs, {} MSI-X vectors, firmware 16.35.1012",
            socket_path(&args.socket, i).display(),
            s.uars,
            s.msix_vectors
        );
    }
    log::set_function(None);
    let mut server = Server::new(args.settings, endpoints);
    if let Err(e) = server.run() {
        error!("accept: {e}");
        return ExitCode::from(2);
    }
    let mut failed = false;
    let mut protocol_errors = 0;
    for i in 0..n {
        log::set_function(tag(i));
        for line in server.card.summary(i) {
            log::line("summary: ", format_args!("{line}"));
        }
        let errors = server.protocol_errors(i);
        if n > 1 {
            log::line(
                "summary: ",
                format_args!("{errors} vfio-user protocol errors"),
            );
        }
        failed |= server.card.failed(i) || errors != 0;
        protocol_errors += errors;
    }
    log::set_function(None);
    log::line(
        "summary: ",
        format_args!(
            "{} vfio-user protocol errors; {}",
            protocol_errors,
            if failed {
                "FAILED: the guest did something the device refused (see the errors above)"
            } else {
                "ok"
            }
        ),
    );
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Result<Args, String> {
        parse(v.iter().map(|s| s.to_string()))
    }

    #[test]
    fn arguments() {
        let a = args(&["--socket", "/tmp/s", "--msix", "8", "-v", "-v"]).unwrap();
        assert_eq!(a.socket, PathBuf::from("/tmp/s"));
        assert_eq!(a.functions, 1);
        assert_eq!(a.settings.msix_vectors, 8);
        assert_eq!(a.verbosity, 3);
        assert!(args(&["--msix", "8"]).is_err());
        assert!(args(&["--socket", "/tmp/s", "--msix", "0"]).is_err());
        assert!(args(&["--socket", "/tmp/s", "--msix", "257"]).is_err());
        let a = args(&["--socket", "/tmp/s", "--slow-opcode", "0x400:3000"]).unwrap();
        assert_eq!(a.settings.slow_opcode, 0x400);
        assert_eq!(a.settings.slow, Duration::from_millis(3000));
        assert!(args(&["--socket", "/tmp/s", "--slow-opcode", "0x400"]).is_err());
        let a = args(&["--socket", "/tmp/s", "--cmd-latency-us", "50"]).unwrap();
        assert_eq!(a.settings.cmd_latency, Duration::from_micros(50));
        assert!(args(&["--socket", "/tmp/s", "--cmd-latency-us", "x"]).is_err());
        assert!(args(&["--socket"]).is_err());
        assert!(args(&["--socket", "x", "--bogus"]).is_err());
        assert!(
            args(&["--socket", "x", "--never-ready"])
                .unwrap()
                .settings
                .never_ready
        );
        assert!(!args(&["--socket", "x"]).unwrap().settings.never_ready);
    }

    #[test]
    fn several_functions_have_a_socket_each() {
        let a = args(&["--socket", "/tmp/cx.sock", "--functions", "2"]).unwrap();
        assert_eq!(a.functions, 2);
        assert_eq!(socket_path(&a.socket, 0), PathBuf::from("/tmp/cx.sock"));
        assert_eq!(socket_path(&a.socket, 1), PathBuf::from("/tmp/cx.sock.1"));
        assert!(args(&["--socket", "x", "--functions", "0"]).is_err());
        assert!(args(&["--socket", "x", "--functions", "9"]).is_err());
        assert!(args(&["--socket", "x", "--functions"]).is_err());
    }
}
