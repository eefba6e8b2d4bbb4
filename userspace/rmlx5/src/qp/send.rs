// SPDX-License-Identifier: GPL-2.0

//! Posting send work requests: WQEs built with the `mlx5-prm` encoders,
//! copied into the SQ ring (wrapping at its end), then the mlx5 doorbell
//! sequence and, on the software HCA, one kick.

use std::sync::atomic::{fence, Ordering};

use mlx5_prm::doorbell::{counter_word, send_doorbell, QP_DBR_SEND_OFFSET};
use mlx5_prm::opcode::SendOpcode;
use mlx5_prm::ring;
use mlx5_prm::sq::write_inline;
use mlx5_prm::wqe::{
    inline_seg_size, AtomicSeg, CtrlSeg, DataSeg, MaskedAtomicSeg, RaddrSeg, CE_CQ_UPDATE,
    CE_ERROR_ONLY, FENCE_MODE_NONE, FENCE_MODE_SMALL_AND_FENCE, MAX_WQE_SIZE, WQEBB_SIZE,
};
use rmlx5_abi::uapi;

use super::{Qp, QpInner, SqState};
use crate::backend::Cmd;
use crate::context::lock;
use crate::error::{Error, PostError, Result};
use crate::wr::{RemoteAddr, SendFlags, SendOp, SendWr};

/// Largest message (and SGE) length.
const MAX_MSG: u64 = 1 << 31;

/// A WQE assembled outside the SQ: the segments in order, then copied
/// whole (in WQEBBs) into the ring.
struct WqeBuf {
    bytes: [u8; MAX_WQE_SIZE],
    /// Bytes of segments written so far (after the control segment).
    len: usize,
}

impl WqeBuf {
    fn new() -> Self {
        WqeBuf {
            bytes: [0; MAX_WQE_SIZE],
            len: CtrlSeg::SIZE,
        }
    }

    /// Room for a `size`-byte segment, or `Invalid`.
    fn next<const N: usize>(&mut self) -> Result<&mut [u8; N]> {
        let start = self.len;
        self.len += N;
        self.bytes
            .get_mut(start..start + N)
            .and_then(|s| s.try_into().ok())
            .ok_or(Error::Invalid("WQE larger than 16 WQEBBs"))
    }
}

fn remote_of(op: &SendOp) -> Option<RemoteAddr> {
    match *op {
        SendOp::Send | SendOp::SendImm(_) => None,
        SendOp::Write(r) | SendOp::WriteImm(r, _) | SendOp::Read(r) => Some(r),
        SendOp::CompSwap { remote, .. }
        | SendOp::FetchAdd { remote, .. }
        | SendOp::MaskedCompSwap { remote, .. }
        | SendOp::MaskedFetchAdd { remote, .. } => Some(remote),
    }
}

impl QpInner {
    /// Builds `wr` into `w` as the WQE at `cur_post`. Returns its size in
    /// WQEBBs.
    fn build(&self, cur_post: u16, wr: &SendWr<'_>, w: &mut WqeBuf) -> Result<u16> {
        let (opcode, imm) = match wr.op {
            SendOp::Send => (SendOpcode::Send, 0),
            SendOp::SendImm(i) => (SendOpcode::SendImm, i),
            SendOp::Write(_) => (SendOpcode::RdmaWrite, 0),
            SendOp::WriteImm(_, i) => (SendOpcode::RdmaWriteImm, i),
            SendOp::Read(_) => (SendOpcode::RdmaRead, 0),
            SendOp::CompSwap { .. } => (SendOpcode::AtomicCs, 0),
            SendOp::FetchAdd { .. } => (SendOpcode::AtomicFa, 0),
            SendOp::MaskedCompSwap { .. } => (SendOpcode::AtomicMaskedCs, 0),
            SendOp::MaskedFetchAdd { .. } => (SendOpcode::AtomicMaskedFa, 0),
        };
        let atomic = matches!(
            opcode,
            SendOpcode::AtomicCs
                | SendOpcode::AtomicFa
                | SendOpcode::AtomicMaskedCs
                | SendOpcode::AtomicMaskedFa
        );
        if wr.sg_list.len() > self.max_send_sge as usize {
            return Err(Error::Invalid("more SGEs than max_send_sge"));
        }
        if let Some(data) = wr.inline {
            if !wr.sg_list.is_empty() {
                return Err(Error::Invalid("inline and a gather list together"));
            }
            if data.len() > self.max_inline as usize {
                return Err(Error::Invalid("inline data above max_inline_data"));
            }
            if opcode == SendOpcode::RdmaRead || atomic {
                return Err(Error::Invalid("inline READ or atomic"));
            }
        }
        let total: u64 = wr.sg_list.iter().map(|s| u64::from(s.length)).sum();
        if total > MAX_MSG || wr.sg_list.iter().any(|s| u64::from(s.length) > MAX_MSG) {
            return Err(Error::Invalid("message longer than 2 GiB"));
        }
        if atomic && (wr.sg_list.len() != 1 || total != 8) {
            return Err(Error::Invalid("an atomic needs one 8-byte SGE"));
        }
        if let Some(r) = remote_of(&wr.op) {
            if atomic && r.addr % 8 != 0 {
                return Err(Error::Invalid("atomic target not 8-byte aligned"));
            }
            RaddrSeg {
                raddr: r.addr,
                rkey: r.rkey,
            }
            .encode(w.next()?);
        }
        match wr.op {
            SendOp::CompSwap { compare, swap, .. } => AtomicSeg {
                swap_add: swap,
                compare,
            }
            .encode(w.next()?),
            SendOp::FetchAdd { add, .. } => AtomicSeg {
                swap_add: add,
                compare: 0,
            }
            .encode(w.next()?),
            SendOp::MaskedCompSwap {
                compare,
                compare_mask,
                swap,
                swap_mask,
                ..
            } => MaskedAtomicSeg {
                swap_add: swap,
                compare,
                swap_add_mask: swap_mask,
                compare_mask,
            }
            .encode(w.next()?),
            SendOp::MaskedFetchAdd { add, boundary, .. } => MaskedAtomicSeg {
                swap_add: add,
                compare: 0,
                swap_add_mask: boundary,
                compare_mask: 0,
            }
            .encode(w.next()?),
            _ => {}
        }
        if let Some(data) = wr.inline {
            // The local buffer is itself a 16-WQEBB ring, so the segment
            // must end inside it; the copy into the SQ does the wrapping.
            if w.len + inline_seg_size(data.len()) > MAX_WQE_SIZE {
                return Err(Error::Invalid("inline data does not fit in a WQE"));
            }
            let n = write_inline(&mut w.bytes, w.len, data)
                .map_err(|_| Error::Invalid("inline segment"))?;
            w.len += n;
        } else {
            // A zero-length SGE would mean 2 GiB to the HCA: leave it out.
            for s in wr.sg_list.iter().filter(|s| s.length != 0) {
                DataSeg {
                    byte_count: s.length,
                    lkey: s.lkey,
                    addr: s.addr,
                }
                .encode(w.next()?);
            }
        }
        let ds = ring::ds_count(w.len).map_err(|_| Error::Invalid("WQE too large"))?;
        let bbs = u16::from(ring::wqebb_count(ds));
        let signaled = self.sq_sig_all || wr.flags.contains(SendFlags::SIGNALED);
        let ctrl = CtrlSeg {
            opmod: 0,
            wqe_index: cur_post,
            opcode,
            qpn: self.qpn,
            ds,
            signature: 0,
            fence_mode: if wr.flags.contains(SendFlags::FENCE) {
                FENCE_MODE_SMALL_AND_FENCE
            } else {
                FENCE_MODE_NONE
            },
            ce: if signaled {
                CE_CQ_UPDATE
            } else {
                CE_ERROR_ONLY
            },
            solicited: wr.flags.contains(SendFlags::SOLICITED),
            imm,
        };
        let mut c = [0u8; CtrlSeg::SIZE];
        ctrl.encode(&mut c);
        w.bytes[..CtrlSeg::SIZE].copy_from_slice(&c);
        // Whole WQEBBs go to the SQ (and to a BlueFlame copy): zero the
        // tail of the last one.
        let end = usize::from(bbs) * WQEBB_SIZE;
        w.bytes[w.len..end].fill(0);
        Ok(bbs)
    }

    /// Posts one WR at the producer counter; the doorbell comes later.
    fn post_one(&self, sq: &mut SqState, wr: &SendWr<'_>, w: &mut WqeBuf) -> Result<u16> {
        let tail = self.shared.sq_tail.load(Ordering::Acquire);
        let used = sq.cur_post.wrapping_sub(tail);
        let size = 1u32 << self.sq_log;
        let wr_tail = self.shared.sq_wr_tail.load(Ordering::Acquire);
        // Cheap pre-check so a full queue costs no WQE build.
        if u32::from(used) + 1 > size || sq.head_wr.wrapping_sub(wr_tail) >= self.max_send_wr {
            return Err(Error::QueueFull);
        }
        *w = WqeBuf::new();
        let bbs = self.build(sq.cur_post, wr, w)?;
        if u32::from(used) + u32::from(bbs) > size {
            return Err(Error::QueueFull);
        }
        let off = ring::sq_offset(sq.cur_post, self.sq_log);
        self.sq
            .ring_write(off, &w.bytes[..usize::from(bbs) * WQEBB_SIZE])?;
        let slot = usize::from(sq.cur_post) & (self.shared.sq_wrid.len() - 1);
        let next = sq.cur_post.wrapping_add(bbs);
        self.shared.sq_wrid[slot].store(wr.wr_id, Ordering::Relaxed);
        self.shared.sq_next[slot].store(next, Ordering::Relaxed);
        sq.head_wr = sq.head_wr.wrapping_add(1);
        self.shared.sq_wr_next[slot].store(sq.head_wr, Ordering::Relaxed);
        sq.cur_post = next;
        Ok(bbs)
    }

    /// The doorbell for everything posted up to `sq.cur_post`; `last` is
    /// the last WQE, `single` whether it is the only one of this post.
    fn ring(&self, sq: &SqState, last: &WqeBuf, bbs: u16, single: bool) -> Result<()> {
        // udma_to_device_barrier: WQEs (and wr_id slots) before the record.
        fence(Ordering::Release);
        self.dbr
            .write(QP_DBR_SEND_OFFSET, &counter_word(sq.cur_post))?;
        let wqe_len = usize::from(bbs) * WQEBB_SIZE;
        let reg = self
            .uar
            .regs
            .get(self.bfreg)
            .ok_or(Error::Invalid("bfreg"))?;
        let mut half = lock(reg);
        let off = self.bf_offset + *half;
        // mmio_wc_start: the record before the UAR store.
        fence(Ordering::SeqCst);
        let kind = if self.blueflame && single && wqe_len <= self.bf_size {
            for (i, chunk) in last.bytes[..wqe_len].chunks_exact(8).enumerate() {
                let mut word = [0u8; 8];
                word.copy_from_slice(chunk);
                self.uar.page.store_doorbell(off + i * 8, word)?;
            }
            uapi::KICK_SEND_BLUEFLAME
        } else {
            let mut ctrl = [0u8; CtrlSeg::SIZE];
            ctrl.copy_from_slice(&last.bytes[..CtrlSeg::SIZE]);
            self.uar.page.store_doorbell(off, send_doorbell(&ctrl))?;
            uapi::KICK_SEND
        };
        // mmio_flush_writes, then the next doorbell uses the other half.
        fence(Ordering::SeqCst);
        *half ^= self.bf_size;
        let backend = self.pd.ctx.backend();
        if backend.needs_kick() {
            let mut k = uapi::Kick {
                kind,
                handle: self.handle,
                uar_offset: u32::try_from(off).map_err(|_| Error::Invalid("uar offset"))?,
                ..Default::default()
            };
            backend.command(Cmd::Kick(&mut k))?;
        }
        Ok(())
    }
}

impl Qp {
    /// Posts a list of send work requests (`ibv_post_send`) with one
    /// doorbell. No system call but the software HCA's kick.
    ///
    /// # Errors
    ///
    /// A [`PostError`] naming the first WR not posted and why (like
    /// `bad_wr`); the WRs before it were posted and rung.
    pub fn post_send(&self, wrs: &[SendWr<'_>]) -> core::result::Result<(), PostError> {
        let q = &self.inner;
        let mut sq = lock(&q.sq_state);
        // The WQE being built, and the last one posted (for the doorbell).
        let mut w = WqeBuf::new();
        let mut last = WqeBuf::new();
        let mut posted = 0usize;
        let mut last_bbs = 0u16;
        let mut failure = None;
        for (i, wr) in wrs.iter().enumerate() {
            match q.post_one(&mut sq, wr, &mut w) {
                Ok(bbs) => {
                    posted += 1;
                    last_bbs = bbs;
                    std::mem::swap(&mut w, &mut last);
                }
                Err(error) => {
                    failure = Some(PostError {
                        index: i,
                        wr_id: wr.wr_id,
                        error,
                    });
                    break;
                }
            }
        }
        if posted > 0 {
            if let Err(error) = q.ring(&sq, &last, last_bbs, posted == 1) {
                return Err(PostError {
                    index: 0,
                    wr_id: wrs.first().map_or(0, |w| w.wr_id),
                    error,
                });
            }
        }
        failure.map_or(Ok(()), Err)
    }
}
