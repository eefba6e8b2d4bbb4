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
    fence,
    AtomicU32,
    Ordering, //
};
use kernel::{
    dma::Coherent,
    irq::{
        self,
        IrqReturn, //
    },
    pci::IrqVectorRegistration,
    prelude::*,
    time::{
        delay::fsleep,
        Delta,
        Instant,
        Monotonic, //
    },
};

use super::bus::CxBus;
use super::eq::PageEq;
use crate::mlx5_cmdif::{
    bus::Bus,
    function::Function, //
};
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
    command::Command,
    cqe::{
        Cqe64,
        ErrCqe,
        OpOwn,
        CQE_SIZE,
        OP_OWN_OFFSET, //
    },
    doorbell::{
        bf_reg_offset,
        counter_word,
        send_doorbell,
        set_ci_word,
        ArmCmd,
        CqArm,
        EqDoorbell,
        UarCqDoorbell,
        CQ_DBR_ARM_OFFSET,
        CQ_DBR_SET_CI_OFFSET,
        QP_DBR_RECV_OFFSET,
        QP_DBR_SEND_OFFSET,
        UAR_CQ_DOORBELL_OFFSET,
        UAR_EQ_ARM_OFFSET,
        UAR_PAGE_SIZE, //
    },
    eqe::{
        Eqe,
        EqeData,
        EQE_SIZE,
        OWNER_OFFSET, //
    },
    opcode::{
        CqeOpcode,
        EventType,
        SendOpcode, //
    },
    qpc::{
        Ads,
        Qpc,
        MTU_1K,
        PM_STATE_MIGRATED,
        RQ_TYPE_REGULAR,
        ST_RC, //
    },
    recv::write_recv_wqe,
    ring,
    wqe::{
        CtrlSeg,
        DataSeg,
        RaddrSeg,
        CE_CQ_UPDATE,
        WQEBB_SIZE, //
    },
};

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
/// The destination LID of both QPs: the port's own. The emulated
/// ConnectX's port has LID 1 (the model gives fabric instance `i` LID
/// `i + 1`); the driver has no QUERY_HCA_VPORT_CONTEXT yet to read it.
const PORT_LID: u16 = 1;
/// The port the QPs use.
const PORT: u8 = 1;
/// How long the device gets for the completions, the event and the
/// interrupt.
const WAIT_MS: i64 = 2000;

/// Coherent memory shared with the device, accessed only with
/// bounds-checked volatile copies (the device reads and writes it
/// concurrently).
struct Buf(Coherent<[u8]>);

impl Buf {
    /// `len` zeroed bytes of coherent memory of the function.
    fn new(bus: &CxBus<'_>, len: usize) -> Result<Self> {
        Ok(Self(bus.alloc_coherent(len)?))
    }

    /// The bus address.
    fn addr(&self) -> u64 {
        self.0.dma_address()
    }

    /// Checks that `[off, off + len)` lies inside the buffer.
    fn check(&self, off: usize, len: usize) -> Result {
        match off.checked_add(len) {
            Some(end) if end <= self.0.size() => Ok(()),
            _ => Err(EINVAL),
        }
    }

    /// Copies `bytes` to offset `off`.
    fn write(&self, off: usize, bytes: &[u8]) -> Result {
        self.check(off, bytes.len())?;
        let base = self.0.as_mut_ptr().cast::<u8>();
        for (i, b) in bytes.iter().enumerate() {
            // SAFETY: `off + i < off + bytes.len() <= size` (checked
            // above), inside the live allocation; volatile because the
            // device may read it at any time.
            unsafe { base.add(off + i).write_volatile(*b) };
        }
        Ok(())
    }

    /// Stores the 4 bytes `word` at the 4-byte aligned offset `off` with
    /// one 32-bit store (doorbell record words, which the device must
    /// never read half-updated).
    fn write_word(&self, off: usize, word: [u8; 4]) -> Result {
        self.check(off, 4)?;
        if off % 4 != 0 {
            return Err(EINVAL);
        }
        let base = self.0.as_mut_ptr().cast::<u8>();
        // SAFETY: Inside the allocation (checked above); the allocation is
        // page-aligned and `off` a multiple of 4, so the `u32` is aligned.
        unsafe {
            base.add(off)
                .cast::<u32>()
                .write_volatile(u32::from_ne_bytes(word))
        };
        Ok(())
    }

    /// Copies the bytes at offset `off` into `out`.
    fn read(&self, off: usize, out: &mut [u8]) -> Result {
        self.check(off, out.len())?;
        let base = self.0.as_ptr().cast::<u8>();
        for (i, b) in out.iter_mut().enumerate() {
            // SAFETY: As in `write`: inside the live allocation; the device
            // writes it concurrently, hence volatile.
            *b = unsafe { base.add(off + i).read_volatile() };
        }
        Ok(())
    }

    /// The byte at offset `off`.
    fn byte(&self, off: usize) -> Result<u8> {
        let mut b = [0u8; 1];
        self.read(off, &mut b)?;
        Ok(b[0])
    }
}

/// The memory of the self-test.
struct Mem {
    eq: Buf,
    cq: Buf,
    /// The doorbell records of the CQ and the QPs.
    dbr: Buf,
    /// The QPs' buffers: RQ, then SQ.
    qp: [Buf; 2],
    data: Buf,
}

/// The byte of the test pattern at offset `i` of a source buffer `seed`.
fn pattern(seed: u8, i: usize) -> u8 {
    (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8
}

impl Mem {
    /// Allocates everything, with the EQEs' owner bytes and the CQEs'
    /// `op_own` initialised as mlx5 does, and the source patterns written.
    fn new(bus: &CxBus<'_>) -> Result<Self> {
        let m = Self {
            eq: Buf::new(bus, PAGE)?,
            cq: Buf::new(bus, PAGE)?,
            dbr: Buf::new(bus, PAGE)?,
            qp: [Buf::new(bus, PAGE)?, Buf::new(bus, PAGE)?],
            data: Buf::new(bus, DATA_PAGES * PAGE)?,
        };
        for i in 0..1usize << LOG_EQ_SIZE {
            m.eq.write(i * EQE_SIZE + OWNER_OFFSET, &[ring::EQE_INIT_OWNER])?;
        }
        for i in 0..1usize << LOG_CQ_SIZE {
            m.cq.write(i * CQE_SIZE + OP_OWN_OFFSET, &[ring::CQE_INIT_OP_OWN])?;
        }
        for i in 0..SEND_LEN {
            m.data.write(SEND_SRC + i, &[pattern(0x5a, i)])?;
        }
        for i in 0..WRITE_LEN {
            m.data.write(WRITE_SRC + i, &[pattern(0xc3, i)])?;
        }
        Ok(m)
    }
}

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

/// One completion, the fields the test checks.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Completion {
    qpn: u32,
    opcode: u8,
    send_opcode: u8,
    byte_cnt: u32,
    wqe_counter: u16,
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
}

/// Logs a failed step and returns `e`.
fn step_failed(ctx: &Ctx<'_, '_>, step: &str, e: Error) -> Error {
    dev_err!(ctx.bus.pdev(), "self-test: {} failed ({:?})\n", step, e);
    e
}

impl Ctx<'_, '_> {
    /// Runs command `C`, logging a failure (the crate's error names the
    /// command, its status and syndrome), then answers the page requests
    /// it may have caused.
    fn exec<C: Command>(&mut self, input: &C::In, pas: &[u64]) -> Result<C::Out> {
        let cmd = self.function.cmdif().ok_or(ENODEV)?;
        self.commands += 1;
        let r = cmd.exec::<C, _>(self.bus, input, pas);
        self.answer_page_requests();
        r.map_err(|e| {
            dev_err!(self.bus.pdev(), "self-test: {}\n", format_args!("{e}"));
            Error::from_errno(-e.errno())
        })
    }

    /// Answers what the asynchronous EQ holds (its threaded handler waits
    /// for the lock the caller holds).
    fn answer_page_requests(&mut self) {
        if let Some(eq) = self.page_eq.as_deref_mut() {
            if eq.has_event() {
                eq.poll(self.bus, self.function);
            }
        }
    }

    /// The BAR0 offset of register `reg` of the driver's UAR page.
    fn uar_reg(&self, reg: usize) -> usize {
        (self.uar as usize)
            .saturating_mul(UAR_PAGE_SIZE)
            .saturating_add(reg)
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
        fence(Ordering::SeqCst);
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
                        rlid: PORT_LID,
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

    /// Arms EQ `eqn` at consumer index 0.
    fn arm_eq(&mut self, eqn: u8) {
        let mut word = [0u8; 4];
        EqDoorbell { eqn, ci: 0 }.encode(&mut word);
        let off = self.uar_reg(UAR_EQ_ARM_OFFSET);
        self.bus.write32(off, u32::from_be_bytes(word));
    }

    /// Posts the receive on the second QP, then the RDMA WRITE and the
    /// SEND on the first, and rings its doorbell once (as one
    /// `ib_post_send` of two work requests does).
    fn post(&mut self, m: &Mem, key: u32, qpn: [u32; 2]) -> Result {
        let data = m.data.addr();
        let mut slot = [0u8; RQ_STRIDE];
        write_recv_wqe(
            &mut slot,
            &[DataSeg {
                byte_count: PAGE as u32,
                lkey: key,
                addr: data + RECV_DST as u64,
            }],
        )
        .map_err(|_| EINVAL)?;
        m.qp[1].write(0, &slot)?;
        fence(Ordering::SeqCst);
        m.dbr
            .write_word(QP_DBR_AT[1] + QP_DBR_RECV_OFFSET, counter_word(1))?;

        let ctrl = |wqe_index: u16, opcode: SendOpcode, ds: u8| CtrlSeg {
            opmod: 0,
            wqe_index,
            opcode,
            qpn: qpn[0],
            ds,
            signature: 0,
            fence_mode: 0,
            ce: CE_CQ_UPDATE,
            solicited: false,
            imm: 0,
        };
        // WQE 0: RDMA WRITE, control + remote address + data segments.
        let mut wqe = [0u8; WQEBB_SIZE];
        let (c, rest) = wqe.split_at_mut(CtrlSeg::SIZE);
        let (r, rest) = rest.split_at_mut(RaddrSeg::SIZE);
        let (d, _) = rest.split_at_mut(DataSeg::SIZE);
        let ds = ring::ds_count_of(&[CtrlSeg::SIZE, RaddrSeg::SIZE, DataSeg::SIZE])
            .map_err(|_| EINVAL)?;
        let mut ctrl0 = [0u8; CtrlSeg::SIZE];
        ctrl(0, SendOpcode::RdmaWrite, ds).encode(&mut ctrl0);
        c.copy_from_slice(&ctrl0);
        RaddrSeg {
            raddr: data + WRITE_DST as u64,
            rkey: key,
        }
        .encode(r.try_into().map_err(|_| EINVAL)?);
        DataSeg {
            byte_count: WRITE_LEN as u32,
            lkey: key,
            addr: data + WRITE_SRC as u64,
        }
        .encode(d.try_into().map_err(|_| EINVAL)?);
        let sq = |index: u16| RQ_BYTES + ring::sq_offset(index, u32::from(LOG_SQ_SIZE));
        m.qp[0].write(sq(0), &wqe)?;
        // WQE 1: SEND, control + data segments.
        let mut wqe = [0u8; WQEBB_SIZE];
        let (c, rest) = wqe.split_at_mut(CtrlSeg::SIZE);
        let (d, _) = rest.split_at_mut(DataSeg::SIZE);
        let ds = ring::ds_count_of(&[CtrlSeg::SIZE, DataSeg::SIZE]).map_err(|_| EINVAL)?;
        let mut ctrl1 = [0u8; CtrlSeg::SIZE];
        ctrl(1, SendOpcode::Send, ds).encode(&mut ctrl1);
        c.copy_from_slice(&ctrl1);
        DataSeg {
            byte_count: SEND_LEN as u32,
            lkey: key,
            addr: data + SEND_SRC as u64,
        }
        .encode(d.try_into().map_err(|_| EINVAL)?);
        m.qp[0].write(sq(1), &wqe)?;

        // The WQEs before the send counter, the counter before the
        // doorbell (mlx5_ib: wmb() around the record update).
        fence(Ordering::SeqCst);
        m.dbr
            .write_word(QP_DBR_AT[0] + QP_DBR_SEND_OFFSET, counter_word(2))?;
        fence(Ordering::SeqCst);
        let reg = bf_reg_offset(0).map_err(|_| EINVAL)?;
        let off = self.uar_reg(reg);
        self.bus.write64(off, send_doorbell(&ctrl1));
        Ok(())
    }

    /// Sleeps a little while waiting for the device, answering page
    /// requests; `Err(ETIMEDOUT)` once `start` is `WAIT_MS` old.
    fn pause(&mut self, start: Instant<Monotonic>, what: &str) -> Result {
        self.answer_page_requests();
        if start.elapsed() > Delta::from_millis(WAIT_MS) {
            dev_err!(
                self.bus.pdev(),
                "self-test: no {} after {} ms\n",
                what,
                WAIT_MS
            );
            return Err(ETIMEDOUT);
        }
        fsleep(Delta::from_micros(100));
        Ok(())
    }

    /// Waits for the three CQEs and checks them: the RDMA WRITE's and the
    /// SEND's on the first QP (WQE counters 0 and 1), the receive's on the
    /// second (64 bytes, WQE counter 0). Returns how many were consumed.
    fn wait_cqes(&mut self, m: &Mem, qpn: [u32; 2]) -> Result<u32> {
        let want = [
            // mlx5 defines no byte count for the requester's CQE of an
            // RDMA WRITE or a SEND: only the responder's is compared.
            Completion {
                qpn: qpn[0],
                opcode: CqeOpcode::Req.into(),
                send_opcode: SendOpcode::RdmaWrite.into(),
                byte_cnt: 0,
                wqe_counter: 0,
            },
            Completion {
                qpn: qpn[0],
                opcode: CqeOpcode::Req.into(),
                send_opcode: SendOpcode::Send.into(),
                byte_cnt: 0,
                wqe_counter: 1,
            },
            Completion {
                qpn: qpn[1],
                opcode: CqeOpcode::RespSend.into(),
                send_opcode: 0,
                byte_cnt: SEND_LEN as u32,
                wqe_counter: 0,
            },
        ];
        let mut seen = [false; 3];
        let log = u32::from(LOG_CQ_SIZE);
        let start = Instant::<Monotonic>::now();
        let mut ci = 0u32;
        while ci < want.len() as u32 {
            let at = ring::ring_index(ci, log) as usize * CQE_SIZE;
            let op_own = m.cq.byte(at + OP_OWN_OFFSET)?;
            if !ring::cqe_sw_owned(op_own, ci, log) {
                self.pause(start, "CQE")?;
                continue;
            }
            // The body only after its owner byte: dma_rmb().
            fence(Ordering::SeqCst);
            let mut b = [0u8; CQE_SIZE];
            m.cq.read(at, &mut b)?;
            ci += 1;
            m.dbr
                .write_word(CQ_DBR_AT + CQ_DBR_SET_CI_OFFSET, set_ci_word(ci))?;
            let opcode = OpOwn::decode(op_own).map_err(|_| EIO)?.opcode;
            if opcode.is_error() {
                let e = ErrCqe::decode(&b).map_err(|_| EIO)?;
                dev_err!(
                    self.bus.pdev(),
                    "self-test: error CQE on QP {:#x}, WQE {}: syndrome {:#x}, vendor syndrome {:#x}\n",
                    e.qpn,
                    e.wqe_counter,
                    e.syndrome,
                    e.vendor_syndrome
                );
                return Err(EIO);
            }
            let c = Cqe64::decode(&b).map_err(|_| EIO)?;
            let req = opcode == CqeOpcode::Req;
            let got = Completion {
                qpn: c.qpn,
                opcode: opcode.into(),
                send_opcode: if req { c.send_opcode } else { 0 },
                byte_cnt: if req { 0 } else { c.byte_cnt },
                wqe_counter: c.wqe_counter,
            };
            let k = want
                .iter()
                .zip(seen.iter())
                .position(|(w, &s)| !s && *w == got);
            match k.and_then(|k| seen.get_mut(k)) {
                Some(s) => *s = true,
                None => {
                    dev_err!(
                        self.bus.pdev(),
                        "self-test: unexpected CQE: QP {:#x}, opcode {}, send opcode {:#x}, {} bytes, WQE counter {}\n",
                        c.qpn,
                        got.opcode,
                        c.send_opcode,
                        c.byte_cnt,
                        c.wqe_counter
                    );
                    return Err(EIO);
                }
            }
        }
        Ok(ci)
    }

    /// Compares the bytes that arrived with their sources.
    fn check_data(&mut self, m: &Mem) -> Result {
        for (src, dst, len, what) in [
            (SEND_SRC, RECV_DST, SEND_LEN, "SEND"),
            (WRITE_SRC, WRITE_DST, WRITE_LEN, "RDMA WRITE"),
        ] {
            let mut a = [0u8; 256];
            let mut b = [0u8; 256];
            let mut off = 0;
            while off < len {
                let n = (len - off).min(a.len());
                m.data.read(src + off, &mut a[..n])?;
                m.data.read(dst + off, &mut b[..n])?;
                if let Some(i) = a[..n].iter().zip(&b[..n]).position(|(x, y)| x != y) {
                    dev_err!(
                        self.bus.pdev(),
                        "self-test: {} data differs at byte {}: {:#04x}, expected {:#04x}\n",
                        what,
                        off + i,
                        b[i],
                        a[i]
                    );
                    return Err(EIO);
                }
                off += n;
            }
        }
        // Nothing beyond the 64 bytes sent reached the receive buffer.
        if m.data.byte(RECV_DST + SEND_LEN)? != 0 {
            dev_err!(
                self.bus.pdev(),
                "self-test: receive buffer written past 64 bytes\n"
            );
            return Err(EIO);
        }
        Ok(())
    }

    /// Waits for the completion event of CQ `cqn` in EQ `eqn` (the CQ was
    /// armed, so its first CQE fired it).
    fn wait_event(&mut self, m: &Mem, eqn: u8, cqn: u32) -> Result {
        let log = u32::from(LOG_EQ_SIZE);
        let start = Instant::<Monotonic>::now();
        loop {
            if ring::eqe_valid(m.eq.byte(OWNER_OFFSET)?, 0, log) {
                break;
            }
            self.pause(start, "completion event")?;
        }
        fence(Ordering::SeqCst);
        let mut b = [0u8; EQE_SIZE];
        m.eq.read(0, &mut b)?;
        match Eqe::decode(&b) {
            Ok(Eqe {
                event_type: EventType::Comp,
                data: EqeData::Comp { cqn: c },
                ..
            }) if c == cqn => Ok(()),
            _ => {
                dev_err!(
                    self.bus.pdev(),
                    "self-test: EQ {} holds no completion event of CQ {:#x}\n",
                    eqn,
                    cqn
                );
                Err(EIO)
            }
        }
    }

    /// Waits for the completion EQ's interrupt; returns how many came.
    fn wait_interrupt(&mut self, irq: &CompIrq) -> Result<u32> {
        let start = Instant::<Monotonic>::now();
        loop {
            let n = irq.count.load(Ordering::Relaxed);
            if n > 0 {
                return Ok(n);
            }
            self.pause(start, "completion interrupt")?;
        }
    }

    /// Destroys what `o` holds, in reverse order of creation. Carries on
    /// past a failure; returns the first.
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
    };
    let m = Mem::new(ctx.bus).map_err(|e| step_failed(&ctx, "allocating its memory", e))?;

    // Vector 1 with its own handler when there is one; otherwise the EQ
    // shares vector 0 and stays unarmed, and the event is polled.
    let comp_irq = if vectors.len() > 1 {
        let request = vectors.index(1)?;
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
        Some(KBox::pin_init(reg, GFP_KERNEL)?)
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
    if destroyed.is_ok() {
        drop(m);
    } else {
        // The device may still own some of it.
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
