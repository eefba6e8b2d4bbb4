// SPDX-License-Identifier: GPL-2.0

//! The life-cycle commands: ENABLE_HCA / DISABLE_HCA, QUERY_ISSI /
//! SET_ISSI, QUERY_PAGES / MANAGE_PAGES, QUERY_HCA_CAP / SET_HCA_CAP,
//! INIT_HCA / TEARDOWN_HCA.

use super::super::mem::Platform;
use super::super::prm::cmd_hca::{
    DisableHcaIn, DisableHcaOut, EnableHcaIn, EnableHcaOut, InitHcaIn, InitHcaOut, ManagePagesIn,
    ManagePagesOut, QueryIssiOut, QueryPagesIn, QueryPagesOut, SetIssiIn, SetIssiOut,
    TeardownHcaIn, TeardownHcaOut, ISSI, MANAGE_PAGES_ALLOCATION_FAIL,
    MANAGE_PAGES_ALLOCATION_SUCCESS, MANAGE_PAGES_HCA_RETURN_PAGES, QUERY_PAGES_BOOT,
    QUERY_PAGES_INIT, QUERY_PAGES_REGULAR, TEARDOWN_GRACEFUL_CLOSE,
};
use super::super::prm::hca_cap::{
    HcaCap, QueryHcaCapIn, QueryHcaCapOut, SetHcaCapIn, SetHcaCapOut, CAPABILITY_OFFSET,
    CAP_GENERAL,
};
use super::super::prm::ifc::{Layout, PAS_ENTRY_SIZE};
use super::super::table::Storage;
use super::caps::{initial_caps, max_caps, set_caps};
use super::exec::Cx;
use super::pages::{any_queue_range, any_ring_page, intersects, stamp, PageStore, PAGE_SIZE};
use super::reject::Reject;
use super::HcaState;

type R = Result<(), Reject>;

/// The boot pages are in.
fn boot_pages_given<B: PageStore, S, P>(cx: &Cx<'_, B, S, P>) -> R {
    if cx.fw.state == HcaState::Enabled && cx.fw.held() < cx.fw.cfg.boot_pages {
        Err(Reject::BootPagesMissing)
    } else {
        Ok(())
    }
}

pub(super) fn enable_hca<B: PageStore, S: Storage, P: Platform>(cx: &mut Cx<'_, B, S, P>) -> R {
    cx.no_op_mod()?;
    let i: EnableHcaIn = cx.read_in()?;
    if i.embedded_cpu_function || i.function_id_type || i.function_id != 0 {
        return Err(Reject::OtherFunction);
    }
    cx.need_out(EnableHcaOut::SIZE)?;
    let fw = &mut *cx.fw;
    let id = cx.hca.id();
    let caps = *cx.hca.caps();
    fw.max_caps = max_caps(&caps, &cx.hca.tables(), fw.cfg.uars, id);
    fw.cur_caps = initial_caps(&fw.max_caps);
    fw.state = HcaState::Enabled;
    fw.issi = 0;
    cx.reply(&EnableHcaOut {})
}

pub(super) fn disable_hca<B: PageStore, S: Storage, P: Platform>(cx: &mut Cx<'_, B, S, P>) -> R {
    cx.no_op_mod()?;
    let i: DisableHcaIn = cx.read_in()?;
    if i.embedded_cpu_function || i.function_id_type || i.function_id != 0 {
        return Err(Reject::OtherFunction);
    }
    cx.need_out(DisableHcaOut::SIZE)?;
    if cx.fw.pages.count() != 0 {
        return Err(Reject::PagesOutstanding);
    }
    let fw = &mut *cx.fw;
    fw.state = HcaState::Disabled;
    fw.issi = 0;
    fw.trim = 0;
    fw.counts.requested = 0;
    fw.counts.asked_back = 0;
    fw.cmd_eqn = None;
    fw.page_eqn = None;
    fw.port.eqs = [0; 4];
    cx.reply(&DisableHcaOut {})
}

pub(super) fn query_issi<B: PageStore, S: Storage, P: Platform>(cx: &mut Cx<'_, B, S, P>) -> R {
    cx.no_op_mod()?;
    cx.need_out(QueryIssiOut::SIZE)?;
    let out = QueryIssiOut {
        current_issi: cx.fw.issi,
        supported_issi_dw0: 1 << ISSI,
    };
    cx.reply(&out)
}

pub(super) fn set_issi<B: PageStore, S: Storage, P: Platform>(cx: &mut Cx<'_, B, S, P>) -> R {
    cx.no_op_mod()?;
    let i: SetIssiIn = cx.read_in()?;
    if i.current_issi != ISSI {
        return Err(Reject::UnsupportedIssi);
    }
    cx.need_out(SetIssiOut::SIZE)?;
    cx.fw.issi = ISSI;
    cx.reply(&SetIssiOut {})
}

pub(super) fn query_pages<B: PageStore, S: Storage, P: Platform>(cx: &mut Cx<'_, B, S, P>) -> R {
    let i: QueryPagesIn = cx.read_in()?;
    if i.embedded_cpu_function || i.function_id != 0 {
        return Err(Reject::OtherFunction);
    }
    let fw = &*cx.fw;
    let boot = fw.cfg.boot_pages;
    let init = fw.init_need();
    // What the device wants to hold after the driver answers.
    let target = match (fw.state, i.op_mod) {
        (_, op)
            if !matches!(
                op,
                QUERY_PAGES_BOOT | QUERY_PAGES_INIT | QUERY_PAGES_REGULAR
            ) =>
        {
            return Err(Reject::BadOpMod);
        }
        (HcaState::Enabled, QUERY_PAGES_BOOT) => boot,
        (HcaState::Enabled, _) => {
            boot_pages_given(cx)?;
            init
        }
        (HcaState::Initialized, _) => fw.need(),
        _ => 0,
    };
    cx.need_out(QueryPagesOut::SIZE)?;
    let num = i64::from(target) - i64::from(cx.fw.held());
    let out = QueryPagesOut {
        embedded_cpu_function: false,
        function_id: 0,
        num_pages: num.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32,
    };
    cx.reply(&out)
}

pub(super) fn manage_pages<B: PageStore, S: Storage, P: Platform>(cx: &mut Cx<'_, B, S, P>) -> R {
    let i: ManagePagesIn = cx.read_in()?;
    if i.embedded_cpu_function || i.function_id != 0 {
        return Err(Reject::OtherFunction);
    }
    match i.op_mod {
        MANAGE_PAGES_ALLOCATION_FAIL => {
            cx.need_out(ManagePagesOut::SIZE)?;
            let fw = &mut *cx.fw;
            fw.counts.alloc_failures = fw.counts.alloc_failures.wrapping_add(1);
            fw.counts.requested = 0;
            cx.reply(&ManagePagesOut {
                output_num_entries: 0,
            })
        }
        MANAGE_PAGES_ALLOCATION_SUCCESS => give_pages(cx, i.input_num_entries),
        MANAGE_PAGES_HCA_RETURN_PAGES => take_pages(cx, i.input_num_entries),
        _ => Err(Reject::BadOpMod),
    }
}

/// MANAGE_PAGES give: checks every page, then takes all or none.
fn give_pages<B: PageStore, S: Storage, P: Platform>(cx: &mut Cx<'_, B, S, P>, n: u32) -> R {
    if cx.fw.state == HcaState::TornDown {
        return Err(Reject::GiveAfterTeardown);
    }
    if n == 0 {
        return Err(Reject::NoPages);
    }
    let n = n as usize;
    let inlen = n
        .checked_mul(PAS_ENTRY_SIZE)
        .and_then(|l| l.checked_add(ManagePagesIn::SIZE))
        .ok_or(Reject::InputTooShort)?;
    if cx.input.len() < inlen {
        return Err(Reject::InputTooShort);
    }
    cx.need_out(ManagePagesOut::SIZE)?;
    // Read the list into the free slots after the held pages, check it
    // there, and commit only if every page passes.
    {
        let fw = &mut *cx.fw;
        let staged = fw.pages.stage(n).ok_or(Reject::PageTableFull)?;
        for (k, slot) in staged.iter_mut().enumerate() {
            *slot = cx.input.pas(cx.p, ManagePagesIn::SIZE, k)?;
        }
        if staged.iter().any(|&a| a & (PAGE_SIZE - 1) != 0) {
            return Err(Reject::PageMisaligned);
        }
        staged.sort_unstable();
        if staged.windows(2).any(|w| w[0] == w[1]) {
            return Err(Reject::PageDuplicate);
        }
    }
    let fw = &*cx.fw;
    let staged = fw.pages.staged(n);
    if staged.iter().any(|&a| fw.pages.contains(a)) {
        return Err(Reject::PageAlreadyOwned);
    }
    // The command queue, the UAR area and every queue buffer the model
    // knows must stay clear of the pages.
    let overlaps = |start: u64, len: u64| {
        let i = staged.partition_point(|&p| p.saturating_add(PAGE_SIZE) <= start);
        staged
            .get(i)
            .is_some_and(|&p| intersects(p, PAGE_SIZE, start, len))
    };
    let cmdq = fw.seg.cmdq().map_or(0, |q| q.0);
    let uar_area = u64::from(fw.cfg.uars).saturating_mul(PAGE_SIZE);
    if overlaps(cmdq, if cmdq == 0 { 0 } else { PAGE_SIZE })
        || overlaps(fw.cfg.uar_base, uar_area)
        || any_queue_range(&cx.hca.tables(), overlaps)
        || any_ring_page(&cx.hca.tables(), cx.p, overlaps)
    {
        return Err(Reject::PageOverlapsQueue);
    }
    if fw.cfg.stamp_pages {
        for k in 0..n {
            let Some(&addr) = cx.fw.pages.staged(n).get(k) else {
                break;
            };
            if !stamp(cx.p, addr) {
                return Err(Reject::PageUnreachable);
            }
        }
    }
    let fw = &mut *cx.fw;
    fw.pages.commit(n);
    let n32 = u32::try_from(n).unwrap_or(u32::MAX);
    fw.counts.given_total = fw.counts.given_total.wrapping_add(n as u64);
    fw.counts.requested = fw.counts.requested.saturating_sub(n32);
    cx.reply(&ManagePagesOut {
        output_num_entries: 0,
    })
}

/// MANAGE_PAGES take: returns up to `n` of the pages the device does not
/// need, the highest of those not in use (a page in use is part of the
/// need, so there are always enough of them).
fn take_pages<B: PageStore, S: Storage, P: Platform>(cx: &mut Cx<'_, B, S, P>, n: u32) -> R {
    let room = (n as usize)
        .checked_mul(PAS_ENTRY_SIZE)
        .and_then(|l| l.checked_add(ManagePagesOut::SIZE))
        .ok_or(Reject::OutputTooShort)?;
    cx.need_out(room)?;
    let fw = &*cx.fw;
    let free = u32::try_from(fw.pages.free_count()).unwrap_or(u32::MAX);
    let k = fw.held().saturating_sub(fw.need()).min(n).min(free);
    cx.reply(&ManagePagesOut {
        output_num_entries: k,
    })?;
    // The header is 16 bytes: the list starts in the first mailbox.
    for addr in cx.fw.pages.top_free(k as usize) {
        cx.out.put(cx.p, &addr.to_be_bytes())?;
    }
    let fw = &mut *cx.fw;
    fw.pages.pop_free(k as usize);
    fw.counts.returned_total = fw.counts.returned_total.wrapping_add(u64::from(k));
    fw.counts.asked_back = fw.counts.asked_back.saturating_sub(k);
    Ok(())
}

pub(super) fn query_hca_cap<B: PageStore, S: Storage, P: Platform>(cx: &mut Cx<'_, B, S, P>) -> R {
    let i: QueryHcaCapIn = cx.read_in()?;
    if i.other_function || i.function_id != 0 {
        return Err(Reject::OtherFunction);
    }
    if i.op_mod >> 1 != CAP_GENERAL {
        return Err(Reject::UnsupportedCapType);
    }
    boot_pages_given(cx)?;
    cx.need_out(QueryHcaCapOut::SIZE)?;
    let cap = if i.op_mod & 1 == 0 {
        cx.fw.max_caps
    } else {
        cx.fw.cur_caps
    };
    // The output header (status OK) is all zero; the capability union
    // follows it.
    let mut b = [0u8; CAPABILITY_OFFSET + HcaCap::SIZE];
    let block = b
        .get_mut(CAPABILITY_OFFSET..)
        .ok_or(Reject::OutputTooShort)?;
    cap.encode(block).map_err(|_| Reject::OutputTooShort)?;
    // Header (status OK) and the modelled part of the union; `finish`
    // zero-fills the rest of the 4 KiB.
    cx.out.put(cx.p, &b)
}

pub(super) fn set_hca_cap<B: PageStore, S: Storage, P: Platform>(cx: &mut Cx<'_, B, S, P>) -> R {
    if cx.op_mod >> 1 != CAP_GENERAL {
        return Err(Reject::UnsupportedCapType);
    }
    if cx.op_mod & 1 != 0 {
        return Err(Reject::BadOpMod);
    }
    if cx.input.len() < SetHcaCapIn::SIZE {
        return Err(Reject::InputTooShort);
    }
    let mut head = [0u8; 16];
    cx.input.read(cx.p, 0, &mut head)?;
    // `other_function` is bit 0x40, `function_id` bits 0x50..0x60.
    if head[8] & 0x80 != 0 || head[10..12] != [0, 0] {
        return Err(Reject::OtherFunction);
    }
    boot_pages_given(cx)?;
    cx.need_out(SetHcaCapOut::SIZE)?;
    let mut block = [0u8; HcaCap::SIZE];
    cx.input.read(cx.p, CAPABILITY_OFFSET, &mut block)?;
    let new = HcaCap::decode(&block).map_err(|_| Reject::InputTooShort)?;
    let fw = &mut *cx.fw;
    set_caps(&mut fw.cur_caps, &fw.max_caps, &new)?;
    cx.reply(&SetHcaCapOut {})
}

pub(super) fn init_hca<B: PageStore, S: Storage, P: Platform>(cx: &mut Cx<'_, B, S, P>) -> R {
    cx.no_op_mod()?;
    let _: InitHcaIn = cx.read_in()?;
    let fw = &*cx.fw;
    if fw.held() < fw.init_need() {
        return Err(Reject::InitPagesMissing);
    }
    cx.need_out(InitHcaOut::SIZE)?;
    let fw = &mut *cx.fw;
    fw.state = HcaState::Initialized;
    fw.trim = 0;
    fw.queues = 0;
    // The port's GID 0 is the default GID from now on (see `port`).
    cx.fw.install_default_gid(cx.hca);
    cx.reply(&InitHcaOut {})
}

pub(super) fn teardown_hca<B: PageStore, S: Storage, P: Platform>(cx: &mut Cx<'_, B, S, P>) -> R {
    cx.no_op_mod()?;
    let i: TeardownHcaIn = cx.read_in()?;
    if i.profile != TEARDOWN_GRACEFUL_CLOSE {
        return Err(Reject::UnsupportedTeardown);
    }
    cx.need_out(TeardownHcaOut::SIZE)?;
    let t = cx.hca.tables();
    let alive = t.pds.iter().any(|s| s.is_used())
        || t.mrs.iter().any(|s| s.is_used())
        || t.eqs.iter().any(|s| s.is_used())
        || t.cqs.iter().any(|s| s.is_used())
        || t.qps.iter().any(|s| s.is_used());
    if alive || cx.fw.uars != 0 {
        return Err(Reject::ObjectsAlive);
    }
    let fw = &mut *cx.fw;
    // Every memory key is gone, so every table page is already free; a
    // device forgets its tables with everything else all the same.
    fw.pages.release_all();
    fw.state = HcaState::TornDown;
    fw.trim = 0;
    fw.queues = 0;
    fw.counts.requested = 0;
    fw.counts.asked_back = 0;
    fw.cmd_eqn = None;
    fw.page_eqn = None;
    fw.port.eqs = [0; 4];
    cx.reply(&TeardownHcaOut { state: false })
}
