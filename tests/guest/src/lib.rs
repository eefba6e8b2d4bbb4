//! A tiny harness for the programs that run inside the rmlx5 test guest.
//!
//! Each test is a function returning `Result<(), String>`; the harness runs
//! the ones whose name contains the filter given on the command line and
//! prints `rmlx5-test: PASS name` or `rmlx5-test: FAIL name: why` for each,
//! the markers `tests/run-guest.py` counts. A panic inside a test is caught
//! and reported as a failure of that test.

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
    let mut failed = 0;
    for t in tests.iter().filter(|t| t.name.contains(filter.as_str())) {
        let outcome = panic::catch_unwind(AssertUnwindSafe(t.run)).unwrap_or_else(|payload| {
            let why = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            Err(format!("test panicked: {}", why.replace('\n', " | ")))
        });
        match outcome {
            Ok(()) => println!("rmlx5-test: PASS {}", t.name),
            Err(why) => {
                failed += 1;
                println!("rmlx5-test: FAIL {}: {}", t.name, why);
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
