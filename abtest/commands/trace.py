"""`abtest trace info|convert`: what is in a trace; convert it to parquet tables."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from abtest.session import Trace
from abtest.trace.cache import table_names
from abtest.trace.convert import convert as convert_trace
from abtest.trace.import_log import import_warnings


def info_dict(t: Trace) -> dict:
    """The stable JSON contract of `abtest trace info --json`."""
    m = t.meta
    return {
        "file": str(t.path),
        "format": m.get("format"),
        "format_version": m.get("format_version"),
        "wrapper": m.get("wrapper"),
        "cpus": int(m.get("cpus") or 0),
        "start_ns": m.get("start_ns"),
        "end_ns": m.get("end_ns"),
        "duration_s": ((m["end_ns"] - m["start_ns"]) / 1e9)
        if m.get("start_ns") is not None and m.get("end_ns") is not None
        else None,
        "clock": m.get("clock"),
        "events": t.events,
        "samples": m.get("samples", {}),
        "event_aliases": m.get("event_aliases", {}),
        "lost_events": int(m.get("lost_events") or 0),
        "lost_events_per_cpu": m.get("lost_events_per_cpu", {}),
        # False when some lost-event count is unknown (counted as 1 each: lost_events is a lower bound)
        "lost_events_exact": bool(m.get("lost_events_exact", True)),
        "kernel": m.get("kernel", {}),
        "platform": m.get("platform"),
        # named trace instances (tracefs instances/NAME) whose events are in the tables, column `instance`
        "instances": m.get("instances", []),
        "warnings": m.get("warnings", []),
        # what the reader could not parse, per kind: {"count", "examples": [{"line"|"offset", "text", ...}]}
        "import_errors": m.get("import_errors", {}),
        # what it recognised as not being events (preambles, ps listings, padding...), counted the same way
        "non_event_content": m.get("non_event_content", {}),
        # sched_switch chain breaks per CPU (events missing though no loss was recorded)
        "inferred_gaps": m.get("inferred_gaps", {}),
        "cpus_with_data": m.get("cpus_with_data", []),
        "cpus_header": m.get("cpus_header"),
    }


def format_text(d: dict) -> str:
    """The format as `trace info` prints it: "trace.dat v7", "ftrace-text (trace-cmd report of a trace.dat v6)",
    "perfetto (recorded by Perfetto v25.0)", plus the wrapper ("gzip"...). format_version is the file
    format's version for trace.dat, the "version = N" header of trace-cmd report text, and the tracing
    service that wrote a perfetto trace ("(N/A)" = Perfetto without a git revision, dropped)."""
    fmt, ver = d.get("format"), d.get("format_version")
    if ver:
        ver = str(ver).removesuffix(" (N/A)")
        if fmt == "perfetto":
            fmt = f"perfetto (recorded by {ver})"
        elif fmt == "trace.dat":
            fmt = f"trace.dat v{ver}"
        else:
            fmt = f"{fmt} (trace-cmd report of a trace.dat v{ver})"
    return f"{fmt}, {d['wrapper']}-compressed" if d.get("wrapper") else str(fmt)


@click.group()
def trace() -> None:
    """Inspect and convert trace files."""


@trace.command("info")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="print one JSON object (stable keys, see README)")
@click.option("--no-cache", is_flag=True, help="decode from scratch, do not read or write the parquet cache")
def info(file: str, as_json: bool, no_cache: bool) -> None:
    """Format, CPUs, time span, per-event counts, lost events and metadata of FILE."""
    t = Trace(file, use_cache=not no_cache)
    d = info_dict(t)
    if as_json:
        click.echo(json.dumps(d, sort_keys=False, default=str))
    else:
        from rich.console import Console
        from rich.table import Table

        con = Console()
        con.print(f"[bold]{d['file']}[/]", markup=True, highlight=False)
        con.print(
            f"format: {format_text(d)}; cpus: {d['cpus']}" + (f"; clock: {d['clock']}" if d["clock"] else ""),
            markup=False,
            highlight=False,
        )
        data_cpus = d["cpus_with_data"]
        if data_cpus and len(data_cpus) != d["cpus"]:
            con.print(
                f"events on {len(data_cpus)} of the {d['cpus']} CPUs: {', '.join(map(str, data_cpus[:32]))}"
                f"{' ...' if len(data_cpus) > 32 else ''}",
                markup=False,
                highlight=False,
            )
        if d["duration_s"] is not None:
            con.print(f"span: {d['start_ns']} .. {d['end_ns']} ns ({d['duration_s']:.3f} s)")
        if d["instances"]:
            con.print(f"trace instances: {', '.join(d['instances'])} (tables: column `instance`, null = top buffer)")
        k = d["kernel"] or {}
        if k.get("release") or k.get("version"):
            con.print(f"kernel: {k.get('release') or ''} {k.get('version') or ''}".strip())
        tab = Table("event", "count", title="events")
        for name, n in sorted(d["events"].items(), key=lambda kv: -kv[1]):
            tab.add_row(name, f"{n:,}")
        con.print(tab)
        for name, n in d["samples"].items():
            con.print(f"{name}: {n:,} counter samples")
        for w in d["warnings"]:
            con.print(f"[yellow]warning:[/] {w}")
        if d["non_event_content"]:
            con.print(
                "skipped (recognised, not events): "
                + ", ".join(f"{k} {v['count']:,}" for k, v in sorted(d["non_event_content"].items()))
            )
    for w in import_warnings(t.meta):  # unparsed content and broken sched_switch chains
        click.secho(f"WARNING: {w}", fg="yellow", err=True)
    if d["lost_events"]:
        click.secho(
            f"WARNING: {d['lost_events']} events were lost in the ring buffer "
            f"(per CPU: {d['lost_events_per_cpu']}); results from this trace are incomplete",
            fg="yellow",
            err=True,
        )


@trace.command("convert")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "-o",
    "--output",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="directory to write <table>.parquet files and meta.json into",
)
def convert(file: str, out_dir: str) -> None:
    """Decode FILE into one parquet file per canonical table plus meta.json in OUT_DIR."""
    t0 = time.perf_counter()
    meta = convert_trace(file, out_dir)
    n = sum(meta["events"].values())
    dt = time.perf_counter() - t0
    tables = len(table_names(Path(out_dir)))
    click.echo(f"wrote {tables} tables, {n:,} events to {out_dir} in {dt:.2f} s", err=True)
    if meta.get("lost_events"):
        click.secho(f"WARNING: {meta['lost_events']} events were lost in the ring buffer", fg="yellow", err=True)


COMMANDS = [trace]
