// SPDX-License-Identifier: GPL-2.0

//! Protection domains and memory regions over kernel memory.

use kernel::{
    prelude::*,
    sync::Arc, //
};

use super::model_err;
use crate::hca::{
    dma::RegionKind,
    SoftHca, //
};
use crate::hca_model::mr::{
    Access,
    MrAttr, //
};

/// A protection domain.
pub struct Pd {
    pub(crate) soft: Arc<SoftHca>,
    pub(crate) hca: u16,
    pub(crate) pdn: u32,
}

impl Pd {
    /// Allocates a PD on HCA `hca`.
    pub(crate) fn new(soft: &Arc<SoftHca>, hca: u16) -> Result<Self> {
        let pdn = {
            let mut st = soft.state.lock();
            let m = st.fabric.hca(hca).ok_or(ENODEV)?;
            m.alloc_pd().map_err(model_err)?
        };
        Ok(Self {
            soft: soft.clone(),
            hca,
            pdn,
        })
    }

    /// Frees the PD; `EBUSY` while MRs or QPs use it (the PD is kept).
    pub(crate) fn destroy(&self) -> Result {
        let mut st = self.soft.state.lock();
        let m = st.fabric.hca(self.hca).ok_or(ENODEV)?;
        m.dealloc_pd(self.pdn).map_err(model_err)
    }
}

/// A memory region: for kernel ULPs over kernel memory (`addr` is a kernel
/// virtual address, also the IOVA the ULP names in SGEs and RDMA
/// addresses); for user space over pinned pages mapped at `addr`, with the
/// process's own IOVA.
///
/// A DMA MR ([`Mr::new_dma`]) covers the whole direct map instead.
pub struct Mr {
    pub(crate) soft: Arc<SoftHca>,
    pub(crate) hca: u16,
    pub(crate) key: u32,
    addr: u64,
    len: u64,
    /// A DMA MR: it holds the direct map open rather than a region.
    direct: bool,
}

extern "C" {
    fn rmlx5_shim_direct_map(start: *mut u64, len: *mut u64);
}

/// The kernel's direct map: `(start, len)`.
fn direct_map() -> (u64, u64) {
    let (mut start, mut len) = (0u64, 0u64);
    // SAFETY: Two writable `u64`s; the shim only stores to them.
    unsafe { rmlx5_shim_direct_map(&mut start, &mut len) };
    (start, len)
}

impl Mr {
    /// Registers `len` bytes at kernel address `addr` with IB access flags
    /// `access` (LOCAL_WRITE 1, REMOTE_WRITE 2, REMOTE_READ 4,
    /// REMOTE_ATOMIC 8).
    ///
    /// The caller keeps the memory valid until [`Mr::destroy`].
    pub(crate) fn new(pd: &Pd, addr: u64, len: u64, access: u32) -> Result<Self> {
        Self::register(pd, addr, addr, len, access, RegionKind::KernelMr)
    }

    /// Registers a DMA MR (ib_core's `get_dma_mr`): the IOVA of every byte
    /// of the kernel's direct map is its own address, so a kernel ULP
    /// names `ib_dma_map_*` addresses with its key (see
    /// `DmaRegistry::open_direct_map`).
    pub(crate) fn new_dma(pd: &Pd, access: u32) -> Result<Self> {
        let access = Access::from_bits(access).ok_or(EINVAL)?;
        let (start, len) = direct_map();
        let attr = MrAttr {
            pdn: pd.pdn,
            iova: start,
            length: len,
            dma_addr: start,
            access,
        };
        let mut st = pd.soft.state.lock();
        st.dma.open_direct_map(start, len)?;
        let m = st.fabric.hca(pd.hca).ok_or(ENODEV)?;
        match m.create_mr(&attr) {
            Ok(key) => Ok(Self {
                soft: pd.soft.clone(),
                hca: pd.hca,
                key,
                addr: start,
                len,
                direct: true,
            }),
            Err(e) => {
                st.dma.close_direct_map();
                Err(model_err(e))
            }
        }
    }

    /// Registers a user memory region: `len` bytes the model reaches at
    /// kernel address `kaddr` (the `vmap` of the pinned pages), named by
    /// the process with IOVA `iova`.
    ///
    /// The caller keeps the pages pinned and mapped until [`Mr::destroy`]
    /// succeeded.
    pub(crate) fn new_user(pd: &Pd, iova: u64, kaddr: u64, len: u64, access: u32) -> Result<Self> {
        Self::register(pd, iova, kaddr, len, access, RegionKind::UserMr)
    }

    fn register(
        pd: &Pd,
        iova: u64,
        addr: u64,
        len: u64,
        access: u32,
        kind: RegionKind,
    ) -> Result<Self> {
        let access = Access::from_bits(access).ok_or(EINVAL)?;
        let attr = MrAttr {
            pdn: pd.pdn,
            iova,
            length: len,
            dma_addr: addr,
            access,
        };
        let mut st = pd.soft.state.lock();
        st.dma.add_raw(addr, len, kind)?;
        let m = st.fabric.hca(pd.hca).ok_or(ENODEV)?;
        match m.create_mr(&attr) {
            Ok(key) => Ok(Self {
                soft: pd.soft.clone(),
                hca: pd.hca,
                key,
                addr,
                len,
                direct: false,
            }),
            Err(e) => {
                st.dma.remove(addr, len);
                Err(model_err(e))
            }
        }
    }

    /// Deregisters the MR: later WQEs naming its key fail their key check,
    /// and the model can no longer reach the memory.
    pub(crate) fn destroy(&self) -> Result {
        let mut st = self.soft.state.lock();
        let m = st.fabric.hca(self.hca).ok_or(ENODEV)?;
        m.destroy_mr(self.key).map_err(model_err)?;
        if self.direct {
            st.dma.close_direct_map();
        } else {
            st.dma.remove(self.addr, self.len);
        }
        Ok(())
    }
}
