"""abtest's derived signals of one trace as timeline tracks (abtest.timeline.tracks), each read from the
analysis that defines it (nothing is recomputed here: the values are those of abtest's own tables).

Every builder takes a ``Trace`` and a ``Tracks`` collector (the parent group and the ts shift to apply) and
adds tracks + events; a builder whose inputs the trace lacks adds nothing and says why in ``Tracks.notes``.

Tracks (names as the Perfetto UI shows them; per CPU under "CPU n", per domain, per task, per channel):
  CPU n util (<source>) / runnable (<source>)  PELT units (0..1024 x capacity), load_tracking.df_cpu_signals:
                        the kernel's samples when recorded, else abtest's simulation; written at tracks.quantized's
                        resolution (whole units up to 1024, 10 significant bits above: a runqueue with 80 runnable
                        tasks reads 81920 +- 32), a sample only when that value changes
  CPU n idle misses     instants "too deep" / "too shallow" at the wakeup, args state, sleep_us, source
                        (cpu_idle_miss events, or derived from the platform's target residencies)
  CPU n wakeups > p99   slices from the wakeup to the switch-in of a wakeup slower than its task's p99 latency,
                        named by task, args pid, latency_us, p99_us (lanes: "> p99 #k" when they overlap)
  CPU n power (EM)      mW, the energy model's price of the CPU's state (busy at its OPP / idle state)
  domain d boost what-if  kHz: schedutil's request from util and from max(util, runnable) (boost.df_boost_requests)
  task <comm> [pid] util / window demand  top tasks by CPU time: PELT util (load_tracking.df_task_signals) and
                        WALT-style window demand (window_sim, at each window rollover)
  overutilized <rd>     slices while the root domain is overutilized (overutilized.df_overutilized_intervals)
  power <channel> / rail <rail>  mW, piecewise-constant power between rail samples (power.df_rail_power_intervals),
                        a channel = the sum of its rails (power.rail_mapping, the source named)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from abtest.analysis import power as power_mod
from abtest.analysis import power_source
from abtest.analysis.intervals import window_of
from abtest.timeline.tracks import (
    EVENT_SCHEMA,
    Track,
    annotations,
    counter_events,
    instant_events,
    quantized,
    slice_events,
    thinned,
    track_uuid,
)
from abtest.trace.errors import MissingEventsError

DEFAULT_TOP_TASKS = 8
MAX_OUTLIER_LANES = 8
MIN_TASK_WAKEUPS = 20  # a task's p99 from fewer wakeups says little


@dataclass
class Tracks:
    """What the builders add to: tracks, events (EVENT_SCHEMA frames), notes (why a builder added nothing).
    ``scope``: names the uuids (the same names in another scope give other tracks: A and B side by side);
    ``shift_ns``: added to every timestamp (A vs B alignment); ``root``: the group everything nests under;
    ``prefix``: put before every track name (a label: A's and B's tracks stay apart in a query too)."""

    scope: str
    root: int
    shift_ns: int = 0
    prefix: str = ""
    tracks: list[Track] = field(default_factory=list)
    events: list[pl.DataFrame] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    _groups: dict[tuple, int] = field(default_factory=dict)

    def uuid(self, *path: object) -> int:
        return track_uuid(self.scope, *path)

    def group(
        self, *path: str, name: str | None = None, parent: int | None = None, rank: int = 0, description: str = ""
    ) -> int:
        """The uuid of a group track (created once)."""
        if path not in self._groups:
            u = self.uuid("group", *path)
            self.tracks.append(
                Track(
                    u,
                    self.prefix + (name or path[-1]),
                    "group",
                    parent if parent is not None else self.root,
                    description=description,
                    rank=rank,
                )
            )
            self._groups[path] = u
        return self._groups[path]

    def counter(
        self,
        parent: int,
        name: str,
        ts,
        values,
        *,
        unit: str,
        description: str,
        rank: int = 0,
        share_axis: str | None = None,
    ) -> int:
        u = self.uuid("counter", parent, name)
        self.tracks.append(Track(u, self.prefix + name, "counter", parent, unit, description, rank, share_axis))
        self.events.append(counter_events(u, pl.Series(ts).cast(pl.Int64) + self.shift_ns, values))
        return u

    def slices(self, parent: int, name: str, ts, dur, names, args=None, *, description: str, rank: int = 0) -> int:
        u = self.uuid("slice", parent, name)
        self.tracks.append(Track(u, self.prefix + name, "slice", parent, None, description, rank))
        self.events.append(slice_events(u, pl.Series(ts).cast(pl.Int64) + self.shift_ns, pl.Series(dur), names, args))
        return u

    def instants(self, parent: int, name: str, ts, names, args=None, *, description: str, rank: int = 0) -> int:
        u = self.uuid("slice", parent, name)
        self.tracks.append(Track(u, self.prefix + name, "slice", parent, None, description, rank))
        self.events.append(instant_events(u, pl.Series(ts).cast(pl.Int64) + self.shift_ns, names, args))
        return u

    def frame(self) -> pl.DataFrame:
        return pl.concat(self.events, how="vertical_relaxed") if self.events else pl.DataFrame(schema=EVENT_SCHEMA)

    def cpu_group(self, cpu: int) -> int:
        return self.group("cpu", str(cpu), name=f"CPU {cpu}", rank=cpu)


def _steps(df: pl.DataFrame, key: str, value: str, *, decimals: int | None = None) -> pl.DataFrame:
    """``key, ts, value`` samples of a step signal at the written resolution and thinned: null values
    dropped, a sample kept only when it differs from the key's previous one. Resolution: ``decimals`` when
    given, else tracks.quantized (whole units below 1024, 10 significant bits above)."""
    v = pl.col(value).cast(pl.Float64)
    d = df.select(
        key, pl.col("ts").cast(pl.Int64), (v.round(decimals) if decimals is not None else quantized(v)).alias(value)
    )
    d = d.filter(pl.col(value).is_not_null() & pl.col(value).is_not_nan()).sort(key, "ts", maintain_order=True)
    return thinned(d, key, value)


# -- builders ----------------------------------------------------------------------------------------------
def add_pelt(trace, out: Tracks, lt=None) -> None:
    """CPU n util / runnable (load_tracking.df_cpu_signals("auto")), whole PELT units, thinned. ``lt``: the
    trace's LoadTrackingAnalysis to share (it computes the signals once for every builder)."""
    try:
        sig = (lt or trace.load_tracking).df_cpu_signals("auto")
    except (MissingEventsError, ValueError) as e:
        out.notes.append(f"PELT signals: {e}")
        return
    for col in ("util", "runnable"):
        src_col = f"{col}_source"
        steps = _steps(sig.select("cpu", "ts", col), "cpu", col)
        sources = sig.select("cpu", src_col).unique("cpu")
        for (cpu,), part in steps.partition_by("cpu", as_dict=True, maintain_order=True).items():
            src = sources.filter(pl.col("cpu") == cpu)[src_col].to_list()
            src = src[0] if src and src[0] else "unknown"
            out.counter(
                out.cpu_group(int(cpu)),
                f"CPU {cpu} {col} ({src})",
                part["ts"],
                part[col],
                unit="util",
                share_axis=f"pelt{cpu}",
                rank=1 if col == "util" else 2,
                description=f"{col}_avg of CPU {cpu}'s root CFS runqueue, PELT units ({src}; "
                "abtest.analysis.load_tracking.df_cpu_signals), whole units, written on change",
            )


def _top_pids(trace, n: int) -> pl.DataFrame:
    """``pid, comm, running_ns``: the n tasks (pid > 0) with the most CPU time."""
    from abtest.analysis.placement import df_task_intervals

    iv = df_task_intervals(trace.df("sched_switch", windowed=False), start_ns=trace.start_ns, end_ns=trace.end_ns)
    return (
        iv.filter(pl.col("pid") > 0)
        .group_by("pid")
        .agg(pl.col("comm").cast(pl.Utf8).last(), pl.col("dur").sum().alias("running_ns"))
        .sort("running_ns", "pid", descending=[True, False])
        .head(n)
    )


def add_tasks(trace, out: Tracks, top: int = DEFAULT_TOP_TASKS, lt=None) -> None:
    """task <comm> [pid] util / window demand for the ``top`` tasks by CPU time."""
    if top <= 0 or "sched_switch" not in trace.tables:
        return
    tops = _top_pids(trace, top)
    if tops.is_empty():
        return
    pids = tops["pid"].to_list()
    grp = out.group("tasks", name=f"Tasks (top {len(pids)} by CPU time)", rank=1000)
    lt = lt or trace.load_tracking
    util = _steps(lt.df_task_signals("auto", pids=pids).select("pid", "ts", "util"), "pid", "util")
    src = "kernel" if trace.has_events("sched_pelt_se") else "simulated"
    demand = lt.df_window_demand(pids=pids).select("pid", pl.col("window_end_ns").alias("ts"), "demand")
    demand = _steps(demand, "pid", "demand")
    for rank, (pid, comm, _) in enumerate(tops.iter_rows()):
        tg = out.group("tasks", str(pid), name=f"{comm} [{pid}]", parent=grp, rank=rank)
        u = util.filter(pl.col("pid") == pid)
        if u.height:
            out.counter(
                tg,
                f"task {comm} [{pid}] util ({src})",
                u["ts"],
                u["util"],
                unit="util",
                rank=1,
                share_axis=f"task{pid}",
                description="task PELT util_avg (load_tracking.df_task_signals)",
            )
        d = demand.filter(pl.col("pid") == pid)
        if d.height:
            out.counter(
                tg,
                f"task {comm} [{pid}] window demand",
                d["ts"],
                d["demand"],
                unit="util",
                rank=2,
                share_axis=f"task{pid}",
                description="WALT-style window demand, 20 ms windows, max(mean of 5, last) "
                "(abtest.analysis.window_sim), from each rollover",
            )


def add_boost(trace, out: Tracks, lt=None) -> None:
    """domain d boost what-if: requested kHz from util and from max(util, runnable)."""
    from abtest.analysis.platform import trace_platform

    if not trace_platform(trace):
        out.notes.append("boost what-if: needs a platform (capacities, OPPs): --platform FILE")
        return
    try:
        req = (lt or trace.load_tracking).df_boost().requests
    except (MissingEventsError, ValueError) as e:
        out.notes.append(f"boost what-if: {e}")
        return
    grp = out.group("boost", name="Boost what-if (schedutil request)", rank=900)
    for col, label in (("util_khz", "util"), ("boost_khz", "max(util, runnable)")):
        steps = _steps(req.select("domain", "ts", col), "domain", col)
        for (dom,), part in steps.partition_by("domain", as_dict=True, maintain_order=True).items():
            out.counter(
                grp,
                f"domain {dom} freq request: {label}",
                part["ts"],
                part[col],
                unit="kHz",
                share_axis=f"boost{dom}",
                rank=int(dom) * 2 + (col == "boost_khz"),
                description="schedutil's 1.25 x signal / capacity x f_max, clamped to an OPP, highest CPU of "
                "the domain (abtest.analysis.boost.df_boost_requests)",
            )


def _miss_events(trace) -> tuple[pl.DataFrame, str] | None:
    idle = trace.idle
    src = idle.miss_source()
    if src is None or "cpu_idle" not in trace.tables:
        return None
    if src == "cpu_idle_miss":
        ev = trace.df("cpu_idle_miss")
    else:
        from abtest.analysis.idle import df_derived_miss_events

        ev = df_derived_miss_events(idle.df_intervals(), idle.idle_states())
    return ev.select(
        pl.col("cpu").cast(pl.Int32),
        pl.col("ts").cast(pl.Int64),
        pl.col("state").cast(pl.Int64),
        pl.col("type").cast(pl.Utf8),
    ), src


def add_idle_misses(trace, out: Tracks) -> None:
    """CPU n idle misses: instants at the wakeup, with the state and the sleep length of the idle period."""
    try:
        got = _miss_events(trace)
    except (MissingEventsError, ValueError) as e:
        out.notes.append(f"idle misses: {e}")
        return
    if got is None:
        out.notes.append("idle misses: no cpu_idle_miss events and no platform target residencies")
        return
    ev, src = got
    lo, hi = trace.start_ns, trace.end_ns
    ev = ev.filter((pl.col("ts") >= lo) & (pl.col("ts") < hi)).sort("cpu", "ts")
    # the sleep: the last idle period that started at or before the miss (the event fires at the wakeup,
    # just before or just after the cpu_idle exit: either way the CPU has not gone idle again since)
    iv = (
        trace.idle.df_intervals()
        .filter(pl.col("idle"))
        .select(pl.col("cpu").cast(pl.Int32), pl.col("ts").alias("idle_ts"), pl.col("dur").alias("sleep_ns"))
        .sort("cpu", "idle_ts")
    )
    ev = ev.join_asof(iv, left_on="ts", right_on="idle_ts", by="cpu", strategy="backward", check_sortedness=False)
    names = {"above": "too deep", "below": "too shallow"}
    for (cpu,), part in ev.partition_by("cpu", as_dict=True, maintain_order=True).items():
        args = [
            annotations(state=int(s), sleep_us=None if d is None else float(d) / 1e3, source=src)
            for s, d in zip(part["state"].to_list(), part["sleep_ns"].to_list())
        ]
        out.instants(
            out.cpu_group(int(cpu)),
            f"CPU {cpu} idle misses",
            part["ts"],
            part["type"].replace_strict(names, default="miss"),
            pl.Series(args, dtype=pl.Binary),
            rank=5,
            description=f"idle misses ({src}): too deep = the state's target residency was longer than "
            "the sleep; too shallow = a deeper state would have fitted (abtest.analysis.idle)",
        )


def _lanes(start: np.ndarray, end: np.ndarray, lanes: int) -> np.ndarray:
    """Greedy lane of each slice (sorted by start) so that slices of one lane do not overlap; -1 when all
    ``lanes`` are busy. Runs over the few outlier slices only, not over event data."""
    free_at = [np.iinfo(np.int64).min] * lanes
    out = np.full(len(start), -1, dtype=np.int64)
    for i, (s, e) in enumerate(zip(start.tolist(), end.tolist())):
        for k in range(lanes):
            if free_at[k] <= s:
                free_at[k] = e
                out[i] = k
                break
    return out


def add_latency_outliers(trace, out: Tracks) -> None:
    """CPU n wakeups > p99: wakeups slower than their task's p99 wakeup latency, as slices on the CPU where
    the task then ran."""
    la = trace.latency
    defs = la.definitions()
    if not defs:
        out.notes.append("wakeups > p99: no sched_wakeup / sched_waking events")
        return
    definition = "wakeup" if "wakeup" in defs else defs[0]
    try:
        lat = la.df_latency(definition)
    except (MissingEventsError, ValueError) as e:
        out.notes.append(f"wakeups > p99: {e}")
        return
    lat = lat.with_columns(pl.col("comm").cast(pl.Utf8))
    p99 = (
        lat.group_by("comm")
        .agg(pl.col("latency_ns").quantile(0.99, "linear").alias("p99_ns"), pl.len().alias("n"))
        .filter(pl.col("n") >= MIN_TASK_WAKEUPS)
    )
    slow = lat.join(p99, on="comm").filter(pl.col("latency_ns") > pl.col("p99_ns")).sort("cpu", "wakeup_ts")
    for (cpu,), part in slow.partition_by("cpu", as_dict=True, maintain_order=True).items():
        lane = _lanes(part["wakeup_ts"].to_numpy(), part["switch_in_ts"].to_numpy(), MAX_OUTLIER_LANES)
        if (lane < 0).any():
            out.notes.append(
                f"wakeups > p99: CPU {cpu}: {int((lane < 0).sum())} of {len(lane)} not shown (more than "
                f"{MAX_OUTLIER_LANES} overlapping at once)"
            )
        part = part.with_columns(pl.Series("lane", lane)).filter(pl.col("lane") >= 0)
        for (k,), sub in part.partition_by("lane", as_dict=True, maintain_order=True).items():
            args = [
                annotations(pid=int(p), latency_us=float(x) / 1e3, p99_us=float(q) / 1e3, definition=definition)
                for p, x, q in zip(sub["pid"].to_list(), sub["latency_ns"].to_list(), sub["p99_ns"].to_list())
            ]
            name = f"CPU {cpu} wakeups > p99" + (f" #{k + 1}" if k else "")
            out.slices(
                out.cpu_group(int(cpu)),
                name,
                sub["wakeup_ts"],
                sub["latency_ns"],
                sub["comm"],
                pl.Series(args, dtype=pl.Binary),
                rank=6 + int(k),
                description=f"wakeups ({definition} -> switch-in) slower than the task's p99 latency "
                f"(tasks with >= {MIN_TASK_WAKEUPS} wakeups; abtest.analysis.latency)",
            )


def add_overutilized(trace, out: Tracks) -> None:
    """overutilized <root domain>: slices while overutilized."""
    ou = trace.overutilized
    try:
        iv = ou.df_intervals()
    except (MissingEventsError, ValueError) as e:
        out.notes.append(f"overutilized: {e}")
        return
    on = iv.filter(pl.col("overutilized") == 1)
    if on.is_empty():
        return
    grp = out.group("overutilized", name="Overutilized (EAS off)", rank=950)
    for (rd,), part in on.partition_by("root_domain", as_dict=True, maintain_order=True).items():
        out.slices(
            grp,
            f"overutilized {rd}",
            part["ts"],
            part["dur"],
            pl.Series(["overutilized"] * part.height),
            description="root domain overutilized (sched_overutilized; abtest.analysis.overutilized)",
        )


def _sum_steps(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """``ts, value``: the sum of step signals (each ``ts, value``, null = unknown) at every change of any;
    null while any part is unknown (a sum with an unknown term is unknown)."""
    grid = pl.concat([p.select("ts") for p in parts]).unique().sort("ts")
    total, unknown = pl.lit(0.0), pl.lit(False)
    for i, p in enumerate(parts):
        grid = grid.join_asof(p.sort("ts").rename({"value": f"v{i}"}), on="ts", strategy="backward")
        total = total + pl.col(f"v{i}").fill_null(0.0)
        unknown = unknown | pl.col(f"v{i}").is_null()
    return grid.select("ts", pl.when(unknown).then(None).otherwise(total).alias("value"))


def add_power(trace, out: Tracks, rail_channels: dict | None = None, origin: str | None = None) -> None:
    """power <channel> (sum of its rails) and rail <name> counters, mW, from the trace's power_rail samples;
    without rails, CPU n power (EM) from the platform's energy model. rail_channels / origin: the mapping
    abtest.analysis.power_source resolved for the trace's iteration (None: the trace's platform file's, else
    built in, as compare would use)."""
    if trace.has_events("power_rail") and trace.df("power_rail").height:
        if not rail_channels:
            rail_channels, origin = power_source.mapping_of(None, trace=trace)
        _add_rails(trace, out, rail_channels, origin)
    else:
        _add_energy_model(trace, out)


def _add_rails(trace, out: Tracks, rail_channels: dict | None, origin: str | None) -> None:
    pr = trace.df("power_rail", windowed=False)
    lo, hi = window_of(pr, trace.start_ns, trace.end_ns)
    iv = power_mod.df_rail_power_intervals(pr, start_ns=lo, end_ns=hi)
    iv = iv.select(pl.col("rail").cast(pl.Utf8), "ts", pl.col("power_mw").alias("value"))
    rails = sorted(iv["rail"].unique().to_list())
    mapping = power_mod.rail_mapping(rails, rail_channels, origin)
    grp = out.group("power", name=f"Power (rails; {mapping.source})", rank=800)
    rg = out.group("power", "rails", name="Rails", parent=grp, rank=100)
    per_rail = {r: iv.filter(pl.col("rail") == r).select("ts", "value") for r in rails}
    for i, r in enumerate(rails):
        s = _steps(per_rail[r].with_columns(pl.lit(r).alias("rail")), "rail", "value", decimals=3)
        out.counter(
            rg,
            f"rail {r}",
            s["ts"],
            s["value"],
            unit="mW",
            rank=i,
            description="rail power between two samples, mW (abtest.analysis.power.df_rail_power_intervals)",
        )
    chans = {ch: [r for r in rs if r in per_rail] for ch, rs in mapping.channels.items()}
    cpu = sorted({r for ch in power_mod.CPU_CHANNELS for r in chans.get(ch, [])})
    chans = {**chans, "CPU": cpu, "Total": rails}
    order = {c: i for i, c in enumerate(power_mod.CHANNEL_ORDER)}
    for ch, rs in sorted(chans.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])):
        if not rs:
            continue
        s = _steps(
            _sum_steps([per_rail[r] for r in rs]).with_columns(pl.lit(ch).alias("ch")), "ch", "value", decimals=3
        )
        out.counter(
            grp,
            f"power {ch}",
            s["ts"],
            s["value"],
            unit="mW",
            rank=order.get(ch, len(order)),
            description=f"sum of rails {', '.join(rs)}, mW ({mapping.source})",
        )


def _add_energy_model(trace, out: Tracks) -> None:
    from abtest.analysis.energy import df_cpu_activity, df_priced_activity
    from abtest.analysis.platform import trace_platform

    plat = trace_platform(trace)
    if not plat or not plat.get("energy_model_source") or "cpu_frequency" not in trace.tables:
        out.notes.append("power: no power rails in the trace and no energy model (platform) with cpu_frequency")
        return
    cpus = [c["cpu"] for c in plat["cpus"]]
    idle = trace.df("cpu_idle", windowed=False) if trace.has_events("cpu_idle") else None
    sw = trace.df("sched_switch", windowed=False) if trace.has_events("sched_switch") else None
    act = df_cpu_activity(
        trace.df("cpu_frequency", windowed=False),
        cpu_idle=idle,
        sched_switch=sw,
        start_ns=trace.start_ns,
        end_ns=trace.end_ns,
        cpus=cpus,
    )
    priced = df_priced_activity(act, plat).sort("cpu", "ts")
    steps = _steps(priced.select("cpu", "ts", pl.col("cpu_mw")), "cpu", "cpu_mw", decimals=3)
    src = plat.get("energy_model_source")
    for (cpu,), part in steps.partition_by("cpu", as_dict=True, maintain_order=True).items():
        out.counter(
            out.cpu_group(int(cpu)),
            f"CPU {cpu} power (EM)",
            part["ts"],
            part["cpu_mw"],
            unit="mW",
            rank=4,
            description=f"energy-model estimate of the CPU's power, mW (model: {src}; "
            "abtest.analysis.energy.df_priced_activity; domain static power not included)",
        )


def add_all(
    trace,
    out: Tracks,
    *,
    top_tasks: int = DEFAULT_TOP_TASKS,
    rail_channels: dict | None = None,
    rail_origin: str | None = None,
) -> None:
    """Every derived track of the trace."""
    lt = trace.load_tracking
    add_pelt(trace, out, lt)
    add_idle_misses(trace, out)
    add_latency_outliers(trace, out)
    add_tasks(trace, out, top_tasks, lt)
    add_boost(trace, out, lt)
    add_overutilized(trace, out)
    add_power(trace, out, rail_channels, rail_origin)
