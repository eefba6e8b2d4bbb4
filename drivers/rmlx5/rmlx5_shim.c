// SPDX-License-Identifier: GPL-2.0
/*
 * The C side of rmlx5.ko: only what the Rust kernel crate does not offer.
 *
 * - EXPORT_SYMBOL_GPL for the ULP API (Rust cannot emit export entries).
 * - The software HCA's interrupt controller: a linear irq domain with one
 *   hwirq per EQ of every HCA, a trivial irq_chip and handle_edge_irq,
 *   and one irq_work per hwirq whose (hard-IRQ) callback calls
 *   generic_handle_irq(). The model "raises MSI-X vector v" by queueing the
 *   irq_work; the kernel then runs the handler registered with
 *   request_irq() in hard-IRQ context, exactly as for a device interrupt,
 *   and /proc/interrupts counts it. A caller in process context that
 *   raised interrupts under the fabric lock may deliver them itself once
 *   the lock is released (rmlx5_shim_handle_irq_now), which spares the
 *   self-IPI of the irq_work.
 * - One platform device "rmlx5" per HCA whose IORESOURCE_IRQ resources are
 *   those interrupts; the Rust platform driver binds to it by name.
 * - Streaming DMA mappings (dma_map_single), which the 7.3 Rust DMA
 *   abstraction lacks, for kernel MRs on a PCI function.
 *
 * No logic lives in this file.
 */
#include <linux/cpumask.h>
#include <linux/dma-mapping.h>
#include <linux/export.h>
#include <linux/interrupt.h>
#include <linux/irq.h>
#include <linux/irq_work.h>
#include <linux/irqdomain.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/sched/isolation.h>
#include <linux/platform_device.h>
#include <linux/slab.h>
#include <linux/workqueue.h>
#include <rdma/rmlx5_ib.h>

#include "rmlx5_shim.h"

EXPORT_SYMBOL_GPL(rmlx5_ib_num_devices);
EXPORT_SYMBOL_GPL(rmlx5_ib_get_device);
EXPORT_SYMBOL_GPL(rmlx5_ib_query_device);
EXPORT_SYMBOL_GPL(rmlx5_ib_alloc_pd);
EXPORT_SYMBOL_GPL(rmlx5_ib_dealloc_pd);
EXPORT_SYMBOL_GPL(rmlx5_ib_reg_mr);
EXPORT_SYMBOL_GPL(rmlx5_ib_dereg_mr);
EXPORT_SYMBOL_GPL(rmlx5_ib_create_cq);
EXPORT_SYMBOL_GPL(rmlx5_ib_destroy_cq);
EXPORT_SYMBOL_GPL(rmlx5_ib_poll_cq);
EXPORT_SYMBOL_GPL(rmlx5_ib_req_notify_cq);
EXPORT_SYMBOL_GPL(rmlx5_ib_create_qp);
EXPORT_SYMBOL_GPL(rmlx5_ib_destroy_qp);
EXPORT_SYMBOL_GPL(rmlx5_ib_qp_num);
EXPORT_SYMBOL_GPL(rmlx5_ib_modify_qp);
EXPORT_SYMBOL_GPL(rmlx5_ib_post_send);
EXPORT_SYMBOL_GPL(rmlx5_ib_encode_av);
EXPORT_SYMBOL_GPL(rmlx5_ib_post_recv);
EXPORT_SYMBOL_GPL(rmlx5_ib_set_event_handler);
EXPORT_SYMBOL_GPL(rmlx5_ib_get_dma_mr);
EXPORT_SYMBOL_GPL(rmlx5_ib_cq_num);
EXPORT_SYMBOL_GPL(rmlx5_ib_query_qp_state);
EXPORT_SYMBOL_GPL(rmlx5_ib_alloc_mr);
EXPORT_SYMBOL_GPL(rmlx5_ib_mr_set_page);
EXPORT_SYMBOL_GPL(rmlx5_ib_mr_set_mapping);

/* The interrupt controller of all software HCAs. */
struct rmlx5_intc {
	struct fwnode_handle *fwnode;
	struct irq_domain *domain;
	unsigned int nr_irqs;
	unsigned int *virqs;
	struct irq_work *works;
	struct platform_device **pdevs;
	unsigned int nr_hcas;
	unsigned int irqs_per_hca;
};

static struct rmlx5_intc intc;

/* Edge interrupts with no hardware to ack or mask: nothing to do. */
static void rmlx5_irq_noop(struct irq_data *d)
{
}

static struct irq_chip rmlx5_irq_chip = {
	.name = "rmlx5",
	.irq_ack = rmlx5_irq_noop,
	.irq_mask = rmlx5_irq_noop,
	.irq_unmask = rmlx5_irq_noop,
};

static int rmlx5_irq_map(struct irq_domain *d, unsigned int virq,
			 irq_hw_number_t hw)
{
	/*
	 * Edge, as MSI-X is: the model may raise an EQ's interrupt from an
	 * irq_work on one CPU while its handler still runs on another (after
	 * the re-arm doorbell, before it returns). handle_simple_irq drops
	 * such an interrupt, and the EQ, armed no more, stalls for good;
	 * handle_edge_irq marks it pending and the running handler goes round
	 * once more.
	 */
	irq_set_chip_and_handler(virq, &rmlx5_irq_chip, handle_edge_irq);
	irq_modify_status(virq, IRQ_NOREQUEST | IRQ_NOPROBE, IRQ_NOPROBE);
	return 0;
}

static const struct irq_domain_ops rmlx5_irq_ops = {
	.map = rmlx5_irq_map,
};

/* Hard-IRQ context (IRQ_WORK_INIT_HARD): deliver the interrupt. */
static void rmlx5_irq_work_fn(struct irq_work *work)
{
	unsigned int hw = work - intc.works;

	if (hw < intc.nr_irqs)
		generic_handle_irq(intc.virqs[hw]);
}

void rmlx5_shim_raise_irq(unsigned int hwirq)
{
	if (hwirq < intc.nr_irqs)
		irq_work_queue(&intc.works[hwirq]);
}

/*
 * Direct delivery (SoftHca::locked_direct): the caller turns bottom halves
 * off while it still holds the fabric lock, with interrupts off, so that
 * from the unlock on it can be neither preempted nor migrated until the
 * interrupts it raised are delivered (the EQ they fired stays disarmed
 * until its handler runs); it then calls rmlx5_shim_handle_irq_now for
 * each and turns bottom halves on again, once interrupts are on. The
 * softirq the handlers queue (the BH dispatch of kernel CQs) runs at that
 * local_bh_enable(), on this CPU, as it would at the end of a hard
 * interrupt, not later in ksoftirqd.
 */
void rmlx5_shim_bh_disable(void)
{
	local_bh_disable();
}

void rmlx5_shim_bh_enable(void)
{
	local_bh_enable();
}

/* Bottom halves off: runs interrupt hwirq's flow handler now, with
 * interrupts off around it, as its irq_work would in hard-IRQ context. */
void rmlx5_shim_handle_irq_now(unsigned int hwirq)
{
	if (hwirq >= intc.nr_irqs)
		return;
	WARN_ON_ONCE(generic_handle_irq_safe(intc.virqs[hwirq]));
}

struct device *rmlx5_shim_hca_device(unsigned int hca)
{
	if (!intc.pdevs || hca >= intc.nr_hcas || !intc.pdevs[hca])
		return NULL;
	return &intc.pdevs[hca]->dev;
}

void rmlx5_shim_direct_map(u64 *start, u64 *len)
{
	*start = PAGE_OFFSET;
	*len = (unsigned long)high_memory - PAGE_OFFSET;
}

int rmlx5_shim_hca_of_irq(unsigned int virq)
{
	unsigned int i;

	for (i = 0; i < intc.nr_irqs; i++)
		if (intc.virqs[i] == virq)
			return i / intc.irqs_per_hca;
	return -ENODEV;
}

static void rmlx5_shim_free(void)
{
	unsigned int i;

	if (intc.pdevs) {
		for (i = 0; i < intc.nr_hcas; i++)
			if (intc.pdevs[i])
				platform_device_unregister(intc.pdevs[i]);
	}
	if (intc.works) {
		for (i = 0; i < intc.nr_irqs; i++)
			irq_work_sync(&intc.works[i]);
	}
	if (intc.virqs) {
		for (i = 0; i < intc.nr_irqs; i++)
			if (intc.virqs[i])
				irq_dispose_mapping(intc.virqs[i]);
	}
	if (intc.domain)
		irq_domain_remove(intc.domain);
	if (intc.fwnode)
		irq_domain_free_fwnode(intc.fwnode);
	kfree(intc.pdevs);
	kfree(intc.works);
	kfree(intc.virqs);
	memset(&intc, 0, sizeof(intc));
}

int rmlx5_shim_create(unsigned int nr_hcas, unsigned int irqs_per_hca)
{
	struct resource *res;
	unsigned int h, i;
	int err = -ENOMEM;

	if (!nr_hcas || !irqs_per_hca || nr_hcas > 64 || irqs_per_hca > 64)
		return -EINVAL;
	intc.nr_hcas = nr_hcas;
	intc.irqs_per_hca = irqs_per_hca;
	intc.nr_irqs = nr_hcas * irqs_per_hca;
	intc.virqs = kcalloc(intc.nr_irqs, sizeof(*intc.virqs), GFP_KERNEL);
	intc.works = kcalloc(intc.nr_irqs, sizeof(*intc.works), GFP_KERNEL);
	intc.pdevs = kcalloc(nr_hcas, sizeof(*intc.pdevs), GFP_KERNEL);
	res = kcalloc(irqs_per_hca, sizeof(*res), GFP_KERNEL);
	if (!intc.virqs || !intc.works || !intc.pdevs || !res)
		goto fail;
	for (i = 0; i < intc.nr_irqs; i++)
		intc.works[i] = IRQ_WORK_INIT_HARD(rmlx5_irq_work_fn);

	intc.fwnode = irq_domain_alloc_named_fwnode("rmlx5");
	if (!intc.fwnode)
		goto fail;
	intc.domain = irq_domain_create_linear(intc.fwnode, intc.nr_irqs,
					       &rmlx5_irq_ops, NULL);
	if (!intc.domain)
		goto fail;
	for (i = 0; i < intc.nr_irqs; i++) {
		intc.virqs[i] = irq_create_mapping(intc.domain, i);
		if (!intc.virqs[i])
			goto fail;
	}

	for (h = 0; h < nr_hcas; h++) {
		struct platform_device_info info = {
			.name = "rmlx5",
			.id = h,
			.res = res,
			.num_res = irqs_per_hca,
		};
		struct platform_device *pdev;

		for (i = 0; i < irqs_per_hca; i++) {
			unsigned int virq = intc.virqs[h * irqs_per_hca + i];

			res[i] = (struct resource)DEFINE_RES_IRQ(virq);
		}
		pdev = platform_device_register_full(&info);
		if (IS_ERR(pdev)) {
			err = PTR_ERR(pdev);
			goto fail;
		}
		intc.pdevs[h] = pdev;
	}
	kfree(res);
	return 0;

fail:
	kfree(res);
	rmlx5_shim_free();
	return err;
}

void rmlx5_shim_destroy(void)
{
	rmlx5_shim_free();
}

void rmlx5_shim_flush_work(struct work_struct *work)
{
	flush_work(work);
}

/*
 * The next online housekeeping CPU after @cpu (never an isolated one), or
 * @cpu itself when there is no other. The caller's CPU is only a hint (it
 * may migrate right after); which CPUs are idle the kernel does not tell
 * modules.
 */
static int rmlx5_shim_next_cpu(int cpu)
{
	unsigned int next = cpumask_next_and_wrap(cpu, cpu_online_mask,
						  housekeeping_cpumask(HK_TYPE_DOMAIN));

	return next < nr_cpu_ids ? next : cpu;
}

/*
 * Queues @work on the next online housekeeping CPU after the caller's, on
 * system_long_wq (per-CPU, for work items that run long); with no other
 * such CPU, on system_dfl_wq. For a polling work (the doorbell watcher)
 * that must not land on the CPU of the process that asked for it, which
 * goes on posting there. Returns what queue_work_on() returns.
 */
bool rmlx5_shim_queue_work_elsewhere(struct work_struct *work)
{
	int here = raw_smp_processor_id();
	int cpu = rmlx5_shim_next_cpu(here);

	if (cpu == here)
		return queue_work(system_dfl_wq, work);
	return queue_work_on(cpu, system_long_wq, work);
}

/*
 * Queues @work on system_long_wq (per-CPU, for work items that run long):
 * on the caller's CPU if @here, else on the next online housekeeping CPU
 * after it, or the caller's when there is no other. Always the one
 * workqueue, so that a work item queued both ways is never run twice at
 * once (the workqueue's non-reentrancy holds only within one workqueue).
 * For the UAR trap's poller (hca/trap.rs). Returns what queue_work_on()
 * returns.
 */
bool rmlx5_shim_queue_long(struct work_struct *work, bool here)
{
	int cpu = raw_smp_processor_id();

	return queue_work_on(here ? cpu : rmlx5_shim_next_cpu(cpu),
			     system_long_wq, work);
}

/* cond_resched() is a macro (a static call on PREEMPT_DYNAMIC kernels). */
void rmlx5_shim_cond_resched(void)
{
	cond_resched();
}

/*
 * Whether the caller may sleep, and so free memory whose release may
 * sleep (coherent DMA memory, an IOMMU unmap). Without a preemption count
 * (kernels without CONFIG_PREEMPTION) a spinlock section cannot be told
 * from process context, and the answer is always no.
 */
bool rmlx5_may_sleep(void)
{
	return preemptible();
}

/*
 * Whether a PCI function's driver_override is set. The PCI core binds a
 * function whose override names another driver to that driver only, so
 * in rmlx5_cx's probe a set override names rmlx5_cx.
 */
bool rmlx5_pci_has_driver_override(struct device *dev)
{
	return device_has_driver_override(dev);
}

/* Undoes pci_enable_device_mem() and pci_set_master() on a PCI function. */
void rmlx5_pci_disable(struct device *dev)
{
	struct pci_dev *pdev = to_pci_dev(dev);

	pci_clear_master(pdev);
	pci_disable_device(pdev);
}

/* Stops a PCI function's DMA: its health check found it failed. */
void rmlx5_pci_clear_master(struct device *dev)
{
	pci_clear_master(to_pci_dev(dev));
}

/*
 * Whether reads of the function's memory BARs reach it: it is not
 * disconnected and its memory decode is on (a read that does not reach
 * it returns all ones, or zero on some hosts and emulators).
 */
bool rmlx5_pci_decodes(struct device *dev)
{
	struct pci_dev *pdev = to_pci_dev(dev);
	u16 cmd;

	if (pci_dev_is_disconnected(pdev))
		return false;
	if (pci_read_config_word(pdev, PCI_COMMAND, &cmd) ||
	    PCI_POSSIBLE_ERROR(cmd))
		return false;
	return cmd & PCI_COMMAND_MEMORY;
}

/*
 * A periodic callback on the system workqueue: the health poll of a
 * ConnectX function. rmlx5_poller_stop() waits for a running call and
 * prevents the next; the callback's memory is the caller's.
 *
 * The poller is also what the PCI core's error and reset callbacks of the
 * function reach (rmlx5_cx_err_handlers below): `event` is called with
 * `ctx` and an RMLX5_PCI_* code, under rmlx5_pollers_lock, which
 * rmlx5_poller_stop also takes, so the context is alive during the call.
 */
struct rmlx5_poller {
	struct delayed_work dw;
	void (*fn)(void *ctx);
	unsigned int (*event)(void *ctx, unsigned int what);
	void *ctx;
	struct device *dev;
	struct list_head list;
	unsigned long period;
	bool stopped;
	spinlock_t lock;
};

static DEFINE_MUTEX(rmlx5_pollers_lock);
static LIST_HEAD(rmlx5_pollers);

static void rmlx5_poller_fn(struct work_struct *work)
{
	struct rmlx5_poller *p = container_of(to_delayed_work(work),
					      struct rmlx5_poller, dw);

	p->fn(p->ctx);
	spin_lock(&p->lock);
	if (!p->stopped)
		queue_delayed_work(system_dfl_wq, &p->dw, p->period);
	spin_unlock(&p->lock);
}

/* Polls every `ms` (never if 0: then only the PCI callbacks reach it). */
struct rmlx5_poller *rmlx5_poller_start(void (*fn)(void *),
					unsigned int (*event)(void *, unsigned int),
					void *ctx, unsigned int ms,
					struct device *dev)
{
	struct rmlx5_poller *p = kzalloc(sizeof(*p), GFP_KERNEL);

	if (!p)
		return NULL;
	p->fn = fn;
	p->event = event;
	p->ctx = ctx;
	p->dev = dev;
	p->period = max(msecs_to_jiffies(ms), 1UL);
	spin_lock_init(&p->lock);
	INIT_DELAYED_WORK(&p->dw, rmlx5_poller_fn);
	mutex_lock(&rmlx5_pollers_lock);
	list_add(&p->list, &rmlx5_pollers);
	mutex_unlock(&rmlx5_pollers_lock);
	if (ms)
		queue_delayed_work(system_dfl_wq, &p->dw, p->period);
	return p;
}

void rmlx5_poller_stop(struct rmlx5_poller *p)
{
	mutex_lock(&rmlx5_pollers_lock);
	list_del(&p->list);
	mutex_unlock(&rmlx5_pollers_lock);
	spin_lock(&p->lock);
	p->stopped = true;
	spin_unlock(&p->lock);
	cancel_delayed_work_sync(&p->dw);
	kfree(p);
}

/* Hands `what` to the poller of `pdev`; RMLX5_PCI_NONE if it has none. */
static unsigned int rmlx5_poller_event(struct pci_dev *pdev, unsigned int what)
{
	unsigned int r = RMLX5_PCI_NONE;
	struct rmlx5_poller *p;

	mutex_lock(&rmlx5_pollers_lock);
	list_for_each_entry(p, &rmlx5_pollers, list) {
		if (p->dev == &pdev->dev) {
			r = p->event(p->ctx, what);
			break;
		}
	}
	mutex_unlock(&rmlx5_pollers_lock);
	if (r == RMLX5_PCI_NONE)
		pci_info(pdev, "PCI %s: the function is not up, nothing to do\n",
			 what == RMLX5_PCI_RESET_PREPARE ? "reset" :
			 what == RMLX5_PCI_RESET_DONE ? "reset done" :
			 what == RMLX5_PCI_RESUME ? "resume" : "error");
	return r;
}

/*
 * The PCI core's callbacks for the function (the 7.3 Rust PCI driver has
 * no err_handler), all under the device lock, so never beside probe or
 * remove. A reset the core does (sysfs `reset`, a bus reset) and an error
 * AER reports take the same path as a failure the health poll finds: the
 * function is failed (DMA off, verbs device fatal) before the reset; after
 * it, the recovery is queued (unbind, then probe, which brings it up;
 * the probe resets it first only if the core's reset did not clear its
 * command queue, see cx/health.rs). The recovery work
 * waits for the device lock, so it runs once the core is done.
 */
static void rmlx5_cx_reset_prepare(struct pci_dev *pdev)
{
	rmlx5_poller_event(pdev, RMLX5_PCI_RESET_PREPARE);
}

static void rmlx5_cx_reset_done(struct pci_dev *pdev)
{
	rmlx5_poller_event(pdev, RMLX5_PCI_RESET_DONE);
}

static pci_ers_result_t rmlx5_cx_error_detected(struct pci_dev *pdev,
						pci_channel_state_t state)
{
	unsigned int what = state == pci_channel_io_perm_failure ?
		RMLX5_PCI_PERM_FAILURE : state == pci_channel_io_frozen ?
		RMLX5_PCI_FROZEN : RMLX5_PCI_NORMAL;

	rmlx5_poller_event(pdev, what);
	/* A function that failed for good stays down until unbound. */
	return what == RMLX5_PCI_PERM_FAILURE ? PCI_ERS_RESULT_DISCONNECT :
						 PCI_ERS_RESULT_NEED_RESET;
}

static pci_ers_result_t rmlx5_cx_slot_reset(struct pci_dev *pdev)
{
	/*
	 * The link was reset: the config space is as the probe saved it
	 * (BARs, MSI-X), but the function stays failed, without DMA, until
	 * the recovery probes it again. Bus mastering goes off before the
	 * state is saved again, so that a later restore of this state (the
	 * core's, around a reset) does not turn it back on.
	 */
	pci_restore_state(pdev);
	pci_clear_master(pdev);
	pci_save_state(pdev);
	pci_info(pdev, "PCI slot reset: config space restored\n");
	return PCI_ERS_RESULT_RECOVERED;
}

static void rmlx5_cx_resume(struct pci_dev *pdev)
{
	rmlx5_poller_event(pdev, RMLX5_PCI_RESUME);
}

static const struct pci_error_handlers rmlx5_cx_err_handlers = {
	.error_detected = rmlx5_cx_error_detected,
	.slot_reset = rmlx5_cx_slot_reset,
	.resume = rmlx5_cx_resume,
	.reset_prepare = rmlx5_cx_reset_prepare,
	.reset_done = rmlx5_cx_reset_done,
};

/*
 * At the end of a probe that brought the function up: its driver gets
 * the callbacks above (the same for every function the driver binds, so
 * a second write changes nothing; the driver is registered and bound, so
 * the structure is ours and writable), and the config space is saved
 * for slot_reset.
 */
void rmlx5_pci_install_err_handlers(struct device *dev)
{
	struct pci_dev *pdev = to_pci_dev(dev);
	struct pci_driver *drv = (struct pci_driver *)to_pci_driver(dev->driver);

	if (drv)
		WRITE_ONCE(drv->err_handler, &rmlx5_cx_err_handlers);
	pci_save_state(pdev);
}

/*
 * Recovery of a failed PCI function, outside the driver's own context:
 * unbind (the driver writes the function off) and probe again, which
 * resets the function first (FLR or whatever the PCI core has for it)
 * unless the core reset it after it failed (cx/health.rs). Holds a
 * reference to the device meanwhile. Runs on @wq, the module's reap
 * workqueue, which module exit destroys (and so waits for) after the PCI
 * driver is unregistered: a recovery racing with rmmod finds no driver
 * to probe.
 */
struct rmlx5_recovery {
	struct work_struct work;
	struct device *dev;
	/* The binding that failed: its driver and driver data. */
	struct device_driver *drv;
	void *data;
};

/*
 * When each recovered function came back (jiffies, 0 for never), so that
 * one failing again within the grace period is left down instead of
 * being reset and probed in a loop (mlx5_core's devlink health grace
 * period does the same), and which were written off and not reset since.
 * A fixed table; each entry holds a reference to its device, so that a
 * device removed meanwhile is never confused with a new one that got its
 * memory (the references go when an entry is reused, and at module exit,
 * rmlx5_reap_wq_destroy).
 */
#define RMLX5_RECENT 64
static struct {
	struct device *dev;
	unsigned long up;
	/* Written off after a failure and not reset since. */
	bool written_off;
} rmlx5_recent[RMLX5_RECENT];
static DEFINE_SPINLOCK(rmlx5_recent_lock);

/*
 * The entry of @dev, made if needed; -1 if the table is full. A reference
 * an entry given up held is left in *@old, to put after the lock.
 */
static int rmlx5_recent_slot(struct device *dev, struct device **old)
{
	int i, free = -1;

	for (i = 0; i < RMLX5_RECENT; i++) {
		if (rmlx5_recent[i].dev == dev)
			return i;
		if (!rmlx5_recent[i].dev && free < 0)
			free = i;
	}
	/* Full: an entry not written off gives way (its grace is lost). */
	for (i = 0; free < 0 && i < RMLX5_RECENT; i++)
		if (!rmlx5_recent[i].written_off)
			free = i;
	if (free >= 0) {
		*old = rmlx5_recent[free].dev;
		rmlx5_recent[free].dev = get_device(dev);
		rmlx5_recent[free].up = 0;
		rmlx5_recent[free].written_off = false;
	}
	return free;
}

static void rmlx5_recent_note(struct device *dev)
{
	struct device *old = NULL;
	int i;

	spin_lock(&rmlx5_recent_lock);
	i = rmlx5_recent_slot(dev, &old);
	if (i >= 0)
		rmlx5_recent[i].up = jiffies | 1;
	spin_unlock(&rmlx5_recent_lock);
	put_device(old);
}

/*
 * A function written off after a failure: the memory it was lent is
 * freed with its DMA off, but its firmware may still hold the addresses,
 * so it is reset before it is given bus mastering again
 * (rmlx5_pci_reset_if_written_off). Entries written off are never
 * evicted; with 64 functions written off and not reset, a 65th is not
 * recorded (and is not reset at its next probe).
 */
void rmlx5_pci_note_written_off(struct device *dev)
{
	struct device *old = NULL;
	int i;

	spin_lock(&rmlx5_recent_lock);
	i = rmlx5_recent_slot(dev, &old);
	if (i >= 0)
		rmlx5_recent[i].written_off = true;
	spin_unlock(&rmlx5_recent_lock);
	put_device(old);
}

/*
 * In probe, the device lock held, before bus mastering: resets @dev if it
 * was written off. 0 if not, 1 if reset, or the reset's error.
 */
int rmlx5_pci_reset_if_written_off(struct device *dev)
{
	bool off = false;
	int i, err;

	spin_lock(&rmlx5_recent_lock);
	for (i = 0; i < RMLX5_RECENT; i++)
		if (rmlx5_recent[i].dev == dev)
			off = rmlx5_recent[i].written_off;
	spin_unlock(&rmlx5_recent_lock);
	if (!off)
		return 0;
	err = pci_reset_function_locked(to_pci_dev(dev));
	if (err)
		return err;
	spin_lock(&rmlx5_recent_lock);
	for (i = 0; i < RMLX5_RECENT; i++)
		if (rmlx5_recent[i].dev == dev)
			rmlx5_recent[i].written_off = false;
	spin_unlock(&rmlx5_recent_lock);
	return 1;
}

static bool rmlx5_recent_within(struct device *dev, unsigned int grace_ms)
{
	bool within = false;
	int i;

	spin_lock(&rmlx5_recent_lock);
	for (i = 0; i < RMLX5_RECENT; i++)
		if (rmlx5_recent[i].dev == dev && rmlx5_recent[i].up)
			within = time_before(jiffies, rmlx5_recent[i].up +
					     msecs_to_jiffies(grace_ms));
	spin_unlock(&rmlx5_recent_lock);
	return within;
}

static void rmlx5_recovery_fn(struct work_struct *work)
{
	struct rmlx5_recovery *r = container_of(work, struct rmlx5_recovery, work);
	int err;

	/* Not the binding that failed any more (unbound meanwhile, maybe
	 * given to another driver): nothing to recover. */
	if (READ_ONCE(r->dev->driver) != r->drv ||
	    dev_get_drvdata(r->dev) != r->data) {
		dev_info(r->dev, "recovery: unbound meanwhile, nothing to do\n");
		goto out;
	}
	/* Unbind writes the function off; probe resets it (if it is recorded
	 * as written off) before giving it bus mastering, and brings it up. */
	device_release_driver(r->dev);
	rmlx5_recent_note(r->dev);
	err = device_attach(r->dev);
	if (err <= 0)
		dev_warn(r->dev, "recovery: the function was not bound again (%d)\n", err);
out:
	put_device(r->dev);
	kfree(r);
}

int rmlx5_pci_recover(struct device *dev, struct workqueue_struct *wq,
		      unsigned int grace_ms)
{
	struct rmlx5_recovery *r;

	if (rmlx5_recent_within(dev, grace_ms))
		return -EBUSY;
	r = kzalloc(sizeof(*r), GFP_KERNEL);
	if (!r)
		return -ENOMEM;
	INIT_WORK(&r->work, rmlx5_recovery_fn);
	r->dev = get_device(dev);
	r->drv = dev->driver;
	r->data = dev_get_drvdata(dev);
	queue_work(wq, &r->work);
	return 0;
}

/* Requests BAR0 of a PCI function (mapped by the caller, in parts). */
int rmlx5_pci_request_bar0(struct device *dev)
{
	return pci_request_region(to_pci_dev(dev), 0, "rmlx5");
}

void rmlx5_pci_release_bar0(struct device *dev)
{
	pci_release_region(to_pci_dev(dev), 0);
}

/* The module's workqueue for frees deferred out of atomic context. */
struct workqueue_struct *rmlx5_reap_wq_alloc(void)
{
	return alloc_workqueue("rmlx5_reap", WQ_UNBOUND, 0);
}

/*
 * Waits for every queued free (and recovery), then frees the workqueue;
 * at module exit, after the PCI driver is gone, so the recovery table's
 * device references go too.
 */
void rmlx5_reap_wq_destroy(struct workqueue_struct *wq)
{
	int i;

	destroy_workqueue(wq);
	for (i = 0; i < RMLX5_RECENT; i++) {
		put_device(rmlx5_recent[i].dev);
		rmlx5_recent[i].dev = NULL;
		rmlx5_recent[i].up = 0;
		rmlx5_recent[i].written_off = false;
	}
}

int rmlx5_shim_dma_map(struct device *dev, void *addr, size_t len, u64 *dma)
{
	dma_addr_t d;

	if (!len || !virt_addr_valid(addr) || !virt_addr_valid(addr + len - 1))
		return -EINVAL;
	d = dma_map_single(dev, addr, len, DMA_BIDIRECTIONAL);
	if (dma_mapping_error(dev, d))
		return -ENOMEM;
	/*
	 * A kernel MR is the device's for its whole life, read and written by
	 * both sides with no sync in between: a mapping that needs syncs (a
	 * SWIOTLB bounce buffer, as with swiotlb=force or in confidential
	 * guests, or a non-coherent device) would lose the data. Refuse it,
	 * as the user path does.
	 */
	if (dma_need_sync(dev, d)) {
		dma_unmap_single(dev, d, len, DMA_BIDIRECTIONAL);
		return -EOPNOTSUPP;
	}
	*dma = d;
	return 0;
}

void rmlx5_shim_dma_unmap(struct device *dev, u64 dma, size_t len)
{
	dma_unmap_single(dev, dma, len, DMA_BIDIRECTIONAL);
}
