// SPDX-License-Identifier: GPL-2.0

//! The port through the vport commands: QUERY_HCA_VPORT_CONTEXT,
//! QUERY_HCA_VPORT_GID and QUERY_NIC_VPORT_CONTEXT report each function's
//! state, LID, SM, GUIDs, GIDs and MAC as mlx5_core reads them; the
//! embedder takes the port down and up, moves its LID and the SM, and
//! every EQ that asked for port changes gets a PORT_CHANGE EQE saying
//! what changed; queries of other vports, other ports, GID indexes past
//! the table and unknown list types are refused.

use hca_model::fabric::lid_of_index;
use hca_model::fw::port::{DEFAULT_NODE_GUID, DEFAULT_SM_LID};
use hca_model::fw::reject::Reject;
use mlx5_prm::cmd_eq::{DestroyEq, DestroyEqIn};
use mlx5_prm::cmd_hca::{EnableHca, EnableHcaIn};
use mlx5_prm::cmd_vport::{
    gid, HcaVportContext, QueryHcaVportContext, QueryHcaVportContextIn, QueryHcaVportContextOut,
    QueryHcaVportGid, QueryHcaVportGidIn, QueryHcaVportGidOut, QueryNicVportContext,
    QueryNicVportContextIn, DEFAULT_SUBNET_PREFIX, GID_INDEX_ALL, GID_SIZE, LIST_TYPE_UC,
    LIST_TYPE_VLAN, PHYS_STATE_LINK_UP, PHYS_STATE_POLLING, POLICY_FOLLOW, PORT_CAP_SM,
    PORT_CAP_SYS_IMAGE_GUID_SUP, PORT_STATE_ACTIVE, PORT_STATE_DOWN,
};
use mlx5_prm::eqe_async::{
    AsyncEvent, PortChangeEqe, PORT_CHANGE_ACTIVE, PORT_CHANGE_CLIENT_REREG, PORT_CHANGE_DOWN,
    PORT_CHANGE_LID,
};
use mlx5_prm::ifc::Layout;
use mlx5_prm::opcode::EventType;

use super::cmd_driver::*;
use super::cmd_errors::{fresh, last, refused, status};
use super::harness::TestEq;

/// QUERY_HCA_VPORT_CONTEXT of function `d`'s port `port_num`.
pub fn vport(b: &mut Bed, d: usize, port_num: u8) -> HcaVportContext {
    let input = QueryHcaVportContextIn {
        port_num,
        ..Default::default()
    };
    b.cmd::<QueryHcaVportContext>(d, &input, &[])
        .unwrap()
        .context
}

/// The node GUID of function `d` with the default configuration.
fn node_guid(d: usize) -> u64 {
    DEFAULT_NODE_GUID | (d as u64) << 8
}

/// Takes function `d`'s port up or down; returns whether it changed.
pub fn set_port(b: &mut Bed, d: usize, up: bool) -> bool {
    let hca = b.w.fabric.hca(b.devs[d].h as u16).unwrap();
    b.devs[d].fw.set_port_state(&mut b.w.mem, hca, up)
}

fn set_lid(b: &mut Bed, d: usize, lid: u16) -> bool {
    let hca = b.w.fabric.hca(b.devs[d].h as u16).unwrap();
    b.devs[d].fw.set_lid(&mut b.w.mem, hca, lid)
}

fn set_sm_lid(b: &mut Bed, d: usize, lid: u16) -> bool {
    let hca = b.w.fabric.hca(b.devs[d].h as u16).unwrap();
    b.devs[d].fw.set_sm_lid(&mut b.w.mem, hca, lid)
}

/// The port changes waiting in `eq` (sub_type, port), consumed and
/// re-armed.
fn port_changes(b: &mut Bed, d: usize, eq: &mut TestEq) -> Vec<(u8, u8)> {
    let eqes = read_eqes(&b.w.mem, eq);
    let uar = b.w.ctx[d].uar;
    b.eq_arm(d, eq, uar);
    eqes.iter()
        .map(|e| match AsyncEvent::from_eqe(e) {
            Some(AsyncEvent::PortChange {
                sub_type,
                event: PortChangeEqe { port },
            }) => (sub_type, port),
            other => panic!("expected a port change, got {other:?}"),
        })
        .collect()
}

/// The port changes on function `d`'s async EQ.
fn async_changes(b: &mut Bed, d: usize) -> Vec<(u8, u8)> {
    let mut eq = std::mem::replace(
        &mut b.w.ctx[d].async_eq,
        TestEq {
            eqn: 0,
            buf: 0,
            log: 0,
            ci: 0,
        },
    );
    let seen = port_changes(b, d, &mut eq);
    b.w.ctx[d].async_eq = eq;
    seen
}

#[test]
fn each_function_reports_its_port() {
    let mut b = Bed::up(2);
    for d in 0..2 {
        let lid = lid_of_index(d as u16);
        let want = HcaVportContext {
            port_physical_state: PHYS_STATE_LINK_UP,
            vport_state_policy: POLICY_FOLLOW,
            port_state: PORT_STATE_ACTIVE,
            vport_state: PORT_STATE_ACTIVE,
            system_image_guid: node_guid(d),
            port_guid: node_guid(d) + 1,
            node_guid: node_guid(d),
            // Function 0's port has the SM's LID.
            cap_mask1: PORT_CAP_SYS_IMAGE_GUID_SUP | if d == 0 { PORT_CAP_SM } else { 0 },
            lid,
            subnet_timeout: 18,
            sm_lid: DEFAULT_SM_LID,
            ..HcaVportContext::default()
        };
        // Port 0 (what mlx5_core sends on a single-port function) and 1.
        assert_eq!(vport(&mut b, d, 0), want, "function {d}");
        assert_eq!(vport(&mut b, d, 1), want, "function {d}, port 1");
        // mlx5_core asks for the whole 528-byte output: the rest is zero.
        let input = QueryHcaVportContextIn::default();
        let out = b
            .cmd_out::<QueryHcaVportContext>(d, &input, &[], 528 - QueryHcaVportContextOut::SIZE)
            .unwrap();
        assert_eq!(out.len(), 528);
        assert!(out[QueryHcaVportContextOut::SIZE..].iter().all(|&x| x == 0));
        assert_eq!(QueryHcaVportContextOut::decode(&out).unwrap().context, want);
    }
}

#[test]
fn gids_are_the_default_gid_and_the_table() {
    let mut b = Bed::up(2);
    for d in 0..2 {
        let default = gid(DEFAULT_SUBNET_PREFIX, node_guid(d) + 1);
        let one = QueryHcaVportGidIn {
            gid_index: 0,
            ..Default::default()
        };
        let out = b.cmd::<QueryHcaVportGid>(d, &one, &[]).unwrap();
        assert_eq!((out.gids_num, out.gid), (1, default));
        // INIT_HCA put it into the instance's table, where a GRH's source
        // GID comes from.
        assert_eq!(b.hca(d).gid(0).map(|e| e.gid), Some(default));
        // The whole table (mlx5_core's 0xffff): 8 entries, the rest empty.
        let all = QueryHcaVportGidIn {
            gid_index: GID_INDEX_ALL,
            ..Default::default()
        };
        let out = b
            .cmd_out::<QueryHcaVportGid>(d, &all, &[], 7 * GID_SIZE)
            .unwrap();
        let o = QueryHcaVportGidOut::decode(&out).unwrap();
        assert_eq!((o.gids_num, o.gid), (8, default));
        assert!(out[QueryHcaVportGidOut::SIZE..].iter().all(|&x| x == 0));
        // An entry the embedder sets is reported.
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[15] = 0x42;
        b.hca(d)
            .set_gid(
                3,
                Some(hca_model::port::GidEntry {
                    gid: g,
                    roce_v2: false,
                    mac: [0; 6],
                }),
            )
            .unwrap();
        let three = QueryHcaVportGidIn {
            gid_index: 3,
            ..Default::default()
        };
        assert_eq!(b.cmd::<QueryHcaVportGid>(d, &three, &[]).unwrap().gid, g);
        let out = b
            .cmd_out::<QueryHcaVportGid>(d, &all, &[], 7 * GID_SIZE)
            .unwrap();
        let at = QueryHcaVportGidOut::SIZE + 2 * GID_SIZE;
        assert_eq!(out[at..at + GID_SIZE], g);
    }
}

#[test]
fn the_nic_vport_has_the_guids_mtu_and_mac() {
    let mut b = Bed::up(2);
    let input = QueryNicVportContextIn {
        allowed_list_type: LIST_TYPE_UC,
        ..Default::default()
    };
    let c = b
        .cmd::<QueryNicVportContext>(1, &input, &[])
        .unwrap()
        .context;
    assert!(!c.roce_en, "an InfiniBand port");
    assert_eq!(c.mtu, 4096);
    assert_eq!(
        (c.system_image_guid, c.node_guid, c.port_guid),
        (node_guid(1), node_guid(1), node_guid(1) + 1)
    );
    // The port GUID 00:02:c9:03:00:a0:01:01 without its 03:00.
    assert_eq!(c.permanent_address, [0x00, 0x02, 0xc9, 0xa0, 0x01, 0x01]);
    assert_eq!(
        (c.allowed_list_type, c.allowed_list_size),
        (LIST_TYPE_UC, 0)
    );
}

#[test]
fn other_vports_ports_and_indexes_are_refused() {
    let mut b = Bed::up(1);
    let other = QueryHcaVportContextIn {
        other_vport: true,
        ..Default::default()
    };
    refused!(b, 0, QueryHcaVportContext, other, &[], Reject::OtherVport);
    let vf = QueryHcaVportContextIn {
        vport_number: 1,
        ..Default::default()
    };
    refused!(b, 0, QueryHcaVportContext, vf, &[], Reject::OtherVport);
    let port2 = QueryHcaVportContextIn {
        port_num: 2,
        ..Default::default()
    };
    refused!(b, 0, QueryHcaVportContext, port2, &[], Reject::BadPort);
    let past = QueryHcaVportGidIn {
        gid_index: 8,
        ..Default::default()
    };
    refused!(b, 0, QueryHcaVportGid, past, &[], Reject::BadGidIndex);
    let port2 = QueryHcaVportGidIn {
        port_num: 3,
        ..Default::default()
    };
    refused!(b, 0, QueryHcaVportGid, port2, &[], Reject::BadPort);
    // The whole table needs room for all 8 GIDs.
    let all = QueryHcaVportGidIn {
        gid_index: GID_INDEX_ALL,
        ..Default::default()
    };
    refused!(b, 0, QueryHcaVportGid, all, &[], Reject::OutputTooShort);
    let other = QueryNicVportContextIn {
        other_vport: true,
        vport_number: 2,
        ..Default::default()
    };
    refused!(b, 0, QueryNicVportContext, other, &[], Reject::OtherVport);
    let list = QueryNicVportContextIn {
        allowed_list_type: LIST_TYPE_VLAN + 1,
        ..Default::default()
    };
    refused!(b, 0, QueryNicVportContext, list, &[], Reject::BadListType);
    // Before INIT_HCA there is no port to ask about.
    let mut f = fresh();
    f.cmd::<EnableHca>(0, &EnableHcaIn::default(), &[]).unwrap();
    refused!(
        f,
        0,
        QueryHcaVportContext,
        QueryHcaVportContextIn::default(),
        &[],
        Reject::NotInitialized
    );
}

#[test]
fn port_changes_reach_every_eq_that_asks() {
    let mut b = Bed::up(1);
    let async_eqn = b.w.ctx[0].async_eq.eqn;
    // A second EQ that asks for port changes (and nothing else).
    let mut second = b.create_eq(0, 2, &[EventType::PortChange], 0);
    let uar = b.w.ctx[0].uar;
    b.eq_arm(0, &second, uar);
    b.settle_pages(0);
    let irqs = b.irqs().len();

    // The cable is pulled: DOWN on port 1, on both EQs, each interrupted.
    assert!(set_port(&mut b, 0, false));
    assert_eq!(async_changes(&mut b, 0), [(PORT_CHANGE_DOWN, 1)]);
    assert_eq!(
        port_changes(&mut b, 0, &mut second),
        [(PORT_CHANGE_DOWN, 1)]
    );
    for eqn in [async_eqn, second.eqn] {
        assert!(b.irqs()[irqs..].iter().any(|i| i.eqn == eqn), "EQ {eqn}");
    }
    let v = vport(&mut b, 0, 0);
    assert_eq!(
        (v.port_state, v.vport_state, v.port_physical_state),
        (PORT_STATE_DOWN, PORT_STATE_DOWN, PHYS_STATE_POLLING)
    );
    // Pulled again: nothing changes, nothing is posted.
    assert!(!set_port(&mut b, 0, false));
    assert!(async_changes(&mut b, 0).is_empty());

    // Plugged back: ACTIVE.
    assert!(set_port(&mut b, 0, true));
    assert_eq!(async_changes(&mut b, 0), [(PORT_CHANGE_ACTIVE, 1)]);
    assert_eq!(
        port_changes(&mut b, 0, &mut second),
        [(PORT_CHANGE_ACTIVE, 1)]
    );
    assert_eq!(vport(&mut b, 0, 1).vport_state, PORT_STATE_ACTIVE);

    // The SM gives the port another LID: it no longer has the SM's.
    assert!(set_lid(&mut b, 0, 0x42));
    assert_eq!(async_changes(&mut b, 0), [(PORT_CHANGE_LID, 1)]);
    assert_eq!(port_changes(&mut b, 0, &mut second), [(PORT_CHANGE_LID, 1)]);
    let v = vport(&mut b, 0, 0);
    assert_eq!((v.lid, v.sm_lid, v.cap_mask1 & PORT_CAP_SM), (0x42, 1, 0));
    assert!(!set_lid(&mut b, 0, 0x42), "the LID it has");
    assert!(!set_lid(&mut b, 0, 0), "LID 0 is reserved");
    assert!(!set_lid(&mut b, 0, 0xc000), "a multicast LID");

    // The SM moves to it: clients are asked to register again.
    b.cmd::<DestroyEq>(
        0,
        &DestroyEqIn {
            eq_number: second.eqn,
        },
        &[],
    )
    .unwrap();
    assert!(set_sm_lid(&mut b, 0, 0x42));
    assert_eq!(async_changes(&mut b, 0), [(PORT_CHANGE_CLIENT_REREG, 1)]);
    let v = vport(&mut b, 0, 0);
    assert_eq!((v.sm_lid, v.cap_mask1 & PORT_CAP_SM), (0x42, PORT_CAP_SM));
    // The destroyed EQ got nothing more.
    assert!(read_eqes(&b.w.mem, &mut second).is_empty());

    let s = b.devs[0].fw.stats();
    assert_eq!(s.port_events, 2 + 2 + 2 + 1);
    assert_eq!(b.devs[0].fw.log().total(), 0, "nothing refused");
    let info = {
        let hca = b.w.fabric.hca(0).unwrap();
        b.devs[0].fw.port_info(hca)
    };
    assert_eq!((info.up, info.lid, info.sm_lid), (true, 0x42, 0x42));
    b.tear_down(0);
}

#[test]
fn changes_before_the_eqs_exist_post_nothing() {
    let mut b = fresh();
    b.cmd::<EnableHca>(0, &EnableHcaIn::default(), &[]).unwrap();
    assert!(set_port(&mut b, 0, false));
    assert_eq!(b.devs[0].fw.stats().port_events, 0);
    assert_eq!(b.devs[0].fw.log().total(), 0);
    let info = {
        let hca = b.w.fabric.hca(0).unwrap();
        b.devs[0].fw.port_info(hca)
    };
    assert!(!info.up);
    assert_eq!(info.lid, lid_of_index(0));
}
