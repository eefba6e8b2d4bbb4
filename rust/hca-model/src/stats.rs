// SPDX-License-Identifier: GPL-2.0

//! Counters an HCA instance keeps, so that tests and debugfs can see what
//! the model did and, above all, what it refused.

use super::doorbell::DoorbellError;

/// Counters of one HCA instance. All wrap on overflow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Send, CQ and EQ doorbells accepted.
    pub doorbells: u64,
    /// Doorbells refused (nothing was executed for them).
    pub doorbell_errors: u64,
    /// Why the last doorbell was refused.
    pub last_doorbell_error: Option<DoorbellError>,
    /// Send WQEs that completed successfully.
    pub wqes_executed: u64,
    /// Send WQEs that completed in error (not counting flushes).
    pub wqe_errors: u64,
    /// Send and receive WQEs flushed.
    pub flushed: u64,
    /// Receive WQEs consumed by incoming requests.
    pub recvs_consumed: u64,
    /// Messages that reached this instance as a responder, whatever it
    /// answered: RC requests (SEND, WRITE, READ, atomic) addressed to one
    /// of its QPNs, and datagrams. An embedder tells a one-way stream of
    /// doorbells from a ping-pong by it: between two doorbells of a
    /// ping-pong the ringing side receives the peer's reply.
    pub requests: u64,
    /// CQEs written.
    pub cqes: u64,
    /// CQEs dropped because their CQ was in error.
    pub cqes_dropped: u64,
    /// Completion events (COMP EQEs) generated.
    pub comp_events: u64,
    /// Asynchronous events generated.
    pub async_events: u64,
    /// Events dropped: EQ full, or no async EQ.
    pub events_dropped: u64,
    /// Arm doorbells ignored for a stale sequence number or a CQ in error.
    pub stale_arms: u64,
    /// RNR NAKs the requesters of this HCA received.
    pub rnr_naks: u64,
    /// Transport timeouts the requesters of this HCA saw.
    pub timeouts: u64,
    /// Doorbell records whose receive counter claimed more WQEs than the RQ
    /// holds (treated as no receive posted).
    pub bad_recv_counters: u64,
    /// Datagrams this instance sent that reached no instance: no port has
    /// the address vector's LID (InfiniBand) or MAC (RoCE) on a link of the
    /// sender's kind. Counted by the sender.
    pub ud_drop_no_dest: u64,
    /// Datagrams this instance could not address because their address
    /// vector names a source GID index with no entry (RoCE, or InfiniBand
    /// with a GRH). Counted by the sender.
    pub ud_drop_bad_sgid: u64,
    /// Datagrams that reached this instance for a QPN that is not a UD or
    /// GSI QP ready to receive (RTR, RTS, SQD or SQE). Counted by the
    /// receiver.
    pub ud_drop_bad_qpn: u64,
    /// Datagrams that reached a QP of this instance with a Q_Key other
    /// than the QP's. Counted by the receiver.
    pub ud_drop_qkey: u64,
    /// Datagrams that reached a QP of this instance with no receive WQE
    /// posted (mlx5's `out_of_buffer`). Counted by the receiver.
    pub ud_drop_no_recv: u64,
}

impl Stats {
    pub(super) fn doorbell_error(&mut self, e: DoorbellError) {
        self.doorbell_errors = self.doorbell_errors.wrapping_add(1);
        self.last_doorbell_error = Some(e);
    }
}

/// Adds one to a counter, wrapping.
pub(super) fn bump(c: &mut u64) {
    *c = c.wrapping_add(1);
}
