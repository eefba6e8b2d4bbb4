#!/usr/bin/env bash
# `make bench`: rmlx5 against the kernel's Soft-RoCE (rxe) and Soft-iWARP
# (siw), side by side in one guest.
#
#  1. the benchmark kernel (tests/kernel/bench.config: RDMA core, uverbs,
#     rxe, siw; no KASAN/lockdep/kmemleak), built once and cached like the
#     test kernel, and rmlx5.ko built against it;
#  2. rdma-core, perftest and iproute2 from Debian, staged for the guest
#     (scripts/bench-userland.sh, cached);
#  3. one boot running tests/guest/bench.sh (every case, rounds alternating
#     rmlx5 rxe siw rmlx5 rxe siw);
#  4. the host microbenchmarks of the provider fast path and of the software
#     HCA (cargo bench);
#  5. scripts/bench-report.py: the side-by-side table with ratios, raw
#     numbers (JSON, CSV) and PNG charts under results/bench-<time>/
#     (results/ is not committed; results/latest points at the newest).
#
# BENCH="rounds=1 quick=1 ..." passes knobs to the guest script;
# PARAMS="kick_elision=0" passes rmlx5.ko module parameters;
# SKIP_HOST=1 leaves out the host microbenchmarks (step 4).
# A measurement, not a test: it fails only when it cannot measure.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
. "$here/env.sh"
. "$here/guest-tools.sh"
cd "$top"
log() { printf 'bench: %s\n' "$*" >&2; }
t0=$(date +%s)

bash "$here/setup.sh"
kdir=$(bash "$here/kernel.sh" "$top/tests/kernel/bench.config")
make -s KDIR="$kdir" MO="$top/build/bench-module" ULP_MO="$top/build/bench-ulp" module
make -s guest-programs
userland=$(bash "$here/bench-userland.sh")

# matplotlib for the charts, in a venv in the cache (once).
venv=$CACHE/bench-venv
if ! "$venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
    log "installing matplotlib into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check matplotlib
fi

stamp=$(date -u +%Y%m%d-%H%M%S)
out=$top/results/bench-$stamp
mkdir -p "$out"
consolelog=$out/console.log

if [ "${SKIP_HOST:-0}" != 1 ]; then
log "host microbenchmarks (cargo bench)"
{
    echo "== provider fast path against the in-process software HCA (cargo bench -p rmlx5) =="
    cargo bench --quiet -p rmlx5 --bench fastpath 2>&1 | grep -v '^$'
    echo "== provider alone on the null device (cargo bench -p rmlx5 --features bench-backend --bench provider) =="
    cargo bench --quiet -p rmlx5 --features bench-backend --bench provider 2>&1 | grep -v '^$'
    echo "== software HCA execution cost per WQE (cargo bench -p hca-model) =="
    cargo bench --quiet -p hca-model --bench exec 2>&1 | grep -v '^$'
} | tee "$out/host-microbench.txt"
fi

accel=${RMLX5_ACCEL:-tcg}
log "booting the benchmark guest ($accel); this takes 10 to 20 minutes"
python3 "$top/tests/run-guest.py" --mode bench --kernel "$kdir/arch/x86/boot/bzImage" \
    --ksrc "$KSRC" --module "$top/build/bench-module/rmlx5.ko" "${guest_tools[@]}" \
    --overlay "$userland" --memory 2G --timeout 2400 --bench "${BENCH:-}" \
    --params "${PARAMS:-}" \
    --log "$consolelog" >"$out/guest-run.txt" || guest_rc=$?
tail -n 3 "$out/guest-run.txt" >&2
host_cpu=$(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo)
echo "@@BENCH-INFO accel=$accel host_cpu=\"$host_cpu\" host_cores=$(nproc) guest_cpus=2 guest_mem=2G" >>"$consolelog"

"$venv/bin/python" "$top/scripts/bench-report.py" --log "$consolelog" --out "$out"
ln -sfn "bench-$stamp" "$top/results/latest"
log "raw numbers, table and charts: $out (results/latest); $(( $(date +%s) - t0 )) s in all"
if [ "${guest_rc:-0}" != 0 ]; then
    log "the guest run reported a problem (see $out/guest-run.txt)"
    exit 1
fi
