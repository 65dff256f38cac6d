"""`abtest trace convert` / `abtest.trace.convert.convert` / the parquet cache: a trace.dat's tables that
canonicalize() leaves unchanged are written from the decoder's arrays without polars frames
(abtest.trace.decoded). The files must read back (polars and pyarrow) to exactly the tables `read_trace()`
gives, meta.json must equal its metadata, and the predicate that picks those tables must agree with
canonicalize() itself on every raw table of every real trace. Real traces: every trace.dat under
../shared/traces, the 2.58 M-event benchmark trace, and text / perfetto traces (which take the frame path)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_frame_equal

from abtest.session import Trace
from abtest.trace.convert import convert
from abtest.trace.decoded import DecodedTable
from abtest.trace.readers import _decode, read_trace
from abtest.trace.schema import canonicalize, unchanged_by_canonicalize
from abtest.trace.parquet_write import write_parquet_tables
from shared_data import TRACES

ROOT = Path(__file__).resolve().parent.parent
TRACEDAT_FILES = sorted(str(p.relative_to(TRACES)) for p in TRACES.rglob("*.dat"))
OTHER_FILES = ["lisa/trace_txt-trace.txt", "trappy/trace.txt"]


def assert_convert_matches(path: Path, out: Path) -> dict:
    """convert(path, out) against read_trace(path): same table names, frames (dtypes, values, order),
    pyarrow schemas (with polars' field metadata) and meta. Returns {table: kept as DecodedTable}."""
    written = convert(path, out)
    ref = read_trace(path)
    assert sorted(p.stem for p in out.glob("*.parquet")) == sorted(ref.tables)
    assert json.loads((out / "meta.json").read_text()) == json.loads(json.dumps(ref.meta, default=str))
    frames_dir = out.parent / (out.name + "-frames")
    write_parquet_tables(ref.tables, frames_dir.mkdir(parents=True) or frames_dir)
    for name, df in ref.tables.items():
        got = pl.read_parquet(out / f"{name}.parquet")
        assert_frame_equal(got, df)
        assert got.equals(df), name
        assert pq.read_schema(out / f"{name}.parquet") == pq.read_schema(frames_dir / f"{name}.parquet"), name
        assert (pq.read_table(out / f"{name}.parquet").to_pylist()
                == pq.read_table(frames_dir / f"{name}.parquet").to_pylist()), name
    return {name: isinstance(t, DecodedTable) for name, t in written.tables.items()}


@pytest.mark.parametrize("rel", TRACEDAT_FILES)
def test_convert_equals_read_trace_on_shared_tracedat(rel, tmp_path):
    kept = assert_convert_matches(TRACES / rel, tmp_path / "out")
    # the tables canonicalize() changes, and those with list columns (kernel_stack), go through frames;
    # all others are written from the arrays
    schemas = {n: read_trace(TRACES / rel).tables[n].schema for n in kept}
    framed = {n for n in kept if n in ("cpu_idle", "cpu_frequency", "cpu_idle_miss", "marker")
              or n.startswith("sched_pelt_") or any(isinstance(d, pl.List) for d in schemas[n].values())}
    assert {n for n, k in kept.items() if not k} == framed
    assert any(kept.values()), kept


def test_convert_equals_read_trace_on_bench_trace(bench_trace, tmp_path):
    kept = assert_convert_matches(bench_trace, tmp_path / "out")
    assert kept["sched_switch"] and kept["sched_stat_runtime"] and kept["sched_waking"]
    assert not kept["cpu_idle"]  # state -1 and cpu from cpu_id: canonicalize() changes it


@pytest.mark.parametrize("rel", OTHER_FILES)
def test_convert_of_text_traces_takes_the_frame_path(rel, tmp_path):
    kept = assert_convert_matches(TRACES / rel, tmp_path / "out")
    assert not any(kept.values())


@pytest.mark.parametrize("rel", TRACEDAT_FILES + OTHER_FILES + ["PerfettoTraceScript/pixel7pro-power-rails.perfetto-trace"])
def test_unchanged_by_canonicalize_agrees_with_canonicalize(rel):
    """Every raw table the predicate accepts comes out of canonicalize() as it went in (text and perfetto
    readers give comm columns as text, which canonicalize() casts: none of theirs is accepted)."""
    path = TRACES / rel
    data = path.read_bytes()
    fmt = read_trace(path).meta["format"]
    raw, meta = _decode(path, data, fmt, False)
    accepted, changed = 0, 0
    for name, df in raw.items():
        if df.height == 0:
            continue
        out = canonicalize({name: df}, dict(meta))
        same = list(out) == [name] and out[name].schema == df.schema and out[name].equals(df)
        if unchanged_by_canonicalize(name, dict(df.schema)):
            accepted += 1
            assert same, name
        changed += not same
    assert accepted if fmt == "trace.dat" else changed  # each file exercises one side at least


def test_cli_convert_and_cache_use_the_same_files(tmp_path, monkeypatch):
    """`abtest trace convert` writes what the cache holds; Trace() served from that cache equals read_trace."""
    path = TRACES / "x86-vm" / "x86-menu-hackbench-cyclictest.dat"
    out = tmp_path / "cli"
    r = subprocess.run([sys.executable, "-m", "abtest.cli", "trace", "convert", str(path), "-o", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "wrote 8 tables" in r.stderr
    monkeypatch.setenv("ABTEST_CACHE_DIR", str(tmp_path / "cache"))
    t = Trace(path)
    ref = read_trace(path)
    assert t.tables == sorted(ref.tables) == sorted(p.stem for p in out.glob("*.parquet"))
    for name in t.tables:
        assert_frame_equal(t.df(name), ref.tables[name])
        assert_frame_equal(pl.read_parquet(out / f"{name}.parquet"), ref.tables[name])


def test_merge_buffers_reports_clock_mismatch_and_adds_lost_events():
    """tracedat_instances.merge_buffers on two hand-made buffers (a stand-in for a file whose BUFFER
    options name different clocks, which trace-cmd extract 3.1.6 here cannot write)."""
    from abtest.trace.tracedat_instances import merge_buffers
    from abtest.trace.tracedat_layout import Instance

    def buf(ts, lost):
        df = pl.DataFrame({"ts": ts, "cpu": [0] * len(ts), "common_pid": [1] * len(ts)},
                          schema={"ts": pl.Int64, "cpu": pl.Int32, "common_pid": pl.Int32})
        return {"sched_switch": df}, {"lost_events_per_cpu": {"0": lost}, "lost_events": lost, "lost_events_exact": True,
                                      "ring_buffer_pages": 1, "records": len(ts), "cpus_with_data": [0], "warnings": [],
                                      "clock": "boot"}
    raw, meta = merge_buffers(buf([1, 5], 2), [(Instance("x", clock="mono"), buf([3, 5], 4))], "boot", True)
    assert raw["sched_switch"]["ts"].to_list() == [1, 3, 5, 5]
    assert raw["sched_switch"]["instance"].to_list() == [None, "x", None, "x"]  # ties: top buffer first
    assert meta["lost_events"] == 6 and meta["lost_events_per_cpu"] == {"0": 6} and meta["records"] == 4
    assert meta["instances"] == ["x"] and meta["instance_buffers"]["x"]["clock"] == "mono"
    assert any("'x' records on the 'mono' clock" in w for w in meta["warnings"])


def test_trace_without_a_writable_cache_decodes_in_memory(tmp_path, monkeypatch):
    """A cache root that cannot hold directories (here a regular file): Trace() keeps its tables in memory."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("ABTEST_CACHE_DIR", str(blocker))
    path = TRACES / "trappy" / "trace.dat"
    t = Trace(path)
    ref = read_trace(path)
    assert t.tables == sorted(ref.tables)
    for name in t.tables:
        assert_frame_equal(t.df(name), ref.tables[name])


def _decode_for_writing(path: Path, keep_runs: bool) -> dict:
    """tracedat.read of `path` as convert() calls it (DecodedTables for the tables canonicalize() keeps),
    with the multi-CPU tables' integer / dictionary columns kept as their runs or merged into arrays."""
    import mmap

    from abtest.trace import tracedat
    from abtest.trace.readers import _keep_decoded

    with open(path, "rb") as f:
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        raw, _meta = tracedat.read(path, data, keep_decoded=_keep_decoded, keep_runs=keep_runs)
    return raw


def _run_columns(raw: dict) -> list:
    from abtest import _native

    return [(name, col, c) for name, t in raw.items() if isinstance(t, DecodedTable)
            for col, c in t.columns.items() if isinstance(c, _native.RunColumn)]


@pytest.mark.parametrize("merge", ["auto", "segments", "rows"])
@pytest.mark.parametrize("rel", TRACEDAT_FILES)
def test_tables_written_from_runs_equal_those_from_arrays(rel, merge, tmp_path, monkeypatch):
    """Columns held as their per-CPU runs (RunColumn: the parquet writer gathers each row group from the
    runs, native/src/tracedat_lazy.rs) give byte-identical files to the merged arrays: default layout,
    and row groups of 1,000 rows with 300-row pages (many row groups, the CPUs interleaving inside each);
    the merge plan both as a per-row run selector and as segments (ABTEST_FUSED_MERGE)."""
    if merge != "auto":
        monkeypatch.setenv("ABTEST_FUSED_MERGE", merge)
    runs, arrays = _decode_for_writing(TRACES / rel, True), _decode_for_writing(TRACES / rel, False)
    assert sorted(runs) == sorted(arrays)
    assert not _run_columns(arrays)
    multi_cpu = {n for n, t in arrays.items() if isinstance(t, DecodedTable) and len(set(t.columns["cpu"])) > 1}
    assert {n for n, _c, _v in _run_columns(runs)} == multi_cpu
    for layout in ({}, {"row_group_rows": 1000, "page_rows": 300}):
        a, b = tmp_path / f"runs{len(layout)}", tmp_path / f"arrays{len(layout)}"
        a.mkdir()
        b.mkdir()
        write_parquet_tables(runs, a, **layout)
        write_parquet_tables(arrays, b, **layout)
        for name in arrays:
            assert (a / f"{name}.parquet").read_bytes() == (b / f"{name}.parquet").read_bytes(), (name, layout)


@pytest.mark.parametrize("rel", [r for r in TRACEDAT_FILES if "x86-vm" in r or "lisa" in r])
def test_run_columns_materialize_to_the_merged_arrays(rel):
    """tracedat_materialize (used when such a table becomes a polars frame after all) gives the arrays the
    merge builds: integers, the CPU column, Categorical codes and dictionary."""
    import numpy as np

    from abtest import _native

    runs, arrays = _decode_for_writing(TRACES / rel, True), _decode_for_writing(TRACES / rel, False)
    found = _run_columns(runs)
    assert found
    merged = _native.tracedat_materialize([c for _n, _col, c in found])
    for (name, col, rc), got in zip(found, merged):
        want = arrays[name].columns[col]
        assert len(rc) == arrays[name].height
        if isinstance(want, np.ndarray):
            assert rc.kind == {"int32": "i32"}.get(str(want.dtype), rc.kind)
            assert got.dtype == want.dtype and np.array_equal(got, want), (name, col)
            assert rc.max() == int(want.max())
        else:
            assert rc.kind == "cat32" and rc.max() is None
            assert got[0] == want[0] == "cat"
            for g, w in zip(got[1:], want[1:]):
                assert np.array_equal(g, w), (name, col)
