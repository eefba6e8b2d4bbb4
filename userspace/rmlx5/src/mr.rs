// SPDX-License-Identifier: GPL-2.0

//! Memory regions over buffers the MR owns.
//!
//! The HCA (and, in-process, the software HCA on another thread) may write
//! an MR's memory at any time, so the buffer is never lent out as a Rust
//! slice: it is read and written by copy, through atomic accesses.

use std::ops::BitOr;
use std::sync::Arc;

use rmlx5_abi::uapi;

use crate::backend::Cmd;
use crate::dma::DmaRegion;
use crate::error::{Error, Result};
use crate::pd::{Pd, PdInner};
use crate::wr::Sge;

/// Access rights of an MR or of a QP's responder (`IBV_ACCESS_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Access(pub u32);

impl Access {
    /// No rights beyond local reads.
    pub const NONE: Access = Access(0);
    /// `IBV_ACCESS_LOCAL_WRITE`.
    pub const LOCAL_WRITE: Access = Access(uapi::ACCESS_LOCAL_WRITE);
    /// `IBV_ACCESS_REMOTE_WRITE`.
    pub const REMOTE_WRITE: Access = Access(uapi::ACCESS_REMOTE_WRITE);
    /// `IBV_ACCESS_REMOTE_READ`.
    pub const REMOTE_READ: Access = Access(uapi::ACCESS_REMOTE_READ);
    /// `IBV_ACCESS_REMOTE_ATOMIC`.
    pub const REMOTE_ATOMIC: Access = Access(uapi::ACCESS_REMOTE_ATOMIC);
    /// All of the above.
    pub const ALL: Access = Access(uapi::ACCESS_ALL);
}

impl BitOr for Access {
    type Output = Access;

    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

/// A registered memory region (`ibv_mr`) owning a zeroed, page-aligned
/// buffer. `Send + Sync`: its memory is only accessed by copy.
#[derive(Debug)]
pub struct Mr {
    pd: Arc<PdInner>,
    handle: u32,
    lkey: u32,
    rkey: u32,
    len: usize,
    buf: Option<DmaRegion>,
}

impl Mr {
    pub(crate) fn new(pd: &Pd, len: usize, access: Access) -> Result<Mr> {
        if len == 0 {
            return Err(Error::Invalid("MR length 0"));
        }
        if access.0 & !uapi::ACCESS_ALL != 0 {
            return Err(Error::Invalid("unknown access flags"));
        }
        let backend = pd.inner.ctx.backend();
        let buf = backend.alloc_buffer(len)?;
        let mut a = uapi::RegMr {
            addr: buf.addr(),
            length: len as u64,
            iova: buf.addr(),
            pd_handle: pd.inner.handle,
            access: access.0,
            ..Default::default()
        };
        if let Err(e) = backend.command(Cmd::RegMr(&mut a)) {
            backend.release_buffer(buf.addr());
            return Err(e);
        }
        Ok(Mr {
            pd: pd.inner.clone(),
            handle: a.mr_handle,
            lkey: a.lkey,
            rkey: a.rkey,
            len,
            buf: Some(buf),
        })
    }

    fn buf(&self) -> Result<&DmaRegion> {
        self.buf.as_ref().ok_or(Error::Invalid("MR is gone"))
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The address the MR is known by in work requests (its IOVA).
    pub fn addr(&self) -> u64 {
        self.buf.as_ref().map_or(0, DmaRegion::addr)
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the MR is empty (never: a zero length is refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where `offset..offset + len` of the MR is, for a remote peer.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] if the range is outside the MR.
    pub fn remote(&self, offset: usize) -> Result<crate::wr::RemoteAddr> {
        if offset > self.len {
            return Err(Error::Invalid("offset outside the MR"));
        }
        Ok(crate::wr::RemoteAddr {
            addr: self.addr() + offset as u64,
            rkey: self.rkey,
        })
    }

    /// A scatter/gather entry over `offset..offset + len`.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] if the range is outside the MR or longer than
    /// 2^31 bytes.
    pub fn sge(&self, offset: usize, len: usize) -> Result<Sge> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => {}
            _ => return Err(Error::Invalid("SGE outside the MR")),
        }
        let length = u32::try_from(len)
            .ok()
            .filter(|l| *l <= 1 << 31)
            .ok_or(Error::Invalid("SGE longer than 2 GiB"))?;
        Ok(Sge {
            addr: self.addr() + offset as u64,
            length,
            lkey: self.lkey,
        })
    }

    /// Copies `data` into the MR at `offset`.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] if the range is outside the MR.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.buf()?.write(offset, data)
    }

    /// Copies the MR's bytes at `offset` into `out`.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] if the range is outside the MR.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.buf()?.read(offset, out)
    }

    /// `len` bytes of the MR at `offset`.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] if the range is outside the MR.
    pub fn to_vec(&self, offset: usize, len: usize) -> Result<Vec<u8>> {
        let mut v = vec![0u8; len];
        self.read(offset, &mut v)?;
        Ok(v)
    }

    /// The host-order `u64` at `offset` (atomic targets and results are
    /// host-order in memory).
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] if the range is outside the MR.
    pub fn read_u64(&self, offset: usize) -> Result<u64> {
        let mut b = [0u8; 8];
        self.read(offset, &mut b)?;
        Ok(u64::from_ne_bytes(b))
    }

    /// Stores a host-order `u64` at `offset`.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] if the range is outside the MR.
    pub fn write_u64(&self, offset: usize, v: u64) -> Result<()> {
        self.write(offset, &v.to_ne_bytes())
    }

    /// Fills the whole MR with `byte`.
    ///
    /// # Errors
    ///
    /// None in practice (the range is the MR).
    pub fn fill(&self, byte: u8) -> Result<()> {
        self.write(0, &vec![byte; self.len])
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        let mut d = uapi::Destroy {
            handle: self.handle,
            ..Default::default()
        };
        let backend = self.pd.ctx.backend();
        match backend.command(Cmd::DeregMr(&mut d)) {
            Ok(()) => {
                if let Some(b) = &self.buf {
                    backend.release_buffer(b.addr());
                }
            }
            Err(_) => {
                // The device may still write the pages: never give them
                // back to the allocator.
                std::mem::forget(self.buf.take());
            }
        }
    }
}
