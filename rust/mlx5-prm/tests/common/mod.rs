// SPDX-License-Identifier: GPL-2.0

//! Helpers shared by the conformance tests: compiling and running a C
//! program, and reading the hex records it prints.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root (two levels above this crate).
pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Compiles `source` with the system C compiler (extra `flags` appended)
/// into Cargo's per-test temporary directory as `name`, runs it with `args`
/// and returns its standard output. Panics with the compiler's or the
/// program's diagnostics on failure.
pub(crate) fn compile_and_run(source: &Path, name: &str, flags: &[&str], args: &[&str]) -> String {
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mlx5-prm-conformance");
    std::fs::create_dir_all(&out_dir).expect("create the test's temporary directory");
    let exe = out_dir.join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let output = Command::new(&cc)
        .args(["-std=gnu11", "-O1", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(source)
        .args(flags)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run the C compiler `{cc}` ({e}): install gcc (make setup)")
        });
    assert!(
        output.status.success(),
        "compiling {} failed:\n{}",
        source.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let output = Command::new(&exe)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()));
    assert!(
        output.status.success(),
        "{} failed:\n{}",
        exe.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).expect("vector output is ASCII");
    assert!(
        text.lines().last() == Some("end"),
        "{} did not finish its output",
        exe.display()
    );
    text
}

/// Parses a hex number without prefix.
pub(crate) fn num(s: &str) -> u64 {
    u64::from_str_radix(s, 16).unwrap_or_else(|_| panic!("bad hex number {s:?}"))
}

/// Parses a hex byte string ("-" is the empty string).
pub(crate) fn bytes(s: &str) -> Vec<u8> {
    if s == "-" {
        return Vec::new();
    }
    assert!(s.len().is_multiple_of(2), "odd-length hex string {s:?}");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap_or_else(|_| panic!("bad hex {s:?}")))
        .collect()
}

/// The records of one kind (first word), split into their other words.
pub(crate) fn records<'a>(text: &'a str, kind: &'a str) -> impl Iterator<Item = Vec<&'a str>> + 'a {
    text.lines().filter_map(move |line| {
        let mut words = line.split(' ');
        (words.next() == Some(kind)).then(|| words.collect())
    })
}

/// Converts a byte vector to a fixed array, failing the test on a size
/// mismatch.
pub(crate) fn array<const N: usize>(v: &[u8]) -> [u8; N] {
    v.try_into()
        .unwrap_or_else(|_| panic!("expected {N} bytes, got {}", v.len()))
}

/// The byte range `[first, last]` that is non-zero in `b`, if any.
pub(crate) fn nonzero_span(b: &[u8]) -> Option<(usize, usize)> {
    let first = b.iter().position(|&x| x != 0)?;
    let last = b.iter().rposition(|&x| x != 0)?;
    Some((first, last))
}

/// Checks that the field an encoder wrote with all its bits set (`encoded`,
/// everything else zero) lies where the header says: at or after `offset`,
/// ending exactly at `offset + size` (fields are big-endian, so their lowest
/// byte is the last one).
pub(crate) fn check_field(what: &str, encoded: &[u8], offset: usize, size: usize) {
    let (first, last) =
        nonzero_span(encoded).unwrap_or_else(|| panic!("{what}: encoder wrote nothing"));
    assert!(
        first >= offset && last + 1 == offset + size,
        "{what}: our encoder puts the field at bytes {first}..={last}, the header at {offset}..{}",
        offset + size
    );
}

use mlx5_prm::cqe::{Cqe64, ErrCqe, OpOwn, CQE_SIZE};
use mlx5_prm::eqe::{Eqe, EqeData, DATA_SIZE, EQE_SIZE};
use mlx5_prm::opcode::{CqeOpcode, EventType, SendOpcode};
use mlx5_prm::wqe::{
    AtomicSeg, CtrlSeg, DataSeg, InlineHeader, MaskedAtomicSeg, MkeySeg, RaddrSeg, UmrCtrlSeg,
};

/// A control segment with every field zero (opcode NOP).
pub(crate) const ZERO_CTRL: CtrlSeg = CtrlSeg {
    opmod: 0,
    wqe_index: 0,
    opcode: SendOpcode::Nop,
    qpn: 0,
    ds: 0,
    signature: 0,
    fence_mode: 0,
    ce: 0,
    solicited: false,
    imm: 0,
};

/// `op_own` with every bit zero (opcode REQ, owner 0).
pub(crate) const ZERO_OP_OWN: OpOwn = OpOwn {
    opcode: CqeOpcode::Req,
    format: 0,
    solicited: false,
    owner: false,
};

/// The bytes our encoder writes for `layout` (our type, by a short name)
/// when the named fields (our field names) have all their bits set and
/// every other field is zero. With no fields, the encoding of the all-zero
/// value, whose length is the layout's size.
pub(crate) fn encoded_fields(layout: &str, fields: &[&str]) -> Vec<u8> {
    let has = |f: &str| fields.contains(&f);
    let known: &[&str] = match layout {
        "ctrl" => &[
            "opmod",
            "wqe_index",
            "opcode",
            "qpn",
            "ds",
            "signature",
            "fence_mode",
            "ce",
            "solicited",
            "imm",
        ],
        "raddr" => &["raddr", "rkey"],
        "atomic" => &["swap_add", "compare"],
        "masked_atomic" => &["swap_add", "compare", "swap_add_mask", "compare_mask"],
        "data" => &["byte_count", "lkey", "addr"],
        "inline" => &["byte_count"],
        "umr_ctrl" => &[
            "flags",
            "xlt_octowords",
            "xlt_offset",
            "mkey_mask",
            "xlt_offset_47_16",
        ],
        "mkey" => &[
            "status",
            "flags",
            "qpn_mkey7_0",
            "flags_pd",
            "start_addr",
            "len",
            "bsfs_octo_size",
            "xlt_oct_size",
            "log2_page_size",
        ],
        "cqe" => &[
            "ml_path",
            "slid",
            "grh",
            "sl",
            "src_qpn",
            "srqn_uidx",
            "imm_inval_rkey",
            "byte_cnt",
            "send_opcode",
            "qpn",
            "wqe_counter",
            "signature",
            "op_own",
        ],
        "err_cqe" => &[
            "srqn",
            "vendor_syndrome",
            "syndrome",
            "send_opcode",
            "qpn",
            "wqe_counter",
            "signature",
            "op_own",
        ],
        "eqe" => &[
            "event_type",
            "sub_type",
            "data",
            "comp.cqn",
            "cq_err.cqn",
            "cq_err.syndrome",
            "qp_srq.queue_type",
            "qp_srq.qp_srq_n",
            "signature",
            "owner",
        ],
        _ => panic!("no layout {layout}"),
    };
    for f in fields {
        assert!(known.contains(f), "{layout} has no field {f}");
    }
    let u8m = |f| if has(f) { u8::MAX } else { 0 };
    let u16m = |f| if has(f) { u16::MAX } else { 0 };
    let u32m = |f| if has(f) { u32::MAX } else { 0 };
    let u64m = |f| if has(f) { u64::MAX } else { 0 };
    let op_own = if has("op_own") {
        OpOwn::decode(0xff).unwrap()
    } else {
        ZERO_OP_OWN
    };
    match layout {
        "ctrl" => {
            let mut b = [0u8; CtrlSeg::SIZE];
            CtrlSeg {
                opmod: u8m("opmod"),
                wqe_index: u16m("wqe_index"),
                // The opcode with the most bits set.
                opcode: if has("opcode") {
                    SendOpcode::Mmo
                } else {
                    SendOpcode::Nop
                },
                qpn: u32m("qpn"),
                ds: u8m("ds"),
                signature: u8m("signature"),
                fence_mode: u8m("fence_mode"),
                ce: u8m("ce"),
                solicited: has("solicited"),
                imm: u32m("imm"),
            }
            .encode(&mut b);
            b.to_vec()
        }
        "raddr" => {
            let mut b = [0u8; RaddrSeg::SIZE];
            RaddrSeg {
                raddr: u64m("raddr"),
                rkey: u32m("rkey"),
            }
            .encode(&mut b);
            b.to_vec()
        }
        "atomic" => {
            let mut b = [0u8; AtomicSeg::SIZE];
            AtomicSeg {
                swap_add: u64m("swap_add"),
                compare: u64m("compare"),
            }
            .encode(&mut b);
            b.to_vec()
        }
        "masked_atomic" => {
            let mut b = [0u8; MaskedAtomicSeg::SIZE];
            MaskedAtomicSeg {
                swap_add: u64m("swap_add"),
                compare: u64m("compare"),
                swap_add_mask: u64m("swap_add_mask"),
                compare_mask: u64m("compare_mask"),
            }
            .encode(&mut b);
            b.to_vec()
        }
        "data" => {
            let mut b = [0u8; DataSeg::SIZE];
            DataSeg {
                byte_count: u32m("byte_count"),
                lkey: u32m("lkey"),
                addr: u64m("addr"),
            }
            .encode(&mut b);
            b.to_vec()
        }
        "inline" => {
            if fields.is_empty() {
                // The header always has bit 31 set; its size is what counts.
                return vec![0; InlineHeader::SIZE];
            }
            let mut b = [0u8; InlineHeader::SIZE];
            InlineHeader {
                byte_count: u32::MAX,
            }
            .encode(&mut b);
            b.to_vec()
        }
        "umr_ctrl" => {
            let mut b = [0u8; UmrCtrlSeg::SIZE];
            UmrCtrlSeg {
                flags: u8m("flags"),
                xlt_octowords: u16m("xlt_octowords"),
                xlt_offset: u16m("xlt_offset"),
                mkey_mask: u64m("mkey_mask"),
                xlt_offset_47_16: u32m("xlt_offset_47_16"),
            }
            .encode(&mut b);
            b.to_vec()
        }
        "mkey" => {
            let mut b = [0u8; MkeySeg::SIZE];
            MkeySeg {
                status: u8m("status"),
                flags: u8m("flags"),
                qpn_mkey7_0: u32m("qpn_mkey7_0"),
                flags_pd: u32m("flags_pd"),
                start_addr: u64m("start_addr"),
                len: u64m("len"),
                bsfs_octo_size: u32m("bsfs_octo_size"),
                xlt_oct_size: u32m("xlt_oct_size"),
                log2_page_size: u8m("log2_page_size"),
            }
            .encode(&mut b);
            b.to_vec()
        }
        "cqe" => {
            let mut b = [0u8; CQE_SIZE];
            Cqe64 {
                ml_path: u8m("ml_path"),
                slid: u16m("slid"),
                grh: u8m("grh"),
                sl: u8m("sl"),
                src_qpn: u32m("src_qpn"),
                srqn_uidx: u32m("srqn_uidx"),
                imm_inval_rkey: u32m("imm_inval_rkey"),
                byte_cnt: u32m("byte_cnt"),
                send_opcode: u8m("send_opcode"),
                qpn: u32m("qpn"),
                wqe_counter: u16m("wqe_counter"),
                signature: u8m("signature"),
                op_own,
            }
            .encode(&mut b);
            b.to_vec()
        }
        "err_cqe" => {
            let mut b = [0u8; CQE_SIZE];
            ErrCqe {
                srqn: u32m("srqn"),
                vendor_syndrome: u8m("vendor_syndrome"),
                syndrome: u8m("syndrome"),
                send_opcode: u8m("send_opcode"),
                qpn: u32m("qpn"),
                wqe_counter: u16m("wqe_counter"),
                signature: u8m("signature"),
                op_own,
            }
            .encode(&mut b);
            b.to_vec()
        }
        "eqe" => {
            let data = if has("data") {
                EqeData::Raw([0xff; DATA_SIZE])
            } else if has("cq_err.cqn") || has("cq_err.syndrome") {
                EqeData::CqError {
                    cqn: u32m("cq_err.cqn"),
                    syndrome: u8m("cq_err.syndrome"),
                }
            } else if has("qp_srq.queue_type") || has("qp_srq.qp_srq_n") {
                EqeData::QpSrq {
                    queue_type: u8m("qp_srq.queue_type"),
                    qp_srq_n: u32m("qp_srq.qp_srq_n"),
                }
            } else {
                EqeData::Comp {
                    cqn: u32m("comp.cqn"),
                }
            };
            let mut b = [0u8; EQE_SIZE];
            Eqe {
                // The event type with the most bits set.
                event_type: if has("event_type") {
                    EventType::ObjectChange
                } else {
                    EventType::Comp
                },
                sub_type: u8m("sub_type"),
                data,
                signature: u8m("signature"),
                owner: has("owner"),
            }
            .encode(&mut b);
            b.to_vec()
        }
        _ => unreachable!(),
    }
}

/// Checks the size and field placement of one header struct against our
/// layout: `fields` maps each header field (a member path as `offsetof`
/// takes it) to the fields of ours that make it up.
pub(crate) struct LayoutMap {
    /// The header's struct name (without `struct`).
    pub(crate) header: &'static str,
    /// Our layout's short name (see [`encoded_fields`]).
    pub(crate) ours: &'static str,
    /// Header field path, and our fields stored in it.
    pub(crate) fields: &'static [(&'static str, &'static [&'static str])],
}

impl LayoutMap {
    /// Our fields for a header field.
    pub(crate) fn ours_for(&self, header_field: &str) -> &'static [&'static str] {
        self.fields
            .iter()
            .find(|(h, _)| *h == header_field)
            .unwrap_or_else(|| panic!("{}.{header_field} has no counterpart here", self.header))
            .1
    }
}

/// Checks `size STRUCT N` and `offset STRUCT FIELD OFF SIZE` records against
/// the maps; returns how many facts were checked. Every struct and field
/// the program printed must be mapped, and every mapped field printed.
pub(crate) fn check_layouts(text: &str, maps: &[LayoutMap]) -> usize {
    let map_for = |s: &str| {
        maps.iter()
            .find(|m| m.header == s)
            .unwrap_or_else(|| panic!("struct {s} has no counterpart here"))
    };
    let mut checked = 0;
    for r in records(text, "size") {
        let m = map_for(r[0]);
        assert_eq!(
            encoded_fields(m.ours, &[]).len() as u64,
            num(r[1]),
            "sizeof(struct {})",
            r[0]
        );
        checked += 1;
    }
    let mut seen = Vec::new();
    for r in records(text, "offset") {
        let m = map_for(r[0]);
        let (offset, size) = (num(r[2]) as usize, num(r[3]) as usize);
        let encoded = encoded_fields(m.ours, m.ours_for(r[1]));
        check_field(&format!("{}.{}", r[0], r[1]), &encoded, offset, size);
        seen.push((r[0].to_string(), r[1].to_string()));
        checked += 1;
    }
    for m in maps {
        for (f, _) in m.fields {
            assert!(
                seen.iter().any(|(s, g)| s == m.header && g == f),
                "the program printed no offset for {}.{f}",
                m.header
            );
        }
    }
    checked
}
