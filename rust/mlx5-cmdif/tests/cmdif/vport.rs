// SPDX-License-Identifier: GPL-2.0

//! The port through the driver's own command path: `CmdIf::exec` of
//! QUERY_HCA_VPORT_CONTEXT, QUERY_HCA_VPORT_GID and
//! QUERY_NIC_VPORT_CONTEXT on a function brought up by `Function`, before
//! and after the device takes its port down and gives it another LID; a
//! command the device keeps (an injected stuck command) times out and the
//! next one still runs.

use hca_model::fabric::lid_of_index;
use hca_model::fw::port::{DEFAULT_NODE_GUID, DEFAULT_SM_LID};
use hca_model::fw::{Fault, FwConfig};
use mlx5_cmdif::cmdif::Timeouts;
use mlx5_cmdif::error::Error;
use mlx5_cmdif::function::{Config, Function};
use mlx5_prm::cmd_res::{AllocPd, AllocPdIn};
use mlx5_prm::cmd_vport::{
    gid, QueryHcaVportContext, QueryHcaVportContextIn, QueryHcaVportGid, QueryHcaVportGidIn,
    QueryNicVportContext, QueryNicVportContextIn, DEFAULT_SUBNET_PREFIX, PHYS_STATE_LINK_UP,
    PHYS_STATE_POLLING, PORT_STATE_ACTIVE, PORT_STATE_DOWN,
};

use super::rig::Rig;

#[test]
fn the_port_through_the_drivers_command_path() {
    let mut rig = Rig::new(FwConfig::DEFAULT);
    let mut f = Function::new(rig.cmd_mem(), Config::default());
    f.bring_up(&mut rig).unwrap();
    let cmd = f.cmdif().unwrap();

    let q = QueryHcaVportContextIn::default();
    let c = cmd
        .exec::<QueryHcaVportContext, _>(&mut rig, &q, &[])
        .unwrap()
        .context;
    assert_eq!(
        (c.vport_state, c.port_state, c.port_physical_state),
        (PORT_STATE_ACTIVE, PORT_STATE_ACTIVE, PHYS_STATE_LINK_UP)
    );
    assert_eq!((c.lid, c.sm_lid), (lid_of_index(0), DEFAULT_SM_LID));
    assert_eq!(
        (c.node_guid, c.port_guid, c.system_image_guid),
        (DEFAULT_NODE_GUID, DEFAULT_NODE_GUID + 1, DEFAULT_NODE_GUID)
    );

    let g = cmd
        .exec::<QueryHcaVportGid, _>(&mut rig, &QueryHcaVportGidIn::default(), &[])
        .unwrap();
    assert_eq!(
        (g.gids_num, g.gid),
        (1, gid(DEFAULT_SUBNET_PREFIX, DEFAULT_NODE_GUID + 1))
    );

    let n = cmd
        .exec::<QueryNicVportContext, _>(&mut rig, &QueryNicVportContextIn::default(), &[])
        .unwrap()
        .context;
    assert_eq!((n.port_guid, n.mtu), (DEFAULT_NODE_GUID + 1, 4096));
    assert_eq!(n.permanent_address, [0x00, 0x02, 0xc9, 0xa0, 0x00, 0x01]);

    // The device's port goes down and comes back with another LID (no EQ
    // in poll mode: nothing is posted, the queries tell).
    assert!(rig.fw.set_port_state(&mut rig.mem, &mut rig.hca, false));
    assert!(rig.fw.set_lid(&mut rig.mem, &mut rig.hca, 7));
    let c = cmd
        .exec::<QueryHcaVportContext, _>(&mut rig, &q, &[])
        .unwrap()
        .context;
    assert_eq!(
        (c.vport_state, c.port_physical_state, c.lid),
        (PORT_STATE_DOWN, PHYS_STATE_POLLING, 7)
    );
    assert!(rig.fw.set_port_state(&mut rig.mem, &mut rig.hca, true));
    let c = cmd
        .exec::<QueryHcaVportContext, _>(&mut rig, &q, &[])
        .unwrap()
        .context;
    assert_eq!((c.vport_state, c.lid), (PORT_STATE_ACTIVE, 7));
    assert_eq!(rig.fw.stats().port_events, 0);

    f.teardown(&mut rig).unwrap();
    rig.assert_clean();
}

#[test]
fn a_stuck_command_times_out_and_the_next_one_runs() {
    let mut rig = Rig::new(FwConfig::DEFAULT);
    let cfg = Config {
        timeouts: Timeouts {
            cmd_ms: 50,
            ..Timeouts::MLX5_CORE
        },
        ..Config::default()
    };
    let mut f = Function::new(rig.cmd_mem(), cfg);
    f.bring_up(&mut rig).unwrap();
    assert!(rig.fw.inject(Fault::StuckNextCommand));
    let cmd = f.cmdif().unwrap();
    // A command without mailboxes: a stuck one that had them would keep
    // the driver's mailbox pools as well (see `CmdIf::post`).
    let e = cmd
        .exec::<AllocPd, _>(&mut rig, &AllocPdIn::default(), &[])
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Timeout {
                command: "ALLOC_PD",
                ms: 50,
                ..
            }
        ),
        "{e:?}"
    );
    let stuck = cmd.stuck_entries();
    assert_eq!(stuck.count_ones(), 1);
    assert_eq!(rig.fw.faults().stuck_entries, stuck);
    // The driver leaves that entry alone; the next command runs.
    let q = QueryHcaVportContextIn::default();
    let c = cmd
        .exec::<QueryHcaVportContext, _>(&mut rig, &q, &[])
        .unwrap()
        .context;
    assert_eq!(c.vport_state, PORT_STATE_ACTIVE);
    let s = rig.fw.stats();
    assert_eq!((s.unanswered, s.failed, s.ignored), (1, 0, 0));
    assert_eq!(rig.fw.log().total(), 0, "nothing the driver did is refused");
}
