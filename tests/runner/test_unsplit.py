# SPDX-License-Identifier: GPL-2.0
"""Tests of tests/run-guest.py's unsplit(): result lines of the guest cut
by a kernel message on the serial console are made whole again, and
nothing else changes."""
import importlib.util
import os
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = importlib.util.spec_from_file_location(
    "run_guest", os.path.join(HERE, "..", "run-guest.py"))
run_guest = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(run_guest)


def markers(lines):
    found = []
    for l in run_guest.unsplit(lines):
        m = run_guest.MARKER.search(l)
        if m:
            found.append((m.group(1), m.group(2)))
    return found


class Unsplit(unittest.TestCase):
    def test_a_result_cut_by_a_kernel_message_counts(self):
        lines = [
            "rmlx5-test: PASS[  170.416316] rmlx5-guest: START devnodes_exist",
            " devnodes_exist",
            "rmlx5-test: PASS next_one",
        ]
        self.assertEqual(markers(lines),
                         [("PASS", "devnodes_exist"), ("PASS", "next_one")])
        # The kernel's line stays whole, for the problem scan.
        self.assertIn("[  170.416316] rmlx5-guest: START devnodes_exist",
                      run_guest.unsplit(lines))

    def test_the_continuation_may_come_after_more_kernel_lines(self):
        lines = [
            "rmlx5-test: FA[    1.000001] one",
            "[    1.000002] two",
            "IL broken: it said no",
        ]
        self.assertEqual(markers(lines), [("FAIL", "broken")])

    def test_whole_lines_are_left_alone(self):
        lines = [
            "[    2.5] rmlx5: loaded",
            "rmlx5-test: PASS a",
            "plain output",
            "[    2.6] kernel says [    2.7] nested",
        ]
        self.assertEqual(run_guest.unsplit(lines), lines)

    def test_a_fragment_at_the_end_is_kept(self):
        self.assertEqual(
            run_guest.unsplit(["rmlx5-test: PASS x[    3.0] bye"]),
            ["[    3.0] bye", "rmlx5-test: PASS x"])


if __name__ == "__main__":
    unittest.main()
