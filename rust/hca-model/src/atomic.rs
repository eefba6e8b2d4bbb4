// SPDX-License-Identifier: GPL-2.0

//! The arithmetic of the 8-byte atomics.
//!
//! # Byte order
//!
//! Operands in the WQE's atomic segment are big-endian, like every WQE
//! field (the provider stores `htobe64(compare)` and so on; mlx5-prm hands
//! them to the model as host integers). The 8-byte target in responder
//! memory and the original value written back to the requester's buffer
//! are in host byte order: the model behaves as a ConnectX whose
//! `atomic_req_8B_endianness_mode` is "host endianness", which is the only
//! mode in which mlx5_ib advertises atomics (`IB_ATOMIC_HCA`) on a
//! little-endian host. So an application reads and writes its atomic
//! counters as plain native `u64`s, and the rule for the provider is:
//! operands go into the WQE big-endian, results come back native.

/// An atomic operation with its operands (host integers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AtomicOp {
    /// ATOMIC_CS: if the target equals `compare`, it becomes `swap`.
    CompareSwap { compare: u64, swap: u64 },
    /// ATOMIC_FA: the target becomes target + `add` (wrapping).
    FetchAdd { add: u64 },
    /// ATOMIC_MASKED_CS: if the target's bits under `compare_mask` equal
    /// those of `compare`, its bits under `swap_mask` take those of `swap`.
    MaskedCompareSwap {
        compare: u64,
        compare_mask: u64,
        swap: u64,
        swap_mask: u64,
    },
    /// ATOMIC_MASKED_FA: adds `add` to the target as independent fields;
    /// a set bit in `boundary` marks the most significant bit of a field,
    /// whose carry out is dropped.
    MaskedFetchAdd { add: u64, boundary: u64 },
}

impl AtomicOp {
    /// The new value of a target that held `old`.
    pub(super) fn apply(self, old: u64) -> u64 {
        match self {
            AtomicOp::CompareSwap { compare, swap } => {
                if old == compare {
                    swap
                } else {
                    old
                }
            }
            AtomicOp::FetchAdd { add } => old.wrapping_add(add),
            AtomicOp::MaskedCompareSwap {
                compare,
                compare_mask,
                swap,
                swap_mask,
            } => {
                if (old ^ compare) & compare_mask == 0 {
                    (old & !swap_mask) | (swap & swap_mask)
                } else {
                    old
                }
            }
            AtomicOp::MaskedFetchAdd { add, boundary } => {
                // Add with the boundary bits cleared: a carry into a
                // boundary bit stops there. Then give each boundary bit
                // the sum of its two operand bits and that carry.
                let low = (old & !boundary).wrapping_add(add & !boundary);
                low ^ ((old ^ add) & boundary)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_ops() {
        let cs = AtomicOp::CompareSwap {
            compare: 5,
            swap: 9,
        };
        assert_eq!(cs.apply(5), 9);
        assert_eq!(cs.apply(6), 6);
        assert_eq!(AtomicOp::FetchAdd { add: 2 }.apply(u64::MAX), 1);
    }

    #[test]
    fn masked_compare_swap() {
        let op = AtomicOp::MaskedCompareSwap {
            compare: 0x00ff,
            compare_mask: 0x00ff,
            swap: 0xab00,
            swap_mask: 0xff00,
        };
        assert_eq!(op.apply(0x12ff), 0xabff);
        assert_eq!(op.apply(0x12fe), 0x12fe);
    }

    #[test]
    fn masked_fetch_add_is_fieldwise() {
        // Two 32-bit fields: bit 31 and bit 63 are field MSBs.
        let op = AtomicOp::MaskedFetchAdd {
            add: 0x0000_0001_0000_0001,
            boundary: 0x8000_0000_8000_0000,
        };
        assert_eq!(op.apply(0x0000_0005_ffff_ffff), 0x0000_0006_0000_0000);
        // Eight 8-bit fields, compared with a per-byte reference.
        let boundary = 0x8080_8080_8080_8080;
        let (a, b) = (0x01ff_7f80_00fe_1234u64, 0xff01_0180_ff03_ffffu64);
        let got = AtomicOp::MaskedFetchAdd { add: b, boundary }.apply(a);
        let want = u64::from_le_bytes(core::array::from_fn(|i| {
            a.to_le_bytes()[i].wrapping_add(b.to_le_bytes()[i])
        }));
        assert_eq!(got, want);
        // No boundaries: a plain add.
        let op = AtomicOp::MaskedFetchAdd {
            add: 3,
            boundary: 0,
        };
        assert_eq!(op.apply(u64::MAX), 2);
    }
}
