// SPDX-License-Identifier: GPL-2.0

//! The device process's loop: one thread, one client (QEMU's
//! `vfio-user-pci`) per function of the card, each on its own socket.
//!
//! Each turn waits for the next message on any socket (or a client to
//! accept) no longer than the card's timer asks (a held doorbell, a retry
//! deadline, queue work left over), does the timer work, then answers one
//! message of each socket that has one. A socket's messages are handled
//! in the order they arrive, so the guest's BAR accesses reach its
//! function in program order (QEMU sends them on that one socket). A
//! client that closes its connection detaches its function (`card.rs`);
//! the loop ends when no client is connected any more and at least one
//! has been.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;

use crate::bar0::BAR0_SIZE;
use crate::card::Card;
use crate::function::{Function, Settings};
use crate::log::{self, debug, error, info};
use crate::pci::{ConfigEffect, ConfigSpace, CONFIG_SIZE};
use crate::vfio_user::socket::{wait_readable, Connection, Message, MAX_MESSAGE};
use crate::vfio_user::wire::{self, vfio, Request, SetIrqs};

/// Largest region access the server announces and accepts.
const MAX_DATA_XFER: u32 = 1 << 20;
/// BAR accesses are passed on at most 8 bytes at a time (what a CPU store
/// can be), never across a 4 KiB page.
const MAX_ACCESS: u64 = 8;

/// Where a function's client comes from.
pub(crate) enum Endpoint {
    /// A socket to accept it on, at this path (removed once it is in).
    Listen(UnixListener, PathBuf),
    /// A client already connected (the tests' socket pairs).
    #[cfg(test)]
    Client(Connection),
}

/// Where a function's link stands.
enum Peer {
    Listening(UnixListener, PathBuf),
    Connected(Connection),
    /// The client came and went.
    Gone,
}

/// One function's side of the server: its client and its configuration
/// space.
struct Link {
    peer: Peer,
    config: ConfigSpace,
    /// vfio-user requests refused or not understood.
    protocol_errors: u64,
}

/// The server: the card and one link per function.
pub(crate) struct Server {
    /// The functions.
    pub(crate) card: Card,
    links: Vec<Link>,
    /// The function whose message is being handled.
    cur: usize,
}

type Reply = Result<Vec<u8>, i32>;

impl Server {
    /// Serves a card of one function per endpoint, built with `settings`:
    /// function `i` on `endpoints[i]`.
    pub(crate) fn new(settings: Settings, endpoints: Vec<Endpoint>) -> Self {
        let mut card = Card::new(settings, endpoints.len());
        let links = endpoints
            .into_iter()
            .enumerate()
            .map(|(i, e)| {
                let vectors = card.function(i).map_or(0, |f| f.bus.vectors.count()) as u16;
                Link {
                    peer: match e {
                        Endpoint::Listen(l, p) => Peer::Listening(l, p),
                        #[cfg(test)]
                        Endpoint::Client(c) => Peer::Connected(c),
                    },
                    config: ConfigSpace::connectx5(vectors),
                    protocol_errors: 0,
                }
            })
            .collect();
        Server {
            card,
            links,
            cur: 0,
        }
    }

    /// vfio-user requests function `i`'s client sent that were refused or
    /// not understood, and connection failures.
    pub(crate) fn protocol_errors(&self, i: usize) -> u64 {
        self.links.get(i).map_or(0, |l| l.protocol_errors)
    }

    /// Whether the loop is done: no client is connected and at least one
    /// was (the clients of one QEMU connect one after the other at start
    /// and leave together).
    fn done(&self) -> bool {
        let connected = self
            .links
            .iter()
            .any(|l| matches!(l.peer, Peer::Connected(_)));
        let gone = self.links.iter().any(|l| matches!(l.peer, Peer::Gone));
        !connected && gone
    }

    /// Serves until no client is connected any more (see the module
    /// documentation). A function that never got its client counts a
    /// protocol error; so does a failure to wait for the sockets, which
    /// ends every connection.
    ///
    /// # Errors
    ///
    /// A client could not be accepted (the process could not start).
    pub(crate) fn run(&mut self) -> io::Result<()> {
        while !self.done() {
            let timeout = self.card.next_timeout();
            let ready = {
                let fds: Vec<Option<BorrowedFd<'_>>> = self
                    .links
                    .iter()
                    .map(|l| match &l.peer {
                        Peer::Listening(s, _) => Some(s.as_fd()),
                        Peer::Connected(c) => Some(c.as_fd()),
                        Peer::Gone => None,
                    })
                    .collect();
                let live: Vec<BorrowedFd<'_>> = fds.iter().flatten().copied().collect();
                wait_readable(&live, timeout).map(|r| {
                    let mut r = r.into_iter();
                    fds.iter()
                        .map(|fd| fd.is_some() && r.next().unwrap_or(false))
                        .collect::<Vec<bool>>()
                })
            };
            let ready = match ready {
                Ok(r) => r,
                Err(e) => {
                    self.abort(&e);
                    break;
                }
            };
            self.card.tick();
            for (i, r) in ready.into_iter().enumerate() {
                if r {
                    self.serve(i)?;
                }
            }
        }
        for i in 0..self.links.len() {
            if let Peer::Listening(_, path) = &self.links[i].peer {
                let _ = std::fs::remove_file(path);
                let path = path.display().to_string();
                self.cur = i;
                self.tagged(|s| {
                    s.protocol_error(format_args!("no client connected on {path}"));
                });
            }
        }
        Ok(())
    }

    /// Ends every connection after the sockets could not be waited for.
    fn abort(&mut self, e: &io::Error) {
        for i in 0..self.links.len() {
            if matches!(self.links[i].peer, Peer::Connected(_)) {
                self.cur = i;
                self.tagged(|s| {
                    s.links[i].protocol_errors += 1;
                    error!("vfio-user connection: {e}");
                    s.disconnect(i);
                });
            }
        }
    }

    /// Runs `op` with the log lines tagged with the current function's
    /// number (if the card has several).
    fn tagged<R>(&mut self, op: impl FnOnce(&mut Self) -> R) -> R {
        let tag = (self.links.len() > 1).then(|| log::set_function(Some(self.cur)));
        let r = op(self);
        if let Some(t) = tag {
            log::set_function(t);
        }
        r
    }

    /// Serves what is waiting on link `i`: accepts its client, or handles
    /// one message.
    fn serve(&mut self, i: usize) -> io::Result<()> {
        self.cur = i;
        self.tagged(|s| s.serve_link(i))
    }

    fn serve_link(&mut self, i: usize) -> io::Result<()> {
        let Some(link) = self.links.get_mut(i) else {
            return Ok(());
        };
        match &mut link.peer {
            Peer::Listening(listener, path) => {
                let accepted = listener.accept();
                // The path is not needed once the client is in.
                let _ = std::fs::remove_file(&*path);
                let (stream, _) = accepted?;
                link.peer = Peer::Connected(Connection::new(stream));
            }
            Peer::Connected(conn) => {
                let r = match conn.recv() {
                    Ok(None) => Ok(false),
                    Ok(Some(m)) => self.handle(m).map(|()| true),
                    Err(e) => Err(e),
                };
                match r {
                    Ok(true) => {}
                    Ok(false) => self.disconnect(i),
                    Err(e) => {
                        self.links[i].protocol_errors += 1;
                        error!("vfio-user connection: {e}");
                        self.disconnect(i);
                    }
                }
            }
            Peer::Gone => {}
        }
        Ok(())
    }

    /// Link `i`'s client is gone: its function is detached.
    fn disconnect(&mut self, i: usize) {
        if let Some(l) = self.links.get_mut(i) {
            l.peer = Peer::Gone;
        }
        self.card.detach(i);
        info!("client disconnected");
    }

    fn protocol_error(&mut self, what: std::fmt::Arguments<'_>) {
        if let Some(l) = self.links.get_mut(self.cur) {
            l.protocol_errors += 1;
        }
        error!("vfio-user: {what}");
    }

    fn config(&mut self) -> &mut ConfigSpace {
        &mut self.links[self.cur].config
    }

    fn conn(&mut self) -> Option<&mut Connection> {
        match &mut self.links.get_mut(self.cur)?.peer {
            Peer::Connected(c) => Some(c),
            _ => None,
        }
    }

    /// The current function (there is one per link, see `Server::new`).
    fn function(&mut self) -> Result<&mut Function, i32> {
        self.card.function(self.cur).ok_or(libc::ENODEV)
    }

    fn handle(&mut self, m: Message) -> io::Result<()> {
        let h = m.header;
        if !h.is_command() {
            self.protocol_error(format_args!("unexpected reply, command {}", h.command));
            return Ok(());
        }
        let reply = match wire::decode(&h, &m.payload) {
            Ok(req) => self.request(req, m.fds),
            Err(e) => {
                self.protocol_error(format_args!("{e}"));
                Err(libc::ENOTSUP)
            }
        };
        if h.no_reply() {
            return Ok(());
        }
        let bytes = match reply {
            Ok(payload) => wire::reply(&h, &payload),
            Err(errno) => wire::error_reply(&h, errno),
        };
        match self.conn() {
            Some(c) => c.send(&bytes),
            None => Ok(()),
        }
    }

    fn request(&mut self, req: Request, fds: Vec<OwnedFd>) -> Reply {
        match req {
            Request::Version { major, minor, caps } => {
                info!("client connected: vfio-user {major}.{minor}, {caps}");
                Ok(wire::version_payload(MAX_DATA_XFER))
            }
            Request::DmaMap(d) => {
                if fds.len() > 1 {
                    self.protocol_error(format_args!("DMA_MAP with {} descriptors", fds.len()));
                    return Err(libc::EINVAL);
                }
                let mem = &mut self.function()?.bus.mem;
                match mem.map(d.addr, d.size, d.offset, d.flags, fds.first()) {
                    Ok(()) => {
                        let (n, bytes) = mem.extent();
                        debug!(
                            "DMA map {:#x}+{:#x} ({}{}{}): {n} ranges, {} MiB reachable",
                            d.addr,
                            d.size,
                            if d.flags & vfio::DMA_READ != 0 {
                                "r"
                            } else {
                                "-"
                            },
                            if d.flags & vfio::DMA_WRITE != 0 {
                                "w"
                            } else {
                                "-"
                            },
                            if fds.is_empty() { ", no memory" } else { "" },
                            bytes >> 20
                        );
                        Ok(Vec::new())
                    }
                    Err(e) => {
                        self.protocol_error(format_args!(
                            "DMA map {:#x}+{:#x} refused: {e:?}",
                            d.addr, d.size
                        ));
                        Err(e.errno())
                    }
                }
            }
            Request::DmaUnmap(u) => {
                let all = u.flags & vfio::DMA_UNMAP_ALL != 0;
                match self.function()?.bus.mem.unmap(u.addr, u.size, all) {
                    Ok(n) => {
                        debug!("DMA unmap {:#x}+{:#x}: {n} ranges", u.addr, u.size);
                        Ok(wire::dma_unmap_payload(&u))
                    }
                    Err(e) => {
                        self.protocol_error(format_args!(
                            "DMA unmap {:#x}+{:#x} refused: {e:?}",
                            u.addr, u.size
                        ));
                        Err(e.errno())
                    }
                }
            }
            Request::GetInfo => Ok(wire::device_info_payload(
                vfio::DEVICE_FLAGS_PCI | vfio::DEVICE_FLAGS_RESET,
                vfio::PCI_NUM_REGIONS,
                vfio::PCI_NUM_IRQS,
            )),
            Request::GetRegionInfo { index } => {
                let rw = vfio::REGION_INFO_FLAG_READ | vfio::REGION_INFO_FLAG_WRITE;
                let (flags, size) = match index {
                    vfio::PCI_BAR0_REGION_INDEX => (rw, BAR0_SIZE),
                    vfio::PCI_CONFIG_REGION_INDEX => (rw, CONFIG_SIZE as u64),
                    i if i < vfio::PCI_NUM_REGIONS => (0, 0),
                    _ => {
                        self.protocol_error(format_args!("region info of region {index}"));
                        return Err(libc::EINVAL);
                    }
                };
                Ok(wire::region_info_payload(index, flags, size))
            }
            Request::GetIrqInfo { index } => {
                let (flags, count) = match index {
                    vfio::PCI_INTX_IRQ_INDEX => (vfio::IRQ_INFO_EVENTFD, 1),
                    vfio::PCI_MSIX_IRQ_INDEX => {
                        (vfio::IRQ_INFO_EVENTFD, self.function()?.bus.vectors.count())
                    }
                    i if i < vfio::PCI_NUM_IRQS => (0, 0),
                    _ => {
                        self.protocol_error(format_args!("interrupt info of index {index}"));
                        return Err(libc::EINVAL);
                    }
                };
                Ok(wire::irq_info_payload(index, flags, count))
            }
            Request::SetIrqs(s) => self.set_irqs(&s, fds),
            Request::RegionRead {
                region,
                offset,
                count,
            } => {
                let mut data = vec![0u8; count as usize];
                self.region_read(region, offset, &mut data)?;
                Ok(wire::region_access_payload(region, offset, count, &data))
            }
            Request::RegionWrite {
                region,
                offset,
                data,
            } => {
                self.region_write(region, offset, &data)?;
                Ok(wire::region_access_payload(
                    region,
                    offset,
                    data.len() as u32,
                    &[],
                ))
            }
            Request::Reset => {
                info!("function reset (DEVICE_RESET)");
                self.config().reset();
                self.card.reset(self.cur);
                Ok(Vec::new())
            }
        }
    }

    /// Checks an access to `region` and returns the region's size.
    fn access(&mut self, what: &str, region: u32, offset: u64, len: usize) -> Result<u64, i32> {
        let size = match region {
            vfio::PCI_BAR0_REGION_INDEX => BAR0_SIZE,
            vfio::PCI_CONFIG_REGION_INDEX => CONFIG_SIZE as u64,
            _ => 0,
        };
        let fits = offset
            .checked_add(len as u64)
            .is_some_and(|end| end <= size);
        if !fits || len > MAX_MESSAGE {
            self.protocol_error(format_args!(
                "{what} of {len} bytes at {offset:#x} of region {region} (size {size:#x})"
            ));
            return Err(libc::EINVAL);
        }
        Ok(size)
    }

    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> Result<(), i32> {
        self.access("read", region, offset, data.len())?;
        if region == vfio::PCI_CONFIG_REGION_INDEX {
            return self.config().read(offset, data).map_err(|_| libc::EINVAL);
        }
        let mut done = 0;
        while done < data.len() {
            let at = offset + done as u64;
            let n = piece(at, data.len() - done);
            self.card.bar0_read(self.cur, at, &mut data[done..done + n]);
            done += n;
        }
        Ok(())
    }

    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> Result<(), i32> {
        self.access("write", region, offset, data.len())?;
        if region == vfio::PCI_CONFIG_REGION_INDEX {
            debug!("config write {offset:#x} = {data:02x?}");
            let effect = self
                .config()
                .write(offset, data)
                .map_err(|_| libc::EINVAL)?;
            if effect == ConfigEffect::FunctionLevelReset {
                // Done before the write is answered: the guest finds the
                // function reset when its write returns.
                info!("function-level reset (Initiate FLR in the Advanced Features capability)");
                self.config().reset();
                self.card.flr(self.cur);
            }
            let on = self.config().bus_master();
            self.card.set_bus_master(self.cur, on);
            return Ok(());
        }
        let mut done = 0;
        while done < data.len() {
            let at = offset + done as u64;
            let n = piece(at, data.len() - done);
            self.card.bar0_write(self.cur, at, &data[done..done + n]);
            done += n;
        }
        Ok(())
    }

    fn set_irqs(&mut self, s: &SetIrqs, fds: Vec<OwnedFd>) -> Reply {
        let data_type = s.flags
            & (vfio::IRQ_SET_DATA_NONE | vfio::IRQ_SET_DATA_BOOL | vfio::IRQ_SET_DATA_EVENTFD);
        let action = s.flags
            & (vfio::IRQ_SET_ACTION_MASK
                | vfio::IRQ_SET_ACTION_UNMASK
                | vfio::IRQ_SET_ACTION_TRIGGER);
        debug!(
            "SET_IRQS index {} flags {:#x} vectors {}+{} with {} eventfds",
            s.index,
            s.flags,
            s.start,
            s.count,
            fds.len()
        );
        let available = match s.index {
            vfio::PCI_INTX_IRQ_INDEX => 1,
            vfio::PCI_MSIX_IRQ_INDEX => self.function()?.bus.vectors.count(),
            _ => 0,
        };
        let end = s.start.checked_add(s.count);
        if end.is_none_or(|e| e > available) && !(s.count == 0 && s.start == 0) {
            self.protocol_error(format_args!(
                "SET_IRQS of vectors {}+{} of index {} (it has {available})",
                s.start, s.count, s.index
            ));
            return Err(libc::EINVAL);
        }
        // Masking is QEMU's business (it emulates the MSI-X table), and the
        // function never raises INTx: only MSI-X triggers matter here.
        if action != vfio::IRQ_SET_ACTION_TRIGGER || s.index != vfio::PCI_MSIX_IRQ_INDEX {
            return Ok(Vec::new());
        }
        let vectors = &mut self.function()?.bus.vectors;
        match data_type {
            vfio::IRQ_SET_DATA_EVENTFD if fds.len() == s.count as usize => {
                for (i, fd) in fds.into_iter().enumerate() {
                    vectors.set(s.start + i as u32, Some(File::from(fd)));
                }
            }
            // No descriptor for the vectors: disconnect them (VFIO's -1).
            vfio::IRQ_SET_DATA_EVENTFD if fds.is_empty() => {
                for v in s.start..s.start + s.count {
                    vectors.set(v, None);
                }
            }
            // DATA_NONE with no vectors disables the index.
            vfio::IRQ_SET_DATA_NONE if s.count == 0 => vectors.clear(),
            vfio::IRQ_SET_DATA_NONE => {
                for v in s.start..s.start + s.count {
                    vectors.fire(v);
                }
            }
            vfio::IRQ_SET_DATA_BOOL if s.data.len() >= s.count as usize => {
                for (i, &b) in s.data.iter().take(s.count as usize).enumerate() {
                    if b != 0 {
                        vectors.fire(s.start + i as u32);
                    }
                }
            }
            _ => {
                self.protocol_error(format_args!(
                    "SET_IRQS flags {:#x} with {} descriptors for {} vectors",
                    s.flags,
                    fds.len(),
                    s.count
                ));
                return Err(libc::EINVAL);
            }
        }
        debug!(
            "MSI-X: {} of {} vectors connected",
            vectors.connected(),
            vectors.count()
        );
        Ok(Vec::new())
    }
}

/// The next piece of an access at `at` with `left` bytes to go: at most
/// [`MAX_ACCESS`] bytes, not crossing a 4 KiB page.
fn piece(at: u64, left: usize) -> usize {
    let to_page = 4096 - at % 4096;
    (left as u64).min(MAX_ACCESS).min(to_page) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar_accesses_are_cut_at_pages_and_8_bytes() {
        assert_eq!(piece(0x20, 8), 8);
        assert_eq!(piece(0x800, 64), 8);
        assert_eq!(piece(0xffc, 8), 4);
        assert_eq!(piece(0x1000, 2), 2);
    }
}
