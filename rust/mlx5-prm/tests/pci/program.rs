// SPDX-License-Identifier: GPL-2.0

//! The C program of `pci_commands.rs`: the stand-in header, mlx5_ifc.h, the
//! definitions lifted from the kernel tree, the kernel functions' vectors,
//! and a `main` that prints every case.

use std::fmt::Write as _;
use std::path::Path;

use crate::cases::{layout_cases, struct_cases};
use crate::constants::constants;
use crate::lift::{emit_aggregate, enumerators, find_define, find_enum_declaring, find_function};
use crate::{source, IFC_H};

/// What each kernel file contributes to the program, in order.
struct Lift {
    file: &'static str,
    /// Enumerators whose whole enum is lifted.
    enums_declaring: &'static [&'static str],
    defines: &'static [&'static str],
    structs: &'static [&'static str],
    unions: &'static [&'static str],
    functions: &'static [&'static str],
}

/// Lifted before `ifc_shim_post.h`.
const LIFTS: &[Lift] = &[
    Lift {
        file: "drivers/net/ethernet/mellanox/mlx5/core/cmd.c",
        enums_declaring: &["CMD_IF_REV", "MLX5_CMD_DELIVERY_STAT_OK"],
        defines: &[],
        structs: &["mlx5_ifc_mbox_out_bits", "mlx5_ifc_mbox_in_bits"],
        unions: &[],
        functions: &[],
    },
    Lift {
        file: "include/linux/mlx5/device.h",
        enums_declaring: &[
            "MLX5_CMD_DATA_BLOCK_SIZE",
            "MLX5_CMD_STAT_OK",
            "MLX5_EVENT_TYPE_CMD",
            "MLX5_PORT_CHANGE_SUBTYPE_DOWN",
            "MLX5_FW_RESET_SUPPORTED_OFFSET",
            "MLX5_NIC_IFC_OFFSET",
            "MLX5_RFR_BIT_OFFSET",
            "MLX5_MIN_PKEY_TABLE_SIZE",
            "MLX5_ADAPTER_PAGE_SHIFT",
            "HCA_CAP_OPMOD_GET_MAX",
            "MLX5_CAP_GENERAL",
            "MLX5_NVPRT_LIST_TYPE_UC",
        ],
        defines: &[
            "__mlx5_nullp",
            "__mlx5_bit_sz",
            "__mlx5_bit_off",
            "__mlx5_dw_off",
            "__mlx5_64_off",
            "__mlx5_dw_bit_off",
            "__mlx5_mask",
            "__mlx5_dw_mask",
            "__mlx5_st_sz_bits",
            "MLX5_FLD_SZ_BYTES",
            "MLX5_ST_SZ_BYTES",
            "MLX5_UN_SZ_BYTES",
            "MLX5_BYTE_OFF",
            "MLX5_ADDR_OF",
            "MLX5_SET",
            "MLX5_GET",
            "__MLX5_SET64",
            "MLX5_SET64",
            "MLX5_GET64",
        ],
        structs: &[
            "mlx5_cmd_layout",
            "mlx5_cmd_prot_block",
            "health_buffer",
            "mlx5_init_seg",
            "mlx5_eqe",
        ],
        unions: &[],
        functions: &["mlx5_to_sw_pkey_sz"],
    },
    Lift {
        file: "include/linux/mlx5/driver.h",
        enums_declaring: &["CMD_OWNER_SW", "MLX5_POLICY_DOWN"],
        defines: &[],
        structs: &["mlx5_cmd_first"],
        unions: &[],
        functions: &[],
    },
    Lift {
        file: "include/linux/mlx5/qp.h",
        enums_declaring: &[
            "MLX5_QP_OPTPAR_RRE",
            "MLX5_QP_STATE_RST",
            "MLX5_QP_PM_MIGRATED",
            "MLX5_NON_ZERO_RQ",
        ],
        defines: &[],
        structs: &[],
        unions: &[],
        functions: &[],
    },
    Lift {
        file: "include/rdma/ib_verbs.h",
        enums_declaring: &["IB_QPS_RESET", "IB_PORT_NOP", "IB_PORT_PHYS_STATE_SLEEP"],
        defines: &[],
        structs: &[],
        unions: &[],
        functions: &[],
    },
    Lift {
        file: "include/rdma/ib_mad.h",
        enums_declaring: &["IB_PORT_SM"],
        defines: &[],
        structs: &[],
        unions: &[],
        functions: &[],
    },
    Lift {
        file: "drivers/infiniband/hw/mlx5/qp.c",
        enums_declaring: &[],
        defines: &[],
        structs: &[],
        unions: &[],
        functions: &["to_mlx5_state", "to_ib_qp_state"],
    },
    Lift {
        file: "drivers/net/ethernet/mellanox/mlx5/core/pagealloc.c",
        enums_declaring: &["EC_FUNCTION_MASK", "MLX5_PAGES_CANT_GIVE"],
        defines: &[],
        structs: &[],
        unions: &[],
        functions: &[],
    },
];

/// Lifted after `ifc_shim_post.h` (they use `struct mlx5_core_dev` or
/// `struct mlx5_cmd_msg`).
const LIFTS_POST: &[Lift] = &[
    Lift {
        file: "include/linux/mlx5/driver.h",
        enums_declaring: &[],
        defines: &[],
        structs: &[],
        unions: &[],
        functions: &[
            "fw_rev_maj",
            "fw_rev_min",
            "fw_rev_sub",
            "mlx5_get_gid_table_len",
        ],
    },
    Lift {
        file: "drivers/net/ethernet/mellanox/mlx5/core/cmd.c",
        enums_declaring: &[],
        defines: &[],
        structs: &[],
        unions: &[],
        functions: &[
            "mlx5_calc_cmd_blocks",
            "xor8_buf",
            "verify_block_sig",
            "calc_block_sig",
            "cmdif_rev",
            "cmd_status_to_err",
        ],
    },
];

fn lift(ksrc: &Path, lifts: &[Lift], c: &mut String, done: &mut Vec<String>) {
    for l in lifts {
        let text = source(ksrc, l.file);
        let _ = writeln!(c, "\n/* ---- lifted from {} ---- */", l.file);
        for ident in l.enums_declaring {
            let block = find_enum_declaring(&text, ident);
            assert!(enumerators(&block).iter().any(|e| e == ident));
            c.push_str(&block);
            c.push_str("\n\n");
        }
        for name in l.defines {
            c.push_str(&find_define(&text, name));
            c.push('\n');
        }
        for name in l.structs {
            emit_aggregate(&text, "struct", name, c, done);
        }
        for name in l.unions {
            emit_aggregate(&text, "union", name, c, done);
        }
        for name in l.functions {
            c.push_str(&find_function(&text, name));
            c.push_str("\n\n");
        }
    }
}

/// Vectors the lifted kernel functions compute.
const VECTORS: &str = r#"
static void vectors(void)
{
	for (int i = 0; i < 1000; i++) {
		u32 a = (u32)rnd(), b = (u32)rnd();

		init_seg.fw_rev = cpu_to_be32(a);
		init_seg.cmdif_rev_fw_sub = cpu_to_be32(b);
		printf("fwrev %x %x %x %x %x %x\n", a, b, fw_rev_maj(&core_dev),
		       fw_rev_min(&core_dev), fw_rev_sub(&core_dev), cmdif_rev(&core_dev));
	}
	for (u32 len = 0; len <= 3000; len++) {
		struct mlx5_cmd_msg msg = { .len = len };

		printf("blocks %x %x\n", len, mlx5_calc_cmd_blocks(&msg));
	}
	for (int i = 0; i < 300; i++) {
		struct mlx5_cmd_prot_block blk;
		unsigned char *p = (unsigned char *)&blk;
		int ok_before, ok_after, ok_flipped;
		size_t at = rnd() % sizeof(blk);
		unsigned int bit = rnd() % 8;

		for (size_t j = 0; j < sizeof(blk); j++)
			p[j] = (unsigned char)rnd();
		printf("blocksig %x", i);
		hex(&blk, sizeof(blk));
		ok_before = verify_block_sig(&blk) == 0;
		calc_block_sig(&blk);
		hex(&blk, sizeof(blk));
		ok_after = verify_block_sig(&blk) == 0;
		p[at] ^= 1u << bit;
		ok_flipped = verify_block_sig(&blk) == 0;
		printf(" %x %x %x %zx %x\n", ok_before, ok_after, ok_flipped, at, bit);
	}
	for (int s = 0; s < 256; s++)
		printf("errno %x %x\n", s, -cmd_status_to_err((u8)s));
	for (int v = 0; v < 16; v++)
		printf("tables %x %x %x\n", v, mlx5_to_sw_pkey_sz(v),
		       mlx5_get_gid_table_len((u16)v));
	for (int s = 0; s < 16; s++)
		printf("qpstate %x %x %x\n", s,
		       (unsigned int)to_ib_qp_state((enum mlx5_qp_state)s),
		       (unsigned int)to_mlx5_state((enum ib_qp_state)s));
}
"#;

/// Builds the C program.
pub(crate) fn program(ksrc: &Path) -> String {
    let mut c = String::from(include_str!("../conformance/ifc_shim.h"));
    let _ = writeln!(c, "\n#include \"{}\"\n", ksrc.join(IFC_H).display());
    let mut done = Vec::new();
    lift(ksrc, LIFTS, &mut c, &mut done);
    c.push_str(include_str!("../conformance/ifc_shim_post.h"));
    lift(ksrc, LIFTS_POST, &mut c, &mut done);
    c.push_str(VECTORS);
    let layouts = layout_cases();
    for (i, case) in layouts.iter().enumerate() {
        let _ = writeln!(c, "static void layout_{i}(void)\n{{");
        case.c(&mut c);
        c.push_str("}\n");
    }
    c.push_str("static void structs(void)\n{\n");
    for case in struct_cases() {
        case.c(&mut c);
    }
    c.push_str("}\n\nint main(void)\n{\n");
    for (i, (expr, _)) in constants().iter().enumerate() {
        let _ = writeln!(
            c,
            "\tprintf(\"const {i} %llx\\n\", (unsigned long long)({expr}));"
        );
    }
    for i in 0..layouts.len() {
        let _ = writeln!(c, "\tlayout_{i}();");
    }
    c.push_str("\tstructs();\n\tvectors();\n\tprintf(\"end\\n\");\n\treturn 0;\n}\n");
    c
}
