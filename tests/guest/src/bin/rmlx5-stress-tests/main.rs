// SPDX-License-Identifier: GPL-2.0

//! Stress scenarios of rmlx5 (`make stress`; at a small smoke scale also
//! `make check`):
//!
//! - `fuzz_ioctl_sequences`: a state-aware generator of uverbs calls. It
//!   keeps a model of every open context (PDs, MRs, CQs with or without a
//!   channel, QPs and their state, channel and async files, mappings),
//!   predicts each call's outcome from it (success, or the errno the
//!   argument rules of Documentation/uverbs.md give), and mixes valid
//!   object graphs with stale, foreign and made-up handles, boundary sizes,
//!   wrong argument sizes, non-zero reserved and "out" fields, random
//!   modify-QP masks, kicks with bad offsets or garbage WQEs, munmap and
//!   close in the middle of use, and windows in which a second thread
//!   destroys what the first one uses. Every errno must be documented for
//!   its command, valid calls must succeed, and the debugfs object tables
//!   must agree with the model and end at their baseline. With `fuzzdev=N`
//!   it runs on ConnectX function `rmlx5_N` instead, knowing what the
//!   function does differently (`fuzz.rs`), and audits the function's own
//!   counts (debugfs `rmlx5/objects`).
//! - `kill_mid_traffic`: helper processes (this program re-executed with
//!   `--stress-child`) run traffic on `rmlx5_0`/`rmlx5_1` in polling and
//!   event mode, or churn raw objects, and are SIGKILLed at random points;
//!   every round the debugfs object counts must return to the baseline.
//! - `no_lost_event`: several CQs on one completion channel, poster threads
//!   posting signaled SEND_IMM and WRITE_IMM, consumer threads running the
//!   arm / wait / ack / poll loop: every completion is polled exactly once
//!   and no armed CQ's event is lost or doubled.
//!
//! Scale: the environment variable `RMLX5_STRESS`, comma-separated
//! `key=value` (`calls`, `seed`, `kills`, `completions`, `threads`,
//! `cqs`, `dev` for no_lost_event's device, `dev0`, `dev1` for
//! kill_mid_traffic's pair and `fuzzdev` for the fuzzer's function (a
//! ConnectX function in the PCI guest, whose objects debugfs
//! `rmlx5/objects` counts for the baseline; without `fuzzdev` the fuzzer
//! runs on the software HCAs), and `scale`,
//! which divides the three counts); the defaults are
//! a smoke scale (`calls=20000 kills=5 completions=200000 threads=4
//! cqs=4`, each scenario well under a minute in a TCG guest); keys of the
//! other parts of `make stress` (`failslab`, `cve_loops`) are ignored,
//! any other key fails the scenarios. Each scenario prints one
//! `@@STRESS` line with its figures; `@@STRESS fuzz seed=S` first, so that
//! `RMLX5_STRESS=seed=S` replays the single-threaded part of a failing run.
//!
//! Layout: `knobs` (`RMLX5_STRESS`, the seeded random numbers), `sys`
//! (raw system calls, errno names) and `debugfs` (object snapshots,
//! baseline waits, EQ checks) serve all three scenarios; `fuzz` holds the
//! generator and its scenario, with its expectations in `expect`, the
//! kernel's rules in `rules`, its model of live objects in `objects` and
//! its concurrent windows in `window`; `kill` and `events` hold the other
//! two scenarios.

mod debugfs;
mod events;
mod expect;
mod fuzz;
mod kill;
mod knobs;
mod objects;
mod rules;
mod sys;
mod window;

use rmlx5_guest_tests::{run_all, Test};

use crate::events::no_lost_event;
use crate::fuzz::fuzz_ioctl_sequences;
use crate::kill::{child_main, kill_mid_traffic};
use crate::knobs::parse_number;

fn main() {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() == Some("--stress-child") {
        let mode = args.next().unwrap_or_default();
        let seed = args.next().and_then(|s| parse_number(&s)).unwrap_or(1);
        std::process::exit(child_main(&mode, seed));
    }
    std::process::exit(run_all(&[
        Test {
            name: "fuzz_ioctl_sequences",
            run: fuzz_ioctl_sequences,
        },
        Test {
            name: "kill_mid_traffic",
            run: kill_mid_traffic,
        },
        Test {
            name: "no_lost_event",
            run: no_lost_event,
        },
    ]));
}
