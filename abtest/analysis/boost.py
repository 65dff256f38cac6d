"""The "cpu_util boost" what-if: schedutil driven by util vs by max(util, runnable).

For each CPU the schedutil-style request is ``1.25 x signal / capacity x f_max`` (kHz) with signal = util
("util" scenario) or max(util, runnable) ("boost" scenario); a frequency domain runs at the highest request
of its CPUs, clamped to the lowest OPP at or above it (the highest OPP when above all). The resulting OPP
residency of both scenarios is priced through the platform's energy model (energy.energy_estimate_from_activity)
with the trace's own active/idle intervals per CPU (what-if simplification: the same busy time in both
scenarios — work finishing sooner at a higher frequency is not modelled, so the boost cost is an upper bound).

Signal samples hold until the next sample; time before a CPU's first sample has no request (null) and is
excluded from residency and energy (reported as unmodelled).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from abtest.analysis.energy import df_cpu_states, energy_estimate_from_activity
from abtest.analysis.intervals import df_intervals_join, window_of
from abtest.analysis.platform import trace_platform
from abtest.trace.errors import AnalysisNotApplicable

EVENTS = ("sched_switch",)
OPTIONAL_EVENTS = ("sched_pelt_cfs", "cpu_idle", "cpu_frequency")
HEADROOM = 1.25  # schedutil's map_util_freq margin

__all__ = [
    "EVENTS",
    "HEADROOM",
    "BoostResult",
    "df_boost_requests",
    "df_boost_residency",
    "df_boost_energy",
    "boost_whatif",
    "boost_whatif_for_trace",
    "plot_boost",
]


@dataclass
class BoostResult:
    """Tables of one boost what-if.

    requests: domain, ts, dur (ns), util_request_khz, boost_request_khz (raw 1.25 x ... requests, max over
    the domain's CPUs), util_khz, boost_khz (OPP-clamped).
    residency: domain, frequency_khz, util_ns, boost_ns, util_pct, boost_pct.
    energy: domain, util_energy_j, boost_energy_j, util_avg_power_mw, boost_avg_power_mw, diff_pct, source.
    """

    requests: pl.DataFrame
    residency: pl.DataFrame
    energy: pl.DataFrame | None


def _platform_frames(platform: dict) -> tuple[pl.DataFrame, pl.DataFrame]:
    cpus = pl.DataFrame(
        [(c["cpu"], c["domain"], float(c["capacity"] or 1024.0)) for c in platform["cpus"]],
        schema={"cpu": pl.Int32, "domain": pl.Int32, "capacity": pl.Float64},
        orient="row",
    )
    opps = pl.DataFrame(
        [(d["id"], o["frequency_khz"]) for d in platform["domains"] for o in d["opps"]],
        schema={"domain": pl.Int32, "opp_khz": pl.Int64},
        orient="row",
    ).sort("opp_khz")
    return cpus, opps


def df_boost_requests(
    signals: pl.DataFrame,
    platform: dict,
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
) -> pl.DataFrame:
    """Per-domain requested frequency over time for both scenarios (see BoostResult.requests).

    ``signals``: cpu, ts, util, runnable (PELT units; runnable null = unknown -> boost = util). Computed by
    native/sim/src/boost.rs (its frame-written oracle: tests/oracles/boost.py).
    """
    if not platform or not platform.get("domains") or not any(d["opps"] for d in platform["domains"]):
        raise AnalysisNotApplicable("boost what-if needs a platform with frequency domains and OPPs")
    cpus, opps = _platform_frames(platform)
    sig = signals.select(
        pl.col("cpu").cast(pl.Int32), "ts", pl.col("util").cast(pl.Float64), pl.col("runnable").cast(pl.Float64)
    )
    start_ns, end_ns = window_of(sig, start_ns, end_ns)
    from abtest.analysis import sim_native

    return sim_native.boost_requests(sig, cpus=cpus, opps=opps, headroom=HEADROOM, start_ns=start_ns, end_ns=end_ns)


def df_boost_residency(requests: pl.DataFrame) -> pl.DataFrame:
    """OPP residency of both scenarios per domain (see BoostResult.residency); pct of the known time."""
    parts = []
    for name in ("util", "boost"):
        parts.append(
            requests.filter(pl.col(f"{name}_khz").is_not_null())
            .group_by("domain", pl.col(f"{name}_khz").alias("frequency_khz"))
            .agg(pl.col("dur").sum().alias(f"{name}_ns"))
        )
    res = (
        parts[0]
        .join(parts[1], on=["domain", "frequency_khz"], how="full", coalesce=True)
        .with_columns(pl.col("util_ns", "boost_ns").fill_null(0))
    )
    return res.with_columns(
        (100.0 * pl.col("util_ns") / pl.col("util_ns").sum().over("domain")).alias("util_pct"),
        (100.0 * pl.col("boost_ns") / pl.col("boost_ns").sum().over("domain")).alias("boost_pct"),
    ).sort("domain", "frequency_khz")


def df_boost_energy(requests: pl.DataFrame, states: pl.DataFrame, platform: dict) -> pl.DataFrame:
    """Energy of both scenarios per domain through the platform's energy model.

    ``states``: per-CPU cpu, ts, dur, state (energy.df_cpu_states). Columns: see BoostResult.energy.
    """
    cpus, _ = _platform_frames(platform)
    out = []
    for name in ("util", "boost"):
        f = requests.select("domain", "ts", "dur", pl.col(f"{name}_khz").alias("frequency_khz"))
        per_cpu = (
            f.join(cpus.select("cpu", "domain"), on="domain")
            .select("cpu", "ts", "dur", "frequency_khz")
            .sort("cpu", "ts")
        )
        act = df_intervals_join(per_cpu, states.sort("cpu", "ts"), keys="cpu")
        e = energy_estimate_from_activity(act, platform)
        out.append(
            e.select(
                "domain",
                pl.col("energy_j").alias(f"{name}_energy_j"),
                pl.col("avg_power_mw").alias(f"{name}_avg_power_mw"),
                "source",
            )
        )
    res = out[0].join(out[1].drop("source"), on="domain")
    return res.with_columns(
        (100.0 * (pl.col("boost_energy_j") - pl.col("util_energy_j")) / pl.col("util_energy_j")).alias("diff_pct")
    ).select(
        "domain", "util_energy_j", "boost_energy_j", "util_avg_power_mw", "boost_avg_power_mw", "diff_pct", "source"
    )


def boost_whatif(
    signals: pl.DataFrame,
    platform: dict,
    *,
    states: pl.DataFrame | None = None,
    start_ns: int | None = None,
    end_ns: int | None = None,
) -> BoostResult:
    """Requests, residency and (when ``states`` and an energy model exist) energy of the boost what-if."""
    req = df_boost_requests(signals, platform, start_ns=start_ns, end_ns=end_ns)
    energy = None
    if states is not None and platform.get("energy_model_source"):
        energy = df_boost_energy(req, states, platform)
    return BoostResult(requests=req, residency=df_boost_residency(req), energy=energy)


def boost_whatif_for_trace(trace, signals: pl.DataFrame) -> BoostResult:
    """boost_whatif with the trace's platform and CPU states (cpu_idle, else sched_switch)."""
    plat = trace_platform(trace)
    if not plat:
        raise AnalysisNotApplicable(
            f"{trace.path}: the boost what-if needs a platform (capacities, OPPs, energy model): "
            "pass Trace(..., platform=FILE)"
        )
    cpus = [c["cpu"] for c in plat["cpus"]]
    idle = trace.df("cpu_idle", windowed=False) if trace.has_events("cpu_idle") else None
    sw = trace.df("sched_switch", windowed=False) if trace.has_events("sched_switch") else None
    if idle is not None and idle.is_empty():
        idle = None
    states = None
    if idle is not None or sw is not None:
        states = df_cpu_states(cpu_idle=idle, sched_switch=sw, start_ns=trace.start_ns, end_ns=trace.end_ns, cpus=cpus)
    return boost_whatif(signals, plat, states=states, start_ns=trace.start_ns, end_ns=trace.end_ns)


def plot_boost(result: BoostResult):
    """Two panels: OPP residency (util vs boost) per domain, and average power per domain with the % gap."""
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4))
    res = result.residency
    labels, u, b = [], [], []
    for row in res.iter_rows(named=True):
        labels.append(f"d{row['domain']}\n{row['frequency_khz'] / 1000:.0f}")
        u.append(row["util_pct"])
        b.append(row["boost_pct"])
    x = list(range(len(labels)))
    ax1.bar([i - 0.2 for i in x], u, width=0.4, label="util")
    ax1.bar([i + 0.2 for i in x], b, width=0.4, label="max(util, runnable)")
    ax1.set_xticks(x, labels, fontsize="small")
    ax1.set_ylabel("% of time")
    ax1.set_title("OPP residency (domain / MHz)")
    ax1.legend(fontsize="small")
    if result.energy is not None and result.energy.height:
        e = result.energy
        x2 = list(range(e.height))
        ax2.bar([i - 0.2 for i in x2], e["util_avg_power_mw"].to_list(), width=0.4, label="util")
        ax2.bar([i + 0.2 for i in x2], e["boost_avg_power_mw"].to_list(), width=0.4, label="max(util, runnable)")
        for i, row in enumerate(e.iter_rows(named=True)):
            top = max(row["util_avg_power_mw"] or 0, row["boost_avg_power_mw"] or 0)
            ax2.annotate(f"{row['diff_pct']:+.1f} %", (i, top), ha="center", va="bottom")
        ax2.set_xticks(x2, [f"domain {d}" for d in e["domain"].to_list()])
        ax2.set_ylabel("average power (mW, model)")
        ax2.set_title(f"Estimated CPU power ({e['source'][0]})", fontsize="small")
        ax2.legend(fontsize="small")
    else:
        ax2.text(0.5, 0.5, "no energy model / CPU states", ha="center", transform=ax2.transAxes)
    fig.tight_layout()
    return fig
