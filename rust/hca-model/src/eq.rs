// SPDX-License-Identifier: GPL-2.0

//! Event queues: the ring of EQEs, its producer and consumer indices, and
//! the one-shot arm that gates the interrupt.
//!
//! An EQ number is its slot index (8 bits: the EQ doorbell carries it in
//! bits 31:24). The embedder initialises every EQE's owner byte to 1 before
//! creating the EQ (`MLX5_EQE_OWNER_INIT_VAL`); the model writes owner =
//! pass parity of its producer index, so the first pass reads as new.
//!
//! Arming is one-shot: the first EQE written while the EQ is armed raises
//! the interrupt and disarms the EQ, which stays quiet, however many EQEs
//! follow, until an arm doorbell arrives. An arm doorbell whose consumer
//! index is behind the producer index raises the interrupt at once, so an
//! EQE written between the handler's last poll and its re-arm is never
//! stranded. An EQE that would overwrite one the consumer has not passed is
//! dropped and counted (EQ overrun; mlx5 treats it as fatal, the model keeps
//! going so tests can observe it).

use super::mem::{Interrupt, Platform};
use super::prm::eqe::{Eqe, EqeData, EQE_SIZE, OWNER_OFFSET};
use super::prm::opcode::EventType;
use super::prm::ring;

/// What the embedder gives to create an EQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EqAttr {
    /// log2 of the number of EQEs.
    pub log_size: u8,
    /// DMA address of the EQE ring (`64 << log_size` bytes).
    pub buf_addr: u64,
    /// DMA address of the UAR page whose EQ doorbells update this EQ.
    pub uar_addr: u64,
    /// Interrupt vector passed back in [`Interrupt::vector`].
    pub vector: u16,
    /// Whether this EQ receives the asynchronous events (CQ errors, QP
    /// errors, SQ drained...). At most one EQ of an HCA does.
    pub async_events: bool,
}

/// A snapshot of an EQ's state, for debugfs and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EqInfo {
    /// EQ number.
    pub eqn: u8,
    /// EQEs written so far (free-running producer counter).
    pub producer_index: u32,
    /// Consumer index from the last EQ doorbell (24 bits).
    pub consumer_index: u32,
    /// Whether the next EQE raises the interrupt.
    pub armed: bool,
    /// EQEs dropped because the ring was full.
    pub overruns: u32,
    /// Interrupts raised.
    pub interrupts: u32,
}

/// An event queue.
#[derive(Debug)]
pub struct Eq {
    pub(super) attr: EqAttr,
    pub(super) eqn: u8,
    pub(super) pi: u32,
    pub(super) ci: u32,
    pub(super) armed: bool,
    pub(super) overruns: u32,
    pub(super) interrupts: u32,
    /// CQs that deliver their completion events here.
    pub(super) users: u32,
}

impl Eq {
    pub(super) fn new(eqn: u8, attr: EqAttr) -> Self {
        Eq {
            attr,
            eqn,
            pi: 0,
            ci: 0,
            armed: false,
            overruns: 0,
            interrupts: 0,
            users: 0,
        }
    }

    /// The state of the EQ.
    pub fn info(&self) -> EqInfo {
        EqInfo {
            eqn: self.eqn,
            producer_index: self.pi,
            consumer_index: self.ci,
            armed: self.armed,
            overruns: self.overruns,
            interrupts: self.interrupts,
        }
    }

    fn size(&self) -> u32 {
        1u32 << self.attr.log_size
    }

    /// Writes one EQE (body first, owner byte last) and raises the interrupt
    /// if the EQ is armed. Returns `false` if the EQE was dropped (ring full
    /// or unreachable memory).
    pub(super) fn post<P: Platform>(
        &mut self,
        p: &mut P,
        hca: u16,
        event_type: EventType,
        data: EqeData,
    ) -> bool {
        self.post_sub(p, hca, event_type, 0, data)
    }

    /// As [`Eq::post`], with the EQE's `sub_type` (a port change says
    /// what changed there).
    pub(super) fn post_sub<P: Platform>(
        &mut self,
        p: &mut P,
        hca: u16,
        event_type: EventType,
        sub_type: u8,
        data: EqeData,
    ) -> bool {
        if ring::ci24_distance(self.ci, self.pi) >= self.size() {
            self.overruns = self.overruns.wrapping_add(1);
            return false;
        }
        let eqe = Eqe {
            event_type,
            sub_type,
            data,
            signature: 0,
            owner: ring::owner_bit(self.pi, u32::from(self.attr.log_size)),
        };
        let mut bytes = [0u8; EQE_SIZE];
        eqe.encode(&mut bytes);
        let index = u64::from(ring::ring_index(self.pi, u32::from(self.attr.log_size)));
        let addr = self.attr.buf_addr.wrapping_add(index * EQE_SIZE as u64);
        let (body, owner) = bytes.split_at(OWNER_OFFSET);
        if p.write(addr, body).is_err()
            || p.write(addr.wrapping_add(OWNER_OFFSET as u64), owner)
                .is_err()
        {
            self.overruns = self.overruns.wrapping_add(1);
            return false;
        }
        self.pi = self.pi.wrapping_add(1);
        if self.armed {
            self.fire(p, hca);
        }
        true
    }

    /// Applies an EQ doorbell: new consumer index, and arm if `arm`.
    pub(super) fn doorbell<P: Platform>(&mut self, p: &mut P, hca: u16, ci: u32, arm: bool) {
        self.ci = ring::ci24(ci);
        if arm {
            self.armed = true;
            let pending = ring::ci24_distance(self.ci, self.pi);
            if pending != 0 && pending <= self.size() {
                self.fire(p, hca);
            }
        }
    }

    fn fire<P: Platform>(&mut self, p: &mut P, hca: u16) {
        self.armed = false;
        self.interrupts = self.interrupts.wrapping_add(1);
        p.interrupt(Interrupt {
            hca,
            eqn: self.eqn,
            vector: self.attr.vector,
        });
    }
}
