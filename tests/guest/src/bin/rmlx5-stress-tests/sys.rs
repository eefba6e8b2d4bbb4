// SPDX-License-Identifier: GPL-2.0

//! Raw system calls on the uverbs files and on memory (ioctl, open,
//! close, mmap, poll, read, volatile pokes and peeks), errno names, and
//! the result type the scenarios share.

use std::os::fd::RawFd;

use rmlx5_abi::ioctl::Command;
use rmlx5_abi::wire::Wire;
use rmlx5_guest_tests::raw::errno;

pub(crate) const PAGE: usize = 4096;

pub(crate) fn errno_name(e: i32) -> String {
    let n = match e {
        libc::EPERM => "EPERM",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::E2BIG => "E2BIG",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::EMFILE => "EMFILE",
        libc::ENOTTY => "ENOTTY",
        libc::ENOSPC => "ENOSPC",
        libc::ENOENT => "ENOENT",
        libc::EOVERFLOW => "EOVERFLOW",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        _ => return format!("E#{e}"),
    };
    n.to_string()
}

/// `ioctl(fd, cmd, arg)`.
pub(crate) fn ioctl(fd: RawFd, cmd: u32, arg: usize) -> Result<(), i32> {
    // SAFETY: the kernel validates `arg` (only our own buffers, or
    // addresses meant to be refused, are passed); `fd` is a number.
    let rc = unsafe { libc::ioctl(fd, libc::c_ulong::from(cmd), arg) };
    if rc < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// The bytes of `v` with `hdr.size` set to the struct's size.
pub(crate) fn enc<T: Wire>(v: &T) -> Vec<u8> {
    let mut b = vec![0u8; T::SIZE];
    let _ = v.write(&mut b);
    if let Some(s) = b.get_mut(..4) {
        s.copy_from_slice(&(T::SIZE as u32).to_ne_bytes());
    }
    b
}

/// A command with `v`, answered into the returned struct.
pub(crate) fn raw_call<T: Wire>(fd: RawFd, cmd: Command, v: &T) -> Result<T, i32> {
    let mut b = enc(v);
    ioctl(fd, cmd.cmd(), b.as_mut_ptr() as usize)?;
    T::read(&b).ok_or(libc::EINVAL)
}

pub(crate) fn open_dev(dev: u32) -> Result<RawFd, String> {
    let path = format!("/dev/rmlx5_uverbs{dev}\0");
    // SAFETY: a NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        Err(format!(
            "open {}: {}",
            path.trim_end_matches('\0'),
            errno_name(errno())
        ))
    } else {
        Ok(fd)
    }
}

pub(crate) fn close_fd(fd: RawFd) -> Result<(), i32> {
    // SAFETY: closing a descriptor number this program owns.
    if unsafe { libc::close(fd) } < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

pub(crate) fn set_nonblock(fd: RawFd) {
    // SAFETY: fcntl on a descriptor number.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
    }
}

pub(crate) fn mmap_fd(
    fd: RawFd,
    offset: u64,
    len: usize,
    prot: i32,
    flags: i32,
) -> Result<usize, i32> {
    // SAFETY: a new mapping chosen by the kernel; no existing memory is
    // affected.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            prot,
            flags,
            fd,
            offset as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        Err(errno())
    } else {
        Ok(p as usize)
    }
}

pub(crate) fn munmap(addr: usize, len: usize) -> Result<(), i32> {
    // SAFETY: unmapping a mapping this program made and no longer uses.
    if unsafe { libc::munmap(addr as *mut libc::c_void, len) } < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// Stores `bytes` at `addr` byte by byte (volatile).
///
/// # Safety
///
/// `addr..addr + bytes.len()` lies in a writable mapping of this process
/// that nothing in this program borrows.
pub(crate) unsafe fn poke(addr: usize, bytes: &[u8]) {
    for (i, b) in bytes.iter().enumerate() {
        // SAFETY: inside the mapping, as the caller guarantees.
        unsafe { std::ptr::write_volatile((addr + i) as *mut u8, *b) };
    }
}

/// Loads `len` bytes at `addr` (volatile).
///
/// # Safety
///
/// `addr..addr + len` lies in a readable mapping of this process.
pub(crate) unsafe fn peek(addr: usize, len: usize) -> Vec<u8> {
    (0..len)
        // SAFETY: inside the mapping, as the caller guarantees.
        .map(|i| unsafe { std::ptr::read_volatile((addr + i) as *const u8) })
        .collect()
}

/// One aligned volatile 32-bit store of `bytes` (already in the device's
/// byte order) at `addr`: a doorbell-record word, which a device may read
/// at any moment and must never see half-written.
///
/// # Safety
///
/// `addr` is 4-byte aligned and `addr..addr + 4` lies in a writable
/// mapping of this process that nothing in this program borrows.
pub(crate) unsafe fn store32(addr: usize, bytes: [u8; 4]) {
    debug_assert!(addr.is_multiple_of(4));
    // SAFETY: aligned and inside the mapping, as the caller guarantees.
    unsafe { std::ptr::write_volatile(addr as *mut u32, u32::from_ne_bytes(bytes)) };
}

/// One aligned volatile 64-bit store of `bytes` (already in the device's
/// byte order) at `addr`: a doorbell, or 8 bytes of a BlueFlame copy, in a
/// device's UAR page (a ConnectX takes a doorbell only as one store of 8
/// bytes or more).
///
/// # Safety
///
/// `addr` is 8-byte aligned and `addr..addr + 8` lies in a writable
/// mapping of this process that nothing in this program borrows.
pub(crate) unsafe fn store64(addr: usize, bytes: [u8; 8]) {
    debug_assert!(addr.is_multiple_of(8));
    // SAFETY: aligned and inside the mapping, as the caller guarantees.
    unsafe { std::ptr::write_volatile(addr as *mut u64, u64::from_ne_bytes(bytes)) };
}

/// `poll()` of one descriptor without waiting; the revents.
pub(crate) fn poll_now(fd: RawFd, timeout_ms: i32) -> Result<i16, i32> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    if n < 0 {
        Err(errno())
    } else {
        Ok(p.revents)
    }
}

pub(crate) fn read_fd(fd: RawFd, buf: &mut [u8]) -> Result<usize, i32> {
    // SAFETY: `buf` is valid for its length.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(errno())
    } else {
        Ok(n as usize)
    }
}

pub(crate) const RW: i32 = libc::PROT_READ | libc::PROT_WRITE;

pub(crate) fn anon(len: usize, prot: i32) -> Result<usize, String> {
    mmap_fd(-1, 0, len, prot, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS)
        .map_err(|e| format!("anonymous mmap: {}", errno_name(e)))
}

pub(crate) type Res = Result<(), String>;

pub(crate) fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}
