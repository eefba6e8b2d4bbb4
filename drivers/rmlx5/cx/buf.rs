// SPDX-License-Identifier: GPL-2.0

//! Coherent memory a function shares with its device (command queue and
//! mailboxes, EQ rings, the queues of its verbs objects, the self-test's
//! queues), reached only through bounds-checked volatile copies; as a
//! [`crate::mem::DmaBacking`] it is the memory of a `DmaBuf`.

use kernel::{
    device::Bound,
    dma::Coherent,
    pci,
    prelude::*, //
};

/// Coherent memory shared with the device, accessed only with
/// bounds-checked volatile copies (the device reads and writes it
/// concurrently).
pub(crate) struct Buf(Coherent<[u8]>);

impl Buf {
    /// `len` zeroed bytes of coherent memory of `pdev`.
    pub(crate) fn new(pdev: &pci::Device<Bound>, len: usize) -> Result<Self> {
        Ok(Self(Coherent::<u8>::zeroed_slice(
            pdev.as_ref(),
            len,
            GFP_KERNEL,
        )?))
    }

    /// The bus address.
    pub(crate) fn addr(&self) -> u64 {
        self.0.dma_address()
    }

    /// Checks that `[off, off + len)` lies inside the buffer.
    pub(crate) fn check(&self, off: usize, len: usize) -> Result {
        match off.checked_add(len) {
            Some(end) if end <= self.0.size() => Ok(()),
            _ => Err(EINVAL),
        }
    }

    /// Copies `bytes` to offset `off`.
    pub(crate) fn write(&self, off: usize, bytes: &[u8]) -> Result {
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
    pub(crate) fn write_word(&self, off: usize, word: [u8; 4]) -> Result {
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
    pub(crate) fn read(&self, off: usize, out: &mut [u8]) -> Result {
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
    pub(crate) fn byte(&self, off: usize) -> Result<u8> {
        let mut b = [0u8; 1];
        self.read(off, &mut b)?;
        Ok(b[0])
    }
}

// SAFETY: The coherent allocation is `size()` bytes at a fixed, page-aligned
// kernel address for as long as the `Buf` lives, and `Buf` hands out no
// reference into it (only volatile copies, here and through `DmaBuf`).
unsafe impl crate::mem::DmaBacking for Buf {
    fn kaddr(&self) -> u64 {
        self.0.as_ptr().cast::<u8>() as u64
    }

    fn len(&self) -> usize {
        self.0.size()
    }

    fn dma_addr(&self) -> u64 {
        self.0.dma_address()
    }
}
