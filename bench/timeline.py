#!/usr/bin/env python3
"""Timeline benchmark: `abtest timeline` on the bench trace (3.3 M events), time and size, measured in one run.

    .venv/bin/python bench/timeline.py [--trace FILE] [--repeat 3] [--cold]

Without --trace it uses the ingest bench's trace (bench/ingest.py: ~/.cache/abtest/bench/hackbench-sched-power.dat,
recorded with hackbench when missing). Printed:

- the `abtest timeline TRACE -o OUT` command, wall time and peak RSS, with the parquet cache warm (best and median
  of --repeat runs); with --cold also one run with an empty cache (decode included);
- the output's size and its parts: the scheduling data as perfetto ftrace bundles (compact sched_switch and
  sched_waking, cpu_idle, cpu_frequency, ...: what a perfetto recording of those events holds, the input's perfetto
  equivalent for what the timeline shows) and abtest's derived tracks; the ratio output / perfetto equivalent,
  and the input trace.dat's size beside it;
- the derived counter samples before and after thinning (a sample only when the written value changes).
Targets (issue 42): written in < 10 s; < 2x the size of the input's perfetto equivalent.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

ABTEST = str(ROOT / ".venv" / "bin" / "abtest")


def run_cli(trace: Path, out: Path, env: dict | None = None) -> tuple[float, float, float]:
    """(wall s, CPU s (user + system), peak RSS MB) of one `abtest timeline` process. On a shared machine the CPU
    time is the steadier figure: the wall time grows with the other processes' load."""
    t0 = time.perf_counter()
    r = subprocess.run(
        ["/usr/bin/time", "-f", "%M %U %S", ABTEST, "timeline", str(trace), "-o", str(out)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"abtest timeline failed:\n{r.stdout}\n{r.stderr}")
    rss, user, system = r.stderr.strip().splitlines()[-1].split()
    return wall, float(user) + float(system), int(rss) / 1024


def parts(trace: Path) -> dict:
    """Sizes of the two parts and the derived samples before / after thinning (in process)."""
    import polars as pl

    from abtest import Trace
    from abtest.timeline import ftrace
    from abtest.timeline.builder import derived_tracks, encode_derived

    t = Trace(trace)
    tables = {n: t.df(n) for n in ftrace.WRITTEN_TABLES if n in t.tables}
    t0 = time.perf_counter()
    sched, rows = ftrace.ftrace_packets(tables, t.meta)
    t_sched = time.perf_counter() - t0
    t0 = time.perf_counter()
    d = derived_tracks(t, scope=str(trace), title="bench")
    body, counts = encode_derived([d])
    t_derived = time.perf_counter() - t0
    sig = t.load_tracking.df_cpu_signals("auto")
    raw_pelt = int(sig["util"].is_not_null().sum() + sig["runnable"].is_not_null().sum())
    ev = d.frame()
    names = {tr.uuid: tr.name for tr in d.tracks}
    pelt_written = ev.filter(
        pl.col("track").replace_strict(names, return_dtype=pl.Utf8).str.contains(r"^CPU \d+ (util|runnable)")
    ).height
    return {
        "events": sum(t.meta["events"].values()),
        "sched_bytes": len(sched),
        "sched_rows": rows,
        "derived_bytes": len(body),
        "derived_events": counts,
        "sched_s": t_sched,
        "derived_s": t_derived,
        "pelt_samples": raw_pelt,
        "pelt_written": pelt_written,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cold", action="store_true", help="also one run with an empty parquet cache")
    args = ap.parse_args()
    if args.trace is None:
        from ingest import ensure_bench_trace

        args.trace, _ = ensure_bench_trace()
    trace = args.trace
    with tempfile.TemporaryDirectory(prefix="abtest-timeline-bench-") as tmp:
        out = Path(tmp) / "out.perfetto-trace"
        run_cli(trace, out)  # warms the parquet cache
        runs = [run_cli(trace, out) for _ in range(args.repeat)]
        walls, cpus = [w for w, _, _ in runs], [c for _, c, _ in runs]
        size = out.stat().st_size
        print(f"trace: {trace} ({trace.stat().st_size / 1e6:.1f} MB); load average {os.getloadavg()[0]:.1f}")
        print(
            f"abtest timeline (cache warm): wall best {min(walls):.2f} s, median {statistics.median(walls):.2f} s; "
            f"CPU best {min(cpus):.2f} s; peak RSS {max(r for _, _, r in runs):.0f} MB"
        )
        if args.cold:
            env = dict(os.environ, ABTEST_CACHE_DIR=str(Path(tmp) / "cache"))
            w, c, r = run_cli(trace, out, env)
            print(f"abtest timeline (empty cache, decode included): wall {w:.2f} s, CPU {c:.2f} s, peak RSS {r:.0f} MB")
        p = parts(trace)
        equiv = p["sched_bytes"]
        print(f"events in the trace: {p['events']:,}; written as ftrace: {p['sched_rows']}")
        print(
            f"output {size / 1e6:.2f} MB = scheduling data {equiv / 1e6:.2f} MB (the input's perfetto equivalent "
            f"for these events, written in {p['sched_s']:.2f} s) + derived tracks {p['derived_bytes'] / 1e6:.2f} MB "
            f"({p['derived_events']}, computed and written in {p['derived_s']:.2f} s)"
        )
        print(
            f"ratio output / perfetto equivalent: {size / equiv:.2f}x (target < 2x); output / input trace.dat: "
            f"{size / trace.stat().st_size:.2f}x"
        )
        print(
            f"PELT counters: {p['pelt_samples']:,} signal samples -> {p['pelt_written']:,} written "
            "(quantized, repeats dropped)"
        )
        print(
            f"targets: < 10 s {'met' if min(walls) < 10 else 'NOT met'} (wall; CPU {min(cpus):.1f} s); < 2x "
            f"{'met' if size < 2 * equiv else 'NOT met'}"
        )


if __name__ == "__main__":
    main()
