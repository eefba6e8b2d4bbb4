// SPDX-License-Identifier: GPL-2.0

//! The function's one port as the firmware reports it: its state, LID,
//! subnet manager, GUIDs and GID table (what the vport commands of
//! `cmd_vport` answer), the changes an embedder makes at run time
//! ([`Firmware::set_port_state`], [`Firmware::set_lid`],
//! [`Firmware::set_sm_lid`]), and the PORT_CHANGE events they raise.
//!
//! # Identity
//!
//! - The node GUID is [`FwConfig::node_guid`](super::FwConfig::node_guid)
//!   with the instance's fabric index in bits 15:8, so that the functions
//!   of one fabric built from one configuration differ; the port GUID is
//!   the node GUID plus the port number (1), and the system image GUID is
//!   the node GUID, as on a single-port ConnectX.
//! - The LID is the fabric's ([`lid_of_index`]: instance `i` has LID
//!   `i + 1`) until [`Firmware::set_lid`] changes it; the SM's LID is
//!   [`DEFAULT_SM_LID`] (instance 0's port) until
//!   [`Firmware::set_sm_lid`] changes it. The port is up from reset.
//! - GID 0 of an InfiniBand port is the default GID: the link-local
//!   subnet prefix fe80::/64 and the port GUID. INIT_HCA writes it into
//!   the instance's GID table ([`Hca::set_gid`]), where the data path
//!   takes a GRH's source GID from, so datagrams carry the GID the driver
//!   was told. The other entries are the instance's table as the embedder
//!   set it.
//! - The permanent MAC address is the port GUID without its middle two
//!   bytes (a Mellanox GUID is the MAC's OUI, `03:00`, then the MAC's
//!   last three bytes).
//!
//! # What the model leaves out
//!
//! The data path does not look at any of this: traffic flows while the
//! port is reported down, and a QP still reaches an instance by its
//! fabric LID after [`Firmware::set_lid`] gave the port another. The
//! port has no QP0 (`has_smi` 0), one P_Key and no SM of its own: the SM
//! LID is what the firmware says, and the port whose LID it is reports
//! itself as the SM (`IB_PORT_SM`).

use super::super::fabric::{lid_of_index, MAX_UNICAST_LID};
use super::super::hca::Hca;
use super::super::mem::Platform;
use super::super::port::GidEntry;
use super::super::prm::cmd_vport::{
    gid, HcaVportContext, NicVportContext, DEFAULT_SUBNET_PREFIX, GID_SIZE, PHYS_STATE_LINK_UP,
    PHYS_STATE_POLLING, POLICY_FOLLOW, PORT_CAP_SM, PORT_CAP_SYS_IMAGE_GUID_SUP, PORT_STATE_ACTIVE,
    PORT_STATE_DOWN,
};
use super::super::prm::eqe::{EqeData, DATA_SIZE};
use super::super::prm::eqe_async::{
    PortChangeEqe, PORT_CHANGE_ACTIVE, PORT_CHANGE_CLIENT_REREG, PORT_CHANGE_DOWN, PORT_CHANGE_LID,
};
use super::super::prm::opcode::EventType;
use super::super::table::Storage;
use super::pages::PageStore;
use super::reject::Reject;
use super::Firmware;

/// The function's port number (its only port).
pub const PORT_NUM: u8 = 1;
/// The SM's LID from reset: instance 0's port.
pub const DEFAULT_SM_LID: u16 = 1;
/// The node GUID of [`FwConfig::DEFAULT`](super::FwConfig::DEFAULT): a
/// Mellanox OUI (00:02:c9) GUID.
pub const DEFAULT_NODE_GUID: u64 = 0x0002_c903_00a0_0000;
/// The subnet timeout reported, 4.096 µs × 2^18 ≈ 1 s (OpenSM's default).
const SUBNET_TIMEOUT: u8 = 18;

/// What the firmware holds about its port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct PortState {
    /// The link is up.
    pub(super) up: bool,
    /// The LID [`Firmware::set_lid`] gave the port (`None`: the fabric's).
    pub(super) lid: Option<u16>,
    /// The subnet manager's LID.
    pub(super) sm_lid: u16,
    /// EQs whose event mask has PORT_CHANGE, a bit per EQ number.
    pub(super) eqs: [u64; 4],
}

impl PortState {
    /// A port fresh from reset: up, the fabric's LID, the default SM.
    pub(super) const fn new() -> Self {
        PortState {
            up: true,
            lid: None,
            sm_lid: DEFAULT_SM_LID,
            eqs: [0; 4],
        }
    }

    /// EQ `eqn` receives port changes (`on`) or no longer does.
    pub(super) fn route(&mut self, eqn: u8, on: bool) {
        if let Some(w) = self.eqs.get_mut(usize::from(eqn / 64)) {
            let bit = 1u64 << (eqn % 64);
            if on {
                *w |= bit;
            } else {
                *w &= !bit;
            }
        }
    }

    /// Whether EQ `eqn` receives port changes.
    pub(super) fn routed(&self, eqn: u8) -> bool {
        self.eqs
            .get(usize::from(eqn / 64))
            .is_some_and(|w| w >> (eqn % 64) & 1 != 0)
    }
}

/// The port as the firmware reports it ([`Firmware::port_info`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortInfo {
    /// The link is up (`port_state` ACTIVE; DOWN otherwise).
    pub up: bool,
    /// The port's LID.
    pub lid: u16,
    /// The subnet manager's LID.
    pub sm_lid: u16,
    /// The node (and system image) GUID.
    pub node_guid: u64,
    /// The port GUID.
    pub port_guid: u64,
}

/// Whether `lid` is a unicast LID a port can have (1 to 0xbfff).
pub const fn unicast_lid(lid: u16) -> bool {
    lid != 0 && lid <= MAX_UNICAST_LID
}

/// The MAC address of a Mellanox-style EUI-64 GUID: its OUI and its last
/// three bytes.
fn mac_of_guid(guid: u64) -> [u8; 6] {
    let g = guid.to_be_bytes();
    [g[0], g[1], g[2], g[5], g[6], g[7]]
}

impl<B: PageStore> Firmware<B> {
    /// The port as the vport commands report it, on instance `hca`.
    pub fn port_info<S: Storage>(&self, hca: &Hca<S>) -> PortInfo {
        let node_guid = self.cfg.node_guid | u64::from(hca.id()) << 8;
        PortInfo {
            up: self.port.up,
            lid: self.port.lid.unwrap_or(lid_of_index(hca.id())),
            sm_lid: self.port.sm_lid,
            node_guid,
            port_guid: node_guid.wrapping_add(u64::from(PORT_NUM)),
        }
    }

    /// Brings the link up or down, as a cable plugged or pulled, and
    /// raises a PORT_CHANGE event (ACTIVE or DOWN) on every EQ that asked
    /// for port changes. Returns whether the state changed (nothing is
    /// posted otherwise). The data path is not affected (see the module
    /// documentation).
    pub fn set_port_state<S: Storage, P: Platform>(
        &mut self,
        p: &mut P,
        hca: &mut Hca<S>,
        up: bool,
    ) -> bool {
        if self.port.up == up {
            return false;
        }
        self.port.up = up;
        let sub_type = if up {
            PORT_CHANGE_ACTIVE
        } else {
            PORT_CHANGE_DOWN
        };
        self.post_port_change(p, hca, sub_type);
        true
    }

    /// Gives the port LID `lid`, as an SM reassigning it does, and raises
    /// a PORT_CHANGE event (LID). Returns whether the LID changed: `false`
    /// for the LID the port has and for one that is not unicast
    /// ([`unicast_lid`]). The fabric still routes by its own LIDs (see the
    /// module documentation).
    pub fn set_lid<S: Storage, P: Platform>(
        &mut self,
        p: &mut P,
        hca: &mut Hca<S>,
        lid: u16,
    ) -> bool {
        if !unicast_lid(lid) || self.port_info(hca).lid == lid {
            return false;
        }
        self.port.lid = Some(lid);
        self.post_port_change(p, hca, PORT_CHANGE_LID);
        true
    }

    /// Moves the subnet manager to LID `sm_lid` and raises a PORT_CHANGE
    /// event (CLIENT_REREG: a new SM asks clients to register again; mlx5
    /// has no subtype for an SM change). Returns whether the SM LID
    /// changed: `false` for the current one and one that is not unicast.
    pub fn set_sm_lid<S: Storage, P: Platform>(
        &mut self,
        p: &mut P,
        hca: &mut Hca<S>,
        sm_lid: u16,
    ) -> bool {
        if !unicast_lid(sm_lid) || self.port.sm_lid == sm_lid {
            return false;
        }
        self.port.sm_lid = sm_lid;
        self.post_port_change(p, hca, PORT_CHANGE_CLIENT_REREG);
        true
    }

    /// Writes a PORT_CHANGE EQE with `sub_type` for port 1 to every EQ
    /// that asked for port changes. A halted firmware posts nothing.
    fn post_port_change<S: Storage, P: Platform>(
        &mut self,
        p: &mut P,
        hca: &mut Hca<S>,
        sub_type: u8,
    ) {
        if self.halted() {
            return;
        }
        let mut raw = [0u8; DATA_SIZE];
        PortChangeEqe { port: PORT_NUM }.encode(&mut raw);
        for eqn in 0..=u8::MAX {
            if !self.port.routed(eqn) {
                continue;
            }
            if hca.post_event_sub(p, eqn, EventType::PortChange, sub_type, EqeData::Raw(raw)) {
                self.stats.port_events += 1;
            } else {
                self.note(0xff, 0, Reject::EventLost);
            }
        }
    }

    /// The HCA vport context of the port (QUERY_HCA_VPORT_CONTEXT).
    pub(super) fn hca_vport_context<S: Storage>(&self, hca: &Hca<S>) -> HcaVportContext {
        let info = self.port_info(hca);
        let (state, phys) = if info.up {
            (PORT_STATE_ACTIVE, PHYS_STATE_LINK_UP)
        } else {
            (PORT_STATE_DOWN, PHYS_STATE_POLLING)
        };
        let sm = if info.sm_lid == info.lid {
            PORT_CAP_SM
        } else {
            0
        };
        HcaVportContext {
            port_physical_state: phys,
            vport_state_policy: POLICY_FOLLOW,
            port_state: state,
            vport_state: state,
            system_image_guid: info.node_guid,
            port_guid: info.port_guid,
            node_guid: info.node_guid,
            cap_mask1: PORT_CAP_SYS_IMAGE_GUID_SUP | sm,
            lid: info.lid,
            subnet_timeout: SUBNET_TIMEOUT,
            sm_lid: info.sm_lid,
            qkey_violation_counter: u16::try_from(hca.stats().ud_drop_qkey).unwrap_or(u16::MAX),
            ..HcaVportContext::default()
        }
    }

    /// The NIC vport context of the port (QUERY_NIC_VPORT_CONTEXT), with
    /// the list type asked for (the list itself is empty).
    pub(super) fn nic_vport_context<S: Storage>(
        &self,
        hca: &Hca<S>,
        allowed_list_type: u8,
    ) -> NicVportContext {
        let info = self.port_info(hca);
        NicVportContext {
            roce_en: hca.port().is_roce(),
            mtu: u16::try_from(hca.port().mtu_bytes()).unwrap_or(u16::MAX),
            system_image_guid: info.node_guid,
            port_guid: info.port_guid,
            node_guid: info.node_guid,
            qkey_violation_counter: u16::try_from(hca.stats().ud_drop_qkey).unwrap_or(u16::MAX),
            allowed_list_type,
            permanent_address: mac_of_guid(info.port_guid),
            ..NicVportContext::default()
        }
    }

    /// GID table entry `index` as QUERY_HCA_VPORT_GID reports it: the
    /// default GID at 0 on an InfiniBand port, the instance's entry
    /// otherwise (zero where there is none).
    pub(super) fn gid<S: Storage>(&self, hca: &Hca<S>, index: u16) -> [u8; GID_SIZE] {
        if index == 0 && !hca.port().is_roce() {
            return self.default_gid(hca);
        }
        u8::try_from(index)
            .ok()
            .and_then(|i| hca.gid(i))
            .map_or([0; GID_SIZE], |e| e.gid)
    }

    /// The port's default GID: fe80::/64 and the port GUID.
    fn default_gid<S: Storage>(&self, hca: &Hca<S>) -> [u8; GID_SIZE] {
        gid(DEFAULT_SUBNET_PREFIX, self.port_info(hca).port_guid)
    }

    /// Writes the default GID into the instance's GID table entry 0 on
    /// an InfiniBand port (INIT_HCA), so that a GRH sent from index 0
    /// carries it.
    pub(super) fn install_default_gid<S: Storage>(&self, hca: &mut Hca<S>) {
        if hca.port().is_roce() {
            return;
        }
        let entry = GidEntry {
            gid: self.default_gid(hca),
            roce_v2: false,
            mac: mac_of_guid(self.port_info(hca).port_guid),
        };
        // Index 0 always exists.
        let _ = hca.set_gid(0, Some(entry));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_and_lids() {
        let mut s = PortState::new();
        assert!(s.up);
        s.route(0, true);
        s.route(200, true);
        assert!(s.routed(0) && s.routed(200) && !s.routed(1));
        s.route(200, false);
        assert!(!s.routed(200));
        assert!(unicast_lid(1) && unicast_lid(0xbfff));
        assert!(!unicast_lid(0) && !unicast_lid(0xc000));
        assert_eq!(mac_of_guid(0x0002_c903_00a0_0001), [0, 2, 0xc9, 0xa0, 0, 1]);
    }
}
