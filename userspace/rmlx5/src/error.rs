// SPDX-License-Identifier: GPL-2.0

//! Errors of the provider.

use std::fmt;

/// Why a verb failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// A system call (or the in-process stand-in for it) failed with
    /// `errno`.
    Os {
        /// What was being done (`"CREATE_CQ"`, `"mmap"`, ...).
        op: &'static str,
        /// The positive errno value.
        errno: i32,
    },
    /// An argument is out of range or inconsistent; nothing was done.
    Invalid(&'static str),
    /// The send or receive queue has no room for the work request.
    QueueFull,
    /// The object is still in use (a CQ by a QP, a PD by an MR or QP, or
    /// another handle to it is alive).
    Busy(&'static str),
    /// Destroying a CQ timed out waiting for completion events that were
    /// read from the channel but not acknowledged.
    UnackedEvents {
        /// Events read with `get_cq_event` and not yet acknowledged.
        unacked: u32,
    },
    /// The software HCA refused a doorbell (a provider bug, or a corrupted
    /// queue): the work requests were written but will not execute.
    Doorbell(String),
    /// Non-blocking operation found nothing to do.
    WouldBlock,
    /// No such device.
    NoDevice,
}

/// Result of a verb.
pub type Result<T> = core::result::Result<T, Error>;

impl Error {
    /// The errno this error corresponds to, as libibverbs would return.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Os { errno, .. } => *errno,
            Error::Invalid(_) => libc::EINVAL,
            Error::QueueFull => libc::ENOMEM,
            Error::Busy(_) => libc::EBUSY,
            Error::UnackedEvents { .. } => libc::ETIMEDOUT,
            Error::Doorbell(_) => libc::EIO,
            Error::WouldBlock => libc::EAGAIN,
            Error::NoDevice => libc::ENODEV,
        }
    }

    pub(crate) fn last_os(op: &'static str) -> Error {
        Error::Os {
            op,
            errno: std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Os { op, errno } => write!(
                f,
                "{} failed: {}",
                op,
                std::io::Error::from_raw_os_error(*errno)
            ),
            Error::Invalid(why) => write!(f, "invalid argument: {}", why),
            Error::QueueFull => write!(f, "work queue full"),
            Error::Busy(why) => write!(f, "busy: {}", why),
            Error::UnackedEvents { unacked } => write!(
                f,
                "CQ destroy timed out: {} completion event(s) read but not acknowledged \
                 (call ack_events first)",
                unacked
            ),
            Error::Doorbell(why) => write!(f, "software HCA refused the doorbell: {}", why),
            Error::WouldBlock => write!(f, "no event available (non-blocking)"),
            Error::NoDevice => write!(f, "no such rmlx5 device"),
        }
    }
}

impl std::error::Error for Error {}

/// A list of work requests was posted only in part (libibverbs' `bad_wr`):
/// the requests before `index` were posted and will execute, the one at
/// `index` and those after it were not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostError {
    /// Position in the list of the first work request not posted.
    pub index: usize,
    /// Its `wr_id`.
    pub wr_id: u64,
    /// Why it was refused.
    pub error: Error,
}

impl fmt::Display for PostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "work request {} (wr_id {:#x}) not posted: {}",
            self.index, self.wr_id, self.error
        )
    }
}

impl std::error::Error for PostError {}
