"""The native extension's allocator (native/src/alloc_reuse.rs): freed large blocks stay mapped for reuse.

Each check runs in a fresh interpreter (the cache is process state; the cap is read when the module
loads): tables decoded on reused memory must equal those decoded on fresh memory, value for value and
code for code, on the fused path, the record-index path (which asks for zeroed blocks) and the parquet
writer; the same with every large block taken from malloc (the fallback when no mapping can be made);
the cap bounds what is kept; release_cached_memory() gives it all back; a second decode of the
benchmark trace maps far fewer fresh pages than the first.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from shared_data import TRACES

ROOT = Path(__file__).resolve().parent.parent
FILES = ["lisa/sched_load-trace.dat", "x86-vm/x86-menu-hackbench-cyclictest.dat", "langraph/trace.dat"]

# Prints one JSON line: a digest of every table (rows, schema, hash of the rows' values) per (file, path,
# decode number), and the cache state along the way. Categorical codes are polars' process-wide ids (they
# depend on what the process saw first): the digests compare the texts.
_CHILD = r"""
import json, resource, sys, tempfile
from pathlib import Path
import polars as pl
from abtest import _native
from abtest.trace import tracedat
from abtest.trace.parquet_write import write_parquet_tables

def digest(tables):
    out = {}
    for name, df in tables.items():
        out[name] = [len(df), str(df.schema), int(df.hash_rows(seed=2).sum())]
    return out

res = {"digests": [], "cached": []}
for rel in sys.argv[2:]:
    p = Path(sys.argv[1]) / rel
    data = p.read_bytes()
    for fused in (True, False):
        tables, _ = tracedat.read(p, data, fused=fused)
        res["digests"].append([f"{rel} fused={fused}", digest(tables)])
        with tempfile.TemporaryDirectory() as d:
            write_parquet_tables(tables, d)
            back = {f.stem: pl.read_parquet(f) for f in Path(d).glob("*.parquet")}
        res["digests"].append([f"{rel} fused={fused} parquet", digest({k: back[k] for k in tables})])
        del tables, back
        res["cached"].append(_native.cached_memory()[1])
res["released"] = _native.release_cached_memory()
res["after_release"] = list(_native.cached_memory())
print(json.dumps(res))
"""


def _run(files: list[str], cache_mb: int | None, map_large: bool = True) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("ABTEST_NATIVE_CACHE_MB", "ABTEST_NATIVE_MAP")}
    if cache_mb is not None:
        env["ABTEST_NATIVE_CACHE_MB"] = str(cache_mb)
    if not map_large:
        env["ABTEST_NATIVE_MAP"] = "0"
    out = subprocess.run([sys.executable, "-c", _CHILD, str(TRACES), *files], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_tables_on_reused_memory_equal_tables_on_fresh_memory():
    # every file decoded twice more after the others have filled the cache: a different order of sizes
    fresh = _run(FILES, cache_mb=0)
    reused = _run(FILES + FILES[::-1], cache_mb=None)
    assert fresh["cached"] == [0] * len(fresh["cached"]) and fresh["released"] == 0
    assert max(reused["cached"]) > 0, "nothing was kept for reuse"
    want = dict(fresh["digests"])
    assert len(reused["digests"]) == 2 * len(want)
    for key, got in reused["digests"]:
        assert got == want[key], key
    for key, got in want.items():  # all four ways to the tables agree (test_tracedat_fused: in depth)
        assert got == want[key.split(" ")[0] + " fused=True"], key
    assert reused["released"] == reused["cached"][-1] > 0
    assert reused["after_release"] == [0, 0]


def test_large_blocks_from_the_system_allocator_give_the_same_tables():
    """The path taken when no mapping can be made (vm.max_map_count reached): every large block comes
    from malloc behind the same header page, is grown by copy and freed through malloc."""
    fresh = _run(FILES, cache_mb=0)
    system = _run(FILES + FILES[::-1], cache_mb=None, map_large=False)
    assert system["cached"] == [0] * len(system["cached"])  # nothing mapped, nothing kept
    want = dict(fresh["digests"])
    assert len(system["digests"]) == 2 * len(want)
    for key, got in system["digests"]:
        assert got == want[key], key


def test_cap_bounds_the_kept_memory():
    res = _run(FILES[:2], cache_mb=1)
    assert all(c <= 1 << 20 for c in res["cached"]), res["cached"]


_FAULTS = r"""
import json, resource, sys
from abtest.trace import tracedat
data = open(sys.argv[1], "rb").read()
faults = []
for _ in range(2):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    tables, _ = tracedat.read(sys.argv[1], data)
    del tables
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps(faults))
"""


def test_second_decode_maps_far_fewer_fresh_pages(bench_trace):
    """The point of the cache: the second decode in a process reuses the first one's columns (measured
    here at ~45,000 page faults without reuse, ~20,000 with it, for ~2.6 M events)."""
    env = {k: v for k, v in os.environ.items() if k != "ABTEST_NATIVE_CACHE_MB"}
    out = subprocess.run([sys.executable, "-c", _FAULTS, str(bench_trace)], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=600, check=True)
    first, second = json.loads(out.stdout.strip().splitlines()[-1])
    assert second < 0.7 * first, (first, second)
