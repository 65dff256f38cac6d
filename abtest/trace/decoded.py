"""`DecodedTable`: one table as the trace.dat decoder returned it, for writing to parquet without polars.

`abtest trace convert` and the parquet cache write a table that `canonicalize()` would leave unchanged
(sched_switch, sched_wakeup, sched_stat_runtime, ... on a trace.dat) straight from the decoder's arrays:
no polars Series, no Categorical cast, no gather of the codes. The parquet file reads back (polars,
pyarrow) to the same frame as the table `read_trace()` gives; a Categorical column's dictionary page
holds the decoder's own dictionary (strings in order of first use in the table) instead of polars'
global category order, so the files are not byte-identical to those written from frames.

Columns (native/src/tracedat_columns.rs): numpy integer arrays, ("cat", codes u32, dictionary offsets
i64, dictionary bytes) and ("utf8" | "binary", offsets i64, bytes). Tables with list columns stay frames.
A column may also be a `RunColumn` (native/src/tracedat_lazy.rs): a numeric or Categorical column of a
table merged from several CPUs, held as its per-CPU runs and the merge plan; the parquet writer gathers
its values row group by row group, so the merged column is never built in memory (same file content).
"""
from __future__ import annotations

import numpy as np
import polars as pl

from abtest._native import RunColumn

# numpy integer dtype of a decoder column -> (polars dtype, the parquet writer's column kind)
_INTS = {np.dtype(t): (d, k) for t, d, k in (
    ("int8", pl.Int8, "i8"), ("int16", pl.Int16, "i16"), ("int32", pl.Int32, "i32"), ("int64", pl.Int64, "i64"),
    ("uint8", pl.UInt8, "u8"), ("uint16", pl.UInt16, "u16"), ("uint32", pl.UInt32, "u32"),
    ("uint64", pl.UInt64, "u64"))}
INT_DTYPES = {t: d for t, (d, _k) in _INTS.items()}  # numpy integer dtype -> polars dtype
_TEXT_TAGS = {"utf8": ("str", pl.String), "binary": ("bin", pl.Binary)}
# a RunColumn's writer kind -> polars dtype
_RUN_KINDS = {k: d for _t, (d, k) in _INTS.items()} | {"cat32": pl.Categorical}


def writable(columns: dict) -> bool:
    """True when every decoder column is of a kind DecodedTable writes (integers, text, categorical)."""
    for col in columns.values():
        if isinstance(col, RunColumn):
            if col.kind not in _RUN_KINDS:
                return False
        elif isinstance(col, np.ndarray):
            if col.dtype not in _INTS:
                return False
        elif col[0] != "cat" and col[0] not in _TEXT_TAGS:
            return False
    return True


class DecodedTable:
    """A table held as the decoder's column arrays (see module docstring).

    Args:
        columns: {column name: decoder column} in table order; `ts` first (Int64 ns, sorted).
    """

    def __init__(self, columns: dict):
        self.columns = columns
        self.height = len(columns["ts"])

    def ts_bounds(self) -> tuple[int, int] | None:
        """(first, last) timestamp in ns (the decoder emits tables sorted by ts); None when empty."""
        ts = self.columns["ts"]
        return (int(ts[0]), int(ts[-1])) if len(ts) else None

    def max_of(self, name: str) -> int | None:
        """Largest value of an integer column (e.g. `cpu`); None when empty."""
        col = self.columns[name]
        if isinstance(col, RunColumn):
            return col.max()
        return int(col.max()) if len(col) else None

    def polars_schema(self) -> dict[str, pl.DataType]:
        """The dtypes the table has as a polars frame (what `tracedat._frames` builds)."""
        schema = {}
        for name, col in self.columns.items():
            if isinstance(col, RunColumn):
                schema[name] = _RUN_KINDS[col.kind]
            elif isinstance(col, np.ndarray):
                schema[name] = _INTS[col.dtype][0]
            elif col[0] == "cat":
                schema[name] = pl.Categorical
            else:
                schema[name] = _TEXT_TAGS[col[0]][1]
        return schema

    def writer_columns(self, keep: list) -> list[tuple]:
        """Column tuples for `_native.parquet_write_tables` (layout: native/src/parquet_write.rs
        `extract_col`); the arrays are appended to `keep`, which must outlive the write."""
        out = []
        for name, col in self.columns.items():
            keep.append(col)
            if isinstance(col, RunColumn):
                out.append((name, col))  # gathered from its runs by the writer, row group by row group
            elif isinstance(col, np.ndarray):
                out.append((name, _INTS[col.dtype][1], self.height, 0, (0, 0), _buf(col), (0, 0), None))
            elif col[0] == "cat":
                codes, offsets, data = col[1], col[2], col[3]
                if codes.dtype != np.uint32:
                    raise TypeError(f"column {name}: categorical codes of {codes.dtype}, expected uint32")
                child = ("", "str", len(offsets) - 1, 0, (0, 0), _buf(offsets), _buf(data), None)
                out.append((name, "cat32", self.height, 0, (0, 0), _buf(codes), (0, 0), child))
            else:
                offsets, data = col[1], col[2]
                kind = _TEXT_TAGS[col[0]][0]
                out.append((name, kind, self.height, 0, (0, 0), _buf(offsets), _buf(data), None))
        return out


def _buf(a: np.ndarray) -> tuple[int, int]:
    """(address, size in bytes) of a contiguous numpy array; (0, 0) when it is empty."""
    if not a.flags.c_contiguous:
        raise ValueError("decoder arrays are contiguous")
    return (a.ctypes.data, a.nbytes) if a.nbytes else (0, 0)
