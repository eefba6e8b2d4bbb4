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

/// The device limits commands are checked against, and `QUERY_DEVICE`
/// reports.
pub(crate) const LIMITS: Limits = Limits {
    max_qp_wr: 8192,
    max_sge: 30,
    max_cqe: 1 << 16,
    max_inline_data: 512,
    num_comp_vectors: 4,
    max_qp_rd_atom: 16,
    max_qp_init_rd_atom: 16,
    max_mr_size: 1 << 32,
};

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
        let mut req = CreateCq {
            hdr: CmdHdr {
                size: CreateCq::SIZE as u32,
                flags: 0,
            },
            cqe: 100,
            channel_fd: -1,
            ..CreateCq::default()
        };
        assert_eq!(req.check(&LIMITS), Ok(128));
        req.cqe = LIMITS.max_cqe + 1;
        assert!(req.check(&LIMITS).is_err());
        req.cqe = 1;
        req.comp_vector = LIMITS.num_comp_vectors;
        assert!(req.check(&LIMITS).is_err());
        req.comp_vector = 0;
        req.channel_fd = -2;
        assert!(req.check(&LIMITS).is_err());
        req.channel_fd = -1;
        req.hdr.flags = 1;
        assert!(req.check(&LIMITS).is_err());
        Ok(())
    }
}
