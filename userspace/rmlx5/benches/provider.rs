// SPDX-License-Identifier: GPL-2.0

//! The provider alone: criterion benchmarks of the fast path on the null
//! device (`rmlx5::bench::NullHca`), whose doorbells and UAR page are plain
//! memory that nothing executes and which needs no kick.
//!
//! `cargo bench -p rmlx5 --features bench-backend --bench provider`
//!
//! Every figure is the time of one operation (one WR posted, one CQE
//! polled, one arm) in nanoseconds. Posts are timed in runs of
//! [`common::CHUNK`] WRs; after each run, untimed, this file plays the
//! device: it reads the SQ doorbell record, walks the WQEs posted by their
//! control segments, writes one requester CQE (`mlx5_prm::cqe::Cqe64`, with
//! the owner bit of its producer index, the WQE counter and QPN of the WQE)
//! per signaled WQE into the send CQ, and polls them all back, checking the
//! wr_ids. So the SQ never fills, every timed post builds and rings a real
//! WQE, and every CQE polled is parsed and retires its WQE. The poll
//! benchmarks prepare their CQEs that way, untimed, and time the polls.

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use common::{chunked, drain, CHUNK};
use criterion::Criterion;
use mlx5_prm::cqe::{Cqe64, OpOwn, CQE_SIZE};
use mlx5_prm::opcode::CqeOpcode;
use mlx5_prm::ring::{owner_bit, wqebb_count};
use mlx5_prm::wqe::{CtrlSeg, CE_ERROR_ONLY};
use rmlx5::bench::{ring_send_doorbell, CqRing, NullHca, RecvQueue, SendQueue};
use rmlx5::{Access, ConnectOpts, Cq, Mr, Qp, QpInit, RecvWr, RemoteAddr, SendOp, SendWr, Sge, Wc};

/// The device side of the null HCA, as the benchmark plays it.
struct Device {
    sq: SendQueue,
    rq: RecvQueue,
    scq: CqRing,
    rcq: CqRing,
    /// Next WQE to look at (WQEBB index), next receive WQE to consume.
    sq_ci: u16,
    rq_ci: u16,
    /// Producer indexes of the two CQs.
    scq_pi: u32,
    rcq_pi: u32,
}

fn cqe(
    opcode: CqeOpcode,
    owner: bool,
    qpn: u32,
    counter: u16,
    send_opcode: u8,
    len: u32,
) -> [u8; CQE_SIZE] {
    let mut b = [0u8; CQE_SIZE];
    Cqe64 {
        ml_path: 0,
        slid: 0,
        grh: 0,
        sl: 0,
        src_qpn: 0,
        srqn_uidx: 0,
        imm_inval_rkey: 0,
        byte_cnt: len,
        send_opcode,
        qpn,
        wqe_counter: counter,
        signature: 0,
        op_own: OpOwn {
            opcode,
            format: 0,
            solicited: false,
            owner,
        },
    }
    .encode(&mut b);
    b
}

impl Device {
    /// One requester CQE per signaled WQE posted since the last call.
    fn complete_sends(&mut self) -> u64 {
        let pi = self.sq.producer();
        let mut n = 0;
        while self.sq_ci != pi {
            let ctrl = CtrlSeg::decode(&self.sq.ctrl(self.sq_ci).expect("ctrl")).expect("WQE");
            if ctrl.ce != CE_ERROR_ONLY {
                let owner = owner_bit(self.scq_pi, self.scq.log_size());
                let c = cqe(
                    CqeOpcode::Req,
                    owner,
                    ctrl.qpn,
                    ctrl.wqe_index,
                    ctrl.opcode.into(),
                    0,
                );
                self.scq.write(self.scq_pi, &c).expect("send CQ overrun");
                self.scq_pi = self.scq_pi.wrapping_add(1);
                n += 1;
            }
            self.sq_ci = self.sq_ci.wrapping_add(u16::from(wqebb_count(ctrl.ds)));
        }
        n
    }

    /// One responder CQE (a 64-byte SEND received) per receive posted since
    /// the last call.
    fn complete_recvs(&mut self, qpn: u32) -> u64 {
        let pi = self.rq.producer();
        let mut n = 0;
        while self.rq_ci != pi {
            let owner = owner_bit(self.rcq_pi, self.rcq.log_size());
            let c = cqe(CqeOpcode::RespSend, owner, qpn, self.rq_ci, 0, 64);
            self.rcq.write(self.rcq_pi, &c).expect("recv CQ overrun");
            self.rcq_pi = self.rcq_pi.wrapping_add(1);
            self.rq_ci = self.rq_ci.wrapping_add(1);
            n += 1;
        }
        n
    }
}

struct Rig {
    hca: NullHca,
    scq: Cq,
    rcq: Cq,
    qp: Qp,
    _mr: Mr,
    sge1: [Sge; 1],
    sge3: [Sge; 3],
    remote: RemoteAddr,
    dev: Device,
    wc: Vec<Wc>,
    /// wr_id of the next send WR posted, and of the next send completion.
    next_send: u64,
    done_send: u64,
    /// The same for receives.
    next_recv: u64,
    done_recv: u64,
}

fn rig(blueflame: bool) -> Rig {
    let hca = NullHca::new().expect("null device");
    let ctx = hca.open().expect("open");
    let pd = ctx.alloc_pd().expect("pd");
    let scq = ctx.create_cq(1024, None).expect("cq");
    let rcq = ctx.create_cq(1024, None).expect("cq");
    let init = QpInit {
        max_send_wr: 256,
        max_recv_wr: 256,
        max_send_sge: 4,
        max_recv_sge: 1,
        max_inline_data: 64,
        blueflame,
        ..QpInit::default()
    };
    let qp = pd.create_qp(&scq, &rcq, &init).expect("qp");
    qp.connect(&qp.endpoint(), &ConnectOpts::default())
        .expect("connect");
    let mr = pd.reg_mr(1 << 16, Access::ALL).expect("mr");
    let sge = |i: usize| mr.sge(i * 4096, 64).expect("sge");
    let dev = Device {
        sq: hca.send_queue(&qp).expect("sq"),
        rq: hca.recv_queue(&qp).expect("rq"),
        scq: hca.cq_ring(&scq).expect("cq ring"),
        rcq: hca.cq_ring(&rcq).expect("cq ring"),
        sq_ci: 0,
        rq_ci: 0,
        scq_pi: 0,
        rcq_pi: 0,
    };
    Rig {
        sge1: [sge(0)],
        sge3: [sge(1), sge(2), sge(3)],
        remote: mr.remote(32768).expect("remote"),
        hca,
        scq,
        rcq,
        qp,
        _mr: mr,
        dev,
        wc: vec![Wc::default(); 256],
        next_send: 0,
        done_send: 0,
        next_recv: 0,
        done_recv: 0,
    }
}

impl Rig {
    /// The device completes every send posted so far, and they are polled
    /// back (wr_ids checked).
    fn retire_sends(&mut self) {
        let n = self.dev.complete_sends();
        drain(&self.scq, &mut self.wc, n, Some(&mut self.done_send));
    }

    /// The device completes every receive posted so far, and they are
    /// polled back (wr_ids checked).
    fn retire_recvs(&mut self) {
        let n = self.dev.complete_recvs(self.qp.qpn());
        drain(&self.rcq, &mut self.wc, n, Some(&mut self.done_recv));
    }

    /// Posts `n` signaled 1-SGE WRITEs (lists of up to 32), untimed.
    fn post_writes(&mut self, n: u64) {
        let mut left = n;
        while left > 0 {
            let k = left.min(32);
            let wrs: Vec<SendWr<'_>> = (0..k)
                .map(|i| SendWr::new(self.next_send + i, SendOp::Write(self.remote), &self.sge1))
                .collect();
            self.qp.post_send(&wrs).expect("post");
            self.next_send += k;
            left -= k;
        }
    }

    /// Posts `n` 1-SGE receives, untimed.
    fn post_recvs(&mut self, n: u64) {
        let wrs: Vec<RecvWr<'_>> = (0..n)
            .map(|i| RecvWr::new(self.next_recv + i, &self.sge1))
            .collect();
        self.qp.post_recv(&wrs).expect("post_recv");
        self.next_recv += n;
    }
}

static PAYLOAD: [u8; 64] = [0x5a; 64];

/// Single-WR posts of `make(rig, wr_id)`, retired by the device after each
/// timed run.
fn bench_post<F>(c: &mut Criterion, name: &str, blueflame: bool, make: F)
where
    F: for<'a> Fn(&'a Rig, u64) -> SendWr<'a>,
{
    let mut r = rig(blueflame);
    c.bench_function(name, |b| {
        b.iter_custom(|iters| {
            chunked(
                &mut r,
                iters,
                1,
                CHUNK,
                |r, _| {
                    let wr = make(r, r.next_send);
                    r.qp.post_send(black_box(&[wr])).expect("post");
                    r.next_send += 1;
                },
                |r, _| r.retire_sends(),
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
    bench_post(
        c,
        "post_send/inline SEND 64 B, BlueFlame off",
        false,
        |_, id| SendWr::inline(id, SendOp::Send, &PAYLOAD),
    );
    bench_post(c, "post_send/WRITE 1 SGE", true, |r, id| {
        SendWr::new(id, SendOp::Write(r.remote), &r.sge1)
    });
    bench_post(c, "post_send/WRITE 3 SGEs", true, |r, id| {
        SendWr::new(id, SendOp::Write(r.remote), &r.sge3)
    });
}

fn post_lists(c: &mut Criterion) {
    for n in [1u64, 8, 32] {
        let mut r = rig(true);
        let list: Vec<SendWr<'_>> = (0..n)
            .map(|i| SendWr::inline(i, SendOp::Send, &PAYLOAD))
            .collect();
        c.bench_function(
            &format!("post_send list/{} x inline SEND 64 B (per WR)", n),
            |b| {
                b.iter_custom(|iters| {
                    chunked(
                        &mut r,
                        iters,
                        n,
                        CHUNK,
                        |r, _| r.qp.post_send(black_box(&list)).expect("post"),
                        |r, _| {
                            let k = r.dev.complete_sends();
                            drain(&r.scq, &mut r.wc, k, None);
                        },
                    )
                })
            },
        );
    }
}

fn doorbells(c: &mut Criterion) {
    for (len, wqe_bytes) in [(8usize, 64), (64, 128)] {
        let mut r = rig(true);
        let at = r.dev.sq.producer();
        r.qp.post_send(&[SendWr::inline(0, SendOp::Send, &PAYLOAD[..len])])
            .expect("post");
        r.next_send = 1;
        let wqe = r.dev.sq.wqe(at).expect("wqe");
        assert_eq!(usize::from(wqe.wqebbs()) * 64, wqe_bytes);
        for (bf, what) in [(false, "8-byte doorbell"), (true, "BlueFlame copy")] {
            c.bench_function(
                &format!("doorbell/{}, {}-byte WQE (ring only)", what, wqe_bytes),
                |b| b.iter(|| ring_send_doorbell(&r.qp, black_box(&wqe), bf).expect("ring")),
            );
        }
        r.retire_sends();
    }
}

fn recvs(c: &mut Criterion) {
    let mut r = rig(true);
    c.bench_function("post_recv/1 SGE", |b| {
        b.iter_custom(|iters| {
            chunked(
                &mut r,
                iters,
                1,
                CHUNK,
                |r, _| {
                    r.qp.post_recv(black_box(&[RecvWr::new(r.next_recv, &r.sge1)]))
                        .expect("post_recv");
                    r.next_recv += 1;
                },
                |r, _| r.retire_recvs(),
            )
        })
    });
}

/// CQEs prepared (untimed) per timed run of polls.
const POLL_RUN: u64 = 128;

/// Times polling `k` prepared CQEs from `cq` in calls of up to `batch`,
/// then checks that the last one carried `last_wr_id`.
fn timed_polls(cq: &Cq, wc: &mut [Wc], k: u64, batch: usize, last_wr_id: u64) -> Duration {
    let mut got = 0u64;
    let mut last = 0;
    let t = Instant::now();
    while got < k {
        let want = batch.min(usize::try_from(k - got).unwrap_or(batch));
        last = cq.poll(black_box(&mut wc[..want])).expect("poll");
        got += last as u64;
    }
    let d = t.elapsed();
    assert_eq!(got, k, "more CQEs than prepared");
    assert_eq!(wc[last - 1].wr_id, last_wr_id, "wrong completion");
    d
}

fn polls(c: &mut Criterion) {
    for batch in [1usize, 16, 64] {
        let mut r = rig(true);
        c.bench_function(
            &format!("poll/requester CQEs, {} per poll (per CQE)", batch),
            |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    let mut left = iters;
                    while left > 0 {
                        let k = left.min(POLL_RUN);
                        r.post_writes(k);
                        assert_eq!(r.dev.complete_sends(), k);
                        total += timed_polls(&r.scq, &mut r.wc, k, batch, r.next_send - 1);
                        r.done_send = r.next_send;
                        left -= k;
                    }
                    total
                })
            },
        );
    }
    let mut r = rig(true);
    c.bench_function("poll/responder CQEs, 16 per poll (per CQE)", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let k = left.min(POLL_RUN);
                r.post_recvs(k);
                assert_eq!(r.dev.complete_recvs(r.qp.qpn()), k);
                total += timed_polls(&r.rcq, &mut r.wc, k, 16, r.next_recv - 1);
                r.done_recv = r.next_recv;
                left -= k;
            }
            total
        })
    });
    let r = rig(true);
    let mut wc = [Wc::default(); 1];
    c.bench_function("poll/empty CQ", |b| {
        b.iter(|| r.scq.poll(black_box(&mut wc)).expect("poll"))
    });
    assert!(r.hca.cq_ring(&r.scq).is_ok());
}

fn arm(c: &mut Criterion) {
    let r = rig(true);
    c.bench_function("req_notify/arm", |b| {
        b.iter(|| r.scq.req_notify(black_box(false)).expect("arm"))
    });
    assert!(r.hca.cq_ring(&r.scq).is_ok());
}

fn main() {
    let mut c = common::criterion();
    posts(&mut c);
    post_lists(&mut c);
    doorbells(&mut c);
    recvs(&mut c);
    polls(&mut c);
    arm(&mut c);
    c.final_summary();
}
