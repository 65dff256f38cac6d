#!/usr/bin/env python3
"""`abtest analyze` as a user runs it, end to end, against `trace-cmd report` of the same trace, in one run.

    .venv/bin/python bench/analyze_cli.py [--trace FILE] [--repeat 5] [--json OUT] [--baseline ABTEST]

Without --trace it uses the ingest bench's trace (bench/ingest.py: ~/.cache/abtest/bench/hackbench-sched-power.dat,
recorded with hackbench when it holds fewer than --min-events events). The trace's tables are first written to a
fresh cache ($ABTEST_CACHE_DIR, removed at the end: one `abtest analyze` run, not counted); then, in each round,
one after the other (fresh processes, stdout to /dev/null, the rounds interleaved so that a change in the
machine's load falls on every command alike):

- `trace-cmd report -i FILE` (the reference decoder; Debian's trace-cmd);
- `abtest analyze --json FILE` (cached: what issue 38 measures);
- `abtest analyze FILE` (cached, the terminal report, $COLUMNS=120);
- `abtest --version` (interpreter start-up and the CLI's imports: the floor of any command).

Printed per command: wall time (best, median), CPU time of the process and its threads (user + system, best;
less sensitive to other processes than the wall time on a shared machine), peak RSS; then the ratios
`trace-cmd report` / `abtest analyze` of the best wall times, of the median wall times and of the CPU times,
and issue 38's target (cached `abtest analyze` >= 6x faster than `trace-cmd report`). The load average is
printed at the start and the end: the machine is shared, read the spread of the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

ABTEST = (
    [str(ROOT / ".venv" / "bin" / "abtest")]
    if (ROOT / ".venv" / "bin" / "abtest").exists()
    else [sys.executable, "-m", "abtest.cli"]
)
TARGET_RATIO = 6.0  # issue 38: a cached `abtest analyze` of the bench trace >= 6x faster than `trace-cmd report`


def run_once(cmd: list[str], env: dict) -> tuple[float, float, float, int]:
    """(wall s, CPU s = user + system of the child and its threads, peak RSS MB, exit status) of one run, the
    CPU and the peak RSS as GNU time measures them (the child's own: the rusage of a child forked from this
    process would also count pages it inherited before its exec)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf, open(os.devnull, "wb") as null:
        t0 = time.perf_counter()
        p = subprocess.run(
            ["/usr/bin/time", "-o", tf.name, "-f", "%U %S %M", *cmd], stdout=null, stderr=subprocess.PIPE, env=env
        )
        wall = time.perf_counter() - t0
        user, system, rss_kb = tf.read().strip().splitlines()[-1].split()
    if p.returncode:
        print(f"  ! {' '.join(cmd)} exited {p.returncode}: {p.stderr.decode(errors='replace').strip()[-300:]}")
    return wall, float(user) + float(system), int(rss_kb) / 1024, p.returncode


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path)
    ap.add_argument("--min-events", type=int, default=3_300_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", type=Path, help="also write the figures as JSON")
    ap.add_argument(
        "--baseline",
        help="another abtest executable (e.g. a wrapper running an older tree) measured in the same rounds: "
        "`baseline analyze --json` and `baseline --version`, for a before/after under the same load",
    )
    args = ap.parse_args()
    if args.trace is None:
        from ingest import BENCH_TRACE, ensure_bench_trace

        path, _ = ensure_bench_trace(BENCH_TRACE, args.min_events)
    else:
        path = args.trace
    if not shutil.which("trace-cmd") or not Path("/usr/bin/time").exists():
        sys.exit("needs trace-cmd and GNU time (Debian packages trace-cmd, time)")
    print(f"machine: {os.cpu_count()} CPUs, load average {loadavg()} at start")
    print(f"trace: {path} ({path.stat().st_size / 1e6:.1f} MB)")
    cache = Path(tempfile.mkdtemp(prefix="abtest-bench-cache-"))
    env = {**os.environ, "ABTEST_CACHE_DIR": str(cache), "COLUMNS": "120"}
    commands = {
        "trace-cmd report": ["trace-cmd", "report", "-i", str(path)],
        "abtest analyze --json (cached)": [*ABTEST, "analyze", "--json", str(path)],
        "abtest analyze (cached, tables)": [*ABTEST, "analyze", str(path)],
        "abtest --version": [*ABTEST, "--version"],
    }
    if args.baseline:
        commands["baseline analyze --json (cached)"] = [args.baseline, "analyze", "--json", str(path)]
        commands["baseline analyze (cached, tables)"] = [args.baseline, "analyze", str(path)]
        commands["baseline --version"] = [args.baseline, "--version"]
    runs: dict[str, list[tuple[float, float, float]]] = {k: [] for k in commands}
    try:
        wall, cpu, rss, _ = run_once(commands["abtest analyze --json (cached)"], env)
        print(f"first open (decode + cache write + analyses; not counted): {wall:.2f} s, CPU {cpu:.2f} s, {rss:.0f} MB")
        for _ in range(args.repeat):
            for name, cmd in commands.items():
                wall, cpu, rss, status = run_once(cmd, env)
                if status == 0:
                    runs[name].append((wall, cpu, rss))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    print(f"per command, {args.repeat} rounds (wall s best / median; CPU s best; peak RSS MB max):")
    res: dict = {"trace": str(path), "repeat": args.repeat, "commands": {}}
    for name, rs in runs.items():
        if not rs:
            print(f"  {name:34s} failed")
            continue
        walls, cpus, rsss = [r[0] for r in rs], [r[1] for r in rs], [r[2] for r in rs]
        print(
            f"  {name:34s} wall {min(walls):6.3f} / {statistics.median(walls):6.3f}   CPU {min(cpus):6.3f}   "
            f"{max(rsss):5.0f} MB"
        )
        res["commands"][name] = {"wall_s": walls, "cpu_s": cpus, "rss_mb": rsss}
    ref, ana = res["commands"].get("trace-cmd report"), res["commands"].get("abtest analyze --json (cached)")
    if ref and ana:
        best = min(ref["wall_s"]) / min(ana["wall_s"])
        median = statistics.median(ref["wall_s"]) / statistics.median(ana["wall_s"])
        cpu = min(ref["cpu_s"]) / min(ana["cpu_s"])
        res["ratio"] = {"best_wall": best, "median_wall": median, "cpu": cpu}
        print(
            f"trace-cmd report / abtest analyze --json (cached): {best:.2f}x (best wall), {median:.2f}x (median wall), "
            f"{cpu:.2f}x (CPU)"
        )
        print(f"target (issue 38): >= {TARGET_RATIO:g}x  {'met' if best >= TARGET_RATIO else 'NOT met'} (best wall)")
    base = res["commands"].get("baseline analyze --json (cached)")
    if ref and base:
        print(
            f"trace-cmd report / baseline analyze --json (cached): {min(ref['wall_s']) / min(base['wall_s']):.2f}x "
            f"(best wall), {statistics.median(ref['wall_s']) / statistics.median(base['wall_s']):.2f}x (median wall), "
            f"{min(ref['cpu_s']) / min(base['cpu_s']):.2f}x (CPU)"
        )
    print(f"load average {loadavg()} at the end")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
