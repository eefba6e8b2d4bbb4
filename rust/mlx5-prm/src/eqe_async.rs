// SPDX-License-Identifier: GPL-2.0

//! The event data of the asynchronous events a PCI driver's EQ handles
//! beyond those `eqe` decodes: command completion (`struct mlx5_eqe_cmd`),
//! page request (`struct mlx5_eqe_page_req`) and port state change
//! (`struct mlx5_eqe_port_state`).
//!
//! [`super::eqe::Eqe::decode`] leaves these as [`EqeData::Raw`];
//! [`AsyncEvent::from_eqe`] reads them from there. Offsets below are within
//! the 28-byte `data` union (EQE byte 32 onwards).
//!
//! | event | data byte | field |
//! |---|---|---|
//! | `MLX5_EVENT_TYPE_CMD` | 0 | `vector`: bit `i` set, queue entry `i` completed |
//! | `MLX5_EVENT_TYPE_PAGE_REQUEST` | 0 | `ec_function`: embedded CPU (bit 15), release all (bit 14) |
//! | | 2 | `func_id` |
//! | | 4 | `num_pages`: signed; negative asks the driver to take pages back |
//! | `MLX5_EVENT_TYPE_PORT_CHANGE` | 8 | `port`: port number in bits 7:4 |

use super::bytes::{get_u16, get_u32, get_u8, put_u16, put_u32, put_u8};
use super::eqe::{Eqe, EqeData, DATA_SIZE};
use super::opcode::EventType;

/// `mlx5_eqe_page_req.ec_function` bit: the request is for the embedded
/// CPU's function (mlx5_core's `EC_FUNCTION_MASK`).
pub const EC_FUNCTION_MASK: u16 = 0x8000;
/// `mlx5_eqe_page_req.ec_function` bit: the firmware releases all of the
/// function's pages at once (mlx5_core's `RELEASE_ALL_PAGES_MASK`).
pub const RELEASE_ALL_PAGES_MASK: u16 = 0x4000;

/// Port change `sub_type`: the port went down
/// (`MLX5_PORT_CHANGE_SUBTYPE_DOWN`).
pub const PORT_CHANGE_DOWN: u8 = 1;
/// Port change `sub_type`: the port became active
/// (`MLX5_PORT_CHANGE_SUBTYPE_ACTIVE`).
pub const PORT_CHANGE_ACTIVE: u8 = 4;
/// Port change `sub_type`: the port was initialised
/// (`MLX5_PORT_CHANGE_SUBTYPE_INITIALIZED`).
pub const PORT_CHANGE_INITIALIZED: u8 = 5;
/// Port change `sub_type`: the LID changed (`MLX5_PORT_CHANGE_SUBTYPE_LID`).
pub const PORT_CHANGE_LID: u8 = 6;
/// Port change `sub_type`: the P_Key table changed
/// (`MLX5_PORT_CHANGE_SUBTYPE_PKEY`).
pub const PORT_CHANGE_PKEY: u8 = 7;
/// Port change `sub_type`: the GUID table changed
/// (`MLX5_PORT_CHANGE_SUBTYPE_GUID`).
pub const PORT_CHANGE_GUID: u8 = 8;
/// Port change `sub_type`: the SM asks clients to re-register
/// (`MLX5_PORT_CHANGE_SUBTYPE_CLIENT_REREG`).
pub const PORT_CHANGE_CLIENT_REREG: u8 = 9;

/// A command-completion event (`struct mlx5_eqe_cmd`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmdEqe {
    /// Bit `i` set: command queue entry `i` completed (its ownership bit is
    /// clear): `vector`, data byte 0.
    pub vector: u32,
}

impl CmdEqe {
    /// Writes the event data (every byte of it).
    pub fn encode(&self, out: &mut [u8; DATA_SIZE]) {
        *out = [0; DATA_SIZE];
        put_u32(out, 0, self.vector);
    }

    /// Reads the event data. Never fails.
    pub fn decode(b: &[u8; DATA_SIZE]) -> Self {
        CmdEqe {
            vector: get_u32(b, 0),
        }
    }
}

/// A page-request event (`struct mlx5_eqe_page_req`): the firmware wants
/// pages for a function (MANAGE_PAGES give) or offers some back (take).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageRequestEqe {
    /// The function is the embedded CPU's: `ec_function` bit 15.
    pub ec_function: bool,
    /// Take back every page of the function: `ec_function` bit 14.
    pub release_all: bool,
    /// The function (0 for the PF itself): `func_id`, data byte 2.
    pub func_id: u16,
    /// Pages to give if positive, to take back if negative: `num_pages`,
    /// data byte 4.
    pub num_pages: i32,
}

impl PageRequestEqe {
    /// Writes the event data (every byte of it).
    pub fn encode(&self, out: &mut [u8; DATA_SIZE]) {
        *out = [0; DATA_SIZE];
        let mut ec = 0u16;
        if self.ec_function {
            ec |= EC_FUNCTION_MASK;
        }
        if self.release_all {
            ec |= RELEASE_ALL_PAGES_MASK;
        }
        put_u16(out, 0, ec);
        put_u16(out, 2, self.func_id);
        put_u32(out, 4, self.num_pages as u32);
    }

    /// Reads the event data. Never fails; the other bits of `ec_function`
    /// are ignored.
    pub fn decode(b: &[u8; DATA_SIZE]) -> Self {
        let ec = get_u16(b, 0);
        PageRequestEqe {
            ec_function: ec & EC_FUNCTION_MASK != 0,
            release_all: ec & RELEASE_ALL_PAGES_MASK != 0,
            func_id: get_u16(b, 2),
            num_pages: get_u32(b, 4) as i32,
        }
    }
}

/// A port state change event (`struct mlx5_eqe_port_state`); what changed
/// is the EQE's `sub_type` (`PORT_CHANGE_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortChangeEqe {
    /// The port, from 1, 4 bits: `port` bits 7:4, data byte 8.
    pub port: u8,
}

impl PortChangeEqe {
    /// Writes the event data (every byte of it).
    pub fn encode(&self, out: &mut [u8; DATA_SIZE]) {
        *out = [0; DATA_SIZE];
        put_u8(out, 8, (self.port & 0xf) << 4);
    }

    /// Reads the event data. Never fails; bits 3:0 of `port` are ignored.
    pub fn decode(b: &[u8; DATA_SIZE]) -> Self {
        PortChangeEqe {
            port: get_u8(b, 8) >> 4,
        }
    }
}

/// One of the asynchronous events of this module, with what the EQE says
/// about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncEvent {
    /// `MLX5_EVENT_TYPE_CMD`.
    Cmd(CmdEqe),
    /// `MLX5_EVENT_TYPE_PAGE_REQUEST`.
    PageRequest(PageRequestEqe),
    /// `MLX5_EVENT_TYPE_PORT_CHANGE`, with the EQE's `sub_type`.
    PortChange {
        /// What changed (`PORT_CHANGE_*`): `mlx5_eqe.sub_type`.
        sub_type: u8,
        /// Which port.
        event: PortChangeEqe,
    },
}

impl AsyncEvent {
    /// The event in a decoded EQE, if it is one of this module's (the EQE's
    /// data is then [`EqeData::Raw`], as [`Eqe::decode`] leaves it).
    pub fn from_eqe(e: &Eqe) -> Option<Self> {
        let EqeData::Raw(raw) = &e.data else {
            return None;
        };
        match e.event_type {
            EventType::Cmd => Some(AsyncEvent::Cmd(CmdEqe::decode(raw))),
            EventType::PageRequest => Some(AsyncEvent::PageRequest(PageRequestEqe::decode(raw))),
            EventType::PortChange => Some(AsyncEvent::PortChange {
                sub_type: e.sub_type,
                event: PortChangeEqe::decode(raw),
            }),
            _ => None,
        }
    }

    /// An EQE carrying this event (a device model's side).
    pub fn to_eqe(&self, signature: u8, owner: bool) -> Eqe {
        let mut raw = [0u8; DATA_SIZE];
        let (event_type, sub_type) = match self {
            AsyncEvent::Cmd(c) => {
                c.encode(&mut raw);
                (EventType::Cmd, 0)
            }
            AsyncEvent::PageRequest(p) => {
                p.encode(&mut raw);
                (EventType::PageRequest, 0)
            }
            AsyncEvent::PortChange { sub_type, event } => {
                event.encode(&mut raw);
                (EventType::PortChange, *sub_type)
            }
        };
        Eqe {
            event_type,
            sub_type,
            data: EqeData::Raw(raw),
            signature,
            owner,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::eqe::EQE_SIZE;
    use super::*;

    #[test]
    fn command_completion_known_bytes() {
        let ev = AsyncEvent::Cmd(CmdEqe {
            vector: 0x8000_0001,
        });
        let mut b = [0xffu8; EQE_SIZE];
        ev.to_eqe(0, true).encode(&mut b);
        let mut want = [0u8; EQE_SIZE];
        want[1] = 0x0a;
        want[32..36].copy_from_slice(&[0x80, 0, 0, 1]);
        want[63] = 1;
        assert_eq!(b, want);
        assert_eq!(AsyncEvent::from_eqe(&Eqe::decode(&b).unwrap()), Some(ev));
    }

    #[test]
    fn page_request_known_bytes() {
        let ev = AsyncEvent::PageRequest(PageRequestEqe {
            ec_function: false,
            release_all: true,
            func_id: 0x0102,
            num_pages: -300,
        });
        let mut b = [0u8; EQE_SIZE];
        ev.to_eqe(0, false).encode(&mut b);
        assert_eq!(b[1], 0x0b);
        assert_eq!(b[32..40], [0x40, 0, 0x01, 0x02, 0xff, 0xff, 0xfe, 0xd4]);
        assert_eq!(AsyncEvent::from_eqe(&Eqe::decode(&b).unwrap()), Some(ev));
    }

    #[test]
    fn port_change_known_bytes() {
        let ev = AsyncEvent::PortChange {
            sub_type: PORT_CHANGE_ACTIVE,
            event: PortChangeEqe { port: 2 },
        };
        let mut b = [0u8; EQE_SIZE];
        ev.to_eqe(0, true).encode(&mut b);
        assert_eq!(b[1], 0x09);
        assert_eq!(b[3], 4);
        assert_eq!(b[40], 0x20);
        assert_eq!(AsyncEvent::from_eqe(&Eqe::decode(&b).unwrap()), Some(ev));
        // A completion EQE is none of these.
        b[1] = 0;
        assert_eq!(AsyncEvent::from_eqe(&Eqe::decode(&b).unwrap()), None);
    }
}
