// SPDX-License-Identifier: GPL-2.0

//! How a command ended: the status codes of the output header
//! ([`CmdStatus`], `MLX5_CMD_STAT_*`) and the error a failed command becomes
//! ([`CmdError`]), which names the command for log messages and maps to one
//! errno.

use core::fmt;

use super::cmd_queue::DeliveryStatus;
use super::command::opcode_name;
use super::ifc::IfcValue;

/// How a command ended: `mbox_out.status`, the `MLX5_CMD_STAT_*` values.
/// Decoding never fails; a value no header names is [`CmdStatus::Unknown`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CmdStatus {
    /// `MLX5_CMD_STAT_OK` (0x0): the command succeeded.
    #[default]
    Ok,
    /// `MLX5_CMD_STAT_INT_ERR` (0x1): internal firmware error.
    IntErr,
    /// `MLX5_CMD_STAT_BAD_OP_ERR` (0x2): unknown or unsupported opcode or
    /// op_mod.
    BadOpErr,
    /// `MLX5_CMD_STAT_BAD_PARAM_ERR` (0x3): a field holds an invalid value.
    BadParamErr,
    /// `MLX5_CMD_STAT_BAD_SYS_STATE_ERR` (0x4): the HCA is not in a state
    /// that allows the command (for example not initialised).
    BadSysStateErr,
    /// `MLX5_CMD_STAT_BAD_RES_ERR` (0x5): the named resource does not exist
    /// or is not the caller's.
    BadResErr,
    /// `MLX5_CMD_STAT_RES_BUSY` (0x6): the resource is in use.
    ResBusy,
    /// `MLX5_CMD_STAT_NOT_READY` (0x7): firmware not ready; retry later.
    NotReady,
    /// `MLX5_CMD_STAT_LIM_ERR` (0x8): a size or count exceeds a limit.
    LimErr,
    /// `MLX5_CMD_STAT_BAD_RES_STATE_ERR` (0x9): the resource is in a state
    /// that does not allow the command.
    BadResStateErr,
    /// `MLX5_CMD_STAT_IX_ERR` (0xa): an index is out of range.
    IxErr,
    /// `MLX5_CMD_STAT_NO_RES_ERR` (0xf): out of resources.
    NoResErr,
    /// `MLX5_CMD_STAT_BAD_QP_STATE_ERR` (0x10): the QP's current state does
    /// not match the transition.
    BadQpStateErr,
    /// `MLX5_CMD_STAT_BAD_PKT_ERR` (0x30): a bad packet (MAD) was discarded.
    BadPktErr,
    /// `MLX5_CMD_STAT_BAD_SIZE_OUTS_CQES_ERR` (0x40): the CQ would be too
    /// small for its outstanding CQEs.
    BadSizeOutsCqesErr,
    /// `MLX5_CMD_STAT_BAD_INP_LEN_ERR` (0x50): the input length is wrong
    /// for the command.
    BadInpLenErr,
    /// `MLX5_CMD_STAT_BAD_OUTP_LEN_ERR` (0x51): the output length is too
    /// short for the command.
    BadOutpLenErr,
    /// A status no header names; carries the raw byte. [`CmdStatus::from_raw`]
    /// never puts a named value here.
    Unknown(u8),
}

impl CmdStatus {
    /// Every named status, in value order.
    pub const KNOWN: &'static [CmdStatus] = &[
        CmdStatus::Ok,
        CmdStatus::IntErr,
        CmdStatus::BadOpErr,
        CmdStatus::BadParamErr,
        CmdStatus::BadSysStateErr,
        CmdStatus::BadResErr,
        CmdStatus::ResBusy,
        CmdStatus::NotReady,
        CmdStatus::LimErr,
        CmdStatus::BadResStateErr,
        CmdStatus::IxErr,
        CmdStatus::NoResErr,
        CmdStatus::BadQpStateErr,
        CmdStatus::BadPktErr,
        CmdStatus::BadSizeOutsCqesErr,
        CmdStatus::BadInpLenErr,
        CmdStatus::BadOutpLenErr,
    ];

    /// The status byte.
    pub fn raw(self) -> u8 {
        match self {
            CmdStatus::Ok => 0x0,
            CmdStatus::IntErr => 0x1,
            CmdStatus::BadOpErr => 0x2,
            CmdStatus::BadParamErr => 0x3,
            CmdStatus::BadSysStateErr => 0x4,
            CmdStatus::BadResErr => 0x5,
            CmdStatus::ResBusy => 0x6,
            CmdStatus::NotReady => 0x7,
            CmdStatus::LimErr => 0x8,
            CmdStatus::BadResStateErr => 0x9,
            CmdStatus::IxErr => 0xa,
            CmdStatus::NoResErr => 0xf,
            CmdStatus::BadQpStateErr => 0x10,
            CmdStatus::BadPktErr => 0x30,
            CmdStatus::BadSizeOutsCqesErr => 0x40,
            CmdStatus::BadInpLenErr => 0x50,
            CmdStatus::BadOutpLenErr => 0x51,
            CmdStatus::Unknown(raw) => raw,
        }
    }

    /// The status for a status byte.
    pub fn from_raw(raw: u8) -> Self {
        CmdStatus::KNOWN
            .iter()
            .copied()
            .find(|s| s.raw() == raw)
            .unwrap_or(CmdStatus::Unknown(raw))
    }

    /// The header's name without its `MLX5_CMD_STAT_` prefix
    /// (`"BAD_PARAM_ERR"`), or `"UNKNOWN"`.
    pub fn name(self) -> &'static str {
        match self {
            CmdStatus::Ok => "OK",
            CmdStatus::IntErr => "INT_ERR",
            CmdStatus::BadOpErr => "BAD_OP_ERR",
            CmdStatus::BadParamErr => "BAD_PARAM_ERR",
            CmdStatus::BadSysStateErr => "BAD_SYS_STATE_ERR",
            CmdStatus::BadResErr => "BAD_RES_ERR",
            CmdStatus::ResBusy => "RES_BUSY",
            CmdStatus::NotReady => "NOT_READY",
            CmdStatus::LimErr => "LIM_ERR",
            CmdStatus::BadResStateErr => "BAD_RES_STATE_ERR",
            CmdStatus::IxErr => "IX_ERR",
            CmdStatus::NoResErr => "NO_RES_ERR",
            CmdStatus::BadQpStateErr => "BAD_QP_STATE_ERR",
            CmdStatus::BadPktErr => "BAD_PKT_ERR",
            CmdStatus::BadSizeOutsCqesErr => "BAD_SIZE_OUTS_CQES_ERR",
            CmdStatus::BadInpLenErr => "BAD_INP_LEN_ERR",
            CmdStatus::BadOutpLenErr => "BAD_OUTP_LEN_ERR",
            CmdStatus::Unknown(_) => "UNKNOWN",
        }
    }

    /// The positive Linux errno a failed command with this status maps to,
    /// the same mapping mlx5_core applies (`EIO` for unknown statuses);
    /// 0 for [`CmdStatus::Ok`].
    pub fn errno(self) -> i32 {
        const EIO: i32 = 5;
        const EAGAIN: i32 = 11;
        const ENOMEM: i32 = 12;
        const EBUSY: i32 = 16;
        const EINVAL: i32 = 22;
        match self {
            CmdStatus::Ok => 0,
            CmdStatus::IntErr
            | CmdStatus::BadSysStateErr
            | CmdStatus::BadInpLenErr
            | CmdStatus::BadOutpLenErr
            | CmdStatus::Unknown(_) => EIO,
            CmdStatus::BadOpErr
            | CmdStatus::BadParamErr
            | CmdStatus::BadResErr
            | CmdStatus::BadResStateErr
            | CmdStatus::IxErr
            | CmdStatus::BadQpStateErr
            | CmdStatus::BadPktErr
            | CmdStatus::BadSizeOutsCqesErr => EINVAL,
            CmdStatus::ResBusy => EBUSY,
            CmdStatus::NotReady | CmdStatus::NoResErr => EAGAIN,
            CmdStatus::LimErr => ENOMEM,
        }
    }
}

impl IfcValue for CmdStatus {
    fn write_bits(&self, out: &mut [u8], bit: usize, width: usize) {
        self.raw().write_bits(out, bit, width);
    }

    fn read_bits(b: &[u8], bit: usize, width: usize) -> Self {
        CmdStatus::from_raw(u8::read_bits(b, bit, width))
    }
}

impl fmt::Display for CmdStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({:#x})", self.name(), self.raw())
    }
}

/// Why a command did not succeed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmdError {
    /// The firmware executed the command and failed it: `mbox_out.status`
    /// is not `MLX5_CMD_STAT_OK`.
    Failed {
        /// The command's name ([`opcode_name`]).
        command: &'static str,
        /// The command's opcode.
        opcode: u16,
        /// `mbox_out.status`.
        status: CmdStatus,
        /// `mbox_out.syndrome`.
        syndrome: u32,
    },
    /// The firmware did not execute the command: the queue entry came back
    /// with a non-zero delivery status (`mlx5_cmd_layout.status_own` bits
    /// 7:1).
    Delivery {
        /// The command's name.
        command: &'static str,
        /// The command's opcode.
        opcode: u16,
        /// What went wrong.
        status: DeliveryStatus,
    },
    /// The output buffer is shorter than the command's output layout: a
    /// driver bug (the output length posted was too small).
    ShortOutput {
        /// The command's name.
        command: &'static str,
        /// The command's opcode.
        opcode: u16,
        /// Bytes available.
        len: usize,
        /// Bytes the layout needs.
        need: usize,
    },
}

impl CmdError {
    /// The failure for a raw output header of the command `opcode`: `None`
    /// if `status` is `MLX5_CMD_STAT_OK`.
    pub fn from_status(opcode: u16, status: u8, syndrome: u32) -> Option<Self> {
        let status = CmdStatus::from_raw(status);
        (status != CmdStatus::Ok).then_some(CmdError::Failed {
            command: opcode_name(opcode),
            opcode,
            status,
            syndrome,
        })
    }

    /// The failure for a queue entry of the command `opcode` that came back
    /// with delivery status `status`: `None` if it is
    /// [`DeliveryStatus::Ok`] (then check the output header).
    pub fn from_delivery(opcode: u16, status: DeliveryStatus) -> Option<Self> {
        (status != DeliveryStatus::Ok).then_some(CmdError::Delivery {
            command: opcode_name(opcode),
            opcode,
            status,
        })
    }

    /// The positive Linux errno for this error: the status mapping of
    /// [`CmdStatus::errno`], `EIO` for delivery failures and `EINVAL` for a
    /// short output buffer.
    pub fn errno(&self) -> i32 {
        match self {
            CmdError::Failed { status, .. } => status.errno(),
            CmdError::Delivery { .. } => 5,
            CmdError::ShortOutput { .. } => 22,
        }
    }
}

impl fmt::Display for CmdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CmdError::Failed {
                command,
                opcode,
                status,
                syndrome,
            } => write!(
                f,
                "{command} ({opcode:#x}) failed: status {status}, syndrome {syndrome:#x}"
            ),
            CmdError::Delivery {
                command,
                opcode,
                status,
            } => write!(f, "{command} ({opcode:#x}) not delivered: {status}"),
            CmdError::ShortOutput {
                command,
                opcode,
                len,
                need,
            } => write!(
                f,
                "{command} ({opcode:#x}): output buffer of {len} bytes, need {need}"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::command::{OP_CREATE_CQ, OP_INIT_HCA};
    use super::*;

    #[test]
    fn status_codes_round_trip() {
        for raw in 0..=255u8 {
            let s = CmdStatus::from_raw(raw);
            assert_eq!(s.raw(), raw);
            assert_eq!(
                matches!(s, CmdStatus::Unknown(_)),
                !CmdStatus::KNOWN.contains(&s)
            );
        }
        assert_eq!(CmdStatus::from_raw(3), CmdStatus::BadParamErr);
        assert_eq!(CmdStatus::from_raw(0x51).name(), "BAD_OUTP_LEN_ERR");
        assert_eq!(CmdStatus::from_raw(0x77), CmdStatus::Unknown(0x77));
        assert_eq!(CmdStatus::Unknown(0x77).errno(), 5);
        assert_eq!(CmdStatus::ResBusy.errno(), 16);
    }

    #[test]
    fn errors_name_the_command() {
        let e = CmdError::from_status(OP_CREATE_CQ, 0x5, 0x0102_0304).unwrap();
        assert_eq!(
            e,
            CmdError::Failed {
                command: "CREATE_CQ",
                opcode: 0x400,
                status: CmdStatus::BadResErr,
                syndrome: 0x0102_0304,
            }
        );
        assert_eq!(e.errno(), 22);
        assert_eq!(CmdError::from_status(OP_CREATE_CQ, 0, 0x99), None);
        assert_eq!(
            CmdError::from_delivery(OP_CREATE_CQ, DeliveryStatus::Ok),
            None
        );
        let d = CmdError::from_delivery(OP_INIT_HCA, DeliveryStatus::TokErr).unwrap();
        assert_eq!(d.errno(), 5);
        assert!(matches!(
            d,
            CmdError::Delivery {
                command: "INIT_HCA",
                ..
            }
        ));
    }
}
