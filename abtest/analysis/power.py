"""Power channels: measured rail energy -> average power per rail and per channel (CPU, CPU-Big, CPU-Little,
CPU-Mid, GPU, Display, Memory, Total), the metrics `power.<Channel>` and `power.rail.<RAIL>` in mW.

Whatever the source — perfetto power rails, Pixel ODPM sysfs samples, the store's power.csv, hwmon, RAPL,
Monsoon, BattOr — the samples arrive as a ``power_rail``-shaped frame (ts ns, rail, subsystem, energy_uj
cumulative) and are integrated by df_power_per_rail below (piecewise-constant power between
samples, counter wraps/resets handled there). A channel's power is the sum of its rails' average power.

Rail -> channel mapping, first that applies:
1. an explicit mapping given by the caller (the store's abtest.toml ``[power.channels]``, the target file's
   ``[platform.rails]`` as the collector recorded it in meta.json, or a platform file's ``rail_channels``:
   ``{channel: [rail names]}``);
2. a built-in device mapping when the trace's rail names identify the device family (e.g. Google Pixel 6/7/8:
   Tensor ODPM rails S4M_VDD_CPUCL0 = little, S3M_VDD_CPUCL1 = mid, S2M_VDD_CPUCL2 = big, ...G3D = GPU);
3. generic rail-name patterns (CPU_LITTLE, GPU, DISP, MEM ...), labelled as such.
"Total" is always the sum of every rail; "CPU" the sum of the CPU channels' rails. Every rail also stays
visible as `power.rail.<RAIL>`, mapped or not. The mapping used is reported (`RailMapping.source`).

Integration: between two consecutive samples of a rail the power is taken as constant:
``power_mw = delta_energy_uj / delta_ts_ns * 1e6``. Energy in a window is the integral of that
piecewise-constant power over the window (intervals straddling a window edge are pro-rated), through
:func:`abtest.analysis.intervals.df_intervals`. Time before a rail's first or after its last sample is not
covered: ``covered_ns`` / ``coverage_pct`` say how much of the window the samples cover, and the average
power is energy / covered time.

Counter wrap and reset rule: a sample lower than the previous one is a wrap when the rail's counter range
is known (``wrap_uj={rail: max_energy_range_uj}``; delta = value - previous + max_range + 1, as RAPL's
energy_uj) and otherwise a reset to 0 (delta = the new value: the energy between the previous sample and the
reset is unknown and not counted; ``resets`` counts these).
"""
from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from abtest.analysis.intervals import df_intervals, window_of
from abtest.metric_spec import Aggregation, Direction, Grouping, MetricSpec, MetricValue, WindowCombine

EVENTS = ("power_rail",)
OPTIONAL_EVENTS: tuple[str, ...] = ()

CHANNEL_ORDER = ("CPU", "CPU-Big", "CPU-Little", "CPU-Mid", "GPU", "Total")  # the seed table's rows, in order
CPU_CHANNELS = ("CPU-Big", "CPU-Little", "CPU-Mid")

POWER_CHANNEL = MetricSpec(
    "power.{channel}", "mW", Direction.LOWER, Aggregation.MEAN, Grouping.CHANNEL, title="average power",
    headline=True,
    description="Average power of the channel's rails over the iteration (energy / time covered by samples, "
                "summed over its rails); Total = every rail.", window=WindowCombine.TIME)
POWER_RAIL = MetricSpec(
    "power.rail.{rail}", "mW", Direction.LOWER, Aggregation.MEAN, Grouping.RAIL, title="rail power",
    description="Average power of one measured rail over the iteration (energy / time covered by its samples).",
    window=WindowCombine.TIME)

METRICS = (POWER_CHANNEL, POWER_RAIL)


# -- integration of the rail counters ------------------------------------------------------------
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


def plot_power_per_rail(per_rail: pl.DataFrame, *, ax=None, top: int = 24):
    """Horizontal bars of average power per rail (mW), largest first. Returns the Figure."""
    import matplotlib.pyplot as plt
    data = per_rail.drop_nulls("avg_power_mw").sort("avg_power_mw", descending=True).head(top)
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(8, max(2.5, 0.3 * data.height)))
    ax.barh(data["rail"].to_list()[::-1], data["avg_power_mw"].to_list()[::-1])
    ax.set_xlabel("average power (mW)")
    ax.set_title("Power per rail")
    return fig


@dataclass(frozen=True)
class RailMapping:
    """channels: {channel: (rail names)} for the named channels (CPU, Total are derived); source: where the
    mapping comes from, printed with the power table."""
    channels: dict
    source: str


# Google Tensor ODPM rail names (Pixel 6 gs101, Pixel 7 gs201, Pixel 8 zuma; AOSP power-stats HAL and
# Perfetto's friendly rail names agree: CPUCL0 little, CPUCL1 mid, CPUCL2 big, G3D GPU).
_PIXEL_TENSOR = RailMapping(
    channels={
        "CPU-Little": ("S4M_VDD_CPUCL0", "S9M_VDD_CPUCL0_M"),
        "CPU-Mid": ("S3M_VDD_CPUCL1", "S3M_VDD_CPUCL1_M"),
        "CPU-Big": ("S2M_VDD_CPUCL2", "S6M_VDD_CPUCL2_M"),
        "GPU": ("S2S_VDD_G3D", "S8S_VDD_G3D_L2", "S2S_VDD_G3D_L2"),
        "Display": ("VSYS_PWR_DISPLAY", "PPVAR_VSYS_PWR_DISP"),
        "Memory": ("S1M_VDD_MIF", "S4S_VDD2H_MEM", "S5S_VDDQ_MEM"),
    },
    source="built-in mapping for Google Pixel 6/7/8 (Tensor ODPM rail names)")
_DEVICE_MAPPINGS = ((_PIXEL_TENSOR, ("S4M_VDD_CPUCL0", "S2M_VDD_CPUCL2")),)  # (mapping, rails that identify it)

# Generic patterns on rail names (case-insensitive regex), used only when no device mapping applies.
_GENERIC_PATTERNS = {
    "CPU-Little": r"VDD_CPUCL0|CPU_?LITTLE|LITTLE",
    "CPU-Mid": r"VDD_CPUCL1|CPU_?MID",
    "CPU-Big": r"VDD_CPUCL2|CPU_?BIG|\bBIG\b|A57|A72|A76|A78",
    "GPU": r"G3D|GPU",
    "Display": r"DISP|DISPLAY|PANEL",
    "Memory": r"MEM|MIF|DDR",
}


def rail_mapping(rails: list[str], explicit: dict | None = None) -> RailMapping:
    """The rail -> channel mapping for these rail names (module docstring: explicit, device, generic)."""
    if explicit:
        return RailMapping({ch: tuple(v) for ch, v in explicit.items() if ch not in ("CPU", "Total")},
                           "explicit mapping (store abtest.toml / platform rail_channels)")
    present = set(rails)
    for mapping, signature in _DEVICE_MAPPINGS:
        if all(r in present for r in signature):
            return mapping
    s = pl.Series(rails, dtype=pl.Utf8)
    chans = {ch: tuple(s.filter(s.str.contains(f"(?i){pat}")).to_list()) for ch, pat in _GENERIC_PATTERNS.items()}
    return RailMapping(chans, "generic rail-name patterns (no device mapping matched these rails)")


def df_channel_power(per_rail: pl.DataFrame, mapping: RailMapping) -> pl.DataFrame:
    """Average power per channel from df_power_per_rail: channel, rails (list), avg_power_mw, energy_j.
    Channels with no rail present are omitted; CPU = the CPU channels' rails, Total = every rail."""
    present = set(per_rail["rail"].to_list())
    groups = {ch: [r for r in rails if r in present] for ch, rails in mapping.channels.items()}
    cpu = sorted({r for ch in CPU_CHANNELS for r in groups.get(ch, [])})
    groups = {**groups, "CPU": cpu, "Total": sorted(present)}
    rows = []
    for ch, rails in groups.items():
        if not rails:
            continue
        sel = per_rail.filter(pl.col("rail").is_in(rails))
        rows.append({"channel": ch, "rails": sorted(rails), "avg_power_mw": sel["avg_power_mw"].sum(),
                     "energy_j": sel["energy_j"].sum()})
    order = {c: i for i, c in enumerate(CHANNEL_ORDER)}
    rows.sort(key=lambda r: (order.get(r["channel"], len(order)), r["channel"]))
    return pl.DataFrame(rows, schema={"channel": pl.Utf8, "rails": pl.List(pl.Utf8), "avg_power_mw": pl.Float64,
                                      "energy_j": pl.Float64})


def power_metrics(samples: pl.DataFrame, *, explicit: dict | None = None, start_ns: int | None = None,
                  end_ns: int | None = None) -> tuple[list[MetricValue], RailMapping]:
    """`power.<Channel>` and `power.rail.<RAIL>` (mW) from power_rail-shaped samples, and the mapping used."""
    per_rail = df_power_per_rail(samples, start_ns=start_ns, end_ns=end_ns).filter(
        pl.col("avg_power_mw").is_not_null())
    mapping = rail_mapping(per_rail["rail"].to_list(), explicit)
    covered = dict(per_rail.select("rail", "covered_ns").iter_rows())
    out = [MetricValue(POWER_RAIL, float(mw), rail, known_s=covered[rail] / 1e9)
           for rail, mw in per_rail.select("rail", "avg_power_mw").iter_rows()]
    for ch, rails, mw in df_channel_power(per_rail, mapping).select("channel", "rails", "avg_power_mw").iter_rows():
        spans = {covered[r] for r in rails}  # a sum of rail means is a mean over one span only if they share it
        out.append(MetricValue(POWER_CHANNEL, float(mw), ch, known_s=spans.pop() / 1e9 if len(spans) == 1 else None))
    return out, mapping


def metrics(trace, options=None) -> list[MetricValue]:
    """Power metrics of a trace that carries power rails (perfetto PowerRails, BattOr in a Catapult zip).
    The mapping comes from ``options.rail_channels`` or the trace's platform ``rail_channels``, else built in."""
    explicit = getattr(options, "rail_channels", None) or (trace.platform or {}).get("rail_channels")
    vals, _ = power_metrics(trace.df("power_rail", windowed=False), explicit=explicit, start_ns=trace.start_ns, end_ns=trace.end_ns)
    return vals


class PowerAnalysis:
    """Measured power of one trace (``trace.power``); window = the trace's window."""

    def __init__(self, trace):
        self.trace = trace

    def df_power_per_rail(self, wrap_uj: dict | None = None) -> pl.DataFrame:
        """df_power_per_rail over the trace's window. Events: power_rail."""
        self.trace.require("power.df_power_per_rail", *EVENTS)
        return df_power_per_rail(self.trace.df("power_rail", windowed=False), wrap_uj=wrap_uj,
                                 start_ns=self.trace.start_ns, end_ns=self.trace.end_ns)

    def mapping(self, explicit: dict | None = None) -> RailMapping:
        """The rail -> channel mapping for this trace's rails (explicit, else built in; module docstring)."""
        rails = self.df_power_per_rail()["rail"].to_list()
        return rail_mapping(rails, explicit or (self.trace.platform or {}).get("rail_channels"))

    def df_power_per_channel(self, explicit: dict | None = None) -> pl.DataFrame:
        """df_channel_power with this trace's mapping."""
        return df_channel_power(self.df_power_per_rail(), self.mapping(explicit))

    def plot_power_per_rail(self, ax=None):
        return plot_power_per_rail(self.df_power_per_rail(), ax=ax)


def summary(trace) -> dict:
    """JSON-serialisable measured power: rails {rail: {energy_j, avg_power_mw, coverage_pct}}, channels
    {channel: avg_power_mw}, channel_mapping (where the rail -> channel mapping came from); {} without rails."""
    if not trace.has_events("power_rail"):
        return {}
    per_rail = df_power_per_rail(trace.df("power_rail", windowed=False), start_ns=trace.start_ns, end_ns=trace.end_ns)
    mapping = rail_mapping(per_rail["rail"].to_list(), (trace.platform or {}).get("rail_channels"))
    return {"rails": {r["rail"]: {"energy_j": r["energy_j"], "avg_power_mw": r["avg_power_mw"],
                                  "coverage_pct": r["coverage_pct"]} for r in per_rail.iter_rows(named=True)},
            "channels": dict(df_channel_power(per_rail, mapping).select("channel", "avg_power_mw").iter_rows()),
            "channel_mapping": mapping.source}
