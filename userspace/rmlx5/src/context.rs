// SPDX-License-Identifier: GPL-2.0

//! Device contexts: the open device file, its UAR pages, device queries and
//! the async-event file.
//!
//! Lock order (outermost first) across the provider: QP send-queue lock,
//! UAR register lock, CQ poll lock, the CQ-doorbell lock; the CQ registry
//! lock is never held while another is taken.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use mlx5_prm::doorbell::{bf_reg_offset, BFREGS_PER_UAR, UAR_PAGE_SIZE};
use rmlx5_abi::mmap::{self, Kind};
use rmlx5_abi::uapi;

use crate::backend::{Backend, Cmd};
use crate::channel::CompChannel;
use crate::cq::{Cq, CqInner};
use crate::dma::DmaRegion;
use crate::error::{Error, Result};
use crate::pd::Pd;

/// Locks a mutex, ignoring poisoning (the data it guards stays
/// consistent: every critical section writes whole values).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A mapped UAR page and the state of its BlueFlame registers.
#[derive(Debug)]
pub(crate) struct Uar {
    pub(crate) page: DmaRegion,
    /// Per register: its lock and the half the next doorbell goes to.
    pub(crate) regs: [BfReg; BFREGS_PER_UAR],
}

/// A lock that guards no data of its own, only the right to touch some
/// atomics (read and written relaxed while it is held, which its acquire
/// and release order): a spin lock, as rdma-core uses for its queues and
/// BlueFlame registers. Taking it costs one locked instruction and
/// releasing it a plain store, where a `Mutex` pays a second locked
/// instruction. A waiter yields the CPU after a short spin, since on the
/// software HCA the holder may be running the model in its kick.
#[derive(Debug, Default)]
pub(crate) struct SpinLock {
    busy: AtomicBool,
}

/// A held [`SpinLock`], released when dropped.
pub(crate) struct SpinGuard<'a> {
    lock: &'a SpinLock,
}

impl SpinLock {
    /// Takes the lock.
    pub(crate) fn lock(&self) -> SpinGuard<'_> {
        let mut spins = 0u32;
        while self
            .busy
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            while self.busy.load(Ordering::Relaxed) {
                spins += 1;
                if spins < 128 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
        SpinGuard { lock: self }
    }
}

impl Drop for SpinGuard<'_> {
    fn drop(&mut self) {
        self.lock.busy.store(false, Ordering::Release);
    }
}

/// A BlueFlame register's lock and the offset of the half the next
/// doorbell goes to (0 or the half size). The lock serialises the doorbell
/// stores of the QPs sharing the register, the switch of halves and, on
/// the software HCA, the kick.
#[derive(Debug, Default)]
pub(crate) struct BfReg {
    lock: SpinLock,
    half: AtomicUsize,
}

/// The held lock of a [`BfReg`].
pub(crate) struct BfGuard<'a> {
    reg: &'a BfReg,
    _lock: SpinGuard<'a>,
}

impl BfReg {
    /// Takes the register's lock.
    pub(crate) fn lock(&self) -> BfGuard<'_> {
        BfGuard {
            reg: self,
            _lock: self.lock.lock(),
        }
    }
}

impl BfGuard<'_> {
    /// Offset of the half the doorbell goes to.
    pub(crate) fn half(&self) -> usize {
        // Only written under the lock, which orders it.
        self.reg.half.load(Ordering::Relaxed)
    }

    /// The next doorbell goes to the other half (`bf_size` apart).
    pub(crate) fn flip(&self, bf_size: usize) {
        let h = self.reg.half.load(Ordering::Relaxed);
        self.reg.half.store(h ^ bf_size, Ordering::Relaxed);
    }
}

/// Device attributes (`ibv_device_attr`).
pub type DeviceAttr = uapi::QueryDevice;

/// Port attributes (`ibv_port_attr`).
pub type PortAttr = uapi::QueryPort;

/// An asynchronous event (`ibv_async_event`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AsyncEvent {
    /// The `user_handle` of the QP or CQ concerned (see
    /// [`crate::Qp::user_handle`], [`crate::Cq::user_handle`]).
    pub element: u64,
    /// `rmlx5_abi::uapi::EVENT_*`.
    pub event_type: u32,
}

#[derive(Debug)]
pub(crate) struct CtxInner {
    pub(crate) backend: Box<dyn Backend>,
    pub(crate) index: u32,
    uars: Mutex<HashMap<u64, Arc<Uar>>>,
    /// The context UAR (CQ doorbells).
    pub(crate) uar: Arc<Uar>,
    /// Serialises the UAR CQ doorbell store and its kick.
    pub(crate) cq_doorbell: Mutex<()>,
    cqs: Mutex<HashMap<u64, Weak<CqInner>>>,
    next_handle: AtomicU64,
    async_fd: OnceLock<OwnedFd>,
    port_lid: u32,
}

/// An open device context (`ibv_context`). Cheap to clone; everything
/// created from it keeps it alive.
#[derive(Clone, Debug)]
pub struct Context {
    pub(crate) inner: Arc<CtxInner>,
}

fn map_uar(backend: &dyn Backend, offset: u64) -> Result<Arc<Uar>> {
    Ok(Arc::new(Uar {
        page: backend.map(offset, UAR_PAGE_SIZE)?,
        regs: Default::default(),
    }))
}

impl Context {
    pub(crate) fn new(backend: Box<dyn Backend>, index: u32) -> Result<Context> {
        let off = mmap::encode(Kind::Uar, 0).ok_or(Error::Invalid("uar offset"))?;
        let uar = map_uar(backend.as_ref(), off)?;
        let mut port = uapi::QueryPort {
            port_num: 1,
            ..Default::default()
        };
        backend.command(Cmd::QueryPort(&mut port))?;
        let mut uars = HashMap::new();
        uars.insert(off, uar.clone());
        Ok(Context {
            inner: Arc::new(CtxInner {
                backend,
                index,
                uars: Mutex::new(uars),
                uar,
                cq_doorbell: Mutex::new(()),
                cqs: Mutex::new(HashMap::new()),
                next_handle: AtomicU64::new(1),
                async_fd: OnceLock::new(),
                port_lid: port.lid,
            }),
        })
    }

    /// The device name, `rmlx5_<N>`.
    pub fn name(&self) -> String {
        format!("rmlx5_{}", self.inner.index)
    }

    /// The LID of port 1, by which peers address this device.
    pub fn lid(&self) -> u32 {
        self.inner.port_lid
    }

    /// Device attributes.
    ///
    /// # Errors
    ///
    /// The errno of `QUERY_DEVICE`.
    pub fn query_device(&self) -> Result<DeviceAttr> {
        let mut a = uapi::QueryDevice::default();
        self.inner.backend.command(Cmd::QueryDevice(&mut a))?;
        Ok(a)
    }

    /// Attributes of port `port` (1).
    ///
    /// # Errors
    ///
    /// The errno of `QUERY_PORT` (`EINVAL` for another port).
    pub fn query_port(&self, port: u32) -> Result<PortAttr> {
        let mut a = uapi::QueryPort {
            port_num: port,
            ..Default::default()
        };
        self.inner.backend.command(Cmd::QueryPort(&mut a))?;
        Ok(a)
    }

    /// Allocates a protection domain.
    ///
    /// # Errors
    ///
    /// The errno of `ALLOC_PD`.
    pub fn alloc_pd(&self) -> Result<Pd> {
        Pd::new(self)
    }

    /// Creates a completion channel.
    ///
    /// # Errors
    ///
    /// The errno of `CREATE_COMP_CHANNEL`.
    pub fn create_comp_channel(&self) -> Result<CompChannel> {
        CompChannel::new(self)
    }

    /// Creates a CQ of at least `entries` entries, reporting completion
    /// events to `channel` if given.
    ///
    /// # Errors
    ///
    /// The errno of `CREATE_CQ` or of mapping its memory.
    pub fn create_cq(&self, entries: u32, channel: Option<&CompChannel>) -> Result<Cq> {
        Cq::new(self, entries, channel)
    }

    /// Reads the next async event, blocking until one arrives.
    ///
    /// # Errors
    ///
    /// The errno of `GET_ASYNC_FD` or `read`.
    pub fn get_async_event(&self) -> Result<AsyncEvent> {
        let fd = self.async_fd()?;
        let mut b = [0u8; core::mem::size_of::<uapi::AsyncEvent>()];
        // SAFETY: `b` is a valid buffer of its length for read to fill.
        let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), b.len()) };
        if n < 0 {
            return Err(Error::last_os("read async event"));
        }
        if usize::try_from(n).ok() != Some(b.len()) {
            return Err(Error::Invalid("short async event"));
        }
        let mut e = [0u8; 8];
        e.copy_from_slice(&b[..8]);
        let mut t = [0u8; 4];
        t.copy_from_slice(&b[8..12]);
        Ok(AsyncEvent {
            element: u64::from_ne_bytes(e),
            event_type: u32::from_ne_bytes(t),
        })
    }

    /// The async-event file descriptor (for epoll), created on first use.
    ///
    /// # Errors
    ///
    /// The errno of `GET_ASYNC_FD`.
    pub fn async_fd(&self) -> Result<i32> {
        if let Some(fd) = self.inner.async_fd.get() {
            return Ok(fd.as_raw_fd());
        }
        let mut a = uapi::GetAsyncFd::default();
        self.inner.backend.command(Cmd::GetAsyncFd(&mut a))?;
        let fd = self.inner.backend.take_fd(a.fd)?;
        let _ = self.inner.async_fd.set(fd);
        self.inner
            .async_fd
            .get()
            .map(AsRawFd::as_raw_fd)
            .ok_or(Error::Invalid("async fd"))
    }

    pub(crate) fn uar(&self, offset: u64) -> Result<Arc<Uar>> {
        let mut uars = lock(&self.inner.uars);
        if let Some(u) = uars.get(&offset) {
            return Ok(u.clone());
        }
        let u = map_uar(self.inner.backend.as_ref(), offset)?;
        uars.insert(offset, u.clone());
        Ok(u)
    }

    /// Index of the BlueFlame register at `bf_offset` of a UAR page.
    pub(crate) fn bfreg_index(bf_offset: u32) -> Result<usize> {
        let off = usize::try_from(bf_offset).map_err(|_| Error::Invalid("bf offset"))?;
        (0..BFREGS_PER_UAR)
            .find(|&i| bf_reg_offset(i) == Ok(off))
            .ok_or(Error::Invalid("bf offset"))
    }

    pub(crate) fn new_handle(&self) -> u64 {
        self.inner.next_handle.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn register_cq(&self, handle: u64, cq: &Arc<CqInner>) {
        lock(&self.inner.cqs).insert(handle, Arc::downgrade(cq));
    }

    pub(crate) fn unregister_cq(&self, handle: u64) {
        lock(&self.inner.cqs).remove(&handle);
    }

    pub(crate) fn find_cq(&self, handle: u64) -> Option<Arc<CqInner>> {
        lock(&self.inner.cqs).get(&handle).and_then(Weak::upgrade)
    }

    pub(crate) fn backend(&self) -> &dyn Backend {
        self.inner.backend.as_ref()
    }
}
