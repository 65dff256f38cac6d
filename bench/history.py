"""abtest history at lab scale, measured on this machine:
1. `history add` of BUILDS x ITERATIONS iterations (default 500 x 4 = 2,000) made from the shared Pixel 7 Pro
   power rails (tests/history_data.make_history: real rail samples, copied and scaled; +4 % step at build 300),
   in process and on a Dask LocalCluster of WORKERS processes;
2. `history detect` over every series of those 500 builds (power.* metrics, 29 series);
3. dashboard API latency (/api/points, /api/series, /api/changepoints) for a 1,000-build series (target
   < 200 ms per request), through a real HTTP server on 127.0.0.1.
Run: .venv/bin/python bench/history.py [--builds 500 --iterations 4 --workers 2] [--api-only] [--requests 60];
needs ~250 MB in $TMPDIR. --api-only: only step 3.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from history_data import make_history  # noqa: E402 (after the sys.path set-up)

from abtest.history.db import open_db  # noqa: E402 (after the sys.path set-up)
from abtest.history.detect import detect  # noqa: E402 (after the sys.path set-up)
from abtest.history.ingest import add  # noqa: E402 (after the sys.path set-up)
from abtest.history.web import Server, create_app  # noqa: E402 (after the sys.path set-up)


def _latency(url: str, n: int = 60) -> tuple[float, float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        with urllib.request.urlopen(url) as r:
            r.read()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), max(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--builds", type=int, default=500)
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--api-only", action="store_true", help="only the dashboard API latency (step 3)")
    ap.add_argument("--requests", type=int, default=60, help="requests per API endpoint")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="abtest-history-bench-"))
    try:
        if not args.api_only:
            _ingest_and_detect(tmp, args)
        _api(tmp, args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _ingest_and_detect(tmp: Path, args) -> None:
    store = tmp / "store"
    t0 = time.perf_counter()
    make_history(store, n_builds=args.builds, step_at=int(args.builds * 0.6), iterations=args.iterations)
    n_it = args.builds * args.iterations
    print(f"store of {n_it} iterations written in {time.perf_counter() - t0:.1f} s")
    for workers in (1, args.workers):
        engine = open_db(tmp / f"h{workers}.sqlite")
        t0 = time.perf_counter()
        res = add(engine, [store], with_trace=False, use_cache=False, workers=workers)
        dt = time.perf_counter() - t0
        print(
            f"history add, {'in process' if workers == 1 else f'Dask LocalCluster of {workers} processes'}: "
            f"{res.iterations} iterations, {res.values} values in {dt:.1f} s ({res.iterations / dt:.1f} it/s)"
        )
    t0 = time.perf_counter()
    found = detect(engine, metrics=("power.*",))
    print(
        f"history detect over {args.builds}-build series (power.*): {len(found)} change points in "
        f"{time.perf_counter() - t0:.2f} s; at builds {sorted({f.after.label for f in found})}"
    )
    shutil.rmtree(store)


def _api(tmp: Path, args) -> None:
    # a 1,000-build series for the dashboard: one iteration per build
    store = tmp / "store1000"
    make_history(store, n_builds=1000, step_at=700, iterations=1)
    engine = open_db(tmp / "h1000.sqlite")
    add(engine, [store], with_trace=False, use_cache=False, workers=args.workers)
    detect(engine, metrics=("power.Total",))
    with Server(create_app(engine)) as srv:
        q = "device=lab-dut&workload=video&metric=power.Total"
        for path in (f"/api/points?{q}", "/api/series", f"/api/changepoints?{q}"):
            med, worst = _latency(srv.url + path, args.requests)
            print(
                f"GET {path.split('?')[0]:18} 1,000-build series, {args.requests} requests: median "
                f"{med:6.1f} ms, max {worst:6.1f} ms (target < 200 ms)"
            )


if __name__ == "__main__":
    main()
