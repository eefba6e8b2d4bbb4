// SPDX-License-Identifier: GPL-2.0

//! The 40 bytes a UD receive buffer starts with: the network header of the
//! datagram, as an mlx5 HCA scatters it (the kernel's
//! `union rdma_network_hdr`, which `ib_get_gids_from_rdma_hdr` and
//! `ib_init_ah_attr_from_wc` parse).
//!
//! Three shapes share the 40 bytes:
//!
//! - [`Grh`], the InfiniBand global route header, which has the layout of
//!   an IPv6 header: on an InfiniBand port (next header 0x1b, the BTH) and
//!   for RoCE v1, and, with next header 17 (UDP), the IPv6 header of
//!   RoCE v2;
//! - [`Ipv4Hdr`] in bytes 20..40, for RoCE v2 over IPv4; bytes 0..20 carry
//!   nothing (the kernel calls them garbled and skips them);
//! - nothing at all, on an InfiniBand port when the packet had no GRH: the
//!   40 bytes are left as they were and the CQE says so.
//!
//! [`header_version`] tells them apart the way the kernel's
//! `ib_get_rdma_header_version` does.
//!
//! The length fields count what follows the header in the packet: an IB
//! GRH's payload length runs from the BTH to the ICRC inclusive (pad bytes
//! included); a RoCE v2 IPv6 header's also counts the UDP header; an IPv4
//! header's total length counts itself as well.

use super::bytes::{get_u16, get_u32, get_u8, put_u16, put_u32, put_u8};

/// Bytes of the network header area of a UD receive (`sizeof(struct
/// ib_grh)`, `sizeof(union rdma_network_hdr)`).
pub const NET_HDR_SIZE: usize = 40;
/// Where the IPv4 header starts inside the 40 bytes (RoCE v2 over IPv4).
pub const IPV4_HDR_OFFSET: usize = 20;
/// `Grh::next_hdr` of an InfiniBand GRH or a RoCE v1 header: the BTH
/// follows (the IB spec's value 0x1B).
pub const NEXT_HDR_BTH: u8 = 0x1b;
/// `Grh::next_hdr` / `Ipv4Hdr::protocol` of RoCE v2: UDP (`IPPROTO_UDP`).
pub const IPPROTO_UDP: u8 = 17;
/// Bytes of a BTH (base transport header).
pub const BTH_SIZE: u16 = 12;
/// Bytes of a DETH (datagram extended transport header).
pub const DETH_SIZE: u16 = 8;
/// Bytes of the immediate data header.
pub const IMMDT_SIZE: u16 = 4;
/// Bytes of the ICRC trailer.
pub const ICRC_SIZE: u16 = 4;
/// Bytes of a UDP header.
pub const UDP_HDR_SIZE: u16 = 8;

/// The global route header (`struct ib_grh`, IPv6 layout): version 6,
/// traffic class, flow label, payload length, next header, hop limit,
/// source and destination GID.
///
/// | byte | field |
/// |---|---|
/// | 0 | `version_tclass_flow`: version (31:28), traffic class (27:20), flow label (19:0) |
/// | 4 | `paylen` |
/// | 6 | `next_hdr` |
/// | 7 | `hop_limit` |
/// | 8 | `sgid` |
/// | 24 | `dgid` |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Grh {
    /// Traffic class: `version_tclass_flow` bits 27:20.
    pub tclass: u8,
    /// Flow label, 20 bits: `version_tclass_flow` bits 19:0.
    pub flow_label: u32,
    /// Bytes after this header up to the end of the ICRC: `paylen`.
    pub payload_len: u16,
    /// [`NEXT_HDR_BTH`] or [`IPPROTO_UDP`]: `next_hdr`.
    pub next_hdr: u8,
    /// Hop limit: `hop_limit`.
    pub hop_limit: u8,
    /// Source GID: `sgid`.
    pub sgid: [u8; 16],
    /// Destination GID: `dgid`.
    pub dgid: [u8; 16],
}

impl Grh {
    /// Size in bytes.
    pub const SIZE: usize = NET_HDR_SIZE;
    /// The IP version the header carries (bits 31:28 of its first word).
    pub const VERSION: u8 = 6;

    /// Writes the header into `out`, with version 6.
    pub fn encode(&self, out: &mut [u8; NET_HDR_SIZE]) {
        put_u32(
            out,
            0,
            u32::from(Self::VERSION) << 28
                | u32::from(self.tclass) << 20
                | (self.flow_label & 0xf_ffff),
        );
        put_u16(out, 4, self.payload_len);
        put_u8(out, 6, self.next_hdr);
        put_u8(out, 7, self.hop_limit);
        for (k, (&s, &d)) in self.sgid.iter().zip(self.dgid.iter()).enumerate() {
            put_u8(out, 8 + k, s);
            put_u8(out, 24 + k, d);
        }
    }

    /// Reads a header from `b` (the version nibble is not checked: see
    /// [`header_version`]).
    pub fn decode(b: &[u8; NET_HDR_SIZE]) -> Self {
        let w = get_u32(b, 0);
        Grh {
            tclass: (w >> 20) as u8,
            flow_label: w & 0xf_ffff,
            payload_len: get_u16(b, 4),
            next_hdr: get_u8(b, 6),
            hop_limit: get_u8(b, 7),
            sgid: core::array::from_fn(|k| get_u8(b, 8 + k)),
            dgid: core::array::from_fn(|k| get_u8(b, 24 + k)),
        }
    }
}

/// An IPv4 header without options (`struct iphdr`, 20 bytes), as RoCE v2
/// over IPv4 sends it: version 4, IHL 5, a valid header checksum.
///
/// | byte | field |
/// |---|---|
/// | 0 | version (7:4), IHL (3:0) |
/// | 1 | `tos` |
/// | 2 | `tot_len` |
/// | 4 | `id` |
/// | 6 | `frag_off`: DF (bit 14), fragment offset 0 |
/// | 8 | `ttl` |
/// | 9 | `protocol` |
/// | 10 | `check` |
/// | 12 | `saddr` |
/// | 16 | `daddr` |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ipv4Hdr {
    /// Type of service (DSCP and ECN): `tos`.
    pub tos: u8,
    /// Bytes of the IP packet, this header included: `tot_len`.
    pub total_len: u16,
    /// Identification: `id`.
    pub id: u16,
    /// Don't fragment: `frag_off` bit 14.
    pub dont_fragment: bool,
    /// Time to live: `ttl`.
    pub ttl: u8,
    /// [`IPPROTO_UDP`] for RoCE v2: `protocol`.
    pub protocol: u8,
    /// Source address, network order: `saddr`.
    pub saddr: [u8; 4],
    /// Destination address, network order: `daddr`.
    pub daddr: [u8; 4],
}

impl Ipv4Hdr {
    /// Size in bytes (IHL 5, no options).
    pub const SIZE: usize = 20;
    /// `frag_off`: don't fragment (`IP_DF`).
    pub const DF: u16 = 0x4000;
    /// Version and IHL byte: version 4, five 32-bit words.
    const VERSION_IHL: u8 = 0x45;

    /// Writes the header into `out`, with its header checksum.
    pub fn encode(&self, out: &mut [u8; Self::SIZE]) {
        put_u8(out, 0, Self::VERSION_IHL);
        put_u8(out, 1, self.tos);
        put_u16(out, 2, self.total_len);
        put_u16(out, 4, self.id);
        put_u16(out, 6, if self.dont_fragment { Self::DF } else { 0 });
        put_u8(out, 8, self.ttl);
        put_u8(out, 9, self.protocol);
        put_u16(out, 10, 0);
        for (k, (&s, &d)) in self.saddr.iter().zip(self.daddr.iter()).enumerate() {
            put_u8(out, 12 + k, s);
            put_u8(out, 16 + k, d);
        }
        put_u16(out, 10, ipv4_checksum(out));
    }

    /// Reads a header from `b` (version, IHL and checksum are not checked:
    /// see [`ipv4_checksum_ok`] and [`header_version`]).
    pub fn decode(b: &[u8; Self::SIZE]) -> Self {
        Ipv4Hdr {
            tos: get_u8(b, 1),
            total_len: get_u16(b, 2),
            id: get_u16(b, 4),
            dont_fragment: get_u16(b, 6) & Self::DF != 0,
            ttl: get_u8(b, 8),
            protocol: get_u8(b, 9),
            saddr: core::array::from_fn(|k| get_u8(b, 12 + k)),
            daddr: core::array::from_fn(|k| get_u8(b, 16 + k)),
        }
    }
}

/// The one's-complement sum of the ten 16-bit words of `b`, folded to 16
/// bits.
fn ones_sum(b: &[u8; Ipv4Hdr::SIZE]) -> u16 {
    let mut sum = 0u32;
    for pair in b.chunks_exact(2) {
        if let [hi, lo] = *pair {
            sum += u32::from(u16::from_be_bytes([hi, lo]));
        }
    }
    // Ten words sum to at most 20 bits; two folds leave 16.
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum as u16
}

/// The header checksum of the IPv4 header `b` (RFC 791: the one's
/// complement of the one's-complement sum of its words, computed with the
/// checksum field, bytes 10..12, taken as zero).
pub fn ipv4_checksum(b: &[u8; Ipv4Hdr::SIZE]) -> u16 {
    let mut z = *b;
    put_u16(&mut z, 10, 0);
    !ones_sum(&z)
}

/// Whether the IPv4 header `b` carries a valid header checksum (its words,
/// checksum included, sum to 0xffff).
pub fn ipv4_checksum_ok(b: &[u8; Ipv4Hdr::SIZE]) -> bool {
    ones_sum(b) == 0xffff
}

/// The IPv4 header part of a network header area (bytes 20..40).
pub fn ipv4_part(b: &[u8; NET_HDR_SIZE]) -> [u8; Ipv4Hdr::SIZE] {
    // A 40-byte array always has a 20-byte last chunk.
    b.split_last_chunk::<{ Ipv4Hdr::SIZE }>()
        .map_or([0; Ipv4Hdr::SIZE], |(_, tail)| *tail)
}

impl Ipv4Hdr {
    /// Writes a whole network header area as RoCE v2 over IPv4 fills it:
    /// bytes 0..20 zero, this header (with its checksum) in 20..40.
    pub fn encode_net_hdr(&self, out: &mut [u8; NET_HDR_SIZE]) {
        let mut h = [0u8; Ipv4Hdr::SIZE];
        self.encode(&mut h);
        if let Some((head, tail)) = out.split_last_chunk_mut::<{ Ipv4Hdr::SIZE }>() {
            head.fill(0);
            *tail = h;
        }
    }
}

/// Which header a network header area holds, decided as the kernel's
/// `ib_get_rdma_header_version` does: 6 if bytes 0..40 are an IPv6 header
/// (version 6, and bytes 20..40 are not an IPv4 header with IHL 5 and a
/// valid checksum), 4 if bytes 20..40 are one (or bytes 0..40 are not
/// IPv6 and byte 20 says version 4), else 0.
pub fn header_version(b: &[u8; NET_HDR_SIZE]) -> u8 {
    let v4 = ipv4_part(b);
    let v4_version_ihl = get_u8(&v4, 0);
    if get_u8(b, 0) >> 4 != 6 {
        return if v4_version_ihl >> 4 == 4 { 4 } else { 0 };
    }
    if v4_version_ihl & 0xf != 5 {
        return 6;
    }
    if ipv4_checksum_ok(&v4) {
        4
    } else {
        6
    }
}

/// The IPv4-mapped IPv6 address `::ffff:a.b.c.d` (RFC 4291) of `addr`: how
/// a RoCE v2 GID holds an IPv4 address, and what the kernel makes of an
/// IPv4 header's addresses (`ipv6_addr_set_v4mapped`).
pub fn v4_mapped(addr: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    if let Some((prefix, tail)) = g.split_last_chunk_mut::<4>() {
        if let Some(ff) = prefix.get_mut(10..) {
            ff.fill(0xff);
        }
        *tail = addr;
    }
    g
}

/// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`), or `None`
/// for any other GID (`ipv6_addr_v4mapped`).
pub fn v4_of_mapped(gid: &[u8; 16]) -> Option<[u8; 4]> {
    let (prefix, addr) = gid.split_last_chunk::<4>()?;
    let mapped = prefix.iter().take(10).all(|&x| x == 0) && prefix.get(10..) == Some(&[0xff, 0xff]);
    mapped.then_some(*addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_checksum_of_a_known_header() {
        // A textbook header (RFC 1071 style example): 192.168.0.1 ->
        // 192.168.0.199, UDP, TTL 64, DF, total length 0x73.
        let h = Ipv4Hdr {
            tos: 0,
            total_len: 0x73,
            id: 0,
            dont_fragment: true,
            ttl: 64,
            protocol: IPPROTO_UDP,
            saddr: [192, 168, 0, 1],
            daddr: [192, 168, 0, 199],
        };
        let mut b = [0u8; 20];
        h.encode(&mut b);
        assert_eq!(
            b,
            [
                0x45, 0, 0, 0x73, 0, 0, 0x40, 0, 0x40, 0x11, 0xb8, 0x61, 192, 168, 0, 1, 192, 168,
                0, 199
            ]
        );
        assert!(ipv4_checksum_ok(&b));
        assert_eq!(Ipv4Hdr::decode(&b), h);
        b[15] ^= 1;
        assert!(!ipv4_checksum_ok(&b));
    }

    #[test]
    fn grh_known_bytes_and_versions() {
        let g = Grh {
            tclass: 0xa5,
            flow_label: 0x1_2345,
            payload_len: 0x0124,
            next_hdr: NEXT_HDR_BTH,
            hop_limit: 0x40,
            sgid: [1; 16],
            dgid: [2; 16],
        };
        let mut b = [0xffu8; 40];
        g.encode(&mut b);
        assert_eq!(b[..8], [0x6a, 0x51, 0x23, 0x45, 0x01, 0x24, 0x1b, 0x40]);
        assert_eq!(b[8..24], [1; 16]);
        assert_eq!(b[24..], [2; 16]);
        assert_eq!(Grh::decode(&b), g);
        assert_eq!(header_version(&b), 6);

        // RoCE v2 over IPv4: 20 zero bytes, then the IPv4 header.
        let mut b = [0xeeu8; 40];
        Ipv4Hdr {
            ttl: 1,
            protocol: IPPROTO_UDP,
            ..Ipv4Hdr::default()
        }
        .encode_net_hdr(&mut b);
        assert_eq!(b[..20], [0; 20]);
        assert_eq!(b[20], 0x45);
        assert_eq!(header_version(&b), 4);
        // A bad checksum behind an IPv6 version nibble reads as IPv6.
        b[0] = 0x60;
        assert_eq!(header_version(&b), 4);
        b[30] ^= 0xff;
        assert_eq!(header_version(&b), 6);
        b[0] = 0;
        b[20] = 0x15;
        assert_eq!(header_version(&b), 0);
    }

    #[test]
    fn mapped_addresses() {
        let g = v4_mapped([10, 0, 0, 7]);
        assert_eq!(g, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 7]);
        assert_eq!(v4_of_mapped(&g), Some([10, 0, 0, 7]));
        let mut ll = [0u8; 16];
        ll[0] = 0xfe;
        ll[1] = 0x80;
        assert_eq!(v4_of_mapped(&ll), None);
    }
}
