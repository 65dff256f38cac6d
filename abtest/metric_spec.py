"""What a metric is: its key, unit, direction, how iterations aggregate and how it is grouped.

The vocabulary of the metric registry (abtest.analysis.registry). A `MetricSpec` is declared once, next to
the function that computes the metric; everything downstream (compare, the seed tables, the report, the gate,
`abtest metrics`) reads unit, direction, aggregation and grouping from it, never from how a key is spelled.

Keys: a spec's ``key`` is a template. A scalar metric has no placeholder (``idle.too_deep_pct``); a grouped
metric has exactly one, named after its grouping (``power.{channel}``, ``latency.task.{task}.gmean_us``,
``frequency.cpu.{cpu}.mean_mhz``). The full key of one measured value is the template with the group value
filled in (``power.CPU-Big``); compare results, thresholds files and JSON use full keys. Measured values carry
their spec and group value along, so no key is ever parsed back to find its meaning.

This module imports nothing from abtest: every layer may use it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum


class Direction(str, Enum):
    """Which way is better. NONE: the metric describes, it does not judge (no regression verdict)."""

    LOWER = "lower"
    HIGHER = "higher"
    NONE = "none"

    @property
    def lower_is_better(self) -> bool | None:
        """True / False / None, the store's metrics.json convention."""
        return {Direction.LOWER: True, Direction.HIGHER: False, Direction.NONE: None}[self]

    @classmethod
    def from_lower_is_better(cls, lib: bool | None) -> Direction:
        return cls.NONE if lib is None else (cls.LOWER if lib else cls.HIGHER)


class Aggregation(str, Enum):
    """How the per-iteration values of one side combine into the value a table prints.

    MEAN: arithmetic mean (power, FPS, percentages of time). GMEAN: geometric mean (latencies, scores,
    ratios: what the seeds print; defined only when every value is > 0). MEDIAN: for heavy-tailed values."""

    MEAN = "mean"
    GMEAN = "gmean"
    MEDIAN = "median"


class Grouping(str, Enum):
    """What the one placeholder of a grouped key stands for."""

    NONE = "none"
    CHANNEL = "channel"  # power channel: CPU, CPU-Big, CPU-Little, CPU-Mid, GPU, Total, ...
    RAIL = "rail"  # one measured power rail, by its name
    DOMAIN = "domain"  # energy-model performance domain (cluster), by its first CPU
    TASK = "task"  # task key: comm, or PROCESS/THREAD with a process table (abtest.analysis.task_keys)
    CLUSTER = "cluster"  # CPU cluster / frequency domain
    CPU = "cpu"  # one CPU number
    IDLE_STATE = "idle_state"  # idle state name (or index when unnamed)
    OPP = "opp"  # an OPP of a frequency domain: "cpu<first CPU of the domain>@<kHz>"
    BENCHMARK = "benchmark"  # a sub-test of a benchmark (PCMark test, Jankbench list)
    ZONE = "zone"  # thermal zone, by its type name (thermal_zone field / sysfs type)
    COOLING_DEVICE = "cdev"  # thermal cooling device, by its type name (cdev_update type field)
    ROOT_DOMAIN = "root_domain"  # scheduler root domain, by its CPU span ("0-5")
    CGROUP = "cgroup"  # cgroup path ("/top-app", "/system.slice/foo.service")


class WindowCombine(str, Enum):
    """How the values one metric takes in consecutive time windows of one trace combine into the value of
    the whole span (abtest.analysis.windowed: a long trace analysed window by window in bounded memory).

    RATE: a count per second or a share of the window: mean weighted by each window's length, a window in
    which the analysis ran without giving this key a value counting as 0 (no event of that task, no time at
    that OPP). TIME: a time-weighted mean over the known time (frequency, util, temperature, power): mean
    weighted by each window's known time when the value reports it (MetricValue.known_s: exact), else by
    window length (exact only while the quantity is known throughout every window: flagged approximate). TIME_APPROX: a
    value that is not a mean over the whole window (a share of
    the known time of some threads, an index), averaged by window length: an approximation. EVENTS: arithmetic mean
    weighted by the number of events behind each window's value (the
    spec's ``window_weight`` names the metric, a rate per second with the same grouping, that counts them).
    EVENTS_GEO: the same in log space (geometric means). SUM: the total. MAX / MIN: the extreme.
    QUANTILE: a percentile; the windows' percentiles averaged with the EVENTS weight, which is an
    approximation (a percentile of a union is no function of the parts' percentiles).
    A combined value is exact when the combination is (see `exact_combination`) and the per-window values
    are (the state carried into each window is within the history a window reads, see windowed.py)."""

    RATE = "rate"
    TIME = "time"
    TIME_APPROX = "time_approx"
    EVENTS = "events"
    EVENTS_GEO = "events_geo"
    SUM = "sum"
    MAX = "max"
    MIN = "min"
    QUANTILE = "quantile"


@dataclass(frozen=True)
class MetricSpec:
    """One declared metric.

    key: template (see module docstring); unit: printed unit ("mW", "us", "%", "1/s", "frames/s", "points",
    "" for a plain number); direction, aggregation, group: as above; title: short human name for tables
    ("too deep", "wakeup latency gmean"); description: one sentence, with the definition; headline: shown
    in the summary table of `abtest compare` (one row per key metric). window: how values of consecutive
    windows of one trace combine (WindowCombine; None for metrics that do not come from a trace);
    window_weight: for EVENTS / EVENTS_GEO / QUANTILE, the key template of the rate metric (per second, same
    analysis and grouping) counting the events behind a value; "" = weighted by time (approximate).
    """

    key: str
    unit: str
    direction: Direction
    aggregation: Aggregation = Aggregation.MEAN
    group: Grouping = Grouping.NONE
    title: str = ""
    description: str = ""
    headline: bool = False
    window: WindowCombine | None = None
    window_weight: str = ""

    def __post_init__(self) -> None:
        placeholder = "{" + self.group.value + "}"
        n = self.key.count("{")
        if self.group is Grouping.NONE and n:
            raise ValueError(f"metric {self.key!r}: a scalar key has no placeholder")
        if self.group is not Grouping.NONE and (n != 1 or placeholder not in self.key):
            raise ValueError(
                f"metric {self.key!r}: a key grouped by {self.group.value} has exactly one placeholder {placeholder}"
            )

    @property
    def lower_is_better(self) -> bool | None:
        return self.direction.lower_is_better

    @property
    def exact_combination(self) -> bool:
        """Whether combining per-window values by `window` gives the whole span's value exactly (given exact
        per-window values): RATE, SUM, MAX, MIN, and EVENTS / EVENTS_GEO with an event-count weight. TIME is
        exact for the values that report their known time (MetricValue.known_s; decided per value by
        abtest.analysis.windowed), otherwise approximate: False here."""
        if self.window in (WindowCombine.EVENTS, WindowCombine.EVENTS_GEO):
            return bool(self.window_weight)
        return self.window in (WindowCombine.RATE, WindowCombine.SUM, WindowCombine.MAX, WindowCombine.MIN)

    def full_key(self, group: str | int | None = None) -> str:
        """The key of one value: the template with the group filled in (scalar: the key itself)."""
        if self.group is Grouping.NONE:
            if group is not None:
                raise ValueError(f"metric {self.key!r} is not grouped; got group {group!r}")
            return self.key
        if group is None or str(group) == "":
            raise ValueError(f"metric {self.key!r} needs a {self.group.value}")
        return self.key.replace("{" + self.group.value + "}", str(group))

    def match(self, full_key: str) -> str | None:
        """The group value if `full_key` is an instance of this template, else None (scalar: "" on equality)."""
        if self.group is Grouping.NONE:
            return "" if full_key == self.key else None
        head, _, tail = self.key.partition("{" + self.group.value + "}")
        if len(full_key) > len(head) + len(tail) and full_key.startswith(head) and full_key.endswith(tail):
            return full_key[len(head) : len(full_key) - len(tail)]
        return None

    def to_json(self) -> dict:
        return {
            "key": self.key,
            "unit": self.unit,
            "direction": self.direction.value,
            "lower_is_better": self.lower_is_better,
            "aggregation": self.aggregation.value,
            "group": self.group.value,
            "title": self.title,
            "description": self.description,
            "headline": self.headline,
            "window": self.window.value if self.window else None,
            "window_weight": self.window_weight,
        }


@dataclass(frozen=True)
class MetricValue:
    """One value of a declared metric in one iteration (or one trace). group: the placeholder's value
    (None for a scalar). value: float in the spec's unit (NaN = could not be computed). known_s: for a mean
    over the known time (WindowCombine.TIME), the seconds it is a mean over, when the analysis knows them:
    windows are then weighed by it and the combination is exact (None: weighed by window length)."""

    spec: MetricSpec
    value: float
    group: str | None = None
    known_s: float | None = None

    @property
    def key(self) -> str:
        return self.spec.full_key(self.group)

    def is_finite(self) -> bool:
        return isinstance(self.value, (int, float)) and math.isfinite(self.value)


def values(spec: MetricSpec, by_group: dict) -> list[MetricValue]:
    """MetricValues of a grouped spec from {group: value} (None values skipped)."""
    return [MetricValue(spec, float(v), str(g)) for g, v in by_group.items() if v is not None]


@dataclass(frozen=True)
class TableSpec:
    """A declared non-scalar table of an analysis: what no metric says in one value per group (OPP residency per
    CPU, idle residency per CPU and state, power per rail, frames per layer). Declared once next to its function,
    like a MetricSpec; `abtest analyze` prints it with the units declared here and writes it to JSON.

    key: name in the analysis' ``tables`` (JSON); title: table title; columns: the columns in order, each
    ``name`` or ``name[unit]`` separated by spaces ("cpu state_name time_s[s] pct[%]"; no unit: a plain number or
    text); rows: ``rows(trace)`` -> a polars DataFrame holding these columns (None or an empty frame: the trace
    has nothing for it); keys: how many leading columns name a row; note: printed under the table; across: a key
    column that the terminal spreads across (one column per CPU: a CPU x OPP matrix per value column); shows: the
    metric key templates whose every value this table also prints (the terminal then prints the table only, not
    those metrics' own grid; JSON keeps both)."""

    key: str
    title: str
    columns: str
    rows: Callable
    keys: int = 1
    note: str = ""
    across: str | None = None
    shows: tuple[str, ...] = ()

    def units(self) -> dict[str, str]:
        """{column: unit} in order ("" = no unit)."""
        out = {}
        for c in self.columns.split():
            name, _, unit = c.partition("[")
            out[name] = unit.removesuffix("]")
        return out
