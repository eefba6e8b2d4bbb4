// SPDX-License-Identifier: GPL-2.0

//! The data-path self-test of a function that came up (module parameter
//! `cx_selftest`): every object made by command, every queue entry in the
//! real mlx5 format, traffic between two RC QPs of the same function.
//!
//! In order: a completion EQ on MSI-X vector 1 with its own interrupt
//! handler (vector 0 and polling if only one vector was granted), a PD, a
//! memory key over a coherent data buffer (MTT mode, one entry per 4 KiB
//! page), a CQ (coherent ring of 64 CQEs whose `op_own` start as 0xf0,
//! doorbell record), two RC QPs on them (one coherent buffer each, RQ
//! then SQ, and a doorbell record), taken RST2INIT, INIT2RTR and RTR2RTS
//! towards each other through the port's LID. Then the CQ and the EQ are
//! armed, a receive WQE is posted on the second QP (receive counter in its
//! doorbell record), an RDMA WRITE of 4 KiB and a SEND of 64 bytes on the
//! first (send counter, then the control segment's first 8 bytes as one
//! 64-bit store to BlueFlame register 0 of the driver's UAR page, the
//! doorbell of `mlx5_ib`'s kernel QPs). The test waits, bounded, for the
//! three CQEs (owner bit, opcode, byte count, WQE counter), compares the
//! bytes that arrived, and checks that the CQ's completion event reached
//! the EQ (and its interrupt fired). Everything is destroyed in reverse
//! order, and the memory is freed only if every destroy succeeded: the
//! device may write what it still owns.
//!
//! The caller holds the function's lock, so the asynchronous EQ's threaded
//! handler cannot answer the page requests that each queue's creation
//! causes; the self-test answers them itself, polling that EQ after every
//! command and while it waits.

use core::sync::atomic::{
    AtomicU32,
    Ordering, //
};
use kernel::sync::barrier::{
    mb,
    Write, //
};
use kernel::{
    irq::{
        self,
        IrqReturn, //
    },
    pci::IrqVectorRegistration,
    prelude::*, //
};

use super::bus::CxBus;
use super::eq::PageEq;
use crate::mlx5_cmdif::function::Function;
use crate::mlx5_prm::{
    cmd_cq::{
        Cqc,
        CreateCq,
        CreateCqIn,
        DestroyCq,
        DestroyCqIn, //
    },
    cmd_eq::{
        event_mask,
        CreateEq,
        CreateEqIn,
        DestroyEq,
        DestroyEqIn,
        Eqc, //
    },
    cmd_qp::{
        CreateQp,
        CreateQpIn,
        DestroyQp,
        DestroyQpIn,
        Init2RtrQp,
        Init2RtrQpIn,
        Rst2InitQp,
        Rst2InitQpIn,
        Rtr2RtsQp,
        Rtr2RtsQpIn, //
    },
    cmd_res::{
        mkey,
        mtt_octwords,
        AllocPd,
        AllocPdIn,
        CreateMkey,
        CreateMkeyIn,
        DeallocPd,
        DeallocPdIn,
        DestroyMkey,
        DestroyMkeyIn,
        Mkc,
        ACCESS_MODE_MTT, //
    },
    cmd_vport::{
        QueryHcaVportContext,
        QueryHcaVportContextIn, //
    },
    command::Command,
    doorbell::{
        uar_reg_offset,
        ArmCmd,
        CqArm,
        UarCqDoorbell,
        CQ_DBR_ARM_OFFSET,
        UAR_CQ_DOORBELL_OFFSET, //
    },
    qpc::{
        Ads,
        Qpc,
        MTU_1K,
        PM_STATE_MIGRATED,
        RQ_TYPE_REGULAR,
        ST_RC, //
    },
};

mod check;
mod mem;
mod post;

use mem::Mem;

/// log2 of the completion EQ's entries (one 4 KiB page).
const LOG_EQ_SIZE: u8 = 6;
/// log2 of the CQ's entries (one 4 KiB page of 64-byte CQEs).
const LOG_CQ_SIZE: u8 = 6;
/// log2 of each QP's receive WQEs.
const LOG_RQ_SIZE: u8 = 2;
/// Receive WQE stride: one data segment and the terminator.
const RQ_STRIDE: usize = 32;
/// log2 of each QP's send WQEBBs.
const LOG_SQ_SIZE: u8 = 3;
/// Bytes of the RQ, which the SQ follows in the QP's buffer.
const RQ_BYTES: usize = RQ_STRIDE << LOG_RQ_SIZE;
/// The size of every queue buffer and of the doorbell record page.
const PAGE: usize = 4096;
/// Where the doorbell records sit in their page: the CQ's, then one per
/// QP, each in its own 64-byte line as mlx5's doorbell pages keep them.
const CQ_DBR_AT: usize = 0;
const QP_DBR_AT: [usize; 2] = [64, 128];
/// The data buffer: four pages, the SEND's source, the RECV's target, the
/// RDMA WRITE's source and its target.
const DATA_PAGES: usize = 4;
const SEND_SRC: usize = 0;
const RECV_DST: usize = PAGE;
const WRITE_SRC: usize = 2 * PAGE;
const WRITE_DST: usize = 3 * PAGE;
/// Bytes sent, and bytes written.
const SEND_LEN: usize = 64;
const WRITE_LEN: usize = PAGE;
/// The low byte of the memory key (the driver's choice).
const KEY_7_0: u8 = 0x5e;
/// `MLX5_IB_MTT_PRESENT`: mlx5_ib marks every MTT entry readable and
/// writable in its low bits.
const MTT_PRESENT: u64 = 0x3;
/// The packet sequence number both QPs start at.
const PSN: u32 = 0x1234;
/// The port the QPs use.
const PORT: u8 = 1;
/// How long the device gets for the completions, the event and the
/// interrupt.
const WAIT_MS: i64 = 2000;

/// The objects created so far (and not yet destroyed).
#[derive(Default)]
struct Objects {
    eqn: Option<u8>,
    pd: Option<u32>,
    mkey_index: Option<u32>,
    cqn: Option<u32>,
    qpn: [Option<u32>; 2],
}

/// The hard interrupt handler of the completion EQ's vector: counts.
struct CompIrq {
    count: AtomicU32,
}

impl irq::Handler for CompIrq {
    fn handle(&self) -> IrqReturn {
        self.count.fetch_add(1, Ordering::Relaxed);
        IrqReturn::Handled
    }
}

/// What a successful run found, for the summary line.
#[derive(Default)]
struct Outcome {
    qpn: [u32; 2],
    eqn: u8,
    cqes: u32,
    interrupts: u32,
}

/// The command interface and the state the self-test works with.
struct Ctx<'a, 'bound> {
    bus: &'a mut CxBus<'bound>,
    function: &'a mut Function,
    /// The asynchronous EQ, whose page requests the self-test answers.
    page_eq: Option<&'a mut PageEq>,
    /// The driver's UAR page.
    uar: u32,
    /// Commands issued.
    commands: u32,
    /// A command timed out: the device may still carry it out (a create
    /// included), so no further command is issued and all memory is kept.
    dead: bool,
}

/// Logs a failed step and returns `e`.
fn step_failed(ctx: &Ctx<'_, '_>, step: &str, e: Error) -> Error {
    dev_err!(
        ctx.bus.pdev(),
        "self-test: {} failed: error {}\n",
        step,
        e.to_errno()
    );
    e
}

impl Ctx<'_, '_> {
    /// Runs command `C`, logging a failure (the crate's error names the
    /// command, its status and syndrome), then answers the page requests
    /// it may have caused.
    fn exec<C: Command>(&mut self, input: &C::In, pas: &[u64]) -> Result<C::Out> {
        if self.dead {
            return Err(ETIMEDOUT);
        }
        let cmd = self.function.cmdif().ok_or(ENODEV)?;
        self.commands += 1;
        let r = cmd.exec::<C, _>(self.bus, input, pas);
        if r.as_ref().is_err_and(|e| e.is_timeout()) {
            self.dead = true;
        } else {
            self.answer_page_requests();
        }
        r.map_err(|e| {
            dev_err!(self.bus.pdev(), "self-test: {}\n", format_args!("{e}"));
            Error::from_errno(-e.errno())
        })
    }

    /// Answers what the asynchronous EQ holds (its threaded handler waits
    /// for the lock the caller holds).
    fn answer_page_requests(&mut self) {
        if self.dead {
            return;
        }
        if let Some(eq) = self.page_eq.as_deref_mut() {
            if eq.has_requests() {
                eq.answer(self.bus, self.function);
            }
        }
    }

    /// The BAR0 offset of register `reg` of the driver's UAR page.
    fn uar_reg(&self, reg: usize) -> usize {
        // Past BAR0 on overflow: the bus reports the store.
        uar_reg_offset(self.uar, reg).unwrap_or(usize::MAX)
    }

    /// Creates the objects into `o` and runs the traffic.
    fn exercise(
        &mut self,
        m: &Mem,
        o: &mut Objects,
        vector: u16,
        irq: Option<&CompIrq>,
    ) -> Result<Outcome> {
        let eqn = self
            .exec::<CreateEq>(
                &CreateEqIn {
                    eq_context_entry: Eqc {
                        log_eq_size: LOG_EQ_SIZE,
                        uar_page: self.uar,
                        intr: vector,
                        ..Eqc::default()
                    },
                    // Completion events need no bit.
                    event_bitmask: event_mask(&[]),
                },
                &[m.eq.addr()],
            )?
            .eq_number;
        o.eqn = Some(eqn);
        let pd = self.exec::<AllocPd>(&AllocPdIn::default(), &[])?.pd;
        o.pd = Some(pd);
        let key = self.create_mkey(m, pd, o)?;
        let cqn = self
            .exec::<CreateCq>(
                &CreateCqIn {
                    cq_context: Cqc {
                        log_cq_size: LOG_CQ_SIZE,
                        uar_page: self.uar,
                        c_eqn_or_apu_element: u32::from(eqn),
                        dbr_addr: m.dbr.addr() + CQ_DBR_AT as u64,
                        ..Cqc::default()
                    },
                },
                &[m.cq.addr()],
            )?
            .cqn;
        o.cqn = Some(cqn);
        let mut qpn = [0u32; 2];
        for (i, n) in qpn.iter_mut().enumerate() {
            let q = self.exec::<CreateQp>(
                &CreateQpIn {
                    ece: 0,
                    qpc: Qpc {
                        st: ST_RC,
                        pm_state: PM_STATE_MIGRATED,
                        pd,
                        uar_page: self.uar,
                        log_rq_size: LOG_RQ_SIZE,
                        log_rq_stride: (RQ_STRIDE.trailing_zeros() - 4) as u8,
                        log_sq_size: LOG_SQ_SIZE,
                        rq_type: RQ_TYPE_REGULAR,
                        cqn_snd: cqn,
                        cqn_rcv: cqn,
                        dbr_addr: m.dbr.addr() + QP_DBR_AT[i] as u64,
                        ..Qpc::default()
                    },
                },
                &[m.qp[i].addr()],
            )?;
            *n = q.qpn;
            o.qpn[i] = Some(q.qpn);
        }
        self.connect(qpn[0], qpn[1])?;
        self.connect(qpn[1], qpn[0])?;

        // Arm the EQ (if it has an interrupt) and the CQ, as mlx5 does
        // before it waits: ARM word into the record, then the 64-bit
        // doorbell of ARM word and CQN.
        if irq.is_some() {
            self.arm_eq(eqn);
        }
        let arm = CqArm {
            sn: 0,
            cmd: ArmCmd::Next,
            ci: 0,
        };
        m.dbr
            .write_word(CQ_DBR_AT + CQ_DBR_ARM_OFFSET, arm.to_bytes())?;
        mb(Write);
        let off = self.uar_reg(UAR_CQ_DOORBELL_OFFSET);
        self.bus.write64(off, UarCqDoorbell { arm, cqn }.to_bytes());

        self.post(m, key, qpn)?;
        let cqes = self.wait_cqes(m, qpn)?;
        self.check_data(m)?;
        self.wait_event(m, eqn, cqn)?;
        let interrupts = match irq {
            Some(irq) => self.wait_interrupt(irq)?,
            None => 0,
        };
        Ok(Outcome {
            qpn,
            eqn,
            cqes,
            interrupts,
        })
    }

    /// CREATE_MKEY over the data buffer, MTT mode with one entry per page,
    /// local and remote read and write; returns the key.
    fn create_mkey(&mut self, m: &Mem, pd: u32, o: &mut Objects) -> Result<u32> {
        let base = m.data.addr();
        let mtt: [u64; DATA_PAGES] =
            core::array::from_fn(|k| (base + (k * PAGE) as u64) | MTT_PRESENT);
        let mut mkc = Mkc {
            lw: true,
            lr: true,
            rw: true,
            rr: true,
            qpn: 0xff_ffff,
            mkey_7_0: KEY_7_0,
            pd,
            // The I/O virtual address is the bus address, so that WQEs
            // name the buffer by its bus address as with a PA key.
            start_addr: base,
            len: (DATA_PAGES * PAGE) as u64,
            translations_octword_size: mtt_octwords(DATA_PAGES as u32),
            log_page_size: 12,
            ..Mkc::default()
        };
        mkc.set_access_mode(ACCESS_MODE_MTT);
        let index = self
            .exec::<CreateMkey>(
                &CreateMkeyIn {
                    pg_access: false,
                    memory_key_mkey_entry: mkc,
                    translations_octword_actual_size: mkc.translations_octword_size,
                },
                &mtt,
            )?
            .mkey_index;
        o.mkey_index = Some(index);
        Ok(mkey(index, KEY_7_0))
    }

    /// Takes QP `qpn` from RESET to RTS, connected to `peer` on the same
    /// port.
    fn connect(&mut self, qpn: u32, peer: u32) -> Result {
        // The destination LID of both QPs: the port's own, as the
        // firmware reports it.
        let lid = self
            .exec::<QueryHcaVportContext>(
                &QueryHcaVportContextIn {
                    other_vport: false,
                    port_num: PORT,
                    vport_number: 0,
                },
                &[],
            )?
            .context
            .lid;
        let rc = Qpc {
            st: ST_RC,
            pm_state: PM_STATE_MIGRATED,
            ..Qpc::default()
        };
        self.exec::<Rst2InitQp>(
            &Rst2InitQpIn {
                qpn,
                qpc: Qpc {
                    rre: true,
                    rwe: true,
                    primary_address_path: Ads {
                        vhca_port_num: PORT,
                        ..Ads::default()
                    },
                    ..rc
                },
                ..Rst2InitQpIn::default()
            },
            &[],
        )?;
        self.exec::<Init2RtrQp>(
            &Init2RtrQpIn {
                qpn,
                qpc: Qpc {
                    mtu: MTU_1K,
                    remote_qpn: peer,
                    next_rcv_psn: PSN,
                    min_rnr_nak: 12,
                    primary_address_path: Ads {
                        rlid: lid,
                        vhca_port_num: PORT,
                        ..Ads::default()
                    },
                    ..rc
                },
                ..Init2RtrQpIn::default()
            },
            &[],
        )?;
        self.exec::<Rtr2RtsQp>(
            &Rtr2RtsQpIn {
                qpn,
                qpc: Qpc {
                    next_send_psn: PSN,
                    retry_count: 7,
                    rnr_retry: 7,
                    primary_address_path: Ads {
                        ack_timeout: 14,
                        ..Ads::default()
                    },
                    ..rc
                },
                ..Rtr2RtsQpIn::default()
            },
            &[],
        )?;
        Ok(())
    }

    /// Destroys what `o` holds, in reverse order of creation. Carries on
    /// past a refused command but not past a timeout (see `Ctx::dead`);
    /// returns the first error.
    fn destroy(&mut self, o: &mut Objects) -> Result {
        let mut first = Ok(());
        for qpn in o.qpn.iter_mut().rev() {
            if let Some(qpn) = qpn.take() {
                first = first.and(self.exec::<DestroyQp>(&DestroyQpIn { qpn }, &[]).map(drop));
            }
        }
        if let Some(cqn) = o.cqn.take() {
            first = first.and(self.exec::<DestroyCq>(&DestroyCqIn { cqn }, &[]).map(drop));
        }
        if let Some(mkey_index) = o.mkey_index.take() {
            first = first.and(
                self.exec::<DestroyMkey>(&DestroyMkeyIn { mkey_index }, &[])
                    .map(drop),
            );
        }
        if let Some(pd) = o.pd.take() {
            first = first.and(self.exec::<DeallocPd>(&DeallocPdIn { pd }, &[]).map(drop));
        }
        if let Some(eq_number) = o.eqn.take() {
            first = first.and(
                self.exec::<DestroyEq>(&DestroyEqIn { eq_number }, &[])
                    .map(drop),
            );
        }
        first
    }
}

/// Runs the self-test on a function that is up (see the module
/// documentation): `uar` is its UAR page, `page_eq` its asynchronous EQ,
/// `vectors` its MSI-X vectors. Logs one summary line, or the step that
/// failed.
///
/// # Errors
///
/// The errno of the first step that failed; everything created was
/// destroyed (or, if the device refused that, its memory is kept for good).
pub(super) fn run(
    bus: &mut CxBus<'_>,
    function: &mut Function,
    page_eq: Option<&mut PageEq>,
    uar: u32,
    vectors: &IrqVectorRegistration<'_>,
) -> Result {
    let pdev = bus.pdev();
    let requests_before = page_eq.as_deref().map_or(0, |e| e.requests);
    let mut ctx = Ctx {
        bus,
        function,
        page_eq,
        uar,
        commands: 0,
        dead: false,
    };
    let m = Mem::new(ctx.bus).map_err(|e| step_failed(&ctx, "allocating its memory", e))?;

    // Vector 1 with its own handler when there is one; otherwise the EQ
    // shares vector 0 and stays unarmed, and the event is polled.
    let comp_irq = if vectors.len() > 1 {
        let request = vectors
            .index(1)
            .map_err(|e| step_failed(&ctx, "taking MSI-X vector 1", e))?;
        // SAFETY: The registration is dropped at the end of this function,
        // never forgotten.
        let reg = unsafe {
            irq::Registration::new(
                request.into(),
                irq::Flags::TRIGGER_NONE,
                c"rmlx5_cx_comp",
                Ok::<_, Error>(CompIrq {
                    count: AtomicU32::new(0),
                }),
            )
        };
        Some(
            KBox::pin_init(reg, GFP_KERNEL)
                .map_err(|e| step_failed(&ctx, "requesting the interrupt of vector 1", e))?,
        )
    } else {
        dev_info!(
            pdev,
            "self-test: one MSI-X vector only, the completion EQ is polled on vector 0\n"
        );
        None
    };
    let vector = if comp_irq.is_some() { 1 } else { 0 };

    let mut o = Objects::default();
    let result = ctx.exercise(&m, &mut o, vector, comp_irq.as_deref().map(|r| r.handler()));
    let destroyed = ctx.destroy(&mut o);
    // The EQ is gone (or kept): its interrupt may go.
    drop(comp_irq);
    if destroyed.is_ok() && !ctx.dead {
        drop(m);
    } else {
        // The device may still own some of it (an object not destroyed,
        // or a command, a create included, that timed out).
        dev_err!(
            pdev,
            "self-test: keeping its memory, an object could not be destroyed\n"
        );
        core::mem::forget(m);
    }
    ctx.answer_page_requests();
    let requests = ctx
        .page_eq
        .as_deref()
        .map_or(0, |e| e.requests)
        .saturating_sub(requests_before);
    let out = result.and_then(|o| destroyed.map(|()| o))?;
    dev_info!(
        pdev,
        "self-test: RDMA WRITE {} KiB + SEND {} B over RC QPs {:#x} -> {:#x}, {} CQEs ok, completion EQ {} on vector {} ({} interrupt(s)), {} commands, {} page request(s) answered\n",
        WRITE_LEN / 1024,
        SEND_LEN,
        out.qpn[0],
        out.qpn[1],
        out.cqes,
        out.eqn,
        vector,
        out.interrupts,
        ctx.commands,
        requests
    );
    Ok(())
}
