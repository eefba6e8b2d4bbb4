// SPDX-License-Identifier: GPL-2.0

//! The engine's work lists: which QPs have something to do now, and which
//! wait for a retry deadline.
//!
//! Both are FIFO lists linked through the QPs themselves (`Qp::next`, with
//! `Qp::on_list` saying which list a QP is on), so scheduling never
//! allocates and a QP is on at most one list at a time.
//!
//! # Invariants
//!
//! A QP is linked into `active` exactly when its `on_list` is
//! `OnList::Active`, into `timer` exactly when it is `OnList::Timer`,
//! and `len` counts the QPs linked into each list.
//!
//! # A QP an engine is executing
//!
//! [`Sched::pop_active`] marks the QP it returns `OnList::Running` until
//! the engine calls [`Sched::end_step`]. An embedder that runs several
//! engines, each holding an instance only for one phase of a step (see
//! [`super::fabric::Instances`]), lets doorbells and control operations
//! reach the instance between those phases; an activation then only sets
//! `Qp::rerun`, so no second engine takes the QP and executes the same
//! head WQE. A step that must wait records it in `Qp::wait`, and the
//! step's end files the QP on the timer list.

use super::qp::{OnList, Qp};
use super::table::{get, get_mut, Slot};

const NIL: u32 = u32::MAX;

/// One singly linked FIFO of QP slot indices.
#[derive(Clone, Copy, Debug)]
pub(super) struct List {
    head: u32,
    tail: u32,
    len: u32,
}

impl List {
    const EMPTY: List = List {
        head: NIL,
        tail: NIL,
        len: 0,
    };

    fn push_back(&mut self, qps: &mut [Slot<Qp>], slot: u32, which: OnList) {
        let Some(qp) = get_mut(qps, slot) else {
            return;
        };
        qp.on_list = which;
        qp.next = NIL;
        match get_mut(qps, self.tail) {
            Some(tail) => tail.next = slot,
            None => self.head = slot,
        }
        self.tail = slot;
        self.len = self.len.wrapping_add(1);
    }

    fn pop_front(&mut self, qps: &mut [Slot<Qp>]) -> Option<u32> {
        let slot = self.head;
        let qp = get_mut(qps, slot)?;
        self.head = qp.next;
        qp.next = NIL;
        qp.on_list = OnList::None;
        if self.head == NIL {
            self.tail = NIL;
        }
        self.len = self.len.saturating_sub(1);
        Some(slot)
    }

    /// Unlinks `slot`, walking the list (used only on the control path:
    /// reset, error and destroy).
    fn remove(&mut self, qps: &mut [Slot<Qp>], slot: u32) {
        let mut prev = NIL;
        let mut cur = self.head;
        let mut steps = self.len;
        while cur != NIL && steps > 0 {
            steps -= 1;
            let next = get(qps, cur).map_or(NIL, |q| q.next);
            if cur == slot {
                match get_mut(qps, prev) {
                    Some(p) => p.next = next,
                    None => self.head = next,
                }
                if self.tail == slot {
                    self.tail = prev;
                }
                if let Some(q) = get_mut(qps, slot) {
                    q.next = NIL;
                    q.on_list = OnList::None;
                }
                self.len = self.len.saturating_sub(1);
                return;
            }
            prev = cur;
            cur = next;
        }
    }
}

/// The two work lists of one HCA instance.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sched {
    active: List,
    timer: List,
}

impl Sched {
    pub(super) const EMPTY: Sched = Sched {
        active: List::EMPTY,
        timer: List::EMPTY,
    };

    /// Puts the QP in `slot` on the active list unless it already is there;
    /// a QP waiting for a deadline is moved (its deadline stays recorded
    /// and the engine puts it back if it has not passed).
    pub(super) fn activate(&mut self, qps: &mut [Slot<Qp>], slot: u32) {
        match get(qps, slot).map(|q| q.on_list) {
            Some(OnList::None) => self.active.push_back(qps, slot, OnList::Active),
            Some(OnList::Timer) => {
                self.timer.remove(qps, slot);
                self.active.push_back(qps, slot, OnList::Active);
            }
            Some(OnList::Running) => {
                if let Some(q) = get_mut(qps, slot) {
                    q.rerun = true;
                }
            }
            Some(OnList::Active) | None => {}
        }
    }

    /// Puts the QP in `slot` (on no list) on the timer list. A running QP
    /// stays with its engine: [`Sched::end_step`] files it by its `wait`,
    /// so no other engine can take it off the timer list before that step
    /// has ended.
    pub(super) fn park(&mut self, qps: &mut [Slot<Qp>], slot: u32) {
        if get(qps, slot).is_some_and(|q| q.on_list == OnList::None) {
            self.timer.push_back(qps, slot, OnList::Timer);
        }
    }

    /// Takes the QP in `slot` off whichever list it is on (a QP being
    /// executed stays with its engine, which will not put it back: its
    /// activation is forgotten).
    pub(super) fn unlink(&mut self, qps: &mut [Slot<Qp>], slot: u32) {
        match get(qps, slot).map(|q| q.on_list) {
            Some(OnList::Active) => self.active.remove(qps, slot),
            Some(OnList::Timer) => self.timer.remove(qps, slot),
            Some(OnList::Running) => {
                if let Some(q) = get_mut(qps, slot) {
                    q.rerun = false;
                }
            }
            Some(OnList::None) | None => {}
        }
    }

    /// Takes the first QP off the active list and marks it running: until
    /// [`Sched::end_step`], only its engine puts it on a list.
    pub(super) fn pop_active(&mut self, qps: &mut [Slot<Qp>]) -> Option<u32> {
        let slot = self.active.pop_front(qps)?;
        if let Some(q) = get_mut(qps, slot) {
            q.on_list = OnList::Running;
            q.rerun = false;
        }
        Some(slot)
    }

    /// Ends the step of the QP in `slot` that [`Sched::pop_active`] gave an
    /// engine: it goes back on the active list if `more` (it has work it
    /// can do now) or if it was activated during the step, else on the
    /// timer list if it waits for a retry (the step parked it). The caller
    /// has checked that the slot still holds the QP it popped.
    #[inline]
    pub(super) fn end_step(&mut self, qps: &mut [Slot<Qp>], slot: u32, more: bool) {
        let Some(q) = get_mut(qps, slot) else {
            return;
        };
        if q.on_list != OnList::Running {
            return;
        }
        q.on_list = OnList::None;
        let again = more || q.rerun;
        q.rerun = false;
        let waits = q.wait.is_some();
        if again {
            self.activate(qps, slot);
        } else if waits {
            self.park(qps, slot);
        }
    }

    /// Whether any QP is on the active list.
    pub(super) fn has_active(&self) -> bool {
        self.active.len != 0
    }

    /// Moves every waiting QP whose deadline is at or before `now` to the
    /// active list. Returns the earliest deadline still pending.
    pub(super) fn expire(&mut self, qps: &mut [Slot<Qp>], now: u64) -> Option<u64> {
        let mut earliest: Option<u64> = None;
        for _ in 0..self.timer.len {
            let Some(slot) = self.timer.pop_front(qps) else {
                break;
            };
            let deadline = get(qps, slot).and_then(|q| q.wait).map_or(0, |(_, d)| d);
            if deadline <= now {
                self.active.push_back(qps, slot, OnList::Active);
            } else {
                earliest = Some(earliest.map_or(deadline, |e| e.min(deadline)));
                self.timer.push_back(qps, slot, OnList::Timer);
            }
        }
        earliest
    }

    /// The earliest deadline of the waiting QPs, without moving them.
    pub(super) fn next_deadline(&self, qps: &[Slot<Qp>]) -> Option<u64> {
        let mut earliest: Option<u64> = None;
        let mut cur = self.timer.head;
        for _ in 0..self.timer.len {
            let Some(qp) = get(qps, cur) else {
                break;
            };
            if let Some((_, d)) = qp.wait {
                earliest = Some(earliest.map_or(d, |e| e.min(d)));
            }
            cur = qp.next;
        }
        earliest
    }
}

#[cfg(test)]
mod tests {
    use super::super::qp::{QpAttr, WaitKind};
    use super::*;

    fn qps(n: u32) -> [Slot<Qp>; 4] {
        let attr = QpAttr {
            service: super::super::qp::QpService::Rc,
            pdn: 0,
            send_cqn: 0,
            recv_cqn: 0,
            sq_wqebbs: 1,
            sq_buf_addr: 0,
            rq_wqes: 0,
            rq_stride: 16,
            rq_buf_addr: 0,
            buf_pages: None,
            dbr_addr: 0,
            uar_addr: 0,
            bfreg: 0,
            max_send_sge: 1,
            max_inline_data: 0,
        };
        core::array::from_fn(|i| Slot {
            variant: 0,
            obj: (i < n as usize).then(|| Qp::new(i as u32, attr)),
        })
    }

    #[test]
    fn active_list_is_fifo_without_duplicates() {
        let mut t = qps(3);
        let mut s = Sched::EMPTY;
        s.activate(&mut t, 2);
        s.activate(&mut t, 0);
        s.activate(&mut t, 2);
        s.activate(&mut t, 3); // empty slot: ignored
        assert_eq!(s.pop_active(&mut t), Some(2));
        assert_eq!(s.pop_active(&mut t), Some(0));
        assert_eq!(s.pop_active(&mut t), None);
        assert!(!s.has_active());
    }

    #[test]
    fn timers_expire_in_place_and_unlink_works() {
        let mut t = qps(3);
        let mut s = Sched::EMPTY;
        for (slot, deadline) in [(0u32, 30u64), (1, 10), (2, 20)] {
            if let Some(q) = get_mut(&mut t, slot) {
                q.wait = Some((WaitKind::Rnr, deadline));
            }
            s.park(&mut t, slot);
        }
        assert_eq!(s.next_deadline(&t), Some(10));
        assert_eq!(s.expire(&mut t, 20), Some(30));
        assert_eq!(s.pop_active(&mut t), Some(1));
        assert_eq!(s.pop_active(&mut t), Some(2));
        s.unlink(&mut t, 0);
        assert_eq!(s.next_deadline(&t), None);
        // Its step over and its wait still set, QP 1 is parked again;
        // activating a parked QP moves it.
        s.end_step(&mut t, 1, false);
        assert_eq!(s.next_deadline(&t), Some(10));
        s.activate(&mut t, 1);
        assert_eq!(s.next_deadline(&t), None);
        assert_eq!(s.pop_active(&mut t), Some(1));
    }

    #[test]
    fn a_running_qp_is_activated_only_by_its_step_end() {
        let mut t = qps(3);
        let mut s = Sched::EMPTY;
        s.activate(&mut t, 1);
        assert_eq!(s.pop_active(&mut t), Some(1));
        // A doorbell between the phases of its step: no second engine may
        // take it.
        s.activate(&mut t, 1);
        assert!(!s.has_active());
        s.end_step(&mut t, 1, false);
        assert_eq!(s.pop_active(&mut t), Some(1));
        // Nothing new and nothing left: it stays off.
        s.end_step(&mut t, 1, false);
        assert!(!s.has_active());
        // Reset or destroyed meanwhile: the activation is forgotten.
        s.activate(&mut t, 1);
        assert_eq!(s.pop_active(&mut t), Some(1));
        s.activate(&mut t, 1);
        s.unlink(&mut t, 1);
        s.end_step(&mut t, 1, false);
        assert!(!s.has_active());
        // Parked by its own step: the step's end, not the park, puts it on
        // the timer list, so no engine can expire it before then.
        s.activate(&mut t, 2);
        assert_eq!(s.pop_active(&mut t), Some(2));
        if let Some(q) = get_mut(&mut t, 2) {
            q.wait = Some((WaitKind::Rnr, 50));
        }
        s.park(&mut t, 2);
        assert_eq!(s.next_deadline(&t), None);
        assert_eq!(s.expire(&mut t, 100), None);
        s.end_step(&mut t, 2, false);
        assert!(!s.has_active());
        assert_eq!(s.next_deadline(&t), Some(50));
        // A doorbell during that step wins over the wait, as it does for
        // a parked QP: it runs again (and parks again if still early).
        assert_eq!(s.expire(&mut t, 100), None);
        assert_eq!(s.pop_active(&mut t), Some(2));
        s.park(&mut t, 2);
        s.activate(&mut t, 2);
        s.end_step(&mut t, 2, false);
        assert_eq!(s.pop_active(&mut t), Some(2));
    }
}
