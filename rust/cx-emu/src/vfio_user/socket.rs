// SPDX-License-Identifier: GPL-2.0

//! The connection to the client: whole messages in, with the file
//! descriptors that came along, and replies out.
//!
//! This file and `dma.rs` are the crate's `unsafe` layer: `recvmsg` with
//! `SCM_RIGHTS` ancillary data and `poll` have no safe std interface.

use std::io::{self, Read, Write};
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::wire::{Header, HEADER_SIZE};

/// Most descriptors one message can carry (the protocol's limit is what
/// the server announces, 1; more are accepted so that none leak).
const MAX_FDS: usize = 16;

/// Largest message accepted: the 1 MiB data limit the server announces
/// plus room for any command's fixed part.
pub(crate) const MAX_MESSAGE: usize = (1 << 20) + 4096;

/// One request as it arrived.
#[derive(Debug)]
pub(crate) struct Message {
    /// Its header.
    pub(crate) header: Header,
    /// The `header.size - 16` bytes after the header.
    pub(crate) payload: Vec<u8>,
    /// Descriptors sent with it (DMA_MAP's memory, SET_IRQS's eventfds).
    pub(crate) fds: Vec<OwnedFd>,
}

/// The client's connection.
#[derive(Debug)]
pub(crate) struct Connection {
    stream: UnixStream,
}

impl Connection {
    /// Wraps an accepted stream.
    pub(crate) fn new(stream: UnixStream) -> Self {
        Connection { stream }
    }

    /// Waits until a message can be read or `timeout` passes (`None`:
    /// without limit). Returns whether the socket is readable (or closed).
    ///
    /// # Errors
    ///
    /// The `poll` error (not `EINTR`, which reports "not readable").
    #[cfg(test)]
    pub(crate) fn wait(&self, timeout: Option<Duration>) -> io::Result<bool> {
        Ok(wait_readable(&[self.stream.as_fd()], timeout)?[0])
    }

    /// Reads the next whole message. `Ok(None)`: the client closed the
    /// connection between messages.
    ///
    /// # Errors
    ///
    /// A read error, a connection closed inside a message, descriptors
    /// cut off by the kernel, or a message above [`MAX_MESSAGE`] (the
    /// stream cannot be trusted after any of them).
    pub(crate) fn recv(&mut self) -> io::Result<Option<Message>> {
        let mut head = [0u8; HEADER_SIZE];
        let mut fds = Vec::new();
        let mut got = 0;
        while got < HEADER_SIZE {
            let n = recv_with_fds(&self.stream, &mut head[got..], &mut fds)?;
            if n == 0 {
                if got == 0 {
                    return Ok(None);
                }
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed inside a message header",
                ));
            }
            got += n;
        }
        let header = Header::decode(&head);
        let size = header.size as usize;
        if !(HEADER_SIZE..=MAX_MESSAGE).contains(&size) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("message size {size} outside {HEADER_SIZE}..={MAX_MESSAGE}"),
            ));
        }
        let mut payload = vec![0u8; size - HEADER_SIZE];
        self.stream.read_exact(&mut payload)?;
        Ok(Some(Message {
            header,
            payload,
            fds,
        }))
    }

    /// Writes one whole message.
    ///
    /// # Errors
    ///
    /// The write error.
    pub(crate) fn send(&mut self, message: &[u8]) -> io::Result<()> {
        self.stream.write_all(message)
    }
}

impl AsFd for Connection {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }
}

/// Waits until one of `fds` can be read (a message, a connection to
/// accept, or the peer's close) or `timeout` passes (`None`: without
/// limit). Returns which are readable.
///
/// # Errors
///
/// The `poll` error (not `EINTR`, which reports none readable).
pub(crate) fn wait_readable(
    fds: &[BorrowedFd<'_>],
    timeout: Option<Duration>,
) -> io::Result<Vec<bool>> {
    // ppoll: microsecond timers (command latencies of tens of µs), where
    // poll's milliseconds would round every wait up to one.
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(t.subsec_nanos()),
    });
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let count = libc::nfds_t::try_from(pfds.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "too many descriptors"))?;
    // SAFETY: `pfds` holds `count` valid, writable `pollfd`s; the
    // descriptors stay open for the call (borrowed for its length); `ts`
    // outlives it; a null signal mask leaves the mask as it is.
    let n = unsafe {
        libc::ppoll(
            pfds.as_mut_ptr(),
            count,
            ts.as_ref().map_or(core::ptr::null(), std::ptr::from_ref),
            core::ptr::null(),
        )
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(vec![false; fds.len()])
        } else {
            Err(e)
        };
    }
    Ok(pfds.iter().map(|p| p.revents != 0).collect())
}

/// One `recvmsg` into `buf`, appending the descriptors that came with it
/// to `fds` (close-on-exec). Returns the bytes read (0 at end of stream).
fn recv_with_fds(stream: &UnixStream, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> io::Result<usize> {
    const FD_BYTES: u32 = (MAX_FDS * size_of::<libc::c_int>()) as u32;
    // SAFETY: CMSG_SPACE is arithmetic on its argument.
    let space = unsafe { libc::CMSG_SPACE(FD_BYTES) } as usize;
    // u64 elements: the control buffer must be aligned for `cmsghdr`.
    let mut control = vec![0u64; space.div_ceil(size_of::<u64>())];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: `msghdr` is plain data for which all-zero is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space;
    let n = loop {
        // SAFETY: `msg` points at one iovec over `buf` and at `control`,
        // both live and writable for their stated lengths during the call.
        let n = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    // SAFETY: `msg` was filled by recvmsg; its control pointer and length
    // describe `control`, which is still alive.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !c.is_null() {
        // SAFETY: a non-null header from CMSG_FIRSTHDR/CMSG_NXTHDR lies
        // inside `control` (which is aligned for it).
        let h = unsafe { c.read_unaligned() };
        if h.cmsg_level == libc::SOL_SOCKET && h.cmsg_type == libc::SCM_RIGHTS {
            // SAFETY: CMSG_LEN is arithmetic on its argument.
            let head = unsafe { libc::CMSG_LEN(0) } as usize;
            let count = (h.cmsg_len as usize).saturating_sub(head) / size_of::<libc::c_int>();
            // SAFETY: `c` is a valid header inside `control`.
            let data = unsafe { libc::CMSG_DATA(c) }.cast::<libc::c_int>();
            for i in 0..count {
                // SAFETY: the kernel wrote `count` descriptors after the
                // header, inside `control`; each is a new descriptor this
                // process now owns, so it is wrapped exactly once.
                let fd = unsafe { OwnedFd::from_raw_fd(data.add(i).read_unaligned()) };
                fds.push(fd);
            }
        }
        // SAFETY: `c` is a valid header of `msg`'s control buffer.
        c = unsafe { libc::CMSG_NXTHDR(&msg, c) };
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "file descriptors of a message were cut off",
        ));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session_tests::send_with_fds;
    use crate::vfio_user::wire::{cmd, flags};

    fn header(command: u16, payload: usize) -> [u8; HEADER_SIZE] {
        Header {
            msg_id: 1,
            command,
            size: (HEADER_SIZE + payload) as u32,
            flags: flags::TYPE_COMMAND,
            error: 0,
        }
        .encode()
    }

    #[test]
    fn a_message_and_its_descriptor_arrive_together() {
        let (a, b) = UnixStream::pair().unwrap();
        let file = std::fs::File::open("/dev/null").unwrap();
        let mut msg = header(cmd::DMA_MAP, 4).to_vec();
        msg.extend_from_slice(&[9, 8, 7, 6]);
        send_with_fds(&a, &msg, &[file.as_raw_fd()]);
        // A second message without descriptors, split across writes.
        let mut second = header(cmd::DEVICE_RESET, 0).to_vec();
        (&a).write_all(&second[..5]).unwrap();
        (&a).write_all(&second.split_off(5)).unwrap();
        drop(a);
        let mut conn = Connection::new(b);
        assert!(conn.wait(Some(Duration::from_millis(100))).unwrap());
        let m = conn.recv().unwrap().unwrap();
        assert_eq!(m.header.command, cmd::DMA_MAP);
        assert_eq!(m.payload, vec![9, 8, 7, 6]);
        assert_eq!(m.fds.len(), 1);
        let m = conn.recv().unwrap().unwrap();
        assert_eq!(
            (m.header.command, m.payload.len(), m.fds.len()),
            (cmd::DEVICE_RESET, 0, 0)
        );
        assert!(conn.recv().unwrap().is_none());
    }

    #[test]
    fn waiting_on_several_sockets_says_which_is_readable() {
        let (a0, b0) = UnixStream::pair().unwrap();
        let (a1, b1) = UnixStream::pair().unwrap();
        let fds = [b0.as_fd(), b1.as_fd()];
        let none = wait_readable(&fds, Some(Duration::from_millis(1))).unwrap();
        assert_eq!(none, [false, false]);
        (&a1).write_all(&[1]).unwrap();
        let one = wait_readable(&fds, Some(Duration::ZERO)).unwrap();
        assert_eq!(one, [false, true]);
        // A closed peer reads as readable too (the end of the stream).
        drop(a0);
        let both = wait_readable(&fds, None).unwrap();
        assert_eq!(both, [true, true]);
    }

    #[test]
    fn an_oversized_message_is_refused() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut h = Header::decode(&header(cmd::REGION_WRITE, 0));
        h.size = (MAX_MESSAGE + 1) as u32;
        (&a).write_all(&h.encode()).unwrap();
        assert!(Connection::new(b).recv().is_err());
    }
}
