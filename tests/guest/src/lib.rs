//! A tiny harness for the programs that run inside the rmlx5 test guest.
//!
//! Each test is a function returning `Result<(), String>`; the harness runs
//! the ones whose name contains the filter given on the command line and
//! prints `rmlx5-test: PASS name` or `rmlx5-test: FAIL name: why` for each,
//! the markers `tests/run-guest.py` counts. A panic inside a test is caught
//! and reported as a failure of that test. [`test_device`] says which
//! devices a test uses (`RMLX5_TEST_DEVICES`).

use std::panic::{self, AssertUnwindSafe};

pub mod raw;

/// Outcome of one guest test.
pub type TestResult = Result<(), String>;

/// A named guest test.
pub struct Test {
    /// Name printed in the markers; also what the filter matches.
    pub name: &'static str,
    /// The test body.
    pub run: fn() -> TestResult,
}

/// Runs `tests` filtered by the first command-line argument and returns the
/// process exit status (0 when every selected test passed).
pub fn run_all(tests: &[Test]) -> i32 {
    let filter = std::env::args().nth(1).unwrap_or_default();
    // A run on another device names its cases apart (`cx_` on a PCI
    // function), so that they are counted apart.
    let prefix = std::env::var(TEST_PREFIX).unwrap_or_default();
    let mut failed = 0;
    for t in tests.iter().filter(|t| t.name.contains(filter.as_str())) {
        // In the kernel log too, so that the module's and a device
        // emulator's time-stamped lines can be matched to the case.
        // One write: the kernel log takes each write as one line.
        let line = format!("rmlx5-guest: START {prefix}{}\n", t.name);
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/kmsg")
            .and_then(|mut k| std::io::Write::write_all(&mut k, line.as_bytes()));
        let outcome = panic::catch_unwind(AssertUnwindSafe(t.run)).unwrap_or_else(|payload| {
            let why = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            Err(format!("test panicked: {}", why.replace('\n', " | ")))
        });
        match outcome {
            Ok(()) => println!("rmlx5-test: PASS {prefix}{}", t.name),
            Err(why) => {
                failed += 1;
                println!("rmlx5-test: FAIL {prefix}{}: {}", t.name, why);
            }
        }
    }
    i32::from(failed != 0)
}

/// Fails the current test with a formatted message unless `cond` holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

/// The current `errno` as a readable string, for failure messages.
pub fn errno_str(e: i32) -> String {
    std::io::Error::from_raw_os_error(e).to_string()
}

/// The environment variable whose value is put before every case name a
/// program prints (empty by default).
pub const TEST_PREFIX: &str = "RMLX5_TEST_PREFIX";

/// The environment variable that picks the devices a guest test runs on: a
/// comma list of device indices N (`rmlx5_N`, `/dev/rmlx5_uverbsN`), entry
/// `k` being the test's `k`-th device ([`test_device`]). An index may
/// repeat: `RMLX5_TEST_DEVICES=2,2` puts both ends of a pair on `rmlx5_2`
/// (a loopback pair on one ConnectX PCI function). Unset or empty: the
/// `k`-th device is `rmlx5_k`. The provider scenarios read the same
/// variable (`userspace/rmlx5/tests/common`).
pub const TEST_DEVICES: &str = "RMLX5_TEST_DEVICES";

/// The index N of the `k`-th device a test uses: entry `k` of
/// [`TEST_DEVICES`], or `k` if the variable is unset or empty.
///
/// # Errors
///
/// A message if the variable is not a comma list of device indices, or
/// has no entry `k`.
pub fn test_device(k: usize) -> Result<u32, String> {
    device_in(&std::env::var(TEST_DEVICES).unwrap_or_default(), k)
}

/// Entry `k` of `list`, a value of [`TEST_DEVICES`] (`k` itself if
/// `list` is empty).
fn device_in(list: &str, k: usize) -> Result<u32, String> {
    if list.trim().is_empty() {
        return u32::try_from(k).map_err(|_| format!("no device {k}"));
    }
    let indices = list
        .split(',')
        .map(|n| {
            n.trim()
                .parse::<u32>()
                .map_err(|e| format!("{TEST_DEVICES}={list:?}: {n:?} is not a device index: {e}"))
        })
        .collect::<Result<Vec<u32>, String>>()?;
    indices.get(k).copied().ok_or_else(|| {
        format!(
            "{TEST_DEVICES}={list:?} names {} device(s); the test needs {}",
            indices.len(),
            k + 1
        )
    })
}

#[cfg(test)]
mod tests {
    use super::device_in;

    #[test]
    fn test_devices_by_position() {
        assert_eq!(device_in("", 1), Ok(1));
        assert_eq!(device_in(" ", 0), Ok(0));
        assert_eq!(device_in("2,2", 0), Ok(2));
        assert_eq!(device_in("2, 2", 1), Ok(2));
        assert_eq!(device_in("3,0", 1), Ok(0));
        assert!(device_in("2", 1).is_err());
        assert!(device_in("2,x", 0).is_err());
        assert!(device_in("2,,3", 0).is_err());
    }
}
