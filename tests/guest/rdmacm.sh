#!/bin/busybox sh
# Kernel ULPs that connect through rdma_cm, over rmlx5's RoCE ports (make
# check's main guest, after SMC-R). rmlx5 is loaded with rmlx5_0 on veth_r0
# and rmlx5_1 on veth_r1, a veth pair in the initial namespace set up as the
# kernel's RDS selftest sets up its pair for rxe (two /32 addresses, host
# routes through the other end, permanent neighbours, accept_local, no
# reverse-path filter), so that rdma_cm's address resolution names
# rmlx5_0 for 10.78.0.1 and rmlx5_1 for 10.78.0.2 and every MAD and
# datagram between them crosses rmlx5's GSI QPs.
#
#   1. rmlx5_cmtest.ko (samples/rmlx5_ibcore): connect, data, disconnect in
#      each CQ poll context, loopback, UD with SIDR, refusals; with
#      rdma_cm's default GID type RoCE v2, then RoCE v1 (configfs).
#   2. NVMe over Fabrics: an nvmet-rdma target exporting a memory-backed
#      null_blk namespace on 10.78.0.2, an nvme-rdma host connecting to it
#      from 10.78.0.1 (rmlx5_0 -> rmlx5_1) and from 10.78.0.2 itself (one
#      device, the target address local); 64 MiB written and read back
#      with 4 KiB and 1 MiB blocks (O_DIRECT), compared, and rmlx5's DMA
#      counter showing the bytes crossed it; disconnect.
#   3. rmmod rmlx5 with the ULPs' clients still registered.
set -u
rdma() { LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu /usr/bin/rdma "$@"; }
IP() { LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu /usr/bin/ip "$@"; }
pass() { echo "rmlx5-test: PASS $1"; }
fail() { echo "rmlx5-test: FAIL $1: $2"; }

params=${1:-}
A=10.78.0.1
B=10.78.0.2
cfg=/sys/kernel/config

setup_net() {
    IP link add veth_r0 type veth peer name veth_r1 || return 1
    IP link set veth_r0 up && IP link set veth_r1 up || return 1
    for d in veth_r0 veth_r1; do
        echo 1 > /proc/sys/net/ipv4/conf/$d/accept_local
        echo 0 > /proc/sys/net/ipv4/conf/$d/rp_filter
    done
    echo 0 > /proc/sys/net/ipv4/conf/all/rp_filter
    IP addr add $A/32 dev veth_r0 && IP addr add $B/32 dev veth_r1 || return 1
    IP route add $B/32 dev veth_r0 && IP route add $A/32 dev veth_r1 || return 1
    mac0=$(cat /sys/class/net/veth_r0/address)
    mac1=$(cat /sys/class/net/veth_r1/address)
    IP neigh add $B lladdr "$mac1" dev veth_r0 nud permanent &&
        IP neigh add $A lladdr "$mac0" dev veth_r1 nud permanent
}

# dma_bytes: what rmlx5's engine has moved by DMA so far.
dma_bytes() { awk '$1 == "dma_access" { print $3 }' /sys/kernel/debug/rmlx5/perf; }

# roce_mode DEV MODE: rdma_cm's default GID type for DEV's port.
roce_mode() {
    mkdir -p $cfg/rdma_cm/$1 2>/dev/null
    echo "$2" > $cfg/rdma_cm/$1/ports/1/default_roce_mode
}

run_cmtest() {
    local prefix=$1
    if [ ! -f /lib/modules/rmlx5_cmtest.ko ]; then
        fail ${prefix}_load "rmlx5_cmtest.ko is not in the image"
        return
    fi
    if insmod /lib/modules/rmlx5_cmtest.ko prefix=$prefix; then
        rmmod rmlx5_cmtest || fail ${prefix}_unload "rmmod rmlx5_cmtest failed"
    else
        fail ${prefix}_load "insmod rmlx5_cmtest exited $?"
    fi
}

# NVMe over Fabrics. nvmet_setup exports /dev/nullb_r as namespace 1 of
# subsystem rmlx5-test on port 1 ($B:4420, RDMA).
sub=$cfg/nvmet/subsystems/rmlx5-test
port=$cfg/nvmet/ports/1
nvmet_setup() {
    mkdir $cfg/nullb/nullb_r || return 1
    echo 1 > $cfg/nullb/nullb_r/memory_backed
    echo 128 > $cfg/nullb/nullb_r/size
    echo 4096 > $cfg/nullb/nullb_r/blocksize
    echo 1 > $cfg/nullb/nullb_r/power || return 1
    mkdir $sub || return 1
    echo 1 > $sub/attr_allow_any_host
    mkdir $sub/namespaces/1 || return 1
    echo /dev/nullb_r > $sub/namespaces/1/device_path
    echo 1 > $sub/namespaces/1/enable || return 1
    mkdir $port || return 1
    echo rdma > $port/addr_trtype
    echo ipv4 > $port/addr_adrfam
    echo $B > $port/addr_traddr
    echo 4420 > $port/addr_trsvcid
    ln -s $sub $port/subsystems/rmlx5-test
}
nvmet_teardown() {
    rm -f $port/subsystems/rmlx5-test
    rmdir $port 2>/dev/null
    echo 0 > $sub/namespaces/1/enable 2>/dev/null
    rmdir $sub/namespaces/1 2>/dev/null
    rmdir $sub 2>/dev/null
    echo 0 > $cfg/nullb/nullb_r/power 2>/dev/null
    rmdir $cfg/nullb/nullb_r 2>/dev/null
}

# nvme_round NAME HOST_ADDR: connect from HOST_ADDR, write and read back
# 64 MiB twice (4 KiB writes / 1 MiB reads, then 1 MiB writes / 4 KiB
# reads), check rmlx5 moved it, disconnect.
nvme_round() {
    local name=$1 host=$2 ctrl dev before after i
    if ! echo "transport=rdma,traddr=$B,trsvcid=4420,nqn=rmlx5-test,host_traddr=$host" \
        > /dev/nvme-fabrics 2>/tmp/nvme-connect.err; then
        fail ${name}_connect "connect from $host failed: $(cat /tmp/nvme-connect.err)"
        dmesg | grep -iE 'nvme|rdma' | tail -n 20
        return
    fi
    ctrl=$(ls -d /sys/class/nvme/nvme* 2>/dev/null | head -n1)
    dev=
    for i in $(seq 1 30); do
        dev=$(ls /dev/nvme*n1 2>/dev/null | head -n1)
        [ -n "$dev" ] && break
        sleep 1
    done
    echo "rmlx5-guest: nvme: $(cat $ctrl/transport 2>/dev/null) $(cat $ctrl/address 2>/dev/null) -> $dev"
    if [ -z "$dev" ]; then
        fail ${name}_connect "no namespace block device appeared"
    else
        pass ${name}_connect
        before=$(dma_bytes)
        if dd if=/tmp/nvme-pattern of=$dev bs=4096 oflag=direct 2>/dev/null &&
            dd if=$dev bs=1048576 count=64 iflag=direct 2>/dev/null | cmp - /tmp/nvme-pattern; then
            pass ${name}_4k_write_1m_read
        else
            fail ${name}_4k_write_1m_read "64 MiB read back differs or I/O failed"
        fi
        # The other way round, with new data, so that what the first round
        # left cannot pass.
        if head -c 67108864 /dev/urandom > /tmp/nvme-pattern &&
            dd if=/tmp/nvme-pattern of=$dev bs=1048576 oflag=direct 2>/dev/null &&
            dd if=$dev bs=4096 count=16384 iflag=direct 2>/dev/null | cmp - /tmp/nvme-pattern; then
            pass ${name}_1m_write_4k_read
        else
            fail ${name}_1m_write_4k_read "64 MiB read back differs or I/O failed"
        fi
        after=$(dma_bytes)
        moved=$(( ${after:-0} - ${before:-0} ))
        echo "rmlx5-guest: nvme: rmlx5 moved $moved bytes by DMA for 256 MiB of I/O"
        if [ "$moved" -ge $((256 * 1048576)) ]; then
            pass ${name}_through_rmlx5
        else
            fail ${name}_through_rmlx5 "rmlx5 moved $moved bytes, less than the 256 MiB of I/O"
        fi
    fi
    if [ -n "$ctrl" ] && echo 1 > $ctrl/delete_controller; then
        pass ${name}_disconnect
    else
        fail ${name}_disconnect "could not delete the controller"
    fi
}

if [ ! -x /usr/bin/ip ]; then
    fail rdmacm_setup "no iproute2 ip in the guest (scripts/bench-userland.sh check)"
    exit 0
fi
if ! setup_net; then
    fail rdmacm_setup "could not set up veth_r0/veth_r1"
    exit 0
fi
if ! insmod /lib/modules/rmlx5.ko $params roce_netdevs=veth_r0,veth_r1; then
    fail rdmacm_setup "insmod rmlx5 roce_netdevs=veth_r0,veth_r1 exited $?"
    exit 0
fi
pass rdmacm_setup
rdma link
mountpoint -q $cfg || mount -t configfs configfs $cfg

# 1. rdma_cm from the kernel, RoCE v2 then v1.
if roce_mode rmlx5_0 "RoCE v2" && roce_mode rmlx5_1 "RoCE v2"; then
    run_cmtest cm_v2
else
    fail cm_v2_mode "could not set rdma_cm's default RoCE mode to v2"
fi
if roce_mode rmlx5_0 "IB/RoCE v1" && roce_mode rmlx5_1 "IB/RoCE v1"; then
    run_cmtest cm_v1
else
    fail cm_v1_mode "could not set rdma_cm's default RoCE mode to v1"
fi
roce_mode rmlx5_0 "RoCE v2"
roce_mode rmlx5_1 "RoCE v2"
rmdir $cfg/rdma_cm/rmlx5_0 $cfg/rdma_cm/rmlx5_1 2>/dev/null

# 2. NVMe over Fabrics.
if [ ! -e /dev/nvme-fabrics ] || [ ! -d $cfg/nvmet ] || [ ! -d $cfg/nullb ]; then
    fail nvmf_setup "no /dev/nvme-fabrics, nvmet or null_blk configfs in this kernel"
elif ! head -c 67108864 /dev/urandom > /tmp/nvme-pattern; then
    fail nvmf_setup "could not make the 64 MiB pattern"
elif ! nvmet_setup; then
    fail nvmf_setup "could not configure the nvmet target"
    nvmet_teardown
else
    pass nvmf_setup
    nvme_round nvmf_rdma $A
    nvme_round nvmf_rdma_local $B
    nvmet_teardown
    if [ -e $sub ] || [ -e $port ]; then
        fail nvmf_teardown "the nvmet subsystem or port is still there"
    else
        pass nvmf_teardown
    fi
fi
rm -f /tmp/nvme-pattern

# 3. Unload with ib_mad, ib_cm, rdma_cm, nvme-rdma and nvmet-rdma attached.
if rmmod rmlx5; then
    pass rdmacm_unload
else
    fail rdmacm_unload "rmmod rmlx5 exited $?"
fi
IP link del veth_r0
