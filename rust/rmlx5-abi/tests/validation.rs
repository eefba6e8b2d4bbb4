//! The argument rules of `rmlx5_abi::check` and the byte codec of
//! `rmlx5_abi::wire`: hostile bytes never panic, every field that must be
//! zero is checked, and ranges are enforced.

use core::mem::offset_of;
use core::ops::Range;

use rmlx5_abi::check::{arg_size, cq_entries, Invalid, Limits, MAX_CMD_SIZE};
use rmlx5_abi::uapi::*;
use rmlx5_abi::wire::Wire;

const LIMITS: Limits = Limits {
    max_qp_wr: 1 << 15,
    max_sge: 16,
    max_cqe: 1 << 16,
    max_inline_data: 256,
    num_comp_vectors: 2,
    max_qp_rd_atom: 16,
    max_qp_init_rd_atom: 16,
    max_mr_size: 1 << 40,
};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn fill(&mut self, b: &mut [u8]) {
        for x in b {
            *x = self.next() as u8;
        }
    }
}

fn hdr<T>() -> CmdHdr {
    CmdHdr {
        size: size_of::<T>() as u32,
        flags: 0,
    }
}

fn bytes<T: Wire>(v: &T) -> Vec<u8> {
    let mut b = vec![0u8; T::SIZE];
    v.write(&mut b).unwrap();
    b
}

/// Every byte of `T` survives read then write: the codec covers every byte,
/// so the structs have no padding the kernel could leak.
fn round_trip<T: Wire>(rng: &mut Rng) {
    for _ in 0..1000 {
        let mut b = vec![0u8; T::SIZE];
        rng.fill(&mut b);
        let v = T::read(&b).unwrap();
        assert_eq!(bytes(&v), b);
    }
    assert!(T::read(&vec![0u8; T::SIZE - 1]).is_none());
    let mut short = vec![0u8; T::SIZE - 1];
    assert!(T::read(&vec![0u8; T::SIZE])
        .unwrap()
        .write(&mut short)
        .is_none());
}

#[test]
fn codec_covers_every_byte() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    round_trip::<CmdHdr>(&mut rng);
    round_trip::<QueryDevice>(&mut rng);
    round_trip::<QueryPort>(&mut rng);
    round_trip::<AllocPd>(&mut rng);
    round_trip::<Destroy>(&mut rng);
    round_trip::<RegMr>(&mut rng);
    round_trip::<CreateCompChannel>(&mut rng);
    round_trip::<CreateCq>(&mut rng);
    round_trip::<CreateQp>(&mut rng);
    round_trip::<ModifyQp>(&mut rng);
    round_trip::<QueryQp>(&mut rng);
    round_trip::<Kick>(&mut rng);
    round_trip::<GetAsyncFd>(&mut rng);
    round_trip::<AsyncEvent>(&mut rng);
}

/// Runs `check` on `base` with each byte in turn set to a random non-zero
/// value: the check must refuse it unless the byte lies in one of the
/// `inputs` fields (which the caller may set).
fn only_inputs_may_change<T: Wire>(
    base: &T,
    inputs: &[Range<usize>],
    check: impl Fn(&T) -> Result<(), Invalid>,
) {
    check(base).expect("the base argument is valid");
    let good = bytes(base);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for i in 0..T::SIZE {
        if inputs.iter().any(|r| r.contains(&i)) {
            continue;
        }
        for _ in 0..8 {
            let mut b = good.clone();
            b[i] ^= (rng.next() as u8) | 1;
            let v = T::read(&b).unwrap();
            assert!(
                check(&v).is_err(),
                "byte {i} of a {}-byte argument may change unchecked",
                T::SIZE
            );
        }
    }
}

fn field(off: usize, len: usize) -> Range<usize> {
    off..off + len
}

#[test]
fn reserved_flags_and_outputs_must_be_zero() {
    let size = || 0..4;
    only_inputs_may_change(
        &QueryDevice {
            hdr: hdr::<QueryDevice>(),
            ..Default::default()
        },
        &[size()],
        |v| v.check(),
    );
    only_inputs_may_change(
        &QueryPort {
            hdr: hdr::<QueryPort>(),
            port_num: 1,
            ..Default::default()
        },
        &[size()],
        |v| v.check(),
    );
    only_inputs_may_change(
        &AllocPd {
            hdr: hdr::<AllocPd>(),
            ..Default::default()
        },
        &[size()],
        |v| v.check(),
    );
    only_inputs_may_change(
        &Destroy {
            hdr: hdr::<Destroy>(),
            handle: 5,
            ..Default::default()
        },
        &[size(), field(offset_of!(Destroy, handle), 4)],
        |v| v.check(),
    );
    only_inputs_may_change(
        &RegMr {
            hdr: hdr::<RegMr>(),
            addr: 0x1000,
            length: 0x2000,
            iova: 0x1000,
            pd_handle: 1,
            access: ACCESS_LOCAL_WRITE,
            ..Default::default()
        },
        &[
            size(),
            field(offset_of!(RegMr, addr), 8),
            field(offset_of!(RegMr, length), 8),
            field(offset_of!(RegMr, iova), 8),
            field(offset_of!(RegMr, pd_handle), 4),
            // Low byte of access: the four defined flags live there.
            field(offset_of!(RegMr, access), 1),
        ],
        |v| v.check(&LIMITS),
    );
    only_inputs_may_change(
        &CreateCq {
            hdr: hdr::<CreateCq>(),
            user_handle: 7,
            cqe: 100,
            channel_fd: -1,
            comp_vector: 1,
            ..Default::default()
        },
        &[
            size(),
            field(offset_of!(CreateCq, user_handle), 8),
            field(offset_of!(CreateCq, cqe), 4),
            field(offset_of!(CreateCq, channel_fd), 4),
            field(offset_of!(CreateCq, comp_vector), 4),
        ],
        |v| v.check(&LIMITS).map(|_| ()),
    );
    only_inputs_may_change(
        &CreateQp {
            hdr: hdr::<CreateQp>(),
            qp_type: QPT_RC,
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 64,
            ..Default::default()
        },
        &[
            size(),
            field(offset_of!(CreateQp, user_handle), 8),
            field(offset_of!(CreateQp, pd_handle), 4),
            field(offset_of!(CreateQp, send_cq_handle), 4),
            field(offset_of!(CreateQp, recv_cq_handle), 4),
            field(offset_of!(CreateQp, qp_type), 4),
            field(offset_of!(CreateQp, max_send_wr), 4),
            field(offset_of!(CreateQp, max_recv_wr), 4),
            field(offset_of!(CreateQp, max_send_sge), 4),
            field(offset_of!(CreateQp, max_recv_sge), 4),
            field(offset_of!(CreateQp, max_inline_data), 4),
            field(offset_of!(CreateQp, sq_sig_all), 4),
        ],
        |v| v.check(&LIMITS),
    );
    only_inputs_may_change(
        &QueryQp {
            hdr: hdr::<QueryQp>(),
            qp_handle: 3,
            ..Default::default()
        },
        &[size(), field(offset_of!(QueryQp, qp_handle), 4)],
        |v| v.check(),
    );
    only_inputs_may_change(
        &Kick {
            hdr: hdr::<Kick>(),
            kind: KICK_CQ_ARM,
            handle: 1,
            ..Default::default()
        },
        &[
            size(),
            field(offset_of!(Kick, kind), 4),
            field(offset_of!(Kick, handle), 4),
        ],
        |v| v.check(),
    );
    only_inputs_may_change(
        &CreateCompChannel {
            hdr: hdr::<CreateCompChannel>(),
            ..Default::default()
        },
        &[size()],
        |v| v.check(),
    );
    only_inputs_may_change(
        &GetAsyncFd {
            hdr: hdr::<GetAsyncFd>(),
            ..Default::default()
        },
        &[size()],
        |v| v.check(),
    );
}

#[test]
fn modify_qp_attributes_outside_the_mask_must_be_zero() {
    let base = ModifyQp {
        hdr: hdr::<ModifyQp>(),
        qp_handle: 1,
        attr_mask: QP_STATE,
        qp_state: QPS_INIT,
        ..Default::default()
    };
    assert_eq!(base.check(&LIMITS), Ok(()));
    let with = |f: &dyn Fn(&mut ModifyQp)| {
        let mut m = base;
        f(&mut m);
        m.check(&LIMITS)
    };
    assert_eq!(
        with(&|m| m.dest_qp_num = 5),
        Err(Invalid::NotZero("dest_qp_num"))
    );
    assert_eq!(
        with(&|m| m.attr_mask |= 1 << 2),
        Err(Invalid::NotZero("attr_mask"))
    );
    assert_eq!(with(&|m| m.qp_state = 7), Err(Invalid::Range("qp_state")));
    let rtr = |m: &mut ModifyQp| {
        m.attr_mask = QP_STATE
            | QP_AV
            | QP_PATH_MTU
            | QP_DEST_QPN
            | QP_RQ_PSN
            | QP_MAX_DEST_RD_ATOMIC
            | QP_MIN_RNR_TIMER;
        m.qp_state = QPS_RTR;
        m.dlid = 2;
        m.path_mtu = MTU_4096;
        m.dest_qp_num = 0x101;
        m.max_dest_rd_atomic = 4;
        m.min_rnr_timer = 12;
    };
    assert_eq!(with(&rtr), Ok(()));
    assert_eq!(
        with(&|m| {
            rtr(m);
            m.path_mtu = 6;
        }),
        Err(Invalid::Range("path_mtu"))
    );
    assert_eq!(
        with(&|m| {
            rtr(m);
            m.dlid = 0;
        }),
        Err(Invalid::Range("dlid"))
    );
    assert_eq!(
        with(&|m| {
            rtr(m);
            m.max_dest_rd_atomic = 17;
        }),
        Err(Invalid::Range("max_dest_rd_atomic"))
    );
    assert_eq!(
        with(&|m| {
            m.attr_mask |= QP_RNR_RETRY;
            m.rnr_retry = 8;
        }),
        Err(Invalid::Range("rnr_retry"))
    );
    // The SL belongs to the address vector: zero without QP_AV, 0..15 with it.
    assert_eq!(with(&|m| m.sl = 1), Err(Invalid::NotZero("sl")));
    assert_eq!(
        with(&|m| {
            rtr(m);
            m.sl = 15;
        }),
        Ok(())
    );
    assert_eq!(
        with(&|m| {
            rtr(m);
            m.sl = 16;
        }),
        Err(Invalid::Range("sl"))
    );
}

#[test]
fn reg_mr_ranges_and_access() {
    let base = RegMr {
        hdr: hdr::<RegMr>(),
        addr: 0x7f00_0000_0000,
        length: 4096,
        iova: 0x7f00_0000_0000,
        pd_handle: 1,
        access: ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE,
        ..Default::default()
    };
    assert_eq!(base.check(&LIMITS), Ok(()));
    let with = |f: &dyn Fn(&mut RegMr)| {
        let mut m = base;
        f(&mut m);
        m.check(&LIMITS)
    };
    assert_eq!(with(&|m| m.length = 0), Err(Invalid::Range("length")));
    assert_eq!(
        with(&|m| m.length = (1 << 40) + 1),
        Err(Invalid::Range("length"))
    );
    assert_eq!(
        with(&|m| m.addr = u64::MAX - 10),
        Err(Invalid::Range("addr"))
    );
    assert_eq!(with(&|m| m.iova = u64::MAX), Err(Invalid::Range("iova")));
    // Remote write and remote atomic need local write.
    assert_eq!(
        with(&|m| m.access = ACCESS_REMOTE_WRITE),
        Err(Invalid::Range("access"))
    );
    assert_eq!(
        with(&|m| m.access = ACCESS_REMOTE_ATOMIC),
        Err(Invalid::Range("access"))
    );
    assert_eq!(with(&|m| m.access = ACCESS_REMOTE_READ), Ok(()));
    assert_eq!(
        with(&|m| m.access = 1 << 4),
        Err(Invalid::NotZero("access"))
    );
}

/// `device_flags` took the place of `QueryDevice`'s last reserved word:
/// same offset, same size, and like every output field it must be zero on
/// the way in.
#[test]
fn query_device_flags_are_an_output() {
    assert_eq!(offset_of!(QueryDevice, device_flags), 124);
    assert_eq!(QueryDevice::SIZE, 128);
    assert_eq!(DEVICE_UAR_DOORBELLS, 1);
    let q = QueryDevice {
        hdr: hdr::<QueryDevice>(),
        device_flags: DEVICE_UAR_DOORBELLS,
        ..Default::default()
    };
    assert_eq!(q.check(), Err(Invalid::NotZero("output fields")));
    let mut b = bytes(&q);
    assert_eq!(b[124..128], DEVICE_UAR_DOORBELLS.to_ne_bytes());
    b[124..128].fill(0);
    assert_eq!(QueryDevice::read(&b).map(|v| v.check()), Some(Ok(())));
}

#[test]
fn sizes_and_cq_rounding() {
    assert_eq!(arg_size(72, 72), Ok(72));
    assert_eq!(arg_size(80, 72), Ok(72));
    assert_eq!(arg_size(71, 72), Err(Invalid::TooSmall));
    assert_eq!(arg_size(MAX_CMD_SIZE, 72), Ok(72));
    assert_eq!(arg_size(MAX_CMD_SIZE + 1, 72), Err(Invalid::TooLarge));
    assert_eq!(arg_size(u32::MAX, 72), Err(Invalid::TooLarge));
    assert_eq!(Invalid::TooLarge.errno(), 7);
    assert_eq!(Invalid::UnknownTail.errno(), 7);
    assert_eq!(Invalid::Range("x").errno(), 22);
    assert_eq!(cq_entries(1, 1 << 16), Ok(1));
    assert_eq!(cq_entries(100, 1 << 16), Ok(128));
    assert_eq!(cq_entries(1 << 16, 1 << 16), Ok(1 << 16));
    assert_eq!(
        cq_entries((1 << 16) + 1, 1 << 16),
        Err(Invalid::Range("cqe"))
    );
    assert_eq!(cq_entries(0, 1 << 16), Err(Invalid::Range("cqe")));
    assert_eq!(cq_entries(u32::MAX, u32::MAX), Err(Invalid::Range("cqe")));
}

/// 100,000 random payloads per command: decoding and checking never panic.
#[test]
fn hostile_payloads_never_panic() {
    fn fuzz<T: Wire>(rng: &mut Rng, check: impl Fn(&T) -> bool) -> usize {
        let mut accepted = 0;
        let mut b = vec![0u8; T::SIZE];
        for i in 0..100_000u32 {
            rng.fill(&mut b);
            // Half the cases start from zero with a few random bytes, so
            // that some get past the first checks.
            if i % 2 == 0 {
                let keep = (rng.next() % 4) as usize;
                let mut sparse = vec![0u8; T::SIZE];
                for _ in 0..keep {
                    let at = (rng.next() as usize) % T::SIZE;
                    sparse[at] = rng.next() as u8;
                }
                b = sparse;
            }
            let v = T::read(&b).unwrap();
            accepted += usize::from(check(&v));
        }
        accepted
    }
    let mut rng = Rng(42);
    fuzz::<QueryDevice>(&mut rng, |v| v.check().is_ok());
    fuzz::<QueryPort>(&mut rng, |v| v.check().is_ok());
    fuzz::<AllocPd>(&mut rng, |v| v.check().is_ok());
    fuzz::<Destroy>(&mut rng, |v| v.check().is_ok());
    fuzz::<RegMr>(&mut rng, |v| v.check(&LIMITS).is_ok());
    fuzz::<CreateCompChannel>(&mut rng, |v| v.check().is_ok());
    fuzz::<CreateCq>(&mut rng, |v| v.check(&LIMITS).is_ok());
    fuzz::<CreateQp>(&mut rng, |v| v.check(&LIMITS).is_ok());
    fuzz::<ModifyQp>(&mut rng, |v| v.check(&LIMITS).is_ok());
    fuzz::<QueryQp>(&mut rng, |v| v.check().is_ok());
    fuzz::<Kick>(&mut rng, |v| v.check().is_ok());
    fuzz::<GetAsyncFd>(&mut rng, |v| v.check().is_ok());
}
