// SPDX-License-Identifier: GPL-2.0

//! vfio-user messages: the header, the requests a client sends and the
//! replies the server writes. Pure encoding and decoding; every field is
//! little-endian (host order on x86-64, the only host this runs on).

/// Bytes of a message header.
pub(crate) const HEADER_SIZE: usize = 16;

/// Command numbers (`enum vfio_user_command`).
pub(crate) mod cmd {
    /// Version and capability negotiation.
    pub(crate) const VERSION: u16 = 1;
    /// Map guest memory for DMA (with a file descriptor when mappable).
    pub(crate) const DMA_MAP: u16 = 2;
    /// Unmap guest memory.
    pub(crate) const DMA_UNMAP: u16 = 3;
    /// Device flags and region / interrupt counts.
    pub(crate) const DEVICE_GET_INFO: u16 = 4;
    /// One region's size and access flags.
    pub(crate) const DEVICE_GET_REGION_INFO: u16 = 5;
    /// One interrupt index's vector count and flags.
    pub(crate) const DEVICE_GET_IRQ_INFO: u16 = 7;
    /// Install, remove or trigger interrupt eventfds.
    pub(crate) const DEVICE_SET_IRQS: u16 = 8;
    /// Read from a region.
    pub(crate) const REGION_READ: u16 = 9;
    /// Write to a region.
    pub(crate) const REGION_WRITE: u16 = 10;
    /// Reset the device.
    pub(crate) const DEVICE_RESET: u16 = 13;
}

/// Header flag bits.
pub(crate) mod flags {
    /// The message type field (bits 3:0).
    pub(crate) const TYPE_MASK: u32 = 0xf;
    /// Type of a request.
    pub(crate) const TYPE_COMMAND: u32 = 0;
    /// Type of a reply.
    pub(crate) const TYPE_REPLY: u32 = 1;
    /// The sender wants no reply (posted writes, some set-up messages).
    pub(crate) const NO_REPLY: u32 = 1 << 4;
    /// The reply reports an error (`errno` in the header's error field).
    pub(crate) const ERROR: u32 = 1 << 5;
}

/// VFIO constants the messages carry (`include/uapi/linux/vfio.h`).
pub(crate) mod vfio {
    /// `VFIO_DEVICE_FLAGS_RESET`: the device can be reset.
    pub(crate) const DEVICE_FLAGS_RESET: u32 = 1 << 0;
    /// `VFIO_DEVICE_FLAGS_PCI`: a PCI device.
    pub(crate) const DEVICE_FLAGS_PCI: u32 = 1 << 1;
    /// `VFIO_REGION_INFO_FLAG_READ`.
    pub(crate) const REGION_INFO_FLAG_READ: u32 = 1 << 0;
    /// `VFIO_REGION_INFO_FLAG_WRITE`.
    pub(crate) const REGION_INFO_FLAG_WRITE: u32 = 1 << 1;
    /// `VFIO_PCI_BAR0_REGION_INDEX`.
    pub(crate) const PCI_BAR0_REGION_INDEX: u32 = 0;
    /// `VFIO_PCI_CONFIG_REGION_INDEX`.
    pub(crate) const PCI_CONFIG_REGION_INDEX: u32 = 7;
    /// `VFIO_PCI_NUM_REGIONS`.
    pub(crate) const PCI_NUM_REGIONS: u32 = 9;
    /// `VFIO_PCI_INTX_IRQ_INDEX`.
    pub(crate) const PCI_INTX_IRQ_INDEX: u32 = 0;
    /// `VFIO_PCI_MSIX_IRQ_INDEX`.
    pub(crate) const PCI_MSIX_IRQ_INDEX: u32 = 2;
    /// `VFIO_PCI_NUM_IRQS`.
    pub(crate) const PCI_NUM_IRQS: u32 = 5;
    /// `VFIO_IRQ_INFO_EVENTFD`: vectors are signalled through eventfds.
    pub(crate) const IRQ_INFO_EVENTFD: u32 = 1 << 0;
    /// `VFIO_IRQ_SET_DATA_NONE`.
    pub(crate) const IRQ_SET_DATA_NONE: u32 = 1 << 0;
    /// `VFIO_IRQ_SET_DATA_BOOL`.
    pub(crate) const IRQ_SET_DATA_BOOL: u32 = 1 << 1;
    /// `VFIO_IRQ_SET_DATA_EVENTFD`.
    pub(crate) const IRQ_SET_DATA_EVENTFD: u32 = 1 << 2;
    /// `VFIO_IRQ_SET_ACTION_MASK`.
    pub(crate) const IRQ_SET_ACTION_MASK: u32 = 1 << 3;
    /// `VFIO_IRQ_SET_ACTION_UNMASK`.
    pub(crate) const IRQ_SET_ACTION_UNMASK: u32 = 1 << 4;
    /// `VFIO_IRQ_SET_ACTION_TRIGGER`.
    pub(crate) const IRQ_SET_ACTION_TRIGGER: u32 = 1 << 5;
    /// DMA_MAP: the device may read the range.
    pub(crate) const DMA_READ: u32 = 1 << 0;
    /// DMA_MAP: the device may write the range.
    pub(crate) const DMA_WRITE: u32 = 1 << 1;
    /// DMA_UNMAP: unmap everything (address and size 0).
    pub(crate) const DMA_UNMAP_ALL: u32 = 1 << 1;
}

/// A message header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Header {
    /// Chosen by the sender of a request, echoed by the reply.
    pub(crate) msg_id: u16,
    /// The command ([`cmd`]).
    pub(crate) command: u16,
    /// Bytes of the whole message, header included.
    pub(crate) size: u32,
    /// [`flags`].
    pub(crate) flags: u32,
    /// An `errno` value in an error reply.
    pub(crate) error: u32,
}

impl Header {
    /// Splits the 16 header bytes.
    pub(crate) fn decode(b: &[u8; HEADER_SIZE]) -> Self {
        Header {
            msg_id: u16::from_le_bytes([b[0], b[1]]),
            command: u16::from_le_bytes([b[2], b[3]]),
            size: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            flags: u32::from_le_bytes([b[8], b[9], b[10], b[11]]),
            error: u32::from_le_bytes([b[12], b[13], b[14], b[15]]),
        }
    }

    /// The 16 header bytes.
    pub(crate) fn encode(&self) -> [u8; HEADER_SIZE] {
        let mut b = [0u8; HEADER_SIZE];
        b[0..2].copy_from_slice(&self.msg_id.to_le_bytes());
        b[2..4].copy_from_slice(&self.command.to_le_bytes());
        b[4..8].copy_from_slice(&self.size.to_le_bytes());
        b[8..12].copy_from_slice(&self.flags.to_le_bytes());
        b[12..16].copy_from_slice(&self.error.to_le_bytes());
        b
    }

    /// Whether the message is a request (not a reply).
    pub(crate) fn is_command(&self) -> bool {
        self.flags & flags::TYPE_MASK == flags::TYPE_COMMAND
    }

    /// Whether the sender asked for no reply.
    pub(crate) fn no_reply(&self) -> bool {
        self.flags & flags::NO_REPLY != 0
    }
}

/// Why a request could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WireError {
    /// The payload is shorter than the command's layout.
    Short {
        /// The command.
        command: u16,
        /// Payload bytes present.
        len: usize,
        /// Payload bytes the layout needs.
        need: usize,
    },
    /// A command this server does not implement (DMA_READ/WRITE, dirty
    /// page tracking, region I/O fds, ...).
    Unsupported(u16),
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Short { command, len, need } => {
                write!(f, "command {command}: payload of {len} bytes, needs {need}")
            }
            WireError::Unsupported(c) => write!(f, "unsupported command {c}"),
        }
    }
}

/// DMA_MAP: `vfio_user_dma_map` after `argsz`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DmaMap {
    /// [`vfio::DMA_READ`], [`vfio::DMA_WRITE`].
    pub(crate) flags: u32,
    /// Offset of the range in the file descriptor sent along.
    pub(crate) offset: u64,
    /// The range's DMA address (guest physical, QEMU has no vIOMMU here).
    pub(crate) addr: u64,
    /// Bytes.
    pub(crate) size: u64,
}

/// DMA_UNMAP: `vfio_user_dma_unmap` without the dirty bitmap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DmaUnmap {
    /// [`vfio::DMA_UNMAP_ALL`].
    pub(crate) flags: u32,
    /// The range's DMA address.
    pub(crate) addr: u64,
    /// Bytes.
    pub(crate) size: u64,
}

/// DEVICE_SET_IRQS: `vfio_irq_set`, with the bytes of `DATA_BOOL`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SetIrqs {
    /// Data type and action (`VFIO_IRQ_SET_*`).
    pub(crate) flags: u32,
    /// The interrupt index (INTx, MSI, MSI-X, ...).
    pub(crate) index: u32,
    /// First vector.
    pub(crate) start: u32,
    /// Number of vectors.
    pub(crate) count: u32,
    /// The bytes after the fixed part (one per vector for `DATA_BOOL`).
    pub(crate) data: Vec<u8>,
}

/// A decoded request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Request {
    /// VERSION: the client's version and its capabilities (JSON).
    Version {
        /// Major version (0).
        major: u16,
        /// Minor version.
        minor: u16,
        /// The capability string, without its terminating NUL.
        caps: String,
    },
    /// DMA_MAP.
    DmaMap(DmaMap),
    /// DMA_UNMAP.
    DmaUnmap(DmaUnmap),
    /// DEVICE_GET_INFO.
    GetInfo,
    /// DEVICE_GET_REGION_INFO of region `index`.
    GetRegionInfo {
        /// The region.
        index: u32,
    },
    /// DEVICE_GET_IRQ_INFO of interrupt index `index`.
    GetIrqInfo {
        /// The interrupt index.
        index: u32,
    },
    /// DEVICE_SET_IRQS.
    SetIrqs(SetIrqs),
    /// REGION_READ.
    RegionRead {
        /// The region.
        region: u32,
        /// Byte offset in the region.
        offset: u64,
        /// Bytes to read.
        count: u32,
    },
    /// REGION_WRITE.
    RegionWrite {
        /// The region.
        region: u32,
        /// Byte offset in the region.
        offset: u64,
        /// The bytes written.
        data: Vec<u8>,
    },
    /// DEVICE_RESET.
    Reset,
}

fn u32_at(p: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    if let Some(s) = p.get(at..at + 4) {
        b.copy_from_slice(s);
    }
    u32::from_le_bytes(b)
}

fn u64_at(p: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    if let Some(s) = p.get(at..at + 8) {
        b.copy_from_slice(s);
    }
    u64::from_le_bytes(b)
}

fn need(command: u16, p: &[u8], n: usize) -> Result<(), WireError> {
    if p.len() < n {
        return Err(WireError::Short {
            command,
            len: p.len(),
            need: n,
        });
    }
    Ok(())
}

/// Decodes the payload `p` of a request with header `h`.
///
/// # Errors
///
/// [`WireError`] for a payload too short for its command or a command
/// this server does not implement.
pub(crate) fn decode(h: &Header, p: &[u8]) -> Result<Request, WireError> {
    let c = h.command;
    match c {
        cmd::VERSION => {
            need(c, p, 4)?;
            let text = &p[4..];
            let text = text.split(|&b| b == 0).next().unwrap_or(&[]);
            Ok(Request::Version {
                major: u16::from_le_bytes([p[0], p[1]]),
                minor: u16::from_le_bytes([p[2], p[3]]),
                caps: String::from_utf8_lossy(text).into_owned(),
            })
        }
        cmd::DMA_MAP => {
            need(c, p, 32)?;
            Ok(Request::DmaMap(DmaMap {
                flags: u32_at(p, 4),
                offset: u64_at(p, 8),
                addr: u64_at(p, 16),
                size: u64_at(p, 24),
            }))
        }
        cmd::DMA_UNMAP => {
            need(c, p, 24)?;
            Ok(Request::DmaUnmap(DmaUnmap {
                flags: u32_at(p, 4),
                addr: u64_at(p, 8),
                size: u64_at(p, 16),
            }))
        }
        cmd::DEVICE_GET_INFO => Ok(Request::GetInfo),
        cmd::DEVICE_GET_REGION_INFO => {
            need(c, p, 12)?;
            Ok(Request::GetRegionInfo {
                index: u32_at(p, 8),
            })
        }
        cmd::DEVICE_GET_IRQ_INFO => {
            need(c, p, 12)?;
            Ok(Request::GetIrqInfo {
                index: u32_at(p, 8),
            })
        }
        cmd::DEVICE_SET_IRQS => {
            need(c, p, 20)?;
            Ok(Request::SetIrqs(SetIrqs {
                flags: u32_at(p, 4),
                index: u32_at(p, 8),
                start: u32_at(p, 12),
                count: u32_at(p, 16),
                data: p[20..].to_vec(),
            }))
        }
        cmd::REGION_READ => {
            need(c, p, 16)?;
            Ok(Request::RegionRead {
                offset: u64_at(p, 0),
                region: u32_at(p, 8),
                count: u32_at(p, 12),
            })
        }
        cmd::REGION_WRITE => {
            need(c, p, 16)?;
            let count = u32_at(p, 12) as usize;
            need(c, p, 16 + count)?;
            Ok(Request::RegionWrite {
                offset: u64_at(p, 0),
                region: u32_at(p, 8),
                data: p[16..16 + count].to_vec(),
            })
        }
        cmd::DEVICE_RESET => Ok(Request::Reset),
        other => Err(WireError::Unsupported(other)),
    }
}

/// A reply to the request with header `req`, carrying `payload`.
pub(crate) fn reply(req: &Header, payload: &[u8]) -> Vec<u8> {
    let h = Header {
        msg_id: req.msg_id,
        command: req.command,
        size: (HEADER_SIZE + payload.len()) as u32,
        flags: flags::TYPE_REPLY,
        error: 0,
    };
    let mut m = h.encode().to_vec();
    m.extend_from_slice(payload);
    m
}

/// An error reply to the request with header `req`.
pub(crate) fn error_reply(req: &Header, errno: i32) -> Vec<u8> {
    Header {
        msg_id: req.msg_id,
        command: req.command,
        size: HEADER_SIZE as u32,
        flags: flags::TYPE_REPLY | flags::ERROR,
        error: errno.unsigned_abs(),
    }
    .encode()
    .to_vec()
}

/// The VERSION reply's payload: version 0.0 and the server's capabilities.
/// `max_msg_fds` 1 makes the client send one eventfd per SET_IRQS, so a
/// message's vectors and descriptors always correspond.
pub(crate) fn version_payload(max_data_xfer_size: u32) -> Vec<u8> {
    let caps = format!(
        "{{\"capabilities\":{{\"max_msg_fds\":1,\"max_data_xfer_size\":{max_data_xfer_size},\
         \"migration\":{{\"pgsize\":4096}}}}}}"
    );
    let mut p = vec![0u8; 4];
    p.extend_from_slice(caps.as_bytes());
    p.push(0);
    p
}

/// DEVICE_GET_INFO reply payload (`vfio_user_device_info`).
pub(crate) fn device_info_payload(flags: u32, num_regions: u32, num_irqs: u32) -> Vec<u8> {
    let mut p = Vec::with_capacity(16);
    for v in [16, flags, num_regions, num_irqs] {
        p.extend_from_slice(&v.to_le_bytes());
    }
    p
}

/// DEVICE_GET_REGION_INFO reply payload (`vfio_region_info`, no
/// capability chain: no region is mappable).
pub(crate) fn region_info_payload(index: u32, flags: u32, size: u64) -> Vec<u8> {
    let mut p = Vec::with_capacity(32);
    for v in [32, flags, index, 0] {
        p.extend_from_slice(&v.to_le_bytes());
    }
    p.extend_from_slice(&size.to_le_bytes());
    p.extend_from_slice(&0u64.to_le_bytes());
    p
}

/// DEVICE_GET_IRQ_INFO reply payload (`vfio_irq_info`).
pub(crate) fn irq_info_payload(index: u32, flags: u32, count: u32) -> Vec<u8> {
    let mut p = Vec::with_capacity(16);
    for v in [16, flags, index, count] {
        p.extend_from_slice(&v.to_le_bytes());
    }
    p
}

/// REGION_READ / REGION_WRITE reply payload: the access, then the bytes
/// read (none for a write).
pub(crate) fn region_access_payload(region: u32, offset: u64, count: u32, data: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(16 + data.len());
    p.extend_from_slice(&offset.to_le_bytes());
    p.extend_from_slice(&region.to_le_bytes());
    p.extend_from_slice(&count.to_le_bytes());
    p.extend_from_slice(data);
    p
}

/// DMA_UNMAP reply payload: the request echoed.
pub(crate) fn dma_unmap_payload(u: &DmaUnmap) -> Vec<u8> {
    let mut p = Vec::with_capacity(24);
    p.extend_from_slice(&24u32.to_le_bytes());
    p.extend_from_slice(&u.flags.to_le_bytes());
    p.extend_from_slice(&u.addr.to_le_bytes());
    p.extend_from_slice(&u.size.to_le_bytes());
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(command: u16, payload: usize) -> Header {
        Header {
            msg_id: 7,
            command,
            size: (HEADER_SIZE + payload) as u32,
            flags: flags::TYPE_COMMAND,
            error: 0,
        }
    }

    #[test]
    fn header_round_trips() {
        let h = Header {
            msg_id: 0x1234,
            command: cmd::REGION_WRITE,
            size: 0x28,
            flags: flags::NO_REPLY,
            error: 5,
        };
        let b = h.encode();
        assert_eq!(&b[..4], &[0x34, 0x12, 10, 0]);
        assert_eq!(Header::decode(&b), h);
        assert!(h.is_command() && h.no_reply());
    }

    #[test]
    fn region_write_carries_its_bytes() {
        let mut p = 0x1020u64.to_le_bytes().to_vec();
        p.extend_from_slice(&0u32.to_le_bytes());
        p.extend_from_slice(&8u32.to_le_bytes());
        p.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        let r = decode(&header(cmd::REGION_WRITE, p.len()), &p).unwrap();
        assert_eq!(
            r,
            Request::RegionWrite {
                region: 0,
                offset: 0x1020,
                data: vec![1, 2, 3, 4, 5, 6, 7, 8]
            }
        );
        // A count beyond the payload is refused, not read past.
        let short = &p[..20];
        assert!(matches!(
            decode(&header(cmd::REGION_WRITE, short.len()), short),
            Err(WireError::Short { .. })
        ));
    }

    #[test]
    fn dma_map_fields_sit_where_vfio_user_puts_them() {
        let mut p = Vec::new();
        p.extend_from_slice(&32u32.to_le_bytes());
        p.extend_from_slice(&3u32.to_le_bytes());
        p.extend_from_slice(&0x10_0000u64.to_le_bytes());
        p.extend_from_slice(&0x10_0000u64.to_le_bytes());
        p.extend_from_slice(&0x1ff0_0000u64.to_le_bytes());
        let r = decode(&header(cmd::DMA_MAP, 32), &p).unwrap();
        assert_eq!(
            r,
            Request::DmaMap(DmaMap {
                flags: vfio::DMA_READ | vfio::DMA_WRITE,
                offset: 0x10_0000,
                addr: 0x10_0000,
                size: 0x1ff0_0000
            })
        );
    }

    #[test]
    fn version_reply_is_nul_terminated_json() {
        let p = version_payload(1 << 20);
        assert_eq!(&p[..4], &[0, 0, 0, 0]);
        assert_eq!(p.last(), Some(&0));
        let text = std::str::from_utf8(&p[4..p.len() - 1]).unwrap();
        assert!(text.starts_with("{\"capabilities\":{\"max_msg_fds\":1,"));
        assert!(text.ends_with("}}"));
        let r = decode(&header(cmd::VERSION, p.len()), &p).unwrap();
        assert!(matches!(
            r,
            Request::Version {
                major: 0,
                minor: 0,
                ..
            }
        ));
    }

    #[test]
    fn replies_echo_the_message_id() {
        let req = header(cmd::REGION_READ, 16);
        let m = reply(&req, &region_access_payload(0, 4, 4, &[1, 2, 3, 4]));
        let h = Header::decode(m[..16].try_into().unwrap());
        assert_eq!((h.msg_id, h.command, h.size), (7, cmd::REGION_READ, 36));
        assert_eq!(h.flags, flags::TYPE_REPLY);
        let e = Header::decode(error_reply(&req, libc::EINVAL)[..16].try_into().unwrap());
        assert_eq!(e.flags, flags::TYPE_REPLY | flags::ERROR);
        assert_eq!(e.error, libc::EINVAL as u32);
    }

    #[test]
    fn unknown_commands_are_reported() {
        assert_eq!(decode(&header(11, 0), &[]), Err(WireError::Unsupported(11)));
    }
}
