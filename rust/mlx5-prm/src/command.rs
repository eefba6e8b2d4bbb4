// SPDX-License-Identifier: GPL-2.0

//! Firmware commands: the generic input and output headers, the opcodes,
//! the [`Command`] trait that ties an opcode to its input and output
//! layouts, and the helpers that build an input and check an output (the
//! status codes and errors are in `cmd_status`).
//!
//! Every command input starts with the 16-byte `mbox_in` header (opcode,
//! uid, op_mod) and every output with the 16-byte `mbox_out` header
//! (status, syndrome); the command-specific fields follow in the same
//! layout. A command is a type implementing [`Command`]:
//!
//! ```
//! use mlx5_prm::cmd_hca::{QueryIssi, QueryIssiIn};
//! use mlx5_prm::command;
//! use mlx5_prm::ifc::Layout;
//!
//! let mut msg = [0u8; QueryIssiIn::SIZE];
//! let len = command::encode_in::<QueryIssi>(&QueryIssiIn::default(), &[], &mut msg).unwrap();
//! assert_eq!(msg[..len], [0x01, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
//! // ... post `msg[..len]` through the command queue; the device replies:
//! let mut reply = [0u8; 112];
//! reply[10..12].copy_from_slice(&[0, 1]);
//! let out = command::decode_out::<QueryIssi>(&reply).unwrap();
//! assert_eq!(out.current_issi, 1);
//! ```
//!
//! The commands themselves are declared next to their contexts:
//! `cmd_hca` (HCA life cycle, ISSI, pages), `hca_cap` (capabilities),
//! `cmd_res` (UAR, PD, memory keys), `cmd_eq`, `cmd_cq`, `cmd_qp` and
//! `cmd_vport` (port identity: vport contexts and GIDs).

use super::cmd_status::{CmdError, CmdStatus};
use super::error::Error;
use super::ifc::{ifc_layout, put_pas, Layout};

/// Size of the generic command input header (`MLX5_ST_SZ_BYTES(mbox_in)`).
pub const IN_HEADER_SIZE: usize = 16;
/// Size of the generic command output header (`MLX5_ST_SZ_BYTES(mbox_out)`).
pub const OUT_HEADER_SIZE: usize = 16;
/// Bytes of an output that carry the status (byte 0) and the syndrome
/// (bytes 4..8): the least any command returns.
pub const OUT_STATUS_SIZE: usize = 8;

/// `MLX5_CMD_OP_QUERY_HCA_CAP`.
pub const OP_QUERY_HCA_CAP: u16 = 0x100;
/// `MLX5_CMD_OP_INIT_HCA`.
pub const OP_INIT_HCA: u16 = 0x102;
/// `MLX5_CMD_OP_TEARDOWN_HCA`.
pub const OP_TEARDOWN_HCA: u16 = 0x103;
/// `MLX5_CMD_OP_ENABLE_HCA`.
pub const OP_ENABLE_HCA: u16 = 0x104;
/// `MLX5_CMD_OP_DISABLE_HCA`.
pub const OP_DISABLE_HCA: u16 = 0x105;
/// `MLX5_CMD_OP_QUERY_PAGES`.
pub const OP_QUERY_PAGES: u16 = 0x107;
/// `MLX5_CMD_OP_MANAGE_PAGES`.
pub const OP_MANAGE_PAGES: u16 = 0x108;
/// `MLX5_CMD_OP_SET_HCA_CAP`.
pub const OP_SET_HCA_CAP: u16 = 0x109;
/// `MLX5_CMD_OP_QUERY_ISSI`.
pub const OP_QUERY_ISSI: u16 = 0x10a;
/// `MLX5_CMD_OP_SET_ISSI`.
pub const OP_SET_ISSI: u16 = 0x10b;
/// `MLX5_CMD_OP_CREATE_MKEY`.
pub const OP_CREATE_MKEY: u16 = 0x200;
/// `MLX5_CMD_OP_DESTROY_MKEY`.
pub const OP_DESTROY_MKEY: u16 = 0x202;
/// `MLX5_CMD_OP_CREATE_EQ`.
pub const OP_CREATE_EQ: u16 = 0x301;
/// `MLX5_CMD_OP_DESTROY_EQ`.
pub const OP_DESTROY_EQ: u16 = 0x302;
/// `MLX5_CMD_OP_CREATE_CQ`.
pub const OP_CREATE_CQ: u16 = 0x400;
/// `MLX5_CMD_OP_DESTROY_CQ`.
pub const OP_DESTROY_CQ: u16 = 0x401;
/// `MLX5_CMD_OP_CREATE_QP`.
pub const OP_CREATE_QP: u16 = 0x500;
/// `MLX5_CMD_OP_DESTROY_QP`.
pub const OP_DESTROY_QP: u16 = 0x501;
/// `MLX5_CMD_OP_RST2INIT_QP`.
pub const OP_RST2INIT_QP: u16 = 0x502;
/// `MLX5_CMD_OP_INIT2RTR_QP`.
pub const OP_INIT2RTR_QP: u16 = 0x503;
/// `MLX5_CMD_OP_RTR2RTS_QP`.
pub const OP_RTR2RTS_QP: u16 = 0x504;
/// `MLX5_CMD_OP_2ERR_QP`.
pub const OP_2ERR_QP: u16 = 0x507;
/// `MLX5_CMD_OP_2RST_QP`.
pub const OP_2RST_QP: u16 = 0x50a;
/// `MLX5_CMD_OP_QUERY_QP`.
pub const OP_QUERY_QP: u16 = 0x50b;
/// `MLX5_CMD_OP_INIT2INIT_QP`.
pub const OP_INIT2INIT_QP: u16 = 0x50e;
/// `MLX5_CMD_OP_QUERY_NIC_VPORT_CONTEXT`.
pub const OP_QUERY_NIC_VPORT_CONTEXT: u16 = 0x754;
/// `MLX5_CMD_OP_QUERY_HCA_VPORT_CONTEXT`.
pub const OP_QUERY_HCA_VPORT_CONTEXT: u16 = 0x762;
/// `MLX5_CMD_OP_QUERY_HCA_VPORT_GID`.
pub const OP_QUERY_HCA_VPORT_GID: u16 = 0x764;
/// `MLX5_CMD_OP_ALLOC_PD`.
pub const OP_ALLOC_PD: u16 = 0x800;
/// `MLX5_CMD_OP_DEALLOC_PD`.
pub const OP_DEALLOC_PD: u16 = 0x801;
/// `MLX5_CMD_OP_ALLOC_UAR`.
pub const OP_ALLOC_UAR: u16 = 0x802;
/// `MLX5_CMD_OP_DEALLOC_UAR`.
pub const OP_DEALLOC_UAR: u16 = 0x803;

/// Every opcode this crate models with its name (the `MLX5_CMD_OP_` suffix,
/// as mlx5_core prints it), in opcode order.
pub const OPCODES: &[(u16, &str)] = &[
    (OP_QUERY_HCA_CAP, "QUERY_HCA_CAP"),
    (OP_INIT_HCA, "INIT_HCA"),
    (OP_TEARDOWN_HCA, "TEARDOWN_HCA"),
    (OP_ENABLE_HCA, "ENABLE_HCA"),
    (OP_DISABLE_HCA, "DISABLE_HCA"),
    (OP_QUERY_PAGES, "QUERY_PAGES"),
    (OP_MANAGE_PAGES, "MANAGE_PAGES"),
    (OP_SET_HCA_CAP, "SET_HCA_CAP"),
    (OP_QUERY_ISSI, "QUERY_ISSI"),
    (OP_SET_ISSI, "SET_ISSI"),
    (OP_CREATE_MKEY, "CREATE_MKEY"),
    (OP_DESTROY_MKEY, "DESTROY_MKEY"),
    (OP_CREATE_EQ, "CREATE_EQ"),
    (OP_DESTROY_EQ, "DESTROY_EQ"),
    (OP_CREATE_CQ, "CREATE_CQ"),
    (OP_DESTROY_CQ, "DESTROY_CQ"),
    (OP_CREATE_QP, "CREATE_QP"),
    (OP_DESTROY_QP, "DESTROY_QP"),
    (OP_RST2INIT_QP, "RST2INIT_QP"),
    (OP_INIT2RTR_QP, "INIT2RTR_QP"),
    (OP_RTR2RTS_QP, "RTR2RTS_QP"),
    (OP_2ERR_QP, "2ERR_QP"),
    (OP_2RST_QP, "2RST_QP"),
    (OP_QUERY_QP, "QUERY_QP"),
    (OP_INIT2INIT_QP, "INIT2INIT_QP"),
    (OP_QUERY_NIC_VPORT_CONTEXT, "QUERY_NIC_VPORT_CONTEXT"),
    (OP_QUERY_HCA_VPORT_CONTEXT, "QUERY_HCA_VPORT_CONTEXT"),
    (OP_QUERY_HCA_VPORT_GID, "QUERY_HCA_VPORT_GID"),
    (OP_ALLOC_PD, "ALLOC_PD"),
    (OP_DEALLOC_PD, "DEALLOC_PD"),
    (OP_ALLOC_UAR, "ALLOC_UAR"),
    (OP_DEALLOC_UAR, "DEALLOC_UAR"),
];

/// The name of a command opcode for log messages, or `"unknown command"`
/// for an opcode this crate does not model.
pub fn opcode_name(opcode: u16) -> &'static str {
    OPCODES
        .iter()
        .find(|(op, _)| *op == opcode)
        .map_or("unknown command", |(_, name)| name)
}

ifc_layout! {
    /// The generic command input header (`struct mlx5_ifc_mbox_in_bits`,
    /// declared in mlx5_core's cmd.c): the first 16 bytes of every command
    /// input. Read it to dispatch on a raw input; the command layouts write
    /// it themselves.
    pub struct InHeader = "mbox_in", bits 0x80 {
        /// The command (`OP_*`).
        opcode: u16 = [0x0, 0x10],
        /// The user context the command acts for; 0 (the kernel) for every
        /// command this crate builds.
        uid: u16 = [0x10, 0x10],
        /// The command's operation modifier (meaning per command).
        op_mod: u16 = [0x30, 0x10],
    }
}

ifc_layout! {
    /// The generic command output header (`struct mlx5_ifc_mbox_out_bits`,
    /// declared in mlx5_core's cmd.c): the first 16 bytes of every command
    /// output.
    pub struct OutHeader = "mbox_out", bits 0x80 {
        /// How the command ended (`MLX5_CMD_STAT_*`).
        status: CmdStatus = [0x0, 0x8],
        /// Firmware-specific detail of a failure, for the log (and for
        /// Mellanox support); 0 on success.
        syndrome: u32 = [0x20, 0x20],
    }
}

/// A firmware command: its opcode, name, and input and output layouts.
///
/// Implemented by one unit struct per command (`CreateQp`, `QueryHcaCap`,
/// ...). The input layout writes the opcode itself; the output layout
/// starts with the generic [`OutHeader`].
pub trait Command {
    /// `MLX5_CMD_OP_*`.
    const OPCODE: u16;
    /// The command's name for log messages (the `MLX5_CMD_OP_` suffix).
    const NAME: &'static str;
    /// The fixed part of the input, header included.
    type In: Layout;
    /// The fixed part of the output, header included.
    type Out: Layout;
    /// Whether the input ends with a page-address list (`pas`) at byte
    /// `In::SIZE` (see [`encode_in`]).
    const IN_PAS: bool = false;
    /// Whether the output ends with a page-address list at byte `Out::SIZE`
    /// (MANAGE_PAGES when it returns pages).
    const OUT_PAS: bool = false;
}

/// Declares a unit struct for a command and its [`Command`] implementation.
macro_rules! command {
    (
        $(#[$meta:meta])*
        pub struct $name:ident: $op:ident, $opname:literal, $in:ty => $out:ty
        $(, in_pas $in_pas:literal)? $(, out_pas $out_pas:literal)?;
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct $name;

        impl super::command::Command for $name {
            const OPCODE: u16 = super::command::$op;
            const NAME: &'static str = $opname;
            type In = $in;
            type Out = $out;
            $( const IN_PAS: bool = $in_pas; )?
            $( const OUT_PAS: bool = $out_pas; )?
        }
    };
}

pub(crate) use command;

/// The length of the input of `C` with `npas` page-address entries.
pub fn in_len<C: Command>(npas: usize) -> usize {
    <C::In as Layout>::SIZE.saturating_add(npas.saturating_mul(super::ifc::PAS_ENTRY_SIZE))
}

/// Writes the input of command `C` into `out`: the fixed part, followed by
/// `pas` if the command takes a page-address list. Returns the input length
/// to post (`mlx5_cmd_layout.inlen`).
///
/// # Errors
///
/// [`Error::OutOfRange`] if `out` is too short, or if `pas` is not empty
/// and `C` takes no page list.
pub fn encode_in<C: Command>(input: &C::In, pas: &[u64], out: &mut [u8]) -> Result<usize, Error> {
    if !C::IN_PAS && !pas.is_empty() {
        return Err(Error::OutOfRange);
    }
    let size = <C::In as Layout>::SIZE;
    if out.len() < in_len::<C>(pas.len()) {
        return Err(Error::OutOfRange);
    }
    input.encode(out)?;
    put_pas(out, size, pas)
}

/// Checks the output header of command `C`.
///
/// # Errors
///
/// [`CmdError::ShortOutput`] if `out` is shorter than status and syndrome
/// ([`OUT_STATUS_SIZE`]), [`CmdError::Failed`] if the status is not
/// `MLX5_CMD_STAT_OK`.
pub fn check<C: Command>(out: &[u8]) -> Result<(), CmdError> {
    // Status and syndrome are the first 8 bytes; some outputs (ENABLE_HCA,
    // DISABLE_HCA: 12 bytes) are shorter than the 16-byte `mbox_out`.
    let short = CmdError::ShortOutput {
        command: C::NAME,
        opcode: C::OPCODE,
        len: out.len(),
        need: OUT_STATUS_SIZE,
    };
    let mut padded = [0u8; OUT_HEADER_SIZE];
    let n = out.len().min(OUT_HEADER_SIZE);
    match (padded.get_mut(..n), out.get(..n)) {
        (Some(dst), Some(src)) if n >= OUT_STATUS_SIZE => dst.copy_from_slice(src),
        _ => return Err(short),
    }
    let header = OutHeader::decode(&padded).map_err(|_| short)?;
    if header.status == CmdStatus::Ok {
        Ok(())
    } else {
        Err(CmdError::Failed {
            command: C::NAME,
            opcode: C::OPCODE,
            status: header.status,
            syndrome: header.syndrome,
        })
    }
}

/// Checks the output of command `C` ([`check`]) and decodes it.
///
/// # Errors
///
/// As [`check`], and [`CmdError::ShortOutput`] if `out` is shorter than the
/// command's output layout.
pub fn decode_out<C: Command>(out: &[u8]) -> Result<C::Out, CmdError> {
    check::<C>(out)?;
    C::Out::decode(out).map_err(|_| CmdError::ShortOutput {
        command: C::NAME,
        opcode: C::OPCODE,
        len: out.len(),
        need: <C::Out as Layout>::SIZE,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twelve_byte_outputs_check_and_decode() {
        use super::super::cmd_hca::{DisableHca, EnableHca};
        let ok = [0u8; 12];
        assert!(check::<EnableHca>(&ok).is_ok());
        assert!(decode_out::<DisableHca>(&ok).is_ok());
        let mut bad = [0u8; 12];
        bad[0] = 0x03;
        bad[4..8].copy_from_slice(&0x1234_5678u32.to_be_bytes());
        let syndrome = match check::<EnableHca>(&bad) {
            Err(CmdError::Failed { syndrome, .. }) => syndrome,
            other => panic!("{other:?}"),
        };
        assert_eq!(syndrome, 0x1234_5678);
        let need = match check::<EnableHca>(&ok[..7]) {
            Err(CmdError::ShortOutput { need, .. }) => need,
            other => panic!("{other:?}"),
        };
        assert_eq!(need, OUT_STATUS_SIZE);
    }

    #[test]
    fn headers_known_bytes() {
        let h = InHeader {
            opcode: OP_CREATE_QP,
            uid: 0x1234,
            op_mod: 0xabcd,
        };
        let mut b = [0xffu8; 16];
        h.encode(&mut b).unwrap();
        assert_eq!(
            b,
            [5, 0, 0x12, 0x34, 0, 0, 0xab, 0xcd, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(InHeader::decode(&b), Ok(h));
        let o = OutHeader {
            status: CmdStatus::BadParamErr,
            syndrome: 0xdead_beef,
        };
        o.encode(&mut b).unwrap();
        assert_eq!(
            b,
            [3, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(OutHeader::decode(&b), Ok(o));
        assert_eq!(OutHeader::decode(&b[..15]), Err(Error::OutOfRange));
        assert_eq!(o.encode(&mut [0u8; 8]), Err(Error::OutOfRange));
    }

    #[test]
    fn opcode_names() {
        assert_eq!(opcode_name(0x500), "CREATE_QP");
        assert_eq!(opcode_name(0x10b), "SET_ISSI");
        assert_eq!(opcode_name(0xffff), "unknown command");
        // Strictly increasing, so no opcode is listed twice.
        for pair in OPCODES.windows(2) {
            assert!(pair[0].0 < pair[1].0, "{pair:?}");
        }
    }
}
