// SPDX-License-Identifier: GPL-2.0

//! The software HCA as a [`Backend`]: one instance of the fabric.
//!
//! Every call is one critical section of the fabric lock. Memory handed to
//! a `create_*` call enters the DMA registry in the same section as the
//! model object, and leaves it in the section that destroys the object, so
//! the model never reaches memory outside the registry.

use kernel::{
    device,
    prelude::*,
    sync::{
        aref::ARef,
        Arc, //
    },
};

use super::{
    dma::{
        DmaBuf,
        RegionKind, //
    },
    SoftHca,
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
    doorbell::SendDoorbell,
    eq::EqAttr,
    error::Error as ModelError,
    fabric::{
        index_of_lid,
        lid_of_index, //
    },
    mr::MrAttr,
    port::GidEntry,
    qp::{
        ConnAttrs,
        QpAttr,
        QpState, //
    },
    qp_modify::QpModify,
};
use crate::mlx5_prm::doorbell::{
    bf_half_offset,
    send_doorbell,
    CqArm,
    EqDoorbell,
    UarCqDoorbell,
    UAR_CQ_DOORBELL_OFFSET,
    UAR_EQ_ARM_OFFSET, //
};

/// Maps a model control error to an errno.
pub(crate) fn model_err(e: ModelError) -> Error {
    match e {
        ModelError::Invalid | ModelError::BadTransition => EINVAL,
        ModelError::NoSpace => ENOMEM,
        ModelError::Busy => EBUSY,
        ModelError::NotFound => ENOENT,
    }
}

/// Instance `hca` of the software HCA.
pub(crate) struct SoftDevice {
    soft: Arc<SoftHca>,
    hca: u16,
}

impl SoftHca {
    /// Instance `index` as a verbs backend.
    ///
    /// # Errors
    ///
    /// `ENODEV` if there is no such instance.
    pub(crate) fn backend(self: &Arc<Self>, index: u16) -> Result<Arc<dyn Backend>> {
        self.uar(usize::from(index))?;
        let d: Arc<dyn Backend> = Arc::new(
            SoftDevice {
                soft: self.clone(),
                hca: index,
            },
            GFP_KERNEL,
        )?;
        Ok(d)
    }
}

impl SoftDevice {
    /// The instance's UAR page.
    fn uar(&self) -> Result<&DmaBuf> {
        self.soft.uar(usize::from(self.hca))
    }

    /// Adds `bufs` to the DMA registry, runs `f` on the model instance, and
    /// takes the buffers out again if either fails.
    fn create_on<T>(
        &self,
        bufs: &[&DmaBuf],
        f: impl FnOnce(&mut crate::hca_model::hca::Hca<super::KStorage>) -> Result<T>,
    ) -> Result<T> {
        let mut st = self.soft.state.lock();
        let mut added = 0;
        let mut r = Ok(());
        for b in bufs {
            r = st.dma.add_buf(b);
            if r.is_err() {
                break;
            }
            added += 1;
        }
        let r = r.and_then(|()| f(st.fabric.hca(self.hca).ok_or(ENODEV)?));
        if r.is_err() {
            for b in bufs.iter().take(added) {
                st.dma.remove_buf(b);
            }
        }
        r
    }

    /// Runs `f` on the model instance and, if it succeeds, takes `bufs` out
    /// of the DMA registry.
    fn destroy_on(
        &self,
        bufs: &[&DmaBuf],
        f: impl FnOnce(&mut crate::hca_model::hca::Hca<super::KStorage>) -> Result,
    ) -> Result {
        let mut st = self.soft.state.lock();
        f(st.fabric.hca(self.hca).ok_or(ENODEV)?)?;
        for b in bufs {
            st.dma.remove_buf(b);
        }
        Ok(())
    }
}

fn region_kind(region: MrRegion) -> Option<(u64, u64, RegionKind)> {
    match region {
        MrRegion::Kernel { addr, len } => Some((addr, len, RegionKind::KernelMr)),
        MrRegion::User { addr, len } => Some((addr, len, RegionKind::UserMr)),
        MrRegion::DirectMap { .. } => None,
    }
}

impl Backend for SoftDevice {
    fn info(&self) -> Result<DeviceInfo> {
        let caps = *self
            .soft
            .state
            .lock()
            .fabric
            .hca(self.hca)
            .ok_or(ENODEV)?
            .caps();
        Ok(DeviceInfo {
            max_qp: super::MAX_QPS as u32,
            max_cq: super::MAX_CQS as u32,
            max_pd: super::MAX_PDS as u32,
            max_mr: super::MAX_MRS as u32,
            max_cqe: 1 << caps.max_log_cq_size,
            max_qp_rd_atom: u32::from(caps.max_qp_rd_atom),
            // The fabric names instance `n` by its index in an address
            // vector (the ULP API's LID).
            lid: self.hca,
            // Always up; the fabric has no SM, instance 0 stands for it.
            port_state: 4,
            sm_lid: 1,
            node_guid: 0,
            subnet_prefix: 0xfe80_0000_0000_0000,
            max_fast_reg_pages: crate::ib::mr::MAX_FAST_PAGES,
            part_id: 0,
        })
    }

    fn caps(&self) -> Result<Caps> {
        let mut st = self.soft.state.lock();
        Ok(*st.fabric.hca(self.hca).ok_or(ENODEV)?.caps())
    }

    fn alloc_queue(&self, len: usize) -> Result<DmaBuf> {
        DmaBuf::new(len, GFP_KERNEL)
    }

    fn dma_device(&self) -> Option<ARef<device::Device>> {
        // The model reaches memory at its kernel address.
        None
    }

    fn alloc_uar(self: Arc<Self>) -> Result<KBox<dyn UserUar>> {
        let uar: KBox<dyn UserUar> =
            KBox::new(super::uar::SoftUar::new(&self.soft, self.hca)?, GFP_KERNEL)?;
        Ok(uar)
    }

    fn port_lid(&self) -> u16 {
        // User space sees the fabric's LIDs: instance `n` has LID `n + 1`
        // (the kernel ULP API names instances by index, `info().lid`).
        lid_of_index(self.hca)
    }

    fn peer_of_dlid(&self, dlid: u16) -> Option<u16> {
        index_of_lid(dlid).filter(|&i| usize::from(i) < self.soft.count())
    }

    fn dlid_of_peer(&self, peer: u16) -> u16 {
        lid_of_index(peer)
    }

    fn kernel_uar(&self) -> Result<u64> {
        Ok(self.uar()?.addr())
    }

    fn alloc_pd(&self) -> Result<u32> {
        let mut st = self.soft.state.lock();
        let m = st.fabric.hca(self.hca).ok_or(ENODEV)?;
        m.alloc_pd().map_err(model_err)
    }

    fn dealloc_pd(&self, pdn: u32) -> Result {
        let mut st = self.soft.state.lock();
        let m = st.fabric.hca(self.hca).ok_or(ENODEV)?;
        m.dealloc_pd(pdn).map_err(model_err)
    }

    fn create_mr(&self, attr: &MrAttr, region: MrRegion) -> Result<u32> {
        let mut st = self.soft.state.lock();
        match region_kind(region) {
            Some((addr, len, kind)) => st.dma.add_raw(addr, len, kind)?,
            None => {
                if let MrRegion::DirectMap { start, len } = region {
                    st.dma.open_direct_map(start, len)?;
                }
            }
        }
        let r = st
            .fabric
            .hca(self.hca)
            .ok_or(ENODEV)
            .and_then(|m| m.create_mr(attr).map_err(model_err));
        if r.is_err() {
            match region_kind(region) {
                Some((addr, len, _)) => st.dma.remove(addr, len),
                None => st.dma.close_direct_map(),
            }
        }
        r
    }

    fn destroy_mr(&self, key: u32, region: MrRegion) -> Result {
        let mut st = self.soft.state.lock();
        let m = st.fabric.hca(self.hca).ok_or(ENODEV)?;
        m.destroy_mr(key).map_err(model_err)?;
        match region_kind(region) {
            Some((addr, len, _)) => st.dma.remove(addr, len),
            None => st.dma.close_direct_map(),
        }
        Ok(())
    }

    fn create_fast_mr(&self, pdn: u32, max_pages: u32, list: &DmaBuf) -> Result<FastKeys> {
        let list_attr = MrAttr {
            pdn,
            iova: list.addr(),
            length: list.len() as u64,
            dma_addr: list.addr(),
            access: crate::hca_model::mr::Access::NONE,
        };
        self.create_on(&[list], |m| {
            let list_key = m.create_mr(&list_attr).map_err(model_err)?;
            match m.create_fast_mr(pdn, max_pages) {
                Ok(key) => Ok(FastKeys { key, list_key }),
                Err(e) => {
                    let _ = m.destroy_mr(list_key);
                    Err(model_err(e))
                }
            }
        })
    }

    fn destroy_fast_mr(&self, keys: FastKeys, list: &DmaBuf) -> Result {
        self.destroy_on(&[list], |m| {
            // A registration may have changed the key's last byte.
            let key = m.query_mr(keys.key).map_or(keys.key, |mr| mr.key());
            m.destroy_mr(key).map_err(model_err)?;
            let _ = m.destroy_mr(keys.list_key);
            Ok(())
        })
    }

    fn create_cq(&self, attr: &CqAttr, mem: [&DmaBuf; 2]) -> Result<u32> {
        self.create_on(&mem, |m| m.create_cq(attr).map_err(model_err))
    }

    fn destroy_cq(&self, cqn: u32, mem: [&DmaBuf; 2]) -> Result {
        self.destroy_on(&mem, |m| m.destroy_cq(cqn).map_err(model_err))
    }

    fn arm_cq(&self, cqn: u32, arm: CqArm) -> Result {
        let uar = self.uar()?;
        let mut db = [0u8; 8];
        UarCqDoorbell { arm, cqn }.encode(&mut db);
        let mut st = self.soft.state.lock();
        uar.write(UAR_CQ_DOORBELL_OFFSET, &db)?;
        let (fabric, mut pf) = st.split();
        let m = fabric.hca(self.hca).ok_or(ENODEV)?;
        m.cq_doorbell(&mut pf, uar.addr()).map_err(|_| EIO)
    }

    fn create_eq(
        &self,
        log_size: u8,
        vector: u16,
        async_events: bool,
        ring: &DmaBuf,
    ) -> Result<u8> {
        let attr = EqAttr {
            log_size,
            buf_addr: ring.dma_addr(),
            uar_addr: self.uar()?.addr(),
            vector,
            async_events,
        };
        self.create_on(&[ring], |m| m.create_eq(&attr).map_err(model_err))
    }

    fn destroy_eq(&self, eqn: u8, ring: &DmaBuf) -> Result {
        self.destroy_on(&[ring], |m| m.destroy_eq(eqn).map_err(model_err))
    }

    fn ring_eq(&self, eqn: u8, ci: u32) -> Result {
        let uar = self.uar()?;
        let mut word = [0u8; 4];
        EqDoorbell { eqn, ci }.encode(&mut word);
        let mut st = self.soft.state.lock();
        uar.write(UAR_EQ_ARM_OFFSET, &word)?;
        let (fabric, mut p) = st.split();
        let m = fabric.hca(self.hca).ok_or(ENODEV)?;
        m.eq_doorbell(&mut p, uar.addr(), true).map_err(|_| EIO)
    }

    fn create_qp(&self, attr: &QpAttr, mem: [&DmaBuf; 2]) -> Result<u32> {
        self.create_on(&mem, |m| m.create_qp(attr).map_err(model_err))
    }

    fn set_port(&self, roce: bool, mtu: u8) -> Result {
        let mut st = self.soft.state.lock();
        let m = st.fabric.hca(self.hca).ok_or(ENODEV)?;
        m.set_link_roce(roce);
        m.set_port_mtu(mtu);
        Ok(())
    }

    fn set_gid(&self, index: u8, entry: Option<GidEntry>) -> Result {
        let mut st = self.soft.state.lock();
        let m = st.fabric.hca(self.hca).ok_or(ENODEV)?;
        m.set_gid(index, entry).map_err(model_err)
    }

    fn modify_qp(&self, qpn: u32, q: &QpModify) -> Result {
        let mut st = self.soft.state.lock();
        let m = st.fabric.hca(self.hca).ok_or(ENODEV)?;
        m.modify_qp(qpn, q).map_err(model_err)
    }

    fn qp_state(&self, qpn: u32) -> Result<QpState> {
        let mut st = self.soft.state.lock();
        let m = st.fabric.hca(self.hca).ok_or(ENODEV)?;
        Ok(m.query_qp(qpn).ok_or(EINVAL)?.state)
    }

    fn query_qp(&self, qpn: u32) -> Result<(QpState, ConnAttrs)> {
        let mut st = self.soft.state.lock();
        let m = st.fabric.hca(self.hca).ok_or(ENODEV)?;
        let info = m.query_qp(qpn).ok_or(EINVAL)?;
        Ok((info.state, info.conn))
    }

    fn destroy_qp(&self, qpn: u32, mem: [&DmaBuf; 2]) -> Result {
        let mut st = self.soft.state.lock();
        st.fabric
            .hca(self.hca)
            .ok_or(ENODEV)?
            .destroy_qp(qpn)
            .map_err(model_err)?;
        // A user QP leaves the doorbell watcher with the model, in one
        // section: its QPN may be reused at once.
        st.watch.remove(usize::from(self.hca), qpn);
        for b in mem {
            st.dma.remove_buf(b);
        }
        Ok(())
    }

    fn ring_send(&self, qpn: u32, ctrl: &[u8; 16], half: u8) -> Result {
        let uar = self.uar()?;
        let off = bf_half_offset(0, half).map_err(|_| EINVAL)?;
        let mut st = self.soft.state.lock();
        uar.write(off, &send_doorbell(ctrl))?;
        let (fabric, mut p) = st.split();
        let m = fabric.hca(self.hca).ok_or(ENODEV)?;
        m.send_doorbell(
            &mut p,
            &SendDoorbell {
                qpn,
                half,
                blueflame_len: 0,
            },
        )
        .map_err(|_| EIO)
    }

    fn ring_recv(&self, qpn: u32) {
        let mut st = self.soft.state.lock();
        if let Some(m) = st.fabric.hca(self.hca) {
            // Only matters in ERR (flush of the new WQEs).
            let _ = m.recv_doorbell(qpn);
        }
    }

    fn run(&self) {
        // A kernel ULP posting in process context with no lock held gets
        // its interrupt delivered here; from any other context (softirq,
        // under the ULP's spinlock) it goes through the irq_work.
        self.soft.run_engine();
    }
}
