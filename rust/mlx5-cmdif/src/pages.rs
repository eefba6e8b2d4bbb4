// SPDX-License-Identifier: GPL-2.0

//! The pages a function lends its device: QUERY_PAGES, and MANAGE_PAGES to
//! give and take them back, as mlx5_core's page allocator does.
//!
//! The crate keeps counts only. Page addresses come from
//! [`Bus::alloc_page`], go to the device in the MANAGE_PAGES input (written
//! straight into the input mailboxes), and come back in its output, from
//! where they go to [`Bus::free_page`]. A page list that has to be undone
//! (the allocation ran short, or the device refused the command) is read
//! back from the input mailboxes, so nothing needs a buffer of its own.
//!
//! A give whose outcome is unknown (it timed out, or its completion came
//! back garbled) is counted as lent: the device may have taken the pages,
//! and freeing memory a device may write is worse than holding it until
//! teardown's reclaim tells.

use super::bus::{Bus, Wait};
use super::cmdif::{ms_to_ns, CmdIf};
use super::error::Error;
use super::prm::cmd_hca::{
    ManagePages, ManagePagesIn, ManagePagesOut, QueryPages, QueryPagesIn,
    MANAGE_PAGES_ALLOCATION_FAIL, MANAGE_PAGES_ALLOCATION_SUCCESS, MANAGE_PAGES_HCA_RETURN_PAGES,
    QUERY_PAGES_BOOT, QUERY_PAGES_INIT,
};
use super::prm::command::OP_MANAGE_PAGES;
use super::prm::ifc::{Layout, PAS_ENTRY_SIZE};

/// The size of a page lent to the device.
pub const PAGE_SIZE: u64 = 4096;
/// Page addresses per DMA access when a list is written or read.
const BATCH: usize = 64;

/// The page accounts of one function.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pages {
    lent: u64,
    given_total: u64,
    returned_total: u64,
    alloc_failures: u64,
}

/// How many page addresses follow a 16-byte MANAGE_PAGES header in a
/// message of at most `max_msg_len` bytes.
fn per_command(max_msg_len: usize) -> u32 {
    let n = max_msg_len.saturating_sub(ManagePagesIn::SIZE) / PAS_ENTRY_SIZE;
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The message offset of page-list entry `k`.
fn entry_at(k: u32) -> usize {
    (k as usize)
        .saturating_mul(PAS_ENTRY_SIZE)
        .saturating_add(ManagePagesIn::SIZE)
}

/// Writes the MANAGE_PAGES header for `op_mod` and `n` entries.
fn write_header<B: Bus>(cmd: &mut CmdIf, bus: &mut B, op_mod: u16, n: u32) -> Result<(), Error> {
    let mut hdr = [0u8; ManagePagesIn::SIZE];
    ManagePagesIn {
        op_mod,
        input_num_entries: n,
        ..ManagePagesIn::default()
    }
    .encode(&mut hdr)
    .map_err(|_| Error::OutOfRange {
        offset: 0,
        len: ManagePagesIn::SIZE,
    })?;
    cmd.write_in(bus, 0, &hdr)
}

/// Allocates `k` pages and stages their addresses as the input's page
/// list. Returns how many were staged: fewer than `k` if memory ran short.
fn alloc_into<B: Bus>(cmd: &mut CmdIf, bus: &mut B, k: u32) -> Result<u32, Error> {
    let mut chunk = [0u8; BATCH * PAS_ENTRY_SIZE];
    let mut staged = 0u32;
    while staged < k {
        let want = (k.saturating_sub(staged) as usize).min(BATCH);
        let mut got = 0;
        let mut short = false;
        while got < want {
            let page = match bus.alloc_page() {
                Some(a) if a & (PAGE_SIZE - 1) == 0 => a,
                Some(a) => {
                    // Not a page address: an embedder bug, treated as
                    // memory that could not be had.
                    bus.free_page(a);
                    short = true;
                    break;
                }
                None => {
                    short = true;
                    break;
                }
            };
            let at = got.saturating_mul(PAS_ENTRY_SIZE);
            if let Some(dst) = chunk.get_mut(at..).and_then(<[u8]>::first_chunk_mut) {
                *dst = page.to_be_bytes();
            }
            got = got.saturating_add(1);
        }
        let bytes = chunk
            .get(..got.saturating_mul(PAS_ENTRY_SIZE))
            .unwrap_or(&[]);
        cmd.write_in(bus, entry_at(staged), bytes)?;
        staged = staged.saturating_add(got as u32);
        if short {
            break;
        }
    }
    Ok(staged)
}

/// Calls `f` with each of the `n` page addresses at message offset
/// `ManagePagesIn::SIZE` of the staged input (`output` false) or of the
/// last output (`output` true).
fn for_each_page<B: Bus>(
    cmd: &CmdIf,
    bus: &mut B,
    output: bool,
    n: u32,
    mut f: impl FnMut(&mut B, u64),
) -> Result<(), Error> {
    let mut chunk = [0u8; BATCH * PAS_ENTRY_SIZE];
    let mut done = 0u32;
    while done < n {
        let k = (n.saturating_sub(done) as usize).min(BATCH);
        let bytes = chunk
            .get_mut(..k.saturating_mul(PAS_ENTRY_SIZE))
            .unwrap_or(&mut []);
        if output {
            cmd.read_out(bus, entry_at(done), bytes)?;
        } else {
            cmd.read_in(bus, entry_at(done), bytes)?;
        }
        let mut j = 0;
        while j < k {
            let at = j.saturating_mul(PAS_ENTRY_SIZE);
            if let Some(raw) = bytes.get(at..).and_then(<[u8]>::first_chunk) {
                f(bus, u64::from_be_bytes(*raw));
            }
            j = j.saturating_add(1);
        }
        done = done.saturating_add(k as u32);
    }
    Ok(())
}

impl Pages {
    /// No page lent.
    pub const fn new() -> Self {
        Pages {
            lent: 0,
            given_total: 0,
            returned_total: 0,
            alloc_failures: 0,
        }
    }

    /// Pages the device holds now, by the driver's count.
    pub fn lent(&self) -> u64 {
        self.lent
    }

    /// Writes off every page lent, after the function failed and was
    /// stopped (internal error, see `Function::teardown`): the device no
    /// longer holds them, and the embedder, which has their addresses,
    /// frees them once the device can no longer write them. Returns how
    /// many there were.
    pub fn abandon(&mut self) -> u64 {
        core::mem::take(&mut self.lent)
    }

    /// Pages given since creation.
    pub fn given_total(&self) -> u64 {
        self.given_total
    }

    /// Pages returned (and freed) since creation.
    pub fn returned_total(&self) -> u64 {
        self.returned_total
    }

    /// Gives that ran out of memory.
    pub fn alloc_failures(&self) -> u64 {
        self.alloc_failures
    }

    /// QUERY_PAGES with `op_mod` (`QUERY_PAGES_*`): the pages the device
    /// asks for (negative: pages it can spare).
    ///
    /// # Errors
    ///
    /// As [`CmdIf::exec`].
    pub fn query<B: Bus>(cmd: &mut CmdIf, bus: &mut B, op_mod: u16) -> Result<i32, Error> {
        let input = QueryPagesIn {
            op_mod,
            ..QueryPagesIn::default()
        };
        Ok(cmd.exec::<QueryPages, B>(bus, &input, &[])?.num_pages)
    }

    /// What mlx5_core's `mlx5_satisfy_startup_pages` does: QUERY_PAGES for
    /// the boot (`boot`) or init pages, then gives them. Returns the number
    /// given.
    ///
    /// # Errors
    ///
    /// As [`Pages::query`] and [`Pages::give`].
    pub fn satisfy_startup<B: Bus>(
        &mut self,
        cmd: &mut CmdIf,
        bus: &mut B,
        boot: bool,
    ) -> Result<u32, Error> {
        let op_mod = if boot {
            QUERY_PAGES_BOOT
        } else {
            QUERY_PAGES_INIT
        };
        let n = u32::try_from(Self::query(cmd, bus, op_mod)?).unwrap_or(0);
        if n > 0 {
            self.give(cmd, bus, n, false)?;
        }
        Ok(n)
    }

    /// Allocates `n` pages and gives them with MANAGE_PAGES, as many per
    /// command as the mailboxes hold. If memory runs short, the pages of
    /// the current command are freed again and, with `notify_fail` (the
    /// answer to a page request), the device is told with MANAGE_PAGES
    /// "allocation failed".
    ///
    /// # Errors
    ///
    /// [`Error::PageAlloc`] when memory ran short (pages of earlier
    /// commands stay given), otherwise as [`CmdIf::post`]. The pages of a
    /// command the device refused are freed; those of one whose outcome is
    /// unknown ([`Error::Timeout`], [`Error::Signature`]) stay counted as
    /// lent.
    pub fn give<B: Bus>(
        &mut self,
        cmd: &mut CmdIf,
        bus: &mut B,
        n: u32,
        notify_fail: bool,
    ) -> Result<(), Error> {
        let per = per_command(cmd.max_msg_len()).max(1);
        let mut given = 0u32;
        while given < n {
            let k = n.saturating_sub(given).min(per);
            let staged = alloc_into(cmd, bus, k)?;
            if staged < k {
                for_each_page(cmd, bus, false, staged, |bus, a| {
                    bus.free_page(a);
                })?;
                self.alloc_failures = self.alloc_failures.saturating_add(1);
                if notify_fail {
                    let input = ManagePagesIn {
                        op_mod: MANAGE_PAGES_ALLOCATION_FAIL,
                        ..ManagePagesIn::default()
                    };
                    // The allocation failure is what the caller needs
                    // to hear about; a failed notice adds nothing.
                    let _ = cmd.exec::<ManagePages, B>(bus, &input, &[]);
                }
                return Err(Error::PageAlloc { wanted: n, given });
            }
            write_header(cmd, bus, MANAGE_PAGES_ALLOCATION_SUCCESS, k)?;
            let inlen = entry_at(k);
            match cmd.post(bus, OP_MANAGE_PAGES, inlen, ManagePagesOut::SIZE) {
                Ok(()) => {}
                // Not posted, or refused: the device did not take them.
                Err(e @ (Error::Cmd(_) | Error::QueueBusy { .. } | Error::TooLong { .. })) => {
                    for_each_page(cmd, bus, false, k, |bus, a| {
                        bus.free_page(a);
                    })?;
                    return Err(e);
                }
                // A timeout or a garbled completion: it may have.
                Err(e) => {
                    self.lent = self.lent.saturating_add(u64::from(k));
                    return Err(e);
                }
            }
            self.lent = self.lent.saturating_add(u64::from(k));
            self.given_total = self.given_total.saturating_add(u64::from(k));
            given = given.saturating_add(k);
        }
        Ok(())
    }

    /// Asks the device for up to `n` pages back with MANAGE_PAGES, in as
    /// many commands as needed, and frees what it returns; stops early
    /// when the device returns fewer than asked. Returns the number taken.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownPage`] if the device returned an address it was not
    /// given (the others are still freed), otherwise as [`CmdIf::post`].
    pub fn take<B: Bus>(&mut self, cmd: &mut CmdIf, bus: &mut B, n: u32) -> Result<u32, Error> {
        let per = per_command(cmd.max_msg_len()).max(1);
        let mut taken = 0u32;
        while taken < n {
            let k = n.saturating_sub(taken).min(per);
            let got = self.take_once(cmd, bus, k)?;
            taken = taken.saturating_add(got);
            if got < k {
                break;
            }
        }
        Ok(taken)
    }

    /// One MANAGE_PAGES take of up to `k` pages.
    fn take_once<B: Bus>(&mut self, cmd: &mut CmdIf, bus: &mut B, k: u32) -> Result<u32, Error> {
        write_header(cmd, bus, MANAGE_PAGES_HCA_RETURN_PAGES, k)?;
        let outlen = entry_at(k);
        cmd.post(bus, OP_MANAGE_PAGES, ManagePagesIn::SIZE, outlen)?;
        let mut hdr = [0u8; ManagePagesOut::SIZE];
        cmd.read_out(bus, 0, &mut hdr)?;
        let out = ManagePagesOut::decode(&hdr).map_err(|_| Error::OutOfRange {
            offset: 0,
            len: ManagePagesOut::SIZE,
        })?;
        // Only `k` addresses fit the output; a larger count is the
        // device's error and cannot be followed.
        let m = out.output_num_entries.min(k);
        let mut unknown = None;
        let (mut freed, lent) = (0u64, &mut self.lent);
        for_each_page(cmd, bus, true, m, |bus, a| {
            if bus.free_page(a) {
                *lent = lent.saturating_sub(1);
                freed = freed.saturating_add(1);
            } else {
                unknown.get_or_insert(a);
            }
        })?;
        self.returned_total = self.returned_total.saturating_add(freed);
        match unknown {
            Some(addr) => Err(Error::UnknownPage { addr }),
            None => Ok(m),
        }
    }

    /// Takes every lent page back, as mlx5_core's
    /// `mlx5_reclaim_startup_pages` does at teardown: MANAGE_PAGES take
    /// until the count is zero, giving up when the device returns nothing
    /// for `ms` milliseconds.
    ///
    /// # Errors
    ///
    /// [`Error::PagesNotReturned`] on that timeout, otherwise as
    /// [`Pages::take`].
    pub fn reclaim_all<B: Bus>(
        &mut self,
        cmd: &mut CmdIf,
        bus: &mut B,
        ms: u64,
    ) -> Result<(), Error> {
        let per = per_command(cmd.max_msg_len()).max(1);
        let mut progress = bus.now_ns();
        while self.lent > 0 {
            let k = u32::try_from(self.lent).unwrap_or(u32::MAX).min(per);
            if self.take_once(cmd, bus, k)? > 0 {
                progress = bus.now_ns();
                continue;
            }
            if bus.now_ns().saturating_sub(progress) >= ms_to_ns(ms) {
                return Err(Error::PagesNotReturned {
                    left: self.lent,
                    ms,
                });
            }
            bus.relax(Wait::Pages);
        }
        Ok(())
    }
}
