// SPDX-License-Identifier: GPL-2.0

//! The test register page of the function (see `testreg.rs` for the
//! registers and command words): a guest test injects the firmware's
//! faults (`Firmware::inject`) and changes the port
//! (`Firmware::set_port_state`, `set_lid`, `set_sm_lid`) here, and reads
//! back what happened. Valid command words are not stray writes and never
//! fail the run; what a fault then does to the driver's commands is
//! counted apart (`FnStats::unanswered`, `halted_doorbells`).

use hca_model::fw::port::unicast_lid;
use hca_model::fw::Fault;

use super::{instance, Function};
use crate::card::Cx;
use crate::log::{debug, info};
use crate::testreg::{
    status, Command, Store, REG_COMMAND, REG_COMMANDS, REG_FAULTS, REG_FLRS, REG_PORT, REG_RESETS,
    REG_UNANSWERED, STATUS_FATAL, STATUS_PORT_UP, STATUS_SILENT, STATUS_STUCK, TEST_PAGE_OFFSET,
};

impl Function {
    /// A read of the test page at byte `o`: little-endian registers.
    pub(super) fn test_read(&mut self, cx: &mut Cx<'_>, o: usize, data: &mut [u8]) {
        let end = o.saturating_add(data.len());
        let mut dword = o & !3;
        while dword < end {
            let bytes = self.test_register(cx, dword).to_le_bytes();
            for (i, b) in bytes.iter().enumerate() {
                if let Some(d) = (dword + i).checked_sub(o).and_then(|j| data.get_mut(j)) {
                    *d = *b;
                }
            }
            dword += 4;
        }
    }

    /// The value of the test register at byte `reg` (0 where none is).
    fn test_register(&mut self, cx: &mut Cx<'_>, reg: usize) -> u32 {
        let low = |v: u64| v as u32;
        match reg {
            REG_COMMAND => {
                let f = self.fw.faults();
                let mut flags = 0;
                match f.halt {
                    Some(Fault::Fatal { .. }) => flags |= STATUS_FATAL,
                    Some(_) => flags |= STATUS_SILENT,
                    None => {}
                }
                if f.stick_next || f.stuck_entries != 0 {
                    flags |= STATUS_STUCK;
                }
                if self.port_info(cx).is_some_and(|p| p.up) {
                    flags |= STATUS_PORT_UP;
                }
                status(self.stats.faults, self.stats.resets, flags)
            }
            REG_PORT => self
                .port_info(cx)
                .map_or(0, |p| u32::from(p.lid) | u32::from(p.sm_lid) << 16),
            REG_COMMANDS => low(self.stats.test_commands),
            REG_FAULTS => low(self.stats.faults),
            REG_RESETS => low(self.stats.resets),
            REG_FLRS => low(self.stats.flrs),
            REG_UNANSWERED => low(self.unanswered()),
            _ => 0,
        }
    }

    fn port_info(&mut self, cx: &mut Cx<'_>) -> Option<hca_model::fw::PortInfo> {
        let hca = hca!(self, cx)?;
        Some(self.fw.port_info(hca))
    }

    /// Commands a fault left with the device since the process started.
    pub(crate) fn unanswered(&self) -> u64 {
        self.stats.unanswered + self.fw.stats().unanswered
    }

    /// A store of `data` at byte `o` of the test page.
    pub(super) fn test_write(&mut self, cx: &mut Cx<'_>, o: usize, data: &[u8]) {
        let at = TEST_PAGE_OFFSET + o as u64;
        match self.test_latch.store(o, data) {
            Store::Partial => {}
            Store::Stray => self.stray(at, data, "no test register there"),
            Store::Word(word) => self.test_command(cx, at, data, word),
        }
    }

    fn test_command(&mut self, cx: &mut Cx<'_>, at: u64, data: &[u8], word: u32) {
        let cmd = match Command::decode(word) {
            Some(Command::Lid(l) | Command::SmLid(l)) if !unicast_lid(l) => None,
            c => c,
        };
        let Some(cmd) = cmd else {
            self.stray(
                at,
                data,
                "not a test-register command (or not a unicast LID)",
            );
            return;
        };
        self.stats.test_commands += 1;
        match cmd {
            Command::Nop => {}
            Command::Fatal(synd) => self.inject(cx, Fault::Fatal { synd }),
            Command::Silent => self.inject(cx, Fault::Silent),
            Command::StuckNext => self.inject(cx, Fault::StuckNextCommand),
            Command::Port(_) | Command::Lid(_) | Command::SmLid(_) => self.port_command(cx, cmd),
        }
        self.check_firmware();
    }

    fn inject(&mut self, cx: &mut Cx<'_>, fault: Fault) {
        if !self.fw.inject(fault) {
            debug!("test register: {fault:?} changes nothing (the device already failed so)");
            return;
        }
        self.stats.faults += 1;
        if self.fw.halted() {
            // Nothing held runs any more: the function is dead until
            // reset, its instance out of the fabric.
            self.bf.clear();
            self.err_watch_at = None;
            self.sync_parking(cx);
        }
        let f = self.fw.faults().halt.unwrap_or(fault);
        info!("test register: {f:?} injected; only a reset clears it");
    }

    fn port_command(&mut self, cx: &mut Cx<'_>, cmd: Command) {
        let Some(hca) = hca!(self, cx) else {
            return;
        };
        let changed = match cmd {
            Command::Port(up) => self.fw.set_port_state(&mut self.bus, hca, up),
            Command::Lid(lid) => self.fw.set_lid(&mut self.bus, hca, lid),
            Command::SmLid(lid) => self.fw.set_sm_lid(&mut self.bus, hca, lid),
            _ => false,
        };
        if changed {
            self.stats.port_changes += 1;
            info!("test register: {cmd:?}, port change posted");
        } else {
            debug!("test register: {cmd:?} changes nothing");
        }
    }

    /// The summary line of faults and resets.
    pub(super) fn faults_summary(&mut self) -> String {
        let s = self.stats;
        let halt = match self.fw.faults().halt {
            Some(f) => format!("halted by {f:?}"),
            None => "running".to_string(),
        };
        format!(
            "faults: {} test-register commands, {} faults injected, {} port changes; {} commands \
             left with the device, {} doorbells dropped while halted, {} on UAR pages of \
             before a reset; {} resets ({} FLRs); firmware {halt}",
            s.test_commands,
            s.faults,
            s.port_changes,
            self.unanswered(),
            s.halted_doorbells,
            s.stale_doorbells,
            s.resets,
            s.flrs
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::One;
    use super::super::*;
    use crate::testreg::*;
    use mlx5_prm::init_seg::{CMD_DBELL_OFFSET, HEALTH_COUNTER_OFFSET, HEALTH_OFFSET};

    fn read32be(f: &mut One, offset: u64) -> u32 {
        let mut b = [0u8; 4];
        f.read(offset, &mut b);
        u32::from_be_bytes(b)
    }

    /// A native little-endian store, as Python's struct.pack('<I', w)
    /// into an mmap of resource0.
    fn command(f: &mut One, word: u32) {
        f.write(TEST_PAGE_OFFSET, &word.to_le_bytes());
    }

    fn reg(f: &mut One, reg: usize) -> u32 {
        let mut b = [0u8; 4];
        f.read(TEST_PAGE_OFFSET + reg as u64, &mut b);
        u32::from_le_bytes(b)
    }

    #[test]
    fn the_status_word_of_a_healthy_function() {
        let mut f = One::new(Settings::DEFAULT);
        assert_eq!(reg(&mut f, 0), STATUS_PORT_UP);
        // LID 1 (instance 0), SM LID 1.
        assert_eq!(reg(&mut f, REG_PORT), 1 << 16 | 1);
        assert_eq!(reg(&mut f, 0x800), 0, "no register there");
        command(&mut f, 0);
        assert_eq!(reg(&mut f, REG_COMMANDS), 1);
        assert!(!f.failed());
    }

    #[test]
    fn a_fatal_error_reports_and_stops_the_function() {
        let mut f = One::new(Settings::DEFAULT);
        // Fatal with syndrome 0x8 (HW_FATAL_ERR), written twice as
        // memcpy may: it counts once.
        command(&mut f, 0x0801);
        command(&mut f, 0x0801);
        assert_eq!(reg(&mut f, REG_COMMANDS), 2);
        assert_eq!(reg(&mut f, REG_FAULTS), 1);
        assert_eq!(reg(&mut f, 0), STATUS_FATAL | STATUS_PORT_UP | 1);
        // The health buffer's synd (byte 61) and the counter that goes on.
        assert_eq!(read32be(&mut f, HEALTH_OFFSET as u64 + 60) >> 16 & 0xff, 8);
        let c = read32be(&mut f, HEALTH_COUNTER_OFFSET as u64);
        std::thread::sleep(Duration::from_millis(3));
        assert!(read32be(&mut f, HEALTH_COUNTER_OFFSET as u64) > c);
        // Doorbells and command doorbells go nowhere, and are no error.
        f.write(2 * 4096 + 0x20, &[0, 0, 0, 0, 0, 0, 0, 5]);
        f.write(3 * 4096 + 0x800, &[0; 8]);
        f.write(CMD_DBELL_OFFSET as u64, &1u32.to_be_bytes());
        assert_eq!(f.f().stats.halted_doorbells, 2);
        assert_eq!(f.f().stats.doorbell_errors, 0);
        assert_eq!(reg(&mut f, REG_UNANSWERED), 1);
        assert_eq!(f.next_timeout(), None, "a halted function sleeps");
        assert!(!f.failed(), "{:?}", f.f().stats);
    }

    #[test]
    fn a_silent_hang_stops_the_health_counter() {
        let mut f = One::new(Settings::DEFAULT);
        command(&mut f, 2);
        assert_eq!(reg(&mut f, 0) & STATUS_SILENT, STATUS_SILENT);
        let c = read32be(&mut f, HEALTH_COUNTER_OFFSET as u64);
        std::thread::sleep(Duration::from_millis(3));
        assert_eq!(read32be(&mut f, HEALTH_COUNTER_OFFSET as u64), c);
        assert_eq!(
            read32be(&mut f, HEALTH_OFFSET as u64 + 60),
            0,
            "no syndrome"
        );
        // BAR0 still answers.
        assert_eq!(read32be(&mut f, 0), 35 << 16 | 16);
        assert!(!f.failed());
    }

    #[test]
    fn a_stuck_command_and_port_changes() {
        let mut f = One::new(Settings::DEFAULT);
        command(&mut f, 3);
        assert_eq!(reg(&mut f, 0) & STATUS_STUCK, STATUS_STUCK);
        assert!(f.f().fw.faults().stick_next);
        // The port goes down (no EQ yet: nothing to post), a byte at a
        // time, then up, then gets LID 0x42 and the SM moves to LID 7.
        for (i, b) in 4u32.to_le_bytes().iter().enumerate() {
            f.write(TEST_PAGE_OFFSET + i as u64, &[*b]);
        }
        assert_eq!(reg(&mut f, 0) & STATUS_PORT_UP, 0);
        command(&mut f, 5);
        command(&mut f, 0x0042_0006);
        command(&mut f, 0x0007_0007);
        assert_eq!(reg(&mut f, REG_PORT), 7 << 16 | 0x42);
        assert_eq!(f.f().stats.port_changes, 4);
        // Repeats change nothing.
        command(&mut f, 5);
        command(&mut f, 0x0042_0006);
        assert_eq!(f.f().stats.port_changes, 4);
        assert!(!f.failed(), "{:?}", f.f().stats);
    }

    #[test]
    fn nonsense_on_the_test_page_fails_the_run() {
        for (at, bytes) in [
            (0, 9u32.to_le_bytes()),
            // LID 0 and a multicast LID.
            (0, 6u32.to_le_bytes()),
            (0, 0xc000_0006u32.to_le_bytes()),
            (0x10, 1u32.to_le_bytes()),
        ] {
            let mut f = One::new(Settings::DEFAULT);
            f.write(TEST_PAGE_OFFSET + at, &bytes);
            assert_eq!(f.f().stats.stray_writes, 1, "{at:#x} {bytes:?}");
            assert_eq!(f.f().stats.test_commands, 0);
            assert!(f.failed());
        }
    }

    #[test]
    fn a_reset_clears_every_fault() {
        let mut f = One::new(Settings::DEFAULT);
        command(&mut f, 0x0001);
        command(&mut f, 0x0042_0006);
        f.write(CMD_DBELL_OFFSET as u64, &1u32.to_be_bytes());
        assert!(f.f().fw.halted());
        f.flr();
        assert!(!f.f().fw.halted());
        assert_eq!(f.f().fw.faults(), hca_model::fw::Faults::default());
        // A fresh port, and the counts survive.
        assert_eq!(reg(&mut f, 0), STATUS_PORT_UP | 1 << 8 | 1);
        assert_eq!(reg(&mut f, REG_PORT), 1 << 16 | 1);
        assert_eq!(reg(&mut f, REG_RESETS), 1);
        assert_eq!(reg(&mut f, REG_FLRS), 1);
        assert_eq!(reg(&mut f, REG_UNANSWERED), 1);
        assert_eq!(read32be(&mut f, HEALTH_OFFSET as u64 + 60), 0);
        // Faults can be injected again.
        command(&mut f, 2);
        assert_eq!(reg(&mut f, REG_FAULTS), 2);
        assert!(f.summary().last().unwrap().contains("halted by Silent"));
        assert!(!f.failed());
    }
}
