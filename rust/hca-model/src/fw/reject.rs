// SPDX-License-Identifier: GPL-2.0

//! Every way the device refuses something the driver did, with the status
//! it reports, its syndrome and a reason for the log, declared in one
//! table; and the bounded log of protocol errors a device process reads to
//! fail loudly.
//!
//! A refusal is reported one of three ways ([`Code`]): as a delivery status
//! in the queue entry (the command never ran: bad entry, bad mailbox
//! chain), as a command status and syndrome in the output header (the
//! command ran and failed), or not at all (a doorbell the device cannot act
//! on: nothing is written and the entry stays owned by the device, so the
//! driver times out). Syndromes are this model's own numbers: the high
//! half names the area (0x01 delivery, 0x02 dispatch, 0x03 bring-up order,
//! 0x04 pages, 0x05 ISSI and capabilities, 0x06 UAR/PD/memory keys, 0x07
//! EQs and CQs, 0x08 QPs, 0x09 doorbells, 0x0a ports and vports), the low
//! half the check.

use super::super::prm::cmd_queue::DeliveryStatus;
use super::super::prm::cmd_status::CmdStatus;

/// How a refusal reaches the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    /// A delivery status in the entry's `status_own`; the command did not
    /// run and no output was written.
    Delivery(DeliveryStatus),
    /// A command status (and the syndrome) in the output header.
    Status(CmdStatus),
    /// Nothing: the doorbell or register write was ignored.
    Ignored,
}

macro_rules! rejects {
    ($(
        $(#[$meta:meta])*
        $name:ident = $syndrome:literal, $code:expr, $reason:literal;
    )*) => {
        /// Why the device refused a command or a register access. Each
        /// variant has a fixed [`Code`], syndrome and reason.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Reject {
            $(
                $(#[$meta])*
                ///
                #[doc = concat!("Syndrome `", stringify!($syndrome), "`: ", $reason, ".")]
                $name,
            )*
        }

        impl Reject {
            /// Every refusal, in table order.
            pub const ALL: &'static [Reject] = &[$(Reject::$name,)*];

            /// How the refusal is reported.
            pub fn code(self) -> Code {
                match self {
                    $(Reject::$name => $code,)*
                }
            }

            /// The syndrome written to the output header (also logged for
            /// delivery errors and ignored doorbells).
            pub fn syndrome(self) -> u32 {
                match self {
                    $(Reject::$name => $syndrome,)*
                }
            }

            /// A one-line reason for logs.
            pub fn reason(self) -> &'static str {
                match self {
                    $(Reject::$name => $reason,)*
                }
            }
        }
    };
}

use CmdStatus as S;
use DeliveryStatus as D;

rejects! {
    // Delivery: the queue entry and the mailbox chains.
    /// `type` is not `MLX5_PCI_CMD_XPORT`.
    BadEntryType = 0x0001_0001, Code::Delivery(D::CmdDescrErr),
        "queue entry type is not PCI_CMD_XPORT (7)";
    /// The XOR of the 64 entry bytes is not 0xff.
    BadEntrySignature = 0x0001_0002, Code::Delivery(D::SignatErr),
        "queue entry signature wrong";
    /// A reserved byte of the entry is not zero.
    EntryReservedSet = 0x0001_0003, Code::Delivery(D::ResFldNotClrErr),
        "reserved bytes of the queue entry not zero";
    /// `inlen` is below the 16-byte input header or above the model's
    /// maximum message.
    BadInputLength = 0x0001_0004, Code::Delivery(D::InLengthErr),
        "inlen below 16 bytes or above the maximum message";
    /// `outlen` is below the 8 bytes of status and syndrome or above the
    /// maximum message.
    BadOutputLength = 0x0001_0005, Code::Delivery(D::OutLengthErr),
        "outlen below 8 bytes or above the maximum message";
    /// `in_ptr` (or a `next` of the input chain) is not 1 KiB aligned.
    InPtrAlign = 0x0001_0006, Code::Delivery(D::InPtrAlignErr),
        "input mailbox pointer not 1 KiB aligned";
    /// `out_ptr` (or a `next` of the output chain) is not 1 KiB aligned.
    OutPtrAlign = 0x0001_0007, Code::Delivery(D::OutPtrAlignErr),
        "output mailbox pointer not 1 KiB aligned";
    /// An input mailbox carries another token than the entry.
    InToken = 0x0001_0008, Code::Delivery(D::TokErr),
        "input mailbox token differs from the entry's";
    /// An output mailbox carries another token than the entry.
    OutToken = 0x0001_0009, Code::Delivery(D::TokErr),
        "output mailbox token differs from the entry's";
    /// Input mailbox `block_num`s are not 0, 1, 2, ...
    InBlockNum = 0x0001_000a, Code::Delivery(D::BadBlkNumErr),
        "input mailbox block_num out of sequence";
    /// Output mailbox `block_num`s are not 0, 1, 2, ...
    OutBlockNum = 0x0001_000b, Code::Delivery(D::BadBlkNumErr),
        "output mailbox block_num out of sequence";
    /// With command checksums enabled, an input mailbox's signatures are
    /// wrong.
    InBlockSignature = 0x0001_000c, Code::Delivery(D::SignatErr),
        "input mailbox signature wrong (checksums enabled)";
    /// The input chain ends (`next` is 0) before `inlen` bytes.
    InChainShort = 0x0001_000e, Code::Delivery(D::InLengthErr),
        "input mailbox chain shorter than inlen";
    /// The output chain ends before `outlen` bytes.
    OutChainShort = 0x0001_000f, Code::Delivery(D::OutLengthErr),
        "output mailbox chain shorter than outlen";
    /// A mailbox could not be read or written (DMA fault).
    MailboxFault = 0x0001_000d, Code::Delivery(D::FwErr),
        "mailbox not reachable by DMA";

    // Dispatch.
    /// The opcode is not one of the commands the device implements.
    BadOpcode = 0x0002_0001, Code::Status(S::BadOpErr),
        "unknown or unsupported opcode";
    /// The op_mod is not one the command defines.
    BadOpMod = 0x0002_0002, Code::Status(S::BadParamErr),
        "op_mod not valid for the command";
    /// `uid` is not 0: user (DEVX) objects are not supported.
    NonZeroUid = 0x0002_0003, Code::Status(S::BadParamErr),
        "uid not 0 (user objects not supported)";
    /// `inlen` is shorter than the command's input layout (and page list).
    InputTooShort = 0x0002_0004, Code::Status(S::BadInpLenErr),
        "input shorter than the command's layout and page list";
    /// `outlen` is shorter than the command's output layout.
    OutputTooShort = 0x0002_0005, Code::Status(S::BadOutpLenErr),
        "output shorter than the command's layout";
    /// A function other than the PF itself was named (no VFs, no embedded
    /// CPU function).
    OtherFunction = 0x0002_0006, Code::Status(S::BadParamErr),
        "function_id, other_function or embedded_cpu_function not 0";
    /// The embedder asked for this command to fail
    /// ([`super::FwConfig::fail_opcode`]): a test of the driver's error
    /// path, not a fault of the driver.
    Injected = 0x0002_00ff, Code::Status(S::BadParamErr),
        "failure injected by the embedder";

    // The bring-up order.
    /// A command other than ENABLE_HCA before ENABLE_HCA.
    NotEnabled = 0x0003_0001, Code::Status(S::BadSysStateErr),
        "HCA not enabled (ENABLE_HCA first)";
    /// ENABLE_HCA while enabled.
    AlreadyEnabled = 0x0003_0002, Code::Status(S::BadSysStateErr),
        "HCA already enabled";
    /// Page, capability or INIT_HCA command before SET_ISSI(1).
    IssiNotSet = 0x0003_0003, Code::Status(S::BadSysStateErr),
        "ISSI not set (SET_ISSI 1 first)";
    /// QUERY/SET_HCA_CAP or init-page query before the boot pages were
    /// given.
    BootPagesMissing = 0x0003_0004, Code::Status(S::BadSysStateErr),
        "boot pages not given yet";
    /// INIT_HCA before the init pages were given.
    InitPagesMissing = 0x0003_0005, Code::Status(S::BadSysStateErr),
        "init pages not given yet";
    /// A resource command before INIT_HCA, or after TEARDOWN_HCA.
    NotInitialized = 0x0003_0006, Code::Status(S::BadSysStateErr),
        "HCA not initialized (INIT_HCA first, or torn down)";
    /// INIT_HCA twice, or after TEARDOWN_HCA without DISABLE/ENABLE.
    AlreadyInitialized = 0x0003_0007, Code::Status(S::BadSysStateErr),
        "INIT_HCA already done in this enable cycle";
    /// SET_HCA_CAP or SET_ISSI after INIT_HCA.
    SettingsLocked = 0x0003_0008, Code::Status(S::BadSysStateErr),
        "capabilities and ISSI are fixed after INIT_HCA";
    /// TEARDOWN_HCA while objects or UARs are alive.
    ObjectsAlive = 0x0003_0009, Code::Status(S::BadSysStateErr),
        "TEARDOWN_HCA with objects or UARs still allocated";
    /// DISABLE_HCA while the device still holds pages.
    PagesOutstanding = 0x0003_000a, Code::Status(S::BadSysStateErr),
        "DISABLE_HCA with pages not reclaimed";
    /// DISABLE_HCA between INIT_HCA and TEARDOWN_HCA.
    TeardownFirst = 0x0003_000b, Code::Status(S::BadSysStateErr),
        "DISABLE_HCA while initialized (TEARDOWN_HCA first)";

    // Pages.
    /// A page address is not 4 KiB aligned.
    PageMisaligned = 0x0004_0001, Code::Status(S::BadParamErr),
        "page address not 4 KiB aligned";
    /// The same page appears twice in one MANAGE_PAGES.
    PageDuplicate = 0x0004_0002, Code::Status(S::BadParamErr),
        "page listed twice";
    /// The device already holds this page.
    PageAlreadyOwned = 0x0004_0003, Code::Status(S::BadParamErr),
        "page already given to the device";
    /// The page overlaps the command queue, a UAR or a queue buffer or
    /// doorbell record the device knows.
    PageOverlapsQueue = 0x0004_0004, Code::Status(S::BadParamErr),
        "page overlaps the command queue, a UAR or a queue buffer";
    /// The device could not write the page (DMA fault).
    PageUnreachable = 0x0004_0005, Code::Status(S::BadParamErr),
        "page not reachable by DMA";
    /// MANAGE_PAGES give with no pages.
    NoPages = 0x0004_0006, Code::Status(S::BadParamErr),
        "MANAGE_PAGES give with 0 entries";
    /// The page table the embedder provided is full.
    PageTableFull = 0x0004_0007, Code::Status(S::LimErr),
        "device page table full";
    /// Pages given after TEARDOWN_HCA (the device needs none).
    GiveAfterTeardown = 0x0004_0008, Code::Status(S::BadSysStateErr),
        "pages given after TEARDOWN_HCA";

    // ISSI and capabilities.
    /// SET_ISSI with an ISSI other than 1.
    UnsupportedIssi = 0x0005_0001, Code::Status(S::BadParamErr),
        "ISSI not supported (only 1)";
    /// A capability type other than the general capabilities.
    UnsupportedCapType = 0x0005_0002, Code::Status(S::BadParamErr),
        "capability type not supported (general only)";
    /// SET_HCA_CAP with a settable field out of range or a feature the
    /// device lacks.
    BadCapValue = 0x0005_0003, Code::Status(S::BadParamErr),
        "SET_HCA_CAP value out of range or feature not supported";
    /// TEARDOWN_HCA with a profile other than graceful close.
    UnsupportedTeardown = 0x0005_0004, Code::Status(S::BadParamErr),
        "teardown profile not supported (graceful close only)";

    // UARs, PDs and memory keys.
    /// No UAR index is free.
    NoFreeUar = 0x0006_0001, Code::Status(S::NoResErr),
        "no free UAR";
    /// The UAR index is not allocated.
    BadUar = 0x0006_0002, Code::Status(S::BadResErr),
        "UAR not allocated";
    /// DEALLOC_UAR while an EQ, CQ or QP uses the UAR.
    UarBusy = 0x0006_0003, Code::Status(S::ResBusy),
        "UAR still used by an EQ, CQ or QP";
    /// An object table is full.
    TableFull = 0x0006_0004, Code::Status(S::NoResErr),
        "object table full";
    /// The PD does not exist.
    BadPd = 0x0006_0005, Code::Status(S::BadResErr),
        "PD does not exist";
    /// DEALLOC_PD while memory keys or QPs use the PD.
    PdBusy = 0x0006_0006, Code::Status(S::ResBusy),
        "PD still used by memory keys or QPs";
    /// Access mode other than PA or MTT.
    BadAccessMode = 0x0006_0007, Code::Status(S::BadParamErr),
        "memory key access mode not PA or MTT";
    /// A free key, a key bound to a QP, or UMR-only options.
    UnsupportedMkey = 0x0006_0008, Code::Status(S::BadParamErr),
        "free or QP-bound memory key (needs UMR or windows, not modelled)";
    /// Remote write or atomic without local write, or a range that wraps.
    BadMkeyAccess = 0x0006_0009, Code::Status(S::BadParamErr),
        "remote write/atomic without local write, or range wraps";
    /// MTT page size below 4 KiB or above 2^63.
    BadMttPageSize = 0x0006_000a, Code::Status(S::BadParamErr),
        "MTT log_page_size below 12";
    /// An MTT entry is not aligned to the page size.
    MttMisaligned = 0x0006_000b, Code::Status(S::BadParamErr),
        "MTT entry not aligned to the page size";
    /// Fewer MTT entries than the region spans.
    MttTooShort = 0x0006_000c, Code::Status(S::BadParamErr),
        "fewer MTT entries than the region spans";
    /// The memory key does not exist.
    BadMkey = 0x0006_000e, Code::Status(S::BadResErr),
        "memory key does not exist";
    /// The region spans more pages than a translation table holds
    /// ([`super::super::mr::MTT_MAX_ENTRIES`]; checked before the list is
    /// read, whether its pages are contiguous or not).
    MttTooLong = 0x0006_000f, Code::Status(S::LimErr),
        "MTT list longer than a translation table holds (2^18 entries)";
    /// The pages are scattered and the device holds too few free pages
    /// for their translation table (nothing is taken; the pages earlier
    /// tables took are asked for again as they are taken, and
    /// [`super::FwConfig::mtt_reserve`] sizes what the device keeps free).
    MttNoPages = 0x0006_0010, Code::Status(S::NoResErr),
        "too few free device pages for the MTT translation table";

    // EQs and CQs (and queue buffers in general).
    /// A queue size above the device limit.
    QueueTooLarge = 0x0007_0001, Code::Status(S::LimErr),
        "queue size above the device limit";
    /// `log_page_size` makes pages larger than 2^63 bytes.
    BadQueuePageSize = 0x0007_0002, Code::Status(S::BadParamErr),
        "queue log_page_size too large";
    /// A page-list entry is not aligned to the page size.
    QueuePageMisaligned = 0x0007_0003, Code::Status(S::BadParamErr),
        "queue page address not aligned to the page size";
    /// Fewer page-list entries than the buffer spans.
    QueuePagesTooShort = 0x0007_0004, Code::Status(S::BadParamErr),
        "fewer page-list entries than the queue buffer spans";
    /// The buffer's pages are not physically contiguous (model limitation).
    QueueNotContiguous = 0x0007_0005, Code::Status(S::BadParamErr),
        "queue buffer pages not contiguous (model limitation)";
    /// The buffer or doorbell record overlaps pages the device holds.
    QueueOverlapsPages = 0x0007_0006, Code::Status(S::BadParamErr),
        "queue buffer or doorbell record overlaps device pages";
    /// A doorbell record address is not 8-byte aligned.
    DbrMisaligned = 0x0007_0007, Code::Status(S::BadParamErr),
        "doorbell record not 8-byte aligned";
    /// The EQ interrupt vector is beyond the MSI-X table.
    BadVector = 0x0007_0008, Code::Status(S::BadParamErr),
        "EQ interrupt vector beyond the MSI-X table";
    /// Overrun ignore, collapsed CQ, 128-byte CQEs or a preset arm state.
    UnsupportedQueueMode = 0x0007_0009, Code::Status(S::BadParamErr),
        "oi, cc, 128-byte CQEs or st not 0 (not modelled)";
    /// A second EQ asked for command, page-request or QP/CQ async events.
    EventTaken = 0x0007_000a, Code::Status(S::BadParamErr),
        "another EQ already receives these events";
    /// The EQ does not exist.
    BadEq = 0x0007_000b, Code::Status(S::BadResErr),
        "EQ does not exist";
    /// DESTROY_EQ while CQs deliver to it.
    EqBusy = 0x0007_000c, Code::Status(S::ResBusy),
        "EQ still used by CQs";
    /// The CQ does not exist.
    BadCq = 0x0007_000d, Code::Status(S::BadResErr),
        "CQ does not exist";
    /// DESTROY_CQ while QPs complete to it.
    CqBusy = 0x0007_000e, Code::Status(S::ResBusy),
        "CQ still used by QPs";

    // QPs.
    /// A service type other than RC, UD or QP1.
    UnsupportedSt = 0x0008_0001, Code::Status(S::BadParamErr),
        "QP service type not RC, UD or QP1";
    /// SRQ or another receive queue type the model lacks.
    UnsupportedRq = 0x0008_0002, Code::Status(S::BadParamErr),
        "QP receive queue type not regular or zero-length";
    /// Path migration state other than MIGRATED.
    BadPmState = 0x0008_0003, Code::Status(S::BadParamErr),
        "QP pm_state not MIGRATED";
    /// The model refused the QP's sizes or limits.
    BadQpSize = 0x0008_0004, Code::Status(S::BadParamErr),
        "QP sizes or receive stride out of range";
    /// The QP does not exist.
    BadQp = 0x0008_0005, Code::Status(S::BadResErr),
        "QP does not exist";
    /// The transition is not allowed from the QP's state.
    BadQpState = 0x0008_0006, Code::Status(S::BadQpStateErr),
        "QP state does not allow the transition";
    /// An attribute of the transition is out of range.
    BadQpAttr = 0x0008_0007, Code::Status(S::BadParamErr),
        "QP attribute out of range (port, P_Key index, MTU, rd_atomic, ...)";
    /// `opt_param_mask` names a field the transition does not take or the
    /// model does not support.
    BadOptParam = 0x0008_0008, Code::Status(S::BadParamErr),
        "opt_param_mask names an unsupported field";
    /// The path's LID names no instance of the fabric.
    BadRlid = 0x0008_0009, Code::Status(S::BadParamErr),
        "remote LID names no port of the fabric";
    /// CREATE_QP of a second QP1 on the function.
    Qp1Exists = 0x0008_000a, Code::Status(S::ResBusy),
        "QP1 already exists on the function";

    // Doorbells and registers that cannot be acted on.
    /// The command doorbell rang before the queue was ready.
    DoorbellNotReady = 0x0009_0001, Code::Ignored,
        "command doorbell before the queue is ready";
    /// The doorbell named an entry software owns.
    EntryNotOwned = 0x0009_0002, Code::Ignored,
        "doorbell for an entry without the ownership bit";
    /// The queue entry could not be read or written.
    EntryFault = 0x0009_0003, Code::Ignored,
        "queue entry not reachable by DMA";
    /// The doorbell named an entry beyond the queue.
    EntryBeyondQueue = 0x0009_0004, Code::Ignored,
        "doorbell bit beyond the queue's entries";
    /// The command queue address was written while the HCA was enabled.
    CmdqMoved = 0x0009_0005, Code::Ignored,
        "command queue address changed while the HCA is enabled";
    /// An event the device had to post found no EQ or a full one.
    EventLost = 0x0009_0006, Code::Ignored,
        "command-completion, page-request or port-change event lost (no EQ or EQ full)";

    // Ports and vports.
    /// `other_vport` or `vport_number` names another function's vport.
    OtherVport = 0x000a_0001, Code::Status(S::BadParamErr),
        "other_vport or vport_number not 0 (the function's own vport only)";
    /// `port_num` names no port of the function.
    BadPort = 0x000a_0002, Code::Status(S::BadParamErr),
        "port_num names no port of the function (0 or 1)";
    /// `gid_index` is beyond the GID table (and not 0xffff, all of it).
    BadGidIndex = 0x000a_0003, Code::Status(S::BadParamErr),
        "gid_index beyond the GID table";
    /// `allowed_list_type` is none of the list types.
    BadListType = 0x000a_0004, Code::Status(S::BadParamErr),
        "allowed_list_type not UC, MC or VLAN";
}

/// One refusal as the log keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProtocolError {
    /// The command's opcode (0 when no command was read).
    pub opcode: u16,
    /// The queue entry, or 0xff for a refusal not tied to one.
    pub slot: u8,
    /// What was refused.
    pub reject: Reject,
}

impl ProtocolError {
    /// How it was reported.
    pub fn code(&self) -> Code {
        self.reject.code()
    }

    /// The syndrome.
    pub fn syndrome(&self) -> u32 {
        self.reject.syndrome()
    }

    /// The reason.
    pub fn reason(&self) -> &'static str {
        self.reject.reason()
    }
}

/// How many refusals the log keeps (the most recent ones).
pub const LOG_LEN: usize = 32;

/// A ring of the last [`LOG_LEN`] refusals and a count of all of them.
#[derive(Clone, Copy, Debug)]
pub struct ErrorLog {
    ring: [Option<ProtocolError>; LOG_LEN],
    next: usize,
    total: u64,
}

impl Default for ErrorLog {
    fn default() -> Self {
        Self::new()
    }
}

impl ErrorLog {
    /// An empty log.
    pub const fn new() -> Self {
        ErrorLog {
            ring: [None; LOG_LEN],
            next: 0,
            total: 0,
        }
    }

    /// Records a refusal, dropping the oldest when full.
    pub(super) fn push(&mut self, e: ProtocolError) {
        if let Some(slot) = self.ring.get_mut(self.next % LOG_LEN) {
            *slot = Some(e);
        }
        self.next = (self.next + 1) % LOG_LEN;
        self.total = self.total.wrapping_add(1);
    }

    /// Refusals recorded since creation (or the last [`ErrorLog::clear`]),
    /// including those the ring no longer holds.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The refusals the ring holds, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &ProtocolError> + '_ {
        let (new, old) = self.ring.split_at(self.next);
        old.iter().chain(new.iter()).filter_map(Option::as_ref)
    }

    /// The most recent refusal.
    pub fn last(&self) -> Option<&ProtocolError> {
        let i = (self.next + LOG_LEN - 1) % LOG_LEN;
        self.ring.get(i).and_then(Option::as_ref)
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        *self = ErrorLog::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syndromes_are_unique_and_grouped() {
        for (i, a) in Reject::ALL.iter().enumerate() {
            for b in &Reject::ALL[i + 1..] {
                assert_ne!(a.syndrome(), b.syndrome(), "{a:?} {b:?}");
            }
            let group = a.syndrome() >> 16;
            assert!((1..=10).contains(&group), "{a:?}");
            let delivery = matches!(a.code(), Code::Delivery(_));
            assert_eq!(delivery, group == 1, "{a:?}");
            assert_eq!(a.code() == Code::Ignored, group == 9, "{a:?}");
            assert!(!a.reason().is_empty());
        }
    }

    #[test]
    fn log_keeps_the_last_entries() {
        let mut log = ErrorLog::new();
        assert!(log.last().is_none());
        for i in 0..(LOG_LEN as u16 + 5) {
            log.push(ProtocolError {
                opcode: i,
                slot: 0,
                reject: Reject::BadOpcode,
            });
        }
        assert_eq!(log.total(), LOG_LEN as u64 + 5);
        let ops: [u16; LOG_LEN] = core::array::from_fn(|i| i as u16 + 5);
        assert!(log.iter().map(|e| e.opcode).eq(ops.iter().copied()));
        assert_eq!(log.last().map(|e| e.opcode), Some(LOG_LEN as u16 + 4));
        log.clear();
        assert_eq!(log.iter().count(), 0);
    }
}
