#!/bin/busybox sh
# What `make pci-smoke` checks inside the guest, with no driver bound: the
# emulated ConnectX-5 (rust/cx-emu behind QEMU's vfio-user-pci) is a PCI
# function 15b3:1017 of class 0x020700 with a 32 MiB 64-bit prefetchable
# BAR0 and an MSI-X capability, and BAR0 starts with an mlx5
# initialization segment: firmware 16.35.1012, command interface revision
# 5, not initializing. BAR0 is read through its sysfs resource file with
# rmlx5-pci-peek (the test kernel has no /dev/mem).
pass() { echo "rmlx5-test: PASS $1"; }
fail() { echo "rmlx5-test: FAIL $1: $2"; }
skip() { echo "rmlx5-test: SKIP $1: $2"; }
# Prints the kernel stack of every task in uninterruptible sleep (D), for
# a step that did not finish: the test kernel has no hung-task detector,
# and a stuck recovery otherwise leaves nothing in the log.
blocked_stacks() {
    for p in /proc/[0-9]*; do
        [ "$(awk '/^State:/ { print $2 }' $p/status 2>/dev/null)" = D ] || continue
        echo "blocked: ${p#/proc/} $(cat $p/comm 2>/dev/null)"
        sed 's/^/    /' $p/stack 2>/dev/null
    done
}
# RMLX5_HW=1 (scripts/hw-check.sh, make hw-check): the same checks on a
# host, on its real ConnectX function RMLX5_PCI, with what the guest has in
# /lib/modules, /tests and /bin under RMLX5_ROOT. What only the emulated
# function is, a card is not: its class and firmware version are skipped
# (SKIP lines); its BAR0 size, model and MSI-X as the first capability
# are left out of the checks, which take any ConnectX.
hw=${RMLX5_HW:-0}
root=${RMLX5_ROOT:-}

echo "==== rmlx5 pci-smoke"
# What lspci -nn would list (this busybox has no lspci).
echo "--- PCI functions"
dev=
cxdevs=
for d in /sys/bus/pci/devices/*; do
    echo "${d##*/} class $(cat $d/class) [$(cat $d/vendor | cut -c3-):$(cat $d/device | cut -c3-)]"
    if [ "$(cat $d/vendor)" = 0x15b3 ] && [ "$(cat $d/device)" = 0x1017 ]; then
        # The first is the one the checks below are about.
        [ -z "$dev" ] && dev=$d
        cxdevs="$cxdevs $d"
    fi
done
if [ "$hw" = 1 ]; then
    dev=/sys/bus/pci/devices/$RMLX5_PCI
fi
if [ -z "$dev" ]; then
    fail pci_function "no PCI function 15b3:1017 in /sys/bus/pci/devices"
    echo "==== end of pci-smoke"
    exit 0
fi
pass pci_function
echo "--- $dev"
echo "class $(cat $dev/class), subsystem $(cat $dev/subsystem_vendor):$(cat $dev/subsystem_device), irq $(cat $dev/irq)"
head -n 1 $dev/resource

if [ "$hw" = 1 ]; then
    skip pci_class "0x020700 is the emulated function's, this one's is $(cat $dev/class)"
elif [ "$(cat $dev/class)" = 0x020700 ]; then
    pass pci_class
else
    fail pci_class "class $(cat $dev/class), expected 0x020700"
fi

# BAR0: start, end and flags (IORESOURCE_MEM 0x200, _PREFETCH 0x2000,
# _MEM_64 0x100000).
set -- $(head -n 1 $dev/resource)
size=$(( $2 - $1 + 1 ))
if [ "$hw" = 1 ]; then
    # A card's BAR0 has its own size (here $size bytes): the flags only.
    if [ $(( $3 & 0x102200 )) = $((0x102200)) ]; then
        pass pci_bar0
    else
        fail pci_bar0 "BAR0 $1-$2 flags $3: expected 64-bit prefetchable memory"
    fi
elif [ "$size" = $((32 << 20)) ] && [ $(( $3 & 0x102200 )) = $((0x102200)) ]; then
    pass pci_bar0
else
    fail pci_bar0 "BAR0 $1-$2 flags $3: expected 32 MiB, 64-bit prefetchable memory"
fi

# The capability list: the pointer at 0x34, MSI-X (ID 0x11) there.
cap=$(hexdump -s 0x34 -n 1 -e '1/1 "%d"' $dev/config)
id=$(hexdump -s "$cap" -n 1 -e '1/1 "%02x"' $dev/config)
if [ "$hw" = 1 ]; then
    # A card lists other capabilities before MSI-X: follow the list
    # (each next pointer masked: its low bits are reserved, %d is signed).
    i=0
    while [ "$id" != 11 ] && [ "$cap" != 0 ] && [ $i -lt 48 ]; do
        cap=$(( $(hexdump -s $((cap + 1)) -n 1 -e '1/1 "%d"' $dev/config) & 0xfc ))
        id=$(hexdump -s "$cap" -n 1 -e '1/1 "%02x"' $dev/config)
        i=$((i + 1))
    done
fi
ctl=$(hexdump -s $((cap + 2)) -n 2 -e '1/2 "%d"' $dev/config)
if [ "$id" = 11 ]; then
    pass pci_msix_capability
    echo "MSI-X capability at $cap: $(( (ctl & 0x7ff) + 1 )) vectors"
    # run-guest.py --cx-emu-msix N: the table size must say N.
    want=$(sed -n 's/.*rmlx5.cxmsix=\([0-9]*\).*/\1/p' /proc/cmdline)
    if [ -n "$want" ]; then
        if [ $(( (ctl & 0x7ff) + 1 )) = "$want" ]; then
            pass pci_msix_table_size
        else
            fail pci_msix_table_size "$(( (ctl & 0x7ff) + 1 )) vectors, expected $want"
        fi
    fi
else
    fail pci_msix_capability "capability $id at $cap, expected MSI-X (11)"
fi

# The initialization segment: fw_rev (minor << 16 | major), cmdif_rev_fw_sub
# (cmdif revision << 16 | subminor), initializing (bit 31 while busy).
if out=$(rmlx5-pci-peek $dev/resource0 0x0 0x4 0x1fc 2>&1); then
    pass bar0_mmap
else
    fail bar0_mmap "rmlx5-pci-peek: $out"
    echo "==== end of pci-smoke"
    exit 0
fi
echo "--- BAR0 through $dev/resource0"
echo "$out"
word() { echo "$out" | awk -v o="$1" '$1 == o { print $2 }'; }
fw=$(( $(word 0x0) ))
sub=$(( $(word 0x4) ))
init=$(( $(word 0x1fc) ))
rev="$(( fw & 0xffff )).$(( fw >> 16 )).$(( sub & 0xffff ))"
echo "fw_rev $rev, cmdif_rev $(( sub >> 16 )), initializing $(( init >> 31 ))"
if [ "$hw" = 1 ]; then
    skip init_seg_fw_rev "16.35.1012 is the emulator's, this card runs $rev"
elif [ "$rev" = 16.35.1012 ]; then
    pass init_seg_fw_rev
else
    fail init_seg_fw_rev "fw_rev $rev, expected 16.35.1012"
fi
if [ $(( sub >> 16 )) = 5 ]; then
    pass init_seg_cmdif_rev
else
    fail init_seg_cmdif_rev "cmdif_rev $(( sub >> 16 )), expected 5"
fi
# run-guest.py --cx-emu-never-ready: the firmware never leaves its
# initialisation, so `initializing` stays set and the driver must give up.
neverready=$(sed -n 's/.*rmlx5.cxneverready=\([01]\).*/\1/p' /proc/cmdline)
if [ "$neverready" = 1 ]; then
    if [ $(( init >> 31 )) = 1 ]; then
        pass init_seg_never_ready
    else
        fail init_seg_never_ready "initializing is clear, expected set (--never-ready)"
    fi
elif [ $(( init >> 31 )) = 0 ]; then
    pass init_seg_ready
else
    fail init_seg_ready "initializing is set"
fi

# With the module in the image (make check, DRIVER=1 make pci-smoke):
# rmlx5's PCI driver binds the function and brings it up through the
# command interface, with an async EQ on MSI-X vector 0 whose interrupt
# answers the device's page request; unbind takes every page back and a bind brings it up
# again; rmmod tears it down; with pci=0 the function stays unbound; with
# cx_selftest=1 the data-path self-test passes; and kmemleak finds nothing
# afterwards.
if [ -f "$root/lib/modules/rmlx5.ko" ]; then
    echo "--- rmlx5.ko"
    bdf=${dev##*/}
    sysdrv=/sys/bus/pci/drivers/rmlx5_cx
    # The model the log names: the emulated ConnectX-5, or on a card
    # whichever drivers/rmlx5/cx.rs names for its device ID.
    cx=ConnectX-5
    if [ "$hw" = 1 ]; then
        cx='ConnectX[-0-9A-Za-z ]*'
    fi
    ups() { dmesg | grep -c "rmlx5_cx $bdf: $cx up"; }
    downs() { dmesg | grep -c "rmlx5_cx $bdf: $cx down, every page returned"; }
    bound() { drv=$(readlink $dev/driver); [ "${drv##*/}" = rmlx5_cx ]; }
    driver_of() { d=$(readlink $dev/driver); echo "${d##*/}"; }
    # rmlx5 takes only a function handed to it (Documentation/pci.md): its
    # driver_override names rmlx5_cx. hand_to DRIVER does what a tester
    # does: set the override, unbind the function from its driver, probe.
    hand_to() {
        echo "$1" > $dev/driver_override
        if [ -e $dev/driver ]; then echo "$bdf" > $dev/driver/unbind; fi
        echo "$bdf" > /sys/bus/pci/drivers_probe
    }
    # run-guest.py --cx-emu-functions 2: two functions of one emulated
    # card, sharing one fabric (Documentation/cx-emu.md, "Two functions,
    # one fabric"). Both become verbs devices, each with the LID its
    # firmware reports, and RC traffic runs from one to the other: the
    # sample kernel ULP's suite, the ib_core test ULP, and a pingpong and
    # an RDMA WRITE bandwidth run from user space.
    set -- $cxdevs
    if [ $# -ge 2 ] && [ "$hw" != 1 ]; then
        for d in "$@"; do echo rmlx5_cx > $d/driver_override; done
        if insmod "$root/lib/modules/rmlx5.ko"; then
            dmesg | grep "rmlx5_cx "
            vd=$(dmesg | sed -n 's/.*rmlx5_cx [0-9a-f:.]*: rmlx5_\([0-9]*\): verbs device.*/\1/p' | sort -n | tr '\n' ' ')
            set -- $vd
            a=${1:-}
            b=${2:-}
            if [ -n "$a" ] && [ -n "$b" ] &&
                [ "$(dmesg | grep -c "rmlx5_cx [0-9a-f:.]*: ConnectX-5 up")" = 2 ]; then
                pass cx_two_functions_up
            else
                fail cx_two_functions_up "verbs devices '$vd'"
            fi
            # Each port's LID from its firmware: instance i has LID i + 1.
            if dmesg | grep -q "rmlx5_cx [0-9a-f:.]*: port 1: LID 1, " &&
                dmesg | grep -q "rmlx5_cx [0-9a-f:.]*: port 1: LID 2, "; then
                pass cx_two_functions_lids_from_firmware
            else
                fail cx_two_functions_lids_from_firmware "$(dmesg | grep 'port 1: LID')"
            fi
            if [ -n "$a" ] && [ -n "$b" ]; then
                if insmod "$root/lib/modules/rmlx5_ulp.ko" dev0=$a dev1=$b prefix=cx2_ulp; then
                    rmmod rmlx5_ulp || fail cx2_ulp_unload "rmmod rmlx5_ulp failed"
                else
                    fail cx2_ulp_load "insmod rmlx5_ulp exited $?"
                fi
                if [ -f "$root/lib/modules/rmlx5_ibtest.ko" ]; then
                    if insmod "$root/lib/modules/rmlx5_ibtest.ko" dev0=rmlx5_$a dev1=rmlx5_$b prefix=cx2_ib; then
                        rmmod rmlx5_ibtest || fail cx2_ib_unload "rmmod rmlx5_ibtest failed"
                    else
                        fail cx2_ib_load "insmod rmlx5_ibtest exited $?"
                    fi
                fi
                if out=$(rmlx5-pingpong --events --size 4096 --iters 1000 --device $a --peer-device $b 2>&1); then
                    echo "$out" | tail -n 3
                    pass cx2_pingpong_across_functions
                else
                    fail cx2_pingpong_across_functions "$out"
                fi
                if out=$(rmlx5-perf --test write_bw --size 65536 --iters 2000 --device $a --peer-device $b 2>&1); then
                    echo "$out" | tail -n 4
                    pass cx2_write_bw_across_functions
                else
                    fail cx2_write_bw_across_functions "$out"
                fi
            fi
            if rmmod rmlx5 &&
                [ "$(dmesg | grep -c "rmlx5_cx [0-9a-f:.]*: ConnectX-5 down, every page returned")" = 2 ]; then
                pass cx_two_functions_unload
            else
                fail cx_two_functions_unload "rmmod, or not both functions down with every page back"
            fi
        else
            fail cx_two_functions_load "insmod exited $?"
        fi
        echo "==== end of pci-smoke"
        exit 0
    fi
    msix=$(sed -n 's/.*rmlx5.cxmsix=\([0-9]*\).*/\1/p' /proc/cmdline)
    if [ "$msix" = 1 ]; then
        # A function with one MSI-X vector: the driver comes up with the
        # async EQ on vector 0, and the self-test falls back to a polled
        # completion EQ on that vector; unload returns every page.
        echo rmlx5_cx > $dev/driver_override
        if insmod "$root/lib/modules/rmlx5.ko" cx_selftest=1; then
            dmesg | grep "rmlx5_cx $bdf"
            st="rmlx5_cx $bdf: self-test: RDMA WRITE 4 KiB + SEND 64 B over RC QPs 0x[0-9a-f]* -> 0x[0-9a-f]*, 3 CQEs ok, completion EQ [0-9]* on vector 0 "
            if bound && [ "$(ups)" = 1 ] &&
                dmesg | grep -q "rmlx5_cx $bdf: async EQ [0-9]* on MSI-X vector 0" &&
                dmesg | grep -q "rmlx5_cx $bdf: self-test: one MSI-X vector only, the completion EQ is polled on vector 0" &&
                dmesg | grep -q "$st"; then
                pass cx_one_msix_vector_falls_back
            else
                fail cx_one_msix_vector_falls_back "driver ${drv:-none}, $(ups) bring-up lines, no async EQ, fallback or self-test line"
            fi
            # The verbs device with its completion EQ on vector 0 too: the
            # sample ULP's suite, its completion handlers called from
            # vector 0's interrupt (cases cx1_ulp_*).
            n=$(dmesg | sed -n "s/.*rmlx5_cx $bdf: rmlx5_\([0-9]*\): verbs device, async EQ [0-9]* and 1 completion EQ(s) on MSI-X vector(s) 0\.\.0/\1/p" | tail -n 1)
            if [ -n "$n" ]; then
                pass cx_one_msix_vector_verbs_device
                if insmod "$root/lib/modules/rmlx5_ulp.ko" dev0=$n dev1=$n prefix=cx1_ulp; then
                    rmmod rmlx5_ulp || fail cx1_ulp_unload "rmmod rmlx5_ulp failed"
                else
                    fail cx1_ulp_load "insmod rmlx5_ulp exited $?"
                fi
            else
                fail cx_one_msix_vector_verbs_device "no verbs device line with its completion EQ on vector 0"
            fi
            # A slow command while completions flood vector 0: the
            # emulator holds every CREATE_CQ (run-guest.py --cx-emu-slow),
            # so a second pingpong's CQs keep the function's mutex for
            # seconds while the first one's completion events arrive on
            # vector 0. The hard handler takes them; none may be left to a
            # thread stuck behind the mutex, which the IRQ core counts as
            # unhandled (100,000 of those disable the line).
            slow=$(sed -n 's/.*rmlx5.cxslow=\([0-9]*\).*/\1/p' /proc/cmdline)
            irq=$(awk -F: '/rmlx5_cx_async/ { gsub(/ /, "", $1); print $1; exit }' /proc/interrupts)
            if [ -n "$n" ] && [ -n "$slow" ] && [ -n "$irq" ] && [ -x "$root/bin/rmlx5-pingpong" ]; then
                irqs() { grep rmlx5_cx_async /proc/interrupts | awk '{ n = 0; for (i = 2; i <= NF; i++) if ($i ~ /^[0-9]+$/) n += $i; else break; print n }'; }
                # Traffic that outlasts the check (stopped below).
                rmlx5-pingpong --events --size 64 --iters 1000000 --device $n --peer-device $n > /tmp/pp-bg.log 2>&1 &
                bg=$!
                # Its own two CQs are held first; wait until its
                # completions flow (200 interrupts), at most 30 s.
                c=$(irqs)
                i=0
                while [ $i -lt 60 ] && [ $(( $(irqs) - c )) -lt 200 ]; do
                    sleep 0.5
                    i=$((i + 1))
                done
                c0=$(irqs)
                u0=$(awk '/^unhandled/ { print $2 }' /proc/irq/$irq/spurious)
                t0=$(cut -d. -f1 /proc/uptime)
                rmlx5-pingpong --size 64 --iters 10 --device $n --peer-device $n > /tmp/pp-fg.log 2>&1
                fg=$?
                t1=$(cut -d. -f1 /proc/uptime)
                c1=$(irqs)
                u1=$(awk '/^unhandled/ { print $2 }' /proc/irq/$irq/spurious)
                # Still running: its traffic covered the whole window.
                bgrc=1
                if kill -0 $bg 2>/dev/null; then
                    bgrc=0
                fi
                kill $bg 2>/dev/null
                wait $bg
                cat /proc/irq/$irq/spurious
                unhandled=$((u1 - u0))
                echo "vector 0 (irq $irq): $((c1 - c0)) interrupts during the $((t1 - t0)) s of held commands, $unhandled unhandled"
                # Handed to a thread stuck behind the mutex, every one of
                # them would count; allow one in a hundred (a stray).
                if [ "$fg" = 0 ] && [ "$bgrc" = 0 ] && [ $((t1 - t0)) -ge $((slow / 1000)) ] &&
                    [ $((c1 - c0)) -ge 100 ] && [ $((unhandled * 100)) -le $((c1 - c0)) ]; then
                    pass cx_one_vector_slow_command_leaves_no_interrupt_unhandled
                else
                    fail cx_one_vector_slow_command_leaves_no_interrupt_unhandled "background pingpong running: $((1 - bgrc)), foreground exited $fg, $((t1 - t0)) s held, $((c1 - c0)) interrupts, $unhandled unhandled: $(tail -n 2 /tmp/pp-bg.log /tmp/pp-fg.log)"
                fi
            fi
            if rmmod rmlx5 && [ "$(downs)" = 1 ]; then
                pass cx_one_msix_vector_unload
            else
                fail cx_one_msix_vector_unload "rmmod or teardown: $(downs) teardown lines, expected 1"
            fi
        else
            fail cx_one_msix_vector_load "insmod cx_selftest=1 exited $?"
        fi
        echo "==== end of pci-smoke"
        exit 0
    fi
    # rmlx5.cxfaults=N: N passes of the four faults (1 in make check, more
    # in make stress's fault loop).
    faults=$(sed -n 's/.*rmlx5.cxfaults=\([0-9]*\).*/\1/p' /proc/cmdline)
    if [ -n "$faults" ] && [ "$faults" -ge 1 ]; then
        # run-guest.py --append rmlx5.cxfaults=1 (make check's fault
        # guest): what a card does that a driver must survive. Each fault
        # is injected through the emulator's fault register (BAR0
        # 0x1f00000, an emulator-only page; Documentation/cx-emu.md) while
        # a pingpong in event mode runs on the function and a kernel ULP
        # of the ib_* API holds a QP on it. Each must end with the
        # function failed and written off (no page kept), the pingpong
        # failing rather than hanging, the ULP's drain finishing, and the
        # function recovered (reset, probed, a verbs device again, traffic
        # passing). The health poll runs every 200 ms, a command may take
        # 2 s.
        echo rmlx5_cx > $dev/driver_override
        fatals() { dmesg | grep -c "rmlx5_cx $bdf: health: .*; function failed, DMA stopped"; }
        offs() { dmesg | grep -c "rmlx5_cx $bdf: $cx written off after its failure: [0-9]* page(s) freed with its DMA stopped"; }
        # wait_for N CMD...: runs CMD every 0.2 s until it succeeds, at
        # most N seconds.
        wait_for() {
            local n=$(( $1 * 5 )); shift
            while [ $n -gt 0 ]; do
                "$@" && return 0
                sleep 0.2
                n=$((n - 1))
            done
            return 1
        }
        fn_up() { [ "$(ups)" -ge "$1" ] && bound && [ -n "$(cxdev)" ] &&
            [ -e /dev/rmlx5_uverbs$(cxdev) ]; }
        cxdev() { dmesg | sed -n "s/.*rmlx5_cx $bdf: rmlx5_\([0-9]*\): verbs device.*/\1/p" | tail -n 1; }
        if insmod "$root/lib/modules/rmlx5.ko" cx_health_ms=200 cx_cmd_timeout_ms=2000 \
            cx_recover_grace_ms=4000 &&
            wait_for 20 fn_up 1; then
            pass cx_faults_function_up
            n=$(cxdev)
            # The LID read from the firmware (QUERY_HCA_VPORT_CONTEXT):
            # the emulated port's, 1.
            if dmesg | grep -q "rmlx5_cx $bdf: port 1: LID 1, SM LID 1, state 4, node GUID [0-9a-f]*, port GUID [0-9a-f]*, GID prefix fe80000000000000"; then
                pass cx_port_identity_from_firmware
            else
                fail cx_port_identity_from_firmware "no port line with LID 1 from the firmware: $(dmesg | grep "rmlx5_cx $bdf: port 1")"
            fi
            # What creating QPs costs: 1,000 RC QPs made and destroyed on
            # the function (one CREATE_QP and one DESTROY_QP command each,
            # polled) and on software HCA rmlx5_0, for the table in
            # Documentation/pci-backend.md. Figures only, no limit.
            for d in $n 0; do
                if out=$(rmlx5-perf --test qp_create --iters 1000 --device $d 2>&1); then
                    echo "$out"
                    pass cx_qp_create_1000_rmlx5_$d
                else
                    fail cx_qp_create_1000_rmlx5_$d "$out"
                fi
            done
            # How commands run (cx/events.rs, debugfs rmlx5/cx_cmd): 1,000
            # QPs made and destroyed, and 1,000 port queries (two commands
            # each), by one thread and by four, in each command mode; the
            # figures are the table in Documentation/pci-backend.md. Mode
            # 0 must never use a lane, mode 1 must poll its lanes and
            # never count an event, mode 2 must complete lane commands by
            # event and have several in flight at once.
            cxcmd=/sys/kernel/debug/rmlx5/cx_cmd
            cnt() { sed -n "s/^$1 //p" $cxcmd; }
            for mode in 0 1 2; do
                if ! echo $mode > $cxcmd; then
                    fail cx_cmd_mode_$mode "cannot write $cxcmd"
                    continue
                fi
                l0=$(cnt lanes); e0=$(cnt by_event); p0=$(cnt polled)
                ok=1
                for t in 1 4; do
                    for test in qp_create query_port; do
                        if out=$(rmlx5-perf --test $test --iters 1000 --threads $t --device $n 2>&1); then
                            echo "$out" | sed "s/^/cx_cmd mode $mode: /"
                        else
                            echo "cx_cmd mode $mode: $test --threads $t failed: $out"
                            ok=0
                        fi
                    done
                done
                l=$(($(cnt lanes) - l0)); e=$(($(cnt by_event) - e0)); p=$(($(cnt polled) - p0))
                echo "cx_cmd mode $mode: $l lane commands, $e completed by event, $p by polling"
                case $mode in
                    0) [ "$l" -eq 0 ] || ok=0 ;;
                    1) [ "$l" -gt 0 ] && [ "$e" -eq 0 ] && [ "$p" -gt 0 ] || ok=0 ;;
                    2) [ "$l" -gt 0 ] && [ "$e" -gt 0 ] || ok=0 ;;
                esac
                if [ $ok = 1 ]; then
                    pass cx_cmd_mode_$mode
                else
                    fail cx_cmd_mode_$mode "$l lane commands, $e by event, $p polled: $(cat $cxcmd | tr '\n' ' ')"
                fi
            done
            if [ "$(cnt max_in_flight)" -gt 1 ]; then
                pass cx_cmd_several_in_flight
            else
                fail cx_cmd_several_in_flight "at most $(cnt max_in_flight) lane(s) in flight"
            fi
            cat $cxcmd
            # An MR larger than one message of entry 0's pool (16 MiB):
            # CREATE_MKEY's translation table goes on in extra mailbox
            # blocks chained after the pool. A 64 MiB SEND between two
            # such MRs on the function, every byte checked.
            if out=$(rmlx5-pingpong --size 67108864 --iters 2 --device $n --peer-device $n 2>&1); then
                echo "$out" | tail -n 2
                pass cx_mr_64mib
            else
                fail cx_mr_64mib "$out"
            fi
            # The stress scenarios on the function (rmlx5.cxstress=KNOBS,
            # from make check's fault guest and make stress): completions
            # on one channel with no event lost or doubled; with kills=N,
            # processes killed mid-traffic between two contexts of the
            # function; with calls=N, N fuzzed uverbs calls on the function
            # (fuzzdev); after each, every object the function counted
            # (debugfs rmlx5/objects) must be back at the baseline.
            cxstress=$(sed -n 's/.*rmlx5.cxstress=\([^ ]*\).*/\1/p' /proc/cmdline)
            if [ -n "$cxstress" ]; then
                if [ -x /tests/rmlx5-stress-tests ]; then
                    cat /sys/kernel/debug/rmlx5/objects
                    # kills=N asks for the SIGKILL rounds too, calls=N for
                    # the fuzzer.
                    scs=no_lost_event
                    case ",$cxstress," in *,kills=*) scs="$scs kill_mid_traffic" ;; esac
                    case ",$cxstress," in *,calls=*) scs="$scs fuzz_ioctl_sequences" ;; esac
                    for sc in $scs; do
                        t0=$(date +%s)
                        RMLX5_STRESS="$cxstress,dev=$n,dev0=$n,dev1=$n,fuzzdev=$n" /tests/rmlx5-stress-tests $sc
                        echo "@@STRESS-TIME part=cx_$sc rc=$? secs=$(($(date +%s) - t0))"
                    done
                    cat /sys/kernel/debug/rmlx5/objects
                else
                    fail cx_stress "rmlx5.cxstress given but no /tests/rmlx5-stress-tests"
                fi
            fi
            # The port follows the firmware: down, up, a new LID (the
            # emulator's port commands, each with its PORT_CHANGE event),
            # as ib_core's sysfs reads them through query_port.
            port=/sys/class/infiniband/rmlx5_$n/ports/1
            if [ -d $port ]; then
                rmlx5-pci-peek $dev/resource0 0x1f00000=4 > /dev/null
                wait_for 5 grep -q "1: DOWN" $port/state; down=$?
                rmlx5-pci-peek $dev/resource0 0x1f00000=5 > /dev/null
                wait_for 5 grep -q "4: ACTIVE" $port/state; up=$?
                rmlx5-pci-peek $dev/resource0 0x1f00000=0x70006 > /dev/null
                wait_for 5 grep -qx "0x7" $port/lid; lid=$?
                rmlx5-pci-peek $dev/resource0 0x1f00000=0x10006 > /dev/null
                wait_for 5 grep -qx "0x1" $port/lid; back=$?
                if [ $down = 0 ] && [ $up = 0 ] && [ $lid = 0 ] && [ $back = 0 ]; then
                    pass cx_port_state_and_lid_follow_the_firmware
                else
                    fail cx_port_state_and_lid_follow_the_firmware "down $down, up $up, LID 7 $lid, LID 1 $back: $(cat $port/state) $(cat $port/lid)"
                fi
            fi
            insmod "$root/lib/modules/rmlx5_ibtest.ko" hold=1 ||
                fail cx_faults_ibtest_load "insmod rmlx5_ibtest hold=1 exited $?"
            round=0
            survived=0
            list=
            k=0
            # With aer_inject (the test kernel has it), two more: a fatal
            # and a non-fatal uncorrectable error reported at the root port
            # above the function; the PCI core's error recovery calls the
            # driver's error_detected, slot_reset and resume.
            aer=
            [ -c /dev/aer_inject ] && aer="aer_fatal aer_nonfatal"
            while [ $k -lt "$faults" ]; do
                list="$list fatal silent stuck flr $aer"
                k=$((k + 1))
            done
            # aer_report STATUS: an uncorrectable error with STATUS bits at
            # the function's root port (struct aer_error_inj: bus, device,
            # function, a pad byte, then uncor_status, cor_status, four
            # header words and the domain, little-endian 32-bit), in one
            # write.
            aer_report() {
                local rp b df fmt v
                rp=$(basename "$(dirname "$(readlink -f $dev)")")
                b=${rp#*:}
                df=${b#*:}
                b=${b%%:*}
                fmt=
                for v in $((0x$b)) $((0x${df%%.*})) $((${df#*.})) 0; do
                    fmt="$fmt\\$(printf %03o $v)"
                done
                for v in $(($1)) 0 0 0 0 0 $((0x${rp%%:*})); do
                    fmt="$fmt\\$(printf %03o $((v & 255)))\\$(printf %03o $(((v >> 8) & 255)))"
                    fmt="$fmt\\$(printf %03o $(((v >> 16) & 255)))\\$(printf %03o $(((v >> 24) & 255)))"
                done
                echo "rmlx5-guest: aer_inject at root port $rp: uncorrectable status $1"
                printf "$fmt" > /dev/aer_inject
            }
            tf0=$(cut -d. -f1 /proc/uptime)
            for fault in $list; do
                round=$((round + 1))
                # Past the recovery grace of the fault before (4 s with the
                # 2 s below), so that each is recovered.
                [ $round -gt 1 ] && sleep 3
                # One name per fault in make check, one per round in a loop.
                case=$fault
                [ "$faults" -gt 1 ] && case=${fault}_$round
                f0=$(fatals); o0=$(offs); u0=$(ups); r0=$(dmesg | grep -c "rmlx5-test: PASS ib_remove_rmlx5_$n")
                fp0=$(dmesg | grep -c "rmlx5_cx $bdf: health: a PCI reset of the function is coming; function failed")
                fd0=$(dmesg | grep -c "rmlx5_cx $bdf: health: PCI reset done (recovering the function)")
                fa0=$(dmesg | grep -c "rmlx5_cx $bdf: health: PCI error reported, the link")
                fs0=$(dmesg | grep -c "rmlx5_cx $bdf: PCI slot reset: config space restored")
                fr0=$(dmesg | grep -c "rmlx5_cx $bdf: health: PCI link recovered (recovering the function)")
                wo0=$(dmesg | grep -c "rmlx5_cx $bdf: reset: it was written off after a failure")
                wc0=$(dmesg | grep -c "rmlx5_cx $bdf: reset by the PCI core after it failed")
                rmlx5-pingpong --events --size 64 --iters 1000000 --device $n --peer-device $n > /tmp/pp-fault.log 2>&1 &
                pp=$!
                sleep 2
                if ! kill -0 $pp 2>/dev/null; then
                    fail cx_fault_${case}_traffic "the pingpong ended before the fault: $(tail -n 2 /tmp/pp-fault.log)"
                fi
                case $fault in
                fatal) rmlx5-pci-peek $dev/resource0 0x1f00000=0x101 ;;
                silent) rmlx5-pci-peek $dev/resource0 0x1f00000=2 ;;
                stuck)
                    # The next command never completes: a new pingpong's
                    # first CREATE_* is that command.
                    rmlx5-pci-peek $dev/resource0 0x1f00000=3
                    rmlx5-pingpong --size 64 --iters 10 --device $n --peer-device $n > /tmp/pp-stuck.log 2>&1 &
                    ;;
                flr) echo 1 > $dev/reset ;;
                # Malformed TLP: fatal by default, the link frozen and reset.
                aer_fatal) aer_report 0x40000 || echo "rmlx5-guest: aer_inject refused it" ;;
                # Completion timeout: non-fatal, the link still working.
                aer_nonfatal) aer_report 0x4000 || echo "rmlx5-guest: aer_inject refused it" ;;
                esac
                t0=$(cut -d. -f1 /proc/uptime)
                # The pingpong must end (with an error), not hang: its
                # completion channel is closed with EIO.
                if wait_for 20 sh -c "! kill -0 $pp 2>/dev/null"; then
                    wait $pp
                    rc=$?
                else
                    kill -9 $pp 2>/dev/null
                    wait $pp
                    rc=hung
                fi
                wait
                if wait_for 40 fn_up $((u0 + 1)); then
                    t1=$(cut -d. -f1 /proc/uptime)
                    dmesg | grep "rmlx5_cx $bdf" | tail -n 12
                    if [ "$(fatals)" = $((f0 + 1)) ] && [ "$(offs)" = $((o0 + 1)) ] &&
                        [ "$rc" != hung ] && [ "$rc" != 0 ] &&
                        [ "$(dmesg | grep -c "rmlx5-test: PASS ib_remove_rmlx5_$n")" = $((r0 + 1)) ] &&
                        ! dmesg | grep -q "rmlx5_cx $bdf: keeping"; then
                        pass cx_fault_${case}_survived
                        survived=$((survived + 1))
                    else
                        fail cx_fault_${case}_survived "$(( $(fatals) - f0 )) failure(s), $(( $(offs) - o0 )) write-off(s), pingpong exit $rc ($(tail -n 1 /tmp/pp-fault.log)), $(( $(dmesg | grep -c "rmlx5-test: PASS ib_remove_rmlx5_$n") - r0 )) ULP remove(s), or pages kept"
                    fi
                    echo "fault $fault: recovered in $((t1 - t0)) s; the pingpong said: $(tail -n 1 /tmp/pp-fault.log)"
                    # A reset through sysfs reaches the driver through the
                    # PCI core's reset_prepare and reset_done: the function
                    # is failed before the FLR, and recovered after it.
                    # An error AER reports: error_detected fails the
                    # function (frozen link or not), slot_reset restores
                    # its config space, resume queues the recovery.
                    case $fault in
                    aer_fatal) how=frozen ;;
                    aer_nonfatal) how="still working" ;;
                    *) how= ;;
                    esac
                    if [ -n "$how" ]; then
                        if [ "$(dmesg | grep -c "rmlx5_cx $bdf: health: PCI error reported, the link")" = $((fa0 + 1)) ] &&
                            dmesg | grep "rmlx5_cx $bdf: health: PCI error reported, the link" | tail -n 1 | grep -q "the link $how; function failed" &&
                            [ "$(dmesg | grep -c "rmlx5_cx $bdf: PCI slot reset: config space restored")" = $((fs0 + 1)) ] &&
                            [ "$(dmesg | grep -c "rmlx5_cx $bdf: health: PCI link recovered (recovering the function)")" = $((fr0 + 1)) ]; then
                            pass cx_fault_${case}_error_detected_slot_reset_resume
                        else
                            fail cx_fault_${case}_error_detected_slot_reset_resume "no 'PCI error reported, the link $how', 'PCI slot reset' and 'PCI link recovered' for this error: $(dmesg | grep -i "aer\|pcieport" | tail -n 5)"
                        fi
                    fi
                    if [ $fault = flr ]; then
                        if [ "$(dmesg | grep -c "rmlx5_cx $bdf: health: a PCI reset of the function is coming; function failed")" = $((fp0 + 1)) ] &&
                            [ "$(dmesg | grep -c "rmlx5_cx $bdf: health: PCI reset done (recovering the function)")" = $((fd0 + 1)) ]; then
                            pass cx_fault_${case}_told_by_the_pci_core
                        else
                            fail cx_fault_${case}_told_by_the_pci_core "no 'a PCI reset of the function is coming' and 'PCI reset done (recovering the function)' pair for this reset"
                        fi
                    fi
                    # One reset per recovery: a failure the health poll
                    # found is reset by the recovery's probe (the function
                    # was written off); one the PCI core reset (its sysfs
                    # reset, AER's link reset) is not reset again, since
                    # the reset cleared the firmware's command queue.
                    wo=$(( $(dmesg | grep -c "rmlx5_cx $bdf: reset: it was written off after a failure") - wo0 ))
                    wc=$(( $(dmesg | grep -c "rmlx5_cx $bdf: reset by the PCI core after it failed") - wc0 ))
                    case $fault in
                    flr | aer_*) want="0 1" ;;
                    *) want="1 0" ;;
                    esac
                    if [ "$wo $wc" = "$want" ]; then
                        pass cx_fault_${case}_reset_once
                    else
                        fail cx_fault_${case}_reset_once "probe resets (written off) and PCI-core resets noted: $wo $wc, want $want"
                    fi
                    n=$(cxdev)
                    if rmlx5-pingpong --events --size 4096 --iters 200 --device $n --peer-device $n > /tmp/pp-after.log 2>&1; then
                        pass cx_fault_${case}_traffic_after_recovery
                    else
                        fail cx_fault_${case}_traffic_after_recovery "$(tail -n 2 /tmp/pp-after.log)"
                    fi
                else
                    dmesg | grep "rmlx5_cx $bdf" | tail -n 20
                    blocked_stacks
                    fail cx_fault_${case}_survived "the function did not come back within 40 s: $(( $(fatals) - f0 )) failure(s), $(( $(ups) - u0 )) bring-up(s), pingpong exit $rc"
                    break
                fi
            done
            echo "@@STRESS pcifaults faults=$round survived=$survived secs=$(( $(cut -d. -f1 /proc/uptime) - tf0 ))"
            # A card that keeps failing is not reset in a loop: a fault
            # within cx_recover_grace_ms (4 s here) of the last recovery
            # leaves the function down, bound and failed; unbinding and
            # binding it brings it back (its probe resets it first: it was
            # written off). Past the grace of the loop's last fault, one
            # fault recovered, then at once another one.
            if [ "$survived" = "$round" ]; then
                sleep 5
                u0=$(ups)
                rmlx5-pci-peek $dev/resource0 0x1f00000=0x101 > /dev/null
                wait_for 40 fn_up $((u0 + 1)) ||
                    fail cx_fault_again_within_grace_first "the first fault was not recovered within 40 s"
                f0=$(fatals)
                u0=$(ups)
                rmlx5-pci-peek $dev/resource0 0x1f00000=0x101 > /dev/null
                if wait_for 10 sh -c "dmesg | grep -q 'rmlx5_cx $bdf: health: failed again within 4000 ms of its last recovery: left down'"; then
                    sleep 2
                    if [ "$(fatals)" = $((f0 + 1)) ] && [ "$(ups)" = "$u0" ] && bound; then
                        pass cx_fault_again_within_grace_left_down
                    else
                        fail cx_fault_again_within_grace_left_down "$(( $(fatals) - f0 )) failure(s), $(( $(ups) - u0 )) bring-up(s), bound: $(driver_of)"
                    fi
                    resets() { dmesg | grep -c "rmlx5_cx $bdf: reset: it was written off after a failure"; }
                    w0=$(resets)
                    echo "$bdf" > $dev/driver/unbind
                    echo "$bdf" > $sysdrv/bind
                    if wait_for 20 fn_up $((u0 + 1)) && [ "$(resets)" = $((w0 + 1)) ] &&
                        rmlx5-pingpong --events --size 4096 --iters 200 --device $(cxdev) --peer-device $(cxdev) > /tmp/pp-after.log 2>&1; then
                        pass cx_fault_left_down_back_by_hand
                    else
                        fail cx_fault_left_down_back_by_hand "not up again after unbind and bind: $(dmesg | grep "rmlx5_cx $bdf: reset: it was written off" | tail -n 1) $(tail -n 2 /tmp/pp-after.log)"
                    fi
                else
                    fail cx_fault_again_within_grace_left_down "no 'left down' line: $(dmesg | grep "rmlx5_cx $bdf: health" | tail -n 2)"
                fi
            fi
            rmmod rmlx5_ibtest || fail cx_faults_ibtest_unload "rmmod rmlx5_ibtest exited $?"
            if rmmod rmlx5 && [ "$(downs)" -ge 1 ] && ! dmesg | grep -q "rmlx5_cx $bdf: keeping"; then
                pass cx_faults_unload
            else
                fail cx_faults_unload "rmmod, or no teardown line, or pages kept"
            fi
        else
            dmesg | grep "rmlx5_cx $bdf" | tail -n 20
            fail cx_faults_function_up "insmod or bring-up failed"
        fi
        echo "==== end of pci-smoke"
        exit 0
    fi
    if grep -q 'swiotlb=force' /proc/cmdline; then
        # Every streaming DMA mapping bounces (swiotlb=force, as in a
        # confidential guest with a passed-through VF): the function comes
        # up on coherent memory, but a kernel MR, which the device and the
        # CPU share with no syncs, must be refused (EOPNOTSUPP), not
        # registered over a bounce buffer that would swallow the data.
        echo rmlx5_cx > $dev/driver_override
        if insmod "$root/lib/modules/rmlx5.ko"; then
            n=$(dmesg | sed -n "s/.*rmlx5_cx $bdf: rmlx5_\([0-9]*\): verbs device.*/\1/p" | tail -n 1)
            if bound && [ "$(ups)" = 1 ] && [ -n "$n" ]; then
                pass cx_swiotlb_function_up
                if insmod "$root/lib/modules/rmlx5_ulp.ko" dev0=$n dev1=$n prefix=cx_swiotlb dma_syncs=1; then
                    rmmod rmlx5_ulp || fail cx_swiotlb_ulp_unload "rmmod rmlx5_ulp failed"
                else
                    fail cx_swiotlb_ulp_load "insmod rmlx5_ulp exited $?"
                fi
            else
                fail cx_swiotlb_function_up "driver ${drv:-none}, $(ups) bring-up lines, verbs device ${n:-none}"
            fi
            if rmmod rmlx5 && [ "$(downs)" = 1 ]; then
                pass cx_swiotlb_unload
            else
                fail cx_swiotlb_unload "rmmod or teardown: $(downs) teardown lines, expected 1"
            fi
        else
            fail cx_swiotlb_load "insmod exited $?"
        fi
        echo "==== end of pci-smoke"
        exit 0
    fi
    if [ "$neverready" = 1 ]; then
        # A firmware that never becomes ready: probe waits cx_fw_wait_ms,
        # names the wait in the log and fails without issuing a command;
        # the module still loads (the software HCAs exist) and unloads.
        echo rmlx5_cx > $dev/driver_override
        t0=$(cut -d. -f1 /proc/uptime)
        if insmod "$root/lib/modules/rmlx5.ko" cx_fw_wait_ms=3000; then
            t1=$(cut -d. -f1 /proc/uptime)
            dmesg | grep "rmlx5_cx $bdf"
            if ! bound && [ "$(ups)" = 0 ] &&
                dmesg | grep -q "rmlx5_cx $bdf: ConnectX-5 bring-up failed: waiting for firmware pre-initialization: timed out after 3000 ms" &&
                [ $((t1 - t0)) -ge 2 ]; then
                pass cx_firmware_never_ready_fails_probe_cleanly
            else
                fail cx_firmware_never_ready_fails_probe_cleanly "driver ${drv:-none}, $(ups) bring-up lines, $((t1 - t0)) s in insmod, no timeout line?"
            fi
            if [ -d /sys/class/misc/rmlx5_uverbs0 ] || [ -e /dev/rmlx5_uverbs0 ]; then
                pass cx_software_hcas_still_there
            else
                fail cx_software_hcas_still_there "no rmlx5_uverbs0 after the failed probe"
            fi
            if rmmod rmlx5; then
                pass cx_never_ready_unload
            else
                fail cx_never_ready_unload "rmmod exited $?"
            fi
        else
            fail cx_never_ready_load "insmod exited $?"
        fi
        echo "==== end of pci-smoke"
        exit 0
    fi
    # make check runs the emulator with one command failed on purpose
    # (run-guest.py --cx-emu-fail OPCODE): the first probe must fail,
    # naming the command, status and syndrome, and undo the bring-up with
    # every page back; a bind then brings the function up.
    cxfail=$(sed -n 's/.*rmlx5.cxfail=\([0-9a-fx]*\).*/\1/p' /proc/cmdline)
    # Nothing is taken that was not handed over. The function starts on
    # another driver (pci-stub, through its own override): loading rmlx5
    # leaves it there. Then unbound with no override, the PCI core offers
    # it to rmlx5_cx, which declines it. Only named does rmlx5 take it.
    hand_to pci-stub
    if [ "$(driver_of)" != pci-stub ]; then
        fail cx_pci_stub_holds_the_function "driver of $bdf: $(driver_of), expected pci-stub"
    fi
    if insmod "$root/lib/modules/rmlx5.ko"; then
        if [ "$(driver_of)" = pci-stub ] && ! dmesg | grep -q "rmlx5_cx $bdf: ConnectX"; then
            pass cx_function_of_another_driver_stays_with_it
        else
            fail cx_function_of_another_driver_stays_with_it "driver of $bdf after insmod: $(driver_of)"
        fi
        if [ "$hw" = 1 ] && [ -d /sys/bus/pci/drivers/mlx5_core ]; then
            # On a host with mlx5_core loaded, mlx5_core takes it.
            skip cx_unnamed_function_left_alone "mlx5_core is loaded and would take the function"
        else
            echo > $dev/driver_override
            echo "$bdf" > $dev/driver/unbind
            echo "$bdf" > /sys/bus/pci/drivers_probe
            if [ -z "$(driver_of)" ] && dmesg | grep -q "rmlx5_cx $bdf: left alone: rmlx5 takes a function only when its driver_override names rmlx5_cx"; then
                pass cx_unnamed_function_left_alone
            else
                fail cx_unnamed_function_left_alone "driver of $bdf: $(driver_of), or no 'left alone' line"
            fi
        fi
        # Handed over: its first probe runs now.
        hand_to rmlx5_cx
        if [ -n "$cxfail" ]; then
            if ! bound &&
                dmesg | grep -q "rmlx5_cx $bdf: ConnectX-5 bring-up failed: [A-Z_]* ($cxfail) failed: status BAD_PARAM_ERR (0x3), syndrome 0x200ff" &&
                [ "$(downs)" = 1 ]; then
                pass cx_failed_command_is_named_and_undone
            else
                fail cx_failed_command_is_named_and_undone "bound to ${drv:-none}, or no bring-up failure for opcode $cxfail, or $(downs) teardown lines"
            fi
            dmesg | grep "rmlx5_cx $bdf"
            # The counts below start from here.
            dmesg -c > /dev/null
            echo "$bdf" > $sysdrv/bind
        fi
        if bound; then
            pass cx_driver_bound
        else
            fail cx_driver_bound "driver of $bdf: ${drv:-none}"
        fi
        if [ "$(ups)" = 1 ]; then
            pass cx_bring_up
        else
            fail cx_bring_up "$(ups) '$cx up' lines in the kernel log, expected 1"
        fi
        # rmlx5-devinfo lists the function next to the software HCAs, with
        # the verbs device it is.
        if [ -x "$root/bin/rmlx5-devinfo" ]; then
            out=$(rmlx5-devinfo --list 2>&1)
            echo "$out"
            # The emulated function's ID, model and firmware, or a card's.
            listed="15b3:1017 ConnectX-5 fw 16\.35\.1012"
            if [ "$hw" = 1 ]; then
                listed="15b3:$(cut -c3- $dev/device) ConnectX.* fw [0-9]+\.[0-9]+\.[0-9]+"
            fi
            if echo "$out" | grep -q "rmlx5_0" &&
                echo "$out" | grep -qE "^[[:space:]]+$bdf $listed cmdif 5 issi 1 .* verbs rmlx5_[0-9]+$"; then
                pass cx_devinfo_lists_the_function
            else
                fail cx_devinfo_lists_the_function "rmlx5-devinfo --list does not show $bdf (verbs rmlx5_<n>) next to rmlx5_0"
            fi
        else
            fail cx_devinfo_lists_the_function "no rmlx5-devinfo in the guest"
        fi
        # The async EQ on MSI-X vector 0: creating it costs the device a
        # page, which it asks for with a PAGE_REQUEST EQE; the interrupt's
        # threaded handler gives it (seen at unbind below).
        irqs=0
        for i in 1 2 3 4 5 6 7 8 9 10; do
            irqs=$(awk '/rmlx5_cx_async/ { n = 0; for (i = 2; i <= NF; i++) if ($i ~ /^[0-9]+$/) n += $i; else break; print n }' /proc/interrupts)
            [ "${irqs:-0}" -gt 0 ] && break
            sleep 0.2
        done
        grep rmlx5_cx_async /proc/interrupts
        if dmesg | grep -q "rmlx5_cx $bdf: async EQ [0-9]* on MSI-X vector 0" && [ "${irqs:-0}" -gt 0 ]; then
            pass cx_async_eq_interrupts
        else
            fail cx_async_eq_interrupts "async EQ line missing or no rmlx5_cx_async interrupt (${irqs:-none})"
        fi
        # The function as a verbs device rmlx5_<n>: the sample kernel
        # ULP's whole suite over it, as a loopback pair (both sides on the
        # function): every object made by command, WQEs rung through the
        # BlueFlame register of BAR0, CQEs polled, completion handlers
        # called from the completion EQs' MSI-X interrupts. Its cases count
        # as cx_ulp_*.
        cxdev() { dmesg | sed -n "s/.*rmlx5_cx $bdf: rmlx5_\([0-9]*\): verbs device.*/\1/p" | tail -n 1; }
        n=$(cxdev)
        if [ -n "$n" ]; then
            pass cx_verbs_device
            if insmod "$root/lib/modules/rmlx5_ulp.ko" dev0=$n dev1=$n prefix=cx_ulp; then
                rmmod rmlx5_ulp || fail cx_ulp_unload "rmmod rmlx5_ulp failed"
            else
                fail cx_ulp_load "insmod rmlx5_ulp exited $?"
            fi
            grep rmlx5_cx_comp /proc/interrupts
        else
            fail cx_verbs_device "no 'rmlx5_<n>: verbs device' line for $bdf"
        fi
        # User space on the function: /dev/rmlx5_uverbs<n>, each context
        # with a UAR page of BAR0 (ALLOC_UAR) mapped write-combined, its
        # queues in DMA-mapped pages, its MRs' pages in MTTs. The user-space
        # suites the software HCAs run (the provider's scenarios, events,
        # the raw ABI, the kernel path) run here with both sides on the
        # function; no KICK, the doorbells are BAR stores. Cases: cx_*.
        if [ -n "$n" ]; then
            if [ -c /dev/rmlx5_uverbs$n ] && dmesg | grep -q "rmlx5_cx $bdf: rmlx5_$n: /dev/rmlx5_uverbs$n"; then
                pass cx_uverbs_node
            else
                fail cx_uverbs_node "no /dev/rmlx5_uverbs$n for $bdf"
            fi
            filter=$(sed -n 's/.*rmlx5.filter=\([^ ]*\).*/\1/p' /proc/cmdline)
            for t in "$root"/tests/rmlx5-*-tests; do
                [ -x "$t" ] || continue
                name=$(basename "$t")
                RMLX5_TEST_DEVICES=$n,$n RMLX5_TEST_PREFIX=cx_ "$t" $filter
                echo "rmlx5-guest: EXIT cx-$name $?"
            done
        fi
        # rdma-core's own provider on the function, through ib_uverbs
        # (Debian's libmlx5, unmodified, staged with --overlay): its CQs
        # and QPs in the process's pinned pages, given to CREATE_CQ and
        # CREATE_QP as page lists; its UAR pages pages of BAR0 mapped
        # write-combined. Cases: cx_rdmacore_*.
        if [ -n "$n" ] && [ -x /usr/bin/ibv_devinfo ]; then
            "$root/tests/rdma-core.sh" cx rmlx5_$n
            # Its UAR pages are mapped write-combined, and rmlx5 maps no
            # more of BAR0 for itself than the initialization segment and
            # its own UAR page (cx/bar.rs): PAT's memory types within BAR0
            # while a libmlx5 process holds a context open (a pingpong
            # server waiting for its client). A whole-BAR uncached mapping
            # of the driver's would make PAT give the process's pages that
            # type too.
            set -- $(head -n 1 $dev/resource)
            bar0=$(($1)) bar0_end=$(($2))
            env LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu \
                ibv_rc_pingpong -d rmlx5_$n -p 18999 > /dev/null 2>&1 &
            pp=$!
            # Until its pages are mapped (up to 20 s on a slow guest).
            for i in $(seq 1 40); do
                grep -q "write-combining" /sys/kernel/debug/x86/pat_memtype_list 2>/dev/null && break
                sleep 0.5
            done
            wc=0 big=0
            for l in $(sed -n 's/^PAT: \[mem \(0x[0-9a-f]*\)-\(0x[0-9a-f]*\)\] \([a-z-]*\).*/\1,\2,\3/p' \
                /sys/kernel/debug/x86/pat_memtype_list 2>/dev/null); do
                a=$((${l%%,*}))
                e=${l#*,}
                t=${e#*,}
                e=$((${e%%,*}))
                [ $a -ge $bar0 ] && [ $a -le $bar0_end ] || continue
                echo "rmlx5-guest: PAT in BAR0: $l"
                [ "$t" = write-combining ] && wc=$((wc + 1))
                [ "$t" != write-combining ] && [ $((e - a)) -gt 8192 ] && big=$((big + 1))
            done
            kill $pp 2>/dev/null
            wait $pp
            if [ $wc -gt 0 ] && [ $big = 0 ]; then
                pass cx_rdmacore_uar_pages_write_combined
            else
                fail cx_rdmacore_uar_pages_write_combined "$wc write-combining ranges in BAR0 (want some), $big other ranges over 8 KiB (want none)"
            fi
            # rdma-core's own test suite on the function (cx_pyverbs:*).
            # The function reports a ConnectX part, so the suite also runs
            # its mlx5-only tests; left out here are those that take what
            # only mlx5_ib has for granted and fail rather than skip
            # without it (Documentation/rdma-core.md):
            # - the device-memory atomic tests query HCA caps through a
            #   DEVX general command (rmlx5 has no DEVX; the suite skips
            #   only when opening the DEVX context fails, which rmlx5
            #   allows, see ib_user.c);
            # - test_prefer_obj_on_huge creates a UD QP and an SRQ and does
            #   not skip when they are refused (no UD or SRQ yet).
            if [ "$hw" = 1 ] && [ ! -f /usr/share/rdma-core/tests/run_tests.py ]; then
                skip cx_pyverbs "rdma-core's test suite is not in /usr/share/rdma-core/tests on this host"
            else
                RMLX5_PYVERBS_DEV=rmlx5_$n RMLX5_PYVERBS_PREFIX=cx_ \
                    RMLX5_PYVERBS_LEFT_OUT="tests.test_mlx5_dm_ops.Mlx5DmOpAddresses.test_dm_atomic_ops
tests.test_mlx5_dm_ops.Mlx5DmOpAddresses.test_parallel_dm_atomic_ops
tests.test_mlx5_huge_page.ResourcesOnHugePageTest.test_prefer_obj_on_huge" \
                    "$root/tests/pyverbs.sh"
            fi
        fi
        # The same device for ULPs of the generic ib_* API: an ib_core
        # device whose DMA device is the function, its DMA MR a PA key. The
        # ib_core test ULP runs as a loopback pair on it in the three poll
        # contexts (cx_ib_*, fast registration through UMR WQEs on the
        # function included). Then, with hold=1, it keeps objects on the function
        # through the unbind below: ib_core's remove callback must destroy
        # them before the function goes.
        held=
        if [ -n "$n" ] && [ -f "$root/lib/modules/rmlx5_ibtest.ko" ]; then
            if grep -q "rmlx5 ConnectX function" /sys/class/infiniband/rmlx5_$n/node_desc 2>/dev/null &&
                dmesg | grep -q "rmlx5_cx $bdf: rmlx5_$n: registered with ib_core"; then
                pass cx_ib_device
            else
                fail cx_ib_device "no ib_core device rmlx5_$n for $bdf"
            fi
            if insmod "$root/lib/modules/rmlx5_ibtest.ko" dev0=rmlx5_$n dev1=rmlx5_$n prefix=cx_ib; then
                rmmod rmlx5_ibtest || fail cx_ib_unload "rmmod rmlx5_ibtest failed"
            else
                fail cx_ib_load "insmod rmlx5_ibtest exited $?"
            fi
            if insmod "$root/lib/modules/rmlx5_ibtest.ko" hold=1; then
                held=1
            else
                fail cx_ib_hold_load "insmod rmlx5_ibtest hold=1 exited $?"
            fi
        fi
        # And a ULP of rmlx5's own API leaves a connected pair on the
        # function (2 PDs, MRs, CQs and QPs) and unloads: at the unbind
        # below rmlx5 destroys them on the device first (the handles stay,
        # dead), so the function goes down cleanly; rmmod frees them later.
        released=
        if [ -n "$n" ] && insmod "$root/lib/modules/rmlx5_ulp.ko" dev0=$n dev1=$n prefix=cx_ulp_held leak=1; then
            rmmod rmlx5_ulp && released=1
        fi
        # Processes with user contexts open on the function (their UAR
        # pages are pages of BAR0) at the unbind: one only holding a
        # context, an event-mode pingpong of rmlx5's provider and one of
        # rdma-core's through ib_uverbs, both in traffic. The unbind
        # disassociates their contexts instead of waiting for them: it
        # returns at once, and the pingpongs end with an error (their
        # channels read EIO), not with a signal or a hang.
        ctxpid= pp= srv= cli=
        if [ -n "$n" ] && [ -c /dev/rmlx5_uverbs$n ]; then
            refs=$(cat /sys/module/rmlx5/refcnt)
            sh -c "exec 3</dev/rmlx5_uverbs$n; exec sleep 600" &
            ctxpid=$!
            sleep 1
            # An open context holds the module: rmmod is refused.
            held_refs=$(cat /sys/module/rmlx5/refcnt)
            if [ "$held_refs" = $((refs + 1)) ] && ! rmmod rmlx5 2>/dev/null; then
                pass cx_rmmod_refused_with_an_open_context
            else
                fail cx_rmmod_refused_with_an_open_context "module references $refs -> $held_refs with a context open, or rmmod rmlx5 succeeded"
            fi
            rmlx5-pingpong --events --size 64 --iters 1000000 --device $n --peer-device $n > /tmp/pp-unbind.log 2>&1 &
            pp=$!
            # And one that checks what a process sees (rmlx5-disassoc: the
            # event, stores to its UAR mapping landing in memory, EIO from
            # its files, commands and mmap).
            probe=
            if command -v rmlx5-disassoc > /dev/null; then
                rmlx5-disassoc $n 120 > /tmp/disassoc.log 2>&1 &
                probe=$!
                for i in $(seq 50); do
                    grep -q "ready" /tmp/disassoc.log && break
                    sleep 0.2
                done
            fi
            if [ -x /usr/bin/ibv_rc_pingpong ]; then
                env LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu \
                    ibv_rc_pingpong -d rmlx5_$n -i 1 -p 18998 -e -n 100000000 > /tmp/rc-srv-unbind.log 2>&1 &
                srv=$!
                sleep 1
                env LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu \
                    ibv_rc_pingpong -d rmlx5_$n -i 1 -p 18998 -e -n 100000000 127.0.0.1 > /tmp/rc-cli-unbind.log 2>&1 &
                cli=$!
            fi
            sleep 3
        fi
        # Exit status of process $1 within $2 s in $xrc, "hung" (then
        # killed) if it is still running. Not in a subshell: wait needs
        # its own children.
        exit_within() {
            local i
            for i in $(seq $(( $2 * 5 ))); do
                kill -0 $1 2>/dev/null || break
                sleep 0.2
            done
            if kill -0 $1 2>/dev/null; then
                kill -9 $1 2>/dev/null
                wait $1
                xrc=hung
            else
                wait $1
                xrc=$?
            fi
        }
        running=
        for p in $pp $srv $cli; do
            kill -0 $p 2>/dev/null && running="$running $p"
        done
        t0=$(cut -d. -f1 /proc/uptime)
        echo "$bdf" > $sysdrv/unbind &
        exit_within $! 60
        urc=$xrc
        t1=$(cut -d. -f1 /proc/uptime)
        if [ -n "$ctxpid" ]; then
            exit_within $pp 30
            pprc=$xrc
            srvrc=- clirc=-
            if [ -n "$srv" ]; then
                exit_within $srv 30
                srvrc=$xrc
                exit_within $cli 30
                clirc=$xrc
            fi
            if [ -n "$probe" ]; then
                exit_within $probe 30
                cat /tmp/disassoc.log
                if [ "$xrc" = 0 ]; then
                    pass cx_unbind_disassociated_process_sees_eio_and_memory
                else
                    fail cx_unbind_disassociated_process_sees_eio_and_memory "rmlx5-disassoc exit $xrc: $(grep -v ": ok:" /tmp/disassoc.log | tail -n 3)"
                fi
            fi
            # The context-only process noticed nothing: it is still there.
            kill -0 $ctxpid 2>/dev/null && held_on=1 || held_on=
            kill $ctxpid 2>/dev/null
            wait $ctxpid
            echo "rmlx5-guest: unbind with contexts open: unbind $urc in $((t1 - t0)) s; pingpong $pprc ($(tail -n 1 /tmp/pp-unbind.log)); ibv_rc_pingpong server $srvrc ($(tail -n 1 /tmp/rc-srv-unbind.log 2>/dev/null)), client $clirc ($(tail -n 1 /tmp/rc-cli-unbind.log 2>/dev/null)); running before: $running"
            nctx=$(dmesg | sed -n "s/.*rmlx5_$n: disassociating \([0-9]*\) user context(s).*/\1/p" | tail -n 1)
            # Every exit an error of its own, none a signal (>= 128) and
            # none a hang; the processes were running when the unbind began.
            ok=1
            for rc in $pprc $srvrc $clirc; do
                case $rc in
                -) ;;
                hung | 0) ok= ;;
                *) [ "$rc" -lt 128 ] || ok= ;;
                esac
            done
            want_running=1
            [ -n "$srv" ] && want_running=3
            if [ "$urc" = 0 ] && [ -n "$nctx" ] && [ "$nctx" -ge 3 ] && [ -n "$ok" ] &&
                [ -n "$held_on" ] && [ $(echo $running | wc -w) = $want_running ]; then
                pass cx_unbind_disassociates_user_contexts
            else
                fail cx_unbind_disassociates_user_contexts "unbind exit $urc, '${nctx:-no}' context(s) disassociated (want 3 or more: the holder, the pingpong, the probe), exits pingpong $pprc rc server $srvrc client $clirc (want errors, no signal, no hang), context holder alive '${held_on}', running before '$running'"
            fi
            if [ -n "$srv" ]; then
                # ib_uverbs disassociated rdma-core's contexts through the
                # op (no 'waiting for' it, the unbind returned).
                if [ "$srvrc" != hung ] && [ "$clirc" != hung ] && [ "$urc" = 0 ]; then
                    pass cx_unbind_disassociates_ib_uverbs_contexts
                else
                    fail cx_unbind_disassociates_ib_uverbs_contexts "ibv_rc_pingpong server $srvrc, client $clirc, unbind $urc"
                fi
            fi
        else
            fail cx_unbind_disassociates_user_contexts "no /dev/rmlx5_uverbs$n to open"
        fi
        if [ -n "$released" ] && ! bound &&
            dmesg | grep -q "rmlx5: rmlx5_$n: released 8 object(s) kernel ULPs still hold (0 could not be)"; then
            pass cx_unbind_releases_objects_ulps_hold
        else
            fail cx_unbind_releases_objects_ulps_hold "leak-mode ULP not loaded, or no 'released 8 object(s)' line for rmlx5_$n"
        fi
        if [ -n "$held" ]; then
            if dmesg | grep -q "rmlx5-test: PASS ib_remove_rmlx5_$n"; then
                pass cx_ib_unbind_removes_held_objects
            else
                fail cx_ib_unbind_removes_held_objects "ib_core's remove callback did not run for rmlx5_$n at unbind"
            fi
            rmmod rmlx5_ibtest || fail cx_ib_hold_unload "rmmod rmlx5_ibtest failed"
        fi
        if dmesg | grep -q "rmlx5_cx $bdf: rmlx5_$n: verbs device removed"; then
            pass cx_verbs_device_removed_at_unbind
        else
            fail cx_verbs_device_removed_at_unbind "no 'rmlx5_$n: verbs device removed' line"
        fi
        if dmesg | grep -q "rmlx5_cx $bdf: async EQ destroyed after [1-9][0-9]* page request(s), [1-9][0-9]* page(s) moved"; then
            pass cx_page_request_answered
        else
            fail cx_page_request_answered "no page request answered before the EQ was destroyed"
        fi
        if ! bound && [ "$(downs)" = 1 ]; then
            pass cx_unbind_returns_every_page
        else
            fail cx_unbind_returns_every_page "after unbind: driver ${drv:-none}, $(downs) teardown lines"
        fi
        if [ -x "$root/bin/rmlx5-devinfo" ] && ! rmlx5-devinfo --list | grep -q "$bdf"; then
            pass cx_devinfo_forgets_the_unbound_function
        else
            fail cx_devinfo_forgets_the_unbound_function "rmlx5-devinfo --list still shows $bdf after unbind"
        fi
        echo "$bdf" > $sysdrv/bind
        if bound && [ "$(ups)" = 2 ]; then
            pass cx_rebind_brings_it_up_again
        else
            fail cx_rebind_brings_it_up_again "after bind: driver ${drv:-none}, $(ups) bring-up lines"
        fi
        # rmmod with objects left on the function: a ULP creates a
        # connected pair on it and unloads without destroying anything;
        # rmlx5 reclaims the 8 objects before it unbinds the function.
        n=$(cxdev)
        leaked=
        if [ -n "$n" ] && insmod "$root/lib/modules/rmlx5_ulp.ko" dev0=$n dev1=$n prefix=cx_ulp_leak leak=1; then
            rmmod rmlx5_ulp && leaked=1
        fi
        if rmmod rmlx5 && [ "$(downs)" = 2 ]; then
            pass cx_unload_tears_down
        else
            fail cx_unload_tears_down "rmmod or teardown: $(downs) teardown lines, expected 2"
        fi
        # 8 live objects on the function, and the 8 dead handles of the
        # ULP whose objects the unbind released.
        if [ -n "$leaked" ] && [ -n "$released" ] &&
            dmesg | grep -q 'rmlx5: reclaimed 16 object(s) left by kernel ULPs (0 could not'; then
            pass cx_rmmod_reclaims_objects_left_on_the_function
        else
            fail cx_rmmod_reclaims_objects_left_on_the_function "leak-mode ULPs on rmlx5_${n:-?} not loaded, or no 'reclaimed 16 object(s)' line"
        fi
        if insmod "$root/lib/modules/rmlx5.ko" pci=0; then
            if ! bound && [ "$(ups)" = 2 ]; then
                pass cx_pci_0_leaves_the_function_alone
            else
                fail cx_pci_0_leaves_the_function_alone "bound to ${drv:-none} with pci=0"
            fi
            rmmod rmlx5 || fail cx_pci_0_unload "rmmod exited $?"
        else
            fail cx_pci_0_load "insmod pci=0 exited $?"
        fi
        # The data-path self-test: a completion EQ on MSI-X vector 1, a PD,
        # a memory key, a CQ and two RC QPs connected to each other, all
        # by command; an RDMA WRITE and a SEND through the BlueFlame
        # register; the CQEs, the data, the completion event and its
        # interrupt checked; everything destroyed and every page back.
        if insmod "$root/lib/modules/rmlx5.ko" cx_selftest=1; then
            st="rmlx5_cx $bdf: self-test: RDMA WRITE 4 KiB + SEND 64 B over RC QPs 0x[0-9a-f]* -> 0x[0-9a-f]*, 3 CQEs ok, completion EQ [0-9]* on vector 1 ([1-9][0-9]* interrupt(s))"
            if bound && [ "$(ups)" = 3 ] && dmesg | grep -q "$st"; then
                pass cx_selftest_send_recv
            else
                fail cx_selftest_send_recv "driver ${drv:-none}, $(ups) bring-up lines, self-test line: $(dmesg | grep 'self-test' | tail -3)"
            fi
            # Unbind and bind 20 times through sysfs: each bind brings the
            # function up and runs the self-test's traffic again, each
            # unbind destroys everything and takes every page back.
            tests() { dmesg | grep -c "rmlx5_cx $bdf: self-test: RDMA WRITE 4 KiB + SEND 64 B"; }
            u0=$(ups); d0=$(downs); t0=$(tests); bad=
            i=0
            while [ $i -lt 20 ]; do
                i=$((i + 1))
                echo "$bdf" > $sysdrv/unbind
                if bound || [ "$(downs)" != $((d0 + i)) ]; then
                    bad="unbind $i: driver ${drv:-none}, $(downs) teardown lines, expected $((d0 + i))"
                    break
                fi
                echo "$bdf" > $sysdrv/bind
                if ! bound || [ "$(ups)" != $((u0 + i)) ] || [ "$(tests)" != $((t0 + i)) ]; then
                    bad="bind $i: driver ${drv:-none}, $(ups) bring-up and $(tests) self-test lines, expected $((u0 + i))"
                    break
                fi
            done
            if [ -z "$bad" ]; then
                pass cx_unbind_bind_20_times_with_selftest
            else
                fail cx_unbind_bind_20_times_with_selftest "$bad"
            fi
            if rmmod rmlx5 && [ "$(downs)" = $((d0 + 21)) ]; then
                pass cx_selftest_every_page_returned
            else
                fail cx_selftest_every_page_returned "rmmod or teardown: $(downs) teardown lines, expected $((d0 + 21))"
            fi
        else
            fail cx_selftest_load "insmod cx_selftest=1 exited $?: $(dmesg | grep 'self-test' | tail -3)"
        fi
        dmesg | grep "rmlx5_cx $bdf"
        # And handed back: the function goes to the driver named next.
        hand_to pci-stub
        # rmlx5 left it disabled, bus mastering off (PCI command bit 2).
        cmd=$(hexdump -s 4 -n 2 -e '1/2 "%d"' $dev/config)
        if [ "$(driver_of)" = pci-stub ] && [ "$(cat $dev/enable)" = 0 ] &&
            [ $(( cmd & 4 )) = 0 ]; then
            pass cx_function_handed_back_disabled
        else
            fail cx_function_handed_back_disabled "driver of $bdf: $(driver_of), enable $(cat $dev/enable), command $cmd"
        fi
        # /init scans kmemleak after this script (cx_kmemleak).
    else
        fail cx_module_load "insmod exited $?"
    fi
fi
echo "==== end of pci-smoke"
