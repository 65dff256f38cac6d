"""The compiled passes (native/sim/src/*.rs, bound in native/src/sim.rs) behind pelt_sim, window_sim, boost,
latency, tasks and placement: canonical frames -> numpy columns -> Rust -> frames. The models are those
documented in the Python modules; their readable frame implementations live under tests/oracles/, which
tests/test_sim_native.py compares these with on every shared trace.

Columns cross as contiguous numpy arrays of fixed types (ts int64, cpu / pid / prio int32, prev_state int64,
frequencies and signals float64); nulls become a sentinel (CPU; placement's pids) or 0 (prev_state, prio).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from abtest import _native

NULL_CPU = -(2**31)  # a missing CPU (null target_cpu): native/sim/src/pelt.rs NULL_CPU

__all__ = ["pelt_simulate", "pelt_contention", "window_demand", "boost_requests", "wakeup_latency"]


# prev_state of a switch whose state is unknown (native/sim/src/latency.rs STATE_UNKNOWN)
STATE_UNKNOWN = -(2**63)


def _a(df: pl.DataFrame, col: str, dtype, fill) -> np.ndarray:
    s = df.get_column(col).cast(dtype)
    if s.null_count():
        s = s.fill_null(fill)
    return np.ascontiguousarray(s.to_numpy())


def _switches(sw: pl.DataFrame) -> tuple:
    return (
        _a(sw, "ts", pl.Int64, 0),
        _a(sw, "cpu", pl.Int32, NULL_CPU),
        _a(sw, "prev_pid", pl.Int32, 0),
        _a(sw, "prev_prio", pl.Int32, 0),
        _a(sw, "prev_state", pl.Int64, 0),
        _a(sw, "next_pid", pl.Int32, 0),
        _a(sw, "next_prio", pl.Int32, 0),
    )


def _wakeups(wakeups: list[pl.DataFrame] | None) -> list[tuple]:
    out = []
    for wk in wakeups or []:
        if wk is None or wk.is_empty():
            continue
        tgt = "target_cpu" if "target_cpu" in wk.columns else "cpu"
        out.append(
            (
                _a(wk, "ts", pl.Int64, 0),
                _a(wk, "pid", pl.Int32, 0),
                _a(wk, tgt, pl.Int32, NULL_CPU),
                _a(wk, "prio", pl.Int32, 0) if "prio" in wk.columns else np.full(wk.height, 120, np.int32),
            )
        )
    return out


def _seeds(seeds: pl.DataFrame | None, key: str) -> tuple | None:
    if seeds is None or seeds.is_empty():
        return None
    run = "runnable" if "runnable" in seeds.columns else None
    return (
        _a(seeds, key, pl.Int32, -1),
        _a(seeds, "ts", pl.Int64, 0),
        _a(seeds, "util", pl.Float64, 0.0),
        _a(seeds, run, pl.Float64, 0.0) if run else np.zeros(seeds.height),
    )


_SEGMENT_COLS = ("ts", "dur", "x_util", "x_runnable", "util", "runnable")


def _frame(d: dict, key: str, key_dtype) -> pl.DataFrame:
    return pl.DataFrame({key: d[key], **{c: d[c] for c in _SEGMENT_COLS}}).with_columns(pl.col(key).cast(key_dtype))


def _frame_of_parts(parts: list[dict], key: str, key_dtype) -> pl.DataFrame:
    """One frame of the simulator's per-key parts, each a chunk of it (the arrays are not copied)."""
    if not parts:
        return _frame(
            {
                key: np.zeros(0, np.int32),
                **{c: np.zeros(0, np.int64 if c in ("ts", "dur") else np.float64) for c in _SEGMENT_COLS},
            },
            key,
            key_dtype,
        )
    return pl.concat([_frame(p, key, key_dtype) for p in parts], rechunk=False)


def pelt_simulate(
    sched_switch: pl.DataFrame,
    *,
    spec: pl.DataFrame,
    start_ns: int,
    end_ns: int,
    cpu_frequency: pl.DataFrame | None = None,
    wakeups: list[pl.DataFrame] | None = None,
    sched_migrate_task: pl.DataFrame | None = None,
    cpu_seeds: pl.DataFrame | None = None,
    task_seeds: pl.DataFrame | None = None,
    new_pids: list[int] | None = None,
    want_cpus: bool = True,
    attach: bool = True,
    want_tasks: list[int] | bool = False,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The PELT simulation of pelt_sim (df_pelt_sim_cpu / df_pelt_sim_task), compiled.

    spec: pelt_sim.cpu_scale_spec (the simulated CPUs). cpu_seeds ``cpu, ts, util[, runnable]``, task_seeds
    ``pid, ts, util[, runnable]``. want_tasks: False (no task output), True (every task) or pids.
    Returns (cpu segments ``cpu, ts, dur, x_util, x_runnable, util, runnable``, task segments ``pid, ...``),
    sorted by key then ts.
    """
    c, t, _ = _pelt(
        sched_switch,
        spec=spec,
        start_ns=start_ns,
        end_ns=end_ns,
        cpu_frequency=cpu_frequency,
        wakeups=wakeups,
        sched_migrate_task=sched_migrate_task,
        cpu_seeds=cpu_seeds,
        task_seeds=task_seeds,
        new_pids=new_pids,
        want_cpus=want_cpus,
        attach=attach,
        want_tasks=want_tasks,
        margin=None,
    )
    out = _frame_of_parts(c, "cpu", pl.Int32), _frame(t, "pid", pl.Int64)
    return out


def pelt_contention(
    sched_switch: pl.DataFrame, *, margin: float, aggregate_from_ns: int | None = None, **kw
) -> pl.DataFrame:
    """Per-CPU contention of the simulated signals (pelt_sim.df_cpu_contention), aggregated while simulating:
    no segment is kept. ``aggregate_from_ns``: only the time from then on counts (the signals simulated from
    start_ns to warm up). Other arguments as pelt_simulate."""
    _, _, a = _pelt(
        sched_switch, margin=float(margin), want_cpus=True, want_tasks=False, aggregate_from_ns=aggregate_from_ns, **kw
    )
    known = pl.col("known_ns").cast(pl.Float64)
    return (
        pl.DataFrame(a)
        .select(
            pl.col("cpu").cast(pl.Int32),
            "known_ns",
            "contended_ns",
            (100.0 * pl.col("contended_ns") / pl.col("known_ns")).alias("contended_pct"),
            (pl.col("util_ns") / known).alias("mean_util"),
            (pl.col("runnable_ns") / known).alias("mean_runnable"),
            # NaN when util never reaches 1 (0 / 0, as the frame version)
            (pl.col("ratio_ns") / pl.col("ratio_weight_ns").cast(pl.Float64)).alias("runnable_util_ratio"),
            "max_runnable",
        )
        .filter(pl.col("known_ns") > 0)
    )


def _pelt(
    sched_switch: pl.DataFrame,
    *,
    spec: pl.DataFrame,
    start_ns: int,
    end_ns: int,
    cpu_frequency: pl.DataFrame | None = None,
    wakeups: list[pl.DataFrame] | None = None,
    sched_migrate_task: pl.DataFrame | None = None,
    cpu_seeds: pl.DataFrame | None = None,
    task_seeds: pl.DataFrame | None = None,
    new_pids: list[int] | None = None,
    want_cpus: bool = True,
    attach: bool = True,
    want_tasks: list[int] | bool = False,
    margin: float | None = None,
    aggregate_from_ns: int | None = None,
) -> tuple[list[dict], dict, dict]:
    mig = None
    if sched_migrate_task is not None and not sched_migrate_task.is_empty():
        mig = (
            _a(sched_migrate_task, "ts", pl.Int64, 0),
            _a(sched_migrate_task, "pid", pl.Int32, 0),
            _a(sched_migrate_task, "dest_cpu", pl.Int32, NULL_CPU),
        )
    freq = None
    if cpu_frequency is not None and not cpu_frequency.is_empty():
        freq = (
            _a(cpu_frequency, "ts", pl.Int64, 0),
            _a(cpu_frequency, "cpu", pl.Int32, NULL_CPU),
            _a(cpu_frequency, "frequency_khz", pl.Float64, float("nan")),
        )
    cpus = (
        _a(spec, "cpu", pl.Int32, NULL_CPU),
        _a(spec, "capacity", pl.Float64, 1024.0),
        _a(spec, "fmax_khz", pl.Float64, float("nan")),
        _a(spec, "fill_khz", pl.Float64, float("nan")),
    )
    if want_tasks is False:
        tasks = None
    elif want_tasks is True:
        tasks = np.zeros(0, np.int32)
    else:
        tasks = np.asarray(sorted(set(int(p) for p in want_tasks)) or [-1], np.int32)
    return _native.pelt_simulate(
        _switches(sched_switch),
        _wakeups(wakeups),
        mig,
        freq,
        cpus,
        _seeds(cpu_seeds, "cpu"),
        _seeds(task_seeds, "pid"),
        np.asarray(list(new_pids or []), np.int32),
        int(start_ns),
        int(end_ns),
        bool(want_cpus),
        bool(attach),
        tasks,
        margin,
        None if aggregate_from_ns is None else int(aggregate_from_ns),
    )


def window_demand(
    sched_switch: pl.DataFrame,
    *,
    spec: pl.DataFrame,
    start_ns: int,
    end_ns: int,
    cpu_frequency: pl.DataFrame | None,
    window_ns: int,
    n_windows: int,
    pids: list[int] | None,
) -> pl.DataFrame:
    """window_sim.df_window_demand, compiled: ``pid, window, window_start_ns, window_end_ns, running_ns,
    window_load, demand`` (spec: pelt_sim.cpu_scale_spec)."""
    sw = (
        _a(sched_switch, "ts", pl.Int64, 0),
        _a(sched_switch, "cpu", pl.Int32, NULL_CPU),
        _a(sched_switch, "prev_pid", pl.Int32, 0),
        _a(sched_switch, "next_pid", pl.Int32, 0),
    )
    if cpu_frequency is not None and not cpu_frequency.is_empty():
        freq = (
            _a(cpu_frequency, "ts", pl.Int64, 0),
            _a(cpu_frequency, "cpu", pl.Int32, NULL_CPU),
            _a(cpu_frequency, "frequency_khz", pl.Float64, float("nan")),
        )
    else:
        freq = (np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.float64))
    cpus = (
        _a(spec, "cpu", pl.Int32, NULL_CPU),
        _a(spec, "capacity", pl.Float64, 1024.0),
        _a(spec, "fmax_khz", pl.Float64, float("nan")),
        _a(spec, "fill_khz", pl.Float64, float("nan")),
    )
    sel = None if pids is None else np.asarray(sorted(set(int(p) for p in pids)) or [-1], np.int32)
    d = _native.window_demand(sw, freq, cpus, int(start_ns), int(end_ns), int(window_ns), int(n_windows), sel)
    w = pl.col("window") * window_ns + start_ns
    return pl.DataFrame(d).select(
        pl.col("pid").cast(pl.Int64),
        "window",
        w.alias("window_start_ns"),
        pl.min_horizontal(w + window_ns, pl.lit(end_ns)).alias("window_end_ns"),
        "running_ns",
        "window_load",
        "demand",
    )


def boost_requests(
    signals: pl.DataFrame, *, cpus: pl.DataFrame, opps: pl.DataFrame, headroom: float, start_ns: int, end_ns: int
) -> pl.DataFrame:
    """boost.df_boost_requests, compiled: ``domain, ts, dur, util_request_khz, boost_request_khz, util_khz,
    boost_khz`` (cpus: cpu, domain, capacity; opps: domain, opp_khz)."""
    nan = float("nan")
    sig = (
        _a(signals, "cpu", pl.Int32, NULL_CPU),
        _a(signals, "ts", pl.Int64, 0),
        _a(signals, "util", pl.Float64, nan),
        _a(signals, "runnable", pl.Float64, nan),
    )
    plat = (
        _a(cpus, "cpu", pl.Int32, NULL_CPU),
        _a(cpus, "domain", pl.Int32, NULL_CPU),
        _a(cpus, "capacity", pl.Float64, 1024.0),
    )
    op = (_a(opps, "domain", pl.Int32, NULL_CPU), _a(opps, "opp_khz", pl.Int64, 0))
    d = _native.boost_requests(sig, plat, op, float(headroom), int(start_ns), int(end_ns))
    unknown = np.iinfo(np.int64).min
    return pl.DataFrame(d).with_columns(
        pl.col("domain").cast(pl.Int32),
        pl.col("util_request_khz", "boost_request_khz").fill_nan(None),
        *[pl.when(pl.col(c) != unknown).then(pl.col(c)).alias(c) for c in ("util_khz", "boost_khz")],
    )


def _switches_with_state(sched_switch: pl.DataFrame) -> tuple:
    """(ts, cpu, prev_pid, next_pid, prev_state) arrays for the latency matchers; unknown prev_state ->
    STATE_UNKNOWN."""
    state = (
        _a(sched_switch, "prev_state", pl.Int64, STATE_UNKNOWN)
        if "prev_state" in sched_switch.columns
        else np.full(sched_switch.height, STATE_UNKNOWN, dtype=np.int64)
    )
    return (
        _a(sched_switch, "ts", pl.Int64, 0),
        _a(sched_switch, "cpu", pl.Int32, NULL_CPU),
        _a(sched_switch, "prev_pid", pl.Int32, 0),
        _a(sched_switch, "next_pid", pl.Int32, 0),
        state,
    )


def _row_slices(df: pl.DataFrame, columns: tuple[str, ...]) -> list[pl.DataFrame]:
    """``columns`` of ``df`` as consecutive row slices, one per chunk when they are chunked alike (a
    concatenation of tables, e.g. sched_wakeup + sched_wakeup_new: each slice's columns reach numpy without
    a copy), else the whole frame."""
    sel = df.select(columns)
    lengths = [sel.get_column(c).chunk_lengths() for c in columns]
    if any(ls != lengths[0] for ls in lengths[1:]) or len(lengths[0]) <= 1:
        return [sel]
    offsets = np.cumsum([0] + lengths[0][:-1])
    return [sel.slice(int(o), n) for o, n in zip(offsets, lengths[0])]


def preemption_latency(sched_switch: pl.DataFrame, *, start_ns: int | None, end_ns: int | None) -> pl.DataFrame:
    """latency.df_preemption_latency's matching, compiled: same columns, sorted by preempt_ts."""
    lo = -(2**63) if start_ns is None else int(start_ns)
    hi = 2**63 - 1 if end_ns is None else int(end_ns)
    m = _native.preemption_latency(_switches_with_state(sched_switch), lo, hi)  # by preempt_ts, then row
    hit = sched_switch.select("prev_pid", "prev_comm", "ts", "cpu")[pl.Series(m["row"], dtype=pl.UInt32)]
    switch_in = pl.Series("switch_in_ts", m["switch_in_ts"])
    return hit.select(
        pl.col("prev_pid").cast(pl.Int32).alias("pid"),
        pl.col("prev_comm").cast(pl.Categorical).alias("comm"),
        pl.col("ts").cast(pl.Int64).alias("preempt_ts"),
        switch_in,
        pl.col("cpu").cast(pl.Int32).alias("from_cpu"),
        pl.Series("cpu", m["cpu"]),
        (switch_in - pl.col("ts").cast(pl.Int64)).alias("latency_ns"),
    ).with_columns((pl.col("latency_ns") / 1e3).alias("latency_us"))


def wakeup_latency(
    wakeups: pl.DataFrame,
    sched_switch: pl.DataFrame,
    *,
    start_ns: int | None,
    end_ns: int | None,
    while_on_cpu: bool,
    columns: list[str] | None = None,
) -> pl.DataFrame:
    """latency.df_wakeup_latency's matching, compiled (sorted by wakeup_ts, ties in the matcher's order). ``wakeups``:
    ts, pid, comm, target_cpu, kind, every
    wakeup of the trace with pid != 0 (those in ``[start_ns, end_ns)`` are matched, the others can only end a
    while-on-CPU candidate). Same columns as df_wakeup_latency (or ``columns`` of them), sorted by wakeup_ts."""
    sw = _switches_with_state(sched_switch)
    parts = _row_slices(wakeups, ("ts", "pid"))
    wk = [(_a(p, "ts", pl.Int64, 0), _a(p, "pid", pl.Int32, 0)) for p in parts]
    lo = -(2**63) if start_ns is None else int(start_ns)
    hi = 2**63 - 1 if end_ns is None else int(end_ns)
    m = _native.wakeup_latency(sw, wk, lo, hi, bool(while_on_cpu))  # by wakeup ts (stable)
    del sw, wk
    # the matched rows of `wakeups` (a part's row + the rows of the parts before it)
    first = np.cumsum([0] + [p.height for p in parts[:-1]]).astype(np.uint32)
    rows = pl.Series(first[m.pop("table")] + m.pop("row"), dtype=pl.UInt32)
    # lazily: only the columns asked for are gathered from the wakeups
    switch_in = pl.lit(pl.Series("switch_in_ts", m["switch_in_ts"]))
    out = (
        wakeups.lazy()
        .select(pl.col("pid", "comm", "kind", "ts", "target_cpu").gather(rows))
        .select(
            "pid",
            "comm",
            "kind",
            pl.col("ts").alias("wakeup_ts"),
            switch_in,
            pl.lit(pl.Series("cpu", m["cpu"])),
            "target_cpu",
            pl.lit(pl.Series("while_on_cpu", m["while_on_cpu"])),
            (switch_in - pl.col("ts")).alias("latency_ns"),
        )
        .with_columns((pl.col("latency_ns") / 1e3).alias("latency_us"))
    )
    return out.select(columns or out.collect_schema().names()).collect()


# no CPU / no name in the task-state matcher's output (native/sim/src/tasks.rs NO_CPU, NO_COMM)
NO_CPU = -(2**31)
NO_COMM = 2**32 - 1


def _codes(s: pl.Series) -> np.ndarray:
    """Name codes of a categorical column (equal names, equal codes); NO_COMM for null."""
    return np.ascontiguousarray(s.cast(pl.Categorical).to_physical().cast(pl.UInt32).fill_null(NO_COMM).to_numpy())


def _task_inputs(
    sw: pl.DataFrame,
    out_state: pl.Series,
    wakeups: pl.DataFrame | None,
    states: tuple[str, ...],
    wakeable: tuple[str, ...],
) -> tuple[tuple, tuple, tuple, pl.Series]:
    """The compiled task-state pass' arguments (switches, wakeups, states) and the names its ``*_src``
    indices point into (Categorical: prev_comm rows, next_comm rows, wakeup rows)."""
    code = {s: i for i, s in enumerate(states)}
    out_codes = np.ascontiguousarray(
        out_state.cast(pl.Enum(states)).to_physical().cast(pl.Int8).fill_null(-1).to_numpy()
    )
    wk = (
        wakeups
        if wakeups is not None
        else pl.DataFrame(
            {"ts": [], "pid": [], "comm": []}, schema={"ts": pl.Int64, "pid": pl.Int32, "comm": pl.Categorical}
        )
    )
    switches = (
        _a(sw, "ts", pl.Int64, 0),
        _a(sw, "cpu", pl.Int32, NO_CPU),
        _a(sw, "prev_pid", pl.Int32, 0),
        _a(sw, "next_pid", pl.Int32, 0),
        out_codes,
        _codes(sw["prev_comm"]),
        _codes(sw["next_comm"]),
    )
    wks = (_a(wk, "ts", pl.Int64, 0), _a(wk, "pid", pl.Int32, 0), _codes(wk["comm"]))
    can_wake = np.array([s in wakeable for s in states], dtype=bool)
    names = pl.concat(
        [sw["prev_comm"].cast(pl.Categorical), sw["next_comm"].cast(pl.Categorical), wk["comm"].cast(pl.Categorical)]
    )
    return switches, wks, (code["running"], code["runnable"], can_wake), names


def _names_of(names: pl.Series, src: np.ndarray) -> pl.Series:
    """The names of ``*_src`` indices (NO_COMM: null)."""
    s = pl.Series(src)
    return names.gather(pl.select(pl.when(s != NO_COMM).then(s)).to_series())


def _states_of(states: tuple[str, ...], codes: np.ndarray) -> pl.Series:
    """State codes (-1: null) as an Enum of ``states``."""
    c = pl.Series(codes)
    return pl.Series(states, dtype=pl.Enum(states)).gather(pl.select(pl.when(c >= 0).then(c)).to_series())


def _cpus_of(cpus: np.ndarray) -> pl.Series:
    c = pl.Series(cpus)
    return pl.select(pl.when(c != NO_CPU).then(c)).to_series().cast(pl.Int32)


def task_state_intervals(
    sw: pl.DataFrame,
    out_state: pl.Series,
    wakeups: pl.DataFrame | None,
    *,
    states: tuple[str, ...],
    wakeable: tuple[str, ...],
    start_ns: int,
    end_ns: int,
) -> pl.DataFrame:
    """tasks.df_task_state_intervals, compiled. ``sw``: ts, cpu, prev_pid, next_pid, prev_comm, next_comm (whole
    sched_switch); ``out_state``: per row the state its switch-out leaves (an Enum of ``states``; null: exited);
    ``wakeups``: ts, pid, comm. Returns pid, ts, dur, state (Enum of ``states``), cpu (Int32), comm (Categorical),
    by pid then ts."""
    switches, wks, st, names = _task_inputs(sw, out_state, wakeups, states, wakeable)
    d = _native.task_state_intervals(switches, wks, st, int(start_ns), int(end_ns))
    del switches, wks
    return pl.DataFrame(
        {
            "pid": pl.Series(d.pop("pid"), dtype=pl.Int32),
            "ts": pl.Series(d.pop("ts"), dtype=pl.Int64),
            "dur": pl.Series(d.pop("dur"), dtype=pl.Int64),
            "state": _states_of(states, d.pop("state")),
            "cpu": _cpus_of(d.pop("cpu")),
            "comm": _names_of(names, d.pop("comm_src")),
        }
    )


def task_state_aggregates(
    sw: pl.DataFrame,
    out_state: pl.Series,
    wakeups: pl.DataFrame | None,
    *,
    states: tuple[str, ...],
    wakeable: tuple[str, ...],
    start_ns: int,
    end_ns: int,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """tasks.df_task_state_aggregates, compiled: the intervals of task_state_intervals folded as they are made
    (none is kept). Returns (times ``comm, state, dur`` per name and known state; runs ``comm, cpu, dur``;
    threads ``comm, pid`` per thread and name)."""
    switches, wks, st, names = _task_inputs(sw, out_state, wakeups, states, wakeable)
    a = _native.task_state_intervals(switches, wks, st, int(start_ns), int(end_ns), aggregate=True)
    del switches, wks
    # each array let go once its column is made (the runs: one per switch-in)
    times = pl.DataFrame(
        {
            "comm": _names_of(names, a.pop("time_src")),
            "state": _states_of(states, a.pop("time_state")),
            "dur": pl.Series(a.pop("time_ns"), dtype=pl.Int64),
        }
    )
    runs = pl.DataFrame(
        {
            "comm": _names_of(names, a.pop("run_src")),
            "cpu": _cpus_of(a.pop("run_cpu")),
            "dur": pl.Series(a.pop("run_dur"), dtype=pl.Int64),
        }
    )
    threads = pl.DataFrame(
        {"comm": _names_of(names, a.pop("thread_src")), "pid": pl.Series(a.pop("thread_pid"), dtype=pl.Int32)}
    )
    return times, runs, threads


# a task or name a switch does not give (a null pid; perfetto's compact sched format does not know the task a CPU ran
# before its first recorded switch): its runs are made, so that they end those before them, then left out
_NO_PID = -(2**31)
_NO_PID_COMM = NO_COMM - 1


def _placement_inputs(sched_switch: pl.DataFrame) -> tuple[tuple, pl.Series, np.ndarray | None]:
    """The compiled placement passes' switches (ts, cpu, prev_pid, next_pid, prev_comm codes, next_comm
    codes; time order, stable), the names their ``*_src`` indices point into ([next_comm rows..., prev_comm
    rows...], Categorical), and which of those indices stand for a null pid (None: no null pid). Switches
    without a time or a CPU are not placed; a null pid becomes _NO_PID with the name code _NO_PID_COMM (its
    runs are then dropped); a null name stays null."""
    sw = sched_switch
    if sw.get_column("ts").null_count() or sw.get_column("cpu").null_count():
        sw = sw.filter(pl.col("ts").is_not_null() & pl.col("cpu").is_not_null())
    if not sw["ts"].is_sorted():
        sw = sw.sort("ts", maintain_order=True)
    prev_comm, next_comm = _codes(sw["prev_comm"]), _codes(sw["next_comm"])
    no_pid = None
    if sw["prev_pid"].null_count() or sw["next_pid"].null_count():
        no_next, no_prev = sw["next_pid"].is_null().to_numpy(), sw["prev_pid"].is_null().to_numpy()
        next_comm = np.where(no_next, np.uint32(_NO_PID_COMM), next_comm)
        prev_comm = np.where(no_prev, np.uint32(_NO_PID_COMM), prev_comm)
        no_pid = np.concatenate([no_next, no_prev])
    switches = (
        _a(sw, "ts", pl.Int64, 0),
        _a(sw, "cpu", pl.Int32, 0),
        _a(sw, "prev_pid", pl.Int32, _NO_PID),
        _a(sw, "next_pid", pl.Int32, _NO_PID),
        np.ascontiguousarray(prev_comm, dtype=np.uint32),
        np.ascontiguousarray(next_comm, dtype=np.uint32),
    )
    names = pl.concat([sw["next_comm"].cast(pl.Categorical), sw["prev_comm"].cast(pl.Categorical)])
    return switches, names, no_pid


def placement_runs(sched_switch: pl.DataFrame, *, start_ns: int, end_ns: int, include_idle: bool) -> pl.DataFrame:
    """placement.df_task_intervals, compiled (native/sim/src/placement.rs): cpu (Int32), ts, dur (ns), pid
    (Int32), comm (Categorical), by CPU then start."""
    switches, names, no_pid = _placement_inputs(sched_switch)
    r = _native.placement_runs(switches, int(start_ns), int(end_ns), bool(include_idle))
    del switches
    runs = pl.DataFrame(
        {"cpu": r["cpu"], "ts": r["ts"], "dur": r["dur"], "pid": r["pid"], "comm": _names_of(names, r["comm_src"])}
    )
    return runs if no_pid is None else runs.filter(pl.col("pid") != _NO_PID)


def placement_fold(sched_switch: pl.DataFrame, *, start_ns: int, end_ns: int, from_ns: int) -> dict[str, pl.DataFrame]:
    """The runs of placement_runs over [start_ns, end_ns) (idle left out) folded from ``from_ns`` on, without
    making them (native/sim/src/placement.rs fold): ``residency`` pid, cpu, time_ns (run time from from_ns);
    ``tasks`` pid, comm (name of its latest run), cpus_used, cpu_changes (consecutive runs on other CPUs, the
    later one from from_ns); ``names`` comm, run_ns, runs (runs starting from from_ns), for the tasks and
    names that ran after from_ns (the runs of a null pid left out: see _placement_inputs)."""
    switches, names, no_pid = _placement_inputs(sched_switch)
    f = _native.placement_fold(switches, int(start_ns), int(end_ns), int(from_ns))
    del switches
    out = {
        "residency": pl.DataFrame({"pid": f["res_pid"], "cpu": f["res_cpu"], "time_ns": f["res_ns"]}),
        "tasks": pl.DataFrame(
            {
                "pid": f["task_pid"],
                "comm": _names_of(names, f["task_comm_src"]),
                "cpus_used": f["task_cpus"],
                "cpu_changes": f["task_changes"],
            }
        ),
        "names": pl.DataFrame(
            {"comm": _names_of(names, f["name_src"]), "run_ns": f["name_ns"], "runs": f["name_runs"]}
        ),
    }
    if no_pid is not None:  # the task _NO_PID, and the name _NO_PID_COMM (its runs' only name: one of their rows)
        out["residency"] = out["residency"].filter(pl.col("pid") != _NO_PID)
        out["tasks"] = out["tasks"].filter(pl.col("pid") != _NO_PID)
        out["names"] = out["names"].filter(~pl.Series(no_pid[f["name_src"]]))
    return out


def group_stats(df: pl.DataFrame, by: str | None, value: str, quantiles: tuple[float, ...]) -> dict | None:
    """Statistics of the Float64 column ``value`` per value of ``by`` (a Categorical or Enum column; None:
    all rows as one group), compiled (native/sim/src/stats.rs: one copy of the values; counts, linear
    quantiles and maxima equal a polars group_by's, means and geometric means to ~1e-15). Returns {"key": the
    key of each group (a Series of ``by``'s dtype; null is a group) or None, "count", "mean", "quantiles": [one
    Series per q], "max", "sum", "gmean" (null: no positive value)} as Series, groups in code order; None when
    the columns are of other kinds, have nulls or NaN values, or the frame is empty (the caller groups with
    polars)."""
    v = df.get_column(value)
    if df.height == 0 or v.dtype != pl.Float64 or v.null_count() or v.is_nan().any():
        return None
    if by is None:
        key, codes, n = None, np.zeros(df.height, dtype=np.uint32), 1
    else:
        key = df.get_column(by)
        if not isinstance(key.dtype, (pl.Categorical, pl.Enum)):
            return None
        phys = key.to_physical().cast(pl.UInt32)
        n = int(phys.max() or 0) + 2  # the last code: null
        codes = np.ascontiguousarray((phys.fill_null(n - 1) if phys.null_count() else phys).to_numpy())
    r = _native.group_stats(np.ascontiguousarray(v.to_numpy()), codes, n, [float(q) for q in quantiles])
    return {
        "key": None if key is None else key.gather(pl.Series(r["first_row"], dtype=pl.UInt32)),
        "count": pl.Series(r["count"], dtype=pl.UInt32),
        "mean": pl.Series(r["mean"]),
        "quantiles": [pl.Series(q) for q in r["quantiles"]],
        "max": pl.Series(r["max"]),
        "sum": pl.Series(r["sum"]),
        "gmean": pl.Series(r["gmean"]).fill_nan(None),
    }
