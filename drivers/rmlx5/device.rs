// SPDX-License-Identifier: GPL-2.0

//! Software HCA instances: creation, naming and the user-space device node.
//!
//! Each HCA `rmlx5_<n>` owns a misc device `/dev/rmlx5_uverbs<n>` through
//! which user processes reach it. The set of HCAs lives as long as the
//! module; open files pin the module (the misc file operations carry
//! `THIS_MODULE` as owner), so an HCA always outlives the files opened on it.

use core::sync::atomic::{
    AtomicU32,
    Ordering, //
};
use kernel::{
    container_of,
    miscdevice::{
        MiscDeviceOptions,
        MiscDeviceRegistration, //
    },
    prelude::*,
};

use crate::mlx5_core::eq::{
    ring_eq_doorbell,
    EqIrq, //
};
use crate::uverbs::Ucontext;
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

/// Names of the user-space device nodes, one per possible HCA. The misc
/// device core keeps a pointer to the name, so they must be `'static`.
const UVERBS_NAMES: [&CStr; MAX_HCAS] = [
    c"rmlx5_uverbs0",
    c"rmlx5_uverbs1",
    c"rmlx5_uverbs2",
    c"rmlx5_uverbs3",
    c"rmlx5_uverbs4",
    c"rmlx5_uverbs5",
    c"rmlx5_uverbs6",
    c"rmlx5_uverbs7",
];

/// Number of HCAs currently registered, read by the ULP API.
static NUM_REGISTERED: AtomicU32 = AtomicU32::new(0);

/// Returns the number of registered HCAs.
pub(crate) fn num_registered() -> u32 {
    NUM_REGISTERED.load(Ordering::Acquire)
}

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

/// One software HCA instance.
#[pin_data]
pub(crate) struct Hca {
    /// Instance number `n` of `rmlx5_<n>`.
    index: u32,
    /// `/dev/rmlx5_uverbs<n>`. Every `MiscDeviceRegistration<Ucontext>` in
    /// the module is this field of a pinned `Hca` (see [`Hca::from_uverbs`]).
    #[pin]
    uverbs: MiscDeviceRegistration<Ucontext>,
}

impl Hca {
    fn new(index: usize) -> Result<Pin<KBox<Self>>> {
        let name = UVERBS_NAMES.get(index).ok_or(EINVAL)?;
        let index = u32::try_from(index)?;
        KBox::try_pin_init(
            // Fields are initialised in the order written: `index` is set
            // before the device node appears, so a racing open() sees it.
            try_pin_init!(Self {
                index,
                uverbs <- MiscDeviceRegistration::register(MiscDeviceOptions { name }),
            }),
            GFP_KERNEL,
        )
    }

    /// Instance number `n` of `rmlx5_<n>`.
    pub(crate) fn index(&self) -> u32 {
        self.index
    }

    /// Finds the HCA that owns a user-space device node.
    pub(crate) fn from_uverbs(misc: &MiscDeviceRegistration<Ucontext>) -> &Hca {
        let field = core::ptr::from_ref(misc).cast_mut();
        // SAFETY: `Ucontext` registrations are created only by `Hca::new`,
        // as the `uverbs` field of a pinned `Hca`, so `field` points into an
        // `Hca` allocation and stepping back to its start stays inside it.
        let hca = unsafe { container_of!(field, Hca, uverbs) };
        // SAFETY: `hca` points at a live, pinned `Hca`: it is alive at least
        // as long as its `uverbs` field, which `misc` borrows, and we hand
        // out only a shared reference with the same lifetime.
        unsafe { &*hca }
    }
}

/// All HCA instances of the module, torn down in creation order on unload.
pub(crate) struct HcaSet {
    hcas: KVec<Pin<KBox<Hca>>>,
}

impl HcaSet {
    /// Creates and registers `count` HCAs.
    pub(crate) fn new(count: usize) -> Result<Self> {
        let mut hcas = KVec::with_capacity(count, GFP_KERNEL)?;
        for index in 0..count {
            hcas.push(Hca::new(index)?, GFP_KERNEL)?;
        }
        NUM_REGISTERED.store(u32::try_from(count)?, Ordering::Release);
        Ok(Self { hcas })
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
            let soft = crate::soft()?;
            // The platform device of HCA n carries its EQ interrupts; the
            // first one names the HCA.
            let first = pdev.irq_by_index(0)?;
            let hca = crate::hca::irq::hca_of_irq(first.irq())?;
            let dev = soft.dev(hca)?;
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
                let handler_soft = soft.clone();
                let handler = try_pin_init!(EqIrq {
                    soft: handler_soft,
                    hca,
                    vector: v,
                }? Error);
                // SAFETY: The registration is kept in the driver data and
                // dropped at unbind; it is never leaked.
                let reg = unsafe { Registration::new(request, Flags::TRIGGER_NONE, name, handler) };
                irqs.push(KBox::pin_init(reg, GFP_KERNEL)?, GFP_KERNEL)?;
                // Handler in place: arm the EQ.
                let mut st = soft.state.lock();
                ring_eq_doorbell(&soft, &mut st, eq, 0)?;
            }
            pr_info!("rmlx5_{}: {} EQ interrupts registered\n", hca, irqs.len());
            Ok(EqIrqs { irqs })
        })();
        r
    }
}

impl Drop for HcaSet {
    fn drop(&mut self) {
        NUM_REGISTERED.store(0, Ordering::Release);
        self.hcas.clear();
    }
}

#[kunit_tests(rmlx5_device)]
mod tests {
    use super::*;
    use kernel::str::CString;

    #[test]
    fn num_hcas_bounds() -> Result {
        assert_eq!(check_num_hcas(0), Err(EINVAL));
        assert_eq!(check_num_hcas(1)?, 1);
        assert_eq!(check_num_hcas(MAX_HCAS as u32)?, MAX_HCAS);
        assert_eq!(check_num_hcas(MAX_HCAS as u32 + 1), Err(EINVAL));
        assert_eq!(check_num_hcas(u32::MAX), Err(EINVAL));
        Ok(())
    }

    #[test]
    fn uverbs_names_follow_index() -> Result {
        for (i, name) in UVERBS_NAMES.iter().enumerate() {
            let want = CString::try_from_fmt(fmt!("rmlx5_uverbs{}", i))?;
            assert_eq!(name.to_bytes(), want.to_bytes());
        }
        Ok(())
    }
}
