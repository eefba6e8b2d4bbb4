// SPDX-License-Identifier: GPL-2.0

//! The user context: what one open of `/dev/rmlx5_uverbs<n>` owns.
//!
//! Lock order (outermost first):
//! 1. the process's `mmap_lock` (held by the VFS around `mmap`),
//! 2. `Ucontext::objects`,
//! 3. the device's locks (the software HCA's fabric lock, a PCI function's
//!    command lock; creates and destroys take them under `objects`),
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

use core::sync::atomic::{
    AtomicBool,
    AtomicU32,
    Ordering, //
};
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
        EventSlot,
        QueueKind, //
    },
    node::UserRef,
    objects::{
        Ucq,
        Umr,
        Upd,
        Uqp, //
    },
    table::Table,
};
use crate::backend::UserUar;
use crate::mlx5_core::device::Device;
use crate::rmlx5_abi::check::Limits;
use crate::rmlx5_abi::uapi::EVENT_DEVICE_FATAL;

/// The limits of `dev`: its caps and its real number of completion EQs.
fn limits_of(dev: &Device) -> Result<Limits> {
    let caps = dev.be.caps()?;
    let mut l = super::cmd::limits(&caps, u32::try_from(dev.comp_vectors())?);
    l.max_mr_size = l.max_mr_size.min(dev.be.max_user_mr());
    Ok(l)
}
use crate::rmlx5_abi::mmap::{
    decode_pgoff,
    Kind, //
};

/// Most objects of each type one context may hold: as many as a software
/// HCA has QPs, so one process can drive 10,000 QPs (the handle tables
/// grow as objects are made).
pub(crate) const MAX_OBJECTS: usize = 16384;
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
    /// The device the context was opened on (every object of the context
    /// is one of its).
    pub(crate) dev: Arc<Device>,
    /// Its number `n` of `rmlx5_<n>`.
    pub(crate) hca_index: u32,
    /// The device limits commands are checked against.
    pub(crate) limits: Limits,
    /// The context's UAR page (doorbells and BlueFlame registers); freed
    /// after the objects on it.
    pub(crate) uar: KBox<dyn UserUar>,
    /// The async-event queue; its file is handed out once.
    pub(crate) async_queue: Arc<EventQueue>,
    /// The context's own slot on `async_queue`, for device events.
    device_slot: Arc<EventSlot>,
    /// `GET_ASYNC_FD` has been answered.
    pub(crate) async_fd_taken: AtomicBool,
    /// `DEVICE_FATAL` was posted (once per context).
    fatal_told: AtomicBool,
    /// Disassociated from its device ([`Ucontext::disassociate`]): every
    /// command and mapping gets `EIO`.
    disassociated: AtomicBool,
    /// Commands running on the context ([`Ucontext::enter_command`]);
    /// disassociation waits for them.
    in_flight: AtomicU32,
    #[pin]
    pub(crate) objects: Mutex<Objects>,
    /// Counts the context as a user of its device node until it is gone
    /// (last field: dropped after everything else).
    _user: UserRef,
}

/// A command running on a context ([`Ucontext::enter_command`]).
pub(crate) struct CommandGuard<'a>(&'a Ucontext);

impl Drop for CommandGuard<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Ucontext {
    /// A context on device `hca_index`, with a UAR page of its own.
    pub(crate) fn new(hca_index: u32, user: UserRef) -> Result<Pin<KBox<Self>>> {
        let dev = crate::mlx5_core::device::get(usize::try_from(hca_index)?)?;
        let limits = limits_of(&dev)?;
        let uar = dev.be.clone().alloc_uar()?;
        let async_queue = EventQueue::new(QueueKind::Async)?;
        let device_slot = EventSlot::new(0)?;
        async_queue.attach()?;
        KBox::try_pin_init(
            try_pin_init!(Self {
                dev,
                hca_index,
                limits,
                uar,
                async_queue,
                device_slot,
                async_fd_taken: AtomicBool::new(false),
                fatal_told: AtomicBool::new(false),
                disassociated: AtomicBool::new(false),
                in_flight: AtomicU32::new(0),
                objects <- new_mutex!(Objects {
                    pds: Table::new(MAX_OBJECTS),
                    mrs: Table::new(MAX_OBJECTS),
                    cqs: Table::new(MAX_OBJECTS),
                    qps: Table::new(MAX_OBJECTS),
                    channels: KVec::new(),
                }),
                _user: user,
            }),
            GFP_KERNEL,
        )
    }

    /// The device failed ([`super::node::Users::device_fatal`]): the
    /// process is told on its async-event file, and its completion
    /// channels are closed (readers get `EIO`, pollers `EPOLLERR`). Its
    /// objects stay until it closes the context.
    pub(crate) fn device_fatal(&self) {
        self.tell_fatal();
        let channels = self.objects.lock();
        for ch in channels.channels.iter() {
            ch.close();
        }
    }

    /// Posts `DEVICE_FATAL` on the async-event file, once.
    fn tell_fatal(&self) {
        if !self.fatal_told.swap(true, Ordering::AcqRel) {
            self.async_queue.post(&self.device_slot, EVENT_DEVICE_FATAL);
        }
    }

    /// The device goes away under the open context (a PCI function's
    /// unbind, [`super::node::Users::disassociate`]), as ib_uverbs
    /// disassociates mlx5_ib's contexts: from now on every command and
    /// `mmap` gets `EIO`; its UAR page leaves the process first, so its
    /// later stores to the mapping land in a page of memory, never in the
    /// device; its objects are destroyed on the device now, while it still
    /// runs, and its completion channels closed; then the process is told
    /// `DEVICE_FATAL` (still readable from the async-event file, which
    /// then reads `EIO`), and the UAR is given back. The queue buffers it
    /// mapped stay (each page holds a reference). The rest goes when the
    /// process closes the file.
    pub(crate) fn disassociate(&self) {
        // SeqCst here and in `enter_command`: either a command sees the
        // flag, or this sees its count (as ib_uverbs waits for its SRCU
        // readers before it disassociates). A command that is already in
        // holds objects (an `Arc` taken from a table) and may still be
        // creating one; destroying under it would leave a QP on the UAR
        // page given back below. Each device command a command runs ends
        // within the command timeout.
        self.disassociated.store(true, Ordering::SeqCst);
        crate::work::wait_not_busy(
            "user context (commands in flight) on device",
            self.hca_index,
            || self.in_flight.load(Ordering::SeqCst) != 0,
        );
        self.uar.revoke();
        for ch in self.destroy_objects().iter() {
            ch.close();
        }
        // Last: a process that reads the event finds everything else in
        // its final state already.
        self.tell_fatal();
        self.async_queue.close_after_pending();
        self.uar.give_back();
    }

    /// Enters a command: `EIO` once the context is disassociated, else a
    /// guard that [`Ucontext::disassociate`] waits for.
    pub(crate) fn enter_command(&self) -> Result<CommandGuard<'_>> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let g = CommandGuard(self);
        if self.disassociated.load(Ordering::SeqCst) {
            return Err(EIO);
        }
        Ok(g)
    }

    /// Whether [`Ucontext::disassociate`] has run.
    pub(crate) fn is_disassociated(&self) -> bool {
        self.disassociated.load(Ordering::Acquire)
    }

    /// The address CQs and QPs name the context's UAR page by.
    pub(crate) fn uar_addr(&self) -> u64 {
        self.uar.addr()
    }

    /// Destroys everything the context created, in dependency order: QPs
    /// (which use CQs, PDs and the UAR), MRs (unpinned and uncharged), CQs
    /// (their unread events leave the channels), PDs. The tables are
    /// closed: an object a command in flight creates now is refused with
    /// `EIO` (and destroyed as it is dropped). Returns the completion
    /// channels. The HCA stops touching each object as it is destroyed,
    /// before its memory goes.
    fn destroy_objects(&self) -> KVec<Arc<EventQueue>> {
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
        channels
    }

    /// Destroys what the context holds (`destroy_objects`); then channels
    /// and the async file see `EIO`. Runs on release, also when the
    /// process dies mid-use.
    fn teardown(&self) {
        for ch in self.destroy_objects().iter() {
            ch.close();
        }
        self.async_queue.close();
        // No object of the context is on the device any more; the UAR page
        // goes with the context's fields.
    }

    /// `mmap()` of one of the context's pages: the offset names the UAR
    /// page or an object of this context; the mapping must be shared, not
    /// executable, and exactly as long as the memory.
    pub(crate) fn mmap(&self, vma: &VmaNew) -> Result {
        if self.is_disassociated() {
            return Err(EIO);
        }
        let len = vma.end().checked_sub(vma.start()).ok_or(EINVAL)?;
        // SAFETY: reading `vm_pgoff` of the VMA being set up; the VMA is
        // exclusively ours for the duration of the mmap call.
        let pgoff = unsafe { (*vma.as_ptr()).vm_pgoff };
        let (kind, handle) = decode_pgoff(pgoff as u64).ok_or(EINVAL)?;
        let flags = vma.flags();
        if flags & vm::SHARED == 0 || flags & vm::EXEC != 0 {
            return Err(EINVAL);
        }
        vma.try_clear_mayexec()?;
        vma.set_dontcopy();
        vma.set_dontexpand();
        vma.set_dontdump();
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
            Held::Uar => return self.uar.mmap(vma),
            Held::Cq(cq, false) => &*cq.buf,
            Held::Cq(cq, true) => &*cq.dbr,
            Held::Qp(qp, false) => &*qp.buf,
            Held::Qp(qp, true) => &*qp.dbr,
        };
        if len != buf.len() {
            return Err(EINVAL);
        }
        buf.insert_into(vma.set_mixedmap())
    }
}

#[pinned_drop]
impl PinnedDrop for Ucontext {
    fn drop(self: Pin<&mut Self>) {
        self._user.users().unwatch(&self);
        self.teardown();
    }
}
