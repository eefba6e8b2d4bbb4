# SPDX-License-Identifier: GPL-2.0
"""Tests of scripts/frame-check.py on small objects built here.

Each object holds one function with a frame far over the limit and one
far under it; the check must reject the first by name and only it, for C
(clang, as the kernel builds) and for Rust (rustc, demangled names).
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "frame-check.py")

C_SOURCE = r"""
void fill(volatile char *p, unsigned long n);

int oversized_frame(int i)
{
	volatile char buf[3000];

	fill(buf, sizeof(buf));
	return buf[i % sizeof(buf)];
}

int small_frame(int i)
{
	volatile char buf[64];

	fill(buf, sizeof(buf));
	return buf[i % sizeof(buf)];
}
"""

RUST_SOURCE = r"""
#![no_std]
#![crate_type = "lib"]

extern "C" {
    fn fill(p: *mut u8, n: usize);
}

#[inline(never)]
pub fn rust_oversized_frame(i: usize) -> u8 {
    let mut buf = [0u8; 4000];
    // SAFETY: `buf` is valid for its length.
    unsafe { fill(buf.as_mut_ptr(), buf.len()) };
    buf[i % buf.len()]
}

/// Over a page: rustc allocates it in page steps with a probe store
/// between them, which the check must add up.
#[inline(never)]
pub fn rust_probed_frame(i: usize) -> u8 {
    let mut buf = [0u8; 20000];
    // SAFETY: `buf` is valid for its length.
    unsafe { fill(buf.as_mut_ptr(), buf.len()) };
    buf[i % buf.len()]
}

/// Far over a page: rustc allocates it in a probe loop (bound in %r11),
/// then the remainder.
#[inline(never)]
pub fn rust_probe_loop_frame(i: usize) -> u8 {
    let mut buf = [0u8; 200000];
    // SAFETY: `buf` is valid for its length.
    unsafe { fill(buf.as_mut_ptr(), buf.len()) };
    buf[i % buf.len()]
}

#[inline(never)]
pub fn rust_small_frame(i: usize) -> u8 {
    let mut buf = [0u8; 32];
    // SAFETY: `buf` is valid for its length.
    unsafe { fill(buf.as_mut_ptr(), buf.len()) };
    buf[i % buf.len()]
}
"""


def c_compiler():
    for cc in ("clang-19", "clang", "cc", "gcc"):
        if shutil.which(cc):
            return cc
    return None


class FrameCheckTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="frame-check-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def check(self, obj, *extra):
        return subprocess.run([sys.executable, SCRIPT, *extra, obj],
                              capture_output=True, text=True)

    def build_c(self, opt):
        cc = c_compiler()
        if cc is None:
            self.skipTest("no C compiler")
        src = os.path.join(self.dir, "frames.c")
        obj = os.path.join(self.dir, f"frames{opt}.o")
        with open(src, "w") as f:
            f.write(C_SOURCE)
        subprocess.run([cc, opt, "-c", "-fno-stack-protector", "-o", obj, src], check=True)
        return obj

    def test_c_object_over_the_limit_is_rejected_by_name(self):
        for opt in ("-O2", "-Os"):
            with self.subTest(opt=opt):
                r = self.check(self.build_c(opt))
                self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
                self.assertIn("FAIL", r.stdout)
                self.assertIn("oversized_frame:", r.stdout)
                self.assertNotIn("small_frame:", r.stdout.split("FAIL", 1)[1])

    def test_frame_sizes_cover_the_arrays(self):
        obj = self.build_c("-O2")
        r = self.check(obj, "--top", "5")
        sizes = {}
        for line in r.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0].isdigit():
                sizes[parts[1]] = int(parts[0])
        self.assertGreaterEqual(sizes["oversized_frame"], 3000)
        self.assertLess(sizes["oversized_frame"], 3200)
        self.assertGreaterEqual(sizes["small_frame"], 64)
        self.assertLess(sizes["small_frame"], 256)

    def test_a_higher_limit_accepts_the_same_object(self):
        r = self.check(self.build_c("-O2"), "--limit", "8192")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertNotIn("FAIL", r.stdout)

    def test_rust_object_over_the_limit_is_rejected_by_name(self):
        if not shutil.which("rustc"):
            self.skipTest("no rustc")
        src = os.path.join(self.dir, "frames.rs")
        obj = os.path.join(self.dir, "frames_rs.o")
        with open(src, "w") as f:
            f.write(RUST_SOURCE)
        subprocess.run(["rustc", "--edition=2021", "-O", "-C", "panic=abort", "--emit=obj",
                        "-o", obj, src], check=True)
        r = self.check(obj)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        failed = r.stdout.split("FAIL", 1)[1]
        self.assertIn("rust_oversized_frame", failed)
        self.assertIn("rust_probed_frame", failed)
        self.assertNotIn("rust_small_frame", failed)
        self.assertIn("rust_probe_loop_frame", failed)
        for fn, least in (("rust_probed_frame", 20000), ("rust_probe_loop_frame", 200000)):
            line = [l for l in r.stdout.splitlines() if l.strip().endswith(fn)]
            self.assertTrue(line and least <= int(line[0].split()[0]) < least + 256, r.stdout)

    def test_unreadable_object_is_an_error_not_a_pass(self):
        bogus = os.path.join(self.dir, "not-an-object.o")
        with open(bogus, "w") as f:
            f.write("plain text\n")
        r = self.check(bogus)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
