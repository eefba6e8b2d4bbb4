// SPDX-License-Identifier: GPL-2.0

//! RC queue pairs of user space: the model QP over the queue buffer and
//! doorbell-record page a process maps, rung through the process's UAR
//! page. Unlike [`super::qp::Qp`] the kernel never builds WQEs here: the
//! provider writes them, rings the doorbell in its mapping and then kicks
//! (`KICK` ioctl), which arrives at [`UserQp::send_doorbell`] or
//! [`UserQp::recv_doorbell`].
//!
//! Async events of the QP go to its [`EventSink`] (the context's async
//! file). The dispatcher delivers them with the QP's `busy` flag set under
//! the fabric lock, and [`UserQp::destroy`] takes the QP out of the lookup
//! table under that lock and then waits for `busy` to clear, the rule CQs
//! follow: once destroy returns, the sink is never called again.
//!
//! Lock order: only the fabric lock (`SoftHca::state`) is taken here.

use core::sync::atomic::{
    AtomicBool,
    AtomicU64,
    Ordering, //
};
use kernel::{
    prelude::*,
    sync::Arc,
    time::{
        delay::fsleep,
        Delta, //
    },
};

use super::{
    cq::{
        Cq,
        EventSink, //
    },
    model_err,
    mr::Pd,
};
use crate::hca::{
    dma::DmaBuf,
    watch::{
        STREAM_MAX_WQEBBS,
        STREAM_NS, //
    },
    Locked,
    SoftHca, //
};
use crate::hca_model::{
    doorbell::SendDoorbell,
    qp::{
        QpAttr,
        QpInfo,
        QpState, //
    },
    qp_modify::QpModify,
};
use crate::mlx5_core::device::Device;
use crate::mlx5_core::events::QpEvents;
use crate::mlx5_prm::{doorbell::QP_DBR_SIZE, opcode::SendOpcode};

/// Whether a WQE with send opcode `opcode` leaves the peer's process out:
/// RDMA WRITE, READ and atomics consume no receive. Only streams of those
/// start the doorbell watcher (`hca/watch.rs`): a SEND stream needs its
/// receiver to keep posting receives, and measured, a watcher competing
/// with that process for the CPUs cost more than the kicks it saved.
fn passive_peer(opcode: u8) -> bool {
    matches!(
        SendOpcode::try_from(opcode),
        Ok(SendOpcode::RdmaWrite
            | SendOpcode::RdmaRead
            | SendOpcode::AtomicCs
            | SendOpcode::AtomicFa
            | SendOpcode::AtomicMaskedCs
            | SendOpcode::AtomicMaskedFa)
    )
}

/// The memory and geometry of a user QP.
pub(crate) struct UserQpMem {
    /// The queue buffer: RQ at offset 0, SQ at `sq_offset`.
    pub(crate) buf: DmaBuf,
    /// The doorbell record at byte 0 (zeroed).
    pub(crate) dbr: DmaBuf,
    /// DMA address of the process's UAR page (registered by its owner).
    pub(crate) uar_addr: u64,
    /// BlueFlame register index in that page.
    pub(crate) bfreg: u8,
    /// SQ size in WQEBBs and its offset in `buf`.
    pub(crate) sq_wqebbs: u32,
    pub(crate) sq_offset: u64,
    /// RQ size in WQEs and its stride in bytes.
    pub(crate) rq_wqes: u32,
    pub(crate) rq_stride: u32,
    /// Largest gather list and inline payload of a send WQE.
    pub(crate) max_send_sge: u32,
    pub(crate) max_inline_data: u32,
}

/// A user-space RC QP in the model.
///
/// # Invariants
///
/// `buf` and `dbr` are in the DMA registry from creation until `destroy`
/// succeeds; `qpn >= QPN_BASE`. `busy` is set only by the dispatcher under
/// the fabric lock while the QP is in its HCA's user-QP table.
pub(crate) struct UserQp {
    soft: Arc<SoftHca>,
    /// The device (its tables hold the QP for its async events).
    dev: Arc<Device>,
    hca: u16,
    /// The QP number.
    pub(crate) qpn: u32,
    buf: DmaBuf,
    dbr: DmaBuf,
    sink: Arc<dyn EventSink>,
    /// DMA address of the process's UAR page (its watch word).
    uar_addr: u64,
    /// When the QP last kicked a send doorbell (perf clock, ns).
    last_kick: AtomicU64,
    busy: AtomicBool,
    destroyed: AtomicBool,
}

impl UserQp {
    /// Creates an RC QP in RESET on `pd` with CQs `send_cq` and `recv_cq`
    /// over the memory in `mem`.
    pub(crate) fn new(
        soft: &Arc<SoftHca>,
        pd: &Pd,
        send_cq: &Cq,
        recv_cq: &Cq,
        mem: UserQpMem,
        sink: Arc<dyn EventSink>,
    ) -> Result<Arc<Self>> {
        let hca = pd.hca();
        if send_cq.hca() != usize::from(hca) || recv_cq.hca() != usize::from(hca) {
            return Err(EINVAL);
        }
        let sq_bytes = u64::from(mem.sq_wqebbs) * 64;
        let rq_bytes = u64::from(mem.rq_wqes) * u64::from(mem.rq_stride);
        let end = mem.sq_offset.checked_add(sq_bytes).ok_or(EINVAL)?;
        if end > mem.buf.len() as u64 || rq_bytes > mem.sq_offset || mem.dbr.len() < QP_DBR_SIZE {
            return Err(EINVAL);
        }
        let attr = QpAttr {
            pdn: pd.pdn,
            send_cqn: send_cq.cqn,
            recv_cqn: recv_cq.cqn,
            sq_wqebbs: mem.sq_wqebbs,
            sq_buf_addr: mem.buf.addr() + mem.sq_offset,
            rq_wqes: mem.rq_wqes,
            rq_stride: mem.rq_stride,
            rq_buf_addr: mem.buf.addr(),
            dbr_addr: mem.dbr.addr(),
            uar_addr: mem.uar_addr,
            bfreg: mem.bfreg,
            max_send_sge: mem.max_send_sge,
            max_inline_data: mem.max_inline_data,
        };
        let uar_addr = mem.uar_addr;
        let UserQpMem { buf, dbr, .. } = mem;
        let regions = [&buf, &dbr].map(|b| (b.addr(), b.len() as u64));
        let qpn = {
            let mut st = soft.state.lock();
            let r = st.dma.add_buf(&buf).and_then(|()| st.dma.add_buf(&dbr));
            let r = r.and_then(|()| {
                let m = st.fabric.hca(hca).ok_or(ENODEV)?;
                m.create_qp(&attr).map_err(model_err)
            });
            match r {
                Ok(qpn) => qpn,
                Err(e) => {
                    for (a, l) in regions {
                        st.dma.remove(a, l);
                    }
                    return Err(e);
                }
            }
        };
        let r = Arc::new(
            Self {
                soft: soft.clone(),
                dev: pd.dev.clone(),
                hca,
                qpn,
                buf,
                dbr,
                sink,
                uar_addr,
                last_kick: AtomicU64::new(0),
                busy: AtomicBool::new(false),
                destroyed: AtomicBool::new(false),
            },
            GFP_KERNEL,
        );
        match r {
            Ok(qp) => {
                let added = pd.dev.events.lock().add_qp_events(qpn, qp.clone());
                if let Err(e) = added {
                    if qp.destroy().is_err() {
                        // The device keeps the QP: its memory stays with it.
                        core::mem::forget(qp);
                    }
                    return Err(e);
                }
                Ok(qp)
            }
            Err(e) => {
                let mut st = soft.state.lock();
                if let Some(m) = st.fabric.hca(hca) {
                    let _ = m.destroy_qp(qpn);
                }
                for (a, l) in regions {
                    st.dma.remove(a, l);
                }
                Err(e.into())
            }
        }
    }

    pub(crate) fn set_busy(&self, busy: bool) {
        self.busy.store(busy, Ordering::Release);
    }

    /// Delivers an async event (BH context, from the dispatcher).
    pub(crate) fn call_async(&self, event_type: u8) {
        if !self.destroyed.load(Ordering::Acquire) {
            self.sink.async_event(event_type);
        }
    }

    /// Modifies the QP in the model (IB modify-QP semantics). Moving to
    /// RESET zeroes the doorbell record, as the kernel does for mlx5;
    /// moving to ERR has the engine write the flush CQEs.
    pub(crate) fn modify(&self, m: &QpModify) -> Result {
        {
            let mut st = self.soft.state.lock();
            self.live()?;
            let model = st.fabric.hca(self.hca).ok_or(ENODEV)?;
            model.modify_qp(self.qpn, m).map_err(model_err)?;
            if m.mask
                .contains(crate::hca_model::qp_modify::AttrMask::STATE)
                && m.state == QpState::Reset
            {
                self.dbr.write(0, &[0u8; QP_DBR_SIZE])?;
            }
        }
        self.soft.run_engine();
        Ok(())
    }

    /// The QP's state and attributes from the model.
    pub(crate) fn query(&self) -> Result<QpInfo> {
        let mut st = self.soft.state.lock();
        self.live()?;
        let model = st.fabric.hca(self.hca).ok_or(ENODEV)?;
        model.query_qp(self.qpn).ok_or(EINVAL)
    }

    /// A send doorbell the process rang on `half` of the QP's BlueFlame
    /// register (with `blueflame_len` bytes of WQE copied, or 0); then the
    /// engine runs one budget (the engine work continues if more remains).
    ///
    /// # Errors
    ///
    /// `EINVAL` if the model refused the doorbell (counted in its stats).
    ///
    /// With kick elision (`hca/watch.rs`), the QP is watched from its first
    /// kick on; a kick whose doorbell record the watcher already took is
    /// late, not wrong, and succeeds; and a kick that follows the previous
    /// one within `STREAM_NS` starts the watcher.
    pub(crate) fn send_doorbell(
        self: &Arc<Self>,
        half: u8,
        blueflame_len: u32,
        opcode: u8,
    ) -> Result {
        let soft = &self.soft;
        let entry = soft.perf.now();
        let mut small = false;
        {
            let mut st = soft.state.lock();
            self.live()?;
            if soft.elision {
                let hca = usize::from(self.hca);
                let took = st.watch.take_taken(hca, self.qpn);
                let new = self.new_wqebbs(&mut st)?;
                if st.watch.add(hca, self.qpn, self.uar_addr) && took && new == Some(0) {
                    return Ok(());
                }
                small = new.is_some_and(|n| n <= STREAM_MAX_WQEBBS) && passive_peer(opcode);
            }
            let (fabric, mut p) = st.split();
            let m = fabric.hca(self.hca).ok_or(ENODEV)?;
            m.send_doorbell(
                &mut p,
                &SendDoorbell {
                    qpn: self.qpn,
                    half,
                    blueflame_len,
                },
            )
            .map_err(|_| EINVAL)?;
        }
        soft.run_engine();
        if soft.elision {
            // A stream: this kick came soon after the previous one, in
            // absolute terms or against what a kick costs here (a debug
            // kernel's kicks take several times longer).
            let now = soft.perf.now();
            let prev = self.last_kick.swap(now, Ordering::Relaxed);
            let window = STREAM_NS.max(now.saturating_sub(entry).saturating_mul(3));
            if small && now.saturating_sub(prev) < window {
                soft.start_watch();
            }
        }
        Ok(())
    }

    /// WQEBBs the doorbell record announces beyond what the model has
    /// accepted (0 when the watcher already took the record; `None` for
    /// what the doorbell itself will refuse).
    fn new_wqebbs(&self, st: &mut Locked) -> Result<Option<u16>> {
        let (fabric, mut p) = st.split();
        let m = fabric.hca(self.hca).ok_or(ENODEV)?;
        Ok(m.send_posted(&mut p, self.qpn))
    }

    /// The receive kick (new receives of a QP in ERR are flushed); then
    /// the engine runs.
    pub(crate) fn recv_doorbell(&self) -> Result {
        {
            let mut st = self.soft.state.lock();
            self.live()?;
            let m = st.fabric.hca(self.hca).ok_or(ENODEV)?;
            m.recv_doorbell(self.qpn).map_err(|_| EINVAL)?;
        }
        self.soft.run_engine();
        Ok(())
    }

    /// `EINVAL` once the QP is destroyed: its QPN may already name
    /// another QP. Called under the fabric lock, which `destroy` holds
    /// while it sets `destroyed`, so the answer holds until it is released.
    fn live(&self) -> Result {
        if self.destroyed.load(Ordering::Acquire) {
            return Err(EINVAL);
        }
        Ok(())
    }

    /// Destroys the QP: it leaves the model at once (no further DMA to its
    /// pages, no CQE; unpolled work is discarded as ib_destroy_qp does) and
    /// the event table; on success no event is delivered afterwards, and
    /// every later call on this object fails with `EINVAL`. A second
    /// destroy succeeds and does nothing, so a destroy command can end the
    /// QP while a racing command still holds a reference to it.
    pub(crate) fn destroy(&self) -> Result {
        {
            let mut st = self.soft.state.lock();
            // A second destroy only waits for the dispatcher, like the first.
            if !self.destroyed.load(Ordering::Acquire) {
                let m = st.fabric.hca(self.hca).ok_or(ENODEV)?;
                m.destroy_qp(self.qpn).map_err(model_err)?;
                st.watch.remove(usize::from(self.hca), self.qpn);
                for b in [&self.buf, &self.dbr] {
                    st.dma.remove_buf(b);
                }
                {
                    let dev = &self.dev;
                    dev.events.lock().remove_qp_events(self.qpn, self);
                }
                self.destroyed.store(true, Ordering::Release);
            }
        }
        while self.busy.load(Ordering::Acquire) {
            fsleep(Delta::from_micros(100));
        }
        Ok(())
    }
}

impl QpEvents for UserQp {
    fn set_busy(&self, busy: bool) {
        UserQp::set_busy(self, busy);
    }

    fn async_event(&self, event_type: u8) {
        self.call_async(event_type);
    }
}
