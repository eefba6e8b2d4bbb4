// SPDX-License-Identifier: GPL-2.0

//! Finding and opening devices.

use std::sync::Arc;

use crate::backend::kernel::KernelBackend;
use crate::backend::model::SoftFabric;
use crate::backend::Backend;
use crate::context::Context;
use crate::error::Result;

/// Where a device lives.
#[derive(Clone, Debug)]
enum Kind {
    /// `/dev/rmlx5_uverbs<N>`.
    Kernel(String),
    /// A software HCA of an in-process fabric.
    Model(Arc<SoftFabric>),
}

/// An rmlx5 device (`rmlx5_<N>`), not yet opened.
#[derive(Clone, Debug)]
pub struct Device {
    index: u32,
    kind: Kind,
}

/// The rmlx5 devices of the kernel module: every `/dev/rmlx5_uverbs<N>`,
/// in index order. An empty list if the module is not loaded.
///
/// # Errors
///
/// [`crate::Error::Os`] if `/dev` cannot be read.
pub fn devices() -> Result<Vec<Device>> {
    let mut v = Vec::new();
    let dir = match std::fs::read_dir("/dev") {
        Ok(d) => d,
        Err(e) => {
            return Err(crate::Error::Os {
                op: "read /dev",
                errno: e.raw_os_error().unwrap_or(libc::EIO),
            })
        }
    };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(n) = name
            .to_str()
            .and_then(|s| s.strip_prefix("rmlx5_uverbs"))
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        v.push(Device {
            index: n,
            kind: Kind::Kernel(format!("/dev/rmlx5_uverbs{}", n)),
        });
    }
    v.sort_by_key(|d| d.index);
    Ok(v)
}

impl Device {
    pub(crate) fn model(fabric: Arc<SoftFabric>, index: u32) -> Device {
        Device {
            index,
            kind: Kind::Model(fabric),
        }
    }

    /// The device name, `rmlx5_<N>`.
    pub fn name(&self) -> String {
        format!("rmlx5_{}", self.index)
    }

    /// The device index N. Peers address the device by its port's LID,
    /// which [`Context::lid`] reports (N + 1 on a software HCA; a
    /// ConnectX function's port has its own).
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The device node, or `None` for an in-process software HCA.
    pub fn path(&self) -> Option<&str> {
        match &self.kind {
            Kind::Kernel(p) => Some(p),
            Kind::Model(_) => None,
        }
    }

    /// Opens a context on the device.
    ///
    /// # Errors
    ///
    /// The errno of `open`, of `QUERY_DEVICE` (the kernel backend asks
    /// whether doorbells need a kick) or of mapping the UAR page.
    pub fn open(&self) -> Result<Context> {
        let backend: Box<dyn Backend> = match &self.kind {
            Kind::Kernel(path) => Box::new(KernelBackend::open(path)?),
            Kind::Model(f) => Box::new(f.open(self.index)?),
        };
        Context::new(backend, self.index)
    }
}
