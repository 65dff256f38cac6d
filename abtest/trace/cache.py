"""Content-keyed parquet cache of decoded traces.

Layout of one entry (also the layout `abtest trace convert` writes, documented in README):
    <dir>/meta.json            metadata (see abtest.trace.model.TraceData)
    <dir>/<table>.parquet      one file per canonical table
    <dir>/.complete            written last; an entry without it is ignored and rebuilt

Cache root: $ABTEST_CACHE_DIR, else $XDG_CACHE_HOME/abtest, else ~/.cache/abtest.
Key: blake2b-128 of the file's bytes + the reader version, so an edited file or a new reader
never serves stale tables.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import polars as pl

from abtest.trace.model import TraceData
from abtest.trace.parquet_write import write_parquet_tables
from abtest.trace.readers import READER_VERSION


def cache_root() -> Path:
    env = os.environ.get("ABTEST_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "abtest"


def content_key(path: str | os.PathLike) -> str:
    """blake2b-128 hex digest of the file content (1 MiB chunks) + reader version."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    h.update(READER_VERSION.encode())
    return h.hexdigest()


def write_tables(data: TraceData, out_dir: str | os.PathLike) -> Path:
    """Write tables + meta.json into out_dir atomically (temp dir, then rename).

    Tables are written by abtest's parquet writer (`abtest.trace.parquet_write`: all tables at once on
    Rust threads; tables with a dtype it does not cover go to polars' writer); layout in docs/ingest.md.
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        write_parquet_tables(data.tables, tmp)
        (tmp / "meta.json").write_text(json.dumps(data.meta, indent=1, sort_keys=True, default=str))
        (tmp / ".complete").touch()
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def is_complete(entry: Path) -> bool:
    return (entry / ".complete").exists() and (entry / "meta.json").exists()


def read_meta(entry: Path) -> dict:
    return json.loads((entry / "meta.json").read_text())


def table_path(entry: Path, name: str) -> Path:
    return entry / f"{name}.parquet"


def table_names(entry: Path) -> list[str]:
    return sorted(p.stem for p in entry.glob("*.parquet"))


def scan_table(entry: Path, name: str) -> pl.LazyFrame:
    return pl.scan_parquet(table_path(entry, name))
