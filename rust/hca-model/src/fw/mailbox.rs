// SPDX-License-Identifier: GPL-2.0

//! The device's side of a command queue entry and its mailbox chains:
//! checking the entry, walking and checking the chains, reading the input
//! and writing the output through them.
//!
//! Nothing is buffered beyond one mailbox block: the input is read where it
//! lies (the inline 16 bytes, then block after block by following `next`),
//! and the output is written as it is produced, one block at a time. Both
//! chains are walked and checked before the command runs (pointer
//! alignment, `token`, `block_num`, enough blocks for `inlen` / `outlen`,
//! input signatures while command checksums are on), so a bad chain
//! becomes a delivery status and the command has no effect. A chain that
//! changes while the device owns it is caught again when it is followed.

use super::super::mem::DmaMemory;
use super::super::prm::cmd_queue::{
    block_signature_ok, layout_signature_ok, mailbox_count, sign_block, CmdLayout, MailboxHeader,
    CMD_LAYOUT_SIZE, INLINE_SIZE, MAILBOX_ALIGN, MAILBOX_DATA_SIZE, MAILBOX_SIZE, PCI_CMD_XPORT,
};
use super::reject::Reject;

/// The longest input or output the device accepts: 16 bytes inline and
/// 2048 mailbox blocks (a MANAGE_PAGES of 131,070 pages).
pub const MAX_MSG_LEN: usize = INLINE_SIZE + 2048 * MAILBOX_DATA_SIZE;
/// The shortest output: `status` and `syndrome`.
const MIN_OUT_LEN: usize = 8;

/// Which chain a mailbox belongs to (they report different errors).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    In,
    Out,
}

impl Dir {
    fn align(self) -> Reject {
        match self {
            Dir::In => Reject::InPtrAlign,
            Dir::Out => Reject::OutPtrAlign,
        }
    }

    fn short(self) -> Reject {
        match self {
            Dir::In => Reject::InChainShort,
            Dir::Out => Reject::OutChainShort,
        }
    }

    fn token(self) -> Reject {
        match self {
            Dir::In => Reject::InToken,
            Dir::Out => Reject::OutToken,
        }
    }

    fn block_num(self) -> Reject {
        match self {
            Dir::In => Reject::InBlockNum,
            Dir::Out => Reject::OutBlockNum,
        }
    }
}

/// Checks a queue entry as the device reads it. `check_signature` covers
/// the entry's own `sig` (mlx5_core always sets it).
///
/// # Errors
///
/// The delivery-level [`Reject`] for the first problem found.
pub(super) fn check_entry(
    b: &[u8; CMD_LAYOUT_SIZE],
    check_signature: bool,
) -> Result<CmdLayout, Reject> {
    let e = CmdLayout::decode(b);
    if e.cmd_type != PCI_CMD_XPORT {
        return Err(Reject::BadEntryType);
    }
    if check_signature && !layout_signature_ok(b) {
        return Err(Reject::BadEntrySignature);
    }
    // Bytes 1..4 (`rsvd0`) and 62 (`rsvd1`).
    if b[1..4] != [0, 0, 0] || b[62] != 0 {
        return Err(Reject::EntryReservedSet);
    }
    let inlen = e.inlen as usize;
    if !(INLINE_SIZE..=MAX_MSG_LEN).contains(&inlen) {
        return Err(Reject::BadInputLength);
    }
    let outlen = e.outlen as usize;
    if !(MIN_OUT_LEN..=MAX_MSG_LEN).contains(&outlen) {
        return Err(Reject::BadOutputLength);
    }
    Ok(e)
}

/// Reads mailbox block `addr`, checking its alignment, token and number.
fn read_block<M: DmaMemory>(
    mem: &mut M,
    dir: Dir,
    addr: u64,
    token: u8,
    num: usize,
    block: &mut [u8; MAILBOX_SIZE],
) -> Result<MailboxHeader, Reject> {
    if addr == 0 {
        return Err(dir.short());
    }
    if addr & (MAILBOX_ALIGN as u64 - 1) != 0 {
        return Err(dir.align());
    }
    mem.read(addr, block).map_err(|_| Reject::MailboxFault)?;
    let h = MailboxHeader::decode(block);
    if h.token != token {
        return Err(dir.token());
    }
    if h.block_num as usize != num {
        return Err(dir.block_num());
    }
    Ok(h)
}

/// Walks the chain from `first` over the blocks a message of `len` bytes
/// needs, checking every block (and, for an input with `checksums`, its
/// signatures). Blocks past the last one needed are not looked at: a
/// driver may hand over a longer chain than the message needs.
fn check_chain<M: DmaMemory>(
    mem: &mut M,
    dir: Dir,
    first: u64,
    len: usize,
    token: u8,
    checksums: bool,
) -> Result<(), Reject> {
    let mut block = [0u8; MAILBOX_SIZE];
    let mut addr = first;
    for num in 0..mailbox_count(len) {
        let h = read_block(mem, dir, addr, token, num, &mut block)?;
        if dir == Dir::In && checksums && !block_signature_ok(&block) {
            return Err(Reject::InBlockSignature);
        }
        addr = h.next;
    }
    Ok(())
}

/// Checks both chains of entry `e`.
///
/// # Errors
///
/// The delivery-level [`Reject`] of the first bad block.
pub(super) fn check_chains<M: DmaMemory>(
    mem: &mut M,
    e: &CmdLayout,
    checksums: bool,
) -> Result<(), Reject> {
    check_chain(mem, Dir::In, e.in_ptr, e.inlen as usize, e.token, checksums)?;
    check_chain(mem, Dir::Out, e.out_ptr, e.outlen as usize, e.token, false)
}

/// The block of a message that holds byte `offset` (at least 16), and the
/// offset within its data.
fn block_of(offset: usize) -> (usize, usize) {
    let rel = offset.saturating_sub(INLINE_SIZE);
    (rel / MAILBOX_DATA_SIZE, rel % MAILBOX_DATA_SIZE)
}

/// Follows a chain block by block; goes back to the start to move
/// backwards.
#[derive(Clone, Copy, Debug)]
struct Cursor {
    dir: Dir,
    first: u64,
    token: u8,
    num: usize,
    addr: u64,
}

impl Cursor {
    fn new(dir: Dir, first: u64, token: u8) -> Self {
        Cursor {
            dir,
            first,
            token,
            num: 0,
            addr: first,
        }
    }

    /// Moves to block `num` and returns its address.
    fn seek<M: DmaMemory>(&mut self, mem: &mut M, num: usize) -> Result<u64, Reject> {
        if num < self.num {
            self.num = 0;
            self.addr = self.first;
        }
        let mut block = [0u8; MAILBOX_SIZE];
        while self.num < num {
            let h = read_block(mem, self.dir, self.addr, self.token, self.num, &mut block)?;
            self.addr = h.next;
            self.num += 1;
        }
        Ok(self.addr)
    }
}

/// A command's input, read where it lies.
#[derive(Clone, Copy, Debug)]
pub(super) struct Input {
    inline: [u8; INLINE_SIZE],
    len: usize,
    cursor: Cursor,
}

impl Input {
    /// The input of entry `e` (whose chain [`check_chains`] accepted).
    pub(super) fn new(e: &CmdLayout) -> Self {
        Input {
            inline: e.in_data,
            len: e.inlen as usize,
            cursor: Cursor::new(Dir::In, e.in_ptr, e.token),
        }
    }

    /// The input length (`inlen`).
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The first 16 bytes (the generic input header).
    pub(super) fn header(&self) -> &[u8; INLINE_SIZE] {
        &self.inline
    }

    /// Fills `buf` with input bytes from `offset`.
    ///
    /// # Errors
    ///
    /// [`Reject::InputTooShort`] if the range passes `inlen`; a
    /// delivery-level [`Reject`] if the chain changed or became
    /// unreachable since it was checked.
    pub(super) fn read<M: DmaMemory>(
        &mut self,
        mem: &mut M,
        offset: usize,
        buf: &mut [u8],
    ) -> Result<(), Reject> {
        let end = offset.checked_add(buf.len()).ok_or(Reject::InputTooShort)?;
        if end > self.len {
            return Err(Reject::InputTooShort);
        }
        let mut at = offset;
        let mut done = 0;
        while done < buf.len() {
            let rest = buf.get_mut(done..).ok_or(Reject::InputTooShort)?;
            let n = if at < INLINE_SIZE {
                let src = self.inline.get(at..).ok_or(Reject::InputTooShort)?;
                let n = src.len().min(rest.len());
                rest[..n].copy_from_slice(&src[..n]);
                n
            } else {
                let (num, within) = block_of(at);
                let addr = self.cursor.seek(mem, num)?;
                let n = (MAILBOX_DATA_SIZE - within).min(rest.len());
                mem.read(addr.wrapping_add(within as u64), &mut rest[..n])
                    .map_err(|_| Reject::MailboxFault)?;
                n
            };
            at += n;
            done += n;
        }
        Ok(())
    }

    /// The big-endian 64-bit entry `index` of a page-address list at
    /// `offset`.
    pub(super) fn pas<M: DmaMemory>(
        &mut self,
        mem: &mut M,
        offset: usize,
        index: usize,
    ) -> Result<u64, Reject> {
        let at = index
            .checked_mul(8)
            .and_then(|o| o.checked_add(offset))
            .ok_or(Reject::InputTooShort)?;
        let mut b = [0u8; 8];
        self.read(mem, at, &mut b)?;
        Ok(u64::from_be_bytes(b))
    }
}

/// A command's output, written as it is produced: the first 16 bytes into
/// the entry (by the caller, from [`Output::inline`]), the rest into the
/// output mailboxes one block at a time. Bytes past `outlen` are dropped.
#[derive(Clone, Copy, Debug)]
pub(super) struct Output {
    inline: [u8; INLINE_SIZE],
    len: usize,
    pos: usize,
    cursor: Cursor,
    block: [u8; MAILBOX_DATA_SIZE],
    checksums: bool,
}

impl Output {
    /// The output of entry `e` (whose chain [`check_chains`] accepted);
    /// with `checksums`, every block written is signed.
    pub(super) fn new(e: &CmdLayout, checksums: bool) -> Self {
        Output {
            inline: [0; INLINE_SIZE],
            len: e.outlen as usize,
            pos: 0,
            cursor: Cursor::new(Dir::Out, e.out_ptr, e.token),
            block: [0; MAILBOX_DATA_SIZE],
            checksums,
        }
    }

    /// The output length (`outlen`).
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The first 16 bytes, for the entry's `out`.
    pub(super) fn inline(&self) -> [u8; INLINE_SIZE] {
        self.inline
    }

    /// Writes the current block (bytes up to `pos`) to its mailbox.
    fn flush<M: DmaMemory>(&mut self, mem: &mut M) -> Result<(), Reject> {
        if self.pos <= INLINE_SIZE {
            return Ok(());
        }
        let (num, _) = block_of(self.pos - 1);
        let addr = self.cursor.seek(mem, num)?;
        let mut whole = [0u8; MAILBOX_SIZE];
        read_block(mem, Dir::Out, addr, self.cursor.token, num, &mut whole)?;
        whole[..MAILBOX_DATA_SIZE].copy_from_slice(&self.block);
        if self.checksums {
            sign_block(&mut whole);
            mem.write(addr, &whole)
        } else {
            mem.write(addr, &whole[..MAILBOX_DATA_SIZE])
        }
        .map_err(|_| Reject::MailboxFault)?;
        self.block = [0; MAILBOX_DATA_SIZE];
        Ok(())
    }

    /// Appends `bytes` to the output.
    ///
    /// # Errors
    ///
    /// A delivery-level [`Reject`] if an output mailbox cannot be written
    /// or the chain changed since it was checked.
    pub(super) fn put<M: DmaMemory>(&mut self, mem: &mut M, bytes: &[u8]) -> Result<(), Reject> {
        for &b in bytes {
            if self.pos >= self.len {
                return Ok(());
            }
            if self.pos < INLINE_SIZE {
                if let Some(x) = self.inline.get_mut(self.pos) {
                    *x = b;
                }
            } else {
                let (_, within) = block_of(self.pos);
                if let Some(x) = self.block.get_mut(within) {
                    *x = b;
                }
            }
            self.pos += 1;
            if self.pos > INLINE_SIZE && block_of(self.pos).1 == 0 {
                self.flush(mem)?;
            }
        }
        Ok(())
    }

    /// Pads the output with zeros to `outlen` and writes the last block.
    ///
    /// # Errors
    ///
    /// As [`Output::put`].
    pub(super) fn finish<M: DmaMemory>(&mut self, mem: &mut M) -> Result<(), Reject> {
        const ZEROS: [u8; 64] = [0; 64];
        while self.pos < self.len {
            let n = (self.len - self.pos).min(ZEROS.len());
            self.put(mem, &ZEROS[..n])?;
        }
        if self.pos > INLINE_SIZE && block_of(self.pos).1 != 0 {
            self.flush(mem)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::mem::DmaFault;
    use super::super::super::prm::cmd_queue::{sign_layout, write_mailbox};
    use super::*;

    /// 16 KiB of memory at 0x10000.
    struct Mem {
        bytes: [u8; 0x4000],
    }

    impl DmaMemory for Mem {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
            let a = usize::try_from(addr.checked_sub(0x10000).ok_or(DmaFault)?).unwrap();
            buf.copy_from_slice(self.bytes.get(a..a + buf.len()).ok_or(DmaFault)?);
            Ok(())
        }
        fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), DmaFault> {
            let a = usize::try_from(addr.checked_sub(0x10000).ok_or(DmaFault)?).unwrap();
            self.bytes
                .get_mut(a..a + data.len())
                .ok_or(DmaFault)?
                .copy_from_slice(data);
            Ok(())
        }
    }

    fn msg(len: usize) -> [u8; 1200] {
        let mut m = [0u8; 1200];
        for (i, x) in m.iter_mut().enumerate().take(len) {
            *x = (i * 7 + 1) as u8;
        }
        m
    }

    /// An entry with a 1100-byte input in blocks at 0x10000 and 0x10400,
    /// a 600-byte output in blocks at 0x11000 and 0x11400.
    fn setup() -> (Mem, CmdLayout, [u8; 1200]) {
        let mut mem = Mem { bytes: [0; 0x4000] };
        let m = msg(1100);
        let input = &m[..1100];
        let mut blk = [0u8; MAILBOX_SIZE];
        for (i, (at, next)) in [(0x10000, 0x10400), (0x10400, 0x10800), (0x10800, 0)]
            .into_iter()
            .enumerate()
        {
            write_mailbox(input, i, next, 9, true, &mut blk).unwrap();
            mem.write(at, &blk).unwrap();
        }
        for (i, (at, next)) in [(0x11000u64, 0x11400u64), (0x11400, 0)]
            .into_iter()
            .enumerate()
        {
            MailboxHeader {
                next,
                block_num: i as u32,
                token: 9,
                ctrl_sig: 0,
                sig: 0,
            }
            .encode(&[], &mut blk)
            .unwrap();
            mem.write(at, &blk).unwrap();
        }
        let e = CmdLayout::request(input, 0x10000, 600, 0x11000, 9);
        (mem, e, m)
    }

    #[test]
    fn entries_are_checked() {
        let (_, e, _) = setup();
        let mut b = [0u8; 64];
        e.encode(&mut b);
        sign_layout(&mut b);
        assert!(check_entry(&b, true).is_ok());
        let mut bad = b;
        bad[0] = 6;
        assert_eq!(check_entry(&bad, false), Err(Reject::BadEntryType));
        let mut bad = b;
        bad[20] ^= 1;
        assert_eq!(check_entry(&bad, true), Err(Reject::BadEntrySignature));
        assert!(check_entry(&bad, false).is_ok());
        let mut bad = b;
        bad[62] = 1;
        assert_eq!(check_entry(&bad, false), Err(Reject::EntryReservedSet));
        let mut bad = b;
        bad[4..8].copy_from_slice(&8u32.to_be_bytes());
        assert_eq!(check_entry(&bad, false), Err(Reject::BadInputLength));
        let mut bad = b;
        bad[56..60].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(check_entry(&bad, false), Err(Reject::BadOutputLength));
    }

    #[test]
    fn chains_read_and_write() {
        let (mut mem, e, m) = setup();
        assert_eq!(check_chains(&mut mem, &e, true), Ok(()));
        let mut input = Input::new(&e);
        let mut buf = [0u8; 1100];
        input.read(&mut mem, 0, &mut buf).unwrap();
        assert_eq!(buf, m[..1100]);
        // Backwards, across a block boundary.
        let mut b = [0u8; 8];
        input.read(&mut mem, 524, &mut b).unwrap();
        assert_eq!(b, m[524..532]);
        assert_eq!(
            input.read(&mut mem, 1095, &mut b),
            Err(Reject::InputTooShort)
        );
        let mut out = Output::new(&e, true);
        out.put(&mut mem, &m[..700]).unwrap();
        out.finish(&mut mem).unwrap();
        assert_eq!(out.inline(), m[..16]);
        let mut blk = [0u8; MAILBOX_SIZE];
        mem.read(0x11000, &mut blk).unwrap();
        assert_eq!(blk[..512], m[16..528]);
        assert!(block_signature_ok(&blk));
        mem.read(0x11400, &mut blk).unwrap();
        assert_eq!(blk[..72], m[528..600]);
        assert!(blk[72..512].iter().all(|&x| x == 0));
    }

    #[test]
    fn bad_chains() {
        let (mut mem, e, _) = setup();
        // Wrong token in input block 1.
        mem.bytes[0x400 + 573] = 8;
        assert_eq!(check_chains(&mut mem, &e, false), Err(Reject::InToken));
        mem.bytes[0x400 + 573] = 9;
        mem.bytes[0x400 + 10] ^= 1;
        assert_eq!(
            check_chains(&mut mem, &e, true),
            Err(Reject::InBlockSignature)
        );
        assert_eq!(check_chains(&mut mem, &e, false), Ok(()));
        // Block numbers out of order in the output.
        mem.bytes[0x1400 + 571] = 5;
        assert_eq!(check_chains(&mut mem, &e, false), Err(Reject::OutBlockNum));
        mem.bytes[0x1400 + 571] = 1;
        // A chain that ends early.
        let short = CmdLayout { inlen: 1600, ..e };
        assert_eq!(
            check_chains(&mut mem, &short, false),
            Err(Reject::InChainShort)
        );
        let mis = CmdLayout {
            out_ptr: 0x11200,
            ..e
        };
        assert_eq!(
            check_chains(&mut mem, &mis, false),
            Err(Reject::OutPtrAlign)
        );
        let far = CmdLayout {
            in_ptr: 0x90000,
            ..e
        };
        assert_eq!(
            check_chains(&mut mem, &far, false),
            Err(Reject::MailboxFault)
        );
    }
}
