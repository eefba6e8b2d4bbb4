// SPDX-License-Identifier: GPL-2.0

//! The user-space entry point: `/dev/rmlx5_uverbs<n>`.
//!
//! Opening the node creates a user context (`Ucontext`); every object a
//! process creates later belongs to it and is destroyed when the file is
//! released. Commands arrive as ioctls; a command the module does not know
//! gets `ENOTTY`, as for any character device.

use kernel::{
    fs::File,
    miscdevice::{
        MiscDevice,
        MiscDeviceRegistration, //
    },
    prelude::*,
};

use crate::device::Hca;

/// Per-open state of a user-space device node.
pub(crate) struct Ucontext {
    /// The HCA this context was opened on.
    hca_index: u32,
}

#[vtable]
impl MiscDevice for Ucontext {
    type Ptr = KBox<Self>;

    fn open(_file: &File, misc: &MiscDeviceRegistration<Self>) -> Result<KBox<Self>> {
        let hca = Hca::from_uverbs(misc);
        pr_debug!("ucontext opened on rmlx5_{}\n", hca.index());
        Ok(KBox::new(
            Self {
                hca_index: hca.index(),
            },
            GFP_KERNEL,
        )?)
    }

    fn release(ctx: KBox<Self>, _file: &File) {
        pr_debug!("ucontext closed on rmlx5_{}\n", ctx.hca_index);
    }

    fn ioctl(ctx: &Self, _file: &File, cmd: u32, _arg: usize) -> Result<isize> {
        pr_debug!("rmlx5_{}: unknown ioctl {:#x}\n", ctx.hca_index, cmd);
        Err(ENOTTY)
    }
}
