// SPDX-License-Identifier: GPL-2.0

//! The UAR page of a user context on the software HCA, and the KICKs that
//! report what the process wrote to it.
//!
//! The page is kernel memory the process maps; the model reads doorbells
//! and BlueFlame copies from it at its kernel address (registered in the
//! DMA registry for the page's life). A store to memory raises nothing,
//! so the provider follows each doorbell with a KICK, which arrives here:
//! [`UserUar::kick_send`] runs the model's send doorbell (with kick
//! elision, `watch.rs`), [`UserUar::kick_arm`] its CQ doorbell and
//! [`UserUar::kick_recv`] its receive doorbell.

use core::sync::atomic::{
    AtomicBool,
    AtomicU64,
    Ordering, //
};
use kernel::{
    mm::virt::VmaNew,
    prelude::*,
    sync::Arc, //
};

use super::{
    dma::RegionKind,
    watch::{
        STREAM_MAX_WQEBBS,
        STREAM_NS, //
    },
    SoftHca,
};
use crate::backend::{
    KickQp,
    UserUar, //
};
use crate::hca_model::doorbell::SendDoorbell;
use crate::mem::pages::PageBuf;
use crate::mlx5_prm::{
    doorbell::{
        bf_reg_offset,
        send_doorbell as send_doorbell_bytes,
        SendDoorbellWord,
        BF_BUF_SIZE,
        UAR_PAGE_SIZE, //
    },
    opcode::SendOpcode,
    ring::wqebb_count,
    wqe::{
        CtrlSeg,
        WQEBB_SIZE, //
    },
};

/// Whether a WQE with send opcode `opcode` leaves the peer's process out:
/// RDMA WRITE, READ and atomics consume no receive. Only streams of those
/// start the doorbell watcher (`watch.rs`): a SEND stream needs its
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

/// A context's UAR page on instance `hca`.
///
/// # Invariants
///
/// `page` is in the DMA registry (as a buffer) from creation until drop.
pub(crate) struct SoftUar {
    soft: Arc<SoftHca>,
    hca: u16,
    page: PageBuf,
    /// When any QP of this context last kicked a send doorbell (perf
    /// clock, ns): one process's QPs kicking in turn are a stream too.
    last_kick: AtomicU64,
}

impl SoftUar {
    /// A zeroed UAR page of instance `hca`, registered with the model.
    pub(super) fn new(soft: &Arc<SoftHca>, hca: u16) -> Result<Self> {
        let page = PageBuf::new(UAR_PAGE_SIZE)?;
        soft.state
            .lock()
            .dma
            .add_raw(page.kaddr(), page.len() as u64, RegionKind::Buf)?;
        // INVARIANT: registered just above.
        Ok(Self {
            soft: soft.clone(),
            hca,
            page,
            last_kick: AtomicU64::new(0),
        })
    }

    /// `EINVAL` once `gone` is set: checked under the fabric lock, which a
    /// QP's destroy takes after setting it, so the answer holds while the
    /// lock is held.
    fn live(gone: &AtomicBool) -> Result {
        if gone.load(Ordering::Acquire) {
            return Err(EINVAL);
        }
        Ok(())
    }
}

impl Drop for SoftUar {
    fn drop(&mut self) {
        // Every object on the page is gone (the context destroyed them
        // first): the page leaves the doorbell watcher and the registry
        // before it is freed (its address may come back as another
        // buffer's).
        let mut st = self.soft.state.lock();
        st.watch.remove_uar(self.page.kaddr());
        st.dma.remove(self.page.kaddr(), self.page.len() as u64);
    }
}

impl UserUar for SoftUar {
    fn addr(&self) -> u64 {
        self.page.kaddr()
    }

    fn mmap(&self, vma: &VmaNew) -> Result {
        if vma.end().checked_sub(vma.start()) != Some(self.page.len()) {
            return Err(EINVAL);
        }
        self.page.insert_into(vma.set_mixedmap())
    }

    fn needs_kick(&self) -> bool {
        true
    }

    fn kick_arm(&self, entry: u64) -> Result {
        let perf = &self.soft.perf;
        // An arm of a CQ that holds a CQE fires at once: the interrupt is
        // delivered here, after the unlock.
        self.soft.locked_direct(|st| {
            let (fabric, mut pf) = st.split();
            let m = fabric.hca(self.hca).ok_or(ENODEV)?;
            m.cq_doorbell(&mut pf, self.page.kaddr())
                .map_err(|_| EINVAL)
        })?;
        perf.kick_arm.add(perf.now().saturating_sub(entry));
        Ok(())
    }

    /// With kick elision (`watch.rs`), the QP is watched from its first
    /// kick on; a kick whose doorbell record the watcher already took is
    /// late, not wrong, and succeeds; and a kick that follows the previous
    /// one within `STREAM_NS` starts the watcher.
    fn kick_send(&self, qp: &KickQp<'_>, offset: u32, blueflame: bool, entry: u64) -> Result {
        let soft = &self.soft;
        let bf_offset = u32::try_from(bf_reg_offset(usize::from(qp.bfreg)).map_err(|_| EINVAL)?)?;
        let bf_size = BF_BUF_SIZE as u32;
        // The doorbell or BlueFlame copy must be in this QP's register, in
        // one of its two halves.
        let half = if offset == bf_offset {
            0
        } else if Some(offset) == bf_offset.checked_add(bf_size) {
            1
        } else {
            return Err(EINVAL);
        };
        // The doorbell (or the copy) starts with the control segment of
        // the last WQE posted.
        let mut c = [0u8; CtrlSeg::SIZE];
        self.page.read(offset as usize, &mut c)?;
        let word = SendDoorbellWord::decode(&send_doorbell_bytes(&c));
        let blueflame_len = if blueflame {
            // The ABI's kick names no length: it is the size of the WQE
            // whose control segment starts the copy.
            let ctrl = CtrlSeg::decode(&c).map_err(|_| EINVAL)?;
            let len = usize::from(wqebb_count(ctrl.ds)) * WQEBB_SIZE;
            if len == 0 || len > BF_BUF_SIZE {
                return Err(EINVAL);
            }
            u32::try_from(len)?
        } else {
            0
        };
        let mut small = false;
        {
            let mut st = soft.state.lock();
            Self::live(qp.gone)?;
            if soft.elision {
                let hca = usize::from(self.hca);
                let took = st.watch.take_taken(hca, qp.qpn);
                let new = {
                    let (fabric, mut p) = st.split();
                    let m = fabric.hca(self.hca).ok_or(ENODEV)?;
                    m.send_posted(&mut p, qp.qpn)
                };
                if st.watch.add(hca, qp.qpn, self.page.kaddr()) && took && new == Some(0) {
                    // Late: the watcher already took the record.
                    soft.perf
                        .kick_send
                        .add(soft.perf.now().saturating_sub(entry));
                    return Ok(());
                }
                small = new.is_some_and(|n| n <= STREAM_MAX_WQEBBS) && passive_peer(word.opcode);
            }
            let (fabric, mut p) = st.split();
            let m = fabric.hca(self.hca).ok_or(ENODEV)?;
            m.send_doorbell(
                &mut p,
                &SendDoorbell {
                    qpn: qp.qpn,
                    half,
                    blueflame_len,
                },
            )
            .map_err(|_| EINVAL)?;
        }
        soft.run_engine();
        let now = soft.perf.now();
        if soft.elision {
            // A stream: this kick came soon after the previous one of the
            // QP or of its context (many QPs of one process, each posting
            // one WQE in turn, kick back to back while each QP's own kicks
            // are far apart), in absolute terms or against what a kick
            // costs here (a debug kernel's kicks take several times
            // longer).
            let prev = qp
                .last_kick
                .swap(now, Ordering::Relaxed)
                .max(self.last_kick.swap(now, Ordering::Relaxed));
            let window = STREAM_NS.max(now.saturating_sub(entry).saturating_mul(3));
            if small && now.saturating_sub(prev) < window {
                soft.start_watch();
            }
        }
        soft.perf.kick_send.add(now.saturating_sub(entry));
        Ok(())
    }

    fn kick_recv(&self, qpn: u32, gone: &AtomicBool) -> Result {
        {
            let mut st = self.soft.state.lock();
            Self::live(gone)?;
            let m = st.fabric.hca(self.hca).ok_or(ENODEV)?;
            m.recv_doorbell(qpn).map_err(|_| EINVAL)?;
        }
        self.soft.run_engine();
        Ok(())
    }
}
