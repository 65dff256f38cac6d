"""Scheduling latency: wakeup latency (woken -> running) and preemption latency (preempted -> running again).

Two wakeup-latency definitions, reported side by side:

* **wakeup** (the default; metric keys ``latency.*``): ``sched_wakeup`` (or ``sched_wakeup_new``) ->
  the task's next switch-in. The task is on a runqueue from that event on; this is the latency LISA
  (``df_latency_wakeup``), runqlat and the kernel's wakeup tracer report.
* **waking** (keys ``latency.waking.*``): ``sched_waking`` (or ``sched_wakeup_new``) -> next switch-in.
  sched_waking fires when try_to_wake_up() starts, before the enqueue: it adds the wakeup path itself.

Events: ``sched_switch`` and ``sched_wakeup`` and/or ``sched_waking``; ``sched_wakeup_new`` (optional) adds
the first wakeup of new tasks. Record with ``-e sched:sched_switch -e sched:sched_wakeup -e
sched:sched_waking -e sched:sched_wakeup_new``.

Matching rules (native/sim/src/latency.rs replays them in time order; the readable reference with sorted
as-of joins, which tests/test_sim_native.py compares it with on every shared trace, is tests/oracles/latency.py):

* a wakeup of pid P at time t counts when P was *not running* at t: the last sched_switch involving P
  before t switched it out, or (no earlier switch of P in the trace) the next one switches it in;
* its latency is the time to the next sched_switch that switches P in (``next_pid == P``), provided P
  was not switched out in between;
* if several wakeups precede the same switch-in, the earliest counts (later ones found the task
  already runnable; LISA counts the last one, see docs/lisa-crosscheck.md);
* **waking only**: sched_waking can fire while P is still on its CPU, switching out: try_to_wake_up()
  then waits for P to leave the CPU (``p->on_cpu``) and enqueues it. The trace shows waking (P still
  running), switch-out of P in a sleeping state, sched_wakeup, switch-in. Such a waking counts (from its
  own time) when P's next switch is a switch-out in a sleeping state, the switch after it is P's
  switch-in, and no other wakeup of P lies between the two. ``while_on_cpu`` marks them. (A waking that
  finds P still queued does not enqueue anything; P keeps running or is preempted, so no sleeping
  switch-out follows and it is dropped.)
* pid 0 (the idle task) is ignored; a wakeup with no switch-in before the end of the trace, or of a task
  still running, is dropped (metric ``latency.unmatched_wakeups_per_s``).

Preemption latency: a switch-out of P with a runnable prev_state (low byte 0: preempted, "R"/"R+") ->
P's next switch-in; LISA's ``df_latency_preemption``.

Clusters (execution cluster = where the task ran after the wakeup, target cluster = the wakeup's
target_cpu) come from abtest.analysis.clusters.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from abtest.analysis import task_keys
from abtest.analysis.per_trace import per_trace
from abtest.metric_spec import Aggregation, Direction, Grouping, MetricSpec, MetricValue, TableSpec, WindowCombine
from abtest.trace.errors import MissingEventsError

EVENTS = ("sched_switch",)
# one of sched_wakeup / sched_waking is needed (MissingEventsError from metrics() otherwise)
OPTIONAL_EVENTS = ("sched_wakeup", "sched_waking", "sched_wakeup_new")

# definition -> the wakeup event it starts from
DEFINITIONS = {"wakeup": "sched_wakeup", "waking": "sched_waking"}
DEFINITION_TEXT = {"wakeup": "sched_wakeup -> switch-in", "waking": "sched_waking -> switch-in"}


def _wakeup_frame(waking: pl.DataFrame, kind: str) -> pl.DataFrame:
    # names and kinds stay categorical (4 bytes a row instead of a string: millions of wakeups)
    cols = [pl.col("ts").cast(pl.Int64), pl.col("pid").cast(pl.Int32), pl.col("comm").cast(pl.Categorical)]
    tgt = "target_cpu" if "target_cpu" in waking.columns else "cpu"
    cols.append(pl.col(tgt).cast(pl.Int32).alias("target_cpu"))
    return waking.select(cols).with_columns(pl.lit(kind, pl.Categorical).alias("kind"))


def df_wakeup_latency(
    wakeups: pl.DataFrame,
    sched_switch: pl.DataFrame,
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
    rule: str = "wakeup",
    columns: list[str] | None = None,
) -> pl.DataFrame:
    """One row per matched wakeup (module docstring rules).

    Needs: sched_switch and a wakeup table (sched_wakeup for rule "wakeup", sched_waking for rule
    "waking"; sched_wakeup_new may be concatenated). ``wakeups``: ts, pid, comm, target_cpu (or cpu),
    optional kind. Pass whole tables; ``[start_ns, end_ns)`` selects wakeups by their timestamp.
    ``rule="waking"`` also counts a waking that fired while the task was still switching out.

    Returns pid (Int32), comm (Categorical), kind (Categorical: "waking"/"wakeup"/"wakeup_new"), wakeup_ts (ns),
    switch_in_ts (ns), cpu (Int32, where the task ran), target_cpu, while_on_cpu (Boolean), latency_ns (Int64),
    latency_us (Float64); ``columns``: only those (the others are not built). Sorted by wakeup_ts. The rules are
    replayed in time order by native/sim/src/latency.rs (readable reference: tests/oracles/latency.py).
    """
    if rule not in DEFINITIONS:
        raise ValueError(f"rule {rule!r}: expected one of {sorted(DEFINITIONS)}")
    w = wakeups
    if "kind" not in w.columns:
        w = w.with_columns(pl.lit("wakeup", pl.Categorical).alias("kind"))
    w = w.select(
        pl.col("ts").cast(pl.Int64),
        pl.col("pid").cast(pl.Int32),
        pl.col("comm").cast(pl.Categorical),
        pl.col("target_cpu" if "target_cpu" in w.columns else "cpu").cast(pl.Int32).alias("target_cpu"),
        pl.col("kind").cast(pl.Categorical),
    )
    if w["pid"].null_count() or (w["pid"] == 0).any():  # a copy of every column only when one is dropped
        w = w.filter(pl.col("pid") != 0)
    from abtest.analysis import sim_native

    return sim_native.wakeup_latency(
        w, sched_switch, start_ns=start_ns, end_ns=end_ns, while_on_cpu=rule == "waking", columns=columns
    )


def df_preemption_latency(
    sched_switch: pl.DataFrame, *, start_ns: int | None = None, end_ns: int | None = None
) -> pl.DataFrame:
    """One row per preemption: a switch-out of a task still runnable (prev_state low byte 0, "R"/"R+") in
    ``[start_ns, end_ns)`` -> its next switch-in. Needs: sched_switch (whole table).

    Returns pid (Int32), comm (prev_comm, Categorical), preempt_ts (ns), switch_in_ts (ns), from_cpu, cpu (where it ran
    again), latency_ns, latency_us. Preemptions whose task's next switch is not a switch-in are dropped.
    Matched by native/sim/src/latency.rs (readable reference: tests/oracles/latency.py).
    """
    from abtest.analysis import sim_native

    return sim_native.preemption_latency(sched_switch, start_ns=start_ns, end_ns=end_ns)


# the quantiles of the latency statistics (p50_us ... p99_us), for polars' and the compiled statistics alike
_QUANTILES = (0.5, 0.9, 0.95, 0.99)


def _quantile_key(q: float) -> str:
    return f"p{round(q * 100)}_us"


def _stats(col: pl.Expr) -> list[pl.Expr]:
    pos = col.filter(col > 0)
    return [
        pl.len().alias("wakeups"),
        col.mean().alias("mean_us"),
        *[col.quantile(q, "linear").alias(_quantile_key(q)) for q in _QUANTILES],
        col.max().alias("max_us"),
        pos.log().mean().exp().alias("gmean_us"),
    ]


def df_latency_stats(latency: pl.DataFrame, by: str | list[str] | None = ("pid", "comm")) -> pl.DataFrame:
    """Latency statistics in us: wakeups (count of rows), mean_us, p50_us, p90_us, p95_us, p99_us (linear
    interpolation between order statistics, as numpy's default), max_us, gmean_us (geometric mean of the
    strictly positive latencies). ``by``: grouping columns (default per thread: pid, comm; "comm" = per task
    name; "cluster" after df_with_clusters; None = overall). Works on df_wakeup_latency and
    df_preemption_latency rows alike.
    """
    by = [by] if isinstance(by, str) else list(by or [])
    out = _compiled_stats(latency, by)
    if out is None:  # several keys, or keys / values the compiled statistics do not take
        col = pl.col("latency_us")
        out = (
            latency.select(_stats(col))
            if not by
            else latency.lazy().select(*by, "latency_us").group_by(by).agg(_stats(col)).collect()
        )
    return out.sort(["wakeups", *by], descending=[True] + [False] * len(by)) if by else out


def _compiled_stats(latency: pl.DataFrame, by: list[str]) -> pl.DataFrame | None:
    """_stats per value of one Categorical / Enum key (or over all rows), compiled (sim_native.group_stats:
    one copy of the latencies instead of one per quantile; means to ~1e-15 of polars', the rest equal); None
    when it does not apply."""
    from abtest.analysis import sim_native

    if len(by) > 1:
        return None
    g = sim_native.group_stats(latency, by[0] if by else None, "latency_us", _QUANTILES)
    if g is None:
        return None
    cols = {} if not by else {by[0]: g["key"]}
    cols |= {
        "wakeups": g["count"],
        "mean_us": g["mean"],
        **{_quantile_key(q): s for q, s in zip(_QUANTILES, g["quantiles"])},
        "max_us": g["max"],
        "gmean_us": g["gmean"],
    }
    return pl.DataFrame(cols)


def df_with_clusters(latency: pl.DataFrame, clusters: pl.DataFrame) -> pl.DataFrame:
    """Add ``cluster`` (execution cluster: of ``cpu``, where the task ran) and ``target_cluster`` (of
    ``target_cpu``) from a clusters frame (cpu, cluster; abtest.analysis.clusters). Both are an Enum of the
    cluster names in name order (a byte a row, not a string; sorting by it sorts by name)."""
    # a column of a few CPUs' names, added beside the others (a join would copy every column)
    names = dict(clusters.select(pl.col("cpu").cast(pl.Int32), pl.col("cluster").cast(pl.Utf8)).iter_rows())
    kind = pl.Enum(sorted(set(names.values())))

    def of(cpu: str) -> pl.Expr:
        if not names:
            return pl.lit(None, kind)
        return pl.col(cpu).replace_strict(names, default=None, return_dtype=kind)

    out = latency.with_columns(of("cpu").alias("cluster"))
    if "target_cpu" in latency.columns:
        out = out.with_columns(of("target_cpu").alias("target_cluster"))
    return out


def _stats_by_known(lat: pl.DataFrame, col: str) -> pl.DataFrame:
    """df_latency_stats per value of ``col`` (cluster, target_cluster) over the rows where it is known, in
    ``col`` order (the unknown rows are a group of their own, left out: nothing is copied to drop them)."""
    return df_latency_stats(lat.select(col, "latency_us"), by=col).filter(pl.col(col).is_not_null()).sort(col)


# the columns the metrics read of the matched wakeups (the others are not built)
_STAT_COLUMNS = ["comm", "cpu", "target_cpu", "while_on_cpu", "latency_us"]


def plot_latency_cdf(latency: pl.DataFrame, top_tasks: int = 5, *, ax=None):
    """CDF of wakeup latency (us, log x) for all tasks and the `top_tasks` most woken ones.
    Returns the matplotlib Figure (drawn into ``ax`` when given)."""
    import matplotlib.pyplot as plt

    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(7, 3.5))

    def _cdf(v: np.ndarray, label: str):
        v = np.sort(v)
        ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=label)

    _cdf(latency["latency_us"].to_numpy(), f"all ({latency.height})")
    top = latency.group_by(["pid", "comm"]).len().sort("len", descending=True).head(top_tasks)
    for pid, comm, n in top.iter_rows():  # a handful of tasks, not events
        _cdf(
            latency.filter((pl.col("pid") == pid) & (pl.col("comm") == comm))["latency_us"].to_numpy(),
            f"{comm}:{pid} ({n})",
        )
    ax.set_xscale("log")
    ax.set_xlabel("wakeup latency (us)")
    ax.set_ylabel("fraction of wakeups")
    ax.set_title("Wakeup latency CDF")
    ax.legend(fontsize="small")
    return fig


class LatencyAnalysis:
    """Scheduling latency of one trace (window = the trace's window). ``definition``: "wakeup" (default,
    sched_wakeup -> switch-in) or "waking" (sched_waking -> switch-in); see the module docstring."""

    def __init__(self, trace):
        self.trace = task_keys.keyed(trace)  # comm columns hold task keys (abtest.analysis.task_keys)

    def definitions(self) -> list[str]:
        """The definitions this trace supports ("wakeup" needs sched_wakeup, "waking" sched_waking)."""
        return [d for d, ev in DEFINITIONS.items() if ev in self.trace.tables]

    def wakeup_event(self, definition: str = "wakeup") -> str:
        """The event the definition starts from; MissingEventsError when the trace lacks it or sched_switch."""
        self.trace.require("wakeup latency", "sched_switch")
        ev = DEFINITIONS[definition]
        if ev not in self.trace.tables:
            raise MissingEventsError(f"wakeup latency ({DEFINITION_TEXT[definition]})", [ev], str(self.trace.path))
        return ev

    def df_wakeups(self, definition: str = "wakeup") -> pl.DataFrame:
        name = self.wakeup_event(definition)
        parts = [_wakeup_frame(self.trace.df(name, windowed=False), name.removeprefix("sched_"))]
        if "sched_wakeup_new" in self.trace.tables:
            parts.append(_wakeup_frame(self.trace.df("sched_wakeup_new", windowed=False), "wakeup_new"))
        return pl.concat(parts)

    def df_latency(self, definition: str = "wakeup", columns: list[str] | None = None) -> pl.DataFrame:
        """df_wakeup_latency over the trace's window (``columns``: only those)."""
        return df_wakeup_latency(
            self.df_wakeups(definition),
            self.trace.df("sched_switch", windowed=False),
            start_ns=self.trace.start_ns,
            end_ns=self.trace.end_ns,
            rule=definition,
            columns=columns,
        )

    def df_preemption_latency(self) -> pl.DataFrame:
        self.trace.require("preemption latency", "sched_switch")
        return df_preemption_latency(
            self.trace.df("sched_switch", windowed=False), start_ns=self.trace.start_ns, end_ns=self.trace.end_ns
        )

    def df_latency_clusters(self, definition: str = "wakeup", columns: list[str] | None = None) -> pl.DataFrame:
        """df_latency (``columns`` of it: include cpu and target_cpu) + cluster (execution) and target_cluster."""
        from abtest.analysis.clusters import trace_clusters

        return df_with_clusters(self.df_latency(definition, columns), trace_clusters(self.trace))

    def df_task_stats(self, definition: str = "wakeup") -> pl.DataFrame:
        return df_latency_stats(self.df_latency(definition))

    def df_stats(self, definition: str = "wakeup") -> pl.DataFrame:
        return df_latency_stats(self.df_latency(definition), by=None)

    def plot_cdf(self, top_tasks: int = 5, ax=None, definition: str = "wakeup"):
        return plot_latency_cdf(self.df_latency(definition), top_tasks, ax=ax)


# --------------------------------------------------------------------------------------------
# Declared metrics (abtest.analysis.registry)
# --------------------------------------------------------------------------------------------
_LAT = (
    "Wakeup latency, sched_wakeup (or sched_wakeup_new) -> the task's next switch-in (LISA's, runqlat's and "
    "the wakeup tracer's definition; module docstring rules), of all matched wakeups"
)
_WAK = (
    "Wakeup latency from sched_waking (try_to_wake_up() entry, before the enqueue; also a waking fired while "
    "the task was still switching out) -> next switch-in, of all matched wakeups"
)
_PRE = "Preemption latency (switched out still runnable -> switched in again), of all preemptions"


def _family(prefix: str, what: str, title: str, rate: str, headline: bool = False) -> tuple[MetricSpec, ...]:
    """The latency statistics of one definition; `rate`: the family's events-per-second metric (the weight
    of its per-window values, WindowCombine)."""
    ev = dict(window_weight=rate)
    return (
        MetricSpec(
            f"{prefix}.gmean_us",
            "us",
            Direction.LOWER,
            Aggregation.GMEAN,
            title=f"{title} gmean",
            headline=headline,
            description=f"{what}: geometric mean of the positive latencies.",
            window=WindowCombine.EVENTS_GEO,
            **ev,
        ),
        MetricSpec(
            f"{prefix}.mean_us",
            "us",
            Direction.LOWER,
            Aggregation.GMEAN,
            title=f"{title} mean",
            description=f"{what}: arithmetic mean.",
            window=WindowCombine.EVENTS,
            **ev,
        ),
        MetricSpec(
            f"{prefix}.p50_us",
            "us",
            Direction.LOWER,
            Aggregation.GMEAN,
            title=f"{title} p50",
            description=f"{what}: median (linear interpolation).",
            window=WindowCombine.QUANTILE,
            **ev,
        ),
        MetricSpec(
            f"{prefix}.p90_us",
            "us",
            Direction.LOWER,
            Aggregation.GMEAN,
            title=f"{title} p90",
            description=f"{what}: 90th percentile.",
            window=WindowCombine.QUANTILE,
            **ev,
        ),
        MetricSpec(
            f"{prefix}.p95_us",
            "us",
            Direction.LOWER,
            Aggregation.GMEAN,
            title=f"{title} p95",
            description=f"{what}: 95th percentile.",
            window=WindowCombine.QUANTILE,
            **ev,
        ),
        MetricSpec(
            f"{prefix}.p99_us",
            "us",
            Direction.LOWER,
            Aggregation.GMEAN,
            title=f"{title} p99",
            description=f"{what}: 99th percentile.",
            window=WindowCombine.QUANTILE,
            **ev,
        ),
        MetricSpec(
            f"{prefix}.max_us",
            "us",
            Direction.LOWER,
            Aggregation.MEDIAN,
            title=f"{title} max",
            description=f"{what}: maximum (median over iterations: one outlier per run is common).",
            window=WindowCombine.MAX,
        ),
    )


(LATENCY_GMEAN_US, LATENCY_MEAN_US, LATENCY_P50_US, LATENCY_P90_US, LATENCY_P95_US, LATENCY_P99_US, LATENCY_MAX_US) = (
    _family("latency", _LAT, "wakeup latency", "latency.wakeups_per_s", headline=True)
)
LATENCY_WAKEUPS_PER_S = MetricSpec(
    "latency.wakeups_per_s",
    "1/s",
    Direction.NONE,
    Aggregation.MEAN,
    title="matched wakeups",
    description="Matched wakeups (sched_wakeup definition) per second of window.",
    window=WindowCombine.RATE,
)
LATENCY_UNMATCHED_PER_S = MetricSpec(
    "latency.unmatched_wakeups_per_s",
    "1/s",
    Direction.NONE,
    Aggregation.MEAN,
    title="unmatched wakeups",
    description="Wakeups (sched_wakeup definition, pid > 0) in the window not matched to a switch-in (none "
    "followed, or the task was running), per second of window.",
    window=WindowCombine.TIME_APPROX,
)
WAKING_FAMILY = _family("latency.waking", _WAK, "waking latency", "latency.waking.wakeups_per_s")
WAKING_WAKEUPS_PER_S = MetricSpec(
    "latency.waking.wakeups_per_s",
    "1/s",
    Direction.NONE,
    Aggregation.MEAN,
    title="matched wakings",
    description="Matched wakeups (sched_waking definition) per second of window.",
    window=WindowCombine.RATE,
)
PREEMPT_FAMILY = _family("latency.preempt", _PRE, "preemption latency", "latency.preempt.preemptions_per_s")
PREEMPTIONS_PER_S = MetricSpec(
    "latency.preempt.preemptions_per_s",
    "1/s",
    Direction.NONE,
    Aggregation.MEAN,
    title="preemptions",
    description="Switch-outs of a still-runnable task that later ran again, per second.",
    window=WindowCombine.RATE,
)

_TASK = (
    "of the wakeups of threads named {task} (comm at the wakeup; threads sharing a name are pooled, a "
    "renamed thread counts under each name it had; sched_wakeup definition)"
)
TASK_LATENCY_GMEAN_US = MetricSpec(
    "latency.task.{task}.gmean_us",
    "us",
    Direction.LOWER,
    Aggregation.GMEAN,
    Grouping.TASK,
    title="task wakeup latency gmean",
    description=f"Geometric mean wakeup latency {_TASK}.",
    window=WindowCombine.EVENTS_GEO,
    window_weight="latency.task.{task}.wakeups_per_s",
)
TASK_LATENCY_P50_US = MetricSpec(
    "latency.task.{task}.p50_us",
    "us",
    Direction.LOWER,
    Aggregation.GMEAN,
    Grouping.TASK,
    title="task wakeup latency p50",
    description=f"Median wakeup latency {_TASK}.",
    window=WindowCombine.QUANTILE,
    window_weight="latency.task.{task}.wakeups_per_s",
)
TASK_LATENCY_P90_US = MetricSpec(
    "latency.task.{task}.p90_us",
    "us",
    Direction.LOWER,
    Aggregation.GMEAN,
    Grouping.TASK,
    title="task wakeup latency p90",
    description=f"90th percentile wakeup latency {_TASK}.",
    window=WindowCombine.QUANTILE,
    window_weight="latency.task.{task}.wakeups_per_s",
)
TASK_LATENCY_P95_US = MetricSpec(
    "latency.task.{task}.p95_us",
    "us",
    Direction.LOWER,
    Aggregation.GMEAN,
    Grouping.TASK,
    title="task wakeup latency p95",
    description=f"95th percentile wakeup latency {_TASK}.",
    window=WindowCombine.QUANTILE,
    window_weight="latency.task.{task}.wakeups_per_s",
)
TASK_LATENCY_P99_US = MetricSpec(
    "latency.task.{task}.p99_us",
    "us",
    Direction.LOWER,
    Aggregation.GMEAN,
    Grouping.TASK,
    title="task wakeup latency p99",
    description=f"99th percentile wakeup latency {_TASK}.",
    window=WindowCombine.QUANTILE,
    window_weight="latency.task.{task}.wakeups_per_s",
)
TASK_WAKEUPS_PER_S = MetricSpec(
    "latency.task.{task}.wakeups_per_s",
    "1/s",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.TASK,
    title="task wakeups",
    description=f"Matched wakeups per second of window {_TASK}.",
    window=WindowCombine.RATE,
)
TASK_PREEMPT_GMEAN_US = MetricSpec(
    "latency.preempt.task.{task}.gmean_us",
    "us",
    Direction.LOWER,
    Aggregation.GMEAN,
    Grouping.TASK,
    title="task preemption latency gmean",
    description="Geometric mean preemption latency of the threads named {task}.",
    window=WindowCombine.EVENTS_GEO,
)
_CL = "(execution cluster: where the task ran after the wakeup; clusters named by their CPUs)"
_TCL = "(target cluster: of the wakeup's target_cpu)"
CLUSTER_LATENCY_GMEAN_US = MetricSpec(
    "latency.cluster.{cluster}.gmean_us",
    "us",
    Direction.LOWER,
    Aggregation.GMEAN,
    Grouping.CLUSTER,
    title="wakeup latency gmean per execution cluster",
    description=f"Geometric mean wakeup latency (sched_wakeup definition) {_CL}.",
    window=WindowCombine.EVENTS_GEO,
)
CLUSTER_LATENCY_P95_US = MetricSpec(
    "latency.cluster.{cluster}.p95_us",
    "us",
    Direction.LOWER,
    Aggregation.GMEAN,
    Grouping.CLUSTER,
    title="wakeup latency p95 per execution cluster",
    description=f"95th percentile wakeup latency (sched_wakeup definition) {_CL}.",
    window=WindowCombine.QUANTILE,
)
TARGET_CLUSTER_LATENCY_GMEAN_US = MetricSpec(
    "latency.target_cluster.{cluster}.gmean_us",
    "us",
    Direction.LOWER,
    Aggregation.GMEAN,
    Grouping.CLUSTER,
    title="wakeup latency gmean per target cluster",
    description=f"Geometric mean wakeup latency (sched_wakeup definition) {_TCL}.",
    window=WindowCombine.EVENTS_GEO,
)
TARGET_CLUSTER_LATENCY_P95_US = MetricSpec(
    "latency.target_cluster.{cluster}.p95_us",
    "us",
    Direction.LOWER,
    Aggregation.GMEAN,
    Grouping.CLUSTER,
    title="wakeup latency p95 per target cluster",
    description=f"95th percentile wakeup latency (sched_wakeup definition) {_TCL}.",
    window=WindowCombine.QUANTILE,
)

METRICS = (
    LATENCY_GMEAN_US,
    LATENCY_MEAN_US,
    LATENCY_P50_US,
    LATENCY_P90_US,
    LATENCY_P95_US,
    LATENCY_P99_US,
    LATENCY_MAX_US,
    LATENCY_WAKEUPS_PER_S,
    LATENCY_UNMATCHED_PER_S,
    *WAKING_FAMILY,
    WAKING_WAKEUPS_PER_S,
    *PREEMPT_FAMILY,
    PREEMPTIONS_PER_S,
    TASK_LATENCY_GMEAN_US,
    TASK_LATENCY_P50_US,
    TASK_LATENCY_P90_US,
    TASK_LATENCY_P95_US,
    TASK_LATENCY_P99_US,
    TASK_WAKEUPS_PER_S,
    TASK_PREEMPT_GMEAN_US,
    CLUSTER_LATENCY_GMEAN_US,
    CLUSTER_LATENCY_P95_US,
    TARGET_CLUSTER_LATENCY_GMEAN_US,
    TARGET_CLUSTER_LATENCY_P95_US,
)

_FAMILY_COLS = ("gmean_us", "mean_us", "p50_us", "p90_us", "p95_us", "p99_us", "max_us")


def _family_values(family: tuple[MetricSpec, ...], stats: dict) -> list[MetricValue]:
    return [MetricValue(spec, float(stats[col])) for spec, col in zip(family, _FAMILY_COLS) if stats[col] is not None]


def _chosen(per: pl.DataFrame, options) -> pl.DataFrame:
    named = tuple(getattr(options, "tasks", ()) or ())
    top = getattr(options, "top_tasks", 20)
    floor = getattr(options, "min_task_wakeups", 10)
    return per.filter(
        pl.col("comm").is_in(task_keys.select(per["comm"].to_list(), named))
        | ((pl.col("wakeups") >= floor) & (pl.int_range(pl.len()) < top))
    )


@per_trace
def _trace_stats(trace) -> dict:
    """The latency statistics the metrics and the declared tables read, small frames only (the matched wakeups
    are not kept): per definition the trace supports, {"wakeups": in the window (pid > 0), "matched", "overall"
    (df_latency_stats row), "while_on_cpu", and for the first definition "per_comm" (most woken first) and
    "clusters" (per execution / target cluster, only when more than one)}; "preempt": matched, overall, per_comm
    of the preemptions."""
    la = LatencyAnalysis(trace)
    defs = la.definitions()
    if not defs:
        raise MissingEventsError("wakeup latency", ["sched_wakeup"], str(trace.path))
    lo, hi = trace.start_ns, trace.end_ns
    out: dict = {}
    for d in defs:
        in_win = la.df_wakeups(d).select(((pl.col("ts") >= lo) & (pl.col("ts") < hi) & (pl.col("pid") != 0)).sum())
        main = d == defs[0]  # per task and cluster: the first definition only (the metrics and tables read no more)
        lat = (
            la.df_latency_clusters(d, columns=_STAT_COLUMNS)
            if main
            else la.df_latency(d, ["while_on_cpu", "latency_us"])
        )
        one_cluster = not main or (
            lat["cluster"].drop_nulls().n_unique() <= 1 and lat["target_cluster"].drop_nulls().n_unique() <= 1
        )
        out[d] = {
            "wakeups": int(in_win.item()),
            "matched": lat.height,
            "while_on_cpu": int(lat["while_on_cpu"].sum()),
            "overall": df_latency_stats(lat, by=None).row(0, named=True) if lat.height else None,
            "per_comm": df_latency_stats(lat, by="comm") if main else None,
            "clusters": {} if one_cluster else {c: _stats_by_known(lat, c) for c in ("cluster", "target_cluster")},
        }
        del lat
    pre = la.df_preemption_latency()
    out["preempt"] = {
        "matched": pre.height,
        "overall": df_latency_stats(pre, by=None).row(0, named=True) if pre.height else None,
        "per_comm": df_latency_stats(pre, by="comm"),
    }
    return out


def _count_rows(trace) -> pl.DataFrame:
    st = _trace_stats(trace)
    defs = [d for d in DEFINITIONS if d in st]
    return pl.DataFrame(
        {
            "definition": [DEFINITION_TEXT[d] for d in defs],
            "wakeups": [st[d]["wakeups"] for d in defs],
            "matched": [st[d]["matched"] for d in defs],
            "unmatched": [st[d]["wakeups"] - st[d]["matched"] for d in defs],
            "while_on_cpu": [st[d]["while_on_cpu"] for d in defs],
        }
    )


def _task_rows(trace, top: int = 10) -> pl.DataFrame:
    st = _trace_stats(trace)
    d = next(d for d in DEFINITIONS if d in st)
    return st[d]["per_comm"].head(top).with_columns(pl.lit(DEFINITION_TEXT[d]).alias("definition"))


TABLES = (
    TableSpec(
        "wakeups",
        "Wakeups in the window and how many were matched to a switch-in",
        "definition wakeups matched unmatched while_on_cpu",
        _count_rows,
        note="unmatched: no switch-in followed, or the task was running; while_on_cpu: wakings of a task still "
        "switching out, counted from their own time",
    ),
    TableSpec(
        "tasks",
        "Wakeup latency of the 10 most woken task names",
        "comm wakeups mean_us[us] p50_us[us] p95_us[us] p99_us[us] max_us[us] gmean_us[us] definition",
        _task_rows,
    ),
)


def metrics(trace, options=None) -> list[MetricValue]:
    """The declared latency metrics of one trace: latency.* (sched_wakeup definition) when the trace has
    sched_wakeup, latency.waking.* when it has sched_waking, latency.preempt.* always (sched_switch); per
    execution / target cluster only when the tasks ran on (or targeted) more than one cluster.
    Per task: the names in ``options.tasks`` and the ``options.top_tasks`` most woken names with at least
    ``options.min_task_wakeups`` wakeups (preemptions for the preemption metric)."""
    st = _trace_stats(trace)
    win_s = max((trace.end_ns - trace.start_ns) / 1e9, 1e-9)
    out: list[MetricValue] = []
    if "wakeup" in st:
        w = st["wakeup"]
        out.append(MetricValue(LATENCY_WAKEUPS_PER_S, w["matched"] / win_s))
        out.append(MetricValue(LATENCY_UNMATCHED_PER_S, (w["wakeups"] - w["matched"]) / win_s))
        if w["matched"]:
            family = (
                LATENCY_GMEAN_US,
                LATENCY_MEAN_US,
                LATENCY_P50_US,
                LATENCY_P90_US,
                LATENCY_P95_US,
                LATENCY_P99_US,
                LATENCY_MAX_US,
            )
            out += _family_values(family, w["overall"])
            for r in _chosen(w["per_comm"], options).iter_rows(named=True):  # <= top + named rows
                for spec, col in (
                    (TASK_LATENCY_GMEAN_US, "gmean_us"),
                    (TASK_LATENCY_P50_US, "p50_us"),
                    (TASK_LATENCY_P90_US, "p90_us"),
                    (TASK_LATENCY_P95_US, "p95_us"),
                    (TASK_LATENCY_P99_US, "p99_us"),
                ):
                    if r[col] is not None:
                        out.append(MetricValue(spec, float(r[col]), r["comm"]))
                out.append(MetricValue(TASK_WAKEUPS_PER_S, r["wakeups"] / win_s, r["comm"]))
            for col, g_spec, p_spec in (  # one cluster: the overall values already say it (no clusters)
                ("cluster", CLUSTER_LATENCY_GMEAN_US, CLUSTER_LATENCY_P95_US),
                ("target_cluster", TARGET_CLUSTER_LATENCY_GMEAN_US, TARGET_CLUSTER_LATENCY_P95_US),
            ):
                for r in w["clusters"].get(col, pl.DataFrame()).iter_rows(named=True):  # one row per cluster
                    if r["gmean_us"] is not None:
                        out.append(MetricValue(g_spec, float(r["gmean_us"]), r[col]))
                    out.append(MetricValue(p_spec, float(r["p95_us"]), r[col]))
    if "waking" in st:
        out.append(MetricValue(WAKING_WAKEUPS_PER_S, st["waking"]["matched"] / win_s))
        if st["waking"]["matched"]:
            out += _family_values(WAKING_FAMILY, st["waking"]["overall"])
    pre = st["preempt"]
    out.append(MetricValue(PREEMPTIONS_PER_S, pre["matched"] / win_s))
    if pre["matched"]:
        out += _family_values(PREEMPT_FAMILY, pre["overall"])
        for r in _chosen(pre["per_comm"], options).iter_rows(named=True):
            if r["gmean_us"] is not None:
                out.append(MetricValue(TASK_PREEMPT_GMEAN_US, float(r["gmean_us"]), r["comm"]))
    return out
