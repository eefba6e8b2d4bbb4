// SPDX-License-Identifier: GPL-2.0

//! Posting receive work requests: receive WQEs in the RQ, then the
//! receive counter of the doorbell record (mlx5 has no receive doorbell
//! register; a QP in ERR needs the software HCA's receive kick).

use std::sync::atomic::{fence, Ordering};

use mlx5_prm::doorbell::{counter_word, QP_DBR_RECV_OFFSET};
use mlx5_prm::recv::recv_wqe_words;
use mlx5_prm::wqe::DataSeg;
use rmlx5_abi::uapi;

use super::Qp;
use crate::backend::Cmd;
use crate::context::lock;
use crate::dma::DmaRegion;
use crate::error::{Error, PostError, Result};
use crate::wr::RecvWr;

/// Largest RQ stride the provider handles (64 scatter entries).
const MAX_STRIDE: usize = 1024;

/// Writes the receive WQE of `wr` into the `stride` bytes at `offset` of
/// the RQ, entry by entry in 64-bit words as `mlx5_prm::recv` lays it out
/// (without assembling it in a buffer first): the scatter entries with
/// zero-length ones left out, then the terminator if the stride has room
/// for it. The bytes after the terminator are left as they were (the
/// device stops there).
fn write_wqe(rq: &DmaRegion, offset: usize, stride: usize, wr: &RecvWr<'_>) -> Result<()> {
    let segs = wr
        .sg_list
        .iter()
        .filter(|s| s.length != 0)
        .map(|s| DataSeg {
            byte_count: s.length,
            lkey: s.lkey,
            addr: s.addr,
        });
    let entries = recv_wqe_words(segs, stride).map_err(|_| Error::Invalid("receive WQE"))?;
    for (at, words) in entries {
        rq.write_words(offset + at, words.as_flattened())?;
    }
    Ok(())
}

impl Qp {
    /// Posts a list of receive work requests (`ibv_post_recv`). No system
    /// call, except a kick when the QP is in error (so that the receives
    /// are flushed).
    ///
    /// # Errors
    ///
    /// A [`PostError`] naming the first WR not posted and why; the WRs
    /// before it were posted.
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> core::result::Result<(), PostError> {
        let q = &self.inner;
        let mut rq = lock(&q.rq_state);
        let n_slots = q.shared.rq_wrid.len();
        let stride = q.rq_stride;
        let mut posted = 0usize;
        let mut failure = None;
        for (i, wr) in wrs.iter().enumerate() {
            let fail = |error| PostError {
                index: i,
                wr_id: wr.wr_id,
                error,
            };
            let tail = q.shared.rq_tail.load(Ordering::Acquire);
            if usize::from(rq.head.wrapping_sub(tail)) >= n_slots {
                failure = Some(fail(Error::QueueFull));
                break;
            }
            if wr.sg_list.len() > q.max_recv_sge as usize || stride > MAX_STRIDE {
                failure = Some(fail(Error::Invalid("more SGEs than max_recv_sge")));
                break;
            }
            if wr.sg_list.iter().any(|s| s.length > 1 << 31) {
                failure = Some(fail(Error::Invalid("SGE longer than 2 GiB")));
                break;
            }
            let slot = usize::from(rq.head) & (n_slots - 1);
            if let Err(error) = write_wqe(&q.rq, slot * stride, stride, wr) {
                failure = Some(fail(error));
                break;
            }
            q.shared.rq_wrid[slot].store(wr.wr_id, Ordering::Relaxed);
            rq.head = rq.head.wrapping_add(1);
            posted += 1;
        }
        if posted > 0 {
            fence(Ordering::Release);
            let r = q
                .dbr
                .store_u32(QP_DBR_RECV_OFFSET, counter_word(rq.head))
                .and_then(|()| {
                    if q.needs_kick && q.shared.in_error.load(Ordering::Relaxed) {
                        let backend = q.pd.ctx.backend();
                        let mut k = uapi::Kick {
                            kind: uapi::KICK_RECV,
                            handle: q.handle,
                            ..Default::default()
                        };
                        backend.command(Cmd::Kick(&mut k))?;
                    }
                    Ok(())
                });
            if let Err(error) = r {
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
    use crate::wr::Sge;

    #[test]
    fn receive_wqes_match_the_prm_writer() {
        let (_p, r) = HeapPages::alloc(256).unwrap();
        let sge = |i: u32, length| Sge {
            addr: 0x1000 * u64::from(i) + 7,
            length,
            lkey: 0x100 + i,
        };
        let lists: [&[Sge]; 5] = [
            &[],
            &[sge(1, 64)],
            &[sge(1, 64), sge(2, 0), sge(3, 1 << 31)],
            &[sge(1, 1), sge(2, 2), sge(3, 3), sge(4, 4)],
            &[sge(1, 0), sge(2, 0)],
        ];
        for stride in [16usize, 32, 64] {
            for list in lists {
                r.write(0, &[0xee; 256]).unwrap();
                let wr = RecvWr::new(1, list);
                let segs: Vec<DataSeg> = list
                    .iter()
                    .filter(|s| s.length != 0)
                    .map(|s| DataSeg {
                        byte_count: s.length,
                        lkey: s.lkey,
                        addr: s.addr,
                    })
                    .collect();
                let mut want = [0xeeu8; 64];
                let expect = mlx5_prm::recv::write_recv_wqe(&mut want[..stride], &segs);
                let got = write_wqe(&r, 64, stride, &wr);
                assert_eq!(got.is_ok(), expect.is_ok(), "{:?} in {}", list, stride);
                if got.is_ok() {
                    let mut b = [0u8; 64];
                    r.read(64, &mut b).unwrap();
                    assert_eq!(b, want, "{:?} in {}", list, stride);
                }
            }
        }
    }
}
