// SPDX-License-Identifier: GPL-2.0

//! Shared by the two benchmarks: the criterion settings and the timing loop
//! that keeps the device's side of the work (completing, re-posting
//! receives, polling completions away) out of the figures.

use std::time::{Duration, Instant};

use criterion::Criterion;
use rmlx5::{Cq, Wc};

/// WRs timed back to back before the untimed step that retires them: far
/// below the queue depths, and long enough that the two clock reads cost
/// well under a nanosecond per WR.
pub(crate) const CHUNK: u64 = 64;

/// One second of warm-up and three of measurement per benchmark (the
/// command line may say otherwise, e.g. `--measurement-time 10`).
pub(crate) fn criterion() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args()
}

/// Runs operations worth `iters` iterations, `unit` iterations per call
/// (a post list of `unit` WRs, or 1), `chunk` iterations per timed run.
/// `op(state, k)` (the k-th call) is timed; `after(state, n)` runs after
/// each timed run of `n` calls and is not. Returns the time of `iters`
/// iterations (scaled when `iters` is not a multiple of `unit`).
pub(crate) fn chunked<S>(
    state: &mut S,
    iters: u64,
    unit: u64,
    chunk: u64,
    mut op: impl FnMut(&mut S, u64),
    mut after: impl FnMut(&mut S, u64),
) -> Duration {
    let calls = iters.div_ceil(unit);
    let per_chunk = (chunk / unit).max(1);
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < calls {
        let n = per_chunk.min(calls - done);
        let t = Instant::now();
        for k in done..done + n {
            op(state, k);
        }
        total += t.elapsed();
        after(state, n);
        done += n;
    }
    let ran = u128::from(calls * unit);
    let ns = total.as_nanos() * u128::from(iters) / ran.max(1);
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

/// Polls `cq` until `n` completions were read, each successful; with
/// `next_wr_id`, they must carry consecutive wr_ids from it.
pub(crate) fn drain(cq: &Cq, wc: &mut [Wc], n: u64, mut next_wr_id: Option<&mut u64>) {
    let mut left = n;
    let mut idle = 0u32;
    while left > 0 {
        let want = usize::try_from(left).unwrap_or(usize::MAX).min(wc.len());
        let got = cq.poll(&mut wc[..want]).expect("poll");
        if got == 0 {
            idle += 1;
            assert!(idle < 1 << 24, "{} completions missing", left);
            continue;
        }
        for w in &wc[..got] {
            assert!(w.is_ok(), "completion in error: {:?}", w);
            if let Some(id) = next_wr_id.as_deref_mut() {
                assert_eq!(w.wr_id, *id, "completions out of order");
                *id += 1;
            }
        }
        left -= got as u64;
    }
}
