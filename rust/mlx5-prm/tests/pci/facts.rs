// SPDX-License-Identifier: GPL-2.0

//! Which of our fields is which mlx5_ifc field: one [`Fact`] per field of
//! every layout of the command layer, named by its path in the kernel's
//! struct (`qpc.primary_address_path.rlid`) and reaching the same field of
//! our struct. `pci_commands.rs` sets each one through `MLX5_SET` and
//! through our encoder and compares.

use std::rc::Rc;

use mlx5_prm::cmd_cq::Cqc;
use mlx5_prm::cmd_eq::Eqc;
use mlx5_prm::cmd_res::Mkc;
use mlx5_prm::cmd_status::CmdStatus;
use mlx5_prm::cmd_vport::{HcaVportContext, NicVportContext};
use mlx5_prm::hca_cap::HcaCap;
use mlx5_prm::qpc::{Ads, Qpc};

/// A field value as a `u64`, both ways; `from_bits` truncates like the C
/// assignment `MLX5_SET` does before masking.
pub(crate) trait Bits: Copy {
    fn from_bits(v: u64) -> Self;
    fn to_bits(self) -> u64;
}

macro_rules! unsigned_bits {
    ($($t:ty),*) => {$(
        impl Bits for $t {
            fn from_bits(v: u64) -> Self {
                v as $t
            }
            fn to_bits(self) -> u64 {
                u64::from(self)
            }
        }
    )*};
}

unsigned_bits!(u8, u16, u32, u64);

impl Bits for bool {
    fn from_bits(v: u64) -> Self {
        v & 1 != 0
    }
    fn to_bits(self) -> u64 {
        u64::from(self)
    }
}

impl Bits for i32 {
    fn from_bits(v: u64) -> Self {
        v as u32 as i32
    }
    fn to_bits(self) -> u64 {
        u64::from(self as u32)
    }
}

impl Bits for CmdStatus {
    fn from_bits(v: u64) -> Self {
        CmdStatus::from_raw(v as u8)
    }
    fn to_bits(self) -> u64 {
        u64::from(self.raw())
    }
}

type Setter<T> = Rc<dyn Fn(&mut T, u64)>;
type Getter<T> = Rc<dyn Fn(&T) -> u64>;

/// One field: its mlx5_ifc path, and how to set and read ours.
pub(crate) struct Fact<T> {
    pub(crate) path: String,
    pub(crate) set: Setter<T>,
    pub(crate) get: Getter<T>,
}

impl<T> Fact<T> {
    pub(crate) fn new(
        path: &str,
        set: impl Fn(&mut T, u64) + 'static,
        get: impl Fn(&T) -> u64 + 'static,
    ) -> Self {
        Fact {
            path: path.to_string(),
            set: Rc::new(set),
            get: Rc::new(get),
        }
    }
}

/// Facts for fields named the same in mlx5_ifc.h and in our struct.
macro_rules! facts {
    ($t:ty; $($f:ident $(. $g:ident)*),* $(,)?) => {
        vec![$(
            Fact::<$t>::new(
                concat!(stringify!($f) $(, ".", stringify!($g))*),
                |x: &mut $t, v| x.$f $(.$g)* = Bits::from_bits(v),
                |x: &$t| Bits::to_bits(x.$f $(.$g)*),
            ),
        )*]
    };
}

pub(crate) use facts;

/// One fact per element of an array field (`rgid_rip[0]` ...).
pub(crate) fn array<T: 'static, E: Bits + 'static, const N: usize>(
    path: &str,
    proj: fn(&mut T) -> &mut [E; N],
    projr: fn(&T) -> &[E; N],
) -> Vec<Fact<T>> {
    (0..N)
        .map(|i| {
            Fact::new(
                &format!("{path}[{i}]"),
                move |x: &mut T, v| proj(x)[i] = E::from_bits(v),
                move |x: &T| projr(x)[i].to_bits(),
            )
        })
        .collect()
}

/// The facts of a nested layout, as fields of its container; `prefix` is
/// the member's path in the kernel's container struct.
pub(crate) fn nest<T: 'static, U: 'static>(
    prefix: &str,
    inner: Vec<Fact<U>>,
    proj: fn(&mut T) -> &mut U,
    projr: fn(&T) -> &U,
) -> Vec<Fact<T>> {
    inner
        .into_iter()
        .map(|f| {
            let (set, get) = (f.set, f.get);
            Fact::new(
                &format!("{prefix}.{}", f.path),
                move |x: &mut T, v| set(proj(x), v),
                move |x: &T| get(projr(x)),
            )
        })
        .collect()
}

pub(crate) fn ads() -> Vec<Fact<Ads>> {
    let mut v = facts!(Ads;
        pkey_index, grh, mlid, rlid, ack_timeout, src_addr_index, stat_rate,
        hop_limit, tclass, flow_label, sl, vhca_port_num,
    );
    v.extend(array(
        "rgid_rip",
        |x: &mut Ads| &mut x.rgid_rip,
        |x: &Ads| &x.rgid_rip,
    ));
    v
}

pub(crate) fn qpc() -> Vec<Fact<Qpc>> {
    let mut v = facts!(Qpc;
        state, st, pm_state, pd, mtu, log_msg_max, log_rq_size, log_rq_stride, no_sq,
        log_sq_size, ts_format, rlky, uar_page, user_index, log_page_size,
        remote_qpn, log_ack_req_freq, log_sra_max, retry_count, rnr_retry,
        next_send_psn, cqn_snd, log_rra_max, atomic_mode, rre, rwe, rae,
        page_offset, min_rnr_nak, next_rcv_psn, cqn_rcv, dbr_addr, q_key,
        rq_type, srqn_rmpn_xrqn,
    );
    v.extend(nest(
        "primary_address_path",
        ads(),
        |x: &mut Qpc| &mut x.primary_address_path,
        |x: &Qpc| &x.primary_address_path,
    ));
    v
}

pub(crate) fn eqc() -> Vec<Fact<Eqc>> {
    facts!(Eqc; oi, st, page_offset, log_eq_size, uar_page, intr, log_page_size)
}

pub(crate) fn cqc() -> Vec<Fact<Cqc>> {
    facts!(Cqc;
        cqe_sz, cc, oi, cq_period_mode, st, page_offset, log_cq_size, uar_page,
        cq_period, cq_max_count, c_eqn_or_apu_element, log_page_size, dbr_addr,
    )
}

pub(crate) fn mkc() -> Vec<Fact<Mkc>> {
    facts!(Mkc;
        free, access_mode_4_2, relaxed_ordering_write, umr_en, a, rw, rr, lw, lr,
        access_mode_1_0, qpn, mkey_7_0, length64, pd, start_addr, len,
        translations_octword_size, relaxed_ordering_read, log_page_size,
    )
}

pub(crate) fn hca_cap() -> Vec<Fact<HcaCap>> {
    facts!(HcaCap;
        abs_native_port_num, event_on_vhca_state_teardown_request,
        event_on_vhca_state_in_use, event_on_vhca_state_active,
        event_on_vhca_state_allocated, vhca_id, log_max_srq_sz, log_max_qp_sz,
        log_max_qp, log_max_srq, log_max_cq_sz, log_max_cq, log_max_eq_sz,
        relaxed_ordering_write, log_max_mkey, fast_teardown, log_max_eq,
        max_indirection, log_max_mrw_sz, force_teardown, log_max_klm_list_size,
        release_all_pages, log_max_ra_req_qp, log_max_ra_res_qp,
        cache_line_128byte, gid_table_size, max_qp_cnt, pkey_table_size,
        local_ca_ack_delay, port_type, num_ports, log_max_msg, stat_rate_support,
        pci_sync_for_fw_update_event, cqe_version, cmdif_checksum, dct, roce,
        atomic, cq_oi, cq_resize, cq_moderation, xrc, ud, uc, rc, uar_4k, uar_sz,
        log_pg_sz, bf, mkey_by_name, log_bf_reg_size, max_wqe_sz_sq,
        icm_mng_function_id_mode, max_wqe_sz_rq, max_qp_mcg, log_max_mcg,
        log_max_pd, pcie_reset_using_hotreset_method,
        pci_sync_for_fw_update_with_driver_unload, log_max_xrcd,
        roce_rw_supported, vhca_state, log_max_current_uc_list, sq_ts_format,
        rq_ts_format, max_num_eqs, log_uar_page_sz, num_of_uars_per_page,
        num_vhca_ports, sw_owner_id, num_total_dynamic_vf_msix,
    )
}

pub(crate) fn hca_vport_context() -> Vec<Fact<HcaVportContext>> {
    facts!(HcaVportContext;
        field_select, sm_virt_aware, has_smi, has_raw, grh_required, num_port_plane,
        port_physical_state, vport_state_policy, port_state, vport_state,
        system_image_guid, port_guid, node_guid, cap_mask1, cap_mask1_field_select,
        cap_mask2, cap_mask2_field_select, lid, init_type_reply, lmc, subnet_timeout,
        sm_lid, sm_sl, qkey_violation_counter, pkey_violation_counter,
    )
}

pub(crate) fn nic_vport_context() -> Vec<Fact<NicVportContext>> {
    let mut v = facts!(NicVportContext;
        min_wqe_inline_mode, roce_en, mtu, system_image_guid, port_guid, node_guid,
        qkey_violation_counter, promisc_uc, promisc_mc, promisc_all, allowed_list_type,
        allowed_list_size,
    );
    // Our MAC is one 6-byte array; mlx5_ifc splits it in two fields.
    v.push(Fact::new(
        "permanent_address.mac_addr_47_32",
        |x: &mut NicVportContext, v| {
            x.permanent_address[..2].copy_from_slice(&(v as u16).to_be_bytes())
        },
        |x: &NicVportContext| {
            u64::from(u16::from_be_bytes([
                x.permanent_address[0],
                x.permanent_address[1],
            ]))
        },
    ));
    v.push(Fact::new(
        "permanent_address.mac_addr_31_0",
        |x: &mut NicVportContext, v| {
            x.permanent_address[2..].copy_from_slice(&(v as u32).to_be_bytes())
        },
        |x: &NicVportContext| {
            let mut b = [0u8; 4];
            b.copy_from_slice(&x.permanent_address[2..]);
            u64::from(u32::from_be_bytes(b))
        },
    ));
    v
}
