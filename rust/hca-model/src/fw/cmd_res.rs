// SPDX-License-Identifier: GPL-2.0

//! UAR, PD and memory key commands: ALLOC_UAR / DEALLOC_UAR, ALLOC_PD /
//! DEALLOC_PD, CREATE_MKEY / DESTROY_MKEY.
//!
//! A UAR page lives in the device's BAR, so ALLOC_UAR only hands out an
//! index (the page at `uar_base + index * 4 KiB` of the embedder's DMA
//! space); index 0 is never handed out. A memory key becomes a model MR:
//! PA keys map their range onto the same bus addresses, MTT keys onto
//! their pages.
//!
//! An MTT key whose pages are contiguous (entry `k` is entry 0 plus `k`
//! pages, as for the kernel's own buffers) becomes a linear MR and costs
//! no device memory. Otherwise (a user MR: pinned pages, each mapped on
//! its own) the firmware does what a ConnectX does with any list: it
//! copies the entries, as the driver wrote them (big-endian, flag bits
//! included), into pages the driver lent it and makes a page-list MR that
//! the data path translates through page by page (see [`super::pages`]
//! and the translation section of [`super::super::mr`]). Up to
//! [`MTT_PER_PAGE`] entries (2 MiB of 4 KiB pages) take one page; a longer
//! list takes a directory page and one page per 512 entries. The command
//! message bounds a list to about 131000 entries (512 MiB of 4 KiB pages:
//! 257 pages of table); a region spanning more than [`MTT_MAX_ENTRIES`]
//! pages is refused whatever its list ([`Reject::MttTooLong`]), and a
//! table that finds too few free pages fails with [`Reject::MttNoPages`].
//! DESTROY_MKEY frees the table's pages.

use super::super::error::Error;
use super::super::mem::Platform;
use super::super::mr::{Access, MrAttr, PageList, MTT_MAX_ENTRIES, MTT_PER_PAGE};
use super::super::prm::cmd_res::{
    AllocPdOut, AllocUarOut, CreateMkeyIn, CreateMkeyOut, DeallocPdIn, DeallocPdOut, DeallocUarIn,
    DeallocUarOut, DestroyMkeyIn, DestroyMkeyOut, ACCESS_MODE_MTT, ACCESS_MODE_PA,
};
use super::super::prm::ifc::Layout;
use super::super::table::Storage;
use super::exec::Cx;
use super::mailbox::Input;
use super::pages::PageStore;
use super::reject::Reject;

type R = Result<(), Reject>;

/// The low bits of an MTT entry that carry access flags, not address
/// (mlx5_ib sets `MLX5_IB_MTT_READ | MLX5_IB_MTT_WRITE`).
const MTT_FLAGS: u64 = 0x3;

/// Whether UAR `index` is allocated.
pub(super) fn uar_allocated(uars: u128, index: u32) -> bool {
    index != 0 && index < 128 && uars >> index & 1 != 0
}

pub(super) fn alloc_uar<B: PageStore, S: Storage, P: Platform>(cx: &mut Cx<'_, B, S, P>) -> R {
    cx.no_op_mod()?;
    cx.need_out(AllocUarOut::SIZE)?;
    let fw = &mut *cx.fw;
    let index = (1..fw.cfg.uars)
        .find(|&i| !uar_allocated(fw.uars, i))
        .ok_or(Reject::NoFreeUar)?;
    fw.uars |= 1 << index;
    cx.reply(&AllocUarOut { uar: index })
}

pub(super) fn dealloc_uar<B: PageStore, S: Storage, P: Platform>(cx: &mut Cx<'_, B, S, P>) -> R {
    cx.no_op_mod()?;
    let i: DeallocUarIn = cx.read_in()?;
    if !uar_allocated(cx.fw.uars, i.uar) {
        return Err(Reject::BadUar);
    }
    cx.need_out(DeallocUarOut::SIZE)?;
    let addr = cx.fw.uar_addr(i.uar);
    let t = cx.hca.tables();
    let busy = t
        .eqs
        .iter()
        .filter_map(|s| s.obj.as_ref())
        .any(|e| e.attr.uar_addr == addr)
        || t.cqs
            .iter()
            .filter_map(|s| s.obj.as_ref())
            .any(|c| c.attr.uar_addr == addr)
        || t.qps
            .iter()
            .filter_map(|s| s.obj.as_ref())
            .any(|q| q.attr.uar_addr == addr);
    if busy {
        return Err(Reject::UarBusy);
    }
    cx.fw.uars &= !(1 << i.uar);
    cx.reply(&DeallocUarOut {})
}

pub(super) fn alloc_pd<B: PageStore, S: Storage, P: Platform>(cx: &mut Cx<'_, B, S, P>) -> R {
    cx.no_op_mod()?;
    cx.need_out(AllocPdOut::SIZE)?;
    let pd = cx.hca.alloc_pd().map_err(|_| Reject::TableFull)?;
    if pd > 0xff_ffff {
        // Beyond the 24-bit field: give it back and report a full table.
        let _ = cx.hca.dealloc_pd(pd);
        return Err(Reject::TableFull);
    }
    cx.reply(&AllocPdOut { pd })
}

pub(super) fn dealloc_pd<B: PageStore, S: Storage, P: Platform>(cx: &mut Cx<'_, B, S, P>) -> R {
    cx.no_op_mod()?;
    let i: DeallocPdIn = cx.read_in()?;
    cx.need_out(DeallocPdOut::SIZE)?;
    cx.hca.dealloc_pd(i.pd).map_err(|e| match e {
        Error::Busy => Reject::PdBusy,
        _ => Reject::BadPd,
    })?;
    cx.reply(&DeallocPdOut {})
}

/// How a memory key's range maps onto bus addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Translation {
    /// Linearly (PA, or contiguous MTT pages): the DMA address of the
    /// key's first byte.
    Linear(u64),
    /// Page by page (scattered MTT pages), through a table of this many
    /// entries.
    Pages(u64),
}

/// Checks an MTT key's page size, length and list (every entry aligned),
/// and tells whether the pages are contiguous.
fn check_mtt<B: PageStore, S: Storage, P: Platform>(
    cx: &mut Cx<'_, B, S, P>,
    i: &CreateMkeyIn,
) -> Result<Translation, Reject> {
    let m = &i.memory_key_mkey_entry;
    if m.length64 {
        return Err(Reject::UnsupportedMkey);
    }
    let log = u32::from(m.log_page_size);
    if log < 12 {
        return Err(Reject::BadMttPageSize);
    }
    let pgsz = 1u64.checked_shl(log).ok_or(Reject::BadMttPageSize)?;
    let offset = m.start_addr & (pgsz - 1);
    let span = offset.checked_add(m.len).ok_or(Reject::BadMkeyAccess)?;
    let needed = span.div_ceil(pgsz);
    if needed > MTT_MAX_ENTRIES {
        return Err(Reject::MttTooLong);
    }
    let given = u64::from(i.translations_octword_actual_size) * 2;
    if given < needed {
        return Err(Reject::MttTooShort);
    }
    let bytes = usize::try_from(given * 8).map_err(|_| Reject::InputTooShort)?;
    if cx.input.len() < CreateMkeyIn::SIZE.saturating_add(bytes) {
        return Err(Reject::InputTooShort);
    }
    if needed == 0 {
        return Ok(Translation::Linear(0));
    }
    let mut first = 0;
    let mut contiguous = true;
    for k in 0..needed {
        let entry = cx.input.pas(cx.p, CreateMkeyIn::SIZE, k as usize)? & !MTT_FLAGS;
        if entry & (pgsz - 1) != 0 {
            return Err(Reject::MttMisaligned);
        }
        if k == 0 {
            first = entry;
        } else if Some(entry) != k.checked_mul(pgsz).and_then(|o| first.checked_add(o)) {
            contiguous = false;
        }
    }
    Ok(if contiguous {
        Translation::Linear(first | offset)
    } else {
        Translation::Pages(needed)
    })
}

/// Copies entries `from..to` of the command's page list (at byte
/// `pas_offset` of the input), as they are, to the page at `page` (entry
/// `from` first).
fn copy_entries<P: Platform>(
    input: &mut Input,
    p: &mut P,
    pas_offset: usize,
    from: u64,
    to: u64,
    page: u64,
) -> Result<(), Reject> {
    const CHUNK: usize = 32;
    let mut buf = [0u8; CHUNK * 8];
    let mut k = from;
    while k < to {
        let n = usize::try_from((to - k).min(CHUNK as u64)).unwrap_or(CHUNK);
        let bytes = buf.get_mut(..n * 8).ok_or(Reject::InputTooShort)?;
        let at = usize::try_from(k)
            .ok()
            .and_then(|k| k.checked_mul(8))
            .and_then(|o| o.checked_add(pas_offset))
            .ok_or(Reject::InputTooShort)?;
        input.read(p, at, bytes)?;
        p.write(page.wrapping_add((k - from) * 8), bytes)
            .map_err(|_| Reject::PageUnreachable)?;
        k += n as u64;
    }
    Ok(())
}

/// Builds the translation table of the first `n` entries of the
/// command's page list (at byte `pas_offset` of the input: CREATE_MKEY's,
/// or a queue's in CREATE_CQ and CREATE_QP) in the lowest free held pages
/// and marks them in use: one page, or a directory page followed by one
/// page per [`MTT_PER_PAGE`] entries. Nothing is marked if it fails: too
/// few free pages, no slot in the page store to mark them
/// ([`Reject::PageTableFull`]), a page or the input unreachable.
pub(super) fn build_table<B: PageStore, S: Storage, P: Platform>(
    cx: &mut Cx<'_, B, S, P>,
    pas_offset: usize,
    n: u64,
    log_page: u8,
) -> Result<PageList, Reject> {
    let leaves = n.div_ceil(MTT_PER_PAGE);
    let indirect = leaves > 1;
    let pages = usize::try_from(leaves + u64::from(indirect)).map_err(|_| Reject::MttTooLong)?;
    let max_pages = u32::try_from(n).map_err(|_| Reject::MttTooLong)?;
    if cx.fw.pages.free_count() < pages {
        return Err(Reject::MttNoPages);
    }
    if cx.fw.pages.mark_room() < pages {
        return Err(Reject::PageTableFull);
    }
    // Written before they are marked: the pages `mark_lowest_free` takes,
    // in its order.
    let top = {
        let mut free = cx.fw.pages.free();
        let top = free.next().ok_or(Reject::MttNoPages)?;
        if indirect {
            for j in 0..leaves {
                let leaf = free.next().ok_or(Reject::MttNoPages)?;
                cx.p.write(top.wrapping_add(j * 8), &leaf.to_be_bytes())
                    .map_err(|_| Reject::PageUnreachable)?;
                let from = j * MTT_PER_PAGE;
                let to = n.min(from + MTT_PER_PAGE);
                copy_entries(&mut cx.input, cx.p, pas_offset, from, to, leaf)?;
            }
        } else {
            copy_entries(&mut cx.input, cx.p, pas_offset, 0, n, top)?;
        }
        top
    };
    if !cx.fw.pages.mark_lowest_free(pages) {
        return Err(Reject::MttNoPages);
    }
    Ok(PageList {
        max_pages,
        valid: true,
        mtt: top,
        log_page,
        umr: false,
        indirect,
    })
}

/// Marks the pages of a table [`build_table`] made free again (a
/// directory's pages as it lists them).
pub(super) fn free_table<B: PageStore, S: Storage, P: Platform>(
    cx: &mut Cx<'_, B, S, P>,
    list: &PageList,
) {
    if list.indirect {
        for j in 0..u64::from(list.max_pages).div_ceil(MTT_PER_PAGE) {
            let mut e = [0u8; 8];
            if cx.p.read(list.mtt.wrapping_add(j * 8), &mut e).is_ok() {
                cx.fw.pages.release(u64::from_be_bytes(e));
            }
        }
    }
    cx.fw.pages.release(list.mtt);
}

/// CREATE_MKEY of a free key for fast registration, as mlx5_ib's
/// `alloc_mr` makes it: `free` and `umr_en`, MTT access mode, room for
/// `translations_octword_size` octowords of MTT entries (two each), no
/// translation yet. No key reaches it until a UMR WQE of a QP in its PD
/// registers pages into it (the engine's fast registration).
fn create_free_mkey<B: PageStore, S: Storage, P: Platform>(
    cx: &mut Cx<'_, B, S, P>,
    i: &CreateMkeyIn,
) -> R {
    let m = i.memory_key_mkey_entry;
    if !m.umr_en || m.access_mode() != ACCESS_MODE_MTT || i.translations_octword_actual_size != 0 {
        return Err(Reject::UnsupportedMkey);
    }
    let max_pages = m.translations_octword_size.saturating_mul(2);
    cx.need_out(CreateMkeyOut::SIZE)?;
    let key = cx
        .hca
        .create_fast_mr_with_variant(m.pd, max_pages, m.mkey_7_0)
        .map_err(|e| match e {
            Error::NotFound => Reject::BadPd,
            Error::NoSpace => Reject::TableFull,
            _ => Reject::UnsupportedMkey,
        })?;
    cx.reply(&CreateMkeyOut {
        mkey_index: key >> 8,
    })
}

pub(super) fn create_mkey<B: PageStore, S: Storage, P: Platform>(cx: &mut Cx<'_, B, S, P>) -> R {
    cx.no_op_mod()?;
    let i: CreateMkeyIn = cx.read_in()?;
    let m = i.memory_key_mkey_entry;
    if m.qpn != 0xff_ffff || i.pg_access {
        return Err(Reject::UnsupportedMkey);
    }
    if m.free {
        return create_free_mkey(cx, &i);
    }
    let (iova, length, map) = match m.access_mode() {
        ACCESS_MODE_PA if m.length64 => (
            m.start_addr,
            u64::MAX - m.start_addr,
            Translation::Linear(m.start_addr),
        ),
        ACCESS_MODE_PA => (m.start_addr, m.len, Translation::Linear(m.start_addr)),
        ACCESS_MODE_MTT => (m.start_addr, m.len, check_mtt(cx, &i)?),
        _ => return Err(Reject::BadAccessMode),
    };
    let mut access = Access::NONE;
    for (bit, a) in [
        (m.lw, Access::LOCAL_WRITE),
        (m.rr, Access::REMOTE_READ),
        (m.rw, Access::REMOTE_WRITE),
        (m.a, Access::REMOTE_ATOMIC),
    ] {
        if bit {
            access = access.union(a);
        }
    }
    cx.need_out(CreateMkeyOut::SIZE)?;
    let (dma_addr, pages) = match map {
        Translation::Linear(at) => (at, None),
        Translation::Pages(n) => (
            0,
            Some(build_table(cx, CreateMkeyIn::SIZE, n, m.log_page_size)?),
        ),
    };
    let attr = MrAttr {
        pdn: m.pd,
        iova,
        length,
        dma_addr,
        access,
    };
    let key = match cx.hca.create_mr_with_variant(&attr, m.mkey_7_0, pages) {
        Ok(key) => key,
        Err(e) => {
            if let Some(list) = pages {
                free_table(cx, &list);
            }
            return Err(match e {
                Error::NotFound => Reject::BadPd,
                Error::NoSpace => Reject::TableFull,
                _ => Reject::BadMkeyAccess,
            });
        }
    };
    cx.reply(&CreateMkeyOut {
        mkey_index: key >> 8,
    })
}

pub(super) fn destroy_mkey<B: PageStore, S: Storage, P: Platform>(cx: &mut Cx<'_, B, S, P>) -> R {
    cx.no_op_mod()?;
    let i: DestroyMkeyIn = cx.read_in()?;
    cx.need_out(DestroyMkeyOut::SIZE)?;
    let (key, table) = usize::try_from(i.mkey_index)
        .ok()
        .and_then(|index| {
            cx.hca
                .tables()
                .mrs
                .get(index)
                .and_then(|s| s.obj.as_ref().map(|m| (m.key, m.pages.filter(|l| !l.umr))))
        })
        .ok_or(Reject::BadMkey)?;
    cx.hca.destroy_mr(key).map_err(|_| Reject::BadMkey)?;
    if let Some(list) = table {
        free_table(cx, &list);
    }
    cx.reply(&DestroyMkeyOut {})
}
