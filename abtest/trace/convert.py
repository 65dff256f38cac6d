"""`convert(path, out_dir)`: decode a trace once and write its canonical tables (one file each) plus
meta.json, the layout of abtest.trace.cache (what `abtest trace convert` writes). A long trace.dat is
decoded in rounds (abtest.trace.streamed), so that memory stays bounded whatever its length."""

from __future__ import annotations

import os
from pathlib import Path

from abtest.trace import cache, streamed
from abtest.trace.readers import read_trace


def convert(path: str | os.PathLike, out_dir: str | os.PathLike, *, fmt: str = "parquet") -> dict:
    """Decode `path` and write its canonical tables (one file each, `fmt` "parquet" or "ipc": Arrow IPC) +
    meta.json into out_dir, as `abtest trace convert` does (layout of abtest.trace.cache; written
    atomically). Returns the meta written."""
    meta = streamed.write_if_long(Path(path), Path(out_dir), fmt=fmt)
    if meta is not None:
        return meta
    data = read_trace(path)
    cache.write_tables(data, out_dir, fmt=fmt)
    return data.meta
