#!/usr/bin/env python3
"""Boot the rmlx5 test kernel in QEMU, run the guest tests, judge the console.

The guest is an initramfs: busybox, rmlx5.ko, the static test programs and
tests/guest/init.sh as /init. The console goes to a log file; afterwards
this script
  * parses the module's KUnit KTAP output with the kernel tree's kunit.py,
  * collects the PASS/FAIL markers and exit statuses of the guest programs,
  * fails on any kernel BUG/WARNING/KASAN/lockdep/kmemleak report, panic or
    timeout, printing the relevant excerpt of the log.
It prints a result line per test and writes the counts to --results (JSON).

With --cx-emu, the guest also gets the emulated ConnectX-5 (rust/cx-emu):
the emulator is started on a socket in the work directory, QEMU (which
must have vfio-user-pci, see scripts/qemu.sh) attaches it, the emulator's
log is kept next to the console log, and a non-zero exit of the emulator
(something the device refused) fails the run.
"""
import argparse
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# Console patterns that mean the kernel is unhappy, whatever the tests said.
KERNEL_PROBLEMS = re.compile(
    r"(\b(BUG|WARNING|INFO|UBSAN):|Kernel panic|\bOops\b|KASAN:|"
    # The kernel's own general protection fault (", probably for..." or
    # ": 0000 [#1]"), not a process's, which the kernel reports as
    # "traps: comm[pid] general protection fault ip:..." (a user-space
    # crash, such as siw's perftest in librdmacm during the benchmark).
    r"general protection fault(?! ip:)|unreferenced object|suspected memory leak|"
    r"possible (circular|recursive) locking|inconsistent lock state|"
    r"Unable to handle kernel|kernel BUG at|rcu_sched detected stalls|"
    r"rcu: INFO|hung_task|soft lockup|hard LOCKUP|list_(add|del) corruption|"
    # rmlx5's own: an object the device refused to let go is kept forever.
    r"uverbs: (CQ|QP) \S+ not destroyed|[1-9]\d* could not be destroyed|"
    # A QP freed where the kernel may not sleep (ib/qp.rs).
    r"qp \S+ freed where it may not sleep)"
)
# Reports of other kernel code than rmlx5's, known upstream, that the
# guest's ULP tests provoke whatever the RDMA device: (name, the lines the
# report must name, why). Each is printed, not counted as a problem.
KNOWN_UPSTREAM = [
    # nvmet-rdma handles commands that arrive before its CM's ESTABLISHED
    # event from that event's handler (under rdma_cm's handler_mutex),
    # and a command connecting an I/O queue takes nvmet_config_sem; the
    # configfs teardown (removing the port's subsystem link) takes
    # nvmet_config_sem and destroys the listener's cm_id (handler_mutex).
    # The same with rxe or mlx5_ib; blktests meets the family with every
    # transport (tests/guest/rdmacm.sh, Documentation/ib-core.md).
    ("nvmet_config_sem_vs_rdma_cm_handler_mutex",
     ("possible circular locking dependency", "nvmet_config_sem", "handler_mutex",
      "nvmet_port_subsys_drop_link"),
     "nvmet's own lock order between its configfs teardown and rdma_cm's event handler"),
    # RDS takes rds_trans_sem around rds_ib_laddr_check, which destroys a
    # probe cm_id (handler_mutex), and its rdma_cm connect-request handler
    # (under handler_mutex) looks the transport up under rds_trans_sem.
    # RDS and rdma_cm code only; the same over rxe (tests/guest/rds.sh).
    ("rds_trans_sem_vs_rdma_cm_handler_mutex",
     ("possible circular locking dependency", "rds_trans_sem", "handler_mutex",
      "rds_ib_laddr_check"),
     "RDS's transport lookup lock against rdma_cm's event handler"),
]


def known_upstream(lines, i):
    """The KNOWN_UPSTREAM entry whose report starts at line i, or None."""
    window = "\n".join(lines[i:i + 120])
    for name, needles, why in KNOWN_UPSTREAM:
        if needles[0] in lines[i] and all(n in window for n in needles[1:]):
            return name, why
    return None


MARKER = re.compile(r"rmlx5-test: (PASS|FAIL) ([^:\s]+)(?::\s*(.*))?")
EXIT = re.compile(r"rmlx5-guest: EXIT (\S+) (\d+)")
PRINTK_PREFIX = re.compile(r"^\[\s*\d+\.\d+\]\s?")
# A kernel message that began in the middle of a line of the guest's own
# output (its timestamp anywhere but at the start).
KMSG_INSIDE = re.compile(r"\[\s*\d+\.\d+\] ")


def unsplit(lines):
    """The console's lines, with the guest programs' own lines whole again.

    The kernel prints to the serial console regardless of a user write in
    progress, so "rmlx5-test: PASS devnodes_exist" can come out as
    "rmlx5-test: PASS[  170.416316] rmlx5-guest: START ..." and, on the
    next line that is not the kernel's, " devnodes_exist". The fragment
    before the kernel message is joined to that continuation; the kernel
    message stays a line of its own (its problems are still seen)."""
    out = []
    pending = None
    for l in lines:
        m = KMSG_INSIDE.search(l)
        if m and m.start() > 0 and not PRINTK_PREFIX.match(l):
            pending = (pending or "") + l[:m.start()]
            out.append(l[m.start():])
            continue
        if pending is not None and not PRINTK_PREFIX.match(l):
            out.append(pending + l)
            pending = None
            continue
        out.append(l)
    if pending is not None:
        out.append(pending)
    return out


# The kernel's RDS selftest (tools/testing/selftests/net/rds/test.py) and
# the Python it imports, staged under /ksft in the kernel tree's layout (its
# library finds the rest relative to itself). One word differs from the
# source: its RDMA setup makes the two devices with `rdma link add ... type
# rxe`; here `type rmlx5` (rmlx5's link type, tests/guest/rds.sh).
RDS_SELFTEST = "tools/testing/selftests/net/rds/test.py"
RDS_PY_TREES = ("tools/testing/selftests/net/lib/py", "tools/net/ynl/pyynl/lib")


def stage_rds_selftest(ksrc, root):
    src = os.path.join(ksrc, RDS_SELFTEST)
    if not os.path.exists(src):
        return
    dst = os.path.join(root, "ksft", RDS_SELFTEST)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(src) as f:
        text = f.read()
    if text.count(" type rxe netdev ") != 2:
        raise SystemExit(f"{src}: expected two `rdma link add ... type rxe netdev` lines")
    with open(dst, "w") as f:
        f.write(text.replace(" type rxe netdev ", " type rmlx5 netdev "))
    os.chmod(dst, 0o755)
    for tree in RDS_PY_TREES:
        d = os.path.join(root, "ksft", tree)
        os.makedirs(d, exist_ok=True)
        for name in os.listdir(os.path.join(ksrc, tree)):
            if name.endswith(".py"):
                shutil.copy(os.path.join(ksrc, tree, name), os.path.join(d, name))


def build_initramfs(args, workdir):
    root = os.path.join(workdir, "root")
    for d in ("bin", "dev", "proc", "sys", "tmp", "lib/modules", "tests"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    shutil.copy(args.busybox, os.path.join(root, "bin/busybox"))
    shutil.copy(os.path.join(HERE, "guest/init.sh"), os.path.join(root, "init"))
    shutil.copy(os.path.join(HERE, "guest/demo.sh"), os.path.join(root, "tests/demo.sh"))
    if args.module:
        shutil.copy(args.module, os.path.join(root, "lib/modules/rmlx5.ko"))
        # The sample kernel ULP (samples/rmlx5_ulp), built next to the
        # module by `make module`; /init loads it after rmlx5.ko.
        ulp = args.ulp or os.path.join(
            os.path.dirname(os.path.dirname(os.path.abspath(args.module))), "ulp", "rmlx5_ulp.ko")
        if os.path.exists(ulp):
            shutil.copy(ulp, os.path.join(root, "lib/modules/rmlx5_ulp.ko"))
        # The ib_* API test ULP (samples/rmlx5_ibcore), built only for
        # kernels with the RDMA core.
        ibtest = args.ibtest or os.path.join(
            os.path.dirname(os.path.dirname(os.path.abspath(args.module))), "ibtest",
            "rmlx5_ibtest.ko")
        if os.path.exists(ibtest):
            shutil.copy(ibtest, os.path.join(root, "lib/modules/rmlx5_ibtest.ko"))
            # The rdma_cm test ULP, built beside it (tests/guest/rdmacm.sh).
            cmtest = os.path.join(os.path.dirname(os.path.abspath(ibtest)), "rmlx5_cmtest.ko")
            if os.path.exists(cmtest):
                shutil.copy(cmtest, os.path.join(root, "lib/modules/rmlx5_cmtest.ko"))
    stage_rds_selftest(args.ksrc, root)
    for prog in args.programs:
        shutil.copy(prog, os.path.join(root, "tests", os.path.basename(prog)))
    # Tools a user would run (rmlx5-devinfo, -pingpong, -perf) go in /bin.
    for tool in args.tools:
        shutil.copy(tool, os.path.join(root, "bin", os.path.basename(tool)))
    shutil.copy(os.path.join(HERE, "guest/perf.sh"), os.path.join(root, "tests/perf.sh"))
    shutil.copy(os.path.join(HERE, "guest/bench.sh"), os.path.join(root, "tests/bench.sh"))
    shutil.copy(os.path.join(HERE, "guest/stress.sh"), os.path.join(root, "tests/stress.sh"))
    shutil.copy(os.path.join(HERE, "guest/pci-smoke.sh"), os.path.join(root, "tests/pci-smoke.sh"))
    shutil.copy(os.path.join(HERE, "guest/prod.sh"), os.path.join(root, "tests/prod.sh"))
    shutil.copy(os.path.join(HERE, "guest/rdma-core.sh"), os.path.join(root, "tests/rdma-core.sh"))
    shutil.copy(os.path.join(HERE, "guest/pyverbs.sh"), os.path.join(root, "tests/pyverbs.sh"))
    shutil.copy(os.path.join(HERE, "guest/rdmacm.sh"), os.path.join(root, "tests/rdmacm.sh"))
    shutil.copy(os.path.join(HERE, "guest/rds.sh"), os.path.join(root, "tests/rds.sh"))
    shutil.copy(os.path.join(HERE, "guest/mlx5-abi.py"), os.path.join(root, "tests/mlx5-abi.py"))
    for path in ("init", "tests/demo.sh", "tests/perf.sh", "tests/bench.sh", "tests/stress.sh",
                 "tests/pci-smoke.sh", "tests/prod.sh", "tests/rdma-core.sh", "tests/pyverbs.sh",
                 "tests/rdmacm.sh", "tests/rds.sh", "tests/mlx5-abi.py"):
        os.chmod(os.path.join(root, path), 0o755)
    # Extra file trees (the benchmark's rdma-core, perftest and iproute2,
    # staged by scripts/bench-userland.sh).
    for tree in args.overlays:
        shutil.copytree(tree, root, symlinks=True, dirs_exist_ok=True)
    image = os.path.join(workdir, "initramfs.cpio.gz")
    files = subprocess.run(["find", "."], cwd=root, check=True, capture_output=True).stdout
    cpio = subprocess.run(["cpio", "-o", "-H", "newc", "--quiet", "-R", "0:0"], cwd=root,
                          input=files, check=True, capture_output=True).stdout
    with gzip.open(image, "wb", compresslevel=1) as f:
        f.write(cpio)
    return image


class CxEmu:
    """The emulated ConnectX-5: rmlx5-cx-emu serving one vfio-user socket per
    function (functions > 1: one process, one fabric, RC traffic between
    the functions; function i on cx-emu.sock, or cx-emu.sock.i for i > 0)."""

    def __init__(self, binary, workdir, log_path, fail_opcode="", never_ready=False, msix=0,
                 slow="", functions=1, cmd_latency_us=0):
        self.socket = os.path.join(workdir, "cx-emu.sock")
        self.sockets = [self.socket] + [f"{self.socket}.{i}" for i in range(1, functions)]
        self.log_path = log_path
        self.log = open(log_path, "w")
        cmd = [binary, "--socket", self.socket]
        if functions > 1:
            cmd += ["--functions", str(functions)]
        if fail_opcode:
            cmd += ["--fail-opcode", fail_opcode]
        if never_ready:
            cmd += ["--never-ready"]
        if msix:
            cmd += ["--msix", str(msix)]
        if slow:
            cmd += ["--slow-opcode", slow]
        if cmd_latency_us:
            cmd += ["--cmd-latency-us", str(cmd_latency_us)]
        # Extra emulator arguments for debugging (e.g. -v -v for its trace).
        cmd += os.environ.get("RMLX5_CX_EMU_ARGS", "").split()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.returncode = None

    def wait_listening(self, timeout=30):
        """True once every socket exists (the emulator renames each into
        place when it accepts connections)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(os.path.exists(s) for s in self.sockets):
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.05)
        return False

    def qemu_args(self, memory):
        """Guest RAM the emulator can map (a shared memfd) and the devices,
        one per function, in the functions' order, each alone below a PCIe
        root port of its own, as a card sits in a slot: the port has AER,
        so the guest can report an error there and the PCI core's error
        recovery resets the link below it, this function only."""
        devices = []
        for i, path in enumerate(self.sockets):
            port = {"driver": "pcie-root-port", "id": f"rp{i}", "bus": "pcie.0",
                    "chassis": i + 1, "slot": i + 1}
            device = {"driver": "vfio-user-pci", "bus": f"rp{i}", "id": f"cx{i}",
                      "socket": {"path": path, "type": "unix"}}
            devices += ["-device", json.dumps(port), "-device", json.dumps(device)]
        return (["-object", f"memory-backend-memfd,id=mem,size={memory},share=on"], devices)

    def stop(self, timeout=30):
        """Waits for the emulator to exit on its own (QEMU closed the
        socket), else stops it. Returns its exit status."""
        try:
            self.returncode = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.returncode = None
        self.log.close()
        return self.returncode

    def tail(self, lines=80):
        with open(self.log_path, errors="replace") as f:
            text = f.read().splitlines()
        return "\n".join("    | " + l for l in text[-lines:])


def run_qemu(args, initramfs, log_path, cx_emu=None):
    # A kernel log of 8 MiB: the guest scripts count lines of dmesg, and
    # the 128 KiB default wraps within a long fault loop (make stress's
    # 60 faults), so that a count stops growing.
    append = ["console=ttyS0", "panic=-1", "oops=panic", "loglevel=7",
              "log_buf_len=8M", "rdinit=/init", "kasan_multi_shot",
              f"rmlx5.mode={args.mode}"]
    if args.filter:
        append.append(f"rmlx5.filter={args.filter}")
    # The filter also keeps the kernel's own built-in Rust suites from
    # running at every boot.
    append.append(f"kunit.filter_glob={args.kunit_filter or 'rmlx5*'}")
    if args.params:
        append.append("rmlx5.params=" + ",".join(args.params.split()))
    if args.bench:
        append.append("rmlx5.bench=" + ",".join(args.bench.split()))
    if args.stress:
        append.append("rmlx5.stress=" + ",".join(args.stress.split()))
    machine = "q35"
    extra = []
    if args.cx_emu_fail:
        append.append(f"rmlx5.cxfail={args.cx_emu_fail}")
    if args.cx_emu_never_ready:
        append.append("rmlx5.cxneverready=1")
    if args.cx_emu_msix:
        append.append(f"rmlx5.cxmsix={args.cx_emu_msix}")
    if args.cx_emu_slow:
        # The guest learns the hold (in ms) to time its checks.
        append.append(f"rmlx5.cxslow={args.cx_emu_slow.split(':')[-1]}")
    append += args.append.split()
    if cx_emu:
        memory, device = cx_emu.qemu_args(args.memory)
        machine += ",memory-backend=mem"
        extra = memory + device
    cmd = [args.qemu, "-nodefaults", "-no-reboot", "-display", "none",
           "-machine", machine, "-cpu", "host" if args.accel == "kvm" else "max,la57=off", "-smp", str(args.cpus), "-m", args.memory,
           "-accel", args.accel, "-kernel", args.kernel, "-initrd", initramfs,
           "-append", " ".join(append), "-serial", f"file:{log_path}"] + extra
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, timeout=args.timeout, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True)
        timed_out = False
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr)
    except subprocess.TimeoutExpired:
        timed_out = True
    return timed_out, time.monotonic() - start


def parse_kunit(args, log_text, workdir):
    """Returns (passed, failed, summary lines) from kunit.py's JSON output."""
    # Only the KTAP that loading our module printed: kunit.py stops after the
    # first KTAP document it finds.
    start = log_text.find("rmlx5-guest: loading")
    log_text = log_text[start:] if start >= 0 else log_text
    if "KTAP version" not in log_text and "TAP version" not in log_text:
        return 0, 1, ["no KTAP output from the module: its KUnit suites did not run"]
    raw = os.path.join(workdir, "ktap.log")
    with open(raw, "w") as f:
        f.write(log_text)
    out_json = os.path.join(workdir, "kunit.json")
    kunit = os.path.join(args.ksrc, "tools/testing/kunit/kunit.py")
    proc = subprocess.run([sys.executable, kunit, "parse", f"--json={out_json}", raw],
                          capture_output=True, text=True)
    lines = [l for l in proc.stdout.splitlines() if l.strip()]
    try:
        with open(out_json) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return 0, 1, lines + ["kunit.py parse produced no JSON"]
    passed = failed = 0

    def walk(group):
        nonlocal passed, failed
        for case in group.get("test_cases", []):
            status = case.get("status")
            if status == "PASS":
                passed += 1
            elif status in ("FAIL", "ERROR", "TEST_CRASHED", "NO_TESTS"):
                failed += 1
                lines.append(f"failed case: {group.get('name', '?')}.{case.get('name', '?')} "
                             f"({status})")
        for sub in group.get("sub_groups", []):
            walk(sub)

    walk(data)
    if proc.returncode != 0 and failed == 0:
        failed = 1
    return passed, failed, lines


def excerpt(lines, index, before=5, after=40):
    lo, hi = max(0, index - before), min(len(lines), index + after)
    return "\n".join("    | " + l for l in lines[lo:hi])


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", required=True, help="bzImage")
    ap.add_argument("--ksrc", required=True, help="kernel source tree (for kunit.py)")
    ap.add_argument("--module", default="", help="rmlx5.ko (required except in pci-smoke mode)")
    ap.add_argument("--ulp", default="", help="rmlx5_ulp.ko (default: ../ulp/ next to --module)")
    ap.add_argument("--ibtest", default="",
                    help="rmlx5_ibtest.ko (default: ../ibtest/ next to --module)")
    ap.add_argument("--busybox", default="/bin/busybox")
    ap.add_argument("--program", dest="programs", action="append", default=[],
                    help="static guest test program (repeatable)")
    ap.add_argument("--tool", dest="tools", action="append", default=[],
                    help="static tool for the guest's /bin (repeatable)")
    ap.add_argument("--mode", choices=("check", "demo", "perf", "bench", "stress", "pci-smoke",
                                       "prod"),
                    default="check")
    ap.add_argument("--overlay", dest="overlays", action="append", default=[],
                    help="directory tree to copy into the initramfs root (repeatable)")
    ap.add_argument("--bench", default="", help="knobs for tests/guest/bench.sh (key=value ...)")
    ap.add_argument("--stress", default="", help="knobs for tests/guest/stress.sh (key=value ...)")
    ap.add_argument("--filter", default="", help="run only guest tests matching this")
    ap.add_argument("--kunit-filter", default="", help="kunit.filter_glob for the module's suites")
    ap.add_argument("--params", default="", help="module parameters for insmod")
    ap.add_argument("--accel", default=os.environ.get("RMLX5_ACCEL", "tcg"))
    ap.add_argument("--qemu", default="qemu-system-x86_64")
    ap.add_argument("--cx-emu", default="",
                    help="rmlx5-cx-emu: attach the emulated ConnectX-5 (--qemu must have "
                         "vfio-user-pci: QEMU >= 10.1, scripts/qemu.sh)")
    ap.add_argument("--cx-emu-fail", default="",
                    help="OPCODE: the emulated ConnectX fails the first command with it "
                         "(told to the guest as rmlx5.cxfail=OPCODE)")
    ap.add_argument("--cx-emu-never-ready", action="store_true",
                    help="the emulated ConnectX's firmware never leaves initialisation "
                         "(told to the guest as rmlx5.cxneverready=1)")
    ap.add_argument("--cx-emu-msix", type=int, default=0,
                    help="MSI-X vectors of the emulated ConnectX (default: the emulator's 16; "
                         "told to the guest as rmlx5.cxmsix=N)")
    ap.add_argument("--cx-emu-slow", default="",
                    help="OP:MS: the emulator holds every command OP for MS ms (--slow-opcode)")
    ap.add_argument("--cx-emu-cmd-latency-us", type=int, default=0,
                    help="N: every command takes N µs in the emulator (--cmd-latency-us), "
                         "as a card's firmware; 0: done within the doorbell write")
    ap.add_argument("--cx-emu-functions", type=int, default=1,
                    help="N: the emulator serves N ConnectX-5 functions on one fabric "
                         "(--functions N; QEMU gets one vfio-user-pci device each)")
    ap.add_argument("--append", default="",
                    help="more kernel command line arguments (e.g. swiotlb=force)")
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--memory", default="1G")
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--log", help="where to keep the console log")
    ap.add_argument("--results", help="write {kunit,guest}_{passed,failed} here as JSON")
    args = ap.parse_args()
    if not args.module and args.mode != "pci-smoke":
        ap.error("--module is required")

    workdir = tempfile.mkdtemp(prefix="rmlx5-guest-")
    log_path = args.log or os.path.join(workdir, "console.log")
    initramfs = build_initramfs(args, workdir)
    cx_emu = None
    problems = []
    if args.cx_emu:
        cx_log = os.path.splitext(log_path)[0] + "-cx-emu.log"
        cx_emu = CxEmu(args.cx_emu, workdir, cx_log, args.cx_emu_fail,
                       args.cx_emu_never_ready, args.cx_emu_msix, args.cx_emu_slow,
                       args.cx_emu_functions, args.cx_emu_cmd_latency_us)
        if not cx_emu.wait_listening():
            cx_emu.stop(timeout=1)
            print(f"guest: FAIL cx_emu: the emulator did not start; its log ({cx_log}):")
            print(cx_emu.tail())
            return 1
        print(f"guest: emulated ConnectX-5 on {cx_emu.socket}; its log: {cx_log}", flush=True)
    print(f"guest: booting {args.kernel} ({args.accel}, {args.cpus} vCPUs, {args.memory})",
          flush=True)
    timed_out, elapsed = run_qemu(args, initramfs, log_path, cx_emu)
    with open(log_path, errors="replace") as f:
        log_text = f.read()
    lines = unsplit(log_text.splitlines())
    print(f"guest: finished in {elapsed:.1f} s; console log: {log_path}")
    if cx_emu:
        rc = cx_emu.stop()
        if rc != 0:
            why = ("did not exit after QEMU did" if rc is None
                   else f"exited with status {rc}: the device refused something the guest did")
            problems.append(("cx_emu", f"the emulated ConnectX {why} (log {cx_emu.log_path})", None))
        else:
            print(f"guest: the emulated ConnectX exited cleanly (log {cx_emu.log_path})")

    if args.mode in ("demo", "perf", "bench", "pci-smoke", "prod"):
        start = next((i for i, l in enumerate(lines) if f"==== rmlx5 {args.mode}" in l), None)
        end = next((i for i, l in enumerate(lines) if f"==== end of {args.mode}" in l),
                   len(lines) - 1)
        if start is not None:
            print("\n".join(PRINTK_PREFIX.sub("", l) for l in lines[start:end + 1]))

    if timed_out:
        problems.append(("timeout", f"guest did not finish within {args.timeout} s",
                         len(lines) - 1))
    if not any("rmlx5-guest: DONE" in l for l in lines) and not timed_out:
        problems.append(("guest_incomplete", "guest stopped before finishing", len(lines) - 1))
    for i, l in enumerate(lines):
        if KERNEL_PROBLEMS.search(l):
            known = known_upstream(lines, i)
            if known:
                print(f"guest: known upstream report {known[0]} ({known[1]}), "
                      "not counted: see the log")
                continue
            problems.append(("kernel_log", "kernel reported a problem", i))
            break

    if args.mode in ("bench", "pci-smoke", "prod"):
        # The benchmark kernel (also the production-like one) has no KUnit,
        # and pci-smoke loads no module; bench numbers are judged by the
        # report.
        kunit_passed, kunit_failed, kunit_lines = 0, 0, []
    else:
        kunit_passed, kunit_failed, kunit_lines = parse_kunit(args, log_text, workdir)
    for l in kunit_lines:
        print("kunit: " + l)

    guest_passed = guest_failed = 0
    results = []
    failed_since_exit = False
    for i, l in enumerate(lines):
        m = MARKER.search(l)
        if m:
            ok = m.group(1) == "PASS"
            failed_since_exit |= not ok
            results.append((ok, m.group(2), m.group(3) or "", i))
            continue
        m = EXIT.search(l)
        if m:
            # A program that failed without saying which test failed (it
            # crashed, or its harness broke) still counts as one failure.
            if m.group(2) != "0" and not failed_since_exit:
                results.append((False, m.group(1), f"exited with status {m.group(2)}", i))
            failed_since_exit = False
    # What failed, a line each, for the caller's summary (make check prints
    # it last, where CI's short tail of the output still shows it).
    failures = []
    for ok, name, why, i in results:
        if ok:
            guest_passed += 1
            print(f"guest: PASS {name}")
        else:
            guest_failed += 1
            print(f"guest: FAIL {name}: {why}")
            print(excerpt(lines, i, before=20, after=5))
            failures.append(f"{name}: {why}"[:300])
    for name, why, i in problems:
        guest_failed += 1
        print(f"guest: FAIL {name}: {why}")
        if name == "cx_emu":
            print(cx_emu.tail())
            with open(cx_emu.log_path, errors="replace") as f:
                last = " | ".join(l.strip() for l in f.read().splitlines()[-3:])
            failures.append(f"{name}: {why}: {last}"[:600])
        else:
            print(excerpt(lines, i))
            at = ""
            if i is not None and 0 <= i < len(lines):
                at = ": " + PRINTK_PREFIX.sub("", lines[i]).strip()
            failures.append(f"{name}: {why}{at}"[:300])
    named = [l for l in kunit_lines if l.startswith("failed case: ")]
    failures += named
    if kunit_failed and not named:
        failures.append("KUnit: " + (kunit_lines[-1] if kunit_lines else "no summary"))
    if args.mode in ("check", "stress", "pci-smoke", "prod") and not results:
        guest_failed += 1
        print("guest: FAIL no_results: the guest reported no test results")
        failures.append("no_results: the guest reported no test results")

    if args.results:
        with open(args.results, "w") as f:
            json.dump({"kunit_passed": kunit_passed, "kunit_failed": kunit_failed,
                       "guest_passed": guest_passed, "guest_failed": guest_failed,
                       "failures": failures}, f)
    print(f"guest: KUnit {kunit_passed} passed, {kunit_failed} failed; "
          f"guest tests {guest_passed} passed, {guest_failed} failed")
    if cx_emu and (kunit_failed or guest_failed) and not any(p[0] == "cx_emu" for p in problems):
        print(f"guest: the emulated ConnectX's log ({cx_emu.log_path}), last lines:")
        print(cx_emu.tail())
    if args.log:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if (kunit_failed or guest_failed) else 0


if __name__ == "__main__":
    sys.exit(main())
