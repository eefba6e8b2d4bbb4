// SPDX-License-Identifier: GPL-2.0

//! The fuzzer's model of what the kernel holds for this process
//! (host-independent: unit-tested on the host): contexts with their PDs,
//! MRs, CQs and QPs, channels, async files, mappings and descriptors, with
//! the bookkeeping of handles, destroys, closes and QPs that traffic may
//! move.

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::RawFd;

use rmlx5_abi::mmap::Kind;

use crate::debugfs::FnObjects;
use crate::expect::Expect;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FdKind {
    /// A device file (the context's id).
    Ctx(usize),
    /// A completion channel (its serial).
    Chan(u64),
    /// An async-event file (the context's id).
    Async(usize),
    /// Anything else (stdio, /dev/null).
    Other,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ObjKind {
    Pd,
    Mr,
    Cq,
    Qp,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct PdM {
    users: u32,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct MrM {
    pub(crate) pd: u32,
    pub(crate) key: u32,
    pub(crate) addr: u64,
    pub(crate) len: u64,
    pub(crate) access: u32,
}

#[derive(Clone, Debug)]
pub(crate) struct CqM {
    pub(crate) users: u32,
    pub(crate) chan: Option<u64>,
    pub(crate) cqn: u32,
    pub(crate) buf_size: u64,
    pub(crate) serial: u64,
    pub(crate) tainted: bool,
    pub(crate) big: bool,
    /// Completion events read (the low bits are the arm sequence number
    /// the HCA expects).
    pub(crate) events_read: u32,
}

#[derive(Clone, Debug)]
pub(crate) struct QpM {
    pub(crate) pd: u32,
    pub(crate) scq: u32,
    pub(crate) rcq: u32,
    pub(crate) qpn: u32,
    /// The state, or `None` once the QP may change state by itself
    /// (traffic or garbage reached it): then nothing is predicted about it.
    pub(crate) state: Option<u32>,
    pub(crate) buf_size: u64,
    pub(crate) sq_off: u32,
    pub(crate) sq_cnt: u32,
    pub(crate) bf_offset: u32,
    pub(crate) bf_size: u32,
    pub(crate) serial: u64,
    pub(crate) big: bool,
    /// max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline.
    pub(crate) granted: [u32; 5],
    /// The peer named by the last accepted AV and DEST_QPN.
    pub(crate) dest: (u32, u32),
    /// Send WQEBBs this program wrote (garbage or valid WQEs).
    pub(crate) posted: u32,
    pub(crate) rq_cnt: u32,
    pub(crate) rq_shift: u32,
    /// Receive WQEs this program posted.
    pub(crate) recvs: u32,
}

#[derive(Clone, Debug)]
pub(crate) struct CtxM {
    pub(crate) dev: u32,
    pub(crate) fd: Option<RawFd>,
    pub(crate) pds: BTreeMap<u32, PdM>,
    pub(crate) mrs: BTreeMap<u32, MrM>,
    pub(crate) cqs: BTreeMap<u32, CqM>,
    pub(crate) qps: BTreeMap<u32, QpM>,
    pub(crate) async_taken: bool,
    /// Live mappings of the device file (they keep the context alive).
    maps: u32,
}

#[derive(Clone, Debug)]
pub(crate) struct ChanM {
    pub(crate) ctx: usize,
    pub(crate) fd: Option<RawFd>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MapObj {
    Uar,
    Cq(u64),
    Qp(u64),
}

#[derive(Clone, Debug)]
pub(crate) struct MapM {
    pub(crate) ctx: usize,
    pub(crate) addr: usize,
    pub(crate) len: usize,
    pub(crate) kind: Kind,
    pub(crate) obj: MapObj,
    pub(crate) writable: bool,
}

/// What the fuzzer believes the kernel holds for this process.
#[derive(Debug, Default)]
pub(crate) struct Model {
    pub(crate) ctxs: BTreeMap<usize, CtxM>,
    pub(crate) chans: BTreeMap<u64, ChanM>,
    pub(crate) fds: BTreeMap<RawFd, FdKind>,
    pub(crate) maps: Vec<MapM>,
    pub(crate) next_ctx: usize,
    next_serial: u64,
    /// (HCA, QPN) that traffic may reach: a QP with such a number may
    /// change state by itself.
    pub(crate) tainted_qpns: BTreeSet<(u32, u32)>,
}

/// The lowest handle not in `m` (handles are an index plus one, the
/// lowest free slot first).
pub(crate) fn lowest_free<V>(m: &BTreeMap<u32, V>) -> u32 {
    let mut h = 1;
    for k in m.keys() {
        if *k != h {
            break;
        }
        h += 1;
    }
    h
}

impl Model {
    pub(crate) fn serial(&mut self) -> u64 {
        self.next_serial += 1;
        self.next_serial
    }

    pub(crate) fn alive(&self, c: usize) -> bool {
        self.ctxs.contains_key(&c)
    }

    pub(crate) fn open_ctx(&mut self, fd: RawFd, dev: u32) -> usize {
        let c = self.next_ctx;
        self.next_ctx += 1;
        self.ctxs.insert(
            c,
            CtxM {
                dev,
                fd: Some(fd),
                pds: BTreeMap::new(),
                mrs: BTreeMap::new(),
                cqs: BTreeMap::new(),
                qps: BTreeMap::new(),
                async_taken: false,
                maps: 0,
            },
        );
        self.fds.insert(fd, FdKind::Ctx(c));
        c
    }

    /// The device fd was closed: the context goes once no mapping holds it.
    pub(crate) fn close_ctx_fd(&mut self, c: usize) {
        if let Some(x) = self.ctxs.get_mut(&c) {
            if let Some(fd) = x.fd.take() {
                self.fds.remove(&fd);
            }
        }
        self.release_if_unused(c);
    }

    fn release_if_unused(&mut self, c: usize) {
        if self
            .ctxs
            .get(&c)
            .is_some_and(|x| x.fd.is_none() && x.maps == 0)
        {
            self.ctxs.remove(&c);
        }
    }

    pub(crate) fn add_chan(&mut self, c: usize, fd: RawFd) -> u64 {
        let s = self.serial();
        self.chans.insert(
            s,
            ChanM {
                ctx: c,
                fd: Some(fd),
            },
        );
        self.fds.insert(fd, FdKind::Chan(s));
        s
    }

    pub(crate) fn close_chan(&mut self, s: u64) {
        if let Some(ch) = self.chans.get_mut(&s) {
            if let Some(fd) = ch.fd.take() {
                self.fds.remove(&fd);
            }
        }
    }

    pub(crate) fn add_map(&mut self, m: MapM) {
        if let Some(x) = self.ctxs.get_mut(&m.ctx) {
            x.maps += 1;
        }
        self.maps.push(m);
    }

    /// Forgets mapping `i` (already unmapped); the context may go with it.
    pub(crate) fn remove_map(&mut self, i: usize) -> Option<MapM> {
        if i >= self.maps.len() {
            return None;
        }
        let m = self.maps.swap_remove(i);
        if let Some(x) = self.ctxs.get_mut(&m.ctx) {
            x.maps = x.maps.saturating_sub(1);
        }
        self.release_if_unused(m.ctx);
        Some(m)
    }

    /// Whether the object a mapping shows is still alive.
    pub(crate) fn map_target_live(&self, m: &MapM) -> bool {
        let Some(x) = self.ctxs.get(&m.ctx) else {
            return false;
        };
        match m.obj {
            MapObj::Uar => true,
            MapObj::Cq(s) => x.cqs.values().any(|q| q.serial == s),
            MapObj::Qp(s) => x.qps.values().any(|q| q.serial == s),
        }
    }

    pub(crate) fn add_mr(&mut self, c: usize, h: u32, mr: MrM) {
        if let Some(x) = self.ctxs.get_mut(&c) {
            if let Some(pd) = x.pds.get_mut(&mr.pd) {
                pd.users += 1;
            }
            x.mrs.insert(h, mr);
        }
    }

    pub(crate) fn add_qp(&mut self, c: usize, h: u32, qp: QpM) {
        if let Some(x) = self.ctxs.get_mut(&c) {
            if let Some(pd) = x.pds.get_mut(&qp.pd) {
                pd.users += 1;
            }
            for cq in [qp.scq, qp.rcq] {
                if let Some(q) = x.cqs.get_mut(&cq) {
                    q.users += 1;
                }
            }
            x.qps.insert(h, qp);
        }
    }

    /// What destroying `h` of `kind` in context `c` gives.
    pub(crate) fn destroy_expect(&self, c: usize, kind: ObjKind, h: u32) -> Expect {
        let Some(x) = self.ctxs.get(&c) else {
            return Expect::err(libc::EINVAL);
        };
        let users = match kind {
            ObjKind::Pd => x.pds.get(&h).map(|p| p.users),
            ObjKind::Mr => x.mrs.get(&h).map(|_| 0),
            ObjKind::Cq => x.cqs.get(&h).map(|q| q.users),
            ObjKind::Qp => x.qps.get(&h).map(|_| 0),
        };
        match users {
            None => Expect::err(libc::EINVAL),
            Some(0) => Expect::OK,
            Some(_) => Expect::err(libc::EBUSY),
        }
    }

    /// Applies a successful destroy.
    pub(crate) fn destroy(&mut self, c: usize, kind: ObjKind, h: u32) {
        let Some(x) = self.ctxs.get_mut(&c) else {
            return;
        };
        match kind {
            ObjKind::Pd => {
                x.pds.remove(&h);
            }
            ObjKind::Mr => {
                if let Some(mr) = x.mrs.remove(&h) {
                    if let Some(pd) = x.pds.get_mut(&mr.pd) {
                        pd.users = pd.users.saturating_sub(1);
                    }
                }
            }
            ObjKind::Cq => {
                x.cqs.remove(&h);
            }
            ObjKind::Qp => {
                if let Some(qp) = x.qps.remove(&h) {
                    if let Some(pd) = x.pds.get_mut(&qp.pd) {
                        pd.users = pd.users.saturating_sub(1);
                    }
                    for cq in [qp.scq, qp.rcq] {
                        if let Some(q) = x.cqs.get_mut(&cq) {
                            q.users = q.users.saturating_sub(1);
                        }
                    }
                }
            }
        }
    }

    /// What naming `fd` as the channel of a new CQ of context `c` gives
    /// (after the argument check).
    pub(crate) fn channel_expect(&self, c: usize, fd: i32) -> Expect {
        if fd == -1 {
            return Expect::OK;
        }
        match self.fds.get(&fd) {
            None => Expect::err(libc::EBADF),
            Some(FdKind::Chan(s)) if self.chans.get(s).is_some_and(|ch| ch.ctx == c) => Expect::OK,
            Some(_) => Expect::err(libc::EINVAL),
        }
    }

    /// The lowest descriptor number not open.
    pub(crate) fn lowest_free_fd(&self) -> RawFd {
        let mut fd = 0;
        while self.fds.contains_key(&fd) {
            fd += 1;
        }
        fd
    }

    /// The context owning CQ `cqn` of HCA `dev`.
    pub(crate) fn cqn_owner(&self, dev: u32, cqn: u32) -> Option<usize> {
        self.ctxs
            .iter()
            .find(|(_, x)| x.dev == dev && x.cqs.values().any(|q| q.cqn == cqn))
            .map(|(c, _)| *c)
    }

    pub(crate) fn qpn_in_use(&self, dev: u32, qpn: u32) -> bool {
        self.ctxs
            .values()
            .any(|x| x.dev == dev && x.qps.values().any(|q| q.qpn == qpn))
    }

    pub(crate) fn cqn_in_use(&self, dev: u32, cqn: u32) -> bool {
        self.cqn_owner(dev, cqn).is_some()
    }

    /// QP `h` of context `c` may now change state by itself: so may its
    /// peer (it answers there), the QPs sharing its CQs (a CQ overrun
    /// reaches them) and, in turn, theirs.
    pub(crate) fn taint_qp(&mut self, c: usize, h: u32) {
        let mut work = vec![(c, h)];
        while let Some((c, h)) = work.pop() {
            let Some(x) = self.ctxs.get_mut(&c) else {
                continue;
            };
            let dev = x.dev;
            let Some(qp) = x.qps.get_mut(&h) else {
                continue;
            };
            let fresh = qp.state.is_some();
            qp.state = None;
            let (qpn, dest, cqs) = (qp.qpn, qp.dest, [qp.scq, qp.rcq]);
            self.tainted_qpns.insert((dev, qpn));
            if !fresh {
                continue;
            }
            for cq in cqs {
                if let Some(q) = x.cqs.get_mut(&cq) {
                    q.tainted = true;
                }
            }
            for (hh, q) in x.qps.iter() {
                if q.state.is_some() && (cqs.contains(&q.scq) || cqs.contains(&q.rcq)) {
                    work.push((c, *hh));
                }
            }
            if dest.1 != 0 {
                work.extend(self.taint_qpn(dest.0, dest.1));
            }
        }
    }

    /// Marks (dev, qpn) as reachable by traffic; returns the QPs to taint.
    pub(crate) fn taint_qpn(&mut self, dev: u32, qpn: u32) -> Vec<(usize, u32)> {
        self.tainted_qpns.insert((dev, qpn));
        let mut v = Vec::new();
        for (c, x) in self.ctxs.iter() {
            if x.dev != dev {
                continue;
            }
            for (h, q) in x.qps.iter() {
                if q.qpn == qpn && q.state.is_some() {
                    v.push((*c, *h));
                }
            }
        }
        v
    }

    /// CQ `h` of context `c` was written to by this program: its QPs may
    /// change state.
    pub(crate) fn taint_cq(&mut self, c: usize, h: u32) {
        let qps: Vec<u32> = match self.ctxs.get_mut(&c) {
            Some(x) => {
                if let Some(q) = x.cqs.get_mut(&h) {
                    q.tainted = true;
                }
                x.qps
                    .iter()
                    .filter(|(_, q)| q.scq == h || q.rcq == h)
                    .map(|(qh, _)| *qh)
                    .collect()
            }
            None => Vec::new(),
        };
        for qh in qps {
            self.taint_qp(c, qh);
        }
    }

    /// Live CQs and QPs per HCA and MRs overall: what debugfs must show
    /// above its baseline.
    pub(crate) fn counts(&self, n: usize) -> (Vec<u64>, Vec<u64>, u64) {
        let mut cqs = vec![0u64; n];
        let mut qps = vec![0u64; n];
        let mut mrs = 0;
        for x in self.ctxs.values() {
            if let Some(v) = cqs.get_mut(x.dev as usize) {
                *v += x.cqs.len() as u64;
            }
            if let Some(v) = qps.get_mut(x.dev as usize) {
                *v += x.qps.len() as u64;
            }
            mrs += x.mrs.len() as u64;
        }
        (cqs, qps, mrs)
    }

    /// What a ConnectX function holds for the model's contexts (all on
    /// it): its PDs, CQs, QPs, memory keys (one per MR) and UAR pages (one
    /// per context, until the context goes).
    pub(crate) fn fn_counts(&self) -> FnObjects {
        let sum = |f: fn(&CtxM) -> usize| self.ctxs.values().map(|x| f(x) as u64).sum::<u64>();
        FnObjects {
            pds: sum(|x| x.pds.len()),
            cqs: sum(|x| x.cqs.len()),
            qps: sum(|x| x.qps.len()),
            mrs: sum(|x| x.mrs.len()),
            uars: self.ctxs.len() as u64,
        }
    }

    /// Whether traffic may reach QP `h` of context `c` once it receives
    /// (RTR on): another QP may name its number, or one of its CQs may
    /// have overrun. A missing QP counts as exposed.
    pub(crate) fn exposed(&self, c: usize, h: u32) -> bool {
        let Some(x) = self.ctxs.get(&c) else {
            return true;
        };
        let Some(q) = x.qps.get(&h) else {
            return true;
        };
        self.tainted_qpns.contains(&(x.dev, q.qpn))
            || [q.scq, q.rcq]
                .iter()
                .any(|cq| x.cqs.get(cq).is_some_and(|k| k.tainted))
    }

    pub(crate) fn big_cqs(&self) -> usize {
        self.ctxs
            .values()
            .map(|x| x.cqs.values().filter(|q| q.big).count())
            .sum()
    }

    pub(crate) fn big_qps(&self) -> usize {
        self.ctxs
            .values()
            .map(|x| x.qps.values().filter(|q| q.big).count())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use rmlx5_abi::uapi::*;

    use super::*;

    #[test]
    fn lowest_free_handles() {
        let mut t: BTreeMap<u32, ()> = BTreeMap::new();
        assert_eq!(lowest_free(&t), 1);
        t.insert(1, ());
        t.insert(2, ());
        t.insert(4, ());
        assert_eq!(lowest_free(&t), 3);
        t.insert(3, ());
        assert_eq!(lowest_free(&t), 5);
    }

    fn cq(serial: u64, cqn: u32, chan: Option<u64>) -> CqM {
        CqM {
            users: 0,
            chan,
            cqn,
            buf_size: 4096,
            serial,
            tainted: false,
            big: false,
            events_read: 0,
        }
    }

    fn qpm(pd: u32, scq: u32, rcq: u32, qpn: u32) -> QpM {
        QpM {
            pd,
            scq,
            rcq,
            qpn,
            state: Some(QPS_RESET),
            buf_size: 8192,
            sq_off: 1024,
            sq_cnt: 64,
            bf_offset: 0x800,
            bf_size: 256,
            serial: u64::from(qpn),
            big: false,
            granted: [1; 5],
            dest: (0, 0),
            posted: 0,
            rq_cnt: 64,
            rq_shift: 4,
            recvs: 0,
        }
    }

    #[test]
    fn model_bookkeeping() {
        let mut md = Model::default();
        for fd in 0..3 {
            md.fds.insert(fd, FdKind::Other);
        }
        let c = md.open_ctx(3, 0);
        let other = md.open_ctx(4, 0);
        assert_eq!(md.lowest_free_fd(), 5);
        md.ctxs.get_mut(&c).unwrap().pds.insert(1, PdM::default());
        let mr = MrM {
            pd: 1,
            key: 0x200,
            addr: 0x1000,
            len: 0x1000,
            access: ACCESS_ALL,
        };
        md.add_mr(c, 1, mr);
        let ch = md.add_chan(c, 5);
        let och = md.add_chan(other, 6);
        md.ctxs
            .get_mut(&c)
            .unwrap()
            .cqs
            .insert(1, cq(10, 0x40, Some(ch)));
        md.ctxs
            .get_mut(&c)
            .unwrap()
            .cqs
            .insert(2, cq(11, 0x41, None));
        md.add_qp(c, 1, qpm(1, 1, 2, 0x100));
        // Users make destroys EBUSY; missing handles are EINVAL.
        assert_eq!(
            md.destroy_expect(c, ObjKind::Pd, 1),
            Expect::err(libc::EBUSY)
        );
        assert_eq!(
            md.destroy_expect(c, ObjKind::Cq, 1),
            Expect::err(libc::EBUSY)
        );
        assert_eq!(
            md.destroy_expect(c, ObjKind::Cq, 3),
            Expect::err(libc::EINVAL)
        );
        assert_eq!(
            md.destroy_expect(other, ObjKind::Cq, 1),
            Expect::err(libc::EINVAL)
        );
        assert_eq!(md.destroy_expect(c, ObjKind::Qp, 1), Expect::OK);
        md.destroy(c, ObjKind::Qp, 1);
        assert_eq!(md.destroy_expect(c, ObjKind::Cq, 1), Expect::OK);
        assert_eq!(
            md.destroy_expect(c, ObjKind::Pd, 1),
            Expect::err(libc::EBUSY)
        );
        md.destroy(c, ObjKind::Mr, 1);
        assert_eq!(md.destroy_expect(c, ObjKind::Pd, 1), Expect::OK);
        // The same CQ as send and receive CQ is held twice.
        md.add_qp(c, 1, qpm(1, 2, 2, 0x101));
        assert_eq!(md.ctxs[&c].cqs[&2].users, 2);
        md.destroy(c, ObjKind::Qp, 1);
        assert_eq!(md.ctxs[&c].cqs[&2].users, 0);
        // Channels: own, another context's, a closed number, other files.
        assert_eq!(md.channel_expect(c, -1), Expect::OK);
        assert_eq!(md.channel_expect(c, 5), Expect::OK);
        assert_eq!(md.channel_expect(c, 6), Expect::err(libc::EINVAL));
        assert_eq!(md.channel_expect(other, 6), Expect::OK);
        assert_eq!(md.channel_expect(c, 3), Expect::err(libc::EINVAL));
        assert_eq!(md.channel_expect(c, 900), Expect::err(libc::EBADF));
        md.close_chan(ch);
        assert_eq!(md.channel_expect(c, 5), Expect::err(libc::EBADF));
        assert_eq!(md.lowest_free_fd(), 5);
        // CQNs belong to their context.
        assert_eq!(md.cqn_owner(0, 0x40), Some(c));
        assert_eq!(md.cqn_owner(1, 0x40), None);
        // A mapping keeps the context after its fd is closed.
        md.add_map(MapM {
            ctx: c,
            addr: 0x1000,
            len: 4096,
            kind: Kind::Uar,
            obj: MapObj::Uar,
            writable: true,
        });
        md.close_ctx_fd(c);
        assert!(md.alive(c));
        assert!(!md.fds.contains_key(&3));
        assert_eq!(md.counts(2), (vec![2, 0], vec![0, 0], 0));
        md.remove_map(0);
        assert!(!md.alive(c));
        assert_eq!(md.counts(2), (vec![0, 0], vec![0, 0], 0));
        // The other context's channel stays its own.
        assert_eq!(md.chans[&och].ctx, other);
        md.close_ctx_fd(other);
        assert!(!md.alive(other));
    }

    #[test]
    fn taint_spreads_to_peers_and_cq_sharers() {
        let mut md = Model::default();
        let a = md.open_ctx(3, 0);
        let b = md.open_ctx(4, 0);
        let c = md.open_ctx(5, 1);
        for x in [a, b, c] {
            let ctx = md.ctxs.get_mut(&x).unwrap();
            ctx.pds.insert(1, PdM::default());
            ctx.cqs.insert(1, cq(100 + x as u64, 0x40, None));
            ctx.cqs.insert(2, cq(200 + x as u64, 0x41, None));
        }
        // a: qp1 (cq 1) sends to b's qp 0x110; qp2 shares cq 1; qp3 on cq 2.
        md.add_qp(
            a,
            1,
            QpM {
                dest: (0, 0x110),
                ..qpm(1, 1, 1, 0x100)
            },
        );
        md.add_qp(a, 2, qpm(1, 2, 1, 0x101));
        md.add_qp(a, 3, qpm(1, 2, 2, 0x102));
        md.add_qp(
            b,
            1,
            QpM {
                dest: (1, 0x120),
                ..qpm(1, 1, 1, 0x110)
            },
        );
        md.add_qp(c, 1, qpm(1, 1, 1, 0x120));
        // The same QPN on another HCA is another QP.
        md.add_qp(c, 2, qpm(1, 2, 2, 0x110));
        md.taint_qp(a, 1);
        let st = |md: &Model, x: usize, h: u32| md.ctxs[&x].qps[&h].state;
        assert_eq!(st(&md, a, 1), None);
        // Shares CQ 1 with qp 1.
        assert_eq!(st(&md, a, 2), None);
        // Shares CQ 2 with qp 2.
        assert_eq!(st(&md, a, 3), None);
        // The peer, and the peer's peer on HCA 1.
        assert_eq!(st(&md, b, 1), None);
        assert_eq!(st(&md, c, 1), None);
        assert_eq!(st(&md, c, 2), Some(QPS_RESET));
        assert!(md.tainted_qpns.contains(&(0, 0x110)));
        assert!(md.tainted_qpns.contains(&(1, 0x120)));
        assert!(!md.tainted_qpns.contains(&(1, 0x110)));
        // Writing into a CQ taints its QPs.
        md.taint_cq(c, 2);
        assert_eq!(st(&md, c, 2), None);
        // Exposed: a QPN some QP named, or a CQ that may have overrun.
        assert!(md.exposed(b, 1));
        assert!(md.exposed(a, 3));
        let d = md.open_ctx(6, 1);
        let ctx = md.ctxs.get_mut(&d).unwrap();
        ctx.cqs.insert(1, cq(300, 0x40, None));
        md.add_qp(d, 1, qpm(0, 1, 1, 0x130));
        assert!(!md.exposed(d, 1));
        assert!(md.exposed(d, 2));
        md.tainted_qpns.insert((1, 0x130));
        assert!(md.exposed(d, 1));
    }

    #[test]
    fn function_counts() {
        let mut md = Model::default();
        let a = md.open_ctx(3, 2);
        let b = md.open_ctx(4, 2);
        md.ctxs.get_mut(&a).unwrap().pds.insert(1, PdM::default());
        md.ctxs
            .get_mut(&a)
            .unwrap()
            .cqs
            .insert(1, cq(1, 0x40, None));
        md.add_qp(a, 1, qpm(1, 1, 1, 0x100));
        let mr = MrM {
            pd: 1,
            key: 0x200,
            addr: 0x1000,
            len: 0x1000,
            access: 0,
        };
        md.add_mr(a, 1, mr);
        md.ctxs.get_mut(&b).unwrap().pds.insert(1, PdM::default());
        let want = FnObjects {
            pds: 2,
            cqs: 1,
            qps: 1,
            mrs: 1,
            uars: 2,
        };
        assert_eq!(md.fn_counts(), want);
        // A closed context held by a mapping keeps its UAR and objects.
        md.add_map(MapM {
            ctx: a,
            addr: 0x1000,
            len: 4096,
            kind: Kind::Uar,
            obj: MapObj::Uar,
            writable: true,
        });
        md.close_ctx_fd(a);
        md.close_ctx_fd(b);
        assert_eq!(
            md.fn_counts(),
            FnObjects {
                pds: 1,
                uars: 1,
                ..want
            }
        );
        md.remove_map(0);
        assert_eq!(md.fn_counts(), FnObjects::default());
    }
}
