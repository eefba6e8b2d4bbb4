#!/usr/bin/env bash
# Idempotent setup for building and testing rmlx5 on a fresh Debian 12 machine:
# Debian packages, the rust-src component, a pinned bindgen-cli, and Debian's
# linux-source-7.3 (from trixie-backports, pinned low so that nothing else on
# the machine is ever upgraded from that suite). Each step is skipped quickly
# when it is already done.
set -euo pipefail

. "$(dirname "$0")/env.sh"

log() { printf 'setup: %s\n' "$*"; }

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

PACKAGES=(clang-19 lld-19 llvm-19 libclang-19-dev qemu-system-x86 flex bison bc
          libelf-dev libssl-dev cpio busybox-static pahole libibverbs-dev
          python3 make gcc xz-utils)

# 1. trixie-backports, pinned so that only what we ask for by name comes from it.
SRC=/etc/apt/sources.list.d/rmlx5-trixie-backports.sources
PIN=/etc/apt/preferences.d/rmlx5-trixie-backports
apt_updated=0
if [ ! -f "$SRC" ] || [ ! -f "$PIN" ]; then
    log "adding trixie-backports (pin priority 1) for linux-source-${KVER_MAJOR}"
    $SUDO tee "$SRC" >/dev/null <<EOS
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOS
    $SUDO tee "$PIN" >/dev/null <<EOS
# rmlx5: take only linux-source-${KVER_MAJOR} from trixie-backports, by name.
Package: *
Pin: release n=trixie-backports
Pin-Priority: 1
EOS
    $SUDO apt-get update -qq
    apt_updated=1
fi

missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing Debian packages: ${missing[*]}"
    [ "$apt_updated" = 1 ] || $SUDO apt-get update -qq
    apt_updated=1
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# 2. Rust: the kernel needs the standard library's source and bindgen.
if ! rustup component list --installed 2>/dev/null | grep -q '^rust-src'; then
    log "rustup component add rust-src"
    rustup component add rust-src
fi
if ! command -v bindgen >/dev/null || [ "$(bindgen --version 2>/dev/null | awk '{print $2}')" != "$BINDGEN_VERSION" ]; then
    log "cargo install bindgen-cli@$BINDGEN_VERSION"
    cargo install --locked --quiet bindgen-cli --version "$BINDGEN_VERSION"
fi

# 3. Debian's kernel source, unpacked once into the cache.
if [ ! -f "$KSRC/Makefile" ]; then
    mkdir -p "$CACHE/src"
    tarball=$(ls /usr/src/linux-source-${KVER_MAJOR}.tar.* 2>/dev/null | head -n1 || true)
    if [ -z "$tarball" ]; then
        log "downloading linux-source-${KVER_MAJOR}"
        [ "$apt_updated" = 1 ] || $SUDO apt-get update -qq
        tmp=$(mktemp -d)
        (cd "$tmp" && apt-get download -qq "linux-source-${KVER_MAJOR}")
        dpkg-deb -x "$tmp"/linux-source-*.deb "$tmp/x"
        tarball=$(ls "$tmp"/x/usr/src/linux-source-${KVER_MAJOR}.tar.* | head -n1)
        mv "$tarball" "$CACHE/src/"
        tarball="$CACHE/src/$(basename "$tarball")"
        rm -rf "$tmp"
    fi
    log "unpacking $(basename "$tarball")"
    rm -rf "$KSRC.tmp" && mkdir -p "$KSRC.tmp"
    tar -xf "$tarball" -C "$KSRC.tmp" --strip-components=1
    mv "$KSRC.tmp" "$KSRC"
fi
log "ok (kernel source $(make -s -C "$KSRC" kernelversion 2>/dev/null))"
