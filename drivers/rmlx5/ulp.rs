// SPDX-License-Identifier: GPL-2.0

//! The verbs API for kernel ULPs, with the C ABI declared in
//! `include/rdma/rmlx5_ib.h`. The C shim exports these symbols with
//! `EXPORT_SYMBOL_GPL`.
//!
//! Every entry converts its raw pointers to typed references on its first
//! lines and maps errors to negative errno values. Objects are handed to C
//! as `Arc::into_raw` pointers (PD and MR as `KBox::into_raw`), and taken
//! back by their destroy function only when destroy succeeds. The ULP
//! module depends on rmlx5's symbols, so it is unloaded first: the
//! software HCA outlives every call. Every object handed out is recorded
//! (`objects.rs`) until destroyed, so destroy refuses unknown pointers and
//! rmlx5's unload reclaims what a ULP leaked.

pub(crate) mod objects;

use core::sync::atomic::Ordering;
use kernel::{
    ffi::{
        c_int,
        c_void, //
    },
    prelude::*,
    sync::{
        Arc,
        ArcBorrow, //
    },
};

use crate::hca_model::{
    fabric::MAX_UNICAST_LID,
    port::{
        GidEntry,
        GID_TABLE_LEN, //
    },
    qp::QpService,
};
use crate::ib::{
    cq::{
        Cq,
        Wc, //
    },
    mr::{
        Mr,
        Pd, //
    },
    qp::{
        Qp,
        QpAttrC,
        QpCaps,
        SendReq,
        Sge,
        UdDest,
        MAX_SGE, //
    },
};
use crate::mlx5_core::{
    device::{
        Device,
        EventSlot, //
    },
    events::EventHandlerFn,
};
use crate::mlx5_prm::wqe::DatagramSeg;
use objects::{
    Handle,
    ULP_OBJECTS, //
};

/// Bytes of an address vector (`RMLX5_IB_AV_SIZE`).
const AV_SIZE: usize = DatagramSeg::SIZE;
/// The UDP source port of RoCE v2 datagrams (the bottom of the range
/// mlx5 uses), carried where an InfiniBand AV has the LID.
const ROCE_UDP_SPORT: u16 = 0xc000;
/// GID table entries of a RoCE port (an InfiniBand port has one GID); the
/// model's table holds as many.
const ROCE_GIDS: u8 = GID_TABLE_LEN as u8;

fn errno(e: Error) -> c_int {
    e.to_errno()
}

/// Records a new object; if that fails, undoes its creation with
/// `undo` (which destroys and frees it) and returns the error.
fn record(h: Handle, undo: impl FnOnce()) -> Result {
    let r = ULP_OBJECTS.lock().add(h);
    if r.is_err() {
        undo();
    }
    r
}

/// Destroys a recorded object: `EINVAL` if `h` is not recorded, else
/// `destroy`'s result; on success `h` is forgotten and `free` releases it.
fn destroy_recorded(h: Handle, destroy: impl FnOnce() -> Result, free: impl FnOnce()) -> c_int {
    if crate::soft().is_err() {
        return ENODEV.to_errno();
    }
    let mut reg = ULP_OBJECTS.lock();
    if !reg.contains(h) {
        return EINVAL.to_errno();
    }
    match destroy() {
        Ok(()) => {
            reg.remove(h);
            drop(reg);
            free();
            0
        }
        Err(e) => errno(e),
    }
}

/// Device attributes (`struct rmlx5_ib_device_attr`).
#[repr(C)]
#[derive(Default)]
pub struct DeviceAttr {
    max_qp: u32,
    max_cq: u32,
    max_pd: u32,
    max_mr: u32,
    max_qp_wr: u32,
    max_cqe: u32,
    max_sge: u32,
    max_qp_rd_atom: u32,
    max_mr_size: u64,
    /// `IB_ATOMIC_HCA` (1).
    atomic_cap: u32,
    num_comp_vectors: u32,
    /// `IB_PORT_ACTIVE` (4).
    port_state: u32,
    /// What a peer's `dlid` names this device by.
    lid: u32,
    /// Pages of a fast-registration MR; 0 if the device has none.
    max_fast_reg_pages: u32,
    /// The subnet manager's LID.
    sm_lid: u32,
    /// The node GUID from the device's firmware, 0 if it has none.
    node_guid: u64,
    /// The port's GID prefix.
    subnet_prefix: u64,
}

/// Number of registered rmlx5 devices (`rmlx5_ib_num_devices()` in C).
#[no_mangle]
pub extern "C" fn rmlx5_ib_num_devices() -> c_int {
    c_int::try_from(crate::mlx5_core::device::count()).unwrap_or(c_int::MAX)
}

/// Checks a device index.
#[no_mangle]
pub extern "C" fn rmlx5_ib_get_device(index: c_int) -> c_int {
    match device(index) {
        Ok(_) => 0,
        Err(e) => e.to_errno(),
    }
}

/// # Safety
///
/// `attr` must be valid for writes.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ib_query_device(index: c_int, attr: *mut DeviceAttr) -> c_int {
    // SAFETY: The caller passes a writable attribute struct.
    let Some(attr) = (unsafe { attr.as_mut() }) else {
        return EINVAL.to_errno();
    };
    let r = (|| -> Result {
        let dev = device(index)?;
        let i = dev.be.info()?;
        *attr = DeviceAttr {
            max_qp: i.max_qp,
            max_cq: i.max_cq,
            max_pd: i.max_pd,
            max_mr: i.max_mr,
            max_qp_wr: crate::ib::qp::MAX_QP_WR,
            max_cqe: i.max_cqe,
            max_sge: MAX_SGE as u32,
            max_qp_rd_atom: i.max_qp_rd_atom,
            max_mr_size: u64::MAX,
            atomic_cap: 1,
            num_comp_vectors: u32::try_from(dev.comp_vectors())?,
            port_state: u32::from(i.port_state),
            lid: u32::from(i.lid),
            max_fast_reg_pages: i.max_fast_reg_pages,
            sm_lid: u32::from(i.sm_lid),
            node_guid: i.node_guid,
            subnet_prefix: i.subnet_prefix,
        };
        Ok(())
    })();
    r.map_or_else(errno, |()| 0)
}

/// The device `rmlx5_<index>`.
fn device(index: c_int) -> Result<Arc<Device>> {
    crate::mlx5_core::device::get(usize::try_from(index).map_err(|_| ENODEV)?)
}

/// # Safety
///
/// `out` must be valid for writes.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ib_alloc_pd(index: c_int, out: *mut *mut Pd) -> c_int {
    let r = (|| -> Result<*mut Pd> {
        let pd = KBox::into_raw(KBox::new(Pd::new(&device(index)?)?, GFP_KERNEL)?);
        record(Handle::Pd(pd as usize), || {
            // SAFETY: `pd` is the `KBox` just leaked, known to nobody else.
            let pd = unsafe { KBox::from_raw(pd) };
            let _ = pd.destroy();
        })?;
        Ok(pd)
    })();
    match r {
        Ok(p) => {
            // SAFETY: The caller passes a writable pointer slot.
            unsafe { out.write(p) };
            0
        }
        Err(e) => errno(e),
    }
}

/// # Safety
///
/// `pd` must come from `rmlx5_ib_alloc_pd` and not be used after success.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ib_dealloc_pd(pd: *mut Pd) -> c_int {
    destroy_recorded(
        Handle::Pd(pd as usize),
        // SAFETY: `pd` is recorded, so it is a live PD from
        // `rmlx5_ib_alloc_pd`.
        || unsafe { &*pd }.destroy(),
        // SAFETY: `pd` came from `KBox::into_raw`; destroy succeeded and
        // the caller gives it up.
        || drop(unsafe { KBox::from_raw(pd) }),
    )
}

/// Creates an MR with `new` on the PD at `pd`, records it and hands it to
/// C: the key to `*key`, the MR to `*out`; on error nothing is written and
/// nothing is left behind.
///
/// # Safety
///
/// `pd` is null or a live PD; `out` and `key` are writable.
unsafe fn hand_out_mr(
    pd: *mut Pd,
    new: impl FnOnce(&Pd) -> Result<Mr>,
    out: *mut *mut Mr,
    key: *mut u32,
) -> c_int {
    // SAFETY: `pd` is null or a live PD.
    let Some(pd) = (unsafe { pd.as_ref() }) else {
        return EINVAL.to_errno();
    };
    let r = (|| -> Result<*mut Mr> {
        let mr = new(pd)?;
        let k = mr.key;
        let b = KBox::into_raw(KBox::new(mr, GFP_KERNEL)?);
        record(Handle::Mr(b as usize), || {
            // SAFETY: `b` is the `KBox` just leaked, known to nobody else.
            let mr = unsafe { KBox::from_raw(b) };
            let _ = mr.destroy();
        })?;
        // SAFETY: `key` is writable.
        unsafe { key.write(k) };
        Ok(b)
    })();
    match r {
        Ok(p) => {
            // SAFETY: `out` is writable.
            unsafe { out.write(p) };
            0
        }
        Err(e) => errno(e),
    }
}

/// # Safety
///
/// `pd` is live; `addr..addr+len` is kernel memory that stays valid until
/// `rmlx5_ib_dereg_mr`; `out` and `key` are writable.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ib_reg_mr(
    pd: *mut Pd,
    addr: *mut c_void,
    len: u64,
    access: u32,
    out: *mut *mut Mr,
    key: *mut u32,
) -> c_int {
    // SAFETY: `pd` is a live PD; `out` and `key` are writable (the
    // caller's contract).
    unsafe { hand_out_mr(pd, |pd| Mr::new(pd, addr as u64, len, access), out, key) }
}

/// Registers a DMA MR: every direct-map address of the kernel (what
/// `ib_dma_map_*` returns for rmlx5) is its own IOVA under the one key.
///
/// # Safety
///
/// `pd` is live; `out` and `key` are writable.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ib_get_dma_mr(
    pd: *mut Pd,
    access: u32,
    out: *mut *mut Mr,
    key: *mut u32,
) -> c_int {
    // SAFETY: `pd` is a live PD; `out` and `key` are writable (the
    // caller's contract).
    unsafe { hand_out_mr(pd, |pd| Mr::new_dma(pd, access), out, key) }
}

/// Allocates a fast-registration MR with room for `max_pages` pages: no
/// key reaches it until an `IB_WR_REG_MR` work request registers the
/// pages set with `rmlx5_ib_mr_set_page` and `rmlx5_ib_mr_set_mapping`.
///
/// # Safety
///
/// `pd` is live; `out` and `key` are writable.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ib_alloc_mr(
    pd: *mut Pd,
    max_pages: u32,
    out: *mut *mut Mr,
    key: *mut u32,
) -> c_int {
    // SAFETY: `pd` is a live PD; `out` and `key` are writable (the
    // caller's contract).
    unsafe { hand_out_mr(pd, |pd| Mr::new_fast(pd, max_pages), out, key) }
}

/// Writes page `index` of a fast MR's page list (the page's DMA address).
/// Any context; the MR must not be registered meanwhile.
///
/// # Safety
///
/// `mr` is live.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ib_mr_set_page(mr: *const Mr, index: u32, addr: u64) -> c_int {
    // SAFETY: `mr` is a live MR.
    let Some(mr) = (unsafe { mr.as_ref() }) else {
        return EINVAL.to_errno();
    };
    mr.set_page(index, addr).map_or_else(errno, |()| 0)
}

/// Records what a fast MR's page list maps: `pages` pages of
/// `1 << page_shift` bytes (4 KiB to 1 GiB) holding `length` bytes from
/// `iova`. Any context.
///
/// # Safety
///
/// `mr` is live.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ib_mr_set_mapping(
    mr: *const Mr,
    iova: u64,
    length: u64,
    page_shift: u32,
    pages: u32,
) -> c_int {
    // SAFETY: `mr` is a live MR.
    let Some(mr) = (unsafe { mr.as_ref() }) else {
        return EINVAL.to_errno();
    };
    mr.set_mapping(iova, length, page_shift, pages)
        .map_or_else(errno, |()| 0)
}

/// # Safety
///
/// `mr` must come from `rmlx5_ib_reg_mr`.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ib_dereg_mr(mr: *mut Mr) -> c_int {
    destroy_recorded(
        Handle::Mr(mr as usize),
        // SAFETY: `mr` is recorded, so it is a live MR.
        || unsafe { &*mr }.destroy(),
        // SAFETY: From `KBox::into_raw`; given up by the caller.
        || drop(unsafe { KBox::from_raw(mr) }),
    )
}

/// A completion handler as C sees it.
pub type CompHandlerFn = unsafe extern "C" fn(*mut Cq, *mut c_void);

/// # Safety
///
/// `out` is writable; `handler`, if non-null, may be called with `ctx` in
/// BH context until `rmlx5_ib_destroy_cq` returns.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ib_create_cq(
    index: c_int,
    handler: Option<CompHandlerFn>,
    ctx: *mut c_void,
    entries: u32,
    comp_vector: u32,
    out: *mut *const Cq,
) -> c_int {
    let r = (|| -> Result<Arc<Cq>> {
        let cq = Cq::new(
            &device(index)?,
            entries,
            comp_vector,
            handler.map(|f| (f, ctx as usize)),
        )?;
        let undo = cq.clone();
        record(Handle::Cq(Arc::as_ptr(&cq) as usize), move || {
            let _ = undo.destroy();
        })?;
        Ok(cq)
    })();
    match r {
        Ok(cq) => {
            // SAFETY: `out` is writable.
            unsafe { out.write(Arc::into_raw(cq)) };
            0
        }
        Err(e) => errno(e),
    }
}

/// # Safety
///
/// `cq` must come from `rmlx5_ib_create_cq`.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ib_destroy_cq(cq: *const Cq) -> c_int {
    destroy_recorded(
        Handle::Cq(cq as usize),
        // SAFETY: `cq` is recorded, so it is a live CQ.
        || unsafe { &*cq }.destroy(),
        // SAFETY: From `Arc::into_raw`; the caller gives it up.
        || drop(unsafe { Arc::from_raw(cq) }),
    )
}

/// The CQ's number (the element of its async events).
///
/// # Safety
///
/// `cq` is live.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ib_cq_num(cq: *const Cq) -> u32 {
    // SAFETY: `cq` is a live CQ.
    unsafe { cq.as_ref() }.map_or(0, |c| c.cqn)
}

/// # Safety
///
/// `cq` is live; `wc` has room for `num` entries.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ib_poll_cq(cq: *const Cq, num: c_int, wc: *mut Wc) -> c_int {
    // SAFETY: `cq` is a live CQ.
    let Some(cq) = (unsafe { cq.as_ref() }) else {
        return EINVAL.to_errno();
    };
    let Ok(n) = usize::try_from(num) else {
        return EINVAL.to_errno();
    };
    if wc.is_null() || n == 0 {
        return 0;
    }
    // SAFETY: The caller gives room for `n` entries at `wc`.
    let wcs = unsafe { core::slice::from_raw_parts_mut(wc, n) };
    c_int::try_from(cq.poll(wcs)).unwrap_or(0)
}

/// # Safety
///
/// `cq` is live.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ib_req_notify_cq(cq: *const Cq, flags: u32) -> c_int {
    // SAFETY: `cq` is a live CQ.
    let Some(cq) = (unsafe { cq.as_ref() }) else {
        return EINVAL.to_errno();
    };
    cq.req_notify(flags).unwrap_or_else(errno)
}

/// QP creation attributes (`struct rmlx5_ib_qp_init_attr`).
#[repr(C)]
pub struct QpInitAttr {
    send_cq: *const Cq,
    recv_cq: *const Cq,
    max_send_wr: u32,
    max_recv_wr: u32,
    max_send_sge: u32,
    max_recv_sge: u32,
    sq_sig_all: u32,
    qp_type: u32,
}

/// `RMLX5_IB_QPT_*`: the transport of a new QP.
fn qp_service(qp_type: u32) -> Result<QpService> {
    match qp_type {
        0 => Ok(QpService::Rc),
        1 => Ok(QpService::Ud),
        2 => Ok(QpService::Gsi),
        _ => Err(EOPNOTSUPP),
    }
}

/// # Safety
///
/// `pd`, `attr` and its CQs are live; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ib_create_qp(
    pd: *mut Pd,
    attr: *const QpInitAttr,
    out: *mut *const Qp,
) -> c_int {
    // SAFETY: The caller passes live objects.
    let (Some(pd), Some(attr)) = (unsafe { pd.as_ref() }, unsafe { attr.as_ref() }) else {
        return EINVAL.to_errno();
    };
    if attr.send_cq.is_null() || attr.recv_cq.is_null() {
        return EINVAL.to_errno();
    }
    // SAFETY: Live CQs from `rmlx5_ib_create_cq` (their `Arc`s were
    // leaked into C): take a new reference each without consuming theirs.
    let (scq, rcq): (Arc<Cq>, Arc<Cq>) = unsafe {
        (
            ArcBorrow::from_raw(attr.send_cq).into(),
            ArcBorrow::from_raw(attr.recv_cq).into(),
        )
    };
    let service = match qp_service(attr.qp_type) {
        Ok(s) => s,
        Err(e) => return errno(e),
    };
    let caps = QpCaps {
        service,
        max_send_wr: attr.max_send_wr,
        max_recv_wr: attr.max_recv_wr,
        max_send_sge: attr.max_send_sge,
        max_recv_sge: attr.max_recv_sge,
        sq_sig_all: attr.sq_sig_all != 0,
    };
    let r = Qp::new(pd, &scq, &rcq, &caps).and_then(|qp| {
        let undo = qp.clone();
        record(Handle::Qp(Arc::as_ptr(&qp) as usize), move || {
            let _ = undo.destroy();
        })?;
        Ok(qp)
    });
    match r {
        Ok(qp) => {
            // SAFETY: `out` is writable.
            unsafe { out.write(Arc::into_raw(qp)) };
            0
        }
        Err(e) => errno(e),
    }
}

/// # Safety
///
/// `qp` must come from `rmlx5_ib_create_qp`.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ib_destroy_qp(qp: *const Qp) -> c_int {
    destroy_recorded(
        Handle::Qp(qp as usize),
        // SAFETY: `qp` is recorded, so it is a live QP.
        || unsafe { &*qp }.destroy(),
        // SAFETY: From `Arc::into_raw`; given up by the caller.
        || drop(unsafe { Arc::from_raw(qp) }),
    )
}

/// # Safety
///
/// `qp` is live.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ib_qp_num(qp: *const Qp) -> u32 {
    // SAFETY: `qp` is a live QP.
    unsafe { qp.as_ref() }.map_or(0, |q| q.qpn)
}

/// The QP's current state (`enum ib_qp_state`, which the HCA changes to
/// ERR by itself on a completion error), or a negative errno.
///
/// # Safety
///
/// `qp` is live.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ib_query_qp_state(qp: *const Qp) -> c_int {
    // SAFETY: `qp` is a live QP.
    let Some(qp) = (unsafe { qp.as_ref() }) else {
        return EINVAL.to_errno();
    };
    match qp.state() {
        Ok(s) => c_int::try_from(s).unwrap_or(c_int::MAX),
        Err(e) => errno(e),
    }
}

/// # Safety
///
/// `qp` and `attr` are live.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ib_modify_qp(
    qp: *const Qp,
    attr: *const QpAttrC,
    mask: u32,
) -> c_int {
    // SAFETY: The caller passes live objects.
    let (Some(qp), Some(attr)) = (unsafe { qp.as_ref() }, unsafe { attr.as_ref() }) else {
        return EINVAL.to_errno();
    };
    qp.modify(attr, mask).map_or_else(errno, |()| 0)
}

/// `struct rmlx5_ib_send_wr`.
#[repr(C)]
pub struct SendWrC {
    next: *const SendWrC,
    wr_id: u64,
    sg_list: *const Sge,
    num_sge: c_int,
    opcode: u32,
    send_flags: u32,
    imm_data: u32,
    remote_addr: u64,
    rkey: u32,
    reserved: u32,
    compare_add: u64,
    swap: u64,
    compare_add_mask: u64,
    swap_mask: u64,
    mr: *const Mr,
    access: u32,
    reserved2: u32,
    av: *const [u8; AV_SIZE],
    remote_qpn: u32,
    remote_qkey: u32,
}

/// `struct rmlx5_ib_recv_wr`.
#[repr(C)]
pub struct RecvWrC {
    next: *const RecvWrC,
    wr_id: u64,
    sg_list: *const Sge,
    num_sge: c_int,
}

/// # Safety
///
/// `sges` must be valid for `n` entries if `n > 0`.
unsafe fn sge_slice<'a>(sges: *const Sge, n: c_int) -> Result<&'a [Sge]> {
    let n = usize::try_from(n).map_err(|_| EINVAL)?;
    if n == 0 {
        return Ok(&[]);
    }
    if sges.is_null() || n > MAX_SGE {
        return Err(EINVAL);
    }
    // SAFETY: Guaranteed by the caller.
    Ok(unsafe { core::slice::from_raw_parts(sges, n) })
}

/// # Safety
///
/// `qp` is live; `wr` is a valid list; `bad` is writable or null.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ib_post_send(
    qp: *const Qp,
    wr: *const SendWrC,
    bad: *mut *const SendWrC,
) -> c_int {
    // SAFETY: `qp` is a live QP.
    let Some(qp) = (unsafe { qp.as_ref() }) else {
        return EINVAL.to_errno();
    };
    // The list is converted as the QP consumes it (one SQ lock, one
    // doorbell); `last` is the element converted last, the one a failure
    // names.
    let mut cur = wr;
    let mut last = wr;
    let reqs = core::iter::from_fn(|| {
        if cur.is_null() {
            return None;
        }
        last = cur;
        // SAFETY: `cur` is an element of the caller's valid list.
        let w = unsafe { &*cur };
        cur = w.next;
        // SAFETY: The WR's SGE list is valid for `num_sge` entries.
        let sges = unsafe { sge_slice(w.sg_list, w.num_sge) };
        Some(sges.map(|sges| SendReq {
            wr_id: w.wr_id,
            sges,
            opcode: w.opcode,
            flags: w.send_flags,
            imm_data: w.imm_data,
            remote_addr: w.remote_addr,
            rkey: w.rkey,
            compare_add: w.compare_add,
            swap: w.swap,
            compare_add_mask: w.compare_add_mask,
            swap_mask: w.swap_mask,
            // SAFETY: A registration names a live MR of the caller's (null
            // for every other opcode).
            mr: unsafe { w.mr.as_ref() },
            access: w.access,
            // SAFETY: A UD send names an address vector of the caller's,
            // `RMLX5_IB_AV_SIZE` bytes, valid while it posts (null for
            // every other QP).
            ud: unsafe { w.av.as_ref() }.map(|av| UdDest {
                av,
                qpn: w.remote_qpn,
                qkey: w.remote_qkey,
            }),
        }))
    });
    match qp.post_send_from(reqs) {
        Ok(()) => 0,
        Err((_, e)) => {
            if !bad.is_null() {
                // SAFETY: `bad` is writable.
                unsafe { bad.write(last) };
            }
            errno(e)
        }
    }
}

/// # Safety
///
/// `qp` is live; `wr` is a valid list; `bad` is writable or null.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ib_post_recv(
    qp: *const Qp,
    wr: *const RecvWrC,
    bad: *mut *const RecvWrC,
) -> c_int {
    // SAFETY: `qp` is a live QP.
    let Some(qp) = (unsafe { qp.as_ref() }) else {
        return EINVAL.to_errno();
    };
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: `cur` is an element of the caller's valid list.
        let w = unsafe { &*cur };
        // SAFETY: The WR's SGE list is valid for `num_sge` entries.
        let r = unsafe { sge_slice(w.sg_list, w.num_sge) }
            .and_then(|s| qp.post_recv(&[(w.wr_id, s)]).map_err(|(_, e)| e));
        if let Err(e) = r {
            if !bad.is_null() {
                // SAFETY: `bad` is writable.
                unsafe { bad.write(cur) };
            }
            return errno(e);
        }
        cur = w.next;
    }
    0
}

/// `struct rmlx5_ib_ah_attr`.
#[repr(C)]
pub struct AhAttrC {
    dgid: [u8; 16],
    flow_label: u32,
    dlid: u16,
    sgid_index: u8,
    hop_limit: u8,
    traffic_class: u8,
    sl: u8,
    grh: u8,
    reserved: u8,
    dmac: [u8; 6],
    reserved2: u16,
}

/// Checks an address handle's attributes against the port of device
/// `index` and writes the address vector UD sends carry into `av`: the
/// datagram segment of mlx5 without destination QP and Q_Key, as mlx5_ib
/// keeps it in its AH. Never sleeps.
///
/// # Safety
///
/// `attr` is readable, `av` writable for `RMLX5_IB_AV_SIZE` bytes.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ib_encode_av(
    index: c_int,
    attr: *const AhAttrC,
    av: *mut [u8; AV_SIZE],
) -> c_int {
    // SAFETY: The caller passes a readable attribute struct.
    let Some(a) = (unsafe { attr.as_ref() }) else {
        return EINVAL.to_errno();
    };
    let r = device(index).and_then(|dev| {
        let roce = dev.roce.load(Ordering::Acquire);
        encode_av(a, roce, if roce { ROCE_GIDS } else { 1 })
    });
    match r {
        Ok(seg) => {
            let mut b = [0u8; AV_SIZE];
            seg.encode(&mut b);
            // SAFETY: `av` is writable for `AV_SIZE` bytes.
            unsafe { av.write(b) };
            0
        }
        Err(e) => errno(e),
    }
}

/// The datagram segment of `a` on a RoCE (`roce`) or InfiniBand port with
/// `gids` GID table entries.
fn encode_av(a: &AhAttrC, roce: bool, gids: u8) -> Result<DatagramSeg> {
    if a.sgid_index >= gids || a.flow_label > 0xf_ffff {
        return Err(EINVAL);
    }
    let grh = roce || a.grh != 0;
    let mut seg = DatagramSeg {
        tclass: a.traffic_class,
        hop_limit: a.hop_limit,
        rgid: a.dgid,
        grh_gid_fl: if grh {
            DatagramSeg::GRH | (u32::from(a.sgid_index) << 20) | a.flow_label
        } else {
            0
        },
        ..DatagramSeg::default()
    };
    if roce {
        // The next hop's MAC; the SL in bits 3:1 and the UDP source port
        // where InfiniBand has the LID, as mlx5_ib builds a RoCE AV.
        if a.dmac == [0u8; 6] || a.sl > 7 {
            return Err(EINVAL);
        }
        seg.rmac = a.dmac;
        seg.stat_rate_sl = a.sl << 1;
        seg.rlid = ROCE_UDP_SPORT;
    } else {
        // A unicast LID: 0 is reserved, 0xc000 and up are multicast.
        if a.dlid == 0 || a.dlid > MAX_UNICAST_LID || a.sl > 15 {
            return Err(EINVAL);
        }
        seg.rlid = a.dlid;
        seg.stat_rate_sl = a.sl;
    }
    Ok(seg)
}

/// Makes device `index`'s port a RoCE port (`roce` non-zero) with path MTU
/// `mtu` (`enum ib_mtu`), or InfiniBand again: for `ib_core.c` only, when
/// it binds the port to a netdev (or lets go of it).
#[no_mangle]
pub extern "C" fn rmlx5_ibc_set_port(index: c_int, roce: c_int, mtu: u32) -> c_int {
    let r = device(index).and_then(|dev| {
        let mtu = u8::try_from(mtu).map_err(|_| EINVAL)?;
        dev.be.set_port(roce != 0, mtu)?;
        dev.roce.store(roce != 0, Ordering::Release);
        Ok(())
    });
    r.map_or_else(errno, |()| 0)
}

/// Writes GID table entry `gid_index` of device `index`'s port (clears it
/// when `gid` is null): the GID, RoCE v2 (`roce_v2` non-zero) or v1, and
/// the MAC of the netdev it belongs to. For `ib_core.c`'s `add_gid` and
/// `del_gid` only.
///
/// # Safety
///
/// `gid` is null or readable for 16 bytes, `mac` for 6 when `gid` is not
/// null.
#[no_mangle]
pub unsafe extern "C" fn rmlx5_ibc_set_gid(
    index: c_int,
    gid_index: u32,
    gid: *const [u8; 16],
    roce_v2: c_int,
    mac: *const [u8; 6],
) -> c_int {
    // SAFETY: Null or readable, as the caller promises.
    let entry = unsafe { gid.as_ref() }.map(|g| GidEntry {
        gid: *g,
        roce_v2: roce_v2 != 0,
        // SAFETY: Readable whenever `gid` is not null.
        mac: unsafe { mac.as_ref() }.copied().unwrap_or_default(),
    });
    let r = device(index).and_then(|dev| {
        let i = u8::try_from(gid_index).map_err(|_| EINVAL)?;
        dev.be.set_gid(i, entry)
    });
    r.map_or_else(errno, |()| 0)
}

/// Sets (or clears, with a null `handler`) the async event handler of a
/// device.
#[no_mangle]
pub extern "C" fn rmlx5_ib_set_event_handler(
    index: c_int,
    handler: Option<EventHandlerFn>,
    ctx: *mut c_void,
) -> c_int {
    let r = (|| -> Result {
        device(index)?.set_event_handler(EventSlot::Ulp, handler.map(|f| (f, ctx as usize)));
        Ok(())
    })();
    r.map_or_else(errno, |()| 0)
}

/// Sets (or clears) ib_core's async event handler of a device: for
/// `ib_core.c` only, not exported (ib_core's clients see events through
/// `ib_dispatch_event` and their QP and CQ handlers).
#[no_mangle]
pub extern "C" fn rmlx5_ibc_set_event_handler(
    index: c_int,
    handler: Option<EventHandlerFn>,
    ctx: *mut c_void,
) -> c_int {
    let r = (|| -> Result {
        device(index)?.set_event_handler(EventSlot::IbCore, handler.map(|f| (f, ctx as usize)));
        Ok(())
    })();
    r.map_or_else(errno, |()| 0)
}
