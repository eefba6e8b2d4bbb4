# SPDX-License-Identifier: GPL-2.0
"""Tests of tests/run-guest.py's KERNEL_PROBLEMS: which console lines fail
a guest run."""
import importlib.util
import os
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = importlib.util.spec_from_file_location(
    "run_guest", os.path.join(HERE, "..", "run-guest.py"))
run_guest = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(run_guest)


def problem(line):
    return run_guest.KERNEL_PROBLEMS.search(line) is not None


class GeneralProtectionFault(unittest.TestCase):
    def test_the_kernels_own_fault_is_a_problem(self):
        self.assertTrue(problem(
            "[   12.345678] Oops: general protection fault, probably for "
            "non-canonical address 0xdead000000000100: 0000 [#1] SMP KASAN"))
        self.assertTrue(problem(
            "[   12.345678] general protection fault: 0000 [#1] PREEMPT SMP"))

    def test_a_process_crash_is_not(self):
        self.assertFalse(problem(
            "[  812.000001] traps: ib_send_lat[4242] general protection fault "
            "ip:7f3a2c01d2e0 sp:7ffd4b8e9f30 error:0 in "
            "librdmacm.so.1.3.50.0[7f3a2c016000+15000]"))

    def test_other_reports_still_are(self):
        self.assertTrue(problem("[    3.1] BUG: KASAN: slab-use-after-free in x"))
        self.assertTrue(problem("[    3.1] WARNING: CPU: 0 PID: 1 at x"))


if __name__ == "__main__":
    unittest.main()
