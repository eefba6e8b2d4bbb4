# Sourced by the scripts that boot the guest: `guest_tools` holds the
# run-guest.py options that put the static tools (built by
# `make guest-programs`) in the guest's /bin.
guest_bin="$top/target/guest/x86_64-unknown-linux-gnu/release"
guest_tools=()
for t in rmlx5-devinfo rmlx5-pingpong rmlx5-perf rmlx5-smc rmlx5-disassoc; do
    guest_tools+=(--tool "$guest_bin/$t")
done
