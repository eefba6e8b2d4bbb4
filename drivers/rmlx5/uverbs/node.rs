// SPDX-License-Identifier: GPL-2.0

//! The user-space device nodes `/dev/rmlx5_uverbs<n>`, one per software
//! HCA instance (the verbs ABI reaches only those: see
//! `Documentation/pci.md` for what a PCI function offers).
//!
//! The set of nodes lives as long as the module; open files pin the module
//! (the misc file operations carry `THIS_MODULE` as owner), so a node
//! always outlives the files opened on it.

use kernel::{
    container_of,
    miscdevice::{
        MiscDeviceOptions,
        MiscDeviceRegistration, //
    },
    prelude::*,
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

/// The device node of one software HCA instance.
#[pin_data]
pub(crate) struct Node {
    /// Instance number `n` of `rmlx5_<n>`.
    index: u32,
    /// `/dev/rmlx5_uverbs<n>`. Every `MiscDeviceRegistration<Ucontext>` in
    /// the module is this field of a pinned `Node` (see [`Node::from_uverbs`]).
    #[pin]
    uverbs: MiscDeviceRegistration<Ucontext>,
}

impl Node {
    fn new(index: usize) -> Result<Pin<KBox<Self>>> {
        let name = UVERBS_NAMES.get(index).ok_or(EINVAL)?;
        let index = u32::try_from(index)?;
        KBox::try_pin_init(
            // Fields are initialised in the order written: `index` is set
            // before the device node appears, so a racing open() sees it.
            try_pin_init!(Self {
                index,
                uverbs <- MiscDeviceRegistration::register(MiscDeviceOptions { name }),
            }),
            GFP_KERNEL,
        )
    }

    /// Instance number `n` of `rmlx5_<n>`.
    pub(crate) fn index(&self) -> u32 {
        self.index
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
