"""Dispatch: a path -> TraceData, opening containers by content (abtest.trace.archive); `Ingest`, the ingestion
driver of every path (this whole-file one and abtest.trace.streamed's rounds), canonicalises tables, adds BattOr
power samples, accounts what was not imported and checks the data's quality.

Every reader returns meta["import_errors"] / meta["non_event_content"] (abtest.trace.import_log) for what it
could not parse / recognised and skipped; `abtest trace info` prints them (`import_log.import_warnings`).
"""

from __future__ import annotations

import mmap
import os
import re
from pathlib import Path

import polars as pl

from abtest.trace import archive, import_log, quality
from abtest.trace.detect import ARCHIVES, STREAM_CODECS, detect_format
from abtest.trace.errors import TraceFormatError
from abtest.trace.limits import Limits, current
from abtest.trace.model import TraceData
from abtest.trace.schema import canonicalize, event_counts, sample_counts

# Bumped whenever a reader's output changes: part of the cache key.
# 17: trace_printk lines with a plain caller name read as bprint (ABTEST_PLAIN_PRINTK=0 marks the key), 0xADDR <ADDR>
# callers; the trace.dat decoder names fields_not_decoded;
# 16: perfetto ProcessTree packets -> table `process` (issue 38 item 7); 15: perf script text, trace_printk
# lines as bprint, funcgraph args/retaddr, timestamp outliers out of the span (issue 43); 14: text lines
# lacking a canonical field and rows with a null or negative CPU are import errors
# (schema._drop_unfit_rows, text_lines._require_fields); 13: perfetto extension packets named (field_76 ->
# frame_timeline_event); 12: the native decoders rewritten (same tables; the Trace cache holds Arrow IPC); 11:
# ingestion accounting (import_errors, process table) + canonical integer widths only in the analysed tables
READER_VERSION = "17"

_TEXT_FORMATS = ("ftrace-text", "atrace", "atrace-z", "systrace-html")
_EXPECTED = (
    "trace.dat, ftrace text, systrace HTML, atrace, perf script text, perfetto protobuf, a BattOr log, "
    "gzip/zstd/bzip2/xz, zip or tar"
)


def read_trace(
    path: str | os.PathLike, *, limits: Limits | None = None, fields_of: frozenset[str] | None = None
) -> TraceData:
    """Decode any supported trace file into canonical tables + metadata (no cache).

    limits: inflate / line limits (abtest.trace.limits; default: the environment's). fields_of: the raw event
    tables whose fields the caller reads (None: all). A trace.dat's other tables then keep only `ts` and `cpu`
    (the span, the event counts and the checks over timestamps stay the whole file's; meta["fields_not_decoded"]
    names them); the other formats decode everything."""
    path = Path(path)
    limits = limits or current()
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such trace file") from None
    if size == 0:
        raise TraceFormatError(path, "file is empty", offset=0, expected="a trace")
    with open(path, "rb") as f:
        head = f.read(8192)
    fmt = detect_format(head)
    _refuse_unknown(path, fmt, head)
    wrapper, label, members, battors, chosen = "", path, [], [], None
    if fmt in STREAM_CODECS or fmt in ARCHIVES:
        members = archive.open_members(path, path.read_bytes(), limits)
        battors = [(m.data, f"{archive.wrapper_name(m) or m.name}") for m in members if m.role == "battor"]
        chosen = archive.choose_trace(members)
        if chosen is None and not battors:
            corrupt = [m for m in members if m.role == "corrupt"]
            why = "; ".join(f"member {m.name or '(stream)'} is corrupt: {m.error}" for m in corrupt)
            raise TraceFormatError(
                path,
                f"{fmt} container holds no trace that reads ({why + '; ' if why else ''}"
                f"members: {archive.describe(members)})",
                offset=0,
                expected="a member in a supported trace format",
            )
        if chosen is None:  # a BattOr log alone (compressed or archived)
            data, fmt, wrapper = (
                battors[0][0],
                "battor",
                archive.wrapper_name(next(m for m in members if m.role == "battor")),
            )
            battors = battors[1:]
        else:
            data, fmt, wrapper = chosen.data, chosen.format, archive.wrapper_name(chosen)
            if chosen.name:
                label = f"{path} (member {chosen.name})"
    else:
        with open(path, "rb") as f:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    raw, meta = _decode(label, data, fmt, limits, fields_of)
    battors += meta.pop("_battor_texts", [])
    ingest = Ingest(fmt=fmt, path=path, size=size, wrapper=wrapper)
    return ingest.finish(ingest.add(raw), meta, battors=battors, members=members, chosen=chosen)


FINISH_COLUMNS = ["ts", "cpu", "event"]  # what Ingest.finish reads of a table (its row count comes with any)
# a warning of schema._coerce_integers: "<table>.<column>: <n> value(s) not an integer ... (first ...)"
_COERCED = re.compile(r"(\S+): (\d+) (value\(s\) not an integer .*)", re.S)


class Ingest:
    """The one ingestion driver: a decoder's raw tables -> TraceData, for the whole file (`read_trace`: one batch)
    and a long trace.dat decoded in rounds (abtest.trace.streamed: a batch a round, written in parts and read back,
    FINISH_COLUMNS only, for `finish`). `add` leaves out empty tables (a trace.dat has the format of every event the
    kernel knows: only events that occur become tables, so `require()` can say which were not recorded),
    canonicalises (abtest.trace.schema; its aliases, warnings and import errors kept over every batch) and counts
    the sched_switch chain breaks (quality.ChainBreaks); `finish` completes the meta and checks the tables."""

    def __init__(self, *, fmt: str, path: Path, size: int, wrapper: str = "") -> None:
        self._file = {"fmt": fmt, "path": path, "size": size, "wrapper": wrapper}  # what _base_meta says of the file
        self._canon: dict = {"event_aliases": {}}  # what canonicalize recorded: event_aliases, import_errors
        self._warnings: dict[str, list | None] = {}  # its warnings: a text, or "<table>.<column>": [n, rest]
        self._breaks = quality.ChainBreaks()

    def add(self, raw: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
        """A batch of raw tables (the whole file's, or a round's: later than the previous round's) canonicalised."""
        batch: dict = {}
        tables = canonicalize({name: df for name, df in raw.items() if df.height > 0}, batch)
        self._canon["event_aliases"].update(batch.get("event_aliases", {}))
        import_log.merge(self._canon, batch)
        for text in batch.get("warnings", []):  # a column's coercions in later batches: summed into the first's
            m = _COERCED.fullmatch(text)
            if m is None:
                self._warnings[text] = None
            elif m[1] in self._warnings:
                self._warnings[m[1]][0] += int(m[2])
            else:
                self._warnings[m[1]] = [int(m[2]), m[3]]
        self._breaks.add(tables.get("sched_switch"))
        return tables

    def finish(self, tables: dict[str, pl.DataFrame], meta: dict, battors=(), members=(), chosen=None) -> TraceData:
        """The canonical `tables` (every batch's) + the decoder's `meta` -> TraceData. `battors`: (bytes, source)
        of BattOr logs beside the trace; `members`, `chosen`: an archive's members and the one read."""
        _base_meta(meta, **self._file)
        meta.setdefault("event_aliases", {}).update(self._canon["event_aliases"])
        meta["warnings"] += [k if w is None else f"{k}: {w[0]} {w[1]}" for k, w in self._warnings.items()]
        import_log.merge(meta, self._canon)
        if members:
            _account_members(members, chosen, meta)
        _fill_span(tables, meta)  # the trace's span: BattOr samples beside it (perhaps on their own clock) stay out
        if battors:
            _add_battor(tables, meta, list(battors))
        _account_decoder(tables, meta)
        quality.check(tables, meta, self._breaks.gaps())
        meta["events"] = event_counts(tables)
        meta["samples"] = sample_counts(tables)
        meta.setdefault("import_errors", {})
        meta.setdefault("non_event_content", {})
        return TraceData(tables=tables, meta=meta)


def _base_meta(meta: dict, *, fmt: str, wrapper: str, path: Path, size: int) -> None:
    """The keys every reader's meta has, from the decoder's own (in place)."""
    meta.setdefault("format", fmt)
    meta["wrapper"] = wrapper or None
    meta["source_path"] = str(path)
    meta["source_size"] = size
    for key, default in (
        ("clock", None),
        ("lost_events", 0),
        ("lost_events_per_cpu", {}),
        ("lost_events_exact", True),
        ("kernel", {}),
        ("platform", None),
        ("warnings", []),
    ):
        meta.setdefault(key, default)
    # one key type for every reader, the one meta.json (the cache) gives back: the CPU number as a string
    meta["lost_events_per_cpu"] = {
        str(cpu): n for cpu, n in sorted(meta["lost_events_per_cpu"].items(), key=lambda kv: int(kv[0]))
    }


def _refuse_unknown(path: Path, fmt: str | None, head: bytes) -> None:
    if fmt is None:
        raise TraceFormatError(path, f"unrecognised format (first bytes {head[:16]!r})", offset=0, expected=_EXPECTED)
    if fmt == "json":
        raise TraceFormatError(
            path,
            "a JSON document (Chrome trace events / Perfetto UI JSON): abtest reads kernel "
            "traces, not JSON trace events",
            offset=0,
            expected=_EXPECTED,
        )


def _decode(path, data, fmt: str, limits: Limits, fields_of: frozenset[str] | None = None) -> tuple[dict, dict]:
    if fmt == "trace.dat":
        from abtest.trace import tracedat

        return tracedat.read(path, data, limits=limits, fields_of=fields_of)
    if fmt == "perfetto":
        from abtest.trace import perfetto

        return perfetto.read(path, data, limits=limits)
    if fmt in _TEXT_FORMATS:
        from abtest.trace import ftrace_text

        return ftrace_text.read(path, data, fmt)
    if fmt == "perf-script":
        from abtest.trace import perf_script

        return perf_script.read(path, data)
    if fmt == "battor":
        from abtest.trace import battor

        frame, bmeta = battor.read_battor(bytes(data))
        meta = {"format": "battor", "warnings": bmeta.pop("warnings"), "battor": [_battor_summary(bmeta, str(path))]}
        import_log.merge(meta, bmeta)
        return {"power_rail": frame}, meta
    raise TraceFormatError(path, f"no reader for format {fmt!r}")


def _battor_summary(bmeta: dict, source: str) -> dict:
    keep = (
        "sample_rate_hz",
        "measured_sample_rate_hz",
        "samples",
        "duration_s",
        "voltage_range_mv",
        "current_range_ma",
        "gain",
        "negative_current_samples",
        "clock",
    )
    return {
        "source": source,
        **{k: bmeta[k] for k in keep if k in bmeta},
        "sync_markers": len(bmeta.get("sync_markers", [])),
    }


def _add_battor(tables: dict, meta: dict, sources: list[tuple[bytes, str]]) -> None:
    """BattOr logs found beside the trace (archive members, systrace HTML blocks) -> rows of ``power_rail``,
    aligned to the trace clock when the trace allows it (abtest.trace.battor.align_to_trace)."""
    from abtest.trace import battor

    frames = []
    for data, source in sources:
        frame, bmeta = battor.read_battor(data)
        frame, _clock = battor.align_to_trace(frame, bmeta, tables)
        for kind_map in ("import_errors",):
            for entry in (bmeta.get(kind_map) or {}).values():
                for ex in entry["examples"]:
                    ex["source"] = source
        import_log.merge(meta, bmeta)
        meta["warnings"] += [f"{source}: {w}" for w in bmeta["warnings"]]
        meta.setdefault("battor", []).append(_battor_summary(bmeta, source))
        frames.append(frame)
    if "power_rail" in tables and isinstance(tables["power_rail"], pl.DataFrame):
        frames.insert(0, tables["power_rail"])
    tables["power_rail"] = pl.concat(frames, how="diagonal_relaxed").sort("ts", maintain_order=True)


def _account_members(members: list, chosen, meta: dict) -> None:
    """Archive members other than the one read: accounted (abtest.trace.archive, rule 4)."""
    for m in members:
        if m is chosen or m.role == "battor":
            continue
        if m.role == "corrupt":
            import_log.add_error(
                meta,
                "archive_member_corrupt",
                1,
                [import_log.example(None, source=m.name or "(stream)", detail=m.error)],
            )
        elif m.role in ("trace", "json"):
            why = (
                f"{m.format} trace member not read: member {chosen.name!r} was chosen (richest format, then largest)"
                if m.role == "trace" and chosen is not None
                else "Chrome JSON trace events are not read"
            )
            import_log.add_error(
                meta, "archive_member_not_imported", 1, [import_log.example(None, source=m.name, detail=why)]
            )
        else:
            import_log.add_skipped(
                meta,
                "archive_member",
                1,
                [
                    import_log.example(
                        m.data[:80] if m.format == "ftrace-text" else None,
                        source=m.name,
                        detail=f"{m.format or 'binary'} content, {m.size} bytes, not a trace",
                    )
                ],
            )
    meta["archive"] = {"members": [m.summary() for m in members], "read": chosen.name if chosen is not None else None}


def _account_decoder(tables: dict, meta: dict) -> None:
    """Binary readers: content decoded but not understood becomes import_errors kinds (counted around the
    decoders' own output): trace.dat events whose format the file lacks or that does not parse
    (`unknown_event_<id>` tables), perfetto packet kinds abtest does not import and ftrace events of field
    ids outside perfetto's schema (`ftrace_event_<id>`)."""
    for name, df in tables.items():
        for prefix, kind, detail in (
            (
                "unknown_event_",
                "event_format_unparsed",
                "the file has no usable format for this event id: records kept as raw bytes in table {name}",
            ),
            (
                "ftrace_event_",
                "ftrace_event_unknown_field_id",
                "perfetto FtraceEvent field id outside the schema: fields kept as field_<n> in table {name}",
            ),
        ):
            if name.startswith(prefix):
                ev_id = name[len(prefix) :]
                why = next((w for w in meta.get("warnings", []) if f"(id {ev_id})" in w), None)
                import_log.add_error(meta, kind, df.height, [import_log.example(why, detail=detail.format(name=name))])
    if meta.get("format") == "perfetto":
        perf = meta.get("perfetto") or {}
        for packet, n in sorted((perf.get("packets_not_decoded") or {}).items()):
            import_log.add_error(
                meta,
                f"perfetto_packet_not_imported.{packet}",
                int(n),
                [import_log.example(None, detail=f"TracePacket field {packet}: not imported by abtest")],
            )


def _fill_span(tables: dict, meta: dict) -> None:
    """start_ns / end_ns: first and last event timestamp over all tables (unless the reader knew better)."""
    starts, ends, cpus = [], [], []
    need_cpus = not meta.get("cpus")  # the max CPU number is scanned only when the reader did not know
    for df in tables.values():
        if df.is_empty() or "ts" not in df.columns:
            continue
        lo, hi = df["ts"].min(), df["ts"].max()
        if lo is not None:  # a table without times (function_graph text without its TIME column) has null ts
            starts.append(lo)
            ends.append(hi)
        if need_cpus and "cpu" in df.columns:
            m = df["cpu"].max()
            if m is not None:
                cpus.append(int(m))
    outliers = quality.timestamp_outliers(tables) if starts else None
    if outliers is not None:  # kept in their tables, left out of the span (docs/ingest-policy.md)
        _account_outliers(meta, outliers)
        starts, ends = [outliers["body_start_ns"]], [outliers["body_end_ns"]]
    if meta.get("start_ns") is None and starts:
        meta["start_ns"] = int(min(starts))
    if meta.get("end_ns") is None and ends:
        meta["end_ns"] = int(max(ends))
    meta.setdefault("start_ns", None)
    meta.setdefault("end_ns", None)


def _account_outliers(meta: dict, outliers: dict) -> None:
    """meta["timestamp_outliers"] and import_errors ``timestamp_outlier`` (one example per flagged event shown,
    with its table and time)."""
    meta["timestamp_outliers"] = outliers
    body = f"{outliers['body_start_ns'] / 1e9:.6f}..{outliers['body_end_ns'] / 1e9:.6f} s"
    import_log.add_error(
        meta,
        "timestamp_outlier",
        outliers["count"],
        [
            import_log.example(
                f"{ex['table']} at ts {ex['ts']} ns ({ex['ts'] / 1e9:.9f} s)",
                detail=f"far outside the trace's body ({body}): kept in its table, left out of the span",
            )
            for ex in outliers["examples"]
        ],
    )
