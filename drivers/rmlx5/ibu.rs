// SPDX-License-Identifier: GPL-2.0

//! rmlx5's ib_devices as uverbs devices with mlx5_ib's user ABI: the
//! objects rdma-core's own mlx5 provider (libmlx5) makes through
//! ib_uverbs, on queues in the process's own memory.
//!
//! `ib_user.c` parses mlx5_ib's driver data (`rdma/mlx5-abi.h`) and calls
//! these functions with plain arguments; the checks on what they mean
//! (geometry against the device's limits, alignment, memory that can be
//! pinned) and the objects are here. Every object is an object of the
//! layers the rest of rmlx5 uses: a [`Cq`] and a [`UserQp`] of
//! `drivers/rmlx5/ib`, on pages of the process pinned like ib_umem pins
//! them (charged to `RLIMIT_MEMLOCK`), and reached by the software HCA
//! through their `vmap`: no copy, and no contiguity asked of the process.
//!
//! The provider rings no KICK, so each CQ and QP is trapped
//! (`hca/trap.rs`): its records are read by the UAR trap. Objects are
//! handed to C as `KBox::into_raw` pointers and taken back by their
//! destroy function only when destroy succeeds; ib_uverbs destroys every
//! object of a context before the device can go, and holds a module
//! reference while a context is open.
//!
//! On a ConnectX function the same objects are made by command: the pinned
//! pages are mapped for the function's DMA one by one and given to
//! CREATE_CQ and CREATE_QP as page lists (the firmware keeps a table of
//! them), and each UAR page of a context is a page of BAR0 the function
//! gave with ALLOC_UAR ([`IbuUars`]), which `ib_user.c` maps into the
//! process write-combined: the provider's doorbells are stores to the
//! device, and nothing is trapped.

use kernel::{
    ffi::{
        c_int,
        c_void, //
    },
    prelude::*,
    sync::Arc,
};

use crate::backend::UserUar;
use crate::hca_model::doorbell::CQ_ARM_RECORD_UNARMED;
use crate::ib::{
    cq::{
        Cq,
        CqMem,
        EventSink, //
    },
    mr::Pd,
    qp::QpAttrC,
    uqp::{
        UserQp,
        UserQpMem, //
    },
};
use crate::mem::{
    pages::{
        PinnedDma,
        PinnedPages, //
    },
    DmaBuf,
};
use crate::mlx5_core::device::Device;
use crate::mlx5_prm::{
    cqe::CQE_SIZE,
    doorbell::{
        CQ_DBR_ARM_OFFSET,
        CQ_DBR_SIZE,
        QP_DBR_SIZE, //
    },
    wqe::WQEBB_SIZE,
};
use crate::rmlx5_abi::uapi;
use crate::uverbs::objects::Umr;

extern "C" {
    /// `ib_user.c`: a completion event of the `struct ib_cq` at `ibcq`
    /// (BH context).
    fn rmlx5_ibu_cq_comp(ibcq: *mut c_void);
    /// `ib_user.c`: async event `event_type` (an mlx5 EQE type) of the
    /// `struct ib_cq` (`is_qp` false) or `struct ib_qp` at `obj`.
    fn rmlx5_ibu_async(obj: *mut c_void, is_qp: bool, event_type: u8);
}

fn errno(e: Error) -> c_int {
    e.to_errno()
}

/// The device `rmlx5_<index>`.
fn device(index: c_int) -> Result<Arc<Device>> {
    crate::mlx5_core::device::get(usize::try_from(index).map_err(|_| ENODEV)?)
}

/// Whether `rmlx5_<index>` takes user contexts of rdma-core's provider: 0,
/// or `-ENODEV` for a device that is gone.
#[no_mangle]
pub extern "C" fn rmlx5_ibu_supported(index: c_int) -> c_int {
    device(index).map_or_else(errno, |_| 0)
}

/// The UAR pages of a user context on a ConnectX function: pages of BAR0
/// from ALLOC_UAR, freed (DEALLOC_UAR) when the context goes, after its
/// objects.
pub struct IbuUars {
    uars: KVec<KBox<dyn UserUar>>,
}

impl IbuUars {
    /// The address CQs and QPs name UAR page `k` by.
    fn addr(&self, k: usize) -> Result<u64> {
        Ok(self.uars.get(k).ok_or(EINVAL)?.addr())
    }
}

/// The UAR pages of a new context of `rmlx5_<index>`: `n` pages of BAR0
/// for a ConnectX function (in `*out`), none for a software HCA (`*out`
/// null: `ib_user.c` gives it ordinary pages, trapped).
///
/// # Safety
///
/// `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ibu_uars_new(index: c_int, n: u32, out: *mut *mut IbuUars) -> c_int {
    let r = (|| -> Result<Option<KBox<IbuUars>>> {
        let dev = device(index)?;
        if dev.be.dma_device().is_none() {
            return Ok(None);
        }
        let n = usize::try_from(n)?;
        let mut uars = KVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            // Within the capacity: no allocation fails here; on an error
            // the pages taken so far are freed as `uars` drops.
            uars.push(dev.be.clone().alloc_uar()?, GFP_KERNEL)?;
        }
        Ok(Some(KBox::new(IbuUars { uars }, GFP_KERNEL)?))
    })();
    match r {
        Ok(u) => {
            // SAFETY: The caller passes a writable slot.
            unsafe { out.write(u.map_or(core::ptr::null_mut(), KBox::into_raw)) };
            0
        }
        Err(e) => errno(e),
    }
}

/// Frees a context's UAR pages.
///
/// # Safety
///
/// `uars` comes from `rmlx5_ibu_uars_new` (or is null) and is not used
/// afterwards; no object of the context is left.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ibu_uars_free(uars: *mut IbuUars) {
    if !uars.is_null() {
        // SAFETY: From `KBox::into_raw`; the caller gives it up.
        drop(unsafe { KBox::from_raw(uars) });
    }
}

/// The physical address of UAR page `k` of a context, to map into the
/// process; `-EINVAL` past its pages, `-ENODEV` once the function is gone.
///
/// # Safety
///
/// `uars` is live; `phys` is writable.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ibu_uars_page(
    uars: *const IbuUars,
    k: u32,
    phys: *mut u64,
) -> c_int {
    // SAFETY: The caller passes a live context's pages.
    let Some(u) = (unsafe { uars.as_ref() }) else {
        return EINVAL.to_errno();
    };
    let r = usize::try_from(k)
        .ok()
        .and_then(|k| u.uars.get(k))
        .ok_or(EINVAL)
        .and_then(|p| p.bar_page());
    match r {
        Ok(a) => {
            // SAFETY: The caller passes a writable slot.
            unsafe { phys.write(a) };
            0
        }
        Err(e) => errno(e),
    }
}

/// A store to a trapped UAR page faulted and the page was mapped (called by
/// the fault handler, in the faulting process). The trap reads the records
/// of the whole fabric and starts its poller.
#[no_mangle]
pub extern "C" fn rmlx5_ibu_uar_fault() {
    if let Ok(soft) = crate::soft() {
        soft.uar_fault();
    }
}

/// The fault handler completed a store of `size` bytes, `value`, at
/// `offset` of a trapped UAR page of rmlx5_`index`, and left the page
/// unmapped (in the faulting process, `hca/store.rs`).
#[no_mangle]
pub extern "C" fn rmlx5_ibu_uar_store(index: c_int, offset: u32, value: u64, size: u32) {
    let (Ok(soft), Ok(hca)) = (crate::soft(), usize::try_from(index)) else {
        return;
    };
    soft.uar_store(hca, offset, value, size);
}

/// Pins `len` bytes of the calling process at `addr` for `dev`: 8-byte
/// aligned (the records are read as whole words), writable; mapped for
/// DMA page by page on a PCI function.
fn pin_for_device(dev: &Device, addr: u64, len: u64) -> Result<DmaBuf> {
    if addr % 8 != 0 || len == 0 {
        return Err(EINVAL);
    }
    let pages = PinnedPages::pin(addr, len, true)?;
    let backing: Arc<dyn crate::mem::DmaBacking> = match dev.be.dma_device() {
        Some(d) => Arc::new(PinnedDma::new(pages, d)?, GFP_KERNEL)?,
        None => Arc::new(pages, GFP_KERNEL)?,
    };
    Ok(DmaBuf::shared(backing))
}

/// Puts a software HCA's object under the UAR trap with `add`, and says
/// which HCA's trap it is in; `None` on a ConnectX function, whose
/// doorbells reach the device.
fn trap(
    dev: &Device,
    add: impl FnOnce(&mut crate::hca::trap::TrapSet, usize) -> Result,
) -> Result<Option<usize>> {
    if dev.be.dma_device().is_some() {
        return Ok(None);
    }
    let hca = usize::from(dev.index);
    add(&mut crate::soft()?.state.lock().trap, hca)?;
    Ok(Some(hca))
}

/// Events of a CQ or QP go to the ib_core object at `obj` (its address,
/// valid until the object's destroy returned, after which the layers
/// below never call a sink again).
struct CSink {
    obj: usize,
    is_qp: bool,
}

impl EventSink for CSink {
    fn comp_event(&self) {
        let obj = self.obj as *mut c_void;
        if !obj.is_null() && !self.is_qp {
            // SAFETY: `obj` is the live `struct ib_cq` (see `CSink`).
            unsafe { rmlx5_ibu_cq_comp(obj) };
        }
    }

    fn async_event(&self, event_type: u8) {
        let obj = self.obj as *mut c_void;
        if !obj.is_null() {
            // SAFETY: `obj` is the live ib_core object (see `CSink`).
            unsafe { rmlx5_ibu_async(obj, self.is_qp, event_type) };
        }
    }
}

/// A CQ of rdma-core's provider.
pub struct IbuCq {
    cq: Arc<Cq>,
    /// The software HCA whose trap reads its record (`None` on a
    /// function).
    hca: Option<usize>,
}

/// Takes CQ `cqn` out of the trap of software HCA `hca`, if trapped.
fn untrap_cq(hca: Option<usize>, cqn: u32) {
    if let (Some(h), Ok(soft)) = (hca, crate::soft()) {
        soft.state.lock().trap.remove_cq(h, cqn);
    }
}

/// Takes QP `qpn` out of the trap of software HCA `hca`, if trapped.
fn untrap_qp(hca: Option<usize>, qpn: u32) {
    if let (Some(h), Ok(soft)) = (hca, crate::soft()) {
        soft.state.lock().trap.remove_qp(h, qpn);
    }
}

/// # Safety
///
/// `ibcq` is the `struct ib_cq` being created, live until
/// `rmlx5_ibu_destroy_cq` succeeded; `uars` is the context's (null on a
/// software HCA); `out` and `cqn` are writable; the caller runs in the
/// process whose memory `buf_addr` and `db_addr` name.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ibu_create_cq(
    index: c_int,
    uars: *const IbuUars,
    ibcq: *mut c_void,
    buf_addr: u64,
    db_addr: u64,
    entries: u32,
    comp_vector: u32,
    out: *mut *mut IbuCq,
    cqn: *mut u32,
) -> c_int {
    // SAFETY: The caller passes the context's pages, live, or null.
    let uars = unsafe { uars.as_ref() };
    let r = (|| -> Result<KBox<IbuCq>> {
        let dev = device(index)?;
        if !entries.is_power_of_two() || entries > dev.be.info()?.max_cqe {
            return Err(EINVAL);
        }
        let log_size = u8::try_from(entries.trailing_zeros())?;
        let bytes = u64::from(entries) * CQE_SIZE as u64;
        // The ring holds whole CQEs from a 64-byte boundary.
        if buf_addr % CQE_SIZE as u64 != 0 {
            return Err(EINVAL);
        }
        // A CQ is armed through the context's first UAR page (mlx5_ib's
        // choice, which libmlx5 follows); on a software HCA the kernel's
        // page stands for every context's.
        let uar_addr = match (dev.be.dma_device(), uars) {
            (None, _) => dev.be.kernel_uar()?,
            (Some(_), Some(u)) => u.addr(0)?,
            (Some(_), None) => return Err(EINVAL),
        };
        let buf = pin_for_device(&dev, buf_addr, bytes)?;
        let dbr = pin_for_device(&dev, db_addr, CQ_DBR_SIZE as u64)?;
        // Nothing is armed until the provider writes an ARM word (see
        // `Hca::cq_arm_record`); it writes the record only after this
        // command returns.
        dbr.write(CQ_DBR_ARM_OFFSET, &CQ_ARM_RECORD_UNARMED.to_be_bytes())?;
        let sink = Arc::new(
            CSink {
                obj: ibcq as usize,
                is_qp: false,
            },
            GFP_KERNEL,
        )?;
        let mem = CqMem { buf, dbr, uar_addr };
        let cq = Cq::new_on(&dev, log_size, mem, comp_vector, sink)?;
        let hca = match trap(&dev, |t, h| t.add_cq(h, cq.cqn)) {
            Ok(h) => h,
            Err(e) => {
                let _ = cq.destroy();
                return Err(e);
            }
        };
        match KBox::new(
            IbuCq {
                cq: cq.clone(),
                hca,
            },
            GFP_KERNEL,
        ) {
            Ok(b) => Ok(b),
            Err(e) => {
                untrap_cq(hca, cq.cqn);
                let _ = cq.destroy();
                Err(e.into())
            }
        }
    })();
    match r {
        Ok(b) => {
            // SAFETY: The caller passes writable slots.
            unsafe {
                cqn.write(b.cq.cqn);
                out.write(KBox::into_raw(b));
            }
            0
        }
        Err(e) => errno(e),
    }
}

/// # Safety
///
/// `cq` comes from `rmlx5_ibu_create_cq`; on success it is freed.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ibu_destroy_cq(cq: *mut IbuCq) -> c_int {
    // SAFETY: A live CQ from `rmlx5_ibu_create_cq`.
    let Some(c) = (unsafe { cq.as_ref() }) else {
        return EINVAL.to_errno();
    };
    untrap_cq(c.hca, c.cq.cqn);
    if let Err(e) = c.cq.destroy() {
        if let (Some(h), Ok(soft)) = (c.hca, crate::soft()) {
            let _ = soft.state.lock().trap.add_cq(h, c.cq.cqn);
        }
        return errno(e);
    }
    // SAFETY: From `KBox::into_raw`; the caller gives it up on success.
    drop(unsafe { KBox::from_raw(cq) });
    0
}

/// What `ib_user.c` read from `struct mlx5_ib_create_qp` and
/// `struct ib_qp_init_attr` (`struct rmlx5_ibu_qp_args`).
#[repr(C)]
pub struct QpArgs {
    buf_addr: u64,
    db_addr: u64,
    sq_wqe_count: u32,
    rq_wqe_count: u32,
    rq_wqe_shift: u32,
    bfreg: u32,
}

/// A QP of rdma-core's provider.
pub struct IbuQp {
    qp: Arc<UserQp>,
    /// As [`IbuCq::hca`].
    hca: Option<usize>,
}

/// The largest RQ WQE (`max_rq_desc_sz` the context reports).
pub(crate) const MAX_RQ_DESC: u32 = 512;

/// # Safety
///
/// `pd` comes from `rmlx5_ib_alloc_pd`, `send_cq` and `recv_cq` from
/// `rmlx5_ibu_create_cq`, all live; `uars` is the context's (null on a
/// software HCA); `ibqp` is the `struct ib_qp` being created, live until
/// `rmlx5_ibu_destroy_qp` succeeded; `args` is readable, `out` and `qpn`
/// writable; the caller runs in the process whose memory the arguments
/// name.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ibu_create_qp(
    pd: *const Pd,
    uars: *const IbuUars,
    send_cq: *const IbuCq,
    recv_cq: *const IbuCq,
    ibqp: *mut c_void,
    args: *const QpArgs,
    out: *mut *mut IbuQp,
    qpn: *mut u32,
) -> c_int {
    // SAFETY: The caller passes live objects.
    let (Some(pd), Some(scq), Some(rcq), Some(a)) = (unsafe {
        (
            pd.as_ref(),
            send_cq.as_ref(),
            recv_cq.as_ref(),
            args.as_ref(),
        )
    }) else {
        return EINVAL.to_errno();
    };
    // SAFETY: The caller passes the context's pages, live, or null.
    let uars = unsafe { uars.as_ref() };
    let r = (|| -> Result<KBox<IbuQp>> {
        let dev = &pd.dev;
        let caps = dev.be.caps()?;
        // Power-of-two rings within the device's limits; the RQ stride
        // holds at least one data segment (16 bytes).
        let sq_ok =
            a.sq_wqe_count.is_power_of_two() && a.sq_wqe_count <= 1u32 << caps.max_log_sq_wqebbs;
        let rq_ok = a.rq_wqe_count == 0
            || (a.rq_wqe_count.is_power_of_two()
                && a.rq_wqe_count <= 1u32 << caps.max_log_rq_wqes
                && (4..=MAX_RQ_DESC.trailing_zeros()).contains(&a.rq_wqe_shift));
        if !sq_ok || !rq_ok || a.buf_addr % WQEBB_SIZE as u64 != 0 {
            return Err(EINVAL);
        }
        let rq_bytes = if a.rq_wqe_count == 0 {
            0
        } else {
            u64::from(a.rq_wqe_count) << a.rq_wqe_shift
        };
        let sq_bytes = u64::from(a.sq_wqe_count) * WQEBB_SIZE as u64;
        // The QP rings on the UAR page of its register (libmlx5 indexes
        // four registers per page); on a software HCA the kernel's page
        // stands for every context's.
        let uar_addr = match (dev.be.dma_device(), uars) {
            (None, _) => dev.be.kernel_uar()?,
            (Some(_), Some(u)) => u.addr(usize::try_from(a.bfreg / 4)?)?,
            (Some(_), None) => return Err(EINVAL),
        };
        let buf = pin_for_device(dev, a.buf_addr, rq_bytes + sq_bytes)?;
        let dbr = pin_for_device(dev, a.db_addr, QP_DBR_SIZE as u64)?;
        let mem = UserQpMem {
            buf,
            dbr,
            uar_addr,
            bfreg: u8::try_from(a.bfreg % 4)?,
            sq_wqebbs: a.sq_wqe_count,
            sq_offset: rq_bytes,
            rq_wqes: a.rq_wqe_count,
            rq_stride: if a.rq_wqe_count == 0 {
                16
            } else {
                1 << a.rq_wqe_shift
            },
            // The provider sizes its WQEs itself; the device enforces
            // what a WQE of this QP can hold at most.
            max_send_sge: caps.max_send_sge,
            max_inline_data: caps.max_inline_data,
        };
        let sink = Arc::new(
            CSink {
                obj: ibqp as usize,
                is_qp: true,
            },
            GFP_KERNEL,
        )?;
        let qp = UserQp::new(pd, &scq.cq, &rcq.cq, mem, sink)?;
        let hca = match trap(dev, |t, h| t.add_qp(h, qp.qpn)) {
            Ok(h) => h,
            Err(e) => {
                let _ = qp.destroy();
                return Err(e);
            }
        };
        match KBox::new(
            IbuQp {
                qp: qp.clone(),
                hca,
            },
            GFP_KERNEL,
        ) {
            Ok(b) => Ok(b),
            Err(e) => {
                untrap_qp(hca, qp.qpn);
                let _ = qp.destroy();
                Err(e.into())
            }
        }
    })();
    match r {
        Ok(b) => {
            // SAFETY: The caller passes writable slots.
            unsafe {
                qpn.write(b.qp.qpn);
                out.write(KBox::into_raw(b));
            }
            0
        }
        Err(e) => errno(e),
    }
}

/// # Safety
///
/// `qp` is live; `attr` readable.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ibu_modify_qp(
    qp: *const IbuQp,
    attr: *const QpAttrC,
    mask: u32,
) -> c_int {
    // SAFETY: The caller passes live objects.
    let (Some(qp), Some(attr)) = (unsafe { qp.as_ref() }, unsafe { attr.as_ref() }) else {
        return EINVAL.to_errno();
    };
    attr.modify_request(mask)
        .and_then(|m| qp.qp.modify(&m))
        .map_or_else(errno, |()| 0)
}

/// The QP's state (`enum ib_qp_state`), or a negative errno.
///
/// # Safety
///
/// `qp` is live.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ibu_qp_state(qp: *const IbuQp) -> c_int {
    // SAFETY: The caller passes a live QP.
    let Some(qp) = (unsafe { qp.as_ref() }) else {
        return EINVAL.to_errno();
    };
    match qp.qp.query() {
        Ok((state, _)) => state as c_int,
        Err(e) => errno(e),
    }
}

/// # Safety
///
/// `qp` comes from `rmlx5_ibu_create_qp`; on success it is freed.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ibu_destroy_qp(qp: *mut IbuQp) -> c_int {
    // SAFETY: A live QP from `rmlx5_ibu_create_qp`.
    let Some(q) = (unsafe { qp.as_ref() }) else {
        return EINVAL.to_errno();
    };
    untrap_qp(q.hca, q.qp.qpn);
    if let Err(e) = q.qp.destroy() {
        if let (Some(h), Ok(soft)) = (q.hca, crate::soft()) {
            let _ = soft.state.lock().trap.add_qp(h, q.qp.qpn);
        }
        return errno(e);
    }
    // SAFETY: From `KBox::into_raw`; the caller gives it up on success.
    drop(unsafe { KBox::from_raw(qp) });
    0
}

/// A memory region of rdma-core's provider.
pub struct IbuMr {
    umr: Umr,
}

/// # Safety
///
/// `pd` is live; `out` and `key` are writable; the caller runs in the
/// process whose memory `start` names.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ibu_reg_mr(
    pd: *const Pd,
    start: u64,
    length: u64,
    iova: u64,
    access: u32,
    out: *mut *mut IbuMr,
    key: *mut u32,
) -> c_int {
    // SAFETY: The caller passes a live PD.
    let Some(pd) = (unsafe { pd.as_ref() }) else {
        return EINVAL.to_errno();
    };
    let r = (|| -> Result<KBox<IbuMr>> {
        if length == 0 || length > pd.dev.be.max_user_mr() {
            return Err(EINVAL);
        }
        let writable = access
            & (uapi::ACCESS_LOCAL_WRITE | uapi::ACCESS_REMOTE_WRITE | uapi::ACCESS_REMOTE_ATOMIC)
            != 0;
        let pages = PinnedPages::pin(start, length, writable)?;
        let umr = Umr::new(pd, 0, pages, iova, access)?;
        Ok(KBox::new(IbuMr { umr }, GFP_KERNEL)?)
    })();
    match r {
        Ok(b) => {
            // SAFETY: The caller passes writable slots.
            unsafe {
                key.write(b.umr.mr.key);
                out.write(KBox::into_raw(b));
            }
            0
        }
        Err(e) => errno(e),
    }
}

/// Deregisters and frees the MR (its pages are unpinned).
///
/// # Safety
///
/// `mr` comes from `rmlx5_ibu_reg_mr` and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ibu_dereg_mr(mr: *mut IbuMr) -> c_int {
    if mr.is_null() {
        return EINVAL.to_errno();
    }
    // SAFETY: From `KBox::into_raw`; the caller gives it up. Dropping the
    // `Umr` deregisters the key before it unpins the pages.
    drop(unsafe { KBox::from_raw(mr) });
    0
}

/// The PD's number (`struct mlx5_ib_alloc_pd_resp`).
///
/// # Safety
///
/// `pd` is live.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ibu_pd_num(pd: *const Pd) -> u32 {
    // SAFETY: The caller passes a live PD.
    unsafe { pd.as_ref() }.map_or(0, |p| p.pdn)
}
