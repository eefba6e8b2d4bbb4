// SPDX-License-Identifier: GPL-2.0

//! ioctl decoding: copying a command's argument in, validating it, and
//! copying the answer out.
//!
//! Every command's argument starts with a `CmdHdr` giving the size of the
//! struct as the caller knows it. The kernel copies in the part it knows,
//! checks that the rest (a newer caller's fields) is zero, chunk by chunk
//! and without a large buffer, decodes the bytes with [`Wire`] and runs
//! the command's `check()` from `rmlx5-abi`. Only then does the command
//! look at kernel state. The answer is written back over the known part.

use kernel::{
    prelude::*,
    uaccess::{
        UserPtr,
        UserSlice, //
    },
};

use crate::hca_model::caps::Caps;
use crate::rmlx5_abi::{
    check::{
        arg_size,
        Invalid,
        Limits, //
    },
    ioctl::Command,
    uapi::CmdHdr,
    wire::Wire,
};

/// Largest struct this kernel knows (`CREATE_QP`, 152 bytes).
const MAX_KNOWN: usize = 160;

/// Most CQEs of a user CQ: the model allows `1 << max_log_cq_size`, but
/// the ring is kernel pages the module allocates, so the driver caps it.
const MAX_USER_CQE: u32 = 1 << 16;
/// Largest user MR (pinned and `vmap`ped as one range).
const MAX_USER_MR: u64 = 1 << 32;

/// The device limits commands are checked against, and `QUERY_DEVICE`
/// reports, from the HCA's caps and its number of completion EQs.
///
/// `max_qp_wr` leaves room for the largest WQE (up to 16 WQEBBs with the
/// gather list or inline data at their limits) within the SQ's
/// `1 << max_log_sq_wqebbs` WQEBBs, so every QP within the limits is one
/// the HCA accepts.
pub(crate) fn limits(caps: &Caps, num_comp_vectors: u32) -> Limits {
    Limits {
        max_qp_wr: 1
            << caps
                .max_log_sq_wqebbs
                .min(caps.max_log_rq_wqes)
                .saturating_sub(4),
        max_sge: caps.max_send_sge.min(caps.max_recv_sge),
        max_cqe: MAX_USER_CQE.min(1 << caps.max_log_cq_size.min(31)),
        max_inline_data: caps.max_inline_data,
        num_comp_vectors,
        max_qp_rd_atom: u32::from(caps.max_qp_dest_rd_atom),
        max_qp_init_rd_atom: u32::from(caps.max_qp_rd_atom),
        max_mr_size: MAX_USER_MR,
    }
}

/// The limits of a default HCA with four completion vectors (tests).
#[cfg(CONFIG_KUNIT)]
pub(crate) fn default_limits() -> Limits {
    limits(&Caps::DEFAULT, 4)
}

/// The errno for a refused argument.
pub(crate) fn invalid(e: Invalid) -> Error {
    Error::from_errno(-e.errno())
}

/// A command argument in user memory at `arg`.
pub(crate) struct Arg {
    addr: usize,
}

impl Arg {
    /// The argument at user address `arg`.
    pub(crate) fn new(arg: usize) -> Self {
        Self { addr: arg }
    }

    /// Copies in and decodes a `T`, checking the header size and that any
    /// bytes beyond `T` are zero.
    ///
    /// # Errors
    ///
    /// `EFAULT` for unreadable memory, `EINVAL` for a size below `T`,
    /// `E2BIG` for a size above the limit or non-zero unknown bytes.
    pub(crate) fn read<T: Wire>(&self) -> Result<T> {
        let mut hdr = [0u8; CmdHdr::SIZE];
        UserSlice::new(UserPtr::from_addr(self.addr), CmdHdr::SIZE)
            .reader()
            .read_slice(&mut hdr)?;
        let hdr = CmdHdr::read(&hdr).ok_or(EINVAL)?;
        let known = arg_size(hdr.size, T::SIZE).map_err(invalid)?;
        let mut reader = UserSlice::new(UserPtr::from_addr(self.addr), hdr.size as usize).reader();
        let mut buf = [0u8; MAX_KNOWN];
        let bytes = buf.get_mut(..known).ok_or(EINVAL)?;
        reader.read_slice(bytes)?;
        let mut chunk = [0u8; 64];
        while !reader.is_empty() {
            let n = reader.len().min(chunk.len());
            let part = chunk.get_mut(..n).ok_or(EINVAL)?;
            reader.read_slice(part)?;
            if part.iter().any(|&b| b != 0) {
                return Err(invalid(Invalid::UnknownTail));
            }
        }
        T::read(bytes).ok_or(EINVAL)
    }

    /// Writes `v` back over the known part of the argument.
    pub(crate) fn write<T: Wire>(&self, v: &T) -> Result {
        let mut buf = [0u8; MAX_KNOWN];
        let bytes = buf.get_mut(..T::SIZE).ok_or(EINVAL)?;
        v.write(bytes).ok_or(EINVAL)?;
        UserSlice::new(UserPtr::from_addr(self.addr), T::SIZE)
            .writer()
            .write_slice(bytes)
    }
}

/// Decodes an ioctl number; `ENOTTY` for anything that is not ours.
pub(crate) fn command(cmd: u32) -> Result<Command> {
    Command::from_cmd(cmd).ok_or(ENOTTY)
}

#[kunit_tests(rmlx5_uverbs_cmd)]
mod tests {
    use super::*;
    use crate::rmlx5_abi::uapi::{
        CreateCq,
        CreateQp, //
    };

    #[test]
    fn largest_struct_fits() -> Result {
        for c in Command::ALL {
            assert!(c.min_size() <= MAX_KNOWN);
        }
        assert!(CreateQp::SIZE <= MAX_KNOWN);
        Ok(())
    }

    #[test]
    fn foreign_numbers_are_enotty() -> Result {
        assert_eq!(command(0).err(), Some(ENOTTY));
        assert_eq!(command(0x5401).err(), Some(ENOTTY));
        // Our magic and number range, wrong direction.
        assert_eq!(command(0x8008_1b80).err(), Some(ENOTTY));
        assert_eq!(command(0xc018_1b7f).err(), Some(ENOTTY));
        for c in Command::ALL {
            assert_eq!(command(c.cmd())?, *c);
        }
        Ok(())
    }

    #[test]
    fn invalid_maps_to_errno() -> Result {
        assert_eq!(invalid(Invalid::TooSmall), EINVAL);
        assert_eq!(invalid(Invalid::TooLarge), E2BIG);
        assert_eq!(invalid(Invalid::UnknownTail), E2BIG);
        assert_eq!(invalid(Invalid::NotZero("x")), EINVAL);
        assert_eq!(invalid(Invalid::Range("x")), EINVAL);
        Ok(())
    }

    #[test]
    fn create_cq_checks_against_limits() -> Result {
        let limits = default_limits();
        let mut req = CreateCq {
            hdr: CmdHdr {
                size: CreateCq::SIZE as u32,
                flags: 0,
            },
            cqe: 100,
            channel_fd: -1,
            ..CreateCq::default()
        };
        assert_eq!(req.check(&limits), Ok(128));
        req.cqe = limits.max_cqe + 1;
        assert!(req.check(&limits).is_err());
        req.cqe = 1;
        req.comp_vector = limits.num_comp_vectors;
        assert!(req.check(&limits).is_err());
        req.comp_vector = 0;
        req.channel_fd = -2;
        assert!(req.check(&limits).is_err());
        req.channel_fd = -1;
        req.hdr.flags = 1;
        assert!(req.check(&limits).is_err());
        Ok(())
    }
}
