// SPDX-License-Identifier: GPL-2.0

//! Port identity through the vport commands: QUERY_HCA_VPORT_CONTEXT (the
//! InfiniBand view of a port: state, LID, SM, GUIDs, capability mask),
//! QUERY_HCA_VPORT_GID (the port's GID table) and QUERY_NIC_VPORT_CONTEXT
//! (the NIC view: RoCE, MTU, GUIDs, permanent MAC).
//!
//! A function queries its own vport with `other_vport` 0 and
//! `vport_number` 0; `port_num` names the port on a dual-port function and
//! is left 0 on a single-port one (mlx5_core sets it only when
//! `num_ports` is 2). The states in `hca_vport_context` are numbered as
//! `enum ib_port_state` and `enum ib_port_phys_state` (mlx5_ib copies
//! `vport_state` and `port_physical_state` into `ib_port_attr`), the
//! capability mask is the PortInfo `CapabilityMask` (`IB_PORT_*` of
//! ib_mad.h).
//!
//! Two layouts stop short of their mlx5_ifc struct, as `query_qp_out`
//! does (see `cmd_qp`):
//!
//! - [`HcaVportContext`] ends after its last field,
//!   `pkey_violation_counter` (bit 0x360, 108 bytes): the remaining 404
//!   bytes of the 512-byte `hca_vport_context` are reserved. That keeps
//!   QUERY_HCA_VPORT_CONTEXT's output at 124 bytes, within the fixed
//!   layouts a driver decodes on its stack; a driver may still ask for the
//!   whole 528 bytes mlx5_core asks for (the device zero-fills the rest).
//! - [`QueryHcaVportGidOut`] goes one GID past `query_hca_vport_gid_out`,
//!   whose `gid[]` is a flexible array: it carries the first GID returned
//!   (the one asked for, or entry 0 when `gid_index` is
//!   [`GID_INDEX_ALL`]). The others follow it, 16 bytes each
//!   ([`GID_SIZE`]).

use super::command::OP_QUERY_NIC_VPORT_CONTEXT;
use super::command::{command, OP_QUERY_HCA_VPORT_CONTEXT, OP_QUERY_HCA_VPORT_GID};
use super::ifc::ifc_layout;

/// `port_state` / `vport_state`: the link is down (`IB_PORT_DOWN`).
pub const PORT_STATE_DOWN: u8 = 1;
/// `port_state` / `vport_state`: the link is up, the SM has not configured
/// the port yet (`IB_PORT_INIT`).
pub const PORT_STATE_INIT: u8 = 2;
/// `port_state` / `vport_state`: configured, not yet active
/// (`IB_PORT_ARMED`).
pub const PORT_STATE_ARMED: u8 = 3;
/// `port_state` / `vport_state`: the port passes traffic
/// (`IB_PORT_ACTIVE`).
pub const PORT_STATE_ACTIVE: u8 = 4;

/// `port_physical_state`: the link is asleep (`IB_PORT_PHYS_STATE_SLEEP`).
pub const PHYS_STATE_SLEEP: u8 = 1;
/// `port_physical_state`: looking for a peer, no link
/// (`IB_PORT_PHYS_STATE_POLLING`).
pub const PHYS_STATE_POLLING: u8 = 2;
/// `port_physical_state`: disabled (`IB_PORT_PHYS_STATE_DISABLED`).
pub const PHYS_STATE_DISABLED: u8 = 3;
/// `port_physical_state`: the link is up (`IB_PORT_PHYS_STATE_LINK_UP`).
pub const PHYS_STATE_LINK_UP: u8 = 5;

/// `vport_state_policy`: the vport is held down (`MLX5_POLICY_DOWN`).
pub const POLICY_DOWN: u8 = 0;
/// `vport_state_policy`: the vport is held up (`MLX5_POLICY_UP`).
pub const POLICY_UP: u8 = 1;
/// `vport_state_policy`: the vport follows the physical port
/// (`MLX5_POLICY_FOLLOW`).
pub const POLICY_FOLLOW: u8 = 2;

/// PortInfo capability: the port runs the subnet manager (`IB_PORT_SM`).
pub const PORT_CAP_SM: u32 = 1 << 1;
/// PortInfo capability: the port reports a system image GUID
/// (`IB_PORT_SYS_IMAGE_GUID_SUP`).
pub const PORT_CAP_SYS_IMAGE_GUID_SUP: u32 = 1 << 11;

/// `allowed_list_type`: unicast MAC list (`MLX5_NVPRT_LIST_TYPE_UC`).
pub const LIST_TYPE_UC: u8 = 0x0;
/// `allowed_list_type`: multicast MAC list (`MLX5_NVPRT_LIST_TYPE_MC`).
pub const LIST_TYPE_MC: u8 = 0x1;
/// `allowed_list_type`: VLAN list (`MLX5_NVPRT_LIST_TYPE_VLAN`).
pub const LIST_TYPE_VLAN: u8 = 0x2;

/// `gid_index` that asks for the whole GID table (mlx5_core's 0xffff).
pub const GID_INDEX_ALL: u16 = 0xffff;
/// Bytes of one GID (`union ib_gid`).
pub const GID_SIZE: usize = 16;
/// The InfiniBand default subnet prefix, fe80::/64 (the link-local
/// prefix of a port's GID 0 until an SM assigns another).
pub const DEFAULT_SUBNET_PREFIX: u64 = 0xfe80_0000_0000_0000;

/// A GID from its subnet prefix and interface ID (a port GUID): both
/// big-endian, the prefix first.
pub fn gid(subnet_prefix: u64, interface_id: u64) -> [u8; GID_SIZE] {
    let mut g = [0u8; GID_SIZE];
    g[..8].copy_from_slice(&subnet_prefix.to_be_bytes());
    g[8..].copy_from_slice(&interface_id.to_be_bytes());
    g
}

ifc_layout! {
    /// The InfiniBand view of a vport's port, up to its last field (see
    /// the module documentation: the reserved tail of the 512-byte struct
    /// is left out).
    pub struct HcaVportContext = "hca_vport_context", bits 0x360 {
        /// Which fields a MODIFY_HCA_VPORT_CONTEXT changes; 0 in a query.
        field_select: u32 = [0x0, 0x20],
        /// The SM handles this vport's virtualisation.
        sm_virt_aware: bool = [0x100, 1],
        /// The vport has a subnet management interface (QP0).
        has_smi: bool = [0x101, 1],
        /// The vport may use raw packet QPs.
        has_raw: bool = [0x102, 1],
        /// Every packet to the vport needs a GRH.
        grh_required: bool = [0x103, 1],
        /// Planes of a multi-plane port (0: not one).
        num_port_plane: u8 = [0x108, 8],
        /// Physical link state (`PHYS_STATE_*`).
        port_physical_state: u8 = [0x110, 4],
        /// How the vport state follows the port (`POLICY_*`).
        vport_state_policy: u8 = [0x114, 4],
        /// The port's logical state (`PORT_STATE_*`).
        port_state: u8 = [0x118, 4],
        /// The vport's logical state (`PORT_STATE_*`), what mlx5_ib
        /// reports as the port state.
        vport_state: u8 = [0x11c, 4],
        /// GUID shared by the ports of one system (the adapter).
        system_image_guid: u64 = [0x140, 0x40],
        /// The port's GUID: the interface ID of its GID 0.
        port_guid: u64 = [0x180, 0x40],
        /// The node's (adapter's) GUID.
        node_guid: u64 = [0x1c0, 0x40],
        /// PortInfo `CapabilityMask` (`PORT_CAP_*`).
        cap_mask1: u32 = [0x200, 0x20],
        /// Bits of `cap_mask1` a MODIFY_HCA_VPORT_CONTEXT may change.
        cap_mask1_field_select: u32 = [0x220, 0x20],
        /// PortInfo `CapabilityMask2`, valid when `cap_mask1` has
        /// `IB_PORT_CAP_MASK2_SUP`.
        cap_mask2: u32 = [0x240, 0x20],
        /// Bits of `cap_mask2` a MODIFY_HCA_VPORT_CONTEXT may change.
        cap_mask2_field_select: u32 = [0x260, 0x20],
        /// The port's base LID.
        lid: u16 = [0x300, 0x10],
        /// PortInfo `InitTypeReply`.
        init_type_reply: u8 = [0x314, 4],
        /// LID mask control: the port answers 2^lmc LIDs from `lid`.
        lmc: u8 = [0x318, 3],
        /// The subnet timeout, 4.096 µs × 2^value.
        subnet_timeout: u8 = [0x31b, 5],
        /// The LID of the subnet manager.
        sm_lid: u16 = [0x320, 0x10],
        /// The service level to reach the subnet manager.
        sm_sl: u8 = [0x330, 4],
        /// Datagrams dropped for a wrong Q_Key.
        qkey_violation_counter: u16 = [0x340, 0x10],
        /// Packets dropped for a wrong P_Key.
        pkey_violation_counter: u16 = [0x350, 0x10],
    }
}

ifc_layout! {
    /// QUERY_HCA_VPORT_CONTEXT input.
    pub struct QueryHcaVportContextIn = "query_hca_vport_context_in", bits 0x80,
        opcode OP_QUERY_HCA_VPORT_CONTEXT {
        /// Query another function's vport (a vport group manager only).
        other_vport: bool = [0x40, 1],
        /// The port, 1 or 2 on a dual-port function; 0 on a single-port
        /// one.
        port_num: u8 = [0x4c, 4],
        /// The other vport (with `other_vport`).
        vport_number: u16 = [0x50, 0x10],
    }
}

ifc_layout! {
    /// QUERY_HCA_VPORT_CONTEXT output: the header and the context (its
    /// mlx5_ifc member is `hca_vport_context`), 124 bytes (see the module
    /// documentation).
    pub struct QueryHcaVportContextOut = "query_hca_vport_context_out", bits 0x3e0 {
        /// The vport's context (`hca_vport_context`).
        context: HcaVportContext = [0x80, 0x360],
    }
}

ifc_layout! {
    /// QUERY_HCA_VPORT_GID input.
    pub struct QueryHcaVportGidIn = "query_hca_vport_gid_in", bits 0x80,
        opcode OP_QUERY_HCA_VPORT_GID {
        /// Query another function's vport (a vport group manager only).
        other_vport: bool = [0x40, 1],
        /// The port, as in [`QueryHcaVportContextIn::port_num`].
        port_num: u8 = [0x4c, 4],
        /// The other vport (with `other_vport`).
        vport_number: u16 = [0x50, 0x10],
        /// The GID table entry, or [`GID_INDEX_ALL`] for all of them.
        gid_index: u16 = [0x70, 0x10],
    }
}

ifc_layout! {
    /// QUERY_HCA_VPORT_GID output: the header, the count and the first
    /// GID returned (see the module documentation); with
    /// [`GID_INDEX_ALL`] the other entries follow, [`GID_SIZE`] bytes each.
    pub struct QueryHcaVportGidOut = "query_hca_vport_gid_out", bits 0x100 {
        /// How many GIDs the output carries.
        gids_num: u16 = [0x60, 0x10],
        /// The first of them, network order (`gid[0]`).
        gid: [u8; GID_SIZE] = [0x80, 8],
    }
}

ifc_layout! {
    /// The NIC view of a vport (the fields this crate models).
    pub struct NicVportContext = "nic_vport_context", bits 0x800 {
        /// The least a send WQE must inline (`MLX5_INLINE_MODE_*`).
        min_wqe_inline_mode: u8 = [0x5, 3],
        /// RoCE is enabled on the vport.
        roce_en: bool = [0x1f, 1],
        /// The MTU in bytes.
        mtu: u16 = [0x130, 0x10],
        /// As in [`HcaVportContext::system_image_guid`].
        system_image_guid: u64 = [0x140, 0x40],
        /// As in [`HcaVportContext::port_guid`].
        port_guid: u64 = [0x180, 0x40],
        /// As in [`HcaVportContext::node_guid`].
        node_guid: u64 = [0x1c0, 0x40],
        /// Datagrams dropped for a wrong Q_Key.
        qkey_violation_counter: u16 = [0x340, 0x10],
        /// Receive every unicast packet.
        promisc_uc: bool = [0x780, 1],
        /// Receive every multicast packet.
        promisc_mc: bool = [0x781, 1],
        /// Receive every packet.
        promisc_all: bool = [0x782, 1],
        /// Which list follows the context (`LIST_TYPE_*`).
        allowed_list_type: u8 = [0x785, 3],
        /// Entries of that list.
        allowed_list_size: u16 = [0x790, 0x10],
        /// The vport's factory MAC address, network order
        /// (`permanent_address.mac_addr_47_32` and `.mac_addr_31_0`).
        permanent_address: [u8; 6] = [0x7b0, 8],
    }
}

ifc_layout! {
    /// QUERY_NIC_VPORT_CONTEXT input.
    pub struct QueryNicVportContextIn = "query_nic_vport_context_in", bits 0x80,
        opcode OP_QUERY_NIC_VPORT_CONTEXT {
        /// Query another function's vport (an eswitch manager only).
        other_vport: bool = [0x40, 1],
        /// The other vport (with `other_vport`).
        vport_number: u16 = [0x50, 0x10],
        /// Which address list to return after the context (`LIST_TYPE_*`).
        allowed_list_type: u8 = [0x65, 3],
    }
}

ifc_layout! {
    /// QUERY_NIC_VPORT_CONTEXT output: the header and the context (its
    /// mlx5_ifc member is `nic_vport_context`), 272 bytes; an address list
    /// (`current_uc_mac_address[]`) may follow.
    pub struct QueryNicVportContextOut = "query_nic_vport_context_out", bits 0x880 {
        /// The vport's context (`nic_vport_context`).
        context: NicVportContext = [0x80, 0x800],
    }
}

command! {
    /// QUERY_HCA_VPORT_CONTEXT (`MLX5_CMD_OP_QUERY_HCA_VPORT_CONTEXT`,
    /// 0x762).
    pub struct QueryHcaVportContext: OP_QUERY_HCA_VPORT_CONTEXT, "QUERY_HCA_VPORT_CONTEXT",
        QueryHcaVportContextIn => QueryHcaVportContextOut;
}

command! {
    /// QUERY_HCA_VPORT_GID (`MLX5_CMD_OP_QUERY_HCA_VPORT_GID`, 0x764).
    pub struct QueryHcaVportGid: OP_QUERY_HCA_VPORT_GID, "QUERY_HCA_VPORT_GID",
        QueryHcaVportGidIn => QueryHcaVportGidOut;
}

command! {
    /// QUERY_NIC_VPORT_CONTEXT (`MLX5_CMD_OP_QUERY_NIC_VPORT_CONTEXT`,
    /// 0x754).
    pub struct QueryNicVportContext: OP_QUERY_NIC_VPORT_CONTEXT, "QUERY_NIC_VPORT_CONTEXT",
        QueryNicVportContextIn => QueryNicVportContextOut;
}

#[cfg(test)]
mod tests {
    use super::super::command;
    use super::super::ifc::Layout;
    use super::*;

    #[test]
    fn sizes() {
        // MLX5_ST_SZ_BYTES of the inputs; the outputs as the module
        // documentation says.
        assert_eq!(QueryHcaVportContextIn::SIZE, 16);
        assert_eq!(QueryHcaVportGidIn::SIZE, 16);
        assert_eq!(QueryNicVportContextIn::SIZE, 16);
        assert_eq!(HcaVportContext::SIZE, 108);
        assert_eq!(QueryHcaVportContextOut::SIZE, 16 + 108);
        assert_eq!(QueryHcaVportGidOut::SIZE, 16 + GID_SIZE);
        assert_eq!(NicVportContext::SIZE, 256);
        assert_eq!(QueryNicVportContextOut::SIZE, 272);
    }

    #[test]
    fn inputs_known_bytes() {
        let input = QueryHcaVportContextIn {
            other_vport: true,
            port_num: 2,
            vport_number: 0x1234,
        };
        let mut b = [0xffu8; 16];
        let len = command::encode_in::<QueryHcaVportContext>(&input, &[], &mut b).unwrap();
        assert_eq!(len, 16);
        // Opcode 0x762; other_vport is bit 31 of dword 2, port_num bits
        // 19:16, vport_number bits 15:0.
        assert_eq!(
            b,
            [7, 0x62, 0, 0, 0, 0, 0, 0, 0x80, 2, 0x12, 0x34, 0, 0, 0, 0]
        );
        assert_eq!(QueryHcaVportContextIn::decode(&b), Ok(input));

        let input = QueryHcaVportGidIn {
            other_vport: false,
            port_num: 1,
            vport_number: 0,
            gid_index: GID_INDEX_ALL,
        };
        command::encode_in::<QueryHcaVportGid>(&input, &[], &mut b).unwrap();
        // gid_index is the low half of dword 3.
        assert_eq!(b, [7, 0x64, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0xff, 0xff]);
        assert_eq!(QueryHcaVportGidIn::decode(&b), Ok(input));

        let input = QueryNicVportContextIn {
            other_vport: true,
            vport_number: 3,
            allowed_list_type: LIST_TYPE_VLAN,
        };
        command::encode_in::<QueryNicVportContext>(&input, &[], &mut b).unwrap();
        // allowed_list_type is bits 26:24 of dword 3.
        assert_eq!(b, [7, 0x54, 0, 0, 0, 0, 0, 0, 0x80, 0, 0, 3, 2, 0, 0, 0]);
        assert_eq!(QueryNicVportContextIn::decode(&b), Ok(input));
    }

    #[test]
    fn hca_vport_context_known_bytes() {
        let context = HcaVportContext {
            field_select: 0x0102_0304,
            sm_virt_aware: true,
            has_smi: true,
            has_raw: false,
            grh_required: true,
            num_port_plane: 0,
            port_physical_state: PHYS_STATE_LINK_UP,
            vport_state_policy: POLICY_FOLLOW,
            port_state: PORT_STATE_ACTIVE,
            vport_state: PORT_STATE_DOWN,
            system_image_guid: 0x0002_c903_00a0_0000,
            port_guid: 0x0002_c903_00a0_0001,
            node_guid: 0x0002_c903_00a0_0002,
            cap_mask1: PORT_CAP_SYS_IMAGE_GUID_SUP | PORT_CAP_SM,
            cap_mask1_field_select: 0x11,
            cap_mask2: 0x22,
            cap_mask2_field_select: 0x33,
            lid: 0xabcd,
            init_type_reply: 0x9,
            lmc: 5,
            subnet_timeout: 18,
            sm_lid: 0x0102,
            sm_sl: 7,
            qkey_violation_counter: 0x4455,
            pkey_violation_counter: 0x6677,
        };
        let out = QueryHcaVportContextOut { context };
        let mut b = [0xeeu8; QueryHcaVportContextOut::SIZE];
        out.encode(&mut b).unwrap();
        // The output header is zero: status OK.
        assert_eq!(b[..16], [0; 16]);
        let c = &b[16..];
        assert_eq!(c[0..4], [1, 2, 3, 4]);
        assert_eq!(c[4..0x20], [0; 0x1c]);
        // Byte 0x20: sm_virt_aware, has_smi, has_raw, grh_required in bits
        // 7..4; then the four 4-bit states.
        assert_eq!(c[0x20..0x24], [0xd0, 0, 0x52, 0x41]);
        assert_eq!(c[0x28..0x30], [0, 2, 0xc9, 3, 0, 0xa0, 0, 0]);
        assert_eq!(c[0x30..0x38], [0, 2, 0xc9, 3, 0, 0xa0, 0, 1]);
        assert_eq!(c[0x38..0x40], [0, 2, 0xc9, 3, 0, 0xa0, 0, 2]);
        assert_eq!(
            c[0x40..0x50],
            [0, 0, 8, 2, 0, 0, 0, 0x11, 0, 0, 0, 0x22, 0, 0, 0, 0x33]
        );
        assert_eq!(c[0x50..0x60], [0; 16]);
        // lid, then init_type_reply (bits 11:8), lmc (7:5), subnet_timeout
        // (4:0).
        assert_eq!(c[0x60..0x64], [0xab, 0xcd, 0x09, 5 << 5 | 18]);
        // sm_lid, sm_sl (bits 15:12).
        assert_eq!(c[0x64..0x68], [0x01, 0x02, 0x70, 0]);
        assert_eq!(c[0x68..0x6c], [0x44, 0x55, 0x66, 0x77]);
        assert_eq!(
            command::decode_out::<QueryHcaVportContext>(&b),
            Ok(out),
            "decodes back"
        );
        // mlx5_core asks for the whole 528-byte output: it decodes the same.
        let mut whole = [0u8; 528];
        whole[..b.len()].copy_from_slice(&b);
        assert_eq!(QueryHcaVportContextOut::decode(&whole), Ok(out));
    }

    #[test]
    fn gid_output_known_bytes() {
        let g = gid(DEFAULT_SUBNET_PREFIX, 0x0002_c903_00a0_0001);
        assert_eq!(
            g,
            [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 2, 0xc9, 3, 0, 0xa0, 0, 1]
        );
        let out = QueryHcaVportGidOut {
            gids_num: 8,
            gid: g,
        };
        let mut b = [0u8; QueryHcaVportGidOut::SIZE];
        out.encode(&mut b).unwrap();
        assert_eq!(b[8..16], [0, 0, 0, 0, 0, 8, 0, 0]);
        assert_eq!(b[16..32], g);
        assert_eq!(command::decode_out::<QueryHcaVportGid>(&b), Ok(out));
    }

    #[test]
    fn nic_vport_context_known_bytes() {
        let context = NicVportContext {
            min_wqe_inline_mode: 2,
            roce_en: true,
            mtu: 4096,
            system_image_guid: 0x1111_2222_3333_4444,
            port_guid: 0x5555_6666_7777_8888,
            node_guid: 0x9999_aaaa_bbbb_cccc,
            qkey_violation_counter: 0x0102,
            promisc_uc: true,
            promisc_mc: false,
            promisc_all: true,
            allowed_list_type: LIST_TYPE_MC,
            allowed_list_size: 0x0304,
            permanent_address: [0x00, 0x02, 0xc9, 0xa0, 0x00, 0x01],
        };
        let out = QueryNicVportContextOut { context };
        let mut b = [0xeeu8; QueryNicVportContextOut::SIZE];
        out.encode(&mut b).unwrap();
        let c = &b[16..];
        // min_wqe_inline_mode bits 26:24 of dword 0, roce_en bit 0.
        assert_eq!(c[0..4], [0x02, 0, 0, 0x01]);
        assert_eq!(c[0x24..0x28], [0, 0, 0x10, 0]);
        assert_eq!(c[0x28..0x30], 0x1111_2222_3333_4444u64.to_be_bytes());
        assert_eq!(c[0x30..0x38], 0x5555_6666_7777_8888u64.to_be_bytes());
        assert_eq!(c[0x38..0x40], 0x9999_aaaa_bbbb_ccccu64.to_be_bytes());
        assert_eq!(c[0x68..0x6c], [1, 2, 0, 0]);
        // promisc bits 31..29, allowed_list_type bits 26:24, size 15:0.
        assert_eq!(c[0xf0..0xf4], [0xa1, 0, 3, 4]);
        // permanent_address: mac_addr_47_32 in the low half of dword
        // 0xf4, mac_addr_31_0 the next dword.
        assert_eq!(c[0xf4..0x100], [0, 0, 0, 2, 0xc9, 0xa0, 0, 1, 0, 0, 0, 0]);
        assert_eq!(command::decode_out::<QueryNicVportContext>(&b), Ok(out));
    }
}
