"""Where a trace's CPU power goes, term by term, so that an A -> B change can be attributed (abtest explain).

The energy model's estimate (abtest.analysis.energy: df_priced_activity + df_static_busy) is a sum of
time x price over intervals, so it splits exactly into terms. Per trace, `df_power_terms` returns one row per
term, in mW averaged over the trace window (and the time the term covers, in ms per s of window):

    kind     "active"  a CPU busy at an OPP, split per task running then (task = comm; "<unknown>" when no
                       sched_switch says who ran)
             "idle"    a CPU in an idle state, per state (priced at the OPP when the model has per-OPP idle power)
             "static"  the domain's static power while any of its CPUs is busy, per OPP
    domain   the frequency domain, named by its CPUs ("cpu0-3", "cpu0,3-5")
    opp_khz  the model OPP priced (null for idle terms without per-OPP power)
    state    idle state index (idle terms), else null
    task     active terms only
    power_mw, time_ms_per_s

The sum of power_mw over a domain's rows equals that domain's `power.estimate.<domain>` exactly (same pricing,
same window); time the model cannot price (unknown frequency or state) is reported by `unpriced_ms_per_s`, not
hidden. Domains map to power channels by size: with 3 domains CPU-Little / CPU-Mid / CPU-Big, with 2
CPU-Little / CPU-Big, with 1 CPU (smallest capacity first; ties by first CPU) — `domain_channels`.
"""

from __future__ import annotations

import polars as pl

from abtest.analysis.energy import df_cpu_activity, df_priced_activity, df_static_busy
from abtest.analysis.intervals import df_intervals_join
from abtest.analysis.placement import df_task_intervals
from abtest.analysis.platform import domain_names, trace_platform
from abtest.trace.errors import AnalysisNotApplicable

EVENTS = ("cpu_frequency",)
OPTIONAL_EVENTS = ("cpu_idle", "sched_switch")
UNKNOWN_TASK = "<unknown>"

TERMS_SCHEMA = {
    "kind": pl.Utf8,
    "domain": pl.Utf8,
    "opp_khz": pl.Int64,
    "state": pl.Int64,
    "task": pl.Utf8,
    "power_mw": pl.Float64,
    "time_ms_per_s": pl.Float64,
}


def domain_channels(platform: dict) -> dict[str, str]:
    """{domain name: power channel} by size (module docstring)."""
    names = domain_names(platform)
    caps: dict[int, float] = {}
    for c in platform["cpus"]:
        caps[c["domain"]] = max(caps.get(c["domain"], 0.0), c.get("capacity") or 0.0)
    order = sorted(names, key=lambda d: (caps.get(d, 0.0), min(c["cpu"] for c in platform["cpus"] if c["domain"] == d)))
    labels = {1: ["CPU"], 2: ["CPU-Little", "CPU-Big"], 3: ["CPU-Little", "CPU-Mid", "CPU-Big"]}.get(len(order))
    if labels is None:
        return {}
    return {names[d]: ch for d, ch in zip(order, labels)}


def df_power_terms(trace, platform: dict | None = None) -> pl.DataFrame:
    """The trace's modelled CPU power as terms (module docstring). Needs cpu_frequency and cpu_idle or
    sched_switch, and a platform with an energy model (ValueError otherwise)."""
    plat = platform or trace_platform(trace)
    if not (plat and plat.get("domains")):
        raise AnalysisNotApplicable(
            f"{trace.path}: attribution needs a platform with an energy model (platform.yml beside "
            "the trace, or --platform)"
        )
    trace.require("attribution", *EVENTS)
    from abtest.analysis.frequency import trace_cpu_frequency

    start, end = trace.start_ns, trace.end_ns
    win_s = max((end - start) / 1e9, 1e-12)
    idle = trace.df("cpu_idle", windowed=False) if trace.has_events("cpu_idle") else None
    sw = trace.df("sched_switch", windowed=False) if trace.has_events("sched_switch") else None
    cpus = [c["cpu"] for c in plat["cpus"]]
    act = df_cpu_activity(
        trace_cpu_frequency(trace),
        cpu_idle=idle,
        sched_switch=None if idle is not None else sw,
        start_ns=start,
        end_ns=end,
        cpus=cpus,
    )
    priced = df_priced_activity(act, plat)
    names = pl.DataFrame(
        {"domain": list(domain_names(plat)), "_name": list(domain_names(plat).values())},
        schema={"domain": pl.Int32, "_name": pl.Utf8},
    )
    busy = priced.filter((pl.col("state") == -1) & pl.col("cpu_mw").is_not_null())
    if sw is not None and busy.height:
        tasks = df_task_intervals(sw, start_ns=start, end_ns=end).select(
            "cpu", "ts", "dur", pl.col("comm").alias("task")
        )
        busy_iv = busy.select("cpu", "ts", "dur", "domain", "opp_khz", "cpu_mw").sort("cpu", "ts")
        joined = df_intervals_join(busy_iv, tasks.sort("cpu", "ts"), keys="cpu")
        # time the task intervals do not cover (e.g. before a CPU's first switch) stays, as <unknown>
        covered = joined.group_by("domain", "opp_khz").agg(
            (pl.col("cpu_mw") * pl.col("dur")).sum().alias("_e"), pl.col("dur").sum().alias("_t")
        )
        whole = busy.group_by("domain", "opp_khz").agg(
            (pl.col("cpu_mw") * pl.col("dur")).sum().alias("_E"), pl.col("dur").sum().alias("_T")
        )
        rest = whole.join(covered, on=["domain", "opp_khz"], how="left").select(
            "domain",
            "opp_khz",
            pl.lit(UNKNOWN_TASK).alias("task"),
            (pl.col("_E") - pl.col("_e").fill_null(0.0)).alias("_e"),
            (pl.col("_T") - pl.col("_t").fill_null(0)).alias("_t"),
        )
        active = pl.concat(
            [
                joined.group_by("domain", "opp_khz", "task").agg(
                    (pl.col("cpu_mw") * pl.col("dur")).sum().alias("_e"), pl.col("dur").sum().alias("_t")
                ),
                rest.filter(pl.col("_t") > 0),
            ],
            how="vertical_relaxed",
        )
    else:
        active = (
            busy.group_by("domain", "opp_khz")
            .agg((pl.col("cpu_mw") * pl.col("dur")).sum().alias("_e"), pl.col("dur").sum().alias("_t"))
            .with_columns(pl.lit(UNKNOWN_TASK).alias("task"))
        )
    idle_t = (
        priced.filter((pl.col("state") >= 0) & pl.col("cpu_mw").is_not_null())
        .group_by("domain", "opp_khz", "state")
        .agg((pl.col("cpu_mw") * pl.col("dur")).sum().alias("_e"), pl.col("dur").sum().alias("_t"))
    )
    static = (
        df_static_busy(priced)
        .group_by("domain", "opp_khz")
        .agg((pl.col("static_mw") * pl.col("dur")).sum().alias("_e"), pl.col("dur").sum().alias("_t"))
    )
    parts = [
        active.select(
            pl.lit("active").alias("kind"),
            "domain",
            "opp_khz",
            pl.lit(None, pl.Int64).alias("state"),
            "task",
            "_e",
            "_t",
        ),
        idle_t.select(
            pl.lit("idle").alias("kind"),
            "domain",
            "opp_khz",
            pl.col("state").cast(pl.Int64),
            pl.lit(None, pl.Utf8).alias("task"),
            "_e",
            "_t",
        ),
        static.select(
            pl.lit("static").alias("kind"),
            "domain",
            "opp_khz",
            pl.lit(None, pl.Int64).alias("state"),
            pl.lit(None, pl.Utf8).alias("task"),
            "_e",
            "_t",
        ),
    ]
    out = pl.concat(
        [
            p.with_columns(
                pl.col("domain").cast(pl.Int32), pl.col("opp_khz").cast(pl.Int64), pl.col("_t").cast(pl.Int64)
            )
            for p in parts
        ],
        how="vertical_relaxed",
    )
    return (
        out.join(names, on="domain", how="left")
        .select(
            "kind",
            pl.col("_name").alias("domain"),
            "opp_khz",
            "state",
            "task",
            (pl.col("_e") / ((end - start) or 1)).alias("power_mw"),  # mW x ns / ns
            (pl.col("_t") / 1e6 / win_s).alias("time_ms_per_s"),
        )
        .sort("domain", "kind", "opp_khz", "state", "task", nulls_last=True)
    )


def unpriced_ms_per_s(trace, platform: dict | None = None) -> float:
    """CPU time per second of window the model cannot price (unknown frequency or state), all CPUs."""
    plat = platform or trace_platform(trace)
    from abtest.analysis.frequency import trace_cpu_frequency

    idle = trace.df("cpu_idle", windowed=False) if trace.has_events("cpu_idle") else None
    sw = trace.df("sched_switch", windowed=False) if trace.has_events("sched_switch") else None
    act = df_cpu_activity(
        trace_cpu_frequency(trace),
        cpu_idle=idle,
        sched_switch=None if idle is not None else sw,
        start_ns=trace.start_ns,
        end_ns=trace.end_ns,
        cpus=[c["cpu"] for c in plat["cpus"]],
    )
    priced = df_priced_activity(act, plat)
    win_s = max((trace.end_ns - trace.start_ns) / 1e9, 1e-12)
    return float(priced.filter(pl.col("cpu_mw").is_null())["dur"].sum()) / 1e6 / win_s
