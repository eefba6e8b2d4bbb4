#!/usr/bin/env python3
"""Turn the `make bench` guest console log into a report.

Input: the QEMU guest's console log (kernel messages and other noise,
possibly CRLF line ends). Every benchmark run in it is wrapped as

    @@BENCH-BEGIN dev=rxe test=send_lat size=8 mode=poll list=1 qps=1 round=1 iters=1000
    ... what the tool printed (perftest 4.5 or rmlx5-perf, stdout+stderr) ...
    @@BENCH-END rc=0 secs=4

and `@@BENCH-INFO key=value ...` lines (values may be double-quoted) carry
metadata (kernel, CPUs, accelerator, host CPU, perftest version). A run
fails when rc is not 0, when its BEGIN has no END (the guest died), or when
its output holds no result line that parses; its reason is the cause plus
the last 5 output lines.

Outputs, all in the --out directory (created if needed):
  raw.json      metadata, every run (keys, rc, secs, parsed values, error)
                and the combined cases of the summary
  raw.csv       one row per run; the numbers as the tool printed them
                (MB/sec is perftest's unit, 2^20 B/s)
  summary.txt   the summary table (also printed on stdout): rmlx5, rxe and
                siw side by side with the ratios rmlx5/rxe and rmlx5/siw, in
                the groups Latency, Message rate (64 B), Bandwidth (64 KiB),
                Scaling (64 B, by QP pairs); rounds are combined by their
                median (the mean of the two for two rounds), a spread between
                rounds above 10% is shown, failed runs get a numbered note.
                Latency rows: p50 / p99 in µs, ratio of the p50s (<1 = rmlx5
                faster). Rate rows: Mpps (and MiB/s for 64 KiB), ratio of
                the rates (>1 = rmlx5 better); a rate printed with fewer
                than 6 decimals (rmlx5-perf) is recomputed from the BW
                average when the two agree, for the digits.
  summary.md    the same as Markdown tables, for README
  latency.png   p50 latency per case and device (log scale, p99 whiskers)
  msgrate.png   message rate per case and device (log scale)
The plots need matplotlib (Agg backend); without it they are skipped with
a warning.

Exit status: 0 when the report was written (even if runs failed), 2 when
the log has no @@BENCH-BEGIN at all, 1 on other errors (unreadable log,
bad command line).

Usage: python3 scripts/bench-report.py --log build/bench-console.log \
           --out results/bench-<stamp> [--no-plots]
"""
import argparse
import csv
import datetime
import json
import math
import os
import re
import statistics
import sys

# The devices in column order; the first is the one the ratios are about.
DEVICES = ("rmlx5", "rmlx5pt", "rxe", "siw")
BASE = DEVICES[0]
# rmlx5's software HCA driven by perftest through rdma-core's own mlx5
# provider (ib_uverbs), the programs users run on mlx5_ib; its ratios to
# the kernel's devices get columns of their own.
PT = DEVICES[1]
TEST_ORDER = ("send_lat", "write_lat", "read_lat", "send_bw", "write_bw", "read_bw")
MODE_ORDER = ("poll", "event")
TAIL = 5  # output lines quoted for a failed run
MB = 1 << 20  # the "MB" of perftest's (and rmlx5-perf's) MB/sec
SPREAD_MARK = 0.10  # show the spread between rounds above this

MARKER_RE = re.compile(r"@@BENCH-(BEGIN|END|INFO|SKIP)\b(.*)")
KV_RE = re.compile(r'([A-Za-z_][\w.-]*)=("(?:[^"\\]|\\.)*"?|\S*)')
# tests/guest/bench.sh appends the server's last lines to a failed run.
SERVER_RE = re.compile(r"^\s*bench: server output:")
ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# A column of a perftest header: "#bytes", "t_min[usec]", "99% percentile[usec]",
# "BW peak[MB/sec]", ...
COLUMN_RE = re.compile(r"#[\w]+|[^\s\[\]#][^\[\]#]*?\[[^\]]*\]")
NUMBER_RE = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?|[-+]?nan|[-+]?inf|n/a", re.I)


class Usage(argparse.ArgumentParser):
    """argparse, but bad usage exits 1: 2 means "no BENCH blocks"."""

    def error(self, message):
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(1)


# ----------------------------------------------------------------- parsing


def parse_kv(text):
    """`a=1 b="x y"` -> {"a": "1", "b": "x y"}."""
    out = {}
    for k, v in KV_RE.findall(text):
        if v.startswith('"'):
            v = v[1:-1] if len(v) > 1 and v.endswith('"') else v[1:]
            v = re.sub(r"\\(.)", r"\1", v)
        out[k] = v
    return out


def number(tok):
    """A result column as float; None for n/a, nan, inf."""
    try:
        v = float(tok)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def decimals(tok):
    return len(tok.split(".", 1)[1]) if "." in tok else 0


def column_name(col):
    """'99% percentile[usec]' -> ('99% percentile', 'usec')."""
    m = re.fullmatch(r"(.*?)\[(.*)\]", col)
    return (m.group(1).strip(), m.group(2)) if m else (col, "")


def parse_result(lines):
    """Finds the result header and the first numeric line after it.

    Returns (values, error): values maps the column name to
    {"value": float|None, "text": str, "unit": str}.
    """
    mismatch = None
    for i, line in enumerate(lines):
        if "#bytes" not in line or "#iterations" not in line:
            continue
        cols = COLUMN_RE.findall(line)
        for later in lines[i + 1:]:
            toks = later.split()
            if len(toks) < 2 or not all(NUMBER_RE.fullmatch(t) for t in toks):
                continue
            if len(toks) != len(cols):
                mismatch = f"a numeric line has {len(toks)} fields, the header {len(cols)} columns"
                continue
            values = {}
            for col, tok in zip(cols, toks):
                name, unit = column_name(col)
                values[name] = {"value": number(tok), "text": tok, "unit": unit}
            return values, None
        if mismatch is None:
            mismatch = "a result header but no numeric line after it"
    return None, mismatch or "no result header (#bytes #iterations ...)"


def kind_of(test):
    if test.endswith("_lat"):
        return "lat"
    if test.endswith("_bw"):
        return "bw"
    return None


def fill_results(run, lines):
    """Parses the output of `run` into it; returns an error string or None."""
    values, err = parse_result(lines)
    if err:
        return err
    run["result"] = {k: v["value"] for k, v in values.items()}
    kind = kind_of(run["test"] or "")
    if kind is None:  # an unknown test: trust the header
        kind = "lat" if "t_typical" in values else "bw"

    def get(name, unit_ok):
        col = values.get(name)
        if col is None:
            raise LookupError(f"no '{name}' column")
        if col["unit"] not in unit_ok:
            raise LookupError(f"'{name}' is in {col['unit']}, expected {'/'.join(unit_ok)}")
        return col["value"]

    try:
        if kind == "lat":
            run["p50_us"] = get("t_typical", ("usec",))
            run["p99_us"] = get("99% percentile", ("usec",))
            if run["p50_us"] is None or run["p99_us"] is None:
                return "the latency columns are not numbers"
            if run["p50_us"] <= 0 or run["p99_us"] <= 0:
                return "a latency of 0 or less"
        else:
            rate = get("MsgRate", ("Mpps",))
            avg = get("BW average", ("MB/sec", "Gb/sec"))
            peak = get("BW peak", ("MB/sec", "Gb/sec"))
            if values["BW average"]["unit"] == "Gb/sec":
                # perftest's --report_gbits: 10^9 bit/s; MB/sec is MiB/s.
                avg = None if avg is None else avg * 1e9 / 8 / MB
                peak = None if peak is None else peak * 1e9 / 8 / MB
            run["bw_peak_mb_s"] = peak
            run["bw_avg_mb_s"] = avg
            run["msg_rate_mpps"] = rate
            if rate is None:
                return "the MsgRate column is not a number"
            run["rate_mpps"] = summary_rate(run, values["MsgRate"], avg)
            if not run["rate_mpps"] or run["rate_mpps"] <= 0:
                return "a message rate of 0 or less"
    except LookupError as e:
        return f"result line without the expected columns: {e}"
    nbytes = values.get("#bytes", {}).get("value")
    if nbytes is not None and run["size"] is not None and int(nbytes) != run["size"]:
        run["warnings"].append(f"the tool reports {int(nbytes)} bytes, the run says size={run['size']}")
    return None


def summary_rate(run, rate, avg):
    """The message rate the summary uses, in Mpps.

    perftest prints MsgRate with 6 decimals, rmlx5-perf with 3: too coarse
    for 64 KiB messages (0.015 Mpps). So a rate with fewer than 6 decimals
    is recomputed from the BW average (`avg`, MB/sec = 2^20 B/s, as both
    tools print it) when the two agree to the printed rate's last digit;
    when they do not, the printed rate is used, with a warning.
    """
    d = decimals(rate["text"])
    size = run["size"]
    if d >= 6 or not avg or not size:
        return rate["value"]
    derived = avg * MB / size / 1e6
    if abs(derived - rate["value"]) <= 10 ** -d * 1.001:
        return derived
    run["warnings"].append(
        f"BW average {avg:g} MB/sec (2^20 B/s) at {size} B makes {derived:.6f} Mpps, "
        f"MsgRate says {rate['text']}; the summary uses MsgRate")
    return rate["value"]


def new_run(index, lineno, keys):
    run = {
        "index": index,
        "line": lineno,
        "keys": keys,
        "dev": keys.get("dev"),
        "test": keys.get("test"),
        "size": None,
        "mode": keys.get("mode", "poll"),
        "list": None,
        "qps": None,
        "round": None,
        "iters": None,
        "rc": None,
        "secs": None,
        "ended": False,
        "ok": False,
        "p50_us": None,
        "p99_us": None,
        "bw_peak_mb_s": None,
        "bw_avg_mb_s": None,
        "msg_rate_mpps": None,
        "rate_mpps": None,
        "result": None,
        "error": None,
        "tail": [],
        "server_tail": [],
        "warnings": [],
    }
    bad = [k for k in ("dev", "test", "size") if not keys.get(k)]
    for k, default in (("size", None), ("list", 1), ("qps", 1), ("round", 1), ("iters", None)):
        if k not in keys:
            if default is not None:
                run[k] = default
                run["warnings"].append(f"no {k}= key, taken as {default}")
            continue
        try:
            run[k] = int(keys[k])
        except ValueError:
            bad.append(k)
    if "mode" not in keys:
        run["warnings"].append("no mode= key, taken as poll")
    run["key_error"] = bool(bad)
    run["_bad"] = bad
    return run


def finish(run, lines, end, cut=None):
    """Judges a run once its END (or the lack of it: `cut` says why) is known."""
    run["output_lines"] = len(lines)
    cut_at = next((i for i, l in enumerate(lines) if SERVER_RE.match(l)), None)
    server = [] if cut_at is None else lines[cut_at + 1:]
    lines = lines if cut_at is None else lines[:cut_at]

    def said(ls):  # the last lines that say something (not blank, no rule)
        return [l.strip() for l in ls if l.strip().strip("-")][-TAIL:]

    run["tail"] = said(lines)
    run["server_tail"] = said(server)
    bad = run.pop("_bad")
    if end is not None:
        run["ended"] = True
        try:
            run["rc"] = int(end["rc"]) if "rc" in end else None
        except ValueError:
            run["rc"] = None
        try:
            run["secs"] = float(end["secs"]) if "secs" in end else None
            if run["secs"] is not None and not math.isfinite(run["secs"]):
                run["secs"] = None
            elif run["secs"] is not None and run["secs"].is_integer():
                run["secs"] = int(run["secs"])
        except ValueError:
            pass
    if bad:
        run["error"] = "BEGIN line without a usable " + ", ".join(f"{k}=" for k in bad)
    elif end is None:
        run["error"] = f"no @@BENCH-END {cut}"
    elif run["rc"] is None:
        run["error"] = f"END without a numeric rc ({end.get('rc', 'missing')})"
    elif run["rc"] != 0:
        run["error"] = f"rc={run['rc']}"
    # Parse even failed runs: the numbers of a non-zero exit are kept in
    # raw.json, but the run stays failed.
    err = fill_results(run, lines) if not bad else None
    if run["error"] is None and err:
        run["error"] = err
    run["ok"] = run["error"] is None
    if run["ok"]:
        run["tail"] = []
        run["server_tail"] = []


PATH_RE = re.compile(r"@@PATH\s+(\w+)\s+(\d+)\s+(\d+|-)(?:\s|$)")


def parse_log(text):
    """-> (metadata, runs, stray_ends, skips).

    `@@PATH step count total_ns ...` lines after a run's END (rmlx5's
    debugfs `rmlx5/perf` for that run) go into the run's "path" dict as
    {step: {"count": n, "ns": total or None}}.

    A skip (`@@BENCH-SKIP dev=.. test=.. ... reason="..."`) is a case the
    guest script did not run on purpose, e.g. one a tool refuses."""
    meta = {}
    runs = []
    skips = []
    cur = None
    lines = []
    stray = 0
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = ANSI_RE.sub("", raw).replace("\x00", "")
        p = PATH_RE.search(line)
        if p and cur is None and runs:
            runs[-1].setdefault("path", {})[p.group(1)] = {
                "count": int(p.group(2)),
                "ns": None if p.group(3) == "-" else int(p.group(3))}
            continue
        m = MARKER_RE.search(line)
        if not m:
            if cur is not None:
                lines.append(line)
            continue
        before = line[: m.start()]
        what, rest = m.group(1), m.group(2)
        if cur is not None and before.strip():
            lines.append(before)
        if what == "INFO":
            meta.update(parse_kv(rest))
        elif what == "SKIP":
            kv = parse_kv(rest)
            try:
                skips.append({"dev": kv["dev"], "test": kv["test"], "size": int(kv["size"]),
                              "mode": kv["mode"], "list": int(kv["list"]),
                              "qps": int(kv["qps"]), "round": int(kv.get("round", 0)),
                              "reason": kv.get("reason", "not run")})
            except (KeyError, ValueError):
                pass
        elif what == "BEGIN":
            if cur is not None:
                finish(cur, lines, None, f"before the next @@BENCH-BEGIN (log line {lineno})")
            cur = new_run(len(runs), lineno, parse_kv(rest))
            runs.append(cur)
            lines = []
        else:  # END
            if cur is None:
                stray += 1
                continue
            finish(cur, lines, parse_kv(rest))
            cur = None
            lines = []
    if cur is not None:
        finish(cur, lines, None, "before the end of the log (the guest died?)")
    return meta, runs, stray, skips


# --------------------------------------------------------------- combining


def case_key(run):
    return (run["test"], run["size"], run["mode"], run["list"], run["qps"])


def case_sort(key):
    test, size, mode, lst, qps = key
    t = TEST_ORDER.index(test) if test in TEST_ORDER else len(TEST_ORDER)
    mo = MODE_ORDER.index(mode) if mode in MODE_ORDER else len(MODE_ORDER)
    return (t, test, size, mo, mode, lst, qps)


def combine(runs, metric):
    """Median over rounds of (the median within a round of) `metric`."""
    per_round = {}
    for r in runs:
        if r["ok"] and r[metric] is not None:
            per_round.setdefault(r["round"], []).append(r[metric])
    if not per_round:
        return None
    rounds = {k: statistics.median(v) for k, v in sorted(per_round.items())}
    vals = list(rounds.values())
    value = statistics.median(vals)
    spread = (max(vals) - min(vals)) / value if len(vals) > 1 and value else 0.0
    return {"value": value, "rounds": rounds, "spread": spread}


def build_cells(runs, skips=()):
    """{case: {dev: cell}}; a cell is the combination of its runs, or a
    skipped cell (`skipped`: the reason) when the guest ran none on purpose."""
    by_case = {}
    for r in runs:
        if r["key_error"]:  # cannot be placed in the table
            continue
        by_case.setdefault(case_key(r), {}).setdefault(r["dev"], []).append(r)
    cells = {}
    for case, devs in by_case.items():
        kind = kind_of(case[0]) or "bw"
        for dev, rs in devs.items():
            cell = {
                "runs": len(rs),
                "ok": sum(r["ok"] for r in rs),
                "failed": [r for r in rs if not r["ok"]],
            }
            if kind == "lat":
                cell["p50"] = combine(rs, "p50_us")
                cell["p99"] = combine(rs, "p99_us")
                cell["main"] = cell["p50"]
            else:
                cell["rate"] = combine(rs, "rate_mpps")
                cell["main"] = cell["rate"]
                cell["mib_s"] = None
                if cell["rate"]:
                    cell["mib_s"] = cell["rate"]["value"] * 1e6 * case[1] / MB
            cells.setdefault(case, {})[dev] = cell
    for sk in skips:
        case = (sk["test"], sk["size"], sk["mode"], sk["list"], sk["qps"])
        if sk["dev"] in cells.get(case, {}):
            continue
        cells.setdefault(case, {})[sk["dev"]] = {
            "runs": 0, "ok": 0, "failed": [], "main": None, "skipped": sk["reason"],
            "p50": None, "p99": None, "rate": None, "mib_s": None}
    return cells


def ratio(cells, case, other, base=BASE):
    """`base`'s value / other's value of the main metric, or None."""
    a = cells.get(case, {}).get(base)
    b = cells.get(case, {}).get(other)
    if not a or not b or not a["main"] or not b["main"] or not b["main"]["value"]:
        return None
    return a["main"]["value"] / b["main"]["value"]


def groups_of(cases):
    """[(group id, title, [case])] in report order."""
    lat, rate, bw, scal, other = [], [], [], [], []
    scaled = {(t, s, m, l) for (t, s, m, l, q) in cases if kind_of(t) != "lat" and s == 64 and q > 1}
    for c in sorted(cases, key=case_sort):
        test, size, mode, lst, qps = c
        if kind_of(test) == "lat":
            lat.append(c)
            continue
        if size == 64 and (test, size, mode, lst) in scaled:
            scal.append(c)
        if size == 64 and qps == 1:
            rate.append(c)
        elif size == 65536:
            bw.append(c)
        elif size != 64:
            other.append(c)
    scal.sort(key=lambda c: (case_sort(c)[:6], c[4]))
    out = [
        ("lat", "Latency", lat),
        ("rate", "Message rate (64 B)", rate),
        ("bw", "Bandwidth (64 KiB)", bw),
        ("scal", "Scaling (64 B, by QP pairs)", scal),
        ("other", "Message rate (other sizes)", other),
    ]
    return [g for g in out if g[2]]


# --------------------------------------------------------------- rendering


def fmt_num(v):
    """A few significant digits, never scientific notation."""
    if v is None:
        return "—"
    a = abs(v)
    if a >= 1000:
        return f"{v:.0f}"
    if a >= 100:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    if a == 0:
        return "0"
    a = float(f"{a:.3g}")  # 0.09996 -> 0.1, so that it prints as 0.100
    digits = 2 - int(math.floor(math.log10(a)))
    return f"{v:.{digits}f}"


def fmt_size(n):
    if n is None:
        return "?"
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if n >= 1024 and n % 1024 == 0:
        return f"{n >> 10} KiB"
    return f"{n} B"


def case_words(case):
    test, size, mode, lst, qps = case
    return f"{test} {fmt_size(size)} {mode} list {lst} qps {qps}"


def one_line(s, width=100):
    s = " ".join(s.split())
    return s if len(s) <= width else s[: width - 1] + "…"


class Notes:
    """Numbered footnotes, one per (case, device) with failed runs."""

    def __init__(self):
        self.items = []
        self.index = {}

    def skip(self, reason):
        key = ("skip", reason)
        if key not in self.index:
            self.items.append(f"not run: {reason}")
            self.index[key] = len(self.items)
        return f"[{self.index[key]}]"

    def ref(self, case, dev, cell):
        key = (case, dev)
        if key not in self.index:
            bad = cell["failed"]
            head = f"{dev} {case_words(case)}: "
            if cell["ok"]:
                head += f"{len(bad)} of {cell['runs']} runs failed, the value is from the others. "
            else:
                head += f"all {cell['runs']} runs failed. "
            why = {}  # the same reason in several rounds is given once
            for r in bad:
                tail = " | ".join(one_line(t) for t in r["tail"]) or "(no output)"
                if r["server_tail"]:
                    tail += "; the server's: " + " | ".join(one_line(t) for t in r["server_tail"])
                why.setdefault(f"{r['error']}; last lines: {tail}", []).append(str(r["round"]))
            self.items.append(head + " ".join(
                f"Round{'s' if len(rs) > 1 else ''} {', '.join(rs)}: {w}" for w, rs in why.items()))
            self.index[key] = len(self.items)
        return f"[{self.index[key]}]"


def cell_text(gid, case, dev, cell, notes):
    if cell is None:
        return "—"
    if cell.get("skipped"):
        return "n/a " + notes.skip(cell["skipped"])
    ref = " " + notes.ref(case, dev, cell) if cell["failed"] else ""
    if not cell["main"]:
        return "fail" + ref
    main = cell["main"]
    if gid == "lat":
        s = f"{fmt_num(cell['p50']['value'])} / {fmt_num(cell['p99']['value'] if cell['p99'] else None)}"
    elif gid == "bw":
        s = f"{fmt_num(main['value'])} ({fmt_num(cell['mib_s'])} MiB/s)"
    else:
        s = fmt_num(main["value"])
    if main["spread"] > SPREAD_MARK:
        s += f" ±{main['spread'] * 100:.0f}%"
    return s + ref


def ratio_pairs(devices):
    """The (base, other) pairs that get a ratio column: rmlx5 against every
    other device but its perftest run, and the perftest run on rmlx5
    against the kernel's devices."""
    others = [d for d in devices if d not in (BASE, PT)]
    pairs = [(BASE, o) for o in others]
    if PT in devices:
        pairs += [(PT, o) for o in others]
    return pairs


def table_rows(cells, devices, others, notes):
    """[(group title, header rows, rows)]."""
    out = []
    pairs = ratio_pairs(devices)
    for gid, title, cases in groups_of(list(cells)):
        if gid == "lat":
            unit = "p50 / p99 µs"
            rdesc = f"(p50, <1 = {BASE} faster)"
        else:
            unit = "Mpps (MiB/s)" if gid == "bw" else "Mpps"
            rdesc = f"(rate, >1 = {BASE} better)"
        head1 = ["", "", "", "", ""] + list(devices) + [f"{b}/{o}" for b, o in pairs]
        head2 = (["test", "size", "mode", "list", "qps"] + [unit] * len(devices)
                 + [rdesc.replace(BASE, b) for b, _ in pairs])
        rows = []
        for case in cases:
            test, size, mode, lst, qps = case
            row = [test, fmt_size(size), mode, str(lst), str(qps)]
            for dev in devices:
                row.append(cell_text(gid, case, dev, cells[case].get(dev), notes))
            for b, o in pairs:
                r = ratio(cells, case, o, b)
                row.append("—" if r is None else f"{r:.2f}x")
            rows.append(row)
        out.append((title, [head1, head2], rows))
    return out


def render_text(groups):
    out = []
    for title, heads, rows in groups:
        n = len(heads[0])
        width = [max(len(r[i]) for r in heads + rows) for i in range(n)]
        right = lambda i: i in (1, 3, 4) or i >= 5  # noqa: E731
        def line(r):
            cells = [r[i].rjust(width[i]) if right(i) else r[i].ljust(width[i]) for i in range(n)]
            return "  ".join(cells).rstrip()
        out.append(title)
        out.append("=" * len(title))
        out += [line(h) for h in heads]
        out.append("  ".join("-" * w for w in width))
        out += [line(r) for r in rows]
        out.append("")
    return out


def md_escape(s):
    return s.replace("|", "\\|")


def render_md(groups):
    out = []
    for title, heads, rows in groups:
        n = len(heads[0])
        hdr = [" ".join(x for x in (heads[0][i], heads[1][i]) if x) for i in range(n)]
        out.append(f"### {title}")
        out.append("")
        out.append("| " + " | ".join(md_escape(h) for h in hdr) + " |")
        out.append("|" + "|".join("---" if i in (0, 2) else "---:" for i in range(n)) + "|")
        out += ["| " + " | ".join(md_escape(c) for c in r) + " |" for r in rows]
        out.append("")
    return out


def meta_line(meta):
    return ", ".join(f"{k}={v}" for k, v in meta.items()) or "(no @@BENCH-INFO)"


def summary(meta, runs, cells, stray, log):
    devices = [d for d in DEVICES if any(d in c for c in cells.values())]
    devices += sorted({d for c in cells.values() for d in c} - set(devices))
    if BASE not in devices:
        devices.insert(0, BASE)
    others = [d for d in devices if d != BASE]
    notes = Notes()
    groups = table_rows(cells, devices, others, notes)
    rounds = sorted({r["round"] for r in runs if r["round"] is not None})
    failed = [r for r in runs if not r["ok"]]

    head = [
        f"Benchmark report: {os.path.basename(log)}",
        f"Metadata: {meta_line(meta)}",
        f"Rounds: {', '.join(map(str, rounds)) or '—'}; a value is the median over rounds "
        "(the mean of the two for two rounds).",
        "",
    ]
    legend = [
        f"{len(failed)} runs failed (of {len(runs)}).",
        f"±N% = the rounds differ by N% ((max − min) / median of the per-round p50 or rate), "
        f"shown when above {SPREAD_MARK * 100:.0f}%.",
        "— = no run for this device and case in the log (in a ratio: a side is missing or failed).",
        "fail [n] = every run failed; a value with [n] = some runs failed; n/a [n] = not run "
        "(a tool refuses the case); see the notes.",
        "Rates are Mpps (10^6 messages/s), from MsgRate, or for rmlx5-perf (3 decimals) from "
        "its BW average; MiB/s = Mpps × size / 2^20 (the tools' 'MB/sec').",
    ]
    if PT in devices:
        legend.append(f"{PT} = perftest (Debian's, unchanged) on rmlx5's software HCA "
                      "through rdma-core's mlx5 provider and ib_uverbs; rmlx5 = rmlx5-perf "
                      "on rmlx5's own provider and uverbs.")
    if stray:
        legend.append(f"{stray} @@BENCH-END line(s) without a BEGIN were ignored.")
    warned = [r for r in runs if r["warnings"]]
    if warned:
        legend.append(f"{len(warned)} runs have warnings (see raw.json), e.g. "
                      f"run {warned[0]['index']}: {warned[0]['warnings'][0]}.")
    note_lines = [f"[{i}] {t}" for i, t in enumerate(notes.items, 1)]
    # Failed runs that are in no table cell (a BEGIN without dev/test/size).
    homeless = [r for r in failed if r["key_error"]]
    for r in homeless:
        note_lines.append(f"run {r['index']} (log line {r['line']}): {r['error']}")

    text = head + render_text(groups) + legend + path_table(runs)
    if note_lines:
        text += ["", "Notes:"] + note_lines
    md = [f"Metadata: {md_escape(meta_line(meta))}. Rounds: "
          f"{', '.join(map(str, rounds)) or '—'}, combined by the median.", ""]
    md += render_md(groups)
    md += [md_escape(l) + "  " for l in legend]
    if note_lines:
        md += ["", "Notes:", ""] + [f"- {md_escape(n)}" for n in note_lines]
    return "\n".join(text) + "\n", "\n".join(md) + "\n", devices


# ------------------------------------------------------------ path figures

# (step, label): the debugfs rows the breakdown shows, as averages in µs.
PATH_STEPS = [("kick_send", "kick µs"), ("engine", "engine µs"), ("irq_delay", "irq wait µs"),
              ("eq_handler", "EQ hdl µs"), ("bh_delay", "BH wait µs"),
              ("cq_handler", "CQ hdl µs"), ("cq_direct", "CQ in IRQ µs")]


def path_table(runs):
    """Lines of the rmlx5 path breakdown: per case, each step's average
    over all rounds (total ns / count), the number of kicks per message and
    engine ns per budget unit; [] when no run carries @@PATH figures."""
    per_case = {}
    for r in runs:
        if r.get("dev") != BASE or not r.get("path") or r.get("key_error"):
            continue
        acc = per_case.setdefault(case_key(r), {"iters": 0})
        acc["iters"] += (r.get("iters") or 0) * max(r.get("qps") or 1, 1)
        for step, v in r["path"].items():
            a = acc.setdefault(step, [0, 0])
            a[0] += v["count"]
            a[1] += v["ns"] or 0
    if not per_case:
        return []
    head = ["case"] + [lbl for _, lbl in PATH_STEPS] + ["kicks/msg", "engine ns/unit"]
    rows = []
    for case in sorted(per_case, key=case_sort):
        acc = per_case[case]
        row = [case_words(case)]
        for step, _ in PATH_STEPS:
            n, ns = acc.get(step, [0, 0])
            row.append(f"{ns / n / 1000:.1f}" if n else "—")
        kicks = acc.get("kick_send", [0, 0])[0]
        row.append(f"{kicks / acc['iters']:.2f}" if acc["iters"] else "—")
        units = acc.get("engine_units", [0, 0])[0]
        row.append(f"{acc.get('engine', [0, 0])[1] / units:.0f}" if units else "—")
        rows.append(row)
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    fmt = lambda r: "  ".join(c.ljust(w) if i == 0 else c.rjust(w)  # noqa: E731
                              for i, (c, w) in enumerate(zip(r, widths)))
    return (["", f"{BASE} path breakdown (debugfs rmlx5/perf, averages over the runs of a case; "
             "messages = iterations x QPs):", fmt(head)] + [fmt(r) for r in rows])


# ------------------------------------------------------- QP creation (big)

QPC_BEGIN_RE = re.compile(r"@@QPCREATE-BEGIN n=(\d+) round=(\d+)")
QPC_END_RE = re.compile(r"@@QPCREATE-END rc=(\d+)")
QPC_PHASE_RE = re.compile(r"^\s*(create|destroy)\s+([\d.]+) ms in all\s+([\d.]+) us per QP")
QPC_MEM_RE = re.compile(r"memory: (\d+) KiB for (\d+) QPs, (\d+) bytes per QP")


def parse_qp_create(text):
    """The `rmlx5-perf --test qp_create` blocks of the `big` group:
    [{"n", "round", "rc", "create_us", "destroy_us", "create_ms",
    "bytes_per_qp"}] (a figure the block lacks is None)."""
    out = []
    cur = None
    for raw in text.splitlines():
        line = ANSI_RE.sub("", raw).replace("\x00", "")
        m = QPC_BEGIN_RE.search(line)
        if m:
            cur = {"n": int(m.group(1)), "round": int(m.group(2)), "rc": None,
                   "create_us": None, "destroy_us": None, "create_ms": None,
                   "bytes_per_qp": None}
            out.append(cur)
            continue
        if cur is None:
            continue
        m = QPC_END_RE.search(line)
        if m:
            cur["rc"] = int(m.group(1))
            cur = None
            continue
        m = QPC_PHASE_RE.search(line)
        if m:
            cur[f"{m.group(1)}_us"] = float(m.group(3))
            if m.group(1) == "create":
                cur["create_ms"] = float(m.group(2))
            continue
        m = QPC_MEM_RE.search(line)
        if m:
            cur["bytes_per_qp"] = int(m.group(3))
    return out


def qp_create_table(blocks):
    """Lines of the QP creation table: per QP count, the median over
    rounds of each figure; [] without blocks."""
    if not blocks:
        return []
    by_n = {}
    for b in blocks:
        by_n.setdefault(b["n"], []).append(b)
    head = ["QPs", "create ms", "create µs/QP", "destroy µs/QP", "bytes/QP", "runs ok"]
    rows = []
    for n in sorted(by_n):
        ok = [b for b in by_n[n] if b["rc"] == 0 and b["create_us"] is not None]

        def med(k, fmt):
            vals = [b[k] for b in ok if b[k] is not None]
            return fmt.format(statistics.median(vals)) if vals else "—"
        rows.append([f"{n:,}", med("create_ms", "{:.1f}"), med("create_us", "{:.1f}"),
                     med("destroy_us", "{:.1f}"), med("bytes_per_qp", "{:,.0f}"),
                     f"{len(ok)}/{len(by_n[n])}"])
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    fmt = lambda r: "  ".join(c.rjust(w) for c, w in zip(r, widths))  # noqa: E731
    return (["", f"{BASE} QP creation (rmlx5-perf qp_create on rmlx5_0, one process, "
             "contexts of 1,000 QPs; bytes/QP from MemFree; medians over rounds):",
             fmt(head)] + [fmt(r) for r in rows])


# ------------------------------------------------------------------ output


def rounded(v):
    """Combined values without float noise (9 significant digits)."""
    if isinstance(v, float):
        return float(f"{v:.9g}")
    if isinstance(v, dict):
        return {k: rounded(x) for k, x in v.items()}
    return v


CSV_FIELDS = ["dev", "test", "size", "mode", "list", "qps", "round", "iters", "rc", "secs",
              "p50_us", "p99_us", "bw_avg_mb_s", "msg_rate_mpps", "error"]


def write_raw(out, meta, runs, cells, log, stray):
    def cell_json(cell):
        c = {k: rounded(v) for k, v in cell.items() if k not in ("failed", "main")}
        c["failed_runs"] = [r["index"] for r in cell["failed"]]
        return c

    doc = {
        "generated": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "log": os.path.abspath(log),
        "metadata": meta,
        "runs_total": len(runs),
        "runs_failed": sum(not r["ok"] for r in runs),
        "stray_ends": stray,
        "runs": runs,
        "cases": [
            {"test": c[0], "size": c[1], "mode": c[2], "list": c[3], "qps": c[4],
             "devices": {d: cell_json(v) for d, v in cells[c].items()},
             "ratios": {f"{b}/{o}": rounded(ratio(cells, c, o, b))
                        for b, o in ratio_pairs(list(cells[c]))}}
            for c in sorted(cells, key=case_sort)
        ],
    }
    with open(os.path.join(out, "raw.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False, default=str)
        f.write("\n")
    with open(os.path.join(out, "raw.csv"), "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_FIELDS)
        for r in runs:
            row = []
            for k in CSV_FIELDS:
                v = r.get(k)
                if k == "error" and v:
                    v = v + (" :: " + " | ".join(r["tail"]) if r["tail"] else "")
                    if r["server_tail"]:
                        v += " :: server: " + " | ".join(r["server_tail"])
                row.append("" if v is None else v)
            w.writerow(row)


COLOURS = {"rmlx5": "#1f77b4", "rxe": "#ff7f0e", "siw": "#2ca02c"}


def plot(out, meta, cells, devices):
    """Writes latency.png and msgrate.png; returns the files written."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print(f"warning: matplotlib is not available ({e}); no plots", file=sys.stderr)
        return []
    groups = groups_of(list(cells))
    sub = meta_line({k: v for k, v in meta.items() if k in ("kernel", "cpus", "accel", "perftest")})
    written = []

    def label(case, gid):
        test, size, mode, lst, qps = case
        parts = [test.replace("_lat", "").replace("_bw", ""), fmt_size(size).replace(" ", "")]
        parts.append(mode)
        if lst != 1 or gid != "lat":
            parts.append(f"list {lst}")
        if qps != 1 or gid == "scal":
            parts.append(f"{qps} QP")
        return "\n".join([" ".join(parts[:2])] + parts[2:])

    def bars(ax, cases, gids, value_of, err_of=None):
        n = len(devices)
        w = 0.8 / n
        for j, dev in enumerate(devices):
            xs, ys, lo, hi, fails = [], [], [], [], []
            for i, case in enumerate(cases):
                cell = cells[case].get(dev)
                x = i + (j - (n - 1) / 2) * w
                v = value_of(cell) if cell else None
                if v is None:
                    if cell:
                        fails.append((x, "n/a" if cell.get("skipped") else "fail"))
                    continue
                xs.append(x)
                ys.append(v)
                if err_of:
                    e = err_of(cell)
                    lo.append(0)
                    hi.append(max(0.0, e - v) if e is not None else 0)
            ax.bar(xs, ys, w, label=dev, color=COLOURS.get(dev), zorder=2)
            if err_of and xs:
                ax.errorbar(xs, ys, yerr=[lo, hi], fmt="none", ecolor="black",
                            elinewidth=0.8, capsize=2, zorder=3)
            for x, word in fails:
                ax.annotate(word, (x, 0), xycoords=("data", "axes fraction"),
                            xytext=(0, 3), textcoords="offset points", rotation=90,
                            ha="center", va="bottom", fontsize=7,
                            color="grey" if word == "n/a" else "red")
        ax.set_xticks(range(len(cases)))
        ax.set_xticklabels([label(c, g) for c, g in zip(cases, gids)], fontsize=7)
        ax.set_xlim(-0.6, len(cases) - 0.4)
        ax.set_yscale("log")
        ax.grid(axis="y", which="both", alpha=0.3, zorder=0)

    def separators(ax, spans):
        for k, (start, end, title) in enumerate(spans):
            if k:
                ax.axvline(start - 0.5, color="grey", lw=0.8, ls="--")
            ax.text((start + end - 1) / 2, 1.01, title, transform=ax.get_xaxis_transform(),
                    ha="center", va="bottom", fontsize=8)

    lat = [c for g, _, cs in groups if g == "lat" for c in cs]
    if lat:
        fig, ax = plt.subplots(figsize=(max(8, 0.75 * len(lat) + 2), 5))
        bars(ax, lat, ["lat"] * len(lat),
             lambda c: c["p50"]["value"] if c["p50"] else None,
             lambda c: c["p99"]["value"] if c["p99"] else None)
        ax.set_ylabel("latency, µs (bar p50, whisker p99; log)")
        ax.set_title(f"Latency, lower is better\n{sub}", fontsize=10)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "latency.png"), dpi=120)
        plt.close(fig)
        written.append("latency.png")

    order = {"rate": 0, "scal": 1, "bw": 2, "other": 3}
    seen, cases, gids, spans = set(), [], [], []
    short = {"rate": "message rate, 64 B", "scal": "scaling by QP pairs",
             "bw": "bandwidth, 64 KiB", "other": "other sizes"}
    scal = {c for g, _, cs in groups if g == "scal" for c in cs}
    for g, _, cs in sorted((x for x in groups if x[0] != "lat"), key=lambda x: order[x[0]]):
        start = len(cases)
        for c in cs:
            if c in seen or (g == "rate" and c in scal):
                continue
            seen.add(c)
            cases.append(c)
            gids.append(g)
        if len(cases) > start:
            spans.append((start, len(cases), short[g]))
    if cases:
        fig, ax = plt.subplots(figsize=(max(8, 0.75 * len(cases) + 2), 5))
        bars(ax, cases, gids, lambda c: c["rate"]["value"] if c["rate"] else None)
        separators(ax, spans)
        ax.set_ylabel("message rate, Mpps (log)")
        ax.set_title(f"Message rate, higher is better\n{sub}", fontsize=10, pad=18)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "msgrate.png"), dpi=120)
        plt.close(fig)
        written.append("msgrate.png")
    return written


def main(argv=None):
    ap = Usage(description="Report on the @@BENCH blocks of a `make bench` console log.")
    ap.add_argument("--log", required=True, help="the guest console log")
    ap.add_argument("--out", required=True, help="the results directory (created if needed)")
    ap.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    args = ap.parse_args(argv)
    try:
        with open(args.log, "rb") as f:
            text = f.read().decode("utf-8", errors="replace")
    except OSError as e:
        print(f"bench-report: cannot read {args.log}: {e}", file=sys.stderr)
        return 1
    meta, runs, stray, skips = parse_log(text)
    if not runs:
        print(f"bench-report: no @@BENCH-BEGIN blocks in {args.log}", file=sys.stderr)
        tail = [l for l in text.splitlines() if l.strip()][-10:]
        if tail:
            print("its last lines:", file=sys.stderr)
            for l in tail:
                print("  " + l, file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    cells = build_cells(runs, skips)
    txt, md, devices = summary(meta, runs, cells, stray, args.log)
    qpc = qp_create_table(parse_qp_create(text))
    if qpc:
        txt += "\n".join(qpc) + "\n"
        md += "\n" + "\n".join(["```"] + qpc[1:] + ["```"]) + "\n"
    write_raw(args.out, meta, runs, cells, args.log, stray)
    with open(os.path.join(args.out, "summary.txt"), "w", encoding="utf-8") as f:
        f.write(txt)
    with open(os.path.join(args.out, "summary.md"), "w", encoding="utf-8") as f:
        f.write(md)
    pngs = []
    if not args.no_plots:
        try:
            pngs = plot(args.out, meta, cells, devices)
        except Exception as e:  # a plot must not cost the report
            print(f"warning: the plots failed: {e!r}", file=sys.stderr)
    try:
        sys.stdout.reconfigure(errors="replace")
    except (AttributeError, ValueError):
        pass
    sys.stdout.write(txt)
    files = ["raw.json", "raw.csv", "summary.txt", "summary.md"] + pngs
    print(f"\nWrote {', '.join(files)} to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
