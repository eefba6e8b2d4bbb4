#!/usr/bin/env bash
# `make pci-smoke`: the emulated ConnectX-5 as a guest sees it, with no
# driver. Boots the cached test kernel in QEMU (from scripts/qemu.sh, which
# has vfio-user-pci) with rust/cx-emu attached, and checks in the guest
# (tests/guest/pci-smoke.sh) that the function is 15b3:1017 with its BAR0
# and MSI-X capability, and that BAR0's initialization segment reads
# firmware 16.35.1012, command interface revision 5. rmlx5 is not loaded.
# Fails if the emulator saw anything it refuses.
#
#   DRIVER=1 make pci-smoke   also build rmlx5.ko and check that its PCI
#                             driver binds the function, brings it up and
#                             gets every page back on rmmod (KUnit skipped)
#   CX_FAIL=0x102             the emulator fails the first command with this
#                             opcode (here INIT_HCA), as make check does
#   CX_NEVER_READY=1          the emulator's firmware never leaves its
#                             initialisation: probe must time out cleanly
#                             (make check's second PCI run)
#   CX_FAULTS=N               with DRIVER=1: N passes of four device faults
#                             mid-traffic (fatal syndrome, hung firmware,
#                             lost command, FLR), each survived by
#                             recovery; make check's fault guest is N=1
#                             (commands take CX_CMD_LATENCY_US, default
#                             100 µs, as on a card)
#                             (needs `make guest-programs` first)
#   CX_MSIX=1                 the function has one MSI-X vector: the driver
#                             and its self-test fall back to vector 0
#                             (make check's third PCI run)
#   CX_FUNCTIONS=2            the emulator serves two ConnectX-5 functions
#                             on one fabric (two vfio-user-pci devices), so
#                             RC traffic can run between them
#   CX_USER=1                 with DRIVER=1: also the user-space suites
#                             (provider, events, ABI, kernel path) on the
#                             function, as make check's first PCI run
#                             (needs `make guest-programs` first);
#                             CX_FILTER=name runs only the cases matching it
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
. "$here/env.sh"
cd "$top"
log() { printf 'pci-smoke: %s\n' "$*"; }

bash "$here/setup.sh"
qemu=$(bash "$here/qemu.sh")
kdir=${KDIR:-$(bash "$here/kernel.sh")}

# The guest needs PCI with MSI(-X), and reads BAR0 by mmap of its sysfs
# resource file (no /dev/mem in the test kernel).
for opt in CONFIG_PCI CONFIG_PCI_MSI; do
    grep -qx "$opt=y" "$kdir/.config" || { log "$kdir lacks $opt=y"; exit 1; }
done

log "building rmlx5-cx-emu (host), rmlx5-pci-peek and rmlx5-devinfo (guest)"
cargo build --quiet --release -p cx-emu --bin rmlx5-cx-emu
RUSTFLAGS="-C target-feature=+crt-static" cargo build --quiet --release \
    --target x86_64-unknown-linux-gnu --target-dir "$top/target/guest" \
    -p cx-emu --bin rmlx5-pci-peek -p rmlx5-tools --bin rmlx5-devinfo

driver=()
if [ "${DRIVER:-0}" = 1 ]; then
    log "building rmlx5.ko"
    make -s KDIR="$kdir" module
    # The sample ULPs (build/ulp, build/ibtest), which the guest loads on
    # the function.
    make -s KDIR="$kdir" ulp
    driver=(--module "$top/build/module/rmlx5.ko" --kunit-filter none)
fi
if [ -n "${CX_FAIL:-}" ]; then
    driver+=(--cx-emu-fail "$CX_FAIL")
fi
if [ "${CX_NEVER_READY:-0}" = 1 ]; then
    driver+=(--cx-emu-never-ready)
fi
if [ -n "${CX_FAULTS:-}" ]; then
    # N passes of the four device faults (needs `make guest-programs`).
    driver+=(--append "rmlx5.cxfaults=$CX_FAULTS" --cx-emu-cmd-latency-us "${CX_CMD_LATENCY_US:-100}")
    for t in rmlx5-pingpong rmlx5-perf; do
        driver+=(--tool "$top/target/guest/x86_64-unknown-linux-gnu/release/$t")
    done
fi
if [ -n "${CX_MSIX:-}" ]; then
    driver+=(--cx-emu-msix "$CX_MSIX")
fi
if [ -n "${CX_FUNCTIONS:-}" ]; then
    driver+=(--cx-emu-functions "$CX_FUNCTIONS")
    for t in rmlx5-pingpong rmlx5-perf; do
        driver+=(--tool "$top/target/guest/x86_64-unknown-linux-gnu/release/$t")
    done
fi
if [ "${CX_USER:-0}" = 1 ]; then
    gbin=$top/target/guest/x86_64-unknown-linux-gnu/release
    for p in provider events abi kpath; do
        driver+=(--program "$gbin/rmlx5-$p-tests")
    done
    for t in rmlx5-pingpong rmlx5-perf; do
        driver+=(--tool "$gbin/$t")
    done
    # CX_FILTER=name: only the user-space cases matching it.
    if [ -n "${CX_FILTER:-}" ]; then
        driver+=(--filter "$CX_FILTER")
    fi
fi

mkdir -p "$top/build"
python3 "$top/tests/run-guest.py" --mode pci-smoke --kernel "$kdir/arch/x86/boot/bzImage" \
    --ksrc "$KSRC" --qemu "$qemu" --cx-emu "$top/target/release/rmlx5-cx-emu" \
    --tool "$top/target/guest/x86_64-unknown-linux-gnu/release/rmlx5-pci-peek" \
    --tool "$top/target/guest/x86_64-unknown-linux-gnu/release/rmlx5-devinfo" \
    "${driver[@]}" --timeout 600 --log "$top/build/pci-smoke-console.log"
