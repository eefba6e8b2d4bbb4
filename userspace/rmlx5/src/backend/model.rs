// SPDX-License-Identifier: GPL-2.0

//! The in-process backend: `rust/hca-model` behind the rmlx5 ABI.
//!
//! [`SoftFabric`] plays what `rmlx5.ko` does for the software HCA: it owns
//! the model instances (one per device, LID = index + 1), allocates the
//! queue buffers, doorbell records and UAR pages in process memory, answers
//! the ABI's commands with the same structs and mmap offsets as the kernel,
//! handles the kick by ringing the model's doorbell and running the fabric,
//! and turns the model's interrupts into completion-channel and async
//! events (EQ polled by owner bit, re-armed through the EQ doorbell).
//!
//! The model reaches memory only through [`ProcMem`], which translates a
//! DMA address (here the process address) into a region this backend
//! registered (queue memory, UAR pages, EQs, MR buffers) and refuses
//! everything else, so a stray address in a WQE is a DMA fault, never a
//! wild access.
//!
//! Completion channels and the async-event file are `AF_UNIX`
//! `SOCK_SEQPACKET` socket pairs: one 8-byte (or 16-byte) message per
//! event, readable, pollable and non-blocking like the kernel's
//! `[infinibandevent]` files. Destroying a CQ takes its unread events back
//! out of its channel, as the kernel does.

mod objects;

use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use hca_model::caps::Caps;
use hca_model::fabric::{Fabric, HcaSet};
use hca_model::hca::Hca;
use hca_model::mem::{DmaFault, DmaMemory, Interrupt, Platform};

use super::{Backend, Cmd};
use crate::device::Device;
use crate::dma::DmaRegion;
use crate::error::{Error, Result};

use objects::{CtxState, DevState};

/// Object table slots per model instance.
const SLOTS: usize = 256;

/// Work budget per engine run.
const BUDGET: u32 = 1 << 16;

use hca_model::vec_storage::VecStorage;

/// The instances.
#[derive(Debug)]
pub(crate) struct Hcas(Vec<Hca<VecStorage>>);

impl HcaSet for Hcas {
    type Storage = VecStorage;

    fn hcas(&mut self) -> &mut [Hca<VecStorage>] {
        &mut self.0
    }
}

/// A region the model may reach.
#[derive(Debug)]
struct Registered {
    region: DmaRegion,
    /// It holds doorbell records, which the provider stores a whole 32-bit
    /// word at a time, concurrently with the model's reads: read them in
    /// whole words too.
    records: bool,
}

/// Process memory as the model's DMA space: only registered regions.
#[derive(Debug, Default)]
pub(crate) struct ProcMem {
    regions: BTreeMap<u64, Registered>,
    irqs: Vec<Interrupt>,
}

impl ProcMem {
    /// Makes `region` reachable by the model.
    pub(crate) fn add(&mut self, region: &DmaRegion) -> Result<()> {
        self.register(region, false)
    }

    /// Makes `region`, a page of doorbell records, reachable by the model.
    pub(crate) fn add_records(&mut self, region: &DmaRegion) -> Result<()> {
        self.register(region, true)
    }

    fn register(&mut self, region: &DmaRegion, records: bool) -> Result<()> {
        let r = region.slice(0, region.len())?;
        self.regions
            .insert(region.addr(), Registered { region: r, records });
        Ok(())
    }

    /// Makes the region starting at `addr` unreachable again.
    pub(crate) fn remove(&mut self, addr: u64) {
        self.regions.remove(&addr);
    }

    fn find(&self, addr: u64, len: usize) -> core::result::Result<(&Registered, usize), DmaFault> {
        let (start, r) = self.regions.range(..=addr).next_back().ok_or(DmaFault)?;
        let off = usize::try_from(addr - start).map_err(|_| DmaFault)?;
        match off.checked_add(len) {
            Some(end) if end <= r.region.len() => Ok((r, off)),
            _ => Err(DmaFault),
        }
    }
}

impl DmaMemory for ProcMem {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> core::result::Result<(), DmaFault> {
        let (r, off) = self.find(addr, buf.len())?;
        let read = if r.records {
            // Never half a counter the provider is storing.
            r.region.read_u32s(off, buf)
        } else {
            r.region.read(off, buf)
        };
        read.map_err(|_| DmaFault)
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> core::result::Result<(), DmaFault> {
        let (r, off) = self.find(addr, data.len())?;
        r.region.write(off, data).map_err(|_| DmaFault)
    }
}

impl Platform for ProcMem {
    fn interrupt(&mut self, irq: Interrupt) {
        self.irqs.push(irq);
    }
}

/// Everything behind the fabric lock.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) fabric: Fabric<Hcas>,
    pub(crate) mem: ProcMem,
    pub(crate) devs: Vec<DevState>,
    pub(crate) ctxs: HashMap<u64, CtxState>,
    pub(crate) pending_buffers: Vec<DmaRegion>,
    next_ctx: u64,
}

/// A set of in-process software HCAs on one switch: the stand-in for
/// `rmlx5.ko` in host tests and `--model` runs of the tools.
#[derive(Debug)]
pub struct SoftFabric {
    state: Mutex<State>,
    epoch: Instant,
    manual_clock: bool,
}

impl SoftFabric {
    /// `devices` software HCAs (`rmlx5_0` ...) whose clock follows real
    /// time (RNR and transport retries wait as long as on a wire).
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for 0 or more than 8 devices; allocation errors.
    pub fn new(devices: usize) -> Result<Arc<SoftFabric>> {
        Self::build(devices, false)
    }

    /// As [`SoftFabric::new`], but time stands still until
    /// [`SoftFabric::advance`] moves it (for deterministic tests).
    ///
    /// # Errors
    ///
    /// As for [`SoftFabric::new`].
    pub fn with_manual_clock(devices: usize) -> Result<Arc<SoftFabric>> {
        Self::build(devices, true)
    }

    fn build(devices: usize, manual_clock: bool) -> Result<Arc<SoftFabric>> {
        if devices == 0 || devices > 8 {
            return Err(Error::Invalid("1 to 8 software HCAs"));
        }
        let hcas = (0..devices)
            .map(|i| {
                Hca::new(
                    u16::try_from(i).unwrap_or(0),
                    Caps::DEFAULT,
                    VecStorage::uniform(SLOTS),
                )
            })
            .collect();
        let mut st = State {
            fabric: Fabric::new(Hcas(hcas)),
            mem: ProcMem::default(),
            devs: Vec::new(),
            ctxs: HashMap::new(),
            pending_buffers: Vec::new(),
            next_ctx: 1,
        };
        for i in 0..devices {
            let dev = DevState::new(&mut st, i)?;
            st.devs.push(dev);
        }
        Ok(Arc::new(SoftFabric {
            state: Mutex::new(st),
            epoch: Instant::now(),
            manual_clock,
        }))
    }

    /// The devices, `rmlx5_0` first.
    pub fn devices(self: &Arc<Self>) -> Vec<Device> {
        let n = self.lock().devs.len();
        (0..n)
            .map(|i| Device::model(self.clone(), u32::try_from(i).unwrap_or(0)))
            .collect()
    }

    /// Moves the manual clock forward by `ns` and runs whatever became due
    /// (RNR and transport retries). With a real-time clock, just runs.
    pub fn advance(&self, ns: u64) {
        let mut st = self.lock();
        if self.manual_clock {
            let now = st.fabric.now().saturating_add(ns);
            st.fabric.set_time(now);
        }
        self.run_locked(&mut st);
    }

    /// Runs retries that are due now (with a real-time clock, call it while
    /// waiting for an RNR-delayed completion).
    pub fn progress(&self) {
        let mut st = self.lock();
        self.run_locked(&mut st);
    }

    /// Doorbells the model refused on device `index`, all causes.
    pub fn doorbell_errors(&self, index: usize) -> u64 {
        let mut st = self.lock();
        st.fabric
            .hca(u16::try_from(index).unwrap_or(u16::MAX))
            .map_or(0, |h| {
                let s = h.stats();
                s.doorbell_errors
            })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while the lock was held leaves the model consistent
        // enough for tests to report it; do not propagate the poison.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs the engine until idle, then delivers the interrupts it raised.
    pub(crate) fn run_locked(&self, st: &mut State) {
        if !self.manual_clock {
            let now = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
            st.fabric.set_time(now);
        }
        for _ in 0..1024 {
            let r = st.fabric.run(&mut st.mem, BUDGET);
            objects::deliver_interrupts(st);
            if !r.more && st.mem.irqs.is_empty() {
                break;
            }
        }
    }

    /// Opens a context on device `index`.
    pub(crate) fn open(self: &Arc<Self>, index: u32) -> Result<ModelBackend> {
        let mut st = self.lock();
        let dev = usize::try_from(index).map_err(|_| Error::NoDevice)?;
        if dev >= st.devs.len() {
            return Err(Error::NoDevice);
        }
        let id = st.next_ctx;
        st.next_ctx += 1;
        let ctx = CtxState::new(&mut st.mem, dev)?;
        st.ctxs.insert(id, ctx);
        Ok(ModelBackend {
            fabric: self.clone(),
            ctx: id,
        })
    }
}

/// One open context on a [`SoftFabric`] device.
#[derive(Debug)]
pub(crate) struct ModelBackend {
    fabric: Arc<SoftFabric>,
    ctx: u64,
}

impl Backend for ModelBackend {
    fn command(&self, cmd: Cmd<'_>) -> Result<()> {
        let mut st = self.fabric.lock();
        let name = cmd.name();
        let r = objects::command(&mut st, self.ctx, cmd);
        if r.ran {
            self.fabric.run_locked(&mut st);
        }
        r.result.map_err(|e| match e {
            Error::Os { errno, .. } => Error::Os { op: name, errno },
            other => other,
        })
    }

    fn map(&self, offset: u64, len: usize) -> Result<DmaRegion> {
        let st = self.fabric.lock();
        objects::map(&st, self.ctx, offset, len)
    }

    fn needs_kick(&self) -> bool {
        true
    }

    fn alloc_buffer(&self, len: usize) -> Result<DmaRegion> {
        let (_pages, region) = crate::dma::HeapPages::alloc(len)?;
        let mut st = self.fabric.lock();
        st.adopt(region.slice(0, region.len())?);
        Ok(region)
    }

    fn release_buffer(&self, addr: u64) {
        self.fabric.lock().release(addr);
    }

    fn take_fd(&self, fd: i32) -> Result<OwnedFd> {
        let mut st = self.fabric.lock();
        let ctx = st.ctxs.get_mut(&self.ctx).ok_or(Error::NoDevice)?;
        if !ctx.claim_fd(fd) {
            return Err(Error::Invalid("not a file of this context"));
        }
        // SAFETY: `fd` is the read end of a socket pair this backend
        // created for the caller and handed over exactly once (the command
        // that returned it); the backend keeps its own duplicate.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

impl Drop for ModelBackend {
    fn drop(&mut self) {
        let mut st = self.fabric.lock();
        objects::close_context(&mut st, self.ctx);
        self.fabric.run_locked(&mut st);
    }
}

/// Creates a `SOCK_SEQPACKET` pair: (read end for the process, write end
/// for the backend).
pub(crate) fn event_socket() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a valid array of two ints for the kernel to fill.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r < 0 {
        return Err(Error::last_os("socketpair"));
    }
    // SAFETY: both descriptors were just created and are owned by nobody
    // else.
    let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // Shut the unused directions so each end is one-way.
    // SAFETY: plain calls on descriptors we own.
    unsafe {
        libc::shutdown(a.as_raw_fd(), libc::SHUT_WR);
        libc::shutdown(b.as_raw_fd(), libc::SHUT_RD);
    }
    Ok((a, b))
}
