// SPDX-License-Identifier: GPL-2.0

//! Event queues: the EQ context (`eqc`) and CREATE_EQ / DESTROY_EQ.
//!
//! CREATE_EQ's input is followed by the bus addresses of the EQ buffer's
//! pages (`pas`); the buffer holds `1 << log_eq_size` 64-byte EQEs, every
//! `owner` byte initialised to 1 (see `ring::EQE_INIT_OWNER`). The
//! `event_bitmask` selects which event types the EQ receives: bit `t % 64`
//! of word `t / 64` for event type `t` ([`event_mask`]). A PCI driver
//! creates at least an asynchronous EQ (command completions, page
//! requests, port changes, QP/CQ errors) and one completion EQ per
//! interrupt vector; completion events need no bit.

use super::command::{command, OP_CREATE_EQ, OP_DESTROY_EQ};
use super::ifc::ifc_layout;
use super::opcode::EventType;

/// `eqc.st`: armed, the next EQE raises an interrupt (`MLX5_EQC_ST_ARMED`).
pub const EQC_ST_ARMED: u8 = 0x9;
/// `eqc.st`: fired, an interrupt was raised and the EQ is not re-armed
/// (`MLX5_EQC_ST_FIRED`).
pub const EQC_ST_FIRED: u8 = 0xa;
/// Shift between a page size and `log_page_size` of the queue contexts:
/// they count in 4 KiB pages (`MLX5_ADAPTER_PAGE_SHIFT`).
pub const ADAPTER_PAGE_SHIFT: u8 = 12;

/// The `event_bitmask` words that select the event types `types`.
pub fn event_mask(types: &[EventType]) -> [u64; 4] {
    let mut mask = [0u64; 4];
    for &t in types {
        let t = u8::from(t);
        if let Some(w) = mask.get_mut(usize::from(t / 64)) {
            *w |= 1u64 << (t % 64);
        }
    }
    mask
}

ifc_layout! {
    /// The event queue context (`eqc`).
    pub struct Eqc = "eqc", bits 0x200 {
        /// Overrun ignore: the device does not check for an overflowing
        /// EQ (mlx5_core leaves it 0).
        oi: bool = [0xe, 1],
        /// Arming state (`EQC_ST_*`); 0 at creation, the EQ is armed
        /// through its doorbell.
        st: u8 = [0x14, 4],
        /// Offset of the buffer in its first page, in 64-byte units
        /// (0 for page-aligned buffers).
        page_offset: u8 = [0x54, 6],
        /// Log2 of the number of EQEs.
        log_eq_size: u8 = [0x63, 5],
        /// UAR page whose EQ doorbell serves this EQ, 24 bits.
        uar_page: u32 = [0x68, 0x18],
        /// MSI-X vector the EQ interrupts on, 12 bits.
        intr: u16 = [0xb4, 0xc],
        /// Log2 of the buffer's page size minus [`ADAPTER_PAGE_SHIFT`].
        log_page_size: u8 = [0xc3, 5],
    }
}

ifc_layout! {
    /// CREATE_EQ input, followed by the buffer's page addresses.
    pub struct CreateEqIn = "create_eq_in", bits 0x880, opcode OP_CREATE_EQ {
        /// The EQ's context.
        eq_context_entry: Eqc = [0x80, 0x200],
        /// The event types the EQ receives, four 64-bit words
        /// ([`event_mask`]).
        event_bitmask: [u64; 4] = [0x2c0, 0x40],
    }
}

ifc_layout! {
    /// CREATE_EQ output.
    pub struct CreateEqOut = "create_eq_out", bits 0x80 {
        /// The EQ number (EQN), 8 bits: what the EQ doorbell and CQ
        /// contexts name.
        eq_number: u8 = [0x58, 8],
    }
}

ifc_layout! {
    /// DESTROY_EQ input.
    pub struct DestroyEqIn = "destroy_eq_in", bits 0x80, opcode OP_DESTROY_EQ {
        /// The EQ number.
        eq_number: u8 = [0x58, 8],
    }
}

ifc_layout! {
    /// DESTROY_EQ output: the header only.
    pub struct DestroyEqOut = "destroy_eq_out", bits 0x80 {}
}

command! {
    /// CREATE_EQ (`MLX5_CMD_OP_CREATE_EQ`, 0x301); the page list follows
    /// the input.
    pub struct CreateEq: OP_CREATE_EQ, "CREATE_EQ", CreateEqIn => CreateEqOut, in_pas true;
}

command! {
    /// DESTROY_EQ (`MLX5_CMD_OP_DESTROY_EQ`, 0x302).
    pub struct DestroyEq: OP_DESTROY_EQ, "DESTROY_EQ", DestroyEqIn => DestroyEqOut;
}

#[cfg(test)]
mod tests {
    use super::super::command;
    use super::super::ifc::Layout;
    use super::*;

    #[test]
    fn async_eq_known_bytes() {
        let input = CreateEqIn {
            eq_context_entry: Eqc {
                log_eq_size: 7,
                uar_page: 0x12,
                intr: 0xabc,
                log_page_size: 0,
                ..Eqc::default()
            },
            event_bitmask: event_mask(&[
                EventType::Cmd,
                EventType::PageRequest,
                EventType::PortChange,
                EventType::ObjectChange,
            ]),
        };
        assert_eq!(input.event_bitmask, [0x80_0000_0e00, 0, 0, 0]);
        let mut msg = [0u8; 280];
        assert_eq!(
            command::encode_in::<CreateEq>(&input, &[0x8000_0000], &mut msg),
            Ok(280)
        );
        assert_eq!(msg[..2], [3, 1]);
        assert_eq!(msg[16 + 12..16 + 16], [7, 0, 0, 0x12]);
        assert_eq!(msg[16 + 20..16 + 24], [0, 0, 0x0a, 0xbc]);
        assert_eq!(msg[0x58..0x60], [0, 0, 0, 0x80, 0, 0, 0x0e, 0]);
        assert_eq!(msg[272..280], [0, 0, 0, 0, 0x80, 0, 0, 0]);
        assert_eq!(CreateEqIn::decode(&msg), Ok(input));
    }
}
