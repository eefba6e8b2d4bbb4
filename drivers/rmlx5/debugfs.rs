// SPDX-License-Identifier: GPL-2.0

//! debugfs: `/sys/kernel/debug/rmlx5/rmlx5_<n>/{eqs,cqs,qps,stats}`,
//! `rmlx5/perf`, `rmlx5/pci` (the ConnectX functions that are up),
//! `rmlx5/cx_cmd` (how their commands run, see `cx/events.rs`) and
//! `rmlx5/objects` (what each function holds for its users).
//!
//! `eqs` prints one line per EQ, each read under the fabric lock on its
//! own; `cqs` and `qps` walk their tables under it in groups of slots
//! (`walk_slots`); `stats` is one snapshot under it. Formatting into the
//! seq_file buffer does not sleep.

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

/// Table slots read per hold of the fabric lock by `cqs` and `qps`.
const SLOTS_PER_HOLD: u32 = 64;

/// Calls `line` for slots `0..slots` under the fabric lock, taken once per
/// [`SLOTS_PER_HOLD`] slots. A table has 16,384 slots: one hold across the
/// whole walk, with a line formatted per live object, kept interrupts off
/// on this CPU, and the engine and the EQ handlers waiting, for all of it;
/// a hold per slot made each read of the file take 16,384 lock round
/// trips (slow on a lockdep kernel, where the stress tests read these
/// files every 50 ms while they wait for objects to go). Lines are
/// consistent within their group of slots, not across groups.
fn walk_slots(
    soft: &SoftHca,
    slots: u32,
    mut line: impl FnMut(&mut crate::hca::Locked, u32) -> fmt::Result,
) -> fmt::Result {
    let mut first = 0;
    while first < slots {
        let end = first.saturating_add(SLOTS_PER_HOLD).min(slots);
        let mut st = soft.state.lock();
        for slot in first..end {
            line(&mut st, slot)?;
        }
        first = end;
    }
    Ok(())
}

fn cqs(r: &HcaRef, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    writeln!(f, "cqn pi ci armed solicited sn error events handler")?;
    let dev = crate::mlx5_core::device::get(r.hca).ok();
    let index = r.hca as u16;
    walk_slots(&r.soft, MAX_CQS as u32, |st, cqn| {
        let Some(i) = st.fabric.hca(index).and_then(|m| m.query_cq(cqn)) else {
            return Ok(());
        };
        // The table lock is a leaf: it may be taken under the fabric lock.
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
        )
    })
}

fn qps(r: &HcaRef, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    writeln!(f, "qpn state dest_hca dest_qpn sq_pi sq_ci rq_ci")?;
    let index = r.hca as u16;
    walk_slots(&r.soft, MAX_QPS as u32, |st, slot| {
        let Some(i) = st
            .fabric
            .hca(index)
            .and_then(|m| m.query_qp(QPN_BASE + slot))
        else {
            return Ok(());
        };
        writeln!(
            f,
            "{:#x} {:?} {} {:#x} {} {} {}",
            i.qpn, i.state, i.conn.dest.hca, i.conn.dest.qpn, i.sq_pi, i.sq_ci, i.rq_ci
        )
    })
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
    writeln!(f, "trap_streams {}", t.streams)?;
    writeln!(f, "trap_stream_pages {}", t.stream_pages)?;
    writeln!(f, "trap_stream_busy {}", t.stream_busy)?;
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
