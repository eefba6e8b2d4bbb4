// SPDX-License-Identifier: GPL-2.0

//! Protection domains and memory regions over kernel memory.

use core::sync::atomic::{
    AtomicBool,
    AtomicU32,
    AtomicU64,
    Ordering, //
};
use kernel::{
    prelude::*,
    sync::Arc, //
};

use crate::backend::{
    FastKeys,
    MrRegion, //
};
use crate::hca_model::caps::Caps;
use crate::hca_model::mr::{
    Access,
    MrAttr, //
};
use crate::mem::DmaBuf;
use crate::mlx5_core::device::Device;
use crate::mlx5_prm::wqe::{
    MTT_EN_RD,
    MTT_EN_WR,
    MTT_SIZE, //
};

/// Most pages of a fast-registration MR (`max_fast_reg_page_list_len`):
/// the software HCA's limit, 512. The model translates a page list page
/// by page while it copies, so the length costs only the list, which at
/// 512 entries is one 4 KiB block (see [`Mr::new_fast`]).
/// `RMLX5_IBC_MAX_FAST_PAGES` in `ib_priv.h` is the same number.
pub(crate) const MAX_FAST_PAGES: u32 = Caps::DEFAULT.max_fast_reg_pages;

/// A protection domain.
pub struct Pd {
    /// The device the PD and everything created on it live on.
    pub(crate) dev: Arc<Device>,
    pub(crate) pdn: u32,
    /// Destroyed: a second destroy does nothing.
    gone: AtomicBool,
}

impl Pd {
    /// Allocates a PD on device `dev`.
    pub(crate) fn new(dev: &Arc<Device>) -> Result<Self> {
        let pdn = dev.be.alloc_pd()?;
        Ok(Self {
            dev: dev.clone(),
            pdn,
            gone: AtomicBool::new(false),
        })
    }

    /// Index of the device (`rmlx5_<n>`).
    pub(crate) fn hca(&self) -> u16 {
        self.dev.index
    }

    /// Whether the PD is destroyed.
    pub(crate) fn is_destroyed(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    /// `EINVAL` once the PD is destroyed (released with its device): no
    /// object is created on it any more.
    pub(crate) fn check_live(&self) -> Result {
        if self.gone.load(Ordering::Acquire) {
            return Err(EINVAL);
        }
        Ok(())
    }

    /// Frees the PD; `EBUSY` while MRs or QPs use it (the PD is kept). A
    /// second destroy (after the device released it, see
    /// `ulp::objects::release_device`) succeeds and does nothing. Callers
    /// serialise destroys of one PD.
    pub(crate) fn destroy(&self) -> Result {
        if self.gone.load(Ordering::Acquire) {
            return Ok(());
        }
        self.dev.be.dealloc_pd(self.pdn)?;
        self.gone.store(true, Ordering::Release);
        Ok(())
    }
}

/// A memory region: for kernel ULPs over kernel memory (`addr` is a kernel
/// virtual address, also the IOVA the ULP names in SGEs and RDMA
/// addresses); for user space over pinned pages mapped at `addr`, with the
/// process's own IOVA.
///
/// A DMA MR ([`Mr::new_dma`]) covers the whole direct map instead.
pub struct Mr {
    pub(crate) dev: Arc<Device>,
    pub(crate) key: u32,
    /// What the MR covers; `None` for a fast MR (see `fast`).
    region: Option<MrRegion>,
    /// A fast-registration MR: its page list and current mapping.
    pub(crate) fast: Option<FastList>,
    /// Destroyed: a second destroy does nothing.
    gone: AtomicBool,
}

/// The page list of a fast-registration MR, in module memory under a
/// linear model MR of the same PD (`list_key`), which a UMR WQE's data
/// segment names as mlx5_ib names its descriptors under the PD's local
/// DMA lkey; and the mapping `map_mr_sg` last wrote into it.
pub(crate) struct FastList {
    buf: DmaBuf,
    keys: FastKeys,
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
        Self::register(pd, addr, len, access, MrRegion::Kernel { addr, len }, None)
    }

    /// Registers a DMA MR (ib_core's `get_dma_mr`): the IOVA of every byte
    /// of the kernel's direct map is its own address, so a kernel ULP
    /// names `ib_dma_map_*` addresses with its key (see
    /// `DmaRegistry::open_direct_map`).
    pub(crate) fn new_dma(pd: &Pd, access: u32) -> Result<Self> {
        let (start, len) = direct_map();
        Self::register(
            pd,
            start,
            len,
            access,
            MrRegion::DirectMap { start, len },
            None,
        )
    }

    /// Creates a fast-registration MR with room for `max_pages` pages: free
    /// (no key reaches it) until a registration WQE (`IB_WR_REG_MR`)
    /// registers the pages [`Mr::set_page`] wrote.
    pub(crate) fn new_fast(pd: &Pd, max_pages: u32) -> Result<Self> {
        if max_pages == 0 || max_pages > MAX_FAST_PAGES {
            return Err(EINVAL);
        }
        // Whole 64-byte units, as a UMR's translation size is: at most
        // 4 KiB (512 entries), one kmalloc block, so the list is
        // physically contiguous, as the one range a UMR's data segment
        // names must be (the model reads it through a linear key).
        let bytes = (max_pages as usize * MTT_SIZE).next_multiple_of(64);
        pd.check_live()?;
        let buf = pd.dev.be.alloc_queue(bytes)?;
        let keys = pd.dev.be.create_fast_mr(pd.pdn, max_pages, &buf)?;
        Ok(Self {
            dev: pd.dev.clone(),
            key: keys.key,
            region: None,
            gone: AtomicBool::new(false),
            fast: Some(FastList {
                buf,
                keys,
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
            list: f.buf.dma_addr(),
            list_key: f.keys.list_key,
            iova: f.iova.load(Ordering::Relaxed),
            length: f.length.load(Ordering::Relaxed),
            page_shift: (shape >> 16) as u8,
            pages: shape & 0xffff,
        })
    }

    /// Registers a user memory region: `len` bytes the software HCA
    /// reaches at kernel address `kaddr` (the `vmap` of the pinned pages),
    /// or a PCI function through the bus addresses `pages` of its pages,
    /// named by the process with IOVA `iova`.
    ///
    /// The caller keeps the pages pinned and mapped until [`Mr::destroy`]
    /// succeeded.
    pub(crate) fn new_user(
        pd: &Pd,
        iova: u64,
        kaddr: u64,
        len: u64,
        access: u32,
        pages: &[u64],
    ) -> Result<Self> {
        let region = MrRegion::User { addr: kaddr, len };
        Self::register(pd, iova, len, access, region, Some(pages))
    }

    /// Registers `region` with IOVA `iova`.
    fn register(
        pd: &Pd,
        iova: u64,
        len: u64,
        access: u32,
        region: MrRegion,
        user_pages: Option<&[u64]>,
    ) -> Result<Self> {
        let access = Access::from_bits(access).ok_or(EINVAL)?;
        let dma_addr = match region {
            MrRegion::Kernel { addr, .. } | MrRegion::User { addr, .. } => addr,
            MrRegion::DirectMap { start, .. } => start,
        };
        let attr = MrAttr {
            pdn: pd.pdn,
            iova,
            length: len,
            dma_addr,
            access,
        };
        pd.check_live()?;
        let key = match user_pages {
            Some(pages) => pd.dev.be.create_user_mr(&attr, region, pages)?,
            None => pd.dev.be.create_mr(&attr, region)?,
        };
        Ok(Self {
            dev: pd.dev.clone(),
            key,
            region: Some(region),
            fast: None,
            gone: AtomicBool::new(false),
        })
    }

    /// Index of the device (`rmlx5_<n>`).
    pub(crate) fn hca(&self) -> u16 {
        self.dev.index
    }

    /// Deregisters the MR: later WQEs naming its key fail their key check,
    /// and the device can no longer reach the memory.
    /// Whether the MR is destroyed.
    pub(crate) fn is_destroyed(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    /// A second destroy (after the device released it) succeeds and does
    /// nothing; callers serialise destroys of one MR.
    pub(crate) fn destroy(&self) -> Result {
        if self.gone.load(Ordering::Acquire) {
            return Ok(());
        }
        match (&self.fast, self.region) {
            (Some(f), _) => self.dev.be.destroy_fast_mr(f.keys, &f.buf),
            (None, Some(region)) => self.dev.be.destroy_mr(self.key, region),
            (None, None) => Err(EINVAL),
        }?;
        self.gone.store(true, Ordering::Release);
        Ok(())
    }
}
