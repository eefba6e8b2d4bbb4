// SPDX-License-Identifier: GPL-2.0

//! The null backend: a device with nothing behind its doorbells, for
//! measuring the provider alone (feature `bench-backend`, see
//! [`crate::bench`]).
//!
//! It answers the control path the way `rmlx5.ko` does (the same ABI
//! structs, the same queue geometry rules, the same mmap offsets), keeping
//! every queue buffer, doorbell record and the UAR page in plain process
//! memory. Nothing reads that memory on its own: the UAR page is never
//! executed, [`Backend::needs_kick`] is `false` so no doorbell is followed
//! by a command, and completions appear only when the owner of the
//! [`crate::bench::NullHca`] writes CQEs into a CQ ring itself.

use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use mlx5_prm::cqe::{CQE_SIZE, OP_OWN_OFFSET};
use mlx5_prm::doorbell::{
    bf_reg_offset, BFREGS_PER_UAR, BF_BUF_SIZE, BF_REG_SIZE, QP_DBR_RECV_OFFSET,
    QP_DBR_SEND_OFFSET, UAR_PAGE_SIZE,
};
use mlx5_prm::ring::CQE_INIT_OP_OWN;
use mlx5_prm::wqe::{
    inline_seg_size, CtrlSeg, DataSeg, MaskedAtomicSeg, RaddrSeg, MAX_WQE_SIZE, WQEBB_SHIFT,
    WQEBB_SIZE,
};
use rmlx5_abi::mmap::{self, Kind};
use rmlx5_abi::uapi;

use super::{Backend, Cmd};
use crate::context::lock;
use crate::dma::{DmaRegion, HeapPages, PAGE_SIZE};
use crate::error::{Error, Result};

/// Largest CQ, in entries.
const MAX_LOG_CQ: u32 = 16;
/// Largest SQ, in WQEBBs, and RQ, in WQEs.
const MAX_LOG_WQ: u32 = 15;
/// Gather and scatter entries per WR.
const MAX_SGE: u32 = 16;
/// Inline bytes per send WR.
const MAX_INLINE: u32 = 512;

fn einval() -> Error {
    Error::Os {
        op: "",
        errno: libc::EINVAL,
    }
}

/// A CQ's memory.
#[derive(Debug)]
pub(crate) struct NullCq {
    pub(crate) buf: DmaRegion,
    pub(crate) dbr: DmaRegion,
    pub(crate) log: u32,
}

/// A QP's memory and the little state QUERY_QP reports.
#[derive(Debug)]
pub(crate) struct NullQp {
    buf: DmaRegion,
    pub(crate) dbr: DmaRegion,
    sq_offset: usize,
    sq_log: u32,
    state: u32,
    caps: uapi::QueryQp,
}

/// Everything the null "kernel" knows, shared by the contexts of one
/// [`crate::bench::NullHca`].
#[derive(Debug)]
pub(crate) struct NullState {
    uar: DmaRegion,
    pds: HashSet<u32>,
    mrs: HashMap<u32, u32>,
    pub(crate) cqs: HashMap<u32, NullCq>,
    pub(crate) qps: HashMap<u32, NullQp>,
    next_handle: u32,
    next_bfreg: usize,
}

impl NullState {
    pub(crate) fn new() -> Result<NullState> {
        Ok(NullState {
            uar: HeapPages::alloc(UAR_PAGE_SIZE)?.1,
            pds: HashSet::new(),
            mrs: HashMap::new(),
            cqs: HashMap::new(),
            qps: HashMap::new(),
            next_handle: 1,
            next_bfreg: 0,
        })
    }

    fn handle(&mut self) -> Result<u32> {
        let h = self.next_handle;
        if h > mmap::MAX_HANDLE {
            return Err(Error::Os {
                op: "",
                errno: libc::ENOSPC,
            });
        }
        self.next_handle += 1;
        Ok(h)
    }
}

/// One open context on the null device.
#[derive(Debug)]
pub(crate) struct NullBackend {
    state: Arc<Mutex<NullState>>,
}

impl NullBackend {
    pub(crate) fn new(state: Arc<Mutex<NullState>>) -> NullBackend {
        NullBackend { state }
    }
}

/// Bytes of the largest send WQE a QP with these limits can post: control
/// and remote address segments, then the gather list or the inline
/// segment, or a masked atomic with its one data segment.
fn max_send_wqe(max_sge: u32, max_inline: u32) -> usize {
    let data = (max_sge as usize * DataSeg::SIZE).max(inline_seg_size(max_inline as usize));
    let rdma = CtrlSeg::SIZE + RaddrSeg::SIZE + data;
    let atomic = CtrlSeg::SIZE + RaddrSeg::SIZE + MaskedAtomicSeg::SIZE + DataSeg::SIZE;
    rdma.max(atomic).next_multiple_of(WQEBB_SIZE)
}

fn create_cq(st: &mut NullState, a: &mut uapi::CreateCq) -> Result<()> {
    if a.cqe == 0 || a.cqe > 1 << MAX_LOG_CQ || a.comp_vector != 0 {
        return Err(einval());
    }
    if a.channel_fd >= 0 {
        // No completion events: nothing ever raises an interrupt here.
        return Err(Error::Os {
            op: "",
            errno: libc::EOPNOTSUPP,
        });
    }
    let entries = a.cqe.next_power_of_two();
    let log = entries.trailing_zeros();
    let (_, buf) = HeapPages::alloc(CQE_SIZE << log)?;
    for i in 0..entries as usize {
        buf.write(i * CQE_SIZE + OP_OWN_OFFSET, &[CQE_INIT_OP_OWN])?;
    }
    let (_, dbr) = HeapPages::alloc(PAGE_SIZE)?;
    let h = st.handle()?;
    a.cq_handle = h;
    a.cqn = h;
    a.cqe_cnt = entries;
    a.cqe_size = CQE_SIZE as u32;
    a.buf_mmap_offset = mmap::encode(Kind::CqBuf, h).ok_or(einval())?;
    a.buf_size = buf.len() as u64;
    a.dbr_mmap_offset = mmap::encode(Kind::CqDbr, h).ok_or(einval())?;
    st.cqs.insert(h, NullCq { buf, dbr, log });
    Ok(())
}

fn create_qp(st: &mut NullState, a: &mut uapi::CreateQp) -> Result<()> {
    if a.qp_type != uapi::QPT_RC
        || !st.pds.contains(&a.pd_handle)
        || !st.cqs.contains_key(&a.send_cq_handle)
        || !st.cqs.contains_key(&a.recv_cq_handle)
        || a.sq_sig_all > 1
        || a.max_send_sge > MAX_SGE
        || a.max_recv_sge > MAX_SGE
        || a.max_inline_data > MAX_INLINE
    {
        return Err(einval());
    }
    let wqe = max_send_wqe(a.max_send_sge.max(1), a.max_inline_data);
    if wqe > MAX_WQE_SIZE {
        return Err(einval());
    }
    let bbs_per_wr = (wqe / WQEBB_SIZE) as u32;
    let sq_wqebbs = a
        .max_send_wr
        .max(1)
        .checked_mul(bbs_per_wr)
        .and_then(u32::checked_next_power_of_two)
        .filter(|n| n.trailing_zeros() <= MAX_LOG_WQ)
        .ok_or(einval())?;
    let rq_wqes = a
        .max_recv_wr
        .max(1)
        .checked_next_power_of_two()
        .filter(|n| n.trailing_zeros() <= MAX_LOG_WQ)
        .ok_or(einval())?;
    let rq_stride = (a.max_recv_sge.max(1) * DataSeg::SIZE as u32).next_power_of_two();
    let rq_bytes = rq_wqes as usize * rq_stride as usize;
    let sq_offset = rq_bytes.next_multiple_of(WQEBB_SIZE);
    let total = sq_offset + ((sq_wqebbs as usize) << WQEBB_SHIFT);
    let (_, buf) = HeapPages::alloc(total)?;
    let (_, dbr) = HeapPages::alloc(PAGE_SIZE)?;
    let bf_offset = bf_reg_offset(st.next_bfreg % BFREGS_PER_UAR).map_err(|_| einval())?;
    st.next_bfreg += 1;
    let h = st.handle()?;
    a.qp_handle = h;
    a.qpn = h;
    a.sq_wqe_cnt = sq_wqebbs;
    a.sq_wqe_shift = WQEBB_SHIFT;
    a.rq_wqe_cnt = rq_wqes;
    a.rq_wqe_shift = rq_stride.trailing_zeros();
    a.max_send_wr_out = sq_wqebbs / bbs_per_wr;
    a.max_recv_wr_out = rq_wqes;
    a.max_send_sge_out = a.max_send_sge;
    a.max_recv_sge_out = rq_stride / DataSeg::SIZE as u32;
    a.max_inline_data_out = a.max_inline_data;
    a.bf_size = BF_BUF_SIZE as u32;
    a.bf_offset = bf_offset as u32;
    a.rq_buf_offset = 0;
    a.sq_buf_offset = u32::try_from(sq_offset).map_err(|_| einval())?;
    a.buf_mmap_offset = mmap::encode(Kind::QpBuf, h).ok_or(einval())?;
    a.buf_size = buf.len() as u64;
    a.dbr_mmap_offset = mmap::encode(Kind::QpDbr, h).ok_or(einval())?;
    a.uar_mmap_offset = mmap::encode(Kind::Uar, 0).ok_or(einval())?;
    let caps = uapi::QueryQp {
        max_send_wr: a.max_send_wr_out,
        max_recv_wr: a.max_recv_wr_out,
        max_send_sge: a.max_send_sge_out,
        max_recv_sge: a.max_recv_sge_out,
        max_inline_data: a.max_inline_data_out,
        ..Default::default()
    };
    st.qps.insert(
        h,
        NullQp {
            buf,
            dbr,
            sq_offset,
            sq_log: sq_wqebbs.trailing_zeros(),
            state: uapi::QPS_RESET,
            caps,
        },
    );
    Ok(())
}

fn modify_qp(st: &mut NullState, a: &uapi::ModifyQp) -> Result<()> {
    if a.attr_mask & !uapi::QP_ATTR_MASK_ALL != 0 || a.sl > 15 {
        return Err(einval());
    }
    let qp = st.qps.get_mut(&a.qp_handle).ok_or(einval())?;
    if a.attr_mask & uapi::QP_STATE == 0 {
        return Ok(());
    }
    let known = [
        uapi::QPS_RESET,
        uapi::QPS_INIT,
        uapi::QPS_RTR,
        uapi::QPS_RTS,
        uapi::QPS_SQD,
        uapi::QPS_SQE,
        uapi::QPS_ERR,
    ];
    if !known.contains(&a.qp_state) {
        return Err(einval());
    }
    if a.qp_state == uapi::QPS_RESET {
        // As the kernel: a QP back in RESET has a zeroed doorbell record
        // (word by word, as the provider stores it).
        qp.dbr.store_u32(QP_DBR_RECV_OFFSET, [0; 4])?;
        qp.dbr.store_u32(QP_DBR_SEND_OFFSET, [0; 4])?;
    }
    qp.state = a.qp_state;
    qp.caps.path_mtu = a.path_mtu;
    qp.caps.dest_qp_num = a.dest_qp_num;
    qp.caps.dlid = a.dlid;
    qp.caps.sl = a.sl;
    Ok(())
}

fn command(st: &mut NullState, cmd: Cmd<'_>) -> Result<()> {
    match cmd {
        Cmd::QueryDevice(a) => {
            *a = uapi::QueryDevice {
                hdr: a.hdr,
                vendor_id: 0x02c9,
                vendor_part_id: 0,
                max_qp: mmap::MAX_HANDLE,
                max_qp_wr: 1 << (MAX_LOG_WQ - 2),
                max_sge: MAX_SGE,
                max_cq: mmap::MAX_HANDLE,
                max_cqe: 1 << MAX_LOG_CQ,
                max_mr: mmap::MAX_HANDLE,
                max_pd: mmap::MAX_HANDLE,
                num_comp_vectors: 1,
                max_inline_data: MAX_INLINE,
                phys_port_cnt: 1,
                bf_reg_size: BF_REG_SIZE as u32,
                uar_size: UAR_PAGE_SIZE as u32,
                // As `needs_kick`: no doorbell is followed by a KICK.
                device_flags: uapi::DEVICE_UAR_DOORBELLS,
                ..Default::default()
            };
            Ok(())
        }
        Cmd::QueryPort(a) => {
            if a.port_num != 1 {
                return Err(einval());
            }
            *a = uapi::QueryPort {
                hdr: a.hdr,
                port_num: 1,
                state: uapi::PORT_ACTIVE,
                max_mtu: uapi::MTU_4096,
                active_mtu: uapi::MTU_4096,
                lid: 1,
                sm_lid: 1,
                gid_tbl_len: 1,
                link_layer: uapi::LINK_LAYER_INFINIBAND,
                ..Default::default()
            };
            Ok(())
        }
        Cmd::AllocPd(a) => {
            let h = st.handle()?;
            st.pds.insert(h);
            a.pd_handle = h;
            a.pdn = h;
            Ok(())
        }
        Cmd::DeallocPd(a) => {
            if st.pds.remove(&a.handle) {
                Ok(())
            } else {
                Err(einval())
            }
        }
        Cmd::RegMr(a) => {
            if !st.pds.contains(&a.pd_handle) || a.length == 0 {
                return Err(einval());
            }
            let h = st.handle()?;
            st.mrs.insert(h, a.pd_handle);
            a.mr_handle = h;
            a.lkey = h;
            a.rkey = h;
            Ok(())
        }
        Cmd::DeregMr(a) => st.mrs.remove(&a.handle).map(drop).ok_or(einval()),
        Cmd::CreateCq(a) => create_cq(st, a),
        Cmd::DestroyCq(a) => {
            st.cqs.remove(&a.handle).ok_or(einval())?;
            a.comp_events_reported = 0;
            a.async_events_reported = 0;
            Ok(())
        }
        Cmd::CreateQp(a) => create_qp(st, a),
        Cmd::ModifyQp(a) => modify_qp(st, a),
        Cmd::QueryQp(a) => {
            let qp = st.qps.get(&a.qp_handle).ok_or(einval())?;
            *a = uapi::QueryQp {
                hdr: a.hdr,
                qp_handle: a.qp_handle,
                qp_state: qp.state,
                port_num: 1,
                ..qp.caps
            };
            Ok(())
        }
        Cmd::DestroyQp(a) => {
            st.qps.remove(&a.handle).ok_or(einval())?;
            a.comp_events_reported = 0;
            a.async_events_reported = 0;
            Ok(())
        }
        // Nothing listens: no doorbell kick, no event files.
        Cmd::Kick(_) | Cmd::CreateCompChannel(_) | Cmd::GetAsyncFd(_) => Err(Error::Os {
            op: "",
            errno: libc::EOPNOTSUPP,
        }),
    }
}

impl Backend for NullBackend {
    fn command(&self, cmd: Cmd<'_>) -> Result<()> {
        let name = cmd.name();
        command(&mut lock(&self.state), cmd).map_err(|e| match e {
            Error::Os { errno, .. } => Error::Os { op: name, errno },
            other => other,
        })
    }

    fn map(&self, offset: u64, len: usize) -> Result<DmaRegion> {
        let st = lock(&self.state);
        let (kind, h) = mmap::decode(offset).ok_or(einval())?;
        let region = match kind {
            Kind::Uar => &st.uar,
            Kind::CqBuf => &st.cqs.get(&h).ok_or(einval())?.buf,
            Kind::CqDbr => &st.cqs.get(&h).ok_or(einval())?.dbr,
            Kind::QpBuf => &st.qps.get(&h).ok_or(einval())?.buf,
            Kind::QpDbr => &st.qps.get(&h).ok_or(einval())?.dbr,
        };
        if len == 0 || len > region.len() {
            return Err(Error::Os {
                op: "mmap",
                errno: libc::EINVAL,
            });
        }
        region.slice(0, len)
    }

    fn needs_kick(&self) -> bool {
        false
    }

    fn take_fd(&self, _fd: i32) -> Result<OwnedFd> {
        Err(Error::Invalid("the null device hands out no files"))
    }

    fn alloc_buffer(&self, len: usize) -> Result<DmaRegion> {
        Ok(HeapPages::alloc(len)?.1)
    }

    fn release_buffer(&self, _addr: u64) {}
}

impl NullQp {
    /// The SQ of the queue buffer.
    pub(crate) fn sq(&self) -> Result<DmaRegion> {
        self.buf.slice(self.sq_offset, WQEBB_SIZE << self.sq_log)
    }
}
