// SPDX-License-Identifier: GPL-2.0

//! Reading and writing ABI structs as bytes, without `unsafe`.
//!
//! The kernel copies a command's argument in from user space as bytes and
//! copies the answer back as bytes; [`Wire`] turns those bytes into a struct
//! and back field by field, so no code needs to reinterpret memory, and a
//! struct written out never carries uninitialised padding (the structs have
//! none, and [`Wire::write`] zeroes the whole output first).

/// A value with a fixed wire size and native-endian encoding.
pub trait Wire: Sized {
    /// Bytes the value occupies.
    const SIZE: usize;

    /// Reads the value from the first [`Wire::SIZE`] bytes of `b`; `None`
    /// if `b` is shorter.
    fn read(b: &[u8]) -> Option<Self>;

    /// Writes the value into the first [`Wire::SIZE`] bytes of `out`;
    /// `None` if `out` is shorter.
    fn write(&self, out: &mut [u8]) -> Option<()>;
}

macro_rules! wire_int {
    ($($t:ty),*) => {$(
        impl Wire for $t {
            const SIZE: usize = core::mem::size_of::<$t>();

            fn read(b: &[u8]) -> Option<Self> {
                Some(<$t>::from_ne_bytes(b.get(..Self::SIZE)?.try_into().ok()?))
            }

            fn write(&self, out: &mut [u8]) -> Option<()> {
                out.get_mut(..Self::SIZE)?.copy_from_slice(&self.to_ne_bytes());
                Some(())
            }
        }
    )*};
}

wire_int!(u32, i32, u64);
