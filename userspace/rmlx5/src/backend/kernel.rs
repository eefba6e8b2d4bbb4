// SPDX-License-Identifier: GPL-2.0

//! The kernel backend: ioctls on `/dev/rmlx5_uverbsN` and mmaps of the
//! offsets the kernel hands out (see `rmlx5_abi::mmap`).

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;

use rmlx5_abi::ioctl::Command;
use rmlx5_abi::uapi;

use super::{Backend, Cmd};
use crate::dma::{Backing, DmaRegion};
use crate::error::{Error, Result};

/// An open device file.
#[derive(Debug)]
pub(crate) struct KernelBackend {
    fd: OwnedFd,
    /// Whether doorbells need a `KICK`: the device's `QUERY_DEVICE`
    /// answer, asked once at open (see [`Backend::needs_kick`]).
    needs_kick: bool,
}

/// A shared mapping of the device file, unmapped when the last region
/// over it goes.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is process-wide memory; it is only accessed through
// `DmaRegion` (atomics and volatile stores).
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Backing for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr..ptr + len` is a mapping made by `map` and owned by
        // this value alone; no region over it outlives it.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// Header of a command struct.
trait HasHdr {
    fn hdr(&mut self) -> &mut uapi::CmdHdr;
}

macro_rules! has_hdr {
    ($($t:ty),*) => {$(
        impl HasHdr for $t {
            fn hdr(&mut self) -> &mut uapi::CmdHdr {
                &mut self.hdr
            }
        }
    )*};
}

has_hdr!(
    uapi::QueryDevice,
    uapi::QueryPort,
    uapi::AllocPd,
    uapi::Destroy,
    uapi::RegMr,
    uapi::CreateCompChannel,
    uapi::CreateCq,
    uapi::CreateQp,
    uapi::ModifyQp,
    uapi::QueryQp,
    uapi::Kick,
    uapi::GetAsyncFd
);

impl KernelBackend {
    /// Opens `/dev/rmlx5_uverbs<index>` and asks the device, once, whether
    /// it sees the process's UAR stores itself (`QUERY_DEVICE`'s
    /// `device_flags`).
    ///
    /// # Errors
    ///
    /// The errno of `open`, or of `QUERY_DEVICE`.
    pub(crate) fn open(path: &str) -> Result<Self> {
        let c = CString::new(path).map_err(|_| Error::Invalid("device path"))?;
        // SAFETY: `c` is a valid NUL-terminated string; open has no other
        // memory effects.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(Error::last_os("open"));
        }
        // SAFETY: `fd` was just returned by open and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut b = KernelBackend {
            fd,
            needs_kick: true,
        };
        let mut d = uapi::QueryDevice::default();
        b.command(Cmd::QueryDevice(&mut d))?;
        b.needs_kick = kick_needed(d.device_flags);
        Ok(b)
    }

    fn ioctl<T: HasHdr>(&self, name: &'static str, cmd: Command, arg: &mut T) -> Result<()> {
        let size = u32::try_from(core::mem::size_of::<T>()).map_err(|_| Error::Invalid(name))?;
        arg.hdr().size = size;
        let request = cmd.cmd();
        // SAFETY: `arg` is a live, exclusively borrowed `#[repr(C)]` struct
        // of exactly the size the command number encodes (`cmd()` is built
        // from `size_of` of the same struct); the kernel reads and writes at
        // most `hdr.size` bytes of it.
        let r = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::Ioctl::from(request),
                core::ptr::from_mut(arg),
            )
        };
        if r < 0 {
            return Err(Error::last_os(name));
        }
        Ok(())
    }
}

impl Backend for KernelBackend {
    fn command(&self, cmd: Cmd<'_>) -> Result<()> {
        let name = cmd.name();
        match cmd {
            Cmd::QueryDevice(a) => self.ioctl(name, Command::QueryDevice, a),
            Cmd::QueryPort(a) => self.ioctl(name, Command::QueryPort, a),
            Cmd::AllocPd(a) => self.ioctl(name, Command::AllocPd, a),
            Cmd::DeallocPd(a) => self.ioctl(name, Command::DeallocPd, a),
            Cmd::RegMr(a) => self.ioctl(name, Command::RegMr, a),
            Cmd::DeregMr(a) => self.ioctl(name, Command::DeregMr, a),
            Cmd::CreateCompChannel(a) => self.ioctl(name, Command::CreateCompChannel, a),
            Cmd::CreateCq(a) => self.ioctl(name, Command::CreateCq, a),
            Cmd::DestroyCq(a) => self.ioctl(name, Command::DestroyCq, a),
            Cmd::CreateQp(a) => self.ioctl(name, Command::CreateQp, a),
            Cmd::ModifyQp(a) => self.ioctl(name, Command::ModifyQp, a),
            Cmd::QueryQp(a) => self.ioctl(name, Command::QueryQp, a),
            Cmd::DestroyQp(a) => self.ioctl(name, Command::DestroyQp, a),
            Cmd::Kick(a) => self.ioctl(name, Command::Kick, a),
            Cmd::GetAsyncFd(a) => self.ioctl(name, Command::GetAsyncFd, a),
        }
    }

    fn map(&self, offset: u64, len: usize) -> Result<DmaRegion> {
        let off = libc::off_t::try_from(offset).map_err(|_| Error::Invalid("mmap offset"))?;
        if len == 0 {
            return Err(Error::Invalid("empty mapping"));
        }
        // SAFETY: a fresh shared mapping of the device file at an address
        // the kernel picks; it aliases nothing in the process.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.fd.as_raw_fd(),
                off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::last_os("mmap"));
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or(Error::Invalid("mmap returned null"))?;
        let owner = Arc::new(Mapping { ptr, len });
        // SAFETY: the mapping is `len` bytes, readable and writable, and
        // lives until `owner` (kept by the region) unmaps it.
        Ok(unsafe { DmaRegion::new(ptr, len, owner) })
    }

    fn needs_kick(&self) -> bool {
        self.needs_kick
    }

    fn alloc_buffer(&self, len: usize) -> Result<DmaRegion> {
        Ok(crate::dma::HeapPages::alloc(len)?.1)
    }

    fn release_buffer(&self, _addr: u64) {}

    fn take_fd(&self, fd: i32) -> Result<OwnedFd> {
        if fd < 0 {
            return Err(Error::Invalid("kernel returned a negative fd"));
        }
        // SAFETY: the kernel just installed `fd` for this process and the
        // ABI transfers its ownership to the caller.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

/// Whether a device with `QUERY_DEVICE`'s `device_flags` needs a `KICK`
/// after each doorbell: a software HCA in the module cannot see the
/// process's UAR stores, a ConnectX PCI function
/// ([`uapi::DEVICE_UAR_DOORBELLS`]) sees them (its UAR page is a page of
/// its BAR) and refuses `KICK`.
fn kick_needed(device_flags: u32) -> bool {
    device_flags & uapi::DEVICE_UAR_DOORBELLS == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_device_without_uar_doorbells_is_kicked() {
        assert!(kick_needed(0));
        assert!(!kick_needed(uapi::DEVICE_UAR_DOORBELLS));
        // Bits defined later do not change the answer.
        assert!(kick_needed(!uapi::DEVICE_UAR_DOORBELLS));
        assert!(!kick_needed(u32::MAX));
    }
}
