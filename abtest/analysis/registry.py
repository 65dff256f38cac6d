"""The metric registry: every analysis, the events it needs and the metrics it produces, declared once.

`ANALYSES` holds one `Analysis` per concept. Each names the canonical tables it requires and the ones it
can use, its metrics (abtest.metric_spec.MetricSpec: key, unit, direction, aggregation, grouping) and the
functions that compute them. The declarations live next to their functions in each analysis module
(``METRICS`` and ``metrics(trace, options)``); this module only gathers them, by import, so an editor, grep
and a reader can follow every call.

Who reads it:
  abtest.session.Trace      `t.metrics()` (all declared values of one trace)
  abtest analyze            the analyses to run, their values and declared tables (`evaluate`)
  abtest collect            the events to enable for the requested analyses (`events_for`)
  abtest compare / gate     per-iteration values with their spec (unit, direction, aggregation)
  the seed tables, report   rows found by spec, not by a key's spelling
  abtest metrics            this registry, printed (docs/metrics.md is generated from it)

Adding a metric: declare a MetricSpec in its analysis module, add it to that module's METRICS, emit it from
its ``metrics()``. `compute()` refuses a value whose spec the analysis does not declare.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from abtest.analysis import (
    capacity,
    cgroups,
    energy,
    frames,
    frequency,
    idle,
    latency,
    load_tracking,
    overutilized,
    placement,
    power,
    power_source,
    tasks,
    thermal,
)
from abtest.analysis.per_trace import per_trace, release
from abtest.metric_spec import Grouping, MetricSpec, MetricValue, TableSpec
from abtest.results.specs import WORKLOAD_METRICS
from abtest.trace.errors import AnalysisNotApplicable, MissingEventsError
from abtest.trace.schema import raw_names

# Where an analysis' values come from.
TRACE, METRICS_JSON, POWER_SAMPLES = "trace", "metrics.json", "power samples"


@dataclass(frozen=True)
class MetricOptions:
    """Options of the per-trace metric functions.

    tasks: task names (comm or a task key, abtest.analysis.task_keys.matches) whose per-task metrics are always
    computed when the task appears; top_tasks:
    also the most active task names (by wakeups / CPU time), at most this many; min_task_wakeups: a task
    needs this many matched wakeups for its latency metrics (fewer say little); rail_channels: explicit
    rail -> channel mapping ({channel: [rails]}) for power metrics, and rail_channels_source where it came from
    (abtest.analysis.power_source.with_mapping sets both; None: the store's)."""

    tasks: tuple[str, ...] = ()
    top_tasks: int = 20
    min_task_wakeups: int = 10
    rail_channels: dict | None = None
    rail_channels_source: str | None = None


@dataclass(frozen=True)
class Analysis:
    """One analysis. events: canonical tables it requires (all of them); optional_events: tables it uses when
    present (collectors enable both). compute(trace, MetricOptions) -> [MetricValue] for declared metrics
    (None: values come from elsewhere, see `source`). tables: the declared non-scalar tables (TableSpec: OPP
    residency per CPU, power per rail, ...) that `abtest analyze` prints and writes beside the metric values.
    source: TRACE, METRICS_JSON (workload-reported) or POWER_SAMPLES (trace rails or the store's power files).
    facade: the class ``<Name>Analysis(trace)`` exposing the module's df_*/plot_* bound to a Trace; abtest.session
    makes it the property ``Trace.<attribute>`` (attribute: the analysis name unless given, e.g. ``t.energy``).
    """

    name: str
    title: str
    events: tuple[str, ...]
    optional_events: tuple[str, ...]
    metrics: tuple[MetricSpec, ...]
    compute: Callable | None = None
    source: str = TRACE
    doc: str = ""
    slow: bool = field(default=False)
    facade: type | None = None
    attribute: str | None = None
    tables: tuple[TableSpec, ...] = ()

    @property
    def trace_attribute(self) -> str | None:
        """The name of this analysis' facade on a Trace (``t.idle``), or None when it has none."""
        return None if self.facade is None else (self.attribute or self.name)

    @property
    def all_events(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.events + self.optional_events))


_trace_rails = per_trace(power_source.df_trace_rails)  # both power tables read it
POWER_TABLES = (
    TableSpec(
        "rails",
        "Power per rail (average over the window)",
        "rail avg_power_mw[mW] energy_j[J] coverage_pct[%]",
        _trace_rails,
        shows=("power.rail.{rail}",),
    ),
    TableSpec(
        "channels",
        "Rails of each power channel (CPU = the CPU channels, Total = every rail)",
        "channel rails mapping",
        lambda t: power_source.df_trace_channels(t, _trace_rails(t)),
    ),
)

IDLE = Analysis(
    "idle",
    "Idle residency and idle misses",
    idle.EVENTS,
    idle.OPTIONAL_EVENTS,
    idle.METRICS,
    idle.metrics,
    tables=idle.TABLES,
    doc="abtest.analysis.idle",
    facade=idle.IdleAnalysis,
)
LATENCY = Analysis(
    "latency",
    "Wakeup latency",
    latency.EVENTS,
    latency.OPTIONAL_EVENTS,
    latency.METRICS,
    latency.metrics,
    tables=latency.TABLES,
    doc="abtest.analysis.latency",
    facade=latency.LatencyAnalysis,
)
FREQUENCY = Analysis(
    "frequency",
    "CPU frequency and OPP residency",
    frequency.EVENTS,
    frequency.OPTIONAL_EVENTS,
    frequency.METRICS,
    frequency.metrics,
    tables=frequency.TABLES,
    doc="abtest.analysis.frequency",
    facade=frequency.FrequencyAnalysis,
)
LOAD_TRACKING = Analysis(
    "load_tracking",
    "PELT util vs runnable",
    load_tracking.EVENTS,
    load_tracking.OPTIONAL_EVENTS,
    load_tracking.METRICS,
    load_tracking.metrics,
    tables=load_tracking.TABLES,
    doc="abtest.analysis.load_tracking",
    slow=True,
    facade=load_tracking.LoadTrackingAnalysis,
)
PLACEMENT = Analysis(
    "placement",
    "Task placement and CPU time per task",
    placement.EVENTS,
    placement.OPTIONAL_EVENTS,
    placement.METRICS,
    placement.metrics,
    tables=placement.TABLES,
    doc="abtest.analysis.placement",
    facade=placement.PlacementAnalysis,
)
POWER = Analysis(
    "power",
    "Measured power per channel and rail",
    power.EVENTS,
    power.OPTIONAL_EVENTS,
    power.METRICS,
    power_source.metrics,
    tables=POWER_TABLES,
    source=POWER_SAMPLES,
    doc="abtest.analysis.power",
    facade=power.PowerAnalysis,
)
ENERGY_MODEL = Analysis(
    "energy_model",
    "Energy-model power estimate",
    energy.ESTIMATE_EVENTS,
    energy.ESTIMATE_OPTIONAL_EVENTS,
    energy.ESTIMATE_METRICS,
    energy.estimate_metrics,
    tables=energy.TABLES,
    doc="abtest.analysis.energy",
    facade=energy.EnergyAnalysis,
    attribute="energy",
)
TASKS = Analysis(
    "tasks",
    "Task states and activations per task name",
    tasks.EVENTS,
    tasks.OPTIONAL_EVENTS,
    tasks.METRICS,
    tasks.metrics,
    tables=tasks.TABLES,
    doc="abtest.analysis.tasks",
    facade=tasks.TasksAnalysis,
)
OVERUTILIZED = Analysis(
    "overutilized",
    "Overutilized time (EAS off)",
    overutilized.EVENTS,
    overutilized.OPTIONAL_EVENTS,
    overutilized.METRICS,
    overutilized.metrics,
    tables=overutilized.TABLES,
    doc="abtest.analysis.overutilized",
    facade=overutilized.OverutilizedAnalysis,
)
THERMAL = Analysis(
    "thermal",
    "Thermal zones, cooling devices, power allocator",
    thermal.EVENTS,
    thermal.OPTIONAL_EVENTS,
    thermal.METRICS,
    thermal.metrics,
    tables=thermal.TABLES,
    doc="abtest.analysis.thermal",
    facade=thermal.ThermalAnalysis,
)
CAPACITY = Analysis(
    "capacity",
    "CPU capacity and uclamp",
    capacity.EVENTS,
    capacity.OPTIONAL_EVENTS,
    capacity.METRICS,
    capacity.metrics,
    tables=capacity.TABLES,
    doc="abtest.analysis.capacity",
    facade=capacity.CapacityAnalysis,
)
CGROUPS = Analysis(
    "cgroups",
    "Wakeup latency and CPU time per cgroup",
    cgroups.EVENTS,
    cgroups.OPTIONAL_EVENTS,
    cgroups.METRICS,
    cgroups.metrics,
    tables=cgroups.TABLES,
    doc="abtest.analysis.cgroups",
    facade=cgroups.CgroupAnalysis,
)
FRAMES = Analysis(
    "frames",
    "Frames from atrace markers / the perfetto frame timeline",
    frames.EVENTS,
    (),
    (),
    None,
    tables=frames.TABLES,
    doc="abtest.analysis.frames",
)
WORKLOAD = Analysis(
    "workload",
    "Workload-reported results (metrics.json)",
    (),
    (),
    WORKLOAD_METRICS,
    source=METRICS_JSON,
    doc="abtest.results.specs",
)

ANALYSES: tuple[Analysis, ...] = (
    POWER,
    WORKLOAD,
    IDLE,
    LATENCY,
    FREQUENCY,
    LOAD_TRACKING,
    PLACEMENT,
    TASKS,
    OVERUTILIZED,
    THERMAL,
    CAPACITY,
    CGROUPS,
    ENERGY_MODEL,
    FRAMES,
)
BY_NAME: dict[str, Analysis] = {a.name: a for a in ANALYSES}
TRACE_ANALYSES: tuple[Analysis, ...] = tuple(a for a in ANALYSES if a.source == TRACE and a.compute is not None)


def all_specs() -> list[tuple[Analysis, MetricSpec]]:
    """Every declared metric with its analysis, in registry order."""
    return [(a, s) for a in ANALYSES for s in a.metrics]


_SPEC_BY_KEY: dict[str, tuple[Analysis, MetricSpec]] = {}
for _a, _s in all_specs():
    if _s.key in _SPEC_BY_KEY:
        raise RuntimeError(f"metric {_s.key!r} declared twice ({_SPEC_BY_KEY[_s.key][0].name} and {_a.name})")
    _SPEC_BY_KEY[_s.key] = (_a, _s)
# grouped templates, most specific (longest literal text) first, for resolve()
_GROUPED = sorted(
    (s for _, s in _SPEC_BY_KEY.values() if s.group is not Grouping.NONE),
    key=lambda s: -len(s.key.replace("{" + s.group.value + "}", "")),
)


def spec(key: str) -> MetricSpec:
    """The spec declared under this key template (KeyError when none)."""
    return _SPEC_BY_KEY[key][1]


def analysis_of(s: MetricSpec) -> Analysis:
    return _SPEC_BY_KEY[s.key][0]


def resolve(full_key: str) -> tuple[MetricSpec, str | None] | None:
    """(spec, group value) of a full metric key ("power.CPU-Big" -> (power.{channel}, "CPU-Big")), or None
    when no declaration covers it (e.g. a user's own metrics.json key). Scalar keys match exactly; grouped
    templates by their literal head and tail, most specific template first."""
    hit = _SPEC_BY_KEY.get(full_key)
    if hit is not None and hit[1].group is Grouping.NONE:
        return hit[1], None
    for s in _GROUPED:
        g = s.match(full_key)
        if g:
            return s, g
    return None


def events_for(names: list[str] | tuple[str, ...] | None = None) -> list[str]:
    """Canonical tables the named analyses require or can use (all trace analyses when None), in order."""
    chosen = ANALYSES if names is None else [BY_NAME[n] for n in names]
    return list(dict.fromkeys(ev for a in chosen for ev in a.all_events))


def raw_tables_read() -> frozenset[str]:
    """The raw event tables whose fields the registry's analyses (power included) read: their declared events
    under every raw name a reader may give them (abtest.trace.schema.raw_names). A comparison decodes only
    these tables' fields (abtest.trace.readers.read_trace `fields_of`)."""
    return raw_names(events_for())


class UndeclaredMetricError(RuntimeError):
    """An analysis computed a value for a metric it does not declare (a bug in that analysis)."""


@dataclass(frozen=True)
class Evaluation:
    """What one analysis yields for one trace: the declared metric values and the declared tables that have rows
    ({TableSpec.key: polars frame of its declared columns})."""

    values: list[MetricValue]
    tables: dict[str, object]

    def __bool__(self) -> bool:
        return bool(self.values or self.tables)


def evaluate(analysis: Analysis, trace, options: MetricOptions = MetricOptions()) -> Evaluation:
    """One analysis on one trace: `compute`'s checked values, then its declared tables. The one evaluation path
    of `abtest analyze` (terminal and JSON); Trace.metrics, windows, compare, explain and gate read the same
    values through `compute`. Raises MissingEventsError / AnalysisNotApplicable when the analysis yields nothing
    because of the trace (the required events are absent, or every table says why it does not apply)."""
    try:
        values = _values(analysis, trace, options)
        tables: dict[str, object] = {}
        missing: list[MissingEventsError] = []
        notes: list[str] = []
        for t in analysis.tables:
            try:
                df = t.rows(trace)
            except MissingEventsError as e:
                missing.append(e)
                continue
            except AnalysisNotApplicable as e:
                notes.append(str(e))
                continue
            if df is not None and df.height:
                tables[t.key] = df.select(list(t.units()))
    finally:  # what the values and the tables shared (abtest.analysis.per_trace) goes with this analysis
        release(trace, _modules(analysis))
    if not values and not tables:
        if notes:
            raise AnalysisNotApplicable("; ".join(notes))
        if missing:
            raise missing[0]
    return Evaluation(values, tables)


def _modules(analysis: Analysis) -> set[str]:
    """The modules of an analysis' metric function and table functions (whose per_trace results it releases)."""
    return {f.__module__ for f in (analysis.compute, *(t.rows for t in analysis.tables)) if f is not None}


def compute(analysis: Analysis, trace, options: MetricOptions = MetricOptions()) -> list[MetricValue]:
    """Run one analysis' metric function on a trace and check every value against its declarations.
    Raises MissingEventsError when a required event is absent (the caller reports it as skipped)."""
    try:
        return _values(analysis, trace, options)
    finally:
        release(trace, _modules(analysis))


def _values(analysis: Analysis, trace, options: MetricOptions) -> list[MetricValue]:
    if analysis.compute is None:
        return []
    missing = [e for e in analysis.events if e not in trace.tables]
    if missing:
        raise MissingEventsError(analysis.name, missing, str(trace.path))
    vals = analysis.compute(trace, options)
    declared = set(analysis.metrics)
    for v in vals:
        if v.spec not in declared:
            raise UndeclaredMetricError(f"analysis {analysis.name} computed {v.key!r}, which it does not declare")
    return vals
