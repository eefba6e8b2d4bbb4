// SPDX-License-Identifier: GPL-2.0

//! Protection domains and memory regions over kernel memory.

use core::sync::atomic::{
    AtomicU32,
    AtomicU64,
    Ordering, //
};
use kernel::{
    prelude::*,
    sync::Arc, //
};

use super::model_err;
use crate::hca::{
    dma::{
        DmaBuf,
        RegionKind, //
    },
    SoftHca, //
};
use crate::hca_model::mr::{
    Access,
    MrAttr, //
};
use crate::mlx5_prm::wqe::{
    MTT_EN_RD,
    MTT_EN_WR,
    MTT_SIZE, //
};

/// Most pages of a fast-registration MR (`max_fast_reg_page_list_len`):
/// the model resolves one access into at most 64 DMA ranges (one per run
/// of adjacent pages, hca-model's `MAX_PIECES`).
pub(crate) const MAX_FAST_PAGES: u32 = 64;

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
    /// A fast-registration MR: its page list and current mapping.
    pub(crate) fast: Option<FastList>,
}

/// The page list of a fast-registration MR, in module memory under a
/// linear model MR of the same PD (`list_key`), which a UMR WQE's data
/// segment names as mlx5_ib names its descriptors under the PD's local
/// DMA lkey; and the mapping `map_mr_sg` last wrote into it.
pub(crate) struct FastList {
    buf: DmaBuf,
    list_key: u32,
    max_pages: u32,
    iova: AtomicU64,
    length: AtomicU64,
    /// `page_shift << 16 | pages`.
    shape: AtomicU32,
}

/// The mapping a registration WQE registers (see [`Mr::fast_mapping`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct FastMapping {
    /// DMA address of the page list.
    pub(crate) list: u64,
    /// Its lkey.
    pub(crate) list_key: u32,
    pub(crate) iova: u64,
    pub(crate) length: u64,
    pub(crate) page_shift: u8,
    pub(crate) pages: u32,
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
                fast: None,
            }),
            Err(e) => {
                st.dma.close_direct_map();
                Err(model_err(e))
            }
        }
    }

    /// Creates a fast-registration MR with room for `max_pages` pages: free
    /// (no key reaches it) until a registration WQE (`IB_WR_REG_MR`)
    /// registers the pages [`Mr::set_page`] wrote.
    pub(crate) fn new_fast(pd: &Pd, max_pages: u32) -> Result<Self> {
        if max_pages == 0 || max_pages > MAX_FAST_PAGES {
            return Err(EINVAL);
        }
        // Whole 64-byte units, as a UMR's translation size is.
        let bytes = (max_pages as usize * MTT_SIZE).next_multiple_of(64);
        let buf = DmaBuf::new(bytes, GFP_KERNEL)?;
        let mut st = pd.soft.state.lock();
        st.dma.add_buf(&buf)?;
        let list_attr = MrAttr {
            pdn: pd.pdn,
            iova: buf.addr(),
            length: buf.len() as u64,
            dma_addr: buf.addr(),
            access: Access::NONE,
        };
        let Some(m) = st.fabric.hca(pd.hca) else {
            st.dma.remove_buf(&buf);
            return Err(ENODEV);
        };
        let list_key = match m.create_mr(&list_attr) {
            Ok(k) => k,
            Err(e) => {
                st.dma.remove_buf(&buf);
                return Err(model_err(e));
            }
        };
        let key = match m.create_fast_mr(pd.pdn, max_pages) {
            Ok(k) => k,
            Err(e) => {
                let _ = m.destroy_mr(list_key);
                st.dma.remove_buf(&buf);
                return Err(model_err(e));
            }
        };
        drop(st);
        Ok(Self {
            soft: pd.soft.clone(),
            hca: pd.hca,
            key,
            addr: 0,
            len: 0,
            direct: false,
            fast: Some(FastList {
                buf,
                list_key,
                max_pages,
                iova: AtomicU64::new(0),
                length: AtomicU64::new(0),
                shape: AtomicU32::new(0),
            }),
        })
    }

    /// Writes page `index` of a fast MR's page list: the page at DMA
    /// address `addr` (what `ib_sg_to_pages` hands the driver).
    pub(crate) fn set_page(&self, index: u32, addr: u64) -> Result {
        let f = self.fast.as_ref().ok_or(EINVAL)?;
        if index >= f.max_pages {
            return Err(EINVAL);
        }
        let entry = (addr | MTT_EN_RD | MTT_EN_WR).to_be_bytes();
        f.buf.write(index as usize * MTT_SIZE, &entry)
    }

    /// Records the mapping the page list now holds: `pages` pages of
    /// `1 << page_shift` bytes covering `length` bytes from `iova`.
    pub(crate) fn set_mapping(
        &self,
        iova: u64,
        length: u64,
        page_shift: u32,
        pages: u32,
    ) -> Result {
        let f = self.fast.as_ref().ok_or(EINVAL)?;
        let page = 1u64.checked_shl(page_shift).ok_or(EINVAL)?;
        let needed = (iova & (page - 1))
            .checked_add(length)
            .map(|b| b.div_ceil(page))
            .ok_or(EINVAL)?;
        if !(12..=30).contains(&page_shift)
            || pages > f.max_pages
            || needed > u64::from(pages)
            || iova.checked_add(length).is_none()
        {
            return Err(EINVAL);
        }
        f.iova.store(iova, Ordering::Relaxed);
        f.length.store(length, Ordering::Relaxed);
        f.shape.store(page_shift << 16 | pages, Ordering::Release);
        Ok(())
    }

    /// What a registration WQE of this fast MR registers.
    pub(crate) fn fast_mapping(&self) -> Option<FastMapping> {
        let f = self.fast.as_ref()?;
        let shape = f.shape.load(Ordering::Acquire);
        Some(FastMapping {
            list: f.buf.addr(),
            list_key: f.list_key,
            iova: f.iova.load(Ordering::Relaxed),
            length: f.length.load(Ordering::Relaxed),
            page_shift: (shape >> 16) as u8,
            pages: shape & 0xffff,
        })
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
                fast: None,
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
        if let Some(f) = &self.fast {
            // A registration may have changed the key's last byte.
            let key = m.query_mr(self.key).map_or(self.key, |mr| mr.key());
            m.destroy_mr(key).map_err(model_err)?;
            let _ = m.destroy_mr(f.list_key);
            st.dma.remove_buf(&f.buf);
            return Ok(());
        }
        m.destroy_mr(self.key).map_err(model_err)?;
        if self.direct {
            st.dma.close_direct_map();
        } else {
            st.dma.remove(self.addr, self.len);
        }
        Ok(())
    }
}
