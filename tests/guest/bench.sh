#!/bin/sh
# What `make bench` runs inside the benchmark guest (tests/kernel/bench.config):
# rmlx5 (rmlx5-perf), Soft-RoCE (rxe) and Soft-iWARP (siw) (perftest), the
# same cases with the same iterations, one after the other for each case and
# round (rmlx5 rxe siw rmlx5 rxe siw ...), so drift over the run hits all
# three alike.
#
# Every run is a server and a client process talking over TCP first, like
# perftest; the client's output is wrapped in
#   @@BENCH-BEGIN dev=.. test=.. size=.. mode=.. list=.. qps=.. round=.. iters=..
#   @@BENCH-END rc=.. secs=..
# for scripts/bench-report.py on the host.
#
# Knobs (kernel command line rmlx5.bench=key=value,...): rounds, lat_iters,
# bw_iters, big_iters, scale_msgs, quick (1: two sizes and QP counts 1 and 16),
# groups (which of lat+rate+bw+scale+big to run, joined by '+'; default all),
# devs (which of rmlx5+rmlx5pt+rxe+siw; default all), sizes and qpcounts
# (lists joined by '+', replacing the defaults), pin (where the server and
# the client run, for every device alike: "same" both on CPU 0, "split" the
# server on CPU 0 and the client on CPU 1; default: where the scheduler
# puts them). rmlx5 is rmlx5-perf on
# rmlx5's own provider; rmlx5pt is perftest, unchanged, on the same
# software HCA through rdma-core's mlx5 provider and ib_uverbs.
export PATH=/usr/bin:/bin:/tests
export LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu

rounds=2
lat_iters=1000
bw_iters=5120
big_iters=1000
scale_msgs=65536
quick=0
groups=lat+rate+bw+scale+big
big_qps=10000
pin=
devs="rmlx5 rmlx5pt rxe siw"
# A client that has not finished after this many seconds is killed: perftest
# in event mode has been seen to stall for good on siw (and once on rxe),
# and siw with several QPs under TCG. A latency run takes a few seconds, a
# 1,000-QP setup about a minute.
lat_timeout=30
bw_timeout=90
scale_timeout=240
knobs=$(sed -n 's/.*rmlx5.bench=\([^ ]*\).*/\1/p' /proc/cmdline | tr ',' ' ')
for kv in $knobs; do
    case "$kv" in
    rounds=* | lat_iters=* | bw_iters=* | big_iters=* | scale_msgs=* | quick=* | groups=* | big_qps=* | pin=* | *_timeout=*)
        eval "$kv" ;;
    devs=* | sizes=* | qpcounts=*)
        eval "$(echo "$kv" | tr '+' ' ' | sed 's/=\(.*\)/="\1"/')" ;;
    esac
done

echo
echo "==== rmlx5 bench ===="

# The network the kernel's devices run over: one dummy Ethernet device with
# a 9000-byte MTU (so rxe's active MTU is 4096, like rmlx5's) and an IPv4
# address. rxe and siw both attach to it; perftest's own TCP exchange and
# rmlx5-perf's go over it too.
# The RDMA core logs a warning at every port query of a dummy device
# ("speed is unknown"); keep the console for errors and print the whole
# kernel log at the end, where the host runner looks for problems.
dmesg -n 3
ip link set lo up
ip link add dummy0 type dummy
ip link set dummy0 mtu 9000
ip addr add 10.11.0.1/24 dev dummy0
ip link set dummy0 up
rdma link add rxe0 type rxe netdev dummy0 || echo "bench: rdma link add rxe0 failed"
rdma link add siw0 type siw netdev dummy0 || echo "bench: rdma link add siw0 failed"
addr=10.11.0.1
echo "bench: devices"
ibv_devices 2>&1
rdma link show 2>&1
ls /dev/rmlx5_uverbs* 2>&1

# rxe: the RoCE v2 GID of the IPv4 address (perftest's -x).
gid_rxe=
for g in /sys/class/infiniband/rxe0/ports/1/gids/*; do
    i=${g##*/}
    if grep -q "0000:0000:0000:0000:0000:ffff:0a0b:0001" "$g" 2>/dev/null &&
        grep -q "RoCE v2" /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$i 2>/dev/null; then
        gid_rxe=$i
        break
    fi
done
echo "bench: rxe0 RoCE v2 IPv4 GID index: ${gid_rxe:-none}"

echo "@@BENCH-INFO kernel=$(uname -r) cpus=$(nproc) mem_kb=$(awk '/MemTotal/{print $2}' /proc/meminfo)" \
    "$(sed 's/ /=/' /etc/rmlx5-bench-versions | tr '\n' ' ')"

port=18600
# Waits until something listens on TCP port $1 (up to 20 s) while process
# $2 (the server) lives.
wait_listen() {
    hex=$(printf '%04X' "$1")
    n=0
    while [ $n -lt 200 ]; do
        grep -q ":$hex 00000000:0000 0A" /proc/net/tcp /proc/net/tcp6 2>/dev/null && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.1
        n=$((n + 1))
    done
    return 1
}

# run DEV TEST SIZE MODE LIST QPS ROUND ITERS [TX_DEPTH CQ_MOD]
run() {
    dev=$1 test=$2 size=$3 mode=$4 list=$5 qps=$6 round=$7 iters=$8 tx=${9:-} cqm=${10:-}
    port=$((port + 1))
    case $dev in
    rmlx5)
        common="--test $test --size $size --iters $iters --port $port"
        case $test in *_bw) common="$common --post-list $list --qps $qps" ;; esac
        [ -n "$tx" ] && common="$common --tx-depth $tx --cq-mod $cqm"
        [ "$mode" = event ] && common="$common --events"
        server="rmlx5-perf --server --device 0 $common"
        client="rmlx5-perf --client 127.0.0.1 --device 1 $common"
        ;;
    *)
        # perftest. -N: no peak bandwidth (not reported here); with many
        # QPs and few iterations perftest's peak estimate otherwise refuses
        # to report at all ("Correlation coefficient r^2 < 0.9").
        common="-s $size -n $iters -p $port"
        case $test in *_bw) common="$common -l $list -q $qps -N" ;; esac
        [ -n "$tx" ] && common="$common -t $tx -Q $cqm"
        [ "$mode" = event ] && common="$common -e"
        case $dev in
        rmlx5pt)
            # Between rmlx5_1 (server) and rmlx5_0, as make check's
            # rdma-core tests run it: InfiniBand link layer, by LID.
            server="ib_$test -d rmlx5_1 $common"
            client="ib_$test -d rmlx5_0 $common $addr"
            ;;
        *)
            common="-d ${dev}0 $common"
            if [ $dev = rxe ]; then
                common="$common -x $gid_rxe"
            else
                # iWARP connects through the RDMA connection manager.
                common="$common -R"
            fi
            server="ib_$test $common"
            client="ib_$test $common $addr"
            ;;
        esac
        ;;
    esac
    case $pin in
    same) server="taskset -c 0 $server" client="taskset -c 0 $client" ;;
    split) server="taskset -c 0 $server" client="taskset -c 1 $client" ;;
    esac
    echo "@@BENCH-BEGIN dev=$dev test=$test size=$size mode=$mode list=$list qps=$qps round=$round iters=$iters${tx:+ tx_depth=$tx cq_mod=$cqm}"
    # rmlx5's path figures (debugfs rmlx5/perf) cover this run alone.
    perf=/sys/kernel/debug/rmlx5/perf
    case $dev in rmlx5*) [ -w $perf ] && echo 0 > $perf ;; esac
    start=$(date +%s)
    $server >/tmp/server.out 2>&1 &
    spid=$!
    if wait_listen $port $spid; then
        # Listening is the server's first step, not its last: let it settle.
        sleep 0.2
        timeout $run_timeout $client 2>&1
        rc=$?
    else
        echo "bench: the server did not listen on port $port"
        rc=124
    fi
    # The server ends by itself after the client; give it a moment.
    n=0
    while kill -0 $spid 2>/dev/null && [ $n -lt 50 ]; do
        sleep 0.1
        n=$((n + 1))
    done
    if kill -0 $spid 2>/dev/null; then
        kill -9 $spid 2>/dev/null
        echo "bench: server still running after the client; killed"
        [ $rc = 0 ] && rc=125
    fi
    wait $spid 2>/dev/null
    if [ $rc != 0 ]; then
        echo "bench: server output:"
        tail -n 5 /tmp/server.out
    fi
    echo "@@BENCH-END rc=$rc secs=$(($(date +%s) - start))"
    if [ "${dev#rmlx5}" != "$dev" ] && [ -r $perf ]; then
        sed 's/^/@@PATH /' $perf
        # The model's counters (cumulative: RNR NAKs, timeouts, ...).
        for h in 0 1; do
            grep '^model' /sys/kernel/debug/rmlx5/rmlx5_$h/stats | sed "s/^/@@MODEL rmlx5_$h /"
        done
    fi
    return $rc
}

# Runs a case and, if it fails, once more: connection setup of the kernel's
# devices occasionally fails under TCG (siw: RDMA_CM_EVENT_REJECTED). Both
# attempts are in the log; the report counts the failed one. A run killed
# by the timeout (124, or 143 for SIGTERM) is not retried: those stalls
# repeat, and each costs the whole timeout.
run_retry() {
    run "$@"
    rc=$?
    case $rc in 0 | 124 | 143) return $rc ;; esac
    echo "bench: $1 $2 failed; trying once more"
    run "$@"
}

# each TEST SIZE MODE LIST QPS ITERS [TX_DEPTH CQ_MOD]: every round, every
# device.
each() {
    r=1
    while [ $r -le $rounds ]; do
        for dev in $devs; do
            if [ $dev != rmlx5 ] && [ "$1" = write_lat ] && [ "$3" = event ]; then
                # perftest refuses this case ("Events feature not available
                # on WRITE verb"): a WRITE raises no completion at the
                # receiver. rmlx5-perf runs it (the sender sleeps for its
                # own completion); the others get a marked empty cell.
                echo "@@BENCH-SKIP dev=$dev test=$1 size=$2 mode=$3 list=$4 qps=$5 round=$r" \
                    "reason=\"perftest: Events feature not available on WRITE verb\""
                continue
            fi
            run_retry $dev "$1" "$2" "$3" "$4" "$5" $r "$6" "${7:-}" "${8:-}"
        done
        r=$((r + 1))
    done
}

: "${sizes:=8 64 4096 65536}"
: "${qpcounts:=1 16 256 1000}"
if [ "$quick" = 1 ]; then
    sizes="8 4096"
    qpcounts="1 16"
fi

want() { case "+$groups+" in *"+$1+"*) return 0 ;; esac; return 1; }

# Latency, polling and event mode.
run_timeout=$lat_timeout
want lat && for mode in poll event; do
    for test in send_lat write_lat; do
        for size in $sizes; do
            each $test $size $mode 1 1 $lat_iters
        done
    done
done
# Message rate of 64-byte messages, post lists of 1 and 32.
run_timeout=$bw_timeout
want rate && for test in write_bw send_bw; do
    for list in 1 32; do
        each $test 64 poll $list 1 $bw_iters
    done
done
# Bandwidth at 64 KiB.
want bw && for test in write_bw send_bw; do
    each $test 65536 poll 1 1 $big_iters
done
# Scaling: 64-byte WRITE message rate over 1 ... 1,000 QP pairs. All QPs of
# a side share one send CQ of QPs x send-queue-depth entries, which must fit
# every device (rxe: 32767 CQEs): the depth shrinks from 128 so that the
# product stays at most 16384, and the CQ moderation (100) with it.
# Iterations are per QP: scale_msgs in all, at least 128 per QP. (With
# 5120 messages in all the 256-pair run lasted under a second and its
# rounds scattered by half.)
run_timeout=$scale_timeout
want scale && for q in $qpcounts; do
    it=$((scale_msgs / q))
    [ $it -lt 128 ] && it=128
    tx=$((16384 / q))
    [ $tx -gt 128 ] && tx=128
    cqm=100
    [ $cqm -gt $tx ] && cqm=$tx
    each write_bw 64 poll 1 $q $it $tx $cqm
done

# rmlx5 at large QP counts (a software HCA holds 16,384 QPs): the time
# and memory to create 1, 1,000 and big_qps RC QPs in one process
# (rmlx5-perf qp_create: contexts of 1,000 QPs, the memory from MemFree),
# then the 64-byte WRITE rate over big_qps pairs, one message in flight per
# QP. rxe and siw are not run here: setting up thousands of their QPs
# takes many minutes under TCG.
run_timeout=$((scale_timeout * 3))
if want big; then
    r=1
    while [ $r -le $rounds ]; do
        for n in 1 1000 $big_qps; do
            echo "@@QPCREATE-BEGIN n=$n round=$r"
            timeout $run_timeout rmlx5-perf --test qp_create --iters $n --device 0 2>&1
            echo "@@QPCREATE-END rc=$?"
        done
        r=$((r + 1))
    done
    devs_all=$devs
    devs=rmlx5
    it=$((scale_msgs * 4 / big_qps))
    [ $it -lt 16 ] && it=16
    each write_bw 64 poll 1 $big_qps $it 1 1
    devs=$devs_all
fi

echo "bench: kernel log (without the dummy device's speed warnings)"
dmesg | grep -v "speed is unknown"
echo "==== end of bench ===="
