// SPDX-License-Identifier: GPL-2.0

//! The identity of an instance's one port: its link layer, its MTU and its
//! GID table, which decide how datagrams are addressed and what network
//! header a receiver finds in front of them (see [`super::ud`]).
//!
//! An InfiniBand port is addressed by LID ([`super::fabric::lid_of_index`]);
//! its GIDs matter only for datagrams whose address vector asks for a GRH.
//! A RoCE (Ethernet) port has no LID: an address vector names the
//! destination's MAC, and every datagram carries a network header built
//! from the sender's GID entry, which also says RoCE v1 or v2. The
//! embedder programs the table as mlx5's SET_ROCE_ADDRESS does (GID, RoCE
//! version, MAC per index) with [`super::hca::Hca::set_gid`].
//!
//! The [`Hca`] methods that set and read the port are here, next to it.

use super::error::Error;
use super::hca::Hca;
use super::table::Storage;

/// Entries of an instance's GID table.
pub const GID_TABLE_LEN: usize = 16;

/// The port's one P_Key (the full-membership default partition), at P_Key
/// index 0: what every packet carries, and what a GSI QP's receive CQE
/// reports.
pub const DEFAULT_PKEY: u16 = 0xffff;

/// One GID table entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GidEntry {
    /// The GID, network order. A RoCE v2 GID of an IPv4 address is the
    /// IPv4-mapped `::ffff:a.b.c.d`.
    pub gid: [u8; 16],
    /// RoCE v2 (UDP/IP encapsulation) rather than RoCE v1 (a GRH over
    /// Ethernet); ignored on an InfiniBand port.
    pub roce_v2: bool,
    /// The MAC of the interface the GID belongs to (RoCE): datagrams
    /// addressed to it reach this instance.
    pub mac: [u8; 6],
}

/// `enum ib_mtu` value of the smallest MTU, 256 bytes.
const MTU_MIN: u8 = 1;
/// `enum ib_mtu` value of the largest MTU, 4096 bytes.
const MTU_MAX: u8 = 5;

/// The port of one instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Port {
    /// Ethernet (RoCE) link layer rather than InfiniBand.
    pub(super) roce: bool,
    /// MTU, `enum ib_mtu` (1 = 256 ... 5 = 4096).
    pub(super) mtu: u8,
    /// The GID table.
    pub(super) gids: [Option<GidEntry>; GID_TABLE_LEN],
}

impl Port {
    /// An InfiniBand port with a 4096-byte MTU and an empty GID table.
    pub const DEFAULT: Port = Port {
        roce: false,
        mtu: MTU_MAX,
        gids: [None; GID_TABLE_LEN],
    };

    /// Whether the link layer is Ethernet (RoCE).
    pub fn is_roce(&self) -> bool {
        self.roce
    }

    /// The MTU as `enum ib_mtu`.
    pub fn mtu(&self) -> u8 {
        self.mtu
    }

    /// The MTU in bytes: the largest datagram payload.
    pub fn mtu_bytes(&self) -> u32 {
        128u32 << self.mtu.clamp(MTU_MIN, MTU_MAX)
    }

    /// GID table entry `index`.
    pub fn gid(&self, index: u8) -> Option<GidEntry> {
        self.gids.get(usize::from(index)).copied().flatten()
    }

    /// Whether a GID entry of this port has the MAC `mac`.
    pub(super) fn has_mac(&self, mac: &[u8; 6]) -> bool {
        self.gids.iter().flatten().any(|g| g.mac == *mac)
    }

    /// Sets the MTU, clamped to 1..=5.
    pub(super) fn set_mtu(&mut self, ib_mtu: u8) {
        self.mtu = ib_mtu.clamp(MTU_MIN, MTU_MAX);
    }

    /// Sets or clears GID entry `index`; `false` if there is no such index.
    pub(super) fn set_gid(&mut self, index: u8, entry: Option<GidEntry>) -> bool {
        match self.gids.get_mut(usize::from(index)) {
            Some(slot) => {
                *slot = entry;
                true
            }
            None => false,
        }
    }
}

impl Default for Port {
    fn default() -> Self {
        Port::DEFAULT
    }
}

impl<S: Storage> Hca<S> {
    /// The port: link layer, MTU and GID table.
    pub fn port(&self) -> &Port {
        &self.port
    }

    /// Makes the port's link layer Ethernet (RoCE, `roce` true) or
    /// InfiniBand (the default). Datagrams are then addressed by MAC or by
    /// LID (see [`super::ud`]).
    pub fn set_link_roce(&mut self, roce: bool) {
        self.port.roce = roce;
    }

    /// Sets the port MTU, `enum ib_mtu` (1 = 256 ... 5 = 4096, the
    /// default); values outside 1..=5 are clamped. A datagram longer than
    /// the sending port's MTU fails with LOCAL_LENGTH.
    pub fn set_port_mtu(&mut self, ib_mtu: u8) {
        self.port.set_mtu(ib_mtu);
    }

    /// Sets (`Some`) or clears (`None`) GID table entry `index`, as mlx5's
    /// SET_ROCE_ADDRESS programs one. Datagrams in flight are not
    /// affected: each is addressed when its WQE executes.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for an index from
    /// [`GID_TABLE_LEN`] on.
    pub fn set_gid(&mut self, index: u8, entry: Option<GidEntry>) -> Result<(), Error> {
        if self.port.set_gid(index, entry) {
            Ok(())
        } else {
            Err(Error::Invalid)
        }
    }

    /// GID table entry `index`.
    pub fn gid(&self, index: u8) -> Option<GidEntry> {
        self.port.gid(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_and_gids() {
        let mut p = Port::DEFAULT;
        assert_eq!((p.is_roce(), p.mtu(), p.mtu_bytes()), (false, 5, 4096));
        p.set_mtu(0);
        assert_eq!(p.mtu_bytes(), 256);
        p.set_mtu(3);
        assert_eq!(p.mtu_bytes(), 1024);
        p.set_mtu(9);
        assert_eq!(p.mtu(), 5);
        let e = GidEntry {
            gid: [7; 16],
            roce_v2: true,
            mac: [2, 0, 0, 0, 0, 1],
        };
        assert!(p.set_gid(15, Some(e)));
        assert!(!p.set_gid(16, Some(e)));
        assert_eq!(p.gid(15), Some(e));
        assert_eq!(p.gid(16), None);
        assert!(p.has_mac(&[2, 0, 0, 0, 0, 1]));
        assert!(!p.has_mac(&[2, 0, 0, 0, 0, 2]));
        assert!(p.set_gid(15, None));
        assert!(!p.has_mac(&[2, 0, 0, 0, 0, 1]));
    }
}
