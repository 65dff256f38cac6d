"""`convert(path, out_dir)`: decode a trace once and write its canonical tables (one file each) plus
meta.json, the layout of abtest.trace.cache (what `abtest trace convert` writes)."""
from __future__ import annotations

import os

from abtest.trace import cache
from abtest.trace.model import TraceData
from abtest.trace.readers import read_trace


def convert(path: str | os.PathLike, out_dir: str | os.PathLike, *, fmt: str = "parquet") -> TraceData:
    """Decode `path` and write its canonical tables (one file each, `fmt` "parquet" or "ipc": Arrow IPC) +
    meta.json into out_dir, as `abtest trace convert` does (layout of abtest.trace.cache; written
    atomically). Returns the TraceData written."""
    data = read_trace(path)
    cache.write_tables(data, out_dir, fmt=fmt)
    return data
