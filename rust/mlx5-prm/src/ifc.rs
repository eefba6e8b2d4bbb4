// SPDX-License-Identifier: GPL-2.0

//! Bit-addressed layouts in the style of `include/linux/mlx5/mlx5_ifc.h`.
//!
//! mlx5_ifc.h describes every firmware command and every context (QPC, CQC,
//! EQC, MKC, the HCA capabilities) as a struct of one-byte-per-bit arrays:
//! a field's bit offset is counted from the most significant bit of byte 0,
//! the buffer is a sequence of big-endian dwords, and the kernel reads and
//! writes fields with `MLX5_GET` / `MLX5_SET` (inside one dword) and
//! `MLX5_GET64` / `MLX5_SET64` (64-bit fields on a 64-bit boundary).
//!
//! [`get_bits`] and [`put_bits`] do the same for any field, in a byte slice,
//! without panicking: bytes outside the slice read as zero and are not
//! written. [`put_bits`] drops the bits of a value above the field's width,
//! as `MLX5_SET` does.
//!
//! Layout structs are declared with the crate-internal `ifc_layout!` macro,
//! which lists each field with its bit offset and width exactly as
//! mlx5_ifc.h has them (`log_sq_size: u8 = [0x51, 4]`), and derives the
//! encoder and decoder from that one list. Every such struct implements
//! [`Layout`]; `encode` writes all [`Layout::SIZE`] bytes (reserved bits
//! become zero) and `decode` reads every field it models and ignores the
//! rest.
//!
//! Page-address lists (`pas[][0x40]` at the end of CREATE_EQ, CREATE_CQ,
//! CREATE_QP, MANAGE_PAGES and, as MTT entries, CREATE_MKEY) are written by
//! [`put_pas`] and read back with [`pas`].

use super::error::Error;

/// The low `n` bits of a byte (`n` in 1..=8).
fn low_mask8(n: usize) -> u8 {
    (((1u16) << n.min(8)) - 1) as u8
}

/// Reads the field of `width` bits (at most 64) that starts `bit` bits into
/// `b`, counting from the most significant bit of `b[0]`, as an unsigned
/// big-endian number. Bytes beyond the end of `b` read as zero.
///
/// For a field inside one dword this is `MLX5_GET(typ, b, fld)`; for a
/// 64-bit field it is `MLX5_GET64`.
pub fn get_bits(b: &[u8], bit: usize, width: usize) -> u64 {
    let end = bit.saturating_add(width.min(64));
    let mut at = bit;
    let mut v = 0u64;
    while at < end {
        let skip = at % 8;
        let n = (8 - skip).min(end - at);
        let byte = b.get(at / 8).copied().unwrap_or(0);
        let chunk = (byte >> (8 - skip - n)) & low_mask8(n);
        v = (v << n) | u64::from(chunk);
        at += n;
    }
    v
}

/// Writes the low `width` bits (at most 64) of `v` into the field that
/// starts `bit` bits into `b` (see [`get_bits`]), leaving the bits around
/// it unchanged. Higher bits of `v` are dropped; bytes beyond the end of
/// `b` are not written.
///
/// For a field inside one dword this is `MLX5_SET(typ, b, fld, v)`; for a
/// 64-bit field it is `MLX5_SET64`.
pub fn put_bits(b: &mut [u8], bit: usize, width: usize, v: u64) {
    let end = bit.saturating_add(width.min(64));
    let mut at = bit;
    while at < end {
        let skip = at % 8;
        let n = (8 - skip).min(end - at);
        // Bits of `v` that go after this chunk; fewer than 64.
        let below = end - at - n;
        let chunk = ((v >> below) as u8) & low_mask8(n);
        let shift = 8 - skip - n;
        let mask = low_mask8(n) << shift;
        if let Some(x) = b.get_mut(at / 8) {
            *x = (*x & !mask) | (chunk << shift);
        }
        at += n;
    }
}

/// A value that sits in an mlx5_ifc field: an unsigned integer or flag, an
/// array of them (consecutive elements of the same width, like
/// `rgid_rip[16][0x8]`), or a nested layout (like `qpc` inside
/// `create_qp_in`).
pub trait IfcValue: Sized {
    /// Writes the value into `out` at bit offset `bit`; `width` is the
    /// field's width (an array element's width for arrays; ignored by
    /// nested layouts, which know their own fields).
    fn write_bits(&self, out: &mut [u8], bit: usize, width: usize);

    /// Reads the value from `b` at bit offset `bit` (see
    /// [`IfcValue::write_bits`]). Never fails: bits outside `b` read as zero.
    fn read_bits(b: &[u8], bit: usize, width: usize) -> Self;
}

impl IfcValue for bool {
    fn write_bits(&self, out: &mut [u8], bit: usize, width: usize) {
        put_bits(out, bit, width, u64::from(*self));
    }

    fn read_bits(b: &[u8], bit: usize, width: usize) -> Self {
        get_bits(b, bit, width) != 0
    }
}

macro_rules! unsigned_ifc_value {
    ($($ty:ty),*) => {
        $(
            impl IfcValue for $ty {
                fn write_bits(&self, out: &mut [u8], bit: usize, width: usize) {
                    put_bits(out, bit, width, u64::from(*self));
                }

                fn read_bits(b: &[u8], bit: usize, width: usize) -> Self {
                    get_bits(b, bit, width) as $ty
                }
            }
        )*
    };
}

unsigned_ifc_value!(u8, u16, u32, u64);

/// A signed count in a 32-bit field (`query_pages_out.num_pages`, where a
/// negative number asks the driver to take pages back).
impl IfcValue for i32 {
    fn write_bits(&self, out: &mut [u8], bit: usize, width: usize) {
        put_bits(out, bit, width, u64::from(*self as u32));
    }

    fn read_bits(b: &[u8], bit: usize, width: usize) -> Self {
        get_bits(b, bit, width) as u32 as i32
    }
}

impl<T: IfcValue + Copy + Default, const N: usize> IfcValue for [T; N] {
    fn write_bits(&self, out: &mut [u8], bit: usize, width: usize) {
        let mut at = bit;
        for x in self {
            x.write_bits(out, at, width);
            at = at.saturating_add(width);
        }
    }

    fn read_bits(b: &[u8], bit: usize, width: usize) -> Self {
        let mut a = [T::default(); N];
        let mut at = bit;
        for x in a.iter_mut() {
            *x = T::read_bits(b, at, width);
            at = at.saturating_add(width);
        }
        a
    }
}

/// A whole mlx5_ifc layout: a command input or output, or a context.
pub trait Layout: Sized {
    /// The mlx5_ifc struct this is (`create_qp_in` for
    /// `struct mlx5_ifc_create_qp_in_bits`), for log messages and tests.
    const NAME: &'static str;
    /// Size in bytes: `MLX5_ST_SZ_BYTES(NAME)`. A trailing page-address
    /// list, where the layout has one, is not included (as in the kernel);
    /// nor is the trailing union of `query_qp_out` (QPC extension or page
    /// list), which `cmd_qp::QueryQpOut` stops before.
    const SIZE: usize;

    /// Writes the layout into the first [`Layout::SIZE`] bytes of `out`,
    /// every one of them: reserved bits and unmodelled fields become zero,
    /// and a command input's `opcode` is set to its command's.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] if `out` is shorter than [`Layout::SIZE`].
    fn encode(&self, out: &mut [u8]) -> Result<(), Error>;

    /// Reads the layout from the first [`Layout::SIZE`] bytes of `b`. Bits
    /// the layout does not model are ignored; a command input's `opcode` and
    /// an output's `status` and `syndrome` are not checked here (see
    /// `command::InHeader` and `command::check`).
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] if `b` is shorter than [`Layout::SIZE`].
    fn decode(b: &[u8]) -> Result<Self, Error>;
}

/// Declares an mlx5_ifc layout struct: its fields with their bit offsets
/// and widths as mlx5_ifc.h has them, and its [`IfcValue`] and [`Layout`]
/// implementations. With `opcode`, the layout is a command input whose
/// `opcode` field (bits 0x0..0x10) `encode` sets.
macro_rules! ifc_layout {
    (
        $(#[$meta:meta])*
        pub struct $name:ident = $ifc:literal, bits $bits:literal $(, opcode $op:ident)? {
            $(
                $(#[$fmeta:meta])*
                $field:ident: $ty:ty = [$bit:literal, $width:literal],
            )*
        }
    ) => {
        $(#[$meta])*
        ///
        #[doc = concat!(
            "Layout: `struct mlx5_ifc_", $ifc, "_bits`, ",
            stringify!($bits), " bits."
        )]
        $(
            #[doc = concat!(
                "A command input: `encode` sets its `opcode` to `", stringify!($op), "`."
            )]
        )?
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct $name {
            $(
                $(#[$fmeta])*
                ///
                #[doc = concat!(
                    "`", $ifc, ".", stringify!($field), "`: bit offset ",
                    stringify!($bit), ", width ", stringify!($width), "."
                )]
                pub $field: $ty,
            )*
        }

        impl super::ifc::IfcValue for $name {
            fn write_bits(&self, out: &mut [u8], bit: usize, _width: usize) {
                let _ = (&out, bit);
                $(
                    super::ifc::IfcValue::write_bits(
                        &self.$field,
                        out,
                        bit.saturating_add($bit),
                        $width,
                    );
                )*
            }

            fn read_bits(b: &[u8], bit: usize, _width: usize) -> Self {
                let _ = (b, bit);
                $name {
                    $(
                        $field: super::ifc::IfcValue::read_bits(
                            b,
                            bit.saturating_add($bit),
                            $width,
                        ),
                    )*
                }
            }
        }

        impl super::ifc::Layout for $name {
            const NAME: &'static str = $ifc;
            const SIZE: usize = $bits / 8;

            fn encode(&self, out: &mut [u8]) -> Result<(), super::error::Error> {
                let out = out
                    .get_mut(..Self::SIZE)
                    .ok_or(super::error::Error::OutOfRange)?;
                out.fill(0);
                $( super::ifc::put_bits(out, 0, 16, u64::from($op)); )?
                super::ifc::IfcValue::write_bits(self, out, 0, $bits);
                Ok(())
            }

            fn decode(b: &[u8]) -> Result<Self, super::error::Error> {
                let b = b.get(..Self::SIZE).ok_or(super::error::Error::OutOfRange)?;
                Ok(<Self as super::ifc::IfcValue>::read_bits(b, 0, $bits))
            }
        }
    };
}

pub(crate) use ifc_layout;

/// Size of one page-address list entry (`pas[0]`, a 64-bit address).
pub const PAS_ENTRY_SIZE: usize = 8;

/// Writes `pas` as big-endian 64-bit entries starting at byte `offset` of
/// `out` (the `pas` array of a command input, `MLX5_ARRAY_SET64(..., pas,
/// i, addr)`), and returns the offset just past the last entry: the
/// command's input length.
///
/// # Errors
///
/// [`Error::OutOfRange`] if the entries do not fit in `out`; nothing is
/// written then.
pub fn put_pas(out: &mut [u8], offset: usize, pas: &[u64]) -> Result<usize, Error> {
    let len = pas
        .len()
        .checked_mul(PAS_ENTRY_SIZE)
        .ok_or(Error::OutOfRange)?;
    let end = offset.checked_add(len).ok_or(Error::OutOfRange)?;
    let dst = out.get_mut(offset..end).ok_or(Error::OutOfRange)?;
    // Indexed rather than `chunks_exact_mut(..).zip(..)`: that zip's
    // specialised size hint ends in a panic call objtool cannot see
    // through in the kernel build ("falls through to next function").
    let mut at = 0;
    for addr in pas {
        if let Some(chunk) = dst.get_mut(at..at + PAS_ENTRY_SIZE) {
            chunk.copy_from_slice(&addr.to_be_bytes());
        }
        at += PAS_ENTRY_SIZE;
    }
    Ok(end)
}

/// The page addresses of a `pas` array: `count` big-endian 64-bit entries
/// from byte `offset` of `b`.
///
/// # Errors
///
/// [`Error::OutOfRange`] if `b` does not hold `count` entries there.
pub fn pas(b: &[u8], offset: usize, count: usize) -> Result<Pas<'_>, Error> {
    let len = count.checked_mul(PAS_ENTRY_SIZE).ok_or(Error::OutOfRange)?;
    let end = offset.checked_add(len).ok_or(Error::OutOfRange)?;
    let raw = b.get(offset..end).ok_or(Error::OutOfRange)?;
    Ok(Pas { raw })
}

/// An iterator over the entries of a page-address list (see [`pas`]).
#[derive(Clone, Debug)]
pub struct Pas<'a> {
    raw: &'a [u8],
}

impl Iterator for Pas<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        let (head, rest) = self.raw.split_first_chunk::<PAS_ENTRY_SIZE>()?;
        self.raw = rest;
        Some(u64::from_be_bytes(*head))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.raw.len() / PAS_ENTRY_SIZE;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Pas<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_follow_mlx5_set() {
        // MLX5_SET(qpc, b, log_sq_size, 0xf): bits 0x51..0x55 are bits
        // 14:11 of the big-endian dword at byte 8.
        let mut b = [0u8; 16];
        put_bits(&mut b, 0x51, 4, 0xff);
        assert_eq!(b[8..12], [0, 0, 0x78, 0]);
        assert_eq!(get_bits(&b, 0x51, 4), 0xf);
        assert_eq!(get_bits(&b, 0x50, 1), 0);
        // A 24-bit number in the low bits of a dword.
        put_bits(&mut b, 0x8, 24, 0xab_cdef);
        assert_eq!(b[..4], [0, 0xab, 0xcd, 0xef]);
        // A 64-bit field, big-endian.
        let mut q = [0u8; 8];
        put_bits(&mut q, 0, 64, 0x0102_0304_0506_0708);
        assert_eq!(q, [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(get_bits(&q, 0, 64), 0x0102_0304_0506_0708);
        // Neighbours are left alone.
        let mut c = [0xffu8; 4];
        put_bits(&mut c, 0x3, 5, 0);
        assert_eq!(c, [0xe0, 0xff, 0xff, 0xff]);
    }

    #[test]
    fn out_of_range_reads_zero_and_writes_nothing() {
        let mut b = [0u8; 2];
        put_bits(&mut b, 12, 8, 0xff);
        assert_eq!(b, [0, 0x0f]);
        assert_eq!(get_bits(&b, 12, 8), 0xf0);
        assert_eq!(get_bits(&b, usize::MAX, 64), 0);
        put_bits(&mut b, usize::MAX - 3, 64, u64::MAX);
        assert_eq!(b, [0, 0x0f]);
        assert_eq!(get_bits(&[], 0, 64), 0);
    }

    #[test]
    fn page_address_lists() {
        let mut b = [0u8; 32];
        assert_eq!(put_pas(&mut b, 8, &[0x1000, 0x2_0000_3000]), Ok(24));
        assert_eq!(
            b[8..24],
            [0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 2, 0, 0, 0x30, 0]
        );
        let v: [u64; 2] = {
            let mut it = pas(&b, 8, 2).unwrap();
            [it.next().unwrap(), it.next().unwrap()]
        };
        assert_eq!(v, [0x1000, 0x2_0000_3000]);
        assert_eq!(pas(&b, 8, 2).unwrap().len(), 2);
        assert_eq!(put_pas(&mut b, 24, &[1, 2]), Err(Error::OutOfRange));
        assert!(pas(&b, 24, 2).is_err());
        assert!(pas(&b, usize::MAX, 1).is_err());
        assert_eq!(pas(&b, 0, 0).unwrap().count(), 0);
    }
}
