// SPDX-License-Identifier: GPL-2.0

//! Commands for the plain resources: UAR pages (ALLOC_UAR, DEALLOC_UAR),
//! protection domains (ALLOC_PD, DEALLOC_PD) and memory keys (CREATE_MKEY
//! with its memory key context, DESTROY_MKEY).
//!
//! A memory region of physically contiguous memory is a key with access
//! mode [`ACCESS_MODE_PA`] and `start_addr` the bus address. A region over
//! pages uses [`ACCESS_MODE_MTT`]: the input is followed by one 64-bit
//! entry per page (the page's bus address), padded to an even number of
//! entries; `log_page_size` is the page size and
//! `translations_octword_size` the entry count in 16-byte units
//! ([`mtt_octwords`]).

use super::command::{command, OP_ALLOC_PD, OP_ALLOC_UAR, OP_CREATE_MKEY};
use super::command::{OP_DEALLOC_PD, OP_DEALLOC_UAR, OP_DESTROY_MKEY};
use super::ifc::ifc_layout;

/// `mkc` access mode: physical addresses, `start_addr` is the bus address
/// (`MLX5_MKC_ACCESS_MODE_PA`).
pub const ACCESS_MODE_PA: u8 = 0x0;
/// `mkc` access mode: a list of page addresses (MTT entries) follows the
/// input (`MLX5_MKC_ACCESS_MODE_MTT`).
pub const ACCESS_MODE_MTT: u8 = 0x1;
/// `mkc` access mode: a list of (key, address, length) entries
/// (`MLX5_MKC_ACCESS_MODE_KLMS`; not modelled beyond the value).
pub const ACCESS_MODE_KLMS: u8 = 0x2;
/// `mkc` access mode: fixed-size key/address entries
/// (`MLX5_MKC_ACCESS_MODE_KSM`; not modelled beyond the value).
pub const ACCESS_MODE_KSM: u8 = 0x3;

/// The 32-bit key (lkey and rkey) of a memory key: the index CREATE_MKEY
/// returned in bits 31:8, the driver's `mkey_7_0` in bits 7:0.
pub fn mkey(mkey_index: u32, mkey_7_0: u8) -> u32 {
    (mkey_index & 0xff_ffff) << 8 | u32::from(mkey_7_0)
}

/// The index of a memory key (for DESTROY_MKEY): its bits 31:8.
pub fn mkey_index(mkey: u32) -> u32 {
    mkey >> 8
}

/// `translations_octword_size` for `entries` 8-byte MTT entries: 16-byte
/// units, rounded up.
pub fn mtt_octwords(entries: u32) -> u32 {
    entries.div_ceil(2)
}

ifc_layout! {
    /// ALLOC_UAR input: no parameters.
    pub struct AllocUarIn = "alloc_uar_in", bits 0x80, opcode OP_ALLOC_UAR {}
}

ifc_layout! {
    /// ALLOC_UAR output.
    pub struct AllocUarOut = "alloc_uar_out", bits 0x80 {
        /// The UAR page's index, 24 bits: its offset in the BAR is
        /// `uar * 4 KiB` (with 4 KiB UARs).
        uar: u32 = [0x48, 0x18],
    }
}

ifc_layout! {
    /// DEALLOC_UAR input.
    pub struct DeallocUarIn = "dealloc_uar_in", bits 0x80, opcode OP_DEALLOC_UAR {
        /// The UAR page to free, 24 bits.
        uar: u32 = [0x48, 0x18],
    }
}

ifc_layout! {
    /// DEALLOC_UAR output: the header only.
    pub struct DeallocUarOut = "dealloc_uar_out", bits 0x80 {}
}

ifc_layout! {
    /// ALLOC_PD input: no parameters.
    pub struct AllocPdIn = "alloc_pd_in", bits 0x80, opcode OP_ALLOC_PD {}
}

ifc_layout! {
    /// ALLOC_PD output.
    pub struct AllocPdOut = "alloc_pd_out", bits 0x80 {
        /// The protection domain, 24 bits.
        pd: u32 = [0x48, 0x18],
    }
}

ifc_layout! {
    /// DEALLOC_PD input.
    pub struct DeallocPdIn = "dealloc_pd_in", bits 0x80, opcode OP_DEALLOC_PD {
        /// The protection domain to free, 24 bits.
        pd: u32 = [0x48, 0x18],
    }
}

ifc_layout! {
    /// DEALLOC_PD output: the header only.
    pub struct DeallocPdOut = "dealloc_pd_out", bits 0x80 {}
}

ifc_layout! {
    /// The memory key context (`mkc`), for a PA or MTT memory region.
    pub struct Mkc = "mkc", bits 0x200 {
        /// The key is free (not yet usable); 0 to create it ready.
        free: bool = [0x1, 1],
        /// Access mode bits 4:2 (0 for PA and MTT); see
        /// [`Mkc::access_mode`].
        access_mode_4_2: u8 = [0x3, 3],
        /// Writes through the key may use PCIe relaxed ordering.
        relaxed_ordering_write: bool = [0xd, 1],
        /// The key may be modified by UMR WQEs.
        umr_en: bool = [0x10, 1],
        /// Remote atomic access.
        a: bool = [0x11, 1],
        /// Remote write access.
        rw: bool = [0x12, 1],
        /// Remote read access.
        rr: bool = [0x13, 1],
        /// Local write access.
        lw: bool = [0x14, 1],
        /// Local read access.
        lr: bool = [0x15, 1],
        /// Access mode bits 1:0 (`ACCESS_MODE_*`).
        access_mode_1_0: u8 = [0x16, 2],
        /// QP the key is bound to; 0xffffff for none (memory regions).
        qpn: u32 = [0x20, 0x18],
        /// The key's low byte, chosen by the driver (see [`mkey`]).
        mkey_7_0: u8 = [0x38, 8],
        /// The region spans the whole address space (`len` ignored).
        length64: bool = [0x60, 1],
        /// Protection domain, 24 bits.
        pd: u32 = [0x68, 0x18],
        /// Virtual start address of the region (the bus address for PA).
        start_addr: u64 = [0x80, 0x40],
        /// Length of the region in bytes.
        len: u64 = [0xc0, 0x40],
        /// Number of 16-byte translation units (MTT: [`mtt_octwords`]).
        translations_octword_size: u32 = [0x1a0, 0x20],
        /// Reads through the key may use PCIe relaxed ordering.
        relaxed_ordering_read: bool = [0x1d9, 1],
        /// Log2 of the page size of the MTT entries, in bytes.
        log_page_size: u8 = [0x1da, 6],
    }
}

impl Mkc {
    /// The 5-bit access mode (`ACCESS_MODE_*`) from its two fields.
    pub fn access_mode(&self) -> u8 {
        (self.access_mode_4_2 & 0x7) << 2 | (self.access_mode_1_0 & 0x3)
    }

    /// Splits a 5-bit access mode over `access_mode_4_2` and
    /// `access_mode_1_0`.
    pub fn set_access_mode(&mut self, mode: u8) {
        self.access_mode_4_2 = (mode >> 2) & 0x7;
        self.access_mode_1_0 = mode & 0x3;
    }
}

ifc_layout! {
    /// CREATE_MKEY input, followed for [`ACCESS_MODE_MTT`] by the MTT
    /// entries (`klm_pas_mtt`).
    pub struct CreateMkeyIn = "create_mkey_in", bits 0x880, opcode OP_CREATE_MKEY {
        /// The MTT entries carry per-page access bits (on-demand paging).
        pg_access: bool = [0x60, 1],
        /// The key's context.
        memory_key_mkey_entry: Mkc = [0x80, 0x200],
        /// 16-byte translation units actually in the input (usually
        /// `translations_octword_size`).
        translations_octword_actual_size: u32 = [0x300, 0x20],
    }
}

ifc_layout! {
    /// CREATE_MKEY output.
    pub struct CreateMkeyOut = "create_mkey_out", bits 0x80 {
        /// The key's index, 24 bits (see [`mkey`]).
        mkey_index: u32 = [0x48, 0x18],
    }
}

ifc_layout! {
    /// DESTROY_MKEY input.
    pub struct DestroyMkeyIn = "destroy_mkey_in", bits 0x80, opcode OP_DESTROY_MKEY {
        /// The key's index ([`mkey_index`]), 24 bits.
        mkey_index: u32 = [0x48, 0x18],
    }
}

ifc_layout! {
    /// DESTROY_MKEY output: the header only.
    pub struct DestroyMkeyOut = "destroy_mkey_out", bits 0x80 {}
}

command! {
    /// ALLOC_UAR (`MLX5_CMD_OP_ALLOC_UAR`, 0x802).
    pub struct AllocUar: OP_ALLOC_UAR, "ALLOC_UAR", AllocUarIn => AllocUarOut;
}

command! {
    /// DEALLOC_UAR (`MLX5_CMD_OP_DEALLOC_UAR`, 0x803).
    pub struct DeallocUar: OP_DEALLOC_UAR, "DEALLOC_UAR", DeallocUarIn => DeallocUarOut;
}

command! {
    /// ALLOC_PD (`MLX5_CMD_OP_ALLOC_PD`, 0x800).
    pub struct AllocPd: OP_ALLOC_PD, "ALLOC_PD", AllocPdIn => AllocPdOut;
}

command! {
    /// DEALLOC_PD (`MLX5_CMD_OP_DEALLOC_PD`, 0x801).
    pub struct DeallocPd: OP_DEALLOC_PD, "DEALLOC_PD", DeallocPdIn => DeallocPdOut;
}

command! {
    /// CREATE_MKEY (`MLX5_CMD_OP_CREATE_MKEY`, 0x200); the MTT entries
    /// follow the input.
    pub struct CreateMkey: OP_CREATE_MKEY, "CREATE_MKEY", CreateMkeyIn => CreateMkeyOut,
        in_pas true;
}

command! {
    /// DESTROY_MKEY (`MLX5_CMD_OP_DESTROY_MKEY`, 0x202).
    pub struct DestroyMkey: OP_DESTROY_MKEY, "DESTROY_MKEY", DestroyMkeyIn => DestroyMkeyOut;
}

#[cfg(test)]
mod tests {
    use super::super::command;
    use super::super::ifc::Layout;
    use super::*;

    #[test]
    fn keys() {
        assert_eq!(mkey(0x12_3456, 0x78), 0x1234_5678);
        assert_eq!(mkey_index(0x1234_5678), 0x12_3456);
        assert_eq!(mtt_octwords(0), 0);
        assert_eq!(mtt_octwords(3), 2);
        let mut m = Mkc::default();
        m.set_access_mode(0x1d);
        assert_eq!((m.access_mode_4_2, m.access_mode_1_0), (7, 1));
        assert_eq!(m.access_mode(), 0x1d);
    }

    #[test]
    fn mtt_region_known_bytes() {
        let mut mkc = Mkc {
            rw: true,
            rr: true,
            lw: true,
            lr: true,
            qpn: 0xff_ffff,
            mkey_7_0: 0x42,
            pd: 5,
            start_addr: 0x7f00_1234_5000,
            len: 0x2000,
            translations_octword_size: 1,
            log_page_size: 12,
            ..Mkc::default()
        };
        mkc.set_access_mode(ACCESS_MODE_MTT);
        let input = CreateMkeyIn {
            pg_access: false,
            memory_key_mkey_entry: mkc,
            translations_octword_actual_size: 1,
        };
        let mut msg = [0u8; CreateMkeyIn::SIZE + 16];
        let len = command::encode_in::<CreateMkey>(&input, &[0x10_0000, 0x20_0000], &mut msg);
        assert_eq!(len, Ok(288));
        assert_eq!(msg[..4], [2, 0, 0, 0]);
        // mkc at byte 16: rw rr lw lr and access mode 1 in byte 2.
        assert_eq!(msg[16..24], [0, 0, 0x3d, 0, 0xff, 0xff, 0xff, 0x42]);
        assert_eq!(msg[28..32], [0, 0, 0, 5]);
        assert_eq!(msg[32..40], [0, 0, 0x7f, 0, 0x12, 0x34, 0x50, 0]);
        assert_eq!(msg[16 + 0x34..16 + 0x38], [0, 0, 0, 1]);
        assert_eq!(msg[16 + 0x3b], 12);
        assert_eq!(msg[0x60..0x64], [0, 0, 0, 1]);
        assert_eq!(msg[0x110..0x118], [0, 0, 0, 0, 0, 0x10, 0, 0]);
        assert_eq!(CreateMkeyIn::decode(&msg), Ok(input));
    }
}
