// SPDX-License-Identifier: GPL-2.0

//! KUnit tests of the uverbs layer's parts that need no process: handle
//! tables, event queues, QP geometry, shared pages and the lifetime of
//! the objects behind a handle.

use kernel::{
    prelude::*,
    sync::Arc, //
};

use super::{
    cmd::default_limits,
    event::{
        EventQueue,
        EventSlot,
        QueueKind,
        EPOLLERR, //
    },
    objects::{
        qp_geometry,
        CqPlace,
        QpPlace,
        Ucq,
        Upd,
        Uqp, //
    },
    table::Table,
};
use crate::hca_model::caps::Caps;
use crate::mem::pages::PageBuf;
use crate::mlx5_prm::doorbell::bf_reg_offset;
use crate::rmlx5_abi::uapi::{
    AsyncEvent,
    CmdHdr,
    CreateQp,
    EVENT_COMM_EST,
    EVENT_DEVICE_FATAL,
    EVENT_QP_ACCESS_ERR,
    EVENT_QP_FATAL,
    QPT_RC, //
};
use crate::rmlx5_abi::wire::Wire;

#[kunit_tests(rmlx5_uverbs)]
mod uverbs_kunit {
    use super::*;

    #[test]
    fn table_handles_are_local_and_reused() -> Result {
        let mut t: Table<u32> = Table::new(3);
        assert_eq!(t.get(0).err(), Some(EINVAL));
        let a = t.insert(Arc::new(10, GFP_KERNEL)?)?;
        let b = t.insert(Arc::new(20, GFP_KERNEL)?)?;
        assert_eq!((a, b), (1, 2));
        assert_eq!(*t.obj(b)?, 20);
        t.hold(a)?;
        assert_eq!(t.remove(a).err(), Some(EBUSY));
        t.unhold(a);
        assert_eq!(*t.remove(a)?, 10);
        assert_eq!(t.remove(a).err(), Some(EINVAL));
        assert_eq!(t.insert(Arc::new(30, GFP_KERNEL)?)?, 1);
        assert_eq!(t.insert(Arc::new(40, GFP_KERNEL)?)?, 3);
        assert_eq!(t.insert(Arc::new(50, GFP_KERNEL)?).err(), Some(ENOSPC));
        assert_eq!(t.len(), 3);
        assert_eq!(t.drain().len(), 3);
        assert_eq!(t.len(), 0);
        assert_eq!(t.get(u32::MAX).err(), Some(EINVAL));
        // Drained for good: a create racing the teardown is refused.
        assert_eq!(t.insert(Arc::new(60, GFP_KERNEL)?).err(), Some(EIO));
        assert_eq!(t.next_handle().err(), Some(EIO));
        Ok(())
    }

    /// The lowest free handle is handed out whatever the order of
    /// removals, with a table large enough that a scan from 0 for each
    /// insert would show.
    #[test]
    fn table_reuses_the_lowest_free_handle() -> Result {
        const N: u32 = 16384;
        let mut t: Table<u32> = Table::new(N as usize);
        for i in 1..=N {
            assert_eq!(t.insert(Arc::new(i, GFP_KERNEL)?)?, i);
        }
        assert_eq!(t.next_handle().err(), Some(ENOSPC));
        for h in [9000, 17, 5000, 16384] {
            t.remove(h)?;
        }
        for h in [17, 5000, 9000, 16384] {
            assert_eq!(t.next_handle()?, h);
            assert_eq!(t.insert(Arc::new(0, GFP_KERNEL)?)?, h);
        }
        assert_eq!(t.len(), N as usize);
        // Every even handle goes, then comes back in order.
        for h in (2..=N).step_by(2) {
            t.remove(h)?;
        }
        for h in (2..=N).step_by(2) {
            assert_eq!(t.insert(Arc::new(h, GFP_KERNEL)?)?, h);
        }
        assert_eq!(*t.obj(N)?, N);
        assert_eq!(t.drain().len(), N as usize);
        Ok(())
    }

    #[test]
    fn comp_events_coalesce_and_leave_with_their_cq() -> Result {
        let q = EventQueue::new(QueueKind::Comp)?;
        let s1 = EventSlot::new(0x1111)?;
        let s2 = EventSlot::new(0x2222)?;
        q.attach()?;
        q.attach()?;
        let mut out = [0u8; 8];
        assert_eq!(q.pop(&mut out, true).err(), Some(EAGAIN));
        q.post(&s1, 0);
        q.post(&s1, 0);
        q.post(&s2, 0);
        assert_eq!(q.pending(), 2);
        // Too short a buffer: EINVAL, and the event stays.
        assert_eq!(q.pop(&mut out[..7], true).err(), Some(EINVAL));
        assert_eq!(q.pop(&mut out, true)?, 8);
        assert_eq!(u64::from_ne_bytes(out), 0x1111);
        assert_eq!(s1.reported(), 1);
        // Destroying the CQ removes its unread event.
        q.detach(&s2);
        assert_eq!(q.pending(), 0);
        assert_eq!(s2.reported(), 0);
        q.detach(&s1);
        Ok(())
    }

    #[test]
    fn closed_queue_discards_and_reports_eio() -> Result {
        let q = EventQueue::new(QueueKind::Comp)?;
        let s = EventSlot::new(7)?;
        q.attach()?;
        q.post(&s, 0);
        q.close();
        assert_eq!(q.pending(), 0);
        q.post(&s, 0);
        assert_eq!(q.pending(), 0);
        let mut out = [0u8; 8];
        assert_eq!(q.pop(&mut out, true).err(), Some(EIO));
        assert!(!q.is_unused());
        q.detach(&s);
        assert!(q.is_unused());
        Ok(())
    }

    #[test]
    fn queue_closed_after_pending_delivers_then_reports_eio() -> Result {
        // A disassociated context's async file: DEVICE_FATAL stays
        // readable, then EIO, and nothing later is queued.
        let q = EventQueue::new(QueueKind::Async)?;
        let s = EventSlot::new(0)?;
        q.attach()?;
        q.post(&s, EVENT_DEVICE_FATAL);
        q.close_after_pending();
        q.post(&s, 3);
        assert_eq!(q.pending(), 1);
        let mut out = [0u8; 16];
        assert_eq!(q.pop(&mut out, true)?, QueueKind::Async.event_size());
        let mut ty = [0u8; 4];
        ty.copy_from_slice(out.get(8..12).ok_or(EINVAL)?);
        assert_eq!(u32::from_ne_bytes(ty), EVENT_DEVICE_FATAL);
        assert_eq!(q.pop(&mut out, false).err(), Some(EIO));
        assert_eq!(q.poll_mask(), EPOLLERR);
        q.detach(&s);
        assert!(q.is_unused());
        Ok(())
    }

    #[test]
    fn many_slots_never_lose_an_event() -> Result {
        let q = EventQueue::new(QueueKind::Async)?;
        let mut slots = KVec::new();
        for i in 0..100u64 {
            q.attach()?;
            slots.push(EventSlot::new(i)?, GFP_KERNEL)?;
        }
        for s in slots.iter() {
            q.post(s, EVENT_QP_FATAL);
        }
        assert_eq!(q.pending(), 100);
        let mut out = [0u8; 16];
        for i in 0..100u64 {
            assert_eq!(q.pop(&mut out, true)?, AsyncEvent::SIZE);
            let ev = AsyncEvent::read(&out).ok_or(EINVAL)?;
            assert_eq!(ev.element, i);
            assert_eq!(ev.event_type, EVENT_QP_FATAL);
        }
        for s in slots.iter() {
            q.detach(s);
        }
        Ok(())
    }

    #[test]
    fn async_events_coalesce_per_type_only() -> Result {
        let q = EventQueue::new(QueueKind::Async)?;
        q.attach()?;
        q.attach()?;
        let qp = EventSlot::new(0xb0)?;
        let other = EventSlot::new(0xc0)?;
        // COMM_EST unread, then the QP's access error, then COMM_EST again.
        q.post(&qp, EVENT_COMM_EST);
        q.post(&other, EVENT_QP_FATAL);
        q.post(&qp, EVENT_QP_ACCESS_ERR);
        q.post(&qp, EVENT_COMM_EST);
        assert_eq!(q.pending(), 2);
        let mut out = [0u8; 16];
        let mut next = || -> Result<(u64, u32)> {
            q.pop(&mut out, true)?;
            let ev = AsyncEvent::read(&out).ok_or(EINVAL)?;
            Ok((ev.element, ev.event_type))
        };
        // One type per read, lowest first; the rest waits behind the
        // events queued meanwhile.
        assert_eq!(next()?, (0xb0, EVENT_QP_ACCESS_ERR));
        assert_eq!(next()?, (0xc0, EVENT_QP_FATAL));
        assert_eq!(next()?, (0xb0, EVENT_COMM_EST));
        assert_eq!(next().err(), Some(EAGAIN));
        assert_eq!(qp.reported(), 2);
        // Detaching with types pending removes all of them.
        q.post(&qp, EVENT_COMM_EST);
        q.post(&qp, EVENT_QP_ACCESS_ERR);
        q.detach(&qp);
        assert_eq!(q.pending(), 0);
        q.detach(&other);
        Ok(())
    }

    #[test]
    fn qp_geometry_rounds_and_bounds() -> Result {
        let limits = default_limits();
        let mut req = CreateQp {
            hdr: CmdHdr {
                size: CreateQp::SIZE as u32,
                flags: 0,
            },
            qp_type: QPT_RC,
            max_send_wr: 100,
            max_recv_wr: 100,
            max_send_sge: 1,
            max_recv_sge: 1,
            ..CreateQp::default()
        };
        let g = qp_geometry(&req, &limits)?;
        assert_eq!(g.sq_wqe_cnt, 128);
        assert_eq!(g.rq_wqe_cnt, 128);
        assert_eq!(g.rq_wqe_shift, 4);
        assert_eq!(g.sq_buf_offset, 128 * 16);
        assert_eq!(g.buf_bytes, 128 * 16 + 128 * 64);
        assert!(g.max_send_wr >= 100);
        req.max_send_sge = limits.max_sge;
        req.max_inline_data = limits.max_inline_data;
        req.max_send_wr = limits.max_qp_wr;
        req.max_recv_wr = limits.max_qp_wr;
        req.max_recv_sge = limits.max_sge;
        let g = qp_geometry(&req, &limits)?;
        assert!(g.sq_wqe_cnt.is_power_of_two());
        assert!(g.max_send_sge >= limits.max_sge);
        // Within the limits is within what the HCA accepts.
        assert!(g.sq_wqe_cnt <= 1 << Caps::DEFAULT.max_log_sq_wqebbs);
        assert!(g.rq_wqe_cnt <= 1 << Caps::DEFAULT.max_log_rq_wqes);
        Ok(())
    }

    #[test]
    fn page_buf_is_zeroed_whole_pages() -> Result {
        let b = PageBuf::new(1)?;
        assert_eq!(b.len(), 4096);
        assert_eq!(b.read_u32(0)?, 0);
        assert_eq!(b.read_u32(4092)?, 0);
        assert_eq!(b.read_u32(4096).err(), Some(EINVAL));
        assert_eq!(b.read_u32(2).err(), Some(EINVAL));
        assert_eq!(PageBuf::new(8193)?.len(), 3 * 4096);
        Ok(())
    }

    /// A destroy command ends the device object even while a racing
    /// command (MODIFY_QP, QUERY_QP, KICK) still holds a reference to it:
    /// once the QP's destroy returned, its CQ can be destroyed, and the
    /// stale reference gets `EINVAL`, never another QP that reused the
    /// number. (Found by the racing-destroy CVE test: the CQ's destroy
    /// failed and the CQ, and with it the software HCA, leaked.)
    #[test]
    fn destroy_ends_an_object_a_racing_command_holds() -> Result {
        let dev = crate::mlx5_core::device::get(0)?;
        let uar = dev.be.clone().alloc_uar()?;
        let async_queue = EventQueue::new(QueueKind::Async)?;
        let pd = Upd::new(&dev)?;
        let cq_place = CqPlace {
            dev: &dev,
            comp_vector: 0,
            uar_addr: uar.addr(),
        };
        let cq = Arc::new(
            Ucq::new(&cq_place, 16, 1, None, async_queue.clone())?,
            GFP_KERNEL,
        )?;
        let req = CreateQp {
            hdr: CmdHdr {
                size: CreateQp::SIZE as u32,
                flags: 0,
            },
            qp_type: QPT_RC,
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            ..CreateQp::default()
        };
        let geom = qp_geometry(&req, &default_limits())?;
        let place = QpPlace {
            pd: &pd,
            send_cq: &cq,
            recv_cq: &cq,
            uar_addr: uar.addr(),
        };
        let qp = Arc::new(
            Uqp::new(&place, 2, 1, 1, 1, geom, 0, async_queue.clone())?,
            GFP_KERNEL,
        )?;
        // What a command racing with DESTROY_QP holds.
        let held = qp.clone();
        assert!(held.qp.query().is_ok());
        // The device refuses to drop a CQ that a QP still uses.
        assert_eq!(cq.cq.destroy().err(), Some(EBUSY));
        qp.qp.destroy()?;
        assert_eq!(held.qp.query().err(), Some(EINVAL));
        assert_eq!(
            uar.kick_recv(held.qpn(), held.qp.gone()).err(),
            Some(EINVAL)
        );
        let bf = bf_reg_offset(0).map_err(|_| EINVAL)?;
        let target = held.qp.kick_target();
        assert_eq!(
            uar.kick_send(&target, u32::try_from(bf)?, false, 0).err(),
            Some(EINVAL)
        );
        // A second destroy (the drop of the last reference) does nothing.
        qp.qp.destroy()?;
        drop(qp);
        cq.cq.destroy()?;
        assert!(cq.cq.is_destroyed());
        drop(held);
        drop(cq);
        drop(pd);
        drop(uar);
        Ok(())
    }
}
