// SPDX-License-Identifier: GPL-2.0

//! Completion channels (`ibv_comp_channel`): the `[infinibandevent]` file
//! one 8-byte event (a CQ's user handle) is read from at a time.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use rmlx5_abi::uapi;

use crate::backend::Cmd;
use crate::context::Context;
use crate::cq::Cq;
use crate::error::{Error, Result};

#[derive(Debug)]
pub(crate) struct ChannelInner {
    ctx: Context,
    pub(crate) fd: OwnedFd,
}

/// A completion channel. Cheap to clone; CQs reporting to it keep it open.
#[derive(Clone, Debug)]
pub struct CompChannel {
    pub(crate) inner: Arc<ChannelInner>,
}

impl CompChannel {
    pub(crate) fn new(ctx: &Context) -> Result<CompChannel> {
        let mut a = uapi::CreateCompChannel::default();
        ctx.backend().command(Cmd::CreateCompChannel(&mut a))?;
        let fd = ctx.backend().take_fd(a.fd)?;
        Ok(CompChannel {
            inner: Arc::new(ChannelInner {
                ctx: ctx.clone(),
                fd,
            }),
        })
    }

    /// The file descriptor, for `poll`/`epoll` (readable while an event is
    /// pending).
    pub fn fd(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.inner.fd.as_fd()
    }

    /// Puts the file in non-blocking mode (or back): [`Self::get_cq_event`]
    /// then returns [`Error::WouldBlock`] when no event is pending.
    ///
    /// # Errors
    ///
    /// The errno of `fcntl`.
    pub fn set_nonblocking(&self, nonblocking: bool) -> Result<()> {
        let fd = self.inner.fd.as_raw_fd();
        // SAFETY: fcntl on a descriptor we own; no memory is passed.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if flags < 0 {
            return Err(Error::last_os("fcntl"));
        }
        let flags = if nonblocking {
            flags | libc::O_NONBLOCK
        } else {
            flags & !libc::O_NONBLOCK
        };
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd, libc::F_SETFL, flags) } < 0 {
            return Err(Error::last_os("fcntl"));
        }
        Ok(())
    }

    /// Waits for the next completion event (`ibv_get_cq_event`) and returns
    /// the CQ it is for. Acknowledge it with [`Cq::ack_events`]; re-arm the
    /// CQ with [`Cq::req_notify`] before polling it empty.
    ///
    /// # Errors
    ///
    /// [`Error::WouldBlock`] in non-blocking mode with nothing pending; the
    /// errno of `read` (`EINTR` when a signal interrupted the wait).
    pub fn get_cq_event(&self) -> Result<Cq> {
        loop {
            let mut b = [0u8; uapi::COMP_EVENT_SIZE];
            // SAFETY: `b` is a valid buffer of its length for read to fill.
            let n =
                unsafe { libc::read(self.inner.fd.as_raw_fd(), b.as_mut_ptr().cast(), b.len()) };
            if n < 0 {
                let e = Error::last_os("read completion event");
                return Err(if e.errno() == libc::EAGAIN {
                    Error::WouldBlock
                } else {
                    e
                });
            }
            if usize::try_from(n).ok() != Some(b.len()) {
                return Err(Error::Invalid("short completion event"));
            }
            let handle = u64::from_ne_bytes(b);
            // An event of a CQ destroyed meanwhile names no CQ: skip it.
            if let Some(cq) = self.inner.ctx.find_cq(handle) {
                cq.event_read();
                return Ok(Cq::from_inner(cq));
            }
        }
    }
}
