"""abtest.analysis.latency's matching written with frames (sorted as-of joins): the oracle of the compiled one
(native/sim/src/latency.rs, abtest.analysis.sim_native), compared on every shared trace by
tests/test_sim_native.py. The rules are those of abtest.analysis.latency's module docstring."""

from __future__ import annotations

import polars as pl

from abtest.analysis.latency import DEFINITIONS


def _moves(sched_switch: pl.DataFrame) -> pl.DataFrame:
    """One stream of "pid P switched in/out at ts": pid, ts, on_cpu, cpu, state (prev_state for switch-outs,
    null for switch-ins), k (index of the move within the pid). Out before in at equal ts (kernel order)."""
    sw = sched_switch.select(
        pl.col("ts").cast(pl.Int64),
        pl.col("cpu").cast(pl.Int32),
        pl.col("prev_pid").cast(pl.Int32),
        pl.col("next_pid").cast(pl.Int32),
        (pl.col("prev_state").cast(pl.Int64) if "prev_state" in sched_switch.columns else pl.lit(None, pl.Int64)).alias(
            "prev_state"
        ),
    )
    moves = (
        pl.concat(
            [
                sw.select(
                    "ts",
                    pl.col("prev_pid").alias("pid"),
                    pl.lit(False).alias("on_cpu"),
                    "cpu",
                    pl.col("prev_state").alias("state"),
                    pl.lit(0).alias("_o"),
                ),
                sw.select(
                    "ts",
                    pl.col("next_pid").alias("pid"),
                    pl.lit(True).alias("on_cpu"),
                    "cpu",
                    pl.lit(None, pl.Int64).alias("state"),
                    pl.lit(1).alias("_o"),
                ),
            ]
        )
        .filter(pl.col("pid") != 0)
        .with_row_index("_seq")
        .sort(["pid", "ts", "_o", "_seq"])
        .drop("_o", "_seq")
    )
    moves = moves.unique(["pid", "ts"], keep="last", maintain_order=True)  # as-of needs unique (pid, ts)
    return moves.with_columns(pl.int_range(pl.len()).over("pid").alias("k"))


def df_wakeup_latency(
    wakeups: pl.DataFrame,
    sched_switch: pl.DataFrame,
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
    rule: str = "wakeup",
    columns: list[str] | None = None,
) -> pl.DataFrame:
    """As abtest.analysis.latency.df_wakeup_latency: one row per matched wakeup (pid, comm, kind, wakeup_ts,
    switch_in_ts, cpu, target_cpu, while_on_cpu, latency_ns, latency_us), sorted by wakeup_ts."""
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
    w = w.sort(["pid", "ts"])
    all_w = w
    if start_ns is not None:
        w = w.filter(pl.col("ts") >= start_ns)
    if end_ns is not None:
        w = w.filter(pl.col("ts") < end_ns)
    moves = _moves(sched_switch)
    prev = moves.select("pid", "ts", pl.col("on_cpu").alias("prev_on_cpu"))
    nxt = moves.select(
        "pid",
        pl.col("ts").alias("next_ts"),
        pl.col("on_cpu").alias("next_on_cpu"),
        "cpu",
        pl.col("state").alias("next_state"),
        pl.col("k").alias("next_k"),
    )
    # a switch at exactly the wakeup ts counts as "after" (the wakeup is traced before the switch
    # it causes): the state comes from switches strictly before ts, the match from those at or after.
    j = w.join_asof(
        prev.with_columns((pl.col("ts") + 1).alias("ts")),
        on="ts",
        by="pid",
        strategy="backward",
        check_sortedness=False,
    )
    j = j.join_asof(
        nxt.with_columns(pl.col("next_ts").alias("ts")), on="ts", by="pid", strategy="forward", check_sortedness=False
    )
    normal = j.filter(
        (pl.col("next_on_cpu") == True)
        & (  # noqa: E712 (polars expression)
            pl.col("prev_on_cpu").is_null() | (pl.col("prev_on_cpu") == False)
        )
    ).select(  # noqa: E712
        "pid", "comm", "kind", "ts", "next_ts", "cpu", "target_cpu", pl.lit(False).alias("while_on_cpu")
    )
    parts = [normal]
    if rule == "waking":
        # fired while still on the CPU: next move = sleeping switch-out, the one after = switch-in
        cand = j.filter(
            (pl.col("prev_on_cpu") == True)
            & (pl.col("next_on_cpu") == False)  # noqa: E712
            & ((pl.col("next_state") & 0xFF) != 0)
        )
        after = moves.select(
            "pid",
            (pl.col("k") - 1).alias("next_k"),
            pl.col("ts").alias("in_ts"),
            pl.col("on_cpu").alias("in_on_cpu"),
            pl.col("cpu").alias("in_cpu"),
        )
        cand = cand.join(after, on=["pid", "next_k"], how="inner").filter(pl.col("in_on_cpu"))
        # no other wakeup of the task between its switch-out and that switch-in
        other = all_w.select("pid", pl.col("ts").alias("other_ts")).with_columns(pl.col("other_ts").alias("_t"))
        cand = (
            cand.with_columns((pl.col("next_ts") + 1).alias("_t"))
            .sort(["pid", "_t"])
            .join_asof(other.sort(["pid", "_t"]), on="_t", by="pid", strategy="forward", check_sortedness=False)
        )
        race = cand.filter(pl.col("other_ts").is_null() | (pl.col("other_ts") >= pl.col("in_ts"))).select(
            "pid",
            "comm",
            "kind",
            "ts",
            pl.col("in_ts").alias("next_ts"),
            pl.col("in_cpu").alias("cpu"),
            "target_cpu",
            pl.lit(True).alias("while_on_cpu"),
        )
        parts.append(race)
    m = pl.concat(parts).sort(["pid", "next_ts", "ts"]).unique(["pid", "next_ts"], keep="first", maintain_order=True)
    return (
        m.select(
            "pid",
            "comm",
            "kind",
            pl.col("ts").alias("wakeup_ts"),
            pl.col("next_ts").alias("switch_in_ts"),
            "cpu",
            "target_cpu",
            "while_on_cpu",
            (pl.col("next_ts") - pl.col("ts")).alias("latency_ns"),
        )
        .with_columns((pl.col("latency_ns") / 1e3).alias("latency_us"))
        .sort("wakeup_ts")
        .select(columns or pl.all())
    )


def df_preemption_latency(
    sched_switch: pl.DataFrame, *, start_ns: int | None = None, end_ns: int | None = None
) -> pl.DataFrame:
    """As abtest.analysis.latency.df_preemption_latency: one row per preemption matched with its task's next
    switch-in (pid, comm, preempt_ts, switch_in_ts, from_cpu, cpu, latency_ns, latency_us)."""
    sw = sched_switch.select(
        pl.col("ts").cast(pl.Int64),
        pl.col("cpu").cast(pl.Int32),
        pl.col("prev_pid").cast(pl.Int32).alias("pid"),
        pl.col("prev_comm").cast(pl.Categorical).alias("comm"),
        pl.col("prev_state").cast(pl.Int64),
    )
    outs = sw.filter((pl.col("pid") != 0) & ((pl.col("prev_state") & 0xFF) == 0))
    if start_ns is not None:
        outs = outs.filter(pl.col("ts") >= start_ns)
    if end_ns is not None:
        outs = outs.filter(pl.col("ts") < end_ns)
    moves = _moves(sched_switch).select(
        "pid", pl.col("ts").alias("next_ts"), pl.col("on_cpu").alias("next_on_cpu"), pl.col("cpu").alias("next_cpu")
    )
    j = (
        outs.sort(["pid", "ts"])
        .with_columns((pl.col("ts") + 1).alias("_t"))
        .join_asof(
            moves.with_columns(pl.col("next_ts").alias("_t")).sort(["pid", "_t"]),
            on="_t",
            by="pid",
            strategy="forward",
            check_sortedness=False,
        )
    )
    m = j.filter(pl.col("next_on_cpu") == True)  # noqa: E712
    return (
        m.select(
            "pid",
            "comm",
            pl.col("ts").alias("preempt_ts"),
            pl.col("next_ts").alias("switch_in_ts"),
            pl.col("cpu").alias("from_cpu"),
            pl.col("next_cpu").alias("cpu"),
            (pl.col("next_ts") - pl.col("ts")).alias("latency_ns"),
        )
        .with_columns((pl.col("latency_ns") / 1e3).alias("latency_us"))
        .sort("preempt_ts")
    )
