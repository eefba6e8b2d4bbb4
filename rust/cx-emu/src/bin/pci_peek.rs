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
    let offsets = args.map(|a| parse_hex(&a)).collect::<Result<Vec<_>, _>>()?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| format!("{path}: {e}"))?;
    let len = file.metadata().map_err(|e| format!("{path}: {e}"))?.len() as usize;
    let end = offsets.iter().map(|o| o + 4).max().unwrap_or(0);
    if end > len {
        return Err(format!("{path}: offset beyond the BAR ({len:#x} bytes)"));
    }
    let map_len = end.div_ceil(4096) * 4096;
    // SAFETY: a new shared mapping of the BAR chosen by the kernel; no
    // existing memory is affected.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(format!("mmap {path}: {}", std::io::Error::last_os_error()));
    }
    for o in offsets {
        if o % 4 != 0 {
            return Err(format!("{o:#x}: not a 32-bit register offset"));
        }
        // SAFETY: `o + 4 <= map_len`, inside the live mapping, and 4-byte
        // aligned; a volatile load is one 32-bit MMIO read.
        let raw = unsafe { p.cast::<u8>().add(o).cast::<u32>().read_volatile() };
        println!("{o:#x} {:#010x}", u32::from_be(raw));
    }
    // SAFETY: the mapping made above, no longer used.
    unsafe { libc::munmap(p, map_len) };
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
