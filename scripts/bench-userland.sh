#!/usr/bin/env bash
# Stage rdma-core's user space, perftest and iproute2 for the benchmark
# guest, or (profile `check`) iproute2's rdma tool for make check's guest
# (cached). Prints the staged root directory on stdout; run-guest.py
# copies it into the initramfs.
#
# The packages are Debian's, the same release as the host (so the host's C
# library and loader fit them): downloaded with `apt-get download`, unpacked
# with dpkg-deb, and only the programs the benchmark runs are staged, with
# every shared library `ldd` says they need. Providers: rxe and siw for the
# benchmark, mlx5 (libmlx5) for make check.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"

# Profiles: `bench` (default) stages what the benchmark runs; `check`
# stages only iproute2's rdma and ip, which make check's guest runs against
# rmlx5's ib_core devices (ip for the SMC-R run's veth pair and namespace).
profile=${1:-bench}
# What the guest runs, and the packages it comes from. The libraries are
# listed too, so a fresh machine that lacks one of them still works.
case "$profile" in
bench)
    PROGRAMS=(ib_send_lat ib_write_lat ib_send_bw ib_write_bw ibv_devices ibv_devinfo rdma ip)
    PACKAGES=(perftest rdma-core ibverbs-providers ibverbs-utils libibverbs1 librdmacm1 libibumad3
              iproute2 libpci3 libnl-3-200 libnl-route-3-200 libmnl0 libbsd0 libmd0 libcap2 libelf1)
    ;;
check)
    PROGRAMS=(rdma ip tc sysctl ibv_devices ibv_devinfo ibv_rc_pingpong python3.11
              ib_send_lat ib_write_lat ib_read_lat ib_send_bw ib_write_bw ib_read_bw ib_atomic_bw)
    PACKAGES=(iproute2 libmnl0 libbsd0 libmd0 libcap2 libelf1 libbpf1 zlib1g
              ibverbs-utils ibverbs-providers libibverbs1 rdma-core libnl-3-200 libnl-route-3-200
              python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libexpat1
              libpython3.11 libffi8 python3-pyverbs librdmacm1 perftest libibumad3 libpci3
              procps libproc2-0 libsystemd0 libncursesw6 libtinfo6 python3-yaml libyaml-0-2)
    ;;
*)
    echo "usage: $0 [bench|check]" >&2
    exit 2
    ;;
esac

log() { printf '%s-userland: %s\n' "$profile" "$*" >&2; }

versions=$(apt-cache policy "${PACKAGES[@]}" 2>/dev/null | awk '/^[a-z0-9]/{p=$1} /Candidate:/{print p, $2}')
if echo "$versions" | grep -q "(none)" || [ -z "$versions" ]; then
    log "refreshing the package index"
    if [ "$(id -u)" = 0 ]; then apt-get update -qq; else sudo apt-get update -qq; fi
    versions=$(apt-cache policy "${PACKAGES[@]}" | awk '/^[a-z0-9]/{p=$1} /Candidate:/{print p, $2}')
fi
key=$( { printf '%s\n' "${PROGRAMS[@]}"; echo "$versions"; cat "$0"; } | sha256sum | cut -c1-12)
out=$CACHE/$profile-userland-$key
if [ -f "$out/.staged" ]; then
    log "cached $out"
    echo "$out/root"
    exit 0
fi

rm -rf "$out" && mkdir -p "$out/debs" "$out/pkg" "$out/root"
log "downloading ${#PACKAGES[@]} Debian packages"
(cd "$out/debs" && apt-get download -qq "${PACKAGES[@]}" 2>&1 | grep -v "^W: Download is performed unsandboxed" >&2 || true)
for p in "${PACKAGES[@]}"; do
    ls "$out/debs/${p}"_*.deb >/dev/null 2>&1 || { log "package $p was not downloaded"; exit 1; }
done
for deb in "$out"/debs/*.deb; do
    dpkg-deb -x "$deb" "$out/pkg"
done

pkg=$out/pkg
root=$out/root
libpath=$pkg/usr/lib/x86_64-linux-gnu:$pkg/lib/x86_64-linux-gnu
mkdir -p "$root/usr/bin" "$root/usr/lib/x86_64-linux-gnu/libibverbs" "$root/etc/libibverbs.d" \
         "$root/lib/x86_64-linux-gnu" "$root/lib64"

# Copies one shared object to its path in the staged root (the path the
# guest's loader will look at: packaged libraries keep their place, host
# ones keep the host's).
stage_lib() {
    local src=$1 dst
    case "$src" in
    "$pkg"/*) dst=$root/${src#"$pkg"/} ;;
    *) dst=$root/$src ;;
    esac
    mkdir -p "$(dirname "$dst")"
    cp -L "$src" "$dst"
}

# Copies the libraries an ELF file needs (ldd, with the unpacked packages
# first on the search path); fails on any that cannot be found.
stage_deps() {
    local elf=$1 missing
    missing=$(LD_LIBRARY_PATH=$libpath ldd "$elf" | awk '/not found/{print $1}')
    if [ -n "$missing" ]; then
        log "$(basename "$elf") needs libraries no listed package has: $missing"
        exit 1
    fi
    LD_LIBRARY_PATH=$libpath ldd "$elf" | awk '/=> \//{print $3} /^\t\/lib64/{print $1}' |
        while read -r lib; do stage_lib "$lib"; done
}

for prog in "${PROGRAMS[@]}"; do
    src=$(find "$pkg/usr/bin" "$pkg/bin" "$pkg/usr/sbin" "$pkg/sbin" -maxdepth 1 -name "$prog" -type f 2>/dev/null | head -n1)
    [ -n "$src" ] || { log "$prog is in none of the packages"; exit 1; }
    cp "$src" "$root/usr/bin/$prog"
    stage_deps "$src"
done
# Providers: rxe and siw for the benchmark's comparison; rdma-core's mlx5
# provider (libmlx5) for make check, which runs rdma-core's tools on rmlx5.
providers=(mlx5)
[ "$profile" = bench ] && providers=(rxe siw)
for drv in "${providers[@]}"; do
    so=$(ls "$pkg"/usr/lib/x86_64-linux-gnu/libibverbs/lib$drv-rdmav*.so)
    cp -L "$so" "$root/usr/lib/x86_64-linux-gnu/libibverbs/"
    cp "$pkg/etc/libibverbs.d/$drv.driver" "$root/etc/libibverbs.d/"
    stage_deps "$so"
done
# rdma-core's pyverbs and its own test suite (make check): Python's
# standard library without what the tests never import, the extension
# modules whose libraries are staged, pyverbs, and the tests (shipped
# gzipped as documentation), compiled to bytecode here so the guest does
# not compile them at every boot.
if [ "$profile" = check ]; then
    py=$root/usr/lib/python3.11
    mkdir -p "$py" "$root/usr/lib/python3/dist-packages"
    (cd "$pkg/usr/lib/python3.11" && tar -c --exclude=./test --exclude=./idlelib \
        --exclude=./tkinter --exclude=./ensurepip --exclude=./lib2to3 --exclude=./pydoc_data \
        --exclude=./turtledemo --exclude=./lib-dynload . ) | tar -x -C "$py"
    mkdir -p "$py/lib-dynload"
    # Extension modules needing only the C library, libm, zlib, expat or libffi
    # (not OpenSSL, sqlite, Berkeley DB, ncurses, readline, ...).
    for so in "$pkg"/usr/lib/python3.11/lib-dynload/*.so; do
        extra=$(LD_LIBRARY_PATH=$libpath ldd "$so" | awk '/=>/{print $1}' |
            grep -vE '^(libc|libm|libz|libexpat|libpthread|libffi)\.so' || true)
        if [ -z "$extra" ]; then
            cp "$so" "$py/lib-dynload/"
            stage_deps "$so"
        fi
    done
    cp -r "$pkg/usr/lib/python3/dist-packages/pyverbs" "$root/usr/lib/python3/dist-packages/"
    # PyYAML, which the kernel's net selftest library imports (the RDS
    # selftest), with its libyaml extension.
    cp -r "$pkg/usr/lib/python3/dist-packages/yaml" "$root/usr/lib/python3/dist-packages/"
    for so in "$pkg"/usr/lib/python3/dist-packages/_yaml*.so; do
        [ -f "$so" ] && cp "$so" "$root/usr/lib/python3/dist-packages/" && stage_deps "$so"
    done
    find "$pkg/usr/lib/python3/dist-packages/pyverbs" -name '*.so' | while read -r so; do stage_deps "$so"; done
    for drv in efa; do
        so=$(ls "$pkg"/usr/lib/x86_64-linux-gnu/libibverbs/lib$drv-rdmav*.so 2>/dev/null || true)
        [ -n "$so" ] && stage_deps "$so"
    done
    tests=$root/usr/share/rdma-core/tests
    mkdir -p "$tests"
    cp -r "$pkg/usr/share/doc/rdma-core/tests/." "$tests/"
    find "$tests" -name '*.gz' -exec gunzip -f {} +
    ln -sf python3.11 "$root/usr/bin/python3"
    python3 -m compileall -q -j 0 "$py" "$root/usr/lib/python3/dist-packages" "$tests" >/dev/null ||
        log "compileall reported errors (the guest compiles those files itself)"
fi
# The loader where the programs' PT_INTERP names it.
cp -L /lib64/ld-linux-x86-64.so.2 "$root/lib64/"
mkdir -p "$root/etc"
{
    for p in perftest rdma-core iproute2 python3-pyverbs python3.11-minimal; do
        for deb in "$out"/debs/${p}_*.deb; do
            if [ -f "$deb" ]; then echo "$p $(dpkg-deb -f "$deb" Version)"; fi
        done
    done
} > "$root/etc/rmlx5-$profile-versions"
rm -rf "$out/pkg"
touch "$out/.staged"
log "staged $(find "$root" -type f | wc -l) files ($(du -sh "$root" | cut -f1)) in $root"
echo "$root"
