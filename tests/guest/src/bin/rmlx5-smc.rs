// SPDX-License-Identifier: GPL-2.0

//! `rmlx5-smc`: one SMC (AF_SMC) stream connection with a data check, for
//! the guest's SMC-R run over rmlx5's RoCE ib_core devices.
//!
//! ```text
//! rmlx5-smc server <netns file or -> <ipv4> <port>
//!     listens (in that network namespace), prints "ready", takes one
//!     connection, reads to EOF and answers with the byte count and an
//!     FNV-1a hash of what it read
//! rmlx5-smc client <ipv4> <port> <bytes>
//!     connects, sends <bytes> of a pattern, half-closes, checks the answer
//! ```
//!
//! Exits 0 when the data arrived whole, 1 otherwise. The client also asks
//! the kernel (sock_diag for AF_SMC, `smc_diag`) whether its connection ran
//! over SMC-R or fell back to TCP, and prints the mode and, for a
//! fallback, the reason codes (`SMC_CLC_DECL_*`, its own and the peer's).

use std::ffi::CString;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, TcpStream};
use std::os::fd::FromRawFd;

/// `AF_SMC` and `SMCPROTO_SMC` (IPv4) from the kernel's uapi.
const AF_SMC: i32 = 43;
const SMCPROTO_SMC: i32 = 0;

fn fnv1a(h: u64, data: &[u8]) -> u64 {
    data.iter()
        .fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

fn errno() -> String {
    std::io::Error::last_os_error().to_string()
}

fn sockaddr(ip: Ipv4Addr, port: u16) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    }
}

fn smc_socket() -> Result<i32, String> {
    // SAFETY: Plain socket(2).
    let fd = unsafe { libc::socket(AF_SMC, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, SMCPROTO_SMC) };
    if fd < 0 {
        return Err(format!("socket(AF_SMC): {}", errno()));
    }
    Ok(fd)
}

fn enter_netns(path: &str) -> Result<(), String> {
    if path == "-" {
        return Ok(());
    }
    let c = CString::new(path).map_err(|e| e.to_string())?;
    // SAFETY: `c` is NUL-terminated.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(format!("open {path}: {}", errno()));
    }
    // SAFETY: `fd` is a namespace file we just opened.
    let rc = unsafe { libc::setns(fd, libc::CLONE_NEWNET) };
    // SAFETY: `fd` is ours.
    unsafe { libc::close(fd) };
    if rc != 0 {
        return Err(format!("setns {path}: {}", errno()));
    }
    Ok(())
}

fn server(netns: &str, ip: Ipv4Addr, port: u16) -> Result<(), String> {
    enter_netns(netns)?;
    let fd = smc_socket()?;
    let one: i32 = 1;
    let sa = sockaddr(ip, port);
    // SAFETY: Valid option and address buffers of the sizes given.
    let ok = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&raw const one).cast(),
            size_of::<i32>() as libc::socklen_t,
        ) == 0
            && libc::bind(
                fd,
                (&raw const sa).cast(),
                size_of::<libc::sockaddr_in>() as libc::socklen_t,
            ) == 0
            && libc::listen(fd, 1) == 0
    };
    if !ok {
        return Err(format!("bind/listen {ip}:{port}: {}", errno()));
    }
    println!("ready");
    // SAFETY: `fd` listens; no address is asked for.
    let c = unsafe { libc::accept(fd, std::ptr::null_mut(), std::ptr::null_mut()) };
    if c < 0 {
        return Err(format!("accept: {}", errno()));
    }
    // SAFETY: `c` is a connected stream socket we own.
    let mut s = unsafe { TcpStream::from_raw_fd(c) };
    let (mut n, mut h) = (0u64, FNV_START);
    let mut buf = vec![0u8; 65536];
    loop {
        let k = s.read(&mut buf).map_err(|e| format!("read: {e}"))?;
        if k == 0 {
            break;
        }
        n += k as u64;
        h = fnv1a(h, &buf[..k]);
    }
    let mut answer = [0u8; 16];
    answer[..8].copy_from_slice(&n.to_le_bytes());
    answer[8..].copy_from_slice(&h.to_le_bytes());
    s.write_all(&answer).map_err(|e| format!("write: {e}"))?;
    println!("server: {n} bytes received");
    Ok(())
}

/// `SMC_DIAG_MODE_*` and the fallback reasons of the SMC socket whose
/// TCP source port is `sport`, from a sock_diag dump of AF_SMC sockets.
fn smc_mode(sport: u16) -> Result<(u8, u32, u32), String> {
    const NETLINK_SOCK_DIAG: i32 = 4;
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const SMC_DIAG_FALLBACK: u16 = 5;
    const NLMSG_DONE: u16 = 3;
    const NLMSG_ERROR: u16 = 2;
    // SAFETY: Plain socket(2).
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(format!("netlink socket: {}", errno()));
    }
    // nlmsghdr (16 bytes) + smc_diag_req (4 + inet_diag_sockid 48).
    const REQ_LEN: usize = 16 + 52;
    let mut req = [0u8; REQ_LEN];
    req[0..4].copy_from_slice(&(REQ_LEN as u32).to_ne_bytes());
    req[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
    req[6..8].copy_from_slice(&flags.to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    req[16] = AF_SMC as u8;
    // SAFETY: `req` is a valid buffer of its length.
    if unsafe { libc::send(fd, req.as_ptr().cast(), req.len(), 0) } < 0 {
        let e = errno();
        // SAFETY: `fd` is ours.
        unsafe { libc::close(fd) };
        return Err(format!("netlink send: {e}"));
    }
    let mut found = None;
    let mut buf = vec![0u8; 32768];
    'recv: loop {
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n <= 0 {
            break;
        }
        let mut off = 0usize;
        let n = n as usize;
        while off + 16 <= n {
            let h = &buf[off..];
            let len = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) as usize;
            let ty = u16::from_ne_bytes([h[4], h[5]]);
            if len < 16 || off + len > n || ty == NLMSG_DONE || ty == NLMSG_ERROR {
                break 'recv;
            }
            // smc_diag_msg: family, state, mode, shutdown, then the sockid
            // (sport first, big-endian), uid, inode: 64 bytes.
            let m = &h[16..len];
            if m.len() >= 64 && u16::from_be_bytes([m[4], m[5]]) == sport {
                let mode = m[2];
                let (mut reason, mut peer) = (0, 0);
                let mut a = 64usize;
                while a + 4 <= m.len() {
                    let alen = u16::from_ne_bytes([m[a], m[a + 1]]) as usize;
                    let aty = u16::from_ne_bytes([m[a + 2], m[a + 3]]);
                    if alen < 4 || a + alen > m.len() {
                        break;
                    }
                    if aty == SMC_DIAG_FALLBACK && alen >= 12 {
                        reason = u32::from_ne_bytes([m[a + 4], m[a + 5], m[a + 6], m[a + 7]]);
                        peer = u32::from_ne_bytes([m[a + 8], m[a + 9], m[a + 10], m[a + 11]]);
                    }
                    a += alen.next_multiple_of(4);
                }
                found = Some((mode, reason, peer));
            }
            off += len.next_multiple_of(4);
        }
    }
    // SAFETY: `fd` is ours.
    unsafe { libc::close(fd) };
    found.ok_or_else(|| format!("no AF_SMC socket with source port {sport} in the diag dump"))
}

/// The TCP source port of a connected socket.
fn local_port(fd: i32) -> Result<u16, String> {
    let mut sa = sockaddr(Ipv4Addr::UNSPECIFIED, 0);
    let mut len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: `sa` and `len` are writable and sized.
    if unsafe { libc::getsockname(fd, (&raw mut sa).cast(), &mut len) } != 0 {
        return Err(format!("getsockname: {}", errno()));
    }
    Ok(u16::from_be(sa.sin_port))
}

fn client(ip: Ipv4Addr, port: u16, bytes: u64) -> Result<(), String> {
    let fd = smc_socket()?;
    let sa = sockaddr(ip, port);
    // SAFETY: A valid address of the size given.
    let rc = unsafe {
        libc::connect(
            fd,
            (&raw const sa).cast(),
            size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(format!("connect {ip}:{port}: {}", errno()));
    }
    // The mode is settled once connect returns (the handshake chose SMC-R
    // or fell back); ask now, while the socket is surely established.
    let sport = local_port(fd)?;
    match smc_mode(sport) {
        Ok((0, _, _)) => println!("client: mode SMC-R"),
        Ok((1, reason, peer)) => {
            println!("client: mode fallback to TCP, reason {reason:#x}, peer diagnosis {peer:#x}")
        }
        Ok((m, _, _)) => println!("client: mode {m}"),
        Err(e) => println!("client: mode unknown ({e})"),
    }
    // SAFETY: `fd` is a connected stream socket we own.
    let mut s = unsafe { TcpStream::from_raw_fd(fd) };
    let mut h = FNV_START;
    let mut sent = 0u64;
    let mut chunk = vec![0u8; 65536];
    while sent < bytes {
        let k = (bytes - sent).min(chunk.len() as u64) as usize;
        for (i, b) in chunk[..k].iter_mut().enumerate() {
            let at = sent + i as u64;
            *b = (at ^ (at >> 8) ^ (at >> 16)) as u8;
        }
        s.write_all(&chunk[..k])
            .map_err(|e| format!("write: {e}"))?;
        h = fnv1a(h, &chunk[..k]);
        sent += k as u64;
    }
    s.shutdown(Shutdown::Write)
        .map_err(|e| format!("shutdown: {e}"))?;
    let mut answer = [0u8; 16];
    s.read_exact(&mut answer)
        .map_err(|e| format!("read answer: {e}"))?;
    let n = u64::from_le_bytes(answer[..8].try_into().unwrap_or_default());
    let got = u64::from_le_bytes(answer[8..].try_into().unwrap_or_default());
    if n != bytes || got != h {
        return Err(format!(
            "server saw {n} bytes hash {got:#x}, sent {bytes} bytes hash {h:#x}"
        ));
    }
    println!("client: {bytes} bytes sent and confirmed");
    Ok(())
}

fn run(args: &[String]) -> Result<(), String> {
    let parse_ip = |s: &str| s.parse::<Ipv4Addr>().map_err(|e| format!("{s}: {e}"));
    let parse_port = |s: &str| s.parse::<u16>().map_err(|e| format!("{s}: {e}"));
    match args {
        [mode, netns, ip, port] if mode == "server" => {
            server(netns, parse_ip(ip)?, parse_port(port)?)
        }
        [mode, ip, port, bytes] if mode == "client" => client(
            parse_ip(ip)?,
            parse_port(port)?,
            bytes.parse().map_err(|e| format!("{bytes}: {e}"))?,
        ),
        _ => {
            Err("usage: rmlx5-smc server <netns|-> <ip> <port> | client <ip> <port> <bytes>".into())
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = run(&args) {
        eprintln!("rmlx5-smc: {e}");
        std::process::exit(1);
    }
}
