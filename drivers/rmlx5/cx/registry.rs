// SPDX-License-Identifier: GPL-2.0

//! The ConnectX functions that are up, as `rmlx5-devinfo` lists them next
//! to the software HCAs: debugfs `rmlx5/pci`, one line per function.
//!
//! A function is recorded when its bring-up succeeded and forgotten when it
//! is taken down (unbind, rmmod, or a later step of probe failing); the
//! line names the verbs device `rmlx5_<n>` the function is once attached
//! (`verbs none` before, or if attaching failed).

use core::fmt;
use kernel::{
    device::Bound,
    pci,
    prelude::*, //
};

use super::Model;
use crate::mlx5_cmdif::function::Summary;

/// Longest PCI device name kept ("dddd:bb:dd.f" is 12 bytes).
const NAME_LEN: usize = 32;

/// One function that is up.
#[derive(Clone, Copy)]
pub(crate) struct CxEntry {
    name: [u8; NAME_LEN],
    name_len: usize,
    model: Model,
    vendor: u16,
    device: u16,
    s: Summary,
    /// The verbs device `rmlx5_<n>` it is, once attached.
    verbs: Option<u16>,
}

impl CxEntry {
    fn name(&self) -> &str {
        self.name
            .get(..self.name_len)
            .and_then(|n| core::str::from_utf8(n).ok())
            .unwrap_or("?")
    }
}

/// The functions that are up.
pub(crate) struct CxFunctions {
    up: KVec<CxEntry>,
}

impl CxFunctions {
    /// None.
    pub(crate) const fn new() -> Self {
        Self { up: KVec::new() }
    }
}

kernel::sync::global_lock! {
    // SAFETY: `init` is called once, in module init, before the PCI driver
    // registers (nothing can be probed before).
    /// The ConnectX functions that are up.
    pub(crate) unsafe(uninit) static CX_FUNCTIONS: Mutex<CxFunctions> = CxFunctions::new();
}

fn name_of(pdev: &pci::Device<Bound>) -> ([u8; NAME_LEN], usize) {
    let bytes = AsRef::<kernel::device::Device<Bound>>::as_ref(pdev)
        .name()
        .to_bytes();
    let n = bytes.len().min(NAME_LEN);
    let mut name = [0u8; NAME_LEN];
    if let (Some(d), Some(s)) = (name.get_mut(..n), bytes.get(..n)) {
        d.copy_from_slice(s);
    }
    (name, n)
}

/// Records `pdev` as up with the bring-up summary `s`. A full table only
/// loses the listing, not the function.
pub(super) fn record(pdev: &pci::Device<Bound>, model: Model, s: &Summary) {
    let (name, name_len) = name_of(pdev);
    let e = CxEntry {
        name,
        name_len,
        model,
        vendor: pdev.vendor_id().as_raw(),
        device: pdev.device_id(),
        s: *s,
        verbs: None,
    };
    let mut t = CX_FUNCTIONS.lock();
    t.up.retain(|x| x.name != name);
    let _ = t.up.push(e, GFP_KERNEL);
}

/// Records that `pdev` is the verbs device `rmlx5_<index>` (or no longer
/// one).
pub(super) fn set_verbs(pdev: &pci::Device<Bound>, index: Option<u16>) {
    let (name, _) = name_of(pdev);
    let mut t = CX_FUNCTIONS.lock();
    if let Some(e) = t.up.iter_mut().find(|x| x.name == name) {
        e.verbs = index;
    }
}

/// Forgets `pdev` (it is down, or going). The last one out frees the
/// table's memory: the static outlives the module's exit, and every
/// function is unbound before that.
pub(super) fn forget(pdev: &pci::Device<Bound>) {
    let (name, _) = name_of(pdev);
    let mut t = CX_FUNCTIONS.lock();
    t.up.retain(|x| x.name != name);
    if t.up.is_empty() {
        t.up = KVec::new();
    }
}

/// `rmlx5_<n>`, or `none`.
struct Verbs(Option<u16>);

impl fmt::Display for Verbs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(n) => write!(f, "rmlx5_{n}"),
            None => f.write_str("none"),
        }
    }
}

/// debugfs `rmlx5/pci`: one line per function that is up.
pub(crate) fn show(f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let t = CX_FUNCTIONS.lock();
    for e in t.up.iter() {
        let s = &e.s;
        writeln!(
            f,
            "{} {:04x}:{:04x} {}{} fw {}.{}.{} cmdif {} issi {} pages {} uar {} max_qp 2^{} max_cq 2^{} ports {} verbs {}",
            e.name(),
            e.vendor,
            e.device,
            e.model.name,
            if e.model.vf { "-VF" } else { "" },
            s.fw_rev.major,
            s.fw_rev.minor,
            s.fw_rev.subminor,
            s.cmdif_rev,
            s.issi,
            s.pages_lent,
            s.uar,
            s.log_max_qp,
            s.log_max_cq,
            s.num_ports,
            Verbs(e.verbs)
        )?;
    }
    Ok(())
}
