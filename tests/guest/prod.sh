#!/bin/busybox sh
# make check's production-like run (run-guest.py --mode prod): rmlx5 on the
# benchmark kernel, which has what users' kernels have and none of the test
# kernel's debug machinery: 16 KiB task stacks in vmalloc space with guard
# pages, no KASAN (which doubles the stacks and hid a 16 KiB frame in
# Module::init), no lockdep, no kmemleak. A frame too big for the stack
# oopses here at once. The smoke subset: load with both software HCAs and
# the emulated ConnectX-5, the pingpong in both modes, the ib_core devices
# and both sample ULPs, bring-up of the function and user traffic on it,
# unload. Markers as in tests/guest/init.sh; the runner fails the run on any
# kernel report on the console.
pass() { echo "rmlx5-test: PASS $1"; }
fail() { echo "rmlx5-test: FAIL $1: $2"; }

echo "==== rmlx5 prod"
echo "kernel: $(uname -r), $(grep -c ^processor /proc/cpuinfo) CPUs"

# Is this kernel what it claims to be? Task stacks are vmalloc areas of
# four pages (16 KiB; /proc/vmallocinfo lists them under the fork path that
# allocates them, each with its guard page), and the debug options are off.
stacks=$(grep -E ' (copy_process|dup_task_struct|alloc_thread_stack_node)\+' /proc/vmallocinfo |
    sed -n 's/.* \(pages=[0-9]*\) vmalloc.*/\1/p' | sort | uniq -c | tr -s ' \n' ' ')
debug=
dmesg | grep -q KernelAddressSanitizer && debug="$debug KASAN"
[ -e /sys/kernel/debug/kmemleak ] && debug="$debug kmemleak"
[ -e /proc/lockdep ] && debug="$debug lockdep"
echo "task stacks in vmalloc space (count, size):${stacks:- none}"
if echo "$stacks" | grep -qE '^ ?[0-9]+ pages=4 ?$' && [ -z "$debug" ]; then
    pass prod_kernel_16k_vmap_stacks_no_debug
else
    fail prod_kernel_16k_vmap_stacks_no_debug "stack areas '${stacks:-none}', debug options:${debug:- none}"
fi

# The emulated ConnectX-5 next to the software HCAs.
dev=
for d in /sys/bus/pci/devices/*; do
    if [ "$(cat $d/vendor)" = 0x15b3 ] && [ "$(cat $d/device)" = 0x1017 ]; then
        dev=$d
    fi
done
bdf=${dev##*/}

echo "--- insmod rmlx5.ko, the function handed over (driver_override)"
[ -n "$dev" ] && echo rmlx5_cx > $dev/driver_override
if insmod /lib/modules/rmlx5.ko; then
    pass prod_module_load
else
    fail prod_module_load "insmod exited $?"
    echo "==== end of prod"
    exit 0
fi
dmesg | grep -E 'rmlx5' | tail -n 12

if [ -c /dev/rmlx5_uverbs0 ] && [ -c /dev/rmlx5_uverbs1 ]; then
    pass prod_software_hcas
else
    fail prod_software_hcas "no /dev/rmlx5_uverbs0 and 1"
fi

# pingpong NAME DEVICE PEER ITERS: rmlx5-pingpong of 4 KiB messages in
# polling and in event mode, as make demo runs it; cases NAME_polling and
# NAME_events.
pingpong() {
    for mode in polling events; do
        flag=
        [ $mode = events ] && flag=--events
        echo "--- rmlx5-pingpong $flag: rmlx5_$2 <-> rmlx5_$3, 4096 B x $4"
        if out=$(rmlx5-pingpong --size 4096 --iters $4 $flag --device $2 --peer-device $3 2>&1) &&
            echo "$out" | grep -q "Mbit/sec"; then
            echo "$out" | sed 's/^/  /'
            pass $1_$mode
        else
            echo "$out" | sed 's/^/  /'
            fail $1_$mode "rmlx5-pingpong $flag on rmlx5_$2 and rmlx5_$3 failed or printed no Mbit/sec line"
        fi
    done
}

# The pingpong between the two software HCAs.
pingpong prod_pingpong 0 1 500

# The software HCAs as ib_core devices with an active port.
ok=1
for i in 0 1; do
    state=$(cat /sys/class/infiniband/rmlx5_$i/ports/1/state 2>/dev/null)
    echo "rmlx5_$i port 1: ${state:-missing}"
    case "$state" in *ACTIVE*) ;; *) ok= ;; esac
done
if [ -n "$ok" ]; then
    pass prod_ib_core_devices
else
    fail prod_ib_core_devices "rmlx5_0 and rmlx5_1 are not both ib_core devices with an ACTIVE port"
fi

# rdma-core's ibv_rc_pingpong through libmlx5 (the UAR trap's faults and
# unmapping on this kernel), data checked, polling and with events.
L="LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu"
# rcpp NAME SERVER_DEV CLIENT_DEV PORT ARGS...: one data-checked pair.
rcpp() {
    name=$1 sdev=$2 cdev=$3 port=$4
    shift 4
    env $L ibv_rc_pingpong -d $sdev -i 1 -p $port -n 300 -c "$@" > /tmp/pp-s.log 2>&1 &
    srv=$!
    sleep 1
    if env $L timeout 120 ibv_rc_pingpong -d $cdev -i 1 -p $port -n 300 -c "$@" 127.0.0.1 \
        > /tmp/pp-c.log 2>&1 && wait $srv; then
        grep "iters in" /tmp/pp-c.log
        pass $name
    else
        kill -9 $srv 2>/dev/null
        cat /tmp/pp-s.log /tmp/pp-c.log
        fail $name "ibv_rc_pingpong -c $* between $sdev and $cdev failed"
    fi
}
if [ -x /usr/bin/ibv_rc_pingpong ]; then
    ifconfig lo 127.0.0.1 up 2>/dev/null
    rcpp prod_rc_pingpong rmlx5_1 rmlx5_0 18600
    rcpp prod_rc_pingpong_events rmlx5_1 rmlx5_0 18601 -e
else
    fail prod_rc_pingpong "no ibv_rc_pingpong in the guest (scripts/bench-userland.sh check)"
fi

# Both sample ULPs over the software HCAs: rmlx5's own API (every verb,
# the ib_send_wr-like post path included) and the generic ib_* API in its
# three CQ poll contexts. Their cases count as prod_ulp_* and prod_ib_*.
if insmod /lib/modules/rmlx5_ulp.ko prefix=prod_ulp; then
    rmmod rmlx5_ulp || fail prod_ulp_unload "rmmod rmlx5_ulp failed"
else
    fail prod_ulp_load "insmod rmlx5_ulp exited $?"
fi
if insmod /lib/modules/rmlx5_ibtest.ko prefix=prod_ib; then
    rmmod rmlx5_ibtest || fail prod_ib_unload "rmmod rmlx5_ibtest failed"
else
    fail prod_ib_load "insmod rmlx5_ibtest exited $?"
fi

# The emulated ConnectX-5: brought up through the command interface at
# insmod, a verbs device with a user-space node.
n=
if [ -n "$bdf" ]; then
    for i in $(seq 1 100); do
        n=$(dmesg | sed -n "s/.*rmlx5_cx $bdf: rmlx5_\([0-9]*\): verbs device.*/\1/p" | tail -n 1)
        [ -n "$n" ] && [ -c /dev/rmlx5_uverbs$n ] && break
        sleep 0.2
    done
fi
if [ -n "$n" ] && dmesg | grep -q "rmlx5_cx $bdf: ConnectX-5 up" && [ -c /dev/rmlx5_uverbs$n ]; then
    pass prod_cx_bring_up
    dmesg | grep "rmlx5_cx $bdf" | sed 's/^/  /'
else
    fail prod_cx_bring_up "no ConnectX-5 at ${bdf:-no 15b3:1017 function}, or no verbs device and node for it"
    n=
fi

# User traffic on the function: the pingpong as a loopback pair, its
# doorbells BAR stores (no KICK), in both modes.
if [ -n "$n" ]; then
    pingpong prod_cx_pingpong $n $n 200
fi
# And through libmlx5 (queues in the process's pages by page list, UAR
# pages of BAR0 mapped write-combined: this kernel has PAT).
if [ -n "$n" ] && [ -x /usr/bin/ibv_rc_pingpong ]; then
    rcpp prod_cx_rc_pingpong rmlx5_$n rmlx5_$n 18602
    rcpp prod_cx_rc_pingpong_events rmlx5_$n rmlx5_$n 18603 -e
fi

# Unload: the function goes down with every page back, the nodes go.
echo "--- rmmod rmlx5"
if rmmod rmlx5; then
    if [ -e /dev/rmlx5_uverbs0 ] || [ -d /sys/class/infiniband/rmlx5_0 ]; then
        fail prod_module_unload "device nodes or ib_core devices left after rmmod"
    elif [ -n "$n" ] && ! dmesg | grep -q "rmlx5_cx $bdf: ConnectX-5 down, every page returned"; then
        fail prod_module_unload "the function did not go down with every page returned"
    else
        pass prod_module_unload
    fi
else
    fail prod_module_unload "rmmod exited $?"
fi
echo "==== end of prod"
