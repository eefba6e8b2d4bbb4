// SPDX-License-Identifier: GPL-2.0

//! Memory regions, their keys and the access checks made on every data
//! buffer the model touches.
//!
//! # Keys
//!
//! As on mlx5, an MR's key is `index << 8 | variant`: bits 31:8 name the
//! slot of the MR table and bits 7:0 are the slot's variant, bumped every
//! time the slot is reused, so a key of a destroyed MR never matches its
//! successor. Variants run from 1 to 255 (never 0), so no key is 0 and none
//! is `MLX5_INVALID_LKEY` (0x100). The lkey and the rkey of an MR are the
//! same value, as on mlx5.
//!
//! # Translation
//!
//! An MR covers `length` bytes of I/O virtual address space from `iova`,
//! mapped linearly onto DMA addresses from `dma_addr`. The kernel, whose
//! pinned pages are not contiguous, gives each MR its own window of "DMA
//! addresses" and resolves them to pages in its [`super::mem::DmaMemory`].
//!
//! A fast-registration MR (created with [`Hca::create_fast_mr`], mlx5's
//! `umr_en` mkey created free) has no translation until a UMR WQE
//! registers it (`umr`): then its pages are a list of page addresses
//! (mlx5's MTT), one big-endian entry per page of `1 << log_page` bytes,
//! read from DMA memory where the UMR's data segment pointed, and an access
//! may map onto several DMA ranges (adjacent pages are merged into one). A
//! local invalidation UMR makes it free again; a free MR matches no key.
//!
//! [`Hca::create_fast_mr`]: super::hca::Hca::create_fast_mr

use super::mem::DmaMemory;
use super::prm::opcode::CqeSyndrome;
use super::prm::wqe::{
    mkey_flags, mkey_mask, umr_flags, DataSeg, MkeySeg, UmrCtrlSeg, MKEY_STATUS_FREE, MTT_SIZE,
};
use super::table::Slot;

/// Access rights of an MR (and of a QP's responder side), with the values of
/// `enum ib_access_flags`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Access(u8);

impl Access {
    /// No rights beyond local read (which every MR has).
    pub const NONE: Access = Access(0);
    /// The HCA may write the MR for local operations (receives, RDMA read
    /// responses, atomic results): `IB_ACCESS_LOCAL_WRITE`.
    pub const LOCAL_WRITE: Access = Access(1);
    /// Remote RDMA writes: `IB_ACCESS_REMOTE_WRITE`.
    pub const REMOTE_WRITE: Access = Access(2);
    /// Remote RDMA reads: `IB_ACCESS_REMOTE_READ`.
    pub const REMOTE_READ: Access = Access(4);
    /// Remote atomics: `IB_ACCESS_REMOTE_ATOMIC`.
    pub const REMOTE_ATOMIC: Access = Access(8);
    /// Every right the model knows.
    pub const ALL: Access = Access(0xf);

    /// Access rights from `IB_ACCESS_*` bits.
    ///
    /// Returns `None` if a bit outside [`Access::ALL`] is set.
    pub fn from_bits(bits: u32) -> Option<Access> {
        let b = u8::try_from(bits).ok()?;
        (b & !Access::ALL.0 == 0).then_some(Access(b))
    }

    /// The `IB_ACCESS_*` bits.
    pub fn bits(self) -> u32 {
        u32::from(self.0)
    }

    /// Whether every right in `other` is also in `self`.
    pub fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// The rights of both.
    pub fn union(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }
}

/// What the embedder asks for when it registers memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrAttr {
    /// PD the MR belongs to.
    pub pdn: u32,
    /// First I/O virtual address covered (what SGEs and RDMA addresses name).
    pub iova: u64,
    /// Bytes covered.
    pub length: u64,
    /// DMA address `iova` maps to.
    pub dma_addr: u64,
    /// Rights granted.
    pub access: Access,
}

/// A registered memory region.
#[derive(Clone, Copy, Debug)]
pub struct Mr {
    pub(super) attr: MrAttr,
    pub(super) key: u32,
    /// Fast-registration state, for MRs UMR WQEs may modify.
    pub(super) fast: Option<Fast>,
}

/// The UMR-managed part of a fast-registration MR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Fast {
    /// Most translation entries the MR may hold (its size at creation).
    pub(super) max_pages: u32,
    /// Registered by a UMR (else free: no key matches it).
    pub(super) valid: bool,
    /// DMA address of the page list the last registration named.
    pub(super) mtt: u64,
    /// log2 of the page size of that list.
    pub(super) log_page: u8,
}

/// Smallest and largest page size of a fast registration (4 KiB, 1 GiB).
pub(super) const FAST_PAGE_SHIFTS: core::ops::RangeInclusive<u8> = 12..=30;

impl Mr {
    /// The attributes the MR was created with.
    pub fn attr(&self) -> &MrAttr {
        &self.attr
    }

    /// The lkey (which is also the rkey).
    pub fn key(&self) -> u32 {
        self.key
    }

    /// Whether the MR is a fast-registration MR, and if so whether a UMR
    /// registered it (`Some(true)`) or it is free (`Some(false)`).
    pub fn fast_valid(&self) -> Option<bool> {
        self.fast.map(|f| f.valid)
    }
}

/// Why a key does not give access to a range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum KeyError {
    /// No MR has this key (never created, destroyed, or stale variant).
    BadKey,
    /// The MR belongs to another PD than the QP.
    PdMismatch,
    /// The range is not inside the MR.
    OutOfBounds,
    /// The MR lacks a right the operation needs.
    AccessDenied,
    /// A page-list entry could not be read.
    BadTranslation,
    /// The range maps onto more DMA ranges than the caller can take.
    Fragmented,
}

/// The slot index a key names.
pub(super) fn key_index(key: u32) -> u32 {
    key >> 8
}

/// Builds the key of slot `index` with variant `variant`.
pub(super) fn make_key(index: u32, variant: u8) -> Option<u32> {
    if index > 0xff_ffff {
        return None;
    }
    Some(index << 8 | u32::from(variant))
}

/// The variant following `v`, skipping 0.
pub(super) fn next_variant(v: u8) -> u8 {
    match v.wrapping_add(1) {
        0 => 1,
        n => n,
    }
}

/// Resolves `len` bytes at I/O virtual address `addr` through the MR named
/// by `key`, for a QP in PD `pdn`, requiring the rights in `need`, and
/// hands the DMA ranges they map onto, in order, to `sink` (one range for
/// a linear MR; one per run of adjacent pages for a fast-registration MR,
/// whose page list is read through `mem`). `sink` returns `false` to stop
/// ([`KeyError::Fragmented`]).
///
/// A zero-length range is checked like any other (the caller skips the
/// check where the IB spec says a zero-length transfer checks no key); a
/// linear MR still hands it over as one empty range.
#[allow(clippy::too_many_arguments)]
pub(super) fn resolve<M: DmaMemory + ?Sized>(
    mrs: &[Slot<Mr>],
    mem: &mut M,
    key: u32,
    pdn: u32,
    addr: u64,
    len: u64,
    need: Access,
    mut sink: impl FnMut(u64, u64) -> bool,
) -> Result<(), KeyError> {
    let slot = usize::try_from(key_index(key))
        .ok()
        .and_then(|i| mrs.get(i))
        .ok_or(KeyError::BadKey)?;
    let mr = match &slot.obj {
        Some(mr) if mr.key == key && mr.fast.is_none_or(|f| f.valid) => mr,
        _ => return Err(KeyError::BadKey),
    };
    if mr.attr.pdn != pdn {
        return Err(KeyError::PdMismatch);
    }
    let offset = addr
        .checked_sub(mr.attr.iova)
        .ok_or(KeyError::OutOfBounds)?;
    let end = offset.checked_add(len).ok_or(KeyError::OutOfBounds)?;
    if end > mr.attr.length {
        return Err(KeyError::OutOfBounds);
    }
    if !mr.attr.access.contains(need) {
        return Err(KeyError::AccessDenied);
    }
    let Some(fast) = mr.fast else {
        // Cannot overflow: creation checked that dma_addr + length fits.
        let at = mr
            .attr
            .dma_addr
            .checked_add(offset)
            .ok_or(KeyError::OutOfBounds)?;
        return if sink(at, len) {
            Ok(())
        } else {
            Err(KeyError::Fragmented)
        };
    };
    // Page list: entry i maps the i-th page from the page holding `iova`.
    let page = 1u64 << fast.log_page;
    let mut pos = (mr.attr.iova & (page - 1)) + offset;
    let stop = pos + len;
    let mut run: Option<(u64, u64)> = None;
    while pos < stop {
        let index = pos >> fast.log_page;
        let mut entry = [0u8; MTT_SIZE];
        mem.read(fast.mtt + index * MTT_SIZE as u64, &mut entry)
            .map_err(|_| KeyError::BadTranslation)?;
        let base = u64::from_be_bytes(entry) & !(page - 1);
        let within = pos & (page - 1);
        let n = (page - within).min(stop - pos);
        let at = base.checked_add(within).ok_or(KeyError::BadTranslation)?;
        run = match run {
            Some((s, l)) if s + l == at => Some((s, l + n)),
            Some((s, l)) => {
                if !sink(s, l) {
                    return Err(KeyError::Fragmented);
                }
                Some((at, n))
            }
            None => Some((at, n)),
        };
        pos += n;
    }
    match run {
        Some((s, l)) if !sink(s, l) => Err(KeyError::Fragmented),
        _ => Ok(()),
    }
}

/// Executes a UMR WQE of a QP in PD `pdn` on the MR whose index `key`
/// names (the control segment's `imm`): a fast registration (mask with
/// FREE, status not free: the page list at `xlt`, the new start, length,
/// rights, page size and key byte) or a local invalidation (mask FREE
/// alone, status free). Returns the CQE syndrome of a failure.
///
/// What the model does not take, as an mlx5 device would refuse it:
/// inline translations, KLM or other access modes, signature or BSF
/// fields, and a UMR on an MR created without UMR enabled.
pub(super) fn umr<M: DmaMemory + ?Sized>(
    mrs: &mut [Slot<Mr>],
    mem: &mut M,
    pdn: u32,
    key: u32,
    ctrl: &UmrCtrlSeg,
    mkey: &MkeySeg,
    xlt: Option<&DataSeg>,
) -> Result<(), CqeSyndrome> {
    const TAKEN: u64 = mkey_mask::FAST_REG | mkey_mask::A;
    if ctrl.mkey_mask & !TAKEN != 0
        || ctrl.flags & (umr_flags::TRANSLATION_OFFSET_EN) != 0
        || ctrl.mkey_mask & mkey_mask::FREE == 0
    {
        return Err(CqeSyndrome::LocalQpOp);
    }
    let index = key_index(key);
    let found = usize::try_from(index)
        .ok()
        .and_then(|i| mrs.get(i))
        .ok_or(CqeSyndrome::LocalProt)?
        .obj;
    let Some(mut mr) = found else {
        return Err(CqeSyndrome::LocalProt);
    };
    let Some(mut fast) = mr.fast else {
        return Err(CqeSyndrome::LocalProt);
    };
    if mr.attr.pdn != pdn {
        return Err(CqeSyndrome::LocalProt);
    }
    // The free-state check flags are accepted but not enforced: mlx5_ib
    // sets CHECK_NOT_FREE on registrations of free mkeys, and the PRM text
    // that defines them is not public. A registration of a valid MR
    // simply replaces it (ib_core's ULPs invalidate first).
    if mkey.status & MKEY_STATUS_FREE != 0 {
        // Local invalidation: nothing but the free bit may change, and
        // only through the current key (a stale one must not free a newer
        // registration of the same MR).
        if ctrl.mkey_mask != mkey_mask::FREE || ctrl.xlt_octowords != 0 {
            return Err(CqeSyndrome::LocalQpOp);
        }
        if mr.key != key {
            return Err(CqeSyndrome::LocalProt);
        }
        fast.valid = false;
    } else {
        let needed = mkey_mask::LEN | mkey_mask::PAGE_SIZE | mkey_mask::START_ADDR;
        if ctrl.mkey_mask & needed != needed
            || ctrl.flags & umr_flags::INLINE != 0
            || mkey.flags & mkey_flags::ACCESS_MODE_MASK != mkey_flags::ACCESS_MODE_MTT
            || !FAST_PAGE_SHIFTS.contains(&mkey.log2_page_size)
        {
            return Err(CqeSyndrome::LocalQpOp);
        }
        let Some(xlt) = xlt else {
            return Err(CqeSyndrome::LocalQpOp);
        };
        let page = 1u64 << mkey.log2_page_size;
        let pages = (mkey.start_addr & (page - 1))
            .checked_add(mkey.len)
            .map(|b| b.div_ceil(page))
            .ok_or(CqeSyndrome::LocalProt)?;
        let list = pages
            .checked_mul(MTT_SIZE as u64)
            .ok_or(CqeSyndrome::LocalProt)?;
        if pages > u64::from(fast.max_pages) || list > u64::from(xlt.byte_count) {
            return Err(CqeSyndrome::LocalLength);
        }
        let mut access = Access::NONE;
        for (bit, mask, right) in [
            (mkey_flags::LOCAL_WRITE, mkey_mask::LW, Access::LOCAL_WRITE),
            (mkey_flags::REMOTE_READ, mkey_mask::RR, Access::REMOTE_READ),
            (
                mkey_flags::REMOTE_WRITE,
                mkey_mask::RW,
                Access::REMOTE_WRITE,
            ),
            (mkey_flags::ATOMIC, mkey_mask::A, Access::REMOTE_ATOMIC),
        ] {
            if ctrl.mkey_mask & mask != 0 && mkey.flags & bit != 0 {
                access = access.union(right);
            }
        }
        let attr = MrAttr {
            iova: mkey.start_addr,
            length: mkey.len,
            access,
            ..mr.attr
        };
        if !attr_valid(&attr) {
            return Err(CqeSyndrome::LocalProt);
        }
        // The page list itself is read with the QP's rights, as one range.
        let mut mtt = None;
        resolve(
            mrs,
            mem,
            xlt.lkey,
            pdn,
            xlt.addr,
            list,
            Access::NONE,
            |a, _| mtt.replace(a).is_none(),
        )
        .map_err(|_| CqeSyndrome::LocalProt)?;
        let new_key = if ctrl.mkey_mask & mkey_mask::KEY != 0 {
            make_key(index, mkey.qpn_mkey7_0 as u8).ok_or(CqeSyndrome::LocalProt)?
        } else {
            mr.key
        };
        if new_key == 0 || new_key == 0x100 {
            return Err(CqeSyndrome::LocalProt);
        }
        fast = Fast {
            valid: true,
            mtt: mtt.unwrap_or(0),
            log_page: mkey.log2_page_size,
            ..fast
        };
        mr.attr = attr;
        mr.key = new_key;
    }
    mr.fast = Some(fast);
    let slot = usize::try_from(index)
        .ok()
        .and_then(|i| mrs.get_mut(i))
        .ok_or(CqeSyndrome::LocalProt)?;
    slot.variant = mr.key as u8;
    slot.obj = Some(mr);
    Ok(())
}

/// Checks the attributes of a new MR: the IB spec requires local write
/// access for remote write and remote atomic access, and the ranges must
/// not wrap around the address space.
pub(super) fn attr_valid(attr: &MrAttr) -> bool {
    let needs_local_write = Access::REMOTE_WRITE.union(Access::REMOTE_ATOMIC);
    let wants_remote_write = attr.access.0 & needs_local_write.0 != 0;
    if wants_remote_write && !attr.access.contains(Access::LOCAL_WRITE) {
        return false;
    }
    attr.iova.checked_add(attr.length).is_some() && attr.dma_addr.checked_add(attr.length).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> [Slot<Mr>; 4] {
        let mut t: [Slot<Mr>; 4] = core::array::from_fn(|_| Slot::new());
        t[2].variant = 7;
        t[2].obj = Some(Mr {
            attr: MrAttr {
                pdn: 1,
                iova: 0x1000,
                length: 0x100,
                dma_addr: 0x9000,
                access: Access::LOCAL_WRITE.union(Access::REMOTE_READ),
            },
            key: make_key(2, 7).unwrap(),
            fast: None,
        });
        t
    }

    extern crate std;
    use super::super::mem::DmaFault;
    use super::super::prm::wqe::MTT_EN_RD;
    use std::{vec, vec::Vec};

    /// Memory for page lists: 4 KiB at 0x10000.
    struct Mem {
        bytes: [u8; 0x1000],
    }

    impl DmaMemory for Mem {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
            let a = usize::try_from(addr.checked_sub(0x10000).ok_or(DmaFault)?).unwrap();
            buf.copy_from_slice(self.bytes.get(a..a + buf.len()).ok_or(DmaFault)?);
            Ok(())
        }
        fn write(&mut self, _: u64, _: &[u8]) -> Result<(), DmaFault> {
            Err(DmaFault)
        }
    }

    fn mem() -> Mem {
        Mem { bytes: [0; 0x1000] }
    }

    /// Resolves to a single DMA address (linear MRs).
    fn one(
        t: &[Slot<Mr>],
        key: u32,
        pdn: u32,
        addr: u64,
        len: u64,
        need: Access,
    ) -> Result<u64, KeyError> {
        let mut at = None;
        resolve(t, &mut mem(), key, pdn, addr, len, need, |a, _| {
            at.replace(a).is_none()
        })?;
        Ok(at.unwrap())
    }

    /// The ranges a resolution hands over.
    fn ranges(
        t: &[Slot<Mr>],
        m: &mut Mem,
        key: u32,
        addr: u64,
        len: u64,
        need: Access,
    ) -> Result<Vec<(u64, u64)>, KeyError> {
        let mut v = Vec::new();
        resolve(t, m, key, 1, addr, len, need, |a, n| {
            v.push((a, n));
            true
        })?;
        Ok(v)
    }

    /// Slot 3: a fast MR of PD 1 with room for 4 pages; slot 2 the linear
    /// MR of `table` (which covers a page list at 0x10000 for the UMR).
    fn fast_table() -> [Slot<Mr>; 4] {
        let mut t = table();
        if let Some(m) = t[2].obj.as_mut() {
            m.attr.iova = 0x10000;
            m.attr.dma_addr = 0x10000;
            m.attr.length = 0x1000;
        }
        t[3].variant = 1;
        t[3].obj = Some(Mr {
            attr: MrAttr {
                pdn: 1,
                iova: 0,
                length: 0,
                dma_addr: 0,
                access: Access::NONE,
            },
            key: make_key(3, 1).unwrap(),
            fast: Some(Fast {
                max_pages: 4,
                valid: false,
                mtt: 0,
                log_page: 12,
            }),
        });
        t
    }

    fn reg_umr(start: u64, len: u64, key_byte: u8, rights: u8) -> (UmrCtrlSeg, MkeySeg, DataSeg) {
        let mask = mkey_mask::FAST_REG | mkey_mask::A;
        (
            UmrCtrlSeg {
                flags: umr_flags::CHECK_FREE,
                xlt_octowords: 2,
                mkey_mask: mask,
                ..UmrCtrlSeg::default()
            },
            MkeySeg {
                flags: rights | mkey_flags::ACCESS_MODE_MTT,
                qpn_mkey7_0: 0xffff_ff00 | u32::from(key_byte),
                start_addr: start,
                len,
                log2_page_size: 12,
                ..MkeySeg::default()
            },
            DataSeg {
                byte_count: 32,
                lkey: 0x207,
                addr: 0x10000,
            },
        )
    }

    fn inval_umr() -> (UmrCtrlSeg, MkeySeg) {
        (
            UmrCtrlSeg {
                flags: umr_flags::INLINE,
                mkey_mask: mkey_mask::FREE,
                ..UmrCtrlSeg::default()
            },
            MkeySeg {
                status: MKEY_STATUS_FREE,
                ..MkeySeg::default()
            },
        )
    }

    /// A fast MR: free until a UMR registers it, then its IOVA range maps
    /// page by page through the list (adjacent pages merged), with the
    /// rights and the key byte the UMR set; invalidation frees it again.
    #[test]
    fn fast_registration_and_invalidation() {
        let mut t = fast_table();
        let mut m = mem();
        // Pages: 0x40000, 0x41000 (adjacent), 0x90000, 0x20000.
        for (i, page) in [0x40000u64, 0x41000, 0x90000, 0x20000].iter().enumerate() {
            m.bytes[i * 8..i * 8 + 8].copy_from_slice(&(page | MTT_EN_RD).to_be_bytes());
        }
        let free_key = make_key(3, 1).unwrap();
        assert_eq!(
            one(&t, free_key, 1, 0, 0, Access::NONE),
            Err(KeyError::BadKey),
            "a free MR matches no key"
        );
        // 0x3800 bytes from IOVA 0x7000_0800: four pages from 0x7000_0000.
        let rights = mkey_flags::LOCAL_WRITE | mkey_flags::REMOTE_WRITE | mkey_flags::ATOMIC;
        let (c, k, x) = reg_umr(0x7000_0800, 0x3800, 0x42, rights);
        assert_eq!(umr(&mut t, &mut m, 1, free_key, &c, &k, Some(&x)), Ok(()));
        let key = make_key(3, 0x42).unwrap();
        assert_eq!(t[3].obj.unwrap().key(), key);
        assert_eq!(t[3].variant, 0x42);
        assert_eq!(t[3].obj.unwrap().fast_valid(), Some(true));
        assert_eq!(
            one(&t, free_key, 1, 0x7000_0800, 1, Access::NONE),
            Err(KeyError::BadKey)
        );
        // The whole range: pages 0 and 1 merge, then two single pages.
        let all = ranges(&t, &mut m, key, 0x7000_0800, 0x3800, Access::REMOTE_WRITE).unwrap();
        assert_eq!(
            all,
            vec![(0x40800, 0x1800), (0x90000, 0x1000), (0x20000, 0x1000)]
        );
        // Inside one page, and across the last boundary.
        assert_eq!(
            ranges(&t, &mut m, key, 0x7000_2010, 16, Access::NONE).unwrap(),
            vec![(0x90010, 16)]
        );
        assert_eq!(
            ranges(&t, &mut m, key, 0x7000_2ff8, 16, Access::NONE).unwrap(),
            vec![(0x90ff8, 8), (0x20000, 8)]
        );
        // Bounds and rights as for any MR.
        assert_eq!(
            ranges(&t, &mut m, key, 0x7000_07ff, 2, Access::NONE),
            Err(KeyError::OutOfBounds)
        );
        assert_eq!(
            ranges(&t, &mut m, key, 0x7000_3ff8, 9, Access::NONE),
            Err(KeyError::OutOfBounds)
        );
        assert_eq!(
            ranges(&t, &mut m, key, 0x7000_0800, 8, Access::REMOTE_READ),
            Err(KeyError::AccessDenied)
        );
        // A sink that takes one range stops at the second.
        assert_eq!(
            resolve(
                &t,
                &mut m,
                key,
                1,
                0x7000_0800,
                0x3800,
                Access::NONE,
                |_, _| false
            ),
            Err(KeyError::Fragmented)
        );
        // Invalidation (of this PD's MR, by its current key) frees it.
        let (ic, ik) = inval_umr();
        assert_eq!(
            umr(&mut t, &mut m, 1, free_key, &ic, &ik, None),
            Err(CqeSyndrome::LocalProt),
            "the key from before the registration is stale"
        );
        assert_eq!(
            umr(&mut t, &mut m, 2, key, &ic, &ik, None),
            Err(CqeSyndrome::LocalProt)
        );
        assert_eq!(umr(&mut t, &mut m, 1, key, &ic, &ik, None), Ok(()));
        assert_eq!(t[3].obj.unwrap().fast_valid(), Some(false));
        assert_eq!(
            ranges(&t, &mut m, key, 0x7000_0800, 8, Access::NONE),
            Err(KeyError::BadKey)
        );
    }

    /// What a registration UMR refuses: more pages than the MR holds or
    /// the list names, a foreign PD, an unknown or linear mkey, an
    /// unreachable list, remote write without local write, and fields the
    /// model does not take.
    #[test]
    fn fast_registration_refusals() {
        let mut m = mem();
        let key = make_key(3, 1).unwrap();
        let rights = mkey_flags::LOCAL_WRITE;
        let run = |c: UmrCtrlSeg, k: MkeySeg, x: DataSeg, pdn: u32, key: u32| {
            let mut t = fast_table();
            umr(&mut t, &mut mem(), pdn, key, &c, &k, Some(&x))
        };
        let (c, k, x) = reg_umr(0x1000, 0x4000, 2, rights);
        assert_eq!(run(c, k, x, 1, key), Ok(()));
        let (c5, k5, x5) = reg_umr(0x1800, 0x4000, 2, rights);
        assert_eq!(run(c5, k5, x5, 1, key), Err(CqeSyndrome::LocalLength));
        assert_eq!(
            run(
                c,
                k,
                DataSeg {
                    byte_count: 24,
                    ..x
                },
                1,
                key
            ),
            Err(CqeSyndrome::LocalLength)
        );
        assert_eq!(run(c, k, x, 2, key), Err(CqeSyndrome::LocalProt));
        assert_eq!(
            run(c, k, x, 1, make_key(1, 1).unwrap()),
            Err(CqeSyndrome::LocalProt)
        );
        assert_eq!(run(c, k, x, 1, 0x207), Err(CqeSyndrome::LocalProt));
        assert_eq!(
            run(c, k, DataSeg { addr: 0x20000, ..x }, 1, key),
            Err(CqeSyndrome::LocalProt)
        );
        assert_eq!(
            run(
                c,
                MkeySeg {
                    flags: mkey_flags::REMOTE_WRITE | 1,
                    ..k
                },
                x,
                1,
                key
            ),
            Err(CqeSyndrome::LocalProt)
        );
        assert_eq!(
            run(c, MkeySeg { flags: rights, ..k }, x, 1, key),
            Err(CqeSyndrome::LocalQpOp),
            "PA access mode"
        );
        assert_eq!(
            run(
                c,
                MkeySeg {
                    log2_page_size: 11,
                    ..k
                },
                x,
                1,
                key
            ),
            Err(CqeSyndrome::LocalQpOp)
        );
        assert_eq!(
            run(
                UmrCtrlSeg {
                    mkey_mask: c.mkey_mask | mkey_mask::PD,
                    ..c
                },
                k,
                x,
                1,
                key
            ),
            Err(CqeSyndrome::LocalQpOp)
        );
        assert_eq!(
            run(
                UmrCtrlSeg {
                    flags: umr_flags::INLINE,
                    ..c
                },
                k,
                x,
                1,
                key
            ),
            Err(CqeSyndrome::LocalQpOp),
            "inline translation"
        );
        // Key byte 0 of slot 1 would be MLX5_INVALID_LKEY.
        let mut t = fast_table();
        t[1] = core::mem::take(&mut t[3]);
        let (c0, k0, x0) = reg_umr(0x1000, 0x1000, 0, rights);
        assert_eq!(
            umr(&mut t, &mut m, 1, 0x101, &c0, &k0, Some(&x0)),
            Err(CqeSyndrome::LocalProt)
        );
    }

    #[test]
    fn keys() {
        assert_eq!(make_key(2, 7), Some(0x207));
        assert_eq!(make_key(1 << 24, 1), None);
        assert_eq!(next_variant(255), 1);
        assert_eq!(next_variant(0), 1);
        assert_eq!(next_variant(3), 4);
    }

    #[test]
    fn resolve_checks_everything() {
        let t = table();
        let key = 0x207;
        assert_eq!(one(&t, key, 1, 0x1000, 0x100, Access::NONE), Ok(0x9000));
        assert_eq!(one(&t, key, 1, 0x10f8, 8, Access::LOCAL_WRITE), Ok(0x90f8));
        assert_eq!(
            one(&t, key, 1, 0x1000, 0x101, Access::NONE),
            Err(KeyError::OutOfBounds)
        );
        assert_eq!(
            one(&t, key, 1, 0xfff, 1, Access::NONE),
            Err(KeyError::OutOfBounds)
        );
        assert_eq!(
            one(&t, key, 1, u64::MAX, 2, Access::NONE),
            Err(KeyError::OutOfBounds)
        );
        assert_eq!(
            one(&t, key, 2, 0x1000, 1, Access::NONE),
            Err(KeyError::PdMismatch)
        );
        assert_eq!(
            one(&t, 0x206, 1, 0x1000, 1, Access::NONE),
            Err(KeyError::BadKey)
        );
        assert_eq!(
            one(&t, 0x100, 1, 0x1000, 1, Access::NONE),
            Err(KeyError::BadKey)
        );
        assert_eq!(
            one(&t, u32::MAX, 1, 0x1000, 1, Access::NONE),
            Err(KeyError::BadKey)
        );
        assert_eq!(
            one(&t, key, 1, 0x1000, 1, Access::REMOTE_WRITE),
            Err(KeyError::AccessDenied)
        );
    }

    #[test]
    fn access_bits() {
        assert_eq!(Access::from_bits(0x10), None);
        assert_eq!(Access::from_bits(0x100), None);
        assert_eq!(
            Access::from_bits(3),
            Some(Access::LOCAL_WRITE.union(Access::REMOTE_WRITE))
        );
        let bad = MrAttr {
            pdn: 0,
            iova: 0,
            length: 1,
            dma_addr: 0,
            access: Access::REMOTE_WRITE,
        };
        assert!(!attr_valid(&bad));
        assert!(attr_valid(&MrAttr {
            access: Access::ALL,
            ..bad
        }));
        assert!(!attr_valid(&MrAttr {
            iova: u64::MAX,
            access: Access::NONE,
            ..bad
        }));
    }
}
