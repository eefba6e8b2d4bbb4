// SPDX-License-Identifier: GPL-2.0

//! Doorbell stores to a trapped UAR page, completed by the kernel in the
//! process's place.
//!
//! rdma-core's mlx5 provider rings a doorbell with one 8-byte store to its
//! UAR page (`bf_reg_size` is 0, so never a BlueFlame copy): after a send,
//! the first 8 bytes of the WQE's control segment at the bfreg's offset;
//! to arm a CQ, the ARM word and the CQN at offset 0x20. A ConnectX sees
//! the store. The software HCA's UAR page is memory, so the trap
//! (`hca/trap.rs`) keeps it unmapped, and the store faults.
//!
//! Mapping the page there and then lets the store complete, but hides the
//! next ones until the trap's poller reads the records and unmaps the page
//! again: a ping-pong then waits for that poller, which competes for the
//! CPUs with processes spinning on their CQs (600-700 µs per message on
//! the 2-vCPU test guests). So the fault handler (`uverbs_shim.c`) first
//! tries to complete the store itself, as a device would take it:
//!
//! - it reads the instruction at the process's instruction pointer and
//!   [`decode`]s it: only `MOV r/m64, r64` and `MOV r/m32, r32` (opcode
//!   0x89, optional REX prefix) with a memory operand, which is what the
//!   compiler makes of the provider's `mmio_write64_be` (an atomic relaxed
//!   store); any other instruction, prefix or register operand is left
//!   alone;
//! - the address the operand names, computed from the process's registers,
//!   must be the faulting address, and the store must lie within the page;
//! - then it writes the register's bytes into the page, moves the
//!   instruction pointer past the instruction, and tells the trap, which
//!   reads the one record the doorbell names (the QPN of a send doorbell,
//!   the CQN of an arm) and runs the engine, all before the process goes
//!   on. The page stays unmapped: every doorbell is one fault, as every
//!   doorbell of rmlx5's own provider is one `KICK` call.
//!
//! A store the handler does not complete (another instruction, a store
//! from the kernel on the process's behalf, a process being single-stepped,
//! a 32-bit process, another architecture, or the `uar_store_emulation`
//! module parameter off) takes the old way: the page is mapped and the
//! poller started.
//!
//! Nothing here can reach kernel memory: the handler writes only into the
//! trapped page, at the faulting offset, and changes only the faulting
//! process's own registers, as the instruction would have.

use kernel::prelude::*;

/// A decoded store instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Store {
    /// The address it writes.
    pub(crate) addr: u64,
    /// What it writes, in the low `size` bytes (stored little-endian).
    pub(crate) value: u64,
    /// Bytes written: 4 or 8.
    pub(crate) size: u8,
    /// Length of the instruction in bytes.
    pub(crate) len: u8,
}

/// `MOV r/m32, r32` (with REX.W: `MOV r/m64, r64`).
const MOV_STORE: u8 = 0x89;

/// Decodes the instruction at the start of `insn`, which is at address
/// `ip`, with the general-purpose registers `gpr` (in x86 numbering: rax,
/// rcx, rdx, rbx, rsp, rbp, rsi, rdi, r8 to r15). `None` unless it is a
/// 32- or 64-bit `MOV` of a register to memory, entirely within `insn`.
pub(crate) fn decode(insn: &[u8], gpr: &[u64; 16], ip: u64) -> Option<Store> {
    let mut i = 0usize;
    let mut next = || {
        let b = insn.get(i).copied();
        i += 1;
        b
    };
    let mut op = next()?;
    // A REX prefix (0x40-0x4f): W (64-bit operand), R, X, B (register
    // number extensions). Any other prefix is refused.
    let rex = if op & 0xf0 == 0x40 {
        let r = op;
        op = next()?;
        r
    } else {
        0
    };
    if op != MOV_STORE {
        return None;
    }
    let (w, r, x, b) = (rex & 8 != 0, (rex >> 2) & 1, (rex >> 1) & 1, rex & 1);
    let modrm = next()?;
    let md = modrm >> 6;
    if md == 3 {
        // Register to register: no store.
        return None;
    }
    let reg = usize::from(((modrm >> 3) & 7) | (r << 3));
    let rm = modrm & 7;
    let reg_of = |n: u8| gpr.get(usize::from(n)).copied();
    // The base (and scaled index) of the operand, before the displacement,
    // and whether a 32-bit displacement follows with mod 0.
    let (base, rip_relative, disp32) = if rm == 4 {
        let sib = next()?;
        let scale = sib >> 6;
        let index = ((sib >> 3) & 7) | (x << 3);
        // Index 4 (rsp, without REX.X) means no index.
        let scaled = if index == 4 {
            0
        } else {
            reg_of(index)?.wrapping_shl(u32::from(scale))
        };
        // Base 5 (rbp or r13) with mod 0 means no base, a 32-bit
        // displacement instead.
        if sib & 7 == 5 && md == 0 {
            (scaled, false, true)
        } else {
            (
                reg_of((sib & 7) | (b << 3))?.wrapping_add(scaled),
                false,
                false,
            )
        }
    } else if rm == 5 && md == 0 {
        // RIP-relative: a 32-bit displacement from the next instruction.
        (0, true, true)
    } else {
        (reg_of(rm | (b << 3))?, false, false)
    };
    let disp = match md {
        1 => i64::from(i8::from_le_bytes([next()?])),
        2 => i64::from(i32::from_le_bytes([next()?, next()?, next()?, next()?])),
        _ if disp32 => i64::from(i32::from_le_bytes([next()?, next()?, next()?, next()?])),
        _ => 0,
    };
    let len = u8::try_from(i).ok()?;
    let mut addr = base.wrapping_add_signed(disp);
    if rip_relative {
        addr = addr.wrapping_add(ip.wrapping_add(u64::from(len)));
    }
    let (size, mask) = if w {
        (8, u64::MAX)
    } else {
        (4, u64::from(u32::MAX))
    };
    Some(Store {
        addr,
        value: gpr.get(reg).copied()? & mask,
        size,
        len,
    })
}

/// A decoded store as `uverbs_shim.c` reads it (`struct rmlx5_store`).
#[repr(C)]
pub(crate) struct RawStore {
    addr: u64,
    value: u64,
    size: u32,
    len: u32,
}

/// Decodes the `n` instruction bytes at `insn` (fetched from address `ip`
/// of the faulting process) with its 16 general-purpose registers at `gpr`
/// (x86 numbering) into `*out`. Returns whether it is a store the fault
/// handler may complete: false for anything [`decode`] refuses, and for
/// every store while the `uar_store_emulation` module parameter is off.
///
/// # Safety
///
/// `insn` points to `n` readable bytes, `gpr` to 16 readable `u64`s and
/// `out` to a writable `RawStore`.
#[no_mangle]
pub(crate) unsafe extern "C" fn rmlx5_decode_store(
    insn: *const u8,
    n: usize,
    gpr: *const u64,
    ip: u64,
    out: *mut RawStore,
) -> bool {
    if !crate::module_parameters::uar_store_emulation.value() {
        return false;
    }
    // SAFETY: The caller passes `n` readable bytes at `insn` and 16
    // readable registers at `gpr`.
    let (insn, gpr) = unsafe {
        (
            core::slice::from_raw_parts(insn, n),
            &*gpr.cast::<[u64; 16]>(),
        )
    };
    let Some(st) = decode(insn, gpr, ip) else {
        return false;
    };
    // SAFETY: The caller passes a writable `RawStore`.
    unsafe {
        out.write(RawStore {
            addr: st.addr,
            value: st.value,
            size: u32::from(st.size),
            len: u32::from(st.len),
        })
    };
    true
}

#[kunit_tests(rmlx5_store)]
mod tests {
    use super::*;

    /// Registers with distinct values: register n holds n << 40 | 0x1000 * n.
    fn regs() -> [u64; 16] {
        let mut g = [0u64; 16];
        for (n, r) in g.iter_mut().enumerate() {
            let n = n as u64;
            *r = (n << 40) | (n * 0x1000);
        }
        g
    }

    const RAX: usize = 0;
    const RCX: usize = 1;
    const RDX: usize = 2;
    const RSP: usize = 4;
    const RBP: usize = 5;
    const R9: usize = 9;
    const R12: usize = 12;
    const R13: usize = 13;

    fn store(insn: &[u8], ip: u64) -> Option<Store> {
        decode(insn, &regs(), ip)
    }

    /// The four doorbell stores of Debian's libmlx5.so.1 (rdma-core 44.0),
    /// as objdump shows them, with trailing bytes of the next
    /// instruction (`sfence`) as the handler fetches them.
    #[test]
    fn libmlx5_doorbell_stores() -> Result {
        let g = regs();
        // mov %rax,0x20(%rdx): the CQ doorbell.
        assert_eq!(
            store(&[0x48, 0x89, 0x42, 0x20, 0x0f, 0xae, 0xf8], 0),
            Some(Store {
                addr: g[RDX] + 0x20,
                value: g[RAX],
                size: 8,
                len: 4
            })
        );
        // mov %rdx,(%rax): a send doorbell.
        assert_eq!(
            store(&[0x48, 0x89, 0x10, 0x0f, 0xae, 0xf8], 0),
            Some(Store {
                addr: g[RAX],
                value: g[RDX],
                size: 8,
                len: 3
            })
        );
        // mov %rcx,(%rdx,%rax,1).
        assert_eq!(
            store(&[0x48, 0x89, 0x0c, 0x02, 0x0f], 0),
            Some(Store {
                addr: g[RDX] + g[RAX],
                value: g[RCX],
                size: 8,
                len: 4
            })
        );
        // mov %r9,(%rax) (REX.R).
        assert_eq!(
            store(&[0x4c, 0x89, 0x08], 0),
            Some(Store {
                addr: g[RAX],
                value: g[R9],
                size: 8,
                len: 3
            })
        );
        Ok(())
    }

    /// The addressing forms a compiler may choose: scaled index, negative
    /// 8-bit and 32-bit displacements, r12 and r13 as bases, no base, RIP
    /// relative, and the 32-bit store without REX.W.
    #[test]
    fn addressing_forms() -> Result {
        let g = regs();
        // mov %rcx,0x10(%rdx,%rax,8)
        let s = store(&[0x48, 0x89, 0x4c, 0xc2, 0x10], 0).ok_or(EINVAL)?;
        assert_eq!((s.addr, s.len), (g[RDX] + g[RAX] * 8 + 0x10, 5));
        // mov %rax,-0x8(%rbp)
        let s = store(&[0x48, 0x89, 0x45, 0xf8], 0).ok_or(EINVAL)?;
        assert_eq!((s.addr, s.len), (g[RBP] - 8, 4));
        // mov %rax,-0x100(%rdx): 32-bit displacement.
        let s = store(&[0x48, 0x89, 0x82, 0x00, 0xff, 0xff, 0xff], 0).ok_or(EINVAL)?;
        assert_eq!((s.addr, s.len), (g[RDX] - 0x100, 7));
        // mov %rax,(%r12): needs a SIB byte.
        let s = store(&[0x49, 0x89, 0x04, 0x24], 0).ok_or(EINVAL)?;
        assert_eq!((s.addr, s.len), (g[R12], 4));
        // mov %rax,0x0(%r13): mod 1, as mod 0 would mean RIP-relative.
        let s = store(&[0x49, 0x89, 0x45, 0x00], 0).ok_or(EINVAL)?;
        assert_eq!((s.addr, s.len), (g[R13], 4));
        // mov %rax,0x1000(,%rcx,2): SIB without a base.
        let s = store(&[0x48, 0x89, 0x04, 0x4d, 0x00, 0x10, 0x00, 0x00], 0).ok_or(EINVAL)?;
        assert_eq!((s.addr, s.len), (g[RCX] * 2 + 0x1000, 8));
        // mov %rax,(%rsp): SIB with no index.
        let s = store(&[0x48, 0x89, 0x04, 0x24], 0).ok_or(EINVAL)?;
        assert_eq!((s.addr, s.len), (g[RSP], 4));
        // mov %rax,0x100(%rip), at 0x7000: from the next instruction.
        let s = store(&[0x48, 0x89, 0x05, 0x00, 0x01, 0x00, 0x00], 0x7000).ok_or(EINVAL)?;
        assert_eq!((s.addr, s.len), (0x7000 + 7 + 0x100, 7));
        // mov %eax,0x4(%rdx): 32 bits of rax.
        let s = store(&[0x89, 0x42, 0x04], 0).ok_or(EINVAL)?;
        assert_eq!(
            s,
            Store {
                addr: g[RDX] + 4,
                value: g[RAX] & 0xffff_ffff,
                size: 4,
                len: 3
            }
        );
        Ok(())
    }

    /// What the handler must leave to the mapping path: other opcodes,
    /// prefixes, register operands, and instructions cut short.
    #[test]
    fn refuses_other_instructions() -> Result {
        for insn in [
            // mov %rcx,%rax: no memory operand.
            &[0x48, 0x89, 0xc8][..],
            // mov %cl,(%rax): 8-bit.
            &[0x88, 0x08],
            // mov %cx,(%rax): operand-size prefix.
            &[0x66, 0x89, 0x08],
            // lock prefix, fs segment override.
            &[0xf0, 0x48, 0x89, 0x08],
            &[0x64, 0x48, 0x89, 0x08],
            // movups %xmm0,(%rax); mov (%rax),%rcx (a load).
            &[0x0f, 0x11, 0x00],
            &[0x48, 0x8b, 0x08],
            // Cut short: no ModRM, no SIB, half a displacement.
            &[0x48, 0x89],
            &[0x48, 0x89, 0x0c],
            &[0x48, 0x89, 0x82, 0x00, 0xff],
            &[],
        ] {
            assert_eq!(store(insn, 0), None);
        }
        Ok(())
    }
}
