// SPDX-License-Identifier: GPL-2.0

//! Property tests of the command layer, with a small deterministic PRNG:
//!
//! - for every mlx5_ifc layout: `decode` of random bytes never fails on a
//!   long enough buffer, re-encoding gives back exactly the input under the
//!   layout's mask of modelled bits (plus the opcode of a command input),
//!   `decode(encode(x)) == x`, `encode` writes every byte of the layout and
//!   none after it, and short buffers are refused;
//! - the same for the plain structs (queue entry, mailbox block, health
//!   buffer, EQE data) and the register decoders of the initialization
//!   segment;
//! - [`get_bits`] / [`put_bits`] agree with a bit-by-bit reference;
//! - a message of any length survives the trip through an entry and a
//!   chain of mailboxes, with good signatures and block numbers;
//! - page lists and command inputs with page lists round-trip.

use std::fmt::Debug;

use mlx5_prm::cmd_cq::{Cqc, CreateCq, CreateCqIn, CreateCqOut, DestroyCqIn, DestroyCqOut};
use mlx5_prm::cmd_eq::{CreateEqIn, CreateEqOut, DestroyEqIn, DestroyEqOut, Eqc};
use mlx5_prm::cmd_hca::*;
use mlx5_prm::cmd_qp::*;
use mlx5_prm::cmd_queue::{self, CmdLayout, MailboxHeader, MAILBOX_DATA_SIZE, MAILBOX_SIZE};
use mlx5_prm::cmd_res::*;
use mlx5_prm::cmd_status::{CmdError, CmdStatus};
use mlx5_prm::cmd_vport::*;
use mlx5_prm::command::{self, Command, InHeader, OutHeader};
use mlx5_prm::eqe::DATA_SIZE;
use mlx5_prm::eqe_async::{AsyncEvent, CmdEqe, PageRequestEqe, PortChangeEqe};
use mlx5_prm::error::Error;
use mlx5_prm::hca_cap::{
    HcaCap, QueryHcaCap, QueryHcaCapIn, QueryHcaCapOut, SetHcaCapIn, SetHcaCapOut,
};
use mlx5_prm::ifc::{get_bits, pas, put_bits, put_pas, Layout};
use mlx5_prm::init_seg::{CmdqAddrLSz, FwRev, HealthBuffer, HEALTH_BUFFER_SIZE};
use mlx5_prm::qpc::{Ads, Qpc};

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

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn fill(&mut self, b: &mut [u8]) {
        for x in b {
            *x = self.next() as u8;
        }
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut b = vec![0u8; n];
        self.fill(&mut b);
        b
    }

    fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut b = [0u8; N];
        self.fill(&mut b);
        b
    }
}

fn encode<T: Layout>(x: &T) -> Vec<u8> {
    let mut b = vec![0u8; T::SIZE];
    x.encode(&mut b).unwrap();
    b
}

/// The properties of one mlx5_ifc layout; returns how many cases ran.
fn layout<T: Layout + Default + PartialEq + Debug>(r: &mut Rng) -> usize {
    let name = T::NAME;
    let size = T::SIZE;
    // Short buffers are refused, without writing.
    let mut short = vec![0x5au8; size - 1];
    assert_eq!(
        T::default().encode(&mut short),
        Err(Error::OutOfRange),
        "{name}"
    );
    assert!(
        short.iter().all(|&b| b == 0x5a),
        "{name}: wrote into a short buffer"
    );
    assert_eq!(T::decode(&short), Err(Error::OutOfRange), "{name}");
    // The bits the encoder always writes (a command input's opcode) and the
    // bits of the modelled fields.
    let fixed = encode(&T::default());
    let all = encode(&T::decode(&vec![0xff; size]).unwrap());
    let fields: Vec<u8> = all.iter().zip(&fixed).map(|(a, z)| a & !z).collect();
    let cases = (2_000_000 / size).clamp(300, 20_000);
    for _ in 0..cases {
        let extra = r.below(24);
        let raw = r.bytes(size + extra);
        let x = T::decode(&raw).unwrap();
        let mut out = r.bytes(size + extra);
        let tail = out[size..].to_vec();
        x.encode(&mut out).unwrap();
        assert_eq!(out[size..], tail[..], "{name}: wrote past its size");
        for i in 0..size {
            assert_eq!(
                out[i],
                (raw[i] & fields[i]) | fixed[i],
                "{name}: byte {i} of a decoded random layout re-encodes differently"
            );
        }
        assert_eq!(T::decode(&out), Ok(x), "{name}: decode(encode(x))");
    }
    cases
}

macro_rules! layouts {
    ($r:expr; $($t:ty),* $(,)?) => {{
        let mut n = 0;
        $( n += layout::<$t>($r); )*
        n
    }};
}

#[test]
fn every_layout_round_trips() {
    let mut r = Rng::new(0x6c61796f);
    let cases = layouts!(&mut r;
        InHeader, OutHeader, HcaCap, Mkc, Eqc, Cqc, Qpc, Ads,
        EnableHcaIn, EnableHcaOut, DisableHcaIn, DisableHcaOut,
        QueryIssiIn, QueryIssiOut, SetIssiIn, SetIssiOut,
        QueryPagesIn, QueryPagesOut, ManagePagesIn, ManagePagesOut,
        InitHcaIn, InitHcaOut, TeardownHcaIn, TeardownHcaOut,
        QueryHcaCapIn, QueryHcaCapOut, SetHcaCapIn, SetHcaCapOut,
        AllocUarIn, AllocUarOut, DeallocUarIn, DeallocUarOut,
        AllocPdIn, AllocPdOut, DeallocPdIn, DeallocPdOut,
        CreateMkeyIn, CreateMkeyOut, DestroyMkeyIn, DestroyMkeyOut,
        CreateEqIn, CreateEqOut, DestroyEqIn, DestroyEqOut,
        CreateCqIn, CreateCqOut, DestroyCqIn, DestroyCqOut,
        CreateQpIn, CreateQpOut, DestroyQpIn, DestroyQpOut,
        Rst2InitQpIn, Rst2InitQpOut, Init2InitQpIn, Init2InitQpOut, Init2RtrQpIn, Init2RtrQpOut,
        Rtr2RtsQpIn, Rtr2RtsQpOut, Qp2ErrIn, Qp2ErrOut, Qp2RstIn, Qp2RstOut,
        QueryQpIn, QueryQpOut,
        HcaVportContext, NicVportContext,
        QueryHcaVportContextIn, QueryHcaVportContextOut, QueryHcaVportGidIn, QueryHcaVportGidOut,
        QueryNicVportContextIn, QueryNicVportContextOut,
    );
    assert!(cases > 500_000, "only {cases} cases");
}

/// A mask of `N` bytes: `ff` except the given zero ranges and single bytes.
fn mask<const N: usize>(zero: &[(usize, usize)], bytes: &[(usize, u8)]) -> [u8; N] {
    let mut m = [0xffu8; N];
    for &(a, b) in zero {
        m[a..b].fill(0);
    }
    for &(i, v) in bytes {
        m[i] = v;
    }
    m
}

fn assert_masked(what: &str, raw: &[u8], m: &[u8], enc: &[u8]) {
    for i in 0..raw.len() {
        assert_eq!(raw[i] & m[i], enc[i], "{what}: byte {i}");
    }
}

const CASES: usize = 100_000;

#[test]
fn queue_entry_round_trips() {
    let mut r = Rng::new(0x656e7472);
    let m = mask::<64>(&[(1, 4)], &[(62, 0)]);
    for _ in 0..CASES {
        let raw: [u8; 64] = r.array();
        let x = CmdLayout::decode(&raw);
        let mut out: [u8; 64] = r.array();
        x.encode(&mut out);
        assert_masked("mlx5_cmd_layout", &raw, &m, &out);
        assert_eq!(CmdLayout::decode(&out), x);
        assert_eq!(x.ownership, cmd_queue::owned_by_hw(raw[63]));
        assert_eq!(x.status.raw(), raw[63] >> 1);
    }
}

#[test]
fn mailbox_block_round_trips() {
    let mut r = Rng::new(0x6d626f78);
    let m = mask::<MAILBOX_SIZE>(&[(512, 560)], &[(572, 0)]);
    for _ in 0..CASES / 10 {
        let raw: [u8; MAILBOX_SIZE] = r.array();
        let h = MailboxHeader::decode(&raw);
        let mut out: [u8; MAILBOX_SIZE] = r.array();
        h.encode(&raw[..MAILBOX_DATA_SIZE], &mut out).unwrap();
        assert_masked("mlx5_cmd_prot_block", &raw, &m, &out);
        assert_eq!(MailboxHeader::decode(&out), h);
        let mut signed = out;
        cmd_queue::sign_block(&mut signed);
        assert!(cmd_queue::block_signature_ok(&signed));
        assert_eq!(signed[..574], out[..574]);
    }
}

#[test]
fn health_buffer_round_trips() {
    let mut r = Rng::new(0x6865616c);
    let m = mask::<HEALTH_BUFFER_SIZE>(&[(24, 32), (40, 44), (57, 60)], &[]);
    for _ in 0..CASES {
        let raw: [u8; HEALTH_BUFFER_SIZE] = r.array();
        let h = HealthBuffer::decode(&raw);
        let mut out: [u8; HEALTH_BUFFER_SIZE] = r.array();
        h.encode(&mut out);
        assert_masked("health_buffer", &raw, &m, &out);
        assert_eq!(HealthBuffer::decode(&out), h);
    }
}

#[test]
fn event_data_round_trips() {
    let mut r = Rng::new(0x65716573);
    let cmd_m = mask::<DATA_SIZE>(&[(4, DATA_SIZE)], &[]);
    let page_m = mask::<DATA_SIZE>(&[(8, DATA_SIZE)], &[(0, 0xc0), (1, 0)]);
    let port_m = mask::<DATA_SIZE>(&[(0, 8), (9, DATA_SIZE)], &[(8, 0xf0)]);
    for _ in 0..CASES {
        let raw: [u8; DATA_SIZE] = r.array();
        let mut out: [u8; DATA_SIZE] = r.array();
        let c = CmdEqe::decode(&raw);
        c.encode(&mut out);
        assert_masked("mlx5_eqe_cmd", &raw, &cmd_m, &out);
        assert_eq!(CmdEqe::decode(&out), c);
        let p = PageRequestEqe::decode(&raw);
        p.encode(&mut out);
        assert_masked("mlx5_eqe_page_req", &raw, &page_m, &out);
        assert_eq!(PageRequestEqe::decode(&out), p);
        let q = PortChangeEqe::decode(&raw);
        q.encode(&mut out);
        assert_masked("mlx5_eqe_port_state", &raw, &port_m, &out);
        assert_eq!(PortChangeEqe::decode(&out), q);
        for ev in [
            AsyncEvent::Cmd(c),
            AsyncEvent::PageRequest(p),
            AsyncEvent::PortChange {
                sub_type: raw[20],
                event: q,
            },
        ] {
            let e = ev.to_eqe(raw[21], raw[22] & 1 != 0);
            let mut b = [0u8; 64];
            e.encode(&mut b);
            let back = mlx5_prm::eqe::Eqe::decode(&b).unwrap();
            assert_eq!(back, e);
            assert_eq!(AsyncEvent::from_eqe(&back), Some(ev));
        }
    }
}

#[test]
fn registers_round_trip() {
    let mut r = Rng::new(0x72656773);
    for _ in 0..CASES {
        let (a, b) = (r.next() as u32, r.next() as u32);
        let v = FwRev::decode(a, b);
        assert_eq!(v.encode(mlx5_prm::init_seg::cmdif_rev(b)), (a, b));
        let l = CmdqAddrLSz::decode(a);
        assert_eq!(l.encode(), a & !0x800, "bit 11 is reserved");
        let addr = r.next() & !0xfff;
        let (h, lo) = mlx5_prm::init_seg::cmdq_addr(addr).unwrap();
        assert_eq!(u64::from(h) << 32 | u64::from(lo), addr);
        assert_eq!(
            mlx5_prm::init_seg::cmdq_addr(addr | (1 + (r.next() & 0x7fe))),
            Err(Error::Misaligned)
        );
    }
}

/// A reference for `get_bits`: one bit at a time.
fn naive_get(b: &[u8], bit: usize, width: usize) -> u64 {
    (bit..bit + width).fold(0, |v, i| {
        let x = b.get(i / 8).map_or(0, |x| (x >> (7 - i % 8)) & 1);
        v << 1 | u64::from(x)
    })
}

#[test]
fn bit_fields_match_a_reference() {
    let mut r = Rng::new(0x62697473);
    for _ in 0..CASES {
        let len = 1 + r.below(24);
        let mut b = r.bytes(len);
        let before = b.clone();
        let bit = r.below(len * 8 + 16);
        let width = 1 + r.below(64);
        let v = r.next();
        assert_eq!(get_bits(&b, bit, width), naive_get(&b, bit, width));
        put_bits(&mut b, bit, width, v);
        let m = if width == 64 {
            u64::MAX
        } else {
            (1 << width) - 1
        };
        // What fits in the buffer reads back; nothing else changed.
        let inside = (len * 8).saturating_sub(bit).min(width);
        let expect = if inside == 0 {
            0
        } else {
            ((v & m) >> (width - inside)) << (width - inside)
        };
        assert_eq!(get_bits(&b, bit, width), expect, "bit {bit} width {width}");
        for i in 0..len * 8 {
            if i < bit || i >= bit + width {
                assert_eq!(
                    naive_get(&b, i, 1),
                    naive_get(&before, i, 1),
                    "bit {i} moved"
                );
            }
        }
    }
}

#[test]
fn messages_survive_the_mailboxes() {
    let mut r = Rng::new(0x6d736773);
    for case in 0..3000 {
        let len = if case < 600 { case } else { r.below(9000) };
        let msg = r.bytes(len);
        let n = cmd_queue::mailbox_count(len);
        assert_eq!(n, len.saturating_sub(16).div_ceil(512));
        let token = r.next() as u8;
        let base = (r.next() & !0x3ff) | 0x1000;
        let addr = |i: usize| base + (i as u64) * 1024;
        let sign = r.next() & 1 != 0;
        let entry = CmdLayout::request(&msg, if n > 0 { addr(0) } else { 0 }, 16, 0, token);
        assert_eq!(entry.inlen as usize, len);
        let mut back = vec![0u8; len];
        let head = len.min(16);
        back[..head].copy_from_slice(&entry.in_data[..head]);
        assert!(entry.in_data[head..].iter().all(|&x| x == 0));
        let mut blocks = Vec::new();
        for i in 0..n {
            let next = if i + 1 < n { addr(i + 1) } else { 0 };
            let mut blk: [u8; MAILBOX_SIZE] = r.array();
            cmd_queue::write_mailbox(&msg, i, next, token, sign, &mut blk).unwrap();
            let h = MailboxHeader::decode(&blk);
            assert_eq!((h.next, h.block_num as usize, h.token), (next, i, token));
            if sign {
                assert!(cmd_queue::block_signature_ok(&blk));
            }
            let data = cmd_queue::mailbox_data(&msg, i);
            assert!(!data.is_empty() && data.len() <= MAILBOX_DATA_SIZE);
            assert!(blk[data.len()..MAILBOX_DATA_SIZE].iter().all(|&x| x == 0));
            blocks.push(blk);
        }
        let mut extra: [u8; MAILBOX_SIZE] = r.array();
        assert_eq!(
            cmd_queue::write_mailbox(&msg, n, 0, token, sign, &mut extra),
            Err(Error::OutOfRange)
        );
        let mut copied = head;
        for (i, blk) in blocks.iter().enumerate() {
            copied += cmd_queue::read_mailbox(blk, i, &mut back);
        }
        assert_eq!(copied, len);
        assert_eq!(back, msg, "message of {len} bytes");
    }
}

/// A random input of command `C` with `npas` random page addresses, built
/// with `encode_in` and read back.
fn command_with_pages<C: Command>(r: &mut Rng, npas: usize)
where
    C::In: PartialEq + Debug + Clone,
{
    let raw = r.bytes(<C::In as Layout>::SIZE);
    let input = C::In::decode(&raw).unwrap();
    let pages: Vec<u64> = (0..npas).map(|_| r.next() & !0xfff).collect();
    let slack = r.below(16);
    let mut msg = r.bytes(command::in_len::<C>(npas) + slack);
    let len = command::encode_in::<C>(&input, &pages, &mut msg).unwrap();
    assert_eq!(len, command::in_len::<C>(npas));
    assert!(C::In::decode(&msg) == Ok(input.clone()));
    assert_eq!(u16::from_be_bytes([msg[0], msg[1]]), C::OPCODE);
    let back: Vec<u64> = pas(&msg, <C::In as Layout>::SIZE, npas).unwrap().collect();
    assert_eq!(back, pages);
    if npas > 0 {
        assert_eq!(
            command::encode_in::<C>(&input, &pages, &mut msg[..len - 1]),
            Err(Error::OutOfRange)
        );
    }
}

#[test]
fn page_lists_round_trip() {
    let mut r = Rng::new(0x70617373);
    for _ in 0..2000 {
        let n = r.below(600);
        command_with_pages::<CreateQp>(&mut r, n);
        command_with_pages::<CreateCq>(&mut r, n);
        command_with_pages::<mlx5_prm::cmd_eq::CreateEq>(&mut r, n);
        command_with_pages::<CreateMkey>(&mut r, n);
        command_with_pages::<ManagePages>(&mut r, n);
        command_with_pages::<QueryPages>(&mut r, 0);
        let mut b = r.bytes(8 * n + 8);
        let pages: Vec<u64> = (0..n).map(|_| r.next()).collect();
        let off = r.below(8);
        assert_eq!(put_pas(&mut b, off, &pages), Ok(off + 8 * n));
        assert_eq!(pas(&b, off, n).unwrap().collect::<Vec<_>>(), pages);
    }
}

#[test]
fn statuses_become_errors() {
    let mut r = Rng::new(0x73746174);
    for _ in 0..CASES {
        let status = r.next() as u8;
        let syndrome = r.next() as u32;
        let n = 16 + r.below(8);
        let mut out = r.bytes(n);
        OutHeader {
            status: CmdStatus::from_raw(status),
            syndrome,
        }
        .encode(&mut out)
        .unwrap();
        let res = command::check::<CreateQp>(&out);
        if status == 0 {
            assert_eq!(res, Ok(()));
        } else {
            assert_eq!(
                res,
                Err(CmdError::Failed {
                    command: "CREATE_QP",
                    opcode: 0x500,
                    status: CmdStatus::from_raw(status),
                    syndrome,
                })
            );
            assert_eq!(
                res,
                Err(CmdError::from_status(0x500, status, syndrome).unwrap())
            );
        }
        // Whatever the bytes, checking and decoding never panic.
        let n = r.below(40);
        let junk = r.bytes(n);
        let _ = command::decode_out::<CreateQp>(&junk);
        let _ = command::decode_out::<QueryHcaCap>(&junk);
    }
}

#[test]
fn errors_print_for_the_log() {
    let e = CmdError::from_status(0x500, 0x3, 0x1234_abcd).unwrap();
    assert_eq!(
        e.to_string(),
        "CREATE_QP (0x500) failed: status BAD_PARAM_ERR (0x3), syndrome 0x1234abcd"
    );
    let d = CmdError::from_delivery(0x10b, mlx5_prm::cmd_queue::DeliveryStatus::SignatErr);
    assert_eq!(
        d.unwrap().to_string(),
        "SET_ISSI (0x10b) not delivered: delivery status SIGNAT_ERR (0x1)"
    );
    let s = command::decode_out::<QueryIssi>(&[0u8; 20]).unwrap_err();
    assert_eq!(
        s.to_string(),
        "QUERY_ISSI (0x10a): output buffer of 20 bytes, need 112"
    );
    assert_eq!(CmdStatus::Unknown(0x77).to_string(), "UNKNOWN (0x77)");
}
