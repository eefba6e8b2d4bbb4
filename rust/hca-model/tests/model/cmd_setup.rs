// SPDX-License-Identifier: GPL-2.0

//! The host driver's setup and teardown: bringing a function up in
//! mlx5_core's order (mlx5_function_setup and the EQs of mlx5_load),
//! creating PDs, memory keys, EQs, CQs and QPs by command, the QP
//! transitions, and the way down until every page is back.

use hca_model::fabric::lid_of_index;
use hca_model::mem::Interrupt;
use hca_model::qp::QpState;
use mlx5_prm::cmd_cq::{Cqc, CreateCq, CreateCqIn, DestroyCq, DestroyCqIn};
use mlx5_prm::cmd_eq::{event_mask, CreateEq, CreateEqIn, DestroyEq, DestroyEqIn, Eqc};
use mlx5_prm::cmd_hca::{
    DisableHca, DisableHcaIn, EnableHca, EnableHcaIn, InitHca, InitHcaIn, QueryIssi, QueryIssiIn,
    SetIssi, SetIssiIn, TeardownHca, TeardownHcaIn, ISSI, QUERY_PAGES_BOOT, QUERY_PAGES_INIT,
};
use mlx5_prm::cmd_qp::{
    CreateQp, CreateQpIn, DestroyQp, DestroyQpIn, Init2RtrQp, Init2RtrQpIn, Rst2InitQp,
    Rst2InitQpIn, Rtr2RtsQp, Rtr2RtsQpIn,
};
use mlx5_prm::cmd_queue::DeliveryStatus;
use mlx5_prm::cmd_res::{
    mkey, AllocPd, AllocPdIn, AllocUar, AllocUarIn, CreateMkey, CreateMkeyIn, DeallocPd,
    DeallocPdIn, DeallocUar, DeallocUarIn, DestroyMkey, DestroyMkeyIn, Mkc, ACCESS_MODE_MTT,
    ACCESS_MODE_PA,
};
use mlx5_prm::cmd_status::{CmdError, CmdStatus};
use mlx5_prm::cqe::{CQE_SIZE, OP_OWN_OFFSET};
use mlx5_prm::eqe::{EQE_SIZE, OWNER_OFFSET};
use mlx5_prm::eqe_async::AsyncEvent;
use mlx5_prm::hca_cap::{
    query_op_mod, set_op_mod, QueryHcaCap, QueryHcaCapIn, SetHcaCapIn, CAP_GENERAL, CAP_MODE_CUR,
    CAP_MODE_MAX, CMDIF_CHECKSUM_DISABLED, CMDIF_CHECKSUM_ENABLED,
};
use mlx5_prm::ifc::Layout;
use mlx5_prm::opcode::EventType;
use mlx5_prm::qpc::{Qpc, MTU_4K};
use mlx5_prm::ring::{CQE_INIT_OP_OWN, EQE_INIT_OWNER};

use super::cmd_driver::{rc_qpc, read_eqes, Bed};
use super::harness::{HcaCtx, QpCaps, TestCq, TestEq, TestQp};
use super::mem::Kind;

impl Bed {
    // ---- bring-up and teardown ----

    /// mlx5_function_setup and the EQ part of mlx5_load: ENABLE_HCA, ISSI,
    /// boot pages, capabilities, init pages, INIT_HCA, a UAR, and the
    /// command, async, page and completion EQs (switching to command
    /// events once the command EQ exists).
    pub fn bring_up(&mut self, d: usize) {
        self.init_cmdq(d).unwrap();
        self.cmd::<EnableHca>(d, &EnableHcaIn::default(), &[])
            .unwrap();
        let issi = self
            .cmd::<QueryIssi>(d, &QueryIssiIn::default(), &[])
            .unwrap();
        assert_eq!(issi.current_issi, 0);
        assert!(issi.supported_issi_dw0 & (1 << ISSI) != 0);
        self.cmd::<SetIssi>(d, &SetIssiIn { current_issi: ISSI }, &[])
            .unwrap();
        self.startup_pages(d, QUERY_PAGES_BOOT);
        self.set_caps(d, CMDIF_CHECKSUM_DISABLED);
        self.startup_pages(d, QUERY_PAGES_INIT);
        self.cmd::<InitHca>(d, &InitHcaIn::default(), &[]).unwrap();
        let uar = self
            .cmd::<AllocUar>(d, &AllocUarIn::default(), &[])
            .unwrap()
            .uar;
        self.devs[d].uar = uar;
        let uar_addr = self.devs[d].fw.uar_addr(uar);
        let slot = self.devs[d].next_slot;
        let mut cmd = self.create_eq(d, 3, &[EventType::Cmd], 0);
        // Its own CREATE_EQ completed into it (the event route is taken
        // after the command); mlx5_core would ignore that stale EQE.
        let stale = read_eqes(&self.w.mem, &mut cmd);
        assert!(matches!(
            stale.as_slice(),
            [e] if AsyncEvent::from_eqe(e) == Some(AsyncEvent::Cmd(mlx5_prm::eqe_async::CmdEqe {
                vector: 1 << slot
            }))
        ));
        self.eq_arm(d, &cmd, uar_addr);
        self.devs[d].cmd_eq = Some(cmd);
        let async_eq = self.create_eq(
            d,
            6,
            &[
                EventType::PathMig,
                EventType::CommEst,
                EventType::SqDrained,
                EventType::CqError,
                EventType::WqCatasError,
                EventType::PathMigFailed,
                EventType::WqInvalReqError,
                EventType::WqAccessError,
                EventType::PortChange,
            ],
            0,
        );
        self.eq_arm(d, &async_eq, uar_addr);
        let page = self.create_eq(d, 2, &[EventType::PageRequest], 0);
        self.eq_arm(d, &page, uar_addr);
        self.devs[d].page_eq = Some(page);
        // The EQs cost pages the device asked for before the page EQ
        // existed; mlx5_core would give them on the first request.
        self.settle_pages(d);
        let comp = self.create_eq(d, 6, &[], 1);
        self.eq_arm(d, &comp, uar_addr);
        self.settle_pages(d);
        assert_eq!(self.w.ctx.len(), d, "functions brought up in order");
        self.w.ctx.push(HcaCtx {
            uar: uar_addr,
            comp,
            async_eq,
        });
    }

    /// QUERY_HCA_CAP (max and current), then SET_HCA_CAP with the current
    /// block patched, as mlx5_core's handle_hca_cap does.
    pub fn set_caps(&mut self, d: usize, checksum: u8) {
        let max = self
            .cmd::<QueryHcaCap>(
                d,
                &QueryHcaCapIn {
                    op_mod: query_op_mod(CAP_GENERAL, CAP_MODE_MAX),
                    ..Default::default()
                },
                &[],
            )
            .unwrap()
            .capability;
        assert!(max.rc && max.ud && !max.uc && max.num_ports == 1 && max.bf);
        let cur = self
            .cmd_out::<QueryHcaCap>(
                d,
                &QueryHcaCapIn {
                    op_mod: query_op_mod(CAP_GENERAL, CAP_MODE_CUR),
                    ..Default::default()
                },
                &[],
                0,
            )
            .unwrap();
        let mut set = vec![0u8; SetHcaCapIn::SIZE];
        SetHcaCapIn {
            op_mod: set_op_mod(CAP_GENERAL),
            ..Default::default()
        }
        .encode(&mut set)
        .unwrap();
        set[16..].copy_from_slice(&cur[16..]);
        let mut cap = mlx5_prm::hca_cap::HcaCap::decode(&cur[16..]).unwrap();
        cap.cmdif_checksum = checksum;
        cap.pkey_table_size = 0;
        cap.log_uar_page_sz = 0;
        cap.uar_4k = max.uar_4k;
        cap.num_vhca_ports = max.num_vhca_ports;
        cap.patch(&mut set[16..]).unwrap();
        let r = self.exec_raw(d, &set, 16).unwrap();
        assert_eq!(r.delivery, DeliveryStatus::Ok);
        assert_eq!(r.status(), (CmdStatus::Ok, 0), "SET_HCA_CAP");
        self.devs[d].checksums = checksum == CMDIF_CHECKSUM_ENABLED;
    }

    /// Gives whatever the device says it lacks (page EQ requests, or a
    /// regular-pages query if none arrived).
    pub fn settle_pages(&mut self, d: usize) {
        self.service_pages(d);
        let n = self.query_pages(d, mlx5_prm::cmd_hca::QUERY_PAGES_REGULAR);
        if n > 0 {
            self.give(d, n as usize).unwrap();
        }
        assert_eq!(
            self.devs[d].fw.page_counts().held as usize,
            self.devs[d].given.len()
        );
    }

    /// CREATE_EQ of `1 << log` EQEs receiving `events`, on vector `intr`.
    pub fn create_eq(&mut self, d: usize, log: u32, events: &[EventType], intr: u16) -> TestEq {
        let size = (EQE_SIZE as u64) << log;
        let buf = self.w.mem.alloc(size, Kind::DevWrite);
        for i in 0..(1u64 << log) {
            self.w.mem.put(
                buf + i * EQE_SIZE as u64 + OWNER_OFFSET as u64,
                &[EQE_INIT_OWNER],
            );
        }
        let pas: Vec<u64> = (0..size.div_ceil(4096)).map(|k| buf + k * 4096).collect();
        let input = CreateEqIn {
            eq_context_entry: Eqc {
                log_eq_size: log as u8,
                uar_page: self.devs[d].uar,
                intr,
                ..Eqc::default()
            },
            event_bitmask: event_mask(events),
        };
        let eqn = self.cmd::<CreateEq>(d, &input, &pas).unwrap().eq_number;
        TestEq {
            eqn,
            buf,
            log,
            ci: 0,
        }
    }

    /// CREATE_CQ of `1 << log` CQEs on the completion EQ.
    pub fn create_cq(&mut self, d: usize, log: u32) -> TestCq {
        self.create_cq_on(d, log, false)
    }

    /// CREATE_CQ as [`Bed::create_cq`]; with `scatter`, the ring's page
    /// list names scattered bus pages (as a user CQ's pinned pages).
    pub fn create_cq_on(&mut self, d: usize, log: u32, scatter: bool) -> TestCq {
        let (input, pas, buf, dbr) = self.cq_input(d, log, scatter);
        let cqn = self.cmd::<CreateCq>(d, &input, &pas).unwrap().cqn;
        self.settle_pages(d);
        TestCq {
            hca: self.devs[d].h,
            cqn,
            buf,
            dbr,
            log,
            ci: 0,
            arm_sn: 0,
        }
    }

    /// The CREATE_CQ input and page list of a new CQ of `1 << log` CQEs
    /// (see [`Bed::create_cq_on`]), with its ring and doorbell record.
    pub fn cq_input(
        &mut self,
        d: usize,
        log: u32,
        scatter: bool,
    ) -> (CreateCqIn, Vec<u64>, u64, u64) {
        let size = (CQE_SIZE as u64) << log;
        let buf = self.w.mem.alloc(size, Kind::DevWrite);
        for i in 0..(1u64 << log) {
            self.w.mem.put(
                buf + i * CQE_SIZE as u64 + OP_OWN_OFFSET as u64,
                &[CQE_INIT_OP_OWN],
            );
        }
        let dbr = self.w.mem.alloc(8, Kind::DevRead);
        let pas = self.page_list(buf, size, scatter);
        let input = CreateCqIn {
            cq_context: Cqc {
                log_cq_size: log as u8,
                uar_page: self.devs[d].uar,
                c_eqn_or_apu_element: u32::from(self.w.ctx[d].comp.eqn),
                dbr_addr: dbr,
                ..Cqc::default()
            },
        };
        (input, pas, buf, dbr)
    }

    /// The page list of `size` bytes at `buf`: the pages themselves, or
    /// scattered bus pages that map them.
    fn page_list(&mut self, buf: u64, size: u64, scatter: bool) -> Vec<u64> {
        let n = size.div_ceil(4096);
        if scatter {
            self.w.mem.map_scattered(buf, n)
        } else {
            (0..n).map(|k| buf + k * 4096).collect()
        }
    }

    /// CREATE_QP of an RC QP with `caps`, RQ then SQ in one buffer.
    pub fn create_qp(
        &mut self,
        d: usize,
        pd: u32,
        scq: &TestCq,
        rcq: &TestCq,
        caps: QpCaps,
    ) -> TestQp {
        self.create_qp_on(d, pd, scq, rcq, caps, false)
    }

    /// CREATE_QP as [`Bed::create_qp`]; with `scatter`, the buffer's page
    /// list names scattered bus pages.
    pub fn create_qp_on(
        &mut self,
        d: usize,
        pd: u32,
        scq: &TestCq,
        rcq: &TestCq,
        caps: QpCaps,
        scatter: bool,
    ) -> TestQp {
        self.create_qp_of(d, pd, (scq, rcq), caps, scatter, rc_qpc().st)
            .unwrap()
    }

    /// CREATE_QP of a QP of service type `st` (`qpc::ST_*`) on the CQs
    /// `cqs` (send, receive), as [`Bed::create_qp_on`]; the command's error
    /// if the device refuses it.
    pub fn create_qp_of(
        &mut self,
        d: usize,
        pd: u32,
        cqs: (&TestCq, &TestCq),
        caps: QpCaps,
        scatter: bool,
        st: u8,
    ) -> Result<TestQp, CmdError> {
        let (scq, rcq) = cqs;
        let rq_stride = (caps.max_recv_sge.max(1) * 16).next_power_of_two();
        let rq_bytes = u64::from(caps.rq_wqes * rq_stride);
        let size = rq_bytes + u64::from(caps.sq_wqebbs) * 64;
        let buf = self.w.mem.alloc(size, Kind::DevRead);
        let dbr = self.w.mem.alloc(8, Kind::DevRead);
        let pas = self.page_list(buf, size, scatter);
        let input = CreateQpIn {
            ece: 0,
            qpc: Qpc {
                pd,
                uar_page: self.devs[d].uar,
                log_rq_size: caps.rq_wqes.trailing_zeros() as u8,
                log_rq_stride: (rq_stride.trailing_zeros() - 4) as u8,
                log_sq_size: caps.sq_wqebbs.trailing_zeros() as u8,
                cqn_snd: scq.cqn,
                cqn_rcv: rcq.cqn,
                dbr_addr: dbr,
                st,
                ..rc_qpc()
            },
        };
        let qpn = self.cmd::<CreateQp>(d, &input, &pas)?.qpn;
        self.settle_pages(d);
        Ok(TestQp {
            hca: self.devs[d].h,
            qpn,
            sq_buf: buf + rq_bytes,
            sq_wqebbs: caps.sq_wqebbs,
            rq_buf: buf,
            rq_wqes: caps.rq_wqes,
            rq_stride,
            dbr,
            uar: self.devs[d].fw.uar_addr(self.devs[d].uar),
            bfreg: 0,
            half: 0,
            cur_post: 0,
            rq_head: 0,
            sq_wrid: vec![0; caps.sq_wqebbs as usize],
            rq_wrid: vec![0; caps.rq_wqes as usize],
            send_cq: scq.cqn,
            recv_cq: rcq.cqn,
        })
    }

    /// ALLOC_PD.
    pub fn alloc_pd(&mut self, d: usize) -> u32 {
        self.cmd::<AllocPd>(d, &AllocPdIn::default(), &[])
            .unwrap()
            .pd
    }

    /// CREATE_MKEY over `len` bytes of contiguous memory at `addr`, PA or
    /// MTT (4 KiB pages), with all access rights; returns the key.
    pub fn reg_mr(
        &mut self,
        d: usize,
        pd: u32,
        addr: u64,
        len: u64,
        mtt: bool,
        key_7_0: u8,
    ) -> u32 {
        let mut mkc = Mkc {
            a: true,
            rw: true,
            rr: true,
            lw: true,
            lr: true,
            qpn: 0xff_ffff,
            mkey_7_0: key_7_0,
            pd,
            start_addr: addr,
            len,
            ..Mkc::default()
        };
        let mut pas = Vec::new();
        if mtt {
            mkc.set_access_mode(ACCESS_MODE_MTT);
            mkc.log_page_size = 12;
            let first = addr & !0xfff;
            let n = (addr - first + len).div_ceil(4096);
            // MTT entries carry mlx5_ib's present bits (read | write).
            pas = (0..n).map(|k| (first + k * 4096) | 3).collect();
            if pas.len() % 2 == 1 {
                pas.push(0);
            }
            mkc.translations_octword_size = mlx5_prm::cmd_res::mtt_octwords(pas.len() as u32);
        } else {
            mkc.set_access_mode(ACCESS_MODE_PA);
        }
        let input = CreateMkeyIn {
            pg_access: false,
            memory_key_mkey_entry: mkc,
            translations_octword_actual_size: mkc.translations_octword_size,
        };
        let index = self.cmd::<CreateMkey>(d, &input, &pas).unwrap().mkey_index;
        let key = mkey(index, key_7_0);
        self.w.mem.add_mr(addr, len, self.devs[d].h, key);
        key
    }

    /// The three transitions to RTS of QP `qp`, sending to `peer`.
    pub fn to_rts(&mut self, d: usize, qp: &TestQp, peer: &TestQp) {
        let mut q = rc_qpc();
        q.rre = true;
        q.rwe = true;
        q.rae = true;
        q.primary_address_path.vhca_port_num = 1;
        self.cmd::<Rst2InitQp>(
            d,
            &Rst2InitQpIn {
                qpn: qp.qpn,
                qpc: q,
                ..Default::default()
            },
            &[],
        )
        .unwrap();
        let mut q = rc_qpc();
        q.mtu = MTU_4K;
        q.remote_qpn = peer.qpn;
        q.next_rcv_psn = 0x100;
        q.log_rra_max = 2;
        q.min_rnr_nak = 1;
        q.primary_address_path.rlid = lid_of_index(peer.hca as u16);
        q.primary_address_path.sl = 3;
        self.cmd::<Init2RtrQp>(
            d,
            &Init2RtrQpIn {
                qpn: qp.qpn,
                qpc: q,
                ..Default::default()
            },
            &[],
        )
        .unwrap();
        let mut q = rc_qpc();
        q.primary_address_path.ack_timeout = 14;
        q.retry_count = 7;
        q.rnr_retry = 7;
        q.next_send_psn = 0x100;
        q.log_sra_max = 2;
        self.cmd::<Rtr2RtsQp>(
            d,
            &Rtr2RtsQpIn {
                qpn: qp.qpn,
                qpc: q,
                ..Default::default()
            },
            &[],
        )
        .unwrap();
        assert_eq!(self.w.state(qp), QpState::Rts);
    }

    /// DESTROY_QP, DESTROY_CQ, DESTROY_MKEY, DEALLOC_PD.
    pub fn destroy_qp(&mut self, d: usize, qpn: u32) {
        self.cmd::<DestroyQp>(d, &DestroyQpIn { qpn }, &[]).unwrap();
    }

    pub fn destroy_cq(&mut self, d: usize, cqn: u32) {
        self.cmd::<DestroyCq>(d, &DestroyCqIn { cqn }, &[]).unwrap();
    }

    pub fn dereg_mr(&mut self, d: usize, key: u32) {
        self.cmd::<DestroyMkey>(
            d,
            &DestroyMkeyIn {
                mkey_index: key >> 8,
            },
            &[],
        )
        .unwrap();
        let h = self.devs[d].h;
        self.w.mem.remove_mr(h, key);
    }

    pub fn dealloc_pd(&mut self, d: usize, pd: u32) {
        self.cmd::<DeallocPd>(d, &DeallocPdIn { pd }, &[]).unwrap();
    }

    /// mlx5_unload + mlx5_function_teardown: the EQs (the command EQ last,
    /// back to polling first), the UAR, TEARDOWN_HCA, every page back,
    /// DISABLE_HCA. Every object must already be destroyed.
    pub fn tear_down(&mut self, d: usize) {
        let ctx = &self.w.ctx[d];
        let (comp, async_eqn) = (ctx.comp.eqn, ctx.async_eq.eqn);
        let page = self.devs[d].page_eq.take().map(|e| e.eqn);
        for eqn in [Some(comp), Some(async_eqn), page].into_iter().flatten() {
            self.cmd::<DestroyEq>(d, &DestroyEqIn { eq_number: eqn }, &[])
                .unwrap();
        }
        let cmd = self.devs[d].cmd_eq.take().unwrap();
        self.cmd::<DestroyEq>(d, &DestroyEqIn { eq_number: cmd.eqn }, &[])
            .unwrap();
        let uar = self.devs[d].uar;
        self.cmd::<DeallocUar>(d, &DeallocUarIn { uar }, &[])
            .unwrap();
        self.cmd::<TeardownHca>(d, &TeardownHcaIn::default(), &[])
            .unwrap();
        self.reclaim_all(d);
        self.cmd::<DisableHca>(d, &DisableHcaIn::default(), &[])
            .unwrap();
        assert!(self.devs[d].given.is_empty(), "driver still counts pages");
        let c = self.devs[d].fw.page_counts();
        assert_eq!(c.held, 0);
        assert_eq!(c.given_total, c.returned_total, "every page came back");
    }

    /// The interrupts raised so far.
    pub fn irqs(&self) -> &[Interrupt] {
        &self.w.mem.irqs
    }
}
