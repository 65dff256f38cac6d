#!/usr/bin/env python3
"""trace.dat ingestion benchmark: abtest's decoder vs `trace-cmd report`, measured in the same run.

    .venv/bin/python bench/ingest.py [--trace FILE] [--min-events 3300000] [--repeat 3] [--no-shared]

Without --trace it reuses ~/.cache/abtest/bench/hackbench-sched-power.dat when it holds >= --min-events
events (default 3.3 M: the brief states its targets on a 27 MB / 3.3 M-event trace.dat), else records one
here: tracefs (holding /tmp/abtest-tracefs.lock), sched/* and power/* events,
a large per-CPU buffer, hackbench (rt-tests), then `trace-cmd extract -o`. tracefs state is restored.

Measured (wall clock, same machine, same run):
- trace-cmd report: `trace-cmd report -i FILE > /dev/null`, events/s = events / seconds (best of --repeat);
- abtest decode: `read_trace(FILE)` in-process (canonical polars tables, no cache), best of --repeat;
- abtest convert: decode + one parquet file per table + meta.json (what `abtest trace convert` does);
- abtest convert, first in a fresh process: one convert per new interpreter (all imports done before
  the clock starts), one process per round (its ratio also paired with that round's trace-cmd report);
  the in-process rounds above reuse the memory an earlier decode freed (native/src/alloc_reuse.rs), a lone
  `abtest trace convert` cannot;
- a lone CLI run, one per round: the installed `abtest trace convert FILE -o DIR` end to end (interpreter
  start-up, imports, convert, exit: what a user waits for), and `abtest --version` (interpreter start-up +
  `import abtest`, which imports polars, pyarrow and numpy, + exit) as the start-up it pays before any
  convert work; the difference is the CLI convert without interpreter start-up;
- the three run back to back in each of --repeat rounds (a machine whose speed drifts slows both sides
  alike); besides the best-of ratios, the median and range of the per-round convert ratios are printed,
  in wall time and in CPU time (user+sys of all threads: trace-cmd report runs on one, convert on two);
- peak RSS of a fresh process that decodes the file (VmHWM) vs the in-memory size of the resulting
  tables (sum of DataFrame.estimated_size()); the interpreter + imports baseline is shown separately;
- write only (benchmark trace): the decoded tables written once per repeat into a fresh directory by
  abtest's parquet writer (`write_parquet_tables`, what convert uses) and by polars'
  `write_parquet(compression="lz4", statistics=False)` (the writer convert used before), wall and CPU
  time (best of --repeat) and the total size of the files.
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TRACEFS = Path("/sys/kernel/tracing")
LOCK = "/tmp/abtest-tracefs.lock"
CACHE = Path.home() / ".cache" / "abtest" / "bench"
BENCH_TRACE = CACHE / "hackbench-sched-power.dat"
SHARED = ROOT.parent / "shared" / "traces"


def _w(rel: str, value: str) -> None:
    (TRACEFS / rel).write_text(value)


def record(out: Path, hackbench_loops: int, buffer_kb: int) -> None:
    """Record sched/* + power/* during hackbench through tracefs, then `trace-cmd extract -o out`."""
    if not (TRACEFS / "events").is_dir():
        subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], check=True)
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        saved = {k: (TRACEFS / k).read_text() for k in ("tracing_on", "buffer_size_kb", "set_event")}
        try:
            _w("tracing_on", "0")
            _w("set_event", "")
            _w("trace", "")
            _w("buffer_size_kb", str(buffer_kb))
            _w("events/sched/enable", "1")
            _w("events/power/enable", "1")
            _w("tracing_on", "1")
            subprocess.run(["hackbench", "-g", "4", "-l", str(hackbench_loops)], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _w("tracing_on", "0")
            out.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["trace-cmd", "extract", "-o", str(out)], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        finally:
            _w("tracing_on", "0")
            _w("events/sched/enable", "0")
            _w("events/power/enable", "0")
            _w("set_event", "")
            for line in saved["set_event"].split():
                try:
                    with open(TRACEFS / "set_event", "a") as f:
                        f.write(line + "\n")
                except OSError:
                    pass
            _w("trace", "")
            _w("buffer_size_kb", saved["buffer_size_kb"].split()[0])
            _w("tracing_on", saved["tracing_on"].strip())


def ensure_bench_trace(path: Path = BENCH_TRACE, min_events: int = 3_300_000, loops: int = 2500,
                       buffer_kb: int = 196608) -> tuple[Path, int]:
    """(path, events) of a trace.dat holding >= min_events, recorded with hackbench when `path` holds fewer.

    Each recording goes to a temporary file renamed over `path` once `trace-cmd extract` has finished, so an
    interrupted recording never leaves a partial trace behind; loops grow until the count is reached (in
    proportion to the events missing, +10 %: a hackbench loop gave ~200 events here on 2026-11-22, ~1,000
    on 2026-11-21, so the count per loop is measured, not assumed).
    """
    n = count_events(path) if path.exists() else 0
    while n < min_events:
        print(f"recording {path} (hackbench -g 4 -l {loops}; have {n} events) ...", file=sys.stderr)
        tmp = path.with_name(path.name + ".recording")
        try:
            record(tmp, loops, buffer_kb)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        n = count_events(path)
        loops = int(loops * 1.1 * max(1.0, min_events / max(n, 1)))
    return path, n


def count_events(path: Path) -> int:
    from abtest.trace.readers import read_trace
    return sum(read_trace(path).meta["events"].values())


def _cpu_s(who) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def trace_cmd_once(path: Path) -> tuple[float, float]:
    """(wall s, CPU s) of one `trace-cmd report -i path > /dev/null`."""
    c0 = _cpu_s(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with open(os.devnull, "wb") as null:
        subprocess.run(["trace-cmd", "report", "-i", str(path)], stdout=null, stderr=subprocess.DEVNULL,
                       check=True)
    return time.perf_counter() - t0, _cpu_s(resource.RUSAGE_CHILDREN) - c0


def trace_cmd_event_count(path: Path) -> int:
    """Event lines of `trace-cmd report` (everything but the cpus= header line)."""
    p = subprocess.Popen(["trace-cmd", "report", "-i", str(path)], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL)
    n = 0
    header = 0
    first = True
    while chunk := p.stdout.read(1 << 20):
        if first:
            header = 1 if chunk.startswith(b"cpus=") else 0
            first = False
        n += chunk.count(b"\n")
    p.wait()
    return n - header


def decode_once(path: Path) -> tuple[float, float, int]:
    """(wall s, CPU s of all threads, events) of one in-process `read_trace(path)` (no cache)."""
    from abtest.trace.readers import read_trace
    c0 = _cpu_s(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    d = read_trace(path)
    wall, cpu = time.perf_counter() - t0, _cpu_s(resource.RUSAGE_SELF) - c0
    return wall, cpu, sum(d.meta["events"].values())


def convert_once(path: Path) -> tuple[float, float]:
    """(wall s, CPU s of all threads) of one in-process `abtest trace convert` (`abtest.trace.convert.convert(path,
    fresh dir)`, what the command runs: tables canonicalize() leaves unchanged go from the decoder's arrays
    to parquet)."""
    from abtest.trace.convert import convert
    out = Path(tempfile.mkdtemp(prefix="abtest-bench-"))
    try:
        c0 = _cpu_s(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        convert(path, out / "tables")
        return time.perf_counter() - t0, _cpu_s(resource.RUSAGE_SELF) - c0
    finally:
        shutil.rmtree(out, ignore_errors=True)


ABTEST_CLI = ([str(ROOT / ".venv" / "bin" / "abtest")] if (ROOT / ".venv" / "bin" / "abtest").exists()
              else [sys.executable, "-m", "abtest.cli"])


def measure_cli(path: Path) -> tuple[float, float]:
    """(wall s of a lone `abtest trace convert path -o DIR` process, wall s of a lone `abtest --version`)."""
    out = Path(tempfile.mkdtemp(prefix="abtest-bench-cli-"))
    try:
        t0 = time.perf_counter()
        subprocess.run(ABTEST_CLI + ["trace", "convert", str(path), "-o", str(out / "tables")], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cli = time.perf_counter() - t0
    finally:
        shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    subprocess.run(ABTEST_CLI + ["--version"], check=True, stdout=subprocess.DEVNULL)
    return cli, time.perf_counter() - t0


def time_rounds(path: Path, repeat: int, first_convert: bool = False) -> dict:
    """`repeat` rounds of trace-cmd report, abtest decode and abtest convert run back to back, so that a
    machine whose speed drifts from minute to minute slows both sides alike. Best of the rounds for each,
    and the per-round convert ratios (trace-cmd wall / convert wall). first_convert: each round also
    times the first convert of a fresh process (`measure_first_convert`), paired with that round's
    trace-cmd report, and a lone CLI run (`measure_cli`)."""
    decode_once(path)  # warm the page cache and imports
    rounds, firsts, clis = [], [], []
    for _ in range(repeat):
        tc, tc_cpu = trace_cmd_once(path)
        dec, dec_cpu, n = decode_once(path)
        conv, conv_cpu = convert_once(path)
        rounds.append((tc, tc_cpu, dec, dec_cpu, conv, conv_cpu))
        if first_convert:
            firsts.append(measure_first_convert(path, 1)[0])
            clis.append(measure_cli(path))
    best = [min(r[k] for r in rounds) for k in range(6)]
    out = {"events": n, "trace_cmd_s": best[0], "trace_cmd_cpu_s": best[1], "abtest_decode_s": best[2],
           "abtest_decode_cpu_s": best[3], "abtest_convert_s": best[4], "abtest_convert_cpu_s": best[5],
           "convert_x_per_round": [r[0] / r[4] for r in rounds],
           "convert_cpu_x_per_round": [r[1] / r[5] for r in rounds]}
    if first_convert:
        out["first_convert_s"] = firsts
        out["first_convert_x_per_round"] = [r[0] / f for r, f in zip(rounds, firsts)]
        out["cli_convert_s"] = [c for c, _ in clis]
        out["cli_startup_s"] = [v for _, v in clis]
    return out


def time_write(path: Path, repeat: int) -> dict:
    """Write-only stage on the decoded tables of `path`: abtest's parquet writer vs polars' (best of
    `repeat`, each into a fresh directory)."""
    from abtest.trace.parquet_write import write_parquet_tables
    from abtest.trace.readers import read_trace
    tables = read_trace(path).tables

    def polars_write(out: Path) -> None:
        for name, df in tables.items():
            df.write_parquet(out / f"{name}.parquet", compression="lz4", statistics=False)

    res = {}
    for label, fn in (("polars", polars_write), ("abtest", lambda out: write_parquet_tables(tables, out))):
        best = best_cpu = float("inf")
        size = 0
        for _ in range(repeat):
            out = Path(tempfile.mkdtemp(prefix="abtest-bench-write-"))
            try:
                c0 = _cpu_s(resource.RUSAGE_SELF)
                t0 = time.perf_counter()
                fn(out)
                best = min(best, time.perf_counter() - t0)
                best_cpu = min(best_cpu, _cpu_s(resource.RUSAGE_SELF) - c0)
                size = sum(p.stat().st_size for p in out.glob("*.parquet"))
            finally:
                shutil.rmtree(out, ignore_errors=True)
        res[label] = {"wall_s": best, "cpu_s": best_cpu, "bytes": size}
    res["tables"] = len(tables)
    res["rows"] = sum(len(df) for df in tables.values())
    res["tables_bytes"] = sum(df.estimated_size() for df in tables.values())
    return res


def print_write(w: dict) -> None:
    """The write-only stage: one line per writer and the ratios."""
    print(f"\nwrite only ({w['tables']} tables, {w['rows']:,} rows, {w['tables_bytes'] / 2**20:.1f} MB in memory; "
          f"best of the repeats):")
    for label, name in (("abtest", "abtest parquet writer"), ("polars", "polars write_parquet lz4")):
        r = w[label]
        print(f"  {name:<26} wall {r['wall_s'] * 1e3:7.1f} ms  CPU {r['cpu_s'] * 1e3:7.1f} ms  "
              f"files {r['bytes'] / 1e6:6.1f} MB")
    a, p = w["abtest"], w["polars"]
    print(f"  abtest vs polars: {p['wall_s'] / a['wall_s']:.1f}x faster (wall), {p['cpu_s'] / a['cpu_s']:.1f}x less CPU, "
          f"files {a['bytes'] / p['bytes']:.2f}x the size")


_RSS_CHILD = r"""
import json, sys
sys.path.insert(0, {root!r})


def hwm_kb():
    # VmHWM: peak RSS of this process image (ru_maxrss would include the forking parent's RSS)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])


import polars, numpy, pyarrow, zstandard
from abtest.trace.readers import read_trace
import abtest._native
base = hwm_kb()
d = read_trace({path!r})
size = sum(df.estimated_size() for df in d.tables.values())
print(json.dumps({{"base_kb": base, "peak_kb": hwm_kb(), "tables_bytes": size}}))
"""


_FIRST_CONVERT_CHILD = r"""
import json, shutil, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, {root!r})
import polars, numpy, pyarrow, zstandard
import numpy.ma, pyarrow.compute  # polars imports these on first use (~60 ms): import time, not convert time
from abtest.trace.convert import convert
import abtest._native, abtest.trace.readers, abtest.trace.tracedat, abtest.trace.parquet_write
out = Path(tempfile.mkdtemp(prefix="abtest-bench-"))
try:
    t0 = time.perf_counter()
    convert({path!r}, out / "tables")
    print(json.dumps({{"wall_s": time.perf_counter() - t0}}))
finally:
    shutil.rmtree(out, ignore_errors=True)
"""


def measure_first_convert(path: Path, repeat: int) -> list[float]:
    """Wall s of the first convert in each of `repeat` fresh processes (every module the convert uses
    imported before the clock starts, polars' lazily imported numpy.ma and pyarrow.compute included):
    what one `abtest trace convert` run costs after interpreter start-up, with no memory of an earlier
    decode to reuse (native/src/alloc_reuse.rs) and polars' first-use set-up (categories, thread pool)."""
    code = _FIRST_CONVERT_CHILD.format(root=str(ROOT), path=str(path))
    walls = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        walls.append(json.loads(out.strip().splitlines()[-1])["wall_s"])
    return walls


def measure_rss(path: Path) -> dict:
    code = _RSS_CHILD.format(root=str(ROOT), path=str(path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def bench_file(path: Path, repeat: int, check_count: bool, first_convert: bool = False) -> dict:
    row = {"file": str(path), "size_mb": path.stat().st_size / 1e6, **time_rounds(path, repeat, first_convert),
           "load_avg_1min": os.getloadavg()[0]}
    if check_count:
        row["trace_cmd_events"] = trace_cmd_event_count(path)
    row.update(measure_rss(path))
    return row


def print_table(rows: list[dict]) -> None:
    """Wall-clock rates (Mev/s = million events per second) and ratios vs trace-cmd report; the CPU-time
    ratio (user+sys, all threads) is less sensitive to other load on the machine."""
    hdr = (f"{'file':<40} {'MB':>5} {'events':>8} {'tc Mev/s':>8} {'decode':>7} {'x':>5} {'convert':>7} {'x':>5} "
           f"{'cpu x':>5} {'peakMB':>6} {'tabMB':>6} {'RSS/tab':>7} {'(-base)':>7} {'load':>4}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        n = r["events"]
        tc, dec, conv = n / r["trace_cmd_s"] / 1e6, n / r["abtest_decode_s"] / 1e6, n / r["abtest_convert_s"] / 1e6
        cpu_x = r["trace_cmd_cpu_s"] / max(r["abtest_decode_cpu_s"], 1e-9)
        tab = max(1, r["tables_bytes"])
        print(f"{r['file'][-40:]:<40} {r['size_mb']:>5.1f} {n:>8} {tc:>8.3f} {dec:>7.2f} {dec / tc:>5.1f} "
              f"{conv:>7.2f} {conv / tc:>5.1f} {cpu_x:>5.1f} {r['peak_kb'] / 1024:>6.0f} {tab / 2**20:>6.1f} "
              f"{r['peak_kb'] * 1024 / tab:>7.2f} {(r['peak_kb'] - r['base_kb']) * 1024 / tab:>7.2f} "
              f"{r['load_avg_1min']:>4.1f}")
        if "trace_cmd_events" in r and r["trace_cmd_events"] != n:
            print(f"   !! event count differs: trace-cmd report printed {r['trace_cmd_events']} events")
    print("decode/convert: abtest Mev/s (wall); x: ratio to trace-cmd report; cpu x: trace-cmd CPU s / abtest CPU s;"
          " RSS/tab: peak RSS / tables size; (-base): same without the interpreter+imports baseline")


CONVERT_TARGET_X = 30.0  # `abtest trace convert` events/s vs `trace-cmd report` events/s
RSS_TARGET_X = 3.0  # peak RSS of a decode vs the in-memory size of the resulting tables


def print_targets(r: dict) -> None:
    """The two targets of the benchmark trace (first row), stated plainly with met / NOT met."""
    n = r["events"]
    convert_x = (n / r["abtest_convert_s"]) / (n / r["trace_cmd_s"])
    rss_x = r["peak_kb"] * 1024 / max(1, r["tables_bytes"])
    rss_x_nobase = (r["peak_kb"] - r["base_kb"]) * 1024 / max(1, r["tables_bytes"])
    print(f"\nbenchmark trace: {r['file']} ({n:,} events, load avg {r['load_avg_1min']:.1f})")
    print(f"  convert speed: abtest trace convert {r['abtest_convert_s']:.3f} s vs trace-cmd report "
          f"{r['trace_cmd_s']:.3f} s -> {convert_x:.1f}x (target >= {CONVERT_TARGET_X:.0f}x in a process that "
          f"has converted before: {'met' if convert_x >= CONVERT_TARGET_X else 'NOT met'})")
    per_round = sorted(r["convert_x_per_round"])
    print(f"  per round (trace-cmd report and convert back to back, {len(per_round)} rounds): median "
          f"{statistics.median(per_round):.1f}x, range {per_round[0]:.1f}-{per_round[-1]:.1f}x")
    if "convert_cpu_x_per_round" in r:
        cpu_rounds = sorted(r["convert_cpu_x_per_round"])
        print(f"  CPU time (user+sys, all threads; convert uses 2 threads): trace-cmd report "
              f"{r['trace_cmd_cpu_s']:.3f} s vs convert {r['abtest_convert_cpu_s']:.3f} s, best of the rounds -> "
              f"{r['trace_cmd_cpu_s'] / r['abtest_convert_cpu_s']:.1f}x; per round median "
              f"{statistics.median(cpu_rounds):.1f}x, range {cpu_rounds[0]:.1f}-{cpu_rounds[-1]:.1f}x")
    if "first_convert_s" in r:
        first = sorted(r["first_convert_s"])
        first_x = r["trace_cmd_s"] / first[0]
        print(f"  first convert of a fresh process ({len(first)} processes, imports excluded, no memory to reuse): "
              f"best {first[0]:.3f} s -> {first_x:.1f}x, median "
              f"{statistics.median(first):.3f} s -> {r['trace_cmd_s'] / statistics.median(first):.1f}x "
              f"(vs the best trace-cmd report; what a lone `abtest trace convert` gets: target "
              f"{'met' if first_x >= CONVERT_TARGET_X else 'NOT met'})")
    if "first_convert_x_per_round" in r:
        fr = sorted(r["first_convert_x_per_round"])
        print(f"    paired with each round's trace-cmd report: median {statistics.median(fr):.1f}x, range "
              f"{fr[0]:.1f}-{fr[-1]:.1f}x")
    if "cli_convert_s" in r:
        cli, start = sorted(r["cli_convert_s"]), sorted(r["cli_startup_s"])
        net = sorted(c - v for c, v in zip(r["cli_convert_s"], r["cli_startup_s"]))
        tc = r["trace_cmd_s"]
        print(f"  lone CLI run ({len(cli)} runs): `abtest trace convert` end to end best {cli[0]:.3f} s, median "
              f"{statistics.median(cli):.3f} s -> {tc / cli[0]:.1f}x / {tc / statistics.median(cli):.1f}x; of which "
              f"start-up (`abtest --version`: interpreter, imports, exit) best {start[0]:.3f} s, median "
              f"{statistics.median(start):.3f} s; without it best {net[0]:.3f} s, median {statistics.median(net):.3f} s "
              f"-> {tc / net[0]:.1f}x / {tc / statistics.median(net):.1f}x")
    print(f"  peak RSS: {r['peak_kb'] / 1024:.0f} MB vs tables {r['tables_bytes'] / 2**20:.1f} MB -> {rss_x:.2f}x "
          f"(target <= {RSS_TARGET_X:.0f}x: {'met' if rss_x <= RSS_TARGET_X else 'NOT met'}; "
          f"{rss_x_nobase:.2f}x without the {r['base_kb'] / 1024:.0f} MB interpreter+imports baseline)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", type=Path, help="benchmark this trace.dat instead of the recorded one")
    ap.add_argument("--min-events", type=int, default=3_300_000,
                    help="events the recorded benchmark trace must hold (>= 2 M; the brief's trace: 3.3 M)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--hackbench-loops", type=int, default=2500)
    ap.add_argument("--buffer-kb", type=int, default=196608, help="per-CPU ring buffer size for recording")
    ap.add_argument("--no-shared", action="store_true", help="skip the shared reference traces")
    ap.add_argument("--json", type=Path, help="also write the measurements here")
    args = ap.parse_args()
    path = args.trace
    if path is None:
        path, n = ensure_bench_trace(BENCH_TRACE, args.min_events, args.hackbench_loops, args.buffer_kb)
        print(f"benchmark trace: {path} ({n} events)", file=sys.stderr)
    rows = [bench_file(path, args.repeat, check_count=True, first_convert=True)]
    rows[0]["write"] = time_write(path, args.repeat)
    if not args.no_shared:
        for p in sorted(SHARED.rglob("*.dat")):
            rows.append(bench_file(p, args.repeat, check_count=False))
    print_table(rows)
    print_write(rows[0]["write"])
    print_targets(rows[0])
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
