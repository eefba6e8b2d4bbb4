// SPDX-License-Identifier: GPL-2.0

//! The fast path on the in-process software HCA ([`rmlx5::SoftFabric`]):
//! criterion benchmarks of the same operations as `benches/provider.rs`,
//! but every post and arm here includes the kick, which runs the model and
//! executes the WQE (a SEND lands in the peer's receive buffer, a WRITE in
//! its MR, and the CQEs are written) before `post_send` returns. The
//! figures are therefore the software HCA's, not the provider's.
//!
//! `cargo bench -p rmlx5 --bench fastpath`
//!
//! Two QPs on two devices of one fabric, connected. Posts are timed in runs
//! of [`common::CHUNK`] WRs; after each run, untimed, the completions are
//! polled away and the peer's receives re-posted. The poll benchmarks
//! prepare their CQEs (WRITEs, executed when posted) untimed and time the
//! polls.

mod common;

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{chunked, drain, CHUNK};
use criterion::Criterion;
use rmlx5::{
    Access, ConnectOpts, Cq, Mr, Qp, QpInit, RecvWr, RemoteAddr, SendOp, SendWr, Sge, SoftFabric,
    Wc,
};

/// Group name of every figure of this file.
const GROUP: &str = "software HCA (includes executing the WQE)";

struct Rig {
    _fabric: Arc<SoftFabric>,
    /// Requester: QP `a` on device 0, its send and receive CQ `cq_a`.
    a: Qp,
    cq_a: Cq,
    /// Responder: QP `b` on device 1, its CQ `cq_b`.
    b: Qp,
    cq_b: Cq,
    _mr_a: Mr,
    _mr_b: Mr,
    sge1: [Sge; 1],
    sge3: [Sge; 3],
    /// The receive buffer at the responder.
    rsge: [Sge; 1],
    remote: RemoteAddr,
    wc: Vec<Wc>,
    next_send: u64,
    done_send: u64,
    /// Receives posted at the responder and not yet consumed.
    credit: u64,
}

fn rig() -> Rig {
    let fabric = SoftFabric::new(2).expect("fabric");
    let devs = fabric.devices();
    let ctx_a = devs[0].open().expect("open");
    let ctx_b = devs[1].open().expect("open");
    let pd_a = ctx_a.alloc_pd().expect("pd");
    let pd_b = ctx_b.alloc_pd().expect("pd");
    let cq_a = ctx_a.create_cq(1024, None).expect("cq");
    let cq_b = ctx_b.create_cq(1024, None).expect("cq");
    let init = QpInit {
        max_send_wr: 256,
        max_recv_wr: 256,
        max_send_sge: 4,
        max_recv_sge: 1,
        max_inline_data: 64,
        ..QpInit::default()
    };
    let a = pd_a.create_qp(&cq_a, &cq_a, &init).expect("qp");
    let b = pd_b.create_qp(&cq_b, &cq_b, &init).expect("qp");
    a.connect(&b.endpoint(), &ConnectOpts::default())
        .expect("connect");
    b.connect(&a.endpoint(), &ConnectOpts::default())
        .expect("connect");
    let mr_a = pd_a.reg_mr(1 << 16, Access::ALL).expect("mr");
    let mr_b = pd_b.reg_mr(1 << 16, Access::ALL).expect("mr");
    let sge = |i: usize| mr_a.sge(i * 4096, 64).expect("sge");
    Rig {
        sge1: [sge(0)],
        sge3: [sge(1), sge(2), sge(3)],
        rsge: [mr_b.sge(0, 4096).expect("sge")],
        remote: mr_b.remote(32768).expect("remote"),
        _fabric: fabric,
        a,
        cq_a,
        b,
        cq_b,
        _mr_a: mr_a,
        _mr_b: mr_b,
        wc: vec![Wc::default(); 256],
        next_send: 0,
        done_send: 0,
        credit: 0,
    }
}

impl Rig {
    /// Posts receives at the responder until `n` are waiting, untimed.
    fn top_up(&mut self, n: u64) {
        if self.credit >= n {
            return;
        }
        let wrs: Vec<RecvWr<'_>> = (self.credit..n)
            .map(|i| RecvWr::new(i, &self.rsge))
            .collect();
        self.b.post_recv(&wrs).expect("post_recv");
        self.credit = n;
    }

    /// Polls away `n` send completions (wr_ids checked with `check`) and,
    /// for SENDs, the `n` receive completions at the responder, whose
    /// receives are then posted again.
    fn retire(&mut self, n: u64, sends: bool, check: bool) {
        let next = if check {
            Some(&mut self.done_send)
        } else {
            None
        };
        drain(&self.cq_a, &mut self.wc, n, next);
        if sends {
            drain(&self.cq_b, &mut self.wc, n, None);
            self.credit -= n;
            self.top_up(CHUNK);
        }
    }

    /// Posts `n` signaled 1-SGE WRITEs (lists of up to 32), untimed; the
    /// software HCA executes and completes them at once.
    fn post_writes(&mut self, n: u64) {
        let mut left = n;
        while left > 0 {
            let k = left.min(32);
            let wrs: Vec<SendWr<'_>> = (0..k)
                .map(|i| SendWr::new(self.next_send + i, SendOp::Write(self.remote), &self.sge1))
                .collect();
            self.a.post_send(&wrs).expect("post");
            self.next_send += k;
            left -= k;
        }
    }
}

static PAYLOAD: [u8; 64] = [0x5a; 64];

/// Single-WR posts of `make(rig, wr_id)`; `sends` if they consume receives.
fn bench_post<F>(c: &mut Criterion, name: &str, sends: bool, make: F)
where
    F: for<'a> Fn(&'a Rig, u64) -> SendWr<'a>,
{
    let mut r = rig();
    c.bench_function(&format!("{}/{}", GROUP, name), |b| {
        b.iter_custom(|iters| {
            if sends {
                r.top_up(CHUNK);
            }
            chunked(
                &mut r,
                iters,
                1,
                CHUNK,
                |r, _| {
                    let wr = make(r, r.next_send);
                    r.a.post_send(black_box(&[wr])).expect("post");
                    r.next_send += 1;
                },
                |r, n| r.retire(n, sends, true),
            )
        })
    });
}

fn posts(c: &mut Criterion) {
    bench_post(c, "post_send/inline SEND 8 B", true, |_, id| {
        SendWr::inline(id, SendOp::Send, &PAYLOAD[..8])
    });
    bench_post(c, "post_send/inline SEND 64 B", true, |_, id| {
        SendWr::inline(id, SendOp::Send, &PAYLOAD)
    });
    bench_post(c, "post_send/WRITE 1 SGE", false, |r, id| {
        SendWr::new(id, SendOp::Write(r.remote), &r.sge1)
    });
    bench_post(c, "post_send/WRITE 3 SGEs", false, |r, id| {
        SendWr::new(id, SendOp::Write(r.remote), &r.sge3)
    });
}

fn post_lists(c: &mut Criterion) {
    for n in [1u64, 8, 32] {
        let mut r = rig();
        let list: Vec<SendWr<'_>> = (0..n)
            .map(|i| SendWr::inline(i, SendOp::Send, &PAYLOAD))
            .collect();
        c.bench_function(
            &format!("{}/post_send list/{} x inline SEND 64 B (per WR)", GROUP, n),
            |b| {
                b.iter_custom(|iters| {
                    r.top_up(CHUNK);
                    chunked(
                        &mut r,
                        iters,
                        n,
                        CHUNK,
                        |r, _| r.a.post_send(black_box(&list)).expect("post"),
                        |r, calls| r.retire(calls * n, true, false),
                    )
                })
            },
        );
    }
}

/// CQEs prepared (untimed) per timed run of polls.
const POLL_RUN: u64 = 128;

fn polls(c: &mut Criterion) {
    for batch in [1usize, 16, 64] {
        let mut r = rig();
        c.bench_function(
            &format!(
                "{}/poll/requester CQEs, {} per poll (per CQE)",
                GROUP, batch
            ),
            |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    let mut left = iters;
                    while left > 0 {
                        let k = left.min(POLL_RUN);
                        r.post_writes(k);
                        let mut got = 0u64;
                        let mut last = 0;
                        let t = Instant::now();
                        while got < k {
                            let want = batch.min(usize::try_from(k - got).unwrap_or(batch));
                            last = r.cq_a.poll(black_box(&mut r.wc[..want])).expect("poll");
                            got += last as u64;
                        }
                        total += t.elapsed();
                        assert_eq!(r.wc[last - 1].wr_id, r.next_send - 1);
                        r.done_send = r.next_send;
                        left -= k;
                    }
                    total
                })
            },
        );
    }
    let r = rig();
    let mut wc = [Wc::default(); 1];
    c.bench_function(&format!("{}/poll/empty CQ", GROUP), |b| {
        b.iter(|| r.cq_a.poll(black_box(&mut wc)).expect("poll"))
    });
}

fn arm(c: &mut Criterion) {
    let r = rig();
    c.bench_function(&format!("{}/req_notify/arm (with the kick)", GROUP), |b| {
        b.iter(|| r.cq_a.req_notify(black_box(false)).expect("arm"))
    });
}

fn main() {
    let mut c = common::criterion();
    posts(&mut c);
    post_lists(&mut c);
    polls(&mut c);
    arm(&mut c);
    c.final_summary();
}
