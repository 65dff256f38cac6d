"""Window-based load tracking (WALT-style demand), simulated from sched_switch (+ cpu_frequency).

Model: time is cut into synchronized windows of ``window_ms`` (default 20 ms) starting at the window start
(the same boundaries for every task and CPU). In each window a task's *window load* is its running time
scaled by the CPU's capacity x f/f_max (the same invariance as pelt_sim), in capacity units:
``window_load = 1024 * scaled_running_ns / window_ns`` (0..1024). At each window rollover the task's *demand*
becomes ``max(mean of the last N windows, most recent window)`` (WALT's "max(average, recent)" policy,
``n_windows`` default 5) and holds until the next rollover. Windows where the task did not run count as 0
from its first running window on.

Approximations: WALT's per-CPU accounting of waiting time, the ``sched_ravg_window`` tunables other than
window size and N, frequency sampling at IRQ/tick time and idle-exit accounting are not modelled.
"""

from __future__ import annotations

import polars as pl

from abtest.analysis.intervals import window_of
from abtest.analysis.pelt_sim import cpu_scale_spec

EVENTS = ("sched_switch",)
OPTIONAL_EVENTS = ("cpu_frequency",)

__all__ = ["EVENTS", "OPTIONAL_EVENTS", "df_window_demand", "df_pelt_vs_window", "df_ramp_times", "plot_pelt_vs_window"]


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
    """Per task and window: ``pid, window (index), window_start_ns, window_end_ns, running_ns (raw),
    window_load (0..1024, scaled), demand`` (0..1024: the demand in force *after* this window's rollover,
    i.e. from window_end_ns until the next rollover). Computed by native/sim/src/window.rs (its frame-written
    oracle: tests/oracles/window_sim.py). Events: sched_switch; optional cpu_frequency.
    """
    start_ns, end_ns = window_of(sched_switch, start_ns, end_ns)
    win = int(window_ms * 1e6)
    if win <= 0:
        raise ValueError(f"window_ms must be > 0, got {window_ms}")
    cpus = sorted(
        set(sched_switch["cpu"].unique().drop_nulls().cast(pl.Int32).to_list())
        | {c["cpu"] for c in (platform or {}).get("cpus", [])}
    )
    from abtest.analysis import sim_native

    spec = cpu_scale_spec(cpu_frequency, platform=platform, cpus=cpus, unknown_freq=unknown_freq)
    return sim_native.window_demand(
        sched_switch,
        spec=spec,
        start_ns=start_ns,
        end_ns=end_ns,
        cpu_frequency=cpu_frequency,
        window_ns=win,
        n_windows=n_windows,
        pids=pids,
    )


def df_pelt_vs_window(pelt_task: pl.DataFrame, demand: pl.DataFrame, pid: int, *, grid_ms: float = 1.0) -> pl.DataFrame:
    """One task's PELT util and window demand on one time axis: ``ts, pelt_util, window_demand``.

    ``pelt_task``: df_pelt_sim_task output (evaluated exactly at every point: segment starts, window
    rollovers and a ``grid_ms`` grid), or kernel se samples ``pid, ts, util`` (held from the last sample).
    ``demand``: df_window_demand output (held from each rollover).
    """
    from abtest.analysis.pelt_sim import sample_signal

    p = pelt_task.filter(pl.col("pid") == pid).sort("ts")
    d = (
        demand.filter(pl.col("pid") == pid)
        .select(pl.col("window_end_ns").alias("ts"), pl.col("demand").alias("window_demand"))
        .sort("ts")
    )
    pts = [p.select("ts"), d.select("ts")]
    if "x_util" in p.columns and p.height:
        lo, hi = p["ts"].min(), (p["ts"] + p["dur"]).max()
        step = max(int(grid_ms * 1e6), 1)
        pts.append(pl.DataFrame({"ts": pl.int_range(lo, hi, step, eager=True)}))
    axis = pl.concat([x.select(pl.col("ts").cast(pl.Int64)) for x in pts]).unique().sort("ts")
    if "x_util" in p.columns:
        pe = sample_signal(p, axis.with_columns(pl.lit(pid, pl.Int64).alias("pid")), "pid", "util")
        pe = pe.select("ts", pl.col("sim_util").alias("pelt_util")).sort("ts")
        out = axis.join(pe, on="ts", how="left")
    else:
        out = axis.join_asof(
            p.select("ts", pl.col("util").cast(pl.Float64).alias("pelt_util")), on="ts", strategy="backward"
        )
    return out.join_asof(d, on="ts", strategy="backward").with_columns(pl.col("window_demand").fill_null(0.0))


def df_ramp_times(
    signals: pl.DataFrame,
    *,
    columns: tuple[str, ...] = ("pelt_util", "window_demand"),
    levels_pct: tuple[float, ...] = (50.0, 90.0),
) -> pl.DataFrame:
    """Ramp-up and ramp-down of each signal column of df_pelt_vs_window.

    Ramp-up to L %: time (ms) from the first ts to the first ts where the signal reaches L % of its maximum.
    Ramp-down to L %: time (ms) from the signal's maximum to the first later ts where it is at or below
    (100 - L) % of that maximum. Columns: signal, level_pct, ramp_up_ms, ramp_down_ms (null = not reached).
    """
    t0 = signals["ts"].min()
    rows = []
    for col in columns:
        s = signals.select("ts", pl.col(col).fill_null(0.0).alias("v"))
        vmax = s["v"].max() or 0.0
        t_max = s.filter(pl.col("v") == vmax)["ts"].min() if vmax > 0 else None
        for lvl in levels_pct:
            up = s.filter(pl.col("v") >= vmax * lvl / 100.0)["ts"].min() if vmax > 0 else None
            down = (
                s.filter((pl.col("ts") > t_max) & (pl.col("v") <= vmax * (100.0 - lvl) / 100.0))["ts"].min()
                if t_max is not None
                else None
            )
            rows.append(
                {
                    "signal": col,
                    "level_pct": lvl,
                    "ramp_up_ms": None if up is None else (up - t0) / 1e6,
                    "ramp_down_ms": None if down is None else (down - t_max) / 1e6,
                }
            )
    return pl.DataFrame(
        rows, schema={"signal": pl.Utf8, "level_pct": pl.Float64, "ramp_up_ms": pl.Float64, "ramp_down_ms": pl.Float64}
    )


def plot_pelt_vs_window(both: pl.DataFrame, *, title: str = "PELT vs window demand", ax=None):
    """Step plot of df_pelt_vs_window (time in ms from the first point, signals in capacity units)."""
    import matplotlib.pyplot as plt

    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(9, 3.5))
    t = ((both["ts"] - both["ts"].min()) / 1e6).to_list()
    ax.plot(t, both["pelt_util"].to_list(), drawstyle="steps-post", label="PELT util_avg")
    ax.plot(t, both["window_demand"].to_list(), drawstyle="steps-post", label="window demand (max(avg, recent))")
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("capacity units (0..1024)")
    ax.set_title(title)
    ax.legend(loc="upper right", fontsize="small")
    return fig
