// SPDX-License-Identifier: GPL-2.0

//! Fixed-size views into byte buffers, and the big-endian field accessors
//! the layouts are built from.
//!
//! The layouts take `&[u8; N]` / `&mut [u8; N]`; [`at`] and [`at_mut`] cut
//! such an array out of a larger buffer (a queue, a mapped page) without
//! panicking when the buffer is too short.

use super::error::Error;

/// Returns the `N` bytes of `buf` starting at `offset` as an array.
///
/// # Errors
///
/// [`Error::OutOfRange`] if `offset + N` exceeds `buf.len()`.
pub fn at<const N: usize>(buf: &[u8], offset: usize) -> Result<&[u8; N], Error> {
    let end = offset.checked_add(N).ok_or(Error::OutOfRange)?;
    buf.get(offset..end)
        .and_then(|s| <&[u8; N]>::try_from(s).ok())
        .ok_or(Error::OutOfRange)
}

/// Returns the `N` bytes of `buf` starting at `offset` as a mutable array.
///
/// # Errors
///
/// [`Error::OutOfRange`] if `offset + N` exceeds `buf.len()`.
pub fn at_mut<const N: usize>(buf: &mut [u8], offset: usize) -> Result<&mut [u8; N], Error> {
    let end = offset.checked_add(N).ok_or(Error::OutOfRange)?;
    buf.get_mut(offset..end)
        .and_then(|s| <&mut [u8; N]>::try_from(s).ok())
        .ok_or(Error::OutOfRange)
}

// The accessors below are only called with constant offsets that lie inside
// the array, so their indexing cannot fail; `get` keeps them panic-free even
// if a caller got an offset wrong (the field then reads as zero and a write
// is dropped, which the conformance tests would catch).

/// Reads the big-endian `u16` at `off`.
pub(crate) fn get_u16<const N: usize>(b: &[u8; N], off: usize) -> u16 {
    let mut v = [0u8; 2];
    if let Some(s) = b.get(off..off.saturating_add(2)) {
        v.copy_from_slice(s);
    }
    u16::from_be_bytes(v)
}

/// Reads the big-endian `u32` at `off`.
pub(crate) fn get_u32<const N: usize>(b: &[u8; N], off: usize) -> u32 {
    let mut v = [0u8; 4];
    if let Some(s) = b.get(off..off.saturating_add(4)) {
        v.copy_from_slice(s);
    }
    u32::from_be_bytes(v)
}

/// Reads the big-endian `u64` at `off`.
pub(crate) fn get_u64<const N: usize>(b: &[u8; N], off: usize) -> u64 {
    let mut v = [0u8; 8];
    if let Some(s) = b.get(off..off.saturating_add(8)) {
        v.copy_from_slice(s);
    }
    u64::from_be_bytes(v)
}

/// Reads the byte at `off`.
pub(crate) fn get_u8<const N: usize>(b: &[u8; N], off: usize) -> u8 {
    b.get(off).copied().unwrap_or(0)
}

/// Writes `v` big-endian at `off`.
pub(crate) fn put_u16<const N: usize>(b: &mut [u8; N], off: usize, v: u16) {
    if let Some(s) = b.get_mut(off..off.saturating_add(2)) {
        s.copy_from_slice(&v.to_be_bytes());
    }
}

/// Writes `v` big-endian at `off`.
pub(crate) fn put_u32<const N: usize>(b: &mut [u8; N], off: usize, v: u32) {
    if let Some(s) = b.get_mut(off..off.saturating_add(4)) {
        s.copy_from_slice(&v.to_be_bytes());
    }
}

/// Writes `v` big-endian at `off`.
pub(crate) fn put_u64<const N: usize>(b: &mut [u8; N], off: usize, v: u64) {
    if let Some(s) = b.get_mut(off..off.saturating_add(8)) {
        s.copy_from_slice(&v.to_be_bytes());
    }
}

/// Writes the byte `v` at `off`.
pub(crate) fn put_u8<const N: usize>(b: &mut [u8; N], off: usize, v: u8) {
    if let Some(x) = b.get_mut(off) {
        *x = v;
    }
}

// The word forms below build and take apart layouts in whole 64-bit words
// held in registers, for the fast paths that store WQE segments to a queue
// or load CQEs from one a word at a time. Their callers pass constant
// offsets, so after inlining each is a single shift.

/// The 8 bytes, in memory order, of a word made of two big-endian `u32`s:
/// `hi` in bytes 0..4 and `lo` in bytes 4..8.
#[inline]
pub(crate) fn be_u32_pair(hi: u32, lo: u32) -> [u8; 8] {
    (u64::from(hi) << 32 | u64::from(lo)).to_be_bytes()
}

/// The right shift that brings the `len`-byte field at byte `off` of a
/// layout down to bit 0 of the big-endian 64-bit word (read with
/// `u64::from_be_bytes`) that starts at byte `start`. Only evaluated at
/// compile time (`const { .. }` in the accessors below), where a field that
/// does not lie wholly inside the word is an overflow, i.e. a build error,
/// never a panic at run time.
pub(crate) const fn word_shift(start: usize, off: usize, len: usize) -> u32 {
    // `off - start` fails to evaluate for a field starting before the word,
    // `8 - ...` for one ending after it.
    ((8 - (off - start) - len) * 8) as u32
}

/// The byte at `OFF` of a layout, from the big-endian word `word` that
/// starts at byte `START` of it.
#[inline]
pub(crate) fn word_u8<const START: usize, const OFF: usize>(word: u64) -> u8 {
    (word >> const { word_shift(START, OFF, 1) }) as u8
}

/// The big-endian `u16` at `OFF` of a layout, from the big-endian word
/// `word` that starts at byte `START` of it.
#[inline]
pub(crate) fn word_u16<const START: usize, const OFF: usize>(word: u64) -> u16 {
    (word >> const { word_shift(START, OFF, 2) }) as u16
}

/// The big-endian `u32` at `OFF` of a layout, from the big-endian word
/// `word` that starts at byte `START` of it.
#[inline]
pub(crate) fn word_u32<const START: usize, const OFF: usize>(word: u64) -> u32 {
    (word >> const { word_shift(START, OFF, 4) }) as u32
}

/// Word `index` (bytes `8 * index` on) of `b` as its 8 bytes; zeros past
/// the end.
#[inline]
pub(crate) fn word_at<const N: usize>(b: &[u8; N], index: usize) -> [u8; 8] {
    index
        .checked_mul(8)
        .and_then(|offset| at::<8>(b, offset).ok())
        .map_or([0; 8], |w| *w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_checks_bounds() {
        let buf = [1u8, 2, 3, 4, 5];
        assert_eq!(at::<4>(&buf, 1), Ok(&[2, 3, 4, 5]));
        assert_eq!(at::<4>(&buf, 2), Err(Error::OutOfRange));
        assert_eq!(at::<1>(&buf, usize::MAX), Err(Error::OutOfRange));
        let mut buf = [0u8; 8];
        at_mut::<2>(&mut buf, 6).unwrap().copy_from_slice(&[7, 8]);
        assert_eq!(buf[6..], [7, 8]);
        assert_eq!(at_mut::<2>(&mut buf, 7), Err(Error::OutOfRange));
    }

    #[test]
    fn big_endian_accessors() {
        let mut b = [0u8; 16];
        put_u16(&mut b, 0, 0x0102);
        put_u32(&mut b, 2, 0x0304_0506);
        put_u64(&mut b, 6, 0x0708_090a_0b0c_0d0e);
        put_u8(&mut b, 14, 0x0f);
        assert_eq!(b, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0]);
        assert_eq!(get_u16(&b, 0), 0x0102);
        assert_eq!(get_u32(&b, 2), 0x0304_0506);
        assert_eq!(get_u64(&b, 6), 0x0708_090a_0b0c_0d0e);
        assert_eq!(get_u8(&b, 14), 0x0f);
        // Out-of-range accesses read zero and write nothing.
        assert_eq!(get_u32(&b, 14), 0);
        put_u64(&mut b, 12, u64::MAX);
        assert_eq!(b[12..], [13, 14, 15, 0]);
    }

    #[test]
    fn word_accessors() {
        assert_eq!(
            be_u32_pair(0x0102_0304, 0x0506_0708),
            [1, 2, 3, 4, 5, 6, 7, 8]
        );
        // Bytes 16..24 of a layout.
        let w = u64::from_be_bytes([0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17]);
        assert_eq!(word_u8::<16, 16>(w), 0x10);
        assert_eq!(word_u8::<16, 23>(w), 0x17);
        assert_eq!(word_u16::<16, 22>(w), 0x1617);
        assert_eq!(word_u32::<16, 17>(w), 0x1112_1314);
        assert_eq!(word_u32::<16, 20>(w), 0x1415_1617);
        assert_eq!(word_shift(56, 63, 1), 0);
        assert_eq!(word_shift(56, 56, 4), 32);
        let b: [u8; 20] = core::array::from_fn(|i| i as u8);
        assert_eq!(word_at(&b, 1), [8, 9, 10, 11, 12, 13, 14, 15]);
        assert_eq!(word_at(&b, 2), [0; 8]);
        assert_eq!(word_at(&b, usize::MAX), [0; 8]);
    }
}
