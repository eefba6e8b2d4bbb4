// SPDX-License-Identifier: GPL-2.0

//! The server side of the vfio-user protocol, the part QEMU's
//! `vfio-user-pci` client uses.
//!
//! vfio-user carries the Linux VFIO device interface over a UNIX socket:
//! the client (QEMU) asks for the device's regions and interrupts, reads
//! and writes the regions (PCI config space, BARs) with messages, hands
//! over guest memory as file descriptors (DMA_MAP) and installs one
//! eventfd per interrupt vector (SET_IRQS). Every message is a 16-byte
//! header followed by a payload, all fields in host byte order; file
//! descriptors travel as `SCM_RIGHTS` ancillary data with the message's
//! first bytes.
//!
//! [`wire`] encodes and decodes the messages (no I/O, no `unsafe`);
//! [`socket`] moves them over the socket with their descriptors. The
//! protocol is written here from its public specification (QEMU's
//! `docs/interop/vfio-user.rst`) and the VFIO structures of
//! `include/uapi/linux/vfio.h`.

pub(crate) mod socket;
pub(crate) mod wire;
