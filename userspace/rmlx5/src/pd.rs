// SPDX-License-Identifier: GPL-2.0

//! Protection domains.

use std::sync::Arc;

use rmlx5_abi::uapi;

use crate::backend::Cmd;
use crate::context::Context;
use crate::cq::Cq;
use crate::error::Result;
use crate::mr::{Access, Mr};
use crate::qp::{Qp, QpInit};

#[derive(Debug)]
pub(crate) struct PdInner {
    pub(crate) ctx: Context,
    pub(crate) handle: u32,
    pdn: u32,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        let mut d = uapi::Destroy {
            handle: self.handle,
            ..Default::default()
        };
        // Every MR and QP of the PD held a reference, so they are gone;
        // a failure here can only be a kernel-side problem, with nothing
        // left for the process to do.
        let _ = self.ctx.backend().command(Cmd::DeallocPd(&mut d));
    }
}

/// A protection domain (`ibv_pd`). Cheap to clone; MRs and QPs keep it
/// alive, and it is deallocated when the last of them goes.
#[derive(Clone, Debug)]
pub struct Pd {
    pub(crate) inner: Arc<PdInner>,
}

impl Pd {
    pub(crate) fn new(ctx: &Context) -> Result<Pd> {
        let mut a = uapi::AllocPd::default();
        ctx.backend().command(Cmd::AllocPd(&mut a))?;
        Ok(Pd {
            inner: Arc::new(PdInner {
                ctx: ctx.clone(),
                handle: a.pd_handle,
                pdn: a.pdn,
            }),
        })
    }

    /// The device's PD number.
    pub fn pdn(&self) -> u32 {
        self.inner.pdn
    }

    /// The context.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// Allocates a zeroed buffer of `len` bytes and registers it with
    /// `access` (`ibv_reg_mr` over memory the MR owns).
    ///
    /// # Errors
    ///
    /// [`crate::Error::Invalid`] for a zero length; the errno of `REG_MR`.
    pub fn reg_mr(&self, len: usize, access: Access) -> Result<Mr> {
        Mr::new(self, len, access)
    }

    /// Creates an RC QP completing sends to `send_cq` and receives to
    /// `recv_cq` (which may be the same CQ).
    ///
    /// # Errors
    ///
    /// The errno of `CREATE_QP`; [`crate::Error::Invalid`] if the CQs
    /// belong to another context or the kernel's geometry is unusable.
    pub fn create_qp(&self, send_cq: &Cq, recv_cq: &Cq, init: &QpInit) -> Result<Qp> {
        Qp::new(self, send_cq, recv_cq, init)
    }
}
