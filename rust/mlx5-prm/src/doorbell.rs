// SPDX-License-Identifier: GPL-2.0

//! Doorbell records (in host memory, read by the device) and doorbell
//! registers (stores to the UAR page).
//!
//! Doorbell records:
//!
//! | record | word 0 (offset 0) | word 1 (offset 4) |
//! |---|---|---|
//! | QP | receive counter (RQ head & 0xffff) | send counter (SQ `cur_post` & 0xffff, in WQEBBs) |
//! | CQ | SET_CI: consumer index & 0xffffff | ARM: `sn << 28 \| cmd \| ci & 0xffffff` |
//!
//! Every word is a big-endian `u32`. UAR page (4 KiB, `MLX5_ADAPTER_PAGE_SIZE`):
//!
//! | offset | register |
//! |---|---|
//! | 0x20 | CQ doorbell, one 64-bit store: ARM word, then CQN (`MLX5_CQ_DOORBELL`) |
//! | 0x40 | EQ doorbell, update consumer index and arm |
//! | 0x48 | EQ doorbell, update consumer index only |
//! | 0x800 | first BlueFlame register (`MLX5_BF_OFFSET`) |
//!
//! A BlueFlame register is [`BF_REG_SIZE`] bytes, used as two halves of
//! [`BF_BUF_SIZE`] that alternate: after each send doorbell (a plain 64-bit
//! store of the first 8 bytes of the control segment, or a BlueFlame copy of
//! the whole WQE in 64-byte chunks) the next one goes to the other half.

use super::bytes::{be_u32_pair, get_u32, put_u32};
use super::error::Error;
use super::ring::CI_MASK;

/// Size of a QP doorbell record in bytes.
pub const QP_DBR_SIZE: usize = 8;
/// Offset of the receive counter in a QP doorbell record (`MLX5_RCV_DBR` * 4).
pub const QP_DBR_RECV_OFFSET: usize = 0;
/// Offset of the send counter in a QP doorbell record (`MLX5_SND_DBR` * 4).
pub const QP_DBR_SEND_OFFSET: usize = 4;
/// Size of a CQ doorbell record in bytes.
pub const CQ_DBR_SIZE: usize = 8;
/// Offset of the SET_CI word in a CQ doorbell record (rdma-core's
/// `MLX5_CQ_SET_CI` * 4; the kernel's `mlx5_core_cq.set_ci_db`).
pub const CQ_DBR_SET_CI_OFFSET: usize = 0;
/// Offset of the ARM word in a CQ doorbell record (rdma-core's
/// `MLX5_CQ_ARM_DB` * 4; the kernel's `mlx5_core_cq.arm_db`).
pub const CQ_DBR_ARM_OFFSET: usize = 4;

/// Size of a UAR page (`MLX5_ADAPTER_PAGE_SIZE`).
pub const UAR_PAGE_SIZE: usize = 4096;
/// Offset of the CQ doorbell in a UAR page (`MLX5_CQ_DOORBELL`).
pub const UAR_CQ_DOORBELL_OFFSET: usize = 0x20;
/// Offset of the EQ doorbell that updates the consumer index and re-arms
/// the EQ (the kernel's `MLX5_EQ_DOORBELL_OFFSET`; `eq_update_ci(eq, 1)`).
pub const UAR_EQ_ARM_OFFSET: usize = 0x40;
/// Offset of the EQ doorbell that updates the consumer index without arming
/// (`MLX5_EQ_DOORBELL_OFFSET` + 8; `eq_update_ci(eq, 0)`).
pub const UAR_EQ_UPDATE_OFFSET: usize = 0x48;
/// Offset of the first BlueFlame register in a UAR page (`MLX5_BF_OFFSET`).
pub const UAR_BF_OFFSET: usize = 0x800;
/// Size of one BlueFlame register, `1 << log_bf_reg_size` with the
/// customary `log_bf_reg_size` of 9 (what the rmlx5 device reports).
pub const BF_REG_SIZE: usize = 512;
/// Size of one half of a BlueFlame register (`bf_reg_size / 2`, rdma-core's
/// `mlx5_bf.buf_size`): the largest WQE a BlueFlame copy may carry.
pub const BF_BUF_SIZE: usize = BF_REG_SIZE / 2;
/// BlueFlame registers per UAR page (`MLX5_BFREGS_PER_UAR`).
pub const BFREGS_PER_UAR: usize = 4;

/// The QP doorbell record: the counters that tell the device how far the
/// receive and send queues have been posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpDbRec {
    /// Receive queue head (WQEs posted), 16 bits: word 0 (`MLX5_RCV_DBR`).
    pub recv_counter: u16,
    /// Send queue producer counter in WQEBBs, 16 bits: word 1
    /// (`MLX5_SND_DBR`).
    pub send_counter: u16,
}

impl QpDbRec {
    /// Writes both words into `out`.
    pub fn encode(&self, out: &mut [u8; QP_DBR_SIZE]) {
        out[..4].copy_from_slice(&counter_word(self.recv_counter));
        out[4..].copy_from_slice(&counter_word(self.send_counter));
    }

    /// Reads both words from `b`.
    ///
    /// # Errors
    ///
    /// [`Error::ReservedBits`] if a word has any of its top 16 bits set.
    pub fn decode(b: &[u8; QP_DBR_SIZE]) -> Result<Self, Error> {
        let recv = get_u32(b, QP_DBR_RECV_OFFSET);
        let send = get_u32(b, QP_DBR_SEND_OFFSET);
        if (recv | send) >> 16 != 0 {
            return Err(Error::ReservedBits);
        }
        Ok(QpDbRec {
            recv_counter: recv as u16,
            send_counter: send as u16,
        })
    }
}

/// The 4 bytes of one QP doorbell record word holding `counter` (a
/// big-endian `u32` with 16 significant bits), for updating one word alone
/// (with one aligned 32-bit store, so that the device never reads a
/// half-updated counter).
#[inline]
pub fn counter_word(counter: u16) -> [u8; 4] {
    u32::from(counter).to_be_bytes()
}

/// The 4 bytes of the CQ doorbell record's SET_CI word: `ci & 0xffffff`,
/// big-endian (stored, like every record word, with one aligned 32-bit
/// store).
#[inline]
pub fn set_ci_word(ci: u32) -> [u8; 4] {
    (ci & CI_MASK).to_be_bytes()
}

/// What an armed CQ waits for: the `cmd` field (bits 27:24) of the ARM word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArmCmd {
    /// Any next completion (`MLX5_CQ_DB_REQ_NOT`, 0).
    Next,
    /// A solicited receive completion or an error completion only
    /// (`MLX5_CQ_DB_REQ_NOT_SOL`, `1 << 24`).
    Solicited,
}

impl ArmCmd {
    /// The command bits as they sit in the ARM word.
    #[inline]
    pub fn bits(self) -> u32 {
        match self {
            ArmCmd::Next => 0,
            ArmCmd::Solicited => 1 << 24,
        }
    }
}

/// The CQ ARM word, `sn << 28 | cmd | ci & 0xffffff`: written to the CQ
/// doorbell record and, followed by the CQN, to the UAR CQ doorbell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqArm {
    /// Arm sequence number, 2 bits (`arm_sn & 3`), bumped by software for
    /// each completion event it reads: bits 29:28.
    pub sn: u8,
    /// What to wait for: bits 27:24.
    pub cmd: ArmCmd,
    /// Consumer index the CQ is armed at, 24 bits: bits 23:0.
    pub ci: u32,
}

impl CqArm {
    /// The ARM word as a host integer.
    #[inline]
    pub fn word(&self) -> u32 {
        u32::from(self.sn & 3) << 28 | self.cmd.bits() | (self.ci & CI_MASK)
    }

    /// The 4 bytes of the ARM word as they sit in the doorbell record at
    /// [`CQ_DBR_ARM_OFFSET`] (what [`CqArm::encode`] writes), to be stored
    /// with one aligned 32-bit store.
    #[inline]
    pub fn to_bytes(&self) -> [u8; 4] {
        self.word().to_be_bytes()
    }

    /// Splits an ARM word given as a host integer.
    ///
    /// # Errors
    ///
    /// [`Error::ReservedBits`] if bits 31:30 or 27:25 are set (no such
    /// sequence number or command).
    pub fn from_word(word: u32) -> Result<Self, Error> {
        if word & 0xce00_0000 != 0 {
            return Err(Error::ReservedBits);
        }
        Ok(CqArm {
            sn: (word >> 28) as u8 & 3,
            cmd: if word & (1 << 24) != 0 {
                ArmCmd::Solicited
            } else {
                ArmCmd::Next
            },
            ci: word & CI_MASK,
        })
    }

    /// Writes the word, big-endian, into `out`.
    pub fn encode(&self, out: &mut [u8; 4]) {
        put_u32(out, 0, self.word());
    }

    /// Reads a big-endian ARM word from `b`.
    ///
    /// # Errors
    ///
    /// As for [`CqArm::from_word`].
    pub fn decode(b: &[u8; 4]) -> Result<Self, Error> {
        CqArm::from_word(get_u32(b, 0))
    }
}

/// The CQ doorbell record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqDbRec {
    /// Consumer index software has polled up to, 24 bits: SET_CI word.
    pub set_ci: u32,
    /// The last arm request: ARM word.
    pub arm: CqArm,
}

impl CqDbRec {
    /// Writes both words into `out`.
    pub fn encode(&self, out: &mut [u8; CQ_DBR_SIZE]) {
        out[..4].copy_from_slice(&set_ci_word(self.set_ci));
        put_u32(out, CQ_DBR_ARM_OFFSET, self.arm.word());
    }

    /// Reads both words from `b`.
    ///
    /// # Errors
    ///
    /// [`Error::ReservedBits`] if the SET_CI word has any of its top 8 bits
    /// set, or as for [`CqArm::from_word`].
    pub fn decode(b: &[u8; CQ_DBR_SIZE]) -> Result<Self, Error> {
        Ok(CqDbRec {
            set_ci: CqDbRec::set_ci_of(b)?,
            arm: CqArm::from_word(CqDbRec::arm_word_of(b))?,
        })
    }

    /// The SET_CI word alone, whatever the ARM word beside it holds (a
    /// device reads it to know how much room the ring has).
    ///
    /// # Errors
    ///
    /// [`Error::ReservedBits`] if any of its top 8 bits is set.
    pub fn set_ci_of(b: &[u8; CQ_DBR_SIZE]) -> Result<u32, Error> {
        let set_ci = get_u32(b, CQ_DBR_SET_CI_OFFSET);
        if set_ci & !CI_MASK != 0 {
            return Err(Error::ReservedBits);
        }
        Ok(set_ci)
    }

    /// The raw ARM word as a host integer (see [`CqArm::from_word`]).
    pub fn arm_word_of(b: &[u8; CQ_DBR_SIZE]) -> u32 {
        get_u32(b, CQ_DBR_ARM_OFFSET)
    }
}

/// The 64-bit CQ doorbell stored at [`UAR_CQ_DOORBELL_OFFSET`]: the ARM word
/// in bytes 0..4 and the CQN in bytes 4..8, both big-endian (the kernel's
/// `mlx5_cq_arm`, rdma-core's `mlx5_arm_cq`). Store the 8 bytes with one
/// 64-bit write (`u64::from_ne_bytes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UarCqDoorbell {
    /// The arm request, identical to the ARM word of the doorbell record.
    pub arm: CqArm,
    /// CQ number, 24 bits.
    pub cqn: u32,
}

impl UarCqDoorbell {
    /// Writes the 8 doorbell bytes into `out`.
    pub fn encode(&self, out: &mut [u8; 8]) {
        put_u32(out, 0, self.arm.word());
        put_u32(out, 4, self.cqn & CI_MASK);
    }

    /// The 8 doorbell bytes (what [`UarCqDoorbell::encode`] writes), built
    /// in a register for the one 64-bit store.
    #[inline]
    pub fn to_bytes(&self) -> [u8; 8] {
        be_u32_pair(self.arm.word(), self.cqn & CI_MASK)
    }

    /// Reads the 8 doorbell bytes from `b`.
    ///
    /// # Errors
    ///
    /// [`Error::ReservedBits`] if the CQN has any of its top 8 bits set, or
    /// as for [`CqArm::from_word`].
    pub fn decode(b: &[u8; 8]) -> Result<Self, Error> {
        let cqn = get_u32(b, 4);
        if cqn & !CI_MASK != 0 {
            return Err(Error::ReservedBits);
        }
        Ok(UarCqDoorbell {
            arm: CqArm::from_word(get_u32(b, 0))?,
            cqn,
        })
    }
}

/// The 32-bit EQ doorbell, `ci & 0xffffff | eqn << 24` big-endian, stored at
/// [`UAR_EQ_ARM_OFFSET`] (update and arm) or [`UAR_EQ_UPDATE_OFFSET`]
/// (update only) (the kernel's `eq_update_ci`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EqDoorbell {
    /// EQ number: bits 31:24.
    pub eqn: u8,
    /// EQ consumer index, 24 bits: bits 23:0.
    pub ci: u32,
}

impl EqDoorbell {
    /// Writes the 4 doorbell bytes into `out`.
    pub fn encode(&self, out: &mut [u8; 4]) {
        put_u32(out, 0, u32::from(self.eqn) << 24 | (self.ci & CI_MASK));
    }

    /// Reads the 4 doorbell bytes from `b`.
    pub fn decode(b: &[u8; 4]) -> Self {
        let v = get_u32(b, 0);
        EqDoorbell {
            eqn: (v >> 24) as u8,
            ci: v & CI_MASK,
        }
    }
}

/// Offset in its UAR page of BlueFlame register `index` (0 to 3; rmlx5 and
/// mlx5 use registers 0 and 1 for ordinary QPs).
///
/// # Errors
///
/// [`Error::OutOfRange`] if `index` is not below [`BFREGS_PER_UAR`].
pub fn bf_reg_offset(index: usize) -> Result<usize, Error> {
    if index >= BFREGS_PER_UAR {
        return Err(Error::OutOfRange);
    }
    Ok(UAR_BF_OFFSET + index * BF_REG_SIZE)
}

/// Offset in the UAR page of half `half` (0 or 1) of BlueFlame register
/// `index`: where a send doorbell (or a BlueFlame copy) is stored.
///
/// # Errors
///
/// [`Error::OutOfRange`] for a register past [`BFREGS_PER_UAR`] or a half
/// other than 0 and 1.
pub fn bf_half_offset(index: usize, half: u8) -> Result<usize, Error> {
    if half > 1 {
        return Err(Error::OutOfRange);
    }
    Ok(bf_reg_offset(index)? + usize::from(half) * BF_BUF_SIZE)
}

/// Offset in BAR0 of register `reg` (an offset in a UAR page) of UAR page
/// `uar`: UAR pages follow each other from the start of BAR0, one
/// [`UAR_PAGE_SIZE`] each (`log_uar_page_sz` 0). `None` if it overflows.
pub fn uar_reg_offset(uar: u32, reg: usize) -> Option<usize> {
    usize::try_from(uar)
        .ok()?
        .checked_mul(UAR_PAGE_SIZE)?
        .checked_add(reg)
}

/// The half of a BlueFlame register to use after the one at `offset`
/// (relative to the register, so 0 or [`BF_BUF_SIZE`]): the halves
/// alternate after every send doorbell, `offset ^ buf_size`.
pub fn bf_next_offset(offset: usize) -> usize {
    offset ^ BF_BUF_SIZE
}

/// The 8 bytes of a plain send doorbell: the first 8 bytes of the WQE's
/// encoded control segment (opmod, WQE index, opcode, QPN, DS), stored with
/// one 64-bit write to the current BlueFlame half.
pub fn send_doorbell(ctrl: &[u8; 16]) -> [u8; 8] {
    let mut db = [0u8; 8];
    db.copy_from_slice(&ctrl[..8]);
    db
}

/// [`send_doorbell`] of a control segment given as its two words in memory
/// order ([`super::wqe::CtrlSeg::to_words`], or loaded from the SQ a word at
/// a time): the first word, `opmod_idx_opcode` and `qpn_ds`.
#[inline]
pub fn send_doorbell_words(ctrl: &[[u8; 8]; 2]) -> [u8; 8] {
    ctrl[0]
}

/// What a plain send doorbell names: the first 8 bytes of a control
/// segment (`mlx5_wqe_ctrl_seg.opmod_idx_opcode` and `qpn_ds`), read back
/// by the device to find the WQE that was rung.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendDoorbellWord {
    /// Opcode modifier: `opmod_idx_opcode` bits 31:24.
    pub opmod: u8,
    /// WQE index (the 16-bit SQ producer counter of the WQE's first
    /// WQEBB): `opmod_idx_opcode` bits 23:8.
    pub wqe_index: u16,
    /// Raw opcode byte, not checked: the engine reports an unknown opcode
    /// as a local QP operation error when it executes the WQE.
    pub opcode: u8,
    /// QP number, 24 bits: `qpn_ds` bits 31:8.
    pub qpn: u32,
    /// DS count of the WQE, 6 bits: `qpn_ds` bits 5:0.
    pub ds: u8,
}

impl SendDoorbellWord {
    /// Splits the 8 doorbell bytes. Never fails: every field is taken as
    /// it is, for the caller to compare with the SQ.
    pub fn decode(db: &[u8; 8]) -> Self {
        let word0 = get_u32(db, 0);
        let qpn_ds = get_u32(db, 4);
        SendDoorbellWord {
            opmod: (word0 >> 24) as u8,
            wqe_index: (word0 >> 8) as u16,
            opcode: word0 as u8,
            qpn: qpn_ds >> 8,
            ds: (qpn_ds & 0x3f) as u8,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_doorbell_word_names_the_wqe() {
        let mut ctrl = [0u8; 16];
        super::super::wqe::CtrlSeg {
            opmod: 1,
            wqe_index: 0xbeef,
            opcode: super::super::opcode::SendOpcode::RdmaWrite,
            qpn: 0x12_3456,
            ds: 0x23,
            signature: 0,
            fence_mode: 0,
            ce: 2,
            solicited: false,
            imm: 0,
        }
        .encode(&mut ctrl);
        let w = SendDoorbellWord::decode(&send_doorbell(&ctrl));
        assert_eq!(
            w,
            SendDoorbellWord {
                opmod: 1,
                wqe_index: 0xbeef,
                opcode: 0x08,
                qpn: 0x12_3456,
                ds: 0x23
            }
        );
        let words = [
            <[u8; 8]>::try_from(&ctrl[..8]).unwrap(),
            <[u8; 8]>::try_from(&ctrl[8..]).unwrap(),
        ];
        assert_eq!(send_doorbell_words(&words), send_doorbell(&ctrl));
        // An unknown opcode still decodes.
        let mut db = send_doorbell(&ctrl);
        db[3] = 0x7f;
        assert_eq!(SendDoorbellWord::decode(&db).opcode, 0x7f);
    }

    #[test]
    fn qp_record() {
        let mut b = [0xffu8; 8];
        QpDbRec {
            recv_counter: 0x1234,
            send_counter: 0xfffe,
        }
        .encode(&mut b);
        assert_eq!(b, [0, 0, 0x12, 0x34, 0, 0, 0xff, 0xfe]);
        assert_eq!(QpDbRec::decode(&b).unwrap().send_counter, 0xfffe);
        b[5] = 1;
        assert_eq!(QpDbRec::decode(&b), Err(Error::ReservedBits));
    }

    #[test]
    fn cq_arm_record_and_uar() {
        let arm = CqArm {
            sn: 3,
            cmd: ArmCmd::Solicited,
            ci: 0x0123_4567,
        };
        assert_eq!(arm.word(), 0x3123_4567);
        let mut rec = [0u8; 8];
        CqDbRec {
            set_ci: 0xff_fff0,
            arm,
        }
        .encode(&mut rec);
        assert_eq!(rec, [0, 0xff, 0xff, 0xf0, 0x31, 0x23, 0x45, 0x67]);
        assert_eq!(
            CqDbRec::decode(&rec),
            Ok(CqDbRec {
                set_ci: 0xff_fff0,
                arm: CqArm {
                    ci: 0x23_4567,
                    ..arm
                }
            })
        );
        assert_eq!(arm.to_bytes(), [0x31, 0x23, 0x45, 0x67]);
        let mut db = [0u8; 8];
        UarCqDoorbell { arm, cqn: 0x42 }.encode(&mut db);
        assert_eq!(db, [0x31, 0x23, 0x45, 0x67, 0, 0, 0, 0x42]);
        let db = UarCqDoorbell {
            arm,
            cqn: 0xff00_0042,
        };
        assert_eq!(db.to_bytes(), [0x31, 0x23, 0x45, 0x67, 0, 0, 0, 0x42]);
        assert_eq!(CqArm::from_word(0x4000_0000), Err(Error::ReservedBits));
        assert_eq!(CqArm::from_word(0x0200_0000), Err(Error::ReservedBits));
        assert_eq!(set_ci_word(0x0100_0002), [0, 0, 0, 2]);
    }

    #[test]
    fn eq_doorbell_and_uar_layout() {
        let mut b = [0u8; 4];
        EqDoorbell {
            eqn: 7,
            ci: 0x0100_0005,
        }
        .encode(&mut b);
        assert_eq!(b, [7, 0, 0, 5]);
        assert_eq!(EqDoorbell::decode(&b), EqDoorbell { eqn: 7, ci: 5 });
        assert_eq!(bf_reg_offset(0), Ok(0x800));
        assert_eq!(bf_reg_offset(1), Ok(0xa00));
        assert_eq!(bf_reg_offset(3).unwrap() + BF_REG_SIZE, UAR_PAGE_SIZE);
        assert_eq!(bf_reg_offset(4), Err(Error::OutOfRange));
        assert_eq!(bf_next_offset(0), 256);
        assert_eq!(bf_next_offset(256), 0);
        assert_eq!(bf_half_offset(0, 0), Ok(0x800));
        assert_eq!(bf_half_offset(1, 1), Ok(0xb00));
        assert_eq!(bf_half_offset(0, 2), Err(Error::OutOfRange));
        assert_eq!(bf_half_offset(4, 0), Err(Error::OutOfRange));
        assert_eq!(uar_reg_offset(3, UAR_EQ_ARM_OFFSET), Some(3 * 4096 + 0x40));
        assert_eq!(uar_reg_offset(u32::MAX, usize::MAX), None);
        let ctrl: [u8; 16] = core::array::from_fn(|i| i as u8);
        assert_eq!(send_doorbell(&ctrl), [0, 1, 2, 3, 4, 5, 6, 7]);
    }
}
