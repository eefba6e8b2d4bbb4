// SPDX-License-Identifier: GPL-2.0

//! The device process's loop: one client (QEMU), one function, one
//! thread.
//!
//! Each turn waits for the next message no longer than the function's
//! timer asks (a held doorbell, a retry deadline, queue work left over),
//! does the timer work, then answers the message. Messages are handled in
//! the order they arrive, so the guest's BAR accesses reach the function
//! in program order (QEMU sends them on this one socket). The loop ends
//! when the client closes the connection.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;

use crate::bar0::BAR0_SIZE;
use crate::function::Function;
use crate::log::{debug, error, info};
use crate::pci::{ConfigEffect, ConfigSpace, CONFIG_SIZE};
use crate::vfio_user::socket::{Connection, Message, MAX_MESSAGE};
use crate::vfio_user::wire::{self, vfio, Request, SetIrqs};

/// Largest region access the server announces and accepts.
const MAX_DATA_XFER: u32 = 1 << 20;
/// BAR accesses are passed on at most 8 bytes at a time (what a CPU store
/// can be), never across a 4 KiB page.
const MAX_ACCESS: u64 = 8;

/// The server: a connection and the function behind it.
pub(crate) struct Server {
    conn: Connection,
    config: ConfigSpace,
    /// The function.
    pub(crate) function: Function,
    /// vfio-user requests refused or not understood.
    pub(crate) protocol_errors: u64,
}

type Reply = Result<Vec<u8>, i32>;

impl Server {
    /// Serves `function` on `conn`.
    pub(crate) fn new(conn: Connection, function: Function) -> Self {
        let vectors = function.bus.vectors.count() as u16;
        Server {
            conn,
            config: ConfigSpace::connectx5(vectors),
            function,
            protocol_errors: 0,
        }
    }

    /// Serves until the client closes the connection.
    ///
    /// # Errors
    ///
    /// A socket error, or a message that breaks the stream's framing.
    pub(crate) fn run(&mut self) -> io::Result<()> {
        loop {
            let timeout = self.function.next_timeout();
            let readable = self.conn.wait(timeout)?;
            self.function.tick();
            if !readable {
                continue;
            }
            match self.conn.recv()? {
                None => return Ok(()),
                Some(m) => self.handle(m)?,
            }
        }
    }

    fn protocol_error(&mut self, what: std::fmt::Arguments<'_>) {
        self.protocol_errors += 1;
        error!("vfio-user: {what}");
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
        self.conn.send(&bytes)
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
                let mem = &mut self.function.bus.mem;
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
                match self.function.bus.mem.unmap(u.addr, u.size, all) {
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
                        (vfio::IRQ_INFO_EVENTFD, self.function.bus.vectors.count())
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
                self.config.reset();
                self.function.reset();
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
            return self.config.read(offset, data).map_err(|_| libc::EINVAL);
        }
        let mut done = 0;
        while done < data.len() {
            let at = offset + done as u64;
            let n = piece(at, data.len() - done);
            self.function.bar0_read(at, &mut data[done..done + n]);
            done += n;
        }
        Ok(())
    }

    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> Result<(), i32> {
        self.access("write", region, offset, data.len())?;
        if region == vfio::PCI_CONFIG_REGION_INDEX {
            debug!("config write {offset:#x} = {data:02x?}");
            let effect = self.config.write(offset, data).map_err(|_| libc::EINVAL)?;
            if effect == ConfigEffect::FunctionLevelReset {
                // Done before the write is answered: the guest finds the
                // function reset when its write returns.
                info!("function-level reset (Initiate FLR in the Advanced Features capability)");
                self.config.reset();
                self.function.flr();
            }
            self.function.set_bus_master(self.config.bus_master());
            return Ok(());
        }
        let mut done = 0;
        while done < data.len() {
            let at = offset + done as u64;
            let n = piece(at, data.len() - done);
            self.function.bar0_write(at, &data[done..done + n]);
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
            vfio::PCI_MSIX_IRQ_INDEX => self.function.bus.vectors.count(),
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
        let vectors = &mut self.function.bus.vectors;
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
