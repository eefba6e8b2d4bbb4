#!/bin/busybox sh
# rdma-core's own programs on rmlx5, through ib_uverbs and rdma-core's mlx5
# provider (libmlx5) from Debian's packages, unmodified: the device list,
# ibv_devinfo -v, and ibv_rc_pingpong between rmlx5_0 and rmlx5_1 and in
# loopback, polling and with completion events, data checked, at several
# sizes. The only provider in the image is mlx5, so a device that lists and
# opens is bound to libmlx5; a running pingpong's maps name it too, and
# mlx5dv (pyverbs' Mlx5Context) opens it.
#
# `rdma-core.sh cx rmlx5_<n>` runs the same on one ConnectX function
# (tests/guest/pci-smoke.sh), both sides on it, cases named cx_rdmacore_*.
#
# Markers as /init's: rmlx5-test: PASS|FAIL <name>.
N=${RMLX5_NUM_HCAS:-2}
mode=${1:-soft}
cxdev=$2
L="LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu"
run() { env $L "$@"; }
pass() { echo "rmlx5-test: PASS $1"; }
fail() { echo "rmlx5-test: FAIL $1: $2"; }
stat_of() { awk -v s="$2" '$1 == s { print $2 }' /sys/kernel/debug/rmlx5/rmlx5_$1/stats; }

if [ ! -x /usr/bin/ibv_devinfo ]; then
    fail rdmacore_tools "no ibv_devinfo in the guest (scripts/bench-userland.sh check)"
    exit 0
fi
# The pingpong's out-of-band exchange runs over TCP on loopback.
ifconfig lo 127.0.0.1 up 2>/dev/null || ip link set lo up 2>/dev/null

# pair PROGRAM SERVER_DEV CLIENT_DEV LIMIT ARGS...: PROGRAM as server on
# SERVER_DEV and as client on CLIENT_DEV (out-of-band exchange over TCP on
# loopback), the client given LIMIT seconds (a hang is a failure, not a
# stuck guest). Sets crc and src (the exit statuses) and maps (the server's
# /proc maps); the outputs are in /tmp/pair-server.log and
# /tmp/pair-client.log. Returns 1 if the client had to be killed.
port=18515
pair() {
    prog=$1 sdev=$2 cdev=$3 limit=$4
    shift 4
    port=$((port + 1))
    # Not through run(): $! must be the program itself (env execs it).
    env $L $prog -d $sdev -p $port "$@" > /tmp/pair-server.log 2>&1 &
    srv=$!
    sleep 2
    maps=$(cat /proc/$srv/maps 2>/dev/null)
    env $L $prog -d $cdev -p $port "$@" 127.0.0.1 > /tmp/pair-client.log 2>&1 &
    cli=$!
    i=0
    while kill -0 $cli 2>/dev/null && [ $i -lt $limit ]; do
        sleep 1
        i=$((i + 1))
    done
    if kill -0 $cli 2>/dev/null; then
        kill -9 $cli $srv 2>/dev/null
        wait $cli
        wait $srv
        cat /tmp/pair-server.log /tmp/pair-client.log
        return 1
    fi
    wait $cli
    crc=$?
    wait $srv
    src=$?
    return 0
}

# pingpong NAME SERVER_DEV CLIENT_DEV ARGS...: one ibv_rc_pingpong pair; the
# server's maps must name libmlx5; both must exit 0. Prints the client's
# figures.
pingpong() {
    name=$1 sdev=$2 cdev=$3
    shift 3
    if ! pair ibv_rc_pingpong $sdev $cdev 120 -i 1 "$@"; then
        fail $name "ibv_rc_pingpong $* did not finish in 120 s"
        return
    fi
    echo "rmlx5-guest: $name ($sdev <- $cdev, $*):"
    cat /tmp/pair-client.log
    if [ $crc -ne 0 ] || [ $src -ne 0 ]; then
        cat /tmp/pair-server.log
        fail $name "client exited $crc, server $src"
    elif ! echo "$maps" | grep -q libmlx5; then
        fail $name "the server process did not map libmlx5"
    elif ! grep -q "iters in" /tmp/pair-client.log; then
        fail $name "no figures from the client"
    else
        pass $name
    fi
}

# perf NAME SERVER_DEV CLIENT_DEV PROGRAM ARGS...: perftest's PROGRAM
# (Debian's, unchanged); both sides exit 0 and the client prints its table
# (the result line starts with the message size).
perf() {
    name=$1 sdev=$2 cdev=$3 prog=$4
    shift 4
    if ! pair $prog $sdev $cdev 180 "$@"; then
        fail $name "$prog $* did not finish in 180 s"
        return
    fi
    # perftest times its report with a CPU clock it calibrates itself; on
    # a loaded TCG host the calibration can fail ("Correlation coefficient
    # r^2 ... < 0.9", "Can't produce a report") whatever the device did.
    # Such a run is repeated once, and must then pass like any other.
    if grep -q "Can't produce a report" /tmp/pair-client.log /tmp/pair-server.log; then
        echo "rmlx5-guest: $name: perftest could not calibrate its clock, run again"
        if ! pair $prog $sdev $cdev 180 "$@"; then
            fail $name "$prog $* did not finish in 180 s"
            return
        fi
    fi
    echo "rmlx5-guest: $name ($prog $*):"
    cat /tmp/pair-client.log
    if [ $crc -ne 0 ] || [ $src -ne 0 ]; then
        cat /tmp/pair-server.log
        fail $name "client exited $crc, server $src"
    elif ! grep -qE '^ +[0-9]+ +[0-9]+ ' /tmp/pair-client.log; then
        fail $name "no result line from the client"
    else
        pass $name
    fi
}
# A libmlx5 process killed mid-traffic leaves nothing behind: ib_uverbs
# destroys its QPs, CQs, MRs and PDs, and rmlx5 releases their pinned
# pages and trap entries (counted with iproute2's rdma; kernel ULPs may
# hold objects of their own, so the counts are compared with before).
res_counts() {
    for r in qp cq mr pd; do
        printf '%s ' "$(run rdma res show $r 2>/dev/null | grep -c rmlx5_)"
    done
}
# killed NAME SERVER_DEV CLIENT_DEV PROG ARGS...: PROG (ibv_rc_pingpong or
# a perftest program) run as a server and a client, killed after 4 s.
killed() {
    name=$1 sdev=$2 cdev=$3 prog=$4
    shift 4
    before=$(res_counts)
    port=$((port + 1))
    env $L $prog -d $sdev -i 1 -p $port "$@" > /dev/null 2>&1 &
    srv=$!
    sleep 1
    env $L $prog -d $cdev -i 1 -p $port "$@" 127.0.0.1 > /dev/null 2>&1 &
    cli=$!
    sleep 4
    during=$(res_counts)
    kill -9 $cli $srv 2>/dev/null
    wait $cli
    wait $srv
    sleep 1
    after=$(res_counts)
    echo "rmlx5-guest: rdma res qp/cq/mr/pd: before '$before' during '$during' after '$after'"
    if [ "$during" != "$before" ] && [ "$after" = "$before" ]; then
        pass $name
    else
        fail $name "objects of the killed $prog processes were not all released (or never seen)"
    fi
}


# mlx5dv NAME DEV: rdma-core's mlx5 direct-verbs API opens DEV, which only
# a device bound to libmlx5 allows (pyverbs' Mlx5Context).
mlx5dv() {
    out=$(env $L python3 -c "
import sys
from pyverbs.providers.mlx5.mlx5dv import Mlx5Context, Mlx5DVContextAttr
ctx = Mlx5Context(Mlx5DVContextAttr(), name=sys.argv[1])
print('mlx5dv context on', sys.argv[1], 'vendor part', ctx.query_device().vendor_part_id)
ctx.close()
" "$2" 2>&1)
    rc=$?
    echo "$out"
    if [ $rc -eq 0 ] && echo "$out" | grep -q "mlx5dv context on $2"; then
        pass $1
    else
        fail $1 "pyverbs' Mlx5Context did not open $2 (exit $rc)"
    fi
}


# One ConnectX function: the device, mlx5dv, pingpongs in loopback (the
# function's own QPs, doorbells stored to its BAR pages), perftest, and a
# killed process.
if [ "$mode" = cx ]; then
    info=$(run ibv_devinfo -v -d $cxdev 2>&1)
    rc=$?
    echo "$info" | head -n 60
    if [ $rc -eq 0 ] && echo "$info" | grep -qE "hca_id:[[:space:]]+$cxdev\$" &&
        echo "$info" | grep -qE "vendor_id:[[:space:]]+0x02c9" &&
        echo "$info" | grep -qE "vendor_part_id:[[:space:]]+4119" &&
        echo "$info" | grep -qE "state:[[:space:]]+PORT_ACTIVE \(4\)"; then
        pass cx_rdmacore_ibv_devinfo
    else
        fail cx_rdmacore_ibv_devinfo "ibv_devinfo -v -d $cxdev exited $rc or misses the ConnectX-5 part ID or an active port"
    fi
    mlx5dv cx_rdmacore_mlx5dv $cxdev
    pingpong cx_rdmacore_rc_pingpong $cxdev $cxdev -n 300 -c
    pingpong cx_rdmacore_rc_pingpong_events $cxdev $cxdev -n 300 -c -e
    pingpong cx_rdmacore_rc_pingpong_inline $cxdev $cxdev -n 300 -c -s 32
    pingpong cx_rdmacore_rc_pingpong_64k $cxdev $cxdev -n 50 -c -s 65536
    killed cx_rdmacore_killed_mid_traffic $cxdev $cxdev ibv_rc_pingpong -n 1000000 -c
    if [ -x /usr/bin/ib_write_lat ]; then
        perf cx_rdmacore_perftest_write_lat $cxdev $cxdev ib_write_lat -s 64 -n 200
        perf cx_rdmacore_perftest_send_bw $cxdev $cxdev ib_send_bw -s 4096 -n 200
    else
        fail cx_rdmacore_perftest "no perftest in the guest (scripts/bench-userland.sh check)"
    fi
    exit 0
fi

# Every rmlx5 device is listed, with its GUID.
devs=$(run ibv_devices 2>&1)
echo "$devs"
ok=1
for n in $(seq 0 $((N - 1))); do
    echo "$devs" | grep -qE "^[[:space:]]+rmlx5_$n[[:space:]]+0002c9030000000$n\$" || ok=
done
if [ -n "$ok" ]; then
    pass rdmacore_ibv_devices
else
    fail rdmacore_ibv_devices "ibv_devices does not list every rmlx5_<n> with its node GUID"
fi

# ibv_devinfo -v opens each device (through libmlx5) and queries it.
ok=1
for n in $(seq 0 $((N - 1))); do
    info=$(run ibv_devinfo -v -d rmlx5_$n 2>&1)
    rc=$?
    echo "$info" | head -n 60
    if [ $rc -ne 0 ] ||
        ! echo "$info" | grep -qE "hca_id:[[:space:]]+rmlx5_$n\$" ||
        ! echo "$info" | grep -qE "transport:[[:space:]]+InfiniBand" ||
        ! echo "$info" | grep -qE "state:[[:space:]]+PORT_ACTIVE \(4\)" ||
        ! echo "$info" | grep -qE "port_lid:[[:space:]]+$((n + 1))\$" ||
        ! echo "$info" | grep -qE "link_layer:[[:space:]]+InfiniBand" ||
        ! echo "$info" | grep -qE "max_qp_wr:[[:space:]]+[1-9]"; then
        ok=
        fail rdmacore_ibv_devinfo_rmlx5_$n "ibv_devinfo -v -d rmlx5_$n exited $rc or misses the port or device attributes"
    fi
done
[ -n "$ok" ] && pass rdmacore_ibv_devinfo

# mlx5_ib's driver data as rmlx5 checks it: hand-made commands, good and
# bad (tests/guest/mlx5-abi.py), on rmlx5_0's uverbs node.
node=
for u in /sys/class/infiniband_verbs/uverbs*; do
    [ "$(cat $u/ibdev 2>/dev/null)" = rmlx5_0 ] && node=/dev/infiniband/$(basename $u)
done
if [ -z "$node" ]; then
    fail rdmacore_mlx5_abi "no uverbs node for rmlx5_0"
else
    faults0=$(stat_of 0 trap_faults)
    zaps0=$(stat_of 0 trap_zaps)
    if ! env $L python3 /tests/mlx5-abi.py $node; then
        echo "rmlx5-guest: mlx5-abi.py exited non-zero"
    fi
    # Its vector store to a UAR page is not one the fault handler
    # completes: the page was mapped, and the trap's poller unmapped it
    # again once idle (20 µs; give it a second).
    for _ in $(seq 10); do
        [ "$(stat_of 0 trap_zaps)" -gt "$zaps0" ] && break
        sleep 0.1
    done
    if [ "$(stat_of 0 trap_faults)" -gt "$faults0" ] && [ "$(stat_of 0 trap_zaps)" -gt "$zaps0" ]; then
        pass rdmacore_uar_trap_mapped
    else
        fail rdmacore_uar_trap_mapped "a vector store to a UAR page: trap_faults $faults0 -> $(stat_of 0 trap_faults), trap_zaps $zaps0 -> $(stat_of 0 trap_zaps)"
    fi
fi

stores0=$(stat_of 0 trap_stores)
faults0=$(stat_of 0 trap_faults)
for n in $(seq 0 $((N - 1))); do
    mlx5dv rdmacore_mlx5dv_rmlx5_$n rmlx5_$n
done
pingpong rdmacore_rc_pingpong rmlx5_1 rmlx5_0 -n 1000 -c
pingpong rdmacore_rc_pingpong_events rmlx5_1 rmlx5_0 -n 1000 -c -e
pingpong rdmacore_rc_pingpong_inline rmlx5_1 rmlx5_0 -n 1000 -c -s 32
pingpong rdmacore_rc_pingpong_64k rmlx5_1 rmlx5_0 -n 200 -c -s 65536
pingpong rdmacore_rc_pingpong_loopback rmlx5_0 rmlx5_0 -n 500 -c -s 1024
pingpong rdmacore_rc_pingpong_loopback_events rmlx5_0 rmlx5_0 -n 500 -c -e -s 8192

# A libmlx5 process killed mid-traffic leaves nothing behind.
killed rdmacore_killed_mid_traffic rmlx5_1 rmlx5_0 ibv_rc_pingpong -n 1000000 -c

# perftest (Debian's), unchanged, between rmlx5_1 (server) and rmlx5_0.
if [ -x /usr/bin/ib_send_lat ]; then
    perf rdmacore_perftest_send_lat rmlx5_1 rmlx5_0 ib_send_lat -s 64 -n 200
    perf rdmacore_perftest_write_lat rmlx5_1 rmlx5_0 ib_write_lat -s 64 -n 200
    perf rdmacore_perftest_read_lat rmlx5_1 rmlx5_0 ib_read_lat -s 64 -n 200
    perf rdmacore_perftest_send_bw rmlx5_1 rmlx5_0 ib_send_bw -s 4096 -n 500
    perf rdmacore_perftest_write_bw rmlx5_1 rmlx5_0 ib_write_bw -s 65536 -n 200
    perf rdmacore_perftest_read_bw rmlx5_1 rmlx5_0 ib_read_bw -s 65536 -n 200
    perf rdmacore_perftest_atomic_bw rmlx5_1 rmlx5_0 ib_atomic_bw -n 200
    # Stream mode of the UAR trap (hca/trap.rs): a stream of small
    # WRITEs, with the server idle, has the trap's poller map the UAR
    # pages on the other CPU and read the doorbell records itself. Every
    # WRITE must still complete (perftest waits for each completion, and
    # is killed after 180 s otherwise), and the pages must be unmapped
    # again once the stream is over, so that the next store faults.
    # (The client's UAR pages are mapped by the poller, trap_stream_pages,
    # not by a fault: trap_faults stays put, rdmacore_uar_trap below.)
    streams0=$(stat_of 0 trap_streams)
    pages0=$(stat_of 0 trap_stream_pages)
    zaps0=$(stat_of 0 trap_zaps)
    perf rdmacore_perftest_write_bw_stream rmlx5_1 rmlx5_0 ib_write_bw -s 64 -n 20000
    for _ in $(seq 10); do
        [ "$(stat_of 0 trap_zaps)" -gt "$zaps0" ] && break
        sleep 0.1
    done
    streams=$(stat_of 0 trap_streams)
    pages=$(stat_of 0 trap_stream_pages)
    if [ "$streams" -gt "$streams0" ] && [ "$pages" -gt "$pages0" ] &&
        [ "$(stat_of 0 trap_zaps)" -gt "$zaps0" ]; then
        pass rdmacore_uar_trap_stream
    else
        fail rdmacore_uar_trap_stream "64-byte ib_write_bw: trap_streams $streams0 -> $streams, trap_stream_pages $pages0 -> $pages, trap_zaps $zaps0 -> $(stat_of 0 trap_zaps), trap_stream_busy $(stat_of 0 trap_stream_busy)"
    fi
    # The same stream killed mid-way, its pages mapped or not: nothing of
    # the processes is left, and the poller stops (its runs stop growing).
    killed rdmacore_killed_mid_stream rmlx5_1 rmlx5_0 ib_write_bw -s 64 -n 50000000
    runs0=$(stat_of 0 trap_runs)
    sleep 1
    if [ "$(stat_of 0 trap_runs)" = "$runs0" ]; then
        pass rdmacore_uar_trap_stream_stops
    else
        fail rdmacore_uar_trap_stream_stops "the trap's poller still ran 1 s after its processes were killed: trap_runs $runs0 -> $(stat_of 0 trap_runs)"
    fi
else
    fail rdmacore_perftest "no perftest in the guest (scripts/bench-userland.sh check)"
fi

# The doorbells came through the UAR trap: libmlx5's stores completed by
# the fault handler (hca/store.rs), doorbells taken from the records they
# named, arms; and no store of libmlx5 needed the page mapped.
cat /sys/kernel/debug/rmlx5/rmlx5_0/stats | grep trap_
stores=$(stat_of 0 trap_stores)
faults=$(stat_of 0 trap_faults)
if [ "$((stores - stores0))" -gt 0 ] && [ "$(stat_of 0 trap_doorbells)" -gt 0 ] &&
    [ "$(stat_of 0 trap_arms)" -gt 0 ] && [ "$faults" = "$faults0" ]; then
    pass rdmacore_uar_trap
else
    fail rdmacore_uar_trap "trap_stores $stores0 -> $stores, trap_faults $faults0 -> $faults (libmlx5's doorbells should all be completed in the fault)"
fi
