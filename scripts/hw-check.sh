#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR disable=SC2317  # (finish and what it calls run from the EXIT trap)
# `make hw-check PCI=0000:03:00.0`: make check's PCI suite on a real
# ConnectX function of this machine, for a tester with a card (see
# Documentation/pci.md, "Running the suites on a real card").
#
# Builds rmlx5.ko, the sample ULPs and the test programs against the
# running kernel (a Rust-enabled 7.3), takes the function from its driver
# (mlx5_core), runs tests/guest/pci-smoke.sh on it as the PCI guest of
# make check does (DRIVER=1; RMLX5_HW=1 skips what only the emulator is),
# then always unloads rmlx5 and gives the function back to its driver with
# its driver_override as it was. The logs go to build/hw-check-<date>.tar.gz.
# Last line `N passed, N failed`.
#
#   PCI=<domain:bus:dev.fn>  the function (required)
#   KDIR=<dir>               the running kernel's build tree
#                            (default /lib/modules/$(uname -r)/build)
#   HW_CHECK_TIMEOUT=<s>     the suite's time limit (default 1800)
#   HW_CHECK_FORCE=1         run even if the default route uses the function
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
# shellcheck source=env.sh
. "$here/env.sh"

sys=/sys/bus/pci
log() { printf 'hw-check: %s\n' "$*"; [ -z "${out:-}" ] || printf 'hw-check: %s\n' "$*" >> "$out/hw-check.log"; }
refuse() { printf 'hw-check: %s\n' "$@" >&2; exit 1; }

# The functions rmlx5 drives: device ID, pf/vf, model (drivers/rmlx5/cx.rs).
models() {
    sed -n 's/^ *(0x\([0-9a-f]\{4\}\), Model::\([pv]f\)("\([^"]*\)")),.*$/\1 \2 \3/p' \
        "$top/drivers/rmlx5/cx.rs"
}
# model_of DEVICE-ID: its model ("ConnectX-5", "ConnectX-5 VF"), or nothing.
model_of() {
    local id kind name
    while read -r id kind name; do
        if [ "$id" = "$1" ]; then
            [ "$kind" = vf ] && name="$name VF"
            echo "$name"
        fi
    done < <(models)
}
driver_of() { local d; d=$(readlink "$sys/devices/$1/driver"); echo "${d##*/}"; }
# What disappears with the function's driver: its netdevs and RDMA devices.
devices_of() {
    local d l=''
    for d in "$sys/devices/$1"/net/* "$sys/devices/$1"/infiniband/*; do
        [ ! -e "$d" ] || l="$l ${d##*/}"
    done
    l=${l# }
    echo "${l:-none}"
}
# The ConnectX functions of this machine, one per line.
list_cx() {
    local d id m n=0
    for d in "$sys"/devices/*; do
        [ "$(cat "$d/vendor")" = 0x15b3 ] || continue
        id=$(cut -c3- "$d/device")
        m=$(model_of "$id")
        [ -n "$m" ] || continue
        printf '    %s  15b3:%s %s, driver %s, %s\n' "${d##*/}" "$id" "$m" \
            "$(driver_of "${d##*/}")" "$(devices_of "${d##*/}")"
        n=$((n + 1))
    done
    [ $n -gt 0 ] || echo "    (none: this machine has no ConnectX function rmlx5 knows)"
}

# --- Refusals: nothing is built or changed before these pass.
PCI=${PCI:-}
if [ -z "$PCI" ]; then
    printf 'hw-check: PCI= is missing: make hw-check PCI=<domain:bus:device.function> names the ConnectX function to test; this machine has:\n' >&2
    list_cx >&2
    exit 2
fi
PCI=${PCI,,}
[[ $PCI =~ ^[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$ ]] && PCI=0000:$PCI
[[ $PCI =~ ^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$ ]] ||
    refuse "PCI=$PCI is not a PCI address (domain:bus:device.function, e.g. 0000:03:00.0)"
dev=$sys/devices/$PCI
if [ ! -e "$dev" ]; then
    printf 'hw-check: no ConnectX function at %s: there is no PCI function %s (%s); ConnectX functions here:\n' \
        "$PCI" "$PCI" "$dev" >&2
    list_cx >&2
    exit 1
fi
vendor=$(cat "$dev/vendor") devid=$(cut -c3- "$dev/device")
model=
[ "$vendor" = 0x15b3 ] && model=$(model_of "$devid")
if [ -z "$model" ]; then
    printf 'hw-check: no ConnectX function at %s: it is %s:%s (class %s), not one of the ConnectX IDs rmlx5 drives (15b3: %s); ConnectX functions here:\n' \
        "$PCI" "${vendor#0x}" "$devid" "$(cat "$dev/class")" "$(models | cut -d' ' -f1 | tr '\n' ' ' | sed 's/ $//')" >&2
    list_cx >&2
    exit 1
fi
[ "$(id -u)" = 0 ] ||
    refuse "run it as root (it loads modules and rebinds $PCI): sudo make hw-check PCI=$PCI"
[ "$(uname -m)" = x86_64 ] ||
    refuse "this machine is $(uname -m); the test programs are built for x86_64 only"
kver=$(uname -r)
[[ $kver =~ ^${KVER_MAJOR//./\\.}([.-]|$) ]] ||
    refuse "the running kernel is $kver; rmlx5 is built for Linux $KVER_MAJOR (boot a $KVER_MAJOR.x kernel with Rust support)"
kdir=${KDIR:-/lib/modules/$kver/build}
[ -f "$kdir/.config" ] ||
    refuse "no kernel build tree for $kver at $kdir (install the running kernel's build tree, or name it with KDIR=)"
grep -qx 'CONFIG_RUST=y' "$kdir/.config" ||
    refuse "the kernel build tree $kdir has no Rust support (CONFIG_RUST=y): rmlx5 is a Rust module"
krel=$(cat "$kdir/include/config/kernel.release" 2>/dev/null)
[ "$krel" = "$kver" ] ||
    refuse "the kernel build tree $kdir is for ${krel:-an unknown kernel}, not the running $kver"
[ -f "$kdir/Module.symvers" ] ||
    refuse "the kernel build tree $kdir has no Module.symvers (it needs a completed build)"

# Builds run as the user who called sudo, so that build/ and target/ stay
# theirs; the modules and programs then run as root.
builder=()
who=root
if [ -n "${SUDO_USER:-}" ] && [ "$SUDO_USER" != root ]; then
    who=$SUDO_USER
    uhome=$(getent passwd "$SUDO_USER" | cut -d: -f6)
    builder=(runuser -u "$SUDO_USER" -- env "HOME=$uhome" "PATH=$uhome/.cargo/bin:$PATH")
fi
as_builder() { ${builder[@]+"${builder[@]}"} "$@"; }
for c in make:make python3:python3 lspci:pciutils hexdump:bsdextrautils modinfo:kmod \
    modprobe:kmod insmod:kmod rmmod:kmod runuser:util-linux timeout:coreutils tar:tar; do
    command -v "${c%:*}" > /dev/null || refuse "${c%:*} is missing (package ${c#*:})"
done
as_builder sh -c 'command -v cargo' > /dev/null || refuse "no cargo for $who (it builds the test programs)"
# An out-of-tree Rust module needs the kernel's own rustc.
want=$(sed -n 's/^CONFIG_RUSTC_VERSION_TEXT="\(.*\)"$/\1/p' "$kdir/.config")
have=$(as_builder rustc --version 2>/dev/null)
[ -z "$want" ] || [ "$have" = "$want" ] ||
    refuse "the kernel was built with $want, but rustc for $who is ${have:-missing}: install that toolchain (e.g. rustup default <version>)"
# The C compiler of the kernel: clang (LLVM=-<major> or LLVM=1) or gcc.
llvm=
if grep -qx 'CONFIG_CC_IS_CLANG=y' "$kdir/.config"; then
    major=$(( $(sed -n 's/^CONFIG_CLANG_VERSION=//p' "$kdir/.config") / 10000 ))
    if as_builder sh -c "command -v clang-$major" > /dev/null; then
        llvm=-$major
    elif [ "$(as_builder clang -dumpversion 2>/dev/null | cut -d. -f1)" = "$major" ]; then
        llvm=1
    else
        refuse "the kernel was built with clang $major: install clang-$major (and its lld and llvm tools)"
    fi
else
    as_builder sh -c 'command -v gcc' > /dev/null || refuse "the kernel was built with gcc, which is missing"
fi
# Unsigned out-of-tree modules and BAR access through sysfs.
[ "$(cat /sys/module/module/parameters/sig_enforce 2>/dev/null)" != Y ] ||
    refuse "this kernel loads signed modules only (module.sig_enforce): rmlx5.ko is unsigned"
lockdown=$(sed -n 's/.*\[\(.*\)\].*/\1/p' /sys/kernel/security/lockdown 2>/dev/null)
[ -z "$lockdown" ] || [ "$lockdown" = none ] ||
    refuse "kernel lockdown is $lockdown (Secure Boot?): it refuses unsigned modules and reading BAR0 through sysfs"
# The machine as the run needs it.
for m in rmlx5 rmlx5_ulp rmlx5_ibtest rmlx5_cmtest; do
    [ ! -d "/sys/module/$m" ] || refuse "$m is loaded: rmmod it first"
done
orig_driver=$(driver_of "$PCI")
orig_override=$(cat "$dev/driver_override")
case "$orig_driver" in
"" | mlx5_core | pci-stub) ;;
*) refuse "$PCI is bound to $orig_driver, not mlx5_core (assigned to a VM?): hw-check takes it only from mlx5_core, pci-stub or no driver" ;;
esac
[ "$orig_override" != rmlx5_cx ] ||
    refuse "$PCI's driver_override is rmlx5_cx (left by an earlier run?): echo > $dev/driver_override, and bind it to mlx5_core first"
vfs=$(cat "$dev/sriov_numvfs" 2>/dev/null || echo 0)
[ "$vfs" = 0 ] ||
    refuse "$PCI has $vfs VFs enabled: echo 0 > $dev/sriov_numvfs first"
# Its netdevs and what they are enslaved to: not the way out of the machine.
netdevs=$(ls "$dev/net" 2>/dev/null)
ups=$netdevs
for n in $netdevs; do
    for u in /sys/class/net/"$n"/upper_*; do
        [ ! -e "$u" ] || ups="$ups ${u##*/upper_}"
    done
done
if [ -n "$netdevs" ] && command -v ip > /dev/null && [ "${HW_CHECK_FORCE:-0}" != 1 ]; then
    routes=$({ ip -o route show default; ip -o -6 route show default; } 2> /dev/null)
    for n in $ups; do
        if grep -qw "dev $n" <<< "$routes"; then
            refuse "the default route goes through $n, which disappears while $PCI is away from $orig_driver: this would take the machine off the network (HW_CHECK_FORCE=1 runs anyway)"
        fi
    done
fi

# --- From here the results go to build/hw-check-<date>/.
start=$(date +%s)
stamp=$(date +%Y%m%d-%H%M%S)
hb=$top/build/hw-check
as_builder mkdir -p "$hb"
name=hw-check-$stamp
out=$top/build/$name
mkdir -p "$out"
root=$hb/root
marker="rmlx5 hw-check: start $stamp"
phase=build touched='' suite_pid='' tail_pid='' stub_loaded='' restored='' finished=
status=1

# bounded WHAT SECONDS COMMAND...: COMMAND, given at most SECONDS. An
# rmmod or unbind of rmlx5 waits in the kernel, uninterruptibly, while a
# process keeps one of its devices open; then it is left waiting.
bounded() {
    local what=$1 n=$2 pid i
    shift 2
    "$@" &
    pid=$!
    for ((i = 0; i < n * 5; i++)); do
        if ! kill -0 "$pid" 2> /dev/null; then
            wait "$pid"
            return
        fi
        sleep 0.2
    done
    log "$what has not finished in $n s: a process still has one of rmlx5's devices open?"
    return 1
}
write() { echo "$1" > "$2"; }

# restore: unloads what the suite may have left, puts the override back,
# and binds the function to its original driver.
restore() {
    local m cur ovr
    restored=1
    for m in rmlx5_ulp rmlx5_ibtest rmlx5_cmtest rmlx5; do
        if [ -d "/sys/module/$m" ]; then
            if bounded "rmmod $m" 120 rmmod "$m"; then
                log "unloaded $m"
            else
                log "could not unload $m"
                restored=
            fi
        fi
    done
    if [ "$orig_override" = "(null)" ]; then
        write "" "$dev/driver_override"
    else
        write "$orig_override" "$dev/driver_override"
    fi
    cur=$(driver_of "$PCI")
    if [ "$cur" != "$orig_driver" ]; then
        if [ -z "$cur" ] || bounded "unbinding $PCI from $cur" 60 write "$PCI" "$dev/driver/unbind"; then
            if [ -n "$orig_driver" ]; then
                write "$PCI" "$sys/drivers/$orig_driver/bind" 2> /dev/null ||
                    write "$PCI" "$sys/drivers_probe" 2> /dev/null
            fi
        fi
    fi
    if [ -n "$stub_loaded" ] && [ -z "$(ls -d "$sys"/drivers/pci-stub/0000:* 2>/dev/null)" ]; then
        modprobe -r pci-stub
    fi
    cur=$(driver_of "$PCI")
    ovr=$(cat "$dev/driver_override")
    if [ "$cur" = "$orig_driver" ] && [ "$ovr" = "$orig_override" ] && [ -n "$restored" ]; then
        log "restored: $PCI is back on ${orig_driver:-no driver}, driver_override $ovr; its devices: $(devices_of "$PCI")"
    else
        restored=
        log "NOT restored: $PCI is on ${cur:-no driver}, driver_override $ovr; by hand:"
        recovery
    fi
}
recovery() {
    printf '    rmmod rmlx5_ulp rmlx5_ibtest rmlx5\n'
    if [ "$orig_override" = "(null)" ]; then
        printf '    echo > %s/driver_override\n' "$dev"
    else
        printf '    echo %s > %s/driver_override\n' "$orig_override" "$dev"
    fi
    printf '    echo %s > %s/driver/unbind\n' "$PCI" "$dev"
    if [ -n "$orig_driver" ]; then
        printf '    echo %s > %s/drivers/%s/bind\n' "$PCI" "$sys" "$orig_driver"
    fi
}

# judge: the suite's markers (stdout) and the kernel's (the sample ULPs
# print theirs to the kernel log), counted as tests/run-guest.py counts the
# guest's console, with its patterns for kernel problems.
judge() {
    python3 - "$top" "$out/suite.log" "$out/dmesg.txt" "$1" "$out/counts" <<'EOF'
import importlib.util, re, sys
top, suite_log, dmesg_log, timed_out, counts = sys.argv[1:6]
spec = importlib.util.spec_from_file_location("run_guest", f"{top}/tests/run-guest.py")
rg = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rg)
SKIP = re.compile(r"rmlx5-test: SKIP ([^:\s]+)(?::\s*(.*))?")

def lines(path):
    try:
        with open(path, errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return []

suite, kern = lines(suite_log), lines(dmesg_log)
results, skipped, problems = [], [], []
failed_since_exit = False
for l in suite:
    m = rg.MARKER.search(l)
    if m:
        failed_since_exit |= m.group(1) != "PASS"
        results.append((m.group(1) == "PASS", m.group(2), m.group(3) or ""))
        continue
    m = SKIP.search(l)
    if m:
        skipped.append((m.group(1), m.group(2) or ""))
        continue
    m = rg.EXIT.search(l)
    if m:
        if m.group(2) != "0" and not failed_since_exit:
            results.append((False, m.group(1), f"exited with status {m.group(2)}"))
        failed_since_exit = False
for l in kern:
    m = rg.MARKER.search(l)
    if m:
        results.append((m.group(1) == "PASS", m.group(2), m.group(3) or ""))
if timed_out == "1":
    problems.append(("timeout", "the suite did not finish in time", None))
elif not any("==== end of pci-smoke" in l for l in suite):
    problems.append(("suite_incomplete", "the suite stopped before its end", None))
for i, l in enumerate(kern):
    if rg.KERNEL_PROBLEMS.search(l):
        known = rg.known_upstream(kern, i)
        if known:
            print(f"hw-check: known upstream report {known[0]} ({known[1]}), not counted")
            continue
        problems.append(("kernel_log", "the kernel reported a problem", i))
        break
if not results:
    problems.append(("no_results", "the suite reported no test results", None))
passed = failed = 0
for ok, name, why in results:
    if ok:
        passed += 1
        print(f"hw-check: PASS {name}")
    else:
        failed += 1
        print(f"hw-check: FAIL {name}: {why}")
for name, why in skipped:
    print(f"hw-check: SKIP {name}: {why}")
for name, why, i in problems:
    failed += 1
    print(f"hw-check: FAIL {name}: {why}")
    if i is not None:
        print(rg.excerpt(kern, i))
with open(counts, "w") as f:
    f.write(f"{passed} {failed} {len(skipped)}\n")
EOF
}

finish() {
    local rc=$? p=0 f=0 s=0 fw
    trap '' INT TERM HUP
    [ -z "$finished" ] || return
    finished=1
    if [ -n "$suite_pid" ] && kill -0 "$suite_pid" 2> /dev/null; then
        log "stopping the suite"
        kill -TERM -- "-$suite_pid" 2> /dev/null
        sleep 3
        kill -KILL -- "-$suite_pid" 2> /dev/null
        wait "$suite_pid" 2> /dev/null
    fi
    [ -z "$tail_pid" ] || kill "$tail_pid" 2> /dev/null
    if [ -n "$touched" ]; then
        restore
    elif [ -n "$stub_loaded" ]; then
        modprobe -r pci-stub
    fi
    uname -a > "$out/uname.txt"
    if [ "$phase" = run ]; then
        # The kernel log since the start, as the suite saw it.
        "$root/bin/dmesg" > "$out/dmesg.txt"
        dmesg | grep -q "$marker" ||
            log "the kernel log wrapped during the run: dmesg.txt misses its start"
        if command -v journalctl > /dev/null; then
            journalctl -k --since "@$start" --no-pager > "$out/journal-k.txt" 2>&1
        fi
        lspci -vvv -s "$PCI" > "$out/lspci-after.txt" 2>&1
        fw=$(sed -n "s/.*rmlx5_cx $PCI: .* up: firmware \([0-9.]*\),.*/\1/p" "$out/dmesg.txt" | head -n 1)
        echo "firmware (rmlx5's bring-up line): ${fw:-not in the log}" >> "$out/firmware.txt"
        judge "${timed_out:-0}" | tee "$out/summary.txt"
        read -r p f s < "$out/counts" 2> /dev/null || f=1
        [ -n "$restored" ] || { f=$((f + 1)); echo "hw-check: FAIL restore: $PCI is not back as it was" | tee -a "$out/summary.txt"; }
        log "firmware ${fw:-unknown}; $s skipped; $(( $(date +%s) - start )) s in all"
    elif [ "$phase" = build ]; then
        f=1
        log "the build failed or was interrupted; the machine was not touched (build.log)"
    else
        f=1
        log "stopped before the suite ran (exit status $rc)"
    fi
    tar -C "$top/build" -czf "$top/build/$name.tar.gz" "$name"
    if [ -n "${SUDO_UID:-}" ]; then
        chown -R "$SUDO_UID:${SUDO_GID:-$SUDO_UID}" "$out" "$top/build/$name.tar.gz" "$root" 2> /dev/null
    fi
    log "results: build/$name.tar.gz (logs in build/$name/); please send the tarball back"
    echo "$p passed, $f failed"
    [ "$f" = 0 ] && status=0
    exit "$status"
}
trap finish EXIT
trap 'log "interrupted"; exit 130' INT TERM HUP

# What the run starts from.
{
    echo "function $PCI: 15b3:$devid $model, driver ${orig_driver:-none}, driver_override $orig_override"
    echo "kernel $kver, build tree $kdir, LLVM=${llvm:-(gcc)}, $want"
    echo "rmlx5 $(as_builder git -C "$top" describe --always --dirty 2>/dev/null)"
} > "$out/info.txt"
lspci -vvv -s "$PCI" > "$out/lspci.txt" 2>&1
for d in "$dev"/infiniband/*; do
    [ -d "$d" ] || continue
    echo "${d##*/} (mlx5_core): fw_ver $(cat "$d/fw_ver" 2>/dev/null), board_id $(cat "$d/board_id" 2>/dev/null)"
done > "$out/firmware.txt"
log "$PCI: $model (15b3:$devid) on ${orig_driver:-no driver}; results in build/$name/"

# --- Build, as make check builds for its PCI guest, into build/hw-check/.
# build WHAT COMMAND...: as the builder, output to build.log.
build() {
    log "building $1 (log: build/$name/build.log)"
    shift
    if ! as_builder "$@" >> "$out/build.log" 2>&1; then
        tail -n 30 "$out/build.log"
        exit 1
    fi
}
build "rmlx5.ko and the sample ULP against $kdir" \
    make -C "$top" -s KDIR="$kdir" LLVM="$llvm" MO="$hb/module" ULP_MO="$hb/ulp" module
if grep -q '^CONFIG_INFINIBAND=[ym]' "$kdir/.config"; then
    as_builder mkdir -p "$hb/ibtest"
    build "the ib_core test ULP" \
        make -C "$kdir" -s M="$top/samples/rmlx5_ibcore" MO="$hb/ibtest" LLVM="$llvm" modules
fi
# The C direct-verbs sample (dv-sample) does not run on the function.
build "the test programs and tools (make guest-programs)" make -C "$top" -s -o dv-sample guest-programs
build "rmlx5-pci-peek" env RUSTFLAGS="-C target-feature=+crt-static" cargo build --quiet --release \
    --manifest-path "$top/Cargo.toml" --target x86_64-unknown-linux-gnu \
    --target-dir "$top/target/guest" -p cx-emu --bin rmlx5-pci-peek
phase=stage

# The guest's layout (tests/run-guest.py): modules in lib/modules, the
# PCI guest's test programs in tests, the tools in bin; a dmesg that starts
# at this run, as the guest's kernel log starts at boot.
rm -rf "$root"
mkdir -p "$root/lib/modules" "$root/tests" "$root/bin"
cp "$hb/module/rmlx5.ko" "$hb/ulp/rmlx5_ulp.ko" "$root/lib/modules/"
[ ! -f "$hb/ibtest/rmlx5_ibtest.ko" ] || cp "$hb/ibtest/rmlx5_ibtest.ko" "$root/lib/modules/"
# The programs and tools scripts/check.sh gives its first PCI guest.
# shellcheck source=guest-tools.sh
. "$here/guest-tools.sh"
for p in provider events abi kpath; do
    cp "$guest_bin/rmlx5-$p-tests" "$root/tests/"
done
cp "$guest_bin/rmlx5-pci-peek" "$root/bin/"
for t in "${guest_tools[@]}"; do
    [ "$t" = --tool ] || cp "$t" "$root/bin/"
done
for s in pci-smoke rdma-core pyverbs; do
    sed '1s|^#!/bin/busybox sh$|#!/usr/bin/env bash|' "$top/tests/guest/$s.sh" > "$root/tests/$s.sh"
    chmod 755 "$root/tests/$s.sh"
done
cat > "$root/bin/dmesg" <<EOF
#!/bin/sh
# hw-check: the kernel log since "$marker".
$(command -v dmesg) "\$@" | awk -v m="$marker" 'index(\$0, m) { n = 0; next } { l[n++] = \$0 } END { for (i = 0; i < n; i++) print l[i] }'
EOF
chmod 755 "$root/bin/dmesg"

# What the modules need that a distribution kernel has as modules (the
# test kernel has them built in), and the stand-in driver the suite uses.
for m in $(for ko in "$root"/lib/modules/*.ko; do modinfo -F depends "$ko" | tr ',' '\n'; done | sort -u); do
    [ "$m" = rmlx5 ] || modprobe "$m" || exit 1
done
if [ ! -d "$sys/drivers/pci-stub" ]; then
    modprobe pci-stub || exit 1
    stub_loaded=1
fi
mountpoint -q /sys/kernel/debug || mount -t debugfs debugfs /sys/kernel/debug

# rdma-core's programs run on the function when ibv_devinfo is installed.
if [ -x /usr/bin/ibv_devinfo ]; then
    missing=
    command -v ib_write_lat > /dev/null || missing="$missing perftest"
    python3 -c 'import pyverbs' 2> /dev/null || missing="$missing python3-pyverbs"
    command -v rdma > /dev/null || missing="$missing iproute2's rdma"
    [ -z "$missing" ] || log "rdma-core is installed without$missing: the cx_rdmacore cases that need it fail"
    [ "$devid" = 1017 ] ||
        log "cx_rdmacore_ibv_devinfo checks ConnectX-5's part ID (4119): it fails on this $model"
else
    log "no rdma-core here (ibverbs-utils): the cx_rdmacore_* and cx_pyverbs cases do not run"
fi
# Daemons that open every RDMA device would hold rmlx5's through unbind.
for p in ibacm srp_daemon; do
    ! pgrep -x "$p" > /dev/null ||
        log "$p is running: it may open rmlx5's devices and hold up their removal; consider stopping it"
done
log "not run on a card: make check's other PCI guests (firmware never ready, one MSI-X vector, swiotlb=force) and the INIT_HCA the emulator fails on purpose"

# --- The run. From the unbind on, the EXIT trap gives the function back.
log "$PCI leaves ${orig_driver:-no driver} for about 5 to 15 minutes: $(devices_of "$PCI") go away until then"
log "if this machine is interrupted for good, put it back by hand (as root):"
recovery | tee -a "$out/hw-check.log"
if [ -t 0 ]; then
    log "starting in 10 s (Ctrl-C stops here)"
    sleep 10
fi
echo "$marker" > /dev/kmsg
kml=/sys/kernel/debug/kmemleak
if [ -w $kml ]; then
    echo scan > $kml
    echo clear > $kml
fi
phase=run
touched=1
if [ -n "$orig_driver" ]; then
    log "unbinding $PCI from $orig_driver"
    echo "$PCI" > "$dev/driver/unbind"
fi
limit=${HW_CHECK_TIMEOUT:-1800}
log "running tests/guest/pci-smoke.sh on $PCI (RMLX5_HW=1, at most $limit s; log: build/$name/suite.log)"
: > "$out/suite.log"
(cd "$root" && exec env RMLX5_HW=1 RMLX5_PCI="$PCI" RMLX5_ROOT="$root" RMLX5_NUM_HCAS=2 \
    PATH="$root/bin:$root/tests:$PATH" timeout -k 30 "$limit" bash "$root/tests/pci-smoke.sh") \
    < /dev/null > "$out/suite.log" 2>&1 &
suite_pid=$!
tail -n +1 -f --pid="$suite_pid" "$out/suite.log" | grep --line-buffered -E 'rmlx5-test: (PASS|FAIL|SKIP)' &
tail_pid=$!
wait "$suite_pid"
rc=$?
suite_pid=''
timed_out=0
[ $rc != 124 ] && [ $rc != 137 ] || timed_out=1
wait "$tail_pid" 2> /dev/null
tail_pid=''
[ $timed_out = 0 ] || log "the suite did not finish in $limit s: stopped"
# /init's kmemleak scan after the suite (cx_kmemleak).
if [ -w $kml ]; then
    sleep 6
    echo scan > $kml
    echo scan > $kml
    report=$(cat $kml)
    if [ -n "$report" ]; then
        echo "$report" >> "$out/suite.log"
        echo "rmlx5-test: FAIL cx_kmemleak: unreferenced objects reported (see above)" >> "$out/suite.log"
    else
        echo "rmlx5-test: PASS cx_kmemleak" >> "$out/suite.log"
    fi
else
    echo "rmlx5-test: SKIP cx_kmemleak: kmemleak is not in this kernel" >> "$out/suite.log"
fi
log "giving $PCI back"
exit 0
