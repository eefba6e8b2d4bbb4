// SPDX-License-Identifier: GPL-2.0

//! Conformance with rdma-core's `infiniband/mlx5dv.h`.
//!
//! `tests/conformance/mlx5dv_vectors.c` (at the repository root) is compiled
//! against the installed header and prints the header's constants, struct
//! offsets and sizes, and thousands of pseudo-random vectors built with the
//! header's own helpers and structs. Every test here checks one kind of
//! record: our encoders must produce the same bytes, our decoders must read
//! the same fields back, and our constants must equal the header's. The word
//! forms (`to_words`, `InlineHeader::words`, `recv_wqe_words`, the CQE word
//! views, the doorbell `to_bytes`) are held to the same vectors.
//!
//! A missing header is a failure, not a skip: `make setup` installs
//! libibverbs-dev.

mod common;

use std::path::Path;
use std::sync::OnceLock;

use common::{array, bytes, num, records, LayoutMap, ZERO_CTRL};
use mlx5_prm::cqe::{self, Cqe64, Cqe64Words, ErrCqe, ErrCqeWords, OpOwn};
use mlx5_prm::doorbell::{self, ArmCmd, CqArm, QpDbRec, UarCqDoorbell};
use mlx5_prm::error::Error;
use mlx5_prm::opcode::{CqeOpcode, CqeSyndrome, SendOpcode, VENDOR_SYNDROME_ODP_PFAULT};
use mlx5_prm::recv::{recv_wqe_words, write_recv_wqe, RecvSegs};
use mlx5_prm::wqe::{
    self, AtomicSeg, CtrlSeg, DataSeg, DatagramSeg, InlineHeader, RaddrSeg, CE_CQ_UPDATE,
    FENCE_MODE_INITIATOR_SMALL, FENCE_MODE_SMALL_AND_FENCE,
};
use mlx5_prm::{ring, sq};

const HEADER: &str = "/usr/include/infiniband/mlx5dv.h";
/// Vectors per record type.
const CASES: usize = 4000;

/// The program's output, produced once for all tests of this file.
fn vectors() -> &'static str {
    static OUT: OnceLock<String> = OnceLock::new();
    OUT.get_or_init(|| {
        assert!(
            Path::new(HEADER).exists(),
            "{HEADER} is missing: the mlx5 conformance tests need rdma-core's header \
             (Debian package libibverbs-dev); run `make setup` or \
             `apt-get install libibverbs-dev`"
        );
        let source = common::repo_root().join("tests/conformance/mlx5dv_vectors.c");
        common::compile_and_run(&source, "mlx5dv_vectors", &[], &[&format!("{CASES}")])
    })
}

/// Records of one kind, checking that the program produced all of them.
fn cases(kind: &'static str) -> Vec<Vec<&'static str>> {
    let v: Vec<_> = records(vectors(), kind).collect();
    assert_eq!(v.len(), CASES, "expected {CASES} `{kind}` vectors");
    v
}

/// Words in memory order as the bytes they hold.
fn flat<const W: usize>(words: [[u8; 8]; W]) -> Vec<u8> {
    words.concat()
}

fn ctrl_bytes(c: CtrlSeg) -> [u8; 16] {
    let mut b = [0u8; 16];
    c.encode(&mut b);
    b
}

/// Our value for a constant the header defines, or `None` if we have no
/// counterpart (which fails the test: every constant printed must be ours).
fn our_constant(name: &str) -> Option<u64> {
    use SendOpcode as S;
    let op = |o: S| Some(u64::from(u8::from(o)));
    let cqe_op = |o: CqeOpcode| Some(u64::from(u8::from(o)));
    let synd = |s: CqeSyndrome| Some(u64::from(u8::from(s)));
    // fm_ce_se flags are checked through the encoder: the byte a control
    // segment with only that setting gets at offset 11.
    let fm_ce_se = |c: CtrlSeg| Some(u64::from(ctrl_bytes(c)[11]));
    match name {
        "MLX5_OPCODE_NOP" => op(S::Nop),
        "MLX5_OPCODE_SEND_INVAL" => op(S::SendInval),
        "MLX5_OPCODE_RDMA_WRITE" => op(S::RdmaWrite),
        "MLX5_OPCODE_RDMA_WRITE_IMM" => op(S::RdmaWriteImm),
        "MLX5_OPCODE_SEND" => op(S::Send),
        "MLX5_OPCODE_SEND_IMM" => op(S::SendImm),
        "MLX5_OPCODE_TSO" => op(S::Lso),
        "MLX5_OPCODE_RDMA_READ" => op(S::RdmaRead),
        "MLX5_OPCODE_ATOMIC_CS" => op(S::AtomicCs),
        "MLX5_OPCODE_ATOMIC_FA" => op(S::AtomicFa),
        "MLX5_OPCODE_ATOMIC_MASKED_CS" => op(S::AtomicMaskedCs),
        "MLX5_OPCODE_ATOMIC_MASKED_FA" => op(S::AtomicMaskedFa),
        "MLX5_OPCODE_FMR" => op(S::Fmr),
        "MLX5_OPCODE_LOCAL_INVAL" => op(S::LocalInval),
        "MLX5_OPCODE_CONFIG_CMD" => op(S::ConfigCmd),
        "MLX5_OPCODE_SET_PSV" => op(S::SetPsv),
        "MLX5_OPCODE_UMR" => op(S::Umr),
        "MLX5_OPCODE_TAG_MATCHING" => op(S::TagMatching),
        "MLX5_OPCODE_FLOW_TBL_ACCESS" => op(S::FlowTblAccess),
        "MLX5_OPCODE_MMO" => op(S::Mmo),

        "MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR" => synd(CqeSyndrome::LocalLength),
        "MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR" => synd(CqeSyndrome::LocalQpOp),
        "MLX5_CQE_SYNDROME_LOCAL_PROT_ERR" => synd(CqeSyndrome::LocalProt),
        "MLX5_CQE_SYNDROME_WR_FLUSH_ERR" => synd(CqeSyndrome::WrFlush),
        "MLX5_CQE_SYNDROME_MW_BIND_ERR" => synd(CqeSyndrome::MwBind),
        "MLX5_CQE_SYNDROME_BAD_RESP_ERR" => synd(CqeSyndrome::BadResp),
        "MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR" => synd(CqeSyndrome::LocalAccess),
        "MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR" => synd(CqeSyndrome::RemoteInvalReq),
        "MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR" => synd(CqeSyndrome::RemoteAccess),
        "MLX5_CQE_SYNDROME_REMOTE_OP_ERR" => synd(CqeSyndrome::RemoteOp),
        "MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR" => synd(CqeSyndrome::TransportRetryExc),
        "MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR" => synd(CqeSyndrome::RnrRetryExc),
        "MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR" => synd(CqeSyndrome::RemoteAborted),
        "MLX5_CQE_VENDOR_SYNDROME_ODP_PFAULT" => Some(u64::from(VENDOR_SYNDROME_ODP_PFAULT)),

        "MLX5_CQE_OWNER_MASK" => Some(u64::from(cqe::OWNER_MASK)),
        "MLX5_CQE_REQ" => cqe_op(CqeOpcode::Req),
        "MLX5_CQE_RESP_WR_IMM" => cqe_op(CqeOpcode::RespWrImm),
        "MLX5_CQE_RESP_SEND" => cqe_op(CqeOpcode::RespSend),
        "MLX5_CQE_RESP_SEND_IMM" => cqe_op(CqeOpcode::RespSendImm),
        "MLX5_CQE_RESP_SEND_INV" => cqe_op(CqeOpcode::RespSendInv),
        "MLX5_CQE_RESIZE_CQ" => cqe_op(CqeOpcode::ResizeCq),
        "MLX5_CQE_NO_PACKET" => cqe_op(CqeOpcode::NoPacket),
        "MLX5_CQE_SIG_ERR" => cqe_op(CqeOpcode::SigErr),
        "MLX5_CQE_REQ_ERR" => cqe_op(CqeOpcode::ReqErr),
        "MLX5_CQE_RESP_ERR" => cqe_op(CqeOpcode::RespErr),
        "MLX5_CQE_INVALID" => cqe_op(CqeOpcode::Invalid),

        "MLX5_CQ_DOORBELL" => Some(doorbell::UAR_CQ_DOORBELL_OFFSET as u64),
        "MLX5_CQ_DB_REQ_NOT_SOL" => Some(u64::from(ArmCmd::Solicited.bits())),
        "MLX5_CQ_DB_REQ_NOT" => Some(u64::from(ArmCmd::Next.bits())),
        "MLX5_RCV_DBR" => Some((doorbell::QP_DBR_RECV_OFFSET / 4) as u64),
        "MLX5_SND_DBR" => Some((doorbell::QP_DBR_SEND_OFFSET / 4) as u64),
        "MLX5_INVALID_LKEY" => Some(u64::from(wqe::INVALID_LKEY)),
        "MLX5_WQE_CTRL_CQ_UPDATE" => fm_ce_se(CtrlSeg {
            ce: CE_CQ_UPDATE,
            ..ZERO_CTRL
        }),
        "MLX5_WQE_CTRL_SOLICITED" => fm_ce_se(CtrlSeg {
            solicited: true,
            ..ZERO_CTRL
        }),
        "MLX5_WQE_CTRL_FENCE" => fm_ce_se(CtrlSeg {
            fence_mode: FENCE_MODE_SMALL_AND_FENCE,
            ..ZERO_CTRL
        }),
        "MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE" => fm_ce_se(CtrlSeg {
            fence_mode: FENCE_MODE_INITIATOR_SMALL,
            ..ZERO_CTRL
        }),
        "MLX5_SEND_WQE_BB" => Some(wqe::WQEBB_SIZE as u64),
        "MLX5_SEND_WQE_SHIFT" => Some(u64::from(wqe::WQEBB_SHIFT)),
        "MLX5_INLINE_SEG" => Some(u64::from(wqe::INLINE_SEG)),
        _ => None,
    }
}

#[test]
fn constants_match_the_header() {
    let mut seen = 0;
    for r in records(vectors(), "const") {
        let (name, value) = (r[0], num(r[1]));
        let ours = our_constant(name)
            .unwrap_or_else(|| panic!("mlx5dv.h constant {name} has no counterpart here"));
        assert_eq!(ours, value, "{name}: ours {ours:#x}, mlx5dv.h {value:#x}");
        seen += 1;
    }
    // As many as mlx5dv_vectors.c prints: a lost line would go unnoticed.
    assert_eq!(seen, 59, "constants checked");
}

/// Where mlx5dv.h's structs keep the fields of ours.
const MLX5DV_LAYOUTS: &[LayoutMap] = &[
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
        header: "mlx5_wqe_data_seg",
        ours: "data",
        fields: &[
            ("byte_count", &["byte_count"]),
            ("lkey", &["lkey"]),
            ("addr", &["addr"]),
        ],
    },
    LayoutMap {
        header: "mlx5_wqe_inl_data_seg",
        ours: "inline",
        fields: &[("byte_count", &["byte_count"])],
    },
    LayoutMap {
        header: "mlx5_cqe64",
        ours: "cqe",
        fields: &[
            ("ml_path", &["ml_path"]),
            ("slid", &["slid"]),
            ("flags_rqpn", &["grh", "sl", "src_qpn"]),
            ("srqn_uidx", &["srqn_uidx"]),
            ("imm_inval_pkey", &["imm_inval_rkey"]),
            ("byte_cnt", &["byte_cnt"]),
            ("sop_drop_qpn", &["send_opcode", "qpn"]),
            ("wqe_counter", &["wqe_counter"]),
            ("signature", &["signature"]),
            ("op_own", &["op_own"]),
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
];

#[test]
fn struct_layouts_match_the_header() {
    let checked = common::check_layouts(vectors(), MLX5DV_LAYOUTS);
    assert_eq!(checked, 7 + 30, "layout facts checked");
}

#[test]
fn control_segments() {
    let mut unknown = 0;
    for r in cases("ctrl") {
        let [pi, opcode, opmod, qpn, fm_ce_se, ds, signature, imm] =
            std::array::from_fn(|i| num(r[i]));
        let b: [u8; 16] = array(&bytes(r[8]));
        let Ok(op) = SendOpcode::try_from(opcode as u8) else {
            assert_eq!(
                CtrlSeg::decode(&b),
                Err(Error::UnknownSendOpcode(opcode as u8))
            );
            unknown += 1;
            continue;
        };
        let seg = CtrlSeg {
            opmod: opmod as u8,
            wqe_index: pi as u16,
            opcode: op,
            qpn: qpn as u32,
            ds: ds as u8,
            signature: signature as u8,
            fence_mode: (fm_ce_se >> 5) as u8,
            ce: (fm_ce_se >> 2 & 3) as u8,
            solicited: fm_ce_se & 2 != 0,
            imm: imm as u32,
        };
        assert_eq!(ctrl_bytes(seg), b, "encode {seg:?}");
        assert_eq!(flat(seg.to_words()), b, "words of {seg:?}");
        assert_eq!(CtrlSeg::decode(&b), Ok(seg));
        assert_eq!(CtrlSeg::ds_of(&b), ds as u8 & 0x3f);
        assert_eq!(doorbell::send_doorbell(&b), b[..8]);
        assert_eq!(doorbell::send_doorbell_words(&seg.to_words()), b[..8]);
    }
    assert!(unknown > 0, "no vector exercised an unknown opcode");
}

#[test]
fn data_segments() {
    for r in cases("data") {
        let seg = DataSeg {
            byte_count: num(r[0]) as u32,
            lkey: num(r[1]) as u32,
            addr: num(r[2]),
        };
        let b: [u8; 16] = array(&bytes(r[3]));
        let mut ours = [0u8; 16];
        seg.encode(&mut ours);
        assert_eq!(ours, b, "encode {seg:?}");
        assert_eq!(flat(seg.to_words()), b, "words of {seg:?}");
        assert_eq!(DataSeg::decode(&b), seg);
    }
}

#[test]
fn remote_address_segments() {
    for r in cases("raddr") {
        let seg = RaddrSeg {
            raddr: num(r[0]),
            rkey: num(r[1]) as u32,
        };
        let b: [u8; 16] = array(&bytes(r[2]));
        let mut ours = [0u8; 16];
        seg.encode(&mut ours);
        assert_eq!(ours, b, "encode {seg:?}");
        assert_eq!(flat(seg.to_words()), b, "words of {seg:?}");
        assert_eq!(RaddrSeg::decode(&b), seg);
    }
}

/// UD address vectors: what `mlx5dv_set_dgram_seg` writes, byte for byte.
#[test]
fn datagram_segments() {
    for r in cases("dgram") {
        let [qkey, ext, dqpn, srsl, fl, rlid, tclass, hop, ggf] =
            std::array::from_fn(|i| num(r[i]));
        let seg = DatagramSeg {
            qkey: qkey as u32,
            ext: ext != 0,
            dqpn: dqpn as u32,
            stat_rate_sl: srsl as u8,
            fl_mlid: fl as u8,
            rlid: rlid as u16,
            rmac: array(&bytes(r[9])),
            tclass: tclass as u8,
            hop_limit: hop as u8,
            grh_gid_fl: ggf as u32,
            rgid: array(&bytes(r[10])),
        };
        let b: [u8; 48] = array(&bytes(r[11]));
        let mut ours = [0u8; 48];
        seg.encode(&mut ours);
        assert_eq!(ours, b, "encode {seg:?}");
        assert_eq!(DatagramSeg::decode(&b), seg);
        assert_eq!(seg.sl(), srsl as u8 & 0xf);
        assert_eq!(seg.grh(), ggf & 1 << 30 != 0);
    }
}

#[test]
fn atomic_segments() {
    for r in cases("atomic") {
        let seg = AtomicSeg {
            swap_add: num(r[0]),
            compare: num(r[1]),
        };
        let b: [u8; 16] = array(&bytes(r[2]));
        let mut ours = [0u8; 16];
        seg.encode(&mut ours);
        assert_eq!(ours, b, "encode {seg:?}");
        assert_eq!(flat(seg.to_words()), b, "words of {seg:?}");
        assert_eq!(AtomicSeg::decode(&b), seg);
    }
}

#[test]
fn inline_headers() {
    for r in cases("inl") {
        let h = InlineHeader {
            byte_count: num(r[0]) as u32,
        };
        let b: [u8; 4] = array(&bytes(r[1]));
        let mut ours = [0u8; 4];
        h.encode(&mut ours);
        assert_eq!(ours, b, "encode {h:?}");
        assert_eq!(h.words(&[]).first[..4], b, "header word of {h:?}");
        assert_eq!(InlineHeader::decode(&b), Ok(h));
        assert!(InlineHeader::is_inline(&b));
    }
}

#[test]
fn inline_payloads_in_the_sq_ring() {
    for r in cases("inlring") {
        let (ring_len, offset) = (num(r[0]) as usize, num(r[1]) as usize);
        let payload = bytes(r[2]);
        let expected = bytes(r[3]);
        let mut ring: Vec<u8> = (0..ring_len).map(|i| (i * 7 + 3) as u8).collect();
        let size = sq::write_inline(&mut ring, offset, &payload).unwrap();
        assert_eq!(size, wqe::inline_seg_size(payload.len()));
        assert_eq!(
            ring,
            expected,
            "inline of {} bytes at {offset}",
            payload.len()
        );
        // And back: header, then the payload across the wrap.
        let mut back = vec![0u8; size];
        sq::ring_read(&ring, offset, &mut back).unwrap();
        assert_eq!(wqe::inline_payload(&back, 0), Ok(&payload[..]));
        // The same segment stored word by word, wrapping as the SQ does.
        let mut ring: Vec<u8> = (0..ring_len).map(|i| (i * 7 + 3) as u8).collect();
        let w = InlineHeader {
            byte_count: payload.len() as u32,
        }
        .words(&payload);
        assert_eq!(w.words * 8, size);
        let zero = [0u8; 8];
        let words = [&w.first]
            .into_iter()
            .chain(w.middle)
            .chain(w.last.as_ref())
            .chain(std::iter::repeat(&zero));
        for (k, word) in words.take(w.words).enumerate() {
            let at = (offset + 8 * k) % ring_len;
            ring[at..at + 8].copy_from_slice(word);
        }
        assert_eq!(
            ring,
            expected,
            "inline of {} bytes at {offset}, by words",
            payload.len()
        );
    }
}

#[test]
fn receive_wqes() {
    for r in cases("recv") {
        let (capacity, nsegs) = (num(r[0]) as usize, num(r[1]) as usize);
        let slot = bytes(r[2]);
        let segs: Vec<DataSeg> = (0..nsegs)
            .map(|i| DataSeg {
                byte_count: num(r[3 + 3 * i]) as u32,
                lkey: num(r[4 + 3 * i]) as u32,
                addr: num(r[5 + 3 * i]),
            })
            .collect();
        let mut ours = vec![0xa5u8; capacity * DataSeg::SIZE];
        write_recv_wqe(&mut ours, &segs).unwrap();
        assert_eq!(ours, slot, "receive WQE of {nsegs} of {capacity} segments");
        let mut ours = vec![0xa5u8; capacity * DataSeg::SIZE];
        for (at, words) in recv_wqe_words(segs.iter().copied(), ours.len()).unwrap() {
            ours[at..at + DataSeg::SIZE].copy_from_slice(&flat(words));
        }
        assert_eq!(ours, slot, "receive WQE of {nsegs} of {capacity}, by words");
        let read: Vec<DataSeg> = RecvSegs::new(&slot).unwrap().collect();
        assert_eq!(read, segs);
    }
}

#[test]
fn success_cqes() {
    let mut unknown = 0;
    for r in cases("cqe") {
        let mode = r[0];
        let b: [u8; 64] = array(&bytes(r[1]));
        let [opcode, owner, se, format, srqn_uidx, imm, byte_cnt, sop, qpn, wqe_counter, signature, ml_path, slid, grh, sl, src_qpn] =
            std::array::from_fn(|i| num(r[2 + i]));
        assert_eq!(
            ring::cqe_sw_owned(b[cqe::OP_OWN_OFFSET], 0, 0),
            opcode != 0xf && owner == 0
        );
        assert_eq!(Cqe64Words::from_bytes(&b).decode(), Cqe64::decode(&b));
        let Ok(op) = CqeOpcode::try_from(opcode as u8) else {
            assert_eq!(
                Cqe64::decode(&b),
                Err(Error::UnknownCqeOpcode(opcode as u8))
            );
            unknown += 1;
            continue;
        };
        let c = Cqe64::decode(&b).unwrap();
        let want = Cqe64 {
            ml_path: ml_path as u8,
            slid: slid as u16,
            grh: grh as u8,
            sl: sl as u8,
            src_qpn: src_qpn as u32,
            srqn_uidx: srqn_uidx as u32,
            imm_inval_rkey: imm as u32,
            byte_cnt: byte_cnt as u32,
            send_opcode: sop as u8,
            qpn: qpn as u32,
            wqe_counter: wqe_counter as u16,
            signature: signature as u8,
            op_own: OpOwn {
                opcode: op,
                format: format as u8,
                solicited: se != 0,
                owner: owner != 0,
            },
        };
        assert_eq!(c, want, "decode {mode} CQE {}", r[1]);
        if mode == "enc" {
            let mut ours = [0u8; 64];
            want.encode(&mut ours);
            assert_eq!(ours, b, "encode {want:?}");
        }
    }
    assert!(unknown > 0, "no vector exercised an unknown CQE opcode");
}

#[test]
fn error_cqes() {
    for r in cases("errcqe") {
        let mode = r[0];
        let b: [u8; 64] = array(&bytes(r[1]));
        let [opcode, owner, srqn, vendor, syndrome, sop, qpn, wqe_counter, signature] =
            std::array::from_fn(|i| num(r[2 + i]));
        assert_eq!(ErrCqeWords::from_bytes(&b).decode(), ErrCqe::decode(&b));
        let Ok(op) = CqeOpcode::try_from(opcode as u8) else {
            assert_eq!(
                ErrCqe::decode(&b),
                Err(Error::UnknownCqeOpcode(opcode as u8))
            );
            continue;
        };
        let c = ErrCqe::decode(&b).unwrap();
        assert_eq!(c.op_own.opcode, op);
        assert_eq!(c.op_own.owner, owner != 0);
        let want = ErrCqe {
            srqn: srqn as u32,
            vendor_syndrome: vendor as u8,
            syndrome: syndrome as u8,
            send_opcode: sop as u8,
            qpn: qpn as u32,
            wqe_counter: wqe_counter as u16,
            signature: signature as u8,
            op_own: c.op_own,
        };
        assert_eq!(c, want, "decode {mode} error CQE {}", r[1]);
        if mode == "enc" {
            assert!(op.is_error());
            let mut ours = [0u8; 64];
            want.encode(&mut ours);
            assert_eq!(ours, b, "encode {want:?}");
        }
    }
}

#[test]
fn cqe_ownership() {
    for r in cases("owner") {
        let [log_size, ci, op_own, sw] = std::array::from_fn(|i| num(r[i]));
        assert_eq!(
            ring::cqe_sw_owned(op_own as u8, ci as u32, log_size as u32),
            sw != 0,
            "op_own {op_own:#x} at ci {ci:#x} of 2^{log_size}"
        );
    }
}

#[test]
fn qp_doorbell_records() {
    for r in cases("qpdbr") {
        let rec = QpDbRec {
            recv_counter: num(r[0]) as u16,
            send_counter: num(r[1]) as u16,
        };
        let b: [u8; 8] = array(&bytes(r[2]));
        let mut ours = [0u8; 8];
        rec.encode(&mut ours);
        assert_eq!(ours, b, "encode {rec:?}");
        assert_eq!(QpDbRec::decode(&b), Ok(rec));
        let send = doorbell::QP_DBR_SEND_OFFSET;
        assert_eq!(doorbell::counter_word(rec.send_counter), b[send..send + 4]);
        let recv = doorbell::QP_DBR_RECV_OFFSET;
        assert_eq!(doorbell::counter_word(rec.recv_counter), b[recv..recv + 4]);
    }
}

#[test]
fn cq_arm_doorbells() {
    for r in cases("cqarm") {
        let [sn, solicited, ci, cqn] = std::array::from_fn(|i| num(r[i]));
        let arm = CqArm {
            sn: sn as u8,
            cmd: if solicited != 0 {
                ArmCmd::Solicited
            } else {
                ArmCmd::Next
            },
            ci: ci as u32,
        };
        let word: [u8; 4] = array(&bytes(r[4]));
        let uar: [u8; 8] = array(&bytes(r[5]));
        let mut ours = [0u8; 4];
        arm.encode(&mut ours);
        assert_eq!(ours, word, "ARM word of {arm:?}");
        assert_eq!(arm.to_bytes(), word, "ARM word of {arm:?}, in a register");
        let db = UarCqDoorbell {
            arm,
            cqn: cqn as u32,
        };
        let mut ours = [0u8; 8];
        db.encode(&mut ours);
        assert_eq!(ours, uar, "UAR CQ doorbell {db:?}");
        assert_eq!(db.to_bytes(), uar, "UAR CQ doorbell {db:?}, in a register");
        let masked = CqArm {
            ci: ring::ci24(arm.ci),
            ..arm
        };
        assert_eq!(CqArm::decode(&word), Ok(masked));
        assert_eq!(
            UarCqDoorbell::decode(&uar),
            Ok(UarCqDoorbell { arm: masked, ..db })
        );
    }
}
