// SPDX-License-Identifier: GPL-2.0

//! mmap offsets of `/dev/rmlx5_uverbsN`.
//!
//! Every mappable page range (the UAR page, a CQ buffer or doorbell
//! record, a QP buffer or doorbell record) has an offset the kernel hands
//! out when it creates the object: `kind << KIND_SHIFT | handle <<
//! PAGE_SHIFT`. User space passes it to `mmap()` unchanged; the kernel
//! decodes it, looks the handle up in the caller's own context, and checks
//! length and protection. Any other offset is refused with `EINVAL`.

/// log2 of the page size the offsets are built for (x86-64: 4 KiB).
pub const PAGE_SHIFT: u32 = 12;

/// Bit position of the kind field.
pub const KIND_SHIFT: u32 = 40;

/// Largest handle an offset can carry.
pub const MAX_HANDLE: u32 = (1 << (KIND_SHIFT - PAGE_SHIFT)) - 1;

/// What an mmap offset names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Kind {
    /// The context's UAR page (doorbells, BlueFlame); handle 0.
    Uar = 1,
    /// A CQ's ring of CQEs.
    CqBuf = 2,
    /// The page holding a CQ's doorbell record.
    CqDbr = 3,
    /// A QP's queue buffer (RQ then SQ).
    QpBuf = 4,
    /// The page holding a QP's doorbell record.
    QpDbr = 5,
}

impl Kind {
    fn from_raw(raw: u64) -> Option<Kind> {
        match raw {
            1 => Some(Kind::Uar),
            2 => Some(Kind::CqBuf),
            3 => Some(Kind::CqDbr),
            4 => Some(Kind::QpBuf),
            5 => Some(Kind::QpDbr),
            _ => None,
        }
    }
}

/// The mmap offset (in bytes) of object `handle`'s `kind` mapping, or
/// `None` if the handle does not fit.
pub const fn encode(kind: Kind, handle: u32) -> Option<u64> {
    if handle > MAX_HANDLE {
        return None;
    }
    Some(((kind as u64) << KIND_SHIFT) | ((handle as u64) << PAGE_SHIFT))
}

/// Splits an mmap offset in bytes; `None` for anything [`encode`] cannot
/// produce.
pub fn decode(offset: u64) -> Option<(Kind, u32)> {
    if offset & ((1 << PAGE_SHIFT) - 1) != 0 {
        return None;
    }
    let kind = Kind::from_raw(offset >> KIND_SHIFT)?;
    let handle = u32::try_from((offset >> PAGE_SHIFT) & u64::from(MAX_HANDLE)).ok()?;
    if kind == Kind::Uar && handle != 0 {
        return None;
    }
    Some((kind, handle))
}

/// [`decode`] for a `vm_pgoff` (offset in pages).
pub fn decode_pgoff(pgoff: u64) -> Option<(Kind, u32)> {
    decode(pgoff.checked_mul(1 << PAGE_SHIFT)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for kind in [Kind::CqBuf, Kind::CqDbr, Kind::QpBuf, Kind::QpDbr] {
            for handle in [0, 1, 77, MAX_HANDLE] {
                let off = encode(kind, handle).unwrap();
                assert_eq!(decode(off), Some((kind, handle)));
                assert_eq!(decode_pgoff(off >> PAGE_SHIFT), Some((kind, handle)));
            }
        }
        assert_eq!(decode(encode(Kind::Uar, 0).unwrap()), Some((Kind::Uar, 0)));
        assert_eq!(encode(Kind::QpBuf, MAX_HANDLE + 1), None);
    }

    #[test]
    fn rejects_everything_else() {
        assert_eq!(decode(0), None);
        assert_eq!(decode(encode(Kind::CqBuf, 3).unwrap() + 8), None);
        assert_eq!(decode(6 << KIND_SHIFT), None);
        assert_eq!(decode(encode(Kind::Uar, 1).unwrap()), None);
        assert_eq!(decode(!0xfff), None);
        assert_eq!(decode_pgoff(u64::MAX), None);
        // Arbitrary offsets never panic.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if let Some((kind, handle)) = decode(x) {
                assert_eq!(encode(kind, handle), Some(x));
            }
            let _ = decode_pgoff(x);
        }
    }
}
