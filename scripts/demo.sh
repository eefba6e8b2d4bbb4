#!/usr/bin/env bash
# `make demo`: set up, build, boot the test guest, load rmlx5, show what it
# registered and run the pingpong between rmlx5_0 and rmlx5_1 in polling
# and event modes (tests/guest/demo.sh).
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
python3 "$top/tests/run-guest.py" --mode demo --kernel "$kdir/arch/x86/boot/bzImage" \
    --ksrc "$KSRC" --module "$top/build/module/rmlx5.ko" "${guest_tools[@]}" \
    --log "$top/build/demo-console.log"
