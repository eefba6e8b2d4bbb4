// SPDX-License-Identifier: GPL-2.0

//! BAR0 of the emulated function: where each byte offset goes.
//!
//! | offset | reads | writes |
//! |---|---|---|
//! | `0x0000..0x1000` | initialization segment | initialization segment |
//! | `0x1000..0x2010` | initialization segment (timers, health counter) | UAR 1 (from 0x1000) and up |
//! | `0x1000..uars × 4 KiB` | 0 (UAR pages are write-only) | UAR page `offset / 4 KiB` |
//! | [`MSIX_TABLE_OFFSET`], [`MSIX_PBA_OFFSET`] | QEMU's MSI-X emulation | QEMU's MSI-X emulation |
//! | [`TEST_PAGE_OFFSET`] (`0x1f00000`), 4 KiB | the emulator's test registers (`testreg.rs`) | fault and port commands |
//! | the rest, to 32 MiB | 0 | ignored, counted as stray |
//!
//! UAR page `i` is at `i × 4 KiB`, where mlx5_core maps the page
//! ALLOC_UAR names (`uar2pfn`: BAR0's start plus the index, with 4 KiB
//! UARs). The firmware never hands out index 0, the initialization
//! segment's first page; index 1 shares BAR0's second page with the end
//! of the initialization segment, whose registers there are read-only
//! (timers, health counter) while a UAR page is written only (doorbells at
//! 0x20, 0x40, 0x48 and BlueFlame from 0x800), so reads of that page go to
//! the segment and writes to the UAR. The MSI-X table and PBA sit at
//! 1 MiB, past the UAR area the function announces (`uar_sz`: 1 MiB). The
//! test register page, which a ConnectX does not have, sits near the end
//! of the BAR, clear of all of them.

use mlx5_prm::doorbell::{
    BFREGS_PER_UAR, BF_BUF_SIZE, BF_REG_SIZE, UAR_BF_OFFSET, UAR_CQ_DOORBELL_OFFSET,
    UAR_EQ_ARM_OFFSET, UAR_EQ_UPDATE_OFFSET, UAR_PAGE_SIZE,
};
use mlx5_prm::init_seg::INIT_SEG_SIZE;

pub(crate) use crate::testreg::TEST_PAGE_OFFSET;
use crate::testreg::TEST_PAGE_SIZE;

/// BAR0's size, as on a ConnectX-5.
pub(crate) const BAR0_SIZE: u64 = 32 << 20;
/// Where the MSI-X table starts (one 4 KiB page holds 256 vectors).
pub(crate) const MSIX_TABLE_OFFSET: u64 = 0x10_0000;
/// Where the MSI-X pending-bit array starts.
pub(crate) const MSIX_PBA_OFFSET: u64 = 0x10_1000;
/// Most MSI-X vectors the table page holds.
pub(crate) const MAX_MSIX_VECTORS: u16 = 256;

const PAGE: u64 = UAR_PAGE_SIZE as u64;

/// What a BAR0 access reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// The initialization segment, at this byte offset.
    InitSeg(usize),
    /// UAR page `index`, at byte `offset` of the page.
    Uar {
        /// The UAR index (1 to `uars - 1`).
        index: u32,
        /// Offset in the page.
        offset: usize,
    },
    /// The MSI-X table or PBA: QEMU emulates them and never forwards an
    /// access there.
    Msix,
    /// The test register page, at this byte offset.
    Test(usize),
    /// Nothing is there.
    Unbacked,
}

fn msix(offset: u64) -> bool {
    (MSIX_TABLE_OFFSET..MSIX_PBA_OFFSET + PAGE).contains(&offset)
}

fn test_page(offset: u64) -> Option<Target> {
    offset
        .checked_sub(TEST_PAGE_OFFSET)
        .filter(|&o| o < TEST_PAGE_SIZE)
        .map(|o| Target::Test(o as usize))
}

fn uar(offset: u64, uars: u32) -> Option<Target> {
    let index = offset / PAGE;
    (index >= 1 && index < u64::from(uars)).then_some(Target::Uar {
        index: index as u32,
        offset: (offset % PAGE) as usize,
    })
}

/// What a read at `offset` reaches, with `uars` UAR pages.
pub(crate) fn decode_read(offset: u64, uars: u32) -> Target {
    if offset < INIT_SEG_SIZE as u64 {
        Target::InitSeg(offset as usize)
    } else if msix(offset) {
        Target::Msix
    } else {
        uar(offset, uars)
            .or_else(|| test_page(offset))
            .unwrap_or(Target::Unbacked)
    }
}

/// What a write at `offset` reaches, with `uars` UAR pages.
pub(crate) fn decode_write(offset: u64, uars: u32) -> Target {
    if offset < PAGE {
        Target::InitSeg(offset as usize)
    } else if msix(offset) {
        Target::Msix
    } else {
        uar(offset, uars)
            .or_else(|| test_page(offset))
            .unwrap_or(Target::Unbacked)
    }
}

/// The register of a UAR page a store reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UarReg {
    /// The 64-bit CQ doorbell (ARM word, CQN) at 0x20.
    CqDoorbell,
    /// The EQ doorbell that re-arms (0x40).
    EqArm,
    /// The EQ doorbell that only updates the consumer index (0x48).
    EqUpdate,
    /// BlueFlame register `reg`, half `half`, at byte `at` of the half.
    BlueFlame {
        /// Register 0 to 3.
        reg: u8,
        /// Half 0 or 1.
        half: u8,
        /// Offset in the half.
        at: usize,
    },
    /// No register.
    None,
}

/// The register the store of `len` bytes at `offset` of a UAR page falls
/// in: it must lie inside it entirely (a store across two registers is
/// [`UarReg::None`]).
pub(crate) fn uar_register(offset: usize, len: usize) -> UarReg {
    let end = offset.saturating_add(len);
    let inside = |start: usize, size: usize| offset >= start && end <= start + size;
    if inside(UAR_CQ_DOORBELL_OFFSET, 8) {
        UarReg::CqDoorbell
    } else if inside(UAR_EQ_ARM_OFFSET, 4) {
        UarReg::EqArm
    } else if inside(UAR_EQ_UPDATE_OFFSET, 4) {
        UarReg::EqUpdate
    } else if inside(UAR_BF_OFFSET, BF_REG_SIZE * BFREGS_PER_UAR) {
        let rel = offset - UAR_BF_OFFSET;
        let half_start = rel - rel % BF_BUF_SIZE;
        if end - UAR_BF_OFFSET > half_start + BF_BUF_SIZE {
            return UarReg::None;
        }
        UarReg::BlueFlame {
            reg: (rel / BF_REG_SIZE) as u8,
            half: (rel % BF_REG_SIZE / BF_BUF_SIZE) as u8,
            at: rel % BF_BUF_SIZE,
        }
    } else {
        UarReg::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_page_is_the_initialization_segment() {
        assert_eq!(decode_read(0, 128), Target::InitSeg(0));
        assert_eq!(decode_write(0x18, 128), Target::InitSeg(0x18));
        assert_eq!(decode_read(0x1fc, 128), Target::InitSeg(0x1fc));
        assert_eq!(decode_write(0xffc, 128), Target::InitSeg(0xffc));
    }

    #[test]
    fn the_second_page_reads_the_segment_and_writes_uar_1() {
        assert_eq!(decode_read(0x1010, 128), Target::InitSeg(0x1010));
        assert_eq!(decode_read(0x200c, 128), Target::InitSeg(0x200c));
        assert_eq!(
            decode_write(0x1020, 128),
            Target::Uar {
                index: 1,
                offset: 0x20
            }
        );
    }

    #[test]
    fn uar_i_is_at_i_pages() {
        assert_eq!(
            decode_write(5 * 4096 + 0x800, 128),
            Target::Uar {
                index: 5,
                offset: 0x800
            }
        );
        assert_eq!(
            decode_read(127 * 4096 + 0x40, 128),
            Target::Uar {
                index: 127,
                offset: 0x40
            }
        );
        assert_eq!(decode_write(128 * 4096, 128), Target::Unbacked);
        assert_eq!(decode_write(16 * 4096, 16), Target::Unbacked);
    }

    #[test]
    fn msix_lies_past_the_uar_area() {
        const {
            assert!(MSIX_TABLE_OFFSET >= 1 << 20);
            assert!(MSIX_PBA_OFFSET >= MSIX_TABLE_OFFSET + MAX_MSIX_VECTORS as u64 * 16);
        }
        assert_eq!(decode_write(MSIX_TABLE_OFFSET, 128), Target::Msix);
        assert_eq!(decode_read(MSIX_PBA_OFFSET + 8, 128), Target::Msix);
        assert_eq!(decode_read(BAR0_SIZE - 4, 128), Target::Unbacked);
    }

    #[test]
    fn the_test_page_is_the_emulators_own() {
        assert_eq!(decode_write(0x1f0_0000, 128), Target::Test(0));
        assert_eq!(decode_read(0x1f0_0004, 128), Target::Test(4));
        assert_eq!(decode_read(0x1f0_0fff, 128), Target::Test(0xfff));
        assert_eq!(decode_write(0x1f0_1000, 128), Target::Unbacked);
        assert_eq!(decode_write(0x1ef_fffc, 128), Target::Unbacked);
    }

    #[test]
    fn uar_registers() {
        assert_eq!(uar_register(0x20, 8), UarReg::CqDoorbell);
        assert_eq!(uar_register(0x24, 4), UarReg::CqDoorbell);
        assert_eq!(uar_register(0x40, 4), UarReg::EqArm);
        assert_eq!(uar_register(0x48, 4), UarReg::EqUpdate);
        assert_eq!(uar_register(0x44, 4), UarReg::None);
        assert_eq!(
            uar_register(0x800, 8),
            UarReg::BlueFlame {
                reg: 0,
                half: 0,
                at: 0
            }
        );
        assert_eq!(
            uar_register(0x900 + 0x38, 8),
            UarReg::BlueFlame {
                reg: 0,
                half: 1,
                at: 0x38
            }
        );
        assert_eq!(
            uar_register(0xe00, 8),
            UarReg::BlueFlame {
                reg: 3,
                half: 0,
                at: 0
            }
        );
        // A store across the halves, or past the last register.
        assert_eq!(uar_register(0x8fc, 8), UarReg::None);
        assert_eq!(uar_register(0xffc, 8), UarReg::None);
        assert_eq!(uar_register(0x100, 4), UarReg::None);
    }
}
