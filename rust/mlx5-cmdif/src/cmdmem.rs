// SPDX-License-Identifier: GPL-2.0

//! The command interface's DMA memory: one region of the driver's
//! coherent memory ([`CmdMem`]), split into the command queue page, the
//! small mailbox pools of the *lanes* and the two large pools of entry 0,
//! and where each byte of a message lies in them.
//!
//! | bytes of the region | what |
//! |---|---|
//! | 0..4096 | the command queue (entries `1 << log_stride` apart) |
//! | 4096 + 8 KiB·(l − 1) | lane `l`'s input blocks (4), then its output blocks (4), for `l` in 1..=[`LANES`] |
//! | 4096 + [`LANE_BYTES`] + 1024·i | entry 0's input block `i`, for `i` below `blocks` |
//! | 4096 + [`LANE_BYTES`] + 1024·(blocks + i) | entry 0's output block `i` |
//!
//! Each pool belongs to one queue entry, so that commands in flight at
//! the same time never share a mailbox, as in mlx5_core, where every
//! command owns its chain. Entry 0 carries the long messages (capability
//! blocks, page lists); it is the entry of the one-at-a-time path
//! ([`CmdIf::post`](super::cmdif::CmdIf::post)). Entries 1 to [`LANES`]
//! are the lanes, for commands of up to [`LANE_MSG`] bytes each way that
//! run side by side ([`CmdIf::start`](super::cmdif::CmdIf::start)).
//!
//! `blocks` is what the rest of the region holds, between [`MIN_BLOCKS`]
//! and [`MAX_BLOCKS`]. Blocks are 576 bytes at 1 KiB alignment, as
//! mlx5_core allocates them. A message (input or output) is its first 16
//! bytes, carried in the queue entry, then 512 bytes per block of its
//! pool: message byte `16 + 512·i + j` is byte `j` of block `i`. Each pool
//! is one chain (block `i`'s `next` is block `i + 1`), so a command's
//! input and output can be as long as its pool.

use super::bus::Bus;
use super::error::Error;
use super::prm::cmd_queue::{
    sign_block, MailboxHeader, INLINE_SIZE, MAILBOX_ALIGN, MAILBOX_DATA_SIZE, MAILBOX_SIZE,
};

/// The size of the command queue page.
pub const QUEUE_PAGE: usize = 4096;
/// Mailbox blocks per pool at least: QUERY_HCA_CAP's 4112-byte output and
/// SET_HCA_CAP's input need eight.
pub const MIN_BLOCKS: usize = 8;
/// Mailbox blocks per pool at most (a 32 KiB message).
pub const MAX_BLOCKS: usize = 64;
/// Lanes: entries 1 to `LANES`, each with pools of its own, for commands
/// in flight side by side (mlx5_core lets all 32 entries run; eight
/// outstanding commands keep a firmware busy).
pub const LANES: usize = 7;
/// Mailbox blocks per lane pool.
pub const LANE_BLOCKS: usize = 4;
/// The longest input or output of a lane command: 16 bytes inline and
/// [`LANE_BLOCKS`] blocks (2064 bytes: a QP or CQ context with 224 pages,
/// every destroy, query and transition).
pub const LANE_MSG: usize = INLINE_SIZE + LANE_BLOCKS * MAILBOX_DATA_SIZE;
/// The bytes of all lane pools.
pub const LANE_BYTES: usize = LANES * 2 * LANE_BLOCKS * MAILBOX_ALIGN;
/// The smallest [`CmdMem::len`]: the queue page, the lanes and entry 0's
/// two pools of [`MIN_BLOCKS`] blocks.
pub const CMD_MEM_MIN: usize = QUEUE_PAGE + LANE_BYTES + 2 * MIN_BLOCKS * MAILBOX_ALIGN;
/// A good [`CmdMem::len`]: 16 blocks per pool of entry 0, so that one
/// MANAGE_PAGES moves up to 1024 pages.
pub const CMD_MEM_SIZE: usize = QUEUE_PAGE + LANE_BYTES + 2 * 16 * MAILBOX_ALIGN;
/// The largest useful [`CmdMem::len`]: entry 0 with two pools of
/// [`MAX_BLOCKS`] blocks, for 32 KiB messages (a memory key's translation
/// table of 4000 pages).
pub const CMD_MEM_MAX: usize = QUEUE_PAGE + LANE_BYTES + 2 * MAX_BLOCKS * MAILBOX_ALIGN;

/// The region of the driver's DMA-coherent memory the command interface
/// uses (see the module documentation). The embedder allocates it and
/// keeps it mapped until the function is torn down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmdMem {
    /// Its DMA address, 4 KiB aligned.
    pub addr: u64,
    /// Its length, at least [`CMD_MEM_MIN`] ([`CMD_MEM_SIZE`] is a good
    /// choice); bytes beyond [`MAX_BLOCKS`] blocks per pool are not used.
    pub len: usize,
}

/// Where the queue and the pools lie.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pools {
    /// The command queue page.
    pub cmdq: u64,
    /// Entry 0's input mailbox block 0.
    pub in_pool: u64,
    /// Entry 0's output mailbox block 0.
    pub out_pool: u64,
    /// Blocks per pool of entry 0.
    pub blocks: usize,
}

/// The mailbox pools of one queue entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryPools {
    /// Input block 0.
    pub in_pool: u64,
    /// Output block 0.
    pub out_pool: u64,
    /// Blocks per pool.
    pub blocks: usize,
}

impl EntryPools {
    /// The longest message a pool carries: 16 bytes inline and 512 per
    /// block.
    pub fn max_msg_len(&self) -> usize {
        INLINE_SIZE.saturating_add(self.blocks.saturating_mul(MAILBOX_DATA_SIZE))
    }
}

impl CmdMem {
    /// Splits the region into the queue page and the two pools.
    ///
    /// # Errors
    ///
    /// [`Error::BadCmdMem`] if the region is not 4 KiB aligned, shorter
    /// than [`CMD_MEM_MIN`], or wraps the address space.
    pub fn pools(&self) -> Result<Pools, Error> {
        let page = QUEUE_PAGE as u64;
        if self.addr & (page - 1) != 0 || self.len < CMD_MEM_MIN {
            return Err(Error::BadCmdMem);
        }
        self.addr
            .checked_add(self.len as u64)
            .ok_or(Error::BadCmdMem)?;
        let rest = self.len.saturating_sub(QUEUE_PAGE + LANE_BYTES);
        let blocks = (rest / (2 * MAILBOX_ALIGN)).min(MAX_BLOCKS);
        let in_pool = self.addr.saturating_add(page + LANE_BYTES as u64);
        Ok(Pools {
            cmdq: self.addr,
            in_pool,
            out_pool: block_addr(in_pool, blocks),
            blocks,
        })
    }
}

impl Pools {
    /// The longest message a pool of entry 0 carries: 16 bytes inline and
    /// 512 per block.
    pub fn max_msg_len(&self) -> usize {
        self.entry(0).map_or(0, |p| p.max_msg_len())
    }

    /// The pools of queue entry `entry`: entry 0's, a lane's, or `None`
    /// for an entry without mailboxes (past the lanes).
    pub fn entry(&self, entry: usize) -> Option<EntryPools> {
        if entry == 0 {
            return Some(EntryPools {
                in_pool: self.in_pool,
                out_pool: self.out_pool,
                blocks: self.blocks,
            });
        }
        if entry > LANES {
            return None;
        }
        let lane = (entry - 1) as u64 * (2 * LANE_BLOCKS * MAILBOX_ALIGN) as u64;
        let in_pool = self
            .cmdq
            .saturating_add(QUEUE_PAGE as u64)
            .saturating_add(lane);
        Some(EntryPools {
            in_pool,
            out_pool: block_addr(in_pool, LANE_BLOCKS),
            blocks: LANE_BLOCKS,
        })
    }
}

/// The DMA address of block `i` of the pool at `pool`.
pub fn block_addr(pool: u64, i: usize) -> u64 {
    pool.saturating_add((i as u64).saturating_mul(MAILBOX_ALIGN as u64))
}

/// Where a run of message bytes lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// In the queue entry's 16 bytes, from this index.
    Inline(usize),
    /// In a pool, at this DMA address.
    Dma(u64),
}

/// The blocks of a message: `n` consecutive blocks of a pool, then the
/// embedder's own blocks at `ext` (1 KiB aligned, in memory its
/// [`Bus`] reaches), for an input longer than its pool
/// ([`CmdIf::exec_ext`](super::cmdif::CmdIf::exec_ext)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Blocks<'a> {
    /// Block 0 of the pool.
    pub pool: u64,
    /// Blocks of the pool.
    pub n: usize,
    /// Blocks after them.
    pub ext: &'a [u64],
}

impl Blocks<'static> {
    /// The `n` blocks of the pool at `pool`, nothing more.
    pub fn pool(pool: u64, n: usize) -> Self {
        Blocks { pool, n, ext: &[] }
    }
}

impl Blocks<'_> {
    /// How many blocks there are.
    pub fn len(&self) -> usize {
        self.n.saturating_add(self.ext.len())
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The DMA address of block `i`.
    pub fn addr(&self, i: usize) -> Option<u64> {
        match i.checked_sub(self.n) {
            None => Some(block_addr(self.pool, i)),
            Some(e) => self.ext.get(e).copied(),
        }
    }

    /// The longest message the blocks carry: 16 bytes inline and 512 per
    /// block.
    pub fn max_msg_len(&self) -> usize {
        INLINE_SIZE.saturating_add(self.len().saturating_mul(MAILBOX_DATA_SIZE))
    }

    /// Where message byte `offset` lies and how many bytes from there are
    /// contiguous (to the end of the inline part or of the block's data);
    /// `None` past the last block.
    pub fn place(&self, offset: usize) -> Option<(Place, usize)> {
        match offset.checked_sub(INLINE_SIZE) {
            None => Some((Place::Inline(offset), INLINE_SIZE.saturating_sub(offset))),
            Some(rel) => {
                let within = rel % MAILBOX_DATA_SIZE;
                let addr = self.addr(rel / MAILBOX_DATA_SIZE)?;
                Some((
                    Place::Dma(addr.saturating_add(within as u64)),
                    MAILBOX_DATA_SIZE.saturating_sub(within),
                ))
            }
        }
    }
}

/// A mailbox chain to (re)write before a command is posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chain<'a> {
    /// Where its blocks are.
    pub blocks: Blocks<'a>,
    /// Blocks in the chain (at most `blocks.len()`).
    pub count: usize,
    /// The command's token, repeated in every block.
    pub token: u8,
    /// Sign every block (command checksums on).
    pub sign: bool,
    /// For an input chain, the message length: the staged data in the
    /// blocks stays, bytes past the message are cleared. `None` for an
    /// output chain, whose blocks are cleared whole.
    pub inlen: Option<usize>,
}

impl Chain<'_> {
    /// Writes the chain's blocks: `next`, `block_num`, `token`, data as
    /// described at [`Chain::inlen`], and signatures if asked.
    ///
    /// # Errors
    ///
    /// [`Error::Dma`]; [`Error::BadCmdMem`] if `count` exceeds the
    /// blocks.
    pub fn write<B: Bus>(&self, bus: &mut B) -> Result<(), Error> {
        let mut blk = [0u8; MAILBOX_SIZE];
        for i in 0..self.count {
            let addr = self.blocks.addr(i).ok_or(Error::BadCmdMem)?;
            let next = if i.saturating_add(1) < self.count {
                self.blocks
                    .addr(i.saturating_add(1))
                    .ok_or(Error::BadCmdMem)?
            } else {
                0
            };
            MailboxHeader {
                next,
                block_num: u32::try_from(i).unwrap_or(u32::MAX),
                token: self.token,
                ctrl_sig: 0,
                sig: 0,
            }
            .encode(&[], &mut blk)
            .map_err(|_| Error::Dma { addr })?;
            if let Some(inlen) = self.inlen {
                let start = INLINE_SIZE.saturating_add(i.saturating_mul(MAILBOX_DATA_SIZE));
                let valid = inlen.saturating_sub(start).min(MAILBOX_DATA_SIZE);
                if let Some(data) = blk.get_mut(..valid) {
                    bus.dma_read(addr, data).map_err(|_| Error::Dma { addr })?;
                }
            }
            if self.sign {
                sign_block(&mut blk);
            }
            bus.dma_write(addr, &blk).map_err(|_| Error::Dma { addr })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_split_into_queue_and_pools() {
        let p = CmdMem {
            addr: 0x10_0000,
            len: CMD_MEM_SIZE,
        }
        .pools()
        .unwrap();
        assert_eq!(p.cmdq, 0x10_0000);
        assert_eq!(p.in_pool, 0x10_1000 + LANE_BYTES as u64);
        assert_eq!(p.out_pool, p.in_pool + 16 * 1024);
        assert_eq!(p.blocks, 16);
        assert_eq!(p.max_msg_len(), 16 + 16 * 512);
        // The lanes lie between the queue page and entry 0's pools, one
        // after the other, and never overlap.
        let l1 = p.entry(1).unwrap();
        assert_eq!(l1.in_pool, 0x10_1000);
        assert_eq!(l1.out_pool, 0x10_1000 + 4 * 1024);
        assert_eq!(l1.max_msg_len(), LANE_MSG);
        let last = p.entry(LANES).unwrap();
        assert_eq!(last.out_pool + 4 * 1024, p.in_pool);
        assert_eq!(p.entry(LANES + 1), None);
        // The smallest region still carries a capability block.
        let min = CmdMem {
            addr: 0,
            len: CMD_MEM_MIN,
        };
        assert_eq!(min.pools().unwrap().max_msg_len(), 16 + 4096);
        // Larger regions are capped at 64 blocks a pool.
        let big = CmdMem {
            addr: 0,
            len: 1 << 20,
        };
        assert_eq!(big.pools().unwrap().blocks, MAX_BLOCKS);
        for bad in [
            CmdMem {
                addr: 0x800,
                len: CMD_MEM_SIZE,
            },
            CmdMem {
                addr: 0,
                len: CMD_MEM_MIN - 1,
            },
            CmdMem {
                addr: !0xfff,
                len: CMD_MEM_SIZE,
            },
        ] {
            assert_eq!(bad.pools(), Err(Error::BadCmdMem), "{bad:?}");
        }
    }

    #[test]
    fn blocks_past_the_pool_are_the_embedders() {
        let ext = [0x9000, 0x5400];
        let b = Blocks {
            pool: 0x1000,
            n: 2,
            ext: &ext,
        };
        assert_eq!(b.len(), 4);
        assert_eq!(b.addr(1), Some(0x1400));
        assert_eq!(b.addr(2), Some(0x9000));
        assert_eq!(b.addr(3), Some(0x5400));
        assert_eq!(b.addr(4), None);
        assert_eq!(b.max_msg_len(), 16 + 4 * 512);
        assert_eq!(b.place(16 + 512 + 3), Some((Place::Dma(0x1403), 509)));
        assert_eq!(b.place(16 + 3 * 512), Some((Place::Dma(0x5400), 512)));
        assert_eq!(b.place(16 + 4 * 512), None);
        assert_eq!(b.place(2), Some((Place::Inline(2), 14)));
    }

    #[test]
    fn message_bytes_find_their_block() {
        let pool = Blocks::pool(0x1000, 4);
        let place = |offset| pool.place(offset).unwrap();
        assert_eq!(place(0), (Place::Inline(0), 16));
        assert_eq!(place(15), (Place::Inline(15), 1));
        assert_eq!(place(16), (Place::Dma(0x1000), 512));
        assert_eq!(place(16 + 511), (Place::Dma(0x1000 + 511), 1));
        assert_eq!(place(16 + 512), (Place::Dma(0x1400), 512));
        assert_eq!(place(16 + 3 * 512 + 8), (Place::Dma(0x1c08), 504));
    }
}
