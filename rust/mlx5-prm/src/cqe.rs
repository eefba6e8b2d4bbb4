// SPDX-License-Identifier: GPL-2.0

//! 64-byte completion queue entries: the success layout (`mlx5_cqe64`) and
//! the error layout (`mlx5_err_cqe`).
//!
//! Both end in the same 8 bytes: QPN word at 56, WQE counter at 60,
//! signature at 62 and `op_own` at 63. Poll by reading `op_own` alone
//! (at [`OP_OWN_OFFSET`]), checking it with
//! [`super::ring::cqe_sw_owned`], issuing a read barrier, and only then
//! decoding the whole entry with [`Cqe64::decode`] or, when
//! [`CqeOpcode::is_error`], [`ErrCqe::decode`]. A device writes the entry
//! body first and `op_own` last, after a write barrier.
//!
//! [`Cqe64Words`] and [`ErrCqeWords`] are the same two layouts read as
//! big-endian 64-bit words: a poller that loads the CQE from the CQ a word
//! at a time hands them the words, and they load only those that hold the
//! fields they report (five and three of the eight) and take the fields
//! apart in registers, giving the values `decode` gives, without copying the
//! entry out first.

use super::bytes::{
    get_u16, get_u32, get_u8, put_u16, put_u32, put_u8, word_at, word_u16, word_u32, word_u8,
};
use super::error::Error;
use super::opcode::CqeOpcode;

/// Size of a CQE in bytes (`sizeof(struct mlx5_cqe64)`).
pub const CQE_SIZE: usize = 64;
/// Size of a CQE in 8-byte words, the unit of [`Cqe64Words::load`] and
/// [`ErrCqeWords::load`].
pub const CQE_WORDS: usize = CQE_SIZE / 8;
/// Offset of `op_own` (`mlx5_cqe64.op_own`, `mlx5_err_cqe.op_own`).
pub const OP_OWN_OFFSET: usize = 63;
/// The owner bit of `op_own` (`MLX5_CQE_OWNER_MASK`).
pub const OWNER_MASK: u8 = 1;

/// `flags_rqpn` bits 29:28 ([`Cqe64::grh`]): the packet had no GRH (or,
/// on InfiniBand, no network header at all).
pub const GRH_NONE: u8 = 0;
/// `flags_rqpn` bits 29:28: the packet's network header (GRH, or the IPv6
/// or IPv4 header of RoCE v2) is in the first 40 bytes of the receive
/// buffer. mlx5_ib and rdma-core set `IB_WC_GRH` for any non-zero value.
pub const GRH_IN_BUFFER: u8 = 1;
/// `flags_rqpn` bits 29:28: the GRH is in the CQE itself (128-byte CQEs
/// only; never written by rmlx5's devices).
pub const GRH_IN_CQE: u8 = 2;

/// `flags_rqpn` bits 25:24 of a responder CQE on an Ethernet (RoCE) port
/// ([`Cqe64::roce_l3_header_type`]): RoCE v1, a GRH
/// (`MLX5_CQE_ROCE_L3_HEADER_TYPE_GRH`; mlx5_ib reports
/// `RDMA_NETWORK_ROCE_V1`).
pub const ROCE_L3_HEADER_TYPE_GRH: u8 = 0x0;
/// RoCE v2 over IPv6 (`MLX5_CQE_ROCE_L3_HEADER_TYPE_IPV6`;
/// `RDMA_NETWORK_IPV6`).
pub const ROCE_L3_HEADER_TYPE_IPV6: u8 = 0x1;
/// RoCE v2 over IPv4 (`MLX5_CQE_ROCE_L3_HEADER_TYPE_IPV4`;
/// `RDMA_NETWORK_IPV4`).
pub const ROCE_L3_HEADER_TYPE_IPV4: u8 = 0x2;

/// The last byte of a CQE (`mlx5_cqe64.op_own`): opcode (7:4), format (3:2),
/// solicited event (1), owner (0). Read by mlx5dv.h's
/// `mlx5dv_get_cqe_opcode`, `mlx5dv_get_cqe_format`, `mlx5dv_get_cqe_se` and
/// `mlx5dv_get_cqe_owner`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpOwn {
    /// CQE opcode: bits 7:4.
    pub opcode: CqeOpcode,
    /// CQE format, 2 bits (0 for a plain 64-byte CQE): bits 3:2.
    pub format: u8,
    /// The completed receive was a solicited event: bit 1.
    pub solicited: bool,
    /// Owner bit, the pass parity of the producer index: bit 0.
    pub owner: bool,
}

impl OpOwn {
    /// The `op_own` byte.
    pub fn encode(&self) -> u8 {
        u8::from(self.opcode) << 4
            | (self.format & 0x3) << 2
            | u8::from(self.solicited) << 1
            | u8::from(self.owner)
    }

    /// Splits an `op_own` byte.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownCqeOpcode`] if bits 7:4 are not a known CQE opcode.
    #[inline]
    pub fn decode(op_own: u8) -> Result<Self, Error> {
        Ok(OpOwn {
            opcode: OpOwn::opcode_of(op_own)?,
            format: (op_own >> 2) & 0x3,
            solicited: OpOwn::solicited_of(op_own),
            owner: op_own & OWNER_MASK != 0,
        })
    }

    /// The opcode of an `op_own` byte alone (bits 7:4), what
    /// [`OpOwn::decode`] reports as `opcode`: for a poller that needs no
    /// other field before it knows the CQE's layout.
    ///
    /// # Errors
    ///
    /// As for [`OpOwn::decode`].
    #[inline]
    pub fn opcode_of(op_own: u8) -> Result<CqeOpcode, Error> {
        CqeOpcode::try_from(op_own >> 4)
    }

    /// The solicited-event bit of an `op_own` byte alone (bit 1), what
    /// [`OpOwn::decode`] reports as `solicited`.
    #[inline]
    pub fn solicited_of(op_own: u8) -> bool {
        op_own & 0x2 != 0
    }
}

/// A successful completion (`struct mlx5_cqe64`), requester or responder.
///
/// | byte | field |
/// |---|---|
/// | 17 | `ml_path`: the DLID path bits of the receiving port (responder) |
/// | 22 | `slid`: the sender's LID (responder, InfiniBand link layer) |
/// | 24 | `flags_rqpn`: GRH location (29:28), SL (27:24) on InfiniBand or RoCE L3 header type (25:24) on Ethernet, source QPN (23:0) (responder) |
/// | 32 | `srqn_uidx`: SRQ number or user index (23:0) |
/// | 36 | `imm_inval_pkey`: immediate data, invalidated rkey, or a QP1 receive's P_Key |
/// | 44 | `byte_cnt` |
/// | 56 | `sop_drop_qpn`: send opcode in requester CQEs (31:24), QPN (23:0) |
/// | 60 | `wqe_counter` |
/// | 62 | `signature` |
/// | 63 | `op_own` |
///
/// The other bytes of 0..32 (Ethernet offloads: checksum, RSS hash, LRO,
/// VLAN, header types; tag matching; the striding-RQ `wqe_id`),
/// `flags_rqpn` bits 31:30, and 40..44, 48..56 (application tag and
/// timestamp) are not modelled: `encode` zeroes them and `decode` ignores
/// them. Documentation/mlx5-formats.md says why each is left at zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cqe64 {
    /// The receiving port's DLID path bits (the low LMC bits of the LID the
    /// packet was addressed to); 0 with LMC 0 and in requester CQEs:
    /// `ml_path`. rdma-core reports bits 6:0 as `wc.dlid_path_bits`.
    pub ml_path: u8,
    /// The sender's LID in a responder CQE on an InfiniBand port (0 in
    /// requester CQEs): `slid`.
    pub slid: u16,
    /// Where the received packet's GRH went, 2 bits ([`GRH_NONE`],
    /// [`GRH_IN_BUFFER`], [`GRH_IN_CQE`]); rdma-core and mlx5_ib set
    /// `IB_WC_GRH` when non-zero: `flags_rqpn` bits 29:28.
    pub grh: u8,
    /// The service level the packet travelled on, 4 bits (responder CQEs on
    /// an InfiniBand port): `flags_rqpn` bits 27:24. On an Ethernet (RoCE)
    /// port the same bits hold 0 in 27:26 and the RoCE L3 header type in
    /// 25:24 (`ROCE_L3_HEADER_TYPE_*`, read with
    /// [`Cqe64::roce_l3_header_type`]).
    pub sl: u8,
    /// The sender's QP number, 24 bits (responder CQEs): `flags_rqpn` bits
    /// 23:0.
    pub src_qpn: u32,
    /// SRQ number or user index, 24 bits: `srqn_uidx` bits 23:0.
    pub srqn_uidx: u32,
    /// Immediate data (RESP_WR_IMM, RESP_SEND_IMM), the invalidated rkey
    /// (RESP_SEND_INV), or, in a RESP_SEND on QP1, the packet's P_Key in
    /// bits 15:0 (mlx5_ib looks its index up with `ib_find_cached_pkey`;
    /// read with [`Cqe64::pkey`]); its big-endian bytes are
    /// `imm_inval_pkey`. rdma-core, which never sees QP1, reports bits 15:0
    /// of a RESP_SEND as `pkey_index`, so a device leaves them 0 there.
    pub imm_inval_rkey: u32,
    /// Bytes transferred (responder: bytes received; requester RDMA read and
    /// atomics: bytes read): `byte_cnt`.
    pub byte_cnt: u32,
    /// In a requester CQE, the opcode of the completed send WQE (convert
    /// with [`super::opcode::SendOpcode::try_from`]); 0 in responder CQEs:
    /// `sop_drop_qpn` bits 31:24.
    pub send_opcode: u8,
    /// QP number, 24 bits: `sop_drop_qpn` bits 23:0.
    pub qpn: u32,
    /// WQE index of the completed send WQE (requester), or the receive
    /// queue counter of the consumed receive WQE (responder): `wqe_counter`.
    pub wqe_counter: u16,
    /// CQE signature byte: `signature`.
    pub signature: u8,
    /// Opcode, format, solicited and owner bits: `op_own`.
    pub op_own: OpOwn,
}

/// The DLID path bits of an `ml_path` byte: bits 6:0, what rdma-core
/// reports as `ibv_wc.dlid_path_bits`.
#[inline]
fn dlid_path_bits(ml_path: u8) -> u8 {
    ml_path & 0x7f
}

impl Cqe64 {
    /// The DLID path bits of a responder CQE: [`Cqe64::ml_path`] bits 6:0,
    /// what rdma-core reports as `ibv_wc.dlid_path_bits`.
    pub fn dlid_path_bits(&self) -> u8 {
        dlid_path_bits(self.ml_path)
    }

    /// The RoCE L3 header type of a responder CQE on an Ethernet port
    /// (`ROCE_L3_HEADER_TYPE_*`): `flags_rqpn` bits 25:24, the low two bits
    /// of [`Cqe64::sl`], as mlx5_ib's `handle_responder` reads them.
    pub fn roce_l3_header_type(&self) -> u8 {
        self.sl & 0x3
    }

    /// The P_Key of a QP1 RESP_SEND: bits 15:0 of `imm_inval_pkey`
    /// (mlx5_ib's `be32_to_cpu(cqe->pkey) & 0xffff`).
    pub fn pkey(&self) -> u16 {
        self.imm_inval_rkey as u16
    }

    /// Writes the CQE into `out`, `op_own` included (a device copies bytes
    /// 0..63 to the CQ first and byte 63 last).
    pub fn encode(&self, out: &mut [u8; CQE_SIZE]) {
        *out = [0; CQE_SIZE];
        put_u8(out, 17, self.ml_path);
        put_u16(out, 22, self.slid);
        put_u32(
            out,
            24,
            u32::from(self.grh & 0x3) << 28
                | u32::from(self.sl & 0xf) << 24
                | (self.src_qpn & 0xff_ffff),
        );
        put_u32(out, 32, self.srqn_uidx & 0xff_ffff);
        put_u32(out, 36, self.imm_inval_rkey);
        put_u32(out, 44, self.byte_cnt);
        put_u32(
            out,
            56,
            u32::from(self.send_opcode) << 24 | (self.qpn & 0xff_ffff),
        );
        put_u16(out, 60, self.wqe_counter);
        put_u8(out, 62, self.signature);
        put_u8(out, 63, self.op_own.encode());
    }

    /// Reads a CQE with the success layout from `b`.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownCqeOpcode`] if the opcode is unknown.
    pub fn decode(b: &[u8; CQE_SIZE]) -> Result<Self, Error> {
        let sop_drop_qpn = get_u32(b, 56);
        let flags_rqpn = get_u32(b, 24);
        Ok(Cqe64 {
            ml_path: get_u8(b, 17),
            slid: get_u16(b, 22),
            grh: ((flags_rqpn >> 28) & 0x3) as u8,
            sl: ((flags_rqpn >> 24) & 0xf) as u8,
            src_qpn: flags_rqpn & 0xff_ffff,
            srqn_uidx: get_u32(b, 32) & 0xff_ffff,
            imm_inval_rkey: get_u32(b, 36),
            byte_cnt: get_u32(b, 44),
            send_opcode: (sop_drop_qpn >> 24) as u8,
            qpn: sop_drop_qpn & 0xff_ffff,
            wqe_counter: get_u16(b, 60),
            signature: get_u8(b, 62),
            op_own: OpOwn::decode(get_u8(b, 63))?,
        })
    }
}

/// A completion in error (`struct mlx5_err_cqe`; opcode REQ_ERR or
/// RESP_ERR).
///
/// | byte | field |
/// |---|---|
/// | 32 | `srqn` (23:0) |
/// | 54 | `vendor_err_synd` |
/// | 55 | `syndrome` |
/// | 56 | `s_wqe_opcode_qpn`: send opcode (31:24), QPN (23:0) |
/// | 60 | `wqe_counter` |
/// | 62 | `signature` |
/// | 63 | `op_own` |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrCqe {
    /// SRQ number, 24 bits: `srqn` bits 23:0.
    pub srqn: u32,
    /// Vendor-specific syndrome: `vendor_err_synd`.
    pub vendor_syndrome: u8,
    /// Why the work request failed (convert with
    /// [`super::opcode::CqeSyndrome::try_from`]): `syndrome`.
    pub syndrome: u8,
    /// Opcode of the failed send WQE (requester errors):
    /// `s_wqe_opcode_qpn` bits 31:24.
    pub send_opcode: u8,
    /// QP number, 24 bits: `s_wqe_opcode_qpn` bits 23:0.
    pub qpn: u32,
    /// WQE index (requester) or receive counter (responder) of the failed
    /// WQE: `wqe_counter`.
    pub wqe_counter: u16,
    /// CQE signature byte: `signature`.
    pub signature: u8,
    /// Opcode, format, solicited and owner bits: `op_own`.
    pub op_own: OpOwn,
}

impl ErrCqe {
    /// Writes the CQE into `out`, `op_own` included.
    pub fn encode(&self, out: &mut [u8; CQE_SIZE]) {
        *out = [0; CQE_SIZE];
        put_u32(out, 32, self.srqn & 0xff_ffff);
        put_u8(out, 54, self.vendor_syndrome);
        put_u8(out, 55, self.syndrome);
        put_u32(
            out,
            56,
            u32::from(self.send_opcode) << 24 | (self.qpn & 0xff_ffff),
        );
        put_u16(out, 60, self.wqe_counter);
        put_u8(out, 62, self.signature);
        put_u8(out, 63, self.op_own.encode());
    }

    /// Reads a CQE with the error layout from `b`.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownCqeOpcode`] if the opcode is unknown.
    pub fn decode(b: &[u8; CQE_SIZE]) -> Result<Self, Error> {
        let s_wqe_opcode_qpn = get_u32(b, 56);
        Ok(ErrCqe {
            srqn: get_u32(b, 32) & 0xff_ffff,
            vendor_syndrome: get_u8(b, 54),
            syndrome: get_u8(b, 55),
            send_opcode: (s_wqe_opcode_qpn >> 24) as u8,
            qpn: s_wqe_opcode_qpn & 0xff_ffff,
            wqe_counter: get_u16(b, 60),
            signature: get_u8(b, 62),
            op_own: OpOwn::decode(get_u8(b, 63))?,
        })
    }
}

/// Word `index` of a CQE as a host integer, through `word`, which returns
/// the entry's word `index` (bytes `8 * index` on) as its 8 bytes in memory
/// order.
#[inline]
fn be_word(word: &mut impl FnMut(usize) -> [u8; 8], index: usize) -> u64 {
    u64::from_be_bytes(word(index))
}

// The last word of a CQE (bytes 56..64) has the same fields in both
// layouts: QPN word, WQE counter, signature and op_own.

/// `sop_drop_qpn` / `s_wqe_opcode_qpn` (byte 56) from word 7.
#[inline]
fn opcode_qpn(w7: u64) -> u32 {
    word_u32::<56, 56>(w7)
}

/// A successful completion (`struct mlx5_cqe64`, the layout of [`Cqe64`])
/// read as big-endian 64-bit words: words 2 to 5 (bytes 16..48) and 7
/// (bytes 56..64), which hold every field [`Cqe64`] models. Each accessor
/// returns the value of the [`Cqe64`] field of the same name that
/// [`Cqe64::decode`] gives for the same bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cqe64Words {
    /// Bytes 16..24: `ml_path` (17), `slid` (22).
    w2: u64,
    /// Bytes 24..32: `flags_rqpn` (24).
    w3: u64,
    /// Bytes 32..40: `srqn_uidx` (32), `imm_inval_pkey` (36).
    w4: u64,
    /// Bytes 40..48: `byte_cnt` (44).
    w5: u64,
    /// Bytes 56..64: `sop_drop_qpn` (56), `wqe_counter` (60), `signature`
    /// (62), `op_own` (63).
    w7: u64,
}

impl Cqe64Words {
    /// Loads the words the fields sit in through `word`, which returns word
    /// `index` (0 to [`CQE_WORDS`] - 1) of the entry as its 8 bytes in
    /// memory order, and is called once for each of words 2, 3, 4, 5 and 7,
    /// in that order. Poll as for [`Cqe64::decode`]: only after the owner
    /// check of `op_own` and a read barrier.
    #[inline]
    pub fn load(mut word: impl FnMut(usize) -> [u8; 8]) -> Self {
        Cqe64Words {
            w2: be_word(&mut word, 2),
            w3: be_word(&mut word, 3),
            w4: be_word(&mut word, 4),
            w5: be_word(&mut word, 5),
            w7: be_word(&mut word, 7),
        }
    }

    /// The words of the CQE in `b`.
    #[inline]
    pub fn from_bytes(b: &[u8; CQE_SIZE]) -> Self {
        Self::load(|index| word_at(b, index))
    }

    /// [`Cqe64::ml_path`]: `ml_path`, byte 17.
    #[inline]
    pub fn ml_path(&self) -> u8 {
        word_u8::<16, 17>(self.w2)
    }

    /// [`Cqe64::dlid_path_bits`]: `ml_path` bits 6:0.
    #[inline]
    pub fn dlid_path_bits(&self) -> u8 {
        dlid_path_bits(self.ml_path())
    }

    /// [`Cqe64::slid`]: `slid`, byte 22.
    #[inline]
    pub fn slid(&self) -> u16 {
        word_u16::<16, 22>(self.w2)
    }

    /// `flags_rqpn`, byte 24.
    #[inline]
    fn flags_rqpn(&self) -> u32 {
        word_u32::<24, 24>(self.w3)
    }

    /// [`Cqe64::grh`]: `flags_rqpn` bits 29:28.
    #[inline]
    pub fn grh(&self) -> u8 {
        ((self.flags_rqpn() >> 28) & 0x3) as u8
    }

    /// [`Cqe64::sl`]: `flags_rqpn` bits 27:24.
    #[inline]
    pub fn sl(&self) -> u8 {
        ((self.flags_rqpn() >> 24) & 0xf) as u8
    }

    /// [`Cqe64::src_qpn`]: `flags_rqpn` bits 23:0.
    #[inline]
    pub fn src_qpn(&self) -> u32 {
        self.flags_rqpn() & 0xff_ffff
    }

    /// [`Cqe64::roce_l3_header_type`]: `flags_rqpn` bits 25:24.
    #[inline]
    pub fn roce_l3_header_type(&self) -> u8 {
        ((self.flags_rqpn() >> 24) & 0x3) as u8
    }

    /// [`Cqe64::srqn_uidx`]: `srqn_uidx` bits 23:0, byte 32.
    #[inline]
    pub fn srqn_uidx(&self) -> u32 {
        word_u32::<32, 32>(self.w4) & 0xff_ffff
    }

    /// [`Cqe64::imm_inval_rkey`]: `imm_inval_pkey`, byte 36.
    #[inline]
    pub fn imm_inval_rkey(&self) -> u32 {
        word_u32::<32, 36>(self.w4)
    }

    /// [`Cqe64::pkey`]: `imm_inval_pkey` bits 15:0, byte 38.
    #[inline]
    pub fn pkey(&self) -> u16 {
        word_u16::<32, 38>(self.w4)
    }

    /// [`Cqe64::byte_cnt`]: `byte_cnt`, byte 44.
    #[inline]
    pub fn byte_cnt(&self) -> u32 {
        word_u32::<40, 44>(self.w5)
    }

    /// [`Cqe64::send_opcode`]: `sop_drop_qpn` bits 31:24.
    #[inline]
    pub fn send_opcode(&self) -> u8 {
        (opcode_qpn(self.w7) >> 24) as u8
    }

    /// [`Cqe64::qpn`]: `sop_drop_qpn` bits 23:0.
    #[inline]
    pub fn qpn(&self) -> u32 {
        opcode_qpn(self.w7) & 0xff_ffff
    }

    /// [`Cqe64::wqe_counter`]: `wqe_counter`, byte 60.
    #[inline]
    pub fn wqe_counter(&self) -> u16 {
        word_u16::<56, 60>(self.w7)
    }

    /// [`Cqe64::signature`]: `signature`, byte 62.
    #[inline]
    pub fn signature(&self) -> u8 {
        word_u8::<56, 62>(self.w7)
    }

    /// [`Cqe64::op_own`]: `op_own`, byte 63.
    ///
    /// # Errors
    ///
    /// As for [`OpOwn::decode`].
    #[inline]
    pub fn op_own(&self) -> Result<OpOwn, Error> {
        OpOwn::decode(word_u8::<56, OP_OWN_OFFSET>(self.w7))
    }

    /// The same entry read with the error layout, for a poller that loaded
    /// these words before finding an error opcode in `op_own`: `mlx5_err_cqe`
    /// keeps its fields in words 4 and 7, which are at hand, and 6, which
    /// `word` is called once to load (as for [`Cqe64Words::load`]).
    #[inline]
    pub fn err_words(&self, mut word: impl FnMut(usize) -> [u8; 8]) -> ErrCqeWords {
        ErrCqeWords {
            w4: self.w4,
            w6: be_word(&mut word, 6),
            w7: self.w7,
        }
    }

    /// Every field: what [`Cqe64::decode`] returns for the same bytes.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownCqeOpcode`] if the opcode is unknown.
    pub fn decode(&self) -> Result<Cqe64, Error> {
        Ok(Cqe64 {
            ml_path: self.ml_path(),
            slid: self.slid(),
            grh: self.grh(),
            sl: self.sl(),
            src_qpn: self.src_qpn(),
            srqn_uidx: self.srqn_uidx(),
            imm_inval_rkey: self.imm_inval_rkey(),
            byte_cnt: self.byte_cnt(),
            send_opcode: self.send_opcode(),
            qpn: self.qpn(),
            wqe_counter: self.wqe_counter(),
            signature: self.signature(),
            op_own: self.op_own()?,
        })
    }
}

/// A completion in error (`struct mlx5_err_cqe`, the layout of [`ErrCqe`])
/// read as big-endian 64-bit words: words 4 (bytes 32..40), 6 (48..56) and
/// 7 (56..64), which hold every field [`ErrCqe`] models. Each accessor
/// returns the value of the [`ErrCqe`] field of the same name that
/// [`ErrCqe::decode`] gives for the same bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrCqeWords {
    /// Bytes 32..40: `srqn` (32).
    w4: u64,
    /// Bytes 48..56: `vendor_err_synd` (54), `syndrome` (55).
    w6: u64,
    /// Bytes 56..64: `s_wqe_opcode_qpn` (56), `wqe_counter` (60),
    /// `signature` (62), `op_own` (63).
    w7: u64,
}

impl ErrCqeWords {
    /// Loads the words the fields sit in through `word` (as for
    /// [`Cqe64Words::load`]), called once for each of words 4, 6 and 7, in
    /// that order.
    #[inline]
    pub fn load(mut word: impl FnMut(usize) -> [u8; 8]) -> Self {
        ErrCqeWords {
            w4: be_word(&mut word, 4),
            w6: be_word(&mut word, 6),
            w7: be_word(&mut word, 7),
        }
    }

    /// The words of the CQE in `b`.
    #[inline]
    pub fn from_bytes(b: &[u8; CQE_SIZE]) -> Self {
        Self::load(|index| word_at(b, index))
    }

    /// [`ErrCqe::srqn`]: `srqn` bits 23:0, byte 32.
    #[inline]
    pub fn srqn(&self) -> u32 {
        word_u32::<32, 32>(self.w4) & 0xff_ffff
    }

    /// [`ErrCqe::vendor_syndrome`]: `vendor_err_synd`, byte 54.
    #[inline]
    pub fn vendor_syndrome(&self) -> u8 {
        word_u8::<48, 54>(self.w6)
    }

    /// [`ErrCqe::syndrome`]: `syndrome`, byte 55.
    #[inline]
    pub fn syndrome(&self) -> u8 {
        word_u8::<48, 55>(self.w6)
    }

    /// [`ErrCqe::send_opcode`]: `s_wqe_opcode_qpn` bits 31:24.
    #[inline]
    pub fn send_opcode(&self) -> u8 {
        (opcode_qpn(self.w7) >> 24) as u8
    }

    /// [`ErrCqe::qpn`]: `s_wqe_opcode_qpn` bits 23:0.
    #[inline]
    pub fn qpn(&self) -> u32 {
        opcode_qpn(self.w7) & 0xff_ffff
    }

    /// [`ErrCqe::wqe_counter`]: `wqe_counter`, byte 60.
    #[inline]
    pub fn wqe_counter(&self) -> u16 {
        word_u16::<56, 60>(self.w7)
    }

    /// [`ErrCqe::signature`]: `signature`, byte 62.
    #[inline]
    pub fn signature(&self) -> u8 {
        word_u8::<56, 62>(self.w7)
    }

    /// [`ErrCqe::op_own`]: `op_own`, byte 63.
    ///
    /// # Errors
    ///
    /// As for [`OpOwn::decode`].
    #[inline]
    pub fn op_own(&self) -> Result<OpOwn, Error> {
        OpOwn::decode(word_u8::<56, OP_OWN_OFFSET>(self.w7))
    }

    /// Every field: what [`ErrCqe::decode`] returns for the same bytes.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownCqeOpcode`] if the opcode is unknown.
    pub fn decode(&self) -> Result<ErrCqe, Error> {
        Ok(ErrCqe {
            srqn: self.srqn(),
            vendor_syndrome: self.vendor_syndrome(),
            syndrome: self.syndrome(),
            send_opcode: self.send_opcode(),
            qpn: self.qpn(),
            wqe_counter: self.wqe_counter(),
            signature: self.signature(),
            op_own: self.op_own()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_own_bits() {
        let o = OpOwn {
            opcode: CqeOpcode::RespSendImm,
            format: 2,
            solicited: true,
            owner: true,
        };
        assert_eq!(o.encode(), 0x3b);
        assert_eq!(OpOwn::decode(0x3b), Ok(o));
        assert_eq!(OpOwn::decode(0x70), Err(Error::UnknownCqeOpcode(7)));
        for b in 0..=255u8 {
            let d = OpOwn::decode(b);
            assert_eq!(OpOwn::opcode_of(b), d.map(|o| o.opcode));
            if let Ok(o) = d {
                assert_eq!(OpOwn::solicited_of(b), o.solicited);
            }
        }
        assert_eq!(OpOwn::decode(0xf0).unwrap().opcode, CqeOpcode::Invalid);
    }

    #[test]
    fn requester_cqe_known_bytes() {
        let c = Cqe64 {
            ml_path: 0,
            slid: 0,
            grh: 0,
            sl: 0,
            src_qpn: 0,
            srqn_uidx: 0x12_3456,
            imm_inval_rkey: 0xdead_beef,
            byte_cnt: 0x1000,
            send_opcode: 0x0a,
            qpn: 0xab_cdef,
            wqe_counter: 0xfffe,
            signature: 0x5a,
            op_own: OpOwn {
                opcode: CqeOpcode::Req,
                format: 0,
                solicited: false,
                owner: true,
            },
        };
        let mut b = [0xffu8; 64];
        c.encode(&mut b);
        assert_eq!(b[..32], [0; 32]);
        assert_eq!(b[32..40], [0, 0x12, 0x34, 0x56, 0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(b[40..44], [0; 4]);
        assert_eq!(b[44..48], [0, 0, 0x10, 0]);
        assert_eq!(b[56..64], [0x0a, 0xab, 0xcd, 0xef, 0xff, 0xfe, 0x5a, 0x01]);
        assert_eq!(Cqe64::decode(&b), Ok(c));
        assert_eq!(Cqe64Words::from_bytes(&b).decode(), Ok(c));
    }

    #[test]
    fn responder_cqe_known_bytes() {
        let c = Cqe64 {
            ml_path: 0x05,
            slid: 0x1234,
            grh: 2,
            sl: 0xa,
            src_qpn: 0x00_0c0d,
            srqn_uidx: 0,
            imm_inval_rkey: 0,
            byte_cnt: 64,
            send_opcode: 0,
            qpn: 0x42,
            wqe_counter: 1,
            signature: 0,
            op_own: OpOwn {
                opcode: CqeOpcode::RespSend,
                format: 0,
                solicited: true,
                owner: false,
            },
        };
        let mut b = [0xffu8; 64];
        c.encode(&mut b);
        assert_eq!(b[..17], [0; 17]);
        assert_eq!(
            b[17..32],
            [5, 0, 0, 0, 0, 0x12, 0x34, 0x2a, 0, 0x0c, 0x0d, 0, 0, 0, 0]
        );
        assert_eq!(b[63], 0x22);
        assert_eq!(Cqe64::decode(&b), Ok(c));
        assert_eq!(Cqe64Words::from_bytes(&b).decode(), Ok(c));
        assert_eq!(c.dlid_path_bits(), 5);
        b[17] = 0x85;
        assert_eq!(Cqe64Words::from_bytes(&b).dlid_path_bits(), 5);
        b[17] = 0x05;
        // Bits 31:30 of flags_rqpn are not modelled: decode ignores them.
        b[24] |= 0xc0;
        assert_eq!(Cqe64::decode(&b), Ok(c));
        assert_eq!(Cqe64Words::from_bytes(&b).decode(), Ok(c));
    }

    #[test]
    fn ud_responder_cqe_known_bytes() {
        // RoCE v2 over IPv4 into QP 0x123 from QP1: GRH in the buffer
        // (29:28 = 1), L3 type IPv4 (25:24 = 2), source QPN 1, P_Key 0xffff,
        // 40 + 256 bytes.
        let c = Cqe64 {
            ml_path: 0,
            slid: 0,
            grh: GRH_IN_BUFFER,
            sl: ROCE_L3_HEADER_TYPE_IPV4,
            src_qpn: 1,
            srqn_uidx: 0,
            imm_inval_rkey: 0xffff,
            byte_cnt: 296,
            send_opcode: 0,
            qpn: 0x123,
            wqe_counter: 9,
            signature: 0,
            op_own: OpOwn {
                opcode: CqeOpcode::RespSend,
                format: 0,
                solicited: false,
                owner: true,
            },
        };
        let mut b = [0u8; 64];
        c.encode(&mut b);
        assert_eq!(b[22..28], [0, 0, 0x12, 0, 0, 1]);
        assert_eq!(b[36..40], [0, 0, 0xff, 0xff]);
        assert_eq!(b[44..48], [0, 0, 1, 0x28]);
        let w = Cqe64Words::from_bytes(&b);
        assert_eq!(w.roce_l3_header_type(), ROCE_L3_HEADER_TYPE_IPV4);
        assert_eq!(c.roce_l3_header_type(), ROCE_L3_HEADER_TYPE_IPV4);
        assert_eq!((w.pkey(), c.pkey()), (0xffff, 0xffff));
        assert_eq!(w.grh(), GRH_IN_BUFFER);
        assert_eq!(w.decode(), Ok(c));
    }

    #[test]
    fn error_cqe_known_bytes() {
        let c = ErrCqe {
            srqn: 7,
            vendor_syndrome: 0x93,
            syndrome: 0x05,
            send_opcode: 0x10,
            qpn: 0x42,
            wqe_counter: 3,
            signature: 0,
            op_own: OpOwn {
                opcode: CqeOpcode::ReqErr,
                format: 0,
                solicited: false,
                owner: false,
            },
        };
        let mut b = [0u8; 64];
        c.encode(&mut b);
        assert_eq!(b[32..36], [0, 0, 0, 7]);
        assert_eq!(b[54..64], [0x93, 0x05, 0x10, 0, 0, 0x42, 0, 3, 0, 0xd0]);
        assert_eq!(ErrCqe::decode(&b), Ok(c));
        assert_eq!(ErrCqeWords::from_bytes(&b).decode(), Ok(c));
        b[63] = 0x70;
        assert_eq!(
            ErrCqeWords::from_bytes(&b).decode(),
            Err(Error::UnknownCqeOpcode(7))
        );
    }

    #[test]
    fn word_views_load_only_their_words() {
        let mut loaded = [0usize; 9];
        let mut n = 0;
        let mut word = |i: usize| {
            loaded[n] = i;
            n += 1;
            [i as u8; 8]
        };
        let c = Cqe64Words::load(&mut word);
        assert_eq!(c.ml_path(), 2);
        assert_eq!(c.byte_cnt(), 0x0505_0505);
        let e = ErrCqeWords::load(&mut word);
        assert_eq!(e.syndrome(), 6);
        assert_eq!(c.err_words(&mut word), e);
        assert_eq!(loaded[..n], [2, 3, 4, 5, 7, 4, 6, 7, 6]);
    }
}
