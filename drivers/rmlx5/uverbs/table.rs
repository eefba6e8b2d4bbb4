// SPDX-License-Identifier: GPL-2.0

//! Handle tables: how a context names its objects to user space.
//!
//! A handle is an index into one context's table, plus one (0 is never a
//! handle, so an all-zero argument names nothing). Handles are local to the
//! context: another process's handle is just a number that names nothing
//! here, or one of the caller's own objects. The table also counts, per
//! object, how many other objects depend on it (an MR or QP on its PD, a
//! QP on its CQs), so a destroy that would leave a dangling user is
//! refused with `EBUSY`.

use kernel::{
    prelude::*,
    sync::Arc, //
};

use crate::rmlx5_abi::mmap::MAX_HANDLE;

/// One live object and the number of objects that use it.
pub(crate) struct Entry<T> {
    /// The object.
    pub(crate) obj: Arc<T>,
    /// Objects that depend on this one.
    pub(crate) users: u32,
}

/// The objects of one type in one context.
///
/// # Invariants
///
/// `live` is the number of `Some` slots, at most `limit`; `slots.len()`
/// never exceeds `limit`, so every handle fits [`MAX_HANDLE`]. Every slot
/// below `free_from` is `Some`.
pub(crate) struct Table<T> {
    slots: KVVec<Option<Entry<T>>>,
    live: usize,
    /// Where the search for the lowest free slot starts, so that making
    /// N objects costs N steps, not N^2 / 2.
    free_from: usize,
    limit: usize,
    /// Drained ([`Table::drain`]): nothing more is inserted.
    closed: bool,
}

impl<T> Table<T> {
    /// An empty table of at most `limit` objects.
    pub(crate) const fn new(limit: usize) -> Self {
        Self {
            slots: KVVec::new(),
            live: 0,
            free_from: 0,
            limit,
            closed: false,
        }
    }

    /// Number of live objects.
    #[cfg(CONFIG_KUNIT)]
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// The handle `insert` will hand out next (the lowest free one), or
    /// `ENOSPC` when the table is full (`EIO` once it was drained).
    pub(crate) fn next_handle(&self) -> Result<u32> {
        if self.closed {
            return Err(EIO);
        }
        let below = self.free_from.min(self.slots.len());
        let idx = match self.slots.iter().skip(below).position(|s| s.is_none()) {
            Some(i) => below + i,
            None if self.slots.len() < self.limit => self.slots.len(),
            None => return Err(ENOSPC),
        };
        let h = u32::try_from(idx + 1).map_err(|_| ENOSPC)?;
        if h > MAX_HANDLE {
            return Err(ENOSPC);
        }
        Ok(h)
    }

    /// Adds `obj`; returns its handle (the one [`Table::next_handle`]
    /// announced, if nothing was inserted in between).
    pub(crate) fn insert(&mut self, obj: Arc<T>) -> Result<u32> {
        let h = self.next_handle()?;
        let idx = (h - 1) as usize;
        let entry = Some(Entry { obj, users: 0 });
        if idx == self.slots.len() {
            self.slots.push(entry, GFP_KERNEL)?;
        } else {
            let slot = self.slots.get_mut(idx).ok_or(ENOSPC)?;
            *slot = entry;
        }
        self.live += 1;
        // The lowest free slot was taken: all below `idx + 1` are used.
        self.free_from = idx + 1;
        Ok(h)
    }

    fn index(handle: u32) -> Option<usize> {
        (handle as usize).checked_sub(1)
    }

    /// The entry named by `handle`; `EINVAL` if there is none.
    pub(crate) fn get(&self, handle: u32) -> Result<&Entry<T>> {
        Self::index(handle)
            .and_then(|i| self.slots.get(i))
            .and_then(|s| s.as_ref())
            .ok_or(EINVAL)
    }

    /// The entry named by `handle`, mutably; `EINVAL` if there is none.
    pub(crate) fn get_mut(&mut self, handle: u32) -> Result<&mut Entry<T>> {
        Self::index(handle)
            .and_then(|i| self.slots.get_mut(i))
            .and_then(|s| s.as_mut())
            .ok_or(EINVAL)
    }

    /// The object named by `handle`.
    pub(crate) fn obj(&self, handle: u32) -> Result<Arc<T>> {
        Ok(self.get(handle)?.obj.clone())
    }

    /// Whether `handle` names `obj` (and not a later object that reused
    /// the handle).
    pub(crate) fn is(&self, handle: u32, obj: &Arc<T>) -> bool {
        self.get(handle).is_ok_and(|e| Arc::ptr_eq(&e.obj, obj))
    }

    /// Counts one more user of `handle`.
    pub(crate) fn hold(&mut self, handle: u32) -> Result {
        let e = self.get_mut(handle)?;
        e.users = e.users.checked_add(1).ok_or(EBUSY)?;
        Ok(())
    }

    /// Counts one user less of `handle`.
    pub(crate) fn unhold(&mut self, handle: u32) {
        if let Ok(e) = self.get_mut(handle) {
            e.users = e.users.saturating_sub(1);
        }
    }

    /// Removes the object named by `handle`.
    ///
    /// # Errors
    ///
    /// `EINVAL` if there is none, `EBUSY` while other objects use it
    /// (nothing changes).
    pub(crate) fn remove(&mut self, handle: u32) -> Result<Arc<T>> {
        let i = Self::index(handle).ok_or(EINVAL)?;
        let slot = self.slots.get_mut(i).ok_or(EINVAL)?;
        match slot {
            Some(e) if e.users > 0 => Err(EBUSY),
            Some(_) => {
                let e = slot.take().ok_or(EINVAL)?;
                self.live -= 1;
                self.free_from = self.free_from.min(i);
                Ok(e.obj)
            }
            None => Err(EINVAL),
        }
    }

    /// Removes every object, highest handle first, ignoring users (the
    /// context is going away and the caller destroys in dependency order),
    /// and closes the table.
    pub(crate) fn drain(&mut self) -> KVec<Arc<T>> {
        self.closed = true;
        let mut out = KVec::new();
        while let Some(slot) = self.slots.pop() {
            if let Some(e) = slot {
                // Pushing may fail for memory; then the object is dropped
                // right here instead, which is the same teardown earlier.
                let _ = out.push(e.obj, GFP_KERNEL);
            }
        }
        self.live = 0;
        self.free_from = 0;
        out
    }
}
