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

use mlx5_prm::cmd_hca::{EnableHca, EnableHcaIn, QueryIssi, QueryIssiIn, QueryIssiOut};
use mlx5_prm::cmd_queue::{sign_layout, CmdLayout, DeliveryStatus, MailboxHeader, MAILBOX_SIZE};
use mlx5_prm::command::{self, Command};
use mlx5_prm::ifc::Layout;
use mlx5_prm::init_seg::{
    CMDQ_ADDR_H_OFFSET, CMDQ_ADDR_L_SZ_OFFSET, CMD_DBELL_OFFSET, INITIALIZING_OFFSET,
};

use crate::function::{FnStats, Function, Settings};
use crate::server::Server;
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

fn start() -> (Client, JoinHandle<Outcome>) {
    // PANIC: host test harness: no socket pair means the test cannot run.
    let (a, b) = UnixStream::pair().unwrap();
    let server = std::thread::spawn(move || {
        let mut s = Server::new(Connection::new(b), Function::new(Settings::DEFAULT));
        // PANIC: host test harness: the emulator's session error fails the test.
        s.run().unwrap();
        s.function.finish();
        let interrupts = s.function.bus.stats.interrupts;
        (
            s.function.failed(),
            s.protocol_errors,
            s.function.stats,
            interrupts,
        )
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
