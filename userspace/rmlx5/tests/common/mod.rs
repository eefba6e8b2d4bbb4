// SPDX-License-Identifier: GPL-2.0

//! Shared setup for the provider's host tests: two software HCAs, a QP on
//! each, connected.

#![allow(dead_code)]

use std::sync::Arc;

use rmlx5::{Access, CompChannel, ConnectOpts, Context, Cq, Mr, Pd, Qp, QpInit, SoftFabric, Wc};

/// One side of a connection.
pub(crate) struct Side {
    pub(crate) ctx: Context,
    pub(crate) pd: Pd,
    pub(crate) cq: Cq,
    pub(crate) qp: Qp,
    pub(crate) mr: Mr,
    pub(crate) channel: Option<CompChannel>,
}

/// Two connected QPs.
pub(crate) struct Pair {
    pub(crate) fabric: Arc<SoftFabric>,
    pub(crate) a: Side,
    pub(crate) b: Side,
}

pub(crate) const MR_LEN: usize = 1 << 16;

pub(crate) fn side(
    fabric: &Arc<SoftFabric>,
    dev: usize,
    init: &QpInit,
    with_channel: bool,
) -> Side {
    let ctx = fabric.devices()[dev].open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let channel = with_channel.then(|| ctx.create_comp_channel().unwrap());
    let cq = ctx.create_cq(256, channel.as_ref()).unwrap();
    let qp = pd.create_qp(&cq, &cq, init).unwrap();
    let mr = pd.reg_mr(MR_LEN, Access::ALL).unwrap();
    Side {
        ctx,
        pd,
        cq,
        qp,
        mr,
        channel,
    }
}

/// Two devices (or one if `same_dev`), connected with `opts`.
pub(crate) fn pair_with(init: &QpInit, opts: &ConnectOpts, same_dev: bool, channel: bool) -> Pair {
    let fabric = SoftFabric::with_manual_clock(2).unwrap();
    let a = side(&fabric, 0, init, channel);
    let b = side(&fabric, usize::from(!same_dev), init, channel);
    a.qp.connect(&b.qp.endpoint(), opts).unwrap();
    b.qp.connect(&a.qp.endpoint(), opts).unwrap();
    Pair { fabric, a, b }
}

pub(crate) fn pair() -> Pair {
    pair_with(&QpInit::default(), &ConnectOpts::default(), false, false)
}

/// Polls `cq` until `n` completions arrived (the model completes work
/// inside the kick, so they are normally there at once).
pub(crate) fn poll_n(cq: &Cq, n: usize) -> Vec<Wc> {
    let mut out = Vec::new();
    let mut wc = [Wc::default(); 16];
    for _ in 0..10_000 {
        let k = cq.poll(&mut wc).unwrap();
        out.extend_from_slice(&wc[..k]);
        if out.len() >= n {
            break;
        }
        std::thread::yield_now();
    }
    assert_eq!(out.len(), n, "completions: {:?}", out);
    out
}

/// Asserts the CQ holds nothing.
pub(crate) fn assert_empty(cq: &Cq) {
    let mut wc = [Wc::default(); 4];
    assert_eq!(cq.poll(&mut wc).unwrap(), 0, "unexpected {:?}", wc[0]);
}

/// Asserts the software HCA refused no doorbell.
pub(crate) fn no_doorbell_errors(p: &Pair) {
    assert_eq!(p.fabric.doorbell_errors(0), 0);
    assert_eq!(p.fabric.doorbell_errors(1), 0);
}
