// SPDX-License-Identifier: GPL-2.0

//! Receive WQEs: a scatter list of data pointer segments.
//!
//! Every receive WQE of an RQ occupies the same stride (a power of two of
//! at least 16 bytes). A WQE with fewer segments than the stride holds ends
//! with a terminator segment whose lkey is `MLX5_INVALID_LKEY` (0x100) and
//! whose length and address are zero. A WQE with no segments at all is
//! valid: it is just the terminator, and takes a zero-byte message (an RDMA
//! write with immediate, or a zero-length send).

use super::bytes::{at, at_mut};
use super::error::Error;
use super::wqe::{DataSeg, INVALID_LKEY};

/// Writes a receive WQE with the scatter list `segs` into the RQ slot
/// `slot`, followed by the terminator if the slot has room for more
/// segments. Bytes after the terminator are left as they were.
///
/// # Errors
///
/// [`Error::Misaligned`] if `slot` is not a multiple of 16 bytes;
/// [`Error::OutOfRange`] if `segs` does not fit in it.
pub fn write_recv_wqe(slot: &mut [u8], segs: &[DataSeg]) -> Result<(), Error> {
    if !slot.len().is_multiple_of(DataSeg::SIZE) {
        return Err(Error::Misaligned);
    }
    let capacity = slot.len() / DataSeg::SIZE;
    if segs.len() > capacity {
        return Err(Error::OutOfRange);
    }
    for (i, seg) in segs.iter().enumerate() {
        seg.encode(at_mut(slot, i * DataSeg::SIZE)?);
    }
    if segs.len() < capacity {
        DataSeg::TERMINATOR.encode(at_mut(slot, segs.len() * DataSeg::SIZE)?);
    }
    Ok(())
}

/// The scatter list of a receive WQE, read segment by segment up to the
/// terminator (the first segment whose lkey is `MLX5_INVALID_LKEY`) or the
/// end of the slot, whichever comes first.
#[derive(Clone, Debug)]
pub struct RecvSegs<'a> {
    slot: &'a [u8],
    next: usize,
}

impl<'a> RecvSegs<'a> {
    /// Starts reading the receive WQE in `slot`.
    ///
    /// # Errors
    ///
    /// [`Error::Misaligned`] if `slot` is not a multiple of 16 bytes.
    pub fn new(slot: &'a [u8]) -> Result<Self, Error> {
        if !slot.len().is_multiple_of(DataSeg::SIZE) {
            return Err(Error::Misaligned);
        }
        Ok(RecvSegs { slot, next: 0 })
    }
}

impl Iterator for RecvSegs<'_> {
    type Item = DataSeg;

    fn next(&mut self) -> Option<DataSeg> {
        let seg = DataSeg::decode(at(self.slot, self.next).ok()?);
        if seg.lkey == INVALID_LKEY {
            // Stay on the terminator so that the iterator remains fused.
            return None;
        }
        self.next += DataSeg::SIZE;
        Some(seg)
    }
}

impl core::iter::FusedIterator for RecvSegs<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(n: u8) -> DataSeg {
        DataSeg {
            byte_count: u32::from(n),
            lkey: 0x1000 + u32::from(n),
            addr: 0x10_0000 * u64::from(n),
        }
    }

    #[test]
    fn short_list_is_terminated() {
        let mut slot = [0xffu8; 64];
        write_recv_wqe(&mut slot, &[seg(1), seg(2)]).unwrap();
        assert_eq!(
            slot[32..48],
            [0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(slot[48], 0xff);
        let mut it = RecvSegs::new(&slot).unwrap();
        assert_eq!(it.next(), Some(seg(1)));
        assert_eq!(it.next(), Some(seg(2)));
        assert_eq!(it.next(), None);
        assert_eq!(it.next(), None);
    }

    #[test]
    fn full_list_has_no_terminator() {
        let mut slot = [0u8; 32];
        write_recv_wqe(&mut slot, &[seg(1), seg(2)]).unwrap();
        assert_eq!(RecvSegs::new(&slot).unwrap().count(), 2);
        assert_eq!(
            write_recv_wqe(&mut slot, &[seg(1), seg(2), seg(3)]),
            Err(Error::OutOfRange)
        );
    }

    #[test]
    fn zero_segment_receive() {
        let mut slot = [0xffu8; 16];
        write_recv_wqe(&mut slot, &[]).unwrap();
        assert_eq!(DataSeg::decode(&slot), DataSeg::TERMINATOR);
        assert_eq!(RecvSegs::new(&slot).unwrap().count(), 0);
        // A zero-size slot (an RQ with no scatter entries) is valid too.
        assert_eq!(write_recv_wqe(&mut [], &[]), Ok(()));
        assert_eq!(RecvSegs::new(&[]).unwrap().count(), 0);
    }

    #[test]
    fn misaligned_slot() {
        assert_eq!(write_recv_wqe(&mut [0u8; 24], &[]), Err(Error::Misaligned));
        assert!(RecvSegs::new(&[0u8; 8]).is_err());
    }
}
