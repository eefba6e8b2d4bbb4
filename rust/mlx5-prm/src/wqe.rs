// SPDX-License-Identifier: GPL-2.0

//! Send WQE segments: control, remote address, atomic, masked atomic, data
//! pointer and inline data.
//!
//! A send WQE is a control segment followed by the segments its opcode needs,
//! each a multiple of 16 bytes (one "DS" unit), laid out in 64-byte WQEBBs:
//!
//! | opcode | segments |
//! |---|---|
//! | SEND, SEND_IMM, SEND_INVAL | ctrl, then data pointer or inline segments |
//! | RDMA_WRITE(_IMM), RDMA_READ | ctrl, raddr, then data pointer (or inline for writes) |
//! | ATOMIC_CS, ATOMIC_FA | ctrl, raddr, atomic, one data pointer for the 8-byte result |
//! | ATOMIC_MASKED_CS/FA | ctrl, raddr, masked atomic (32 bytes), one data pointer |
//! | UMR (fast registration, local invalidation) | ctrl (`imm`: the mkey), UMR control (48 bytes), mkey context (64 bytes), then a data pointer to the translation list or none |
//!
//! Sizing (DS and WQEBB counts) is in [`super::ring`]; copying segments into
//! the wrapping SQ buffer is in [`super::sq`].
//!
//! Every segment also has a word form, `to_words` (and
//! [`InlineHeader::words`] for inline data): the bytes `encode` writes, as
//! the 8-byte words they occupy, in memory order, built in registers. A fast
//! path stores those words straight into the SQ with 64-bit stores instead
//! of encoding into a buffer in 1- to 8-byte pieces and copying it; SQ
//! segments are 16-byte aligned, so every word is an aligned one. The word
//! forms are `#[inline]` so that they cost no call from another crate.

use super::bytes::{
    be_u32_pair, get_u16, get_u32, get_u64, get_u8, put_u16, put_u32, put_u64, put_u8,
};
use super::error::Error;
use super::opcode::SendOpcode;

/// Size of a send WQE basic block in bytes (`MLX5_SEND_WQE_BB`).
pub const WQEBB_SIZE: usize = 64;
/// log2 of [`WQEBB_SIZE`] (`MLX5_SEND_WQE_SHIFT`).
pub const WQEBB_SHIFT: u32 = 6;
/// Size of the DS unit that WQE lengths are counted in (`MLX5_SEND_WQE_DS`).
pub const DS_SIZE: usize = 16;
/// Most WQEBBs one send WQE may span (`MLX5_SEND_WQE_MAX_WQEBBS`).
pub const MAX_WQEBBS: usize = 16;
/// Largest send WQE in bytes (`MLX5_SEND_WQE_MAX_SIZE`).
pub const MAX_WQE_SIZE: usize = MAX_WQEBBS * WQEBB_SIZE;

/// Bit 31 of `mlx5_wqe_inl_data_seg.byte_count`, marking inline data
/// (`MLX5_INLINE_SEG`).
pub const INLINE_SEG: u32 = 0x8000_0000;
/// The lkey that ends a receive scatter list shorter than the RQ stride
/// (`MLX5_INVALID_LKEY`).
pub const INVALID_LKEY: u32 = 0x100;

/// `fm_ce_se` fence mode "none" (`MLX5_FENCE_MODE_NONE >> 5`).
pub const FENCE_MODE_NONE: u8 = 0;
/// `fm_ce_se` fence mode "initiator small fence"
/// (`MLX5_FENCE_MODE_INITIATOR_SMALL >> 5`, `MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE >> 5`).
pub const FENCE_MODE_INITIATOR_SMALL: u8 = 1;
/// `fm_ce_se` fence mode "fence" (`MLX5_FENCE_MODE_FENCE >> 5`).
pub const FENCE_MODE_FENCE: u8 = 2;
/// `fm_ce_se` fence mode "strong ordering" (`MLX5_FENCE_MODE_STRONG_ORDERING >> 5`).
pub const FENCE_MODE_STRONG_ORDERING: u8 = 3;
/// `fm_ce_se` fence mode "small and fence": wait for all prior RDMA reads
/// and atomics (`MLX5_FENCE_MODE_SMALL_AND_FENCE >> 5`, which is
/// mlx5dv.h's `MLX5_WQE_CTRL_FENCE >> 5`).
pub const FENCE_MODE_SMALL_AND_FENCE: u8 = 4;
/// `fm_ce_se` completion mode "CQE on error only" (CE = 0).
pub const CE_ERROR_ONLY: u8 = 0;
/// `fm_ce_se` completion mode "CQE on completion" (`MLX5_WQE_CTRL_CQ_UPDATE >> 2`).
pub const CE_CQ_UPDATE: u8 = 2;
/// `fm_ce_se` completion mode "CQE and EQE on completion"
/// (`MLX5_WQE_CTRL_CQ_UPDATE_AND_EQE >> 2`).
pub const CE_CQ_UPDATE_AND_EQE: u8 = 3;

/// The control segment that starts every send WQE (`struct mlx5_wqe_ctrl_seg`,
/// 16 bytes; filled by mlx5dv.h's `mlx5dv_set_ctrl_seg`).
///
/// | byte | field |
/// |---|---|
/// | 0 | `opmod_idx_opcode`: opmod (31:24), WQE index (23:8), opcode (7:0) |
/// | 4 | `qpn_ds`: QPN (31:8), DS count (5:0) |
/// | 8 | `signature` |
/// | 9 | reserved (`dci_stream_channel_id` for DC) |
/// | 11 | `fm_ce_se`: fence mode (7:5), CE (3:2), solicited (1) |
/// | 12 | `imm`: immediate data, or the rkey to invalidate |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtrlSeg {
    /// Opcode modifier: `opmod_idx_opcode` bits 31:24.
    pub opmod: u8,
    /// Index of the WQE's first WQEBB, wrapping at 16 bits regardless of
    /// the SQ size (the SQ producer counter): `opmod_idx_opcode` bits 23:8.
    pub wqe_index: u16,
    /// The operation: `opmod_idx_opcode` bits 7:0.
    pub opcode: SendOpcode,
    /// QP number, 24 bits: `qpn_ds` bits 31:8.
    pub qpn: u32,
    /// Size of the whole WQE in 16-byte units, 6 bits: `qpn_ds` bits 5:0.
    pub ds: u8,
    /// WQE signature byte: `signature` (0 unless signatures are enabled).
    pub signature: u8,
    /// Fence mode, 3 bits (`FENCE_MODE_*`): `fm_ce_se` bits 7:5.
    pub fence_mode: u8,
    /// Completion mode, 2 bits (`CE_*`): `fm_ce_se` bits 3:2.
    pub ce: u8,
    /// Solicited event requested at the responder: `fm_ce_se` bit 1
    /// (`MLX5_WQE_CTRL_SOLICITED`).
    pub solicited: bool,
    /// Immediate data (SEND_IMM, RDMA_WRITE_IMM) or the rkey to invalidate
    /// (SEND_INVAL): `imm`, whose four bytes are this value big-endian. A
    /// verbs `imm_data`, already in network order, goes in as
    /// `u32::from_be(imm_data)`.
    pub imm: u32,
}

impl CtrlSeg {
    /// Size in bytes (`sizeof(struct mlx5_wqe_ctrl_seg)`).
    pub const SIZE: usize = 16;

    /// `opmod_idx_opcode` (byte 0) as a host integer.
    #[inline]
    fn opmod_idx_opcode(&self) -> u32 {
        u32::from(self.opmod) << 24
            | u32::from(self.wqe_index) << 8
            | u32::from(u8::from(self.opcode))
    }

    /// `qpn_ds` (byte 4) as a host integer.
    #[inline]
    fn qpn_ds(&self) -> u32 {
        (self.qpn & 0xff_ffff) << 8 | u32::from(self.ds & 0x3f)
    }

    /// The `fm_ce_se` byte (byte 11).
    #[inline]
    fn fm_ce_se(&self) -> u8 {
        (self.fence_mode & 0x7) << 5 | (self.ce & 0x3) << 2 | u8::from(self.solicited) << 1
    }

    /// Writes the segment into `out`.
    pub fn encode(&self, out: &mut [u8; 16]) {
        put_u32(out, 0, self.opmod_idx_opcode());
        put_u32(out, 4, self.qpn_ds());
        put_u8(out, 8, self.signature);
        put_u8(out, 9, 0);
        put_u8(out, 10, 0);
        put_u8(out, 11, self.fm_ce_se());
        put_u32(out, 12, self.imm);
    }

    /// The segment as its two 8-byte words, in memory order: the bytes
    /// [`CtrlSeg::encode`] writes. Word 0 is `opmod_idx_opcode` and
    /// `qpn_ds` (also the 8 bytes of the send doorbell,
    /// [`super::doorbell::send_doorbell_words`]); word 1 is `signature`, the
    /// two reserved bytes (zero), `fm_ce_se` and `imm`.
    #[inline]
    pub fn to_words(&self) -> [[u8; 8]; 2] {
        // Bytes 8..12: signature, two reserved bytes, fm_ce_se.
        let signature_fm_ce_se = u32::from(self.signature) << 24 | u32::from(self.fm_ce_se());
        [
            be_u32_pair(self.opmod_idx_opcode(), self.qpn_ds()),
            be_u32_pair(signature_fm_ce_se, self.imm),
        ]
    }

    /// The DS count of the encoded control segment `b` (`qpn_ds` bits 5:0),
    /// without decoding the rest: the size of the WQE it starts, in 16-byte
    /// units, whatever its opcode.
    pub fn ds_of(b: &[u8; 16]) -> u8 {
        get_u8(b, 7) & 0x3f
    }

    /// Reads a segment from `b`.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownSendOpcode`] if the opcode byte is not a known opcode.
    pub fn decode(b: &[u8; 16]) -> Result<Self, Error> {
        let word0 = get_u32(b, 0);
        let qpn_ds = get_u32(b, 4);
        let fm_ce_se = get_u8(b, 11);
        Ok(CtrlSeg {
            opmod: (word0 >> 24) as u8,
            wqe_index: (word0 >> 8) as u16,
            opcode: SendOpcode::try_from(word0 as u8)?,
            qpn: qpn_ds >> 8,
            ds: (qpn_ds & 0x3f) as u8,
            signature: get_u8(b, 8),
            fence_mode: fm_ce_se >> 5,
            ce: (fm_ce_se >> 2) & 0x3,
            solicited: fm_ce_se & 0x2 != 0,
            imm: get_u32(b, 12),
        })
    }
}

/// Remote address segment of RDMA and atomic WQEs
/// (`struct mlx5_wqe_raddr_seg`, 16 bytes): remote VA at 0, rkey at 8,
/// reserved at 12.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaddrSeg {
    /// Remote virtual address: `raddr`.
    pub raddr: u64,
    /// Remote key of the target MR: `rkey`.
    pub rkey: u32,
}

impl RaddrSeg {
    /// Size in bytes (`sizeof(struct mlx5_wqe_raddr_seg)`).
    pub const SIZE: usize = 16;

    /// Writes the segment into `out`.
    pub fn encode(&self, out: &mut [u8; 16]) {
        put_u64(out, 0, self.raddr);
        put_u32(out, 8, self.rkey);
        put_u32(out, 12, 0);
    }

    /// The segment as its two 8-byte words, in memory order: the bytes
    /// [`RaddrSeg::encode`] writes. Word 0 is `raddr`; word 1 is `rkey` and
    /// the reserved word (zero).
    #[inline]
    pub fn to_words(&self) -> [[u8; 8]; 2] {
        [self.raddr.to_be_bytes(), be_u32_pair(self.rkey, 0)]
    }

    /// Reads a segment from `b` (the reserved word is ignored).
    pub fn decode(b: &[u8; 16]) -> Self {
        RaddrSeg {
            raddr: get_u64(b, 0),
            rkey: get_u32(b, 8),
        }
    }
}

/// Atomic segment of ATOMIC_CS and ATOMIC_FA WQEs
/// (`struct mlx5_wqe_atomic_seg`, 16 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtomicSeg {
    /// The swap value (compare and swap) or the addend (fetch and add):
    /// `swap_add`, byte 0.
    pub swap_add: u64,
    /// The compare value (compare and swap; ignored by fetch and add):
    /// `compare`, byte 8.
    pub compare: u64,
}

impl AtomicSeg {
    /// Size in bytes (`sizeof(struct mlx5_wqe_atomic_seg)`).
    pub const SIZE: usize = 16;

    /// Writes the segment into `out`.
    pub fn encode(&self, out: &mut [u8; 16]) {
        put_u64(out, 0, self.swap_add);
        put_u64(out, 8, self.compare);
    }

    /// The segment as its two 8-byte words, in memory order: the bytes
    /// [`AtomicSeg::encode`] writes, `swap_add` then `compare`.
    #[inline]
    pub fn to_words(&self) -> [[u8; 8]; 2] {
        [self.swap_add.to_be_bytes(), self.compare.to_be_bytes()]
    }

    /// Reads a segment from `b`.
    pub fn decode(b: &[u8; 16]) -> Self {
        AtomicSeg {
            swap_add: get_u64(b, 0),
            compare: get_u64(b, 8),
        }
    }
}

/// Masked atomic segment of the 8-byte ATOMIC_MASKED_CS and ATOMIC_MASKED_FA
/// WQEs (the kernel's `struct mlx5_wqe_masked_atomic_seg`, 32 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaskedAtomicSeg {
    /// Swap value or addend: `swap_add`, byte 0.
    pub swap_add: u64,
    /// Compare value: `compare`, byte 8.
    pub compare: u64,
    /// Which bits to swap (masked CS), or the field boundaries of the add
    /// (masked FA): `swap_add_mask`, byte 16.
    pub swap_add_mask: u64,
    /// Which bits take part in the compare: `compare_mask`, byte 24.
    pub compare_mask: u64,
}

impl MaskedAtomicSeg {
    /// Size in bytes (`sizeof(struct mlx5_wqe_masked_atomic_seg)`).
    pub const SIZE: usize = 32;

    /// Writes the segment into `out`.
    pub fn encode(&self, out: &mut [u8; 32]) {
        put_u64(out, 0, self.swap_add);
        put_u64(out, 8, self.compare);
        put_u64(out, 16, self.swap_add_mask);
        put_u64(out, 24, self.compare_mask);
    }

    /// The segment as its four 8-byte words, in memory order: the bytes
    /// [`MaskedAtomicSeg::encode`] writes, `swap_add`, `compare`,
    /// `swap_add_mask`, `compare_mask`.
    #[inline]
    pub fn to_words(&self) -> [[u8; 8]; 4] {
        [
            self.swap_add.to_be_bytes(),
            self.compare.to_be_bytes(),
            self.swap_add_mask.to_be_bytes(),
            self.compare_mask.to_be_bytes(),
        ]
    }

    /// Reads a segment from `b`.
    pub fn decode(b: &[u8; 32]) -> Self {
        MaskedAtomicSeg {
            swap_add: get_u64(b, 0),
            compare: get_u64(b, 8),
            swap_add_mask: get_u64(b, 16),
            compare_mask: get_u64(b, 24),
        }
    }
}

/// Data pointer segment: one gather entry of a send WQE or one scatter entry
/// of a receive WQE (`struct mlx5_wqe_data_seg`, 16 bytes; filled by
/// mlx5dv.h's `mlx5dv_set_data_seg`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataSeg {
    /// Length in bytes: `byte_count`, byte 0. Bit 31 must be clear in a
    /// send WQE, where it would mark an inline segment instead.
    pub byte_count: u32,
    /// Local key of the MR holding the buffer: `lkey`, byte 4.
    pub lkey: u32,
    /// Buffer address: `addr`, byte 8.
    pub addr: u64,
}

impl DataSeg {
    /// Size in bytes (`sizeof(struct mlx5_wqe_data_seg)`).
    pub const SIZE: usize = 16;

    /// The segment that ends a receive scatter list shorter than the RQ
    /// stride: zero length, `MLX5_INVALID_LKEY`, zero address.
    pub const TERMINATOR: DataSeg = DataSeg {
        byte_count: 0,
        lkey: INVALID_LKEY,
        addr: 0,
    };

    /// Writes the segment into `out`.
    pub fn encode(&self, out: &mut [u8; 16]) {
        put_u32(out, 0, self.byte_count);
        put_u32(out, 4, self.lkey);
        put_u64(out, 8, self.addr);
    }

    /// The segment as its two 8-byte words, in memory order: the bytes
    /// [`DataSeg::encode`] writes. Word 0 is `byte_count` and `lkey`; word 1
    /// is `addr`. Also the entries of a receive WQE
    /// ([`super::recv::recv_wqe_words`]).
    #[inline]
    pub fn to_words(&self) -> [[u8; 8]; 2] {
        [
            be_u32_pair(self.byte_count, self.lkey),
            self.addr.to_be_bytes(),
        ]
    }

    /// Reads a segment from `b`.
    pub fn decode(b: &[u8; 16]) -> Self {
        DataSeg {
            byte_count: get_u32(b, 0),
            lkey: get_u32(b, 4),
            addr: get_u64(b, 8),
        }
    }
}

/// Datagram segment of a UD send WQE: the address vector
/// (`struct mlx5_wqe_datagram_seg`, one `struct mlx5_wqe_av`, 48 bytes;
/// filled by mlx5dv.h's `mlx5dv_set_dgram_seg`). It follows the control
/// segment, before the data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DatagramSeg {
    /// Q_Key of the destination QP: `key.qkey.qkey`, byte 0 (bytes 4-7,
    /// the rest of the 64-bit DC key, are zero for UD).
    pub qkey: u32,
    /// Extended address vector: bit 31 of `dqp_dct`, byte 8.
    pub ext: bool,
    /// Destination QP number: bits 23-0 of `dqp_dct`.
    pub dqpn: u32,
    /// Static rate (bits 7-4) and SL (bits 3-0): `stat_rate_sl`, byte 12.
    pub stat_rate_sl: u8,
    /// Force loopback (bit 7) and source path bits (bits 6-0): `fl_mlid`,
    /// byte 13.
    pub fl_mlid: u8,
    /// Destination LID: `rlid`, byte 14.
    pub rlid: u16,
    /// Destination MAC (RoCE): `rmac`, byte 20.
    pub rmac: [u8; 6],
    /// GRH traffic class: `tclass`, byte 26.
    pub tclass: u8,
    /// GRH hop limit: `hop_limit`, byte 27.
    pub hop_limit: u8,
    /// GRH present (bit 30), source GID index (bits 27-20), flow label
    /// (bits 19-0): `grh_gid_fl`, byte 28.
    pub grh_gid_fl: u32,
    /// Destination GID: `rgid`, byte 32.
    pub rgid: [u8; 16],
}

impl DatagramSeg {
    /// Size in bytes (`sizeof(struct mlx5_wqe_datagram_seg)`).
    pub const SIZE: usize = 48;
    /// `grh_gid_fl`: a GRH is sent (`MLX5_EXTENDED_UD_AV`'s companion bit
    /// mlx5 sets from `ah_attr.ah_flags & IB_AH_GRH`).
    pub const GRH: u32 = 1 << 30;
    /// `dqp_dct`: the extended address vector bit.
    const EXT: u32 = 1 << 31;

    /// Writes the segment into `out`.
    pub fn encode(&self, out: &mut [u8; 48]) {
        put_u32(out, 0, self.qkey);
        put_u32(out, 4, 0);
        put_u32(
            out,
            8,
            (self.dqpn & 0xff_ffff) | if self.ext { Self::EXT } else { 0 },
        );
        put_u8(out, 12, self.stat_rate_sl);
        put_u8(out, 13, self.fl_mlid);
        put_u16(out, 14, self.rlid);
        put_u32(out, 16, 0);
        for (k, &m) in self.rmac.iter().enumerate() {
            put_u8(out, 20 + k, m);
        }
        put_u8(out, 26, self.tclass);
        put_u8(out, 27, self.hop_limit);
        put_u32(out, 28, self.grh_gid_fl);
        for (k, &g) in self.rgid.iter().enumerate() {
            put_u8(out, 32 + k, g);
        }
    }

    /// Reads a segment from `b` (reserved bytes and the DC half of the key
    /// are ignored, as are bits 30-24 of `dqp_dct`).
    pub fn decode(b: &[u8; 48]) -> Self {
        let dqp = get_u32(b, 8);
        DatagramSeg {
            qkey: get_u32(b, 0),
            ext: dqp & Self::EXT != 0,
            dqpn: dqp & 0xff_ffff,
            stat_rate_sl: get_u8(b, 12),
            fl_mlid: get_u8(b, 13),
            rlid: get_u16(b, 14),
            rmac: core::array::from_fn(|k| get_u8(b, 20 + k)),
            tclass: get_u8(b, 26),
            hop_limit: get_u8(b, 27),
            grh_gid_fl: get_u32(b, 28),
            rgid: core::array::from_fn(|k| get_u8(b, 32 + k)),
        }
    }

    /// The SL of the path (`stat_rate_sl` bits 3-0), as mlx5_ib writes it
    /// for an InfiniBand address (on RoCE it writes the SL's low three
    /// bits to bits 3-1 instead).
    pub fn sl(&self) -> u8 {
        self.stat_rate_sl & 0xf
    }

    /// Whether the message carries a GRH.
    pub fn grh(&self) -> bool {
        self.grh_gid_fl & Self::GRH != 0
    }

    /// The index of the sender's GID the message leaves from (`grh_gid_fl`
    /// bits 27-20, mlx5_ib's `sgid_index << 20`).
    pub fn sgid_index(&self) -> u8 {
        (self.grh_gid_fl >> 20) as u8
    }

    /// The GRH flow label (`grh_gid_fl` bits 19-0).
    pub fn flow_label(&self) -> u32 {
        self.grh_gid_fl & 0xf_ffff
    }
}

/// The 4-byte header of an inline data segment
/// (`struct mlx5_wqe_inl_data_seg`): the payload length with bit 31
/// (`MLX5_INLINE_SEG`) set. The payload follows it directly and the segment
/// is padded to a multiple of 16 bytes ([`inline_seg_size`]); use
/// [`super::sq::write_inline`] to place one in the SQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InlineHeader {
    /// Payload length in bytes, 31 bits: `byte_count` without bit 31.
    pub byte_count: u32,
}

impl InlineHeader {
    /// Size in bytes (`sizeof(struct mlx5_wqe_inl_data_seg)`).
    pub const SIZE: usize = 4;

    /// Writes the header into `out`.
    pub fn encode(&self, out: &mut [u8; 4]) {
        put_u32(out, 0, (self.byte_count & !INLINE_SEG) | INLINE_SEG);
    }

    /// Reads a header from `b`.
    ///
    /// # Errors
    ///
    /// [`Error::NotInline`] if bit 31 is clear, i.e. the segment is a data
    /// pointer segment rather than inline data.
    pub fn decode(b: &[u8; 4]) -> Result<Self, Error> {
        let v = get_u32(b, 0);
        if v & INLINE_SEG == 0 {
            return Err(Error::NotInline);
        }
        Ok(InlineHeader {
            byte_count: v & !INLINE_SEG,
        })
    }

    /// Whether the segment whose first four bytes are `first_word` is inline
    /// data (bit 31 set) rather than a data pointer segment.
    pub fn is_inline(first_word: &[u8; 4]) -> bool {
        get_u32(first_word, 0) & INLINE_SEG != 0
    }

    /// The inline data segment of this header and `payload` as the 8-byte
    /// words it occupies (the bytes [`super::sq::write_inline`] writes),
    /// for storing it word by word: see [`InlineWords`]. `self.byte_count`
    /// should be `payload.len()`; the words carry all of `payload` either
    /// way.
    #[inline]
    pub fn words<'a>(&self, payload: &'a [u8]) -> InlineWords<'a> {
        let header = (self.byte_count & !INLINE_SEG) | INLINE_SEG;
        // The payload's first bytes share word 0 with the header.
        let (head, rest) = match payload.split_first_chunk::<INLINE_HEAD_BYTES>() {
            Some((head, rest)) => (*head, rest),
            None => {
                // Fewer: they go first, zeros after.
                let mut head = [0u8; INLINE_HEAD_BYTES];
                for (d, s) in head.iter_mut().zip(payload) {
                    *d = *s;
                }
                (head, &[][..])
            }
        };
        let (middle, tail) = rest.as_chunks::<8>();
        InlineWords {
            first: be_u32_pair(header, u32::from_be_bytes(head)),
            middle,
            last: if tail.is_empty() {
                None
            } else {
                Some(last_bytes_word(payload, tail.len()))
            },
            words: inline_seg_size(payload.len()) / 8,
        }
    }
}

/// Payload bytes that share the first word of an inline data segment with
/// its 4-byte header.
const INLINE_HEAD_BYTES: usize = 8 - InlineHeader::SIZE;

/// An inline data segment as 8-byte words in memory order
/// ([`InlineHeader::words`]): `first`, then the words of `middle`, then
/// `last` if there is one, then zero words up to `words` in all (the
/// segment is padded to a multiple of 16 bytes with zeros).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InlineWords<'a> {
    /// Word 0: the header (`byte_count | MLX5_INLINE_SEG`, big-endian) in
    /// bytes 0..4, the first 4 bytes of the payload in bytes 4..8 (zeros
    /// after a shorter payload).
    pub first: [u8; 8],
    /// The payload from its byte 4 on, as whole words: words 1 to
    /// `middle.len()` (a view of the payload, nothing copied).
    pub middle: &'a [[u8; 8]],
    /// The payload's remaining 1 to 7 bytes at the start of one more
    /// word, zeros after them; `None` if the payload ends at a word
    /// boundary.
    pub last: Option<[u8; 8]>,
    /// Words the whole segment occupies, zero padding included
    /// ([`inline_seg_size`] / 8).
    pub words: usize,
}

/// The last `k` (1 to 7) bytes of `payload` at the start of a word, then
/// zeros.
#[inline]
fn last_bytes_word(payload: &[u8], k: usize) -> [u8; 8] {
    let start = payload.len().saturating_sub(8);
    if let Some(last8) = payload.get(start..).and_then(|s| s.first_chunk::<8>()) {
        // One (unaligned) load of the payload's last 8 bytes, the wanted
        // ones moved to the front: bytes are taken in memory order, so
        // little-endian here, whatever the host.
        let shift = 8usize.saturating_sub(k).saturating_mul(8);
        return u32::try_from(shift)
            .ok()
            .and_then(|shift| u64::from_le_bytes(*last8).checked_shr(shift))
            .unwrap_or(0)
            .to_le_bytes();
    }
    let mut w = [0u8; 8];
    let from = payload.len().saturating_sub(k);
    for (d, s) in w.iter_mut().zip(payload.get(from..).unwrap_or(&[])) {
        *d = *s;
    }
    w
}

/// Bytes an inline segment with a `payload_len`-byte payload occupies in the
/// WQE: header plus payload, rounded up to 16. Saturates instead of
/// overflowing.
pub fn inline_seg_size(payload_len: usize) -> usize {
    payload_len
        .saturating_add(InlineHeader::SIZE + DS_SIZE - 1)
        .saturating_div(DS_SIZE)
        .saturating_mul(DS_SIZE)
}

/// Returns the payload of the inline segment at `offset` of a linear WQE
/// (as copied out by [`super::sq::read_wqe`]).
///
/// # Errors
///
/// [`Error::NotInline`] if the header lacks bit 31, [`Error::OutOfRange`]
/// if the header or the payload extends past `wqe`.
pub fn inline_payload(wqe: &[u8], offset: usize) -> Result<&[u8], Error> {
    let header = InlineHeader::decode(super::bytes::at(wqe, offset)?)?;
    let start = offset
        .checked_add(InlineHeader::SIZE)
        .ok_or(Error::OutOfRange)?;
    let len = usize::try_from(header.byte_count).map_err(|_| Error::OutOfRange)?;
    let end = start.checked_add(len).ok_or(Error::OutOfRange)?;
    wqe.get(start..end).ok_or(Error::OutOfRange)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctrl_seg_known_bytes() {
        let c = CtrlSeg {
            opmod: 0x5a,
            wqe_index: 0x1234,
            opcode: SendOpcode::RdmaWriteImm,
            qpn: 0xabcdef,
            ds: 3,
            signature: 0x77,
            fence_mode: FENCE_MODE_SMALL_AND_FENCE,
            ce: CE_CQ_UPDATE,
            solicited: true,
            imm: 0x0102_0304,
        };
        let mut b = [0xffu8; 16];
        c.encode(&mut b);
        assert_eq!(
            b,
            [0x5a, 0x12, 0x34, 0x09, 0xab, 0xcd, 0xef, 0x03, 0x77, 0, 0, 0x8a, 1, 2, 3, 4]
        );
        assert_eq!(CtrlSeg::decode(&b), Ok(c));
        b[3] = 0x02;
        assert_eq!(CtrlSeg::decode(&b), Err(Error::UnknownSendOpcode(2)));
    }

    #[test]
    fn ctrl_seg_drops_bits_above_field_width() {
        let c = CtrlSeg {
            opmod: 0,
            wqe_index: 0,
            opcode: SendOpcode::Nop,
            qpn: 0xff12_3456,
            ds: 0xc1,
            signature: 0,
            fence_mode: 0xff,
            ce: 0xff,
            solicited: false,
            imm: 0,
        };
        let mut b = [0u8; 16];
        c.encode(&mut b);
        assert_eq!(b[4..8], [0x12, 0x34, 0x56, 0x01]);
        assert_eq!(b[11], 0xec);
    }

    #[test]
    fn raddr_atomic_data_known_bytes() {
        let mut b = [0xffu8; 16];
        RaddrSeg {
            raddr: 0x1122_3344_5566_7788,
            rkey: 0x99aa_bbcc,
        }
        .encode(&mut b);
        assert_eq!(
            b,
            [0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0, 0, 0, 0]
        );
        DataSeg {
            byte_count: 0x40,
            lkey: 0x100,
            addr: 0x7f00_0000_1000,
        }
        .encode(&mut b);
        assert_eq!(b, [0, 0, 0, 0x40, 0, 0, 1, 0, 0, 0, 0x7f, 0, 0, 0, 0x10, 0]);
        AtomicSeg {
            swap_add: 1,
            compare: 2,
        }
        .encode(&mut b);
        assert_eq!(b, [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2]);
        let mut m = [0u8; 32];
        MaskedAtomicSeg {
            swap_add: 1,
            compare: 2,
            swap_add_mask: 3,
            compare_mask: 4,
        }
        .encode(&mut m);
        assert_eq!([m[7], m[15], m[23], m[31]], [1, 2, 3, 4]);
    }

    /// Words in memory order as bytes.
    fn flat<const W: usize, const N: usize>(words: [[u8; 8]; W]) -> [u8; N] {
        let mut b = [0u8; N];
        for (i, w) in words.iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(w);
        }
        b
    }

    #[test]
    fn words_are_the_encoded_bytes() {
        let c = CtrlSeg {
            opmod: 0x5a,
            wqe_index: 0x1234,
            opcode: SendOpcode::RdmaWriteImm,
            qpn: 0xffab_cdef,
            ds: 0xc3,
            signature: 0x77,
            fence_mode: 0xff,
            ce: CE_CQ_UPDATE,
            solicited: true,
            imm: 0x0102_0304,
        };
        let mut b = [0u8; 16];
        c.encode(&mut b);
        assert_eq!(flat::<2, 16>(c.to_words()), b);
        assert_eq!(CtrlSeg::ds_of(&b), 3);
        let r = RaddrSeg {
            raddr: 0x1122_3344_5566_7788,
            rkey: 0x99aa_bbcc,
        };
        r.encode(&mut b);
        assert_eq!(flat::<2, 16>(r.to_words()), b);
        let d = DataSeg {
            byte_count: 0x8000_0040,
            lkey: 0x100,
            addr: 0x7f00_0000_1000,
        };
        d.encode(&mut b);
        assert_eq!(flat::<2, 16>(d.to_words()), b);
        let a = AtomicSeg {
            swap_add: 1,
            compare: u64::MAX,
        };
        a.encode(&mut b);
        assert_eq!(flat::<2, 16>(a.to_words()), b);
        let m = MaskedAtomicSeg {
            swap_add: 1,
            compare: 2,
            swap_add_mask: 3,
            compare_mask: 0x0102_0304_0506_0708,
        };
        let mut b = [0u8; 32];
        m.encode(&mut b);
        assert_eq!(flat::<4, 32>(m.to_words()), b);
    }

    #[test]
    fn inline_words_are_the_written_segment() {
        let payload: [u8; 70] = core::array::from_fn(|i| i as u8 + 1);
        for len in 0..=payload.len() {
            let data = &payload[..len];
            let mut want = [0xeeu8; 128];
            let size = super::super::sq::write_inline(&mut want, 0, data).unwrap();
            let w = InlineHeader {
                byte_count: len as u32,
            }
            .words(data);
            assert_eq!(w.words * 8, size, "{len} bytes");
            let mut got = [0xeeu8; 128];
            got[..8].copy_from_slice(&w.first);
            let mut at = 8;
            for word in w.middle.iter().chain(w.last.as_ref()) {
                got[at..at + 8].copy_from_slice(word);
                at += 8;
            }
            assert!(at <= size, "{len} bytes: {at} of {size}");
            got[at..size].fill(0);
            assert_eq!(got, want, "{len} bytes");
        }
        // The header says what it is told; bit 31 is always set.
        let w = InlineHeader {
            byte_count: u32::MAX,
        }
        .words(b"ab");
        assert_eq!(w.first, [0xff, 0xff, 0xff, 0xff, b'a', b'b', 0, 0]);
        assert_eq!((w.middle.len(), w.last, w.words), (0, None, 2));
    }

    #[test]
    fn inline_header_and_payload() {
        let mut h = [0u8; 4];
        InlineHeader { byte_count: 5 }.encode(&mut h);
        assert_eq!(h, [0x80, 0, 0, 5]);
        assert!(InlineHeader::is_inline(&h));
        assert_eq!(InlineHeader::decode(&[0, 0, 0, 5]), Err(Error::NotInline));
        assert_eq!(inline_seg_size(0), 16);
        assert_eq!(inline_seg_size(12), 16);
        assert_eq!(inline_seg_size(13), 32);
        assert_eq!(inline_seg_size(usize::MAX), usize::MAX / 16 * 16);
        let wqe = [0x80, 0, 0, 3, b'a', b'b', b'c', 0];
        assert_eq!(inline_payload(&wqe, 0), Ok(&b"abc"[..]));
        assert_eq!(inline_payload(&wqe, 6), Err(Error::OutOfRange));
        let bad = [0x80, 0, 0, 9, 0, 0];
        assert_eq!(inline_payload(&bad, 0), Err(Error::OutOfRange));
    }
}

/// UMR control segment flags (`MLX5_UMR_*`, byte 0).
pub mod umr_flags {
    /// `MLX5_UMR_TRANSLATION_OFFSET_EN`: the translation is written at
    /// `xlt_offset`, not from its start.
    pub const TRANSLATION_OFFSET_EN: u8 = 1 << 4;
    /// `MLX5_UMR_CHECK_NOT_FREE` (mlx5_ib sets it on fast registrations).
    pub const CHECK_NOT_FREE: u8 = 1 << 5;
    /// `MLX5_UMR_CHECK_FREE`.
    pub const CHECK_FREE: u8 = 2 << 5;
    /// `MLX5_UMR_INLINE`: the translation list (if any) is inline in the
    /// WQE rather than pointed to by a data segment.
    pub const INLINE: u8 = 1 << 7;
}

/// Which mkey context fields a UMR modifies (`MLX5_MKEY_MASK_*`, the UMR
/// control segment's `mkey_mask`).
pub mod mkey_mask {
    /// `len`.
    pub const LEN: u64 = 1 << 0;
    /// `log2_page_size`.
    pub const PAGE_SIZE: u64 = 1 << 1;
    /// `start_addr`.
    pub const START_ADDR: u64 = 1 << 6;
    /// The PD in `flags_pd`.
    pub const PD: u64 = 1 << 7;
    /// Remote invalidation enable in `flags_pd`.
    pub const EN_RINVAL: u64 = 1 << 8;
    /// The key's low byte in `qpn_mkey7_0`.
    pub const KEY: u64 = 1 << 13;
    /// The QPN in `qpn_mkey7_0`.
    pub const QPN: u64 = 1 << 14;
    /// Local read permission.
    pub const LR: u64 = 1 << 17;
    /// Local write permission.
    pub const LW: u64 = 1 << 18;
    /// Remote read permission.
    pub const RR: u64 = 1 << 19;
    /// Remote write permission.
    pub const RW: u64 = 1 << 20;
    /// Remote atomic permission.
    pub const A: u64 = 1 << 21;
    /// Small fence.
    pub const SMALL_FENCE: u64 = 1 << 23;
    /// The free bit of `status`.
    pub const FREE: u64 = 1 << 29;
    /// What mlx5_ib's fast registration (`IB_WR_REG_MR`) modifies, its
    /// `frwr_mkey_mask`, without [`A`], which it adds when the
    /// registration grants remote atomics.
    pub const FAST_REG: u64 =
        LEN | PAGE_SIZE | START_ADDR | EN_RINVAL | KEY | LR | LW | RR | RW | SMALL_FENCE | FREE;
}

/// Mkey context permission and access-mode bits (`flags`, byte 2):
/// `MLX5_PERM_*` and `MLX5_MKC_ACCESS_MODE_*`.
pub mod mkey_flags {
    /// `MLX5_PERM_LOCAL_READ`.
    pub const LOCAL_READ: u8 = 1 << 2;
    /// `MLX5_PERM_LOCAL_WRITE`.
    pub const LOCAL_WRITE: u8 = 1 << 3;
    /// `MLX5_PERM_REMOTE_READ`.
    pub const REMOTE_READ: u8 = 1 << 4;
    /// `MLX5_PERM_REMOTE_WRITE`.
    pub const REMOTE_WRITE: u8 = 1 << 5;
    /// `MLX5_PERM_ATOMIC`.
    pub const ATOMIC: u8 = 1 << 6;
    /// `MLX5_PERM_UMR_EN`: UMR WQEs may modify the mkey.
    pub const UMR_EN: u8 = 1 << 7;
    /// Mask of the access mode (bits 1:0 of `flags`; the mode's bits 4:2
    /// are elsewhere and zero for the modes below).
    pub const ACCESS_MODE_MASK: u8 = 0x3;
    /// `MLX5_MKC_ACCESS_MODE_PA`.
    pub const ACCESS_MODE_PA: u8 = 0;
    /// `MLX5_MKC_ACCESS_MODE_MTT`: translation by a list of pages.
    pub const ACCESS_MODE_MTT: u8 = 1;
}

/// `MLX5_MKEY_STATUS_FREE`: the free bit of the mkey context's `status`.
pub const MKEY_STATUS_FREE: u8 = 1 << 6;
/// `MLX5_MKEY_REMOTE_INVAL`: remote invalidation enabled (`flags_pd`).
pub const MKEY_REMOTE_INVAL: u32 = 1 << 24;
/// Size of one MTT entry (`struct mlx5_mtt`): a big-endian page address
/// whose low bits carry `MTT_EN_RD` and `MTT_EN_WR`.
pub const MTT_SIZE: usize = 8;
/// `MLX5_EN_RD`: the page may be read.
pub const MTT_EN_RD: u64 = 1;
/// `MLX5_EN_WR`: the page may be written.
pub const MTT_EN_WR: u64 = 2;

/// UMR control segment (`struct mlx5_wqe_umr_ctrl_seg`, 48 bytes), after
/// the control segment of a UMR WQE.
///
/// | byte | field |
/// |---|---|
/// | 0 | `flags` ([`umr_flags`]) |
/// | 4 | `xlt_octowords`: size of the translation written, in 16-byte units |
/// | 6 | `xlt_offset`: where it is written, in 16-byte units |
/// | 8 | `mkey_mask` ([`mkey_mask`]) |
/// | 16 | `xlt_offset_47_16` |
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct UmrCtrlSeg {
    /// `flags`.
    pub flags: u8,
    /// `xlt_octowords`.
    pub xlt_octowords: u16,
    /// `xlt_offset` (bits 15:0 of the offset).
    pub xlt_offset: u16,
    /// `mkey_mask`.
    pub mkey_mask: u64,
    /// `xlt_offset_47_16`.
    pub xlt_offset_47_16: u32,
}

impl UmrCtrlSeg {
    /// Size in bytes.
    pub const SIZE: usize = 48;

    /// Writes the segment into `out` (reserved bytes zero).
    pub fn encode(&self, out: &mut [u8; 48]) {
        *out = [0; 48];
        put_u8(out, 0, self.flags);
        put_u16(out, 4, self.xlt_octowords);
        put_u16(out, 6, self.xlt_offset);
        put_u64(out, 8, self.mkey_mask);
        put_u32(out, 16, self.xlt_offset_47_16);
    }

    /// Reads a segment from `b`.
    pub fn decode(b: &[u8; 48]) -> Self {
        UmrCtrlSeg {
            flags: get_u8(b, 0),
            xlt_octowords: get_u16(b, 4),
            xlt_offset: get_u16(b, 6),
            mkey_mask: get_u64(b, 8),
            xlt_offset_47_16: get_u32(b, 16),
        }
    }
}

/// Mkey context segment of a UMR WQE (`struct mlx5_mkey_seg`, 64 bytes):
/// the new values of the fields the UMR control segment's mask names.
///
/// | byte | field |
/// |---|---|
/// | 0 | `status` ([`MKEY_STATUS_FREE`]) |
/// | 2 | `flags`: permissions and access mode ([`mkey_flags`]) |
/// | 4 | `qpn_mkey7_0`: QPN (31:8), the key's low byte (7:0) |
/// | 12 | `flags_pd`: flags (31:24, [`MKEY_REMOTE_INVAL`]), PD (23:0) |
/// | 16 | `start_addr`: first I/O virtual address |
/// | 24 | `len`: bytes covered |
/// | 32 | `bsfs_octo_size` |
/// | 52 | `xlt_oct_size`: translation size in 16-byte units |
/// | 59 | `log2_page_size` |
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MkeySeg {
    /// `status`.
    pub status: u8,
    /// `flags`.
    pub flags: u8,
    /// `qpn_mkey7_0`.
    pub qpn_mkey7_0: u32,
    /// `flags_pd`.
    pub flags_pd: u32,
    /// `start_addr`.
    pub start_addr: u64,
    /// `len`.
    pub len: u64,
    /// `bsfs_octo_size`.
    pub bsfs_octo_size: u32,
    /// `xlt_oct_size`.
    pub xlt_oct_size: u32,
    /// `log2_page_size`.
    pub log2_page_size: u8,
}

impl MkeySeg {
    /// Size in bytes.
    pub const SIZE: usize = 64;

    /// Writes the segment into `out` (reserved bytes zero).
    pub fn encode(&self, out: &mut [u8; 64]) {
        *out = [0; 64];
        put_u8(out, 0, self.status);
        put_u8(out, 2, self.flags);
        put_u32(out, 4, self.qpn_mkey7_0);
        put_u32(out, 12, self.flags_pd);
        put_u64(out, 16, self.start_addr);
        put_u64(out, 24, self.len);
        put_u32(out, 32, self.bsfs_octo_size);
        put_u32(out, 52, self.xlt_oct_size);
        put_u8(out, 59, self.log2_page_size);
    }

    /// Reads a segment from `b`.
    pub fn decode(b: &[u8; 64]) -> Self {
        MkeySeg {
            status: get_u8(b, 0),
            flags: get_u8(b, 2),
            qpn_mkey7_0: get_u32(b, 4),
            flags_pd: get_u32(b, 12),
            start_addr: get_u64(b, 16),
            len: get_u64(b, 24),
            bsfs_octo_size: get_u32(b, 32),
            xlt_oct_size: get_u32(b, 52),
            log2_page_size: get_u8(b, 59),
        }
    }
}
