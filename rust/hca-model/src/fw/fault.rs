// SPDX-License-Identifier: GPL-2.0

//! Failing on demand, the ways a ConnectX fails, so that a driver's
//! health check, command timeouts and recovery can be tested
//! ([`Firmware::inject`]).
//!
//! - [`Fault::Fatal`]: a firmware assert or an unrecoverable hardware
//!   error. The health buffer reports it (syndrome, severity, the
//!   reset-request flag, assert data), the firmware stops executing
//!   commands (posted entries stay owned by the device) and the HCA stops
//!   executing work: [`Firmware::halted`] tells the embedder to stop
//!   running the fabric and to drop doorbells. The health counter keeps
//!   moving, as it does while a ConnectX's firmware reports an error.
//! - [`Fault::Silent`]: the firmware hangs. As `Fatal`, but the health
//!   buffer stays clear and the health counter stops: only a driver that
//!   watches the counter (mlx5_core's "health compromised - reached miss
//!   count") notices.
//! - [`Fault::StuckNextCommand`]: the next command posted is never
//!   completed: its entry stays with the device for good, while the other
//!   entries, the queues and events go on. A driver must time it out and
//!   not reuse the entry.
//!
//! Nothing clears a fault but a new [`Firmware`] (a function reset). None
//! of them is a refusal: commands left with the device are counted in
//! [`FwStats::unanswered`](super::FwStats::unanswered), not logged.

use super::super::mem::DmaMemory;
use super::super::prm::cmd_queue::{CmdLayout, CMD_LAYOUT_SIZE};
use super::super::prm::init_seg::{
    HealthBuffer, HEALTH_SYNDROME_FW_INTERNAL_ERR, RFR_BIT, SEVERITY_VALID,
};
use super::pages::PageStore;
use super::Firmware;

/// `LOGLEVEL_CRIT`: the severity a fatal error reports.
const LOGLEVEL_CRIT: u8 = 2;
/// The hardware id in the health buffer: a ConnectX-5's (0x20d).
const HW_ID: u32 = 0x020d;
/// Where the model's "firmware" asserted, for the health buffer (made-up
/// but stable addresses, as a real report names code addresses).
const ASSERT_EXIT_PTR: u32 = 0x0010_2a4c;
const ASSERT_CALLRA: u32 = 0x0010_2b10;

/// A way to fail (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// A fatal error with health syndrome `synd` (0 is reported as
    /// `HEALTH_SYNDROME_FW_INTERNAL_ERR`, 0x1: a fatal error with a clear
    /// syndrome would be a silent one).
    Fatal {
        /// The health buffer's `synd`.
        synd: u8,
    },
    /// The firmware hangs without a word.
    Silent,
    /// The next command posted never completes.
    StuckNextCommand,
}

/// The faults in force ([`Firmware::faults`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// The fault that stopped the firmware (`Fatal` with the syndrome
    /// reported, or `Silent`).
    pub halt: Option<Fault>,
    /// A [`Fault::StuckNextCommand`] waits for the next command.
    pub stick_next: bool,
    /// Queue entries the device keeps for good, a bit per entry.
    pub stuck_entries: u32,
}

impl<B: PageStore> Firmware<B> {
    /// Makes the device fail as `fault` says. Returns whether it took
    /// effect: a halted firmware takes no further fault, and a
    /// [`Fault::StuckNextCommand`] already waiting is not doubled (so a
    /// fault written twice, as a copy loop may store it, counts once).
    pub fn inject(&mut self, fault: Fault) -> bool {
        if self.halted() {
            return false;
        }
        match fault {
            Fault::Fatal { synd } => {
                let synd = if synd == 0 {
                    HEALTH_SYNDROME_FW_INTERNAL_ERR
                } else {
                    synd
                };
                let report = HealthBuffer {
                    assert_var: [u32::from(synd), 0, 0, 0, 0, 0],
                    assert_exit_ptr: ASSERT_EXIT_PTR,
                    assert_callra: ASSERT_CALLRA,
                    time: (self.seg.now / 1_000_000_000) as u32,
                    fw_ver: self.seg.fw_rev_word(),
                    hw_id: HW_ID,
                    // The firmware asks for a reset (which recovers it:
                    // no cold reset needed), severity critical.
                    rfr_severity: 1 << RFR_BIT | SEVERITY_VALID | LOGLEVEL_CRIT,
                    irisc_index: 0,
                    synd,
                    ext_synd: 0,
                };
                self.seg.set_health(report);
                self.halt = Some(Fault::Fatal { synd });
            }
            Fault::Silent => {
                self.seg.stop_health_counter();
                self.halt = Some(Fault::Silent);
            }
            Fault::StuckNextCommand => {
                if self.stick_next {
                    return false;
                }
                self.stick_next = true;
            }
        }
        self.stats.faults += 1;
        true
    }

    /// Whether a fatal or silent fault stopped the firmware: it executes
    /// no command, and the embedder must not run the HCA's queues or pass
    /// it doorbells.
    pub fn halted(&self) -> bool {
        self.halt.is_some()
    }

    /// The faults in force.
    pub fn faults(&self) -> Faults {
        Faults {
            halt: self.halt,
            stick_next: self.stick_next,
            stuck_entries: self.stuck,
        }
    }

    /// The doorbell bits a fault leaves with the device: all of them on a
    /// halted firmware, and those of entries stuck for good. They are
    /// counted and taken out; the rest are returned.
    pub(super) fn screen(&mut self, bits: u32) -> u32 {
        let kept = if self.halted() {
            bits
        } else {
            bits & self.stuck
        };
        self.stats.unanswered += u64::from(kept.count_ones());
        bits & !kept
    }

    /// Whether the command posted in entry `slot` (at `addr`) is the one
    /// a [`Fault::StuckNextCommand`] waits for: a readable entry the
    /// driver handed over. It then stays with the device.
    pub(super) fn sticks<M: DmaMemory>(&mut self, m: &mut M, addr: u64, slot: u8) -> bool {
        if !self.stick_next {
            return false;
        }
        let mut entry = [0u8; CMD_LAYOUT_SIZE];
        if m.read(addr, &mut entry).is_err() || !CmdLayout::decode(&entry).ownership {
            // Not a command: `run_entry` reports it.
            return false;
        }
        self.stick_next = false;
        self.stuck |= 1 << (slot % 32);
        self.stats.unanswered += 1;
        true
    }
}
