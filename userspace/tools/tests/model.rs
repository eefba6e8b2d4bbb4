// SPDX-License-Identifier: GPL-2.0

//! The tools run end to end against the in-process software HCA.

use std::process::Command;

fn run(bin: &str, args: &[&str]) -> String {
    let out = Command::new(bin).args(args).output().expect("spawn");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{} {:?} failed: {}{}",
        bin,
        args,
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn devinfo_lists_both_devices() {
    let out = run(
        env!("CARGO_BIN_EXE_rmlx5-devinfo"),
        &["--model", "--verbose"],
    );
    assert!(out.contains("hca_id:\trmlx5_0") && out.contains("hca_id:\trmlx5_1"));
    assert!(out.contains("PORT_ACTIVE") && out.contains("port_lid:\t\t2"));
}

#[test]
fn pingpong_polling_and_events_one_or_two_devices() {
    let bin = env!("CARGO_BIN_EXE_rmlx5-pingpong");
    for extra in [
        &[][..],
        &["--events"],
        &["--peer-device", "0"],
        &["--events", "--size", "1"],
    ] {
        let mut args = vec!["--model", "--iters", "200"];
        args.extend_from_slice(extra);
        let out = run(bin, &args);
        assert!(
            out.contains("Mbit/sec") && out.contains("usec/iter"),
            "{}",
            out
        );
    }
}

#[test]
fn perf_every_test() {
    let bin = env!("CARGO_BIN_EXE_rmlx5-perf");
    for (test, extra) in [
        ("send_lat", &[][..]),
        ("write_lat", &["--events"][..]),
        ("read_lat", &["--size", "4096"][..]),
        ("write_bw", &["--post-list", "32", "--cq-mod", "16"][..]),
        ("send_bw", &["--size", "4096"][..]),
    ] {
        let mut args = vec!["--model", "--test", test, "--iters", "500"];
        args.extend_from_slice(extra);
        let out = run(bin, &args);
        assert!(out.contains("#bytes"), "{}", out);
    }
}
