// SPDX-License-Identifier: GPL-2.0

//! The function's asynchronous EQ, on MSI-X vector 0: it receives the
//! device's PAGE_REQUEST events, which ask for more pages (or offer some
//! back) once queues exist, and the threaded interrupt handler answers
//! them with MANAGE_PAGES through the command interface. Commands still
//! complete by polling (no command events are asked for).
//!
//! The ring is one coherent page of 64 EQEs, every owner byte set to 1 at
//! creation; the handler consumes entries whose owner bit matches the pass
//! of its consumer index, then re-arms the EQ through the EQ doorbell of
//! the driver's UAR page (BAR0 page `uar`), as mlx5_core does.

use kernel::prelude::*;
use kernel::sync::barrier::{
    dma_mb,
    Read, //
};
use kernel::sync::Arc;

use super::{
    buf::Buf,
    bus::CxBus, //
};
use crate::mlx5_cmdif::{bus::Bus, function::Function};
use crate::mlx5_prm::{
    cmd_eq::{
        event_mask,
        CreateEq,
        CreateEqIn,
        DestroyEq,
        DestroyEqIn,
        Eqc, //
    },
    doorbell::{
        uar_reg_offset,
        EqDoorbell,
        UAR_EQ_ARM_OFFSET, //
    },
    eqe::{
        Eqe,
        EQE_SIZE,
        OWNER_OFFSET, //
    },
    eqe_async::AsyncEvent,
    opcode::EventType,
    ring,
};

/// log2 of the EQ's entries: one 4 KiB page.
const LOG_EQ_SIZE: u8 = 6;
/// EQEs handled per interrupt at most (one ring).
const POLL_BUDGET: u32 = 1 << LOG_EQ_SIZE;

/// The asynchronous EQ of a function that is up.
///
/// # Invariants
///
/// `ring` holds `1 << LOG_EQ_SIZE` EQEs and is the buffer of device EQ
/// `eqn` until [`PageEq::destroy`] succeeds.
pub(super) struct PageEq {
    eqn: u8,
    /// The UAR page whose EQ doorbell arms it.
    uar: u32,
    /// Consumer index (entries consumed so far).
    ci: u32,
    /// Shared with the interrupt's hard handler, which looks whether an
    /// EQE waits ([`PageEq::peek`], [`eqe_waiting`]).
    ring: Arc<Buf>,
    /// PAGE_REQUEST events handled, and pages they moved (given minus
    /// taken back).
    pub(super) requests: u64,
    pub(super) pages_moved: i64,
}

/// Whether the device has written an EQE at consumer index `ci` of a
/// page EQ's `ring` (the owner byte only; any context).
pub(super) fn eqe_waiting(ring: &Buf, ci: u32) -> bool {
    let log = u32::from(LOG_EQ_SIZE);
    let off = ring::ring_index(ci, log) as usize * EQE_SIZE;
    ring.byte(off + OWNER_OFFSET)
        .is_ok_and(|owner| ring::eqe_valid(owner, ci, log))
}

/// Logs a command interface error (the crate's `Display`, which the log
/// macros take through `Arguments`) and turns it into an errno.
fn cmd_err(bus: &CxBus<'_>, what: &str, e: crate::mlx5_cmdif::error::Error) -> Error {
    dev_err!(bus.pdev(), "{}: {}\n", what, format_args!("{e}"));
    Error::from_errno(-e.errno())
}

impl PageEq {
    /// Creates the EQ on MSI-X vector `vector` for PAGE_REQUEST events,
    /// with its doorbell on UAR page `uar`; it is not armed yet.
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
        let input = CreateEqIn {
            eq_context_entry: Eqc {
                log_eq_size: LOG_EQ_SIZE,
                uar_page: uar,
                intr: vector,
                ..Eqc::default()
            },
            event_bitmask: event_mask(&[EventType::PageRequest]),
        };
        let cmd = function.cmdif().ok_or(ENODEV)?;
        let out = cmd
            .exec::<CreateEq, _>(bus, &input, &[ring.addr()])
            .map_err(|e| cmd_err(bus, "CREATE_EQ of the page EQ", e))?;
        Ok(Self {
            eqn: out.eq_number,
            uar,
            ci: 0,
            ring,
            requests: 0,
            pages_moved: 0,
        })
    }

    /// The EQ number.
    pub(super) fn eqn(&self) -> u8 {
        self.eqn
    }

    /// Arms the EQ at the current consumer index: the device interrupts
    /// for the next EQE (at once if one is already waiting).
    pub(super) fn arm(&self, bus: &mut CxBus<'_>) {
        let mut word = [0u8; 4];
        EqDoorbell {
            eqn: self.eqn,
            ci: self.ci,
        }
        .encode(&mut word);
        // An offset past BAR0 is reported by the bus, like any bad store.
        let off = uar_reg_offset(self.uar, UAR_EQ_ARM_OFFSET).unwrap_or(usize::MAX);
        bus.write32(off, u32::from_be_bytes(word));
    }

    /// The ring and the consumer index, for a context that cannot take
    /// the function's lock to look whether an EQE waits ([`eqe_waiting`]).
    pub(super) fn peek(&self) -> (Arc<Buf>, u32) {
        (self.ring.clone(), self.ci)
    }

    /// The EQE at the consumer index, if the device has written one:
    /// `Some(None)` for an entry whose event type this driver does not
    /// know (it is consumed all the same, so the EQ never stalls on it).
    fn next(&self) -> Option<Option<Eqe>> {
        let log = u32::from(LOG_EQ_SIZE);
        let off = ring::ring_index(self.ci, log) as usize * EQE_SIZE;
        // `off` is inside the ring by construction: the reads cannot fail.
        let owner = self.ring.byte(off + OWNER_OFFSET).ok()?;
        if !ring::eqe_valid(owner, self.ci, log) {
            return None;
        }
        // The body only after its owner byte: dma_rmb().
        dma_mb(Read);
        let mut b = [0u8; EQE_SIZE];
        self.ring.read(off, &mut b).ok()?;
        Some(Eqe::decode(&b).ok())
    }

    /// Whether the device has written an EQE at the consumer index (for
    /// a caller that holds the function's lock and answers page requests
    /// itself, [`PageEq::poll`]).
    pub(super) fn has_event(&self) -> bool {
        self.next().is_some()
    }

    /// Handles every EQE the device has written (thread context, with the
    /// function's lock held), then re-arms. Returns how many there were.
    pub(super) fn poll(&mut self, bus: &mut CxBus<'_>, function: &mut Function) -> u32 {
        let mut n = 0u32;
        // At most one ring's worth per call; if more are waiting, the arm
        // below makes the device interrupt again at once.
        while n < POLL_BUDGET {
            let Some(entry) = self.next() else {
                break;
            };
            self.ci = self.ci.wrapping_add(1);
            n += 1;
            let Some(eqe) = entry else {
                dev_warn!(bus.pdev(), "async EQE of an unknown type consumed\n");
                continue;
            };
            match AsyncEvent::from_eqe(&eqe) {
                Some(AsyncEvent::PageRequest(r)) => {
                    self.requests += 1;
                    match function.page_request(bus, r.num_pages) {
                        Ok(moved) => {
                            let moved = i64::from(moved);
                            self.pages_moved += if r.num_pages < 0 { -moved } else { moved };
                            dev_dbg!(
                                bus.pdev(),
                                "page request for {} page(s): {} moved\n",
                                r.num_pages,
                                moved
                            );
                        }
                        Err(e) => {
                            let _ = cmd_err(bus, "answering a page request", e);
                        }
                    }
                }
                _ => dev_dbg!(
                    bus.pdev(),
                    "async EQE of type {:#x} ignored\n",
                    u8::from(eqe.event_type)
                ),
            }
        }
        self.arm(bus);
        n
    }

    /// Destroys the EQ; on failure the ring stays allocated for good (the
    /// device may still write it).
    pub(super) fn destroy(self, bus: &mut CxBus<'_>, function: &mut Function) -> Result {
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
