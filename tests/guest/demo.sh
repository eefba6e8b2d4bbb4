#!/bin/sh
# What `make demo` shows inside the guest: the module, its devices, then
# the pingpong between rmlx5_0 and rmlx5_1 in polling and event modes, with
# the EQ interrupt counts before and after.
echo
echo "==== rmlx5 demo ===="
echo "kernel: $(uname -r), $(nproc) CPUs"
echo
echo "--- module"
grep rmlx5 /proc/modules
echo "  num_hcas = ${RMLX5_NUM_HCAS}"
echo
echo "--- user-space device nodes"
ls -l /dev/rmlx5_uverbs*
echo
echo "--- kernel log of the module (KUnit summary)"
dmesg | grep -E 'rmlx5[:_ ]|# Subtest|^\[[ 0-9.]*\] *ok [0-9]' | grep -v '    ok' | sed 's/^/  /' | tail -n 25
echo
echo "--- rmlx5-devinfo"
rmlx5-devinfo
irqs() {
    grep -E 'CPU|rmlx5' /proc/interrupts | sed 's/^/  /'
}
echo
echo "--- /proc/interrupts (rmlx5) before the pingpong"
irqs
echo
echo "--- rmlx5-pingpong, polling mode: rmlx5_0 <-> rmlx5_1, 4096 B x 1000"
rmlx5-pingpong --size 4096 --iters 1000 --device 0 --peer-device 1
echo "  (exit status $?)"
echo
echo "--- /proc/interrupts (rmlx5) after polling mode (polling arms no CQ)"
irqs
echo
echo "--- rmlx5-pingpong, event mode: rmlx5_0 <-> rmlx5_1, 4096 B x 1000"
rmlx5-pingpong --size 4096 --iters 1000 --events --device 0 --peer-device 1
echo "  (exit status $?)"
echo
echo "--- /proc/interrupts (rmlx5) after event mode: rmlx5_comp counts moved"
irqs
echo
echo "--- rmlx5-pingpong, event mode, 64 B x 2000, one device (rmlx5_0 loopback)"
rmlx5-pingpong --size 64 --iters 2000 --events --device 0 --peer-device 0
echo "  (exit status $?)"
if [ -x /usr/bin/ibv_devinfo ]; then
    # rdma-core's own tools, unmodified, through ib_uverbs and libmlx5.
    L="LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu"
    ifconfig lo 127.0.0.1 up 2>/dev/null
    echo
    echo "--- rdma-core: ibv_devices, ibv_devinfo -d rmlx5_0 (libmlx5 bound)"
    env $L ibv_devices
    env $L ibv_devinfo -d rmlx5_0
    echo "--- rdma-core: ibv_rc_pingpong -c (data checked): rmlx5_1 <- rmlx5_0, 4096 B x 300"
    env $L ibv_rc_pingpong -d rmlx5_1 -i 1 -n 300 -c > /tmp/demo-pp-server.log 2>&1 &
    srv=$!
    sleep 1
    env $L ibv_rc_pingpong -d rmlx5_0 -i 1 -n 300 -c 127.0.0.1
    echo "  (exit status $?)"
    wait $srv
    echo "  (the software HCA finds libmlx5's doorbells by trapping its UAR"
    echo "   stores, slow under emulation: Documentation/rdma-core.md)"
fi
echo "==== end of demo ===="
