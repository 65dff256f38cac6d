"""The daily loop's speed: wall time of `abtest compare`, `gate` and `explain` on a run store, and where it goes.

    .venv/bin/python bench/compare.py [--store examples/idle-governors] [--a menu] [--b ladder] [--repeat 3]

Each command runs as a real CLI process (`python -m abtest.cli ...`, output discarded):
  cached  the per-iteration metrics cache is warm (one unmeasured run first), median of --repeat runs;
  cold    an empty cache directory for every run: ABTEST_METRICS_CACHE=user with ABTEST_CACHE_DIR=<new temp dir>
          (abtest.compare.metrics.cache_file), so every trace is decoded and analysed again; the store is never
          written to in either mode.
Then the cached `compare` runs once in this process under cProfile, and the bench prints its wall time split by
stage (reading the cached metrics, statistics and verdicts, tables, rendering) and the functions with the most
cumulative time. The gate's thresholds file is written to a temporary directory (two metrics the demo store has).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
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


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default="examples/idle-governors")
    ap.add_argument("--a", default="menu")
    ap.add_argument("--b", default="ladder")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--top", type=int, default=15, help="functions listed by cumulative time")
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


if __name__ == "__main__":
    main()
