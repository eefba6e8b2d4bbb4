#!/usr/bin/env bash
# `make stress`: rmlx5's reliability figures, measured in the test guest
# (KASAN, lockdep, kmemleak, DEBUG_ATOMIC_SLEEP, failslab):
#   1. 10^6 fuzzed, state-aware ioctl calls (seeded; the seed is printed);
#   2. 100 rounds of processes killed with SIGKILL mid-traffic;
#   3. 10^7 completions with no completion event lost, then again with
#      kmalloc fault injection on rmlx5's call stacks;
#   4. the CVE regression tests (rmlx5-cve-tests) in a loop;
# then rmmod and a kmemleak scan; then, in a second guest with the
# emulated ConnectX, a loop of device faults mid-traffic (PCIFAULTS
# passes of six, default 10). Prints a table and writes it to
# results/stress-<UTC time>/summary.txt (results/ is not committed), next
# to the console log. Exits non-zero on any failed part, kernel splat,
# leak, lost event or unexpected errno, printing the seed and the console
# excerpt.
#
# STRESS="key=value ..." scales or changes every count (see
# tests/guest/stress.sh), e.g. STRESS="scale=100" for a quick run or
# STRESS="seed=1234 calls=50000" to replay a fuzzer seed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
. "$here/env.sh"
. "$here/guest-tools.sh"
cd "$top"
log() { printf 'stress: %s\n' "$*" >&2; }
t0=$(date +%s)

bash "$here/setup.sh" || exit 1
kdir=$(bash "$here/kernel.sh") || { log "kernel build failed"; exit 1; }
make -s KDIR="$kdir" module && make -s guest-programs || { log "build failed"; exit 1; }

stamp=$(date -u +%Y%m%d-%H%M%S)
out=$top/results/stress-$stamp
mkdir -p "$out"
consolelog=$out/console.log
programs=()
for p in rmlx5-stress-tests rmlx5-cve-tests; do
    programs+=(--program "$top/target/guest/x86_64-unknown-linux-gnu/release/$p")
done
log "booting the test guest; the full run takes up to about 45 minutes"
# rdma-core's user space and Python, for the mlx5_ib fuzz (cached).
overlay=()
if userland=$(bash "$here/bench-userland.sh" check); then
    overlay=(--overlay "$userland")
fi
python3 "$top/tests/run-guest.py" --mode stress --kernel "$kdir/arch/x86/boot/bzImage" \
    --ksrc "$KSRC" --module "$top/build/module/rmlx5.ko" "${programs[@]}" \
    "${guest_tools[@]}" "${overlay[@]}" --stress "${STRESS:-}" \
    --timeout "${STRESS_TIMEOUT:-4200}" --log "$consolelog" | tee "$out/guest-run.txt"
guest_rc=${PIPESTATUS[0]}

# The emulated ConnectX's fault loop: PCIFAULTS passes (default 10, divided
# by STRESS's scale) of the six faults tests/guest/pci-smoke.sh injects
# mid-traffic (fatal syndrome, hung firmware, lost command, a reset through
# sysfs, a fatal and a non-fatal AER error at the root port), each to be
# survived by failing, writing off and recovering the function.
scale=$(echo "${STRESS:-}" | tr ' ,' '\n\n' | sed -n 's/^scale=//p' | tail -n1)
passes=$(( ${PCIFAULTS:-10} / ${scale:-1} ))
[ "$passes" -lt 1 ] && passes=1
# Before the faults, the no-lost-event, SIGKILL and fuzzer scenarios run on
# the function: 10^6 completions, 20 kill rounds and 50,000 fuzzed calls,
# divided by the scale.
cxcompletions=$(( 1000000 / ${scale:-1} ))
cxkills=$(( 20 / ${scale:-1} ))
[ "$cxkills" -lt 1 ] && cxkills=1
cxcalls=$(( 50000 / ${scale:-1} ))
[ "$cxcalls" -lt 1 ] && cxcalls=1
pcilog=$out/pci-faults-console.log
pci_rc=1
if qemu=$(bash "$here/qemu.sh") && cargo build --quiet --release -p cx-emu --bins &&
    RUSTFLAGS="-C target-feature=+crt-static" cargo build --quiet --release \
        --target x86_64-unknown-linux-gnu --target-dir "$top/target/guest" -p cx-emu --bins &&
    make -s KDIR="$kdir" ulp; then
    log "booting the PCI guest: $passes pass(es) of six device faults"
    python3 "$top/tests/run-guest.py" --mode pci-smoke --kernel "$kdir/arch/x86/boot/bzImage" \
        --ksrc "$KSRC" --qemu "$qemu" --cx-emu "$top/target/release/rmlx5-cx-emu" \
        --tool "$top/target/guest/x86_64-unknown-linux-gnu/release/rmlx5-pci-peek" \
        "${guest_tools[@]}" --module "$top/build/module/rmlx5.ko" --kunit-filter none \
        --program "$top/target/guest/x86_64-unknown-linux-gnu/release/rmlx5-stress-tests" \
        --append "rmlx5.cxfaults=$passes rmlx5.cxstress=completions=$cxcompletions,kills=$cxkills,calls=$cxcalls" \
        --cx-emu-cmd-latency-us 100 --timeout $(( 1200 + passes * 120 )) \
        --log "$pcilog" | tee "$out/pci-guest-run.txt"
    pci_rc=${PIPESTATUS[0]}
fi
[ -f "$out/pci-guest-run.txt" ] || echo "guest: FAIL pci_faults: the PCI guest did not run" > "$out/pci-guest-run.txt"

# The table: one row per part, from the @@STRESS lines of the console.
fig() { grep -a "@@STRESS $1 " "$consolelog" | sed "s/.*@@STRESS $1 //" | sed -n "${2:-1}p"; }
secs() { grep -a "@@STRESS-TIME part=$1 " "$consolelog" | sed 's/.*secs=//' | head -n1; }
problems=$(( $(grep -c '^guest: FAIL' "$out/guest-run.txt") + $(grep -c '^guest: FAIL' "$out/pci-guest-run.txt") ))
pcifig() { grep -a "@@STRESS pcifaults " "$pcilog" 2>/dev/null | sed 's/.*@@STRESS pcifaults //' | head -n1; }
# The function's scenarios: "@@STRESS <part> ..." and "@@STRESS-TIME part=cx_<scenario>".
pcipart() { grep -a "@@STRESS $1 " "$pcilog" 2>/dev/null | sed "s/.*@@STRESS $1 //" | sed -n "${2:-1}p"; }
pcisecs() { grep -a "@@STRESS-TIME part=cx_$1 " "$pcilog" 2>/dev/null | sed 's/.*secs=//' | head -n1; }
{
    echo "rmlx5 make stress, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo "machine: $(nproc) cores, $(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo);" \
        "guest: QEMU ${RMLX5_ACCEL:-tcg}, 2 vCPUs, test kernel $(basename "$kdir")"
    echo "knobs: $(grep -a '@@STRESS-INFO' "$consolelog" | sed 's/.*@@STRESS-INFO //' | head -n1)"
    echo
    printf '%-28s %8s  %s\n' "part" "seconds" "figures"
    printf '%-28s %8s  %s\n' "fuzzed ioctl sequences" "$(secs fuzz)" "$(fig fuzz 2)"
    printf '%-28s %8s  %s\n' "SIGKILL mid-traffic" "$(secs kill)" "$(fig kill)"
    printf '%-28s %8s  %s\n' "no lost event" "$(secs events)" "$(fig events 1)"
    printf '%-28s %8s  %s\n' "  with failslab" "$(secs events_failslab)" \
        "$(fig events 2), during traffic: $(fig failslab_traffic), control: $(fig failslab_control), in all: $(fig failslab)"
    printf '%-28s %8s  %s\n' "CVE regressions, looped" "" "$(fig cve)"
    printf '%-28s %8s  %s\n' "mlx5_ib driver data fuzzed" "$(secs mlx5fuzz)" "$(fig mlx5fuzz), left: $(fig mlx5left)"
    printf '%-28s %8s  %s\n' "ConnectX: fuzzed ioctls" "$(pcisecs fuzz_ioctl_sequences)" "$(pcipart fuzz 2) (emulated function)"
    printf '%-28s %8s  %s\n' "ConnectX: SIGKILL" "$(pcisecs kill_mid_traffic)" "$(pcipart kill) (emulated function)"
    printf '%-28s %8s  %s\n' "ConnectX: no lost event" "$(pcisecs no_lost_event)" "$(pcipart events) (emulated function)"
    printf '%-28s %8s  %s\n' "ConnectX faults mid-traffic" "" "$(pcifig) (emulated function; PCI guest kernel reports: $(grep -c 'guest: FAIL kernel_log' "$out/pci-guest-run.txt"))"
    printf '%-28s %8s  %s\n' "kernel" "" \
        "splats=$(grep -c 'guest: FAIL kernel_log' "$out/guest-run.txt") kmemleak=$(grep -q '^guest: PASS kmemleak' "$out/guest-run.txt" && echo clean || echo REPORTED) unload=$(grep -q '^guest: PASS module_unload' "$out/guest-run.txt" && echo ok || echo FAILED)"
    echo
    grep -a 'seed=' "$consolelog" | grep -a '@@STRESS' | sed 's/.*\(seed=[0-9a-fx]*\).*/fuzzer \1 (replay: STRESS="\1 ...")/' | head -n1
    echo "$(( $(grep -c '^guest: PASS' "$out/guest-run.txt") + $(grep -c '^guest: PASS' "$out/pci-guest-run.txt") )) passed, $problems failed"
} | tee "$out/summary.txt"
ln -sfn "stress-$stamp" "$top/results/latest-stress"
log "summary and console log: $out ($(( $(date +%s) - t0 )) s in all)"
[ "$guest_rc" = 0 ] && [ "$pci_rc" = 0 ] && [ "$problems" = 0 ]
