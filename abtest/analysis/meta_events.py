"""Kernel events carried as text in the trace ("meta events", as LISA calls them).

Tools write the text of a kernel event into the trace buffer through trace_marker (``print`` /
``tracing_mark_write``) or trace_printk (``bprint`` / ``bputs``) when the kernel itself would not emit
it at that moment. devlib, under LISA and Workload Automation, writes the frequency of every CPU when
tracing starts and stops::

    print: tracing_mark_write: cpu_frequency_devlib:        state=950000 cpu_id=0

(newer tools write the kernel's own name, ``cpu_frequency: state=1100000 cpu_id=1``), because the kernel
emits ``cpu_frequency`` only when cpufreq *changes* the frequency: a CPU whose frequency never changes
during the trace has no kernel event at all. abtest's thermal sampler writes zone temperatures the same
way (``thermal_temperature: thermal_zone=<type> id=<n> temp_prev=<m°C> temp=<m°C>``).

A marker whose text is ``<name>: [positional] key=value key=value ...`` is read as an event ``<name>``;
the ``*_devlib`` names stand for the kernel event without the suffix. Such rows are *state samples*: the
value in force at that time, from userspace. Analyses use them as initial state (or fill-in) and mark
them ``source = "marker"``; they never count them as kernel events (a marker is not a frequency
transition). Work is done over the canonical ``marker`` table (abtest.trace.schema), vectorised.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import polars as pl

__all__ = [
    "MARKER_ALIASES",
    "df_meta_events",
    "trace_meta_events",
    "meta_cpu_frequency",
    "meta_cpu_idle",
    "meta_thermal_temperature",
]

# kernel event -> names it is written under in markers
MARKER_ALIASES: dict[str, tuple[str, ...]] = {
    "cpu_frequency": ("cpu_frequency", "cpu_frequency_devlib"),
    "cpu_idle": ("cpu_idle", "cpu_idle_devlib"),
    "thermal_temperature": ("thermal_temperature",),
}

_INT_RE = r"(-?\d+)"
_WORD_RE = r"(\S+)"


def df_meta_events(marker: pl.DataFrame, event: str, fields: Mapping[str, pl.DataType]) -> pl.DataFrame:
    """Rows of the ``marker`` table that carry event ``event`` (under any name of MARKER_ALIASES), with the
    requested ``fields`` parsed from ``key=value`` pairs.

    Returns ``ts`` (ns), ``marker_cpu`` (the CPU whose buffer held the marker, not an event field),
    ``marker_pid`` (the writer), ``name`` (the name used in the text) and one column per field, cast to
    its dtype (null when the field is absent or not of that type). Rows lacking every requested field
    are dropped (text that merely starts with the name). Events: marker.
    """
    names = MARKER_ALIASES.get(event, (event,))
    alt = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    head = rf"^\s*(?:tracing_mark_write:\s*)?({alt}):(?:\s|$)"
    txt = pl.col("text").cast(pl.Utf8)
    m = marker.filter(txt.str.contains(head))
    if m.is_empty():
        return pl.DataFrame(
            schema={"ts": pl.Int64, "marker_cpu": pl.Int32, "marker_pid": pl.Int32, "name": pl.Utf8, **dict(fields)}
        )
    cols = [
        pl.col("ts").cast(pl.Int64),
        pl.col("cpu").cast(pl.Int32).alias("marker_cpu"),
        (pl.col("pid") if "pid" in m.columns else pl.lit(None)).cast(pl.Int32).alias("marker_pid"),
        txt.str.extract(head, 1).alias("name"),
    ]
    for f, dt in fields.items():
        pat = _INT_RE if dt.is_integer() else _WORD_RE
        raw = txt.str.extract(rf"(?:^|\s){re.escape(f)}={pat}", 1)
        cols.append(raw.cast(dt, strict=False).alias(f))
    out = m.select(cols)
    return out.filter(pl.any_horizontal([pl.col(f).is_not_null() for f in fields]))


def trace_meta_events(trace, event: str, fields: Mapping[str, pl.DataType]) -> pl.DataFrame:
    """df_meta_events over a Trace's whole ``marker`` table (empty frame when it has none)."""
    if "marker" not in trace.tables:
        return df_meta_events(
            pl.DataFrame(schema={"ts": pl.Int64, "cpu": pl.Int32, "pid": pl.Int32, "text": pl.Utf8}), event, fields
        )
    return df_meta_events(trace.df("marker", windowed=False), event, fields)


def meta_cpu_frequency(marker: pl.DataFrame) -> pl.DataFrame:
    """Marker-carried cpu_frequency: ``ts, cpu, frequency_khz, source="marker"`` (cpu from cpu_id, kHz from
    state), in the canonical cpu_frequency shape."""
    ev = df_meta_events(marker, "cpu_frequency", {"state": pl.Int64, "cpu_id": pl.Int64})
    return ev.drop_nulls(["state", "cpu_id"]).select(
        "ts",
        pl.col("cpu_id").cast(pl.Int32).alias("cpu"),
        pl.col("state").alias("frequency_khz"),
        pl.lit("marker").alias("source"),
    )


def meta_cpu_idle(marker: pl.DataFrame) -> pl.DataFrame:
    """Marker-carried cpu_idle: ``ts, cpu, state, source="marker"`` (state -1 = active; the kernel's
    4294967295 is normalised as in the canonical cpu_idle table)."""
    ev = df_meta_events(marker, "cpu_idle", {"state": pl.Int64, "cpu_id": pl.Int64})
    return ev.drop_nulls(["state", "cpu_id"]).select(
        "ts",
        pl.col("cpu_id").cast(pl.Int32).alias("cpu"),
        pl.when(pl.col("state") == 4294967295).then(-1).otherwise(pl.col("state")).cast(pl.Int64).alias("state"),
        pl.lit("marker").alias("source"),
    )


def meta_thermal_temperature(marker: pl.DataFrame) -> pl.DataFrame:
    """Marker-carried thermal_temperature: ``ts, thermal_zone, id, temp (m°C), source="marker"``."""
    ev = df_meta_events(marker, "thermal_temperature", {"thermal_zone": pl.Utf8, "id": pl.Int64, "temp": pl.Int64})
    return ev.drop_nulls(["temp"]).select("ts", "thermal_zone", "id", "temp", pl.lit("marker").alias("source"))
