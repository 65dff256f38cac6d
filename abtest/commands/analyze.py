"""`abtest analyze FILE`: the main metrics of one trace (thin: every number comes from an analysis
module's ``summary(trace)``).

JSON contract (``--json``; keys always present, an analysis that could not run is null and its
reason is under ``skipped``)::

    {"file", "format", "duration_s", "window_s": [start, end] | null (s from the trace start),
     "lost_events", "platform": name | null,
     "power": {...}, "idle": {...}, "latency": {...}, "frequency": {...}, "load_tracking": {...},
     "placement": {...}, "energy_model": {...}, "frames": {...},
     "skipped": {analysis: reason}}

The analyses and their order are those of abtest.analysis.registry that have a summary.

See docs/analyze.md for each analysis' keys. Exit status: 0 when at least one analysis ran, 2 when
none applies (or the file / platform is unreadable).
"""
from __future__ import annotations

import json
import math

import click
import polars as pl
from rich.console import Console
from rich.table import Table

from abtest.analysis.registry import ANALYSES as REGISTRY
from abtest.session import Trace
from abtest.trace.errors import MissingEventsError

# JSON key -> the registry's analysis with a summary; order = order of the terminal report
ANALYSES = {a.name: a for a in REGISTRY if a.summary is not None}

_NOT_REQUESTED = "not requested (--only)"


def _run_one(key: str, analysis, trace: Trace) -> tuple[dict | None, str | None]:
    """(summary, None) or (None, reason). Only "this analysis does not apply" errors are caught."""
    try:
        res = analysis.summary(trace)
    except MissingEventsError as e:
        return None, str(e)
    except ValueError as e:  # e.g. needs platform data the trace does not carry
        return None, str(e)
    if not res:
        return None, "no data for this analysis in the trace (its events are absent or empty)"
    return res, None


def analyze_dict(trace: Trace, *, window_s: tuple[float, float] | None = None,
                 only: tuple[str, ...] | None = None) -> dict:
    """The `abtest analyze --json` object for a (possibly windowed) trace."""
    m = trace.meta
    out: dict = {
        "file": str(trace.path),
        "format": m.get("format"),
        "duration_s": (trace.end_ns - trace.start_ns) / 1e9 if trace.start_ns is not None and trace.end_ns is not None else None,
        "window_s": list(window_s) if window_s else None,
        "lost_events": int(m.get("lost_events") or 0),
        "platform": (trace.platform or {}).get("name") if isinstance(trace.platform, dict) else None,
    }
    skipped: dict[str, str] = {}
    for key, analysis in ANALYSES.items():
        if only and key not in only:
            out[key] = None
            skipped[key] = _NOT_REQUESTED
            continue
        res, why = _run_one(key, analysis, trace)
        out[key] = _jsonable(res)
        if why:
            skipped[key] = why
    out["skipped"] = skipped
    return out


def _jsonable(x):
    """dicts/lists/polars frames/numpy scalars -> plain JSON values (NaN/inf -> null)."""
    if x is None or isinstance(x, (bool, str, int)):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, pl.DataFrame):
        return [_jsonable(r) for r in x.to_dicts()]
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if hasattr(x, "item"):  # numpy scalar
        return _jsonable(x.item())
    return str(x)


def _perfetto_dict(path: str) -> dict:
    try:
        from abtest.trace import perfetto_engine
    except ModuleNotFoundError as e:
        raise click.ClickException(f"--engine perfetto needs abtest.trace.perfetto_engine, which is missing ({e})") from e
    try:
        res = perfetto_engine.analyze(path)
    except (perfetto_engine.EngineUnavailableError, RuntimeError) as e:
        raise click.ClickException(f"--engine perfetto: {e}") from e
    return {"file": path, "engine": "perfetto", **_jsonable(res)}


# -- terminal report ------------------------------------------------------------------------------
def _flatten(d, prefix: str = "") -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    if isinstance(d, dict):
        for k, v in d.items():
            rows += _flatten(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(d, list) and d and isinstance(d[0], dict):
        for i, v in enumerate(d):
            rows += _flatten(v, f"{prefix}[{i}]")
    else:
        rows.append((prefix, _fmt(d)))
    return rows


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 1e6 else f"{v:,.0f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def _idle_tables(con: Console, idle: dict) -> None:
    tab = Table("cpu", "state", "residency %", title="idle residency")
    for cpu, states in idle["residency_pct"].items():
        for name, pct in states.items():
            tab.add_row(cpu, name, _fmt(pct))
    con.print(tab)
    con.print(f"wakeups: {idle['wakeups_total']:,} ({idle['wakeups_per_s']:.1f}/s)")
    miss = idle.get("misses")
    if miss:
        t = Table("cpu", "wakeups", "too deep", "too deep %", "too shallow", "too shallow %",
                  title=f"idle misses (source: {miss['source']})")
        for cpu, m in [*miss["per_cpu"].items(), ("all", miss)]:
            t.add_row(cpu, _fmt(m["wakeups"]), _fmt(m["too_deep_count"]), _fmt(m["too_deep_pct"]),
                      _fmt(m["too_shallow_count"]), _fmt(m["too_shallow_pct"]))
        con.print(t)


def _latency_tables(con: Console, lat: dict) -> None:
    t = Table("task", "wakeups", "mean us", "p50 us", "p95 us", "p99 us", "gmean us",
              title=f"wakeup latency ({lat['wakeup_event']} -> sched_switch in)")
    rows = [("ALL", {**lat, "wakeups": lat["matched_wakeups"]}), *lat["tasks"].items()]
    for name, s in rows:
        t.add_row(name, *(_fmt(s[k]) for k in ("wakeups", "mean_us", "p50_us", "p95_us", "p99_us", "gmean_us")))
    con.print(t)


def _placement_tables(con: Console, pl_: dict) -> None:
    mig = "n/a (no sched_migrate_task)" if pl_["migrate_events"] is None else f"{pl_['migrate_events']:,}"
    con.print(f"tasks: {pl_['tasks']:,}  migrate events: {mig}  observed CPU changes: {pl_['observed_cpu_changes']:,}")
    t = Table("cluster", "cpu", "tasks", "expected N/M", "runtime share %", "balance index",
              title=f"placement balance (tasks running >= {pl_['min_runtime_pct']} % of the window)")
    for cl, c in pl_["clusters"].items():
        for i, cpu in enumerate(c["cpus"]):
            t.add_row(cl, str(cpu), _fmt(c["tasks_per_cpu"][str(cpu)]), _fmt(c["expected_tasks_per_cpu"]),
                      _fmt(c["runtime_share_pct"][str(cpu)]), _fmt(c["balance_index"]) if i == 0 else "")
    con.print(t)


def _print_report(d: dict) -> None:
    con = Console()
    dur = f"{d['duration_s']:.3f} s" if d["duration_s"] is not None else "?"
    con.print(f"[bold]{d['file']}[/]  format={d['format']}  duration={dur}"
              + (f"  window={d['window_s']} s" if d["window_s"] else ""))
    for key in ANALYSES:
        val = d.get(key)
        if val is None:
            continue
        con.rule(key)
        if key == "idle":
            _idle_tables(con, val)
        elif key == "latency":
            _latency_tables(con, val)
        elif key == "placement":
            _placement_tables(con, val)
        else:
            rows = _flatten(val)
            t = Table("metric", "value")
            for k, v in rows[:60]:
                t.add_row(k, v)
            con.print(t)
            if len(rows) > 60:
                con.print(f"... {len(rows) - 60} more values (use --json)")
    for key, why in d["skipped"].items():
        if why != _NOT_REQUESTED:
            con.print(f"[yellow]skipped {key}:[/] {_short(why)}")
    if any("Record them" in w for w in d["skipped"].values()):
        con.print("(record missing events with `trace-cmd record -e EVENT`, or enable them under "
                  "/sys/kernel/tracing/events and `trace-cmd extract`, or with `abtest collect`)")


def _short(reason: str) -> str:
    """First sentence of a skip reason (the how-to-record advice is printed once)."""
    return reason.split(". Record them")[0]


@click.command("analyze")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="print one JSON object (stable keys, see docs/analyze.md)")
@click.option("--platform", "platform_file", type=click.Path(exists=True, dir_okay=False),
              help="platform file (YAML/TOML, LISA plat_info.yml, Wattson CSV): capacities, OPPs, idle states, EM")
@click.option("--window", nargs=2, type=float, metavar="START_S END_S",
              help="analyse only [START_S, END_S), seconds from the first event of the trace")
@click.option("--engine", type=click.Choice(["native", "perfetto"]), default="native", show_default=True,
              help="native: abtest's readers and analyses; perfetto: Perfetto trace_processor's stdlib metrics")
@click.option("--only", multiple=True, type=click.Choice(list(ANALYSES)), help="run only these analyses (repeatable)")
def analyze(file: str, as_json: bool, platform_file: str | None, window: tuple[float, float] | None,
            engine: str, only: tuple[str, ...]) -> None:
    """Main metrics of FILE: idle residency and misses, wakeup latency, OPP residency, util/runnable,
    energy per rail, placement. Analyses whose events are missing are skipped with a note."""
    if engine == "perfetto":
        if window or platform_file or only:
            click.secho("note: --window, --platform and --only do not apply to --engine perfetto", fg="yellow", err=True)
        d = _perfetto_dict(file)
        click.echo(json.dumps(d, default=str) if as_json else json.dumps(d, indent=1, default=str))
        return
    if platform_file:
        from abtest.analysis.platform import PlatformFormatError, load_platform
        try:
            platform = load_platform(platform_file)
        except PlatformFormatError as e:
            raise click.ClickException(str(e)) from e
    else:
        platform = None
    trace = Trace(file, platform=platform)
    if window:
        lo, hi = window
        if hi <= lo:
            raise click.BadParameter(f"END_S ({hi}) must be greater than START_S ({lo})", param_hint="--window")
        t0 = trace.start_ns
        trace = trace.window(t0 + int(round(lo * 1e9)), t0 + int(round(hi * 1e9)))
    d = analyze_dict(trace, window_s=window, only=only or None)
    if d["lost_events"]:
        click.secho(f"WARNING: {d['lost_events']} events were lost in the ring buffer "
                    f"(per CPU: {trace.meta.get('lost_events_per_cpu')}): results from this trace are incomplete",
                    fg="yellow", err=True)
    if as_json:
        click.echo(json.dumps(d))
    else:
        _print_report(d)
    if all(d[k] is None for k in ANALYSES):
        click.secho(f"error: no analysis applies to {file}: "
                    + "; ".join(f"{k}: {_short(v).replace(f' in {file}', '')}" for k, v in d["skipped"].items()),
                    fg="red", err=True)
        raise SystemExit(2)


COMMANDS = [analyze]
