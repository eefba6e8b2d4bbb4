// SPDX-License-Identifier: GPL-2.0

//! How a function's firmware is built ([`FwConfig`]): its version, timing,
//! queue geometry, page numbers, UARs, vectors, identity and the failures
//! it injects.

use super::super::prm::init_seg::FwRev;
use super::port;
use super::Readiness;
#[cfg(doc)]
use super::{pages, reject::Reject, Firmware};

/// How the device is built: its version, timing, geometry and the page
/// numbers it asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FwConfig {
    /// Firmware version in `fw_rev` / `cmdif_rev_fw_sub`.
    pub fw_rev: FwRev,
    /// When `initializing` clears, in each of its two waits.
    pub ready: Readiness,
    /// log2 of the command queue's entries (`cmdq_addr_l_sz` bits 7:4);
    /// at most 5 (32 entries, the width of the doorbell).
    pub log_cmdq_size: u8,
    /// log2 of the distance between entries (bits 3:0); at least 6.
    pub log_cmdq_stride: u8,
    /// Pages the device asks for before QUERY_HCA_CAP (QUERY_PAGES boot).
    pub boot_pages: u32,
    /// Further pages it asks for before INIT_HCA (QUERY_PAGES init).
    pub init_pages: u32,
    /// Pages each live EQ, CQ and QP costs after INIT_HCA (asked for with
    /// a PAGE_REQUEST EQE when the device has too few).
    pub pages_per_queue: u32,
    /// Pages for the translation tables of memory keys with scattered
    /// pages, kept free beyond the others: asked for with the init pages
    /// (QUERY_PAGES init), and after INIT_HCA the table pages in use are
    /// added to the need rounded up to a multiple of this many, so the
    /// device asks for more a reserve at a time (one PAGE_REQUEST EQE per
    /// `mtt_reserve` table pages, not one per memory key) and, once the
    /// driver answers, holds at least this many free pages besides its
    /// boot, init and queue pages. 0: each table page is asked for on its
    /// own. The model keeps nothing else in the pages it holds, so a table
    /// takes any held page not in use; a CREATE_MKEY that finds too few
    /// fails ([`Reject::MttNoPages`]). One page holds the table of up to
    /// 2 MiB of 4 KiB pages; a longer list takes one page per 2 MiB and a
    /// directory page.
    pub mtt_reserve: u32,
    /// UAR pages in the BAR; index 0 is never handed out (so that an unset
    /// `uar_page` field is caught), so at most `uars - 1` are allocated.
    /// At most 128.
    pub uars: u32,
    /// The DMA address at which the embedder backs UAR page 0 (see the
    /// module documentation).
    pub uar_base: u64,
    /// MSI-X vectors of the function: an EQ's `intr` must be below.
    pub msix_vectors: u16,
    /// The BlueFlame register (0 to 3) of its UAR page that a QP created
    /// by command rings; the model ties a QP to one register.
    pub qp_bfreg: u8,
    /// Write [`pages::STAMP`] over every page received.
    pub stamp_pages: bool,
    /// Check every queue entry's signature (mlx5_core always signs
    /// entries; mailbox signatures are checked only while
    /// `cmdif_checksum` is enabled).
    pub check_entry_signature: bool,
    /// Nanoseconds per tick of `health_counter` (0: it moves only when a
    /// command runs).
    pub health_tick_ns: u64,
    /// Fail the first [`FwConfig::fail_count`] commands with this opcode
    /// with [`Reject::Injected`] (0: none), so that a driver's error path
    /// can be tested on an otherwise faultless device.
    pub fail_opcode: u16,
    /// How many commands [`FwConfig::fail_opcode`] fails.
    pub fail_count: u32,
    /// The node GUID, with the instance's fabric index ORed into bits
    /// 15:8 (see [`port`]); the port GUID is one more.
    pub node_guid: u64,
}

impl FwConfig {
    /// A ConnectX-5-like function: firmware 16.35.1012, ready at once, 32
    /// entries of 64 bytes, 8 boot and 16 init pages, 1 page per queue, no
    /// reserve for translation tables (they take from the boot and init
    /// pages, which the model leaves unused, and each is asked for again
    /// by page request), 16 UARs from DMA address 0, 64 vectors,
    /// BlueFlame register 0, pages stamped, entry signatures checked, a
    /// health tick per millisecond, node GUID 0x0002c90300a00000.
    pub const DEFAULT: FwConfig = FwConfig {
        fw_rev: FwRev {
            major: 16,
            minor: 35,
            subminor: 1012,
        },
        ready: Readiness::AfterReads(0),
        log_cmdq_size: 5,
        log_cmdq_stride: 6,
        boot_pages: 8,
        init_pages: 16,
        pages_per_queue: 1,
        mtt_reserve: 0,
        uars: 16,
        uar_base: 0,
        msix_vectors: 64,
        qp_bfreg: 0,
        stamp_pages: true,
        check_entry_signature: true,
        health_tick_ns: 1_000_000,
        fail_opcode: 0,
        fail_count: 0,
        node_guid: port::DEFAULT_NODE_GUID,
    };
}

impl Default for FwConfig {
    fn default() -> Self {
        FwConfig::DEFAULT
    }
}
