// SPDX-License-Identifier: GPL-2.0

//! KUnit suites of the core and the verbs: they run at module load, on the
//! module's own software HCAs, so interrupts, the EQ handler and the BH
//! dispatcher are the real ones.

use core::sync::atomic::{
    AtomicU32,
    Ordering, //
};
use kernel::{
    ffi::c_void,
    prelude::*,
    sync::Arc,
    time::{
        delay::fsleep,
        Delta, //
    },
};

use super::{
    cq::*,
    mr::{
        Mr,
        Pd, //
    },
    qp::*,
};
use crate::hca_model::qp::QpService;

/// Completion handler of the tests: counts calls in the `AtomicU32` that
/// `ctx` points at.
///
/// # Safety
///
/// `ctx` points at an `AtomicU32` that outlives the CQ.
unsafe extern "C" fn count_handler(_cq: *mut Cq, ctx: *mut c_void) {
    // SAFETY: The tests pass a pointer to an `AtomicU32` that outlives the
    // CQ (destroy waits for running handlers).
    let n = unsafe { &*ctx.cast::<AtomicU32>() };
    n.fetch_add(1, Ordering::AcqRel);
}

/// A user CQ's event sink that counts completion events.
struct CountSink(AtomicU32);

impl EventSink for CountSink {
    fn comp_event(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }

    fn async_event(&self, _event_type: u8) {}
}

/// A CQ of 16 CQEs on memory of its own, reporting to `sink` as a user
/// CQ does.
fn user_cq(dev: &Arc<crate::mlx5_core::device::Device>, sink: Arc<CountSink>) -> Result<Arc<Cq>> {
    use crate::mlx5_prm::{
        cqe::{
            CQE_SIZE,
            OP_OWN_OFFSET, //
        },
        doorbell::CQ_DBR_SIZE,
        ring,
    };
    let buf = dev.be.alloc_queue(16 * CQE_SIZE)?;
    buf.fill_strided(OP_OWN_OFFSET, CQE_SIZE, 16, ring::CQE_INIT_OP_OWN)?;
    let mem = CqMem {
        buf,
        dbr: dev.be.alloc_queue(CQ_DBR_SIZE)?,
        uar_addr: dev.be.kernel_uar()?,
    };
    Cq::new_on(dev, 4, mem, 0, sink)
}

/// Two connected RC QPs on rmlx5_0 and rmlx5_1 with their memory.
pub(super) struct Pair {
    pub(super) pds: [Pd; 2],
    pub(super) mrs: [Mr; 2],
    pub(super) cqs: [Arc<Cq>; 2],
    pub(super) qps: [Arc<Qp>; 2],
    pub(super) bufs: [KVec<u8>; 2],
}

const BUF: usize = 4096;

/// The retry attributes of a connection (IB encodings).
#[derive(Clone, Copy)]
pub(super) struct Retry {
    /// Responder's RNR NAK timer code.
    pub(super) min_rnr_timer: u8,
    /// Local ACK timeout exponent.
    pub(super) timeout: u8,
    /// Transport retries.
    pub(super) retry_cnt: u8,
    /// RNR retries (7 = forever).
    pub(super) rnr_retry: u8,
}

impl Retry {
    /// What the other tests use: 0.64 ms RNR timer, 67 ms ACK timeout,
    /// 7 retries of each kind.
    pub(super) const DEFAULT: Self = Self {
        min_rnr_timer: 12,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
    };
}

/// Takes `qp` to INIT.
fn to_init(qp: &Qp) -> Result {
    let a = QpAttrC {
        qp_state: 1,
        qp_access_flags: 0xe,
        port_num: 1,
        ..Default::default()
    };
    qp.modify(&a, 1 | 8 | 16 | 32)
}

fn connect_with(qp: &Qp, dlid: u16, dest: u32, r: Retry) -> Result {
    let mut a = QpAttrC {
        qp_state: 1,
        qp_access_flags: 0xe,
        port_num: 1,
        ..Default::default()
    };
    qp.modify(&a, 1 | 8 | 16 | 32)?;
    a.qp_state = 2;
    a.path_mtu = 5;
    a.dlid = dlid;
    a.dest_qp_num = dest;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = r.min_rnr_timer;
    qp.modify(
        &a,
        1 | (1 << 7) | (1 << 8) | (1 << 20) | (1 << 12) | (1 << 17) | (1 << 15),
    )?;
    a.qp_state = 3;
    a.timeout = r.timeout;
    a.retry_cnt = r.retry_cnt;
    a.rnr_retry = r.rnr_retry;
    a.max_rd_atomic = 4;
    qp.modify(
        &a,
        1 | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 16) | (1 << 13),
    )
}

impl Pair {
    fn new(counters: Option<&[AtomicU32; 2]>) -> Result<Self> {
        Self::new_with(counters, Retry::DEFAULT, true)
    }

    /// A pair connected with retry attributes `r`; with `peer_rtr` false
    /// QP 1 stays in INIT, so QP 0's requests are never answered.
    pub(super) fn new_with(
        counters: Option<&[AtomicU32; 2]>,
        r: Retry,
        peer_rtr: bool,
    ) -> Result<Self> {
        let mk = |h: u16| -> Result<(Pd, Arc<Cq>)> {
            let be = crate::mlx5_core::device::get(usize::from(h))?;
            let pd = Pd::new(&be)?;
            let handler = counters.map(|c| {
                let p: *const AtomicU32 = &c[usize::from(h)];
                (count_handler as CompHandlerFnT, p as usize)
            });
            let cq = Cq::new(&be, 256, 0, handler)?;
            Ok((pd, cq))
        };
        let (pd0, cq0) = mk(0)?;
        let (pd1, cq1) = mk(1)?;
        let mut b0 = KVec::from_elem(0u8, BUF, GFP_KERNEL)?;
        let mut b1 = KVec::from_elem(0u8, BUF, GFP_KERNEL)?;
        let mr0 = Mr::new(&pd0, b0.as_mut_ptr() as u64, BUF as u64, 0xf)?;
        let mr1 = Mr::new(&pd1, b1.as_mut_ptr() as u64, BUF as u64, 0xf)?;
        let caps = QpCaps {
            service: QpService::Rc,
            max_send_wr: 32,
            max_recv_wr: 32,
            max_send_sge: 2,
            max_recv_sge: 2,
            sq_sig_all: true,
        };
        let q0 = Qp::new(&pd0, &cq0, &cq0, &caps)?;
        let q1 = Qp::new(&pd1, &cq1, &cq1, &caps)?;
        connect_with(&q0, 1, q1.qpn, r)?;
        if peer_rtr {
            connect_with(&q1, 0, q0.qpn, r)?;
        } else {
            to_init(&q1)?;
        }
        Ok(Self {
            pds: [pd0, pd1],
            mrs: [mr0, mr1],
            cqs: [cq0, cq1],
            qps: [q0, q1],
            bufs: [b0, b1],
        })
    }

    fn addr(&self, i: usize, off: usize) -> u64 {
        self.bufs[i].as_ptr() as u64 + off as u64
    }

    pub(super) fn sge(&self, i: usize, off: usize, len: u32) -> Sge {
        Sge {
            addr: self.addr(i, off),
            length: len,
            lkey: self.mrs[i].key,
        }
    }

    pub(super) fn destroy(self) -> Result {
        for q in &self.qps {
            q.destroy()?;
        }
        for c in &self.cqs {
            c.destroy()?;
        }
        for m in &self.mrs {
            m.destroy()?;
        }
        for p in &self.pds {
            p.destroy()?;
        }
        Ok(())
    }
}

type CompHandlerFnT = unsafe extern "C" fn(*mut Cq, *mut c_void);

/// Polls `cq` until `n` completions arrived or about 2 s passed.
pub(super) fn poll_n(cq: &Cq, n: usize) -> Result<KVec<Wc>> {
    let mut out = KVec::new();
    for _ in 0..20000 {
        let mut wc = [Wc::default(); 8];
        let got = cq.poll(&mut wc);
        for w in wc.iter().take(got) {
            out.push(*w, GFP_KERNEL)?;
        }
        if out.len() >= n {
            return Ok(out);
        }
        fsleep(Delta::from_micros(100));
    }
    Err(ETIMEDOUT)
}

fn wait_for(c: &AtomicU32, n: u32) -> bool {
    for _ in 0..20000 {
        if c.load(Ordering::Acquire) >= n {
            return true;
        }
        fsleep(Delta::from_micros(100));
    }
    false
}

#[kunit_tests(rmlx5_verbs)]
mod verbs {
    use super::*;

    #[test]
    fn send_recv_polling() -> Result {
        let p = Pair::new(None)?;
        let r = p.sge(1, 0, 64);
        let rr = [r];
        p.qps[1].post_recv(&[(7, &rr)]).map_err(|(_, e)| e)?;
        // SAFETY-free: fill the source through the KVec before posting.
        let s = p.sge(0, 128, 64);
        let ss = [s];
        let src = s.addr as *mut u8;
        for i in 0..64u8 {
            // SAFETY: `src` points into `bufs[0]`, 64 bytes from offset 128.
            unsafe { src.add(usize::from(i)).write_volatile(i ^ 0x5a) };
        }
        p.qps[0]
            .post_send(&[SendReq {
                wr_id: 99,
                sges: &ss,
                opcode: WR_SEND,
                flags: SEND_SIGNALED,
                ..Default::default()
            }])
            .map_err(|(_, e)| e)?;
        let w0 = poll_n(&p.cqs[0], 1)?;
        let w1 = poll_n(&p.cqs[1], 1)?;
        assert_eq!(w0[0].status, WC_SUCCESS);
        assert_eq!(w0[0].wr_id, 99);
        assert_eq!(w0[0].opcode, WC_SEND);
        assert_eq!(w1[0].status, WC_SUCCESS);
        assert_eq!(w1[0].wr_id, 7);
        assert_eq!(w1[0].opcode, WC_RECV);
        assert_eq!(w1[0].byte_len, 64);
        for i in 0..64u8 {
            assert_eq!(p.bufs[1][usize::from(i)], i ^ 0x5a);
        }
        p.destroy()
    }

    #[test]
    fn write_read_atomics() -> Result {
        let p = Pair::new(None)?;
        let dst = p.addr(1, 512);
        let s = p.sge(0, 0, 16);
        let src = s.addr as *mut u8;
        for i in 0..16usize {
            // SAFETY: 16 bytes inside `bufs[0]`.
            unsafe { src.add(i).write_volatile(0xa0 + i as u8) };
        }
        let rkey = p.mrs[1].key;
        let wr = |opcode, sges, remote_addr, id| SendReq {
            wr_id: id,
            sges,
            opcode,
            flags: SEND_SIGNALED,
            remote_addr,
            rkey,
            ..Default::default()
        };
        let ss = [s];
        p.qps[0]
            .post_send(&[wr(WR_RDMA_WRITE, &ss, dst, 1)])
            .map_err(|(_, e)| e)?;
        let w = poll_n(&p.cqs[0], 1)?;
        assert_eq!(w[0].status, WC_SUCCESS);
        assert_eq!(w[0].opcode, WC_RDMA_WRITE);
        assert_eq!(p.bufs[1][512 + 3], 0xa3);

        let back = [p.sge(0, 1024, 16)];
        p.qps[0]
            .post_send(&[wr(WR_RDMA_READ, &back, dst, 2)])
            .map_err(|(_, e)| e)?;
        let w = poll_n(&p.cqs[0], 1)?;
        assert_eq!(w[0].status, WC_SUCCESS);
        assert_eq!(w[0].opcode, WC_RDMA_READ);
        assert_eq!(p.bufs[0][1024 + 15], 0xaf);

        // FAA then CAS on an 8-byte counter at offset 2048 of the peer.
        let ctr = p.addr(1, 2048);
        let old = [p.sge(0, 3072, 8)];
        let mut faa = wr(WR_ATOMIC_FETCH_AND_ADD, &old, ctr, 3);
        faa.compare_add = 5;
        p.qps[0].post_send(&[faa]).map_err(|(_, e)| e)?;
        let w = poll_n(&p.cqs[0], 1)?;
        assert_eq!(w[0].status, WC_SUCCESS);
        assert_eq!(w[0].opcode, WC_FETCH_ADD);
        let mut cas = wr(WR_ATOMIC_CMP_AND_SWP, &old, ctr, 4);
        cas.compare_add = 5;
        cas.swap = 42;
        p.qps[0].post_send(&[cas]).map_err(|(_, e)| e)?;
        let w = poll_n(&p.cqs[0], 1)?;
        assert_eq!(w[0].status, WC_SUCCESS);
        let v = u64::from_ne_bytes(p.bufs[1][2048..2056].try_into().map_err(|_| EINVAL)?);
        assert_eq!(v, 42);
        let o = u64::from_ne_bytes(p.bufs[0][3072..3080].try_into().map_err(|_| EINVAL)?);
        assert_eq!(o, 5);
        p.destroy()
    }

    #[test]
    fn handler_mode_and_coalescing() -> Result {
        let counters = [AtomicU32::new(0), AtomicU32::new(0)];
        let p = Pair::new(Some(&counters))?;
        // Arm, then several sends: the first CQE fires the (one-shot) arm,
        // the rest coalesce into the same dispatch or none.
        assert_eq!(p.cqs[0].req_notify(CQ_NEXT_COMP)?, 0);
        let s = p.sge(0, 0, 8);
        let reqs = [SendReq {
            wr_id: 1,
            sges: &[],
            opcode: WR_RDMA_WRITE,
            flags: SEND_SIGNALED,
            remote_addr: p.addr(1, 0),
            rkey: p.mrs[1].key,
            ..Default::default()
        }; 8];
        let _ = s;
        p.qps[0].post_send(&reqs).map_err(|(_, e)| e)?;
        assert!(wait_for(&counters[0], 1));
        let w = poll_n(&p.cqs[0], 8)?;
        assert_eq!(w.len(), 8);
        fsleep(Delta::from_millis(20));
        assert_eq!(counters[0].load(Ordering::Acquire), 1);
        // Poll-arm-poll: arming with missed-event reporting on an empty CQ
        // reports nothing; a new completion fires the handler again.
        assert_eq!(
            p.cqs[0].req_notify(CQ_NEXT_COMP | CQ_REPORT_MISSED_EVENTS)?,
            0
        );
        p.qps[0].post_send(&reqs[..1]).map_err(|(_, e)| e)?;
        assert!(wait_for(&counters[0], 2));
        let _ = poll_n(&p.cqs[0], 1)?;
        p.destroy()
    }

    #[test]
    fn polling_only_cq_cannot_be_armed() -> Result {
        let cq = Cq::new(&crate::mlx5_core::device::get(0)?, 16, 0, None)?;
        assert_eq!(cq.req_notify(CQ_NEXT_COMP), Err(EINVAL));
        cq.destroy()
    }

    #[test]
    fn flush_on_error_and_cq_busy() -> Result {
        let p = Pair::new(None)?;
        let r = p.sge(1, 0, 64);
        let rr = [r];
        p.qps[1]
            .post_recv(&[(1, &rr), (2, &rr)])
            .map_err(|(_, e)| e)?;
        // A CQ with QPs attached cannot be destroyed.
        assert_eq!(p.cqs[1].destroy(), Err(EBUSY));
        let err = QpAttrC {
            qp_state: 6,
            ..Default::default()
        };
        p.qps[1].modify(&err, 1)?;
        let w = poll_n(&p.cqs[1], 2)?;
        assert_eq!(w[0].status, WC_WR_FLUSH_ERR);
        assert_eq!(w[0].wr_id, 1);
        assert_eq!(w[1].wr_id, 2);
        p.destroy()
    }

    /// QP sizes at and past `MAX_QP_WR`, the limit the device reports:
    /// past it (up to `u32::MAX`, whose RQ size would overflow a `u32`)
    /// creation fails with `EINVAL` and creates nothing; at it, the QP is
    /// created, and its SQ goes round its ring more than once (its 16-bit
    /// WQEBB counter with it) with every completion in order.
    #[test]
    fn qp_sizes_at_and_past_max_qp_wr() -> Result {
        let p = Pair::new(None)?;
        let caps = |send: u32, recv: u32| QpCaps {
            service: QpService::Rc,
            max_send_wr: send,
            max_recv_wr: recv,
            max_send_sge: 1,
            max_recv_sge: 1,
            sq_sig_all: true,
        };
        for (send, recv) in [
            (MAX_QP_WR + 1, 1),
            (1, MAX_QP_WR + 1),
            (u32::MAX, 1),
            (1, u32::MAX),
        ] {
            assert_eq!(
                Qp::new(&p.pds[0], &p.cqs[0], &p.cqs[0], &caps(send, recv)).err(),
                Some(EINVAL)
            );
        }
        let big = Qp::new(&p.pds[0], &p.cqs[0], &p.cqs[0], &caps(MAX_QP_WR, MAX_QP_WR))?;
        big.destroy()?;
        drop(big);
        // The pair's QP 0 (an SQ of 128 WQEBBs) sends 70,000 one-WQEBB
        // WRITEs in batches of 32: its 16-bit WQEBB counter wraps once
        // and its ring 546 times, every completion in order.
        let s = [p.sge(0, 0, 8)];
        let wr = SendReq {
            sges: &s,
            opcode: WR_RDMA_WRITE,
            flags: SEND_SIGNALED,
            remote_addr: p.addr(1, 0),
            rkey: p.mrs[1].key,
            ..Default::default()
        };
        let mut batch = KVec::from_elem(wr, 32, GFP_KERNEL)?;
        let mut next = 0u64;
        while next < 70_000 {
            for (i, b) in batch.iter_mut().enumerate() {
                b.wr_id = next + i as u64;
            }
            p.qps[0].post_send(&batch).map_err(|(_, e)| e)?;
            let w = poll_n(&p.cqs[0], 32)?;
            assert_eq!(w.len(), 32);
            for (i, c) in w.iter().enumerate() {
                assert_eq!(c.status, WC_SUCCESS);
                assert_eq!(c.wr_id, next + i as u64);
            }
            next += 32;
        }
        p.destroy()
    }

    /// A ULP destroys a QP without draining while its CQ is polled: the
    /// poller, which looked the QP up for a CQE, then holds the last
    /// reference under its interrupts-off lock. Dropping it there would
    /// free the QP's queue memory with interrupts off (coherent DMA memory
    /// on a ConnectX: a WARN, or a vunmap with an IOMMU); it must be freed
    /// later, from process context.
    #[test]
    fn qp_destroyed_while_polled_is_freed_in_process_context() -> Result {
        let Pair {
            pds,
            mrs,
            cqs,
            qps: [q0, q1],
            bufs,
        } = Pair::new(None)?;
        let s = [Sge {
            addr: bufs[0].as_ptr() as u64,
            length: 8,
            lkey: mrs[0].key,
        }];
        // A completion naming QP 0 waits in CQ 0 (the software HCA runs the
        // WRITE within the post).
        q0.post_send(&[SendReq {
            wr_id: 5,
            sges: &s,
            opcode: WR_RDMA_WRITE,
            flags: SEND_SIGNALED,
            remote_addr: bufs[1].as_ptr() as u64,
            rkey: mrs[1].key,
            ..Default::default()
        }])
        .map_err(|(_, e)| e)?;
        let qpn = q0.qpn;
        let reaped = QPS_REAPED.load(Ordering::Acquire);
        let atomic = QPS_FREED_ATOMIC.load(Ordering::Acquire);
        // The poller's lookup for that CQE, then the ULP's destroy.
        let polled = cqs[0].polled_qp(qpn).ok_or(ENOENT)?;
        q0.destroy()?;
        drop(q0);
        // The poller lets go of the last reference inside its section.
        cqs[0].with_poll_lock(|| drop(polled));
        let mut freed = false;
        for _ in 0..10000 {
            if QPS_REAPED.load(Ordering::Acquire) > reaped {
                freed = true;
                break;
            }
            fsleep(Delta::from_micros(100));
        }
        // Freed by the reap work, in process context.
        assert!(freed);
        assert_eq!(QPS_FREED_ATOMIC.load(Ordering::Acquire), atomic);
        // The CQE of the destroyed QP is skipped.
        let mut wc = [Wc::default(); 2];
        assert_eq!(cqs[0].poll(&mut wc), 0);
        q1.destroy()?;
        for c in &cqs {
            c.destroy()?;
        }
        for m in &mrs {
            m.destroy()?;
        }
        for p in &pds {
            p.destroy()?;
        }
        Ok(())
    }
}

#[kunit_tests(rmlx5_dispatch)]
mod dispatch {
    use super::*;
    use kernel::new_spinlock_irq;

    /// 500 armed CQs on one completion vector complete in one burst: all
    /// their completions land while interrupts are off on the posting CPU,
    /// so the EQ holds 500 EQEs before its handler runs. Each CQ's handler
    /// is called exactly once. (An EQ of 128 entries overran and lost the
    /// rest; a ConnectX would have declared the EQ broken.)
    #[test]
    fn burst_of_500_armed_cqs_on_one_vector_loses_no_event() -> Result {
        const N: usize = 500;
        let be = crate::mlx5_core::device::get(0)?;
        let calls = AtomicU32::new(0);
        let ctx: *const AtomicU32 = &calls;
        let pd = Pd::new(&be)?;
        let mut buf = KVec::from_elem(0u8, 4096, GFP_KERNEL)?;
        let mr = Mr::new(&pd, buf.as_mut_ptr() as u64, 4096, 0xf)?;
        let caps = QpCaps {
            service: QpService::Rc,
            max_send_wr: 1,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            sq_sig_all: true,
        };
        let gate = KBox::pin_init(new_spinlock_irq!((), "rmlx5_test_burst"), GFP_KERNEL)?;
        let mut cqs: KVec<Arc<Cq>> = KVec::with_capacity(N, GFP_KERNEL)?;
        let mut qps: KVec<Arc<Qp>> = KVec::with_capacity(N, GFP_KERNEL)?;
        let run = (|| -> Result {
            for _ in 0..N {
                let cq = Cq::new(&be, 4, 0, Some((count_handler, ctx as usize)))?;
                cqs.push(cq.clone(), GFP_KERNEL)?;
                let qp = Qp::new(&pd, &cq, &cq, &caps)?;
                qps.push(qp.clone(), GFP_KERNEL)?;
                // Connected to itself: its WRITE completes on its own CQ.
                connect_with(&qp, 0, qp.qpn, Retry::DEFAULT)?;
                cq.req_notify(CQ_NEXT_COMP)?;
            }
            let sge = [Sge {
                addr: buf.as_ptr() as u64,
                length: 8,
                lkey: mr.key,
            }];
            let wr = SendReq {
                wr_id: 1,
                sges: &sge,
                opcode: WR_RDMA_WRITE,
                flags: SEND_SIGNALED,
                remote_addr: buf.as_ptr() as u64 + 64,
                rkey: mr.key,
                ..Default::default()
            };
            {
                let _irqs_off = gate.lock();
                for qp in qps.iter() {
                    qp.post_send(&[wr]).map_err(|(_, e)| e)?;
                }
            }
            let all = wait_for(&calls, N as u32);
            fsleep(Delta::from_millis(50));
            pr_info!(
                "burst: {} of {} CQ handlers called\n",
                calls.load(Ordering::Acquire),
                N
            );
            assert!(all);
            assert_eq!(calls.load(Ordering::Acquire), N as u32);
            Ok(())
        })();
        for qp in qps.iter() {
            qp.destroy()?;
        }
        for cq in cqs.iter() {
            cq.destroy()?;
        }
        mr.destroy()?;
        pd.destroy()?;
        run
    }

    #[test]
    fn n_events_one_handler_call() -> Result {
        let dev = crate::mlx5_core::device::get(0)?;
        let calls = AtomicU32::new(0);
        let p: *const AtomicU32 = &calls;
        let cq = Cq::new(&dev, 16, 0, Some((count_handler, p as usize)))?;
        {
            // What the EQ handler does for 50 EQEs naming the same CQ.
            let mut t = dev.events.lock();
            for _ in 0..50 {
                assert!(t.queue_cq(cq.cqn));
            }
        }
        dev.kick_dispatch();
        assert!(wait_for(&calls, 1));
        fsleep(Delta::from_millis(20));
        assert_eq!(calls.load(Ordering::Acquire), 1);
        cq.destroy()?;
        Ok(())
    }

    /// The EQ handler delivers a user CQ's completion event itself (once
    /// however many EQEs name it, up to `DirectCqs::MAX` CQs per pass) and
    /// queues a kernel ULP's CQ, and user CQs past the limit, for the BH
    /// dispatcher. A delivered CQ's busy count is back to zero: its
    /// destroy returns at once.
    #[test]
    fn user_cq_events_in_the_eq_handler_ulp_cqs_in_bh() -> Result {
        use crate::mlx5_core::events::DirectCqs;
        let dev = crate::mlx5_core::device::get(0)?;
        let calls = AtomicU32::new(0);
        let p: *const AtomicU32 = &calls;
        let kcq = Cq::new(&dev, 16, 0, Some((count_handler, p as usize)))?;
        let sink = Arc::new(CountSink(AtomicU32::new(0)), GFP_KERNEL)?;
        let mut ucqs = KVec::new();
        let run = (|| -> Result {
            for _ in 0..=DirectCqs::MAX {
                ucqs.push(user_cq(&dev, sink.clone())?, GFP_KERNEL)?;
            }
            let mut direct = DirectCqs::new();
            {
                let mut t = dev.events.lock();
                for cq in ucqs.iter().take(DirectCqs::MAX) {
                    assert!(!t.queue_cq_irq(cq.cqn, &mut direct));
                    assert!(!t.queue_cq_irq(cq.cqn, &mut direct));
                }
                assert_eq!(direct.len(), DirectCqs::MAX);
                // Past the limit, and a ULP's CQ: to the dispatcher.
                if let Some(last) = ucqs.last() {
                    assert!(t.queue_cq_irq(last.cqn, &mut direct));
                }
                assert!(t.queue_cq_irq(kcq.cqn, &mut direct));
            }
            direct.deliver(&dev.perf);
            assert_eq!(direct.len(), 0);
            assert_eq!(sink.0.load(Ordering::Acquire), DirectCqs::MAX as u32);
            dev.kick_dispatch();
            assert!(wait_for(&calls, 1));
            assert!(wait_for(&sink.0, DirectCqs::MAX as u32 + 1));
            Ok(())
        })();
        for cq in ucqs.iter() {
            cq.destroy()?;
        }
        kcq.destroy()?;
        run
    }

    /// CVE-2025-68209: an EQ's completion event was handled for a CQ that
    /// could not take it. Here a completion EQE naming a CQN that never
    /// existed, a polling-only CQ (no handler, cannot be armed) or a CQ
    /// that was destroyed is counted as stray and dropped; nothing is
    /// dispatched.
    #[test]
    fn cve_2025_68209_eqe_for_a_missing_unarmable_or_destroyed_cq_is_dropped() -> Result {
        let dev = crate::mlx5_core::device::get(0)?;
        let cq = Cq::new(&dev, 16, 0, None)?;
        let gone = Cq::new(&dev, 16, 0, None)?;
        let gone_cqn = gone.cqn;
        gone.destroy()?;
        let mut t = dev.events.lock();
        let before = t.stray_eqes;
        assert!(!t.queue_cq(cq.cqn));
        assert!(!t.queue_cq(0x00ff_ffff));
        assert!(!t.queue_cq(gone_cqn));
        assert_eq!(t.stray_eqes, before + 3);
        drop(t);
        cq.destroy()
    }

    /// The irdma class (a CQ pointer carried in an event and used after the
    /// CQ was destroyed). Here a queued event holds the CQ by reference and
    /// destroy waits for a dispatch in flight; after destroy returns the
    /// handler is never called again.
    #[test]
    fn irdma_class_event_for_a_destroyed_cq_never_reaches_it() -> Result {
        let dev = crate::mlx5_core::device::get(1)?;
        // Many create/queue/destroy rounds: an event queued for a CQ that
        // is destroyed before the BH runs must never reach a freed CQ
        // (KASAN would report it) nor call its handler after destroy.
        for _ in 0..500 {
            let calls = AtomicU32::new(0);
            let p: *const AtomicU32 = &calls;
            let cq = Cq::new(&dev, 4, 1, Some((count_handler, p as usize)))?;
            dev.events.lock().queue_cq(cq.cqn);
            dev.kick_dispatch();
            cq.destroy()?;
            let after = calls.load(Ordering::Acquire);
            drop(cq);
            fsleep(Delta::from_micros(20));
            assert_eq!(calls.load(Ordering::Acquire), after);
        }
        Ok(())
    }
}

#[kunit_tests(rmlx5_arm)]
mod arm {
    use super::*;

    /// Poll–arm–poll over many completions: after every arm either a
    /// missed event is reported or the next completion calls the handler;
    /// an event is never lost.
    #[test]
    fn poll_arm_poll_never_loses_an_event() -> Result {
        const TOTAL: usize = 100_000;
        const BATCH: usize = 64;
        let counters = [AtomicU32::new(0), AtomicU32::new(0)];
        let p = Pair::new(Some(&counters))?;
        let req = SendReq {
            wr_id: 0,
            sges: &[],
            opcode: WR_RDMA_WRITE,
            flags: SEND_SIGNALED,
            remote_addr: p.addr(1, 0),
            rkey: p.mrs[1].key,
            ..Default::default()
        };
        // A batch of requests and of completions is 7 KiB: on the heap,
        // not on a 16 KiB kernel stack.
        let reqs = KVec::from_elem(req, BATCH, GFP_KERNEL)?;
        let mut done = 0usize;
        let mut wc = KVec::from_elem(Wc::default(), BATCH, GFP_KERNEL)?;
        let mut waits = 0u32;
        while done < TOTAL {
            let seen = counters[0].load(Ordering::Acquire);
            let missed = p.cqs[0].req_notify(CQ_NEXT_COMP | CQ_REPORT_MISSED_EVENTS)?;
            if missed == 0 {
                p.qps[0].post_send(&reqs).map_err(|(_, e)| e)?;
                // Armed on an empty CQ: the completions must fire it.
                if !wait_for(&counters[0], seen + 1) {
                    pr_err!("lost event after {} completions\n", done);
                    return Err(ETIMEDOUT);
                }
                waits += 1;
            }
            let want = if missed == 0 { BATCH } else { 1 };
            let mut got = 0;
            while got < want {
                let n = p.cqs[0].poll(&mut wc);
                if n == 0 {
                    fsleep(Delta::from_micros(50));
                    continue;
                }
                for w in wc.iter().take(n) {
                    assert_eq!(w.status, WC_SUCCESS);
                }
                got += n;
            }
            done += got;
        }
        assert!(waits > 0);
        pr_info!(
            "poll-arm-poll: {} completions, {} handler waits\n",
            done,
            waits
        );
        p.destroy()
    }
}
