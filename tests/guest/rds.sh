#!/bin/busybox sh
# The kernel's own RDS selftest (tools/testing/selftests/net/rds/test.py,
# staged under /ksft by tests/run-guest.py) over rmlx5 instead of rxe
# (make check's main guest, after tests/guest/rdmacm.sh).
#
# The selftest makes its two RDMA devices itself, with `rdma link add
# rxe0 type rxe netdev veth_rdma0` (and rxe1 on veth_rdma1), on a veth pair
# it creates in the initial namespace. rmlx5 is loaded with link_hcas=2, so
# that its two software HCAs wait for exactly that command, and the only
# change to the selftest is the link type, `type rmlx5` (the device names
# rxe0 and rxe1 are the selftest's). It sends 50,000 RDS messages of 64
# bytes between the two devices over RDS's IB transport (rds_rdma, which
# connects through rdma_cm) and compares their hashes.
set -u
pass() { echo "rmlx5-test: PASS $1"; }
fail() { echo "rmlx5-test: FAIL $1: $2"; }
params=${1:-}
t=/ksft/tools/testing/selftests/net/rds/test.py
export LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu
# Debian's ip, rdma, tc before busybox's applets of the same names.
export PATH=/usr/bin:$PATH
# The selftest runs tc and sysctl by their /usr/sbin paths.
mkdir -p /usr/sbin
for p in tc sysctl; do [ -x /usr/bin/$p ] && ln -sf /usr/bin/$p /usr/sbin/$p; done

if [ ! -f $t ] || [ ! -x /usr/bin/python3 ]; then
    fail rds_selftest "no RDS selftest or python3 in the guest (tests/run-guest.py, scripts/bench-userland.sh check)"
    exit 0
fi
if ! insmod /lib/modules/rmlx5.ko $params link_hcas=2; then
    fail rds_selftest "insmod rmlx5 link_hcas=2 exited $?"
    exit 0
fi
before=$(awk '$1 == "dma_access" { print $3 }' /sys/kernel/debug/rmlx5/perf)
cd "$(dirname $t)"
timeout 900 python3 test.py -T rdma -t 800 > /tmp/rds.log 2>&1
rc=$?
cat /tmp/rds.log
after=$(awk '$1 == "dma_access" { print $3 }' /sys/kernel/debug/rmlx5/perf)
moved=$(( ${after:-0} - ${before:-0} ))
echo "rmlx5-guest: rds: rmlx5 moved $moved bytes by DMA"
# 50,000 messages of 64 bytes, plus RDS's headers: at least 3.2 MB through
# rmlx5 (RDS falls back to no other transport: the selftest pins rds_rdma).
if [ "$rc" = 0 ] && grep -q "^ok 1 rds selftest rdma" /tmp/rds.log &&
    [ "$moved" -ge 3200000 ]; then
    pass rds_selftest_rdma
else
    fail rds_selftest_rdma "test.py exited $rc, rmlx5 moved $moved bytes (see above)"
fi
# The selftest deleted its links and veths; rmlx5 unloads with rds_rdma's
# client attached.
if rdma_left=$(ls /sys/class/infiniband 2>/dev/null) && [ -z "$rdma_left" ]; then
    pass rds_links_deleted
else
    fail rds_links_deleted "ib devices left after the selftest: $rdma_left"
fi
cd /
if rmmod rmlx5; then
    pass rds_unload
else
    fail rds_unload "rmmod rmlx5 exited $?"
fi
