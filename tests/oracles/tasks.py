"""abtest.analysis.tasks' task-state pass written with frames (moves and wakeups concatenated, as-of joins,
intervals.df_intervals): the oracle of the compiled one (native/sim/src/tasks.rs, abtest.analysis.sim_native),
compared on every shared trace by tests/test_sim_native.py. The rules are those of abtest.analysis.tasks'
module docstring."""

from __future__ import annotations

import polars as pl

from abtest.analysis.intervals import df_intervals, window_of
from abtest.analysis.tasks import STATE_TYPE, WAKEABLE, _switches, df_activations, prev_state_encoding, switch_out_state


def _by_pid_then(df: pl.DataFrame, order: pl.Expr) -> pl.DataFrame:
    """``df`` sorted by pid, then by ``order``, ties in their input order: two stable one-key sorts (half the
    time of one multi-key sort on the bench trace's 1.6 M task moves)."""
    return df.sort(order, maintain_order=True).sort("pid", maintain_order=True)


def df_task_state_intervals(
    sched_switch: pl.DataFrame,
    wakeups: pl.DataFrame | None = None,
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
) -> pl.DataFrame:
    """As abtest.analysis.tasks.df_task_state_intervals: per thread ``pid, ts, dur, state, cpu, comm`` over
    ``[start_ns, end_ns)``."""
    sw = _switches(sched_switch)
    start_ns, end_ns = window_of(sw, start_ns, end_ns)
    outs = sw.filter(pl.col("prev_pid") != 0).select(
        "ts",
        pl.col("prev_pid").alias("pid"),
        pl.col("prev_comm").alias("comm"),
        switch_out_state(pl.col("prev_state"), pre_4_14=prev_state_encoding(sw)).alias("state"),
        pl.lit(None, pl.Int32).alias("cpu"),
        pl.lit(0).alias("_o"),
    )
    ins = sw.filter(pl.col("next_pid") != 0).select(
        "ts",
        pl.col("next_pid").alias("pid"),
        pl.col("next_comm").alias("comm"),
        pl.lit("running", STATE_TYPE).alias("state"),
        "cpu",
        pl.lit(2).alias("_o"),
    )
    moves = pl.concat([outs, ins])
    parts = [moves]
    if wakeups is not None and not wakeups.is_empty():
        wk = _by_pid_then(
            wakeups.select(
                pl.col("ts").cast(pl.Int64), pl.col("pid").cast(pl.Int32), pl.col("comm").cast(pl.Categorical)
            ).filter(pl.col("pid") != 0),
            pl.col("ts"),
        )
        last = (
            _by_pid_then(moves, pl.col("ts") * 4 + pl.col("_o"))
            .unique(["pid", "ts"], keep="last", maintain_order=True)
            .select("pid", pl.col("ts").alias("_mts"), pl.col("state").alias("_prev"), (pl.col("ts") + 1).alias("ts"))
        )
        # state from the thread's last switch strictly before the wakeup: only a sleeping (or unknown) one is woken
        wk = wk.join_asof(last, on="ts", by="pid", strategy="backward", check_sortedness=False)
        woken = wk.filter(pl.col("_mts").is_null() | pl.col("_prev").is_in(list(WAKEABLE)))
        parts.append(
            woken.select(
                "ts",
                "pid",
                "comm",
                pl.lit("runnable", STATE_TYPE).alias("state"),
                pl.lit(None, pl.Int32).alias("cpu"),
                pl.lit(1).alias("_o"),
            )
        )
    ev = _by_pid_then(pl.concat(parts), pl.col("ts") * 4 + pl.col("_o"))
    # before a thread's first event: running if that event switches it out, else unknown
    first = ev.group_by("pid", maintain_order=True).first()
    seed = first.filter(pl.col("_o") == 0).select(
        (pl.min_horizontal(pl.col("ts"), pl.lit(start_ns)) - 1).alias("ts"),
        "pid",
        "comm",
        pl.lit("running", STATE_TYPE).alias("state"),
        pl.lit(None, pl.Int32).alias("cpu"),
    )
    # the CPU it ran on before that first switch-out: the switch's own CPU
    seed = (
        seed.join(
            sw.select("ts", pl.col("prev_pid").alias("pid"), pl.col("cpu").alias("_c"))
            .group_by("pid")
            .agg(pl.col("ts").min().alias("_t"), pl.col("_c").sort_by("ts").first()),
            on="pid",
            how="left",
        )
        .with_columns(pl.col("_c").alias("cpu"))
        .drop("_t", "_c")
    )
    changes = pl.concat([seed, ev.select("ts", "pid", "comm", "state", "cpu")])
    return df_intervals(changes, ["state", "cpu", "comm"], keys="pid", start_ns=start_ns, end_ns=end_ns)


def aggregates_of_intervals(intervals: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """abtest.analysis.tasks.df_task_state_aggregates' (times, runs, threads), folded from task state intervals
    afterwards."""
    times = (
        intervals.lazy()
        .filter(pl.col("state").is_not_null())
        .group_by("comm", "state")
        .agg(pl.col("dur").sum())
        .collect()
    )
    runs = df_activations(intervals).select("comm", "cpu", "dur")
    threads = intervals.select("comm", "pid").unique()
    return times, runs, threads
