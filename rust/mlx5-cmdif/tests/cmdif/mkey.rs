// SPDX-License-Identifier: GPL-2.0

//! Memory keys for fast registration through the driver's command path:
//! CREATE_MKEY of a free, UMR-enabled MTT key as mlx5_ib's `alloc_mr`
//! makes it, what the device refuses of free keys, and DESTROY_MKEY.

use hca_model::fw::reject::Reject;
use hca_model::fw::FwConfig;
use mlx5_cmdif::error::Error;
use mlx5_cmdif::function::{Config, Function};
use mlx5_prm::cmd_res::{
    mkey, AllocPd, AllocPdIn, CreateMkey, CreateMkeyIn, DestroyMkey, DestroyMkeyIn, Mkc,
    ACCESS_MODE_MTT, ACCESS_MODE_PA,
};
use mlx5_prm::cmd_status::CmdError;

use super::rig::{Rig, EXT_BASE};

fn free_mkc(pd: u32, octwords: u32, mode: u8, umr_en: bool) -> CreateMkeyIn {
    let mut mkc = Mkc {
        free: true,
        umr_en,
        qpn: 0xff_ffff,
        mkey_7_0: 0x5a,
        pd,
        translations_octword_size: octwords,
        log_page_size: 12,
        ..Mkc::default()
    };
    mkc.set_access_mode(mode);
    CreateMkeyIn {
        pg_access: false,
        memory_key_mkey_entry: mkc,
        translations_octword_actual_size: 0,
    }
}

fn syndrome(e: Error) -> u32 {
    match e {
        Error::Cmd(CmdError::Failed { syndrome, .. }) => syndrome,
        other => panic!("expected a refused command, got {other:?}"),
    }
}

#[test]
fn free_umr_keys_for_fast_registration() {
    let mut rig = Rig::new(FwConfig::DEFAULT);
    let mut f = Function::new(rig.cmd_mem(), Config::default());
    f.bring_up(&mut rig).unwrap();
    let cmd = f.cmdif().unwrap();
    let pd = cmd
        .exec::<AllocPd, _>(&mut rig, &AllocPdIn::default(), &[])
        .unwrap()
        .pd;

    // 512 pages, two per octoword: the key the driver asked for, free.
    let o = cmd
        .exec::<CreateMkey, _>(&mut rig, &free_mkc(pd, 256, ACCESS_MODE_MTT, true), &[])
        .unwrap();
    let key = mkey(o.mkey_index, 0x5a);
    let m = rig.hca.query_mr(key).unwrap();
    assert_eq!(m.key(), key, "the key byte is the driver's");

    // Without umr_en, in PA mode, or for more pages than a fast MR may
    // have: refused, naming why.
    for (i, why) in [
        (
            free_mkc(pd, 256, ACCESS_MODE_MTT, false),
            Reject::UnsupportedMkey,
        ),
        (
            free_mkc(pd, 256, ACCESS_MODE_PA, true),
            Reject::UnsupportedMkey,
        ),
        (
            free_mkc(pd, 257, ACCESS_MODE_MTT, true),
            Reject::UnsupportedMkey,
        ),
        (free_mkc(pd + 7, 4, ACCESS_MODE_MTT, true), Reject::BadPd),
    ] {
        let e = cmd.exec::<CreateMkey, _>(&mut rig, &i, &[]).unwrap_err();
        assert_eq!(syndrome(e), why.syndrome(), "{i:?}");
    }

    cmd.exec::<DestroyMkey, _>(
        &mut rig,
        &DestroyMkeyIn {
            mkey_index: o.mkey_index,
        },
        &[],
    )
    .unwrap();
    assert!(rig.hca.query_mr(key).is_none());
}

#[test]
fn a_translation_table_longer_than_entry_0s_pool_goes_in_extra_blocks() {
    let mut rig = Rig::new(FwConfig::DEFAULT);
    let mut f = Function::new(rig.cmd_mem(), Config::default());
    f.bring_up(&mut rig).unwrap();
    let cmd = f.cmdif().unwrap();
    let pd = cmd
        .exec::<AllocPd, _>(&mut rig, &AllocPdIn::default(), &[])
        .unwrap()
        .pd;
    // 2,000 pages of a scattered region: 16,000 bytes of table, where
    // entry 0's pool (16 blocks here) carries 992 entries.
    let pages: Vec<u64> = (0..2000u64)
        .map(|i| 0x40_0000_0000 + i * 2 * 4096)
        .collect();
    let mut mkc = Mkc {
        qpn: 0xff_ffff,
        mkey_7_0: 0x33,
        pd,
        lr: true,
        lw: true,
        start_addr: 0x7000_0000,
        len: 2000 * 4096,
        translations_octword_size: 1000,
        log_page_size: 12,
        ..Mkc::default()
    };
    mkc.set_access_mode(ACCESS_MODE_MTT);
    let input = CreateMkeyIn {
        pg_access: false,
        memory_key_mkey_entry: mkc,
        translations_octword_actual_size: 1000,
    };
    assert!(matches!(
        cmd.exec::<CreateMkey, _>(&mut rig, &input, &pages),
        Err(Error::TooLong { .. })
    ));
    let need = cmd.ext_blocks::<CreateMkey>(pages.len());
    assert_eq!(need, 32 - 16, "16,272 bytes of input: 32 blocks");
    // Not in address order: the chain follows `next`, not arithmetic.
    let ext: Vec<u64> = (0..need as u64)
        .rev()
        .map(|i| EXT_BASE + i * 1024)
        .collect();
    assert!(matches!(
        cmd.exec_ext::<CreateMkey, _>(&mut rig, &input, &pages, &ext[1..]),
        Err(Error::TooLong { .. })
    ));
    let o = cmd
        .exec_ext::<CreateMkey, _>(&mut rig, &input, &pages, &ext)
        .unwrap();
    let key = mkey(o.mkey_index, 0x33);
    let m = rig.hca.query_mr(key).unwrap();
    assert_eq!(m.attr().length, 2000 * 4096);
    assert_eq!(rig.fw.log().total(), 0, "nothing refused");
    cmd.exec::<DestroyMkey, _>(
        &mut rig,
        &DestroyMkeyIn {
            mkey_index: o.mkey_index,
        },
        &[],
    )
    .unwrap();
}
