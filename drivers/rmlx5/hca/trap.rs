// SPDX-License-Identifier: GPL-2.0

//! The UAR trap: how the software HCA sees the doorbells of rdma-core's
//! mlx5 provider, which never enters the kernel on the data path.
//!
//! A ConnectX sees a doorbell when the provider stores it to the UAR page.
//! The software HCA's UAR pages are plain memory, and libmlx5 sends no
//! KICK. What it does do, always in this order, is store the doorbell
//! record (the QP's send counter, or the CQ's ARM word) and then store to
//! the UAR page. So the pages of those contexts are left unmapped
//! (`VM_MIXEDMAP`, no page table entry until a fault inserts one) and the
//! store faults:
//!
//! - **A doorbell store completed in the fault** ([`SoftHca::uar_store`],
//!   the usual case on x86-64): the fault handler decodes the store,
//!   writes its bytes into the page and moves the process past it, the
//!   page still unmapped (`hca/store.rs`); the trap reads the one record
//!   the doorbell names and runs the engine. Every doorbell is one fault,
//!   taken synchronously in the process, as rmlx5's own provider's KICK.
//! - **Any other store** (`rmlx5_ibu_uar_fault`, [`SoftHca::uar_fault`]):
//!   the handler maps the page, reads every trapped record at once and
//!   runs the engine, then starts the poller, since later stores to the
//!   mapped page no longer fault.
//! - **The poller** (a work item on `system_long_wq`, queued on another
//!   CPU than the caller's) reads the records over and over, running the
//!   engine between passes and yielding the CPU after each, while
//!   doorbells keep coming. After [`IDLE_NS`] without one it unmaps every
//!   trapped UAR page of the fabric (`rmlx5_ibu_zap_uars`, which sleeps),
//!   reads the records one last time and stops. From then on no CPU is
//!   spent until the next store faults.
//!
//! - **Stream mode** (with `kick_elision`, as the doorbell watcher for
//!   rmlx5's own provider): a send doorbell store completed in a fault
//!   that begins within [`STREAM_NS`] (or three times the fault's own
//!   duration) of the end of the one before, with
//!   nothing received by its HCA in between (a ping-pong receives the
//!   peer's reply between its doorbells), queues the poller on another
//!   CPU. If no other task wants that CPU when it runs, it maps
//!   every trapped UAR page itself (`rmlx5_ibu_map_uars`, as a fault
//!   would), so that the stores that follow no longer fault, and reads the
//!   records with preemption off (a process never waits for a poller that
//!   was scheduled out while its stores land unseen) until nothing new
//!   came for [`STREAM_IDLE_NS`], or another task wants the CPU (then no
//!   stream is started for [`BACKOFF_NS`]); then it unmaps them as above.
//!   A long stream continues in runs of [`STREAM_MAX_NS`] on the same CPU.
//!   Where the other CPU is busy (a receiver reposting its receives) the
//!   poller finds it so at once, and every store faults as before.
//!
//! Nothing is lost at the hand-over: a store that landed before the unmap
//! followed its record, which the last reading sees; a store after it
//! faults, and the fault handler reads the records and queues the poller
//! again (queueing a running work item runs it once more). A run keeps
//! polling for at most [`MAX_NS`], then queues itself again without
//! unmapping, so that the other work items of its CPU's pool, which wait
//! while it spins, get their turn.
//!
//! What is read: the send doorbell record of every trapped QP
//! ([`Hca::send_doorbell_record`](crate::hca_model::hca::Hca)) and the ARM
//! word of every trapped CQ's record
//! ([`Hca::cq_arm_record`](crate::hca_model::hca::Hca), which explains
//! why a change of that word is an exact stand-in for the UAR CQ
//! doorbell), or, for a completed doorbell store, only the record of the
//! QP or CQ it names. Receive records need no trap: the model reads them
//! when a message arrives, as a ConnectX does.

use core::sync::atomic::Ordering;
use kernel::{
    bitmap::BitmapVec,
    ffi::c_int,
    prelude::*,
    sync::Arc,
    time::{
        delay::fsleep,
        Delta, //
    },
    workqueue::WorkItem,
};

use super::{
    watch::{
        cpu_is_ours,
        BACKOFF_NS,
        POLL_GAP_NS,
        STREAM_NS, //
    },
    Locked,
    SoftHca,
    MAX_CQS, //
};
use crate::hca_model::{
    doorbell::{
        DoorbellError,
        CQ_ARM_RECORD_UNARMED, //
    },
    qp::QPN_BASE,
};
use crate::mlx5_prm::doorbell::{
    SendDoorbellWord,
    UarCqDoorbell,
    UAR_CQ_DOORBELL_OFFSET,
    UAR_PAGE_SIZE, //
};

#[cfg(CONFIG_INFINIBAND_USER_ACCESS)]
extern "C" {
    /// `ib_user.c`: removes the page table entries of every trapped UAR
    /// page mapping of HCA `hca`, so the next store to one faults. Sleeps.
    fn rmlx5_ibu_zap_uars(hca: c_int);
    /// `ib_user.c`: maps every trapped UAR page mapping of HCA `hca`, as a
    /// fault would, so that stores to them no longer fault; returns how
    /// many it mapped. Sleeps.
    fn rmlx5_ibu_map_uars(hca: c_int) -> c_int;
}

extern "C" {
    /// `rmlx5_shim.c`: `cond_resched()`.
    fn rmlx5_shim_cond_resched();
}

/// The poller unmaps the UAR pages and stops after this long without a
/// new doorbell or engine work.
pub(crate) const IDLE_NS: u64 = 20_000;
/// For this long after the last doorbell the poller passes back to back
/// (yielding the CPU between passes if a task wants it): a reply to a
/// message usually comes within it.
pub(crate) const SPIN_NS: u64 = 100_000;
/// Later, after a pass that found nothing, the poller sleeps this long: it
/// leaves the CPU to the processes (which may be spinning on their CQs)
/// and costs a doorbell at most this much latency while it runs.
pub(crate) const POLL_GAP_US: i64 = 20;
/// The longest one poller run lasts before it queues itself again: its
/// per-CPU pool runs nothing else queued on that CPU meanwhile while it
/// spins.
pub(crate) const MAX_NS: u64 = 1_000_000;
/// In stream mode the poller unmaps the pages and stops after this long
/// without a new doorbell or engine work (under emulation a posting vCPU
/// is often held up for tens of microseconds, and each new start costs
/// two faults, a queueing delay and a mapping of the pages).
pub(crate) const STREAM_IDLE_NS: u64 = 50_000;
/// The longest one stream-mode run polls with preemption off before it
/// queues itself again on its CPU (other work queued there runs between).
pub(crate) const STREAM_MAX_NS: u64 = 500_000;
/// Engine budgets a stream-mode pass runs after one reading of the
/// records, while work remains.
const STREAM_BUDGETS: u32 = 8;

/// The QPs and CQs whose records the trap reads, per HCA, under the fabric
/// lock. Adding and removing never allocates.
pub(crate) struct TrapSet {
    /// Per HCA, the QPs (by QPN - `QPN_BASE`).
    qps: KVec<BitmapVec>,
    /// Per HCA, the CQs (by CQN).
    cqs: KVec<BitmapVec>,
    /// Per HCA and CQN, the ARM word last read.
    arm_words: KVec<KVVec<u32>>,
    /// Per HCA, the model's count of requests received at its last send
    /// doorbell store ([`Locked::trap_quiet`]).
    requests: KVec<u64>,
    /// Doorbells taken from send records (debugfs).
    pub(crate) doorbells: u64,
    /// Arm requests taken from CQ records (debugfs).
    pub(crate) arms: u64,
    /// Faults on trapped UAR pages that mapped the page (debugfs).
    pub(crate) faults: u64,
    /// Doorbell stores the fault handler completed, the page left unmapped
    /// (debugfs; `hca/store.rs`).
    pub(crate) stores: u64,
    /// Poller runs, and how many of them ended by unmapping (debugfs).
    pub(crate) runs: u64,
    pub(crate) zaps: u64,
    /// Poller runs in stream mode that mapped the pages, and the pages
    /// they mapped (debugfs).
    pub(crate) streams: u64,
    pub(crate) stream_pages: u64,
    /// Stream-mode runs that did not start or stopped because another
    /// task wanted the poller's CPU (debugfs).
    pub(crate) stream_busy: u64,
}

impl TrapSet {
    pub(super) fn new(nr_hcas: usize, max_qps: usize) -> Result<Self> {
        let mut arm_words = KVec::with_capacity(nr_hcas, GFP_KERNEL)?;
        for _ in 0..nr_hcas {
            arm_words.push(
                KVVec::from_elem(CQ_ARM_RECORD_UNARMED, MAX_CQS, GFP_KERNEL)?,
                GFP_KERNEL,
            )?;
        }
        let mut requests = KVec::with_capacity(nr_hcas, GFP_KERNEL)?;
        for _ in 0..nr_hcas {
            requests.push(0, GFP_KERNEL)?;
        }
        Ok(Self {
            qps: super::per_hca_bitmaps(nr_hcas, max_qps)?,
            cqs: super::per_hca_bitmaps(nr_hcas, MAX_CQS)?,
            arm_words,
            requests,
            doorbells: 0,
            arms: 0,
            faults: 0,
            stores: 0,
            runs: 0,
            zaps: 0,
            streams: 0,
            stream_pages: 0,
            stream_busy: 0,
        })
    }

    /// Whether QP `qpn` of HCA `hca` is trapped.
    fn has_qp(&mut self, hca: usize, qpn: u32) -> bool {
        self.qp_slot(hca, qpn)
            .is_some_and(|(bits, slot)| bits.next_bit(slot) == Some(slot))
    }

    /// Whether CQ `cqn` of HCA `hca` is trapped.
    fn has_cq(&self, hca: usize, cqn: u32) -> bool {
        let i = cqn as usize;
        self.cqs
            .get(hca)
            .is_some_and(|bits| i < bits.len() && bits.next_bit(i) == Some(i))
    }

    fn qp_slot(&mut self, hca: usize, qpn: u32) -> Option<(&mut BitmapVec, usize)> {
        let slot = qpn.checked_sub(QPN_BASE)? as usize;
        let bits = self.qps.get_mut(hca)?;
        (slot < bits.len()).then_some((bits, slot))
    }

    /// Traps QP `qpn` of HCA `hca` (a QP of rdma-core's provider).
    pub(crate) fn add_qp(&mut self, hca: usize, qpn: u32) -> Result {
        let (bits, slot) = self.qp_slot(hca, qpn).ok_or(EINVAL)?;
        bits.set_bit(slot);
        Ok(())
    }

    /// Stops reading QP `qpn`'s record (it is being destroyed).
    pub(crate) fn remove_qp(&mut self, hca: usize, qpn: u32) {
        if let Some((bits, slot)) = self.qp_slot(hca, qpn) {
            bits.clear_bit(slot);
        }
    }

    /// Traps CQ `cqn` of HCA `hca`, whose ARM word its creator has set to
    /// [`CQ_ARM_RECORD_UNARMED`].
    pub(crate) fn add_cq(&mut self, hca: usize, cqn: u32) -> Result {
        let i = cqn as usize;
        let (Some(bits), Some(words)) = (self.cqs.get_mut(hca), self.arm_words.get_mut(hca)) else {
            return Err(EINVAL);
        };
        let word = words.get_mut(i).ok_or(EINVAL)?;
        *word = CQ_ARM_RECORD_UNARMED;
        bits.set_bit(i);
        Ok(())
    }

    /// Stops reading CQ `cqn`'s record (it is being destroyed).
    pub(crate) fn remove_cq(&mut self, hca: usize, cqn: u32) {
        if let Some(bits) = self.cqs.get_mut(hca) {
            if (cqn as usize) < bits.len() {
                bits.clear_bit(cqn as usize);
            }
        }
    }
}

/// Where a scan of the trapped records goes on
/// ([`Locked::trap_scan_some`]): HCA, its CQs (after its QPs), and the
/// first QP slot or CQN not read yet.
#[derive(Default)]
struct ScanCursor {
    hca: usize,
    cqs: bool,
    next: usize,
}

/// Trapped records a pass reads under one hold of the fabric lock: at
/// 1,000 QPs a whole pass would keep interrupts off for milliseconds
/// under emulation.
const SCAN_CHUNK: usize = 64;

impl Locked {
    /// The model, a platform for it, and the trap set (as
    /// [`Locked::split_watch`] for the watcher).
    fn split_trap(
        &mut self,
    ) -> (
        &mut super::SoftFabric,
        super::dma::SoftPlatform<'_>,
        &mut TrapSet,
    ) {
        (
            &mut self.fabric,
            super::dma::SoftPlatform::new(
                &mut self.dma,
                self.irqs_per_hca,
                &self.perf,
                self.direct.as_mut(),
            ),
            &mut self.trap,
        )
    }

    /// Reads every trapped record and hands the model what is new.
    /// Returns whether anything was.
    pub(super) fn trap_scan(&mut self) -> bool {
        self.trap_scan_some(&mut ScanCursor::default(), usize::MAX)
            .0
    }

    /// Reads at most `max` trapped records from `at` on (send records of
    /// the QPs, then ARM words of the CQs, HCA by HCA) and hands the model
    /// what is new, moving `at` past them. Returns whether anything was
    /// new, and whether the scan reached the end.
    fn trap_scan_some(&mut self, at: &mut ScanCursor, max: usize) -> (bool, bool) {
        let (fabric, mut p, trap) = self.split_trap();
        let mut doorbells = 0u64;
        let mut arms = 0u64;
        let mut read = 0usize;
        let done = 'scan: loop {
            let h = at.hca;
            if h >= trap.qps.len() {
                break 'scan true;
            }
            if let Some(m) = u16::try_from(h).ok().and_then(|h| fabric.hca(h)) {
                if !at.cqs {
                    if let Some(bits) = trap.qps.get_mut(h) {
                        let mut next = bits.next_bit(at.next);
                        while let Some(slot) = next {
                            if read == max {
                                at.next = slot;
                                break 'scan false;
                            }
                            read += 1;
                            next = bits.next_bit(slot + 1);
                            let Ok(s) = u32::try_from(slot) else {
                                continue;
                            };
                            match m.send_doorbell_record(&mut p, QPN_BASE + s) {
                                Ok(true) => doorbells += 1,
                                // Destroyed meanwhile (destroy clears the
                                // bit too).
                                Err(DoorbellError::NoSuchObject) => bits.clear_bit(slot),
                                // Nothing new, or refused and counted by
                                // the model.
                                _ => {}
                            }
                        }
                    }
                    at.cqs = true;
                    at.next = 0;
                }
                if let (Some(bits), Some(words)) = (trap.cqs.get_mut(h), trap.arm_words.get_mut(h))
                {
                    let mut next = bits.next_bit(at.next);
                    while let Some(i) = next {
                        if read == max {
                            at.next = i;
                            break 'scan false;
                        }
                        read += 1;
                        next = bits.next_bit(i + 1);
                        let (Ok(cqn), Some(last)) = (u32::try_from(i), words.get_mut(i)) else {
                            continue;
                        };
                        match m.cq_arm_record(&mut p, cqn, last) {
                            Ok(true) => arms += 1,
                            Err(DoorbellError::NoSuchObject) => bits.clear_bit(i),
                            _ => {}
                        }
                    }
                }
            }
            *at = ScanCursor {
                hca: h + 1,
                cqs: false,
                next: 0,
            };
        };
        trap.doorbells += doorbells;
        trap.arms += arms;
        (doorbells + arms != 0, done)
    }

    /// Reads the one record that the doorbell `bytes`, stored at `offset`
    /// of a UAR page of HCA `h`, names: at [`UAR_CQ_DOORBELL_OFFSET`] the
    /// ARM word of the CQ, elsewhere the send record of the QP whose
    /// control segment the bytes begin. Returns false, having read
    /// nothing, if the doorbell names no trapped object of `h` (the caller
    /// then reads every record): the bytes only choose which record to
    /// read, and a record holds only what its owner wrote.
    pub(super) fn trap_one(&mut self, h: usize, offset: u32, bytes: &[u8; 8]) -> bool {
        let (fabric, mut p, trap) = self.split_trap();
        let Some(m) = u16::try_from(h).ok().and_then(|i| fabric.hca(i)) else {
            return false;
        };
        if offset as usize % UAR_PAGE_SIZE == UAR_CQ_DOORBELL_OFFSET {
            let Ok(db) = UarCqDoorbell::decode(bytes) else {
                return false;
            };
            if !trap.has_cq(h, db.cqn) {
                return false;
            }
            let Some(last) = trap
                .arm_words
                .get_mut(h)
                .and_then(|w| w.get_mut(db.cqn as usize))
            else {
                return false;
            };
            match m.cq_arm_record(&mut p, db.cqn, last) {
                Ok(true) => trap.arms += 1,
                Err(DoorbellError::NoSuchObject) => trap.remove_cq(h, db.cqn),
                _ => {}
            }
        } else {
            let qpn = SendDoorbellWord::decode(bytes).qpn;
            if !trap.has_qp(h, qpn) {
                return false;
            }
            match m.send_doorbell_record(&mut p, qpn) {
                Ok(true) => trap.doorbells += 1,
                Err(DoorbellError::NoSuchObject) => trap.remove_qp(h, qpn),
                _ => {}
            }
        }
        true
    }
}

impl Locked {
    /// Whether nothing reached instance `h` as a responder (the model's
    /// `Stats::requests`) since the last call for it; records the count.
    fn trap_quiet(&mut self, h: usize) -> bool {
        let (fabric, _, trap) = self.split_trap();
        let Some(n) = u16::try_from(h)
            .ok()
            .and_then(|i| fabric.hca(i))
            .map(|m| m.stats().requests)
        else {
            return false;
        };
        let Some(last) = trap.requests.get_mut(h) else {
            return false;
        };
        let quiet = *last == n;
        *last = n;
        quiet
    }
}

/// How a poller run in stream mode ended.
enum StreamEnd {
    /// The CPU was wanted before the pages were mapped: nothing to undo.
    NotStarted,
    /// Idle, the CPU wanted, or the module going away: unmap now.
    Stopped,
    /// Still streaming after [`STREAM_MAX_NS`]: queued again on this CPU,
    /// the pages still mapped.
    Again,
}

impl SoftHca {
    /// The fault handler completed a doorbell store of `size` bytes,
    /// `value` (stored little-endian), at `offset` of a UAR page of HCA
    /// `hca` (process context, the faulting process; `hca/store.rs`): reads
    /// the record it names (every record if it names none, or if it is not
    /// a whole 8-byte doorbell) and runs the engine. The page stays
    /// unmapped, so no poller is needed, unless the store is part of a
    /// stream ([`SoftHca::note_store`]).
    pub(crate) fn uar_store(self: &Arc<Self>, hca: usize, offset: u32, value: u64, size: u32) {
        let entry = self.perf.now();
        let send = offset as usize % UAR_PAGE_SIZE != UAR_CQ_DOORBELL_OFFSET;
        let mut quiet = false;
        self.take_doorbells(|st| {
            st.trap.stores += 1;
            if size != 8 || !st.trap_one(hca, offset, &value.to_le_bytes()) {
                st.trap_scan();
            }
            // Before this fault's engine run: what arrived since the last
            // send doorbell, not what this one sends.
            quiet = send && st.trap_quiet(hca);
        });
        if send {
            self.note_store(entry, quiet);
        }
    }

    /// A send doorbell store was completed in a fault that began at
    /// `entry`; `quiet` if nothing reached its HCA as a responder since
    /// the send doorbell store before it. One that began within
    /// [`STREAM_NS`] (or three times its own duration) of the end of the
    /// one before, with nothing received
    /// in between, is part of a one-way stream (a ping-pong receives the
    /// peer's reply between its doorbells) and starts stream mode: the
    /// poller, on another CPU, maps the trapped pages so that the stores
    /// that follow no longer fault, and reads the records itself while
    /// that CPU has nothing else to run.
    fn note_store(self: &Arc<Self>, entry: u64, quiet: bool) {
        let end = self.perf.now();
        let prev = self.trap_last_store.swap(end, Ordering::Relaxed);
        // Or within three times this fault's own duration: on a debug
        // kernel the way into and out of a fault costs more than 20 µs.
        let window = STREAM_NS.max(end.saturating_sub(entry).saturating_mul(3));
        if self.elision
            && quiet
            && entry.saturating_sub(prev) < window
            && end >= self.trap_backoff.load(Ordering::Relaxed)
            && !self.trap_stream.swap(true, Ordering::AcqRel)
        {
            self.queue_trap_poller(false);
        }
    }

    /// A store to a trapped UAR page faulted and the page was mapped
    /// (process context): reads every record, runs the engine, and starts
    /// the poller, since later stores to the page no longer fault.
    pub(crate) fn uar_fault(self: &Arc<Self>) {
        self.trap_mapped.store(true, Ordering::Release);
        self.take_doorbells(|st| {
            st.trap.faults += 1;
            st.trap_scan();
        });
        self.queue_trap_poller(false);
    }

    /// The work of a fault on a trapped page: `read` takes the doorbells
    /// from the records under the fabric lock, then the engine runs there
    /// for one budget (the engine work goes on if more is left). Timed as
    /// `trap_fault` in `rmlx5/perf`.
    fn take_doorbells(self: &Arc<Self>, read: impl FnOnce(&mut Locked)) {
        let start = self.perf.now();
        // The fault handler's process context: the interrupts the run
        // raises are delivered here, after the unlock.
        let more = self.locked_direct(|st| {
            read(st);
            self.engine_locked(st)
        });
        if more {
            self.kick_engine();
        }
        self.perf
            .trap_fault
            .add(self.perf.now().saturating_sub(start));
    }

    /// Queues the poller on `system_long_wq`, of this CPU if `here`, else
    /// of another (every queueing goes to that one workqueue, see
    /// `work::enqueue_long`; a no-op if it is queued, and a running poller
    /// runs once more). Returns whether this call queued it.
    /// Under the fabric lock: [`SoftHca::shutdown`] sets its flag under it
    /// before it flushes the work, so a poller queued after the check
    /// below is queued before that flush, which then waits for it too.
    fn queue_trap_poller(self: &Arc<Self>, here: bool) -> bool {
        let _st = self.state.lock();
        if self.shutting_down.load(Ordering::Acquire) {
            return false;
        }
        self.perf.trap_queued.mark(self.perf.now());
        crate::work::enqueue_long::<Arc<Self>, 4>(self.clone(), here).is_ok()
    }

    /// One pass: the records, [`SCAN_CHUNK`] under each hold of the lock,
    /// then one engine budget. Returns whether anything happened.
    fn trap_pass(&self) -> bool {
        let mut at = ScanCursor::default();
        let mut found = false;
        loop {
            let mut st = self.state.lock();
            let (new, done) = st.trap_scan_some(&mut at, SCAN_CHUNK);
            found |= new;
            if done {
                return self.engine_locked(&mut st) || found;
            }
        }
    }

    /// A poller run in stream mode, started at `start`: if no other task
    /// wants this CPU, maps every trapped UAR page and reads the records,
    /// with preemption off, until nothing new came for [`STREAM_IDLE_NS`],
    /// another task wants the CPU (then no stream is started for
    /// [`BACKOFF_NS`]), or [`STREAM_MAX_NS`] passed. A run the one before
    /// queued to go on with the stream finds the pages mapped already.
    fn trap_stream_run(self: &Arc<Self>, start: u64) -> StreamEnd {
        let perf = &self.perf;
        // The run before queued this one with the pages still mapped:
        // they need no second mapping (a process that mapped its page
        // since faults, and its next store brings a run that maps it).
        let again = self.trap_again.swap(false, Ordering::AcqRel)
            && self.trap_mapped.load(Ordering::Acquire);
        if !cpu_is_ours() {
            self.trap_backoff
                .store(start.saturating_add(BACKOFF_NS), Ordering::Relaxed);
            self.state.lock().trap.stream_busy += 1;
            // A continuation stops the stream where it is: unmap now.
            return if again {
                StreamEnd::Stopped
            } else {
                StreamEnd::NotStarted
            };
        }
        if !again {
            // Set before the first page goes in: whatever ends this run
            // unmaps them.
            self.trap_mapped.store(true, Ordering::Release);
            let pages = self.trap_map_pages();
            perf.trap_map.add(perf.now().saturating_sub(start));
            let mut st = self.state.lock();
            st.trap.streams += 1;
            st.trap.stream_pages += pages;
        }
        // Preemption is off from here until the run ends: a process whose
        // stores no longer fault never waits for a poller scheduled out.
        let _run = self.trap_run.lock();
        let mut last = perf.now();
        loop {
            let mut busy = self.trap_pass();
            // The records are read once per pass; the engine goes on with
            // what they gave it for a few budgets (at 1,000 QPs a pass
            // reads 1,000 records).
            let mut budgets = 1;
            while busy && budgets < STREAM_BUDGETS && self.engine_locked(&mut self.state.lock()) {
                budgets += 1;
            }
            busy |= budgets > 1;
            let now = perf.now();
            if busy {
                last = now;
            }
            if self.shutting_down.load(Ordering::Acquire) {
                return StreamEnd::Stopped;
            }
            if !cpu_is_ours() {
                self.trap_backoff
                    .store(now.saturating_add(BACKOFF_NS), Ordering::Relaxed);
                self.state.lock().trap.stream_busy += 1;
                return StreamEnd::Stopped;
            }
            if now.saturating_sub(last) > STREAM_IDLE_NS {
                return StreamEnd::Stopped;
            }
            if now.saturating_sub(start) > STREAM_MAX_NS {
                // Still streaming: go on in a new run on this CPU, after
                // whatever else was queued here, the pages still mapped.
                // Queued already (by a fault) is as good.
                self.trap_again.store(true, Ordering::Release);
                self.trap_stream.store(true, Ordering::Release);
                let _ = self.queue_trap_poller(true);
                if self.shutting_down.load(Ordering::Acquire) {
                    return StreamEnd::Stopped;
                }
                return StreamEnd::Again;
            }
            if !busy {
                while perf.now().saturating_sub(now) < POLL_GAP_NS {
                    core::hint::spin_loop();
                }
            }
        }
    }

    /// Maps every trapped UAR page of every HCA into the processes that
    /// mapped it (process context, no lock held: it sleeps). Returns how
    /// many pages it mapped.
    fn trap_map_pages(&self) -> u64 {
        let mut pages = 0u64;
        #[cfg(CONFIG_INFINIBAND_USER_ACCESS)]
        for h in 0..self.count() {
            if let Ok(h) = c_int::try_from(h) {
                // SAFETY: process context, no lock held (the caller's
                // promise); the function copes with HCAs that have no
                // trapped mappings.
                let n = unsafe { rmlx5_ibu_map_uars(h) };
                pages += u64::try_from(n).unwrap_or(0);
            }
        }
        pages
    }

    /// The end of a poller run that began at `start`: unmaps the pages of
    /// every HCA, so the next store faults, then reads what was stored
    /// before the unmap.
    fn trap_finish(self: &Arc<Self>, start: u64) {
        let perf = &self.perf;
        let zap = perf.now();
        // Before the unmap: a fault that maps a page after it sets it again
        // (and queues the poller).
        self.trap_mapped.store(false, Ordering::Release);
        #[cfg(CONFIG_INFINIBAND_USER_ACCESS)]
        for h in 0..self.count() {
            if let Ok(h) = c_int::try_from(h) {
                // SAFETY: process context, no lock held; the function
                // copes with HCAs that have no trapped mappings.
                unsafe { rmlx5_ibu_zap_uars(h) };
            }
        }
        perf.trap_zap.add(perf.now().saturating_sub(zap));
        self.state.lock().trap.zaps += 1;
        // From here every store faults, and a page a fault maps again
        // brings the poller back (`uar_fault`); what the last reading gave
        // the engine and it could not finish in one budget goes on in the
        // engine work, not in another poller run.
        if self.trap_pass() {
            self.kick_engine();
        }
        perf.trap_run.add(perf.now().saturating_sub(start));
    }
}

impl WorkItem<4> for SoftHca {
    type Pointer = Arc<SoftHca>;

    fn run(this: Arc<SoftHca>) {
        let perf = &this.perf;
        let start = perf.now();
        if let Some(d) = perf.trap_queued.take(start) {
            perf.trap_delay.add(d);
        }
        this.state.lock().trap.runs += 1;
        if this.trap_stream.swap(false, Ordering::AcqRel) {
            match this.trap_stream_run(start) {
                StreamEnd::Again => {
                    perf.trap_run.add(perf.now().saturating_sub(start));
                    return;
                }
                StreamEnd::Stopped => {
                    this.trap_finish(start);
                    return;
                }
                // Nothing mapped by this run; a page a fault mapped still
                // needs the polling below.
                StreamEnd::NotStarted => {
                    if !this.trap_mapped.load(Ordering::Acquire) {
                        return;
                    }
                }
            }
        }
        let mut last = start;
        loop {
            let now = perf.now();
            let busy = this.trap_pass();
            if busy {
                last = now;
            }
            if this.shutting_down.load(Ordering::Acquire) {
                return;
            }
            if now.saturating_sub(last) > IDLE_NS {
                break;
            }
            if now.saturating_sub(start) > MAX_NS {
                // Still busy: continue in a new run, pages still mapped.
                perf.trap_run.add(perf.now().saturating_sub(start));
                this.queue_trap_poller(false);
                return;
            }
            if now.saturating_sub(last) < SPIN_NS {
                // SAFETY: no lock is held; process context.
                unsafe { rmlx5_shim_cond_resched() };
            } else {
                fsleep(Delta::from_micros(POLL_GAP_US));
            }
        }
        // Idle: unmap, then read what was stored before the unmap.
        this.trap_finish(start);
    }
}
