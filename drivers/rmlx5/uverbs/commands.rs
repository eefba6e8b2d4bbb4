// SPDX-License-Identifier: GPL-2.0

//! The commands: each decodes its argument ([`Arg::read`]), runs its
//! `check()`, acts on the context, and answers ([`Arg::write`]).
//!
//! An object becomes visible to other commands when it enters its table;
//! if the answer then cannot be written, the object is removed again
//! (unless another command already started using its handle, in which
//! case it stays and the context's teardown destroys it).

use core::sync::atomic::Ordering;
use kernel::{
    prelude::*,
    sync::Arc, //
};

use super::{
    cmd::{
        invalid,
        Arg, //
    },
    context::{
        Ucontext,
        MAX_CHANNELS, //
    },
    event::{
        EventQueue,
        QueueKind, //
    },
    event_file::{
        queue_of_fd,
        PendingFd, //
    },
    objects::{
        bfreg_of,
        qp_geometry,
        CqPlace,
        QpPlace,
        Ucq,
        Umr,
        Upd,
        Uqp, //
    },
};
use crate::hca_model::{
    mr::Access,
    qp::{
        ConnAttrs,
        QpState,
        RemoteQp, //
    },
    qp_modify::{
        AttrMask,
        QpModify, //
    },
};
use crate::mem::pages::PinnedPages;
use crate::mlx5_prm::cqe::CQE_SIZE;
use crate::rmlx5_abi::{
    ioctl::Command,
    mmap::{
        encode,
        Kind, //
    },
    uapi::*,
};

/// Runs one command for `ctx`.
pub(crate) fn run(ctx: &Ucontext, command: Command, arg: &Arg) -> Result<isize> {
    match command {
        Command::QueryDevice => query_device(ctx, arg),
        Command::QueryPort => query_port(ctx, arg),
        Command::AllocPd => alloc_pd(ctx, arg),
        Command::DeallocPd => dealloc_pd(ctx, arg),
        Command::RegMr => reg_mr(ctx, arg),
        Command::DeregMr => dereg_mr(ctx, arg),
        Command::CreateCompChannel => create_comp_channel(ctx, arg),
        Command::CreateCq => create_cq(ctx, arg),
        Command::DestroyCq => destroy_cq(ctx, arg),
        Command::CreateQp => create_qp(ctx, arg),
        Command::ModifyQp => modify_qp(ctx, arg),
        Command::QueryQp => query_qp(ctx, arg),
        Command::DestroyQp => destroy_qp(ctx, arg),
        Command::Kick => kick(ctx, arg),
        Command::GetAsyncFd => get_async_fd(ctx, arg),
    }
}

fn query_device(ctx: &Ucontext, arg: &Arg) -> Result<isize> {
    let mut a: QueryDevice = arg.read()?;
    a.check().map_err(invalid)?;
    let idx = u64::from(ctx.hca_index);
    let info = ctx.dev.be.info()?;
    a.fw_ver = (1 << 32) | (6 << 16);
    // A function's GUID is its firmware's.
    a.node_guid = match info.node_guid {
        0 => 0x0002_c903_0000_0000 | idx,
        g => g,
    };
    a.sys_image_guid = a.node_guid;
    let l = &ctx.limits;
    a.max_mr_size = l.max_mr_size;
    a.page_size_cap = 1 << 12;
    a.vendor_id = 0x02c9;
    a.vendor_part_id = info.part_id;
    a.hw_ver = 0;
    // Object counts: the device's, at most a context's.
    a.max_qp = objects(info.max_qp);
    a.max_qp_wr = l.max_qp_wr;
    a.max_sge = l.max_sge;
    a.max_cq = objects(info.max_cq);
    a.max_cqe = l.max_cqe;
    a.max_mr = objects(info.max_mr);
    a.max_pd = objects(info.max_pd);
    a.max_qp_rd_atom = l.max_qp_rd_atom;
    a.max_qp_init_rd_atom = l.max_qp_init_rd_atom;
    a.atomic_cap = ATOMIC_HCA;
    a.num_comp_vectors = l.num_comp_vectors;
    a.max_inline_data = l.max_inline_data;
    a.phys_port_cnt = 1;
    a.bf_reg_size = crate::mlx5_prm::doorbell::BF_REG_SIZE as u32;
    a.uar_size = crate::mlx5_prm::doorbell::UAR_PAGE_SIZE as u32;
    a.device_index = ctx.hca_index;
    a.device_flags = if ctx.uar.needs_kick() {
        0
    } else {
        DEVICE_UAR_DOORBELLS
    };
    arg.write(&a)?;
    Ok(0)
}

/// Objects of a kind one context can have: the device's count, at most
/// the context's own limit.
fn objects(device: u32) -> u32 {
    let limit = u32::try_from(super::context::MAX_OBJECTS).unwrap_or(u32::MAX);
    device.min(limit)
}

fn query_port(ctx: &Ucontext, arg: &Arg) -> Result<isize> {
    let mut a: QueryPort = arg.read()?;
    a.check().map_err(invalid)?;
    // The port as the device has it (a function's from its firmware).
    let info = ctx.dev.be.info()?;
    a.state = match u32::from(info.port_state) {
        s @ 1..=PORT_ACTIVE => s,
        _ => 1,
    };
    a.max_mtu = MTU_4096;
    a.active_mtu = MTU_4096;
    // User space's LID (the software HCAs' differ from their ULP API
    // index, `info.lid`).
    a.lid = u32::from(ctx.dev.be.port_lid());
    a.sm_lid = u32::from(info.sm_lid);
    a.gid_tbl_len = 1;
    // IBV_WIDTH_4X, IBV_SPEED_EDR.
    a.active_width = 2;
    a.active_speed = 32;
    a.link_layer = LINK_LAYER_INFINIBAND;
    arg.write(&a)?;
    Ok(0)
}

fn alloc_pd(ctx: &Ucontext, arg: &Arg) -> Result<isize> {
    let mut a: AllocPd = arg.read()?;
    a.check().map_err(invalid)?;
    let pd = Arc::new(Upd::new(&ctx.dev)?, GFP_KERNEL)?;
    a.pdn = pd.pd.pdn;
    a.pd_handle = ctx.objects.lock().pds.insert(pd.clone())?;
    if let Err(e) = arg.write(&a) {
        let mut o = ctx.objects.lock();
        if o.pds.is(a.pd_handle, &pd) {
            let _ = o.pds.remove(a.pd_handle);
        }
        return Err(e);
    }
    Ok(0)
}

fn read_destroy(arg: &Arg) -> Result<Destroy> {
    let a: Destroy = arg.read()?;
    a.check().map_err(invalid)?;
    Ok(a)
}

fn dealloc_pd(ctx: &Ucontext, arg: &Arg) -> Result<isize> {
    let a = read_destroy(arg)?;
    let pd = ctx.objects.lock().pds.remove(a.handle)?;
    drop(pd);
    arg.write(&a)?;
    Ok(0)
}

fn reg_mr(ctx: &Ucontext, arg: &Arg) -> Result<isize> {
    let mut a: RegMr = arg.read()?;
    a.check(&ctx.limits).map_err(invalid)?;
    let writable =
        a.access & (ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC) != 0;
    // Pin without the lock (pinning takes the process's mmap_lock), then
    // hold the PD while the HCA registers the MR, so it cannot go
    // in between.
    let pages = PinnedPages::pin(a.addr, a.length, writable)?;
    let pd = {
        let mut o = ctx.objects.lock();
        let pd = o.pds.obj(a.pd_handle)?;
        o.pds.hold(a.pd_handle)?;
        pd
    };
    let mr = Umr::new(&pd.pd, a.pd_handle, pages, a.iova, a.access)
        .and_then(|mr| Ok(Arc::new(mr, GFP_KERNEL)?));
    let mr = match mr {
        Ok(mr) => mr,
        Err(e) => {
            ctx.objects.lock().pds.unhold(a.pd_handle);
            return Err(e);
        }
    };
    a.lkey = mr.mr.key;
    a.rkey = mr.mr.key;
    {
        let mut o = ctx.objects.lock();
        match o.mrs.insert(mr.clone()) {
            Ok(h) => a.mr_handle = h,
            Err(e) => {
                o.pds.unhold(a.pd_handle);
                drop(o);
                return Err(e);
            }
        }
    }
    if let Err(e) = arg.write(&a) {
        let mut o = ctx.objects.lock();
        if o.mrs.is(a.mr_handle, &mr) && o.mrs.remove(a.mr_handle).is_ok() {
            o.pds.unhold(a.pd_handle);
        }
        return Err(e);
    }
    Ok(0)
}

fn dereg_mr(ctx: &Ucontext, arg: &Arg) -> Result<isize> {
    let a = read_destroy(arg)?;
    let mr = {
        let mut o = ctx.objects.lock();
        let mr = o.mrs.remove(a.handle)?;
        o.pds.unhold(mr.pd_handle);
        mr
    };
    // Unpinning and uncharging happen here, outside the lock.
    drop(mr);
    arg.write(&a)?;
    Ok(0)
}

fn create_comp_channel(ctx: &Ucontext, arg: &Arg) -> Result<isize> {
    let mut a: CreateCompChannel = arg.read()?;
    a.check().map_err(invalid)?;
    let queue = EventQueue::new(QueueKind::Comp)?;
    {
        let mut o = ctx.objects.lock();
        // Disassociated meanwhile: its channels were taken and closed.
        if ctx.is_disassociated() {
            return Err(EIO);
        }
        // Forget channels whose file is gone and that no CQ uses.
        o.channels.retain(|q| !q.is_unused());
        if o.channels.len() >= MAX_CHANNELS {
            return Err(EMFILE);
        }
        o.channels.push(queue.clone(), GFP_KERNEL)?;
    }
    let pending = PendingFd::new(queue)?;
    a.fd = i32::try_from(pending.fd())?;
    // Dropping `pending` on failure releases the fd and the file; the
    // closed queue is pruned later.
    arg.write(&a)?;
    pending.install();
    Ok(0)
}

fn get_async_fd(ctx: &Ucontext, arg: &Arg) -> Result<isize> {
    let mut a: GetAsyncFd = arg.read()?;
    a.check().map_err(invalid)?;
    if ctx.async_fd_taken.swap(true, Ordering::AcqRel) {
        return Err(EEXIST);
    }
    let pending = match PendingFd::new(ctx.async_queue.clone()) {
        Ok(p) => p,
        Err(e) => {
            ctx.async_fd_taken.store(false, Ordering::Release);
            return Err(e);
        }
    };
    a.fd = i32::try_from(pending.fd())?;
    // On failure the file's release closes the async queue: a process that
    // cannot take its answer loses its async events (documented).
    arg.write(&a)?;
    pending.install();
    Ok(0)
}

fn create_cq(ctx: &Ucontext, arg: &Arg) -> Result<isize> {
    let mut a: CreateCq = arg.read()?;
    let cqe_cnt = a.check(&ctx.limits).map_err(invalid)?;
    let channel = match a.channel_fd {
        -1 => None,
        fd => {
            let q = queue_of_fd(u32::try_from(fd).map_err(|_| EINVAL)?)?;
            // Only this context's completion channels: not the async
            // file, not another context's channel.
            let o = ctx.objects.lock();
            if q.kind() != QueueKind::Comp || !o.channels.iter().any(|c| Arc::ptr_eq(c, &q)) {
                return Err(EINVAL);
            }
            Some(q)
        }
    };
    let place = CqPlace {
        dev: &ctx.dev,
        comp_vector: a.comp_vector,
        uar_addr: ctx.uar_addr(),
    };
    let cq = Arc::new(
        Ucq::new(
            &place,
            cqe_cnt,
            a.user_handle,
            channel,
            ctx.async_queue.clone(),
        )?,
        GFP_KERNEL,
    )?;
    a.cqn = cq.cqn();
    a.cqe_cnt = cq.cqe_cnt;
    a.cqe_size = CQE_SIZE as u32;
    a.buf_size = cq.buf.len() as u64;
    a.cq_handle = ctx.objects.lock().cqs.insert(cq.clone())?;
    a.buf_mmap_offset = encode(Kind::CqBuf, a.cq_handle).ok_or(EINVAL)?;
    a.dbr_mmap_offset = encode(Kind::CqDbr, a.cq_handle).ok_or(EINVAL)?;
    if let Err(e) = arg.write(&a) {
        let mut o = ctx.objects.lock();
        if o.cqs.is(a.cq_handle, &cq) {
            let _ = o.cqs.remove(a.cq_handle);
        }
        return Err(e);
    }
    Ok(0)
}

fn destroy_cq(ctx: &Ucontext, arg: &Arg) -> Result<isize> {
    let mut a = read_destroy(arg)?;
    let cq = {
        let mut o = ctx.objects.lock();
        let e = o.cqs.get(a.handle)?;
        if e.users > 0 {
            return Err(EBUSY);
        }
        // The CQ ends here, not when the last reference goes: a command
        // racing with this one may still hold the object, and the handle
        // stays until the device has let go of the CQ (on failure nothing
        // changed and the caller may retry). Its unread events leave their
        // queues now too, so the counts below are final and no event of
        // this CQ is read after it (libibverbs frees the CQ next).
        e.obj.end()?;
        o.cqs.remove(a.handle)?
    };
    a.comp_events_reported = cq.comp_events_reported();
    a.async_events_reported = cq.async_events_reported();
    drop(cq);
    arg.write(&a)?;
    Ok(0)
}

fn create_qp(ctx: &Ucontext, arg: &Arg) -> Result<isize> {
    let mut a: CreateQp = arg.read()?;
    a.check(&ctx.limits).map_err(invalid)?;
    let geom = qp_geometry(&a, &ctx.limits)?;
    let mut o = ctx.objects.lock();
    let pd = o.pds.obj(a.pd_handle)?;
    let send_cq = o.cqs.obj(a.send_cq_handle)?;
    let recv_cq = o.cqs.obj(a.recv_cq_handle)?;
    let handle = o.qps.next_handle()?;
    let (bfreg, bf_offset, bf_size) = bfreg_of(handle)?;
    let place = QpPlace {
        pd: &pd,
        send_cq: &send_cq,
        recv_cq: &recv_cq,
        uar_addr: ctx.uar_addr(),
    };
    let qp = Arc::new(
        Uqp::new(
            &place,
            a.user_handle,
            a.pd_handle,
            a.send_cq_handle,
            a.recv_cq_handle,
            geom,
            bfreg,
            ctx.async_queue.clone(),
        )?,
        GFP_KERNEL,
    )?;
    a.qp_handle = o.qps.insert(qp.clone())?;
    o.pds.hold(a.pd_handle)?;
    o.cqs.hold(a.send_cq_handle)?;
    o.cqs.hold(a.recv_cq_handle)?;
    drop(o);
    a.qpn = qp.qpn();
    a.sq_wqe_cnt = geom.sq_wqe_cnt;
    a.sq_wqe_shift = 6;
    a.rq_wqe_cnt = geom.rq_wqe_cnt;
    a.rq_wqe_shift = geom.rq_wqe_shift;
    a.max_send_wr_out = geom.max_send_wr;
    a.max_recv_wr_out = geom.max_recv_wr;
    a.max_send_sge_out = geom.max_send_sge;
    a.max_recv_sge_out = geom.max_recv_sge;
    a.max_inline_data_out = geom.max_inline_data;
    a.bf_size = bf_size;
    a.bf_offset = bf_offset;
    a.rq_buf_offset = 0;
    a.sq_buf_offset = geom.sq_buf_offset;
    a.buf_size = qp.buf.len() as u64;
    a.buf_mmap_offset = encode(Kind::QpBuf, a.qp_handle).ok_or(EINVAL)?;
    a.dbr_mmap_offset = encode(Kind::QpDbr, a.qp_handle).ok_or(EINVAL)?;
    a.uar_mmap_offset = encode(Kind::Uar, 0).ok_or(EINVAL)?;
    if let Err(e) = arg.write(&a) {
        let mut o = ctx.objects.lock();
        if o.qps.is(a.qp_handle, &qp) {
            // As DESTROY_QP: out of the device before the handle goes.
            if qp.end().is_ok() {
                unlink_qp(&mut o, a.qp_handle);
            }
        }
        return Err(e);
    }
    Ok(0)
}

/// Removes a QP from its table and releases its holds on PD and CQs.
fn unlink_qp(o: &mut super::context::Objects, handle: u32) -> Option<Arc<Uqp>> {
    let qp = o.qps.remove(handle).ok()?;
    o.pds.unhold(qp.pd_handle);
    o.cqs.unhold(qp.send_cq_handle);
    o.cqs.unhold(qp.recv_cq_handle);
    Some(qp)
}

fn destroy_qp(ctx: &Ucontext, arg: &Arg) -> Result<isize> {
    let mut a = read_destroy(arg)?;
    let qp = {
        let mut o = ctx.objects.lock();
        // As for a CQ: the QP leaves the device now, before its CQs and PD
        // lose this user, whoever else still holds the object.
        o.qps.get(a.handle)?.obj.end()?;
        unlink_qp(&mut o, a.handle).ok_or(EINVAL)?
    };
    a.async_events_reported = qp.async_events_reported();
    drop(qp);
    arg.write(&a)?;
    Ok(0)
}

fn modify_qp(ctx: &Ucontext, arg: &Arg) -> Result<isize> {
    let a: ModifyQp = arg.read()?;
    a.check(&ctx.limits).map_err(invalid)?;
    let qp = ctx.objects.lock().qps.obj(a.qp_handle)?;
    let u8_of = |v: u32| u8::try_from(v).map_err(|_| EINVAL);
    // The address vector names the peer HCA by its port's LID.
    let dest_hca = if a.attr_mask & QP_AV != 0 {
        let lid = u16::try_from(a.dlid).map_err(|_| EINVAL)?;
        ctx.dev.be.peer_of_dlid(lid).ok_or(EINVAL)?
    } else {
        0
    };
    let m = QpModify {
        mask: AttrMask(a.attr_mask),
        state: QpState::from_raw(a.qp_state).ok_or(EINVAL)?,
        cur_state: QpState::from_raw(a.cur_qp_state).ok_or(EINVAL)?,
        attrs: ConnAttrs {
            access: Access::from_bits(a.qp_access_flags).ok_or(EINVAL)?,
            pkey_index: 0,
            port: u8_of(a.port_num)?,
            path_mtu: u8_of(a.path_mtu)?,
            dest: RemoteQp {
                hca: dest_hca,
                qpn: a.dest_qp_num,
            },
            sl: u8_of(a.sl)?,
            rq_psn: a.rq_psn,
            sq_psn: a.sq_psn,
            max_dest_rd_atomic: u8_of(a.max_dest_rd_atomic)?,
            max_rd_atomic: u8_of(a.max_rd_atomic)?,
            min_rnr_timer: u8_of(a.min_rnr_timer)?,
            timeout: u8_of(a.timeout)?,
            retry_cnt: u8_of(a.retry_cnt)?,
            rnr_retry: u8_of(a.rnr_retry)?,
            sqd_async_notify: false,
            qkey: 0,
        },
    };
    // Nothing is written back: MODIFY_QP has no answer.
    qp.qp.modify(&m)?;
    Ok(0)
}

fn query_qp(ctx: &Ucontext, arg: &Arg) -> Result<isize> {
    let mut a: QueryQp = arg.read()?;
    a.check().map_err(invalid)?;
    let qp = ctx.objects.lock().qps.obj(a.qp_handle)?;
    let g = qp.geom;
    let (state, conn) = qp.qp.query()?;
    a.qp_state = state as u32;
    a.path_mtu = u32::from(conn.path_mtu);
    a.dest_qp_num = conn.dest.qpn;
    a.rq_psn = conn.rq_psn;
    a.sq_psn = conn.sq_psn;
    a.qp_access_flags = conn.access.bits();
    a.max_rd_atomic = u32::from(conn.max_rd_atomic);
    a.max_dest_rd_atomic = u32::from(conn.max_dest_rd_atomic);
    a.min_rnr_timer = u32::from(conn.min_rnr_timer);
    a.timeout = u32::from(conn.timeout);
    a.retry_cnt = u32::from(conn.retry_cnt);
    a.rnr_retry = u32::from(conn.rnr_retry);
    a.port_num = 1;
    (a.dlid, a.sl) = if state == QpState::Reset || state == QpState::Init {
        (0, 0)
    } else {
        (
            u32::from(ctx.dev.be.dlid_of_peer(conn.dest.hca)),
            u32::from(conn.sl),
        )
    };
    a.max_send_wr = g.max_send_wr;
    a.max_recv_wr = g.max_recv_wr;
    a.max_send_sge = g.max_send_sge;
    a.max_recv_sge = g.max_recv_sge;
    a.max_inline_data = g.max_inline_data;
    arg.write(&a)?;
    Ok(0)
}

fn kick(ctx: &Ucontext, arg: &Arg) -> Result<isize> {
    // The path figures time a kick from here (debugfs `rmlx5/perf`).
    let entry = ctx.dev.perf.now();
    let a: Kick = arg.read()?;
    a.check().map_err(invalid)?;
    // A device that sees the process's UAR stores has nothing to be told.
    if !ctx.uar.needs_kick() {
        return Err(EOPNOTSUPP);
    }
    match a.kind {
        KICK_CQ_ARM => {
            let cq = ctx.objects.lock().cqs.obj(a.handle)?;
            if cq.cq.is_destroyed() {
                return Err(EINVAL);
            }
            ctx.uar.kick_arm(entry)?;
        }
        KICK_RECV => {
            let qp = ctx.objects.lock().qps.obj(a.handle)?;
            ctx.uar.kick_recv(qp.qpn(), qp.qp.gone())?;
        }
        _ => {
            let qp = ctx.objects.lock().qps.obj(a.handle)?;
            let blueflame = a.kind == KICK_SEND_BLUEFLAME;
            ctx.uar
                .kick_send(&qp.qp.kick_target(), a.uar_offset, blueflame, entry)?;
        }
    }
    Ok(0)
}
