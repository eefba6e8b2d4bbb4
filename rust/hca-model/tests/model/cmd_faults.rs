// SPDX-License-Identifier: GPL-2.0

//! Failures on demand (`Firmware::inject`), as a driver meets them: a
//! fatal error fills the health buffer and leaves every later command
//! with the device while the health counter goes on; a silent hang leaves
//! the buffer clear and stops the counter; a stuck command never
//! completes while the next ones do. None of them is logged as something
//! the driver did wrong, and only a new firmware clears them.

use hca_model::fw::{Fault, Faults, Firmware, FwConfig};
use mlx5_prm::cmd_hca::{QueryIssi, QueryIssiIn};
use mlx5_prm::cmd_queue::CMD_LAYOUT_SIZE;
use mlx5_prm::command;
use mlx5_prm::ifc::Layout;
use mlx5_prm::init_seg::{
    HealthBuffer, CMD_DBELL_OFFSET, FW_REV_OFFSET, HEALTH_BUFFER_SIZE, HEALTH_COUNTER_OFFSET,
    HEALTH_OFFSET, HEALTH_SYNDROME_FW_INTERNAL_ERR, HEALTH_SYNDROME_HW_FATAL_ERR,
};

use super::cmd_driver::*;
use super::cmd_vport::set_port;
use super::harness::TestEq;

/// The health buffer as a driver reads it, a register at a time.
fn health(b: &mut Bed, d: usize) -> HealthBuffer {
    let mut raw = [0u8; HEALTH_BUFFER_SIZE];
    for (i, w) in raw.chunks_exact_mut(4).enumerate() {
        w.copy_from_slice(&b.devs[d].fw.read32(HEALTH_OFFSET + 4 * i).to_be_bytes());
    }
    HealthBuffer::decode(&raw)
}

fn counter(b: &mut Bed, d: usize) -> u32 {
    b.devs[d].fw.read32(HEALTH_COUNTER_OFFSET)
}

/// QUERY_ISSI through the next entry: `Ok` if the device completed it.
fn query_issi(b: &mut Bed, d: usize) -> Result<Reply, Lost> {
    let mut msg = [0u8; 16];
    command::encode_in::<QueryIssi>(&QueryIssiIn::default(), &[], &mut msg).unwrap();
    b.exec_raw(d, &msg, mlx5_prm::cmd_hca::QueryIssiOut::SIZE)
}

/// Moves the device clock by `ns`.
fn later(b: &mut Bed, d: usize, now: &mut u64, ns: u64) {
    *now += ns;
    b.devs[d].fw.set_time(*now);
}

#[test]
fn a_fatal_error_reports_health_and_runs_nothing() {
    let mut b = Bed::up(1);
    let mut now = 0;
    later(&mut b, 0, &mut now, 3_000_000_000);
    assert_eq!(health(&mut b, 0), HealthBuffer::default(), "healthy");
    assert!(b.devs[0].fw.inject(Fault::Fatal {
        synd: HEALTH_SYNDROME_HW_FATAL_ERR
    }));
    assert!(b.devs[0].fw.halted());
    let h = health(&mut b, 0);
    assert_eq!(h.synd, HEALTH_SYNDROME_HW_FATAL_ERR);
    assert!(h.reset_requested(), "the firmware asks for a reset");
    assert_eq!(h.severity(), Some(2), "LOGLEVEL_CRIT");
    assert_eq!(h.rfr_severity >> 6 & 1, 0, "no cold reset needed");
    assert_eq!(h.fw_ver, b.devs[0].fw.read32(FW_REV_OFFSET));
    assert_ne!(h.fw_ver, u32::MAX, "the link is not gone");
    assert_eq!(h.hw_id, 0x20d);
    assert_eq!(h.time, 3);
    assert_eq!(h.assert_var[0], u32::from(HEALTH_SYNDROME_HW_FATAL_ERR));
    // Commands stay with the device; nothing is refused or logged.
    assert_eq!(query_issi(&mut b, 0).unwrap_err(), Lost::Timeout);
    assert_eq!(query_issi(&mut b, 0).unwrap_err(), Lost::Timeout);
    let s = *b.devs[0].fw.stats();
    assert_eq!(s.unanswered, 2);
    assert_eq!(s.faults, 1);
    assert_eq!(b.devs[0].fw.log().total(), 0);
    // The health counter goes on.
    let c = counter(&mut b, 0);
    later(&mut b, 0, &mut now, 5_000_000);
    assert_eq!(counter(&mut b, 0), c + 5);
    // Nothing more takes: the firmware is down already.
    assert!(!b.devs[0].fw.inject(Fault::Silent));
    assert!(!b.devs[0].fw.inject(Fault::StuckNextCommand));
    assert_eq!(
        b.devs[0].fw.faults(),
        Faults {
            halt: Some(Fault::Fatal {
                synd: HEALTH_SYNDROME_HW_FATAL_ERR
            }),
            stick_next: false,
            stuck_entries: 0,
        }
    );
    // A dead firmware posts no port change either.
    assert!(set_port(&mut b, 0, false));
    let eq = &b.w.ctx[0].async_eq;
    let mut eq = TestEq {
        eqn: eq.eqn,
        buf: eq.buf,
        log: eq.log,
        ci: eq.ci,
    };
    assert!(read_eqes(&b.w.mem, &mut eq).is_empty());
    assert_eq!(b.devs[0].fw.stats().port_events, 0);
}

#[test]
fn a_fatal_error_with_no_syndrome_reports_an_internal_error() {
    let mut b = Bed::up(1);
    assert!(b.devs[0].fw.inject(Fault::Fatal { synd: 0 }));
    assert_eq!(health(&mut b, 0).synd, HEALTH_SYNDROME_FW_INTERNAL_ERR);
    assert_eq!(
        b.devs[0].fw.faults().halt,
        Some(Fault::Fatal {
            synd: HEALTH_SYNDROME_FW_INTERNAL_ERR
        })
    );
}

#[test]
fn a_silent_hang_stops_the_health_counter() {
    let mut b = Bed::up(1);
    let mut now = 0;
    later(&mut b, 0, &mut now, 1_000_000);
    assert!(b.devs[0].fw.inject(Fault::Silent));
    let c = counter(&mut b, 0);
    later(&mut b, 0, &mut now, 10_000_000);
    assert_eq!(query_issi(&mut b, 0).unwrap_err(), Lost::Timeout);
    assert_eq!(counter(&mut b, 0), c, "the counter stands still");
    // The buffer says nothing; registers still answer.
    assert_eq!(health(&mut b, 0), HealthBuffer::default());
    assert_eq!(b.devs[0].fw.read32(FW_REV_OFFSET), 35 << 16 | 16);
    assert_eq!(b.devs[0].fw.stats().unanswered, 1);
    assert_eq!(b.devs[0].fw.log().total(), 0);
}

#[test]
fn a_stuck_command_never_completes_and_the_rest_go_on() {
    let mut b = Bed::up(1);
    assert!(b.devs[0].fw.inject(Fault::StuckNextCommand));
    assert!(
        !b.devs[0].fw.inject(Fault::StuckNextCommand),
        "one at a time: a repeated store counts once"
    );
    assert!(!b.devs[0].fw.halted());
    let slot = b.devs[0].next_slot;
    assert_eq!(query_issi(&mut b, 0).unwrap_err(), Lost::Timeout);
    assert_eq!(
        b.devs[0].fw.faults(),
        Faults {
            halt: None,
            stick_next: false,
            stuck_entries: 1 << slot,
        }
    );
    // The next commands complete (with their command EQEs).
    let r = query_issi(&mut b, 0).unwrap();
    assert_eq!(r.status().0, mlx5_prm::cmd_status::CmdStatus::Ok);
    let pd = b.alloc_pd(0);
    b.dealloc_pd(0, pd);
    // Ringing the stuck entry again does nothing: it is still the
    // device's.
    let addr = b.devs[0].cmdq + (u64::from(slot) << b.devs[0].log_stride.max(6));
    b.devs[0].fw.write32(CMD_DBELL_OFFSET, 1 << slot);
    assert_eq!(b.process(0), 0);
    assert_eq!(
        b.w.mem.get(addr + CMD_LAYOUT_SIZE as u64 - 1, 1)[0] & 1,
        1,
        "still owned by the device"
    );
    let s = *b.devs[0].fw.stats();
    assert_eq!((s.unanswered, s.faults), (2, 1));
    assert_eq!(b.devs[0].fw.log().total(), 0);
}

#[test]
fn a_new_firmware_has_no_fault() {
    let fw: Firmware<hca_model_pages::Store> = Firmware::new(
        FwConfig::DEFAULT,
        hca_model_pages::Store(Box::new([0; PAGE_SLOTS])),
    );
    assert_eq!(fw.faults(), Faults::default());
    assert!(!fw.halted());
    assert_eq!(fw.stats().faults, 0);
}
