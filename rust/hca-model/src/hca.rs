// SPDX-License-Identifier: GPL-2.0

//! One HCA instance: its object tables and the control operations the
//! driver performs through firmware commands on a real ConnectX (create,
//! modify, query and destroy PDs, MRs, EQs, CQs and QPs).
//!
//! Control operations never touch DMA memory and never write a CQE: a QP
//! moved to ERR is only scheduled for flushing, which the engine performs
//! in [`super::fabric::Fabric::run`]. Doorbells are in
//! [`super::doorbell`]; executing work is the fabric's job, because a send
//! on one instance reaches a QP on another.

use super::caps::Caps;
use super::cq::{Cq, CqAttr, CqInfo};
use super::dev::{qp_slot, Dev};
use super::eq::{Eq, EqAttr, EqInfo};
use super::error::Error;
use super::mr::{self, Mr, MrAttr};
use super::pd::Pd;
use super::port::Port;
use super::qp::{Qp, QpAttr, QpId, QpInfo, QpService, QpState, QPN_BASE};
use super::qp_modify::{self, QpModify};
use super::sched::Sched;
use super::stats::Stats;
use super::table::{find_free, get, get_mut, Storage};

/// Largest receive WQE stride the model reads (64 scatter entries).
pub(super) const MAX_RQ_STRIDE: u32 = 1024;

/// Allocation cursors, one per table, so numbers are not reused at once.
#[derive(Clone, Copy, Debug, Default)]
struct Cursors {
    pd: u32,
    mr: u32,
    cq: u32,
    eq: u32,
    qp: u32,
}

/// One software HCA instance.
///
/// # Invariants
///
/// Every `users` count equals the number of live objects naming that
/// object: a PD is named by its MRs and QPs, a CQ by its QPs (once per
/// side), an EQ by its CQs. An object is destroyed only when its count is
/// zero, so no live object names a dead one. `gsi` is the slot of the one
/// live QP whose service is [`QpService::Gsi`], if there is one.
#[derive(Debug)]
pub struct Hca<S> {
    pub(super) id: u16,
    caps: Caps,
    storage: S,
    async_eqn: Option<u8>,
    cursors: Cursors,
    sched: Sched,
    stats: Stats,
    /// The port's identity (its setters are in [`super::port`]).
    pub(super) port: Port,
    gsi: Option<u32>,
}

fn inc(users: &mut u32) {
    *users = users.wrapping_add(1);
}

fn dec(users: &mut u32) {
    *users = users.saturating_sub(1);
}

impl<S: Storage> Hca<S> {
    /// A new instance with empty tables in `storage`. `id` is replaced by
    /// the instance's index when it joins a [`super::fabric::Fabric`].
    pub fn new(id: u16, caps: Caps, storage: S) -> Self {
        Hca {
            id,
            caps,
            storage,
            async_eqn: None,
            cursors: Cursors::default(),
            sched: Sched::EMPTY,
            stats: Stats::default(),
            port: Port::DEFAULT,
            gsi: None,
        }
    }

    /// The instance's fabric index (the "LID" other QPs address it by).
    pub fn id(&self) -> u16 {
        self.id
    }

    /// The device limits.
    pub fn caps(&self) -> &Caps {
        &self.caps
    }

    /// The instance's counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The object tables, for the firmware layer's scans (page overlap
    /// checks, UAR users, table sizes).
    pub(super) fn tables(&mut self) -> super::table::Tables<'_> {
        self.storage.tables()
    }

    /// Writes an EQE of type `ty` with `data` to EQ `eqn` and raises its
    /// interrupt if it is armed (the firmware layer's command-completion
    /// and page-request events). Returns whether the EQE was written;
    /// a dropped one is counted in [`Stats::events_dropped`].
    pub(super) fn post_event<P: super::mem::Platform>(
        &mut self,
        p: &mut P,
        eqn: u8,
        ty: super::prm::opcode::EventType,
        data: super::prm::eqe::EqeData,
    ) -> bool {
        self.post_event_sub(p, eqn, ty, 0, data)
    }

    /// As [`Hca::post_event`], with the EQE's `sub_type` (the firmware
    /// layer's port-change events).
    pub(super) fn post_event_sub<P: super::mem::Platform>(
        &mut self,
        p: &mut P,
        eqn: u8,
        ty: super::prm::opcode::EventType,
        sub_type: u8,
        data: super::prm::eqe::EqeData,
    ) -> bool {
        let id = self.id;
        let t = self.storage.tables();
        let posted =
            get_mut(t.eqs, u32::from(eqn)).is_some_and(|eq| eq.post_sub(p, id, ty, sub_type, data));
        if posted {
            self.stats.async_events = self.stats.async_events.wrapping_add(1);
        } else {
            self.stats.events_dropped = self.stats.events_dropped.wrapping_add(1);
        }
        posted
    }

    /// Whether an EQ receives the asynchronous events.
    pub(super) fn has_async_eq(&self) -> bool {
        self.async_eqn.is_some()
    }

    /// Splits the instance into the borrows the engine works with.
    pub(super) fn dev(&mut self) -> Dev<'_> {
        Dev {
            id: self.id,
            caps: &self.caps,
            t: self.storage.tables(),
            sched: &mut self.sched,
            stats: &mut self.stats,
            async_eqn: self.async_eqn,
            port: &self.port,
            gsi: self.gsi,
        }
    }

    /// Allocates a protection domain and returns its number.
    ///
    /// # Errors
    ///
    /// [`Error::NoSpace`] if the PD table is full.
    pub fn alloc_pd(&mut self) -> Result<u32, Error> {
        let t = self.storage.tables();
        let pdn = find_free(t.pds, &mut self.cursors.pd, usize::MAX).ok_or(Error::NoSpace)?;
        let slot = t.pds.get_mut(pdn as usize).ok_or(Error::NoSpace)?;
        slot.obj = Some(Pd { users: 0 });
        Ok(pdn)
    }

    /// Frees PD `pdn`.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is no such PD; [`Error::Busy`] while MRs
    /// or QPs use it.
    pub fn dealloc_pd(&mut self, pdn: u32) -> Result<(), Error> {
        let t = self.storage.tables();
        let slot = t.pds.get_mut(pdn as usize).ok_or(Error::NotFound)?;
        match &slot.obj {
            None => Err(Error::NotFound),
            Some(pd) if pd.users != 0 => Err(Error::Busy),
            Some(_) => {
                slot.obj = None;
                Ok(())
            }
        }
    }

    /// Registers a memory region and returns its key (lkey = rkey).
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if the PD does not exist; [`Error::Invalid`] if
    /// remote write or atomic access lacks local write, or a range wraps
    /// around; [`Error::NoSpace`] if the MR table is full.
    pub fn create_mr(&mut self, attr: &MrAttr) -> Result<u32, Error> {
        if !mr::attr_valid(attr) {
            return Err(Error::Invalid);
        }
        let t = self.storage.tables();
        if get(t.pds, attr.pdn).is_none() {
            return Err(Error::NotFound);
        }
        let index = find_free(t.mrs, &mut self.cursors.mr, 1 << 24).ok_or(Error::NoSpace)?;
        let slot = t.mrs.get_mut(index as usize).ok_or(Error::NoSpace)?;
        let variant = mr::next_variant(slot.variant);
        let key = mr::make_key(index, variant).ok_or(Error::NoSpace)?;
        slot.variant = variant;
        slot.obj = Some(Mr {
            attr: *attr,
            key,
            pages: None,
        });
        if let Some(pd) = get_mut(t.pds, attr.pdn) {
            inc(&mut pd.users);
        }
        Ok(key)
    }

    /// The MR in the table slot `key` names, whatever its current key (a
    /// UMR may have changed its last byte).
    pub fn query_mr(&mut self, key: u32) -> Option<Mr> {
        let t = self.storage.tables();
        t.mrs.get(mr::key_index(key) as usize).and_then(|s| s.obj)
    }

    /// Creates a fast-registration MR in PD `pdn` (mlx5: an mkey created
    /// free with UMR enabled, room for `max_pages` translation entries):
    /// no key reaches it until a UMR WQE of a QP in the same PD registers
    /// it, which also chooses its final key byte. Returns its key.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for no pages or more than
    /// [`Caps::max_fast_reg_pages`], [`Error::NotFound`] for an unknown PD,
    /// [`Error::NoSpace`] when the MR table is full.
    pub fn create_fast_mr(&mut self, pdn: u32, max_pages: u32) -> Result<u32, Error> {
        if max_pages == 0 || max_pages > self.caps.max_fast_reg_pages {
            return Err(Error::Invalid);
        }
        let attr = MrAttr {
            pdn,
            iova: 0,
            length: 0,
            dma_addr: 0,
            access: mr::Access::NONE,
        };
        let key = self.create_mr(&attr)?;
        let t = self.storage.tables();
        if let Some(m) = t
            .mrs
            .get_mut(mr::key_index(key) as usize)
            .and_then(|s| s.obj.as_mut())
        {
            m.pages = Some(mr::PageList {
                max_pages,
                valid: false,
                mtt: 0,
                log_page: 12,
                umr: true,
                indirect: false,
            });
        }
        Ok(key)
    }

    /// As [`Hca::create_fast_mr`], the key ending in the byte `variant`
    /// the caller chose (CREATE_MKEY's `mkey_7_0` of a free mkey with
    /// `umr_en`, as mlx5_ib's `alloc_mr` creates it).
    ///
    /// # Errors
    ///
    /// As [`Hca::create_fast_mr`].
    pub(super) fn create_fast_mr_with_variant(
        &mut self,
        pdn: u32,
        max_pages: u32,
        variant: u8,
    ) -> Result<u32, Error> {
        if max_pages == 0 || max_pages > self.caps.max_fast_reg_pages {
            return Err(Error::Invalid);
        }
        let attr = MrAttr {
            pdn,
            iova: 0,
            length: 0,
            dma_addr: 0,
            access: mr::Access::NONE,
        };
        let pages = mr::PageList {
            max_pages,
            valid: false,
            mtt: 0,
            log_page: 12,
            umr: true,
            indirect: false,
        };
        self.create_mr_with_variant(&attr, variant, Some(pages))
    }

    /// Registers a memory region whose key ends in the byte `variant`
    /// chosen by the caller, as CREATE_MKEY's `mkey_7_0` is, and returns
    /// the key (`index << 8 | variant`). Slots whose key would be 0 or
    /// `MLX5_INVALID_LKEY` (0x100) are skipped. With `pages`, the MR
    /// translates through that table instead of linearly from
    /// `attr.dma_addr` (the firmware's page-list MR).
    ///
    /// # Errors
    ///
    /// As [`Hca::create_mr`].
    pub(super) fn create_mr_with_variant(
        &mut self,
        attr: &MrAttr,
        variant: u8,
        pages: Option<mr::PageList>,
    ) -> Result<u32, Error> {
        if !mr::attr_valid(attr) {
            return Err(Error::Invalid);
        }
        let t = self.storage.tables();
        if get(t.pds, attr.pdn).is_none() {
            return Err(Error::NotFound);
        }
        // At most two slots (0 and 1) give a reserved key, so three tries
        // find a usable one if any is free.
        for _ in 0..3 {
            let index = find_free(t.mrs, &mut self.cursors.mr, 1 << 24).ok_or(Error::NoSpace)?;
            let key = mr::make_key(index, variant).ok_or(Error::NoSpace)?;
            if key == 0 || key == 0x100 {
                continue;
            }
            let slot = t.mrs.get_mut(index as usize).ok_or(Error::NoSpace)?;
            slot.variant = variant;
            slot.obj = Some(Mr {
                attr: *attr,
                key,
                pages,
            });
            if let Some(pd) = get_mut(t.pds, attr.pdn) {
                inc(&mut pd.users);
            }
            return Ok(key);
        }
        Err(Error::NoSpace)
    }

    /// Deregisters the MR with key `key`. Work already executed keeps its
    /// effect; WQEs executed later that name the key fail their key check.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if no MR has this key.
    pub fn destroy_mr(&mut self, key: u32) -> Result<(), Error> {
        let t = self.storage.tables();
        let slot = t
            .mrs
            .get_mut(mr::key_index(key) as usize)
            .ok_or(Error::NotFound)?;
        let pdn = match &slot.obj {
            Some(m) if m.key == key => m.attr.pdn,
            _ => return Err(Error::NotFound),
        };
        slot.obj = None;
        if let Some(pd) = get_mut(t.pds, pdn) {
            dec(&mut pd.users);
        }
        Ok(())
    }

    /// Creates an event queue and returns its number. The embedder must
    /// have set every EQE's owner byte to 1 first.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for a size beyond the device limit, or a second
    /// async EQ; [`Error::NoSpace`] if no EQ number is free.
    pub fn create_eq(&mut self, attr: &EqAttr) -> Result<u8, Error> {
        if attr.log_size > self.caps.max_log_eq_size
            || (attr.async_events && self.async_eqn.is_some())
        {
            return Err(Error::Invalid);
        }
        let t = self.storage.tables();
        let index = find_free(t.eqs, &mut self.cursors.eq, 256).ok_or(Error::NoSpace)?;
        let eqn = u8::try_from(index).map_err(|_| Error::NoSpace)?;
        let slot = t.eqs.get_mut(index as usize).ok_or(Error::NoSpace)?;
        slot.obj = Some(Eq::new(eqn, *attr));
        if attr.async_events {
            self.async_eqn = Some(eqn);
        }
        Ok(eqn)
    }

    /// Destroys EQ `eqn`.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is no such EQ; [`Error::Busy`] while CQs
    /// deliver to it.
    pub fn destroy_eq(&mut self, eqn: u8) -> Result<(), Error> {
        let t = self.storage.tables();
        let slot = t.eqs.get_mut(usize::from(eqn)).ok_or(Error::NotFound)?;
        match &slot.obj {
            None => return Err(Error::NotFound),
            Some(eq) if eq.users != 0 => return Err(Error::Busy),
            Some(_) => slot.obj = None,
        }
        if self.async_eqn == Some(eqn) {
            self.async_eqn = None;
        }
        Ok(())
    }

    /// The state of EQ `eqn`.
    pub fn query_eq(&mut self, eqn: u8) -> Option<EqInfo> {
        get(self.storage.tables().eqs, u32::from(eqn)).map(Eq::info)
    }

    /// Creates a completion queue and returns its number. The embedder must
    /// have set every CQE's `op_own` to 0xf0 and zeroed the doorbell record
    /// first.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for a size beyond the device limit;
    /// [`Error::NotFound`] if the EQ does not exist; [`Error::NoSpace`] if
    /// the CQ table is full.
    pub fn create_cq(&mut self, attr: &CqAttr) -> Result<u32, Error> {
        if attr.log_size > self.caps.max_log_cq_size {
            return Err(Error::Invalid);
        }
        let t = self.storage.tables();
        if get(t.eqs, u32::from(attr.eqn)).is_none() {
            return Err(Error::NotFound);
        }
        let cqn = find_free(t.cqs, &mut self.cursors.cq, 1 << 24).ok_or(Error::NoSpace)?;
        let slot = t.cqs.get_mut(cqn as usize).ok_or(Error::NoSpace)?;
        slot.obj = Some(Cq::new(cqn, *attr));
        if let Some(eq) = get_mut(t.eqs, u32::from(attr.eqn)) {
            inc(&mut eq.users);
        }
        Ok(cqn)
    }

    /// Destroys CQ `cqn`.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is no such CQ; [`Error::Busy`] while QPs
    /// complete to it.
    pub fn destroy_cq(&mut self, cqn: u32) -> Result<(), Error> {
        let t = self.storage.tables();
        let slot = t.cqs.get_mut(cqn as usize).ok_or(Error::NotFound)?;
        let eqn = match &slot.obj {
            None => return Err(Error::NotFound),
            Some(cq) if cq.users != 0 => return Err(Error::Busy),
            Some(cq) => cq.attr.eqn,
        };
        slot.obj = None;
        if let Some(eq) = get_mut(t.eqs, u32::from(eqn)) {
            dec(&mut eq.users);
        }
        Ok(())
    }

    /// The state of CQ `cqn`.
    pub fn query_cq(&mut self, cqn: u32) -> Option<CqInfo> {
        get(self.storage.tables().cqs, cqn).map(Cq::info)
    }

    /// Creates a QP (RC, UD or the GSI QP, after `attr.service`) in RESET
    /// and returns its table QPN; the embedder reports the GSI QP's as 1.
    /// The embedder must have zeroed the doorbell record first.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for queue sizes or limits beyond the device's, or
    /// a BlueFlame register index above 3; [`Error::NotFound`] if the PD or
    /// a CQ does not exist; [`Error::Busy`] for a second GSI QP (the port
    /// has one QP1, `EBUSY`); [`Error::NoSpace`] if the QP table is full.
    pub fn create_qp(&mut self, attr: &QpAttr) -> Result<u32, Error> {
        let c = &self.caps;
        let pow2_upto = |n: u32, log_max: u8| {
            n == 0 || (n.is_power_of_two() && n.trailing_zeros() <= u32::from(log_max))
        };
        let stride_max = c
            .max_recv_sge
            .saturating_mul(16)
            .checked_next_power_of_two()
            .map_or(MAX_RQ_STRIDE, |s| s.min(MAX_RQ_STRIDE));
        let ok = pow2_upto(attr.sq_wqebbs, c.max_log_sq_wqebbs)
            && pow2_upto(attr.rq_wqes, c.max_log_rq_wqes)
            && (attr.rq_wqes == 0
                || (attr.rq_stride.is_power_of_two()
                    && (16..=stride_max).contains(&attr.rq_stride)))
            && attr.max_send_sge <= c.max_send_sge
            && attr.max_inline_data <= c.max_inline_data
            && usize::from(attr.bfreg) < super::prm::doorbell::BFREGS_PER_UAR;
        if !ok {
            return Err(Error::Invalid);
        }
        let t = self.storage.tables();
        if get(t.pds, attr.pdn).is_none()
            || get(t.cqs, attr.send_cqn).is_none()
            || get(t.cqs, attr.recv_cqn).is_none()
        {
            return Err(Error::NotFound);
        }
        let gsi = attr.service == QpService::Gsi;
        if gsi && self.gsi.is_some() {
            return Err(Error::Busy);
        }
        let index = find_free(
            t.qps,
            &mut self.cursors.qp,
            (0x100_0000 - QPN_BASE) as usize,
        )
        .ok_or(Error::NoSpace)?;
        let slot = t.qps.get_mut(index as usize).ok_or(Error::NoSpace)?;
        // A new QP in a reused slot is a different QP to an engine step
        // that still names the old one (`QpId`).
        slot.variant = slot.variant.wrapping_add(1);
        slot.obj = Some(Qp::new(QPN_BASE + index, *attr));
        if let Some(pd) = get_mut(t.pds, attr.pdn) {
            inc(&mut pd.users);
        }
        for cqn in [attr.send_cqn, attr.recv_cqn] {
            if let Some(cq) = get_mut(t.cqs, cqn) {
                inc(&mut cq.users);
            }
        }
        if gsi {
            self.gsi = Some(index);
        }
        Ok(QPN_BASE + index)
    }

    /// Modifies QP `qpn` as the IB spec's modify-QP verb does.
    ///
    /// Moving to RESET empties both queues without completions (the
    /// embedder must zero the doorbell record as it does so). Moving to ERR
    /// schedules every outstanding WQE for a WR_FLUSH error completion,
    /// written by the next engine runs.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is no such QP; otherwise as for the
    /// transition table (see [`QpModify`]); the QP is unchanged on error.
    pub fn modify_qp(&mut self, qpn: u32, m: &QpModify) -> Result<(), Error> {
        /// What the scheduler must do after the transition.
        enum Then {
            Nothing,
            Unlink,
            Fail,
            Activate,
        }
        let caps = self.caps;
        let mut dev = self.dev();
        let (slot, qp) = dev.qp(qpn).ok_or(Error::NotFound)?;
        let cur = qp.state;
        let next = qp_modify::check(qp.attr.service, cur, m, &caps)?;
        qp_modify::apply(&mut qp.conn, m);
        qp.state = next;
        let then = match next {
            QpState::Reset => {
                qp.reset_queues();
                qp.conn = Default::default();
                Then::Unlink
            }
            QpState::Err => Then::Fail,
            QpState::Rtr if cur != QpState::Rtr => {
                qp.comm_established = false;
                Then::Nothing
            }
            QpState::Rts if qp.sq_pending() => Then::Activate,
            QpState::Sqd if cur == QpState::Rts && qp.conn.sqd_async_notify => {
                qp.sqd_notify_pending = true;
                Then::Activate
            }
            _ => Then::Nothing,
        };
        match then {
            Then::Nothing => {}
            Then::Unlink => dev.sched.unlink(dev.t.qps, slot),
            Then::Fail => dev.qp_to_error(slot),
            Then::Activate => dev.sched.activate(dev.t.qps, slot),
        }
        Ok(())
    }

    /// The state and attributes of QP `qpn`.
    pub fn query_qp(&mut self, qpn: u32) -> Option<QpInfo> {
        let mut dev = self.dev();
        dev.qp(qpn).map(|(_, qp)| qp.info())
    }

    /// Destroys QP `qpn` at once, without flushing (as destroy-QP does:
    /// software discards what it has not polled). A requester elsewhere
    /// that still sends to it sees transport timeouts.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is no such QP.
    pub fn destroy_qp(&mut self, qpn: u32) -> Result<(), Error> {
        let dev = self.dev();
        let slot = qp_slot(qpn).ok_or(Error::NotFound)?;
        let attr = match get(dev.t.qps, slot) {
            Some(qp) if qp.qpn == qpn => qp.attr,
            _ => return Err(Error::NotFound),
        };
        dev.sched.unlink(dev.t.qps, slot);
        if let Some(s) = dev.t.qps.get_mut(slot as usize) {
            s.obj = None;
        }
        if let Some(pd) = get_mut(dev.t.pds, attr.pdn) {
            dec(&mut pd.users);
        }
        for cqn in [attr.send_cqn, attr.recv_cqn] {
            if let Some(cq) = get_mut(dev.t.cqs, cqn) {
                dec(&mut cq.users);
            }
        }
        if self.gsi == Some(slot) {
            self.gsi = None;
        }
        Ok(())
    }

    /// Whether the engine has work queued on this instance right now.
    pub fn has_work(&self) -> bool {
        self.sched.has_active()
    }

    /// Takes the next QP with work off the active list, marked running,
    /// and says which QP it is.
    pub(super) fn pop_active(&mut self) -> Option<QpId> {
        let t = self.storage.tables();
        let slot = self.sched.pop_active(t.qps)?;
        QpId::of(t.qps, slot)
    }

    /// Moves QPs whose retry deadline has passed to the active list.
    pub(super) fn expire(&mut self, now: u64) {
        let t = self.storage.tables();
        self.sched.expire(t.qps, now);
    }

    /// The earliest retry deadline of this instance's waiting QPs.
    pub fn next_deadline(&mut self) -> Option<u64> {
        let t = self.storage.tables();
        self.sched.next_deadline(t.qps)
    }
}
