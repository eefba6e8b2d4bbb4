// SPDX-License-Identifier: GPL-2.0

//! The initialization segment at the start of BAR0 (`struct mlx5_init_seg`
//! in the kernel's `include/linux/mlx5/device.h`): firmware version,
//! command interface revision, the command queue address and geometry, the
//! command doorbell, the `initializing` flag, the health buffer and
//! counter, and the free-running timer.
//!
//! Every register is a big-endian dword read and written with 32-bit MMIO
//! (`ioread32be` / `iowrite32be`); the constants below are byte offsets
//! into BAR0 and the functions split register values into their fields.
//!
//! | offset | register |
//! |---|---|
//! | 0x0000 | `fw_rev`: minor (31:16), major (15:0) |
//! | 0x0004 | `cmdif_rev_fw_sub`: cmdif revision (31:16), subminor (15:0) |
//! | 0x0010 | `cmdq_addr_h` |
//! | 0x0014 | `cmdq_addr_l_sz`: address (31:12), NIC interface (10:8), log_sz (7:4), log_stride (3:0) |
//! | 0x0018 | `cmd_dbell` |
//! | 0x01fc | `initializing`: bit 31 set while firmware initialises |
//! | 0x0200 | `health` (64 bytes, [`HealthBuffer`]) |
//! | 0x1000 | `internal_timer_h`, 0x1004 `internal_timer_l` |
//! | 0x1010 | `health_counter` |
//!
//! A driver waits for `initializing` bit 31 to clear before writing the
//! command queue address, then again after writing it (the firmware loads
//! the queue), and reads `cmdif_rev` first: the layouts here are revision
//! [`CMDIF_REV`].

use super::bytes::{get_u16, get_u32, get_u8, put_u16, put_u32, put_u8};
use super::error::Error;

/// Offset of `fw_rev`.
pub const FW_REV_OFFSET: usize = 0x0;
/// Offset of `cmdif_rev_fw_sub`.
pub const CMDIF_REV_FW_SUB_OFFSET: usize = 0x4;
/// Offset of `cmdq_addr_h`: bits 63:32 of the command queue's bus address.
pub const CMDQ_ADDR_H_OFFSET: usize = 0x10;
/// Offset of `cmdq_addr_l_sz`: bits 31:12 of the address when written;
/// the queue geometry and NIC interface state when read.
pub const CMDQ_ADDR_L_SZ_OFFSET: usize = 0x14;
/// Offset of `cmd_dbell`, the command doorbell (one bit per queue entry,
/// see `cmd_queue::doorbell`).
pub const CMD_DBELL_OFFSET: usize = 0x18;
/// Offset of `initializing`.
pub const INITIALIZING_OFFSET: usize = 0x1fc;
/// Offset of `health`, the [`HealthBuffer`].
pub const HEALTH_OFFSET: usize = 0x200;
/// Offset of `cmd_exec_to`: the firmware's command execution timeout.
pub const CMD_EXEC_TO_OFFSET: usize = 0xff8;
/// Offset of `internal_timer_h`: bits 63:32 of the free-running timer.
pub const INTERNAL_TIMER_H_OFFSET: usize = 0x1000;
/// Offset of `internal_timer_l`: bits 31:0 of the free-running timer.
pub const INTERNAL_TIMER_L_OFFSET: usize = 0x1004;
/// Offset of `health_counter`: incremented by live firmware; a counter
/// that stops moving means the firmware is stuck.
pub const HEALTH_COUNTER_OFFSET: usize = 0x1010;
/// Offset of `real_time_h`: seconds of the real-time clock.
pub const REAL_TIME_H_OFFSET: usize = 0x1040;
/// Offset of `real_time_l`: nanoseconds of the real-time clock.
pub const REAL_TIME_L_OFFSET: usize = 0x1044;
/// Size of the segment (`sizeof(struct mlx5_init_seg)`).
pub const INIT_SEG_SIZE: usize = 0x2010;

/// The command interface revision these layouts implement (`CMD_IF_REV`
/// in mlx5_core's cmd.c); a driver must refuse any other.
pub const CMDIF_REV: u16 = 5;
/// Bit of `initializing` that is set while the firmware initialises.
pub const INITIALIZING_BIT: u32 = 31;
/// Bit of `initializing` that says the firmware supports a driver-triggered
/// reset (`MLX5_FW_RESET_SUPPORTED_OFFSET`).
pub const FW_RESET_SUPPORTED_BIT: u32 = 30;
/// Shift of the NIC interface field in `cmdq_addr_l_sz`
/// (`MLX5_NIC_IFC_OFFSET`); the field is 3 bits.
pub const NIC_IFC_SHIFT: u32 = 8;
/// NIC interface: a full driver owns the device
/// (`MLX5_INITIAL_SEG_NIC_INTERFACE_FULL_DRIVER`).
pub const NIC_IFC_FULL_DRIVER: u8 = 0x0;
/// NIC interface: disabled (`MLX5_INITIAL_SEG_NIC_INTERFACE_DISABLED`).
pub const NIC_IFC_DISABLED: u8 = 0x1;
/// NIC interface: no DRAM NIC (`MLX5_INITIAL_SEG_NIC_INTERFACE_NO_DRAM_NIC`).
pub const NIC_IFC_NO_DRAM_NIC: u8 = 0x2;
/// NIC interface: software reset in progress
/// (`MLX5_INITIAL_SEG_NIC_INTERFACE_SW_RESET`).
pub const NIC_IFC_SW_RESET: u8 = 0x7;

/// The firmware version, from `fw_rev` and `cmdif_rev_fw_sub` (printed
/// `major.minor.subminor`, the subminor with four digits).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct FwRev {
    /// `fw_rev` bits 15:0.
    pub major: u16,
    /// `fw_rev` bits 31:16.
    pub minor: u16,
    /// `cmdif_rev_fw_sub` bits 15:0.
    pub subminor: u16,
}

impl FwRev {
    /// Splits the two registers.
    pub fn decode(fw_rev: u32, cmdif_rev_fw_sub: u32) -> Self {
        FwRev {
            major: fw_rev as u16,
            minor: (fw_rev >> 16) as u16,
            subminor: cmdif_rev_fw_sub as u16,
        }
    }

    /// The two register values (a device model's side); the cmdif revision
    /// goes into the top half of the second.
    pub fn encode(&self, cmdif_rev: u16) -> (u32, u32) {
        (
            u32::from(self.minor) << 16 | u32::from(self.major),
            u32::from(cmdif_rev) << 16 | u32::from(self.subminor),
        )
    }
}

/// The command interface revision: `cmdif_rev_fw_sub` bits 31:16.
pub fn cmdif_rev(cmdif_rev_fw_sub: u32) -> u16 {
    (cmdif_rev_fw_sub >> 16) as u16
}

/// `cmdq_addr_l_sz` as the device reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmdqAddrLSz {
    /// Bits 31:12 of the queue address last written (the low 12 bits of
    /// the register hold the fields below), as an address.
    pub addr_l: u32,
    /// NIC interface state (`NIC_IFC_*`): bits 10:8.
    pub nic_interface: u8,
    /// Log2 of the number of queue entries: bits 7:4.
    pub log_sz: u8,
    /// Log2 of the distance between entries in bytes: bits 3:0.
    pub log_stride: u8,
}

impl CmdqAddrLSz {
    /// Splits the register.
    pub fn decode(v: u32) -> Self {
        CmdqAddrLSz {
            addr_l: v & 0xffff_f000,
            nic_interface: ((v >> NIC_IFC_SHIFT) & 0x7) as u8,
            log_sz: ((v >> 4) & 0xf) as u8,
            log_stride: (v & 0xf) as u8,
        }
    }

    /// The register value (a device model's side); bits above each
    /// field's width are dropped.
    pub fn encode(&self) -> u32 {
        (self.addr_l & 0xffff_f000)
            | u32::from(self.nic_interface & 0x7) << NIC_IFC_SHIFT
            | u32::from(self.log_sz & 0xf) << 4
            | u32::from(self.log_stride & 0xf)
    }
}

/// The values to write to `cmdq_addr_h` and `cmdq_addr_l_sz` to hand the
/// device the command queue page at bus address `addr`.
///
/// # Errors
///
/// [`Error::Misaligned`] unless `addr` is 4 KiB aligned.
pub fn cmdq_addr(addr: u64) -> Result<(u32, u32), Error> {
    if addr & 0xfff != 0 {
        return Err(Error::Misaligned);
    }
    Ok(((addr >> 32) as u32, addr as u32))
}

/// Whether the firmware is still initialising: `initializing` bit 31.
pub fn initializing(v: u32) -> bool {
    v >> INITIALIZING_BIT & 1 != 0
}

/// Whether the firmware supports a driver-triggered reset: `initializing`
/// bit 30.
pub fn fw_reset_supported(v: u32) -> bool {
    v >> FW_RESET_SUPPORTED_BIT & 1 != 0
}

/// The 64-bit free-running timer from `internal_timer_h` and
/// `internal_timer_l`. The two halves are separate reads: read `h`, `l`,
/// then `h` again, and re-read `l` if `h` changed (the low half wrapped).
pub fn internal_timer(h: u32, l: u32) -> u64 {
    u64::from(h) << 32 | u64::from(l)
}

/// Size of the health buffer (`sizeof(struct health_buffer)`).
pub const HEALTH_BUFFER_SIZE: usize = 64;
/// Bit of [`HealthBuffer::rfr_severity`]: the firmware requests a reset
/// (`MLX5_RFR_BIT_OFFSET`).
pub const RFR_BIT: u8 = 7;
/// Bit of [`HealthBuffer::rfr_severity`]: a reset would recover
/// (`MLX5_CRR_BIT_OFFSET`).
pub const CRR_BIT: u8 = 6;
/// Bit of [`HealthBuffer::rfr_severity`] that says bits 2:0 hold a
/// severity, a `LOGLEVEL_*` (mlx5_core's `MLX5_SEVERITY_VALID_MASK`).
pub const SEVERITY_VALID: u8 = 0x8;
/// [`HealthBuffer::synd`]: firmware internal error
/// (`MLX5_INITIAL_SEG_HEALTH_SYNDROME_FW_INTERNAL_ERR`).
pub const HEALTH_SYNDROME_FW_INTERNAL_ERR: u8 = 0x1;
/// [`HealthBuffer::synd`]: unrecoverable hardware error
/// (`MLX5_INITIAL_SEG_HEALTH_SYNDROME_HW_FATAL_ERR`).
pub const HEALTH_SYNDROME_HW_FATAL_ERR: u8 = 0x8;

/// The firmware's health report (`struct health_buffer`, at
/// [`HEALTH_OFFSET`]): all zero while healthy; `synd` non-zero after a
/// firmware assert or fatal error.
///
/// | byte | field |
/// |---|---|
/// | 0..24 | `assert_var[6]` |
/// | 32 | `assert_exit_ptr` |
/// | 36 | `assert_callra` |
/// | 44 | `time` |
/// | 48 | `fw_ver` |
/// | 52 | `hw_id` |
/// | 56 | `rfr_severity` |
/// | 60 | `irisc_index` |
/// | 61 | `synd` |
/// | 62 | `ext_synd` |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HealthBuffer {
    /// Assert arguments: `assert_var[6]`, bytes 0..24.
    pub assert_var: [u32; 6],
    /// Where the assert left: `assert_exit_ptr`, byte 32.
    pub assert_exit_ptr: u32,
    /// The assert's caller: `assert_callra`, byte 36.
    pub assert_callra: u32,
    /// Timestamp of the event (seconds): `time`, byte 44.
    pub time: u32,
    /// Firmware version; all-ones means the PCI link is gone: `fw_ver`,
    /// byte 48.
    pub fw_ver: u32,
    /// Hardware id: `hw_id`, byte 52.
    pub hw_id: u32,
    /// Reset-request flag ([`RFR_BIT`]), recovery flag ([`CRR_BIT`]) and
    /// severity (bits 2:0, valid when bit 3 is set): `rfr_severity`,
    /// byte 56.
    pub rfr_severity: u8,
    /// Which internal processor reported: `irisc_index`, byte 60.
    pub irisc_index: u8,
    /// Health syndrome, 0 while healthy: `synd`, byte 61.
    pub synd: u8,
    /// Extended syndrome: `ext_synd`, byte 62.
    pub ext_synd: u16,
}

impl HealthBuffer {
    /// Writes the buffer into `out`, every byte of it.
    pub fn encode(&self, out: &mut [u8; HEALTH_BUFFER_SIZE]) {
        *out = [0; HEALTH_BUFFER_SIZE];
        for (i, v) in self.assert_var.iter().enumerate() {
            put_u32(out, 4 * i, *v);
        }
        put_u32(out, 32, self.assert_exit_ptr);
        put_u32(out, 36, self.assert_callra);
        put_u32(out, 44, self.time);
        put_u32(out, 48, self.fw_ver);
        put_u32(out, 52, self.hw_id);
        put_u8(out, 56, self.rfr_severity);
        put_u8(out, 60, self.irisc_index);
        put_u8(out, 61, self.synd);
        put_u16(out, 62, self.ext_synd);
    }

    /// Reads the buffer. Never fails; reserved bytes are ignored.
    pub fn decode(b: &[u8; HEALTH_BUFFER_SIZE]) -> Self {
        HealthBuffer {
            assert_var: core::array::from_fn(|i| get_u32(b, 4 * i)),
            assert_exit_ptr: get_u32(b, 32),
            assert_callra: get_u32(b, 36),
            time: get_u32(b, 44),
            fw_ver: get_u32(b, 48),
            hw_id: get_u32(b, 52),
            rfr_severity: get_u8(b, 56),
            irisc_index: get_u8(b, 60),
            synd: get_u8(b, 61),
            ext_synd: get_u16(b, 62),
        }
    }

    /// The firmware asks for a reset: `rfr_severity` bit 7.
    pub fn reset_requested(&self) -> bool {
        self.rfr_severity >> RFR_BIT & 1 != 0
    }

    /// The error severity (bits 2:0 of `rfr_severity`), if marked valid by
    /// bit 3.
    pub fn severity(&self) -> Option<u8> {
        (self.rfr_severity & SEVERITY_VALID != 0).then_some(self.rfr_severity & 0x7)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_split() {
        let v = FwRev::decode(0x001c_0010, 0x0005_0fa0);
        assert_eq!(
            v,
            FwRev {
                major: 0x10,
                minor: 0x1c,
                subminor: 0xfa0
            }
        );
        assert_eq!(v.encode(5), (0x001c_0010, 0x0005_0fa0));
        assert_eq!(cmdif_rev(0x0005_0fa0), CMDIF_REV);
        let l = CmdqAddrLSz::decode(0xabcd_e712);
        assert_eq!(
            l,
            CmdqAddrLSz {
                addr_l: 0xabcd_e000,
                nic_interface: 7,
                log_sz: 1,
                log_stride: 2
            }
        );
        assert_eq!(l.encode(), 0xabcd_e712);
        assert_eq!(cmdq_addr(0x1_2345_6000), Ok((1, 0x2345_6000)));
        assert_eq!(cmdq_addr(0x1_2345_6800), Err(Error::Misaligned));
        assert!(initializing(0x8000_0000));
        assert!(!initializing(0x7fff_ffff));
        assert!(fw_reset_supported(0x4000_0000));
        assert_eq!(internal_timer(1, 2), 0x1_0000_0002);
    }

    #[test]
    fn offsets_are_consistent() {
        // 120 reserved dwords between the doorbell and `initializing`.
        assert_eq!(INITIALIZING_OFFSET, CMD_DBELL_OFFSET + 4 + 120 * 4);
        assert_eq!(HEALTH_OFFSET, INITIALIZING_OFFSET + 4);
        // 878 reserved dwords after the health buffer.
        assert_eq!(
            CMD_EXEC_TO_OFFSET,
            HEALTH_OFFSET + HEALTH_BUFFER_SIZE + 878 * 4
        );
        assert_eq!(INTERNAL_TIMER_H_OFFSET, CMD_EXEC_TO_OFFSET + 8);
        assert_eq!(HEALTH_COUNTER_OFFSET, INTERNAL_TIMER_L_OFFSET + 4 + 8);
    }

    #[test]
    fn health_buffer_known_bytes() {
        let h = HealthBuffer {
            assert_var: [1, 2, 3, 4, 5, 6],
            assert_exit_ptr: 0x11,
            assert_callra: 0x22,
            time: 0x33,
            fw_ver: 0x44,
            hw_id: 0x55,
            rfr_severity: 0x8b,
            irisc_index: 0x66,
            synd: 0x77,
            ext_synd: 0x8899,
        };
        let mut b = [0xffu8; 64];
        h.encode(&mut b);
        assert_eq!(b[20..24], [0, 0, 0, 6]);
        assert_eq!(b[24..32], [0; 8]);
        assert_eq!(b[56..64], [0x8b, 0, 0, 0, 0x66, 0x77, 0x88, 0x99]);
        assert_eq!(HealthBuffer::decode(&b), h);
        assert!(h.reset_requested());
        assert_eq!(h.severity(), Some(3));
    }
}
