#!/usr/bin/env bash
# `make check`: setup, host checks, test kernel (cached), module, guest.
# Ends with one line `N passed, N failed` counting host tests, KUnit cases
# and guest tests; exits non-zero if anything failed.
#
# Environment knobs (all optional):
#   KDIR=<dir>          build against this kernel build tree instead of ours
#   GUEST_FILTER=<s>    run only guest tests whose name contains <s>
#   KUNIT_FILTER=<glob> run only matching KUnit suites (kunit.filter_glob)
#   SKIP_HOST=1 / SKIP_GUEST=1   skip one half while iterating (SKIP_GUEST
#                       also skips the emulated-ConnectX guest run)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
. "$here/env.sh"
. "$here/guest-tools.sh"
cd "$top"

passed=0
failed=0
failures=()
start=$(date +%s)
step() { printf '\n=== %s\n' "$*"; }
count_fail() { failed=$((failed + 1)); failures+=("$1"); }
# guest_failures RESULTS WHAT: adds what a guest run names as failed
# (run-guest.py's "failures", a line each) to the summary printed last.
guest_failures() {
    local line
    while IFS= read -r line; do
        failures+=("$2: $line")
    done < <(python3 -c 'import json,sys
for l in json.load(open(sys.argv[1])).get("failures", []): print(l.replace("\n", " | "))' "$1")
}
# add_guest_results RESULTS WHAT: adds the guest test counts of a guest
# run without KUnit (run-guest.py --results) and removes the file.
add_guest_results() {
    local gp gf
    if [ -s "$1" ]; then
        read -r gp gf < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1]));
print(d["guest_passed"], d["guest_failed"])' "$1")
        passed=$((passed + gp))
        failed=$((failed + gf))
        [ "$gf" = 0 ] || failures+=("$2: $gf failed")
        guest_failures "$1" "$2"
    else
        count_fail "$2 runner"
    fi
    rm -f "$1"
}

step "setup"
bash "$here/setup.sh" || { echo "setup failed"; echo "0 passed, 1 failed"; exit 1; }

if [ "${SKIP_HOST:-0}" != 1 ]; then
    step "host: cargo fmt --check"
    if cargo fmt --all --check; then passed=$((passed + 1)); else count_fail "cargo fmt"; fi

    step "host: cargo clippy --all-targets -- -D warnings"
    if cargo clippy --workspace --all-targets --quiet -- -D warnings; then
        passed=$((passed + 1))
    else
        count_fail "cargo clippy"
    fi

    step "host: cargo test"
    log=$(mktemp)
    cargo test --workspace 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    # Sum the per-binary `test result:` lines (unit, integration, doc tests).
    read -r hp hf < <(awk '/^test result:/ { for (i = 1; i <= NF; i++) {
            if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
            END { print p + 0, f + 0 }' "$log")
    passed=$((passed + hp))
    failed=$((failed + hf))
    if [ "$rc" != 0 ] && [ "$hf" = 0 ]; then count_fail "cargo test (exit $rc)"; fi
    [ "$hf" = 0 ] || failures+=("cargo test: $hf failed")
    rm -f "$log"

    # Python unit tests: the benchmark report script (make bench) on its
    # synthetic console log, the stack-frame check on objects with frames
    # over the limit, and the guest runner's repair of result lines a
    # kernel message cut on the console.
    for suite in bench frames runner; do
        step "host: tests/$suite (python3 -m unittest)"
        log=$(mktemp)
        python3 -m unittest discover -s "$top/tests/$suite" -v 2>&1 | tee "$log"
        rc=${PIPESTATUS[0]}
        bp=$(grep -c ' \.\.\. ok$' "$log" || true)
        bs=$(grep -c ' \.\.\. skipped' "$log" || true)
        bf=$(grep -cE ' \.\.\. (FAIL|ERROR)$' "$log" || true)
        passed=$((passed + bp))
        failed=$((failed + bf))
        [ "$bs" = 0 ] || echo "tests/$suite: $bs skipped (see above)"
        if [ "$rc" != 0 ] && [ "$bf" = 0 ]; then count_fail "tests/$suite (exit $rc)"; fi
        [ "$bf" = 0 ] || failures+=("tests/$suite: $bf failed")
        rm -f "$log"
    done
fi

if [ "${SKIP_GUEST:-0}" != 1 ]; then
    step "test kernel"
    if [ -n "${KDIR:-}" ]; then
        kdir=$KDIR
    else
        kdir=$(bash "$here/kernel.sh") || { count_fail "kernel build"; kdir=""; }
    fi

    if [ -n "$kdir" ]; then
        step "module (CLIPPY=1) and guest programs"
        if make -s KDIR="$kdir" module-check && make -s guest-programs; then
            res=$(mktemp)
            step "guest"
            programs=()
            for p in "$top"/target/guest/x86_64-unknown-linux-gnu/release/rmlx5-*-tests \
                "$top"/build/samples/rmlx5-dv-c-tests; do
                programs+=(--program "$p")
            done
            # iproute2's rdma tool, for the ib_core checks (cached).
            overlay=()
            if userland=$(bash "$here/bench-userland.sh" check); then
                overlay=(--overlay "$userland")
            else
                count_fail "staging iproute2 for the guest"
            fi
            python3 "$top/tests/run-guest.py" --kernel "$kdir/arch/x86/boot/bzImage" \
                --ksrc "$KSRC" --module "$top/build/module/rmlx5.ko" "${programs[@]}" \
                "${guest_tools[@]}" "${overlay[@]}" \
                --filter "${GUEST_FILTER:-}" --kunit-filter "${KUNIT_FILTER:-}" \
                --timeout 1800 --log "$top/build/console.log" --results "$res"
            if [ -s "$res" ]; then
                read -r kp kf gp gf < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1]));
print(d["kunit_passed"], d["kunit_failed"], d["guest_passed"], d["guest_failed"])' "$res")
                passed=$((passed + kp + gp))
                failed=$((failed + kf + gf))
                [ "$kf" = 0 ] || failures+=("KUnit: $kf failed")
                [ "$gf" = 0 ] || failures+=("guest: $gf failed")
                guest_failures "$res" "main guest"
            else
                count_fail "guest runner"
            fi
            rm -f "$res"

            # The PCI backend against the emulated ConnectX-5 (rust/cx-emu
            # behind Debian's QEMU 11 with vfio-user-pci, scripts/qemu.sh):
            # tests/guest/pci-smoke.sh with rmlx5.ko in the image; the
            # emulator fails the first INIT_HCA (0x102) on purpose, so the
            # driver's error path runs too.
            # One PCI guest: pci_guest STEP WHAT LOG EMULATOR-ARGS...
            pci_guest() {
                local what=$2 log=$3 res
                step "$1"
                shift 3
                res=$(mktemp)
                python3 "$top/tests/run-guest.py" --mode pci-smoke \
                    --kernel "$kdir/arch/x86/boot/bzImage" --ksrc "$KSRC" --qemu "$qemu" \
                    --cx-emu "$top/target/release/rmlx5-cx-emu" \
                    --tool "$top/target/guest/x86_64-unknown-linux-gnu/release/rmlx5-pci-peek" \
                    --tool "$top/target/guest/x86_64-unknown-linux-gnu/release/rmlx5-devinfo" \
                    --module "$top/build/module/rmlx5.ko" --kunit-filter none \
                    --timeout 600 "$@" --log "$top/build/$log" --results "$res"
                add_guest_results "$res" "$what"
            }
            if qemu=$(bash "$here/qemu.sh") &&
                cargo build --quiet --release -p cx-emu --bin rmlx5-cx-emu &&
                RUSTFLAGS="-C target-feature=+crt-static" cargo build --quiet --release \
                    --target x86_64-unknown-linux-gnu --target-dir "$top/target/guest" \
                    -p cx-emu --bin rmlx5-pci-peek; then
                # User space on the function: the provider, events, ABI
                # and kernel-path suites run on it too (pci-smoke.sh).
                uprogs=()
                for p in provider events abi kpath; do
                    uprogs+=(--program "$top/target/guest/x86_64-unknown-linux-gnu/release/rmlx5-$p-tests")
                done
                # rdma-core's tools and libmlx5 (cached), for the
                # function's libmlx5 cases.
                cxoverlay=()
                if userland=$(bash "$here/bench-userland.sh" check); then
                    cxoverlay=(--overlay "$userland")
                fi
                pci_guest "guest with the emulated ConnectX (PCI backend)" \
                    "PCI guest" pci-console.log --cx-emu-fail 0x102 "${uprogs[@]}" \
                    "${guest_tools[@]}" "${cxoverlay[@]}" --timeout 1500
                # Again with a firmware that never leaves its initialisation:
                # probe must give up after cx_fw_wait_ms, cleanly.
                pci_guest "guest with an emulated ConnectX whose firmware never becomes ready" \
                    "PCI guest, firmware never ready" pci-never-ready-console.log \
                    --cx-emu-never-ready
                # And with one MSI-X vector: the driver and its self-test
                # fall back to vector 0.
                # With every CREATE_CQ held 2 s by the emulator, so that a
                # command keeps the function's mutex while completion
                # interrupts arrive on that vector.
                pci_guest "guest with an emulated ConnectX of one MSI-X vector" \
                    "PCI guest, one MSI-X vector" pci-one-vector-console.log --cx-emu-msix 1 \
                    --cx-emu-slow 0x400:2000 "${guest_tools[@]}"
                # And a function that fails: a fatal health syndrome, a
                # hung firmware, a command that never completes and an
                # FLR behind the driver's back, each mid-traffic, each
                # survived by failing, writing off and recovering the
                # function (tests/guest/pci-smoke.sh, rmlx5.cxfaults=1).
                # Its commands take 100 µs, as on a card, for the command
                # modes it measures (cx/events.rs); before the faults, the
                # no-lost-event, SIGKILL and fuzzer (5,000 calls) stress
                # scenarios run on the function at a small scale (make
                # stress runs them larger).
                pci_guest "guest with an emulated ConnectX that fails and recovers" \
                    "PCI guest, faults" pci-faults-console.log \
                    --append "rmlx5.cxfaults=1 rmlx5.cxstress=completions=100000,kills=3,calls=5000" \
                    --cx-emu-cmd-latency-us 100 "${guest_tools[@]}" \
                    --program "$top/target/guest/x86_64-unknown-linux-gnu/release/rmlx5-stress-tests" \
                    --timeout 1200
                # And two functions of one emulated card sharing one
                # fabric: RC traffic between two ConnectX verbs devices
                # (kernel ULPs and user space), each port's LID from its
                # firmware.
                pci_guest "guest with two emulated ConnectX functions on one fabric" \
                    "PCI guest, two functions" pci-two-functions-console.log \
                    --cx-emu-functions 2 "${guest_tools[@]}"
                # And behind SWIOTLB bounce buffers (swiotlb=force): kernel
                # MRs, which would need DMA syncs, are refused.
                pci_guest "guest with an emulated ConnectX and every DMA mapping bounced" \
                    "PCI guest, swiotlb=force" pci-swiotlb-console.log --append swiotlb=force
            else
                count_fail "QEMU or emulated ConnectX build"
            fi
        else
            count_fail "module or guest program build"
        fi
    fi

    # The production-like kernel (tests/kernel/bench.config, also make
    # bench's): 16 KiB vmap'ed task stacks, no KASAN, lockdep or kmemleak.
    # rmlx5 and the sample ULPs built against it to the same standard
    # (warning-free, clippy, frame check), then a smoke run of the module
    # with the software HCAs and the emulated ConnectX (tests/guest/prod.sh).
    step "production-like kernel (tests/kernel/bench.config, cached)"
    if [ -n "${KDIR:-}" ]; then
        echo "KDIR is set: skipping the production-like kernel"
    elif pkdir=$(bash "$here/kernel.sh" "$top/tests/kernel/bench.config"); then
        step "module for the production-like kernel (CLIPPY=1, frame check)"
        pmo=$top/build/prod-module pulp=$top/build/prod-ulp pib=$top/build/prod-ibtest
        if make -s KDIR="$pkdir" MO="$pmo" ULP_MO="$pulp" IBTEST_MO="$pib" module-check &&
            make -s guest-programs && qemu=$(bash "$here/qemu.sh") &&
            cargo build --quiet --release -p cx-emu --bin rmlx5-cx-emu; then
            step "production-like guest (smoke run)"
            # rdma-core's tools, for its libmlx5 pingpong (cached).
            poverlay=()
            if userland=$(bash "$here/bench-userland.sh" check); then
                poverlay=(--overlay "$userland")
            fi
            res=$(mktemp)
            python3 "$top/tests/run-guest.py" --mode prod \
                --kernel "$pkdir/arch/x86/boot/bzImage" --ksrc "$KSRC" --qemu "$qemu" \
                --cx-emu "$top/target/release/rmlx5-cx-emu" \
                --module "$pmo/rmlx5.ko" --ulp "$pulp/rmlx5_ulp.ko" --ibtest "$pib/rmlx5_ibtest.ko" \
                "${guest_tools[@]}" "${poverlay[@]}" --timeout 900 \
                --log "$top/build/prod-console.log" --results "$res"
            add_guest_results "$res" "production-like guest"
        else
            count_fail "production-like module, QEMU or emulator build"
        fi
    else
        count_fail "production-like kernel build"
    fi
fi

echo
echo "=== make check took $(( $(date +%s) - start )) s"
for f in "${failures[@]}"; do echo "FAILED: $f"; done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
