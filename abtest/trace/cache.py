"""Directories of decoded tables: the content-keyed cache behind `Trace`, and what `abtest trace convert`
writes.

Layout of one directory (documented in README):
    <dir>/meta.json            metadata (see abtest.trace.model.TraceData)
    <dir>/<table>.parquet      one file per canonical table (`trace convert`, `Trace.to_dir`), or
    <dir>/<table>.arrow        in the cache: Arrow IPC, uncompressed, memory-mapped when read back
    <dir>/.complete            written last; an entry without it is ignored and rebuilt

Both are written by polars (tables in parallel threads). Parquet: uncompressed, no column statistics
(the fastest polars writes on the bench trace; docs/ingest.md). The cache uses Arrow IPC because a first
`Trace()` open writes it and every later open maps it: writing is a copy of the columns (about half the
time of the parquet write) and reading back costs no decoding.

Cache root: $ABTEST_CACHE_DIR, else $XDG_CACHE_HOME/abtest, else ~/.cache/abtest.
Key: blake2b-128 of the file's bytes + the reader version, so an edited file or a new reader
never serves stale tables. The key is remembered (<root>/keys/) by the file's path and identity (device,
inode, size, mtime), so an unchanged file is read once, not at every open.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl

from abtest.trace.model import TraceData
from abtest.trace.readers import READER_VERSION
from abtest.trace.text_lines import plain_printk_enabled

# table file suffix per format
SUFFIX = {"parquet": ".parquet", "ipc": ".arrow"}


TS_SORTED = "ts_sorted.json"  # in a cache entry: the tables whose ts is in time order


def cache_root() -> Path:
    env = os.environ.get("ABTEST_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "abtest"


# a file's content key is remembered by its identity, so that opening the same unchanged file again does not
# read it all: hashing a 4.76 GB trace takes 3.6 s with its pages cached, 11 s from disk
KEYS_DIR = "keys"
# a key is remembered only for a file last modified at least this long ago (ns): a later write then changes
# its mtime even on a file system that keeps mtimes in steps of up to 2 s
SETTLED_NS = 2_000_000_000


def content_key(path: str | os.PathLike) -> str:
    """blake2b-128 hex digest of the file content + reader version. Remembered in the cache root under
    keys/ by the file's real path and identity (device, inode, size, mtime in ns; the rule make and git use
    to tell an unchanged file): an unchanged file is hashed once, a file written again (new mtime or inode)
    is hashed again. A file modified in the last SETTLED_NS is hashed every time."""
    real = os.path.realpath(path)
    st = os.stat(real)
    identity = _identity(st)
    note = _key_note(real)
    known = _read_key_note(note)
    if (
        known is not None
        and known.get("path") == real
        and known.get("file") == identity
        and known.get("reader") == _reader_version()
        and isinstance(known.get("key"), str)
    ):
        return known["key"]
    key = hash_content(real)
    if time.time_ns() - st.st_mtime_ns >= SETTLED_NS and _identity(os.stat(real)) == identity:
        _write_key_note(note, {"path": real, "file": identity, "reader": _reader_version(), "key": key})
    return key


def _identity(st: os.stat_result) -> list[int]:
    """What tells an unchanged file (as a key note stores it): device, inode, size, mtime (ns)."""
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]


def hash_content(path: str | os.PathLike) -> str:
    """blake2b-128 hex digest of the file's bytes (1 MiB chunks) + the reader version: the cache key."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    h.update(_reader_version().encode())
    return h.hexdigest()


def _reader_version() -> str:
    """READER_VERSION, marked when the environment changes what the readers give (ABTEST_PLAIN_PRINTK=0)."""
    return READER_VERSION + ("" if plain_printk_enabled() else "+plain-printk-off")


def _key_note(real_path: str) -> Path:
    return cache_root() / KEYS_DIR / (hashlib.blake2b(real_path.encode(), digest_size=16).hexdigest() + ".json")


def _read_key_note(note: Path) -> dict | None:
    try:
        if note.is_symlink():
            return None
        doc = json.loads(note.read_text(encoding="utf-8"))
        return doc if isinstance(doc, dict) else None
    except (OSError, ValueError):
        return None  # none yet, or damaged: hash the file


def _write_key_note(note: Path, doc: dict) -> None:
    """Written atomically, never through a symlink; a cache root that cannot be written is fine."""
    from abtest.safe_io import UnsafePathError, write_file_no_follow

    try:
        note.parent.mkdir(parents=True, exist_ok=True)
        write_file_no_follow(note.parent, note.name, json.dumps(doc))
    except (OSError, UnsafePathError):
        pass


def write_table(df: pl.DataFrame, path: Path, fmt: str) -> None:
    """One table as a file (`fmt`: "ipc", the cache's, or "parquet")."""
    if fmt == "ipc":
        # one record batch: a memory-mapped column is then one array, which numpy and the compiled simulators
        # read in place (polars would cut it into batches of ~130 k rows, and each reader would copy them together)
        df.write_ipc(path, compression="uncompressed", record_batch_size=max(df.height, 1))
    else:
        df.write_parquet(path, compression="uncompressed", statistics=False)


def write_tables(data: TraceData, out_dir: str | os.PathLike, *, fmt: str = "parquet") -> Path:
    """Write every table (`fmt`: "parquet" or "ipc") + meta.json into out_dir atomically (temp dir, then
    rename). Tables are written by polars, several at once (its writers release the GIL)."""
    out_dir = Path(out_dir)
    with building(out_dir) as tmp:
        jobs = sorted(data.tables.items(), key=lambda kv: -kv[1].height)  # the largest first
        with ThreadPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 1) or 1) as pool:
            list(pool.map(lambda kv: write_table(kv[1], tmp / f"{kv[0]}{SUFFIX[fmt]}", fmt), jobs))
        complete(tmp, data.meta, data.tables if fmt == "ipc" else None)
    return out_dir


@contextlib.contextmanager
def building(out_dir: Path):
    """A temporary directory beside `out_dir` to write an entry into; renamed to `out_dir` (replacing it)
    when the block ends, removed if it raises."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        yield tmp
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def complete(tmp: Path, meta: dict, ipc_tables: dict[str, pl.DataFrame] | None) -> None:
    """meta.json, for the cache (`ipc_tables`: its tables) which tables a time range can be read from by
    binary search, and the mark that the entry is complete."""
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True, default=str))
    if ipc_tables is not None:
        sorted_ts = sorted(n for n, t in ipc_tables.items() if "ts" in t.columns and t["ts"].flags["SORTED_ASC"])
        (tmp / TS_SORTED).write_text(json.dumps(sorted_ts))
    (tmp / ".complete").touch()


def is_complete(entry: Path) -> bool:
    return (entry / ".complete").exists() and (entry / "meta.json").exists()


def read_meta(entry: Path) -> dict:
    return json.loads((entry / "meta.json").read_text())


def table_path(entry: Path, name: str) -> Path:
    """The file of table `name` in `entry` (Arrow IPC in the cache, parquet in a convert directory)."""
    ipc = entry / f"{name}{SUFFIX['ipc']}"
    return ipc if ipc.exists() else entry / f"{name}{SUFFIX['parquet']}"


def table_names(entry: Path) -> list[str]:
    return sorted({p.name[: -len(s)] for s in SUFFIX.values() for p in entry.glob(f"*{s}")})


def read_table(entry: Path, name: str) -> pl.DataFrame:
    """Table `name` of `entry`. An IPC file of the cache is memory-mapped (abtest._native.ipc_map; polars
    2.1's read_ipc copies the file): numeric columns are views of the mapping, their pages read from the page
    cache when an analysis touches them (columns never read cost no memory), names are decoded. Entries are
    written to a temporary directory and renamed, never rewritten in place, so a mapping stays valid."""
    path = table_path(entry, name)
    if path.suffix == SUFFIX["ipc"]:
        return read_ipc_mapped(path)
    return pl.read_parquet(path)


def read_ipc_mapped(path: Path, columns: list[str] | None = None) -> pl.DataFrame:
    """An Arrow IPC file as a frame of views of its memory mapping (read where files cannot be mapped);
    `columns`: only those it has (the others are never read)."""
    from abtest import _native

    try:
        table = _native.ipc_map(str(path), columns=columns)
    except OSError:  # a file system that cannot map files
        df = pl.read_ipc(path)
        return df if columns is None else df.select(c for c in columns if c in df.columns)
    return pl.DataFrame(table)


def read_table_range(entry: Path, name: str, lo_ns: int | None, hi_ns: int | None) -> pl.DataFrame:
    """The rows of table `name` with ts in [lo_ns, hi_ns) (None: open end), reading only those rows of an
    IPC file (memory-mapped, cut by binary search before polars sees it, so the names of the other rows are
    never decoded; ts must be sorted: the decoders' tables are, the entry's ts_sorted.json lists them) and
    copying nothing else; other tables are filtered after a whole read."""
    path = table_path(entry, name)
    if path.suffix == SUFFIX["ipc"] and name in _ts_sorted(entry):
        from abtest import _native

        try:
            return pl.DataFrame(_native.ipc_map(str(path), lo_ns, hi_ns)).rechunk()
        except OSError:  # a file system that cannot map files: read whole and filtered below
            df = pl.read_ipc(path)
    else:
        df = read_table(entry, name)
    if "ts" not in df.columns:
        return df
    keep = pl.lit(True)
    if lo_ns is not None:
        keep = keep & (pl.col("ts") >= lo_ns)
    if hi_ns is not None:
        keep = keep & (pl.col("ts") < hi_ns)
    return df.filter(keep)


def _ts_sorted(entry: Path) -> list[str]:
    try:
        return json.loads((entry / TS_SORTED).read_text())
    except (OSError, ValueError):
        return []  # an entry written before the file existed: tables are filtered


def scan_table(entry: Path, name: str) -> pl.LazyFrame:
    path = table_path(entry, name)
    return pl.scan_ipc(path) if path.suffix == SUFFIX["ipc"] else pl.scan_parquet(path)
