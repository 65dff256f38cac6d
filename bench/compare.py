"""The daily loop's speed: wall time of `abtest compare`, `gate` and `explain` on a run store, and where it goes.

    .venv/bin/python bench/compare.py [--store examples/idle-governors] [--a menu] [--b ladder] [--repeat 3]
                                      [--bench-iterations 10 | --no-bench-store]

Each command runs as a real CLI process (`python -m abtest.cli ...`, output discarded):
  cached  the per-iteration metrics cache is warm (one unmeasured run first), median of --repeat runs;
  cold    an empty cache directory for every run: ABTEST_METRICS_CACHE=user with ABTEST_CACHE_DIR=<new temp dir>
          (abtest.compare.metrics.cache_file), so every trace is decoded and analysed again; the store is never
          written to in either mode.
Then the cached `compare` runs once in this process under cProfile, and the bench prints its wall time split by
stage (reading the cached metrics, statistics and verdicts, tables, rendering) and the functions with the most
cumulative time. The gate's thresholds file is written to a temporary directory (two metrics the demo store has).

Then the same three commands on a generated store of bench-size traces: 2 labels x --bench-iterations iterations,
each a symlink to the >= 3 M-event bench trace.dat (bench/ingest.py; recorded on this machine when missing). A
comparison decodes every iteration's file again (its values are cached, its tables are not), so the 20 links cost
what 20 files would, less the page cache. Where a cold iteration's time goes is printed from one iteration
analysed in this process: the decode (only the fields the analyses read) and each analysis.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
THRESHOLDS = """alpha = 0.05
[metrics."latency.gmean_us"]
max_regression_pct = 5.0
[metrics."idle.too_deep_pct"]
max_regression_pct = 5.0
"""
# stage -> functions (file suffix, function name) whose cumulative time is that stage's (profiled compare)
STAGES = {
    "read cached metrics (analyse_iterations)": [("compare/parallel.py", "analyse_iterations")],
    "statistics + verdicts (decide)": [("compare/verdict.py", "decide")],
    "bootstrap CIs": [("compare/stats.py", "bootstrap_delta_ci_pct")],
    "describe (mean, CI of each side)": [("compare/stats.py", "describe")],
    "seed tables": [("compare/tables.py", "seed_tables")],
    "render (terminal report)": [("report/terminal.py", "print_comparison")],
}


BENCH_THRESHOLDS = """alpha = 0.05
[metrics."latency.gmean_us"]
max_regression_pct = 5.0
"""


def _env(cache_dir: str) -> dict:
    return {**os.environ, "ABTEST_METRICS_CACHE": "user", "ABTEST_CACHE_DIR": cache_dir, "COLUMNS": "120"}


def commands(store: str, a: str, b: str, thresholds: str) -> dict[str, list[str]]:
    """The CLI argument lists timed, by name."""
    common = [a, b, "--store", store]
    return {
        "compare": ["compare", *common],
        "gate": ["gate", *common, "--thresholds", thresholds],
        "explain": ["explain", *common],
    }


def run_once(args: list[str], cache_dir: str) -> float:
    """Wall seconds of one CLI process (exit codes 0-2 are results, anything else is a failure)."""
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "abtest.cli", *args],
        env=_env(cache_dir),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - t0
    if p.returncode not in (0, 1, 2):
        raise SystemExit(f"abtest {' '.join(args)} failed ({p.returncode}): {p.stderr[-2000:]}")
    return wall


def time_command(args: list[str], warm_dir: str, repeat: int) -> tuple[float, float]:
    """(median cached wall s, median cold wall s) over `repeat` runs each."""
    run_once(args, warm_dir)  # warm the cache
    cached = [run_once(args, warm_dir) for _ in range(repeat)]
    cold = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="abtest-cold-") as d:
            cold.append(run_once(args, d))
    return statistics.median(cached), statistics.median(cold)


def profile_compare(args: list[str], cache_dir: str) -> tuple[float, pstats.Stats]:
    """Wall seconds and cProfile statistics of one cached `compare` in this process (output discarded)."""
    os.environ.update(_env(cache_dir))
    from abtest.cli import run

    prof = cProfile.Profile()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        prof.runcall(run, args)
    wall = time.perf_counter() - t0
    return wall, pstats.Stats(prof)


def stage_seconds(st: pstats.Stats) -> dict[str, float]:
    """Cumulative seconds per STAGES entry (recursive calls counted once)."""
    out = {}
    for stage, funcs in STAGES.items():
        out[stage] = sum(
            ct
            for (fname, _, name), (_, _, _, ct, _) in st.stats.items()
            if any(fname.endswith(suffix) and name == fn for suffix, fn in funcs)
        )
    return out


def make_bench_store(root: Path, trace: Path, iterations: int) -> Path:
    """STORE/{A,B}/hackbench/<i>/trace.dat -> `trace`, with meta.json and .complete."""
    store = root / "bench-store"
    for label in ("A", "B"):
        for i in range(iterations):
            d = store / label / "hackbench" / str(i)
            d.mkdir(parents=True)
            (d / "trace.dat").symlink_to(trace)
            (d / "meta.json").write_text(json.dumps({"kernel": {"release": label}}))
            (d / ".complete").touch()
    return store


def iteration_stages(trace: Path) -> dict[str, float]:
    """Wall seconds of one cold iteration's parts in this process (the second of two runs: imports and page
    cache warm): the decode as a comparison does it, then each trace analysis of the registry."""
    from abtest.analysis import registry
    from abtest.session import Trace
    from abtest.trace.errors import AnalysisNotApplicable, MissingEventsError
    from abtest.trace.readers import read_trace

    out: dict[str, float] = {}
    for _ in range(2):
        t0 = time.perf_counter()
        data = read_trace(trace, fields_of=registry.raw_tables_read())
        out["decode (fields the analyses read)"] = time.perf_counter() - t0
        t = Trace(trace, _data=data)
        for a in registry.TRACE_ANALYSES:
            t0 = time.perf_counter()
            with contextlib.suppress(MissingEventsError, AnalysisNotApplicable):
                registry.compute(a, t, registry.MetricOptions())
            out[a.name] = time.perf_counter() - t0
    return out


def bench_store(tmp: Path, iterations: int, repeat: int) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    from ingest import BENCH_TRACE, ensure_bench_trace

    trace, events = ensure_bench_trace(BENCH_TRACE, 3_000_000)
    store = make_bench_store(tmp, trace, iterations)
    th = tmp / "bench-thresholds.toml"
    th.write_text(BENCH_THRESHOLDS)
    print(
        f"\nbench-size store: 2 x {iterations} iterations of {trace.name} ({events / 1e6:.2f} M events); wall "
        f"seconds, median of {repeat} CLI processes (--jobs {os.cpu_count()})"
    )
    print(f"{'command':<10} {'cached s':>9} {'cold s':>9}")
    for name, cli_args in commands(str(store), "A", "B", str(th)).items():
        cached, cold = time_command(cli_args, str(tmp / "bench-cache"), repeat)
        print(f"{name:<10} {cached:>9.2f} {cold:>9.2f}")
    stages = iteration_stages(trace)
    total = sum(stages.values())
    print(f"\none cold iteration in-process: {total:.2f} s")
    for stage, s in sorted(stages.items(), key=lambda kv: -kv[1]):
        if s >= 0.005:
            print(f"  {stage:<45} {s:6.3f} s {100 * s / total:5.1f} %")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default="examples/idle-governors")
    ap.add_argument("--a", default="menu")
    ap.add_argument("--b", default="ladder")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--top", type=int, default=15, help="functions listed by cumulative time")
    ap.add_argument("--bench-iterations", type=int, default=10, help="iterations per label of the bench-size store")
    ap.add_argument("--no-bench-store", action="store_true", help="the demo store only")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="abtest-bench-") as tmp:
        th = Path(tmp) / "thresholds.toml"
        th.write_text(THRESHOLDS)
        warm = str(Path(tmp) / "cache")
        cmds = commands(args.store, args.a, args.b, str(th))
        print(
            f"store {args.store}: {args.b} vs {args.a}; wall seconds, median of {args.repeat} CLI processes; "
            f"{os.cpu_count()} CPUs"
        )
        print(f"{'command':<10} {'cached s':>9} {'cold s':>9}")
        for name, cli_args in cmds.items():
            cached, cold = time_command(cli_args, warm, args.repeat)
            print(f"{name:<10} {cached:>9.2f} {cold:>9.2f}")
        wall, st = profile_compare(cmds["compare"], warm)
    print(f"\ncached compare in-process under cProfile: {wall:.2f} s (imports included; profiling adds overhead)")
    for stage, s in stage_seconds(st).items():
        print(f"  {stage:<45} {s:6.3f} s {100 * s / wall:5.1f} %")
    print(f"\ntop {args.top} functions by cumulative time:")
    buf = io.StringIO()
    st.stream = buf
    st.sort_stats("cumulative").print_stats(args.top)
    lines = buf.getvalue().splitlines()
    start = next(i for i, x in enumerate(lines) if x.lstrip().startswith("ncalls"))
    print("\n".join(lines[start : start + args.top + 1]))
    if not args.no_bench_store:
        with tempfile.TemporaryDirectory(prefix="abtest-bench-") as tmp:
            bench_store(Path(tmp), args.bench_iterations, args.repeat)


if __name__ == "__main__":
    main()
