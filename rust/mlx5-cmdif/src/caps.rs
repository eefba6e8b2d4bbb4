// SPDX-License-Identifier: GPL-2.0

//! The general device capabilities: QUERY_HCA_CAP, and SET_HCA_CAP as
//! mlx5_core's `handle_hca_cap` does it.
//!
//! Both commands carry a 4 KiB capability block, too large for
//! [`CmdIf::exec`]'s buffer, so they use the message API: the block is read
//! from the output mailboxes where the device wrote it, and SET_HCA_CAP's
//! input is the current block copied mailbox by mailbox from the output of
//! QUERY_HCA_CAP (current) into the input, with the fields the driver
//! changes patched in ([`HcaCap::patch`]). Fields this crate does not model
//! go back to the device as it reported them.

use super::bus::Bus;
use super::cmdif::CmdIf;
use super::error::Error;
use super::prm::cmd_queue::MAILBOX_DATA_SIZE;
use super::prm::command::{InHeader, OP_QUERY_HCA_CAP, OP_SET_HCA_CAP};
use super::prm::hca_cap::{
    query_op_mod, set_op_mod, HcaCap, QueryHcaCapIn, QueryHcaCapOut, SetHcaCapIn, SetHcaCapOut,
    CAPABILITY_OFFSET, CAP_GENERAL, CAP_MODE_CUR, CAP_MODE_MAX, CMDIF_CHECKSUM_DISABLED,
    CMDIF_CHECKSUM_ENABLED,
};
use super::prm::ifc::Layout;

/// What the driver sets with SET_HCA_CAP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CapSettings {
    /// Enable command checksums (`cmdif_checksum` 3): the device then
    /// checks the signatures of input mailboxes and signs its completions,
    /// and the driver verifies them. mlx5_core disables them (0).
    pub checksums: bool,
    /// log2 of the QPs wanted; the device's maximum wins if lower
    /// (mlx5_core's default profile asks for 18).
    pub log_max_qp: u8,
    /// The CPU's cache line is 128 bytes (`cache_line_128byte`).
    pub cache_line_128byte: bool,
}

impl CapSettings {
    /// What mlx5_core sets on a host with 64-byte cache lines.
    pub const MLX5_CORE: CapSettings = CapSettings {
        checksums: false,
        log_max_qp: 18,
        cache_line_128byte: false,
    };
}

impl Default for CapSettings {
    fn default() -> Self {
        CapSettings::MLX5_CORE
    }
}

fn range_err(len: usize) -> Error {
    Error::OutOfRange { offset: 0, len }
}

/// QUERY_HCA_CAP of the general capabilities, maximum (`CAP_MODE_MAX`) or
/// current (`CAP_MODE_CUR`). The whole block stays readable in the output
/// mailboxes until the next command.
///
/// # Errors
///
/// As [`CmdIf::post`].
pub fn query_general<B: Bus>(cmd: &mut CmdIf, bus: &mut B, mode: u16) -> Result<HcaCap, Error> {
    let mut hdr = [0u8; QueryHcaCapIn::SIZE];
    QueryHcaCapIn {
        op_mod: query_op_mod(CAP_GENERAL, mode),
        ..QueryHcaCapIn::default()
    }
    .encode(&mut hdr)
    .map_err(|_| range_err(hdr.len()))?;
    cmd.write_in(bus, 0, &hdr)?;
    cmd.post(bus, OP_QUERY_HCA_CAP, hdr.len(), QueryHcaCapOut::SIZE)?;
    let mut cap = [0u8; HcaCap::SIZE];
    cmd.read_out(bus, CAPABILITY_OFFSET, &mut cap)?;
    HcaCap::decode(&cap).map_err(|_| range_err(cap.len()))
}

/// The capabilities mlx5_core's `handle_hca_cap` would set from the
/// maximum `max` and the current `cur`, with settings `s`: 128 P_Keys, as
/// many vHCA ports as the device has, `log_max_qp` within the maximum,
/// command checksums as asked, UAR pages of one system page (this crate
/// assumes 4 KiB system pages, so `log_uar_page_sz` 0 and `uar_4k` left as
/// it is, as mlx5_core does there), the cache line size.
pub fn wanted(max: &HcaCap, cur: &HcaCap, s: &CapSettings) -> HcaCap {
    HcaCap {
        pkey_table_size: 0,
        num_vhca_ports: if max.num_vhca_ports != 0 {
            max.num_vhca_ports
        } else {
            cur.num_vhca_ports
        },
        log_max_qp: s.log_max_qp.min(max.log_max_qp),
        cmdif_checksum: if s.checksums {
            CMDIF_CHECKSUM_ENABLED
        } else {
            CMDIF_CHECKSUM_DISABLED
        },
        log_uar_page_sz: 0,
        cache_line_128byte: s.cache_line_128byte && max.cache_line_128byte,
        ..*cur
    }
}

/// Queries the maximum and current general capabilities and sets them as
/// [`wanted`] says, then switches the driver's command checksums to match.
/// Returns the capabilities set.
///
/// # Errors
///
/// As [`CmdIf::post`].
pub fn set_general<B: Bus>(cmd: &mut CmdIf, bus: &mut B, s: &CapSettings) -> Result<HcaCap, Error> {
    let max = query_general(cmd, bus, CAP_MODE_MAX)?;
    // Last, so that its block is the one in the output mailboxes.
    let cur = query_general(cmd, bus, CAP_MODE_CUR)?;
    let want = wanted(&max, &cur, s);
    let mut hdr = [0u8; InHeader::SIZE];
    InHeader {
        opcode: OP_SET_HCA_CAP,
        uid: 0,
        op_mod: set_op_mod(CAP_GENERAL),
    }
    .encode(&mut hdr)
    .map_err(|_| range_err(hdr.len()))?;
    cmd.write_in(bus, 0, &hdr)?;
    // The current block, one mailbox at a time, patched in the first.
    let mut chunk = [0u8; MAILBOX_DATA_SIZE];
    let mut at = CAPABILITY_OFFSET;
    while at < SetHcaCapIn::SIZE {
        let n = (SetHcaCapIn::SIZE - at).min(MAILBOX_DATA_SIZE);
        let part = chunk.get_mut(..n).unwrap_or(&mut []);
        cmd.read_out(bus, at, part)?;
        if at == CAPABILITY_OFFSET {
            want.patch(part).map_err(|_| range_err(HcaCap::SIZE))?;
        }
        cmd.write_in(bus, at, part)?;
        at += n;
    }
    cmd.post(bus, OP_SET_HCA_CAP, SetHcaCapIn::SIZE, SetHcaCapOut::SIZE)?;
    cmd.set_checksums(want.cmdif_checksum == CMDIF_CHECKSUM_ENABLED);
    Ok(want)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_follow_mlx5_core() {
        let max = HcaCap {
            log_max_qp: 10,
            num_vhca_ports: 2,
            cache_line_128byte: true,
            ..HcaCap::default()
        };
        let cur = HcaCap {
            log_max_qp: 10,
            pkey_table_size: 3,
            log_uar_page_sz: 4,
            cmdif_checksum: 1,
            log_max_cq: 7,
            ..HcaCap::default()
        };
        let w = wanted(&max, &cur, &CapSettings::default());
        assert_eq!(w.pkey_table_size, 0, "128 P_Keys");
        assert_eq!(w.num_vhca_ports, 2);
        assert_eq!(w.log_max_qp, 10, "the device's maximum is below 18");
        assert_eq!(w.cmdif_checksum, CMDIF_CHECKSUM_DISABLED);
        assert_eq!(w.log_uar_page_sz, 0);
        assert!(!w.cache_line_128byte);
        assert_eq!(w.log_max_cq, 7, "other fields as reported");
        let s = CapSettings {
            checksums: true,
            log_max_qp: 4,
            cache_line_128byte: true,
        };
        let w = wanted(&max, &cur, &s);
        assert_eq!(w.cmdif_checksum, CMDIF_CHECKSUM_ENABLED);
        assert_eq!(w.log_max_qp, 4);
        assert!(w.cache_line_128byte);
    }
}
