#!/bin/busybox sh
# make stress, inside the test guest (KASAN, lockdep, kmemleak,
# DEBUG_ATOMIC_SLEEP): the stress scenarios at full scale, then the CVE
# regression tests in a loop. /init has loaded rmlx5.ko; afterwards it
# unloads it and scans kmemleak, as in make check.
#
# Knobs (kernel command line rmlx5.stress=key=value,..., from STRESS="..."):
#   calls        fuzzed ioctl calls (default 1000000)
#   seed         fuzzer seed (default: the program picks one and prints it)
#   kills        SIGKILL rounds (default 100)
#   completions  completions of the no-lost-event run (default 10000000)
#   threads, cqs of that run (defaults 4, 4)
#   failslab     1: run no_lost_event a second time with kmalloc fault
#                injection on rmlx5's call stacks (default 1)
#   failslab_completions  completions of that second run (default 1000000:
#                the event path allocates nothing, so a tenth of the first
#                run shows it within the time budget)
#   parts        which parts run, joined by '+' (default
#                fuzz+kill+events+failslab+cve+mlx5fuzz), e.g. parts=cve to loop
#                the CVE tests alone
#   cve_loops    passes over rmlx5-cve-tests (default 20)
#   mlx5_calls   fuzzed calls of rdma-core's path (mlx5_ib driver data
#                through ib_uverbs, tests/guest/mlx5-abi.py; default 20000)
#   scale        divides every count above (e.g. scale=100 for a quick run)
#
# Figures are printed as "@@STRESS <part> key=value ..." lines, which
# scripts/stress.sh turns into the summary table; PASS/FAIL markers count as
# in make check.

calls=1000000
seed=
kills=100
completions=10000000
threads=4
cqs=4
failslab=1
failslab_completions=1000000
cve_loops=20
mlx5_calls=20000
scale=1
parts=fuzz+kill+events+failslab+cve+mlx5fuzz
for kv in $(echo "$RMLX5_STRESS" | tr ',' ' '); do
    case "$kv" in
    calls=* | seed=* | kills=* | completions=* | threads=* | cqs=* | failslab=* | \
        failslab_completions=* | cve_loops=* | mlx5_calls=* | scale=* | parts=*)
        eval "$kv" ;;
    *) echo "stress: unknown knob $kv" ;;
    esac
done
div() { v=$(($1 / scale)); [ $v -lt 1 ] && v=1; echo $v; }
calls=$(div $calls)
kills=$(div $kills)
completions=$(div $completions)
failslab_completions=$(div $failslab_completions)
cve_loops=$(div $cve_loops)
mlx5_calls=$(div $mlx5_calls)
# part NAME: whether NAME is in parts.
part() { case "+$parts+" in *"+$1+"*) return 0 ;; esac; return 1; }

pass() { echo "rmlx5-test: PASS $1"; }
fail() { echo "rmlx5-test: FAIL $1: $2"; }

echo "==== rmlx5 stress ===="
echo "@@STRESS-INFO kernel=$(uname -r) cpus=$(nproc) calls=$calls kills=$kills" \
    "completions=$completions threads=$threads cqs=$cqs failslab=$failslab" \
    "failslab_completions=$failslab_completions cve_loops=$cve_loops parts=$parts"

# run NAME SCENARIO KNOBS: one scenario of rmlx5-stress-tests, timed.
run() {
    t0=$(date +%s)
    RMLX5_STRESS=$3 /tests/rmlx5-stress-tests "$2"
    rc=$?
    echo "@@STRESS-TIME part=$1 rc=$rc secs=$(($(date +%s) - t0))"
    echo "rmlx5-guest: EXIT rmlx5-stress-tests $rc"
}

part fuzz && run fuzz fuzz_ioctl_sequences "calls=$calls${seed:+,seed=$seed}"
part kill && run kill kill_mid_traffic "kills=$kills"
part events && run events no_lost_event "completions=$completions,threads=$threads,cqs=$cqs"

# The same run with kmalloc failing at random, but only for allocations
# whose call stack passes through rmlx5 (the stacktrace filter on the
# module's core range): completion events must not depend on allocating in
# IRQ or BH context. The scenario turns the injection on itself once its
# CQs and QPs exist (inject=10: 10% probability) and off before teardown.
# `times` counts down once per injected failure.
fs=/sys/kernel/debug/failslab
if [ "$failslab" = 1 ] && part failslab; then
    base=$(cat /sys/module/rmlx5/sections/.text 2>/dev/null)
    size=$(cat /sys/module/rmlx5/coresize 2>/dev/null)
    if [ -d $fs ] && [ -n "$base" ] && [ -n "$size" ]; then
        # The range goes in as hex: kernel addresses do not fit printf's
        # %d (busybox printed 0 for them, so the filter matched nothing);
        # shell arithmetic wraps to the right 64-bit pattern and %x shows it.
        echo "$base" > $fs/require-start
        printf '0x%x\n' $((base + size)) > $fs/require-end
        echo "@@STRESS-PHASE failslab require=$(cat $fs/require-start)..$(cat $fs/require-end)"
        echo 0 > $fs/ignore-gfp-wait 2>/dev/null
        echo 1 > $fs/interval
        echo 1000000 > $fs/times
        echo 0 > $fs/space
        echo 0 > $fs/verbose
        echo 0 > $fs/probability
        echo "@@STRESS-PHASE failslab probability=10% range=$base+$size"
        run events_failslab no_lost_event \
            "completions=$failslab_completions,threads=$threads,cqs=$cqs,inject=10"
        echo 0 > $fs/probability
        injected=$((1000000 - $(cat $fs/times)))
        echo "@@STRESS failslab injected=$injected"
        pass failslab_configured
    else
        fail failslab_configured "no $fs or no /sys/module/rmlx5/sections (CONFIG_FAILSLAB, FAULT_INJECTION_DEBUG_FS, KALLSYMS)"
    fi
fi

# The CVE regression tests, again and again.
part cve || cve_loops=0
t0=$(date +%s)
bad=0
i=0
while [ $i -lt $cve_loops ]; do
    out=$(/tests/rmlx5-cve-tests 2>&1)
    rc=$?
    if [ $rc != 0 ] || echo "$out" | grep -q 'rmlx5-test: FAIL'; then
        bad=$((bad + 1))
        echo "stress: rmlx5-cve-tests pass $((i + 1)) failed:"
        echo "$out" | grep -v 'rmlx5-test: PASS' | sed 's/rmlx5-test: FAIL/cve-loop FAIL/' | head -20
    fi
    i=$((i + 1))
done
echo "@@STRESS cve passes=$cve_loops failed=$bad secs=$(($(date +%s) - t0))"
if [ $cve_loops = 0 ]; then
    :
elif [ $bad = 0 ]; then
    pass cve_regressions_looped
else
    fail cve_regressions_looped "$bad of $cve_loops passes failed"
fi
# rdma-core's path: libmlx5's driver data fuzzed through ib_uverbs in one
# context, which is then closed; ib_uverbs destroys what is left, and no
# QP, CQ, MR or PD may stay behind (iproute2's rdma res).
if part mlx5fuzz; then
    L=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu
    node=
    for u in /sys/class/infiniband_verbs/uverbs*; do
        [ "$(cat $u/ibdev 2>/dev/null)" = rmlx5_0 ] && node=/dev/infiniband/$(basename $u)
    done
    if [ ! -x /usr/bin/python3 ] || [ -z "$node" ]; then
        fail mlx5_fuzz "no python3 or no uverbs node for rmlx5_0 (scripts/bench-userland.sh check)"
    else
        t0=$(date +%s)
        LD_LIBRARY_PATH=$L python3 /tests/mlx5-abi.py $node --fuzz $mlx5_calls $seed
        rc=$?
        echo "@@STRESS-TIME part=mlx5fuzz rc=$rc secs=$(($(date +%s) - t0))"
        # Objects of processes only: kernel ULPs' own (rds_rdma's PD on
        # each device, "comm [rds_rdma]") stay, as they should.
        objs=$(for r in qp cq mr pd; do LD_LIBRARY_PATH=$L rdma res show $r 2>/dev/null; done |
            grep rmlx5_ | grep -v 'comm \[')
        left=$(printf '%s' "$objs" | grep -c rmlx5_)
        echo "@@STRESS mlx5left objects=$left"
        [ "$left" = 0 ] || printf '%s\n' "$objs" | sed 's/^/stress: left: /'
        if [ $rc = 0 ] && [ "$left" = 0 ]; then
            pass mlx5_fuzz_nothing_left
        else
            fail mlx5_fuzz_nothing_left "fuzzer exited $rc, $left objects left"
        fi
    fi
fi
echo "==== end of stress ===="
