// SPDX-License-Identifier: GPL-2.0

//! The IB retry timers, in nanoseconds of the embedder's clock.

/// The RNR NAK timer values of the IB spec (table "Encoding for RNR NAK
/// Timer Field"), in nanoseconds: code 0 is 655.36 ms, 1 is 0.01 ms ...
/// 31 is 491.52 ms.
const RNR_NS: [u64; 32] = [
    655_360_000,
    10_000,
    20_000,
    30_000,
    40_000,
    60_000,
    80_000,
    120_000,
    160_000,
    240_000,
    320_000,
    480_000,
    640_000,
    960_000,
    1_280_000,
    1_920_000,
    2_560_000,
    3_840_000,
    5_120_000,
    7_680_000,
    10_240_000,
    15_360_000,
    20_480_000,
    30_720_000,
    40_960_000,
    61_440_000,
    81_920_000,
    122_880_000,
    163_840_000,
    245_760_000,
    327_680_000,
    491_520_000,
];

/// How long a requester waits after an RNR NAK carrying timer `code`.
pub fn rnr_ns(code: u8) -> u64 {
    RNR_NS
        .get(usize::from(code & 31))
        .copied()
        .unwrap_or(RNR_NS[0])
}

/// The local ACK timeout for the `timeout` attribute: 4.096 us * 2^timeout,
/// in nanoseconds; `None` for 0, which means wait forever.
pub fn ack_timeout_ns(timeout: u8) -> Option<u64> {
    match timeout {
        0 => None,
        t => 4096u64.checked_shl(u32::from(t.min(31))),
    }
}

/// The deadline of a transport retry started at `now`; `u64::MAX` (never)
/// for an infinite timeout.
pub(super) fn ack_timeout_deadline(now: u64, timeout: u8) -> u64 {
    ack_timeout_ns(timeout).map_or(u64::MAX, |t| now.saturating_add(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values() {
        assert_eq!(rnr_ns(0), 655_360_000);
        assert_eq!(rnr_ns(1), 10_000);
        assert_eq!(rnr_ns(14), 1_280_000);
        assert_eq!(rnr_ns(31), 491_520_000);
        assert_eq!(ack_timeout_ns(0), None);
        assert_eq!(ack_timeout_ns(1), Some(8192));
        assert_eq!(ack_timeout_ns(14), Some(67_108_864));
        assert_eq!(ack_timeout_deadline(5, 0), u64::MAX);
        assert_eq!(ack_timeout_deadline(u64::MAX - 1, 31), u64::MAX);
    }
}
