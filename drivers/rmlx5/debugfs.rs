// SPDX-License-Identifier: GPL-2.0

//! debugfs: `/sys/kernel/debug/rmlx5/rmlx5_<n>/{eqs,cqs,qps,stats}`,
//! `rmlx5/perf`, `rmlx5/pci` (the ConnectX functions that are up),
//! `rmlx5/cx_cmd` (how their commands run, see `cx/events.rs`) and
//! `rmlx5/objects` (what each function holds for its users).
//!
//! `eqs`, `cqs` and `qps` print one line per object, each read under the
//! fabric lock on its own (a walk of a whole table under it would keep
//! interrupts off for milliseconds); `stats` is one snapshot under it
//! (formatting into the seq_file buffer does not sleep).

use core::{
    fmt,
    sync::atomic::Ordering, //
};
use kernel::{
    debugfs::{
        Dir,
        File, //
    },
    prelude::*,
    str::CString,
    sync::Arc,
    uaccess::UserSliceReader,
};

use crate::hca::{
    SoftHca,
    MAX_CQS,
    MAX_QPS, //
};
use crate::hca_model::qp::QPN_BASE;

/// What `rmlx5/pci` refers to: the PCI backend's table of functions.
pub(crate) struct PciList;

fn pci_show(_: &PciList, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    crate::cx::registry::show(f)
}

/// What `rmlx5/objects` refers to: the registered devices' live objects.
pub(crate) struct Objects;

/// `rmlx5/objects`: one line per device whose backend counts what it
/// holds (the ConnectX functions), for leak checks of the stress tests.
fn objects_show(_: &Objects, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    for index in 0..crate::mlx5_core::device::MAX_DEVICES {
        let Ok(dev) = crate::mlx5_core::device::get(index) else {
            continue;
        };
        if let Some(l) = dev.be.live_objects() {
            writeln!(
                f,
                "rmlx5_{} pd {} cq {} qp {} mr {} uar {}",
                index, l.pds, l.cqs, l.qps, l.mrs, l.uars
            )?;
        }
    }
    Ok(())
}

/// What `rmlx5/cx_cmd` refers to: the command mode and counters.
pub(crate) struct CxCmd;

fn cx_cmd_show(_: &CxCmd, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    crate::cx::events::show(f)
}

/// Writing 0, 1 or 2 to `rmlx5/cx_cmd` sets the command mode.
fn cx_cmd_write(_: &CxCmd, input: &mut UserSliceReader) -> Result {
    let mut buf = [0u8; 8];
    let n = input.len().min(buf.len());
    input.read_slice(buf.get_mut(..n).ok_or(EINVAL)?)?;
    let text = core::str::from_utf8(buf.get(..n).ok_or(EINVAL)?).map_err(|_| EINVAL)?;
    let mode: u32 = text.trim().parse().map_err(|_| EINVAL)?;
    crate::cx::events::set_mode(mode)
}

/// What each file of one HCA refers to.
pub(crate) struct HcaRef {
    soft: Arc<SoftHca>,
    hca: usize,
}

fn eqs(r: &HcaRef, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let Ok(dev) = crate::mlx5_core::device::get(r.hca) else {
        return Ok(());
    };
    writeln!(
        f,
        "eqn vector irq ci armed eqes irqs model_pi model_ci interrupts overruns"
    )?;
    for eq in dev.eqs.iter() {
        let info = r
            .soft
            .state
            .lock()
            .fabric
            .hca(dev.index)
            .and_then(|m| m.query_eq(eq.eqn));
        let Some(i) = info else {
            continue;
        };
        writeln!(
            f,
            "{} {} {} {} {} {} {} {} {} {} {}",
            eq.eqn,
            eq.vector,
            eq.irq.load(Ordering::Relaxed),
            eq.ci.load(Ordering::Relaxed),
            u8::from(i.armed),
            eq.eqes.load(Ordering::Relaxed),
            eq.irqs.load(Ordering::Relaxed),
            i.producer_index,
            i.consumer_index,
            i.interrupts,
            i.overruns
        )?;
    }
    Ok(())
}

/// Runs `query` under the fabric lock for one table slot. `cqs` and `qps`
/// take the lock per slot rather than once around their walk: a table has
/// 16,384 slots, and one hold across the walk and a line formatted per
/// live object would keep interrupts off on this CPU, and the engine and
/// the EQ handlers waiting, for all of it. Each line is thus consistent in
/// itself, not with the others.
fn query_slot<T>(
    soft: &SoftHca,
    query: impl FnOnce(&mut crate::hca::Locked) -> Option<T>,
) -> Option<T> {
    query(&mut soft.state.lock())
}

fn cqs(r: &HcaRef, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    writeln!(f, "cqn pi ci armed solicited sn error events handler")?;
    let dev = crate::mlx5_core::device::get(r.hca).ok();
    let index = r.hca as u16;
    for cqn in 0..MAX_CQS as u32 {
        // The fabric lock per slot (see `query_slot`).
        let Some(i) = query_slot(&r.soft, |st| st.fabric.hca(index)?.query_cq(cqn)) else {
            continue;
        };
        let handler = dev
            .as_ref()
            .is_some_and(|d| d.events.lock().cq(cqn).is_some());
        writeln!(
            f,
            "{} {} {} {} {} {} {} {} {}",
            i.cqn,
            i.producer_index,
            i.consumer_index,
            u8::from(i.armed.is_some()),
            u8::from(i.armed.is_some_and(|(s, _)| s)),
            i.arm_sn,
            u8::from(i.error),
            i.events,
            u8::from(handler)
        )?;
    }
    Ok(())
}

fn qps(r: &HcaRef, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    writeln!(f, "qpn state dest_hca dest_qpn sq_pi sq_ci rq_ci")?;
    let index = r.hca as u16;
    for slot in 0..MAX_QPS as u32 {
        let Some(i) = query_slot(&r.soft, |st| {
            st.fabric.hca(index)?.query_qp(QPN_BASE + slot)
        }) else {
            continue;
        };
        writeln!(
            f,
            "{:#x} {:?} {} {:#x} {} {} {}",
            i.qpn, i.state, i.conn.dest.hca, i.conn.dest.qpn, i.sq_pi, i.sq_ci, i.rq_ci
        )?;
    }
    Ok(())
}

fn stats(r: &HcaRef, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    // The registry mutex comes before the fabric lock (ulp/objects.rs).
    let ulp_objects = crate::ulp::objects::ULP_OBJECTS.lock().len();
    let dev = crate::mlx5_core::device::get(r.hca).ok();
    if let Some(dev) = &dev {
        let (stray, dropped) = {
            let t = dev.events.lock();
            (t.stray_eqes, t.events_dropped)
        };
        writeln!(f, "stray_eqes {stray}")?;
        writeln!(f, "async_events_dropped {dropped}")?;
    }
    let mut st = r.soft.state.lock();
    writeln!(f, "kick_elision {}", u8::from(r.soft.elision))?;
    writeln!(f, "watch_runs {}", st.watch.runs)?;
    writeln!(f, "watch_doorbells {}", st.watch.doorbells)?;
    // The UAR trap (rdma-core's provider; fabric-wide).
    let t = &st.trap;
    writeln!(f, "trap_faults {}", t.faults)?;
    writeln!(f, "trap_stores {}", t.stores)?;
    writeln!(f, "trap_runs {}", t.runs)?;
    writeln!(f, "trap_zaps {}", t.zaps)?;
    writeln!(f, "trap_doorbells {}", t.doorbells)?;
    writeln!(f, "trap_arms {}", t.arms)?;
    let (runs, calls) = dev.as_ref().map_or((0, 0), |d| {
        (
            d.dispatch_runs.load(Ordering::Relaxed),
            d.handler_calls.load(Ordering::Relaxed),
        )
    });
    writeln!(f, "dispatch_runs {runs}")?;
    writeln!(f, "handler_calls {calls}")?;
    // The model's clock (shared by every HCA): now, the deadline the retry
    // timer is armed for, and how often it fired.
    writeln!(f, "clock_now_ns {}", st.fabric.now())?;
    writeln!(f, "clock_timer_at_ns {:?}", st.timer_at)?;
    writeln!(f, "clock_timer_fires {}", st.timer_fires)?;
    writeln!(f, "ulp_objects {}", ulp_objects)?;
    {
        use crate::hca::dma::RegionKind;
        writeln!(
            f,
            "dma_regions buf {} kernel_mr {} user_mr {} direct_map_mrs {}",
            st.dma.count(RegionKind::Buf),
            st.dma.count(RegionKind::KernelMr),
            st.dma.count(RegionKind::UserMr),
            st.dma.direct_map_users()
        )?;
    }
    if let Some(m) = st.fabric.hca(r.hca as u16) {
        writeln!(f, "model {:?}", m.stats())?;
    }
    Ok(())
}

/// `rmlx5/perf`: the software HCA's path figures (see `hca/perf.rs`).
fn perf_show(r: &HcaRef, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    write!(f, "{}", &*r.soft.perf)
}

/// Any write to `rmlx5/perf` zeroes the figures.
fn perf_reset(r: &HcaRef, _input: &mut UserSliceReader) -> Result {
    r.soft.perf.reset();
    Ok(())
}

/// The module's debugfs tree; files are removed before their directories.
pub(crate) struct Debugfs {
    _files: KVec<Pin<KBox<File<HcaRef>>>>,
    _pci: Pin<KBox<File<PciList>>>,
    _cx_cmd: Pin<KBox<File<CxCmd>>>,
    _objects: Pin<KBox<File<Objects>>>,
    _dirs: KVec<Dir>,
    _root: Dir,
}

impl Debugfs {
    /// Creates `rmlx5/rmlx5_<n>/{eqs,cqs,qps,stats}` for every HCA, and
    /// `rmlx5/perf`.
    pub(crate) fn new(soft: &Arc<SoftHca>) -> Result<Self> {
        let root = Dir::new(c"rmlx5");
        let mut dirs = KVec::new();
        let mut files = KVec::new();
        let all = HcaRef {
            soft: soft.clone(),
            hca: 0,
        };
        files.push(
            KBox::pin_init(
                root.read_write_callback_file(
                    c"perf",
                    Ok::<_, Error>(all),
                    &perf_show,
                    &perf_reset,
                ),
                GFP_KERNEL,
            )?,
            GFP_KERNEL,
        )?;
        // The ConnectX functions that are up (rmlx5-devinfo lists them).
        let pci = KBox::pin_init(
            root.read_callback_file(c"pci", Ok::<_, Error>(PciList), &pci_show),
            GFP_KERNEL,
        )?;
        let cx_cmd = KBox::pin_init(
            root.read_write_callback_file(
                c"cx_cmd",
                Ok::<_, Error>(CxCmd),
                &cx_cmd_show,
                &cx_cmd_write,
            ),
            GFP_KERNEL,
        )?;
        let objects = KBox::pin_init(
            root.read_callback_file(c"objects", Ok::<_, Error>(Objects), &objects_show),
            GFP_KERNEL,
        )?;
        for hca in 0..soft.count() {
            let name = CString::try_from_fmt(fmt!("rmlx5_{}", hca))?;
            let dir = root.subdir(&name);
            let data = || {
                Ok::<_, Error>(HcaRef {
                    soft: soft.clone(),
                    hca,
                })
            };
            for file in [
                KBox::pin_init(dir.read_callback_file(c"eqs", data(), &eqs), GFP_KERNEL)?,
                KBox::pin_init(dir.read_callback_file(c"cqs", data(), &cqs), GFP_KERNEL)?,
                KBox::pin_init(dir.read_callback_file(c"qps", data(), &qps), GFP_KERNEL)?,
                KBox::pin_init(dir.read_callback_file(c"stats", data(), &stats), GFP_KERNEL)?,
            ] {
                files.push(file, GFP_KERNEL)?;
            }
            dirs.push(dir, GFP_KERNEL)?;
        }
        Ok(Self {
            _files: files,
            _pci: pci,
            _cx_cmd: cx_cmd,
            _objects: objects,
            _dirs: dirs,
            _root: root,
        })
    }
}
