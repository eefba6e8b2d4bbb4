// SPDX-License-Identifier: GPL-2.0

//! rmlx5: an mlx5-style RDMA driver written in Rust.
//!
//! The crate root only declares the module and its parts; see
//! `Documentation/architecture.md` for how they fit together.

use kernel::prelude::*;

mod device;
mod prm_tests;
pub mod ulp;
mod uverbs;

/// The mlx5 queue formats (`rust/mlx5-prm`), compiled from the same source
/// files as the user-space crate. The module list mirrors
/// `rust/mlx5-prm/src/modules.txt`; every module is `pub` so that items the
/// driver does not use yet are not reported as dead code.
#[path = "../../rust/mlx5-prm/src"]
pub mod mlx5_prm {
    pub mod bytes;
    pub mod cqe;
    pub mod doorbell;
    pub mod eqe;
    pub mod error;
    pub mod opcode;
    pub mod recv;
    pub mod ring;
    pub mod sq;
    pub mod wqe;
}

module! {
    type: Rmlx5Module,
    name: "rmlx5",
    authors: ["rmlx5 developers"],
    description: "mlx5-style RDMA driver with a software HCA",
    license: "GPL",
    params: {
        num_hcas: u32 {
            default: 2,
            description: "Number of software HCA instances (rmlx5_0 ...), 1 to 8",
        },
    },
}

/// The loaded module: owns every HCA instance.
struct Rmlx5Module {
    _hcas: device::HcaSet,
}

impl kernel::Module for Rmlx5Module {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let count = device::check_num_hcas(module_parameters::num_hcas.value())?;
        let hcas = device::HcaSet::new(count)?;
        pr_info!("registered {} software HCA(s)\n", count);
        Ok(Self { _hcas: hcas })
    }
}
