// SPDX-License-Identifier: GPL-2.0

//! Host microbenchmark of the software HCA: nanoseconds per executed
//! 64-byte SEND+RECV pair and per 64-byte RDMA_WRITE, posted one at a time
//! and in lists of 32 (one doorbell per list).
//!
//! Run with `cargo bench -p hca-model`. Two numbers are printed per case:
//! the whole loop (the test harness playing the provider: building WQEs,
//! doorbell record, UAR store, polling CQEs), and the model alone (the
//! doorbell call and the engine run).
//!
//! Two environment variables make it usable under a profiler:
//! `HCA_BENCH_OPS` (operations per case, default 400,000) and
//! `HCA_BENCH_CASE` (run only the cases whose name contains it, e.g.
//! `WRITE batch  1`). Documentation/benchmarking.md shows a callgrind run
//! that splits a WRITE into the engine's phases.

// Host-only test code: the kernel lint set's cast pedantry is relaxed here.
#![allow(missing_docs, unreachable_pub, dead_code)]
#![allow(
    clippy::cast_lossless,
    clippy::wrong_self_convention,
    clippy::float_arithmetic
)]

#[path = "../tests/model/harness.rs"]
mod harness;
#[path = "../tests/model/mem.rs"]
mod mem;
#[path = "../tests/model/provider.rs"]
mod provider;

use std::hint::black_box;
use std::time::{Duration, Instant};

use harness::*;
use hca_model::mr::Access;

struct Bench {
    w: World,
    a: TestQp,
    b: TestQp,
    acq: TestCq,
    bcq: TestCq,
    src: Sge,
    dst: Sge,
    rkey: u32,
}

fn setup() -> Bench {
    let mut w = World::new(2);
    w.mem.checks = false;
    let (pa, pb) = (w.pd(0), w.pd(1));
    let acq = w.cq(0, 12);
    let bcq = w.cq(1, 12);
    let caps = QpCaps {
        sq_wqebbs: 1024,
        rq_wqes: 1024,
        ..QpCaps::default()
    };
    let a = w.qp(0, pa, &acq, &acq, caps);
    let b = w.qp(1, pb, &bcq, &bcq, caps);
    w.connect(&a, &b);
    let abuf = w.buffer(4096);
    let bbuf = w.buffer(4096);
    let akey = w.mr(0, pa, abuf, 4096, Access::ALL);
    let bkey = w.mr(1, pb, bbuf, 4096, Access::ALL);
    Bench {
        w,
        a,
        b,
        acq,
        bcq,
        src: Sge {
            addr: abuf,
            len: 64,
            lkey: akey,
        },
        dst: Sge {
            addr: bbuf,
            len: 64,
            lkey: bkey,
        },
        rkey: bkey,
    }
}

/// Runs `rounds` rounds of `batch` operations; returns (total, model-only)
/// time per operation in ns.
fn run(batch: usize, rounds: usize, send: bool) -> (f64, f64) {
    let mut bn = setup();
    let wr = if send {
        Wr::new(1, WrOp::Send, &[bn.src])
    } else {
        Wr::new(
            1,
            WrOp::Write {
                raddr: bn.dst.addr,
                rkey: bn.rkey,
            },
            &[bn.src],
        )
    };
    let wrs: Vec<Wr> = (0..batch)
        .map(|i| Wr {
            id: i as u64,
            ..wr.clone()
        })
        .collect();
    let mut model = Duration::ZERO;
    let mut done = 0usize;
    let start = Instant::now();
    for _ in 0..rounds {
        if send {
            for i in 0..batch {
                bn.w.post_recv(&mut bn.b, i as u64, &[bn.dst]);
            }
        }
        let mut last = (0, 0);
        for wr in &wrs {
            last = bn.w.build_wqe(&mut bn.a, wr);
        }
        let t = Instant::now();
        bn.w.ring_sq(&mut bn.a, last.0, last.1, Ring::Plain)
            .unwrap();
        let r = bn.w.fabric.run(&mut bn.w.mem, u32::MAX);
        model += t.elapsed();
        black_box(r);
        let mut n = 0;
        while bn.w.poll(&mut bn.acq, &[&bn.a]).is_some() {
            n += 1;
        }
        if send {
            while bn.w.poll(&mut bn.bcq, &[&bn.b]).is_some() {
                n += 1;
            }
        }
        done += n;
    }
    let total = start.elapsed();
    let per_round = if send { 2 * batch } else { batch };
    assert_eq!(done, rounds * per_round, "every operation completed");
    let ops = (rounds * batch) as f64;
    (total.as_nanos() as f64 / ops, model.as_nanos() as f64 / ops)
}

fn main() {
    let ops = std::env::var("HCA_BENCH_OPS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(400_000);
    let only = std::env::var("HCA_BENCH_CASE").unwrap_or_default();
    // Warm up.
    run(32, (ops / 200).max(1), true);
    println!("hca-model host benchmark (ns per operation; whole loop / model only)");
    for (name, send) in [
        ("64-byte SEND+RECV pair", true),
        ("64-byte RDMA_WRITE", false),
    ] {
        for batch in [1usize, 32] {
            let case = format!("{name:<24} batch {batch:>2}");
            if !case.contains(only.as_str()) {
                continue;
            }
            let rounds = (ops / batch).max(1);
            let (total, model) = run(batch, rounds, send);
            println!("{case}: {total:>8.1} ns / {model:>8.1} ns");
        }
    }
}
