// SPDX-License-Identifier: GPL-2.0

//! The server end to end over a socket pair, with the test playing QEMU's
//! part: it negotiates, maps "guest RAM" (a memfd), installs an MSI-X
//! eventfd, reads the configuration space and the initialization segment,
//! and runs commands through a command queue in that memory, the doorbell
//! as a posted write, as QEMU forwards a driver's accesses.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::thread::JoinHandle;

use mlx5_prm::cmd_cq::{Cqc, CreateCq, CreateCqIn};
use mlx5_prm::cmd_eq::{event_mask, CreateEq, CreateEqIn, Eqc};
use mlx5_prm::cmd_hca::{
    EnableHca, EnableHcaIn, InitHca, InitHcaIn, ManagePages, ManagePagesIn, QueryIssi, QueryIssiIn,
    QueryIssiOut, QueryPages, QueryPagesIn, SetIssi, SetIssiIn, ISSI,
    MANAGE_PAGES_ALLOCATION_SUCCESS, QUERY_PAGES_BOOT, QUERY_PAGES_INIT,
};
use mlx5_prm::cmd_qp::{
    CreateQp, CreateQpIn, Init2RtrQp, Init2RtrQpIn, Rst2InitQp, Rst2InitQpIn, Rtr2RtsQp,
    Rtr2RtsQpIn,
};
use mlx5_prm::cmd_queue::{
    mailbox_count, read_mailbox, sign_layout, write_mailbox, CmdLayout, DeliveryStatus,
    MailboxHeader, MAILBOX_SIZE,
};
use mlx5_prm::cmd_res::{
    mkey, AllocPd, AllocPdIn, AllocUar, AllocUarIn, CreateMkey, CreateMkeyIn, Mkc, ACCESS_MODE_PA,
};
use mlx5_prm::command::{self, Command};
use mlx5_prm::cqe::{Cqe64, ErrCqe, CQE_SIZE, OP_OWN_OFFSET};
use mlx5_prm::doorbell::{
    counter_word, send_doorbell, ArmCmd, CqArm, EqDoorbell, UarCqDoorbell, CQ_DBR_ARM_OFFSET,
    QP_DBR_RECV_OFFSET, QP_DBR_SEND_OFFSET, UAR_BF_OFFSET, UAR_CQ_DOORBELL_OFFSET,
    UAR_EQ_ARM_OFFSET,
};
use mlx5_prm::eqe::{EQE_SIZE, OWNER_OFFSET as EQE_OWNER};
use mlx5_prm::ifc::Layout;
use mlx5_prm::init_seg::{
    CMDQ_ADDR_H_OFFSET, CMDQ_ADDR_L_SZ_OFFSET, CMD_DBELL_OFFSET, INITIALIZING_OFFSET,
};
use mlx5_prm::opcode::{CqeOpcode, CqeSyndrome, EventType, SendOpcode};
use mlx5_prm::qpc::{Qpc, MTU_4K, PM_STATE_MIGRATED, ST_RC};
use mlx5_prm::ring::{self, CQE_INIT_OP_OWN, EQE_INIT_OWNER};
use mlx5_prm::wqe::{CtrlSeg, DataSeg, CE_CQ_UPDATE};

use crate::function::{FnStats, Settings};
use crate::server::{Endpoint, Server};
use crate::vfio_user::socket::Connection;
use crate::vfio_user::wire::{self, cmd, flags, vfio, Header, HEADER_SIZE};

/// Where the test's guest RAM sits in DMA space, and its size.
const RAM: u64 = 0x10_0000;
const RAM_SIZE: u64 = 0x20_0000;
/// The command queue page and an output mailbox, in that RAM.
const CMDQ: u64 = RAM;
const OUT_MAILBOX: u64 = RAM + 0x1000;

struct Client {
    stream: UnixStream,
    next_id: u16,
    ram: File,
}

fn new_fd(fd: libc::c_int) -> OwnedFd {
    assert!(fd >= 0, "{}", std::io::Error::last_os_error());
    // SAFETY: a new descriptor owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Sends `bytes` with `fds` as one `sendmsg`, as QEMU sends DMA_MAP and
/// SET_IRQS.
pub(crate) fn send_with_fds(s: &UnixStream, bytes: &[u8], fds: &[libc::c_int]) {
    if fds.is_empty() {
        // PANIC: host test harness: a failed write to the test socket fails the test.
        (&*s).write_all(bytes).unwrap();
        return;
    }
    let fd_bytes = std::mem::size_of_val(fds);
    // SAFETY: arithmetic.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr().cast_mut().cast(),
        iov_len: bytes.len(),
    };
    // SAFETY: all-zero is a valid msghdr.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space;
    // SAFETY: the control buffer has room for one header and the fds.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as usize;
        let data = libc::CMSG_DATA(c).cast::<libc::c_int>();
        for (i, fd) in fds.iter().enumerate() {
            data.add(i).write_unaligned(*fd);
        }
    }
    // SAFETY: `msg` describes live buffers; sendmsg only reads them.
    let n = unsafe { libc::sendmsg(s.as_raw_fd(), &msg, 0) };
    assert_eq!(n as usize, bytes.len());
}

impl Client {
    fn message(&mut self, command: u16, payload: &[u8], no_reply: bool) -> Vec<u8> {
        self.next_id = self.next_id.wrapping_add(1);
        let h = Header {
            msg_id: self.next_id,
            command,
            size: (HEADER_SIZE + payload.len()) as u32,
            flags: flags::TYPE_COMMAND | if no_reply { flags::NO_REPLY } else { 0 },
            error: 0,
        };
        let mut m = h.encode().to_vec();
        m.extend_from_slice(payload);
        m
    }

    /// A request and its reply: (error number, reply payload).
    fn call_fds(&mut self, command: u16, payload: &[u8], fds: &[libc::c_int]) -> (u32, Vec<u8>) {
        let m = self.message(command, payload, false);
        send_with_fds(&self.stream, &m, fds);
        let mut head = [0u8; HEADER_SIZE];
        // PANIC: host test harness: a short read from the emulator fails the test.
        self.stream.read_exact(&mut head).unwrap();
        let h = Header::decode(&head);
        assert_eq!((h.msg_id, h.command), (self.next_id, command));
        assert_eq!(h.flags & flags::TYPE_MASK, flags::TYPE_REPLY);
        let mut p = vec![0u8; h.size as usize - HEADER_SIZE];
        // PANIC: host test harness: a short read from the emulator fails the test.
        self.stream.read_exact(&mut p).unwrap();
        (h.error, p)
    }

    fn call(&mut self, command: u16, payload: &[u8]) -> Vec<u8> {
        let (e, p) = self.call_fds(command, payload, &[]);
        assert_eq!(e, 0, "command {command} failed");
        p
    }

    fn access(region: u32, offset: u64, count: usize, data: &[u8]) -> Vec<u8> {
        wire::region_access_payload(region, offset, count as u32, data)
    }

    fn read(&mut self, region: u32, offset: u64, count: usize) -> Vec<u8> {
        let p = self.call(cmd::REGION_READ, &Self::access(region, offset, count, &[]));
        p[16..].to_vec()
    }

    fn read32be(&mut self, offset: usize) -> u32 {
        let b = self.read(0, offset as u64, 4);
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// A posted write (no reply), as QEMU forwards BAR stores.
    fn post32be(&mut self, offset: usize, v: u32) {
        self.post(offset as u64, &v.to_be_bytes());
    }

    /// A posted BAR0 write of `bytes`.
    fn post(&mut self, offset: u64, bytes: &[u8]) {
        let p = Self::access(0, offset, bytes.len(), bytes);
        let m = self.message(cmd::REGION_WRITE, &p, true);
        // PANIC: host test harness: a failed write to the test socket fails the test.
        (&self.stream).write_all(&m).unwrap();
    }

    /// A write QEMU waits for (configuration space writes).
    fn write(&mut self, region: u32, offset: u64, data: &[u8]) {
        self.call(
            cmd::REGION_WRITE,
            &Self::access(region, offset, data.len(), data),
        );
    }

    fn read32le(&mut self, offset: u64) -> u32 {
        let b = self.read(0, offset, 4);
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }

    /// Maps the test's guest RAM, as QEMU maps a memory-backend-memfd.
    fn map_ram(&mut self) {
        let mut map = Vec::new();
        map.extend_from_slice(&32u32.to_le_bytes());
        map.extend_from_slice(&(vfio::DMA_READ | vfio::DMA_WRITE).to_le_bytes());
        map.extend_from_slice(&0u64.to_le_bytes());
        map.extend_from_slice(&RAM.to_le_bytes());
        map.extend_from_slice(&RAM_SIZE.to_le_bytes());
        let fd = self.ram.as_raw_fd();
        let (e, _) = self.call_fds(cmd::DMA_MAP, &map, &[fd]);
        assert_eq!(e, 0);
    }

    /// Hands the command queue over, as mlx5_core does, and waits for the
    /// firmware to load it.
    fn queue_up(&mut self) {
        self.post32be(CMDQ_ADDR_H_OFFSET, (CMDQ >> 32) as u32);
        self.post32be(CMDQ_ADDR_L_SZ_OFFSET, CMDQ as u32);
        while self.read32be(INITIALIZING_OFFSET) >> 31 != 0 {}
    }

    /// Posts `input` in entry 0 with `outlen` bytes of output (an output
    /// mailbox when it needs one), rings the doorbell, and returns the
    /// entry and the output as the device left them.
    fn command(&mut self, input: &[u8], outlen: usize, token: u8) -> (CmdLayout, Vec<u8>) {
        let out_ptr = if outlen > 16 { OUT_MAILBOX } else { 0 };
        if out_ptr != 0 {
            let mut blk = [0u8; MAILBOX_SIZE];
            let head = MailboxHeader {
                token,
                ..MailboxHeader::default()
            };
            // PANIC: host test harness: a fixed, valid mailbox block; failing to encode it is a test bug.
            head.encode(&[], &mut blk).unwrap();
            // PANIC: host test harness: the mailbox lies inside the test's RAM file.
            self.ram.write_all_at(&blk, OUT_MAILBOX - RAM).unwrap();
        }
        let mut entry = [0u8; 64];
        CmdLayout::request(input, 0, outlen as u32, out_ptr, token).encode(&mut entry);
        sign_layout(&mut entry);
        // PANIC: host test harness: the queue entry lies inside the test's RAM file.
        self.ram.write_all_at(&entry, CMDQ - RAM).unwrap();
        self.post32be(CMD_DBELL_OFFSET, 1);
        // Replies come in order: once this read is answered, the doorbell
        // was handled.
        self.read32be(INITIALIZING_OFFSET);
        // PANIC: host test harness: the queue entry lies inside the test's RAM file.
        self.ram.read_exact_at(&mut entry, CMDQ - RAM).unwrap();
        let layout = CmdLayout::decode(&entry);
        let mut out = layout.out_data.to_vec();
        if out_ptr != 0 {
            let mut blk = [0u8; MAILBOX_SIZE];
            // PANIC: host test harness: the mailbox lies inside the test's RAM file.
            self.ram.read_exact_at(&mut blk, OUT_MAILBOX - RAM).unwrap();
            out.extend_from_slice(&blk[..outlen - 16]);
        }
        (layout, out)
    }
}

type Outcome = (bool, u64, FnStats, u64);

/// What function `i` of the server's card did: whether it failed, its
/// protocol errors, its counters and the interrupts it delivered.
fn outcome(s: &mut Server, i: usize) -> Outcome {
    let failed = s.card.failed(i);
    let errors = s.protocol_errors(i);
    // PANIC: host test harness: the card has the functions the test built.
    let f = s.card.function(i).unwrap();
    (failed, errors, f.stats, f.bus.stats.interrupts)
}

fn start() -> (Client, JoinHandle<Outcome>) {
    // PANIC: host test harness: no socket pair means the test cannot run.
    let (a, b) = UnixStream::pair().unwrap();
    let server = std::thread::spawn(move || {
        let mut s = Server::new(
            Settings::DEFAULT,
            vec![Endpoint::Client(Connection::new(b))],
        );
        // PANIC: host test harness: the emulator's session error fails the test.
        s.run().unwrap();
        outcome(&mut s, 0)
    });
    // SAFETY: the name is a NUL-terminated literal.
    let ram = new_fd(unsafe { libc::memfd_create(c"guest-ram".as_ptr(), libc::MFD_CLOEXEC) });
    let ram = File::from(ram);
    // PANIC: host test harness: no RAM file means the test cannot run.
    ram.set_len(RAM_SIZE).unwrap();
    let client = Client {
        stream: a,
        next_id: 0,
        ram,
    };
    (client, server)
}

#[test]
fn a_driver_session_through_vfio_user() {
    let (mut c, server) = start();

    let p = c.call(cmd::VERSION, b"\0\0\0\0{\"capabilities\":{}}\0");
    assert_eq!(&p[..4], &[0, 0, 0, 0]);

    let info = c.call(cmd::DEVICE_GET_INFO, &[0; 16]);
    assert_eq!(&info[4..16], &[3, 0, 0, 0, 9, 0, 0, 0, 5, 0, 0, 0]);
    let region = [0u8; 32];
    let r = c.call(cmd::DEVICE_GET_REGION_INFO, &region);
    assert_eq!(u64::from_le_bytes(r[16..24].try_into().unwrap()), 32 << 20);
    let mut irq = [0u8; 16];
    irq[8] = vfio::PCI_MSIX_IRQ_INDEX as u8;
    let r = c.call(cmd::DEVICE_GET_IRQ_INFO, &irq);
    assert_eq!(u32::from_le_bytes(r[12..16].try_into().unwrap()), 16);

    // Guest RAM, as QEMU maps a memory-backend-memfd.
    let mut map = Vec::new();
    map.extend_from_slice(&32u32.to_le_bytes());
    map.extend_from_slice(&(vfio::DMA_READ | vfio::DMA_WRITE).to_le_bytes());
    map.extend_from_slice(&0u64.to_le_bytes());
    map.extend_from_slice(&RAM.to_le_bytes());
    map.extend_from_slice(&RAM_SIZE.to_le_bytes());
    let (e, _) = c.call_fds(cmd::DMA_MAP, &map, &[c.ram.as_raw_fd()]);
    assert_eq!(e, 0);

    // MSI-X vector 3 gets an eventfd; a loopback trigger reaches it.
    // SAFETY: plain syscall.
    let efd = File::from(new_fd(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) }));
    let set = |flags: u32, start: u32, count: u32| {
        let mut p = Vec::new();
        for v in [20, flags, vfio::PCI_MSIX_IRQ_INDEX, start, count] {
            p.extend_from_slice(&v.to_le_bytes());
        }
        p
    };
    let eventfd_trigger = vfio::IRQ_SET_DATA_EVENTFD | vfio::IRQ_SET_ACTION_TRIGGER;
    let (e, _) = c.call_fds(
        cmd::DEVICE_SET_IRQS,
        &set(eventfd_trigger, 3, 1),
        &[efd.as_raw_fd()],
    );
    assert_eq!(e, 0);
    c.call(
        cmd::DEVICE_SET_IRQS,
        &set(vfio::IRQ_SET_DATA_NONE | vfio::IRQ_SET_ACTION_TRIGGER, 3, 1),
    );
    let mut n = [0u8; 8];
    (&efd).read_exact(&mut n).unwrap();
    assert_eq!(u64::from_ne_bytes(n), 1);
    // A vector beyond the 16 is refused.
    let (e, _) = c.call_fds(
        cmd::DEVICE_SET_IRQS,
        &set(eventfd_trigger, 16, 1),
        &[efd.as_raw_fd()],
    );
    assert_eq!(e, libc::EINVAL as u32);

    // Configuration space and the initialization segment.
    assert_eq!(
        c.read(vfio::PCI_CONFIG_REGION_INDEX, 0, 4),
        [0xb3, 0x15, 0x17, 0x10]
    );
    assert_eq!(c.read32be(0), 35 << 16 | 16, "fw_rev 16.35");
    assert_eq!(c.read32be(4), 5 << 16 | 1012, "cmdif_rev 5, subminor 1012");

    // The command queue, as mlx5_core sets it up.
    c.post32be(CMDQ_ADDR_H_OFFSET, (CMDQ >> 32) as u32);
    c.post32be(CMDQ_ADDR_L_SZ_OFFSET, CMDQ as u32);
    while c.read32be(INITIALIZING_OFFSET) >> 31 != 0 {}

    let mut msg = [0u8; EnableHcaIn::SIZE];
    command::encode_in::<EnableHca>(&EnableHcaIn::default(), &[], &mut msg).unwrap();
    let (entry, out) = c.command(&msg, 12, 1);
    assert!(!entry.ownership, "the device handed the entry back");
    assert_eq!(entry.status, DeliveryStatus::Ok);
    assert_eq!(out[0], 0, "ENABLE_HCA status");

    // QUERY_ISSI: the output continues in a mailbox the device writes.
    let mut msg = [0u8; QueryIssiIn::SIZE];
    command::encode_in::<QueryIssi>(&QueryIssiIn::default(), &[], &mut msg).unwrap();
    let (entry, out) = c.command(&msg, QueryIssiOut::SIZE, 2);
    assert_eq!(entry.status, DeliveryStatus::Ok);
    let o = command::decode_out::<QueryIssi>(&out).unwrap();
    assert_eq!(o.supported_issi_dw0 & 0b10, 0b10, "ISSI 1 supported");
    assert_eq!(<QueryIssi as Command>::NAME, "QUERY_ISSI");

    drop(c);
    let (failed, protocol_errors, stats, _) = server.join().unwrap();
    assert_eq!(protocol_errors, 1, "the vector beyond the table");
    assert!(!failed, "{stats:?}");
}

#[test]
fn a_command_outside_guest_memory_fails_the_run() {
    let (mut c, server) = start();
    c.call(cmd::VERSION, b"\0\0\0\0{}\0");
    // No DMA_MAP: the queue the driver names is not guest memory.
    c.post32be(CMDQ_ADDR_H_OFFSET, 0);
    c.post32be(CMDQ_ADDR_L_SZ_OFFSET, 0x1000);
    c.read32be(INITIALIZING_OFFSET);
    c.post32be(CMD_DBELL_OFFSET, 1);
    c.read32be(INITIALIZING_OFFSET);
    drop(c);
    let (failed, protocol_errors, stats, _) = server.join().unwrap();
    assert_eq!(protocol_errors, 0);
    assert!(failed);
    assert!(stats.fw_errors >= 1, "{stats:?}");
}

#[test]
fn injected_faults_and_an_flr_through_vfio_user() {
    use crate::pci::AF_CTRL;
    use crate::testreg::{REG_FLRS, REG_UNANSWERED, STATUS_FATAL, TEST_PAGE_OFFSET};

    let (mut c, server) = start();
    c.call(cmd::VERSION, b"\0\0\0\0{}\0");
    c.map_ram();
    c.queue_up();
    let mut enable = [0u8; EnableHcaIn::SIZE];
    command::encode_in::<EnableHca>(&EnableHcaIn::default(), &[], &mut enable).unwrap();
    let (entry, out) = c.command(&enable, 12, 1);
    assert!(!entry.ownership && out[0] == 0, "ENABLE_HCA");

    // The guest's test writes a fatal error (syndrome 8) through its mmap
    // of resource0: a native little-endian store, posted.
    c.post(TEST_PAGE_OFFSET, &0x0801u32.to_le_bytes());
    assert_eq!(c.read32le(TEST_PAGE_OFFSET) & STATUS_FATAL, STATUS_FATAL);
    assert_eq!(c.read32be(0x200 + 60) >> 16 & 0xff, 8, "health syndrome");
    // The next command stays with the device.
    let mut query = [0u8; QueryIssiIn::SIZE];
    command::encode_in::<QueryIssi>(&QueryIssiIn::default(), &[], &mut query).unwrap();
    let (entry, _) = c.command(&query, QueryIssiOut::SIZE, 2);
    assert!(entry.ownership, "a dead firmware completes nothing");
    assert_eq!(c.read32le(TEST_PAGE_OFFSET + REG_UNANSWERED as u64), 1);

    // `echo 1 > /sys/bus/pci/devices/<bdf>/reset`: Linux's af_flr writes
    // Initiate FLR, and QEMU passes the write on.
    let cfg = vfio::PCI_CONFIG_REGION_INDEX;
    assert_eq!(
        c.read(cfg, AF_CTRL as u64 - 1, 3),
        [0x03, 0, 0],
        "TP, FLR; idle"
    );
    c.write(cfg, AF_CTRL as u64, &[0x01]);
    assert_eq!(c.read(cfg, AF_CTRL as u64, 2), [0, 0], "FLR and TP read 0");
    assert_eq!(c.read32le(TEST_PAGE_OFFSET + REG_FLRS as u64), 1);
    assert_eq!(c.read32le(TEST_PAGE_OFFSET) & STATUS_FATAL, 0, "cleared");
    assert_eq!(c.read32be(0x200 + 60), 0, "healthy");
    // A fresh function: no queue, disabled, bus mastering off (the FLR
    // cleared the command register): a command waits for it.
    assert_eq!(c.read32be(CMDQ_ADDR_H_OFFSET), 0);
    assert_eq!(c.read(cfg, 4, 1)[0] & 0x4, 0, "BME off after the FLR");
    c.queue_up();
    let (entry, _) = c.command(&enable, 12, 3);
    assert!(entry.ownership, "no command runs without bus mastering");
    // Linux restores the command register after the reset: the command
    // posted meanwhile runs then, and the function comes up again.
    c.write(cfg, 4, &[0x06]);
    c.read32be(INITIALIZING_OFFSET);
    let mut e = [0u8; 64];
    // PANIC: host test harness: the queue entry lies inside the test's RAM file.
    c.ram.read_exact_at(&mut e, CMDQ - RAM).unwrap();
    let entry = CmdLayout::decode(&e);
    assert!(
        !entry.ownership && entry.out_data[0] == 0,
        "ENABLE_HCA after the FLR, once bus mastering is back"
    );

    drop(c);
    let (failed, protocol_errors, stats, _) = server.join().unwrap();
    assert_eq!(protocol_errors, 0);
    assert_eq!((stats.faults, stats.flrs, stats.resets), (1, 1, 1));
    assert_eq!(stats.unanswered, 1, "the command the fatal error kept");
    assert!(!failed, "nothing the guest did was wrong: {stats:?}");
}

// ---- Two functions, one fabric ----
//
// The test plays one QEMU with two `vfio-user-pci` devices: two clients,
// each mapping the same guest RAM with its own DMA_MAP and descriptor and
// installing its own eventfds. It brings both functions up through their
// command queues (polling, as mlx5_core does before its command EQ), in
// RAM the driver of each owns half of, connects an RC QP of function 0 to
// one of function 1, and sends: real WQEs and doorbell records in guest
// RAM, the doorbell a posted store to function 0's UAR page.

/// The two-function test's guest RAM: 8 MiB, function `i` allocating from
/// half `i`.
const RAM2_SIZE: u64 = 0x80_0000;
/// Mailbox blocks in each of a function's two pools (enough for 512
/// pages in one MANAGE_PAGES).
const POOL_BLOCKS: u64 = 16;

/// One function as the test's driver sees it.
struct Drv {
    c: Client,
    /// Next free byte of this function's half of RAM, and its end.
    next: u64,
    end: u64,
    cmdq: u64,
    in_pool: u64,
    out_pool: u64,
    token: u8,
    uar: u32,
    /// The completion EQ's eventfd (MSI-X vector 1).
    comp_irq: File,
}

/// A queue of the test's driver: where it is and its number.
#[derive(Clone, Copy, Debug)]
struct TestCq {
    cqn: u32,
    buf: u64,
    dbr: u64,
}

#[derive(Clone, Copy, Debug)]
struct TestQp {
    qpn: u32,
    rq: u64,
    sq: u64,
    dbr: u64,
}

const LOG_EQ: u8 = 6;
const LOG_CQ: u8 = 6;
const LOG_RQ: u8 = 4;
/// One data segment per receive WQE.
const RQ_STRIDE: u64 = 16;
const LOG_SQ: u8 = 6;

impl Drv {
    /// Connects client `i` (its VERSION, its DMA_MAP of the RAM, an
    /// eventfd on MSI-X vector 1) and hands its command queue over.
    fn new(stream: UnixStream, ram: &File, i: u64) -> Drv {
        // PANIC: host test harness: the RAM file can be shared.
        let ram = ram.try_clone().unwrap();
        let mut c = Client {
            stream,
            next_id: 0,
            ram,
        };
        c.call(cmd::VERSION, b"\0\0\0\0{}\0");
        let mut map = Vec::new();
        map.extend_from_slice(&32u32.to_le_bytes());
        map.extend_from_slice(&(vfio::DMA_READ | vfio::DMA_WRITE).to_le_bytes());
        map.extend_from_slice(&0u64.to_le_bytes());
        map.extend_from_slice(&RAM.to_le_bytes());
        map.extend_from_slice(&RAM2_SIZE.to_le_bytes());
        let fd = c.ram.as_raw_fd();
        let (e, _) = c.call_fds(cmd::DMA_MAP, &map, &[fd]);
        assert_eq!(e, 0);
        // SAFETY: plain syscall.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        let comp_irq = File::from(new_fd(efd));
        let mut p = Vec::new();
        let flags = vfio::IRQ_SET_DATA_EVENTFD | vfio::IRQ_SET_ACTION_TRIGGER;
        for v in [20, flags, vfio::PCI_MSIX_IRQ_INDEX, 1, 1] {
            p.extend_from_slice(&v.to_le_bytes());
        }
        let (e, _) = c.call_fds(cmd::DEVICE_SET_IRQS, &p, &[comp_irq.as_raw_fd()]);
        assert_eq!(e, 0);
        let half = RAM2_SIZE / 2;
        let mut d = Drv {
            c,
            next: RAM + i * half,
            end: RAM + (i + 1) * half,
            cmdq: 0,
            in_pool: 0,
            out_pool: 0,
            token: 0,
            uar: 0,
            comp_irq,
        };
        d.cmdq = d.alloc(4096);
        d.in_pool = d.alloc(POOL_BLOCKS * 1024);
        d.out_pool = d.alloc(POOL_BLOCKS * 1024);
        d.c.post32be(CMDQ_ADDR_H_OFFSET, (d.cmdq >> 32) as u32);
        d.c.post32be(CMDQ_ADDR_L_SZ_OFFSET, d.cmdq as u32);
        while d.c.read32be(INITIALIZING_OFFSET) >> 31 != 0 {}
        d
    }

    /// `len` bytes of this function's RAM, page-aligned.
    fn alloc(&mut self, len: u64) -> u64 {
        let at = self.next;
        self.next += len.div_ceil(4096) * 4096;
        assert!(self.next <= self.end, "the test's RAM is full");
        at
    }

    fn put(&self, addr: u64, bytes: &[u8]) {
        // PANIC: host test harness: the address lies inside the test's RAM file.
        self.c.ram.write_all_at(bytes, addr - RAM).unwrap();
    }

    fn get(&self, addr: u64, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        // PANIC: host test harness: the address lies inside the test's RAM file.
        self.c.ram.read_exact_at(&mut b, addr - RAM).unwrap();
        b
    }

    /// Posts `input` in entry 0 with mailbox chains from the pools, rings
    /// the doorbell and returns the output as the device left it.
    fn exec(&mut self, input: &[u8], outlen: usize) -> Vec<u8> {
        self.token = self.token.wrapping_add(1).max(1);
        let token = self.token;
        let n_in = mailbox_count(input.len());
        let n_out = mailbox_count(outlen);
        assert!(n_in as u64 <= POOL_BLOCKS && n_out as u64 <= POOL_BLOCKS);
        let chain = |pool: u64, i: usize, n: usize| {
            if i + 1 < n {
                pool + (i as u64 + 1) * 1024
            } else {
                0
            }
        };
        let mut blk = [0u8; MAILBOX_SIZE];
        for i in 0..n_in {
            let next = chain(self.in_pool, i, n_in);
            // PANIC: host test harness: the block exists (i < n_in).
            write_mailbox(input, i, next, token, false, &mut blk).unwrap();
            self.put(self.in_pool + i as u64 * 1024, &blk);
        }
        for i in 0..n_out {
            let head = MailboxHeader {
                next: chain(self.out_pool, i, n_out),
                block_num: i as u32,
                token,
                ctrl_sig: 0,
                sig: 0,
            };
            // PANIC: host test harness: a fixed, valid mailbox block.
            head.encode(&[], &mut blk).unwrap();
            self.put(self.out_pool + i as u64 * 1024, &blk);
        }
        let in_ptr = if n_in > 0 { self.in_pool } else { 0 };
        let out_ptr = if n_out > 0 { self.out_pool } else { 0 };
        let mut entry = [0u8; 64];
        CmdLayout::request(input, in_ptr, outlen as u32, out_ptr, token).encode(&mut entry);
        sign_layout(&mut entry);
        self.put(self.cmdq, &entry);
        self.c.post32be(CMD_DBELL_OFFSET, 1);
        // Replies come in order: once this read is answered, the doorbell
        // was handled.
        self.c.read32be(INITIALIZING_OFFSET);
        let e = CmdLayout::decode(&self.get(self.cmdq, 64).try_into().unwrap());
        assert!(!e.ownership, "the device handed the entry back");
        assert_eq!(e.status, DeliveryStatus::Ok);
        let mut out = e.out_data[..outlen.min(16)].to_vec();
        out.resize(outlen, 0);
        for i in 0..n_out {
            let b = self.get(self.out_pool + i as u64 * 1024, MAILBOX_SIZE);
            read_mailbox(&b.try_into().unwrap(), i, &mut out);
        }
        out
    }

    /// Runs command `C` with `pas` after its input; its output must say OK.
    fn cmd<C: Command>(&mut self, input: &C::In, pas: &[u64]) -> C::Out {
        let mut msg = vec![0u8; command::in_len::<C>(pas.len())];
        command::encode_in::<C>(input, pas, &mut msg).unwrap();
        let mut out = self.exec(&msg, <C::Out as Layout>::SIZE);
        // ENABLE_HCA's output is 12 bytes; the header decodes 16.
        if out.len() < 16 {
            out.resize(16, 0);
        }
        match command::decode_out::<C>(&out) {
            Ok(o) => o,
            Err(e) => panic!("{}: {e:?}", C::NAME),
        }
    }

    /// QUERY_PAGES(`op_mod`), then MANAGE_PAGES of as many fresh pages.
    fn give_pages(&mut self, op_mod: u16) {
        let n = self
            .cmd::<QueryPages>(
                &QueryPagesIn {
                    op_mod,
                    ..Default::default()
                },
                &[],
            )
            .num_pages;
        assert!(n >= 0);
        if n == 0 {
            return;
        }
        let first = self.alloc(n as u64 * 4096);
        let pages: Vec<u64> = (0..n as u64).map(|k| first + k * 4096).collect();
        let input = ManagePagesIn {
            op_mod: MANAGE_PAGES_ALLOCATION_SUCCESS,
            input_num_entries: n as u32,
            ..Default::default()
        };
        self.cmd::<ManagePages>(&input, &pages);
    }

    /// mlx5_function_setup's order: ENABLE_HCA, ISSI 1, boot pages, init
    /// pages, INIT_HCA; then a UAR.
    fn bring_up(&mut self) {
        self.cmd::<EnableHca>(&EnableHcaIn::default(), &[]);
        self.cmd::<SetIssi>(&SetIssiIn { current_issi: ISSI }, &[]);
        self.give_pages(QUERY_PAGES_BOOT);
        self.give_pages(QUERY_PAGES_INIT);
        self.cmd::<InitHca>(&InitHcaIn::default(), &[]);
        self.uar = self.cmd::<AllocUar>(&AllocUarIn::default(), &[]).uar;
    }

    /// The BAR0 offset of the driver's UAR page.
    fn uar_offset(&self) -> u64 {
        u64::from(self.uar) * 4096
    }

    /// CREATE_EQ of `1 << LOG_EQ` EQEs receiving `events` on vector
    /// `intr`, armed through the UAR; returns its number and buffer.
    fn create_eq(&mut self, events: &[EventType], intr: u16) -> (u8, u64) {
        let size = (EQE_SIZE as u64) << LOG_EQ;
        let buf = self.alloc(size);
        for k in 0..1u64 << LOG_EQ {
            self.put(
                buf + k * EQE_SIZE as u64 + EQE_OWNER as u64,
                &[EQE_INIT_OWNER],
            );
        }
        let pas: Vec<u64> = (0..size.div_ceil(4096)).map(|k| buf + k * 4096).collect();
        let input = CreateEqIn {
            eq_context_entry: Eqc {
                log_eq_size: LOG_EQ,
                uar_page: self.uar,
                intr,
                ..Eqc::default()
            },
            event_bitmask: event_mask(events),
        };
        let eqn = self.cmd::<CreateEq>(&input, &pas).eq_number;
        let mut db = [0u8; 4];
        EqDoorbell { eqn, ci: 0 }.encode(&mut db);
        self.c
            .post(self.uar_offset() + UAR_EQ_ARM_OFFSET as u64, &db);
        (eqn, buf)
    }

    fn create_cq(&mut self, eqn: u8) -> TestCq {
        let size = (CQE_SIZE as u64) << LOG_CQ;
        let buf = self.alloc(size);
        for k in 0..1u64 << LOG_CQ {
            self.put(
                buf + k * CQE_SIZE as u64 + OP_OWN_OFFSET as u64,
                &[CQE_INIT_OP_OWN],
            );
        }
        let dbr = self.alloc(8);
        let pas: Vec<u64> = (0..size.div_ceil(4096)).map(|k| buf + k * 4096).collect();
        let input = CreateCqIn {
            cq_context: Cqc {
                log_cq_size: LOG_CQ,
                uar_page: self.uar,
                c_eqn_or_apu_element: u32::from(eqn),
                dbr_addr: dbr,
                ..Cqc::default()
            },
        };
        let cqn = self.cmd::<CreateCq>(&input, &pas).cqn;
        TestCq { cqn, buf, dbr }
    }

    /// Arms `cq` for its next completion at consumer index `ci`: the
    /// record's ARM word, then the UAR doorbell.
    fn arm_cq(&mut self, cq: &TestCq, ci: u32) {
        let arm = CqArm {
            sn: 0,
            cmd: ArmCmd::Next,
            ci,
        };
        self.put(cq.dbr + CQ_DBR_ARM_OFFSET as u64, &arm.to_bytes());
        let db = UarCqDoorbell { arm, cqn: cq.cqn }.to_bytes();
        self.c
            .post(self.uar_offset() + UAR_CQ_DOORBELL_OFFSET as u64, &db);
    }

    /// The CQE at `ci` of `cq` once software owns it (by owner bit).
    fn cqe(&self, cq: &TestCq, ci: u32) -> Option<[u8; CQE_SIZE]> {
        let slot = u64::from(ring::ring_index(ci, u32::from(LOG_CQ)));
        let b = self.get(cq.buf + slot * CQE_SIZE as u64, CQE_SIZE);
        ring::cqe_sw_owned(b[OP_OWN_OFFSET], ci, u32::from(LOG_CQ)).then(|| b.try_into().unwrap())
    }

    /// ALLOC_PD and a PA memory key over `len` bytes at `addr` with every
    /// access right.
    fn pd_and_mr(&mut self, addr: u64, len: u64) -> (u32, u32) {
        let pd = self.cmd::<AllocPd>(&AllocPdIn::default(), &[]).pd;
        let mut mkc = Mkc {
            a: true,
            rw: true,
            rr: true,
            lw: true,
            lr: true,
            qpn: 0xff_ffff,
            mkey_7_0: 0x42,
            pd,
            start_addr: addr,
            len,
            ..Mkc::default()
        };
        mkc.set_access_mode(ACCESS_MODE_PA);
        let input = CreateMkeyIn {
            pg_access: false,
            memory_key_mkey_entry: mkc,
            translations_octword_actual_size: 0,
        };
        let index = self.cmd::<CreateMkey>(&input, &[]).mkey_index;
        (pd, mkey(index, 0x42))
    }

    /// CREATE_QP of an RC QP, RQ then SQ in one buffer, both CQs `cq`.
    fn create_qp(&mut self, pd: u32, cq: &TestCq) -> TestQp {
        let rq_bytes = RQ_STRIDE << LOG_RQ;
        let size = rq_bytes + (64u64 << LOG_SQ);
        let buf = self.alloc(size);
        let dbr = self.alloc(8);
        let pas: Vec<u64> = (0..size.div_ceil(4096)).map(|k| buf + k * 4096).collect();
        let input = CreateQpIn {
            ece: 0,
            qpc: Qpc {
                st: ST_RC,
                pm_state: PM_STATE_MIGRATED,
                pd,
                uar_page: self.uar,
                log_rq_size: LOG_RQ,
                log_rq_stride: (RQ_STRIDE / 16).trailing_zeros() as u8,
                log_sq_size: LOG_SQ,
                cqn_snd: cq.cqn,
                cqn_rcv: cq.cqn,
                dbr_addr: dbr,
                ..Qpc::default()
            },
        };
        let qpn = self.cmd::<CreateQp>(&input, &pas).qpn;
        TestQp {
            qpn,
            rq: buf,
            sq: buf + rq_bytes,
            dbr,
        }
    }

    /// RST2INIT, INIT2RTR and RTR2RTS of `qp`, connected to QP `peer_qpn`
    /// behind LID `peer_lid`; a lost request is retried `retry` times,
    /// each after 4.096 µs × 2^`timeout`.
    fn connect(&mut self, qp: &TestQp, peer: (u16, u32), retry: u8, timeout: u8) {
        let (peer_lid, peer_qpn) = peer;
        let rc = || Qpc {
            st: ST_RC,
            pm_state: PM_STATE_MIGRATED,
            ..Qpc::default()
        };
        let mut q = rc();
        q.rre = true;
        q.rwe = true;
        q.rae = true;
        q.primary_address_path.vhca_port_num = 1;
        let input = Rst2InitQpIn {
            qpn: qp.qpn,
            qpc: q,
            ..Default::default()
        };
        self.cmd::<Rst2InitQp>(&input, &[]);
        let mut q = rc();
        q.mtu = MTU_4K;
        q.remote_qpn = peer_qpn;
        q.next_rcv_psn = 0x100;
        q.log_rra_max = 2;
        q.min_rnr_nak = 1;
        q.primary_address_path.rlid = peer_lid;
        let input = Init2RtrQpIn {
            qpn: qp.qpn,
            qpc: q,
            ..Default::default()
        };
        self.cmd::<Init2RtrQp>(&input, &[]);
        let mut q = rc();
        q.primary_address_path.ack_timeout = timeout;
        q.retry_count = retry;
        q.rnr_retry = retry;
        q.next_send_psn = 0x100;
        q.log_sra_max = 2;
        let input = Rtr2RtsQpIn {
            qpn: qp.qpn,
            qpc: q,
            ..Default::default()
        };
        self.cmd::<Rtr2RtsQp>(&input, &[]);
    }

    /// Posts a receive of `len` bytes at `addr` in RQ slot `n` and
    /// announces it in the doorbell record (mlx5 has no receive doorbell).
    fn post_recv(&mut self, qp: &TestQp, n: u16, lkey: u32, addr: u64, len: u32) {
        let mut seg = [0u8; 16];
        DataSeg {
            byte_count: len,
            lkey,
            addr,
        }
        .encode(&mut seg);
        let slot = u64::from(n) % (1 << LOG_RQ);
        self.put(qp.rq + slot * RQ_STRIDE, &seg);
        self.put(qp.dbr + QP_DBR_RECV_OFFSET as u64, &counter_word(n + 1));
    }

    /// Posts a signaled SEND of `len` bytes at `addr` as WQE `n` (one
    /// WQEBB), updates the record and rings the doorbell: the control
    /// segment's first 8 bytes stored to BlueFlame register 0 of the UAR
    /// page, as a posted write.
    fn post_send(&mut self, qp: &TestQp, n: u16, lkey: u32, addr: u64, len: u32) {
        let mut wqe = [0u8; 32];
        let ctrl = CtrlSeg {
            opmod: 0,
            wqe_index: n,
            opcode: SendOpcode::Send,
            qpn: qp.qpn,
            ds: 2,
            signature: 0,
            fence_mode: 0,
            ce: CE_CQ_UPDATE,
            solicited: false,
            imm: 0,
        };
        let (c, d) = wqe.split_at_mut(16);
        ctrl.encode(c.try_into().unwrap());
        DataSeg {
            byte_count: len,
            lkey,
            addr,
        }
        .encode(d.try_into().unwrap());
        let db = send_doorbell(&<[u8; 16]>::try_from(&*c).unwrap());
        let slot = u64::from(n) % (1 << LOG_SQ);
        self.put(qp.sq + slot * 64, &wqe);
        self.put(qp.dbr + QP_DBR_SEND_OFFSET as u64, &counter_word(n + 1));
        self.c.post(self.uar_offset() + UAR_BF_OFFSET as u64, &db);
    }

    /// Interrupts signalled on the completion vector since the last call.
    fn comp_interrupts(&mut self) -> u64 {
        let mut n = [0u8; 8];
        match (&self.comp_irq).read(&mut n) {
            Ok(8) => u64::from_ne_bytes(n),
            _ => 0,
        }
    }
}

/// One server with two functions on socket pairs, and its two clients
/// sharing an 8 MiB guest RAM.
fn start2() -> (Drv, Drv, JoinHandle<[Outcome; 2]>) {
    // PANIC: host test harness: no socket pair means the test cannot run.
    let (a0, b0) = UnixStream::pair().unwrap();
    let (a1, b1) = UnixStream::pair().unwrap();
    let server = std::thread::spawn(move || {
        let mut s = Server::new(
            Settings::DEFAULT,
            vec![
                Endpoint::Client(Connection::new(b0)),
                Endpoint::Client(Connection::new(b1)),
            ],
        );
        // PANIC: host test harness: the emulator's session error fails the test.
        s.run().unwrap();
        [outcome(&mut s, 0), outcome(&mut s, 1)]
    });
    // SAFETY: the name is a NUL-terminated literal.
    let ram = new_fd(unsafe { libc::memfd_create(c"guest-ram".as_ptr(), libc::MFD_CLOEXEC) });
    let ram = File::from(ram);
    // PANIC: host test harness: no RAM file means the test cannot run.
    ram.set_len(RAM2_SIZE).unwrap();
    let d0 = Drv::new(a0, &ram, 0);
    let d1 = Drv::new(a1, &ram, 1);
    (d0, d1, server)
}

/// Everything a function needs for RC traffic: the async and completion
/// EQs (armed), a PD and a key over `data`, a CQ, an RC QP.
fn rc_function(d: &mut Drv, data: u64) -> (u32, TestCq, TestQp) {
    d.bring_up();
    d.create_eq(
        &[
            EventType::PathMig,
            EventType::CommEst,
            EventType::SqDrained,
            EventType::CqError,
            EventType::WqCatasError,
            EventType::PathMigFailed,
            EventType::WqInvalReqError,
            EventType::WqAccessError,
            EventType::PortChange,
        ],
        0,
    );
    let (comp, _) = d.create_eq(&[], 1);
    let (pd, lkey) = d.pd_and_mr(data, 0x10000);
    let cq = d.create_cq(comp);
    let qp = d.create_qp(pd, &cq);
    (lkey, cq, qp)
}

#[test]
fn rc_traffic_between_two_functions_on_one_fabric() {
    use crate::pci::AF_CTRL;
    use crate::testreg::{REG_FLRS, REG_PORT, TEST_PAGE_OFFSET};

    let (mut d0, mut d1, server) = start2();
    // Each function's port has its instance's LID: 1 and 2.
    assert_eq!(
        d0.c.read32le(TEST_PAGE_OFFSET + REG_PORT as u64) & 0xffff,
        1
    );
    assert_eq!(
        d1.c.read32le(TEST_PAGE_OFFSET + REG_PORT as u64) & 0xffff,
        2
    );

    let data0 = d0.alloc(0x10000);
    let data1 = d1.alloc(0x10000);
    let (lkey0, cq0, qp0) = rc_function(&mut d0, data0);
    let (lkey1, cq1, qp1) = rc_function(&mut d1, data1);
    // Both functions hand out the same numbers: they are two devices.
    assert_eq!(d0.uar, d1.uar);
    assert_eq!(qp0.qpn, qp1.qpn);
    // A lost request is retried twice, after about 1 ms each.
    d0.connect(&qp0, (2, qp1.qpn), 2, 8);
    d1.connect(&qp1, (1, qp0.qpn), 2, 8);
    d0.arm_cq(&cq0, 0);
    d1.arm_cq(&cq1, 0);

    // Function 1 posts a receive, function 0 sends 1000 bytes to it.
    let msg: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
    d0.put(data0, &msg);
    d1.post_recv(&qp1, 0, lkey1, data1 + 0x100, 4096);
    d0.post_send(&qp0, 0, lkey0, data0, msg.len() as u32);
    // The doorbell was a lone store: the next access rings it, and the
    // engine runs before the read is answered.
    d0.c.read32be(INITIALIZING_OFFSET);

    let req = d0.cqe(&cq0, 0).expect("the sender's CQE");
    let c = Cqe64::decode(&req).unwrap();
    assert_eq!(c.op_own.opcode, CqeOpcode::Req);
    assert_eq!((c.qpn, c.wqe_counter), (qp0.qpn, 0));
    let resp = d1.cqe(&cq1, 0).expect("the receiver's CQE");
    let c = Cqe64::decode(&resp).unwrap();
    assert_eq!(c.op_own.opcode, CqeOpcode::RespSend);
    assert_eq!((c.qpn, c.byte_cnt), (qp1.qpn, 1000));
    // The sender, as the receiver sees it: function 0's LID and QP.
    assert_eq!((c.slid, c.src_qpn), (1, qp0.qpn));
    assert_eq!(d1.get(data1 + 0x100, msg.len()), msg);
    // Each completion interrupted its own function, once.
    assert_eq!(d0.comp_interrupts(), 1);
    assert_eq!(d1.comp_interrupts(), 1);

    // An FLR of function 1 resets it alone: its instance is rebuilt in
    // place (no QP any more), function 0 goes on. Its next SEND finds
    // nobody to answer and, after two retries of about 1 ms, completes
    // in error.
    let cfg = vfio::PCI_CONFIG_REGION_INDEX;
    d1.c.write(cfg, AF_CTRL as u64, &[0x01]);
    assert_eq!(d1.c.read32le(TEST_PAGE_OFFSET + REG_FLRS as u64), 1);
    assert_eq!(d1.c.read32be(CMDQ_ADDR_H_OFFSET), 0, "a fresh function");
    // Linux restores the command register: bus mastering is back.
    d1.c.write(cfg, 4, &[0x06]);
    assert_eq!(d0.c.read32le(TEST_PAGE_OFFSET + REG_FLRS as u64), 0);
    d1.post_recv(&qp1, 1, lkey1, data1 + 0x1000, 4096);
    d0.post_send(&qp0, 1, lkey0, data0, msg.len() as u32);
    d0.c.read32be(INITIALIZING_OFFSET);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let err = loop {
        if let Some(c) = d0.cqe(&cq0, 1) {
            break c;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no completion for the SEND"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    };
    let e = ErrCqe::decode(&err).unwrap();
    assert_eq!(e.op_own.opcode, CqeOpcode::ReqErr);
    assert_eq!(e.syndrome, u8::from(CqeSyndrome::TransportRetryExc));
    assert_eq!(
        d1.get(data1 + 0x1000, 16),
        [0; 16],
        "nothing reached function 1"
    );
    assert_eq!(d0.comp_interrupts() + d1.comp_interrupts(), 0);

    // Function 1's client leaves; function 0 is still served.
    drop(d1);
    d0.cmd::<AllocPd>(&AllocPdIn::default(), &[]);
    assert_eq!(d0.c.read32be(0), 35 << 16 | 16);
    drop(d0);
    let [o0, o1] = server.join().unwrap();
    assert_eq!((o0.0, o0.1), (false, 0), "function 0: {:?}", o0.2);
    assert_eq!((o1.0, o1.1), (false, 0), "function 1: {:?}", o1.2);
    assert_eq!(o0.3, 1, "function 0's interrupts");
    assert_eq!(o1.3, 1, "function 1's interrupts");
    assert_eq!((o1.2.flrs, o0.2.resets), (1, 0));
}

#[test]
fn a_function_without_bus_mastering_answers_nothing_until_it_has_it_again() {
    let (mut d0, mut d1, server) = start2();
    let data0 = d0.alloc(0x10000);
    let data1 = d1.alloc(0x10000);
    let (lkey0, cq0, qp0) = rc_function(&mut d0, data0);
    let (lkey1, cq1, qp1) = rc_function(&mut d1, data1);
    // Seven retries after 67 ms each: plenty of time to come back.
    d0.connect(&qp0, (2, qp1.qpn), 7, 14);
    d1.connect(&qp1, (1, qp0.qpn), 7, 14);
    d1.post_recv(&qp1, 0, lkey1, data1, 4096);
    d0.put(data0, b"while you were out");

    // Function 1's driver clears Bus Master Enable: its instance leaves
    // the fabric, and function 0's SEND finds no one to answer it.
    let cfg = vfio::PCI_CONFIG_REGION_INDEX;
    d1.c.write(cfg, 4, &[0x02]);
    d0.post_send(&qp0, 0, lkey0, data0, 18);
    d0.c.read32be(INITIALIZING_OFFSET);
    assert!(d0.cqe(&cq0, 0).is_none(), "the SEND waits for an answer");
    assert!(d1.cqe(&cq1, 0).is_none());
    assert_eq!(d1.get(data1, 18), [0; 18]);

    // Bus mastering back: the retry reaches the QP, with its receive.
    d1.c.write(cfg, 4, &[0x06]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while d0.cqe(&cq0, 0).is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "no completion for the SEND"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let c = Cqe64::decode(&d0.cqe(&cq0, 0).unwrap()).unwrap();
    assert_eq!(c.op_own.opcode, CqeOpcode::Req);
    let c = Cqe64::decode(&d1.cqe(&cq1, 0).unwrap()).unwrap();
    assert_eq!((c.op_own.opcode, c.byte_cnt), (CqeOpcode::RespSend, 18));
    assert_eq!(d1.get(data1, 18), b"while you were out");

    drop(d0);
    drop(d1);
    let [o0, o1] = server.join().unwrap();
    assert!(!o0.0 && !o1.0, "{:?} {:?}", o0.2, o1.2);
    assert_eq!((o0.1, o1.1), (0, 0));
}

/// Two QPs of one function ring the same BlueFlame half back to back, as
/// kernel QPs sharing a register do: the first doorbell, a lone 8-byte
/// store the emulator holds in case a BlueFlame copy follows, is rung with
/// its own bytes, not with the second QP's that replaced them in the UAR
/// page. A ConnectX takes each doorbell write with the data it carried.
#[test]
fn two_qps_ringing_one_blueflame_half_back_to_back() {
    let (mut d0, mut d1, server) = start2();
    let data0 = d0.alloc(0x10000);
    let data1 = d1.alloc(0x10000);
    let (lkey0, cq0, qp0a) = rc_function(&mut d0, data0);
    let (lkey1, cq1, qp1a) = rc_function(&mut d1, data1);
    // The second QPs in a PD of their own, with its own key.
    let (pd0, lkey0b) = d0.pd_and_mr(data0, 0x10000);
    let (pd1, lkey1b) = d1.pd_and_mr(data1, 0x10000);
    let qp0b = d0.create_qp(pd0, &cq0);
    let qp1b = d1.create_qp(pd1, &cq1);
    d0.connect(&qp0a, (2, qp1a.qpn), 2, 8);
    d1.connect(&qp1a, (1, qp0a.qpn), 2, 8);
    d0.connect(&qp0b, (2, qp1b.qpn), 2, 8);
    d1.connect(&qp1b, (1, qp0b.qpn), 2, 8);

    d0.put(data0, &[0x5a; 64]);
    d1.post_recv(&qp1a, 0, lkey1, data1 + 0x100, 64);
    d1.post_recv(&qp1b, 0, lkey1b, data1 + 0x200, 64);
    // Both doorbells land on register 0, half 0, with nothing between
    // them; the read rings whatever is still held.
    d0.post_send(&qp0a, 0, lkey0, data0, 64);
    d0.post_send(&qp0b, 0, lkey0b, data0, 64);
    d0.c.read32be(INITIALIZING_OFFSET);

    for (i, qp) in [qp0a, qp0b].iter().enumerate() {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let cqe = loop {
            if let Some(c) = d0.cqe(&cq0, i as u32) {
                break c;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no completion {i} (QP {:#x})",
                qp.qpn
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        };
        // PANIC: host test harness: a CQE the model wrote decodes, or the test fails.
        let c = Cqe64::decode(&cqe).unwrap();
        assert_eq!(c.op_own.opcode, CqeOpcode::Req, "completion {i}");
    }
    assert_eq!(d1.get(data1 + 0x100, 64), [0x5a; 64]);
    assert_eq!(d1.get(data1 + 0x200, 64), [0x5a; 64]);
    drop(d0);
    drop(d1);
    // PANIC: host test harness: a panic in the emulator's thread fails the test.
    let [o0, o1] = server.join().unwrap();
    assert_eq!((o0.0, o0.1), (false, 0), "function 0: {:?}", o0.2);
    assert_eq!((o1.0, o1.1), (false, 0), "function 1: {:?}", o1.2);
}
