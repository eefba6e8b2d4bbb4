// SPDX-License-Identifier: GPL-2.0

//! EQ and CQ commands (CREATE_EQ / DESTROY_EQ, CREATE_CQ / DESTROY_CQ) and
//! the page-list checks every queue buffer goes through.
//!
//! A queue whose page list describes contiguous memory (entry `k` is entry
//! 0 plus `k` pages: the kernel's coherent buffers) is read and written as
//! one DMA range and costs no device memory. Otherwise (a CQ or QP in a
//! process's pinned pages) the firmware copies the list into pages the
//! driver lent it, as for a scattered CREATE_MKEY, and the ring translates
//! through it ([`super::super::ring`]); DESTROY frees the table. An EQ must
//! be contiguous: only the kernel makes EQs, and an EQ written from the
//! interrupt path should not depend on a table a driver could have lent
//! back.

use super::super::error::Error;
use super::super::mem::Platform;
use super::super::mr::PageList;
use super::super::prm::cmd_cq::{CreateCqIn, CreateCqOut, DestroyCqIn, DestroyCqOut, CQE_SZ_64};
use super::super::prm::cmd_eq::{CreateEqIn, CreateEqOut, DestroyEqIn, DestroyEqOut};
use super::super::prm::ifc::Layout;
use super::super::prm::opcode::EventType;
use super::super::ring::RingPages;
use super::super::table::{get, Storage};
use super::super::{cq::CqAttr, eq::EqAttr};
use super::cmd_res::{build_table, free_table, uar_allocated};
use super::exec::Cx;
use super::pages::PageStore;
use super::reject::Reject;

type R = Result<(), Reject>;

/// Where a queue's buffer is described in the command.
pub(super) struct BufferDesc {
    /// Offset of the page list in the input.
    pub(super) pas_offset: usize,
    /// log2 of the page size minus 12.
    pub(super) log_page_size: u8,
    /// Offset of the buffer in its first page, in 64-byte units.
    pub(super) page_offset: u8,
    /// Buffer size in bytes.
    pub(super) size: u64,
}

/// A queue buffer as checked: where its byte 0 is, and its table if its
/// pages are scattered (then `start` is byte 0's offset in the first page).
#[derive(Clone, Copy, Debug)]
pub(super) struct QueueBuf {
    pub(super) start: u64,
    pub(super) pages: Option<RingPages>,
}

/// Checks a queue buffer's page list: every page aligned to the page size
/// and outside the pages the device holds. A contiguous list becomes a
/// linear buffer (0 for an empty one); a scattered one is copied into a
/// table if `scattered_ok`, else refused with
/// [`Reject::QueueNotContiguous`]. A table is freed with
/// [`free_queue_table`].
pub(super) fn queue_buffer<B: PageStore, S: Storage, P: Platform>(
    cx: &mut Cx<'_, B, S, P>,
    d: &BufferDesc,
    scattered_ok: bool,
) -> Result<QueueBuf, Reject> {
    let pgsz = 4096u64
        .checked_shl(u32::from(d.log_page_size))
        .filter(|&s| s != 0 && s.trailing_zeros() < 63)
        .ok_or(Reject::BadQueuePageSize)?;
    let linear = |start| QueueBuf { start, pages: None };
    if d.size == 0 {
        return Ok(linear(0));
    }
    let offset = u64::from(d.page_offset) * 64;
    if offset >= pgsz {
        return Err(Reject::QueuePageMisaligned);
    }
    let span = offset.checked_add(d.size).ok_or(Reject::QueueTooLarge)?;
    let pages = span.div_ceil(pgsz);
    let list = usize::try_from(pages * 8).map_err(|_| Reject::QueuePagesTooShort)?;
    if cx.input.len() < d.pas_offset.saturating_add(list) {
        return Err(Reject::QueuePagesTooShort);
    }
    let mut first = 0;
    let mut contiguous = true;
    for k in 0..pages {
        let addr = cx.input.pas(cx.p, d.pas_offset, k as usize)?;
        if addr & (pgsz - 1) != 0 {
            return Err(Reject::QueuePageMisaligned);
        }
        if addr.checked_add(pgsz).is_none() {
            return Err(Reject::QueueNotContiguous);
        }
        if cx.fw.pages.overlaps(addr, pgsz) {
            return Err(Reject::QueueOverlapsPages);
        }
        if k == 0 {
            first = addr;
        } else if Some(addr) != k.checked_mul(pgsz).and_then(|o| first.checked_add(o)) {
            contiguous = false;
        }
    }
    if contiguous {
        let start = first
            .checked_add(offset)
            .filter(|s| s.checked_add(d.size).is_some())
            .ok_or(Reject::QueueNotContiguous)?;
        return Ok(linear(start));
    }
    if !scattered_ok {
        return Err(Reject::QueueNotContiguous);
    }
    let log_page = 12 + d.log_page_size;
    let t = build_table(cx, d.pas_offset, pages, log_page)?;
    Ok(QueueBuf {
        start: offset,
        pages: Some(RingPages {
            table: t.mtt,
            log_page,
            indirect: t.indirect,
            count: t.max_pages,
        }),
    })
}

/// Frees the table [`queue_buffer`] made for a scattered queue.
pub(super) fn free_queue_table<B: PageStore, S: Storage, P: Platform>(
    cx: &mut Cx<'_, B, S, P>,
    pages: Option<RingPages>,
) {
    if let Some(r) = pages {
        let list = PageList {
            max_pages: r.count,
            valid: true,
            mtt: r.table,
            log_page: r.log_page,
            umr: false,
            indirect: r.indirect,
        };
        free_table(cx, &list);
    }
}

/// Checks a doorbell record address.
pub(super) fn doorbell_record<B: PageStore, S, P>(
    cx: &Cx<'_, B, S, P>,
    addr: u64,
) -> Result<u64, Reject> {
    if addr & 7 != 0 {
        return Err(Reject::DbrMisaligned);
    }
    if cx.fw.pages.overlaps(addr, 8) {
        return Err(Reject::QueueOverlapsPages);
    }
    Ok(addr)
}

/// The UAR page's DMA address, if the index is allocated.
pub(super) fn uar<B: PageStore, S, P>(cx: &Cx<'_, B, S, P>, index: u32) -> Result<u64, Reject> {
    if uar_allocated(cx.fw.uars, index) {
        Ok(cx.fw.uar_addr(index))
    } else {
        Err(Reject::BadUar)
    }
}

/// The event types the model raises on its async EQ (QP and CQ events).
const MODEL_ASYNC: [EventType; 11] = [
    EventType::PathMig,
    EventType::CommEst,
    EventType::SqDrained,
    EventType::CqError,
    EventType::WqCatasError,
    EventType::PathMigFailed,
    EventType::WqInvalReqError,
    EventType::WqAccessError,
    EventType::SrqCatasError,
    EventType::SrqLastWqe,
    EventType::SrqRqLimit,
];

fn has(mask: &[u64; 4], t: EventType) -> bool {
    let t = u8::from(t);
    mask.get(usize::from(t / 64))
        .is_some_and(|w| w >> (t % 64) & 1 != 0)
}

pub(super) fn create_eq<B: PageStore, S: Storage, P: Platform>(cx: &mut Cx<'_, B, S, P>) -> R {
    cx.no_op_mod()?;
    let i: CreateEqIn = cx.read_in()?;
    let c = &i.eq_context_entry;
    if c.oi || c.st != 0 {
        return Err(Reject::UnsupportedQueueMode);
    }
    if c.log_eq_size > cx.hca.caps().max_log_eq_size {
        return Err(Reject::QueueTooLarge);
    }
    let uar_addr = uar(cx, c.uar_page)?;
    if c.intr >= cx.fw.cfg.msix_vectors {
        return Err(Reject::BadVector);
    }
    let cmd = has(&i.event_bitmask, EventType::Cmd);
    let page = has(&i.event_bitmask, EventType::PageRequest);
    let async_events = MODEL_ASYNC.iter().any(|&t| has(&i.event_bitmask, t));
    if (cmd && cx.fw.cmd_eqn.is_some())
        || (page && cx.fw.page_eqn.is_some())
        || (async_events && cx.hca.has_async_eq())
    {
        return Err(Reject::EventTaken);
    }
    let buf_addr = queue_buffer(
        cx,
        &BufferDesc {
            pas_offset: CreateEqIn::SIZE,
            log_page_size: c.log_page_size,
            page_offset: c.page_offset,
            size: 64u64 << c.log_eq_size,
        },
        false,
    )?
    .start;
    cx.need_out(CreateEqOut::SIZE)?;
    let attr = EqAttr {
        log_size: c.log_eq_size,
        buf_addr,
        uar_addr,
        vector: c.intr,
        async_events,
    };
    let eqn = cx.hca.create_eq(&attr).map_err(|e| match e {
        Error::NoSpace => Reject::TableFull,
        _ => Reject::QueueTooLarge,
    })?;
    let fw = &mut *cx.fw;
    if cmd {
        fw.cmd_eqn = Some(eqn);
    }
    if page {
        fw.page_eqn = Some(eqn);
    }
    // Port changes go to every EQ that asks for them.
    fw.port
        .route(eqn, has(&i.event_bitmask, EventType::PortChange));
    fw.queues = fw.queues.saturating_add(1);
    cx.reply(&CreateEqOut { eq_number: eqn })
}

pub(super) fn destroy_eq<B: PageStore, S: Storage, P: Platform>(cx: &mut Cx<'_, B, S, P>) -> R {
    cx.no_op_mod()?;
    let i: DestroyEqIn = cx.read_in()?;
    cx.need_out(DestroyEqOut::SIZE)?;
    cx.hca.destroy_eq(i.eq_number).map_err(|e| match e {
        Error::Busy => Reject::EqBusy,
        _ => Reject::BadEq,
    })?;
    let fw = &mut *cx.fw;
    if fw.cmd_eqn == Some(i.eq_number) {
        fw.cmd_eqn = None;
    }
    if fw.page_eqn == Some(i.eq_number) {
        fw.page_eqn = None;
    }
    fw.port.route(i.eq_number, false);
    fw.queues = fw.queues.saturating_sub(1);
    cx.reply(&DestroyEqOut {})
}

pub(super) fn create_cq<B: PageStore, S: Storage, P: Platform>(cx: &mut Cx<'_, B, S, P>) -> R {
    cx.no_op_mod()?;
    let i: CreateCqIn = cx.read_in()?;
    let c = &i.cq_context;
    if c.cqe_sz != CQE_SZ_64 || c.cc || c.oi || c.st != 0 {
        return Err(Reject::UnsupportedQueueMode);
    }
    if c.log_cq_size > cx.hca.caps().max_log_cq_size {
        return Err(Reject::QueueTooLarge);
    }
    let uar_addr = uar(cx, c.uar_page)?;
    let eqn = u8::try_from(c.c_eqn_or_apu_element).map_err(|_| Reject::BadEq)?;
    if cx.hca.query_eq(eqn).is_none() {
        return Err(Reject::BadEq);
    }
    let dbr_addr = doorbell_record(cx, c.dbr_addr)?;
    cx.need_out(CreateCqOut::SIZE)?;
    let buf = queue_buffer(
        cx,
        &BufferDesc {
            pas_offset: CreateCqIn::SIZE,
            log_page_size: c.log_page_size,
            page_offset: c.page_offset,
            size: 64u64 << c.log_cq_size,
        },
        true,
    )?;
    let attr = CqAttr {
        log_size: c.log_cq_size,
        buf_addr: buf.start,
        buf_pages: buf.pages,
        dbr_addr,
        eqn,
        uar_addr,
    };
    let cqn = match cx.hca.create_cq(&attr) {
        Ok(cqn) => cqn,
        Err(e) => {
            free_queue_table(cx, buf.pages);
            return Err(match e {
                Error::NoSpace => Reject::TableFull,
                Error::NotFound => Reject::BadEq,
                _ => Reject::QueueTooLarge,
            });
        }
    };
    cx.fw.queues = cx.fw.queues.saturating_add(1);
    cx.reply(&CreateCqOut { cqn })
}

pub(super) fn destroy_cq<B: PageStore, S: Storage, P: Platform>(cx: &mut Cx<'_, B, S, P>) -> R {
    cx.no_op_mod()?;
    let i: DestroyCqIn = cx.read_in()?;
    cx.need_out(DestroyCqOut::SIZE)?;
    let table = get(cx.hca.tables().cqs, i.cqn).and_then(|c| c.attr.buf_pages);
    cx.hca.destroy_cq(i.cqn).map_err(|e| match e {
        Error::Busy => Reject::CqBusy,
        _ => Reject::BadCq,
    })?;
    free_queue_table(cx, table);
    cx.fw.queues = cx.fw.queues.saturating_sub(1);
    cx.reply(&DestroyCqOut {})
}
