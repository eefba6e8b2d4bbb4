// SPDX-License-Identifier: GPL-2.0

//! The device process's log: one line per event on stderr, prefixed with
//! `cx-emu:` and the milliseconds since start, so that the guest runner can
//! keep it next to the console log and a reader can line the two up.
//!
//! Level 0 prints errors and the summary only, 1 (the default) also what
//! the function does (connections, resets, life-cycle changes), 2 adds
//! every DMA map, interrupt set-up and command doorbell, 3 every BAR
//! access.
//!
//! A process that serves several functions (`--functions`) tags each line
//! with the function it concerns (`fn1: `), see [`set_function`]; with one
//! function the lines carry no tag.

use std::sync::atomic::{AtomicU16, AtomicU8, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

static LEVEL: AtomicU8 = AtomicU8::new(1);
static START: OnceLock<Instant> = OnceLock::new();
/// The function the lines printed now concern ([`NO_FUNCTION`]: none).
static FUNCTION: AtomicU16 = AtomicU16::new(NO_FUNCTION);
const NO_FUNCTION: u16 = u16::MAX;

/// Sets how much is printed (see the module documentation) and starts the
/// clock of the timestamps.
pub(crate) fn init(level: u8) {
    LEVEL.store(level, Ordering::Relaxed);
    START.get_or_init(Instant::now);
}

/// Whether messages of `level` are printed.
pub(crate) fn enabled(level: u8) -> bool {
    LEVEL.load(Ordering::Relaxed) >= level
}

/// Tags the lines printed from now on with function `f` (`None`: no tag).
/// Returns the tag it replaces, for the caller to put back.
pub(crate) fn set_function(f: Option<usize>) -> Option<usize> {
    let v = f.map_or(NO_FUNCTION, |f| u16::try_from(f).unwrap_or(NO_FUNCTION - 1));
    let old = FUNCTION.swap(v, Ordering::Relaxed);
    (old != NO_FUNCTION).then_some(usize::from(old))
}

/// Prints one log line.
pub(crate) fn line(kind: &str, args: std::fmt::Arguments<'_>) {
    let ms = START.get_or_init(Instant::now).elapsed().as_millis();
    match FUNCTION.load(Ordering::Relaxed) {
        NO_FUNCTION => eprintln!("cx-emu: [{:>5}.{:03}] {kind}{args}", ms / 1000, ms % 1000),
        f => eprintln!(
            "cx-emu: [{:>5}.{:03}] fn{f}: {kind}{args}",
            ms / 1000,
            ms % 1000
        ),
    }
}

/// Logs an error (always printed; the caller also counts it).
macro_rules! error {
    ($($t:tt)*) => { $crate::log::line("error: ", format_args!($($t)*)) };
}

/// Logs what the function does (level 1).
macro_rules! info {
    ($($t:tt)*) => {
        if $crate::log::enabled(1) { $crate::log::line("", format_args!($($t)*)) }
    };
}

/// Logs set-up traffic and command doorbells (level 2).
macro_rules! debug {
    ($($t:tt)*) => {
        if $crate::log::enabled(2) { $crate::log::line("", format_args!($($t)*)) }
    };
}

/// Logs every BAR access (level 3).
macro_rules! trace {
    ($($t:tt)*) => {
        if $crate::log::enabled(3) { $crate::log::line("", format_args!($($t)*)) }
    };
}

pub(crate) use {debug, error, info, trace};
