// SPDX-License-Identifier: GPL-2.0

//! Commands in flight side by side: seven lanes, each an entry with its
//! own mailboxes, started without waiting ([`CmdIf::start`]), finished in
//! any order, beside entry 0's one-at-a-time path; the command EQE that
//! names the entries the device handed back; a lane the device keeps;
//! and a failed function answering lane commands as `exec` does.

use hca_model::fw::fault::Fault;
use hca_model::fw::FwConfig;
use mlx5_cmdif::cmdif::{CmdIf, Lost, Started, Ticket};
use mlx5_cmdif::cmdmem::LANES;
use mlx5_cmdif::error::Error;
use mlx5_cmdif::function::{Config, Function};
use mlx5_prm::cmd_eq::{event_mask, CreateEq, CreateEqIn, Eqc};
use mlx5_prm::cmd_res::{AllocPd, AllocPdIn, CreateMkey, DeallocPd, DeallocPdIn};
use mlx5_prm::cmd_vport::{QueryHcaVportContext, QueryHcaVportContextIn, PORT_STATE_ACTIVE};
use mlx5_prm::eqe::{Eqe, EQE_SIZE, OWNER_OFFSET};
use mlx5_prm::eqe_async::AsyncEvent;
use mlx5_prm::opcode::EventType;
use mlx5_prm::ring;

use super::rig::Rig;

fn up(rig: &mut Rig) -> Function {
    let mut f = Function::new(rig.cmd_mem(), Config::default());
    f.bring_up(rig).unwrap();
    f
}

fn start_pd(cmd: &mut CmdIf, rig: &mut Rig) -> Result<Ticket, Error> {
    match cmd.start::<AllocPd, _>(rig, &AllocPdIn::default(), &[])? {
        Started::Posted(t) => Ok(t),
        Started::Answered(_) => panic!("ALLOC_PD answered without the device"),
    }
}

#[test]
fn seven_commands_run_side_by_side_and_finish_in_any_order() {
    let mut rig = Rig::new(FwConfig::DEFAULT);
    let mut f = up(&mut rig);
    let cmd = f.cmdif().unwrap();
    assert_eq!(cmd.lanes(), LANES);
    assert!(cmd.lane_fits::<AllocPd>(0));
    // A memory key with 1,000 pages needs entry 0's long chain.
    assert!(!cmd.lane_fits::<CreateMkey>(1000));
    assert!(matches!(
        cmd.start::<CreateMkey, _>(&mut rig, &Default::default(), &[0; 1000]),
        Err(Error::TooLong { .. })
    ));

    // Started, not waited for: the firmware runs only while the driver
    // relaxes, so all seven are still the device's.
    let tickets: Vec<Ticket> = (0..LANES)
        .map(|_| start_pd(cmd, &mut rig).unwrap())
        .collect();
    let mut entries: Vec<usize> = tickets.iter().map(Ticket::entry).collect();
    entries.sort();
    assert_eq!(entries, (1..=LANES).collect::<Vec<_>>());
    assert_eq!(cmd.busy_entries(), 0xfe);
    for t in &tickets {
        assert!(!cmd.done(&mut rig, t).unwrap());
    }
    assert_eq!(
        start_pd(cmd, &mut rig).unwrap_err(),
        Error::QueueBusy {
            command: "ALLOC_PD",
            opcode: 0x800
        }
    );

    // Entry 0 serves meanwhile; its wait lets the firmware run all that
    // is pending.
    let c = cmd
        .exec::<QueryHcaVportContext, _>(&mut rig, &QueryHcaVportContextIn::default(), &[])
        .unwrap()
        .context;
    assert_eq!(c.vport_state, PORT_STATE_ACTIVE);
    for t in &tickets {
        assert!(cmd.done(&mut rig, t).unwrap());
    }

    // Each output came back in its own lane's mailboxes.
    let mut pds: Vec<u32> = tickets
        .into_iter()
        .rev()
        .map(|t| cmd.finish::<AllocPd, _>(&mut rig, t).unwrap().pd)
        .collect();
    assert_eq!(cmd.busy_entries(), 0);
    pds.sort();
    pds.dedup();
    assert_eq!(pds.len(), LANES, "{pds:?}");

    // Destroys run on the lanes too, all seven at once.
    let tickets: Vec<Ticket> = pds
        .iter()
        .map(
            |&pd| match cmd.start::<DeallocPd, _>(&mut rig, &DeallocPdIn { pd }, &[]) {
                Ok(Started::Posted(t)) => t,
                other => panic!("{other:?}"),
            },
        )
        .collect();
    assert_eq!(rig.process(), LANES as u32);
    for t in tickets {
        cmd.finish::<DeallocPd, _>(&mut rig, t).unwrap();
    }
    // A lane is reused once finished.
    let t = start_pd(cmd, &mut rig).unwrap();
    assert_eq!(t.entry(), 1);
    rig.process();
    let pd = cmd.finish::<AllocPd, _>(&mut rig, t).unwrap().pd;
    cmd.exec::<DeallocPd, _>(&mut rig, &DeallocPdIn { pd }, &[])
        .unwrap();
    assert_eq!(rig.fw.log().total(), 0, "nothing refused");
    f.teardown(&mut rig).unwrap();
    rig.assert_clean();
}

#[test]
fn a_command_eqe_names_the_entries_handed_back() {
    let mut rig = Rig::new(FwConfig::DEFAULT);
    let mut f = up(&mut rig);
    let uar = f.progress().uar.unwrap();
    // An EQ for command events, as mlx5_core's async EQ asks for them.
    let ring_page = rig.take_page();
    for i in 0..64 {
        rig.poke(
            ring_page + (i * EQE_SIZE + OWNER_OFFSET) as u64,
            &[ring::EQE_INIT_OWNER],
        );
    }
    let cmd = f.cmdif().unwrap();
    let input = CreateEqIn {
        eq_context_entry: Eqc {
            log_eq_size: 6,
            uar_page: uar,
            intr: 0,
            ..Eqc::default()
        },
        event_bitmask: event_mask(&[EventType::Cmd]),
    };
    cmd.exec::<CreateEq, _>(&mut rig, &input, &[ring_page])
        .unwrap();
    // CREATE_EQ's own completion is the EQ's first event.
    let mut ci = 1u32;

    let tickets: Vec<Ticket> = (0..3).map(|_| start_pd(cmd, &mut rig).unwrap()).collect();
    assert_eq!(rig.process(), 3);
    let mut vector = 0u32;
    loop {
        let off = ring::ring_index(ci, 6) as usize * EQE_SIZE;
        let mut b = [0u8; EQE_SIZE];
        rig.peek(ring_page + off as u64, &mut b);
        if !ring::eqe_valid(b[OWNER_OFFSET], ci, 6) {
            break;
        }
        ci += 1;
        match AsyncEvent::from_eqe(&Eqe::decode(&b).unwrap()) {
            Some(AsyncEvent::Cmd(c)) => vector |= c.vector,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(ci, 4, "one EQE per command");
    let expected = tickets.iter().fold(0, |v, t| v | t.bit());
    assert_eq!(vector, expected);
    for t in tickets {
        cmd.finish::<AllocPd, _>(&mut rig, t).unwrap();
    }
    assert_eq!(rig.fw.stats().cmd_events, 4, "CREATE_EQ and the three");
}

#[test]
fn a_lane_the_device_keeps_is_left_alone_until_handed_back() {
    let mut rig = Rig::new(FwConfig::DEFAULT);
    let mut f = up(&mut rig);
    let cmd = f.cmdif().unwrap();
    assert!(rig.fw.inject(Fault::StuckNextCommand));
    let kept = start_pd(cmd, &mut rig).unwrap();
    let entry = kept.entry();
    rig.process();
    assert!(!cmd.done(&mut rig, &kept).unwrap());
    // The waiter's timeout passes: the entry is the device's for good.
    let e = cmd.give_up(&mut rig, kept, Lost::Timeout);
    assert!(
        matches!(
            e,
            Error::Timeout {
                command: "ALLOC_PD",
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(cmd.stuck_entries(), 1 << entry);
    assert_eq!(cmd.busy_entries(), 0);
    // The other lanes work; the kept one is never chosen.
    let tickets: Vec<Ticket> = (0..LANES - 1)
        .map(|_| start_pd(cmd, &mut rig).unwrap())
        .collect();
    assert!(tickets.iter().all(|t| t.entry() != entry));
    assert!(matches!(
        start_pd(cmd, &mut rig),
        Err(Error::QueueBusy { .. })
    ));
    rig.process();
    for t in tickets {
        cmd.finish::<AllocPd, _>(&mut rig, t).unwrap();
    }
}

#[test]
fn a_failed_function_answers_lane_destroys_and_refuses_the_rest() {
    let mut rig = Rig::new(FwConfig::DEFAULT);
    let mut f = up(&mut rig);
    let cmd = f.cmdif().unwrap();
    let t = start_pd(cmd, &mut rig).unwrap();
    cmd.set_internal_error();
    // A waiter that sees the failure gives its command up.
    let e = cmd.give_up(&mut rig, t, Lost::Fatal);
    assert!(matches!(e, Error::InternalError { .. }), "{e:?}");
    // A destroy caught in flight by the failure is answered as done, so
    // that its owner may free what it destroyed; anything else fails.
    match cmd.start::<DeallocPd, _>(&mut rig, &DeallocPdIn { pd: 1 }, &[]) {
        Ok(Started::Answered(_)) => {}
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        cmd.start::<DeallocPd, _>(&mut rig, &DeallocPdIn { pd: 1 }, &[]),
        Ok(Started::Answered(_))
    ));
    assert_eq!(
        start_pd(cmd, &mut rig).unwrap_err(),
        Error::InternalError {
            command: "ALLOC_PD",
            opcode: 0x800
        }
    );
}

#[test]
fn a_destroy_in_flight_when_the_function_fails_is_answered_as_done() {
    let mut rig = Rig::new(FwConfig::DEFAULT);
    let mut f = up(&mut rig);
    let cmd = f.cmdif().unwrap();
    let pd = start_pd(cmd, &mut rig).unwrap();
    rig.process();
    let pd = cmd.finish::<AllocPd, _>(&mut rig, pd).unwrap().pd;
    // Both posted, neither run: then the health check fails the function.
    let d = match cmd.start::<DeallocPd, _>(&mut rig, &DeallocPdIn { pd }, &[]) {
        Ok(Started::Posted(t)) => t,
        other => panic!("{other:?}"),
    };
    let a = start_pd(cmd, &mut rig).unwrap();
    let (de, ae) = (d.entry(), a.entry());
    cmd.set_internal_error();
    cmd.give_up_cmd::<DeallocPd, _>(&mut rig, d, Lost::Fatal)
        .unwrap();
    assert_eq!(
        cmd.give_up_cmd::<AllocPd, _>(&mut rig, a, Lost::Fatal)
            .unwrap_err(),
        Error::InternalError {
            command: "ALLOC_PD",
            opcode: 0x800
        }
    );
    // Both entries stay the device's; no lane is taken any more.
    assert_eq!(cmd.stuck_entries(), 1 << de | 1 << ae);
    assert_eq!(cmd.busy_entries(), 0);
}
