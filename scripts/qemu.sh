#!/usr/bin/env bash
# Find or fetch the QEMU that carries the emulated ConnectX (cached).
#
# The emulated ConnectX (rust/cx-emu) is a vfio-user server; QEMU's
# `vfio-user-pci` client exists from QEMU 10.1 on, and Debian 12's QEMU is
# 7.2. Debian 13's backports build (trixie-backports) has it but does not
# install on Debian 12, so this script downloads it and its trixie runtime
# libraries with a private apt configuration (nothing under /etc/apt is
# read for sources or written, nothing is installed), unpacks the .debs
# into one tree under $CACHE and writes a wrapper that runs QEMU through
# that tree's own dynamic loader and libraries. Prints the wrapper's path
# on stdout.
#
# The tree is keyed by QEMU's version and a hash of the resolved package
# list, $CACHE/qemu-<version>-<hash>/; $CACHE/qemu-current names the one
# in use, so a second run answers at once without touching the network.
#
# Environment:
#   RMLX5_QEMU=<path>          use this QEMU (>= 10.1 with vfio-user-pci)
#   RMLX5_QEMU_REFRESH=1       resolve the package list again (picks up a
#                              newer backport; the old tree stays cached)
#   RMLX5_DEBIAN_MIRROR=<uri>  default http://deb.debian.org/debian
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"

log() { printf 'qemu: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# The oldest QEMU whose vfio-user client we know works with rust/cx-emu,
# and the layout of the tree this script writes (bump it when the wrapper
# or the unpacking changes, so old trees are not reused).
QEMU_MIN=10.1
LAYOUT=1
SUITE=trixie-backports
BASE_SUITE=trixie
MIRROR=${RMLX5_DEBIAN_MIRROR:-http://deb.debian.org/debian}
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
# What QEMU needs from the backports suite; apt resolves the rest from
# trixie.
WANT=(qemu-system-x86 qemu-system-common qemu-system-data seabios)
# Pulled in only by the packages' maintainer scripts (the kvm group, PAM):
# QEMU itself never loads them.
SKIP=(adduser base-passwd debconf libaudit-common libaudit1 libdb5.3t64 libdebconfclient0
      libpam-modules libpam-modules-bin libpam0g libsemanage-common libsemanage2 login.defs
      passwd)

if [ -n "${RMLX5_QEMU:-}" ]; then
    echo "$RMLX5_QEMU"
    exit 0
fi

current=$CACHE/qemu-current
if [ "${RMLX5_QEMU_REFRESH:-0}" != 1 ] && [ -f "$current" ]; then
    dir=$(cat "$current")
    if [ -f "$dir/.rmlx5-built" ] && [ "$(cat "$dir/.rmlx5-built")" = "layout $LAYOUT" ]; then
        log "cached $dir"
        echo "$dir/qemu-system-x86_64"
        exit 0
    fi
fi

mkdir -p "$CACHE"
exec 9>"$CACHE/qemu.lock"
flock 9

# A private apt: its own sources, lists, package cache and an empty dpkg
# status (so apt resolves the whole dependency closure as for an empty
# system). apt.conf.d is still read for proxies and mirror settings.
apt_dir=$CACHE/qemu-apt
mkdir -p "$apt_dir/etc/preferences.d" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
cat >"$apt_dir/apt.conf" <<EOF
Dir::State "$apt_dir";
Dir::State::Lists "$apt_dir/lists";
Dir::State::status "$apt_dir/status";
Dir::Cache "$apt_dir/cache";
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
Dir::Etc::SourceList "$apt_dir/etc/sources.list";
Dir::Etc::SourceParts "/nonexistent";
Dir::Etc::Preferences "$apt_dir/etc/preferences";
Dir::Etc::PreferencesParts "$apt_dir/etc/preferences.d";
Debug::NoLocking "true";
APT::Sandbox::User "root";
APT::Default-Release "$BASE_SUITE";
EOF
cat >"$apt_dir/etc/sources.list" <<EOF
deb [signed-by=$KEYRING] $MIRROR $BASE_SUITE main
deb [signed-by=$KEYRING] $MIRROR $SUITE main
EOF
: >"$apt_dir/etc/preferences"
: >"$apt_dir/status"
export APT_CONFIG=$apt_dir/apt.conf

start=$(date +%s)
log "resolving ${WANT[*]} from $SUITE ($MIRROR)"
apt-get update -qq >"$apt_dir/update.log" 2>&1 ||
    { cat "$apt_dir/update.log" >&2; die "apt-get update of $BASE_SUITE + $SUITE failed (see above)"; }

targets=()
for p in "${WANT[@]}"; do targets+=("$p/$SUITE"); done
if ! apt-get install -s -qq --no-install-recommends "${targets[@]}" >"$apt_dir/resolve.log" 2>&1; then
    cat "$apt_dir/resolve.log" >&2
    die "the mirror cannot provide ${WANT[*]} from $SUITE (see above)"
fi
# "Inst <name> (<version> <suite> [<arch>])": the closure, minus what QEMU
# never loads.
pkgs=()
while read -r name version; do
    case " ${SKIP[*]} " in *" $name "*) continue ;; esac
    pkgs+=("$name=$version")
done < <(sed -n 's/^Inst \([^ ]*\) (\([^ ]*\) .*/\1 \2/p' "$apt_dir/resolve.log" | sort)
[ ${#pkgs[@]} -gt 0 ] || die "apt resolved no packages (see $apt_dir/resolve.log)"

qver=$(printf '%s\n' "${pkgs[@]}" | sed -n 's/^qemu-system-x86=//p')
[ -n "$qver" ] || die "qemu-system-x86 is not in the resolved list (see $apt_dir/resolve.log)"
if ! dpkg --compare-versions "${qver#*:}" ge "$QEMU_MIN"; then
    die "$SUITE has qemu-system-x86 $qver; vfio-user-pci needs $QEMU_MIN or later"
fi
upstream=${qver#*:}
upstream=${upstream%%[+~-]*}
key=$( { printf '%s\n' "${pkgs[@]}"; echo "layout $LAYOUT"; } | sha256sum | cut -c1-12)
dir=$CACHE/qemu-$upstream-$key

if [ ! -f "$dir/.rmlx5-built" ]; then
    log "downloading ${#pkgs[@]} packages for QEMU $qver"
    rm -rf "$dir.tmp"
    mkdir -p "$dir.tmp/debs" "$dir.tmp/root"
    if ! (cd "$dir.tmp/debs" && apt-get download -qq "${pkgs[@]}") >"$dir.tmp/download.log" 2>&1; then
        cat "$dir.tmp/download.log" >&2
        missing=()
        for p in "${pkgs[@]}"; do
            ls "$dir.tmp/debs/${p%%=*}_"*.deb >/dev/null 2>&1 || missing+=("$p")
        done
        die "the mirror lacks ${missing[*]:-some packages} (see above); try RMLX5_QEMU_REFRESH=1 later or RMLX5_DEBIAN_MIRROR"
    fi
    log "unpacking into $dir"
    for deb in "$dir.tmp"/debs/*.deb; do
        dpkg-deb -x "$deb" "$dir.tmp/root"
    done
    printf '%s\n' "${pkgs[@]}" >"$dir.tmp/packages.txt"
    rm -rf "$dir.tmp/debs"

    # Run QEMU through trixie's loader with trixie's libraries: Debian 12's
    # glibc is too old for it. Under an explicitly invoked loader QEMU finds
    # itself as ld.so, so its data and module directories are given too.
    cat >"$dir.tmp/qemu-system-x86_64" <<'EOF'
#!/bin/sh
# Written by rmlx5's scripts/qemu.sh: Debian's QEMU from the tree next to
# this file, run through that tree's own loader and libraries.
R=$(cd "$(dirname "$0")" && pwd)/root
L=$R/usr/lib/x86_64-linux-gnu
export QEMU_MODULE_DIR="$L/qemu" GCONV_PATH="$L/gconv"
exec "$L/ld-linux-x86-64.so.2" --inhibit-cache --library-path "$L" \
    "$R/usr/bin/qemu-system-x86_64" -L "$R/usr/share/qemu" -L "$R/usr/share/seabios" "$@"
EOF
    chmod 755 "$dir.tmp/qemu-system-x86_64"
    out=$("$dir.tmp/qemu-system-x86_64" -version 2>&1) ||
        { echo "$out" >&2; die "the unpacked QEMU does not run (see above)"; }
    log "$(echo "$out" | head -n1)"
    "$dir.tmp/qemu-system-x86_64" -device vfio-user-pci,help >/dev/null 2>&1 ||
        die "the unpacked QEMU has no vfio-user-pci device"
    echo "layout $LAYOUT" >"$dir.tmp/.rmlx5-built"
    rm -rf "$dir"
    mv "$dir.tmp" "$dir"
    log "ready in $(( $(date +%s) - start )) s ($(du -sh "$dir" | cut -f1))"
else
    log "cached $dir"
fi
echo "$dir" >"$current.tmp"
mv "$current.tmp" "$current"
echo "$dir/qemu-system-x86_64"
