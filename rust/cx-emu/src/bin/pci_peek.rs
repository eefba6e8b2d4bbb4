// SPDX-License-Identifier: GPL-2.0

//! rmlx5-pci-peek: reads 32-bit registers of a PCI memory BAR from the
//! guest, through the BAR's sysfs resource file (the test kernel has no
//! /dev/mem, and busybox's devmem needs it).
//!
//! ```text
//! rmlx5-pci-peek /sys/bus/pci/devices/0000:00:02.0/resource0 OFFSET...
//! ```
//!
//! Prints one line per offset, `OFFSET VALUE`, both in hex, where VALUE is
//! the register as `ioread32be` returns it (mlx5 registers are
//! big-endian).
//!
//! An argument `OFFSET=VALUE` stores VALUE there instead, as one
//! little-endian 32-bit store (`iowrite32`): the emulator's fault
//! register (Documentation/cx-emu.md, "The fault register") is
//! little-endian. It prints `OFFSET <- VALUE`.

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::process::ExitCode;

fn parse_hex(s: &str) -> Result<usize, String> {
    let t = s.trim_start_matches("0x");
    usize::from_str_radix(t, 16).map_err(|e| format!("{s}: {e}"))
}

fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: rmlx5-pci-peek RESOURCE_FILE OFFSET...")?;
    // (offset, value to store or None to read)
    let offsets = args
        .map(|a| match a.split_once('=') {
            Some((o, v)) => Ok((parse_hex(o)?, Some(parse_hex(v)?))),
            None => Ok((parse_hex(&a)?, None)),
        })
        .collect::<Result<Vec<(usize, Option<usize>)>, String>>()?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| format!("{path}: {e}"))?;
    let len = file.metadata().map_err(|e| format!("{path}: {e}"))?.len() as usize;
    for (o, store) in offsets {
        if o % 4 != 0 {
            return Err(format!("{o:#x}: not a 32-bit register offset"));
        }
        if o + 4 > len {
            return Err(format!("{path}: offset beyond the BAR ({len:#x} bytes)"));
        }
        // Only the register's page is mapped: a mapping over pages the
        // driver or a process mapped write-combined (UAR pages) would
        // conflict with theirs (x86 PAT refuses it).
        let page = o & !4095;
        // SAFETY: a new shared mapping of one page of the BAR, chosen by
        // the kernel; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                page as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(format!(
                "mmap {path} at {page:#x}: {}",
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: `o - page + 4 <= 4096`, inside the live mapping, and
        // 4-byte aligned.
        let reg = unsafe { p.cast::<u8>().add(o - page).cast::<u32>() };
        if let Some(v) = store {
            let v = u32::try_from(v).map_err(|_| format!("{v:#x}: not a 32-bit value"))?;
            // SAFETY: see `reg`; a volatile store is one 32-bit MMIO write.
            unsafe { reg.write_volatile(v.to_le()) };
            println!("{o:#x} <- {v:#010x}");
        } else {
            // SAFETY: see `reg`; a volatile load is one 32-bit MMIO read.
            let raw = unsafe { reg.read_volatile() };
            println!("{o:#x} {:#010x}", u32::from_be(raw));
        }
        // SAFETY: the mapping made above, no longer used.
        unsafe { libc::munmap(p, 4096) };
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rmlx5-pci-peek: {e}");
            ExitCode::FAILURE
        }
    }
}
