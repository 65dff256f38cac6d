"""abtest's parquet writer (abtest/trace/parquet_write.py + native/src/parquet_write.rs) against the two
reference readers: every table it writes must read back with polars to the identical frame (dtypes too,
Categorical stays Categorical) and with pyarrow to the same values and the same Arrow types pyarrow gives
for polars' own file of that frame.

Real data: every table of every trace in ../shared/traces and of the benchmark trace
(~/.cache/abtest/bench/hackbench-sched-power.dat, recorded by bench/ingest.py). Edge cases: empty table,
all-null columns, nulls in ints / strings / categoricals / booleans / lists, 1-row table, several row
groups and pages, sliced and multi-chunk frames, extreme integers, dtypes that go to polars' writer.
"""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_frame_equal

from abtest.trace.cache import write_tables
from abtest.trace.parquet_write import write_parquet_tables
from abtest.trace.readers import read_trace

NOT_TRACES = {".md", ".json", ".yml"}

CONFIGS = [
    {},  # the default
    {"compression": "uncompressed", "ints": "plain"},
    {"compression": "lz4_raw", "ints": "delta", "row_group_rows": 1000, "page_rows": 300},
    {"compression": "uncompressed", "ints": "auto", "row_group_rows": 1000, "page_rows": 300},
]


def _decoded(t: pa.Table) -> pa.Table:
    """Dictionary columns decoded to their values (Arrow equality compares dictionary and indices);
    floats as their bit patterns (NaN != NaN in Arrow equality)."""
    bits = {pa.float32(): pa.int32(), pa.float64(): pa.int64()}
    cols = []
    for c in t.columns:
        if pa.types.is_dictionary(c.type):
            c = pc.cast(c, c.type.value_type)
        elif c.type in bits:
            c = c.combine_chunks().view(bits[c.type])
        cols.append(c)
    return pa.table(cols, names=t.column_names)


def check_tables(tables: dict[str, pl.DataFrame], out: Path, **kw) -> None:
    """Write with abtest's writer, then compare polars and pyarrow reads with the frames and with
    pyarrow's read of polars' own file of the same frame."""
    out.mkdir(parents=True, exist_ok=True)
    sizes = write_parquet_tables(tables, out, **kw)
    assert set(sizes) == set(tables)
    ref_dir = out / "ref"
    ref_dir.mkdir()
    for name, df in tables.items():
        path = out / f"{name}.parquet"
        assert path.stat().st_size == sizes[name]
        back = pl.read_parquet(path)
        assert_frame_equal(back, df, check_exact=True)
        assert back.schema == df.schema
        mine = pq.read_table(path)
        df.write_parquet(ref_dir / f"{name}.parquet")
        ref = pq.read_table(ref_dir / f"{name}.parquet")
        assert mine.schema.equals(ref.schema), (name, mine.schema, ref.schema)
        assert _decoded(mine).equals(_decoded(ref)), name


def _shared_trace_files(traces: Path) -> list[Path]:
    return [p for p in sorted(traces.rglob("*")) if p.is_file() and p.suffix not in NOT_TRACES]


def test_every_shared_trace_round_trips(traces, tmp_path):
    files = _shared_trace_files(traces)
    assert len(files) >= 30
    seen = set()
    for i, f in enumerate(files):
        data = read_trace(f)
        for df in data.tables.values():
            seen.update(str(dt.base_type()) for dt in df.dtypes)
        for k, kw in enumerate(CONFIGS):
            check_tables(data.tables, tmp_path / f"{i}-{k}", **kw)
    # the dtypes canonical tables hold on these traces are all covered by the Rust writer
    assert {"Int32", "Int64", "UInt8", "UInt32", "UInt64", "Float64", "String", "Categorical", "List"} <= seen


def test_bench_trace_round_trips(tmp_path, bench_trace):
    data = read_trace(bench_trace)
    assert sum(len(df) for df in data.tables.values()) > 2_000_000
    check_tables(data.tables, tmp_path / "default")
    # several row groups and pages on the big tables
    check_tables({k: data.tables[k] for k in ("sched_switch", "sched_stat_runtime")}, tmp_path / "small-groups",
                 row_group_rows=100_000, page_rows=10_000, compression="uncompressed")


def test_write_tables_uses_native_writer_and_stays_atomic(traces, tmp_path, monkeypatch):
    data = read_trace(traces / "x86-vm" / "x86-menu-hackbench-cyclictest.dat")
    out = write_tables(data, tmp_path / "entry")
    assert (out / ".complete").exists() and (out / "meta.json").exists()
    assert sorted(p.stem for p in out.glob("*.parquet")) == sorted(data.tables)
    for name, df in data.tables.items():
        meta = pq.read_metadata(out / f"{name}.parquet")
        assert meta.created_by.startswith("abtest")
        assert_frame_equal(pl.read_parquet(out / f"{name}.parquet"), df)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dir left behind
    # a failing write (here: meta.json) leaves no entry and no temp dir
    import abtest.trace.cache as cache

    def boom(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(cache.json, "dumps", boom)
    with pytest.raises(RuntimeError, match="boom"):
        write_tables(data, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def _edge_frame() -> pl.DataFrame:
    n = 23
    return pl.DataFrame({
        "ts": pl.Series(range(0, n * 1000, 1000), dtype=pl.Int64),
        "i8": pl.Series([(-128 + 11 * i) % 256 - 128 for i in range(n)], dtype=pl.Int8),
        "i16": pl.Series([-32768 + 2999 * i for i in range(n) if i < 22] + [32767], dtype=pl.Int16),
        "i32": pl.Series([None if i % 3 == 0 else [-(2**31), 2**31 - 1][i % 2] for i in range(n)], dtype=pl.Int32),
        "i64": pl.Series([[-(2**63), 2**63 - 1][i % 2] for i in range(n)], dtype=pl.Int64),
        "u8": pl.Series([255 - i for i in range(n)], dtype=pl.UInt8),
        "u16": pl.Series([None if i == 5 else 65535 - i for i in range(n)], dtype=pl.UInt16),
        "u32": pl.Series([2**32 - 1 - 7 * i for i in range(n)], dtype=pl.UInt32),
        "u64": pl.Series([[2**64 - 1, 0, None][i % 3] for i in range(n)], dtype=pl.UInt64),
        "f32": pl.Series([None if i == 2 else i / 4 for i in range(n)], dtype=pl.Float32),
        "f64": pl.Series([float("nan") if i == 1 else -i * 1.5 for i in range(n)], dtype=pl.Float64),
        "bool": pl.Series([None if i % 4 == 0 else i % 3 == 0 for i in range(n)], dtype=pl.Boolean),
        "str": pl.Series([None if i % 5 == 0 else "é" * i for i in range(n)], dtype=pl.String),
        "bin": pl.Series([None if i == 3 else bytes(range(i)) for i in range(n)], dtype=pl.Binary),
        "cat": pl.Series([None if i % 7 == 0 else f"comm-{i % 4}" for i in range(n)], dtype=pl.Categorical),
        "list": pl.Series([None if i == 4 else [] if i == 6 else list(range(i % 5)) for i in range(n)],
                          dtype=pl.List(pl.UInt64)),
        "list_i32": pl.Series([[None, i] if i % 2 else [i] for i in range(n)], dtype=pl.List(pl.Int32)),
        "null_int": pl.Series([None] * n, dtype=pl.Int32),
        "null_str": pl.Series([None] * n, dtype=pl.String),
        "null_cat": pl.Series([None] * n, dtype=pl.Categorical),
        "null_list": pl.Series([None] * n, dtype=pl.List(pl.Int64)),
    })


@pytest.mark.parametrize("kw", CONFIGS + [{"row_group_rows": 5, "page_rows": 2, "ints": "delta"},
                                {"row_group_rows": 5, "page_rows": 2, "ints": "auto"}])
def test_edge_cases(tmp_path, kw):
    df = _edge_frame()
    multi = pl.concat([df.slice(0, 7), df.slice(7)], rechunk=False)
    assert multi.n_chunks() > 1
    tables = {
        "full": df,
        "empty": df.head(0),
        "one_row": df.slice(5, 1),
        "sliced": df.slice(3, 17),  # Arrow arrays with a non-zero offset (validity bits not byte-aligned)
        "multi_chunk": multi,
        "no_nulls": pl.DataFrame({"ts": [1, 2, 2, 5], "cpu": pl.Series([0, 1, 0, 1], dtype=pl.Int32)}),
    }
    check_tables(tables, tmp_path, **kw)


def test_unsupported_dtypes_fall_back_to_polars(tmp_path):
    df = pl.DataFrame({
        "ts": [1, 2],
        "when": pl.Series([0, 1], dtype=pl.Datetime("ns")),
        "e": pl.Series(["a", "b"], dtype=pl.Enum(["a", "b"])),
    })
    ok = pl.DataFrame({"ts": [1, 2]})
    sizes = write_parquet_tables({"odd": df, "ok": ok, "nocols": pl.DataFrame()}, tmp_path)
    assert set(sizes) == {"odd", "ok", "nocols"}
    assert pq.read_metadata(tmp_path / "odd.parquet").created_by.startswith("Polars")
    assert pq.read_metadata(tmp_path / "ok.parquet").created_by.startswith("abtest")
    assert_frame_equal(pl.read_parquet(tmp_path / "odd.parquet"), df)
    assert_frame_equal(pl.read_parquet(tmp_path / "ok.parquet"), ok)


def test_bad_buffers_are_rejected(tmp_path):
    from abtest import _native
    col = ("a", "i64", 10, 0, (0, 0), (0, 0), (0, 0), None)  # no values buffer
    with pytest.raises(ValueError, match="values buffer"):
        _native.parquet_write_tables([(str(tmp_path / "x.parquet"), "", 10, [col])])
    with pytest.raises(ValueError, match="kind"):
        _native.parquet_write_tables([(str(tmp_path / "x.parquet"), "", 0, [("a", "i128", 0, 0, (0, 0), (0, 0),
                                                                            (0, 0), None)])])
    with pytest.raises(OSError, match="nodir"):
        write_parquet_tables({"t": pl.DataFrame({"a": [1]})}, tmp_path / "nodir")
