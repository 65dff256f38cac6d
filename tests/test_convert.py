"""`abtest trace convert` / `abtest.trace.convert.convert` and the cache behind `Trace`: tables written by
polars (parquet for convert, Arrow IPC for the cache) must read back (polars and pyarrow) to exactly the
tables `read_trace()` gives, and meta.json must equal its metadata. Real traces: every trace.dat under
../shared/traces, the benchmark trace, text and perfetto traces."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_frame_equal
from shared_data import TRACES

from abtest.session import Trace
from abtest.trace import cache
from abtest.trace.convert import convert
from abtest.trace.readers import read_trace

ROOT = Path(__file__).resolve().parent.parent
TRACEDAT_FILES = sorted(str(p.relative_to(TRACES)) for p in TRACES.rglob("*.dat"))
OTHER_FILES = [
    "lisa/trace_txt-trace.txt",
    "trappy/trace.txt",
    "PerfettoTraceScript/pixel7pro-power-rails.perfetto-trace",
]


def assert_convert_matches(path: Path, out: Path, fmt: str = "parquet") -> None:
    """convert(path, out) against read_trace(path): same table names, frames (dtypes, values, order) read
    back by polars, rows read back by pyarrow, and meta."""
    convert(path, out, fmt=fmt)
    ref = read_trace(path)
    suffix = cache.SUFFIX[fmt]
    assert sorted(p.name[: -len(suffix)] for p in out.glob(f"*{suffix}")) == sorted(ref.tables)
    assert json.loads((out / "meta.json").read_text()) == json.loads(json.dumps(ref.meta, default=str))
    for name, df in ref.tables.items():
        got = cache.read_table(out, name)
        assert_frame_equal(got, df)
        assert got.equals(df), name
        if fmt == "parquet":
            assert pq.read_table(out / f"{name}.parquet").to_pylist() == df.to_arrow().to_pylist(), name


@pytest.mark.parametrize("fmt", ["parquet", "ipc"])
@pytest.mark.parametrize("rel", TRACEDAT_FILES + OTHER_FILES)
def test_convert_equals_read_trace(rel, fmt, tmp_path):
    assert_convert_matches(TRACES / rel, tmp_path / "out", fmt)


def test_convert_equals_read_trace_on_bench_trace(bench_trace, tmp_path):
    assert_convert_matches(bench_trace, tmp_path / "out")


def test_cli_convert_and_cache(tmp_path, monkeypatch):
    """`abtest trace convert` writes parquet; Trace() decodes once into the cache (Arrow IPC) and a second
    Trace() of the same file is served from it: all three equal read_trace."""
    path = TRACES / "x86-vm" / "x86-menu-hackbench-cyclictest.dat"
    out = tmp_path / "cli"
    r = subprocess.run(
        [sys.executable, "-m", "abtest.cli", "trace", "convert", str(path), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "wrote 8 tables" in r.stderr
    monkeypatch.setenv("ABTEST_CACHE_DIR", str(tmp_path / "cache"))
    ref = read_trace(path)
    first, second = Trace(path), Trace(path)
    assert first._data is None and first._entry == second._entry  # the first open wrote the cache
    assert sorted(p.stem for p in first._entry.glob("*.arrow")) == sorted(ref.tables)
    assert first.tables == second.tables == sorted(ref.tables) == sorted(p.stem for p in out.glob("*.parquet"))
    assert second.meta == first.meta
    for name in first.tables:
        assert_frame_equal(first.df(name), ref.tables[name])
        assert_frame_equal(second.df(name), ref.tables[name])
        assert_frame_equal(pl.read_parquet(out / f"{name}.parquet"), ref.tables[name])


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


@pytest.mark.parametrize("fmt", ["parquet", "ipc"])
def test_write_tables_is_atomic(traces, tmp_path, monkeypatch, fmt):
    """A directory appears complete or not at all: no temp dir left behind, also when a write fails."""
    data = read_trace(traces / "x86-vm" / "x86-menu-hackbench-cyclictest.dat")
    out = cache.write_tables(data, tmp_path / "entry", fmt=fmt)
    assert cache.is_complete(out) and cache.table_names(out) == sorted(data.tables)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]

    def boom(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(cache.json, "dumps", boom)
    with pytest.raises(RuntimeError, match="boom"):
        cache.write_tables(data, tmp_path / "bad", fmt=fmt)
    assert not (tmp_path / "bad").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
