"""CPU idle: idle-state residency per CPU and per cluster, wakeups, idle-duration histogram, and idle
misses (too deep / too shallow), from the kernel's ``cpu_idle_miss`` or derived from target residencies.

Events: ``cpu_idle`` (required), ``cpu_idle_miss`` (optional: the kernel's own miss verdicts).
Record with ``-e power:cpu_idle -e power:cpu_idle_miss``.

Idle state values (canonical ``cpu_idle.state``): ``-1`` = active (the CPU left idle), ``0..N`` =
index of the idle state entered (as in /sys/devices/system/cpu/cpuN/cpuidle/stateK). In residency
tables a ``null`` state means "not known": the time before a CPU's first ``cpu_idle`` event when
that event is an exit (the CPU was idle in an unrecorded state). When the first event is an entry,
the CPU was active before it and the lead-in counts as active.

Miss semantics (kernel cpuidle_enter_state, v6.x): after an idle period of measured length ``d`` in
state ``s``:

* too deep ("above"): ``d < target_residency(s)`` and an enabled shallower state exists;
* too shallow ("below"): otherwise, if ``d > exit_latency(s)`` and the next enabled deeper state
  ``s+1`` has ``d - exit_latency(s) >= target_residency(s+1)``.

Percentages are per CPU and divided by all wakeups (idle exits) of that CPU in the window, as the
teo util-awareness evaluation did. Derived misses apply the rules above to the traced idle
durations (trace timestamps bracket the kernel's own measurement by a few us, and the set of
*disabled* states is unknown: every state in the platform table counts as enabled).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import polars as pl

from abtest.analysis.intervals import df_cpu_idle_intervals
from abtest.analysis.per_trace import per_trace
from abtest.metric_spec import Aggregation, Direction, Grouping, MetricSpec, MetricValue, TableSpec, WindowCombine
from abtest.trace.errors import AnalysisNotApplicable

EVENTS = ("cpu_idle",)
OPTIONAL_EVENTS = ("cpu_idle_miss",)

DEFAULT_HIST_EDGES_US = (
    0,
    1,
    2,
    5,
    10,
    20,
    50,
    100,
    200,
    500,
    1_000,
    2_000,
    5_000,
    10_000,
    20_000,
    50_000,
    100_000,
    1_000_000,
    float("inf"),
)

_MISS_SCHEMA = {"cpu": pl.Int32, "state": pl.Int64, "ts": pl.Int64, "type": pl.Utf8}


# --------------------------------------------------------------------------------------------
# intervals and residency
# --------------------------------------------------------------------------------------------
def df_idle_intervals(
    cpu_idle: pl.DataFrame, *, start_ns: int | None = None, end_ns: int | None = None, cpus: list[int] | None = None
) -> pl.DataFrame:
    """Idle-state intervals per CPU over ``[start_ns, end_ns)`` (the shared
    :func:`abtest.analysis.intervals.df_cpu_idle_intervals`).

    Needs: cpu_idle (pass the whole table, not a windowed one, so the state in force at the window
    start is carried in).

    Returns cpu (Int32), ts (Int64 ns, interval start), dur (Int64 ns), state (Int64: -1 active,
    k >= 0 idle state k, null unknown), idle (Boolean, null unknown). ``cpus``: CPUs that must appear
    even without events (their whole window is then unknown).
    """
    iv = df_cpu_idle_intervals(
        cpu_idle, start_ns=start_ns, end_ns=end_ns, cpus=None if cpus is None else [int(c) for c in cpus]
    )
    return iv.select("cpu", "ts", "dur", "state", "idle").sort(["cpu", "ts"])


def _state_names(states: pl.DataFrame, idle_states: pl.DataFrame | None) -> pl.DataFrame:
    """Add state_name: "active" (-1), "idle-unknown" (idle, state not known), "unknown" (not known
    whether idle), platform name, else "state<k>"."""
    if idle_states is not None and not idle_states.is_empty() and "name" in idle_states.columns:
        names = idle_states.select(
            pl.col("cpu").cast(pl.Int32), pl.col("state").cast(pl.Int64), pl.col("name").alias("_pname")
        ).unique(["cpu", "state"])
        states = states.join(names, on=["cpu", "state"], how="left")
    else:
        states = states.with_columns(pl.lit(None, pl.Utf8).alias("_pname"))
    return states.with_columns(
        pl.when(pl.col("state").is_null() & (pl.col("idle") == True))
        .then(pl.lit("idle-unknown"))  # noqa: E712
        .when(pl.col("state").is_null())
        .then(pl.lit("unknown"))
        .when(pl.col("state") == -1)
        .then(pl.lit("active"))
        .otherwise(pl.coalesce(pl.col("_pname"), pl.lit("state") + pl.col("state").cast(pl.Utf8)))
        .alias("state_name")
    ).drop("_pname")


def df_idle_residency(intervals: pl.DataFrame, idle_states: pl.DataFrame | None = None) -> pl.DataFrame:
    """Time per CPU in each idle state.

    Needs: cpu_idle (via df_idle_intervals).

    Returns cpu, state (-1 active, null unknown), idle (Boolean; null = not known), state_name,
    time_ns (Int64 ns), pct (% of the CPU's window, 0..100). Sorted by cpu, state (active first,
    unknown last).
    """
    res = intervals.group_by(["cpu", "state", "idle"]).agg(pl.col("dur").sum().alias("time_ns"))
    res = res.with_columns((100.0 * pl.col("time_ns") / pl.col("time_ns").sum().over("cpu")).alias("pct"))
    return (
        _state_names(res, idle_states)
        .select("cpu", "state", "idle", "state_name", "time_ns", "pct")
        .sort(["cpu", "state", "state_name"], nulls_last=True)
    )


def df_cluster_idle_residency(
    intervals: pl.DataFrame, clusters: pl.DataFrame, idle_states: pl.DataFrame | None = None
) -> pl.DataFrame:
    """Idle residency per cluster, summed over its CPUs.

    Needs: cpu_idle (via df_idle_intervals). ``clusters``: cpu, cluster (e.g. frequency domains).

    Returns cluster, state, state_name, time_ns (CPU-ns summed over the cluster's CPUs), pct (% of
    the cluster's CPU-time), all_cpus_idle_ns (ns during which every CPU of the cluster was in some
    idle state, i.e. when a cluster-level state was possible; same on every row of the cluster),
    all_cpus_idle_pct (% of the window).
    """
    cl = clusters.select(pl.col("cpu").cast(pl.Int32), pl.col("cluster").cast(pl.Int32))
    iv = intervals.join(cl, on="cpu", how="inner")
    names = _state_names(iv.select("cpu", "state", "idle").unique(), idle_states)
    iv = iv.join(names, on=["cpu", "state", "idle"], how="left", nulls_equal=True)
    res = iv.group_by(["cluster", "state", "state_name"]).agg(pl.col("dur").sum().alias("time_ns"))
    res = res.with_columns((100.0 * pl.col("time_ns") / pl.col("time_ns").sum().over("cluster")).alias("pct"))
    all_idle = _all_cpus_idle(iv, cl)
    return res.join(all_idle, on="cluster", how="left").sort(["cluster", "state", "state_name"], nulls_last=True)


def _all_cpus_idle(iv: pl.DataFrame, clusters: pl.DataFrame) -> pl.DataFrame:
    """Per cluster: ns during which all its CPUs are idle (sweep over +1/-1 idle edges)."""
    ncpu = clusters.group_by("cluster").agg(pl.len().alias("ncpu"))
    window = iv.group_by("cluster").agg(
        pl.col("ts").min().alias("lo"), (pl.col("ts") + pl.col("dur")).max().alias("hi")
    )
    idle = iv.filter(pl.col("idle").fill_null(False))
    edges = (
        pl.concat(
            [
                idle.select("cluster", "ts", pl.lit(1).alias("d")),
                idle.select("cluster", (pl.col("ts") + pl.col("dur")).alias("ts"), pl.lit(-1).alias("d")),
            ]
        )
        .group_by(["cluster", "ts"])
        .agg(pl.col("d").sum())
        .sort(["cluster", "ts"])
    )
    sweep = edges.with_columns(
        pl.col("d").cum_sum().over("cluster").alias("n_idle"),
        (pl.col("ts").shift(-1).over("cluster") - pl.col("ts")).alias("span"),
    ).join(ncpu, on="cluster")
    tot = (
        sweep.filter(pl.col("n_idle") == pl.col("ncpu"))
        .group_by("cluster")
        .agg(pl.col("span").sum().alias("all_cpus_idle_ns"))
    )
    out = window.join(tot, on="cluster", how="left").with_columns(pl.col("all_cpus_idle_ns").fill_null(0))
    return out.select(
        "cluster",
        "all_cpus_idle_ns",
        (100.0 * pl.col("all_cpus_idle_ns") / (pl.col("hi") - pl.col("lo"))).alias("all_cpus_idle_pct"),
    )


# --------------------------------------------------------------------------------------------
# wakeups and durations
# --------------------------------------------------------------------------------------------
def df_wakeups(cpu_idle: pl.DataFrame, *, start_ns: int, end_ns: int) -> pl.DataFrame:
    """Idle entries and wakeups (idle exits) per CPU inside ``[start_ns, end_ns)``.

    Needs: cpu_idle. Returns cpu, idle_entries (events with state >= 0), wakeups (events with
    state -1), wakeups_per_s (wakeups / window length in s).
    """
    w = cpu_idle.filter((pl.col("ts") >= start_ns) & (pl.col("ts") < end_ns))
    secs = max(end_ns - start_ns, 1) / 1e9
    return (
        w.group_by(pl.col("cpu").cast(pl.Int32))
        .agg(
            (pl.col("state") >= 0).sum().cast(pl.Int64).alias("idle_entries"),
            (pl.col("state") == -1).sum().cast(pl.Int64).alias("wakeups"),
        )
        .with_columns((pl.col("wakeups") / secs).alias("wakeups_per_s"))
        .sort("cpu")
    )


def df_idle_durations(intervals: pl.DataFrame) -> pl.DataFrame:
    """Completed idle periods: cpu, state (>= 0), ts (entry, ns), dur (ns).

    Needs: cpu_idle (via df_idle_intervals). Periods cut by the window start or end, and periods of
    unknown state, are excluded (their length is not known).
    """
    edge = (pl.int_range(pl.len()).over("cpu") == 0) | (pl.int_range(pl.len()).over("cpu") == pl.len().over("cpu") - 1)
    return intervals.filter(~edge & (pl.col("state") >= 0)).select("cpu", "state", "ts", "dur")


def df_idle_histogram(durations: pl.DataFrame, edges_us: tuple[float, ...] = DEFAULT_HIST_EDGES_US) -> pl.DataFrame:
    """Histogram of idle durations per CPU and state.

    Needs: cpu_idle (via df_idle_durations). Bins are ``[lo_us, hi_us)``.
    Returns cpu, state, bin_lo_us, bin_hi_us (Float64, us), count.
    """
    edges = np.asarray(edges_us, dtype=float)
    idx = np.searchsorted(edges, durations["dur"].to_numpy() / 1e3, side="right") - 1
    idx = np.clip(idx, 0, len(edges) - 2)
    binned = durations.with_columns(pl.Series("bin", idx, dtype=pl.Int64))
    lo = (
        pl.Series(edges[:-1])
        .to_frame("bin_lo_us")
        .with_row_index("bin")
        .with_columns(pl.col("bin").cast(pl.Int64), pl.Series("bin_hi_us", edges[1:]))
    )
    return (
        binned.group_by(["cpu", "state", "bin"])
        .agg(pl.len().cast(pl.Int64).alias("count"))
        .join(lo, on="bin")
        .sort(["cpu", "state", "bin"])
        .select("cpu", "state", "bin_lo_us", "bin_hi_us", "count")
    )


# --------------------------------------------------------------------------------------------
# misses
# --------------------------------------------------------------------------------------------
def df_derived_miss_events(intervals: pl.DataFrame, idle_states: pl.DataFrame) -> pl.DataFrame:
    """Idle misses derived from idle durations and the states' target residencies.

    Needs: cpu_idle (via df_idle_intervals) and idle_states (cpu, state, target_residency_us,
    exit_latency_us: from the platform). Rules in the module docstring.

    Returns one row per miss: cpu, state, ts (ns, end of the idle period = the wakeup), type
    ("above" = too deep, "below" = too shallow).
    """
    st = idle_states.select(
        pl.col("cpu").cast(pl.Int32),
        pl.col("state").cast(pl.Int64),
        (pl.col("target_residency_us") * 1e3).alias("target_ns"),
        (pl.col("exit_latency_us").fill_null(0.0) * 1e3).alias("exit_ns"),
    )
    if st["target_ns"].null_count():
        raise AnalysisNotApplicable(
            "derived idle misses need every idle state's target_residency_us (the platform leaves some null)"
        )
    bounds = st.group_by("cpu").agg(pl.col("state").min().alias("min_state"))
    deeper = st.select("cpu", (pl.col("state") - 1).alias("state"), pl.col("target_ns").alias("next_target_ns"))
    d = (
        df_idle_durations(intervals)
        .join(st, on=["cpu", "state"], how="inner")
        .join(bounds, on="cpu")
        .join(deeper, on=["cpu", "state"], how="left")
    )
    too_deep = (pl.col("dur") < pl.col("target_ns")) & (pl.col("state") > pl.col("min_state"))
    too_shallow = (
        ~(pl.col("dur") < pl.col("target_ns"))
        & pl.col("next_target_ns").is_not_null()
        & (pl.col("dur") > pl.col("exit_ns"))
        & ((pl.col("dur") - pl.col("exit_ns")) >= pl.col("next_target_ns"))
    )
    out = d.with_columns(
        pl.when(too_deep).then(pl.lit("above")).when(too_shallow).then(pl.lit("below")).alias("type"),
        (pl.col("ts") + pl.col("dur")).alias("ts"),
    ).filter(pl.col("type").is_not_null())
    return out.select("cpu", "state", "ts", "type").sort(["cpu", "ts"])


def df_idle_misses(
    miss_events: pl.DataFrame, cpu_idle: pl.DataFrame, *, start_ns: int, end_ns: int, source: str
) -> pl.DataFrame:
    """Too deep / too shallow counts and % per CPU and idle state.

    Needs: cpu_idle (wakeups, entries) and the miss events: the cpu_idle_miss table, or
    df_derived_miss_events. ``source`` labels the rows ("cpu_idle_miss" or "derived").

    Returns cpu, state, entries (idle entries into this state), above, below (miss counts),
    wakeups (all idle exits of the CPU), above_pct, below_pct (100 * count / wakeups of the CPU),
    source. Only misses and entries inside ``[start_ns, end_ns)`` count.
    """
    m = miss_events.filter((pl.col("ts") >= start_ns) & (pl.col("ts") < end_ns)).select(
        pl.col("cpu").cast(pl.Int32), pl.col("state").cast(pl.Int64), pl.col("type").cast(pl.Utf8)
    )
    counts = m.group_by(["cpu", "state"]).agg(
        (pl.col("type") == "above").sum().cast(pl.Int64).alias("above"),
        (pl.col("type") == "below").sum().cast(pl.Int64).alias("below"),
    )
    w = cpu_idle.filter((pl.col("ts") >= start_ns) & (pl.col("ts") < end_ns))
    entries = (
        w.filter(pl.col("state") >= 0)
        .group_by(pl.col("cpu").cast(pl.Int32), "state")
        .agg(pl.len().cast(pl.Int64).alias("entries"))
    )
    wake = df_wakeups(cpu_idle, start_ns=start_ns, end_ns=end_ns).select("cpu", "wakeups")
    out = (
        entries.join(counts, on=["cpu", "state"], how="full", coalesce=True)
        .with_columns(pl.col("entries", "above", "below").fill_null(0))
        .join(wake, on="cpu", how="left")
        .with_columns(pl.col("wakeups").fill_null(0))
    )
    return (
        out.with_columns(
            pl.when(pl.col("wakeups") > 0).then(100.0 * pl.col("above") / pl.col("wakeups")).alias("above_pct"),
            pl.when(pl.col("wakeups") > 0).then(100.0 * pl.col("below") / pl.col("wakeups")).alias("below_pct"),
            pl.lit(source).alias("source"),
        )
        .select("cpu", "state", "entries", "above", "below", "wakeups", "above_pct", "below_pct", "source")
        .sort(["cpu", "state"])
    )


def df_idle_miss_totals(misses: pl.DataFrame) -> pl.DataFrame:
    """Per-CPU totals of df_idle_misses, plus a row with cpu = null for all CPUs together.

    Returns cpu, wakeups, above, below, above_pct, below_pct (100 * misses / wakeups), source.
    """
    per_cpu = (
        misses.group_by("cpu")
        .agg(pl.col("wakeups").first(), pl.col("above").sum(), pl.col("below").sum(), pl.col("source").first())
        .sort("cpu")
    )
    allrow = per_cpu.select(
        pl.lit(None, pl.Int32).alias("cpu"),
        pl.col("wakeups").sum(),
        pl.col("above").sum(),
        pl.col("below").sum(),
        pl.col("source").first(),
    )
    tot = pl.concat([per_cpu, allrow], how="vertical_relaxed")
    return tot.with_columns(
        pl.when(pl.col("wakeups") > 0).then(100.0 * pl.col("above") / pl.col("wakeups")).alias("above_pct"),
        pl.when(pl.col("wakeups") > 0).then(100.0 * pl.col("below") / pl.col("wakeups")).alias("below_pct"),
    )


# --------------------------------------------------------------------------------------------
# idle states from sysfs (for platform files written at collection time)
# --------------------------------------------------------------------------------------------
def idle_states_from_sysfs(cpu_root: str | os.PathLike = "/sys/devices/system/cpu") -> list[dict]:
    """Per-CPU idle states as the platform schema's ``cpus`` list: ``[{cpu, idle_states: [{index, name,
    target_residency_us, exit_latency_us}]}]`` read from cpuN/cpuidle/stateK/{name,residency,latency}
    (us). CPUs without a cpuidle directory are left out."""
    out = []
    root = Path(cpu_root)
    for cpu_dir in sorted(root.glob("cpu[0-9]*"), key=lambda p: int(p.name[3:])):
        states = []
        for sd in sorted((cpu_dir / "cpuidle").glob("state[0-9]*"), key=lambda p: int(p.name[5:])):
            states.append(
                {
                    "index": int(sd.name[5:]),
                    "name": (sd / "name").read_text().strip(),
                    "target_residency_us": float((sd / "residency").read_text()),
                    "exit_latency_us": float((sd / "latency").read_text()),
                }
            )
        if states:
            out.append({"cpu": int(cpu_dir.name[3:]), "idle_states": states})
    return out


# --------------------------------------------------------------------------------------------
# plots
# --------------------------------------------------------------------------------------------
def _axes(ax, figsize):
    import matplotlib.pyplot as plt

    if ax is not None:
        return ax.figure, ax
    return plt.subplots(figsize=figsize)


def plot_idle_residency(residency: pl.DataFrame, *, ax=None):
    """Stacked bars: % of the window per idle state, one bar per CPU (from df_idle_residency).
    Returns the matplotlib Figure (drawn into ``ax`` when given)."""
    fig, ax = _axes(ax, (7, 3.5))
    cpus = sorted(residency["cpu"].unique().to_list())
    bottom = np.zeros(len(cpus))
    for name in residency.sort("state", nulls_last=True)["state_name"].unique(maintain_order=True).to_list():
        sub = residency.filter(pl.col("state_name") == name)
        vals = np.array([sub.filter(pl.col("cpu") == c)["pct"].sum() for c in cpus])
        ax.bar([str(c) for c in cpus], vals, bottom=bottom, label=name)
        bottom += vals
    ax.set_xlabel("CPU")
    ax.set_ylabel("% of window")
    ax.set_title("Idle state residency")
    ax.legend(fontsize="small", loc="upper right")
    return fig


def plot_idle_misses(misses: pl.DataFrame, *, ax=None):
    """Bars of too deep % and too shallow % per CPU (from df_idle_misses, summed over states).
    Returns the matplotlib Figure (drawn into ``ax`` when given)."""
    tot = df_idle_miss_totals(misses).filter(pl.col("cpu").is_not_null())
    fig, ax = _axes(ax, (7, 3.5))
    x = np.arange(tot.height)
    ax.bar(x - 0.2, tot["above_pct"].to_numpy(), width=0.4, label="too deep (above)")
    ax.bar(x + 0.2, tot["below_pct"].to_numpy(), width=0.4, label="too shallow (below)")
    ax.set_xticks(x, [str(c) for c in tot["cpu"].to_list()])
    ax.set_xlabel("CPU")
    ax.set_ylabel("% of wakeups")
    src = misses["source"][0] if misses.height else "?"
    ax.set_title(f"Idle misses (source: {src})")
    ax.legend(fontsize="small")
    return fig


# --------------------------------------------------------------------------------------------
# bound to a Trace
# --------------------------------------------------------------------------------------------
def _platform(trace) -> dict | None:
    """The trace's platform (abtest.analysis.platform.trace_platform). A platform that does not match the trace
    raises PlatformMismatchError (its idle states would relabel the trace's); an unreadable one is ignored."""
    from abtest.analysis.platform import PlatformMismatchError, trace_platform

    try:
        return trace_platform(trace)
    except PlatformMismatchError:
        raise
    except (ValueError, KeyError, TypeError):
        return None


def clusters_of(trace) -> pl.DataFrame:
    """cpu, cluster: frequency domains of the platform when known, else one cluster 0 of all CPUs."""
    plat = _platform(trace)
    if plat and plat.get("cpus"):
        return pl.DataFrame(
            {"cpu": [c["cpu"] for c in plat["cpus"]], "cluster": [c["domain"] for c in plat["cpus"]]},
            schema={"cpu": pl.Int32, "cluster": pl.Int32},
        )
    return pl.DataFrame(
        {"cpu": list(range(trace.cpus)), "cluster": [0] * trace.cpus}, schema={"cpu": pl.Int32, "cluster": pl.Int32}
    )


class IdleAnalysis:
    """Idle analyses of one trace (window = the trace's window). See the module docstring."""

    def __init__(self, trace):
        self.trace = trace
        self._residency: pl.DataFrame | None = None

    def _span(self) -> tuple[int, int]:
        """The trace window [start_ns, end_ns). A trace with no event has none: MissingEventsError (the idle
        events are absent), the answer `analyze` gives for any analysis that does not apply."""
        lo, hi = self.trace.start_ns, self.trace.end_ns
        if lo is None or hi is None:
            from abtest.trace.errors import MissingEventsError

            raise MissingEventsError("idle", list(EVENTS), str(self.trace.path))
        return int(lo), int(hi)

    def _cpu_idle(self) -> pl.DataFrame:
        self.trace.require("idle", *EVENTS)
        return self.trace.df("cpu_idle", windowed=False)

    def idle_states(self) -> pl.DataFrame | None:
        """Platform idle states (cpu, state, name, target_residency_us, exit_latency_us), or None."""
        from abtest.analysis.platform import df_idle_states

        plat = _platform(self.trace)
        if not plat:
            return None
        st = df_idle_states(plat)
        return st if not st.is_empty() else None

    def _cpu_idle_state(self) -> pl.DataFrame:
        """cpu_idle events plus marker-carried cpu_idle values (devlib/LISA meta events, see
        abtest.analysis.meta_events) written before a CPU's first kernel event: they give the state in force
        at the start. Used for intervals only; wakeups and misses count kernel events alone."""
        ev = self._cpu_idle()
        if "marker" not in self.trace.tables:
            return ev
        from abtest.analysis.meta_events import meta_cpu_idle

        marks = meta_cpu_idle(self.trace.df("marker", windowed=False))
        if marks.is_empty():
            return ev
        first = ev.group_by(pl.col("cpu").cast(pl.Int32)).agg(pl.col("ts").min().alias("_first"))
        seeds = (
            marks.join(first, on="cpu", how="left")
            .filter(pl.col("_first").is_null() | (pl.col("ts") < pl.col("_first")))
            .select("ts", "cpu", "state")
        )
        kern = ev.select(pl.col("ts").cast(pl.Int64), pl.col("cpu").cast(pl.Int32), pl.col("state").cast(pl.Int64))
        return pl.concat([seeds, kern]).sort("ts", maintain_order=True)

    def df_intervals(self) -> pl.DataFrame:
        lo, hi = self._span()
        return df_idle_intervals(
            self._cpu_idle_state(), start_ns=lo, end_ns=hi, cpus=list(range(self.trace.cpus)) or None
        )

    def df_residency(self) -> pl.DataFrame:
        """df_idle_residency of the window (computed once per analysis object)."""
        if self._residency is None:
            self._residency = df_idle_residency(self.df_intervals(), self.idle_states())
        return self._residency

    def df_cluster_residency(self) -> pl.DataFrame:
        return df_cluster_idle_residency(self.df_intervals(), clusters_of(self.trace), self.idle_states())

    def df_wakeups(self) -> pl.DataFrame:
        lo, hi = self._span()
        return df_wakeups(self._cpu_idle(), start_ns=lo, end_ns=hi)

    def df_durations(self) -> pl.DataFrame:
        return df_idle_durations(self.df_intervals())

    def df_histogram(self, edges_us: tuple[float, ...] = DEFAULT_HIST_EDGES_US) -> pl.DataFrame:
        return df_idle_histogram(self.df_durations(), edges_us)

    def miss_source(self) -> str | None:
        """ "cpu_idle_miss" when the trace has it, "derived" when the platform gives target residencies, else None."""
        if "cpu_idle_miss" in self.trace.tables:
            return "cpu_idle_miss"
        st = self.idle_states()
        if st is not None and st["target_residency_us"].null_count() == 0:
            return "derived"
        return None

    def df_misses(self, source: str = "auto") -> pl.DataFrame:
        """df_idle_misses with source "cpu_idle_miss", "derived", or "auto" (kernel's when present)."""
        src = self.miss_source() if source == "auto" else source
        cpu_idle = self._cpu_idle()
        lo, hi = self._span()
        if src == "cpu_idle_miss":
            self.trace.require("idle misses", "cpu_idle_miss")
            ev = self.trace.df("cpu_idle_miss", windowed=False)
        elif src == "derived":
            st = self.idle_states()
            if st is None:
                raise AnalysisNotApplicable(
                    "derived idle misses need the platform's idle states (target residencies): "
                    "pass platform=... with idle_states"
                )
            ev = df_derived_miss_events(df_idle_intervals(cpu_idle, start_ns=lo, end_ns=hi), st)
        else:
            from abtest.trace.errors import MissingEventsError

            raise MissingEventsError("idle misses", ["cpu_idle_miss"], str(self.trace.path))
        return df_idle_misses(ev, cpu_idle, start_ns=lo, end_ns=hi, source=src)

    def df_miss_totals(self, source: str = "auto") -> pl.DataFrame:
        return df_idle_miss_totals(self.df_misses(source))

    def plot_residency(self, ax=None):
        return plot_idle_residency(self.df_residency(), ax=ax)

    def plot_misses(self, source: str = "auto", ax=None):
        return plot_idle_misses(self.df_misses(source), ax=ax)


# one facade per trace for the metrics and the declared tables: they share its residency (small: per CPU and state)
_facade = per_trace(IdleAnalysis)


def _residency_rows(trace) -> pl.DataFrame:
    return _facade(trace).df_residency().select("cpu", "state_name", (pl.col("time_ns") / 1e9).alias("time_s"), "pct")


def _miss_rows(trace) -> pl.DataFrame | None:
    ia = _facade(trace)
    if ia.miss_source() is None:
        return None
    return (
        ia.df_miss_totals()
        .sort(pl.col("cpu").is_null(), "cpu")
        .select(
            pl.col("cpu").cast(pl.Utf8).fill_null("all"),
            "source",
            "wakeups",
            pl.col("above").alias("too_deep"),
            pl.col("above_pct").alias("too_deep_pct"),
            pl.col("below").alias("too_shallow"),
            pl.col("below_pct").alias("too_shallow_pct"),
        )
    )


def _cluster_rows(trace) -> pl.DataFrame:
    return _facade(trace).df_cluster_residency().select("cluster", "state_name", "pct", "all_cpus_idle_pct")


TABLES = (
    TableSpec(
        "residency",
        "Idle state residency per CPU (time in each state and % of the window)",
        "cpu state_name time_s[s] pct[%]",
        _residency_rows,
        keys=2,
        across="cpu",
        note="active = not idle; idle-unknown = idle before the CPU's first cpu_idle event, state not known; "
        "unknown = no cpu_idle event on that CPU",
    ),
    TableSpec(
        "misses",
        "Idle misses per CPU (% of wakeups from idle)",
        "cpu source wakeups too_deep too_deep_pct[%] too_shallow too_shallow_pct[%]",
        _miss_rows,
        note="too deep: the sleep was shorter than the state's target residency; too shallow: a deeper state "
        "would have fitted",
    ),
    TableSpec(
        "cluster_residency",
        "Idle state residency per cluster (% of the cluster's CPU time)",
        "cluster state_name pct[%] all_cpus_idle_pct[%]",
        _cluster_rows,
        keys=2,
    ),
)


# --------------------------------------------------------------------------------------------
# Declared metrics (abtest.analysis.registry): one value per trace/iteration each
# --------------------------------------------------------------------------------------------
TOO_DEEP_PCT = MetricSpec(
    "idle.too_deep_pct",
    "%",
    Direction.LOWER,
    Aggregation.GMEAN,
    title="too deep",
    headline=True,
    description="Idle entries whose state was deeper than the sleep that followed allowed (cpu_idle_miss 'above', "
    "else derived from target residencies), as % of all wakeups from idle (all CPUs); the teo seed's "
    "'too deep %'.",
    window=WindowCombine.EVENTS,
    window_weight="idle.wakeups_per_s",
)
TOO_SHALLOW_PCT = MetricSpec(
    "idle.too_shallow_pct",
    "%",
    Direction.LOWER,
    Aggregation.GMEAN,
    title="too shallow",
    headline=True,
    description="Idle entries where a deeper state would have fitted the sleep (cpu_idle_miss 'below', else "
    "derived), as % of all wakeups from idle; the teo seed's 'too shallow %'.",
    window=WindowCombine.EVENTS,
    window_weight="idle.wakeups_per_s",
)
IDLE_WAKEUPS_PER_S = MetricSpec(
    "idle.wakeups_per_s",
    "1/s",
    Direction.NONE,
    Aggregation.MEAN,
    title="idle wakeups",
    description="Exits from idle (cpu_idle state=-1 after an idle state) per second of window, all CPUs together.",
    window=WindowCombine.RATE,
)
IDLE_PCT = MetricSpec(
    "idle.idle_pct",
    "%",
    Direction.NONE,
    Aggregation.MEAN,
    title="CPU time idle",
    description="Share of all CPUs' time spent in any idle state (time with unknown state excluded from neither "
    "part: it counts in the denominator).",
    window=WindowCombine.RATE,
)
STATE_RESIDENCY_PCT = MetricSpec(
    "idle.state.{idle_state}.residency_pct",
    "%",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.IDLE_STATE,
    title="idle state residency",
    description="Share of all CPUs' time spent in this idle state (by state name from the platform / cpuidle).",
    window=WindowCombine.RATE,
)

CPU_IDLE_PCT = MetricSpec(
    "idle.cpu.{cpu}.idle_pct",
    "%",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.CPU,
    title="idle",
    description="Share of this CPU's time in the window spent in any idle state.",
    window=WindowCombine.RATE,
)
CPU_WAKEUPS_PER_S = MetricSpec(
    "idle.cpu.{cpu}.wakeups_per_s",
    "1/s",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.CPU,
    title="wakeups from idle",
    description="Exits from idle of this CPU per second of window.",
    window=WindowCombine.RATE,
)

METRICS = (
    TOO_DEEP_PCT,
    TOO_SHALLOW_PCT,
    IDLE_WAKEUPS_PER_S,
    IDLE_PCT,
    STATE_RESIDENCY_PCT,
    CPU_IDLE_PCT,
    CPU_WAKEUPS_PER_S,
)


def metrics(trace, options=None) -> list[MetricValue]:
    """The declared idle metrics of one trace (see METRICS). Needs cpu_idle."""
    ia = _facade(trace)
    lo, hi = ia._span()
    res = ia.df_residency()
    total = res["time_ns"].sum()
    out: list[MetricValue] = []
    if total:
        idle_ns = res.filter(pl.col("idle").fill_null(False))["time_ns"].sum()
        out.append(MetricValue(IDLE_PCT, 100.0 * idle_ns / total))
        per_state = (
            res.filter(pl.col("idle").fill_null(False))
            .group_by("state_name")
            .agg(pl.col("time_ns").sum())
            .sort("state_name")
        )
        out += [MetricValue(STATE_RESIDENCY_PCT, 100.0 * t / total, str(name)) for name, t in per_state.iter_rows()]
        per_cpu = res.filter(pl.col("idle").fill_null(False)).group_by("cpu").agg(pl.col("pct").sum()).sort("cpu")
        out += [MetricValue(CPU_IDLE_PCT, float(p), str(c)) for c, p in per_cpu.iter_rows()]
    wk = ia.df_wakeups()
    win_s = max((hi - lo) / 1e9, 1e-9)
    out.append(MetricValue(IDLE_WAKEUPS_PER_S, float(wk["wakeups"].sum()) / win_s))
    out += [MetricValue(CPU_WAKEUPS_PER_S, n / win_s, str(c)) for c, n in wk.select("cpu", "wakeups").iter_rows()]
    if ia.miss_source() is not None:
        allrow = ia.df_miss_totals().filter(pl.col("cpu").is_null()).row(0, named=True)
        if allrow["above_pct"] is not None:
            out.append(MetricValue(TOO_DEEP_PCT, float(allrow["above_pct"])))
            out.append(MetricValue(TOO_SHALLOW_PCT, float(allrow["below_pct"])))
    return out
