"""Energy and power: measured (power rails) and estimated (energy model x residency).

Measured: the ``power_rail`` table (ts, rail, subsystem, energy_uj = cumulative counter in uJ) or a run-store
``power.csv`` (``read_power_csv``). Between two consecutive samples of a rail the power is taken as
constant: ``power_mw = delta_energy_uj / delta_ts_ns * 1e6``. Energy in a window is the integral of that
piecewise-constant power over the window (intervals straddling a window edge are pro-rated), through
:func:`abtest.analysis.intervals.df_intervals`. Time before a rail's first or after its last sample is not
covered: ``covered_ns`` / ``coverage_pct`` say how much of the window the samples cover, and the average
power is energy / covered time.

Counter wrap and reset rule: a sample lower than the previous one is a wrap when the rail's counter range
is known (``wrap_uj={rail: max_energy_range_uj}``; delta = value - previous + max_range + 1, as RAPL's
energy_uj) and otherwise a reset to 0 (delta = the new value: the energy between the previous sample and the
reset is unknown and not counted; ``resets`` counts these).

Estimated (no meter): per CPU, active time at each OPP x the OPP's per-CPU power, plus idle-state residency x
the idle state's power, plus the domain's static power while any of its CPUs is active. Labelled with the
platform's ``energy_model_source``.
"""
from __future__ import annotations

from pathlib import Path

import polars as pl

from abtest.analysis.platform import trace_platform
from abtest.analysis.intervals import df_cpu_idle_intervals, df_intervals, df_intervals_join, window_of
from abtest.trace.errors import TraceFormatError

EVENTS = ("power_rail",)
OPTIONAL_EVENTS = ("cpu_frequency", "cpu_idle", "sched_switch")
MODEL_EVENTS = ("cpu_frequency",)

__all__ = ["EVENTS", "OPTIONAL_EVENTS", "DEFAULT_CHANNELS", "read_power_csv", "df_rail_power_intervals",
           "df_power_per_rail", "df_power_per_channel", "df_cpu_states", "df_cpu_activity", "df_energy_estimate",
           "energy_estimate_from_activity", "plot_power_per_rail", "EnergyAnalysis", "summary"]

# channel -> regex on rail names (Pixel ODPM names, e.g. Pixel 7 Pro: S4M_VDD_CPUCL0 little,
# S3M_VDD_CPUCL1 mid, S2M_VDD_CPUCL2 big, S2S_VDD_G3D + S8S_VDD_G3D_L2 GPU). "CPU" = the three CPU groups.
# "Total" = every rail. A rail may belong to several channels (CPU-Big and CPU).
DEFAULT_CHANNELS: dict[str, str] = {
    "CPU-Little": r"VDD_CPUCL0|CPU_?LITTLE",
    "CPU-Mid": r"VDD_CPUCL1|CPU_?MID",
    "CPU-Big": r"VDD_CPUCL2|CPU_?BIG",
    "CPU": r"VDD_CPUCL[0-9]|CPU_?(LITTLE|MID|BIG)",
    "GPU": r"G3D|GPU",
    "Display": r"DISP|DISPLAY|PANEL",
    "Memory": r"MEM|MIF|DDR",
    "Total": r".*",
}

_POWER_CSV_COLUMNS = ("ts_ns", "rail", "subsystem", "energy_uj")


def read_power_csv(path: str | Path) -> pl.DataFrame:
    """Run-store ``power.csv`` (ts_ns, rail, subsystem, energy_uj cumulative uJ) -> power_rail-shaped frame
    ``ts (Int64 ns), rail (Categorical), subsystem (Categorical), energy_uj (Float64)`` sorted by ts.

    Raises TraceFormatError (file, line, what was expected) on a bad header or value.
    """
    path = Path(path)
    try:
        header = path.open().readline().strip()
    except OSError as exc:
        raise TraceFormatError(path, f"cannot read power samples: {exc}") from exc
    cols = [c.strip() for c in header.split(",")]
    missing = [c for c in ("ts_ns", "rail", "energy_uj") if c not in cols]
    if missing:
        raise TraceFormatError(path, f"header lacks {missing}", line=1, expected="CSV header ts_ns,rail,subsystem,energy_uj")
    raw = pl.read_csv(path, infer_schema=False)  # all Utf8, so a bad value can be located
    raw = raw.with_row_index("_line", offset=2)
    parsed = raw.select(
        "_line",
        pl.col("ts_ns").str.strip_chars().cast(pl.Int64, strict=False).alias("ts"),
        pl.col("rail").str.strip_chars().alias("rail"),
        (pl.col("subsystem").fill_null("") if "subsystem" in raw.columns else pl.lit("")).alias("subsystem"),
        pl.col("energy_uj").str.strip_chars().cast(pl.Float64, strict=False).alias("energy_uj"),
        pl.col("ts_ns").alias("_ts_raw"), pl.col("energy_uj").alias("_e_raw"),
    )
    bad = parsed.filter(pl.col("ts").is_null() | pl.col("energy_uj").is_null() | pl.col("rail").is_null())
    if bad.height:
        row = bad.row(0, named=True)
        raise TraceFormatError(path, f"bad sample ts_ns={row['_ts_raw']!r} energy_uj={row['_e_raw']!r}",
                               line=int(row["_line"]), expected="integer ts_ns, non-empty rail, numeric energy_uj")
    return (parsed.select("ts", pl.col("rail").cast(pl.Categorical), pl.col("subsystem").cast(pl.Categorical),
                          "energy_uj").sort("ts", maintain_order=True))


def _deltas(power_rail: pl.DataFrame, wrap_uj: dict[str, float] | None) -> pl.DataFrame:
    """Per rail sample deltas: rail, ts, next_ts, de_uj (>= 0 after wrap/reset handling), reset (bool)."""
    s = (power_rail.select(pl.col("rail").cast(pl.Utf8), "ts", pl.col("energy_uj").cast(pl.Float64))
         .sort("rail", "ts").unique(["rail", "ts"], keep="last", maintain_order=True))
    wraps = pl.DataFrame({"rail": list((wrap_uj or {}).keys()), "wrap_uj": [float(v) for v in (wrap_uj or {}).values()]},
                         schema={"rail": pl.Utf8, "wrap_uj": pl.Float64})
    s = s.join(wraps, on="rail", how="left")
    nxt_e = pl.col("energy_uj").shift(-1).over("rail")
    raw = nxt_e - pl.col("energy_uj")
    return s.with_columns(
        pl.col("ts").shift(-1).over("rail").alias("next_ts"),
        pl.when(raw >= 0).then(raw)
        .when(pl.col("wrap_uj").is_not_null()).then(raw + pl.col("wrap_uj") + 1)
        .otherwise(nxt_e).alias("de_uj"),
        ((raw < 0) & pl.col("wrap_uj").is_null()).alias("reset"),
        ((raw < 0) & pl.col("wrap_uj").is_not_null()).alias("wrap"),
    ).filter(pl.col("next_ts").is_not_null())


def df_rail_power_intervals(power_rail: pl.DataFrame, *, start_ns: int | None = None, end_ns: int | None = None,
                            wrap_uj: dict[str, float] | None = None) -> pl.DataFrame:
    """Piecewise-constant power per rail: ``rail, ts (ns), dur (ns), power_mw`` (null = not covered by samples),
    clipped to the window. Events: power_rail."""
    d = _deltas(power_rail, wrap_uj)
    dt = (pl.col("next_ts") - pl.col("ts")).cast(pl.Float64)
    changes = pl.concat([
        d.select("rail", "ts", pl.when(dt > 0).then(pl.col("de_uj") / dt * 1e6).alias("power_mw")),
        # after the last sample: unknown
        d.group_by("rail").agg(pl.col("next_ts").max().alias("ts")).with_columns(pl.lit(None, pl.Float64).alias("power_mw")),
    ])
    if start_ns is None or end_ns is None:
        start_ns, end_ns = window_of(power_rail, start_ns, end_ns)
    return df_intervals(changes, "power_mw", keys="rail", start_ns=start_ns, end_ns=end_ns, merge_equal=False)


def df_power_per_rail(power_rail: pl.DataFrame, *, start_ns: int | None = None, end_ns: int | None = None,
                      wrap_uj: dict[str, float] | None = None) -> pl.DataFrame:
    """Energy and average power per rail over the window.

    Columns: rail, subsystem, energy_j (J), avg_power_mw (energy / covered time, mW), covered_ns (time of
    the window covered by samples), coverage_pct, samples (in the window), resets, wraps.
    Events: power_rail.
    """
    start_ns, end_ns = window_of(power_rail, start_ns, end_ns)
    iv = df_rail_power_intervals(power_rail, start_ns=start_ns, end_ns=end_ns, wrap_uj=wrap_uj)
    known = pl.col("power_mw").is_not_null()
    agg = iv.group_by("rail").agg(
        (pl.col("power_mw").filter(known) * pl.col("dur").filter(known)).sum().alias("_mw_ns"),
        pl.col("dur").filter(known).sum().alias("covered_ns"),
    )
    d = _deltas(power_rail, wrap_uj).filter((pl.col("ts") >= start_ns) & (pl.col("next_ts") <= end_ns))
    flags = d.group_by("rail").agg(pl.col("reset").sum().cast(pl.Int64).alias("resets"),
                                   pl.col("wrap").sum().cast(pl.Int64).alias("wraps"))
    inwin = power_rail.filter((pl.col("ts") >= start_ns) & (pl.col("ts") < end_ns))
    counts = inwin.group_by(pl.col("rail").cast(pl.Utf8)).agg(
        pl.len().cast(pl.Int64).alias("samples"),
        (pl.col("subsystem").cast(pl.Utf8).first() if "subsystem" in inwin.columns else pl.lit(None, pl.Utf8)).alias("subsystem"))
    out = (agg.join(counts, on="rail", how="left").join(flags, on="rail", how="left")
           .with_columns(pl.col("samples", "resets", "wraps").fill_null(0)))
    return out.select(
        "rail", "subsystem",
        (pl.col("_mw_ns") * 1e-12).alias("energy_j"),  # mW x ns = 1e-3 W x 1e-9 s
        pl.when(pl.col("covered_ns") > 0).then(pl.col("_mw_ns") / pl.col("covered_ns")).alias("avg_power_mw"),
        "covered_ns",
        (100.0 * pl.col("covered_ns") / max(end_ns - start_ns, 1)).alias("coverage_pct"),
        "samples", "resets", "wraps",
    ).sort("rail")


def df_power_per_channel(per_rail: pl.DataFrame, channels: dict[str, str | list[str]] | None = None) -> pl.DataFrame:
    """Group df_power_per_rail into channels (CPU-Big / CPU-Mid / CPU-Little / CPU / GPU / Display / Memory / Total).

    ``channels``: channel -> regex on rail names, or an explicit list of rail names (default DEFAULT_CHANNELS).
    Columns: channel, rails (list of rail names), energy_j, avg_power_mw (sum of the rails' average power),
    min_coverage_pct. Channels matching no rail are omitted.
    """
    channels = DEFAULT_CHANNELS if channels is None else channels
    parts = []
    for name, spec in channels.items():
        if isinstance(spec, str):
            sel = per_rail.filter(pl.col("rail").str.contains(f"(?i){spec}"))
        else:
            sel = per_rail.filter(pl.col("rail").is_in(list(spec)))
        if sel.height == 0:
            continue
        parts.append(sel.select(
            pl.lit(name).alias("channel"), pl.col("rail").sort().implode().alias("rails"),
            pl.col("energy_j").sum(), pl.col("avg_power_mw").sum(), pl.col("coverage_pct").min().alias("min_coverage_pct")))
    if not parts:
        return pl.DataFrame(schema={"channel": pl.Utf8, "rails": pl.List(pl.Utf8), "energy_j": pl.Float64,
                                    "avg_power_mw": pl.Float64, "min_coverage_pct": pl.Float64})
    return pl.concat(parts)


# -- energy model estimate -----------------------------------------------------------------------
def df_cpu_states(*, cpu_idle: pl.DataFrame | None = None, sched_switch: pl.DataFrame | None = None,
                  start_ns: int, end_ns: int, cpus: list[int] | None = None) -> pl.DataFrame:
    """Per-CPU ``cpu, ts, dur (ns), state`` (-1 = active, k = idle state k, null = unknown).

    From cpu_idle when given (idle in an unknown state before the first event counts as state 0), else from
    sched_switch (idle = the idle task, pid 0, runs; its idle state is unknown and reported as state 0).
    Events: cpu_idle or sched_switch.
    """
    if cpu_idle is not None:
        act = df_cpu_idle_intervals(cpu_idle, start_ns=start_ns, end_ns=end_ns, cpus=cpus)
        return act.with_columns(pl.when(pl.col("idle") & pl.col("state").is_null()).then(0)
                                .otherwise(pl.col("state")).alias("state")).drop("idle")
    if sched_switch is not None:
        sw = sched_switch.select(pl.col("cpu").cast(pl.Int32), "ts",
                                 pl.when(pl.col("next_pid") == 0).then(0).otherwise(-1).cast(pl.Int64).alias("state"))
        return df_intervals(sw, "state", keys="cpu", start_ns=start_ns, end_ns=end_ns, all_keys=cpus)
    raise ValueError("needs cpu_idle or sched_switch to tell active from idle time")


def df_cpu_activity(cpu_frequency: pl.DataFrame, *, cpu_idle: pl.DataFrame | None = None,
                    sched_switch: pl.DataFrame | None = None, start_ns: int, end_ns: int,
                    cpus: list[int] | None = None) -> pl.DataFrame:
    """Per-CPU ``cpu, ts, dur (ns), frequency_khz, state`` (-1 = active, k = idle state k, null = unknown):
    df_cpu_states overlaid with the frequency intervals. Events: cpu_frequency + (cpu_idle or sched_switch).
    """
    freq = df_intervals(cpu_frequency.select(pl.col("cpu").cast(pl.Int32), "ts", "frequency_khz"), "frequency_khz",
                        keys="cpu", start_ns=start_ns, end_ns=end_ns, all_keys=cpus)
    act = df_cpu_states(cpu_idle=cpu_idle, sched_switch=sched_switch, start_ns=start_ns, end_ns=end_ns, cpus=cpus)
    return df_intervals_join(freq, act, keys="cpu")


def _opp_power_table(platform: dict) -> pl.DataFrame:
    rows = []
    for d in platform["domains"]:
        for o in d["opps"]:
            idle = o.get("idle_power_mw") or []
            rows.append({"domain": d["id"], "opp_khz": o["frequency_khz"], "power_mw": o["power_mw"],
                         "static_mw": o["static_mw"], "idle0_mw": idle[0] if len(idle) > 0 else None,
                         "idle1_mw": idle[1] if len(idle) > 1 else None})
    return pl.DataFrame(rows, schema={"domain": pl.Int32, "opp_khz": pl.Int64, "power_mw": pl.Float64,
                                      "static_mw": pl.Float64, "idle0_mw": pl.Float64, "idle1_mw": pl.Float64})


def energy_estimate_from_activity(activity: pl.DataFrame, platform: dict) -> pl.DataFrame:
    """Energy-model estimate from per-CPU activity intervals (df_cpu_activity, or a what-if with other frequencies).

    Frequencies not in the model are mapped to the lowest model OPP at or above them (else the highest).
    Per domain: active_j (busy CPUs x OPP power), idle_j (idle CPUs x idle-state power: per-OPP idle power
    when the model has it, else the state's power), static_j (domain static power while any CPU is busy),
    energy_j, avg_power_mw (energy / window), unmodelled_ns (CPU time whose power the model does not give:
    unknown frequency or state, or a state without power), source (the model's label).
    """
    if not platform or not platform.get("domains"):
        raise ValueError("energy estimate needs a platform with an energy model (see abtest.analysis.platform)")
    doms = pl.DataFrame([(c["cpu"], c["domain"]) for c in platform["cpus"]], schema={"cpu": pl.Int32, "domain": pl.Int32},
                        orient="row")
    idle_states = pl.DataFrame([(c["cpu"], s["index"], s["power_mw"]) for c in platform["cpus"] for s in c["idle_states"]],
                               schema={"cpu": pl.Int32, "state": pl.Int64, "state_mw": pl.Float64}, orient="row")
    opps = _opp_power_table(platform).sort("opp_khz")
    a = activity.join(doms, on="cpu", how="inner").sort("frequency_khz")
    known_f = a.filter(pl.col("frequency_khz").is_not_null())
    up = known_f.join_asof(opps, left_on="frequency_khz", right_on="opp_khz", by="domain", strategy="forward",
                           check_sortedness=False)
    top = known_f.join_asof(opps, left_on="frequency_khz", right_on="opp_khz", by="domain", strategy="backward",
                            check_sortedness=False)
    cols = ["opp_khz", "power_mw", "static_mw", "idle0_mw", "idle1_mw"]
    m = up.with_columns([pl.coalesce(pl.col(c), top[c]).alias(c) for c in cols])
    m = pl.concat([m, a.filter(pl.col("frequency_khz").is_null())], how="diagonal_relaxed")
    m = m.join(idle_states, on=["cpu", "state"], how="left")
    idle_opp_mw = (pl.when(pl.col("state") == 0).then(pl.col("idle0_mw"))
                   .when(pl.col("state") == 1).then(pl.col("idle1_mw")))
    cpu_mw = (pl.when(pl.col("state") == -1).then(pl.col("power_mw"))
              .when(pl.col("state") >= 0).then(pl.coalesce(idle_opp_mw, pl.col("state_mw"))))
    m = m.with_columns(cpu_mw.alias("cpu_mw"))
    per_dom = m.group_by("domain").agg(
        (pl.col("cpu_mw") * pl.col("dur")).filter(pl.col("state") == -1).sum().alias("_active"),
        (pl.col("cpu_mw") * pl.col("dur")).filter(pl.col("state") >= 0).sum().alias("_idle"),
        pl.col("dur").filter(pl.col("cpu_mw").is_null()).sum().alias("unmodelled_ns"),
    )
    # static power: while >= 1 CPU of the domain is busy, at the domain's OPP (the max over busy CPUs)
    busy = m.filter(pl.col("state") == -1).select("domain", "ts", (pl.col("ts") + pl.col("dur")).alias("end"), "static_mw")
    steps = pl.concat([busy.select("domain", "ts", pl.lit(1).alias("d"), "static_mw"),
                       busy.select("domain", pl.col("end").alias("ts"), pl.lit(-1).alias("d"), pl.lit(None, pl.Float64).alias("static_mw"))])
    if steps.height:
        steps = (steps.sort("domain", "ts").group_by("domain", "ts", maintain_order=True)
                 .agg(pl.col("d").sum(), pl.col("static_mw").max())
                 .with_columns(pl.col("d").cum_sum().over("domain").alias("n_busy"),
                               pl.col("static_mw").forward_fill().over("domain")))
        steps = steps.with_columns((pl.col("ts").shift(-1).over("domain") - pl.col("ts")).alias("dur"))
        static = (steps.filter((pl.col("n_busy") > 0) & pl.col("dur").is_not_null())
                  .group_by("domain").agg((pl.col("static_mw").fill_null(0) * pl.col("dur")).sum().alias("_static")))
    else:
        static = pl.DataFrame(schema={"domain": pl.Int32, "_static": pl.Float64})
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


def df_energy_estimate(cpu_frequency: pl.DataFrame, platform: dict, *, cpu_idle: pl.DataFrame | None = None,
                       sched_switch: pl.DataFrame | None = None, start_ns: int | None = None,
                       end_ns: int | None = None) -> pl.DataFrame:
    """Energy-model estimate per frequency domain over the window (see energy_estimate_from_activity).

    Events: cpu_frequency + (cpu_idle or sched_switch).
    """
    start_ns, end_ns = window_of(cpu_frequency, start_ns, end_ns)
    cpus = [c["cpu"] for c in platform["cpus"]]
    act = df_cpu_activity(cpu_frequency, cpu_idle=cpu_idle, sched_switch=sched_switch, start_ns=start_ns,
                          end_ns=end_ns, cpus=cpus)
    return energy_estimate_from_activity(act, platform)


def plot_power_per_rail(per_rail: pl.DataFrame, *, ax=None, top: int = 24):
    """Horizontal bars of average power per rail (mW), largest first. Returns the Figure."""
    import matplotlib.pyplot as plt
    data = per_rail.drop_nulls("avg_power_mw").sort("avg_power_mw", descending=True).head(top)
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(8, max(2.5, 0.3 * data.height)))
    ax.barh(data["rail"].to_list()[::-1], data["avg_power_mw"].to_list()[::-1])
    ax.set_xlabel("average power (mW)")
    ax.set_title("Power per rail")
    return fig


class EnergyAnalysis:
    """Energy analyses bound to a Trace (``trace.energy``); window and platform come from the trace."""

    def __init__(self, trace):
        self.trace = trace

    def _win(self) -> dict:
        return {"start_ns": self.trace.start_ns, "end_ns": self.trace.end_ns}

    def df_power_per_rail(self, wrap_uj: dict[str, float] | None = None) -> pl.DataFrame:
        self.trace.require("energy.df_power_per_rail", *EVENTS)
        return df_power_per_rail(self.trace.df("power_rail", windowed=False), wrap_uj=wrap_uj, **self._win())

    def df_power_per_channel(self, channels: dict | None = None) -> pl.DataFrame:
        return df_power_per_channel(self.df_power_per_rail(), channels)

    def df_energy_estimate(self, platform: dict | None = None) -> pl.DataFrame:
        self.trace.require("energy.df_energy_estimate", *MODEL_EVENTS)
        plat = platform or trace_platform(self.trace)
        if not plat:
            raise ValueError(f"{self.trace.path}: no platform (energy model) known: pass Trace(..., platform=FILE)")
        idle = self.trace.df("cpu_idle", windowed=False) if self.trace.has_events("cpu_idle") else None
        sw = None
        if idle is None:
            self.trace.require("energy.df_energy_estimate (activity)", "sched_switch")
            sw = self.trace.df("sched_switch", windowed=False)
        from abtest.analysis.frequency import trace_cpu_frequency  # seeded with polled samples (perfetto)
        return df_energy_estimate(trace_cpu_frequency(self.trace), plat, cpu_idle=idle,
                                  sched_switch=sw, **self._win())

    def plot_power_per_rail(self, ax=None):
        return plot_power_per_rail(self.df_power_per_rail(), ax=ax)


def summary(trace) -> dict:
    """JSON-serialisable energy summary: rails {rail: {energy_j, avg_power_mw, coverage_pct}},
    channels {channel: avg_power_mw}; estimate {domain: {energy_j, avg_power_mw}, source} when a platform
    with an energy model and cpu_frequency exist. Absent inputs give absent keys."""
    out: dict = {}
    ea = EnergyAnalysis(trace)
    if trace.has_events("power_rail"):
        rails = ea.df_power_per_rail()
        out["rails"] = {r["rail"]: {"energy_j": r["energy_j"], "avg_power_mw": r["avg_power_mw"],
                                    "coverage_pct": r["coverage_pct"]} for r in rails.iter_rows(named=True)}
        out["channels_avg_power_mw"] = dict(df_power_per_channel(rails).select("channel", "avg_power_mw").iter_rows())
    plat = trace_platform(trace)
    if plat and plat.get("energy_model_source") and trace.has_events("cpu_frequency") and (
            trace.has_events("cpu_idle") or trace.has_events("sched_switch")):
        est = ea.df_energy_estimate()
        out["estimate"] = {"source": plat["energy_model_source"],
                           "domains": {str(r["domain"]): {"energy_j": r["energy_j"], "avg_power_mw": r["avg_power_mw"],
                                                          "unmodelled_ns": r["unmodelled_ns"]}
                                       for r in est.iter_rows(named=True)},
                           "total_energy_j": float(est["energy_j"].sum())}
    return out

