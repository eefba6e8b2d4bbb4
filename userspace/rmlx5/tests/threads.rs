// SPDX-License-Identifier: GPL-2.0

//! Several threads on one fabric: per-thread QPs, and one QP shared by
//! posting threads while another polls.

mod common;

use std::sync::Arc;

use common::*;
use rmlx5::{ConnectOpts, QpInit, RecvWr, SendOp, SendWr, Wc};

#[cfg_attr(test, test)]
pub(crate) fn threads_with_their_own_qps() {
    let fabric = Fabric::new(false);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let f = fabric.clone();
            std::thread::spawn(move || {
                let a = side(&f, 0, &QpInit::default(), false);
                let b = side(&f, 1, &QpInit::default(), false);
                a.qp.connect(&b.qp.endpoint(), &ConnectOpts::default())
                    .unwrap();
                b.qp.connect(&a.qp.endpoint(), &ConnectOpts::default())
                    .unwrap();
                let rs = [b.mr.sge(0, 256).unwrap()];
                for i in 0..300u64 {
                    let msg = [(t * 50 + i % 50) as u8; 60];
                    b.qp.post_recv(&[RecvWr::new(i, &rs)]).unwrap();
                    a.qp.post_send(&[SendWr::inline(i, SendOp::Send, &msg)])
                        .unwrap();
                    assert_eq!(poll_n(&a.cq, 1)[0].wr_id, i);
                    assert_eq!(poll_n(&b.cq, 1)[0].wr_id, i);
                    assert_eq!(b.mr.to_vec(0, 60).unwrap(), msg);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(fabric.doorbell_errors(0), 0);
}

#[cfg_attr(test, test)]
pub(crate) fn one_qp_many_posters_one_poller() {
    let init = QpInit {
        max_send_wr: 256,
        ..QpInit::default()
    };
    let p = Arc::new(pair_with(&init, &ConnectOpts::default(), false, false));
    const PER: u64 = 2000;
    let posters: Vec<_> = (0..3u64)
        .map(|t| {
            let p = p.clone();
            std::thread::spawn(move || {
                let sge = [p.a.mr.sge(t as usize * 8, 8).unwrap()];
                let remote = p.b.mr.remote(1024).unwrap();
                let mut i = 0;
                while i < PER {
                    let wr = SendWr::new(t << 32 | i, SendOp::FetchAdd { remote, add: 1 }, &sge);
                    match p.a.qp.post_send(&[wr]) {
                        Ok(()) => i += 1,
                        Err(e) if e.error == rmlx5::Error::QueueFull => std::thread::yield_now(),
                        Err(e) => panic!("{}", e),
                    }
                }
            })
        })
        .collect();
    let mut seen = vec![0u64; 3];
    let mut wc = [Wc::default(); 32];
    let mut total = 0;
    let mut idle = std::time::Instant::now();
    while total < 3 * PER {
        let n = p.a.cq.poll(&mut wc).unwrap();
        if n > 0 {
            idle = std::time::Instant::now();
        }
        assert!(
            idle.elapsed().as_secs() < 5,
            "stuck after {} completions: {:?} {:?}",
            total,
            p.a.qp.query(),
            seen
        );
        for w in &wc[..n] {
            assert!(w.is_ok(), "{:?}", w);
            let t = (w.wr_id >> 32) as usize;
            // Completions of one poster arrive in its posting order.
            assert_eq!(w.wr_id & 0xffff_ffff, seen[t]);
            seen[t] += 1;
        }
        total += n as u64;
    }
    for t in posters {
        t.join().unwrap();
    }
    assert_eq!(p.b.mr.read_u64(1024).unwrap(), 3 * PER);
    no_doorbell_errors(&p);
}
