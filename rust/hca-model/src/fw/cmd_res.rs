// SPDX-License-Identifier: GPL-2.0

//! UAR, PD and memory key commands: ALLOC_UAR / DEALLOC_UAR, ALLOC_PD /
//! DEALLOC_PD, CREATE_MKEY / DESTROY_MKEY.
//!
//! A UAR page lives in the device's BAR, so ALLOC_UAR only hands out an
//! index (the page at `uar_base + index * 4 KiB` of the embedder's DMA
//! space); index 0 is never handed out. A memory key becomes a model MR:
//! PA keys map their range onto the same bus addresses, MTT keys onto
//! their pages, which the model requires to be contiguous.

use super::super::error::Error;
use super::super::mem::Platform;
use super::super::mr::{Access, MrAttr};
use super::super::prm::cmd_res::{
    AllocPdOut, AllocUarOut, CreateMkeyIn, CreateMkeyOut, DeallocPdIn, DeallocPdOut, DeallocUarIn,
    DeallocUarOut, DestroyMkeyIn, DestroyMkeyOut, ACCESS_MODE_MTT, ACCESS_MODE_PA,
};
use super::super::prm::ifc::Layout;
use super::super::table::Storage;
use super::exec::Cx;
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

/// The DMA address an MTT key's first byte maps to: the pages listed must
/// be aligned and contiguous.
fn mtt_dma_addr<B: PageStore, S: Storage, P: Platform>(
    cx: &mut Cx<'_, B, S, P>,
    i: &CreateMkeyIn,
) -> Result<u64, Reject> {
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
    let given = u64::from(i.translations_octword_actual_size) * 2;
    if given < needed {
        return Err(Reject::MttTooShort);
    }
    let bytes = usize::try_from(given * 8).map_err(|_| Reject::InputTooShort)?;
    if cx.input.len() < CreateMkeyIn::SIZE.saturating_add(bytes) {
        return Err(Reject::InputTooShort);
    }
    if needed == 0 {
        return Ok(0);
    }
    let mut first = 0;
    for k in 0..needed {
        let entry = cx.input.pas(cx.p, CreateMkeyIn::SIZE, k as usize)? & !MTT_FLAGS;
        if entry & (pgsz - 1) != 0 {
            return Err(Reject::MttMisaligned);
        }
        if k == 0 {
            first = entry;
        } else if Some(entry) != k.checked_mul(pgsz).and_then(|o| first.checked_add(o)) {
            return Err(Reject::MttNotContiguous);
        }
    }
    Ok(first | offset)
}

pub(super) fn create_mkey<B: PageStore, S: Storage, P: Platform>(cx: &mut Cx<'_, B, S, P>) -> R {
    cx.no_op_mod()?;
    let i: CreateMkeyIn = cx.read_in()?;
    let m = i.memory_key_mkey_entry;
    if m.free || m.qpn != 0xff_ffff || i.pg_access {
        return Err(Reject::UnsupportedMkey);
    }
    let (iova, length, dma_addr) = match m.access_mode() {
        ACCESS_MODE_PA if m.length64 => (m.start_addr, u64::MAX - m.start_addr, m.start_addr),
        ACCESS_MODE_PA => (m.start_addr, m.len, m.start_addr),
        ACCESS_MODE_MTT => (m.start_addr, m.len, mtt_dma_addr(cx, &i)?),
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
    let attr = MrAttr {
        pdn: m.pd,
        iova,
        length,
        dma_addr,
        access,
    };
    let key = cx
        .hca
        .create_mr_with_variant(&attr, m.mkey_7_0)
        .map_err(|e| match e {
            Error::NotFound => Reject::BadPd,
            Error::NoSpace => Reject::TableFull,
            _ => Reject::BadMkeyAccess,
        })?;
    cx.reply(&CreateMkeyOut {
        mkey_index: key >> 8,
    })
}

pub(super) fn destroy_mkey<B: PageStore, S: Storage, P: Platform>(cx: &mut Cx<'_, B, S, P>) -> R {
    cx.no_op_mod()?;
    let i: DestroyMkeyIn = cx.read_in()?;
    cx.need_out(DestroyMkeyOut::SIZE)?;
    let key = usize::try_from(i.mkey_index)
        .ok()
        .and_then(|index| {
            cx.hca
                .tables()
                .mrs
                .get(index)
                .and_then(|s| s.obj.as_ref().map(|m| m.key))
        })
        .ok_or(Reject::BadMkey)?;
    cx.hca.destroy_mr(key).map_err(|_| Reject::BadMkey)?;
    cx.reply(&DestroyMkeyOut {})
}
