"""Kernel A's and kernel B's iteration on one timeline (the anchor perfetto lacks for comparing two traces,
perfetto issue #2780).

Both traces are written as track-event tracks (two traces' ftrace data would merge into one set of CPUs), each
under a group named by its label, B shifted in time so that both start together: B's ts + (start_A - start_B)
(the start of a trace = its first event, the workload's start for an iteration that abtest collected). Per
side: CPU n running (slices named by the running task, args pid), CPU n frequency (kHz), CPU n idle state
(-1 = active) and every derived track of abtest.timeline.derived, the power channels included.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import polars as pl

from abtest.timeline import derived
from abtest.timeline.builder import (
    TimelineSummary,
    clock_statement,
    encode_derived,
    root_track,
)
from abtest.timeline.tracks import annotations, thinned


def add_sched_tracks(trace, out: derived.Tracks) -> None:
    """CPU n running (task slices), CPU n frequency, CPU n idle state, as track events."""
    from abtest.analysis.placement import df_task_intervals

    if "sched_switch" in trace.tables:
        iv = df_task_intervals(trace.df("sched_switch", windowed=False), start_ns=trace.start_ns, end_ns=trace.end_ns)
        iv = iv.filter(pl.col("dur") > 0).with_columns(pl.col("comm").cast(pl.Utf8).fill_null("?"))
        for (cpu,), part in iv.partition_by("cpu", as_dict=True, maintain_order=True).items():
            args = pl.Series([annotations(pid=int(p)) for p in part["pid"].to_list()], dtype=pl.Binary)
            out.slices(
                out.cpu_group(int(cpu)),
                f"CPU {cpu} running",
                part["ts"],
                part["dur"],
                part["comm"],
                args,
                rank=0,
                description="the task running on the CPU (sched_switch), named by comm, args pid",
            )
    for table, col, name, unit in (
        ("cpu_frequency", "frequency_khz", "frequency", "kHz"),
        ("cpu_idle", "state", "idle state", "state"),
    ):
        if table not in trace.tables:
            continue
        df = trace.df(table).select(pl.col("cpu").cast(pl.Int32), "ts", pl.col(col).cast(pl.Int64))
        if table == "cpu_idle":
            df = df.with_columns(pl.when(pl.col(col) == 4294967295).then(-1).otherwise(pl.col(col)).alias(col))
        steps = thinned(df.sort("cpu", "ts"), "cpu", col)
        for (cpu,), part in steps.partition_by("cpu", as_dict=True, maintain_order=True).items():
            out.counter(
                out.cpu_group(int(cpu)),
                f"CPU {cpu} {name}",
                part["ts"],
                part[col],
                unit=unit,
                rank=3,
                description=f"{table} events ({unit}{'; -1 = active' if table == 'cpu_idle' else ''})",
            )


def side_tracks(
    trace, *, label: str, what: str, shift_ns: int, rank: int, top_tasks: int, mapping: tuple = (None, None)
) -> derived.Tracks:
    """One side's tracks under the group "<label>: <what>". mapping: (rail_channels, origin) of the side's
    iteration (abtest.analysis.power_source.mapping_of; (None, None): the trace's own or built in)."""
    scope = f"side:{label}"
    desc = (
        f"{clock_statement(trace.meta)}; shifted by {shift_ns} ns so that this trace starts with the other "
        f"side's (source: {trace.path})"
    )
    root = root_track(scope, f"{label}: {what}", desc, rank)
    out = derived.Tracks(scope=scope, root=root.uuid, shift_ns=shift_ns, tracks=[root], prefix=f"{label} ")
    add_sched_tracks(trace, out)
    derived.add_all(trace, out, top_tasks=top_tasks, rail_channels=mapping[0], rail_origin=mapping[1])
    return out


def write_ab_timeline(
    trace_a,
    trace_b,
    out: str | os.PathLike,
    *,
    label_a: str,
    label_b: str,
    what_a: str = "",
    what_b: str = "",
    top_tasks: int = derived.DEFAULT_TOP_TASKS,
    mappings: tuple = ((None, None), (None, None)),
) -> TimelineSummary:
    """A's and B's traces side by side in one perfetto trace, aligned at their starts (module docstring).
    mappings: each side's (rail_channels, origin), as side_tracks takes it."""
    t0 = time.perf_counter()
    out = Path(out)
    start_a, start_b = int(trace_a.start_ns or 0), int(trace_b.start_ns or 0)
    a = side_tracks(
        trace_a,
        label=label_a,
        what=what_a or Path(trace_a.path).name,
        shift_ns=0,
        rank=0,
        top_tasks=top_tasks,
        mapping=mappings[0],
    )
    b = side_tracks(
        trace_b,
        label=label_b,
        what=what_b or Path(trace_b.path).name,
        shift_ns=start_a - start_b,
        rank=1,
        top_tasks=top_tasks,
        mapping=mappings[1],
    )
    body, counts = encode_derived([a, b])
    tmp = out.with_name(out.name + ".part")
    tmp.write_bytes(body)
    tmp.replace(out)
    clock = (
        f"A: {clock_statement(trace_a.meta)}; B shifted by {start_a - start_b} ns to start at A's first event "
        f"({start_a} ns)"
    )
    return TimelineSummary(
        out,
        out.stat().st_size,
        time.perf_counter() - t0,
        clock,
        "track events written from abtest's tables (both sides)",
        {},
        {t.name: t.kind for t in a.tracks + b.tracks},
        counts,
        [f"{label_a}: {n}" for n in a.notes] + [f"{label_b}: {n}" for n in b.notes],
    )
