// SPDX-License-Identifier: GPL-2.0

//! The fabric: every HCA instance, the clock, and the engine that executes
//! queued work across instances.
//!
//! A send on instance A addressed to a QP on instance B (or on A, or to the
//! sending QP itself) is executed by one engine step in phases: it holds
//! A (the WQE), then B (the request), then none (the data), then B (the
//! responder's completion) and A (the requester's), never two at once, so
//! the same code serves every case and nothing is allocated. [`Fabric::run`] holds the whole
//! fabric for its run; the kernel keeps the fabric behind one lock and
//! calls it after each kick and from a work item while [`RunReport::more`]
//! is set.
//!
//! # Several engines
//!
//! An embedder may instead run one engine per instance, each on its own
//! CPU, with [`run_instance`]: it reaches the instances through
//! [`Instances`], which hands out one instance at a time (a lock per
//! instance, taken per phase and never two at once, so no lock order
//! between instances arises). Each engine needs its own [`Scratch`] and
//! its own platform handle. Between the phases of a step the instances are
//! free, so the engine works by these rules:
//!
//! - a QP taken off an active list stays with the engine that took it
//!   until its step ends; a doorbell meanwhile is remembered, not acted on
//!   (`sched.rs`);
//! - a later phase finds its QP again by slot, slot variant, QPN and RESET
//!   epoch, and leaves it alone if any changed (destroyed or reset
//!   meanwhile: the completion is dropped, as hardware drops one for a QP
//!   that no longer exists);
//! - a responder QP answers no second request while one it granted has not
//!   finished, so a receive WQE is never granted twice (only a QP sending
//!   to a peer that is connected elsewhere could try);
//! - a QP in ERR takes no wait and completes no granted receive: the flush
//!   completes its WQEs, each once, and leaves a granted receive alone
//!   until the data moving into it has landed;
//! - a QP the step parks goes on the timer list at the step's end, not
//!   before, so no other engine expires it while the step still runs;
//! - an atomic's read, modify and write happen in one phase, holding the
//!   responder's instance, so atomics through one HCA are atomic with
//!   respect to each other;
//! - the data moves holding no instance, between ranges resolved in the
//!   earlier phases: the platform must keep memory reachable until the
//!   copy ends, or fault the access (the kernel's DMA registry checks each
//!   access).
//!
//! # Clock
//!
//! RNR and transport retries wait on a clock the embedder drives with
//! [`Fabric::set_time`] (nanoseconds, any origin, never going back). A
//! waiting QP is retried by the first [`Fabric::run`] at or after its
//! deadline; [`Fabric::next_deadline`] says when to call it (the kernel
//! arms an hrtimer).

use core::borrow::BorrowMut;
use core::ops::DerefMut;

use super::exec;
use super::hca::Hca;
use super::mem::Platform;
use super::table::Storage;
use super::transfer::Scratch;

/// The highest unicast LID (InfiniBand reserves 0 and 0xc000 and up for
/// multicast and the permissive LID).
pub const MAX_UNICAST_LID: u16 = 0xbfff;

/// The LID of the port of the instance with fabric index `index`: LIDs
/// start at 1, since LID 0 is reserved. Responder CQEs carry the sender's
/// LID in `slid`, and a connection's address vector names its peer by LID,
/// so every embedder translates with this pair of functions.
pub const fn lid_of_index(index: u16) -> u16 {
    index.saturating_add(1)
}

/// The fabric index of the instance whose port has LID `lid`, or `None` for
/// LID 0 and LIDs outside the unicast range.
pub const fn index_of_lid(lid: u16) -> Option<u16> {
    if lid == 0 || lid > MAX_UNICAST_LID {
        None
    } else {
        Some(lid - 1)
    }
}

/// A set of HCA instances the fabric can hold: implement it for whatever
/// owns them (a `KVec` in the kernel). Implemented for arrays and mutable
/// slices.
pub trait HcaSet {
    /// The storage type of every instance.
    type Storage: Storage;

    /// The instances; instance `i` has fabric index `i` and LID
    /// [`lid_of_index`]`(i)`.
    fn hcas(&mut self) -> &mut [Hca<Self::Storage>];
}

impl<S: Storage, const N: usize> HcaSet for [Hca<S>; N] {
    type Storage = S;

    fn hcas(&mut self) -> &mut [Hca<S>] {
        self
    }
}

impl<S: Storage> HcaSet for &mut [Hca<S>] {
    type Storage = S;

    fn hcas(&mut self) -> &mut [Hca<S>] {
        self
    }
}

/// The instances of a fabric as an engine reaches them: one at a time,
/// for one phase of a step. Implemented for a slice of instances (one
/// engine owns them all, [`Fabric::run`]); an embedder that runs several
/// engines implements it over a lock per instance.
pub trait Instances {
    /// The storage type of every instance.
    type Storage: Storage;
    /// Instance access for one phase (a guard that unlocks on drop).
    type Held<'a>: DerefMut<Target = Hca<Self::Storage>>
    where
        Self: 'a;

    /// How many instances there are; instance `i` has fabric index `i`.
    fn count(&self) -> usize;

    /// Instance `index`, held until the result is dropped. `None` must
    /// mean only that no instance has that index, for good: a step that
    /// could not take back an instance it already used would leave its QP
    /// marked running, or a responder busy, for ever.
    fn hold(&mut self, index: usize) -> Option<Self::Held<'_>>;
}

impl<S: Storage> Instances for [Hca<S>] {
    type Storage = S;
    type Held<'a>
        = &'a mut Hca<S>
    where
        Self: 'a;

    fn count(&self) -> usize {
        self.len()
    }

    fn hold(&mut self, index: usize) -> Option<&mut Hca<S>> {
        self.get_mut(index)
    }
}

/// Executes queued work of instance `a` only (its QPs' send WQEs, flushes,
/// retries due at `now`, SQ drained events), as [`Fabric::run`] does for
/// all of them: the engine of one instance, when each has its own. The
/// responder phases of its WQEs hold their target instances in turn
/// through `set`. `more` says whether instance `a` still has work, and
/// `others` which other instances the run reached and that have work now
/// (it may have given it to them, or they had it already), whose engines
/// the embedder wakes (an instance from 64 on is not in it: with that
/// many, the embedder asks each one's [`Hca::has_work`] itself).
pub fn run_instance<I: Instances + ?Sized, P: Platform>(
    set: &mut I,
    scratch: &mut Scratch,
    now: u64,
    p: &mut P,
    a: usize,
    budget: u32,
) -> RunReport {
    let mut reached = Reached { set, mask: 0 };
    let mut report = run_one(&mut reached, scratch, now, p, a, budget);
    let mask = reached.mask & !bit(a);
    report.others = (0..64)
        .filter(|&i| mask & bit(i) != 0)
        .filter(|&i| reached.set.hold(i).is_some_and(|h| h.has_work()))
        .fold(0, |m, i| m | bit(i));
    report
}

/// Bit `i` of an instance mask (0 for `i` from 64 on).
fn bit(i: usize) -> u64 {
    u32::try_from(i)
        .ok()
        .and_then(|i| 1u64.checked_shl(i))
        .unwrap_or(0)
}

/// The instances, recording which ones a run held.
struct Reached<'s, I: ?Sized> {
    set: &'s mut I,
    mask: u64,
}

impl<I: Instances + ?Sized> Instances for Reached<'_, I> {
    type Storage = I::Storage;
    type Held<'b>
        = I::Held<'b>
    where
        Self: 'b;

    fn count(&self) -> usize {
        self.set.count()
    }

    fn hold(&mut self, index: usize) -> Option<I::Held<'_>> {
        self.mask |= bit(index);
        self.set.hold(index)
    }
}

/// [`run_instance`] without the report of the other instances.
fn run_one<I: Instances + ?Sized, P: Platform>(
    set: &mut I,
    scratch: &mut Scratch,
    now: u64,
    p: &mut P,
    a: usize,
    budget: u32,
) -> RunReport {
    match set.hold(a) {
        Some(mut h) => h.expire(now),
        None => {
            return RunReport {
                used: 0,
                more: false,
                others: 0,
            }
        }
    }
    let mut used = 0u32;
    while used < budget {
        let qp = set.hold(a).and_then(|mut h| h.pop_active());
        let Some(qp) = qp else {
            break;
        };
        used = used.saturating_add(exec::step(set, scratch, now, p, a, qp));
        if p.yield_engine() {
            break;
        }
    }
    RunReport {
        used,
        more: set.hold(a).is_some_and(|h| h.has_work()),
        others: 0,
    }
}

/// What one engine run did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunReport {
    /// Budget units used (one per WQE executed or flushed, plus one per
    /// 4 KiB moved).
    pub used: u32,
    /// Whether work remains that can run now: call [`Fabric::run`] again
    /// (for [`run_instance`]: work of its own instance).
    pub more: bool,
    /// [`run_instance`] only: the other instances its steps reached that
    /// have work now (bit `i` for instance `i`, instances 0 to 63), whose
    /// engines the embedder should wake. A step gives another instance
    /// work when it moves a responder QP there to ERR (its queues must be
    /// flushed) or overruns a CQ there. Always 0 from [`Fabric::run`],
    /// which runs every instance.
    pub others: u64,
}

/// Several HCA instances connected to one switch.
///
/// Besides the instances it holds the clock and the engine's scratch
/// space (a copy of the WQE being executed, the receive WQE being
/// consumed, the checked buffer lists and one packet of data: about 10
/// KiB, whatever the MRs), by value or behind
/// any owner `X` that lends it (`Box<Scratch>`, the kernel's
/// `KBox<Scratch>`). A kernel, whose stacks are 16 KiB, builds the scratch
/// space on the heap ([`Scratch::EMPTY`] written into a fresh allocation)
/// and joins it with [`Fabric::with_scratch`], so that the fabric itself
/// stays small enough to be built on the stack.
#[derive(Debug)]
pub struct Fabric<H, X = Scratch> {
    set: H,
    now: u64,
    cursor: usize,
    scratch: X,
}

impl<H: HcaSet> Fabric<H> {
    /// Joins the instances of `set` into a fabric that holds its scratch
    /// space inline, giving each instance its index as its id (its peers
    /// address it by LID, index + 1). At most [`MAX_UNICAST_LID`]
    /// instances are addressable.
    pub fn new(mut set: H) -> Self {
        number(&mut set);
        // The literal, not a call of `with_scratch` with the value: an
        // unoptimized build makes a stack copy per call level.
        Fabric {
            set,
            now: 0,
            cursor: 0,
            scratch: Scratch::new(),
        }
    }
}

/// Gives each instance of `set` its index as its id.
fn number<H: HcaSet>(set: &mut H) {
    for (i, h) in set.hcas().iter_mut().enumerate() {
        h.id = u16::try_from(i).unwrap_or(u16::MAX);
    }
}

impl<H: HcaSet, X: BorrowMut<Scratch>> Fabric<H, X> {
    /// As [`Fabric::new`], with the engine's scratch space in `scratch`.
    pub fn with_scratch(mut set: H, scratch: X) -> Self {
        number(&mut set);
        Fabric {
            set,
            now: 0,
            cursor: 0,
            scratch,
        }
    }

    /// The instances, for ringing doorbells and control operations.
    pub fn hcas(&mut self) -> &mut [Hca<H::Storage>] {
        self.set.hcas()
    }

    /// Instance `id`.
    pub fn hca(&mut self, id: u16) -> Option<&mut Hca<H::Storage>> {
        self.set.hcas().get_mut(usize::from(id))
    }

    /// Gives the instances back.
    pub fn into_inner(self) -> H {
        self.set
    }

    /// The current time.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Advances the clock to `now` (an earlier time is ignored).
    pub fn set_time(&mut self, now: u64) {
        self.now = self.now.max(now);
    }

    /// The earliest retry deadline of any waiting QP.
    pub fn next_deadline(&mut self) -> Option<u64> {
        self.set
            .hcas()
            .iter_mut()
            .filter_map(Hca::next_deadline)
            .min()
    }

    /// Executes queued work (send WQEs, flushes, retries that are due, SQ
    /// drained events) until `budget` units are used, nothing is left or
    /// the platform asks to yield ([`Platform::yield_engine`]), taking
    /// instances and QPs in turn.
    pub fn run<P: Platform>(&mut self, p: &mut P, budget: u32) -> RunReport {
        let now = self.now;
        let hcas = self.set.hcas();
        for h in hcas.iter_mut() {
            h.expire(now);
        }
        let n = hcas.len();
        let mut used = 0u32;
        let mut idle = 0usize;
        while used < budget && n != 0 && idle < n {
            let a = self.cursor % n;
            let qp = hcas.get_mut(a).and_then(Hca::pop_active);
            let Some(qp) = qp else {
                self.cursor = self.cursor.wrapping_add(1);
                idle += 1;
                continue;
            };
            idle = 0;
            used = used.saturating_add(exec::step(hcas, self.scratch.borrow_mut(), now, p, a, qp));
            self.cursor = self.cursor.wrapping_add(1);
            if p.yield_engine() {
                break;
            }
        }
        RunReport {
            used,
            more: hcas.iter().any(Hca::has_work),
            others: 0,
        }
    }
}
