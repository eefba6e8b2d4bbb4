// SPDX-License-Identifier: GPL-2.0

//! What the fuzzer expects of a call: the errnos Documentation/uverbs.md
//! allows per command, and the argument shapes (sizes, flags, pointers,
//! wrong command numbers) with the errno each one gives.

use rmlx5_abi::ioctl::{cmd_nr, iowr, Command, NR_BASE};
use rmlx5_abi::uapi::*;
use rmlx5_abi::wire::Wire;

use crate::knobs::Gen;
use crate::sys::errno_name;

pub(crate) const fn bit(e: i32) -> u128 {
    if e >= 0 && e < 128 {
        1u128 << e
    } else {
        0
    }
}

pub(crate) const fn bits(es: &[i32]) -> u128 {
    let mut m = 0;
    let mut i = 0;
    while i < es.len() {
        m |= bit(es[i]);
        i += 1;
    }
    m
}

/// What a call may return: success (if `ok`) or one of the errnos in
/// `errs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Expect {
    pub(crate) ok: bool,
    pub(crate) errs: u128,
}

impl Expect {
    pub(crate) const OK: Expect = Expect { ok: true, errs: 0 };

    pub(crate) const fn err(e: i32) -> Expect {
        Expect {
            ok: false,
            errs: bit(e),
        }
    }

    pub(crate) const fn ok_or(es: &[i32]) -> Expect {
        Expect {
            ok: true,
            errs: bits(es),
        }
    }

    pub(crate) fn allows(&self, r: Result<(), i32>) -> bool {
        match r {
            Ok(()) => self.ok,
            Err(e) => self.errs & bit(e) != 0,
        }
    }

    pub(crate) fn describe(&self) -> String {
        let mut v = Vec::new();
        if self.ok {
            v.push("success".to_string());
        }
        for e in 0..128 {
            if self.errs & bit(e) != 0 {
                v.push(errno_name(e));
            }
        }
        v.join("|")
    }
}

pub(crate) fn show(r: Result<(), i32>) -> String {
    match r {
        Ok(()) => "success".to_string(),
        Err(e) => errno_name(e),
    }
}

/// The errnos Documentation/uverbs.md allows for `cmd` (`None`: a command
/// number that is not ours).
pub(crate) fn documented(cmd: Option<Command>) -> u128 {
    let Some(cmd) = cmd else {
        return bit(libc::ENOTTY);
    };
    let common = bits(&[libc::EINVAL, libc::E2BIG, libc::EFAULT, libc::ENOTTY]);
    let own: &[i32] = match cmd {
        Command::AllocPd => &[libc::ENOSPC, libc::ENOMEM],
        Command::DeallocPd | Command::DestroyCq => &[libc::EBUSY],
        Command::RegMr => &[libc::ENOMEM, libc::EINTR, libc::ENOSPC],
        Command::CreateCompChannel => &[libc::EMFILE, libc::ENOMEM],
        Command::CreateCq => &[libc::EBADF, libc::ENOMEM, libc::ENOSPC],
        Command::CreateQp => &[libc::ENOMEM, libc::ENOSPC],
        Command::GetAsyncFd => &[libc::EEXIST, libc::EMFILE, libc::ENOMEM],
        _ => &[],
    };
    common | bits(own)
}

/// The errnos a ConnectX function's commands return besides the
/// documented ones: `EOPNOTSUPP` for `KICK` (documented: the device sees
/// the doorbells itself) and for a `MODIFY_QP` without `QP_STATE`
/// (cx/dev.rs `modify_qp`: the function only moves QPs; not in
/// Documentation/uverbs.md's table).
pub(crate) fn function_only(cmd: Command) -> u128 {
    match cmd {
        Command::Kick | Command::ModifyQp => bit(libc::EOPNOTSUPP),
        _ => 0,
    }
}

/// How a call's argument is presented, beyond its fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// `hdr.size` is the struct's size.
    Plain,
    /// A newer caller's larger struct with a zero tail (`hdr.size`).
    ZeroTail(u32),
    /// Another size encoded in the command number (ignored by the kernel).
    CmdSize(u32),
    /// `hdr.size` below the struct.
    Small(u32),
    /// `hdr.size` above a page.
    Huge(u32),
    /// A larger struct with a non-zero byte at the position given.
    Tail(u32, u32),
    /// Non-zero `hdr.flags`.
    Flags(u32),
    /// A non-zero "out" or reserved field at this byte offset.
    OutField(usize, u32),
    /// The argument pointer is NULL.
    Null,
    /// The argument pointer is a kernel address.
    Kernel,
    /// The argument pointer is an unmapped page.
    Unmapped,
    /// `hdr.size` extends this many bytes into an unmapped page.
    TailFault(u32),
    /// The argument is in read-only memory (the answer cannot be written).
    ReadOnly,
    /// A command number that is not ours.
    WrongCmd(u32),
}

/// The errno a presentation gives whatever the fields (`None`: the
/// command runs).
pub(crate) fn shape_errno(s: Shape) -> Option<i32> {
    match s {
        Shape::Small(_) | Shape::Flags(_) | Shape::OutField(..) => Some(libc::EINVAL),
        Shape::Huge(_) | Shape::Tail(..) => Some(libc::E2BIG),
        Shape::Null | Shape::Kernel | Shape::Unmapped | Shape::TailFault(_) => Some(libc::EFAULT),
        Shape::WrongCmd(_) => Some(libc::ENOTTY),
        Shape::Plain | Shape::ZeroTail(_) | Shape::CmdSize(_) | Shape::ReadOnly => None,
    }
}

/// Whether `cmd` writes an answer back (MODIFY_QP and KICK do not).
fn writes_answer(cmd: Command) -> bool {
    !matches!(cmd, Command::ModifyQp | Command::Kick)
}

/// The expectation of a call whose fields alone would give `sem`,
/// presented as `shape`: argument errors come first; a command that
/// succeeds but cannot write its answer fails with EFAULT.
pub(crate) fn combine(shape: Shape, sem: Expect, cmd: Command) -> Expect {
    if let Some(e) = shape_errno(shape) {
        return Expect::err(e);
    }
    if shape == Shape::ReadOnly && writes_answer(cmd) && sem.ok {
        return Expect {
            ok: false,
            errs: sem.errs | bit(libc::EFAULT),
        };
    }
    sem
}

/// Byte offsets of fields that must be zero on input ("out" and reserved
/// fields), per command.
pub(crate) fn out_fields(cmd: Command) -> Vec<usize> {
    use core::mem::offset_of;
    match cmd {
        Command::QueryDevice => vec![
            offset_of!(QueryDevice, fw_ver),
            offset_of!(QueryDevice, max_qp),
            offset_of!(QueryDevice, device_index),
            offset_of!(QueryDevice, device_flags),
        ],
        Command::QueryPort => vec![
            offset_of!(QueryPort, state),
            offset_of!(QueryPort, lid),
            offset_of!(QueryPort, reserved),
        ],
        Command::AllocPd => vec![offset_of!(AllocPd, pd_handle), offset_of!(AllocPd, pdn)],
        Command::DeallocPd | Command::DeregMr | Command::DestroyCq | Command::DestroyQp => vec![
            offset_of!(Destroy, reserved),
            offset_of!(Destroy, comp_events_reported),
            offset_of!(Destroy, async_events_reported),
        ],
        Command::RegMr => vec![
            offset_of!(RegMr, mr_handle),
            offset_of!(RegMr, lkey),
            offset_of!(RegMr, rkey),
            offset_of!(RegMr, reserved),
        ],
        Command::CreateCompChannel => vec![
            offset_of!(CreateCompChannel, fd),
            offset_of!(CreateCompChannel, reserved),
        ],
        Command::CreateCq => vec![
            offset_of!(CreateCq, cq_handle),
            offset_of!(CreateCq, cqn),
            offset_of!(CreateCq, cqe_cnt),
            offset_of!(CreateCq, cqe_size),
            offset_of!(CreateCq, reserved),
            offset_of!(CreateCq, buf_mmap_offset),
            offset_of!(CreateCq, buf_size),
            offset_of!(CreateCq, dbr_mmap_offset),
        ],
        Command::CreateQp => {
            let first = offset_of!(CreateQp, qp_handle);
            (first..CreateQp::SIZE).step_by(4).collect()
        }
        Command::QueryQp => {
            let mut v = vec![offset_of!(QueryQp, reserved)];
            v.extend((offset_of!(QueryQp, qp_state)..QueryQp::SIZE).step_by(4));
            v
        }
        Command::Kick => vec![offset_of!(Kick, reserved)],
        Command::GetAsyncFd => vec![offset_of!(GetAsyncFd, fd), offset_of!(GetAsyncFd, reserved)],
        Command::ModifyQp => Vec::new(),
    }
}

/// A command number that is not one of ours: wrong direction, type or
/// number, avoiding the generic VFS ioctls (`FIONBIO`, `FIGETBSZ`, ...).
pub(crate) fn wrong_cmd(gen: &mut Gen, cmd: Command) -> u32 {
    let size = cmd.min_size();
    let nr = cmd_nr(cmd.cmd());
    let candidate = match gen.below(4) {
        0 => {
            let dir = gen.below32(3);
            (cmd.cmd() & !(3 << 30)) | (dir << 30)
        }
        1 => {
            let nr = if gen.chance(1, 2) {
                gen.below32(NR_BASE)
            } else {
                0x8f + gen.below32(0x71)
            };
            iowr(nr, size)
        }
        2 => {
            let ty = gen.pick(&[0x1au32, 0x1c, 0x80, 0xab, 0xfe]).unwrap_or(0x1a);
            (cmd.cmd() & !(0xff << 8)) | (ty << 8)
        }
        _ => {
            let ty = gen.pick(&[0x1au32, 0x33, 0xab, 0xfe]).unwrap_or(0xab);
            (gen.u32() & !(0xff << 8)) | (ty << 8)
        }
    };
    if Command::from_cmd(candidate).is_none() {
        candidate
    } else {
        (iowr(nr, size) & !(0xff << 8)) | (0xab << 8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expectations_and_shapes() {
        let inval = Expect::err(libc::EINVAL);
        assert!(Expect::OK.allows(Ok(())));
        assert!(!Expect::OK.allows(Err(libc::EINVAL)));
        assert!(inval.allows(Err(libc::EINVAL)) && !inval.allows(Ok(())));
        let any = Expect::ok_or(&[libc::EINVAL, libc::EAGAIN]);
        assert!(any.allows(Ok(())) && any.allows(Err(libc::EAGAIN)));
        assert!(!any.allows(Err(libc::EIO)));
        assert_eq!(any.describe(), "success|EAGAIN|EINVAL");
        // Argument errors come before the fields' own.
        let busy = Expect::err(libc::EBUSY);
        let c = Command::DestroyCq;
        assert_eq!(combine(Shape::Small(3), busy, c), inval);
        assert_eq!(
            combine(Shape::Huge(5000), busy, c),
            Expect::err(libc::E2BIG)
        );
        assert_eq!(
            combine(Shape::Tail(100, 90), busy, c),
            Expect::err(libc::E2BIG)
        );
        assert_eq!(combine(Shape::Flags(1), Expect::OK, c), inval);
        assert_eq!(combine(Shape::OutField(12, 1), Expect::OK, c), inval);
        assert_eq!(combine(Shape::Null, busy, c), Expect::err(libc::EFAULT));
        assert_eq!(
            combine(Shape::TailFault(8), busy, c),
            Expect::err(libc::EFAULT)
        );
        assert_eq!(
            combine(Shape::WrongCmd(0), busy, c),
            Expect::err(libc::ENOTTY)
        );
        assert_eq!(combine(Shape::ZeroTail(4096), busy, c), busy);
        assert_eq!(combine(Shape::CmdSize(0), Expect::OK, c), Expect::OK);
        // A read-only argument: a success cannot answer, a refusal stays.
        assert_eq!(
            combine(Shape::ReadOnly, Expect::OK, c),
            Expect::err(libc::EFAULT)
        );
        assert_eq!(combine(Shape::ReadOnly, busy, c), busy);
        let k = combine(
            Shape::ReadOnly,
            Expect::ok_or(&[libc::EINVAL]),
            Command::Kick,
        );
        assert!(k.ok, "KICK writes no answer");
        let q = combine(
            Shape::ReadOnly,
            Expect::ok_or(&[libc::EINVAL]),
            Command::QueryQp,
        );
        assert!(!q.ok && q.allows(Err(libc::EFAULT)) && q.allows(Err(libc::EINVAL)));
    }

    #[test]
    fn documented_errnos() {
        for c in Command::ALL {
            let d = documented(Some(*c));
            for e in [libc::EINVAL, libc::E2BIG, libc::EFAULT, libc::ENOTTY] {
                assert!(d & bit(e) != 0, "{c:?} {e}");
            }
            assert_eq!(d & bit(libc::EIO), 0);
        }
        assert!(documented(Some(Command::CreateCq)) & bit(libc::EBADF) != 0);
        assert_eq!(documented(Some(Command::CreateQp)) & bit(libc::EBADF), 0);
        assert!(documented(Some(Command::DeallocPd)) & bit(libc::EBUSY) != 0);
        assert_eq!(documented(Some(Command::DestroyQp)) & bit(libc::EBUSY), 0);
        assert!(documented(Some(Command::GetAsyncFd)) & bit(libc::EEXIST) != 0);
        assert_eq!(documented(None), bit(libc::ENOTTY));
        // On a function, KICK and attribute-only MODIFY_QP are refused.
        for c in Command::ALL {
            let f = function_only(*c);
            assert_eq!(f != 0, matches!(c, Command::Kick | Command::ModifyQp));
            assert_eq!(documented(Some(*c)) & f, 0, "{c:?}");
        }
    }

    #[test]
    fn out_fields_lie_inside_the_structs() {
        for c in Command::ALL {
            let f = out_fields(*c);
            assert_eq!(f.is_empty(), *c == Command::ModifyQp, "{c:?}");
            for off in f {
                assert!(off >= 8 && off + 4 <= c.min_size(), "{c:?} {off}");
            }
        }
        // QUERY_PORT's port number is an input, not an out field.
        assert!(!out_fields(Command::QueryPort).contains(&8));
        // CREATE_QP's inputs end before qp_handle.
        assert!(out_fields(Command::CreateQp)
            .iter()
            .all(|o| *o >= core::mem::offset_of!(CreateQp, qp_handle)));
    }

    #[test]
    fn wrong_commands_are_never_ours() {
        let mut g = Gen::new(3);
        for _ in 0..10_000 {
            let c = g.pick(Command::ALL).unwrap();
            let w = wrong_cmd(&mut g, c);
            assert_eq!(Command::from_cmd(w), None, "{w:#x}");
            // Not a generic VFS ioctl type.
            let ty = (w >> 8) & 0xff;
            assert!(![0x00, 0x12, 0x15, 0x54, 0x58, 0x66, 0x94].contains(&ty) || ty == 0x1b);
        }
    }
}
