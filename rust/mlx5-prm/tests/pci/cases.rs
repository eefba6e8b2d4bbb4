// SPDX-License-Identifier: GPL-2.0

//! What `pci_commands.rs` checks: every layout and command of the command
//! layer with its field facts, the device.h structs with their members, and
//! the constants.

use mlx5_prm::cmd_queue::{self, CmdLayout, DeliveryStatus, MailboxHeader};
use mlx5_prm::command::{InHeader, OutHeader};
use mlx5_prm::eqe_async::{self, CmdEqe, PageRequestEqe, PortChangeEqe};
use mlx5_prm::init_seg::{self, HealthBuffer};
use mlx5_prm::{cmd_cq, cmd_eq, cmd_hca, cmd_qp, cmd_res, cmd_vport, eqe, hca_cap};

use crate::facts::{self, array, facts, nest, Bits, Fact};
use crate::harness::{
    byte, cmd, cmd_ending, full, layout, layout_extent, Case, Extent, Rng, StructCase,
};

/// Every layout and command of the command layer.
pub(crate) fn layout_cases() -> Vec<Box<dyn Case>> {
    use cmd_cq::*;
    use cmd_eq::*;
    use cmd_hca::*;
    use cmd_qp::*;
    use cmd_res::*;
    use cmd_vport::*;
    use hca_cap::*;

    let mut r = Rng(0x6966_6331);
    let rng = &mut r;
    let mut v: Vec<Box<dyn Case>> = vec![
        layout(facts!(InHeader; opcode, uid, op_mod), rng),
        layout(facts!(OutHeader; status, syndrome), rng),
        layout(facts::hca_cap(), rng),
        layout(facts::mkc(), rng),
        layout(facts::eqc(), rng),
        layout(facts::cqc(), rng),
        layout(facts::qpc(), rng),
        layout(facts::ads(), rng),
        // hca_vport_context stops before its reserved tail.
        layout_extent(
            facts::hca_vport_context(),
            Extent::EndsAt("reserved_at_360"),
            rng,
        ),
        layout(facts::nic_vport_context(), rng),
    ];
    v.extend(cmd::<EnableHca>(
        facts!(EnableHcaIn; embedded_cpu_function, function_id_type, function_id),
        vec![],
        rng,
    ));
    v.extend(cmd::<DisableHca>(
        facts!(DisableHcaIn; embedded_cpu_function, function_id_type, function_id),
        vec![],
        rng,
    ));
    v.extend(cmd::<QueryIssi>(
        vec![],
        facts!(QueryIssiOut; current_issi, supported_issi_dw0),
        rng,
    ));
    v.extend(cmd::<SetIssi>(facts!(SetIssiIn; current_issi), vec![], rng));
    v.extend(cmd::<QueryPages>(
        facts!(QueryPagesIn; op_mod, embedded_cpu_function, function_id),
        facts!(QueryPagesOut; embedded_cpu_function, function_id, num_pages),
        rng,
    ));
    v.extend(cmd::<ManagePages>(
        facts!(ManagePagesIn; op_mod, embedded_cpu_function, function_id, input_num_entries),
        facts!(ManagePagesOut; output_num_entries),
        rng,
    ));
    let mut init = facts!(InitHcaIn; sw_vhca_id);
    init.extend(array(
        "sw_owner_id",
        |x: &mut InitHcaIn| &mut x.sw_owner_id,
        |x: &InitHcaIn| &x.sw_owner_id,
    ));
    v.extend(cmd::<InitHca>(init, vec![], rng));
    v.extend(cmd::<TeardownHca>(
        facts!(TeardownHcaIn; profile),
        facts!(TeardownHcaOut; state),
        rng,
    ));
    v.extend(cmd::<QueryHcaCap>(
        facts!(QueryHcaCapIn; op_mod, other_function, function_id),
        nest(
            "capability.cmd_hca_cap",
            facts::hca_cap(),
            |x: &mut QueryHcaCapOut| &mut x.capability,
            |x: &QueryHcaCapOut| &x.capability,
        ),
        rng,
    ));
    let mut set_cap = facts!(SetHcaCapIn; op_mod, other_function, function_id);
    set_cap.extend(nest(
        "capability.cmd_hca_cap",
        facts::hca_cap(),
        |x: &mut SetHcaCapIn| &mut x.capability,
        |x: &SetHcaCapIn| &x.capability,
    ));
    v.extend(cmd::<SetHcaCap>(set_cap, vec![], rng));
    v.extend(cmd::<AllocUar>(vec![], facts!(AllocUarOut; uar), rng));
    v.extend(cmd::<DeallocUar>(facts!(DeallocUarIn; uar), vec![], rng));
    v.extend(cmd::<AllocPd>(vec![], facts!(AllocPdOut; pd), rng));
    v.extend(cmd::<DeallocPd>(facts!(DeallocPdIn; pd), vec![], rng));
    let mut mkey = facts!(CreateMkeyIn; pg_access, translations_octword_actual_size);
    mkey.extend(nest(
        "memory_key_mkey_entry",
        facts::mkc(),
        |x: &mut CreateMkeyIn| &mut x.memory_key_mkey_entry,
        |x: &CreateMkeyIn| &x.memory_key_mkey_entry,
    ));
    v.extend(cmd::<CreateMkey>(
        mkey,
        facts!(CreateMkeyOut; mkey_index),
        rng,
    ));
    v.extend(cmd::<DestroyMkey>(
        facts!(DestroyMkeyIn; mkey_index),
        vec![],
        rng,
    ));
    let mut eq = nest(
        "eq_context_entry",
        facts::eqc(),
        |x: &mut CreateEqIn| &mut x.eq_context_entry,
        |x: &CreateEqIn| &x.eq_context_entry,
    );
    eq.extend(array(
        "event_bitmask",
        |x: &mut CreateEqIn| &mut x.event_bitmask,
        |x: &CreateEqIn| &x.event_bitmask,
    ));
    v.extend(cmd::<CreateEq>(eq, facts!(CreateEqOut; eq_number), rng));
    v.extend(cmd::<DestroyEq>(
        facts!(DestroyEqIn; eq_number),
        vec![],
        rng,
    ));
    v.extend(cmd::<CreateCq>(
        nest(
            "cq_context",
            facts::cqc(),
            |x: &mut CreateCqIn| &mut x.cq_context,
            |x: &CreateCqIn| &x.cq_context,
        ),
        facts!(CreateCqOut; cqn),
        rng,
    ));
    v.extend(cmd::<DestroyCq>(facts!(DestroyCqIn; cqn), vec![], rng));
    let mut create_qp = facts!(CreateQpIn; ece);
    create_qp.extend(nest(
        "qpc",
        facts::qpc(),
        |x: &mut CreateQpIn| &mut x.qpc,
        |x: &CreateQpIn| &x.qpc,
    ));
    v.extend(cmd::<CreateQp>(
        create_qp,
        facts!(CreateQpOut; qpn, ece),
        rng,
    ));
    macro_rules! transition {
        ($c:ty, $in:ident, $out:ident) => {{
            let mut f = facts!($in; qpn, opt_param_mask, ece);
            f.extend(nest("qpc", facts::qpc(), |x: &mut $in| &mut x.qpc, |x: &$in| &x.qpc));
            v.extend(cmd::<$c>(f, facts!($out; ece), rng));
        }};
    }
    transition!(Rst2InitQp, Rst2InitQpIn, Rst2InitQpOut);
    transition!(Init2InitQp, Init2InitQpIn, Init2InitQpOut);
    transition!(Init2RtrQp, Init2RtrQpIn, Init2RtrQpOut);
    transition!(Rtr2RtsQp, Rtr2RtsQpIn, Rtr2RtsQpOut);
    v.extend(cmd::<Qp2Err>(facts!(Qp2ErrIn; qpn), vec![], rng));
    v.extend(cmd::<Qp2Rst>(facts!(Qp2RstIn; qpn), vec![], rng));
    // QUERY_QP's output stops before the trailing union (QPC extension or
    // page list).
    let mut query = facts!(QueryQpOut; opt_param_mask, ece);
    query.extend(nest(
        "qpc",
        facts::qpc(),
        |x: &mut QueryQpOut| &mut x.qpc,
        |x: &QueryQpOut| &x.qpc,
    ));
    v.extend(cmd_ending::<QueryQp>(
        facts!(QueryQpIn; qpn),
        query,
        Extent::EndsAt("qp_pas_or_qpc_ext_and_pas"),
        rng,
    ));
    v.extend(cmd::<DestroyQp>(facts!(DestroyQpIn; qpn), vec![], rng));
    // The vport commands: QUERY_HCA_VPORT_CONTEXT's output stops with its
    // context's last field, QUERY_HCA_VPORT_GID's carries the first GID of
    // its flexible array.
    v.extend(cmd_ending::<QueryHcaVportContext>(
        facts!(QueryHcaVportContextIn; other_vport, port_num, vport_number),
        nest(
            "hca_vport_context",
            facts::hca_vport_context(),
            |x: &mut QueryHcaVportContextOut| &mut x.context,
            |x: &QueryHcaVportContextOut| &x.context,
        ),
        Extent::EndsAt("hca_vport_context.reserved_at_360"),
        rng,
    ));
    let mut gid = facts!(QueryHcaVportGidOut; gids_num);
    gid.extend(array(
        "gid[0].array128_auto",
        |x: &mut QueryHcaVportGidOut| &mut x.gid,
        |x: &QueryHcaVportGidOut| &x.gid,
    ));
    v.extend(cmd_ending::<QueryHcaVportGid>(
        facts!(QueryHcaVportGidIn; other_vport, port_num, vport_number, gid_index),
        gid,
        Extent::Beyond(GID_SIZE),
        rng,
    ));
    v.extend(cmd::<QueryNicVportContext>(
        facts!(QueryNicVportContextIn; other_vport, vport_number, allowed_list_type),
        nest(
            "nic_vport_context",
            facts::nic_vport_context(),
            |x: &mut QueryNicVportContextOut| &mut x.context,
            |x: &QueryNicVportContextOut| &x.context,
        ),
        rng,
    ));
    v
}

/// The test's view of a mailbox block: its control fields, and whether the
/// data is all ones.
#[derive(Default)]
pub(crate) struct Block {
    pub(crate) header: MailboxHeader,
    pub(crate) data_ones: bool,
}

/// EQE data of one of `eqe_async`'s events, placed in a whole EQE.
pub(crate) fn in_eqe(data: [u8; eqe::DATA_SIZE]) -> Vec<u8> {
    let mut b = vec![0u8; eqe::EQE_SIZE];
    b[eqe::DATA_OFFSET..eqe::DATA_OFFSET + eqe::DATA_SIZE].copy_from_slice(&data);
    b
}

pub(crate) fn eqe_data(b: &[u8]) -> [u8; eqe::DATA_SIZE] {
    b[eqe::DATA_OFFSET..eqe::DATA_OFFSET + eqe::DATA_SIZE]
        .try_into()
        .unwrap()
}

pub(crate) fn struct_cases() -> Vec<Box<dyn Case>> {
    let mut rng = Rng(0x6465_7668);
    let mut rand = |n: usize| (0..n).map(|_| rng.next()).collect::<Vec<_>>();

    let mut layout: Vec<(Fact<CmdLayout>, u64)> = vec![
        byte(Fact::new(
            "type",
            |x: &mut CmdLayout, v| x.cmd_type = v as u8,
            |x| u64::from(x.cmd_type),
        )),
        (facts!(CmdLayout; inlen).remove(0), 0xffff_ffff),
        full(facts!(CmdLayout; in_ptr).remove(0)),
        full(facts!(CmdLayout; out_ptr).remove(0)),
        (facts!(CmdLayout; outlen).remove(0), 0xffff_ffff),
        byte(facts!(CmdLayout; token).remove(0)),
        byte(facts!(CmdLayout; sig).remove(0)),
        byte(Fact::new(
            "status_own",
            |x: &mut CmdLayout, v| {
                x.status = DeliveryStatus::from_raw((v >> 1) as u8);
                x.ownership = v & 1 != 0;
            },
            |x| u64::from(x.status.raw() << 1 | u8::from(x.ownership)),
        )),
    ];
    for i in 0..4 {
        layout.push((
            Fact::new(
                &format!("in[{i}]"),
                move |x: &mut CmdLayout, v| {
                    x.in_data[4 * i..4 * i + 4].copy_from_slice(&(v as u32).to_be_bytes())
                },
                move |x| {
                    u64::from(u32::from_be_bytes(
                        x.in_data[4 * i..4 * i + 4].try_into().unwrap(),
                    ))
                },
            ),
            0xffff_ffff,
        ));
        layout.push((
            Fact::new(
                &format!("out[{i}]"),
                move |x: &mut CmdLayout, v| {
                    x.out_data[4 * i..4 * i + 4].copy_from_slice(&(v as u32).to_be_bytes())
                },
                move |x| {
                    u64::from(u32::from_be_bytes(
                        x.out_data[4 * i..4 * i + 4].try_into().unwrap(),
                    ))
                },
            ),
            0xffff_ffff,
        ));
    }
    let n = layout.len();
    let cmd_layout = StructCase {
        strukt: "mlx5_cmd_layout",
        group: "mlx5_cmd_layout",
        encode: |x: &CmdLayout| {
            let mut b = [0u8; 64];
            x.encode(&mut b);
            b.to_vec()
        },
        decode: |b| CmdLayout::decode(b.try_into().unwrap()),
        members: layout,
        big: vec![],
        rand: rand(n),
    };

    let hdr = |f: Fact<MailboxHeader>| {
        let (set, get) = (f.set, f.get);
        Fact::new(
            &f.path,
            move |x: &mut Block, v| set(&mut x.header, v),
            move |x: &Block| get(&x.header),
        )
    };
    let mut block = vec![full(hdr(facts!(MailboxHeader; next).remove(0)))];
    block.push((hdr(facts!(MailboxHeader; block_num).remove(0)), 0xffff_ffff));
    for f in facts!(MailboxHeader; token, ctrl_sig, sig) {
        block.push(byte(hdr(f)));
    }
    let n = block.len();
    let prot_block = StructCase {
        strukt: "mlx5_cmd_prot_block",
        group: "mlx5_cmd_prot_block",
        encode: |x: &Block| {
            let mut b = [0u8; cmd_queue::MAILBOX_SIZE];
            let data = [0xffu8; cmd_queue::MAILBOX_DATA_SIZE];
            let data: &[u8] = if x.data_ones { &data } else { &[] };
            x.header.encode(data, &mut b).unwrap();
            b.to_vec()
        },
        decode: |b| Block {
            header: MailboxHeader::decode(b.try_into().unwrap()),
            data_ones: b[..cmd_queue::MAILBOX_DATA_SIZE].iter().all(|&x| x == 0xff),
        },
        members: block,
        big: vec![(
            "data",
            |x: &mut Block| x.data_ones = true,
            |x: &Block| x.data_ones,
        )],
        rand: rand(n),
    };

    let mut health: Vec<(Fact<HealthBuffer>, u64)> = array(
        "assert_var",
        |x: &mut HealthBuffer| &mut x.assert_var,
        |x: &HealthBuffer| &x.assert_var,
    )
    .into_iter()
    .map(|f| (f, 0xffff_ffff))
    .collect();
    for f in facts!(HealthBuffer; assert_exit_ptr, assert_callra, time, fw_ver, hw_id) {
        health.push((f, 0xffff_ffff));
    }
    for f in facts!(HealthBuffer; rfr_severity, irisc_index, synd) {
        health.push(byte(f));
    }
    health.push((facts!(HealthBuffer; ext_synd).remove(0), 0xffff));
    let n = health.len();
    let health = StructCase {
        strukt: "health_buffer",
        group: "health_buffer",
        encode: |x: &HealthBuffer| {
            let mut b = [0u8; init_seg::HEALTH_BUFFER_SIZE];
            x.encode(&mut b);
            b.to_vec()
        },
        decode: |b| HealthBuffer::decode(b.try_into().unwrap()),
        members: health,
        big: vec![],
        rand: rand(n),
    };

    let cmd_eqe = StructCase {
        strukt: "mlx5_eqe",
        group: "mlx5_eqe.cmd",
        encode: |x: &CmdEqe| {
            let mut d = [0u8; eqe::DATA_SIZE];
            x.encode(&mut d);
            in_eqe(d)
        },
        decode: |b| CmdEqe::decode(&eqe_data(b)),
        members: vec![(
            Fact::new(
                "data.cmd.vector",
                |x: &mut CmdEqe, v| x.vector = v as u32,
                |x| u64::from(x.vector),
            ),
            0xffff_ffff,
        )],
        big: vec![],
        rand: rand(1),
    };
    let page_eqe = StructCase {
        strukt: "mlx5_eqe",
        group: "mlx5_eqe.req_pages",
        encode: |x: &PageRequestEqe| {
            let mut d = [0u8; eqe::DATA_SIZE];
            x.encode(&mut d);
            in_eqe(d)
        },
        decode: |b| PageRequestEqe::decode(&eqe_data(b)),
        members: vec![
            (
                Fact::new(
                    "data.req_pages.ec_function",
                    |x: &mut PageRequestEqe, v| {
                        x.ec_function = v & u64::from(eqe_async::EC_FUNCTION_MASK) != 0;
                        x.release_all = v & u64::from(eqe_async::RELEASE_ALL_PAGES_MASK) != 0;
                    },
                    |x| {
                        let mut v = 0;
                        if x.ec_function {
                            v |= u64::from(eqe_async::EC_FUNCTION_MASK);
                        }
                        if x.release_all {
                            v |= u64::from(eqe_async::RELEASE_ALL_PAGES_MASK);
                        }
                        v
                    },
                ),
                0xc000,
            ),
            (
                Fact::new(
                    "data.req_pages.func_id",
                    |x: &mut PageRequestEqe, v| x.func_id = v as u16,
                    |x| u64::from(x.func_id),
                ),
                0xffff,
            ),
            (
                Fact::new(
                    "data.req_pages.num_pages",
                    |x: &mut PageRequestEqe, v| x.num_pages = v as u32 as i32,
                    |x| u64::from(x.num_pages as u32),
                ),
                0xffff_ffff,
            ),
        ],
        big: vec![],
        rand: rand(3),
    };
    let port_eqe = StructCase {
        strukt: "mlx5_eqe",
        group: "mlx5_eqe.port",
        encode: |x: &PortChangeEqe| {
            let mut d = [0u8; eqe::DATA_SIZE];
            x.encode(&mut d);
            in_eqe(d)
        },
        decode: |b| PortChangeEqe::decode(&eqe_data(b)),
        members: vec![(
            Fact::new(
                "data.port.port",
                |x: &mut PortChangeEqe, v| x.port = (v >> 4) as u8,
                |x| u64::from(x.port) << 4,
            ),
            0xf0,
        )],
        big: vec![],
        rand: rand(1),
    };
    vec![
        Box::new(cmd_layout),
        Box::new(prot_block),
        Box::new(health),
        Box::new(cmd_eqe),
        Box::new(page_eqe),
        Box::new(port_eqe),
    ]
}
