"""Dispatch: a path -> TraceData, unwrapping gzip/zip/zstd containers and canonicalising tables."""
from __future__ import annotations

import gzip
import io
import mmap
import os
import zipfile
import zlib
from pathlib import Path

from abtest.trace.decoded import DecodedTable
from abtest.trace.detect import detect_format
from abtest.trace.errors import TraceFormatError
from abtest.trace.model import TraceData
from abtest.trace.schema import canonicalize, event_counts, sample_counts, unchanged_by_canonicalize

# Bumped whenever a reader's output changes: part of the cache key.
READER_VERSION = "9"  # 9: canonical integer fields coerced (schema._coerce_integers)

_TEXT_FORMATS = ("ftrace-text", "atrace", "atrace-z", "systrace-html")


def _unwrap(path: Path, data: bytes, fmt: str) -> tuple[bytes, str]:
    """Decompress gzip / zip / zstd wrappers; return (inner bytes, wrapper name)."""
    if fmt == "gzip":
        try:
            return gzip.decompress(data), "gzip"
        except (OSError, EOFError, zlib.error) as e:
            raise TraceFormatError(path, f"corrupt or truncated gzip stream ({e})", expected="a complete gzip file") from e
    if fmt == "zstd":
        import zstandard
        try:
            return zstandard.ZstdDecompressor().decompressobj().decompress(data), "zstd"
        except zstandard.ZstdError as e:
            raise TraceFormatError(path, f"corrupt zstd stream ({e})") from e
    if fmt == "zip":
        try:
            zf = zipfile.ZipFile(io.BytesIO(data))
        except zipfile.BadZipFile as e:
            raise TraceFormatError(path, f"corrupt zip archive ({e})") from e
        candidates = []
        for info in zf.infolist():
            if info.is_dir():
                continue
            with zf.open(info) as f:
                head = f.read(4096)
            if detect_format(head) not in (None, "zip"):
                candidates.append((info, detect_format(head)))
        # prefer binary traces over text members (e.g. a README next to trace.dat)
        order = ["trace.dat", "perfetto", "gzip", "zstd", "atrace-z", "systrace-html", "atrace", "ftrace-text"]
        candidates.sort(key=lambda c: order.index(c[1]) if c[1] in order else 99)
        if not candidates:
            names = ", ".join(i.filename for i in zf.infolist()) or "(empty archive)"
            raise TraceFormatError(path, f"zip archive holds no trace (members: {names})",
                                   expected="a member in a supported trace format")
        return zf.read(candidates[0][0]), f"zip:{candidates[0][0].filename}"
    return data, ""


def read_trace(path: str | os.PathLike, *, for_writing: bool = False) -> TraceData:
    """Decode any supported trace file into canonical tables + metadata (no cache).

    for_writing=True: tables of a trace.dat that `canonicalize()` leaves unchanged come back as
    `DecodedTable`s (the decoder's arrays, abtest.trace.decoded) instead of DataFrames; only the parquet
    writer (`cache.write_tables`) takes such TraceData. Same tables and meta otherwise."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such trace file") from None
    if size == 0:
        raise TraceFormatError(path, "file is empty", offset=0, expected="a trace")
    with open(path, "rb") as f:
        head = f.read(8192)
    fmt = detect_format(head)
    if fmt is None:
        raise TraceFormatError(path, f"unrecognised format (first bytes {head[:16]!r})", offset=0,
                               expected="trace.dat, ftrace text, systrace HTML, atrace, perfetto protobuf, gzip or zip")
    wrapper = ""
    if fmt in ("gzip", "zip", "zstd"):
        data, wrapper = _unwrap(path, path.read_bytes(), fmt)
        fmt = detect_format(data[:8192])
        if fmt in ("gzip", "zstd"):  # e.g. .tar-less double wrapping
            data, inner = _unwrap(path, data, fmt)
            wrapper += "+" + inner
            fmt = detect_format(data[:8192])
        if fmt is None:
            raise TraceFormatError(path, f"{wrapper} wrapper holds no recognisable trace", offset=0)
    else:
        with open(path, "rb") as f:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    raw, meta = _decode(path, data, fmt, for_writing)
    # A trace.dat carries the format of every event the kernel knows; only events that occur
    # become tables (so `require()` can say clearly which events were not recorded).
    raw = {name: df for name, df in raw.items() if df.height > 0}
    meta.setdefault("format", fmt)
    meta["wrapper"] = wrapper or None
    meta["source_path"] = str(path)
    meta["source_size"] = size
    for key, default in (("clock", None), ("lost_events", 0), ("lost_events_per_cpu", {}),
                         ("lost_events_exact", True), ("kernel", {}), ("platform", None), ("warnings", [])):
        meta.setdefault(key, default)
    # one key type for every reader, the one meta.json (the cache) gives back: the CPU number as a string
    meta["lost_events_per_cpu"] = {str(cpu): n for cpu, n in
                                   sorted(meta["lost_events_per_cpu"].items(), key=lambda kv: int(kv[0]))}
    kept = {name: t for name, t in raw.items() if isinstance(t, DecodedTable)}
    tables = canonicalize({name: t for name, t in raw.items() if name not in kept}, meta)
    tables.update(kept)
    _fill_span(tables, meta)
    meta["events"] = event_counts(tables)
    meta["samples"] = sample_counts(tables)
    return TraceData(tables=tables, meta=meta)


def _keep_decoded(name: str, table: DecodedTable) -> bool:
    return unchanged_by_canonicalize(name, table.polars_schema())


def _decode(path: Path, data, fmt: str, for_writing: bool) -> tuple[dict, dict]:
    if fmt == "trace.dat":
        from abtest.trace import tracedat
        return tracedat.read(path, data, keep_decoded=_keep_decoded if for_writing else None)
    if fmt == "perfetto":
        from abtest.trace import perfetto
        return perfetto.read(path, data)
    if fmt in _TEXT_FORMATS:
        from abtest.trace import ftrace_text
        return ftrace_text.read(path, data, fmt)
    raise TraceFormatError(path, f"no reader for format {fmt!r}")


def _fill_span(tables: dict, meta: dict) -> None:
    """start_ns / end_ns: first and last event timestamp over all tables (unless the reader knew better)."""
    starts, ends, cpus = [], [], []
    need_cpus = not meta.get("cpus")  # the max CPU number is scanned only when the reader did not know
    for df in tables.values():
        if isinstance(df, DecodedTable):  # sorted by ts, never empty
            first, last = df.ts_bounds()
            starts.append(first)
            ends.append(last)
            if need_cpus and "cpu" in df.columns:
                cpus.append(df.max_of("cpu"))
            continue
        if df.is_empty() or "ts" not in df.columns:
            continue
        starts.append(df["ts"].min())
        ends.append(df["ts"].max())
        if need_cpus and "cpu" in df.columns:
            m = df["cpu"].max()
            if m is not None:
                cpus.append(int(m))
    meta.setdefault("start_ns", int(min(starts)) if starts else None)
    meta.setdefault("end_ns", int(max(ends)) if ends else None)
    if meta.get("start_ns") is None and starts:
        meta["start_ns"] = int(min(starts))
    if meta.get("end_ns") is None and ends:
        meta["end_ns"] = int(max(ends))
    if not meta.get("cpus"):
        meta["cpus"] = (max(cpus) + 1) if cpus else 0
