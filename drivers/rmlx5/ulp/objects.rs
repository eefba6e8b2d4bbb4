// SPDX-License-Identifier: GPL-2.0

//! The objects kernel ULPs hold, so that rmlx5 can reclaim what a ULP
//! leaves behind when rmlx5 unloads.
//!
//! # The rule
//!
//! Every PD, MR, CQ and QP handed to C is recorded in
//! [`ULP_OBJECTS`] from creation until its destroy succeeds; a
//! destroy call for a pointer that is not recorded fails with `EINVAL`
//! instead of touching it. A ULP module cannot outlive rmlx5 (it uses
//! rmlx5's symbols), but it can unload without destroying its objects.
//! When rmlx5 unloads, before anything else goes, it destroys whatever is
//! still recorded in dependency order (QPs, then CQs, MRs, PDs), frees it,
//! and says how many it reclaimed. The memory under a leaked MR is the
//! ULP's: it must stay valid while a leaked QP may still use it, that is,
//! a ULP must not leave work posted on QPs whose memory it frees, and must
//! not leave a CQ armed whose completion handler lives in its module text.
//!
//! Creation and destroy calls sleep (they take the registry mutex; CQ
//! destroy waits for a running handler): process context only.
//!
//! Lock order: the registry mutex is taken before any object lock and
//! before the fabric lock, never while holding them.

use kernel::{
    prelude::*,
    sync::Arc, //
};

use crate::ib::{
    cq::Cq,
    mr::{
        Mr,
        Pd, //
    },
    qp::Qp,
};

/// An object handed to a ULP: its kind and the address C holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Handle {
    /// A `KBox<Pd>` from `KBox::into_raw`.
    Pd(usize),
    /// A `KBox<Mr>` from `KBox::into_raw`.
    Mr(usize),
    /// An `Arc<Cq>` from `Arc::into_raw`.
    Cq(usize),
    /// An `Arc<Qp>` from `Arc::into_raw`.
    Qp(usize),
}

impl Handle {
    /// The highest [`Handle::rank`].
    const MAX_RANK: u8 = 3;

    /// Destroy order: what may use an object is destroyed before it.
    fn rank(self) -> u8 {
        match self {
            Handle::Qp(_) => 0,
            Handle::Cq(_) => 1,
            Handle::Mr(_) => 2,
            Handle::Pd(_) => 3,
        }
    }
}

kernel::sync::global_lock! {
    // SAFETY: `init` is called once, in module init, before any ULP call
    // can reach the registry (the ULP API needs the module loaded).
    /// The objects ULPs currently hold: the ULP layer's own registry, not
    /// the software HCA's (the layers below never see it).
    pub(crate) unsafe(uninit) static ULP_OBJECTS: Mutex<UlpObjects> = UlpObjects::new();
}

/// The objects ULPs currently hold (in [`ULP_OBJECTS`]).
pub(crate) struct UlpObjects {
    live: KVec<Handle>,
}

impl UlpObjects {
    /// An empty registry.
    pub(crate) const fn new() -> Self {
        Self { live: KVec::new() }
    }

    /// Records `h`.
    ///
    /// # Errors
    ///
    /// `ENOMEM` if the record cannot grow.
    pub(crate) fn add(&mut self, h: Handle) -> Result {
        self.live.push(h, GFP_KERNEL)?;
        Ok(())
    }

    /// Whether `h` is recorded.
    pub(crate) fn contains(&self, h: Handle) -> bool {
        self.live.contains(&h)
    }

    /// Forgets `h` (after its destroy succeeded).
    pub(crate) fn remove(&mut self, h: Handle) {
        if let Some(i) = self.live.iter().position(|&x| x == h) {
            // Order does not matter: move the last entry into the hole.
            let last = self.live.len() - 1;
            self.live.swap(i, last);
            self.live.pop();
        }
    }

    /// Number of recorded objects.
    pub(crate) fn len(&self) -> usize {
        self.live.len()
    }
}

/// Destroys and frees the object behind `h`; returns whether it could be
/// destroyed (if not, it is left allocated: the model may still use it).
///
/// # Safety
///
/// `h` was recorded by the ULP API and is removed from the registry by the
/// caller; nothing else uses its pointer any more.
unsafe fn reclaim_one(h: Handle) -> bool {
    match h {
        Handle::Qp(p) => {
            let p = p as *const Qp;
            // SAFETY: A recorded QP pointer from `Arc::into_raw`.
            let ok = unsafe { &*p }.destroy().is_ok();
            if ok {
                // SAFETY: As above; its reference is given back once.
                drop(unsafe { Arc::from_raw(p) });
            }
            ok
        }
        Handle::Cq(p) => {
            let p = p as *const Cq;
            // SAFETY: A recorded CQ pointer from `Arc::into_raw`.
            let ok = unsafe { &*p }.destroy().is_ok();
            if ok {
                // SAFETY: As above; its reference is given back once.
                drop(unsafe { Arc::from_raw(p) });
            }
            ok
        }
        Handle::Mr(p) => {
            let p = p as *mut Mr;
            // SAFETY: A recorded MR pointer from `KBox::into_raw`.
            let ok = unsafe { &*p }.destroy().is_ok();
            if ok {
                // SAFETY: As above; freed once.
                drop(unsafe { KBox::from_raw(p) });
            }
            ok
        }
        Handle::Pd(p) => {
            let p = p as *mut Pd;
            // SAFETY: A recorded PD pointer from `KBox::into_raw`.
            let ok = unsafe { &*p }.destroy().is_ok();
            if ok {
                // SAFETY: As above; freed once.
                drop(unsafe { KBox::from_raw(p) });
            }
            ok
        }
    }
}

impl Handle {
    /// The device the object is on.
    ///
    /// # Safety
    ///
    /// `self` is recorded in [`ULP_OBJECTS`], whose lock the caller holds:
    /// its pointer is live.
    unsafe fn device(self) -> u16 {
        // SAFETY: Recorded pointers point at live objects of their kind
        // (the caller's contract).
        unsafe {
            match self {
                Handle::Pd(p) => (*(p as *const Pd)).hca(),
                Handle::Mr(p) => (*(p as *const Mr)).hca(),
                Handle::Cq(p) => (*(p as *const Cq)).hca() as u16,
                Handle::Qp(p) => (*(p as *const Qp)).hca(),
            }
        }
    }

    /// Whether the object is destroyed already (released before).
    ///
    /// # Safety
    ///
    /// As for [`Handle::device`].
    unsafe fn is_destroyed(self) -> bool {
        // SAFETY: As above.
        unsafe {
            match self {
                Handle::Pd(p) => (*(p as *const Pd)).is_destroyed(),
                Handle::Mr(p) => (*(p as *const Mr)).is_destroyed(),
                Handle::Cq(p) => (*(p as *const Cq)).is_destroyed(),
                Handle::Qp(p) => (*(p as *const Qp)).is_destroyed(),
            }
        }
    }

    /// Destroys the object on its device, leaving it allocated and
    /// recorded: the ULP still holds it, and its own destroy then succeeds
    /// at once and frees it.
    ///
    /// # Safety
    ///
    /// As for [`Handle::device`].
    unsafe fn release(self) -> Result {
        // SAFETY: As above.
        unsafe {
            match self {
                Handle::Pd(p) => (*(p as *const Pd)).destroy(),
                Handle::Mr(p) => (*(p as *const Mr)).destroy(),
                Handle::Cq(p) => (*(p as *const Cq)).destroy(),
                Handle::Qp(p) => (*(p as *const Qp)).destroy(),
            }
        }
    }
}

/// The ULP layer's [`crate::mlx5_core::device::RemoveHook`]: device
/// `rmlx5_<index>` goes (a ConnectX function unbinds) while ULPs may still
/// hold objects on it. They are destroyed on the device now, in dependency
/// order, so that the function can be taken down cleanly; the ULPs' handles
/// stay valid, their posts fail with `EINVAL`, and their destroys succeed
/// at once and free them (ib_core's disassociation, for this API).
pub(crate) fn release_device(index: u16) {
    let reg = ULP_OBJECTS.lock();
    let (mut released, mut failed) = (0usize, 0usize);
    // Rank by rank (QPs, CQs, MRs, PDs), walking the record in place.
    for rank in 0..=3 {
        for h in reg.live.iter().copied().filter(|h| h.rank() == rank) {
            // SAFETY: `h` is recorded and we hold the registry's lock.
            if unsafe { h.device() } != index || unsafe { h.is_destroyed() } {
                continue;
            }
            // SAFETY: As above.
            match unsafe { h.release() } {
                Ok(()) => released += 1,
                Err(_) => failed += 1,
            }
        }
    }
    if released + failed != 0 {
        pr_info!(
            "rmlx5_{}: released {} object(s) kernel ULPs still hold ({} could not be)\n",
            index,
            released,
            failed
        );
    }
}

/// Destroys every object a ULP left behind (module unload, process
/// context, with interrupts and dispatch still running). Returns how many
/// were reclaimed.
pub(crate) fn reclaim() -> usize {
    let mut reg = ULP_OBJECTS.lock();
    let live = core::mem::take(&mut reg.live);
    let total = live.len();
    let mut failed = 0usize;
    // QPs first, then CQs, MRs and PDs: one pass per rank rather than a
    // sort (core's sorts carry a panic path for inconsistent orderings).
    for rank in 0..=Handle::MAX_RANK {
        for h in live.iter().copied().filter(|h| h.rank() == rank) {
            // SAFETY: `h` was recorded by the ULP API and is no longer in
            // the registry; the ULP modules are gone, so nobody else uses
            // it.
            if !unsafe { reclaim_one(h) } {
                failed += 1;
            }
        }
    }
    if total != 0 {
        pr_info!(
            "reclaimed {} object(s) left by kernel ULPs ({} could not be destroyed)\n",
            total - failed,
            failed
        );
    }
    total - failed
}
