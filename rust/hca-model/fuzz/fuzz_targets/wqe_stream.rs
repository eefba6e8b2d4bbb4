//! Random WQE streams against the software HCA.
//!
//! Two instances, one connected RC QP pair, registered buffers. The fuzz
//! input is a stream of records: raw WQE bytes written into the SQ and rung
//! (plain doorbell or BlueFlame), receives with arbitrary scatter entries,
//! CQ arms, clock advances. The test memory of the model's own test harness
//! panics on any access outside what was registered, so a stray DMA is a
//! crash; the CQEs and EQEs the model writes must decode.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code, unused_imports)]
#[path = "../../tests/model/harness.rs"]
mod harness;
#[allow(dead_code, unused_imports)]
#[path = "../../tests/model/mem.rs"]
mod mem;
#[allow(dead_code, unused_imports)]
#[path = "../../tests/model/provider.rs"]
mod provider;

use harness::{QpCaps, Ring, Sge, TestCq, World};
use hca_model::mr::Access;
use mlx5_prm::cqe::{Cqe64, ErrCqe, CQE_SIZE, OP_OWN_OFFSET};
use mlx5_prm::doorbell::set_ci_word;
use mlx5_prm::eqe::{Eqe, EQE_SIZE, OWNER_OFFSET};
use mlx5_prm::opcode::CqeOpcode;
use mlx5_prm::{ring, sq};

/// Consumes the CQEs the model wrote; each must decode.
fn drain(w: &mut World, cq: &mut TestCq) {
    loop {
        let addr = cq.buf + u64::from(ring::ring_index(cq.ci, cq.log)) * CQE_SIZE as u64;
        let op_own = w.read(addr + OP_OWN_OFFSET as u64, 1)[0];
        if !ring::cqe_sw_owned(op_own, cq.ci, cq.log) {
            break;
        }
        let bytes: [u8; CQE_SIZE] = w.read(addr, CQE_SIZE).try_into().unwrap();
        let op = CqeOpcode::try_from(op_own >> 4).expect("model wrote an unknown CQE opcode");
        if op.is_error() {
            ErrCqe::decode(&bytes).expect("model wrote a bad error CQE");
        } else {
            Cqe64::decode(&bytes).expect("model wrote a bad CQE");
        }
        cq.ci = cq.ci.wrapping_add(1);
    }
    w.fill(cq.dbr, &set_ci_word(cq.ci));
}

/// Consumes the EQEs of instance `h`; each must decode.
fn drain_eqs(w: &mut World, h: usize) {
    for async_eq in [false, true] {
        loop {
            let eq = if async_eq {
                &w.ctx[h].async_eq
            } else {
                &w.ctx[h].comp
            };
            let addr = eq.buf + u64::from(ring::ring_index(eq.ci, eq.log)) * EQE_SIZE as u64;
            let owner = w.read(addr + OWNER_OFFSET as u64, 1)[0];
            if !ring::eqe_valid(owner, eq.ci, eq.log) {
                break;
            }
            let bytes: [u8; EQE_SIZE] = w.read(addr, EQE_SIZE).try_into().unwrap();
            Eqe::decode(&bytes).expect("model wrote a bad EQE");
            let eq = if async_eq {
                &mut w.ctx[h].async_eq
            } else {
                &mut w.ctx[h].comp
            };
            eq.ci = eq.ci.wrapping_add(1);
        }
        w.eq_arm(h, async_eq);
    }
}

fn take<'a>(input: &mut &'a [u8], n: usize) -> &'a [u8] {
    let (head, rest) = input.split_at(n.min(input.len()));
    *input = rest;
    head
}

fn u32_of(b: &[u8]) -> u32 {
    let mut x = [0u8; 4];
    x[..b.len().min(4)].copy_from_slice(&b[..b.len().min(4)]);
    u32::from_le_bytes(x)
}

fuzz_target!(|data: &[u8]| {
    let mut w = World::new(2);
    let all = Access::LOCAL_WRITE
        .union(Access::REMOTE_WRITE)
        .union(Access::REMOTE_READ)
        .union(Access::REMOTE_ATOMIC);
    let pd0 = w.pd(0);
    let pd1 = w.pd(1);
    let buf0 = w.buffer(4096);
    let buf1 = w.buffer(4096);
    let k0 = w.mr(0, pd0, buf0, 4096, all);
    let k1 = w.mr(1, pd1, buf1, 4096, all);
    let mut cq0 = w.cq(0, 4);
    let mut cq1 = w.cq(1, 4);
    let caps = QpCaps {
        sq_wqebbs: 16,
        rq_wqes: 16,
        ..QpCaps::default()
    };
    let mut a = w.qp(0, pd0, &cq0, &cq0, caps);
    let mut b = w.qp(1, pd1, &cq1, &cq1, caps);
    w.connect(&a, &b);
    for i in 0..4 {
        let sge = Sge {
            addr: buf1,
            len: 1024,
            lkey: k1,
        };
        w.post_recv(&mut b, i, &[sge]);
    }

    let mut input = data;
    let mut records = 0;
    while let Some((&op, rest)) = input.split_first() {
        input = rest;
        records += 1;
        if records > 64 {
            break;
        }
        match op % 4 {
            0 => {
                // Raw WQE bytes at the producer counter, then a doorbell.
                let bbs = u16::from(op >> 4).clamp(1, 4);
                let len = usize::from(bbs) * 64;
                let mut wqe = vec![0u8; len];
                let bytes = take(&mut input, len);
                wqe[..bytes.len()].copy_from_slice(bytes);
                let ring_len = a.sq_wqebbs as usize * 64;
                let off = ring::sq_offset(a.cur_post, a.sq_wqebbs.trailing_zeros());
                sq::ring_write(w.mem.slice_mut(a.sq_buf, ring_len), off, &wqe).unwrap();
                let index = a.cur_post;
                a.cur_post = a.cur_post.wrapping_add(bbs);
                let how = if op & 8 != 0 {
                    Ring::BlueFlame
                } else {
                    Ring::Plain
                };
                let _ = w.ring_sq(&mut a, index, bbs, how);
                w.run();
            }
            1 => {
                // A receive with an arbitrary scatter entry.
                let b4 = take(&mut input, 12);
                let addr = buf1.wrapping_add(u64::from(u32_of(b4.get(..4).unwrap_or(&[]))) % 8192);
                let len = u32_of(b4.get(4..8).unwrap_or(&[])) % 8192;
                let lkey = if op & 16 != 0 {
                    k1
                } else {
                    u32_of(b4.get(8..).unwrap_or(&[]))
                };
                if len > 0 {
                    w.post_recv(&mut b, u64::from(op), &[Sge { addr, len, lkey }]);
                } else {
                    w.post_recv(&mut b, u64::from(op), &[]);
                }
                w.run();
            }
            2 => {
                let _ = w.arm_cq(&cq0, op & 16 != 0);
                let _ = w.arm_cq(&cq1, op & 32 != 0);
            }
            _ => w.advance(u64::from(op) * 1_000_000),
        }
        drain(&mut w, &mut cq0);
        drain(&mut w, &mut cq1);
        drain_eqs(&mut w, 0);
        drain_eqs(&mut w, 1);
    }
    let _ = k0;
});
