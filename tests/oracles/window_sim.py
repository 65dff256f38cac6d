"""abtest.analysis.window_sim.df_window_demand written with frames (running intervals x CPU scale, cut at the
window boundaries, rolling mean): the oracle of the compiled one (native/sim/src/window.rs)."""

from __future__ import annotations

import polars as pl

from abtest.analysis.intervals import df_intervals_join, window_of
from oracles.pelt_sim import df_cpu_running, df_cpu_scale


def df_window_demand(
    sched_switch: pl.DataFrame,
    *,
    cpu_frequency: pl.DataFrame | None = None,
    platform: dict | None = None,
    start_ns: int | None = None,
    end_ns: int | None = None,
    window_ms: float = 20.0,
    n_windows: int = 5,
    pids: list[int] | None = None,
    unknown_freq: str = "max",
) -> pl.DataFrame:
    """As abtest.analysis.window_sim.df_window_demand: pid, window, window_start_ns, window_end_ns, running_ns,
    window_load, demand."""
    start_ns, end_ns = window_of(sched_switch, start_ns, end_ns)
    win = int(window_ms * 1e6)
    cpus = sorted(
        set(sched_switch["cpu"].unique().drop_nulls().cast(pl.Int32).to_list())
        | {c["cpu"] for c in (platform or {}).get("cpus", [])}
    )
    run = df_cpu_running(sched_switch, start_ns=start_ns, end_ns=end_ns, cpus=cpus).filter(pl.col("pid") > 0)
    scale = df_cpu_scale(
        cpu_frequency, platform=platform, cpus=cpus, start_ns=start_ns, end_ns=end_ns, unknown_freq=unknown_freq
    )
    pieces = df_intervals_join(run.select("cpu", "ts", "dur", "pid"), scale, keys="cpu")
    if pids is not None:
        pieces = pieces.filter(pl.col("pid").is_in(pids))
    # split running pieces at window boundaries
    pieces = pieces.with_columns(
        ((pl.col("ts") - start_ns) // win).alias("_w0"),
        ((pl.col("ts") + pl.col("dur") - 1 - start_ns) // win).alias("_w1"),
    )
    pieces = pieces.with_columns(pl.int_ranges("_w0", pl.col("_w1") + 1).alias("window")).explode("window")
    wstart = pl.col("window") * win + start_ns
    overlap = pl.min_horizontal(pl.col("ts") + pl.col("dur"), wstart + win) - pl.max_horizontal("ts", wstart)
    per = (
        pieces.with_columns(overlap.alias("_ov"))
        .group_by("pid", "window")
        .agg(pl.col("_ov").sum().alias("running_ns"), (pl.col("_ov") * pl.col("scale")).sum().alias("_scaled"))
    )
    n_win = max(1, -(-(end_ns - start_ns) // win))
    spans = per.group_by("pid").agg(pl.col("window").min().alias("_first"))
    grid = (
        spans.with_columns(pl.int_ranges("_first", n_win).alias("window"))
        .explode("window")
        .drop("_first")
        .with_columns(pl.col("window").cast(per.schema["window"]))
    )
    out = (
        grid.join(per, on=["pid", "window"], how="left")
        .with_columns(pl.col("running_ns").fill_null(0), pl.col("_scaled").fill_null(0.0))
        .sort("pid", "window")
    )
    load = pl.col("_scaled") / win  # capacity units (scale is 0..1024)
    out = out.with_columns(load.alias("window_load"))
    avg = pl.col("window_load").rolling_mean(window_size=n_windows, min_samples=1).over("pid")
    out = out.with_columns(pl.max_horizontal(avg, pl.col("window_load")).alias("demand"))
    return out.select(
        "pid",
        "window",
        (pl.col("window") * win + start_ns).alias("window_start_ns"),
        pl.min_horizontal(pl.col("window") * win + start_ns + win, pl.lit(end_ns)).alias("window_end_ns"),
        "running_ns",
        "window_load",
        "demand",
    )
