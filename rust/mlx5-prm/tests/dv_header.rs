// SPDX-License-Identifier: GPL-2.0

//! include/uapi/rdma/rmlx5-dv.h, the C header for direct-verbs users,
//! against this crate: every constant, the masked atomic segment's layout,
//! the CQ arm word and the CQE ownership test. The C side
//! (tests/conformance/rmlx5_dv_facts.c) also checks the facts mlx5dv.h
//! states itself with static assertions, so a header that drifts from
//! either fails here.

mod common;

use std::path::Path;
use std::sync::OnceLock;

use mlx5_prm::doorbell::{
    ArmCmd, CqArm, BF_BUF_SIZE, BF_REG_SIZE, CQ_DBR_ARM_OFFSET, CQ_DBR_SET_CI_OFFSET,
    QP_DBR_RECV_OFFSET, QP_DBR_SEND_OFFSET, UAR_BF_OFFSET, UAR_CQ_DOORBELL_OFFSET, UAR_PAGE_SIZE,
};
use mlx5_prm::ring::{self, CI_MASK, CQE_INIT_OP_OWN};
use mlx5_prm::wqe::{MaskedAtomicSeg, DS_SIZE, MAX_WQEBBS, WQEBB_SIZE};

const MLX5DV: &str = "/usr/include/infiniband/mlx5dv.h";

/// The C program's output, produced once for all tests of this file.
fn facts() -> &'static str {
    static OUT: OnceLock<String> = OnceLock::new();
    OUT.get_or_init(|| {
        assert!(
            Path::new(MLX5DV).exists(),
            "{MLX5DV} is missing (Debian package libibverbs-dev); run `make setup`"
        );
        let root = common::repo_root();
        let source = root.join("tests/conformance/rmlx5_dv_facts.c");
        let include = format!("-I{}", root.join("include/uapi").display());
        common::compile_and_run(&source, "rmlx5_dv_facts", &[&include], &[])
    })
}

fn ours(name: &str) -> u64 {
    let word = |offset: usize| (offset / 4) as u64;
    match name {
        "RMLX5_QP_DBR_RECV" => word(QP_DBR_RECV_OFFSET),
        "RMLX5_QP_DBR_SEND" => word(QP_DBR_SEND_OFFSET),
        "RMLX5_CQ_DBR_SET_CI" => word(CQ_DBR_SET_CI_OFFSET),
        "RMLX5_CQ_DBR_ARM" => word(CQ_DBR_ARM_OFFSET),
        "RMLX5_CQ_CI_MASK" => u64::from(CI_MASK),
        // The arm word's fields, read back through the crate's encoder.
        "RMLX5_CQ_ARM_SN_SHIFT" => u64::from(
            CqArm {
                sn: 1,
                cmd: ArmCmd::Next,
                ci: 0,
            }
            .word()
            .trailing_zeros(),
        ),
        "RMLX5_CQ_ARM_SN_MASK" => u64::from(
            CqArm {
                sn: 0xff,
                cmd: ArmCmd::Next,
                ci: 0,
            }
            .word()
                >> 28,
        ),
        "RMLX5_CQ_ARM_NEXT" => u64::from(ArmCmd::Next.bits()),
        "RMLX5_CQ_ARM_SOLICITED" => u64::from(ArmCmd::Solicited.bits()),
        "RMLX5_UAR_PAGE_SIZE" => UAR_PAGE_SIZE as u64,
        "RMLX5_UAR_CQ_DOORBELL" => UAR_CQ_DOORBELL_OFFSET as u64,
        "RMLX5_UAR_BF_OFFSET" => UAR_BF_OFFSET as u64,
        "RMLX5_BF_REG_SIZE" => BF_REG_SIZE as u64,
        "RMLX5_BF_HALF_SIZE" => BF_BUF_SIZE as u64,
        "RMLX5_SEND_WQE_BB" => WQEBB_SIZE as u64,
        "RMLX5_SEND_WQE_DS" => DS_SIZE as u64,
        "RMLX5_MAX_WQE_BBS" => MAX_WQEBBS as u64,
        "RMLX5_CQE_INIT_OP_OWN" => u64::from(CQE_INIT_OP_OWN),
        _ => panic!("rmlx5-dv.h has {name}, which this test does not know"),
    }
}

#[test]
fn constants_match_the_crate() {
    let text = facts();
    let mut n = 0;
    for r in common::records(text, "const") {
        assert_eq!(common::num(r[1]), ours(r[0]), "{}", r[0]);
        n += 1;
    }
    assert_eq!(n, 18, "constants checked");
}

#[test]
fn masked_atomic_segment_layout() {
    let text = facts();
    let size: Vec<_> = common::records(text, "size").collect();
    assert_eq!(size.len(), 1);
    assert_eq!(common::num(size[0][1]) as usize, MaskedAtomicSeg::SIZE);
    let mut n = 0;
    for r in common::records(text, "offset") {
        let mut seg = MaskedAtomicSeg {
            swap_add: 0,
            compare: 0,
            swap_add_mask: 0,
            compare_mask: 0,
        };
        match r[1] {
            "swap_add" => seg.swap_add = u64::MAX,
            "compare" => seg.compare = u64::MAX,
            "swap_add_mask" => seg.swap_add_mask = u64::MAX,
            "compare_mask" => seg.compare_mask = u64::MAX,
            f => panic!("unknown field {f}"),
        }
        let mut b = [0u8; MaskedAtomicSeg::SIZE];
        seg.encode(&mut b);
        common::check_field(
            &format!("{}.{}", r[0], r[1]),
            &b,
            common::num(r[2]) as usize,
            common::num(r[3]) as usize,
        );
        n += 1;
    }
    assert_eq!(n, 4);
}

#[test]
fn arm_word_matches_the_crate() {
    let text = facts();
    let mut n = 0;
    for r in common::records(text, "arm") {
        let [sn, cmd, ci, word] = std::array::from_fn(|i| common::num(r[i]));
        let arm = CqArm {
            sn: (sn & 3) as u8,
            cmd: if cmd == u64::from(ArmCmd::Solicited.bits()) {
                ArmCmd::Solicited
            } else {
                ArmCmd::Next
            },
            ci: ci as u32,
        };
        assert_eq!(
            u64::from(arm.word()),
            word,
            "sn {sn} cmd {cmd:#x} ci {ci:#x}"
        );
        n += 1;
    }
    assert!(n >= 100, "only {n} arm words");
}

#[test]
fn cqe_ownership_matches_the_crate() {
    let text = facts();
    let mut n = 0;
    for r in common::records(text, "owned") {
        let [op_own, ci, cnt, owned] = std::array::from_fn(|i| common::num(r[i]));
        let log = (cnt as u32).trailing_zeros();
        assert_eq!(
            ring::cqe_sw_owned(op_own as u8, ci as u32, log),
            owned != 0,
            "op_own {op_own:#x} ci {ci:#x} entries {cnt}"
        );
        n += 1;
    }
    assert_eq!(n, 256 * 11 * 6);
}
