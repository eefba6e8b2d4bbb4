// SPDX-License-Identifier: GPL-2.0

//! The fuzzer's concurrent windows: one thread destroys objects and
//! closes the device file while another uses them.
//!
//! On a ConnectX function (`WindowPlan::function`) the user thread stores
//! nothing to the UAR page (the function's registers, where a stray byte
//! is a refused doorbell) and takes no QP to RTS (a QP in RTR may have
//! been moved to ERR by traffic of the main thread's QPs, which can name
//! its number; RTR2RTS would then meet a firmware that refuses it), and
//! KICK is refused with `EOPNOTSUPP`.

use std::collections::BTreeMap;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmlx5_abi::ioctl::Command;
use rmlx5_abi::mmap::{encode, Kind};
use rmlx5_abi::uapi::*;

use crate::expect::{bit, bits, documented, function_only};
use crate::fuzz::Tally;
use crate::knobs::Gen;
use crate::sys::{
    close_fd, errno_name, mmap_fd, munmap, open_dev, peek, poke, raw_call, set_nonblock, Res, PAGE,
    RW,
};

pub(crate) struct WindowPlan {
    pub(crate) dev: u32,
    /// The LID of the device's port (a QP's peer on it).
    pub(crate) lid: u32,
    /// The device is a ConnectX function (see the module documentation).
    pub(crate) function: bool,
    pub(crate) seed_a: u64,
    pub(crate) seed_b: u64,
    pub(crate) ops: u64,
    pub(crate) arena: u64,
}

/// What the window's setup created (handles and sizes), for both threads.
struct WindowObjs {
    fd: RawFd,
    chans: Vec<RawFd>,
    cq_bufs: BTreeMap<u32, u64>,
    qp_bufs: BTreeMap<u32, (u64, u32)>,
    qpns: Vec<u32>,
}

/// Checks a result of a window thread: any documented errno, plus EBADF
/// and ENOTTY once the device file may have been closed (its number may
/// even name a new channel), plus on a function what its commands refuse
/// besides.
fn window_check(
    t: &mut Tally,
    what: &str,
    cmd: Command,
    r: Result<(), i32>,
    function: bool,
) -> Res {
    t.note(r);
    if let Err(e) = r {
        let mut allowed = documented(Some(cmd)) | bits(&[libc::EBADF, libc::ENOTTY]);
        if function {
            allowed |= function_only(cmd);
        }
        if allowed & bit(e) == 0 {
            return Err(format!(
                "{what}: {cmd:?} failed with undocumented {}",
                errno_name(e)
            ));
        }
    }
    Ok(())
}

fn window_setup(p: &WindowPlan, t: &mut Tally) -> Result<WindowObjs, String> {
    let fd = open_dev(p.dev)?;
    t.note(Ok(()));
    let mut o = WindowObjs {
        fd,
        chans: Vec::new(),
        cq_bufs: BTreeMap::new(),
        qp_bufs: BTreeMap::new(),
        qpns: Vec::new(),
    };
    let e = |what: &str, e: i32| format!("window setup: {what}: {}", errno_name(e));
    for _ in 0..2 {
        let a = raw_call(
            fd,
            Command::CreateCompChannel,
            &CreateCompChannel::default(),
        )
        .map_err(|x| e("channel", x))?;
        set_nonblock(a.fd);
        o.chans.push(a.fd);
        t.note(Ok(()));
    }
    let mut pds = Vec::new();
    for _ in 0..3 {
        pds.push(
            raw_call(fd, Command::AllocPd, &AllocPd::default())
                .map_err(|x| e("pd", x))?
                .pd_handle,
        );
        t.note(Ok(()));
    }
    let mut cqs = Vec::new();
    for i in 0..6 {
        let a = CreateCq {
            user_handle: i,
            cqe: 64,
            channel_fd: o.chans.get(i as usize % 3).copied().unwrap_or(-1),
            ..CreateCq::default()
        };
        let r = raw_call(fd, Command::CreateCq, &a).map_err(|x| e("cq", x))?;
        o.cq_bufs.insert(r.cq_handle, r.buf_size);
        cqs.push(r.cq_handle);
        t.note(Ok(()));
    }
    for i in 0..3u64 {
        let a = RegMr {
            addr: p.arena + i * 4 * PAGE as u64,
            length: 4 * PAGE as u64,
            iova: p.arena,
            pd_handle: pds.get(i as usize).copied().unwrap_or(0),
            access: ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ,
            ..RegMr::default()
        };
        raw_call(fd, Command::RegMr, &a).map_err(|x| e("mr", x))?;
        t.note(Ok(()));
    }
    for i in 0..4usize {
        let a = CreateQp {
            pd_handle: pds.get(i % 3).copied().unwrap_or(0),
            send_cq_handle: cqs.get(i).copied().unwrap_or(0),
            recv_cq_handle: cqs.get(i + 1).copied().unwrap_or(0),
            qp_type: QPT_RC,
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 32,
            ..CreateQp::default()
        };
        let r = raw_call(fd, Command::CreateQp, &a).map_err(|x| e("qp", x))?;
        o.qp_bufs.insert(r.qp_handle, (r.buf_size, r.bf_offset));
        o.qpns.push(r.qpn);
        t.note(Ok(()));
    }
    Ok(o)
}

/// The destroying thread: destroys random handles, closes the first
/// channel, then the device file, and keeps going. Returns whether it
/// closed the device file.
fn window_destroyer(
    o: &WindowObjs,
    seed: u64,
    ops: u64,
    function: bool,
) -> Result<(Tally, bool), String> {
    let mut g = Gen::new(seed);
    let mut t = Tally::default();
    let close_chan_at = ops / 3;
    let close_at = ops / 2 + g.below(ops / 2);
    let mut closed = false;
    for i in 0..ops {
        if i == close_chan_at {
            if let Some(ch) = o.chans.first() {
                let r = close_fd(*ch);
                t.note(r);
            }
        }
        if i == close_at {
            t.note(close_fd(o.fd));
            closed = true;
        }
        let cmd = g
            .pick(&[
                Command::DestroyQp,
                Command::DestroyQp,
                Command::DestroyCq,
                Command::DeregMr,
                Command::DeallocPd,
            ])
            .unwrap_or(Command::DestroyQp);
        let d = Destroy {
            handle: 1 + g.below32(8),
            ..Destroy::default()
        };
        let r = raw_call(o.fd, cmd, &d).map(|_| ());
        window_check(&mut t, "destroyer", cmd, r, function)?;
        if g.chance(1, 4) {
            std::thread::yield_now();
        }
    }
    Ok((t, closed))
}

/// The using thread: creates, modifies, kicks, maps and touches whatever
/// the handles name at the moment. Returns its tally, the channel fds it
/// created and its mappings (address, length, whether a device's page).
fn window_user(
    p: &WindowPlan,
    o: &WindowObjs,
    t: &mut Tally,
    fds: &mut Vec<RawFd>,
    maps: &mut Vec<(usize, usize, bool)>,
) -> Res {
    let mut g = Gen::new(p.seed_a);
    let fd = o.fd;
    let f = p.function;
    for _ in 0..p.ops {
        let h = 1 + g.below32(8);
        match g.below(12) {
            0 => {
                let a = CreateQp {
                    pd_handle: 1 + g.below32(4),
                    send_cq_handle: h,
                    recv_cq_handle: 1 + g.below32(8),
                    qp_type: QPT_RC,
                    max_send_wr: 8,
                    max_recv_wr: 8,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    ..CreateQp::default()
                };
                let r = raw_call(fd, Command::CreateQp, &a).map(|_| ());
                window_check(t, "user", Command::CreateQp, r, f)?;
            }
            1 | 2 => {
                let mut m = ModifyQp {
                    qp_handle: h,
                    attr_mask: QP_STATE,
                    ..ModifyQp::default()
                };
                // No RTS on a function (the module documentation): ERR.
                let step = match g.below(5) {
                    2 if f => 3,
                    s => s,
                };
                match step {
                    0 => {
                        m.qp_state = QPS_INIT;
                        m.attr_mask |= QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS;
                        m.port_num = 1;
                        m.qp_access_flags = ACCESS_ALL & !ACCESS_LOCAL_WRITE;
                    }
                    1 => {
                        m.qp_state = QPS_RTR;
                        m.attr_mask |= QP_AV
                            | QP_PATH_MTU
                            | QP_DEST_QPN
                            | QP_RQ_PSN
                            | QP_MAX_DEST_RD_ATOMIC
                            | QP_MIN_RNR_TIMER;
                        m.dlid = p.lid;
                        m.path_mtu = MTU_4096;
                        m.dest_qp_num = g.pick(&o.qpns).unwrap_or(0x100);
                        m.max_dest_rd_atomic = 1;
                        m.min_rnr_timer = 12;
                    }
                    2 => {
                        m.qp_state = QPS_RTS;
                        m.attr_mask |= QP_TIMEOUT
                            | QP_RETRY_CNT
                            | QP_RNR_RETRY
                            | QP_SQ_PSN
                            | QP_MAX_QP_RD_ATOMIC;
                        m.timeout = 10;
                        m.retry_cnt = 1;
                        m.rnr_retry = 1;
                        m.max_rd_atomic = 1;
                    }
                    3 => m.qp_state = QPS_ERR,
                    _ => m.qp_state = QPS_RESET,
                }
                let r = raw_call(fd, Command::ModifyQp, &m).map(|_| ());
                window_check(t, "user", Command::ModifyQp, r, f)?;
            }
            3 => {
                let a = QueryQp {
                    qp_handle: h,
                    ..QueryQp::default()
                };
                let r = raw_call(fd, Command::QueryQp, &a).map(|_| ());
                window_check(t, "user", Command::QueryQp, r, f)?;
            }
            4 | 5 => {
                let (kind, off) = match g.below(3) {
                    0 => (KICK_CQ_ARM, 0),
                    1 => (KICK_RECV, 0),
                    _ => {
                        let bf = o.qp_bufs.get(&h).map_or(0x800 + (h % 4) * 512, |q| q.1);
                        (
                            g.pick(&[KICK_SEND, KICK_SEND_BLUEFLAME])
                                .unwrap_or(KICK_SEND),
                            bf + g.below32(2) * 256,
                        )
                    }
                };
                let k = Kick {
                    kind,
                    handle: h,
                    uar_offset: off,
                    ..Kick::default()
                };
                let r = raw_call(fd, Command::Kick, &k).map(|_| ());
                window_check(t, "user", Command::Kick, r, f)?;
            }
            6 | 7 => {
                let kind = g
                    .pick(&[
                        Kind::Uar,
                        Kind::CqBuf,
                        Kind::CqDbr,
                        Kind::QpBuf,
                        Kind::QpDbr,
                    ])
                    .unwrap_or(Kind::Uar);
                let len = match kind {
                    Kind::CqBuf => o.cq_bufs.get(&h).copied().unwrap_or(PAGE as u64) as usize,
                    Kind::QpBuf => o.qp_bufs.get(&h).map_or(PAGE as u64, |q| q.0) as usize,
                    _ => PAGE,
                };
                let hh = if kind == Kind::Uar { 0 } else { h };
                let r = mmap_fd(fd, encode(kind, hh).unwrap_or(0), len, RW, libc::MAP_SHARED);
                t.note(r.map(|_| ()));
                match r {
                    Ok(addr) => {
                        // A function's UAR page is its registers, not
                        // memory: nothing is stored there.
                        let device = f && kind == Kind::Uar;
                        if !device {
                            // SAFETY: our new writable mapping of `len`
                            // bytes.
                            unsafe { poke(addr + g.index(len), &[0xa5]) };
                        }
                        maps.push((addr, len, device));
                    }
                    Err(e) => {
                        let allowed =
                            bits(&[libc::EINVAL, libc::EBADF, libc::ENODEV, libc::EACCES]);
                        if allowed & bit(e) == 0 {
                            return Err(format!("user: mmap {kind:?} {hh}: {}", errno_name(e)));
                        }
                    }
                }
            }
            8 => {
                let a = CreateCq {
                    cqe: 32,
                    channel_fd: g.pick(&o.chans).unwrap_or(-1),
                    ..CreateCq::default()
                };
                let r = raw_call(fd, Command::CreateCq, &a).map(|_| ());
                window_check(t, "user", Command::CreateCq, r, f)?;
            }
            9 => {
                let a = RegMr {
                    addr: p.arena,
                    length: PAGE as u64,
                    iova: 0,
                    pd_handle: 1 + g.below32(4),
                    access: ACCESS_LOCAL_WRITE,
                    ..RegMr::default()
                };
                let r = raw_call(fd, Command::RegMr, &a).map(|_| ());
                window_check(t, "user", Command::RegMr, r, f)?;
            }
            10 => {
                let r = raw_call(
                    fd,
                    Command::CreateCompChannel,
                    &CreateCompChannel::default(),
                );
                if let Ok(a) = r {
                    fds.push(a.fd);
                }
                window_check(t, "user", Command::CreateCompChannel, r.map(|_| ()), f)?;
            }
            _ => {
                let cmd = g
                    .pick(&[Command::DestroyQp, Command::DestroyCq, Command::AllocPd])
                    .unwrap_or(Command::DestroyQp);
                let r = if cmd == Command::AllocPd {
                    raw_call(fd, cmd, &AllocPd::default()).map(|_| ())
                } else {
                    raw_call(
                        fd,
                        cmd,
                        &Destroy {
                            handle: h,
                            ..Destroy::default()
                        },
                    )
                    .map(|_| ())
                };
                window_check(t, "user", cmd, r, f)?;
            }
        }
    }
    Ok(())
}

/// Runs one concurrent window; everything it opened is closed and
/// unmapped before it returns.
pub(crate) fn window(p: &WindowPlan) -> Result<Tally, String> {
    let mut t = Tally::default();
    let o = Arc::new(window_setup(p, &mut t)?);
    let ob = o.clone();
    let (seed_b, ops, function) = (p.seed_b, p.ops, p.function);
    let b = std::thread::spawn(move || window_destroyer(&ob, seed_b, ops, function));
    let mut fds = Vec::new();
    let mut maps = Vec::new();
    let a = window_user(p, &o, &mut t, &mut fds, &mut maps);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !b.is_finished() {
        if Instant::now() > deadline {
            return Err("the destroying thread is stuck (60 s)".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let br = b
        .join()
        .map_err(|_| "the destroying thread panicked".to_string())?;
    let closed = br.as_ref().map(|r| r.1).unwrap_or(false);
    if !closed {
        let _ = close_fd(o.fd);
    }
    for ch in o.chans.iter().skip(1) {
        let _ = close_fd(*ch);
    }
    if br.is_err() {
        if let Some(ch) = o.chans.first() {
            let _ = close_fd(*ch);
        }
    }
    for fd in fds {
        let _ = close_fd(fd);
    }
    for (addr, len, device) in maps {
        if device {
            let _ = munmap(addr, len);
            continue;
        }
        // SAFETY: our writable mapping; the pages stay valid after the
        // objects and the context are gone.
        let back = unsafe {
            poke(addr, &[0x3c]);
            peek(addr, 1)
        };
        let _ = munmap(addr, len);
        if back != [0x3c] {
            return Err("a mapping changed under us after its object was destroyed".into());
        }
    }
    a?;
    let (bt, _) = br?;
    t.merge(&bt);
    Ok(t)
}
