// SPDX-License-Identifier: GPL-2.0

//! rmlx5: the user-space provider of the rmlx5 RDMA stack.
//!
//! A verbs-style API (devices, contexts, PDs, MRs, completion channels,
//! CQs, RC QPs) whose data path runs entirely in the process, exactly as
//! mlx5 hardware expects it: send WQEs are built in the mmapped SQ (with
//! wrap-around) from the `mlx5-prm` encoders, published with a DMA write
//! barrier, the SQ doorbell record and a 64-bit store to the UAR BlueFlame
//! register (or a BlueFlame copy of a single small WQE, alternating
//! halves); on the software HCA one kick ioctl follows. CQs are polled by
//! owner bit with a read barrier before the body, the consumer index is
//! published through SET_CI, and arming writes the ARM word with its
//! sequence number and rings the UAR CQ doorbell.
//!
//! Two backends sit below the same fast path: the kernel
//! (`/dev/rmlx5_uverbsN`, see [`devices`]) and an in-process software HCA
//! ([`SoftFabric`]) built on `rust/hca-model`, for host tests and `--model`
//! runs of the tools. With the `bench-backend` feature (off by default) a
//! third, `bench::NullHca`, has nothing behind its doorbells, for
//! measuring the provider alone.
//!
//! # Example
//!
//! ```
//! use rmlx5::{Access, QpInit, SoftFabric};
//! let fabric = SoftFabric::new(2).unwrap();
//! let devs = fabric.devices();
//! let ctx = devs[0].open().unwrap();
//! let pd = ctx.alloc_pd().unwrap();
//! let mr = pd.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
//! let cq = ctx.create_cq(64, None).unwrap();
//! let qp = pd.create_qp(&cq, &cq, &QpInit::default()).unwrap();
//! assert!(qp.qpn() != 0 && mr.lkey() != 0);
//! ```

mod backend;
#[cfg(feature = "bench-backend")]
pub mod bench;
mod channel;
mod context;
mod cq;
mod device;
mod dma;
mod error;
mod mr;
mod pd;
mod qp;
mod wc;
mod wr;

pub use backend::model::SoftFabric;
pub use channel::CompChannel;
pub use context::{AsyncEvent, Context, DeviceAttr, PortAttr};
pub use cq::{Cq, CqDestroyError, DEFAULT_DESTROY_WAIT};
pub use device::{devices, Device};
pub use error::{Error, PostError, Result};
pub use mr::{Access, Mr};
pub use pd::Pd;
pub use qp::{ConnectOpts, Endpoint, Qp, QpInfo, QpInit, QpState};
pub use wc::{Wc, WcFlags, WcOpcode, WcStatus};
pub use wr::{RecvWr, RemoteAddr, SendFlags, SendOp, SendWr, Sge};
