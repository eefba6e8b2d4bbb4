// SPDX-License-Identifier: GPL-2.0

//! Bad pages and bad objects: MANAGE_PAGES lists the device must refuse
//! whole, and EQs, CQs, QPs, transitions, memory keys, PDs and UARs it
//! must refuse with the status and syndrome of each `Reject`, without
//! changing its page accounts.

use hca_model::fw::reject::Reject;
use hca_model::mr::MTT_MAX_ENTRIES;
use mlx5_prm::cmd_cq::{Cqc, CreateCq, CreateCqIn, CQE_SZ_128};
use mlx5_prm::cmd_eq::{event_mask, CreateEq, CreateEqIn, DestroyEq, DestroyEqIn, Eqc};
use mlx5_prm::cmd_hca::{
    EnableHca, EnableHcaIn, ManagePages, ManagePagesIn, SetIssi, SetIssiIn,
    MANAGE_PAGES_ALLOCATION_SUCCESS,
};
use mlx5_prm::cmd_qp::{
    CreateQp, CreateQpIn, Init2RtrQp, Init2RtrQpIn, Rst2InitQp, Rst2InitQpIn, Rtr2RtsQp,
    Rtr2RtsQpIn,
};
use mlx5_prm::cmd_res::{
    CreateMkey, CreateMkeyIn, DeallocPd, DeallocPdIn, DeallocUar, DeallocUarIn, DestroyMkey,
    DestroyMkeyIn, Mkc, ACCESS_MODE_KLMS, ACCESS_MODE_MTT,
};
use mlx5_prm::ifc::Layout;
use mlx5_prm::opcode::EventType;
use mlx5_prm::qpc::{OPTPAR_Q_KEY, ST_UC};

use super::cmd_driver::*;
use super::cmd_errors::{fresh, last, refused, status};
use super::harness::QpCaps;

#[test]
fn bad_pages() {
    let mut b = fresh();
    b.cmd::<EnableHca>(0, &EnableHcaIn::default(), &[]).unwrap();
    b.cmd::<SetIssi>(0, &SetIssiIn { current_issi: 1 }, &[])
        .unwrap();
    let give = |n: u32| ManagePagesIn {
        op_mod: MANAGE_PAGES_ALLOCATION_SUCCESS,
        input_num_entries: n,
        ..Default::default()
    };
    let p1 = b.w.mem.alloc(4096, super::mem::Kind::DevWrite);
    let p2 = b.w.mem.alloc(4096, super::mem::Kind::DevWrite);
    refused!(
        b,
        0,
        ManagePages,
        give(2),
        &[p1, p2 + 8],
        Reject::PageMisaligned
    );
    refused!(
        b,
        0,
        ManagePages,
        give(3),
        &[p1, p2, p1],
        Reject::PageDuplicate
    );
    refused!(b, 0, ManagePages, give(0), &[], Reject::NoPages);
    let cmdq = b.devs[0].cmdq;
    refused!(
        b,
        0,
        ManagePages,
        give(1),
        &[cmdq],
        Reject::PageOverlapsQueue
    );
    let uar = b.devs[0].uar_base + 4096;
    refused!(
        b,
        0,
        ManagePages,
        give(1),
        &[uar],
        Reject::PageOverlapsQueue
    );
    // More pages than the device's table holds: refused before reading.
    let mut msg = vec![0u8; 16 + 8 * (PAGE_SLOTS + 1)];
    give(PAGE_SLOTS as u32 + 1).encode(&mut msg).unwrap();
    let r = b.exec_raw(0, &msg, 16).unwrap();
    assert_eq!(r.status(), status(Reject::PageTableFull));
    // The list says more pages than the input carries.
    refused!(b, 0, ManagePages, give(4), &[p1, p2], Reject::InputTooShort);
    // A page the device cannot reach (in a guard zone).
    b.w.mem.strict = false;
    refused!(
        b,
        0,
        ManagePages,
        give(1),
        &[p2 + 0x2000],
        Reject::PageUnreachable
    );
    assert!(!b.w.mem.violations.is_empty());
    b.w.mem.violations.clear();
    b.w.mem.strict = true;
    // Nothing was taken; then the same pages are fine, once.
    assert_eq!(b.devs[0].fw.page_counts().held, 0);
    b.cmd::<ManagePages>(0, &give(2), &[p1, p2]).unwrap();
    refused!(b, 0, ManagePages, give(1), &[p2], Reject::PageAlreadyOwned);
    assert_eq!(b.devs[0].fw.held_pages(), [p1, p2]);
}

#[test]
fn bad_objects() {
    let mut b = Bed::up(1);
    let uar = b.devs[0].uar;
    let pd = b.alloc_pd(0);
    let cq = b.create_cq(0, 4);
    // EQs: a second command EQ, a vector beyond the MSI-X table, an
    // unallocated UAR, a non-contiguous buffer, a buffer in a held page.
    let eq = |events: &[EventType], intr: u16, uar_page: u32| CreateEqIn {
        eq_context_entry: Eqc {
            log_eq_size: 6,
            uar_page,
            intr,
            ..Eqc::default()
        },
        event_bitmask: event_mask(events),
    };
    let buf = b.w.mem.alloc(8192, super::mem::Kind::DevWrite);
    refused!(
        b,
        0,
        CreateEq,
        eq(&[EventType::Cmd], 2, uar),
        &[buf],
        Reject::EventTaken
    );
    refused!(b, 0, CreateEq, eq(&[], 64, uar), &[buf], Reject::BadVector);
    refused!(b, 0, CreateEq, eq(&[], 2, 0), &[buf], Reject::BadUar);
    let mut big = eq(&[], 2, uar);
    big.eq_context_entry.log_eq_size = 7;
    refused!(
        b,
        0,
        CreateEq,
        big,
        &[buf, buf + 0x3000],
        Reject::QueueNotContiguous
    );
    refused!(b, 0, CreateEq, big, &[buf], Reject::QueuePagesTooShort);
    refused!(
        b,
        0,
        CreateEq,
        eq(&[], 2, uar),
        &[buf + 64],
        Reject::QueuePageMisaligned
    );
    let held = b.devs[0].fw.held_pages()[0];
    refused!(
        b,
        0,
        CreateEq,
        eq(&[], 2, uar),
        &[held],
        Reject::QueueOverlapsPages
    );
    let comp = b.w.ctx[0].comp.eqn;
    refused!(
        b,
        0,
        DestroyEq,
        DestroyEqIn { eq_number: comp },
        &[],
        Reject::EqBusy
    );
    refused!(
        b,
        0,
        DestroyEq,
        DestroyEqIn { eq_number: 200 },
        &[],
        Reject::BadEq
    );
    // CQs: 128-byte CQEs, an EQ that does not exist.
    let cqc = |eqn: u32| Cqc {
        log_cq_size: 4,
        uar_page: uar,
        c_eqn_or_apu_element: eqn,
        dbr_addr: buf + 0x1000,
        ..Cqc::default()
    };
    let mut c = cqc(u32::from(comp));
    c.cqe_sz = CQE_SZ_128;
    refused!(
        b,
        0,
        CreateCq,
        CreateCqIn { cq_context: c },
        &[buf],
        Reject::UnsupportedQueueMode
    );
    refused!(
        b,
        0,
        CreateCq,
        CreateCqIn {
            cq_context: cqc(77)
        },
        &[buf],
        Reject::BadEq
    );
    let mut c = cqc(u32::from(comp));
    c.dbr_addr += 4;
    refused!(
        b,
        0,
        CreateCq,
        CreateCqIn { cq_context: c },
        &[buf],
        Reject::DbrMisaligned
    );
    // QPs: not RC, an unknown CQ, a bad transition, a bad path.
    let qpc = |st: u8, cqn: u32| mlx5_prm::qpc::Qpc {
        st,
        pd,
        uar_page: uar,
        log_rq_size: 2,
        log_rq_stride: 0,
        log_sq_size: 2,
        cqn_snd: cqn,
        cqn_rcv: cqn,
        dbr_addr: buf + 0x1000,
        ..rc_qpc()
    };
    let create = |q| CreateQpIn { ece: 0, qpc: q };
    refused!(
        b,
        0,
        CreateQp,
        create(qpc(ST_UC, cq.cqn)),
        &[buf],
        Reject::UnsupportedSt
    );
    refused!(b, 0, CreateQp, create(qpc(0, 999)), &[buf], Reject::BadCq);
    let mut q = qpc(0, cq.cqn);
    q.pd = 999;
    refused!(b, 0, CreateQp, create(q), &[buf], Reject::BadPd);
    let qp = b.create_qp(0, pd, &cq, &cq, QpCaps::default());
    let rts = Rtr2RtsQpIn {
        qpn: qp.qpn,
        ..Default::default()
    };
    refused!(b, 0, Rtr2RtsQp, rts, &[], Reject::BadQpState);
    let mut init = rc_qpc();
    init.primary_address_path.vhca_port_num = 2;
    let r2i = |q| Rst2InitQpIn {
        qpn: qp.qpn,
        qpc: q,
        ..Default::default()
    };
    refused!(b, 0, Rst2InitQp, r2i(init), &[], Reject::BadQpAttr);
    init.primary_address_path.vhca_port_num = 1;
    b.cmd::<Rst2InitQp>(0, &r2i(init), &[]).unwrap();
    let mut rtr = rc_qpc();
    rtr.mtu = 5;
    let i2r = |q, opt| Init2RtrQpIn {
        qpn: qp.qpn,
        opt_param_mask: opt,
        qpc: q,
        ..Default::default()
    };
    refused!(b, 0, Init2RtrQp, i2r(rtr, 0), &[], Reject::BadRlid);
    rtr.primary_address_path.rlid = 1;
    refused!(
        b,
        0,
        Init2RtrQp,
        i2r(rtr, OPTPAR_Q_KEY),
        &[],
        Reject::BadOptParam
    );
    rtr.mtu = 7;
    refused!(b, 0, Init2RtrQp, i2r(rtr, 0), &[], Reject::BadQpAttr);
    let bad = Rst2InitQpIn {
        qpn: 0x7777,
        ..Default::default()
    };
    refused!(b, 0, Rst2InitQp, bad, &[], Reject::BadQp);
    // Memory keys: KLM mode, a region longer than a translation table,
    // misaligned MTT entries (contiguous or scattered), unknown key; PD
    // and UAR busy.
    let mut mkc = Mkc {
        lr: true,
        qpn: 0xff_ffff,
        pd,
        start_addr: 0x10_0000,
        len: 8192,
        log_page_size: 12,
        translations_octword_size: 1,
        ..Mkc::default()
    };
    mkc.set_access_mode(ACCESS_MODE_KLMS);
    let mk = |m| CreateMkeyIn {
        pg_access: false,
        memory_key_mkey_entry: m,
        translations_octword_actual_size: 1,
    };
    refused!(b, 0, CreateMkey, mk(mkc), &[0, 0], Reject::BadAccessMode);
    mkc.set_access_mode(ACCESS_MODE_MTT);
    let long = Mkc {
        len: (MTT_MAX_ENTRIES + 1) * 4096 - 0x1000,
        start_addr: 0x10_0800,
        ..mkc
    };
    refused!(
        b,
        0,
        CreateMkey,
        mk(long),
        &[buf, buf + 0x3000],
        Reject::MttTooLong
    );
    refused!(
        b,
        0,
        CreateMkey,
        mk(mkc),
        &[buf + 8, buf + 0x1008],
        Reject::MttMisaligned
    );
    refused!(
        b,
        0,
        CreateMkey,
        mk(mkc),
        &[buf, buf + 0x3008],
        Reject::MttMisaligned
    );
    assert_eq!(b.devs[0].fw.page_counts().in_use, 0);
    mkc.rw = true;
    refused!(
        b,
        0,
        CreateMkey,
        mk(mkc),
        &[buf, buf + 0x1000],
        Reject::BadMkeyAccess
    );
    mkc.free = true;
    refused!(
        b,
        0,
        CreateMkey,
        mk(mkc),
        &[buf, buf + 0x1000],
        Reject::UnsupportedMkey
    );
    refused!(
        b,
        0,
        DestroyMkey,
        DestroyMkeyIn { mkey_index: 40 },
        &[],
        Reject::BadMkey
    );
    let data = b.w.buffer(4096);
    let key = b.reg_mr(0, pd, data, 4096, false, 0);
    assert_ne!(key, 0x100, "never MLX5_INVALID_LKEY");
    refused!(b, 0, DeallocPd, DeallocPdIn { pd }, &[], Reject::PdBusy);
    refused!(b, 0, DeallocUar, DeallocUarIn { uar }, &[], Reject::UarBusy);
    refused!(
        b,
        0,
        DeallocUar,
        DeallocUarIn { uar: 9 },
        &[],
        Reject::BadUar
    );
    // Nothing refused changed the page accounts.
    assert_eq!(
        b.devs[0].fw.page_counts().held as usize,
        b.devs[0].given.len()
    );
    b.destroy_qp(0, qp.qpn);
    b.destroy_cq(0, cq.cqn);
    b.dereg_mr(0, key);
    b.dealloc_pd(0, pd);
    b.tear_down(0);
}
