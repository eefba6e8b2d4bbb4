// SPDX-License-Identifier: GPL-2.0

//! Waits that time out, commands the device refuses or never sees, and
//! teardown after a bring-up that failed half way.

use hca_model::fw::reject::Reject;
use hca_model::fw::{FwConfig, HcaState, Readiness};
use mlx5_cmdif::cmdif::{CmdIf, Timeouts};
use mlx5_cmdif::error::{Error, ReadyWait};
use mlx5_cmdif::function::{Config, Function};
use mlx5_prm::cmd_hca::{
    EnableHca, EnableHcaIn, ManagePages, ManagePagesIn, QueryIssi, QueryIssiIn, QueryPages,
    QueryPagesIn, SetIssi, SetIssiIn, MANAGE_PAGES_ALLOCATION_SUCCESS, QUERY_PAGES_BOOT,
};
use mlx5_prm::cmd_queue::DeliveryStatus;
use mlx5_prm::cmd_status::{CmdError, CmdStatus};
use mlx5_prm::init_seg::CMD_DBELL_OFFSET;

use super::rig::Rig;

/// A function whose command interface is up and ENABLE_HCA done, through
/// the bare command interface.
fn enabled(rig: &mut Rig, timeouts: Timeouts) -> CmdIf {
    let mut cmd = CmdIf::init(rig, rig.cmd_mem(), timeouts).unwrap();
    cmd.exec::<EnableHca, _>(rig, &EnableHcaIn::default(), &[])
        .unwrap();
    cmd
}

fn failed(e: Error) -> (&'static str, CmdStatus, u32) {
    match e {
        Error::Cmd(CmdError::Failed {
            command,
            status,
            syndrome,
            ..
        }) => (command, status, syndrome),
        other => panic!("expected a failed command, got {other:?}"),
    }
}

#[test]
fn firmware_never_ready_times_out_naming_the_wait() {
    let cfg = FwConfig {
        ready: Readiness::Never,
        ..FwConfig::DEFAULT
    };
    let mut rig = Rig::new(cfg);
    rig.step_ns = 1_000_000;
    let mut f = Function::new(rig.cmd_mem(), Config::default());
    let e = f.bring_up(&mut rig).unwrap_err();
    assert_eq!(
        e,
        Error::FwNotReady {
            wait: ReadyWait::PreInit,
            ms: 120_000
        }
    );
    assert_eq!(
        e.to_string(),
        "waiting for firmware pre-initialization: timed out after 120000 ms"
    );
    assert_eq!(e.errno(), 110);
    // mlx5_core's two minutes, and not much more.
    assert!((120_000_000_000..120_002_000_000).contains(&rig.now));
    assert!(!f.progress().cmdif);
    // Nothing to undo, and no command was ever posted.
    f.teardown(&mut rig).unwrap();
    assert_eq!(rig.fw.stats().commands, 0);
    assert!(rig.out.is_empty());
}

#[test]
fn queue_load_that_never_ends_times_out() {
    let cfg = FwConfig {
        ready: Readiness::AfterTime(10_000_000),
        ..FwConfig::DEFAULT
    };
    let mut rig = Rig::new(cfg);
    let timeouts = Timeouts {
        fw_init_ms: 5,
        ..Timeouts::default()
    };
    let mem = rig.cmd_mem();
    let e = CmdIf::init(&mut rig, mem, timeouts).unwrap_err();
    assert_eq!(
        e.to_string(),
        "waiting for firmware loading the command queue: timed out after 5 ms"
    );
    assert!(matches!(
        e,
        Error::FwNotReady {
            wait: ReadyWait::CmdqLoad,
            ..
        }
    ));
    // 10 ms for the first wait, 5 for the second.
    assert!((15_000_000..15_100_000).contains(&rig.now), "{}", rig.now);
}

#[test]
fn refused_command_names_the_command_and_syndrome() {
    let mut rig = Rig::new(FwConfig::DEFAULT);
    let mut cmd = enabled(&mut rig, Timeouts::default());
    // ISSI 2 through the public command API.
    let e = cmd
        .exec::<SetIssi, _>(&mut rig, &SetIssiIn { current_issi: 2 }, &[])
        .unwrap_err();
    assert_eq!(
        failed(e),
        (
            "SET_ISSI",
            CmdStatus::BadParamErr,
            Reject::UnsupportedIssi.syndrome()
        )
    );
    assert_eq!(
        e.to_string(),
        "SET_ISSI (0x10b) failed: status BAD_PARAM_ERR (0x3), syndrome 0x50001"
    );
    assert_eq!(e.errno(), 22);
    assert_eq!(
        rig.fw.log().last().map(|p| p.reject),
        Some(Reject::UnsupportedIssi)
    );
    // The entry came back: the next command runs.
    cmd.exec::<SetIssi, _>(&mut rig, &SetIssiIn { current_issi: 1 }, &[])
        .unwrap();
    assert_eq!(rig.fw.issi(), 1);

    // A page list with a misaligned page (spanning two mailboxes).
    let mut pas: Vec<u64> = (0..80).map(|i| 0x2_0000_0000 + i * 4096).collect();
    pas[70] += 8;
    let input = ManagePagesIn {
        op_mod: MANAGE_PAGES_ALLOCATION_SUCCESS,
        input_num_entries: 80,
        ..ManagePagesIn::default()
    };
    let e = cmd
        .exec::<ManagePages, _>(&mut rig, &input, &pas)
        .unwrap_err();
    assert_eq!(
        failed(e),
        (
            "MANAGE_PAGES",
            CmdStatus::BadParamErr,
            Reject::PageMisaligned.syndrome()
        )
    );
    assert_eq!(rig.fw.page_counts().held, 0);
}

#[test]
fn settings_are_locked_after_bring_up() {
    let mut rig = Rig::new(FwConfig::DEFAULT);
    let mut f = Function::new(rig.cmd_mem(), Config::default());
    f.bring_up(&mut rig).unwrap();
    let cmd = f.cmdif().unwrap();
    let e = cmd
        .exec::<SetIssi, _>(&mut rig, &SetIssiIn { current_issi: 1 }, &[])
        .unwrap_err();
    assert_eq!(
        failed(e),
        (
            "SET_ISSI",
            CmdStatus::BadSysStateErr,
            Reject::SettingsLocked.syndrome()
        )
    );
    assert_eq!(e.errno(), 5);
    rig.fw.clear_log();
    f.teardown(&mut rig).unwrap();
    rig.assert_clean();
}

#[test]
fn undelivered_command_names_the_delivery_status() {
    let mut rig = Rig::new(FwConfig::DEFAULT);
    let mut cmd = enabled(&mut rig, Timeouts::default());
    rig.corrupt_next_entry = true;
    let e = cmd
        .exec::<QueryIssi, _>(&mut rig, &QueryIssiIn::default(), &[])
        .unwrap_err();
    assert_eq!(
        e,
        Error::Cmd(CmdError::Delivery {
            command: "QUERY_ISSI",
            opcode: 0x10a,
            status: DeliveryStatus::SignatErr
        })
    );
    assert_eq!(
        e.to_string(),
        "QUERY_ISSI (0x10a) not delivered: delivery status SIGNAT_ERR (0x1)"
    );
    assert_eq!(rig.fw.stats().delivery_errors, 1);
    // The output of a command that was not delivered cannot be read.
    let mut b = [0u8; 8];
    assert!(matches!(
        cmd.read_out(&mut rig, 0, &mut b),
        Err(Error::OutOfRange { .. })
    ));
    cmd.exec::<QueryIssi, _>(&mut rig, &QueryIssiIn::default(), &[])
        .unwrap();
}

#[test]
fn command_timeout_is_bounded_and_the_entry_waits_for_the_device() {
    let mut rig = Rig::new(FwConfig::DEFAULT);
    let timeouts = Timeouts {
        cmd_ms: 5,
        ..Timeouts::default()
    };
    let mut cmd = enabled(&mut rig, timeouts);
    // The device misses the doorbell of QUERY_ISSI (whose 112-byte output
    // needs a mailbox).
    rig.drop_doorbells = 1;
    let start = rig.now;
    let e = cmd
        .exec::<QueryIssi, _>(&mut rig, &QueryIssiIn::default(), &[])
        .unwrap_err();
    assert_eq!(
        e,
        Error::Timeout {
            command: "QUERY_ISSI",
            opcode: 0x10a,
            ms: 5
        }
    );
    assert_eq!(e.to_string(), "QUERY_ISSI (0x10a): timed out after 5 ms");
    assert_eq!(e.errno(), 110);
    let waited = rig.now - start;
    assert!((5_000_000..5_000_000 + rig.step_ns).contains(&waited));
    assert_eq!(cmd.stuck_entries(), 1, "entry 0 stays the device's");

    // Commands without mailboxes go to another entry.
    let q = QueryPagesIn {
        op_mod: QUERY_PAGES_BOOT,
        ..QueryPagesIn::default()
    };
    cmd.exec::<SetIssi, _>(&mut rig, &SetIssiIn { current_issi: 1 }, &[])
        .unwrap();
    assert_eq!(
        cmd.exec::<QueryPages, _>(&mut rig, &q, &[])
            .unwrap()
            .num_pages,
        8
    );
    // The mailboxes stay with the lost command.
    assert_eq!(
        cmd.exec::<QueryIssi, _>(&mut rig, &QueryIssiIn::default(), &[]),
        Err(Error::QueueBusy {
            command: "QUERY_ISSI",
            opcode: 0x10a
        })
    );
    // The device finally runs entry 0 and hands it back.
    rig.fw.write32(CMD_DBELL_OFFSET, 1);
    assert_eq!(rig.process(), 1);
    let issi = cmd
        .exec::<QueryIssi, _>(&mut rig, &QueryIssiIn::default(), &[])
        .unwrap();
    assert_eq!(issi.current_issi, 1);
    assert_eq!(cmd.stuck_entries(), 0);
    assert_eq!(rig.fw.log().total(), 0);
}

#[test]
fn teardown_after_running_out_of_pages_leaves_no_page() {
    let mut rig = Rig::new(FwConfig::DEFAULT);
    // The 8 boot pages, then nothing.
    rig.alloc_budget = Some(8);
    let mut f = Function::new(rig.cmd_mem(), Config::default());
    let e = f.bring_up(&mut rig).unwrap_err();
    assert_eq!(
        e,
        Error::PageAlloc {
            wanted: 16,
            given: 0
        }
    );
    assert_eq!(
        e.to_string(),
        "MANAGE_PAGES: out of memory after giving 0 of 16 pages"
    );
    let p = f.progress();
    assert!(p.enabled && !p.initialized);
    assert_eq!((p.issi, p.pages_lent), (1, 8));
    assert_eq!(rig.fw.page_counts().held, 8);
    rig.assert_pages_consistent();
    // Startup pages do not notify the device of the failure.
    assert_eq!(rig.fw.page_counts().alloc_failures, 0);

    f.teardown(&mut rig).unwrap();
    assert_eq!(rig.fw.state(), HcaState::Disabled);
    rig.assert_clean();
}

#[test]
fn injected_init_hca_failure_is_undone_and_the_next_bring_up_works() {
    // What the guest test does with the emulated ConnectX: the device
    // fails the first INIT_HCA; the function is taken back down with
    // every page, and a second bring-up (the next probe) succeeds.
    let cfg = FwConfig {
        fail_opcode: mlx5_prm::command::OP_INIT_HCA,
        fail_count: 1,
        ..FwConfig::DEFAULT
    };
    let mut rig = Rig::new(cfg);
    let mut f = Function::new(rig.cmd_mem(), Config::default());
    let e = f.bring_up(&mut rig).unwrap_err();
    assert_eq!(
        failed(e),
        (
            "INIT_HCA",
            CmdStatus::BadParamErr,
            Reject::Injected.syndrome()
        )
    );
    assert_eq!(
        e.to_string(),
        "INIT_HCA (0x102) failed: status BAD_PARAM_ERR (0x3), syndrome 0x200ff"
    );
    assert!(!f.progress().initialized && f.progress().pages_lent > 0);
    f.teardown(&mut rig).unwrap();
    assert_eq!(rig.fw.state(), HcaState::Disabled);
    assert_eq!(rig.fw.log().total(), 1, "only the injected refusal");
    rig.fw.clear_log();
    rig.assert_clean();
    let mut f = Function::new(rig.cmd_mem(), Config::default());
    f.bring_up(&mut rig).unwrap();
    f.teardown(&mut rig).unwrap();
    assert_eq!(rig.fw.log().total(), 0);
    rig.assert_clean();
}

#[test]
fn teardown_after_a_refused_alloc_uar_leaves_no_page() {
    // One UAR page, and index 0 is never handed out: ALLOC_UAR fails.
    let cfg = FwConfig {
        uars: 1,
        ..FwConfig::DEFAULT
    };
    let mut rig = Rig::new(cfg);
    let mut f = Function::new(rig.cmd_mem(), Config::default());
    let e = f.bring_up(&mut rig).unwrap_err();
    assert_eq!(
        failed(e),
        (
            "ALLOC_UAR",
            CmdStatus::NoResErr,
            Reject::NoFreeUar.syndrome()
        )
    );
    assert_eq!(
        e.to_string(),
        "ALLOC_UAR (0x802) failed: status NO_RES_ERR (0xf), syndrome 0x60001"
    );
    let p = f.progress();
    assert!(p.initialized && p.uar.is_none());
    assert_eq!(p.pages_lent, 24);
    // TEARDOWN_HCA, every page, DISABLE_HCA.
    f.teardown(&mut rig).unwrap();
    assert_eq!(rig.fw.state(), HcaState::Disabled);
    assert_eq!(rig.fw.log().total(), 1, "only the ALLOC_UAR refusal");
    rig.fw.clear_log();
    rig.assert_clean();
}

#[test]
fn device_dying_mid_bring_up_keeps_its_pages_and_teardown_is_bounded() {
    let mut rig = Rig::new(FwConfig::DEFAULT);
    // ENABLE_HCA, QUERY_ISSI, SET_ISSI, QUERY_PAGES, MANAGE_PAGES, then
    // silence.
    rig.die_after_commands = Some(5);
    let cfg = Config {
        timeouts: Timeouts {
            cmd_ms: 20,
            ..Timeouts::default()
        },
        ..Config::default()
    };
    let mut f = Function::new(rig.cmd_mem(), cfg);
    let e = f.bring_up(&mut rig).unwrap_err();
    assert_eq!(
        e.to_string(),
        "QUERY_HCA_CAP (0x100): timed out after 20 ms"
    );
    assert_eq!(f.progress().pages_lent, 8);
    let start = rig.now;
    let e = f.teardown(&mut rig).unwrap_err();
    // The lost QUERY_HCA_CAP holds the mailboxes, so the reclaim cannot
    // even be posted; DISABLE_HCA (inline only) is, and times out.
    assert_eq!(
        e,
        Error::QueueBusy {
            command: "MANAGE_PAGES",
            opcode: 0x108
        }
    );
    assert_eq!(
        e.to_string(),
        "MANAGE_PAGES (0x108): command queue held by commands that timed out"
    );
    // QUERY_HCA_CAP keeps entry 0, DISABLE_HCA the first entry without
    // pools (past the seven lanes).
    assert_eq!(f.cmdif().unwrap().stuck_entries(), 0b1_0000_0001);
    assert!(rig.now - start <= 21_000_000, "{}", rig.now - start);
    // The device still holds the boot pages: the driver freed none.
    let p = f.progress();
    assert!(p.enabled && p.cmdif);
    assert_eq!(p.pages_lent, 8);
    assert_eq!(rig.out.len(), 8);
    rig.assert_pages_consistent();
}

/// A function that vanishes (surprise removal: every register reads all
/// ones) mid-command: the command fails with `DeviceGone` within about a
/// millisecond instead of the 60-second command timeout, every later one
/// fails at once without touching the queue, and teardown gives up at its
/// first command.
#[test]
fn vanished_device_fails_commands_at_once() {
    let mut rig = Rig::new(FwConfig::DEFAULT);
    let mut cmd = enabled(&mut rig, Timeouts::default());
    assert_eq!(cmd.timeouts().cmd_ms, 60_000);
    // The doorbell is lost and the function goes away three relaxes in.
    rig.drop_doorbells = 1;
    rig.vanish_at_relax = Some(rig.relaxes + 3);
    let start = rig.now;
    let e = cmd
        .exec::<QueryIssi, _>(&mut rig, &QueryIssiIn::default(), &[])
        .unwrap_err();
    assert_eq!(
        e,
        Error::DeviceGone {
            command: "QUERY_ISSI",
            opcode: 0x10a
        }
    );
    assert_eq!(
        e.to_string(),
        "QUERY_ISSI (0x10a): the device is gone (its registers read all ones)"
    );
    assert_eq!(e.errno(), 19);
    assert!(e.is_timeout());
    assert!(
        rig.now - start <= 1_000_000 + rig.step_ns,
        "waited {} ns",
        rig.now - start
    );
    // The next command neither waits nor rings.
    let (now, relaxes) = (rig.now, rig.relaxes);
    let q = QueryPagesIn {
        op_mod: QUERY_PAGES_BOOT,
        ..QueryPagesIn::default()
    };
    assert!(matches!(
        cmd.exec::<QueryPages, _>(&mut rig, &q, &[]),
        Err(Error::DeviceGone { .. })
    ));
    assert_eq!((rig.now, rig.relaxes), (now, relaxes));
}

/// A function that is gone before teardown: teardown fails at once, with
/// no command timeout spent.
#[test]
fn teardown_of_a_vanished_function_is_immediate() {
    let mut rig = Rig::new(FwConfig::DEFAULT);
    let mut f = Function::new(rig.cmd_mem(), Config::default());
    f.bring_up(&mut rig).unwrap();
    rig.vanish_at_relax = Some(rig.relaxes);
    let start = rig.now;
    let e = f.teardown(&mut rig).unwrap_err();
    assert!(matches!(e, Error::DeviceGone { .. }), "{e:?}");
    assert!(
        rig.now - start < 1_000_000,
        "teardown took {} ns",
        rig.now - start
    );
}

/// A function whose health check fails while a command waits: the wait
/// ends within a millisecond instead of at the command timeout, later
/// commands are answered without reaching the device (destroys as done,
/// the rest with `InternalError`), and teardown writes the function off
/// with every page it lent, sending nothing.
#[test]
fn internal_error_stops_the_wait_and_teardown_writes_the_function_off() {
    let mut rig = Rig::new(FwConfig::DEFAULT);
    let mut f = Function::new(rig.cmd_mem(), Config::default());
    f.bring_up(&mut rig).unwrap();
    let lent = f.progress().pages_lent;
    assert!(lent > 0);
    // The device stops answering doorbells, and the health check fails
    // 50 relaxes (0.5 ms of the rig's clock) later.
    rig.die_after_commands = Some(rig.fw.stats().commands);
    rig.fatal_at_relax = Some(rig.relaxes + 50);
    let start = rig.now;
    let cmd = f.cmdif().unwrap();
    let e = cmd
        .exec::<QueryIssi, _>(&mut rig, &QueryIssiIn::default(), &[])
        .unwrap_err();
    assert_eq!(
        e,
        Error::InternalError {
            command: "QUERY_ISSI",
            opcode: 0x10a
        }
    );
    assert_eq!(
        e.to_string(),
        "QUERY_ISSI (0x10a): not posted, the function is in internal error"
    );
    assert_eq!(e.errno(), 5);
    assert!(rig.now - start <= 2_000_000, "{}", rig.now - start);
    assert!(f.in_error());
    // Nothing more is posted: a create fails, a destroy is answered.
    let posted = rig.fw.stats().commands;
    let cmd = f.cmdif().unwrap();
    let e = cmd
        .exec::<SetIssi, _>(&mut rig, &SetIssiIn { current_issi: 1 }, &[])
        .unwrap_err();
    assert!(matches!(e, Error::InternalError { .. }), "{e:?}");
    cmd.exec::<mlx5_prm::cmd_res::DeallocPd, _>(
        &mut rig,
        &mlx5_prm::cmd_res::DeallocPdIn { pd: 7 },
        &[],
    )
    .unwrap();
    let relaxes = rig.relaxes;
    f.teardown(&mut rig).unwrap();
    assert_eq!(rig.relaxes, relaxes, "teardown waited for nothing");
    assert_eq!(rig.fw.stats().commands, posted);
    assert_eq!(f.progress(), Default::default());
    assert!(!f.in_error());
    // The pages are the embedder's to free now (the device keeps them in
    // this rig, as a stopped device would until its reset).
    assert_eq!(rig.out.len() as u64, lent);
}

/// `Function::enter_error` on a function that is up: the same write-off.
#[test]
fn entering_internal_error_by_hand_writes_the_function_off() {
    let mut rig = Rig::new(FwConfig::DEFAULT);
    let mut f = Function::new(rig.cmd_mem(), Config::default());
    f.enter_error();
    assert!(!f.in_error(), "nothing to put in error before bring-up");
    f.bring_up(&mut rig).unwrap();
    f.enter_error();
    assert!(f.in_error());
    let posted = rig.fw.stats().commands;
    f.teardown(&mut rig).unwrap();
    assert_eq!(rig.fw.stats().commands, posted);
    assert_eq!(f.pages().lent(), 0);
}
