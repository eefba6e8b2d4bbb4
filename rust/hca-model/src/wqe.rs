// SPDX-License-Identifier: GPL-2.0

//! Reading a send WQE out of the SQ in DMA memory and taking it apart with
//! the mlx5-prm decoders.
//!
//! The WQE is copied into a linear buffer first, following it across the
//! end of the SQ ring, so that segments and inline payloads that wrap are
//! decoded like any other.

use super::atomic::AtomicOp;
use super::mem::DmaMemory;
use super::prm::bytes::at;
use super::prm::opcode::SendOpcode;
use super::prm::ring;
use super::prm::wqe::{
    inline_payload, inline_seg_size, umr_flags, AtomicSeg, CtrlSeg, DataSeg, DatagramSeg,
    InlineHeader, MaskedAtomicSeg, MkeySeg, RaddrSeg, UmrCtrlSeg, MAX_WQE_SIZE, WQEBB_SIZE,
};
use super::qp::Sq;

/// What a send WQE asks for.
#[derive(Clone, Copy, Debug)]
pub(super) enum Op {
    /// NOP: completes without moving data.
    Nop,
    /// SEND, SEND_IMM or SEND_INVAL (`inval`: the rkey the responder
    /// invalidates, carried in the control segment's `imm`).
    Send {
        imm: Option<u32>,
        inval: Option<u32>,
    },
    /// RDMA_WRITE or RDMA_WRITE_IMM.
    Write { raddr: RaddrSeg, imm: Option<u32> },
    /// RDMA_READ: the data segments are the local scatter list.
    Read { raddr: RaddrSeg },
    /// One of the four 8-byte atomics; the data segment receives the
    /// original value.
    Atomic { raddr: RaddrSeg, op: AtomicOp },
    /// UMR (fast registration or local invalidation) of the mkey whose
    /// index the control segment's `imm` names; `xlt` is the data segment
    /// pointing at the page list, when the UMR writes one by pointer.
    Umr {
        ctrl: UmrCtrlSeg,
        mkey: MkeySeg,
        xlt: Option<DataSeg>,
    },
}

/// What a send WQE of a UD or GSI QP asks for.
#[derive(Clone, Copy, Debug)]
pub(super) enum UdOp {
    /// NOP: completes without sending.
    Nop,
    /// SEND or SEND_IMM of one datagram to the address vector `av`.
    Send { imm: Option<u32>, av: DatagramSeg },
}

/// A send WQE, copied out of the SQ into a buffer of the engine.
pub(super) struct SendWqe<'a> {
    /// The WQE's bytes (16 times its DS count).
    bytes: &'a [u8],
    /// The decoded control segment.
    pub(super) ctrl: CtrlSeg,
    /// WQEBBs the WQE occupies.
    pub(super) bbs: u16,
}

/// Why the WQE at the head of the SQ cannot be executed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Malformed {
    /// The opcode byte, as far as it could be read (0 if the SQ itself was
    /// unreadable).
    pub(super) opcode: u8,
    /// WQEBBs to skip past it (1 if its size could not be read).
    pub(super) bbs: u16,
}

/// Copies `out.len()` bytes from ring offset `offset` of `sq`, wrapping.
fn ring_read<M: DmaMemory>(mem: &mut M, sq: &Sq, offset: usize, out: &mut [u8]) -> Option<()> {
    let ring_len = WQEBB_SIZE.checked_shl(sq.log)?;
    let first = out.len().min(ring_len.checked_sub(offset)?);
    let (head, tail) = out.split_at_mut(first);
    sq.buf.read(mem, offset as u64, head).ok()?;
    if !tail.is_empty() {
        sq.buf.read(mem, 0, tail).ok()?;
    }
    Some(())
}

/// Reads the first 16 bytes (the control segment) of the WQE at `index`.
pub(super) fn read_ctrl<M: DmaMemory>(
    mem: &mut M,
    sq: &Sq,
    index: u16,
) -> Option<[u8; CtrlSeg::SIZE]> {
    let mut b = [0u8; CtrlSeg::SIZE];
    ring_read(mem, sq, ring::sq_offset(index, sq.log), &mut b)?;
    Some(b)
}

/// Decodes a control segment, or describes why it cannot be.
pub(super) fn decode_ctrl(b: &[u8; CtrlSeg::SIZE]) -> Result<CtrlSeg, Malformed> {
    CtrlSeg::decode(b).map_err(|e| Malformed {
        opcode: match e {
            super::prm::error::Error::UnknownSendOpcode(raw) => raw,
            _ => 0,
        },
        bbs: 1,
    })
}

impl<'a> SendWqe<'a> {
    /// Reads the WQE that starts at the SQ's consumer counter into `buf`.
    /// `pending` is how many WQEBBs are posted from there on.
    pub(super) fn read<M: DmaMemory>(
        mem: &mut M,
        sq: &Sq,
        pending: u16,
        buf: &'a mut [u8; MAX_WQE_SIZE],
    ) -> Result<Self, Malformed> {
        let unreadable = Malformed { opcode: 0, bbs: 1 };
        let at = ring::sq_offset(sq.ci, sq.log);
        // The first WQEBB whole, in one access: it holds the control
        // segment and, for most WQEs, everything else (a WQEBB never
        // crosses a page or the end of the ring). If it cannot be read,
        // the control segment alone decides what the failure reports.
        let (first, _) = buf.split_at_mut(WQEBB_SIZE);
        let have_first = ring_read(mem, sq, at, first).is_some();
        let ctrl_bytes = match first.first_chunk::<{ CtrlSeg::SIZE }>() {
            Some(b) if have_first => *b,
            _ => read_ctrl(mem, sq, sq.ci).ok_or(unreadable)?,
        };
        let ctrl = decode_ctrl(&ctrl_bytes)?;
        let bbs = u16::from(ring::wqebb_count(ctrl.ds));
        let malformed = Malformed {
            opcode: u8::from(ctrl.opcode),
            bbs: bbs.clamp(1, pending.max(1)),
        };
        let ring_bbs = 1u32.checked_shl(sq.log).unwrap_or(0);
        if ctrl.ds == 0 || bbs > pending || u32::from(bbs) > ring_bbs {
            return Err(malformed);
        }
        let len = usize::from(ctrl.ds) * super::prm::wqe::DS_SIZE;
        let out = buf.get_mut(..len).ok_or(malformed)?;
        if !have_first {
            ring_read(mem, sq, at, out).ok_or(malformed)?;
        } else if let Some(rest) = out.get_mut(WQEBB_SIZE..) {
            let next = ring::sq_offset(sq.ci.wrapping_add(1), sq.log);
            ring_read(mem, sq, next, rest).ok_or(malformed)?;
        }
        Ok(SendWqe {
            bytes: out,
            ctrl,
            bbs,
        })
    }

    /// The WQE's bytes.
    pub(super) fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Decodes the operation and returns it with the offset of the first
    /// data segment, or `None` if the WQE is too short for its opcode or
    /// the opcode is not one the model executes on an RC QP.
    pub(super) fn op(&self) -> Option<(Op, usize)> {
        let b = self.bytes();
        let after_ctrl = CtrlSeg::SIZE;
        let after_raddr = after_ctrl + RaddrSeg::SIZE;
        let raddr = || at(b, after_ctrl).ok().map(RaddrSeg::decode);
        let imm = self.ctrl.imm;
        Some(match self.ctrl.opcode {
            SendOpcode::Nop => (Op::Nop, b.len()),
            SendOpcode::Send => (
                Op::Send {
                    imm: None,
                    inval: None,
                },
                after_ctrl,
            ),
            SendOpcode::SendImm => (
                Op::Send {
                    imm: Some(imm),
                    inval: None,
                },
                after_ctrl,
            ),
            SendOpcode::SendInval => (
                Op::Send {
                    imm: None,
                    inval: Some(imm),
                },
                after_ctrl,
            ),
            SendOpcode::RdmaWrite => (
                Op::Write {
                    raddr: raddr()?,
                    imm: None,
                },
                after_raddr,
            ),
            SendOpcode::RdmaWriteImm => (
                Op::Write {
                    raddr: raddr()?,
                    imm: Some(imm),
                },
                after_raddr,
            ),
            SendOpcode::RdmaRead => (Op::Read { raddr: raddr()? }, after_raddr),
            SendOpcode::AtomicCs | SendOpcode::AtomicFa => {
                let a = AtomicSeg::decode(at(b, after_raddr).ok()?);
                let op = if self.ctrl.opcode == SendOpcode::AtomicCs {
                    AtomicOp::CompareSwap {
                        compare: a.compare,
                        swap: a.swap_add,
                    }
                } else {
                    AtomicOp::FetchAdd { add: a.swap_add }
                };
                (
                    Op::Atomic {
                        raddr: raddr()?,
                        op,
                    },
                    after_raddr + AtomicSeg::SIZE,
                )
            }
            SendOpcode::AtomicMaskedCs | SendOpcode::AtomicMaskedFa => {
                let a = MaskedAtomicSeg::decode(at(b, after_raddr).ok()?);
                let op = if self.ctrl.opcode == SendOpcode::AtomicMaskedCs {
                    AtomicOp::MaskedCompareSwap {
                        compare: a.compare,
                        compare_mask: a.compare_mask,
                        swap: a.swap_add,
                        swap_mask: a.swap_add_mask,
                    }
                } else {
                    AtomicOp::MaskedFetchAdd {
                        add: a.swap_add,
                        boundary: a.swap_add_mask,
                    }
                };
                (
                    Op::Atomic {
                        raddr: raddr()?,
                        op,
                    },
                    after_raddr + MaskedAtomicSeg::SIZE,
                )
            }
            SendOpcode::Umr => {
                let umr = UmrCtrlSeg::decode(at(b, after_ctrl).ok()?);
                let after_umr = after_ctrl + UmrCtrlSeg::SIZE;
                let mkey = MkeySeg::decode(at(b, after_umr).ok()?);
                let after_mkey = after_umr + MkeySeg::SIZE;
                let by_pointer = umr.flags & umr_flags::INLINE == 0 && umr.xlt_octowords != 0;
                let xlt = if by_pointer {
                    Some(DataSeg::decode(at(b, after_mkey).ok()?))
                } else {
                    None
                };
                (
                    Op::Umr {
                        ctrl: umr,
                        mkey,
                        xlt,
                    },
                    b.len(),
                )
            }
            _ => return None,
        })
    }

    /// Decodes the operation of a UD or GSI QP's WQE (control segment,
    /// datagram segment, then data) and returns it with the offset of the
    /// first data segment, or `None` if the WQE is too short or its opcode
    /// is not one a datagram QP executes (SEND, SEND_IMM, NOP).
    pub(super) fn ud_op(&self) -> Option<(UdOp, usize)> {
        let b = self.bytes();
        let after_ctrl = CtrlSeg::SIZE;
        let av = || at(b, after_ctrl).ok().map(DatagramSeg::decode);
        let from = after_ctrl + DatagramSeg::SIZE;
        let imm = match self.ctrl.opcode {
            SendOpcode::Nop => return Some((UdOp::Nop, b.len())),
            SendOpcode::Send => None,
            SendOpcode::SendImm => Some(self.ctrl.imm),
            _ => return None,
        };
        Some((UdOp::Send { imm, av: av()? }, from))
    }

    /// The gather or scatter segments from byte `from` to the end.
    pub(super) fn segs(&self, from: usize) -> Segs<'a> {
        Segs {
            wqe: self.bytes(),
            pos: from,
        }
    }
}

/// One data segment of a send WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Seg {
    /// A data pointer segment.
    Ptr(DataSeg),
    /// Inline data: `len` bytes at offset `off` of the WQE.
    Inline { off: usize, len: usize },
}

/// Iterator over the data segments of a send WQE. Yields `Err(())` (and
/// then stops) at a segment that does not fit in the WQE.
pub(super) struct Segs<'a> {
    wqe: &'a [u8],
    pos: usize,
}

impl Iterator for Segs<'_> {
    type Item = Result<Seg, ()>;

    fn next(&mut self) -> Option<Result<Seg, ()>> {
        if self.pos >= self.wqe.len() {
            return None;
        }
        let pos = self.pos;
        // Stop for good after this segment unless it parses.
        self.pos = usize::MAX;
        let Ok(first_word) = at::<{ InlineHeader::SIZE }>(self.wqe, pos) else {
            return Some(Err(()));
        };
        if InlineHeader::is_inline(first_word) {
            let Ok(payload) = inline_payload(self.wqe, pos) else {
                return Some(Err(()));
            };
            let len = payload.len();
            self.pos = pos.saturating_add(inline_seg_size(len));
            Some(Ok(Seg::Inline {
                off: pos + InlineHeader::SIZE,
                len,
            }))
        } else {
            let Ok(b) = at(self.wqe, pos) else {
                return Some(Err(()));
            };
            self.pos = pos + DataSeg::SIZE;
            Some(Ok(Seg::Ptr(DataSeg::decode(b))))
        }
    }
}

/// The length a data pointer segment's `byte_count` stands for: as on
/// mlx5, a byte count of 0 means 2^31 bytes (providers leave zero-length
/// SGEs out of the WQE).
pub(super) fn seg_len(byte_count: u32) -> u64 {
    match byte_count & 0x7fff_ffff {
        0 => 1 << 31,
        n => u64::from(n),
    }
}
