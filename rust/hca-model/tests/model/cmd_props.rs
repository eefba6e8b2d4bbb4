// SPDX-License-Identifier: GPL-2.0

//! Random command queue entries, inputs and mailbox chains thrown at the
//! device in every life-cycle state: it must never panic, must hand back
//! every entry it owns once the queue is loaded, and its page table must
//! stay consistent. The memory checker records stray accesses instead of
//! failing (random pointers are the point), and the device only touches
//! what the random entries tell it to.

use hca_model::fw::pages::PAGE_SIZE;
use hca_model::fw::FwConfig;
use mlx5_prm::cmd_hca::{
    EnableHca, EnableHcaIn, SetIssi, SetIssiIn, MANAGE_PAGES_ALLOCATION_SUCCESS, QUERY_PAGES_BOOT,
};
use mlx5_prm::cmd_queue::{sign_layout, CMD_LAYOUT_SIZE, MAILBOX_SIZE, STATUS_OWN_OFFSET};
use mlx5_prm::command::{InHeader, OPCODES, OP_MANAGE_PAGES};
use mlx5_prm::ifc::Layout;
use mlx5_prm::init_seg::CMD_DBELL_OFFSET;

use super::cmd_driver::*;
use super::harness::{scale, seed, Rng};
use super::mem::Kind;

/// A function in life-cycle stage `stage` (0: queue loaded, 1: enabled
/// with ISSI and boot pages, 2: initialized with EQs), in polling mode,
/// with a pool of plausible pages.
fn bed(stage: u64) -> (Bed, Vec<u64>) {
    let mut b = match stage {
        0 | 1 => {
            let mut b = Bed::new(1, FwConfig::DEFAULT);
            b.init_cmdq(0).unwrap();
            if stage == 1 {
                b.cmd::<EnableHca>(0, &EnableHcaIn::default(), &[]).unwrap();
                b.cmd::<SetIssi>(0, &SetIssiIn { current_issi: 1 }, &[])
                    .unwrap();
                b.startup_pages(0, QUERY_PAGES_BOOT);
            }
            b
        }
        _ => Bed::up(1),
    };
    // Commands may destroy any EQ: go back to polling and destroy the
    // command EQ, as mlx5_core does before unloading.
    if let Some(eq) = b.devs[0].cmd_eq.take() {
        b.cmd::<mlx5_prm::cmd_eq::DestroyEq>(
            0,
            &mlx5_prm::cmd_eq::DestroyEqIn { eq_number: eq.eqn },
            &[],
        )
        .unwrap();
        assert_eq!(b.devs[0].fw.cmd_eqn(), None);
    }
    b.w.mem.strict = false;
    let pool: Vec<u64> = (0..16)
        .map(|_| b.w.mem.alloc(PAGE_SIZE, Kind::DevWrite))
        .collect();
    (b, pool)
}

/// The input and output sizes of the command with `opcode`, if known.
fn sizes(opcode: u16) -> Option<(usize, usize)> {
    use mlx5_prm::command::Command;
    macro_rules! table {
        ($($c:ty),*) => {
            $(
                if opcode == <$c as Command>::OPCODE {
                    return Some((
                        <<$c as Command>::In as Layout>::SIZE,
                        <<$c as Command>::Out as Layout>::SIZE,
                    ));
                }
            )*
        };
    }
    use mlx5_prm::{cmd_cq::*, cmd_eq::*, cmd_hca::*, cmd_qp::*, cmd_res::*, hca_cap::*};
    table!(
        QueryHcaCap,
        InitHca,
        TeardownHca,
        EnableHca,
        DisableHca,
        QueryPages,
        ManagePages,
        SetHcaCap,
        QueryIssi,
        SetIssi,
        CreateMkey,
        DestroyMkey,
        CreateEq,
        DestroyEq,
        CreateCq,
        DestroyCq,
        CreateQp,
        DestroyQp,
        Rst2InitQp,
        Init2RtrQp,
        Rtr2RtsQp,
        Qp2Err,
        Qp2Rst,
        QueryQp,
        AllocPd,
        DeallocPd,
        AllocUar,
        DeallocUar
    );
    None
}

/// A random input for a known (or random) opcode, with plausible page
/// addresses after the fixed part now and then.
fn random_input(rng: &mut Rng, pool: &[u64]) -> Vec<u8> {
    let opcode = if rng.chance(9, 10) {
        OPCODES[rng.below(OPCODES.len() as u64) as usize].0
    } else {
        rng.next() as u16
    };
    let exact = sizes(opcode).map(|(i, _)| i + 8 * rng.below(4) as usize);
    let len = match rng.below(5) {
        4 if exact.is_some() => exact.unwrap_or(16),
        0 => 16,
        1 => 16 + rng.below(300) as usize,
        2 => 272 + 8 * rng.below(8) as usize,
        _ => 16 + rng.below(2000) as usize,
    };
    let mut msg = rng.bytes(len);
    let sane = rng.chance(7, 8);
    InHeader {
        opcode,
        uid: if sane { 0 } else { rng.next() as u16 },
        op_mod: match (sane, rng.below(4)) {
            (true, 0) => rng.below(4) as u16,
            (true, _) => 0,
            _ => rng.next() as u16,
        },
    }
    .encode(&mut msg)
    .unwrap();
    if sane {
        // Mostly-zero command fields make more commands get far.
        for x in msg.iter_mut().skip(8) {
            if rng.chance(7, 8) {
                *x = 0;
            }
        }
    }
    if opcode == OP_MANAGE_PAGES && len >= 24 && rng.chance(1, 2) {
        let n = ((len - 16) / 8).min(pool.len());
        msg[6..8].copy_from_slice(&MANAGE_PAGES_ALLOCATION_SUCCESS.to_be_bytes());
        msg[12..16].copy_from_slice(&(n as u32).to_be_bytes());
        for k in 0..n {
            let p = pool[rng.below(pool.len() as u64) as usize];
            msg[16 + 8 * k..24 + 8 * k].copy_from_slice(&p.to_be_bytes());
        }
    }
    msg
}

fn random_outlen(rng: &mut Rng) -> usize {
    match rng.below(5) {
        0 => 8,
        1 => 16,
        2 => 112,
        3 => 4112,
        _ => rng.below(2000) as usize,
    }
}

/// Posts `entry` to `slot` by hand (no driver checks) and returns whether
/// the device handed it back when it should have.
fn post_raw(b: &mut Bed, slot: u8, entry: &[u8; CMD_LAYOUT_SIZE], bits: u32) -> bool {
    let addr = b.devs[0].cmdq + (u64::from(slot) << 6);
    b.w.mem.put(addr, entry);
    b.devs[0].fw.write32(CMD_DBELL_OFFSET, bits);
    b.process(0);
    let own = b.w.mem.get(addr + STATUS_OWN_OFFSET as u64, 1)[0];
    entry[STATUS_OWN_OFFSET] & 1 == 0 || own & 1 == 0
}

/// A random pointer: null, a mailbox of either pool (aligned or not), the
/// command queue, or anywhere.
fn random_ptr(rng: &mut Rng, b: &Bed) -> u64 {
    let d = &b.devs[0];
    match rng.below(6) {
        0 => 0,
        1 => d.in_pool + 1024 * rng.below(8),
        2 => d.out_pool + 1024 * rng.below(8),
        3 => d.in_pool + rng.below(8192),
        4 => d.cmdq,
        _ => rng.next(),
    }
}

fn check_pages(b: &Bed) {
    let fw = &b.devs[0].fw;
    let held = fw.held_pages();
    assert!(held.len() <= PAGE_SLOTS);
    assert_eq!(fw.page_counts().held as usize, held.len());
    assert!(
        held.windows(2).all(|w| w[0] < w[1]),
        "held pages sorted, unique"
    );
    assert!(held.iter().all(|p| p % PAGE_SIZE == 0));
}

#[test]
fn random_commands_entries_and_mailboxes() {
    let mut rng = Rng(seed(0x5eed_c0de));
    let rounds = 6;
    let per_round = 500 * scale();
    let mut handed_back = 0u64;
    let mut seen = std::collections::BTreeMap::<String, u64>::new();
    let mut ok = 0u64;
    for round in 0..rounds {
        let (mut b, pool) = bed(round % 3);
        for _ in 0..per_round {
            let refusals = b.devs[0].fw.log().total();
            match rng.below(10) {
                // A well-formed entry and chains around a random input.
                0..=4 => {
                    let input = random_input(&mut rng, &pool);
                    let opcode = u16::from_be_bytes([input[0], input[1]]);
                    let outlen = match sizes(opcode) {
                        Some((_, o)) if rng.chance(1, 2) => o + 8 * rng.below(4) as usize,
                        _ => random_outlen(&mut rng),
                    };
                    let r = b.exec_raw(0, &input, outlen);
                    assert!(r.is_ok(), "a delivered entry is always handed back");
                    handed_back += 1;
                }
                // The same, with the entry or a mailbox corrupted.
                5..=7 => {
                    let input = random_input(&mut rng, &pool);
                    let outlen = random_outlen(&mut rng);
                    let mut p = b.prepare(0, &input, outlen);
                    for _ in 0..=rng.below(3) {
                        if rng.chance(1, 2) {
                            let i = rng.below(CMD_LAYOUT_SIZE as u64) as usize;
                            p.entry[i] ^= 1 << rng.below(8);
                        } else {
                            let base = if rng.chance(1, 2) {
                                b.devs[0].in_pool
                            } else {
                                b.devs[0].out_pool
                            };
                            let at = base + rng.below(4 * 1024);
                            b.w.mem.put(at, &[rng.next() as u8]);
                        }
                    }
                    if rng.chance(1, 2) {
                        sign_layout(&mut p.entry);
                    }
                    assert!(post_raw(&mut b, p.slot, &p.entry, 1 << p.slot));
                    handed_back += 1;
                }
                // A random entry with random pointers and random blocks.
                _ => {
                    let mut e: [u8; CMD_LAYOUT_SIZE] = rng.bytes(64).try_into().unwrap();
                    e[0] = if rng.chance(4, 5) { 7 } else { e[0] };
                    e[1..4].fill(0);
                    e[62] = 0;
                    let inlen = rng.below(3000) as u32;
                    let outlen = rng.below(3000) as u32;
                    e[4..8].copy_from_slice(&inlen.to_be_bytes());
                    e[56..60].copy_from_slice(&outlen.to_be_bytes());
                    e[8..16].copy_from_slice(&random_ptr(&mut rng, &b).to_be_bytes());
                    e[48..56].copy_from_slice(&random_ptr(&mut rng, &b).to_be_bytes());
                    e[63] = 1;
                    if rng.chance(4, 5) {
                        sign_layout(&mut e);
                    }
                    for _ in 0..rng.below(4) {
                        let k = rng.below(8);
                        let base = if rng.chance(1, 2) {
                            b.devs[0].in_pool
                        } else {
                            b.devs[0].out_pool
                        };
                        let mut blk: [u8; MAILBOX_SIZE] =
                            rng.bytes(MAILBOX_SIZE).try_into().unwrap();
                        if rng.chance(1, 2) {
                            blk[560..568].copy_from_slice(&random_ptr(&mut rng, &b).to_be_bytes());
                            blk[568..572].copy_from_slice(&(k as u32).to_be_bytes());
                            blk[573] = e[60];
                        }
                        b.w.mem.put(base + k * 1024, &blk);
                    }
                    let slot = rng.below(31) as u8;
                    let bits = if rng.chance(1, 8) {
                        rng.next() as u32 | 1 << slot
                    } else {
                        1 << slot
                    };
                    assert!(post_raw(&mut b, slot, &e, bits));
                    handed_back += 1;
                }
            }
            check_pages(&b);
            match b.devs[0].fw.log().last() {
                Some(e) if b.devs[0].fw.log().total() != refusals => {
                    *seen.entry(format!("{:?}", e.reject)).or_default() += 1;
                }
                _ => ok += 1,
            }
        }
        let fw = &b.devs[0].fw;
        assert!(fw.stats().commands > 0);
        assert!(
            fw.log().total() > 0,
            "random commands are refused now and then"
        );
    }
    assert!(handed_back >= rounds * per_round);
    // The stream reaches deep: many different refusals, and commands that
    // succeed.
    assert!(seen.len() >= 25, "{seen:?}");
    assert!(ok >= rounds * per_round / 40, "{ok} commands succeeded");
}

#[test]
fn random_register_traffic() {
    let mut rng = Rng(seed(0x1ee7));
    let (mut b, _) = bed(2);
    for _ in 0..2000 * scale() {
        let offset = (rng.below(0x2100) & !3) as usize;
        if rng.chance(1, 2) {
            b.devs[0].fw.read32(offset);
        } else if offset != mlx5_prm::init_seg::CMDQ_ADDR_H_OFFSET
            && offset != mlx5_prm::init_seg::CMDQ_ADDR_L_SZ_OFFSET
        {
            b.devs[0].fw.write32(offset, rng.next() as u32);
        }
        if b.devs[0].fw.has_pending() {
            b.process(0);
        }
        b.devs[0].fw.set_time(rng.below(1 << 40));
    }
    // The queue never moved: a command still works.
    let mut m = [0u8; 16];
    InHeader {
        opcode: mlx5_prm::command::OP_QUERY_ISSI,
        ..Default::default()
    }
    .encode(&mut m)
    .unwrap();
    b.devs[0].next_slot = 30;
    let r = b.exec_raw(0, &m, 112).unwrap();
    assert_eq!(r.delivery, mlx5_prm::cmd_queue::DeliveryStatus::Ok);
}
