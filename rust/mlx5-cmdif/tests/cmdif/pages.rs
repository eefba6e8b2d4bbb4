// SPDX-License-Identifier: GPL-2.0

//! Page requests both ways, batching, running out of memory, and pages the
//! device returns that it was never given.

use hca_model::fw::FwConfig;
use mlx5_cmdif::bus::Bus;
use mlx5_cmdif::cmdif::{CmdIf, Timeouts};
use mlx5_cmdif::cmdmem::CMD_MEM_MIN;
use mlx5_cmdif::error::Error;
use mlx5_cmdif::function::{Config, Function};
use mlx5_cmdif::pages::Pages;
use mlx5_prm::cmd_hca::{
    DisableHca, DisableHcaIn, EnableHca, EnableHcaIn, ManagePages, ManagePagesIn, SetIssi,
    SetIssiIn, MANAGE_PAGES_ALLOCATION_SUCCESS,
};

use super::rig::Rig;

/// Tears `f` down and checks that everything is back.
fn down(mut f: Function, rig: &mut Rig) {
    f.teardown(rig).unwrap();
    rig.assert_clean();
}

fn up(rig: &mut Rig) -> Function {
    let mut f = Function::new(rig.cmd_mem(), Config::default());
    f.bring_up(rig).unwrap();
    f
}

#[test]
fn page_requests_give_and_take() {
    let mut rig = Rig::new(FwConfig::DEFAULT);
    let mut f = up(&mut rig);
    assert_eq!(f.page_request(&mut rig, 5), Ok(5));
    assert_eq!(rig.fw.page_counts().held, 29);
    assert_eq!(f.pages().lent(), 29);
    rig.assert_pages_consistent();
    assert_eq!(f.page_request(&mut rig, -3), Ok(3));
    assert_eq!(rig.fw.page_counts().held, 26);
    rig.assert_pages_consistent();
    // The device needs its 24 boot and init pages: it returns only 2.
    assert_eq!(f.page_request(&mut rig, -10), Ok(2));
    assert_eq!(rig.fw.page_counts().held, 24);
    assert_eq!(f.page_request(&mut rig, 0), Ok(0));
    rig.assert_pages_consistent();
    down(f, &mut rig);
}

#[test]
fn page_request_before_bring_up_is_refused() {
    let mut rig = Rig::new(FwConfig::DEFAULT);
    let mut f = Function::new(rig.cmd_mem(), Config::default());
    assert!(matches!(
        f.page_request(&mut rig, 4),
        Err(Error::State { .. })
    ));
    assert!(rig.out.is_empty());
}

#[test]
fn large_requests_go_in_batches() {
    // The smallest command memory: 8 mailboxes, 512 pages per command.
    let mut rig = Rig::with_cmd_len(FwConfig::DEFAULT, CMD_MEM_MIN);
    let mut f = up(&mut rig);
    let before = rig.fw.stats().commands;
    assert_eq!(f.page_request(&mut rig, 1200), Ok(1200));
    assert_eq!(rig.fw.stats().commands - before, 3);
    assert_eq!(rig.fw.page_counts().held, 1224);
    rig.assert_pages_consistent();
    let before = rig.fw.stats().commands;
    assert_eq!(f.page_request(&mut rig, -1200), Ok(1200));
    assert_eq!(rig.fw.stats().commands - before, 3);
    rig.assert_pages_consistent();
    down(f, &mut rig);
}

#[test]
fn running_out_of_memory_tells_the_device() {
    let mut rig = Rig::new(FwConfig::DEFAULT);
    let mut f = up(&mut rig);
    rig.alloc_budget = Some(2);
    assert_eq!(
        f.page_request(&mut rig, 5),
        Err(Error::PageAlloc {
            wanted: 5,
            given: 0
        })
    );
    // The two pages it got were freed, and the device was told.
    rig.assert_pages_consistent();
    assert_eq!(rig.out.len(), 24);
    assert_eq!(rig.fw.page_counts().alloc_failures, 1);
    assert_eq!(f.pages().alloc_failures(), 1);
    rig.alloc_budget = None;
    down(f, &mut rig);
}

#[test]
fn a_page_the_device_was_never_given_is_reported() {
    let mut rig = Rig::new(FwConfig::DEFAULT);
    let mut f = up(&mut rig);
    // The driver's bookkeeping loses one page, so when the device returns
    // it, it is a page the driver does not know.
    let lost = rig.fw.held_pages()[3];
    rig.out.remove(&lost);
    let e = f.teardown(&mut rig).unwrap_err();
    assert_eq!(e, Error::UnknownPage { addr: lost });
    assert_eq!(rig.unknown_frees, vec![lost]);
    assert!(e.to_string().contains("it was not given"));
}

#[test]
fn exec_page_lists_span_mailboxes() {
    let mut rig = Rig::new(FwConfig::DEFAULT);
    let mem = rig.cmd_mem();
    let mut cmd = CmdIf::init(&mut rig, mem, Timeouts::default()).unwrap();
    cmd.exec::<EnableHca, _>(&mut rig, &EnableHcaIn::default(), &[])
        .unwrap();
    cmd.exec::<SetIssi, _>(&mut rig, &SetIssiIn { current_issi: 1 }, &[])
        .unwrap();
    // 100 pages: 800 bytes of list, in two input mailboxes.
    let pas: Vec<u64> = (0..100).map(|_| rig.alloc_page().unwrap()).collect();
    let input = ManagePagesIn {
        op_mod: MANAGE_PAGES_ALLOCATION_SUCCESS,
        input_num_entries: 100,
        ..ManagePagesIn::default()
    };
    cmd.exec::<ManagePages, _>(&mut rig, &input, &pas).unwrap();
    assert_eq!(rig.fw.held_pages(), &pas[..]);
    rig.assert_pages_consistent();
    // Taken back by a page account that never gave them: its count stays
    // at zero, and every page is freed.
    let mut acct = Pages::new();
    assert_eq!(acct.take(&mut cmd, &mut rig, 1000), Ok(100));
    assert_eq!((acct.lent(), acct.returned_total()), (0, 100));
    cmd.exec::<DisableHca, _>(&mut rig, &DisableHcaIn::default(), &[])
        .unwrap();
    rig.assert_clean();
}
