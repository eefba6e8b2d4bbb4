// SPDX-License-Identifier: GPL-2.0

//! Stress scenarios of rmlx5 (`make stress`; at a small smoke scale also
//! `make check`):
//!
//! - `fuzz_ioctl_sequences`: a state-aware generator of uverbs calls. It
//!   keeps a model of every open context (PDs, MRs, CQs with or without a
//!   channel, QPs and their state, channel and async files, mappings),
//!   predicts each call's outcome from it (success, or the errno the
//!   argument rules of Documentation/uverbs.md give), and mixes valid
//!   object graphs with stale, foreign and made-up handles, boundary sizes,
//!   wrong argument sizes, non-zero reserved and "out" fields, random
//!   modify-QP masks, kicks with bad offsets or garbage WQEs, munmap and
//!   close in the middle of use, and windows in which a second thread
//!   destroys what the first one uses. Every errno must be documented for
//!   its command, valid calls must succeed, and the debugfs object tables
//!   must agree with the model and end at their baseline.
//! - `kill_mid_traffic`: helper processes (this program re-executed with
//!   `--stress-child`) run traffic on `rmlx5_0`/`rmlx5_1` in polling and
//!   event mode, or churn raw objects, and are SIGKILLed at random points;
//!   every round the debugfs object counts must return to the baseline.
//! - `no_lost_event`: several CQs on one completion channel, poster threads
//!   posting signaled SEND_IMM and WRITE_IMM, consumer threads running the
//!   arm / wait / ack / poll loop: every completion is polled exactly once
//!   and no armed CQ's event is lost or doubled.
//!
//! Scale: the environment variable `RMLX5_STRESS`, comma-separated
//! `key=value` (`calls`, `seed`, `kills`, `completions`, `threads`,
//! `cqs`, and `scale`, which divides the three counts); the defaults are
//! a smoke scale (`calls=20000 kills=5 completions=200000 threads=4
//! cqs=4`, each scenario well under a minute in a TCG guest); keys of the
//! other parts of `make stress` (`failslab`, `cve_loops`) are ignored,
//! any other key fails the scenarios. Each scenario prints one
//! `@@STRESS` line with its figures; `@@STRESS fuzz seed=S` first, so that
//! `RMLX5_STRESS=seed=S` replays the single-threaded part of a failing run.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};
use std::process::{Child, Command as Process, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmlx5_abi::ioctl::{cmd_nr, iowr, Command, NR_BASE};
use rmlx5_abi::mmap::{decode, encode, Kind, MAX_HANDLE};
use rmlx5_abi::uapi::*;
use rmlx5_abi::wire::Wire;
use rmlx5_guest_tests::raw::errno;
use rmlx5_guest_tests::{ensure, run_all, Test, TestResult};

const PAGE: usize = 4096;
/// Tag of every `user_handle` the fuzzer hands out (the low bits are a
/// serial number naming the object in the model).
const TAG: u64 = 0x5354_0000_0000_0000;
const TAG_MASK: u64 = 0xffff_0000_0000_0000;

// ---------------------------------------------------------------------------
// RMLX5_STRESS

/// Keys `RMLX5_STRESS` may carry for this program.
const KEYS: [&str; 8] = [
    "calls",
    "seed",
    "kills",
    "completions",
    "threads",
    "cqs",
    "scale",
    "inject",
];
/// Keys of other parts of `make stress` (Documentation/reliability.md),
/// accepted and ignored here so that one `RMLX5_STRESS` can serve all.
const OTHER_KEYS: [&str; 2] = ["failslab", "cve_loops"];
/// The count keys `scale` divides.
const COUNTS: [&str; 3] = ["calls", "kills", "completions"];

/// The parsed `RMLX5_STRESS` (only keys that were given).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Scale {
    values: BTreeMap<String, u64>,
}

/// A number in decimal or `0x` hex, `_` allowed between digits.
fn parse_number(v: &str) -> Option<u64> {
    let v = v.replace('_', "");
    match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

impl Scale {
    fn parse(text: &str) -> Result<Scale, String> {
        let mut values = BTreeMap::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("RMLX5_STRESS: `{part}` is not key=value"))?;
            let (k, v) = (k.trim(), v.trim());
            if !KEYS.contains(&k) && !OTHER_KEYS.contains(&k) {
                return Err(format!(
                    "RMLX5_STRESS: unknown key `{k}` (known: {})",
                    KEYS.join(", ")
                ));
            }
            let n = parse_number(v)
                .ok_or_else(|| format!("RMLX5_STRESS: `{k}={v}` is not a number"))?;
            if values.insert(k.to_string(), n).is_some() {
                return Err(format!("RMLX5_STRESS: `{k}` given twice"));
            }
        }
        Ok(Scale { values })
    }

    /// `key`, or `default`; a count (`calls`, `kills`, `completions`) is
    /// divided by `scale` (at least 1 is left).
    fn get(&self, key: &str, default: u64) -> u64 {
        let v = self.values.get(key).copied().unwrap_or(default);
        match self.values.get("scale") {
            Some(d) if *d > 1 && COUNTS.contains(&key) => (v / d).max(1),
            _ => v,
        }
    }

    /// `key` within `lo..=hi`, or an error naming it.
    fn get_in(&self, key: &str, default: u64, lo: u64, hi: u64) -> Result<u64, String> {
        let v = self.get(key, default);
        if (lo..=hi).contains(&v) {
            Ok(v)
        } else {
            Err(format!("RMLX5_STRESS: {key}={v} is outside {lo}..={hi}"))
        }
    }

    /// The given seed, or a random one.
    fn seed(&self) -> u64 {
        self.values.get("seed").copied().unwrap_or_else(random_seed)
    }
}

/// `RMLX5_STRESS` from the environment.
fn scale() -> Result<Scale, String> {
    match std::env::var("RMLX5_STRESS") {
        Ok(s) => Scale::parse(&s),
        Err(std::env::VarError::NotPresent) => Ok(Scale::default()),
        Err(e) => Err(format!("RMLX5_STRESS: {e}")),
    }
}

fn random_seed() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        if f.read_exact(&mut b).is_ok() {
            return u64::from_ne_bytes(b);
        }
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    t ^ u64::from(std::process::id()).rotate_left(32)
}

// ---------------------------------------------------------------------------
// Random numbers (xorshift64*, seeded through splitmix64: never stuck at 0)

struct Gen {
    s: u64,
}

impl Gen {
    fn new(seed: u64) -> Gen {
        let mut z = seed ^ 0x9e37_79b9_7f4a_7c15;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        Gen {
            s: if z == 0 { 1 } else { z },
        }
    }

    fn u64(&mut self) -> u64 {
        self.s ^= self.s >> 12;
        self.s ^= self.s << 25;
        self.s ^= self.s >> 27;
        self.s.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn u32(&mut self) -> u32 {
        (self.u64() >> 32) as u32
    }

    /// Below `n` (0 for `n == 0`).
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.u64() % n
        }
    }

    fn below32(&mut self, n: u32) -> u32 {
        self.below(u64::from(n)) as u32
    }

    fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }

    fn pick<T: Copy>(&mut self, xs: &[T]) -> Option<T> {
        if xs.is_empty() {
            None
        } else {
            xs.get(self.index(xs.len())).copied()
        }
    }
}

// ---------------------------------------------------------------------------
// Errnos and expectations

fn errno_name(e: i32) -> String {
    let n = match e {
        libc::EPERM => "EPERM",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::E2BIG => "E2BIG",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::EMFILE => "EMFILE",
        libc::ENOTTY => "ENOTTY",
        libc::ENOSPC => "ENOSPC",
        libc::ENOENT => "ENOENT",
        libc::EOVERFLOW => "EOVERFLOW",
        _ => return format!("E#{e}"),
    };
    n.to_string()
}

const fn bit(e: i32) -> u128 {
    if e >= 0 && e < 128 {
        1u128 << e
    } else {
        0
    }
}

const fn bits(es: &[i32]) -> u128 {
    let mut m = 0;
    let mut i = 0;
    while i < es.len() {
        m |= bit(es[i]);
        i += 1;
    }
    m
}

/// What a call may return: success (if `ok`) or one of the errnos in
/// `errs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Expect {
    ok: bool,
    errs: u128,
}

impl Expect {
    const OK: Expect = Expect { ok: true, errs: 0 };

    const fn err(e: i32) -> Expect {
        Expect {
            ok: false,
            errs: bit(e),
        }
    }

    const fn ok_or(es: &[i32]) -> Expect {
        Expect {
            ok: true,
            errs: bits(es),
        }
    }

    fn allows(&self, r: Result<(), i32>) -> bool {
        match r {
            Ok(()) => self.ok,
            Err(e) => self.errs & bit(e) != 0,
        }
    }

    fn describe(&self) -> String {
        let mut v = Vec::new();
        if self.ok {
            v.push("success".to_string());
        }
        for e in 0..128 {
            if self.errs & bit(e) != 0 {
                v.push(errno_name(e));
            }
        }
        v.join("|")
    }
}

fn show(r: Result<(), i32>) -> String {
    match r {
        Ok(()) => "success".to_string(),
        Err(e) => errno_name(e),
    }
}

/// The errnos Documentation/uverbs.md allows for `cmd` (`None`: a command
/// number that is not ours).
fn documented(cmd: Option<Command>) -> u128 {
    let Some(cmd) = cmd else {
        return bit(libc::ENOTTY);
    };
    let common = bits(&[libc::EINVAL, libc::E2BIG, libc::EFAULT, libc::ENOTTY]);
    let own: &[i32] = match cmd {
        Command::AllocPd => &[libc::ENOSPC, libc::ENOMEM],
        Command::DeallocPd | Command::DestroyCq => &[libc::EBUSY],
        Command::RegMr => &[libc::ENOMEM, libc::EINTR, libc::ENOSPC],
        Command::CreateCompChannel => &[libc::EMFILE, libc::ENOMEM],
        Command::CreateCq => &[libc::EBADF, libc::ENOMEM, libc::ENOSPC],
        Command::CreateQp => &[libc::ENOMEM, libc::ENOSPC],
        Command::GetAsyncFd => &[libc::EEXIST, libc::EMFILE, libc::ENOMEM],
        _ => &[],
    };
    common | bits(own)
}

/// How a call's argument is presented, beyond its fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// `hdr.size` is the struct's size.
    Plain,
    /// A newer caller's larger struct with a zero tail (`hdr.size`).
    ZeroTail(u32),
    /// Another size encoded in the command number (ignored by the kernel).
    CmdSize(u32),
    /// `hdr.size` below the struct.
    Small(u32),
    /// `hdr.size` above a page.
    Huge(u32),
    /// A larger struct with a non-zero byte at the position given.
    Tail(u32, u32),
    /// Non-zero `hdr.flags`.
    Flags(u32),
    /// A non-zero "out" or reserved field at this byte offset.
    OutField(usize, u32),
    /// The argument pointer is NULL.
    Null,
    /// The argument pointer is a kernel address.
    Kernel,
    /// The argument pointer is an unmapped page.
    Unmapped,
    /// `hdr.size` extends this many bytes into an unmapped page.
    TailFault(u32),
    /// The argument is in read-only memory (the answer cannot be written).
    ReadOnly,
    /// A command number that is not ours.
    WrongCmd(u32),
}

fn shape_errno(s: Shape) -> Option<i32> {
    match s {
        Shape::Small(_) | Shape::Flags(_) | Shape::OutField(..) => Some(libc::EINVAL),
        Shape::Huge(_) | Shape::Tail(..) => Some(libc::E2BIG),
        Shape::Null | Shape::Kernel | Shape::Unmapped | Shape::TailFault(_) => Some(libc::EFAULT),
        Shape::WrongCmd(_) => Some(libc::ENOTTY),
        Shape::Plain | Shape::ZeroTail(_) | Shape::CmdSize(_) | Shape::ReadOnly => None,
    }
}

/// Whether `cmd` writes an answer back (MODIFY_QP and KICK do not).
fn writes_answer(cmd: Command) -> bool {
    !matches!(cmd, Command::ModifyQp | Command::Kick)
}

/// The expectation of a call whose fields alone would give `sem`,
/// presented as `shape`: argument errors come first; a command that
/// succeeds but cannot write its answer fails with EFAULT.
fn combine(shape: Shape, sem: Expect, cmd: Command) -> Expect {
    if let Some(e) = shape_errno(shape) {
        return Expect::err(e);
    }
    if shape == Shape::ReadOnly && writes_answer(cmd) && sem.ok {
        return Expect {
            ok: false,
            errs: sem.errs | bit(libc::EFAULT),
        };
    }
    sem
}

/// Byte offsets of fields that must be zero on input ("out" and reserved
/// fields), per command.
fn out_fields(cmd: Command) -> Vec<usize> {
    use core::mem::offset_of;
    match cmd {
        Command::QueryDevice => vec![
            offset_of!(QueryDevice, fw_ver),
            offset_of!(QueryDevice, max_qp),
            offset_of!(QueryDevice, device_index),
            offset_of!(QueryDevice, reserved),
        ],
        Command::QueryPort => vec![
            offset_of!(QueryPort, state),
            offset_of!(QueryPort, lid),
            offset_of!(QueryPort, reserved),
        ],
        Command::AllocPd => vec![offset_of!(AllocPd, pd_handle), offset_of!(AllocPd, pdn)],
        Command::DeallocPd | Command::DeregMr | Command::DestroyCq | Command::DestroyQp => vec![
            offset_of!(Destroy, reserved),
            offset_of!(Destroy, comp_events_reported),
            offset_of!(Destroy, async_events_reported),
        ],
        Command::RegMr => vec![
            offset_of!(RegMr, mr_handle),
            offset_of!(RegMr, lkey),
            offset_of!(RegMr, rkey),
            offset_of!(RegMr, reserved),
        ],
        Command::CreateCompChannel => vec![
            offset_of!(CreateCompChannel, fd),
            offset_of!(CreateCompChannel, reserved),
        ],
        Command::CreateCq => vec![
            offset_of!(CreateCq, cq_handle),
            offset_of!(CreateCq, cqn),
            offset_of!(CreateCq, cqe_cnt),
            offset_of!(CreateCq, cqe_size),
            offset_of!(CreateCq, reserved),
            offset_of!(CreateCq, buf_mmap_offset),
            offset_of!(CreateCq, buf_size),
            offset_of!(CreateCq, dbr_mmap_offset),
        ],
        Command::CreateQp => {
            let first = offset_of!(CreateQp, qp_handle);
            (first..CreateQp::SIZE).step_by(4).collect()
        }
        Command::QueryQp => {
            let mut v = vec![offset_of!(QueryQp, reserved)];
            v.extend((offset_of!(QueryQp, qp_state)..QueryQp::SIZE).step_by(4));
            v
        }
        Command::Kick => vec![offset_of!(Kick, reserved)],
        Command::GetAsyncFd => vec![offset_of!(GetAsyncFd, fd), offset_of!(GetAsyncFd, reserved)],
        Command::ModifyQp => Vec::new(),
    }
}

/// A command number that is not one of ours: wrong direction, type or
/// number, avoiding the generic VFS ioctls (`FIONBIO`, `FIGETBSZ`, ...).
fn wrong_cmd(gen: &mut Gen, cmd: Command) -> u32 {
    let size = cmd.min_size();
    let nr = cmd_nr(cmd.cmd());
    let candidate = match gen.below(4) {
        0 => {
            let dir = gen.below32(3);
            (cmd.cmd() & !(3 << 30)) | (dir << 30)
        }
        1 => {
            let nr = if gen.chance(1, 2) {
                gen.below32(NR_BASE)
            } else {
                0x8f + gen.below32(0x71)
            };
            iowr(nr, size)
        }
        2 => {
            let ty = gen.pick(&[0x1au32, 0x1c, 0x80, 0xab, 0xfe]).unwrap_or(0x1a);
            (cmd.cmd() & !(0xff << 8)) | (ty << 8)
        }
        _ => {
            let ty = gen.pick(&[0x1au32, 0x33, 0xab, 0xfe]).unwrap_or(0xab);
            (gen.u32() & !(0xff << 8)) | (ty << 8)
        }
    };
    if Command::from_cmd(candidate).is_none() {
        candidate
    } else {
        (iowr(nr, size) & !(0xff << 8)) | (0xab << 8)
    }
}

// ---------------------------------------------------------------------------
// debugfs

/// Objects the kernel lists in debugfs: CQ and QP rows per HCA, DMA
/// registry regions (queue and UAR pages; pinned user MRs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Objects {
    cqs: Vec<u64>,
    qps: Vec<u64>,
    dma_buf: u64,
    user_mr: u64,
}

impl Objects {
    /// Objects above `base`, component by component.
    fn excess_over(&self, base: &Objects) -> u64 {
        let pairs = |a: &[u64], b: &[u64]| -> u64 {
            a.iter()
                .enumerate()
                .map(|(i, v)| v.saturating_sub(b.get(i).copied().unwrap_or(0)))
                .sum()
        };
        pairs(&self.cqs, &base.cqs)
            + pairs(&self.qps, &base.qps)
            + self.dma_buf.saturating_sub(base.dma_buf)
            + self.user_mr.saturating_sub(base.user_mr)
    }

    fn describe(&self) -> String {
        format!(
            "cqs={:?} qps={:?} dma_buf={} user_mr={}",
            self.cqs, self.qps, self.dma_buf, self.user_mr
        )
    }
}

/// Rows of a debugfs table (the first line is the header).
fn table_rows(text: &str) -> u64 {
    text.lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .count() as u64
}

/// A count of the `dma_regions` line of `stats` (`buf`, `kernel_mr`,
/// `user_mr`).
fn dma_field(stats: &str, name: &str) -> Option<u64> {
    let line = stats.lines().find(|l| l.starts_with("dma_regions "))?;
    let toks: Vec<&str> = line.split_whitespace().collect();
    toks.windows(2)
        .find(|w| w.first() == Some(&name))
        .and_then(|w| w.get(1))
        .and_then(|v| v.parse().ok())
}

fn debugfs(dev: usize, file: &str) -> Result<String, String> {
    let path = format!("/sys/kernel/debug/rmlx5/rmlx5_{dev}/{file}");
    std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))
}

/// The number of HCAs (`RMLX5_NUM_HCAS` from /init, else debugfs).
fn num_hcas() -> usize {
    if let Some(n) = std::env::var("RMLX5_NUM_HCAS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        return n.max(1);
    }
    std::fs::read_dir("/sys/kernel/debug/rmlx5")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("rmlx5_"))
                .count()
        })
        .unwrap_or(2)
        .max(1)
}

fn snapshot(n: usize) -> Result<Objects, String> {
    let mut o = Objects::default();
    for dev in 0..n {
        o.cqs.push(table_rows(&debugfs(dev, "cqs")?));
        o.qps.push(table_rows(&debugfs(dev, "qps")?));
    }
    // The DMA registry is the module's, shared by its HCAs.
    let stats = debugfs(0, "stats")?;
    o.dma_buf = dma_field(&stats, "buf").ok_or("stats: no dma_regions buf")?;
    o.user_mr = dma_field(&stats, "user_mr").ok_or("stats: no dma_regions user_mr")?;
    Ok(o)
}

/// The CQ and QP tables of every HCA, for failure messages.
fn dump_tables(n: usize) -> String {
    let mut s = String::new();
    for dev in 0..n {
        for f in ["cqs", "qps"] {
            let t = debugfs(dev, f).unwrap_or_else(|e| e);
            for l in t.lines().skip(1) {
                s.push_str(&format!(" | rmlx5_{dev}/{f}: {l}"));
            }
        }
    }
    s
}

/// The EQs of an HCA that hold EQEs the driver has not consumed while no
/// interrupt is on its way (`model_pi != model_ci`, not armed), from
/// debugfs `eqs`: (eqn, the row).
fn stalled_eqs(text: &str) -> Vec<(u64, String)> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    let col = |name: &str| header.iter().position(|h| *h == name);
    let (Some(eqn), Some(armed), Some(pi), Some(ci)) =
        (col("eqn"), col("armed"), col("model_pi"), col("model_ci"))
    else {
        return Vec::new();
    };
    lines
        .filter_map(|l| {
            let v: Vec<u64> = l
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            let get = |i: usize| v.get(i).copied();
            match (get(eqn), get(armed), get(pi), get(ci)) {
                (Some(n), Some(0), Some(p), Some(c)) if p != c => Some((n, l.to_string())),
                _ => None,
            }
        })
        .collect()
}

/// Checks that no EQ of any HCA stays stalled for `limit`: EQEs pending,
/// the EQ not armed, and its consumer index not moving (an interrupt was
/// lost and nothing will re-arm the EQ).
fn check_eqs(n: usize, limit: Duration) -> Res {
    let start = Instant::now();
    loop {
        let mut stuck = Vec::new();
        for dev in 0..n {
            for (eqn, row) in stalled_eqs(&debugfs(dev, "eqs")?) {
                stuck.push((dev, eqn, row));
            }
        }
        if stuck.is_empty() {
            return Ok(());
        }
        if start.elapsed() > limit {
            let rows: Vec<String> = stuck
                .iter()
                .map(|(d, e, r)| format!("rmlx5_{d} EQ {e}: {r}"))
                .collect();
            return Err(format!(
                "EQ stalled for {limit:?} with EQEs pending and not armed (eqn vector irq ci \
                 armed eqes irqs model_pi model_ci interrupts overruns): {}",
                rows.join("; ")
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits up to `limit` for the objects above `base` to go; returns the
/// last snapshot and whether it is back at the baseline.
fn wait_baseline(base: &Objects, n: usize, limit: Duration) -> Result<(Objects, bool), String> {
    let start = Instant::now();
    loop {
        let now = snapshot(n)?;
        if now.excess_over(base) == 0 {
            return Ok((now, true));
        }
        if start.elapsed() > limit {
            return Ok((now, false));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ---------------------------------------------------------------------------
// Raw system calls

/// `ioctl(fd, cmd, arg)`.
fn ioctl(fd: RawFd, cmd: u32, arg: usize) -> Result<(), i32> {
    // SAFETY: the kernel validates `arg` (only our own buffers, or
    // addresses meant to be refused, are passed); `fd` is a number.
    let rc = unsafe { libc::ioctl(fd, libc::c_ulong::from(cmd), arg) };
    if rc < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// The bytes of `v` with `hdr.size` set to the struct's size.
fn enc<T: Wire>(v: &T) -> Vec<u8> {
    let mut b = vec![0u8; T::SIZE];
    let _ = v.write(&mut b);
    if let Some(s) = b.get_mut(..4) {
        s.copy_from_slice(&(T::SIZE as u32).to_ne_bytes());
    }
    b
}

/// A command with `v`, answered into the returned struct.
fn raw_call<T: Wire>(fd: RawFd, cmd: Command, v: &T) -> Result<T, i32> {
    let mut b = enc(v);
    ioctl(fd, cmd.cmd(), b.as_mut_ptr() as usize)?;
    T::read(&b).ok_or(libc::EINVAL)
}

fn open_dev(dev: u32) -> Result<RawFd, String> {
    let path = format!("/dev/rmlx5_uverbs{dev}\0");
    // SAFETY: a NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        Err(format!(
            "open {}: {}",
            path.trim_end_matches('\0'),
            errno_name(errno())
        ))
    } else {
        Ok(fd)
    }
}

fn close_fd(fd: RawFd) -> Result<(), i32> {
    // SAFETY: closing a descriptor number this program owns.
    if unsafe { libc::close(fd) } < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

fn set_nonblock(fd: RawFd) {
    // SAFETY: fcntl on a descriptor number.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
    }
}

fn mmap_fd(fd: RawFd, offset: u64, len: usize, prot: i32, flags: i32) -> Result<usize, i32> {
    // SAFETY: a new mapping chosen by the kernel; no existing memory is
    // affected.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            prot,
            flags,
            fd,
            offset as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        Err(errno())
    } else {
        Ok(p as usize)
    }
}

fn munmap(addr: usize, len: usize) -> Result<(), i32> {
    // SAFETY: unmapping a mapping this program made and no longer uses.
    if unsafe { libc::munmap(addr as *mut libc::c_void, len) } < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// Stores `bytes` at `addr` byte by byte (volatile).
///
/// # Safety
///
/// `addr..addr + bytes.len()` lies in a writable mapping of this process
/// that nothing in this program borrows.
unsafe fn poke(addr: usize, bytes: &[u8]) {
    for (i, b) in bytes.iter().enumerate() {
        // SAFETY: inside the mapping, as the caller guarantees.
        unsafe { std::ptr::write_volatile((addr + i) as *mut u8, *b) };
    }
}

/// Loads `len` bytes at `addr` (volatile).
///
/// # Safety
///
/// `addr..addr + len` lies in a readable mapping of this process.
unsafe fn peek(addr: usize, len: usize) -> Vec<u8> {
    (0..len)
        // SAFETY: inside the mapping, as the caller guarantees.
        .map(|i| unsafe { std::ptr::read_volatile((addr + i) as *const u8) })
        .collect()
}

/// `poll()` of one descriptor without waiting; the revents.
fn poll_now(fd: RawFd, timeout_ms: i32) -> Result<i16, i32> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    if n < 0 {
        Err(errno())
    } else {
        Ok(p.revents)
    }
}

fn read_fd(fd: RawFd, buf: &mut [u8]) -> Result<usize, i32> {
    // SAFETY: `buf` is valid for its length.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(errno())
    } else {
        Ok(n as usize)
    }
}

// ---------------------------------------------------------------------------
// The fuzzer's model (host-independent: unit-tested on the host)

/// An HCA's limits as QUERY_DEVICE reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct DevLimits {
    max_qp_wr: u32,
    max_sge: u32,
    max_cqe: u32,
    max_inline: u32,
    vectors: u32,
    /// Outstanding reads/atomics as responder (`max_qp_rd_atom`).
    max_rd_atom: u32,
    /// As requester (`max_qp_init_rd_atom`).
    max_init_rd_atom: u32,
    max_mr_size: u64,
}

impl DevLimits {
    /// The values Documentation/uverbs.md gives (for the host tests).
    #[cfg(test)]
    const DOC: DevLimits = DevLimits {
        max_qp_wr: 2048,
        max_sge: 30,
        max_cqe: 65536,
        max_inline: 512,
        vectors: 2,
        max_rd_atom: 16,
        max_init_rd_atom: 16,
        max_mr_size: 1 << 32,
    };

    fn from_query(q: &QueryDevice) -> DevLimits {
        DevLimits {
            max_qp_wr: q.max_qp_wr,
            max_sge: q.max_sge,
            max_cqe: q.max_cqe,
            max_inline: q.max_inline_data,
            vectors: q.num_comp_vectors,
            max_rd_atom: q.max_qp_rd_atom,
            max_init_rd_atom: q.max_qp_init_rd_atom,
            max_mr_size: q.max_mr_size,
        }
    }
}

/// The ring a CREATE_CQ of `cqe` entries gets: entries (a power of two)
/// and whole-page buffer size; `None` if the request is out of range.
fn cq_geometry(cqe: u32, max_cqe: u32) -> Option<(u32, u64)> {
    let n = cqe.checked_next_power_of_two()?;
    if cqe == 0 || n > max_cqe {
        return None;
    }
    let bytes = (u64::from(n) * 64)
        .max(PAGE as u64)
        .next_multiple_of(PAGE as u64);
    Some((n, bytes))
}

/// A QP's queue geometry as CREATE_QP computes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Geom {
    sq_wqe_cnt: u32,
    rq_wqe_cnt: u32,
    rq_wqe_shift: u32,
    sq_buf_offset: u32,
    buf_bytes: u64,
    max_send_wr: u32,
    max_recv_wr: u32,
    max_send_sge: u32,
    max_recv_sge: u32,
}

/// Whether a CREATE_QP's fields pass the argument check (type, caps
/// within the device's limits, `sq_sig_all`).
fn qp_caps_in_range(a: &CreateQp, l: &DevLimits) -> bool {
    a.qp_type == QPT_RC
        && a.max_send_wr <= l.max_qp_wr
        && a.max_recv_wr <= l.max_qp_wr
        && a.max_send_sge <= l.max_sge
        && a.max_recv_sge <= l.max_sge
        && a.max_inline_data <= l.max_inline
        && a.sq_sig_all <= 1
}

/// The geometry of a QP with in-range caps: SQ in 64-byte WQEBBs sized for
/// `max_send_wr` of the largest WQE, RQ of power-of-two stride after it.
fn qp_geometry(a: &CreateQp, l: &DevLimits) -> Option<Geom> {
    let sges = a.max_send_sge.max(1).checked_mul(16)?;
    let inline = a
        .max_inline_data
        .checked_add(4)?
        .checked_next_multiple_of(16)?;
    let wqe = 48u32.checked_add(sges.max(inline))?;
    let per = wqe.div_ceil(64);
    let sq = a
        .max_send_wr
        .max(1)
        .checked_mul(per)?
        .checked_next_power_of_two()?;
    let sq_limit = l.max_qp_wr.checked_mul(per)?.checked_next_power_of_two()?;
    if sq > sq_limit {
        return None;
    }
    let rq = a.max_recv_wr.max(1).checked_next_power_of_two()?;
    if rq > l.max_qp_wr.checked_next_power_of_two()? {
        return None;
    }
    let stride = a
        .max_recv_sge
        .max(1)
        .checked_mul(16)?
        .checked_next_power_of_two()?;
    let sq_off = rq.checked_mul(stride)?.checked_next_multiple_of(64)?;
    let buf = sq_off.checked_add(sq.checked_mul(64)?)?;
    Some(Geom {
        sq_wqe_cnt: sq,
        rq_wqe_cnt: rq,
        rq_wqe_shift: stride.trailing_zeros(),
        sq_buf_offset: sq_off,
        buf_bytes: u64::from(buf),
        max_send_wr: sq / per,
        max_recv_wr: rq,
        max_send_sge: ((per * 64 - 48) / 16).min(l.max_sge),
        max_recv_sge: stride / 16,
    })
}

// Mask bits the ABI does not offer but the state machine's table names.
const QP_EN_SQD_ASYNC_NOTIFY: u32 = 1 << 2;
const QP_ALT_PATH: u32 = 1 << 14;
const QP_PATH_MIG_STATE: u32 = 1 << 18;

/// Required and optional attributes of an RC transition (IB spec table),
/// `None` if it is not allowed.
fn transition(cur: u32, next: u32) -> Option<(u32, u32)> {
    const RESET_INIT_REQ: u32 = QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS;
    const INIT_RTR_REQ: u32 =
        QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN | QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER;
    const INIT_RTR_OPT: u32 = QP_ALT_PATH | QP_ACCESS_FLAGS | QP_PKEY_INDEX;
    const RTR_RTS_REQ: u32 =
        QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_SQ_PSN | QP_MAX_QP_RD_ATOMIC;
    const TO_RTS_OPT: u32 =
        QP_CUR_STATE | QP_ALT_PATH | QP_ACCESS_FLAGS | QP_MIN_RNR_TIMER | QP_PATH_MIG_STATE;
    const SQD_SQD_OPT: u32 = QP_PKEY_INDEX
        | QP_PORT
        | QP_AV
        | QP_ALT_PATH
        | QP_ACCESS_FLAGS
        | QP_TIMEOUT
        | QP_RETRY_CNT
        | QP_RNR_RETRY
        | QP_MAX_QP_RD_ATOMIC
        | QP_MAX_DEST_RD_ATOMIC
        | QP_MIN_RNR_TIMER
        | QP_PATH_MIG_STATE;
    const SQE_RTS_OPT: u32 = QP_CUR_STATE | QP_ACCESS_FLAGS;
    Some(match (cur, next) {
        (_, QPS_RESET) | (_, QPS_ERR) => (0, 0),
        (QPS_RESET, QPS_INIT) => (RESET_INIT_REQ, 0),
        (QPS_INIT, QPS_INIT) => (0, RESET_INIT_REQ),
        (QPS_INIT, QPS_RTR) => (INIT_RTR_REQ, INIT_RTR_OPT),
        (QPS_RTR, QPS_RTS) => (RTR_RTS_REQ, TO_RTS_OPT),
        (QPS_RTS, QPS_RTS) | (QPS_SQD, QPS_RTS) => (0, TO_RTS_OPT),
        (QPS_RTS, QPS_SQD) => (0, QP_EN_SQD_ASYNC_NOTIFY),
        (QPS_SQD, QPS_SQD) => (0, SQD_SQD_OPT),
        (QPS_SQE, QPS_RTS) => (0, SQE_RTS_OPT),
        _ => return None,
    })
}

/// The state a MODIFY_QP of a QP in `cur` leads to, or `None` if it is
/// refused (EINVAL): the ABI's argument check (known mask bits, ranges,
/// attributes outside the mask zero), the peer LID naming an HCA, then the
/// state machine (transition, required and allowed attributes, CUR_STATE).
fn modify_outcome(cur: u32, m: &ModifyQp, l: &DevLimits, num_hcas: u32) -> Option<u32> {
    if m.hdr.flags != 0 || m.attr_mask & !QP_ATTR_MASK_ALL != 0 {
        return None;
    }
    let mask = m.attr_mask;
    let attrs: [(u32, u32, bool); 16] = [
        (QP_STATE, m.qp_state, m.qp_state <= QPS_ERR),
        (QP_CUR_STATE, m.cur_qp_state, m.cur_qp_state <= QPS_ERR),
        (
            QP_PATH_MTU,
            m.path_mtu,
            (1..=MTU_4096).contains(&m.path_mtu),
        ),
        (QP_DEST_QPN, m.dest_qp_num, m.dest_qp_num <= 0xff_ffff),
        (QP_RQ_PSN, m.rq_psn, m.rq_psn <= 0xff_ffff),
        (QP_SQ_PSN, m.sq_psn, m.sq_psn <= 0xff_ffff),
        (
            QP_ACCESS_FLAGS,
            m.qp_access_flags,
            m.qp_access_flags & !ACCESS_ALL == 0,
        ),
        (
            QP_MAX_QP_RD_ATOMIC,
            m.max_rd_atomic,
            m.max_rd_atomic <= l.max_init_rd_atom,
        ),
        (
            QP_MAX_DEST_RD_ATOMIC,
            m.max_dest_rd_atomic,
            m.max_dest_rd_atomic <= l.max_rd_atom,
        ),
        (QP_MIN_RNR_TIMER, m.min_rnr_timer, m.min_rnr_timer <= 31),
        (QP_TIMEOUT, m.timeout, m.timeout <= 31),
        (QP_RETRY_CNT, m.retry_cnt, m.retry_cnt <= 7),
        (QP_RNR_RETRY, m.rnr_retry, m.rnr_retry <= 7),
        (QP_PORT, m.port_num, m.port_num == 1),
        (QP_AV, m.dlid, (1..=0xffff).contains(&m.dlid)),
        (QP_AV, m.sl, m.sl <= 15),
    ];
    for (b, value, in_range) in attrs {
        let ok = if mask & b == 0 { value == 0 } else { in_range };
        if !ok {
            return None;
        }
    }
    if mask & QP_AV != 0 && m.dlid > num_hcas {
        return None;
    }
    let next = if mask & QP_STATE != 0 {
        m.qp_state
    } else {
        cur
    };
    if mask & QP_CUR_STATE != 0 && m.cur_qp_state != cur {
        return None;
    }
    let (req, opt) = transition(cur, next)?;
    let given = mask & !QP_STATE;
    if given & req != req || given & !(req | opt) != 0 {
        return None;
    }
    Some(next)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FdKind {
    /// A device file (the context's id).
    Ctx(usize),
    /// A completion channel (its serial).
    Chan(u64),
    /// An async-event file (the context's id).
    Async(usize),
    /// Anything else (stdio, /dev/null).
    Other,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ObjKind {
    Pd,
    Mr,
    Cq,
    Qp,
}

#[derive(Clone, Debug, Default)]
struct PdM {
    users: u32,
}

#[derive(Clone, Copy, Debug)]
struct MrM {
    pd: u32,
    key: u32,
    addr: u64,
    len: u64,
    access: u32,
}

#[derive(Clone, Debug)]
struct CqM {
    users: u32,
    chan: Option<u64>,
    cqn: u32,
    buf_size: u64,
    serial: u64,
    tainted: bool,
    big: bool,
    /// Completion events read (the low bits are the arm sequence number
    /// the HCA expects).
    events_read: u32,
}

#[derive(Clone, Debug)]
struct QpM {
    pd: u32,
    scq: u32,
    rcq: u32,
    qpn: u32,
    /// The state, or `None` once the QP may change state by itself
    /// (traffic or garbage reached it): then nothing is predicted about it.
    state: Option<u32>,
    buf_size: u64,
    sq_off: u32,
    sq_cnt: u32,
    bf_offset: u32,
    bf_size: u32,
    serial: u64,
    big: bool,
    /// max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline.
    granted: [u32; 5],
    /// The peer named by the last accepted AV and DEST_QPN.
    dest: (u32, u32),
    /// Send WQEBBs this program wrote (garbage or valid WQEs).
    posted: u32,
    rq_cnt: u32,
    rq_shift: u32,
    /// Receive WQEs this program posted.
    recvs: u32,
}

#[derive(Clone, Debug)]
struct CtxM {
    dev: u32,
    fd: Option<RawFd>,
    pds: BTreeMap<u32, PdM>,
    mrs: BTreeMap<u32, MrM>,
    cqs: BTreeMap<u32, CqM>,
    qps: BTreeMap<u32, QpM>,
    async_taken: bool,
    /// Live mappings of the device file (they keep the context alive).
    maps: u32,
}

#[derive(Clone, Debug)]
struct ChanM {
    ctx: usize,
    fd: Option<RawFd>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MapObj {
    Uar,
    Cq(u64),
    Qp(u64),
}

#[derive(Clone, Debug)]
struct MapM {
    ctx: usize,
    addr: usize,
    len: usize,
    kind: Kind,
    obj: MapObj,
    writable: bool,
}

/// What the fuzzer believes the kernel holds for this process.
#[derive(Debug, Default)]
struct Model {
    ctxs: BTreeMap<usize, CtxM>,
    chans: BTreeMap<u64, ChanM>,
    fds: BTreeMap<RawFd, FdKind>,
    maps: Vec<MapM>,
    next_ctx: usize,
    next_serial: u64,
    /// (HCA, QPN) that traffic may reach: a QP with such a number may
    /// change state by itself.
    tainted_qpns: BTreeSet<(u32, u32)>,
}

/// The lowest handle not in `m` (handles are an index plus one, the
/// lowest free slot first).
fn lowest_free<V>(m: &BTreeMap<u32, V>) -> u32 {
    let mut h = 1;
    for k in m.keys() {
        if *k != h {
            break;
        }
        h += 1;
    }
    h
}

impl Model {
    fn serial(&mut self) -> u64 {
        self.next_serial += 1;
        self.next_serial
    }

    fn alive(&self, c: usize) -> bool {
        self.ctxs.contains_key(&c)
    }

    fn open_ctx(&mut self, fd: RawFd, dev: u32) -> usize {
        let c = self.next_ctx;
        self.next_ctx += 1;
        self.ctxs.insert(
            c,
            CtxM {
                dev,
                fd: Some(fd),
                pds: BTreeMap::new(),
                mrs: BTreeMap::new(),
                cqs: BTreeMap::new(),
                qps: BTreeMap::new(),
                async_taken: false,
                maps: 0,
            },
        );
        self.fds.insert(fd, FdKind::Ctx(c));
        c
    }

    /// The device fd was closed: the context goes once no mapping holds it.
    fn close_ctx_fd(&mut self, c: usize) {
        if let Some(x) = self.ctxs.get_mut(&c) {
            if let Some(fd) = x.fd.take() {
                self.fds.remove(&fd);
            }
        }
        self.release_if_unused(c);
    }

    fn release_if_unused(&mut self, c: usize) {
        if self
            .ctxs
            .get(&c)
            .is_some_and(|x| x.fd.is_none() && x.maps == 0)
        {
            self.ctxs.remove(&c);
        }
    }

    fn add_chan(&mut self, c: usize, fd: RawFd) -> u64 {
        let s = self.serial();
        self.chans.insert(
            s,
            ChanM {
                ctx: c,
                fd: Some(fd),
            },
        );
        self.fds.insert(fd, FdKind::Chan(s));
        s
    }

    fn close_chan(&mut self, s: u64) {
        if let Some(ch) = self.chans.get_mut(&s) {
            if let Some(fd) = ch.fd.take() {
                self.fds.remove(&fd);
            }
        }
    }

    fn add_map(&mut self, m: MapM) {
        if let Some(x) = self.ctxs.get_mut(&m.ctx) {
            x.maps += 1;
        }
        self.maps.push(m);
    }

    /// Forgets mapping `i` (already unmapped); the context may go with it.
    fn remove_map(&mut self, i: usize) -> Option<MapM> {
        if i >= self.maps.len() {
            return None;
        }
        let m = self.maps.swap_remove(i);
        if let Some(x) = self.ctxs.get_mut(&m.ctx) {
            x.maps = x.maps.saturating_sub(1);
        }
        self.release_if_unused(m.ctx);
        Some(m)
    }

    /// Whether the object a mapping shows is still alive.
    fn map_target_live(&self, m: &MapM) -> bool {
        let Some(x) = self.ctxs.get(&m.ctx) else {
            return false;
        };
        match m.obj {
            MapObj::Uar => true,
            MapObj::Cq(s) => x.cqs.values().any(|q| q.serial == s),
            MapObj::Qp(s) => x.qps.values().any(|q| q.serial == s),
        }
    }

    fn add_mr(&mut self, c: usize, h: u32, mr: MrM) {
        if let Some(x) = self.ctxs.get_mut(&c) {
            if let Some(pd) = x.pds.get_mut(&mr.pd) {
                pd.users += 1;
            }
            x.mrs.insert(h, mr);
        }
    }

    fn add_qp(&mut self, c: usize, h: u32, qp: QpM) {
        if let Some(x) = self.ctxs.get_mut(&c) {
            if let Some(pd) = x.pds.get_mut(&qp.pd) {
                pd.users += 1;
            }
            for cq in [qp.scq, qp.rcq] {
                if let Some(q) = x.cqs.get_mut(&cq) {
                    q.users += 1;
                }
            }
            x.qps.insert(h, qp);
        }
    }

    /// What destroying `h` of `kind` in context `c` gives.
    fn destroy_expect(&self, c: usize, kind: ObjKind, h: u32) -> Expect {
        let Some(x) = self.ctxs.get(&c) else {
            return Expect::err(libc::EINVAL);
        };
        let users = match kind {
            ObjKind::Pd => x.pds.get(&h).map(|p| p.users),
            ObjKind::Mr => x.mrs.get(&h).map(|_| 0),
            ObjKind::Cq => x.cqs.get(&h).map(|q| q.users),
            ObjKind::Qp => x.qps.get(&h).map(|_| 0),
        };
        match users {
            None => Expect::err(libc::EINVAL),
            Some(0) => Expect::OK,
            Some(_) => Expect::err(libc::EBUSY),
        }
    }

    /// Applies a successful destroy.
    fn destroy(&mut self, c: usize, kind: ObjKind, h: u32) {
        let Some(x) = self.ctxs.get_mut(&c) else {
            return;
        };
        match kind {
            ObjKind::Pd => {
                x.pds.remove(&h);
            }
            ObjKind::Mr => {
                if let Some(mr) = x.mrs.remove(&h) {
                    if let Some(pd) = x.pds.get_mut(&mr.pd) {
                        pd.users = pd.users.saturating_sub(1);
                    }
                }
            }
            ObjKind::Cq => {
                x.cqs.remove(&h);
            }
            ObjKind::Qp => {
                if let Some(qp) = x.qps.remove(&h) {
                    if let Some(pd) = x.pds.get_mut(&qp.pd) {
                        pd.users = pd.users.saturating_sub(1);
                    }
                    for cq in [qp.scq, qp.rcq] {
                        if let Some(q) = x.cqs.get_mut(&cq) {
                            q.users = q.users.saturating_sub(1);
                        }
                    }
                }
            }
        }
    }

    /// What naming `fd` as the channel of a new CQ of context `c` gives
    /// (after the argument check).
    fn channel_expect(&self, c: usize, fd: i32) -> Expect {
        if fd == -1 {
            return Expect::OK;
        }
        match self.fds.get(&fd) {
            None => Expect::err(libc::EBADF),
            Some(FdKind::Chan(s)) if self.chans.get(s).is_some_and(|ch| ch.ctx == c) => Expect::OK,
            Some(_) => Expect::err(libc::EINVAL),
        }
    }

    /// The lowest descriptor number not open.
    fn lowest_free_fd(&self) -> RawFd {
        let mut fd = 0;
        while self.fds.contains_key(&fd) {
            fd += 1;
        }
        fd
    }

    /// The context owning CQ `cqn` of HCA `dev`.
    fn cqn_owner(&self, dev: u32, cqn: u32) -> Option<usize> {
        self.ctxs
            .iter()
            .find(|(_, x)| x.dev == dev && x.cqs.values().any(|q| q.cqn == cqn))
            .map(|(c, _)| *c)
    }

    fn qpn_in_use(&self, dev: u32, qpn: u32) -> bool {
        self.ctxs
            .values()
            .any(|x| x.dev == dev && x.qps.values().any(|q| q.qpn == qpn))
    }

    fn cqn_in_use(&self, dev: u32, cqn: u32) -> bool {
        self.cqn_owner(dev, cqn).is_some()
    }

    /// QP `h` of context `c` may now change state by itself: so may its
    /// peer (it answers there), the QPs sharing its CQs (a CQ overrun
    /// reaches them) and, in turn, theirs.
    fn taint_qp(&mut self, c: usize, h: u32) {
        let mut work = vec![(c, h)];
        while let Some((c, h)) = work.pop() {
            let Some(x) = self.ctxs.get_mut(&c) else {
                continue;
            };
            let dev = x.dev;
            let Some(qp) = x.qps.get_mut(&h) else {
                continue;
            };
            let fresh = qp.state.is_some();
            qp.state = None;
            let (qpn, dest, cqs) = (qp.qpn, qp.dest, [qp.scq, qp.rcq]);
            self.tainted_qpns.insert((dev, qpn));
            if !fresh {
                continue;
            }
            for cq in cqs {
                if let Some(q) = x.cqs.get_mut(&cq) {
                    q.tainted = true;
                }
            }
            for (hh, q) in x.qps.iter() {
                if q.state.is_some() && (cqs.contains(&q.scq) || cqs.contains(&q.rcq)) {
                    work.push((c, *hh));
                }
            }
            if dest.1 != 0 {
                work.extend(self.taint_qpn(dest.0, dest.1));
            }
        }
    }

    /// Marks (dev, qpn) as reachable by traffic; returns the QPs to taint.
    fn taint_qpn(&mut self, dev: u32, qpn: u32) -> Vec<(usize, u32)> {
        self.tainted_qpns.insert((dev, qpn));
        let mut v = Vec::new();
        for (c, x) in self.ctxs.iter() {
            if x.dev != dev {
                continue;
            }
            for (h, q) in x.qps.iter() {
                if q.qpn == qpn && q.state.is_some() {
                    v.push((*c, *h));
                }
            }
        }
        v
    }

    /// CQ `h` of context `c` was written to by this program: its QPs may
    /// change state.
    fn taint_cq(&mut self, c: usize, h: u32) {
        let qps: Vec<u32> = match self.ctxs.get_mut(&c) {
            Some(x) => {
                if let Some(q) = x.cqs.get_mut(&h) {
                    q.tainted = true;
                }
                x.qps
                    .iter()
                    .filter(|(_, q)| q.scq == h || q.rcq == h)
                    .map(|(qh, _)| *qh)
                    .collect()
            }
            None => Vec::new(),
        };
        for qh in qps {
            self.taint_qp(c, qh);
        }
    }

    /// Live CQs and QPs per HCA and MRs overall: what debugfs must show
    /// above its baseline.
    fn counts(&self, n: usize) -> (Vec<u64>, Vec<u64>, u64) {
        let mut cqs = vec![0u64; n];
        let mut qps = vec![0u64; n];
        let mut mrs = 0;
        for x in self.ctxs.values() {
            if let Some(v) = cqs.get_mut(x.dev as usize) {
                *v += x.cqs.len() as u64;
            }
            if let Some(v) = qps.get_mut(x.dev as usize) {
                *v += x.qps.len() as u64;
            }
            mrs += x.mrs.len() as u64;
        }
        (cqs, qps, mrs)
    }

    fn big_cqs(&self) -> usize {
        self.ctxs
            .values()
            .map(|x| x.cqs.values().filter(|q| q.big).count())
            .sum()
    }

    fn big_qps(&self) -> usize {
        self.ctxs
            .values()
            .map(|x| x.qps.values().filter(|q| q.big).count())
            .sum()
    }
}

// ---------------------------------------------------------------------------
// The fuzzer (runs in the guest)

const RW: i32 = libc::PROT_READ | libc::PROT_WRITE;

fn anon(len: usize, prot: i32) -> Result<usize, String> {
    mmap_fd(-1, 0, len, prot, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS)
        .map_err(|e| format!("anonymous mmap: {}", errno_name(e)))
}

fn mprotect(addr: usize, len: usize, prot: i32) -> Result<(), String> {
    // SAFETY: changing the protection of our own anonymous mapping, which
    // no Rust reference points into.
    if unsafe { libc::mprotect(addr as *mut libc::c_void, len, prot) } < 0 {
        Err(format!("mprotect: {}", errno_name(errno())))
    } else {
        Ok(())
    }
}

/// Argument pages: read-write scratch, read-only, inaccessible.
struct ArgMem {
    base: usize,
}

impl ArgMem {
    fn new() -> Result<ArgMem, String> {
        let base = anon(3 * PAGE, RW)?;
        // PROT_NONE rather than unmapped: a later mmap cannot land there.
        mprotect(base + 2 * PAGE, PAGE, libc::PROT_NONE)?;
        mprotect(base + PAGE, PAGE, libc::PROT_READ)?;
        Ok(ArgMem { base })
    }

    fn ro(&self) -> usize {
        self.base + PAGE
    }

    fn hole(&self) -> usize {
        self.base + 2 * PAGE
    }

    /// Copies `bytes` to offset `off` of the read-only page.
    fn put_ro(&self, off: usize, bytes: &[u8]) -> Result<(), String> {
        mprotect(self.ro(), PAGE, RW)?;
        let n = bytes.len().min(PAGE.saturating_sub(off));
        // SAFETY: inside the (now writable) page, `n` bytes from `off`.
        unsafe { poke(self.ro() + off, bytes.get(..n).unwrap_or(&[])) };
        mprotect(self.ro(), PAGE, libc::PROT_READ)
    }
}

impl Drop for ArgMem {
    fn drop(&mut self) {
        let _ = munmap(self.base, 3 * PAGE);
    }
}

const ARENA_RW: usize = 64 * PAGE;
const ARENA_RO: usize = 4 * PAGE;

/// Memory for MRs: read-write pages, a PROT_NONE guard page, read-only
/// pages (never written by anyone: checked at the end).
struct Arena {
    base: usize,
}

impl Arena {
    fn new() -> Result<Arena, String> {
        let base = anon(ARENA_RW + PAGE + ARENA_RO, RW)?;
        mprotect(base + ARENA_RW, PAGE, libc::PROT_NONE)?;
        mprotect(base + ARENA_RW + PAGE, ARENA_RO, libc::PROT_READ)?;
        Ok(Arena { base })
    }

    fn rw(&self) -> u64 {
        self.base as u64
    }

    fn guard(&self) -> u64 {
        (self.base + ARENA_RW) as u64
    }

    fn ro(&self) -> u64 {
        (self.base + ARENA_RW + PAGE) as u64
    }

    fn ro_untouched(&self) -> bool {
        // SAFETY: the read-only pages of our own mapping.
        unsafe { peek(self.ro() as usize, ARENA_RO) }
            .iter()
            .all(|b| *b == 0)
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        let _ = munmap(self.base, ARENA_RW + PAGE + ARENA_RO);
    }
}

/// The result of one issued call.
struct Outcome {
    res: Result<(), i32>,
    /// The answer (the struct's bytes) after a success.
    answer: Vec<u8>,
    /// The command ran although its answer could not be written.
    executed_ro: bool,
}

impl Outcome {
    fn ok(&self) -> bool {
        self.res.is_ok()
    }

    fn answer<T: Wire>(&self) -> Result<T, String> {
        T::read(&self.answer).ok_or_else(|| "short answer".to_string())
    }
}

/// Per-context caps that keep the object graph (and kernel memory) small.
const MAX_CTXS: usize = 4;
const CAP_PDS: usize = 12;
const CAP_MRS: usize = 12;
const CAP_CQS: usize = 16;
const CAP_QPS: usize = 10;
const CAP_CHANS: usize = 4;
const CAP_MAPS: usize = 48;

/// Counters of calls, shared with the concurrent windows.
#[derive(Default)]
struct Tally {
    calls: u64,
    accepted: u64,
    errnos: BTreeMap<i32, u64>,
}

impl Tally {
    fn note(&mut self, r: Result<(), i32>) {
        self.calls += 1;
        match r {
            Ok(()) => self.accepted += 1,
            Err(e) => *self.errnos.entry(e).or_insert(0) += 1,
        }
    }

    fn merge(&mut self, o: &Tally) {
        self.calls += o.calls;
        self.accepted += o.accepted;
        for (e, n) in &o.errnos {
            *self.errnos.entry(*e).or_insert(0) += n;
        }
    }

    fn errno_list(&self) -> String {
        let names: Vec<String> = self.errnos.keys().map(|e| errno_name(*e)).collect();
        format!("{}:{}", names.len(), names.join(","))
    }
}

struct Fuzz {
    gen: Gen,
    seed: u64,
    n: u32,
    lim: Vec<DevLimits>,
    model: Model,
    tally: Tally,
    scratch: Vec<u8>,
    argmem: ArgMem,
    arena: Arena,
    devnull: RawFd,
    log: VecDeque<String>,
    base: Objects,
    next_window: u64,
    next_audit: u64,
    windows: u64,
    /// How often each operation was chosen.
    ops: BTreeMap<&'static str, u64>,
}

type Res = Result<(), String>;

impl Fuzz {
    fn note_log(&mut self, s: String) {
        if self.log.len() >= 24 {
            self.log.pop_front();
        }
        self.log.push_back(s);
    }

    fn fail(&self, what: String) -> String {
        println!("rmlx5-stress: the last calls before the failure:");
        for l in &self.log {
            println!("rmlx5-stress:   {l}");
        }
        format!(
            "call {} (replay with RMLX5_STRESS=seed={}): {}",
            self.tally.calls, self.seed, what
        )
    }

    /// A syscall that is not an ioctl (mmap, read, close, ...): counted,
    /// checked against `expect`.
    fn sys(&mut self, what: String, r: Result<(), i32>, expect: Expect) -> Res {
        self.tally.note(r);
        self.note_log(format!("#{} {what} -> {}", self.tally.calls, show(r)));
        if !expect.allows(r) {
            return Err(self.fail(format!(
                "{what}: got {}, expected {}",
                show(r),
                expect.describe()
            )));
        }
        Ok(())
    }

    /// A random presentation of `cmd`'s argument (a quarter are faulty).
    fn shape(&mut self, cmd: Command) -> Shape {
        let size = cmd.min_size() as u32;
        match self.gen.below(100) {
            0..=69 => Shape::Plain,
            70..=77 => Shape::ZeroTail(size + 1 + self.gen.below32(4096 - size)),
            78..=80 => Shape::CmdSize(self.gen.below32(1 << 14)),
            81..=82 => Shape::Small(self.gen.below32(size)),
            83 => Shape::Huge(if self.gen.chance(1, 2) {
                u32::MAX
            } else {
                4097 + self.gen.below32(1 << 20)
            }),
            84..=85 => {
                let s = size + 1 + self.gen.below32(4096 - size);
                Shape::Tail(s, size + self.gen.below32(s - size))
            }
            86..=87 => Shape::Flags(1 << self.gen.below32(32)),
            88..=90 => {
                let f = out_fields(cmd);
                match self.gen.pick(&f) {
                    Some(off) => Shape::OutField(off, 1 + self.gen.below32(u32::MAX - 1)),
                    None => Shape::Plain,
                }
            }
            91 => Shape::Null,
            92 => Shape::Kernel,
            93 => Shape::Unmapped,
            94 => Shape::TailFault(1 + self.gen.below32(4096 - size)),
            95..=98 => Shape::ReadOnly,
            _ => Shape::WrongCmd(wrong_cmd(&mut self.gen, cmd)),
        }
    }

    /// Issues `cmd` on `fd` with the struct bytes `args` presented as
    /// `shape`, checks the result against `sem` (what the fields alone
    /// give) and the documented errnos, and returns the outcome.
    fn call(
        &mut self,
        fd: RawFd,
        cmd: Command,
        args: &[u8],
        sem: Expect,
        shape: Shape,
        what: &str,
    ) -> Result<Outcome, String> {
        let size = cmd.min_size();
        let expect = combine(shape, sem, cmd);
        let mut cmdno = cmd.cmd();
        let mut in_scratch = true;
        let addr = match shape {
            Shape::ReadOnly => {
                self.argmem.put_ro(0, args)?;
                in_scratch = false;
                self.argmem.ro()
            }
            Shape::TailFault(k) => {
                let mut b = args.to_vec();
                if let Some(s) = b.get_mut(..4) {
                    s.copy_from_slice(&(size as u32 + k).to_ne_bytes());
                }
                let off = PAGE - size;
                self.argmem.put_ro(off, &b)?;
                in_scratch = false;
                self.argmem.ro() + off
            }
            Shape::Null => {
                in_scratch = false;
                0
            }
            Shape::Kernel => {
                in_scratch = false;
                0xffff_8880_0000_0000
            }
            Shape::Unmapped => {
                in_scratch = false;
                self.argmem.hole()
            }
            _ => {
                let total = match shape {
                    Shape::ZeroTail(s) | Shape::Tail(s, _) => s as usize,
                    _ => size,
                }
                .max(size);
                self.scratch.clear();
                self.scratch.resize(total.max(PAGE), 0);
                if let Some(d) = self.scratch.get_mut(..args.len()) {
                    d.copy_from_slice(args);
                }
                let hdr_size = match shape {
                    Shape::ZeroTail(s) | Shape::Tail(s, _) | Shape::Small(s) | Shape::Huge(s) => s,
                    _ => size as u32,
                };
                if let Some(d) = self.scratch.get_mut(..4) {
                    d.copy_from_slice(&hdr_size.to_ne_bytes());
                }
                match shape {
                    Shape::Tail(_, pos) => {
                        if let Some(b) = self.scratch.get_mut(pos as usize) {
                            *b = 0x5a;
                        }
                    }
                    Shape::Flags(f) => {
                        if let Some(d) = self.scratch.get_mut(4..8) {
                            d.copy_from_slice(&f.to_ne_bytes());
                        }
                    }
                    Shape::OutField(off, v) => {
                        if let Some(d) = self.scratch.get_mut(off..off + 4) {
                            d.copy_from_slice(&v.to_ne_bytes());
                        }
                    }
                    Shape::CmdSize(s) => cmdno = iowr(cmd_nr(cmd.cmd()), s as usize),
                    Shape::WrongCmd(c) => cmdno = c,
                    _ => {}
                }
                self.scratch.as_mut_ptr() as usize
            }
        };
        let res = ioctl(fd, cmdno, addr);
        self.tally.note(res);
        self.note_log(format!(
            "#{} fd {fd} {cmd:?} {what} {shape:?} -> {} (expected {})",
            self.tally.calls,
            show(res),
            expect.describe()
        ));
        let doc = if matches!(shape, Shape::WrongCmd(_)) {
            documented(None)
        } else {
            documented(Some(cmd))
        };
        if let Err(e) = res {
            if doc & bit(e) == 0 {
                return Err(self.fail(format!(
                    "{cmd:?} {what} {shape:?}: errno {} is not documented for this command",
                    errno_name(e)
                )));
            }
        }
        if !expect.allows(res) {
            return Err(self.fail(format!(
                "{cmd:?} {what} {shape:?}: got {}, expected {}",
                show(res),
                expect.describe()
            )));
        }
        let answer = if res.is_ok() && in_scratch {
            self.scratch.get(..size).unwrap_or(&[]).to_vec()
        } else {
            Vec::new()
        };
        Ok(Outcome {
            res,
            answer,
            executed_ro: shape == Shape::ReadOnly && sem == Expect::OK && res == Err(libc::EFAULT),
        })
    }

    // -- picking -----------------------------------------------------------

    fn open_ctxs(&self) -> Vec<usize> {
        self.model
            .ctxs
            .iter()
            .filter(|(_, x)| x.fd.is_some())
            .map(|(c, _)| *c)
            .collect()
    }

    /// A context with an open device file (opening one if there is none).
    fn pick_ctx(&mut self) -> Result<usize, String> {
        let open = self.open_ctxs();
        match self.gen.pick(&open) {
            Some(c) => Ok(c),
            None => self.op_open(),
        }
    }

    fn ctx(&self, c: usize) -> Result<&CtxM, String> {
        self.model
            .ctxs
            .get(&c)
            .ok_or_else(|| format!("model: no context {c}"))
    }

    fn live_handles(&self, c: usize, kind: ObjKind) -> Vec<u32> {
        match self.model.ctxs.get(&c) {
            Some(x) => match kind {
                ObjKind::Pd => x.pds.keys().copied().collect(),
                ObjKind::Mr => x.mrs.keys().copied().collect(),
                ObjKind::Cq => x.cqs.keys().copied().collect(),
                ObjKind::Qp => x.qps.keys().copied().collect(),
            },
            None => Vec::new(),
        }
    }

    /// A handle for a command of context `c`: mostly a live one, else a
    /// stale number, another context's handle, or a made-up one.
    fn pick_handle(&mut self, c: usize, kind: ObjKind) -> u32 {
        let live = self.live_handles(c, kind);
        let r = self.gen.below(20);
        if r < 14 {
            if let Some(h) = self.gen.pick(&live) {
                return h;
            }
        }
        if r < 16 {
            let top = live.iter().max().copied().unwrap_or(0) + 3;
            let free: Vec<u32> = (1..=top).filter(|h| !live.contains(h)).collect();
            if let Some(h) = self.gen.pick(&free) {
                return h;
            }
        }
        if r < 18 {
            let others: Vec<u32> = self
                .model
                .ctxs
                .keys()
                .filter(|o| **o != c)
                .flat_map(|o| self.live_handles(*o, kind))
                .collect();
            if let Some(h) = self.gen.pick(&others) {
                return h;
            }
        }
        let made_up = [
            0,
            u32::MAX,
            1 << 20,
            MAX_HANDLE,
            MAX_HANDLE + 1,
            1024,
            1025,
            self.gen.u32(),
        ];
        self.gen.pick(&made_up).unwrap_or(0)
    }

    fn user_handle(&mut self) -> (u64, u64) {
        let s = self.model.serial();
        (TAG | s, s)
    }

    // -- contexts ----------------------------------------------------------

    fn op_open(&mut self) -> Result<usize, String> {
        let dev = self.gen.below32(self.n);
        let fd = open_dev(dev)?;
        self.tally.note(Ok(()));
        let c = self.model.open_ctx(fd, dev);
        self.note_log(format!(
            "#{} open rmlx5_{dev} -> fd {fd} ctx{c}",
            self.tally.calls
        ));
        Ok(c)
    }

    fn op_close_ctx(&mut self) -> Res {
        let open = self.open_ctxs();
        let Some(c) = self.gen.pick(&open) else {
            return Ok(());
        };
        let fd = self.ctx(c)?.fd.unwrap_or(-1);
        let r = close_fd(fd);
        self.sys(format!("close ctx{c} fd {fd}"), r, Expect::OK)?;
        self.model.close_ctx_fd(c);
        Ok(())
    }

    fn op_query(&mut self) -> Res {
        let c = self.pick_ctx()?;
        let (fd, dev) = {
            let x = self.ctx(c)?;
            (x.fd.unwrap_or(-1), x.dev)
        };
        if self.gen.chance(1, 2) {
            let shape = self.shape(Command::QueryDevice);
            let o = self.call(
                fd,
                Command::QueryDevice,
                &enc(&QueryDevice::default()),
                Expect::OK,
                shape,
                &format!("ctx{c}"),
            )?;
            if o.ok() {
                let d: QueryDevice = o.answer()?;
                let want = self.lim.get(dev as usize).copied();
                if d.device_index != dev || Some(DevLimits::from_query(&d)) != want {
                    return Err(self.fail(format!(
                        "QUERY_DEVICE on rmlx5_{dev} answered {d:?}, limits were {want:?}"
                    )));
                }
            }
        } else {
            let port = *[1u32, 1, 1, 0, 2, u32::MAX]
                .get(self.gen.index(6))
                .unwrap_or(&1);
            let a = QueryPort {
                port_num: port,
                ..QueryPort::default()
            };
            let sem = if port == 1 {
                Expect::OK
            } else {
                Expect::err(libc::EINVAL)
            };
            let shape = self.shape(Command::QueryPort);
            let o = self.call(
                fd,
                Command::QueryPort,
                &enc(&a),
                sem,
                shape,
                &format!("port {port}"),
            )?;
            if o.ok() {
                let p: QueryPort = o.answer()?;
                if p.lid != dev + 1 || p.state != PORT_ACTIVE {
                    return Err(self.fail(format!("QUERY_PORT on rmlx5_{dev}: {p:?}")));
                }
            }
        }
        Ok(())
    }

    // -- PDs and MRs ---------------------------------------------------------

    fn op_alloc_pd(&mut self) -> Res {
        let c = self.pick_ctx()?;
        let (fd, want) = {
            let x = self.ctx(c)?;
            if x.pds.len() >= CAP_PDS {
                return self.op_destroy(c, ObjKind::Pd);
            }
            (x.fd.unwrap_or(-1), lowest_free(&x.pds))
        };
        let shape = self.shape(Command::AllocPd);
        let o = self.call(
            fd,
            Command::AllocPd,
            &enc(&AllocPd::default()),
            Expect::OK,
            shape,
            &format!("ctx{c}"),
        )?;
        if o.ok() {
            let a: AllocPd = o.answer()?;
            if a.pd_handle != want {
                return Err(self.fail(format!(
                    "ALLOC_PD ctx{c}: handle {}, the lowest free is {want}",
                    a.pd_handle
                )));
            }
            if let Some(x) = self.model.ctxs.get_mut(&c) {
                x.pds.insert(want, PdM::default());
            }
        }
        Ok(())
    }

    /// A destroy command of `kind` on a picked handle of context `c`.
    fn op_destroy(&mut self, c: usize, kind: ObjKind) -> Res {
        let fd = self.ctx(c)?.fd.unwrap_or(-1);
        let h = self.pick_handle(c, kind);
        let cmd = match kind {
            ObjKind::Pd => Command::DeallocPd,
            ObjKind::Mr => Command::DeregMr,
            ObjKind::Cq => Command::DestroyCq,
            ObjKind::Qp => Command::DestroyQp,
        };
        let sem = self.model.destroy_expect(c, kind, h);
        let shape = self.shape(cmd);
        let a = Destroy {
            handle: h,
            ..Destroy::default()
        };
        let o = self.call(fd, cmd, &enc(&a), sem, shape, &format!("ctx{c} handle {h}"))?;
        if o.ok() || o.executed_ro {
            self.model.destroy(c, kind, h);
        }
        if o.ok() {
            let d: Destroy = o.answer()?;
            if d.handle != h || d.reserved != 0 {
                return Err(self.fail(format!("{cmd:?} answered {d:?}")));
            }
        }
        Ok(())
    }

    fn op_reg_mr(&mut self) -> Res {
        let c = self.pick_ctx()?;
        let fd = {
            let x = self.ctx(c)?;
            if x.mrs.len() >= CAP_MRS {
                return self.op_destroy(c, ObjKind::Mr);
            }
            x.fd.unwrap_or(-1)
        };
        let pd = self.pick_handle(c, ObjKind::Pd);
        let pd_live = self.ctx(c)?.pds.contains_key(&pd);
        let max = self.lim.first().map_or(1 << 32, |l| l.max_mr_size);
        let mut access = self.gen.below32(16);
        if access & (ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC) != 0 {
            access |= ACCESS_LOCAL_WRITE;
        }
        let rw = self.arena.rw();
        let off = self.gen.below(ARENA_RW as u64 - 1);
        let mut a = RegMr {
            addr: rw + off,
            length: 1 + self
                .gen
                .below((ARENA_RW as u64 - off).min(16 * PAGE as u64)),
            iova: if self.gen.chance(1, 2) {
                rw + off
            } else {
                self.gen.u64() >> 1
            },
            pd_handle: pd,
            access,
            ..RegMr::default()
        };
        // The argument check, then pinning (EFAULT), then the PD.
        let mut check_err = None;
        let mut pin_err = None;
        match self.gen.below(24) {
            0 => {
                a.access = 1 << (4 + self.gen.below32(28));
                check_err = Some(libc::EINVAL);
            }
            1 => {
                a.access = if self.gen.chance(1, 2) {
                    ACCESS_REMOTE_WRITE
                } else {
                    ACCESS_REMOTE_ATOMIC | ACCESS_REMOTE_READ
                };
                check_err = Some(libc::EINVAL);
            }
            2 => {
                a.length = 0;
                check_err = Some(libc::EINVAL);
            }
            3 => {
                a.length = *[max + 1, u64::MAX, 1 << 40]
                    .get(self.gen.index(3))
                    .unwrap_or(&u64::MAX);
                check_err = Some(libc::EINVAL);
            }
            4 => {
                a.addr = u64::MAX - self.gen.below(4096);
                a.length = 4096;
                check_err = Some(libc::EINVAL);
            }
            5 => {
                a.iova = u64::MAX - self.gen.below(a.length);
                check_err = Some(libc::EINVAL);
            }
            6 => {
                // Runs into the guard page.
                a.addr = self.arena.guard() - 1 - self.gen.below(3 * PAGE as u64);
                a.length = self.arena.guard() - a.addr + 1 + self.gen.below(PAGE as u64);
                pin_err = Some(libc::EFAULT);
            }
            7 => {
                a.addr = *[0u64, 0xffff_8880_0000_0000, self.arena.guard()]
                    .get(self.gen.index(3))
                    .unwrap_or(&0);
                a.length = 1 + self.gen.below(2 * PAGE as u64);
                pin_err = Some(libc::EFAULT);
            }
            8..=9 => {
                // Read-only memory: fine unless the MR is writable.
                let ro_off = self.gen.below(ARENA_RO as u64 - 1);
                a.addr = self.arena.ro() + ro_off;
                a.length = 1 + self.gen.below(ARENA_RO as u64 - ro_off);
                if self.gen.chance(1, 2) {
                    a.access = self.gen.pick(&[0, ACCESS_REMOTE_READ]).unwrap_or(0);
                } else {
                    a.access = ACCESS_LOCAL_WRITE | (self.gen.below32(16) & ACCESS_ALL);
                    pin_err = Some(libc::EFAULT);
                }
            }
            10 => {
                // The largest MR, from the arena: it runs into the guard.
                a.length = max;
                pin_err = Some(libc::EFAULT);
            }
            _ => {}
        }
        let sem = if let Some(e) = check_err.or(pin_err) {
            Expect::err(e)
        } else if !pd_live {
            Expect::err(libc::EINVAL)
        } else {
            Expect::OK
        };
        let want = lowest_free(&self.ctx(c)?.mrs);
        let shape = self.shape(Command::RegMr);
        let o = self.call(
            fd,
            Command::RegMr,
            &enc(&a),
            sem,
            shape,
            &format!(
                "ctx{c} pd {pd} addr {:#x} len {:#x} access {:#x}",
                a.addr, a.length, a.access
            ),
        )?;
        if o.ok() {
            let r: RegMr = o.answer()?;
            if r.mr_handle != want || r.lkey != r.rkey || r.lkey == 0 {
                return Err(self.fail(format!("REG_MR answered {r:?}, handle {want} expected")));
            }
            let mr = MrM {
                pd,
                key: r.lkey,
                addr: a.iova,
                len: a.length,
                access: a.access,
            };
            self.model.add_mr(c, want, mr);
        }
        Ok(())
    }

    // -- channels and the async file -----------------------------------------

    fn op_channel(&mut self) -> Res {
        let c = self.pick_ctx()?;
        let fd = self.ctx(c)?.fd.unwrap_or(-1);
        let open = self
            .model
            .chans
            .values()
            .filter(|ch| ch.ctx == c && ch.fd.is_some())
            .count();
        if open >= CAP_CHANS {
            return self.op_close_chan();
        }
        let want = self.model.lowest_free_fd();
        let shape = self.shape(Command::CreateCompChannel);
        let o = self.call(
            fd,
            Command::CreateCompChannel,
            &enc(&CreateCompChannel::default()),
            Expect::OK,
            shape,
            &format!("ctx{c}"),
        )?;
        if o.ok() {
            let a: CreateCompChannel = o.answer()?;
            if a.fd != want {
                return Err(self.fail(format!(
                    "CREATE_COMP_CHANNEL: fd {}, the lowest free is {want}",
                    a.fd
                )));
            }
            set_nonblock(a.fd);
            self.model.add_chan(c, a.fd);
        }
        Ok(())
    }

    fn op_close_chan(&mut self) -> Res {
        let open: Vec<(u64, RawFd)> = self
            .model
            .chans
            .iter()
            .filter_map(|(s, ch)| ch.fd.map(|fd| (*s, fd)))
            .collect();
        let Some((s, fd)) = self.gen.pick(&open) else {
            return Ok(());
        };
        let r = close_fd(fd);
        self.sys(format!("close channel {s} fd {fd}"), r, Expect::OK)?;
        self.model.close_chan(s);
        Ok(())
    }

    /// Reads one event from a channel or async file, checking it names a
    /// live object of the right context, then polls the file.
    fn op_read_event(&mut self) -> Res {
        let files: Vec<(RawFd, FdKind)> = self
            .model
            .fds
            .iter()
            .filter(|(_, k)| matches!(k, FdKind::Chan(_) | FdKind::Async(_)))
            .map(|(fd, k)| (*fd, *k))
            .collect();
        let Some((fd, kind)) = self.gen.pick(&files) else {
            return Ok(());
        };
        let (c, size) = match kind {
            FdKind::Chan(s) => (self.model.chans.get(&s).map_or(usize::MAX, |ch| ch.ctx), 8),
            FdKind::Async(c) => (c, 16),
            _ => return Ok(()),
        };
        let len = match self.gen.below(10) {
            0 => 1 + self.gen.index(size - 1),
            1 => 64,
            _ => size,
        };
        let alive = self.model.alive(c);
        let expect = if !alive {
            Expect::err(libc::EIO)
        } else if len < size {
            Expect::ok_or(&[libc::EAGAIN, libc::EINVAL])
        } else {
            Expect::ok_or(&[libc::EAGAIN])
        };
        let mut buf = vec![0u8; len];
        let r = read_fd(fd, &mut buf);
        self.sys(
            format!("read {kind:?} fd {fd} ({len} bytes)"),
            r.map(|_| ()),
            expect,
        )?;
        if let Ok(got) = r {
            if got != size {
                return Err(self.fail(format!("read {kind:?}: {got} bytes, one event is {size}")));
            }
            let element = u64::from_ne_bytes(
                buf.get(..8)
                    .and_then(|b| b.try_into().ok())
                    .unwrap_or_default(),
            );
            let key = if size == 8 {
                "got_comp_event"
            } else {
                "got_async_event"
            };
            *self.ops.entry(key).or_insert(0) += 1;
            if size == 8 {
                if let Some(q) = self
                    .model
                    .ctxs
                    .get_mut(&c)
                    .and_then(|x| x.cqs.values_mut().find(|q| q.serial == element & !TAG_MASK))
                {
                    q.events_read += 1;
                }
            }
            let x = self.ctx(c)?;
            let serial = element & !TAG_MASK;
            let ok = element & TAG_MASK == TAG
                && match kind {
                    FdKind::Chan(s) => x
                        .cqs
                        .values()
                        .any(|q| q.serial == serial && q.chan == Some(s)),
                    _ => {
                        let ty = u32::from_ne_bytes(
                            buf.get(8..12)
                                .and_then(|b| b.try_into().ok())
                                .unwrap_or_default(),
                        );
                        match ty {
                            EVENT_CQ_ERR => x.cqs.values().any(|q| q.serial == serial),
                            EVENT_QP_FATAL
                            | EVENT_QP_REQ_ERR
                            | EVENT_QP_ACCESS_ERR
                            | EVENT_COMM_EST
                            | EVENT_SQ_DRAINED
                            | EVENT_QP_LAST_WQE_REACHED => {
                                x.qps.values().any(|q| q.serial == serial)
                            }
                            _ => false,
                        }
                    }
                };
            if !ok {
                return Err(self.fail(format!(
                    "read {kind:?} of ctx{c}: event {:02x?} names no live object of this context \
                     and file",
                    buf.get(..size).unwrap_or(&[])
                )));
            }
        }
        let rev = poll_now(fd, 0);
        self.sys(
            format!("poll {kind:?} fd {fd}"),
            rev.map(|_| ()),
            Expect::OK,
        )?;
        let rev = rev.unwrap_or(0);
        if (rev & libc::POLLERR != 0) == alive {
            return Err(self.fail(format!(
                "poll {kind:?} fd {fd}: revents {rev:#x} while the context is {}",
                if alive { "alive" } else { "gone" }
            )));
        }
        Ok(())
    }

    fn op_async_fd(&mut self) -> Res {
        let c = self.pick_ctx()?;
        let (fd, taken) = {
            let x = self.ctx(c)?;
            (x.fd.unwrap_or(-1), x.async_taken)
        };
        let sem = if taken {
            Expect::err(libc::EEXIST)
        } else {
            Expect::OK
        };
        let want = self.model.lowest_free_fd();
        let shape = self.shape(Command::GetAsyncFd);
        let o = self.call(
            fd,
            Command::GetAsyncFd,
            &enc(&GetAsyncFd::default()),
            sem,
            shape,
            &format!("ctx{c}"),
        )?;
        if o.executed_ro {
            if let Some(x) = self.model.ctxs.get_mut(&c) {
                x.async_taken = true;
            }
        }
        if o.ok() {
            let a: GetAsyncFd = o.answer()?;
            if a.fd != want {
                return Err(self.fail(format!("GET_ASYNC_FD: fd {}, lowest free {want}", a.fd)));
            }
            set_nonblock(a.fd);
            self.model.fds.insert(a.fd, FdKind::Async(c));
            if let Some(x) = self.model.ctxs.get_mut(&c) {
                x.async_taken = true;
            }
        }
        Ok(())
    }

    fn op_close_async(&mut self) -> Res {
        let files: Vec<RawFd> = self
            .model
            .fds
            .iter()
            .filter(|(_, k)| matches!(k, FdKind::Async(_)))
            .map(|(fd, _)| *fd)
            .collect();
        if let Some(fd) = self.gen.pick(&files) {
            let r = close_fd(fd);
            self.sys(format!("close async fd {fd}"), r, Expect::OK)?;
            self.model.fds.remove(&fd);
        }
        Ok(())
    }

    // -- CQs -------------------------------------------------------------------

    fn op_create_cq(&mut self) -> Res {
        let c = self.pick_ctx()?;
        let (fd, dev) = {
            let x = self.ctx(c)?;
            if x.cqs.len() >= CAP_CQS {
                return self.op_destroy(c, ObjKind::Cq);
            }
            (x.fd.unwrap_or(-1), x.dev)
        };
        let l = self.lim.get(dev as usize).copied().ok_or("no limits")?;
        let big_ok = self.model.big_cqs() < 2;
        let cqe = match self.gen.below(24) {
            0 => 0,
            1 => l.max_cqe + 1,
            2 => u32::MAX,
            3 => (1 << 31) + 1,
            4 if big_ok => l.max_cqe,
            5 if big_ok => l.max_cqe / 2 + 1,
            6 => 1,
            7 => 2,
            8 => 4096,
            _ => 1 + self.gen.below32(256),
        };
        let own: Vec<RawFd> = self
            .model
            .chans
            .values()
            .filter(|ch| ch.ctx == c)
            .filter_map(|ch| ch.fd)
            .collect();
        let foreign: Vec<RawFd> = self
            .model
            .chans
            .values()
            .filter(|ch| ch.ctx != c)
            .filter_map(|ch| ch.fd)
            .collect();
        let files: Vec<RawFd> = self
            .model
            .fds
            .iter()
            .filter(|(_, k)| !matches!(k, FdKind::Chan(_)))
            .map(|(fd, _)| *fd)
            .filter(|fd| *fd > 2)
            .collect();
        let channel_fd = match self.gen.below(20) {
            0..=7 => -1,
            8..=14 => self.gen.pick(&own).unwrap_or(-1),
            15 => {
                if self.gen.chance(1, 2) {
                    self.model.lowest_free_fd()
                } else {
                    (900..1000)
                        .find(|f| !self.model.fds.contains_key(f))
                        .unwrap_or(999)
                }
            }
            16 => self.gen.pick(&foreign).unwrap_or(-2),
            17 => self.gen.pick(&files).unwrap_or(i32::MIN),
            _ => self.gen.pick(&[-2, i32::MIN, -100]).unwrap_or(-2),
        };
        let comp_vector = match self.gen.below(20) {
            0 => l.vectors,
            1 => u32::MAX,
            _ => self.gen.below32(l.vectors),
        };
        let geom = cq_geometry(cqe, l.max_cqe);
        let sem = if channel_fd < -1 || comp_vector >= l.vectors || geom.is_none() {
            Expect::err(libc::EINVAL)
        } else {
            self.model.channel_expect(c, channel_fd)
        };
        let (uh, serial) = self.user_handle();
        let a = CreateCq {
            user_handle: uh,
            cqe,
            channel_fd,
            comp_vector,
            ..CreateCq::default()
        };
        let want = lowest_free(&self.ctx(c)?.cqs);
        let shape = self.shape(Command::CreateCq);
        let o = self.call(
            fd,
            Command::CreateCq,
            &enc(&a),
            sem,
            shape,
            &format!("ctx{c} cqe {cqe} channel {channel_fd} vector {comp_vector}"),
        )?;
        if o.ok() {
            let r: CreateCq = o.answer()?;
            let (n, bytes) = geom.unwrap_or_default();
            let good = r.cq_handle == want
                && r.cqe_cnt == n
                && r.cqe_size == 64
                && r.buf_size == bytes
                && Some(r.buf_mmap_offset) == encode(Kind::CqBuf, want)
                && Some(r.dbr_mmap_offset) == encode(Kind::CqDbr, want);
            if !good {
                return Err(self.fail(format!(
                    "CREATE_CQ answered {r:?}: want handle {want}, {n} entries, {bytes} bytes"
                )));
            }
            if self.model.cqn_in_use(dev, r.cqn) {
                return Err(self.fail(format!(
                    "CREATE_CQ on rmlx5_{dev}: CQN {:#x} is already a live CQ's",
                    r.cqn
                )));
            }
            let chan = match self.model.fds.get(&channel_fd) {
                Some(FdKind::Chan(s)) if channel_fd >= 0 => Some(*s),
                _ => None,
            };
            if let Some(x) = self.model.ctxs.get_mut(&c) {
                x.cqs.insert(
                    want,
                    CqM {
                        users: 0,
                        chan,
                        cqn: r.cqn,
                        buf_size: r.buf_size,
                        serial,
                        tainted: false,
                        big: n > 4096,
                        events_read: 0,
                    },
                );
            }
        }
        Ok(())
    }

    // -- QPs -------------------------------------------------------------------

    fn op_create_qp(&mut self) -> Res {
        let c = self.pick_ctx()?;
        let (fd, dev) = {
            let x = self.ctx(c)?;
            if x.qps.len() >= CAP_QPS {
                return self.op_destroy(c, ObjKind::Qp);
            }
            (x.fd.unwrap_or(-1), x.dev)
        };
        let l = self.lim.get(dev as usize).copied().ok_or("no limits")?;
        let big_ok = self.model.big_qps() < 2;
        let pd = self.pick_handle(c, ObjKind::Pd);
        let scq = self.pick_handle(c, ObjKind::Cq);
        let rcq = if self.gen.chance(1, 2) {
            scq
        } else {
            self.pick_handle(c, ObjKind::Cq)
        };
        let (uh, serial) = self.user_handle();
        let mut a = CreateQp {
            user_handle: uh,
            pd_handle: pd,
            send_cq_handle: scq,
            recv_cq_handle: rcq,
            qp_type: QPT_RC,
            max_send_wr: self.gen.below32(65),
            max_recv_wr: self.gen.below32(65),
            max_send_sge: self.gen.below32(5),
            max_recv_sge: self.gen.below32(5),
            max_inline_data: self.gen.below32(65),
            sq_sig_all: self.gen.below32(2),
            ..CreateQp::default()
        };
        let over = [u32::MAX, 1 << 31, u32::MAX / 64 + 1];
        match self.gen.below(24) {
            0 => a.qp_type = self.gen.pick(&[0, 1, 3, 4, u32::MAX]).unwrap_or(0),
            1 => a.max_send_wr = self.gen.pick(&over).unwrap_or(0).max(l.max_qp_wr + 1),
            2 => a.max_recv_wr = l.max_qp_wr + 1 + self.gen.below32(2),
            3 => a.max_send_sge = self.gen.pick(&[l.max_sge + 1, u32::MAX]).unwrap_or(0),
            4 => a.max_recv_sge = self.gen.pick(&[l.max_sge + 1, u32::MAX]).unwrap_or(0),
            5 => a.max_inline_data = self.gen.pick(&[l.max_inline + 1, u32::MAX]).unwrap_or(0),
            6 => a.sq_sig_all = 2 + self.gen.below32(100),
            7 if big_ok => {
                a.max_send_wr = l.max_qp_wr;
                a.max_send_sge = l.max_sge;
                a.max_inline_data = l.max_inline;
            }
            8 if big_ok => {
                a.max_recv_wr = l.max_qp_wr;
                a.max_recv_sge = l.max_sge;
            }
            9 => {
                a.max_send_sge = l.max_sge;
                a.max_recv_sge = l.max_sge;
                a.max_inline_data = l.max_inline;
            }
            _ => {}
        }
        let geom = qp_geometry(&a, &l);
        let (pd_ok, cqs_ok) = {
            let x = self.ctx(c)?;
            (
                x.pds.contains_key(&pd),
                x.cqs.contains_key(&scq) && x.cqs.contains_key(&rcq),
            )
        };
        let sem = if !qp_caps_in_range(&a, &l) || geom.is_none() || !pd_ok || !cqs_ok {
            Expect::err(libc::EINVAL)
        } else {
            Expect::OK
        };
        let want = lowest_free(&self.ctx(c)?.qps);
        let shape = self.shape(Command::CreateQp);
        let o = self.call(
            fd,
            Command::CreateQp,
            &enc(&a),
            sem,
            shape,
            &format!(
                "ctx{c} pd {pd} cqs {scq}/{rcq} type {} wr {}/{} sge {}/{} inline {} sig {}",
                a.qp_type,
                a.max_send_wr,
                a.max_recv_wr,
                a.max_send_sge,
                a.max_recv_sge,
                a.max_inline_data,
                a.sq_sig_all
            ),
        )?;
        if !o.ok() {
            return Ok(());
        }
        let r: CreateQp = o.answer()?;
        let g = geom.ok_or("geometry")?;
        let good = r.qp_handle == want
            && r.qpn >= 0x100
            && r.sq_wqe_shift == 6
            && r.sq_wqe_cnt == g.sq_wqe_cnt
            && r.rq_wqe_cnt == g.rq_wqe_cnt
            && r.rq_wqe_shift == g.rq_wqe_shift
            && r.sq_buf_offset == g.sq_buf_offset
            && r.rq_buf_offset == 0
            && r.max_send_wr_out == g.max_send_wr
            && r.max_recv_wr_out == g.max_recv_wr
            && r.max_send_sge_out == g.max_send_sge
            && r.max_recv_sge_out == g.max_recv_sge
            && r.max_inline_data_out == a.max_inline_data
            && r.max_send_wr_out >= a.max_send_wr
            && r.max_recv_wr_out >= a.max_recv_wr
            && r.max_send_sge_out >= a.max_send_sge
            && r.max_recv_sge_out >= a.max_recv_sge
            && r.bf_size == 256
            && r.bf_offset == 0x800 + (want % 4) * 512
            && r.buf_size.is_multiple_of(PAGE as u64)
            && r.buf_size >= g.buf_bytes
            && r.buf_size < g.buf_bytes + PAGE as u64
            && Some(r.buf_mmap_offset) == encode(Kind::QpBuf, want)
            && Some(r.dbr_mmap_offset) == encode(Kind::QpDbr, want)
            && Some(r.uar_mmap_offset) == encode(Kind::Uar, 0);
        if !good {
            return Err(self.fail(format!(
                "CREATE_QP answered {r:?}; want handle {want} and geometry {g:?}"
            )));
        }
        if self.model.qpn_in_use(dev, r.qpn) {
            return Err(self.fail(format!(
                "CREATE_QP on rmlx5_{dev}: QPN {:#x} is already a live QP's",
                r.qpn
            )));
        }
        let tainted = {
            let x = self.ctx(c)?;
            x.cqs.get(&scq).is_some_and(|q| q.tainted)
                || x.cqs.get(&rcq).is_some_and(|q| q.tainted)
                || self.model.tainted_qpns.contains(&(dev, r.qpn))
        };
        self.model.add_qp(
            c,
            want,
            QpM {
                pd,
                scq,
                rcq,
                qpn: r.qpn,
                state: Some(QPS_RESET),
                buf_size: r.buf_size,
                sq_off: r.sq_buf_offset,
                sq_cnt: r.sq_wqe_cnt,
                bf_offset: r.bf_offset,
                bf_size: r.bf_size,
                serial,
                big: g.buf_bytes > 512 * 1024,
                granted: [
                    r.max_send_wr_out,
                    r.max_recv_wr_out,
                    r.max_send_sge_out,
                    r.max_recv_sge_out,
                    r.max_inline_data_out,
                ],
                dest: (0, 0),
                posted: 0,
                rq_cnt: r.rq_wqe_cnt,
                rq_shift: r.rq_wqe_shift,
                recvs: 0,
            },
        );
        if tainted {
            self.model.taint_qp(c, want);
        }
        Ok(())
    }

    /// A QPN to name as a peer on HCA `dev`: a live QP's, or any number.
    fn pick_dest_qpn(&mut self, dev: u32) -> u32 {
        let qpns: Vec<u32> = self
            .model
            .ctxs
            .values()
            .filter(|x| x.dev == dev)
            .flat_map(|x| x.qps.values().map(|q| q.qpn))
            .collect();
        match self.gen.pick(&qpns) {
            Some(q) if self.gen.chance(4, 5) => q,
            _ => 0x10000 + self.gen.below32(0xef_0000),
        }
    }

    /// Sets `bit` in `m` with a valid random value of its attribute.
    fn set_attr(&mut self, m: &mut ModifyQp, bit: u32, cur: u32, l: &DevLimits) {
        m.attr_mask |= bit;
        match bit {
            QP_CUR_STATE => m.cur_qp_state = cur,
            QP_ACCESS_FLAGS => m.qp_access_flags = self.gen.below32(16),
            QP_PORT => m.port_num = 1,
            QP_AV => {
                m.dlid = 1 + self.gen.below32(self.n);
                m.sl = self.gen.below32(16);
            }
            QP_PATH_MTU => m.path_mtu = 1 + self.gen.below32(5),
            QP_TIMEOUT => m.timeout = self.gen.below32(32),
            QP_RETRY_CNT => m.retry_cnt = self.gen.below32(8),
            QP_RNR_RETRY => m.rnr_retry = self.gen.below32(8),
            QP_RQ_PSN => m.rq_psn = self.gen.below32(1 << 24),
            QP_SQ_PSN => m.sq_psn = self.gen.below32(1 << 24),
            QP_MAX_QP_RD_ATOMIC => m.max_rd_atomic = self.gen.below32(l.max_init_rd_atom + 1),
            QP_MAX_DEST_RD_ATOMIC => m.max_dest_rd_atomic = self.gen.below32(l.max_rd_atom + 1),
            QP_MIN_RNR_TIMER => m.min_rnr_timer = self.gen.below32(32),
            QP_DEST_QPN => {
                let dev = if m.dlid > 0 {
                    m.dlid - 1
                } else {
                    self.gen.below32(self.n)
                };
                m.dest_qp_num = self.pick_dest_qpn(dev);
            }
            _ => {}
        }
    }

    /// A MODIFY_QP along the RC state graph from `cur`, with the required
    /// attributes and a random subset of the allowed ones.
    fn walk_modify(&mut self, h: u32, cur: u32, l: &DevLimits) -> ModifyQp {
        let next = match cur {
            QPS_RESET => [QPS_INIT, QPS_INIT, QPS_INIT, QPS_ERR, QPS_RESET],
            QPS_INIT => [QPS_RTR, QPS_RTR, QPS_INIT, QPS_ERR, QPS_RESET],
            QPS_RTR => [QPS_RTS, QPS_RTS, QPS_RTS, QPS_ERR, QPS_RESET],
            QPS_RTS => [QPS_RTS, QPS_SQD, QPS_ERR, QPS_RESET, QPS_RTS],
            QPS_SQD => [QPS_RTS, QPS_SQD, QPS_ERR, QPS_RESET, QPS_RTS],
            _ => [QPS_RESET, QPS_RESET, QPS_RESET, QPS_ERR, QPS_RESET],
        };
        let next = self.gen.pick(&next).unwrap_or(QPS_RESET);
        let mut m = ModifyQp {
            qp_handle: h,
            attr_mask: QP_STATE,
            qp_state: next,
            ..ModifyQp::default()
        };
        let abi_opt = |mask: u32| mask & QP_ATTR_MASK_ALL;
        let (req, opt) = transition(cur, next).unwrap_or((0, 0));
        for b in 0..32 {
            let bit = 1u32 << b;
            if bit == QP_STATE || abi_opt(bit) == 0 {
                continue;
            }
            if req & bit != 0 || (opt & bit != 0 && self.gen.chance(1, 3)) {
                self.set_attr(&mut m, bit, cur, l);
            }
        }
        if cur == next && self.gen.chance(1, 4) && matches!(cur, QPS_INIT | QPS_RTS | QPS_SQD) {
            // Only attributes change.
            m.attr_mask &= !QP_STATE;
            m.qp_state = 0;
        }
        m
    }

    /// A MODIFY_QP with a random mask, states and values, in range or not.
    fn random_modify(&mut self, h: u32, cur: u32, l: &DevLimits) -> ModifyQp {
        let mut m = ModifyQp {
            qp_handle: h,
            ..ModifyQp::default()
        };
        for b in 0..21 {
            let bit = 1u32 << b;
            if QP_ATTR_MASK_ALL & bit != 0 && self.gen.chance(1, 3) {
                self.set_attr(&mut m, bit, cur, l);
            }
        }
        if self.gen.chance(1, 2) {
            m.attr_mask |= QP_STATE;
            m.qp_state = self.gen.below32(8);
        }
        if self.gen.chance(1, 3) {
            m.cur_qp_state = if self.gen.chance(1, 2) {
                cur
            } else {
                self.gen.below32(8)
            };
            m.attr_mask |= QP_CUR_STATE;
        }
        match self.gen.below(24) {
            0 => {
                m.attr_mask |= self
                    .gen
                    .pick(&[1 << 2, 1 << 6, 1 << 14, 1 << 19, 1 << 25, 1 << 31])
                    .unwrap_or(1 << 6)
            }
            1 => {
                m.dlid = self
                    .gen
                    .pick(&[0, self.n + 1, 0xffff, 0x1_0000])
                    .unwrap_or(0)
            }
            2 => m.sl = 16 + self.gen.below32(100),
            3 => m.path_mtu = self.gen.pick(&[0, 6, u32::MAX]).unwrap_or(0),
            4 => m.dest_qp_num = 1 << 24,
            5 => m.timeout = 32,
            6 => m.retry_cnt = 8,
            7 => m.max_rd_atomic = l.max_init_rd_atom + 1,
            8 => m.max_dest_rd_atomic = l.max_rd_atom + 1,
            9 => m.qp_access_flags = 1 << (4 + self.gen.below32(28)),
            10 => m.port_num = self.gen.pick(&[0, 2, u32::MAX]).unwrap_or(0),
            _ => {}
        }
        m
    }

    fn op_modify(&mut self, random: bool) -> Res {
        let c = self.pick_ctx()?;
        let (fd, dev) = {
            let x = self.ctx(c)?;
            (x.fd.unwrap_or(-1), x.dev)
        };
        let l = self.lim.get(dev as usize).copied().ok_or("no limits")?;
        let h = self.pick_handle(c, ObjKind::Qp);
        let cur = self.ctx(c)?.qps.get(&h).map(|q| q.state);
        let guess = match cur {
            Some(Some(s)) => s,
            _ => self.gen.below32(7),
        };
        let m = if random {
            self.random_modify(h, guess, &l)
        } else {
            self.walk_modify(h, guess, &l)
        };
        let sem = match cur {
            None => Expect::err(libc::EINVAL),
            Some(None) => {
                if (0..=QPS_ERR).any(|s| modify_outcome(s, &m, &l, self.n).is_some()) {
                    Expect::ok_or(&[libc::EINVAL])
                } else {
                    Expect::err(libc::EINVAL)
                }
            }
            Some(Some(s)) => match modify_outcome(s, &m, &l, self.n) {
                Some(_) => Expect::OK,
                None => Expect::err(libc::EINVAL),
            },
        };
        let shape = self.shape(Command::ModifyQp);
        let o = self.call(
            fd,
            Command::ModifyQp,
            &enc(&m),
            sem,
            shape,
            &format!(
                "ctx{c} qp {h} state {cur:?} mask {:#x} -> {} dlid {} dest {:#x}",
                m.attr_mask, m.qp_state, m.dlid, m.dest_qp_num
            ),
        )?;
        let named = (
            if m.attr_mask & QP_AV != 0 {
                m.dlid.saturating_sub(1)
            } else {
                u32::MAX
            },
            if m.attr_mask & QP_DEST_QPN != 0 {
                m.dest_qp_num
            } else {
                0
            },
        );
        match cur {
            Some(Some(s)) if o.ok() => {
                let next = modify_outcome(s, &m, &l, self.n).unwrap_or(s);
                if let Some(q) = self.model.ctxs.get_mut(&c).and_then(|x| x.qps.get_mut(&h)) {
                    q.state = Some(next);
                    if next == QPS_RESET {
                        q.dest = (0, 0);
                    } else {
                        if named.0 != u32::MAX {
                            q.dest.0 = named.0;
                        }
                        if named.1 != 0 {
                            q.dest.1 = named.1;
                        }
                    }
                }
            }
            Some(None) if named.1 != 0 || named.0 != u32::MAX => {
                // A QP that may be sending now names another peer.
                let old = self.ctx(c)?.qps.get(&h).map(|q| q.dest).unwrap_or((0, 0));
                let dev = if named.0 != u32::MAX { named.0 } else { old.0 };
                let qpn = if named.1 != 0 { named.1 } else { old.1 };
                for (cc, hh) in self.model.taint_qpn(dev, qpn) {
                    self.model.taint_qp(cc, hh);
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn op_query_qp(&mut self) -> Res {
        let c = self.pick_ctx()?;
        let fd = self.ctx(c)?.fd.unwrap_or(-1);
        let h = self.pick_handle(c, ObjKind::Qp);
        let qp = self.ctx(c)?.qps.get(&h).cloned();
        let sem = if qp.is_some() {
            Expect::OK
        } else {
            Expect::err(libc::EINVAL)
        };
        let a = QueryQp {
            qp_handle: h,
            ..QueryQp::default()
        };
        let shape = self.shape(Command::QueryQp);
        let o = self.call(
            fd,
            Command::QueryQp,
            &enc(&a),
            sem,
            shape,
            &format!("ctx{c} qp {h}"),
        )?;
        if let (true, Some(q)) = (o.ok(), qp) {
            let r: QueryQp = o.answer()?;
            let caps = [
                r.max_send_wr,
                r.max_recv_wr,
                r.max_send_sge,
                r.max_recv_sge,
                r.max_inline_data,
            ];
            let state_ok = q.state.is_none_or(|s| s == r.qp_state);
            let early = matches!(r.qp_state, QPS_RESET | QPS_INIT);
            if !state_ok || caps != q.granted || r.port_num != 1 || (early && (r.dlid | r.sl) != 0)
            {
                return Err(self.fail(format!(
                    "QUERY_QP ctx{c} qp {h}: {r:?}; the model has state {:?}, caps {:?}",
                    q.state, q.granted
                )));
            }
        }
        Ok(())
    }

    // -- mappings ----------------------------------------------------------------

    /// The length of the memory `kind`/`h` names in context `c`, if live.
    fn map_len(&self, c: usize, kind: Kind, h: u32) -> Option<(usize, MapObj)> {
        let x = self.model.ctxs.get(&c)?;
        match kind {
            Kind::Uar => (h == 0).then_some((PAGE, MapObj::Uar)),
            Kind::CqBuf => x
                .cqs
                .get(&h)
                .map(|q| (q.buf_size as usize, MapObj::Cq(q.serial))),
            Kind::CqDbr => x.cqs.get(&h).map(|q| (PAGE, MapObj::Cq(q.serial))),
            Kind::QpBuf => x
                .qps
                .get(&h)
                .map(|q| (q.buf_size as usize, MapObj::Qp(q.serial))),
            Kind::QpDbr => x.qps.get(&h).map(|q| (PAGE, MapObj::Qp(q.serial))),
        }
    }

    /// A writable mapping of `kind`/`h` of context `c`, made if needed.
    fn ensure_map(&mut self, c: usize, kind: Kind, h: u32) -> Result<Option<usize>, String> {
        let Some((len, obj)) = self.map_len(c, kind, h) else {
            return Ok(None);
        };
        if let Some(m) = self
            .model
            .maps
            .iter()
            .find(|m| m.ctx == c && m.kind == kind && m.obj == obj && m.writable)
        {
            return Ok(Some(m.addr));
        }
        let Some(fd) = self.ctx(c)?.fd else {
            return Ok(None);
        };
        // Room is made only by unmapping a dead object's mapping: the
        // mappings this operation already holds are all of live objects.
        if self.model.maps.len() >= CAP_MAPS {
            let dead = (0..self.model.maps.len()).find(|i| {
                self.model
                    .maps
                    .get(*i)
                    .is_some_and(|m| !self.model.map_target_live(m))
            });
            if let Some(i) = dead {
                self.check_orphan_map(i)?;
                if let Some(m) = self.model.maps.get(i).cloned() {
                    let r = munmap(m.addr, m.len);
                    self.sys(format!("munmap dead {:?}", m.kind), r, Expect::OK)?;
                }
                self.model.remove_map(i);
            }
        }
        let off = encode(kind, h).unwrap_or(0);
        let r = mmap_fd(fd, off, len, RW, libc::MAP_SHARED);
        self.sys(
            format!("mmap ctx{c} {kind:?} {h} len {len:#x}"),
            r.map(|_| ()),
            Expect::OK,
        )?;
        let addr = r.unwrap_or(0);
        self.model.add_map(MapM {
            ctx: c,
            addr,
            len,
            kind,
            obj,
            writable: true,
        });
        Ok(Some(addr))
    }

    fn op_mmap(&mut self) -> Res {
        let c = self.pick_ctx()?;
        let fd = self.ctx(c)?.fd.unwrap_or(-1);
        if self.model.maps.len() >= CAP_MAPS {
            return self.op_munmap();
        }
        let kind = self
            .gen
            .pick(&[
                Kind::Uar,
                Kind::CqBuf,
                Kind::CqDbr,
                Kind::QpBuf,
                Kind::QpDbr,
            ])
            .unwrap_or(Kind::Uar);
        let h = match kind {
            Kind::Uar => 0,
            Kind::CqBuf | Kind::CqDbr => self.pick_handle(c, ObjKind::Cq),
            Kind::QpBuf | Kind::QpDbr => self.pick_handle(c, ObjKind::Qp),
        };
        let mut offset = encode(kind, h.min(MAX_HANDLE)).unwrap_or(0);
        match self.gen.below(40) {
            0 => offset += 8,
            1 => {
                offset = (u64::from(self.gen.pick(&[0u32, 6, 7, 15]).unwrap_or(0)) << 40)
                    | (u64::from(h & 0xff) << 12)
            }
            2 => offset = (1 << 40) | (1 << 12),
            3 => offset = (self.gen.u64() & ((1 << 44) - 1)) & !0xfff,
            _ => {}
        }
        let (obj_len, obj) = match decode(offset) {
            Some((k, hh)) => match self.map_len(c, k, hh) {
                Some((l, o)) => (Some(l), Some((k, o))),
                None => (None, None),
            },
            None => (None, None),
        };
        let base_len = obj_len.unwrap_or(PAGE * (1 + self.gen.index(4)));
        let len = match self.gen.below(20) {
            0 => base_len - 1,
            1 => base_len + PAGE,
            2 => 0,
            3 => (base_len / 2).max(1),
            _ => base_len,
        };
        let shared = !self.gen.chance(1, 20);
        let prot = match self.gen.below(20) {
            0..=1 => libc::PROT_READ,
            2 => RW | libc::PROT_EXEC,
            _ => RW,
        };
        let flags = if shared {
            libc::MAP_SHARED
        } else {
            libc::MAP_PRIVATE
        };
        let valid = len > 0
            && shared
            && prot & libc::PROT_EXEC == 0
            && obj_len.is_some_and(|l| len.next_multiple_of(PAGE) == l);
        let expect = if valid {
            Expect::OK
        } else if prot & libc::PROT_EXEC != 0 {
            Expect {
                ok: false,
                errs: bits(&[libc::EINVAL, libc::EPERM]),
            }
        } else {
            Expect::err(libc::EINVAL)
        };
        let r = mmap_fd(fd, offset, len, prot, flags);
        self.sys(
            format!("mmap ctx{c} offset {offset:#x} len {len:#x} prot {prot} flags {flags:#x}"),
            r.map(|_| ()),
            expect,
        )?;
        if let (Ok(addr), Some((k, o))) = (r, obj) {
            self.model.add_map(MapM {
                ctx: c,
                addr,
                len: len.next_multiple_of(PAGE),
                kind: k,
                obj: o,
                writable: prot & libc::PROT_WRITE != 0,
            });
        } else if let Ok(addr) = r {
            let _ = munmap(addr, len);
            return Err(self.fail(format!("mmap of offset {offset:#x} succeeded unexpectedly")));
        }
        Ok(())
    }

    /// Checks that a mapping whose object is gone is still plain memory:
    /// written and read back.
    fn check_orphan_map(&mut self, i: usize) -> Res {
        let Some(m) = self.model.maps.get(i).cloned() else {
            return Ok(());
        };
        if self.model.map_target_live(&m) || !m.writable {
            return Ok(());
        }
        let off = self.gen.index(m.len.saturating_sub(8).max(1));
        let pat = self.gen.u64().to_ne_bytes();
        // SAFETY: inside our writable mapping of `m.len` bytes.
        let back = unsafe {
            poke(m.addr + off, &pat);
            peek(m.addr + off, 8)
        };
        if back != pat {
            return Err(self.fail(format!(
                "mapping {:?} of a destroyed object changed under us at +{off:#x}",
                m.kind
            )));
        }
        Ok(())
    }

    fn op_munmap(&mut self) -> Res {
        if self.model.maps.is_empty() {
            return Ok(());
        }
        let i = self.gen.index(self.model.maps.len());
        self.check_orphan_map(i)?;
        let Some(m) = self.model.maps.get(i).cloned() else {
            return Ok(());
        };
        let r = munmap(m.addr, m.len);
        self.sys(
            format!("munmap ctx{} {:?} len {:#x}", m.ctx, m.kind, m.len),
            r,
            Expect::OK,
        )?;
        self.model.remove_map(i);
        Ok(())
    }

    /// Writes garbage into a live object's mapping (the HCA must cope), or
    /// checks a dead object's mapping is plain memory.
    fn op_touch(&mut self) -> Res {
        if self.model.maps.is_empty() {
            return Ok(());
        }
        let i = self.gen.index(self.model.maps.len());
        let Some(m) = self.model.maps.get(i).cloned() else {
            return Ok(());
        };
        if !self.model.map_target_live(&m) {
            return self.check_orphan_map(i);
        }
        if !m.writable {
            // SAFETY: a readable mapping of ours.
            let _ = unsafe { peek(m.addr + self.gen.index(m.len), 1) };
            return Ok(());
        }
        let mut junk = vec![0u8; 1 + self.gen.index(64)];
        junk.iter_mut().for_each(|b| *b = self.gen.u32() as u8);
        let off = self.gen.index(m.len - junk.len());
        // SAFETY: inside our writable mapping.
        unsafe { poke(m.addr + off, &junk) };
        self.note_log(format!(
            "touch ctx{} {:?} +{off:#x} ({} bytes)",
            m.ctx,
            m.kind,
            junk.len()
        ));
        let x = self.ctx(m.ctx)?;
        match m.obj {
            MapObj::Cq(s) => {
                if let Some(h) = x.cqs.iter().find(|(_, q)| q.serial == s).map(|(h, _)| *h) {
                    self.model.taint_cq(m.ctx, h);
                }
            }
            MapObj::Qp(s) => {
                if let Some(h) = x.qps.iter().find(|(_, q)| q.serial == s).map(|(h, _)| *h) {
                    self.model.taint_qp(m.ctx, h);
                }
            }
            MapObj::Uar => {}
        }
        Ok(())
    }

    // -- kicks -----------------------------------------------------------------

    /// Writes 1 to 3 garbage WQEs (plausible control segments, random
    /// segments with real and made-up keys) at the SQ producer index of QP
    /// `h`, its doorbell record, and its BlueFlame half.
    fn garbage_wqes(&mut self, c: usize, h: u32, half_off: u32) -> Res {
        let Some(qp) = self.ctx(c)?.qps.get(&h).cloned() else {
            return Ok(());
        };
        let (Some(buf), Some(dbr), Some(uar)) = (
            self.ensure_map(c, Kind::QpBuf, h)?,
            self.ensure_map(c, Kind::QpDbr, h)?,
            self.ensure_map(c, Kind::Uar, 0)?,
        ) else {
            return Ok(());
        };
        let mut keys: Vec<u32> = self
            .model
            .ctxs
            .values()
            .flat_map(|x| x.mrs.values().map(|m| m.key))
            .collect();
        keys.push(self.gen.u32());
        keys.push(0x100);
        let rw = self.arena.rw();
        let mut pi = qp.posted;
        let mut last = Vec::new();
        for _ in 0..1 + self.gen.below(3) {
            let bbs = 1 + self.gen.below32(4.min(qp.sq_cnt));
            let mut w = vec![0u8; bbs as usize * 64];
            let opcode = self
                .gen
                .pick(&[
                    0x00u32, 0x08, 0x09, 0x0a, 0x0b, 0x10, 0x11, 0x12, 0x14, 0x15,
                ])
                .unwrap_or(0x0a);
            let opcode = if self.gen.chance(1, 10) {
                self.gen.below32(256)
            } else {
                opcode
            };
            let ds = match self.gen.below(5) {
                0 => 0,
                1 => self.gen.below32(64),
                _ => 1 + self.gen.below32(bbs * 4),
            };
            let qpn = if self.gen.chance(9, 10) {
                qp.qpn
            } else {
                self.gen.below32(1 << 24)
            };
            let opmod = if self.gen.chance(1, 10) {
                self.gen.below32(256)
            } else {
                0
            };
            let put32 = |w: &mut Vec<u8>, at: usize, v: u32| {
                if let Some(d) = w.get_mut(at..at + 4) {
                    d.copy_from_slice(&v.to_be_bytes());
                }
            };
            put32(&mut w, 0, (opmod << 24) | ((pi & 0xffff) << 8) | opcode);
            put32(&mut w, 4, (qpn << 8) | ds);
            if let Some(b) = w.get_mut(11) {
                *b = self.gen.pick(&[0x08u8, 0x0c, 0x00, 0x0a]).unwrap_or(8);
            }
            put32(&mut w, 12, self.gen.u32());
            for seg in (16..w.len()).step_by(16) {
                let key = self.gen.pick(&keys).unwrap_or(0);
                let addr = if self.gen.chance(3, 4) {
                    rw + self.gen.below(ARENA_RW as u64)
                } else {
                    self.gen.u64()
                };
                match self.gen.below(5) {
                    0 => {
                        // Remote address segment.
                        if let Some(d) = w.get_mut(seg..seg + 8) {
                            d.copy_from_slice(&addr.to_be_bytes());
                        }
                        put32(&mut w, seg + 8, key);
                    }
                    1 | 2 => {
                        // Data segment.
                        let len = if self.gen.chance(1, 8) {
                            self.gen.u32()
                        } else {
                            self.gen.below32(8192)
                        };
                        put32(&mut w, seg, len);
                        put32(&mut w, seg + 4, key);
                        if let Some(d) = w.get_mut(seg + 8..seg + 16) {
                            d.copy_from_slice(&addr.to_be_bytes());
                        }
                    }
                    3 => put32(&mut w, seg, 0x8000_0000 | self.gen.below32(600)),
                    _ => {
                        for b in w.iter_mut().skip(seg).take(16) {
                            *b = self.gen.u32() as u8;
                        }
                    }
                }
            }
            for i in 0..bbs {
                let idx = (pi.wrapping_add(i) % qp.sq_cnt) as usize;
                let at = buf + qp.sq_off as usize + idx * 64;
                let chunk = w.get(i as usize * 64..(i as usize + 1) * 64).unwrap_or(&[]);
                // SAFETY: one WQEBB inside the SQ of our writable mapping
                // of the QP buffer (`sq_off + sq_cnt * 64 <= buf_size`).
                unsafe { poke(at, chunk) };
            }
            pi = pi.wrapping_add(bbs);
            last = w;
        }
        let counter = if self.gen.chance(1, 10) {
            self.gen.u32()
        } else {
            pi & 0xffff
        };
        // SAFETY: the send counter of the doorbell record (bytes 4..8 of
        // our writable mapping of the doorbell page) and the BlueFlame half
        // (inside our writable UAR mapping).
        unsafe {
            poke(dbr + 4, &counter.to_be_bytes());
            poke(
                uar + half_off as usize,
                last.get(..last.len().min(256)).unwrap_or(&[]),
            );
        }
        if let Some(q) = self.model.ctxs.get_mut(&c).and_then(|x| x.qps.get_mut(&h)) {
            q.posted = pi;
        }
        self.note_log(format!("garbage WQEs on ctx{c} qp {h}, pi now {pi}"));
        Ok(())
    }

    fn op_kick(&mut self) -> Res {
        let c = self.pick_ctx()?;
        let (fd, dev) = {
            let x = self.ctx(c)?;
            (x.fd.unwrap_or(-1), x.dev)
        };
        let mut k = Kick::default();
        let mut taint = None;
        let sem;
        match self.gen.below(10) {
            0 => {
                k.kind = self.gen.pick(&[0, 5, 6, 0x100, u32::MAX]).unwrap_or(0);
                k.handle = self.pick_handle(c, ObjKind::Qp);
                sem = Expect::err(libc::EINVAL);
            }
            1..=3 => {
                k.kind = KICK_CQ_ARM;
                let h = self.pick_handle(c, ObjKind::Cq);
                k.handle = h;
                let cq = self.ctx(c)?.cqs.get(&h).cloned();
                if self.gen.chance(1, 10) {
                    k.uar_offset = 1 + self.gen.below32(4096);
                    sem = Expect::err(libc::EINVAL);
                } else if let Some(cq) = cq {
                    sem = match self.ensure_map(c, Kind::Uar, 0)? {
                        Some(uar) if self.gen.chance(4, 5) => {
                            let others: Vec<u32> = self
                                .model
                                .ctxs
                                .iter()
                                .filter(|(cc, x)| **cc != c && x.dev == dev)
                                .flat_map(|(_, x)| x.cqs.values().map(|q| q.cqn))
                                .collect();
                            let cqn = match self.gen.below(4) {
                                0 | 1 => cq.cqn,
                                2 => self.gen.pick(&others).unwrap_or(cq.cqn ^ 1),
                                _ => self.gen.below32(1 << 24),
                            };
                            let mut arm = self.gen.u32();
                            if cqn == cq.cqn && self.gen.chance(2, 3) {
                                // A well-formed ARM word, in the doorbell
                                // record too: the HCA arms the CQ.
                                let sn = if self.gen.chance(3, 4) {
                                    0
                                } else {
                                    self.gen.below32(4)
                                };
                                arm = (sn << 28)
                                    | (self.gen.below32(2) << 24)
                                    | self.gen.below32(1 << 24);
                                if let Some(dbr) = self.ensure_map(c, Kind::CqDbr, h)? {
                                    // SAFETY: the ARM word (bytes 4..8) of
                                    // our writable doorbell-page mapping.
                                    unsafe { poke(dbr + 4, &arm.to_be_bytes()) };
                                }
                            }
                            let mut db = [0u8; 8];
                            db[..4].copy_from_slice(&arm.to_be_bytes());
                            db[4..].copy_from_slice(&cqn.to_be_bytes());
                            // SAFETY: the CQ doorbell word (0x20..0x28) of
                            // our writable UAR mapping.
                            unsafe { poke(uar + 0x20, &db) };
                            if self.model.cqn_owner(dev, cqn) == Some(c) {
                                Expect::ok_or(&[libc::EINVAL])
                            } else {
                                // Another context's CQ (or none): the UAR
                                // is not that CQ's.
                                Expect::err(libc::EINVAL)
                            }
                        }
                        _ => Expect::ok_or(&[libc::EINVAL]),
                    };
                } else {
                    sem = Expect::err(libc::EINVAL);
                }
            }
            4..=5 => {
                k.kind = KICK_RECV;
                let h = self.pick_handle(c, ObjKind::Qp);
                k.handle = h;
                let live = self.ctx(c)?.qps.contains_key(&h);
                if self.gen.chance(1, 10) {
                    k.uar_offset = 1 + self.gen.below32(4096);
                    sem = Expect::err(libc::EINVAL);
                } else if live {
                    sem = Expect::ok_or(&[libc::EINVAL]);
                    taint = Some(h);
                } else {
                    sem = Expect::err(libc::EINVAL);
                }
            }
            _ => {
                k.kind = if self.gen.chance(1, 2) {
                    KICK_SEND
                } else {
                    KICK_SEND_BLUEFLAME
                };
                let h = self.pick_handle(c, ObjKind::Qp);
                k.handle = h;
                let qp = self.ctx(c)?.qps.get(&h).cloned();
                match qp {
                    Some(q) if self.gen.chance(7, 10) => {
                        let half = q.bf_offset + self.gen.below32(2) * q.bf_size;
                        k.uar_offset = half;
                        if self.gen.chance(1, 2) {
                            self.garbage_wqes(c, h, half)?;
                        }
                        sem = Expect::ok_or(&[libc::EINVAL]);
                        taint = Some(h);
                    }
                    Some(q) => {
                        let other = 0x800 + ((h + 1 + self.gen.below32(3)) % 4) * 512;
                        k.uar_offset = self
                            .gen
                            .pick(&[
                                q.bf_offset + 1,
                                q.bf_offset + 2 * q.bf_size,
                                0,
                                u32::MAX,
                                other,
                                other + q.bf_size,
                                q.bf_offset.wrapping_sub(q.bf_size),
                            ])
                            .unwrap_or(0);
                        sem = Expect::err(libc::EINVAL);
                    }
                    None => {
                        k.uar_offset = 0x800 + self.gen.below32(8) * 256;
                        sem = Expect::err(libc::EINVAL);
                    }
                }
            }
        }
        let shape = self.shape(Command::Kick);
        self.call(
            fd,
            Command::Kick,
            &enc(&k),
            sem,
            shape,
            &format!(
                "ctx{c} kind {} handle {} offset {:#x}",
                k.kind, k.handle, k.uar_offset
            ),
        )?;
        if let Some(h) = taint {
            self.model.taint_qp(c, h);
        }
        Ok(())
    }

    /// Applies a MODIFY_QP the model predicts, with a plain argument.
    fn modify_plain(&mut self, c: usize, h: u32, m: &ModifyQp) -> Res {
        let (fd, dev, cur) = {
            let x = self.ctx(c)?;
            (
                x.fd.unwrap_or(-1),
                x.dev,
                x.qps.get(&h).and_then(|q| q.state),
            )
        };
        let l = self.lim.get(dev as usize).copied().ok_or("no limits")?;
        let next = cur.and_then(|s| modify_outcome(s, m, &l, self.n));
        let sem = match (cur, next) {
            (Some(_), Some(_)) => Expect::OK,
            (Some(_), None) => Expect::err(libc::EINVAL),
            (None, _) => Expect::ok_or(&[libc::EINVAL]),
        };
        let o = self.call(
            fd,
            Command::ModifyQp,
            &enc(m),
            sem,
            Shape::Plain,
            &format!("ctx{c} qp {h} connect -> {}", m.qp_state),
        )?;
        if o.ok() {
            *self.ops.entry("connect_steps_ok").or_insert(0) += 1;
        }
        if let (true, Some(next)) = (o.ok(), next) {
            if let Some(q) = self.model.ctxs.get_mut(&c).and_then(|x| x.qps.get_mut(&h)) {
                q.state = Some(next);
                if m.attr_mask & QP_AV != 0 {
                    q.dest.0 = m.dlid.saturating_sub(1);
                }
                if m.attr_mask & QP_DEST_QPN != 0 {
                    q.dest.1 = m.dest_qp_num;
                }
            }
        }
        Ok(())
    }

    /// An MR with every access right on PD `pd` of context `c`, registered
    /// if there is none.
    fn ensure_mr(&mut self, c: usize, pd: u32) -> Res {
        let (fd, have, want, full) = {
            let x = self.ctx(c)?;
            (
                x.fd,
                x.mrs.values().any(|m| m.pd == pd && m.access == ACCESS_ALL),
                lowest_free(&x.mrs),
                x.mrs.len() >= CAP_MRS || !x.pds.contains_key(&pd),
            )
        };
        let Some(fd) = fd else {
            return Ok(());
        };
        if have || full {
            return Ok(());
        }
        let off = self.gen.below(48) * PAGE as u64;
        let a = RegMr {
            addr: self.arena.rw() + off,
            length: 16 * PAGE as u64,
            iova: self.arena.rw() + off,
            pd_handle: pd,
            access: ACCESS_ALL,
            ..RegMr::default()
        };
        let o = self.call(
            fd,
            Command::RegMr,
            &enc(&a),
            Expect::OK,
            Shape::Plain,
            &format!("ctx{c} pd {pd} for traffic"),
        )?;
        let r: RegMr = o.answer()?;
        if r.mr_handle != want {
            return Err(self.fail(format!("REG_MR answered {r:?}, handle {want} expected")));
        }
        let mr = MrM {
            pd,
            key: r.lkey,
            addr: a.iova,
            len: a.length,
            access: a.access,
        };
        self.model.add_mr(c, want, mr);
        Ok(())
    }

    /// Connects two QPs in RESET (of any contexts and HCAs) to each other:
    /// INIT, RTR, RTS, each step predicted by the model.
    fn op_connect(&mut self) -> Res {
        let mut cands = Vec::new();
        for (c, x) in &self.model.ctxs {
            if x.fd.is_none() {
                continue;
            }
            for (h, q) in &x.qps {
                if q.state == Some(QPS_RESET) {
                    cands.push((*c, *h, x.dev, q.qpn));
                }
            }
        }
        if cands.len() < 2 {
            return self.op_create_qp();
        }
        let i = self.gen.index(cands.len());
        let mut j = self.gen.index(cands.len() - 1);
        if j >= i {
            j += 1;
        }
        let (Some(a), Some(b)) = (cands.get(i).copied(), cands.get(j).copied()) else {
            return Ok(());
        };
        for x in [a, b] {
            let pd = self.ctx(x.0)?.qps.get(&x.1).map_or(0, |q| q.pd);
            self.ensure_mr(x.0, pd)?;
            let init = ModifyQp {
                qp_handle: x.1,
                attr_mask: QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS,
                qp_state: QPS_INIT,
                port_num: 1,
                qp_access_flags: ACCESS_ALL,
                ..ModifyQp::default()
            };
            self.modify_plain(x.0, x.1, &init)?;
        }
        for (x, peer) in [(a, b), (b, a)] {
            let rtr = ModifyQp {
                qp_handle: x.1,
                attr_mask: QP_STATE
                    | QP_AV
                    | QP_PATH_MTU
                    | QP_DEST_QPN
                    | QP_RQ_PSN
                    | QP_MAX_DEST_RD_ATOMIC
                    | QP_MIN_RNR_TIMER,
                qp_state: QPS_RTR,
                dlid: peer.2 + 1,
                sl: self.gen.below32(16),
                path_mtu: 1 + self.gen.below32(5),
                dest_qp_num: peer.3,
                max_dest_rd_atomic: 4,
                min_rnr_timer: 1,
                ..ModifyQp::default()
            };
            self.modify_plain(x.0, x.1, &rtr)?;
            let rts = ModifyQp {
                qp_handle: x.1,
                attr_mask: QP_STATE
                    | QP_TIMEOUT
                    | QP_RETRY_CNT
                    | QP_RNR_RETRY
                    | QP_SQ_PSN
                    | QP_MAX_QP_RD_ATOMIC,
                qp_state: QPS_RTS,
                timeout: 8,
                retry_cnt: 1,
                rnr_retry: 1,
                max_rd_atomic: 4,
                ..ModifyQp::default()
            };
            self.modify_plain(x.0, x.1, &rts)?;
        }
        Ok(())
    }

    /// Posts one well-formed work request (WRITE, WRITE_IMM, SEND,
    /// SEND_IMM or READ; now and then with a wrong key or length) on a QP
    /// that names a peer, a receive at the peer where the operation needs
    /// one, and rings the doorbell.
    fn op_post(&mut self) -> Res {
        let mut cands = Vec::new();
        for (c, x) in &self.model.ctxs {
            if x.fd.is_none() {
                continue;
            }
            for (h, q) in &x.qps {
                if q.dest.1 != 0 && matches!(q.state, None | Some(QPS_RTS)) {
                    cands.push((*c, *h));
                }
            }
        }
        let Some((c, h)) = self.gen.pick(&cands) else {
            return self.op_connect();
        };
        let (fd, q) = {
            let x = self.ctx(c)?;
            (
                x.fd.unwrap_or(-1),
                x.qps.get(&h).cloned().ok_or("model: no QP")?,
            )
        };
        let peer = self.model.ctxs.iter().find_map(|(pc, x)| {
            x.qps
                .iter()
                .find(|(_, p)| x.dev == q.dest.0 && p.qpn == q.dest.1)
                .map(|(ph, p)| (*pc, *ph, p.clone()))
        });
        let local: Vec<MrM> = self
            .ctx(c)?
            .mrs
            .values()
            .filter(|m| m.pd == q.pd)
            .cloned()
            .collect();
        let remote: Vec<MrM> = match &peer {
            Some((pc, _, p)) => self
                .ctx(*pc)?
                .mrs
                .values()
                .filter(|m| m.pd == p.pd)
                .cloned()
                .collect(),
            None => Vec::new(),
        };
        let Some(lmr) = self.gen.pick(&local) else {
            return self.ensure_mr(c, q.pd);
        };
        // WRITE, WRITE_IMM, SEND, SEND_IMM, READ.
        let opcode = self
            .gen
            .pick(&[0x08u32, 0x09, 0x0a, 0x0b, 0x10])
            .unwrap_or(0x0a);
        let len = 1 + self.gen.below(lmr.len.min(8192));
        let mut laddr = lmr.addr + self.gen.below(lmr.len - len + 1);
        let mut lkey = lmr.key;
        let need = match opcode {
            0x10 => ACCESS_REMOTE_READ,
            0x08 | 0x09 => ACCESS_REMOTE_WRITE,
            _ => 0,
        };
        let fitting: Vec<MrM> = remote
            .iter()
            .filter(|m| m.access & need == need)
            .copied()
            .collect();
        let remote = if fitting.is_empty() || self.gen.chance(1, 8) {
            remote
        } else {
            fitting
        };
        let (mut raddr, mut rkey) = match self.gen.pick(&remote) {
            Some(r) if r.len >= len => (r.addr + self.gen.below(r.len - len + 1), r.key),
            _ => (self.gen.u64(), self.gen.u32()),
        };
        match self.gen.below(8) {
            0 => lkey ^= 0x100,
            1 => rkey = self.gen.u32(),
            2 => laddr = laddr.wrapping_add(lmr.len),
            3 => raddr = raddr.wrapping_sub(1 << 20),
            _ => {}
        }
        if self.gen.chance(2, 3) {
            self.arm_cq(c, q.scq)?;
            if let Some((pc, _, p)) = &peer {
                self.arm_cq(*pc, p.rcq)?;
            }
        }
        let needs_recv = matches!(opcode, 0x09..=0x0b);
        if needs_recv {
            if let Some((pc, ph, p)) = &peer {
                let rmr = self
                    .ctx(*pc)?
                    .mrs
                    .values()
                    .find(|m| m.pd == p.pd && m.access & ACCESS_LOCAL_WRITE != 0)
                    .cloned();
                let fd_open = self.ctx(*pc)?.fd.is_some();
                if let (Some(rmr), true) = (rmr, fd_open) {
                    self.post_recv(*pc, *ph, &rmr)?;
                }
            }
        }
        let ds = if matches!(opcode, 0x0a | 0x0b) { 2 } else { 3 };
        let mut w = [0u8; 64];
        let put32 = |w: &mut [u8; 64], at: usize, v: u32| {
            if let Some(d) = w.get_mut(at..at + 4) {
                d.copy_from_slice(&v.to_be_bytes());
            }
        };
        let put64 = |w: &mut [u8; 64], at: usize, v: u64| {
            if let Some(d) = w.get_mut(at..at + 8) {
                d.copy_from_slice(&v.to_be_bytes());
            }
        };
        put32(&mut w, 0, ((q.posted & 0xffff) << 8) | opcode);
        put32(&mut w, 4, (q.qpn << 8) | ds);
        w[11] = 0x08;
        put32(&mut w, 12, self.gen.u32());
        let data = if ds == 2 {
            16
        } else {
            put64(&mut w, 16, raddr);
            put32(&mut w, 24, rkey);
            32
        };
        put32(&mut w, data, len as u32);
        put32(&mut w, data + 4, lkey);
        put64(&mut w, data + 8, laddr);
        let (Some(buf), Some(dbr), Some(uar)) = (
            self.ensure_map(c, Kind::QpBuf, h)?,
            self.ensure_map(c, Kind::QpDbr, h)?,
            self.ensure_map(c, Kind::Uar, 0)?,
        ) else {
            return Ok(());
        };
        let idx = (q.posted % q.sq_cnt) as usize;
        let half = q.bf_offset + self.gen.below32(2) * q.bf_size;
        let blueflame = self.gen.chance(1, 2);
        let pi = q.posted.wrapping_add(1);
        // SAFETY: one WQEBB of the SQ, the send counter of the doorbell
        // record and one BlueFlame half, all inside our writable mappings.
        unsafe {
            poke(buf + q.sq_off as usize + idx * 64, &w);
            poke(dbr + 4, &(pi & 0xffff).to_be_bytes());
            poke(
                uar + half as usize,
                if blueflame { &w[..] } else { &w[..8] },
            );
        }
        if let Some(qq) = self.model.ctxs.get_mut(&c).and_then(|x| x.qps.get_mut(&h)) {
            qq.posted = pi;
        }
        let k = Kick {
            kind: if blueflame {
                KICK_SEND_BLUEFLAME
            } else {
                KICK_SEND
            },
            handle: h,
            uar_offset: half,
            ..Kick::default()
        };
        let st = match q.state {
            Some(_) => "post_on_rts",
            None => "post_on_tainted",
        };
        *self.ops.entry(st).or_insert(0) += 1;
        let o = self.call(
            fd,
            Command::Kick,
            &enc(&k),
            Expect::ok_or(&[libc::EINVAL]),
            Shape::Plain,
            &format!(
                "ctx{c} qp {h} opcode {opcode:#x} len {len} lkey {lkey:#x} rkey {rkey:#x} \
                 to {:?}",
                q.dest
            ),
        )?;
        let key = if o.ok() {
            "post_accepted"
        } else {
            "post_refused"
        };
        *self.ops.entry(key).or_insert(0) += 1;
        self.model.taint_qp(c, h);
        Ok(())
    }

    /// Arms CQ `h` of context `c` the way a provider does: ARM word with
    /// the sequence number of the events read, in the doorbell record and
    /// the UAR doorbell, then the kick.
    fn arm_cq(&mut self, c: usize, h: u32) -> Res {
        let Some(cq) = self.ctx(c)?.cqs.get(&h).cloned() else {
            return Ok(());
        };
        let Some(fd) = self.ctx(c)?.fd else {
            return Ok(());
        };
        let (Some(dbr), Some(uar)) = (
            self.ensure_map(c, Kind::CqDbr, h)?,
            self.ensure_map(c, Kind::Uar, 0)?,
        ) else {
            return Ok(());
        };
        // SAFETY: the consumer index word of our writable doorbell-page
        // mapping.
        let ci = unsafe { peek(dbr, 4) };
        let ci = u32::from_be_bytes(ci.try_into().unwrap_or_default()) & 0xff_ffff;
        let arm = ((cq.events_read & 3) << 28) | ci;
        let mut db = [0u8; 8];
        db[..4].copy_from_slice(&arm.to_be_bytes());
        db[4..].copy_from_slice(&cq.cqn.to_be_bytes());
        // SAFETY: the ARM word of the doorbell record and the CQ doorbell
        // of the UAR page, in our writable mappings.
        unsafe {
            poke(dbr + 4, &arm.to_be_bytes());
            poke(uar + 0x20, &db);
        }
        let k = Kick {
            kind: KICK_CQ_ARM,
            handle: h,
            ..Kick::default()
        };
        let o = self.call(
            fd,
            Command::Kick,
            &enc(&k),
            Expect::ok_or(&[libc::EINVAL]),
            Shape::Plain,
            &format!("ctx{c} arm cq {h}"),
        )?;
        if o.ok() {
            *self.ops.entry("arm_accepted").or_insert(0) += 1;
        }
        Ok(())
    }

    /// Posts one receive of the whole of `mr` (or the start of it) on QP
    /// `h` of context `c`.
    fn post_recv(&mut self, c: usize, h: u32, mr: &MrM) -> Res {
        let Some(q) = self.ctx(c)?.qps.get(&h).cloned() else {
            return Ok(());
        };
        let (Some(buf), Some(dbr)) = (
            self.ensure_map(c, Kind::QpBuf, h)?,
            self.ensure_map(c, Kind::QpDbr, h)?,
        ) else {
            return Ok(());
        };
        let stride = 1usize << q.rq_shift;
        let mut wqe = vec![0u8; stride];
        let len = mr.len.min(8192) as u32;
        wqe[..4].copy_from_slice(&len.to_be_bytes());
        wqe[4..8].copy_from_slice(&mr.key.to_be_bytes());
        wqe[8..16].copy_from_slice(&mr.addr.to_be_bytes());
        if stride > 16 {
            // The terminator: an invalid key ends the scatter list.
            wqe[20..24].copy_from_slice(&0x100u32.to_be_bytes());
        }
        let idx = (q.recvs % q.rq_cnt) as usize;
        let rpi = q.recvs.wrapping_add(1);
        // SAFETY: one receive WQE of the RQ (at offset 0 of the buffer) and
        // the receive counter of the doorbell record, in our writable
        // mappings.
        unsafe {
            poke(buf + idx * stride, &wqe);
            poke(dbr, &(rpi & 0xffff).to_be_bytes());
        }
        if let Some(qq) = self.model.ctxs.get_mut(&c).and_then(|x| x.qps.get_mut(&h)) {
            qq.recvs = rpi;
        }
        self.note_log(format!("receive posted on ctx{c} qp {h}, counter {rpi}"));
        self.model.taint_qp(c, h);
        Ok(())
    }

    // -- foreign numbers and files ---------------------------------------------

    /// A command number that is not ours, on a device file.
    fn op_wrong_cmd(&mut self) -> Res {
        let c = self.pick_ctx()?;
        let fd = self.ctx(c)?.fd.unwrap_or(-1);
        let cmd = self.gen.pick(Command::ALL).unwrap_or(Command::QueryDevice);
        let shape = Shape::WrongCmd(wrong_cmd(&mut self.gen, cmd));
        let args = vec![0u8; cmd.min_size()];
        self.call(fd, cmd, &args, Expect::OK, shape, &format!("ctx{c}"))?;
        Ok(())
    }

    /// One of our commands on a file that is not a device file.
    fn op_wrong_file(&mut self) -> Res {
        let files: Vec<RawFd> = self
            .model
            .fds
            .iter()
            .filter(|(fd, k)| {
                matches!(k, FdKind::Chan(_) | FdKind::Async(_)) || **fd == self.devnull
            })
            .map(|(fd, _)| *fd)
            .collect();
        let Some(fd) = self.gen.pick(&files) else {
            return Ok(());
        };
        let cmd = self.gen.pick(Command::ALL).unwrap_or(Command::QueryDevice);
        let args = vec![0u8; cmd.min_size()];
        self.call(
            fd,
            cmd,
            &args,
            Expect::err(libc::ENOTTY),
            Shape::Plain,
            "on a file that is not a device file",
        )?;
        Ok(())
    }

    // -- audit, window, loop ---------------------------------------------------

    /// debugfs must list exactly the model's CQs, QPs and MRs above the
    /// baseline.
    fn audit(&mut self) -> Res {
        let now = snapshot(self.n as usize)?;
        let (cqs, qps, mrs) = self.model.counts(self.n as usize);
        let want_cqs: Vec<u64> = cqs
            .iter()
            .enumerate()
            .map(|(i, v)| v + self.base.cqs.get(i).copied().unwrap_or(0))
            .collect();
        let want_qps: Vec<u64> = qps
            .iter()
            .enumerate()
            .map(|(i, v)| v + self.base.qps.get(i).copied().unwrap_or(0))
            .collect();
        let want_mrs = self.base.user_mr + mrs;
        if now.cqs != want_cqs || now.qps != want_qps || now.user_mr != want_mrs {
            return Err(self.fail(format!(
                "debugfs disagrees with the model: debugfs {}, model cqs={want_cqs:?} \
                 qps={want_qps:?} user_mr={want_mrs}{}",
                now.describe(),
                dump_tables(self.n as usize)
            )));
        }
        Ok(())
    }

    /// A context of its own used by this thread while a second thread
    /// destroys its objects (and closes a channel and the device file).
    fn op_window(&mut self) -> Res {
        self.windows += 1;
        let dev = self.gen.below32(self.n);
        let plan = WindowPlan {
            dev,
            seed_a: self.gen.u64(),
            seed_b: self.gen.u64(),
            ops: 100 + self.gen.below(100),
            arena: self.arena.rw(),
        };
        self.note_log(format!("window {} on rmlx5_{dev}", self.windows));
        let r = window(&plan);
        match r {
            Ok(t) => {
                self.tally.merge(&t);
                self.audit()
            }
            Err(e) => Err(self.fail(format!("concurrent window {}: {e}", self.windows))),
        }
    }

    fn step(&mut self) -> Res {
        let open = self.open_ctxs().len();
        let r = self.gen.below(1000);
        let name = match r {
            0..=14 if open < MAX_CTXS => "open",
            0..=19 => "close_ctx",
            20..=49 => "query",
            50..=109 => "alloc_pd",
            110..=149 => "dealloc_pd",
            150..=209 => "reg_mr",
            210..=249 => "dereg_mr",
            250..=274 => "channel",
            275..=289 => "close_channel",
            290..=329 => "read_event",
            330..=344 => "async_fd",
            345..=349 => "close_async",
            350..=419 => "create_cq",
            420..=469 => "destroy_cq",
            470..=539 => "create_qp",
            540..=579 => "destroy_qp",
            580..=649 => "modify_walk",
            650..=699 => "modify_random",
            700..=729 => "query_qp",
            730..=789 => "kick",
            790..=814 => "connect",
            815..=869 => "post",
            870..=909 => "mmap",
            910..=939 => "munmap",
            940..=969 => "touch",
            970..=984 => "wrong_file",
            _ => "wrong_cmd",
        };
        *self.ops.entry(name).or_insert(0) += 1;
        match name {
            "open" => self.op_open().map(|_| ()),
            "close_ctx" => self.op_close_ctx(),
            "query" => self.op_query(),
            "alloc_pd" => self.op_alloc_pd(),
            "reg_mr" => self.op_reg_mr(),
            "channel" => self.op_channel(),
            "close_channel" => self.op_close_chan(),
            "read_event" => self.op_read_event(),
            "async_fd" => self.op_async_fd(),
            "close_async" => self.op_close_async(),
            "create_cq" => self.op_create_cq(),
            "create_qp" => self.op_create_qp(),
            "modify_walk" => self.op_modify(false),
            "modify_random" => self.op_modify(true),
            "query_qp" => self.op_query_qp(),
            "kick" => self.op_kick(),
            "connect" => self.op_connect(),
            "post" => self.op_post(),
            "mmap" => self.op_mmap(),
            "munmap" => self.op_munmap(),
            "touch" => self.op_touch(),
            "wrong_file" => self.op_wrong_file(),
            "wrong_cmd" => self.op_wrong_cmd(),
            _ => {
                let kind = match name {
                    "dealloc_pd" => ObjKind::Pd,
                    "dereg_mr" => ObjKind::Mr,
                    "destroy_cq" => ObjKind::Cq,
                    _ => ObjKind::Qp,
                };
                let c = self.pick_ctx()?;
                self.op_destroy(c, kind)
            }
        }
    }

    fn run(&mut self, target: u64) -> Res {
        self.audit()?;
        while self.tally.calls < target {
            if self.tally.calls >= self.next_window {
                self.op_window()?;
                self.next_window = self.tally.calls + 1500 + self.gen.below(1500);
            }
            if self.tally.calls >= self.next_audit {
                self.audit()?;
                self.next_audit = self.tally.calls + 500;
            }
            self.step()?;
        }
        self.audit()
    }

    /// Unmaps and closes everything; returns the objects left above the
    /// baseline after a bounded wait.
    fn finish(&mut self) -> Result<u64, String> {
        let mut first_err = None;
        while !self.model.maps.is_empty() {
            let i = self.model.maps.len() - 1;
            if let Err(e) = self.check_orphan_map(i) {
                first_err.get_or_insert(e);
            }
            if let Some(m) = self.model.maps.get(i).cloned() {
                let _ = munmap(m.addr, m.len);
            }
            self.model.remove_map(i);
        }
        let fds: Vec<RawFd> = self
            .model
            .fds
            .iter()
            .filter(|(fd, k)| **fd > 2 && **k != FdKind::Other)
            .map(|(fd, _)| *fd)
            .collect();
        for fd in fds {
            let _ = close_fd(fd);
            self.model.fds.remove(&fd);
        }
        let _ = close_fd(self.devnull);
        self.model.fds.remove(&self.devnull);
        self.model.ctxs.clear();
        if !self.arena.ro_untouched() {
            first_err.get_or_insert("the read-only pages under read-only MRs were written".into());
        }
        let (now, back) = wait_baseline(&self.base, self.n as usize, Duration::from_secs(10))?;
        if let Some(e) = first_err {
            return Err(e);
        }
        if !back {
            println!(
                "rmlx5-stress: after closing everything: {} (baseline {}){}",
                now.describe(),
                self.base.describe(),
                dump_tables(self.n as usize)
            );
        }
        Ok(now.excess_over(&self.base))
    }
}

/// The descriptors open in this process now.
fn open_fds() -> Vec<RawFd> {
    let listed: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
                .collect()
        })
        .unwrap_or_default();
    // The directory's own descriptor is closed by now.
    listed
        .into_iter()
        // SAFETY: F_GETFD on a descriptor number.
        .filter(|fd| unsafe { libc::fcntl(*fd, libc::F_GETFD) } >= 0)
        .collect()
}

// ---------------------------------------------------------------------------
// Concurrent windows

struct WindowPlan {
    dev: u32,
    seed_a: u64,
    seed_b: u64,
    ops: u64,
    arena: u64,
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
/// even name a new channel).
fn window_check(t: &mut Tally, what: &str, cmd: Command, r: Result<(), i32>) -> Res {
    t.note(r);
    if let Err(e) = r {
        let allowed = documented(Some(cmd)) | bits(&[libc::EBADF, libc::ENOTTY]);
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
fn window_destroyer(o: &WindowObjs, seed: u64, ops: u64) -> Result<(Tally, bool), String> {
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
        window_check(&mut t, "destroyer", cmd, r)?;
        if g.chance(1, 4) {
            std::thread::yield_now();
        }
    }
    Ok((t, closed))
}

/// The using thread: creates, modifies, kicks, maps and touches whatever
/// the handles name at the moment. Returns its tally, the channel fds it
/// created and its mappings.
fn window_user(
    p: &WindowPlan,
    o: &WindowObjs,
    t: &mut Tally,
    fds: &mut Vec<RawFd>,
    maps: &mut Vec<(usize, usize)>,
) -> Res {
    let mut g = Gen::new(p.seed_a);
    let fd = o.fd;
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
                window_check(t, "user", Command::CreateQp, r)?;
            }
            1 | 2 => {
                let mut m = ModifyQp {
                    qp_handle: h,
                    attr_mask: QP_STATE,
                    ..ModifyQp::default()
                };
                match g.below(5) {
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
                        m.dlid = p.dev + 1;
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
                window_check(t, "user", Command::ModifyQp, r)?;
            }
            3 => {
                let a = QueryQp {
                    qp_handle: h,
                    ..QueryQp::default()
                };
                let r = raw_call(fd, Command::QueryQp, &a).map(|_| ());
                window_check(t, "user", Command::QueryQp, r)?;
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
                window_check(t, "user", Command::Kick, r)?;
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
                        // SAFETY: our new writable mapping of `len` bytes.
                        unsafe { poke(addr + g.index(len), &[0xa5]) };
                        maps.push((addr, len));
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
                window_check(t, "user", Command::CreateCq, r)?;
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
                window_check(t, "user", Command::RegMr, r)?;
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
                window_check(t, "user", Command::CreateCompChannel, r.map(|_| ()))?;
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
                window_check(t, "user", cmd, r)?;
            }
        }
    }
    Ok(())
}

/// Runs one concurrent window; everything it opened is closed and
/// unmapped before it returns.
fn window(p: &WindowPlan) -> Result<Tally, String> {
    let mut t = Tally::default();
    let o = Arc::new(window_setup(p, &mut t)?);
    let ob = o.clone();
    let (seed_b, ops) = (p.seed_b, p.ops);
    let b = std::thread::spawn(move || window_destroyer(&ob, seed_b, ops));
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
    for (addr, len) in maps {
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

// ---------------------------------------------------------------------------
// Scenario 1: fuzz_ioctl_sequences

fn fuzz_ioctl_sequences() -> TestResult {
    let sc = scale()?;
    let target = sc.get("calls", 20_000);
    let seed = sc.seed();
    println!("@@STRESS fuzz seed={seed}");
    let n = num_hcas();
    let base = snapshot(n)?;
    let mut lim = Vec::new();
    for dev in 0..n as u32 {
        let fd = open_dev(dev)?;
        let q = raw_call(fd, Command::QueryDevice, &QueryDevice::default());
        let _ = close_fd(fd);
        let q = q.map_err(|e| format!("QUERY_DEVICE rmlx5_{dev}: {}", errno_name(e)))?;
        lim.push(DevLimits::from_query(&q));
    }
    // SAFETY: a NUL-terminated path.
    let devnull = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    ensure!(devnull >= 0, "open /dev/null: {}", errno_name(errno()));
    let mut model = Model::default();
    for fd in open_fds() {
        model.fds.insert(fd, FdKind::Other);
    }
    let mut f = Fuzz {
        gen: Gen::new(seed),
        seed,
        n: n as u32,
        lim,
        model,
        tally: Tally::default(),
        scratch: Vec::with_capacity(2 * PAGE),
        argmem: ArgMem::new()?,
        arena: Arena::new()?,
        devnull,
        log: VecDeque::new(),
        base: base.clone(),
        next_window: 1000,
        next_audit: 500,
        windows: 0,
        ops: BTreeMap::new(),
    };
    let start = Instant::now();
    let run = f.run(target);
    let leaked = f.finish();
    let elapsed = start.elapsed();
    println!(
        "@@STRESS fuzz calls={} accepted={} errnos={} seed={seed} leaked_objects={}",
        f.tally.calls,
        f.tally.accepted,
        f.tally.errno_list(),
        leaked.as_ref().map_or("?".to_string(), u64::to_string)
    );
    let counts: Vec<String> = f
        .tally
        .errnos
        .iter()
        .map(|(e, c)| format!("{}={c}", errno_name(*e)))
        .collect();
    let ops: Vec<String> = f.ops.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!(
        "rmlx5-stress: fuzz took {} ms, {} concurrent windows, {} contexts; errnos {}; \
         operations {}",
        elapsed.as_millis(),
        f.windows,
        f.model.next_ctx,
        counts.join(" "),
        ops.join(" ")
    );
    for dev in 0..n {
        if let Ok(st) = debugfs(dev, "stats") {
            if let Some(l) = st.lines().find(|l| l.starts_with("model ")) {
                println!("rmlx5-stress: fuzz rmlx5_{dev} {l}");
            }
        }
    }
    run?;
    let leaked = leaked?;
    check_eqs(n, Duration::from_secs(5))?;
    ensure!(
        leaked == 0,
        "{leaked} object(s) above the baseline after closing everything (seed={seed})"
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Scenario 2: kill_mid_traffic

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

fn kill_mid_traffic() -> TestResult {
    let sc = scale()?;
    let kills = sc.get_in("kills", 5, 0, 1_000_000)?;
    let seed = sc.seed();
    println!("rmlx5-stress: kill seed={seed}");
    let mut g = Gen::new(seed);
    let n = num_hcas();
    ensure!(n >= 2, "needs rmlx5_0 and rmlx5_1, have {n} HCA(s)");
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

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Two QPs across rmlx5_0 and rmlx5_1 exchange a few SENDs.
fn short_traffic() -> Res {
    use rmlx5::{Access, ConnectOpts, QpInit, RecvWr, SendOp, SendWr, Wc};
    let devs = rmlx5::devices().map_err(err)?;
    let (d0, d1) = (
        devs.first().ok_or("no rmlx5_0")?,
        devs.get(1).ok_or("no rmlx5_1")?,
    );
    let (a, b) = (d0.open().map_err(err)?, d1.open().map_err(err)?);
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

fn child_main(mode: &str, seed: u64) -> i32 {
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

/// Traffic between rmlx5_0 and rmlx5_1 (two QP pairs) and a loopback pair
/// on rmlx5_0: READs and WRITEs unsignaled, SENDs signaled; in event mode
/// every CQ is on a channel and armed, a third of the events stay
/// unacknowledged, and a thread sleeps in a read of an idle channel.
fn child_traffic(seed: u64, events: bool) -> Res {
    use rmlx5::{Access, ConnectOpts, QpInit, RecvWr, SendFlags, SendOp, SendWr, Wc};
    let mut g = Gen::new(seed);
    let devs = rmlx5::devices().map_err(err)?;
    let ctxs = [
        devs.first().ok_or("no rmlx5_0")?.open().map_err(err)?,
        devs.get(1).ok_or("no rmlx5_1")?.open().map_err(err)?,
    ];
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
    let dev = g.below32(2);
    let fd = open_dev(dev)?;
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
                dlid: dev + 1,
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

// ---------------------------------------------------------------------------
// Scenario 3: no_lost_event

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

fn no_lost_event() -> TestResult {
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
    let devs = rmlx5::devices().map_err(err)?;
    let ctx = devs.first().ok_or("no rmlx5_0")?.open().map_err(err)?;
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
    // allocates in rmlx5) must see ENOMEM, so the zero failures of the
    // event path above are because it does not allocate, not because
    // failslab never reached rmlx5.
    let mut control = None;
    if inject > 0 {
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

// ---------------------------------------------------------------------------

fn main() {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() == Some("--stress-child") {
        let mode = args.next().unwrap_or_default();
        let seed = args.next().and_then(|s| parse_number(&s)).unwrap_or(1);
        std::process::exit(child_main(&mode, seed));
    }
    std::process::exit(run_all(&[
        Test {
            name: "fuzz_ioctl_sequences",
            run: fuzz_ioctl_sequences,
        },
        Test {
            name: "kill_mid_traffic",
            run: kill_mid_traffic,
        },
        Test {
            name: "no_lost_event",
            run: no_lost_event,
        },
    ]));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_parsing() {
        assert_eq!(Scale::parse("").unwrap(), Scale::default());
        let s = Scale::parse(" calls=100 , seed=0x10,kills=1_000,,").unwrap();
        assert_eq!(s.get("calls", 7), 100);
        assert_eq!(s.get("seed", 7), 16);
        assert_eq!(s.get("kills", 7), 1000);
        assert_eq!(s.get("threads", 7), 7);
        assert_eq!(s.seed(), 16);
        assert!(Scale::parse("calls").unwrap_err().contains("key=value"));
        assert!(Scale::parse("call=3").unwrap_err().contains("unknown key"));
        assert!(Scale::parse("calls=x")
            .unwrap_err()
            .contains("not a number"));
        assert!(Scale::parse("calls=-1").is_err());
        assert!(Scale::parse("calls=1,calls=2")
            .unwrap_err()
            .contains("twice"));
        let s = Scale::parse("scale=100,calls=1000000,failslab=1,cve_loops=3").unwrap();
        assert_eq!(s.get("calls", 7), 10_000);
        assert_eq!(s.get("kills", 5), 1);
        assert_eq!(s.get("completions", 200_000), 2000);
        assert_eq!(s.get("threads", 4), 4);
        let s = Scale::parse("threads=0").unwrap();
        assert!(s.get_in("threads", 4, 1, 64).is_err());
        assert_eq!(s.get_in("cqs", 4, 1, 64), Ok(4));
        assert_eq!(parse_number("18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_number("0XfF"), Some(255));
        assert_eq!(parse_number(""), None);
    }

    #[test]
    fn generator_is_deterministic_and_never_stuck() {
        let (mut a, mut b) = (Gen::new(42), Gen::new(42));
        let xs: Vec<u64> = (0..100).map(|_| a.u64()).collect();
        let ys: Vec<u64> = (0..100).map(|_| b.u64()).collect();
        assert_eq!(xs, ys);
        let mut z = Gen::new(0);
        assert!((0..10).map(|_| z.u64()).any(|v| v != 0));
        assert_ne!(Gen::new(1).u64(), Gen::new(2).u64());
        let mut g = Gen::new(7);
        assert_eq!(g.below(0), 0);
        assert!((0..1000).all(|_| g.below(10) < 10));
        assert_eq!(g.pick::<u32>(&[]), None);
        assert_eq!(g.pick(&[5]), Some(5));
    }

    #[test]
    fn expectations_and_shapes() {
        let inval = Expect::err(libc::EINVAL);
        assert!(Expect::OK.allows(Ok(())));
        assert!(!Expect::OK.allows(Err(libc::EINVAL)));
        assert!(inval.allows(Err(libc::EINVAL)) && !inval.allows(Ok(())));
        let any = Expect::ok_or(&[libc::EINVAL, libc::EAGAIN]);
        assert!(any.allows(Ok(())) && any.allows(Err(libc::EAGAIN)));
        assert!(!any.allows(Err(libc::EIO)));
        assert_eq!(any.describe(), "success|EAGAIN|EINVAL");
        // Argument errors come before the fields' own.
        let busy = Expect::err(libc::EBUSY);
        let c = Command::DestroyCq;
        assert_eq!(combine(Shape::Small(3), busy, c), inval);
        assert_eq!(
            combine(Shape::Huge(5000), busy, c),
            Expect::err(libc::E2BIG)
        );
        assert_eq!(
            combine(Shape::Tail(100, 90), busy, c),
            Expect::err(libc::E2BIG)
        );
        assert_eq!(combine(Shape::Flags(1), Expect::OK, c), inval);
        assert_eq!(combine(Shape::OutField(12, 1), Expect::OK, c), inval);
        assert_eq!(combine(Shape::Null, busy, c), Expect::err(libc::EFAULT));
        assert_eq!(
            combine(Shape::TailFault(8), busy, c),
            Expect::err(libc::EFAULT)
        );
        assert_eq!(
            combine(Shape::WrongCmd(0), busy, c),
            Expect::err(libc::ENOTTY)
        );
        assert_eq!(combine(Shape::ZeroTail(4096), busy, c), busy);
        assert_eq!(combine(Shape::CmdSize(0), Expect::OK, c), Expect::OK);
        // A read-only argument: a success cannot answer, a refusal stays.
        assert_eq!(
            combine(Shape::ReadOnly, Expect::OK, c),
            Expect::err(libc::EFAULT)
        );
        assert_eq!(combine(Shape::ReadOnly, busy, c), busy);
        let k = combine(
            Shape::ReadOnly,
            Expect::ok_or(&[libc::EINVAL]),
            Command::Kick,
        );
        assert!(k.ok, "KICK writes no answer");
        let q = combine(
            Shape::ReadOnly,
            Expect::ok_or(&[libc::EINVAL]),
            Command::QueryQp,
        );
        assert!(!q.ok && q.allows(Err(libc::EFAULT)) && q.allows(Err(libc::EINVAL)));
    }

    #[test]
    fn documented_errnos() {
        for c in Command::ALL {
            let d = documented(Some(*c));
            for e in [libc::EINVAL, libc::E2BIG, libc::EFAULT, libc::ENOTTY] {
                assert!(d & bit(e) != 0, "{c:?} {e}");
            }
            assert_eq!(d & bit(libc::EIO), 0);
        }
        assert!(documented(Some(Command::CreateCq)) & bit(libc::EBADF) != 0);
        assert_eq!(documented(Some(Command::CreateQp)) & bit(libc::EBADF), 0);
        assert!(documented(Some(Command::DeallocPd)) & bit(libc::EBUSY) != 0);
        assert_eq!(documented(Some(Command::DestroyQp)) & bit(libc::EBUSY), 0);
        assert!(documented(Some(Command::GetAsyncFd)) & bit(libc::EEXIST) != 0);
        assert_eq!(documented(None), bit(libc::ENOTTY));
    }

    #[test]
    fn out_fields_lie_inside_the_structs() {
        for c in Command::ALL {
            let f = out_fields(*c);
            assert_eq!(f.is_empty(), *c == Command::ModifyQp, "{c:?}");
            for off in f {
                assert!(off >= 8 && off + 4 <= c.min_size(), "{c:?} {off}");
            }
        }
        // QUERY_PORT's port number is an input, not an out field.
        assert!(!out_fields(Command::QueryPort).contains(&8));
        // CREATE_QP's inputs end before qp_handle.
        assert!(out_fields(Command::CreateQp)
            .iter()
            .all(|o| *o >= core::mem::offset_of!(CreateQp, qp_handle)));
    }

    #[test]
    fn wrong_commands_are_never_ours() {
        let mut g = Gen::new(3);
        for _ in 0..10_000 {
            let c = g.pick(Command::ALL).unwrap();
            let w = wrong_cmd(&mut g, c);
            assert_eq!(Command::from_cmd(w), None, "{w:#x}");
            // Not a generic VFS ioctl type.
            let ty = (w >> 8) & 0xff;
            assert!(![0x00, 0x12, 0x15, 0x54, 0x58, 0x66, 0x94].contains(&ty) || ty == 0x1b);
        }
    }

    #[test]
    fn cq_geometry_rules() {
        let max = DevLimits::DOC.max_cqe;
        assert_eq!(cq_geometry(1, max), Some((1, 4096)));
        assert_eq!(cq_geometry(100, max), Some((128, 8192)));
        assert_eq!(cq_geometry(4096, max), Some((4096, 262_144)));
        assert_eq!(cq_geometry(max, max), Some((max, 4 << 20)));
        assert_eq!(cq_geometry(max / 2 + 1, max), Some((max, 4 << 20)));
        assert_eq!(cq_geometry(0, max), None);
        assert_eq!(cq_geometry(max + 1, max), None);
        assert_eq!(cq_geometry(u32::MAX, max), None);
        assert_eq!(cq_geometry((1 << 31) + 1, max), None);
    }

    fn qp(wr: u32, rwr: u32, sge: u32, rsge: u32, inline: u32) -> CreateQp {
        CreateQp {
            qp_type: QPT_RC,
            max_send_wr: wr,
            max_recv_wr: rwr,
            max_send_sge: sge,
            max_recv_sge: rsge,
            max_inline_data: inline,
            ..CreateQp::default()
        }
    }

    #[test]
    fn qp_geometry_rules() {
        let l = DevLimits::DOC;
        // 48 + max(2 * 16, 68 -> 80) = 128 bytes: 2 WQEBBs per WQE.
        let g = qp_geometry(&qp(64, 64, 2, 2, 64), &l).unwrap();
        assert_eq!(
            g,
            Geom {
                sq_wqe_cnt: 128,
                rq_wqe_cnt: 64,
                rq_wqe_shift: 5,
                sq_buf_offset: 2048,
                buf_bytes: 2048 + 128 * 64,
                max_send_wr: 64,
                max_recv_wr: 64,
                max_send_sge: 5,
                max_recv_sge: 2,
            }
        );
        // Zero caps are treated as one.
        let g = qp_geometry(&qp(0, 0, 0, 0, 0), &l).unwrap();
        assert_eq!((g.sq_wqe_cnt, g.rq_wqe_cnt, g.rq_wqe_shift), (1, 1, 4));
        // The largest queues fit.
        let g = qp_geometry(&qp(2048, 2048, 30, 30, 512), &l).unwrap();
        assert_eq!(g.sq_wqe_cnt, 32768);
        assert_eq!(g.max_send_wr, 32768 / 9);
        assert_eq!(g.rq_wqe_shift, 9);
        assert!(qp_caps_in_range(&qp(2048, 2048, 30, 30, 512), &l));
        for bad in [
            qp(2049, 1, 1, 1, 0),
            qp(1, 2049, 1, 1, 0),
            qp(1, 1, 31, 1, 0),
            qp(1, 1, 1, 31, 0),
            qp(1, 1, 1, 1, 513),
            qp(u32::MAX, 1, 1, 1, 0),
            CreateQp {
                qp_type: 3,
                ..qp(1, 1, 1, 1, 0)
            },
            CreateQp {
                sq_sig_all: 2,
                ..qp(1, 1, 1, 1, 0)
            },
        ] {
            assert!(!qp_caps_in_range(&bad, &l), "{bad:?}");
        }
    }

    fn m(mask: u32, state: u32) -> ModifyQp {
        ModifyQp {
            attr_mask: mask,
            qp_state: state,
            ..ModifyQp::default()
        }
    }

    #[test]
    fn modify_outcomes() {
        let l = DevLimits::DOC;
        let to_init = ModifyQp {
            port_num: 1,
            qp_access_flags: ACCESS_REMOTE_WRITE,
            ..m(
                QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS,
                QPS_INIT,
            )
        };
        assert_eq!(modify_outcome(QPS_RESET, &to_init, &l, 2), Some(QPS_INIT));
        // Missing a required attribute, or from the wrong state.
        let mut x = to_init;
        x.attr_mask &= !QP_PKEY_INDEX;
        assert_eq!(modify_outcome(QPS_RESET, &x, &l, 2), None);
        assert_eq!(modify_outcome(QPS_RTS, &to_init, &l, 2), None);
        // INIT -> INIT takes the same attributes as optional ones.
        assert_eq!(modify_outcome(QPS_INIT, &to_init, &l, 2), Some(QPS_INIT));
        // An attribute outside the mask must be zero.
        let mut x = to_init;
        x.timeout = 3;
        assert_eq!(modify_outcome(QPS_RESET, &x, &l, 2), None);
        // An attribute the transition does not allow.
        let mut x = to_init;
        x.attr_mask |= QP_TIMEOUT;
        assert_eq!(modify_outcome(QPS_RESET, &x, &l, 2), None);
        let to_rtr = ModifyQp {
            dlid: 2,
            sl: 15,
            path_mtu: 5,
            dest_qp_num: 0x123,
            max_dest_rd_atomic: 16,
            min_rnr_timer: 31,
            ..m(
                QP_STATE
                    | QP_AV
                    | QP_PATH_MTU
                    | QP_DEST_QPN
                    | QP_RQ_PSN
                    | QP_MAX_DEST_RD_ATOMIC
                    | QP_MIN_RNR_TIMER,
                QPS_RTR,
            )
        };
        assert_eq!(modify_outcome(QPS_INIT, &to_rtr, &l, 2), Some(QPS_RTR));
        // A LID naming no HCA, an SL beyond 4 bits, too many reads.
        for f in [
            |x: &mut ModifyQp| x.dlid = 3,
            |x: &mut ModifyQp| x.dlid = 0,
            |x: &mut ModifyQp| x.sl = 16,
            |x: &mut ModifyQp| x.max_dest_rd_atomic = 17,
            |x: &mut ModifyQp| x.path_mtu = 6,
            |x: &mut ModifyQp| x.dest_qp_num = 1 << 24,
        ] {
            let mut x = to_rtr;
            f(&mut x);
            assert_eq!(modify_outcome(QPS_INIT, &x, &l, 2), None, "{x:?}");
        }
        let to_rts = ModifyQp {
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 16,
            ..m(
                QP_STATE
                    | QP_TIMEOUT
                    | QP_RETRY_CNT
                    | QP_RNR_RETRY
                    | QP_SQ_PSN
                    | QP_MAX_QP_RD_ATOMIC,
                QPS_RTS,
            )
        };
        assert_eq!(modify_outcome(QPS_RTR, &to_rts, &l, 2), Some(QPS_RTS));
        let mut x = to_rts;
        x.attr_mask |= QP_CUR_STATE;
        x.cur_qp_state = QPS_RTR;
        assert_eq!(modify_outcome(QPS_RTR, &x, &l, 2), Some(QPS_RTS));
        x.cur_qp_state = QPS_INIT;
        assert_eq!(modify_outcome(QPS_RTR, &x, &l, 2), None);
        assert_eq!(
            modify_outcome(QPS_RTS, &m(QP_STATE, QPS_SQD), &l, 2),
            Some(QPS_SQD)
        );
        assert_eq!(
            modify_outcome(QPS_SQD, &m(QP_STATE, QPS_RTS), &l, 2),
            Some(QPS_RTS)
        );
        assert_eq!(
            modify_outcome(QPS_SQE, &m(QP_STATE, QPS_RTS), &l, 2),
            Some(QPS_RTS)
        );
        assert_eq!(modify_outcome(QPS_INIT, &m(QP_STATE, QPS_SQD), &l, 2), None);
        // RESET and ERR from anywhere, with nothing else.
        for s in 0..=QPS_ERR {
            assert_eq!(
                modify_outcome(s, &m(QP_STATE, QPS_ERR), &l, 2),
                Some(QPS_ERR)
            );
            assert_eq!(
                modify_outcome(s, &m(QP_STATE, QPS_RESET), &l, 2),
                Some(QPS_RESET)
            );
            let x = ModifyQp {
                cur_qp_state: s,
                ..m(QP_STATE | QP_CUR_STATE, QPS_ERR)
            };
            assert_eq!(modify_outcome(s, &x, &l, 2), None);
        }
        // No state: only the attributes of a same-state transition.
        assert_eq!(modify_outcome(QPS_RESET, &m(0, 0), &l, 2), Some(QPS_RESET));
        assert_eq!(modify_outcome(QPS_RTR, &m(0, 0), &l, 2), None);
        // Unknown or unsupported mask bits, states out of range, flags.
        for bad in [1 << 2, 1 << 6, 1 << 14, 1 << 19, 1 << 21, 1 << 31] {
            assert_eq!(
                modify_outcome(QPS_RESET, &m(QP_STATE | bad, QPS_ERR), &l, 2),
                None
            );
        }
        assert_eq!(modify_outcome(QPS_RESET, &m(QP_STATE, 7), &l, 2), None);
        let mut x = m(QP_STATE, QPS_ERR);
        x.hdr.flags = 1;
        assert_eq!(modify_outcome(QPS_RESET, &x, &l, 2), None);
    }

    #[test]
    fn lowest_free_handles() {
        let mut t: BTreeMap<u32, ()> = BTreeMap::new();
        assert_eq!(lowest_free(&t), 1);
        t.insert(1, ());
        t.insert(2, ());
        t.insert(4, ());
        assert_eq!(lowest_free(&t), 3);
        t.insert(3, ());
        assert_eq!(lowest_free(&t), 5);
    }

    fn cq(serial: u64, cqn: u32, chan: Option<u64>) -> CqM {
        CqM {
            users: 0,
            chan,
            cqn,
            buf_size: 4096,
            serial,
            tainted: false,
            big: false,
            events_read: 0,
        }
    }

    fn qpm(pd: u32, scq: u32, rcq: u32, qpn: u32) -> QpM {
        QpM {
            pd,
            scq,
            rcq,
            qpn,
            state: Some(QPS_RESET),
            buf_size: 8192,
            sq_off: 1024,
            sq_cnt: 64,
            bf_offset: 0x800,
            bf_size: 256,
            serial: u64::from(qpn),
            big: false,
            granted: [1; 5],
            dest: (0, 0),
            posted: 0,
            rq_cnt: 64,
            rq_shift: 4,
            recvs: 0,
        }
    }

    #[test]
    fn model_bookkeeping() {
        let mut md = Model::default();
        for fd in 0..3 {
            md.fds.insert(fd, FdKind::Other);
        }
        let c = md.open_ctx(3, 0);
        let other = md.open_ctx(4, 0);
        assert_eq!(md.lowest_free_fd(), 5);
        md.ctxs.get_mut(&c).unwrap().pds.insert(1, PdM::default());
        let mr = MrM {
            pd: 1,
            key: 0x200,
            addr: 0x1000,
            len: 0x1000,
            access: ACCESS_ALL,
        };
        md.add_mr(c, 1, mr);
        let ch = md.add_chan(c, 5);
        let och = md.add_chan(other, 6);
        md.ctxs
            .get_mut(&c)
            .unwrap()
            .cqs
            .insert(1, cq(10, 0x40, Some(ch)));
        md.ctxs
            .get_mut(&c)
            .unwrap()
            .cqs
            .insert(2, cq(11, 0x41, None));
        md.add_qp(c, 1, qpm(1, 1, 2, 0x100));
        // Users make destroys EBUSY; missing handles are EINVAL.
        assert_eq!(
            md.destroy_expect(c, ObjKind::Pd, 1),
            Expect::err(libc::EBUSY)
        );
        assert_eq!(
            md.destroy_expect(c, ObjKind::Cq, 1),
            Expect::err(libc::EBUSY)
        );
        assert_eq!(
            md.destroy_expect(c, ObjKind::Cq, 3),
            Expect::err(libc::EINVAL)
        );
        assert_eq!(
            md.destroy_expect(other, ObjKind::Cq, 1),
            Expect::err(libc::EINVAL)
        );
        assert_eq!(md.destroy_expect(c, ObjKind::Qp, 1), Expect::OK);
        md.destroy(c, ObjKind::Qp, 1);
        assert_eq!(md.destroy_expect(c, ObjKind::Cq, 1), Expect::OK);
        assert_eq!(
            md.destroy_expect(c, ObjKind::Pd, 1),
            Expect::err(libc::EBUSY)
        );
        md.destroy(c, ObjKind::Mr, 1);
        assert_eq!(md.destroy_expect(c, ObjKind::Pd, 1), Expect::OK);
        // The same CQ as send and receive CQ is held twice.
        md.add_qp(c, 1, qpm(1, 2, 2, 0x101));
        assert_eq!(md.ctxs[&c].cqs[&2].users, 2);
        md.destroy(c, ObjKind::Qp, 1);
        assert_eq!(md.ctxs[&c].cqs[&2].users, 0);
        // Channels: own, another context's, a closed number, other files.
        assert_eq!(md.channel_expect(c, -1), Expect::OK);
        assert_eq!(md.channel_expect(c, 5), Expect::OK);
        assert_eq!(md.channel_expect(c, 6), Expect::err(libc::EINVAL));
        assert_eq!(md.channel_expect(other, 6), Expect::OK);
        assert_eq!(md.channel_expect(c, 3), Expect::err(libc::EINVAL));
        assert_eq!(md.channel_expect(c, 900), Expect::err(libc::EBADF));
        md.close_chan(ch);
        assert_eq!(md.channel_expect(c, 5), Expect::err(libc::EBADF));
        assert_eq!(md.lowest_free_fd(), 5);
        // CQNs belong to their context.
        assert_eq!(md.cqn_owner(0, 0x40), Some(c));
        assert_eq!(md.cqn_owner(1, 0x40), None);
        // A mapping keeps the context after its fd is closed.
        md.add_map(MapM {
            ctx: c,
            addr: 0x1000,
            len: 4096,
            kind: Kind::Uar,
            obj: MapObj::Uar,
            writable: true,
        });
        md.close_ctx_fd(c);
        assert!(md.alive(c));
        assert!(!md.fds.contains_key(&3));
        assert_eq!(md.counts(2), (vec![2, 0], vec![0, 0], 0));
        md.remove_map(0);
        assert!(!md.alive(c));
        assert_eq!(md.counts(2), (vec![0, 0], vec![0, 0], 0));
        // The other context's channel stays its own.
        assert_eq!(md.chans[&och].ctx, other);
        md.close_ctx_fd(other);
        assert!(!md.alive(other));
    }

    #[test]
    fn taint_spreads_to_peers_and_cq_sharers() {
        let mut md = Model::default();
        let a = md.open_ctx(3, 0);
        let b = md.open_ctx(4, 0);
        let c = md.open_ctx(5, 1);
        for x in [a, b, c] {
            let ctx = md.ctxs.get_mut(&x).unwrap();
            ctx.pds.insert(1, PdM::default());
            ctx.cqs.insert(1, cq(100 + x as u64, 0x40, None));
            ctx.cqs.insert(2, cq(200 + x as u64, 0x41, None));
        }
        // a: qp1 (cq 1) sends to b's qp 0x110; qp2 shares cq 1; qp3 on cq 2.
        md.add_qp(
            a,
            1,
            QpM {
                dest: (0, 0x110),
                ..qpm(1, 1, 1, 0x100)
            },
        );
        md.add_qp(a, 2, qpm(1, 2, 1, 0x101));
        md.add_qp(a, 3, qpm(1, 2, 2, 0x102));
        md.add_qp(
            b,
            1,
            QpM {
                dest: (1, 0x120),
                ..qpm(1, 1, 1, 0x110)
            },
        );
        md.add_qp(c, 1, qpm(1, 1, 1, 0x120));
        // The same QPN on another HCA is another QP.
        md.add_qp(c, 2, qpm(1, 2, 2, 0x110));
        md.taint_qp(a, 1);
        let st = |md: &Model, x: usize, h: u32| md.ctxs[&x].qps[&h].state;
        assert_eq!(st(&md, a, 1), None);
        // Shares CQ 1 with qp 1.
        assert_eq!(st(&md, a, 2), None);
        // Shares CQ 2 with qp 2.
        assert_eq!(st(&md, a, 3), None);
        // The peer, and the peer's peer on HCA 1.
        assert_eq!(st(&md, b, 1), None);
        assert_eq!(st(&md, c, 1), None);
        assert_eq!(st(&md, c, 2), Some(QPS_RESET));
        assert!(md.tainted_qpns.contains(&(0, 0x110)));
        assert!(md.tainted_qpns.contains(&(1, 0x120)));
        assert!(!md.tainted_qpns.contains(&(1, 0x110)));
        // Writing into a CQ taints its QPs.
        md.taint_cq(c, 2);
        assert_eq!(st(&md, c, 2), None);
    }

    /// The state walk only generates transitions the state machine takes.
    #[test]
    fn walk_modify_is_always_accepted() {
        let mut f = Fuzz {
            gen: Gen::new(11),
            seed: 11,
            n: 2,
            lim: vec![DevLimits::DOC; 2],
            model: Model::default(),
            tally: Tally::default(),
            scratch: Vec::new(),
            argmem: ArgMem::new().unwrap(),
            arena: Arena::new().unwrap(),
            devnull: -1,
            log: VecDeque::new(),
            base: Objects::default(),
            next_window: 0,
            next_audit: 0,
            windows: 0,
            ops: BTreeMap::new(),
        };
        let l = DevLimits::DOC;
        let mut seen = BTreeSet::new();
        for _ in 0..5000 {
            let cur = f.gen.below32(QPS_ERR + 1);
            let m = f.walk_modify(1, cur, &l);
            let next = if m.attr_mask & QP_STATE != 0 {
                m.qp_state
            } else {
                cur
            };
            if transition(cur, next).is_none() {
                continue;
            }
            assert_eq!(modify_outcome(cur, &m, &l, 2), Some(next), "{cur} {m:?}");
            seen.insert((cur, next));
        }
        for t in [
            (QPS_RESET, QPS_INIT),
            (QPS_INIT, QPS_RTR),
            (QPS_RTR, QPS_RTS),
            (QPS_RTS, QPS_SQD),
            (QPS_SQD, QPS_RTS),
            (QPS_RTS, QPS_ERR),
            (QPS_ERR, QPS_RESET),
        ] {
            assert!(seen.contains(&t), "{t:?} never generated");
        }
        // Random masks mostly fail, but not always.
        let ok = (0..5000)
            .filter(|_| {
                let cur = f.gen.below32(QPS_ERR + 1);
                let m = f.random_modify(1, cur, &l);
                modify_outcome(cur, &m, &l, 2).is_some()
            })
            .count();
        assert!(ok > 10 && ok < 4000, "{ok}");
        // The arena's read-only pages start out zero.
        assert!(f.arena.ro_untouched());
    }

    #[test]
    fn debugfs_parsing() {
        let cqs = "cqn pi ci armed solicited sn error events handler\n1 0 0 0 0 0 0 0 1\n2 3 3 1 0 1 0 1 1\n";
        assert_eq!(table_rows(cqs), 2);
        assert_eq!(
            table_rows("qpn state dest_hca dest_qpn sq_pi sq_ci rq_ci\n"),
            0
        );
        assert_eq!(table_rows(""), 0);
        let stats = "stray_eqes 1\nulp_objects 0\ndma_regions buf 8 kernel_mr 1 user_mr 3\nmodel Stats { doorbells: 4 }\n";
        assert_eq!(dma_field(stats, "buf"), Some(8));
        assert_eq!(dma_field(stats, "kernel_mr"), Some(1));
        assert_eq!(dma_field(stats, "user_mr"), Some(3));
        assert_eq!(dma_field(stats, "nope"), None);
        assert_eq!(dma_field("nothing", "buf"), None);
        let base = Objects {
            cqs: vec![1, 0],
            qps: vec![0, 0],
            dma_buf: 8,
            user_mr: 0,
        };
        let now = Objects {
            cqs: vec![3, 0],
            qps: vec![0, 2],
            dma_buf: 7,
            user_mr: 1,
        };
        assert_eq!(now.excess_over(&base), 5);
        assert_eq!(base.excess_over(&base), 0);
    }

    #[test]
    fn stalled_eq_rows() {
        let t = "eqn vector irq ci armed eqes irqs model_pi model_ci interrupts overruns\n\
                 0 0 24 18 1 18 17 18 18 17 0\n\
                 1 1 25 118 0 118 102 143 118 103 0\n\
                 2 2 26 19 0 19 16 19 19 16 0\n";
        let s = stalled_eqs(t);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].0, 1);
        assert!(stalled_eqs("").is_empty());
        assert!(stalled_eqs("eqn armed\n1 0\n").is_empty());
    }

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
