"""Energy-model estimate (no meter): per CPU, active time at each OPP x the OPP's per-CPU power, plus
idle-state residency x the idle state's power, plus the domain's static power while any of its CPUs is
active. Labelled with the platform's ``energy_model_source``.

Measured power (rails, power.csv, ODPM, BattOr ...) is abtest.analysis.power; `EnergyAnalysis`
(``trace.energy``) offers both for notebooks.
"""

from __future__ import annotations

import polars as pl

from abtest.analysis.intervals import df_cpu_idle_intervals, df_intervals, df_intervals_join, window_of
from abtest.analysis.platform import domain_names, trace_platform
from abtest.analysis.power import df_channel_power, df_power_per_rail, plot_power_per_rail, rail_mapping
from abtest.metric_spec import Aggregation, Direction, Grouping, MetricSpec, MetricValue, TableSpec, WindowCombine
from abtest.trace.errors import AnalysisNotApplicable

MODEL_EVENTS = ("cpu_frequency",)

__all__ = [
    "MODEL_EVENTS",
    "df_cpu_states",
    "df_cpu_activity",
    "df_energy_estimate",
    "energy_estimate_from_activity",
    "EnergyAnalysis",
]


# -- energy model estimate -----------------------------------------------------------------------
def df_cpu_states(
    *,
    cpu_idle: pl.DataFrame | None = None,
    sched_switch: pl.DataFrame | None = None,
    start_ns: int,
    end_ns: int,
    cpus: list[int] | None = None,
) -> pl.DataFrame:
    """Per-CPU ``cpu, ts, dur (ns), state`` (-1 = active, k = idle state k, null = unknown).

    From cpu_idle when given (idle in an unknown state before the first event counts as state 0), else from
    sched_switch (idle = the idle task, pid 0, runs; its idle state is unknown and reported as state 0).
    Events: cpu_idle or sched_switch.
    """
    if cpu_idle is not None:
        act = df_cpu_idle_intervals(cpu_idle, start_ns=start_ns, end_ns=end_ns, cpus=cpus)
        return act.with_columns(
            pl.when(pl.col("idle") & pl.col("state").is_null()).then(0).otherwise(pl.col("state")).alias("state")
        ).drop("idle")
    if sched_switch is not None:
        sw = sched_switch.select(
            pl.col("cpu").cast(pl.Int32),
            "ts",
            pl.when(pl.col("next_pid") == 0).then(0).otherwise(-1).cast(pl.Int64).alias("state"),
        )
        return df_intervals(sw, "state", keys="cpu", start_ns=start_ns, end_ns=end_ns, all_keys=cpus)
    raise AnalysisNotApplicable("needs cpu_idle or sched_switch to tell active from idle time")


def df_cpu_activity(
    cpu_frequency: pl.DataFrame,
    *,
    cpu_idle: pl.DataFrame | None = None,
    sched_switch: pl.DataFrame | None = None,
    start_ns: int,
    end_ns: int,
    cpus: list[int] | None = None,
) -> pl.DataFrame:
    """Per-CPU ``cpu, ts, dur (ns), frequency_khz, state`` (-1 = active, k = idle state k, null = unknown):
    df_cpu_states overlaid with the frequency intervals. Events: cpu_frequency + (cpu_idle or sched_switch).
    """
    freq = df_intervals(
        cpu_frequency.select(pl.col("cpu").cast(pl.Int32), "ts", "frequency_khz"),
        "frequency_khz",
        keys="cpu",
        start_ns=start_ns,
        end_ns=end_ns,
        all_keys=cpus,
    )
    act = df_cpu_states(cpu_idle=cpu_idle, sched_switch=sched_switch, start_ns=start_ns, end_ns=end_ns, cpus=cpus)
    return df_intervals_join(freq, act, keys="cpu")


def _opp_power_table(platform: dict) -> pl.DataFrame:
    rows = []
    for d in platform["domains"]:
        for o in d["opps"]:
            idle = o.get("idle_power_mw") or []
            rows.append(
                {
                    "domain": d["id"],
                    "opp_khz": o["frequency_khz"],
                    "power_mw": o["power_mw"],
                    "static_mw": o["static_mw"],
                    "idle0_mw": idle[0] if len(idle) > 0 else None,
                    "idle1_mw": idle[1] if len(idle) > 1 else None,
                }
            )
    return pl.DataFrame(
        rows,
        schema={
            "domain": pl.Int32,
            "opp_khz": pl.Int64,
            "power_mw": pl.Float64,
            "static_mw": pl.Float64,
            "idle0_mw": pl.Float64,
            "idle1_mw": pl.Float64,
        },
    )


def df_priced_activity(activity: pl.DataFrame, platform: dict) -> pl.DataFrame:
    """Per-CPU activity intervals priced by the energy model: the pricing every estimate and attribution uses.

    ``activity``: df_cpu_activity (cpu, ts, dur, frequency_khz, state). Frequencies not in the model are mapped
    to the lowest model OPP at or above them (else the highest). Columns: cpu, domain, ts, dur (ns),
    frequency_khz, state (-1 active, k idle state k, null unknown), opp_khz (the model OPP priced),
    cpu_mw (busy: the OPP's per-CPU power; idle: the state's power at this OPP when the model has it, else
    the state's power; null: not priced), static_mw (the domain's static power at this OPP, paid while any CPU
    of the domain is busy: see df_static_busy).
    """
    if not platform or not platform.get("domains"):
        raise AnalysisNotApplicable(
            "energy estimate needs a platform with an energy model (see abtest.analysis.platform)"
        )
    doms = pl.DataFrame(
        [(c["cpu"], c["domain"]) for c in platform["cpus"]], schema={"cpu": pl.Int32, "domain": pl.Int32}, orient="row"
    )
    idle_states = pl.DataFrame(
        [(c["cpu"], s["index"], s["power_mw"]) for c in platform["cpus"] for s in c["idle_states"]],
        schema={"cpu": pl.Int32, "state": pl.Int64, "state_mw": pl.Float64},
        orient="row",
    )
    opps = _opp_power_table(platform).sort("opp_khz")
    a = activity.join(doms, on="cpu", how="inner").sort("frequency_khz")
    known_f = a.filter(pl.col("frequency_khz").is_not_null())
    up = known_f.join_asof(
        opps, left_on="frequency_khz", right_on="opp_khz", by="domain", strategy="forward", check_sortedness=False
    )
    top = known_f.join_asof(
        opps, left_on="frequency_khz", right_on="opp_khz", by="domain", strategy="backward", check_sortedness=False
    )
    cols = ["opp_khz", "power_mw", "static_mw", "idle0_mw", "idle1_mw"]
    m = up.with_columns([pl.coalesce(pl.col(c), top[c]).alias(c) for c in cols])
    m = pl.concat([m, a.filter(pl.col("frequency_khz").is_null())], how="diagonal_relaxed")
    m = m.join(idle_states, on=["cpu", "state"], how="left")
    idle_opp_mw = (
        pl.when(pl.col("state") == 0).then(pl.col("idle0_mw")).when(pl.col("state") == 1).then(pl.col("idle1_mw"))
    )
    cpu_mw = (
        pl.when(pl.col("state") == -1)
        .then(pl.col("power_mw"))
        .when(pl.col("state") >= 0)
        .then(pl.coalesce(idle_opp_mw, pl.col("state_mw")))
    )
    return m.with_columns(cpu_mw.alias("cpu_mw")).select(
        "cpu", "domain", "ts", "dur", "frequency_khz", "state", "opp_khz", "cpu_mw", "static_mw"
    )


def df_static_busy(priced: pl.DataFrame) -> pl.DataFrame:
    """The domain's static power while at least one of its CPUs is busy, at the highest static power among the
    CPUs busy at that moment: intervals domain, ts, dur (ns), opp_khz (the OPP of that highest static power),
    static_mw.

    The busy intervals' starts and ends cut each domain's time into elementary segments; in each segment, every
    CPU's busy interval that covers it (at most one per CPU) is found by an as-of join on the segment start, and
    the segment pays the largest of their static powers. Segments where no CPU is busy are not returned."""
    busy = priced.filter(pl.col("state") == -1).select(
        pl.col("domain").cast(pl.Int32),
        "cpu",
        pl.col("ts").cast(pl.Int64),
        (pl.col("ts") + pl.col("dur")).cast(pl.Int64).alias("end"),
        "static_mw",
        pl.col("opp_khz").cast(pl.Int64),
    )
    schema = {"domain": pl.Int32, "ts": pl.Int64, "dur": pl.Int64, "opp_khz": pl.Int64, "static_mw": pl.Float64}
    if busy.height == 0:
        return pl.DataFrame(schema=schema)
    bounds = (
        pl.concat([busy.select("domain", "ts"), busy.select("domain", pl.col("end").alias("ts"))])
        .unique()
        .sort("domain", "ts")
        .with_columns(pl.col("ts").shift(-1).over("domain").alias("seg_end"))
        .filter(pl.col("seg_end").is_not_null())
    )
    grid = bounds.join(busy.select("domain", "cpu").unique(), on="domain").sort("ts")
    covering = grid.join_asof(
        busy.sort("ts").rename({"ts": "busy_ts"}),
        left_on="ts",
        right_on="busy_ts",
        by=["domain", "cpu"],
        strategy="backward",
        check_sortedness=False,
    )
    covering = covering.filter(pl.col("end") > pl.col("ts"))
    return (
        covering.sort("domain", "ts", "static_mw", nulls_last=False)
        .group_by("domain", "ts", maintain_order=True)
        .agg(pl.col("seg_end").first(), pl.col("static_mw").max(), pl.col("opp_khz").last())
        .select(
            "domain",
            "ts",
            (pl.col("seg_end") - pl.col("ts")).alias("dur"),
            "opp_khz",
            pl.col("static_mw").fill_null(0.0).cast(pl.Float64),
        )
        .sort("domain", "ts")
    )


def energy_estimate_from_activity(activity: pl.DataFrame, platform: dict) -> pl.DataFrame:
    """Energy-model estimate from per-CPU activity intervals (df_cpu_activity, or a what-if with other frequencies).

    Pricing: df_priced_activity and df_static_busy. Per domain: active_j (busy CPUs x OPP power), idle_j (idle
    CPUs x idle-state power: per-OPP idle power when the model has it, else the state's power), static_j (domain
    static power while any CPU is busy), energy_j, avg_power_mw (energy / window), unmodelled_ns (CPU time whose
    power the model does not give: unknown frequency or state, or a state without power), source (the model's
    label).
    """
    m = df_priced_activity(activity, platform)
    per_dom = m.group_by("domain").agg(
        (pl.col("cpu_mw") * pl.col("dur")).filter(pl.col("state") == -1).sum().alias("_active"),
        (pl.col("cpu_mw") * pl.col("dur")).filter(pl.col("state") >= 0).sum().alias("_idle"),
        pl.col("dur").filter(pl.col("cpu_mw").is_null()).sum().alias("unmodelled_ns"),
    )
    static = df_static_busy(m).group_by("domain").agg((pl.col("static_mw") * pl.col("dur")).sum().alias("_static"))
    window_ns = (activity["ts"] + activity["dur"]).max() - activity["ts"].min() if activity.height else 0
    out = per_dom.join(static, on="domain", how="left").with_columns(pl.col("_static").fill_null(0.0))
    return out.select(
        "domain",
        (pl.col("_active") * 1e-12).alias("active_j"),
        (pl.col("_idle") * 1e-12).alias("idle_j"),
        (pl.col("_static") * 1e-12).alias("static_j"),
        ((pl.col("_active") + pl.col("_idle") + pl.col("_static")) * 1e-12).alias("energy_j"),
        ((pl.col("_active") + pl.col("_idle") + pl.col("_static")) / max(window_ns, 1)).alias("avg_power_mw"),
        "unmodelled_ns",
        pl.lit(platform.get("energy_model_source") or "unlabelled model").alias("source"),
    ).sort("domain")


def df_energy_estimate(
    cpu_frequency: pl.DataFrame,
    platform: dict,
    *,
    cpu_idle: pl.DataFrame | None = None,
    sched_switch: pl.DataFrame | None = None,
    start_ns: int | None = None,
    end_ns: int | None = None,
) -> pl.DataFrame:
    """Energy-model estimate per frequency domain over the window (see energy_estimate_from_activity).

    Events: cpu_frequency + (cpu_idle or sched_switch).
    """
    start_ns, end_ns = window_of(cpu_frequency, start_ns, end_ns)
    cpus = [c["cpu"] for c in platform["cpus"]]
    act = df_cpu_activity(
        cpu_frequency, cpu_idle=cpu_idle, sched_switch=sched_switch, start_ns=start_ns, end_ns=end_ns, cpus=cpus
    )
    return energy_estimate_from_activity(act, platform)


class EnergyAnalysis:
    """Energy analyses bound to a Trace (``trace.energy``); window and platform come from the trace."""

    def __init__(self, trace):
        self.trace = trace

    def _win(self) -> dict:
        return {"start_ns": self.trace.start_ns, "end_ns": self.trace.end_ns}

    def df_power_per_rail(self, wrap_uj: dict[str, float] | None = None) -> pl.DataFrame:
        """Measured power per rail (abtest.analysis.power.df_power_per_rail) over the trace's window."""
        self.trace.require("energy.df_power_per_rail", "power_rail")
        return df_power_per_rail(self.trace.df("power_rail", windowed=False), wrap_uj=wrap_uj, **self._win())

    def df_power_per_channel(self, explicit: dict | None = None) -> pl.DataFrame:
        """Measured power per channel (abtest.analysis.power.df_channel_power; mapping as rail_mapping)."""
        per_rail = self.df_power_per_rail()
        return df_channel_power(per_rail, rail_mapping(per_rail["rail"].to_list(), explicit))

    def df_energy_estimate(self, platform: dict | None = None) -> pl.DataFrame:
        self.trace.require("energy.df_energy_estimate", *MODEL_EVENTS)
        plat = platform or trace_platform(self.trace)
        if not plat:
            raise AnalysisNotApplicable(
                f"{self.trace.path}: no platform (energy model) known: pass Trace(..., platform=FILE)"
            )
        idle = self.trace.df("cpu_idle", windowed=False) if self.trace.has_events("cpu_idle") else None
        sw = None
        if idle is None:
            self.trace.require("energy.df_energy_estimate (activity)", "sched_switch")
            sw = self.trace.df("sched_switch", windowed=False)
        from abtest.analysis.frequency import trace_cpu_frequency  # seeded with polled samples (perfetto)

        return df_energy_estimate(trace_cpu_frequency(self.trace), plat, cpu_idle=idle, sched_switch=sw, **self._win())

    def plot_power_per_rail(self, ax=None):
        return plot_power_per_rail(self.df_power_per_rail(), ax=ax)


def _domain_rows(trace) -> pl.DataFrame | None:
    plat = trace_platform(trace)
    if not (
        plat
        and plat.get("energy_model_source")
        and trace.has_events("cpu_frequency")
        and (trace.has_events("cpu_idle") or trace.has_events("sched_switch"))
    ):
        return None
    est = EnergyAnalysis(trace).df_energy_estimate(plat)
    return est.select(
        pl.Series("domain", [_domain_name(d, plat) for d in est["domain"]], dtype=pl.Utf8),  # one per domain
        "energy_j",
        "avg_power_mw",
        (pl.col("unmodelled_ns") / 1e9).alias("unmodelled_s"),
        pl.lit(plat["energy_model_source"]).alias("energy_model"),
    )


TABLES = (
    TableSpec(
        "domains",
        "Energy-model estimate per frequency domain",
        "domain energy_j[J] avg_power_mw[mW] unmodelled_s[s] energy_model",
        _domain_rows,
        note="unmodelled: time at frequencies or states the energy model does not describe",
    ),
)


# --------------------------------------------------------------------------------------------
# Declared metrics (abtest.analysis.registry): the energy-model estimate, when no meter measured power
# --------------------------------------------------------------------------------------------
POWER_ESTIMATE = MetricSpec(
    "power.estimate.{domain}",
    "mW",
    Direction.LOWER,
    Aggregation.MEAN,
    Grouping.DOMAIN,
    title="estimated power",
    description="Energy-model estimate of the average power of one frequency domain (active time at each OPP x "
    "its power + idle residency x idle power + static power), from the platform's energy model "
    "(its source is named with the estimate); domain 'all' = every domain.",
    window=WindowCombine.TIME,
)
ESTIMATE_EVENTS = MODEL_EVENTS
ESTIMATE_OPTIONAL_EVENTS = ("cpu_idle", "sched_switch")
ESTIMATE_METRICS = (POWER_ESTIMATE,)


def estimate_metrics(trace, options=None) -> list[MetricValue]:
    """`power.estimate.<domain>` (mW) from the platform's energy model; [] when the trace's platform has none.
    Domains are named by their CPUs ("cpu0-3")."""
    plat = trace_platform(trace)
    if not (plat and plat.get("energy_model_source")):
        return []
    est = EnergyAnalysis(trace).df_energy_estimate(plat)
    out = [
        MetricValue(POWER_ESTIMATE, float(r["avg_power_mw"]), _domain_name(r["domain"], plat))
        for r in est.iter_rows(named=True)
        if r["avg_power_mw"] is not None
    ]  # one row per domain
    win_s = (trace.end_ns - trace.start_ns) / 1e9
    if out and win_s > 0:
        out.append(MetricValue(POWER_ESTIMATE, float(est["energy_j"].sum()) / win_s * 1e3, "all"))
    return out


def _domain_name(domain, plat: dict) -> str:
    """The domain's CPUs ("cpu0-3", "cpu0,3-5"; abtest.analysis.platform.domain_names), else "domain<id>"."""
    return domain_names(plat).get(domain, f"domain{domain}")
