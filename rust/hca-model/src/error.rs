// SPDX-License-Identifier: GPL-2.0

//! Errors of the control operations (object creation, modify, destroy).
//!
//! Data-path failures never appear here: they become error CQEs, and bad
//! doorbells become [`super::doorbell::DoorbellError`] reports.

/// Why a control operation was refused. The model state is unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// An argument is out of range or inconsistent (`EINVAL`).
    Invalid,
    /// The object table has no free slot (`ENOMEM`).
    NoSpace,
    /// The object is still used by another object (`EBUSY`).
    Busy,
    /// No such object (`ENOENT`; the uverbs layer usually reports `EINVAL`).
    NotFound,
    /// A modify-QP transition or attribute the IB spec does not allow from
    /// the QP's current state (`EINVAL`).
    BadTransition,
}

impl Error {
    /// The positive errno value the kernel returns for this error.
    pub fn errno(self) -> i32 {
        match self {
            Error::Invalid | Error::BadTransition => 22,
            Error::NoSpace => 12,
            Error::Busy => 16,
            Error::NotFound => 2,
        }
    }
}
