// SPDX-License-Identifier: GPL-2.0

//! Object tables: storage owned by the embedder, sized at run time.
//!
//! The model never allocates. Each HCA instance works on five slices of
//! [`Slot`]s (PDs, MRs, CQs, EQs, QPs) that the embedder provides through
//! the [`Storage`] trait: the kernel keeps them in `KVec`s sized from module
//! parameters, a host test in `Vec`s or in an [`ArrayStorage`]. An object's
//! number is derived from its slot index (see each object's module).

use super::cq::Cq;
use super::eq::Eq;
use super::mr::Mr;
use super::pd::Pd;
use super::qp::Qp;

/// One entry of an object table.
#[derive(Debug)]
pub struct Slot<T> {
    /// Bumped every time the slot is reused; MR keys carry it as their
    /// variant byte so that a stale key never matches a new MR.
    pub(super) variant: u8,
    /// The object, if the slot is in use.
    pub(super) obj: Option<T>,
}

impl<T> Slot<T> {
    /// An empty slot.
    pub const fn new() -> Self {
        Slot {
            variant: 0,
            obj: None,
        }
    }

    /// Whether an object lives in this slot.
    pub fn is_used(&self) -> bool {
        self.obj.is_some()
    }
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot::new()
    }
}

/// Mutable views of all five object tables of one HCA instance.
#[derive(Debug)]
pub struct Tables<'t> {
    /// Protection domains.
    pub pds: &'t mut [Slot<Pd>],
    /// Memory regions.
    pub mrs: &'t mut [Slot<Mr>],
    /// Completion queues.
    pub cqs: &'t mut [Slot<Cq>],
    /// Event queues (at most 256 are usable: an EQ number is 8 bits).
    pub eqs: &'t mut [Slot<Eq>],
    /// Queue pairs.
    pub qps: &'t mut [Slot<Qp>],
}

/// Where an HCA instance keeps its objects. Implement it for a struct of
/// five `KVec`s, `Vec`s or arrays; [`Tables`] itself implements it for
/// borrowed slices.
pub trait Storage {
    /// Returns the five tables. Their lengths must not change while objects
    /// live in them.
    fn tables(&mut self) -> Tables<'_>;
}

impl Storage for Tables<'_> {
    fn tables(&mut self) -> Tables<'_> {
        Tables {
            pds: &mut *self.pds,
            mrs: &mut *self.mrs,
            cqs: &mut *self.cqs,
            eqs: &mut *self.eqs,
            qps: &mut *self.qps,
        }
    }
}

/// Fixed-size storage with `N` slots in every table, for tests and small
/// embedders (put it in a `Box`: a QP slot is a few hundred bytes).
#[derive(Debug)]
pub struct ArrayStorage<const N: usize> {
    pds: [Slot<Pd>; N],
    mrs: [Slot<Mr>; N],
    cqs: [Slot<Cq>; N],
    eqs: [Slot<Eq>; N],
    qps: [Slot<Qp>; N],
}

impl<const N: usize> ArrayStorage<N> {
    /// Empty tables.
    pub fn new() -> Self {
        ArrayStorage {
            pds: core::array::from_fn(|_| Slot::new()),
            mrs: core::array::from_fn(|_| Slot::new()),
            cqs: core::array::from_fn(|_| Slot::new()),
            eqs: core::array::from_fn(|_| Slot::new()),
            qps: core::array::from_fn(|_| Slot::new()),
        }
    }
}

impl<const N: usize> Default for ArrayStorage<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Storage for ArrayStorage<N> {
    fn tables(&mut self) -> Tables<'_> {
        Tables {
            pds: &mut self.pds,
            mrs: &mut self.mrs,
            cqs: &mut self.cqs,
            eqs: &mut self.eqs,
            qps: &mut self.qps,
        }
    }
}

/// The object in slot `index`, if any.
pub(super) fn get<T>(slots: &[Slot<T>], index: u32) -> Option<&T> {
    slots.get(usize::try_from(index).ok()?)?.obj.as_ref()
}

/// The object in slot `index`, if any, mutably.
pub(super) fn get_mut<T>(slots: &mut [Slot<T>], index: u32) -> Option<&mut T> {
    slots.get_mut(usize::try_from(index).ok()?)?.obj.as_mut()
}

/// Finds a free slot, searching from `*cursor` onwards and wrapping, so that
/// numbers are not reused right after an object is destroyed. Advances the
/// cursor past the slot found. Only slots below `limit` are considered.
pub(super) fn find_free<T>(slots: &[Slot<T>], cursor: &mut u32, limit: usize) -> Option<u32> {
    let n = slots.len().min(limit);
    if n == 0 {
        return None;
    }
    let start = usize::try_from(*cursor).unwrap_or(0) % n;
    for k in 0..n {
        let i = (start + k) % n;
        if !slots[i].is_used() {
            let index = u32::try_from(i).ok()?;
            *cursor = u32::try_from((i + 1) % n).unwrap_or(0);
            return Some(index);
        }
    }
    None
}
