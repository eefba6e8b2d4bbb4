// SPDX-License-Identifier: GPL-2.0

//! The fabric: every HCA instance, the clock, and the engine that executes
//! queued work across instances.
//!
//! A send on instance A addressed to a QP on instance B (or on A, or to the
//! sending QP itself) is executed by one engine step that holds the whole
//! fabric: it borrows A, then B, then A again, never both at once, so the
//! same code serves every case and nothing is allocated. The kernel keeps
//! the fabric behind one lock and calls [`Fabric::run`] after each kick and
//! from a work item while [`RunReport::more`] is set.
//!
//! # Clock
//!
//! RNR and transport retries wait on a clock the embedder drives with
//! [`Fabric::set_time`] (nanoseconds, any origin, never going back). A
//! waiting QP is retried by the first [`Fabric::run`] at or after its
//! deadline; [`Fabric::next_deadline`] says when to call it (the kernel
//! arms an hrtimer).

use core::borrow::BorrowMut;

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

/// What one engine run did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunReport {
    /// Budget units used (one per WQE executed or flushed, plus one per
    /// 4 KiB moved).
    pub used: u32,
    /// Whether work remains that can run now: call [`Fabric::run`] again.
    pub more: bool,
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
            let slot = hcas.get_mut(a).and_then(Hca::pop_active);
            let Some(slot) = slot else {
                self.cursor = self.cursor.wrapping_add(1);
                idle += 1;
                continue;
            };
            idle = 0;
            used =
                used.saturating_add(exec::step(hcas, self.scratch.borrow_mut(), now, p, a, slot));
            self.cursor = self.cursor.wrapping_add(1);
            if p.yield_engine() {
                break;
            }
        }
        RunReport {
            used,
            more: hcas.iter().any(Hca::has_work),
        }
    }
}
