// SPDX-License-Identifier: GPL-2.0

//! A host "driver" for the device side of the command interface: it owns
//! the command queue page, the mailboxes and the pages it lends the device
//! in the harness's guarded memory, builds every command with the mlx5-prm
//! encoders, posts it through a real queue entry, rings the doorbell,
//! polls the ownership bit (or waits for the command-completion EQE), and
//! brings each HCA up and down in mlx5_core's order.

use std::collections::BTreeSet;

use hca_model::caps::Caps;
use hca_model::fabric::Fabric;
use hca_model::fw::pages::PAGE_SIZE;
use hca_model::fw::{Firmware, FwConfig};
use hca_model::hca::Hca;
use mlx5_prm::cmd_hca::{
    ManagePages, ManagePagesIn, QueryPages, QueryPagesIn, MANAGE_PAGES_ALLOCATION_SUCCESS,
    MANAGE_PAGES_HCA_RETURN_PAGES,
};
use mlx5_prm::cmd_queue::{
    mailbox_count, read_mailbox, sign_layout, write_mailbox, CmdLayout, DeliveryStatus,
    MailboxHeader, CMD_LAYOUT_SIZE, MAILBOX_SIZE, STATUS_OWN_OFFSET,
};
use mlx5_prm::cmd_status::{CmdError, CmdStatus};
use mlx5_prm::command::{self, Command, OutHeader};
use mlx5_prm::doorbell::{EqDoorbell, UAR_EQ_ARM_OFFSET, UAR_PAGE_SIZE};
use mlx5_prm::eqe::{Eqe, EQE_SIZE, OWNER_OFFSET};
use mlx5_prm::eqe_async::AsyncEvent;
use mlx5_prm::ifc::Layout;
use mlx5_prm::init_seg::{
    cmdq_addr, initializing, CmdqAddrLSz, CMDIF_REV, CMDIF_REV_FW_SUB_OFFSET, CMDQ_ADDR_H_OFFSET,
    CMDQ_ADDR_L_SZ_OFFSET, CMD_DBELL_OFFSET, INITIALIZING_OFFSET,
};
use mlx5_prm::qpc::{Qpc, PM_STATE_MIGRATED, ST_RC};
use mlx5_prm::ring;

use super::harness::{Hcas, TestEq, VecStorage, World};
use super::mem::{Kind, TestMem};

/// Page slots each device keeps.
pub const PAGE_SLOTS: usize = 1024;
/// Mailbox blocks in each pool (enough for a 64 KiB message).
pub const POOL_BLOCKS: usize = 128;
/// How many times the driver reads `initializing` before giving up.
pub const INIT_POLLS: u32 = 100;

/// How a command came back.
#[derive(Clone, Debug)]
pub struct Reply {
    /// The entry's delivery status.
    pub delivery: DeliveryStatus,
    /// The output (`outlen` bytes).
    pub out: Vec<u8>,
}

impl Reply {
    /// The output header's status and syndrome.
    pub fn status(&self) -> (CmdStatus, u32) {
        let mut b = [0u8; 16];
        let n = self.out.len().min(16);
        b[..n].copy_from_slice(&self.out[..n]);
        let h = OutHeader::decode(&b).unwrap();
        (h.status, h.syndrome)
    }
}

/// A command ready to post.
#[derive(Clone, Copy, Debug)]
pub struct Prepared {
    /// The queue entry it goes to.
    pub slot: u8,
    /// The entry's bytes (signed).
    pub entry: [u8; CMD_LAYOUT_SIZE],
    /// The output length.
    pub outlen: usize,
    /// Output mailboxes.
    pub n_out: usize,
}

/// Why a command did not come back at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lost {
    /// The device never cleared the ownership bit.
    Timeout,
}

/// One function as its driver sees it.
pub struct Dev {
    /// The HCA instance behind it.
    pub h: usize,
    /// The device.
    pub fw: Firmware<hca_model_pages::Store>,
    /// The command queue page.
    pub cmdq: u64,
    /// Input and output mailbox pools (1 KiB apart).
    pub in_pool: u64,
    pub out_pool: u64,
    /// The UAR area backing the BAR's UAR pages.
    pub uar_base: u64,
    /// The last token used.
    pub token: u8,
    /// The entry the next command goes to.
    pub next_slot: u8,
    /// Queue geometry read from the device.
    pub log_sz: u8,
    pub log_stride: u8,
    /// Sign mailboxes (after enabling command checksums).
    pub checksums: bool,
    /// Pages the device holds, as the driver believes.
    pub given: BTreeSet<u64>,
    /// Pages the driver has allocated and may give.
    pub spare: Vec<u64>,
    /// Command completion by event on this EQ (else polling).
    pub cmd_eq: Option<TestEq>,
    /// Page requests arrive on this EQ.
    pub page_eq: Option<TestEq>,
    /// The driver's own UAR index.
    pub uar: u32,
    /// Completions seen as command-completion EQEs.
    pub cmd_events: u64,
}

/// Two or more functions on one fabric, with their memory.
pub struct Bed {
    pub w: World,
    pub devs: Vec<Dev>,
}

/// The page store of the tests: a boxed array.
pub mod hca_model_pages {
    use hca_model::fw::pages::PageStore;

    /// A boxed array of page slots.
    pub struct Store(pub Box<[u64; super::PAGE_SLOTS]>);

    impl PageStore for Store {
        fn slots(&self) -> &[u64] {
            &self.0[..]
        }
        fn slots_mut(&mut self) -> &mut [u64] {
            &mut self.0[..]
        }
    }
}

/// The QP context fields every test QP shares.
pub fn rc_qpc() -> Qpc {
    Qpc {
        st: ST_RC,
        pm_state: PM_STATE_MIGRATED,
        ..Qpc::default()
    }
}

impl Bed {
    /// `n` functions with configuration `cfg` (its `uar_base` is replaced
    /// by a UAR area in the test memory), their command queues not yet
    /// handed to the devices.
    pub fn new(n: usize, cfg: FwConfig) -> Bed {
        let hcas = (0..n)
            .map(|i| Hca::new(i as u16, Caps::DEFAULT, VecStorage::uniform(64)))
            .collect();
        let mut w = World {
            fabric: Fabric::new(Hcas(hcas)),
            mem: TestMem::new(),
            ctx: Vec::new(),
            budget: 1 << 20,
        };
        let mut devs = Vec::new();
        for h in 0..n {
            let uar_base = w
                .mem
                .alloc(u64::from(cfg.uars) * UAR_PAGE_SIZE as u64, Kind::DevRead);
            let cmdq = w.mem.alloc(4096, Kind::DevWrite);
            let in_pool = w.mem.alloc((POOL_BLOCKS * 1024) as u64, Kind::DevRead);
            let out_pool = w.mem.alloc((POOL_BLOCKS * 1024) as u64, Kind::DevWrite);
            let fw = Firmware::new(
                FwConfig { uar_base, ..cfg },
                hca_model_pages::Store(Box::new([0; PAGE_SLOTS])),
            );
            devs.push(Dev {
                h,
                fw,
                cmdq,
                in_pool,
                out_pool,
                uar_base,
                token: 0,
                next_slot: 0,
                log_sz: 0,
                log_stride: 0,
                checksums: false,
                given: BTreeSet::new(),
                spare: Vec::new(),
                cmd_eq: None,
                page_eq: None,
                uar: 0,
                cmd_events: 0,
            });
        }
        Bed { w, devs }
    }

    /// `n` functions with the default configuration, brought up to
    /// INIT_HCA with a UAR and the four EQs of mlx5_core (command events,
    /// async events, page requests, completions).
    pub fn up(n: usize) -> Bed {
        let mut b = Bed::new(n, FwConfig::DEFAULT);
        for d in 0..n {
            b.bring_up(d);
        }
        b
    }

    /// The HCA instance of function `d`.
    pub fn hca(&mut self, d: usize) -> &mut Hca<VecStorage> {
        let h = self.devs[d].h;
        self.w.fabric.hca(h as u16).unwrap()
    }

    /// Runs what the doorbell posted.
    pub fn process(&mut self, d: usize) -> u32 {
        let h = self.devs[d].h;
        let hca = self.w.fabric.hca(h as u16).unwrap();
        self.devs[d].fw.process(&mut self.w.mem, hca)
    }

    // ---- the initialization segment ----

    /// Reads `initializing` until it clears; false if it never does.
    pub fn wait_fw_init(&mut self, d: usize) -> bool {
        (0..INIT_POLLS).any(|_| !initializing(self.devs[d].fw.read32(INITIALIZING_OFFSET)))
    }

    /// mlx5_cmd_enable and the waits around it: checks the revision, reads
    /// the queue geometry, hands over the queue page.
    pub fn init_cmdq(&mut self, d: usize) -> Result<(), &'static str> {
        if !self.wait_fw_init(d) {
            return Err("firmware pre-initializing timeout");
        }
        let dev = &mut self.devs[d];
        if (dev.fw.read32(CMDIF_REV_FW_SUB_OFFSET) >> 16) as u16 != CMDIF_REV {
            return Err("cmdif revision");
        }
        let l = CmdqAddrLSz::decode(dev.fw.read32(CMDQ_ADDR_L_SZ_OFFSET));
        if 1u32 << l.log_sz > 32 || l.log_sz + l.log_stride > 12 {
            return Err("queue geometry");
        }
        dev.log_sz = l.log_sz;
        dev.log_stride = l.log_stride;
        let (h, lo) = cmdq_addr(dev.cmdq).unwrap();
        dev.fw.write32(CMDQ_ADDR_H_OFFSET, h);
        dev.fw.write32(CMDQ_ADDR_L_SZ_OFFSET, lo);
        if !self.wait_fw_init(d) {
            return Err("firmware initializing timeout");
        }
        Ok(())
    }

    // ---- posting commands ----

    /// Writes a raw queue entry into `slot`, rings its doorbell bit and
    /// lets the device run. Returns the entry as the device left it, or
    /// `Lost::Timeout` if it still owns it.
    pub fn post_entry(
        &mut self,
        d: usize,
        slot: u8,
        entry: &[u8; CMD_LAYOUT_SIZE],
    ) -> Result<[u8; CMD_LAYOUT_SIZE], Lost> {
        let dev = &self.devs[d];
        let addr = dev.cmdq + (u64::from(slot) << dev.log_stride.max(6));
        self.w.mem.put(addr, entry);
        let irqs = self.w.mem.irqs.len();
        self.devs[d].fw.write32(CMD_DBELL_OFFSET, 1u32 << slot);
        self.process(d);
        // Poll the ownership bit as mlx5_core's poll_timeout does.
        let own = self.w.mem.get(addr + STATUS_OWN_OFFSET as u64, 1)[0];
        if own & 1 != 0 {
            return Err(Lost::Timeout);
        }
        let back: [u8; CMD_LAYOUT_SIZE] = self.w.mem.get(addr, CMD_LAYOUT_SIZE).try_into().unwrap();
        self.check_cmd_event(d, slot, irqs);
        Ok(back)
    }

    /// In event mode: the completion EQE for `slot` must be in the command
    /// EQ, with an interrupt raised since `irqs_before`.
    fn check_cmd_event(&mut self, d: usize, slot: u8, irqs_before: usize) {
        let Some(mut eq) = self.devs[d].cmd_eq.take() else {
            return;
        };
        let h = self.devs[d].h as u16;
        let eqes = read_eqes(&self.w.mem, &mut eq);
        assert_eq!(eqes.len(), 1, "one command-completion EQE per command");
        match AsyncEvent::from_eqe(&eqes[0]) {
            Some(AsyncEvent::Cmd(c)) => assert_eq!(c.vector, 1 << slot),
            other => panic!("expected a command EQE, got {other:?}"),
        }
        assert!(
            self.w.mem.irqs[irqs_before..]
                .iter()
                .any(|i| i.hca == h && i.eqn == eq.eqn),
            "command EQ interrupt"
        );
        let uar = self.devs[d].fw.uar_addr(self.devs[d].uar);
        self.eq_arm(d, &eq, uar);
        self.devs[d].cmd_eq = Some(eq);
        self.devs[d].cmd_events += 1;
    }

    /// Updates an EQ's consumer index and arms it through the driver's UAR.
    pub fn eq_arm(&mut self, d: usize, eq: &TestEq, uar: u64) {
        let mut b = [0u8; 4];
        EqDoorbell {
            eqn: eq.eqn,
            ci: eq.ci,
        }
        .encode(&mut b);
        self.w.mem.put(uar + UAR_EQ_ARM_OFFSET as u64, &b);
        let h = self.devs[d].h as u16;
        let hca = self.w.fabric.hca(h).unwrap();
        hca.eq_doorbell(&mut self.w.mem, uar, true).unwrap();
    }

    /// Writes `input`'s mailboxes and the output chain for `outlen` bytes
    /// into the pools and builds the signed entry for the next slot,
    /// without posting it (tests corrupt it first).
    pub fn prepare(&mut self, d: usize, input: &[u8], outlen: usize) -> Prepared {
        let dev = &mut self.devs[d];
        dev.token = dev.token.wrapping_add(1).max(1);
        let token = dev.token;
        let slot = dev.next_slot;
        // mlx5_core keeps the last entry for page commands; the tests
        // rotate over all entries but the last.
        let entries = (1u8 << dev.log_sz).max(2);
        dev.next_slot = (slot + 1) % (entries - 1);
        let (in_pool, out_pool, sign) = (dev.in_pool, dev.out_pool, dev.checksums);
        let n_in = mailbox_count(input.len());
        let n_out = mailbox_count(outlen);
        assert!(
            n_in <= POOL_BLOCKS && n_out <= POOL_BLOCKS,
            "message too long"
        );
        let mut blk = [0u8; MAILBOX_SIZE];
        for i in 0..n_in {
            let next = if i + 1 < n_in {
                in_pool + (i as u64 + 1) * 1024
            } else {
                0
            };
            write_mailbox(input, i, next, token, sign, &mut blk).unwrap();
            self.w.mem.put(in_pool + i as u64 * 1024, &blk);
        }
        for i in 0..n_out {
            let next = if i + 1 < n_out {
                out_pool + (i as u64 + 1) * 1024
            } else {
                0
            };
            MailboxHeader {
                next,
                block_num: i as u32,
                token,
                ctrl_sig: 0,
                sig: 0,
            }
            .encode(&[], &mut blk)
            .unwrap();
            self.w.mem.put(out_pool + i as u64 * 1024, &blk);
        }
        let in_ptr = if n_in > 0 { in_pool } else { 0 };
        let out_ptr = if n_out > 0 { out_pool } else { 0 };
        let e = CmdLayout::request(input, in_ptr, outlen as u32, out_ptr, token);
        let mut entry = [0u8; CMD_LAYOUT_SIZE];
        e.encode(&mut entry);
        sign_layout(&mut entry);
        Prepared {
            slot,
            entry,
            outlen,
            n_out,
        }
    }

    /// Posts a prepared command and reads its output back.
    pub fn submit(&mut self, d: usize, p: &Prepared) -> Result<Reply, Lost> {
        let back = self.post_entry(d, p.slot, &p.entry)?;
        let done = CmdLayout::decode(&back);
        if self.devs[d].checksums {
            // mlx5_core's verify_signature: the entry as the device left it.
            assert!(
                mlx5_prm::cmd_queue::layout_signature_ok(&back),
                "entry re-signed"
            );
        }
        let out_pool = self.devs[d].out_pool;
        let mut out = vec![0u8; p.outlen];
        let n = p.outlen.min(16);
        out[..n].copy_from_slice(&done.out_data[..n]);
        for i in 0..p.n_out {
            let blk: [u8; MAILBOX_SIZE] = self
                .w
                .mem
                .get(out_pool + i as u64 * 1024, MAILBOX_SIZE)
                .try_into()
                .unwrap();
            if self.devs[d].checksums && done.status == DeliveryStatus::Ok {
                assert!(
                    mlx5_prm::cmd_queue::block_signature_ok(&blk),
                    "output mailbox signed"
                );
            }
            read_mailbox(&blk, i, &mut out);
        }
        Ok(Reply {
            delivery: done.status,
            out,
        })
    }

    /// Posts `input` through the next entry with mailbox chains from the
    /// pools, waits for it and reads the output back.
    pub fn exec_raw(&mut self, d: usize, input: &[u8], outlen: usize) -> Result<Reply, Lost> {
        let p = self.prepare(d, input, outlen);
        self.submit(d, &p)
    }

    /// Runs command `C` with `pas` after its input and room for
    /// `out_extra` bytes after its output.
    pub fn cmd_out<C: Command>(
        &mut self,
        d: usize,
        input: &C::In,
        pas: &[u64],
        out_extra: usize,
    ) -> Result<Vec<u8>, CmdError> {
        let mut msg = vec![0u8; command::in_len::<C>(pas.len())];
        command::encode_in::<C>(input, pas, &mut msg).unwrap();
        let outlen = <C::Out as Layout>::SIZE + out_extra;
        let r = self.exec_raw(d, &msg, outlen).expect("command timed out");
        if let Some(e) = CmdError::from_delivery(C::OPCODE, r.delivery) {
            return Err(e);
        }
        // ENABLE_HCA's and DISABLE_HCA's outputs are 12 bytes, but
        // `command::check` decodes a 16-byte header: pad the copy.
        let mut out = r.out;
        if out.len() < 16 {
            out.resize(16, 0);
        }
        command::check::<C>(&out)?;
        Ok(out)
    }

    /// Runs command `C` and decodes its output.
    pub fn cmd<C: Command>(
        &mut self,
        d: usize,
        input: &C::In,
        pas: &[u64],
    ) -> Result<C::Out, CmdError> {
        let out = self.cmd_out::<C>(d, input, pas, 0)?;
        Ok(C::Out::decode(&out).unwrap())
    }

    /// The status and syndrome command `C` fails with (panics if it
    /// succeeds or is not delivered).
    pub fn fails<C: Command>(&mut self, d: usize, input: &C::In, pas: &[u64]) -> (CmdStatus, u32) {
        match self.cmd_out::<C>(d, input, pas, 0) {
            Err(CmdError::Failed {
                status, syndrome, ..
            }) => (status, syndrome),
            other => panic!("{} should fail, got {other:?}", C::NAME),
        }
    }

    // ---- pages ----

    /// A page of test memory the driver may give.
    fn new_page(&mut self, d: usize) -> u64 {
        match self.devs[d].spare.pop() {
            Some(p) => p,
            None => self.w.mem.alloc(PAGE_SIZE, Kind::DevWrite),
        }
    }

    /// MANAGE_PAGES give of `n` fresh pages.
    pub fn give(&mut self, d: usize, n: usize) -> Result<(), CmdError> {
        let pages: Vec<u64> = (0..n).map(|_| self.new_page(d)).collect();
        let input = ManagePagesIn {
            op_mod: MANAGE_PAGES_ALLOCATION_SUCCESS,
            input_num_entries: n as u32,
            ..Default::default()
        };
        match self.cmd::<ManagePages>(d, &input, &pages) {
            Ok(_) => {
                for p in pages {
                    assert!(self.devs[d].given.insert(p));
                    // The device stamps what it receives.
                    assert!(self.w.mem.get(p, 4096).iter().all(|&b| b == 0xa5));
                }
                Ok(())
            }
            Err(e) => {
                self.devs[d].spare.extend(pages);
                Err(e)
            }
        }
    }

    /// MANAGE_PAGES take of up to `n` pages; returns the pages returned,
    /// each checked to be one the device held.
    pub fn take(&mut self, d: usize, n: u32) -> Vec<u64> {
        let input = ManagePagesIn {
            op_mod: MANAGE_PAGES_HCA_RETURN_PAGES,
            input_num_entries: n,
            ..Default::default()
        };
        let out = self
            .cmd_out::<ManagePages>(d, &input, &[], n as usize * 8)
            .unwrap();
        let m = mlx5_prm::cmd_hca::ManagePagesOut::decode(&out).unwrap();
        assert!(m.output_num_entries <= n, "device returned more than asked");
        let pages: Vec<u64> = mlx5_prm::ifc::pas(&out, 16, m.output_num_entries as usize)
            .unwrap()
            .collect();
        for &p in &pages {
            assert!(
                self.devs[d].given.remove(&p),
                "device returned page {p:#x} it was never given"
            );
            self.devs[d].spare.push(p);
        }
        pages
    }

    /// QUERY_PAGES.
    pub fn query_pages(&mut self, d: usize, op_mod: u16) -> i32 {
        let input = QueryPagesIn {
            op_mod,
            ..Default::default()
        };
        self.cmd::<QueryPages>(d, &input, &[]).unwrap().num_pages
    }

    /// mlx5_satisfy_startup_pages.
    pub fn startup_pages(&mut self, d: usize, op_mod: u16) {
        let n = self.query_pages(d, op_mod);
        assert!(n >= 0, "startup query asked for {n} pages");
        if n > 0 {
            self.give(d, n as usize).unwrap();
        }
    }

    /// mlx5_reclaim_startup_pages: takes pages until the device returns
    /// none.
    pub fn reclaim_all(&mut self, d: usize) {
        loop {
            if self.take(d, 768).is_empty() {
                break;
            }
        }
    }

    /// Handles the page requests waiting in the page EQ, as mlx5_core's
    /// page work does. Returns the requests seen (signed page counts).
    pub fn service_pages(&mut self, d: usize) -> Vec<i32> {
        let Some(mut eq) = self.devs[d].page_eq.take() else {
            return Vec::new();
        };
        let eqes = read_eqes(&self.w.mem, &mut eq);
        let uar = self.devs[d].fw.uar_addr(self.devs[d].uar);
        if !eqes.is_empty() {
            self.eq_arm(d, &eq, uar);
        }
        self.devs[d].page_eq = Some(eq);
        let mut seen = Vec::new();
        for e in eqes {
            let Some(AsyncEvent::PageRequest(r)) = AsyncEvent::from_eqe(&e) else {
                panic!("not a page request on the page EQ: {e:?}");
            };
            seen.push(r.num_pages);
            if r.num_pages > 0 {
                self.give(d, r.num_pages as usize).unwrap();
            } else if r.num_pages < 0 {
                let got = self.take(d, r.num_pages.unsigned_abs());
                assert_eq!(got.len() as u32, r.num_pages.unsigned_abs());
            }
        }
        seen
    }
}

/// Reads the new EQEs of `eq` (by owner bit), advancing its consumer index.
pub fn read_eqes(mem: &TestMem, eq: &mut TestEq) -> Vec<Eqe> {
    let mut out = Vec::new();
    loop {
        let idx = ring::ring_index(eq.ci, eq.log) as u64;
        let addr = eq.buf + idx * EQE_SIZE as u64;
        let owner = mem.get(addr + OWNER_OFFSET as u64, 1)[0];
        if !ring::eqe_valid(owner, eq.ci, eq.log) {
            return out;
        }
        let bytes: [u8; EQE_SIZE] = mem.get(addr, EQE_SIZE).try_into().unwrap();
        out.push(Eqe::decode(&bytes).unwrap());
        eq.ci = eq.ci.wrapping_add(1);
    }
}
