// SPDX-License-Identifier: GPL-2.0

//! A ConnectX function as a verbs device `rmlx5_<n>`: [`Backend`] by
//! command.
//!
//! Every object is created with its PRM command through the function's
//! command interface (the same `mlx5-cmdif` the bring-up uses): ALLOC_PD,
//! CREATE_MKEY, CREATE_CQ, CREATE_EQ, CREATE_QP and the QP transitions,
//! and their DESTROY/DEALLOC. Queue memory is coherent DMA memory of the
//! function, given to the device by page list; kernel MRs are mapped for
//! DMA (`dma_map_single`) and described by an MTT. Doorbells are stores to
//! the driver's UAR page in BAR0: the send doorbell as one 64-bit store to
//! BlueFlame register 0, the CQ doorbell as one 64-bit store, the EQ
//! doorbell as one 32-bit store, as mlx5 rings them.
//!
//! QPs are RC or UD (QPC `st` RC or UD, as mlx5_ib creates kernel QPs); a
//! GSI QP is refused with `EOPNOTSUPP`, the function's port being
//! InfiniBand without MADs.
//!
//! # Locking and lifetimes
//!
//! The backend is an `Arc` that verbs objects hold for as long as they
//! live, which may be past the unbind of the function. It reaches the
//! bound function through two links that unbind revokes
//! ([`CxBackend::revoke_after`]) before the function's state goes:
//!
//! - `ctl` (a mutex, process context): the function's state mutex, for
//!   commands; commands sleep, so they run one at a time per function,
//!   `ctl` before the state mutex;
//! - `db` (an irq-safe spinlock, any context): the BAR, for doorbells,
//!   which are rung from the post path and the EQ's hard-IRQ handler.
//!
//! Unbind revokes them with `ctl` held across the function's teardown
//! ([`CxBackend::revoke_after`]), so no command of the backend runs while
//! it is taken down. Once revoked, creating fails with `ENODEV`, doorbells
//! are dropped, and destroying succeeds at once if the teardown succeeded
//! (TEARDOWN_HCA leaves the device holding nothing, so the memory may go);
//! if it failed, destroying fails with `EIO` and the memory stays with its
//! owner.

use core::ptr::NonNull;
use core::sync::atomic::{
    AtomicBool,
    Ordering, //
};
use kernel::{
    device,
    ffi::c_void,
    mm::virt::VmaNew,
    new_condvar, new_mutex, new_spinlock, new_spinlock_irq, pci,
    prelude::*,
    sync::{
        aref::ARef,
        Arc,
        CondVar,
        Mutex,
        SpinLock,
        SpinLockIrq, //
    },
    time::{
        Instant,
        Monotonic, //
    },
};

use super::{
    bar::CxBar,
    events::{
        self,
        COUNTERS,
        MODE_ENTRY0, //
    },
    State,
};
use crate::backend::{
    Backend,
    DeviceInfo,
    FastKeys,
    MrRegion,
    UserUar, //
};
use crate::hca_model::{
    caps::Caps,
    cq::CqAttr,
    mr::{
        Access,
        MrAttr, //
    },
    qp::{
        ConnAttrs,
        QpAttr,
        QpService,
        QpState, //
    },
    qp_modify::{
        self,
        AttrMask,
        QpModify, //
    },
};
use crate::mem::DmaBuf;
use crate::mlx5_cmdif::cmdif::{
    Started,
    MAX_EXT_MSG, //
};
use crate::mlx5_cmdif::cmdmem::MAX_BLOCKS;
use crate::mlx5_prm::command::OP_CREATE_MKEY;
use crate::mlx5_prm::{
    cmd_cq::{
        Cqc,
        CreateCq,
        CreateCqIn,
        DestroyCq,
        DestroyCqIn, //
    },
    cmd_eq::{
        event_mask,
        CreateEq,
        CreateEqIn,
        DestroyEq,
        DestroyEqIn,
        Eqc, //
        ADAPTER_PAGE_SHIFT,
    },
    cmd_qp::{
        CreateQp,
        CreateQpIn,
        DestroyQp,
        DestroyQpIn,
        Init2RtrQp,
        Init2RtrQpIn,
        Qp2Err,
        Qp2ErrIn,
        Qp2Rst,
        Qp2RstIn,
        QueryQp,
        QueryQpIn,
        Rst2InitQp,
        Rst2InitQpIn,
        Rtr2RtsQp,
        Rtr2RtsQpIn, //
    },
    cmd_queue::{
        INLINE_SIZE,
        MAILBOX_DATA_SIZE, //
    },
    cmd_res::{
        mkey,
        mtt_octwords,
        AllocPd,
        AllocPdIn,
        AllocUar,
        AllocUarIn,
        CreateMkey,
        CreateMkeyIn,
        DeallocPd,
        DeallocPdIn,
        DeallocUar,
        DeallocUarIn,
        DestroyMkey,
        DestroyMkeyIn,
        Mkc,
        ACCESS_MODE_MTT,
        ACCESS_MODE_PA, //
    },
    cmd_vport::{
        QueryHcaVportContext,
        QueryHcaVportContextIn,
        QueryHcaVportGid,
        QueryHcaVportGidIn, //
    },
    command::Command,
    doorbell::{
        bf_half_offset,
        send_doorbell,
        uar_reg_offset,
        CqArm,
        EqDoorbell,
        UarCqDoorbell,
        UAR_CQ_DOORBELL_OFFSET,
        UAR_EQ_ARM_OFFSET,
        UAR_PAGE_SIZE, //
    },
    hca_cap::HcaCap,
    ifc::Layout,
    opcode::EventType,
    qpc::{
        state_to_ib,
        Ads,
        Qpc,
        MTU_4K,
        OPTPAR_PKEY_INDEX,
        OPTPAR_Q_KEY,
        PM_STATE_MIGRATED,
        RQ_TYPE_REGULAR,
        ST_RC,
        ST_UD, //
    },
    wqe::{
        MTT_EN_RD,
        MTT_EN_WR, //
    },
};

extern "C" {
    fn rmlx5_shim_dma_map(
        dev: *mut c_void,
        addr: *mut c_void,
        len: usize,
        dma: *mut u64,
    ) -> kernel::ffi::c_int;
    fn rmlx5_shim_dma_unmap(dev: *mut c_void, dma: u64, len: usize);
    fn rmlx5_io_map_page(
        vma: *mut c_void,
        phys: u64,
        wc: bool,
        owner: *const c_void,
        revoked: *const bool,
    ) -> kernel::ffi::c_int;
    fn rmlx5_io_revoke(owner: *const c_void);
}

/// The page size of queue buffers and MTTs.
const PAGE: usize = 4096;

/// The port's identity as the firmware reports it (QUERY_HCA_VPORT_CONTEXT
/// and QUERY_HCA_VPORT_GID of port 1), read at attach and again whenever
/// the port is queried (after a port change event ib_core does).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct PortId {
    pub(super) lid: u16,
    pub(super) sm_lid: u16,
    /// `PORT_STATE_*`: 1 down, 2 init, 3 armed, 4 active.
    pub(super) state: u8,
    pub(super) node_guid: u64,
    pub(super) port_guid: u64,
    pub(super) subnet_prefix: u64,
}

/// The asynchronous events the device's async EQ (position 0) asks for:
/// CQ errors and the QP events, which the core delivers to the ULP's
/// handler or the object's own.
const ASYNC_EVENTS: [EventType; 9] = [
    EventType::PortChange,
    EventType::CqError,
    EventType::PathMig,
    EventType::CommEst,
    EventType::SqDrained,
    EventType::WqCatasError,
    EventType::PathMigFailed,
    EventType::WqInvalReqError,
    EventType::WqAccessError,
];

/// The function's state mutex, its lifetime erased (see [`CxBackend`]).
struct StateLink(NonNull<Mutex<State<'static>>>);

// SAFETY: The link is only dereferenced under `CxBackend::ctl` while the
// function is bound, and the state it points at is `Send` (a mutex).
unsafe impl Send for StateLink {}

/// BAR0, its lifetime erased (see [`CxBackend`]).
struct BarLink(NonNull<CxBar>);

// SAFETY: Only dereferenced under `CxBackend::db` while the function is
// bound; a `Bar` is a mapping address, usable from any thread.
unsafe impl Send for BarLink {}

/// A kernel MR's DMA mapping, kept to unmap it.
#[derive(Clone, Copy)]
struct Mapping {
    key: u32,
    dma: u64,
    len: usize,
}

/// A QP as the driver last moved it.
#[derive(Clone, Copy)]
struct TrackedQp {
    qpn: u32,
    /// RC or UD: which fields each transition takes.
    service: QpService,
    state: QpState,
    conn: ConnAttrs,
}

/// What commands need, under `ctl`.
struct Ctl {
    state: Option<StateLink>,
    /// Once `state` is gone: whether the function was taken down without
    /// error, so that the device holds nothing any more.
    quiesced: bool,
    /// Each QP's state and attributes as the driver last moved it (the
    /// device's answer to QUERY_QP, without asking it).
    qps: KVec<TrackedQp>,
    /// The DMA mappings of the kernel MRs.
    mrs: KVec<Mapping>,
    /// The low byte of the next memory key.
    next_key: u8,
    /// Commands running without `ctl` held ([`Entered`]).
    in_flight: u32,
    /// Set by [`CxBackend::revoke_after`]: no command enters any more.
    closing: bool,
}

/// A command of the backend running without `ctl` held (on a lane, see
/// `cx/events.rs`): while it lives, [`CxBackend::revoke_after`] waits, so
/// the state link stays valid.
struct Entered<'a> {
    be: &'a CxBackend,
    state: NonNull<Mutex<State<'static>>>,
}

impl Entered<'_> {
    /// The function's state mutex.
    fn state(&self) -> &Mutex<State<'static>> {
        // SAFETY: Taken from `ctl.state` by `CxBackend::enter`, which
        // counted this command in `ctl.in_flight`; `revoke_after` clears
        // the link only once that count is back to 0, which this value's
        // drop does.
        unsafe { self.state.as_ref() }
    }
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        let mut ctl = self.be.ctl.lock();
        ctl.in_flight = ctl.in_flight.saturating_sub(1);
        let idle = ctl.in_flight == 0;
        drop(ctl);
        if idle {
            self.be.idle.notify_all();
        }
    }
}

/// A bound ConnectX function as a verbs backend.
///
/// # Invariants
///
/// While `ctl.state` is `Some`, it points at the function's live state
/// mutex; while `db` is `Some`, at its live BAR0 mapping. Both are set by
/// [`CxBackend::new`] from the bound function and cleared by
/// [`CxBackend::revoke_after`] before that function's driver data is dropped.
#[pin_data]
pub(crate) struct CxBackend {
    #[pin]
    ctl: Mutex<Ctl>,
    /// Signalled when the last command in flight without `ctl` ends.
    #[pin]
    idle: CondVar,
    #[pin]
    db: SpinLockIrq<Option<BarLink>>,
    /// The driver's UAR page (its index in BAR0).
    uar: u32,
    /// BAR0's physical address and length, where user UAR pages are
    /// mapped from.
    bar_phys: u64,
    bar_len: u64,
    /// MSI-X vectors granted: EQ position `p` raises vector `p`, or vector
    /// 0 when there are not that many.
    vectors: u16,
    /// The function's device, for DMA mappings (also after unbind).
    dev: ARef<device::Device>,
    /// Port 1 as last read from the firmware ([`CxBackend::query_port`]).
    #[pin]
    port: SpinLock<PortId>,
    /// Set when the function failed (its health check, `cx/health.rs`).
    fatal: Arc<super::health::Fatal>,
    /// What its commands made and destroyed.
    live: Arc<super::events::Live>,
}

/// Logs a command interface error and turns it into an errno.
fn cmd_err(pdev: &pci::Device<device::Bound>, e: crate::mlx5_cmdif::error::Error) -> Error {
    // A failed function refuses every command; the failure itself was
    // logged once.
    if matches!(e, crate::mlx5_cmdif::error::Error::InternalError { .. }) {
        dev_dbg!(pdev, "{}\n", format_args!("{e}"));
    } else {
        dev_err!(pdev, "{}\n", format_args!("{e}"));
    }
    Error::from_errno(-e.errno())
}

/// A queue buffer as a queue context gives it: `log_page_size`,
/// `page_offset` and the page list.
struct QueuePages {
    log_page_size: u8,
    /// Offset of the buffer in its first page, in 64-byte units.
    page_offset: u8,
    list: KVec<u64>,
}

/// The page list of a queue buffer. A buffer of pinned user pages lists
/// each system page, from a 64-byte boundary in the first (a ConnectX
/// takes the offset in 64ths of a page: 64-byte units with 4 KiB pages,
/// the only size the function's user contexts run with). A contiguous DMA
/// range (coherent memory, or pages allocated contiguous and mapped as one
/// range) lists pages of the largest power of two, 4 KiB at least, that
/// its bus address is aligned to and that the buffer needs, so that a
/// large queue takes few entries.
fn queue_pages(buf: &DmaBuf) -> Result<QueuePages> {
    if let Some(list) = buf.bus_pages() {
        let first = list.first().copied().ok_or(EINVAL)?;
        let offset = buf.dma_addr().checked_sub(first).ok_or(EINVAL)?;
        if kernel::page::PAGE_SIZE != PAGE || offset >= PAGE as u64 || offset % 64 != 0 {
            return Err(EINVAL);
        }
        let mut v = KVec::with_capacity(list.len(), GFP_KERNEL)?;
        v.extend_from_slice(list, GFP_KERNEL)?;
        return Ok(QueuePages {
            log_page_size: 0,
            // Below 4096 / 64.
            page_offset: (offset / 64) as u8,
            list: v,
        });
    }
    let (log_page_size, list) = pages(buf)?;
    Ok(QueuePages {
        log_page_size,
        page_offset: 0,
        list,
    })
}

/// The page list of a contiguous queue buffer (see [`queue_pages`]) and
/// its page size as a queue context's `log_page_size`.
fn pages(buf: &DmaBuf) -> Result<(u8, KVec<u64>)> {
    let addr = buf.dma_addr();
    let len = buf.len().max(1) as u64;
    let align = if addr == 0 {
        1 << 63
    } else {
        1u64 << addr.trailing_zeros()
    };
    let size = len.next_power_of_two().min(align).max(PAGE as u64);
    if addr % PAGE as u64 != 0 {
        return Err(EINVAL);
    }
    let n = len.div_ceil(size);
    let mut v = KVec::with_capacity(usize::try_from(n)?, GFP_KERNEL)?;
    for k in 0..n {
        v.push(addr + k * size, GFP_KERNEL)?;
    }
    // `size` is 4 KiB at least: the shift does not go below 0.
    let log = (size.trailing_zeros() as u8).saturating_sub(ADAPTER_PAGE_SHIFT);
    Ok((log, v))
}

/// The most CQEs a CQ of 4 KiB pages can have: a power of two whose page
/// list fits one CREATE_CQ message of the driver's command memory.
fn max_list_cqes() -> u32 {
    let room = INLINE_SIZE + MAX_BLOCKS * MAILBOX_DATA_SIZE - CreateCqIn::SIZE;
    let cqes = (room / 8).saturating_mul(PAGE / 64);
    let cqes = u32::try_from(cqes).unwrap_or(u32::MAX);
    // The largest power of two not above it (at least 1).
    1u32 << cqes.max(1).ilog2()
}

/// The memory key context of `attr`'s PD and rights, with key byte
/// `key_7_0`, not bound to a QP (what every key of the driver shares).
fn mkc_of(attr: &MrAttr, key_7_0: u8) -> Mkc {
    Mkc {
        lr: true,
        lw: attr.access.contains(Access::LOCAL_WRITE),
        rr: attr.access.contains(Access::REMOTE_READ),
        rw: attr.access.contains(Access::REMOTE_WRITE),
        a: attr.access.contains(Access::REMOTE_ATOMIC),
        qpn: 0xff_ffff,
        mkey_7_0: key_7_0,
        pd: attr.pdn,
        ..Mkc::default()
    }
}

/// log2 of `n` rounded up (0 for 0 and 1), as mlx5 encodes the
/// outstanding RDMA READ and atomic limits.
fn log2_up(n: u8) -> u8 {
    if n <= 1 {
        0
    } else {
        (u32::from(n - 1).ilog2() + 1) as u8
    }
}

/// log2 of a power of two, `EINVAL` otherwise.
fn log2_exact(n: u32) -> Result<u8> {
    if n.is_power_of_two() {
        Ok(n.trailing_zeros() as u8)
    } else {
        Err(EINVAL)
    }
}

impl CxBackend {
    /// A backend over the bound function whose state is `state` and whose
    /// BAR0 is `bar`, with UAR page `uar` and `vectors` MSI-X vectors.
    ///
    /// # Safety
    ///
    /// `state` and `bar` must stay valid until [`CxBackend::revoke_after`] has
    /// returned, which the caller guarantees to call before they go.
    pub(super) unsafe fn new(
        pdev: &pci::Device<device::Bound>,
        state: &Mutex<State<'_>>,
        bar: &CxBar,
        uar: u32,
        vectors: u16,
        fatal: Arc<super::health::Fatal>,
        live: Arc<super::events::Live>,
    ) -> Result<Arc<Self>> {
        let bar_phys = pdev.resource_start(0)?;
        let bar_len = pdev.resource_len(0)?;
        let state = StateLink(NonNull::from(state).cast());
        let bar = BarLink(NonNull::from(bar));
        let dev: &device::Device = pdev.as_ref();
        Arc::pin_init(
            pin_init!(Self {
                ctl <- new_mutex!(
                    Ctl {
                        state: Some(state),
                        quiesced: false,
                        qps: KVec::new(),
                        mrs: KVec::new(),
                        next_key: 0,
                        in_flight: 0,
                        closing: false,
                    },
                    "rmlx5_cx_ctl"
                ),
                idle <- new_condvar!("rmlx5_cx_idle"),
                db <- new_spinlock_irq!(Some(bar), "rmlx5_cx_db"),
                uar,
                bar_phys,
                bar_len,
                vectors,
                dev: dev.into(),
                port <- new_spinlock!(PortId::default(), "rmlx5_cx_port"),
                fatal,
                live,
            }),
            GFP_KERNEL,
        )
    }

    /// Cuts the backend from the function (unbind, or a probe failing
    /// after [`CxBackend::new`]): with `ctl` held and every command in
    /// flight without it finished, so that no command of the backend runs
    /// meanwhile, `take_down` takes the function down and returns whether
    /// it went quiet (every object gone from the device); then both links
    /// are dropped. Later calls fail with `ENODEV` or do nothing; destroys
    /// succeed at once if the function went quiet, else fail with `EIO` so
    /// that the memory stays with its owner (the device may still write
    /// it).
    pub(super) fn revoke_after(&self, take_down: impl FnOnce() -> bool) {
        let mut ctl = self.ctl.lock();
        ctl.closing = true;
        while ctl.in_flight > 0 {
            self.idle.wait(&mut ctl);
        }
        ctl.quiesced = take_down();
        ctl.state = None;
        *self.db.lock() = None;
        drop(ctl);
        // Destroys that waited for the revoke go on (see
        // `destroy_cmd_then`).
        self.idle.notify_all();
    }

    /// Counts a command in flight without `ctl` (see [`Entered`]); `None`
    /// once the backend is revoked or being revoked.
    fn enter<'a>(&'a self, ctl: &mut Ctl) -> Option<Entered<'a>> {
        if ctl.closing {
            return None;
        }
        let state = ctl.state.as_ref()?.0;
        ctl.in_flight = ctl.in_flight.saturating_add(1);
        Some(Entered { be: self, state })
    }

    /// Runs command `C` without holding `ctl` while the device works (see
    /// [`run_entered`]).
    fn run<C: Command>(&self, input: &C::In, pas: &[u64]) -> Result<C::Out> {
        let entered = self.enter(&mut self.ctl.lock()).ok_or(ENODEV)?;
        run_entered::<C>(&entered, input, pas)
    }

    /// Destroys an object with command `C`; destroys succeed at once on a
    /// function that went quiet (see [`CxBackend::revoke_after`]).
    fn destroy_cmd<C: Command>(&self, input: &C::In) -> Result {
        self.destroy_cmd_then::<C, ()>(input, |_| (), |_, ()| ())
    }

    /// As [`CxBackend::destroy_cmd`], with `take` dropping the object from
    /// the bookkeeping before the command is posted, so that a create
    /// getting the number back from the device at once keeps its own
    /// entry; if the destroy fails, `put_back` restores what `take`
    /// returned.
    fn destroy_cmd_then<C: Command, T>(
        &self,
        input: &C::In,
        take: impl FnOnce(&mut Ctl) -> T,
        put_back: impl FnOnce(&mut Ctl, T),
    ) -> Result<T> {
        let (entered, taken) = {
            let mut ctl = self.ctl.lock();
            loop {
                if let Some(e) = self.enter(&mut ctl) {
                    let taken = take(&mut ctl);
                    break (e, taken);
                }
                if ctl.state.is_some() {
                    // Being revoked: the function is taken down once the
                    // commands in flight are done; whether it went quiet
                    // decides this destroy.
                    self.idle.wait(&mut ctl);
                    continue;
                }
                if ctl.quiesced {
                    return Ok(take(&mut ctl));
                }
                return Err(EIO);
            }
        };
        match run_entered::<C>(&entered, input, &[]) {
            Ok(_) => Ok(taken),
            Err(e) => {
                put_back(&mut self.ctl.lock(), taken);
                Err(e)
            }
        }
    }

    /// Runs `f` with the function's state and the command bookkeeping.
    fn with_state<T>(&self, f: impl FnOnce(&mut Ctl, &mut State<'_>) -> Result<T>) -> Result<T> {
        let mut ctl = self.ctl.lock();
        if ctl.closing {
            return Err(ENODEV);
        }
        let Some(link) = &ctl.state else {
            return Err(ENODEV);
        };
        let m = link.0.as_ptr();
        // SAFETY: By the type invariant the link points at the live state
        // mutex while it is in `ctl`, which we hold.
        let mut st = unsafe { &*m }.lock();
        f(&mut ctl, &mut st)
    }

    /// Reads port 1's identity from the firmware (QUERY_HCA_VPORT_CONTEXT,
    /// then QUERY_HCA_VPORT_GID for GID 0, whose upper half is the GID
    /// prefix) and keeps it for [`Backend::port_lid`].
    pub(super) fn query_port(&self) -> Result<PortId> {
        let c = self
            .exec::<QueryHcaVportContext>(
                &QueryHcaVportContextIn {
                    other_vport: false,
                    port_num: 1,
                    vport_number: 0,
                },
                &[],
            )?
            .context;
        let g = self.exec::<QueryHcaVportGid>(
            &QueryHcaVportGidIn {
                other_vport: false,
                port_num: 1,
                vport_number: 0,
                gid_index: 0,
            },
            &[],
        )?;
        let mut prefix = [0u8; 8];
        prefix.copy_from_slice(g.gid.get(..8).ok_or(EIO)?);
        let p = PortId {
            lid: c.lid,
            sm_lid: c.sm_lid,
            state: c.port_state,
            node_guid: c.node_guid,
            port_guid: c.port_guid,
            subnet_prefix: u64::from_be_bytes(prefix),
        };
        *self.port.lock() = p;
        Ok(p)
    }

    /// Pages of a fast-registration MR ([`fast_pages_of`]).
    fn fast_pages(&self) -> Result<u32> {
        self.with_state(|_, st| Ok(fast_pages_of(st.function.caps())))
    }

    /// Runs command `C`, on a lane if it fits (see [`run_entered`]); a
    /// refusal is logged with the command's name, status and syndrome.
    fn exec<C: Command>(&self, input: &C::In, pas: &[u64]) -> Result<C::Out> {
        self.run::<C>(input, pas)
    }

    /// Stores to BAR0 offset `off` of the UAR page: 8 bytes with one
    /// 64-bit store, or 4 with one 32-bit store. Dropped once revoked,
    /// and once the function failed: nothing is rung on a device in
    /// internal error (what was posted completes in software, see
    /// `Device::set_fatal`).
    fn doorbell(&self, reg: usize, bytes: &[u8]) -> Result {
        if self.fatal.is_set() {
            return Ok(());
        }
        let off = uar_reg_offset(self.uar, reg).ok_or(EINVAL)?;
        let db = self.db.lock();
        let Some(link) = &*db else {
            return Err(ENODEV);
        };
        // SAFETY: By the type invariant the link points at the live BAR
        // mapping while it is in `db`, which we hold.
        let bar = unsafe { link.0.as_ref() };
        // writel/writeq store little-endian: the bytes land in memory
        // order, as the device reads them.
        match *bytes {
            [a, b, c, d, e, f, g, h] => {
                bar.try_write64(u64::from_le_bytes([a, b, c, d, e, f, g, h]), off)
            }
            [a, b, c, d] => bar.try_write32(u32::from_le_bytes([a, b, c, d]), off),
            _ => Err(EINVAL),
        }
    }

    /// The function's `struct device *`, for the DMA mapping shims.
    fn raw_dev(&self) -> *mut c_void {
        // `device::Device` is a transparent wrapper of the C struct (an
        // `Opaque<bindings::device>`): the address is the C struct's.
        core::ptr::from_ref::<device::Device>(&self.dev)
            .cast::<c_void>()
            .cast_mut()
    }

    /// A DMA MR (ib_core's `get_dma_mr`): a PA key over the whole bus
    /// address space, as mlx5_ib's, so that the addresses `ib_dma_map_*`
    /// give through the function are their own IOVAs.
    fn create_pa_mr(&self, attr: &MrAttr) -> Result<u32> {
        self.create_mkey(
            Mkc {
                length64: true,
                ..mkc_of(attr, 0)
            },
            ACCESS_MODE_PA,
        )
    }

    /// CREATE_MKEY of `mkc` in access mode `mode`, with no translation
    /// table in the command, the key's low byte the next of the driver's.
    fn create_mkey(&self, mkc: Mkc, mode: u8) -> Result<u32> {
        self.with_state(|ctl, st| {
            ctl.next_key = ctl.next_key.wrapping_add(1);
            let key_7_0 = ctl.next_key;
            let mut mkc = Mkc {
                mkey_7_0: key_7_0,
                ..mkc
            };
            mkc.set_access_mode(mode);
            let input = CreateMkeyIn {
                pg_access: false,
                memory_key_mkey_entry: mkc,
                translations_octword_actual_size: 0,
            };
            exec_on::<CreateMkey>(st, &input, &[]).map(|o| mkey(o.mkey_index, key_7_0))
        })
    }

    /// The MSI-X vector of EQ position `position`.
    pub(super) fn vector_of(&self, position: u16) -> u16 {
        if position < self.vectors {
            position
        } else {
            0
        }
    }

    /// QP `qpn` as last moved.
    fn tracked(ctl: &Ctl, qpn: u32) -> Option<TrackedQp> {
        ctl.qps.iter().find(|q| q.qpn == qpn).copied()
    }

    /// Records a transition of QP `qpn` the device accepted: its
    /// attributes as the model's firmware keeps them (RESET forgets them).
    fn set_tracked(ctl: &mut Ctl, qpn: u32, m: &QpModify) {
        if let Some(e) = ctl.qps.iter_mut().find(|q| q.qpn == qpn) {
            e.state = m.state;
            qp_modify::apply(&mut e.conn, m);
            if m.state == QpState::Reset {
                e.conn = ConnAttrs::default();
            }
        }
    }

    /// Moves UD QP `qpn` from `cur` as `m` asks, with the fields mlx5_ib
    /// gives a UD QP: RST2INIT the P_Key index, port and Q_Key; INIT2RTR
    /// nothing but the Q_Key or P_Key index the mask names; RTR2RTS the
    /// send PSN and a Q_Key the mask names. Like mlx5_ib, every transition
    /// writes the context `mtu` as 4096 (a datagram QP has no path).
    fn modify_ud(st: &mut State<'_>, qpn: u32, cur: QpState, m: &QpModify) -> Result {
        let a = &m.attrs;
        let port = if a.port == 0 { 1 } else { a.port };
        let named = |attr: AttrMask, opt: u32| if m.mask.contains(attr) { opt } else { 0 };
        let q_key_opt = named(AttrMask::QKEY, OPTPAR_Q_KEY);
        let ud = Qpc {
            st: ST_UD,
            pm_state: PM_STATE_MIGRATED,
            mtu: MTU_4K,
            q_key: a.qkey,
            ..Qpc::default()
        };
        match (cur, m.state) {
            (_, QpState::Reset) => {
                exec_on::<Qp2Rst>(st, &Qp2RstIn { qpn }, &[])?;
            }
            (_, QpState::Err) => {
                exec_on::<Qp2Err>(st, &Qp2ErrIn { qpn }, &[])?;
            }
            (QpState::Reset, QpState::Init) => {
                // The INIT fields are always taken (the Q_Key too).
                let input = Rst2InitQpIn {
                    qpn,
                    qpc: Qpc {
                        primary_address_path: Ads {
                            pkey_index: a.pkey_index,
                            vhca_port_num: port,
                            ..Ads::default()
                        },
                        ..ud
                    },
                    ..Rst2InitQpIn::default()
                };
                exec_on::<Rst2InitQp>(st, &input, &[])?;
            }
            (QpState::Init, QpState::Rtr) => {
                let input = Init2RtrQpIn {
                    qpn,
                    opt_param_mask: q_key_opt | named(AttrMask::PKEY_INDEX, OPTPAR_PKEY_INDEX),
                    qpc: Qpc {
                        primary_address_path: Ads {
                            pkey_index: a.pkey_index,
                            ..Ads::default()
                        },
                        ..ud
                    },
                    ..Init2RtrQpIn::default()
                };
                exec_on::<Init2RtrQp>(st, &input, &[])?;
            }
            (QpState::Rtr, QpState::Rts) => {
                let input = Rtr2RtsQpIn {
                    qpn,
                    opt_param_mask: q_key_opt,
                    qpc: Qpc {
                        next_send_psn: a.sq_psn,
                        ..ud
                    },
                    ..Rtr2RtsQpIn::default()
                };
                exec_on::<Rtr2RtsQp>(st, &input, &[])?;
            }
            _ => return Err(EINVAL),
        }
        Ok(())
    }

    /// The UAR page index of a CQ's or QP's `uar_addr` (its BAR0 offset,
    /// as [`Backend::kernel_uar`] and [`CxUar::addr`] give it).
    fn uar_index(uar_addr: u64) -> Result<u32> {
        if uar_addr % UAR_PAGE_SIZE as u64 != 0 {
            return Err(EINVAL);
        }
        u32::try_from(uar_addr / UAR_PAGE_SIZE as u64).map_err(|_| EINVAL)
    }

    /// Creates a memory key in MTT mode over the pages at bus addresses
    /// `pages` (the first holding `attr.iova`'s page offset), under `ctl`.
    fn create_mtt_mkey(
        ctl: &mut Ctl,
        st: &mut State<'_>,
        attr: &MrAttr,
        pages: &[u64],
    ) -> Result<u32> {
        let npages = u32::try_from(pages.len())?;
        let octwords = mtt_octwords(npages);
        // Whole octwords: an odd list ends with an empty entry.
        let mut mtt = KVVec::with_capacity(pages.len() + 1, GFP_KERNEL)?;
        for &p in pages {
            if p % PAGE as u64 != 0 {
                return Err(EINVAL);
            }
            mtt.push(p | MTT_EN_RD | MTT_EN_WR, GFP_KERNEL)?;
        }
        if mtt.len() % 2 != 0 {
            mtt.push(0, GFP_KERNEL)?;
        }
        ctl.next_key = ctl.next_key.wrapping_add(1);
        let key_7_0 = ctl.next_key;
        let mut mkc = Mkc {
            start_addr: attr.iova,
            len: attr.length,
            translations_octword_size: octwords,
            log_page_size: 12,
            ..mkc_of(attr, key_7_0)
        };
        mkc.set_access_mode(ACCESS_MODE_MTT);
        let input = CreateMkeyIn {
            pg_access: false,
            memory_key_mkey_entry: mkc,
            translations_octword_actual_size: octwords,
        };
        let State { bus, function, .. } = st;
        let cmd = function.cmdif().ok_or(ENODEV)?;
        let need = cmd.ext_blocks::<CreateMkey>(mtt.len());
        if need == 0 {
            return exec_on::<CreateMkey>(st, &input, &mtt).map(|o| mkey(o.mkey_index, key_7_0));
        }
        // A table longer than entry 0's pool: its blocks past the pool are
        // pages of their own, chained after it (as mlx5_core chains a long
        // message's blocks).
        let ext = bus.alloc_ext(need).inspect_err(|_| bus.free_ext(false))?;
        let kept_before = cmd.stuck_entries() & 1 != 0;
        let r = cmd.exec_ext::<CreateMkey, _>(bus, &input, &mtt, &ext);
        // Entry 0 kept by the device since this command: it may still read
        // the blocks.
        bus.free_ext(!kept_before && cmd.stuck_entries() & 1 != 0);
        let o = r.map_err(|e| cmd_err(bus.pdev(), e))?;
        bus.live().note(OP_CREATE_MKEY);
        Ok(mkey(o.mkey_index, key_7_0))
    }
}

/// Pages of a fast-registration MR on a function with capabilities `c`:
/// what one UMR's translation list holds in the driver's page list (one
/// 4 KiB page, 512 entries, as on the software HCA), at most what the
/// device's KLM/MTT list size allows.
fn fast_pages_of(c: &HcaCap) -> u32 {
    let device = 1u32
        .checked_shl(u32::from(c.log_max_klm_list_size))
        .unwrap_or(u32::MAX);
    device.min(crate::ib::mr::MAX_FAST_PAGES)
}

/// Runs command `C` on the function's state.
fn exec_on<C: Command>(st: &mut State<'_>, input: &C::In, pas: &[u64]) -> Result<C::Out> {
    let State { bus, function, .. } = st;
    let cmd = function.cmdif().ok_or(ENODEV)?;
    let out = cmd
        .exec::<C, _>(bus, input, pas)
        .map_err(|e| cmd_err(bus.pdev(), e))?;
    bus.live().note(C::OPCODE);
    Ok(out)
}

/// Runs command `C` for a command counted in flight (`e`): on a free lane
/// if it fits and `cx_cmd_mode` allows, waiting for the device without
/// the function's lock (`cx/events.rs`), else through entry 0 with the
/// lock held while polling. Waits for a free lane if all are taken, at
/// most the command timeout.
fn run_entered<C: Command>(e: &Entered<'_>, input: &C::In, pas: &[u64]) -> Result<C::Out> {
    let m = e.state();
    let timeout_ms = u64::from(crate::module_parameters::cx_cmd_timeout_ms.value()).max(1);
    let begun = Instant::<Monotonic>::now();
    loop {
        let mut st = m.lock();
        let State { bus, function, .. } = &mut *st;
        let cmd = function.cmdif().ok_or(ENODEV)?;
        if events::mode() == MODE_ENTRY0 || !cmd.lane_fits::<C>(pas.len()) {
            COUNTERS.entry0.fetch_add(1, Ordering::Relaxed);
            let out = cmd
                .exec::<C, _>(bus, input, pas)
                .map_err(|e| cmd_err(bus.pdev(), e))?;
            bus.live().note(C::OPCODE);
            return Ok(out);
        }
        match cmd.start::<C, _>(bus, input, pas) {
            Ok(Started::Answered(out)) => {
                bus.live().note(C::OPCODE);
                return Ok(out);
            }
            Ok(Started::Posted(t)) => {
                let ev = bus.events().clone();
                let mem = bus.cmd_mem();
                let fatal = bus.fatal_flag().clone();
                let bar = bus.bar();
                ev.lane_taken_by(&t);
                drop(st);
                let waited = ev.wait(&mem, bar, &t, &fatal, timeout_ms);
                let mut st = m.lock();
                let State { bus, function, .. } = &mut *st;
                let r = match function.cmdif() {
                    Some(cmd) => match waited {
                        Ok(()) => cmd.finish::<C, _>(bus, t),
                        Err(why) => cmd.give_up_cmd::<C, _>(bus, t, why),
                    }
                    .map_err(|e| cmd_err(bus.pdev(), e)),
                    // Not while the command is counted in flight: the
                    // function is taken down only after revoke.
                    None => Err(ENODEV),
                };
                if r.is_ok() {
                    bus.live().note(C::OPCODE);
                }
                drop(st);
                ev.lane_freed();
                return r;
            }
            Err(crate::mlx5_cmdif::error::Error::QueueBusy { .. })
                if u64::try_from(begun.elapsed().as_millis()).unwrap_or(u64::MAX) < timeout_ms =>
            {
                let ev = bus.events().clone();
                // Read under the lock that saw every lane busy: a lane
                // freed from here on is not missed.
                let seen = ev.lanes_freed();
                drop(st);
                ev.wait_lane(seen);
            }
            Err(e) => return Err(cmd_err(bus.pdev(), e)),
        }
    }
}

impl Backend for CxBackend {
    fn live_objects(&self) -> Option<crate::backend::LiveObjects> {
        Some(self.live.snapshot())
    }

    fn info(&self) -> Result<DeviceInfo> {
        self.with_state(|_, st| {
            let c = st.function.caps();
            let pow = |log: u8| 1u32.checked_shl(u32::from(log)).unwrap_or(u32::MAX);
            Ok(DeviceInfo {
                max_qp: pow(c.log_max_qp),
                max_cq: pow(c.log_max_cq),
                max_pd: pow(c.log_max_pd),
                max_mr: pow(c.log_max_mkey),
                // As many CQEs as one CREATE_CQ's page list reaches in
                // 4 KiB pages (a user CQ is pinned page by page).
                max_cqe: pow(c.log_max_cq_sz).min(max_list_cqes()),
                max_qp_rd_atom: pow(c.log_max_ra_res_qp),
                lid: 0,
                port_state: 0,
                sm_lid: 0,
                node_guid: 0,
                subnet_prefix: 0,
                max_fast_reg_pages: fast_pages_of(c),
                part_id: u32::from(st.bus.pdev().device_id()),
            })
        })
        .and_then(|i| {
            // The port as the firmware has it now (the state and LID
            // change with the fabric).
            let p = self.query_port()?;
            Ok(DeviceInfo {
                lid: p.lid,
                port_state: p.state,
                sm_lid: p.sm_lid,
                node_guid: p.node_guid,
                subnet_prefix: p.subnet_prefix,
                ..i
            })
        })
    }

    fn caps(&self) -> Result<Caps> {
        self.with_state(|_, st| {
            let c = st.function.caps();
            let d = Caps::DEFAULT;
            let pow = |log: u8| 1u32.checked_shl(u32::from(log)).unwrap_or(u32::MAX);
            let sq_wqe = u32::from(c.max_wqe_sz_sq);
            // What the function reports, within what the driver's WQE
            // builders and the provider handle (the defaults).
            Ok(Caps {
                max_qp_rd_atom: pow(c.log_max_ra_req_qp).min(u32::from(d.max_qp_rd_atom)) as u8,
                max_qp_dest_rd_atom: pow(c.log_max_ra_res_qp).min(u32::from(d.max_qp_dest_rd_atom))
                    as u8,
                max_send_sge: (sq_wqe.saturating_sub(48) / 16).min(d.max_send_sge),
                max_recv_sge: (u32::from(c.max_wqe_sz_rq) / 16).min(d.max_recv_sge),
                max_inline_data: sq_wqe.saturating_sub(52).min(d.max_inline_data),
                max_log_sq_wqebbs: c.log_max_qp_sz.min(d.max_log_sq_wqebbs),
                max_log_rq_wqes: c.log_max_qp_sz.min(d.max_log_rq_wqes),
                max_log_cq_size: c.log_max_cq_sz.min(d.max_log_cq_size),
                max_log_eq_size: c.log_max_eq_sz.min(d.max_log_eq_size),
                max_msg_size: pow(c.log_max_msg).min(d.max_msg_size),
                max_fast_reg_pages: fast_pages_of(c),
            })
        })
    }

    fn dma_device(&self) -> Option<ARef<device::Device>> {
        Some(self.dev.clone())
    }

    fn alloc_uar(self: Arc<Self>) -> Result<KBox<dyn UserUar>> {
        // A process maps whole system pages: with pages larger than the
        // 4 KiB UAR page, one would reach other contexts' UARs.
        if kernel::page::PAGE_SIZE != UAR_PAGE_SIZE {
            return Err(EOPNOTSUPP);
        }
        let index = self.exec::<AllocUar>(&AllocUarIn::default(), &[])?.uar;
        let end = (u64::from(index) + 1) * UAR_PAGE_SIZE as u64;
        // A page of the initialization segment (the command doorbell, the
        // health buffer) is never a process's, whatever the firmware says.
        if end > self.bar_len || super::bar::uar_in_init_seg(index) {
            let _ = self.destroy_cmd::<DeallocUar>(&DeallocUarIn { uar: index });
            return Err(EIO);
        }
        let uar = CxUar {
            be: self,
            index,
            revoked: AtomicBool::new(false),
            given_back: AtomicBool::new(false),
        };
        let uar: KBox<dyn UserUar> = KBox::new(uar, GFP_KERNEL)?;
        Ok(uar)
    }

    fn port_lid(&self) -> u16 {
        self.port.lock().lid
    }

    fn max_user_mr(&self) -> u64 {
        // CREATE_MKEY carries the whole translation table, in extra blocks
        // past entry 0's pool if need be: as many pages as the longest
        // such message holds, less one for the region's offset in its
        // first page and one for the padding.
        let room = MAX_EXT_MSG - CreateMkeyIn::SIZE;
        ((room / 8) as u64).saturating_sub(2) * PAGE as u64
    }

    fn peer_of_dlid(&self, dlid: u16) -> Option<u16> {
        // The device takes the LID itself; only unicast LIDs name a port.
        (dlid != 0 && dlid < 0xc000).then_some(dlid)
    }

    fn dlid_of_peer(&self, peer: u16) -> u16 {
        peer
    }

    fn alloc_queue(&self, len: usize) -> Result<DmaBuf> {
        let len = len.max(1).next_multiple_of(PAGE);
        self.with_state(|_, st| {
            let buf: Arc<dyn crate::mem::DmaBacking> =
                Arc::new(st.bus.alloc_buf(len)?, GFP_KERNEL)?;
            Ok(DmaBuf::shared(buf))
        })
    }

    fn kernel_uar(&self) -> Result<u64> {
        // Where the UAR page is in BAR0: the commands name it by index.
        Ok(uar_reg_offset(self.uar, 0).ok_or(EINVAL)? as u64)
    }

    fn alloc_pd(&self) -> Result<u32> {
        Ok(self.exec::<AllocPd>(&AllocPdIn::default(), &[])?.pd)
    }

    fn dealloc_pd(&self, pdn: u32) -> Result {
        self.destroy_cmd::<DeallocPd>(&DeallocPdIn { pd: pdn })
    }

    fn create_mr(&self, attr: &MrAttr, region: MrRegion) -> Result<u32> {
        let (addr, len) = match region {
            MrRegion::Kernel { addr, len } => (addr, len),
            MrRegion::DirectMap { .. } => return self.create_pa_mr(attr),
            // User MRs come with their pages' bus addresses.
            MrRegion::User { .. } => return Err(EINVAL),
        };
        let len = usize::try_from(len)?;
        let raw = self.raw_dev();
        let npages = (addr % PAGE as u64 + len as u64).div_ceil(PAGE as u64);
        // Everything that can fail for want of memory, before the mapping.
        let mut list = KVec::with_capacity(usize::try_from(npages)?, GFP_KERNEL)?;
        self.with_state(|ctl, st| {
            ctl.mrs.reserve(1, GFP_KERNEL)?;
            let mut dma = 0u64;
            // SAFETY: `raw` is the function's device, kept alive by
            // `self.dev`; the shim checks that the range is in the direct
            // map and writes `dma` only on success.
            let r = unsafe { rmlx5_shim_dma_map(raw, addr as *mut c_void, len, &mut dma) };
            kernel::error::to_result(r)?;
            let unmap = || {
                // SAFETY: `dma` was mapped just above for `len` bytes and
                // no key uses it.
                unsafe { rmlx5_shim_dma_unmap(raw, dma, len) }
            };
            // The device adds the key's start within its first page, so
            // the mapping must keep the offset.
            if dma % PAGE as u64 != addr % PAGE as u64 {
                unmap();
                return Err(EINVAL);
            }
            let first = dma - dma % PAGE as u64;
            for k in 0..npages {
                // Within the capacity reserved above: no allocation.
                if list.push(first + k * PAGE as u64, GFP_KERNEL).is_err() {
                    unmap();
                    return Err(ENOMEM);
                }
            }
            let key = match CxBackend::create_mtt_mkey(ctl, st, attr, &list) {
                Ok(key) => key,
                Err(e) => {
                    unmap();
                    return Err(e);
                }
            };
            // Within the capacity reserved above: no allocation.
            if ctl.mrs.push(Mapping { key, dma, len }, GFP_KERNEL).is_err() {
                let _ = exec_on::<DestroyMkey>(
                    st,
                    &DestroyMkeyIn {
                        mkey_index: key >> 8,
                    },
                    &[],
                );
                unmap();
                return Err(ENOMEM);
            }
            Ok(key)
        })
    }

    fn create_user_mr(&self, attr: &MrAttr, region: MrRegion, pages: &[u64]) -> Result<u32> {
        let MrRegion::User { len, .. } = region else {
            return Err(EINVAL);
        };
        // The pages span the region from its offset in the first page.
        let offset = attr.iova % PAGE as u64;
        let npages = (offset + len).div_ceil(PAGE as u64);
        if pages.len() as u64 != npages || attr.length != len {
            return Err(EINVAL);
        }
        // The mapping belongs to the caller (uverbs), which keeps it until
        // the key is destroyed.
        self.with_state(|ctl, st| CxBackend::create_mtt_mkey(ctl, st, attr, pages))
    }

    fn destroy_mr(&self, key: u32, _region: MrRegion) -> Result {
        let input = DestroyMkeyIn {
            mkey_index: key >> 8,
        };
        let mapping = self.destroy_cmd_then::<DestroyMkey, _>(
            &input,
            |ctl| {
                let i = ctl.mrs.iter().position(|m| m.key == key)?;
                ctl.mrs.remove(i).ok()
            },
            |ctl, m| {
                if let Some(m) = m.filter(|m| !ctl.mrs.iter().any(|x| x.key == m.key)) {
                    // As for QPs: the mapping stays (leaked) if not kept.
                    if ctl.mrs.push(m, GFP_KERNEL).is_err() {
                        pr_warn!("rmlx5_cx: MR {:#x} lost its DMA mapping record\n", key);
                    }
                }
            },
        )?;
        if let Some(m) = mapping {
            // SAFETY: `m` is a mapping made by `create_mr` on this device
            // and not unmapped since (it was in `mrs`); the key that used
            // it is destroyed, or the function went quiet.
            unsafe { rmlx5_shim_dma_unmap(self.raw_dev(), m.dma, m.len) };
        }
        Ok(())
    }

    fn create_fast_mr(&self, pdn: u32, max_pages: u32, list: &DmaBuf) -> Result<FastKeys> {
        if max_pages == 0 || max_pages > self.fast_pages()? {
            return Err(EINVAL);
        }
        // The page list's own key: a PA key over the list buffer (coherent
        // memory of the function, one contiguous bus range), local read
        // only, which the registration WQE's data segment names as
        // mlx5_ib names its descriptors under the PD's local DMA lkey.
        let list_key = self.create_mkey(
            Mkc {
                lr: true,
                qpn: 0xff_ffff,
                pd: pdn,
                start_addr: list.dma_addr(),
                len: list.len() as u64,
                ..Mkc::default()
            },
            ACCESS_MODE_PA,
        )?;
        // The key itself, as mlx5_ib's alloc_mr makes it: free, UMR
        // enabled, MTT mode with room for `max_pages` entries (two per
        // octoword), no translation until a registration WQE writes one.
        let key = self.create_mkey(
            Mkc {
                free: true,
                umr_en: true,
                qpn: 0xff_ffff,
                pd: pdn,
                translations_octword_size: max_pages.div_ceil(2),
                log_page_size: 12,
                ..Mkc::default()
            },
            ACCESS_MODE_MTT,
        );
        match key {
            Ok(key) => Ok(FastKeys { key, list_key }),
            Err(e) => {
                let _ = self.destroy_cmd::<DestroyMkey>(&DestroyMkeyIn {
                    mkey_index: list_key >> 8,
                });
                Err(e)
            }
        }
    }

    fn destroy_fast_mr(&self, keys: FastKeys, _list: &DmaBuf) -> Result {
        // By index: a registration may have changed the key's last byte.
        self.destroy_cmd::<DestroyMkey>(&DestroyMkeyIn {
            mkey_index: keys.key >> 8,
        })?;
        self.destroy_cmd::<DestroyMkey>(&DestroyMkeyIn {
            mkey_index: keys.list_key >> 8,
        })
    }

    fn create_cq(&self, attr: &CqAttr, mem: [&DmaBuf; 2]) -> Result<u32> {
        let [buf, dbr] = mem;
        let QueuePages {
            log_page_size,
            page_offset,
            list,
        } = queue_pages(buf)?;
        let input = CreateCqIn {
            cq_context: Cqc {
                log_cq_size: attr.log_size,
                log_page_size,
                page_offset,
                uar_page: CxBackend::uar_index(attr.uar_addr)?,
                c_eqn_or_apu_element: u32::from(attr.eqn),
                dbr_addr: dbr.dma_addr(),
                ..Cqc::default()
            },
        };
        Ok(self.exec::<CreateCq>(&input, &list)?.cqn)
    }

    fn destroy_cq(&self, cqn: u32, _mem: [&DmaBuf; 2]) -> Result {
        self.destroy_cmd::<DestroyCq>(&DestroyCqIn { cqn })
    }

    fn arm_cq(&self, cqn: u32, arm: CqArm) -> Result {
        self.doorbell(
            UAR_CQ_DOORBELL_OFFSET,
            &UarCqDoorbell { arm, cqn }.to_bytes(),
        )
    }

    fn create_eq(
        &self,
        log_size: u8,
        vector: u16,
        async_events: bool,
        ring: &DmaBuf,
    ) -> Result<u8> {
        let events: &[EventType] = if async_events { &ASYNC_EVENTS } else { &[] };
        let (log_page_size, list) = pages(ring)?;
        let input = CreateEqIn {
            eq_context_entry: Eqc {
                log_eq_size: log_size,
                log_page_size,
                uar_page: self.uar,
                intr: self.vector_of(vector),
                ..Eqc::default()
            },
            event_bitmask: event_mask(events),
        };
        Ok(self.exec::<CreateEq>(&input, &list)?.eq_number)
    }

    fn destroy_eq(&self, eqn: u8, _ring: &DmaBuf) -> Result {
        self.destroy_cmd::<DestroyEq>(&DestroyEqIn { eq_number: eqn })
    }

    fn ring_eq(&self, eqn: u8, ci: u32) -> Result {
        let mut word = [0u8; 4];
        EqDoorbell { eqn, ci }.encode(&mut word);
        self.doorbell(UAR_EQ_ARM_OFFSET, &word)
    }

    fn create_qp(&self, attr: &QpAttr, mem: [&DmaBuf; 2]) -> Result<u32> {
        // No GSI QP on a function: its port is InfiniBand and has no MADs.
        let st = match attr.service {
            QpService::Rc => ST_RC,
            QpService::Ud => ST_UD,
            QpService::Gsi => return Err(EOPNOTSUPP),
        };
        let [buf, dbr] = mem;
        let rq_bytes = u64::from(attr.rq_wqes) * u64::from(attr.rq_stride);
        // One buffer, the RQ at its start and the SQ after it: the layout
        // the device derives from the sizes.
        if attr.rq_buf_addr != buf.dma_addr() || attr.sq_buf_addr != buf.dma_addr() + rq_bytes {
            return Err(EINVAL);
        }
        let stride = attr.rq_stride / 16;
        let QueuePages {
            log_page_size,
            page_offset,
            list,
        } = queue_pages(buf)?;
        let input = CreateQpIn {
            ece: 0,
            qpc: Qpc {
                st,
                pm_state: PM_STATE_MIGRATED,
                pd: attr.pdn,
                uar_page: CxBackend::uar_index(attr.uar_addr)?,
                log_rq_size: log2_exact(attr.rq_wqes)?,
                log_rq_stride: log2_exact(stride)?,
                log_sq_size: log2_exact(attr.sq_wqebbs)?,
                rq_type: RQ_TYPE_REGULAR,
                log_page_size,
                page_offset,
                cqn_snd: attr.send_cqn,
                cqn_rcv: attr.recv_cqn,
                dbr_addr: dbr.dma_addr(),
                ..Qpc::default()
            },
        };
        let entered = self.enter(&mut self.ctl.lock()).ok_or(ENODEV)?;
        let qpn = run_entered::<CreateQp>(&entered, &input, &list)?.qpn;
        let t = TrackedQp {
            qpn,
            service: attr.service,
            state: QpState::Reset,
            conn: ConnAttrs::default(),
        };
        let pushed = self.ctl.lock().qps.push(t, GFP_KERNEL);
        if let Err(e) = pushed {
            // Without its entry the QP could not be moved: undo it.
            let _ = run_entered::<DestroyQp>(&entered, &DestroyQpIn { qpn }, &[]);
            return Err(e.into());
        }
        Ok(qpn)
    }

    fn modify_qp(&self, qpn: u32, m: &QpModify) -> Result {
        if !m.mask.contains(AttrMask::STATE) {
            // Every command moves the QP; changing attributes in place
            // (INIT2INIT, RTS2RTS) is not done.
            return Err(EOPNOTSUPP);
        }
        let a = &m.attrs;
        let rc = Qpc {
            st: ST_RC,
            pm_state: PM_STATE_MIGRATED,
            ..Qpc::default()
        };
        let port = if a.port == 0 { 1 } else { a.port };
        let caps = self.caps()?;
        self.with_state(|ctl, st| {
            let t = CxBackend::tracked(ctl, qpn).ok_or(EINVAL)?;
            // The IB spec's transition table and value ranges, as the
            // software HCA checks them (and mlx5_ib with
            // ib_modify_qp_is_ok): a request the firmware would refuse
            // (INIT2RTR without a path, a wrong current state) is refused
            // here, before any command.
            crate::hca_model::qp_modify::check(t.service, t.state, m, &caps).map_err(|_| EINVAL)?;
            if t.service == QpService::Ud {
                CxBackend::modify_ud(st, qpn, t.state, m)?;
                CxBackend::set_tracked(ctl, qpn, m);
                return Ok(());
            }
            match (t.state, m.state) {
                (_, QpState::Reset) => {
                    exec_on::<Qp2Rst>(st, &Qp2RstIn { qpn }, &[])?;
                }
                (_, QpState::Err) => {
                    exec_on::<Qp2Err>(st, &Qp2ErrIn { qpn }, &[])?;
                }
                (QpState::Reset, QpState::Init) => {
                    let input = Rst2InitQpIn {
                        qpn,
                        qpc: Qpc {
                            rre: a.access.contains(Access::REMOTE_READ),
                            rwe: a.access.contains(Access::REMOTE_WRITE),
                            rae: a.access.contains(Access::REMOTE_ATOMIC),
                            primary_address_path: Ads {
                                pkey_index: a.pkey_index,
                                vhca_port_num: port,
                                ..Ads::default()
                            },
                            ..rc
                        },
                        ..Rst2InitQpIn::default()
                    };
                    exec_on::<Rst2InitQp>(st, &input, &[])?;
                }
                (QpState::Init, QpState::Rtr) => {
                    let input = Init2RtrQpIn {
                        qpn,
                        qpc: Qpc {
                            mtu: a.path_mtu,
                            remote_qpn: a.dest.qpn,
                            next_rcv_psn: a.rq_psn,
                            min_rnr_nak: a.min_rnr_timer,
                            log_rra_max: log2_up(a.max_dest_rd_atomic),
                            primary_address_path: Ads {
                                // The ULP API names the peer by its LID.
                                rlid: a.dest.hca,
                                sl: a.sl,
                                vhca_port_num: port,
                                ..Ads::default()
                            },
                            ..rc
                        },
                        ..Init2RtrQpIn::default()
                    };
                    exec_on::<Init2RtrQp>(st, &input, &[])?;
                }
                (QpState::Rtr, QpState::Rts) => {
                    let input = Rtr2RtsQpIn {
                        qpn,
                        qpc: Qpc {
                            next_send_psn: a.sq_psn,
                            retry_count: a.retry_cnt,
                            rnr_retry: a.rnr_retry,
                            log_sra_max: log2_up(a.max_rd_atomic),
                            primary_address_path: Ads {
                                ack_timeout: a.timeout,
                                ..Ads::default()
                            },
                            ..rc
                        },
                        ..Rtr2RtsQpIn::default()
                    };
                    exec_on::<Rtr2RtsQp>(st, &input, &[])?;
                }
                _ => return Err(EINVAL),
            }
            CxBackend::set_tracked(ctl, qpn, m);
            Ok(())
        })
    }

    fn qp_state(&self, qpn: u32) -> Result<QpState> {
        Ok(self.query_qp(qpn)?.0)
    }

    fn query_qp(&self, qpn: u32) -> Result<(QpState, ConnAttrs)> {
        // The state as the device has it (QUERY_QP: a QP the device moved
        // to ERR after an error completion reads ERR), the attributes as
        // the driver set them.
        self.with_state(|ctl, st| {
            let out = exec_on::<QueryQp>(st, &QueryQpIn { qpn }, &[])?;
            let state = state_to_ib(out.qpc.state)
                .and_then(|ib| QpState::from_raw(u32::from(ib)))
                .ok_or(EIO)?;
            let e = ctl.qps.iter_mut().find(|q| q.qpn == qpn).ok_or(EINVAL)?;
            e.state = state;
            Ok((state, e.conn))
        })
    }

    fn destroy_qp(&self, qpn: u32, _mem: [&DmaBuf; 2]) -> Result {
        self.destroy_cmd_then::<DestroyQp, _>(
            &DestroyQpIn { qpn },
            |ctl| {
                let i = ctl.qps.iter().position(|q| q.qpn == qpn)?;
                ctl.qps.remove(i).ok()
            },
            |ctl, t| {
                // Unless the device ran the destroy after all and gave the
                // number to a new QP meanwhile, which keeps its own entry.
                if let Some(t) = t.filter(|t| CxBackend::tracked(ctl, t.qpn).is_none()) {
                    // Room was there a moment ago; if not, the QP can no
                    // longer be moved, only destroyed again.
                    if ctl.qps.push(t, GFP_KERNEL).is_err() {
                        pr_warn!("rmlx5_cx: QP {:#x} lost its tracking\n", qpn);
                    }
                }
            },
        )
        .map(|_| ())
    }

    fn ring_send(&self, _qpn: u32, ctrl: &[u8; 16], half: u8) -> Result {
        let reg = bf_half_offset(0, half).map_err(|_| EINVAL)?;
        self.doorbell(reg, &send_doorbell(ctrl))
    }

    fn ring_recv(&self, _qpn: u32) {
        // The device reads the receive counter from the doorbell record.
    }

    fn run(&self) {
        // The device runs by itself.
    }
}

/// The UAR page of a user context on the function: a page of BAR0 the
/// function gave with ALLOC_UAR, mapped into the process write-combined
/// (BlueFlame copies and doorbells are stores to it), and freed with
/// DEALLOC_UAR after the context's objects, or when the context is
/// disassociated ([`UserUar::revoke`]).
struct CxUar {
    be: Arc<CxBackend>,
    index: u32,
    /// Revoked: no longer mapped anywhere. The mappings are tracked by
    /// the C side under this address.
    revoked: AtomicBool,
    /// Given back to the device (DEALLOC_UAR sent) before the drop.
    given_back: AtomicBool,
}

impl CxUar {
    fn owner(&self) -> *const c_void {
        core::ptr::from_ref(self).cast()
    }

    fn dealloc(&self) {
        if let Err(e) = self
            .be
            .destroy_cmd::<DeallocUar>(&DeallocUarIn { uar: self.index })
        {
            pr_warn!("rmlx5: UAR {} not freed: {:?}\n", self.index, e);
        }
    }
}

impl UserUar for CxUar {
    fn addr(&self) -> u64 {
        u64::from(self.index) * UAR_PAGE_SIZE as u64
    }

    fn bar_page(&self) -> Result<u64> {
        // Only while the function is bound: the page is the function's.
        if self.be.ctl.lock().state.is_none() {
            return Err(ENODEV);
        }
        Ok(self.be.bar_phys + self.addr())
    }

    fn mmap(&self, vma: &VmaNew) -> Result {
        // Only while the function is bound: the page is the function's.
        let ctl = self.be.ctl.lock();
        if ctl.state.is_none() {
            return Err(ENODEV);
        }
        let phys = self.be.bar_phys + self.addr();
        // SAFETY: `vma` is the VMA being set up by this mmap call (ours
        // for its duration); `phys` is a UAR page of the function's BAR0,
        // which stays the function's until the page is revoked (`revoke`,
        // before the function goes: unbind disassociates every context,
        // `uverbs/node.rs`); the C side refuses the mapping once
        // `revoked` is set and tracks it under `owner()` until the VMA
        // closes. `revoked` is an `AtomicBool`, laid out as a `bool`, and
        // lives as long as `self`, which outlives every mapping (the
        // context holds its file and the file holds the context).
        let r = unsafe {
            rmlx5_io_map_page(
                vma.as_ptr().cast(),
                phys,
                true,
                self.owner(),
                self.revoked.as_ptr().cast_const(),
            )
        };
        kernel::error::to_result(r)
    }

    fn revoke(&self) {
        if self.revoked.swap(true, Ordering::AcqRel) {
            return;
        }
        // SAFETY: `owner()` names this UAR's tracked mappings; the flag
        // the C side reads under its lock is set above. Process context.
        unsafe { rmlx5_io_revoke(self.owner()) };
    }

    fn give_back(&self) {
        // Only once no process can store to the page any more.
        if self.revoked.load(Ordering::Acquire) && !self.given_back.swap(true, Ordering::AcqRel) {
            self.dealloc();
        }
    }
}

impl Drop for CxUar {
    fn drop(&mut self) {
        // Once the function is gone, so is the UAR; a disassociated
        // context's was given back already.
        if !*self.given_back.get_mut() {
            self.dealloc();
        }
    }
}
