// SPDX-License-Identifier: GPL-2.0

//! KUnit suite for the mlx5 formats as compiled into the module.
//!
//! The exhaustive conformance and property tests of `rust/mlx5-prm` run on
//! the host; this suite runs a representative subset inside the kernel to
//! prove the same source builds and behaves the same under the kernel's
//! compiler flags (overflow checks, panic=abort, no_std).

use kernel::prelude::*;

#[kunit_tests(rmlx5_prm)]
mod tests {
    use crate::mlx5_prm::{
        cqe::{
            Cqe64,
            ErrCqe,
            OpOwn, //
        },
        doorbell::{
            ArmCmd,
            CqArm, //
        },
        eqe::{
            Eqe,
            EqeData,
            EQE_SIZE, //
        },
        error::Error,
        opcode::{
            CqeOpcode,
            CqeSyndrome,
            EventType,
            SendOpcode, //
        },
        ring, sq,
        wqe::{
            CtrlSeg,
            DataSeg,
            RaddrSeg,
            CE_CQ_UPDATE,
            MAX_WQE_SIZE, //
        },
    };
    use kernel::prelude::*;

    #[test]
    fn ctrl_seg_bytes() -> Result {
        let ctrl = CtrlSeg {
            opmod: 0,
            wqe_index: 0x1234,
            opcode: SendOpcode::RdmaWriteImm,
            qpn: 0xabcdef,
            ds: 3,
            signature: 0,
            fence_mode: 0,
            ce: CE_CQ_UPDATE,
            solicited: true,
            imm: 0xdead_beef,
        };
        let mut b = [0u8; 16];
        ctrl.encode(&mut b);
        let want: [u8; 16] = [
            0x00, 0x12, 0x34, 0x09, 0xab, 0xcd, 0xef, 0x03, 0, 0, 0, 0x0a, 0xde, 0xad, 0xbe, 0xef,
        ];
        assert_eq!(b, want);
        assert_eq!(CtrlSeg::decode(&b), Ok(ctrl));
        Ok(())
    }

    #[test]
    fn raddr_and_data_seg_bytes() -> Result {
        let mut b = [0u8; 16];
        RaddrSeg {
            raddr: 0x0102_0304_0506_0708,
            rkey: 0x1122_3344,
        }
        .encode(&mut b);
        assert_eq!(b[..12], [1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x22, 0x33, 0x44]);
        DataSeg {
            byte_count: 64,
            lkey: 0x100,
            addr: 0xffff_8000_0000_1000,
        }
        .encode(&mut b);
        assert_eq!(
            b,
            [0, 0, 0, 64, 0, 0, 1, 0, 0xff, 0xff, 0x80, 0, 0, 0, 0x10, 0]
        );
        Ok(())
    }

    #[test]
    fn inline_payload_wraps_at_sq_end() -> Result {
        // Two WQEBBs; start the inline segment 16 bytes before the end.
        let mut ring_buf = [0xa5u8; 128];
        let payload = [7u8; 20];
        let used = sq::write_inline(&mut ring_buf, 112, &payload).map_err(|_| EINVAL)?;
        assert_eq!(used, 32);
        assert_eq!(ring_buf[112..116], [0x80, 0, 0, 20]);
        assert_eq!(ring_buf[116..128], [7u8; 12]);
        assert_eq!(ring_buf[..8], [7u8; 8]);
        // Padding to 16 bytes is zero.
        assert_eq!(ring_buf[8..16], [0u8; 8]);
        Ok(())
    }

    #[test]
    fn read_wqe_follows_wrap() -> Result {
        let mut ring_buf = [0u8; 256];
        let ctrl = CtrlSeg {
            opmod: 0,
            wqe_index: 3,
            opcode: SendOpcode::Send,
            qpn: 5,
            ds: 5,
            signature: 0,
            fence_mode: 0,
            ce: CE_CQ_UPDATE,
            solicited: false,
            imm: 0,
        };
        let mut c = [0u8; 16];
        ctrl.encode(&mut c);
        sq::ring_write(&mut ring_buf, 192, &c).map_err(|_| EINVAL)?;
        sq::ring_write(&mut ring_buf, 0, &[9u8; 16]).map_err(|_| EINVAL)?;
        let mut out = [0u8; MAX_WQE_SIZE];
        let len = sq::read_wqe(&ring_buf, 192, &mut out).map_err(|_| EINVAL)?;
        assert_eq!(len, 80);
        assert_eq!(out[64..80], [9u8; 16]);
        Ok(())
    }

    #[test]
    fn cqe_owner_across_wraps() -> Result {
        let log_size = 3;
        let size = 1u32 << log_size;
        for ci in 0..(8 * size) {
            let pass = (ci >> log_size) & 1 != 0;
            let op = OpOwn {
                opcode: CqeOpcode::Req,
                format: 0,
                solicited: false,
                owner: pass,
            };
            assert!(ring::cqe_sw_owned(op.encode(), ci, log_size));
            let stale = OpOwn { owner: !pass, ..op };
            assert!(!ring::cqe_sw_owned(stale.encode(), ci, log_size));
            // A fresh buffer (opcode INVALID) is never software-owned.
            assert!(!ring::cqe_sw_owned(ring::CQE_INIT_OP_OWN, ci, log_size));
            assert!(!ring::cqe_sw_owned(ring::CQE_INIT_OP_OWN | 1, ci, log_size));
        }
        Ok(())
    }

    #[test]
    fn cqe_layouts() -> Result {
        let cqe = Cqe64 {
            ml_path: 0,
            slid: 0x0002,
            grh: 0,
            sl: 5,
            src_qpn: 0x10_0001,
            srqn_uidx: 0,
            imm_inval_rkey: 0x0102_0304,
            byte_cnt: 4096,
            send_opcode: u8::from(SendOpcode::RdmaRead),
            qpn: 0x42,
            wqe_counter: 0xfffe,
            signature: 0,
            op_own: OpOwn {
                opcode: CqeOpcode::Req,
                format: 0,
                solicited: false,
                owner: true,
            },
        };
        let mut b = [0u8; 64];
        cqe.encode(&mut b);
        assert_eq!(b[22..28], [0, 0x02, 0x05, 0x10, 0, 0x01]);
        assert_eq!(b[44..48], [0, 0, 0x10, 0]);
        assert_eq!(b[56..64], [0x10, 0, 0, 0x42, 0xff, 0xfe, 0, 0x01]);
        assert_eq!(Cqe64::decode(&b), Ok(cqe));

        let err = ErrCqe {
            srqn: 0,
            vendor_syndrome: 0x88,
            syndrome: u8::from(CqeSyndrome::RemoteAccess),
            send_opcode: u8::from(SendOpcode::RdmaWrite),
            qpn: 7,
            wqe_counter: 1,
            signature: 0,
            op_own: OpOwn {
                opcode: CqeOpcode::ReqErr,
                format: 0,
                solicited: false,
                owner: false,
            },
        };
        err.encode(&mut b);
        assert_eq!(b[54..56], [0x88, 0x13]);
        assert_eq!(b[63], 0xd0);
        assert_eq!(ErrCqe::decode(&b), Ok(err));
        Ok(())
    }

    #[test]
    fn eqe_comp_and_validity() -> Result {
        let eqe = Eqe {
            event_type: EventType::Comp,
            sub_type: 0,
            data: EqeData::Comp { cqn: 0x00ab_cdef },
            signature: 0,
            owner: false,
        };
        let mut b = [0u8; EQE_SIZE];
        eqe.encode(&mut b);
        assert_eq!(b[1], 0);
        assert_eq!(b[56..60], [0, 0xab, 0xcd, 0xef]);
        assert_eq!(Eqe::decode(&b), Ok(eqe));
        // An EQ starts with owner = 1 everywhere: nothing valid on pass 0,
        // and a pass-0 entry (owner 0) stops being valid on pass 1.
        let log_size = 4;
        for ci in 0..(1u32 << log_size) {
            assert!(!ring::eqe_valid(ring::EQE_INIT_OWNER, ci, log_size));
            assert!(ring::eqe_valid(0, ci, log_size));
            assert!(!ring::eqe_valid(0, ci + (1 << log_size), log_size));
        }
        Ok(())
    }

    #[test]
    fn cq_arm_word() -> Result {
        let arm = CqArm {
            sn: 1,
            cmd: ArmCmd::Solicited,
            ci: 0x0012_3456,
        };
        assert_eq!(arm.word(), 0x1112_3456);
        assert_eq!(CqArm::from_word(0x1112_3456), Ok(arm));
        assert_eq!(CqArm::from_word(0x4000_0000), Err(Error::ReservedBits));
        Ok(())
    }

    #[test]
    fn unknown_values_are_errors() -> Result {
        assert_eq!(
            SendOpcode::try_from(0x77),
            Err(Error::UnknownSendOpcode(0x77))
        );
        assert_eq!(
            CqeOpcode::try_from(0x08),
            Err(Error::UnknownCqeOpcode(0x08))
        );
        assert!(CqeSyndrome::try_from(0xff).is_err());
        assert!(EventType::try_from(0xfe).is_err());
        // Ring arithmetic wraps instead of overflowing.
        assert_eq!(ring::ci24(0x0100_0001), 1);
        assert_eq!(ring::wqe_counter_distance(0xffff, 2), 3);
        Ok(())
    }
}
