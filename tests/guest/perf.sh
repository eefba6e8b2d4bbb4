#!/bin/sh
# What `make perf` runs inside the guest: rmlx5-perf between rmlx5_0 and
# rmlx5_1. Latency (p50/p99) of 8, 64 and 4096-byte SEND and WRITE in
# polling and event modes, and the message rate of 64-byte WRITEs with
# post lists of 1 and 32.
iters=${RMLX5_PERF_ITERS:-2000}
echo
echo "==== rmlx5 perf ===="
echo "kernel: $(uname -r), $(nproc) CPUs, $iters iterations per latency test"
for mode in polling events; do
    flag=
    [ $mode = events ] && flag=--events
    for test in send_lat write_lat; do
        for size in 8 64 4096; do
            echo
            echo "--- $test, $size B, $mode"
            rmlx5-perf --test $test --size $size --iters $iters $flag
        done
    done
done
for pl in 1 32; do
    echo
    echo "--- write_bw, 64 B, post list $pl"
    rmlx5-perf --test write_bw --size 64 --iters 20000 --post-list $pl
done
echo "==== end of perf ===="
