"""PELT simulated from scheduler events (sched_switch, optionally sched_wakeup*, cpu_frequency).

Model (per entity: a CPU's root CFS runqueue, or a task):

* The input level x(t) is piecewise constant: for util, ``running x capacity x f/f_max`` (0..1024, the CPU's
  capacity and frequency invariance, as the 4.x kernels' scaled contributions); for runnable,
  ``(running + waiting) x capacity x f/f_max`` (per CPU: times the number of runnable CFS tasks, as
  cfs_rq runnable_avg sums h_nr_running).
* The signal follows the PELT geometric series continuously: over a segment of length d with level x,
  ``u_end = u_start * y^(d/P) + x * (1 - y^(d/P))`` with P = 1024 * 1024 ns (one PELT period of 1024 us of
  1024 ns) and y^32 = 1/2 (half-life 32 periods = 33.55 ms). The steady state for x is x (max 1024).

Approximations (documented, measured on the Juno trace, see docs/analysis-load-frequency-energy.md):

1. Continuous decay instead of the kernel's per-period accumulation (the kernel updates util_avg only when a
   period boundary is crossed and divides by LOAD_AVG_MAX - 1024 + period_contrib): differences of a few
   util units, and the kernel value lags by up to one period.
2. Contributions are scaled (4.x kernel style), decay runs in wall time. Kernels >= 5.1 scale the PELT clock
   instead; a fully busy CPU then reaches 1024 whatever its capacity/frequency. Not modelled.
3. Before a CPU's first cpu_frequency event its frequency is unknown: ``unknown_freq`` = "max" (default,
   f/f_max = 1), "min" (lowest OPP / lowest seen) or "first" (the first value seen).
4. Without a platform, capacity is 1024 for every CPU and f_max is the highest frequency seen per CPU.
5. Waiting (runnable, not running): from a switch-out in a runnable state (preemption), or from a
   wakeup event (sched_waking / sched_wakeup / sched_wakeup_new) of a task that is neither on a CPU nor
   already waiting, to the task's next switch-in; a wait whose next sched_switch is a switch-out (its
   switch-in missed) or that no switch-in ends is not counted, nor is a wakeup of a task still on its CPU
   (the wait starts when it is preempted). Without wakeup events the waiting time of a woken task is unknown
   and taken as 0 (only preemptions count). A waiting task migrated by the load balancer is counted on the
   CPU where it started waiting; a task seen on two CPUs at once (skewed per-CPU clocks, lost events) runs
   where it started first.
6. The runqueue signal is that of "a CFS task runs on this CPU" (RT/DL tasks with prio < 100 excluded), plus
   jumps when a task's (simulated) utilisation moves between runqueues: wakeup on / migration to another CPU
   (at the switch-in when no wakeup events exist), fork (first appearance of a new task: fork events when
   recorded, else a pid above every pid seen before the last runqueue seed) and exit (a switch-out with a
   dead/zombie state bit; a pid seen again attaches anew). The kernel's removals are deferred to the next update and
   clamped at 0; here the
   stored values are clamped at 0 but the recurrence is linear.
7. Group scheduling entities (autogroup / cgroup se) are not simulated; tasks are (pid > 0).
8. Without a seed an entity starts at 0 at the window start (the kernel carries history from before the
   trace). ``initial`` seeds entities with a known value at a known time (e.g. the kernel's first sample).

The simulation replays the events in time order in the Rust core (native/sim/src/pelt.rs through
abtest.analysis.sim_native: one pass decides which waits count, a second simulates every CPU and task; ~10-15 M
input events/s). Its readable reference, which builds the segments with frames and solves the per-segment
recurrence in closed form with numpy (~0.1-0.3 M events/s), is tests/oracles/pelt_sim.py: tests/test_sim_native.py
compares the two on every shared trace (the same segments, signals within 1e-6).
"""

from __future__ import annotations

import math

import polars as pl

from abtest.analysis.intervals import window_of
from abtest.trace.errors import AnalysisNotApplicable

EVENTS = ("sched_switch",)
OPTIONAL_EVENTS = ("sched_wakeup", "sched_waking", "sched_wakeup_new", "cpu_frequency")

PELT_PERIOD_NS = 1024 * 1024
HALF_LIFE_PERIODS = 32
DECAY_PER_NS = math.log(2.0) / (HALF_LIFE_PERIODS * PELT_PERIOD_NS)

__all__ = [
    "EVENTS",
    "OPTIONAL_EVENTS",
    "PELT_PERIOD_NS",
    "DECAY_PER_NS",
    "cpu_scale_spec",
    "df_cpu_contention",
    "kernel_seeds",
    "df_pelt_sim_cpu",
    "df_pelt_sim_task",
    "sample_signal",
    "df_sim_vs_kernel",
]


# -- inputs ---------------------------------------------------------------------------------------------
def cpu_scale_spec(
    cpu_frequency: pl.DataFrame | None, *, platform: dict | None, cpus: list[int], unknown_freq: str = "max"
) -> pl.DataFrame:
    """What the invariance factor of each CPU is made of: ``cpu, capacity, fmax_khz`` (null: no frequency
    invariance), ``fill_khz`` (the frequency assumed before the CPU's first cpu_frequency event; null: f_max).
    f_max and f_min come from the platform's OPPs, else from the highest / lowest frequency seen on the CPU.
    Without cpu_frequency events: capacity only (fmax_khz null)."""
    caps = {c: 1024.0 for c in cpus}
    fmax: dict[int, float] = {}
    fmin: dict[int, float] = {}
    if platform and platform.get("cpus"):
        caps.update({c["cpu"]: float(c["capacity"] or 1024.0) for c in platform["cpus"]})
        for dom in platform.get("domains", []):
            if dom["opps"]:
                for c in dom["cpus"]:
                    fmax[c] = float(max(o["frequency_khz"] for o in dom["opps"]))
                    fmin[c] = float(min(o["frequency_khz"] for o in dom["opps"]))
    base = pl.DataFrame(
        {"cpu": cpus, "capacity": [caps[c] for c in cpus]}, schema={"cpu": pl.Int32, "capacity": pl.Float64}
    )
    if cpu_frequency is None or cpu_frequency.is_empty():
        return base.with_columns(pl.lit(None, pl.Float64).alias("fmax_khz"), pl.lit(None, pl.Float64).alias("fill_khz"))
    ev = cpu_frequency.select(pl.col("cpu").cast(pl.Int32), "ts", pl.col("frequency_khz").cast(pl.Float64))
    seen = ev.group_by("cpu").agg(
        pl.col("frequency_khz").max().alias("smax"),
        pl.col("frequency_khz").min().alias("smin"),
        pl.col("frequency_khz").sort_by("ts").first().alias("sfirst"),
    )
    lim = pl.DataFrame(
        {"cpu": list(fmax), "fmax": list(fmax.values()), "fmin": [fmin[c] for c in fmax]},
        schema={"cpu": pl.Int32, "fmax": pl.Float64, "fmin": pl.Float64},
    )
    spec = (
        base.join(seen, on="cpu", how="left")
        .join(lim, on="cpu", how="left")
        .with_columns(pl.coalesce("fmax", "smax").alias("fmax_khz"), pl.coalesce("fmin", "smin").alias("_fmin"))
    )
    fill = {"max": pl.col("fmax_khz"), "min": pl.col("_fmin"), "first": pl.col("sfirst")}[unknown_freq]
    return spec.select("cpu", "capacity", "fmax_khz", fill.alias("fill_khz"))


def df_pelt_sim_cpu(
    sched_switch: pl.DataFrame,
    *,
    cpu_frequency: pl.DataFrame | None = None,
    wakeups: list[pl.DataFrame] | None = None,
    sched_migrate_task: pl.DataFrame | None = None,
    platform: dict | None = None,
    start_ns: int | None = None,
    end_ns: int | None = None,
    cpus: list[int] | None = None,
    initial: pl.DataFrame | None = None,
    task_initial: pl.DataFrame | None = None,
    attach: bool = True,
    new_pids: list[int] | None = None,
    unknown_freq: str = "max",
) -> pl.DataFrame:
    """Simulated per-CPU (root CFS runqueue) PELT signals.

    The runqueue signal follows the CPU's CFS activity (util: a CFS task runs; runnable: number of runnable
    CFS tasks) and, with ``attach=True``, jumps when a task's utilisation moves in or out (wakeup on another
    CPU, migration): by the task's simulated util / runnable at that instant (df_pelt_sim_task, seeded with
    ``task_initial``). Tasks in ``new_pids`` (forked in the window) are attached at their first appearance.

    Returns the piecewise-constant input segments with the signal at each segment start:
    ``cpu, ts (ns), dur (ns), x_util, x_runnable (input levels), util, runnable`` (PELT units, at ts after any
    jump there). Evaluate anywhere with :func:`sample_signal`. ``initial``: optional ``cpu, ts, util[, runnable]``
    seeding each CPU with that value at that time (its simulation starts there). Simulated by
    native/sim/src/pelt.rs (readable reference: tests/oracles/pelt_sim.py).
    Events: sched_switch; optional cpu_frequency, wakeups, sched_migrate_task.
    """
    start_ns, end_ns = window_of(sched_switch, start_ns, end_ns)
    if cpus is None:
        cpus = _cpus_of(sched_switch, platform)
    from abtest.analysis import sim_native

    spec = cpu_scale_spec(cpu_frequency, platform=platform, cpus=cpus, unknown_freq=unknown_freq)
    cpu, _ = sim_native.pelt_simulate(
        sched_switch,
        spec=spec,
        start_ns=start_ns,
        end_ns=end_ns,
        cpu_frequency=cpu_frequency,
        wakeups=wakeups,
        sched_migrate_task=sched_migrate_task if attach else None,
        cpu_seeds=_with_ts(initial, "cpu", start_ns),
        task_seeds=_with_ts(task_initial, "pid", start_ns) if attach else None,
        new_pids=new_pids if attach else None,
        attach=attach,
    )
    return cpu


def df_contention_of_intervals(intervals: pl.DataFrame, key: str, margin: float) -> pl.DataFrame:
    """Contention per ``key`` over intervals (``key, dur, util, runnable``; each holds its values for ``dur``
    ns; both signals known): ``key, known_ns, contended_ns (runnable > util + margin), contended_pct,
    mean_util, mean_runnable (time-weighted), runnable_util_ratio (time-weighted runnable / util where util
    >= 1), max_runnable``, sorted by key."""
    w = pl.col("dur").cast(pl.Float64)
    pos = pl.col("util") >= 1.0
    return (
        intervals.group_by(key)
        .agg(
            pl.col("dur").sum().alias("known_ns"),
            pl.col("dur").filter(pl.col("runnable") > pl.col("util") + margin).sum().alias("contended_ns"),
            ((pl.col("util") * w).sum() / w.sum()).alias("mean_util"),
            ((pl.col("runnable") * w).sum() / w.sum()).alias("mean_runnable"),
            ((pl.col("runnable") / pl.col("util") * w).filter(pos).sum() / w.filter(pos).sum()).alias(
                "runnable_util_ratio"
            ),
            pl.col("runnable").max().alias("max_runnable"),
        )
        .with_columns((100.0 * pl.col("contended_ns") / pl.col("known_ns")).alias("contended_pct"))
        .select(
            key,
            "known_ns",
            "contended_ns",
            "contended_pct",
            "mean_util",
            "mean_runnable",
            "runnable_util_ratio",
            "max_runnable",
        )
        .sort(key)
    )


def df_cpu_contention(
    sched_switch: pl.DataFrame,
    *,
    margin: float = 1.0,
    aggregate_from_ns: int | None = None,
    **kw,
) -> pl.DataFrame:
    """Contention per CPU of the simulated signals, as load_tracking.df_contention computes it on
    df_pelt_sim_cpu's output (each segment holds its start values): ``cpu, known_ns, contended_ns (runnable >
    util + margin), contended_pct, mean_util, mean_runnable (time-weighted), runnable_util_ratio (time-weighted
    runnable / util where util >= 1), max_runnable``. ``kw``: df_pelt_sim_cpu's arguments. The compiled
    simulator aggregates while it simulates (no segment is kept: memory does not grow with the trace).
    ``aggregate_from_ns``: only the time from then on counts (a window analysed after signals simulated from
    an earlier start_ns to warm them up; the segment open at that time counts from it with its values).
    """
    from abtest.analysis import sim_native

    start_ns, end_ns = window_of(sched_switch, kw.pop("start_ns", None), kw.pop("end_ns", None))
    platform, cpu_frequency = kw.pop("platform", None), kw.pop("cpu_frequency", None)
    cpus = kw.pop("cpus", None) or _cpus_of(sched_switch, platform)
    spec = cpu_scale_spec(cpu_frequency, platform=platform, cpus=cpus, unknown_freq=kw.pop("unknown_freq", "max"))
    attach = kw.pop("attach", True)
    initial, task_initial, new_pids = kw.pop("initial", None), kw.pop("task_initial", None), kw.pop("new_pids", None)
    mig = kw.pop("sched_migrate_task", None)
    return sim_native.pelt_contention(
        sched_switch,
        margin=margin,
        aggregate_from_ns=aggregate_from_ns,
        spec=spec,
        start_ns=start_ns,
        end_ns=end_ns,
        cpu_frequency=cpu_frequency,
        sched_migrate_task=mig if attach else None,
        cpu_seeds=_with_ts(initial, "cpu", start_ns),
        task_seeds=_with_ts(task_initial, "pid", start_ns) if attach else None,
        new_pids=new_pids if attach else None,
        attach=attach,
        **kw,
    )


def df_pelt_sim_task(
    sched_switch: pl.DataFrame,
    *,
    cpu_frequency: pl.DataFrame | None = None,
    wakeups: list[pl.DataFrame] | None = None,
    platform: dict | None = None,
    start_ns: int | None = None,
    end_ns: int | None = None,
    pids: list[int] | None = None,
    initial: pl.DataFrame | None = None,
    unknown_freq: str = "max",
) -> pl.DataFrame:
    """Simulated per-task PELT signals: ``pid, ts, dur, x_util, x_runnable, util, runnable`` (see
    df_pelt_sim_cpu). A task's util input is the capacity x f/f_max of the CPU it runs on; while waiting, its
    runnable input is that of the CPU it waits on (frequency taken at the start of the wait). A task starts
    at 0 when first seen in the window; ``initial`` (``pid, ts, util[, runnable]``) resets a task to a known
    value at a known time (e.g. the kernel's first sample). Simulated by native/sim/src/pelt.rs (readable
    reference: tests/oracles/pelt_sim.py). Events: sched_switch; optional cpu_frequency, wakeups.
    """
    start_ns, end_ns = window_of(sched_switch, start_ns, end_ns)
    cpus = _cpus_of(sched_switch, platform)
    from abtest.analysis import sim_native

    spec = cpu_scale_spec(cpu_frequency, platform=platform, cpus=cpus, unknown_freq=unknown_freq)
    _, tasks = sim_native.pelt_simulate(
        sched_switch,
        spec=spec,
        start_ns=start_ns,
        end_ns=end_ns,
        cpu_frequency=cpu_frequency,
        wakeups=wakeups,
        task_seeds=_with_ts(initial, "pid", start_ns),
        want_cpus=False,
        attach=False,
        want_tasks=True if pids is None else pids,
    )
    return tasks


def _cpus_of(sched_switch: pl.DataFrame, platform: dict | None) -> list[int]:
    """The simulated CPUs: those of sched_switch and of the platform, sorted."""
    return sorted(
        set(sched_switch["cpu"].unique().drop_nulls().cast(pl.Int32).to_list())
        | {c["cpu"] for c in (platform or {}).get("cpus", [])}
    )


def _with_ts(seeds: pl.DataFrame | None, key: str, start_ns: int) -> pl.DataFrame | None:
    """Seeds with a ``ts`` column (the window start when they have none)."""
    if seeds is None or "ts" in seeds.columns:
        return seeds
    return seeds.with_columns(pl.lit(start_ns, pl.Int64).alias("ts"))


def sample_signal(sim: pl.DataFrame, samples: pl.DataFrame, key: str, signal: str = "util") -> pl.DataFrame:
    """Evaluate a simulated signal at sample times: ``samples`` (key, ts, ...) + ``sim_<signal>``.

    Null where the sample lies outside the simulated span of that key.
    """
    x = "x_util" if signal == "util" else "x_runnable"
    s = sim.select(key, pl.col("ts").alias("_seg_ts"), "dur", pl.col(x).alias("_x"), pl.col(signal).alias("_u0")).sort(
        "_seg_ts"
    )
    j = samples.sort("ts").join_asof(
        s, left_on="ts", right_on="_seg_ts", by=key, strategy="backward", check_sortedness=False
    )
    dt = (pl.col("ts") - pl.col("_seg_ts")).cast(pl.Float64)
    decay = (-DECAY_PER_NS * dt).exp()
    val = pl.col("_u0") * decay + pl.col("_x") * (1.0 - decay)
    inside = pl.col("ts") < pl.col("_seg_ts") + pl.col("dur")
    return j.with_columns(pl.when(inside).then(val.clip(lower_bound=0.0)).alias(f"sim_{signal}")).drop(
        "_seg_ts", "dur", "_x", "_u0"
    )


def _event_cpu(df: pl.DataFrame) -> pl.Expr:
    # the runqueue's CPU: the event's own cpu field when a reader kept it apart from the ring-buffer cpu
    return (pl.col("field_cpu") if "field_cpu" in df.columns else pl.col("cpu")).cast(pl.Int32).alias("cpu")


def kernel_seeds(
    sched_switch: pl.DataFrame,
    *,
    sched_pelt_cfs: pl.DataFrame | None = None,
    sched_pelt_se: pl.DataFrame | None = None,
    forks: pl.DataFrame | None = None,
    start_ns: int,
    end_ns: int,
) -> tuple[pl.DataFrame | None, pl.DataFrame | None, list[int]]:
    """Seeds for the simulation from the kernel's own samples in the window.

    Returns (cpu_seeds ``cpu, ts, util, runnable`` = each root runqueue's first sample, runnable = util when
    the kernel has none; task_seeds ``pid, ts, util, runnable`` = each task's first sample (same rule), moved to the
    task's first
    appearance for tasks forked in the window; new_pids = tasks forked in the window: from fork events
    (sched_process_fork child_pid / sched_wakeup_new pid) when given, else pids above every pid seen until
    the last runqueue seed — pids are allocated increasingly, a heuristic).
    """
    cpu_seeds = None
    if sched_pelt_cfs is not None and not sched_pelt_cfs.is_empty():
        k = (
            sched_pelt_cfs.filter(pl.col("path").cast(pl.Utf8) == "/")
            if "path" in sched_pelt_cfs.columns
            else sched_pelt_cfs
        )
        run = pl.col("runnable") if "runnable" in k.columns else pl.col("util")
        cpu_seeds = (
            k.filter((pl.col("ts") >= start_ns) & (pl.col("ts") < end_ns))
            .sort("ts")
            .select(_event_cpu(k), "ts", pl.col("util").cast(pl.Float64), run.cast(pl.Float64).alias("runnable"))
            .group_by("cpu", maintain_order=True)
            .first()
        )
    # tasks forked in the window: from fork events when given, else pids above every pid seen until the
    # last runqueue seed (pids are allocated increasingly; a heuristic, see the module doc)
    first_seen = (
        sched_switch.lazy()
        .select("next_pid", "ts")
        .filter(pl.col("next_pid") > 0)
        .group_by(pl.col("next_pid").cast(pl.Int64).alias("pid"))
        .agg(pl.col("ts").min().alias("first_ts"))
        .collect()
    )
    if forks is not None and not forks.is_empty():
        col = "child_pid" if "child_pid" in forks.columns else "pid"
        new_pids = forks[col].cast(pl.Int64).unique().to_list()
    elif cpu_seeds is not None and cpu_seeds.height:
        last_seed = cpu_seeds["ts"].max()
        known = first_seen.filter(pl.col("first_ts") <= last_seed)["pid"].max() or 0
        new_pids = first_seen.filter((pl.col("first_ts") > last_seed) & (pl.col("pid") > known))["pid"].to_list()
    else:
        new_pids = []
    task_seeds = None
    if sched_pelt_se is not None and not sched_pelt_se.is_empty() and "pid" in sched_pelt_se.columns:
        task_seeds = (
            sched_pelt_se.filter((pl.col("pid") > 0) & (pl.col("ts") >= start_ns) & (pl.col("ts") < end_ns))
            .sort("ts")
            .group_by("pid", maintain_order=True)
            .first()
            .select(
                pl.col("pid").cast(pl.Int64),
                "ts",
                pl.col("util").cast(pl.Float64),
                (pl.col("runnable") if "runnable" in sched_pelt_se.columns else pl.col("util"))
                .cast(pl.Float64)
                .alias("runnable"),
            )
        )
        # a new task starts with the kernel's initial value: seed it at its first appearance
        task_seeds = (
            task_seeds.join(first_seen, on="pid", how="left")
            .with_columns(
                pl.when(pl.col("pid").is_in(new_pids) & (pl.col("first_ts") < pl.col("ts")))
                .then(pl.col("first_ts"))
                .otherwise(pl.col("ts"))
                .alias("ts")
            )
            .drop("first_ts")
        )
    return cpu_seeds, task_seeds, new_pids


def df_sim_vs_kernel(
    sched_switch: pl.DataFrame,
    *,
    sched_pelt_cfs: pl.DataFrame | None = None,
    sched_pelt_se: pl.DataFrame | None = None,
    cpu_frequency: pl.DataFrame | None = None,
    wakeups: list[pl.DataFrame] | None = None,
    platform: dict | None = None,
    sched_migrate_task: pl.DataFrame | None = None,
    start_ns: int | None = None,
    end_ns: int | None = None,
    unknown_freq: str = "max",
    seed: bool = True,
    attach: bool = True,
    forks: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Simulated vs kernel util at every kernel sample (root cfs_rq per CPU, and tasks).

    Each entity is seeded with its first kernel sample (``seed=True``; that sample is then excluded). With
    ``attach=True`` the runqueue signal also moves tasks' utilisation between CPUs (see df_pelt_sim_cpu).
    Columns: kind ("cpu" | "task"), id (cpu or pid), ts, kernel_util, sim_util, abs_err (util units).
    Events: sched_switch + sched_pelt_cfs and/or sched_pelt_se; optional cpu_frequency, wakeups,
    sched_migrate_task.
    """
    start_ns, end_ns = window_of(sched_switch, start_ns, end_ns)
    parts = []
    common = dict(
        cpu_frequency=cpu_frequency,
        wakeups=wakeups,
        platform=platform,
        start_ns=start_ns,
        end_ns=end_ns,
        unknown_freq=unknown_freq,
    )
    _, task_seeds, new_pids = kernel_seeds(
        sched_switch,
        sched_pelt_cfs=sched_pelt_cfs,
        sched_pelt_se=sched_pelt_se,
        forks=forks,
        start_ns=start_ns,
        end_ns=end_ns,
    )
    if not seed:
        task_seeds = None
    if sched_pelt_cfs is not None and not sched_pelt_cfs.is_empty():
        k = sched_pelt_cfs
        if "path" in k.columns:
            k = k.filter(pl.col("path").cast(pl.Utf8) == "/")
        k = k.select(_event_cpu(k), "ts", pl.col("util").cast(pl.Float64).alias("kernel_util"))
        k = k.filter((pl.col("ts") >= start_ns) & (pl.col("ts") < end_ns)).sort("cpu", "ts")
        seeds = k.group_by("cpu", maintain_order=True).first().rename({"kernel_util": "util"}) if seed else None
        sim = df_pelt_sim_cpu(
            sched_switch,
            initial=seeds,
            sched_migrate_task=sched_migrate_task,
            task_initial=task_seeds,
            attach=attach,
            new_pids=new_pids,
            **common,
        )
        if seed:
            k = (
                k.join(seeds.select("cpu", pl.col("ts").alias("_s")), on="cpu")
                .filter(pl.col("ts") > pl.col("_s"))
                .drop("_s")
            )
        got = sample_signal(sim, k, "cpu")
        parts.append(
            got.select(
                pl.lit("cpu").alias("kind"), pl.col("cpu").cast(pl.Int64).alias("id"), "ts", "kernel_util", "sim_util"
            )
        )
    if sched_pelt_se is not None and not sched_pelt_se.is_empty() and "pid" in sched_pelt_se.columns:
        k = sched_pelt_se.filter(pl.col("pid") > 0).select(
            pl.col("pid").cast(pl.Int64), "ts", pl.col("util").cast(pl.Float64).alias("kernel_util")
        )
        k = k.filter((pl.col("ts") >= start_ns) & (pl.col("ts") < end_ns)).sort("pid", "ts")
        seeds = task_seeds
        sim = df_pelt_sim_task(sched_switch, pids=k["pid"].unique().to_list(), initial=seeds, **common)
        if seed:
            k = (
                k.join(seeds.select("pid", pl.col("ts").alias("_s")), on="pid")
                .filter(pl.col("ts") > pl.col("_s"))
                .drop("_s")
            )
        got = sample_signal(sim, k, "pid")
        parts.append(
            got.select(pl.lit("task").alias("kind"), pl.col("pid").alias("id"), "ts", "kernel_util", "sim_util")
        )
    if not parts:
        raise AnalysisNotApplicable("df_sim_vs_kernel needs sched_pelt_cfs or sched_pelt_se samples")
    out = pl.concat(parts).drop_nulls("sim_util")
    return out.with_columns((pl.col("sim_util") - pl.col("kernel_util")).abs().alias("abs_err"))
