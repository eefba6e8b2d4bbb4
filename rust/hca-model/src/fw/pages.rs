// SPDX-License-Identifier: GPL-2.0

//! The pages the driver lends the device (MANAGE_PAGES), kept sorted in a
//! slice the embedder provides, and the checks made on them.
//!
//! A real ConnectX keeps its contexts and caches in host memory it borrows
//! page by page. The model needs no such memory, but it borrows and returns
//! pages exactly as the protocol says, so a driver's page handling is
//! exercised and every page can be accounted for: it writes a pattern over
//! each page it receives ([`STAMP`]) so that a driver still using a page it
//! gave away sees it changed, refuses pages that are misaligned,
//! duplicated, already held, or that overlap the command queue, the UAR
//! area or a queue buffer or doorbell record it knows, and refuses queue
//! buffers placed in pages it holds.

use super::super::mem::DmaMemory;
use super::super::table::Tables;

/// The size of a device page (4 KiB, whatever the host's page size).
pub const PAGE_SIZE: u64 = 4096;
/// The byte the device writes over every page it receives.
pub const STAMP: u8 = 0xa5;

/// Where the device keeps the addresses of the pages it holds: a slice of
/// the embedder's (an array, a `KVec`), whose length bounds how many pages
/// the device can hold. Its contents are the device's business.
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

/// The held pages: the first `held` slots, in ascending order.
#[derive(Debug)]
pub(super) struct PageTable<B> {
    store: B,
    held: usize,
}

/// Whether `[a, a + alen)` and `[b, b + blen)` intersect (empty ranges
/// never do; ranges that wrap are clipped at the top of the address space).
pub(super) fn intersects(a: u64, alen: u64, b: u64, blen: u64) -> bool {
    alen != 0 && blen != 0 && a < b.saturating_add(blen) && b < a.saturating_add(alen)
}

impl<B: PageStore> PageTable<B> {
    pub(super) fn new(store: B) -> Self {
        PageTable { store, held: 0 }
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

    /// Room for `n` new pages after the held ones, to be filled and then
    /// [`PageTable::commit`]ted (or forgotten).
    pub(super) fn stage(&mut self, n: usize) -> Option<&mut [u64]> {
        let end = self.held.checked_add(n)?;
        self.store.slots_mut().get_mut(self.held..end)
    }

    /// The `n` staged slots (see [`PageTable::stage`]).
    pub(super) fn staged(&self, n: usize) -> &[u64] {
        let end = self.held.saturating_add(n);
        self.store.slots().get(self.held..end).unwrap_or(&[])
    }

    /// Adds the `n` staged pages to the held ones.
    pub(super) fn commit(&mut self, n: usize) {
        let end = self.held.saturating_add(n).min(self.store.slots().len());
        self.held = end;
        if let Some(s) = self.store.slots_mut().get_mut(..end) {
            s.sort_unstable();
        }
    }

    /// The `k` pages [`PageTable::pop`] would remove (the highest).
    pub(super) fn top(&self, k: usize) -> &[u64] {
        let held = self.held();
        held.get(held.len().saturating_sub(k)..).unwrap_or(&[])
    }

    /// Forgets the `k` highest pages.
    pub(super) fn pop(&mut self, k: usize) {
        self.held = self.held.saturating_sub(k);
    }
}

/// Calls `f` with every queue buffer and doorbell record of the model's
/// tables (start, length) until it returns `true`; returns whether it did.
pub(super) fn any_queue_range(t: &Tables<'_>, mut f: impl FnMut(u64, u64) -> bool) -> bool {
    for eq in t.eqs.iter().filter_map(|s| s.obj.as_ref()) {
        if f(eq.attr.buf_addr, 64u64 << eq.attr.log_size) {
            return true;
        }
    }
    for cq in t.cqs.iter().filter_map(|s| s.obj.as_ref()) {
        if f(cq.attr.buf_addr, 64u64 << cq.attr.log_size) || f(cq.attr.dbr_addr, 8) {
            return true;
        }
    }
    for qp in t.qps.iter().filter_map(|s| s.obj.as_ref()) {
        let a = &qp.attr;
        let sq = u64::from(a.sq_wqebbs) * 64;
        let rq = u64::from(a.rq_wqes) * u64::from(a.rq_stride);
        if f(a.sq_buf_addr, sq) || f(a.rq_buf_addr, rq) || f(a.dbr_addr, 8) {
            return true;
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
        assert_eq!(t.top(2), [0x4000, 0x5000]);
        t.pop(2);
        assert_eq!(t.held(), [0x1000, 0x2000, 0x3000]);
        assert_eq!(t.count(), 3);
    }

    #[test]
    fn ranges() {
        assert!(intersects(0, 10, 9, 1));
        assert!(!intersects(0, 10, 10, 1));
        assert!(!intersects(0, 0, 0, 10));
        assert!(intersects(u64::MAX - 1, 10, u64::MAX - 1, 1));
    }
}
