// SPDX-License-Identifier: GPL-2.0

//! The send queue buffer as a ring of WQEBBs: wrapping copies, inline
//! payloads and reading a whole WQE back out.
//!
//! A WQE starts at a WQEBB boundary and may run past the end of the SQ
//! buffer; its remaining WQEBBs then continue at the start of the buffer.
//! Segments are 16-byte aligned and never straddle the end, but an inline
//! payload may: it continues at offset 0 exactly where the buffer ends.
//! The ring is given as a byte slice of a non-zero power-of-two number of
//! WQEBBs and positions are byte offsets into it.

use super::bytes::at;
use super::error::Error;
use super::wqe::{CtrlSeg, InlineHeader, DS_SIZE, MAX_WQE_SIZE, WQEBB_SIZE};

/// Checks that `ring` is a non-zero power-of-two number of WQEBBs and that
/// `offset` lies inside it.
fn check(ring_len: usize, offset: usize) -> Result<(), Error> {
    if ring_len < WQEBB_SIZE || !ring_len.is_power_of_two() {
        return Err(Error::BadRingSize);
    }
    if offset >= ring_len {
        return Err(Error::OutOfRange);
    }
    Ok(())
}

/// Copies `bytes` into `ring` starting at `offset`, continuing at offset 0
/// when the end of the ring is reached.
///
/// # Errors
///
/// [`Error::BadRingSize`] if the ring is not a power-of-two number of
/// WQEBBs; [`Error::OutOfRange`] if `offset` is outside the ring or `bytes`
/// is longer than the ring.
pub fn ring_write(ring: &mut [u8], offset: usize, bytes: &[u8]) -> Result<(), Error> {
    check(ring.len(), offset)?;
    if bytes.len() > ring.len() {
        return Err(Error::OutOfRange);
    }
    let first = bytes.len().min(ring.len() - offset);
    let (head, tail) = bytes.split_at(first);
    ring[offset..offset + first].copy_from_slice(head);
    ring[..tail.len()].copy_from_slice(tail);
    Ok(())
}

/// Fills `out` from `ring` starting at `offset`, continuing at offset 0 when
/// the end of the ring is reached.
///
/// # Errors
///
/// As for [`ring_write`], with `out` in place of `bytes`.
pub fn ring_read(ring: &[u8], offset: usize, out: &mut [u8]) -> Result<(), Error> {
    check(ring.len(), offset)?;
    if out.len() > ring.len() {
        return Err(Error::OutOfRange);
    }
    let first = out.len().min(ring.len() - offset);
    let (head, tail) = out.split_at_mut(first);
    head.copy_from_slice(&ring[offset..offset + first]);
    let tail_len = tail.len();
    tail.copy_from_slice(&ring[..tail_len]);
    Ok(())
}

/// Writes an inline data segment (`mlx5_wqe_inl_data_seg` header with
/// `MLX5_INLINE_SEG`, then `payload`, then zero padding to a multiple of 16
/// bytes) into the SQ `ring` at `offset`, wrapping at the end of the ring.
/// Returns the segment's size in bytes, a multiple of 16 (divide by
/// [`DS_SIZE`] for its share of the DS count).
///
/// # Errors
///
/// [`Error::BadRingSize`] as for [`ring_write`]; [`Error::Misaligned`] if
/// `offset` is not 16-byte aligned; [`Error::OutOfRange`] if `offset` is
/// outside the ring, or the segment would be larger than a whole WQE
/// (`MLX5_SEND_WQE_MAX_SIZE`) or than the ring.
pub fn write_inline(ring: &mut [u8], offset: usize, payload: &[u8]) -> Result<usize, Error> {
    check(ring.len(), offset)?;
    if !offset.is_multiple_of(DS_SIZE) {
        return Err(Error::Misaligned);
    }
    let size = super::wqe::inline_seg_size(payload.len());
    if size > MAX_WQE_SIZE || size > ring.len() {
        return Err(Error::OutOfRange);
    }
    let byte_count = u32::try_from(payload.len()).map_err(|_| Error::OutOfRange)?;
    let mut header = [0u8; InlineHeader::SIZE];
    InlineHeader { byte_count }.encode(&mut header);
    // Cannot wrap: the header sits at a 16-byte boundary.
    ring_write(ring, offset, &header)?;
    let mask = ring.len() - 1;
    let payload_at = (offset + InlineHeader::SIZE) & mask;
    ring_write(ring, payload_at, payload)?;
    let pad_at = (payload_at + payload.len()) & mask;
    // `size` covers header and payload (see inline_seg_size), so the
    // padding is under 16 bytes; the saturating forms just keep the
    // arithmetic free of overflow checks.
    let pad_len = size.saturating_sub(payload.len().saturating_add(InlineHeader::SIZE));
    let pad = [0u8; DS_SIZE];
    ring_write(ring, pad_at, pad.get(..pad_len).ok_or(Error::OutOfRange)?)?;
    Ok(size)
}

/// Copies the WQE that starts at `offset` of the SQ `ring` into `out` as one
/// contiguous block, following it across the end of the ring, and returns
/// its length in bytes (16 times the DS count in its control segment). The
/// control segment itself is not otherwise validated: decode it with
/// [`CtrlSeg::decode`] from the first 16 bytes of `out`.
///
/// # Errors
///
/// [`Error::BadRingSize`] as for [`ring_write`]; [`Error::Misaligned`] if
/// `offset` is not at a WQEBB boundary; [`Error::OutOfRange`] if `offset`
/// is outside the ring or the WQE is longer than the ring;
/// [`Error::BadDsCount`] if the DS count is zero.
pub fn read_wqe(ring: &[u8], offset: usize, out: &mut [u8; MAX_WQE_SIZE]) -> Result<usize, Error> {
    check(ring.len(), offset)?;
    if !offset.is_multiple_of(WQEBB_SIZE) {
        return Err(Error::Misaligned);
    }
    let ctrl: &[u8; CtrlSeg::SIZE] = at(ring, offset)?;
    let ds = usize::from(CtrlSeg::ds_of(ctrl));
    if ds == 0 {
        return Err(Error::BadDsCount);
    }
    let len = ds * DS_SIZE;
    ring_read(ring, offset, &mut out[..len])?;
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_checks() {
        let mut small = [0u8; 32];
        assert_eq!(ring_write(&mut small, 0, &[1]), Err(Error::BadRingSize));
        let mut odd = [0u8; 192];
        assert_eq!(ring_write(&mut odd, 0, &[1]), Err(Error::BadRingSize));
        let mut ring = [0u8; 128];
        assert_eq!(ring_write(&mut ring, 128, &[1]), Err(Error::OutOfRange));
        assert_eq!(ring_write(&mut ring, 0, &[0; 129]), Err(Error::OutOfRange));
        assert_eq!(ring_write(&mut ring, 0, &[0; 128]), Ok(()));
    }

    #[test]
    fn wrapping_copy() {
        let mut ring = [0u8; 64];
        ring_write(&mut ring, 60, &[1, 2, 3, 4, 5, 6]).unwrap();
        assert_eq!(ring[60..], [1, 2, 3, 4]);
        assert_eq!(ring[..2], [5, 6]);
        let mut out = [0u8; 6];
        ring_read(&ring, 60, &mut out).unwrap();
        assert_eq!(out, [1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn inline_wraps_and_pads() {
        let mut ring = [0xeeu8; 128];
        // Header at 112, payload 112+4..128 then 0..9, padding 9..16.
        let payload: [u8; 21] = core::array::from_fn(|i| i as u8 + 1);
        assert_eq!(write_inline(&mut ring, 112, &payload), Ok(32));
        assert_eq!(ring[112..116], [0x80, 0, 0, 21]);
        assert_eq!(ring[116..128], payload[..12]);
        assert_eq!(ring[..9], payload[12..]);
        assert_eq!(ring[9..16], [0; 7]);
        assert_eq!(ring[16], 0xee);
        assert_eq!(write_inline(&mut ring, 8, &payload), Err(Error::Misaligned));
        assert_eq!(
            write_inline(&mut ring, 0, &[0; 125]),
            Err(Error::OutOfRange)
        );
        assert_eq!(write_inline(&mut ring, 0, &[]), Ok(16));
        assert_eq!(
            ring[..16],
            [0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn read_wqe_follows_wrap() {
        let mut ring = [0u8; 256];
        // A 5-DS WQE in the last WQEBB continues at offset 0.
        ring[192 + 7] = 5;
        ring[255] = 0xaa;
        ring[0] = 0xbb;
        ring[15] = 0xcc;
        let mut out = [0u8; MAX_WQE_SIZE];
        assert_eq!(read_wqe(&ring, 192, &mut out), Ok(80));
        assert_eq!(out[63], 0xaa);
        assert_eq!(out[64], 0xbb);
        assert_eq!(out[79], 0xcc);
        assert_eq!(read_wqe(&ring, 16, &mut out), Err(Error::Misaligned));
        assert_eq!(read_wqe(&ring, 0, &mut out), Err(Error::BadDsCount));
        let mut one = [0u8; 64];
        one[7] = 5;
        assert_eq!(read_wqe(&one, 0, &mut out), Err(Error::OutOfRange));
    }
}
