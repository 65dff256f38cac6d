#!/usr/bin/env python3
"""A long trace analysed end to end in bounded memory (issue 24, deliverable 3): `abtest analyze FILE --windows S`
timed from a cold start, with the peak of the summed RSS of its process tree (the main process and its window
workers), against the targets (< 60 s, < 8 GB).

    .venv/bin/python bench/analyze_long.py [--trace FILE] [--windows 30] [--jobs 2] [--cold]

Default trace: ~/.cache/abtest/bench/long-100M.dat, built by bench/make_long_trace.py from the analysis bench's
trace (real recordings concatenated and time-shifted; ~100 M events, 4.8 GB). Each run uses an empty abtest cache
directory, so the time includes the decode and the cache write ("first open"); then a second run on that cache
(the analysis alone). --cold drops the page cache first (needs root), so that the trace is read from disk.
RSS is sampled every 0.1 s from /proc (VmRSS of every process of the tree, threads not counted twice).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LONG = Path.home() / ".cache" / "abtest" / "bench" / "long-100M.dat"


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        todo += [int(k) for k in kids]
    return out


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def run(cmd: list[str], env: dict) -> tuple[float, int, str]:
    """(wall s, peak summed RSS kB, stdout) of cmd."""
    with tempfile.TemporaryFile("w+") as out_f, tempfile.TemporaryFile("w+") as err_f:  # no pipe to fill
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=out_f, stderr=err_f, text=True)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, sum(_rss_kb(p) for p in _tree(proc.pid)))
            time.sleep(0.1)
        wall = time.perf_counter() - t0
        out_f.seek(0)
        err_f.seek(0)
        out, err = out_f.read(), err_f.read()
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err[-2000:]}")
    return wall, peak, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=LONG)
    ap.add_argument("--windows", type=float, default=30.0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--cold", action="store_true", help="drop the page cache before the first run (root)")
    a = ap.parse_args()
    if not a.trace.exists():
        raise SystemExit(f"{a.trace} is missing: build it with `.venv/bin/python bench/make_long_trace.py`")
    cache_dir = Path(tempfile.mkdtemp(prefix="abtest-long-cache."))
    env = dict(os.environ, ABTEST_CACHE_DIR=str(cache_dir))
    cmd = [
        sys.executable,
        "-m",
        "abtest.cli",
        "analyze",
        str(a.trace),
        "--windows",
        str(a.windows),
        "--jobs",
        str(a.jobs),
        "--json",
    ]
    try:
        if a.cold:
            subprocess.run(["sync"], check=True)
            Path("/proc/sys/vm/drop_caches").write_text("1")
        first = run(cmd, env)
        cached = run(cmd, env)
        entry = next(p for p in cache_dir.iterdir() if p.is_dir())
        sizes = {p.stem: p.stat().st_size for p in entry.glob("*.arrow")}
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    d = json.loads(cached[2])
    print(
        f"trace: {a.trace} ({a.trace.stat().st_size / 1e9:.2f} GB); {d['windows']} windows of {a.windows:g} s, "
        f"history {d['history_s']:g} s, --jobs {a.jobs}; {len(d['metrics'])} values"
    )
    print(
        f"tables (Arrow IPC cache): {sum(sizes.values()) / 1e9:.2f} GB; largest {max(sizes, key=sizes.get)} "
        f"{max(sizes.values()) / 1e9:.2f} GB"
    )
    for label, (wall, peak, _) in (("first open (decode + cache + windows)", first), ("cached (windows only)", cached)):
        print(
            f"  {label:40s} {wall:7.1f} s   peak RSS (process tree) {peak / 1e6:5.2f} GB"
            f" = {peak * 1024 / max(sizes.values()):.2f}x the largest table"
        )
    ok_t, ok_m = first[0] < 60, first[1] < 8e6
    print(
        f"targets: end to end < 60 s: {'met' if ok_t else 'NOT met'} ({first[0]:.1f} s); peak RSS < 8 GB: "
        f"{'met' if ok_m else 'NOT met'} ({first[1] / 1e6:.2f} GB)"
    )


if __name__ == "__main__":
    main()
