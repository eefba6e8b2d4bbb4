// SPDX-License-Identifier: GPL-2.0

//! The initialization segment as the device shows it in BAR0: firmware
//! version and command interface revision, the `initializing` flag with its
//! two waits, the command queue address and geometry, the health buffer
//! and counter, and the free-running timer.
//!
//! A driver sees `initializing` set twice (mlx5_core's `wait_fw_init`):
//! from reset until the firmware accepts the segment's configuration, and
//! again after it writes the command queue address until the firmware has
//! loaded the queue. Both waits end by the rule of [`Readiness`]; the
//! command doorbell is honoured only after the second.

use super::super::prm::init_seg::{
    CmdqAddrLSz, FwRev, HealthBuffer, CMDIF_REV, CMDIF_REV_FW_SUB_OFFSET, CMDQ_ADDR_H_OFFSET,
    CMDQ_ADDR_L_SZ_OFFSET, CMD_EXEC_TO_OFFSET, FW_REV_OFFSET, HEALTH_BUFFER_SIZE,
    HEALTH_COUNTER_OFFSET, HEALTH_OFFSET, INITIALIZING_BIT, INITIALIZING_OFFSET,
    INTERNAL_TIMER_H_OFFSET, INTERNAL_TIMER_L_OFFSET, NIC_IFC_FULL_DRIVER,
};

/// When `initializing` clears, in each of its two phases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// After the driver has read `initializing` this many times in the
    /// phase (0: at once).
    AfterReads(u32),
    /// This many nanoseconds of the device clock ([`super::Firmware::set_time`])
    /// after the phase began.
    AfterTime(u64),
    /// Never: the firmware hangs in initialisation (a driver must give up
    /// and report it).
    Never,
}

/// Where the `initializing` flag stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// From reset: waiting to accept the segment's configuration.
    PreInit { reads: u32, since: u64 },
    /// The queue address is written: loading the queue.
    Loading { reads: u32, since: u64 },
    /// Commands are accepted.
    Ready,
}

/// The registers and their side effects.
#[derive(Clone, Copy, Debug)]
pub(super) struct InitSeg {
    fw_rev: FwRev,
    ready: Readiness,
    log_sz: u8,
    log_stride: u8,
    phase: Phase,
    cmdq_h: u32,
    cmdq_l: u32,
    nic_interface: u8,
    /// The current time, nanoseconds.
    pub(super) now: u64,
    health_tick_ns: u64,
    /// Time of the last health counter tick.
    last_tick: u64,
    health_counter: u32,
    /// The health counter stands still (a hung firmware).
    counter_stopped: bool,
    health: HealthBuffer,
}

/// What a register write asks of the firmware.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WriteEffect {
    /// Nothing beyond the register value.
    None,
    /// Command doorbell bits.
    Doorbell(u32),
    /// The command queue address was changed while it must not be.
    CmdqMoved,
}

impl InitSeg {
    pub(super) fn new(
        fw_rev: FwRev,
        ready: Readiness,
        log_sz: u8,
        log_stride: u8,
        health_tick_ns: u64,
    ) -> Self {
        InitSeg {
            fw_rev,
            ready,
            log_sz,
            log_stride,
            phase: Phase::PreInit { reads: 0, since: 0 },
            cmdq_h: 0,
            cmdq_l: 0,
            nic_interface: NIC_IFC_FULL_DRIVER,
            now: 0,
            health_tick_ns,
            last_tick: 0,
            health_counter: 0,
            counter_stopped: false,
            health: HealthBuffer::default(),
        }
    }

    /// Whether the phase that began at `since` with `reads` reads is over.
    fn phase_done(&self, reads: u32, since: u64) -> bool {
        match self.ready {
            Readiness::AfterReads(n) => reads >= n,
            Readiness::AfterTime(ns) => self.now.saturating_sub(since) >= ns,
            Readiness::Never => false,
        }
    }

    /// Whether `initializing` bit 31 reads as set right now.
    fn initializing(&self) -> bool {
        match self.phase {
            Phase::PreInit { reads, since } | Phase::Loading { reads, since } => {
                !self.phase_done(reads, since)
            }
            Phase::Ready => false,
        }
    }

    /// The command queue's bus address and geometry, once the queue is
    /// loaded (the second `initializing` wait is over).
    pub(super) fn cmdq(&self) -> Option<(u64, u8, u8)> {
        let loaded = match self.phase {
            Phase::Loading { reads, since } => self.phase_done(reads, since),
            Phase::Ready => true,
            Phase::PreInit { .. } => false,
        };
        let addr = u64::from(self.cmdq_h) << 32 | u64::from(self.cmdq_l & 0xffff_f000);
        (loaded && addr != 0).then_some((addr, self.log_sz, self.log_stride))
    }

    /// Advances the clock; the health counter ticks once per
    /// `health_tick_ns`.
    pub(super) fn set_time(&mut self, now: u64) {
        if now <= self.now {
            return;
        }
        self.now = now;
        if self.counter_stopped {
            return;
        }
        if let Some(ticks) = now
            .saturating_sub(self.last_tick)
            .checked_div(self.health_tick_ns)
        {
            if ticks != 0 {
                self.health_counter = self.health_counter.wrapping_add(ticks as u32);
                self.last_tick = self
                    .last_tick
                    .saturating_add(ticks.saturating_mul(self.health_tick_ns));
            }
        }
    }

    /// The firmware did something: the health counter moves (unless it
    /// stands still).
    pub(super) fn heartbeat(&mut self) {
        if !self.counter_stopped {
            self.health_counter = self.health_counter.wrapping_add(1);
        }
    }

    /// Sets the health syndrome (0: healthy), as firmware does after a
    /// fatal error.
    pub(super) fn set_health_syndrome(&mut self, synd: u8) {
        self.health.synd = synd;
    }

    /// Fills the whole health buffer (a fatal error's report).
    pub(super) fn set_health(&mut self, health: HealthBuffer) {
        self.health = health;
    }

    /// The health counter stops for good: a hung firmware no longer
    /// updates it.
    pub(super) fn stop_health_counter(&mut self) {
        self.counter_stopped = true;
    }

    /// The `fw_rev` register's value.
    pub(super) fn fw_rev_word(&self) -> u32 {
        self.fw_rev.encode(CMDIF_REV).0
    }

    /// A 32-bit register read at byte `offset` of the segment.
    pub(super) fn read(&mut self, offset: usize) -> u32 {
        match offset {
            FW_REV_OFFSET => self.fw_rev.encode(CMDIF_REV).0,
            CMDIF_REV_FW_SUB_OFFSET => self.fw_rev.encode(CMDIF_REV).1,
            CMDQ_ADDR_H_OFFSET => self.cmdq_h,
            CMDQ_ADDR_L_SZ_OFFSET => CmdqAddrLSz {
                addr_l: self.cmdq_l,
                nic_interface: self.nic_interface,
                log_sz: self.log_sz,
                log_stride: self.log_stride,
            }
            .encode(),
            INITIALIZING_OFFSET => {
                let set = self.initializing();
                match &mut self.phase {
                    Phase::PreInit { reads, .. } | Phase::Loading { reads, .. } => {
                        *reads = reads.saturating_add(1);
                    }
                    Phase::Ready => {}
                }
                u32::from(set) << INITIALIZING_BIT
            }
            o if (HEALTH_OFFSET..HEALTH_OFFSET + HEALTH_BUFFER_SIZE).contains(&o) => {
                let mut b = [0u8; HEALTH_BUFFER_SIZE];
                self.health.encode(&mut b);
                let i = (o - HEALTH_OFFSET) & !3;
                b.get(i..i + 4)
                    .and_then(|w| w.try_into().ok())
                    .map_or(0, u32::from_be_bytes)
            }
            // mlx5_core reads the command timeout in milliseconds.
            CMD_EXEC_TO_OFFSET => 60_000,
            INTERNAL_TIMER_H_OFFSET => (self.now >> 32) as u32,
            INTERNAL_TIMER_L_OFFSET => self.now as u32,
            HEALTH_COUNTER_OFFSET => self.health_counter,
            _ => 0,
        }
    }

    /// A 32-bit register write at byte `offset`. `enabled` says whether the
    /// HCA is enabled (the queue address may not move then).
    pub(super) fn write(&mut self, offset: usize, value: u32, enabled: bool) -> WriteEffect {
        match offset {
            CMDQ_ADDR_H_OFFSET => {
                if enabled && value != self.cmdq_h {
                    return WriteEffect::CmdqMoved;
                }
                self.cmdq_h = value;
                WriteEffect::None
            }
            CMDQ_ADDR_L_SZ_OFFSET => {
                let v = CmdqAddrLSz::decode(value);
                let moved = v.addr_l != self.cmdq_l & 0xffff_f000;
                if enabled && moved {
                    return WriteEffect::CmdqMoved;
                }
                self.nic_interface = v.nic_interface;
                if moved || self.phase != Phase::Ready {
                    self.cmdq_l = v.addr_l;
                    // Loading starts once the pre-init wait is over; a
                    // driver that wrote early waits the whole phase.
                    self.phase = Phase::Loading {
                        reads: 0,
                        since: self.now,
                    };
                }
                WriteEffect::None
            }
            super::super::prm::init_seg::CMD_DBELL_OFFSET => WriteEffect::Doorbell(value),
            _ => WriteEffect::None,
        }
    }

    /// Marks the queue loaded once the loading wait is over (called before
    /// commands run, so later reads of `initializing` stay clear).
    pub(super) fn mark_ready(&mut self) {
        if let Phase::Loading { reads, since } = self.phase {
            if self.phase_done(reads, since) {
                self.phase = Phase::Ready;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::prm::init_seg::{initializing, CMD_DBELL_OFFSET};
    use super::*;

    fn seg(ready: Readiness) -> InitSeg {
        InitSeg::new(
            FwRev {
                major: 16,
                minor: 35,
                subminor: 1012,
            },
            ready,
            5,
            6,
            1000,
        )
    }

    #[test]
    fn two_waits_by_reads() {
        let mut s = seg(Readiness::AfterReads(2));
        assert_eq!(s.read(CMDIF_REV_FW_SUB_OFFSET) >> 16, 5);
        assert!(initializing(s.read(INITIALIZING_OFFSET)));
        assert!(initializing(s.read(INITIALIZING_OFFSET)));
        assert!(!initializing(s.read(INITIALIZING_OFFSET)));
        assert_eq!(s.read(CMDQ_ADDR_L_SZ_OFFSET), 0x56);
        assert_eq!(s.cmdq(), None);
        assert_eq!(s.write(CMDQ_ADDR_H_OFFSET, 1, false), WriteEffect::None);
        assert_eq!(
            s.write(CMDQ_ADDR_L_SZ_OFFSET, 0x2000_0000, false),
            WriteEffect::None
        );
        assert!(initializing(s.read(INITIALIZING_OFFSET)));
        assert_eq!(s.cmdq(), None);
        assert!(initializing(s.read(INITIALIZING_OFFSET)));
        assert!(!initializing(s.read(INITIALIZING_OFFSET)));
        assert_eq!(s.cmdq(), Some((0x1_2000_0000, 5, 6)));
        s.mark_ready();
        assert_eq!(s.read(CMDQ_ADDR_L_SZ_OFFSET), 0x2000_0056);
        assert_eq!(s.write(CMD_DBELL_OFFSET, 4, true), WriteEffect::Doorbell(4));
        assert_eq!(
            s.write(CMDQ_ADDR_L_SZ_OFFSET, 0x3000_0000, true),
            WriteEffect::CmdqMoved
        );
        // mlx5_core's NIC state request rewrites the same address.
        assert_eq!(
            s.write(CMDQ_ADDR_L_SZ_OFFSET, 0x2000_0700, true),
            WriteEffect::None
        );
        assert_eq!(s.read(CMDQ_ADDR_L_SZ_OFFSET), 0x2000_0756);
    }

    #[test]
    fn by_time_and_never() {
        let mut s = seg(Readiness::AfterTime(5000));
        assert!(initializing(s.read(INITIALIZING_OFFSET)));
        s.set_time(4999);
        assert!(initializing(s.read(INITIALIZING_OFFSET)));
        s.set_time(5000);
        assert!(!initializing(s.read(INITIALIZING_OFFSET)));
        assert_eq!(s.read(HEALTH_COUNTER_OFFSET), 5);
        s.heartbeat();
        assert_eq!(s.read(HEALTH_COUNTER_OFFSET), 6);
        assert_eq!(s.read(INTERNAL_TIMER_L_OFFSET), 5000);
        let mut n = seg(Readiness::Never);
        for _ in 0..100 {
            assert!(initializing(n.read(INITIALIZING_OFFSET)));
        }
        n.set_health_syndrome(0x10);
        assert_eq!(n.read(HEALTH_OFFSET + 60) >> 16 & 0xff, 0x10);
    }

    #[test]
    fn a_stopped_health_counter_stands_still() {
        let mut s = seg(Readiness::AfterReads(0));
        s.set_time(3000);
        s.heartbeat();
        assert_eq!(s.read(HEALTH_COUNTER_OFFSET), 4);
        s.stop_health_counter();
        s.set_time(10_000);
        s.heartbeat();
        assert_eq!(s.read(HEALTH_COUNTER_OFFSET), 4);
        // The clock itself goes on.
        assert_eq!(s.read(INTERNAL_TIMER_L_OFFSET), 10_000);
    }
}
