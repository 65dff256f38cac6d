"""Task states and activations per task name: running, runnable, sleeping, uninterruptible (LISA's tasks
analysis, workload-processor's task activations and residency).

Each thread's state over time, from ``sched_switch`` and ``sched_wakeup`` / ``sched_wakeup_new`` (else
``sched_waking``):

* switched in -> **running** (on ``cpu``);
* switched out with prev_state runnable (low byte 0: "R", "R+", preempted) -> **runnable**;
  ``S`` (bit 0x1) or ``I`` (0x80 alone: an idle kernel thread's wait) -> **sleeping**; ``D`` (0x2) ->
  **uninterruptible**; ``X``/``Z`` (0x10/0x20: exited; before 4.14 also 0x40, TASK_DEAD) -> not alive (not
  counted); anything else (stopped, traced, parked) -> **other**. The encoding is told from the trace (a
  preemption flagged with 0x400 or more means a pre-4.14 kernel);
* woken while sleeping (or with nothing known yet) -> **runnable** (a wakeup of a task that is running or
  already runnable changes nothing);
* before a thread's first event its state is unknown (not counted), except that a first event switching it
  out says it was running.

Per task name (comm; threads sharing a name are pooled, a renamed thread counts under each name it had) the
time in each state and its share of the name's known time (the shares sum to 100 %).

Activations (LISA's ``df_task_activation`` / workload-processor's task activations): a run = a contiguous
stretch on one CPU, from switch-in to switch-out (a preemption ends one). Per name: count, rate, and the
run durations' mean, median, p95 and max.
"""

from __future__ import annotations

import polars as pl

from abtest.analysis import task_keys
from abtest.analysis.intervals import window_of
from abtest.analysis.per_trace import per_trace
from abtest.metric_spec import Aggregation, Direction, Grouping, MetricSpec, MetricValue, TableSpec, WindowCombine

EVENTS = ("sched_switch",)
OPTIONAL_EVENTS = ("sched_wakeup", "sched_wakeup_new", "sched_waking")
STATES = ("running", "runnable", "sleeping", "uninterruptible", "other")
# a state column: one byte per row instead of a string (millions of intervals on a busy trace)
STATE_TYPE = pl.Enum(STATES)
# states a wakeup makes runnable (from running, runnable or exited it does not)
WAKEABLE = ("sleeping", "uninterruptible", "other")

__all__ = [
    "EVENTS",
    "OPTIONAL_EVENTS",
    "STATES",
    "switch_out_state",
    "prev_state_encoding",
    "df_task_state_intervals",
    "df_task_states",
    "df_activations",
    "df_activation_stats",
    "TasksAnalysis",
    "metrics",
]


def switch_out_state(prev_state: pl.Expr, *, pre_4_14: bool = False) -> pl.Expr:
    """The state a sched_switch prev_state leaves a task in (module docstring), as ``STATE_TYPE``; null = exited.

    Kernels since 4.14 report one TASK_REPORT bit (0x40 = P parked, 0x80 = I idle) and flag a preemption with
    0x100; older kernels report the raw state, where 0x40 is TASK_DEAD, and flag a preemption with
    TASK_STATE_MAX (0x400 and up): ``pre_4_14`` selects that reading (see prev_state_encoding)."""
    s = prev_state.cast(pl.Int64)
    low = s & 0xFF
    dead = 0x70 if pre_4_14 else 0x30
    state = lambda name: pl.lit(name, STATE_TYPE)  # noqa: E731
    return (
        pl.when(low == 0)
        .then(state("runnable"))
        .when((s & 0x1) != 0)
        .then(state("sleeping"))
        .when((s & 0x2) != 0)
        .then(state("uninterruptible"))
        .when((s & dead) != 0)
        .then(pl.lit(None, STATE_TYPE))
        .when(low == 0x80)
        .then(state("sleeping"))
        .otherwise(state("other"))
    )


def prev_state_encoding(sched_switch: pl.DataFrame) -> bool:
    """True when the trace's prev_state values follow the pre-4.14 encoding: some preemption (low byte 0) is
    flagged with a bit of 0x400 or above (TASK_STATE_MAX) instead of 4.14's 0x100."""
    s = sched_switch["prev_state"].cast(pl.Int64)
    return bool((((s & 0xFF) == 0) & (s >= 0x400)).any())


def _switches(sched_switch: pl.DataFrame) -> pl.DataFrame:
    # task names stay categorical until the result (sorting and carrying 2 M strings costs more than the rest)
    return sched_switch.select(
        pl.col("ts").cast(pl.Int64),
        pl.col("cpu").cast(pl.Int32),
        pl.col("prev_pid").cast(pl.Int32),
        pl.col("prev_comm").cast(pl.Categorical),
        pl.col("prev_state").cast(pl.Int64),
        pl.col("next_pid").cast(pl.Int32),
        pl.col("next_comm").cast(pl.Categorical),
    )


def _native_args(sw: pl.DataFrame, wakeups: pl.DataFrame | None) -> tuple[pl.Series, pl.DataFrame | None]:
    """(the state each switch-out leaves, the wakeups' ts, pid, comm) for the compiled pass."""
    out_state = sw.select(switch_out_state(pl.col("prev_state"), pre_4_14=prev_state_encoding(sw))).to_series()
    wk = (
        None
        if wakeups is None
        else wakeups.select(
            pl.col("ts").cast(pl.Int64), pl.col("pid").cast(pl.Int32), pl.col("comm").cast(pl.Categorical)
        )
    )
    return out_state, wk


def df_task_state_intervals(
    sched_switch: pl.DataFrame,
    wakeups: pl.DataFrame | None = None,
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
) -> pl.DataFrame:
    """Per thread: ``pid (Int32), ts (ns), dur (ns), state (STATE_TYPE, null = unknown / not alive), cpu (Int32,
    where it runs; null unless running), comm (Categorical)`` over ``[start_ns, end_ns)``.

    ``sched_switch``: whole table (state at the window start is carried in); ``wakeups``: ts, pid, comm of
    sched_wakeup + sched_wakeup_new (or sched_waking) rows, whole tables. pid 0 is left out. One pass per
    thread in time order (native/sim/src/tasks.rs; its readable reference: tests/oracles/tasks.py).
    """
    from abtest.analysis import sim_native

    sw = _switches(sched_switch)
    start_ns, end_ns = window_of(sw, start_ns, end_ns)
    return sim_native.task_state_intervals(
        sw, *_native_args(sw, wakeups), states=STATES, wakeable=WAKEABLE, start_ns=start_ns, end_ns=end_ns
    )


def df_task_state_aggregates(
    sched_switch: pl.DataFrame,
    wakeups: pl.DataFrame | None = None,
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """What the per-name figures read, without keeping the intervals of df_task_state_intervals (same
    arguments): ``(times, runs, threads)``: times ``comm, state, dur`` (ns per name and known state: what
    df_task_states sums), runs ``comm, cpu, dur`` (df_activations' runs: what df_activation_stats and the
    running per cluster read), threads ``comm, pid`` (each thread once per name it had). The compiled pass
    (native/sim/src/tasks.rs) folds each thread's intervals as it makes them."""
    from abtest.analysis import sim_native

    sw = _switches(sched_switch)
    start_ns, end_ns = window_of(sw, start_ns, end_ns)
    return sim_native.task_state_aggregates(
        sw, *_native_args(sw, wakeups), states=STATES, wakeable=WAKEABLE, start_ns=start_ns, end_ns=end_ns
    )


def df_task_states(intervals: pl.DataFrame, by: str = "comm") -> pl.DataFrame:
    """Time per state per task name (``by="comm"``) or thread (``by="pid"``): ``<by>, known_ns`` and, per state
    of STATES, ``<state>_ns`` and ``<state>_pct`` (% of the known time). ``intervals``: df_task_state_intervals
    (or, per name, df_task_state_aggregates' times: only ``<by>, state, dur`` are read)."""
    known = intervals.lazy().select(by, "state", "dur").filter(pl.col("state").is_not_null())
    aggs = [pl.col("dur").sum().alias("known_ns")]
    aggs += [pl.col("dur").filter(pl.col("state") == s).sum().alias(f"{s}_ns") for s in STATES]
    out = known.group_by(by).agg(aggs).collect()
    return out.with_columns([(100.0 * pl.col(f"{s}_ns") / pl.col("known_ns")).alias(f"{s}_pct") for s in STATES]).sort(
        "running_ns", descending=True
    )


def df_activations(intervals: pl.DataFrame) -> pl.DataFrame:
    """Runs (LISA's activations): ``pid, comm, cpu, ts (switch-in, ns), dur (ns)``, one per contiguous stretch on
    one CPU inside the window. ``intervals``: df_task_state_intervals."""
    return intervals.filter(pl.col("state") == "running").select("pid", "comm", "cpu", "ts", "dur")


def df_activation_stats(activations: pl.DataFrame | pl.LazyFrame, by: str = "comm", *, window_ns: int) -> pl.DataFrame:
    """Per task name (or ``by`` column): ``activations``, ``activations_per_s``, run durations in ms: ``mean_ms``,
    ``p50_ms``, ``p95_ms``, ``max_ms`` (linear interpolation), ``running_ms`` (sum). ``activations``:
    df_activations, or a lazy frame of the runs (only ``by`` and ``dur`` are read)."""
    runs = activations.lazy().select(by, (pl.col("dur") / 1e6).alias("ms")).collect()
    out = _compiled_activation_stats(runs, by)
    if out is None:  # a key or values the compiled statistics do not take
        d = pl.col("ms")
        out = runs.group_by(by).agg(
            pl.len().cast(pl.Int64).alias("activations"),
            d.mean().alias("mean_ms"),
            d.quantile(0.5, "linear").alias("p50_ms"),
            d.quantile(0.95, "linear").alias("p95_ms"),
            d.max().alias("max_ms"),
            d.sum().alias("running_ms"),
        )
    return out.with_columns((pl.col("activations") / (window_ns / 1e9)).alias("activations_per_s")).sort(
        "running_ms", descending=True
    )


def _compiled_activation_stats(runs: pl.DataFrame, by: str) -> pl.DataFrame | None:
    """df_activation_stats' figures per value of a Categorical / Enum ``by`` from ``runs`` (``by``, ``ms``),
    compiled (sim_native.group_stats: one copy of the durations; means to ~1e-15 of polars', the rest equal);
    None when it does not apply."""
    from abtest.analysis import sim_native

    g = sim_native.group_stats(runs, by, "ms", (0.5, 0.95))
    if g is None:
        return None
    return pl.DataFrame(
        {
            by: g["key"],
            "activations": g["count"].cast(pl.Int64),
            "mean_ms": g["mean"],
            "p50_ms": g["quantiles"][0],
            "p95_ms": g["quantiles"][1],
            "max_ms": g["max"],
            "running_ms": g["sum"],
        }
    )


class TasksAnalysis:
    """Task states and activations of one trace (``trace.tasks``; window = the trace's window)."""

    def __init__(self, trace):
        self.trace = task_keys.keyed(trace)  # comm columns hold task keys (abtest.analysis.task_keys)
        self._intervals: pl.DataFrame | None = None
        self._aggregates: tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame] | None = None

    def _wakeups(self) -> pl.DataFrame | None:
        t = self.trace
        names = (
            ["sched_wakeup", "sched_wakeup_new"] if "sched_wakeup" in t.tables else ["sched_waking", "sched_wakeup_new"]
        )
        parts = [t.df(n, windowed=False).select("ts", "pid", "comm") for n in names if n in t.tables]
        return (
            pl.concat(
                [p.with_columns(pl.col("comm").cast(pl.Categorical), pl.col("pid").cast(pl.Int32)) for p in parts]
            )
            if parts
            else None
        )

    def _over_window(self, fn):
        """fn(sched_switch, wakeups, start_ns=, end_ns=) over the trace's window."""
        t = self.trace
        t.require("task states", *EVENTS)
        return fn(t.df("sched_switch", windowed=False), self._wakeups(), start_ns=t.start_ns, end_ns=t.end_ns)

    def df_state_intervals(self) -> pl.DataFrame:
        """df_task_state_intervals over the trace's window (computed once per analysis object)."""
        if self._intervals is None:
            self._intervals = self._over_window(df_task_state_intervals)
        return self._intervals

    def df_aggregates(self) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
        """df_task_state_aggregates over the trace's window (computed once per analysis object): what the
        metrics and the declared tables read (_per_name)."""
        if self._aggregates is None:
            self._aggregates = self._over_window(df_task_state_aggregates)
        return self._aggregates

    def df_states(self, by: str = "comm") -> pl.DataFrame:
        return df_task_states(self.df_aggregates()[0] if by == "comm" else self.df_state_intervals(), by=by)

    def df_activations(self) -> pl.DataFrame:
        return df_activations(self.df_state_intervals())

    def df_activation_stats(self, by: str = "comm") -> pl.DataFrame:
        runs = self.df_aggregates()[1] if by in ("comm", "cpu") else self.df_activations()
        return df_activation_stats(runs, by=by, window_ns=self.trace.end_ns - self.trace.start_ns)

    def df_cluster_running(self) -> pl.DataFrame:
        """Running time per task name and cluster (workload-processor's task residency per cluster):
        ``comm, cluster, running_ns, pct`` (% of the name's running time)."""
        from abtest.analysis.clusters import trace_clusters

        cl = trace_clusters(self.trace).select("cpu", "cluster")
        # summed per name and CPU first (a few hundred rows), then per cluster: the runs are not copied
        per_cpu = self.df_aggregates()[1].group_by("comm", "cpu").agg(pl.col("dur").sum())
        res = (
            per_cpu.join(cl, on="cpu", how="left")
            .group_by("comm", "cluster")
            .agg(pl.col("dur").sum().alias("running_ns"))
        )
        return res.with_columns(
            (100.0 * pl.col("running_ns") / pl.col("running_ns").sum().over("comm")).alias("pct")
        ).sort("comm", "cluster")


# --------------------------------------------------------------------------------------------
# Declared metrics (abtest.analysis.registry)
# --------------------------------------------------------------------------------------------
_T = (
    "of the threads named {task} (sched_switch states, sched_wakeup; share of their known time, same-name "
    "threads pooled)"
)
TASK_RUNNING_PCT = MetricSpec(
    "tasks.task.{task}.running_pct",
    "%",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.TASK,
    title="task running",
    description=f"Share of time running on a CPU {_T}.",
    window=WindowCombine.TIME_APPROX,
)
TASK_RUNNABLE_PCT = MetricSpec(
    "tasks.task.{task}.runnable_pct",
    "%",
    Direction.LOWER,
    Aggregation.MEAN,
    Grouping.TASK,
    title="task runnable (waiting)",
    description=f"Share of time runnable but not running (woken or preempted, waiting for a CPU) {_T}.",
    window=WindowCombine.TIME_APPROX,
)
TASK_SLEEPING_PCT = MetricSpec(
    "tasks.task.{task}.sleeping_pct",
    "%",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.TASK,
    title="task sleeping",
    description=f"Share of time sleeping (S, I) {_T}.",
    window=WindowCombine.TIME_APPROX,
)
TASK_UNINTERRUPTIBLE_PCT = MetricSpec(
    "tasks.task.{task}.uninterruptible_pct",
    "%",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.TASK,
    title="task uninterruptible",
    description=f"Share of time in uninterruptible sleep (D: I/O, locks) {_T}.",
    window=WindowCombine.TIME_APPROX,
)
TASK_ACTIVATION_MEAN_MS = MetricSpec(
    "tasks.task.{task}.activation_mean_ms",
    "ms",
    Direction.NONE,
    Aggregation.GMEAN,
    Grouping.TASK,
    title="task activation mean",
    description="Mean duration of the runs (switch-in to switch-out on one CPU; LISA's "
    "activations) of the threads named {task}.",
    window=WindowCombine.EVENTS,
)
TASK_ACTIVATION_P95_MS = MetricSpec(
    "tasks.task.{task}.activation_p95_ms",
    "ms",
    Direction.NONE,
    Aggregation.GMEAN,
    Grouping.TASK,
    title="task activation p95",
    description="95th percentile run duration of the threads named {task}.",
    window=WindowCombine.QUANTILE,
)

METRICS = (
    TASK_RUNNING_PCT,
    TASK_RUNNABLE_PCT,
    TASK_SLEEPING_PCT,
    TASK_UNINTERRUPTIBLE_PCT,
    TASK_ACTIVATION_MEAN_MS,
    TASK_ACTIVATION_P95_MS,
)


@per_trace  # per task name, small: read by the metrics and the declared tables (the runs are not kept)
def _per_name(trace) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(one row per task name, most running time first: comm, threads, known_ns, <state>_pct, activations,
    activations_per_s, mean_ms, p50_ms, p95_ms, max_ms; running time per name and cluster: comm, cluster, pct)."""
    ta = TasksAnalysis(trace)
    times, runs, thread_names = ta.df_aggregates()
    act = df_activation_stats(runs, window_ns=trace.end_ns - trace.start_ns).drop("running_ms", strict=False)
    threads = thread_names.group_by("comm").agg(pl.col("pid").n_unique().alias("threads"))
    per = (
        df_task_states(times)
        .with_row_index("rank")
        .join(threads, on="comm", how="left")
        .join(act, on="comm", how="left")
        .with_columns(pl.col("threads").fill_null(0), pl.col("activations").fill_null(0))
        .sort("rank")
        .drop("rank")
    )
    return per, ta.df_cluster_running().select("comm", "cluster", "pct")


def _state_rows(trace, top: int = 10) -> pl.DataFrame:
    return _per_name(trace)[0].head(top).with_columns((pl.col("known_ns") / 1e9).alias("known_s"))


def _cluster_rows(trace, top: int = 10) -> pl.DataFrame:
    per, clusters = _per_name(trace)
    names = per.head(top).select("comm", pl.int_range(pl.len()).alias("rank"))
    return clusters.join(names, on="comm").sort("rank", "cluster").drop("rank")


TABLES = (
    TableSpec(
        "states",
        "Task states and activations of the 10 task names with most running time (% of the known time)",
        "comm threads known_s[s] "
        + " ".join(f"{st}_pct[%]" for st in STATES)
        + " activations activations_per_s[1/s] mean_ms[ms] p50_ms[ms] p95_ms[ms] max_ms[ms]",
        _state_rows,
        note="activations: runs (switch-in to switch-out); mean / p50 / p95 / max: their durations",
    ),
    TableSpec(
        "cluster_running",
        "Running time per cluster of the 10 task names with most running time (% of the name's running time)",
        "comm cluster pct[%]",
        _cluster_rows,
        keys=2,
    ),
)


def metrics(trace, options=None) -> list[MetricValue]:
    """Per task name: the names in ``options.tasks`` and the ``options.top_tasks`` names with the most running
    time. Needs sched_switch."""
    st, _ = _per_name(trace)
    named = list(getattr(options, "tasks", ()) or ())
    top = getattr(options, "top_tasks", 20)
    st = st.filter(pl.col("comm").is_in(task_keys.select(st["comm"].to_list(), named)) | (pl.int_range(pl.len()) < top))
    out: list[MetricValue] = []
    for r in st.iter_rows(named=True):  # at most top + len(named) names
        c = r["comm"]
        out += [
            MetricValue(spec, float(r[col]), c)
            for spec, col in (
                (TASK_RUNNING_PCT, "running_pct"),
                (TASK_RUNNABLE_PCT, "runnable_pct"),
                (TASK_SLEEPING_PCT, "sleeping_pct"),
                (TASK_UNINTERRUPTIBLE_PCT, "uninterruptible_pct"),
            )
            if r[col] is not None
        ]
        if r["activations"]:
            out += [
                MetricValue(TASK_ACTIVATION_MEAN_MS, float(r["mean_ms"]), c),
                MetricValue(TASK_ACTIVATION_P95_MS, float(r["p95_ms"]), c),
            ]
    return out
