// SPDX-License-Identifier: GPL-2.0

//! The pages the driver lends the device (MANAGE_PAGES), kept sorted in a
//! slice the embedder provides, and the checks made on them.
//!
//! A real ConnectX keeps its contexts, caches and translation tables in
//! host memory it borrows page by page (ICM). The model keeps its contexts
//! in its own tables, so most pages it borrows stay unused; the one thing
//! it does keep in them is the translation table of a memory key whose
//! pages are scattered (see `cmd_res`): the MTT entries the driver passed
//! to CREATE_MKEY, copied into the lowest free pages and read by the data
//! path on every access through the key. Such a page is *in use* from
//! CREATE_MKEY to DESTROY_MKEY (or TEARDOWN_HCA): it stays among the held
//! pages, so the checks below apply to it like to any other, and it is
//! also listed in the last slots of the store, where nothing else goes
//! ([`PageTable::in_use`]). Reclaim ([`PageTable::top_free`],
//! [`PageTable::pop_free`]) only ever returns pages not in use.
//!
//! Otherwise the device borrows and returns pages exactly as the protocol
//! says, so a driver's page handling is exercised and every page can be
//! accounted for: it writes a pattern over each page it receives
//! ([`STAMP`]) so that a driver still using a page it gave away sees it
//! changed, refuses pages that are misaligned, duplicated, already held,
//! or that overlap the command queue, the UAR area or a queue buffer or
//! doorbell record it knows, and refuses queue buffers placed in pages it
//! holds (in use or not).

use super::super::mem::DmaMemory;
use super::super::mr::table_entry;
use super::super::table::Tables;

/// The size of a device page (4 KiB, whatever the host's page size).
pub const PAGE_SIZE: u64 = 4096;
/// The byte the device writes over every page it receives.
pub const STAMP: u8 = 0xa5;

/// Where the device keeps the addresses of the pages it holds: a slice of
/// the embedder's (an array, a `KVec`), whose length bounds how many pages
/// the device can hold (a page in use as device memory takes a second
/// slot). Its contents are the device's business.
pub trait PageStore {
    /// The slots.
    fn slots(&self) -> &[u64];
    /// The slots, mutably.
    fn slots_mut(&mut self) -> &mut [u64];
}

impl<const N: usize> PageStore for [u64; N] {
    fn slots(&self) -> &[u64] {
        self
    }

    fn slots_mut(&mut self) -> &mut [u64] {
        self
    }
}

impl PageStore for &mut [u64] {
    fn slots(&self) -> &[u64] {
        self
    }

    fn slots_mut(&mut self) -> &mut [u64] {
        self
    }
}

/// The held pages: the first `held` slots, in ascending order; and the
/// pages among them in use as device memory: the last `used` slots, in
/// ascending order. Staged pages go between the two.
#[derive(Debug)]
pub(super) struct PageTable<B> {
    store: B,
    held: usize,
    used: usize,
}

/// Whether `[a, a + alen)` and `[b, b + blen)` intersect (empty ranges
/// never do; ranges that wrap are clipped at the top of the address space).
pub(super) fn intersects(a: u64, alen: u64, b: u64, blen: u64) -> bool {
    alen != 0 && blen != 0 && a < b.saturating_add(blen) && b < a.saturating_add(alen)
}

impl<B: PageStore> PageTable<B> {
    pub(super) fn new(store: B) -> Self {
        PageTable {
            store,
            held: 0,
            used: 0,
        }
    }

    /// The held pages, ascending.
    pub(super) fn held(&self) -> &[u64] {
        self.store.slots().get(..self.held).unwrap_or(&[])
    }

    /// How many pages are held.
    pub(super) fn count(&self) -> usize {
        self.held
    }

    /// Whether page `addr` is held.
    pub(super) fn contains(&self, addr: u64) -> bool {
        self.held().binary_search(&addr).is_ok()
    }

    /// Whether a held page intersects `[start, start + len)`.
    pub(super) fn overlaps(&self, start: u64, len: u64) -> bool {
        let held = self.held();
        // The first page that ends after `start`.
        let i = held.partition_point(|&p| p.saturating_add(PAGE_SIZE) <= start);
        held.get(i)
            .is_some_and(|&p| intersects(p, PAGE_SIZE, start, len))
    }

    /// Where the in-use list starts: the slots below are for held and
    /// staged pages.
    fn tail(&self) -> usize {
        self.store.slots().len().saturating_sub(self.used)
    }

    /// The held pages in use as device memory, ascending.
    pub(super) fn in_use(&self) -> &[u64] {
        self.store.slots().get(self.tail()..).unwrap_or(&[])
    }

    /// Whether held page `addr` is in use as device memory.
    pub(super) fn is_in_use(&self, addr: u64) -> bool {
        self.in_use().binary_search(&addr).is_ok()
    }

    /// How many held pages are not in use.
    pub(super) fn free_count(&self) -> usize {
        self.held.saturating_sub(self.used)
    }

    /// The held pages not in use, ascending: the order in which
    /// [`PageTable::mark_lowest_free`] takes them.
    pub(super) fn free(&self) -> impl Iterator<Item = u64> + '_ {
        self.held().iter().copied().filter(|&p| !self.is_in_use(p))
    }

    /// How many more pages can be marked in use as far as slots go (each
    /// takes one in the in-use list).
    pub(super) fn mark_room(&self) -> usize {
        self.tail().saturating_sub(self.held)
    }

    /// Marks the `n` lowest pages not in use as in use. Returns `false`,
    /// marking none, if fewer are free or the store lacks a slot for each.
    pub(super) fn mark_lowest_free(&mut self, n: usize) -> bool {
        if self.mark_room() < n || self.free_count() < n {
            return false;
        }
        // One pass up the held pages: marking a page does not change
        // whether a higher one is free.
        let mut from = 0;
        for _ in 0..n {
            let next = self
                .held()
                .iter()
                .copied()
                .enumerate()
                .skip(from)
                .find(|&(_, p)| !self.is_in_use(p));
            let Some((i, page)) = next else {
                return false;
            };
            from = i + 1;
            // Insert into the in-use list, one slot lower, in order.
            let tail = self.tail();
            let Some(start) = tail.checked_sub(1) else {
                return false;
            };
            let list = self.store.slots_mut().get_mut(start..).unwrap_or(&mut []);
            let at = list
                .get(1..)
                .map_or(0, |l| l.partition_point(|&p| p < page));
            list.copy_within(1..=at, 0);
            if let Some(s) = list.get_mut(at) {
                *s = page;
            }
            self.used += 1;
        }
        true
    }

    /// Marks held page `addr` free again. Returns whether it was in use.
    pub(super) fn release(&mut self, addr: u64) -> bool {
        let tail = self.tail();
        let list = self.store.slots_mut().get_mut(tail..).unwrap_or(&mut []);
        let Ok(at) = list.binary_search(&addr) else {
            return false;
        };
        list.copy_within(..at, 1);
        self.used -= 1;
        true
    }

    /// Marks every held page free (the device forgets its tables).
    pub(super) fn release_all(&mut self) {
        self.used = 0;
    }

    /// Room for `n` new pages after the held ones, to be filled and then
    /// [`PageTable::commit`]ted (or forgotten).
    pub(super) fn stage(&mut self, n: usize) -> Option<&mut [u64]> {
        let end = self.held.checked_add(n).filter(|&e| e <= self.tail())?;
        self.store.slots_mut().get_mut(self.held..end)
    }

    /// The `n` staged slots (see [`PageTable::stage`]).
    pub(super) fn staged(&self, n: usize) -> &[u64] {
        let end = self.held.saturating_add(n).min(self.tail());
        self.store.slots().get(self.held..end).unwrap_or(&[])
    }

    /// Adds the `n` staged pages to the held ones.
    pub(super) fn commit(&mut self, n: usize) {
        let end = self.held.saturating_add(n).min(self.tail());
        self.held = end;
        if let Some(s) = self.store.slots_mut().get_mut(..end) {
            s.sort_unstable();
        }
    }

    /// The index of the held page from which on `k` pages are free (or 0
    /// if fewer are).
    fn free_cut(&self, k: usize) -> usize {
        let mut left = k;
        let held = self.held();
        for (i, &p) in held.iter().enumerate().rev() {
            if left == 0 {
                return i + 1;
            }
            if !self.is_in_use(p) {
                left -= 1;
            }
        }
        0
    }

    /// The `k` highest pages not in use (all free pages if fewer),
    /// ascending: what [`PageTable::pop_free`] removes.
    pub(super) fn top_free(&self, k: usize) -> impl Iterator<Item = u64> + '_ {
        let cut = self.free_cut(k);
        self.held()
            .get(cut..)
            .unwrap_or(&[])
            .iter()
            .copied()
            .filter(|&p| !self.is_in_use(p))
    }

    /// Forgets the `k` highest pages not in use (see
    /// [`PageTable::top_free`]); pages in use keep their place.
    pub(super) fn pop_free(&mut self, k: usize) {
        let cut = self.free_cut(k);
        let mut to = cut;
        for from in cut..self.held {
            let Some(&p) = self.store.slots().get(from) else {
                break;
            };
            if self.is_in_use(p) {
                if let Some(s) = self.store.slots_mut().get_mut(to) {
                    *s = p;
                }
                to += 1;
            }
        }
        self.held = to;
    }
}

/// Calls `f` with every queue buffer and doorbell record of the model's
/// tables (start, length) until it returns `true`; returns whether it did.
/// The pages of a scattered ring (one with a table) are in the table, in
/// device memory: [`any_ring_page`] reads them.
pub(super) fn any_queue_range(t: &Tables<'_>, mut f: impl FnMut(u64, u64) -> bool) -> bool {
    for eq in t.eqs.iter().filter_map(|s| s.obj.as_ref()) {
        if f(eq.attr.buf_addr, 64u64 << eq.attr.log_size) {
            return true;
        }
    }
    for cq in t.cqs.iter().filter_map(|s| s.obj.as_ref()) {
        let ring = if cq.attr.buf_pages.is_none() {
            64u64 << cq.attr.log_size
        } else {
            0
        };
        if f(cq.attr.buf_addr, ring) || f(cq.attr.dbr_addr, 8) {
            return true;
        }
    }
    for qp in t.qps.iter().filter_map(|s| s.obj.as_ref()) {
        let a = &qp.attr;
        let linear = u64::from(a.buf_pages.is_none());
        let sq = u64::from(a.sq_wqebbs) * 64 * linear;
        let rq = u64::from(a.rq_wqes) * u64::from(a.rq_stride) * linear;
        if f(a.sq_buf_addr, sq) || f(a.rq_buf_addr, rq) || f(a.dbr_addr, 8) {
            return true;
        }
    }
    false
}

/// Calls `f` with every page (address, size) of every scattered CQ and QP
/// ring, read from its table, until it returns `true`; returns whether it
/// did. An entry that cannot be read is skipped (the ring faults on it).
pub(super) fn any_ring_page<M: DmaMemory>(
    t: &Tables<'_>,
    mem: &mut M,
    mut f: impl FnMut(u64, u64) -> bool,
) -> bool {
    let cqs = t.cqs.iter().filter_map(|s| s.obj.as_ref()?.attr.buf_pages);
    let qps = t.qps.iter().filter_map(|s| s.obj.as_ref()?.attr.buf_pages);
    for r in cqs.chain(qps) {
        let Some(size) = 1u64.checked_shl(u32::from(r.log_page)) else {
            continue;
        };
        for k in 0..u64::from(r.count) {
            if let Ok(e) = table_entry(mem, r.table, r.indirect, k) {
                if f(e & !(size - 1), size) {
                    return true;
                }
            }
        }
    }
    false
}

/// Writes [`STAMP`] over the page at `addr`. Returns whether the whole
/// page was reachable.
pub(super) fn stamp<M: DmaMemory>(mem: &mut M, addr: u64) -> bool {
    const CHUNK: [u8; 256] = [STAMP; 256];
    (0..PAGE_SIZE / CHUNK.len() as u64).all(|i| {
        mem.write(addr.wrapping_add(i * CHUNK.len() as u64), &CHUNK)
            .is_ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_stays_sorted() {
        let mut t = PageTable::new([0u64; 8]);
        let s = t.stage(3).unwrap();
        s.copy_from_slice(&[0x5000, 0x1000, 0x3000]);
        t.commit(3);
        assert_eq!(t.held(), [0x1000, 0x3000, 0x5000]);
        assert!(t.contains(0x3000) && !t.contains(0x2000));
        assert!(t.overlaps(0x2fff, 2));
        assert!(!t.overlaps(0x2000, 0x1000));
        assert!(t.overlaps(0x0, 0x1001));
        assert!(!t.overlaps(0x6000, u64::MAX));
        assert!(t.stage(6).is_none());
        t.stage(2).unwrap().copy_from_slice(&[0x2000, 0x4000]);
        t.commit(2);
        assert!(t.top_free(2).eq([0x4000, 0x5000]));
        t.pop_free(2);
        assert_eq!(t.held(), [0x1000, 0x2000, 0x3000]);
        assert_eq!(t.count(), 3);
    }

    /// Pages in use stay held, take a slot of their own, are marked
    /// lowest first, and are never among those reclaim returns.
    #[test]
    fn pages_in_use_are_kept() {
        let mut t = PageTable::new([0u64; 10]);
        t.stage(6)
            .unwrap()
            .copy_from_slice(&[0x6000, 0x1000, 0x5000, 0x2000, 0x4000, 0x3000]);
        t.commit(6);
        assert!(t.mark_lowest_free(2));
        assert_eq!(t.in_use(), [0x1000, 0x2000]);
        assert!(t.mark_lowest_free(1));
        assert_eq!(t.in_use(), [0x1000, 0x2000, 0x3000]);
        assert_eq!((t.count(), t.free_count()), (6, 3));
        assert!(t.free().eq([0x4000, 0x5000, 0x6000]));
        assert!(t.is_in_use(0x2000) && !t.is_in_use(0x4000));
        // Held all the same: contained, overlapping, listed.
        assert!(t.contains(0x2000) && t.overlaps(0x2800, 1));
        assert_eq!(t.held().len(), 6);
        // 6 held + 3 marks: one slot left, for a staged page or a mark.
        assert!(t.stage(2).is_none());
        assert!(t.stage(1).is_some());
        assert!(!t.mark_lowest_free(2), "no slots for two more marks");
        assert_eq!(t.in_use(), [0x1000, 0x2000, 0x3000]);
        // Release from the middle; the next mark takes the lowest again.
        assert!(t.release(0x2000));
        assert!(!t.release(0x2000));
        assert!(!t.release(0x9000), "not held");
        assert_eq!(t.in_use(), [0x1000, 0x3000]);
        assert!(t.mark_lowest_free(1));
        assert_eq!(t.in_use(), [0x1000, 0x2000, 0x3000]);
        assert!(!t.mark_lowest_free(4), "only three free");
        assert!(t.mark_lowest_free(0));
        // Reclaim takes the highest free pages only.
        assert!(t.top_free(2).eq([0x5000, 0x6000]));
        t.pop_free(2);
        assert_eq!(t.held(), [0x1000, 0x2000, 0x3000, 0x4000]);
        t.release_all();
        assert!(t.in_use().is_empty());
        assert_eq!(t.free_count(), 4);
    }

    /// Pages in use above free ones: reclaim passes over them, and they
    /// close ranks in order.
    #[test]
    fn reclaim_passes_over_pages_in_use() {
        let mut t = PageTable::new([0u64; 16]);
        t.stage(6)
            .unwrap()
            .copy_from_slice(&[0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0x6000]);
        t.commit(6);
        assert!(t.mark_lowest_free(6));
        for p in [0x1000, 0x3000, 0x5000] {
            assert!(t.release(p));
        }
        assert_eq!(t.in_use(), [0x2000, 0x4000, 0x6000]);
        assert!(t.top_free(2).eq([0x3000, 0x5000]));
        t.pop_free(2);
        assert_eq!(t.held(), [0x1000, 0x2000, 0x4000, 0x6000]);
        assert_eq!(t.in_use(), [0x2000, 0x4000, 0x6000]);
        assert!(t.top_free(10).eq([0x1000]));
        t.pop_free(10);
        assert_eq!(t.held(), [0x2000, 0x4000, 0x6000]);
        assert_eq!(t.free_count(), 0);
        assert_eq!(t.top_free(1).count(), 0);
        t.pop_free(1);
        assert_eq!(t.held(), [0x2000, 0x4000, 0x6000]);
        // New pages go below the in-use list and sort in with the rest.
        t.stage(2).unwrap().copy_from_slice(&[0x5000, 0x1000]);
        t.commit(2);
        assert_eq!(t.held(), [0x1000, 0x2000, 0x4000, 0x5000, 0x6000]);
        assert_eq!(t.in_use(), [0x2000, 0x4000, 0x6000]);
        assert!(t.free().eq([0x1000, 0x5000]));
    }

    #[test]
    fn ranges() {
        assert!(intersects(0, 10, 9, 1));
        assert!(!intersects(0, 10, 10, 1));
        assert!(!intersects(0, 0, 0, 10));
        assert!(intersects(u64::MAX - 1, 10, u64::MAX - 1, 1));
    }
}
