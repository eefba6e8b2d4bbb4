#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Check the stack frame of every function in x86-64 objects (.ko, .o).

Ordinary kernels run tasks on 16 KiB stacks (KASAN doubles them, which is
why a debug kernel hides an overflow), and the kernel asks C code to keep
each frame under CONFIG_FRAME_WARN, 2,048 bytes on 64-bit. rustc has no
such warning, so this script reads the machine code instead, for Rust and
C alike: it disassembles each object with objdump and, per function, takes

    frame = 8 x (registers pushed) + the largest stack allocation

where a stack allocation is a `sub $N,%rsp` (or `add $-N,%rsp`), with
consecutive allocations separated only by stack-probe stores summed, and a
probe loop (`mov %rsp,%r11; sub $N,%r11; ...; sub $R,%rsp`) counted as
N + R. The
return address is not counted, as the compilers' own frame-size warnings
do not count it.

It prints the largest frames and exits 1, naming every function over the
limit, if there is one.

    scripts/frame-check.py [--limit 2048] [--top 12] OBJECT...
"""
import argparse
import re
import subprocess
import sys

HEADER = re.compile(r"^[0-9a-f]+ <(.+)>:$")
# "  1f:\tsub    $0x3f48,%rsp" (objdump -d --no-show-raw-insn, AT&T syntax).
INSN = re.compile(r"^\s*[0-9a-f]+:\s+(\S+)\s*(.*)$")
SUB_RSP = re.compile(r"^\$0x([0-9a-f]+),%rsp$")
# The bound of a stack-probe loop: `sub $N,%r11` after `mov %rsp,%r11`.
SUB_R11 = re.compile(r"^\$0x([0-9a-f]+),%r11$")
PAGE = 0x1000
PUSH_REG = re.compile(r"^%(r[a-z0-9]+)$")
# What a stack-probe sequence puts between its allocations.
PROBE = re.compile(r"^(movq|orq|orl|movl)\s+\$0x0,\(%rsp\)$")


def frames(path, objdump="objdump"):
    """Returns {function: frame bytes} for the x86-64 object at `path`."""
    out = subprocess.run([objdump, "-d", "--no-show-raw-insn", "-C", path],
                         check=True, capture_output=True, text=True).stdout
    result = {}
    name = None
    pushed = set()
    largest = 0
    run = 0
    after_alloc = False
    probe = 0
    insn = prev = ""

    def close():
        if name is not None:
            size = 8 * len(pushed) + largest
            result[name] = max(result.get(name, 0), size)

    for line in out.splitlines():
        m = HEADER.match(line)
        if m:
            close()
            name, pushed, largest, run, after_alloc, probe = m.group(1), set(), 0, 0, False, 0
            continue
        m = INSN.match(line)
        if not m or name is None:
            continue
        op, args = m.group(1), m.group(2).split("#")[0].strip()
        prev, insn = insn, f"{op} {args}"
        alloc = 0
        if op in ("sub", "subq"):
            s = SUB_RSP.match(args)
            r = SUB_R11.match(args) if prev == "mov %rsp,%r11" else None
            if s:
                alloc = int(s.group(1), 16)
            elif r:
                # A probe loop allocates N a page at a time, then the rest
                # with one more `sub`.
                probe = int(r.group(1), 16)
                largest = max(largest, probe)
        elif op in ("add", "addq"):
            s = SUB_RSP.match(args)
            if s:
                v = int(s.group(1), 16)
                if v >= 1 << 63:
                    alloc = (1 << 64) - v
        elif op in ("push", "pushq"):
            p = PUSH_REG.match(args)
            if p:
                pushed.add(p.group(1))
        if alloc and probe:
            if alloc != PAGE:
                largest = max(largest, probe + alloc)
                probe = 0
        elif alloc:
            run = run + alloc if after_alloc else alloc
            largest = max(largest, run)
            after_alloc = True
        elif after_alloc and PROBE.match(insn):
            pass
        else:
            after_alloc = False
    close()
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=2048,
                    help="largest frame allowed, in bytes (default: 2048, FRAME_WARN on 64-bit)")
    ap.add_argument("--top", type=int, default=12, help="how many of the largest frames to print")
    ap.add_argument("--objdump", default="objdump")
    ap.add_argument("objects", nargs="+")
    args = ap.parse_args()

    over = []
    for path in args.objects:
        try:
            sizes = frames(path, args.objdump)
        except (OSError, subprocess.CalledProcessError) as e:
            print(f"frame-check: cannot disassemble {path}: {e}", file=sys.stderr)
            return 2
        ranked = sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0]))
        print(f"frame-check: {path}: {len(sizes)} functions, largest frames "
              f"(limit {args.limit} bytes):")
        for fn, size in ranked[:args.top]:
            print(f"  {size:6d}  {fn}")
        over += [(path, fn, size) for fn, size in ranked if size > args.limit]
    if over:
        for path, fn, size in over:
            print(f"frame-check: FAIL {path}: {fn}: {size}-byte frame exceeds {args.limit}")
        print("frame-check: build large values in place on the heap "
              "(KBox/KVec, pin-init into the allocation), see Documentation/kernel-stacks.md")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
