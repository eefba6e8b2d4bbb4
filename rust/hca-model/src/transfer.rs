// SPDX-License-Identifier: GPL-2.0

//! Moving message data: lists of resolved buffer pieces and the copy loop
//! between them.
//!
//! Keys are resolved and checked before any byte moves, into `Pieces`
//! (DMA ranges, or inline bytes of the WQE), so the copy itself needs no
//! object table and never reaches memory outside a checked MR.

use super::mem::DmaMemory;

/// Most pieces one side of a transfer has: a 1008-byte WQE holds at most 62
/// data segments after its control and remote address segments, and a
/// receive WQE of the largest stride (1024 bytes) holds 64. An access
/// through a page-list key takes one piece per run of adjacent pages, so
/// this is also how scattered such an access may be: the software HCA's
/// keys are one range each (its user MRs are a `vmap`), and its fabric is
/// built on a kernel stack, so it keeps 64.
#[cfg(not(feature = "wide-scatter"))]
pub(super) const MAX_PIECES: usize = 64;

/// With `wide-scatter` (the emulated ConnectX, whose driver registers user
/// memory as scattered 4 KiB pages): 4096 runs, an access of 16 MiB over
/// pages none of which are adjacent, about 200 KiB of scratch in the
/// fabric.
#[cfg(feature = "wide-scatter")]
pub(super) const MAX_PIECES: usize = 4096;

/// Bytes moved per read/write pair.
const CHUNK: usize = 256;

/// One contiguous piece of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Piece {
    /// `len` bytes of DMA memory at `addr` (already checked against an MR).
    Dma { addr: u64, len: u64 },
    /// `len` bytes at offset `off` of the send WQE (inline data).
    Inline { off: usize, len: usize },
}

impl Piece {
    fn len(&self) -> u64 {
        match *self {
            Piece::Dma { len, .. } => len,
            Piece::Inline { len, .. } => len as u64,
        }
    }
}

/// An ordered list of pieces and their total length.
#[derive(Clone, Copy, Debug)]
pub(super) struct Pieces {
    n: usize,
    items: [Piece; MAX_PIECES],
    total: u64,
}

impl Pieces {
    /// No pieces.
    pub(super) const EMPTY: Pieces = Pieces {
        n: 0,
        items: [Piece::Dma { addr: 0, len: 0 }; MAX_PIECES],
        total: 0,
    };

    /// Empties the list (without touching its storage).
    pub(super) fn clear(&mut self) {
        self.n = 0;
        self.total = 0;
    }

    /// Whether the list has no piece.
    pub(super) fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Appends a piece. Returns `false` if the list is full or the total
    /// would overflow.
    pub(super) fn push(&mut self, piece: Piece) -> bool {
        let Some(total) = self.total.checked_add(piece.len()) else {
            return false;
        };
        let Some(slot) = self.items.get_mut(self.n) else {
            return false;
        };
        *slot = piece;
        self.n += 1;
        self.total = total;
        true
    }

    /// Total bytes.
    pub(super) fn total(&self) -> u64 {
        self.total
    }

    /// The DMA address of the first piece, if it is a DMA piece.
    pub(super) fn first_addr(&self) -> Option<u64> {
        match self.get(0)? {
            Piece::Dma { addr, .. } => Some(*addr),
            Piece::Inline { .. } => None,
        }
    }

    fn get(&self, i: usize) -> Option<&Piece> {
        self.items.get(..self.n)?.get(i)
    }
}

/// Which side of a copy could not be accessed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CopyFault {
    /// Reading the source failed.
    Source,
    /// Writing the destination failed.
    Destination,
}

/// A position in a [`Pieces`] list.
struct Cursor<'a> {
    pieces: &'a Pieces,
    index: usize,
    offset: u64,
}

impl Cursor<'_> {
    /// The current piece and the bytes left in it, skipping empty pieces.
    fn current(&mut self) -> Option<(Piece, u64)> {
        loop {
            let piece = *self.pieces.get(self.index)?;
            let left = piece.len().saturating_sub(self.offset);
            if left != 0 {
                return Some((piece, left));
            }
            self.index += 1;
            self.offset = 0;
        }
    }

    fn advance(&mut self, n: u64) {
        self.offset = self.offset.saturating_add(n);
    }

    /// Moves `n` bytes on, across pieces. Returns `false` if the list ends
    /// first. Each round either finishes or uses up a piece, so the loop is
    /// bounded by the number of pieces.
    fn skip(&mut self, mut n: u64) -> bool {
        while n != 0 {
            let Some((_, left)) = self.current() else {
                return false;
            };
            let step = n.min(left);
            self.advance(step);
            n -= step;
        }
        true
    }

    fn start(pieces: &Pieces) -> Cursor<'_> {
        Cursor {
            pieces,
            index: 0,
            offset: 0,
        }
    }
}

/// Copies `len` bytes from `src` (whose inline pieces index `inline`) to
/// the DMA pieces of `dst`. Both lists must hold at least `len` bytes; the
/// caller has checked that.
pub(super) fn copy<M: DmaMemory>(
    mem: &mut M,
    src: &Pieces,
    inline: &[u8],
    dst: &Pieces,
    len: u64,
) -> Result<(), CopyFault> {
    copy_at(mem, src, inline, dst, 0, len)
}

/// Writes `bytes` to the DMA pieces of `dst`, from byte `offset` of the
/// list on (a UD receive's network header, in front of the payload).
pub(super) fn write_at<M: DmaMemory>(
    mem: &mut M,
    dst: &Pieces,
    offset: u64,
    bytes: &[u8],
) -> Result<(), CopyFault> {
    let mut d = Cursor::start(dst);
    if !d.skip(offset) {
        return Err(CopyFault::Destination);
    }
    let mut rest = bytes;
    while !rest.is_empty() {
        let (piece, left) = d.current().ok_or(CopyFault::Destination)?;
        let n = usize::try_from(left).map_or(rest.len(), |l| l.min(rest.len()));
        let (chunk, tail) = rest.split_at(n);
        match piece {
            Piece::Dma { addr, .. } => mem
                .write(addr.wrapping_add(d.offset), chunk)
                .map_err(|_| CopyFault::Destination)?,
            Piece::Inline { .. } => return Err(CopyFault::Destination),
        }
        d.advance(n as u64);
        rest = tail;
    }
    Ok(())
}

/// As [`copy`], writing the data to `dst` from byte `dst_offset` of the
/// list on; `dst` must hold `dst_offset + len` bytes.
pub(super) fn copy_at<M: DmaMemory>(
    mem: &mut M,
    src: &Pieces,
    inline: &[u8],
    dst: &Pieces,
    dst_offset: u64,
    len: u64,
) -> Result<(), CopyFault> {
    let mut s = Cursor::start(src);
    let mut d = Cursor::start(dst);
    if !d.skip(dst_offset) {
        return Err(CopyFault::Destination);
    }
    let mut buf = [0u8; CHUNK];
    let mut left = len;
    while left != 0 {
        let (sp, s_left) = s.current().ok_or(CopyFault::Source)?;
        let (dp, d_left) = d.current().ok_or(CopyFault::Destination)?;
        let n = left.min(s_left).min(d_left).min(CHUNK as u64);
        // `n` is at most CHUNK, so it fits in usize.
        let chunk = buf.get_mut(..n as usize).ok_or(CopyFault::Source)?;
        match sp {
            Piece::Dma { addr, .. } => mem
                .read(addr.wrapping_add(s.offset), chunk)
                .map_err(|_| CopyFault::Source)?,
            Piece::Inline { off, .. } => {
                let start = off
                    .checked_add(s.offset as usize)
                    .ok_or(CopyFault::Source)?;
                let end = start.checked_add(chunk.len()).ok_or(CopyFault::Source)?;
                let bytes = inline.get(start..end).ok_or(CopyFault::Source)?;
                chunk.copy_from_slice(bytes);
            }
        }
        match dp {
            Piece::Dma { addr, .. } => mem
                .write(addr.wrapping_add(d.offset), chunk)
                .map_err(|_| CopyFault::Destination)?,
            Piece::Inline { .. } => return Err(CopyFault::Destination),
        }
        s.advance(n);
        d.advance(n);
        left -= n;
    }
    Ok(())
}

/// Working storage of the engine, kept in the fabric so that executing a
/// WQE neither allocates nor zeroes kilobytes of stack.
#[derive(Debug)]
pub struct Scratch {
    /// The send WQE being executed, copied out of the SQ.
    pub(super) wqe: [u8; super::prm::wqe::MAX_WQE_SIZE],
    /// The receive WQE being consumed.
    pub(super) recv: [u8; super::hca::MAX_RQ_STRIDE as usize],
    /// The requester's gather or scatter list.
    pub(super) local: Pieces,
    /// The responder's side of the transfer.
    pub(super) remote: Pieces,
}

impl Scratch {
    /// Empty scratch storage, as a constant: writing it into a fresh heap
    /// allocation copies it from read-only data, not through the stack.
    pub const EMPTY: Scratch = Scratch {
        wqe: [0; super::prm::wqe::MAX_WQE_SIZE],
        recv: [0; super::hca::MAX_RQ_STRIDE as usize],
        local: Pieces::EMPTY,
        remote: Pieces::EMPTY,
    };

    /// Empty scratch storage.
    pub const fn new() -> Self {
        Self::EMPTY
    }
}

impl Default for Scratch {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::super::mem::DmaFault;
    use super::*;

    /// 64 bytes of memory at address 0.
    struct Mem([u8; 64]);

    impl DmaMemory for Mem {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
            let a = usize::try_from(addr).map_err(|_| DmaFault)?;
            let src = self.0.get(a..a + buf.len()).ok_or(DmaFault)?;
            buf.copy_from_slice(src);
            Ok(())
        }
        fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), DmaFault> {
            let a = usize::try_from(addr).map_err(|_| DmaFault)?;
            let dst = self.0.get_mut(a..a + data.len()).ok_or(DmaFault)?;
            dst.copy_from_slice(data);
            Ok(())
        }
    }

    #[test]
    fn writes_and_copies_at_an_offset_across_pieces() {
        let mut m = Mem([0; 64]);
        // The destination: 3 bytes at 40, 0 at 50, 10 at 52.
        let mut dst = Pieces::EMPTY;
        for (addr, len) in [(40, 3), (50, 0), (52, 10)] {
            assert!(dst.push(Piece::Dma { addr, len }));
        }
        assert_eq!(write_at(&mut m, &dst, 2, &[1, 2, 3, 4]), Ok(()));
        assert_eq!(m.0[40..45], [0, 0, 1, 0, 0]);
        assert_eq!(m.0[52..56], [2, 3, 4, 0]);
        // Inline source bytes 7, 8, 9 copied after the first 6 bytes.
        let mut src = Pieces::EMPTY;
        assert!(src.push(Piece::Inline { off: 1, len: 3 }));
        assert_eq!(copy_at(&mut m, &src, &[0, 7, 8, 9], &dst, 6, 3), Ok(()));
        assert_eq!(m.0[52..59], [2, 3, 4, 7, 8, 9, 0]);
        // Past the end of the list.
        assert_eq!(
            write_at(&mut m, &dst, 13, &[1]),
            Err(CopyFault::Destination)
        );
        assert_eq!(
            copy_at(&mut m, &src, &[0, 7, 8, 9], &dst, 14, 1),
            Err(CopyFault::Destination)
        );
        assert_eq!(write_at(&mut m, &dst, 13, &[]), Ok(()));
    }
}
