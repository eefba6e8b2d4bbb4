#!/usr/bin/env bash
# Configure and build the rmlx5 test kernel (cached).
#
# The build directory lives outside the repository, under $CACHE, keyed by
# kernel version, the config fragment and the toolchain, so a second run (or
# CI on the same machine) reuses it. Prints the build directory on stdout.
#
#   scripts/kernel.sh [fragment]      default: tests/kernel/test.config
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"

frag=${1:-$here/../tests/kernel/test.config}
frag=$(cd "$(dirname "$frag")" && pwd)/$(basename "$frag")
name=$(basename "$frag" .config)
kver=$(make -s -C "$KSRC" kernelversion)
key=$( { cat "$frag"; echo "$kver"; rustc --version; clang$LLVM_SUFFIX --version | head -n1;
         bindgen --version; } | sha256sum | cut -c1-12)
out=$CACHE/build-$kver-$name-$key
log() { printf 'kernel: %s\n' "$*" >&2; }

if [ -f "$out/.rmlx5-built" ]; then
    log "cached build $out"
    echo "$out"
    exit 0
fi

mk() { make -s -C "$KSRC" O="$out" LLVM="$LLVM_SUFFIX" "$@"; }
mkdir -p "$out"
start=$(date +%s)
log "configuring $out"
mk tinyconfig >/dev/null
(cd "$out" && "$KSRC/scripts/kconfig/merge_config.sh" -m -O "$out" "$out/.config" "$frag" >/dev/null)
mk olddefconfig >/dev/null

# Kconfig drops what it cannot satisfy without a word: check every option.
bad=0
while IFS= read -r line; do
    case "$line" in
    CONFIG_*=*)
        opt=${line%%=*}
        if ! grep -qx "$line" "$out/.config"; then
            log "requested $line but .config has: $(grep -E "^(# )?$opt[= ]" "$out/.config" || echo unset)"
            bad=1
        fi ;;
    "# CONFIG_"*" is not set")
        opt=${line#\# }; opt=${opt%% *}
        if grep -q "^$opt=" "$out/.config"; then
            log "requested $opt off but .config has it on"
            bad=1
        fi ;;
    esac
done < "$frag"
if [ "$bad" = 1 ]; then
    log "config check failed (see above); is Rust available? try: make -C $KSRC O=$out LLVM=$LLVM_SUFFIX rustavailable"
    exit 1
fi

log "building (make all, -j$(nproc)); a cold build takes about 15-20 minutes on 2 cores"
mk -j"$(nproc)" all >"$out/build.log" 2>&1 || { tail -n 40 "$out/build.log" >&2; log "kernel build failed; full log: $out/build.log"; exit 1; }
touch "$out/.rmlx5-built"
log "built in $(( $(date +%s) - start )) s"
echo "$out"
