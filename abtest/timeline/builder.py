"""One trace (or two, A vs B) -> one .perfetto-trace file for the Perfetto UI.

    from abtest import Trace
    from abtest.timeline.builder import write_timeline
    summary = write_timeline(Trace("trace.dat", platform="plat.yml"), "out.perfetto-trace")

The file holds, in this order: the trace's own scheduling data (a perfetto input's original packets, kept as
they are; any other format's canonical tables as ftrace bundles, abtest.timeline.ftrace), then abtest's
derived tracks on their own packet sequence (abtest.timeline.derived, abtest.timeline.tracks) under one group
track per trace. Timestamps are the trace's own clock values in ns, unchanged (perfetto's BOOTTIME domain):
a ts in trace_processor equals the ts abtest's tables hold.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import polars as pl

from abtest.timeline import derived, ftrace
from abtest.timeline.tracks import (
    Track,
    descriptor_packet,
    event_packets,
    sequence_start_packet,
    track_uuid,
)

TRACK_UUID_BASE = 0xAB000  # abtest's track uuids in a file: from here (a perfetto SDK's are 64-bit hashes)


@dataclass
class TimelineSummary:
    """What was written: path, bytes, seconds taken, the ftrace rows written per table (empty when the
    original perfetto packets were kept), the derived tracks (name -> kind) and events per kind, notes
    (derived tracks left out, and why), the clock statement."""

    path: Path
    size: int
    seconds: float
    clock: str
    source_packets: str
    ftrace_rows: dict = field(default_factory=dict)
    tracks: dict = field(default_factory=dict)
    events: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)


def clock_statement(meta: dict) -> str:
    clock = meta.get("clock") or "not stated by the trace"
    return (
        f"timestamps: the trace's own clock ({clock}), ns, written unchanged in perfetto's BOOTTIME domain "
        "(a ts in trace_processor equals the ts of abtest's tables)"
    )


def _keeps_original(trace) -> bool:
    """A perfetto file read directly (not from inside gzip/zip): its packets are copied as they are."""
    m = trace.meta
    return m.get("format") == "perfetto" and not m.get("wrapper") and Path(trace.path).is_file()


def root_track(scope: str, name: str, description: str, rank: int = 0) -> Track:
    return Track(track_uuid(scope, "root"), name, "group", None, None, description, rank)


def derived_tracks(
    trace,
    *,
    scope: str,
    title: str,
    shift_ns: int = 0,
    top_tasks: int = derived.DEFAULT_TOP_TASKS,
    rail_channels: dict | None = None,
    rank: int = 0,
) -> derived.Tracks:
    """Every derived track of ``trace`` under one group named ``title``."""
    root = root_track(scope, title, clock_statement(trace.meta), rank)
    out = derived.Tracks(scope=scope, root=root.uuid, shift_ns=shift_ns, tracks=[root])
    derived.add_all(trace, out, top_tasks=top_tasks, rail_channels=rail_channels)
    return out


def encode_derived(parts: list[derived.Tracks]) -> tuple[bytes, dict]:
    """Descriptors and events of every Tracks, on the derived sequence: (bytes, events per kind)."""
    events = pl.concat([p.frame() for p in parts], how="vertical_relaxed")
    tracks = [t for p in parts for t in p.tracks]
    # on the wire, small uuids (3-byte varints in every event instead of 9): TRACK_UUID_BASE + index
    small = {t.uuid: TRACK_UUID_BASE + i for i, t in enumerate(tracks)}
    tracks = [replace(t, uuid=small[t.uuid], parent=None if t.parent is None else small[t.parent]) for t in tracks]
    events = events.with_columns(pl.col("track").replace_strict(small, return_dtype=pl.UInt64))
    first = int(events["ts"].min()) if events.height else 0
    body = [sequence_start_packet(first)] + [descriptor_packet(t) for t in tracks]
    body.append(event_packets(events, first))
    kinds = {1: "slices", 3: "instants", 4: "counter samples"}
    counts = {kinds[k]: int(n) for k, n in events.group_by("type").len().iter_rows() if k in kinds}
    return b"".join(body), counts


def write_timeline(
    trace,
    out: str | os.PathLike,
    *,
    top_tasks: int = derived.DEFAULT_TOP_TASKS,
    rail_channels: dict | None = None,
    title: str | None = None,
) -> TimelineSummary:
    """Write ``trace`` (a Trace, possibly a window of one) and its derived tracks as one perfetto trace."""
    t0 = time.perf_counter()
    out = Path(out)
    meta = trace.meta
    if _keeps_original(trace):
        source = Path(trace.path).read_bytes()
        rows, how = {}, "the perfetto input's own packets, as recorded"
    else:
        tables = {n: trace.df(n) for n in ftrace.WRITTEN_TABLES if n in trace.tables}
        source, rows = ftrace.ftrace_packets(tables, meta)
        how = f"ftrace bundles written from abtest's tables ({meta.get('format')} input)"
    name = title or f"abtest: {Path(trace.path).name}"
    part = derived_tracks(trace, scope=str(trace.path), title=name, top_tasks=top_tasks, rail_channels=rail_channels)
    body, counts = encode_derived([part])
    tmp = out.with_name(out.name + ".part")
    with open(tmp, "wb") as f:
        f.write(source)
        f.write(body)
    tmp.replace(out)
    return TimelineSummary(
        out,
        out.stat().st_size,
        time.perf_counter() - t0,
        clock_statement(meta),
        how,
        rows,
        {t.name: t.kind for t in part.tracks},
        counts,
        part.notes,
    )
