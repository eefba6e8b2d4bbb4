// SPDX-License-Identifier: GPL-2.0

//! Running one command queue entry: reading and checking it, checking the
//! command against the bring-up order, dispatching it to its handler,
//! writing the output, the status and the ownership bit, and posting the
//! command-completion event.

use super::super::hca::Hca;
use super::super::mem::Platform;
use super::super::prm::cmd_queue::{sign_layout, CmdLayout, CMD_LAYOUT_SIZE, STATUS_OWN_OFFSET};
use super::super::prm::cmd_status::CmdStatus;
use super::super::prm::command::{
    InHeader, OutHeader, OP_2ERR_QP, OP_2RST_QP, OP_ALLOC_PD, OP_ALLOC_UAR, OP_CREATE_CQ,
    OP_CREATE_EQ, OP_CREATE_MKEY, OP_CREATE_QP, OP_DEALLOC_PD, OP_DEALLOC_UAR, OP_DESTROY_CQ,
    OP_DESTROY_EQ, OP_DESTROY_MKEY, OP_DESTROY_QP, OP_DISABLE_HCA, OP_ENABLE_HCA, OP_INIT2INIT_QP,
    OP_INIT2RTR_QP, OP_INIT_HCA, OP_MANAGE_PAGES, OP_QUERY_HCA_CAP, OP_QUERY_HCA_VPORT_CONTEXT,
    OP_QUERY_HCA_VPORT_GID, OP_QUERY_ISSI, OP_QUERY_NIC_VPORT_CONTEXT, OP_QUERY_PAGES, OP_QUERY_QP,
    OP_RST2INIT_QP, OP_RTR2RTS_QP, OP_SET_HCA_CAP, OP_SET_ISSI, OP_TEARDOWN_HCA,
};
use super::super::prm::eqe::{EqeData, DATA_SIZE};
use super::super::prm::eqe_async::CmdEqe;
use super::super::prm::ifc::Layout;
use super::super::prm::opcode::EventType;
use super::super::table::Storage;
use super::mailbox::{check_chains, check_entry, Input, Output};
use super::pages::PageStore;
use super::reject::{Code, Reject};
use super::{cmd_hca, cmd_qp, cmd_queue, cmd_res, cmd_vport, Firmware, HcaState};

/// The largest fixed input or output layout read or written whole (the
/// 272-byte CREATE_* and QP transition inputs, QUERY_QP's output).
const MAX_FIXED: usize = 272;

/// Everything a command handler works with.
pub(super) struct Cx<'a, B, S, P> {
    pub(super) fw: &'a mut Firmware<B>,
    pub(super) hca: &'a mut Hca<S>,
    pub(super) p: &'a mut P,
    pub(super) input: Input,
    pub(super) out: Output,
    pub(super) op_mod: u16,
}

impl<B: PageStore, S: Storage, P: Platform> Cx<'_, B, S, P> {
    /// Reads the command's fixed input layout.
    pub(super) fn read_in<L: Layout>(&mut self) -> Result<L, Reject> {
        let mut buf = [0u8; MAX_FIXED];
        let b = buf.get_mut(..L::SIZE).ok_or(Reject::InputTooShort)?;
        self.input.read(self.p, 0, b)?;
        L::decode(b).map_err(|_| Reject::InputTooShort)
    }

    /// Fails unless the output has room for `len` bytes (call before the
    /// command changes anything).
    pub(super) fn need_out(&self, len: usize) -> Result<(), Reject> {
        if self.out.len() < len {
            Err(Reject::OutputTooShort)
        } else {
            Ok(())
        }
    }

    /// Writes the output layout `out` (whose header says OK).
    pub(super) fn reply<L: Layout>(&mut self, out: &L) -> Result<(), Reject> {
        let mut buf = [0u8; MAX_FIXED];
        let b = buf.get_mut(..L::SIZE).ok_or(Reject::OutputTooShort)?;
        out.encode(b).map_err(|_| Reject::OutputTooShort)?;
        self.out.put(self.p, b)
    }

    /// Fails unless `op_mod` is 0.
    pub(super) fn no_op_mod(&self) -> Result<(), Reject> {
        if self.op_mod == 0 {
            Ok(())
        } else {
            Err(Reject::BadOpMod)
        }
    }
}

/// Which commands the state accepts: `Err` names the refusal.
fn allowed(state: HcaState, issi: u16, opcode: u16) -> Result<(), Reject> {
    use HcaState::*;
    let resource = matches!(
        opcode,
        OP_ALLOC_UAR
            | OP_DEALLOC_UAR
            | OP_ALLOC_PD
            | OP_DEALLOC_PD
            | OP_CREATE_MKEY
            | OP_DESTROY_MKEY
            | OP_CREATE_EQ
            | OP_DESTROY_EQ
            | OP_CREATE_CQ
            | OP_DESTROY_CQ
            | OP_CREATE_QP
            | OP_DESTROY_QP
            | OP_RST2INIT_QP
            | OP_INIT2INIT_QP
            | OP_INIT2RTR_QP
            | OP_RTR2RTS_QP
            | OP_2ERR_QP
            | OP_2RST_QP
            | OP_QUERY_QP
            | OP_QUERY_HCA_VPORT_CONTEXT
            | OP_QUERY_HCA_VPORT_GID
            | OP_QUERY_NIC_VPORT_CONTEXT
    );
    let needs_issi = matches!(
        opcode,
        OP_QUERY_PAGES | OP_MANAGE_PAGES | OP_QUERY_HCA_CAP | OP_SET_HCA_CAP | OP_INIT_HCA
    );
    match (state, opcode) {
        (Disabled, OP_ENABLE_HCA) => Ok(()),
        (Disabled, _) => Err(Reject::NotEnabled),
        (_, OP_ENABLE_HCA) => Err(Reject::AlreadyEnabled),
        (Enabled, OP_TEARDOWN_HCA) => Err(Reject::NotInitialized),
        (Enabled, _) if resource => Err(Reject::NotInitialized),
        (Enabled, _) if needs_issi && issi != 1 => Err(Reject::IssiNotSet),
        (Enabled, _) => Ok(()),
        (Initialized | TornDown, OP_SET_ISSI | OP_SET_HCA_CAP) => Err(Reject::SettingsLocked),
        (Initialized | TornDown, OP_INIT_HCA) => Err(Reject::AlreadyInitialized),
        (Initialized, OP_DISABLE_HCA) => Err(Reject::TeardownFirst),
        (Initialized, _) => Ok(()),
        (TornDown, OP_TEARDOWN_HCA) => Err(Reject::NotInitialized),
        (TornDown, _) if resource => Err(Reject::NotInitialized),
        (TornDown, _) => Ok(()),
    }
}

/// Runs the command of a checked entry.
fn dispatch<B: PageStore, S: Storage, P: Platform>(
    cx: &mut Cx<'_, B, S, P>,
    h: &InHeader,
) -> Result<(), Reject> {
    let known = super::super::prm::command::OPCODES
        .iter()
        .any(|(op, _)| *op == h.opcode);
    if !known {
        return Err(Reject::BadOpcode);
    }
    if h.uid != 0 {
        return Err(Reject::NonZeroUid);
    }
    allowed(cx.fw.state, cx.fw.issi, h.opcode)?;
    if h.opcode == cx.fw.cfg.fail_opcode && cx.fw.fails_left > 0 {
        cx.fw.fails_left -= 1;
        return Err(Reject::Injected);
    }
    match h.opcode {
        OP_ENABLE_HCA => cmd_hca::enable_hca(cx),
        OP_DISABLE_HCA => cmd_hca::disable_hca(cx),
        OP_QUERY_ISSI => cmd_hca::query_issi(cx),
        OP_SET_ISSI => cmd_hca::set_issi(cx),
        OP_QUERY_PAGES => cmd_hca::query_pages(cx),
        OP_MANAGE_PAGES => cmd_hca::manage_pages(cx),
        OP_QUERY_HCA_CAP => cmd_hca::query_hca_cap(cx),
        OP_SET_HCA_CAP => cmd_hca::set_hca_cap(cx),
        OP_INIT_HCA => cmd_hca::init_hca(cx),
        OP_TEARDOWN_HCA => cmd_hca::teardown_hca(cx),
        OP_ALLOC_UAR => cmd_res::alloc_uar(cx),
        OP_DEALLOC_UAR => cmd_res::dealloc_uar(cx),
        OP_ALLOC_PD => cmd_res::alloc_pd(cx),
        OP_DEALLOC_PD => cmd_res::dealloc_pd(cx),
        OP_CREATE_MKEY => cmd_res::create_mkey(cx),
        OP_DESTROY_MKEY => cmd_res::destroy_mkey(cx),
        OP_CREATE_EQ => cmd_queue::create_eq(cx),
        OP_DESTROY_EQ => cmd_queue::destroy_eq(cx),
        OP_CREATE_CQ => cmd_queue::create_cq(cx),
        OP_DESTROY_CQ => cmd_queue::destroy_cq(cx),
        OP_CREATE_QP => cmd_qp::create_qp(cx),
        OP_DESTROY_QP => cmd_qp::destroy_qp(cx),
        OP_RST2INIT_QP | OP_INIT2INIT_QP | OP_INIT2RTR_QP | OP_RTR2RTS_QP | OP_2ERR_QP
        | OP_2RST_QP => cmd_qp::modify_qp(cx, h.opcode),
        OP_QUERY_QP => cmd_qp::query_qp(cx),
        OP_QUERY_HCA_VPORT_CONTEXT => cmd_vport::query_hca_vport_context(cx),
        OP_QUERY_HCA_VPORT_GID => cmd_vport::query_hca_vport_gid(cx),
        OP_QUERY_NIC_VPORT_CONTEXT => cmd_vport::query_nic_vport_context(cx),
        _ => Err(Reject::BadOpcode),
    }
}

/// Runs queue entry `slot` of the queue at `base`. Returns whether the
/// entry was handed back to the driver.
pub(super) fn run_entry<B: PageStore, S: Storage, P: Platform>(
    fw: &mut Firmware<B>,
    p: &mut P,
    hca: &mut Hca<S>,
    base: u64,
    log_stride: u8,
    slot: u8,
) -> bool {
    let addr = base.wrapping_add(u64::from(slot) << log_stride);
    let mut bytes = [0u8; CMD_LAYOUT_SIZE];
    if p.read(addr, &mut bytes).is_err() {
        fw.note(slot, 0, Reject::EntryFault);
        return false;
    }
    let entry = CmdLayout::decode(&bytes);
    if !entry.ownership {
        fw.note(slot, 0, Reject::EntryNotOwned);
        return false;
    }
    let opcode = InHeader::decode(&entry.in_data).map_or(0, |h| h.opcode);
    fw.seg.heartbeat();
    let checksums = fw.checksums();
    let checked = check_entry(&bytes, fw.cfg.check_entry_signature)
        .and_then(|e| check_chains(p, &e, checksums).map(|()| e));
    let (out_inline, delivery) = match checked {
        Err(r) => {
            fw.note(slot, opcode, r);
            let status = match r.code() {
                Code::Delivery(d) => d.raw(),
                _ => 0,
            };
            ([0u8; 16], status)
        }
        Ok(e) => execute(fw, p, hca, &e, slot, opcode),
    };
    // The output first, then (with command checksums on, which the
    // driver verifies on completion) the entry's new signature, then the
    // status with the ownership bit cleared.
    bytes[32..48].copy_from_slice(&out_inline);
    bytes[STATUS_OWN_OFFSET] = delivery << 1;
    let resign = fw.checksums();
    if resign {
        sign_layout(&mut bytes);
    }
    let done = p.write(addr.wrapping_add(32), &out_inline).is_ok()
        && (!resign || p.write(addr.wrapping_add(61), &bytes[61..62]).is_ok())
        && p.write(
            addr.wrapping_add(STATUS_OWN_OFFSET as u64),
            &[delivery << 1],
        )
        .is_ok();
    if !done {
        fw.note(slot, opcode, Reject::EntryFault);
        return false;
    }
    fw.stats.commands += 1;
    if let Some(eqn) = fw.cmd_eqn {
        let mut raw = [0u8; DATA_SIZE];
        CmdEqe { vector: 1 << slot }.encode(&mut raw);
        if hca.post_event(p, eqn, EventType::Cmd, EqeData::Raw(raw)) {
            fw.stats.cmd_events += 1;
        } else {
            fw.note(slot, opcode, Reject::EventLost);
        }
    }
    true
}

/// Runs a delivered command and writes its output. Returns the entry's
/// `out` bytes and the delivery status to report.
fn execute<B: PageStore, S: Storage, P: Platform>(
    fw: &mut Firmware<B>,
    p: &mut P,
    hca: &mut Hca<S>,
    e: &CmdLayout,
    slot: u8,
    opcode: u16,
) -> ([u8; 16], u8) {
    let checksums = fw.checksums();
    let input = Input::new(e);
    let header = InHeader::decode(input.header()).unwrap_or_default();
    let mut cx = Cx {
        fw,
        hca,
        p,
        input,
        out: Output::new(e, checksums),
        op_mod: header.op_mod,
    };
    let result = dispatch(&mut cx, &header).and_then(|()| cx.out.finish(cx.p));
    if result.is_ok() {
        cx.fw.request_missing(cx.p, cx.hca);
        return (cx.out.inline(), 0);
    }
    let r = result.err().unwrap_or(Reject::MailboxFault);
    cx.fw.note(slot, opcode, r);
    let status = match r.code() {
        Code::Delivery(d) => return ([0; 16], d.raw()),
        Code::Status(s) => s,
        Code::Ignored => CmdStatus::IntErr,
    };
    // A failed command's output is its header alone, zero-padded.
    let mut out = Output::new(e, checksums);
    let mut b = [0u8; 16];
    let header = OutHeader {
        status,
        syndrome: r.syndrome(),
    };
    if header.encode(&mut b).is_err() || out.put(cx.p, &b).is_err() || out.finish(cx.p).is_err() {
        return (
            [0; 16],
            super::super::prm::cmd_queue::DeliveryStatus::FwErr.raw(),
        );
    }
    (out.inline(), 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_table() {
        use HcaState::*;
        assert_eq!(allowed(Disabled, 0, OP_QUERY_ISSI), Err(Reject::NotEnabled));
        assert_eq!(allowed(Disabled, 0, OP_ENABLE_HCA), Ok(()));
        assert_eq!(allowed(Enabled, 0, OP_QUERY_ISSI), Ok(()));
        assert_eq!(allowed(Enabled, 0, OP_QUERY_PAGES), Err(Reject::IssiNotSet));
        assert_eq!(allowed(Enabled, 1, OP_QUERY_PAGES), Ok(()));
        assert_eq!(
            allowed(Enabled, 1, OP_CREATE_CQ),
            Err(Reject::NotInitialized)
        );
        assert_eq!(
            allowed(Enabled, 1, OP_ENABLE_HCA),
            Err(Reject::AlreadyEnabled)
        );
        assert_eq!(allowed(Initialized, 1, OP_CREATE_CQ), Ok(()));
        assert_eq!(allowed(Initialized, 1, OP_QUERY_QP), Ok(()));
        assert_eq!(
            allowed(Enabled, 1, OP_QUERY_QP),
            Err(Reject::NotInitialized)
        );
        assert_eq!(
            allowed(Initialized, 1, OP_SET_HCA_CAP),
            Err(Reject::SettingsLocked)
        );
        assert_eq!(
            allowed(Initialized, 1, OP_DISABLE_HCA),
            Err(Reject::TeardownFirst)
        );
        assert_eq!(
            allowed(TornDown, 1, OP_CREATE_CQ),
            Err(Reject::NotInitialized)
        );
        assert_eq!(allowed(TornDown, 1, OP_DISABLE_HCA), Ok(()));
        assert_eq!(
            allowed(TornDown, 1, OP_INIT_HCA),
            Err(Reject::AlreadyInitialized)
        );
        // The port is queried once the HCA is up.
        assert_eq!(allowed(Initialized, 1, OP_QUERY_HCA_VPORT_CONTEXT), Ok(()));
        assert_eq!(
            allowed(Enabled, 1, OP_QUERY_HCA_VPORT_GID),
            Err(Reject::NotInitialized)
        );
        assert_eq!(
            allowed(TornDown, 1, OP_QUERY_NIC_VPORT_CONTEXT),
            Err(Reject::NotInitialized)
        );
    }
}
