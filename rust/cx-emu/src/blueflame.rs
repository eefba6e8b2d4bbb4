// SPDX-License-Identifier: GPL-2.0

//! Telling a plain send doorbell from a BlueFlame copy.
//!
//! Both start with the same 8-byte store at the start of a BlueFlame
//! register half: the first 8 bytes of the WQE's control segment (opcode,
//! WQE index, QPN, DS count). A plain doorbell stops there; a BlueFlame
//! copy goes on with the rest of the WQE, 8 bytes per store through QEMU,
//! up to `ceil(ds / 4) × 64` bytes. The software HCA learns which it was
//! from the provider's kick; here the device must infer it, so a first
//! store is held as pending and rung
//!
//! * as a BlueFlame doorbell once the copy reaches the WQE's size (the
//!   model then compares the copy with the SQ);
//! * as a plain doorbell when anything else reaches BAR0 first, or when
//!   no store followed for the idle time (the caller's timer).
//!
//! A copy interrupted by the timer (a vCPU descheduled mid-copy) is rung
//! as a plain doorbell, which is still correct: the model checks the first
//! 8 bytes against the SQ, where the provider always writes the WQE too.
//! Its later stores are then kept in the UAR page and otherwise ignored.
//! Holding a doorbell never reorders it: anything that could depend on it
//! (another doorbell, a register access) rings it first.

use mlx5_prm::doorbell::SendDoorbellWord;
use mlx5_prm::ring;
use mlx5_prm::wqe::WQEBB_SIZE;

/// A doorbell to ring on the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ring {
    /// The UAR page written.
    pub(crate) uar: u32,
    /// The BlueFlame register written.
    pub(crate) reg: u8,
    /// The register half written.
    pub(crate) half: u8,
    /// The QP the control segment names.
    pub(crate) qpn: u32,
    /// 0 for a plain doorbell, else the bytes of the BlueFlame copy.
    pub(crate) blueflame_len: u32,
    /// Whether a copy was cut short (rung as plain after more than 8 bytes).
    pub(crate) cut: bool,
}

/// Where a store landed: UAR page, register, half and offset in the half.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BfStore {
    /// UAR page.
    pub(crate) uar: u32,
    /// BlueFlame register.
    pub(crate) reg: u8,
    /// Register half.
    pub(crate) half: u8,
    /// Offset in the half.
    pub(crate) at: usize,
}

#[derive(Clone, Copy, Debug)]
struct Pending {
    uar: u32,
    reg: u8,
    half: u8,
    qpn: u32,
    written: usize,
    expected: usize,
    last: u64,
}

impl Pending {
    fn ring(&self, blueflame: bool) -> Ring {
        Ring {
            uar: self.uar,
            reg: self.reg,
            half: self.half,
            qpn: self.qpn,
            blueflame_len: if blueflame { self.written as u32 } else { 0 },
            cut: !blueflame && self.written > 8,
        }
    }
}

/// The doorbell being held, if any.
#[derive(Debug, Default)]
pub(crate) struct BlueFlame {
    pending: Option<Pending>,
}

/// What a store asks the caller to ring, in this order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Rings {
    /// An earlier held doorbell that this store ends. `Function::uar_write`
    /// rings a held doorbell before a store that does not continue it lands
    /// (so the doorbell is read with its own bytes) and finds none here;
    /// the type still never drops one on its own.
    pub(crate) earlier: Option<Ring>,
    /// This store's doorbell, if it completed one.
    pub(crate) this: Option<Ring>,
}

impl BlueFlame {
    /// A store of `data` to a BlueFlame half at time `now` (ns).
    pub(crate) fn store(&mut self, s: BfStore, data: &[u8], now: u64) -> Rings {
        let continued = self.continues(s);
        if let Some(p) = self.pending.as_mut().filter(|_| continued) {
            p.written += data.len();
            p.last = now;
            if p.written >= p.expected {
                let r = p.ring(true);
                self.pending = None;
                return Rings {
                    earlier: None,
                    this: Some(r),
                };
            }
            return Rings::default();
        }
        let earlier = self.flush();
        if s.at != 0 || data.len() < 8 {
            // The rest of a copy rung already, or a store that is no
            // doorbell: kept in the page, nothing to ring.
            return Rings {
                earlier,
                this: None,
            };
        }
        let mut head = [0u8; 8];
        head.copy_from_slice(&data[..8]);
        let word = SendDoorbellWord::decode(&head);
        let p = Pending {
            uar: s.uar,
            reg: s.reg,
            half: s.half,
            qpn: word.qpn,
            written: data.len(),
            expected: usize::from(ring::wqebb_count(word.ds)) * WQEBB_SIZE,
            last: now,
        };
        if p.written > 8 && p.written >= p.expected {
            // A whole copy in one store.
            return Rings {
                earlier,
                this: Some(p.ring(true)),
            };
        }
        if p.expected == 0 {
            // DS 0 names no WQE: ring it for the model to refuse.
            return Rings {
                earlier,
                this: Some(p.ring(false)),
            };
        }
        self.pending = Some(p);
        Rings {
            earlier,
            this: None,
        }
    }

    /// Whether store `s` continues the held BlueFlame copy (the next
    /// bytes of the same half), rather than ending it.
    pub(crate) fn continues(&self, s: BfStore) -> bool {
        self.pending
            .is_some_and(|p| (p.uar, p.reg, p.half) == (s.uar, s.reg, s.half) && s.at == p.written)
    }

    /// Rings the held doorbell as a plain one (something else reached the
    /// device, or its time is up).
    pub(crate) fn flush(&mut self) -> Option<Ring> {
        self.pending.take().map(|p| p.ring(false))
    }

    /// When the held doorbell must be rung at the latest, `idle` ns after
    /// its last store.
    pub(crate) fn deadline(&self, idle: u64) -> Option<u64> {
        self.pending.map(|p| p.last.saturating_add(idle))
    }

    /// Forgets the held doorbell (function reset).
    pub(crate) fn clear(&mut self) {
        self.pending = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first 8 bytes of a control segment: WQE index `idx`, QPN, DS.
    fn ctrl(idx: u16, qpn: u32, ds: u8) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&(u32::from(idx) << 8 | 0x0a).to_be_bytes());
        b[4..].copy_from_slice(&(qpn << 8 | u32::from(ds)).to_be_bytes());
        b
    }

    fn at(half: u8, at: usize) -> BfStore {
        BfStore {
            uar: 3,
            reg: 0,
            half,
            at,
        }
    }

    #[test]
    fn a_full_copy_rings_blueflame() {
        let mut bf = BlueFlame::default();
        // DS 6: two WQEBBs, 128 bytes in 16 stores.
        assert_eq!(bf.store(at(0, 0), &ctrl(4, 0x42, 6), 10), Rings::default());
        for i in 1..15 {
            assert_eq!(
                bf.store(at(0, i * 8), &[0; 8], 10 + i as u64),
                Rings::default()
            );
        }
        let r = bf.store(at(0, 120), &[0; 8], 30).this.unwrap();
        assert_eq!(
            (r.qpn, r.half, r.blueflame_len, r.cut),
            (0x42, 0, 128, false)
        );
        assert_eq!(bf.flush(), None);
    }

    #[test]
    fn a_lone_store_is_a_plain_doorbell() {
        let mut bf = BlueFlame::default();
        bf.store(at(1, 0), &ctrl(9, 0x77, 2), 100);
        assert_eq!(bf.deadline(50), Some(150));
        let r = bf.flush().unwrap();
        assert_eq!((r.qpn, r.half, r.blueflame_len, r.cut), (0x77, 1, 0, false));
        assert_eq!(bf.deadline(50), None);
    }

    #[test]
    fn the_next_doorbell_rings_the_held_one_first() {
        let mut bf = BlueFlame::default();
        bf.store(at(0, 0), &ctrl(0, 0x10, 1), 0);
        let r = bf.store(at(1, 0), &ctrl(1, 0x10, 1), 5);
        assert_eq!(r.earlier.map(|r| (r.half, r.blueflame_len)), Some((0, 0)));
        assert_eq!(r.this, None);
        assert_eq!(bf.flush().map(|r| r.half), Some(1));
    }

    #[test]
    fn a_cut_copy_rings_plain_and_its_tail_is_ignored() {
        let mut bf = BlueFlame::default();
        bf.store(at(0, 0), &ctrl(0, 0x10, 4), 0);
        bf.store(at(0, 8), &[0; 8], 1);
        let r = bf.flush().unwrap();
        assert_eq!((r.blueflame_len, r.cut), (0, true));
        assert_eq!(bf.store(at(0, 16), &[0; 8], 2), Rings::default());
        assert_eq!(bf.flush(), None);
    }

    #[test]
    fn ds_zero_is_rung_for_the_model_to_refuse() {
        let mut bf = BlueFlame::default();
        let r = bf.store(at(0, 0), &ctrl(0, 0x10, 0), 0).this.unwrap();
        assert_eq!(r.blueflame_len, 0);
    }
}
