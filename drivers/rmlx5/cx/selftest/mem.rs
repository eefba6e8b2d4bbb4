// SPDX-License-Identifier: GPL-2.0

//! The self-test's memory: coherent buffers shared with the device.

use kernel::{
    dma::Coherent,
    prelude::*, //
};

use super::{
    DATA_PAGES,
    LOG_CQ_SIZE,
    LOG_EQ_SIZE,
    PAGE,
    SEND_LEN,
    SEND_SRC,
    WRITE_LEN,
    WRITE_SRC, //
};
use crate::cx::bus::CxBus;
use crate::mlx5_prm::{
    cqe::{
        CQE_SIZE,
        OP_OWN_OFFSET, //
    },
    eqe::{
        EQE_SIZE,
        OWNER_OFFSET, //
    },
    ring,
};

/// Coherent memory shared with the device, accessed only with
/// bounds-checked volatile copies (the device reads and writes it
/// concurrently).
pub(super) struct Buf(Coherent<[u8]>);

impl Buf {
    /// `len` zeroed bytes of coherent memory of the function.
    pub(super) fn new(bus: &CxBus<'_>, len: usize) -> Result<Self> {
        Ok(Self(bus.alloc_coherent(len)?))
    }

    /// The bus address.
    pub(super) fn addr(&self) -> u64 {
        self.0.dma_address()
    }

    /// Checks that `[off, off + len)` lies inside the buffer.
    pub(super) fn check(&self, off: usize, len: usize) -> Result {
        match off.checked_add(len) {
            Some(end) if end <= self.0.size() => Ok(()),
            _ => Err(EINVAL),
        }
    }

    /// Copies `bytes` to offset `off`.
    pub(super) fn write(&self, off: usize, bytes: &[u8]) -> Result {
        self.check(off, bytes.len())?;
        let base = self.0.as_mut_ptr().cast::<u8>();
        for (i, b) in bytes.iter().enumerate() {
            // SAFETY: `off + i < off + bytes.len() <= size` (checked
            // above), inside the live allocation; volatile because the
            // device may read it at any time.
            unsafe { base.add(off + i).write_volatile(*b) };
        }
        Ok(())
    }

    /// Stores the 4 bytes `word` at the 4-byte aligned offset `off` with
    /// one 32-bit store (doorbell record words, which the device must
    /// never read half-updated).
    pub(super) fn write_word(&self, off: usize, word: [u8; 4]) -> Result {
        self.check(off, 4)?;
        if off % 4 != 0 {
            return Err(EINVAL);
        }
        let base = self.0.as_mut_ptr().cast::<u8>();
        // SAFETY: Inside the allocation (checked above); the allocation is
        // page-aligned and `off` a multiple of 4, so the `u32` is aligned.
        unsafe {
            base.add(off)
                .cast::<u32>()
                .write_volatile(u32::from_ne_bytes(word))
        };
        Ok(())
    }

    /// Copies the bytes at offset `off` into `out`.
    pub(super) fn read(&self, off: usize, out: &mut [u8]) -> Result {
        self.check(off, out.len())?;
        let base = self.0.as_ptr().cast::<u8>();
        for (i, b) in out.iter_mut().enumerate() {
            // SAFETY: As in `write`: inside the live allocation; the device
            // writes it concurrently, hence volatile.
            *b = unsafe { base.add(off + i).read_volatile() };
        }
        Ok(())
    }

    /// The byte at offset `off`.
    pub(super) fn byte(&self, off: usize) -> Result<u8> {
        let mut b = [0u8; 1];
        self.read(off, &mut b)?;
        Ok(b[0])
    }
}

/// The memory of the self-test.
pub(super) struct Mem {
    pub(super) eq: Buf,
    pub(super) cq: Buf,
    /// The doorbell records of the CQ and the QPs.
    pub(super) dbr: Buf,
    /// The QPs' buffers: RQ, then SQ.
    pub(super) qp: [Buf; 2],
    pub(super) data: Buf,
}

/// The byte of the test pattern at offset `i` of a source buffer `seed`.
pub(super) fn pattern(seed: u8, i: usize) -> u8 {
    (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8
}

impl Mem {
    /// Allocates everything, with the EQEs' owner bytes and the CQEs'
    /// `op_own` initialised as mlx5 does, and the source patterns written.
    pub(super) fn new(bus: &CxBus<'_>) -> Result<Self> {
        let m = Self {
            eq: Buf::new(bus, PAGE)?,
            cq: Buf::new(bus, PAGE)?,
            dbr: Buf::new(bus, PAGE)?,
            qp: [Buf::new(bus, PAGE)?, Buf::new(bus, PAGE)?],
            data: Buf::new(bus, DATA_PAGES * PAGE)?,
        };
        for i in 0..1usize << LOG_EQ_SIZE {
            m.eq.write(i * EQE_SIZE + OWNER_OFFSET, &[ring::EQE_INIT_OWNER])?;
        }
        for i in 0..1usize << LOG_CQ_SIZE {
            m.cq.write(i * CQE_SIZE + OP_OWN_OFFSET, &[ring::CQE_INIT_OP_OWN])?;
        }
        for i in 0..SEND_LEN {
            m.data.write(SEND_SRC + i, &[pattern(0x5a, i)])?;
        }
        for i in 0..WRITE_LEN {
            m.data.write(WRITE_SRC + i, &[pattern(0xc3, i)])?;
        }
        Ok(m)
    }
}
