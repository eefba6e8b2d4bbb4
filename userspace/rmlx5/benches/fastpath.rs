// SPDX-License-Identifier: GPL-2.0

//! Host microbenchmark of the provider fast path against the in-process
//! software HCA: ns per `post_send` (64-byte inline SEND, 3-SGE WRITE), per
//! CQE polled, per CQ arm. Every post and arm includes the kick, which on
//! this backend runs the model (so the model's execution of the WQE is part
//! of the post cost). `cargo bench -p rmlx5` prints the numbers.

use std::time::Instant;

use rmlx5::{Access, ConnectOpts, QpInit, RecvWr, SendOp, SendWr, SoftFabric, Wc};

const BATCH: usize = 256;
const ROUNDS: usize = 200;

fn main() {
    let fabric = SoftFabric::new(2).expect("fabric");
    let devs = fabric.devices();
    let ctx_a = devs[0].open().expect("open");
    let ctx_b = devs[1].open().expect("open");
    let pd_a = ctx_a.alloc_pd().expect("pd");
    let pd_b = ctx_b.alloc_pd().expect("pd");
    let cq_a = ctx_a.create_cq(4096, None).expect("cq");
    let cq_b = ctx_b.create_cq(4096, None).expect("cq");
    let init = QpInit {
        max_send_wr: 1024,
        max_recv_wr: 1024,
        max_inline_data: 128,
        ..QpInit::default()
    };
    let qa = pd_a.create_qp(&cq_a, &cq_a, &init).expect("qp");
    let qb = pd_b.create_qp(&cq_b, &cq_b, &init).expect("qp");
    qa.connect(&qb.endpoint(), &ConnectOpts::default())
        .expect("connect");
    qb.connect(&qa.endpoint(), &ConnectOpts::default())
        .expect("connect");
    let mr_a = pd_a.reg_mr(1 << 20, Access::ALL).expect("mr");
    let mr_b = pd_b.reg_mr(1 << 20, Access::ALL).expect("mr");
    let payload = [0x5au8; 64];
    let rsge = [mr_b.sge(0, 4096).expect("sge")];
    let recvs: Vec<RecvWr<'_>> = (0..BATCH as u64).map(|i| RecvWr::new(i, &rsge)).collect();
    let mut wc = vec![Wc::default(); BATCH];

    let drain = |cq: &rmlx5::Cq, wc: &mut [Wc], n: usize| -> u128 {
        let t = Instant::now();
        let mut got = 0;
        while got < n {
            got += cq.poll(&mut wc[..]).expect("poll");
        }
        t.elapsed().as_nanos()
    };

    // 64-byte inline SEND, one WR per post (BlueFlame).
    let (mut post_ns, mut poll_ns, mut cqes) = (0u128, 0u128, 0u128);
    for _ in 0..ROUNDS {
        qb.post_recv(&recvs).expect("recv");
        let t = Instant::now();
        for i in 0..BATCH as u64 {
            qa.post_send(&[SendWr::inline(i, SendOp::Send, &payload)])
                .expect("send");
        }
        post_ns += t.elapsed().as_nanos();
        poll_ns += drain(&cq_a, &mut wc, BATCH);
        cqes += BATCH as u128;
        drain(&cq_b, &mut wc, BATCH);
    }
    let n = (ROUNDS * BATCH) as u128;
    println!("post_send 64B inline SEND      : {:>7} ns/op", post_ns / n);

    // 3-SGE WRITE (192 bytes).
    let sges = [
        mr_a.sge(0, 64).expect("sge"),
        mr_a.sge(4096, 64).expect("sge"),
        mr_a.sge(8192, 64).expect("sge"),
    ];
    let remote = mr_b.remote(65536).expect("remote");
    let mut wpost = 0u128;
    for _ in 0..ROUNDS {
        let t = Instant::now();
        for i in 0..BATCH as u64 {
            qa.post_send(&[SendWr::new(i, SendOp::Write(remote), &sges)])
                .expect("write");
        }
        wpost += t.elapsed().as_nanos();
        poll_ns += drain(&cq_a, &mut wc, BATCH);
        cqes += BATCH as u128;
    }
    println!("post_send 3-SGE WRITE          : {:>7} ns/op", wpost / n);

    // The same WRITE, 32 WRs per post_send (one doorbell per list).
    let list: Vec<SendWr<'_>> = (0..32u64)
        .map(|i| SendWr::new(i, SendOp::Write(remote), &sges))
        .collect();
    let mut lpost = 0u128;
    for _ in 0..ROUNDS {
        let t = Instant::now();
        for _ in 0..BATCH / 32 {
            qa.post_send(&list).expect("write list");
        }
        lpost += t.elapsed().as_nanos();
        poll_ns += drain(&cq_a, &mut wc, BATCH);
        cqes += BATCH as u128;
    }
    println!("post_send 3-SGE WRITE, list 32 : {:>7} ns/WR", lpost / n);
    println!(
        "poll_cq                        : {:>7} ns/CQE",
        poll_ns / cqes
    );

    // Arming an empty CQ: ARM word, UAR CQ doorbell, kick.
    let t = Instant::now();
    let arms = 50_000u128;
    for _ in 0..arms {
        cq_a.req_notify(false).expect("arm");
    }
    println!(
        "req_notify (arm)               : {:>7} ns/op",
        t.elapsed().as_nanos() / arms
    );
    println!("(every post and arm includes the kick, which runs the in-process model)");
}
