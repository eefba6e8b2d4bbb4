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

/// The receive WQE of the scatter list `segs` for an RQ slot of `stride`
/// bytes, entry by entry as the 8-byte words [`write_recv_wqe`] would write:
/// an iterator of `(offset in the slot, the entry's two words)`, the data
/// pointer segments of `segs` ([`DataSeg::to_words`]), then the terminator
/// if the slot has room for more entries. For storing a WQE into the RQ word
/// by word instead of assembling it in a buffer; what follows the
/// terminator is left to the caller (the device stops there).
///
/// # Errors
///
/// [`Error::Misaligned`] if `stride` is not a multiple of 16 bytes;
/// [`Error::OutOfRange`] if `segs` has more entries than the slot holds.
/// `segs` is counted (on a clone) before anything is returned.
#[inline]
pub fn recv_wqe_words<I>(segs: I, stride: usize) -> Result<RecvWqeWords<I>, Error>
where
    I: Iterator<Item = DataSeg> + Clone,
{
    if !stride.is_multiple_of(DataSeg::SIZE) {
        return Err(Error::Misaligned);
    }
    if segs.clone().count() > stride / DataSeg::SIZE {
        return Err(Error::OutOfRange);
    }
    Ok(RecvWqeWords {
        segs,
        next: 0,
        left: stride / DataSeg::SIZE,
    })
}

/// The entries of a receive WQE as words: see [`recv_wqe_words`].
#[derive(Clone, Debug)]
pub struct RecvWqeWords<I> {
    segs: I,
    /// Offset in the slot of the next entry.
    next: usize,
    /// Entries the slot still has room for; 0 once the terminator was
    /// returned.
    left: usize,
}

impl<I: Iterator<Item = DataSeg>> Iterator for RecvWqeWords<I> {
    type Item = (usize, [[u8; 8]; 2]);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let at = self.next;
        // At most the slot's size: no wrap.
        self.next = at.wrapping_add(DataSeg::SIZE);
        let seg = self.segs.next().unwrap_or_else(|| {
            // The terminator, and nothing after it.
            self.left = 0;
            DataSeg::TERMINATOR
        });
        Some((at, seg.to_words()))
    }
}

impl<I: Iterator<Item = DataSeg>> core::iter::FusedIterator for RecvWqeWords<I> {}

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

    /// The slot [`recv_wqe_words`] lays out for `segs`, over `fill`.
    fn by_words(segs: &[DataSeg], stride: usize, fill: u8) -> Result<[u8; 64], Error> {
        let mut slot = [fill; 64];
        for (at, words) in recv_wqe_words(segs.iter().copied(), stride)? {
            slot[at..at + 8].copy_from_slice(&words[0]);
            slot[at + 8..at + 16].copy_from_slice(&words[1]);
        }
        Ok(slot)
    }

    #[test]
    fn words_match_the_writer() {
        let lists: [&[DataSeg]; 5] = [
            &[],
            &[seg(1)],
            &[seg(1), seg(2)],
            &[seg(1), seg(2), seg(3), seg(4)],
            &[seg(1), seg(2), seg(3), seg(4), seg(5)],
        ];
        for stride in [0, 16, 32, 64] {
            for list in lists {
                let mut want = [0x5au8; 64];
                let expect = write_recv_wqe(&mut want[..stride], list);
                let got = by_words(list, stride, 0x5a);
                assert_eq!(got.is_ok(), expect.is_ok(), "{} in {stride}", list.len());
                if let Ok(got) = got {
                    assert_eq!(got, want, "{} in {stride}", list.len());
                }
            }
        }
        assert_eq!(
            recv_wqe_words([seg(1)].into_iter(), 24).err(),
            Some(Error::Misaligned)
        );
        assert_eq!(
            recv_wqe_words([seg(1)].into_iter(), 0).err(),
            Some(Error::OutOfRange)
        );
        // Exactly the entries, and nothing after the terminator.
        let mut it = recv_wqe_words([seg(1)].into_iter(), 64).unwrap();
        assert_eq!(it.next().map(|e| e.0), Some(0));
        assert_eq!(it.next(), Some((16, DataSeg::TERMINATOR.to_words())));
        assert_eq!(it.next(), None);
        assert_eq!(it.next(), None);
    }

    #[test]
    fn misaligned_slot() {
        assert_eq!(write_recv_wqe(&mut [0u8; 24], &[]), Err(Error::Misaligned));
        assert!(RecvSegs::new(&[0u8; 8]).is_err());
    }
}
