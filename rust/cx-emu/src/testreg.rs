// SPDX-License-Identifier: GPL-2.0

//! The test register page: a 4 KiB page of BAR0 at [`TEST_PAGE_OFFSET`]
//! that only the emulator has, through which a test in the guest makes
//! the device fail or changes its port (a ConnectX has nothing there).
//!
//! Registers are 32-bit and little-endian: the guest writes them with a
//! native store through an mmap of the function's `resource0`
//! (`struct.pack('<I', word)` in Python). They are not big-endian like
//! the initialization segment's, since no driver reads them.
//!
//! | offset | read | write |
//! |---|---|---|
//! | 0x00 | [`status`] word | command word (below) |
//! | 0x04 | port: LID 15:0, SM LID 31:16 | |
//! | 0x08 | command words taken (all, repeats too) | |
//! | 0x0c | faults injected | |
//! | 0x10 | function resets (DEVICE_RESET and FLR) | |
//! | 0x14 | FLRs | |
//! | 0x18 | commands left with the device by a fault | |
//!
//! A command word: bits 7:0 the command, bits 15:8 and 31:16 its
//! arguments.
//!
//! | command | what |
//! |---|---|
//! | 0 | nothing |
//! | 1 | fatal error, health syndrome bits 15:8 (0: 0x1) |
//! | 2 | silent hang |
//! | 3 | the next command posted is never completed |
//! | 4 | port down (PORT_CHANGE DOWN) |
//! | 5 | port up (PORT_CHANGE ACTIVE) |
//! | 6 | the port's LID becomes bits 31:16 (PORT_CHANGE LID) |
//! | 7 | the SM's LID becomes bits 31:16 (PORT_CHANGE CLIENT_REREG) |
//!
//! A command runs when the store that writes byte 3 of the word arrives;
//! narrower stores before it fill in the other bytes, so a copy done a
//! byte at a time works as well. Every command is idempotent (a second
//! fault while halted, a port already down, the LID it has: nothing
//! happens), because a copy routine may store the same word twice
//! (glibc's `memcpy` of 4 bytes does). Any other command number, a LID
//! that is not unicast, or a store to the page beyond the command word is
//! a stray write: it fails the run, as a test that writes nonsense should.

/// Where the test register page starts in BAR0: past the UAR area
/// (512 KiB), the MSI-X table and PBA (1 MiB), inside the 32 MiB BAR.
pub(crate) const TEST_PAGE_OFFSET: u64 = 0x1f0_0000;
/// Its size.
pub(crate) const TEST_PAGE_SIZE: u64 = 4096;

/// Offsets of the registers in the page.
pub(crate) const REG_COMMAND: usize = 0x00;
pub(crate) const REG_PORT: usize = 0x04;
pub(crate) const REG_COMMANDS: usize = 0x08;
pub(crate) const REG_FAULTS: usize = 0x0c;
pub(crate) const REG_RESETS: usize = 0x10;
pub(crate) const REG_FLRS: usize = 0x14;
pub(crate) const REG_UNANSWERED: usize = 0x18;

/// [`status`] bit: a fatal error stopped the firmware.
pub(crate) const STATUS_FATAL: u32 = 1 << 16;
/// [`status`] bit: the firmware hangs.
pub(crate) const STATUS_SILENT: u32 = 1 << 17;
/// [`status`] bit: a command is stuck, or the next one will be.
pub(crate) const STATUS_STUCK: u32 = 1 << 18;
/// [`status`] bit: the port is up.
pub(crate) const STATUS_PORT_UP: u32 = 1 << 19;

/// A command of the command word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Command {
    /// 0: nothing.
    Nop,
    /// 1: a fatal error with this health syndrome (0: the firmware's
    /// default).
    Fatal(u8),
    /// 2: a silent hang.
    Silent,
    /// 3: the next command posted is never completed.
    StuckNext,
    /// 4 (`false`) and 5 (`true`): the port goes down or up.
    Port(bool),
    /// 6: the port's LID.
    Lid(u16),
    /// 7: the SM's LID.
    SmLid(u16),
}

impl Command {
    /// The command of a command word; `None` for an unknown command.
    pub(crate) fn decode(word: u32) -> Option<Self> {
        let arg8 = (word >> 8) as u8;
        let arg16 = (word >> 16) as u16;
        Some(match word & 0xff {
            0 => Command::Nop,
            1 => Command::Fatal(arg8),
            2 => Command::Silent,
            3 => Command::StuckNext,
            4 => Command::Port(false),
            5 => Command::Port(true),
            6 => Command::Lid(arg16),
            7 => Command::SmLid(arg16),
            _ => return None,
        })
    }
}

/// The word at register 0: faults injected (mod 256) in bits 7:0,
/// function resets (mod 256) in bits 15:8, and the `STATUS_*` bits.
pub(crate) fn status(faults: u64, resets: u64, flags: u32) -> u32 {
    (faults & 0xff) as u32 | ((resets & 0xff) as u32) << 8 | flags
}

/// The command word being assembled from the stores to it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Latch {
    bytes: [u8; 4],
}

/// What a store to the page amounts to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Store {
    /// Part of the command word; it runs with the store of byte 3.
    Partial,
    /// The command word is complete: this one.
    Word(u32),
    /// A store that reaches beyond the command word.
    Stray,
}

impl Latch {
    /// Takes a store of `data` at byte `offset` of the page.
    pub(crate) fn store(&mut self, offset: usize, data: &[u8]) -> Store {
        let end = offset.saturating_add(data.len());
        if end > 4 || data.is_empty() {
            return Store::Stray;
        }
        for (i, b) in data.iter().enumerate() {
            if let Some(x) = self.bytes.get_mut(offset + i) {
                *x = *b;
            }
        }
        if end == 4 {
            Store::Word(u32::from_le_bytes(self.bytes))
        } else {
            Store::Partial
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_words() {
        assert_eq!(Command::decode(0), Some(Command::Nop));
        assert_eq!(Command::decode(1), Some(Command::Fatal(0)));
        assert_eq!(Command::decode(0x0801), Some(Command::Fatal(8)));
        assert_eq!(Command::decode(2), Some(Command::Silent));
        assert_eq!(Command::decode(3), Some(Command::StuckNext));
        assert_eq!(Command::decode(4), Some(Command::Port(false)));
        assert_eq!(Command::decode(5), Some(Command::Port(true)));
        assert_eq!(Command::decode(0x0042_0006), Some(Command::Lid(0x42)));
        assert_eq!(Command::decode(0x0007_0007), Some(Command::SmLid(7)));
        assert_eq!(Command::decode(8), None);
        assert_eq!(Command::decode(0xff), None);
    }

    #[test]
    fn the_page_fits_the_bar_and_misses_everything_else() {
        const {
            assert!(TEST_PAGE_OFFSET >= crate::bar0::MSIX_PBA_OFFSET + 4096);
            assert!(TEST_PAGE_OFFSET + TEST_PAGE_SIZE <= crate::bar0::BAR0_SIZE);
            assert!(TEST_PAGE_OFFSET >= 128 * 4096, "past every UAR");
        }
    }

    #[test]
    fn stores_assemble_the_word() {
        let mut l = Latch::default();
        // Python's struct.pack('<I', 0x00420006) stored whole.
        assert_eq!(
            l.store(0, &0x0042_0006u32.to_le_bytes()),
            Store::Word(0x0042_0006)
        );
        // A byte at a time: it runs with byte 3.
        let w = 0x0000_0801u32.to_le_bytes();
        assert_eq!(l.store(0, &w[..1]), Store::Partial);
        assert_eq!(l.store(1, &w[1..2]), Store::Partial);
        assert_eq!(l.store(2, &w[2..]), Store::Word(0x0801));
        // Past the word.
        assert_eq!(l.store(4, &[0; 4]), Store::Stray);
        assert_eq!(l.store(0, &[0; 8]), Store::Stray);
        assert_eq!(l.store(0x800, &[0; 4]), Store::Stray);
    }

    #[test]
    fn status_word() {
        assert_eq!(status(3, 2, STATUS_PORT_UP), 0x0008_0203);
        assert_eq!(
            status(0x101, 0x100, STATUS_FATAL | STATUS_STUCK),
            0x0005_0001
        );
    }
}
