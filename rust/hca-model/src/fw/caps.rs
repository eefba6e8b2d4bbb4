// SPDX-License-Identifier: GPL-2.0

//! The general capabilities the device reports (QUERY_HCA_CAP) and the
//! settings it accepts (SET_HCA_CAP), derived from the model's limits and
//! the sizes of the embedder's object tables.
//!
//! Only what the model does is advertised: RC and UD on one InfiniBand
//! port, atomics, BlueFlame with 4 KiB UARs, 64-byte CQEs, no SRQ, UC, XRC,
//! DC, RoCE, CQ moderation or resize, memory windows or UMR through
//! commands (the fast-registration limit is reported, as
//! `log_max_klm_list_size`, for the keys the embedder creates). SET_HCA_CAP
//! takes the settable fields mlx5_core writes and checks them against what
//! the device can do; the other bits of the block are ignored, as a
//! ConnectX ignores fields that are not settable.

use super::super::caps::Caps;
use super::super::prm::doorbell::BF_REG_SIZE;
use super::super::prm::hca_cap::{
    HcaCap, CMDIF_CHECKSUM_DISABLED, CMDIF_CHECKSUM_ENABLED, CMDIF_CHECKSUM_INITIAL_STATE,
    PORT_TYPE_IB,
};
use super::super::table::Tables;
use super::reject::Reject;

/// log2 of `n`, rounded down (0 for 0 and 1), at most `max`.
fn log2_floor(n: usize, max: u8) -> u8 {
    let l = usize::BITS - 1 - n.max(1).leading_zeros();
    u8::try_from(l).unwrap_or(u8::MAX).min(max)
}

/// log2 of `n` rounded up.
fn log2_ceil(n: u32) -> u8 {
    (u32::BITS - n.saturating_sub(1).leading_zeros()) as u8
}

/// The device's maximum capabilities: the model's limits, table sizes from
/// `t`, `uars` UAR pages, and `vhca_id`.
pub(super) fn max_caps(c: &Caps, t: &Tables<'_>, uars: u32, vhca_id: u16) -> HcaCap {
    let eqs = t.eqs.len().min(256);
    HcaCap {
        vhca_id,
        log_max_qp_sz: c.max_log_sq_wqebbs.min(c.max_log_rq_wqes),
        log_max_qp: log2_floor(t.qps.len(), 24),
        log_max_cq_sz: c.max_log_cq_size,
        log_max_cq: log2_floor(t.cqs.len(), 24),
        log_max_eq_sz: c.max_log_eq_size,
        log_max_mkey: log2_floor(t.mrs.len(), 24),
        log_max_eq: log2_floor(eqs, 15),
        max_num_eqs: eqs as u16,
        log_max_mrw_sz: 48,
        // The longest translation list of a UMR-registered key: what
        // mlx5_ib reports as `max_fast_reg_page_list_len` (the command
        // interface itself creates no UMR-enabled key yet).
        log_max_klm_list_size: log2_floor(c.max_fast_reg_pages as usize, 63),
        log_max_ra_req_qp: log2_ceil(u32::from(c.max_qp_rd_atom)),
        log_max_ra_res_qp: log2_ceil(u32::from(c.max_qp_dest_rd_atom)),
        // 128 P_Keys (`pkey_table_size` 0) and 8 GIDs (`gid_table_size` 0),
        // of which the model uses index 0.
        pkey_table_size: 0,
        gid_table_size: 0,
        local_ca_ack_delay: 16,
        port_type: PORT_TYPE_IB,
        num_ports: 1,
        log_max_msg: log2_floor(c.max_msg_size as usize, 31),
        cqe_version: 1,
        cmdif_checksum: CMDIF_CHECKSUM_ENABLED,
        atomic: true,
        rc: true,
        // UD QPs and QP1 (CREATE_QP `st` UD and QP1).
        ud: true,
        uar_4k: true,
        uar_sz: log2_floor((uars as usize).saturating_mul(4096) >> 20, 63),
        log_pg_sz: 12,
        bf: true,
        log_bf_reg_size: log2_floor(BF_REG_SIZE, 31),
        max_wqe_sz_sq: 1024,
        max_wqe_sz_rq: c.max_recv_sge.saturating_mul(16).min(u32::from(u16::MAX)) as u16,
        log_max_pd: log2_floor(t.pds.len(), 24),
        log_uar_page_sz: 0,
        num_of_uars_per_page: 1,
        num_vhca_ports: 1,
        ..HcaCap::default()
    }
}

/// The capabilities in force after ENABLE_HCA: the maximum, with command
/// checksums in their reset state.
pub(super) fn initial_caps(max: &HcaCap) -> HcaCap {
    HcaCap {
        cmdif_checksum: CMDIF_CHECKSUM_INITIAL_STATE,
        ..*max
    }
}

/// Applies the settable fields of a SET_HCA_CAP block `new` to `cur`,
/// within `max`.
///
/// # Errors
///
/// [`Reject::BadCapValue`] for a value the device cannot take; `cur` is
/// unchanged then.
pub(super) fn set_caps(cur: &mut HcaCap, max: &HcaCap, new: &HcaCap) -> Result<(), Reject> {
    let checksum_ok = matches!(
        new.cmdif_checksum,
        CMDIF_CHECKSUM_DISABLED | CMDIF_CHECKSUM_INITIAL_STATE | CMDIF_CHECKSUM_ENABLED
    );
    let ok = checksum_ok
        && new.log_max_qp <= max.log_max_qp
        // 4 KiB UAR pages only, 128 P_Keys, one port.
        && new.log_uar_page_sz == 0
        && new.pkey_table_size == max.pkey_table_size
        && new.num_vhca_ports <= max.num_ports
        // Features the device lacks cannot be switched on.
        && !new.dct
        && !new.roce
        && !new.mkey_by_name
        && !new.vhca_state
        && !new.icm_mng_function_id_mode
        && !new.cache_line_128byte;
    if !ok {
        return Err(Reject::BadCapValue);
    }
    cur.cmdif_checksum = new.cmdif_checksum;
    cur.log_max_qp = new.log_max_qp;
    cur.uar_4k = new.uar_4k;
    if new.num_vhca_ports != 0 {
        cur.num_vhca_ports = new.num_vhca_ports;
    }
    cur.release_all_pages = new.release_all_pages;
    cur.abs_native_port_num = new.abs_native_port_num;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs() {
        assert_eq!(log2_floor(0, 31), 0);
        assert_eq!(log2_floor(64, 31), 6);
        assert_eq!(log2_floor(100, 31), 6);
        assert_eq!(log2_floor(1 << 30, 24), 24);
        assert_eq!(log2_ceil(16), 4);
        assert_eq!(log2_ceil(17), 5);
        assert_eq!(log2_ceil(1), 0);
    }

    #[test]
    fn settable_fields() {
        let max = HcaCap {
            log_max_qp: 6,
            num_ports: 1,
            ..HcaCap::default()
        };
        let mut cur = initial_caps(&max);
        let mut new = HcaCap {
            cmdif_checksum: CMDIF_CHECKSUM_DISABLED,
            log_max_qp: 5,
            num_vhca_ports: 1,
            uar_4k: true,
            ..cur
        };
        assert_eq!(set_caps(&mut cur, &max, &new), Ok(()));
        assert_eq!((cur.cmdif_checksum, cur.log_max_qp), (0, 5));
        new.log_max_qp = 7;
        assert_eq!(set_caps(&mut cur, &max, &new), Err(Reject::BadCapValue));
        new.log_max_qp = 6;
        new.cmdif_checksum = 2;
        assert_eq!(set_caps(&mut cur, &max, &new), Err(Reject::BadCapValue));
        new.cmdif_checksum = 3;
        new.roce = true;
        assert_eq!(set_caps(&mut cur, &max, &new), Err(Reject::BadCapValue));
        assert_eq!(cur.log_max_qp, 5);
    }
}
