//! The raw rmlx5 ABI from user space: `ioctl`, `mmap`, `read` and `poll`
//! through libc, with the structs of `rmlx5-abi` (not the provider), so
//! the guest tests see exactly the errno the kernel returns.

use std::ffi::CString;

use rmlx5_abi::ioctl::Command;
use rmlx5_abi::uapi::*;
use rmlx5_abi::wire::Wire;

/// The calling thread's `errno`.
pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// An open `/dev/rmlx5_uverbsN`: one user context, closed on drop.
pub struct Ctx {
    /// The file descriptor.
    pub fd: i32,
}

impl Ctx {
    /// Opens HCA `i`'s node, `/dev/rmlx5_uverbs<i>`.
    pub fn open(i: u32) -> Result<Ctx, String> {
        let path = format!("/dev/rmlx5_uverbs{i}");
        let c = CString::new(path.clone()).map_err(|e| e.to_string())?;
        // SAFETY: `c` is a valid NUL-terminated string.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(format!("open {path}: errno {}", errno()));
        }
        Ok(Ctx { fd })
    }

    /// Opens the node of the `k`-th device the test uses
    /// ([`crate::test_device`]: `rmlx5_k` unless `RMLX5_TEST_DEVICES`
    /// says otherwise).
    pub fn open_test(k: usize) -> Result<Ctx, String> {
        Ctx::open(crate::test_device(k)?)
    }

    /// Whether the device sees this process's stores to its UAR page
    /// itself (`QUERY_DEVICE` reports [`DEVICE_UAR_DOORBELLS`]: a ConnectX
    /// PCI function, which refuses `KICK`, and where a store to the UAR
    /// page is a doorbell); false for a software HCA.
    pub fn uar_doorbells(&self) -> Result<bool, String> {
        let mut d = QueryDevice::default();
        self.call(Command::QueryDevice, &mut d)
            .map_err(|e| format!("query_device: errno {e}"))?;
        Ok(d.device_flags & DEVICE_UAR_DOORBELLS != 0)
    }

    /// Issues `cmd` with the argument address `arg`; `Err(errno)` on
    /// failure. The kernel checks the address (a bad one is EFAULT).
    pub fn raw(&self, cmd: u32, arg: *mut u8) -> Result<(), i32> {
        let arg = arg as usize;
        // SAFETY: the kernel validates the address; no user memory is
        // touched other than through the kernel's checked copies.
        let rc = unsafe { libc::ioctl(self.fd, libc::c_ulong::from(cmd), arg) };
        if rc == 0 {
            Ok(())
        } else {
            Err(errno())
        }
    }

    /// Issues `cmd` with `v` (its header's size set to `T::SIZE` unless
    /// already set) and reads the answer back into `v`.
    pub fn call<T: Wire + HasHdr>(&self, cmd: Command, v: &mut T) -> Result<(), i32> {
        if v.hdr_mut().size == 0 {
            v.hdr_mut().size = T::SIZE as u32;
        }
        let mut buf = vec![0u8; T::SIZE];
        v.write(&mut buf).ok_or(libc::EINVAL)?;
        self.raw(cmd.cmd(), buf.as_mut_ptr())?;
        *v = T::read(&buf).ok_or(libc::EINVAL)?;
        Ok(())
    }

    /// `ALLOC_PD`; returns the handle.
    pub fn alloc_pd(&self) -> Result<u32, i32> {
        let mut a = AllocPd::default();
        self.call(Command::AllocPd, &mut a)?;
        Ok(a.pd_handle)
    }

    /// A destroy command; returns the answer (event counts).
    pub fn destroy(&self, cmd: Command, handle: u32) -> Result<Destroy, i32> {
        let mut a = Destroy {
            handle,
            ..Destroy::default()
        };
        self.call(cmd, &mut a)?;
        Ok(a)
    }

    /// `REG_MR` of `len` bytes at `addr`; returns the answer.
    pub fn reg_mr(&self, pd: u32, addr: u64, len: u64, access: u32) -> Result<RegMr, i32> {
        let mut a = RegMr {
            addr,
            length: len,
            iova: addr,
            pd_handle: pd,
            access,
            ..RegMr::default()
        };
        self.call(Command::RegMr, &mut a)?;
        Ok(a)
    }

    /// `CREATE_COMP_CHANNEL`; returns the fd.
    pub fn channel(&self) -> Result<i32, i32> {
        let mut a = CreateCompChannel::default();
        self.call(Command::CreateCompChannel, &mut a)?;
        Ok(a.fd)
    }

    /// `CREATE_CQ` of `cqe` entries on `channel_fd` (or -1).
    pub fn create_cq(&self, cqe: u32, channel_fd: i32, user_handle: u64) -> Result<CreateCq, i32> {
        let mut a = CreateCq {
            user_handle,
            cqe,
            channel_fd,
            ..CreateCq::default()
        };
        self.call(Command::CreateCq, &mut a)?;
        Ok(a)
    }

    /// `CREATE_QP` (RC, small caps) on `pd` with send and receive CQs.
    pub fn create_qp(&self, pd: u32, scq: u32, rcq: u32) -> Result<CreateQp, i32> {
        let mut a = CreateQp {
            user_handle: 0x9900,
            pd_handle: pd,
            send_cq_handle: scq,
            recv_cq_handle: rcq,
            qp_type: QPT_RC,
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 64,
            ..CreateQp::default()
        };
        self.call(Command::CreateQp, &mut a)?;
        Ok(a)
    }

    /// `mmap` of `len` bytes at `offset` with `prot` and `flags`.
    pub fn mmap(&self, offset: u64, len: usize, prot: i32, flags: i32) -> Result<Map, i32> {
        // SAFETY: a fresh mapping chosen by the kernel; no existing memory
        // is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                flags,
                self.fd,
                offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(errno());
        }
        Ok(Map { ptr: p.cast(), len })
    }

    /// A shared read-write mapping.
    pub fn map_rw(&self, offset: u64, len: usize) -> Result<Map, i32> {
        self.mmap(
            offset,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
        )
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: our descriptor, closed once.
        unsafe { libc::close(self.fd) };
    }
}

/// A mapping, unmapped on drop.
pub struct Map {
    /// Start address.
    pub ptr: *mut u8,
    /// Length in bytes.
    pub len: usize,
}

impl Map {
    /// Anonymous private memory.
    pub fn anon(len: usize, prot: i32) -> Result<Map, i32> {
        // SAFETY: a fresh anonymous mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(errno());
        }
        Ok(Map { ptr: p.cast(), len })
    }

    /// The start address as a number.
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// Writes and reads back every page (volatile), to prove the mapping
    /// is backed.
    pub fn touch(&self) -> bool {
        let mut ok = true;
        for off in (0..self.len).step_by(4096) {
            // SAFETY: inside our read-write mapping.
            unsafe {
                let p = self.ptr.add(off);
                std::ptr::write_volatile(p, 0xa5);
                ok &= std::ptr::read_volatile(p) == 0xa5;
            }
        }
        ok
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: our mapping, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// ABI structs that start with a [`CmdHdr`].
pub trait HasHdr {
    /// The header.
    fn hdr_mut(&mut self) -> &mut CmdHdr;
}

macro_rules! has_hdr {
    ($($t:ty),*) => {$(
        impl HasHdr for $t {
            fn hdr_mut(&mut self) -> &mut CmdHdr {
                &mut self.hdr
            }
        }
    )*};
}

has_hdr!(
    QueryDevice,
    QueryPort,
    AllocPd,
    Destroy,
    RegMr,
    CreateCompChannel,
    CreateCq,
    CreateQp,
    ModifyQp,
    QueryQp,
    Kick,
    GetAsyncFd
);

/// Closes a descriptor, ignoring errors.
pub fn close(fd: i32) {
    // SAFETY: closing a number is harmless even if it is not open.
    unsafe { libc::close(fd) };
}

/// `read()` into `buf`; `Err(errno)` on failure.
pub fn read_fd(fd: i32, buf: &mut [u8]) -> Result<usize, i32> {
    // SAFETY: `buf` is valid for its length.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(errno())
    } else {
        Ok(n as usize)
    }
}

/// `poll()` one fd for `events` with `timeout_ms`; returns `revents`.
pub fn poll_fd(fd: i32, events: i16, timeout_ms: i32) -> Result<i16, i32> {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    if n < 0 {
        return Err(errno());
    }
    Ok(p.revents)
}

/// Sets or clears `O_NONBLOCK`.
pub fn set_nonblock(fd: i32, on: bool) -> Result<(), i32> {
    // SAFETY: fcntl on a descriptor number.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if fl < 0 {
        return Err(errno());
    }
    let fl = if on {
        fl | libc::O_NONBLOCK
    } else {
        fl & !libc::O_NONBLOCK
    };
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, fl) } < 0 {
        return Err(errno());
    }
    Ok(())
}

/// A small xorshift generator for the sweeps (deterministic per seed).
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}
