// SPDX-License-Identifier: GPL-2.0

//! ioctl command numbers of `/dev/rmlx5_uverbsN`.
//!
//! All commands are `_IOWR(RMLX5_IOCTL_MAGIC, nr, struct)`: the argument is
//! read, and the response written back into the same struct. The kernel
//! dispatches on the type and number only and takes the struct's size from
//! its [`super::uapi::CmdHdr`], so a grown struct keeps its command.

use super::uapi;

/// ioctl type byte of every rmlx5 command (`RMLX5_IOCTL_MAGIC`); the same
/// as `RDMA_IOCTL_MAGIC`, with command numbers in a range of our own.
pub const MAGIC: u32 = 0x1b;

/// First command number; numbers below belong to ib_uverbs.
pub const NR_BASE: u32 = 0x80;

const IOC_NRBITS: u32 = 8;
const IOC_TYPEBITS: u32 = 8;
const IOC_SIZEBITS: u32 = 14;
const IOC_NRSHIFT: u32 = 0;
const IOC_TYPESHIFT: u32 = IOC_NRSHIFT + IOC_NRBITS;
const IOC_SIZESHIFT: u32 = IOC_TYPESHIFT + IOC_TYPEBITS;
const IOC_DIRSHIFT: u32 = IOC_SIZESHIFT + IOC_SIZEBITS;
const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;

/// `_IOWR(MAGIC, nr, T)` for an argument of `size` bytes.
pub const fn iowr(nr: u32, size: usize) -> u32 {
    ((IOC_READ | IOC_WRITE) << IOC_DIRSHIFT)
        | (((size as u32) & ((1 << IOC_SIZESHIFT) - 1)) << IOC_SIZESHIFT)
        | (MAGIC << IOC_TYPESHIFT)
        | (nr << IOC_NRSHIFT)
}

/// The ioctl type byte of a command (`_IOC_TYPE`).
pub const fn cmd_type(cmd: u32) -> u32 {
    (cmd >> IOC_TYPESHIFT) & ((1 << IOC_TYPEBITS) - 1)
}

/// The ioctl number of a command (`_IOC_NR`).
pub const fn cmd_nr(cmd: u32) -> u32 {
    (cmd >> IOC_NRSHIFT) & ((1 << IOC_NRBITS) - 1)
}

/// The argument size encoded in a command (`_IOC_SIZE`).
pub const fn cmd_size(cmd: u32) -> u32 {
    (cmd >> IOC_SIZESHIFT) & ((1 << IOC_SIZEBITS) - 1)
}

/// The direction bits of a command (`_IOC_DIR`).
pub const fn cmd_dir(cmd: u32) -> u32 {
    cmd >> IOC_DIRSHIFT
}

macro_rules! commands {
    ($( $(#[$doc:meta])* $name:ident = $nr:literal, $ty:ty; )*) => {
        /// The commands, by number.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(u32)]
        pub enum Command {
            $( $(#[$doc])* $name = NR_BASE + $nr, )*
        }

        impl Command {
            /// Every command, in number order.
            pub const ALL: &'static [Command] = &[$( Command::$name, )*];

            /// The full ioctl command number (`_IOWR` of the v1 struct).
            pub const fn cmd(self) -> u32 {
                match self {
                    $( Command::$name => iowr(NR_BASE + $nr, core::mem::size_of::<$ty>()), )*
                }
            }

            /// Size of the first version of the command's struct: the
            /// smallest `CmdHdr::size` the kernel accepts.
            pub const fn min_size(self) -> usize {
                match self {
                    $( Command::$name => core::mem::size_of::<$ty>(), )*
                }
            }

            /// The command a raw ioctl number names, judged by type byte,
            /// direction and number (not by the encoded size).
            pub const fn from_cmd(cmd: u32) -> Option<Command> {
                if cmd_type(cmd) != MAGIC || cmd_dir(cmd) != (IOC_READ | IOC_WRITE) {
                    return None;
                }
                match cmd_nr(cmd) {
                    $( n if n == NR_BASE + $nr => Some(Command::$name), )*
                    _ => None,
                }
            }
        }
    };
}

commands! {
    /// Device attributes (`struct rmlx5_query_device`).
    QueryDevice = 0, uapi::QueryDevice;
    /// Port attributes (`struct rmlx5_query_port`).
    QueryPort = 1, uapi::QueryPort;
    /// Allocate a protection domain (`struct rmlx5_alloc_pd`).
    AllocPd = 2, uapi::AllocPd;
    /// Free a protection domain (`struct rmlx5_destroy`).
    DeallocPd = 3, uapi::Destroy;
    /// Register a user memory region (`struct rmlx5_reg_mr`).
    RegMr = 4, uapi::RegMr;
    /// Deregister a memory region (`struct rmlx5_destroy`).
    DeregMr = 5, uapi::Destroy;
    /// Create a completion channel file (`struct rmlx5_create_comp_channel`).
    CreateCompChannel = 6, uapi::CreateCompChannel;
    /// Create a CQ (`struct rmlx5_create_cq`).
    CreateCq = 7, uapi::CreateCq;
    /// Destroy a CQ (`struct rmlx5_destroy`; reports event counts).
    DestroyCq = 8, uapi::Destroy;
    /// Create an RC QP (`struct rmlx5_create_qp`).
    CreateQp = 9, uapi::CreateQp;
    /// Move a QP through its states (`struct rmlx5_modify_qp`).
    ModifyQp = 10, uapi::ModifyQp;
    /// Read a QP's state and attributes (`struct rmlx5_query_qp`).
    QueryQp = 11, uapi::QueryQp;
    /// Destroy a QP (`struct rmlx5_destroy`; reports event counts).
    DestroyQp = 12, uapi::Destroy;
    /// Tell the software HCA a doorbell was rung (`struct rmlx5_kick`).
    Kick = 13, uapi::Kick;
    /// Get the context's async-event file (`struct rmlx5_get_async_fd`).
    GetAsyncFd = 14, uapi::GetAsyncFd;
}
