// SPDX-License-Identifier: GPL-2.0

//! The `[infinibandevent]` files: the C `file_operations` in
//! `uverbs_shim.c` call the `extern "C"` functions here, which turn the raw
//! pointers into typed references on their first line and hand over to the
//! safe [`EventQueue`].
//!
//! A file's `private_data` is an `Arc<EventQueue>` turned into a raw
//! pointer; the file owns that reference and gives it back in `release`.
//! Objects (CQs, the context) hold their own references, so a queue
//! outlives its file when they still use it (the channel-close rule in
//! `Documentation/uverbs.md`).

use core::ptr::NonNull;
use kernel::{
    bindings,
    ffi::{
        c_int,
        c_void, //
    },
    fs::{
        file::{
            FileDescriptorReservation,
            LocalFile, //
        },
        File,
    },
    prelude::*,
    sync::{
        aref::ARef,
        poll::PollTable,
        Arc, //
    },
    uaccess::{
        UserPtr,
        UserSlice, //
    },
};

use super::event::EventQueue;

// Kernel structs are passed as `c_void` pointers: their bindgen types are
// not FFI-safe by the compiler's standard (empty arrays inside).
extern "C" {
    fn rmlx5_event_file_create(priv_: *mut c_void) -> *mut c_void;
    fn rmlx5_is_event_file(filp: *mut c_void) -> bool;
    fn rmlx5_fasync_helper(fd: c_int, filp: *mut c_void, on: c_int, fa: *mut c_void) -> c_int;
    fn rmlx5_kill_fasync(fa: *mut c_void);
}

/// Sends SIGIO to the owners of a `fasync` list.
///
/// # Safety
///
/// `fa` is the `fasync` list of a live [`EventQueue`].
pub(super) unsafe fn kill_fasync(fa: *mut *mut bindings::fasync_struct) {
    // SAFETY: the caller passes a valid list; `kill_fasync` may be called
    // from any context.
    unsafe { rmlx5_kill_fasync(fa.cast()) };
}

/// A new event file not yet visible to the process: its descriptor is
/// reserved and becomes valid with [`PendingFd::install`]. Dropping it
/// instead releases both, and the file's release closes the queue.
pub(crate) struct PendingFd {
    reservation: FileDescriptorReservation,
    file: ARef<File>,
}

impl PendingFd {
    /// Creates an `[infinibandevent]` file (O_RDONLY, O_CLOEXEC) on `queue`.
    pub(crate) fn new(queue: Arc<EventQueue>) -> Result<Self> {
        let reservation = FileDescriptorReservation::get_unused_fd_flags(bindings::O_CLOEXEC)?;
        let raw = Arc::into_raw(queue).cast_mut().cast::<c_void>();
        // SAFETY: `raw` is a valid pointer for `private_data`; on success
        // the file owns the reference (given back in `release`).
        let file = unsafe { rmlx5_event_file_create(raw) };
        let file = match kernel::error::from_err_ptr(file) {
            Ok(f) => NonNull::new(f).ok_or(ENOMEM),
            Err(e) => Err(e),
        };
        let file = match file {
            Ok(f) => f,
            Err(e) => {
                // SAFETY: the file was not created, so the reference from
                // `into_raw` above is still ours.
                drop(unsafe { Arc::from_raw(raw.cast::<EventQueue>()) });
                return Err(e);
            }
        };
        // SAFETY: `anon_inode_getfile` returned a new file with one
        // reference, which we own; `File` is a transparent wrapper of
        // `struct file`.
        let file = unsafe { ARef::from_raw(file.cast::<File>()) };
        Ok(Self { reservation, file })
    }

    /// The descriptor the file will have.
    pub(crate) fn fd(&self) -> u32 {
        self.reservation.reserved_fd()
    }

    /// Makes the descriptor valid in the calling process.
    pub(crate) fn install(self) {
        self.reservation.fd_install(self.file);
    }
}

/// The event queue behind `fd`, if `fd` is an `[infinibandevent]` file.
/// The returned reference keeps the queue alive, not the file.
pub(crate) fn queue_of_fd(fd: u32) -> Result<Arc<EventQueue>> {
    let file: ARef<LocalFile> = LocalFile::fget(fd).map_err(|_| EBADF)?;
    let raw = file.as_ptr();
    // SAFETY: `raw` is a live file (we hold a reference).
    if !unsafe { rmlx5_is_event_file(raw.cast()) } {
        return Err(EINVAL);
    }
    // SAFETY: event files keep an `Arc<EventQueue>` in `private_data`
    // until release, which cannot run while we hold `file`.
    let queue = unsafe { borrow_queue(raw) };
    Ok(queue.into())
}

/// The queue of an event file.
///
/// # Safety
///
/// `filp` is an event file created by [`PendingFd::new`] that is not yet
/// released, and stays so for `'a`.
unsafe fn borrow_queue<'a>(filp: *mut bindings::file) -> kernel::sync::ArcBorrow<'a, EventQueue> {
    // SAFETY: per the contract, `private_data` is the pointer from
    // `Arc::into_raw`, whose reference lives until release.
    unsafe { kernel::sync::ArcBorrow::from_raw((*filp).private_data.cast::<EventQueue>()) }
}

/// `read()`: one event per call.
///
/// # Safety
///
/// Called by the VFS with a live event file and a user buffer.
#[no_mangle]
unsafe extern "C" fn rmlx5_event_file_read(
    filp: *mut bindings::file,
    buf: *mut c_void,
    count: usize,
    _pos: *mut bindings::loff_t,
) -> isize {
    // SAFETY: the VFS calls `read` on an open event file.
    let queue = unsafe { borrow_queue(filp) };
    // SAFETY: as above, `filp` is live for this call.
    let file = unsafe { File::from_raw_file(filp) };
    let nonblock = file.flags() & bindings::O_NONBLOCK != 0;
    let mut event = [0u8; 16];
    let n = match queue.pop(&mut event[..count.min(16)], nonblock) {
        Ok(n) => n,
        Err(e) => return e.to_errno() as isize,
    };
    let mut w = UserSlice::new(UserPtr::from_ptr(buf), count).writer();
    match event.get(..n).map(|e| w.write_slice(e)) {
        Some(Ok(())) => n as isize,
        _ => EFAULT.to_errno() as isize,
    }
}

/// `poll()`: level-triggered `EPOLLIN`; `EPOLLERR` once closed.
///
/// # Safety
///
/// Called by the VFS with a live event file and a valid (or null) table.
#[no_mangle]
unsafe extern "C" fn rmlx5_event_file_poll(
    filp: *mut bindings::file,
    wait: *mut bindings::poll_table_struct,
) -> bindings::__poll_t {
    // SAFETY: the VFS calls `poll` on an open event file.
    let queue = unsafe { borrow_queue(filp) };
    // SAFETY: as above.
    let file = unsafe { File::from_raw_file(filp) };
    // SAFETY: the VFS passes a valid or null table for this call.
    let table = unsafe { PollTable::from_raw(wait) };
    table.register_wait(file, queue.waitq());
    queue.poll_mask()
}

/// `fcntl(F_SETFL, O_ASYNC)`: SIGIO on new events.
///
/// # Safety
///
/// Called by the VFS with a live event file.
#[no_mangle]
unsafe extern "C" fn rmlx5_event_file_fasync(
    fd: c_int,
    filp: *mut bindings::file,
    on: c_int,
) -> c_int {
    // SAFETY: the VFS calls `fasync` on an open event file (also from
    // `__fput`, before `release`).
    let queue = unsafe { borrow_queue(filp) };
    // SAFETY: the list belongs to the queue, which outlives this call.
    unsafe { rmlx5_fasync_helper(fd, filp.cast(), on, queue.fasync_list().cast()) }
}

/// `release()`: the file's reference to its queue goes; the queue is
/// closed (pending events dropped, later ones discarded).
///
/// # Safety
///
/// Called once by the VFS when the last reference to the file is gone.
#[no_mangle]
unsafe extern "C" fn rmlx5_event_file_release(
    _inode: *mut bindings::inode,
    filp: *mut bindings::file,
) -> c_int {
    // SAFETY: `private_data` is the reference from `Arc::into_raw` in
    // `PendingFd::new`, given back exactly once, here.
    let queue = unsafe { Arc::from_raw((*filp).private_data.cast::<EventQueue>()) };
    queue.close();
    0
}
