// SPDX-License-Identifier: GPL-2.0

//! The function's PCI configuration space: a ConnectX-5 (15b3:1017,
//! Ethernet/InfiniBand controller class 0x0207) with one 64-bit
//! prefetchable memory BAR, an MSI-X capability and an Advanced Features
//! capability that offers function-level reset.
//!
//! QEMU's vfio-user client reads the whole space at start-up and
//! virtualises much of it itself (BAR addresses, the MSI-X table, the
//! enable bits); the writes it passes on are kept here according to each
//! register's writable bits, so that a read gives back what was written,
//! as on a device.
//!
//! # Function-level reset
//!
//! QEMU passes every configuration write of the guest on to the server
//! and does not act on an FLR itself (see Documentation/cx-emu.md,
//! "Resets"), so the function recognises it here: a write that sets
//! Initiate FLR in the Advanced Features control register is
//! [`ConfigEffect::FunctionLevelReset`]. The server then resets the
//! function and this space ([`ConfigSpace::reset`]) before it answers the
//! write, so the FLR is complete when the guest's write returns: the bit
//! reads back 0, and Transactions Pending is always 0 (the device holds
//! no DMA across messages). The Advanced Features capability (PCI's ECN
//! for conventional functions) is what Linux's `af_flr` reset method
//! looks for, on QEMU's `q35` root bus and on `pc`'s conventional bus
//! alike; a PCIe capability would be rewritten by QEMU on either.

use crate::bar0::{BAR0_SIZE, MSIX_PBA_OFFSET, MSIX_TABLE_OFFSET};

/// Mellanox's PCI vendor ID.
pub(crate) const VENDOR_ID: u16 = 0x15b3;
/// ConnectX-5 (the ID mlx5_core binds as CX-5).
pub(crate) const DEVICE_ID: u16 = 0x1017;
/// Subsystem ID: a ConnectX-5 adapter (the board, not the chip).
pub(crate) const SUBSYSTEM_ID: u16 = 0x0008;
/// Class code: network controller (0x02), InfiniBand controller (0x07).
pub(crate) const CLASS_CODE: u32 = 0x02_07_00;
/// Bytes of the configuration space (conventional PCI).
pub(crate) const CONFIG_SIZE: usize = 256;
/// Where the MSI-X capability sits.
pub(crate) const MSIX_CAP: usize = 0x40;
/// Where the Advanced Features capability sits, after MSI-X's 12 bytes.
pub(crate) const AF_CAP: usize = 0x50;
/// Advanced Features: capability bits (`PCI_AF_CAP`).
pub(crate) const AF_CAPS: usize = AF_CAP + 3;
/// Advanced Features: control (`PCI_AF_CTRL`); bit 0 initiates an FLR.
pub(crate) const AF_CTRL: usize = AF_CAP + 4;
/// Advanced Features: status (`PCI_AF_STATUS`); bit 0 transactions
/// pending.
pub(crate) const AF_STATUS: usize = AF_CAP + 5;

const COMMAND: usize = 0x04;
/// Command register: Bus Master Enable.
const COMMAND_BUS_MASTER: u8 = 1 << 2;
const STATUS: usize = 0x06;
const CLASS_REV: usize = 0x08;
const BAR0: usize = 0x10;
const BAR1: usize = 0x14;
const SUBSYSTEM_VENDOR_ID: usize = 0x2c;
const CAP_PTR: usize = 0x34;
const INTERRUPT_LINE: usize = 0x3c;
const INTERRUPT_PIN: usize = 0x3d;
const STATUS_CAP_LIST: u16 = 1 << 4;
const CAP_ID_MSIX: u8 = 0x11;
/// `PCI_CAP_ID_AF`.
const CAP_ID_AF: u8 = 0x13;
/// The Advanced Features capability's length (`PCI_AF_LENGTH` holds it).
const AF_LENGTH: u8 = 6;
/// `PCI_AF_CAP_TP | PCI_AF_CAP_FLR`: the function reports transactions
/// pending and supports FLR (Linux offers `af_flr` only with both).
const AF_CAP_TP_FLR: u8 = 0x03;
/// `PCI_AF_CTRL_FLR`.
const AF_CTRL_FLR: u8 = 0x01;
/// BAR type bits: memory, 64-bit (0b10 << 1), prefetchable (1 << 3).
const BAR_MEM64_PREFETCH: u32 = 0b1100;
/// Command bits a driver may set: I/O and memory decoding, bus master,
/// parity and SERR reporting, INTx disable.
const COMMAND_WRITABLE: u16 = 0x0547;
/// MSI-X message control: enable (15) and function mask (14).
const MSIX_CONTROL_WRITABLE: u16 = 0xc000;

/// The configuration space: its bytes and which bits of each a write may
/// change.
#[derive(Clone, Debug)]
pub(crate) struct ConfigSpace {
    bytes: [u8; CONFIG_SIZE],
    writable: [u8; CONFIG_SIZE],
    msix_vectors: u16,
}

/// An access outside the configuration space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OutOfRange;

/// What a configuration write asks of the function beyond its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConfigEffect {
    /// Nothing.
    None,
    /// Initiate FLR was set: reset the function (and this space).
    FunctionLevelReset,
}

impl ConfigSpace {
    /// The ConnectX-5 function with `msix_vectors` MSI-X vectors (1 to
    /// 2048), whose table and PBA are in BAR0 at [`MSIX_TABLE_OFFSET`]
    /// and [`MSIX_PBA_OFFSET`].
    pub(crate) fn connectx5(msix_vectors: u16) -> Self {
        let mut c = ConfigSpace {
            bytes: [0; CONFIG_SIZE],
            writable: [0; CONFIG_SIZE],
            msix_vectors,
        };
        c.put16(0x00, VENDOR_ID);
        c.put16(0x02, DEVICE_ID);
        c.put16(STATUS, STATUS_CAP_LIST);
        // Revision 0, then the class code in the upper three bytes.
        c.put32(CLASS_REV, CLASS_CODE << 8);
        c.put32(BAR0, BAR_MEM64_PREFETCH);
        c.put16(SUBSYSTEM_VENDOR_ID, VENDOR_ID);
        c.put16(SUBSYSTEM_VENDOR_ID + 2, SUBSYSTEM_ID);
        c.bytes[CAP_PTR] = MSIX_CAP as u8;
        c.bytes[INTERRUPT_PIN] = 1;
        // MSI-X: table size N-1; table and PBA offsets with BIR 0 (BAR0).
        c.bytes[MSIX_CAP] = CAP_ID_MSIX;
        c.bytes[MSIX_CAP + 1] = AF_CAP as u8;
        c.put16(MSIX_CAP + 2, msix_vectors.clamp(1, 2048) - 1);
        c.put32(MSIX_CAP + 4, MSIX_TABLE_OFFSET as u32);
        c.put32(MSIX_CAP + 8, MSIX_PBA_OFFSET as u32);
        // Advanced Features, the last capability: FLR and transactions
        // pending supported; control reads 0 (Initiate FLR is write-only),
        // status 0 (nothing pending).
        c.bytes[AF_CAP] = CAP_ID_AF;
        c.bytes[AF_CAP + 1] = 0;
        c.bytes[AF_CAP + 2] = AF_LENGTH;
        c.bytes[AF_CAPS] = AF_CAP_TP_FLR;
        c.bytes[AF_CTRL] = 0;
        c.bytes[AF_STATUS] = 0;

        c.allow16(COMMAND, COMMAND_WRITABLE);
        // BAR0's address bits above its size; BAR1 holds the upper half.
        c.allow32(BAR0, !(BAR0_SIZE as u32 - 1));
        c.allow32(BAR1, u32::MAX);
        c.writable[INTERRUPT_LINE] = 0xff;
        c.allow16(MSIX_CAP + 2, MSIX_CONTROL_WRITABLE);
        c
    }

    /// Fills `data` from byte `offset`.
    ///
    /// # Errors
    ///
    /// [`OutOfRange`] if the access leaves the space.
    pub(crate) fn read(&self, offset: u64, data: &mut [u8]) -> Result<(), OutOfRange> {
        let r = range(offset, data.len())?;
        data.copy_from_slice(&self.bytes[r]);
        Ok(())
    }

    /// Writes `data` at byte `offset`, changing only writable bits, and
    /// says whether the write initiates an FLR (see the module
    /// documentation; the caller resets).
    ///
    /// # Errors
    ///
    /// [`OutOfRange`] if the access leaves the space.
    pub(crate) fn write(&mut self, offset: u64, data: &[u8]) -> Result<ConfigEffect, OutOfRange> {
        let r = range(offset, data.len())?;
        let mut effect = ConfigEffect::None;
        for (i, &v) in r.zip(data) {
            if i == AF_CTRL && v & AF_CTRL_FLR != 0 {
                effect = ConfigEffect::FunctionLevelReset;
            }
            let m = self.writable[i];
            self.bytes[i] = (self.bytes[i] & !m) | (v & m);
        }
        Ok(effect)
    }

    /// Whether Bus Master Enable (command register bit 2) is set: without
    /// it the function may not read or write memory, interrupts included.
    pub(crate) fn bus_master(&self) -> bool {
        self.bytes[COMMAND] & COMMAND_BUS_MASTER != 0
    }

    /// Back to the power-on state, as an FLR leaves a function (the
    /// guest's kernel restores what it saved).
    pub(crate) fn reset(&mut self) {
        *self = ConfigSpace::connectx5(self.msix_vectors);
    }

    fn put16(&mut self, at: usize, v: u16) {
        self.bytes[at..at + 2].copy_from_slice(&v.to_le_bytes());
    }

    fn put32(&mut self, at: usize, v: u32) {
        self.bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }

    fn allow16(&mut self, at: usize, mask: u16) {
        self.writable[at..at + 2].copy_from_slice(&mask.to_le_bytes());
    }

    fn allow32(&mut self, at: usize, mask: u32) {
        self.writable[at..at + 4].copy_from_slice(&mask.to_le_bytes());
    }
}

fn range(offset: u64, len: usize) -> Result<std::ops::Range<usize>, OutOfRange> {
    let start = usize::try_from(offset).map_err(|_| OutOfRange)?;
    let end = start.checked_add(len).ok_or(OutOfRange)?;
    if end > CONFIG_SIZE {
        return Err(OutOfRange);
    }
    Ok(start..end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dword(c: &ConfigSpace, at: u64) -> u32 {
        let mut b = [0u8; 4];
        c.read(at, &mut b).unwrap();
        u32::from_le_bytes(b)
    }

    #[test]
    fn identifies_as_a_connectx5() {
        let c = ConfigSpace::connectx5(16);
        let mut head = [0u8; 16];
        c.read(0, &mut head).unwrap();
        assert_eq!(
            head,
            [
                0xb3, 0x15, 0x17, 0x10, // vendor, device
                0x00, 0x00, 0x10, 0x00, // command, status (capability list)
                0x00, 0x00, 0x07, 0x02, // revision, prog-if, subclass, class
                0x00, 0x00, 0x00, 0x00, // cache line, latency, header type 0, BIST
            ]
        );
        assert_eq!(
            dword(&c, 0x10),
            0x0000_000c,
            "64-bit prefetchable memory BAR"
        );
        assert_eq!(dword(&c, 0x2c), 0x0008_15b3, "subsystem");
        assert_eq!(dword(&c, 0x34) & 0xff, 0x40, "capability pointer");
        assert_eq!(dword(&c, 0x3c) >> 8 & 0xff, 1, "INTA");
    }

    #[test]
    fn msix_capability_points_into_bar0_past_the_uars() {
        let c = ConfigSpace::connectx5(16);
        let cap = dword(&c, MSIX_CAP as u64);
        assert_eq!(cap & 0xff, 0x11, "MSI-X capability ID");
        assert_eq!(cap >> 8 & 0xff, AF_CAP as u32, "Advanced Features next");
        assert_eq!(cap >> 16, 15, "table size is N - 1");
        assert_eq!(dword(&c, MSIX_CAP as u64 + 4), MSIX_TABLE_OFFSET as u32);
        assert_eq!(dword(&c, MSIX_CAP as u64 + 8), MSIX_PBA_OFFSET as u32);
    }

    #[test]
    fn writes_change_only_writable_bits() {
        let mut c = ConfigSpace::connectx5(16);
        // Sizing BAR0: all ones give back the size mask and the type bits.
        c.write(0x10, &u32::MAX.to_le_bytes()).unwrap();
        assert_eq!(dword(&c, 0x10), !(BAR0_SIZE as u32 - 1) | 0xc);
        c.write(0x14, &0x1u32.to_le_bytes()).unwrap();
        assert_eq!(dword(&c, 0x14), 1);
        // IDs are read-only; the command register keeps its writable bits.
        c.write(0, &[0, 0, 0, 0]).unwrap();
        assert_eq!(dword(&c, 0) & 0xffff, 0x15b3);
        c.write(4, &[0xff, 0xff]).unwrap();
        assert_eq!(dword(&c, 4) & 0xffff, 0x0547);
        // MSI-X enable and mask, not the table size.
        c.write(MSIX_CAP as u64 + 2, &[0, 0xc0]).unwrap();
        assert_eq!(dword(&c, MSIX_CAP as u64) >> 16, 0xc000 | 15);
    }

    #[test]
    fn the_capability_chain_ends_with_advanced_features() {
        let c = ConfigSpace::connectx5(16);
        // Walk the chain as Linux's pci_find_capability does.
        let mut ids = Vec::new();
        let mut at = dword(&c, 0x34) & 0xfc;
        while at != 0 {
            let head = dword(&c, u64::from(at));
            ids.push((at, head & 0xff));
            at = head >> 8 & 0xfc;
        }
        assert_eq!(ids, [(0x40, 0x11), (0x50, 0x13)]);
        // AF: length 6, TP and FLR supported, control and status 0.
        let af = dword(&c, AF_CAP as u64);
        assert_eq!(af >> 16 & 0xff, 6, "PCI_AF_LENGTH");
        assert_eq!(af >> 24, 0x03, "PCI_AF_CAP_TP | PCI_AF_CAP_FLR");
        assert_eq!(dword(&c, AF_CAP as u64 + 4) & 0xffff, 0);
    }

    #[test]
    fn initiate_flr_resets_and_reads_back_zero() {
        let mut c = ConfigSpace::connectx5(16);
        c.write(4, &[0x06, 0]).unwrap();
        c.write(MSIX_CAP as u64 + 2, &[0, 0x80]).unwrap();
        c.write(0x10, &0xfe00_0000u32.to_le_bytes()).unwrap();
        // Other bytes of the capability change nothing.
        assert_eq!(c.write(AF_CAP as u64, &[0xff; 4]), Ok(ConfigEffect::None));
        assert_eq!(c.write(AF_STATUS as u64, &[0xff]), Ok(ConfigEffect::None));
        assert_eq!(c.write(AF_CTRL as u64, &[0xfe]), Ok(ConfigEffect::None));
        assert_eq!(dword(&c, AF_CAP as u64), 0x0306_0013);
        // Linux's pci_af_flr: a byte write of PCI_AF_CTRL_FLR; a word
        // write of control and status does it as well.
        assert_eq!(
            c.write(AF_CTRL as u64, &[0x01]),
            Ok(ConfigEffect::FunctionLevelReset)
        );
        assert_eq!(
            c.write(AF_CTRL as u64, &[0x01, 0x00]),
            Ok(ConfigEffect::FunctionLevelReset)
        );
        assert_eq!(
            dword(&c, AF_CAP as u64 + 4) & 0xffff,
            0,
            "FLR and TP read 0"
        );
        // The caller resets: command, BAR and MSI-X enable are back to
        // their power-on values, the capabilities unchanged.
        c.reset();
        let fresh = ConfigSpace::connectx5(16);
        assert_eq!(c.bytes, fresh.bytes);
        assert_eq!(dword(&c, 4) & 0xffff, 0);
        assert_eq!(dword(&c, MSIX_CAP as u64) >> 16, 15);
    }

    #[test]
    fn accesses_past_the_end_are_refused() {
        let mut c = ConfigSpace::connectx5(16);
        let mut b = [0u8; 4];
        assert_eq!(c.read(254, &mut b), Err(OutOfRange));
        assert_eq!(c.write(256, &b), Err(OutOfRange));
        assert_eq!(c.read(u64::MAX, &mut b), Err(OutOfRange));
        assert!(c.read(252, &mut b).is_ok());
    }
}
