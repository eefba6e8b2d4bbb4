#!/usr/bin/env bash
# `make perf`: boot the test guest and print rmlx5-perf's latency and
# message-rate numbers between rmlx5_0 and rmlx5_1 (tests/guest/perf.sh).
# A measurement, not a test: nothing here passes or fails on a number.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
. "$here/env.sh"
. "$here/guest-tools.sh"
cd "$top"
bash "$here/setup.sh"
kdir=${KDIR:-$(bash "$here/kernel.sh")}
make -s KDIR="$kdir" module
make -s guest-programs
python3 "$top/tests/run-guest.py" --mode perf --kernel "$kdir/arch/x86/boot/bzImage" \
    --ksrc "$KSRC" --module "$top/build/module/rmlx5.ko" "${guest_tools[@]}" \
    --log "$top/build/perf-console.log"
