"""`convert(path, out_dir)`: decode a trace once and write its canonical tables (one parquet file each)
plus meta.json, the layout of abtest.trace.cache (what `abtest trace convert` writes)."""
from __future__ import annotations

import os

from abtest.trace import cache
from abtest.trace.model import TraceData
from abtest.trace.readers import read_trace


def convert(path: str | os.PathLike, out_dir: str | os.PathLike) -> TraceData:
    """Decode `path` and write its canonical tables (one parquet file each) + meta.json into out_dir, as
    `abtest trace convert` does (layout of abtest.trace.cache; written atomically). Returns the TraceData
    written: its meta, and tables that may be DecodedTables (abtest.trace.decoded), not for analysis.

    A trace.dat's tables that `canonicalize()` leaves unchanged go from the decoder's arrays to the
    parquet writer without polars frames; the files read back to the frames `Trace(path).df()` gives.
    """
    data = read_trace(path, for_writing=True)
    cache.write_tables(data, out_dir)
    return data
