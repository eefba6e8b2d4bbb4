// SPDX-License-Identifier: GPL-2.0

//! Shared setup for the provider's scenarios: two HCAs, a QP on each,
//! connected.
//!
//! The same scenarios run twice: as host tests (`cargo test`, where
//! `cfg(test)` holds) against two in-process software HCAs, and inside the
//! test guest (tests/guest's `rmlx5-provider-tests`, which includes these
//! files with `#[path]`) against the kernel's `rmlx5_0` and `rmlx5_1`, or
//! the devices [`TEST_DEVICES`] names. [`Fabric`] hides the difference.
//!
//! A scenario names a device by its position in [`Fabric::devices`] (0,
//! 1), never by its index N, and addresses a peer by the LID the peer's
//! port reports (`Qp::endpoint`), never by N + 1: with `TEST_DEVICES` both
//! positions may be one device, and a ConnectX function's LID is its own.

#![allow(dead_code)]

use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmlx5::{
    Access, CompChannel, ConnectOpts, Context, Cq, Device, Mr, Pd, Qp, QpInit, SoftFabric, Wc,
};

/// The environment variable that picks the kernel devices the scenarios
/// run on (the guest): a comma list of device indices N (`rmlx5_N`), which
/// [`Fabric::devices`] returns in the order given, so position 0 is the
/// first entry and position 1 the second. An index may repeat:
/// `RMLX5_TEST_DEVICES=2,2` puts both sides of every pair on `rmlx5_2` (a
/// loopback pair on one ConnectX PCI function). Unset or empty: every
/// device, in index order (`rmlx5_0`, `rmlx5_1`, ...). The host tests
/// (the in-process model) ignore it.
pub(crate) const TEST_DEVICES: &str = "RMLX5_TEST_DEVICES";

/// The device indices [`TEST_DEVICES`] lists, or `None` if it is unset or
/// empty. Panics (failing the scenario with the reason) if it is not a
/// comma list of numbers.
pub(crate) fn test_device_indices() -> Option<Vec<u32>> {
    let v = std::env::var(TEST_DEVICES).ok()?;
    if v.trim().is_empty() {
        return None;
    }
    let list = v
        .split(',')
        .map(|n| {
            n.trim().parse::<u32>().unwrap_or_else(|e| {
                panic!("{TEST_DEVICES}={v:?}: {n:?} is not a device index: {e}")
            })
        })
        .collect();
    Some(list)
}

/// The HCAs a scenario runs on.
pub(crate) enum Fabric {
    /// Two in-process software HCAs (host tests).
    Model(Arc<SoftFabric>),
    /// The kernel module's devices the scenarios use (the guest), by
    /// position (see [`TEST_DEVICES`]), with each one's doorbell-error
    /// count when the fabric was made.
    Kernel(Vec<Device>, Vec<u64>),
}

impl Fabric {
    /// Two HCAs; on the host with the model's clock advanced only by
    /// [`Fabric::advance`] when `manual_clock`.
    pub(crate) fn new(manual_clock: bool) -> Arc<Fabric> {
        if cfg!(test) {
            let f = if manual_clock {
                SoftFabric::with_manual_clock(2)
            } else {
                SoftFabric::new(2)
            };
            Arc::new(Fabric::Model(f.unwrap()))
        } else {
            let all = rmlx5::devices().unwrap();
            let devs: Vec<Device> = match test_device_indices() {
                Some(list) => list
                    .iter()
                    .map(|&n| {
                        all.iter()
                            .find(|d| d.index() == n)
                            .cloned()
                            .unwrap_or_else(|| {
                                panic!(
                                    "{TEST_DEVICES} names rmlx5_{n}, which does not exist \
                                     (have {:?})",
                                    all.iter().map(Device::name).collect::<Vec<_>>()
                                )
                            })
                    })
                    .collect(),
                None => all,
            };
            assert!(
                devs.len() >= 2,
                "need two devices (rmlx5_0 and rmlx5_1, or {TEST_DEVICES}=N,M; \
                 N,N for a loopback pair on rmlx5_N), have {}",
                devs.len()
            );
            let base = devs
                .iter()
                .map(|d| kernel_doorbell_errors(d.index()))
                .collect();
            Arc::new(Fabric::Kernel(devs, base))
        }
    }

    /// The devices, by position: the model's two HCAs; the kernel's in
    /// index order or as [`TEST_DEVICES`] lists them (one device may be at
    /// several positions).
    pub(crate) fn devices(&self) -> Vec<Device> {
        match self {
            Fabric::Model(f) => f.devices(),
            Fabric::Kernel(d, _) => d.clone(),
        }
    }

    /// Whether positions `a` and `b` of [`Fabric::devices`] are one device.
    pub(crate) fn same_device(&self, a: usize, b: usize) -> bool {
        let d = self.devices();
        d[a].index() == d[b].index()
    }

    /// Lets `ns` of HCA time pass: the model's manual clock moves; the
    /// kernel's timers run in real time, so the guest sleeps (at most 50
    /// ms, far beyond the RNR and ACK timeouts the scenarios use).
    pub(crate) fn advance(&self, ns: u64) {
        match self {
            Fabric::Model(f) => f.advance(ns),
            Fabric::Kernel(..) => std::thread::sleep(Duration::from_nanos(ns.min(50_000_000))),
        }
    }

    /// Doorbells the HCA at position `pos` of [`Fabric::devices`] refused
    /// since the fabric was made (always 0 for a device without model
    /// stats, see [`kernel_doorbell_errors`]). If both positions are one
    /// device, each reports that device's count.
    pub(crate) fn doorbell_errors(&self, pos: usize) -> u64 {
        match self {
            Fabric::Model(f) => f.doorbell_errors(pos),
            Fabric::Kernel(d, base) => kernel_doorbell_errors(d[pos].index()) - base[pos],
        }
    }
}

/// `doorbell_errors` of the model stats line in the kernel's debugfs
/// (`model Stats { ..., doorbell_errors: N, ... }`) for `rmlx5_<index>`.
///
/// 0 if the device has no such file or no such field: a ConnectX PCI
/// function has no model, and the doorbells it refuses are counted by the
/// device emulator, which fails the run by itself. A file that cannot be
/// read otherwise, or a count that is not a number, panics.
fn kernel_doorbell_errors(index: u32) -> u64 {
    let path = format!("/sys/kernel/debug/rmlx5/rmlx5_{}/stats", index);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return 0,
        Err(e) => panic!("{}: {}", path, e),
    };
    let Some(rest) = text.split("doorbell_errors: ").nth(1) else {
        return 0;
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits
        .parse()
        .unwrap_or_else(|e| panic!("{}: bad doorbell_errors in {:?}: {}", path, text, e))
}

/// How long a scenario waits for a completion or an event: the model
/// completes work inside the kick, the kernel soon after it (a guest under
/// TCG can be slow).
pub(crate) const WAIT: Duration = Duration::from_secs(20);

/// Whether `fd` becomes readable within `timeout`.
pub(crate) fn readable_within(fd: RawFd, timeout: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: one valid pollfd for the duration of the call.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    n == 1 && pfd.revents & libc::POLLIN != 0
}

/// Whether `fd` is readable now.
pub(crate) fn readable(fd: RawFd) -> bool {
    readable_within(fd, Duration::ZERO)
}

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
    pub(crate) fabric: Arc<Fabric>,
    pub(crate) a: Side,
    pub(crate) b: Side,
}

pub(crate) const MR_LEN: usize = 1 << 16;

/// One side on the device at position `dev` of [`Fabric::devices`]: its
/// own context, PD, CQ (with a channel if `with_channel`), QP and MR.
pub(crate) fn side(fabric: &Arc<Fabric>, dev: usize, init: &QpInit, with_channel: bool) -> Side {
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

/// A QP on the device at position 0 and one on position 1 (or both on
/// position 0 if `same_dev`), connected with `opts`.
pub(crate) fn pair_with(init: &QpInit, opts: &ConnectOpts, same_dev: bool, channel: bool) -> Pair {
    let fabric = Fabric::new(true);
    let a = side(&fabric, 0, init, channel);
    let b = side(&fabric, usize::from(!same_dev), init, channel);
    a.qp.connect(&b.qp.endpoint(), opts).unwrap();
    b.qp.connect(&a.qp.endpoint(), opts).unwrap();
    Pair { fabric, a, b }
}

pub(crate) fn pair() -> Pair {
    pair_with(&QpInit::default(), &ConnectOpts::default(), false, false)
}

/// Polls `cq` until `n` completions arrived, for at most [`WAIT`].
pub(crate) fn poll_n(cq: &Cq, n: usize) -> Vec<Wc> {
    let mut out = Vec::new();
    let mut wc = [Wc::default(); 16];
    let start = Instant::now();
    while start.elapsed() < WAIT {
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
