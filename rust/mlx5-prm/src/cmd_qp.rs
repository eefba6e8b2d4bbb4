// SPDX-License-Identifier: GPL-2.0

//! Queue pair commands: CREATE_QP, the transitions RST2INIT, INIT2INIT,
//! INIT2RTR, RTR2RTS, 2ERR and 2RST, QUERY_QP and DESTROY_QP. The contexts
//! they carry are in `qpc`.
//!
//! CREATE_QP's input is followed by the bus addresses of the QP buffer's
//! pages (receive queue first, then send queue, as one buffer). The four
//! forward transitions take a full [`Qpc`] of which the device reads the
//! fields the transition defines, plus the optional ones named in
//! `opt_param_mask` (INIT2INIT only those); 2ERR, 2RST and DESTROY take only the QP number.
//! QUERY_QP takes the QP number and returns the context as the device has
//! it, `state` included (a QP the device moved to ERR after an error
//! completion reads [`super::qpc::STATE_ERR`]).
//!
//! `ece` (enhanced connection establishment) is carried for completeness;
//! a driver that does not negotiate it leaves it 0.

use super::command::{command, OP_2ERR_QP, OP_2RST_QP, OP_CREATE_QP, OP_DESTROY_QP};
use super::command::{OP_INIT2INIT_QP, OP_INIT2RTR_QP, OP_QUERY_QP, OP_RST2INIT_QP, OP_RTR2RTS_QP};
use super::ifc::ifc_layout;
use super::qpc::Qpc;

ifc_layout! {
    /// CREATE_QP input, followed by the buffer's page addresses.
    pub struct CreateQpIn = "create_qp_in", bits 0x880, opcode OP_CREATE_QP {
        /// Enhanced connection establishment options (0: none).
        ece: u32 = [0xa0, 0x20],
        /// The QP's context.
        qpc: Qpc = [0xc0, 0x740],
    }
}

ifc_layout! {
    /// CREATE_QP output.
    pub struct CreateQpOut = "create_qp_out", bits 0x80 {
        /// The QP number, 24 bits.
        qpn: u32 = [0x48, 0x18],
        /// The ECE options the device accepted.
        ece: u32 = [0x60, 0x20],
    }
}

ifc_layout! {
    /// RST2INIT_QP input: RESET to INIT (RC: pkey index, port, access
    /// bits).
    pub struct Rst2InitQpIn = "rst2init_qp_in", bits 0x880, opcode OP_RST2INIT_QP {
        /// The QP number, 24 bits.
        qpn: u32 = [0x48, 0x18],
        /// Optional fields given (`qpc::OPTPAR_*`).
        opt_param_mask: u32 = [0x80, 0x20],
        /// ECE options.
        ece: u32 = [0xa0, 0x20],
        /// The context.
        qpc: Qpc = [0xc0, 0x740],
    }
}

ifc_layout! {
    /// RST2INIT_QP output.
    pub struct Rst2InitQpOut = "rst2init_qp_out", bits 0x80 {
        /// ECE options in force.
        ece: u32 = [0x60, 0x20],
    }
}

ifc_layout! {
    /// INIT2INIT_QP input: INIT to INIT, changing only the fields
    /// `opt_param_mask` names (RC: pkey index, port, access bits; UD: pkey
    /// index, port, Q_Key).
    pub struct Init2InitQpIn = "init2init_qp_in", bits 0x880, opcode OP_INIT2INIT_QP {
        /// The QP number, 24 bits.
        qpn: u32 = [0x48, 0x18],
        /// Optional fields given (`qpc::OPTPAR_*`).
        opt_param_mask: u32 = [0x80, 0x20],
        /// ECE options.
        ece: u32 = [0xa0, 0x20],
        /// The context.
        qpc: Qpc = [0xc0, 0x740],
    }
}

ifc_layout! {
    /// INIT2INIT_QP output.
    pub struct Init2InitQpOut = "init2init_qp_out", bits 0x80 {
        /// ECE options in force.
        ece: u32 = [0x60, 0x20],
    }
}

ifc_layout! {
    /// INIT2RTR_QP input: INIT to ready-to-receive (RC: path, MTU, remote
    /// QPN, receive PSN, responder resources, RNR NAK timer).
    pub struct Init2RtrQpIn = "init2rtr_qp_in", bits 0x880, opcode OP_INIT2RTR_QP {
        /// The QP number, 24 bits.
        qpn: u32 = [0x48, 0x18],
        /// Optional fields given (`qpc::OPTPAR_*`).
        opt_param_mask: u32 = [0x80, 0x20],
        /// ECE options.
        ece: u32 = [0xa0, 0x20],
        /// The context.
        qpc: Qpc = [0xc0, 0x740],
    }
}

ifc_layout! {
    /// INIT2RTR_QP output.
    pub struct Init2RtrQpOut = "init2rtr_qp_out", bits 0x80 {
        /// ECE options in force.
        ece: u32 = [0x60, 0x20],
    }
}

ifc_layout! {
    /// RTR2RTS_QP input: ready-to-receive to ready-to-send (RC: send PSN,
    /// retry counts, ACK timeout, initiator depth).
    pub struct Rtr2RtsQpIn = "rtr2rts_qp_in", bits 0x880, opcode OP_RTR2RTS_QP {
        /// The QP number, 24 bits.
        qpn: u32 = [0x48, 0x18],
        /// Optional fields given (`qpc::OPTPAR_*`).
        opt_param_mask: u32 = [0x80, 0x20],
        /// ECE options.
        ece: u32 = [0xa0, 0x20],
        /// The context.
        qpc: Qpc = [0xc0, 0x740],
    }
}

ifc_layout! {
    /// RTR2RTS_QP output.
    pub struct Rtr2RtsQpOut = "rtr2rts_qp_out", bits 0x80 {
        /// ECE options in force.
        ece: u32 = [0x60, 0x20],
    }
}

ifc_layout! {
    /// 2ERR_QP input: any state to ERROR (outstanding WQEs are flushed).
    pub struct Qp2ErrIn = "qp_2err_in", bits 0x80, opcode OP_2ERR_QP {
        /// The QP number, 24 bits.
        qpn: u32 = [0x48, 0x18],
    }
}

ifc_layout! {
    /// 2ERR_QP output: the header only.
    pub struct Qp2ErrOut = "qp_2err_out", bits 0x80 {}
}

ifc_layout! {
    /// 2RST_QP input: any state to RESET.
    pub struct Qp2RstIn = "qp_2rst_in", bits 0x80, opcode OP_2RST_QP {
        /// The QP number, 24 bits.
        qpn: u32 = [0x48, 0x18],
    }
}

ifc_layout! {
    /// 2RST_QP output: the header only.
    pub struct Qp2RstOut = "qp_2rst_out", bits 0x80 {}
}

ifc_layout! {
    /// QUERY_QP input. The `qpc_ext` bit (bit 0x40: also return the QPC
    /// extension) is not modelled and is written 0.
    pub struct QueryQpIn = "query_qp_in", bits 0x80, opcode OP_QUERY_QP {
        /// The QP number, 24 bits.
        qpn: u32 = [0x48, 0x18],
    }
}

ifc_layout! {
    /// QUERY_QP output: the header, `opt_param_mask`, `ece`, the QP
    /// context and the 0x80 reserved bits after it, 272 bytes in all.
    ///
    /// mlx5_ifc.h's `query_qp_out` goes on with the union
    /// `qp_pas_or_qpc_ext_and_pas` (the QPC extension, 0x600 bits, when
    /// the input's `qpc_ext` is set, else the page list), which this
    /// layout leaves out: [`Layout::SIZE`](super::ifc::Layout::SIZE) is
    /// `MLX5_BYTE_OFF(query_qp_out, qp_pas_or_qpc_ext_and_pas)` = 272, not
    /// `MLX5_ST_SZ_BYTES(query_qp_out)` = 464 (which mlx5_ib passes as
    /// its output length; a longer output decodes the same).
    pub struct QueryQpOut = "query_qp_out", bits 0x880 {
        /// Optional parameters in force.
        opt_param_mask: u32 = [0x80, 0x20],
        /// ECE options in force.
        ece: u32 = [0xa0, 0x20],
        /// The context, with `state`.
        qpc: Qpc = [0xc0, 0x740],
    }
}

ifc_layout! {
    /// DESTROY_QP input.
    pub struct DestroyQpIn = "destroy_qp_in", bits 0x80, opcode OP_DESTROY_QP {
        /// The QP number, 24 bits.
        qpn: u32 = [0x48, 0x18],
    }
}

ifc_layout! {
    /// DESTROY_QP output: the header only.
    pub struct DestroyQpOut = "destroy_qp_out", bits 0x80 {}
}

command! {
    /// CREATE_QP (`MLX5_CMD_OP_CREATE_QP`, 0x500); the page list follows
    /// the input.
    pub struct CreateQp: OP_CREATE_QP, "CREATE_QP", CreateQpIn => CreateQpOut, in_pas true;
}

command! {
    /// RST2INIT_QP (`MLX5_CMD_OP_RST2INIT_QP`, 0x502).
    pub struct Rst2InitQp: OP_RST2INIT_QP, "RST2INIT_QP", Rst2InitQpIn => Rst2InitQpOut;
}

command! {
    /// INIT2INIT_QP (`MLX5_CMD_OP_INIT2INIT_QP`, 0x50e).
    pub struct Init2InitQp: OP_INIT2INIT_QP, "INIT2INIT_QP", Init2InitQpIn => Init2InitQpOut;
}

command! {
    /// INIT2RTR_QP (`MLX5_CMD_OP_INIT2RTR_QP`, 0x503).
    pub struct Init2RtrQp: OP_INIT2RTR_QP, "INIT2RTR_QP", Init2RtrQpIn => Init2RtrQpOut;
}

command! {
    /// RTR2RTS_QP (`MLX5_CMD_OP_RTR2RTS_QP`, 0x504).
    pub struct Rtr2RtsQp: OP_RTR2RTS_QP, "RTR2RTS_QP", Rtr2RtsQpIn => Rtr2RtsQpOut;
}

command! {
    /// 2ERR_QP (`MLX5_CMD_OP_2ERR_QP`, 0x507).
    pub struct Qp2Err: OP_2ERR_QP, "2ERR_QP", Qp2ErrIn => Qp2ErrOut;
}

command! {
    /// 2RST_QP (`MLX5_CMD_OP_2RST_QP`, 0x50a).
    pub struct Qp2Rst: OP_2RST_QP, "2RST_QP", Qp2RstIn => Qp2RstOut;
}

command! {
    /// QUERY_QP (`MLX5_CMD_OP_QUERY_QP`, 0x50b).
    pub struct QueryQp: OP_QUERY_QP, "QUERY_QP", QueryQpIn => QueryQpOut;
}

command! {
    /// DESTROY_QP (`MLX5_CMD_OP_DESTROY_QP`, 0x501).
    pub struct DestroyQp: OP_DESTROY_QP, "DESTROY_QP", DestroyQpIn => DestroyQpOut;
}

#[cfg(test)]
mod tests {
    use super::super::command::{self, Command};
    use super::super::ifc::Layout;
    use super::super::qpc::{Ads, OPTPAR_RRE, STATE_ERR, STATE_RTS, ST_RC};
    use super::*;

    #[test]
    fn transitions_known_bytes() {
        let input = Rtr2RtsQpIn {
            qpn: 0x12_3456,
            opt_param_mask: OPTPAR_RRE,
            ece: 0,
            qpc: Qpc {
                next_send_psn: 0xab_cdef,
                ..Qpc::default()
            },
        };
        let mut b = [0xffu8; Rtr2RtsQpIn::SIZE];
        input.encode(&mut b).unwrap();
        assert_eq!(
            b[..16],
            [5, 4, 0, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0x56, 0, 0, 0, 0]
        );
        assert_eq!(b[16..24], [0, 0, 0, 2, 0, 0, 0, 0]);
        assert_eq!(b[24 + 0x78..24 + 0x7c], [0, 0xab, 0xcd, 0xef]);
        assert_eq!(Rtr2RtsQpIn::decode(&b), Ok(input));
        assert_eq!(<Qp2Err as Command>::OPCODE, 0x507);
    }

    #[test]
    fn query_known_bytes() {
        let mut b = [0xffu8; 16];
        let len = command::encode_in::<QueryQp>(&QueryQpIn { qpn: 0x12_3456 }, &[], &mut b);
        assert_eq!(len, Ok(16));
        assert_eq!(
            b,
            [5, 0x0b, 0, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0x56, 0, 0, 0, 0]
        );
        assert_eq!(QueryQpOut::SIZE, 272);
        // A reply as the device writes it: header, then the context at
        // byte 0x18 (bit 0xc0).
        let mut out = [0u8; 464];
        out[0x18] = STATE_RTS << 4;
        out[0x18 + 0x14..0x18 + 0x18].copy_from_slice(&[0, 0xab, 0xcd, 0xef]);
        out[0x18 + 0x18 + 0x4..0x18 + 0x18 + 0x8].copy_from_slice(&[0, 0, 0x01, 0x02]);
        out[0x18 + 0x78..0x18 + 0x7c].copy_from_slice(&[0, 0x11, 0x22, 0x33]);
        let r = command::decode_out::<QueryQp>(&out).unwrap();
        assert_eq!(r.qpc.state, STATE_RTS);
        assert_eq!(r.qpc.remote_qpn, 0xab_cdef);
        assert_eq!(r.qpc.primary_address_path.rlid, 0x102);
        assert_eq!(r.qpc.next_send_psn, 0x11_2233);
        // Our 272 bytes decode the same as mlx5_ib's 464.
        assert_eq!(command::decode_out::<QueryQp>(&out[..272]), Ok(r));
        assert!(command::decode_out::<QueryQp>(&out[..271]).is_err());
        let back = QueryQpOut {
            qpc: Qpc {
                state: STATE_ERR,
                primary_address_path: Ads {
                    vhca_port_num: 1,
                    ..Ads::default()
                },
                ..r.qpc
            },
            ..r
        };
        let mut enc = [0xffu8; QueryQpOut::SIZE];
        back.encode(&mut enc).unwrap();
        assert_eq!(enc[..0x18], [0; 0x18]);
        assert_eq!(enc[0x18] >> 4, STATE_ERR);
        assert_eq!(QueryQpOut::decode(&enc), Ok(back));
    }

    #[test]
    fn create_with_pages() {
        let input = CreateQpIn {
            ece: 0,
            qpc: Qpc {
                st: ST_RC,
                ..Qpc::default()
            },
        };
        let mut msg = [0u8; 272 + 3 * 8];
        assert_eq!(
            command::encode_in::<CreateQp>(&input, &[0x1000, 0x2000, 0x3000], &mut msg),
            Ok(296)
        );
        assert_eq!(msg[288..296], [0, 0, 0, 0, 0, 0, 0x30, 0]);
        let mut out = [0u8; 16];
        out[8..12].copy_from_slice(&[0, 0, 0x01, 0x07]);
        let r = command::decode_out::<CreateQp>(&out).unwrap();
        assert_eq!(r.qpn, 0x107);
    }
}
