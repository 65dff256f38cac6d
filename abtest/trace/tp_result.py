"""trace_processor QueryResult proto -> polars DataFrame, column-wise with numpy (no per-row Python loop).

A QueryResult carries column_names and batches; each batch lists one cell type per cell (row-major) and
the values of each type in order: varint_cells (int64), float64_cells, string_cells (one string, cells
separated by NUL) and blob_cells. SQLite typing is per cell, so a column may mix types: integers with
floats become Float64, anything with strings becomes String, NULL cells become polars nulls.
"""

from __future__ import annotations

import numpy as np
import polars as pl

CELL_NULL, CELL_VARINT, CELL_FLOAT64, CELL_STRING, CELL_BLOB = 1, 2, 3, 4, 5


def _batch_columns(batch, n_cols: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, list, list]]:
    cells = np.fromiter(batch.cells, dtype=np.int8, count=len(batch.cells))
    varints = np.fromiter(batch.varint_cells, dtype=np.int64, count=len(batch.varint_cells))
    floats = np.fromiter(batch.float64_cells, dtype=np.float64, count=len(batch.float64_cells))
    text = batch.string_cells
    if isinstance(text, bytes):  # invalid UTF-8 in the trace's strings: the proto decoder gives the raw bytes
        text = text.decode("utf-8", errors="replace")
    strings = text.split("\0")  # each cell NUL-terminated: one spare "" at the end
    blobs = list(batch.blob_cells)
    # index of each cell within its type's value array
    idx = np.zeros(len(cells), dtype=np.int64)
    for kind in (CELL_VARINT, CELL_FLOAT64, CELL_STRING, CELL_BLOB):
        mask = cells == kind
        idx[mask] = np.arange(int(mask.sum()))
    out = []
    for c in range(n_cols):
        out.append((cells[c::n_cols], idx[c::n_cols], varints, floats, strings, blobs))
    return out


def _column(parts) -> pl.Series:
    types = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int8)
    kinds = set(np.unique(types).tolist()) - {CELL_NULL}
    n = len(types)
    if not kinds:
        return pl.Series([None] * n, dtype=pl.Null)
    nulls = np.flatnonzero(types == CELL_NULL)
    if kinds <= {CELL_VARINT}:
        chunks = []
        for t, i, v, *_ in parts:
            col = np.zeros(len(t), dtype=np.int64)
            m = t == CELL_VARINT
            col[m] = v[i[m]]
            chunks.append(col)
        s = pl.Series(np.concatenate(chunks))
        return s.scatter(nulls, None) if len(nulls) else s
    if kinds <= {CELL_VARINT, CELL_FLOAT64}:
        chunks = []
        for t, i, v, f, *_ in parts:
            col = np.full(len(t), np.nan)
            m = t == CELL_VARINT
            col[m] = v[i[m]]
            m = t == CELL_FLOAT64
            col[m] = f[i[m]]
            chunks.append(col)
        s = pl.Series(np.concatenate(chunks))
        return s.scatter(nulls, None) if len(nulls) else s
    # strings (or blobs, or mixtures): build an object column
    values: list = []
    for t, i, v, f, strs, blobs in parts:
        col = np.empty(len(t), dtype=object)
        for kind, src in ((CELL_VARINT, v), (CELL_FLOAT64, f), (CELL_STRING, strs), (CELL_BLOB, blobs)):
            m = np.flatnonzero(t == kind)
            if len(m):
                picked = np.asarray(src, dtype=object)[i[m]] if kind in (CELL_STRING, CELL_BLOB) else src[i[m]]
                col[m] = [str(x) for x in picked] if kind != CELL_STRING and kinds != {kind} else list(picked)
        values.extend(col.tolist())
    if kinds == {CELL_BLOB}:
        return pl.Series(values, dtype=pl.Binary)
    return pl.Series(values, dtype=pl.String)


def to_polars(result) -> pl.DataFrame:
    """Convert a (merged) perfetto.protos.QueryResult into a polars DataFrame with its column names."""
    names = list(result.column_names)
    if not names:
        return pl.DataFrame()
    per_col: list[list] = [[] for _ in names]
    for batch in result.batch:
        if not len(batch.cells):
            continue
        for c, part in enumerate(_batch_columns(batch, len(names))):
            per_col[c].append(part)
    data = {}
    for name, parts in zip(names, per_col):
        data[name] = _column(parts).alias(name)
    return pl.DataFrame(list(data.values()))
