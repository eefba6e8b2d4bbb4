// SPDX-License-Identifier: GPL-2.0

//! Posting send work requests: each WR is checked and sized first, then
//! its segments are stored straight into the SQ ring in 64-bit words
//! (wrapping at its end), as the `mlx5-prm` word forms build them
//! (`to_words`, `InlineHeader::words`, in registers); then the mlx5
//! doorbell sequence (a BlueFlame copy of a single small WQE, read back
//! from the SQ) and, on the software HCA, one kick.

use std::sync::atomic::{fence, Ordering};

use mlx5_prm::doorbell::{counter_word, send_doorbell_words, QP_DBR_SEND_OFFSET};
use mlx5_prm::opcode::SendOpcode;
use mlx5_prm::ring;
use mlx5_prm::wqe::{
    inline_seg_size, AtomicSeg, CtrlSeg, DataSeg, InlineHeader, MaskedAtomicSeg, RaddrSeg,
    CE_CQ_UPDATE, CE_ERROR_ONLY, FENCE_MODE_NONE, FENCE_MODE_SMALL_AND_FENCE, MAX_WQE_SIZE,
    WQEBB_SIZE,
};
use rmlx5_abi::uapi::{self, UAR_DOORBELL_BITS_OFFSET, UAR_WATCH_OFFSET};

use super::{Qp, QpInner, SqState};
use crate::backend::Cmd;
use crate::dma::{mmio_flush_writes, mmio_wc_start, WordRing};
use crate::error::{Error, PostError, Result};
use crate::wr::{RemoteAddr, SendFlags, SendOp, SendWr};

/// Largest message (and SGE) length.
const MAX_MSG: u64 = 1 << 31;

/// 64-bit words per WQEBB.
const BB_WORDS: usize = WQEBB_SIZE / 8;

/// What a WR turns into, decided (and checked) before any byte of it is
/// written to the SQ.
struct Plan {
    opcode: SendOpcode,
    imm: u32,
    remote: Option<RemoteAddr>,
    /// An atomic (its segment follows the remote address).
    atomic: bool,
    /// The inline payload's length, for its segment header.
    inline_len: u32,
    /// DS units and WQEBBs of the whole WQE.
    ds: u8,
    bbs: u16,
}

/// Stores the segments of one WQE into the SQ ring, word after word.
struct WqeWriter<'a> {
    ring: &'a WordRing,
    /// The next word (counting from the ring's start, not yet wrapped).
    word: usize,
}

impl WqeWriter<'_> {
    /// A segment as words.
    fn put_words<const N: usize>(&mut self, words: [[u8; 8]; N]) {
        self.ring.store_words(self.word, &words);
        self.word += N;
    }

    /// An inline data segment (`mlx5_wqe_inl_data_seg`) with `header` and
    /// the payload `data`, as [`InlineHeader::words`] lays it out: its
    /// words, then zero words to its end.
    #[inline(always)]
    fn inline(&mut self, header: InlineHeader, data: &[u8]) {
        let seg = header.words(data);
        let end = self.word + seg.words;
        self.put_words([seg.first]);
        self.ring.store_words(self.word, seg.middle);
        self.word += seg.middle.len();
        if let Some(last) = seg.last {
            self.put_words([last]);
        }
        self.zero_to(end);
    }

    /// Zeros up to word `end`.
    fn zero_to(&mut self, end: usize) {
        if end > self.word {
            self.ring.zero_words(self.word, end - self.word);
            self.word = end;
        }
    }
}

impl QpInner {
    /// Checks `wr` and sizes its WQE, writing nothing.
    fn plan(&self, wr: &SendWr<'_>) -> Result<Plan> {
        // One match for everything the operation decides: opcode,
        // immediate, remote address, bytes of atomic segment.
        let (opcode, imm, remote, atomic_bytes) = match wr.op {
            SendOp::Send => (SendOpcode::Send, 0, None, 0),
            SendOp::SendImm(i) => (SendOpcode::SendImm, i, None, 0),
            SendOp::Write(r) => (SendOpcode::RdmaWrite, 0, Some(r), 0),
            SendOp::WriteImm(r, i) => (SendOpcode::RdmaWriteImm, i, Some(r), 0),
            SendOp::Read(r) => (SendOpcode::RdmaRead, 0, Some(r), 0),
            SendOp::CompSwap { remote, .. } => {
                (SendOpcode::AtomicCs, 0, Some(remote), AtomicSeg::SIZE)
            }
            SendOp::FetchAdd { remote, .. } => {
                (SendOpcode::AtomicFa, 0, Some(remote), AtomicSeg::SIZE)
            }
            SendOp::MaskedCompSwap { remote, .. } => (
                SendOpcode::AtomicMaskedCs,
                0,
                Some(remote),
                MaskedAtomicSeg::SIZE,
            ),
            SendOp::MaskedFetchAdd { remote, .. } => (
                SendOpcode::AtomicMaskedFa,
                0,
                Some(remote),
                MaskedAtomicSeg::SIZE,
            ),
        };
        let atomic = atomic_bytes != 0;
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
        let mut bytes = CtrlSeg::SIZE + atomic_bytes;
        if let Some(r) = remote {
            if atomic && r.addr % 8 != 0 {
                return Err(Error::Invalid("atomic target not 8-byte aligned"));
            }
            bytes += RaddrSeg::SIZE;
        }
        let mut inline_len = 0;
        if let Some(data) = wr.inline {
            // The segment must end inside one whole WQE; the ring does the
            // wrapping.
            bytes += inline_seg_size(data.len());
            if bytes > MAX_WQE_SIZE {
                return Err(Error::Invalid("inline data does not fit in a WQE"));
            }
            inline_len = u32::try_from(data.len()).map_err(|_| Error::Invalid("inline segment"))?;
        } else {
            // A zero-length SGE would mean 2 GiB to the HCA: it is left out.
            bytes += DataSeg::SIZE * wr.sg_list.iter().filter(|s| s.length != 0).count();
            if bytes > MAX_WQE_SIZE {
                return Err(Error::Invalid("WQE larger than 16 WQEBBs"));
            }
        }
        let ds = ring::ds_count(bytes).map_err(|_| Error::Invalid("WQE too large"))?;
        Ok(Plan {
            opcode,
            imm,
            remote,
            atomic,
            inline_len,
            ds,
            bbs: u16::from(ring::wqebb_count(ds)),
        })
    }

    /// Writes the WQE of `wr` as planned into the SQ at `cur_post`, in
    /// whole WQEBBs (the tail of the last one zeroed).
    fn write(&self, cur_post: u16, wr: &SendWr<'_>, p: &Plan) {
        let base = usize::from(cur_post) * BB_WORDS;
        let mut w = WqeWriter {
            ring: &self.sq,
            word: base + CtrlSeg::SIZE / 8,
        };
        if let Some(r) = p.remote {
            w.put_words(
                RaddrSeg {
                    raddr: r.addr,
                    rkey: r.rkey,
                }
                .to_words(),
            );
        }
        match wr.op {
            _ if !p.atomic => {}
            SendOp::CompSwap { compare, swap, .. } => w.put_words(
                AtomicSeg {
                    swap_add: swap,
                    compare,
                }
                .to_words(),
            ),
            SendOp::FetchAdd { add, .. } => w.put_words(
                AtomicSeg {
                    swap_add: add,
                    compare: 0,
                }
                .to_words(),
            ),
            SendOp::MaskedCompSwap {
                compare,
                compare_mask,
                swap,
                swap_mask,
                ..
            } => w.put_words(
                MaskedAtomicSeg {
                    swap_add: swap,
                    compare,
                    swap_add_mask: swap_mask,
                    compare_mask,
                }
                .to_words(),
            ),
            SendOp::MaskedFetchAdd { add, boundary, .. } => w.put_words(
                MaskedAtomicSeg {
                    swap_add: add,
                    compare: 0,
                    swap_add_mask: boundary,
                    compare_mask: 0,
                }
                .to_words(),
            ),
            _ => {}
        }
        if let Some(data) = wr.inline {
            w.inline(
                InlineHeader {
                    byte_count: p.inline_len,
                },
                data,
            );
        } else {
            for s in wr.sg_list.iter().filter(|s| s.length != 0) {
                w.put_words(
                    DataSeg {
                        byte_count: s.length,
                        lkey: s.lkey,
                        addr: s.addr,
                    }
                    .to_words(),
                );
            }
        }
        // Whole WQEBBs go to the SQ (and to a BlueFlame copy).
        w.zero_to(base + usize::from(p.bbs) * BB_WORDS);
        let signaled = self.sq_sig_all || wr.flags.contains(SendFlags::SIGNALED);
        let ctrl = CtrlSeg {
            opmod: 0,
            wqe_index: cur_post,
            opcode: p.opcode,
            qpn: self.qpn,
            ds: p.ds,
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
            imm: p.imm,
        }
        .to_words();
        w.word = base;
        w.put_words(ctrl);
    }

    /// Posts one WR at the producer counter; the doorbell comes later.
    fn post_one(&self, sq: &mut SqState, wr: &SendWr<'_>) -> Result<u16> {
        let tail = self.shared.sq_tail.load(Ordering::Acquire);
        let used = sq.cur_post.wrapping_sub(tail);
        let size = 1u32 << self.sq_log;
        let wr_tail = self.shared.sq_wr_tail.load(Ordering::Acquire);
        // Cheap pre-check so a full queue costs no checking of the WR.
        if u32::from(used) + 1 > size || sq.head_wr.wrapping_sub(wr_tail) >= self.max_send_wr {
            return Err(Error::QueueFull);
        }
        let p = self.plan(wr)?;
        if u32::from(used) + u32::from(p.bbs) > size {
            return Err(Error::QueueFull);
        }
        self.write(sq.cur_post, wr, &p);
        let next = sq.cur_post.wrapping_add(p.bbs);
        sq.head_wr = sq.head_wr.wrapping_add(1);
        self.shared
            .sq_slot(sq.cur_post)
            .set(wr.wr_id, next, sq.head_wr);
        sq.cur_post = next;
        Ok(p.bbs)
    }

    /// The doorbell for everything posted up to `cur_post`; the last WQE
    /// starts at WQEBB `last` and spans `bbs`; `single` says whether it is
    /// the only one of this post (then it may be copied to BlueFlame).
    #[inline(always)]
    fn ring(&self, cur_post: u16, last: u16, bbs: u16, single: bool) -> Result<()> {
        // udma_to_device_barrier: WQEs (and wr_id slots) before the record.
        fence(Ordering::Release);
        self.dbr
            .store_u32(QP_DBR_SEND_OFFSET, counter_word(cur_post))?;
        let wqe_words = usize::from(bbs) * BB_WORDS;
        let first = usize::from(last) * BB_WORDS;
        let reg = self
            .uar
            .regs
            .get(self.bfreg)
            .ok_or(Error::Invalid("bfreg"))?;
        let half = reg.lock();
        let off = self.bf_offset + half.half();
        // The record before the UAR stores.
        mmio_wc_start();
        let kind = if self.blueflame && single && wqe_words * 8 <= self.bf_size {
            // The BlueFlame copy, read back from the SQ.
            self.uar
                .page
                .blueflame_copy(off, &self.sq, first, wqe_words)?;
            uapi::KICK_SEND_BLUEFLAME
        } else {
            let ctrl = [self.sq.load(first), self.sq.load(first + 1)];
            self.uar
                .page
                .store_doorbell(off, send_doorbell_words(&ctrl))?;
            uapi::KICK_SEND
        };
        // Then the next doorbell uses the other half.
        mmio_flush_writes();
        half.flip(self.bf_size);
        // Kick elision (software HCA): once this QP has kicked, and while
        // the module's doorbell watcher runs (its word in the UAR page is
        // set), the watcher reads our doorbell record itself when our bit
        // in the page's doorbell bits says we rang. The record store, the
        // full fence of `mmio_flush_writes`, the load of the word; then
        // the bit (an atomic OR, a full barrier) and the word again: the
        // watcher clears the word, fences and takes the bits once more, so
        // either it sees our bit or we see the cleared word and kick
        // (rmlx5-abi `UAR_WATCH_OFFSET`).
        if self.needs_kick
            && self.kicked.load(Ordering::Relaxed)
            && self.uar.page.load_u32(UAR_WATCH_OFFSET as usize)? != 0
        {
            let bit = (self.qpn % 4096) as usize;
            self.uar.page.fetch_or_u64(
                UAR_DOORBELL_BITS_OFFSET as usize + bit / 64 * 8,
                1 << (bit % 64),
            )?;
            fence(Ordering::SeqCst);
            if self.uar.page.load_u32(UAR_WATCH_OFFSET as usize)? != 0 {
                return Ok(());
            }
        }
        if self.needs_kick {
            let mut k = uapi::Kick {
                kind,
                handle: self.handle,
                uar_offset: u32::try_from(off).map_err(|_| Error::Invalid("uar offset"))?,
                ..Default::default()
            };
            self.pd.ctx.backend().command(Cmd::Kick(&mut k))?;
            self.kicked.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Rings the send doorbell again for the WQE of `bbs` WQEBBs at WQEBB
    /// `last`, the last one posted, as a single WQE if `blueflame` (see
    /// `crate::bench::ring_send_doorbell`).
    #[cfg(feature = "bench-backend")]
    pub(crate) fn ring_again(&self, last: u16, bbs: u16, blueflame: bool) -> Result<()> {
        let sq = self.sq_lock.lock();
        self.ring(sq.state.cur_post, last, bbs, blueflame)
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
        let mut guard = q.sq_lock.lock();
        let sq = &mut guard.state;
        let mut posted = 0usize;
        // The last WQE posted: its first WQEBB and its size.
        let mut last = (0u16, 0u16);
        let mut failure = None;
        for (i, wr) in wrs.iter().enumerate() {
            let at = sq.cur_post;
            match q.post_one(sq, wr) {
                Ok(bbs) => {
                    posted += 1;
                    last = (at, bbs);
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
            guard.store();
            if let Err(error) = q.ring(guard.state.cur_post, last.0, last.1, posted == 1) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dma::HeapPages;

    #[test]
    fn inline_segments_match_the_prm_writer() {
        // A 4-WQEBB ring; segments written where they wrap at its end.
        let (_p, r) = HeapPages::alloc(256).unwrap();
        let ring = WordRing::new(r.slice(0, 256).unwrap()).unwrap();
        let data: [u8; 70] = core::array::from_fn(|i| i as u8 + 1);
        for len in [0usize, 1, 3, 4, 5, 8, 11, 12, 13, 20, 64, 70] {
            for start in [0usize, 16, 224, 240] {
                r.write(0, &[0xee; 256]).unwrap();
                let mut w = WqeWriter {
                    ring: &ring,
                    word: start / 8,
                };
                let header = InlineHeader {
                    byte_count: len as u32,
                };
                w.inline(header, &data[..len]);
                let mut got = [0u8; 256];
                r.read(0, &mut got).unwrap();
                let mut want = [0xeeu8; 256];
                let n = mlx5_prm::sq::write_inline(&mut want, start, &data[..len]).unwrap();
                assert_eq!(w.word, start / 8 + n / 8, "len {} at {}", len, start);
                assert_eq!(got, want, "len {} at {}", len, start);
            }
        }
    }
}
