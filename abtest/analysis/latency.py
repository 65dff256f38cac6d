"""Wakeup latency: time from a task's wakeup to the moment it starts running (sched_switch in).

Events: ``sched_switch`` and ``sched_waking`` (preferred: fires when the wakeup starts) or else
``sched_wakeup``; ``sched_wakeup_new`` (optional) adds the first wakeup of new tasks.
Record with ``-e sched:sched_switch -e sched:sched_waking -e sched:sched_wakeup_new``.

Matching rules (vectorised with sorted as-of joins, no per-event Python):

* a wakeup of pid P at time t counts only if P was *not running* at t: the last sched_switch
  involving P before t switched it out, or (no earlier switch of P in the trace) the next one
  switches it in. Wakeups of a task still on its CPU (it set itself sleeping but had not switched
  out yet, so no switch-in follows) are dropped;
* its latency is the time to the next sched_switch that switches P in (``next_pid == P``),
  provided P was not switched out in between;
* if several wakeups precede the same switch-in, the earliest counts (later ones found the task
  already runnable);
* pid 0 (the idle task) is ignored; a wakeup with no switch-in before the end of the trace is
  dropped (reported as ``unmatched_wakeups`` in the summary).
"""
from __future__ import annotations

import numpy as np
import polars as pl

from abtest.metric_spec import Aggregation, Direction, Grouping, MetricSpec, MetricValue

EVENTS = ("sched_switch", "sched_waking")
# sched_wakeup replaces sched_waking when the latter was not recorded; sched_wakeup_new adds new tasks
OPTIONAL_EVENTS = ("sched_wakeup", "sched_wakeup_new")



def _wakeup_frame(waking: pl.DataFrame, kind: str) -> pl.DataFrame:
    cols = [pl.col("ts").cast(pl.Int64), pl.col("pid").cast(pl.Int32), pl.col("comm").cast(pl.Utf8)]
    tgt = "target_cpu" if "target_cpu" in waking.columns else "cpu"
    cols.append(pl.col(tgt).cast(pl.Int32).alias("target_cpu"))
    return waking.select(cols).with_columns(pl.lit(kind).alias("kind"))


def df_wakeup_latency(wakeups: pl.DataFrame, sched_switch: pl.DataFrame, *,
                      start_ns: int | None = None, end_ns: int | None = None, backend: str = "native") -> pl.DataFrame:
    """One row per matched wakeup.

    Needs: sched_switch and a wakeup table (sched_waking, else sched_wakeup; sched_wakeup_new may be
    concatenated). ``wakeups``: ts, pid, comm, target_cpu (or cpu), optional kind. Pass whole
    tables; ``[start_ns, end_ns)`` selects wakeups by their timestamp.

    Returns pid (Int32), comm, kind ("waking"/"wakeup"/"wakeup_new"), wakeup_ts (ns), switch_in_ts
    (ns), cpu (Int32, where the task ran), target_cpu, latency_ns (Int64), latency_us (Float64).
    Sorted by wakeup_ts. ``backend``: "native" (the rules replayed in time order, native/src/sim_latency.rs)
    or "python" (as-of joins: the reference).
    """
    w = wakeups
    if "kind" not in w.columns:
        w = w.with_columns(pl.lit("wakeup").alias("kind"))
    w = w.select(pl.col("ts").cast(pl.Int64), pl.col("pid").cast(pl.Int32), pl.col("comm").cast(pl.Utf8),
                 pl.col("target_cpu" if "target_cpu" in w.columns else "cpu").cast(pl.Int32).alias("target_cpu"),
                 "kind").filter(pl.col("pid") != 0)
    if start_ns is not None:
        w = w.filter(pl.col("ts") >= start_ns)
    if end_ns is not None:
        w = w.filter(pl.col("ts") < end_ns)
    if backend == "native":
        from abtest.analysis import sim_native
        return sim_native.wakeup_latency(w, sched_switch)
    sw = sched_switch.select(pl.col("ts").cast(pl.Int64), pl.col("cpu").cast(pl.Int32),
                             pl.col("prev_pid").cast(pl.Int32), pl.col("next_pid").cast(pl.Int32))
    # one stream of "pid P switched in/out at ts" (out before in at equal ts: order of the kernel)
    moves = pl.concat([
        sw.select("ts", pl.col("prev_pid").alias("pid"), pl.lit(False).alias("on_cpu"), "cpu", pl.lit(0).alias("_o")),
        sw.select("ts", pl.col("next_pid").alias("pid"), pl.lit(True).alias("on_cpu"), "cpu", pl.lit(1).alias("_o")),
    ]).filter(pl.col("pid") != 0).with_row_index("_seq").sort(["pid", "ts", "_o", "_seq"]).drop("_o", "_seq")
    moves = moves.unique(["pid", "ts"], keep="last", maintain_order=True)  # as-of needs unique (pid, ts)
    w = w.sort(["pid", "ts"])
    prev = moves.select("pid", "ts", pl.col("on_cpu").alias("prev_on_cpu"))
    nxt = moves.select("pid", pl.col("ts").alias("next_ts"), pl.col("on_cpu").alias("next_on_cpu"), "cpu")
    # a switch at exactly the wakeup ts counts as "after" (the wakeup is traced before the switch
    # it causes): the state comes from switches strictly before ts, the match from those at or after.
    j = w.join_asof(prev.with_columns((pl.col("ts") + 1).alias("ts")), on="ts", by="pid",
                    strategy="backward", check_sortedness=False)
    j = j.join_asof(nxt.with_columns(pl.col("next_ts").alias("ts")), on="ts", by="pid",
                    strategy="forward", check_sortedness=False)
    valid = (pl.col("next_on_cpu") == True) & (  # noqa: E712 (polars expression)
        pl.col("prev_on_cpu").is_null() | (pl.col("prev_on_cpu") == False))  # noqa: E712
    m = j.filter(valid).sort(["pid", "next_ts", "ts"]).unique(["pid", "next_ts"], keep="first", maintain_order=True)
    return m.select(
        "pid", "comm", "kind", pl.col("ts").alias("wakeup_ts"), pl.col("next_ts").alias("switch_in_ts"),
        "cpu", "target_cpu", (pl.col("next_ts") - pl.col("ts")).alias("latency_ns"),
    ).with_columns((pl.col("latency_ns") / 1e3).alias("latency_us")).sort("wakeup_ts")


def _stats(col: pl.Expr) -> list[pl.Expr]:
    pos = col.filter(col > 0)
    return [
        pl.len().alias("wakeups"),
        col.mean().alias("mean_us"),
        col.quantile(0.5, "linear").alias("p50_us"),
        col.quantile(0.95, "linear").alias("p95_us"),
        col.quantile(0.99, "linear").alias("p99_us"),
        col.max().alias("max_us"),
        pos.log().mean().exp().alias("gmean_us"),
    ]


def df_latency_stats(latency: pl.DataFrame, by: str | list[str] | None = ("pid", "comm")) -> pl.DataFrame:
    """Latency statistics in us: wakeups, mean_us, p50_us, p95_us, p99_us (linear interpolation
    between order statistics, as numpy's default), max_us, gmean_us (geometric mean of the strictly
    positive latencies). ``by``: grouping columns (default per task: pid, comm; None = overall).

    Needs: sched_switch + sched_waking|sched_wakeup (via df_wakeup_latency).
    A pid that exec()s may show under several comms: each (pid, comm) is its own row.
    """
    col = pl.col("latency_us")
    if not by:
        return latency.select(_stats(col))
    by = [by] if isinstance(by, str) else list(by)
    return latency.group_by(by).agg(_stats(col)).sort(["wakeups", *by], descending=[True] + [False] * len(by))


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
        _cdf(latency.filter((pl.col("pid") == pid) & (pl.col("comm") == comm))["latency_us"].to_numpy(),
             f"{comm}:{pid} ({n})")
    ax.set_xscale("log")
    ax.set_xlabel("wakeup latency (us)")
    ax.set_ylabel("fraction of wakeups")
    ax.set_title("Wakeup latency CDF")
    ax.legend(fontsize="small")
    return fig




class LatencyAnalysis:
    """Wakeup latency of one trace (window = the trace's window)."""

    def __init__(self, trace):
        self.trace = trace

    def wakeup_event(self) -> str:
        """"sched_waking" when present, else "sched_wakeup" (MissingEventsError when neither)."""
        from abtest.trace.errors import MissingEventsError

        self.trace.require("wakeup latency", "sched_switch")
        for name in ("sched_waking", "sched_wakeup"):
            if name in self.trace.tables:
                return name
        raise MissingEventsError("wakeup latency", ["sched_waking"], str(self.trace.path))

    def df_wakeups(self) -> pl.DataFrame:
        name = self.wakeup_event()
        parts = [_wakeup_frame(self.trace.df(name, windowed=False), name.removeprefix("sched_"))]
        if ("sched_wakeup_new" in self.trace.tables):
            parts.append(_wakeup_frame(self.trace.df("sched_wakeup_new", windowed=False), "wakeup_new"))
        return pl.concat(parts)

    def df_latency(self) -> pl.DataFrame:
        return df_wakeup_latency(self.df_wakeups(), self.trace.df("sched_switch", windowed=False),
                                 start_ns=self.trace.start_ns, end_ns=self.trace.end_ns)

    def df_task_stats(self) -> pl.DataFrame:
        return df_latency_stats(self.df_latency())

    def df_stats(self) -> pl.DataFrame:
        return df_latency_stats(self.df_latency(), by=None)

    def plot_cdf(self, top_tasks: int = 5, ax=None):
        return plot_latency_cdf(self.df_latency(), top_tasks, ax=ax)


def summary(trace, top_tasks: int = 10) -> dict:
    """JSON summary: ``wakeup_event`` ("sched_waking"/"sched_wakeup"), ``wakeups`` (window total),
    ``matched_wakeups``, ``unmatched_wakeups`` (no switch-in followed, or the task was still
    running), ``mean_us``, ``p50_us``, ``p95_us``, ``p99_us``, ``max_us``, ``gmean_us`` (all matched
    wakeups), and ``tasks``: the top_tasks most woken tasks as ``{"<comm>:<pid>": {wakeups, mean_us,
    p50_us, p95_us, p99_us, max_us, gmean_us}}``."""
    la = LatencyAnalysis(trace)
    wk = la.df_wakeups()
    lo, hi = trace.start_ns, trace.end_ns
    in_win = wk.filter((pl.col("ts") >= lo) & (pl.col("ts") < hi) & (pl.col("pid") != 0)).height
    lat = la.df_latency()
    overall = df_latency_stats(lat, by=None).row(0, named=True)
    per = df_latency_stats(lat).head(top_tasks)
    keys = ("wakeups", "mean_us", "p50_us", "p95_us", "p99_us", "max_us", "gmean_us")
    return {
        "wakeup_event": la.wakeup_event(),
        "wakeups": in_win,
        "matched_wakeups": lat.height,
        "unmatched_wakeups": in_win - lat.height,
        **{k: _num(overall[k]) for k in keys if k != "wakeups"},
        "tasks": {f"{r['comm']}:{r['pid']}": {k: _num(r[k]) for k in keys} for r in per.iter_rows(named=True)},
    }


def _num(x):
    if x is None:
        return None
    if isinstance(x, float):
        return None if np.isnan(x) else x
    return int(x)


# --------------------------------------------------------------------------------------------
# Declared metrics (abtest.analysis.registry)
# --------------------------------------------------------------------------------------------
_LAT = "Wakeup latency (wakeup event -> the task's next switch-in, module docstring rules) of all matched wakeups"
LATENCY_GMEAN_US = MetricSpec("latency.gmean_us", "us", Direction.LOWER, Aggregation.GMEAN,
                              title="wakeup latency gmean", headline=True,
                              description=f"{_LAT}: geometric mean of the positive latencies.")
LATENCY_MEAN_US = MetricSpec("latency.mean_us", "us", Direction.LOWER, Aggregation.GMEAN,
                             title="wakeup latency mean", description=f"{_LAT}: arithmetic mean.")
LATENCY_P50_US = MetricSpec("latency.p50_us", "us", Direction.LOWER, Aggregation.GMEAN,
                            title="wakeup latency p50", description=f"{_LAT}: median (linear interpolation).")
LATENCY_P95_US = MetricSpec("latency.p95_us", "us", Direction.LOWER, Aggregation.GMEAN,
                            title="wakeup latency p95", description=f"{_LAT}: 95th percentile.")
LATENCY_P99_US = MetricSpec("latency.p99_us", "us", Direction.LOWER, Aggregation.GMEAN,
                            title="wakeup latency p99", description=f"{_LAT}: 99th percentile.")
LATENCY_MAX_US = MetricSpec("latency.max_us", "us", Direction.LOWER, Aggregation.MEDIAN,
                            title="wakeup latency max", description=f"{_LAT}: maximum (median over iterations: "
                                                                     "one outlier per run is common).")
LATENCY_WAKEUPS_PER_S = MetricSpec("latency.wakeups_per_s", "1/s", Direction.NONE, Aggregation.MEAN,
                                   title="matched wakeups", description="Matched wakeups per second of window.")
_TASK = ("of the wakeups of threads named {task} (comm at the wakeup; threads sharing a name are pooled, a "
         "renamed thread counts under each name it had)")
TASK_LATENCY_GMEAN_US = MetricSpec("latency.task.{task}.gmean_us", "us", Direction.LOWER, Aggregation.GMEAN,
                                   Grouping.TASK, title="task wakeup latency gmean",
                                   description=f"Geometric mean wakeup latency {_TASK}.")
TASK_LATENCY_P95_US = MetricSpec("latency.task.{task}.p95_us", "us", Direction.LOWER, Aggregation.GMEAN,
                                 Grouping.TASK, title="task wakeup latency p95",
                                 description=f"95th percentile wakeup latency {_TASK}.")
TASK_WAKEUPS_PER_S = MetricSpec("latency.task.{task}.wakeups_per_s", "1/s", Direction.NONE, Aggregation.MEAN,
                                Grouping.TASK, title="task wakeups",
                                description=f"Matched wakeups per second of window {_TASK}.")

METRICS = (LATENCY_GMEAN_US, LATENCY_MEAN_US, LATENCY_P50_US, LATENCY_P95_US, LATENCY_P99_US, LATENCY_MAX_US,
           LATENCY_WAKEUPS_PER_S, TASK_LATENCY_GMEAN_US, TASK_LATENCY_P95_US, TASK_WAKEUPS_PER_S)


def metrics(trace, options=None) -> list[MetricValue]:
    """The declared latency metrics of one trace. Per task: the tasks named in ``options.tasks`` and the
    ``options.top_tasks`` most woken names with at least ``options.min_task_wakeups`` wakeups."""
    la = LatencyAnalysis(trace)
    lat = la.df_latency()
    win_s = max((trace.end_ns - trace.start_ns) / 1e9, 1e-9)
    out: list[MetricValue] = [MetricValue(LATENCY_WAKEUPS_PER_S, lat.height / win_s)]
    if lat.height == 0:
        return out
    overall = df_latency_stats(lat, by=None).row(0, named=True)
    for spec, col in ((LATENCY_GMEAN_US, "gmean_us"), (LATENCY_MEAN_US, "mean_us"), (LATENCY_P50_US, "p50_us"),
                      (LATENCY_P95_US, "p95_us"), (LATENCY_P99_US, "p99_us"), (LATENCY_MAX_US, "max_us")):
        if overall[col] is not None:
            out.append(MetricValue(spec, float(overall[col])))
    per = df_latency_stats(lat, by="comm")
    named = tuple(getattr(options, "tasks", ()) or ())
    top = getattr(options, "top_tasks", 20)
    floor = getattr(options, "min_task_wakeups", 10)
    chosen = per.filter(pl.col("comm").is_in(list(named)) | (
        (pl.col("wakeups") >= floor) & (pl.int_range(pl.len()) < top)))
    for r in chosen.iter_rows(named=True):  # at most top + len(named) task names
        if r["gmean_us"] is not None:
            out.append(MetricValue(TASK_LATENCY_GMEAN_US, float(r["gmean_us"]), r["comm"]))
        if r["p95_us"] is not None:
            out.append(MetricValue(TASK_LATENCY_P95_US, float(r["p95_us"]), r["comm"]))
        out.append(MetricValue(TASK_WAKEUPS_PER_S, r["wakeups"] / win_s, r["comm"]))
    return out
