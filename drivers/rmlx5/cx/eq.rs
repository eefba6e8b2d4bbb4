// SPDX-License-Identifier: GPL-2.0

//! The function's asynchronous EQ, on MSI-X vector 0: it receives the
//! device's PAGE_REQUEST events, which ask for more pages (or offer some
//! back) once queues exist, and, in `cx_cmd_mode=2`, its command
//! completion events. Vector 0's hard handler consumes it and re-arms it
//! (`cx/events.rs`); the threaded handler answers the page requests with
//! MANAGE_PAGES through the command interface ([`PageEq::answer`]).
//!
//! The ring is 256 EQEs in four coherent pages, every owner byte set to 1
//! at creation; the EQ is armed through the EQ doorbell of the driver's UAR
//! page (BAR0 page `uar`), as mlx5_core does.

use kernel::prelude::*;
use kernel::sync::Arc;

use super::{
    bar::CxBar,
    buf::Buf,
    bus::CxBus,
    events::{
        mode,
        CmdEvents,
        LOG_EQ_SIZE,
        MODE_LANES_EVENTS, //
    },
};
use crate::mlx5_cmdif::function::Function;
use crate::mlx5_prm::{
    cmd_eq::{
        event_mask,
        CreateEq,
        CreateEqIn,
        DestroyEq,
        DestroyEqIn,
        Eqc, //
    },
    eqe::{
        EQE_SIZE,
        OWNER_OFFSET, //
    },
    opcode::EventType,
    ring,
};

/// The asynchronous EQ of a function that is up.
///
/// # Invariants
///
/// `ring` holds `1 << LOG_EQ_SIZE` EQEs and is the buffer of device EQ
/// `eqn` until [`PageEq::destroy`] succeeds.
pub(super) struct PageEq {
    eqn: u8,
    ring: Arc<Buf>,
    /// Its consumer, in the hard handler.
    events: Arc<CmdEvents>,
    /// Whether it asked for command events.
    cmd_events: bool,
    /// PAGE_REQUEST events handled, and pages they moved (given minus
    /// taken back).
    pub(super) requests: u64,
    pub(super) pages_moved: i64,
}

/// Logs a command interface error (the crate's `Display`, which the log
/// macros take through `Arguments`) and turns it into an errno.
fn cmd_err(bus: &CxBus<'_>, what: &str, e: crate::mlx5_cmdif::error::Error) -> Error {
    dev_err!(bus.pdev(), "{}: {}\n", what, format_args!("{e}"));
    Error::from_errno(-e.errno())
}

impl PageEq {
    /// Creates the EQ on MSI-X vector `vector` for PAGE_REQUEST events
    /// (and command events in `cx_cmd_mode=2`), with its doorbell on UAR
    /// page `uar`, and hands it to its consumer; it is not armed yet
    /// ([`PageEq::arm`]).
    pub(super) fn create(
        bus: &mut CxBus<'_>,
        function: &mut Function,
        uar: u32,
        vector: u16,
    ) -> Result<Self> {
        let ring = Arc::new(bus.alloc_buf(EQE_SIZE << LOG_EQ_SIZE)?, GFP_KERNEL)?;
        for i in 0..1usize << LOG_EQ_SIZE {
            ring.write(i * EQE_SIZE + OWNER_OFFSET, &[ring::EQE_INIT_OWNER])?;
        }
        let cmd_events = mode() == MODE_LANES_EVENTS;
        let types: &[EventType] = if cmd_events {
            &[EventType::PageRequest, EventType::Cmd]
        } else {
            &[EventType::PageRequest]
        };
        let input = CreateEqIn {
            eq_context_entry: Eqc {
                log_eq_size: LOG_EQ_SIZE,
                uar_page: uar,
                intr: vector,
                ..Eqc::default()
            },
            event_bitmask: event_mask(types),
        };
        // The ring's 4 KiB pages, one contiguous coherent range.
        let mut pas = [0u64; (EQE_SIZE << LOG_EQ_SIZE) / 4096];
        for (i, p) in pas.iter_mut().enumerate() {
            *p = ring.addr() + (i as u64) * 4096;
        }
        let cmd = function.cmdif().ok_or(ENODEV)?;
        let out = cmd
            .exec::<CreateEq, _>(bus, &input, &pas)
            .map_err(|e| cmd_err(bus, "CREATE_EQ of the page EQ", e))?;
        let events = bus.events().clone();
        events.install(ring.clone(), out.eq_number, uar);
        Ok(Self {
            eqn: out.eq_number,
            ring,
            events,
            cmd_events,
            requests: 0,
            pages_moved: 0,
        })
    }

    /// The EQ number.
    pub(super) fn eqn(&self) -> u8 {
        self.eqn
    }

    /// Whether the EQ takes command events.
    pub(super) fn cmd_events(&self) -> bool {
        self.cmd_events
    }

    /// Arms the EQ at its consumer index: the device interrupts for the
    /// next EQE (at once if one is already waiting).
    pub(super) fn arm(&self, bar: &CxBar) {
        self.events.arm(bar);
    }

    /// Whether the hard handler queued page requests.
    pub(super) fn has_requests(&self) -> bool {
        self.events.has_requests()
    }

    /// Answers the page requests the hard handler queued (thread context,
    /// with the function's lock held). Returns how many there were.
    pub(super) fn answer(&mut self, bus: &mut CxBus<'_>, function: &mut Function) -> u32 {
        let (requests, n) = self.events.take_requests();
        for &num_pages in requests.iter().take(n) {
            self.requests += 1;
            match function.page_request(bus, num_pages) {
                Ok(moved) => {
                    let moved = i64::from(moved);
                    self.pages_moved += if num_pages < 0 { -moved } else { moved };
                    dev_dbg!(
                        bus.pdev(),
                        "page request for {} page(s): {} moved\n",
                        num_pages,
                        moved
                    );
                }
                Err(e) => {
                    let _ = cmd_err(bus, "answering a page request", e);
                }
            }
        }
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Destroys the EQ (its consumer lets go first); on failure the ring
    /// stays allocated for good (the device may still write it).
    pub(super) fn destroy(self, bus: &mut CxBus<'_>, function: &mut Function) -> Result {
        self.events.uninstall();
        let Some(cmd) = function.cmdif() else {
            core::mem::forget(self.ring);
            return Err(ENODEV);
        };
        match cmd.exec::<DestroyEq, _>(
            bus,
            &DestroyEqIn {
                eq_number: self.eqn,
            },
            &[],
        ) {
            Ok(_) => Ok(()),
            Err(e) => {
                core::mem::forget(self.ring);
                Err(cmd_err(bus, "DESTROY_EQ of the page EQ", e))
            }
        }
    }
}
