"""Named trace instances of a trace.dat (tracefs `instances/NAME`, `trace-cmd record -B NAME`,
`trace-cmd extract -B NAME [-t]`): each instance has its own per-CPU ring buffers, clock and saved
statistics, and shares the file's event formats.

Every buffer is decoded on its own (tracedat.read decodes a view of the layout per buffer); the tables
of all buffers are then merged by event name, in timestamp order (ties: the top buffer first, then the
instances in file order), with a column `instance` (the instance name; null for the top buffer), as
abtest's text reader does with trace-cmd report's `NAME:` line prefix. Lost events and ring-buffer
statistics add up over the buffers; meta["instances"] lists the names (sorted, as the text reader lists
them), meta["instance_buffers"] gives each instance's clock, per-event counts and lost events, in file
order.
"""
from __future__ import annotations

import dataclasses

import polars as pl

from abtest.trace.tracedat_layout import Instance, Layout


def instance_view(lay: Layout, inst: Instance) -> Layout:
    """The layout as the decoder sees one instance: its CPU data, statistics and clock; no layout warnings
    or deferred sections (those belong to the file and are reported / checked with the top buffer)."""
    return dataclasses.replace(lay, cpu_data=inst.cpu_data, chunks=inst.chunks, cpustats=inst.cpustats,
                               clock=inst.clock or lay.clock, warnings=[], deferred_sections=[], instances=[],
                               buffer_label=f"instance {inst.name!r} ")


def _tagged(df: pl.DataFrame, name: str | None) -> pl.DataFrame:
    return df.with_columns(pl.lit(name, pl.String).alias("instance"))


def merge_buffers(top: tuple[dict, dict], parts: list[tuple[Instance, tuple[dict, dict]]], top_clock: str | None,
                  top_has_data: bool) -> tuple[dict, dict]:
    """(raw tables, meta) of the top buffer (no tables when the file holds only instances: `trace-cmd
    extract -B NAME` without -t) and of each instance -> one (raw tables, meta). Tables are DataFrames
    (the caller decodes without DecodedTables)."""
    buffers = [(None, top)] + [(inst.name, out) for inst, out in parts]
    meta = dict(top[1])
    names = sorted({name for _, (raw, _) in buffers for name in raw})
    raw = {}
    for name in names:
        frames = [_tagged(tables[name], inst) for inst, (tables, _m) in buffers if name in tables]
        df = pl.concat(frames, how="vertical") if len(frames) > 1 else frames[0]
        raw[name] = df.sort("ts", maintain_order=True) if len(frames) > 1 else df
    lost: dict[str, int] = {}
    for _inst, (_t, m) in buffers:
        for cpu, n in m["lost_events_per_cpu"].items():
            lost[cpu] = lost.get(cpu, 0) + n
    meta["lost_events_per_cpu"] = {c: lost[c] for c in sorted(lost, key=int)}
    meta["lost_events"] = sum(lost.values())
    meta["lost_events_exact"] = all(m["lost_events_exact"] for _, (_t, m) in buffers)
    for key in ("ring_buffer_pages", "records"):
        meta[key] = sum(m[key] for _, (_t, m) in buffers)
    meta["cpus_with_data"] = sorted({c for _, (_t, m) in buffers for c in m["cpus_with_data"]})
    warnings = list(meta["warnings"])
    per_instance = {}
    for inst, (tables, m) in parts:
        warnings += [f"instance {inst.name!r}: {w}" for w in m["warnings"]]
        clock = inst.clock or top_clock
        if top_has_data and clock != top_clock:
            warnings.append(f"instance {inst.name!r} records on the {clock!r} clock, the top buffer on "
                            f"{top_clock!r}: their timestamps are not comparable")
        per_instance[inst.name] = {"clock": clock, "events": {n: df.height for n, df in sorted(tables.items())},
                                   "lost_events": m["lost_events"], "lost_events_per_cpu": m["lost_events_per_cpu"],
                                   "lost_events_exact": m["lost_events_exact"]}
    meta["warnings"] = warnings
    meta["clock"] = top_clock if top_has_data else per_instance[parts[0][0].name]["clock"]
    meta["instances"] = sorted(inst.name for inst, _ in parts)  # as the text reader lists them
    meta["instance_buffers"] = per_instance
    return raw, meta
