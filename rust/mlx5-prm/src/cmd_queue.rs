// SPDX-License-Identifier: GPL-2.0

//! The command queue: its 64-byte entries (`struct mlx5_cmd_layout`), the
//! 576-byte mailbox blocks that carry the part of a command beyond 16 bytes
//! (`struct mlx5_cmd_prot_block`), their XOR signatures, and how a message
//! is split between the two.
//!
//! The queue is one 4 KiB page whose address the driver writes to the
//! initialization segment (see `init_seg`); it holds `1 << log_sz` entries
//! `1 << log_stride` bytes apart. To run a command, the driver fills an
//! entry ([`CmdLayout`]) with the first [`INLINE_SIZE`] bytes of the input
//! inline, the rest in a chain of mailboxes pointed to by `in_ptr`, a chain
//! for the output beyond its first 16 bytes at `out_ptr`, sets the
//! ownership bit, and rings the command doorbell with the entry's bit. The
//! device clears the ownership bit when it is done (and, with command
//! events enabled, also posts a command-completion EQE, see `eqe_async`);
//! the delivery status then sits in `status_own` bits 7:1 and the output's
//! first 16 bytes in `out`.
//!
//! | byte | `mlx5_cmd_layout` field |
//! |---|---|
//! | 0 | `type` ([`PCI_CMD_XPORT`]) |
//! | 4 | `inlen` |
//! | 8 | `in_ptr` |
//! | 16..32 | `in` (first 16 bytes of the input) |
//! | 32..48 | `out` (first 16 bytes of the output) |
//! | 48 | `out_ptr` |
//! | 56 | `outlen` |
//! | 60 | `token` |
//! | 61 | `sig` |
//! | 63 | `status_own`: delivery status (7:1), ownership (0) |

use core::fmt;

use super::bytes::{get_u32, get_u64, get_u8, put_u32, put_u64, put_u8};
use super::error::Error;

/// Size of a command queue entry (`sizeof(struct mlx5_cmd_layout)`).
pub const CMD_LAYOUT_SIZE: usize = 64;
/// How many bytes of the input and of the output an entry carries inline
/// (`sizeof(mlx5_cmd_layout.in)`).
pub const INLINE_SIZE: usize = 16;
/// Data bytes per mailbox block (`MLX5_CMD_DATA_BLOCK_SIZE`).
pub const MAILBOX_DATA_SIZE: usize = 512;
/// Size of a mailbox block (`sizeof(struct mlx5_cmd_prot_block)`).
pub const MAILBOX_SIZE: usize = 576;
/// Alignment of a mailbox block in DMA memory: mlx5_core allocates blocks
/// from a pool aligned to the block size rounded up to a power of two.
pub const MAILBOX_ALIGN: usize = 1024;
/// `mlx5_cmd_layout.type` of a command posted over PCI
/// (`MLX5_PCI_CMD_XPORT`).
pub const PCI_CMD_XPORT: u8 = 7;
/// The most entries a command queue can have (`MLX5_MAX_COMMANDS`): the
/// doorbell has one bit per entry.
pub const MAX_COMMANDS: usize = 32;
/// Offset of `mlx5_cmd_layout.status_own`, the byte to poll.
pub const STATUS_OWN_OFFSET: usize = 63;
/// The ownership bit of `status_own`: set while the device owns the entry
/// (`CMD_OWNER_HW`; `CMD_OWNER_SW` is 0).
pub const OWNER_HW: u8 = 0x1;

/// Offset of `mlx5_cmd_prot_block.next` (bus address of the next block, 0
/// in the last).
const BLOCK_NEXT: usize = 560;
/// Offset of `mlx5_cmd_prot_block.block_num`.
const BLOCK_NUM: usize = 568;
/// Offset of `mlx5_cmd_prot_block.token`.
const BLOCK_TOKEN: usize = 573;
/// Offset of `mlx5_cmd_prot_block.ctrl_sig`.
const BLOCK_CTRL_SIG: usize = 574;
/// Offset of `mlx5_cmd_prot_block.sig`.
const BLOCK_SIG: usize = 575;
/// Offset of `mlx5_cmd_layout.sig`.
const LAYOUT_SIG: usize = 61;

/// Whether the device still owns a command queue entry, from its
/// `status_own` byte.
pub fn owned_by_hw(status_own: u8) -> bool {
    status_own & OWNER_HW != 0
}

/// The value to write to the command doorbell (`mlx5_init_seg.cmd_dbell`)
/// to post entry `slot`: bit `slot`.
///
/// # Errors
///
/// [`Error::OutOfRange`] if `slot` is not below [`MAX_COMMANDS`].
pub fn doorbell(slot: usize) -> Result<u32, Error> {
    u32::try_from(slot)
        .ok()
        .and_then(|s| 1u32.checked_shl(s))
        .ok_or(Error::OutOfRange)
}

/// Byte offset of entry `slot` in the command queue page, entries being
/// `1 << log_stride` bytes apart (`cmdq_addr_l_sz` bits 3:0).
///
/// # Errors
///
/// [`Error::OutOfRange`] if the entry would not lie inside the 4 KiB page.
pub fn entry_offset(slot: usize, log_stride: u8) -> Result<usize, Error> {
    let stride = 1usize
        .checked_shl(u32::from(log_stride))
        .ok_or(Error::OutOfRange)?;
    let off = slot.checked_mul(stride).ok_or(Error::OutOfRange)?;
    if off.checked_add(CMD_LAYOUT_SIZE).is_some_and(|e| e <= 4096) {
        Ok(off)
    } else {
        Err(Error::OutOfRange)
    }
}

/// Why the device did not execute a command: `mlx5_cmd_layout.status_own`
/// bits 7:1 (`MLX5_CMD_DELIVERY_STAT_*`, defined in mlx5_core's cmd.c).
/// Decoding never fails; a value with no name is [`DeliveryStatus::Unknown`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DeliveryStatus {
    /// `MLX5_CMD_DELIVERY_STAT_OK` (0x0): delivered; the command's own
    /// status is in the output header.
    #[default]
    Ok,
    /// `MLX5_CMD_DELIVERY_STAT_SIGNAT_ERR` (0x1): an entry or mailbox
    /// signature is wrong.
    SignatErr,
    /// `MLX5_CMD_DELIVERY_STAT_TOK_ERR` (0x2): a mailbox token does not
    /// match the entry's.
    TokErr,
    /// `MLX5_CMD_DELIVERY_STAT_BAD_BLK_NUM_ERR` (0x3): mailbox
    /// `block_num`s are not 0, 1, 2, ...
    BadBlkNumErr,
    /// `MLX5_CMD_DELIVERY_STAT_OUT_PTR_ALIGN_ERR` (0x4): `out_ptr` or a
    /// `next` of the output chain is misaligned.
    OutPtrAlignErr,
    /// `MLX5_CMD_DELIVERY_STAT_IN_PTR_ALIGN_ERR` (0x5): `in_ptr` or a
    /// `next` of the input chain is misaligned.
    InPtrAlignErr,
    /// `MLX5_CMD_DELIVERY_STAT_FW_ERR` (0x6): firmware internal error.
    FwErr,
    /// `MLX5_CMD_DELIVERY_STAT_IN_LENGTH_ERR` (0x7): `inlen` does not match
    /// the mailboxes.
    InLengthErr,
    /// `MLX5_CMD_DELIVERY_STAT_OUT_LENGTH_ERR` (0x8): `outlen` does not
    /// match the mailboxes.
    OutLengthErr,
    /// `MLX5_CMD_DELIVERY_STAT_RES_FLD_NOT_CLR_ERR` (0x9): a reserved field
    /// of the entry is not zero.
    ResFldNotClrErr,
    /// `MLX5_CMD_DELIVERY_STAT_CMD_DESCR_ERR` (0x10): `type` is not
    /// [`PCI_CMD_XPORT`].
    CmdDescrErr,
    /// A status with no name; carries the raw 7-bit value.
    /// [`DeliveryStatus::from_raw`] never puts a named value here.
    Unknown(u8),
}

impl DeliveryStatus {
    /// Every named delivery status, in value order.
    pub const KNOWN: &'static [DeliveryStatus] = &[
        DeliveryStatus::Ok,
        DeliveryStatus::SignatErr,
        DeliveryStatus::TokErr,
        DeliveryStatus::BadBlkNumErr,
        DeliveryStatus::OutPtrAlignErr,
        DeliveryStatus::InPtrAlignErr,
        DeliveryStatus::FwErr,
        DeliveryStatus::InLengthErr,
        DeliveryStatus::OutLengthErr,
        DeliveryStatus::ResFldNotClrErr,
        DeliveryStatus::CmdDescrErr,
    ];

    /// The 7-bit status value (`status_own >> 1`).
    pub fn raw(self) -> u8 {
        match self {
            DeliveryStatus::Ok => 0x0,
            DeliveryStatus::SignatErr => 0x1,
            DeliveryStatus::TokErr => 0x2,
            DeliveryStatus::BadBlkNumErr => 0x3,
            DeliveryStatus::OutPtrAlignErr => 0x4,
            DeliveryStatus::InPtrAlignErr => 0x5,
            DeliveryStatus::FwErr => 0x6,
            DeliveryStatus::InLengthErr => 0x7,
            DeliveryStatus::OutLengthErr => 0x8,
            DeliveryStatus::ResFldNotClrErr => 0x9,
            DeliveryStatus::CmdDescrErr => 0x10,
            DeliveryStatus::Unknown(raw) => raw & 0x7f,
        }
    }

    /// The status for a 7-bit value (bits above bit 6 are ignored).
    pub fn from_raw(raw: u8) -> Self {
        let raw = raw & 0x7f;
        DeliveryStatus::KNOWN
            .iter()
            .copied()
            .find(|s| s.raw() == raw)
            .unwrap_or(DeliveryStatus::Unknown(raw))
    }

    /// The name without its `MLX5_CMD_DELIVERY_STAT_` prefix, or
    /// `"UNKNOWN"`.
    pub fn name(self) -> &'static str {
        match self {
            DeliveryStatus::Ok => "OK",
            DeliveryStatus::SignatErr => "SIGNAT_ERR",
            DeliveryStatus::TokErr => "TOK_ERR",
            DeliveryStatus::BadBlkNumErr => "BAD_BLK_NUM_ERR",
            DeliveryStatus::OutPtrAlignErr => "OUT_PTR_ALIGN_ERR",
            DeliveryStatus::InPtrAlignErr => "IN_PTR_ALIGN_ERR",
            DeliveryStatus::FwErr => "FW_ERR",
            DeliveryStatus::InLengthErr => "IN_LENGTH_ERR",
            DeliveryStatus::OutLengthErr => "OUT_LENGTH_ERR",
            DeliveryStatus::ResFldNotClrErr => "RES_FLD_NOT_CLR_ERR",
            DeliveryStatus::CmdDescrErr => "CMD_DESCR_ERR",
            DeliveryStatus::Unknown(_) => "UNKNOWN",
        }
    }
}

impl fmt::Display for DeliveryStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "delivery status {} ({:#x})", self.name(), self.raw())
    }
}

/// A command queue entry (`struct mlx5_cmd_layout`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmdLayout {
    /// Transport type, [`PCI_CMD_XPORT`]: `type`, byte 0.
    pub cmd_type: u8,
    /// Input length in bytes, header included: `inlen`, byte 4.
    pub inlen: u32,
    /// Bus address of the first input mailbox, 0 if the input fits inline:
    /// `in_ptr`, byte 8.
    pub in_ptr: u64,
    /// The first [`INLINE_SIZE`] bytes of the input: `in`, bytes 16..32.
    pub in_data: [u8; INLINE_SIZE],
    /// The first [`INLINE_SIZE`] bytes of the output, written by the
    /// device: `out`, bytes 32..48.
    pub out_data: [u8; INLINE_SIZE],
    /// Bus address of the first output mailbox, 0 if the output fits
    /// inline: `out_ptr`, byte 48.
    pub out_ptr: u64,
    /// Output length in bytes: `outlen`, byte 56.
    pub outlen: u32,
    /// A value the driver picks per command and repeats in every mailbox
    /// of it (mlx5_core counts up and skips 0): `token`, byte 60.
    pub token: u8,
    /// Signature byte that makes the XOR of the 64 bytes 0xff (see
    /// [`sign_layout`]): `sig`, byte 61.
    pub sig: u8,
    /// Delivery status, written by the device: `status_own` bits 7:1.
    pub status: DeliveryStatus,
    /// The device owns the entry (set by the driver when posting, cleared
    /// by the device when done): `status_own` bit 0.
    pub ownership: bool,
}

impl CmdLayout {
    /// An entry ready to post: `type` [`PCI_CMD_XPORT`], the first 16
    /// bytes of `input` inline, ownership set, signature not yet computed.
    /// `in_ptr` and `out_ptr` are the first mailboxes of each chain (0 when
    /// a chain is empty, see [`mailbox_count`]).
    pub fn request(input: &[u8], in_ptr: u64, outlen: u32, out_ptr: u64, token: u8) -> Self {
        CmdLayout {
            cmd_type: PCI_CMD_XPORT,
            inlen: u32::try_from(input.len()).unwrap_or(u32::MAX),
            in_ptr,
            in_data: inline_data(input),
            out_data: [0; INLINE_SIZE],
            out_ptr,
            outlen,
            token,
            sig: 0,
            status: DeliveryStatus::Ok,
            ownership: true,
        }
    }

    /// Writes the entry into `out`, every byte of it.
    pub fn encode(&self, out: &mut [u8; CMD_LAYOUT_SIZE]) {
        *out = [0; CMD_LAYOUT_SIZE];
        put_u8(out, 0, self.cmd_type);
        put_u32(out, 4, self.inlen);
        put_u64(out, 8, self.in_ptr);
        out[16..32].copy_from_slice(&self.in_data);
        out[32..48].copy_from_slice(&self.out_data);
        put_u64(out, 48, self.out_ptr);
        put_u32(out, 56, self.outlen);
        put_u8(out, 60, self.token);
        put_u8(out, LAYOUT_SIG, self.sig);
        put_u8(
            out,
            STATUS_OWN_OFFSET,
            (self.status.raw() << 1) | u8::from(self.ownership),
        );
    }

    /// Reads an entry. Never fails; reserved bytes are ignored.
    pub fn decode(b: &[u8; CMD_LAYOUT_SIZE]) -> Self {
        let mut in_data = [0u8; INLINE_SIZE];
        in_data.copy_from_slice(&b[16..32]);
        let mut out_data = [0u8; INLINE_SIZE];
        out_data.copy_from_slice(&b[32..48]);
        let status_own = get_u8(b, STATUS_OWN_OFFSET);
        CmdLayout {
            cmd_type: get_u8(b, 0),
            inlen: get_u32(b, 4),
            in_ptr: get_u64(b, 8),
            in_data,
            out_data,
            out_ptr: get_u64(b, 48),
            outlen: get_u32(b, 56),
            token: get_u8(b, 60),
            sig: get_u8(b, LAYOUT_SIG),
            status: DeliveryStatus::from_raw(status_own >> 1),
            ownership: owned_by_hw(status_own),
        }
    }
}

/// The control part of a mailbox block (`struct mlx5_cmd_prot_block`
/// without its 512 data bytes).
///
/// | byte | field |
/// |---|---|
/// | 0..512 | `data` |
/// | 560 | `next` |
/// | 568 | `block_num` |
/// | 573 | `token` |
/// | 574 | `ctrl_sig` |
/// | 575 | `sig` |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MailboxHeader {
    /// Bus address of the next block of the chain, 0 in the last:
    /// `next`, byte 560.
    pub next: u64,
    /// Position in the chain, from 0: `block_num`, byte 568.
    pub block_num: u32,
    /// The command's token ([`CmdLayout::token`]): `token`, byte 573.
    pub token: u8,
    /// Signature of bytes 512..575 (see [`sign_block`]): `ctrl_sig`,
    /// byte 574.
    pub ctrl_sig: u8,
    /// Signature of the whole block: `sig`, byte 575.
    pub sig: u8,
}

impl MailboxHeader {
    /// Writes a whole block into `out`: `data` (at most
    /// [`MAILBOX_DATA_SIZE`] bytes, zero-padded) and the control fields;
    /// every byte of `out` is written.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] if `data` is longer than a block holds; `out`
    /// is left unchanged then.
    pub fn encode(&self, data: &[u8], out: &mut [u8; MAILBOX_SIZE]) -> Result<(), Error> {
        if data.len() > MAILBOX_DATA_SIZE {
            return Err(Error::OutOfRange);
        }
        *out = [0; MAILBOX_SIZE];
        out[..data.len()].copy_from_slice(data);
        put_u64(out, BLOCK_NEXT, self.next);
        put_u32(out, BLOCK_NUM, self.block_num);
        put_u8(out, BLOCK_TOKEN, self.token);
        put_u8(out, BLOCK_CTRL_SIG, self.ctrl_sig);
        put_u8(out, BLOCK_SIG, self.sig);
        Ok(())
    }

    /// Reads the control fields of a block; its data is
    /// `&b[..MAILBOX_DATA_SIZE]`. Never fails.
    pub fn decode(b: &[u8; MAILBOX_SIZE]) -> Self {
        MailboxHeader {
            next: get_u64(b, BLOCK_NEXT),
            block_num: get_u32(b, BLOCK_NUM),
            token: get_u8(b, BLOCK_TOKEN),
            ctrl_sig: get_u8(b, BLOCK_CTRL_SIG),
            sig: get_u8(b, BLOCK_SIG),
        }
    }
}

/// XOR of all bytes of `b`.
pub fn xor8(b: &[u8]) -> u8 {
    b.iter().fold(0, |a, x| a ^ x)
}

/// Sets `sig` of an encoded entry so that the XOR of its 64 bytes is 0xff,
/// as mlx5_core does for every command it posts. The device checks it only
/// while command checksums are enabled (`cmd_hca_cap.cmdif_checksum`).
pub fn sign_layout(b: &mut [u8; CMD_LAYOUT_SIZE]) {
    b[LAYOUT_SIG] = 0;
    b[LAYOUT_SIG] = !xor8(b);
}

/// Whether an entry's signature is good: the XOR of its bytes is 0xff.
pub fn layout_signature_ok(b: &[u8; CMD_LAYOUT_SIZE]) -> bool {
    xor8(b) == 0xff
}

/// Sets `ctrl_sig` and `sig` of an encoded mailbox block: `ctrl_sig` makes
/// the XOR of bytes 512..575 (the control part, `ctrl_sig` included, `sig`
/// not) 0xff, then `sig` makes the XOR of the whole block 0xff. Only needed
/// while command checksums are enabled.
pub fn sign_block(b: &mut [u8; MAILBOX_SIZE]) {
    b[BLOCK_CTRL_SIG] = 0;
    b[BLOCK_SIG] = 0;
    b[BLOCK_CTRL_SIG] = !xor8(&b[MAILBOX_DATA_SIZE..BLOCK_CTRL_SIG]);
    b[BLOCK_SIG] = !xor8(&b[..BLOCK_SIG]);
}

/// Whether a mailbox block's two signatures are good (see [`sign_block`]).
pub fn block_signature_ok(b: &[u8; MAILBOX_SIZE]) -> bool {
    xor8(&b[MAILBOX_DATA_SIZE..BLOCK_SIG]) == 0xff && xor8(b) == 0xff
}

/// How many mailbox blocks a message of `len` bytes needs: none if it fits
/// in the entry's [`INLINE_SIZE`] bytes, else one per started
/// [`MAILBOX_DATA_SIZE`] bytes of the rest.
pub fn mailbox_count(len: usize) -> usize {
    len.saturating_sub(INLINE_SIZE).div_ceil(MAILBOX_DATA_SIZE)
}

/// The first [`INLINE_SIZE`] bytes of a message, zero-padded: the entry's
/// `in` (or `out`).
pub fn inline_data(msg: &[u8]) -> [u8; INLINE_SIZE] {
    let mut d = [0u8; INLINE_SIZE];
    let n = msg.len().min(INLINE_SIZE);
    d[..n].copy_from_slice(&msg[..n]);
    d
}

/// The bytes of a message that mailbox block `block` carries: bytes
/// `16 + 512 * block` up to 512 more, fewer in the last block, none past
/// the end.
pub fn mailbox_data(msg: &[u8], block: usize) -> &[u8] {
    let start = block
        .checked_mul(MAILBOX_DATA_SIZE)
        .and_then(|o| o.checked_add(INLINE_SIZE))
        .unwrap_or(usize::MAX);
    let end = start.saturating_add(MAILBOX_DATA_SIZE).min(msg.len());
    msg.get(start..end).unwrap_or(&[])
}

/// Writes mailbox block `block` of message `msg` into `out`: its data
/// ([`mailbox_data`]), `next` (the bus address of block `block + 1`, or 0
/// for the last), `block_num` and `token`, with signatures computed if
/// `sign`.
///
/// # Errors
///
/// [`Error::OutOfRange`] if `block` is not below [`mailbox_count`] of the
/// message, or does not fit `block_num`.
pub fn write_mailbox(
    msg: &[u8],
    block: usize,
    next: u64,
    token: u8,
    sign: bool,
    out: &mut [u8; MAILBOX_SIZE],
) -> Result<(), Error> {
    if block >= mailbox_count(msg.len()) {
        return Err(Error::OutOfRange);
    }
    let header = MailboxHeader {
        next,
        block_num: u32::try_from(block).map_err(|_| Error::OutOfRange)?,
        token,
        ctrl_sig: 0,
        sig: 0,
    };
    header.encode(mailbox_data(msg, block), out)?;
    if sign {
        sign_block(out);
    }
    Ok(())
}

/// Copies the data of output mailbox `block` into its place in the output
/// message `msg` (the reverse of [`mailbox_data`]), and returns how many
/// bytes were copied (0 if `msg` ends before the block's part).
pub fn read_mailbox(block_bytes: &[u8; MAILBOX_SIZE], block: usize, msg: &mut [u8]) -> usize {
    let start = block
        .checked_mul(MAILBOX_DATA_SIZE)
        .and_then(|o| o.checked_add(INLINE_SIZE))
        .unwrap_or(usize::MAX);
    let end = start.saturating_add(MAILBOX_DATA_SIZE).min(msg.len());
    match msg.get_mut(start..end) {
        Some(dst) => {
            let n = dst.len();
            dst.copy_from_slice(&block_bytes[..n]);
            n
        }
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_known_bytes() {
        let input = [0xaau8; 20];
        let mut e = CmdLayout::request(&input, 0x1_2345_6000, 0x10c, 0x7_0000_0400, 0x42);
        assert_eq!(e.inlen, 20);
        let mut b = [0xffu8; 64];
        e.encode(&mut b);
        assert_eq!(b[..4], [7, 0, 0, 0]);
        assert_eq!(b[4..16], [0, 0, 0, 20, 0, 0, 0, 1, 0x23, 0x45, 0x60, 0]);
        assert_eq!(b[16..32], [0xaa; 16]);
        assert_eq!(b[32..48], [0; 16]);
        assert_eq!(
            b[48..64],
            [0, 0, 0, 7, 0, 0, 4, 0, 0, 0, 1, 0x0c, 0x42, 0, 0, 1]
        );
        assert_eq!(CmdLayout::decode(&b), e);
        sign_layout(&mut b);
        assert!(layout_signature_ok(&b));
        e.sig = b[61];
        assert_eq!(CmdLayout::decode(&b), e);
        // The device hands it back with a delivery status.
        b[63] = 0x10 << 1;
        let d = CmdLayout::decode(&b);
        assert!(!d.ownership);
        assert_eq!(d.status, DeliveryStatus::CmdDescrErr);
        assert!(!layout_signature_ok(&b));
    }

    #[test]
    fn delivery_status_values() {
        for raw in 0..0x80u8 {
            assert_eq!(DeliveryStatus::from_raw(raw).raw(), raw);
        }
        assert_eq!(DeliveryStatus::from_raw(0x81), DeliveryStatus::SignatErr);
        assert_eq!(DeliveryStatus::from_raw(0x0b).name(), "UNKNOWN");
    }

    #[test]
    fn doorbell_and_slots() {
        assert_eq!(doorbell(0), Ok(1));
        assert_eq!(doorbell(31), Ok(0x8000_0000));
        assert_eq!(doorbell(32), Err(Error::OutOfRange));
        assert_eq!(entry_offset(31, 6), Ok(31 * 64));
        assert_eq!(entry_offset(64, 6), Err(Error::OutOfRange));
        assert_eq!(entry_offset(0, 200), Err(Error::OutOfRange));
    }

    #[test]
    fn messages_split_into_mailboxes() {
        assert_eq!(mailbox_count(0), 0);
        assert_eq!(mailbox_count(16), 0);
        assert_eq!(mailbox_count(17), 1);
        assert_eq!(mailbox_count(16 + 512), 1);
        assert_eq!(mailbox_count(16 + 513), 2);
        // CREATE_QP with 4 pages: 272 + 32 bytes.
        let mut msg = [0u8; 304];
        for (i, x) in msg.iter_mut().enumerate() {
            *x = i as u8;
        }
        assert_eq!(inline_data(&msg), core::array::from_fn(|i| i as u8));
        assert_eq!(mailbox_data(&msg, 0), &msg[16..304]);
        assert!(mailbox_data(&msg, 1).is_empty());
        assert!(mailbox_data(&msg, usize::MAX).is_empty());
        let mut blk = [0xeeu8; MAILBOX_SIZE];
        write_mailbox(&msg, 0, 0, 0x42, true, &mut blk).unwrap();
        assert_eq!(blk[..288], msg[16..]);
        assert_eq!(blk[288..560], [0; 272]);
        assert_eq!(blk[560..574], [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x42]);
        assert!(block_signature_ok(&blk));
        let h = MailboxHeader::decode(&blk);
        assert_eq!((h.next, h.block_num, h.token), (0, 0, 0x42));
        assert_eq!(
            write_mailbox(&msg, 1, 0, 0, false, &mut blk),
            Err(Error::OutOfRange)
        );
        // And back.
        let mut back = [0u8; 304];
        back[..16].copy_from_slice(&inline_data(&msg));
        assert_eq!(read_mailbox(&blk, 0, &mut back), 288);
        assert_eq!(back, msg);
        assert_eq!(read_mailbox(&blk, 1, &mut back), 0);
    }

    #[test]
    fn block_signatures() {
        let mut blk = [0u8; MAILBOX_SIZE];
        MailboxHeader {
            next: 0x1234_5000,
            block_num: 3,
            token: 9,
            ctrl_sig: 0,
            sig: 0,
        }
        .encode(&[0x5a; 100], &mut blk)
        .unwrap();
        sign_block(&mut blk);
        assert!(block_signature_ok(&blk));
        blk[10] ^= 1;
        assert!(!block_signature_ok(&blk));
        assert_eq!(
            MailboxHeader::default().encode(&[0; 513], &mut blk),
            Err(Error::OutOfRange)
        );
    }
}
