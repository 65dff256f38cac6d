"""The documented parquet export layout (`abtest trace convert FILE -o DIR`, docs/interop.md) loads with
pandas / pyarrow alone: a separate Python process that refuses to import abtest reads it, and what it
reads equals abtest's own tables. Real traces: LISA's Juno sched_load trace.dat and its ftrace-text trace."""

from __future__ import annotations

import json
import subprocess
import sys

import polars as pl
import pytest

READER = r"""
import sys
class _NoAbtest:
    def find_spec(self, name, path=None, target=None):
        if name == "abtest" or name.startswith("abtest."):
            raise ImportError("this reader must work without abtest")
sys.meta_path.insert(0, _NoAbtest())
import json, pathlib
import pandas as pd
import pyarrow.parquet as pq
d = pathlib.Path(sys.argv[1])
meta = json.loads((d / "meta.json").read_text())
tables = {}
for p in sorted(d.glob("*.parquet")):
    df = pd.read_parquet(p)
    schema = pq.read_schema(p)
    info = {"rows": len(df), "dtypes": {c: str(df[c].dtype) for c in df.columns},
            "arrow": {f.name: str(f.type) for f in schema}}
    if p.stem == "cpu_idle" and len(df):
        info["state_min"] = int(df["state"].min())
    if p.stem == "sched_switch" and len(df):
        info["first"] = {k: (v.item() if hasattr(v, "item") else v) for k, v in df.iloc[0].to_dict().items()}
    tables[p.stem] = info
print(json.dumps({"meta": meta, "tables": tables, "complete": (d / ".complete").exists(),
                  "abtest_loaded": sorted(m for m in sys.modules if m.startswith("abtest"))}, default=str))
"""

CASES = [
    (
        "lisa/sched_load-trace.dat",
        {"sched_switch": 399, "cpu_idle": 474, "cpu_frequency": 16, "sched_pelt_cfs": 2437, "sched_pelt_se": 364},
    ),
    ("lisa/trace_txt-trace.txt", {"sched_switch": 1856, "sched_wakeup": 1068}),
]


@pytest.mark.parametrize("rel,expected", CASES, ids=[c[0] for c in CASES])
def test_export_loads_without_abtest(rel, expected, traces, tmp_path):
    out = tmp_path / "export"
    r = subprocess.run(
        [sys.executable, "-m", "abtest.cli", "trace", "convert", str(traces / rel), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-c", READER, str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["abtest_loaded"] == [] and doc["complete"]
    meta, tables = doc["meta"], doc["tables"]
    for key in ("format", "cpus", "start_ns", "end_ns", "events", "lost_events", "clock"):
        assert key in meta, key
    for name, n in expected.items():
        assert tables[name]["rows"] == n == meta["events"][name], name
    marker_events = ("print", "bprint", "bputs", "tracing_mark_write")
    for name, info in tables.items():
        assert info["arrow"].get("ts") == "int64", name  # ns on the trace clock
        if name == "marker":
            assert info["rows"] == sum(meta["events"].get(e, 0) for e in marker_events)
        else:
            assert info["rows"] == meta["events"][name], name
    sw = tables["sched_switch"]
    assert sw["dtypes"]["prev_comm"] == "category" and sw["arrow"]["prev_comm"].startswith("dictionary<values=string")
    if "cpu_idle" in tables and tables["cpu_idle"]["rows"]:
        assert tables["cpu_idle"]["state_min"] == -1  # exit from idle, as documented (kernel writes 4294967295)

    # what pandas read equals abtest's own canonical table
    from abtest.session import Trace

    ours = Trace(traces / rel).df("sched_switch").row(0, named=True)
    assert {k: (str(v) if not isinstance(v, (int, float)) else v) for k, v in ours.items()} == {
        k: (str(v) if not isinstance(v, (int, float)) else v) for k, v in sw["first"].items()
    }


def test_polars_reads_the_same_layout(traces, tmp_path):
    from abtest.session import Trace

    t = Trace(traces / "lisa" / "sched_load-trace.dat")
    out = t.to_dir(tmp_path / "exp")
    back = pl.read_parquet(out / "sched_pelt_cfs.parquet")
    assert back.equals(t.df("sched_pelt_cfs"))
    assert json.loads((out / "meta.json").read_text())["events"]["sched_pelt_cfs"] == back.height
