// SPDX-License-Identifier: GPL-2.0

//! Engines side by side: one engine per instance ([`run_instance`]), each
//! holding an instance only for one phase of a step, through a lock per
//! instance (two threads), and a step whose instances change between its
//! phases (a control operation or a doorbell in the gap).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use hca_model::fabric::{run_instance, Fabric, Instances};
use hca_model::hca::Hca;
use hca_model::mem::{DmaFault, DmaMemory, Interrupt, Platform};
use hca_model::mr::Access;
use hca_model::qp::QpState;
use hca_model::qp_modify::{AttrMask, QpModify};
use hca_model::transfer::Scratch;
use mlx5_prm::opcode::CqeOpcode;

use super::harness::*;
use super::mem::TestMem;

/// The instances behind a lock each, as an embedder with one engine per
/// instance would keep them.
struct Locked<'a>(&'a [Mutex<Hca<VecStorage>>]);

impl Instances for Locked<'_> {
    type Storage = VecStorage;
    type Held<'b>
        = MutexGuard<'b, Hca<VecStorage>>
    where
        Self: 'b;

    fn count(&self) -> usize {
        self.0.len()
    }

    fn hold(&mut self, index: usize) -> Option<MutexGuard<'_, Hca<VecStorage>>> {
        // PANIC: a poisoned lock means another engine thread panicked; the
        // test has failed already.
        self.0.get(index).map(|m| m.lock().unwrap())
    }
}

/// One engine's handle on the shared memory: every access takes the lock
/// for that access only, so two engines' accesses interleave.
struct Shared<'a>(&'a Mutex<TestMem>);

impl Shared<'_> {
    fn mem(&self) -> MutexGuard<'_, TestMem> {
        // PANIC: as in `Locked::hold`.
        self.0.lock().unwrap()
    }
}

impl DmaMemory for Shared<'_> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
        let r = self.mem().read(addr, buf);
        // Give the other engine time to run between an 8-byte read and
        // what follows it (an atomic's write), as a second CPU could.
        if buf.len() == 8 {
            std::thread::sleep(std::time::Duration::from_micros(10));
        }
        r
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), DmaFault> {
        self.mem().write(addr, data)
    }
}

impl Platform for Shared<'_> {
    fn interrupt(&mut self, irq: Interrupt) {
        self.mem().interrupt(irq);
    }
}

/// Takes the instances out of `w` to run them on engine threads.
fn take(w: &mut World) -> Vec<Mutex<Hca<VecStorage>>> {
    let fabric = std::mem::replace(&mut w.fabric, Fabric::new(Hcas(Vec::new())));
    fabric.into_inner().0.into_iter().map(Mutex::new).collect()
}

/// Gives them back.
fn give(w: &mut World, hcas: Vec<Mutex<Hca<VecStorage>>>) {
    let hcas = hcas.into_iter().map(|m| m.into_inner().unwrap()).collect();
    w.fabric = Fabric::new(Hcas(hcas));
}

/// Runs one engine thread per instance until none has work left.
fn run_engines(w: &mut World) {
    let hcas = take(w);
    let mem = Mutex::new(std::mem::take(&mut w.mem));
    let done: Vec<AtomicBool> = hcas.iter().map(|_| AtomicBool::new(false)).collect();
    std::thread::scope(|s| {
        for a in 0..hcas.len() {
            let (hcas, mem, done) = (&hcas, &mem, &done);
            s.spawn(move || {
                let mut scratch = Box::new(Scratch::new());
                let mut set = Locked(hcas);
                let mut p = Shared(mem);
                // Small budgets, so that the engines' runs interleave.
                for _ in 0..1_000_000 {
                    let r = run_instance(&mut set, &mut scratch, 0, &mut p, a, 8);
                    done[a].store(!r.more, Ordering::SeqCst);
                    if !r.more && done.iter().all(|d| d.load(Ordering::SeqCst)) {
                        let idle =
                            (0..set.count()).all(|i| set.hold(i).is_some_and(|h| !h.has_work()));
                        if idle {
                            return;
                        }
                    }
                    std::thread::yield_now();
                }
                panic!("engine {a} never ran out of work");
            });
        }
    });
    w.mem = mem.into_inner().unwrap();
    give(w, hcas);
}

const N: u64 = 200;

/// Two instances, each with an engine thread. Instance 0's QP sends to
/// instance 1 and instance 1's QPs to instance 0 and to each other: WRITEs,
/// SENDs and fetch-and-adds on one counter through both engines. Every
/// WQE completes once, in order, with its data in place, and no add is
/// lost.
#[test]
fn two_engines_execute_both_directions_and_atomics_stay_atomic() {
    let mut w = World::with_slots(2, 64);
    w.mem.strict = true;
    let caps = QpCaps {
        sq_wqebbs: 1024,
        rq_wqes: 256,
        ..QpCaps::default()
    };
    let (p0, p1) = (w.pd(0), w.pd(1));
    let mut cq0 = w.cq(0, 12);
    let mut cq1 = w.cq(1, 12);
    // a (0) <-> b (1); c (1) <-> d (0); e (1) <-> f (1), on one instance.
    let mut a = w.qp(0, p0, &cq0, &cq0, caps);
    let mut b = w.qp(1, p1, &cq1, &cq1, caps);
    let mut c = w.qp(1, p1, &cq1, &cq1, caps);
    let mut d = w.qp(0, p0, &cq0, &cq0, caps);
    let mut e = w.qp(1, p1, &cq1, &cq1, caps);
    let f = w.qp(1, p1, &cq1, &cq1, caps);
    w.connect(&a, &b);
    w.connect(&c, &d);
    w.connect(&e, &f);

    let len = 64u64;
    let region = N * len;
    let buf0 = w.buffer(3 * region + 4096);
    let buf1 = w.buffer(3 * region + 4096);
    let key0 = w.mr(0, p0, buf0, 3 * region + 4096, Access::ALL);
    let key1 = w.mr(1, p1, buf1, 3 * region + 4096, Access::ALL);
    // Layout of each buffer: sources, WRITE targets, SEND targets, then
    // the counter (instance 1's) and the atomic results.
    for (buf, seed) in [(buf0, 0u8), (buf1, 0x80u8)] {
        let src: Vec<u8> = (0..region)
            .map(|i| seed ^ (i as u8).wrapping_mul(7))
            .collect();
        w.fill(buf, &src);
    }
    let counter = buf1 + 3 * region;
    w.fill(counter, &0u64.to_ne_bytes());

    let sge = |buf: u64, key: u32, off: u64, l: u64| Sge {
        addr: buf + off,
        len: l as u32,
        lkey: key,
    };
    // Receives for the SENDs: on b (from a) and on d (from c).
    for i in 0..N {
        w.post_recv(&mut b, i, &[sge(buf1, key1, 2 * region + i * len, len)]);
        w.post_recv(&mut d, i, &[sge(buf0, key0, 2 * region + i * len, len)]);
    }

    // Each sender: N WRITEs, N SENDs, N fetch-and-adds, interleaved.
    // Results of the adds of a go to buf0 after the counter slot, those of
    // e to buf1; c sends WRITEs and SENDs only.
    let results0 = buf0 + 3 * region;
    let results1 = buf1 + 3 * region + 8;
    let post = |w: &mut World, q: &mut TestQp, sbuf, skey, dbuf, dkey, results: Option<u64>| {
        let mut last = (0, 0);
        for i in 0..N {
            let src = sge(sbuf, skey, i * len, len);
            let write = Wr::new(
                3 * i,
                WrOp::Write {
                    raddr: dbuf + region + i * len,
                    rkey: dkey,
                },
                &[src],
            );
            w.build_wqe(q, &write);
            last = w.build_wqe(q, &Wr::new(3 * i + 1, WrOp::Send, &[src]));
            if let Some(results) = results {
                let faa = WrOp::Faa {
                    raddr: counter,
                    rkey: key1,
                    add: 1,
                };
                let res = Sge {
                    addr: results + i * 8,
                    len: 8,
                    lkey: skey,
                };
                last = w.build_wqe(q, &Wr::new(3 * i + 2, faa, &[res]));
            }
        }
        w.ring_sq(q, last.0, last.1, Ring::Plain).unwrap();
    };
    post(&mut w, &mut a, buf0, key0, buf1, key1, Some(results0));
    post(&mut w, &mut c, buf1, key1, buf0, key0, None);
    // e only adds (its peer f has no receives and takes no WRITEs here).
    let mut last = (0, 0);
    for i in 0..N {
        let faa = WrOp::Faa {
            raddr: counter,
            rkey: key1,
            add: 1,
        };
        let res = Sge {
            addr: results1 + i * 8,
            len: 8,
            lkey: key1,
        };
        last = w.build_wqe(&mut e, &Wr::new(i, faa, &[res]));
    }
    w.ring_sq(&mut e, last.0, last.1, Ring::Plain).unwrap();

    run_engines(&mut w);

    // Completions: every WQE once, in order, successfully.
    let wcs0 = w.poll_all(&mut cq0, &[&a, &d]);
    let wcs1 = w.poll_all(&mut cq1, &[&b, &c, &e, &f]);
    let ids = |wcs: &[Wc], qpn: u32, op: Option<CqeOpcode>| -> Vec<u64> {
        wcs.iter()
            .filter(|wc| wc.qpn == qpn && op.is_none_or(|o| wc.opcode == o))
            .inspect(|wc| assert!(wc.ok(), "{wc:?}"))
            .map(|wc| wc.wr_id)
            .collect()
    };
    let req = Some(CqeOpcode::Req);
    assert_eq!(ids(&wcs0, a.qpn, req), (0..3 * N).collect::<Vec<_>>());
    let c_ids: Vec<u64> = (0..N).flat_map(|i| [3 * i, 3 * i + 1]).collect();
    assert_eq!(ids(&wcs1, c.qpn, req), c_ids);
    assert_eq!(ids(&wcs1, e.qpn, req), (0..N).collect::<Vec<_>>());
    let recv = Some(CqeOpcode::RespSend);
    assert_eq!(ids(&wcs1, b.qpn, recv), (0..N).collect::<Vec<_>>());
    assert_eq!(ids(&wcs0, d.qpn, recv), (0..N).collect::<Vec<_>>());
    assert_eq!(wcs0.len() as u64, 3 * N + N);
    assert_eq!(wcs1.len() as u64, 2 * N + N + N);

    // Data: each WRITE and SEND target holds its source.
    for (sbuf, dbuf) in [(buf0, buf1), (buf1, buf0)] {
        let src = w.read(sbuf, region as usize);
        assert_eq!(w.read(dbuf + region, region as usize), src);
        assert_eq!(w.read(dbuf + 2 * region, region as usize), src);
    }

    // Atomics: 2N adds of 1 through instance 1, from both engines; each
    // returned a different old value, so none was lost.
    let word = |w: &World, addr: u64| u64::from_ne_bytes(w.read(addr, 8).try_into().unwrap());
    assert_eq!(word(&w, counter), 2 * N);
    let mut olds: Vec<u64> = (0..N)
        .flat_map(|i| [word(&w, results0 + i * 8), word(&w, results1 + i * 8)])
        .collect();
    olds.sort_unstable();
    assert_eq!(olds, (0..2 * N).collect::<Vec<_>>());
    assert!(w.mem.violations.is_empty(), "{:?}", w.mem.violations);
}

/// What a test does between two phases of a step, to the instances and
/// the memory.
type Gap<'g> = &'g mut dyn FnMut(&mut [Hca<VecStorage>], &Mutex<TestMem>);

/// The instances as one engine sees them, with something else happening
/// to them just before the `at`-th time a phase takes one (counting from
/// 0): a control operation, a doorbell or a second engine in the gap
/// between two phases, as another CPU could make it.
struct Interleaved<'a, 'g> {
    hcas: &'a mut [Hca<VecStorage>],
    mem: &'a Mutex<TestMem>,
    holds: usize,
    at: usize,
    gap: Gap<'g>,
}

impl Instances for Interleaved<'_, '_> {
    type Storage = VecStorage;
    type Held<'b>
        = &'b mut Hca<VecStorage>
    where
        Self: 'b;

    fn count(&self) -> usize {
        self.hcas.len()
    }

    fn hold(&mut self, index: usize) -> Option<&mut Hca<VecStorage>> {
        if self.holds == self.at {
            (self.gap)(self.hcas, self.mem);
        }
        self.holds += 1;
        self.hcas.get_mut(index)
    }
}

/// Runs one step of the engine of instance `a`, with `gap` happening
/// before phase hold number `at`; returns how many holds the step made
/// and whether the instance has work left.
fn step_with_gap(w: &mut World, a: usize, at: usize, gap: Gap<'_>) -> (usize, bool) {
    let mut hcas: Vec<_> = take(w)
        .into_iter()
        .map(|m| m.into_inner().unwrap())
        .collect();
    let mem = Mutex::new(std::mem::take(&mut w.mem));
    let mut scratch = Box::new(Scratch::new());
    let mut set = Interleaved {
        hcas: &mut hcas,
        mem: &mem,
        holds: 0,
        at,
        gap,
    };
    let r = run_instance(&mut set, &mut scratch, 0, &mut Shared(&mem), a, 1);
    assert_eq!(r.used, 1);
    let holds = set.holds;
    w.mem = mem.into_inner().unwrap();
    give(w, hcas.into_iter().map(Mutex::new).collect());
    (holds, r.more)
}

/// A second engine's one step on instance `a`, inside a gap: the budget
/// it used.
fn second_engine(h: &mut [Hca<VecStorage>], mem: &Mutex<TestMem>, a: usize) -> u32 {
    second_engine_at(h, mem, a, 0)
}

/// As [`second_engine`], at model time `now`.
fn second_engine_at(h: &mut [Hca<VecStorage>], mem: &Mutex<TestMem>, a: usize, now: u64) -> u32 {
    let mut scratch = Box::new(Scratch::new());
    run_instance(h, &mut scratch, now, &mut Shared(mem), a, 1).used
}

/// The modify that moves a QP to ERR.
fn to_err() -> QpModify {
    QpModify {
        mask: AttrMask::STATE,
        state: QpState::Err,
        cur_state: QpState::Reset,
        attrs: Default::default(),
    }
}

/// What a CQ holds, as (wr_id, success).
fn outcomes(wcs: &[Wc]) -> Vec<(u64, bool)> {
    wcs.iter().map(|w| (w.wr_id, w.ok())).collect()
}

/// The holds of a run of one RC step: 0 expires timers, 1 takes the QP,
/// 2 is the requester's first phase, 3 the responder's request, 4 its
/// finish, 5 the requester's completion with the step's end; 6 asks
/// whether work is left, 7 whether the responder's instance now has work.
/// (A request that gets no grant skips the finish.)
const REQUEST: usize = 3;
const FINISH: usize = 4;
const COMPLETE: usize = 5;
const HOLDS: usize = 8;

/// Instance 0's QP `a` connected to instance 1's `b`, a 64-byte source
/// on 0 and a receive of 64 bytes posted on `b`.
struct Pair {
    w: World,
    a: TestQp,
    b: TestQp,
    acq: TestCq,
    bcq: TestCq,
    src: Sge,
    dst: Sge,
}

fn pair() -> Pair {
    let mut w = World::new(2);
    let (p0, p1) = (w.pd(0), w.pd(1));
    let acq = w.cq(0, 6);
    let bcq = w.cq(1, 6);
    let a = w.qp(0, p0, &acq, &acq, QpCaps::default());
    let mut b = w.qp(1, p1, &bcq, &bcq, QpCaps::default());
    w.connect(&a, &b);
    let abuf = w.buffer(4096);
    let bbuf = w.buffer(4096);
    let akey = w.mr(0, p0, abuf, 4096, Access::ALL);
    let bkey = w.mr(1, p1, bbuf, 4096, Access::ALL);
    w.fill(abuf, &[0x5a; 64]);
    let src = Sge {
        addr: abuf,
        len: 64,
        lkey: akey,
    };
    let dst = Sge {
        addr: bbuf,
        len: 64,
        lkey: bkey,
    };
    w.post_recv(&mut b, 7, &[dst]);
    Pair {
        w,
        a,
        b,
        acq,
        bcq,
        src,
        dst,
    }
}

/// Posts a SEND of `src` on `a` with id `id` and rings its doorbell.
fn send(p: &mut Pair, id: u64) {
    let (i, n) = p.w.build_wqe(&mut p.a, &Wr::new(id, WrOp::Send, &[p.src]));
    p.w.ring_sq(&mut p.a, i, n, Ring::Plain).unwrap();
}

/// A requester QP reset while its WQE is in flight: the message arrives,
/// but the step writes no completion for a QP it no longer has.
#[test]
fn a_requester_reset_between_phases_gets_no_stale_completion() {
    let mut p = pair();
    send(&mut p, 1);
    let qpn = p.a.qpn;
    let mut gap = |h: &mut [Hca<VecStorage>], _: &Mutex<TestMem>| {
        let reset = QpModify {
            mask: AttrMask::STATE,
            state: QpState::Reset,
            cur_state: QpState::Reset,
            attrs: Default::default(),
        };
        h[0].modify_qp(qpn, &reset).unwrap();
    };
    let (holds, more) = step_with_gap(&mut p.w, 0, COMPLETE, &mut gap);
    assert_eq!((holds, more), (HOLDS, false));
    assert_eq!(p.w.read(p.dst.addr, 64), vec![0x5a; 64]);
    let wcs = p.w.poll_all(&mut p.bcq, &[&p.b]);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.ok())).collect::<Vec<_>>(),
        [(7, true)]
    );
    assert_eq!(p.w.state(&p.a), QpState::Reset);
    p.w.run();
    assert!(p.w.poll_all(&mut p.acq, &[&p.a]).is_empty());
    // The step gave the QP back: connected again, it sends (the provider
    // starts its SQ over, as after any reset).
    p.a.cur_post = 0;
    let dest = hca_model::qp::RemoteQp {
        hca: 1,
        qpn: p.b.qpn,
    };
    p.w.to_rts_with(&p.a, dest, rts_attrs(dest));
    p.w.post_recv(&mut p.b, 8, &[p.dst]);
    send(&mut p, 2);
    p.w.run();
    let wcs = p.w.poll_all(&mut p.acq, &[&p.a]);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.ok())).collect::<Vec<_>>(),
        [(2, true)]
    );
}

/// Resets QP `qpn` of `h` and brings it back to RTS, sending to `dest`,
/// as `World::to_rts_with` does.
fn reconnect(h: &mut Hca<VecStorage>, qpn: u32, dest: hca_model::qp::RemoteQp) {
    let attrs = hca_model::qp::ConnAttrs {
        dest,
        ..rts_attrs(dest)
    };
    let reset = (QpState::Reset, AttrMask::STATE);
    for (state, mask) in [reset].into_iter().chain(RTS_STEPS) {
        let m = QpModify {
            mask: mask.or(AttrMask::STATE),
            state,
            cur_state: QpState::Reset,
            attrs,
        };
        h.modify_qp(qpn, &m).unwrap();
    }
}

/// A responder QP reset and reconnected after it granted a SEND: the
/// message's receive does not complete on the new incarnation (whose
/// receive queue starts empty), and the requester's WQE completes.
#[test]
fn a_responder_reset_between_phases_completes_nothing() {
    let mut p = pair();
    send(&mut p, 1);
    let (qpn, dest) = (
        p.b.qpn,
        hca_model::qp::RemoteQp {
            hca: 0,
            qpn: p.a.qpn,
        },
    );
    let mut gap = |h: &mut [Hca<VecStorage>], _: &Mutex<TestMem>| reconnect(&mut h[1], qpn, dest);
    let (holds, _) = step_with_gap(&mut p.w, 0, FINISH, &mut gap);
    assert_eq!(holds, HOLDS);
    assert!(p.w.poll_all(&mut p.bcq, &[&p.b]).is_empty());
    let wcs = p.w.poll_all(&mut p.acq, &[&p.a]);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.ok())).collect::<Vec<_>>(),
        [(1, true)]
    );
}

/// A doorbell rung while the QP's step is in flight, and a second engine
/// of the same instance looking for work in that gap: the second engine
/// finds none (the QP is running), and the first step's end puts the QP
/// back, so each WQE executes once, in order.
#[test]
fn a_running_qp_is_not_taken_by_a_second_engine() {
    let mut p = pair();
    send(&mut p, 1);
    // The second WQE and its doorbell record are written now; the model
    // learns of it from the doorbell in the gap.
    let (i, n) = p.w.build_wqe(
        &mut p.a,
        &Wr::new(
            2,
            WrOp::Write {
                raddr: p.dst.addr + 64,
                rkey: p.dst.lkey,
            },
            &[p.src],
        ),
    );
    let db = p.w.doorbell_stores(&mut p.a, i, n, Ring::Plain);
    let mut second = None;
    let mut gap = |h: &mut [Hca<VecStorage>], mem: &Mutex<TestMem>| {
        h[0].send_doorbell(&mut *mem.lock().unwrap(), &db).unwrap();
        second = Some(second_engine(h, mem, 0));
    };
    let (holds, more) = step_with_gap(&mut p.w, 0, REQUEST, &mut gap);
    assert_eq!((holds, more), (HOLDS, true));
    assert_eq!(second, Some(0));
    p.w.run();
    let wcs = p.w.poll_all(&mut p.acq, &[&p.a]);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.ok())).collect::<Vec<_>>(),
        [(1, true), (2, true)]
    );
    assert_eq!(p.w.poll_all(&mut p.bcq, &[&p.b]).len(), 1);
    assert_eq!(p.w.read(p.dst.addr + 64, 64), vec![0x5a; 64]);
}

/// A second requester whose request reaches a responder QP that has
/// granted one and not finished it (a QP connected to a peer that is
/// connected elsewhere): it gets no answer, so the receive WQE reserved
/// for the first is not granted twice; it retries after its timeout.
#[test]
fn a_busy_responder_does_not_grant_its_receive_twice() {
    let mut p = pair();
    let pd = p.w.pd(0);
    let mut m = p.w.qp(0, pd, &p.acq, &p.acq, QpCaps::default());
    let dest = hca_model::qp::RemoteQp {
        hca: 1,
        qpn: p.b.qpn,
    };
    p.w.to_rts_with(&m, dest, rts_attrs(dest));
    let mkey = p.w.mr(0, pd, p.src.addr, 64, Access::ALL);
    let msrc = Sge {
        lkey: mkey,
        ..p.src
    };
    send(&mut p, 1);
    let (i, n) = p.w.build_wqe(&mut m, &Wr::new(9, WrOp::Send, &[msrc]));
    let db = p.w.doorbell_stores(&mut m, i, n, Ring::Plain);
    let mut second = None;
    let mut gap = |h: &mut [Hca<VecStorage>], mem: &Mutex<TestMem>| {
        h[0].send_doorbell(&mut *mem.lock().unwrap(), &db).unwrap();
        second = Some(second_engine(h, mem, 0));
    };
    step_with_gap(&mut p.w, 0, FINISH, &mut gap);
    assert_eq!(second, Some(1));
    // One receive, completed for a's SEND; m has no completion yet (it
    // waits for its transport timer).
    let wcs = p.w.poll_all(&mut p.bcq, &[&p.b]);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.src_qpn)).collect::<Vec<_>>(),
        [(7, p.a.qpn)]
    );
    let wcs = p.w.poll_all(&mut p.acq, &[&p.a, &m]);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.ok())).collect::<Vec<_>>(),
        [(1, true)]
    );
}

/// A requester moved to ERR while its request is out, and its responder
/// too, so that the request goes unanswered: the WQE is flushed at once,
/// not held back by a transport-timeout wait.
#[test]
fn a_requester_moved_to_err_between_phases_is_flushed_not_parked() {
    let mut p = pair();
    send(&mut p, 1);
    let (aq, bq) = (p.a.qpn, p.b.qpn);
    let mut gap = |h: &mut [Hca<VecStorage>], _: &Mutex<TestMem>| {
        h[0].modify_qp(aq, &to_err()).unwrap();
        h[1].modify_qp(bq, &to_err()).unwrap();
    };
    let (_, more) = step_with_gap(&mut p.w, 0, REQUEST, &mut gap);
    assert!(more);
    p.w.run();
    let wcs = p.w.poll_all(&mut p.acq, &[&p.a]);
    assert_eq!(outcomes(&wcs), [(1, false)]);
    assert_eq!(
        wcs[0].syndrome,
        Some(mlx5_prm::opcode::CqeSyndrome::WrFlush as u8)
    );
    assert_eq!(p.w.hca(0).next_deadline(), None);
}

/// A responder moved to ERR after it granted a SEND, and flushed by its
/// own engine before the SEND finishes: each of its receives completes
/// once, flushed; the reserved one is not completed a second time.
#[test]
fn a_responder_moved_to_err_between_phases_completes_each_receive_once() {
    let mut p = pair();
    let second = Sge {
        addr: p.dst.addr + 64,
        ..p.dst
    };
    p.w.post_recv(&mut p.b, 8, &[second]);
    send(&mut p, 1);
    let bq = p.b.qpn;
    let mut gap = |h: &mut [Hca<VecStorage>], mem: &Mutex<TestMem>| {
        h[1].modify_qp(bq, &to_err()).unwrap();
        while second_engine(h, mem, 1) != 0 {}
    };
    step_with_gap(&mut p.w, 0, FINISH, &mut gap);
    p.w.run();
    let wcs = p.w.poll_all(&mut p.bcq, &[&p.b]);
    assert_eq!(outcomes(&wcs), [(7, false), (8, false)]);
    assert_eq!(p.w.hca(1).stats().bad_recv_counters, 0);
    assert_eq!(outcomes(&p.w.poll_all(&mut p.acq, &[&p.a])), [(1, true)]);
}

/// A QP whose request gets an RNR NAK (no receive posted) is parked in
/// the same hold that ends its step, so a second engine of the instance,
/// running with every deadline passed in the gap before that hold, finds
/// it neither active nor waiting; afterwards the retry runs once and
/// completes.
#[test]
fn a_qp_parked_by_its_step_is_never_free_between_phases() {
    let mut p = pair();
    send(&mut p, 1);
    p.w.run();
    send(&mut p, 2);
    const LATER: u64 = 1 << 40;
    let mut second = None;
    let mut gap = |h: &mut [Hca<VecStorage>], mem: &Mutex<TestMem>| {
        second = Some(second_engine_at(h, mem, 0, LATER));
    };
    // A request without a grant skips the finish: hold 4 is the
    // requester's completion phase, which parks the QP and ends the step.
    let (_, more) = step_with_gap(&mut p.w, 0, FINISH, &mut gap);
    assert_eq!((second, more), (Some(0), false));
    assert!(p.w.hca(0).next_deadline().is_some());
    p.w.post_recv(&mut p.b, 8, &[p.dst]);
    p.w.advance(LATER);
    assert_eq!(
        outcomes(&p.w.poll_all(&mut p.acq, &[&p.a])),
        [(1, true), (2, true)]
    );
    assert_eq!(
        outcomes(&p.w.poll_all(&mut p.bcq, &[&p.b])),
        [(7, true), (8, true)]
    );
}

/// A run that moves a responder QP of another instance to ERR (a WRITE
/// with a bad rkey) reports that instance in `others`, whose engine then
/// flushes the responder's receive.
#[test]
fn a_run_reports_the_other_instances_it_gave_work() {
    let mut p = pair();
    let bad = WrOp::Write {
        raddr: p.dst.addr,
        rkey: 0x00de_ad00,
    };
    let (i, n) = p.w.build_wqe(&mut p.a, &Wr::new(1, bad, &[p.src]));
    p.w.ring_sq(&mut p.a, i, n, Ring::Plain).unwrap();
    let mut hcas: Vec<_> = take(&mut p.w)
        .into_iter()
        .map(|m| m.into_inner().unwrap())
        .collect();
    let mem = Mutex::new(std::mem::take(&mut p.w.mem));
    let mut scratch = Box::new(Scratch::new());
    let r = run_instance(&mut hcas[..], &mut scratch, 0, &mut Shared(&mem), 0, 8);
    assert_eq!((r.more, r.others), (false, 1 << 1));
    let r = run_instance(&mut hcas[..], &mut scratch, 0, &mut Shared(&mem), 1, 8);
    assert_eq!((r.more, r.others), (false, 0));
    p.w.mem = mem.into_inner().unwrap();
    give(&mut p.w, hcas.into_iter().map(Mutex::new).collect());
    assert_eq!(outcomes(&p.w.poll_all(&mut p.acq, &[&p.a])), [(1, false)]);
    assert_eq!(outcomes(&p.w.poll_all(&mut p.bcq, &[&p.b])), [(7, false)]);
}

/// A platform that runs `gap` once, just before the first read of `at`:
/// something another CPU does while a step is in its copy phase, which
/// holds no instance.
struct DuringCopy<'a, 'g> {
    mem: &'a Mutex<TestMem>,
    at: u64,
    gap: Option<Box<dyn FnOnce() + 'g>>,
}

impl DmaMemory for DuringCopy<'_, '_> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
        if addr == self.at {
            if let Some(gap) = self.gap.take() {
                gap();
            }
        }
        Shared(self.mem).read(addr, buf)
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), DmaFault> {
        Shared(self.mem).write(addr, data)
    }
}

impl Platform for DuringCopy<'_, '_> {
    fn interrupt(&mut self, irq: Interrupt) {
        Shared(self.mem).interrupt(irq);
    }
}

/// A responder moved to ERR while a SEND's data is moving into the
/// receive it granted, and its engine run at once: the flush leaves that
/// receive alone until the data has landed, then completes it (flushed)
/// once, so a consumer never sees its buffer written after its
/// completion.
#[test]
fn a_receive_is_not_flushed_under_the_data_moving_into_it() {
    let mut p = pair();
    send(&mut p, 1);
    let (bq, dst) = (p.b.qpn, p.dst.addr);
    let hcas = take(&mut p.w);
    let mem = Mutex::new(std::mem::take(&mut p.w.mem));
    let flushed_in_gap = std::cell::Cell::new(None);
    let gap = || {
        hcas[1].lock().unwrap().modify_qp(bq, &to_err()).unwrap();
        let mut scratch = Box::new(Scratch::new());
        while run_instance(&mut Locked(&hcas), &mut scratch, 0, &mut Shared(&mem), 1, 1).used != 0 {
        }
        flushed_in_gap.set(Some(hcas[1].lock().unwrap().stats().flushed));
    };
    let mut platform = DuringCopy {
        mem: &mem,
        at: p.src.addr,
        gap: Some(Box::new(gap)),
    };
    let mut scratch = Box::new(Scratch::new());
    let r = run_instance(&mut Locked(&hcas), &mut scratch, 0, &mut platform, 0, 1);
    drop(platform);
    // The step's end told whoever runs instance 1 that it has work: the
    // receive's flush, which waited for the data.
    assert_eq!((flushed_in_gap.get(), r.others), (Some(0), 1 << 1));
    while run_instance(&mut Locked(&hcas), &mut scratch, 0, &mut Shared(&mem), 1, 1).used != 0 {}
    p.w.mem = mem.into_inner().unwrap();
    give(&mut p.w, hcas);
    assert_eq!(p.w.read(dst, 64), vec![0x5a; 64]);
    assert_eq!(outcomes(&p.w.poll_all(&mut p.bcq, &[&p.b])), [(7, false)]);
    assert_eq!(p.w.hca(1).stats().flushed, 1);
    assert_eq!(outcomes(&p.w.poll_all(&mut p.acq, &[&p.a])), [(1, true)]);
}
