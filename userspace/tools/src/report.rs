// SPDX-License-Identifier: GPL-2.0

//! rmlx5-perf's result lines, laid out like perftest's, shared by the
//! in-process mode and the two-process (server/client) mode so that both
//! print exactly the same format. Integer arithmetic only.

use std::io::Write;

use crate::{fixed3, usec};

/// perftest's separator line.
pub const LINE: &str =
    "---------------------------------------------------------------------------------------";

/// The header of the latency result line.
pub const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

/// The header of the bandwidth result line.
pub const BW_HEADER: &str =
    " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]";

/// Bytes in perftest's "MB" (its default unit is 2^20 bytes per second).
pub const MB: u128 = 1 << 20;

fn io(e: std::io::Error) -> String {
    format!("write the report: {}", e)
}

/// Prints the latency header, the result line for `samples` (one per
/// iteration, nanoseconds; sorted here) and a separator: minimum, maximum,
/// median (`t_typical`), average, standard deviation, 99th and 99.9th
/// percentiles, in microseconds.
///
/// # Errors
///
/// No samples, or a failed write.
pub fn latency(
    out: &mut dyn Write,
    size: usize,
    iters: u64,
    samples: &mut [u128],
) -> Result<(), String> {
    if samples.is_empty() {
        return Err("no latency samples".into());
    }
    samples.sort_unstable();
    let n = samples.len();
    let sum: u128 = samples.iter().sum();
    let avg = sum / n as u128;
    let var = samples.iter().map(|s| s.abs_diff(avg).pow(2)).sum::<u128>() / n as u128;
    let stdev = (1..).find(|x: &u128| x * x > var).unwrap_or(1) - 1;
    let pct = |p1000: usize| samples[(n - 1) * p1000 / 1000];
    writeln!(out, "{}", LAT_HEADER).map_err(io)?;
    writeln!(
        out,
        " {:<6} {:<11}    {:<11}    {:<11}  {:<15}    {:<11}    {:<13}   {:<20}   {:<22}",
        size,
        iters,
        usec(samples[0]),
        usec(samples[n - 1]),
        usec(pct(500)),
        usec(avg),
        usec(stdev),
        usec(pct(990)),
        usec(pct(999))
    )
    .map_err(io)?;
    writeln!(out, "{}", LINE).map_err(io)
}

/// What a bandwidth run measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bw {
    /// Message size in bytes.
    pub size: usize,
    /// Iterations per QP (perftest's `#iterations`).
    pub iters: u64,
    /// Messages in total (all QPs).
    pub msgs: u64,
    /// Elapsed time of the whole run, nanoseconds.
    pub ns: u128,
    /// The best observed rate as (messages, nanoseconds), if any.
    pub peak: Option<(u128, u128)>,
}

/// `bytes` in `ns` nanoseconds as perftest MB/sec (2^20 bytes/s).
pub fn mb_per_sec(bytes: u128, ns: u128) -> String {
    fixed3(bytes * 1_000_000_000, ns.max(1) * MB)
}

/// Prints the bandwidth header, the result line and a separator: peak
/// and average bandwidth in MB/sec (2^20 bytes per second, perftest's
/// default unit) and the message rate in millions of messages per second.
///
/// # Errors
///
/// A failed write.
pub fn bandwidth(out: &mut dyn Write, r: &Bw) -> Result<(), String> {
    let ns = r.ns.max(1);
    let size = r.size as u128;
    let peak = match r.peak {
        Some((msgs, pns)) if msgs > 0 && pns > 0 => mb_per_sec(msgs * size, pns),
        _ => "n/a".to_string(),
    };
    writeln!(out, "{}", BW_HEADER).map_err(io)?;
    writeln!(
        out,
        " {:<10} {:<14} {:<18} {:<20} {}",
        r.size,
        r.iters,
        peak,
        mb_per_sec(u128::from(r.msgs) * size, ns),
        fixed3(u128::from(r.msgs) * 1000, ns)
    )
    .map_err(io)?;
    writeln!(out, "{}", LINE).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        // 2^20 bytes in one second is 1 MB/sec.
        assert_eq!(mb_per_sec(1 << 20, 1_000_000_000), "1.000");
        let mut v = Vec::new();
        bandwidth(
            &mut v,
            &Bw {
                size: 1024,
                iters: 1000,
                msgs: 2000,
                ns: 1_000_000,
                peak: Some((1, 100)),
            },
        )
        .unwrap();
        let text = String::from_utf8(v).unwrap();
        let vals: Vec<&str> = text.lines().nth(1).unwrap().split_whitespace().collect();
        // 2000 KiB in 1 ms = 1953.125 MB/s; 2000 messages in 1 ms = 2 Mpps;
        // peak 1 KiB in 100 ns = 9765.625 MB/s.
        assert_eq!(vals, ["1024", "1000", "9765.625", "1953.125", "2.000"]);
    }
}
