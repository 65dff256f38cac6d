"""Fast parquet writing of abtest's tables: polars frames -> Arrow buffers -> the Rust writer.

`write_parquet_tables(tables, out_dir)` writes `<out_dir>/<name>.parquet` for every frame. Column
chunks of all tables are encoded in parallel on Rust threads with the GIL released
(`abtest._native.parquet_write_tables`, native/src/parquet_write.rs); the files read back with polars
and pyarrow to the identical frames (the Arrow schema travels in the `ARROW:schema` key, as polars and
pyarrow write it, so Categorical stays Categorical and UInt8 stays UInt8).

Supported dtypes: Int8/16/32/64, UInt8/16/32/64, Float32/64, Boolean, String, Binary, Categorical
(the physical codes + the categories; no re-hashing) and List of a numeric type. A table holding any
other dtype (Enum, temporal types, Decimal, Struct, Array, nested lists, Null, Object, ...) or no
column at all is written by polars' own writer instead (`DataFrame.write_parquet`, LZ4, no
statistics): never a wrong file.

Buffers are passed to Rust as (address, size) of live pyarrow buffers; this module keeps the owning
arrays referenced until the call returns.
"""
from __future__ import annotations

import base64
import os
from pathlib import Path

import polars as pl
import pyarrow as pa

from abtest import _native
from abtest.trace.decoded import DecodedTable

_NUMERIC = {
    pl.Int8: "i8", pl.Int16: "i16", pl.Int32: "i32", pl.Int64: "i64",
    pl.UInt8: "u8", pl.UInt16: "u16", pl.UInt32: "u32", pl.UInt64: "u64",
    pl.Float32: "f32", pl.Float64: "f64",
}
_CODES = {pl.UInt8: "cat8", pl.UInt16: "cat16", pl.UInt32: "cat32"}

ROW_GROUP_ROWS = 1 << 20  # rows per row group
PAGE_ROWS = 1 << 17  # rows per data page


def _buf(b: pa.Buffer | None) -> tuple[int, int]:
    return (0, 0) if b is None else (b.address, b.size)


def _array(s: pl.Series) -> pa.Array:
    a = s.to_arrow()
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    return a


def _col(name: str, kind: str, a: pa.Array, keep: list, child=None) -> tuple:
    """Column tuple for the Rust side (layout: native/src/parquet_write.rs `extract_col`)."""
    keep.append(a)
    bufs = a.buffers()
    validity = bufs[0] if a.null_count else None
    if kind in ("str", "bin"):
        values, data = bufs[1], bufs[2]
    elif kind == "list":
        values, data = bufs[1], None
    else:
        values, data = bufs[1], None
    return (name, kind, len(a), a.offset, _buf(validity), _buf(values), _buf(data), child)


def _column_spec(name: str, s: pl.Series, keep: list, cats: dict | None = None) -> tuple | None:
    """Column tuple, or None when the dtype is not supported (the table then goes to polars).

    cats: {Categorical dtype: its categories column tuple}, shared by the columns of one write (all
    Categorical columns of abtest's tables use the global categories: exported once per write)."""
    dt = s.dtype
    base = dt.base_type()
    kind = _NUMERIC.get(base)
    if kind is not None:
        return _col(name, kind, _array(s), keep)
    if base == pl.Boolean:
        return _col(name, "bool", _array(s), keep)
    if base == pl.String:
        return _col(name, "str", _array(s), keep)
    if base == pl.Binary:
        return _col(name, "bin", _array(s), keep)
    if base == pl.Categorical:
        codes = s.to_physical()
        kind = _CODES.get(codes.dtype)
        if kind is None:
            return None
        child = cats.get(dt) if cats is not None else None
        if child is None:
            arr = _array(dt.categories.to_series())
            if arr.null_count or not pa.types.is_large_string(arr.type):
                return None
            child = _col("", "str", arr, keep)
            if cats is not None:
                cats[dt] = child
        return _col(name, kind, _array(codes), keep, child=child)
    if base == pl.List and dt.inner.base_type() in _NUMERIC:
        a = _array(s)
        if not pa.types.is_large_list(a.type):
            return None
        child = a.values  # the whole child array; the list offsets index into it
        return _col(name, "list", a, keep, child=_col("element", _NUMERIC[dt.inner.base_type()], child, keep))
    return None


def _arrow_schema(df: pl.DataFrame) -> str:
    """base64 of the IPC-serialised Arrow schema, the `ARROW:schema` value polars and pyarrow write."""
    return base64.b64encode(df.head(0).to_arrow().schema.serialize().to_pybytes()).decode()


def _polars_write(df: pl.DataFrame, path: Path) -> None:
    df.write_parquet(path, compression="lz4", statistics=False)


def write_parquet_tables(tables: dict[str, pl.DataFrame | DecodedTable], out_dir: str | os.PathLike, *,
                         compression: str = "uncompressed", row_group_rows: int = ROW_GROUP_ROWS,
                         page_rows: int = PAGE_ROWS, ints: str = "auto", threads: int = 0) -> dict[str, int]:
    """Write `out_dir/<name>.parquet` for every table; returns {name: file size in bytes}.

    compression: "uncompressed" (default: with the dictionary / delta encodings the files are 1.16x the
    size of polars' LZ4 ones on the bench trace, and LZ4 costs more write and read time than it saves in
    bytes; docs/ingest.md) or "lz4_raw" (LZ4 block per page). ints: "auto" (delta for sorted 64-bit, dictionary for small spans, else PLAIN;
    see native/src/parquet_ints.rs), "delta" or "plain". threads: 0 = one per CPU.
    Tables with a dtype the Rust writer does not cover are written by polars (module docstring).
    A DecodedTable (the trace.dat decoder's arrays, abtest.trace.decoded) is written from those arrays.
    """
    out_dir = Path(out_dir)
    jobs, names, keep = [], [], []
    cats: dict = {}
    sizes: dict[str, int] = {}
    for name, df in tables.items():
        path = out_dir / f"{name}.parquet"
        if isinstance(df, DecodedTable):
            schema = _arrow_schema(pl.DataFrame(schema=df.polars_schema()))
            jobs.append((str(path), schema, df.height, df.writer_columns(keep)))
            names.append(name)
            continue
        cols = [] if df.width else None
        for c, s in zip(df.columns, df.iter_columns()):
            spec = _column_spec(c, s, keep, cats)
            if spec is None:
                cols = None
                break
            cols.append(spec)
        if cols is None:
            _polars_write(df, path)
            sizes[name] = path.stat().st_size
            continue
        jobs.append((str(path), _arrow_schema(df), df.height, cols))
        names.append(name)
    if jobs:
        written = _native.parquet_write_tables(jobs, compression, row_group_rows, page_rows, ints, threads)
        sizes.update(zip(names, written))
    del keep
    return sizes
