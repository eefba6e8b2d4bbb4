#!/usr/bin/env bash
# `make demo`: set up, build, boot the test guest, load rmlx5, show what it
# registered and run the pingpong between rmlx5_0 and rmlx5_1 in polling
# and event modes, then rdma-core's ibv_devinfo and ibv_rc_pingpong on the
# same devices (tests/guest/demo.sh).
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
# rdma-core's tools for the guest (Debian's packages, cached).
overlay=()
if userland=$(bash "$here/bench-userland.sh" check); then
    overlay=(--overlay "$userland")
fi
python3 "$top/tests/run-guest.py" --mode demo --kernel "$kdir/arch/x86/boot/bzImage" \
    --ksrc "$KSRC" --module "$top/build/module/rmlx5.ko" "${guest_tools[@]}" "${overlay[@]}" \
    --log "$top/build/demo-console.log"
