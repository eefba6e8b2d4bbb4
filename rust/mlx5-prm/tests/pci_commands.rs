// SPDX-License-Identifier: GPL-2.0

//! Conformance of the command layer (`ifc`, `command`, `cmd_*`, `hca_cap`,
//! `qpc`, `cmd_queue`, `init_seg`, `eqe_async`) with the kernel's own
//! definitions.
//!
//! At run time the test writes a C program: a stand-in header for kernel
//! types (`tests/conformance/ifc_shim.h`), then the Linux tree's
//! `include/linux/mlx5/mlx5_ifc.h` `#include`d as it is, then definitions
//! lifted verbatim from `device.h`, `driver.h`, `qp.h`, `rdma/ib_verbs.h`,
//! mlx5_core's `cmd.c` / `pagealloc.c` and mlx5_ib's `qp.c` (the
//! `MLX5_SET` family of macros, the command queue, mailbox, initialization
//! segment and EQE structs, status and QP state enums, and a few small
//! static functions such as `calc_block_sig`, `fw_rev_maj` and
//! `to_ib_qp_state`). The program
//!
//! - sets every field we model, one at a time, to all-ones and to a random
//!   value with `MLX5_SET` / `MLX5_SET64` in a zeroed layout (with the
//!   command's opcode set, for inputs) and prints the bytes; we set the
//!   same field of our struct, encode, and compare the bytes, then decode
//!   the kernel's bytes and compare the value read back. The bits all the
//!   all-ones encodings cover must be exactly the bits our encoder writes
//!   for a struct decoded from all-ones bytes, so a field we model but
//!   forgot here fails the test;
//! - does the same for the members of the plain C structs of device.h
//!   (command queue entry, mailbox block, health buffer, EQE data), writing
//!   big-endian values with `offsetof`;
//! - prints the opcodes, layout sizes and page-list offsets of every
//!   command, the constants we define, and what the lifted kernel functions
//!   compute (block signatures, mailbox counts, firmware version fields,
//!   errno mapping, table sizes, QP state mapping) on many inputs.
//!
//! Facts that live only in mlx5_core's code (which bits of `cmdq_addr_l_sz`
//! hold the queue geometry, which fields `handle_hca_cap` writes, ...) are
//! checked by finding the statement that establishes them.
//!
//! The tree is `$RMLX5_KSRC`, by default `/var/cache/rmlx5/linux-source-7.3`
//! (where `make setup` unpacks it). If `RMLX5_KSRC` is unset and the default
//! tree is absent, every test here prints why and passes without checking;
//! a set `RMLX5_KSRC` that holds no tree is a failure.

#[path = "pci/cases.rs"]
mod cases;
#[path = "pci/constants.rs"]
mod constants;
#[path = "pci/facts.rs"]
mod facts;
#[path = "pci/harness.rs"]
mod harness;
#[path = "kernel/lift.rs"]
mod lift;
#[path = "pci/program.rs"]
mod program;

use std::path::{Path, PathBuf};
use std::process::Command as Process;
use std::sync::OnceLock;

use cases::{layout_cases, struct_cases};
use constants::constants;
use harness::{hex_bytes, num, Output};
use lift::{find_function, strip_comments};
use mlx5_prm::cmd_queue::{self, CmdLayout};
use mlx5_prm::cmd_status::CmdStatus;
use mlx5_prm::command;
use mlx5_prm::init_seg::{self, FwRev};
use mlx5_prm::opcode::EventType;
use mlx5_prm::{cmd_eq, hca_cap, qpc};
use program::program;

const DEFAULT_KSRC: &str = "/var/cache/rmlx5/linux-source-7.3";
const IFC_H: &str = "include/linux/mlx5/mlx5_ifc.h";

/// Field facts of the mlx5_ifc layouts (see [`layouts_match_mlx5_ifc`]).
const LAYOUT_FACTS: usize = 979;
/// Member facts of the device.h structs.
const MEMBER_FACTS: usize = 42;

/// The kernel tree, or `None` (after saying so) if the default one is
/// absent and `RMLX5_KSRC` is unset.
fn ksrc() -> Option<PathBuf> {
    match std::env::var_os("RMLX5_KSRC") {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            assert!(
                dir.join(IFC_H).exists(),
                "RMLX5_KSRC={} holds no Linux source tree ({IFC_H} is missing)",
                dir.display()
            );
            Some(dir)
        }
        None => {
            let dir = PathBuf::from(DEFAULT_KSRC);
            if dir.join(IFC_H).exists() {
                Some(dir)
            } else {
                eprintln!(
                    "SKIPPED: no Linux source tree at {DEFAULT_KSRC} ({IFC_H} is missing), \
                     so the command layouts are not checked against mlx5_ifc.h: run \
                     `make setup`, or point RMLX5_KSRC at a Linux 7.3 tree"
                );
                None
            }
        }
    }
}

/// A kernel source file with its comments blanked out.
fn source(ksrc: &Path, rel: &str) -> String {
    let path = ksrc.join(rel);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    strip_comments(&text)
}

/// Compiles and runs the program once for all tests of this file; `None`
/// if there is no kernel tree.
fn output() -> Option<&'static Output> {
    static OUT: OnceLock<Option<Output>> = OnceLock::new();
    OUT.get_or_init(|| {
        let ksrc = ksrc()?;
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("mlx5-prm-pci");
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("pci_commands.c");
        let exe = dir.join("pci_commands");
        std::fs::write(&src, program(&ksrc)).unwrap();
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
        // The lifted kernel code is not written for -Wextra, and MLX5_SET
        // on the 64-bit branch not taken warns; neither is ours to fix.
        let built = Process::new(&cc)
            .args(["-std=gnu11", "-O0", "-w", "-o"])
            .arg(&exe)
            .arg(&src)
            .output()
            .unwrap_or_else(|e| panic!("cannot run the C compiler `{cc}` ({e})"));
        assert!(
            built.status.success(),
            "compiling {} failed:\n{}",
            src.display(),
            String::from_utf8_lossy(&built.stderr)
        );
        let run = Process::new(&exe).output().unwrap();
        assert!(run.status.success(), "{} failed", exe.display());
        let text = String::from_utf8(run.stdout).unwrap();
        assert_eq!(
            text.lines().last(),
            Some("end"),
            "the program did not finish"
        );
        Some(Output::parse(&text))
    })
    .as_ref()
}

#[test]
fn layouts_match_mlx5_ifc() {
    let Some(out) = output() else { return };
    let cases = layout_cases();
    let facts: usize = cases.iter().map(|c| c.check(out)).sum();
    // Each command contributes one command fact besides its layouts' fields.
    let commands = command::OPCODES.len();
    let fields = facts - commands;
    println!(
        "checked {fields} field facts (every modelled field of {} layouts and the opcode of \
         each command input, each with all-ones and a random value) and {commands} commands \
         against mlx5_ifc.h",
        cases.len() - commands
    );
    assert_eq!(fields, LAYOUT_FACTS, "field facts checked");
}

#[test]
fn every_command_is_checked() {
    let Some(out) = output() else { return };
    let listed: Vec<&str> = out.list("cmd").iter().map(|r| r[0].as_str()).collect();
    for (op, name) in command::OPCODES {
        assert!(listed.contains(name), "{name} ({op:#x}) is not checked");
    }
    assert_eq!(listed.len(), command::OPCODES.len());
}

#[test]
fn device_structs_match_device_h() {
    let Some(out) = output() else { return };
    let facts: usize = struct_cases().iter().map(|c| c.check(out)).sum();
    println!("checked {facts} member facts of device.h structs");
    assert_eq!(facts, MEMBER_FACTS, "member facts checked");
}

#[test]
fn constants_match_the_kernel() {
    let Some(out) = output() else { return };
    let consts = constants();
    for (i, (expr, ours)) in consts.iter().enumerate() {
        let kernel = num(&out.get("const", &i.to_string())[0]);
        assert_eq!(*ours, kernel, "{expr}: ours {ours:#x}, kernel {kernel:#x}");
    }
    println!("checked {} constants", consts.len());
}

#[test]
fn kernel_functions_agree() {
    let Some(out) = output() else { return };
    for r in out.list("fwrev") {
        let v: Vec<u64> = r.iter().map(|s| num(s)).collect();
        let rev = FwRev::decode(v[0] as u32, v[1] as u32);
        assert_eq!(
            [
                u64::from(rev.major),
                u64::from(rev.minor),
                u64::from(rev.subminor)
            ],
            [v[2], v[3], v[4]],
            "fw_rev_maj/min/sub of {:#x} {:#x}",
            v[0],
            v[1]
        );
        assert_eq!(u64::from(init_seg::cmdif_rev(v[1] as u32)), v[5]);
    }
    assert_eq!(out.list("fwrev").len(), 1000);
    for r in out.list("blocks") {
        let (len, n) = (num(&r[0]) as usize, num(&r[1]) as usize);
        assert_eq!(
            cmd_queue::mailbox_count(len),
            n,
            "mlx5_calc_cmd_blocks({len})"
        );
    }
    assert_eq!(out.list("blocks").len(), 3001);
    for r in out.list("blocksig") {
        let before: [u8; cmd_queue::MAILBOX_SIZE] = hex_bytes(&r[1]).try_into().unwrap();
        let after: [u8; cmd_queue::MAILBOX_SIZE] = hex_bytes(&r[2]).try_into().unwrap();
        let (ok_before, ok_after, ok_flipped) = (num(&r[3]), num(&r[4]), num(&r[5]));
        let (at, bit) = (num(&r[6]) as usize, num(&r[7]));
        assert_eq!(cmd_queue::block_signature_ok(&before), ok_before != 0);
        let mut ours = before;
        cmd_queue::sign_block(&mut ours);
        assert_eq!(ours, after, "calc_block_sig");
        assert!(cmd_queue::block_signature_ok(&after) && ok_after != 0);
        let mut flipped = after;
        flipped[at] ^= 1 << bit;
        assert_eq!(cmd_queue::block_signature_ok(&flipped), ok_flipped != 0);
    }
    assert_eq!(out.list("blocksig").len(), 300);
    for r in out.list("errno") {
        let (s, e) = (num(&r[0]) as u8, num(&r[1]) as i32);
        assert_eq!(
            CmdStatus::from_raw(s).errno(),
            e,
            "cmd_status_to_err({s:#x})"
        );
    }
    for r in out.list("qpstate") {
        let v: Vec<u64> = r.iter().map(|s| num(s)).collect();
        let or_minus_one = |x: Option<u8>| x.map_or(0xffff_ffff, u64::from);
        assert_eq!(
            or_minus_one(qpc::state_to_ib(v[0] as u8)),
            v[1],
            "to_ib_qp_state({})",
            v[0]
        );
        assert_eq!(
            or_minus_one(qpc::state_from_ib(v[0] as u8)),
            v[2],
            "to_mlx5_state({})",
            v[0]
        );
    }
    assert_eq!(out.list("qpstate").len(), 16);
    for r in out.list("tables") {
        let v = num(&r[0]) as u16;
        assert_eq!(
            u64::from(hca_cap::pkey_table_len(v)),
            num(&r[1]),
            "mlx5_to_sw_pkey_sz({v})"
        );
        assert_eq!(
            u64::from(hca_cap::gid_table_len(v)),
            num(&r[2]),
            "mlx5_get_gid_table_len({v})"
        );
    }
}

/// Facts that live in mlx5_core's C code rather than in a header, checked
/// by finding the statement that establishes them.
#[test]
fn code_facts_match_the_kernel() {
    let Some(ksrc) = ksrc() else { return };
    let squash = |s: &str| s.split_whitespace().collect::<String>();
    let expect = |file: &str, stmt: &str, why: &str| {
        assert!(
            squash(&source(&ksrc, file)).contains(&squash(stmt)),
            "{file} no longer contains `{stmt}`: re-check {why}"
        );
    };
    let core = |f: &str| format!("drivers/net/ethernet/mellanox/mlx5/core/{f}");
    let cmd_c = core("cmd.c");
    // Initialization segment registers.
    expect(
        &cmd_c,
        "cmd->vars.log_sz = cmd_l >> 4 & 0xf;",
        "CmdqAddrLSz::log_sz",
    );
    expect(
        &cmd_c,
        "cmd->vars.log_stride = cmd_l & 0xf;",
        "CmdqAddrLSz::log_stride",
    );
    expect(
        &cmd_c,
        "cmd_h = (u32)((u64)(cmd->dma) >> 32);",
        "init_seg::cmdq_addr",
    );
    expect(
        &cmd_c,
        "if (cmd_l & 0xfff) {",
        "init_seg::cmdq_addr alignment",
    );
    expect(
        &cmd_c,
        "iowrite32be(cmd_l, &dev->iseg->cmdq_addr_l_sz);",
        "init_seg::cmdq_addr",
    );
    expect(
        &core("health.c"),
        "return (ioread32be(&dev->iseg->cmdq_addr_l_sz) >> 8) & 7;",
        "CmdqAddrLSz::nic_interface",
    );
    expect(
        &core("main.c"),
        "if (!(fw_initializing >> 31))",
        "init_seg::INITIALIZING_BIT",
    );
    expect(
        &core("lib/clock.c"),
        "(u64)timer_l | (u64)timer_h1 << 32;",
        "init_seg::internal_timer",
    );
    assert_eq!(init_seg::CmdqAddrLSz::decode(0x35).log_sz, 3);
    assert!(init_seg::initializing(1 << 31));
    // The command queue entry and its mailboxes.
    expect(
        &cmd_c,
        "lay->type = MLX5_PCI_CMD_XPORT;",
        "CmdLayout::request",
    );
    expect(
        &cmd_c,
        "lay->status_own = CMD_OWNER_HW;",
        "CmdLayout::request",
    );
    expect(
        &cmd_c,
        "if (!(own & CMD_OWNER_HW)) {",
        "cmd_queue::owned_by_hw",
    );
    expect(
        &cmd_c,
        "ent->status = ent->lay->status_own >> 1;",
        "CmdLayout::status",
    );
    expect(
        &cmd_c,
        "memcpy(lay->in, ent->in->first.data, sizeof(lay->in));",
        "cmd_queue::inline_data",
    );
    expect(
        &cmd_c,
        "lay->in_ptr = cpu_to_be64(ent->in->next->dma);",
        "CmdLayout::in_ptr",
    );
    expect(
        &cmd_c,
        "ent->lay->sig = ~xor8_buf(ent->lay, 0,  sizeof(*ent->lay));",
        "cmd_queue::sign_layout",
    );
    expect(
        &cmd_c,
        "iowrite32be(1 << ent->idx, &dev->iseg->cmd_dbell);",
        "cmd_queue::doorbell",
    );
    expect(
        &cmd_c,
        "return cmd->cmd_buf + (idx << cmd->vars.log_stride);",
        "cmd_queue::entry_offset",
    );
    expect(
        &cmd_c,
        "block->block_num = cpu_to_be32(n - i - 1);",
        "write_mailbox block_num (the list is built from its tail)",
    );
    expect(
        &cmd_c,
        "block->next = cpu_to_be64(tmp->next ? tmp->next->dma : 0);",
        "write_mailbox next",
    );
    expect(&cmd_c, "block->token = token;", "MailboxHeader::token");
    expect(
        &cmd_c,
        "copy = min_t(int, size, MLX5_CMD_DATA_BLOCK_SIZE);",
        "cmd_queue::mailbox_data",
    );
    expect(
        &cmd_c,
        "int align = roundup_pow_of_two(size);",
        "cmd_queue::MAILBOX_ALIGN",
    );
    assert_eq!(
        cmd_queue::MAILBOX_ALIGN,
        cmd_queue::MAILBOX_SIZE.next_power_of_two()
    );
    let mut lay = [0u8; 64];
    CmdLayout::request(&[1, 2, 3], 0, 16, 0, 1).encode(&mut lay);
    cmd_queue::sign_layout(&mut lay);
    assert_eq!(lay.iter().fold(0u8, |a, b| a ^ b), 0xff);
    // Capabilities.
    let main_c = core("main.c");
    expect(
        &main_c,
        "u16 opmod = (cap_type << 1) | (cap_mode & 0x01);",
        "hca_cap::query_op_mod",
    );
    expect(
        &main_c,
        "MLX5_SET(set_hca_cap_in, in, op_mod, opmod << 1);",
        "hca_cap::set_op_mod",
    );
    expect(
        &main_c,
        "MLX5_SET(cmd_hca_cap, set_hca_cap, cmdif_checksum, 0);",
        "hca_cap::CMDIF_CHECKSUM_DISABLED",
    );
    // Queues.
    expect(
        &core("eq.c"),
        "MLX5_ARRAY_SET64(create_eq_in, in, event_bitmask, i,",
        "cmd_eq::event_mask",
    );
    expect(
        &core("eq.c"),
        "eq->frag_buf.page_shift - MLX5_ADAPTER_PAGE_SHIFT);",
        "cmd_eq::ADAPTER_PAGE_SHIFT",
    );
    assert_eq!(cmd_eq::event_mask(&[EventType::Cmd])[0], 1 << 0xa);
    // Events.
    let page_c = core("pagealloc.c");
    expect(
        &page_c,
        "npages  = be32_to_cpu(eqe->data.req_pages.num_pages);",
        "PageRequestEqe::num_pages (signed)",
    );
    expect(&page_c, "s32 npages;", "PageRequestEqe::num_pages (signed)");
    expect(
        &cmd_c,
        "mlx5_cmd_comp_handler(dev, be32_to_cpu(eqe->data.cmd.vector), false);",
        "CmdEqe::vector",
    );
    expect(
        "drivers/infiniband/hw/mlx5/main.c",
        "u32 port = (eqe->data.port.port >> 4) & 0xf;",
        "PortChangeEqe::port",
    );
    // QP contexts as mlx5_ib fills them.
    let qp_c = "drivers/infiniband/hw/mlx5/qp.c";
    expect(
        qp_c,
        "MLX5_SET(qpc, qpc, log_rq_stride, qp->rq.wqe_shift - 4);",
        "qpc::Qpc::log_rq_stride",
    );
    expect(
        qp_c,
        "MLX5_SET(qpc, qpc, log_page_size, qp->buf.page_shift - MLX5_ADAPTER_PAGE_SHIFT);",
        "qpc::Qpc::log_page_size",
    );
}

/// `HcaCap` models every field mlx5_core's `handle_hca_cap` (and the vHCA
/// event helper it calls) writes.
#[test]
fn handle_hca_cap_fields_are_modelled() {
    let Some(ksrc) = ksrc() else { return };
    let main_c = source(&ksrc, "drivers/net/ethernet/mellanox/mlx5/core/main.c");
    let mut text = find_function(&main_c, "handle_hca_cap");
    text.push_str(&source(
        &ksrc,
        "drivers/net/ethernet/mellanox/mlx5/core/sf/vhca_event.c",
    ));
    let modelled: Vec<String> = facts::hca_cap().into_iter().map(|f| f.path).collect();
    let pattern = "MLX5_SET(cmd_hca_cap,";
    let mut seen = 0;
    for (at, _) in text.match_indices(pattern) {
        let args: Vec<&str> = text[at + pattern.len()..]
            .split(',')
            .take(2)
            .map(str::trim)
            .collect();
        let field = args[1];
        assert!(
            modelled.iter().any(|m| m == field),
            "handle_hca_cap sets cmd_hca_cap.{field}, which HcaCap does not model"
        );
        seen += 1;
    }
    assert!(
        seen >= 20,
        "found only {seen} MLX5_SET(cmd_hca_cap, ...) in handle_hca_cap"
    );
    println!("handle_hca_cap and the vHCA event helper set {seen} fields, all modelled");
}
