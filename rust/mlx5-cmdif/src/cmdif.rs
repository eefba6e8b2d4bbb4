// SPDX-License-Identifier: GPL-2.0

//! The command queue as the driver runs it: handing the queue to the
//! device, and posting commands through real queue entries with mailbox
//! chains, one at a time through entry 0 or side by side on the lanes.
//!
//! # Memory
//!
//! The embedder gives [`CmdIf::init`] one region of its DMA-coherent memory
//! ([`CmdMem`]): the command queue page, and mailbox pools for inputs and
//! outputs, a large pair for entry 0 and a small pair for each lane (see
//! [`cmdmem`](super::cmdmem)). The crate keeps nothing else: commands are
//! staged straight into their entry's input pool and outputs read from its
//! output pool, so that a 4 KiB capability block never sits on the stack.
//!
//! # Entry 0: one command at a time, polled
//!
//! [`CmdIf::post`] (and [`CmdIf::exec`] for a typed [`Command`]) writes the
//! input mailbox headers (`next`, `block_num`, the command's token) and the
//! empty output chain, fills the entry (type, lengths, pointers, the inline
//! input, token, ownership), signs it as mlx5_core does (the entry always,
//! the mailboxes too while command checksums are on), rings the doorbell
//! and polls the ownership bit until the device clears it or the command
//! timeout passes. It then checks the signatures (with checksums on), the
//! delivery status and the output's status and syndrome. Long messages
//! (capabilities, page lists) go this way; [`CmdIf::write_in`] and
//! [`CmdIf::read_out`] reach entry 0's messages byte by byte.
//!
//! # Lanes: several commands in flight
//!
//! [`CmdIf::start`] stages a command in a free lane (entries 1 to
//! [`LANES`], each with mailboxes of its own, messages up to
//! [`LANE_MSG`] bytes), rings its doorbell and returns a [`Ticket`]
//! without waiting. How to wait is the embedder's choice: the kernel
//! drops its lock and sleeps until a command EQE names the entry (its
//! [`Ticket::bit`]), looking at the ownership byte ([`Ticket::own_addr`])
//! as the fallback, as mlx5_core does in event mode. [`CmdIf::finish`]
//! then checks and decodes the output, or [`CmdIf::give_up`] leaves the
//! entry to the device (timeout, failed function). Every call needs
//! `&mut self`, so the embedder serialises posting and finishing, not
//! the device's work.
//!
//! # Timeouts
//!
//! Every wait of the crate is bounded by the embedder's clock
//! ([`Timeouts`]). A command that times out leaves its entry with the
//! device; the entry (and its pools) is not reused until the device hands
//! it back, which the crate checks before each command.

use super::bus::{Bus, Wait};
use super::cmdmem::{Blocks, Chain, CmdMem, Place, Pools, LANES, LANE_MSG, QUEUE_PAGE};
use super::error::{Error, ReadyWait};
use super::prm::cmd_queue::{
    block_signature_ok, doorbell, entry_offset, layout_signature_ok, mailbox_count, owned_by_hw,
    sign_layout, CmdLayout, DeliveryStatus, CMD_LAYOUT_SIZE, INLINE_SIZE, MAILBOX_DATA_SIZE,
    MAILBOX_SIZE, MAX_COMMANDS, PCI_CMD_XPORT, STATUS_OWN_OFFSET,
};
use super::prm::cmd_status::{CmdError, CmdStatus};
use super::prm::command::{in_len, opcode_name, Command, IN_HEADER_SIZE, OUT_STATUS_SIZE};
use super::prm::ifc::{Layout, PAS_ENTRY_SIZE};
use super::prm::init_seg::{
    cmdif_rev, cmdq_addr, initializing, CmdqAddrLSz, FwRev, CMDIF_REV, CMDIF_REV_FW_SUB_OFFSET,
    CMDQ_ADDR_H_OFFSET, CMDQ_ADDR_L_SZ_OFFSET, CMD_DBELL_OFFSET, FW_REV_OFFSET,
    INITIALIZING_OFFSET,
};

/// The largest fixed input or output layout [`CmdIf::exec`] encodes or
/// decodes (the 272-byte CREATE_* and QP transition inputs); larger ones
/// (the capability commands) go through the message API.
pub const MAX_LAYOUT: usize = 272;

/// The longest input [`CmdIf::exec_ext`] posts: 16 bytes inline and 2048
/// blocks, 1 MiB (mlx5_core has no limit of its own; a memory key of
/// 131,000 pages, 511 MiB).
pub const MAX_EXT_MSG: usize = INLINE_SIZE + 2048 * MAILBOX_DATA_SIZE;

/// Zeros to clear the queue page with.
const ZEROS: [u8; MAILBOX_DATA_SIZE] = [0; MAILBOX_DATA_SIZE];

/// How long each wait may last, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// `initializing` before the queue address is written.
    pub fw_pre_init_ms: u64,
    /// `initializing` after it (the queue load).
    pub fw_init_ms: u64,
    /// One command.
    pub cmd_ms: u64,
    /// Teardown's page reclaim, from the last page returned.
    pub reclaim_pages_ms: u64,
}

impl Timeouts {
    /// mlx5_core's defaults: 120 s for the firmware to accept the segment,
    /// 2 s to load the queue, 60 s per command, 5 s without progress while
    /// reclaiming pages.
    pub const MLX5_CORE: Timeouts = Timeouts {
        fw_pre_init_ms: 120_000,
        fw_init_ms: 2_000,
        cmd_ms: 60_000,
        reclaim_pages_ms: 5_000,
    };
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts::MLX5_CORE
    }
}

/// Whether the device is gone: a PCI function that was surprise-removed,
/// or whose link died, reads all ones, and a live one never reports
/// firmware version 0xffff.0xffff (mlx5_core's health check looks at the
/// same word).
fn device_gone<B: Bus>(bus: &mut B) -> bool {
    bus.read32(FW_REV_OFFSET) == u32::MAX
}

/// Nanoseconds in `ms` milliseconds.
pub(crate) fn ms_to_ns(ms: u64) -> u64 {
    ms.saturating_mul(1_000_000)
}

/// Waits for `initializing` to clear, for at most `ms` milliseconds.
fn wait_ready<B: Bus>(bus: &mut B, wait: ReadyWait, ms: u64) -> Result<(), Error> {
    let start = bus.now_ns();
    loop {
        if !initializing(bus.read32(INITIALIZING_OFFSET)) {
            return Ok(());
        }
        if bus.now_ns().saturating_sub(start) >= ms_to_ns(ms) {
            return Err(Error::FwNotReady { wait, ms });
        }
        bus.relax(Wait::FwInit);
    }
}

/// The command interface of one function (see the module documentation).
#[derive(Clone, Debug)]
pub struct CmdIf {
    pools: Pools,
    timeouts: Timeouts,
    fw_rev: FwRev,
    log_sz: u8,
    log_stride: u8,
    token: u8,
    checksums: bool,
    /// Entries the device kept after a timeout, a bit per entry.
    stuck: u32,
    /// Lane entries taken by commands started with [`CmdIf::start`] and
    /// not yet finished, a bit per entry.
    busy: u32,
    /// The first 16 bytes of the next input.
    in_inline: [u8; INLINE_SIZE],
    /// The first 16 bytes of the last output.
    out_inline: [u8; INLINE_SIZE],
    /// The length of the last output (0 if the last command failed before
    /// the device wrote one).
    outlen: usize,
    /// The device's registers read all ones: it is gone (surprise
    /// removal, a dead link) and no command is posted any more.
    gone: bool,
    /// The embedder found the function failed ([`CmdIf::set_internal_error`]):
    /// no command is posted any more.
    internal_error: bool,
}

/// Whether a command only takes something down, so that on a function in
/// internal error it is answered as done without reaching the device (as
/// mlx5_core answers them): what it would destroy is gone with the
/// device's state, and whoever destroys must be able to free its memory.
pub fn destroys_only(opcode: u16) -> bool {
    use super::prm::command::{
        OP_2ERR_QP, OP_2RST_QP, OP_DEALLOC_PD, OP_DEALLOC_UAR, OP_DESTROY_CQ, OP_DESTROY_EQ,
        OP_DESTROY_MKEY, OP_DESTROY_QP, OP_DISABLE_HCA, OP_TEARDOWN_HCA,
    };
    matches!(
        opcode,
        OP_TEARDOWN_HCA
            | OP_DISABLE_HCA
            | OP_DESTROY_MKEY
            | OP_DESTROY_EQ
            | OP_DESTROY_CQ
            | OP_DESTROY_QP
            | OP_2ERR_QP
            | OP_2RST_QP
            | OP_DEALLOC_PD
            | OP_DEALLOC_UAR
    )
}

impl CmdIf {
    /// Brings the command interface up as mlx5_core's `mlx5_cmd_enable`
    /// and the waits around it do: waits for `initializing` to clear,
    /// checks the command interface revision, reads the queue geometry,
    /// writes the queue address (clearing the queue page first), and waits
    /// for `initializing` to clear again.
    ///
    /// # Errors
    ///
    /// [`Error::BadCmdMem`] for an unusable `mem`, [`Error::FwNotReady`]
    /// naming the wait that timed out, [`Error::CmdifRev`],
    /// [`Error::CmdqGeometry`], [`Error::Dma`].
    pub fn init<B: Bus>(bus: &mut B, mem: CmdMem, timeouts: Timeouts) -> Result<Self, Error> {
        let pools = mem.pools()?;
        wait_ready(bus, ReadyWait::PreInit, timeouts.fw_pre_init_ms)?;
        let sub = bus.read32(CMDIF_REV_FW_SUB_OFFSET);
        let rev = cmdif_rev(sub);
        if rev != CMDIF_REV {
            return Err(Error::CmdifRev { found: rev });
        }
        let fw_rev = FwRev::decode(bus.read32(FW_REV_OFFSET), sub);
        let l = CmdqAddrLSz::decode(bus.read32(CMDQ_ADDR_L_SZ_OFFSET));
        let fits = u32::from(l.log_sz) + u32::from(l.log_stride) <= 12;
        if l.log_sz > 5 || l.log_stride < 6 || !fits {
            return Err(Error::CmdqGeometry {
                log_sz: l.log_sz,
                log_stride: l.log_stride,
            });
        }
        let mut at = 0;
        while at < QUEUE_PAGE {
            let addr = pools.cmdq.saturating_add(at as u64);
            bus.dma_write(addr, &ZEROS)
                .map_err(|_| Error::Dma { addr })?;
            at += ZEROS.len();
        }
        let (h, lo) = cmdq_addr(pools.cmdq).map_err(|_| Error::BadCmdMem)?;
        bus.write32(CMDQ_ADDR_H_OFFSET, h);
        bus.write32(CMDQ_ADDR_L_SZ_OFFSET, lo);
        wait_ready(bus, ReadyWait::CmdqLoad, timeouts.fw_init_ms)?;
        Ok(CmdIf {
            pools,
            timeouts,
            fw_rev,
            log_sz: l.log_sz,
            log_stride: l.log_stride,
            token: 0,
            checksums: false,
            stuck: 0,
            busy: 0,
            in_inline: [0; INLINE_SIZE],
            out_inline: [0; INLINE_SIZE],
            outlen: 0,
            gone: false,
            internal_error: false,
        })
    }

    /// The firmware version the initialization segment reports.
    pub fn fw_rev(&self) -> FwRev {
        self.fw_rev
    }

    /// The command interface revision (always [`CMDIF_REV`]: `init`
    /// refuses any other).
    pub fn cmdif_rev(&self) -> u16 {
        CMDIF_REV
    }

    /// The number of queue entries.
    pub fn entries(&self) -> usize {
        1usize << self.log_sz.min(5)
    }

    /// The timeouts in force.
    pub fn timeouts(&self) -> &Timeouts {
        &self.timeouts
    }

    /// Whether mailboxes are signed and completions verified.
    pub fn checksums(&self) -> bool {
        self.checksums
    }

    /// Turns mailbox signatures and completion checks on or off; call it
    /// after SET_HCA_CAP changed `cmdif_checksum`.
    pub fn set_checksums(&mut self, on: bool) {
        self.checksums = on;
    }

    /// Entries the device kept after a command timed out, a bit per entry.
    pub fn stuck_entries(&self) -> u32 {
        self.stuck
    }

    /// Puts the interface in internal error, as mlx5_core's
    /// `mlx5_enter_error_state` does once its health check has failed: from
    /// now on no command reaches the device. [`CmdIf::exec`] answers the
    /// commands that only take something down ([`destroys_only`]) as done
    /// and fails the rest with [`Error::InternalError`]; a command still
    /// waiting for its completion stops waiting (see [`Bus::fatal`]).
    pub fn set_internal_error(&mut self) {
        self.internal_error = true;
    }

    /// Whether the interface is in internal error.
    pub fn internal_error(&self) -> bool {
        self.internal_error
    }

    /// The longest input or output a command can have with these pools.
    pub fn max_msg_len(&self) -> usize {
        self.pools.max_msg_len()
    }

    /// The lanes this queue has: entries 1 and up with pools of their own
    /// ([`LANES`], fewer on a queue of fewer entries).
    pub fn lanes(&self) -> usize {
        LANES.min(self.entries().saturating_sub(1))
    }

    /// Lane entries whose commands were started and not yet finished, a
    /// bit per entry.
    pub fn busy_entries(&self) -> u32 {
        self.busy
    }

    /// Whether command `C` with `pas` page-list entries fits a lane, so
    /// that [`CmdIf::start`] can run it beside others; if not, it goes
    /// through entry 0 with [`CmdIf::exec`].
    pub fn lane_fits<C: Command>(&self, pas: usize) -> bool {
        self.lanes() > 0
            && check_exec::<C>(pas, LANE_MSG).is_ok()
            && <C::Out as Layout>::SIZE <= LANE_MSG
    }

    /// Runs command `C` through entry 0 and waits for it, polling: encodes
    /// `input` and its page list `pas`, posts it ([`CmdIf::post`]) and
    /// decodes the output.
    ///
    /// # Errors
    ///
    /// [`Error::TooLong`] if a layout of `C` is larger than [`MAX_LAYOUT`],
    /// the message does not fit the mailboxes, or `pas` is given to a
    /// command without a page list; otherwise as [`CmdIf::post`].
    pub fn exec<C: Command, B: Bus>(
        &mut self,
        bus: &mut B,
        input: &C::In,
        pas: &[u64],
    ) -> Result<C::Out, Error> {
        // Entry 0's pool and nothing more.
        self.exec_ext::<C, B>(bus, input, pas, &[])
    }

    /// How many blocks of its own the embedder must give
    /// [`CmdIf::exec_ext`] for command `C` with `pas` page-list entries: 0
    /// if the input fits entry 0's pool.
    pub fn ext_blocks<C: Command>(&self, pas: usize) -> usize {
        mailbox_count(in_len::<C>(pas)).saturating_sub(self.pools.blocks)
    }

    /// As [`CmdIf::exec`], for an input longer than entry 0's pool (a
    /// memory key's translation table of many pages): the input's blocks
    /// past the pool are the embedder's, at `ext` (1 KiB aligned, in
    /// memory its [`Bus`] reaches; [`CmdIf::ext_blocks`] of them), chained
    /// after the pool's as mlx5_core chains blocks from its pool. The
    /// embedder keeps them until the command is over, and for good if it
    /// timed out (the device may still read them).
    ///
    /// # Errors
    ///
    /// As [`CmdIf::exec`]; [`Error::TooLong`] if the input does not fit
    /// the pool and `ext`, or is longer than [`MAX_EXT_MSG`].
    pub fn exec_ext<C: Command, B: Bus>(
        &mut self,
        bus: &mut B,
        input: &C::In,
        pas: &[u64],
        ext: &[u64],
    ) -> Result<C::Out, Error> {
        let blocks = Blocks {
            pool: self.pools.in_pool,
            n: self.pools.blocks,
            ext,
        };
        let max = blocks.max_msg_len().min(MAX_EXT_MSG);
        let (_, out_size, inlen) = check_exec::<C>(pas.len(), max)?;
        if let Some(answered) = self.answer_if_failed::<C, B>(bus)? {
            return Ok(answered);
        }
        stage::<C, B>(bus, blocks, &mut self.in_inline, input, pas)?;
        self.post_in(bus, C::OPCODE, inlen, out_size, ext)?;
        let mut buf = [0u8; MAX_LAYOUT];
        let out = buf
            .get_mut(..out_size)
            .ok_or(too_long::<C>(out_size, MAX_LAYOUT))?;
        self.read_out(bus, 0, out)?;
        decode::<C>(out)
    }

    /// On a function in internal error: the all-zero output (status OK)
    /// for a command that only takes something down ([`destroys_only`]),
    /// [`Error::InternalError`] for any other; `None` on a live function.
    fn answer_if_failed<C: Command, B: Bus>(
        &mut self,
        bus: &mut B,
    ) -> Result<Option<C::Out>, Error> {
        if !self.internal_error && !bus.fatal() {
            return Ok(None);
        }
        self.internal_error = true;
        if !destroys_only(C::OPCODE) {
            return Err(Error::InternalError {
                command: C::NAME,
                opcode: C::OPCODE,
            });
        }
        let zeros = [0u8; MAX_LAYOUT];
        let out_size = <C::Out as Layout>::SIZE;
        let out = zeros
            .get(..out_size)
            .ok_or(too_long::<C>(out_size, MAX_LAYOUT))?;
        decode::<C>(out).map(Some)
    }

    /// Starts command `C` on a free lane and returns at once, without
    /// waiting: the input and its page list `pas` are staged in the lane's
    /// own mailboxes and the entry's doorbell rung. The caller waits for
    /// the device to hand the entry back (the ownership byte at
    /// [`Ticket::own_addr`], or a command EQE with [`Ticket::bit`]), then
    /// calls [`CmdIf::finish`], or [`CmdIf::give_up`]. Several commands
    /// may be in flight so, one per lane, beside one of entry 0.
    ///
    /// On a function in internal error, a command that only takes
    /// something down is answered at once ([`Started::Answered`]), as
    /// [`CmdIf::exec`] answers it.
    ///
    /// # Errors
    ///
    /// - [`Error::TooLong`]: the command does not fit a lane
    ///   ([`CmdIf::lane_fits`]);
    /// - [`Error::QueueBusy`]: every lane is taken (or kept by the device
    ///   after a timeout): wait for one to finish and try again;
    /// - [`Error::InternalError`], [`Error::DeviceGone`], [`Error::Dma`].
    pub fn start<C: Command, B: Bus>(
        &mut self,
        bus: &mut B,
        input: &C::In,
        pas: &[u64],
    ) -> Result<Started<C::Out>, Error> {
        let (_, out_size, inlen) = check_exec::<C>(pas.len(), LANE_MSG)?;
        if out_size > LANE_MSG || self.lanes() == 0 {
            return Err(too_long::<C>(out_size.max(inlen), LANE_MSG));
        }
        if let Some(answered) = self.answer_if_failed::<C, B>(bus)? {
            return Ok(Started::Answered(answered));
        }
        let (command, opcode) = (C::NAME, C::OPCODE);
        if self.gone || device_gone(bus) {
            self.gone = true;
            return Err(Error::DeviceGone { command, opcode });
        }
        self.reap_stuck(bus)?;
        let lanes = u32::MAX
            .checked_shr(32u32.saturating_sub(self.lanes() as u32))
            .unwrap_or(0)
            << 1;
        let free = self.free_entries() & lanes;
        if free == 0 {
            return Err(Error::QueueBusy { command, opcode });
        }
        let slot = free.trailing_zeros() as usize;
        let pools = self.pools.entry(slot).ok_or(Error::BadCmdMem)?;
        let mut inline = [0u8; INLINE_SIZE];
        let blocks = (
            Blocks::pool(pools.in_pool, pools.blocks),
            Blocks::pool(pools.out_pool, pools.blocks),
        );
        stage::<C, B>(bus, blocks.0, &mut inline, input, pas)?;
        let entry_addr = self.launch(bus, slot, blocks, inline, inlen, out_size, opcode)?;
        self.busy |= 1 << slot;
        Ok(Started::Posted(Ticket {
            entry: slot,
            opcode,
            command,
            entry_addr,
            outlen: out_size,
        }))
    }

    /// Whether the device has handed the entry of `t` back.
    ///
    /// # Errors
    ///
    /// [`Error::Dma`].
    pub fn done<B: Bus>(&self, bus: &mut B, t: &Ticket) -> Result<bool, Error> {
        Ok(!self.owned(bus, t.entry_addr)?)
    }

    /// Finishes the command of `t`, which the device has handed back:
    /// checks the entry as [`CmdIf::post`] does and decodes the output
    /// from the lane's mailboxes. The lane is free again, whatever the
    /// outcome.
    ///
    /// # Errors
    ///
    /// As [`CmdIf::post`]; [`Error::Timeout`] if the device still owns the
    /// entry (the caller did not wait: the entry is then kept, as after a
    /// timeout); [`Error::State`] for a ticket this interface does not
    /// hold (finished already).
    pub fn finish<C: Command, B: Bus>(&mut self, bus: &mut B, t: Ticket) -> Result<C::Out, Error> {
        let bit = 1u32.checked_shl(t.entry as u32).unwrap_or(0);
        if self.busy & bit == 0 {
            return Err(Error::State {
                what: "a command finished that was not started on this lane",
            });
        }
        // Whatever happens below, the lane is no longer this command's.
        self.busy &= !bit;
        if t.opcode != C::OPCODE {
            // Finished as another command: the device may still hold it.
            return Err(self.keep(bus, t.entry, Lost::Timeout, t.command, t.opcode));
        }
        let owned = match self.owned(bus, t.entry_addr) {
            Ok(o) => o,
            Err(e) => {
                let _ = self.keep(bus, t.entry, Lost::Gone, t.command, t.opcode);
                return Err(e);
            }
        };
        if owned {
            return Err(self.keep(bus, t.entry, Lost::Timeout, t.command, t.opcode));
        }
        let pools = self.pools.entry(t.entry).ok_or(Error::BadCmdMem)?;
        let out_blocks = Blocks::pool(pools.out_pool, pools.blocks);
        let out_inline = self.collect(
            bus,
            t.entry_addr,
            out_blocks,
            mailbox_count(t.outlen),
            t.command,
            t.opcode,
        )?;
        check_status(&out_inline, t.command, t.opcode)?;
        let mut buf = [0u8; MAX_LAYOUT];
        let out = buf
            .get_mut(..t.outlen)
            .ok_or(too_long::<C>(t.outlen, MAX_LAYOUT))?;
        read_msg(bus, out_blocks, &out_inline, 0, out)?;
        decode::<C>(out)
    }

    /// Gives up the command of `t` for `why`: its entry (and its lane's
    /// mailboxes) stays with the device until the device hands it back,
    /// as after a timeout of [`CmdIf::post`]. Returns the error to report:
    /// [`Error::Timeout`] (and [`Bus::lost_command`] is told),
    /// [`Error::InternalError`] or [`Error::DeviceGone`], each of which
    /// also holds for later commands.
    pub fn give_up<B: Bus>(&mut self, bus: &mut B, t: Ticket, why: Lost) -> Error {
        self.busy &= !(1u32 << t.entry);
        self.keep(bus, t.entry, why, t.command, t.opcode)
    }

    /// As [`CmdIf::give_up`], for a waiter that knows the command's type:
    /// a command that only takes something down, given up because the
    /// function failed, is answered as done (as [`CmdIf::exec`] answers it
    /// on a failed function), so that its owner can free its memory.
    ///
    /// # Errors
    ///
    /// The error [`CmdIf::give_up`] returns, for any other command or
    /// reason.
    pub fn give_up_cmd<C: Command, B: Bus>(
        &mut self,
        bus: &mut B,
        t: Ticket,
        why: Lost,
    ) -> Result<C::Out, Error> {
        let e = self.give_up(bus, t, why);
        match why {
            Lost::Fatal => match self.answer_if_failed::<C, B>(bus)? {
                Some(out) => Ok(out),
                None => Err(e),
            },
            Lost::Timeout | Lost::Gone => Err(e),
        }
    }

    /// Marks entry `slot` as kept by the device and says why.
    fn keep<B: Bus>(
        &mut self,
        bus: &mut B,
        slot: usize,
        why: Lost,
        command: &'static str,
        opcode: u16,
    ) -> Error {
        self.stuck |= 1u32.checked_shl(slot as u32).unwrap_or(0);
        match why {
            Lost::Fatal => {
                self.internal_error = true;
                Error::InternalError { command, opcode }
            }
            Lost::Gone => {
                self.gone = true;
                Error::DeviceGone { command, opcode }
            }
            Lost::Timeout => {
                bus.lost_command(opcode);
                Error::Timeout {
                    command,
                    opcode,
                    ms: self.timeouts.cmd_ms,
                }
            }
        }
    }

    /// Stages `bytes` at byte `offset` of the next command's input: the
    /// first 16 bytes go into the entry (kept here until
    /// [`CmdIf::post`]), the rest straight into entry 0's input mailboxes.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] beyond [`CmdIf::max_msg_len`],
    /// [`Error::Dma`].
    pub fn write_in<B: Bus>(
        &mut self,
        bus: &mut B,
        offset: usize,
        bytes: &[u8],
    ) -> Result<(), Error> {
        check_range(offset, bytes.len(), self.max_msg_len())?;
        let blocks = Blocks::pool(self.pools.in_pool, self.pools.blocks);
        write_msg(bus, blocks, &mut self.in_inline, offset, bytes)
    }

    /// Reads back bytes of the staged input (the page addresses of a
    /// MANAGE_PAGES that failed, to free them).
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] beyond [`CmdIf::max_msg_len`],
    /// [`Error::Dma`].
    pub fn read_in<B: Bus>(&self, bus: &mut B, offset: usize, buf: &mut [u8]) -> Result<(), Error> {
        check_range(offset, buf.len(), self.max_msg_len())?;
        let blocks = Blocks::pool(self.pools.in_pool, self.pools.blocks);
        read_msg(bus, blocks, &self.in_inline, offset, buf)
    }

    /// Reads bytes of the last output of [`CmdIf::post`], `offset` counted
    /// from the start of the output.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] beyond the output length of the last command
    /// (0 if it failed before the device wrote an output),
    /// [`Error::Dma`].
    pub fn read_out<B: Bus>(
        &self,
        bus: &mut B,
        offset: usize,
        buf: &mut [u8],
    ) -> Result<(), Error> {
        check_range(offset, buf.len(), self.outlen)?;
        let blocks = Blocks::pool(self.pools.out_pool, self.pools.blocks);
        read_msg(bus, blocks, &self.out_inline, offset, buf)
    }

    /// Posts the staged input of `inlen` bytes (written with
    /// [`CmdIf::write_in`], its header included) as the command `opcode`
    /// (which errors name, as `opcode_name` spells it) with room for
    /// `outlen` bytes of output, through entry 0 (or, for a command without
    /// mailboxes, the first free entry), waits for the device to hand the
    /// entry back, polling its ownership bit, and checks the outcome. The
    /// output is then readable with [`CmdIf::read_out`].
    ///
    /// # Errors
    ///
    /// - [`Error::TooLong`]: `inlen` below 16, `outlen` below 8, or either
    ///   beyond [`CmdIf::max_msg_len`];
    /// - [`Error::QueueBusy`]: no entry free, or entry 0 kept by a command
    ///   that timed out;
    /// - [`Error::Timeout`]: the device kept the entry past the command
    ///   timeout;
    /// - [`Error::Signature`]: with checksums on, a bad signature on the
    ///   entry or an output mailbox;
    /// - [`Error::Cmd`]: a delivery status ([`CmdError::Delivery`]) or a
    ///   failed command ([`CmdError::Failed`], with status and syndrome);
    /// - [`Error::Dma`].
    pub fn post<B: Bus>(
        &mut self,
        bus: &mut B,
        opcode: u16,
        inlen: usize,
        outlen: usize,
    ) -> Result<(), Error> {
        self.post_in(bus, opcode, inlen, outlen, &[])
    }

    /// As [`CmdIf::post`], the input's blocks past entry 0's pool being
    /// `ext` ([`CmdIf::exec_ext`]).
    fn post_in<B: Bus>(
        &mut self,
        bus: &mut B,
        opcode: u16,
        inlen: usize,
        outlen: usize,
        ext: &[u64],
    ) -> Result<(), Error> {
        let command = opcode_name(opcode);
        let in_blocks = Blocks {
            pool: self.pools.in_pool,
            n: self.pools.blocks,
            ext,
        };
        let out_blocks = Blocks::pool(self.pools.out_pool, self.pools.blocks);
        for (len, min, max) in [
            (inlen, IN_HEADER_SIZE, in_blocks.max_msg_len()),
            (outlen, OUT_STATUS_SIZE, self.max_msg_len()),
        ] {
            if len < min || len > max {
                return Err(Error::TooLong {
                    command,
                    opcode,
                    len,
                    max,
                });
            }
        }
        self.outlen = 0;
        if self.internal_error || bus.fatal() {
            self.internal_error = true;
            return Err(Error::InternalError { command, opcode });
        }
        // A device that is gone answers nothing: say so at once rather
        // than wait out the command timeout (60 s) for every command.
        if self.gone || device_gone(bus) {
            self.gone = true;
            return Err(Error::DeviceGone { command, opcode });
        }
        let n_out = mailbox_count(outlen);
        let uses_pools = mailbox_count(inlen) != 0 || n_out != 0;
        self.reap_stuck(bus)?;
        let busy = Error::QueueBusy { command, opcode };
        // Entry 0 carries the mailboxes. A command without any takes an
        // entry without pools (past the lanes), else a lane, entry 0 last:
        // were it kept by the device, entry 0's pools would go with it.
        let free = self.free_entries();
        let with_pools = u32::MAX
            .checked_shr(31u32.saturating_sub(LANES as u32))
            .unwrap_or(u32::MAX);
        let slot = match (uses_pools, free) {
            (_, 0) => return Err(busy),
            (true, f) if f & 1 == 0 => return Err(busy),
            (true, _) => 0,
            (false, f) if f & !with_pools != 0 => (f & !with_pools).trailing_zeros() as usize,
            (false, f) if f & !1 != 0 => (f & !1).trailing_zeros() as usize,
            (false, _) => 0,
        };
        let entry_addr = self.launch(
            bus,
            slot,
            (in_blocks, out_blocks),
            self.in_inline,
            inlen,
            outlen,
            opcode,
        )?;

        // Poll the ownership bit; look at the device itself every
        // millisecond, in case it went away with the command.
        let start = bus.now_ns();
        let mut looked = start;
        loop {
            if !self.owned(bus, entry_addr)? {
                break;
            }
            let now = bus.now_ns();
            if now.saturating_sub(looked) >= ms_to_ns(1) {
                looked = now;
                if bus.fatal() {
                    // The embedder's health check failed meanwhile: the
                    // entry stays the device's, as after a timeout.
                    return Err(self.keep(bus, slot, Lost::Fatal, command, opcode));
                }
                if device_gone(bus) {
                    return Err(self.keep(bus, slot, Lost::Gone, command, opcode));
                }
            }
            if now.saturating_sub(start) >= ms_to_ns(self.timeouts.cmd_ms) {
                return Err(self.keep(bus, slot, Lost::Timeout, command, opcode));
            }
            bus.relax(Wait::Command);
        }

        self.out_inline = self.collect(bus, entry_addr, out_blocks, n_out, command, opcode)?;
        self.outlen = outlen;
        check_status(&self.out_inline, command, opcode)
    }

    /// Writes the mailbox chains of entry `slot` (in its input and output
    /// `blocks`), fills and signs the entry, and rings its doorbell.
    /// Returns the entry's DMA address.
    #[allow(clippy::too_many_arguments)]
    fn launch<B: Bus>(
        &mut self,
        bus: &mut B,
        slot: usize,
        blocks: (Blocks<'_>, Blocks<'_>),
        in_inline: [u8; INLINE_SIZE],
        inlen: usize,
        outlen: usize,
        opcode: u16,
    ) -> Result<u64, Error> {
        let (in_blocks, out_blocks) = blocks;
        let n_in = mailbox_count(inlen);
        let n_out = mailbox_count(outlen);
        self.token = self.token.wrapping_add(1).max(1);
        let (token, sign) = (self.token, self.checksums);
        let chain = |blocks, count, inlen| Chain {
            blocks,
            count,
            token,
            sign,
            inlen,
        };
        chain(in_blocks, n_in, Some(inlen)).write(bus)?;
        chain(out_blocks, n_out, None).write(bus)?;

        let entry_addr = self.entry_addr(slot)?;
        let layout = CmdLayout {
            cmd_type: PCI_CMD_XPORT,
            inlen: u32::try_from(inlen).unwrap_or(u32::MAX),
            in_ptr: if n_in > 0 { in_blocks.pool } else { 0 },
            in_data: in_inline,
            out_data: [0; INLINE_SIZE],
            out_ptr: if n_out > 0 { out_blocks.pool } else { 0 },
            outlen: u32::try_from(outlen).unwrap_or(u32::MAX),
            token: self.token,
            sig: 0,
            status: DeliveryStatus::Ok,
            ownership: true,
        };
        let mut entry = [0u8; CMD_LAYOUT_SIZE];
        layout.encode(&mut entry);
        sign_layout(&mut entry);
        bus.dma_write(entry_addr, &entry)
            .map_err(|_| Error::Dma { addr: entry_addr })?;
        let command = opcode_name(opcode);
        bus.write32(
            CMD_DBELL_OFFSET,
            doorbell(slot).map_err(|_| Error::QueueBusy { command, opcode })?,
        );
        Ok(entry_addr)
    }

    /// Reads back an entry the device handed back and checks it: its
    /// signature and those of its `n_out` output mailboxes at `out_pool`
    /// (checksums on), and its delivery status. Returns the output's first
    /// 16 bytes.
    fn collect<B: Bus>(
        &self,
        bus: &mut B,
        entry_addr: u64,
        out_blocks: Blocks<'_>,
        n_out: usize,
        command: &'static str,
        opcode: u16,
    ) -> Result<[u8; INLINE_SIZE], Error> {
        let mut entry = [0u8; CMD_LAYOUT_SIZE];
        bus.dma_read(entry_addr, &mut entry)
            .map_err(|_| Error::Dma { addr: entry_addr })?;
        let done = CmdLayout::decode(&entry);
        let bad_sig = Error::Signature { command, opcode };
        if self.checksums && !layout_signature_ok(&entry) {
            return Err(bad_sig);
        }
        if done.status != DeliveryStatus::Ok {
            return Err(Error::Cmd(CmdError::Delivery {
                command,
                opcode,
                status: done.status,
            }));
        }
        if self.checksums {
            let mut blk = [0u8; MAILBOX_SIZE];
            for i in 0..n_out {
                let addr = out_blocks.addr(i).ok_or(Error::BadCmdMem)?;
                bus.dma_read(addr, &mut blk)
                    .map_err(|_| Error::Dma { addr })?;
                if !block_signature_ok(&blk) {
                    return Err(bad_sig);
                }
            }
        }
        Ok(done.out_data)
    }

    /// Entries neither kept by the device nor taken by a started
    /// command, a bit per entry of the queue (1 to 32 of them).
    fn free_entries(&self) -> u32 {
        let unused = MAX_COMMANDS.saturating_sub(self.entries()) as u32;
        let all = u32::MAX.checked_shr(unused).unwrap_or(1);
        all & !self.stuck & !self.busy
    }

    /// The DMA address of queue entry `slot`.
    fn entry_addr(&self, slot: usize) -> Result<u64, Error> {
        let off = entry_offset(slot, self.log_stride).map_err(|_| Error::BadCmdMem)?;
        Ok(self.pools.cmdq.saturating_add(off as u64))
    }

    /// Whether the device owns the entry at `entry_addr`.
    fn owned<B: Bus>(&self, bus: &mut B, entry_addr: u64) -> Result<bool, Error> {
        let addr = entry_addr.saturating_add(STATUS_OWN_OFFSET as u64);
        let mut own = [0u8; 1];
        bus.dma_read(addr, &mut own)
            .map_err(|_| Error::Dma { addr })?;
        let [own] = own;
        Ok(owned_by_hw(own))
    }

    /// Frees the entries (and their pools) the device has handed back
    /// since their commands timed out.
    fn reap_stuck<B: Bus>(&mut self, bus: &mut B) -> Result<(), Error> {
        let mut slot = 0;
        while self.stuck != 0 && slot < MAX_COMMANDS {
            if self.stuck & (1 << slot) != 0 && !self.owned(bus, self.entry_addr(slot)?)? {
                self.stuck &= !(1 << slot);
            }
            slot += 1;
        }
        Ok(())
    }
}

/// Why a started command was given up ([`CmdIf::give_up`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lost {
    /// The command timeout passed.
    Timeout,
    /// The embedder found the function failed ([`Bus::fatal`]).
    Fatal,
    /// The device reads all ones: it is gone.
    Gone,
}

/// A command started on a lane ([`CmdIf::start`]) and not yet finished.
/// It is not `Clone`: it is finished or given up once.
#[derive(Debug, PartialEq, Eq)]
pub struct Ticket {
    entry: usize,
    opcode: u16,
    command: &'static str,
    entry_addr: u64,
    outlen: usize,
}

impl Ticket {
    /// The queue entry the command runs in.
    pub fn entry(&self) -> usize {
        self.entry
    }

    /// The entry's bit in a command EQE's completion vector.
    pub fn bit(&self) -> u32 {
        1u32.checked_shl(self.entry as u32).unwrap_or(0)
    }

    /// The DMA address of the entry's `status_own` byte, whose ownership
    /// bit the device clears when it hands the entry back
    /// ([`owned_by_hw`]).
    pub fn own_addr(&self) -> u64 {
        self.entry_addr.saturating_add(STATUS_OWN_OFFSET as u64)
    }

    /// The command's opcode.
    pub fn opcode(&self) -> u16 {
        self.opcode
    }

    /// The command's name, as `opcode_name` spells it.
    pub fn command(&self) -> &'static str {
        self.command
    }
}

/// What [`CmdIf::start`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Started<T> {
    /// The command runs on a lane: wait, then [`CmdIf::finish`].
    Posted(Ticket),
    /// The function is in internal error and the command only takes
    /// something down: here is its output, nothing was posted.
    Answered(T),
}

/// The error of a message of `len` bytes where `max` fit, for command
/// `C`.
fn too_long<C: Command>(len: usize, max: usize) -> Error {
    Error::TooLong {
        command: C::NAME,
        opcode: C::OPCODE,
        len,
        max,
    }
}

/// Checks that command `C` with `pas` page-list entries can be encoded
/// and fits messages of `max` bytes; returns its input layout's size, its
/// output's and its message length.
fn check_exec<C: Command>(pas: usize, max: usize) -> Result<(usize, usize, usize), Error> {
    let in_size = <C::In as Layout>::SIZE;
    let out_size = <C::Out as Layout>::SIZE;
    let inlen = in_len::<C>(pas);
    if in_size > MAX_LAYOUT || out_size > MAX_LAYOUT {
        return Err(too_long::<C>(in_size.max(out_size), MAX_LAYOUT));
    }
    if !C::IN_PAS && pas != 0 {
        return Err(too_long::<C>(inlen, in_size));
    }
    if inlen > max {
        return Err(too_long::<C>(inlen, max));
    }
    Ok((in_size, out_size, inlen))
}

/// Decodes the output of command `C`.
fn decode<C: Command>(out: &[u8]) -> Result<C::Out, Error> {
    C::Out::decode(out).map_err(|_| {
        Error::Cmd(CmdError::ShortOutput {
            command: C::NAME,
            opcode: C::OPCODE,
            len: out.len(),
            need: <C::Out as Layout>::SIZE,
        })
    })
}

/// The output's status and syndrome, from its first 16 bytes.
fn check_status(out: &[u8; INLINE_SIZE], command: &'static str, opcode: u16) -> Result<(), Error> {
    let [status, _, _, _, s0, s1, s2, s3, ..] = *out;
    let status = CmdStatus::from_raw(status);
    if status != CmdStatus::Ok {
        return Err(Error::Cmd(CmdError::Failed {
            command,
            opcode,
            status,
            syndrome: u32::from_be_bytes([s0, s1, s2, s3]),
        }));
    }
    Ok(())
}

fn check_range(offset: usize, len: usize, limit: usize) -> Result<(), Error> {
    match offset.checked_add(len) {
        Some(end) if end <= limit => Ok(()),
        _ => Err(Error::OutOfRange { offset, len }),
    }
}

/// Encodes `input` of command `C` and its page list `pas` into the input
/// message whose first 16 bytes are `inline` and the rest the pool at
/// `pool` (the caller checked the length, [`check_exec`]).
fn stage<C: Command, B: Bus>(
    bus: &mut B,
    pool: Blocks<'_>,
    inline: &mut [u8; INLINE_SIZE],
    input: &C::In,
    pas: &[u64],
) -> Result<(), Error> {
    let in_size = <C::In as Layout>::SIZE;
    let mut buf = [0u8; MAX_LAYOUT];
    let fixed = buf
        .get_mut(..in_size)
        .ok_or(too_long::<C>(in_size, MAX_LAYOUT))?;
    input
        .encode(fixed)
        .map_err(|_| too_long::<C>(in_size, MAX_LAYOUT))?;
    write_msg(bus, pool, inline, 0, fixed)?;
    // The page list, eight entries per DMA write.
    let mut chunk = [0u8; 8 * PAS_ENTRY_SIZE];
    let mut k = 0;
    while k < pas.len() {
        let n = pas.len().saturating_sub(k).min(8);
        let mut j = 0;
        while j < n {
            let at = j.saturating_mul(PAS_ENTRY_SIZE);
            if let (Some(dst), Some(addr)) = (
                chunk.get_mut(at..at.saturating_add(PAS_ENTRY_SIZE)),
                pas.get(k.saturating_add(j)),
            ) {
                dst.copy_from_slice(&addr.to_be_bytes());
            }
            j = j.saturating_add(1);
        }
        let at = in_size.saturating_add(k.saturating_mul(PAS_ENTRY_SIZE));
        write_msg(
            bus,
            pool,
            inline,
            at,
            chunk.get(..n.saturating_mul(PAS_ENTRY_SIZE)).unwrap_or(&[]),
        )?;
        k = k.saturating_add(n.max(1));
    }
    Ok(())
}

/// Walks message bytes `offset..offset + len` of the message whose rest
/// (past the inline 16 bytes) is the blocks `pool`, one contiguous run at
/// a time: `f` gets where the run lies and which bytes of the caller's
/// buffer (`0..len`) it holds.
fn for_runs(
    pool: Blocks<'_>,
    offset: usize,
    len: usize,
    mut f: impl FnMut(Place, core::ops::Range<usize>) -> Result<(), Error>,
) -> Result<(), Error> {
    let mut done = 0;
    while done < len {
        let at = offset.saturating_add(done);
        let left = len.saturating_sub(done);
        let (place, run) = pool.place(at).ok_or(Error::OutOfRange {
            offset: at,
            len: left,
        })?;
        let n = run.min(left).max(1);
        f(place, done..done.saturating_add(n))?;
        done = done.saturating_add(n);
    }
    Ok(())
}

/// Writes `bytes` at byte `offset` of the message whose first 16 bytes
/// are `inline` and the rest the blocks `pool`.
fn write_msg<B: Bus>(
    bus: &mut B,
    pool: Blocks<'_>,
    inline: &mut [u8; INLINE_SIZE],
    offset: usize,
    bytes: &[u8],
) -> Result<(), Error> {
    for_runs(pool, offset, bytes.len(), |place, r| {
        let src = bytes.get(r).unwrap_or(&[]);
        match place {
            Place::Inline(i) => {
                // Element by element: no length check that could panic.
                let dst = inline.get_mut(i..).unwrap_or(&mut []);
                for (d, v) in dst.iter_mut().zip(src) {
                    *d = *v;
                }
                Ok(())
            }
            Place::Dma(addr) => bus.dma_write(addr, src).map_err(|_| Error::Dma { addr }),
        }
    })
}

/// Reads bytes of the message whose first 16 bytes are `inline` and the
/// rest the blocks `pool`.
fn read_msg<B: Bus>(
    bus: &mut B,
    pool: Blocks<'_>,
    inline: &[u8; INLINE_SIZE],
    offset: usize,
    buf: &mut [u8],
) -> Result<(), Error> {
    for_runs(pool, offset, buf.len(), |place, r| {
        let dst = buf.get_mut(r).unwrap_or(&mut []);
        match place {
            Place::Inline(i) => {
                let src = inline.get(i..).unwrap_or(&[]);
                for (d, v) in dst.iter_mut().zip(src) {
                    *d = *v;
                }
                Ok(())
            }
            Place::Dma(addr) => bus.dma_read(addr, dst).map_err(|_| Error::Dma { addr }),
        }
    })
}
