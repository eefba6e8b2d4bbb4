// SPDX-License-Identifier: GPL-2.0

//! Commands of the HCA's life cycle: ENABLE_HCA / DISABLE_HCA, QUERY_ISSI /
//! SET_ISSI, QUERY_PAGES / MANAGE_PAGES (the memory the firmware borrows
//! from the host), INIT_HCA / TEARDOWN_HCA.
//!
//! mlx5_core brings a function up in this order: wait for `initializing`
//! to clear, ENABLE_HCA, QUERY_ISSI + SET_ISSI (1), QUERY_PAGES (boot) +
//! MANAGE_PAGES (give), QUERY_HCA_CAP / SET_HCA_CAP (see `hca_cap`),
//! QUERY_PAGES (init) + MANAGE_PAGES, INIT_HCA; and down with TEARDOWN_HCA,
//! MANAGE_PAGES (take back everything), DISABLE_HCA. While the HCA runs, a
//! page-request EQE (see `eqe_async`) asks for more pages or returns some.

use super::command::{command, OP_DISABLE_HCA, OP_ENABLE_HCA, OP_INIT_HCA};
use super::command::{OP_MANAGE_PAGES, OP_QUERY_ISSI, OP_QUERY_PAGES};
use super::command::{OP_SET_ISSI, OP_TEARDOWN_HCA};
use super::ifc::ifc_layout;

/// `query_pages_in.op_mod`: pages the firmware needs to boot
/// (`MLX5_QUERY_PAGES_IN_OP_MOD_BOOT_PAGES`).
pub const QUERY_PAGES_BOOT: u16 = 0x1;
/// `query_pages_in.op_mod`: pages the firmware needs for INIT_HCA
/// (`MLX5_QUERY_PAGES_IN_OP_MOD_INIT_PAGES`).
pub const QUERY_PAGES_INIT: u16 = 0x2;
/// `query_pages_in.op_mod`: pages the firmware needs after INIT_HCA
/// (`MLX5_QUERY_PAGES_IN_OP_MOD_REGULAR_PAGES`).
pub const QUERY_PAGES_REGULAR: u16 = 0x3;

/// `manage_pages_in.op_mod`: the driver could not allocate the pages asked
/// for (`MLX5_MANAGE_PAGES_IN_OP_MOD_ALLOCATION_FAIL`; mlx5_core's
/// `MLX5_PAGES_CANT_GIVE`). No page list.
pub const MANAGE_PAGES_ALLOCATION_FAIL: u16 = 0x0;
/// `manage_pages_in.op_mod`: the driver gives `input_num_entries` pages,
/// listed in the input (`MLX5_MANAGE_PAGES_IN_OP_MOD_ALLOCATION_SUCCESS`;
/// `MLX5_PAGES_GIVE`).
pub const MANAGE_PAGES_ALLOCATION_SUCCESS: u16 = 0x1;
/// `manage_pages_in.op_mod`: the driver asks for up to `input_num_entries`
/// pages back; the output lists `output_num_entries` of them
/// (`MLX5_MANAGE_PAGES_IN_OP_MOD_HCA_RETURN_PAGES`; `MLX5_PAGES_TAKE`).
pub const MANAGE_PAGES_HCA_RETURN_PAGES: u16 = 0x2;

/// `teardown_hca_in.profile`: orderly shutdown
/// (`MLX5_TEARDOWN_HCA_IN_PROFILE_GRACEFUL_CLOSE`).
pub const TEARDOWN_GRACEFUL_CLOSE: u16 = 0x0;
/// `teardown_hca_in.profile`: shutdown without waiting for the device
/// (`MLX5_TEARDOWN_HCA_IN_PROFILE_FORCE_CLOSE`).
pub const TEARDOWN_FORCE_CLOSE: u16 = 0x1;
/// `teardown_hca_in.profile`: prepare for fast teardown
/// (`MLX5_TEARDOWN_HCA_IN_PROFILE_PREPARE_FAST_TEARDOWN`).
pub const TEARDOWN_PREPARE_FAST_TEARDOWN: u16 = 0x2;

/// The interface step (ISSI) these layouts follow; mlx5_core selects 1
/// when `query_issi_out.supported_issi_dw0` has bit 1 set, and stays at 0
/// otherwise.
pub const ISSI: u16 = 1;

ifc_layout! {
    /// ENABLE_HCA input: start the function (the PF itself, or a VF/SF
    /// through the PF).
    pub struct EnableHcaIn = "enable_hca_in", bits 0x80, opcode OP_ENABLE_HCA {
        /// The function is the embedded CPU's (SmartNIC); `false` for the
        /// host's own.
        embedded_cpu_function: bool = [0x40, 1],
        /// `function_id` is a vHCA id rather than a function number.
        function_id_type: bool = [0x43, 1],
        /// The function, 0 for the PF itself.
        function_id: u16 = [0x50, 0x10],
    }
}

ifc_layout! {
    /// ENABLE_HCA output: the header only.
    pub struct EnableHcaOut = "enable_hca_out", bits 0x60 {}
}

ifc_layout! {
    /// DISABLE_HCA input: stop the function (after TEARDOWN_HCA and
    /// reclaiming its pages).
    pub struct DisableHcaIn = "disable_hca_in", bits 0x80, opcode OP_DISABLE_HCA {
        /// As in [`EnableHcaIn`].
        embedded_cpu_function: bool = [0x40, 1],
        /// As in [`EnableHcaIn`].
        function_id_type: bool = [0x43, 1],
        /// The function, 0 for the PF itself.
        function_id: u16 = [0x50, 0x10],
    }
}

ifc_layout! {
    /// DISABLE_HCA output: the header only.
    pub struct DisableHcaOut = "disable_hca_out", bits 0x60 {}
}

ifc_layout! {
    /// QUERY_ISSI input: no parameters.
    pub struct QueryIssiIn = "query_issi_in", bits 0x80, opcode OP_QUERY_ISSI {}
}

ifc_layout! {
    /// QUERY_ISSI output.
    pub struct QueryIssiOut = "query_issi_out", bits 0x380 {
        /// The ISSI in force.
        current_issi: u16 = [0x50, 0x10],
        /// Bit `n` set: ISSI `n` is supported (ISSIs 0..31).
        supported_issi_dw0: u32 = [0x360, 0x20],
    }
}

ifc_layout! {
    /// SET_ISSI input.
    pub struct SetIssiIn = "set_issi_in", bits 0x80, opcode OP_SET_ISSI {
        /// The ISSI to use ([`ISSI`]).
        current_issi: u16 = [0x50, 0x10],
    }
}

ifc_layout! {
    /// SET_ISSI output: the header only.
    pub struct SetIssiOut = "set_issi_out", bits 0x80 {}
}

ifc_layout! {
    /// QUERY_PAGES input: how many pages does the firmware want now?
    pub struct QueryPagesIn = "query_pages_in", bits 0x80, opcode OP_QUERY_PAGES {
        /// Which stage (`QUERY_PAGES_*`).
        op_mod: u16 = [0x30, 0x10],
        /// The function is the embedded CPU's.
        embedded_cpu_function: bool = [0x40, 1],
        /// The function, 0 for the PF itself.
        function_id: u16 = [0x50, 0x10],
    }
}

ifc_layout! {
    /// QUERY_PAGES output.
    pub struct QueryPagesOut = "query_pages_out", bits 0x80 {
        /// The function is the embedded CPU's.
        embedded_cpu_function: bool = [0x40, 1],
        /// The function (vHCA id when the HCA manages pages by vHCA id).
        function_id: u16 = [0x50, 0x10],
        /// Pages (4 KiB each) to give; negative: pages the driver may take
        /// back.
        num_pages: i32 = [0x60, 0x20],
    }
}

ifc_layout! {
    /// MANAGE_PAGES input, followed when giving pages by
    /// `input_num_entries` 64-bit page addresses (4 KiB aligned).
    pub struct ManagePagesIn = "manage_pages_in", bits 0x80, opcode OP_MANAGE_PAGES {
        /// Give, take, or report failure (`MANAGE_PAGES_*`).
        op_mod: u16 = [0x30, 0x10],
        /// The function is the embedded CPU's.
        embedded_cpu_function: bool = [0x40, 1],
        /// The function the pages are for.
        function_id: u16 = [0x50, 0x10],
        /// Pages listed (give) or asked back (take).
        input_num_entries: u32 = [0x60, 0x20],
    }
}

ifc_layout! {
    /// MANAGE_PAGES output, followed when taking pages back by
    /// `output_num_entries` 64-bit page addresses.
    pub struct ManagePagesOut = "manage_pages_out", bits 0x80 {
        /// Pages returned.
        output_num_entries: u32 = [0x40, 0x20],
    }
}

ifc_layout! {
    /// INIT_HCA input: bring the HCA to the initialised state, after the
    /// capabilities are set and the init pages given.
    pub struct InitHcaIn = "init_hca_in", bits 0x100, opcode OP_INIT_HCA {
        /// Software-chosen vHCA id (only with `cmd_hca_cap_2` support; 0
        /// otherwise), 14 bits.
        sw_vhca_id: u16 = [0x62, 0xe],
        /// A 128-bit id of the driver instance, four dwords (only when
        /// `cmd_hca_cap.sw_owner_id`; used for steering ownership).
        sw_owner_id: [u32; 4] = [0x80, 0x20],
    }
}

ifc_layout! {
    /// INIT_HCA output: the header only.
    pub struct InitHcaOut = "init_hca_out", bits 0x80 {}
}

ifc_layout! {
    /// TEARDOWN_HCA input: leave the initialised state.
    pub struct TeardownHcaIn = "teardown_hca_in", bits 0x80, opcode OP_TEARDOWN_HCA {
        /// How (`TEARDOWN_*`).
        profile: u16 = [0x50, 0x10],
    }
}

ifc_layout! {
    /// TEARDOWN_HCA output.
    pub struct TeardownHcaOut = "teardown_hca_out", bits 0x80 {
        /// With [`TEARDOWN_FORCE_CLOSE`]: set if the forced close failed
        /// (`MLX5_TEARDOWN_HCA_OUT_FORCE_STATE_FAIL`).
        state: bool = [0x7f, 1],
    }
}

command! {
    /// ENABLE_HCA (`MLX5_CMD_OP_ENABLE_HCA`, 0x104).
    pub struct EnableHca: OP_ENABLE_HCA, "ENABLE_HCA", EnableHcaIn => EnableHcaOut;
}

command! {
    /// DISABLE_HCA (`MLX5_CMD_OP_DISABLE_HCA`, 0x105).
    pub struct DisableHca: OP_DISABLE_HCA, "DISABLE_HCA", DisableHcaIn => DisableHcaOut;
}

command! {
    /// QUERY_ISSI (`MLX5_CMD_OP_QUERY_ISSI`, 0x10a).
    pub struct QueryIssi: OP_QUERY_ISSI, "QUERY_ISSI", QueryIssiIn => QueryIssiOut;
}

command! {
    /// SET_ISSI (`MLX5_CMD_OP_SET_ISSI`, 0x10b).
    pub struct SetIssi: OP_SET_ISSI, "SET_ISSI", SetIssiIn => SetIssiOut;
}

command! {
    /// QUERY_PAGES (`MLX5_CMD_OP_QUERY_PAGES`, 0x107).
    pub struct QueryPages: OP_QUERY_PAGES, "QUERY_PAGES", QueryPagesIn => QueryPagesOut;
}

command! {
    /// MANAGE_PAGES (`MLX5_CMD_OP_MANAGE_PAGES`, 0x108): the input carries
    /// a page list when giving, the output when taking.
    pub struct ManagePages: OP_MANAGE_PAGES, "MANAGE_PAGES", ManagePagesIn => ManagePagesOut,
        in_pas true, out_pas true;
}

command! {
    /// INIT_HCA (`MLX5_CMD_OP_INIT_HCA`, 0x102).
    pub struct InitHca: OP_INIT_HCA, "INIT_HCA", InitHcaIn => InitHcaOut;
}

command! {
    /// TEARDOWN_HCA (`MLX5_CMD_OP_TEARDOWN_HCA`, 0x103).
    pub struct TeardownHca: OP_TEARDOWN_HCA, "TEARDOWN_HCA", TeardownHcaIn => TeardownHcaOut;
}

#[cfg(test)]
mod tests {
    use super::super::cmd_status::{CmdError, CmdStatus};
    use super::super::command::{self, Command};
    use super::super::error::Error;
    use super::super::ifc::{pas, Layout};
    use super::*;

    #[test]
    fn enable_hca_known_bytes() {
        let mut b = [0xffu8; 16];
        EnableHcaIn {
            embedded_cpu_function: true,
            function_id_type: false,
            function_id: 0x1234,
        }
        .encode(&mut b)
        .unwrap();
        assert_eq!(b, [1, 4, 0, 0, 0, 0, 0, 0, 0x80, 0, 0x12, 0x34, 0, 0, 0, 0]);
        assert_eq!(EnableHcaOut::SIZE, 12);
        assert_eq!(<EnableHca as Command>::NAME, "ENABLE_HCA");
    }

    #[test]
    fn give_pages() {
        let input = ManagePagesIn {
            op_mod: MANAGE_PAGES_ALLOCATION_SUCCESS,
            embedded_cpu_function: false,
            function_id: 0,
            input_num_entries: 2,
        };
        let mut msg = [0u8; 32];
        let len = command::encode_in::<ManagePages>(&input, &[0x1000, 0x5000], &mut msg);
        assert_eq!(len, Ok(32));
        assert_eq!(msg[..8], [1, 8, 0, 0, 0, 0, 0, 1]);
        assert_eq!(msg[12..16], [0, 0, 0, 2]);
        assert_eq!(msg[16..24], [0, 0, 0, 0, 0, 0, 0x10, 0]);
        assert_eq!(ManagePagesIn::decode(&msg), Ok(input));
        let mut it = pas(&msg, ManagePagesIn::SIZE, 2).unwrap();
        assert_eq!(
            (it.next(), it.next(), it.next()),
            (Some(0x1000), Some(0x5000), None)
        );
        // Too small a buffer, and a page list for a command without one.
        assert_eq!(
            command::encode_in::<ManagePages>(&input, &[1, 2], &mut msg[..31]),
            Err(Error::OutOfRange)
        );
        assert_eq!(
            command::encode_in::<QueryPages>(&QueryPagesIn::default(), &[1], &mut msg),
            Err(Error::OutOfRange)
        );
    }

    #[test]
    fn query_pages_reply() {
        let mut out = [0u8; 16];
        out[12..16].copy_from_slice(&(-7i32).to_be_bytes());
        out[10..12].copy_from_slice(&[0, 3]);
        let r = command::decode_out::<QueryPages>(&out).unwrap();
        assert_eq!(r.num_pages, -7);
        assert_eq!(r.function_id, 3);
        out[0] = 0x4;
        out[4..8].copy_from_slice(&[0, 0, 0, 9]);
        assert_eq!(
            command::decode_out::<QueryPages>(&out),
            Err(CmdError::Failed {
                command: "QUERY_PAGES",
                opcode: 0x107,
                status: CmdStatus::BadSysStateErr,
                syndrome: 9,
            })
        );
        out[0] = 0;
        assert!(matches!(
            command::decode_out::<QueryPages>(&out[..12]),
            Err(CmdError::ShortOutput { need: 16, .. })
        ));
    }

    #[test]
    fn init_hca_owner_id() {
        let mut b = [0u8; 32];
        InitHcaIn {
            sw_vhca_id: 0xffff,
            sw_owner_id: [1, 2, 3, 0xdead_beef],
        }
        .encode(&mut b)
        .unwrap();
        assert_eq!(b[..2], [1, 2]);
        assert_eq!(b[12..16], [0x3f, 0xff, 0, 0]);
        assert_eq!(b[28..32], [0xde, 0xad, 0xbe, 0xef]);
    }
}
