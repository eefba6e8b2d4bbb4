// SPDX-License-Identifier: GPL-2.0

//! Helpers of the UD tests: datagram QPs brought to RTS, address vectors,
//! raw CQE polling, and readers that take a receive CQE and the 40-byte
//! header area apart the way mlx5_ib's `handle_responder` and ib_core's
//! `ib_get_rdma_header_version` / `ib_get_gids_from_rdma_hdr` do, at the
//! byte offsets of `struct mlx5_cqe64`, `struct ib_grh` and `struct
//! iphdr` (written out here, not taken from mlx5-prm, so that they check
//! it).

use hca_model::mr::Access;
use hca_model::port::GidEntry;
use hca_model::qp::{ConnAttrs, QpService, QpState};
use hca_model::qp_modify::AttrMask;
use mlx5_prm::cqe::CQE_SIZE;
use mlx5_prm::doorbell::set_ci_word;
use mlx5_prm::doorbell::CQ_DBR_SET_CI_OFFSET;
use mlx5_prm::ring;
use mlx5_prm::wqe::DatagramSeg;

use super::harness::*;

/// The Q_Key of QP1 (`IB_QP1_QKEY`).
pub const QP1_QKEY: u32 = 0x8001_0000;
/// The data buffer of every side.
pub const UD_BUF: u64 = 1 << 15;

/// A datagram QP with its CQ, PD and a registered buffer.
pub struct Side {
    pub qp: TestQp,
    pub cq: TestCq,
    pub pd: u32,
    pub buf: u64,
    pub key: u32,
}

impl Side {
    pub fn sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: self.buf + off,
            len,
            lkey: self.key,
        }
    }
}

/// Creates a QP of `service` on instance `h` with its own PD, CQ and
/// buffer, and (if `rts`) brings it to RTS with Q_Key `qkey` the way
/// ib_core does: RESET -> INIT with P_Key index, port (UD) and Q_Key;
/// INIT -> RTR with nothing; RTR -> RTS with the send PSN.
pub fn side(w: &mut World, h: usize, service: QpService, qkey: u32, rts: bool) -> Side {
    let pd = w.pd(h);
    let cq = w.cq(h, 6);
    let qp = w
        .qp_of(h, pd, &cq, &cq, QpCaps::default(), service)
        .unwrap();
    let buf = w.buffer(UD_BUF);
    let key = w.mr(h, pd, buf, UD_BUF, Access::LOCAL_WRITE);
    let s = Side {
        qp,
        cq,
        pd,
        buf,
        key,
    };
    if rts {
        to_rts(w, &s.qp, service, qkey);
    }
    s
}

/// RESET -> INIT -> RTR -> RTS of a datagram QP.
pub fn to_rts(w: &mut World, qp: &TestQp, service: QpService, qkey: u32) {
    let a = ConnAttrs {
        port: 1,
        qkey,
        sq_psn: 0x42,
        ..ConnAttrs::default()
    };
    let init = if service == QpService::Gsi {
        AttrMask::PKEY_INDEX.or(AttrMask::QKEY)
    } else {
        AttrMask::PKEY_INDEX.or(AttrMask::PORT).or(AttrMask::QKEY)
    };
    w.modify(qp, QpState::Init, init, a).unwrap();
    w.modify(qp, QpState::Rtr, AttrMask(0), a).unwrap();
    w.modify(qp, QpState::Rts, AttrMask::SQ_PSN, a).unwrap();
}

/// An InfiniBand address vector: LID `dlid`, QPN `dqpn`, Q_Key `qkey`,
/// SL `sl`, no GRH.
pub fn ib_av(dlid: u16, dqpn: u32, qkey: u32, sl: u8) -> DatagramSeg {
    DatagramSeg {
        qkey,
        ext: true,
        dqpn,
        stat_rate_sl: sl,
        rlid: dlid,
        ..DatagramSeg::default()
    }
}

/// Adds a GRH to `av`: source GID index, destination GID, traffic class,
/// hop limit, flow label (what mlx5_ib's `create_ib_ah` writes).
pub fn with_grh(
    av: DatagramSeg,
    sgid_index: u8,
    dgid: [u8; 16],
    tclass: u8,
    hop_limit: u8,
    flow_label: u32,
) -> DatagramSeg {
    DatagramSeg {
        grh_gid_fl: DatagramSeg::GRH | u32::from(sgid_index) << 20 | flow_label,
        rgid: dgid,
        tclass,
        hop_limit,
        ..av
    }
}

/// A RoCE address vector: MAC `dmac`, with the GRH fields RoCE always has.
pub fn roce_av(dmac: [u8; 6], dqpn: u32, qkey: u32, sgid_index: u8, dgid: [u8; 16]) -> DatagramSeg {
    let av = DatagramSeg {
        qkey,
        ext: true,
        dqpn,
        rmac: dmac,
        ..DatagramSeg::default()
    };
    with_grh(av, sgid_index, dgid, 0x62, 64, 0x9_8765)
}

/// A GID entry.
pub fn gid_entry(gid: [u8; 16], roce_v2: bool, mac: [u8; 6]) -> GidEntry {
    GidEntry { gid, roce_v2, mac }
}

/// A link-local GID `fe80::<n>`.
pub fn link_local(n: u8) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[0] = 0xfe;
    g[1] = 0x80;
    g[8] = 0x02;
    g[15] = n;
    g
}

/// The IPv4-mapped GID of `a.b.c.d`, written out.
pub fn mapped(a: [u8; 4]) -> [u8; 16] {
    [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a[0], a[1], a[2], a[3],
    ]
}

/// A MAC `02:00:00:00:00:<n>`.
pub fn mac(n: u8) -> [u8; 6] {
    [2, 0, 0, 0, 0, n]
}

/// Writes `data` at the start of `s`'s buffer and posts one SEND (or
/// SEND_IMM) of it to `av`, signaled, then runs the engine.
pub fn send(w: &mut World, s: &mut Side, av: DatagramSeg, data: &[u8], imm: Option<u32>) {
    w.fill(s.buf, data);
    let op = imm.map_or(WrOp::Send, WrOp::SendImm);
    let sges = if data.is_empty() {
        Vec::new()
    } else {
        vec![s.sge(0, data.len() as u32)]
    };
    let mut wr = Wr::new(7, op, &sges);
    wr.av = Some(av);
    w.post_send(&mut s.qp, &wr).unwrap();
}

/// Posts a receive of `len` bytes at offset `off` of `s`'s buffer, after
/// filling those bytes with 0xcc.
pub fn recv(w: &mut World, s: &mut Side, off: u64, len: u32) {
    w.fill(s.buf + off, &vec![0xcc; len as usize]);
    let sge = s.sge(off, len);
    w.post_recv(&mut s.qp, 9, &[sge]);
}

/// The next CQE of `cq` as its 64 bytes, if software owns one.
pub fn poll_raw(w: &mut World, cq: &mut TestCq) -> Option<[u8; CQE_SIZE]> {
    let idx = ring::ring_index(cq.ci, cq.log) as u64;
    let addr = cq.buf + idx * CQE_SIZE as u64;
    let b: [u8; CQE_SIZE] = w.read(addr, CQE_SIZE).try_into().unwrap();
    if !ring::cqe_sw_owned(b[63], cq.ci, cq.log) {
        return None;
    }
    cq.ci = cq.ci.wrapping_add(1);
    w.fill(cq.dbr + CQ_DBR_SET_CI_OFFSET as u64, &set_ci_word(cq.ci));
    Some(b)
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}

/// `enum rdma_network_type` values mlx5_ib reports on RoCE.
pub const RDMA_NETWORK_ROCE_V1: u8 = 1;
pub const RDMA_NETWORK_IPV4: u8 = 2;
pub const RDMA_NETWORK_IPV6: u8 = 3;

/// The `ib_wc` fields mlx5_ib's `handle_responder` fills from a receive
/// CQE of a QP on a port of link layer `roce` (QP1 if `qp1`).
#[derive(Debug, PartialEq, Eq)]
pub struct KernelWc {
    pub opcode: u8,
    pub byte_len: u32,
    pub imm: Option<u32>,
    pub src_qp: u32,
    pub grh: bool,
    /// The P_Key of a QP1 receive (looked up with `ib_find_cached_pkey`).
    pub pkey: Option<u16>,
    pub slid: u16,
    pub sl: u8,
    /// RoCE: `network_hdr_type`.
    pub network_hdr_type: Option<u8>,
    pub vlan: bool,
}

/// Reads a responder CQE as mlx5_ib's `handle_responder` does.
pub fn kernel_wc(b: &[u8; CQE_SIZE], roce: bool, qp1: bool) -> KernelWc {
    let opcode = b[63] >> 4;
    let flags_rqpn = be32(b, 24);
    let imm = match opcode {
        // MLX5_CQE_RESP_WR_IMM, MLX5_CQE_RESP_SEND_IMM.
        1 | 3 => Some(be32(b, 36)),
        _ => None,
    };
    let vlan = b[29] & 1 != 0;
    let roce_type = ((flags_rqpn >> 24) & 3) as u8;
    KernelWc {
        opcode,
        byte_len: be32(b, 44),
        imm,
        src_qp: flags_rqpn & 0xff_ffff,
        grh: (flags_rqpn >> 28) & 3 != 0,
        pkey: qp1.then(|| (be32(b, 36) & 0xffff) as u16),
        slid: if roce { 0 } else { be16(b, 22) },
        sl: if roce {
            0
        } else {
            ((flags_rqpn >> 24) & 0xf) as u8
        },
        network_hdr_type: roce.then_some(match roce_type {
            0 => RDMA_NETWORK_ROCE_V1,
            1 => RDMA_NETWORK_IPV6,
            2 => RDMA_NETWORK_IPV4,
            _ => 0,
        }),
        vlan,
    }
}

/// Whether the IPv4 header in bytes 20..40 has IHL 5 and a valid
/// checksum (its ten words sum to 0xffff in one's complement).
pub fn ipv4_ok(h: &[u8]) -> bool {
    let v4 = &h[20..40];
    if v4[0] & 0xf != 5 {
        return false;
    }
    let mut sum: u32 = (0..10).map(|i| u32::from(be16(v4, 2 * i))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
}

/// `ib_get_rdma_header_version`: 4, 6 or 0.
pub fn kernel_header_version(h: &[u8]) -> u8 {
    if h[0] >> 4 != 6 {
        return if h[20] >> 4 == 4 { 4 } else { 0 };
    }
    if ipv4_ok(h) {
        4
    } else {
        6
    }
}

/// `ib_get_gids_from_rdma_hdr` for `net_type`: (SGID, DGID).
pub fn kernel_gids(h: &[u8], net_type: u8) -> ([u8; 16], [u8; 16]) {
    if net_type == RDMA_NETWORK_IPV4 {
        let s = mapped(h[32..36].try_into().unwrap());
        let d = mapped(h[36..40].try_into().unwrap());
        (s, d)
    } else {
        (h[8..24].try_into().unwrap(), h[24..40].try_into().unwrap())
    }
}
