// SPDX-License-Identifier: GPL-2.0

//! Posting send work requests: each WR is checked and sized first, then
//! its segments are stored straight into the SQ ring in 64-bit words
//! (wrapping at its end), laid out as the `mlx5-prm` encoders lay them out
//! (the common segments built in registers and held to the encoders by the
//! tests, atomics through the encoders); then the mlx5 doorbell sequence
//! (a BlueFlame copy of a single small WQE, read back from the SQ) and, on
//! the software HCA, one kick.

use std::sync::atomic::{fence, Ordering};

use mlx5_prm::doorbell::{counter_word, send_doorbell, QP_DBR_SEND_OFFSET};
use mlx5_prm::opcode::SendOpcode;
use mlx5_prm::ring;
use mlx5_prm::wqe::{
    inline_seg_size, AtomicSeg, CtrlSeg, DataSeg, MaskedAtomicSeg, RaddrSeg, CE_CQ_UPDATE,
    CE_ERROR_ONLY, FENCE_MODE_NONE, FENCE_MODE_SMALL_AND_FENCE, INLINE_SEG, MAX_WQE_SIZE,
    WQEBB_SIZE,
};
use rmlx5_abi::uapi;

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

/// Two big-endian 32-bit fields as one word.
fn be_pair(hi: u32, lo: u32) -> [u8; 8] {
    (u64::from(hi) << 32 | u64::from(lo)).to_be_bytes()
}

// The segments of the common WQEs as the 64-bit words the SQ receives:
// the same bytes as their `mlx5-prm` encoders write (the tests below hold
// them to it), but built in registers. An encoder is an out-of-line call
// writing a buffer in 1- to 8-byte pieces; reading that buffer back as
// whole words stalls on store forwarding, several nanoseconds a segment.

/// [`CtrlSeg::encode`] as two words.
fn ctrl_words(c: &CtrlSeg) -> [[u8; 8]; 2] {
    let opmod_idx_opcode =
        u32::from(c.opmod) << 24 | u32::from(c.wqe_index) << 8 | u32::from(u8::from(c.opcode));
    let qpn_ds = (c.qpn & 0xff_ffff) << 8 | u32::from(c.ds & 0x3f);
    let fm_ce_se = (c.fence_mode & 0x7) << 5 | (c.ce & 0x3) << 2 | u8::from(c.solicited) << 1;
    // Bytes 8 to 11: signature, two reserved bytes, fm_ce_se.
    let sig_fm_ce_se = u32::from(c.signature) << 24 | u32::from(fm_ce_se);
    [
        be_pair(opmod_idx_opcode, qpn_ds),
        be_pair(sig_fm_ce_se, c.imm),
    ]
}

/// [`RaddrSeg::encode`] as two words.
fn raddr_words(r: &RaddrSeg) -> [[u8; 8]; 2] {
    [r.raddr.to_be_bytes(), be_pair(r.rkey, 0)]
}

/// [`DataSeg::encode`] as two words (also the receive WQE's entries).
pub(super) fn data_words(d: &DataSeg) -> [[u8; 8]; 2] {
    [be_pair(d.byte_count, d.lkey), d.addr.to_be_bytes()]
}

/// The first word of an inline data segment: the header
/// ([`mlx5_prm::wqe::InlineHeader::encode`] of `len`), then the first (up
/// to) 4 bytes of the payload.
fn inline_first_word(len: u32, data: &[u8]) -> [u8; 8] {
    let header = (len & !INLINE_SEG) | INLINE_SEG;
    let head = match data.first_chunk::<4>() {
        Some(h) => u32::from_be_bytes(*h),
        // Fewer than 4 bytes: they go first, zeros after.
        None => data
            .iter()
            .enumerate()
            .fold(0, |v, (i, b)| v | u32::from(*b) << (24 - 8 * i)),
    };
    be_pair(header, head)
}

/// The last `k` (1 to 7) bytes of `data` as the start of a word, then
/// zeros.
fn tail_word(data: &[u8], k: usize) -> [u8; 8] {
    let start = data.len().saturating_sub(8);
    if let Some(last8) = data.get(start..).and_then(|s| s.first_chunk::<8>()) {
        // One (unaligned) load of the last 8 bytes, shifted down.
        let shift = 8 * 8usize.saturating_sub(k);
        return u64::from_le_bytes(*last8)
            .checked_shr(shift as u32)
            .unwrap_or(0)
            .to_le_bytes();
    }
    let mut w = [0u8; 8];
    for (d, s) in w.iter_mut().zip(&data[data.len().saturating_sub(k)..]) {
        *d = *s;
    }
    w
}

/// Stores the segments of one WQE into the SQ ring, word after word.
struct WqeWriter<'a> {
    ring: &'a WordRing,
    /// The next word (counting from the ring's start, not yet wrapped).
    word: usize,
}

impl WqeWriter<'_> {
    /// One encoded segment (a multiple of 8 bytes).
    fn put<const N: usize>(&mut self, seg: &[u8; N]) {
        let words = seg.as_chunks::<8>().0;
        self.ring.store_words(self.word, words);
        self.word += words.len();
    }

    /// A segment as words.
    fn put_words<const N: usize>(&mut self, words: [[u8; 8]; N]) {
        self.ring.store_words(self.word, &words);
        self.word += N;
    }

    /// An inline data segment (`mlx5_wqe_inl_data_seg`): the header, the
    /// payload, zeros up to the next 16-byte boundary.
    #[inline(always)]
    fn inline(&mut self, len: u32, data: &[u8]) {
        let end = self.word + inline_seg_size(data.len()) / 8;
        self.put_words([inline_first_word(len, data)]);
        let (words, tail) = data.get(4..).unwrap_or(&[]).as_chunks::<8>();
        self.ring.store_words(self.word, words);
        self.word += words.len();
        if !tail.is_empty() {
            self.put_words([tail_word(data, tail.len())]);
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
            w.put_words(raddr_words(&RaddrSeg {
                raddr: r.addr,
                rkey: r.rkey,
            }));
        }
        match wr.op {
            _ if !p.atomic => {}
            SendOp::CompSwap { compare, swap, .. } => {
                let mut seg = [0u8; AtomicSeg::SIZE];
                AtomicSeg {
                    swap_add: swap,
                    compare,
                }
                .encode(&mut seg);
                w.put(&seg);
            }
            SendOp::FetchAdd { add, .. } => {
                let mut seg = [0u8; AtomicSeg::SIZE];
                AtomicSeg {
                    swap_add: add,
                    compare: 0,
                }
                .encode(&mut seg);
                w.put(&seg);
            }
            SendOp::MaskedCompSwap {
                compare,
                compare_mask,
                swap,
                swap_mask,
                ..
            } => {
                let mut seg = [0u8; MaskedAtomicSeg::SIZE];
                MaskedAtomicSeg {
                    swap_add: swap,
                    compare,
                    swap_add_mask: swap_mask,
                    compare_mask,
                }
                .encode(&mut seg);
                w.put(&seg);
            }
            SendOp::MaskedFetchAdd { add, boundary, .. } => {
                let mut seg = [0u8; MaskedAtomicSeg::SIZE];
                MaskedAtomicSeg {
                    swap_add: add,
                    compare: 0,
                    swap_add_mask: boundary,
                    compare_mask: 0,
                }
                .encode(&mut seg);
                w.put(&seg);
            }
            _ => {}
        }
        if let Some(data) = wr.inline {
            w.inline(p.inline_len, data);
        } else {
            for s in wr.sg_list.iter().filter(|s| s.length != 0) {
                w.put_words(data_words(&DataSeg {
                    byte_count: s.length,
                    lkey: s.lkey,
                    addr: s.addr,
                }));
            }
        }
        // Whole WQEBBs go to the SQ (and to a BlueFlame copy).
        w.zero_to(base + usize::from(p.bbs) * BB_WORDS);
        let signaled = self.sq_sig_all || wr.flags.contains(SendFlags::SIGNALED);
        let ctrl = ctrl_words(&CtrlSeg {
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
        });
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
            .write(QP_DBR_SEND_OFFSET, &counter_word(cur_post))?;
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
            let mut ctrl = [0u8; CtrlSeg::SIZE];
            let (lo, hi) = ctrl.split_at_mut(8);
            lo.copy_from_slice(&self.sq.load(first));
            hi.copy_from_slice(&self.sq.load(first + 1));
            self.uar.page.store_doorbell(off, send_doorbell(&ctrl))?;
            uapi::KICK_SEND
        };
        // Then the next doorbell uses the other half.
        mmio_flush_writes();
        half.flip(self.bf_size);
        if self.needs_kick {
            let mut k = uapi::Kick {
                kind,
                handle: self.handle,
                uar_offset: u32::try_from(off).map_err(|_| Error::Invalid("uar offset"))?,
                ..Default::default()
            };
            self.pd.ctx.backend().command(Cmd::Kick(&mut k))?;
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
    use mlx5_prm::wqe::InlineHeader;

    #[test]
    fn inline_segments_match_the_prm_encoder() {
        // A 4-WQEBB ring; segments written where they wrap at its end.
        let (_p, r) = HeapPages::alloc(256).unwrap();
        let ring = WordRing::new(r.slice(0, 256).unwrap()).unwrap();
        let data: [u8; 70] = core::array::from_fn(|i| i as u8 + 1);
        for len in [0usize, 1, 3, 4, 5, 8, 11, 12, 13, 20, 64, 70] {
            for start in [0usize, 16, 224, 240] {
                for b in 0..256 {
                    r.write(b, &[0xee]).unwrap();
                }
                let mut w = WqeWriter {
                    ring: &ring,
                    word: start / 8,
                };
                w.inline(len as u32, &data[..len]);
                let mut got = [0u8; 256];
                r.read(0, &mut got).unwrap();
                let mut want = [0xeeu8; 256];
                let n = mlx5_prm::sq::write_inline(&mut want, start, &data[..len]).unwrap();
                assert_eq!(w.word, start / 8 + n / 8, "len {} at {}", len, start);
                assert_eq!(got, want, "len {} at {}", len, start);
            }
        }
    }

    #[test]
    fn segment_words_match_the_prm_encoders() {
        let flat = |w: [[u8; 8]; 2]| {
            let mut b = [0u8; 16];
            b[..8].copy_from_slice(&w[0]);
            b[8..].copy_from_slice(&w[1]);
            b
        };
        let opcodes = [
            SendOpcode::Send,
            SendOpcode::SendImm,
            SendOpcode::RdmaWrite,
            SendOpcode::RdmaWriteImm,
            SendOpcode::RdmaRead,
            SendOpcode::AtomicCs,
            SendOpcode::AtomicFa,
            SendOpcode::AtomicMaskedCs,
            SendOpcode::AtomicMaskedFa,
        ];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..2000 {
            let r = next();
            let c = CtrlSeg {
                opmod: r as u8,
                wqe_index: (r >> 8) as u16,
                opcode: opcodes[i % opcodes.len()],
                qpn: (r >> 24) as u32,
                ds: (r >> 56) as u8,
                signature: (r >> 40) as u8,
                fence_mode: (r >> 48) as u8,
                ce: (r >> 52) as u8,
                solicited: r & 1 != 0,
                imm: next() as u32,
            };
            let mut want = [0u8; 16];
            c.encode(&mut want);
            assert_eq!(flat(ctrl_words(&c)), want, "{:?}", c);
            let ra = RaddrSeg {
                raddr: next(),
                rkey: next() as u32,
            };
            ra.encode(&mut want);
            assert_eq!(flat(raddr_words(&ra)), want);
            let d = DataSeg {
                byte_count: next() as u32,
                lkey: next() as u32,
                addr: next(),
            };
            d.encode(&mut want);
            assert_eq!(flat(data_words(&d)), want);
            let len = next() as u32;
            let data = next().to_ne_bytes();
            let mut h = [0u8; 4];
            InlineHeader { byte_count: len }.encode(&mut h);
            for n in 0..=8 {
                let mut first = [0u8; 8];
                first[..4].copy_from_slice(&h);
                let m = n.min(4);
                first[4..4 + m].copy_from_slice(&data[..m]);
                assert_eq!(inline_first_word(len, &data[..n]), first);
            }
        }
    }

    #[test]
    fn tail_words() {
        let data: [u8; 10] = core::array::from_fn(|i| i as u8 + 1);
        assert_eq!(tail_word(&data, 3), [8, 9, 10, 0, 0, 0, 0, 0]);
        assert_eq!(tail_word(&data, 7), [4, 5, 6, 7, 8, 9, 10, 0]);
        assert_eq!(tail_word(&data[..5], 1), [5, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(tail_word(&data[..5], 5), [1, 2, 3, 4, 5, 0, 0, 0]);
    }
}
