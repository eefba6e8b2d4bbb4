# SPDX-License-Identifier: GPL-2.0
#
# rmlx5 top-level commands. Kbuild reads ./Kbuild, not this file, when the
# kernel's build system enters this directory (M=...).
#
#   make demo     boot the test guest, load rmlx5, run the pingpong between
#                 rmlx5_0 and rmlx5_1 in polling and event modes
#   make perf     boot the test guest and print rmlx5-perf's numbers
#   make bench    rmlx5 vs rxe vs siw in one benchmark guest: table, raw
#                 numbers and charts under results/
#   make check    every test: host, KUnit, guest; last line "N passed, N failed"
#   make stress   the reliability figures (fuzzing, kills, lost events,
#                 CVE tests looped) in the test guest, up to ~45 minutes
#   make pci-smoke  boot the test guest with the emulated ConnectX-5
#                 (rust/cx-emu) and check what it sees without a driver
#   make setup    install what the two above need (idempotent)
#   make module   build rmlx5.ko against $(KDIR) (default: the cached test kernel)
#   make kernel   build (or find in the cache) the test kernel
#
# KDIR=<kernel build tree> builds the module for another kernel, e.g. a real
# test host's (that tree needs Rust enabled and a completed `make all`).

LLVM ?= -19
TOP := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
BUILD := $(TOP)/build
MO := $(BUILD)/module
GUEST_TARGET := x86_64-unknown-linux-gnu

ifeq ($(origin KDIR), undefined)
KDIR = $(shell bash $(TOP)/scripts/kernel.sh)
endif

FUZZ_SECONDS ?= 60

.PHONY: fuzz all setup kernel module module-check frame-check alias-check ulp guest-programs dv-sample check demo perf bench stress pci-smoke hw-check clean rustfmt

all: module

setup:
	@bash scripts/setup.sh

kernel:
	@bash scripts/kernel.sh

$(MO):
	@mkdir -p $(MO)

ULP_MO := $(BUILD)/ulp
IBTEST_MO := $(BUILD)/ibtest

module: | $(MO)
	$(MAKE) -C $(KDIR) M=$(TOP) MO=$(MO) LLVM=$(LLVM) modules
	@mkdir -p $(ULP_MO)
	$(MAKE) -C $(KDIR) M=$(TOP)/samples/rmlx5_ulp MO=$(ULP_MO) LLVM=$(LLVM) \
		KBUILD_EXTRA_SYMBOLS=$(MO)/Module.symvers modules

# The sample kernel ULP (samples/rmlx5_ulp) links against rmlx5's exported
# symbols, so it needs rmlx5's Module.symvers.
ulp: | $(MO)
	@mkdir -p $(ULP_MO)
	@out=$$($(MAKE) -s -C $(KDIR) M=$(TOP)/samples/rmlx5_ulp MO=$(ULP_MO) LLVM=$(LLVM) \
		KBUILD_EXTRA_SYMBOLS=$(MO)/Module.symvers modules 2>&1); rc=$$?; echo "$$out"; \
	if [ $$rc -ne 0 ] || echo "$$out" | grep -qiE 'warning|error'; then echo "ulp: build failed or warned"; exit 1; fi
	@# The ib_* API test ULP (samples/rmlx5_ibcore), on kernels with the RDMA core.
	@rm -rf $(IBTEST_MO)
	@if grep -q '^CONFIG_INFINIBAND=[ym]' $(KDIR)/.config; then \
	mkdir -p $(IBTEST_MO); \
	out=$$($(MAKE) -s -C $(KDIR) M=$(TOP)/samples/rmlx5_ibcore MO=$(IBTEST_MO) LLVM=$(LLVM) modules 2>&1); rc=$$?; echo "$$out"; \
	if [ $$rc -ne 0 ] || echo "$$out" | grep -qiE 'warning|error'; then echo "ibtest: build failed or warned"; exit 1; fi; \
	fi

# What make check builds: the module warning-free (warnings are errors
# here), clean under clippy, and rustfmt-clean (.rustfmt.toml is the
# kernel's). rustfmt follows the crate's modules, #[path] ones included.
module-check: | $(MO)
	@kdir='$(KDIR)'; \
	out=$$($(MAKE) -s -C $$kdir M=$(TOP) MO=$(MO) LLVM=$(LLVM) CLIPPY=1 modules 2>&1); rc=$$?; \
	echo "$$out"; \
	if [ $$rc -ne 0 ]; then echo "module: build failed"; exit 1; fi; \
	if echo "$$out" | grep -qiE 'warning|error'; then echo "module: build printed warnings"; exit 1; fi; \
	rustfmt --check --config-path $(TOP)/.rustfmt.toml $(TOP)/drivers/rmlx5/rmlx5_main.rs \
		|| { echo "module: not rustfmt-clean (run make rustfmt)"; exit 1; }; \
	$(MAKE) -s KDIR=$$kdir ulp || exit 1; \
	$(MAKE) -s frame-check || exit 1; \
	$(MAKE) -s alias-check || exit 1; \
	echo "module: $(MO)/rmlx5.ko, $(ULP_MO)/rmlx5_ulp.ko and (with INFINIBAND) $(IBTEST_MO)/rmlx5_ibtest.ko built clean"

# rmlx5 must never load by itself beside mlx5_core: no autoload aliases
# in its .modinfo (Documentation/pci.md).
alias-check:
	@objcopy -O binary --only-section=.modinfo $(MO)/rmlx5.ko $(MO)/modinfo.bin && \
	n=$$(tr '\0' '\n' < $(MO)/modinfo.bin | grep -c '^alias=' || true); \
	rm -f $(MO)/modinfo.bin; \
	if [ "$$n" != 0 ]; then echo "alias-check: $(MO)/rmlx5.ko has $$n autoload aliases"; exit 1; fi; \
	echo "alias-check: $(MO)/rmlx5.ko has no autoload aliases"

# Every function of the modules built into $(MO), $(ULP_MO) and
# $(IBTEST_MO) within the kernel's 64-bit FRAME_WARN (rustc has no
# frame-size warning; see Documentation/kernel-stacks.md).
frame-check:
	@python3 $(TOP)/scripts/frame-check.py --top 8 $(MO)/rmlx5.ko $(ULP_MO)/rmlx5_ulp.ko \
		$(wildcard $(IBTEST_MO)/rmlx5_ibtest.ko)

rustfmt:
	@rustfmt --config-path $(TOP)/.rustfmt.toml $(TOP)/drivers/rmlx5/rmlx5_main.rs

# Static programs for the guest (its initramfs has no C library): the test
# programs (target/guest/.../rmlx5-*-tests, run by /init) and the tools
# (rmlx5-devinfo, rmlx5-pingpong, rmlx5-perf, put in the guest's /bin).
guest-programs: dv-sample
	@RUSTFLAGS="-C target-feature=+crt-static" cargo build --quiet --release \
		--target $(GUEST_TARGET) --target-dir $(TOP)/target/guest \
		-p rmlx5-guest-tests -p rmlx5-tools --bins

# The C direct-verbs sample (samples/dv), built only from rdma-core's
# mlx5dv.h and our uapi headers, static for the guest, where it runs as the
# test program rmlx5-dv-c-tests.
DV_SAMPLE := $(BUILD)/samples/rmlx5-dv-c-tests
dv-sample:
	@mkdir -p $(dir $(DV_SAMPLE))
	@$(CC) -std=gnu11 -O2 -Wall -Wextra -Werror -static -I$(TOP)/include/uapi \
		-o $(DV_SAMPLE) $(TOP)/samples/dv/rmlx5_dv_send.c

check:
	@bash scripts/check.sh

demo:
	@bash scripts/demo.sh

# rmlx5-perf in the guest: latency and message-rate numbers (not a test).
perf:
	@bash scripts/perf.sh

# rmlx5 against rxe and siw (perftest) in the benchmark guest (not a test).
bench:
	@bash scripts/bench.sh

# Reliability figures under KASAN/lockdep/kmemleak/failslab (not a part of
# make check); STRESS="scale=100" for a quick run.
stress:
	@bash scripts/stress.sh

# The emulated ConnectX-5 seen from the guest with no driver (QEMU with
# vfio-user-pci from scripts/qemu.sh; not a part of make check yet).
pci-smoke:
	@bash scripts/pci-smoke.sh

# make check's PCI suite on a real ConnectX function of this machine, the
# function taken from mlx5_core for the run and given back (as root; PCI=
# names it, KDIR= the running kernel's build tree if not the default).
hw-check:
	@bash scripts/hw-check.sh

clean:
	rm -rf $(BUILD)
	cargo clean

# Coverage-guided fuzzing of the software HCA with random WQE streams
# (cargo-fuzz on the stable toolchain; RUSTC_BOOTSTRAP enables the
# sanitizer flags it needs). Not part of make check: it compiles for minutes.
fuzz:
	@command -v cargo-fuzz >/dev/null || cargo install --locked --quiet cargo-fuzz
	cd rust/hca-model && RUSTC_BOOTSTRAP=1 cargo fuzz run -O wqe_stream -- \
		-max_total_time=$(FUZZ_SECONDS) -max_len=2048
