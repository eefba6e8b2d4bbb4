// SPDX-License-Identifier: GPL-2.0

//! Memory regions, their keys and the access checks made on every data
//! buffer the model touches.
//!
//! # Keys
//!
//! As on mlx5, an MR's key is `index << 8 | variant`: bits 31:8 name the
//! slot of the MR table and bits 7:0 are the slot's variant, bumped every
//! time the slot is reused, so a key of a destroyed MR never matches its
//! successor. Variants run from 1 to 255 (never 0), so no key is 0 and none
//! is `MLX5_INVALID_LKEY` (0x100). The lkey and the rkey of an MR are the
//! same value, as on mlx5.
//!
//! # Translation
//!
//! An MR covers `length` bytes of I/O virtual address space from `iova`,
//! mapped linearly onto DMA addresses from `dma_addr`. The kernel, whose
//! pinned pages are not contiguous, gives each MR its own window of "DMA
//! addresses" and resolves them to pages in its [`super::mem::DmaMemory`].

use super::table::Slot;

/// Access rights of an MR (and of a QP's responder side), with the values of
/// `enum ib_access_flags`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Access(u8);

impl Access {
    /// No rights beyond local read (which every MR has).
    pub const NONE: Access = Access(0);
    /// The HCA may write the MR for local operations (receives, RDMA read
    /// responses, atomic results): `IB_ACCESS_LOCAL_WRITE`.
    pub const LOCAL_WRITE: Access = Access(1);
    /// Remote RDMA writes: `IB_ACCESS_REMOTE_WRITE`.
    pub const REMOTE_WRITE: Access = Access(2);
    /// Remote RDMA reads: `IB_ACCESS_REMOTE_READ`.
    pub const REMOTE_READ: Access = Access(4);
    /// Remote atomics: `IB_ACCESS_REMOTE_ATOMIC`.
    pub const REMOTE_ATOMIC: Access = Access(8);
    /// Every right the model knows.
    pub const ALL: Access = Access(0xf);

    /// Access rights from `IB_ACCESS_*` bits.
    ///
    /// Returns `None` if a bit outside [`Access::ALL`] is set.
    pub fn from_bits(bits: u32) -> Option<Access> {
        let b = u8::try_from(bits).ok()?;
        (b & !Access::ALL.0 == 0).then_some(Access(b))
    }

    /// The `IB_ACCESS_*` bits.
    pub fn bits(self) -> u32 {
        u32::from(self.0)
    }

    /// Whether every right in `other` is also in `self`.
    pub fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// The rights of both.
    pub fn union(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }
}

/// What the embedder asks for when it registers memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrAttr {
    /// PD the MR belongs to.
    pub pdn: u32,
    /// First I/O virtual address covered (what SGEs and RDMA addresses name).
    pub iova: u64,
    /// Bytes covered.
    pub length: u64,
    /// DMA address `iova` maps to.
    pub dma_addr: u64,
    /// Rights granted.
    pub access: Access,
}

/// A registered memory region.
#[derive(Clone, Copy, Debug)]
pub struct Mr {
    pub(super) attr: MrAttr,
    pub(super) key: u32,
}

impl Mr {
    /// The attributes the MR was created with.
    pub fn attr(&self) -> &MrAttr {
        &self.attr
    }

    /// The lkey (which is also the rkey).
    pub fn key(&self) -> u32 {
        self.key
    }
}

/// Why a key does not give access to a range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum KeyError {
    /// No MR has this key (never created, destroyed, or stale variant).
    BadKey,
    /// The MR belongs to another PD than the QP.
    PdMismatch,
    /// The range is not inside the MR.
    OutOfBounds,
    /// The MR lacks a right the operation needs.
    AccessDenied,
}

/// The slot index a key names.
pub(super) fn key_index(key: u32) -> u32 {
    key >> 8
}

/// Builds the key of slot `index` with variant `variant`.
pub(super) fn make_key(index: u32, variant: u8) -> Option<u32> {
    if index > 0xff_ffff {
        return None;
    }
    Some(index << 8 | u32::from(variant))
}

/// The variant following `v`, skipping 0.
pub(super) fn next_variant(v: u8) -> u8 {
    match v.wrapping_add(1) {
        0 => 1,
        n => n,
    }
}

/// Resolves `len` bytes at I/O virtual address `addr` through the MR named
/// by `key`, for a QP in PD `pdn`, requiring the rights in `need`. Returns
/// the DMA address of `addr`.
///
/// A zero-length range is checked like any other (the caller skips the
/// check where the IB spec says a zero-length transfer checks no key).
pub(super) fn resolve(
    mrs: &[Slot<Mr>],
    key: u32,
    pdn: u32,
    addr: u64,
    len: u64,
    need: Access,
) -> Result<u64, KeyError> {
    let slot = usize::try_from(key_index(key))
        .ok()
        .and_then(|i| mrs.get(i))
        .ok_or(KeyError::BadKey)?;
    let mr = match &slot.obj {
        Some(mr) if mr.key == key => mr,
        _ => return Err(KeyError::BadKey),
    };
    if mr.attr.pdn != pdn {
        return Err(KeyError::PdMismatch);
    }
    let offset = addr
        .checked_sub(mr.attr.iova)
        .ok_or(KeyError::OutOfBounds)?;
    let end = offset.checked_add(len).ok_or(KeyError::OutOfBounds)?;
    if end > mr.attr.length {
        return Err(KeyError::OutOfBounds);
    }
    if !mr.attr.access.contains(need) {
        return Err(KeyError::AccessDenied);
    }
    // Cannot overflow: creation checked that dma_addr + length fits.
    mr.attr
        .dma_addr
        .checked_add(offset)
        .ok_or(KeyError::OutOfBounds)
}

/// Checks the attributes of a new MR: the IB spec requires local write
/// access for remote write and remote atomic access, and the ranges must
/// not wrap around the address space.
pub(super) fn attr_valid(attr: &MrAttr) -> bool {
    let needs_local_write = Access::REMOTE_WRITE.union(Access::REMOTE_ATOMIC);
    let wants_remote_write = attr.access.0 & needs_local_write.0 != 0;
    if wants_remote_write && !attr.access.contains(Access::LOCAL_WRITE) {
        return false;
    }
    attr.iova.checked_add(attr.length).is_some() && attr.dma_addr.checked_add(attr.length).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> [Slot<Mr>; 4] {
        let mut t: [Slot<Mr>; 4] = core::array::from_fn(|_| Slot::new());
        t[2].variant = 7;
        t[2].obj = Some(Mr {
            attr: MrAttr {
                pdn: 1,
                iova: 0x1000,
                length: 0x100,
                dma_addr: 0x9000,
                access: Access::LOCAL_WRITE.union(Access::REMOTE_READ),
            },
            key: make_key(2, 7).unwrap(),
        });
        t
    }

    #[test]
    fn keys() {
        assert_eq!(make_key(2, 7), Some(0x207));
        assert_eq!(make_key(1 << 24, 1), None);
        assert_eq!(next_variant(255), 1);
        assert_eq!(next_variant(0), 1);
        assert_eq!(next_variant(3), 4);
    }

    #[test]
    fn resolve_checks_everything() {
        let t = table();
        let key = 0x207;
        assert_eq!(resolve(&t, key, 1, 0x1000, 0x100, Access::NONE), Ok(0x9000));
        assert_eq!(
            resolve(&t, key, 1, 0x10f8, 8, Access::LOCAL_WRITE),
            Ok(0x90f8)
        );
        assert_eq!(
            resolve(&t, key, 1, 0x1000, 0x101, Access::NONE),
            Err(KeyError::OutOfBounds)
        );
        assert_eq!(
            resolve(&t, key, 1, 0xfff, 1, Access::NONE),
            Err(KeyError::OutOfBounds)
        );
        assert_eq!(
            resolve(&t, key, 1, u64::MAX, 2, Access::NONE),
            Err(KeyError::OutOfBounds)
        );
        assert_eq!(
            resolve(&t, key, 2, 0x1000, 1, Access::NONE),
            Err(KeyError::PdMismatch)
        );
        assert_eq!(
            resolve(&t, 0x206, 1, 0x1000, 1, Access::NONE),
            Err(KeyError::BadKey)
        );
        assert_eq!(
            resolve(&t, 0x100, 1, 0x1000, 1, Access::NONE),
            Err(KeyError::BadKey)
        );
        assert_eq!(
            resolve(&t, u32::MAX, 1, 0x1000, 1, Access::NONE),
            Err(KeyError::BadKey)
        );
        assert_eq!(
            resolve(&t, key, 1, 0x1000, 1, Access::REMOTE_WRITE),
            Err(KeyError::AccessDenied)
        );
    }

    #[test]
    fn access_bits() {
        assert_eq!(Access::from_bits(0x10), None);
        assert_eq!(Access::from_bits(0x100), None);
        assert_eq!(
            Access::from_bits(3),
            Some(Access::LOCAL_WRITE.union(Access::REMOTE_WRITE))
        );
        let bad = MrAttr {
            pdn: 0,
            iova: 0,
            length: 1,
            dma_addr: 0,
            access: Access::REMOTE_WRITE,
        };
        assert!(!attr_valid(&bad));
        assert!(attr_valid(&MrAttr {
            access: Access::ALL,
            ..bad
        }));
        assert!(!attr_valid(&MrAttr {
            iova: u64::MAX,
            access: Access::NONE,
            ..bad
        }));
    }
}
