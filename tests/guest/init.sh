#!/bin/busybox sh
# /init of the rmlx5 test guest. Runs as PID 1 inside QEMU, prints
# machine-readable markers on the console for tests/run-guest.py, then
# reboots (QEMU runs with -no-reboot, so that ends the VM).
#
# Markers (one per line):
#   rmlx5-test: PASS <name>
#   rmlx5-test: FAIL <name>: <reason>
#   rmlx5-guest: DONE
/bin/busybox --install -s /bin
# /usr/bin: programs staged from Debian packages (rdma, the benchmark tools).
export PATH=/bin:/tests:/usr/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t debugfs debugfs /sys/kernel/debug
mount -t tmpfs tmpfs /tmp

mode=$(sed -n 's/.*rmlx5.mode=\([a-z-]*\).*/\1/p' /proc/cmdline)
filter=$(sed -n 's/.*rmlx5.filter=\([^ ]*\).*/\1/p' /proc/cmdline)
params=$(sed -n 's/.*rmlx5.params=\([^ ]*\).*/\1/p' /proc/cmdline | tr ',' ' ')
# Tests learn the HCA count from here (the module's parameters are not
# exposed in sysfs).
RMLX5_NUM_HCAS=2
for p in $params; do
    case "$p" in num_hcas=*) RMLX5_NUM_HCAS=${p#num_hcas=} ;; esac
done
export RMLX5_NUM_HCAS

# Debian's rdma and ip with their libraries (scripts/bench-userland.sh
# check), for the ib_core and SMC-R checks.
rdma() { LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu /usr/bin/rdma "$@"; }
IP() { LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu /usr/bin/ip "$@"; }

pass() { echo "rmlx5-test: PASS $1"; }
fail() { echo "rmlx5-test: FAIL $1: $2"; }
finish() {
    echo "rmlx5-guest: DONE"
    sync
    reboot -f
}

# Leaks that exist before our module loads are not ours: start from a clean
# kmemleak slate.
kml=/sys/kernel/debug/kmemleak
# Its automatic scan (every 10 minutes) is switched off: check_kmemleak
# scans at the end, when every object should be gone, while a scan in the
# middle of a run may print a report on an object that is still in use and
# referenced only where kmemleak does not look (a page, device memory),
# which the console check would count as a failure.
if [ -w $kml ]; then
    echo scan=off > $kml
    echo scan > $kml
    echo clear > $kml
fi

# check_kmemleak NAME: the kmemleak scan, as test NAME.
check_kmemleak() {
    if [ -w $kml ]; then
        # kmemleak only reports objects older than 5 s; scan twice to be sure.
        sleep 6
        echo scan > $kml
        echo scan > $kml
        # debugfs files have size 0 whatever they hold: read the report.
        report=$(cat $kml)
        if [ -n "$report" ]; then
            echo "$report"
            fail "$1" "unreferenced objects reported (see above)"
        else
            pass "$1"
        fi
    else
        fail "$1" "kmemleak is not available in this kernel"
    fi
}

# make pci-smoke (and make check's PCI run): the emulated ConnectX as the
# guest sees it, and with rmlx5.ko in the image, what its PCI driver does
# with it; then kmemleak.
if [ "$mode" = pci-smoke ]; then
    /tests/pci-smoke.sh
    if [ -f /lib/modules/rmlx5.ko ]; then
        check_kmemleak cx_kmemleak
    fi
    finish
fi

# make check's production-like run: tests/guest/prod.sh loads and unloads
# the module itself.
if [ "$mode" = prod ]; then
    /tests/prod.sh
    finish
fi

echo "rmlx5-guest: loading rmlx5.ko $params"
# KUnit suites built into the module run here and print KTAP.
if insmod /lib/modules/rmlx5.ko $params; then
    pass module_load
else
    fail module_load "insmod exited $?"
    finish
fi

if [ "$mode" = demo ]; then
    /tests/demo.sh
    finish
fi
if [ "$mode" = perf ]; then
    /tests/perf.sh
    finish
fi
if [ "$mode" = bench ]; then
    /tests/bench.sh
    finish
fi
# make stress: the stress programs at full scale instead of the tests, then
# the same unload, leak and splat checks as make check (below).
stress=$(sed -n 's/.*rmlx5.stress=\([^ ]*\).*/\1/p' /proc/cmdline)
if [ "$mode" = stress ]; then
    RMLX5_STRESS=$stress /tests/stress.sh
fi

# Guest test programs: each prints its own PASS/FAIL markers; a program that
# exits non-zero without printing a FAIL still fails the run (the host
# runner checks the exit marker).
for t in /tests/rmlx5-*-tests; do
    [ "$mode" = stress ] && break
    [ -x "$t" ] || continue
    name=$(basename "$t")
    "$t" $filter
    echo "rmlx5-guest: EXIT $name $?"
done

# The sample kernel ULP runs its verbs tests at load and prints markers.
if [ "$mode" != stress ] && [ -f /lib/modules/rmlx5_ulp.ko ] &&
    [ -z "$filter" -o "${filter#ulp}" != "$filter" ]; then
    if insmod /lib/modules/rmlx5_ulp.ko; then
        rmmod rmlx5_ulp || fail ulp_unload "rmmod rmlx5_ulp failed"
    else
        fail ulp_load "insmod rmlx5_ulp exited $?"
    fi
    # Again in leak mode: it unloads without destroying its objects, which
    # rmlx5 must reclaim at its own unload (checked below, with kmemleak).
    if insmod /lib/modules/rmlx5_ulp.ko leak=1; then
        rmmod rmlx5_ulp || fail ulp_leak_unload "rmmod rmlx5_ulp failed"
        ulp_leaked=1
    else
        fail ulp_leak_load "insmod rmlx5_ulp leak=1 exited $?"
    fi
fi

# rmlx5 as an ib_core device (kernels with the RDMA core): what sysfs and
# iproute2's rdma tool show, then a ULP of the generic ib_* API
# (samples/rmlx5_ibcore), and one that stays attached until rmmod rmlx5.
if [ "$mode" != stress ] && [ -d /sys/class/infiniband ] &&
    [ -z "$filter" -o "${filter#ib}" != "$filter" ]; then
    ok=1
    for n in $(seq 0 $((RMLX5_NUM_HCAS - 1))); do
        d=/sys/class/infiniband/rmlx5_$n
        state=$(cat $d/ports/1/state 2>/dev/null)
        lid=$(cat $d/ports/1/lid 2>/dev/null)
        ll=$(cat $d/ports/1/link_layer 2>/dev/null)
        nt=$(cat $d/node_type 2>/dev/null)
        guid=$(cat $d/node_guid 2>/dev/null)
        fw=$(cat $d/fw_ver 2>/dev/null)
        echo "rmlx5-guest: rmlx5_$n: state '$state' lid '$lid' link_layer '$ll' node_type '$nt' guid $guid fw $fw"
        # The identity rmlx5's uverbs device reports too (rmlx5-devinfo).
        if [ "$state" != "4: ACTIVE" ] || [ "$lid" != "0x$((n + 1))" ] ||
            [ "$ll" != InfiniBand ] || [ "$nt" != "1: CA" ] ||
            [ "$guid" != "0002:c903:0000:000$n" ] || [ "$fw" != 1.6.0 ]; then
            ok=
        fi
    done
    if [ -n "$ok" ]; then
        pass ib_sysfs
    else
        fail ib_sysfs "/sys/class/infiniband/rmlx5_<n> missing or not an active IB CA port with LID n+1"
    fi
    if [ -x /usr/bin/rdma ]; then
        echo "rmlx5-guest: rdma dev; rdma link"
        rdma dev
        links=$(rdma link)
        echo "$links"
        ok=1
        for n in $(seq 0 $((RMLX5_NUM_HCAS - 1))); do
            rdma dev show rmlx5_$n >/dev/null 2>&1 || ok=
            echo "$links" | grep -qE "^link rmlx5_$n/1 .*state ACTIVE physical_state LINK_UP" || ok=
        done
        if [ -n "$ok" ]; then
            pass ib_rdma_tool
        else
            fail ib_rdma_tool "rdma dev / rdma link do not show every rmlx5_<n> with port 1 ACTIVE"
        fi
    else
        fail ib_rdma_tool "no rdma tool in the guest (scripts/bench-userland.sh check)"
    fi
    if [ ! -f /lib/modules/rmlx5_ibtest.ko ]; then
        fail ib_ulp_load "rmlx5_ibtest.ko is not in the image"
    elif insmod /lib/modules/rmlx5_ibtest.ko; then
        rmmod rmlx5_ibtest || fail ib_ulp_unload "rmmod rmlx5_ibtest failed"
        # Again, holding objects on every device until rmmod rmlx5 below.
        if insmod /lib/modules/rmlx5_ibtest.ko hold=1; then
            ib_held=1
        else
            fail ib_hold_load "insmod rmlx5_ibtest hold=1 exited $?"
        fi
    else
        fail ib_ulp_load "insmod rmlx5_ibtest exited $?"
    fi
fi

# rdma-core's own programs (libmlx5, ibv_devinfo, ibv_rc_pingpong) on rmlx5
# through ib_uverbs, on kernels with it.
if [ "$mode" != stress ] && [ -d /sys/class/infiniband_verbs ] &&
    [ -z "$filter" -o "${filter#rdmacore}" != "$filter" ]; then
    RMLX5_NUM_HCAS=$RMLX5_NUM_HCAS /tests/rdma-core.sh
fi
# rdma-core's own test suite (pyverbs) on rmlx5_0.
if [ "$mode" != stress ] && [ -d /sys/class/infiniband_verbs ] &&
    [ -z "$filter" -o "${filter#pyverbs}" != "$filter" ]; then
    /tests/pyverbs.sh
fi

# The EQ interrupts of the software HCAs, with their counts (the KUnit
# suites above drove completions through them).
echo "rmlx5-guest: /proc/interrupts"
grep -E 'CPU|rmlx5' /proc/interrupts
if grep rmlx5_comp /proc/interrupts | awk '{ s = 0; for (i = 2; i <= NF; i++) if ($i ~ /^[0-9]+$/) s += $i; t += s } END { exit !(t > 0) }'; then
    pass eq_interrupts_counted
else
    fail eq_interrupts_counted "no rmlx5_comp interrupt was counted"
fi

# debugfs snapshot of rmlx5_0 (EQs, CQs, QPs, counters).
for f in eqs cqs qps stats; do
    echo "rmlx5-guest: debugfs rmlx5_0/$f"
    cat /sys/kernel/debug/rmlx5/rmlx5_0/$f
done
if [ -r /sys/kernel/debug/rmlx5/rmlx5_0/eqs ]; then
    pass debugfs_present
else
    fail debugfs_present "no /sys/kernel/debug/rmlx5/rmlx5_0/eqs"
fi
# The path figures: the KUnit suites and the tests above ran the engine and
# took interrupts (and, unfiltered, user programs rang doorbells), so those
# rows must have counted; a write zeroes them.
perf=/sys/kernel/debug/rmlx5/perf
echo "rmlx5-guest: debugfs rmlx5/perf"
cat $perf
count() { awk -v s="$1" '$1 == s { print $2 }' $perf; }
kicks=$(count kick_send)
[ -n "$filter" ] && kicks=1
if [ "${kicks:-0}" -gt 0 ] && [ "$(count engine)" -gt 0 ] &&
    [ "$(count eq_handler)" -gt 0 ] && echo 0 > $perf && [ "$(count engine)" = 0 ]; then
    pass perf_figures
else
    fail perf_figures "rmlx5/perf did not count the doorbell and event paths, or did not reset"
fi

if rmmod rmlx5; then
    pass module_unload
else
    fail module_unload "rmmod exited $?"
fi
# The attached ib_* ULP was told to let go of every device (its remove
# callback prints a marker per device), and can unload now.
if [ -n "${ib_held:-}" ]; then
    ok=1
    for n in $(seq 0 $((RMLX5_NUM_HCAS - 1))); do
        dmesg | grep -q "rmlx5-test: PASS ib_remove_rmlx5_$n" || ok=
    done
    if [ -n "$ok" ] && ! ls /sys/class/infiniband/rmlx5_* >/dev/null 2>&1; then
        pass ib_unregister_with_ulp
    else
        fail ib_unregister_with_ulp "rmmod rmlx5 did not remove every ib device through the attached client"
    fi
    rmmod rmlx5_ibtest || fail ib_hold_unload "rmmod rmlx5_ibtest failed"
fi
# 2 PDs, 2 MRs, 2 CQs and 2 QPs left by the leak-mode ULP.
if [ -n "${ulp_leaked:-}" ]; then
    if dmesg | grep -q 'rmlx5: reclaimed 8 object(s) left by kernel ULPs (0 could not'; then
        pass ulp_leak_reclaimed
    else
        fail ulp_leak_reclaimed "rmlx5 did not report reclaiming 8 objects"
    fi
fi
if ls /dev/rmlx5_uverbs* >/dev/null 2>&1; then
    fail devnodes_removed "device nodes still present after rmmod"
else
    pass devnodes_removed
fi

# SMC-R, the kernel's own sockets-over-RDMA ULP, over rmlx5's ib_core
# devices as RoCE ports: rmlx5 is loaded again with rmlx5_0 on veth0 (here)
# and rmlx5_1 on veth1 (in namespace smcb); an AF_SMC connection between
# the two sends 1 MiB, which the server checks. The client's socket must
# report SMC-R mode (smc_diag; a fallback names its reason), and since
# SMC-R moves the data by RDMA WRITE, rmlx5's DMA counter must have moved
# at least that much (a TCP fallback moves nothing through it).
if [ "$mode" != stress ] && [ -d /proc/sys/net/smc ] &&
    [ -z "$filter" -o "${filter#smc}" != "$filter" ]; then
    smc_bytes=1048576
    smc_setup() {
        mkdir -p /run/netns &&
            IP netns add smcb &&
            IP link add veth0 type veth peer name veth1 netns smcb &&
            IP addr add 10.77.0.1/24 dev veth0 && IP link set veth0 up &&
            IP -n smcb addr add 10.77.0.2/24 dev veth1 &&
            IP -n smcb link set veth1 up && IP -n smcb link set lo up
    }
    # The module's KUnit suites ran at the first load already.
    echo 'none-*' > /sys/module/kunit/parameters/filter_glob 2>/dev/null
    if [ ! -x /usr/bin/ip ]; then
        fail smc_r "no iproute2 ip in the guest (scripts/bench-userland.sh check)"
    elif ! smc_setup; then
        fail smc_r "could not set up veth0/veth1 and namespace smcb"
    elif ! insmod /lib/modules/rmlx5.ko $params roce_netdevs=veth0,veth1; then
        fail smc_r "insmod rmlx5 roce_netdevs=veth0,veth1 exited $?"
    else
        echo "rmlx5-guest: rdma link with RoCE ports"
        rdma link
        g=/sys/class/infiniband/rmlx5_0/ports/1
        echo "rmlx5-guest: rmlx5_0 GID 0: $(cat $g/gids/0) $(cat $g/gid_attrs/types/0) $(cat $g/gid_attrs/ndevs/0)"
        if rdma link | grep -qE "^link rmlx5_0/1 .*state ACTIVE .*netdev veth0"; then
            pass smc_roce_port
        else
            fail smc_roce_port "rmlx5_0 port 1 is not an active RoCE port on veth0"
        fi
        rmlx5-smc server /run/netns/smcb 10.77.0.2 7777 > /tmp/smc-server.log 2>&1 &
        srv=$!
        for i in 1 2 3 4 5 6 7 8 9 10; do
            grep -q ready /tmp/smc-server.log && break
            sleep 1
        done
        if rmlx5-smc client 10.77.0.2 7777 $smc_bytes > /tmp/smc-client.log 2>&1 &&
            wait $srv; then
            cat /tmp/smc-client.log /tmp/smc-server.log
            echo "rmlx5-guest: SMC-R: the ULP's QPs on rmlx5 (rdma res)"
            rdma res show qp
            moved=$(awk '$1 == "dma_access" { print $3 }' /sys/kernel/debug/rmlx5/perf)
            echo "rmlx5-guest: SMC-R: rmlx5 moved ${moved:-0} bytes by DMA"
            # The socket's own mode (smc_diag) and rmlx5's DMA counter.
            if grep -q "client: mode SMC-R" /tmp/smc-client.log &&
                [ "${moved:-0}" -ge "$smc_bytes" ]; then
                pass smc_r
            else
                fail smc_r "not over SMC-R: $(grep 'client: mode' /tmp/smc-client.log), rmlx5 moved ${moved:-0} bytes"
            fi
        else
            cat /tmp/smc-client.log /tmp/smc-server.log
            kill $srv 2>/dev/null
            fail smc_r "the AF_SMC transfer failed"
        fi
        if rmmod rmlx5; then
            pass smc_unload
        else
            fail smc_unload "rmmod rmlx5 after SMC-R exited $?"
        fi
    fi
fi

# Kernel ULPs through rdma_cm (ib_mad, ib_cm, NVMe over Fabrics) over
# rmlx5's RoCE ports: tests/guest/rdmacm.sh loads and unloads rmlx5 itself.
if [ "$mode" != stress ] && [ -d /sys/class/infiniband ] &&
    [ -z "$filter" -o "${filter#rdmacm}" != "$filter" -o "${filter#cm}" != "$filter" -o \
      "${filter#nvmf}" != "$filter" ]; then
    echo 'none-*' > /sys/module/kunit/parameters/filter_glob 2>/dev/null
    /tests/rdmacm.sh "$params"
fi
# The kernel's RDS selftest with rmlx5 in place of rxe (tests/guest/rds.sh).
if [ "$mode" != stress ] && [ -d /sys/class/infiniband ] &&
    [ -z "$filter" -o "${filter#rds}" != "$filter" ]; then
    /tests/rds.sh "$params"
fi

check_kmemleak kmemleak
finish
