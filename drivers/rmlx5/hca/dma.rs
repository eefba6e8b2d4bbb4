// SPDX-License-Identifier: GPL-2.0

//! Memory the software HCA may reach, and the [`Platform`] the model runs on.
//!
//! The model names memory by a 64-bit "DMA address". In rmlx5 that is the
//! kernel virtual address of a buffer the module allocated ([`DmaBuf`]) or
//! of a kernel ULP's registered memory. The model's accesses go through a
//! [`DmaRegistry`]: an address is dereferenced only if the whole range lies
//! inside one registered region, so a stray address from WQE bytes or a
//! doorbell record becomes a [`DmaFault`] (an error completion), never a
//! wild access. Regions are of three kinds ([`RegionKind`]): module
//! buffers, kernel ULP memory regions, and user memory regions (the
//! pinned pages of a process, which uverbs maps contiguously with `vmap`
//! so that each user MR is one range here as well).
//!
//! Every access to a buffer shared with the model is a volatile copy: the
//! model writes under the fabric lock while consumers read without it, as
//! a CPU and a device share a DMA buffer.

use core::sync::atomic::{
    AtomicU64,
    Ordering, //
};
use kernel::{
    prelude::*,
    sync::barrier::{
        dma_mb,
        Write, //
    },
};

use crate::hca_model::mem::{
    DmaFault,
    DmaMemory,
    Interrupt,
    Platform, //
};
use crate::perf::Perf;

pub(crate) use crate::mem::{
    volatile_copy_from,
    volatile_copy_to,
    DmaBuf, //
};

/// What a registered region is (debugfs, and the rule for its lifetime).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RegionKind {
    /// A module buffer ([`DmaBuf`]): EQ and CQ rings, queues, doorbell
    /// records, UAR pages, also those shared with a process.
    Buf,
    /// A kernel ULP's memory region (the ULP keeps it valid).
    KernelMr,
    /// A process's memory region: pinned user pages, `vmap`ped (uverbs
    /// keeps them pinned and mapped until the MR is out of the model).
    UserMr,
}

/// One range of memory the model may access.
#[derive(Clone, Copy)]
struct Region {
    start: u64,
    len: u64,
    kind: RegionKind,
    /// The largest end (`start + len`) of this region and of every region
    /// before it in the registry's order, removed ones included: a lookup
    /// walking backwards stops once no earlier region can reach the end of
    /// the access.
    reach: u64,
    /// Removed: never matches an access, and goes at the next compaction.
    dead: bool,
}

/// The ranges of memory the model may access.
///
/// Every DMA access of the model is checked here, so the lookup must not
/// grow with the number of objects (a thousand QPs register a few thousand
/// regions): the regions are kept sorted by start, an access finds the last
/// region starting at or below it by binary search and walks back only
/// while an earlier region can still reach its end (`Region::reach`), which
/// is one step unless regions overlap (kernel ULPs may register overlapping
/// MRs). Adding shifts the regions above the new one (O(n), on the control
/// path). Removing only marks the region dead, since shifting a vector of
/// tens of thousands of regions took a millisecond per destroyed QP under
/// TCG at 10,000 QPs; the dead ones are dropped in one pass once they
/// are as many as the live ones.
///
/// # Invariants
///
/// `regions` is sorted by `start`, and each `reach` is the largest end of
/// the regions up to and including it, dead ones included. `dead` counts
/// the dead regions and is at most the number of live ones. A grant whose
/// `generation` is the registry's lies inside a live region or the open
/// direct map: grants are made from a search, and every removal and every
/// closing of the direct map moves to a new generation.
///
/// Every live region is valid for reads and writes for as long as it is in the
/// registry, and so is the direct map while `direct` is set (see
/// [`Self::open_direct_map`]): module buffers are registered after allocation and removed
/// (under the fabric lock) before they are freed; kernel ULP memory is
/// registered by `reg_mr`, whose caller promises it stays valid until
/// `dereg_mr`; user MRs are removed (under the fabric lock) before their
/// pages are unmapped and unpinned.
pub(crate) struct DmaRegistry {
    regions: KVec<Region>,
    dead: usize,
    /// The kernel's direct map `(start, end)` and the number of DMA MRs
    /// that opened it (see [`Self::open_direct_map`]).
    direct: Option<(u64, u64, usize)>,
    /// Ranges granted by earlier searches, one slot per hash of the page
    /// the access started in ([`grant_slot`]).
    grants: KVVec<Grant>,
    /// The grants' generation: a grant of another generation is stale.
    /// Bumped whenever a range stops being reachable (a region removed,
    /// the direct map closed), so no grant outlives what it was found in.
    generation: u64,
}

/// A range `[start, end)` the registry found for an earlier access, kept
/// for the next access to the same page: the platform's own cache lives
/// for one locked section, while these stay from one section to the
/// next. A thousand QP pairs take turns at the engine, each with its send
/// queue and two data buffers, so the accesses of consecutive WQEs seldom
/// share a range, and each miss searched a registry of several thousand
/// regions (13 steps of a binary search).
#[derive(Clone, Copy)]
struct Grant {
    start: u64,
    end: u64,
    generation: u64,
}

/// Log2 of the number of remembered grants: 8,192 slots of 24 bytes,
/// enough for the few pages each of 1,000 QP pairs' WQEs touch.
const GRANT_BITS: u32 = 13;

/// The grant slot of the page holding `addr` (a multiplicative hash, so
/// that buffers aligned to large powers of two do not share slots).
fn grant_slot(addr: u64) -> usize {
    ((addr >> 12).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - GRANT_BITS)) as usize
}

impl DmaRegistry {
    pub(crate) fn new() -> Result<Self> {
        let stale = Grant {
            start: 0,
            end: 0,
            generation: 0,
        };
        Ok(Self {
            regions: KVec::new(),
            dead: 0,
            direct: None,
            grants: KVVec::from_elem(stale, 1 << GRANT_BITS, GFP_KERNEL)?,
            generation: 1,
        })
    }

    /// Opens the kernel's direct map (`len` bytes at `start`) to the model
    /// for one more DMA MR.
    ///
    /// ib_core's kernel ULPs name memory by the address `ib_dma_map_*`
    /// gives them, which for a device without a DMA device (rxe, siw, the
    /// software HCA) is the memory's direct-map address, under the local
    /// DMA MR every PD carries. So while a DMA MR exists, any range inside
    /// the direct map is reachable, the trust rxe and siw place in their
    /// kernel callers. The direct map is mapped for as long as the kernel
    /// runs (this kernel has no DEBUG_PAGEALLOC, and a ULP never hands out
    /// secretmem pages); KASAN still catches an access to memory the ULP
    /// freed.
    pub(crate) fn open_direct_map(&mut self, start: u64, len: u64) -> Result {
        let end = start.checked_add(len).ok_or(EINVAL)?;
        self.direct = match self.direct {
            None => Some((start, end, 1)),
            Some((s, e, n)) if s == start && e == end => Some((s, e, n + 1)),
            Some(_) => return Err(EINVAL),
        };
        Ok(())
    }

    /// Closes the direct map for one DMA MR: the last one closes it.
    pub(crate) fn close_direct_map(&mut self) {
        self.direct = match self.direct {
            Some((s, e, n)) if n > 1 => Some((s, e, n - 1)),
            _ => None,
        };
        if self.direct.is_none() {
            self.generation += 1;
        }
    }

    /// Number of DMA MRs that keep the direct map open (debugfs, tests).
    pub(crate) fn direct_map_users(&self) -> usize {
        self.direct.map_or(0, |(_, _, n)| n)
    }

    /// Registers a module-owned buffer.
    pub(crate) fn add_buf(&mut self, buf: &DmaBuf) -> Result {
        // INVARIANT: `buf` is live; its owner removes it before freeing.
        self.add_raw(buf.addr(), buf.len() as u64, RegionKind::Buf)
    }

    /// Registers `len` bytes at kernel address `start`.
    ///
    /// The caller must keep the memory valid until [`Self::remove`].
    pub(crate) fn add_raw(&mut self, start: u64, len: u64, kind: RegionKind) -> Result {
        if len == 0 || start.checked_add(len).is_none() {
            return Err(EINVAL);
        }
        let pos = self.regions.partition_point(|r| r.start <= start);
        let region = Region {
            start,
            len,
            kind,
            reach: 0,
            dead: false,
        };
        self.regions.push(region, GFP_ATOMIC)?;
        self.regions[pos..].rotate_right(1);
        self.fix_reach(pos);
        Ok(())
    }

    /// Recomputes `reach` from index `from` on, after an insertion there.
    /// `reach` is a running maximum, so once the value
    /// recomputed for a region is the one it holds, every later one holds
    /// its value too: the walk stops there (at once, for regions that do
    /// not overlap), instead of at the end of the list.
    fn fix_reach(&mut self, from: usize) {
        let mut reach = match from.checked_sub(1) {
            Some(i) => self.regions.get(i).map_or(0, |r| r.reach),
            None => 0,
        };
        for r in self.regions.iter_mut().skip(from) {
            // `start + len` cannot overflow: checked when it was added.
            reach = reach.max(r.start + r.len);
            if r.reach == reach {
                break;
            }
            r.reach = reach;
        }
    }

    /// Drops the dead regions and recomputes every `reach` without them.
    fn compact(&mut self) {
        let mut kept = 0;
        for i in 0..self.regions.len() {
            if !self.regions[i].dead {
                self.regions[kept] = self.regions[i];
                kept += 1;
            }
        }
        self.regions.truncate(kept);
        self.dead = 0;
        let mut reach = 0;
        for r in self.regions.iter_mut() {
            reach = reach.max(r.start + r.len);
            r.reach = reach;
        }
    }

    /// Number of registered regions of `kind` (debugfs, tests).
    pub(crate) fn count(&self, kind: RegionKind) -> usize {
        self.regions
            .iter()
            .filter(|r| r.kind == kind && !r.dead)
            .count()
    }

    /// Removes one registration of exactly `len` bytes at `start` (a
    /// registration of another length at the same start, e.g. a second MR
    /// over the front of the same buffer, stays).
    pub(crate) fn remove(&mut self, start: u64, len: u64) {
        let first = self.regions.partition_point(|r| r.start < start);
        let found = self.regions[first..]
            .iter_mut()
            .take_while(|r| r.start == start)
            .find(|r| r.len == len && !r.dead);
        if let Some(r) = found {
            // `reach` stays as it is: it may count a dead region's end,
            // which only makes a lookup walk back further.
            r.dead = true;
            self.dead += 1;
            // Every remembered grant may lie in the removed region.
            self.generation += 1;
            if self.dead * 2 > self.regions.len() {
                self.compact();
            }
        }
    }

    /// Removes a module buffer registered with [`Self::add_buf`].
    pub(crate) fn remove_buf(&mut self, buf: &DmaBuf) {
        self.remove(buf.addr(), buf.len() as u64);
    }

    /// Finds the registered range `[start, end)` that holds the bytes
    /// `[addr, end)` whole, from the grants of the current generation (made
    /// since the last removal or closing of the direct map) or by a search
    /// (then remembered). The second value says whether it searched.
    fn find(&mut self, addr: u64, end: u64) -> Result<((u64, u64), bool), DmaFault> {
        if end < addr {
            return Err(DmaFault);
        }
        let slot = grant_slot(addr);
        if let Some(g) = self.grants.get(slot) {
            if g.generation == self.generation && g.start <= addr && end <= g.end {
                return Ok(((g.start, g.end), false));
            }
        }
        let range = self.check(addr, end)?;
        if let Some(g) = self.grants.get_mut(slot) {
            *g = Grant {
                start: range.0,
                end: range.1,
                generation: self.generation,
            };
        }
        Ok((range, true))
    }

    /// Finds the registered range `[start, end)` that holds the bytes
    /// `[addr, end)` whole by searching the regions: a live region, or
    /// the direct map. `end` is not below `addr` (checked by [`Self::find`]).
    fn check(&self, addr: u64, end: u64) -> Result<(u64, u64), DmaFault> {
        // Candidates start at or below `addr`; walk back from the last one
        // while an earlier region can still reach `end`.
        let mut i = self.regions.partition_point(|r| r.start <= addr);
        while let Some(prev) = i.checked_sub(1) {
            i = prev;
            let r = &self.regions[i];
            if r.reach < end {
                break;
            }
            // `start + len` cannot overflow: checked when it was added.
            if end <= r.start + r.len && !r.dead {
                return Ok((r.start, r.start + r.len));
            }
        }
        match self.direct {
            Some((s, e, _)) if s <= addr && end <= e => Ok((s, e)),
            _ => Err(DmaFault),
        }
    }
}

/// How many ranges a [`SoftPlatform`] remembers: a WQE's accesses go to a
/// handful of buffers (the send queue, the doorbell record, the two MRs,
/// the CQ ring), and a hit spares the registry's binary search.
const RANGE_CACHE: usize = 4;

/// The model's view of the machine for one locked section: memory through
/// the registry, interrupts through the shim's irq_work.
pub(crate) struct SoftPlatform<'a> {
    /// Private: a platform's holder must not add or remove regions while
    /// it lives, since `ranges` below would then go stale.
    dma: &'a mut DmaRegistry,
    /// Interrupt vectors per HCA (hwirq = hca * irqs_per_hca + vector).
    pub(crate) irqs_per_hca: u32,
    /// Where raised interrupts are stamped (the event path's figures).
    pub(crate) perf: &'a Perf,
    /// An interrupt was raised through this platform. The engine runs
    /// under the fabric lock with interrupts off, so a raised interrupt
    /// fires only once the lock is released: the engine yields after the
    /// step that raised it ([`Platform::yield_engine`]) rather than finish
    /// its budget first.
    raised: bool,
    /// Where raised interrupts are kept when the caller delivers them
    /// itself after the unlock (`SoftHca::locked_direct`); `None`: through
    /// the irq_work.
    direct: Option<&'a mut super::irq::DirectIrqs>,
    /// Ranges the registry granted during this section, `(start, end)`,
    /// the latest first. The registry is borrowed for the platform's
    /// whole life, so it cannot change under them. (The registry keeps
    /// its own grants across sections; these few are the cheapest to
    /// check.)
    ranges: [(u64, u64); RANGE_CACHE],
    /// Accesses and bytes, added to `perf` once, when the section ends
    /// (two shared atomic additions per section instead of per access).
    accesses: u64,
    bytes: u64,
    /// Successful registry searches (accesses that neither this
    /// platform's ranges nor the registry's grants answered) and the
    /// regions, dead ones included, the registry held at each; added to
    /// `perf` with the accesses.
    searches: u64,
    searched: u64,
}

impl<'a> SoftPlatform<'a> {
    pub(crate) fn new(
        dma: &'a mut DmaRegistry,
        irqs_per_hca: u32,
        perf: &'a Perf,
        direct: Option<&'a mut super::irq::DirectIrqs>,
    ) -> Self {
        Self {
            dma,
            irqs_per_hca,
            perf,
            raised: false,
            direct,
            // Empty ranges: `start <= addr && end <= 0` never holds for
            // an access of at least one byte.
            ranges: [(u64::MAX, 0); RANGE_CACHE],
            accesses: 0,
            bytes: 0,
            searches: 0,
            searched: 0,
        }
    }

    /// Checks that the `len` bytes at `addr` are reachable and returns
    /// them as a pointer: from the ranges granted before if one holds
    /// them, else from the registry.
    fn reach(&mut self, addr: u64, len: usize) -> Result<*mut u8, DmaFault> {
        self.accesses += 1;
        self.bytes += len as u64;
        let end = addr
            .checked_add(u64::try_from(len).map_err(|_| DmaFault)?)
            .ok_or(DmaFault)?;
        if self.ranges.iter().any(|&(s, e)| s <= addr && end <= e) {
            return Ok(addr as *mut u8);
        }
        let (range, searched) = self.dma.find(addr, end)?;
        if searched {
            self.searches += 1;
            self.searched += self.dma.regions.len() as u64;
        }
        self.ranges.rotate_right(1);
        self.ranges[0] = range;
        Ok(addr as *mut u8)
    }
}

impl Drop for SoftPlatform<'_> {
    fn drop(&mut self) {
        if self.accesses != 0 {
            self.perf.dma.add_many(self.accesses, self.bytes);
        }
        if self.searches != 0 {
            self.perf.dma_search.add_many(self.searches, self.searched);
        }
    }
}

impl DmaMemory for SoftPlatform<'_> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
        let p = self.reach(addr, buf.len())?;
        // SAFETY: `reach` found the range inside a registered region (by
        // a search, a grant of the registry's current generation, or one
        // it found before in this section, while the registry stays
        // borrowed and so unchanged), which is valid while registered
        // (type invariants of `DmaRegistry`).
        unsafe { volatile_copy_from(p, buf) };
        Ok(())
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), DmaFault> {
        let p = self.reach(addr, data.len())?;
        // The model's writes become visible in the order it makes them, as
        // a device's posted writes do: an EQE's or CQE's owner byte (its
        // own write) after its body, for consumers that read by owner bit
        // without the fabric lock (the EQ handler, pollers).
        dma_mb(Write);
        // SAFETY: As for `read`.
        unsafe { volatile_copy_to(p, data) };
        Ok(())
    }
}

impl SoftPlatform<'_> {
    /// Atomically takes (replacing it with 0) each nonzero one of the `n`
    /// aligned 64-bit words from `addr` on, and calls `f` with its index
    /// and value: words of doorbell hints a process sets with atomic ORs
    /// (the UAR page's doorbell bits, `hca/watch.rs`). The range is
    /// checked once, and a word that reads zero is left alone: no atomic
    /// exchange, and no write to a cache line the process is setting bits
    /// in, for each of the many words with nothing in them.
    pub(crate) fn take_u64s(
        &mut self,
        addr: u64,
        n: usize,
        mut f: impl FnMut(usize, u64),
    ) -> Result<(), DmaFault> {
        if addr % 8 != 0 {
            return Err(DmaFault);
        }
        let p = self.reach(addr, n.checked_mul(8).ok_or(DmaFault)?)?;
        for i in 0..n {
            // SAFETY: `reach` found the `8 * n` bytes inside a registered
            // region, valid while registered (type invariant of
            // `DmaRegistry`); word `i` is inside them and 8-byte aligned
            // like `addr`, the alignment of `AtomicU64`. The process
            // accesses these words only with 64-bit atomic operations.
            let word = unsafe { AtomicU64::from_ptr(p.cast::<u64>().add(i)) };
            if word.load(Ordering::Relaxed) != 0 {
                f(i, word.swap(0, Ordering::AcqRel));
            }
        }
        Ok(())
    }
}

impl Platform for SoftPlatform<'_> {
    fn interrupt(&mut self, irq: Interrupt) {
        let hwirq = u32::from(irq.hca) * self.irqs_per_hca + u32::from(irq.vector);
        self.perf.irq_raised.mark(self.perf.now());
        if !self.direct.as_mut().is_some_and(|d| d.push(hwirq)) {
            crate::hca::irq::raise(hwirq);
        }
        self.raised = true;
    }

    fn yield_engine(&self) -> bool {
        self.raised
    }
}

#[kunit_tests(rmlx5_dma)]
mod tests {
    use super::*;

    /// Whether the registry grants the `len` bytes at `addr`, through its
    /// remembered grants as the platform asks it.
    fn ok(reg: &mut DmaRegistry, addr: u64, len: u64) -> bool {
        addr.checked_add(len)
            .is_some_and(|end| reg.find(addr, end).is_ok())
    }

    /// A remembered grant answers the next access to its page without a
    /// search, and never one the registry no longer holds: removing the
    /// region (or another one) and closing the direct map make every
    /// grant stale.
    #[test]
    fn grants_end_with_their_region() -> Result {
        let mut reg = DmaRegistry::new()?;
        let (a, b, win) = (0x10_0000u64, 0x20_0000u64, 0x4000_0000u64);
        reg.add_raw(a, 4096, RegionKind::Buf)?;
        reg.add_raw(b, 4096, RegionKind::UserMr)?;
        assert_eq!(reg.find(a + 8, a + 16), Ok(((a, a + 4096), true)));
        assert_eq!(reg.find(a + 64, a + 128), Ok(((a, a + 4096), false)));
        // An end below the start is no access, granted or not.
        assert_eq!(reg.find(a + 4096 + 8, a + 16), Err(DmaFault));
        // Outside the granted range: searched again, and refused.
        assert_eq!(reg.find(a + 4090, a + 4100), Err(DmaFault));
        assert_eq!(reg.find(b, b + 8), Ok(((b, b + 4096), true)));
        // Another region goes: the grant of `a` is searched again.
        reg.remove(b, 4096);
        assert_eq!(reg.find(b, b + 8), Err(DmaFault));
        assert_eq!(reg.find(a, a + 8), Ok(((a, a + 4096), true)));
        reg.remove(a, 4096);
        assert_eq!(reg.find(a, a + 8), Err(DmaFault));
        // The direct map, granted, then closed.
        reg.open_direct_map(win, 1 << 28)?;
        assert_eq!(reg.find(win + 8, win + 16).map(|(_, s)| s), Ok(true));
        assert_eq!(reg.find(win + 8, win + 16).map(|(_, s)| s), Ok(false));
        reg.close_direct_map();
        assert_eq!(reg.find(win + 8, win + 16), Err(DmaFault));
        Ok(())
    }

    /// A user-MR region (as uverbs registers the `vmap` of pinned pages):
    /// accesses inside it reach the memory, any byte outside faults, and
    /// after removal nothing reaches it.
    #[test]
    fn user_mr_region_bounds() -> Result {
        // Module memory stands in for the vmap: the registry only sees an
        // address range and its kind.
        let mem = DmaBuf::new(4 * 4096, GFP_KERNEL)?;
        let base = mem.addr();
        // The middle two pages are the user MR.
        let (start, len) = (base + 4096, 2 * 4096u64);
        let mut reg = DmaRegistry::new()?;
        reg.add_raw(start, len, RegionKind::UserMr)?;
        assert_eq!(reg.count(RegionKind::UserMr), 1);
        assert_eq!(reg.count(RegionKind::Buf), 0);
        assert_eq!(
            reg.add_raw(start, 0, RegionKind::UserMr).err(),
            Some(EINVAL)
        );
        assert_eq!(
            reg.add_raw(u64::MAX, 2, RegionKind::UserMr).err(),
            Some(EINVAL)
        );
        let perf = Perf::new();
        let mut p = SoftPlatform::new(&mut reg, 1, &perf, None);
        let data = [0x5au8; 16];
        let mut back = [0u8; 16];
        // First and last bytes inside, and the whole region.
        p.write(start, &data).map_err(|_| EFAULT)?;
        p.read(start, &mut back).map_err(|_| EFAULT)?;
        assert_eq!(back, data);
        p.write(start + len - 16, &data).map_err(|_| EFAULT)?;
        let mut whole = KVec::from_elem(0u8, len as usize, GFP_KERNEL)?;
        p.read(start, &mut whole).map_err(|_| EFAULT)?;
        assert_eq!(whole.get(len as usize - 1), Some(&0x5a));
        // Outside: before, after, straddling either end, wrapping.
        assert!(p.read(start - 1, &mut back[..1]).is_err());
        assert!(p.read(start + len, &mut back[..1]).is_err());
        assert!(p.write(start - 8, &data).is_err());
        assert!(p.write(start + len - 8, &data).is_err());
        assert!(p.read(u64::MAX - 4, &mut back).is_err());
        let mut too_long = KVec::from_elem(0u8, len as usize + 1, GFP_KERNEL)?;
        assert!(p.read(start, &mut too_long).is_err());
        // The bytes around the region were never written.
        let mut around = [0u8; 1];
        mem.read(4095, &mut around)?;
        assert_eq!(around, [0]);
        mem.read(4096 * 3, &mut around)?;
        assert_eq!(around, [0]);
        drop(p);
        reg.remove(start, len);
        assert_eq!(reg.count(RegionKind::UserMr), 0);
        let p = SoftPlatform::new(&mut reg, 1, &perf, None);
        assert!(!ok(p.dma, start, 1));
        Ok(())
    }

    /// The ranges a platform remembers spare the registry's search but
    /// never widen what it grants: an access must lie inside one granted
    /// range, so one straddling two adjacent regions faults even when both
    /// were granted. The accesses are counted once the section ends.
    #[test]
    fn granted_ranges_do_not_widen_access() -> Result {
        let mem = DmaBuf::new(4096, GFP_KERNEL)?;
        let a = mem.addr();
        let mut reg = DmaRegistry::new()?;
        reg.add_raw(a, 64, RegionKind::Buf)?;
        reg.add_raw(a + 64, 64, RegionKind::Buf)?;
        let perf = Perf::new();
        {
            let mut p = SoftPlatform::new(&mut reg, 1, &perf, None);
            let mut b = [0u8; 8];
            p.read(a, &mut b).map_err(|_| EFAULT)?;
            p.read(a + 64, &mut b).map_err(|_| EFAULT)?;
            assert!(p.read(a + 60, &mut b).is_err());
            assert!(p.read(a + 124, &mut b).is_err());
            // Hits, after more ranges than the platform keeps.
            for _ in 0..2 * RANGE_CACHE {
                p.write(a + 8, &b).map_err(|_| EFAULT)?;
                p.write(a + 120, &b).map_err(|_| EFAULT)?;
            }
            assert_eq!(perf.dma.totals(), (0, 0));
        }
        let n = 4 + 4 * RANGE_CACHE as u64;
        assert_eq!(perf.dma.totals(), (n, 8 * n));
        Ok(())
    }

    /// Lookups among many regions, in any order of registration, with
    /// overlaps (kernel ULPs may register MRs over the same memory): an
    /// access is allowed exactly when one registered region holds all of
    /// it, and removing one registration leaves the others.
    /// Every region's `reach` is the running maximum of the region ends up
    /// to it, as a walk over the whole list computes it.
    fn reach_exact(reg: &DmaRegistry) -> bool {
        let mut reach = 0;
        reg.regions.iter().all(|r| {
            reach = core::cmp::max(reach, r.start + r.len);
            r.reach == reach
        })
    }

    #[test]
    fn many_and_overlapping_regions() -> Result {
        const N: u64 = 512;
        let mut reg = DmaRegistry::new()?;
        // Regions of 64 bytes every 128 bytes, registered from the top down.
        let base = 0x1000_0000u64;
        for i in (0..N).rev() {
            reg.add_raw(base + i * 128, 64, RegionKind::Buf)?;
        }
        for i in [0, 1, N / 2, N - 1] {
            let at = base + i * 128;
            assert!(ok(&mut reg, at, 64));
            assert!(ok(&mut reg, at + 63, 1));
            assert!(!ok(&mut reg, at + 64, 1));
            assert!(!ok(&mut reg, at, 65));
            assert!(!ok(&mut reg, at.wrapping_sub(1), 1));
        }
        // A long region under the first eight small ones, then a short one
        // at the same start: the gap bytes are reachable through the long
        // one only, and only until it is removed.
        reg.add_raw(base, 1024, RegionKind::KernelMr)?;
        assert!(reach_exact(&reg));
        reg.add_raw(base, 32, RegionKind::KernelMr)?;
        assert!(reach_exact(&reg));
        assert!(ok(&mut reg, base + 64, 64));
        assert!(ok(&mut reg, base + 1000, 24));
        assert!(!ok(&mut reg, base + 1000, 25));
        reg.remove(base, 32);
        assert!(reach_exact(&reg));
        assert!(ok(&mut reg, base + 64, 64));
        reg.remove(base, 1024);
        assert!(reach_exact(&reg));
        assert!(!ok(&mut reg, base + 64, 1));
        assert!(ok(&mut reg, base, 64));
        // Removing a length that was never registered changes nothing.
        reg.remove(base, 48);
        assert!(ok(&mut reg, base, 64));
        // A long region in the middle, then the small ones go from the
        // bottom up, under and past it.
        reg.add_raw(base + (N / 2) * 128 + 8, 4096, RegionKind::KernelMr)?;
        for i in 0..N {
            reg.remove(base + i * 128, 64);
            if i % 64 == 0 || i == N / 2 {
                assert!(reach_exact(&reg));
            }
            // Removed regions stay only until they are half of the list.
            assert!(reg.dead * 2 <= reg.regions.len());
            let long = base + (N / 2) * 128 + 8;
            let at = base + i * 128;
            assert_eq!(ok(&mut reg, at, 1), (long..long + 4096).contains(&at));
        }
        assert!(ok(&mut reg, base + (N / 2) * 128 + 8, 4096));
        reg.remove(base + (N / 2) * 128 + 8, 4096);
        assert_eq!(reg.count(RegionKind::Buf), 0);
        assert!(!ok(&mut reg, base, 1));
        Ok(())
    }

    /// The direct-map window of DMA MRs: reachable only while at least one
    /// is open, only inside the window, and it does not hide regions.
    #[test]
    fn direct_map_window() -> Result {
        let mut reg = DmaRegistry::new()?;
        let (start, len) = (0x4000_0000u64, 0x1000_0000u64);
        assert!(!ok(&mut reg, start, 8));
        reg.open_direct_map(start, len)?;
        reg.open_direct_map(start, len)?;
        assert_eq!(reg.direct_map_users(), 2);
        // A second, different window is refused.
        assert_eq!(reg.open_direct_map(start, len + 1).err(), Some(EINVAL));
        assert_eq!(reg.open_direct_map(u64::MAX, 2).err(), Some(EINVAL));
        assert!(ok(&mut reg, start, 8));
        assert!(ok(&mut reg, start + len - 8, 8));
        assert!(!ok(&mut reg, start + len - 8, 9));
        assert!(!ok(&mut reg, start - 1, 2));
        // A region outside the window still works, and inside too.
        reg.add_raw(0x1000, 64, RegionKind::Buf)?;
        reg.add_raw(start + 4096, 64, RegionKind::KernelMr)?;
        assert!(ok(&mut reg, 0x1000, 64));
        assert!(!ok(&mut reg, 0x1000, 65));
        assert!(ok(&mut reg, start + 4096, 128));
        reg.close_direct_map();
        assert!(ok(&mut reg, start, 8));
        reg.close_direct_map();
        assert_eq!(reg.direct_map_users(), 0);
        assert!(!ok(&mut reg, start, 8));
        assert!(ok(&mut reg, start + 4096, 64));
        assert!(!ok(&mut reg, start + 4096, 128));
        // Closing more often than opened stays closed.
        reg.close_direct_map();
        assert!(!ok(&mut reg, start, 8));
        Ok(())
    }

    /// The word-wise volatile copies move exactly the bytes asked for, at
    /// every alignment of either end and every length around the word
    /// size, and touch nothing around them.
    #[test]
    fn volatile_copies_every_alignment() -> Result {
        let buf = DmaBuf::new(128, GFP_KERNEL)?;
        let base = buf.addr() as *mut u8;
        let mut pattern = [0u8; 48];
        for (i, b) in pattern.iter_mut().enumerate() {
            *b = i as u8 + 1;
        }
        for off in 0..16usize {
            for len in 0..=40usize {
                buf.write(0, &[0xee; 128])?;
                // SAFETY: `off + len <= 56 < 128`: inside the buffer.
                unsafe { volatile_copy_to(base.add(16 + off), &pattern[..len]) };
                let mut all = [0u8; 128];
                buf.read(0, &mut all)?;
                for (i, b) in all.iter().enumerate() {
                    let want = if (16 + off..16 + off + len).contains(&i) {
                        pattern[i - 16 - off]
                    } else {
                        0xee
                    };
                    assert_eq!(*b, want);
                }
                let mut back = [0u8; 48];
                // SAFETY: as above.
                unsafe { volatile_copy_from(base.add(16 + off), &mut back[..len]) };
                assert_eq!(&back[..len], &pattern[..len]);
                assert!(back[len..].iter().all(|b| *b == 0));
            }
        }
        Ok(())
    }
}
