// SPDX-License-Identifier: GPL-2.0

//! Argument structs of the rmlx5 commands and the values they carry.
//!
//! Each struct is one command's request and response: fields marked "in"
//! are read by the kernel, fields marked "out" are written by it (and must
//! be zero on the way in, like every `reserved` field). Sizes are multiples
//! of 8 with no implicit padding; `size_of` is asserted below and against
//! the C header by the tests. Enum values are those of libibverbs
//! (`infiniband/verbs.h`), so a verbs programmer reads them at a glance.

use super::wire::Wire;

/// Declares an ABI struct: `#[repr(C)]` with the usual derives, plus its
/// [`Wire`] implementation that reads and writes it field by field at the
/// offsets the compiler chose, in native byte order (the ABI is host-endian,
/// as ioctl arguments are).
macro_rules! abi_struct {
    (
        $(#[$doc:meta])*
        pub struct $name:ident {
            $( $(#[$fdoc:meta])* pub $field:ident: $ty:ty, )*
        }
    ) => {
        $(#[$doc])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct $name {
            $( $(#[$fdoc])* pub $field: $ty, )*
        }

        impl Wire for $name {
            const SIZE: usize = core::mem::size_of::<$name>();

            fn read(b: &[u8]) -> Option<Self> {
                Some($name {
                    $( $field: Wire::read(b.get(core::mem::offset_of!($name, $field)..)?)?, )*
                })
            }

            fn write(&self, out: &mut [u8]) -> Option<()> {
                out.get_mut(..Self::SIZE)?.fill(0);
                $( self.$field.write(out.get_mut(core::mem::offset_of!($name, $field)..)?)?; )*
                Some(())
            }
        }
    };
}

abi_struct! {
    /// Header of every command argument.
    pub struct CmdHdr {
        /// in: size in bytes of the whole struct as the caller knows it.
        pub size: u32,
        /// in: command flags; no command defines any yet, so must be 0.
        pub flags: u32,
    }
}

abi_struct! {
    /// `RMLX5_CMD_QUERY_DEVICE`: device attributes (`ibv_device_attr`).
    pub struct QueryDevice {
        /// in: header.
        pub hdr: CmdHdr,
        /// out: firmware version (major << 32 | minor << 16 | sub-minor).
        pub fw_ver: u64,
        /// out: node GUID.
        pub node_guid: u64,
        /// out: system image GUID.
        pub sys_image_guid: u64,
        /// out: largest MR in bytes.
        pub max_mr_size: u64,
        /// out: supported page sizes (bit n set: 2^n bytes).
        pub page_size_cap: u64,
        /// out: IEEE vendor id (Mellanox, 0x02c9).
        pub vendor_id: u32,
        /// out: vendor part id.
        pub vendor_part_id: u32,
        /// out: hardware version.
        pub hw_ver: u32,
        /// out: most QPs.
        pub max_qp: u32,
        /// out: most WRs per send or receive queue.
        pub max_qp_wr: u32,
        /// out: most scatter/gather entries per WR.
        pub max_sge: u32,
        /// out: most CQs.
        pub max_cq: u32,
        /// out: most entries per CQ.
        pub max_cqe: u32,
        /// out: most MRs.
        pub max_mr: u32,
        /// out: most PDs.
        pub max_pd: u32,
        /// out: most outstanding RDMA reads/atomics a QP accepts as responder.
        pub max_qp_rd_atom: u32,
        /// out: most outstanding RDMA reads/atomics a QP issues as requester.
        pub max_qp_init_rd_atom: u32,
        /// out: atomic support ([`ATOMIC_HCA`]).
        pub atomic_cap: u32,
        /// out: completion vectors (completion EQs) available to CQs.
        pub num_comp_vectors: u32,
        /// out: most inline bytes per send WR.
        pub max_inline_data: u32,
        /// out: ports (always 1).
        pub phys_port_cnt: u32,
        /// out: size of one whole BlueFlame register in bytes, as mlx5
        /// means it (`1 << log_bf_reg_size`, 512): two halves of
        /// `bf_reg_size / 2` that a QP writes alternately, so one BlueFlame
        /// copy carries at most `bf_reg_size / 2` bytes of WQE. Each QP's
        /// register is at `bf_offset` in its UAR page (see [`CreateQp`]).
        pub bf_reg_size: u32,
        /// out: size of the UAR page in bytes.
        pub uar_size: u32,
        /// out: instance number n of `rmlx5_<n>`.
        pub device_index: u32,
        /// out: device flags, `DEVICE_*` ([`DEVICE_UAR_DOORBELLS`]).
        pub device_flags: u32,
    }
}

abi_struct! {
    /// `RMLX5_CMD_QUERY_PORT`: port attributes (`ibv_port_attr`).
    pub struct QueryPort {
        /// in: header.
        pub hdr: CmdHdr,
        /// in: port number, 1-based.
        pub port_num: u32,
        /// out: [`PORT_ACTIVE`] or another `IBV_PORT_*` state.
        pub state: u32,
        /// out: largest MTU (`IBV_MTU_*`).
        pub max_mtu: u32,
        /// out: active MTU (`IBV_MTU_*`).
        pub active_mtu: u32,
        /// out: the port's LID; a QP addresses a peer port by its LID.
        pub lid: u32,
        /// out: the subnet manager's LID.
        pub sm_lid: u32,
        /// out: capability flags.
        pub port_cap_flags: u32,
        /// out: GID table length.
        pub gid_tbl_len: u32,
        /// out: active link width (`IBV_WIDTH_*` encoding).
        pub active_width: u32,
        /// out: active link speed (`IBV_SPEED_*` encoding).
        pub active_speed: u32,
        /// out: [`LINK_LAYER_INFINIBAND`].
        pub link_layer: u32,
        /// Must be zero.
        pub reserved: u32,
    }
}

abi_struct! {
    /// `RMLX5_CMD_ALLOC_PD`.
    pub struct AllocPd {
        /// in: header.
        pub hdr: CmdHdr,
        /// out: handle naming the PD in later commands.
        pub pd_handle: u32,
        /// out: the device's PD number.
        pub pdn: u32,
    }
}

abi_struct! {
    /// Argument of every destroy command (`DEALLOC_PD`, `DEREG_MR`,
    /// `DESTROY_CQ`, `DESTROY_QP`).
    pub struct Destroy {
        /// in: header.
        pub hdr: CmdHdr,
        /// in: handle of the object.
        pub handle: u32,
        /// Must be zero.
        pub reserved: u32,
        /// out (CQ): completion events delivered to the channel;
        /// (QP): 0.
        pub comp_events_reported: u32,
        /// out (CQ, QP): async events delivered for the object.
        pub async_events_reported: u32,
    }
}

abi_struct! {
    /// `RMLX5_CMD_REG_MR`: pin and register user memory.
    pub struct RegMr {
        /// in: header.
        pub hdr: CmdHdr,
        /// in: start of the buffer in the process.
        pub addr: u64,
        /// in: length in bytes, at least 1.
        pub length: u64,
        /// in: the address the MR is known by in WQEs (usually `addr`).
        pub iova: u64,
        /// in: the PD.
        pub pd_handle: u32,
        /// in: `ACCESS_*` flags.
        pub access: u32,
        /// out: handle naming the MR in `DEREG_MR`.
        pub mr_handle: u32,
        /// out: local key.
        pub lkey: u32,
        /// out: remote key.
        pub rkey: u32,
        /// Must be zero.
        pub reserved: u32,
    }
}

abi_struct! {
    /// `RMLX5_CMD_CREATE_COMP_CHANNEL`: a new `[infinibandevent]` file.
    pub struct CreateCompChannel {
        /// in: header.
        pub hdr: CmdHdr,
        /// out: the file descriptor (O_RDONLY, O_CLOEXEC).
        pub fd: i32,
        /// Must be zero.
        pub reserved: u32,
    }
}

abi_struct! {
    /// `RMLX5_CMD_CREATE_CQ`.
    pub struct CreateCq {
        /// in: header.
        pub hdr: CmdHdr,
        /// in: value returned in completion events and async events of the CQ.
        pub user_handle: u64,
        /// in: entries wanted, 1 to `max_cqe` (rounded up to a power of two).
        pub cqe: u32,
        /// in: completion channel fd, or -1 for none.
        pub channel_fd: i32,
        /// in: completion vector, below `num_comp_vectors`.
        pub comp_vector: u32,
        /// out: handle naming the CQ in later commands.
        pub cq_handle: u32,
        /// out: the CQ number (as in CQEs and EQEs).
        pub cqn: u32,
        /// out: entries in the CQ ring, a power of two.
        pub cqe_cnt: u32,
        /// out: bytes per CQE (64).
        pub cqe_size: u32,
        /// Must be zero.
        pub reserved: u32,
        /// out: mmap offset of the CQ buffer.
        pub buf_mmap_offset: u64,
        /// out: size of the CQ buffer (and of its mapping) in bytes.
        pub buf_size: u64,
        /// out: mmap offset of the page holding the CQ doorbell record at byte 0.
        pub dbr_mmap_offset: u64,
    }
}

abi_struct! {
    /// `RMLX5_CMD_CREATE_QP`: an RC QP.
    pub struct CreateQp {
        /// in: header.
        pub hdr: CmdHdr,
        /// in: value returned in async events of the QP.
        pub user_handle: u64,
        /// in: the PD.
        pub pd_handle: u32,
        /// in: CQ for send completions.
        pub send_cq_handle: u32,
        /// in: CQ for receive completions.
        pub recv_cq_handle: u32,
        /// in: [`QPT_RC`].
        pub qp_type: u32,
        /// in: send WRs wanted.
        pub max_send_wr: u32,
        /// in: receive WRs wanted.
        pub max_recv_wr: u32,
        /// in: gather entries per send WR.
        pub max_send_sge: u32,
        /// in: scatter entries per receive WR.
        pub max_recv_sge: u32,
        /// in: inline bytes per send WR.
        pub max_inline_data: u32,
        /// in: 1 if every send WR is signaled, else 0.
        pub sq_sig_all: u32,
        /// out: handle naming the QP in later commands.
        pub qp_handle: u32,
        /// out: the QP number.
        pub qpn: u32,
        /// out: SQ size in WQEBBs, a power of two.
        pub sq_wqe_cnt: u32,
        /// out: log2 of the SQ stride (6: 64-byte WQEBBs).
        pub sq_wqe_shift: u32,
        /// out: RQ size in WQEs, a power of two.
        pub rq_wqe_cnt: u32,
        /// out: log2 of the RQ stride in bytes.
        pub rq_wqe_shift: u32,
        /// out: send WRs granted.
        pub max_send_wr_out: u32,
        /// out: receive WRs granted.
        pub max_recv_wr_out: u32,
        /// out: gather entries granted.
        pub max_send_sge_out: u32,
        /// out: scatter entries granted.
        pub max_recv_sge_out: u32,
        /// out: inline bytes granted.
        pub max_inline_data_out: u32,
        /// out: size of one BlueFlame register half (`bf_reg_size / 2`,
        /// rdma-core's `mlx5_bf.buf_size`): the largest WQE one BlueFlame
        /// copy carries. The first copy goes to `bf_offset`, the next to
        /// `bf_offset + bf_size`, and so on alternately.
        pub bf_size: u32,
        /// out: offset of the QP's BlueFlame register in the UAR page.
        pub bf_offset: u32,
        /// out: offset of the RQ inside the queue buffer.
        pub rq_buf_offset: u32,
        /// out: offset of the SQ inside the queue buffer.
        pub sq_buf_offset: u32,
        /// Must be zero.
        pub reserved: u32,
        /// out: mmap offset of the queue buffer (RQ and SQ).
        pub buf_mmap_offset: u64,
        /// out: size of the queue buffer in bytes.
        pub buf_size: u64,
        /// out: mmap offset of the page holding the QP doorbell record at byte 0.
        pub dbr_mmap_offset: u64,
        /// out: mmap offset of the UAR page to ring the QP's doorbells on.
        pub uar_mmap_offset: u64,
    }
}

abi_struct! {
    /// `RMLX5_CMD_MODIFY_QP` (`ibv_modify_qp`): attributes named in
    /// `attr_mask` are applied, all others must be zero.
    pub struct ModifyQp {
        /// in: header.
        pub hdr: CmdHdr,
        /// in: the QP.
        pub qp_handle: u32,
        /// in: which attributes are given (`QP_*` mask bits).
        pub attr_mask: u32,
        /// in: target state (`QPS_*`), with [`QP_STATE`].
        pub qp_state: u32,
        /// in: assumed current state, with [`QP_CUR_STATE`].
        pub cur_qp_state: u32,
        /// in: path MTU (`IBV_MTU_*`), with [`QP_PATH_MTU`].
        pub path_mtu: u32,
        /// in: remote QPN, with [`QP_DEST_QPN`].
        pub dest_qp_num: u32,
        /// in: receive PSN, with [`QP_RQ_PSN`].
        pub rq_psn: u32,
        /// in: send PSN, with [`QP_SQ_PSN`].
        pub sq_psn: u32,
        /// in: remote access flags, with [`QP_ACCESS_FLAGS`].
        pub qp_access_flags: u32,
        /// in: outstanding reads/atomics as requester, with [`QP_MAX_QP_RD_ATOMIC`].
        pub max_rd_atomic: u32,
        /// in: outstanding reads/atomics as responder, with [`QP_MAX_DEST_RD_ATOMIC`].
        pub max_dest_rd_atomic: u32,
        /// in: RNR NAK timer code, with [`QP_MIN_RNR_TIMER`].
        pub min_rnr_timer: u32,
        /// in: local ACK timeout code, with [`QP_TIMEOUT`].
        pub timeout: u32,
        /// in: transport retries, with [`QP_RETRY_CNT`].
        pub retry_cnt: u32,
        /// in: RNR retries (7 = forever), with [`QP_RNR_RETRY`].
        pub rnr_retry: u32,
        /// in: port, with [`QP_PORT`].
        pub port_num: u32,
        /// in: the peer port's LID (address vector), with [`QP_AV`].
        pub dlid: u32,
        /// in: the service level of the path (address vector, 0 to 15),
        /// with [`QP_AV`]; the responder's CQEs report it.
        pub sl: u32,
    }
}

abi_struct! {
    /// `RMLX5_CMD_QUERY_QP` (`ibv_query_qp`).
    pub struct QueryQp {
        /// in: header.
        pub hdr: CmdHdr,
        /// in: the QP.
        pub qp_handle: u32,
        /// Must be zero.
        pub reserved: u32,
        /// out: current state (`QPS_*`).
        pub qp_state: u32,
        /// out: path MTU.
        pub path_mtu: u32,
        /// out: remote QPN.
        pub dest_qp_num: u32,
        /// out: receive PSN.
        pub rq_psn: u32,
        /// out: send PSN.
        pub sq_psn: u32,
        /// out: remote access flags.
        pub qp_access_flags: u32,
        /// out: outstanding reads/atomics as requester.
        pub max_rd_atomic: u32,
        /// out: outstanding reads/atomics as responder.
        pub max_dest_rd_atomic: u32,
        /// out: RNR NAK timer code.
        pub min_rnr_timer: u32,
        /// out: local ACK timeout code.
        pub timeout: u32,
        /// out: transport retries.
        pub retry_cnt: u32,
        /// out: RNR retries.
        pub rnr_retry: u32,
        /// out: port.
        pub port_num: u32,
        /// out: the peer port's LID.
        pub dlid: u32,
        /// out: send WRs.
        pub max_send_wr: u32,
        /// out: receive WRs.
        pub max_recv_wr: u32,
        /// out: gather entries per send WR.
        pub max_send_sge: u32,
        /// out: scatter entries per receive WR.
        pub max_recv_sge: u32,
        /// out: inline bytes per send WR.
        pub max_inline_data: u32,
        /// out: the service level of the path.
        pub sl: u32,
    }
}

abi_struct! {
    /// `RMLX5_CMD_KICK`: the provider rang a doorbell of the software HCA
    /// (a device without [`DEVICE_UAR_DOORBELLS`]; one with it refuses
    /// `KICK`).
    pub struct Kick {
        /// in: header.
        pub hdr: CmdHdr,
        /// in: which doorbell (`KICK_*`).
        pub kind: u32,
        /// in: the QP (send, receive) or CQ (arm) handle.
        pub handle: u32,
        /// in (send): offset in the UAR page the doorbell or BlueFlame copy was
        /// written to.
        pub uar_offset: u32,
        /// Must be zero.
        pub reserved: u32,
    }
}

abi_struct! {
    /// `RMLX5_CMD_GET_ASYNC_FD`: the context's async-event file.
    pub struct GetAsyncFd {
        /// in: header.
        pub hdr: CmdHdr,
        /// out: the file descriptor (O_RDONLY, O_CLOEXEC).
        pub fd: i32,
        /// Must be zero.
        pub reserved: u32,
    }
}

abi_struct! {
    /// What `read()` returns from the async-event file, one per call.
    pub struct AsyncEvent {
        /// The `user_handle` of the CQ or QP the event is about.
        pub element: u64,
        /// `EVENT_*`.
        pub event_type: u32,
        /// Zero.
        pub reserved: u32,
    }
}

/// Bytes one `read()` of a completion channel returns: the CQ's
/// `user_handle` as a native-endian `u64`.
pub const COMP_EVENT_SIZE: usize = 8;

// Sizes are part of the ABI; the tests check them against the C header.
const _: () = assert!(core::mem::size_of::<CmdHdr>() == 8);
const _: () = assert!(core::mem::size_of::<QueryDevice>() == 128);
const _: () = assert!(core::mem::size_of::<QueryPort>() == 56);
const _: () = assert!(core::mem::size_of::<AllocPd>() == 16);
const _: () = assert!(core::mem::size_of::<Destroy>() == 24);
const _: () = assert!(core::mem::size_of::<RegMr>() == 56);
const _: () = assert!(core::mem::size_of::<CreateCompChannel>() == 16);
const _: () = assert!(core::mem::size_of::<CreateCq>() == 72);
const _: () = assert!(core::mem::size_of::<CreateQp>() == 152);
const _: () = assert!(core::mem::size_of::<ModifyQp>() == 80);
const _: () = assert!(core::mem::size_of::<QueryQp>() == 96);
const _: () = assert!(core::mem::size_of::<Kick>() == 24);
const _: () = assert!(core::mem::size_of::<GetAsyncFd>() == 16);
const _: () = assert!(core::mem::size_of::<AsyncEvent>() == 16);

/// `IBV_QPT_RC`.
pub const QPT_RC: u32 = 2;

/// `IBV_QPS_RESET`.
pub const QPS_RESET: u32 = 0;
/// `IBV_QPS_INIT`.
pub const QPS_INIT: u32 = 1;
/// `IBV_QPS_RTR`.
pub const QPS_RTR: u32 = 2;
/// `IBV_QPS_RTS`.
pub const QPS_RTS: u32 = 3;
/// `IBV_QPS_SQD`.
pub const QPS_SQD: u32 = 4;
/// `IBV_QPS_SQE`.
pub const QPS_SQE: u32 = 5;
/// `IBV_QPS_ERR`.
pub const QPS_ERR: u32 = 6;

/// `IBV_QP_STATE`.
pub const QP_STATE: u32 = 1 << 0;
/// `IBV_QP_CUR_STATE`.
pub const QP_CUR_STATE: u32 = 1 << 1;
/// `IBV_QP_ACCESS_FLAGS`.
pub const QP_ACCESS_FLAGS: u32 = 1 << 3;
/// `IBV_QP_PKEY_INDEX` (accepted; the only P_Key index is 0).
pub const QP_PKEY_INDEX: u32 = 1 << 4;
/// `IBV_QP_PORT`.
pub const QP_PORT: u32 = 1 << 5;
/// `IBV_QP_AV`.
pub const QP_AV: u32 = 1 << 7;
/// `IBV_QP_PATH_MTU`.
pub const QP_PATH_MTU: u32 = 1 << 8;
/// `IBV_QP_TIMEOUT`.
pub const QP_TIMEOUT: u32 = 1 << 9;
/// `IBV_QP_RETRY_CNT`.
pub const QP_RETRY_CNT: u32 = 1 << 10;
/// `IBV_QP_RNR_RETRY`.
pub const QP_RNR_RETRY: u32 = 1 << 11;
/// `IBV_QP_RQ_PSN`.
pub const QP_RQ_PSN: u32 = 1 << 12;
/// `IBV_QP_MAX_QP_RD_ATOMIC`.
pub const QP_MAX_QP_RD_ATOMIC: u32 = 1 << 13;
/// `IBV_QP_MIN_RNR_TIMER`.
pub const QP_MIN_RNR_TIMER: u32 = 1 << 15;
/// `IBV_QP_SQ_PSN`.
pub const QP_SQ_PSN: u32 = 1 << 16;
/// `IBV_QP_MAX_DEST_RD_ATOMIC`.
pub const QP_MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
/// `IBV_QP_DEST_QPN`.
pub const QP_DEST_QPN: u32 = 1 << 20;
/// Every attribute bit `MODIFY_QP` understands.
pub const QP_ATTR_MASK_ALL: u32 = QP_STATE
    | QP_CUR_STATE
    | QP_ACCESS_FLAGS
    | QP_PKEY_INDEX
    | QP_PORT
    | QP_AV
    | QP_PATH_MTU
    | QP_TIMEOUT
    | QP_RETRY_CNT
    | QP_RNR_RETRY
    | QP_RQ_PSN
    | QP_MAX_QP_RD_ATOMIC
    | QP_MIN_RNR_TIMER
    | QP_SQ_PSN
    | QP_MAX_DEST_RD_ATOMIC
    | QP_DEST_QPN;

/// `IBV_ACCESS_LOCAL_WRITE`.
pub const ACCESS_LOCAL_WRITE: u32 = 1 << 0;
/// `IBV_ACCESS_REMOTE_WRITE`.
pub const ACCESS_REMOTE_WRITE: u32 = 1 << 1;
/// `IBV_ACCESS_REMOTE_READ`.
pub const ACCESS_REMOTE_READ: u32 = 1 << 2;
/// `IBV_ACCESS_REMOTE_ATOMIC`.
pub const ACCESS_REMOTE_ATOMIC: u32 = 1 << 3;
/// Every access flag `REG_MR` and `MODIFY_QP` understand.
pub const ACCESS_ALL: u32 =
    ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;

/// `IBV_PORT_ACTIVE`.
pub const PORT_ACTIVE: u32 = 4;
/// `IBV_LINK_LAYER_INFINIBAND`.
pub const LINK_LAYER_INFINIBAND: u32 = 1;
/// `IBV_ATOMIC_HCA`: atomics are atomic with respect to this HCA's other
/// operations.
pub const ATOMIC_HCA: u32 = 1;
/// `IBV_MTU_4096`.
pub const MTU_4096: u32 = 5;

/// `QUERY_DEVICE` `device_flags`: the device sees the process's stores to
/// its UAR page itself (a ConnectX PCI function, whose UAR page is a page
/// of its BAR): doorbells and BlueFlame copies need no `KICK`, and the
/// kernel refuses `KICK` (`EOPNOTSUPP`). Without it (the software HCA)
/// every doorbell must be followed by a `KICK`.
pub const DEVICE_UAR_DOORBELLS: u32 = 1 << 0;

/// `KICK` kind: a send doorbell (8 bytes of the control segment) was
/// written to the UAR.
pub const KICK_SEND: u32 = 1;
/// `KICK` kind: the whole WQE was copied to a BlueFlame register.
pub const KICK_SEND_BLUEFLAME: u32 = 2;
/// `KICK` kind: receives were posted (only needed for a QP in error, whose
/// receives are flushed).
pub const KICK_RECV: u32 = 3;
/// `KICK` kind: the CQ was armed (doorbell record and UAR CQ doorbell).
pub const KICK_CQ_ARM: u32 = 4;

/// Byte offset in the context's UAR page of the software HCA's watch word
/// (a native-endian `u32` no ConnectX register occupies): non-zero while
/// the module's doorbell watcher runs and reads the doorbell records of
/// every QP that has been kicked once. While it is set, a provider may
/// leave out the send `KICK` of such a QP: it stores the doorbell record,
/// fences fully, loads this word, and if it is set, sets the QP's bit in
/// [`UAR_DOORBELL_BITS_OFFSET`] with an atomic OR and loads the word
/// again; only if it is still set may the kick be left out. The watcher
/// clears the word, fences and takes the bits once more before it stops.
pub const UAR_WATCH_OFFSET: u32 = 0x100;
/// Byte offset in the UAR page of the software HCA's doorbell bits: 4096
/// bits (64 native-endian `u64` words, bit `n % 64` of word `n / 64`), bit
/// `qpn % 4096` for a QP. A provider that leaves out a send `KICK` must
/// have set its QP's bit first (see [`UAR_WATCH_OFFSET`]): the watcher
/// reads the records of the QPs whose bits are set, and no others.
pub const UAR_DOORBELL_BITS_OFFSET: u32 = 0x200;

/// `IBV_EVENT_CQ_ERR`.
pub const EVENT_CQ_ERR: u32 = 0;
/// `IBV_EVENT_QP_FATAL`.
pub const EVENT_QP_FATAL: u32 = 1;
/// `IBV_EVENT_QP_REQ_ERR`.
pub const EVENT_QP_REQ_ERR: u32 = 2;
/// `IBV_EVENT_QP_ACCESS_ERR`.
pub const EVENT_QP_ACCESS_ERR: u32 = 3;
/// `IBV_EVENT_COMM_EST`.
pub const EVENT_COMM_EST: u32 = 4;
/// `IBV_EVENT_SQ_DRAINED`.
pub const EVENT_SQ_DRAINED: u32 = 5;
/// `IBV_EVENT_DEVICE_FATAL`: the device failed; its element is the
/// port number (0 for the device as a whole).
pub const EVENT_DEVICE_FATAL: u32 = 8;
/// `IBV_EVENT_QP_LAST_WQE_REACHED`.
pub const EVENT_QP_LAST_WQE_REACHED: u32 = 16;
