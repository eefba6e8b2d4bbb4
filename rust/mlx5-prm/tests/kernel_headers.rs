// SPDX-License-Identifier: GPL-2.0

//! Conformance with the kernel's mlx5 headers and code.
//!
//! Some facts live only in the kernel: the EQE layout, the EQ doorbell, the
//! masked atomic segment, the CQ arm sequence as the kernel performs it, the
//! event types. This test lifts the relevant definitions verbatim out of the
//! Linux source tree (structs, enums, `#define`s and a few small static
//! inline functions such as `mlx5_cq_arm`, `eq_update_ci`, `next_eqe_sw` and
//! mlx5_ib's `get_sw_cqe`), pastes them into a C program after stand-ins
//! for the kernel types they use (`u8`, `__be32`, `__raw_writeq` recording
//! into a fake UAR page...), compiles it with the host compiler and checks
//! what it prints against this crate: constants, struct offsets and sizes,
//! and thousands of doorbell and ownership vectors produced by the kernel's
//! own functions.
//!
//! The tree is `$RMLX5_KSRC`, by default `/var/cache/rmlx5/linux-source-7.3`
//! (where `make setup` unpacks it). A missing tree is a failure.

mod common;
#[path = "kernel/lift.rs"]
mod lift;

use std::path::PathBuf;
use std::sync::OnceLock;

use common::{array, bytes, num, records, LayoutMap, ZERO_CTRL};
use lift::{
    emit_aggregate, enumerators, find_define, find_enum_declaring, find_function, strip_comments,
};
use mlx5_prm::doorbell::{self, ArmCmd, CqArm, EqDoorbell, UarCqDoorbell};
use mlx5_prm::opcode::{CqeOpcode, CqeSyndrome, EventType, SendOpcode};
use mlx5_prm::wqe::{self, CtrlSeg};
use mlx5_prm::{eqe, ring};

const DEFAULT_KSRC: &str = "/var/cache/rmlx5/linux-source-7.3";
/// Vectors per record type.
const CASES: usize = 4000;

fn ksrc() -> PathBuf {
    let dir = std::env::var_os("RMLX5_KSRC")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_KSRC));
    assert!(
        dir.join("include/linux/mlx5/device.h").exists(),
        "no Linux source tree at {} (include/linux/mlx5/device.h is missing): \
         run `make setup`, or point RMLX5_KSRC at a Linux 7.3 tree",
        dir.display()
    );
    dir
}

/// A kernel source file with its comments blanked out (newlines kept).
fn source(rel: &str) -> String {
    let path = ksrc().join(rel);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    strip_comments(&text)
}

/// What the generated program pulls from which file.
struct Lift {
    file: &'static str,
    /// Enumerators whose whole enum is lifted (all its values are printed).
    enums_declaring: &'static [&'static str],
    defines: &'static [&'static str],
    structs: &'static [&'static str],
    functions: &'static [&'static str],
}

const LIFTS: &[Lift] = &[
    Lift {
        file: "include/linux/mlx5/doorbell.h",
        enums_declaring: &[],
        defines: &["MLX5_BF_OFFSET", "MLX5_CQ_DOORBELL"],
        structs: &[],
        functions: &["mlx5_write64"],
    },
    Lift {
        file: "include/linux/mlx5/device.h",
        enums_declaring: &[
            "MLX5_EVENT_TYPE_COMP",
            "MLX5_OPCODE_NOP",
            "MLX5_INLINE_SEG",
            "MLX5_EVENT_QUEUE_TYPE_QP",
            "MLX5_ADAPTER_PAGE_SIZE",
            "MLX5_BFREGS_PER_UAR",
            "MLX5_PERM_LOCAL_READ",
            "MLX5_EN_RD",
            "MLX5_MKEY_MASK_LEN",
            "MLX5_UMR_TRANSLATION_OFFSET_EN",
            "MLX5_MKEY_STATUS_FREE",
            "MLX5_MKEY_REMOTE_INVAL",
            "MLX5_CQE_ROCE_L3_HEADER_TYPE_GRH",
        ],
        defines: &[],
        structs: &["mlx5_eqe", "mlx5_err_cqe", "mlx5_cqe64", "mlx5_mkey_seg"],
        functions: &["get_cqe_opcode"],
    },
    Lift {
        file: "include/linux/mlx5/cq.h",
        enums_declaring: &[
            "MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR",
            "MLX5_CQE_OWNER_MASK",
            "MLX5_CQ_DB_REQ_NOT_SOL",
        ],
        defines: &[],
        structs: &[],
        functions: &["mlx5_cq_set_ci", "mlx5_cq_arm"],
    },
    Lift {
        file: "include/linux/mlx5/qp.h",
        enums_declaring: &[
            "MLX5_WQE_CTRL_CQ_UPDATE",
            "MLX5_SEND_WQE_DS",
            "MLX5_SEND_WQE_MAX_WQEBBS",
            "MLX5_FENCE_MODE_NONE",
            "MLX5_RCV_DBR",
        ],
        defines: &[
            "MLX5_SEND_WQEBB_NUM_DS",
            "MLX5_SEND_WQE_MAX_SIZE",
            "MLX5_WQE_CTRL_DS_MASK",
            "MLX5_WQE_CTRL_QPN_MASK",
            "MLX5_WQE_CTRL_QPN_SHIFT",
            "MLX5_WQE_DS_UNITS",
            "MLX5_WQE_CTRL_OPCODE_MASK",
            "MLX5_WQE_CTRL_WQE_INDEX_MASK",
            "MLX5_WQE_CTRL_WQE_INDEX_SHIFT",
        ],
        structs: &[
            "mlx5_wqe_ctrl_seg",
            "mlx5_wqe_raddr_seg",
            "mlx5_wqe_atomic_seg",
            "mlx5_wqe_masked_atomic_seg",
            "mlx5_wqe_data_seg",
            "mlx5_wqe_inline_seg",
            "mlx5_wqe_umr_ctrl_seg",
        ],
        functions: &[],
    },
    Lift {
        file: "include/linux/mlx5/mlx5_ifc.h",
        enums_declaring: &["MLX5_CQ_ERROR_SYNDROME_CQ_OVERRUN"],
        defines: &[],
        structs: &[],
        functions: &[],
    },
    Lift {
        file: "drivers/net/ethernet/mellanox/mlx5/core/eq.c",
        enums_declaring: &["MLX5_EQE_OWNER_INIT_VAL"],
        defines: &["MLX5_EQ_DOORBELL_OFFSET"],
        structs: &[],
        functions: &[],
    },
    Lift {
        file: "drivers/net/ethernet/mellanox/mlx5/core/lib/eq.h",
        enums_declaring: &[],
        defines: &[],
        structs: &[],
        functions: &["get_eqe", "next_eqe_sw", "eq_update_ci"],
    },
    Lift {
        file: "drivers/infiniband/hw/mlx5/cq.c",
        enums_declaring: &[],
        defines: &[],
        structs: &[],
        functions: &["get_sw_cqe"],
    },
];

/// Where the kernel's structs keep the fields of ours.
const KERNEL_LAYOUTS: &[LayoutMap] = &[
    LayoutMap {
        header: "mlx5_eqe",
        ours: "eqe",
        fields: &[
            ("type", &["event_type"]),
            ("sub_type", &["sub_type"]),
            ("data", &["data"]),
            ("data.comp.cqn", &["comp.cqn"]),
            ("data.cq_err.cqn", &["cq_err.cqn"]),
            ("data.cq_err.syndrome", &["cq_err.syndrome"]),
            ("data.qp_srq.type", &["qp_srq.queue_type"]),
            ("data.qp_srq.qp_srq_n", &["qp_srq.qp_srq_n"]),
            ("signature", &["signature"]),
            ("owner", &["owner"]),
        ],
    },
    LayoutMap {
        header: "mlx5_err_cqe",
        ours: "err_cqe",
        fields: &[
            ("srqn", &["srqn"]),
            ("vendor_err_synd", &["vendor_syndrome"]),
            ("syndrome", &["syndrome"]),
            ("s_wqe_opcode_qpn", &["send_opcode", "qpn"]),
            ("wqe_counter", &["wqe_counter"]),
            ("signature", &["signature"]),
            ("op_own", &["op_own"]),
        ],
    },
    LayoutMap {
        header: "mlx5_cqe64",
        ours: "cqe",
        fields: &[
            ("ml_path", &["ml_path"]),
            ("slid", &["slid"]),
            ("flags_rqpn", &["grh", "sl", "src_qpn"]),
            ("srqn", &["srqn_uidx"]),
            ("immediate", &["imm_inval_rkey"]),
            ("inval_rkey", &["imm_inval_rkey"]),
            ("pkey", &["imm_inval_rkey"]),
            ("byte_cnt", &["byte_cnt"]),
            ("sop_drop_qpn", &["send_opcode", "qpn"]),
            ("wqe_counter", &["wqe_counter"]),
            ("signature", &["signature"]),
            ("op_own", &["op_own"]),
        ],
    },
    LayoutMap {
        header: "mlx5_wqe_ctrl_seg",
        ours: "ctrl",
        fields: &[
            ("opmod_idx_opcode", &["opmod", "wqe_index", "opcode"]),
            ("qpn_ds", &["qpn", "ds"]),
            ("signature", &["signature"]),
            ("fm_ce_se", &["fence_mode", "ce", "solicited"]),
            ("imm", &["imm"]),
        ],
    },
    LayoutMap {
        header: "mlx5_wqe_raddr_seg",
        ours: "raddr",
        fields: &[("raddr", &["raddr"]), ("rkey", &["rkey"])],
    },
    LayoutMap {
        header: "mlx5_wqe_atomic_seg",
        ours: "atomic",
        fields: &[("swap_add", &["swap_add"]), ("compare", &["compare"])],
    },
    LayoutMap {
        header: "mlx5_wqe_masked_atomic_seg",
        ours: "masked_atomic",
        fields: &[
            ("swap_add", &["swap_add"]),
            ("compare", &["compare"]),
            ("swap_add_mask", &["swap_add_mask"]),
            ("compare_mask", &["compare_mask"]),
        ],
    },
    LayoutMap {
        header: "mlx5_wqe_data_seg",
        ours: "data",
        fields: &[
            ("byte_count", &["byte_count"]),
            ("lkey", &["lkey"]),
            ("addr", &["addr"]),
        ],
    },
    LayoutMap {
        header: "mlx5_wqe_inline_seg",
        ours: "inline",
        fields: &[("byte_count", &["byte_count"])],
    },
    LayoutMap {
        header: "mlx5_wqe_umr_ctrl_seg",
        ours: "umr_ctrl",
        fields: &[
            ("flags", &["flags"]),
            ("xlt_octowords", &["xlt_octowords"]),
            ("xlt_offset", &["xlt_offset"]),
            ("mkey_mask", &["mkey_mask"]),
            ("xlt_offset_47_16", &["xlt_offset_47_16"]),
        ],
    },
    LayoutMap {
        header: "mlx5_mkey_seg",
        ours: "mkey",
        fields: &[
            ("status", &["status"]),
            ("flags", &["flags"]),
            ("qpn_mkey7_0", &["qpn_mkey7_0"]),
            ("flags_pd", &["flags_pd"]),
            ("start_addr", &["start_addr"]),
            ("len", &["len"]),
            ("bsfs_octo_size", &["bsfs_octo_size"]),
            ("xlt_oct_size", &["xlt_oct_size"]),
            ("log2_page_size", &["log2_page_size"]),
        ],
    },
];

/// Builds the C program from the lifted kernel text.
fn program() -> String {
    let mut c = String::from(include_str!("../../../tests/conformance/kernel_shim.h"));
    let mut consts = Vec::new();
    let mut done = Vec::new();
    for lift in LIFTS {
        let text = source(lift.file);
        c.push_str(&format!("\n/* ---- lifted from {} ---- */\n", lift.file));
        for ident in lift.enums_declaring {
            let block = find_enum_declaring(&text, ident);
            consts.extend(enumerators(&block));
            c.push_str(&block);
            c.push_str("\n\n");
        }
        for name in lift.defines {
            c.push_str(&find_define(&text, name));
            c.push('\n');
            consts.push(name.to_string());
        }
        for name in lift.structs {
            emit_aggregate(&text, "struct", name, &mut c, &mut done);
        }
        for name in lift.functions {
            c.push_str(&find_function(&text, name));
            c.push_str("\n\n");
        }
    }
    c.push_str(include_str!(
        "../../../tests/conformance/kernel_vectors.c.in"
    ));
    c.push_str("\nint main(int argc, char **argv)\n{\n");
    c.push_str("\tunsigned int n = argc > 1 ? (unsigned int)strtoul(argv[1], NULL, 0) : 1000;\n\n");
    for name in &consts {
        c.push_str(&format!(
            "\tprintf(\"const {name} %llx\\n\", (unsigned long long)({name}));\n"
        ));
    }
    for m in KERNEL_LAYOUTS {
        let s = m.header;
        c.push_str(&format!(
            "\tprintf(\"size {s} %zx\\n\", sizeof(struct {s}));\n"
        ));
        for (f, _) in m.fields {
            c.push_str(&format!(
                "\tprintf(\"offset {s} {f} %zx %zx\\n\", offsetof(struct {s}, {f}), \
                 sizeof(((struct {s} *)0)->{f}));\n"
            ));
        }
    }
    c.push_str("\tvectors(n);\n\tprintf(\"end\\n\");\n\treturn 0;\n}\n");
    c
}

/// The program's output, produced once for all tests of this file.
fn vectors() -> &'static str {
    static OUT: OnceLock<String> = OnceLock::new();
    OUT.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("mlx5-prm-conformance");
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("kernel_vectors.c");
        std::fs::write(&src, program()).unwrap();
        // The lifted kernel code is not written for -Wextra; its warnings
        // are not ours to fix.
        common::compile_and_run(
            &src,
            "kernel_vectors",
            &["-Wno-error", "-w"],
            &[&format!("{CASES}")],
        )
    })
}

fn cases(kind: &'static str) -> Vec<Vec<&'static str>> {
    let v: Vec<_> = records(vectors(), kind).collect();
    assert_eq!(v.len(), CASES, "expected {CASES} `{kind}` vectors");
    v
}

/// `SCREAMING_SNAKE` of a `CamelCase` variant name.
fn snake(camel: &str) -> String {
    let mut s = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            s.push('_');
        }
        s.push(c.to_ascii_uppercase());
    }
    s
}

/// Looks `name` up among `PREFIX + snake(variant) + SUFFIX` of an enum.
fn by_name<T: Copy + std::fmt::Debug + Into<u8>>(
    all: &[T],
    prefix: &str,
    suffix: &str,
    name: &str,
) -> Option<u64> {
    all.iter()
        .find(|v| format!("{prefix}{}{suffix}", snake(&format!("{v:?}"))) == name)
        .map(|&v| u64::from(v.into()))
}

/// What we say a kernel constant is: `Some(Some(v))` if we model it,
/// `Some(None)` if we deliberately do not, `None` if the test does not know
/// the name (a new kernel constant to look at).
fn our_constant(name: &str) -> Option<Option<u64>> {
    let ctrl_word = |c: CtrlSeg, at: usize| {
        let mut b = [0u8; 16];
        c.encode(&mut b);
        u64::from(u32::from_be_bytes(b[at..at + 4].try_into().unwrap()))
    };
    let fm_ce_se = |c: CtrlSeg| {
        let mut b = [0u8; 16];
        c.encode(&mut b);
        u64::from(b[11])
    };
    let v = match name {
        "MLX5_BF_OFFSET" => doorbell::UAR_BF_OFFSET as u64,
        "MLX5_CQ_DOORBELL" => doorbell::UAR_CQ_DOORBELL_OFFSET as u64,
        "MLX5_EQ_DOORBELL_OFFSET" => doorbell::UAR_EQ_ARM_OFFSET as u64,
        "MLX5_EQE_OWNER_INIT_VAL" => u64::from(ring::EQE_INIT_OWNER),
        "MLX5_INLINE_SEG" => u64::from(wqe::INLINE_SEG),
        "MLX5_EVENT_QUEUE_TYPE_QP" => u64::from(eqe::QUEUE_TYPE_QP),
        "MLX5_EVENT_QUEUE_TYPE_RQ" => u64::from(eqe::QUEUE_TYPE_RQ),
        "MLX5_EVENT_QUEUE_TYPE_SQ" => u64::from(eqe::QUEUE_TYPE_SQ),
        "MLX5_EVENT_QUEUE_TYPE_DCT" => u64::from(eqe::QUEUE_TYPE_DCT),
        "MLX5_ADAPTER_PAGE_SIZE" => doorbell::UAR_PAGE_SIZE as u64,
        "MLX5_BFREGS_PER_UAR" => doorbell::BFREGS_PER_UAR as u64,
        "MLX5_CQE_OWNER_MASK" => u64::from(mlx5_prm::cqe::OWNER_MASK),
        "MLX5_CQE_ROCE_L3_HEADER_TYPE_GRH" => u64::from(mlx5_prm::cqe::ROCE_L3_HEADER_TYPE_GRH),
        "MLX5_CQE_ROCE_L3_HEADER_TYPE_IPV6" => u64::from(mlx5_prm::cqe::ROCE_L3_HEADER_TYPE_IPV6),
        "MLX5_CQE_ROCE_L3_HEADER_TYPE_IPV4" => u64::from(mlx5_prm::cqe::ROCE_L3_HEADER_TYPE_IPV4),
        "MLX5_CQ_DB_REQ_NOT_SOL" => u64::from(ArmCmd::Solicited.bits()),
        "MLX5_CQ_DB_REQ_NOT" => u64::from(ArmCmd::Next.bits()),
        "MLX5_WQE_CTRL_CQ_UPDATE" => fm_ce_se(CtrlSeg {
            ce: wqe::CE_CQ_UPDATE,
            ..ZERO_CTRL
        }),
        "MLX5_WQE_CTRL_CQ_UPDATE_AND_EQE" => fm_ce_se(CtrlSeg {
            ce: wqe::CE_CQ_UPDATE_AND_EQE,
            ..ZERO_CTRL
        }),
        "MLX5_WQE_CTRL_SOLICITED" => fm_ce_se(CtrlSeg {
            solicited: true,
            ..ZERO_CTRL
        }),
        "MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE" | "MLX5_FENCE_MODE_INITIATOR_SMALL" => {
            fm_ce_se(CtrlSeg {
                fence_mode: wqe::FENCE_MODE_INITIATOR_SMALL,
                ..ZERO_CTRL
            })
        }
        "MLX5_FENCE_MODE_NONE" => fm_ce_se(CtrlSeg {
            fence_mode: wqe::FENCE_MODE_NONE,
            ..ZERO_CTRL
        }),
        "MLX5_FENCE_MODE_FENCE" => fm_ce_se(CtrlSeg {
            fence_mode: wqe::FENCE_MODE_FENCE,
            ..ZERO_CTRL
        }),
        "MLX5_FENCE_MODE_STRONG_ORDERING" => fm_ce_se(CtrlSeg {
            fence_mode: wqe::FENCE_MODE_STRONG_ORDERING,
            ..ZERO_CTRL
        }),
        "MLX5_FENCE_MODE_SMALL_AND_FENCE" => fm_ce_se(CtrlSeg {
            fence_mode: wqe::FENCE_MODE_SMALL_AND_FENCE,
            ..ZERO_CTRL
        }),
        "MLX5_SEND_WQE_DS" | "MLX5_WQE_DS_UNITS" => wqe::DS_SIZE as u64,
        "MLX5_SEND_WQE_BB" => wqe::WQEBB_SIZE as u64,
        "MLX5_SEND_WQEBB_NUM_DS" => (wqe::WQEBB_SIZE / wqe::DS_SIZE) as u64,
        "MLX5_SEND_WQE_MAX_WQEBBS" => wqe::MAX_WQEBBS as u64,
        "MLX5_SEND_WQE_MAX_SIZE" => wqe::MAX_WQE_SIZE as u64,
        "MLX5_RCV_DBR" => (doorbell::QP_DBR_RECV_OFFSET / 4) as u64,
        "MLX5_SND_DBR" => (doorbell::QP_DBR_SEND_OFFSET / 4) as u64,
        // Masks and shifts of the control segment words, as our encoder
        // fills them with all-ones fields.
        "MLX5_WQE_CTRL_DS_MASK" => ctrl_word(
            CtrlSeg {
                ds: 0xff,
                ..ZERO_CTRL
            },
            4,
        ),
        "MLX5_WQE_CTRL_QPN_MASK" => ctrl_word(
            CtrlSeg {
                qpn: u32::MAX,
                ..ZERO_CTRL
            },
            4,
        ),
        "MLX5_WQE_CTRL_QPN_SHIFT" => ctrl_word(
            CtrlSeg {
                qpn: 1,
                ..ZERO_CTRL
            },
            4,
        )
        .trailing_zeros()
        .into(),
        "MLX5_WQE_CTRL_OPCODE_MASK" => {
            // Every opcode lands inside the mask.
            let all = SendOpcode::ALL
                .iter()
                .map(|&op| {
                    ctrl_word(
                        CtrlSeg {
                            opcode: op,
                            ..ZERO_CTRL
                        },
                        0,
                    )
                })
                .fold(0, |a, w| a | w);
            assert_eq!(all & !0xff, 0);
            0xff
        }
        "MLX5_WQE_CTRL_WQE_INDEX_MASK" => ctrl_word(
            CtrlSeg {
                wqe_index: u16::MAX,
                ..ZERO_CTRL
            },
            0,
        ),
        "MLX5_WQE_CTRL_WQE_INDEX_SHIFT" => ctrl_word(
            CtrlSeg {
                wqe_index: 1,
                ..ZERO_CTRL
            },
            0,
        )
        .trailing_zeros()
        .into(),
        // Fast registration and local invalidation (UMR WQEs).
        "MLX5_PERM_LOCAL_READ" => u64::from(wqe::mkey_flags::LOCAL_READ),
        "MLX5_PERM_LOCAL_WRITE" => u64::from(wqe::mkey_flags::LOCAL_WRITE),
        "MLX5_PERM_REMOTE_READ" => u64::from(wqe::mkey_flags::REMOTE_READ),
        "MLX5_PERM_REMOTE_WRITE" => u64::from(wqe::mkey_flags::REMOTE_WRITE),
        "MLX5_PERM_ATOMIC" => u64::from(wqe::mkey_flags::ATOMIC),
        "MLX5_PERM_UMR_EN" => u64::from(wqe::mkey_flags::UMR_EN),
        "MLX5_EN_RD" => wqe::MTT_EN_RD,
        "MLX5_EN_WR" => wqe::MTT_EN_WR,
        "MLX5_MKEY_MASK_LEN" => wqe::mkey_mask::LEN,
        "MLX5_MKEY_MASK_PAGE_SIZE" => wqe::mkey_mask::PAGE_SIZE,
        "MLX5_MKEY_MASK_START_ADDR" => wqe::mkey_mask::START_ADDR,
        "MLX5_MKEY_MASK_PD" => wqe::mkey_mask::PD,
        "MLX5_MKEY_MASK_EN_RINVAL" => wqe::mkey_mask::EN_RINVAL,
        "MLX5_MKEY_MASK_KEY" => wqe::mkey_mask::KEY,
        "MLX5_MKEY_MASK_QPN" => wqe::mkey_mask::QPN,
        "MLX5_MKEY_MASK_LR" => wqe::mkey_mask::LR,
        "MLX5_MKEY_MASK_LW" => wqe::mkey_mask::LW,
        "MLX5_MKEY_MASK_RR" => wqe::mkey_mask::RR,
        "MLX5_MKEY_MASK_RW" => wqe::mkey_mask::RW,
        "MLX5_MKEY_MASK_A" => wqe::mkey_mask::A,
        "MLX5_MKEY_MASK_SMALL_FENCE" => wqe::mkey_mask::SMALL_FENCE,
        "MLX5_MKEY_MASK_FREE" => wqe::mkey_mask::FREE,
        "MLX5_UMR_TRANSLATION_OFFSET_EN" => u64::from(wqe::umr_flags::TRANSLATION_OFFSET_EN),
        "MLX5_UMR_CHECK_NOT_FREE" => u64::from(wqe::umr_flags::CHECK_NOT_FREE),
        "MLX5_UMR_CHECK_FREE" => u64::from(wqe::umr_flags::CHECK_FREE),
        "MLX5_UMR_INLINE" => u64::from(wqe::umr_flags::INLINE),
        "MLX5_MKEY_STATUS_FREE" => u64::from(wqe::MKEY_STATUS_FREE),
        "MLX5_MKEY_REMOTE_INVAL" => u64::from(wqe::MKEY_REMOTE_INVAL),
        "MLX5_CQ_ERROR_SYNDROME_CQ_OVERRUN" => u64::from(eqe::CQ_ERROR_SYNDROME_OVERRUN),
        "MLX5_CQ_ERROR_SYNDROME_CQ_ACCESS_VIOLATION_ERROR" => {
            u64::from(eqe::CQ_ERROR_SYNDROME_ACCESS_VIOLATION)
        }
        // Deliberately not modelled: software-only event values, receive
        // opcodes of other CQE formats, UAR allocation bookkeeping.
        "MLX5_EVENT_TYPE_NOTIFY_ANY"
        | "MLX5_EVENT_TYPE_MAX"
        | "MLX5_RECV_OPCODE_RDMA_WRITE_IMM"
        | "MLX5_RECV_OPCODE_SEND"
        | "MLX5_RECV_OPCODE_SEND_IMM"
        | "MLX5_RECV_OPCODE_SEND_INVAL"
        | "MLX5_CQE_OPCODE_ERROR"
        | "MLX5_CQE_OPCODE_RESIZE"
        | "MLX5_ADAPTER_PAGE_SHIFT"
        | "MLX5_MAX_UARS"
        | "MLX5_NON_FP_BFREGS_PER_UAR"
        | "MLX5_FP_BFREGS_PER_UAR"
        | "MLX5_MAX_BFREGS"
        | "MLX5_UARS_IN_PAGE"
        | "MLX5_NON_FP_BFREGS_IN_PAGE"
        | "MLX5_MIN_DYN_BFREGS"
        | "MLX5_MAX_DYN_BFREGS"
        // Signature, BSF and relaxed-ordering mkey features the model
        // does not have.
        | "MLX5_MKEY_MASK_EN_SIGERR"
        | "MLX5_MKEY_MASK_BSF_EN"
        | "MLX5_MKEY_MASK_RELAXED_ORDERING_WRITE"
        | "MLX5_MKEY_MASK_RELAXED_ORDERING_READ"
        | "MLX5_MKEY_MASK_PAGE_SIZE_5"
        | "MLX5_MKEY_FLAG_SYNC_UMR"
        | "MLX5_MKEY_BSF_EN" => return Some(None),
        _ => {
            return by_name(EventType::ALL, "MLX5_EVENT_TYPE_", "", name)
                .or_else(|| by_name(SendOpcode::ALL, "MLX5_OPCODE_", "", name))
                .or_else(|| by_name(CqeSyndrome::ALL, "MLX5_CQE_SYNDROME_", "_ERR", name))
                .or_else(|| by_name(CqeOpcode::ALL, "MLX5_CQE_", "", name))
                .map(Some)
        }
    };
    Some(Some(v))
}

#[test]
fn constants_match_the_kernel() {
    let mut checked = 0;
    for r in records(vectors(), "const") {
        let (name, value) = (r[0], num(r[1]));
        match our_constant(name) {
            Some(Some(ours)) => {
                assert_eq!(ours, value, "{name}: ours {ours:#x}, kernel {value:#x}");
                checked += 1;
            }
            Some(None) => {}
            None => panic!(
                "kernel constant {name} = {value:#x} is unknown here: \
                 model it in mlx5-prm or list it as deliberately left out"
            ),
        }
    }
    assert!(checked >= 100, "only {checked} kernel constants checked");
    // Every variant of ours is a value the kernel or mlx5dv.h defines; the
    // kernel must know every event type and syndrome we do.
    for t in EventType::ALL {
        let name = format!("MLX5_EVENT_TYPE_{}", snake(&format!("{t:?}")));
        assert!(
            records(vectors(), "const").any(|r| r[0] == name),
            "{name} is not in the kernel's enum mlx5_event"
        );
    }
    for s in CqeSyndrome::ALL {
        let name = format!("MLX5_CQE_SYNDROME_{}_ERR", snake(&format!("{s:?}")));
        assert!(
            records(vectors(), "const").any(|r| r[0] == name),
            "{name} missing"
        );
    }
}

#[test]
fn struct_layouts_match_the_kernel() {
    let checked = common::check_layouts(vectors(), KERNEL_LAYOUTS);
    assert_eq!(checked, 11 + 60, "layout facts checked");
}

#[test]
fn cq_arm_matches_mlx5_cq_arm() {
    for r in cases("cqarm") {
        let [arm_sn, cmd, ci, cqn] = std::array::from_fn(|i| num(r[i]));
        let arm = CqArm {
            sn: (arm_sn & 3) as u8,
            cmd: match cmd {
                0 => ArmCmd::Next,
                0x0100_0000 => ArmCmd::Solicited,
                _ => panic!("unexpected command {cmd:#x}"),
            },
            ci: ci as u32,
        };
        let dbrec: [u8; 4] = array(&bytes(r[4]));
        let mut ours = [0u8; 4];
        arm.encode(&mut ours);
        assert_eq!(ours, dbrec, "ARM word of {arm:?}");
        assert_eq!(arm.to_bytes(), dbrec, "ARM word of {arm:?}, in a register");
        assert_eq!(num(r[5]) as usize, doorbell::UAR_CQ_DOORBELL_OFFSET);
        let uar: [u8; 8] = array(&bytes(r[6]));
        let db = UarCqDoorbell {
            arm,
            cqn: cqn as u32,
        };
        let mut ours = [0u8; 8];
        db.encode(&mut ours);
        assert_eq!(ours, uar, "UAR CQ doorbell {db:?}");
        assert_eq!(db.to_bytes(), uar, "UAR CQ doorbell {db:?}, in a register");
    }
}

#[test]
fn set_ci_matches_mlx5_cq_set_ci() {
    for r in cases("setci") {
        let ci = num(r[0]) as u32;
        let word: [u8; 4] = array(&bytes(r[1]));
        assert_eq!(doorbell::set_ci_word(ci), word, "SET_CI of {ci:#x}");
    }
}

#[test]
fn eq_doorbell_matches_eq_update_ci() {
    for r in cases("eqdb") {
        let [arm, eqn, ci, offset] = std::array::from_fn(|i| num(r[i]));
        let word: [u8; 4] = array(&bytes(r[4]));
        let expected_offset = if arm != 0 {
            doorbell::UAR_EQ_ARM_OFFSET
        } else {
            doorbell::UAR_EQ_UPDATE_OFFSET
        };
        assert_eq!(
            offset as usize, expected_offset,
            "EQ doorbell offset, arm={arm}"
        );
        let db = EqDoorbell {
            eqn: eqn as u8,
            ci: ci as u32,
        };
        let mut ours = [0u8; 4];
        db.encode(&mut ours);
        assert_eq!(ours, word, "EQ doorbell {db:?}");
    }
}

#[test]
fn eqe_validity_matches_next_eqe_sw() {
    for r in cases("eqvalid") {
        let [log_size, ci, owner, valid] = std::array::from_fn(|i| num(r[i]));
        assert_eq!(
            ring::eqe_valid(owner as u8, ci as u32, log_size as u32),
            valid != 0,
            "owner {owner:#x} at ci {ci:#x} of 2^{log_size}"
        );
    }
}

#[test]
fn cqe_ownership_matches_get_sw_cqe() {
    for r in cases("cqowned") {
        let [log_size, ci, op_own, owned] = std::array::from_fn(|i| num(r[i]));
        assert_eq!(
            ring::cqe_sw_owned(op_own as u8, ci as u32, log_size as u32),
            owned != 0,
            "op_own {op_own:#x} at ci {ci:#x} of 2^{log_size}"
        );
    }
}

/// Facts that live in kernel C code rather than in a header, checked by
/// looking for the statement that establishes them.
#[test]
fn code_facts_match_the_kernel() {
    let squash = |s: &str| s.split_whitespace().collect::<String>();
    let expect = |file: &str, stmt: &str, why: &str| {
        assert!(
            squash(&source(file)).contains(&squash(stmt)),
            "{file} no longer contains `{stmt}`: re-check {why}"
        );
    };
    // CQ doorbell record: SET_CI is word 0, ARM word 1.
    expect(
        "drivers/infiniband/hw/mlx5/cq.c",
        "cq->mcq.set_ci_db = cq->db.db;",
        "doorbell::CQ_DBR_SET_CI_OFFSET",
    );
    expect(
        "drivers/infiniband/hw/mlx5/cq.c",
        "cq->mcq.arm_db = cq->db.db + 1;",
        "doorbell::CQ_DBR_ARM_OFFSET",
    );
    assert_eq!(doorbell::CQ_DBR_SET_CI_OFFSET, 0);
    assert_eq!(doorbell::CQ_DBR_ARM_OFFSET, 4);
    // BlueFlame: two halves of bf_reg_size / 2 that alternate per doorbell,
    // registers at MLX5_BF_OFFSET + index * bf_reg_size.
    expect(
        "drivers/infiniband/hw/mlx5/qp.c",
        "qp->bf.buf_size = (1 << MLX5_CAP_GEN(dev->mdev, log_bf_reg_size)) / 2;",
        "doorbell::BF_BUF_SIZE",
    );
    expect(
        "drivers/infiniband/hw/mlx5/wr.c",
        "bf->offset ^= bf->buf_size;",
        "doorbell::bf_next_offset",
    );
    expect(
        "drivers/net/ethernet/mellanox/mlx5/core/uar.c",
        "(dbi % MLX5_BFREGS_PER_UAR) * (1 << MLX5_CAP_GEN(mdev, log_bf_reg_size)) + MLX5_BF_OFFSET;",
        "doorbell::bf_reg_offset",
    );
    assert_eq!(doorbell::BF_BUF_SIZE * 2, doorbell::BF_REG_SIZE);
    for offset in [0, doorbell::BF_BUF_SIZE] {
        assert_eq!(
            doorbell::bf_next_offset(offset),
            offset ^ doorbell::BF_BUF_SIZE
        );
    }
    for i in 0..doorbell::BFREGS_PER_UAR {
        assert_eq!(
            doorbell::bf_reg_offset(i),
            Ok(doorbell::UAR_BF_OFFSET + i * doorbell::BF_REG_SIZE)
        );
    }
    // A fresh CQ buffer: every op_own is MLX5_CQE_INVALID << 4.
    expect(
        "drivers/infiniband/hw/mlx5/cq.c",
        "cqe64->op_own = MLX5_CQE_INVALID << 4;",
        "ring::CQE_INIT_OP_OWN",
    );
    assert_eq!(ring::CQE_INIT_OP_OWN, u8::from(CqeOpcode::Invalid) << 4);
}
