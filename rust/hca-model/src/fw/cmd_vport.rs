// SPDX-License-Identifier: GPL-2.0

//! The vport commands: QUERY_HCA_VPORT_CONTEXT, QUERY_HCA_VPORT_GID and
//! QUERY_NIC_VPORT_CONTEXT, answered from the port state of
//! [`super::port`].
//!
//! The function is a PF with one vport, its own, and one port: a query
//! must name its own vport (`other_vport` 0, `vport_number` 0, else
//! [`Reject::OtherVport`]) and port 0 (a single-port function's "this
//! port", what mlx5_core sends) or 1 ([`Reject::BadPort`] otherwise).
//! QUERY_HCA_VPORT_GID takes one `gid_index` below the GID table's length
//! (`gid_table_size` of the capabilities: 8 entries) or 0xffff for the
//! whole table, which then follows the first GID ([`Reject::BadGidIndex`]
//! otherwise); the output must have room for every GID returned.
//! QUERY_NIC_VPORT_CONTEXT takes a list type (UC, MC or VLAN,
//! [`Reject::BadListType`] otherwise) and returns an empty list.

use super::super::mem::Platform;
use super::super::prm::cmd_vport::{
    QueryHcaVportContextIn, QueryHcaVportContextOut, QueryHcaVportGidIn, QueryHcaVportGidOut,
    QueryNicVportContextIn, QueryNicVportContextOut, GID_INDEX_ALL, GID_SIZE, LIST_TYPE_VLAN,
};
use super::super::prm::hca_cap::gid_table_len;
use super::super::prm::ifc::Layout;
use super::super::table::Storage;
use super::exec::Cx;
use super::pages::PageStore;
use super::port::PORT_NUM;
use super::reject::Reject;

type R = Result<(), Reject>;

/// The query names the function's own vport.
fn own_vport(other_vport: bool, vport_number: u16) -> R {
    if other_vport || vport_number != 0 {
        Err(Reject::OtherVport)
    } else {
        Ok(())
    }
}

/// The query names the function's port (0: the only one).
fn own_port(port_num: u8) -> R {
    if port_num == 0 || port_num == PORT_NUM {
        Ok(())
    } else {
        Err(Reject::BadPort)
    }
}

pub(super) fn query_hca_vport_context<B: PageStore, S: Storage, P: Platform>(
    cx: &mut Cx<'_, B, S, P>,
) -> R {
    cx.no_op_mod()?;
    let i: QueryHcaVportContextIn = cx.read_in()?;
    own_vport(i.other_vport, i.vport_number)?;
    own_port(i.port_num)?;
    cx.need_out(QueryHcaVportContextOut::SIZE)?;
    let context = cx.fw.hca_vport_context(cx.hca);
    cx.reply(&QueryHcaVportContextOut { context })
}

pub(super) fn query_hca_vport_gid<B: PageStore, S: Storage, P: Platform>(
    cx: &mut Cx<'_, B, S, P>,
) -> R {
    cx.no_op_mod()?;
    let i: QueryHcaVportGidIn = cx.read_in()?;
    own_vport(i.other_vport, i.vport_number)?;
    own_port(i.port_num)?;
    // At most 512 entries (gid_table_size 4).
    let len = u16::try_from(gid_table_len(cx.fw.cur_caps.gid_table_size)).unwrap_or(0);
    let (first, count) = if i.gid_index == GID_INDEX_ALL {
        (0, len)
    } else if i.gid_index < len {
        (i.gid_index, 1)
    } else {
        return Err(Reject::BadGidIndex);
    };
    let extra = usize::from(count.saturating_sub(1)).saturating_mul(GID_SIZE);
    cx.need_out(QueryHcaVportGidOut::SIZE.saturating_add(extra))?;
    let out = QueryHcaVportGidOut {
        gids_num: count,
        gid: cx.fw.gid(cx.hca, first),
    };
    cx.reply(&out)?;
    for index in first.saturating_add(1)..first.saturating_add(count) {
        let g = cx.fw.gid(cx.hca, index);
        cx.out.put(cx.p, &g)?;
    }
    Ok(())
}

pub(super) fn query_nic_vport_context<B: PageStore, S: Storage, P: Platform>(
    cx: &mut Cx<'_, B, S, P>,
) -> R {
    cx.no_op_mod()?;
    let i: QueryNicVportContextIn = cx.read_in()?;
    own_vport(i.other_vport, i.vport_number)?;
    if i.allowed_list_type > LIST_TYPE_VLAN {
        return Err(Reject::BadListType);
    }
    cx.need_out(QueryNicVportContextOut::SIZE)?;
    let context = cx.fw.nic_vport_context(cx.hca, i.allowed_list_type);
    cx.reply(&QueryNicVportContextOut { context })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vports_and_ports() {
        assert_eq!(own_vport(false, 0), Ok(()));
        assert_eq!(own_vport(true, 0), Err(Reject::OtherVport));
        assert_eq!(own_vport(false, 1), Err(Reject::OtherVport));
        assert_eq!(own_port(0), Ok(()));
        assert_eq!(own_port(1), Ok(()));
        assert_eq!(own_port(2), Err(Reject::BadPort));
    }
}
