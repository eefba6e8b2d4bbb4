// SPDX-License-Identifier: GPL-2.0

//! mlx5 queue formats, byte for byte.
//!
//! This crate is the one place in rmlx5 that knows where a field sits inside
//! an mlx5 work queue entry, completion queue entry, event queue entry or
//! doorbell word, and in the network header (GRH, IPv4 or IPv6) at the
//! start of a UD receive buffer (`net_hdr`). Every layout is encoded into and decoded from a plain byte
//! array at explicit offsets, converting to and from big-endian on the way;
//! nothing relies on `#[repr(C)]` or on the host's byte order. The offsets
//! follow rdma-core's `infiniband/mlx5dv.h` and the kernel's
//! `include/linux/mlx5/{device,qp,cq,doorbell}.h`, and the tests under
//! `tests/` check them against those headers.
//!
//! Conventions shared by every module:
//!
//! - `encode` writes every byte of its output array: reserved bytes become
//!   zero and bits above a field's width are dropped. It never fails.
//! - `decode` reads a whole array and never panics, whatever the bytes. It
//!   returns an [`error::Error`] where a raw value has no meaning (an unknown
//!   opcode, a doorbell word with reserved bits set); reserved bytes of
//!   device-written layouts (CQE, EQE) are ignored.
//! - Multi-byte immediates and keys are kept as host integers; their
//!   big-endian bytes are what sits in the queue.
//! - Word forms, for fast paths that store to and load from the queues in
//!   whole words: `to_words` (a WQE segment as its 8-byte words in memory
//!   order), `InlineHeader::words`, `recv::recv_wqe_words`, the CQE views
//!   `Cqe64Words`/`ErrCqeWords`, and the doorbell words as the bytes of one
//!   store (`counter_word`, `set_ci_word`, `to_bytes`). Each gives exactly
//!   what the byte form writes or reads (the tests hold them to it), never
//!   panics, and is `#[inline]`, so that a caller in another crate pays no
//!   call for it.
//!
//! The crate is `no_std`, uses `core` only, has no dependencies and no
//! `unsafe`, so that rmlx5.ko can compile the same files. Kbuild builds one
//! crate per module, so the kernel side includes the files with
//! `#[path = ".../rust/mlx5-prm/src"] pub mod mlx5_prm { ... }` and must
//! declare the same modules as below (the list is also in `modules.txt`).
//! For that reason the module files carry no crate-level attributes and refer
//! to each other as `super::name`, never through `crate::`.

#![no_std]

// Module list (mirror it in the kernel's `mod mlx5_prm { ... }`):
// bytes, cmd_cq, cmd_eq, cmd_hca, cmd_qp, cmd_queue, cmd_res, cmd_status,
// cmd_vport, command, cqe, doorbell, eqe, eqe_async, error, hca_cap, ifc, init_seg,
// net_hdr, opcode, qpc, recv, ring, sq, wqe.
//
// The command layer of a PCI backend (not used yet): `init_seg` (BAR0
// registers), `cmd_queue` (queue entries and mailboxes), `command` (headers,
// opcodes, the `Command` trait), `cmd_status` (status codes and errors), `ifc` (bit-addressed mlx5_ifc layouts), the
// commands in `cmd_hca`, `hca_cap`, `cmd_res`, `cmd_eq`, `cmd_cq`, `qpc`,
// `cmd_qp` and `cmd_vport`, and the asynchronous EQEs in `eqe_async`.

pub mod bytes;
pub mod cmd_cq;
pub mod cmd_eq;
pub mod cmd_hca;
pub mod cmd_qp;
pub mod cmd_queue;
pub mod cmd_res;
pub mod cmd_status;
pub mod cmd_vport;
pub mod command;
pub mod cqe;
pub mod doorbell;
pub mod eqe;
pub mod eqe_async;
pub mod error;
pub mod hca_cap;
pub mod ifc;
pub mod init_seg;
pub mod net_hdr;
pub mod opcode;
pub mod qpc;
pub mod recv;
pub mod ring;
pub mod sq;
pub mod wqe;
