// SPDX-License-Identifier: GPL-2.0

//! The command interface refusing what a device refuses: commands out of
//! the bring-up order, unknown opcodes and op_mods, short messages, bad
//! queue entries and mailbox chains, ignored doorbells, a firmware that
//! never finishes initialising (bad pages and objects: `cmd_objects`). Each refusal must come back with the
//! status and syndrome of its `Reject` and land in the device's log.

use hca_model::fw::reject::{Code, Reject};
use hca_model::fw::{FwConfig, HcaState, Readiness};
use mlx5_prm::cmd_cq::CreateCqIn;
use mlx5_prm::cmd_hca::{
    DisableHca, DisableHcaIn, EnableHca, EnableHcaIn, InitHca, InitHcaIn, ManagePages,
    ManagePagesIn, QueryPages, QueryPagesIn, SetIssi, SetIssiIn, TeardownHca, TeardownHcaIn,
    MANAGE_PAGES_ALLOCATION_SUCCESS, QUERY_PAGES_BOOT, QUERY_PAGES_INIT,
};
use mlx5_prm::cmd_queue::{DeliveryStatus, CMD_LAYOUT_SIZE};
use mlx5_prm::cmd_res::{AllocPd, AllocPdIn};
use mlx5_prm::cmd_status::CmdStatus;
use mlx5_prm::command::{InHeader, OP_QUERY_ISSI};
use mlx5_prm::hca_cap::{query_op_mod, QueryHcaCap, QueryHcaCapIn, CAP_GENERAL, CAP_ODP};
use mlx5_prm::ifc::Layout;
use mlx5_prm::init_seg::{CMDQ_ADDR_L_SZ_OFFSET, CMD_DBELL_OFFSET};

use super::cmd_driver::*;

/// The status a refusal reports in the output header.
pub fn status(r: Reject) -> (CmdStatus, u32) {
    match r.code() {
        Code::Status(s) => (s, r.syndrome()),
        c => panic!("{r:?} is reported as {c:?}"),
    }
}

/// The last logged refusal of function `d`.
pub fn last(b: &Bed, d: usize) -> Reject {
    b.devs[d].fw.log().last().expect("a logged refusal").reject
}

/// Asserts that command `C` fails with `r` and that the device logged it.
macro_rules! refused {
    ($b:expr, $d:expr, $cmd:ty, $input:expr, $pas:expr, $r:expr) => {{
        let got = $b.fails::<$cmd>($d, &$input, $pas);
        assert_eq!(
            got,
            status($r),
            "{} should fail with {:?}",
            stringify!($cmd),
            $r
        );
        assert_eq!(last(&$b, $d), $r);
    }};
}

pub(crate) use refused;

/// A function with the queue handed over and nothing else.
pub fn fresh() -> Bed {
    let mut b = Bed::new(1, FwConfig::DEFAULT);
    b.init_cmdq(0).unwrap();
    b
}

#[test]
fn commands_out_of_order() {
    let mut b = fresh();
    refused!(
        b,
        0,
        SetIssi,
        SetIssiIn { current_issi: 1 },
        &[],
        Reject::NotEnabled
    );
    refused!(b, 0, AllocPd, AllocPdIn::default(), &[], Reject::NotEnabled);
    b.cmd::<EnableHca>(0, &EnableHcaIn::default(), &[]).unwrap();
    refused!(
        b,
        0,
        EnableHca,
        EnableHcaIn::default(),
        &[],
        Reject::AlreadyEnabled
    );
    let boot = QueryPagesIn {
        op_mod: QUERY_PAGES_BOOT,
        ..Default::default()
    };
    refused!(b, 0, QueryPages, boot, &[], Reject::IssiNotSet);
    refused!(
        b,
        0,
        SetIssi,
        SetIssiIn { current_issi: 0 },
        &[],
        Reject::UnsupportedIssi
    );
    b.cmd::<SetIssi>(0, &SetIssiIn { current_issi: 1 }, &[])
        .unwrap();
    let cap = QueryHcaCapIn {
        op_mod: query_op_mod(CAP_GENERAL, 1),
        ..Default::default()
    };
    refused!(b, 0, QueryHcaCap, cap, &[], Reject::BootPagesMissing);
    let init = QueryPagesIn {
        op_mod: QUERY_PAGES_INIT,
        ..Default::default()
    };
    refused!(b, 0, QueryPages, init, &[], Reject::BootPagesMissing);
    refused!(
        b,
        0,
        AllocPd,
        AllocPdIn::default(),
        &[],
        Reject::NotInitialized
    );
    refused!(
        b,
        0,
        TeardownHca,
        TeardownHcaIn::default(),
        &[],
        Reject::NotInitialized
    );
    b.startup_pages(0, QUERY_PAGES_BOOT);
    b.cmd::<QueryHcaCap>(0, &cap, &[]).unwrap();
    refused!(
        b,
        0,
        InitHca,
        InitHcaIn::default(),
        &[],
        Reject::InitPagesMissing
    );
    b.startup_pages(0, QUERY_PAGES_INIT);
    b.cmd::<InitHca>(0, &InitHcaIn::default(), &[]).unwrap();
    refused!(
        b,
        0,
        InitHca,
        InitHcaIn::default(),
        &[],
        Reject::AlreadyInitialized
    );
    refused!(
        b,
        0,
        SetIssi,
        SetIssiIn { current_issi: 1 },
        &[],
        Reject::SettingsLocked
    );
    refused!(
        b,
        0,
        DisableHca,
        DisableHcaIn::default(),
        &[],
        Reject::TeardownFirst
    );
    let pd = b.alloc_pd(0);
    refused!(
        b,
        0,
        TeardownHca,
        TeardownHcaIn::default(),
        &[],
        Reject::ObjectsAlive
    );
    b.dealloc_pd(0, pd);
    b.cmd::<TeardownHca>(0, &TeardownHcaIn::default(), &[])
        .unwrap();
    refused!(
        b,
        0,
        AllocPd,
        AllocPdIn::default(),
        &[],
        Reject::NotInitialized
    );
    let give = ManagePagesIn {
        op_mod: MANAGE_PAGES_ALLOCATION_SUCCESS,
        input_num_entries: 1,
        ..Default::default()
    };
    refused!(
        b,
        0,
        ManagePages,
        give,
        &[0x1000],
        Reject::GiveAfterTeardown
    );
    // Teardown with pages outstanding: DISABLE_HCA waits for them.
    refused!(
        b,
        0,
        DisableHca,
        DisableHcaIn::default(),
        &[],
        Reject::PagesOutstanding
    );
    assert_eq!(b.devs[0].fw.state(), HcaState::TornDown);
    b.take(0, 10);
    refused!(
        b,
        0,
        DisableHca,
        DisableHcaIn::default(),
        &[],
        Reject::PagesOutstanding
    );
    b.reclaim_all(0);
    b.cmd::<DisableHca>(0, &DisableHcaIn::default(), &[])
        .unwrap();
    assert_eq!(b.devs[0].fw.page_counts().held, 0);
}

#[test]
fn bad_opcodes_op_mods_and_lengths() {
    let mut b = Bed::up(1);
    for opcode in [0u16, 0x101, 0x805, 0x1234, 0xffff] {
        let mut msg = [0u8; 16];
        InHeader {
            opcode,
            ..Default::default()
        }
        .encode(&mut msg)
        .unwrap();
        let r = b.exec_raw(0, &msg, 16).unwrap();
        assert_eq!(r.delivery, DeliveryStatus::Ok);
        assert_eq!(r.status(), status(Reject::BadOpcode), "opcode {opcode:#x}");
    }
    // op_mod where the command has none, and a bad QUERY_PAGES op_mod.
    let mut msg = [0u8; 16];
    InHeader {
        opcode: mlx5_prm::command::OP_ALLOC_PD,
        op_mod: 1,
        ..Default::default()
    }
    .encode(&mut msg)
    .unwrap();
    assert_eq!(
        b.exec_raw(0, &msg, 16).unwrap().status(),
        status(Reject::BadOpMod)
    );
    let q = QueryPagesIn {
        op_mod: 7,
        ..Default::default()
    };
    refused!(b, 0, QueryPages, q, &[], Reject::BadOpMod);
    let q = QueryPagesIn {
        op_mod: QUERY_PAGES_BOOT,
        function_id: 3,
        ..Default::default()
    };
    refused!(b, 0, QueryPages, q, &[], Reject::OtherFunction);
    let cap = QueryHcaCapIn {
        op_mod: query_op_mod(CAP_ODP, 1),
        ..Default::default()
    };
    refused!(b, 0, QueryHcaCap, cap, &[], Reject::UnsupportedCapType);
    // A user context's command.
    InHeader {
        opcode: mlx5_prm::command::OP_ALLOC_PD,
        uid: 5,
        op_mod: 0,
    }
    .encode(&mut msg)
    .unwrap();
    assert_eq!(
        b.exec_raw(0, &msg, 16).unwrap().status(),
        status(Reject::NonZeroUid)
    );
    // Output too short for the command (ALLOC_PD's is 16 bytes): the
    // header still fits in 8.
    InHeader {
        opcode: mlx5_prm::command::OP_ALLOC_PD,
        ..Default::default()
    }
    .encode(&mut msg)
    .unwrap();
    let r = b.exec_raw(0, &msg, 8).unwrap();
    assert_eq!(r.status(), status(Reject::OutputTooShort));
    // Input too short: CREATE_CQ cut to 100 bytes.
    let mut cq = vec![0u8; CreateCqIn::SIZE];
    CreateCqIn::default().encode(&mut cq).unwrap();
    let r = b.exec_raw(0, &cq[..100], 16).unwrap();
    assert_eq!(r.status(), status(Reject::InputTooShort));
    // QUERY_HCA_CAP needs its whole 4 KiB output.
    let mut q = [0u8; 16];
    QueryHcaCapIn {
        op_mod: query_op_mod(CAP_GENERAL, 0),
        ..Default::default()
    }
    .encode(&mut q)
    .unwrap();
    let r = b.exec_raw(0, &q, 256).unwrap();
    assert_eq!(r.status(), status(Reject::OutputTooShort));
    assert!(b.devs[0].fw.log().total() >= 11);
}

/// Prepares QUERY_ISSI (112-byte output: one output mailbox) and lets
/// `corrupt` change the entry or the mailboxes before posting; returns the
/// delivery status.
fn deliver(
    b: &mut Bed,
    input: &[u8],
    corrupt: impl FnOnce(&mut Bed, &mut [u8; 64]),
) -> DeliveryStatus {
    let mut p = b.prepare(0, input, 112);
    corrupt(b, &mut p.entry);
    b.submit(0, &p).expect("entry handed back").delivery
}

/// A change made to a prepared command before it is posted.
type Corrupt = Box<dyn FnOnce(&mut Bed, &mut [u8; 64])>;

fn resign(e: &mut [u8; CMD_LAYOUT_SIZE]) {
    mlx5_prm::cmd_queue::sign_layout(e);
}

#[test]
fn bad_entries_and_mailbox_chains() {
    let mut b = Bed::up(1);
    let mut issi = [0u8; 16];
    InHeader {
        opcode: OP_QUERY_ISSI,
        ..Default::default()
    }
    .encode(&mut issi)
    .unwrap();
    // A 1100-byte input (three input mailboxes) that is otherwise valid.
    let mut long = vec![0u8; 1100];
    long[..16].copy_from_slice(&issi);
    let out_pool = b.devs[0].out_pool;
    let in_pool = b.devs[0].in_pool;
    let cases: Vec<(&str, &[u8], Corrupt, Reject)> = vec![
        (
            "type",
            &issi,
            Box::new(|_, e| {
                e[0] = 6;
                resign(e);
            }),
            Reject::BadEntryType,
        ),
        (
            "signature",
            &issi,
            Box::new(|_, e| e[20] ^= 0x40),
            Reject::BadEntrySignature,
        ),
        (
            "reserved",
            &issi,
            Box::new(|_, e| {
                e[2] = 1;
                resign(e);
            }),
            Reject::EntryReservedSet,
        ),
        (
            "inlen",
            &issi,
            Box::new(|_, e| {
                e[7] = 4;
                resign(e);
            }),
            Reject::BadInputLength,
        ),
        (
            "outlen",
            &issi,
            Box::new(|_, e| {
                e[59] = 4;
                resign(e);
            }),
            Reject::BadOutputLength,
        ),
        (
            "out token",
            &issi,
            Box::new(move |b, _| b.w.mem.put(out_pool + 573, &[0x77])),
            Reject::OutToken,
        ),
        (
            "out align",
            &issi,
            Box::new(|_, e| {
                e[55] = 0x40;
                resign(e);
            }),
            Reject::OutPtrAlign,
        ),
        (
            "out chain short",
            &issi,
            Box::new(|_, e| {
                e[48..56].fill(0);
                resign(e);
            }),
            Reject::OutChainShort,
        ),
        (
            "in token",
            &long,
            Box::new(move |b, _| b.w.mem.put(in_pool + 1024 + 573, &[0x77])),
            Reject::InToken,
        ),
        (
            "in block_num",
            &long,
            Box::new(move |b, _| b.w.mem.put(in_pool + 2048 + 571, &[9])),
            Reject::InBlockNum,
        ),
        (
            "in chain short",
            &long,
            Box::new(move |b, _| b.w.mem.put(in_pool + 1024 + 560, &[0; 8])),
            Reject::InChainShort,
        ),
        (
            "in align",
            &long,
            Box::new(move |b, _| b.w.mem.put(in_pool + 567, &[0x10])),
            Reject::InPtrAlign,
        ),
    ];
    for (what, input, corrupt, want) in cases {
        let got = deliver(&mut b, input, corrupt);
        let Code::Delivery(d) = want.code() else {
            unreachable!()
        };
        assert_eq!(got, d, "{what}");
        assert_eq!(last(&b, 0), want, "{what}");
    }
    // An input mailbox pointing into a guard zone: a DMA fault the device
    // survives (the harness records the stray read instead of panicking).
    b.w.mem.strict = false;
    let got = deliver(&mut b, &long, |_, e| {
        e[8..16].copy_from_slice(&0x1000u64.to_be_bytes());
        resign(e);
    });
    assert_eq!(got, DeliveryStatus::FwErr);
    assert_eq!(last(&b, 0), Reject::MailboxFault);
    b.w.mem.violations.clear();
    b.w.mem.strict = true;
    // Each delivery failure was still handed back with a completion EQE;
    // a correct command still works afterwards.
    b.cmd::<mlx5_prm::cmd_hca::QueryIssi>(0, &Default::default(), &[])
        .unwrap();
    assert_eq!(b.devs[0].fw.stats().delivery_errors, 13);
}

#[test]
fn doorbells_the_device_cannot_act_on() {
    let mut b = Bed::up(1);
    // An entry without the ownership bit: nothing is written, the driver
    // times out.
    let mut msg = [0u8; 16];
    InHeader {
        opcode: OP_QUERY_ISSI,
        ..Default::default()
    }
    .encode(&mut msg)
    .unwrap();
    let mut p = b.prepare(0, &msg, 16);
    p.entry[63] = 0;
    resign(&mut p.entry);
    let addr = b.devs[0].cmdq + (u64::from(p.slot) << 6);
    b.w.mem.put(addr, &p.entry);
    b.devs[0].fw.write32(CMD_DBELL_OFFSET, 1 << p.slot);
    assert_eq!(b.process(0), 0);
    assert_eq!(last(&b, 0), Reject::EntryNotOwned);
    assert_eq!(b.w.mem.get(addr, 64), p.entry, "entry untouched");
    // A doorbell bit beyond the 32 entries cannot exist; moving the queue
    // while enabled is refused and logged.
    b.devs[0].fw.write32(CMDQ_ADDR_L_SZ_OFFSET, 0x1234_5000);
    assert_eq!(last(&b, 0), Reject::CmdqMoved);
    b.cmd::<mlx5_prm::cmd_hca::QueryIssi>(0, &Default::default(), &[])
        .unwrap();
}

#[test]
fn firmware_that_never_initializes() {
    let cfg = FwConfig {
        ready: Readiness::Never,
        ..FwConfig::DEFAULT
    };
    let mut b = Bed::new(1, cfg);
    assert_eq!(b.init_cmdq(0), Err("firmware pre-initializing timeout"));
    // A driver that ignores it and rings anyway gets no answer.
    b.devs[0].log_sz = 5;
    b.devs[0].log_stride = 6;
    let (h, l) = mlx5_prm::init_seg::cmdq_addr(b.devs[0].cmdq).unwrap();
    b.devs[0]
        .fw
        .write32(mlx5_prm::init_seg::CMDQ_ADDR_H_OFFSET, h);
    b.devs[0].fw.write32(CMDQ_ADDR_L_SZ_OFFSET, l);
    let mut msg = [0u8; 16];
    EnableHcaIn::default().encode(&mut msg).unwrap();
    assert_eq!(b.exec_raw(0, &msg, 16).unwrap_err(), Lost::Timeout);
    assert_eq!(last(&b, 0), Reject::DoorbellNotReady);
    assert_eq!(b.devs[0].fw.state(), HcaState::Disabled);
    // A stray doorbell write without a pending queue does nothing either.
    b.devs[0].fw.write32(CMD_DBELL_OFFSET, 0);
    assert_eq!(b.process(0), 0);
}

#[test]
fn every_refusal_is_documented_once() {
    let mut names: Vec<String> = Reject::ALL.iter().map(|r| format!("{r:?}")).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), Reject::ALL.len());
    // The documentation's error table lists every syndrome.
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../Documentation/hca-model.md"
    ))
    .unwrap();
    for r in Reject::ALL {
        let s = format!("{:#010x}", r.syndrome());
        assert!(
            doc.contains(&s),
            "{r:?} ({s}) missing from Documentation/hca-model.md"
        );
    }
}
