// SPDX-License-Identifier: GPL-2.0

//! The user-space entry point: `/dev/rmlx5_uverbs<n>`.
//!
//! Opening the node creates a user context ([`Ucontext`]); every object a
//! process creates later belongs to it and is destroyed when the file is
//! released. Commands arrive as ioctls (`rmlx5-abi`); a command the module
//! does not know gets `ENOTTY`, as for any character device. Queue
//! buffers, doorbell records and the UAR page are mapped with `mmap`;
//! completion channels and the async-event file are `[infinibandevent]`
//! anonymous files. `Documentation/uverbs.md` describes the ABI and the
//! rules for closing and unmapping.

use kernel::{
    fs::File,
    miscdevice::{
        MiscDevice,
        MiscDeviceRegistration, //
    },
    mm::virt::VmaNew,
    prelude::*,
};

mod cmd;
mod commands;
mod context;
mod event;
mod event_file;
pub(crate) mod node;
pub(crate) mod objects;
mod table;
#[cfg(CONFIG_KUNIT)]
mod tests;

pub(crate) use context::Ucontext;

#[vtable]
impl MiscDevice for Ucontext {
    type Ptr = Pin<KBox<Self>>;

    fn open(_file: &File, misc: &MiscDeviceRegistration<Self>) -> Result<Pin<KBox<Self>>> {
        let node = node::Node::from_uverbs(misc);
        pr_debug!("ucontext opened on rmlx5_{}\n", node.index());
        let ctx = Ucontext::new(node.index(), node.users().enter())?;
        node.users().watch(ctx.as_ref())?;
        // Opened on a device that failed before: told at once.
        if ctx.dev.is_fatal() {
            ctx.device_fatal();
        }
        Ok(ctx)
    }

    fn release(ctx: Pin<KBox<Self>>, _file: &File) {
        pr_debug!("ucontext closed on rmlx5_{}\n", ctx.hca_index);
        // Dropping the context tears everything down (context.rs).
        drop(ctx);
    }

    fn ioctl(ctx: Pin<&Self>, _file: &File, cmd: u32, arg: usize) -> Result<isize> {
        let command = cmd::command(cmd)?;
        // Its device went away (node.rs): nothing is left to command.
        // Disassociation waits for the commands already in.
        let _in = ctx.enter_command()?;
        commands::run(&ctx, command, &cmd::Arg::new(arg))
    }

    fn mmap(ctx: Pin<&Self>, _file: &File, vma: &VmaNew) -> Result {
        ctx.mmap(vma)
    }
}
