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
//! An MR covers `length` bytes of I/O virtual address space from `iova`.
//! A linear MR maps them onto DMA addresses from `dma_addr`. The kernel,
//! whose pinned pages are not contiguous, gives each MR its own window of
//! "DMA addresses" and resolves them to pages in its
//! [`super::mem::DmaMemory`].
//!
//! A page-list MR maps them page by page instead, through a table of page
//! addresses in DMA memory (mlx5's MTT): entry `i`, big-endian, holds the
//! address of the `i`-th page of `1 << log_page` bytes from the page that
//! holds `iova` (its low bits, mlx5's `MTT_EN_RD` / `MTT_EN_WR`, are
//! ignored). Checking an access ([`resolve`]) reads no entry: the access
//! becomes a piece of the transfer that names its position in the table,
//! and the copy reads each entry when it reaches that page (once per page
//! and pass, [`super::transfer`]), so an access may span any number of
//! pages, in any order. A translation is read each time an access needs
//! it; nothing is kept between WQEs. There are two kinds:
//!
//! - A fast-registration MR (created with [`Hca::create_fast_mr`], mlx5's
//!   `umr_en` mkey created free) has no translation until a UMR WQE
//!   registers it (`umr`): then its table is the page list where the UMR's
//!   data segment pointed. A local invalidation UMR makes it free again; a
//!   free MR matches no key.
//! - The firmware's MR for a CREATE_MKEY whose pages are scattered
//!   ([`super::fw`]) is valid from creation to destruction and no UMR may
//!   touch it (mlx5: an mkey without `umr_en`). Its table is a copy of the
//!   command's list in pages the driver lent the device: one page of
//!   [`MTT_PER_PAGE`] entries, or, for a longer list, a directory page
//!   whose entry `j` (big-endian) is the address of the page holding
//!   entries `512 j` to `512 j + 511`.
//!
//! [`Hca::create_fast_mr`]: super::hca::Hca::create_fast_mr

use super::mem::{DmaFault, DmaMemory};
use super::prm::opcode::CqeSyndrome;
use super::prm::wqe::{
    mkey_flags, mkey_mask, umr_flags, DataSeg, MkeySeg, UmrCtrlSeg, MKEY_STATUS_FREE, MTT_SIZE,
};
use super::table::Slot;
use super::transfer::Piece;

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
    /// The page-list translation (see the module documentation); `None`
    /// for a linear MR.
    pub(super) pages: Option<PageList>,
}

/// How a page-list MR translates (a fast-registration MR's UMR-managed
/// state, or the firmware's table of a scattered CREATE_MKEY).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct PageList {
    /// Most translation entries the MR may hold (its size at creation).
    pub(super) max_pages: u32,
    /// Translating (else free: no key matches it). A fast-registration MR
    /// is valid between a registration and an invalidation; the
    /// firmware's page-list MR always.
    pub(super) valid: bool,
    /// DMA address of the table: the page list the last registration
    /// named, or the firmware's copy (its directory if `indirect`).
    pub(super) mtt: u64,
    /// log2 of the page size of that list.
    pub(super) log_page: u8,
    /// UMR WQEs may register and invalidate the MR (mlx5's `umr_en`): set
    /// for a fast-registration MR, clear for the firmware's.
    pub(super) umr: bool,
    /// `mtt` is a directory of table pages, [`MTT_PER_PAGE`] entries each.
    pub(super) indirect: bool,
}

/// Smallest and largest page size of a fast registration (4 KiB, 1 GiB).
pub(super) const FAST_PAGE_SHIFTS: core::ops::RangeInclusive<u8> = 12..=30;

/// Translation entries in one 4 KiB page of a table, and page addresses in
/// one directory page.
pub const MTT_PER_PAGE: u64 = 4096 / MTT_SIZE as u64;

/// Most entries a two-level table holds (a full directory of full pages:
/// 1 GiB of 4 KiB pages).
pub const MTT_MAX_ENTRIES: u64 = MTT_PER_PAGE * MTT_PER_PAGE;

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
        self.pages.filter(|l| l.umr).map(|l| l.valid)
    }

    /// Whether the MR translates through a table the firmware keeps in
    /// device pages (a CREATE_MKEY whose pages are scattered).
    pub fn in_device_table(&self) -> bool {
        self.pages.is_some_and(|l| !l.umr)
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
    /// A page-list entry could not be read (by [`one_range`]; a copy
    /// meets an unreadable entry as a fault of its side).
    BadTranslation,
    /// The range is not one DMA range, where one is needed
    /// ([`one_range`]).
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

/// Checks `len` bytes at I/O virtual address `addr` against the MR named
/// by `key`, for a QP in PD `pdn`, requiring the rights in `need`, and
/// returns the piece of a transfer they are: a DMA range for a linear MR,
/// the range's position in the page-list MR's translation for a page-list
/// MR (translated page by page as the copy reaches it, see
/// [`super::transfer`]).
///
/// Only the MR table is consulted: key, PD, bounds and rights, one check
/// per data segment, before any byte moves. A page-list entry that cannot
/// be read is found by the copy that needs it.
///
/// A zero-length range is checked like any other (the caller skips the
/// check where the IB spec says a zero-length transfer checks no key).
pub(super) fn resolve(
    mrs: &[Slot<Mr>],
    key: u32,
    pdn: u32,
    addr: u64,
    len: u64,
    need: Access,
) -> Result<Piece, KeyError> {
    let slot = usize::try_from(key_index(key))
        .ok()
        .and_then(|i| mrs.get(i))
        .ok_or(KeyError::BadKey)?;
    let mr = match &slot.obj {
        Some(mr) if mr.key == key && mr.pages.is_none_or(|l| l.valid) => mr,
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
    let Some(list) = mr.pages else {
        // Cannot overflow: creation checked that dma_addr + length fits.
        let addr = mr
            .attr
            .dma_addr
            .checked_add(offset)
            .ok_or(KeyError::OutOfBounds)?;
        return Ok(Piece::Dma { addr, len });
    };
    // Page list: entry i maps the i-th page from the page holding `iova`.
    // `iova + length` fits (creation and registration checked it), so the
    // position does too.
    let table = list.table();
    let pos = (mr.attr.iova & (table.page_size() - 1))
        .checked_add(offset)
        .ok_or(KeyError::OutOfBounds)?;
    Ok(Piece::Paged { table, pos, len })
}

/// The one DMA range a piece's bytes occupy, for what must be a single
/// range (an atomic's 8-byte word, a UMR's page list): a DMA piece's
/// address, or a page-list piece's translation, whose pages must follow
/// each other. Reads the translation entries the range spans.
///
/// # Errors
///
/// [`KeyError::BadTranslation`] for an entry that cannot be read,
/// [`KeyError::Fragmented`] for pages that do not follow each other (and
/// for inline data).
pub(super) fn one_range<M: DmaMemory + ?Sized>(
    mem: &mut M,
    piece: &Piece,
) -> Result<u64, KeyError> {
    let (table, pos, len) = match *piece {
        Piece::Dma { addr, .. } => return Ok(addr),
        Piece::Paged { table, pos, len } => (table, pos, len),
        Piece::Inline { .. } => return Err(KeyError::Fragmented),
    };
    let mut leaf = None;
    // The range so far: (start, bytes).
    let mut range: Option<(u64, u64)> = None;
    let mut at = pos;
    let stop = pos.checked_add(len).ok_or(KeyError::BadTranslation)?;
    while at < stop {
        let (addr, run) = table
            .translate(mem, at, &mut leaf)
            .map_err(|_| KeyError::BadTranslation)?;
        let n = run.min(stop - at);
        range = match range {
            None => Some((addr, n)),
            Some((start, done)) if start.checked_add(done) == Some(addr) => Some((start, done + n)),
            Some(_) => return Err(KeyError::Fragmented),
        };
        at += n;
    }
    // An empty range is nowhere in particular.
    Ok(range.map_or(0, |(start, _)| start))
}

/// A page-list MR's translation, as the pieces of a transfer name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Table {
    /// DMA address of the table (of its directory if `indirect`).
    pub(super) mtt: u64,
    /// log2 of the page size (12 or more).
    pub(super) log_page: u8,
    /// `mtt` is a directory of table pages, [`MTT_PER_PAGE`] entries each.
    pub(super) indirect: bool,
}

impl Table {
    /// Bytes per page.
    pub(super) fn page_size(&self) -> u64 {
        1u64 << (self.log_page & 63)
    }

    /// The DMA address of page `index`: reads its entry (the flag bits
    /// below the page size are ignored) and, for a two-level table, the
    /// directory entry unless `leaf` holds it (see [`entry_addr`]).
    pub(super) fn page<M: DmaMemory + ?Sized>(
        &self,
        mem: &mut M,
        index: u64,
        leaf: &mut Option<(u64, u64)>,
    ) -> Result<u64, DmaFault> {
        let at = entry_addr(mem, self.mtt, self.indirect, index, leaf)?;
        let mut e = [0u8; MTT_SIZE];
        mem.read(at, &mut e)?;
        Ok(u64::from_be_bytes(e) & !(self.page_size() - 1))
    }

    /// Translates position `pos` (bytes from the start of the table's
    /// page 0): the DMA address, and the bytes from there to the end of
    /// its page.
    pub(super) fn translate<M: DmaMemory + ?Sized>(
        &self,
        mem: &mut M,
        pos: u64,
        leaf: &mut Option<(u64, u64)>,
    ) -> Result<(u64, u64), DmaFault> {
        let page = self.page_size();
        let base = self.page(mem, pos >> (self.log_page & 63), leaf)?;
        let within = pos & (page - 1);
        Ok((base.checked_add(within).ok_or(DmaFault)?, page - within))
    }
}

impl PageList {
    /// The translation table.
    pub(super) fn table(&self) -> Table {
        Table {
            mtt: self.mtt,
            log_page: self.log_page,
            indirect: self.indirect,
        }
    }
}

/// The DMA address of translation entry `index` of the table at `mtt`
/// (a directory of table pages if `indirect`). For a two-level table the
/// directory entry is read, once per table page: `leaf` keeps the last one
/// read (directory index, page address).
fn entry_addr<M: DmaMemory + ?Sized>(
    mem: &mut M,
    mtt: u64,
    indirect: bool,
    index: u64,
    leaf: &mut Option<(u64, u64)>,
) -> Result<u64, DmaFault> {
    let entry = MTT_SIZE as u64;
    if !indirect {
        return index
            .checked_mul(entry)
            .and_then(|o| mtt.checked_add(o))
            .ok_or(DmaFault);
    }
    let dir = index / MTT_PER_PAGE;
    let table = match *leaf {
        Some((d, at)) if d == dir => at,
        _ => {
            let mut e = [0u8; MTT_SIZE];
            let at = dir
                .checked_mul(entry)
                .and_then(|o| mtt.checked_add(o))
                .ok_or(DmaFault)?;
            mem.read(at, &mut e)?;
            let at = u64::from_be_bytes(e);
            *leaf = Some((dir, at));
            at
        }
    };
    table
        .checked_add(index % MTT_PER_PAGE * entry)
        .ok_or(DmaFault)
}

/// Translation entry `index` of the table at `mtt` (see [`entry_addr`]),
/// as stored: a page address with the MTT flag bits.
pub(super) fn table_entry<M: DmaMemory + ?Sized>(
    mem: &mut M,
    mtt: u64,
    indirect: bool,
    index: u64,
) -> Result<u64, DmaFault> {
    let at = entry_addr(mem, mtt, indirect, index, &mut None)?;
    let mut e = [0u8; MTT_SIZE];
    mem.read(at, &mut e)?;
    Ok(u64::from_be_bytes(e))
}

/// Executes a UMR WQE of a QP in PD `pdn` on the MR whose index `key`
/// names (the control segment's `imm`): a fast registration (mask with
/// FREE, status not free: the page list at `xlt`, the new start, length,
/// rights, page size and key byte) or a local invalidation (mask FREE
/// alone, status free). Returns the CQE syndrome of a failure.
///
/// What the model does not take, as an mlx5 device would refuse it:
/// inline translations, KLM or other access modes, signature or BSF
/// fields, and a UMR on an MR created without UMR enabled (a linear MR,
/// or the firmware's page-list MR: its table is device memory only the
/// firmware writes, and it must not be freed under DESTROY_MKEY's feet).
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
    let Some(mut fast) = mr.pages.filter(|l| l.umr) else {
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
        // The page list itself is read with the QP's rights, as one range
        // (mlx5 reads a UMR's translation list as one buffer).
        let mtt = resolve(mrs, xlt.lkey, pdn, xlt.addr, list, Access::NONE)
            .and_then(|piece| one_range(mem, &piece))
            .map_err(|_| CqeSyndrome::LocalProt)?;
        let new_key = if ctrl.mkey_mask & mkey_mask::KEY != 0 {
            make_key(index, mkey.qpn_mkey7_0 as u8).ok_or(CqeSyndrome::LocalProt)?
        } else {
            mr.key
        };
        if new_key == 0 || new_key == 0x100 {
            return Err(CqeSyndrome::LocalProt);
        }
        fast = PageList {
            valid: true,
            mtt,
            log_page: mkey.log2_page_size,
            ..fast
        };
        mr.attr = attr;
        mr.key = new_key;
    }
    mr.pages = Some(fast);
    let slot = usize::try_from(index)
        .ok()
        .and_then(|i| mrs.get_mut(i))
        .ok_or(CqeSyndrome::LocalProt)?;
    slot.variant = mr.key as u8;
    slot.obj = Some(mr);
    Ok(())
}

/// Remote invalidation (a SEND_INVAL arriving at a responder QP in PD
/// `pdn`): frees the fast-registration MR whose current key is `key`, as a
/// local invalidation UMR would. Only an MR that UMR WQEs manage may be
/// invalidated so (mlx5_ib enables remote invalidation on every such MR);
/// a linear or firmware-table MR, another PD's, or a stale key is
/// refused, and so is an MR that is free already (nothing registered
/// under the key: the sender's invalidation has no effect to report).
///
/// # Errors
///
/// [`KeyError::BadKey`] for an unknown, stale or not remotely
/// invalidatable key, [`KeyError::PdMismatch`] for another PD's MR.
pub(super) fn invalidate_remote(mrs: &mut [Slot<Mr>], pdn: u32, key: u32) -> Result<(), KeyError> {
    let slot = usize::try_from(key_index(key))
        .ok()
        .and_then(|i| mrs.get_mut(i))
        .ok_or(KeyError::BadKey)?;
    let Some(mr) = slot.obj.as_mut() else {
        return Err(KeyError::BadKey);
    };
    if mr.key != key {
        return Err(KeyError::BadKey);
    }
    let Some(fast) = mr.pages.as_mut().filter(|l| l.umr && l.valid) else {
        return Err(KeyError::BadKey);
    };
    if mr.attr.pdn != pdn {
        return Err(KeyError::PdMismatch);
    }
    fast.valid = false;
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
            pages: None,
        });
        t
    }

    extern crate std;
    use super::super::mem::DmaFault;
    use super::super::prm::wqe::MTT_EN_RD;
    use std::{vec, vec::Vec};

    /// Memory for page lists: 16 KiB at 0x10000.
    struct Mem {
        bytes: [u8; 0x4000],
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
        Mem { bytes: [0; 0x4000] }
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
        match resolve(t, key, pdn, addr, len, need)? {
            Piece::Dma { addr, len: l } => {
                assert_eq!(l, len);
                Ok(addr)
            }
            p => panic!("a linear MR resolved to {p:?}"),
        }
    }

    /// The DMA ranges an access maps onto, adjacent pages merged: the
    /// checked piece, translated page by page as a copy would.
    fn ranges(
        t: &[Slot<Mr>],
        m: &mut Mem,
        key: u32,
        addr: u64,
        len: u64,
        need: Access,
    ) -> Result<Vec<(u64, u64)>, KeyError> {
        let (table, pos, len) = match resolve(t, key, 1, addr, len, need)? {
            Piece::Dma { addr, len } => return Ok(vec![(addr, len)]),
            Piece::Paged { table, pos, len } => (table, pos, len),
            p => panic!("an MR resolved to {p:?}"),
        };
        let mut v: Vec<(u64, u64)> = Vec::new();
        let mut leaf = None;
        let mut at = pos;
        while at < pos + len {
            let (a, run) = table
                .translate(m, at, &mut leaf)
                .map_err(|_| KeyError::BadTranslation)?;
            let n = run.min(pos + len - at);
            match v.last_mut() {
                Some((s, l)) if *s + *l == a => *l += n,
                _ => v.push((a, n)),
            }
            at += n;
        }
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
            pages: Some(PageList {
                max_pages: 4,
                valid: false,
                mtt: 0,
                log_page: 12,
                umr: true,
                indirect: false,
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
        // Checking reads no entry: the access is a position in the table.
        let piece = resolve(&t, key, 1, 0x7000_0800, 0x3800, Access::NONE).unwrap();
        let Piece::Paged { table, pos, len } = piece else {
            panic!("{piece:?}");
        };
        assert_eq!(
            (table.mtt, table.log_page, pos, len),
            (0x10000, 12, 0x800, 0x3800)
        );
        // As one range: pages 0 and 1 follow each other, page 2 does not.
        assert_eq!(
            one_range(
                &mut m,
                &Piece::Paged {
                    table,
                    pos,
                    len: 0x1800
                }
            ),
            Ok(0x40800)
        );
        assert_eq!(one_range(&mut m, &piece), Err(KeyError::Fragmented));
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

    /// Remote invalidation frees a fast MR by its current key, in its own
    /// PD only, and never a linear MR.
    #[test]
    fn remote_invalidation() {
        let mut t = fast_table();
        let mut m = mem();
        for (i, page) in [0x40000u64, 0x41000, 0x90000, 0x20000].iter().enumerate() {
            m.bytes[i * 8..i * 8 + 8].copy_from_slice(&(page | MTT_EN_RD).to_be_bytes());
        }
        let (c, k, x) = reg_umr(0x7000_0800, 0x3800, 0x80, mkey_flags::LOCAL_WRITE);
        let free_key = make_key(3, 1).unwrap();
        assert_eq!(umr(&mut t, &mut m, 1, free_key, &c, &k, Some(&x)), Ok(()));
        let key = t[3].obj.unwrap().key;
        assert_eq!(t[3].obj.unwrap().fast_valid(), Some(true));
        assert_eq!(
            invalidate_remote(&mut t, 1, free_key),
            Err(KeyError::BadKey)
        );
        assert_eq!(invalidate_remote(&mut t, 2, key), Err(KeyError::PdMismatch));
        assert_eq!(t[3].obj.unwrap().fast_valid(), Some(true));
        let linear = t[2].obj.unwrap().key;
        assert_eq!(invalidate_remote(&mut t, 1, linear), Err(KeyError::BadKey));
        assert_eq!(invalidate_remote(&mut t, 1, key), Ok(()));
        assert_eq!(t[3].obj.unwrap().fast_valid(), Some(false));
        assert_eq!(invalidate_remote(&mut t, 1, key), Err(KeyError::BadKey));
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

    /// Slot 3 as the firmware's page-list MR of PD 1: `n` entries of 4
    /// KiB pages from IOVA `iova`, its table at 0x10000 (a directory if
    /// `indirect`), all rights.
    fn device_table(n: u32, iova: u64, indirect: bool) -> [Slot<Mr>; 4] {
        let mut t = table();
        t[3].variant = 9;
        t[3].obj = Some(Mr {
            attr: MrAttr {
                pdn: 1,
                iova,
                length: u64::from(n) * 0x1000 - (iova & 0xfff),
                dma_addr: 0,
                access: Access::ALL,
            },
            key: make_key(3, 9).unwrap(),
            pages: Some(PageList {
                max_pages: n,
                valid: true,
                mtt: 0x10000,
                log_page: 12,
                umr: false,
                indirect,
            }),
        });
        t
    }

    /// Writes big-endian 64-bit `value` at DMA address `at` of `m`.
    fn put(m: &mut Mem, at: u64, value: u64) {
        let i = usize::try_from(at - 0x10000).unwrap();
        m.bytes[i..i + 8].copy_from_slice(&value.to_be_bytes());
    }

    /// The firmware's page-list MR: valid from the start, translated page
    /// by page through its one-page table, and no UMR may register or
    /// invalidate it.
    #[test]
    fn device_table_mr_translates_and_refuses_umr() {
        let mut t = device_table(3, 0x7f00_0000_0800, false);
        let mut m = mem();
        let pages = [0x9_0000u64, 0x4_0000, 0x4_1000];
        for (i, p) in pages.iter().enumerate() {
            put(&mut m, 0x10000 + i as u64 * 8, p | MTT_EN_RD | 2);
        }
        let key = make_key(3, 9).unwrap();
        let mr = t[3].obj.unwrap();
        assert!(mr.in_device_table());
        assert_eq!(mr.fast_valid(), None, "not a fast-registration MR");
        assert!(!t[2].obj.unwrap().in_device_table());
        // Across the first boundary (pages 0 and 1 are apart), and the
        // adjacent pages 1 and 2 merged.
        assert_eq!(
            ranges(&t, &mut m, key, 0x7f00_0000_0ff0, 0x20, Access::NONE).unwrap(),
            vec![(0x9_0ff0, 0x10), (0x4_0000, 0x10)]
        );
        assert_eq!(
            ranges(&t, &mut m, key, 0x7f00_0000_0800, 0x2800, Access::ALL).unwrap(),
            vec![(0x9_0800, 0x800), (0x4_0000, 0x2000)]
        );
        assert_eq!(
            ranges(&t, &mut m, key, 0x7f00_0000_2fff, 2, Access::NONE),
            Err(KeyError::OutOfBounds)
        );
        // Neither a registration nor an invalidation may touch it.
        let (c, k, x) = reg_umr(0x1000, 0x1000, 9, mkey_flags::LOCAL_WRITE);
        assert_eq!(
            umr(&mut t, &mut m, 1, key, &c, &k, Some(&x)),
            Err(CqeSyndrome::LocalProt)
        );
        let (ic, ik) = inval_umr();
        assert_eq!(
            umr(&mut t, &mut m, 1, key, &ic, &ik, None),
            Err(CqeSyndrome::LocalProt)
        );
        let after = t[3].obj.unwrap();
        assert_eq!(
            (after.key, after.attr, after.pages),
            (mr.key, mr.attr, mr.pages)
        );
        assert_eq!(
            ranges(&t, &mut m, key, 0x7f00_0000_0800, 8, Access::NONE).unwrap(),
            vec![(0x9_0800, 8)]
        );
    }

    /// A two-level table: the directory at 0x10000 names the pages of
    /// entries 0 to 511 (0x11000) and 512 to 599 (0x12000).
    #[test]
    fn two_level_table() {
        let t = device_table(600, 0x5000_0000, true);
        let mut m = mem();
        put(&mut m, 0x10000, 0x11000);
        put(&mut m, 0x10008, 0x12000);
        let page = |k: u64| 0x4000_0000 + k * 0x2000;
        for k in 0..600u64 {
            let at = if k < 512 {
                0x11000 + k * 8
            } else {
                0x12000 + (k - 512) * 8
            };
            put(&mut m, at, page(k) | MTT_EN_RD);
        }
        let key = make_key(3, 9).unwrap();
        // Entries 510 to 513: across the directory's two pages.
        let got = ranges(
            &t,
            &mut m,
            key,
            0x5000_0000 + 510 * 0x1000 + 0xff0,
            0x2020,
            Access::NONE,
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                (page(510) + 0xff0, 0x10),
                (page(511), 0x1000),
                (page(512), 0x1000),
                (page(513), 0x10)
            ]
        );
        assert_eq!(
            ranges(
                &t,
                &mut m,
                key,
                0x5000_0000 + 599 * 0x1000 + 0xff8,
                8,
                Access::NONE
            )
            .unwrap(),
            vec![(page(599) + 0xff8, 8)]
        );
        assert_eq!(
            ranges(
                &t,
                &mut m,
                key,
                0x5000_0000 + 599 * 0x1000 + 0xff8,
                9,
                Access::NONE
            ),
            Err(KeyError::OutOfBounds)
        );
        // A directory entry naming unreachable memory is a bad translation.
        put(&mut m, 0x10008, 0x9990_0000);
        assert_eq!(
            ranges(&t, &mut m, key, 0x5000_0000 + 512 * 0x1000, 8, Access::NONE),
            Err(KeyError::BadTranslation)
        );
        put(&mut m, 0x10008, u64::MAX - 4);
        assert_eq!(
            ranges(&t, &mut m, key, 0x5000_0000 + 513 * 0x1000, 8, Access::NONE),
            Err(KeyError::BadTranslation)
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
