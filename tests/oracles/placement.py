"""abtest.analysis.placement's runs written with frames (intervals.df_intervals keyed by CPU, the next task of
each sched_switch as the value) and their folds grouped afterwards: the oracle of the compiled pass and fold
(native/sim/src/placement.rs, abtest.analysis.sim_native), compared on every shared trace by
tests/test_sim_native.py."""

from __future__ import annotations

import polars as pl

from abtest.analysis.intervals import df_intervals


def df_task_intervals(
    sched_switch: pl.DataFrame,
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
    include_idle: bool = False,
) -> pl.DataFrame:
    """As abtest.analysis.placement.df_task_intervals: cpu, ts, dur, pid (0 = idle, dropped unless include_idle;
    a null pid's runs dropped), comm over ``[start_ns, end_ns)``; switches without a time or a CPU are not
    placed."""
    if sched_switch["ts"].null_count() or sched_switch["cpu"].null_count():
        sched_switch = sched_switch.filter(pl.col("ts").is_not_null() & pl.col("cpu").is_not_null())
    sw = sched_switch.select(
        pl.col("ts").cast(pl.Int64),
        pl.col("cpu").cast(pl.Int32),
        pl.col("next_pid").cast(pl.Int32).alias("pid"),
        pl.col("next_comm").alias("comm"),
    )
    iv = df_intervals(sw, ["pid", "comm"], keys="cpu", start_ns=start_ns, end_ns=end_ns)
    by_ts = sched_switch if sched_switch["ts"].is_sorted() else sched_switch.sort("ts", maintain_order=True)
    first_prev = (
        by_ts.lazy()
        .select("cpu", "prev_pid", "prev_comm")
        .group_by(pl.col("cpu").cast(pl.Int32), maintain_order=True)
        .first()
        .select("cpu", pl.col("prev_pid").cast(pl.Int32), pl.col("prev_comm").cast(pl.Utf8))
        .collect()
    )
    # iv is sorted by cpu, ts: a CPU's first interval is the row after another CPU's; its task, when unknown,
    # is the prev task of the CPU's first switch (a few CPUs: mapped, not joined, so no column is copied)
    lead = pl.col("pid").is_null() & pl.col("cpu").ne_missing(pl.col("cpu").shift(1))
    prev_pid = dict(zip(first_prev["cpu"], first_prev["prev_pid"]))
    prev_comm = dict(zip(first_prev["cpu"], first_prev["prev_comm"]))
    iv = iv.with_columns(
        pl.when(lead)
        .then(pl.col("cpu").replace_strict(prev_pid, default=None, return_dtype=pl.Int32))
        .otherwise(pl.col("pid"))
        .alias("pid"),
        pl.when(lead)
        .then(pl.col("cpu").replace_strict(prev_comm, default=None, return_dtype=pl.Utf8).cast(pl.Categorical))
        .otherwise(pl.col("comm").cast(pl.Categorical))
        .alias("comm"),
    )
    keep = pl.col("pid").is_not_null() if include_idle else pl.col("pid").is_not_null() & (pl.col("pid") != 0)
    return iv.filter(keep).select("cpu", "ts", "dur", "pid", "comm")


def folded(trace, runs_from_ns: int) -> dict[str, pl.DataFrame]:
    """What abtest.analysis.placement._folded returns (sim_native.placement_fold of the trace's runs from
    runs_from_ns to its end, counted from its start), grouped from df_task_intervals' runs."""
    start = trace.start_ns
    runs = df_task_intervals(trace.df("sched_switch", windowed=False), start_ns=runs_from_ns, end_ns=trace.end_ns)
    end = pl.col("ts") + pl.col("dur")
    lo = pl.max_horizontal(pl.col("ts"), pl.lit(start, pl.Int64))
    iv = runs.filter(end > start).with_columns(lo.alias("ts"), (end - lo).alias("dur"))  # clipped to start
    residency = iv.group_by("pid", "cpu").agg(pl.col("dur").sum().cast(pl.Int64).alias("time_ns"))
    # a task's CPU changes: consecutive runs (by start) on other CPUs, the later one from the start
    seq = runs.select("pid", "ts", "cpu").sort("ts").sort("pid", maintain_order=True)
    changed = (pl.col("pid") == pl.col("pid").shift(1)) & (pl.col("cpu") != pl.col("cpu").shift(1))
    changes = (
        seq.with_columns((changed.fill_null(False) & (pl.col("ts") >= start)).alias("_chg"))
        .group_by("pid")
        .agg(
            pl.col("_chg").sum().cast(pl.Int64).alias("cpu_changes"),
            pl.col("cpu").n_unique().cast(pl.Int64).alias("cpus_used"),
        )
    )
    tasks = (
        iv.group_by("pid")
        .agg(pl.col("comm").get(pl.col("ts").arg_max()))
        .join(changes, on="pid", how="left")
        .select("pid", "comm", "cpus_used", "cpu_changes")
    )
    switch_ins = runs.filter(pl.col("ts") >= start).group_by("comm").agg(pl.len().cast(pl.Int64).alias("runs"))
    names = (
        iv.group_by("comm")
        .agg(pl.col("dur").sum().cast(pl.Int64).alias("run_ns"))
        .join(switch_ins, on="comm", how="left", nulls_equal=True)  # a null name is a name too
        .with_columns(pl.col("runs").fill_null(0))
    )
    return {"residency": residency, "tasks": tasks, "names": names}
