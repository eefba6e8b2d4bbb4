// SPDX-License-Identifier: GPL-2.0

//! The user context: what one open of `/dev/rmlx5_uverbs<n>` owns.
//!
//! Lock order (outermost first):
//! 1. the process's `mmap_lock` (held by the VFS around `mmap`),
//! 2. `Ucontext::objects`,
//! 3. the software HCA's fabric lock (`hca.rs`; creates and destroys take
//!    it under `objects`),
//! 4. an event queue's spinlock (`event.rs`).
//!
//! Because `mmap` takes `objects` under `mmap_lock`, nothing that may take
//! `mmap_lock` runs while `objects` is held: no copy to or from user space
//! and no pinning of user pages. Commands copy their argument in, take
//! `objects` only to look up, insert and destroy, and copy the answer out
//! after releasing it. DESTROY_CQ and DESTROY_QP also wait under `objects`
//! for a running BH dispatch of the object to finish (its `busy` flag);
//! the dispatcher never takes `objects`, and one dispatch is bounded by
//! the handler it calls (for user objects: posting to an event queue).

use core::sync::atomic::AtomicBool;
use kernel::{
    mm::virt::{
        flags as vm,
        VmaNew, //
    },
    new_mutex,
    prelude::*,
    sync::{
        Arc,
        Mutex, //
    },
};

use super::{
    event::{
        EventQueue,
        QueueKind, //
    },
    objects::{
        Ucq,
        Umr,
        Upd,
        Uqp, //
    },
    pages::PageBuf,
    table::Table,
};
use crate::hca::{
    dma::RegionKind,
    SoftHca, //
};
use crate::mlx5_prm::doorbell::UAR_PAGE_SIZE;
use crate::rmlx5_abi::check::Limits;

/// The limits of HCA `hca_index`: its model's caps and its real number of
/// completion EQs.
fn limits_of(soft: &SoftHca, hca_index: u32) -> Result<Limits> {
    let index = u16::try_from(hca_index).map_err(|_| ENODEV)?;
    let comp = crate::mlx5_core::device::get(usize::from(index))?.comp_vectors();
    let caps = *soft.state.lock().fabric.hca(index).ok_or(ENODEV)?.caps();
    Ok(super::cmd::limits(&caps, u32::try_from(comp)?))
}
use crate::rmlx5_abi::mmap::{
    decode_pgoff,
    Kind, //
};

/// Most objects of each type one context may hold.
pub(crate) const MAX_OBJECTS: usize = 1024;
/// Most completion channels one context may keep open.
pub(crate) const MAX_CHANNELS: usize = 256;

/// Objects of a context and the completion channels it created.
pub(crate) struct Objects {
    pub(crate) pds: Table<Upd>,
    pub(crate) mrs: Table<Umr>,
    pub(crate) cqs: Table<Ucq>,
    pub(crate) qps: Table<Uqp>,
    /// Queues of this context's completion channels (a CQ may only use
    /// one of these); closed ones are pruned when a channel is created.
    pub(crate) channels: KVec<Arc<EventQueue>>,
}

/// Per-open state of a user-space device node.
///
/// # Invariants
///
/// Every object in `objects` was created by this context's process; the
/// CQs' channel queues are in `objects.channels`.
#[pin_data(PinnedDrop)]
pub(crate) struct Ucontext {
    /// The software HCA (every object of the context is one of its).
    pub(crate) soft: Arc<SoftHca>,
    /// The HCA this context was opened on.
    pub(crate) hca_index: u32,
    /// The device limits commands are checked against (from the HCA).
    pub(crate) limits: Limits,
    /// The context's UAR page (doorbells and BlueFlame registers).
    pub(crate) uar: PageBuf,
    /// The async-event queue; its file is handed out once.
    pub(crate) async_queue: Arc<EventQueue>,
    /// `GET_ASYNC_FD` has been answered.
    pub(crate) async_fd_taken: AtomicBool,
    #[pin]
    pub(crate) objects: Mutex<Objects>,
}

impl Ucontext {
    /// A context on HCA `hca_index`, with its UAR page (registered with the
    /// HCA, which reads doorbells and BlueFlame copies from it).
    pub(crate) fn new(hca_index: u32) -> Result<Pin<KBox<Self>>> {
        let soft = crate::soft()?;
        let limits = limits_of(&soft, hca_index)?;
        let uar = PageBuf::new(UAR_PAGE_SIZE)?;
        let async_queue = EventQueue::new(QueueKind::Async)?;
        let (uar_addr, uar_len) = (uar.kaddr(), uar.len() as u64);
        soft.state
            .lock()
            .dma
            .add_raw(uar_addr, uar_len, RegionKind::Buf)?;
        let this_soft = soft.clone();
        let r = KBox::try_pin_init(
            try_pin_init!(Self {
                soft: this_soft,
                hca_index,
                limits,
                uar,
                async_queue,
                async_fd_taken: AtomicBool::new(false),
                objects <- new_mutex!(Objects {
                    pds: Table::new(MAX_OBJECTS),
                    mrs: Table::new(MAX_OBJECTS),
                    cqs: Table::new(MAX_OBJECTS),
                    qps: Table::new(MAX_OBJECTS),
                    channels: KVec::new(),
                }),
            }),
            GFP_KERNEL,
        );
        if r.is_err() {
            soft.state.lock().dma.remove(uar_addr, uar_len);
        }
        r
    }

    /// The HCA index as the model numbers it.
    pub(crate) fn hca(&self) -> u16 {
        // `hca_index` came from a `u16` device index.
        self.hca_index as u16
    }

    /// The DMA address of the context's UAR page.
    pub(crate) fn uar_addr(&self) -> u64 {
        self.uar.kaddr()
    }

    /// Destroys everything the context created, in dependency order: QPs
    /// (which use CQs, PDs and the UAR), MRs (unpinned and uncharged), CQs
    /// (their unread events leave the channels), PDs; then channels and
    /// the async file see `EIO`. Runs on release, also when the process
    /// dies mid-use; the HCA stops touching each object as it is
    /// destroyed, before its memory goes.
    fn teardown(&self) {
        let (qps, mrs, cqs, pds, channels) = {
            let mut o = self.objects.lock();
            let qps = o.qps.drain();
            let mrs = o.mrs.drain();
            let cqs = o.cqs.drain();
            let pds = o.pds.drain();
            let channels = core::mem::take(&mut o.channels);
            (qps, mrs, cqs, pds, channels)
        };
        drop(qps);
        drop(mrs);
        drop(cqs);
        drop(pds);
        for ch in channels.iter() {
            ch.close();
        }
        self.async_queue.close();
        // No object of the context is in the HCA any more: the UAR page
        // leaves the doorbell watcher and the registry before it is freed
        // (its address may come back as another buffer's).
        let mut st = self.soft.state.lock();
        st.watch.remove_uar(self.uar.kaddr());
        st.dma.remove(self.uar.kaddr(), self.uar.len() as u64);
    }

    /// `mmap()` of one of the context's pages: the offset names the UAR
    /// page or an object of this context; the mapping must be shared, not
    /// executable, and exactly as long as the memory.
    pub(crate) fn mmap(&self, vma: &VmaNew) -> Result {
        let len = vma.end().checked_sub(vma.start()).ok_or(EINVAL)?;
        // SAFETY: reading `vm_pgoff` of the VMA being set up; the VMA is
        // exclusively ours for the duration of the mmap call.
        let pgoff = unsafe { (*vma.as_ptr()).vm_pgoff };
        let (kind, handle) = decode_pgoff(pgoff as u64).ok_or(EINVAL)?;
        let flags = vma.flags();
        if flags & vm::SHARED == 0 || flags & vm::EXEC != 0 {
            return Err(EINVAL);
        }
        // Hold the object (not the lock) while inserting pages.
        enum Held {
            Uar,
            Cq(Arc<Ucq>, bool),
            Qp(Arc<Uqp>, bool),
        }
        let held = {
            let o = self.objects.lock();
            match kind {
                Kind::Uar => Held::Uar,
                Kind::CqBuf => Held::Cq(o.cqs.obj(handle)?, false),
                Kind::CqDbr => Held::Cq(o.cqs.obj(handle)?, true),
                Kind::QpBuf => Held::Qp(o.qps.obj(handle)?, false),
                Kind::QpDbr => Held::Qp(o.qps.obj(handle)?, true),
            }
        };
        let buf = match &held {
            Held::Uar => &self.uar,
            Held::Cq(cq, false) => &*cq.buf,
            Held::Cq(cq, true) => &*cq.dbr,
            Held::Qp(qp, false) => &*qp.buf,
            Held::Qp(qp, true) => &*qp.dbr,
        };
        if len != buf.len() {
            return Err(EINVAL);
        }
        vma.try_clear_mayexec()?;
        vma.set_dontcopy();
        vma.set_dontexpand();
        vma.set_dontdump();
        buf.insert_into(vma.set_mixedmap())
    }
}

#[pinned_drop]
impl PinnedDrop for Ucontext {
    fn drop(self: Pin<&mut Self>) {
        self.teardown();
    }
}
