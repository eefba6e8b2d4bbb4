# Shared settings for the rmlx5 build and test scripts (sourced, not run).
KVER_MAJOR=7.3
BINDGEN_VERSION=0.73.0
LLVM_SUFFIX=-19
CACHE=${RMLX5_CACHE:-/var/cache/rmlx5}
KSRC=$CACHE/linux-source-$KVER_MAJOR
export PATH="$HOME/.cargo/bin:$PATH"
