// SPDX-License-Identifier: GPL-2.0

//! Posting receive work requests: receive WQEs in the RQ, then the
//! receive counter of the doorbell record (mlx5 has no receive doorbell
//! register; a QP in ERR needs the software HCA's receive kick).

use std::sync::atomic::{fence, Ordering};

use mlx5_prm::doorbell::{counter_word, QP_DBR_RECV_OFFSET};
use mlx5_prm::recv::write_recv_wqe;
use mlx5_prm::wqe::DataSeg;
use rmlx5_abi::uapi;

use super::Qp;
use crate::backend::Cmd;
use crate::context::lock;
use crate::error::{Error, PostError};
use crate::wr::RecvWr;

/// Largest RQ stride the provider handles (64 scatter entries).
const MAX_STRIDE: usize = 1024;

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
        let mut wqe = [0u8; MAX_STRIDE];
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
            let segs: Vec<DataSeg> = wr
                .sg_list
                .iter()
                .filter(|s| s.length != 0)
                .map(|s| DataSeg {
                    byte_count: s.length,
                    lkey: s.lkey,
                    addr: s.addr,
                })
                .collect();
            if wr.sg_list.len() > q.max_recv_sge as usize || stride > MAX_STRIDE {
                failure = Some(fail(Error::Invalid("more SGEs than max_recv_sge")));
                break;
            }
            if wr.sg_list.iter().any(|s| s.length > 1 << 31) {
                failure = Some(fail(Error::Invalid("SGE longer than 2 GiB")));
                break;
            }
            if write_recv_wqe(&mut wqe[..stride], &segs).is_err() {
                failure = Some(fail(Error::Invalid("receive WQE")));
                break;
            }
            let slot = usize::from(rq.head) & (n_slots - 1);
            if let Err(e) = q.rq.write(slot * stride, &wqe[..stride]) {
                failure = Some(fail(e));
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
                .write(QP_DBR_RECV_OFFSET, &counter_word(rq.head))
                .and_then(|()| {
                    let backend = q.pd.ctx.backend();
                    if backend.needs_kick() && q.shared.in_error.load(Ordering::Relaxed) {
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
