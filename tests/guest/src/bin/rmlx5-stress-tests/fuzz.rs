// SPDX-License-Identifier: GPL-2.0

//! Scenario `fuzz_ioctl_sequences`: the state-aware generator of uverbs
//! calls (`Fuzz`, which runs in the guest), the memory it presents
//! arguments and MRs in, and the scenario that drives it.
//!
//! It runs against the software HCAs (the default), or with
//! `fuzzdev=N` against ConnectX function `rmlx5_N` alone ([`FnTarget`]),
//! whose differences it knows: limits from QUERY_DEVICE and the port's LID
//! from QUERY_PORT; KICK refused with `EOPNOTSUPP`, doorbells rung by
//! stores to the mapped UAR page instead; REG_MR's IOVA at the memory's
//! offset in its page; MODIFY_QP as cx/dev.rs does it
//! ([`crate::rules::fn_modify`]); and the function's object counts
//! (debugfs `rmlx5/objects`) for the audit instead of the software HCA's
//! tables. The emulated function fails the run on any command or doorbell
//! it refuses, so on it the fuzzer writes to device-visible memory and
//! registers only what a correct provider writes, and sends no MODIFY_QP
//! that would reach a firmware refusing it (Documentation/reliability.md).

use std::collections::{BTreeMap, VecDeque};
use std::os::fd::RawFd;
use std::sync::atomic::{fence, Ordering as AtomicOrdering};
use std::time::{Duration, Instant};

use rmlx5_abi::ioctl::{cmd_nr, iowr, Command};
use rmlx5_abi::mmap::{decode, encode, Kind, MAX_HANDLE};
use rmlx5_abi::uapi::*;
use rmlx5_abi::wire::Wire;
use rmlx5_guest_tests::raw::errno;
use rmlx5_guest_tests::{ensure, TestResult};

use crate::debugfs::{
    check_eqs, debugfs, dump_tables, function_objects, num_hcas, snapshot, wait_baseline,
    FnObjects, Objects,
};
use crate::expect::{
    bit, bits, combine, documented, function_only, out_fields, shape_errno, show, wrong_cmd,
    Expect, Shape,
};
use crate::knobs::{scale, Gen};
use crate::objects::{lowest_free, CqM, CtxM, FdKind, MapM, MapObj, Model, MrM, ObjKind, PdM, QpM};
use crate::rules::{
    cq_geometry, fn_modify, fn_modify_any, modify_outcome, qp_caps_in_range, qp_geometry,
    transition, DevLimits, FnModify, FIRST_MULTICAST_LID,
};
use crate::sys::{
    anon, close_fd, enc, errno_name, ioctl, mmap_fd, munmap, open_dev, peek, poke, poll_now,
    raw_call, read_fd, set_nonblock, store32, store64, Res, PAGE, RW,
};
use crate::window::{window, WindowPlan};

/// Tag of every `user_handle` the fuzzer hands out (the low bits are a
/// serial number naming the object in the model).
const TAG: u64 = 0x5354_0000_0000_0000;
const TAG_MASK: u64 = 0xffff_0000_0000_0000;

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
pub(crate) struct Tally {
    calls: u64,
    accepted: u64,
    errnos: BTreeMap<i32, u64>,
}

impl Tally {
    pub(crate) fn note(&mut self, r: Result<(), i32>) {
        self.calls += 1;
        match r {
            Ok(()) => self.accepted += 1,
            Err(e) => *self.errnos.entry(e).or_insert(0) += 1,
        }
    }

    pub(crate) fn merge(&mut self, o: &Tally) {
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

/// The ConnectX function the fuzzer runs on (`fuzzdev=N`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FnTarget {
    /// Its index: `rmlx5_<dev>`, `/dev/rmlx5_uverbs<dev>`.
    dev: u32,
    /// Its port's LID (QUERY_PORT), which its QPs name it by.
    lid: u32,
    /// What it held at the start (debugfs `rmlx5/objects`).
    base: FnObjects,
}

/// A device index that names no device: the peer of a QP whose address
/// vector names a LID the fuzzer has no device for.
const NOWHERE: u32 = u32::MAX - 1;

struct Fuzz {
    gen: Gen,
    seed: u64,
    /// Software HCAs (their debugfs tables are in every snapshot).
    n: u32,
    /// The ConnectX function every context is opened on, if not the
    /// software HCAs.
    func: Option<FnTarget>,
    /// The limits of each device the fuzzer opens, by index.
    lim: BTreeMap<u32, DevLimits>,
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
        } else if self.func.is_some() {
            documented(Some(cmd)) | function_only(cmd)
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

    // -- devices -------------------------------------------------------------

    /// The device a new context is opened on: a software HCA at random, or
    /// the function.
    fn pick_dev(&mut self) -> u32 {
        match self.func {
            Some(f) => f.dev,
            None => self.gen.below32(self.n),
        }
    }

    /// The LID a QP's address vector names device `dev` by.
    fn lid_of(&self, dev: u32) -> u32 {
        match self.func {
            Some(f) => f.lid,
            None => dev + 1,
        }
    }

    /// The device an address vector's LID names (for the model's peers):
    /// on the software HCAs the HCA before it; on the function its own
    /// LID names it and any other LID nothing the fuzzer has.
    fn dev_of_lid(&self, dlid: u32) -> u32 {
        match self.func {
            Some(f) if dlid == f.lid => f.dev,
            Some(_) => NOWHERE,
            None => dlid.saturating_sub(1),
        }
    }

    // -- contexts ----------------------------------------------------------

    fn op_open(&mut self) -> Result<usize, String> {
        let dev = self.pick_dev();
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
                let want = self.lim.get(&dev).copied();
                // A function's doorbells are stores to its UAR page.
                let flags_ok = self.func.is_none() || d.device_flags & DEVICE_UAR_DOORBELLS != 0;
                if d.device_index != dev || Some(DevLimits::from_query(&d)) != want || !flags_ok {
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
                if p.lid != self.lid_of(dev) || p.state != PORT_ACTIVE {
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
        let max = self.lim.values().next().map_or(1 << 32, |l| l.max_mr_size);
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
        // A function's MR maps whole pages from the one holding the first
        // byte, so the IOVA must sit at the memory's offset in its page
        // (uverbs/objects.rs `Umr::new`): mostly moved there, else refused.
        let offset_ok = a.iova % PAGE as u64 == a.addr % PAGE as u64;
        let mut fn_offset_err = None;
        if self.func.is_some() && !offset_ok && check_err.is_none() {
            if self.gen.chance(3, 4) {
                a.iova = (a.iova & !(PAGE as u64 - 1)) | (a.addr % PAGE as u64);
            } else {
                fn_offset_err = Some(libc::EINVAL);
            }
        }
        let sem = if let Some(e) = check_err.or(pin_err) {
            Expect::err(e)
        } else if !pd_live {
            Expect::err(libc::EINVAL)
        } else if let Some(e) = fn_offset_err {
            Expect::err(e)
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
        let l = self.lim.get(&dev).copied().ok_or("no limits")?;
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
        let l = self.lim.get(&dev).copied().ok_or("no limits")?;
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
                m.dlid = match self.func {
                    // Its own port: the loopback the emulated fabric runs.
                    Some(f) => f.lid,
                    None => 1 + self.gen.below32(self.n),
                };
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
                let dev = match self.func {
                    Some(f) => f.dev,
                    None if m.dlid > 0 => m.dlid - 1,
                    None => self.gen.below32(self.n),
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
                // LIDs naming no HCA; on a function, those the kernel
                // refuses (any unicast LID would go to the firmware).
                let bad = match self.func {
                    Some(_) => FIRST_MULTICAST_LID + self.gen.below32(0x4000),
                    None => self.n + 1,
                };
                m.dlid = self.gen.pick(&[0, bad, 0xffff, 0x1_0000]).unwrap_or(0)
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
        let l = self.lim.get(&dev).copied().ok_or("no limits")?;
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
        if self.func.is_some() {
            return self.fn_modify_op(c, fd, h, cur, &m, &l);
        }
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

    /// MODIFY_QP `m` of QP handle `h` (state `cur` in the model: `None`
    /// no such QP, `Some(None)` unknown) on the function, as
    /// [`fn_modify`] predicts it. A request that would reach a firmware
    /// refusing it (a forward move of a QP of unknown state) is not sent,
    /// unless its presentation is refused first.
    fn fn_modify_op(
        &mut self,
        c: usize,
        fd: RawFd,
        h: u32,
        cur: Option<Option<u32>>,
        m: &ModifyQp,
        l: &DevLimits,
    ) -> Res {
        let outcome = match cur {
            // The argument check, then the handle: EINVAL either way.
            None => Some(FnModify::Refused(libc::EINVAL)),
            Some(Some(s)) => Some(fn_modify(s, m, l)),
            Some(None) => fn_modify_any(m, l),
        };
        let shape = self.shape(Command::ModifyQp);
        let sem = match outcome {
            Some(FnModify::Refused(e)) => Expect::err(e),
            Some(FnModify::Moves(_)) => Expect::OK,
            None => {
                if shape_errno(shape).is_none() {
                    *self.ops.entry("modify_withheld").or_insert(0) += 1;
                    return Ok(());
                }
                // Refused for its presentation: the fields are not read.
                Expect::err(libc::EINVAL)
            }
        };
        let o = self.call(
            fd,
            Command::ModifyQp,
            &enc(m),
            sem,
            shape,
            &format!(
                "ctx{c} qp {h} state {cur:?} mask {:#x} -> {} dlid {} dest {:#x}",
                m.attr_mask, m.qp_state, m.dlid, m.dest_qp_num
            ),
        )?;
        if let (true, Some(FnModify::Moves(next))) = (o.ok(), outcome) {
            self.fn_moved(c, h, next, m);
        }
        Ok(())
    }

    /// The function moved QP `h` of context `c` to `next` as `m` asked.
    /// The state is known again after RESET and ERR, which no traffic
    /// leaves (RESET also empties the queues and forgets the peer); a QP
    /// that receives (RTR, RTS) while traffic may reach it
    /// ([`Model::exposed`]) may go to ERR by itself, so it is tainted as
    /// one carrying traffic. INIT2RTR sets the peer to what the command
    /// carried (the path's LID, and the QPN, 0 if the mask left it out).
    fn fn_moved(&mut self, c: usize, h: u32, next: u32, m: &ModifyQp) {
        let exposed = self.model.exposed(c, h);
        let peer = (
            self.dev_of_lid(m.dlid),
            if m.attr_mask & QP_DEST_QPN != 0 {
                m.dest_qp_num
            } else {
                0
            },
        );
        let Some(q) = self.model.ctxs.get_mut(&c).and_then(|x| x.qps.get_mut(&h)) else {
            return;
        };
        q.state = Some(next);
        match next {
            QPS_RESET => {
                q.dest = (0, 0);
                q.posted = 0;
                q.recvs = 0;
            }
            QPS_RTR => q.dest = peer,
            _ => {}
        }
        if matches!(next, QPS_RTR | QPS_RTS) && exposed {
            self.model.taint_qp(c, h);
        }
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
        if self.func.is_some() && m.kind != Kind::CqBuf {
            // A function's UAR page is its registers, and it reads a live
            // QP's queues and any doorbell record whenever it likes (a
            // doorbell is a posted write that may reach it late): garbage
            // there is a refused doorbell, which fails the emulated run.
            // The kernel reads none of it. Only CQ rings take garbage.
            *self.ops.entry("touch_withheld").or_insert(0) += 1;
            return Ok(());
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
        if self.func.is_some() {
            return self.fn_kick(c, fd);
        }
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

    /// KICK on the function: after its argument check (a known kind, no
    /// UAR offset but for sends), refused with `EOPNOTSUPP` whatever it
    /// names, and nothing reaches the device (the doorbells are the
    /// stores of `op_post` and `arm_cq`).
    fn fn_kick(&mut self, c: usize, fd: RawFd) -> Res {
        let mut k = Kick::default();
        let sem = match self.gen.below(6) {
            0 => {
                k.kind = self.gen.pick(&[0, 5, 6, 0x100, u32::MAX]).unwrap_or(0);
                k.handle = self.pick_handle(c, ObjKind::Qp);
                Expect::err(libc::EINVAL)
            }
            1 => {
                k.kind = self
                    .gen
                    .pick(&[KICK_CQ_ARM, KICK_RECV])
                    .unwrap_or(KICK_RECV);
                k.handle = self.pick_handle(c, ObjKind::Qp);
                k.uar_offset = 1 + self.gen.below32(4096);
                Expect::err(libc::EINVAL)
            }
            2 => {
                k.kind = KICK_CQ_ARM;
                k.handle = self.pick_handle(c, ObjKind::Cq);
                Expect::err(libc::EOPNOTSUPP)
            }
            3 => {
                k.kind = KICK_RECV;
                k.handle = self.pick_handle(c, ObjKind::Qp);
                Expect::err(libc::EOPNOTSUPP)
            }
            _ => {
                k.kind = self
                    .gen
                    .pick(&[KICK_SEND, KICK_SEND_BLUEFLAME])
                    .unwrap_or(KICK_SEND);
                let h = self.pick_handle(c, ObjKind::Qp);
                k.handle = h;
                let bf = self.ctx(c)?.qps.get(&h).map(|q| q.bf_offset);
                k.uar_offset = match bf {
                    Some(o) if self.gen.chance(3, 4) => o + self.gen.below32(2) * 256,
                    _ => self.gen.u32(),
                };
                Expect::err(libc::EOPNOTSUPP)
            }
        };
        let shape = self.shape(Command::Kick);
        self.call(
            fd,
            Command::Kick,
            &enc(&k),
            sem,
            shape,
            &format!(
                "ctx{c} kind {} handle {} offset {:#x} (function)",
                k.kind, k.handle, k.uar_offset
            ),
        )?;
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
        let l = self.lim.get(&dev).copied().ok_or("no limits")?;
        if self.func.is_some() {
            // On the function, only what [`fn_modify`] knows the outcome of
            // and the firmware takes (a QP that went exposed to RTR stays
            // there).
            let outcome = match cur {
                Some(s) => Some(fn_modify(s, m, &l)),
                None => fn_modify_any(m, &l),
            };
            let sem = match outcome {
                Some(FnModify::Refused(e)) => Expect::err(e),
                Some(FnModify::Moves(_)) => Expect::OK,
                None => return Ok(()),
            };
            let o = self.call(
                fd,
                Command::ModifyQp,
                &enc(m),
                sem,
                Shape::Plain,
                &format!("ctx{c} qp {h} connect -> {}", m.qp_state),
            )?;
            if let (true, Some(FnModify::Moves(next))) = (o.ok(), outcome) {
                *self.ops.entry("connect_steps_ok").or_insert(0) += 1;
                self.fn_moved(c, h, next, m);
            }
            return Ok(());
        }
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
                dlid: self.lid_of(peer.2),
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
        if self.func.is_some() && q.posted >= q.sq_cnt {
            // A provider never announces more WQEs than the SQ holds: the
            // function refuses a record beyond what it completed plus the
            // SQ's size, and the fuzzer does not read the CQ to learn what
            // completed. So a QP's SQ is used once, until RESET.
            *self.ops.entry("post_sq_full").or_insert(0) += 1;
            return Ok(());
        }
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
        if self.func.is_some() {
            // The function's own doorbell: the WQE, then the record's send
            // counter as one word, then the UAR store the device takes as
            // the doorbell (8 bytes) or a BlueFlame copy (the WQEBB in
            // 8-byte stores), each ordered after the one before. No KICK.
            // SAFETY: one WQEBB of the SQ, inside our writable mapping of
            // the QP buffer.
            unsafe { poke(buf + q.sq_off as usize + idx * 64, &w) };
            fence(AtomicOrdering::SeqCst);
            // SAFETY: the send counter (bytes 4..8) of our writable,
            // page-aligned doorbell record mapping.
            unsafe { store32(dbr + 4, (pi & 0xffff).to_be_bytes()) };
            fence(AtomicOrdering::SeqCst);
            let words = if blueflame { w.len() / 8 } else { 1 };
            for i in 0..words {
                let mut b = [0u8; 8];
                b.copy_from_slice(w.get(i * 8..i * 8 + 8).unwrap_or(&[0; 8]));
                // SAFETY: 8 aligned bytes of the QP's BlueFlame half (256
                // bytes at a multiple of 256) in our writable UAR mapping.
                unsafe { store64(uar + half as usize + i * 8, b) };
            }
            if let Some(qq) = self.model.ctxs.get_mut(&c).and_then(|x| x.qps.get_mut(&h)) {
                qq.posted = pi;
            }
            let st = match q.state {
                Some(_) => "post_on_rts",
                None => "post_on_tainted",
            };
            *self.ops.entry(st).or_insert(0) += 1;
            self.note_log(format!(
                "#{} ctx{c} qp {h} rung: opcode {opcode:#x} len {len} lkey {lkey:#x} \
                 rkey {rkey:#x} to {:?}, WQE {}, {}",
                self.tally.calls,
                q.dest,
                q.posted,
                if blueflame { "BlueFlame" } else { "doorbell" }
            ));
            self.model.taint_qp(c, h);
            return Ok(());
        }
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
        if self.func.is_some() {
            // The record's ARM word, then the doorbell, one store each:
            // the function takes the arm from the store. No KICK.
            // SAFETY: the ARM word (bytes 4..8) of our writable,
            // page-aligned doorbell record mapping.
            unsafe { store32(dbr + 4, arm.to_be_bytes()) };
            fence(AtomicOrdering::SeqCst);
            // SAFETY: the 8-byte CQ doorbell at 0x20 of our writable,
            // page-aligned UAR mapping.
            unsafe { store64(uar + 0x20, db) };
            *self.ops.entry("arm_rung").or_insert(0) += 1;
            self.note_log(format!("ctx{c} cq {h} armed: {arm:#x}"));
            return Ok(());
        }
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
        if self.func.is_some() {
            if q.recvs >= q.rq_cnt {
                // As for the SQ (`op_post`): the RQ is filled once.
                return Ok(());
            }
            // SAFETY: one receive WQE of the RQ (at offset 0 of the
            // buffer), in our writable mapping.
            unsafe { poke(buf + idx * stride, &wqe) };
            fence(AtomicOrdering::SeqCst);
            // SAFETY: the receive counter (bytes 0..4) of our writable,
            // page-aligned doorbell record mapping.
            unsafe { store32(dbr, (rpi & 0xffff).to_be_bytes()) };
            if let Some(qq) = self.model.ctxs.get_mut(&c).and_then(|x| x.qps.get_mut(&h)) {
                qq.recvs = rpi;
            }
            self.note_log(format!("receive posted on ctx{c} qp {h}, counter {rpi}"));
            self.model.taint_qp(c, h);
            return Ok(());
        }
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
        if let Some(f) = self.func {
            // The function's own count of what its commands made and
            // destroyed: exactly the model's objects above the baseline.
            let now = function_objects(f.dev)?;
            let want = f.base.plus(&self.model.fn_counts());
            if now != want {
                return Err(self.fail(format!(
                    "rmlx5/objects disagrees with the model: rmlx5_{} holds {}, the model \
                     says {} (baseline {})",
                    f.dev,
                    now.describe(),
                    want.describe(),
                    f.base.describe()
                )));
            }
            return Ok(());
        }
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
        let dev = self.pick_dev();
        let plan = WindowPlan {
            dev,
            lid: self.lid_of(dev),
            function: self.func.is_some(),
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
            let function = match self.func {
                Some(f) => format!(
                    " | rmlx5_{}: {} (baseline {})",
                    f.dev,
                    function_objects(f.dev).map_or_else(|e| e, |o| o.describe()),
                    f.base.describe()
                ),
                None => String::new(),
            };
            println!(
                "rmlx5-stress: after closing everything: {} (baseline {}){}{function}",
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
// Scenario 1: fuzz_ioctl_sequences

pub(crate) fn fuzz_ioctl_sequences() -> TestResult {
    let sc = scale()?;
    let target = sc.get("calls", 20_000);
    let seed = sc.seed();
    println!("@@STRESS fuzz seed={seed}");
    let n = num_hcas();
    let base = snapshot(n)?;
    let mut lim = BTreeMap::new();
    // fuzzdev=N: ConnectX function rmlx5_N alone, not the software HCAs.
    let func = match sc.given("fuzzdev") {
        Some(d) => {
            let dev = u32::try_from(d)
                .ok()
                .filter(|d| *d < 64)
                .ok_or(format!("RMLX5_STRESS: fuzzdev={d} is outside 0..=63"))?;
            let (t, l) = function_target(dev)?;
            lim.insert(dev, l);
            println!(
                "rmlx5-stress: fuzz on ConnectX function rmlx5_{dev} (LID {}), which holds {}",
                t.lid,
                t.base.describe()
            );
            Some(t)
        }
        None => {
            for dev in 0..n as u32 {
                let fd = open_dev(dev)?;
                let q = raw_call(fd, Command::QueryDevice, &QueryDevice::default());
                let _ = close_fd(fd);
                let q = q.map_err(|e| format!("QUERY_DEVICE rmlx5_{dev}: {}", errno_name(e)))?;
                lim.insert(dev, DevLimits::from_query(&q));
            }
            None
        }
    };
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
        func,
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
    if let Some(t) = func {
        println!(
            "rmlx5-stress: fuzz rmlx5_{}: {} (baseline {})",
            t.dev,
            function_objects(t.dev).map_or_else(|e| e, |o| o.describe()),
            t.base.describe()
        );
        run?;
        let leaked = leaked?;
        // The function's own count, kind by kind (part of the leak count
        // above too); its EQs are not in debugfs: the emulator fails the
        // run if one overruns.
        let now = function_objects(t.dev)?;
        ensure!(
            leaked == 0 && now == t.base,
            "{leaked} object(s) above the baseline after closing everything; rmlx5_{} holds {}, \
             it held {} (seed={seed})",
            t.dev,
            now.describe(),
            t.base.describe()
        );
        return Ok(());
    }
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

/// ConnectX function `rmlx5_<dev>` for `fuzzdev`, checked to be one (it
/// counts its objects in `rmlx5/objects`, and QUERY_DEVICE reports
/// `DEVICE_UAR_DOORBELLS`), with its port's LID, what it holds now, and its
/// limits.
fn function_target(dev: u32) -> Result<(FnTarget, DevLimits), String> {
    let not = |why: String| format!("fuzzdev={dev}: rmlx5_{dev} is no ConnectX function: {why}");
    let base = function_objects(dev).map_err(not)?;
    let fd = open_dev(dev)?;
    let q = raw_call(fd, Command::QueryDevice, &QueryDevice::default());
    let port = QueryPort {
        port_num: 1,
        ..QueryPort::default()
    };
    let p = raw_call(fd, Command::QueryPort, &port);
    let _ = close_fd(fd);
    let q = q.map_err(|e| format!("QUERY_DEVICE rmlx5_{dev}: {}", errno_name(e)))?;
    let p = p.map_err(|e| format!("QUERY_PORT rmlx5_{dev}: {}", errno_name(e)))?;
    if q.device_flags & DEVICE_UAR_DOORBELLS == 0 || q.device_index != dev {
        return Err(not(format!("QUERY_DEVICE answered {q:?}")));
    }
    // Its QPs loop back through its own port.
    if p.state != PORT_ACTIVE || p.lid == 0 || p.lid >= FIRST_MULTICAST_LID {
        return Err(format!(
            "fuzzdev={dev}: the port of rmlx5_{dev} is not active with a unicast LID: {p:?}"
        ));
    }
    let t = FnTarget {
        dev,
        lid: p.lid,
        base,
    };
    Ok((t, DevLimits::from_query(&q)))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// A generator with `seed` on two devices, on `func` if given, with
    /// the devices' limits `lim`; nothing opened.
    fn fuzz_for_test(seed: u64, func: Option<FnTarget>, lim: BTreeMap<u32, DevLimits>) -> Fuzz {
        Fuzz {
            gen: Gen::new(seed),
            seed,
            n: 2,
            func,
            lim,
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
        }
    }

    /// The state walk only generates transitions the state machine takes.
    #[test]
    fn walk_modify_is_always_accepted() {
        let mut f = fuzz_for_test(
            11,
            None,
            BTreeMap::from([(0, DevLimits::DOC), (1, DevLimits::DOC)]),
        );
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

    /// On a function the walk names the function's own LID and stays
    /// within what its firmware takes; random masks reach a refusing
    /// firmware only where the fuzzer withholds them.
    #[test]
    fn function_walks_are_sent_and_taken() {
        let l = DevLimits::DOC;
        let target = FnTarget {
            dev: 2,
            lid: 0x17,
            base: FnObjects::default(),
        };
        let mut f = fuzz_for_test(12, Some(target), BTreeMap::from([(2, l)]));
        assert_eq!(f.pick_dev(), 2);
        assert_eq!(
            (f.lid_of(2), f.dev_of_lid(0x17), f.dev_of_lid(3)),
            (0x17, 2, NOWHERE)
        );
        let mut moved = BTreeSet::new();
        for _ in 0..5000 {
            let cur = f.gen.below32(QPS_ERR + 1);
            let m = f.walk_modify(1, cur, &l);
            if m.attr_mask & QP_AV != 0 {
                assert_eq!(m.dlid, 0x17);
            }
            match fn_modify(cur, &m, &l) {
                FnModify::Moves(n) => {
                    moved.insert((cur, n));
                }
                FnModify::Refused(_) => {}
            }
            // Random masks: LIDs the kernel refuses, or the function's.
            let m = f.random_modify(1, cur, &l);
            if m.attr_mask & QP_AV != 0 && (1..FIRST_MULTICAST_LID).contains(&m.dlid) {
                assert_eq!(m.dlid, 0x17, "{m:?}");
            }
        }
        for t in [
            (QPS_RESET, QPS_INIT),
            (QPS_INIT, QPS_RTR),
            (QPS_RTR, QPS_RTS),
            (QPS_RTS, QPS_ERR),
            (QPS_ERR, QPS_RESET),
        ] {
            assert!(moved.contains(&t), "{t:?} never generated");
        }
    }
}
