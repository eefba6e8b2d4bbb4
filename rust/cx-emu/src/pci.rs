// SPDX-License-Identifier: GPL-2.0

//! The function's PCI configuration space: a ConnectX-5 (15b3:1017,
//! Ethernet/InfiniBand controller class 0x0207) with one 64-bit
//! prefetchable memory BAR and an MSI-X capability.
//!
//! QEMU's vfio-user client reads the whole space at start-up and
//! virtualises much of it itself (BAR addresses, the MSI-X table, the
//! enable bits); the writes it passes on are kept here according to each
//! register's writable bits, so that a read gives back what was written,
//! as on a device.

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

const COMMAND: usize = 0x04;
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
}

/// An access outside the configuration space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OutOfRange;

impl ConfigSpace {
    /// The ConnectX-5 function with `msix_vectors` MSI-X vectors (1 to
    /// 2048), whose table and PBA are in BAR0 at [`MSIX_TABLE_OFFSET`]
    /// and [`MSIX_PBA_OFFSET`].
    pub(crate) fn connectx5(msix_vectors: u16) -> Self {
        let mut c = ConfigSpace {
            bytes: [0; CONFIG_SIZE],
            writable: [0; CONFIG_SIZE],
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
        c.bytes[MSIX_CAP + 1] = 0;
        c.put16(MSIX_CAP + 2, msix_vectors.clamp(1, 2048) - 1);
        c.put32(MSIX_CAP + 4, MSIX_TABLE_OFFSET as u32);
        c.put32(MSIX_CAP + 8, MSIX_PBA_OFFSET as u32);

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

    /// Writes `data` at byte `offset`, changing only writable bits.
    ///
    /// # Errors
    ///
    /// [`OutOfRange`] if the access leaves the space.
    pub(crate) fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), OutOfRange> {
        let r = range(offset, data.len())?;
        for (i, &v) in r.zip(data) {
            let m = self.writable[i];
            self.bytes[i] = (self.bytes[i] & !m) | (v & m);
        }
        Ok(())
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
        assert_eq!(cap >> 8 & 0xff, 0, "last capability");
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
    fn accesses_past_the_end_are_refused() {
        let mut c = ConfigSpace::connectx5(16);
        let mut b = [0u8; 4];
        assert_eq!(c.read(254, &mut b), Err(OutOfRange));
        assert_eq!(c.write(256, &b), Err(OutOfRange));
        assert_eq!(c.read(u64::MAX, &mut b), Err(OutOfRange));
        assert!(c.read(252, &mut b).is_ok());
    }
}
