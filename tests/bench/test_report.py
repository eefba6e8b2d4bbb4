"""Tests of scripts/bench-report.py on sample-console.log.

Run: python3 -m unittest discover -s tests/bench
(with a python that has matplotlib, the plots are checked too).
"""
import csv
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(TOP, "scripts", "bench-report.py")
SAMPLE = os.path.join(HERE, "sample-console.log")
HAVE_MPL = importlib.util.find_spec("matplotlib") is not None


def run_report(log, out, *extra, env=None):
    return subprocess.run([sys.executable, SCRIPT, "--log", log, "--out", out, *extra],
                          capture_output=True, text=True, env=env)


class SampleLog(unittest.TestCase):
    """The sample: 2 rounds x 3 devices x 10 cases, noise, CRLF, 5 failures."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.out = os.path.join(cls.tmp.name, "results", "bench-test")  # does not exist yet
        cls.proc = run_report(SAMPLE, cls.out)
        with open(os.path.join(cls.out, "raw.json"), encoding="utf-8") as f:
            cls.raw = json.load(f)
        with open(os.path.join(cls.out, "summary.txt"), encoding="utf-8") as f:
            cls.txt = f.read()
        with open(os.path.join(cls.out, "summary.md"), encoding="utf-8") as f:
            cls.md = f.read()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def runs(self, **keys):
        return [r for r in self.raw["runs"] if all(r[k] == v for k, v in keys.items())]

    def run1(self, **keys):
        rs = self.runs(**keys)
        self.assertEqual(len(rs), 1, keys)
        return rs[0]

    def case(self, test, size, mode="poll", lst=1, qps=1):
        for c in self.raw["cases"]:
            if (c["test"], c["size"], c["mode"], c["list"], c["qps"]) == (test, size, mode, lst, qps):
                return c
        self.fail(f"no case {test} {size}")

    def test_exit_and_files(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr)
        for name in ("raw.json", "raw.csv", "summary.txt", "summary.md"):
            self.assertTrue(os.path.isfile(os.path.join(self.out, name)), name)
        # stdout is the summary plus the list of files written
        self.assertTrue(self.proc.stdout.startswith(self.txt))

    def test_metadata(self):
        meta = self.raw["metadata"]
        self.assertEqual(meta["kernel"], "7.3.4")
        self.assertEqual(meta["cpus"], "2")
        self.assertEqual(meta["host_cpu"], "AMD EPYC 7B13 64-Core Processor")
        self.assertEqual(meta["perftest"], "4.5")
        self.assertEqual(meta["order"], "A B A B")

    def test_counts(self):
        self.assertEqual(self.raw["runs_total"], 60)
        self.assertEqual(self.raw["runs_failed"], 5)
        self.assertIn("5 runs failed (of 60)", self.txt)

    def test_latency_values(self):
        r = self.run1(dev="rmlx5", test="send_lat", size=8, mode="poll", round=1)
        self.assertTrue(r["ok"])
        self.assertEqual((r["p50_us"], r["p99_us"], r["rc"], r["secs"]), (3.62, 5.02, 0, 2))
        self.assertEqual(r["result"]["t_min"], 3.37)
        self.assertEqual(r["result"]["99.9% percentile"], 20.58)
        # perftest: a kernel line and a CPU-frequency warning sit between the
        # header and the values; the server's own report (14.72) comes after.
        r = self.run1(dev="rxe", test="send_lat", size=8, mode="poll", round=1)
        self.assertTrue(r["ok"])
        self.assertEqual((r["p50_us"], r["p99_us"]), (14.22, 41.22))
        r = self.run1(dev="siw", test="send_lat", size=8, mode="event", round=2)
        self.assertEqual((r["p50_us"], r["p99_us"]), (35.0, 95.0))

    def test_latency_combined_and_ratio(self):
        c = self.case("send_lat", 8)
        self.assertAlmostEqual(c["devices"]["rmlx5"]["p50"]["value"], (3.62 + 3.70) / 2)
        self.assertAlmostEqual(c["devices"]["rmlx5"]["p99"]["value"], (5.02 + 5.20) / 2)
        self.assertAlmostEqual(c["devices"]["rxe"]["p50"]["value"], (14.22 + 17.10) / 2)
        self.assertAlmostEqual(c["ratios"]["rmlx5/rxe"], 3.66 / 15.66, places=6)
        self.assertAlmostEqual(c["ratios"]["rmlx5/siw"], 3.66 / 21.90, places=6)
        # rxe's rounds differ by 18%: marked; rmlx5's by 2%: not
        self.assertAlmostEqual(c["devices"]["rxe"]["p50"]["spread"], (17.10 - 14.22) / 15.66, places=6)
        row = next(l for l in self.txt.splitlines() if l.startswith("send_lat     8 B  poll"))
        self.assertIn("3.66 / 5.11", row)
        self.assertIn("15.66 / 43.01 ±18%", row)
        self.assertNotIn("3.66 / 5.11 ±", row)
        self.assertTrue(row.rstrip().endswith("0.23x                     0.17x"), row)

    def test_ratio_direction_in_headers(self):
        self.assertIn("rmlx5/rxe", self.txt)
        self.assertIn("(p50, <1 = rmlx5 faster)", self.txt)
        self.assertIn("(rate, >1 = rmlx5 better)", self.txt)
        self.assertIn("rmlx5/siw (p50, <1 = rmlx5 faster)", self.md)

    def test_groups(self):
        for title in ("Latency", "Message rate (64 B)", "Bandwidth (64 KiB)",
                      "Scaling (64 B, by QP pairs)"):
            self.assertIn(title + "\n" + "=" * len(title), self.txt)
            self.assertIn("### " + title, self.md)
        self.assertNotIn("other sizes", self.txt)

    def test_bandwidth_values(self):
        r = self.run1(dev="rxe", test="write_bw", size=64, list=1, qps=1, round=1)
        self.assertEqual(r["msg_rate_mpps"], 0.101234)
        self.assertEqual(r["rate_mpps"], 0.101234)
        self.assertEqual(r["bw_avg_mb_s"], 6.18)  # MB/sec = 2^20 B/s
        # rmlx5-perf prints 3 decimals of Mpps; the rate comes from BW average
        r = self.run1(dev="rmlx5", test="write_bw", size=65536, round=1)
        self.assertEqual((r["msg_rate_mpps"], r["bw_avg_mb_s"]), (0.015, 964.5))
        self.assertAlmostEqual(r["rate_mpps"], 964.5 * 2**20 / 65536 / 1e6)
        self.assertAlmostEqual(r["rate_mpps"], 0.015432, places=6)
        self.assertEqual(r["warnings"], [])
        # "n/a" peak is fine
        r = self.run1(dev="rmlx5", test="write_bw", size=64, list=32, round=2)
        self.assertTrue(r["ok"])
        self.assertIsNone(r["bw_peak_mb_s"])
        self.assertAlmostEqual(r["rate_mpps"], 1.27, places=4)

    def test_bandwidth_combined_and_ratio(self):
        c = self.case("write_bw", 64)
        # rmlx5-perf printed BW average 25.167 and 25.641 MB/sec (2^20 B/s)
        rm = (25.167 + 25.641) * 2**20 / 64 / 1e6 / 2
        rx = (0.101234 + 0.098765) / 2
        self.assertAlmostEqual(c["devices"]["rmlx5"]["rate"]["value"], rm, places=6)
        self.assertAlmostEqual(c["ratios"]["rmlx5/rxe"], rm / rx, places=4)
        c = self.case("write_bw", 65536)
        rm = (0.015432 + 0.015678) / 2
        self.assertAlmostEqual(c["devices"]["rmlx5"]["rate"]["value"], rm, places=6)
        self.assertAlmostEqual(c["devices"]["rmlx5"]["mib_s"], rm * 65536 * 1e6 / 2**20, places=2)
        self.assertAlmostEqual(c["ratios"]["rmlx5/rxe"], rm / 0.00415, places=3)
        row = next(l for l in self.txt.splitlines() if l.startswith("write_bw  64 KiB"))
        self.assertIn("0.0156 (972.2 MiB/s)", row)
        self.assertIn("3.75x", row)

    def test_failed_rc(self):
        for rnd in (1, 2):
            r = self.run1(dev="siw", test="send_bw", size=64, round=rnd)
            self.assertFalse(r["ok"])
            self.assertEqual(r["rc"], 1)
            self.assertEqual(r["error"], "rc=1")
            self.assertEqual(len(r["tail"]), 5)
            self.assertEqual(r["tail"][-1], "Failed to complete run_iter_bw function successfully")
            # what tests/guest/bench.sh appends after "bench: server output:"
            self.assertEqual(r["server_tail"][-1], "Failed to exchange data between server and clients")
            self.assertEqual(len(r["server_tail"]), 4)
        c = self.case("send_bw", 64)
        self.assertIsNone(c["ratios"]["rmlx5/siw"])
        row = next(l for l in self.txt.splitlines() if l.startswith("send_bw   64 B"))
        self.assertRegex(row, r"fail \[(\d+)\]")
        n = row.split("fail [")[1].split("]")[0]
        note = next(l for l in self.txt.splitlines() if l.startswith(f"[{n}] "))
        self.assertIn("siw send_bw 64 B", note)
        self.assertIn("all 2 runs failed", note)
        self.assertIn("Rounds 1, 2: rc=1", note)
        self.assertIn("Failed status 12: wr_id 0 syndrom 0x81", note)
        self.assertIn("the server's: local address", note)
        self.assertTrue(row.rstrip().endswith("—"), row)

    def test_rc0_without_result(self):
        r = self.run1(dev="rxe", test="write_lat", size=4096, round=2)
        self.assertFalse(r["ok"])
        self.assertEqual(r["rc"], 0)
        self.assertIn("no numeric line", r["error"])
        self.assertIn("qp#17 moved to error state", r["tail"][-1])
        # the cell keeps round 1's value, with a note
        c = self.case("write_lat", 4096)
        self.assertEqual(c["devices"]["rxe"]["p50"]["value"], 30.10)
        self.assertEqual(c["devices"]["rxe"]["failed_runs"], [r["index"]])
        self.assertIn("30.10 / 80.00 [1]", self.txt)
        self.assertIn("[1] rxe write_lat 4 KiB poll list 1 qps 1: 1 of 2 runs failed", self.txt)

    def test_missing_end(self):
        r = self.run1(dev="rxe", test="write_bw", size=64, qps=2, round=2)
        self.assertFalse(r["ok"])
        self.assertFalse(r["ended"])
        self.assertIsNone(r["rc"])
        self.assertIn("no @@BENCH-END before the next @@BENCH-BEGIN", r["error"])
        # the run after it is parsed normally
        r2 = self.run1(dev="rmlx5", test="write_bw", size=64, qps=2, round=2)
        self.assertTrue(r2["ok"])
        self.assertAlmostEqual(r2["rate_mpps"], 0.72, places=4)
        # the guest died in the last run
        last = self.raw["runs"][-1]
        self.assertEqual((last["dev"], last["qps"], last["round"]), ("rmlx5", 4, 2))
        self.assertFalse(last["ok"])
        self.assertIn("before the end of the log", last["error"])
        self.assertIn("Kernel panic", last["tail"][-1])

    def test_csv(self):
        with open(os.path.join(self.out, "raw.csv"), encoding="utf-8", newline="") as f:
            rows = list(csv.reader(f))
        self.assertEqual(rows[0], ["dev", "test", "size", "mode", "list", "qps", "round", "iters",
                                   "rc", "secs", "p50_us", "p99_us", "bw_avg_mb_s",
                                   "msg_rate_mpps", "error"])
        self.assertEqual(len(rows), 61)
        self.assertEqual(rows[1], ["rmlx5", "send_lat", "8", "poll", "1", "1", "1", "1000", "0", "2",
                                   "3.62", "5.02", "", "", ""])
        failed = [r for r in rows[1:] if r[-1]]
        self.assertEqual(len(failed), 5)
        siw = next(r for r in failed if r[0] == "siw")
        self.assertTrue(siw[-1].startswith("rc=1 :: "), siw)
        self.assertIn("Failed to complete run_iter_bw", siw[-1])
        self.assertIn(" :: server: ", siw[-1])

    def test_markdown(self):
        self.assertIn("| send_lat | 8 B | poll | 1 | 1 | 3.66 / 5.11 | 15.66 / 43.01 ±18% |", self.md)
        self.assertIn("|---|---:|---|---:|---:|", self.md)
        self.assertIn("5 runs failed (of 60).", self.md)

    @unittest.skipUnless(HAVE_MPL, "matplotlib is not installed for this python")
    def test_plots(self):
        for name in ("latency.png", "msgrate.png"):
            with open(os.path.join(self.out, name), "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n", name)


class EdgeCases(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def write(self, text):
        path = os.path.join(self.tmp.name, "console.log")
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        return path

    def test_no_blocks(self):
        log = self.write("[    0.000000] Linux version 7.3.4\r\nKernel panic - not syncing\r\n")
        out = os.path.join(self.tmp.name, "out")
        p = run_report(log, out)
        self.assertEqual(p.returncode, 2)
        self.assertIn("no @@BENCH-BEGIN", p.stderr)
        self.assertFalse(os.path.exists(out))

    def test_missing_log(self):
        p = run_report(os.path.join(self.tmp.name, "nope.log"), os.path.join(self.tmp.name, "o"))
        self.assertEqual(p.returncode, 1)

    def test_garbage_output_and_stray_end(self):
        log = self.write(
            "@@BENCH-END rc=0 secs=1\n"
            "@@BENCH-BEGIN dev=rmlx5 test=write_bw size=64 mode=poll list=1 qps=1 round=1 iters=10\n"
            "rmlx5-perf: something odd\n"
            "@@BENCH-END rc=0 secs=1\n"
            "@@BENCH-BEGIN dev=rxe test=send_lat size=8 mode=poll list=1 qps=1 round=1 iters=10\n"
            " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]"
            "    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n"
            " 8       10          1.00           2.00\n"
            "@@BENCH-END rc=0 secs=1\n"
            "@@BENCH-BEGIN dev=siw test=send_lat round=1\n"
            "@@BENCH-END rc=0 secs=1\n")
        out = os.path.join(self.tmp.name, "out")
        p = run_report(log, out, "--no-plots")
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(out, "raw.json"), encoding="utf-8") as f:
            raw = json.load(f)
        r0, r1, r2 = raw["runs"]
        self.assertFalse(r0["ok"])
        self.assertIn("no result header", r0["error"])
        self.assertEqual(r0["tail"], ["rmlx5-perf: something odd"])
        self.assertFalse(r1["ok"])
        self.assertIn("4 fields, the header 9 columns", r1["error"])
        self.assertFalse(r2["ok"])
        self.assertIn("size=", r2["error"])
        self.assertEqual(raw["stray_ends"], 1)
        self.assertIn("3 runs failed (of 3)", p.stdout)
        self.assertIn("run 2 (log line 9): BEGIN line without a usable size=", p.stdout)

    def test_rate_units_disagree(self):
        # A BW average in 10^6 B/s (not perftest's 2^20) does not match
        # MsgRate: the printed MsgRate is used, with a warning.
        log = self.write(
            "@@BENCH-BEGIN dev=rmlx5 test=write_bw size=65536 mode=poll list=1 qps=1 round=1 iters=9\n"
            " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
            " 65536      1000           n/a                1011.351             0.015\n"
            "@@BENCH-END rc=0 secs=1\n"
            "@@BENCH-BEGIN dev=rxe test=write_bw size=65536 mode=poll list=1 qps=1 round=1 iters=9\n"
            " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
            " 65536      1000             8.48               8.09\t\t   0.015432\n"
            "@@BENCH-END rc=0 secs=1\n")
        out = os.path.join(self.tmp.name, "out")
        p = run_report(log, out, "--no-plots")
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(out, "raw.json"), encoding="utf-8") as f:
            raw = json.load(f)
        rm, rx = raw["runs"]
        self.assertTrue(rm["ok"])
        self.assertEqual(rm["rate_mpps"], 0.015)
        self.assertIn("the summary uses MsgRate", rm["warnings"][0])
        self.assertIsNone(rm["bw_peak_mb_s"])
        self.assertTrue(rx["ok"])  # Gb/sec is converted to MB/sec
        self.assertAlmostEqual(rx["bw_avg_mb_s"], 8.09e9 / 8 / 2**20)
        self.assertEqual(rx["rate_mpps"], 0.015432)
        self.assertIn("1 runs have warnings", p.stdout)

    def test_without_matplotlib(self):
        # A matplotlib that fails to import: the report is written anyway.
        fake = os.path.join(self.tmp.name, "fake")
        os.makedirs(os.path.join(fake, "matplotlib"))
        with open(os.path.join(fake, "matplotlib", "__init__.py"), "w") as f:
            f.write("raise ImportError('no matplotlib here')\n")
        env = dict(os.environ, PYTHONPATH=fake)
        out = os.path.join(self.tmp.name, "out")
        p = run_report(SAMPLE, out, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("warning: matplotlib is not available", p.stderr)
        self.assertTrue(os.path.isfile(os.path.join(out, "summary.txt")))
        self.assertFalse(os.path.exists(os.path.join(out, "latency.png")))


if __name__ == "__main__":
    unittest.main()


class SkippedCases(unittest.TestCase):
    """@@BENCH-SKIP: a case the guest did not run on purpose is "n/a" with
    its reason, not a failure, and never hides a run that did happen."""

    LOG = "\n".join([
        "@@BENCH-BEGIN dev=rmlx5 test=write_lat size=8 mode=event list=1 qps=1 round=1 iters=100",
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]"
        "    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ",
        " 8       100           50.00          90.00        60.00              61.00"
        "          2.00            80.00                  90.00",
        "@@BENCH-END rc=0 secs=1",
        '@@BENCH-SKIP dev=rxe test=write_lat size=8 mode=event list=1 qps=1 round=1 '
        'reason="perftest: Events feature not available on WRITE verb"',
        '@@BENCH-SKIP dev=siw test=write_lat size=8 mode=event list=1 qps=1 round=1 '
        'reason="perftest: Events feature not available on WRITE verb"',
        "",
    ])

    def test_skip(self):
        with tempfile.TemporaryDirectory() as tmp:
            log = os.path.join(tmp, "console.log")
            with open(log, "w") as f:
                f.write(self.LOG)
            out = os.path.join(tmp, "out")
            proc = run_report(log, out, "--no-plots")
            self.assertEqual(proc.returncode, 0, proc.stderr)
            with open(os.path.join(out, "summary.txt"), encoding="utf-8") as f:
                txt = f.read()
            row = next(l for l in txt.splitlines() if l.startswith("write_lat"))
            self.assertIn("60.00 / 80.00", row)
            self.assertEqual(row.count("n/a [1]"), 2, row)
            self.assertIn("[1] not run: perftest: Events feature not available on WRITE verb", txt)
            self.assertIn("0 runs failed (of 1)", txt)
            with open(os.path.join(out, "raw.json"), encoding="utf-8") as f:
                raw = json.load(f)
            devs = raw["cases"][0]["devices"]
            self.assertEqual(devs["rxe"]["skipped"],
                             "perftest: Events feature not available on WRITE verb")
            self.assertEqual(devs["rmlx5"]["p50"]["value"], 60.0)


class PathFigures(unittest.TestCase):
    """@@PATH lines after an rmlx5 run (debugfs rmlx5/perf) become the
    run's "path" in raw.json and a per-case breakdown in summary.txt."""

    @staticmethod
    def run_block(rnd, kicks, kick_ns):
        return [
            f"@@BENCH-BEGIN dev=rmlx5 test=write_bw size=64 mode=poll list=1 qps=2 round={rnd} "
            "iters=100",
            " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]",
            " 64         100            n/a                2.000                0.031",
            "@@BENCH-END rc=0 secs=1",
            "@@PATH step                count       total_ns     avg_ns  what",
            f"@@PATH kick_send      {kicks:>10} {kick_ns:>14} {kick_ns // kicks:>10}  KICK send",
            "@@PATH engine                200        4000000      20000  one engine budget",
            "@@PATH engine_units          400              -          -  budget units",
            "@@PATH irq_delay               0              0          0  raised -> handler",
        ]

    def test_breakdown(self):
        lines = self.run_block(1, 200, 2_000_000) + self.run_block(2, 200, 6_000_000) + [
            # An rxe run's own output never carries path figures.
            "@@BENCH-BEGIN dev=rxe test=write_bw size=64 mode=poll list=1 qps=2 round=1 iters=100",
            " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]",
            " 64         100            n/a                1.000                0.015",
            "@@BENCH-END rc=0 secs=1", ""]
        with tempfile.TemporaryDirectory() as tmp:
            log = os.path.join(tmp, "console.log")
            with open(log, "w") as f:
                f.write("\n".join(lines))
            out = os.path.join(tmp, "out")
            proc = run_report(log, out, "--no-plots")
            self.assertEqual(proc.returncode, 0, proc.stderr)
            with open(os.path.join(out, "raw.json"), encoding="utf-8") as f:
                raw = json.load(f)
            r0 = raw["runs"][0]
            self.assertEqual(r0["path"]["kick_send"], {"count": 200, "ns": 2_000_000})
            self.assertEqual(r0["path"]["engine_units"], {"count": 400, "ns": None})
            self.assertNotIn("path", raw["runs"][2])
            with open(os.path.join(out, "summary.txt"), encoding="utf-8") as f:
                txt = f.read()
            self.assertIn("rmlx5 path breakdown", txt)
            after = txt.split("rmlx5 path breakdown", 1)[1].splitlines()
            row = next(l for l in after if l.startswith("write_bw"))
            cols = row.split()
            # kick: (2 + 6) ms / 400 kicks = 20.0 µs; engine: 8 ms / 400 = 20.0 µs;
            # irq wait: no events (—); kicks per message: 400 / (2 x 100 x 2) = 1.00;
            # engine ns per unit: 8 ms / 800 units = 10000.
            self.assertEqual(cols[-9:],
                             ["20.0", "20.0", "—", "—", "—", "—", "—", "1.00", "10000"])


def report_of(test, lines):
    """Runs the report on a log of `lines`; (summary.txt, summary.md,
    raw.json as loaded)."""
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "console.log")
        with open(log, "w") as f:
            f.write("\n".join(lines) + "\n")
        out = os.path.join(tmp, "out")
        proc = run_report(log, out, "--no-plots")
        test.assertEqual(proc.returncode, 0, proc.stderr)
        texts = []
        for name in ("summary.txt", "summary.md"):
            with open(os.path.join(out, name), encoding="utf-8") as f:
                texts.append(f.read())
        with open(os.path.join(out, "raw.json"), encoding="utf-8") as f:
            return texts[0], texts[1], json.load(f)


class PerftestOnRmlx5(unittest.TestCase):
    """perftest's runs on rmlx5 (dev rmlx5pt) get a column and ratios of
    their own against the kernel's devices, none against rmlx5-perf."""

    def test_columns(self):
        def block(dev, rate):
            return [
                f"@@BENCH-BEGIN dev={dev} test=write_bw size=64 mode=poll list=1 qps=1 round=1 "
                "iters=100",
                " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]",
                f" 64         100            n/a                1.000                {rate}",
                "@@BENCH-END rc=0 secs=1",
            ]
        lines = block("rmlx5", "0.400000") + block("rmlx5pt", "0.200000") + block("rxe", "0.050000")
        txt, _, raw = report_of(self, lines)
        self.assertIn("rmlx5pt/rxe", txt)
        self.assertNotIn("rmlx5/rmlx5pt", txt)
        self.assertIn("rmlx5pt = perftest", txt)
        row = next(l for l in txt.splitlines() if l.startswith("write_bw"))
        self.assertEqual(row.split()[-2:], ["8.00x", "4.00x"])
        self.assertEqual(raw["cases"][0]["ratios"], {"rmlx5/rxe": 8.0, "rmlx5pt/rxe": 4.0})


class QpCreate(unittest.TestCase):
    """The `big` group's qp_create blocks become a table of medians over
    rounds; a failed block counts in "runs ok" and not in the figures."""

    @staticmethod
    def block(n, rnd, create_ms, us, dus, per_qp, rc=0):
        return [
            f"@@QPCREATE-BEGIN n={n} round={rnd}",
            f"qp_create: {n} RC QPs (16 send / 16 recv WRs) on rmlx5_0 in 1 context(s), "
            "1 thread(s)",
            f"  create        {create_ms} ms in all {us:>10} us per QP       100 per second",
            f"  destroy          1.000 ms in all {dus:>10} us per QP       100 per second",
            f"  commands: {2 * n} in 1.000 s, 100/s",
            f"  memory: {per_qp * n // 1024} KiB for {n} QPs, {per_qp} bytes per QP "
            "(MemFree before and after creating)",
            f"@@QPCREATE-END rc={rc}",
        ]

    def test_table(self):
        lines = (self.block(1000, 1, "900.000", "900.000", "300.000", 20480)
                 + self.block(1000, 2, "1100.000", "1100.000", "500.000", 22528)
                 + self.block(1000, 3, "5000.000", "5000.000", "900.000", 99999, rc=124)
                 + self.block(1, 1, "1.500", "1500.000", "700.000", 40960)
                 + PathFigures.run_block(1, 200, 2_000_000))
        txt, md, _ = report_of(self, lines)
        after = txt.split("rmlx5 QP creation", 1)[1].splitlines()
        rows = {l.split()[0]: l.split()[1:] for l in after[2:] if l.strip()}
        self.assertEqual(rows["1"], ["1.5", "1500.0", "700.0", "40,960", "1/1"])
        self.assertEqual(rows["1,000"], ["1000.0", "1000.0", "400.0", "21,504", "2/3"])
        self.assertIn("1,000", md)
