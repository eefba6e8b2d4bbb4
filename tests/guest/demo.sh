#!/bin/sh
# What `make demo` shows inside the guest.
echo
echo "==== rmlx5 demo ===="
echo "kernel: $(uname -r), $(nproc) CPUs"
echo
echo "--- module"
grep rmlx5 /proc/modules
echo "  num_hcas = ${RMLX5_NUM_HCAS}"
for p in $(ls /sys/module/rmlx5/parameters/* 2>/dev/null); do
    echo "  $(basename "$p") = $(cat "$p")"
done
echo
echo "--- user-space device nodes"
ls -l /dev/rmlx5_uverbs*
echo
echo "--- kernel log of the module"
dmesg | grep -E 'rmlx5|KTAP|# Subtest|ok [0-9]' | sed 's/^/  /'
echo "==== end of demo ===="
