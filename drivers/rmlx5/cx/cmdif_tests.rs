// SPDX-License-Identifier: GPL-2.0

//! KUnit for the command layer inside the kernel: the driver's side of the
//! mlx5 command interface (`mlx5-cmdif`, as the PCI backend runs it)
//! against the emulated firmware of hca-model, over kernel memory.
//!
//! The rig is the kernel's twin of the host rig in
//! `rust/mlx5-cmdif/tests/cmdif/rig.rs`: command memory and a page arena
//! in `KVVec`s at made-up DMA addresses, the firmware run when the driver
//! waits, a simulated clock (each wait moves it 1 ms, so timeouts of
//! minutes take no time and every wait is seen to end), and an account of
//! every page lent, so a case can check that the device holds exactly the
//! pages the driver thinks it lent and that teardown gets every one back.
//! Any device access outside the command memory and the arena, and any
//! driver access outside the command memory, is counted and fails the case.

use kernel::prelude::*;

use crate::hca::KStorage;
use crate::hca_model::{
    caps::Caps,
    fw::{
        pages::PageStore,
        Firmware,
        FwConfig,
        HcaState,
        Readiness, //
    },
    hca::Hca,
    mem::{
        DmaFault,
        DmaMemory,
        Interrupt,
        Platform, //
    },
};
use crate::mlx5_cmdif::{
    bus::{
        Bus,
        DmaError,
        Wait, //
    },
    cmdif::Timeouts,
    cmdmem::{
        CmdMem,
        CMD_MEM_SIZE, //
    },
    error::{
        Error,
        ReadyWait, //
    },
    function::{
        Config,
        Function, //
    },
};
use crate::mlx5_prm::{
    cmd_status::{
        CmdError,
        CmdStatus, //
    },
    command::OP_INIT_HCA,
    init_seg::{
        FwRev,
        CMD_DBELL_OFFSET, //
    },
};

/// Where the command memory starts.
const BASE: u64 = 0x1_0000_0000;
/// Where the page arena starts.
const PAGES_BASE: u64 = 0x2_0000_0000;
/// Pages in the arena and slots in the device's page table.
const PAGE_SLOTS: usize = 256;
const PAGE: u64 = 4096;
/// How far one wait moves the clock.
const STEP_NS: u64 = 1_000_000;

/// The device's page table.
struct Store(KVVec<u64>);

impl PageStore for Store {
    fn slots(&self) -> &[u64] {
        &self.0
    }
    fn slots_mut(&mut self) -> &mut [u64] {
        &mut self.0
    }
}

/// The memory the device reaches: command memory and page arena.
struct Mem {
    cmd: KVVec<u8>,
    pages: KVVec<u8>,
    /// Device accesses outside both.
    violations: u32,
    irqs: u32,
}

impl Mem {
    fn range(&mut self, addr: u64, len: usize) -> Option<&mut [u8]> {
        for (base, bytes) in [(BASE, &mut self.cmd), (PAGES_BASE, &mut self.pages)] {
            if let Some(off) = addr.checked_sub(base) {
                let off = usize::try_from(off).ok()?;
                if let Some(r) = bytes.get_mut(off..off.checked_add(len)?) {
                    return Some(r);
                }
            }
        }
        None
    }
}

impl DmaMemory for Mem {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
        match self.range(addr, buf.len()) {
            Some(r) => {
                buf.copy_from_slice(r);
                Ok(())
            }
            None => {
                self.violations += 1;
                Err(DmaFault)
            }
        }
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), DmaFault> {
        match self.range(addr, data.len()) {
            Some(r) => {
                r.copy_from_slice(data);
                Ok(())
            }
            None => {
                self.violations += 1;
                Err(DmaFault)
            }
        }
    }
}

impl Platform for Mem {
    fn interrupt(&mut self, _irq: Interrupt) {
        self.irqs += 1;
    }
}

/// The device, its memory and the driver's pages.
struct Rig {
    fw: Firmware<Store>,
    hca: Hca<KStorage>,
    mem: Mem,
    now: u64,
    free: KVec<u64>,
    /// Pages the driver has allocated and not freed.
    out: KVec<u64>,
    /// Ignore every doorbell once the firmware completed this many
    /// commands (a device that dies).
    die_after_commands: Option<u64>,
    /// Driver accesses outside its command memory, frees of pages it did
    /// not allocate.
    driver_errors: u32,
}

impl Rig {
    fn new(cfg: FwConfig) -> Result<KBox<Rig>> {
        let mut free = KVec::with_capacity(PAGE_SLOTS, GFP_KERNEL)?;
        for i in (0..PAGE_SLOTS as u64).rev() {
            free.push(PAGES_BASE + i * PAGE, GFP_KERNEL)?;
        }
        let store = Store(KVVec::from_elem(0, PAGE_SLOTS, GFP_KERNEL)?);
        let storage = KStorage::new()?;
        let mem = Mem {
            cmd: KVVec::from_elem(0, CMD_MEM_SIZE, GFP_KERNEL)?,
            pages: KVVec::from_elem(0, PAGE_SLOTS * PAGE as usize, GFP_KERNEL)?,
            violations: 0,
            irqs: 0,
        };
        // Field by field into the allocation: the whole rig assembled on
        // the stack and moved would be a 2 KiB frame.
        KBox::init(
            init!(Rig {
                fw: Firmware::new(cfg, store),
                hca: Hca::new(0, Caps::DEFAULT, storage),
                mem,
                now: 0,
                free,
                out: KVec::new(),
                die_after_commands: None,
                driver_errors: 0,
            }),
            GFP_KERNEL,
        )
    }

    fn cmd_mem(&self) -> CmdMem {
        CmdMem {
            addr: BASE,
            len: CMD_MEM_SIZE,
        }
    }

    /// The device holds exactly the pages the driver has out, and no
    /// access went astray.
    fn pages_consistent(&self) -> bool {
        let held = self.fw.held_pages();
        held.len() == self.out.len()
            && held.iter().all(|p| self.out.contains(p))
            && self.mem.violations == 0
            && self.driver_errors == 0
    }

    /// Every page is back, and the firmware refused nothing.
    fn clean(&self) -> bool {
        let c = self.fw.page_counts();
        self.pages_consistent()
            && self.out.is_empty()
            && self.free.len() == PAGE_SLOTS
            && c.held == 0
            && c.given_total == c.returned_total
            && self.fw.log().total() == 0
            && self.mem.irqs == 0
    }

    fn in_cmd_mem(&self, addr: u64, len: usize) -> bool {
        addr >= BASE && addr.saturating_add(len as u64) <= BASE + CMD_MEM_SIZE as u64
    }
}

impl Bus for Rig {
    fn read32(&mut self, offset: usize) -> u32 {
        self.fw.read32(offset)
    }

    fn write32(&mut self, offset: usize, value: u32) {
        if offset == CMD_DBELL_OFFSET
            && self
                .die_after_commands
                .is_some_and(|n| self.fw.stats().commands >= n)
        {
            return;
        }
        self.fw.write32(offset, value);
    }

    fn dma_read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        if !self.in_cmd_mem(addr, buf.len()) {
            self.driver_errors += 1;
            return Err(DmaError);
        }
        buf.copy_from_slice(self.mem.range(addr, buf.len()).ok_or(DmaError)?);
        Ok(())
    }

    fn dma_write(&mut self, addr: u64, data: &[u8]) -> Result<(), DmaError> {
        if !self.in_cmd_mem(addr, data.len()) {
            self.driver_errors += 1;
            return Err(DmaError);
        }
        self.mem
            .range(addr, data.len())
            .ok_or(DmaError)?
            .copy_from_slice(data);
        Ok(())
    }

    fn alloc_page(&mut self) -> Option<u64> {
        let p = self.free.pop()?;
        self.out.push(p, GFP_KERNEL).ok()?;
        Some(p)
    }

    fn free_page(&mut self, addr: u64) -> bool {
        match self.out.iter().position(|&p| p == addr) {
            Some(i) => {
                let _ = self.out.remove(i);
                self.free.push(addr, GFP_KERNEL).is_ok()
            }
            None => {
                self.driver_errors += 1;
                false
            }
        }
    }

    fn now_ns(&mut self) -> u64 {
        self.now
    }

    fn relax(&mut self, _wait: Wait) {
        self.now += STEP_NS;
        self.fw.set_time(self.now);
        if self.fw.has_pending() {
            self.fw.process(&mut self.mem, &mut self.hca);
        }
    }
}

#[kunit_tests(rmlx5_cmdif)]
mod tests {
    use super::*;

    /// mlx5_core's order, up and down: firmware revision, ISSI and the
    /// pages the device asked for; page requests both ways; teardown gets
    /// every page back, and the function comes up again.
    #[test]
    fn bring_up_then_teardown_returns_every_page() -> Result {
        let mut rig = Rig::new(FwConfig::DEFAULT)?;
        let mut f = Function::new(rig.cmd_mem(), Config::default());
        let s = f.bring_up(&mut *rig).map_err(|_| EIO)?;
        assert_eq!(
            s.fw_rev,
            FwRev {
                major: 16,
                minor: 35,
                subminor: 1012
            }
        );
        assert_eq!((s.cmdif_rev, s.issi), (5, 1));
        assert_eq!((s.boot_pages, s.init_pages, s.pages_lent), (8, 16, 24));
        assert_eq!(rig.fw.state(), HcaState::Initialized);
        assert_eq!(rig.fw.page_counts().held, 24);
        assert!(rig.pages_consistent());
        // The device asks for 5 more, then gives 3 back; of 10 more it
        // returns only the 2 beyond its boot and init pages.
        assert_eq!(f.page_request(&mut *rig, 5), Ok(5));
        assert_eq!(f.page_request(&mut *rig, -3), Ok(3));
        assert_eq!(f.page_request(&mut *rig, -10), Ok(2));
        assert_eq!(rig.fw.page_counts().held, 24);
        assert!(rig.pages_consistent());
        f.teardown(&mut *rig).map_err(|_| EIO)?;
        assert_eq!(rig.fw.state(), HcaState::Disabled);
        assert!(rig.clean());
        let again = f.bring_up(&mut *rig).map_err(|_| EIO)?;
        assert_eq!(again.uar, s.uar);
        f.teardown(&mut *rig).map_err(|_| EIO)?;
        assert!(rig.clean());
        Ok(())
    }

    /// A command the device fails comes back as the command's name,
    /// status and syndrome; the function is taken down with every page,
    /// and the next bring-up works.
    #[test]
    fn failed_command_is_named_and_undone() -> Result {
        let cfg = FwConfig {
            fail_opcode: OP_INIT_HCA,
            fail_count: 1,
            ..FwConfig::DEFAULT
        };
        let mut rig = Rig::new(cfg)?;
        let mut f = Function::new(rig.cmd_mem(), Config::default());
        let e = f.bring_up(&mut *rig).err();
        assert!(matches!(
            e,
            Some(Error::Cmd(CmdError::Failed {
                command: "INIT_HCA",
                opcode: OP_INIT_HCA,
                status: CmdStatus::BadParamErr,
                ..
            }))
        ));
        assert!(f.progress().pages_lent > 0);
        f.teardown(&mut *rig).map_err(|_| EIO)?;
        assert_eq!(rig.fw.state(), HcaState::Disabled);
        // Only the injected refusal is in the firmware's log.
        assert_eq!(rig.fw.log().total(), 1);
        rig.fw.clear_log();
        assert!(rig.clean());
        let mut f = Function::new(rig.cmd_mem(), Config::default());
        f.bring_up(&mut *rig).map_err(|_| EIO)?;
        f.teardown(&mut *rig).map_err(|_| EIO)?;
        assert!(rig.clean());
        Ok(())
    }

    /// Firmware that never leaves initialisation: bring-up gives up after
    /// mlx5_core's two minutes (of the simulated clock), posts nothing and
    /// lends nothing.
    #[test]
    fn firmware_never_ready_times_out() -> Result {
        let cfg = FwConfig {
            ready: Readiness::Never,
            ..FwConfig::DEFAULT
        };
        let mut rig = Rig::new(cfg)?;
        let mut f = Function::new(rig.cmd_mem(), Config::default());
        assert_eq!(
            f.bring_up(&mut *rig).err(),
            Some(Error::FwNotReady {
                wait: ReadyWait::PreInit,
                ms: 120_000
            })
        );
        assert!((120_000_000_000..=120_000_000_000 + STEP_NS).contains(&rig.now));
        f.teardown(&mut *rig).map_err(|_| EIO)?;
        assert_eq!(rig.fw.stats().commands, 0);
        assert!(rig.clean());
        Ok(())
    }

    /// A device that stops answering mid-bring-up: the command times out
    /// within its bound, teardown is bounded too and fails, and the pages
    /// the device took stay accounted to it (the driver frees none of
    /// them: the device may still write them).
    #[test]
    fn dead_device_times_out_and_keeps_its_pages() -> Result {
        let mut rig = Rig::new(FwConfig::DEFAULT)?;
        // ENABLE_HCA, QUERY_ISSI, SET_ISSI, QUERY_PAGES, MANAGE_PAGES.
        rig.die_after_commands = Some(5);
        let cfg = Config {
            timeouts: Timeouts {
                cmd_ms: 20,
                ..Timeouts::default()
            },
            ..Config::default()
        };
        let mut f = Function::new(rig.cmd_mem(), cfg);
        assert_eq!(
            f.bring_up(&mut *rig).err(),
            Some(Error::Timeout {
                command: "QUERY_HCA_CAP",
                opcode: 0x100,
                ms: 20
            })
        );
        assert_eq!(f.progress().pages_lent, 8);
        let start = rig.now;
        assert!(f.teardown(&mut *rig).is_err());
        assert!(rig.now - start <= 21 * STEP_NS);
        assert_eq!(f.progress().pages_lent, 8);
        assert_eq!(rig.out.len(), 8);
        assert!(rig.pages_consistent());
        Ok(())
    }
}
