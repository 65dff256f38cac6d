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
5. Waiting (runnable, not running; df_waiting): from a switch-out in a runnable state (preemption), or from a
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

Two implementations of this model, the same segments and values (tests/test_sim_native.py, every shared
trace): ``backend="native"`` (default) replays the events in time order in the Rust core (native/src/
sim_pelt.rs: one pass decides which waits count, a second simulates every CPU and task; ~10-15 M input
events/s), ``backend="python"`` builds the segments with frames and solves the per-segment recurrence in
closed form with cumulative sums in numpy, in blocks of at most ~15 s of signal time so that exp() stays in
float64 range (one vectorised pass per block rank): the reference, ~0.1-0.3 M events/s.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from abtest.analysis.intervals import df_intervals, df_intervals_join, window_of
from abtest.trace.errors import AnalysisNotApplicable

EVENTS = ("sched_switch",)
OPTIONAL_EVENTS = ("sched_wakeup", "sched_waking", "sched_wakeup_new", "cpu_frequency")

PELT_PERIOD_NS = 1024 * 1024
HALF_LIFE_PERIODS = 32
DECAY_PER_NS = math.log(2.0) / (HALF_LIFE_PERIODS * PELT_PERIOD_NS)
_TS_MIN = -(2**63)  # "before everything" (events in force from the start)
# prev_state bits of a task that will not run again: EXIT_DEAD 0x10, EXIT_ZOMBIE 0x20, TASK_DEAD 0x40 in the raw
# state of kernels < 4.14; 1 << state index since (X 0x20, Z 0x40; 0x10 is then ptrace-stopped "t", which is
# detached and attaches again when it runs)
_DEAD_BITS = 0x70
_BLOCK_NS = 15e9  # exp(DECAY_PER_NS * 2 * _BLOCK_NS) ~ e^620 < float64 max

__all__ = [
    "EVENTS",
    "OPTIONAL_EVENTS",
    "PELT_PERIOD_NS",
    "DECAY_PER_NS",
    "decay_filter",
    "df_cpu_scale",
    "cpu_scale_spec",
    "df_cpu_contention",
    "df_attach_changes",
    "kernel_seeds",
    "df_cpu_running",
    "df_waiting",
    "df_pelt_sim_cpu",
    "df_pelt_sim_task",
    "sample_signal",
    "df_sim_vs_kernel",
]


# -- the filter ----------------------------------------------------------------------------------------
def decay_filter(
    entity: np.ndarray, dur_ns: np.ndarray, x: np.ndarray, u0: np.ndarray, jump: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Solve ``u_end[i] = u_start[i] * exp(-k d_i) + x_i (1 - exp(-k d_i))``, ``u_start[i+1] = u_end[i] + J[i+1]``
    within each entity, ``u_start[first] = u0[first] + J[first]`` (k = DECAY_PER_NS; J = ``jump``, an
    instantaneous change of the signal at the row start, e.g. a task's utilisation attached to a runqueue).

    Rows must be grouped by entity (contiguous) and in time order within it; ``dur_ns`` > 0 (ns).
    Returns (u_start, u_end) arrays. Vectorised (closed form with block-wise cumulative sums).
    """
    n = len(dur_ns)
    if n == 0:
        return np.empty(0), np.empty(0)
    lam = DECAY_PER_NS
    ent = np.asarray(entity)
    d = np.asarray(dur_ns, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    first = np.r_[True, ent[1:] != ent[:-1]]
    ent_idx = np.cumsum(first) - 1
    cs = np.cumsum(d)
    t_end = cs - (cs - d)[first][ent_idx]  # time since the entity's start, end of each row
    t_prev = t_end - d
    long = d > _BLOCK_NS
    bucket = np.floor(t_prev / _BLOCK_NS)
    new_block = first | long | np.r_[True, long[:-1]] | np.r_[True, bucket[1:] != bucket[:-1]]
    blk = np.cumsum(new_block) - 1
    blk_first = np.flatnonzero(new_block)
    blk_last = np.r_[blk_first[1:] - 1, n - 1]
    ref = t_end[blk_last][blk]  # block end: every exponent below is <= 0 or bounded
    t_b = t_prev[blk_first][blk]
    w = np.exp(-lam * (ref - t_end)) * (-np.expm1(-lam * d))
    xw = x * w
    jmp = np.zeros(n) if jump is None else np.asarray(jump, dtype=np.float64)
    not_blk_first = ~new_block
    # a jump at the start of a row that does not start a block decays like an input over the rest of the block
    xw = xw + np.where(not_blk_first, jmp * np.exp(-lam * (ref - t_prev)), 0.0)
    # cumulative sum within each block (segmented, never subtracting a larger global prefix)
    s = pl.DataFrame({"b": blk, "v": xw}).select(pl.col("v").cum_sum().over("b"))["v"].to_numpy()
    q = np.exp(lam * (ref - t_end)) * s  # block's own contribution at each row end
    p = np.exp(-lam * (t_end - t_b))  # decay of the block start value to each row end
    nblk = len(blk_first)
    u_b = np.empty(nblk)
    blk_ent = ent_idx[blk_first]
    blk_ent_first = np.r_[True, blk_ent[1:] != blk_ent[:-1]]
    u_b[blk_ent_first] = (np.asarray(u0, dtype=np.float64) + jmp)[blk_first[blk_ent_first]]
    rank = np.arange(nblk) - np.maximum.accumulate(np.where(blk_ent_first, np.arange(nblk), 0))
    p_last, q_last = p[blk_last], q[blk_last]
    order = np.argsort(rank, kind="stable")
    bounds = np.searchsorted(rank[order], np.arange(1, rank.max() + 2))
    for r in range(1, rank.max() + 1):  # one vectorised step per block rank, not per event
        sel = order[bounds[r - 1] : bounds[r]]
        u_b[sel] = u_b[sel - 1] * p_last[sel - 1] + q_last[sel - 1] + jmp[blk_first[sel]]
    u_end = u_b[blk] * p + q
    u_start = np.where(first, np.asarray(u0, dtype=np.float64), np.r_[0.0, u_end[:-1]]) + jmp
    return u_start, u_end


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


def df_cpu_scale(
    cpu_frequency: pl.DataFrame | None,
    *,
    platform: dict | None,
    cpus: list[int],
    start_ns: int,
    end_ns: int,
    unknown_freq: str = "max",
) -> pl.DataFrame:
    """Per-CPU invariance factor intervals ``cpu, ts, dur, scale`` where scale = capacity x f / f_max
    (0..1024). Without cpu_frequency: capacity only. See the module doc for unknown frequency handling."""
    spec = cpu_scale_spec(cpu_frequency, platform=platform, cpus=cpus, unknown_freq=unknown_freq)
    if cpu_frequency is None or cpu_frequency.is_empty():
        return spec.select(
            "cpu",
            pl.lit(start_ns, pl.Int64).alias("ts"),
            pl.lit(end_ns - start_ns, pl.Int64).alias("dur"),
            pl.col("capacity").alias("scale"),
        )
    ev = cpu_frequency.select(pl.col("cpu").cast(pl.Int32), "ts", pl.col("frequency_khz").cast(pl.Float64))
    iv = df_intervals(ev, "frequency_khz", keys="cpu", start_ns=start_ns, end_ns=end_ns, all_keys=cpus).join(
        spec, on="cpu"
    )
    f = pl.coalesce(pl.col("frequency_khz"), pl.col("fill_khz"), pl.col("fmax_khz"))
    ratio = (
        pl.when(pl.col("fmax_khz").is_not_null())
        .then(pl.min_horizontal(f / pl.col("fmax_khz"), pl.lit(1.0)))
        .otherwise(1.0)
    )
    return iv.select("cpu", "ts", "dur", (pl.col("capacity") * ratio).alias("scale"))


def df_cpu_running(
    sched_switch: pl.DataFrame, *, start_ns: int, end_ns: int, cpus: list[int] | None = None
) -> pl.DataFrame:
    """Per-CPU ``cpu, ts, dur, pid, prio, cfs`` (task on the CPU; pid 0 = idle; cfs = CFS task (prio >= 100)
    running; before a CPU's first switch, the task is the first switch's prev_pid). Events: sched_switch."""
    sw = sched_switch.select(
        pl.col("cpu").cast(pl.Int32),
        pl.col("ts").cast(pl.Int64),
        pl.col("prev_pid").cast(pl.Int64),
        pl.col("prev_prio").cast(pl.Int64),
        pl.col("next_pid").cast(pl.Int64).alias("pid"),
        pl.col("next_prio").cast(pl.Int64).alias("prio"),
    )
    first = (
        sw.sort("ts")
        .group_by("cpu", maintain_order=True)
        .first()
        .select(
            "cpu",
            (pl.min_horizontal(pl.col("ts"), pl.lit(start_ns)) - 1).alias("ts"),
            pl.col("prev_pid").alias("pid"),
            pl.col("prev_prio").alias("prio"),
        )
    )
    changes = pl.concat([first, sw.select("cpu", "ts", "pid", "prio")])
    iv = df_intervals(changes, ["pid", "prio"], keys="cpu", start_ns=start_ns, end_ns=end_ns, all_keys=cpus)
    return iv.with_columns(((pl.col("pid") > 0) & (pl.col("prio") >= 100)).fill_null(False).alias("cfs"))


def _runnable_mask(state: pl.Expr) -> pl.Expr:
    # switched out without any sleep/stop/dead bit (low byte 0): preempted, still runnable ("R" / "R+")
    return (state.cast(pl.Int64) & 0xFF) == 0


def df_waiting(sched_switch: pl.DataFrame, wakeups: list[pl.DataFrame] | None = None) -> pl.DataFrame:
    """Runnable-but-waiting intervals: ``pid, cpu, ts, dur, prio`` (cpu and prio: those of the event that
    started the wait; cpu = the runqueue it waits on).

    A task is *on a CPU* from its switch-in to its switch-out (the task a CPU's first sched_switch switches
    out is on that CPU from the start). A wait starts when the task is switched out runnable (preempted), or
    when a wakeup event (sched_waking / sched_wakeup / sched_wakeup_new, at its target_cpu) names it while it
    is neither on a CPU nor already waiting; it ends at the task's next switch-in. A wait whose next sched_switch
    of the task is a switch-out instead (the trace missed its switch-in), or that no switch-in follows, is left
    out. Events of one task at one timestamp count in the order switch-out, wakeups, switch-in.
    Events: sched_switch; optional wakeup events.
    """
    sw = sched_switch.select(
        pl.col("cpu").cast(pl.Int32),
        pl.col("ts").cast(pl.Int64),
        pl.col("prev_pid").cast(pl.Int64),
        pl.col("prev_prio").cast(pl.Int64),
        "prev_state",
        pl.col("next_pid").cast(pl.Int64),
        pl.col("next_prio").cast(pl.Int64),
    )
    # kind: 0 switch-out asleep, 1 switch-out runnable, 2 switch-in, 3 wakeup; _o: order at one timestamp
    outs = sw.filter(pl.col("prev_pid") > 0).select(
        pl.col("prev_pid").alias("pid"),
        "ts",
        "cpu",
        pl.col("prev_prio").alias("prio"),
        pl.when(_runnable_mask(pl.col("prev_state"))).then(1).otherwise(0).cast(pl.Int8).alias("kind"),
        pl.lit(0, pl.Int8).alias("_o"),
    )
    ins = sw.filter(pl.col("next_pid") > 0).select(
        pl.col("next_pid").alias("pid"),
        "ts",
        "cpu",
        pl.col("next_prio").alias("prio"),
        pl.lit(2, pl.Int8).alias("kind"),
        pl.lit(2, pl.Int8).alias("_o"),
    )
    # the task each CPU's first switch switches out was on that CPU from the start
    on_at_start = (
        sw.sort("ts")
        .group_by("cpu", maintain_order=True)
        .first()
        .filter(pl.col("prev_pid") > 0)
        .select(
            pl.col("prev_pid").alias("pid"),
            pl.lit(_TS_MIN, pl.Int64).alias("ts"),
            "cpu",
            pl.col("prev_prio").alias("prio"),
            pl.lit(2, pl.Int8).alias("kind"),
            pl.lit(2, pl.Int8).alias("_o"),
        )
    )
    parts = [on_at_start, outs, ins]
    for wk in wakeups or []:
        if wk is None or wk.is_empty():
            continue
        tgt = "target_cpu" if "target_cpu" in wk.columns else "cpu"
        parts.append(
            wk.filter(pl.col("pid") > 0).select(
                pl.col("pid").cast(pl.Int64),
                pl.col("ts").cast(pl.Int64),
                pl.col(tgt).cast(pl.Int32).alias("cpu"),
                pl.col("prio").cast(pl.Int64),
                pl.lit(3, pl.Int8).alias("kind"),
                pl.lit(1, pl.Int8).alias("_o"),
            )
        )
    ev = pl.concat(parts).with_row_index("_seq").sort("pid", "ts", "_o", "_seq")
    is_switch = pl.col("kind") < 3
    nxt = [
        pl.when(is_switch).then(pl.col(c)).shift(-1).backward_fill().over("pid").alias(f"_next_{c}")
        for c in ("ts", "kind")
    ]
    ev = ev.with_columns(is_switch.cast(pl.Int32).cum_sum().over("pid").alias("_seg"), *nxt)
    lead = pl.col("kind").first().over("pid", "_seg")
    is_wake = pl.col("kind") == 3
    first_wake = is_wake & (is_wake.cast(pl.Int32).cum_sum().over("pid", "_seg") == 1)
    # the segment (a task's events from one of its switches to the next) decides: preempted -> waiting from
    # the switch-out; asleep (or no switch seen yet) -> from its first wakeup; on a CPU -> not waiting
    starts = ev.filter(
        ((pl.col("kind") == 1) | (first_wake & ((lead == 0) | (lead == 3)))) & (pl.col("_next_kind") == 2)
    )
    return (
        starts.select("pid", "cpu", "ts", (pl.col("_next_ts") - pl.col("ts")).alias("dur"), "prio")
        .filter(pl.col("dur") > 0)
        .sort("pid", "ts")
    )


def _fill_gaps(rows: pl.DataFrame, key: str, t0: pl.DataFrame, end_ns: int, cols: list[str]) -> pl.DataFrame:
    """Rows (key, ts, dur, cols...) non-overlapping per key -> contiguous from t0[key] to end_ns, gaps with 0."""
    rows = rows.join(t0, on=key).filter(pl.col("ts") + pl.col("dur") > pl.col("t0"))
    rows = rows.with_columns(
        pl.max_horizontal("ts", "t0").alias("_s"),
        pl.min_horizontal(pl.col("ts") + pl.col("dur"), pl.lit(end_ns)).alias("_e"),
    )
    rows = rows.with_columns(pl.col("_s").alias("ts"), (pl.col("_e") - pl.col("_s")).alias("dur")).filter(
        pl.col("dur") > 0
    )
    rows = rows.sort(key, "ts")
    prev_end = (pl.col("ts") + pl.col("dur")).shift(1).over(key)
    gaps = rows.select(key, pl.coalesce(prev_end, pl.col("t0")).alias("ts"), pl.col("ts").alias("_e")).filter(
        pl.col("_e") > pl.col("ts")
    )
    tail = (
        rows.group_by(key)
        .agg((pl.col("ts") + pl.col("dur")).max().alias("ts"))
        .with_columns(pl.lit(end_ns).alias("_e"))
    )
    tail = tail.filter(pl.col("_e") > pl.col("ts"))
    # keys with no row at all after t0
    empty = t0.join(rows.select(key).unique(), on=key, how="anti").select(
        key, pl.col("t0").alias("ts"), pl.lit(end_ns).alias("_e")
    )
    filler = (
        pl.concat([gaps, tail, empty], how="vertical_relaxed")
        .with_columns((pl.col("_e") - pl.col("ts")).alias("dur"))
        .drop("_e")
        .with_columns([pl.lit(0.0).alias(c) for c in cols])
    )
    return (
        pl.concat(
            [rows.select(key, "ts", "dur", *cols), filler.select(key, "ts", "dur", *cols)], how="vertical_relaxed"
        )
        .filter(pl.col("dur") > 0)
        .sort(key, "ts")
    )


def _earliest_first(rows: pl.DataFrame) -> pl.DataFrame:
    """Rows (pid, ts, dur, ...) that may overlap (a task seen on two CPUs at once, per-CPU clocks skewed, lost
    events) -> non-overlapping: the row that started first keeps the time until it ends, a later row only
    covers what is left after it (ties: running before waiting)."""
    rows = rows.sort("pid", "ts", "_k", maintain_order=True)
    busy_until = (pl.col("ts") + pl.col("dur")).cum_max().shift(1).over("pid")
    return (
        rows.with_columns(pl.max_horizontal("ts", busy_until).alias("_s"))
        .with_columns((pl.col("ts") + pl.col("dur") - pl.col("_s")).alias("dur"), pl.col("_s").alias("ts"))
        .filter(pl.col("dur") > 0)
        .drop("_s", "_k")
    )


def _run_filter(
    seg: pl.DataFrame,
    key: str,
    signals: dict[str, str],
    seeds: pl.DataFrame | None,
    jumps: dict[str, str] | None = None,
) -> pl.DataFrame:
    """seg (key, ts, dur, x columns[, jump columns]) contiguous per key -> + one column per signal name
    (its value at each segment start, after the segment's jump)."""
    seg = seg.sort(key, "ts")
    ent = seg[key].to_numpy()
    dur = seg["dur"].to_numpy().astype(np.float64)
    out = {}
    for name, xcol in signals.items():
        if seeds is not None and name in seeds.columns:
            u0 = seg.join(seeds.select(key, pl.col(name).alias("_u0")), on=key, how="left", maintain_order="left")[
                "_u0"
            ]
            u0 = u0.fill_null(0.0).to_numpy().astype(np.float64)
        else:
            u0 = np.zeros(seg.height)
        jcol = (jumps or {}).get(name)
        jump = seg[jcol].fill_null(0.0).to_numpy().astype(np.float64) if jcol else None
        start, _ = decay_filter(ent, dur, seg[xcol].to_numpy().astype(np.float64), u0, jump)
        out[name] = np.maximum(start, 0.0)  # a runqueue signal never goes below 0 (kernel: sub_positive)
    return seg.with_columns([pl.Series(name, v) for name, v in out.items()])


def _t0_frame(key: str, keys: list, start_ns: int, seeds: pl.DataFrame | None, dtype) -> pl.DataFrame:
    t0 = pl.DataFrame({key: keys}, schema={key: dtype}).with_columns(pl.lit(start_ns, pl.Int64).alias("t0"))
    if seeds is not None and "ts" in seeds.columns:
        t0 = (
            t0.join(seeds.select(pl.col(key).cast(dtype), pl.col("ts").alias("_seed_ts")), on=key, how="left")
            .with_columns(pl.max_horizontal(pl.coalesce("_seed_ts", "t0"), pl.lit(start_ns)).alias("t0"))
            .drop("_seed_ts")
        )
    return t0


def _split_at(seg: pl.DataFrame, key: str, cuts: pl.DataFrame) -> pl.DataFrame:
    """Split contiguous segments (key, ts, dur, values...) at extra cut times ``cuts`` (key, ts)."""
    ends = seg.group_by(key).agg((pl.col("ts") + pl.col("dur")).max().alias("_end"), pl.col("ts").min().alias("_beg"))
    cuts = cuts.select(pl.col(key).cast(seg.schema[key]), pl.col("ts").cast(pl.Int64)).join(ends, on=key)
    cuts = cuts.filter((pl.col("ts") > pl.col("_beg")) & (pl.col("ts") < pl.col("_end"))).select(key, "ts")
    pts = pl.concat([seg.select(key, "ts"), cuts]).unique().sort(key, "ts")
    pts = (
        pts.join(ends, on=key)
        .with_columns((pl.col("ts").shift(-1).over(key).fill_null(pl.col("_end")) - pl.col("ts")).alias("dur"))
        .drop("_end", "_beg")
    )
    vals = seg.drop("dur").sort(key, "ts")
    return (
        pts.sort("ts")
        .join_asof(vals.sort("ts"), on="ts", by=key, strategy="backward", check_sortedness=False)
        .sort(key, "ts")
    )


def df_attach_changes(
    sched_switch: pl.DataFrame,
    *,
    wakeups: list[pl.DataFrame] | None = None,
    sched_migrate_task: pl.DataFrame | None = None,
    new_pids: list[int] | None = None,
) -> pl.DataFrame:
    """When a task's utilisation moves between runqueues: ``pid, ts, from_cpu (null = the task attaches),
    to_cpu (null = the task exited)``.

    A task belongs to the runqueue of the CPU it last ran on, was woken onto (target_cpu) or was migrated to
    (dest_cpu). Its first appearance is assumed to be on the runqueue it already belonged to (no move), except
    for ``new_pids`` (forked in the window), whose first appearance attaches them (from_cpu null). A switch-out
    in a dead or zombie state (prev_state & 0x70, see _DEAD_BITS) detaches the task (to_cpu null); if the pid
    shows up again it attaches anew. Events of one task at one timestamp count in the order switch-in, wakeups,
    migration, exit.
    Events: sched_switch; optional wakeups, sched_migrate_task.
    """
    parts = [
        sched_switch.filter(pl.col("next_pid") > 0).select(
            pl.col("next_pid").cast(pl.Int64).alias("pid"),
            pl.col("ts").cast(pl.Int64),
            pl.col("cpu").cast(pl.Int32).alias("to_cpu"),
            pl.lit(0, pl.Int8).alias("_o"),
        )
    ]
    for wk in wakeups or []:
        if wk is not None and not wk.is_empty():
            tgt = "target_cpu" if "target_cpu" in wk.columns else "cpu"
            parts.append(
                wk.select(
                    pl.col("pid").cast(pl.Int64),
                    pl.col("ts").cast(pl.Int64),
                    pl.col(tgt).cast(pl.Int32).alias("to_cpu"),
                    pl.lit(1, pl.Int8).alias("_o"),
                )
            )
    if sched_migrate_task is not None and not sched_migrate_task.is_empty():
        parts.append(
            sched_migrate_task.select(
                pl.col("pid").cast(pl.Int64),
                pl.col("ts").cast(pl.Int64),
                pl.col("dest_cpu").cast(pl.Int32).alias("to_cpu"),
                pl.lit(2, pl.Int8).alias("_o"),
            )
        )
    parts.append(
        sched_switch.filter(
            (pl.col("prev_pid") > 0) & ((pl.col("prev_state").cast(pl.Int64) & _DEAD_BITS) != 0)
        ).select(
            pl.col("prev_pid").cast(pl.Int64).alias("pid"),
            pl.col("ts").cast(pl.Int64),
            pl.lit(None, pl.Int32).alias("to_cpu"),
            pl.lit(3, pl.Int8).alias("_o"),
        )
    )
    ev = (
        pl.concat(parts)
        .filter(pl.col("pid") > 0)
        .with_row_index("_seq")
        .sort("pid", "ts", "_o", "_seq")
        .with_columns(
            pl.col("to_cpu").shift(1).over("pid").alias("from_cpu"),
            (pl.col("_o").shift(1).over("pid") == 3).fill_null(False).alias("_after_exit"),
            (pl.int_range(pl.len()).over("pid") == 0).alias("_first"),
        )
    )
    moved = pl.col("from_cpu").is_not_null() & pl.col("to_cpu").is_not_null() & (pl.col("from_cpu") != pl.col("to_cpu"))
    exited = (pl.col("_o") == 3) & pl.col("from_cpu").is_not_null()
    born = pl.col("to_cpu").is_not_null() & (
        (pl.col("_first") & pl.col("pid").is_in(list(new_pids or []))) | pl.col("_after_exit")
    )
    return ev.filter(moved | exited | born).select("pid", "ts", "from_cpu", "to_cpu")


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
    backend: str = "native",
) -> pl.DataFrame:
    """Simulated per-CPU (root CFS runqueue) PELT signals.

    The runqueue signal follows the CPU's CFS activity (util: a CFS task runs; runnable: number of runnable
    CFS tasks) and, with ``attach=True``, jumps when a task's utilisation moves in or out (wakeup on another
    CPU, migration): by the task's simulated util / runnable at that instant (df_pelt_sim_task, seeded with
    ``task_initial``). Tasks in ``new_pids`` (forked in the window) are attached at their first appearance.

    Returns the piecewise-constant input segments with the signal at each segment start:
    ``cpu, ts (ns), dur (ns), x_util, x_runnable (input levels), util, runnable`` (PELT units, at ts after any
    jump there). Evaluate anywhere with :func:`sample_signal`. ``initial``: optional ``cpu, ts, util[, runnable]``
    seeding each CPU with that value at that time (its simulation starts there). ``backend``: "native" (the
    compiled simulator, native/sim/src/pelt.rs) or "python" (this module's frames: the reference).
    Events: sched_switch; optional cpu_frequency, wakeups, sched_migrate_task.
    """
    start_ns, end_ns = window_of(sched_switch, start_ns, end_ns)
    if cpus is None:
        cpus = _cpus_of(sched_switch, platform)
    if backend == "native":
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
    run = df_cpu_running(sched_switch, start_ns=start_ns, end_ns=end_ns, cpus=cpus)
    scale = df_cpu_scale(
        cpu_frequency, platform=platform, cpus=cpus, start_ns=start_ns, end_ns=end_ns, unknown_freq=unknown_freq
    )
    wait = df_waiting(sched_switch, wakeups).filter(pl.col("prio") >= 100)
    steps = pl.concat(
        [
            wait.select("cpu", "ts", pl.lit(1).alias("d")),
            wait.select("cpu", (pl.col("ts") + pl.col("dur")).alias("ts"), pl.lit(-1).alias("d")),
        ]
    )
    steps = (
        steps.group_by("cpu", "ts")
        .agg(pl.col("d").sum())
        .sort("cpu", "ts")
        .with_columns(pl.col("d").cum_sum().over("cpu").alias("n_waiting"))
    )
    nwait = df_intervals(steps, "n_waiting", keys="cpu", start_ns=start_ns, end_ns=end_ns, initial=0, all_keys=cpus)
    seg = df_intervals_join(
        df_intervals_join(run.select("cpu", "ts", "dur", "cfs"), scale, keys="cpu"), nwait, keys="cpu"
    )
    seg = seg.with_columns(
        (pl.col("cfs").cast(pl.Float64) * pl.col("scale")).alias("x_util"),
        ((pl.col("cfs").cast(pl.Float64) + pl.col("n_waiting").fill_null(0).cast(pl.Float64)) * pl.col("scale")).alias(
            "x_runnable"
        ),
    )
    t0 = _t0_frame("cpu", cpus, start_ns, initial, pl.Int32)
    seg = _fill_gaps(
        seg.select("cpu", "ts", "dur", "x_util", "x_runnable"), "cpu", t0, end_ns, ["x_util", "x_runnable"]
    )
    jumps = None
    if attach:
        moves = df_attach_changes(
            sched_switch, wakeups=wakeups, sched_migrate_task=sched_migrate_task, new_pids=new_pids
        )
        moves = moves.filter((pl.col("ts") >= start_ns) & (pl.col("ts") < end_ns))
        if moves.height:
            tasks = df_pelt_sim_task(
                sched_switch,
                cpu_frequency=cpu_frequency,
                wakeups=wakeups,
                platform=platform,
                start_ns=start_ns,
                end_ns=end_ns,
                pids=moves["pid"].unique().to_list(),
                initial=task_initial,
                unknown_freq=unknown_freq,
                backend=backend,
            )
            # the task's signal just before it moves (sample 1 ns earlier: before its own segment boundary);
            # a new task's value is taken at its first appearance (its seed, when seeded there)
            at = (
                moves.with_columns(
                    pl.when(pl.col("from_cpu").is_null()).then(pl.col("ts")).otherwise(pl.col("ts") - 1).alias("_t")
                )
                .rename({"ts": "ts_move"})
                .rename({"_t": "ts"})
            )
            util_at = sample_signal(tasks, at, "pid", "util")
            runnable_at = sample_signal(tasks, at.select("pid", "ts").unique(), "pid", "runnable")
            at = util_at.join(runnable_at, on=["pid", "ts"], how="left")
            at = at.with_columns(pl.col("sim_util", "sim_runnable").fill_null(0.0))
            jumps = (
                pl.concat(
                    [
                        at.filter(pl.col("from_cpu").is_not_null()).select(
                            pl.col("from_cpu").alias("cpu"),
                            pl.col("ts_move").alias("ts"),
                            (-pl.col("sim_util")).alias("j_util"),
                            (-pl.col("sim_runnable")).alias("j_runnable"),
                        ),
                        at.filter(pl.col("to_cpu").is_not_null()).select(
                            pl.col("to_cpu").alias("cpu"),
                            pl.col("ts_move").alias("ts"),
                            pl.col("sim_util").alias("j_util"),
                            pl.col("sim_runnable").alias("j_runnable"),
                        ),
                    ]
                )
                .group_by("cpu", "ts")
                .agg(pl.col("j_util").sum(), pl.col("j_runnable").sum())
            )
            # jumps before a CPU's own seed time are part of the seed
            jumps = jumps.join(t0, on="cpu").filter(pl.col("ts") > pl.col("t0")).drop("t0")
            seg = _split_at(seg, "cpu", jumps.select("cpu", "ts"))
            seg = seg.join(jumps, on=["cpu", "ts"], how="left").with_columns(
                pl.col("j_util", "j_runnable").fill_null(0.0)
            )
            jumps = {"util": "j_util", "runnable": "j_runnable"}
    seeds = None if initial is None else initial.with_columns(pl.col("cpu").cast(pl.Int32))
    out = _run_filter(seg, "cpu", {"util": "x_util", "runnable": "x_runnable"}, seeds, jumps)
    return out.select("cpu", "ts", "dur", "x_util", "x_runnable", "util", "runnable")


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
    backend: str = "native",
    aggregate_from_ns: int | None = None,
    **kw,
) -> pl.DataFrame:
    """Contention per CPU of the simulated signals, as load_tracking.df_contention computes it on
    df_pelt_sim_cpu's output (each segment holds its start values): ``cpu, known_ns, contended_ns (runnable >
    util + margin), contended_pct, mean_util, mean_runnable (time-weighted), runnable_util_ratio (time-weighted
    runnable / util where util >= 1), max_runnable``. ``kw``: df_pelt_sim_cpu's arguments. The native backend
    aggregates while it simulates (no segment is kept: memory does not grow with the trace).
    ``aggregate_from_ns``: only the time from then on counts (a window analysed after signals simulated from
    an earlier start_ns to warm them up; the segment open at that time counts from it with its values).
    """
    if backend != "native":
        segs = df_pelt_sim_cpu(sched_switch, backend=backend, **kw)
        if aggregate_from_ns is not None:  # each segment clipped to the time from aggregate_from_ns on
            segs = (
                segs.with_columns((pl.col("ts") + pl.col("dur")).alias("_end"))
                .filter(pl.col("_end") > aggregate_from_ns)
                .with_columns(pl.max_horizontal("ts", pl.lit(aggregate_from_ns)).alias("ts"))
                .with_columns((pl.col("_end") - pl.col("ts")).alias("dur"))
                .drop("_end")
            )
        return df_contention_of_intervals(segs, "cpu", margin)
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
    backend: str = "native",
) -> pl.DataFrame:
    """Simulated per-task PELT signals: ``pid, ts, dur, x_util, x_runnable, util, runnable`` (see
    df_pelt_sim_cpu). A task's util input is the capacity x f/f_max of the CPU it runs on; while waiting, its
    runnable input is that of the CPU it waits on (frequency taken at the start of the wait). A task starts
    at 0 when first seen in the window; ``initial`` (``pid, ts, util[, runnable]``) resets a task to a known
    value at a known time (e.g. the kernel's first sample). Events: sched_switch; optional cpu_frequency,
    wakeups.
    """
    start_ns, end_ns = window_of(sched_switch, start_ns, end_ns)
    cpus = _cpus_of(sched_switch, platform)
    if backend == "native":
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
    run = df_cpu_running(sched_switch, start_ns=start_ns, end_ns=end_ns, cpus=cpus).filter(pl.col("pid") > 0)
    scale = df_cpu_scale(
        cpu_frequency, platform=platform, cpus=cpus, start_ns=start_ns, end_ns=end_ns, unknown_freq=unknown_freq
    )
    running = df_intervals_join(run.select("cpu", "ts", "dur", "pid"), scale, keys="cpu").select(
        "pid", "ts", "dur", pl.col("scale").alias("x_util"), pl.col("scale").alias("x_runnable")
    )
    wait = df_waiting(sched_switch, wakeups).filter((pl.col("ts") < end_ns) & (pl.col("ts") + pl.col("dur") > start_ns))
    # the runnable input of a wait: the CPU's scale when it starts (or at the window start)
    wait = (
        wait.with_columns(pl.max_horizontal("ts", pl.lit(start_ns)).alias("_at"))
        .sort("_at")
        .join_asof(
            scale.select("cpu", pl.col("ts").alias("_at"), "scale").sort("_at"),
            on="_at",
            by="cpu",
            strategy="backward",
            check_sortedness=False,
        )
    )
    waiting = wait.select(
        "pid", "ts", "dur", pl.lit(0.0).alias("x_util"), pl.col("scale").fill_null(1024.0).alias("x_runnable")
    )
    rows = _earliest_first(
        pl.concat(
            [running.with_columns(pl.lit(0, pl.Int8).alias("_k")), waiting.with_columns(pl.lit(1, pl.Int8).alias("_k"))]
        )
    )
    if pids is not None:
        rows = rows.filter(pl.col("pid").is_in(pids))
    keys = sorted(set(rows["pid"].to_list()) | set(pids or []))
    t0 = (
        pl.DataFrame({"pid": keys}, schema={"pid": pl.Int64})
        .join(rows.group_by("pid").agg(pl.col("ts").min().alias("t0")), on="pid", how="left")
        .with_columns(pl.max_horizontal(pl.col("t0").fill_null(end_ns), pl.lit(start_ns)).alias("t0"))
    )
    seg = _fill_gaps(rows, "pid", t0, end_ns, ["x_util", "x_runnable"])
    sig = {"util": "x_util", "runnable": "x_runnable"}
    out = _run_filter(seg, "pid", sig, None)
    if initial is not None and initial.height:
        seeds = initial.with_columns(pl.col("pid").cast(pl.Int64)).filter(pl.col("pid").is_in(keys))
        t0s = _t0_frame("pid", seeds["pid"].to_list(), start_ns, seeds, pl.Int64)
        seeded = _run_filter(
            _fill_gaps(
                rows.filter(pl.col("pid").is_in(seeds["pid"].to_list())), "pid", t0s, end_ns, ["x_util", "x_runnable"]
            ),
            "pid",
            sig,
            seeds,
        )
        # unseeded history up to each seed time, then the seeded simulation
        before = (
            out.join(t0s.rename({"t0": "_seed"}), on="pid", how="left")
            .filter(pl.col("_seed").is_null() | (pl.col("ts") < pl.col("_seed")))
            .with_columns(
                pl.when(pl.col("_seed").is_not_null())
                .then(pl.min_horizontal(pl.col("dur"), pl.col("_seed") - pl.col("ts")))
                .otherwise(pl.col("dur"))
                .alias("dur")
            )
            .drop("_seed")
        )
        out = pl.concat([before, seeded.select(before.columns)]).sort("pid", "ts")
    return out.select("pid", "ts", "dur", "x_util", "x_runnable", "util", "runnable")


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
