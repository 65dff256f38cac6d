"""`abtest analyze FILE`: the declared metrics of one trace (thin: every value comes from
abtest.analysis.registry.evaluate, the evaluation path Trace.metrics, windows and compare read too).

JSON contract (``--json``, schema version 2; keys always present, an analysis that could not run is null and
its reason is under ``skipped``)::

    {"schema_version": 2, "file", "format", "duration_s", "window_s": [start, end] | null (--range, s from the
     trace start), "lost_events", "platform": name | null,
     "<analysis>": {"metrics": {full key: {"value", "unit", "template", "group"}},
                    "tables": {table: {"title", "columns": {column: unit}, "rows": [{column: value}]}}} | null,
     ... one per analysis of the registry that has metrics or tables (power, idle, latency, ...),
     "skipped": {analysis: reason}, "failed": {analysis: error}}

Values, units and groups are those of the metric registry (`abtest metrics`); tables are the analyses' declared
non-scalar tables (OPP residency per CPU, idle residency per CPU and state, power per rail, ...). Version 1 (until
2026-11-28) held a hand-written summary per analysis with units in key suffixes; docs/analyze.md says what
changed.

An analysis that raises an unexpected error is listed in ``skipped`` (reason "failed on this input: ...") and in
``failed``; the other analyses still run and print, and the exit status is then 2.

Without --json the same object is printed as tables (abtest.commands.analyze_tables: per analysis its scalar
metrics, one table per declared grouping, its declared tables; abtest.report.fit fits them to the terminal).
Exit status: 0 when at least one analysis ran, 2 when none applies, one failed (see above), or the file /
platform is unreadable.
"""

from __future__ import annotations

import json
import math
import os
from typing import TYPE_CHECKING

import click
import polars as pl

from abtest.analysis import registry
from abtest.session import Trace
from abtest.trace.errors import AnalysisNotApplicable, MissingEventsError

if TYPE_CHECKING:  # the terminal report's modules (rich, the tables) are imported when it is printed, not for --json
    from rich.console import Console

SCHEMA_VERSION = 2
# JSON key -> registry Analysis that yields values from a trace; order = registry order = order of the report
ANALYSES: dict[str, registry.Analysis] = {
    a.name: a for a in registry.ANALYSES if a.source != registry.METRICS_JSON and (a.compute or a.tables)
}

_NOT_REQUESTED = "not requested (--only)"
# prefix of the reason of an analysis that raised an unexpected error (a bug, or input it does not handle): the
# others still run; it is listed under "failed" too and `abtest analyze` exits 2 after printing the rest
FAILED = "failed on this input: "


def _run_one(key: str, analysis, trace: Trace, options: registry.MetricOptions) -> tuple[dict | None, str | None]:
    """(the analysis' JSON object, None) or (None, reason). Only "this analysis does not apply" errors are
    caught. What the analysis freed is given back to the system before the next one starts (glibc keeps it
    otherwise, and the next analysis' memory adds to it in the peak)."""
    try:
        ev = registry.evaluate(analysis, trace, options)
    except MissingEventsError as e:
        return None, str(e)
    except AnalysisNotApplicable as e:  # e.g. needs platform data the trace does not carry
        return None, str(e)
    except Exception as e:  # noqa: BLE001 - not hidden: reported under "failed", on stderr and as exit 2
        if os.environ.get("ABTEST_DEBUG"):
            import traceback

            traceback.print_exc()
        return None, FAILED + f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
    finally:
        from abtest import _native

        _native.release_freed_memory()
    if not ev:
        return None, "no data for this analysis in the trace (its events are absent or empty)"
    return evaluation_json(analysis, ev), None


def evaluation_json(analysis: registry.Analysis, ev: registry.Evaluation) -> dict:
    """An Evaluation as `--json` writes it: values keyed by full key with their spec's unit, template and group;
    declared tables with their title, column units and rows."""
    specs = {t.key: t for t in analysis.tables}
    return {
        "metrics": {
            v.key: {"value": _jsonable(v.value), "unit": v.spec.unit, "template": v.spec.key, "group": v.group}
            for v in ev.values
        },
        "tables": {
            k: {"title": specs[k].title, "columns": specs[k].units(), "rows": _jsonable(df)}
            for k, df in ev.tables.items()
        },
    }


# The two lanes of _evaluations on a sched trace, in the order each runs them. Their time on the bench trace
# (thread CPU of registry.evaluate, bench/analyze.py's trace, 2026-11-28 evening): latency 0.26-0.33 s, tasks 0.33,
# load_tracking 0.18, placement 0.11-0.13, cgroups 0.04, idle 0.02, the others 0 together. _LANE_LARGE holds
# latency, placement, cgroups and idle (~0.47 s), the other lane load_tracking, then tasks, then the rest (~0.52 s),
# and tasks starts only once load_tracking has given its memory back.
_LANE_LARGE = ("latency", "placement", "cgroups", "idle")
_LANE_OTHER_FIRST = ("load_tracking", "tasks")


def _evaluations(
    trace: Trace, keys: list[str], threads: int, options: registry.MetricOptions
) -> dict[str, tuple[dict | None, str | None]]:
    """{key: _run_one(...)} of the analyses. With two threads or more (polars and the compiled passes release
    the GIL, so two analyses overlap where one alone leaves a core idle) they run in two lanes of about
    equal time (_LANE_LARGE; _LANE_OTHER_FIRST then the others). Until 2026-11-28 the three large analyses
    (placement, tasks, latency) ran one after the other in one lane, so that two of them never held their
    memory at once: that lane took 1.02 s of thread CPU against 0.24 s for the other, on a 2-core machine
    most of a cached `abtest analyze` of the bench trace. Balanced, the longer lane takes 0.65 s; the peak
    RSS is 12-24 MB higher (286-298 MB against 273-275 MB, GNU time; bench/analyze_cli.py)."""
    if threads <= 1 or len(keys) <= 1:
        return {k: _run_one(k, ANALYSES[k], trace, options) for k in keys}
    import threading

    large = [k for k in _LANE_LARGE if k in keys]
    first = [k for k in _LANE_OTHER_FIRST if k in keys]
    rest = first + [k for k in keys if k not in large and k not in first]
    done: dict[str, tuple[dict | None, str | None]] = {}
    failed: list[BaseException] = []

    def lane(names: list[str]) -> None:
        try:
            for k in names:
                done[k] = _run_one(k, ANALYSES[k], trace, options)
        except BaseException as e:  # re-raised in the caller's thread
            failed.append(e)

    other = threading.Thread(target=lane, args=(large,), name="abtest-analyze-large")
    other.start()
    lane(rest)
    other.join()
    if failed:
        raise failed[0]
    return {k: done[k] for k in keys}


# above this many events `abtest analyze` suggests --windows (a 30 M-event trace.dat has ~1 GB of tables)
LONG_TRACE_EVENTS = 30_000_000


def analyze_dict(
    trace: Trace,
    *,
    window_s: tuple[float, float] | None = None,
    only: tuple[str, ...] | None = None,
    threads: int | None = None,
    options: registry.MetricOptions | None = None,
) -> dict:
    """The `abtest analyze --json` object for a (possibly windowed) trace. threads: analyses run at once
    (default: the CPUs, at most 2: more adds memory, not speed, on this 2-core class of machine); options: the
    metric options (task names, rail -> channel mapping; default: registry.MetricOptions())."""
    m = trace.meta
    out: dict = {
        "schema_version": SCHEMA_VERSION,
        "file": str(trace.path),
        "format": m.get("format"),
        "duration_s": (trace.end_ns - trace.start_ns) / 1e9
        if trace.start_ns is not None and trace.end_ns is not None
        else None,
        "window_s": list(window_s) if window_s else None,
        "lost_events": int(m.get("lost_events") or 0),
        "platform": (trace.platform or {}).get("name") if isinstance(trace.platform, dict) else None,
    }
    skipped: dict[str, str] = {}
    chosen = [k for k in ANALYSES if not only or k in only]
    threads = min(os.cpu_count() or 1, 2) if threads is None else threads
    results = _evaluations(trace, chosen, threads, options or registry.MetricOptions())
    for key in ANALYSES:
        if key not in results:
            out[key] = None
            skipped[key] = _NOT_REQUESTED
            continue
        res, why = results[key]
        out[key] = _jsonable(res)
        if why:
            skipped[key] = why
    out["skipped"] = skipped
    out["failed"] = {k: why[len(FAILED) :] for k, why in skipped.items() if why.startswith(FAILED)}
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
        raise click.ClickException(
            f"--engine perfetto needs abtest.trace.perfetto_engine, which is missing ({e})"
        ) from e
    try:
        res = perfetto_engine.analyze(path)
    except (perfetto_engine.EngineUnavailableError, RuntimeError) as e:
        raise click.ClickException(f"--engine perfetto: {e}") from e
    return {"file": path, "engine": "perfetto", **_jsonable(res)}


# -- terminal report ------------------------------------------------------------------------------------
def _console() -> Console:
    """rich honours $COLUMNS (also when piped; 80 columns when piped without it)."""
    from rich.console import Console

    return Console(highlight=False)


def _print_header(con: Console, d: dict) -> None:
    from rich.text import Text

    dur = f"{d['duration_s']:.3f} s" if d["duration_s"] is not None else "unknown"
    con.print(Text(str(d["file"]), style="bold"))
    facts = [f"format: {d['format']}", f"duration: {dur}"]
    if d["window_s"]:
        facts.append(f"window: {d['window_s'][0]}-{d['window_s'][1]} s from the trace start")
    if d["platform"]:
        facts.append(f"platform: {d['platform']}")
    if d["lost_events"]:
        facts.append(f"LOST EVENTS: {d['lost_events']:,}")
    con.print(Text("; ".join(facts)))


def print_report(d: dict, con: Console | None = None) -> None:
    """The terminal report of an analyze_dict() object (per analysis: its metrics grouped by their declaration and
    its declared tables; then what did not run). con: where to print (default: stdout at the terminal's width,
    or $COLUMNS)."""
    from rich.text import Text

    from abtest.commands.analyze_tables import analysis_grids
    from abtest.report.fit import print_grid

    con = con or _console()
    _print_header(con, d)
    for key, analysis in ANALYSES.items():
        val = d.get(key)
        if val is None:
            continue
        con.rule(Text(analysis.title, style="bold"))
        for g in analysis_grids(analysis, val):
            print_grid(con, g)
            con.print()
    skipped = [(k, why) for k, why in d["skipped"].items() if why != _NOT_REQUESTED]
    if skipped:
        con.rule(Text("Not run", style="bold"))
        for key, why in skipped:
            con.print(Text(f"{key}: {_short(why).replace(' in ' + str(d['file']), '')}", style="yellow"))
    if any("Record them" in w for w in d["skipped"].values()):
        con.print(
            "(record missing events with `trace-cmd record -e EVENT`, or enable them under "
            "/sys/kernel/tracing/events and `trace-cmd extract`, or with `abtest collect`)"
        )
    con.print(Text("every value: abtest analyze --json (docs/analyze.md); the metrics: abtest metrics", style="dim"))


def _short(reason: str) -> str:
    """First sentence of a skip reason (the how-to-record advice is printed once)."""
    return reason.split(". Record them")[0]


def print_perfetto_report(d: dict, con: Console | None = None) -> None:
    """The terminal report of `--engine perfetto` (abtest.trace.perfetto_engine.analyze's object)."""
    from rich.text import Text

    from abtest.commands.analyze_tables import perfetto_grids
    from abtest.report.fit import print_grid

    con = con or _console()
    eng = d.get("engine") or {}
    span = d.get("span") or {}
    con.print(Text(str(d["file"]), style="bold"))
    facts = [
        f"engine: Perfetto trace_processor {eng.get('version') or ''} ({eng.get('name')}, from {eng.get('source')})"
    ]
    if span.get("start_ns") is not None and span.get("end_ns") is not None:
        facts.append(f"span: {(span['end_ns'] - span['start_ns']) / 1e9:.3f} s")
    con.print(Text("; ".join(facts)))
    for g in perfetto_grids(d):
        print_grid(con, g)
        con.print()
    con.print(Text("every value: abtest analyze --engine perfetto --json", style="dim"))


@click.command("analyze")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="print one JSON object (stable keys, see docs/analyze.md)")
@click.option(
    "--platform",
    "platform_file",
    type=click.Path(exists=True, dir_okay=False),
    help="platform file (YAML/TOML, LISA plat_info.yml, Wattson CSV): capacities, OPPs, idle states, EM",
)
@click.option(
    "--range",
    "window",
    nargs=2,
    type=float,
    metavar="START_S END_S",
    help="analyse only [START_S, END_S), seconds from the first event of the trace (not to be confused with --windows)",
)
@click.option(
    "--engine",
    type=click.Choice(["native", "perfetto"]),
    default="native",
    show_default=True,
    help="native: abtest's readers and analyses; perfetto: Perfetto trace_processor's stdlib metrics",
)
@click.option("--only", multiple=True, type=click.Choice(list(ANALYSES)), help="run only these analyses (repeatable)")
@click.option(
    "--task",
    "tasks",
    multiple=True,
    metavar="NAME",
    help="also give the per-task metrics of this task name (repeatable; the busiest tasks are always given)",
)
@click.option(
    "--windows",
    "windows_s",
    type=click.FloatRange(min=0.001),
    metavar="SECONDS",
    help="long traces in bounded memory: analyse consecutive windows of SECONDS and combine each declared "
    "metric as the registry says (abtest.analysis.windowed); prints the metrics",
)
@click.option(
    "--history",
    "history_s",
    type=click.FloatRange(min=0),
    default=2.0,
    show_default=True,
    metavar="SECONDS",
    help="with --windows: seconds read around each window for the state carried into it",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="with --windows: worker processes (default: the number of CPUs)",
)
def analyze(
    file: str,
    as_json: bool,
    platform_file: str | None,
    window: tuple[float, float] | None,
    engine: str,
    only: tuple[str, ...],
    tasks: tuple[str, ...],
    windows_s: float | None,
    history_s: float,
    jobs: int | None,
) -> None:
    """The declared metrics of FILE (idle residency and misses, wakeup latency, OPP residency, util/runnable,
    power per rail, placement, ...), grouped as declared, and each analysis' declared tables. Analyses whose
    events are missing are skipped with a note.
    With --windows: the declared metrics of a long trace, window by window (docs/analyze.md)."""
    if engine == "perfetto":
        if window or platform_file or only:
            click.secho("note: --range, --platform and --only do not apply to --engine perfetto", fg="yellow", err=True)
        d = _perfetto_dict(file)
        if as_json:
            click.echo(json.dumps(d, default=str))
        else:
            print_perfetto_report(d)
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
            raise click.BadParameter(f"END_S ({hi}) must be greater than START_S ({lo})", param_hint="--range")
        t0 = trace.start_ns
        trace = trace.window(t0 + int(round(lo * 1e9)), t0 + int(round(hi * 1e9)))
    n_events = sum(trace.events.values())
    if not windows_s and n_events > LONG_TRACE_EVENTS:
        click.secho(
            f"note: {n_events:,} events: the whole-trace analyses hold about twice the tables in memory "
            f"(docs/analysis-speed.md); `abtest analyze --windows 30` analyses this trace in bounded "
            f"memory",
            fg="yellow",
            err=True,
        )
    if windows_s:
        from abtest.commands.analyze_windows import run_windowed

        run_windowed(trace, windows_s, history_s=history_s, jobs=jobs, only=only, as_json=as_json)
        return
    d = analyze_dict(trace, window_s=window, only=only or None, options=registry.MetricOptions(tasks=tasks))
    from abtest.trace.import_log import import_warnings

    for w in import_warnings(trace.meta):
        click.secho(f"WARNING: {w}", fg="yellow", err=True)
    if d["lost_events"]:
        click.secho(
            f"WARNING: {d['lost_events']} events were lost in the ring buffer "
            f"(per CPU: {trace.meta.get('lost_events_per_cpu')}): results from this trace are incomplete",
            fg="yellow",
            err=True,
        )
    if as_json:
        click.echo(json.dumps(d))
    else:
        print_report(d)
    for key, why in d["failed"].items():
        click.secho(
            f"error: analysis {key} failed on {file}: {why} (the other analyses ran; ABTEST_DEBUG=1 prints "
            "the traceback)",
            fg="red",
            err=True,
        )
    if d["failed"]:
        raise SystemExit(2)
    if all(d[k] is None for k in ANALYSES):
        click.secho(
            f"error: no analysis applies to {file}: "
            + "; ".join(f"{k}: {_short(v).replace(f' in {file}', '')}" for k, v in d["skipped"].items()),
            fg="red",
            err=True,
        )
        raise SystemExit(2)


COMMANDS = [analyze]
