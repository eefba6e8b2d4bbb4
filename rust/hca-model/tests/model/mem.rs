// SPDX-License-Identifier: GPL-2.0

//! A DMA address space with guard zones: every region the tests allocate is
//! surrounded by unmapped space, queue buffers the device must only read are
//! marked so, and data buffers may only be reached inside a registered MR.
//! Any other access by the model is a violation that fails the test.
//!
//! An IOMMU window lets a test give the device bus addresses that differ
//! from the provider's: [`TestMem::map_scattered`] maps a contiguous
//! buffer page by page at scattered bus addresses, as a process's pinned
//! pages reach a device. A device access through the window must stay in
//! one page.
//!
//! [`TestMem::refuse`] makes the memory refuse a range, as an IOMMU
//! refuses a page it does not map: the device's accesses to it fail, and
//! the model is expected to turn that into an error.

use hca_model::mem::{DmaFault, DmaMemory, Interrupt, Platform};

/// Where DMA addresses start (so that 0 and small numbers are never valid).
const BASE: u64 = 0x1_0000_0000;
/// Unmapped bytes between regions.
const GUARD: u64 = 4096;
/// Where the IOMMU window starts (far above any allocation).
const IOVA_BASE: u64 = 0x7000_0000_0000;

/// What the device may do to a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// SQ, RQ, doorbell records, UAR pages: the device only reads.
    DevRead,
    /// CQ and EQ rings: the device reads and writes.
    DevWrite,
    /// Data buffers: reachable only inside a registered MR.
    Data,
}

#[derive(Clone, Copy, Debug)]
struct Region {
    start: u64,
    len: u64,
    kind: Kind,
}

/// The memory, the interrupt log and the violation log.
pub struct TestMem {
    bytes: Vec<u8>,
    regions: Vec<Region>,
    next: u64,
    /// DMA ranges of live MRs: (start, len, hca, key).
    mrs: Vec<(u64, u64, usize, u32)>,
    /// Accesses the model should never have made.
    pub violations: Vec<String>,
    /// Panic at the first violation (the default), for a useful backtrace.
    pub strict: bool,
    /// Interrupts raised, in order.
    pub irqs: Vec<Interrupt>,
    /// Ask the engine to stop after a step that raised an interrupt, as
    /// the kernel does ([`Platform::yield_engine`]); `raised` says one was.
    pub yield_on_irq: bool,
    pub raised: bool,
    /// Device reads and writes, for the benchmarks' sanity.
    pub accesses: u64,
    /// Check device accesses (turned off by the benchmark to time the
    /// model rather than the checker).
    pub checks: bool,
    /// The IOMMU window: the host page of each bus page from `IOVA_BASE`.
    iova_pages: Vec<Option<u64>>,
    /// Ranges whose device accesses fail (memory that refuses them, as an
    /// IOMMU refuses a page it does not map): not violations, the model
    /// is expected to try and handle the fault.
    refused: Vec<(u64, u64)>,
    /// Device accesses refused so.
    pub refusals: u64,
}

impl Default for TestMem {
    fn default() -> Self {
        Self::new()
    }
}

impl TestMem {
    /// An empty address space.
    pub fn new() -> Self {
        TestMem {
            bytes: Vec::new(),
            regions: Vec::new(),
            next: BASE + GUARD,
            mrs: Vec::new(),
            violations: Vec::new(),
            strict: true,
            irqs: Vec::new(),
            yield_on_irq: false,
            raised: false,
            accesses: 0,
            checks: true,
            iova_pages: Vec::new(),
            refused: Vec::new(),
            refusals: 0,
        }
    }

    /// Makes every device access that touches `len` bytes at `start` fail.
    pub fn refuse(&mut self, start: u64, len: u64) {
        self.refused.push((start, len));
    }

    /// Whether a device access of `len` bytes at `addr` touches a refused
    /// range (and counts it if so).
    fn refused(&mut self, addr: u64, len: usize) -> bool {
        let end = addr.saturating_add(len as u64);
        let hit = self
            .refused
            .iter()
            .any(|&(s, l)| addr < s.saturating_add(l) && s < end);
        if hit {
            self.refusals += 1;
        }
        hit
    }

    /// Maps the `n` pages from `host` (4 KiB aligned) into the IOMMU
    /// window, in order but never two adjacent, and returns their bus
    /// addresses.
    pub fn map_scattered(&mut self, host: u64, n: u64) -> Vec<u64> {
        assert_eq!(host % 4096, 0);
        let mut out = Vec::new();
        for k in 0..n {
            // Every other slot, and each page after a hole of 1 to 3.
            let slot = self.iova_pages.len() + 1 + (k as usize % 3);
            self.iova_pages.resize(slot + 1, None);
            self.iova_pages[slot] = Some(host + k * 4096);
            out.push(IOVA_BASE + slot as u64 * 4096);
        }
        out
    }

    /// The host address of a device address (itself outside the window);
    /// `None` for an unmapped bus page or an access crossing one.
    fn translate(&self, addr: u64, len: usize) -> Option<u64> {
        let Some(off) = addr.checked_sub(IOVA_BASE) else {
            return Some(addr);
        };
        let within = off % 4096;
        if within + len as u64 > 4096 {
            return None;
        }
        let page = (*self.iova_pages.get(usize::try_from(off / 4096).ok()?)?)?;
        Some(page + within)
    }

    /// Allocates `len` bytes (zeroed), 4 KiB aligned, with guards around.
    pub fn alloc(&mut self, len: u64, kind: Kind) -> u64 {
        let start = self.next;
        let len = len.max(1);
        self.regions.push(Region { start, len, kind });
        self.next = (start + len + GUARD).next_multiple_of(4096) + GUARD;
        let end = (self.next - BASE) as usize;
        if self.bytes.len() < end {
            self.bytes.resize(end, 0);
        }
        start
    }

    /// Records an MR's DMA range as reachable.
    pub fn add_mr(&mut self, start: u64, len: u64, hca: usize, key: u32) {
        self.mrs.push((start, len, hca, key));
    }

    /// Forgets an MR's DMA range.
    pub fn remove_mr(&mut self, hca: usize, key: u32) {
        self.mrs.retain(|m| !(m.2 == hca && m.3 == key));
    }

    fn offset(&self, addr: u64, len: usize) -> Option<std::ops::Range<usize>> {
        let start = usize::try_from(addr.checked_sub(BASE)?).ok()?;
        let end = start.checked_add(len)?;
        (end <= self.bytes.len()).then_some(start..end)
    }

    /// Provider-side read (unchecked, but within allocated memory).
    pub fn get(&self, addr: u64, len: usize) -> &[u8] {
        let r = self.offset(addr, len).expect("provider read out of memory");
        &self.bytes[r]
    }

    /// Provider-side write.
    pub fn put(&mut self, addr: u64, data: &[u8]) {
        let r = self
            .offset(addr, data.len())
            .expect("provider write out of memory");
        self.bytes[r].copy_from_slice(data);
    }

    /// Provider-side mutable view.
    pub fn slice_mut(&mut self, addr: u64, len: usize) -> &mut [u8] {
        let r = self
            .offset(addr, len)
            .expect("provider access out of memory");
        &mut self.bytes[r]
    }

    /// Records a device access the IOMMU window refused.
    fn iommu_fault(&mut self, addr: u64, len: usize, write: bool) -> DmaFault {
        let msg = format!(
            "device {} of {len} bytes at {addr:#x}: unmapped bus page or crossing one",
            if write { "write" } else { "read" }
        );
        assert!(!self.strict, "{msg}");
        self.violations.push(msg);
        DmaFault
    }

    /// Checks a device access; returns whether it is allowed.
    fn check(&mut self, addr: u64, len: usize, write: bool) -> bool {
        self.accesses += 1;
        if !self.checks {
            return true;
        }
        let end = addr.checked_add(len as u64);
        // Regions are allocated in address order.
        let i = self.regions.partition_point(|r| r.start <= addr);
        let region = i
            .checked_sub(1)
            .and_then(|i| self.regions.get(i))
            .filter(|r| end.is_some_and(|e| e <= r.start + r.len))
            .copied();
        let why = match region {
            None => Some("outside every region (guard zone or unmapped)"),
            Some(r) if write && r.kind == Kind::DevRead => {
                Some("write to a device-read-only region")
            }
            Some(r) if r.kind == Kind::Data => {
                let e = end.unwrap_or(u64::MAX);
                let inside = self.mrs.iter().any(|m| addr >= m.0 && e <= m.0 + m.1);
                (!inside && len != 0).then_some("data access outside every registered MR")
            }
            Some(_) => None,
        };
        if let Some(why) = why {
            let msg = format!(
                "device {} of {len} bytes at {addr:#x}: {why}",
                if write { "write" } else { "read" }
            );
            if self.strict {
                panic!("{msg}");
            }
            self.violations.push(msg);
            return false;
        }
        true
    }
}

impl DmaMemory for TestMem {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
        if self.refused(addr, buf.len()) {
            return Err(DmaFault);
        }
        let Some(addr) = self.translate(addr, buf.len()) else {
            return Err(self.iommu_fault(addr, buf.len(), false));
        };
        if !self.check(addr, buf.len(), false) {
            return Err(DmaFault);
        }
        let r = self.offset(addr, buf.len()).ok_or(DmaFault)?;
        buf.copy_from_slice(&self.bytes[r]);
        Ok(())
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), DmaFault> {
        if self.refused(addr, data.len()) {
            return Err(DmaFault);
        }
        let Some(addr) = self.translate(addr, data.len()) else {
            return Err(self.iommu_fault(addr, data.len(), true));
        };
        if !self.check(addr, data.len(), true) {
            return Err(DmaFault);
        }
        let r = self.offset(addr, data.len()).ok_or(DmaFault)?;
        self.bytes[r].copy_from_slice(data);
        Ok(())
    }
}

impl Platform for TestMem {
    fn interrupt(&mut self, irq: Interrupt) {
        self.irqs.push(irq);
        self.raised = true;
    }

    fn yield_engine(&self) -> bool {
        self.yield_on_irq && self.raised
    }
}
