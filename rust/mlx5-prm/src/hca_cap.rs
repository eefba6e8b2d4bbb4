// SPDX-License-Identifier: GPL-2.0

//! The general device capabilities (`struct mlx5_ifc_cmd_hca_cap_bits`) and
//! the two commands that read and write them, QUERY_HCA_CAP and
//! SET_HCA_CAP.
//!
//! [`HcaCap`] models the subset a driver needs to run RC verbs (queue and
//! key limits, UAR and BlueFlame geometry, ports, table sizes, transport
//! support) plus every field mlx5_core's `handle_hca_cap` writes. The rest
//! of the 256-byte structure, and the other capability types that share
//! the 4 KiB `capability` union (ODP, atomic, RoCE, ...), are not modelled.
//!
//! QUERY_HCA_CAP's `op_mod` is `cap_type << 1 | mode` ([`query_op_mod`]):
//! mode 0 reads the maximum the device supports, 1 the current setting.
//! SET_HCA_CAP writes the settable fields of the current capabilities;
//! mlx5_core starts from the current values (so that settings it does not
//! touch stay as they are), changes a few and writes the block back. The
//! same is possible here with [`HcaCap::patch`] on the raw capability bytes
//! of a QUERY_HCA_CAP reply; [`SetHcaCapIn::encode`] on its own writes zero
//! to every field [`HcaCap`] does not model.

use super::command::{command, OP_QUERY_HCA_CAP, OP_SET_HCA_CAP};
use super::error::Error;
use super::ifc::{ifc_layout, IfcValue, Layout};

/// Capability type of the general device capabilities: `MLX5_CAP_GENERAL`
/// (`MLX5_SET_HCA_CAP_OP_MOD_GENERAL_DEVICE`).
pub const CAP_GENERAL: u16 = 0x0;
/// Capability type of the ODP capabilities (`MLX5_CAP_ODP`).
pub const CAP_ODP: u16 = 0x2;
/// Capability type of the atomic capabilities (`MLX5_CAP_ATOMIC`).
pub const CAP_ATOMIC: u16 = 0x3;
/// Capability type of the RoCE capabilities (`MLX5_CAP_ROCE`).
pub const CAP_ROCE: u16 = 0x4;
/// Capability type of the second general block (`MLX5_CAP_GENERAL_2`).
pub const CAP_GENERAL_2: u16 = 0x20;
/// QUERY_HCA_CAP mode: the maximum the device supports
/// (`HCA_CAP_OPMOD_GET_MAX`).
pub const CAP_MODE_MAX: u16 = 0;
/// QUERY_HCA_CAP mode: the current setting (`HCA_CAP_OPMOD_GET_CUR`).
pub const CAP_MODE_CUR: u16 = 1;

/// `cmd_hca_cap.port_type`: InfiniBand (`MLX5_CAP_PORT_TYPE_IB`).
pub const PORT_TYPE_IB: u8 = 0x0;
/// `cmd_hca_cap.port_type`: Ethernet (`MLX5_CAP_PORT_TYPE_ETH`).
pub const PORT_TYPE_ETH: u8 = 0x1;
/// `cmd_hca_cap.cmdif_checksum`: the device does not check command
/// signatures (`MLX5_CMD_HCA_CAP_CMDIF_CHECKSUM_DISABLED`); mlx5_core sets
/// this.
pub const CMDIF_CHECKSUM_DISABLED: u8 = 0x0;
/// `cmdif_checksum`: as after reset
/// (`MLX5_CMD_HCA_CAP_CMDIF_CHECKSUM_INITIAL_STATE`).
pub const CMDIF_CHECKSUM_INITIAL_STATE: u8 = 0x1;
/// `cmdif_checksum`: entries and mailboxes must carry good signatures
/// (`MLX5_CMD_HCA_CAP_CMDIF_CHECKSUM_ENABLED`).
pub const CMDIF_CHECKSUM_ENABLED: u8 = 0x3;

/// The smallest P_Key table, for `pkey_table_size` 0
/// (`MLX5_MIN_PKEY_TABLE_SIZE`).
pub const MIN_PKEY_TABLE_SIZE: u32 = 128;
/// The largest `pkey_table_size` (`MLX5_MAX_LOG_PKEY_TABLE`).
pub const MAX_LOG_PKEY_TABLE: u16 = 5;

/// QUERY_HCA_CAP's `op_mod` for capability type `cap_type` (`CAP_*`) in
/// mode `mode` ([`CAP_MODE_MAX`] or [`CAP_MODE_CUR`]).
pub fn query_op_mod(cap_type: u16, mode: u16) -> u16 {
    cap_type << 1 | (mode & 1)
}

/// SET_HCA_CAP's `op_mod` for capability type `cap_type`.
pub fn set_op_mod(cap_type: u16) -> u16 {
    cap_type << 1
}

/// P_Key table entries for a `pkey_table_size` value (128 << value), 0 for
/// a value above [`MAX_LOG_PKEY_TABLE`].
pub fn pkey_table_len(pkey_table_size: u16) -> u32 {
    if pkey_table_size > MAX_LOG_PKEY_TABLE {
        0
    } else {
        MIN_PKEY_TABLE_SIZE << pkey_table_size
    }
}

/// The `pkey_table_size` value for a table of `entries` entries, if it is
/// one of the sizes the field can express (128 to 4096, powers of two).
pub fn pkey_table_size_for(entries: u32) -> Option<u16> {
    (0..=MAX_LOG_PKEY_TABLE).find(|&v| pkey_table_len(v) == entries)
}

/// GID table entries for a `gid_table_size` value (8 << value), 0 for a
/// value above 4.
pub fn gid_table_len(gid_table_size: u16) -> u32 {
    if gid_table_size > 4 {
        0
    } else {
        8 << gid_table_size
    }
}

ifc_layout! {
    /// The general device capabilities (capability type [`CAP_GENERAL`]),
    /// the fields a driver needs for RC verbs and those mlx5_core sets.
    /// `log_*` fields are log2 of a count or size; `max_*` are plain counts.
    pub struct HcaCap = "cmd_hca_cap", bits 0x800 {
        /// Report native port numbers to all functions (set by mlx5_core
        /// when supported).
        abs_native_port_num: bool = [0x7, 1],
        /// Raise an event when a function's vHCA asks for teardown.
        event_on_vhca_state_teardown_request: bool = [0x23, 1],
        /// Raise an event when a function's vHCA becomes in use.
        event_on_vhca_state_in_use: bool = [0x24, 1],
        /// Raise an event when a function's vHCA becomes active.
        event_on_vhca_state_active: bool = [0x25, 1],
        /// Raise an event when a function's vHCA is allocated.
        event_on_vhca_state_allocated: bool = [0x26, 1],
        /// This function's vHCA id.
        vhca_id: u16 = [0x30, 0x10],
        /// Log2 of the most WQEs in an SRQ.
        log_max_srq_sz: u8 = [0x80, 8],
        /// Log2 of the most WQEs in a QP's send or receive queue.
        log_max_qp_sz: u8 = [0x88, 8],
        /// Log2 of the number of QPs (settable; mlx5_core may lower it).
        log_max_qp: u8 = [0x9b, 5],
        /// Log2 of the number of SRQs.
        log_max_srq: u8 = [0xab, 5],
        /// Log2 of the most CQEs in a CQ.
        log_max_cq_sz: u8 = [0xc8, 8],
        /// Log2 of the number of CQs.
        log_max_cq: u8 = [0xdb, 5],
        /// Log2 of the most EQEs in an EQ.
        log_max_eq_sz: u8 = [0xe0, 8],
        /// Memory keys may use relaxed ordering for writes.
        relaxed_ordering_write: bool = [0xe8, 1],
        /// Log2 of the number of memory keys.
        log_max_mkey: u8 = [0xea, 6],
        /// The device supports fast teardown.
        fast_teardown: bool = [0xfb, 1],
        /// Log2 of the number of EQs.
        log_max_eq: u8 = [0xfc, 4],
        /// The most indirection levels of an indirect memory key.
        max_indirection: u8 = [0x100, 8],
        /// Log2 of the largest memory region or window, in bytes.
        log_max_mrw_sz: u8 = [0x109, 7],
        /// The device supports force teardown.
        force_teardown: bool = [0x110, 1],
        /// Log2 of the most entries in a KLM list.
        log_max_klm_list_size: u8 = [0x11a, 6],
        /// MANAGE_PAGES may take back every page at once (settable).
        release_all_pages: bool = [0x145, 1],
        /// Log2 of the most outstanding RDMA read / atomic requests an RC
        /// QP may issue (`max_rd_atomic`).
        log_max_ra_req_qp: u8 = [0x14a, 6],
        /// Log2 of the most outstanding RDMA read / atomic requests an RC
        /// QP may serve (`max_dest_rd_atomic`).
        log_max_ra_res_qp: u8 = [0x15a, 6],
        /// CQEs are written in 128-byte cache lines (settable).
        cache_line_128byte: bool = [0x164, 1],
        /// GID table size, encoded (see [`gid_table_len`]).
        gid_table_size: u16 = [0x170, 0x10],
        /// The most QPs attached to one multicast group.
        max_qp_cnt: u16 = [0x186, 0xa],
        /// P_Key table size, encoded (see [`pkey_table_len`]); mlx5_core
        /// sets 128 entries.
        pkey_table_size: u16 = [0x190, 0x10],
        /// Local CA ACK delay, for the QP's ACK timeout.
        local_ca_ack_delay: u8 = [0x1ab, 5],
        /// Link layer of the ports (`PORT_TYPE_*`).
        port_type: u8 = [0x1b6, 2],
        /// Number of physical ports.
        num_ports: u8 = [0x1b8, 8],
        /// Log2 of the largest message, in bytes.
        log_max_msg: u8 = [0x1c3, 5],
        /// Bit mask of supported static rates.
        stat_rate_support: u16 = [0x1e0, 0x10],
        /// Raise an event before a PCI-synchronised firmware update
        /// (settable).
        pci_sync_for_fw_update_event: bool = [0x1f1, 1],
        /// CQE format version (0 or 1).
        cqe_version: u8 = [0x1fc, 4],
        /// Command signature checking (`CMDIF_CHECKSUM_*`; mlx5_core sets
        /// it to [`CMDIF_CHECKSUM_DISABLED`]).
        cmdif_checksum: u8 = [0x210, 2],
        /// DC transport is supported (settable).
        dct: bool = [0x21a, 1],
        /// RoCE is supported / enabled (settable when
        /// `roce_rw_supported`).
        roce: bool = [0x21d, 1],
        /// Atomic operations are supported (details in the atomic
        /// capabilities).
        atomic: bool = [0x21e, 1],
        /// CQs may ignore overrun (`cqc.oi`).
        cq_oi: bool = [0x220, 1],
        /// CQs can be resized.
        cq_resize: bool = [0x221, 1],
        /// CQ moderation is supported.
        cq_moderation: bool = [0x222, 1],
        /// XRC transport is supported.
        xrc: bool = [0x23c, 1],
        /// UD transport is supported.
        ud: bool = [0x23d, 1],
        /// UC transport is supported.
        uc: bool = [0x23e, 1],
        /// RC transport is supported.
        rc: bool = [0x23f, 1],
        /// 4 KiB UAR pages inside larger system pages (settable).
        uar_4k: bool = [0x240, 1],
        /// Size of the BAR area holding UAR pages, as log2 of its size in
        /// MiB (mlx5_core does not read it).
        uar_sz: u8 = [0x24a, 6],
        /// Log2 of the smallest page size, in bytes, that memory keys and
        /// queue buffers may use (mlx5_ib's `page_size_cap`).
        log_pg_sz: u8 = [0x258, 8],
        /// BlueFlame is supported.
        bf: bool = [0x260, 1],
        /// Memory keys may be chosen by the driver (settable).
        mkey_by_name: bool = [0x266, 1],
        /// Log2 of a BlueFlame register's size in bytes (two buffers).
        log_bf_reg_size: u8 = [0x26b, 5],
        /// Largest send WQE, in bytes.
        max_wqe_sz_sq: u16 = [0x290, 0x10],
        /// Page management by vHCA id instead of function id (settable).
        icm_mng_function_id_mode: bool = [0x2a0, 1],
        /// Largest receive WQE, in bytes.
        max_wqe_sz_rq: u16 = [0x2b0, 0x10],
        /// The most multicast groups a QP may join.
        max_qp_mcg: u32 = [0x2e7, 0x19],
        /// Log2 of the number of multicast groups.
        log_max_mcg: u8 = [0x318, 8],
        /// Log2 of the number of protection domains.
        log_max_pd: u8 = [0x32b, 5],
        /// Reset through PCI hot reset is supported (settable).
        pcie_reset_using_hotreset_method: bool = [0x335, 1],
        /// PCI-synchronised firmware update may unload the driver
        /// (settable).
        pci_sync_for_fw_update_with_driver_unload: bool = [0x336, 1],
        /// Log2 of the number of XRC domains.
        log_max_xrcd: u8 = [0x33b, 5],
        /// `roce` may be changed with SET_HCA_CAP.
        roce_rw_supported: bool = [0x3a1, 1],
        /// vHCA state events are supported / enabled (settable).
        vhca_state: bool = [0x3ea, 1],
        /// Log2 of the unicast MAC list length (settable).
        log_max_current_uc_list: u8 = [0x3fb, 5],
        /// Timestamp formats the send queue supports
        /// (`MLX5_TIMESTAMP_FORMAT_CAP_*`).
        sq_ts_format: u8 = [0x440, 2],
        /// Timestamp formats the receive queue supports.
        rq_ts_format: u8 = [0x442, 2],
        /// The most EQs (0: `1 << log_max_eq`).
        max_num_eqs: u16 = [0x470, 0x10],
        /// Log2 of the UAR page size in 4 KiB units (settable; mlx5_core
        /// sets `PAGE_SHIFT - 12`).
        log_uar_page_sz: u16 = [0x490, 0x10],
        /// UARs per system page (with `uar_4k`).
        num_of_uars_per_page: u32 = [0x520, 0x20],
        /// Ports this vHCA uses (settable, up to the maximum).
        num_vhca_ports: u8 = [0x610, 8],
        /// INIT_HCA takes an `sw_owner_id`.
        sw_owner_id: bool = [0x61e, 1],
        /// MSI-X vectors to share among VFs (settable).
        num_total_dynamic_vf_msix: u32 = [0x708, 0x18],
    }
}

/// Size of the `capability` union of QUERY_HCA_CAP and SET_HCA_CAP
/// (`MLX5_UN_SZ_BYTES(hca_cap_union)`).
pub const CAPABILITY_SIZE: usize = 0x1000;

impl HcaCap {
    /// Writes the modelled fields into an existing capability block `cap`
    /// (for example the current capabilities from a QUERY_HCA_CAP reply,
    /// copied into a SET_HCA_CAP input), leaving every other bit as it is.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] if `cap` is shorter than [`HcaCap::SIZE`];
    /// nothing is written then.
    pub fn patch(&self, cap: &mut [u8]) -> Result<(), Error> {
        let cap = cap.get_mut(..Self::SIZE).ok_or(Error::OutOfRange)?;
        self.write_bits(cap, 0, Self::SIZE * 8);
        Ok(())
    }
}

ifc_layout! {
    /// QUERY_HCA_CAP input.
    pub struct QueryHcaCapIn = "query_hca_cap_in", bits 0x80, opcode OP_QUERY_HCA_CAP {
        /// Capability type and mode ([`query_op_mod`]).
        op_mod: u16 = [0x30, 0x10],
        /// Query another function's capabilities (a PF for its VFs).
        other_function: bool = [0x40, 1],
        /// The other function, with `other_function`.
        function_id: u16 = [0x50, 0x10],
    }
}

ifc_layout! {
    /// QUERY_HCA_CAP output: the header and a 4 KiB `capability` union, of
    /// which the general capabilities are decoded (meaningful when the
    /// query was for [`CAP_GENERAL`]).
    pub struct QueryHcaCapOut = "query_hca_cap_out", bits 0x8080 {
        /// `capability.cmd_hca_cap`.
        capability: HcaCap = [0x80, 0x800],
    }
}

ifc_layout! {
    /// SET_HCA_CAP input: the header and a 4 KiB `capability` union
    /// holding the general capabilities to set.
    pub struct SetHcaCapIn = "set_hca_cap_in", bits 0x8080, opcode OP_SET_HCA_CAP {
        /// Capability type ([`set_op_mod`]).
        op_mod: u16 = [0x30, 0x10],
        /// Set another function's capabilities.
        other_function: bool = [0x40, 1],
        /// The other function, with `other_function`.
        function_id: u16 = [0x50, 0x10],
        /// `capability.cmd_hca_cap`.
        capability: HcaCap = [0x80, 0x800],
    }
}

ifc_layout! {
    /// SET_HCA_CAP output: the header only.
    pub struct SetHcaCapOut = "set_hca_cap_out", bits 0x80 {}
}

/// Byte offset of the `capability` union in QUERY_HCA_CAP's output and
/// SET_HCA_CAP's input.
pub const CAPABILITY_OFFSET: usize = 0x10;

command! {
    /// QUERY_HCA_CAP (`MLX5_CMD_OP_QUERY_HCA_CAP`, 0x100).
    pub struct QueryHcaCap: OP_QUERY_HCA_CAP, "QUERY_HCA_CAP", QueryHcaCapIn => QueryHcaCapOut;
}

command! {
    /// SET_HCA_CAP (`MLX5_CMD_OP_SET_HCA_CAP`, 0x109).
    pub struct SetHcaCap: OP_SET_HCA_CAP, "SET_HCA_CAP", SetHcaCapIn => SetHcaCapOut;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_mods() {
        assert_eq!(query_op_mod(CAP_GENERAL, CAP_MODE_CUR), 1);
        assert_eq!(query_op_mod(CAP_ROCE, CAP_MODE_MAX), 8);
        assert_eq!(set_op_mod(CAP_ATOMIC), 6);
    }

    #[test]
    fn table_sizes() {
        assert_eq!(pkey_table_len(0), 128);
        assert_eq!(pkey_table_len(5), 4096);
        assert_eq!(pkey_table_len(6), 0);
        assert_eq!(pkey_table_size_for(128), Some(0));
        assert_eq!(pkey_table_size_for(1024), Some(3));
        assert_eq!(pkey_table_size_for(100), None);
        assert_eq!(gid_table_len(4), 128);
        assert_eq!(gid_table_len(5), 0);
    }

    #[test]
    fn known_bits() {
        let cap = HcaCap {
            log_max_qp: 0x12,
            cmdif_checksum: 3,
            rc: true,
            log_uar_page_sz: 0xabcd,
            ..HcaCap::default()
        };
        let mut b = [0u8; HcaCap::SIZE];
        cap.encode(&mut b).unwrap();
        // log_max_qp: bits 0x9b..0xa0, the low 5 bits of byte 0x13.
        assert_eq!(b[0x13], 0x12);
        // cmdif_checksum: bits 0x210..0x212, the top two of byte 0x42.
        assert_eq!(b[0x42], 0xc0);
        // rc: bit 0x23f, the lowest of byte 0x47.
        assert_eq!(b[0x47], 0x01);
        assert_eq!(b[0x92..0x94], [0xab, 0xcd]);
        assert_eq!(b.iter().filter(|&&x| x != 0).count(), 5);
        assert_eq!(HcaCap::decode(&b), Ok(cap));
    }

    #[test]
    fn patch_keeps_unmodelled_bits() {
        let mut cur = [0xffu8; CAPABILITY_SIZE];
        let mut cap = HcaCap::decode(&cur).unwrap();
        cap.cmdif_checksum = CMDIF_CHECKSUM_DISABLED;
        cap.patch(&mut cur).unwrap();
        assert_eq!(cur[0x42], 0x3f);
        assert!(cur.iter().enumerate().all(|(i, &x)| i == 0x42 || x == 0xff));
        assert_eq!(cap.patch(&mut cur[..255]), Err(Error::OutOfRange));
        assert_eq!(QueryHcaCapOut::SIZE, 16 + CAPABILITY_SIZE);
    }
}
