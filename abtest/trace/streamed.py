"""The first open of a long trace.dat, decoded in rounds straight into its cache entry: memory stays bounded
whatever the trace length.

A plain trace.dat file of at least ``ABTEST_DECODE_ROUND_MB`` MiB (default 512) is decoded in rounds of about
that much ring-buffer data (`tracedat.read_rounds`; the plan is native/tracedat/src/rounds.rs). Each round's
rows go through the ingestion driver every reader uses (abtest.trace.readers.Ingest: canonicalised, the
sched_switch chain breaks counted, carried from one round to the next) and are written as one part file per
table; once every round is in, each table's parts become its Arrow IPC file (one record batch per round, copied
from the parts' mappings), and the driver's finishing steps (span, checks, counts) read the written tables,
memory-mapped (readers.FINISH_COLUMNS). Tables and meta are the whole decode's
(tests/test_streamed_open.py compares them on the shared trace.dat files, in rounds of a few pages). A trace
whose timestamps go backwards on a CPU cannot be cut into rounds in time order: it is decoded whole.

``ABTEST_DECODE_PIECE_KB`` sets the unit of decoding work (default 8192 KiB; a round decodes again the pieces
that hold rows past its end).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import shutil
import sys
from pathlib import Path

import polars as pl

from abtest.trace import cache, tracedat
from abtest.trace.detect import detect_format
from abtest.trace.limits import Limits
from abtest.trace.readers import FINISH_COLUMNS, Ingest

ROUND_MB_ENV = "ABTEST_DECODE_ROUND_MB"
PIECE_KB_ENV = "ABTEST_DECODE_PIECE_KB"
DEFAULT_ROUND_MB = 512.0
DEFAULT_PIECE_KB = 8192.0


def _env_bytes(name: str, default: float, unit: int) -> int:
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        raise ValueError(f"${name}={os.environ[name]!r}: expected a number") from None
    return max(int(value * unit), 1)


def round_bytes() -> int:
    """Ring-buffer bytes (inflated) a round decodes, and the file size from which a first open uses rounds."""
    return _env_bytes(ROUND_MB_ENV, DEFAULT_ROUND_MB, 1 << 20)


def piece_bytes() -> int:
    return _env_bytes(PIECE_KB_ENV, DEFAULT_PIECE_KB, 1 << 10)


def applies(path: Path) -> bool:
    """A plain trace.dat file (not one inside an archive or a compressed stream) of at least a round."""
    try:
        if path.stat().st_size < round_bytes():
            return False
        with open(path, "rb") as f:
            return detect_format(f.read(8192)) == "trace.dat"
    except OSError:
        return False


@contextlib.contextmanager
def progress_bar(path: Path):
    """A progress callback for write_entry: a bar on stderr when it is a terminal (bytes of ring-buffer data
    decoded), else None."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn(f"decoding {path.name} in rounds"),
        BarColumn(),
        DownloadColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task("decode", total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def write_if_long(path: Path, entry: Path, *, fmt: str = "ipc") -> dict | None:
    """The first open's (and `trace convert`'s) way in: a long trace.dat (applies) decoded in rounds into
    `entry` with a progress bar; the meta written, or None when the file is to be decoded whole."""
    if not applies(path):
        return None
    with progress_bar(path) as progress:
        return write_entry(path, entry, fmt=fmt, progress=progress)


class _NotInOrder(Exception):
    """A CPU's timestamps go backwards: rounds cannot keep the time order."""


def write_entry(
    path: str | os.PathLike, entry: Path, *, fmt: str = "ipc", limits: Limits | None = None, progress=None
) -> dict | None:
    """Decode the trace.dat at `path` in rounds into the directory `entry`: the cache's layout (`fmt` "ipc"),
    or `abtest trace convert`'s ("parquet"), written atomically as cache.write_tables does. Returns the meta
    written; None, and nothing written, when the file's timestamps go backwards on a CPU.
    `progress(done, total)`: ring-buffer bytes decoded so far and in all, after each round."""
    path = Path(path)
    size = path.stat().st_size
    try:
        with cache.building(entry) as tmp:
            parts_dir = tmp / "parts"
            parts_dir.mkdir()
            parts: dict[str, list[Path]] = {}
            ingest = Ingest(fmt="trace.dat", path=path, size=size)
            unsorted: set[str] = set()  # tables with a round whose ts is not flagged sorted
            rounds = 0

            def emit(raw: dict[str, pl.DataFrame]) -> None:
                nonlocal rounds
                for name, df in ingest.add(raw).items():
                    part = parts_dir / f"{name}.{rounds:06d}{cache.SUFFIX['ipc']}"
                    cache.write_table(df, part, "ipc")
                    parts.setdefault(name, []).append(part)
                    if "ts" in df.columns and not df["ts"].flags["SORTED_ASC"]:
                        unsorted.add(name)
                rounds += 1

            with open(path, "rb") as f:
                data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            meta = tracedat.read_rounds(
                path, data, emit, round_bytes=round_bytes(), piece_bytes=piece_bytes(), limits=limits, progress=progress
            )
            if meta is None:
                raise _NotInOrder
            for name, ps in parts.items():
                _join_parts(ps, tmp / f"{name}{cache.SUFFIX['ipc']}")
            shutil.rmtree(parts_dir)
            meta["decoded_in_rounds"] = rounds
            # what Ingest.finish reads of the joined tables (the span, the CPUs, marker kinds, row counts): not the
            # names, whose codes polars would otherwise turn into its own, table by table, all at once
            tables = {
                name: cache.read_ipc_mapped(tmp / f"{name}{cache.SUFFIX['ipc']}", columns=FINISH_COLUMNS)
                for name in parts
            }
            # rounds follow each other in time: a table sorted in every round is sorted (not read again to know)
            tables = {
                name: df.with_columns(df["ts"].set_sorted()) if "ts" in df.columns and name not in unsorted else df
                for name, df in tables.items()
            }
            done = ingest.finish(tables, meta)
            meta, sorted_tables = done.meta, done.tables if fmt == "ipc" else None
            del tables, done  # their mappings: a mapped page read stays resident while its mapping lives
            if fmt == "parquet":
                for name in parts:
                    _ipc_to_parquet(tmp / f"{name}{cache.SUFFIX['ipc']}", tmp / f"{name}{cache.SUFFIX['parquet']}")
            cache.complete(tmp, meta, sorted_tables)
    except _NotInOrder:
        return None
    finally:
        _give_back_memory()
    return meta


def _give_back_memory() -> None:
    """Return to the system what the rounds freed but the allocators keep for reuse: pyarrow's pool (the
    joins) and glibc's heaps (the decoder's pieces; abtest._native.release_freed_memory). After the first open
    of the 100 M-event trace the process otherwise kept ~270 MB it no longer used while the analyses ran
    (357 -> 88 MB anonymous memory; docs/analysis-speed.md)."""
    if "pyarrow" in sys.modules:
        sys.modules["pyarrow"].default_memory_pool().release_unused()
    from abtest import _native

    _native.release_freed_memory()


def _join_parts(parts: list[Path], out: Path) -> None:
    """One table's round parts as its IPC file `out`: one record batch per round, read and written one at a
    time (pyarrow; a part's batch is read into memory, not mapped, and let go once written), so that joining
    holds about one round whatever the table's length. The name columns get one dictionary for the whole
    file (an IPC file has one per column): the rounds' names, unified first, and each round's codes mapped
    onto them."""
    if len(parts) == 1:
        os.replace(parts[0], out)
        return
    import pyarrow as pa

    schemas = [_ipc_reader(p).schema for p in parts]
    if any(s != schemas[0] for s in schemas):  # columns that differ between rounds: polars aligns them
        frames = [cache.read_ipc_mapped(p) for p in parts]
        cache.write_table(pl.concat(frames, how="diagonal_relaxed"), out, "ipc")
    else:
        schema = schemas[0]
        coded = [i for i, f in enumerate(schema) if pa.types.is_dictionary(f.type)]
        names = {i: _unified_names(parts, i) for i in coded}
        # the one dictionary each coded column gets in the file, of the schema's type
        typed = {i: names[i].cast(schema.field(i).type.value_type) for i in coded}
        with pa.OSFile(str(out), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            for p in parts:
                reader = _ipc_reader(p)
                for k in range(reader.num_record_batches):
                    batch = reader.get_batch(k)
                    cols = [
                        (_recoded(batch.column(i), names[i], typed[i]) if i in names else batch.column(i))
                        for i in range(batch.num_columns)
                    ]
                    writer.write_batch(pa.RecordBatch.from_arrays(cols, schema=schema))
                del reader
    for p in parts:
        p.unlink()


def _ipc_reader(path: Path):
    """pyarrow's reader of an IPC file that reads each batch into memory when asked (not a mapping: the pages
    of a mapping stay resident while it lives)."""
    import pyarrow as pa

    return pa.ipc.open_file(pa.OSFile(str(path)))


def _unified_names(parts: list[Path], column: int):
    """Every name of dictionary column `column` over the parts' batches, each once, in order of first use
    (as large strings: pyarrow's lookups take no string views)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    seen = []
    for p in parts:
        reader = _ipc_reader(p)
        seen += [_lookup_type(reader.get_batch(k).column(column).dictionary) for k in range(reader.num_record_batches)]
    return pc.unique(pa.concat_arrays(seen))


def _lookup_type(values):
    """String views as large strings (what pyarrow's compute functions take); other arrays as they are."""
    import pyarrow as pa

    return values.cast(pa.large_string()) if values.type == pa.string_view() else values


def _recoded(col, names, dictionary):
    """Dictionary column `col` coded into `names` (every name of col's dictionary is in it), with
    `dictionary` (the same names, of col's value type) as its dictionary."""
    import pyarrow as pa
    import pyarrow.compute as pc

    where = pc.index_in(_lookup_type(col.dictionary), value_set=names).cast(col.type.index_type)
    return pa.DictionaryArray.from_arrays(pc.take(where, col.indices), dictionary, ordered=col.type.ordered)


def _ipc_to_parquet(src: Path, dst: Path) -> None:
    """A table's IPC file as parquet (uncompressed, no statistics, as cache.write_table writes it), one row
    group per record batch, read one at a time (pyarrow: polars' string views become large strings, which
    polars reads back as they were); the IPC file is removed. A column pyarrow cannot write that way is
    written by polars instead, from the whole mapped table."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    reader = _ipc_reader(src)
    target = pa.schema([f.with_type(_parquet_type(f.type)) for f in reader.schema], metadata=reader.schema.metadata)
    try:
        with pq.ParquetWriter(str(dst), target, compression="none", write_statistics=False) as writer:
            for i in range(reader.num_record_batches):
                writer.write_batch(reader.get_batch(i).cast(target))
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        dst.unlink(missing_ok=True)
        cache.write_table(cache.read_ipc_mapped(src), dst, "parquet")
    del reader
    src.unlink()


def _parquet_type(t):
    """An Arrow type pyarrow's parquet writer takes: string views (also as dictionary values or list items)
    as large strings."""
    import pyarrow as pa

    if t == pa.string_view():
        return pa.large_string()
    if pa.types.is_dictionary(t):
        return pa.dictionary(t.index_type, _parquet_type(t.value_type), t.ordered)
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(_parquet_type(t.value_type)))
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_parquet_type(t.value_type)))
    return t
