"""CPU frequency: OPP residency (total and active), average frequency per CPU and per domain, transitions,
rapid oscillation.

Sources, in one change stream ``ts, cpu, frequency_khz, source`` (frequency_changes):

* ``cpu_frequency`` kernel events (source "kernel"): cpufreq emits one per CPU of a policy each time it
  changes the frequency;
* the same event carried by trace_marker text (source "marker"; abtest.analysis.meta_events): devlib /
  LISA / Workload Automation write every CPU's frequency when tracing starts and stops
  (``cpu_frequency_devlib: state=<kHz> cpu_id=<cpu>``), so a CPU whose frequency never changes still has a
  known frequency;
* perfetto's polled sys_stats readings (``cpu_frequency_polled``, source "polled"), used only before a
  CPU's first kernel event (the events are exact, the polls only instants).

``cpu_idle`` (when present) splits active time (CPU not idle) from total time. Frequency domains come
from the platform when known, else they are inferred (CPUs whose frequency sequences are identical share a
domain); a domain is named by its first CPU (``domain`` column) or by its CPUs (``cluster``, see
abtest.analysis.clusters).

Unknown time: before a CPU's first known value (from any source) the frequency is unknown. Those
intervals have ``frequency_khz`` = null and are reported as such (``unknown_pct``), never attributed to an
OPP, so residency shares plus the unknown share sum to 100 %.

Transitions are counted as cpufreq's ``stats/total_trans`` counts them: every kernel event whose
frequency differs from the value in force before it (known from any source); a CPU's first kernel event
counts when nothing was known before it (the kernel emits the event only on a change). Marker and polled
samples are state, never transitions.
"""

from __future__ import annotations

import polars as pl

from abtest.analysis.clusters import cpus_label, df_domains_from_frequency
from abtest.analysis.intervals import df_cpu_idle_intervals, df_intervals, df_intervals_join, window_of
from abtest.analysis.meta_events import meta_cpu_frequency
from abtest.analysis.per_trace import per_trace
from abtest.analysis.platform import trace_platform
from abtest.metric_spec import Aggregation, Direction, Grouping, MetricSpec, MetricValue, TableSpec, WindowCombine
from abtest.trace.errors import MissingEventsError

# cpu_frequency kernel events, or only marker-carried ones (devlib): either is enough, so none is required
EVENTS: tuple[str, ...] = ()
OPTIONAL_EVENTS = ("cpu_frequency", "marker", "cpu_idle", "cpu_frequency_limits", "cpu_frequency_polled")

__all__ = [
    "EVENTS",
    "OPTIONAL_EVENTS",
    "df_cpu_frequency_seeded",
    "df_frequency_changes",
    "frequency_changes",
    "df_frequency_intervals",
    "df_cpu_domains",
    "df_opp_residency",
    "df_domain_opp_residency",
    "df_domain_frequency_stats",
    "df_frequency_stats",
    "df_transitions",
    "df_oscillations",
    "plot_opp_residency",
    "FrequencyAnalysis",
]


def df_cpu_frequency_seeded(cpu_frequency: pl.DataFrame, polled: pl.DataFrame | None) -> pl.DataFrame:
    """``ts (ns), cpu, frequency_khz`` events, plus the polled samples (``cpu_frequency_polled``) of each CPU
    taken before its first cpu_frequency event (all of them for a CPU without events), in time order.

    Events: cpu_frequency, cpu_frequency_polled.
    """
    ev = cpu_frequency.select("ts", pl.col("cpu").cast(pl.Int32), pl.col("frequency_khz").cast(pl.Int64))
    if polled is None or polled.is_empty():
        return ev
    first = ev.group_by("cpu").agg(pl.col("ts").min().alias("_first"))
    seeds = (
        polled.select("ts", pl.col("cpu").cast(pl.Int32), pl.col("frequency_khz").cast(pl.Int64))
        .join(first, on="cpu", how="left")
        .filter(pl.col("_first").is_null() | (pl.col("ts") < pl.col("_first")))
        .drop("_first")
    )
    return pl.concat([seeds, ev]).sort("ts", "cpu", maintain_order=True)


def df_frequency_changes(
    cpu_frequency: pl.DataFrame | None, *, marker: pl.DataFrame | None = None, polled: pl.DataFrame | None = None
) -> pl.DataFrame:
    """The frequency change stream of all sources: ``ts (ns), cpu (Int32), frequency_khz (Int64), source``
    ("kernel" | "marker" | "polled", see the module docstring), sorted by ts (kernel first at equal ts).

    Events: cpu_frequency; optional marker (devlib/LISA meta events), cpu_frequency_polled.
    """
    schema = {"ts": pl.Int64, "cpu": pl.Int32, "frequency_khz": pl.Int64, "source": pl.Utf8}
    parts = []
    if cpu_frequency is not None and not cpu_frequency.is_empty():
        parts.append(
            cpu_frequency.select(
                pl.col("ts").cast(pl.Int64),
                pl.col("cpu").cast(pl.Int32),
                pl.col("frequency_khz").cast(pl.Int64),
                pl.lit("kernel").alias("source"),
            )
        )
    kernel = parts[0] if parts else pl.DataFrame(schema=schema)
    if polled is not None and not polled.is_empty():
        seeded = df_cpu_frequency_seeded(kernel.drop("source"), polled)
        parts.append(
            seeded.join(kernel.select("ts", "cpu"), on=["ts", "cpu"], how="anti")
            .with_columns(pl.lit("polled").alias("source"))
            .select(list(schema))
        )
    if marker is not None and not marker.is_empty():
        parts.append(meta_cpu_frequency(marker).select(list(schema)))
    if not parts:
        return pl.DataFrame(schema=schema)
    order = pl.col("source").replace_strict({"kernel": 0, "polled": 1, "marker": 2}, return_dtype=pl.Int8)
    return (
        pl.concat([p.cast(schema) for p in parts])
        .with_columns(order.alias("_o"))
        .sort("ts", "_o", "cpu", maintain_order=True)
        .drop("_o")
    )


def df_frequency_intervals(
    cpu_frequency: pl.DataFrame,
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
    cpus: list[int] | None = None,
) -> pl.DataFrame:
    """Per-CPU frequency intervals: ``cpu, ts (ns), dur (ns), frequency_khz`` (null = not yet known).

    Events: cpu_frequency.
    """
    ev = cpu_frequency.select(pl.col("cpu").cast(pl.Int32), "ts", pl.col("frequency_khz").cast(pl.Int64))
    return df_intervals(ev, "frequency_khz", keys="cpu", start_ns=start_ns, end_ns=end_ns, all_keys=cpus)


def df_cpu_domains(cpu_frequency: pl.DataFrame, platform: dict | None = None) -> pl.DataFrame:
    """``cpu, domain`` (Int32; domain = the smallest CPU of the frequency domain): from the platform, else
    inferred from identical frequency sequences (abtest.analysis.clusters). Events: cpu_frequency."""
    if platform and platform.get("cpus"):
        doms = pl.DataFrame(
            [(c["cpu"], c["domain"]) for c in platform["cpus"]],
            schema={"cpu": pl.Int32, "domain": pl.Int32},
            orient="row",
        )
        return doms.select("cpu", pl.col("cpu").min().over("domain").alias("domain")).sort("cpu")
    kern = cpu_frequency.filter(pl.col("source") == "kernel") if "source" in cpu_frequency.columns else cpu_frequency
    return df_domains_from_frequency(kern if not kern.is_empty() else cpu_frequency)


def _with_idle(freq_iv: pl.DataFrame, cpu_idle: pl.DataFrame | None, start_ns: int, end_ns: int) -> pl.DataFrame:
    """freq intervals + ``idle`` column (Boolean; null when cpu_idle is absent or the state is unknown)."""
    if cpu_idle is None:
        return freq_iv.with_columns(pl.lit(None, pl.Boolean).alias("idle"))
    idle_iv = df_cpu_idle_intervals(
        cpu_idle, start_ns=start_ns, end_ns=end_ns, cpus=freq_iv["cpu"].unique().to_list()
    ).drop("state")
    return df_intervals_join(freq_iv, idle_iv, keys="cpu")


def df_opp_residency(
    cpu_frequency: pl.DataFrame,
    cpu_idle: pl.DataFrame | None = None,
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
) -> pl.DataFrame:
    """OPP residency per CPU.

    Columns: cpu, frequency_khz (null = unknown, before the first event), time_ns (total time at that
    frequency in the window), pct (% of the window), active_ns (time not idle; null without cpu_idle),
    active_pct (% of the CPU's active time in the window; null without cpu_idle).
    Events: cpu_frequency; optional cpu_idle.
    """
    start_ns, end_ns = window_of(cpu_frequency, start_ns, end_ns)
    iv = _with_idle(df_frequency_intervals(cpu_frequency, start_ns=start_ns, end_ns=end_ns), cpu_idle, start_ns, end_ns)
    have_idle = cpu_idle is not None
    res = (
        iv.group_by("cpu", "frequency_khz")
        .agg(
            pl.col("dur").sum().alias("time_ns"),
            (
                pl.col("dur").filter(pl.col("idle") == False).sum()
                if have_idle  # noqa: E712
                else pl.lit(None, pl.Int64)
            ).alias("active_ns"),
        )
        .sort("cpu", "frequency_khz", nulls_last=True)
    )
    return res.with_columns(
        (100.0 * pl.col("time_ns") / (end_ns - start_ns)).alias("pct"),
        (100.0 * pl.col("active_ns") / pl.col("active_ns").sum().over("cpu")).alias("active_pct"),
    ).select("cpu", "frequency_khz", "time_ns", "pct", "active_ns", "active_pct")


def df_domain_opp_residency(
    cpu_frequency: pl.DataFrame,
    cpu_idle: pl.DataFrame | None = None,
    *,
    platform: dict | None = None,
    start_ns: int | None = None,
    end_ns: int | None = None,
) -> pl.DataFrame:
    """OPP residency per frequency domain.

    The domain's frequency is that of its first CPU with cpu_frequency events. Active = at least one CPU of
    the domain not idle. Columns: domain, frequency_khz, time_ns, pct (of window), active_ns (null without
    cpu_idle), active_pct (% of the domain's active time in the window).
    Events: cpu_frequency; optional cpu_idle.
    """
    start_ns, end_ns = window_of(cpu_frequency, start_ns, end_ns)
    doms = df_cpu_domains(cpu_frequency, platform)
    lead = (
        doms.join(cpu_frequency.select(pl.col("cpu").cast(pl.Int32)).unique(), on="cpu")
        .group_by("domain")
        .agg(pl.col("cpu").min().alias("lead_cpu"))
    )
    freq_iv = (
        df_frequency_intervals(cpu_frequency, start_ns=start_ns, end_ns=end_ns)
        .join(lead, left_on="cpu", right_on="lead_cpu")
        .drop("cpu")
    )
    if cpu_idle is None:
        iv = freq_iv.with_columns(pl.lit(None, pl.Boolean).alias("idle"))
    else:
        idle_iv = df_cpu_idle_intervals(cpu_idle, start_ns=start_ns, end_ns=end_ns, cpus=doms["cpu"].to_list())
        # number of busy CPUs per domain: +1 at each active interval start, -1 at its end
        act = idle_iv.filter(pl.col("idle") == False).join(doms, on="cpu")  # noqa: E712
        steps = pl.concat(
            [
                act.select("domain", "ts", pl.lit(1).alias("d")),
                act.select("domain", (pl.col("ts") + pl.col("dur")).alias("ts"), pl.lit(-1).alias("d")),
            ]
        )
        steps = (
            steps.group_by("domain", "ts")
            .agg(pl.col("d").sum())
            .sort("domain", "ts")
            .with_columns(pl.col("d").cum_sum().over("domain").alias("n_busy"))
        )
        busy = df_intervals(
            steps,
            "n_busy",
            keys="domain",
            start_ns=start_ns,
            end_ns=end_ns,
            initial=0,
            all_keys=doms["domain"].unique().to_list(),
        )
        iv = df_intervals_join(freq_iv.sort("domain", "ts"), busy, keys="domain").with_columns(
            (pl.col("n_busy") == 0).alias("idle")
        )
    res = (
        iv.group_by("domain", "frequency_khz")
        .agg(
            pl.col("dur").sum().alias("time_ns"),
            (
                pl.col("dur").filter(pl.col("idle") == False).sum()
                if cpu_idle is not None  # noqa: E712
                else pl.lit(None, pl.Int64)
            ).alias("active_ns"),
        )
        .sort("domain", "frequency_khz", nulls_last=True)
    )
    return res.with_columns(
        (100.0 * pl.col("time_ns") / (end_ns - start_ns)).alias("pct"),
        (100.0 * pl.col("active_ns") / pl.col("active_ns").sum().over("domain")).alias("active_pct"),
    ).select("domain", "frequency_khz", "time_ns", "pct", "active_ns", "active_pct")


def df_transitions(cpu_frequency: pl.DataFrame) -> pl.DataFrame:
    """Frequency transitions per CPU, counted like cpufreq's ``total_trans``.

    A transition is a kernel event (``source`` "kernel", or any row when the frame has no ``source``)
    whose frequency differs from the value in force before it (known from any source: a marker-carried
    value or a polled sample counts as known); a CPU's first kernel event is a transition when nothing
    was known before it. Marker and polled rows set the state but are never transitions.

    Columns: cpu, ts (ns), from_khz (null: nothing known before), to_khz, held_ns (how long from_khz was in
    force; null when from_khz is null). Events: cpu_frequency (+ the sources of df_frequency_changes).
    """
    src = pl.col("source") if "source" in cpu_frequency.columns else pl.lit("kernel")
    ev = (
        cpu_frequency.select(
            pl.col("cpu").cast(pl.Int32),
            pl.col("ts").cast(pl.Int64),
            pl.col("frequency_khz").cast(pl.Int64),
            src.alias("source"),
        )
        .with_row_index("_o")
        .sort("cpu", "ts", "_o")
    )
    ev = ev.with_columns(pl.col("frequency_khz").shift(1).over("cpu").alias("_prev"))
    ch = ev.filter(pl.col("_prev").is_null() | (pl.col("_prev") != pl.col("frequency_khz")))
    ch = ch.with_columns(
        pl.col("ts").shift(1).over("cpu").alias("_prev_ts"),
        pl.col("frequency_khz").shift(1).over("cpu").alias("from_khz"),
    )
    return ch.filter(pl.col("source") == "kernel").select(
        "cpu",
        "ts",
        "from_khz",
        pl.col("frequency_khz").alias("to_khz"),
        (pl.col("ts") - pl.col("_prev_ts")).alias("held_ns"),
    )


def df_frequency_stats(
    cpu_frequency: pl.DataFrame,
    cpu_idle: pl.DataFrame | None = None,
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
) -> pl.DataFrame:
    """Per-CPU frequency statistics over the window.

    ``cpu_frequency``: a change stream (df_frequency_changes; a plain cpu_frequency table counts as kernel
    events). Columns: cpu, events (kernel cpu_frequency events in the window), marker_samples (marker-carried
    values in the window), event_mean_khz (plain mean of the kernel events' values), time_weighted_khz (over
    the time the frequency is known), active_time_weighted_khz (over non-idle time; null without cpu_idle),
    known_ns (time with a known frequency), unknown_ns (window time before the first known value),
    transitions (df_transitions in the window), transitions_per_s (per second of window).
    Events: cpu_frequency or marker; optional cpu_idle.
    """
    start_ns, end_ns = window_of(cpu_frequency, start_ns, end_ns)
    iv = _with_idle(df_frequency_intervals(cpu_frequency, start_ns=start_ns, end_ns=end_ns), cpu_idle, start_ns, end_ns)
    f = pl.col("frequency_khz").cast(pl.Float64)
    known = pl.col("frequency_khz").is_not_null()
    act = known & (pl.col("idle") == False)  # noqa: E712
    tw = iv.group_by("cpu").agg(
        pl.col("dur").filter(known).sum().alias("known_ns"),
        pl.col("dur").filter(~known).sum().alias("unknown_ns"),
        ((f * pl.col("dur")).filter(known).sum() / pl.col("dur").filter(known).sum()).alias("time_weighted_khz"),
        ((f * pl.col("dur")).filter(act).sum() / pl.col("dur").filter(act).sum()).alias("active_time_weighted_khz"),
    )
    src = pl.col("source") if "source" in cpu_frequency.columns else pl.lit("kernel")
    inwin = cpu_frequency.filter((pl.col("ts") >= start_ns) & (pl.col("ts") < end_ns)).with_columns(src.alias("_src"))
    kern = pl.col("_src") == "kernel"
    evs = inwin.group_by(pl.col("cpu").cast(pl.Int32)).agg(
        kern.sum().cast(pl.Int64).alias("events"),
        (pl.col("_src") == "marker").sum().cast(pl.Int64).alias("marker_samples"),
        pl.col("frequency_khz").filter(kern).cast(pl.Float64).mean().alias("event_mean_khz"),
    )
    tr = df_transitions(cpu_frequency).filter((pl.col("ts") >= start_ns) & (pl.col("ts") < end_ns))
    trc = tr.group_by("cpu").agg(pl.len().cast(pl.Int64).alias("transitions"))
    dur_s = (end_ns - start_ns) / 1e9
    out = (
        tw.join(evs, on="cpu", how="full", coalesce=True)
        .join(trc, on="cpu", how="left")
        .with_columns(pl.col("transitions", "events", "marker_samples").fill_null(0))
    )
    out = out.with_columns(
        (pl.col("transitions") / dur_s if dur_s > 0 else pl.lit(None, pl.Float64)).alias("transitions_per_s")
    )
    if cpu_idle is None:
        out = out.with_columns(pl.lit(None, pl.Float64).alias("active_time_weighted_khz"))
    return out.select(
        "cpu",
        "events",
        "marker_samples",
        "event_mean_khz",
        "time_weighted_khz",
        "active_time_weighted_khz",
        "known_ns",
        "unknown_ns",
        "transitions",
        "transitions_per_s",
    ).sort("cpu")


def df_domain_frequency_stats(
    cpu_frequency: pl.DataFrame,
    cpu_idle: pl.DataFrame | None = None,
    *,
    platform: dict | None = None,
    start_ns: int | None = None,
    end_ns: int | None = None,
) -> pl.DataFrame:
    """Per frequency domain (cluster): the domain's frequency is that of its first CPU with data (as in
    df_domain_opp_residency; cpufreq sets one frequency per policy).

    Columns: domain (first CPU), cluster (its CPUs, "cpu0-3"), cpus (list), mean_khz (time-weighted over the
    known time), active_mean_khz (over the time at least one CPU of the domain is not idle; null without
    cpu_idle), known_ns, unknown_ns, unknown_pct (% of window with no known frequency), transitions
    (df_transitions of the first CPU in the window), transitions_per_s.
    Events: cpu_frequency or marker; optional cpu_idle.
    """
    start_ns, end_ns = window_of(cpu_frequency, start_ns, end_ns)
    res = df_domain_opp_residency(cpu_frequency, cpu_idle, platform=platform, start_ns=start_ns, end_ns=end_ns)
    f = pl.col("frequency_khz").cast(pl.Float64)
    known = pl.col("frequency_khz").is_not_null()
    agg = res.group_by("domain").agg(
        ((f * pl.col("time_ns")).filter(known).sum() / pl.col("time_ns").filter(known).sum()).alias("mean_khz"),
        ((f * pl.col("active_ns")).filter(known).sum() / pl.col("active_ns").filter(known).sum()).alias(
            "active_mean_khz"
        ),
        pl.col("time_ns").filter(known).sum().alias("known_ns"),
        pl.col("time_ns").filter(~known).sum().alias("unknown_ns"),
    )
    doms = df_cpu_domains(cpu_frequency, platform).group_by("domain").agg(pl.col("cpu").sort().alias("cpus"))
    doms = doms.with_columns(pl.col("cpus").map_elements(cpus_label, return_dtype=pl.Utf8).alias("cluster"))
    lead = (
        df_cpu_domains(cpu_frequency, platform)
        .join(cpu_frequency.select(pl.col("cpu").cast(pl.Int32)).unique(), on="cpu")
        .group_by("domain")
        .agg(pl.col("cpu").min().alias("lead_cpu"))
    )
    tr = (
        df_transitions(cpu_frequency)
        .filter((pl.col("ts") >= start_ns) & (pl.col("ts") < end_ns))
        .group_by("cpu")
        .agg(pl.len().cast(pl.Int64).alias("transitions"))
    )
    dur_s = (end_ns - start_ns) / 1e9
    out = (
        agg.join(doms, on="domain", how="left")
        .join(lead, on="domain", how="left")
        .join(tr, left_on="lead_cpu", right_on="cpu", how="left")
        .with_columns(pl.col("transitions").fill_null(0))
    )
    if cpu_idle is None:
        out = out.with_columns(pl.lit(None, pl.Float64).alias("active_mean_khz"))
    return (
        out.with_columns(
            (100.0 * pl.col("unknown_ns") / (end_ns - start_ns)).alias("unknown_pct"),
            (pl.col("transitions") / dur_s if dur_s > 0 else pl.lit(None, pl.Float64)).alias("transitions_per_s"),
        )
        .select(
            "domain",
            "cluster",
            "cpus",
            "mean_khz",
            "active_mean_khz",
            "known_ns",
            "unknown_ns",
            "unknown_pct",
            "transitions",
            "transitions_per_s",
        )
        .sort("domain")
    )


def df_oscillations(
    cpu_frequency: pl.DataFrame,
    *,
    span_pct: float = 50.0,
    within_ms: float = 20.0,
    platform: dict | None = None,
    start_ns: int | None = None,
    end_ns: int | None = None,
) -> pl.DataFrame:
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
        rng = pl.DataFrame(
            [
                (c, max(o["frequency_khz"] for o in d["opps"]) - min(o["frequency_khz"] for o in d["opps"]))
                for d in platform["domains"]
                if d["opps"]
                for c in d["cpus"]
            ],
            schema={"cpu": pl.Int32, "range_khz": pl.Int64},
            orient="row",
        )
    else:
        rng = cpu_frequency.group_by(pl.col("cpu").cast(pl.Int32)).agg(
            (pl.col("frequency_khz").max() - pl.col("frequency_khz").min()).cast(pl.Int64).alias("range_khz")
        )
    tr = tr.join(rng, on="cpu", how="left")
    delta = pl.col("to_khz") - pl.col("from_khz")
    rapid = (
        (delta.abs() >= span_pct / 100.0 * pl.col("range_khz"))
        & (pl.col("range_khz") > 0)
        & (pl.col("held_ns") <= within_ms * 1e6)
    )
    tr = tr.with_columns(rapid.fill_null(False).alias("rapid"), delta.sign().alias("dir"))
    rap = tr.filter("rapid").with_columns(pl.col("dir").shift(1).over("cpu").alias("prev_dir"))
    osc = rap.filter(pl.col("prev_dir").is_not_null() & (pl.col("dir") != pl.col("prev_dir")))
    out = (
        rng.join(tr.group_by("cpu").agg(pl.len().alias("transitions")), on="cpu", how="left")
        .join(rap.group_by("cpu").agg(pl.len().alias("rapid_transitions")), on="cpu", how="left")
        .join(osc.group_by("cpu").agg(pl.len().alias("oscillations")), on="cpu", how="left")
        .with_columns(pl.col("transitions", "rapid_transitions", "oscillations").fill_null(0).cast(pl.Int64))
    )
    dur_s = (end_ns - start_ns) / 1e9
    return out.with_columns(
        (pl.col("oscillations") / dur_s if dur_s > 0 else pl.lit(None, pl.Float64)).alias("oscillations_per_s")
    ).sort("cpu")


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


def frequency_changes(trace) -> pl.DataFrame:
    """The trace's frequency change stream, all sources (df_frequency_changes over the whole trace).
    Raises MissingEventsError when the trace has neither cpu_frequency events nor marker-carried ones."""
    kern = trace.df("cpu_frequency", windowed=False) if trace.has_events("cpu_frequency") else None
    marker = trace.df("marker", windowed=False) if trace.has_events("marker") else None
    polled = trace.df("cpu_frequency_polled", windowed=False) if trace.has_events("cpu_frequency_polled") else None
    ch = df_frequency_changes(kern, marker=marker, polled=polled)
    if ch.is_empty():
        raise MissingEventsError("frequency", ["cpu_frequency"], str(trace.path))
    return ch


def trace_cpu_frequency(trace) -> pl.DataFrame:
    """Alias of frequency_changes (the energy model reads it)."""
    return frequency_changes(trace)


def has_frequency(trace) -> bool:
    """The trace has cpu_frequency events or marker-carried ones."""
    try:
        frequency_changes(trace)
    except MissingEventsError:
        return False
    return True


class FrequencyAnalysis:
    """The frequency analyses bound to a Trace (``trace.frequency``); window and platform come from it."""

    def __init__(self, trace):
        self.trace = trace
        self._changes: pl.DataFrame | None = None
        self._stats: pl.DataFrame | None = None

    def _freq(self, what: str = "") -> pl.DataFrame:
        if self._changes is None:
            self._changes = frequency_changes(self.trace)
        return self._changes

    def _idle(self) -> pl.DataFrame | None:
        return self.trace.df("cpu_idle", windowed=False) if self.trace.has_events("cpu_idle") else None

    def _win(self) -> dict:
        return {"start_ns": self.trace.start_ns, "end_ns": self.trace.end_ns}

    def df_frequency_changes(self) -> pl.DataFrame:
        """The change stream (ts, cpu, frequency_khz, source), whole trace."""
        return self._freq()

    def df_frequency_intervals(self) -> pl.DataFrame:
        return df_frequency_intervals(self._freq(), **self._win())

    def df_opp_residency(self) -> pl.DataFrame:
        return df_opp_residency(self._freq(), self._idle(), **self._win())

    def df_domain_opp_residency(self) -> pl.DataFrame:
        return df_domain_opp_residency(self._freq(), self._idle(), platform=trace_platform(self.trace), **self._win())

    def df_frequency_stats(self) -> pl.DataFrame:
        """df_frequency_stats of the window (computed once per analysis object)."""
        if self._stats is None:
            self._stats = df_frequency_stats(self._freq(), self._idle(), **self._win())
        return self._stats

    def df_domain_frequency_stats(self) -> pl.DataFrame:
        return df_domain_frequency_stats(self._freq(), self._idle(), platform=trace_platform(self.trace), **self._win())

    def df_transitions(self) -> pl.DataFrame:
        w = self._win()
        tr = df_transitions(self._freq())
        return tr.filter((pl.col("ts") >= w["start_ns"]) & (pl.col("ts") < w["end_ns"]))

    def df_oscillations(self, span_pct: float = 50.0, within_ms: float = 20.0) -> pl.DataFrame:
        return df_oscillations(
            self._freq(), span_pct=span_pct, within_ms=within_ms, platform=trace_platform(self.trace), **self._win()
        )

    def plot_opp_residency(self, *, per_domain: bool = False, active: bool = False, ax=None):
        if per_domain:
            return plot_opp_residency(self.df_domain_opp_residency(), key="domain", active=active, ax=ax)
        return plot_opp_residency(self.df_opp_residency(), key="cpu", active=active, ax=ax)


# one facade per trace for the metrics and the declared tables: they share its frequency changes
_facade = per_trace(FrequencyAnalysis)


def _opp_rows(trace) -> pl.DataFrame | None:
    if not has_frequency(trace):
        return None
    return (
        _facade(trace)
        .df_opp_residency()
        .select(
            "cpu",
            pl.when(pl.col("frequency_khz").is_null())
            .then(pl.lit("unknown"))
            .otherwise((pl.col("frequency_khz") / 1000).round(1).cast(pl.Utf8).str.strip_suffix(".0"))
            .alias("frequency_mhz"),
            (pl.col("time_ns") / 1e9).alias("time_s"),
            "pct",
            "active_pct",
        )
    )


def _cpu_rows(trace) -> pl.DataFrame | None:
    if not has_frequency(trace):
        return None
    fa = _facade(trace)
    stats = fa.df_frequency_stats().select("cpu", "transitions")
    return stats.join(fa.df_oscillations().select("cpu", "oscillations"), on="cpu", how="left").with_columns(
        pl.col("oscillations").fill_null(0)
    )


def _source_rows(trace) -> pl.DataFrame | None:
    if not has_frequency(trace):
        return None
    counts = dict(_facade(trace).df_frequency_changes().group_by("source").len().iter_rows())
    return pl.DataFrame(
        {
            "source": ["kernel_events", "marker_samples", "polled_samples"],
            "samples": [int(counts.get(k, 0)) for k in ("kernel", "marker", "polled")],
        }
    )


TABLES = (
    TableSpec(
        "opp_residency",
        "OPP residency per CPU (time at each OPP, % of the window and % of the CPU's active time)",
        "cpu frequency_mhz[MHz] time_s[s] pct[%] active_pct[%]",
        _opp_rows,
        keys=2,
        across="cpu",
        note="unknown: before the CPU's first cpu_frequency event",
    ),
    TableSpec(
        "transitions",
        "Frequency transitions per CPU",
        "cpu transitions oscillations",
        _cpu_rows,
        note="oscillations: swings over half the OPP range that come back within 20 ms",
    ),
    TableSpec(
        "sources",
        "Where the frequencies came from (whole trace)",
        "source samples",
        _source_rows,
    ),
)


# --------------------------------------------------------------------------------------------
# Declared metrics (abtest.analysis.registry)
# --------------------------------------------------------------------------------------------
_KNOWN = (
    "over the time its frequency is known (cpu_frequency events, and devlib/LISA frequencies written to "
    "trace_marker, which give the frequency of a CPU that never changes it)"
)
CPU_MEAN_MHZ = MetricSpec(
    "frequency.cpu.{cpu}.mean_mhz",
    "MHz",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.CPU,
    title="mean frequency",
    description=f"Time-weighted mean frequency of the CPU {_KNOWN}.",
    window=WindowCombine.TIME,
)
CPU_ACTIVE_MEAN_MHZ = MetricSpec(
    "frequency.cpu.{cpu}.active_mean_mhz",
    "MHz",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.CPU,
    title="mean frequency when active",
    description="Time-weighted mean frequency over the CPU's non-idle time (needs cpu_idle).",
    window=WindowCombine.TIME,
)
CPU_TRANSITIONS_PER_S = MetricSpec(
    "frequency.cpu.{cpu}.transitions_per_s",
    "1/s",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.CPU,
    title="frequency transitions",
    description="Frequency transitions of the CPU per second of window, counted like cpufreq's total_trans: every "
    "kernel cpu_frequency event that changes the value in force (the first one too when nothing was "
    "known before it); marker-carried values are state, not transitions.",
    window=WindowCombine.RATE,
)
DOMAIN_MEAN_MHZ = MetricSpec(
    "frequency.cluster.{cluster}.mean_mhz",
    "MHz",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.CLUSTER,
    title="cluster mean frequency",
    description=f"Time-weighted mean frequency of the frequency domain (named by its CPUs, 'cpu0-3'; its first CPU "
    f"with data stands for the domain) {_KNOWN}.",
    window=WindowCombine.TIME,
)
DOMAIN_ACTIVE_MEAN_MHZ = MetricSpec(
    "frequency.cluster.{cluster}.active_mean_mhz",
    "MHz",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.CLUSTER,
    title="cluster mean frequency when active",
    description="Time-weighted mean frequency of the domain over the time at least one of its CPUs is not idle "
    "(needs cpu_idle).",
    window=WindowCombine.TIME,
)
DOMAIN_TRANSITIONS_PER_S = MetricSpec(
    "frequency.cluster.{cluster}.transitions_per_s",
    "1/s",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.CLUSTER,
    title="cluster frequency transitions",
    description="Frequency transitions of the domain (its first CPU's, counted like cpufreq's total_trans) per "
    "second of window.",
    window=WindowCombine.RATE,
)
DOMAIN_UNKNOWN_PCT = MetricSpec(
    "frequency.cluster.{cluster}.unknown_pct",
    "%",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.CLUSTER,
    title="frequency unknown",
    description="Share of the window before the domain's first known frequency: with the domain's OPP residencies "
    "(frequency.opp.*) it sums to 100 %.",
    window=WindowCombine.TIME_APPROX,
)

OPP_RESIDENCY_PCT = MetricSpec(
    "frequency.opp.{opp}.residency_pct",
    "%",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.OPP,
    title="OPP residency",
    description="Share of the window the frequency domain (named by its first CPU) spent at this OPP; group "
    "'cpu<N>@<kHz>'. Time before the domain's first known frequency is reported apart, as "
    "frequency.cluster.{cluster}.unknown_pct.",
    window=WindowCombine.RATE,
)

METRICS = (
    CPU_MEAN_MHZ,
    CPU_ACTIVE_MEAN_MHZ,
    CPU_TRANSITIONS_PER_S,
    DOMAIN_MEAN_MHZ,
    DOMAIN_ACTIVE_MEAN_MHZ,
    DOMAIN_TRANSITIONS_PER_S,
    DOMAIN_UNKNOWN_PCT,
    OPP_RESIDENCY_PCT,
)


def opp_group(domain: int, khz: int) -> str:
    """The group value of an OPP metric: "cpu<first CPU of the domain>@<kHz>"."""
    return f"cpu{domain}@{khz}"


def split_opp_group(group: str) -> tuple[int, int]:
    """(domain's first CPU, kHz) of an opp_group() value."""
    dom, _, khz = group.partition("@")
    return int(dom.removeprefix("cpu")), int(khz)


def metrics(trace, options=None) -> list[MetricValue]:
    """The declared frequency metrics of one trace (per CPU, per domain, per domain OPP). Needs cpu_frequency
    events or marker-carried ones (MissingEventsError otherwise)."""
    fa = _facade(trace)
    stats = fa.df_frequency_stats()
    out: list[MetricValue] = []
    res = fa.df_domain_opp_residency().filter(pl.col("frequency_khz").is_not_null())
    out += [
        MetricValue(OPP_RESIDENCY_PCT, float(pct), opp_group(dom, khz))
        for dom, khz, pct in res.select("domain", "frequency_khz", "pct").iter_rows()
    ]
    for d in fa.df_domain_frequency_stats().iter_rows(named=True):  # one row per domain
        if d["mean_khz"] is not None:
            out.append(MetricValue(DOMAIN_MEAN_MHZ, d["mean_khz"] / 1000.0, d["cluster"]))
        if d["active_mean_khz"] is not None:
            out.append(MetricValue(DOMAIN_ACTIVE_MEAN_MHZ, d["active_mean_khz"] / 1000.0, d["cluster"]))
        if d["transitions_per_s"] is not None:
            out.append(MetricValue(DOMAIN_TRANSITIONS_PER_S, float(d["transitions_per_s"]), d["cluster"]))
        out.append(MetricValue(DOMAIN_UNKNOWN_PCT, float(d["unknown_pct"]), d["cluster"]))
    for r in stats.iter_rows(named=True):  # one row per CPU
        cpu = str(r["cpu"])
        if r["time_weighted_khz"] is not None:
            out.append(MetricValue(CPU_MEAN_MHZ, r["time_weighted_khz"] / 1000.0, cpu))
        if r["active_time_weighted_khz"] is not None:
            out.append(MetricValue(CPU_ACTIVE_MEAN_MHZ, r["active_time_weighted_khz"] / 1000.0, cpu))
        if r["transitions_per_s"] is not None:
            out.append(MetricValue(CPU_TRANSITIONS_PER_S, float(r["transitions_per_s"]), cpu))
    return out
