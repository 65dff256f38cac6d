"""CPU frequency: OPP residency (total and active), average frequency, transitions, rapid oscillation.

Needs ``cpu_frequency`` (ts, cpu, frequency_khz). Uses ``cpu_idle`` when present to split active time
(CPU not idle) from total time. Frequency domains come from the platform when known, else they are
inferred (CPUs whose cpu_frequency value sequences are identical share a domain).

Before a CPU's first cpu_frequency event the frequency is unknown: those intervals have
``frequency_khz`` = null and are reported as such (never attributed to an OPP). Perfetto traces may also
hold polled frequencies (``cpu_frequency_polled``: the sys_stats cpufreq readings); the samples taken
before a CPU's first cpu_frequency event fill that gap (df_cpu_frequency_seeded), later ones are not used
(the events are exact, the polls only instants).
"""
from __future__ import annotations

import polars as pl

from abtest.analysis.platform import trace_platform
from abtest.analysis.intervals import (df_cpu_idle_intervals, df_intervals, df_intervals_join, window_of)
from abtest.metric_spec import Aggregation, Direction, Grouping, MetricSpec, MetricValue

EVENTS = ("cpu_frequency",)
OPTIONAL_EVENTS = ("cpu_idle", "cpu_frequency_limits", "cpu_frequency_polled")

__all__ = ["EVENTS", "OPTIONAL_EVENTS", "df_cpu_frequency_seeded", "df_frequency_intervals", "df_cpu_domains", "df_opp_residency",
           "df_domain_opp_residency", "df_frequency_stats", "df_transitions", "df_oscillations",
           "plot_opp_residency", "FrequencyAnalysis", "summary"]


def df_cpu_frequency_seeded(cpu_frequency: pl.DataFrame, polled: pl.DataFrame | None) -> pl.DataFrame:
    """``ts (ns), cpu, frequency_khz`` events, plus the polled samples (``cpu_frequency_polled``) of each CPU
    taken before its first cpu_frequency event (all of them for a CPU without events), in time order.

    Events: cpu_frequency, cpu_frequency_polled.
    """
    ev = cpu_frequency.select("ts", pl.col("cpu").cast(pl.Int32), pl.col("frequency_khz").cast(pl.Int64))
    if polled is None or polled.is_empty():
        return ev
    first = ev.group_by("cpu").agg(pl.col("ts").min().alias("_first"))
    seeds = (polled.select("ts", pl.col("cpu").cast(pl.Int32), pl.col("frequency_khz").cast(pl.Int64))
             .join(first, on="cpu", how="left")
             .filter(pl.col("_first").is_null() | (pl.col("ts") < pl.col("_first"))).drop("_first"))
    return pl.concat([seeds, ev]).sort("ts", "cpu", maintain_order=True)


def df_frequency_intervals(cpu_frequency: pl.DataFrame, *, start_ns: int | None = None, end_ns: int | None = None,
                           cpus: list[int] | None = None) -> pl.DataFrame:
    """Per-CPU frequency intervals: ``cpu, ts (ns), dur (ns), frequency_khz`` (null = not yet known).

    Events: cpu_frequency.
    """
    ev = cpu_frequency.select(pl.col("cpu").cast(pl.Int32), "ts", pl.col("frequency_khz").cast(pl.Int64))
    return df_intervals(ev, "frequency_khz", keys="cpu", start_ns=start_ns, end_ns=end_ns, all_keys=cpus)


def df_cpu_domains(cpu_frequency: pl.DataFrame, platform: dict | None = None) -> pl.DataFrame:
    """``cpu, domain`` (Int32): from the platform, else inferred from identical frequency sequences
    (domain = smallest CPU of the group). Events: cpu_frequency."""
    if platform and platform.get("cpus"):
        return pl.DataFrame([(c["cpu"], c["domain"]) for c in platform["cpus"]], schema={"cpu": pl.Int32, "domain": pl.Int32},
                            orient="row")
    seqs = (cpu_frequency.sort("ts").group_by("cpu", maintain_order=True)
            .agg(pl.col("frequency_khz").alias("_seq")))
    return (seqs.with_columns(pl.col("cpu").min().over("_seq").alias("domain"))
            .select(pl.col("cpu").cast(pl.Int32), pl.col("domain").cast(pl.Int32)).sort("cpu"))


def _with_idle(freq_iv: pl.DataFrame, cpu_idle: pl.DataFrame | None, start_ns: int, end_ns: int) -> pl.DataFrame:
    """freq intervals + ``idle`` column (Boolean; null when cpu_idle is absent or the state is unknown)."""
    if cpu_idle is None:
        return freq_iv.with_columns(pl.lit(None, pl.Boolean).alias("idle"))
    idle_iv = df_cpu_idle_intervals(cpu_idle, start_ns=start_ns, end_ns=end_ns,
                                    cpus=freq_iv["cpu"].unique().to_list()).drop("state")
    return df_intervals_join(freq_iv, idle_iv, keys="cpu")


def df_opp_residency(cpu_frequency: pl.DataFrame, cpu_idle: pl.DataFrame | None = None, *,
                     start_ns: int | None = None, end_ns: int | None = None) -> pl.DataFrame:
    """OPP residency per CPU.

    Columns: cpu, frequency_khz (null = unknown, before the first event), time_ns (total time at that
    frequency in the window), pct (% of the window), active_ns (time not idle; null without cpu_idle),
    active_pct (% of the CPU's active time in the window; null without cpu_idle).
    Events: cpu_frequency; optional cpu_idle.
    """
    start_ns, end_ns = window_of(cpu_frequency, start_ns, end_ns)
    iv = _with_idle(df_frequency_intervals(cpu_frequency, start_ns=start_ns, end_ns=end_ns), cpu_idle, start_ns, end_ns)
    have_idle = cpu_idle is not None
    res = iv.group_by("cpu", "frequency_khz").agg(
        pl.col("dur").sum().alias("time_ns"),
        (pl.col("dur").filter(pl.col("idle") == False).sum() if have_idle  # noqa: E712
         else pl.lit(None, pl.Int64)).alias("active_ns"),
    ).sort("cpu", "frequency_khz", nulls_last=True)
    return res.with_columns(
        (100.0 * pl.col("time_ns") / (end_ns - start_ns)).alias("pct"),
        (100.0 * pl.col("active_ns") / pl.col("active_ns").sum().over("cpu"))
        .alias("active_pct"),
    ).select("cpu", "frequency_khz", "time_ns", "pct", "active_ns", "active_pct")


def df_domain_opp_residency(cpu_frequency: pl.DataFrame, cpu_idle: pl.DataFrame | None = None, *,
                            platform: dict | None = None, start_ns: int | None = None,
                            end_ns: int | None = None) -> pl.DataFrame:
    """OPP residency per frequency domain.

    The domain's frequency is that of its first CPU with cpu_frequency events. Active = at least one CPU of
    the domain not idle. Columns: domain, frequency_khz, time_ns, pct (of window), active_ns (null without
    cpu_idle), active_pct (% of the domain's active time in the window).
    Events: cpu_frequency; optional cpu_idle.
    """
    start_ns, end_ns = window_of(cpu_frequency, start_ns, end_ns)
    doms = df_cpu_domains(cpu_frequency, platform)
    lead = (doms.join(cpu_frequency.select(pl.col("cpu").cast(pl.Int32)).unique(), on="cpu")
            .group_by("domain").agg(pl.col("cpu").min().alias("lead_cpu")))
    freq_iv = (df_frequency_intervals(cpu_frequency, start_ns=start_ns, end_ns=end_ns)
               .join(lead, left_on="cpu", right_on="lead_cpu").drop("cpu"))
    if cpu_idle is None:
        iv = freq_iv.with_columns(pl.lit(None, pl.Boolean).alias("idle"))
    else:
        idle_iv = df_cpu_idle_intervals(cpu_idle, start_ns=start_ns, end_ns=end_ns, cpus=doms["cpu"].to_list())
        # number of busy CPUs per domain: +1 at each active interval start, -1 at its end
        act = idle_iv.filter(pl.col("idle") == False).join(doms, on="cpu")  # noqa: E712
        steps = pl.concat([act.select("domain", "ts", pl.lit(1).alias("d")),
                           act.select("domain", (pl.col("ts") + pl.col("dur")).alias("ts"), pl.lit(-1).alias("d"))])
        steps = (steps.group_by("domain", "ts").agg(pl.col("d").sum()).sort("domain", "ts")
                 .with_columns(pl.col("d").cum_sum().over("domain").alias("n_busy")))
        busy = df_intervals(steps, "n_busy", keys="domain", start_ns=start_ns, end_ns=end_ns, initial=0,
                            all_keys=doms["domain"].unique().to_list())
        iv = df_intervals_join(freq_iv.sort("domain", "ts"), busy, keys="domain").with_columns(
            (pl.col("n_busy") == 0).alias("idle"))
    res = iv.group_by("domain", "frequency_khz").agg(
        pl.col("dur").sum().alias("time_ns"),
        (pl.col("dur").filter(pl.col("idle") == False).sum() if cpu_idle is not None  # noqa: E712
         else pl.lit(None, pl.Int64)).alias("active_ns"),
    ).sort("domain", "frequency_khz", nulls_last=True)
    return res.with_columns(
        (100.0 * pl.col("time_ns") / (end_ns - start_ns)).alias("pct"),
        (100.0 * pl.col("active_ns") / pl.col("active_ns").sum().over("domain"))
        .alias("active_pct"),
    ).select("domain", "frequency_khz", "time_ns", "pct", "active_ns", "active_pct")


def df_transitions(cpu_frequency: pl.DataFrame) -> pl.DataFrame:
    """Frequency changes per CPU (events that repeat the current value are not transitions).

    Columns: cpu, ts (ns), from_khz, to_khz, held_ns (how long from_khz was in force; null for the first).
    Events: cpu_frequency.
    """
    ev = (cpu_frequency.select(pl.col("cpu").cast(pl.Int32), "ts", pl.col("frequency_khz").cast(pl.Int64))
          .sort("cpu", "ts"))
    ev = ev.with_columns(pl.col("frequency_khz").shift(1).over("cpu").alias("from_khz"))
    ch = ev.filter(pl.col("from_khz").is_null() | (pl.col("from_khz") != pl.col("frequency_khz")))
    ch = ch.with_columns(pl.col("ts").shift(1).over("cpu").alias("_prev_ts"))
    return ch.filter(pl.col("from_khz").is_not_null()).select(
        "cpu", "ts", "from_khz", pl.col("frequency_khz").alias("to_khz"),
        (pl.col("ts") - pl.col("_prev_ts")).alias("held_ns"))


def df_frequency_stats(cpu_frequency: pl.DataFrame, cpu_idle: pl.DataFrame | None = None, *,
                       start_ns: int | None = None, end_ns: int | None = None) -> pl.DataFrame:
    """Per-CPU frequency statistics over the window.

    Columns: cpu, events (cpu_frequency events in the window), event_mean_khz (plain mean of the requested
    values), time_weighted_khz (over the time the frequency is known), active_time_weighted_khz (over
    non-idle time; null without cpu_idle), known_ns (time with a known frequency), transitions (value
    changes in the window), transitions_per_s (per second of window).
    Events: cpu_frequency; optional cpu_idle.
    """
    start_ns, end_ns = window_of(cpu_frequency, start_ns, end_ns)
    iv = _with_idle(df_frequency_intervals(cpu_frequency, start_ns=start_ns, end_ns=end_ns), cpu_idle, start_ns, end_ns)
    known = iv.filter(pl.col("frequency_khz").is_not_null())
    f = pl.col("frequency_khz").cast(pl.Float64)
    act = pl.col("idle") == False  # noqa: E712
    tw = known.group_by("cpu").agg(
        pl.col("dur").sum().alias("known_ns"),
        ((f * pl.col("dur")).sum() / pl.col("dur").sum()).alias("time_weighted_khz"),
        ((f * pl.col("dur")).filter(act).sum() / pl.col("dur").filter(act).sum()).alias("active_time_weighted_khz"),
    )
    inwin = cpu_frequency.filter((pl.col("ts") >= start_ns) & (pl.col("ts") < end_ns))
    evs = inwin.group_by(pl.col("cpu").cast(pl.Int32)).agg(
        pl.len().cast(pl.Int64).alias("events"), pl.col("frequency_khz").cast(pl.Float64).mean().alias("event_mean_khz"))
    tr = df_transitions(cpu_frequency).filter((pl.col("ts") >= start_ns) & (pl.col("ts") < end_ns))
    trc = tr.group_by("cpu").agg(pl.len().cast(pl.Int64).alias("transitions"))
    dur_s = (end_ns - start_ns) / 1e9
    out = (tw.join(evs, on="cpu", how="full", coalesce=True).join(trc, on="cpu", how="left")
           .with_columns(pl.col("transitions").fill_null(0), pl.col("events").fill_null(0)))
    out = out.with_columns((pl.col("transitions") / dur_s if dur_s > 0 else pl.lit(None, pl.Float64)).alias("transitions_per_s"))
    if cpu_idle is None:
        out = out.with_columns(pl.lit(None, pl.Float64).alias("active_time_weighted_khz"))
    return out.select("cpu", "events", "event_mean_khz", "time_weighted_khz", "active_time_weighted_khz",
                      "known_ns", "transitions", "transitions_per_s").sort("cpu")


def df_oscillations(cpu_frequency: pl.DataFrame, *, span_pct: float = 50.0, within_ms: float = 20.0,
                    platform: dict | None = None, start_ns: int | None = None, end_ns: int | None = None) -> pl.DataFrame:
    """Rapid swings between far-apart OPPs (e.g. uclamp max-aggregation square waves), per CPU.

    A *rapid large transition* changes the frequency by at least ``span_pct`` % of the CPU's OPP range
    (platform OPPs when known, else the observed min..max) after the previous level was held for at most
    ``within_ms`` ms. An *oscillation* is a rapid large transition reversing the direction of the previous
    rapid large transition. Columns: cpu, range_khz, transitions, rapid_transitions, oscillations,
    oscillations_per_s. Events: cpu_frequency.
    """
    start_ns, end_ns = window_of(cpu_frequency, start_ns, end_ns)
    tr = df_transitions(cpu_frequency).filter((pl.col("ts") >= start_ns) & (pl.col("ts") < end_ns))
    if platform and platform.get("domains"):
        rng = pl.DataFrame([(c, max(o["frequency_khz"] for o in d["opps"]) - min(o["frequency_khz"] for o in d["opps"]))
                            for d in platform["domains"] if d["opps"] for c in d["cpus"]],
                           schema={"cpu": pl.Int32, "range_khz": pl.Int64}, orient="row")
    else:
        rng = cpu_frequency.group_by(pl.col("cpu").cast(pl.Int32)).agg(
            (pl.col("frequency_khz").max() - pl.col("frequency_khz").min()).cast(pl.Int64).alias("range_khz"))
    tr = tr.join(rng, on="cpu", how="left")
    delta = pl.col("to_khz") - pl.col("from_khz")
    rapid = ((delta.abs() >= span_pct / 100.0 * pl.col("range_khz")) & (pl.col("range_khz") > 0)
             & (pl.col("held_ns") <= within_ms * 1e6))
    tr = tr.with_columns(rapid.fill_null(False).alias("rapid"), delta.sign().alias("dir"))
    rap = tr.filter("rapid").with_columns(pl.col("dir").shift(1).over("cpu").alias("prev_dir"))
    osc = rap.filter(pl.col("prev_dir").is_not_null() & (pl.col("dir") != pl.col("prev_dir")))
    out = (rng.join(tr.group_by("cpu").agg(pl.len().alias("transitions")), on="cpu", how="left")
           .join(rap.group_by("cpu").agg(pl.len().alias("rapid_transitions")), on="cpu", how="left")
           .join(osc.group_by("cpu").agg(pl.len().alias("oscillations")), on="cpu", how="left")
           .with_columns(pl.col("transitions", "rapid_transitions", "oscillations").fill_null(0).cast(pl.Int64)))
    dur_s = (end_ns - start_ns) / 1e9
    return out.with_columns((pl.col("oscillations") / dur_s if dur_s > 0 else pl.lit(None, pl.Float64))
                            .alias("oscillations_per_s")).sort("cpu")


def plot_opp_residency(residency: pl.DataFrame, *, key: str = "cpu", active: bool = False, ax=None):
    """Stacked bars of OPP residency (% of window, or % of active time) per CPU or domain.

    ``residency`` is df_opp_residency (key="cpu") or df_domain_opp_residency (key="domain").
    Returns the matplotlib Figure.
    """
    import matplotlib.pyplot as plt
    col = "active_pct" if active else "pct"
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(8, 4))
    data = residency.filter(pl.col("frequency_khz").is_not_null() & pl.col(col).is_not_null())
    keys = sorted(data[key].unique().to_list())
    freqs = sorted(data["frequency_khz"].unique().to_list())
    bottoms = [0.0] * len(keys)
    cmap = plt.get_cmap("viridis", max(len(freqs), 1))
    for i, f in enumerate(freqs):
        vals = [float(data.filter((pl.col(key) == k) & (pl.col("frequency_khz") == f))[col].sum()) for k in keys]
        ax.bar([str(k) for k in keys], vals, bottom=bottoms, color=cmap(i), label=f"{f / 1000:.0f} MHz")
        bottoms = [b + v for b, v in zip(bottoms, vals)]
    ax.set_xlabel(key)
    ax.set_ylabel("% of active time" if active else "% of window")
    ax.set_title("OPP residency" + (" (active)" if active else ""))
    ax.legend(fontsize="small", ncol=1 + len(freqs) // 16, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


def trace_cpu_frequency(trace) -> pl.DataFrame:
    """The trace's cpu_frequency events, seeded with its polled samples when it has them (whole trace)."""
    polled = trace.df("cpu_frequency_polled", windowed=False) if trace.has_events("cpu_frequency_polled") else None
    return df_cpu_frequency_seeded(trace.df("cpu_frequency", windowed=False), polled)


class FrequencyAnalysis:
    """The frequency analyses bound to a Trace (``trace.frequency``); window and platform come from it."""

    def __init__(self, trace):
        self.trace = trace

    def _freq(self, what: str) -> pl.DataFrame:
        self.trace.require(f"frequency.{what}", *EVENTS)
        return trace_cpu_frequency(self.trace)

    def _idle(self) -> pl.DataFrame | None:
        return self.trace.df("cpu_idle", windowed=False) if self.trace.has_events("cpu_idle") else None

    def _win(self) -> dict:
        return {"start_ns": self.trace.start_ns, "end_ns": self.trace.end_ns}

    def df_frequency_intervals(self) -> pl.DataFrame:
        return df_frequency_intervals(self._freq("df_frequency_intervals"), **self._win())

    def df_opp_residency(self) -> pl.DataFrame:
        return df_opp_residency(self._freq("df_opp_residency"), self._idle(), **self._win())

    def df_domain_opp_residency(self) -> pl.DataFrame:
        return df_domain_opp_residency(self._freq("df_domain_opp_residency"), self._idle(),
                                       platform=trace_platform(self.trace), **self._win())

    def df_frequency_stats(self) -> pl.DataFrame:
        return df_frequency_stats(self._freq("df_frequency_stats"), self._idle(), **self._win())

    def df_transitions(self) -> pl.DataFrame:
        w = self._win()
        tr = df_transitions(self._freq("df_transitions"))
        return tr.filter((pl.col("ts") >= w["start_ns"]) & (pl.col("ts") < w["end_ns"]))

    def df_oscillations(self, span_pct: float = 50.0, within_ms: float = 20.0) -> pl.DataFrame:
        return df_oscillations(self._freq("df_oscillations"), span_pct=span_pct, within_ms=within_ms,
                               platform=trace_platform(self.trace), **self._win())

    def plot_opp_residency(self, *, per_domain: bool = False, active: bool = False, ax=None):
        if per_domain:
            return plot_opp_residency(self.df_domain_opp_residency(), key="domain", active=active, ax=ax)
        return plot_opp_residency(self.df_opp_residency(), key="cpu", active=active, ax=ax)


def summary(trace) -> dict:
    """JSON-serialisable frequency summary (stable keys, units in names); {} without cpu_frequency.

    Keys: per_cpu: {cpu: {time_weighted_khz, active_time_weighted_khz, transitions, transitions_per_s,
    oscillations, opp_residency_pct: {khz: pct}, opp_active_residency_pct: {khz: pct}}}.
    """
    if not trace.has_events(*EVENTS):
        return {}
    fa = FrequencyAnalysis(trace)
    stats = fa.df_frequency_stats()
    osc = fa.df_oscillations()
    res = fa.df_opp_residency().filter(pl.col("frequency_khz").is_not_null())
    per_cpu: dict[str, dict] = {}
    for row in stats.iter_rows(named=True):
        c = row["cpu"]
        r = res.filter(pl.col("cpu") == c)
        o = osc.filter(pl.col("cpu") == c)
        per_cpu[str(c)] = {
            "time_weighted_khz": row["time_weighted_khz"],
            "active_time_weighted_khz": row["active_time_weighted_khz"],
            "transitions": row["transitions"],
            "transitions_per_s": row["transitions_per_s"],
            "oscillations": int(o["oscillations"][0]) if o.height else 0,
            "opp_residency_pct": {str(k): v for k, v in r.select("frequency_khz", "pct").iter_rows()},
            "opp_active_residency_pct": {str(k): v for k, v in r.select("frequency_khz", "active_pct").iter_rows()
                                         if v is not None},
        }
    return {"per_cpu": per_cpu}


# --------------------------------------------------------------------------------------------
# Declared metrics (abtest.analysis.registry)
# --------------------------------------------------------------------------------------------
CPU_MEAN_MHZ = MetricSpec(
    "frequency.cpu.{cpu}.mean_mhz", "MHz", Direction.NONE, Aggregation.MEAN, Grouping.CPU, title="mean frequency",
    description="Time-weighted mean frequency of the CPU over the time its frequency is known (cpu_frequency).")
CPU_ACTIVE_MEAN_MHZ = MetricSpec(
    "frequency.cpu.{cpu}.active_mean_mhz", "MHz", Direction.NONE, Aggregation.MEAN, Grouping.CPU,
    title="mean frequency when active",
    description="Time-weighted mean frequency over the CPU's non-idle time (needs cpu_idle).")
CPU_TRANSITIONS_PER_S = MetricSpec(
    "frequency.cpu.{cpu}.transitions_per_s", "1/s", Direction.NONE, Aggregation.MEAN, Grouping.CPU,
    title="frequency transitions", description="Frequency changes of the CPU per second of window.")

OPP_RESIDENCY_PCT = MetricSpec(
    "frequency.opp.{opp}.residency_pct", "%", Direction.NONE, Aggregation.MEAN, Grouping.OPP,
    title="OPP residency",
    description="Share of the window the frequency domain (named by its first CPU) spent at this OPP; group "
                "'cpu<N>@<kHz>'. Time before the domain's first cpu_frequency event is unknown and not counted.")

METRICS = (CPU_MEAN_MHZ, CPU_ACTIVE_MEAN_MHZ, CPU_TRANSITIONS_PER_S, OPP_RESIDENCY_PCT)


def opp_group(domain: int, khz: int) -> str:
    """The group value of an OPP metric: "cpu<first CPU of the domain>@<kHz>"."""
    return f"cpu{domain}@{khz}"


def split_opp_group(group: str) -> tuple[int, int]:
    """(domain's first CPU, kHz) of an opp_group() value."""
    dom, _, khz = group.partition("@")
    return int(dom.removeprefix("cpu")), int(khz)


def metrics(trace, options=None) -> list[MetricValue]:
    """The declared frequency metrics of one trace (per CPU, per domain OPP). Needs cpu_frequency."""
    fa = FrequencyAnalysis(trace)
    stats = fa.df_frequency_stats()
    out: list[MetricValue] = []
    res = fa.df_domain_opp_residency().filter(pl.col("frequency_khz").is_not_null())
    out += [MetricValue(OPP_RESIDENCY_PCT, float(pct), opp_group(dom, khz))
            for dom, khz, pct in res.select("domain", "frequency_khz", "pct").iter_rows()]
    for r in stats.iter_rows(named=True):  # one row per CPU
        cpu = str(r["cpu"])
        if r["time_weighted_khz"] is not None:
            out.append(MetricValue(CPU_MEAN_MHZ, r["time_weighted_khz"] / 1000.0, cpu))
        if r["active_time_weighted_khz"] is not None:
            out.append(MetricValue(CPU_ACTIVE_MEAN_MHZ, r["active_time_weighted_khz"] / 1000.0, cpu))
        if r["transitions_per_s"] is not None:
            out.append(MetricValue(CPU_TRANSITIONS_PER_S, float(r["transitions_per_s"]), cpu))
    return out
