// SPDX-License-Identifier: GPL-2.0

//! The software HCA's instances as devices: the `num_hcas` parameter and
//! the platform driver that binds each instance's EQ interrupts (from the
//! shim's irq domain, `hca/irq.rs`) to the core's EQ handler.

use kernel::prelude::*;

use crate::mlx5_core::eq::EqIrq;
use kernel::{
    device::Core,
    irq::{
        Flags,
        Registration, //
    },
    platform,
};

/// Upper bound of the `num_hcas` module parameter.
pub(crate) const MAX_HCAS: usize = 8;

/// Validates the `num_hcas` module parameter.
///
/// # Errors
///
/// `EINVAL` if `n` is zero or larger than [`MAX_HCAS`].
pub(crate) fn check_num_hcas(n: u32) -> Result<usize> {
    match usize::try_from(n) {
        Ok(n) if (1..=MAX_HCAS).contains(&n) => Ok(n),
        _ => {
            pr_err!("num_hcas={} is out of range 1..={}\n", n, MAX_HCAS);
            Err(EINVAL)
        }
    }
}

/// Interrupt names, `rmlx5_async@rmlx5_<n>` and `rmlx5_comp<k>@rmlx5_<n>`:
/// `request_irq` keeps the pointer, so they are static.
macro_rules! irq_names {
    ($($h:literal),*) => {
        [$([
            kernel::c_str!(concat!("rmlx5_async@rmlx5_", $h)),
            kernel::c_str!(concat!("rmlx5_comp0@rmlx5_", $h)),
            kernel::c_str!(concat!("rmlx5_comp1@rmlx5_", $h)),
            kernel::c_str!(concat!("rmlx5_comp2@rmlx5_", $h)),
            kernel::c_str!(concat!("rmlx5_comp3@rmlx5_", $h)),
            kernel::c_str!(concat!("rmlx5_comp4@rmlx5_", $h)),
            kernel::c_str!(concat!("rmlx5_comp5@rmlx5_", $h)),
            kernel::c_str!(concat!("rmlx5_comp6@rmlx5_", $h)),
            kernel::c_str!(concat!("rmlx5_comp7@rmlx5_", $h)),
        ]),*]
    };
}

const IRQ_NAMES: [[&CStr; crate::hca::MAX_COMP_EQS + 1]; MAX_HCAS] =
    irq_names!("0", "1", "2", "3", "4", "5", "6", "7");

/// The platform driver binding the EQ interrupts of each HCA.
pub(crate) struct EqDriver;

/// What the platform driver keeps per bound HCA: the EQ interrupt
/// registrations (freed, with `free_irq` waiting for running handlers,
/// when the device unbinds).
#[pin_data]
pub(crate) struct EqIrqs<'bound> {
    irqs: KVec<Pin<KBox<Registration<'bound, EqIrq>>>>,
}

impl platform::Driver for EqDriver {
    type IdInfo = ();
    type Data<'bound> = EqIrqs<'bound>;

    fn probe<'bound>(
        pdev: &'bound platform::Device<Core<'_>>,
        _id_info: Option<&'bound Self::IdInfo>,
    ) -> impl PinInit<Self::Data<'bound>, Error> + 'bound {
        let r = (|| -> Result<EqIrqs<'bound>> {
            // The platform device of HCA n carries its EQ interrupts; the
            // first one names the HCA.
            let first = pdev.irq_by_index(0)?;
            let hca = crate::hca::irq::hca_of_irq(first.irq())?;
            let dev = crate::mlx5_core::device::get(hca)?;
            let names = IRQ_NAMES.get(hca).ok_or(ENODEV)?;
            let mut irqs = KVec::with_capacity(dev.eqs.len(), GFP_KERNEL)?;
            for (v, eq) in dev.eqs.iter().enumerate() {
                let request = pdev.irq_by_index(u32::try_from(v)?)?;
                eq.irq
                    .store(request.irq(), core::sync::atomic::Ordering::Relaxed);
                pr_debug!(
                    "rmlx5_{}: eqn {} vector {} irq {}\n",
                    hca,
                    eq.eqn,
                    eq.vector,
                    request.irq()
                );
                let name = names.get(v).ok_or(EINVAL)?;
                let handler = Ok::<_, Error>(EqIrq {
                    dev: dev.clone(),
                    vector: v,
                });
                // SAFETY: The registration is kept in the driver data and
                // dropped at unbind; it is never leaked.
                let reg = unsafe { Registration::new(request, Flags::TRIGGER_NONE, name, handler) };
                irqs.push(KBox::pin_init(reg, GFP_KERNEL)?, GFP_KERNEL)?;
                // Handler in place: arm the EQ.
                dev.arm_eq(v)?;
            }
            pr_info!("rmlx5_{}: {} EQ interrupts registered\n", hca, irqs.len());
            Ok(EqIrqs { irqs })
        })();
        r
    }
}

#[kunit_tests(rmlx5_device)]
mod tests {
    use super::*;

    #[test]
    fn num_hcas_bounds() -> Result {
        assert_eq!(check_num_hcas(0), Err(EINVAL));
        assert_eq!(check_num_hcas(1)?, 1);
        assert_eq!(check_num_hcas(MAX_HCAS as u32)?, MAX_HCAS);
        assert_eq!(check_num_hcas(MAX_HCAS as u32 + 1), Err(EINVAL));
        assert_eq!(check_num_hcas(u32::MAX), Err(EINVAL));
        Ok(())
    }
}
