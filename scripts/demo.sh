#!/usr/bin/env bash
# `make demo`: set up, build, boot the test guest, load rmlx5 and show what
# it registered.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
. "$here/env.sh"
cd "$top"
bash "$here/setup.sh"
kdir=${KDIR:-$(bash "$here/kernel.sh")}
make -s KDIR="$kdir" module
python3 "$top/tests/run-guest.py" --mode demo --kernel "$kdir/arch/x86/boot/bzImage" \
    --ksrc "$KSRC" --module "$top/build/module/rmlx5.ko" --log "$top/build/demo-console.log"
