// SPDX-License-Identifier: GPL-2.0

//! The network header a datagram carries, which the receiver finds in the
//! first 40 bytes of its receive buffer: built from the sender's port and
//! the address vector, with `mlx5-prm`'s `net_hdr` encoders.
//!
//! | sender's port | header |
//! |---|---|
//! | InfiniBand, address vector without GRH bit | none (the receiver's 40 bytes are left alone) |
//! | InfiniBand, GRH bit | GRH: next header 0x1b, SGID from the sender's GID table |
//! | RoCE, GID entry v1 | GRH, as on InfiniBand |
//! | RoCE, GID entry v2, SGID `::ffff:a.b.c.d` | 20 zero bytes, IPv4 header (protocol UDP, DF, valid checksum) |
//! | RoCE, GID entry v2, other SGID | IPv6 header: the GRH layout with next header 17 (UDP) |
//!
//! On RoCE the header is there whatever the address vector's GRH bit says
//! (mlx5_ib's RoCE address handles always set it). The traffic class (or
//! IPv4 TOS), flow label and hop limit (or TTL) are the address vector's;
//! the destination GID is its `rgid` (for IPv4, its last four bytes). The
//! length fields are those of the packet: BTH, DETH, the immediate data
//! if any, the payload padded to four bytes and the ICRC, plus the UDP
//! header for RoCE v2 and the IPv4 header itself for IPv4.

use super::super::port::Port;
use super::super::prm::cqe::{
    ROCE_L3_HEADER_TYPE_GRH, ROCE_L3_HEADER_TYPE_IPV4, ROCE_L3_HEADER_TYPE_IPV6,
};
use super::super::prm::net_hdr::{
    v4_of_mapped, Grh, Ipv4Hdr, BTH_SIZE, DETH_SIZE, ICRC_SIZE, IMMDT_SIZE, IPPROTO_UDP,
    NET_HDR_SIZE, NEXT_HDR_BTH, UDP_HDR_SIZE,
};
use super::super::prm::wqe::DatagramSeg;

/// Bytes of the packet after the network header (and a RoCE v2 UDP
/// header): BTH, DETH, immediate data, the payload padded to 4 bytes,
/// ICRC. The payload is at most one MTU (4096 bytes), so this fits.
fn transport_len(imm: bool, len: u64) -> u16 {
    let padded = u16::try_from(len.div_ceil(4).saturating_mul(4)).unwrap_or(u16::MAX);
    let imm = if imm { IMMDT_SIZE } else { 0 };
    (BTH_SIZE + DETH_SIZE + imm + ICRC_SIZE).saturating_add(padded)
}

/// The header of a datagram with a `len`-byte payload (and immediate data
/// if `imm`) sent from `port` to `av`, with the RoCE L3 header type the
/// receive CQE reports (0 on InfiniBand): `Some((None, 0))` for an
/// InfiniBand datagram without GRH, `None` if the address vector's source
/// GID index names no entry of the port's table.
pub(super) fn build(
    port: &Port,
    av: &DatagramSeg,
    imm: bool,
    len: u64,
) -> Option<(Option<[u8; NET_HDR_SIZE]>, u8)> {
    if !port.is_roce() && !av.grh() {
        return Some((None, 0));
    }
    let src = port.gid(av.sgid_index())?;
    let transport = transport_len(imm, len);
    let mut out = [0u8; NET_HDR_SIZE];
    let grh = |next_hdr, payload_len| Grh {
        tclass: av.tclass,
        flow_label: av.flow_label(),
        payload_len,
        next_hdr,
        hop_limit: av.hop_limit,
        sgid: src.gid,
        dgid: av.rgid,
    };
    let l3 = if !port.is_roce() || !src.roce_v2 {
        grh(NEXT_HDR_BTH, transport).encode(&mut out);
        ROCE_L3_HEADER_TYPE_GRH
    } else if let Some(saddr) = v4_of_mapped(&src.gid) {
        let udp = transport.saturating_add(UDP_HDR_SIZE);
        Ipv4Hdr {
            tos: av.tclass,
            total_len: udp.saturating_add(Ipv4Hdr::SIZE as u16),
            id: 0,
            dont_fragment: true,
            ttl: av.hop_limit,
            protocol: IPPROTO_UDP,
            saddr,
            daddr: av.rgid.split_last_chunk::<4>().map_or([0; 4], |(_, d)| *d),
        }
        .encode_net_hdr(&mut out);
        ROCE_L3_HEADER_TYPE_IPV4
    } else {
        grh(IPPROTO_UDP, transport.saturating_add(UDP_HDR_SIZE)).encode(&mut out);
        ROCE_L3_HEADER_TYPE_IPV6
    };
    Some((Some(out), l3))
}

#[cfg(test)]
mod tests {
    use super::super::super::port::GidEntry;
    use super::super::super::prm::net_hdr::{header_version, ipv4_checksum_ok, ipv4_part};
    use super::*;

    fn av(grh: bool) -> DatagramSeg {
        DatagramSeg {
            tclass: 0x28,
            hop_limit: 64,
            grh_gid_fl: if grh { DatagramSeg::GRH } else { 0 } | 2 << 20 | 0x12345,
            rgid: [9; 16],
            ..DatagramSeg::default()
        }
    }

    #[test]
    fn lengths_and_types() {
        let mut port = Port::DEFAULT;
        // InfiniBand without GRH: nothing; with GRH but no GID 2: dropped.
        assert_eq!(build(&port, &av(false), false, 10), Some((None, 0)));
        assert_eq!(build(&port, &av(true), false, 10), None);
        let mut e = GidEntry {
            gid: [1; 16],
            roce_v2: false,
            mac: [0; 6],
        };
        port.set_gid(2, Some(e));
        let (h, l3) = build(&port, &av(true), true, 10).unwrap();
        let h = h.unwrap();
        assert_eq!(l3, ROCE_L3_HEADER_TYPE_GRH);
        // BTH 12 + DETH 8 + ImmDt 4 + 12 (10 padded) + ICRC 4.
        assert_eq!(h[..8], [0x62, 0x81, 0x23, 0x45, 0, 40, 0x1b, 64]);
        assert_eq!(h[8..24], [1; 16]);
        assert_eq!(h[24..], [9; 16]);
        // RoCE v2, IPv6: UDP header counted, next header 17.
        port.roce = true;
        e.roce_v2 = true;
        port.set_gid(2, Some(e));
        let (h, l3) = build(&port, &av(false), false, 0).unwrap();
        let h = h.unwrap();
        assert_eq!((l3, h[6], h[4], h[5]), (1, 17, 0, 32));
        assert_eq!(header_version(&h), 6);
        // RoCE v2, IPv4: 20 + 8 + 12 + 8 + 256 + 4 bytes in all.
        e.gid = super::super::super::prm::net_hdr::v4_mapped([10, 0, 0, 1]);
        port.set_gid(2, Some(e));
        let (h, l3) = build(&port, &av(true), false, 256).unwrap();
        let h = h.unwrap();
        assert_eq!(l3, ROCE_L3_HEADER_TYPE_IPV4);
        assert_eq!(h[..20], [0; 20]);
        let v4 = ipv4_part(&h);
        assert!(ipv4_checksum_ok(&v4));
        assert_eq!(v4[..4], [0x45, 0x28, 0x01, 0x34]);
        assert_eq!(v4[12..], [10, 0, 0, 1, 9, 9, 9, 9]);
        assert_eq!(header_version(&h), 4);
    }
}
