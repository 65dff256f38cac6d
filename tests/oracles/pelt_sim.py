"""abtest.analysis.pelt_sim's simulation written with frames: the segments built with polars (running task,
CPU scale, waiting tasks, attach / detach jumps) and the per-segment recurrence solved in closed form with
cumulative sums in numpy (decay_filter), in blocks of at most ~15 s of signal time so that exp() stays in
float64 range (one vectorised pass per block rank). The oracle of the compiled simulator (native/sim/src/
pelt.rs, abtest.analysis.sim_native), compared on every shared trace by tests/test_sim_native.py: the same
segments, signals within 1e-6. The model and its approximations are those of abtest.analysis.pelt_sim's
module docstring."""

from __future__ import annotations

import numpy as np
import polars as pl

from abtest.analysis.intervals import df_intervals, df_intervals_join, window_of
from abtest.analysis.pelt_sim import DECAY_PER_NS, _cpus_of, cpu_scale_spec, sample_signal

_TS_MIN = -(2**63)  # "before everything" (events in force from the start)
# prev_state bits of a task that will not run again: EXIT_DEAD 0x10, EXIT_ZOMBIE 0x20, TASK_DEAD 0x40 in the raw
# state of kernels < 4.14; 1 << state index since (X 0x20, Z 0x40; 0x10 is then ptrace-stopped "t", which is
# detached and attaches again when it runs)
_DEAD_BITS = 0x70
_BLOCK_NS = 15e9  # exp(DECAY_PER_NS * 2 * _BLOCK_NS) ~ e^620 < float64 max


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
) -> pl.DataFrame:
    """As abtest.analysis.pelt_sim.df_pelt_sim_cpu: ``cpu, ts, dur, x_util, x_runnable, util, runnable``."""
    start_ns, end_ns = window_of(sched_switch, start_ns, end_ns)
    if cpus is None:
        cpus = _cpus_of(sched_switch, platform)
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
    """As abtest.analysis.pelt_sim.df_pelt_sim_task: ``pid, ts, dur, x_util, x_runnable, util, runnable``."""
    start_ns, end_ns = window_of(sched_switch, start_ns, end_ns)
    cpus = _cpus_of(sched_switch, platform)
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
