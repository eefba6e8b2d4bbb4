// SPDX-License-Identifier: GPL-2.0

//! The in-process "kernel": object records, the ABI commands, mmap, and
//! interrupt delivery for [`super::SoftFabric`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd};

use hca_model::cq::CqAttr;
use hca_model::doorbell::SendDoorbell;
use hca_model::eq::EqAttr;
use hca_model::fabric::{index_of_lid, lid_of_index};
use hca_model::mr::{Access, MrAttr};
use hca_model::qp::{ConnAttrs, QpAttr, QpService, QpState, RemoteQp};
use hca_model::qp_modify::{AttrMask, QpModify};
use mlx5_prm::cqe::{CQE_SIZE, OP_OWN_OFFSET};
use mlx5_prm::doorbell::{
    bf_reg_offset, EqDoorbell, BFREGS_PER_UAR, BF_BUF_SIZE, BF_REG_SIZE, QP_DBR_RECV_OFFSET,
    QP_DBR_SEND_OFFSET, UAR_EQ_ARM_OFFSET, UAR_PAGE_SIZE,
};
use mlx5_prm::eqe::{Eqe, EqeData, EQE_SIZE, OWNER_OFFSET};
use mlx5_prm::opcode::EventType;
use mlx5_prm::ring::{self, CQE_INIT_OP_OWN, EQE_INIT_OWNER};
use mlx5_prm::wqe::{
    inline_seg_size, CtrlSeg, DataSeg, MaskedAtomicSeg, RaddrSeg, MAX_WQE_SIZE, WQEBB_SIZE,
};
use rmlx5_abi::mmap::{self, Kind};
use rmlx5_abi::uapi;

use super::{event_socket, ProcMem, State};
use crate::backend::Cmd;
use crate::dma::{DmaRegion, HeapPages, PAGE_SIZE};
use crate::error::{Error, Result};

const EINVAL: i32 = libc::EINVAL;

fn os(errno: i32) -> Error {
    Error::Os { op: "", errno }
}

fn model_err(e: hca_model::error::Error) -> Error {
    os(e.errno())
}

/// Allocates zeroed pages and registers them with the model's memory.
fn alloc_dma(mem: &mut ProcMem, len: usize) -> Result<DmaRegion> {
    let (_pages, region) = HeapPages::alloc(len)?;
    mem.add(&region)?;
    Ok(region)
}

/// Allocates a zeroed page for a doorbell record and registers it with the
/// model's memory as one (read in whole 32-bit words).
fn alloc_dbr(mem: &mut ProcMem) -> Result<DmaRegion> {
    let (_pages, region) = HeapPages::alloc(PAGE_SIZE)?;
    mem.add_records(&region)?;
    Ok(region)
}

/// An EQ the "kernel" consumes.
#[derive(Debug)]
pub(crate) struct KernelEq {
    eqn: u8,
    buf: DmaRegion,
    log: u32,
    ci: u32,
}

/// Per-device kernel state: its UAR page and EQs.
#[derive(Debug)]
pub(crate) struct DevState {
    uar: DmaRegion,
    comp: KernelEq,
    async_eq: KernelEq,
}

impl DevState {
    pub(crate) fn new(st: &mut State, dev: usize) -> Result<DevState> {
        let uar = alloc_dma(&mut st.mem, UAR_PAGE_SIZE)?;
        let comp = new_eq(st, dev, &uar, 10, false)?;
        let async_eq = new_eq(st, dev, &uar, 6, true)?;
        let d = DevState {
            uar,
            comp,
            async_eq,
        };
        for eq in [&d.comp, &d.async_eq] {
            arm_eq(st, dev, &d.uar, eq)?;
        }
        Ok(d)
    }
}

fn new_eq(
    st: &mut State,
    dev: usize,
    uar: &DmaRegion,
    log: u32,
    async_events: bool,
) -> Result<KernelEq> {
    let buf = alloc_dma(&mut st.mem, EQE_SIZE << log)?;
    for i in 0..(1usize << log) {
        buf.write(i * EQE_SIZE + OWNER_OFFSET, &[EQE_INIT_OWNER])?;
    }
    let attr = EqAttr {
        log_size: u8::try_from(log).map_err(|_| Error::Invalid("eq size"))?,
        buf_addr: buf.addr(),
        uar_addr: uar.addr(),
        vector: u16::from(!async_events),
        async_events,
    };
    let eqn = hca(st, dev)?.create_eq(&attr).map_err(model_err)?;
    Ok(KernelEq {
        eqn,
        buf,
        log,
        ci: 0,
    })
}

fn hca(st: &mut State, dev: usize) -> Result<&mut hca_model::hca::Hca<super::VecStorage>> {
    st.fabric
        .hca(u16::try_from(dev).map_err(|_| Error::NoDevice)?)
        .ok_or(Error::NoDevice)
}

fn arm_eq(st: &mut State, dev: usize, uar: &DmaRegion, eq: &KernelEq) -> Result<()> {
    let mut b = [0u8; 4];
    EqDoorbell {
        eqn: eq.eqn,
        ci: ring::ci24(eq.ci),
    }
    .encode(&mut b);
    uar.write(UAR_EQ_ARM_OFFSET, &b)?;
    let addr = uar.addr();
    let State { fabric, mem, .. } = st;
    let h = fabric
        .hca(u16::try_from(dev).map_err(|_| Error::NoDevice)?)
        .ok_or(Error::NoDevice)?;
    h.eq_doorbell(mem, addr, true)
        .map_err(|e| Error::Doorbell(format!("EQ arm: {:?}", e)))
}

/// A CQ's kernel-side record.
#[derive(Debug)]
struct CqRec {
    user_handle: u64,
    channel: Option<i32>,
    buf: DmaRegion,
    dbr: DmaRegion,
    events: u32,
}

/// A QP's kernel-side record.
#[derive(Debug)]
struct QpRec {
    user_handle: u64,
    buf: DmaRegion,
    dbr: DmaRegion,
    bf_offset: usize,
}

/// A completion channel: the backend's ends of its socket pair.
#[derive(Debug)]
struct Channel {
    reader: OwnedFd,
    writer: OwnedFd,
}

/// Per-context kernel state.
#[derive(Debug)]
pub(crate) struct CtxState {
    dev: usize,
    uar: DmaRegion,
    pds: HashSet<u32>,
    mrs: HashMap<u32, DmaRegion>,
    cqs: BTreeMap<u32, CqRec>,
    qps: BTreeMap<u32, QpRec>,
    channels: HashMap<i32, Channel>,
    async_fd: Option<(i32, OwnedFd)>,
    unclaimed_fds: HashSet<i32>,
    next_bfreg: usize,
}

impl CtxState {
    pub(crate) fn new(mem: &mut ProcMem, dev: usize) -> Result<CtxState> {
        Ok(CtxState {
            dev,
            uar: alloc_dma(mem, UAR_PAGE_SIZE)?,
            pds: HashSet::new(),
            mrs: HashMap::new(),
            cqs: BTreeMap::new(),
            qps: BTreeMap::new(),
            channels: HashMap::new(),
            async_fd: None,
            unclaimed_fds: HashSet::new(),
            next_bfreg: 0,
        })
    }

    /// Whether `fd` was handed out by a command of this context and not
    /// yet claimed; claims it.
    pub(crate) fn claim_fd(&mut self, fd: i32) -> bool {
        self.unclaimed_fds.remove(&fd)
    }
}

/// What a command did.
pub(crate) struct Outcome {
    pub(crate) result: Result<()>,
    /// Whether the engine must run (a kick).
    pub(crate) ran: bool,
}

fn ctx_mut(st: &mut State, ctx: u64) -> Result<&mut CtxState> {
    st.ctxs.get_mut(&ctx).ok_or(Error::NoDevice)
}

fn check_hdr(hdr: &uapi::CmdHdr) -> Result<()> {
    if hdr.flags != 0 {
        return Err(os(EINVAL));
    }
    Ok(())
}

pub(crate) fn command(st: &mut State, ctx: u64, cmd: Cmd<'_>) -> Outcome {
    let ran = matches!(cmd, Cmd::Kick(_) | Cmd::ModifyQp(_));
    let result = run_command(st, ctx, cmd);
    Outcome { result, ran }
}

fn run_command(st: &mut State, ctx: u64, cmd: Cmd<'_>) -> Result<()> {
    let dev = ctx_mut(st, ctx)?.dev;
    match cmd {
        Cmd::QueryDevice(a) => {
            check_hdr(&a.hdr)?;
            let caps = *hca(st, dev)?.caps();
            let d = u32::try_from(dev).unwrap_or(0);
            *a = uapi::QueryDevice {
                hdr: a.hdr,
                fw_ver: 1 << 32,
                node_guid: 0x0002_c903_0000_0000 | u64::from(d + 1),
                sys_image_guid: 0x0002_c903_0000_0000,
                max_mr_size: u64::from(caps.max_msg_size),
                page_size_cap: 1 << 12,
                vendor_id: 0x02c9,
                vendor_part_id: 0,
                hw_ver: 0,
                max_qp: (SLOTS_U32).saturating_sub(1),
                max_qp_wr: 1 << (caps.max_log_sq_wqebbs - 2),
                max_sge: caps.max_send_sge.min(caps.max_recv_sge),
                max_cq: SLOTS_U32,
                max_cqe: (1 << caps.max_log_cq_size) - 1,
                max_mr: SLOTS_U32,
                max_pd: SLOTS_U32,
                max_qp_rd_atom: u32::from(caps.max_qp_dest_rd_atom),
                max_qp_init_rd_atom: u32::from(caps.max_qp_rd_atom),
                atomic_cap: uapi::ATOMIC_HCA,
                num_comp_vectors: 1,
                max_inline_data: caps.max_inline_data,
                phys_port_cnt: 1,
                bf_reg_size: u32::try_from(BF_REG_SIZE).unwrap_or(0),
                uar_size: u32::try_from(UAR_PAGE_SIZE).unwrap_or(0),
                device_index: d,
                // A software HCA: it sees doorbells only through KICK.
                device_flags: 0,
            };
            Ok(())
        }
        Cmd::QueryPort(a) => {
            check_hdr(&a.hdr)?;
            if a.port_num != 1 {
                return Err(os(EINVAL));
            }
            *a = uapi::QueryPort {
                hdr: a.hdr,
                port_num: 1,
                state: uapi::PORT_ACTIVE,
                max_mtu: uapi::MTU_4096,
                active_mtu: uapi::MTU_4096,
                lid: u32::from(lid_of_index(u16::try_from(dev).unwrap_or(u16::MAX))),
                sm_lid: 1,
                port_cap_flags: 0,
                gid_tbl_len: 1,
                active_width: 2,
                active_speed: 32,
                link_layer: uapi::LINK_LAYER_INFINIBAND,
                reserved: 0,
            };
            Ok(())
        }
        Cmd::AllocPd(a) => {
            check_hdr(&a.hdr)?;
            let pdn = hca(st, dev)?.alloc_pd().map_err(model_err)?;
            ctx_mut(st, ctx)?.pds.insert(pdn);
            a.pd_handle = pdn;
            a.pdn = pdn;
            Ok(())
        }
        Cmd::DeallocPd(a) => {
            check_hdr(&a.hdr)?;
            if !ctx_mut(st, ctx)?.pds.contains(&a.handle) {
                return Err(os(EINVAL));
            }
            hca(st, dev)?.dealloc_pd(a.handle).map_err(model_err)?;
            ctx_mut(st, ctx)?.pds.remove(&a.handle);
            Ok(())
        }
        Cmd::RegMr(a) => reg_mr(st, ctx, dev, a),
        Cmd::DeregMr(a) => {
            check_hdr(&a.hdr)?;
            let c = ctx_mut(st, ctx)?;
            if !c.mrs.contains_key(&a.handle) {
                return Err(os(EINVAL));
            }
            hca(st, dev)?.destroy_mr(a.handle).map_err(model_err)?;
            if let Some(r) = ctx_mut(st, ctx)?.mrs.remove(&a.handle) {
                st.mem.remove(r.addr());
            }
            Ok(())
        }
        Cmd::CreateCompChannel(a) => {
            check_hdr(&a.hdr)?;
            let (reader, writer) = event_socket()?;
            let keep = reader.try_clone().map_err(|_| Error::last_os("dup"))?;
            let fd = reader.into_raw_fd();
            let c = ctx_mut(st, ctx)?;
            c.channels.insert(
                fd,
                Channel {
                    reader: keep,
                    writer,
                },
            );
            c.unclaimed_fds.insert(fd);
            a.fd = fd;
            Ok(())
        }
        Cmd::CreateCq(a) => create_cq(st, ctx, dev, a),
        Cmd::DestroyCq(a) => {
            check_hdr(&a.hdr)?;
            if !ctx_mut(st, ctx)?.cqs.contains_key(&a.handle) {
                return Err(os(EINVAL));
            }
            hca(st, dev)?.destroy_cq(a.handle).map_err(model_err)?;
            let c = ctx_mut(st, ctx)?;
            let rec = c.cqs.remove(&a.handle).ok_or(os(EINVAL))?;
            let mut reported = rec.events;
            if let Some(ch) = rec.channel.and_then(|fd| c.channels.get(&fd)) {
                reported = reported.saturating_sub(take_back_events(ch, rec.user_handle));
            }
            st.mem.remove(rec.buf.addr());
            st.mem.remove(rec.dbr.addr());
            a.comp_events_reported = reported;
            a.async_events_reported = 0;
            Ok(())
        }
        Cmd::CreateQp(a) => create_qp(st, ctx, dev, a),
        Cmd::ModifyQp(a) => modify_qp(st, ctx, dev, a),
        Cmd::QueryQp(a) => {
            check_hdr(&a.hdr)?;
            if !ctx_mut(st, ctx)?.qps.contains_key(&a.qp_handle) {
                return Err(os(EINVAL));
            }
            let info = hca(st, dev)?.query_qp(a.qp_handle).ok_or(os(EINVAL))?;
            a.qp_state = info.state as u32;
            a.path_mtu = u32::from(info.conn.path_mtu);
            a.dest_qp_num = info.conn.dest.qpn;
            a.rq_psn = info.conn.rq_psn;
            a.sq_psn = info.conn.sq_psn;
            a.qp_access_flags = info.conn.access.bits();
            a.max_rd_atomic = u32::from(info.conn.max_rd_atomic);
            a.max_dest_rd_atomic = u32::from(info.conn.max_dest_rd_atomic);
            a.min_rnr_timer = u32::from(info.conn.min_rnr_timer);
            a.timeout = u32::from(info.conn.timeout);
            a.retry_cnt = u32::from(info.conn.retry_cnt);
            a.rnr_retry = u32::from(info.conn.rnr_retry);
            a.port_num = u32::from(info.conn.port);
            a.dlid = u32::from(lid_of_index(info.conn.dest.hca));
            a.sl = u32::from(info.conn.sl);
            Ok(())
        }
        Cmd::DestroyQp(a) => {
            check_hdr(&a.hdr)?;
            if !ctx_mut(st, ctx)?.qps.contains_key(&a.handle) {
                return Err(os(EINVAL));
            }
            hca(st, dev)?.destroy_qp(a.handle).map_err(model_err)?;
            if let Some(rec) = ctx_mut(st, ctx)?.qps.remove(&a.handle) {
                st.mem.remove(rec.buf.addr());
                st.mem.remove(rec.dbr.addr());
            }
            a.comp_events_reported = 0;
            a.async_events_reported = 0;
            Ok(())
        }
        Cmd::Kick(a) => kick(st, ctx, dev, a),
        Cmd::GetAsyncFd(a) => {
            check_hdr(&a.hdr)?;
            let c = ctx_mut(st, ctx)?;
            if c.async_fd.is_some() {
                return Err(os(libc::EBUSY));
            }
            let (reader, writer) = event_socket()?;
            let fd = reader.into_raw_fd();
            c.async_fd = Some((fd, writer));
            c.unclaimed_fds.insert(fd);
            a.fd = fd;
            Ok(())
        }
    }
}

const SLOTS_U32: u32 = 256;

fn reg_mr(st: &mut State, ctx: u64, dev: usize, a: &mut uapi::RegMr) -> Result<()> {
    check_hdr(&a.hdr)?;
    let access = Access::from_bits(a.access).ok_or(os(EINVAL))?;
    if !ctx_mut(st, ctx)?.pds.contains(&a.pd_handle) || a.length == 0 {
        return Err(os(EINVAL));
    }
    // The buffer must be one the provider allocated and handed over with
    // `adopt_buffer`: in-process there are no pages to pin, so the backend
    // only accepts memory it can keep alive itself.
    let len = usize::try_from(a.length).map_err(|_| os(EINVAL))?;
    let region = st
        .pending_buffers
        .iter()
        .find(|r| r.addr() <= a.addr && a.addr + a.length <= r.addr() + r.len() as u64)
        .ok_or(os(libc::EFAULT))?;
    let off = usize::try_from(a.addr - region.addr()).map_err(|_| os(EINVAL))?;
    let sub = region.slice(off, len)?;
    let key = hca(st, dev)?
        .create_mr(&MrAttr {
            pdn: a.pd_handle,
            iova: a.iova,
            length: a.length,
            dma_addr: a.addr,
            access,
        })
        .map_err(model_err)?;
    st.mem.add(&sub)?;
    ctx_mut(st, ctx)?.mrs.insert(key, sub);
    a.mr_handle = key;
    a.lkey = key;
    a.rkey = key;
    Ok(())
}

fn create_cq(st: &mut State, ctx: u64, dev: usize, a: &mut uapi::CreateCq) -> Result<()> {
    check_hdr(&a.hdr)?;
    let caps = *hca(st, dev)?.caps();
    if a.cqe == 0 || a.cqe >= 1 << caps.max_log_cq_size || a.comp_vector != 0 {
        return Err(os(EINVAL));
    }
    let entries = a.cqe.checked_next_power_of_two().ok_or(os(EINVAL))?;
    let log = entries.trailing_zeros();
    if a.channel_fd >= 0 && !ctx_mut(st, ctx)?.channels.contains_key(&a.channel_fd) {
        return Err(os(libc::EBADF));
    }
    let size = CQE_SIZE << log;
    let buf = alloc_dma(&mut st.mem, size)?;
    for i in 0..(1usize << log) {
        buf.write(i * CQE_SIZE + OP_OWN_OFFSET, &[CQE_INIT_OP_OWN])?;
    }
    let dbr = alloc_dbr(&mut st.mem)?;
    let uar_addr = ctx_mut(st, ctx)?.uar.addr();
    let eqn = st.devs.get(dev).ok_or(Error::NoDevice)?.comp.eqn;
    let attr = CqAttr {
        log_size: u8::try_from(log).map_err(|_| os(EINVAL))?,
        buf_addr: buf.addr(),
        buf_pages: None,
        dbr_addr: dbr.addr(),
        eqn,
        uar_addr,
    };
    let cqn = match hca(st, dev)?.create_cq(&attr) {
        Ok(c) => c,
        Err(e) => {
            st.mem.remove(buf.addr());
            st.mem.remove(dbr.addr());
            return Err(model_err(e));
        }
    };
    a.cq_handle = cqn;
    a.cqn = cqn;
    a.cqe_cnt = entries;
    a.cqe_size = u32::try_from(CQE_SIZE).unwrap_or(64);
    a.buf_mmap_offset = mmap::encode(Kind::CqBuf, cqn).ok_or(os(EINVAL))?;
    a.buf_size = size as u64;
    a.dbr_mmap_offset = mmap::encode(Kind::CqDbr, cqn).ok_or(os(EINVAL))?;
    let channel = (a.channel_fd >= 0).then_some(a.channel_fd);
    ctx_mut(st, ctx)?.cqs.insert(
        cqn,
        CqRec {
            user_handle: a.user_handle,
            channel,
            buf,
            dbr,
            events: 0,
        },
    );
    Ok(())
}

/// Bytes of the largest send WQE a QP with these limits can post.
fn max_wqe_bytes(max_sge: u32, max_inline: u32) -> usize {
    let data = (max_sge as usize * DataSeg::SIZE).max(inline_seg_size(max_inline as usize));
    let rdma = CtrlSeg::SIZE + RaddrSeg::SIZE + data;
    let atomic = CtrlSeg::SIZE + RaddrSeg::SIZE + MaskedAtomicSeg::SIZE + DataSeg::SIZE;
    rdma.max(atomic).next_multiple_of(WQEBB_SIZE)
}

fn create_qp(st: &mut State, ctx: u64, dev: usize, a: &mut uapi::CreateQp) -> Result<()> {
    check_hdr(&a.hdr)?;
    let caps = *hca(st, dev)?.caps();
    let c = ctx_mut(st, ctx)?;
    if a.qp_type != uapi::QPT_RC
        || !c.pds.contains(&a.pd_handle)
        || !c.cqs.contains_key(&a.send_cq_handle)
        || !c.cqs.contains_key(&a.recv_cq_handle)
        || a.sq_sig_all > 1
        || a.max_send_sge > caps.max_send_sge
        || a.max_recv_sge > caps.max_recv_sge
        || a.max_inline_data > caps.max_inline_data
    {
        return Err(os(EINVAL));
    }
    let wqe_bytes = max_wqe_bytes(a.max_send_sge.max(1), a.max_inline_data);
    if wqe_bytes > MAX_WQE_SIZE {
        return Err(os(EINVAL));
    }
    let bbs_per_wr = u32::try_from(wqe_bytes / WQEBB_SIZE).map_err(|_| os(EINVAL))?;
    let sq_wqebbs = a
        .max_send_wr
        .max(1)
        .checked_mul(bbs_per_wr)
        .and_then(u32::checked_next_power_of_two)
        .ok_or(os(EINVAL))?;
    let rq_wqes = a
        .max_recv_wr
        .max(1)
        .checked_next_power_of_two()
        .ok_or(os(EINVAL))?;
    if sq_wqebbs.trailing_zeros() > u32::from(caps.max_log_sq_wqebbs)
        || rq_wqes.trailing_zeros() > u32::from(caps.max_log_rq_wqes)
    {
        return Err(os(EINVAL));
    }
    let rq_stride = (a.max_recv_sge.max(1) * DataSeg::SIZE as u32).next_power_of_two();
    let rq_size = (rq_wqes as usize) * (rq_stride as usize);
    let sq_off = rq_size.next_multiple_of(WQEBB_SIZE);
    let sq_size = (sq_wqebbs as usize) * WQEBB_SIZE;
    let total = sq_off + sq_size;
    let bfreg = c.next_bfreg % BFREGS_PER_UAR;
    c.next_bfreg += 1;
    let uar_addr = c.uar.addr();
    let bf_offset = bf_reg_offset(bfreg).map_err(|_| os(EINVAL))?;
    let buf = alloc_dma(&mut st.mem, total)?;
    let dbr = alloc_dbr(&mut st.mem)?;
    let attr = QpAttr {
        // The user-space ABI creates RC QPs only.
        service: QpService::Rc,
        pdn: a.pd_handle,
        send_cqn: a.send_cq_handle,
        recv_cqn: a.recv_cq_handle,
        sq_wqebbs,
        sq_buf_addr: buf.addr() + sq_off as u64,
        rq_wqes,
        rq_stride,
        rq_buf_addr: buf.addr(),
        buf_pages: None,
        dbr_addr: dbr.addr(),
        uar_addr,
        bfreg: u8::try_from(bfreg).unwrap_or(0),
        max_send_sge: a.max_send_sge,
        max_inline_data: a.max_inline_data,
    };
    let qpn = match hca(st, dev)?.create_qp(&attr) {
        Ok(q) => q,
        Err(e) => {
            st.mem.remove(buf.addr());
            st.mem.remove(dbr.addr());
            return Err(model_err(e));
        }
    };
    a.qp_handle = qpn;
    a.qpn = qpn;
    a.sq_wqe_cnt = sq_wqebbs;
    a.sq_wqe_shift = 6;
    a.rq_wqe_cnt = rq_wqes;
    a.rq_wqe_shift = rq_stride.trailing_zeros();
    a.max_send_wr_out = sq_wqebbs / bbs_per_wr;
    a.max_recv_wr_out = rq_wqes;
    a.max_send_sge_out = a.max_send_sge;
    a.max_recv_sge_out = rq_stride / 16;
    a.max_inline_data_out = a.max_inline_data;
    a.bf_size = u32::try_from(BF_BUF_SIZE).unwrap_or(0);
    a.bf_offset = u32::try_from(bf_offset).unwrap_or(0);
    a.rq_buf_offset = 0;
    a.sq_buf_offset = u32::try_from(sq_off).map_err(|_| os(EINVAL))?;
    a.buf_mmap_offset = mmap::encode(Kind::QpBuf, qpn).ok_or(os(EINVAL))?;
    a.buf_size = buf.len() as u64;
    a.dbr_mmap_offset = mmap::encode(Kind::QpDbr, qpn).ok_or(os(EINVAL))?;
    a.uar_mmap_offset = mmap::encode(Kind::Uar, 0).ok_or(os(EINVAL))?;
    ctx_mut(st, ctx)?.qps.insert(
        qpn,
        QpRec {
            user_handle: a.user_handle,
            buf,
            dbr,
            bf_offset,
        },
    );
    Ok(())
}

fn modify_qp(st: &mut State, ctx: u64, dev: usize, a: &mut uapi::ModifyQp) -> Result<()> {
    check_hdr(&a.hdr)?;
    let av = a.attr_mask & uapi::QP_AV != 0;
    if a.attr_mask & !uapi::QP_ATTR_MASK_ALL != 0 || a.sl > 15 || (!av && a.sl != 0) {
        return Err(os(EINVAL));
    }
    let n_dev = st.devs.len();
    let c = ctx_mut(st, ctx)?;
    let rec = c.qps.get(&a.qp_handle).ok_or(os(EINVAL))?;
    let dbr = rec.dbr.slice(0, 8)?;
    let u8_of = |v: u32| u8::try_from(v).map_err(|_| os(EINVAL));
    let dest_hca = if av {
        let lid = u16::try_from(a.dlid).map_err(|_| os(EINVAL))?;
        match index_of_lid(lid) {
            Some(i) if usize::from(i) < n_dev => i,
            _ => return Err(os(EINVAL)),
        }
    } else {
        0
    };
    let state = QpState::from_raw(a.qp_state).ok_or(os(EINVAL))?;
    let m = QpModify {
        mask: AttrMask(a.attr_mask),
        state,
        cur_state: QpState::from_raw(a.cur_qp_state).ok_or(os(EINVAL))?,
        attrs: ConnAttrs {
            access: Access::from_bits(a.qp_access_flags).ok_or(os(EINVAL))?,
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
            // No Q_Key on the RC QPs of the user-space ABI.
            qkey: 0,
        },
    };
    hca(st, dev)?
        .modify_qp(a.qp_handle, &m)
        .map_err(model_err)?;
    if a.attr_mask & uapi::QP_STATE != 0 && state == QpState::Reset {
        // The kernel zeroes the doorbell record when a QP goes to RESET
        // (word by word, as the provider stores it).
        dbr.store_u32(QP_DBR_RECV_OFFSET, [0; 4])?;
        dbr.store_u32(QP_DBR_SEND_OFFSET, [0; 4])?;
    }
    Ok(())
}

fn kick(st: &mut State, ctx: u64, dev: usize, a: &mut uapi::Kick) -> Result<()> {
    check_hdr(&a.hdr)?;
    if a.reserved != 0 {
        return Err(os(EINVAL));
    }
    let c = ctx_mut(st, ctx)?;
    let uar = c.uar.slice(0, UAR_PAGE_SIZE)?;
    match a.kind {
        uapi::KICK_SEND | uapi::KICK_SEND_BLUEFLAME => {
            let rec = c.qps.get(&a.handle).ok_or(os(EINVAL))?;
            let off = usize::try_from(a.uar_offset).map_err(|_| os(EINVAL))?;
            let half = match off.checked_sub(rec.bf_offset) {
                Some(0) => 0,
                Some(BF_BUF_SIZE) => 1,
                _ => return Err(os(EINVAL)),
            };
            // The ABI's kick carries no BlueFlame length: it is the size of
            // the WQE whose control segment starts the copy.
            let blueflame_len = if a.kind == uapi::KICK_SEND_BLUEFLAME {
                let mut ctrl = [0u8; CtrlSeg::SIZE];
                uar.read(off, &mut ctrl)?;
                let ds = CtrlSeg::ds_of(&ctrl);
                u32::from(ring::wqebb_count(ds)) * WQEBB_SIZE as u32
            } else {
                0
            };
            let db = SendDoorbell {
                qpn: a.handle,
                half,
                blueflame_len,
            };
            let State { fabric, mem, .. } = st;
            let h = fabric
                .hca(u16::try_from(dev).map_err(|_| Error::NoDevice)?)
                .ok_or(Error::NoDevice)?;
            h.send_doorbell(mem, &db)
                .map_err(|e| Error::Doorbell(format!("send doorbell QP {:#x}: {:?}", a.handle, e)))
        }
        uapi::KICK_RECV => {
            if !c.qps.contains_key(&a.handle) {
                return Err(os(EINVAL));
            }
            hca(st, dev)?
                .recv_doorbell(a.handle)
                .map_err(|e| Error::Doorbell(format!("receive kick: {:?}", e)))
        }
        uapi::KICK_CQ_ARM => {
            if !c.cqs.contains_key(&a.handle) {
                return Err(os(EINVAL));
            }
            let addr = uar.addr();
            let State { fabric, mem, .. } = st;
            let h = fabric
                .hca(u16::try_from(dev).map_err(|_| Error::NoDevice)?)
                .ok_or(Error::NoDevice)?;
            h.cq_doorbell(mem, addr)
                .map_err(|e| Error::Doorbell(format!("CQ arm {:#x}: {:?}", a.handle, e)))
        }
        _ => Err(os(EINVAL)),
    }
}

/// Buffers the provider allocated for MRs, waiting for `REG_MR`.
impl State {
    pub(crate) fn adopt(&mut self, region: DmaRegion) {
        self.pending_buffers.retain(|r| r.addr() != region.addr());
        self.pending_buffers.push(region);
    }

    pub(crate) fn release(&mut self, addr: u64) {
        self.pending_buffers.retain(|r| r.addr() != addr);
    }
}

pub(crate) fn map(st: &State, ctx: u64, offset: u64, len: usize) -> Result<DmaRegion> {
    let c = st.ctxs.get(&ctx).ok_or(Error::NoDevice)?;
    let (kind, handle) = mmap::decode(offset).ok_or(Error::Os {
        op: "mmap",
        errno: EINVAL,
    })?;
    let region = match kind {
        Kind::Uar => &c.uar,
        Kind::CqBuf => c.cqs.get(&handle).map(|r| &r.buf).ok_or(os(EINVAL))?,
        Kind::CqDbr => c.cqs.get(&handle).map(|r| &r.dbr).ok_or(os(EINVAL))?,
        Kind::QpBuf => c.qps.get(&handle).map(|r| &r.buf).ok_or(os(EINVAL))?,
        Kind::QpDbr => c.qps.get(&handle).map(|r| &r.dbr).ok_or(os(EINVAL))?,
    };
    if len == 0 || len > region.len() {
        return Err(Error::Os {
            op: "mmap",
            errno: EINVAL,
        });
    }
    region.slice(0, len)
}

/// Reads every event queued on `ch` and puts back those not for
/// `user_handle`; returns how many were taken out.
fn take_back_events(ch: &Channel, user_handle: u64) -> u32 {
    let mut keep = Vec::new();
    let mut taken = 0u32;
    loop {
        let mut b = [0u8; 8];
        // SAFETY: `b` is a valid 8-byte buffer; recv writes at most that.
        let n = unsafe {
            libc::recv(
                ch.reader.as_raw_fd(),
                b.as_mut_ptr().cast(),
                b.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n != 8 {
            break;
        }
        if u64::from_ne_bytes(b) == user_handle {
            taken += 1;
        } else {
            keep.push(b);
        }
    }
    for b in keep {
        send_event(&ch.writer, &b);
    }
    taken
}

fn send_event(fd: &OwnedFd, bytes: &[u8]) -> bool {
    // SAFETY: `bytes` is a valid buffer of the given length.
    let n = unsafe {
        libc::send(
            fd.as_raw_fd(),
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    usize::try_from(n).is_ok_and(|n| n == bytes.len())
}

/// Consumes the EQEs behind every interrupt the model raised and turns
/// them into channel and async events, then re-arms the EQ.
pub(crate) fn deliver_interrupts(st: &mut State) {
    while let Some(irq) = st.mem.irqs.pop() {
        let dev = usize::from(irq.hca);
        let Some(d) = st.devs.get_mut(dev) else {
            continue;
        };
        let is_async = irq.eqn == d.async_eq.eqn;
        let eq = if is_async {
            &mut d.async_eq
        } else {
            &mut d.comp
        };
        let mut events = Vec::new();
        for _ in 0..(1u32 << eq.log) {
            let idx = ring::ring_index(eq.ci, eq.log) as usize;
            let Ok(owner) = eq.buf.load_u8(idx * EQE_SIZE + OWNER_OFFSET) else {
                break;
            };
            if !ring::eqe_valid(owner, eq.ci, eq.log) {
                break;
            }
            let mut b = [0u8; EQE_SIZE];
            if eq.buf.read(idx * EQE_SIZE, &mut b).is_err() {
                break;
            }
            eq.ci = eq.ci.wrapping_add(1);
            if let Ok(e) = Eqe::decode(&b) {
                events.push(e);
            }
        }
        let uar = match d.uar.slice(0, UAR_PAGE_SIZE) {
            Ok(u) => u,
            Err(_) => continue,
        };
        let eq_snapshot = KernelEq {
            eqn: eq.eqn,
            buf: match eq.buf.slice(0, eq.buf.len()) {
                Ok(b) => b,
                Err(_) => continue,
            },
            log: eq.log,
            ci: eq.ci,
        };
        for e in events {
            dispatch(st, dev, &e);
        }
        // An arm failure means the model refused our own doorbell: nothing
        // to report it to but the model's statistics.
        let _ = arm_eq(st, dev, &uar, &eq_snapshot);
    }
}

fn dispatch(st: &mut State, dev: usize, e: &Eqe) {
    match e.data {
        EqeData::Comp { cqn } => {
            for c in st.ctxs.values_mut().filter(|c| c.dev == dev) {
                if let Some(rec) = c.cqs.get_mut(&cqn) {
                    if let Some(ch) = rec.channel.and_then(|fd| c.channels.get(&fd)) {
                        if send_event(&ch.writer, &rec.user_handle.to_ne_bytes()) {
                            rec.events += 1;
                        }
                    }
                }
            }
        }
        EqeData::CqError { cqn, .. } => {
            for c in st.ctxs.values_mut().filter(|c| c.dev == dev) {
                if let Some(rec) = c.cqs.get(&cqn) {
                    let h = rec.user_handle;
                    async_event(c, h, uapi::EVENT_CQ_ERR);
                }
            }
        }
        EqeData::QpSrq { qp_srq_n, .. } => {
            let kind = match e.event_type {
                EventType::WqCatasError => uapi::EVENT_QP_FATAL,
                EventType::WqInvalReqError => uapi::EVENT_QP_REQ_ERR,
                EventType::WqAccessError => uapi::EVENT_QP_ACCESS_ERR,
                EventType::CommEst => uapi::EVENT_COMM_EST,
                EventType::SqDrained => uapi::EVENT_SQ_DRAINED,
                EventType::SrqLastWqe => uapi::EVENT_QP_LAST_WQE_REACHED,
                _ => return,
            };
            for c in st.ctxs.values_mut().filter(|c| c.dev == dev) {
                if let Some(rec) = c.qps.get(&qp_srq_n) {
                    let h = rec.user_handle;
                    async_event(c, h, kind);
                }
            }
        }
        EqeData::Raw(_) => {}
    }
}

fn async_event(c: &CtxState, element: u64, event_type: u32) {
    if let Some((_, w)) = &c.async_fd {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&element.to_ne_bytes());
        b[8..12].copy_from_slice(&event_type.to_ne_bytes());
        send_event(w, &b);
    }
}

/// Destroys everything a context created, in dependency order, as the
/// kernel does when the device file is closed.
pub(crate) fn close_context(st: &mut State, ctx: u64) {
    let Some(c) = st.ctxs.remove(&ctx) else {
        return;
    };
    let dev = c.dev;
    if let Ok(h) = hca(st, dev) {
        for qpn in c.qps.keys() {
            let _ = h.destroy_qp(*qpn);
        }
        for cqn in c.cqs.keys() {
            let _ = h.destroy_cq(*cqn);
        }
        for key in c.mrs.keys() {
            let _ = h.destroy_mr(*key);
        }
        for pdn in &c.pds {
            let _ = h.dealloc_pd(*pdn);
        }
    }
    for r in c.qps.values() {
        st.mem.remove(r.buf.addr());
        st.mem.remove(r.dbr.addr());
    }
    for r in c.cqs.values() {
        st.mem.remove(r.buf.addr());
        st.mem.remove(r.dbr.addr());
    }
    for r in c.mrs.values() {
        st.mem.remove(r.addr());
    }
    st.mem.remove(c.uar.addr());
}
