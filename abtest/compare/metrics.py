"""Per-iteration metrics: every value an iteration yields, each with its declaration (abtest.analysis.registry).

Sources, per iteration directory (see abtest.store.layout):
  metrics.json   workload-reported values (fps, jank_pct, geekbench scores, ...). A key the registry declares
                 takes unit, direction and aggregation from its declaration; any other key is the file's own
                 declaration (its "unit" and "lower_is_better"), kept as is and marked undeclared.
  power          `power.<Channel>` / `power.rail.<RAIL>` (mW) from ONE source and ONE mapping, both chosen by
                 abtest.analysis.power_source (power.csv, else the trace's rails, else a BattOr log; the store's,
                 target's or platform file's mapping, else built in). Both are named in the values' `source`.
  trace          the trace analyses of the registry (idle, latency, frequency, load_tracking, placement,
                 energy_model): every value they compute, with its spec.

Derived values (power + trace) are cached in `<iteration>/.abtest-metrics.json`, keyed on the abtest version,
METRICS_VERSION, a fingerprint of the registry's declarations, the sizes and mtimes of the trace and power files,
and the options (named tasks, rail mapping). A read-only store is fine: the cache is then simply not written, and
a cache file that is a symlink is neither read nor written through. With $ABTEST_METRICS_CACHE=user the caches
go to the user cache directory instead (`cache_file`), so a store that must stay untouched (the bundled
examples/, a shared or archived store) is never written to.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from abtest.analysis import power_source, registry
from abtest.analysis.power import POWER_RAIL
from abtest.metric_spec import Aggregation, Direction, MetricSpec, MetricValue
from abtest.safe_io import UnsafePathError, write_file_no_follow
from abtest.store.layout import METRICS_CACHE_FILE
from abtest.store.model import Iteration, Metric
from abtest.units import unit_factor

# 6: one power source resolver (a platform file's mapping applies); 5: per-task keys PROCESS/THREAD (task_keys);
# 4: power counter checks
METRICS_VERSION = 6


@dataclass(frozen=True)
class Measured:
    """One value of one iteration with its declaration. source: "metrics.json", "power.csv",
    "trace:power_rail", "trace:<analysis>". declared: False when the spec was made from a metrics.json entry
    whose key the registry does not declare (the file's own unit and direction)."""

    spec: MetricSpec
    value: float
    group: str | None
    source: str
    declared: bool = True

    @property
    def key(self) -> str:
        return self.spec.full_key(self.group)

    @property
    def analysis(self) -> str:
        return registry.analysis_of(self.spec).name if self.declared else "metrics.json"


def _registry_fingerprint() -> str:
    text = json.dumps([s.to_json() for _, s in registry.all_specs()], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


FINGERPRINT = _registry_fingerprint()


# ---------------------------------------------------------------- metrics.json
def declared_from_file(name: str, m: Metric) -> tuple[Measured | None, str | None]:
    """A metrics.json entry as a Measured value, and a note when the file disagrees with the declaration.

    A declared key written in another unit of the same quantity (ms for a declared us) is converted into the
    declared unit (abtest.units) and the note says so; in a unit that does not convert ("points" for a declared
    ms) the value is refused: (None, note), never compared as if it were in the declared unit."""
    hit = registry.resolve(name)
    if hit is not None:
        spec, group = hit
        if not m.unit or m.unit == spec.unit:
            return Measured(spec, m.value, group, m.source), None
        factor = unit_factor(m.unit, spec.unit)
        said = f"metric {name}: metrics.json says unit {m.unit!r}, the registry declares {spec.unit!r}"
        if factor is None:
            return None, f"{said} and the two do not convert: value not used"
        how = " (the same unit)" if factor == 1 else f": value converted (x {factor:g})"
        return Measured(spec, m.value * factor, group, m.source), said + how
    safe = name.replace("{", "(").replace("}", ")")
    spec = MetricSpec(
        safe,
        m.unit,
        Direction.from_lower_is_better(m.lower_is_better),
        Aggregation.MEAN,
        title=safe,
        description=f"declared by {m.source} (not in the registry)",
    )
    return Measured(spec, m.value, None, m.source, declared=False), None


# ---------------------------------------------------------------- power + trace
def power_values(
    source: power_source.PowerSamples, options: registry.MetricOptions
) -> tuple[list[Measured], list[str]]:
    """Power values of one resolved source (abtest.analysis.power_source: the computation registry.POWER runs on a
    trace) and one note per rail whose samples the counter checks excluded or whose counter reset / wrapped
    (abtest.analysis.power.CounterCheck), prefixed with the source. A channel's source also names the mapping."""
    vals, mapping, checks = power_source.evaluate(source, options)
    measured = [
        Measured(
            v.spec, v.value, v.group, source.source if v.spec is POWER_RAIL else f"{source.source}; {mapping.source}"
        )
        for v in vals
        if v.is_finite()
    ]
    return measured, [*source.notes, *(f"{source.source}: {c.note()}" for c in checks)]


def _measured(vals: list[MetricValue], source: str) -> list[Measured]:
    return [Measured(v.spec, v.value, v.group, source) for v in vals if v.is_finite()]


def trace_notes(trace) -> list[str]:
    """What a trace's own meta says about the completeness of every value computed from it."""
    notes = []
    lost = trace.meta.get("lost_events") or 0
    if lost:
        notes.append(
            f"{trace.path}: {lost} events lost in the ring buffer; trace metrics are computed from incomplete data"
        )
    gaps = sum((trace.meta.get("inferred_gaps") or {}).values())
    if gaps:
        notes.append(
            f"sched_switch chains break {gaps} time(s) without a recorded loss: task residency, task "
            "states and wakeup latency miss what happened in those gaps"
        )
    return notes


def trace_values(trace, options: registry.MetricOptions) -> tuple[list[Measured], list[str], bool]:
    """Values of every trace analysis of the registry (power comes from the iteration's one source: power_values),
    notes on what was skipped and why, and whether an analysis failed. An analysis that does not apply
    (MissingEventsError, AnalysisNotApplicable) is skipped with a note; one that raises anything else failed: a
    note names it and the error, its values are left out for this iteration and the other analyses go on."""
    from abtest.trace.errors import AnalysisNotApplicable, MissingEventsError

    out: list[Measured] = []
    notes: list[str] = []
    failed = False
    for a in registry.TRACE_ANALYSES:
        try:
            vals = registry.compute(a, trace, options)
        except MissingEventsError as e:
            if a.name not in ("energy_model",):
                notes.append(
                    f"{a.name}: skipped, the trace has no {', '.join(e.missing)} events (record them with "
                    f"`abtest collect`, or `trace-cmd record {' '.join('-e ' + x for x in e.missing)}`)"
                )
            continue
        except AnalysisNotApplicable as e:  # needs platform data the trace does not carry, etc.
            notes.append(f"{a.name}: skipped ({e})")
            continue
        except Exception as e:  # noqa: BLE001 - not hidden: a note names the analysis and the error
            notes.append(
                f"{a.name}: FAILED on {trace.path}: {type(e).__name__}: {' '.join(str(e).split())[:300]} "
                f"(a bug, or input it does not handle; this iteration is left out of {a.name}'s metrics)"
            )
            failed = True
            continue
        out += _measured(vals, f"trace:{a.name}")
    return out, notes, failed


def _file_key(p: Path | None) -> list | None:
    if p is None:
        return None
    st = p.stat()
    return [p.name, st.st_size, st.st_mtime_ns]


def cache_key(it: Iteration, options: registry.MetricOptions, with_trace: bool) -> dict:
    from abtest.version import __version__

    return {
        "abtest": __version__,
        "metrics_version": METRICS_VERSION,
        "registry": FINGERPRINT,
        "trace": _file_key(it.trace_path) if with_trace else None,
        "power": _file_key(it.power_path),
        "battor": _file_key(it.battor_path),
        "platform": _file_key(it.platform_path),
        "tasks": list(options.tasks),
        "top_tasks": options.top_tasks,
        "min_task_wakeups": options.min_task_wakeups,
        "rail_channels": {k: list(v) for k, v in (options.rail_channels or {}).items()},
        "rail_channels_source": options.rail_channels_source,
    }


def cache_file(iteration_dir: Path) -> Path:
    """Where the derived-metrics cache of one iteration lives: `<iteration>/.abtest-metrics.json` (default; it
    travels with the store), or, with $ABTEST_METRICS_CACHE=user, `<user cache>/metrics/<blake2b-128 of the
    iteration's resolved path>.json` (user cache: abtest.trace.cache.cache_root(): $ABTEST_CACHE_DIR, else
    $XDG_CACHE_HOME/abtest, else ~/.cache/abtest). The cache key inside the file still checks the trace and power
    files' sizes and mtimes, so a store moved or edited never serves stale values. An iteration that is a trace
    file of a plain directory of traces (abtest.store.reader) always uses the user cache directory."""
    if os.environ.get("ABTEST_METRICS_CACHE", "store") != "user" and not Path(iteration_dir).is_file():
        return iteration_dir / METRICS_CACHE_FILE
    from abtest.trace.cache import cache_root

    digest = hashlib.blake2b(str(Path(iteration_dir).resolve()).encode(), digest_size=16).hexdigest()
    return cache_root() / "metrics" / f"{digest}.json"


def read_cache(path: Path, key: dict) -> tuple[list[Measured], list[str]] | None:
    if path.is_symlink() or not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("key") != key:
            return None
        vals = [Measured(registry.spec(t), float(v), g, s) for t, g, v, s in doc["values"]]
        return vals, list(doc.get("notes", []))
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, UnicodeDecodeError):
        return None  # stale or damaged cache: recompute


def _write_cache(path: Path, key: dict, vals: list[Measured], notes: list[str]) -> None:
    """Atomic write, never through a symlink: not when the cache file, its iteration, workload or label directory
    is one (a store's label linked to elsewhere stays untouched), and the file itself is written with
    abtest.safe_io.write_file_no_follow. A read-only store is fine: nothing is written."""
    if path.name == METRICS_CACHE_FILE:
        chain = [path, path.parent, path.parent.parent, path.parent.parent.parent]
        if any(p.is_symlink() for p in chain):
            return
    else:  # the user cache directory (cache_file)
        if path.is_symlink() or path.parent.is_symlink():
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            return
    doc = {"key": key, "values": [[m.spec.key, m.group, m.value, m.source] for m in vals], "notes": notes}
    try:
        write_file_no_follow(path.parent, path.name, json.dumps(doc, indent=0))
    except (OSError, UnsafePathError):
        pass  # read-only store, or a link planted meanwhile: nothing written


def options_for(config, workload: str, tasks: tuple[str, ...] = ()) -> registry.MetricOptions:
    """The options every command evaluates `workload` of a store with (abtest.store.config.StoreConfig `config`)
    under: the store's task names for the workload after `tasks`, and its rail mapping. compare, gate, explain,
    history and bisect all use it, so they read (and cache) the same values of an iteration."""
    named = tuple(dict.fromkeys(tuple(tasks) + config.tasks_for(workload)))
    return registry.MetricOptions(tasks=named, rail_channels=config.rail_channels)


def derived_metrics(
    it: Iteration,
    options: registry.MetricOptions = registry.MetricOptions(),
    *,
    use_cache: bool = True,
    with_trace: bool = True,
) -> tuple[list[Measured], list[str]]:
    """Power and trace values of one iteration plus notes; from the cache file when it is current. The power
    source and the rail mapping come from abtest.analysis.power_source (one of each per iteration)."""
    from abtest.trace.errors import TraceFormatError

    options = power_source.with_mapping(options, it)
    key = cache_key(it, options, with_trace)
    cache = cache_file(it.path)
    if use_cache:
        hit = read_cache(cache, key)
        if hit is not None:
            return hit
    vals: list[Measured] = []
    notes: list[str] = []
    failed = False
    trace = None
    if with_trace and it.trace_path is not None:
        from abtest.session import Trace
        from abtest.trace.readers import read_trace

        try:
            # the values are cached: no table cache, and only the fields the analyses read are decoded (a
            # trace.dat's other events keep their times: the span and the event counts are the file's); a
            # platform file beside the trace applies to it
            data = read_trace(it.trace_path, fields_of=registry.raw_tables_read())
            trace = Trace(it.trace_path, platform=it.platform_path, _data=data)
            trace.tables  # noqa: B018 - read now: a file that cannot be read is reported here, once
        except (TraceFormatError, OSError, ValueError) as e:  # ValueError: a platform file it cannot use
            notes.append(f"trace metrics unavailable: {e}")
            failed, trace = True, None
    source, source_notes, source_failed = power_source.for_iteration(it, trace)
    failed = failed or source_failed
    if trace is not None:
        notes += trace_notes(trace)
    if source is not None:
        pvals, pnotes = power_values(source, power_source.with_mapping(options, it, trace))
        vals += pvals
        notes += pnotes
    notes += source_notes
    if trace is not None:
        tv, tnotes, analysis_failed = trace_values(trace, options)
        failed = failed or analysis_failed  # not cached: the next run tries again
        vals += tv
        notes += tnotes
    if use_cache and not failed:
        _write_cache(cache, key, vals, notes)
    return vals, notes


def iteration_metrics(
    it: Iteration,
    options: registry.MetricOptions = registry.MetricOptions(),
    *,
    use_cache: bool = True,
    with_trace: bool = True,
) -> tuple[dict[str, Measured], list[str]]:
    """All values of one iteration by full key: derived ones, then metrics.json's (which win on a clash),
    and notes about what could not be derived or disagrees with its declaration."""
    derived, notes = derived_metrics(it, options, use_cache=use_cache, with_trace=with_trace)
    merged = {m.key: m for m in derived}
    for name, metric in it.metrics.items():
        m, note = declared_from_file(name, metric)
        if note:
            notes.append(note)
        if m is not None:
            merged[m.key] = m
    return merged, notes
