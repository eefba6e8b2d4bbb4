// SPDX-License-Identifier: GPL-2.0

//! The doorbell watcher: kick elision for streaming QPs.
//!
//! A ConnectX sees a doorbell the moment the provider stores it; the
//! software HCA sees it only when the provider makes its `KICK` system
//! call, which under emulation costs several microseconds a message, more
//! than the engine's execution of the WQE. So when a QP kicks again within
//! [`STREAM_NS`] of its previous kick (a stream of posts, not a ping-pong),
//! the module starts the watcher, on the system workqueue of another CPU
//! than the kicking process's (which goes on posting where it is). While
//! it runs it behaves like the device: it hands the model the new send
//! doorbell records of the watched QPs (each user QP that has kicked once)
//! that rang (`Hca::send_doorbell_record`), then runs the engine, over and
//! over, until nothing new came for [`IDLE_NS`] or it ran [`MAX_NS`]; in
//! the second case it queues itself again on its own CPU, so a long stream
//! is watched from one CPU throughout, with a pause between runs where
//! anything else queued there gets its turn.
//!
//! While it runs, the watch word in the UAR page of every watched QP's
//! process is set ([`crate::rmlx5_abi::uapi::UAR_WATCH_OFFSET`]), and a
//! provider may leave out the kick of a QP that has kicked once. Which QPs
//! rang it learns from their processes: a provider that skips its kick has
//! set its QP's bit in the UAR page's doorbell bits
//! ([`crate::rmlx5_abi::uapi::UAR_DOORBELL_BITS_OFFSET`]) with an atomic
//! OR, and the watcher takes each nonzero word with an atomic swap, so a
//! pass costs the QPs that rang, not all of them (10,000 QP pairs are
//! 20,000 records). There are 4,096 bits and up to [`super::MAX_QPS`]
//! QPs, so a bit stands for every watched QP whose QPN has its remainder
//! (four at most).
//!
//! The handshake is Dekker's. The provider stores the doorbell record,
//! fences, loads the word, and if it is set, sets its bit (an atomic
//! read-modify-write, a full barrier) and loads the word again: it skips
//! the kick only if the word is still set. The watcher clears the word,
//! fences, and takes the bits once more before it stops. Either the
//! watcher sees the bit or the provider sees the cleared word and kicks,
//! so a doorbell is never left unexecuted; if both happen, the late kick
//! finds the record already taken and succeeds without effect. A bit left
//! over from a kick that was made anyway is read by the next run, which
//! finds nothing new in that record.
//!
//! The watcher holds [`SoftHca::watch_run`] (a spin lock, so preemption is
//! off) from setting the word to clearing it: a provider never waits for a
//! watcher that was scheduled out. It polls only while no other task is
//! runnable on its CPU (`single_task_running`, the rule of KVM's halt
//! polling), so a busy process never waits for it either: on an
//! oversubscribed machine it stops at once and the kicks go on as before.
//! Each engine run inside still takes the fabric lock for one budget only.
//! Only kicks that announce a single small WQE ([`STREAM_MAX_WQEBBS`])
//! start it: a post list already shares one kick among its WQEs.

use core::sync::atomic::Ordering;
use kernel::{
    bitmap::BitmapVec,
    prelude::*,
    sync::{
        barrier::{
            smp_mb,
            Full, //
        },
        Arc, //
    },
    workqueue::{
        self,
        WorkItem, //
    },
};

use super::{
    Locked,
    SoftHca, //
};
use crate::hca_model::{
    mem::DmaMemory,
    qp::QPN_BASE, //
};
use crate::rmlx5_abi::uapi::{
    UAR_DOORBELL_BITS_OFFSET,
    UAR_WATCH_OFFSET, //
};

extern "C" {
    /// `linux/sched/stat.h`: whether the current task is the only one
    /// runnable on this CPU (KVM's halt polling stops on it too).
    fn single_task_running() -> bool;
}

/// Whether no other task waits for this CPU.
pub(super) fn cpu_is_ours() -> bool {
    // SAFETY: `single_task_running` has no preconditions; it reads the
    // current CPU's run-queue length (we run with preemption off, so the
    // CPU does not change under it).
    unsafe { single_task_running() }
}

/// A QP's kicks closer together than this, or than three times the
/// kick's own duration, start the watcher.
pub(crate) const STREAM_NS: u64 = 20_000;
/// Only kicks of at most this many new WQEBBs start it: a post list
/// already shares one kick among its WQEs.
pub(crate) const STREAM_MAX_WQEBBS: u16 = 4;
/// The watcher stops after this long without a new doorbell or engine
/// work. Under emulation a posting vCPU is often held up for tens of
/// microseconds (10 µs stopped a 1-QP stream's watcher 400 times in
/// 65,536 WRITEs, and each restart takes two kicks and a queueing delay).
pub(crate) const IDLE_NS: u64 = 50_000;
/// After a pass that found nothing, the watcher waits this long (without
/// the fabric lock) before the next: kicks that still come find the lock
/// free.
pub(crate) const POLL_GAP_NS: u64 = 2_000;
/// The longest one watcher run keeps its word set (it is queued again if
/// work was still coming).
pub(crate) const MAX_NS: u64 = 500_000;
/// After a run that stopped because another task wanted its CPU, the
/// watcher is not started again for this long (no CPU to spare).
pub(crate) const BACKOFF_NS: u64 = 2_000_000;
/// Doorbell bits in a UAR page (`UAR_DOORBELL_BITS_OFFSET`).
const DOORBELL_BITS: usize = 4096;
/// Distinct UAR pages (processes' contexts) whose word the watcher sets.
const MAX_UARS: usize = 64;

/// The QPs the watcher reads and the UAR pages it signals, under the
/// fabric lock.
pub(crate) struct WatchSet {
    /// Per HCA, the user QPs (by QPN - `QPN_BASE`) that have kicked once.
    qps: KVec<BitmapVec>,
    /// Per HCA, the QPs whose record the watcher took since their last
    /// kick (so a late kick is told from a kick with nothing posted).
    taken: KVec<BitmapVec>,
    /// DMA addresses of their UAR pages (capacity reserved: adding never
    /// allocates). A closing context removes its page (`remove_uar`)
    /// before the page leaves the DMA registry.
    uars: KVec<(u64, usize)>,
    /// Doorbells taken from records (debugfs).
    pub(crate) doorbells: u64,
    /// Watcher runs (debugfs).
    pub(crate) runs: u64,
}

impl WatchSet {
    pub(super) fn new(nr_hcas: usize, max_qps: usize) -> Result<Self> {
        Ok(Self {
            qps: super::per_hca_bitmaps(nr_hcas, max_qps)?,
            taken: super::per_hca_bitmaps(nr_hcas, max_qps)?,
            uars: KVec::with_capacity(MAX_UARS, GFP_KERNEL)?,
            doorbells: 0,
            runs: 0,
        })
    }

    /// Watches user QP `qpn` of HCA `hca`, whose process rings on the UAR
    /// page at `uar_addr`. Returns false (and watches nothing) if the
    /// UAR page cannot be added: then the QP must keep kicking, which it
    /// does as long as the watcher never sets a word it reads.
    pub(crate) fn add(&mut self, hca: usize, qpn: u32, uar_addr: u64) -> bool {
        let Some(slot) = qpn.checked_sub(QPN_BASE).map(|s| s as usize) else {
            return false;
        };
        let Some(bits) = self.qps.get_mut(hca) else {
            return false;
        };
        if slot >= bits.len() {
            return false;
        }
        if !self.uars.iter().any(|&(u, _)| u == uar_addr) {
            if self.uars.len() >= MAX_UARS {
                return false;
            }
            // Within the reserved capacity: no allocation.
            if self.uars.push((uar_addr, hca), GFP_ATOMIC).is_err() {
                return false;
            }
        }
        bits.set_bit(slot);
        true
    }

    /// Stops watching QP `qpn` of HCA `hca` (it is being destroyed).
    pub(crate) fn remove(&mut self, hca: usize, qpn: u32) {
        let _ = self.take_taken(hca, qpn);
        if let (Some(bits), Some(slot)) = (
            self.qps.get_mut(hca),
            qpn.checked_sub(QPN_BASE).map(|s| s as usize),
        ) {
            if slot < bits.len() {
                bits.clear_bit(slot);
            }
        }
    }

    /// Forgets the UAR page at `uar_addr` (its context is closing, and the
    /// address may come back as another buffer's, which the watch word
    /// must never be written into). Every QP of the context is destroyed
    /// already.
    pub(crate) fn remove_uar(&mut self, uar_addr: u64) {
        if let Some(i) = self.uars.iter().position(|&(u, _)| u == uar_addr) {
            let _ = self.uars.remove(i);
        }
    }

    /// Whether the watcher took a record of QP `qpn` since its last kick;
    /// clears the mark (this is that kick).
    pub(crate) fn take_taken(&mut self, hca: usize, qpn: u32) -> bool {
        let (Some(bits), Some(slot)) = (
            self.taken.get_mut(hca),
            qpn.checked_sub(QPN_BASE).map(|s| s as usize),
        ) else {
            return false;
        };
        if slot >= bits.len() || bits.next_bit(slot) != Some(slot) {
            return false;
        }
        bits.clear_bit(slot);
        true
    }
}

impl Locked {
    /// The model, a platform for it, and the watch set (`Locked::split`
    /// without the last).
    pub(super) fn split_watch(
        &mut self,
    ) -> (
        &mut super::SoftFabric,
        (super::dma::SoftPlatform<'_>, &mut WatchSet),
    ) {
        (
            &mut self.fabric,
            (
                super::dma::SoftPlatform::new(
                    &mut self.dma,
                    self.irqs_per_hca,
                    &self.perf,
                    self.direct.as_mut(),
                ),
                &mut self.watch,
            ),
        )
    }

    /// Writes the watch word of every watched UAR page.
    fn set_watch_word(&mut self, on: bool) {
        let word = u32::from(on).to_ne_bytes();
        let (_, (mut p, watch)) = self.split_watch();
        let mut i = 0;
        while let Some(&(uar, _)) = watch.uars.get(i) {
            if p.write(uar + u64::from(UAR_WATCH_OFFSET), &word).is_err() {
                // Not registered (cannot happen: contexts remove their
                // page first); never write there again.
                let _ = watch.uars.remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// Hands the model the new doorbell records of the watched QPs whose
    /// doorbell bits their processes set (taking the bits). Returns
    /// whether any was new.
    fn scan_bits(&mut self) -> bool {
        let mut found = 0u64;
        let (fabric, (mut p, watch)) = self.split_watch();
        for &(uar, hca) in watch.uars.iter() {
            let (Some(bits), Some(taken)) = (watch.qps.get(hca), watch.taken.get_mut(hca)) else {
                continue;
            };
            let Some(m) = u16::try_from(hca).ok().and_then(|h| fabric.hca(h)) else {
                continue;
            };
            // The words first (one check of the range, zero words left
            // alone), then the records of the QPs they name.
            let mut words = [0u64; DOORBELL_BITS / 64];
            let at = uar + u64::from(UAR_DOORBELL_BITS_OFFSET);
            if p.take_u64s(at, words.len(), |w, v| words[w] = v).is_err() {
                continue;
            }
            for (w, &word) in words.iter().enumerate() {
                let mut word = word;
                while word != 0 {
                    let b = word.trailing_zeros() as usize;
                    word &= word - 1;
                    // Bit `qpn % 4096`: every watched QP of the HCA's range
                    // with that remainder (one per 4,096 slots of the
                    // table) may have rung.
                    let n = w * 64 + b;
                    let first =
                        (n + DOORBELL_BITS - QPN_BASE as usize % DOORBELL_BITS) % DOORBELL_BITS;
                    for slot in (first..bits.len()).step_by(DOORBELL_BITS) {
                        if bits.next_bit(slot) != Some(slot) {
                            continue;
                        }
                        let Ok(s) = u32::try_from(slot) else {
                            continue;
                        };
                        if let Ok(true) = m.send_doorbell_record(&mut p, QPN_BASE + s) {
                            found += 1;
                            taken.set_bit(slot);
                        }
                    }
                }
            }
        }
        watch.doorbells += found;
        found != 0
    }
}

impl SoftHca {
    /// Starts the watcher unless it is queued or running, or backing off
    /// (any context), on another CPU than this one: the process that
    /// kicked goes on posting here, and a watcher sharing its CPU would
    /// stop at once.
    pub(crate) fn start_watch(self: &Arc<Self>) {
        let _ = self.queue_watch(false);
    }

    /// As [`SoftHca::start_watch`], on this CPU if `here` (a watcher going
    /// on from its own CPU, which is not the poster's), else on another.
    /// Returns whether this call queued it.
    fn queue_watch(self: &Arc<Self>, here: bool) -> bool {
        if !self.elision
            || self.shutting_down.load(Ordering::Acquire)
            || self.perf.now() < self.watch_backoff.load(Ordering::Relaxed)
            || self.watching.swap(true, Ordering::AcqRel)
        {
            return false;
        }
        self.perf.watch_queued.mark(self.perf.now());
        let w = self.clone();
        let queued = if here {
            // A per-CPU workqueue queues on the caller's CPU; this one is
            // for work items that run long, as the watcher does.
            workqueue::system_long().enqueue::<Arc<Self>, 3>(w).is_ok()
        } else {
            crate::work::enqueue_elsewhere::<Arc<Self>, 3>(w).is_ok()
        };
        if !queued {
            let _ = self.perf.watch_queued.take(0);
            self.watching.store(false, Ordering::Release);
        }
        queued
    }
}

impl WorkItem<3> for SoftHca {
    type Pointer = Arc<SoftHca>;

    fn run(this: Arc<SoftHca>) {
        let perf = &this.perf;
        let start = perf.now();
        if let Some(ns) = perf.watch_queued.take(start) {
            perf.watch_delay.add(ns);
        }
        if this.shutting_down.load(Ordering::Acquire) {
            // Queued before the module began to shut down.
            this.watching.store(false, Ordering::Release);
            return;
        }
        let mut last = start;
        // When a pass last took a doorbell record: a run that reaches its
        // longest goes on only for a stream of user doorbells, not for
        // other engine work (kernel ULPs' QPs, long messages).
        let mut last_found = start;
        // Whether the run stopped at its longest while doorbells still
        // came.
        let mut streaming = false;
        let more = {
            // Preemption is off from here until the word is cleared.
            let _run = this.watch_run.lock();
            {
                let mut st = this.state.lock();
                st.watch.runs += 1;
                st.set_watch_word(true);
            }
            loop {
                let (busy, found) = {
                    let mut st = this.state.lock();
                    // Only the records of QPs whose processes set their
                    // doorbell bits: a provider that skips a kick has set
                    // its bit (see the handshake in the module comment).
                    let found = st.scan_bits();
                    (this.engine_locked(&mut st) || found, found)
                };
                let now = perf.now();
                if busy {
                    last = now;
                }
                if found {
                    last_found = now;
                }
                // Poll only while no task wants this CPU: a busy process
                // (a receiver reposting, a poller) must never wait for the
                // watcher; it runs again from the next kick.
                let ran = now.saturating_sub(start);
                if !cpu_is_ours() {
                    this.watch_backoff
                        .store(now.saturating_add(BACKOFF_NS), Ordering::Relaxed);
                    perf.watch_busy.add(ran);
                    break;
                }
                if now.saturating_sub(last) > IDLE_NS {
                    perf.watch_idle.add(ran);
                    break;
                }
                if this.shutting_down.load(Ordering::Acquire) || ran > MAX_NS {
                    perf.watch_max.add(ran);
                    streaming = now.saturating_sub(last_found) <= IDLE_NS;
                    break;
                }
                if !busy {
                    while perf.now().saturating_sub(now) < POLL_GAP_NS {
                        core::hint::spin_loop();
                    }
                }
            }
            let mut st = this.state.lock();
            st.set_watch_word(false);
            // Dekker: the cleared word before the last reading of the
            // bits (the provider sets its bit, a full barrier, before its
            // last reading of the word).
            smp_mb(Full);
            let found = st.scan_bits();
            this.engine_locked(&mut st) || found
        };
        this.watching.store(false, Ordering::Release);
        // A stream still running goes on in a new run, queued behind
        // whatever else waits for the workqueue (the word was cleared in
        // between: kicks fill the gap). It is not left to the kicks to
        // start again: that takes two close kicks, each executing its WQE
        // in the posting process, and the queueing delay after them.
        if streaming {
            // Under the fabric lock: `shutdown` sets its flag under it
            // before it flushes this work, so a run that finds the flag
            // clear here queues the next before that flush, which then
            // waits for it too.
            let _st = this.state.lock();
            if this.queue_watch(true) {
                return;
            }
        }
        if more {
            // Work remains or was still coming: continue it.
            this.kick_engine();
        }
    }
}
