// SPDX-License-Identifier: GPL-2.0

//! The one error type of the crate: why a wait, a command or a bring-up
//! step failed, printable as a log line that names the command, and
//! mapped to one errno.

use core::fmt;

use super::prm::cmd_status::CmdError;

/// The two waits for the firmware's `initializing` bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadyWait {
    /// Before the driver writes the command queue address: the firmware
    /// has not accepted the initialization segment yet.
    PreInit,
    /// After writing the address: the firmware has not loaded the command
    /// queue yet.
    CmdqLoad,
}

impl ReadyWait {
    /// What was being waited for, for log messages.
    pub fn name(self) -> &'static str {
        match self {
            ReadyWait::PreInit => "firmware pre-initialization",
            ReadyWait::CmdqLoad => "firmware loading the command queue",
        }
    }
}

/// Why the command interface, a command or a bring-up step failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// `initializing` did not clear within the timeout.
    FwNotReady {
        /// Which of the two waits.
        wait: ReadyWait,
        /// The timeout, in milliseconds.
        ms: u64,
    },
    /// The device speaks another command interface revision than 5.
    CmdifRev {
        /// The revision it reports.
        found: u16,
    },
    /// The command queue geometry the device reports cannot be used
    /// (more than 32 entries, entries smaller than 64 bytes, or a queue
    /// larger than its 4 KiB page).
    CmdqGeometry {
        /// log2 of the number of entries.
        log_sz: u8,
        /// log2 of the entry stride.
        log_stride: u8,
    },
    /// The DMA memory given to the command interface is misaligned or too
    /// small (see `CmdMem`).
    BadCmdMem,
    /// The embedder refused a DMA access inside the command memory.
    Dma {
        /// The address of the access.
        addr: u64,
    },
    /// The device did not hand a command back within the command timeout.
    /// The entry stays the device's until it does.
    Timeout {
        /// The command's name.
        command: &'static str,
        /// Its opcode.
        opcode: u16,
        /// The timeout, in milliseconds.
        ms: u64,
    },
    /// The device is gone: its initialization segment reads all ones, as
    /// a surprise-removed or dead PCI function's registers do. Further
    /// commands fail at once with the same error.
    DeviceGone {
        /// The command's name.
        command: &'static str,
        /// Its opcode.
        opcode: u16,
    },
    /// The function is in internal error (its health check failed, see
    /// [`CmdIf::set_internal_error`](super::cmdif::CmdIf::set_internal_error)):
    /// the command was not posted. mlx5_core answers such commands itself
    /// with status `MLX5_DRIVER_STATUS_ABORTED`; destroy-type commands
    /// succeed instead (see [`destroys_only`](super::cmdif::destroys_only)).
    InternalError {
        /// The command's name.
        command: &'static str,
        /// Its opcode.
        opcode: u16,
    },
    /// The device refused the command (delivery status), failed it
    /// (status and syndrome), or returned too short an output.
    Cmd(CmdError),
    /// With command checksums on, the entry or an output mailbox came back
    /// with a bad signature.
    Signature {
        /// The command's name.
        command: &'static str,
        /// Its opcode.
        opcode: u16,
    },
    /// Every queue entry is still owned by the device after timeouts, or
    /// the mailboxes are held by a command that timed out.
    QueueBusy {
        /// The command that could not be posted.
        command: &'static str,
        /// Its opcode.
        opcode: u16,
    },
    /// A message does not fit the mailboxes (or the command's layout does
    /// not fit the crate's buffer): a driver bug.
    TooLong {
        /// The command's name.
        command: &'static str,
        /// Its opcode.
        opcode: u16,
        /// Bytes asked for.
        len: usize,
        /// The most there is room for.
        max: usize,
    },
    /// Message bytes `offset..offset + len` lie beyond the mailboxes, or
    /// beyond the output of the last command (a driver bug).
    OutOfRange {
        /// First byte.
        offset: usize,
        /// Number of bytes.
        len: usize,
    },
    /// The device lacks something the driver needs.
    Unsupported {
        /// What.
        what: &'static str,
    },
    /// [`Bus::alloc_page`](super::bus::Bus::alloc_page) failed while
    /// giving pages.
    PageAlloc {
        /// Pages asked for.
        wanted: u32,
        /// Pages allocated and given before the failure.
        given: u32,
    },
    /// The device returned a page it was never given (or returned more
    /// pages than asked).
    UnknownPage {
        /// The first such address.
        addr: u64,
    },
    /// The device kept pages through the reclaim timeout.
    PagesNotReturned {
        /// Pages it still holds.
        left: u64,
        /// The timeout, in milliseconds.
        ms: u64,
    },
    /// The function is not in a state for the call (brought up twice, or
    /// a page request before bring-up).
    State {
        /// What is wrong.
        what: &'static str,
    },
}

/// Linux errno values, positive (the kernel negates them).
mod errno {
    pub(super) const EIO: i32 = 5;
    pub(super) const ENOMEM: i32 = 12;
    pub(super) const ENODEV: i32 = 19;
    pub(super) const EBUSY: i32 = 16;
    pub(super) const EINVAL: i32 = 22;
    pub(super) const EOPNOTSUPP: i32 = 95;
    pub(super) const ETIMEDOUT: i32 = 110;
}

impl Error {
    /// The positive Linux errno: a command's status maps as mlx5_core maps
    /// it ([`CmdError::errno`]), waits that time out are `ETIMEDOUT`.
    pub fn errno(&self) -> i32 {
        match self {
            Error::FwNotReady { .. } | Error::Timeout { .. } => errno::ETIMEDOUT,
            Error::Cmd(e) => e.errno(),
            Error::CmdifRev { .. } | Error::Unsupported { .. } => errno::EOPNOTSUPP,
            Error::CmdqGeometry { .. }
            | Error::Signature { .. }
            | Error::UnknownPage { .. }
            | Error::Dma { .. } => errno::EIO,
            Error::BadCmdMem
            | Error::TooLong { .. }
            | Error::OutOfRange { .. }
            | Error::State { .. } => errno::EINVAL,
            Error::QueueBusy { .. } | Error::PagesNotReturned { .. } => errno::EBUSY,
            Error::DeviceGone { .. } => errno::ENODEV,
            Error::InternalError { .. } => errno::EIO,
            Error::PageAlloc { .. } => errno::ENOMEM,
        }
    }

    /// Whether the device stopped answering (a command or a wait timed
    /// out, or its registers read all ones): further commands would only
    /// time out or fail too.
    pub fn is_timeout(&self) -> bool {
        matches!(
            self,
            Error::FwNotReady { .. }
                | Error::Timeout { .. }
                | Error::DeviceGone { .. }
                | Error::InternalError { .. }
        )
    }
}

impl From<CmdError> for Error {
    fn from(e: CmdError) -> Self {
        Error::Cmd(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::FwNotReady { wait, ms } => {
                write!(f, "waiting for {}: timed out after {ms} ms", wait.name())
            }
            Error::CmdifRev { found } => write!(
                f,
                "command interface revision {found}, the driver speaks {}",
                super::prm::init_seg::CMDIF_REV
            ),
            Error::CmdqGeometry { log_sz, log_stride } => write!(
                f,
                "unusable command queue geometry: log_sz {log_sz}, log_stride {log_stride}"
            ),
            Error::BadCmdMem => write!(f, "command memory misaligned or too small"),
            Error::Dma { addr } => write!(f, "DMA access at {addr:#x} outside command memory"),
            Error::Timeout {
                command,
                opcode,
                ms,
            } => {
                write!(f, "{command} ({opcode:#x}): timed out after {ms} ms")
            }
            Error::DeviceGone { command, opcode } => write!(
                f,
                "{command} ({opcode:#x}): the device is gone (its registers read all ones)"
            ),
            Error::InternalError { command, opcode } => write!(
                f,
                "{command} ({opcode:#x}): not posted, the function is in internal error"
            ),
            Error::Cmd(e) => fmt::Display::fmt(e, f),
            Error::Signature { command, opcode } => {
                write!(f, "{command} ({opcode:#x}): bad signature on completion")
            }
            Error::QueueBusy { command, opcode } => write!(
                f,
                "{command} ({opcode:#x}): command queue held by commands that timed out"
            ),
            Error::TooLong {
                command,
                opcode,
                len,
                max,
            } => write!(
                f,
                "{command} ({opcode:#x}): message of {len} bytes, room for {max}"
            ),
            Error::OutOfRange { offset, len } => write!(
                f,
                "message bytes {offset}..+{len} outside the mailboxes or the last output"
            ),
            Error::Unsupported { what } => write!(f, "device does not support {what}"),
            Error::PageAlloc { wanted, given } => write!(
                f,
                "MANAGE_PAGES: out of memory after giving {given} of {wanted} pages"
            ),
            Error::UnknownPage { addr } => {
                write!(
                    f,
                    "MANAGE_PAGES: device returned page {addr:#x} it was not given"
                )
            }
            Error::PagesNotReturned { left, ms } => write!(
                f,
                "MANAGE_PAGES: device kept {left} pages, timed out after {ms} ms"
            ),
            Error::State { what } => write!(f, "{what}"),
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::string::ToString;

    use super::super::prm::cmd_queue::DeliveryStatus;
    use super::super::prm::cmd_status::CmdStatus;
    use super::*;

    #[test]
    fn messages_name_the_command_or_the_wait() {
        let cases = [
            (
                Error::Timeout {
                    command: "CREATE_EQ",
                    opcode: 0x301,
                    ms: 60_000,
                },
                "CREATE_EQ (0x301): timed out after 60000 ms",
                110,
            ),
            (
                Error::Cmd(CmdError::Failed {
                    command: "CREATE_CQ",
                    opcode: 0x400,
                    status: CmdStatus::LimErr,
                    syndrome: 0x70001,
                }),
                "CREATE_CQ (0x400) failed: status LIM_ERR (0x8), syndrome 0x70001",
                12,
            ),
            (
                Error::Cmd(CmdError::Delivery {
                    command: "INIT_HCA",
                    opcode: 0x102,
                    status: DeliveryStatus::TokErr,
                }),
                "INIT_HCA (0x102) not delivered: delivery status TOK_ERR (0x2)",
                5,
            ),
            (
                Error::FwNotReady {
                    wait: ReadyWait::CmdqLoad,
                    ms: 2000,
                },
                "waiting for firmware loading the command queue: timed out after 2000 ms",
                110,
            ),
            (
                Error::CmdifRev { found: 4 },
                "command interface revision 4, the driver speaks 5",
                95,
            ),
            (
                Error::PagesNotReturned { left: 3, ms: 5000 },
                "MANAGE_PAGES: device kept 3 pages, timed out after 5000 ms",
                16,
            ),
        ];
        for (e, text, errno) in cases {
            assert_eq!(e.to_string(), text);
            assert_eq!(e.errno(), errno, "{e}");
        }
        assert!(Error::FwNotReady {
            wait: ReadyWait::PreInit,
            ms: 1
        }
        .is_timeout());
        assert!(!Error::BadCmdMem.is_timeout());
    }
}
