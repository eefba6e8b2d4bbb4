// SPDX-License-Identifier: GPL-2.0

//! The user-space device nodes `/dev/rmlx5_uverbs<n>`, one per verbs
//! device `rmlx5_<n>`: the software HCA instances' for as long as the
//! module is loaded, a PCI function's while it is bound.
//!
//! Open files pin the module (the misc file operations carry
//! `THIS_MODULE` as owner), so the module's nodes outlive the files opened
//! on them. A PCI function's node goes at unbind: the node is removed (no
//! new open), and then the contexts still open on it are disassociated
//! ([`Users::disassociate`]), as ib_uverbs does for mlx5_ib: each is told
//! `DEVICE_FATAL`, its objects are destroyed on the function and its UAR
//! page leaves the process (whose later stores land in memory). The unbind
//! waits only for the commands already running on the context, not for the
//! process; the process sees `EIO` from then on and frees the rest when it
//! closes the file.

use kernel::{
    container_of,
    miscdevice::{
        MiscDeviceOptions,
        MiscDeviceRegistration, //
    },
    new_mutex,
    prelude::*,
    sync::{
        Arc,
        Mutex, //
    },
};

use super::Ucontext;

/// Most nodes.
pub(crate) const MAX_NODES: usize = 8;

/// Names of the user-space device nodes, one per possible instance. The misc
/// device core keeps a pointer to the name, so they must be `'static`.
const UVERBS_NAMES: [&CStr; MAX_NODES] = [
    c"rmlx5_uverbs0",
    c"rmlx5_uverbs1",
    c"rmlx5_uverbs2",
    c"rmlx5_uverbs3",
    c"rmlx5_uverbs4",
    c"rmlx5_uverbs5",
    c"rmlx5_uverbs6",
    c"rmlx5_uverbs7",
];

/// The user contexts open on one node.
#[pin_data]
pub(crate) struct Users {
    /// The open contexts, for [`Users::device_fatal`] and
    /// [`Users::disassociate`]: each is entered by [`Users::watch`] once
    /// pinned and leaves in its drop, before any of its fields goes.
    #[pin]
    open: Mutex<KVec<*const Ucontext>>,
}

// SAFETY: The raw pointers name pinned contexts that remove themselves
// before they are freed, under the same mutex (see `open`).
unsafe impl Send for Users {}
// SAFETY: As above.
unsafe impl Sync for Users {}

impl Users {
    fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                open <- new_mutex!(KVec::new(), "rmlx5_uverbs_open"),
            }),
            GFP_KERNEL,
        )
    }

    /// Enters a context for [`Users::device_fatal`].
    pub(crate) fn watch(&self, ctx: Pin<&Ucontext>) -> Result {
        self.open
            .lock()
            .push(core::ptr::from_ref(&*ctx), GFP_KERNEL)?;
        Ok(())
    }

    /// Removes a context entered by [`Users::watch`] (its drop, first).
    pub(crate) fn unwatch(&self, ctx: &Ucontext) {
        let p = core::ptr::from_ref(ctx);
        self.open.lock().retain(|c| *c != p);
    }

    /// The device failed: every open context gets `IBV_EVENT_DEVICE_FATAL`
    /// on its async-event file, and its completion channels are closed,
    /// so a process waiting for a completion wakes up with `EIO` instead
    /// of waiting for one that cannot come. Process context.
    pub(crate) fn device_fatal(&self) {
        let open = self.open.lock();
        for &ctx in open.iter() {
            // SAFETY: A context leaves `open` under this lock before it is
            // freed (its drop), so every entry is live while we hold it.
            unsafe { &*ctx }.device_fatal();
        }
    }

    /// The device is going away (unbind, after the node was removed):
    /// every open context is disassociated from it
    /// ([`Ucontext::disassociate`]), saying so in the log. No process is
    /// waited for, only the commands already running on its contexts.
    /// Process context, and no `mmap_lock`
    /// held (each process's is taken to unmap its UAR page).
    pub(crate) fn disassociate(&self, index: u16) {
        let open = self.open.lock();
        if !open.is_empty() {
            pr_info!(
                "rmlx5_{}: disassociating {} user context(s)\n",
                index,
                open.len()
            );
        }
        for &ctx in open.iter() {
            // SAFETY: As in `device_fatal`.
            unsafe { &*ctx }.disassociate();
        }
    }

    /// Holds the users for a context until the returned value is dropped.
    pub(crate) fn enter(self: &Arc<Self>) -> UserRef {
        UserRef(self.clone())
    }
}

/// The node's users, held by one open context.
pub(crate) struct UserRef(Arc<Users>);

impl UserRef {
    /// The node's users.
    pub(crate) fn users(&self) -> &Arc<Users> {
        &self.0
    }
}

impl crate::mlx5_core::device::FatalListener for Users {
    fn device_fatal(&self) {
        Users::device_fatal(self);
    }
}

/// The device node of one verbs device.
#[pin_data]
pub(crate) struct Node {
    /// Instance number `n` of `rmlx5_<n>`.
    index: u32,
    /// The contexts open on the node.
    users: Arc<Users>,
    /// `/dev/rmlx5_uverbs<n>`. Every `MiscDeviceRegistration<Ucontext>` in
    /// the module is this field of a pinned `Node` (see [`Node::from_uverbs`]).
    #[pin]
    uverbs: MiscDeviceRegistration<Ucontext>,
}

impl Node {
    /// Registers `/dev/rmlx5_uverbs<index>`.
    pub(crate) fn new(index: usize) -> Result<Pin<KBox<Self>>> {
        let name = UVERBS_NAMES.get(index).ok_or(EINVAL)?;
        let index = u32::try_from(index)?;
        let users = Users::new()?;
        KBox::try_pin_init(
            // Fields are initialised in the order written: `index` and
            // `users` are set before the device node appears, so a racing
            // open() sees them.
            try_pin_init!(Self {
                index,
                users,
                uverbs <- MiscDeviceRegistration::register(MiscDeviceOptions { name }),
            }),
            GFP_KERNEL,
        )
    }

    /// Instance number `n` of `rmlx5_<n>`.
    pub(crate) fn index(&self) -> u32 {
        self.index
    }

    /// The contexts open on the node.
    pub(crate) fn users(&self) -> &Arc<Users> {
        &self.users
    }

    /// Finds the node of a misc registration.
    pub(crate) fn from_uverbs(misc: &MiscDeviceRegistration<Ucontext>) -> &Node {
        let field = core::ptr::from_ref(misc).cast_mut();
        // SAFETY: `Ucontext` registrations are created only by `Node::new`,
        // as the `uverbs` field of a pinned `Node`, so `field` points into a
        // `Node` allocation and stepping back to its start stays inside it.
        let node = unsafe { container_of!(field, Node, uverbs) };
        // SAFETY: `node` points at a live, pinned `Node`: it is alive at
        // least as long as its `uverbs` field, which `misc` borrows, and we
        // hand out only a shared reference with the same lifetime.
        unsafe { &*node }
    }
}

/// The device nodes of the module, removed in creation order on unload.
pub(crate) struct Nodes {
    _nodes: KVec<Pin<KBox<Node>>>,
}

impl Nodes {
    /// Creates and registers the nodes of instances `0..count`.
    pub(crate) fn new(count: usize) -> Result<Self> {
        let mut nodes = KVec::with_capacity(count, GFP_KERNEL)?;
        for index in 0..count {
            nodes.push(Node::new(index)?, GFP_KERNEL)?;
        }
        Ok(Self { _nodes: nodes })
    }
}

#[kunit_tests(rmlx5_uverbs_node)]
mod tests {
    use super::*;
    use kernel::str::CString;

    #[test]
    fn uverbs_names_follow_index() -> Result {
        for (i, name) in UVERBS_NAMES.iter().enumerate() {
            let want = CString::try_from_fmt(fmt!("rmlx5_uverbs{}", i))?;
            assert_eq!(name.to_bytes(), want.to_bytes());
        }
        Ok(())
    }
}
