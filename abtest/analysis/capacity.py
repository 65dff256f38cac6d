"""CPU capacity over time and uclamp per task: the scheduler's view of how much each CPU can do and how tasks
are clamped.

Events (none exists on mainline kernels as a trace event; they are bare tracepoints there. LISA's kernel
module turns them into ``lisa__*`` events; Android kernels have some as vendor events; see
docs/analysis-kernel-views.md):

* ``sched_cpu_capacity`` / ``lisa__sched_cpu_capacity``: cpu, capacity (rq->cpu_capacity: what is left for
  CFS after RT, DL, IRQ and thermal pressure), capacity_orig (the CPU's capacity at its top OPP),
  capacity_curr (at the current OPP, with frequency invariance);
* ``uclamp_update_tsk``: a task's clamp request changed (pid, and either uclamp_id 0 = min / 1 = max with
  value, or uclamp_min / uclamp_max columns);
* ``lisa__uclamp_util_se`` (pid, comm, cpu, util_avg, uclamp_avg = util clamped by the rq's clamps,
  uclamp_min, uclamp_max of the task's rq) and ``lisa__uclamp_util_cfs`` (cpu, util_avg, uclamp_avg,
  uclamp_min, uclamp_max of the root cfs_rq).

Signals hold from one sample to the next; before the first sample they are unknown (not counted).
Capacity units: 1024 = the biggest CPU at its top OPP.
"""

from __future__ import annotations

import polars as pl

from abtest.analysis import task_keys
from abtest.analysis.intervals import df_intervals, window_of
from abtest.metric_spec import Aggregation, Direction, Grouping, MetricSpec, MetricValue, TableSpec, WindowCombine
from abtest.trace.errors import MissingEventsError

CAPACITY_TABLES = ("sched_cpu_capacity", "lisa__sched_cpu_capacity")
TASK_CLAMP_TABLES = ("uclamp_update_tsk",)
UTIL_SE_TABLES = ("lisa__uclamp_util_se",)
UTIL_CFS_TABLES = ("lisa__uclamp_util_cfs",)
EVENTS: tuple[str, ...] = ()  # any of the optional ones
OPTIONAL_EVENTS = CAPACITY_TABLES + TASK_CLAMP_TABLES + UTIL_SE_TABLES + UTIL_CFS_TABLES

__all__ = [
    "EVENTS",
    "OPTIONAL_EVENTS",
    "df_capacity_stats",
    "df_task_clamp_changes",
    "df_task_clamps",
    "df_cpu_clamps",
    "CapacityAnalysis",
    "metrics",
]


def _tw_mean(col: str) -> pl.Expr:
    """Time-weighted mean of ``col`` over the intervals where it is known (null when never known)."""
    w = pl.col("dur").cast(pl.Float64)
    k = pl.col(col).is_not_null()
    known = w.filter(k).sum()
    return (pl.when(known > 0).then((pl.col(col).cast(pl.Float64) * w).filter(k).sum() / known).otherwise(None)).alias(
        f"mean_{col}"
    )


def df_capacity_stats(
    capacity: pl.DataFrame, *, start_ns: int | None = None, end_ns: int | None = None
) -> pl.DataFrame:
    """Per CPU: ``cpu, samples, mean_capacity, min_capacity, mean_capacity_curr, capacity_orig (last),
    reduced_pct`` (% of the known time capacity < capacity_orig, i.e. RT/DL/IRQ/thermal pressure took some;
    null without capacity_orig), ``known_ns``. Events: sched_cpu_capacity / lisa__sched_cpu_capacity."""
    has = {c: c in capacity.columns for c in ("capacity_orig", "capacity_curr")}
    ev = capacity.select(
        pl.col("ts").cast(pl.Int64),
        pl.col("cpu").cast(pl.Int32) if "cpu" in capacity.columns else pl.col("cpu_id").cast(pl.Int32).alias("cpu"),
        pl.col("capacity").cast(pl.Int64),
        *[
            (pl.col(c).cast(pl.Int64) if has[c] else pl.lit(None, pl.Int64)).alias(c)
            for c in ("capacity_orig", "capacity_curr")
        ],
    )
    start_ns, end_ns = window_of(ev, start_ns, end_ns)
    iv = df_intervals(
        ev,
        ["capacity", "capacity_orig", "capacity_curr"],
        keys="cpu",
        start_ns=start_ns,
        end_ns=end_ns,
        merge_equal=False,
    ).filter(pl.col("capacity").is_not_null())
    red = pl.col("capacity") < pl.col("capacity_orig")
    out = iv.group_by("cpu").agg(
        _tw_mean("capacity"),
        pl.col("capacity").min().alias("min_capacity"),
        _tw_mean("capacity_curr"),
        pl.col("capacity_orig").drop_nulls().last().alias("capacity_orig"),
        pl.col("dur").sum().alias("known_ns"),
        (100.0 * pl.col("dur").filter(red).sum() / pl.col("dur").sum()).alias("reduced_pct"),
    )
    cnt = (
        ev.filter((pl.col("ts") >= start_ns) & (pl.col("ts") < end_ns))
        .group_by("cpu")
        .agg(pl.len().cast(pl.Int64).alias("samples"))
    )
    out = out.join(cnt, on="cpu", how="left").with_columns(pl.col("samples").fill_null(0))
    if not has["capacity_orig"]:
        out = out.with_columns(pl.lit(None, pl.Float64).alias("reduced_pct"))
    return out.select(
        "cpu",
        "samples",
        "mean_capacity",
        "min_capacity",
        "mean_capacity_curr",
        "capacity_orig",
        "reduced_pct",
        "known_ns",
    ).sort("cpu")


def df_task_clamp_changes(uclamp_update_tsk: pl.DataFrame) -> pl.DataFrame:
    """``ts, pid, comm, uclamp_min, uclamp_max`` (each carried forward per task; null until first known) from
    uclamp_update_tsk in either form (uclamp_id + value, or uclamp_min / uclamp_max columns)."""
    df = uclamp_update_tsk
    comm = pl.col("comm").cast(pl.Utf8) if "comm" in df.columns else pl.lit(None, pl.Utf8)
    if "uclamp_id" in df.columns:
        val = "value" if "value" in df.columns else "uclamp_value"
        mn = pl.when(pl.col("uclamp_id") == 0).then(pl.col(val)).cast(pl.Int64)
        mx = pl.when(pl.col("uclamp_id") == 1).then(pl.col(val)).cast(pl.Int64)
    else:
        pick = lambda *names: next((pl.col(n).cast(pl.Int64) for n in names if n in df.columns), pl.lit(None, pl.Int64))  # noqa: E731
        mn, mx = pick("uclamp_min", "min", "util_min"), pick("uclamp_max", "max", "util_max")
    ev = (
        df.select(
            pl.col("ts").cast(pl.Int64),
            pl.col("pid").cast(pl.Int32),
            comm.alias("comm"),
            mn.alias("uclamp_min"),
            mx.alias("uclamp_max"),
        )
        .with_row_index("_i")
        .sort("pid", "ts", "_i")
    )
    return ev.with_columns(pl.col("uclamp_min", "uclamp_max", "comm").forward_fill().over("pid")).drop("_i")


def df_task_clamps(changes: pl.DataFrame, *, start_ns: int, end_ns: int) -> pl.DataFrame:
    """Per task name (threads pooled): ``comm, tasks, updates (in the window), mean_uclamp_min, mean_uclamp_max``
    (time-weighted over the time each thread's value is known, from its first update)."""
    iv = df_intervals(
        changes.select("ts", "pid", "uclamp_min", "uclamp_max"),
        ["uclamp_min", "uclamp_max"],
        keys="pid",
        start_ns=start_ns,
        end_ns=end_ns,
        merge_equal=False,
    )
    names = changes.group_by("pid").agg(pl.col("comm").drop_nulls().last())
    iv = iv.join(names, on="pid", how="left").with_columns(pl.col("comm").fill_null(pl.col("pid").cast(pl.Utf8)))
    cnt = (
        changes.filter((pl.col("ts") >= start_ns) & (pl.col("ts") < end_ns))
        .join(names, on="pid", how="left", suffix="_n")
        .group_by(pl.coalesce("comm_n", "comm", pl.col("pid").cast(pl.Utf8)).alias("comm"))
        .agg(pl.len().cast(pl.Int64).alias("updates"))
    )
    out = iv.group_by("comm").agg(
        pl.col("pid").n_unique().cast(pl.Int64).alias("tasks"), _tw_mean("uclamp_min"), _tw_mean("uclamp_max")
    )
    return out.join(cnt, on="comm", how="left").with_columns(pl.col("updates").fill_null(0)).sort("comm")


def df_cpu_clamps(util_cfs: pl.DataFrame, *, start_ns: int | None = None, end_ns: int | None = None) -> pl.DataFrame:
    """Per CPU from lisa__uclamp_util_cfs: ``cpu, mean_util_avg, mean_uclamp_avg, mean_uclamp_min, mean_uclamp_max``
    (time-weighted; uclamp_avg = util as the rq's clamps let schedutil see it)."""
    cols = ["util_avg", "uclamp_avg", "uclamp_min", "uclamp_max"]
    ev = util_cfs.select(
        pl.col("ts").cast(pl.Int64), pl.col("cpu").cast(pl.Int32), *[pl.col(c).cast(pl.Int64) for c in cols]
    )
    start_ns, end_ns = window_of(ev, start_ns, end_ns)
    iv = df_intervals(ev, cols, keys="cpu", start_ns=start_ns, end_ns=end_ns, merge_equal=False)
    return iv.group_by("cpu").agg([_tw_mean(c) for c in cols]).sort("cpu")


class CapacityAnalysis:
    """CPU capacity and uclamp of one trace (``trace.capacity``)."""

    def __init__(self, trace):
        self.trace = task_keys.keyed(trace)  # comm columns hold task keys (abtest.analysis.task_keys)

    def _table(self, names: tuple[str, ...], what: str) -> pl.DataFrame:
        for n in names:
            if n in self.trace.tables:
                return self.trace.df(n, windowed=False)
        raise MissingEventsError(what, [names[0]], str(self.trace.path))

    def _win(self) -> dict:
        return {"start_ns": self.trace.start_ns, "end_ns": self.trace.end_ns}

    def df_capacity_stats(self) -> pl.DataFrame:
        return df_capacity_stats(self._table(CAPACITY_TABLES, "CPU capacity"), **self._win())

    def df_task_clamps(self) -> pl.DataFrame:
        return df_task_clamps(df_task_clamp_changes(self._table(TASK_CLAMP_TABLES, "uclamp per task")), **self._win())

    def df_cpu_clamps(self) -> pl.DataFrame:
        return df_cpu_clamps(self._table(UTIL_CFS_TABLES, "uclamp per CPU"), **self._win())

    def df_task_clamped_util(self) -> pl.DataFrame:
        """Per task name from lisa__uclamp_util_se: samples, mean util_avg and uclamp_avg (plain means of samples)."""
        se = self._table(UTIL_SE_TABLES, "clamped task util")
        w = self._win()
        se = se.filter((pl.col("ts") >= w["start_ns"]) & (pl.col("ts") < w["end_ns"]))
        return (
            se.group_by(pl.col("comm").cast(pl.Utf8))
            .agg(
                pl.len().cast(pl.Int64).alias("samples"),
                pl.col("util_avg").cast(pl.Float64).mean().alias("mean_util_avg"),
                pl.col("uclamp_avg").cast(pl.Float64).mean().alias("mean_uclamp_avg"),
            )
            .sort("comm")
        )


def _table(fn):
    """The rows of a declared table: the frame `fn()` returns, None when the trace lacks its events."""
    try:
        return fn()
    except MissingEventsError:
        return None


TABLES = (
    TableSpec(
        "capacity",
        "CPU capacity (sched_cpu_capacity, capacity units: 1024 = biggest CPU at its top OPP)",
        "cpu samples mean_capacity min_capacity mean_capacity_curr capacity_orig reduced_pct[%]",
        lambda t: _table(CapacityAnalysis(t).df_capacity_stats),
    ),
    TableSpec(
        "task_clamps",
        "uclamp requests per task name",
        "comm tasks updates mean_uclamp_min mean_uclamp_max",
        lambda t: _table(CapacityAnalysis(t).df_task_clamps),
    ),
    TableSpec(
        "cpu_clamps",
        "Clamped util per CPU",
        "cpu mean_util_avg mean_uclamp_avg mean_uclamp_min mean_uclamp_max",
        lambda t: _table(CapacityAnalysis(t).df_cpu_clamps),
    ),
    TableSpec(
        "task_clamped_util",
        "Clamped util per task name",
        "comm samples mean_util_avg mean_uclamp_avg",
        lambda t: _table(CapacityAnalysis(t).df_task_clamped_util),
    ),
)


# --------------------------------------------------------------------------------------------
# Declared metrics (abtest.analysis.registry)
# --------------------------------------------------------------------------------------------
CPU_MEAN_CAPACITY = MetricSpec(
    "capacity.cpu.{cpu}.mean",
    "",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.CPU,
    title="mean CPU capacity",
    description="Time-weighted mean of the CPU's capacity for CFS (rq->cpu_capacity, 1024 = biggest CPU at its top "
    "OPP; sched_cpu_capacity / lisa__sched_cpu_capacity).",
    window=WindowCombine.TIME,
)
CPU_CAPACITY_REDUCED_PCT = MetricSpec(
    "capacity.cpu.{cpu}.reduced_pct",
    "%",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.CPU,
    title="capacity reduced",
    description="Share of the known time the CPU's capacity for CFS was below its original capacity (RT, DL, IRQ or "
    "thermal pressure).",
    window=WindowCombine.TIME,
)
TASK_UCLAMP_MIN = MetricSpec(
    "uclamp.task.{task}.mean_min",
    "",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.TASK,
    title="task uclamp.min",
    description="Time-weighted mean uclamp.min request of the threads named {task} (uclamp_update_tsk).",
    window=WindowCombine.TIME,
)
TASK_UCLAMP_MAX = MetricSpec(
    "uclamp.task.{task}.mean_max",
    "",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.TASK,
    title="task uclamp.max",
    description="Time-weighted mean uclamp.max request of the threads named {task} (uclamp_update_tsk).",
    window=WindowCombine.TIME,
)
CPU_UCLAMP_AVG = MetricSpec(
    "uclamp.cpu.{cpu}.mean_clamped_util",
    "",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.CPU,
    title="clamped CPU util",
    description="Time-weighted mean of the root cfs_rq util as clamped by the rq's uclamp (what schedutil sees; "
    "lisa__uclamp_util_cfs uclamp_avg).",
    window=WindowCombine.TIME,
)

METRICS = (CPU_MEAN_CAPACITY, CPU_CAPACITY_REDUCED_PCT, TASK_UCLAMP_MIN, TASK_UCLAMP_MAX, CPU_UCLAMP_AVG)


def metrics(trace, options=None) -> list[MetricValue]:
    """The declared capacity / uclamp metrics of whatever the trace has (MissingEventsError when none)."""
    ca = CapacityAnalysis(trace)
    if not any(n in trace.tables for n in OPTIONAL_EVENTS):
        raise MissingEventsError("capacity and uclamp", ["sched_cpu_capacity"], str(trace.path))
    out: list[MetricValue] = []
    if any(n in trace.tables for n in CAPACITY_TABLES):
        for r in ca.df_capacity_stats().iter_rows(named=True):  # one row per CPU
            out.append(MetricValue(CPU_MEAN_CAPACITY, float(r["mean_capacity"]), str(r["cpu"])))
            if r["reduced_pct"] is not None:
                out.append(MetricValue(CPU_CAPACITY_REDUCED_PCT, float(r["reduced_pct"]), str(r["cpu"])))
    if any(n in trace.tables for n in TASK_CLAMP_TABLES):
        named = list(getattr(options, "tasks", ()) or ())
        top = getattr(options, "top_tasks", 20)
        tc = ca.df_task_clamps().sort("updates", descending=True)
        chosen = pl.col("comm").is_in(task_keys.select(tc["comm"].to_list(), named)) | (pl.int_range(pl.len()) < top)
        for r in tc.filter(chosen).iter_rows(named=True):
            if r["mean_uclamp_min"] is not None:
                out.append(MetricValue(TASK_UCLAMP_MIN, float(r["mean_uclamp_min"]), r["comm"]))
            if r["mean_uclamp_max"] is not None:
                out.append(MetricValue(TASK_UCLAMP_MAX, float(r["mean_uclamp_max"]), r["comm"]))
    if any(n in trace.tables for n in UTIL_CFS_TABLES):
        for r in ca.df_cpu_clamps().iter_rows(named=True):  # one row per CPU
            if r["mean_uclamp_avg"] is not None:
                out.append(MetricValue(CPU_UCLAMP_AVG, float(r["mean_uclamp_avg"]), str(r["cpu"])))
    return out
