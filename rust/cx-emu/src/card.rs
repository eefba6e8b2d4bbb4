// SPDX-License-Identifier: GPL-2.0

//! The card: one or more PCI functions on one fabric.
//!
//! Each [`Function`] has its own firmware (command queue, pages, UARs,
//! EQs), its own bus (the DMA mappings and MSI-X eventfds of its vfio-user
//! client, its UAR pages) and its own configuration space (in the
//! server). What they share is [`Shared`]: one `Fabric` holding one HCA
//! instance per function, function `i` owning instance `i` (LID `i + 1`),
//! and the engine's state. RC and UD traffic between the functions' QPs
//! is then what it is between two instances of the software HCA: one
//! engine step executes a WQE of one instance against a QP of the other.
//!
//! # DMA and interrupts
//!
//! Everything a function does on its own instance (commands, doorbells,
//! port changes) reaches memory through its own bus. The engine
//! ([`Fabric::run`]) takes one platform for the whole fabric and does not
//! say which instance an access is for (a SEND copies from the
//! requester's memory into the responder's in one loop), so its platform,
//! [`EngineBus`], routes by address: a UAR address to the function whose
//! window holds it (`bus::uar_base`), guest memory to the mappings of the
//! function whose doorbell or timer started the run, then to the others'
//! (every client of one QEMU maps the same guest RAM at the same guest
//! physical addresses, so each function's mappings reach all of it); an
//! interrupt to the function that owns the instance named in it.
//!
//! # A function that stops
//!
//! A function whose firmware a fault halted, whose bus mastering is off
//! or whose client is gone executes nothing and answers nothing. Its
//! instance is then taken out of the fabric ("parked" in the function)
//! and an empty stand-in takes its place: the other functions' runs leave
//! its queues alone, and their requests to it find no QP (no answer, so
//! their QPs retry and time out, as with a card that went silent). A
//! reset builds the function a fresh instance at the same index.

use std::time::{Duration, Instant};

use hca_model::caps::Caps;
use hca_model::fabric::{Fabric, HcaSet};
use hca_model::hca::Hca;
use hca_model::mem::{DmaFault, DmaMemory, Interrupt, Platform};

use crate::bus::Bus;
use crate::function::{Function, Settings};
use crate::log;
use crate::storage::VecStorage;

/// Budget of one engine run (WQEs, 4 KiB moved) between two messages.
const RUN_BUDGET: u32 = 256;

/// Most functions one process serves.
pub(crate) const MAX_FUNCTIONS: usize = 8;

/// The HCA instances of the fabric, instance `i` function `i`'s.
#[derive(Debug)]
pub(crate) struct Instances(Vec<Hca<VecStorage>>);

impl HcaSet for Instances {
    type Storage = VecStorage;

    fn hcas(&mut self) -> &mut [Hca<VecStorage>] {
        &mut self.0
    }
}

/// A new, empty HCA instance for fabric index `index`.
pub(crate) fn new_instance(index: u16) -> Hca<VecStorage> {
    Hca::new(index, Caps::DEFAULT, VecStorage::new(crate::storage::SIZES))
}

/// What the functions share: the fabric and the engine's state.
#[derive(Debug)]
pub(crate) struct Shared {
    /// Every function's HCA instance.
    pub(crate) fabric: Box<Fabric<Instances>>,
    /// `Fabric::run` left work that can run now.
    pub(crate) more: bool,
}

impl Shared {
    /// Whether the instances in the fabric have work queued (after an
    /// instance left it or came back).
    pub(crate) fn refresh_more(&mut self) {
        self.more = self.fabric.hcas().iter().any(Hca::has_work);
    }
}

/// The other functions of the card, seen from one of them.
pub(crate) struct Peers<'a> {
    before: &'a mut [Function],
    after: &'a mut [Function],
}

impl Peers<'_> {
    /// Every other function.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Function> {
        self.before.iter_mut().chain(self.after.iter_mut())
    }

    /// Function `index`, seen from function `me`.
    fn get(&mut self, index: usize, me: usize) -> Option<&mut Function> {
        if index < me {
            self.before.get_mut(index)
        } else {
            self.after.get_mut(index.checked_sub(me + 1)?)
        }
    }
}

/// What a function reaches besides itself.
pub(crate) struct Cx<'a> {
    /// The fabric.
    pub(crate) shared: &'a mut Shared,
    /// The other functions.
    pub(crate) peers: Peers<'a>,
}

impl Cx<'_> {
    /// Runs the engine for function `index`, whose bus is `own`.
    pub(crate) fn run(&mut self, index: u16, own: &mut Bus) {
        let mut p = EngineBus {
            index,
            own,
            peers: &mut self.peers,
        };
        let r = self.shared.fabric.run(&mut p, RUN_BUDGET);
        self.shared.more = r.more;
        // A QP of another function may have entered ERR too.
        for f in self.peers.iter_mut().filter(|f| !f.stopped()) {
            f.arm_err_watch();
        }
    }
}

/// The engine's platform: the bus of the function that runs it, and its
/// peers' (see the module documentation).
struct EngineBus<'a, 'b> {
    index: u16,
    own: &'a mut Bus,
    peers: &'a mut Peers<'b>,
}

impl EngineBus<'_, '_> {
    fn peer_bus(&mut self, hca: u16) -> Option<&mut Bus> {
        let me = usize::from(self.index);
        self.peers.get(usize::from(hca), me).map(|f| &mut f.bus)
    }
}

impl DmaMemory for EngineBus<'_, '_> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
        if let Some(src) = self.own.uars.range(addr, buf.len()) {
            buf.copy_from_slice(src);
            return Ok(());
        }
        for f in self.peers.iter_mut() {
            if let Some(src) = f.bus.uars.range(addr, buf.len()) {
                buf.copy_from_slice(src);
                return Ok(());
            }
        }
        let fault = match self.own.mem.read(addr, buf) {
            Ok(()) => return Ok(()),
            Err(f) => f,
        };
        if self
            .peers
            .iter_mut()
            .any(|f| f.bus.mem.read(addr, buf).is_ok())
        {
            return Ok(());
        }
        Err(self.own.fault("read", addr, buf.len(), fault))
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), DmaFault> {
        if let Some(dst) = self.own.uars.range(addr, data.len()) {
            dst.copy_from_slice(data);
            return Ok(());
        }
        for f in self.peers.iter_mut() {
            if let Some(dst) = f.bus.uars.range(addr, data.len()) {
                dst.copy_from_slice(data);
                return Ok(());
            }
        }
        let fault = match self.own.mem.write(addr, data) {
            Ok(()) => return Ok(()),
            Err(f) => f,
        };
        // A refused write lands nowhere, so trying the next is safe.
        if self
            .peers
            .iter_mut()
            .any(|f| f.bus.mem.write(addr, data).is_ok())
        {
            return Ok(());
        }
        Err(self.own.fault("write", addr, data.len(), fault))
    }
}

impl Platform for EngineBus<'_, '_> {
    fn interrupt(&mut self, irq: Interrupt) {
        if irq.hca == self.index {
            self.own.interrupt(irq);
            return;
        }
        let tag = log::set_function(Some(usize::from(irq.hca)));
        if let Some(bus) = self.peer_bus(irq.hca) {
            bus.interrupt(irq);
            log::set_function(tag);
            return;
        }
        // No function owns the instance (cannot happen: the fabric holds
        // one instance per function): counted as lost on this one.
        log::set_function(tag);
        self.own.interrupt(irq);
    }
}

/// The functions and their fabric.
pub(crate) struct Card {
    shared: Shared,
    functions: Vec<Function>,
}

impl Card {
    /// `n` functions (1 to [`MAX_FUNCTIONS`]) built with `settings`, fresh
    /// from reset, on one fabric.
    pub(crate) fn new(settings: Settings, n: usize) -> Self {
        let n = n.clamp(1, MAX_FUNCTIONS);
        let start = Instant::now();
        let index = |i: usize| u16::try_from(i).unwrap_or(u16::MAX);
        let instances = (0..n).map(|i| new_instance(index(i))).collect();
        Card {
            shared: Shared {
                fabric: Box::new(Fabric::new(Instances(instances))),
                more: false,
            },
            functions: (0..n)
                .map(|i| Function::new(settings, index(i), start))
                .collect(),
        }
    }

    /// Function `i` (its bus, settings and counters).
    pub(crate) fn function(&mut self, i: usize) -> Option<&mut Function> {
        self.functions.get_mut(i)
    }

    /// Runs `op` on function `i` with what it shares, its log lines
    /// tagged with its number if the card has several functions.
    fn with<R>(&mut self, i: usize, op: impl FnOnce(&mut Function, &mut Cx<'_>) -> R) -> Option<R> {
        let tagged = self.functions.len() > 1;
        let at = i.min(self.functions.len());
        let (before, rest) = self.functions.split_at_mut(at);
        let (f, after) = rest.split_first_mut()?;
        let tag = tagged.then(|| log::set_function(Some(i)));
        let mut cx = Cx {
            shared: &mut self.shared,
            peers: Peers { before, after },
        };
        let r = op(f, &mut cx);
        if let Some(t) = tag {
            log::set_function(t);
        }
        Some(r)
    }

    /// A BAR0 read of function `i`.
    pub(crate) fn bar0_read(&mut self, i: usize, offset: u64, data: &mut [u8]) {
        self.with(i, |f, cx| f.bar0_read(cx, offset, data));
    }

    /// A BAR0 write of function `i`.
    pub(crate) fn bar0_write(&mut self, i: usize, offset: u64, data: &[u8]) {
        self.with(i, |f, cx| f.bar0_write(cx, offset, data));
    }

    /// Resets function `i` (DEVICE_RESET).
    pub(crate) fn reset(&mut self, i: usize) {
        self.with(i, |f, cx| f.reset(cx));
    }

    /// A function-level reset of function `i`.
    pub(crate) fn flr(&mut self, i: usize) {
        self.with(i, |f, cx| f.flr(cx));
    }

    /// Function `i`'s guest set or cleared Bus Master Enable.
    pub(crate) fn set_bus_master(&mut self, i: usize, on: bool) {
        self.with(i, |f, cx| f.set_bus_master(cx, on));
    }

    /// Function `i`'s client is gone: what it held is rung, its counts
    /// made final, and it stops (see the module documentation); its
    /// memory and eventfds are let go.
    pub(crate) fn detach(&mut self, i: usize) {
        self.with(i, |f, cx| f.detach(cx));
    }

    /// Whether anything function `i`'s guest did was refused.
    pub(crate) fn failed(&mut self, i: usize) -> bool {
        self.with(i, |f, cx| f.failed(cx)).unwrap_or(false)
    }

    /// Function `i`'s summary lines.
    pub(crate) fn summary(&mut self, i: usize) -> Vec<String> {
        self.with(i, |f, cx| f.summary(cx)).unwrap_or_default()
    }

    /// Timer work of every function (see `Function::tick`).
    pub(crate) fn tick(&mut self) {
        for i in 0..self.functions.len() {
            self.with(i, |f, cx| f.tick(cx));
        }
    }

    /// How long the caller may wait before calling [`Card::tick`] (`None`:
    /// no timer work pending).
    pub(crate) fn next_timeout(&mut self) -> Option<Duration> {
        (0..self.functions.len())
            .filter_map(|i| self.with(i, |f, cx| f.next_timeout(cx)).flatten())
            .min()
    }
}

#[cfg(test)]
impl Card {
    /// How many functions the card has.
    pub(crate) fn len(&self) -> usize {
        self.functions.len()
    }

    /// Runs `op` on function `i` (tests reach the function's inner parts).
    pub(crate) fn on<R>(
        &mut self,
        i: usize,
        op: impl FnOnce(&mut Function, &mut Cx<'_>) -> R,
    ) -> R {
        // PANIC: host test harness: a function the test did not build is a test bug.
        self.with(i, op).unwrap()
    }

    /// The fabric's instance `i` (parked instances are not in it).
    pub(crate) fn instance(&mut self, i: u16) -> Option<&mut Hca<VecStorage>> {
        self.shared.fabric.hca(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::{uar_base, UAR_BASE};

    #[test]
    fn functions_get_their_own_instance_uar_window_and_lid() {
        let mut c = Card::new(Settings::DEFAULT, 2);
        assert_eq!(c.len(), 2);
        assert_eq!(c.instance(0).map(|h| h.id()), Some(0));
        assert_eq!(c.instance(1).map(|h| h.id()), Some(1));
        assert!(c.instance(2).is_none());
        let b0 = c.on(0, |f, _| f.uar_addr(1));
        let b1 = c.on(1, |f, _| f.uar_addr(1));
        assert_eq!(b0, UAR_BASE + 4096);
        assert_eq!(b1, uar_base(1) + 4096);
        assert_eq!(c.next_timeout(), None, "an idle card sleeps");
    }

    #[test]
    fn a_reset_rebuilds_its_own_instance_in_place_only() {
        let mut c = Card::new(Settings::DEFAULT, 2);
        let pd = |c: &mut Card, i| c.instance(i).unwrap().alloc_pd().unwrap();
        let pd0 = pd(&mut c, 0);
        let pd1 = pd(&mut c, 1);
        c.flr(1);
        assert_ne!(pd(&mut c, 0), pd0, "instance 0 kept its PD");
        assert_eq!(pd(&mut c, 1), pd1, "instance 1 starts over");
        assert_eq!(c.instance(1).map(|h| h.id()), Some(1));
    }

    #[test]
    fn a_stopped_function_leaves_the_fabric_until_it_runs_again() {
        use crate::testreg::TEST_PAGE_OFFSET;
        let mut c = Card::new(Settings::DEFAULT, 2);
        let pd1 = c.instance(1).unwrap().alloc_pd().unwrap();
        // Bus mastering off: a stand-in holds index 1; back on, the
        // instance returns with its PD.
        c.set_bus_master(1, false);
        assert_eq!(
            c.instance(1).unwrap().alloc_pd().unwrap(),
            pd1,
            "a stand-in"
        );
        c.set_bus_master(1, true);
        assert_ne!(c.instance(1).unwrap().alloc_pd().unwrap(), pd1);
        // A fatal fault: out until a reset, which brings a fresh one.
        c.bar0_write(1, TEST_PAGE_OFFSET, &1u32.to_le_bytes());
        assert!(c.on(1, |f, _| f.stopped()));
        assert_eq!(
            c.instance(1).unwrap().alloc_pd().unwrap(),
            pd1,
            "a stand-in"
        );
        c.reset(1);
        assert!(!c.on(1, |f, _| f.stopped()));
        assert_eq!(c.instance(1).unwrap().alloc_pd().unwrap(), pd1, "fresh");
        // Function 0 was never touched.
        assert!(!c.on(0, |f, _| f.stopped()));
        assert!(!c.failed(0) && !c.failed(1));
    }

    #[test]
    fn one_function_is_the_default_and_the_count_is_bounded() {
        assert_eq!(Card::new(Settings::DEFAULT, 0).len(), 1);
        assert_eq!(Card::new(Settings::DEFAULT, 99).len(), MAX_FUNCTIONS);
    }
}
