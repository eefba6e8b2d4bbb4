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

use super::rig::Rig;

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
