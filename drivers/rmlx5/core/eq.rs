// SPDX-License-Identifier: GPL-2.0

//! Event queues and their hard-IRQ handler.
//!
//! Each EQ has its own Linux interrupt (the software HCA's irq domain,
//! `hca/irq.rs`, or a PCI function's MSI-X vector). The handler consumes
//! EQEs by owner bit, with a DMA read barrier between the owner check and
//! the body, at most [`EQ_BUDGET`] per run; completion EQEs mark their CQ
//! pending for the BH dispatcher (once, however many EQEs name it), async
//! EQEs are queued for the ULP's event handler; then the backend writes
//! the consumer index to the EQ doorbell of its UAR page and re-arms the
//! EQ (`Backend::ring_eq`). If EQEs remain, the device raises the
//! interrupt again at once, so the budget never strands an event.

use core::{
    mem::ManuallyDrop,
    sync::atomic::{
        AtomicBool,
        AtomicU32,
        AtomicU64,
        Ordering, //
    },
};
use kernel::{
    irq::{
        Handler,
        IrqReturn, //
    },
    prelude::*,
    sync::{
        barrier::{
            dma_mb,
            Read, //
        },
        Arc,
    },
};

use super::{
    device::Device,
    events::{
        AsyncEvent,
        DirectCqs, //
    },
};
use crate::backend::Backend;
use crate::mem::DmaBuf;
use crate::mlx5_prm::{
    eqe::{
        Eqe,
        EqeData,
        EQE_SIZE,
        OWNER_OFFSET, //
    },
    opcode::EventType,
    ring,
};

/// EQEs consumed per handler run.
pub(crate) const EQ_BUDGET: u32 = 64;
/// log2 of the asynchronous EQ's size: 4,096 EQEs, as mlx5_core's.
pub(crate) const ASYNC_EQ_LOG_SIZE: u8 = 12;

/// log2 of a completion EQ's size on a device of `max_cqs` CQs. An armed
/// CQ puts one completion EQE on its EQ and no more until it is armed
/// again, so an EQ with room for one EQE per CQ of the device cannot
/// overrun, however many CQs pick its vector and fire together; a
/// ConnectX treats an overrun as fatal. (With 128 entries, as before, 129
/// armed CQs firing at once on one vector overran it.)
pub(crate) fn comp_eq_log_size(max_cqs: usize) -> Result<u8> {
    let n = max_cqs.max(64).checked_next_power_of_two().ok_or(EINVAL)?;
    let log = u8::try_from(n.trailing_zeros())?;
    // The device limit (`log_max_eq_sz`) is 22 on every ConnectX.
    if log > 22 {
        return Err(EINVAL);
    }
    Ok(log)
}

/// One event queue of a device: the core's side (ring, consumer index,
/// counters); the backend created it and owns its number.
///
/// # Invariants
///
/// `buf` is freed on drop only if `live` is clear: while the device may
/// still write the ring (its destroy was not done or failed), the memory
/// is kept for good.
pub(crate) struct Eq {
    /// Interrupt vector (0 = async EQ).
    pub(crate) vector: u16,
    /// EQ number in the device.
    pub(crate) eqn: u8,
    /// log2 of the number of EQEs.
    pub(crate) log_size: u8,
    /// The EQE ring.
    buf: ManuallyDrop<DmaBuf>,
    /// The device has the EQ (cleared by a successful destroy).
    live: AtomicBool,
    /// Consumer index (free-running); written only by the handler, which
    /// the IRQ core never runs concurrently with itself.
    pub(crate) ci: AtomicU32,
    /// EQEs consumed.
    pub(crate) eqes: AtomicU64,
    /// Handler runs.
    pub(crate) irqs: AtomicU64,
    /// Linux interrupt number, once registered.
    pub(crate) irq: AtomicU32,
}

impl Eq {
    /// A ring of `1 << log_size` EQEs from `be`, every owner byte 1 (the
    /// device owns them all).
    pub(crate) fn alloc_ring(be: &dyn Backend, log_size: u8) -> Result<DmaBuf> {
        let n = 1usize << log_size;
        let buf = be.alloc_queue(n * EQE_SIZE)?;
        buf.fill_strided(OWNER_OFFSET, EQE_SIZE, n, ring::EQE_INIT_OWNER)?;
        Ok(buf)
    }

    /// The core's side of EQ `eqn`, which the backend created on `buf`
    /// for interrupt vector `vector`.
    pub(crate) fn new(vector: u16, eqn: u8, log_size: u8, buf: DmaBuf) -> Self {
        Self {
            vector,
            eqn,
            log_size,
            buf: ManuallyDrop::new(buf),
            live: AtomicBool::new(true),
            ci: AtomicU32::new(0),
            eqes: AtomicU64::new(0),
            irqs: AtomicU64::new(0),
            irq: AtomicU32::new(0),
        }
    }

    /// Destroys the EQ in the device (once; its interrupt handler must be
    /// gone). On failure the ring is kept for good.
    pub(crate) fn destroy(&self, be: &dyn Backend) -> Result {
        if !self.live.load(Ordering::Acquire) {
            return Ok(());
        }
        be.destroy_eq(self.eqn, &self.buf)?;
        self.live.store(false, Ordering::Release);
        Ok(())
    }

    /// Reads the EQE at consumer index `ci` if software owns it.
    pub(crate) fn next_eqe(&self, ci: u32) -> Option<Eqe> {
        read_eqe(&self.buf, self.log_size, ci)
    }
}

impl Drop for Eq {
    fn drop(&mut self) {
        if self.live.load(Ordering::Acquire) {
            pr_err!(
                "EQ {} was not destroyed: keeping its ring for good\n",
                self.eqn
            );
            return;
        }
        // SAFETY: `buf` is dropped only here, and the device no longer
        // writes it (`live` is clear: its destroy succeeded).
        unsafe { ManuallyDrop::drop(&mut self.buf) };
    }
}

/// Reads the EQE at consumer index `ci` of the ring in `buf` (of
/// `1 << log_size` EQEs) if software owns it.
pub(crate) fn read_eqe(buf: &DmaBuf, log_size: u8, ci: u32) -> Option<Eqe> {
    let log = u32::from(log_size);
    let off = ring::ring_index(ci, log) as usize * EQE_SIZE;
    let owner = buf.read_u8(off + OWNER_OFFSET).ok()?;
    if !ring::eqe_valid(owner, ci, log) {
        return None;
    }
    // The owner byte is checked before the body is read: the model writes
    // the body first and the owner byte last.
    dma_mb(Read);
    let mut b = [0u8; EQE_SIZE];
    buf.read(off, &mut b).ok()?;
    Eqe::decode(&b).ok()
}

/// The interrupt handler of one EQ.
pub(crate) struct EqIrq {
    pub(crate) dev: Arc<Device>,
    pub(crate) vector: usize,
}

impl Handler for EqIrq {
    fn handle(&self) -> IrqReturn {
        match eq_interrupt(&self.dev, self.vector) {
            Ok(true) => IrqReturn::Handled,
            _ => IrqReturn::None,
        }
    }
}

/// Consumes the EQ's EQEs. Hard-IRQ context: no allocation, no sleep.
/// Returns whether any EQE was consumed.
pub(crate) fn eq_interrupt(dev: &Arc<Device>, vector: usize) -> Result<bool> {
    let perf = &dev.perf;
    let start = perf.now();
    if let Some(d) = perf.irq_raised.take(start) {
        perf.irq_delay.add(d);
    }
    let eq = dev.eqs.get(vector).ok_or(EINVAL)?;
    eq.irqs.fetch_add(1, Ordering::Relaxed);
    let mut ci = eq.ci.load(Ordering::Relaxed);
    let mut consumed = 0u32;
    let mut dispatch = false;
    let mut direct = DirectCqs::new();
    {
        // The EQEs are read by owner bit, as from a device: the backend's
        // lock is not needed for that, only for the doorbell below.
        let mut tables = dev.events.lock();
        while consumed < EQ_BUDGET {
            let Some(eqe) = eq.next_eqe(ci) else {
                break;
            };
            ci = ci.wrapping_add(1);
            consumed += 1;
            let element = match eqe.data {
                EqeData::Comp { cqn } => {
                    dispatch |= tables.queue_cq_irq(cqn, &mut direct);
                    continue;
                }
                EqeData::CqError { cqn, .. } => cqn,
                EqeData::QpSrq { qp_srq_n, .. } => qp_srq_n,
                // A port change names the port and what changed: the
                // element is `sub_type << 8 | port`.
                EqeData::Raw(d) if eqe.event_type == EventType::PortChange => {
                    let port = crate::mlx5_prm::eqe_async::PortChangeEqe::decode(&d).port;
                    u32::from(eqe.sub_type) << 8 | u32::from(port)
                }
                EqeData::Raw(_) => 0,
            };
            tables.queue_event(AsyncEvent {
                event_type: u8::from(eqe.event_type),
                element,
            });
            dispatch = true;
        }
    }
    // User CQs get their completion events here, with the table lock
    // released: a channel post wakes the reader without the BH hop.
    direct.deliver(perf);
    eq.ci.store(ci, Ordering::Relaxed);
    eq.eqes.fetch_add(u64::from(consumed), Ordering::Relaxed);
    // Consumer index and arm: the device interrupts again for the next
    // EQE, at once if EQEs remain.
    let r = dev.be.ring_eq(eq.eqn, ci);
    let end = perf.now();
    if dispatch {
        perf.bh_queued.mark(end);
        dev.kick_dispatch();
    }
    perf.eq_handler.add(end.saturating_sub(start));
    r.map(|()| consumed != 0)
}

#[kunit_tests(rmlx5_eq)]
mod tests {
    use super::*;
    use crate::mlx5_prm::opcode::EventType;

    /// Writes an EQE the way the model does: body, then owner byte.
    fn produce(buf: &DmaBuf, log: u8, pi: u32, cqn: u32) -> Result {
        let eqe = Eqe {
            event_type: EventType::Comp,
            sub_type: 0,
            data: EqeData::Comp { cqn },
            signature: 0,
            owner: ring::owner_bit(pi, u32::from(log)),
        };
        let mut b = [0u8; EQE_SIZE];
        eqe.encode(&mut b);
        let off = ring::ring_index(pi, u32::from(log)) as usize * EQE_SIZE;
        buf.write(off, &b[..OWNER_OFFSET])?;
        buf.write(off + OWNER_OFFSET, &b[OWNER_OFFSET..])
    }

    #[test]
    fn owner_and_ci_across_wraps() -> Result {
        let log = 3u8;
        let n = 1usize << log;
        let buf = DmaBuf::new(n * EQE_SIZE, GFP_KERNEL)?;
        buf.fill_strided(OWNER_OFFSET, EQE_SIZE, n, ring::EQE_INIT_OWNER)?;
        // A fresh ring holds nothing.
        assert!(read_eqe(&buf, log, 0).is_none());
        let mut ci = 0u32;
        // Ten passes, producer up to the full ring ahead of the consumer.
        for pi in 0..(10 * n as u32) {
            produce(&buf, log, pi, pi)?;
            if pi % 3 == 2 {
                while let Some(e) = read_eqe(&buf, log, ci) {
                    assert_eq!(e.data, EqeData::Comp { cqn: ci });
                    ci += 1;
                }
                assert_eq!(ci, pi + 1);
                // Entries of the previous pass are not read as new.
                assert!(read_eqe(&buf, log, ci).is_none());
            }
        }
        Ok(())
    }

    #[test]
    fn ci_wraps_at_24_bits() -> Result {
        let log = 2u8;
        let n = 1usize << log;
        let buf = DmaBuf::new(n * EQE_SIZE, GFP_KERNEL)?;
        // Producer and consumer near the 24-bit wrap of the doorbell CI.
        let start = ring::CI_MASK - 1;
        for k in 0..4u32 {
            produce(&buf, log, start.wrapping_add(k), k)?;
        }
        for k in 0..4u32 {
            let e = read_eqe(&buf, log, start.wrapping_add(k)).ok_or(EINVAL)?;
            assert_eq!(e.data, EqeData::Comp { cqn: k });
        }
        assert_eq!(ring::ci24(start.wrapping_add(2)), 0);
        Ok(())
    }
}
