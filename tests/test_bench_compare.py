"""bench/compare.py's bench-size store and its per-iteration breakdown, on a real shared trace (the bench itself
runs on the >= 3 M-event bench trace; this keeps its parts working)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACE = "x86-vm/x86-menu-hackbench-cyclictest.dat"


def _bench():
    spec = importlib.util.spec_from_file_location("abtest_bench_compare", ROOT / "bench" / "compare.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_store_compares_and_the_stages_cover_every_analysis(tmp_path, traces):
    bench = _bench()
    store = bench.make_bench_store(tmp_path, traces / TRACE, 2)
    assert sorted(p.relative_to(store).as_posix() for p in store.rglob(".complete")) == [
        "A/hackbench/0/.complete",
        "A/hackbench/1/.complete",
        "B/hackbench/0/.complete",
        "B/hackbench/1/.complete",
    ]
    out = subprocess.run(
        [sys.executable, "-m", "abtest.cli", "compare", "A", "B", "--store", str(store), "--format", "json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert out.returncode in (0, 1, 2), out.stderr
    (wl,) = json.loads(out.stdout)["workloads"]
    assert (wl["workload"], wl["n_a"], wl["n_b"]) == ("hackbench", 2, 2)
    names = {m["name"] for m in wl["metrics"]}
    assert any(n.startswith("latency.") for n in names) and any(n.startswith("idle.") for n in names)
    stages = bench.iteration_stages(traces / TRACE)
    assert "decode (fields the analyses read)" in stages and "latency" in stages and "tasks" in stages
    assert all(s >= 0 for s in stages.values())
