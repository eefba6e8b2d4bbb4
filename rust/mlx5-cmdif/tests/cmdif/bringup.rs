// SPDX-License-Identifier: GPL-2.0

//! A function brought up in mlx5_core's order and torn down until the
//! device holds no page.

use hca_model::fw::{FwConfig, HcaState, Readiness};
use mlx5_cmdif::caps::{self, CapSettings};
use mlx5_cmdif::error::Error;
use mlx5_cmdif::function::{Config, Function, Progress};
use mlx5_prm::cmd_hca::{QueryIssi, QueryIssiIn};
use mlx5_prm::hca_cap::{CAP_MODE_CUR, CMDIF_CHECKSUM_DISABLED};
use mlx5_prm::init_seg::FwRev;

use super::rig::{Rig, Run};

#[test]
fn bring_up_then_teardown_returns_every_page() {
    let mut rig = Rig::new(FwConfig::DEFAULT);
    let mut f = Function::new(rig.cmd_mem(), Config::default());
    let s = f.bring_up(&mut rig).unwrap();
    assert_eq!(
        s.fw_rev,
        FwRev {
            major: 16,
            minor: 35,
            subminor: 1012
        }
    );
    assert_eq!((s.cmdif_rev, s.issi), (5, 1));
    assert_eq!((s.boot_pages, s.init_pages, s.pages_lent), (8, 16, 24));
    assert!(!s.checksums);
    // The device's view matches the summary.
    assert_eq!(rig.fw.state(), HcaState::Initialized);
    assert_eq!(rig.fw.issi(), 1);
    let caps = *rig.fw.caps();
    assert_eq!(
        (s.log_max_qp, s.log_max_cq, s.log_max_eq, s.log_max_pd),
        (
            caps.log_max_qp,
            caps.log_max_cq,
            caps.log_max_eq,
            caps.log_max_pd
        )
    );
    assert_eq!((s.log_max_mkey, s.num_ports), (caps.log_max_mkey, 1));
    assert_eq!(f.caps(), &caps);
    // 64 QP slots: log_max_qp 6, below mlx5_core's 18.
    assert_eq!(s.log_max_qp, 6);
    // SET_HCA_CAP ran: checksums go from their reset state (1) to off.
    assert_eq!(caps.cmdif_checksum, CMDIF_CHECKSUM_DISABLED);
    assert_ne!(s.uar, 0, "UAR 0 is never handed out");
    assert_eq!(f.progress().uar, Some(s.uar));
    assert_eq!(rig.fw.page_counts().held, 24);
    rig.assert_pages_consistent();

    f.teardown(&mut rig).unwrap();
    assert_eq!(rig.fw.state(), HcaState::Disabled);
    assert_eq!(f.progress(), Progress::default());
    assert_eq!(
        (f.pages().given_total(), f.pages().returned_total()),
        (24, 24)
    );
    rig.assert_clean();
    let st = rig.fw.stats();
    assert_eq!((st.failed, st.delivery_errors, st.ignored), (0, 0, 0));

    // Down means down: the same function comes up again.
    let again = f.bring_up(&mut rig).unwrap();
    assert_eq!(again.uar, s.uar);
    f.teardown(&mut rig).unwrap();
    rig.assert_clean();
    assert_eq!(rig.fw.page_counts().given_total, 48);
}

#[test]
fn bring_up_twice_is_refused() {
    let mut rig = Rig::new(FwConfig::DEFAULT);
    let mut f = Function::new(rig.cmd_mem(), Config::default());
    f.bring_up(&mut rig).unwrap();
    let commands = rig.fw.stats().commands;
    assert!(matches!(f.bring_up(&mut rig), Err(Error::State { .. })));
    assert_eq!(rig.fw.stats().commands, commands, "nothing posted");
    f.teardown(&mut rig).unwrap();
    rig.assert_clean();
}

#[test]
fn firmware_run_from_the_doorbell_needs_no_wait() {
    let mut rig = Rig::new(FwConfig::DEFAULT);
    rig.run = Run::OnDoorbell;
    let mut f = Function::new(rig.cmd_mem(), Config::default());
    f.bring_up(&mut rig).unwrap();
    f.teardown(&mut rig).unwrap();
    // Every command was done when first polled, and `initializing` was
    // clear when first read.
    assert_eq!(rig.relaxes, 0);
    assert!(rig.fw.stats().commands >= 14);
    rig.assert_clean();
}

#[test]
fn slow_firmware_is_waited_for() {
    let cfg = FwConfig {
        ready: Readiness::AfterTime(50_000_000),
        ..FwConfig::DEFAULT
    };
    let mut rig = Rig::new(cfg);
    rig.step_ns = 1_000_000;
    let mut f = Function::new(rig.cmd_mem(), Config::default());
    f.bring_up(&mut rig).unwrap();
    // 50 ms before the queue address, 50 ms after it, and one step of
    // the clock for each command (the firmware runs while the driver
    // waits).
    let commands = rig.fw.stats().commands;
    assert!(rig.now >= 100_000_000, "{}", rig.now);
    assert!(rig.now <= 102_000_000 + commands * 1_000_000, "{}", rig.now);
    f.teardown(&mut rig).unwrap();
    rig.assert_clean();
}

#[test]
fn command_checksums_sign_and_verify() {
    let mut rig = Rig::new(FwConfig::DEFAULT);
    let cfg = Config {
        caps: CapSettings {
            checksums: true,
            ..CapSettings::default()
        },
        ..Config::default()
    };
    let mut f = Function::new(rig.cmd_mem(), cfg);
    let s = f.bring_up(&mut rig).unwrap();
    assert!(s.checksums);
    // The device checked the signatures of every input mailbox since
    // SET_HCA_CAP (the 16 init pages, the 4 KiB capability reply) and
    // signed its completions, which the driver verified.
    assert!(rig.fw.checksums());
    assert_eq!(rig.fw.log().total(), 0);
    let cmd = f.cmdif().unwrap();
    assert!(cmd.checksums());
    cmd.exec::<QueryIssi, _>(&mut rig, &QueryIssiIn::default(), &[])
        .unwrap();

    // A completion whose output mailbox changed after the device signed
    // it is caught.
    rig.corrupt_next_block_read = true;
    let cmd = f.cmdif().unwrap();
    let e = caps::query_general(cmd, &mut rig, CAP_MODE_CUR).unwrap_err();
    assert_eq!(
        e,
        Error::Signature {
            command: "QUERY_HCA_CAP",
            opcode: 0x100
        }
    );
    assert_eq!(
        e.to_string(),
        "QUERY_HCA_CAP (0x100): bad signature on completion"
    );
    f.teardown(&mut rig).unwrap();
    rig.assert_clean();
}
