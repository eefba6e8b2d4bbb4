// SPDX-License-Identifier: GPL-2.0

//! Event queues and their hard-IRQ handler.
//!
//! Each EQ has its own Linux interrupt (see `hca/irq.rs`). The handler
//! consumes EQEs by owner bit, with a DMA read barrier between the owner
//! check and the body, at most [`EQ_BUDGET`] per run; completion EQEs mark
//! their CQ pending for the BH dispatcher (once, however many EQEs name
//! it), async EQEs are queued for the ULP's event handler; then the
//! consumer index is written to the EQ doorbell on the UAR page and the EQ
//! is re-armed. If EQEs remain, the model raises the interrupt again at
//! once, so the budget never strands an event.

use core::sync::atomic::{
    AtomicU32,
    AtomicU64,
    Ordering, //
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

use super::events::AsyncEvent;
use crate::hca::{
    dma::{
        DmaBuf,
        DmaRegistry, //
    },
    KStorage, SoftHca,
};
use crate::hca_model::{
    eq::EqAttr,
    hca::Hca as ModelHca, //
};
use crate::mlx5_prm::{
    doorbell::{
        EqDoorbell,
        UAR_EQ_ARM_OFFSET, //
    },
    eqe::{
        Eqe,
        EqeData,
        EQE_SIZE,
        OWNER_OFFSET, //
    },
    ring,
};

/// EQEs consumed per handler run.
pub(crate) const EQ_BUDGET: u32 = 64;
/// log2 of the EQ size (EQEs).
pub(crate) const EQ_LOG_SIZE: u8 = 7;

/// One event queue of an HCA.
pub(crate) struct Eq {
    /// HCA index.
    pub(crate) hca: u16,
    /// Interrupt vector (0 = async EQ).
    pub(crate) vector: u16,
    /// EQ number in the model.
    pub(crate) eqn: u8,
    /// log2 of the number of EQEs.
    pub(crate) log_size: u8,
    /// The EQE ring.
    buf: DmaBuf,
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
    /// Allocates the ring (owner bytes 1), registers it and creates the EQ
    /// in the model. The EQ is not armed yet.
    pub(crate) fn new(
        hca: u16,
        vector: u16,
        uar: &DmaBuf,
        model: &mut ModelHca<KStorage>,
        dma: &mut DmaRegistry,
    ) -> Result<Self> {
        let n = 1usize << EQ_LOG_SIZE;
        let buf = DmaBuf::new(n * EQE_SIZE, GFP_KERNEL)?;
        buf.fill_strided(OWNER_OFFSET, EQE_SIZE, n, ring::EQE_INIT_OWNER)?;
        dma.add_buf(&buf)?;
        let attr = EqAttr {
            log_size: EQ_LOG_SIZE,
            buf_addr: buf.addr(),
            uar_addr: uar.addr(),
            vector,
            async_events: vector == 0,
        };
        let eqn = model.create_eq(&attr).map_err(|_| EINVAL)?;
        Ok(Self {
            hca,
            vector,
            eqn,
            log_size: EQ_LOG_SIZE,
            buf,
            ci: AtomicU32::new(0),
            eqes: AtomicU64::new(0),
            irqs: AtomicU64::new(0),
            irq: AtomicU32::new(0),
        })
    }

    /// Reads the EQE at consumer index `ci` if software owns it.
    pub(crate) fn next_eqe(&self, ci: u32) -> Option<Eqe> {
        read_eqe(&self.buf, self.log_size, ci)
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

/// Writes the EQ doorbell (consumer index, arm) on the UAR page and lets
/// the model see it. Called with the fabric lock held.
pub(crate) fn ring_eq_doorbell(
    soft: &SoftHca,
    st: &mut crate::hca::Locked,
    eq: &Eq,
    ci: u32,
) -> Result {
    let dev = soft.dev(usize::from(eq.hca))?;
    let mut word = [0u8; 4];
    EqDoorbell { eqn: eq.eqn, ci }.encode(&mut word);
    dev.uar.write(UAR_EQ_ARM_OFFSET, &word)?;
    let (fabric, mut p) = st.split();
    let hca = fabric.hca(eq.hca).ok_or(ENODEV)?;
    hca.eq_doorbell(&mut p, dev.uar.addr(), true)
        .map_err(|_| EIO)
}

/// The interrupt handler of one EQ.
#[pin_data]
pub(crate) struct EqIrq {
    pub(crate) soft: Arc<SoftHca>,
    pub(crate) hca: usize,
    pub(crate) vector: usize,
}

impl Handler for EqIrq {
    fn handle(&self) -> IrqReturn {
        match eq_interrupt(&self.soft, self.hca, self.vector) {
            Ok(true) => IrqReturn::Handled,
            _ => IrqReturn::None,
        }
    }
}

/// Consumes the EQ's EQEs. Hard-IRQ context: no allocation, no sleep.
/// Returns whether any EQE was consumed.
pub(crate) fn eq_interrupt(soft: &Arc<SoftHca>, hca: usize, vector: usize) -> Result<bool> {
    let perf = &soft.perf;
    let start = perf.now();
    if let Some(d) = perf.irq_raised.take(start) {
        perf.irq_delay.add(d);
    }
    let dev = soft.dev(hca)?;
    let eq = dev.eqs.get(vector).ok_or(EINVAL)?;
    eq.irqs.fetch_add(1, Ordering::Relaxed);
    let mut ci = eq.ci.load(Ordering::Relaxed);
    let mut consumed = 0u32;
    let mut dispatch = false;
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
                    dispatch |= tables.queue_cq(cqn);
                    continue;
                }
                EqeData::CqError { cqn, .. } => cqn,
                EqeData::QpSrq { qp_srq_n, .. } => qp_srq_n,
                EqeData::Raw(_) => 0,
            };
            tables.queue_event(AsyncEvent {
                event_type: u8::from(eqe.event_type),
                element,
            });
            dispatch = true;
        }
    }
    eq.ci.store(ci, Ordering::Relaxed);
    eq.eqes.fetch_add(u64::from(consumed), Ordering::Relaxed);
    let r = {
        let mut st = soft.state.lock();
        ring_eq_doorbell(soft, &mut st, eq, ci)
    };
    let end = perf.now();
    if dispatch {
        perf.bh_queued.mark(end);
        soft.kick_dispatch();
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
