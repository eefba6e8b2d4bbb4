// SPDX-License-Identifier: GPL-2.0

//! Validation of command arguments, before the kernel acts on them.
//!
//! Everything a process hands in is hostile until checked. The rules that
//! need no kernel state live here, next to the structs, so they are the same
//! in rmlx5.ko and in host tests: the argument's size, flags, reserved and
//! "out" fields (all must be zero), and every "in" field's range against
//! the device's limits. What needs kernel state (does this handle exist in
//! the caller's context, is this CQ still used) is checked by the kernel
//! afterwards. A refused argument changes nothing.

use super::uapi::*;

/// Largest argument size the kernel accepts (`CmdHdr::size`).
pub const MAX_CMD_SIZE: u32 = 4096;

/// `EINVAL`.
const EINVAL: i32 = 22;
/// `E2BIG`.
const E2BIG: i32 = 7;

/// Why an argument was refused. Each reason maps to one errno.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Invalid {
    /// `CmdHdr::size` is below the first version of the struct (`EINVAL`).
    TooSmall,
    /// `CmdHdr::size` is above [`MAX_CMD_SIZE`] (`E2BIG`).
    TooLarge,
    /// The caller's struct is larger than this kernel's and the bytes it
    /// does not know are not zero (`E2BIG`, as `copy_struct_from_user`).
    UnknownTail,
    /// A flag, reserved field or "out" field that must be zero is not
    /// (`EINVAL`); names the field.
    NotZero(&'static str),
    /// An "in" field is out of range (`EINVAL`); names the field.
    Range(&'static str),
}

impl Invalid {
    /// The errno for this reason, positive.
    pub fn errno(self) -> i32 {
        match self {
            Invalid::TooLarge | Invalid::UnknownTail => E2BIG,
            _ => EINVAL,
        }
    }
}

/// Device limits the "in" fields are checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most WRs per queue.
    pub max_qp_wr: u32,
    /// Most scatter/gather entries per WR.
    pub max_sge: u32,
    /// Most CQ entries (a power of two).
    pub max_cqe: u32,
    /// Most inline bytes per send WR.
    pub max_inline_data: u32,
    /// Completion vectors.
    pub num_comp_vectors: u32,
    /// Most outstanding reads/atomics as responder.
    pub max_qp_rd_atom: u32,
    /// Most outstanding reads/atomics as requester.
    pub max_qp_init_rd_atom: u32,
    /// Largest MR in bytes.
    pub max_mr_size: u64,
}

/// How many bytes of the caller's argument the kernel copies in, given the
/// size the caller claims and the size of this kernel's struct. Bytes past
/// the returned count (up to `user_size`) must then be checked to be zero.
///
/// # Errors
///
/// [`Invalid::TooSmall`] or [`Invalid::TooLarge`].
pub fn arg_size(user_size: u32, known: usize) -> Result<usize, Invalid> {
    if user_size > MAX_CMD_SIZE {
        return Err(Invalid::TooLarge);
    }
    let user = usize::try_from(user_size).map_err(|_| Invalid::TooLarge)?;
    if user < known {
        return Err(Invalid::TooSmall);
    }
    Ok(known)
}

fn zero<T: Default + PartialEq>(name: &'static str, v: T) -> Result<(), Invalid> {
    if v == T::default() {
        Ok(())
    } else {
        Err(Invalid::NotZero(name))
    }
}

fn range(name: &'static str, ok: bool) -> Result<(), Invalid> {
    if ok {
        Ok(())
    } else {
        Err(Invalid::Range(name))
    }
}

/// The header rules every command shares: no flags are defined.
fn check_hdr(hdr: &CmdHdr) -> Result<(), Invalid> {
    zero("flags", hdr.flags)
}

/// The CQ ring size for `cqe` requested entries: the next power of two,
/// within `max_cqe`.
///
/// # Errors
///
/// [`Invalid::Range`] if `cqe` is 0 or the rounded size exceeds `max_cqe`.
pub fn cq_entries(cqe: u32, max_cqe: u32) -> Result<u32, Invalid> {
    match cqe.checked_next_power_of_two() {
        Some(n) if cqe > 0 && n <= max_cqe => Ok(n),
        _ => Err(Invalid::Range("cqe")),
    }
}

impl QueryDevice {
    /// Checks a `QUERY_DEVICE` argument: every output field must be zero.
    pub fn check(&self) -> Result<(), Invalid> {
        check_hdr(&self.hdr)?;
        let clean = QueryDevice {
            hdr: self.hdr,
            ..QueryDevice::default()
        };
        if *self != clean {
            return Err(Invalid::NotZero("output fields"));
        }
        Ok(())
    }
}

impl QueryPort {
    /// Checks a `QUERY_PORT` argument: port 1, outputs zero.
    pub fn check(&self) -> Result<(), Invalid> {
        check_hdr(&self.hdr)?;
        range("port_num", self.port_num == 1)?;
        let clean = QueryPort {
            hdr: self.hdr,
            port_num: self.port_num,
            ..QueryPort::default()
        };
        if *self != clean {
            return Err(Invalid::NotZero("output fields"));
        }
        Ok(())
    }
}

impl AllocPd {
    /// Checks an `ALLOC_PD` argument.
    pub fn check(&self) -> Result<(), Invalid> {
        check_hdr(&self.hdr)?;
        zero("pd_handle", self.pd_handle)?;
        zero("pdn", self.pdn)
    }
}

impl Destroy {
    /// Checks the argument of a destroy command.
    pub fn check(&self) -> Result<(), Invalid> {
        check_hdr(&self.hdr)?;
        zero("reserved", self.reserved)?;
        zero("comp_events_reported", self.comp_events_reported)?;
        zero("async_events_reported", self.async_events_reported)
    }
}

impl RegMr {
    /// Checks a `REG_MR` argument: known access flags, remote write or
    /// atomic only with local write (IB spec o10-37.2.2, as
    /// `ib_check_mr_access`), a non-empty range that does not wrap, in
    /// the process's address and in the IOVA space, within `max_mr_size`.
    pub fn check(&self, limits: &Limits) -> Result<(), Invalid> {
        check_hdr(&self.hdr)?;
        zero("mr_handle", self.mr_handle)?;
        zero("lkey", self.lkey)?;
        zero("rkey", self.rkey)?;
        zero("reserved", self.reserved)?;
        if self.access & !ACCESS_ALL != 0 {
            return Err(Invalid::NotZero("access"));
        }
        let needs_local_write = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC;
        range(
            "access",
            self.access & needs_local_write == 0 || self.access & ACCESS_LOCAL_WRITE != 0,
        )?;
        range(
            "length",
            self.length > 0 && self.length <= limits.max_mr_size,
        )?;
        range("addr", self.addr.checked_add(self.length).is_some())?;
        range("iova", self.iova.checked_add(self.length).is_some())
    }
}

impl CreateCompChannel {
    /// Checks a `CREATE_COMP_CHANNEL` argument.
    pub fn check(&self) -> Result<(), Invalid> {
        check_hdr(&self.hdr)?;
        zero("fd", self.fd)?;
        zero("reserved", self.reserved)
    }
}

impl CreateCq {
    /// Checks a `CREATE_CQ` argument and returns the ring size to create.
    pub fn check(&self, limits: &Limits) -> Result<u32, Invalid> {
        check_hdr(&self.hdr)?;
        zero("cq_handle", self.cq_handle)?;
        zero("cqn", self.cqn)?;
        zero("cqe_cnt", self.cqe_cnt)?;
        zero("cqe_size", self.cqe_size)?;
        zero("reserved", self.reserved)?;
        zero("buf_mmap_offset", self.buf_mmap_offset)?;
        zero("buf_size", self.buf_size)?;
        zero("dbr_mmap_offset", self.dbr_mmap_offset)?;
        range("channel_fd", self.channel_fd >= -1)?;
        range("comp_vector", self.comp_vector < limits.num_comp_vectors)?;
        cq_entries(self.cqe, limits.max_cqe)
    }
}

impl CreateQp {
    /// Checks a `CREATE_QP` argument: an RC QP whose capabilities are
    /// within the device's limits.
    pub fn check(&self, limits: &Limits) -> Result<(), Invalid> {
        check_hdr(&self.hdr)?;
        let outs = CreateQp {
            hdr: self.hdr,
            user_handle: self.user_handle,
            pd_handle: self.pd_handle,
            send_cq_handle: self.send_cq_handle,
            recv_cq_handle: self.recv_cq_handle,
            qp_type: self.qp_type,
            max_send_wr: self.max_send_wr,
            max_recv_wr: self.max_recv_wr,
            max_send_sge: self.max_send_sge,
            max_recv_sge: self.max_recv_sge,
            max_inline_data: self.max_inline_data,
            sq_sig_all: self.sq_sig_all,
            ..CreateQp::default()
        };
        if *self != outs {
            return Err(Invalid::NotZero("output fields"));
        }
        range("qp_type", self.qp_type == QPT_RC)?;
        range("max_send_wr", self.max_send_wr <= limits.max_qp_wr)?;
        range("max_recv_wr", self.max_recv_wr <= limits.max_qp_wr)?;
        range("max_send_sge", self.max_send_sge <= limits.max_sge)?;
        range("max_recv_sge", self.max_recv_sge <= limits.max_sge)?;
        range(
            "max_inline_data",
            self.max_inline_data <= limits.max_inline_data,
        )?;
        range("sq_sig_all", self.sq_sig_all <= 1)
    }
}

impl ModifyQp {
    /// Checks a `MODIFY_QP` argument: known mask bits, attributes outside
    /// the mask zero, and each given attribute in its range. Whether the
    /// transition itself is allowed is the QP state machine's call.
    pub fn check(&self, limits: &Limits) -> Result<(), Invalid> {
        check_hdr(&self.hdr)?;
        let mask = self.attr_mask;
        if mask & !QP_ATTR_MASK_ALL != 0 {
            return Err(Invalid::NotZero("attr_mask"));
        }
        let attrs: [(u32, &'static str, u32, bool); 17] = [
            (
                QP_STATE,
                "qp_state",
                self.qp_state,
                self.qp_state <= QPS_ERR,
            ),
            (
                QP_CUR_STATE,
                "cur_qp_state",
                self.cur_qp_state,
                self.cur_qp_state <= QPS_ERR,
            ),
            (
                QP_PATH_MTU,
                "path_mtu",
                self.path_mtu,
                (1..=MTU_4096).contains(&self.path_mtu),
            ),
            (
                QP_DEST_QPN,
                "dest_qp_num",
                self.dest_qp_num,
                self.dest_qp_num <= 0xff_ffff,
            ),
            (QP_RQ_PSN, "rq_psn", self.rq_psn, self.rq_psn <= 0xff_ffff),
            (QP_SQ_PSN, "sq_psn", self.sq_psn, self.sq_psn <= 0xff_ffff),
            (
                QP_ACCESS_FLAGS,
                "qp_access_flags",
                self.qp_access_flags,
                self.qp_access_flags & !ACCESS_ALL == 0,
            ),
            (
                QP_MAX_QP_RD_ATOMIC,
                "max_rd_atomic",
                self.max_rd_atomic,
                self.max_rd_atomic <= limits.max_qp_init_rd_atom,
            ),
            (
                QP_MAX_DEST_RD_ATOMIC,
                "max_dest_rd_atomic",
                self.max_dest_rd_atomic,
                self.max_dest_rd_atomic <= limits.max_qp_rd_atom,
            ),
            (
                QP_MIN_RNR_TIMER,
                "min_rnr_timer",
                self.min_rnr_timer,
                self.min_rnr_timer <= 31,
            ),
            (QP_TIMEOUT, "timeout", self.timeout, self.timeout <= 31),
            (
                QP_RETRY_CNT,
                "retry_cnt",
                self.retry_cnt,
                self.retry_cnt <= 7,
            ),
            (
                QP_RNR_RETRY,
                "rnr_retry",
                self.rnr_retry,
                self.rnr_retry <= 7,
            ),
            (QP_PORT, "port_num", self.port_num, self.port_num == 1),
            (QP_AV, "dlid", self.dlid, (1..=0xffff).contains(&self.dlid)),
            (QP_AV, "sl", self.sl, self.sl <= 15),
            // The only P_Key index is 0 and there is no field for it.
            (QP_PKEY_INDEX, "pkey_index", 0, true),
        ];
        for (bit, name, value, in_range) in attrs {
            if mask & bit == 0 {
                zero(name, value)?;
            } else {
                range(name, in_range)?;
            }
        }
        Ok(())
    }
}

impl QueryQp {
    /// Checks a `QUERY_QP` argument: only the handle is given.
    pub fn check(&self) -> Result<(), Invalid> {
        check_hdr(&self.hdr)?;
        let clean = QueryQp {
            hdr: self.hdr,
            qp_handle: self.qp_handle,
            ..QueryQp::default()
        };
        if *self != clean {
            return Err(Invalid::NotZero("output fields"));
        }
        Ok(())
    }
}

impl Kick {
    /// Checks a `KICK` argument: a known kind; only send kicks carry a
    /// UAR offset (whether it is this QP's BlueFlame register is the
    /// kernel's check).
    pub fn check(&self) -> Result<(), Invalid> {
        check_hdr(&self.hdr)?;
        zero("reserved", self.reserved)?;
        match self.kind {
            KICK_SEND | KICK_SEND_BLUEFLAME => Ok(()),
            KICK_RECV | KICK_CQ_ARM => zero("uar_offset", self.uar_offset),
            _ => Err(Invalid::Range("kind")),
        }
    }
}

impl GetAsyncFd {
    /// Checks a `GET_ASYNC_FD` argument.
    pub fn check(&self) -> Result<(), Invalid> {
        check_hdr(&self.hdr)?;
        zero("fd", self.fd)?;
        zero("reserved", self.reserved)
    }
}
