// SPDX-License-Identifier: GPL-2.0

//! Property tests over every layout, with a small deterministic PRNG:
//!
//! - `decode(encode(x)) == x` for random values of every field;
//! - `encode` writes every byte, whatever was in the buffer before;
//! - `decode` of arbitrary bytes never panics, and when it succeeds,
//!   re-encoding gives back exactly the bits the layout defines (the input
//!   under a per-layout mask of significant bits). That pins down which
//!   bits each decoder reads and each encoder writes;
//! - the ring helpers never panic on arbitrary offsets, sizes and contents;
//! - every word form (`to_words`, `InlineHeader::words`, `recv_wqe_words`,
//!   `Cqe64Words`, `ErrCqeWords`, the doorbell `to_bytes`) gives exactly
//!   what the byte encoder writes or the decoder reads, for arbitrary field
//!   values and arbitrary bytes.
//!
//! Each property runs `CASES` times (at least 100,000 per layout).

use mlx5_prm::cqe::{Cqe64, Cqe64Words, ErrCqe, ErrCqeWords, OpOwn, CQE_SIZE};
use mlx5_prm::doorbell::{
    self, ArmCmd, CqArm, CqDbRec, EqDoorbell, QpDbRec, UarCqDoorbell, CQ_DBR_ARM_OFFSET,
    CQ_DBR_SET_CI_OFFSET, QP_DBR_RECV_OFFSET, QP_DBR_SEND_OFFSET,
};
use mlx5_prm::eqe::{Eqe, EqeData, DATA_SIZE, EQE_SIZE};
use mlx5_prm::error::Error;
use mlx5_prm::net_hdr::{self, Grh, Ipv4Hdr, NET_HDR_SIZE};
use mlx5_prm::opcode::{CqeOpcode, EventType, SendOpcode};
use mlx5_prm::recv::{recv_wqe_words, write_recv_wqe, RecvSegs};
use mlx5_prm::wqe::{
    AtomicSeg, CtrlSeg, DataSeg, InlineHeader, MaskedAtomicSeg, RaddrSeg, MAX_WQE_SIZE,
};
use mlx5_prm::{ring, sq};

const CASES: usize = 100_000;

/// xorshift64*: deterministic, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A value of up to `max_bits` bits, with a random number of them
    /// significant so that small values and boundaries come up often.
    fn bits(&mut self, max_bits: u32) -> u64 {
        let n = (self.next() % u64::from(max_bits + 1)) as u32;
        let v = self.next();
        if n == 64 {
            v
        } else {
            v & ((1u64 << n) - 1)
        }
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn bool(&mut self) -> bool {
        self.next() & 1 != 0
    }

    fn fill(&mut self, b: &mut [u8]) {
        for x in b {
            *x = self.next() as u8;
        }
    }

    fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut b = [0u8; N];
        self.fill(&mut b);
        b
    }

    fn pick<T: Copy>(&mut self, all: &[T]) -> T {
        all[self.below(all.len())]
    }
}

/// Checks that `bytes & mask == encoded` position by position.
fn assert_masked<const N: usize>(what: &str, bytes: &[u8; N], mask: &[u8; N], encoded: &[u8; N]) {
    for i in 0..N {
        assert_eq!(
            bytes[i] & mask[i],
            encoded[i],
            "{what}: byte {i} of {bytes:02x?} re-encodes as {encoded:02x?}"
        );
    }
}

/// A mask of `N` bytes: `ff` over `ranges`, with single bytes overridden.
/// `ranges` are half-open `(start, end)` pairs.
fn mask<const N: usize>(ranges: &[(usize, usize)], bytes: &[(usize, u8)]) -> [u8; N] {
    let mut m = [0u8; N];
    for &(start, end) in ranges {
        m[start..end].fill(0xff);
    }
    for &(i, v) in bytes {
        m[i] = v;
    }
    m
}

fn random_ctrl(r: &mut Rng) -> CtrlSeg {
    CtrlSeg {
        opmod: r.bits(8) as u8,
        wqe_index: r.bits(16) as u16,
        opcode: r.pick(SendOpcode::ALL),
        qpn: r.bits(24) as u32,
        ds: r.bits(6) as u8,
        signature: r.bits(8) as u8,
        fence_mode: r.bits(3) as u8,
        ce: r.bits(2) as u8,
        solicited: r.bool(),
        imm: r.bits(32) as u32,
    }
}

#[test]
fn control_segment() {
    let mut r = Rng::new(1);
    let m = mask::<16>(&[(0, 9), (12, 16)], &[(7, 0x3f), (11, 0xee)]);
    for _ in 0..CASES {
        let x = random_ctrl(&mut r);
        let mut b: [u8; 16] = r.array();
        x.encode(&mut b);
        assert_eq!(CtrlSeg::decode(&b), Ok(x));
        assert_eq!(b[9..11], [0, 0]);

        let raw: [u8; 16] = r.array();
        match CtrlSeg::decode(&raw) {
            Ok(v) => {
                let mut e = [0u8; 16];
                v.encode(&mut e);
                assert_masked("ctrl", &raw, &m, &e);
            }
            Err(e) => assert_eq!(e, Error::UnknownSendOpcode(raw[3])),
        }
    }
}

#[test]
fn sixteen_byte_segments() {
    let mut r = Rng::new(2);
    for _ in 0..CASES {
        let d = DataSeg {
            byte_count: r.bits(32) as u32,
            lkey: r.bits(32) as u32,
            addr: r.bits(64),
        };
        let a = RaddrSeg {
            raddr: r.bits(64),
            rkey: r.bits(32) as u32,
        };
        let t = AtomicSeg {
            swap_add: r.bits(64),
            compare: r.bits(64),
        };
        let mut b: [u8; 16] = r.array();
        d.encode(&mut b);
        assert_eq!(DataSeg::decode(&b), d);
        a.encode(&mut b);
        assert_eq!(RaddrSeg::decode(&b), a);
        assert_eq!(b[12..], [0; 4]);
        t.encode(&mut b);
        assert_eq!(AtomicSeg::decode(&b), t);

        let raw: [u8; 16] = r.array();
        let mut e = [0u8; 16];
        DataSeg::decode(&raw).encode(&mut e);
        assert_eq!(e, raw);
        AtomicSeg::decode(&raw).encode(&mut e);
        assert_eq!(e, raw);
        RaddrSeg::decode(&raw).encode(&mut e);
        assert_masked("raddr", &raw, &mask(&[(0, 12)], &[]), &e);
    }
}

#[test]
fn masked_atomic_segment() {
    let mut r = Rng::new(3);
    for _ in 0..CASES {
        let x = MaskedAtomicSeg {
            swap_add: r.bits(64),
            compare: r.bits(64),
            swap_add_mask: r.bits(64),
            compare_mask: r.bits(64),
        };
        let mut b: [u8; 32] = r.array();
        x.encode(&mut b);
        assert_eq!(MaskedAtomicSeg::decode(&b), x);

        let raw: [u8; 32] = r.array();
        let mut e = [0u8; 32];
        MaskedAtomicSeg::decode(&raw).encode(&mut e);
        assert_eq!(e, raw);
    }
}

#[test]
fn inline_header() {
    let mut r = Rng::new(4);
    for _ in 0..CASES {
        let x = InlineHeader {
            byte_count: r.bits(31) as u32,
        };
        let mut b: [u8; 4] = r.array();
        x.encode(&mut b);
        assert_eq!(InlineHeader::decode(&b), Ok(x));
        assert!(InlineHeader::is_inline(&b));

        let raw: [u8; 4] = r.array();
        match InlineHeader::decode(&raw) {
            Ok(v) => {
                let mut e = [0u8; 4];
                v.encode(&mut e);
                assert_eq!(e, raw);
            }
            Err(e) => {
                assert_eq!(e, Error::NotInline);
                assert_eq!(raw[0] & 0x80, 0);
            }
        }
    }
}

fn random_op_own(r: &mut Rng) -> OpOwn {
    OpOwn {
        opcode: r.pick(CqeOpcode::ALL),
        format: r.bits(2) as u8,
        solicited: r.bool(),
        owner: r.bool(),
    }
}

#[test]
fn success_cqe() {
    let mut r = Rng::new(5);
    let m = mask::<64>(
        &[(22, 24), (25, 28), (36, 40), (44, 48), (56, 64)],
        &[(17, 0xff), (24, 0x3f), (33, 0xff), (34, 0xff), (35, 0xff)],
    );
    for _ in 0..CASES {
        let x = Cqe64 {
            ml_path: r.bits(8) as u8,
            slid: r.bits(16) as u16,
            grh: r.bits(2) as u8,
            sl: r.bits(4) as u8,
            src_qpn: r.bits(24) as u32,
            srqn_uidx: r.bits(24) as u32,
            imm_inval_rkey: r.bits(32) as u32,
            byte_cnt: r.bits(32) as u32,
            send_opcode: r.bits(8) as u8,
            qpn: r.bits(24) as u32,
            wqe_counter: r.bits(16) as u16,
            signature: r.bits(8) as u8,
            op_own: random_op_own(&mut r),
        };
        let mut b: [u8; CQE_SIZE] = r.array();
        x.encode(&mut b);
        assert_eq!(Cqe64::decode(&b), Ok(x));

        let raw: [u8; CQE_SIZE] = r.array();
        match Cqe64::decode(&raw) {
            Ok(v) => {
                let mut e = [0u8; CQE_SIZE];
                v.encode(&mut e);
                assert_masked("cqe", &raw, &m, &e);
            }
            Err(e) => assert_eq!(e, Error::UnknownCqeOpcode(raw[63] >> 4)),
        }
    }
}

#[test]
fn network_headers() {
    let mut r = Rng::new(0x6e6574);
    // The GRH keeps every bit but the version nibble, which is always 6.
    let grh_mask = mask::<NET_HDR_SIZE>(&[(1, NET_HDR_SIZE)], &[(0, 0x0f)]);
    // The IPv4 header keeps every bit but version/IHL (always 0x45), the
    // fragment offset and flags other than DF, and the checksum (always
    // recomputed).
    let v4_mask = mask::<{ Ipv4Hdr::SIZE }>(&[(1, 6), (8, 10), (12, 20)], &[(6, 0x40), (7, 0)]);
    for _ in 0..CASES {
        let g = Grh {
            tclass: r.bits(8) as u8,
            flow_label: r.bits(20) as u32,
            payload_len: r.bits(16) as u16,
            next_hdr: r.bits(8) as u8,
            hop_limit: r.bits(8) as u8,
            sgid: r.array(),
            dgid: r.array(),
        };
        let mut b: [u8; NET_HDR_SIZE] = r.array();
        g.encode(&mut b);
        assert_eq!(Grh::decode(&b), g);
        assert_eq!(b[0] >> 4, 6);
        let v4 = Ipv4Hdr {
            tos: r.bits(8) as u8,
            total_len: r.bits(16) as u16,
            id: r.bits(16) as u16,
            dont_fragment: r.bool(),
            ttl: r.bits(8) as u8,
            protocol: r.bits(8) as u8,
            saddr: r.array(),
            daddr: r.array(),
        };
        let mut h: [u8; Ipv4Hdr::SIZE] = r.array();
        v4.encode(&mut h);
        assert_eq!(Ipv4Hdr::decode(&h), v4);
        assert!(net_hdr::ipv4_checksum_ok(&h));
        assert_eq!(net_hdr::ipv4_checksum(&h).to_be_bytes(), [h[10], h[11]]);
        let mut area: [u8; NET_HDR_SIZE] = r.array();
        v4.encode_net_hdr(&mut area);
        assert_eq!(area[..20], [0; 20]);
        assert_eq!(area[20..], h);
        assert_eq!(net_hdr::ipv4_part(&area), h);
        assert_eq!(net_hdr::header_version(&area), 4);

        let raw: [u8; NET_HDR_SIZE] = r.array();
        let mut e = [0u8; NET_HDR_SIZE];
        Grh::decode(&raw).encode(&mut e);
        assert_eq!(e[0] >> 4, 6);
        e[0] &= 0x0f;
        assert_masked("grh", &raw, &grh_mask, &e);
        let raw4 = net_hdr::ipv4_part(&raw);
        let mut e4 = [0u8; Ipv4Hdr::SIZE];
        Ipv4Hdr::decode(&raw4).encode(&mut e4);
        assert!(net_hdr::ipv4_checksum_ok(&e4));
        // The bits the encoder sets on its own: version/IHL, checksum.
        assert_eq!(e4[0], 0x45);
        e4[0] = 0;
        e4[10..12].fill(0);
        assert_masked("ipv4", &raw4, &v4_mask, &e4);
        assert!(matches!(net_hdr::header_version(&raw), 0 | 4 | 6));
    }
}

#[test]
fn error_cqe() {
    let mut r = Rng::new(6);
    let m = mask::<64>(&[(54, 64)], &[(33, 0xff), (34, 0xff), (35, 0xff)]);
    for _ in 0..CASES {
        let x = ErrCqe {
            srqn: r.bits(24) as u32,
            vendor_syndrome: r.bits(8) as u8,
            syndrome: r.bits(8) as u8,
            send_opcode: r.bits(8) as u8,
            qpn: r.bits(24) as u32,
            wqe_counter: r.bits(16) as u16,
            signature: r.bits(8) as u8,
            op_own: random_op_own(&mut r),
        };
        let mut b: [u8; CQE_SIZE] = r.array();
        x.encode(&mut b);
        assert_eq!(ErrCqe::decode(&b), Ok(x));

        let raw: [u8; CQE_SIZE] = r.array();
        match ErrCqe::decode(&raw) {
            Ok(v) => {
                let mut e = [0u8; CQE_SIZE];
                v.encode(&mut e);
                assert_masked("err cqe", &raw, &m, &e);
            }
            Err(e) => assert_eq!(e, Error::UnknownCqeOpcode(raw[63] >> 4)),
        }
    }
}

#[test]
fn event_queue_entry() {
    let mut r = Rng::new(7);
    for _ in 0..CASES {
        let event_type = r.pick(EventType::ALL);
        let data = if event_type == EventType::Comp {
            EqeData::Comp {
                cqn: r.bits(24) as u32,
            }
        } else if event_type == EventType::CqError {
            EqeData::CqError {
                cqn: r.bits(24) as u32,
                syndrome: r.bits(8) as u8,
            }
        } else if event_type.is_qp_srq_event() {
            EqeData::QpSrq {
                queue_type: r.bits(8) as u8,
                qp_srq_n: r.bits(24) as u32,
            }
        } else {
            EqeData::Raw(r.array::<DATA_SIZE>())
        };
        let x = Eqe {
            event_type,
            sub_type: r.bits(8) as u8,
            data,
            signature: r.bits(8) as u8,
            owner: r.bool(),
        };
        let mut b: [u8; EQE_SIZE] = r.array();
        x.encode(&mut b);
        assert_eq!(Eqe::decode(&b), Ok(x));

        let mut raw: [u8; EQE_SIZE] = r.array();
        // Half the time a known type, so that the data variants get decoded.
        if r.bool() {
            raw[1] = u8::from(r.pick(EventType::ALL));
        }
        match Eqe::decode(&raw) {
            Ok(v) => {
                let mut e = [0u8; EQE_SIZE];
                v.encode(&mut e);
                let m = match v.data {
                    EqeData::Comp { .. } => mask::<64>(&[(1, 2), (3, 4), (57, 60), (62, 63)], &[]),
                    EqeData::CqError { .. } => {
                        mask::<64>(&[(1, 2), (3, 4), (33, 36), (43, 44), (62, 63)], &[])
                    }
                    EqeData::QpSrq { .. } => {
                        mask::<64>(&[(1, 2), (3, 4), (52, 53), (57, 60), (62, 63)], &[])
                    }
                    EqeData::Raw(_) => mask::<64>(&[(1, 2), (3, 4), (32, 60), (62, 63)], &[]),
                };
                let mut m = m;
                m[63] = 1;
                assert_masked("eqe", &raw, &m, &e);
            }
            Err(e) => assert_eq!(e, Error::UnknownEventType(raw[1])),
        }
    }
}

fn random_arm(r: &mut Rng) -> CqArm {
    CqArm {
        sn: r.bits(2) as u8,
        cmd: if r.bool() {
            ArmCmd::Solicited
        } else {
            ArmCmd::Next
        },
        ci: r.bits(24) as u32,
    }
}

/// Decodes arbitrary bytes; on success the encoding must give them back
/// exactly (doorbell words have no bits that decode ignores).
fn exact<const N: usize, T>(
    r: &mut Rng,
    fields: [u8; N],
    decode: impl Fn(&[u8; N]) -> Result<T, Error>,
    encode: impl Fn(&T, &mut [u8; N]),
) {
    // Random bytes are almost always invalid doorbells: half the time keep
    // only the bits that belong to fields.
    let mut raw: [u8; N] = r.array();
    if r.bool() {
        for (b, m) in raw.iter_mut().zip(fields) {
            *b &= m;
        }
    }
    match decode(&raw) {
        Ok(v) => {
            let mut e = [0u8; N];
            encode(&v, &mut e);
            assert_eq!(e, raw);
        }
        Err(e) => assert_eq!(e, Error::ReservedBits),
    }
}

#[test]
fn doorbells() {
    let mut r = Rng::new(8);
    for _ in 0..CASES {
        let qp = QpDbRec {
            recv_counter: r.bits(16) as u16,
            send_counter: r.bits(16) as u16,
        };
        let mut b8: [u8; 8] = r.array();
        qp.encode(&mut b8);
        assert_eq!(QpDbRec::decode(&b8), Ok(qp));

        let cq = CqDbRec {
            set_ci: r.bits(24) as u32,
            arm: random_arm(&mut r),
        };
        cq.encode(&mut b8);
        assert_eq!(CqDbRec::decode(&b8), Ok(cq));

        let uar = UarCqDoorbell {
            arm: random_arm(&mut r),
            cqn: r.bits(24) as u32,
        };
        uar.encode(&mut b8);
        assert_eq!(UarCqDoorbell::decode(&b8), Ok(uar));

        let arm = random_arm(&mut r);
        let mut b4: [u8; 4] = r.array();
        arm.encode(&mut b4);
        assert_eq!(CqArm::decode(&b4), Ok(arm));
        assert_eq!(CqArm::from_word(arm.word()), Ok(arm));

        let eq = EqDoorbell {
            eqn: r.bits(8) as u8,
            ci: r.bits(24) as u32,
        };
        eq.encode(&mut b4);
        assert_eq!(EqDoorbell::decode(&b4), eq);

        let qp_fields = [0, 0, 0xff, 0xff, 0, 0, 0xff, 0xff];
        exact(&mut r, qp_fields, QpDbRec::decode, QpDbRec::encode);
        let cq_fields = [0, 0xff, 0xff, 0xff, 0x31, 0xff, 0xff, 0xff];
        exact(&mut r, cq_fields, CqDbRec::decode, CqDbRec::encode);
        let uar_fields = [0x31, 0xff, 0xff, 0xff, 0, 0xff, 0xff, 0xff];
        exact(
            &mut r,
            uar_fields,
            UarCqDoorbell::decode,
            UarCqDoorbell::encode,
        );
        exact(
            &mut r,
            [0x31, 0xff, 0xff, 0xff],
            CqArm::decode,
            CqArm::encode,
        );
        exact(
            &mut r,
            [0xff; 4],
            |b| Ok(EqDoorbell::decode(b)),
            EqDoorbell::encode,
        );
    }
}

#[test]
fn ring_arithmetic() {
    let mut r = Rng::new(9);
    for _ in 0..CASES {
        let log_size = r.below(25) as u32;
        let size = 1u32 << log_size;
        let pi = r.next() as u32;
        // The entry the device produces at pi is software's at ci == pi
        // and stale one pass later; likewise for EQEs.
        let op_own = OpOwn {
            opcode: r.pick(CqeOpcode::ALL),
            format: 0,
            solicited: false,
            owner: ring::owner_bit(pi, log_size),
        }
        .encode();
        let valid = op_own >> 4 != u8::from(CqeOpcode::Invalid);
        assert_eq!(ring::cqe_sw_owned(op_own, pi, log_size), valid);
        assert!(!ring::cqe_sw_owned(op_own, pi.wrapping_add(size), log_size));
        let owner = u8::from(ring::owner_bit(pi, log_size));
        assert!(ring::eqe_valid(owner, pi, log_size));
        assert!(!ring::eqe_valid(owner, pi.wrapping_add(size), log_size));
        assert!(ring::ring_index(pi, log_size) < size);
        // Counter distances survive the wrap.
        let n = r.bits(24) as u32;
        assert_eq!(
            ring::ci24_distance(ring::ci24(pi), ring::ci24(pi.wrapping_add(n))),
            n
        );
        let w = r.bits(16) as u16;
        let c = r.next() as u16;
        assert_eq!(ring::wqe_counter_distance(c, c.wrapping_add(w)), w);
        // Sizing: ds counts round up and WQEBBs hold 4 DS.
        let bytes = r.below(1100);
        match ring::ds_count(bytes) {
            Ok(ds) => {
                assert!(usize::from(ds) * 16 >= bytes && usize::from(ds) * 16 < bytes + 16);
                assert!(ring::wqebb_count(ds) <= 16);
            }
            Err(e) => {
                assert_eq!(e, Error::BadDsCount);
                assert!(bytes == 0 || bytes > 1008);
            }
        }
        // Arbitrary inputs never panic.
        let _ = ring::owner_bit(r.next() as u32, r.next() as u32);
        let _ = ring::ring_index(r.next() as u32, r.next() as u32);
        let _ = ring::sq_offset(r.next() as u16, r.next() as u32);
        let _ = ring::ds_count(r.next() as usize);
    }
}

#[test]
fn sq_ring_helpers() {
    let mut r = Rng::new(10);
    let mut ring_buf = vec![0u8; 64 << 5];
    let mut wqe = [0u8; MAX_WQE_SIZE];
    for _ in 0..CASES {
        // Mostly valid rings, sometimes not.
        let len = if r.below(8) == 0 {
            r.below(300)
        } else {
            64 << r.below(6)
        };
        let ring = &mut ring_buf[..len.min(64 << 5)];
        r.fill(ring);
        let before = ring.to_vec();
        let offset = if r.bool() {
            r.below(len + 32)
        } else {
            r.below(len.max(1) / 16 + 1) * 16
        };
        let payload_len = r.below(len.min(1100) + 8);
        let payload: Vec<u8> = (0..payload_len).map(|_| r.next() as u8).collect();
        match sq::write_inline(ring, offset, &payload) {
            Ok(size) => {
                assert_eq!(size, mlx5_prm::wqe::inline_seg_size(payload.len()));
                let mut back = vec![0u8; size];
                sq::ring_read(ring, offset, &mut back).unwrap();
                assert_eq!(mlx5_prm::wqe::inline_payload(&back, 0), Ok(&payload[..]));
                assert!(back[4 + payload.len()..].iter().all(|&b| b == 0));
                // Nothing outside the segment changed.
                for (i, (&now, &was)) in ring.iter().zip(&before).enumerate() {
                    let rel = (i + ring.len() - offset) % ring.len();
                    if rel >= size {
                        assert_eq!(now, was, "byte {i} outside the segment changed");
                    }
                }
            }
            Err(e) => assert!(matches!(
                e,
                Error::BadRingSize | Error::OutOfRange | Error::Misaligned
            )),
        }
        // Reading a WQE from arbitrary contents never panics, and a
        // successful read is a wrapping copy of ds * 16 bytes.
        match sq::read_wqe(ring, offset, &mut wqe) {
            Ok(n) => {
                assert_eq!(n, usize::from(ring[offset + 7] & 0x3f) * 16);
                for (i, &b) in wqe[..n].iter().enumerate() {
                    assert_eq!(b, ring[(offset + i) % ring.len()]);
                }
            }
            Err(e) => assert!(matches!(
                e,
                Error::BadRingSize | Error::OutOfRange | Error::Misaligned | Error::BadDsCount
            )),
        }
    }
}

#[test]
fn receive_wqe() {
    let mut r = Rng::new(11);
    let mut slot_buf = [0u8; 16 * 17];
    for _ in 0..CASES {
        let capacity = r.below(17);
        let slot = &mut slot_buf[..capacity * 16];
        r.fill(slot);
        let n = r.below(capacity + 2);
        let segs: Vec<DataSeg> = (0..n)
            .map(|_| DataSeg {
                byte_count: r.bits(31) as u32,
                lkey: (r.bits(32) as u32) | 0x1000,
                addr: r.bits(64),
            })
            .collect();
        match write_recv_wqe(slot, &segs) {
            Ok(()) => {
                let read: Vec<DataSeg> = RecvSegs::new(slot).unwrap().collect();
                assert_eq!(read, segs);
            }
            Err(e) => {
                assert_eq!(e, Error::OutOfRange);
                assert!(n > capacity);
            }
        }
        // Arbitrary bytes and lengths never panic; reading stops at the
        // first terminator.
        let len = r.below(slot_buf.len());
        let raw = &mut slot_buf[..len];
        r.fill(raw);
        if len >= 16 && r.bool() {
            let at = r.below(len / 16) * 16;
            raw[at + 4..at + 8].copy_from_slice(&0x100u32.to_be_bytes());
        }
        match RecvSegs::new(raw) {
            Ok(it) => {
                for seg in it {
                    assert_ne!(seg.lkey, mlx5_prm::wqe::INVALID_LKEY);
                }
            }
            Err(e) => assert_eq!(e, Error::Misaligned),
        }
    }
}

/// Words in memory order as the bytes they hold.
fn flat<const W: usize, const N: usize>(words: [[u8; 8]; W]) -> [u8; N] {
    assert_eq!(W * 8, N);
    let mut b = [0u8; N];
    for (i, w) in words.iter().enumerate() {
        b[i * 8..i * 8 + 8].copy_from_slice(w);
    }
    b
}

#[test]
fn segment_words_match_the_encoders() {
    let mut r = Rng::new(12);
    for _ in 0..CASES {
        // Any value in every field, bits above the field widths included:
        // the words must drop them as `encode` does.
        let c = CtrlSeg {
            opmod: r.bits(8) as u8,
            wqe_index: r.bits(16) as u16,
            opcode: r.pick(SendOpcode::ALL),
            qpn: r.bits(32) as u32,
            ds: r.bits(8) as u8,
            signature: r.bits(8) as u8,
            fence_mode: r.bits(8) as u8,
            ce: r.bits(8) as u8,
            solicited: r.bool(),
            imm: r.bits(32) as u32,
        };
        let mut b: [u8; 16] = r.array();
        c.encode(&mut b);
        assert_eq!(flat::<2, 16>(c.to_words()), b, "{c:?}");
        assert_eq!(CtrlSeg::ds_of(&b), c.ds & 0x3f);
        assert_eq!(
            doorbell::send_doorbell_words(&c.to_words()),
            doorbell::send_doorbell(&b)
        );

        let a = RaddrSeg {
            raddr: r.bits(64),
            rkey: r.bits(32) as u32,
        };
        let mut b: [u8; 16] = r.array();
        a.encode(&mut b);
        assert_eq!(flat::<2, 16>(a.to_words()), b, "{a:?}");

        let d = DataSeg {
            byte_count: r.bits(32) as u32,
            lkey: r.bits(32) as u32,
            addr: r.bits(64),
        };
        d.encode(&mut b);
        assert_eq!(flat::<2, 16>(d.to_words()), b, "{d:?}");

        let t = AtomicSeg {
            swap_add: r.bits(64),
            compare: r.bits(64),
        };
        t.encode(&mut b);
        assert_eq!(flat::<2, 16>(t.to_words()), b, "{t:?}");

        let m = MaskedAtomicSeg {
            swap_add: r.bits(64),
            compare: r.bits(64),
            swap_add_mask: r.bits(64),
            compare_mask: r.bits(64),
        };
        let mut b: [u8; 32] = r.array();
        m.encode(&mut b);
        assert_eq!(flat::<4, 32>(m.to_words()), b, "{m:?}");
    }
}

#[test]
fn inline_words_match_the_sq_writer() {
    let mut r = Rng::new(13);
    let mut ring = vec![0u8; 2 * MAX_WQE_SIZE];
    for _ in 0..CASES / 4 {
        // Payloads up to what one WQE holds; short ones often.
        let len = if r.bool() {
            r.below(40)
        } else {
            r.below(MAX_WQE_SIZE - 3)
        };
        let payload: Vec<u8> = (0..len).map(|_| r.next() as u8).collect();
        r.fill(&mut ring);
        let size = sq::write_inline(&mut ring, 0, &payload).unwrap();
        let w = InlineHeader {
            byte_count: len as u32,
        }
        .words(&payload);
        assert_eq!(w.words * 8, size, "{len} bytes");
        let mut got = vec![0u8; size];
        got[..8].copy_from_slice(&w.first);
        for (i, word) in w.middle.iter().chain(w.last.as_ref()).enumerate() {
            got[8 + 8 * i..16 + 8 * i].copy_from_slice(word);
        }
        assert_eq!(got, ring[..size], "{len} bytes");
        assert_eq!(w.last.is_some(), (len + 4) % 8 != 0 && len > 4);

        // The header word alone, for any byte count.
        let h = InlineHeader {
            byte_count: r.bits(32) as u32,
        };
        let mut hb = [0u8; 4];
        h.encode(&mut hb);
        assert_eq!(h.words(&payload).first[..4], hb);
    }
}

#[test]
fn receive_wqe_words_match_the_writer() {
    let mut r = Rng::new(14);
    let mut want = [0u8; 16 * 17];
    let mut got = [0u8; 16 * 17];
    for _ in 0..CASES {
        let stride = r.below(18) * 16;
        let n = r.below(stride / 16 + 3);
        let segs: Vec<DataSeg> = (0..n)
            .map(|_| DataSeg {
                byte_count: r.bits(32) as u32,
                lkey: r.bits(32) as u32,
                addr: r.bits(64),
            })
            .collect();
        let fill = r.next() as u8;
        want.fill(fill);
        got.fill(fill);
        let expect = write_recv_wqe(&mut want[..stride.min(16 * 17)], &segs);
        match recv_wqe_words(segs.iter().copied(), stride) {
            Ok(entries) => {
                assert_eq!(expect, Ok(()));
                for (at, words) in entries {
                    got[at..at + 16].copy_from_slice(&flat::<2, 16>(words));
                }
                assert_eq!(got, want, "{n} segments in {stride}");
            }
            Err(e) => assert_eq!(Err(e), expect),
        }
    }
    // A stride that is not a multiple of 16 is refused like a slot of that
    // size.
    for stride in [1, 8, 24, 100] {
        assert_eq!(
            recv_wqe_words(core::iter::empty(), stride).err(),
            Some(Error::Misaligned)
        );
    }
}

#[test]
fn cqe_word_views_match_the_decoders() {
    let mut r = Rng::new(15);
    for _ in 0..CASES {
        let mut b: [u8; CQE_SIZE] = r.array();
        // Mostly known opcodes, so that the fields get compared.
        if r.below(8) != 0 {
            b[63] = u8::from(r.pick(CqeOpcode::ALL)) << 4 | b[63] & 0xf;
        }
        assert_eq!(Cqe64Words::from_bytes(&b).decode(), Cqe64::decode(&b));
        assert_eq!(ErrCqeWords::from_bytes(&b).decode(), ErrCqe::decode(&b));
        // Through `load`, from the words as a queue would hand them out.
        let word = |i: usize| <[u8; 8]>::try_from(&b[i * 8..i * 8 + 8]).unwrap();
        let c = Cqe64Words::load(word);
        let e = ErrCqeWords::load(word);
        assert_eq!(c.err_words(word), e);
        if let Ok(d) = Cqe64::decode(&b) {
            assert_eq!(
                (c.ml_path(), c.slid(), c.grh(), c.sl(), c.src_qpn()),
                (d.ml_path, d.slid, d.grh, d.sl, d.src_qpn)
            );
            assert_eq!(c.dlid_path_bits(), d.dlid_path_bits());
            assert_eq!(
                (c.srqn_uidx(), c.imm_inval_rkey(), c.byte_cnt()),
                (d.srqn_uidx, d.imm_inval_rkey, d.byte_cnt)
            );
            assert_eq!(
                (c.send_opcode(), c.qpn(), c.wqe_counter(), c.signature()),
                (d.send_opcode, d.qpn, d.wqe_counter, d.signature)
            );
            assert_eq!(c.op_own(), Ok(d.op_own));
        }
        if let Ok(d) = ErrCqe::decode(&b) {
            assert_eq!(
                (e.srqn(), e.vendor_syndrome(), e.syndrome()),
                (d.srqn, d.vendor_syndrome, d.syndrome)
            );
            assert_eq!(
                (e.send_opcode(), e.qpn(), e.wqe_counter(), e.signature()),
                (d.send_opcode, d.qpn, d.wqe_counter, d.signature)
            );
            assert_eq!(e.op_own(), Ok(d.op_own));
        }
    }
}

#[test]
fn doorbell_words_match_the_encoders() {
    let mut r = Rng::new(16);
    for _ in 0..CASES {
        // Any value in every field, bits above the field widths included.
        let arm = CqArm {
            sn: r.bits(8) as u8,
            cmd: if r.bool() {
                ArmCmd::Solicited
            } else {
                ArmCmd::Next
            },
            ci: r.bits(32) as u32,
        };
        let mut b4: [u8; 4] = r.array();
        arm.encode(&mut b4);
        assert_eq!(arm.to_bytes(), b4, "{arm:?}");

        let uar = UarCqDoorbell {
            arm,
            cqn: r.bits(32) as u32,
        };
        let mut b8: [u8; 8] = r.array();
        uar.encode(&mut b8);
        assert_eq!(uar.to_bytes(), b8, "{uar:?}");

        // The record words, one at a time, are the record's bytes.
        let cq = CqDbRec {
            set_ci: r.bits(32) as u32,
            arm,
        };
        cq.encode(&mut b8);
        let set_ci = doorbell::set_ci_word(cq.set_ci);
        assert_eq!(b8[CQ_DBR_SET_CI_OFFSET..CQ_DBR_SET_CI_OFFSET + 4], set_ci);
        assert_eq!(b8[CQ_DBR_ARM_OFFSET..CQ_DBR_ARM_OFFSET + 4], arm.to_bytes());
        let qp = QpDbRec {
            recv_counter: r.bits(16) as u16,
            send_counter: r.bits(16) as u16,
        };
        qp.encode(&mut b8);
        let recv = doorbell::counter_word(qp.recv_counter);
        let send = doorbell::counter_word(qp.send_counter);
        assert_eq!(b8[QP_DBR_RECV_OFFSET..QP_DBR_RECV_OFFSET + 4], recv);
        assert_eq!(b8[QP_DBR_SEND_OFFSET..QP_DBR_SEND_OFFSET + 4], send);
    }
}
