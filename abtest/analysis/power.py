"""Power channels: measured rail energy -> average power per rail and per channel (CPU, CPU-Big, CPU-Little,
CPU-Mid, GPU, Display, Memory, Total), the metrics `power.<Channel>` and `power.rail.<RAIL>` in mW.

Whatever the source — perfetto power rails, Pixel ODPM sysfs samples, the store's power.csv, hwmon, RAPL,
Monsoon, BattOr — the samples arrive as a ``power_rail``-shaped frame (ts ns, rail, subsystem, energy_uj
cumulative) and are integrated by df_power_per_rail below (piecewise-constant power between
samples, after the counter checks below). A channel's power is the sum of its rails' average power.

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

Counter checks (issue 43; df_counter_samples, df_counter_steps): samples with null/NaN or negative energy,
rows of one rail sharing a timestamp with different values, and glitches (a sample outside the range of its
two neighbours while they are in order) are excluded; the energy between the good samples around them is still
known. A backward step between good samples is believed only when plausible — a wrap when the rail's counter
range is declared (``wrap_uj={rail: max_energy_range_uj}``; delta = value - previous + max_range + 1, as RAPL's
energy_uj) and that delta is plausible, else a reset when the new value is near zero (delta = the new value:
the energy before the reset in that interval is lost) — plausible meaning at most RESET_POWER_FACTOR x the
rail's peak power over its ordinary steps; any other backward step is a drop: that interval is not counted.
Every exclusion, reset and wrap is counted per rail (df_power_per_rail) and power_metrics returns one
CounterCheck per affected rail, which compare turns into a note of the iteration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import polars as pl

from abtest.analysis.intervals import df_intervals, window_of
from abtest.metric_spec import Aggregation, Direction, Grouping, MetricSpec, MetricValue, WindowCombine

EVENTS = ("power_rail",)
OPTIONAL_EVENTS: tuple[str, ...] = ()

CHANNEL_ORDER = ("CPU", "CPU-Big", "CPU-Little", "CPU-Mid", "GPU", "Total")  # the seed table's rows, in order
CPU_CHANNELS = ("CPU-Big", "CPU-Little", "CPU-Mid")

POWER_CHANNEL = MetricSpec(
    "power.{channel}",
    "mW",
    Direction.LOWER,
    Aggregation.MEAN,
    Grouping.CHANNEL,
    title="average power",
    headline=True,
    description="Average power of the channel's rails over the iteration (energy / time covered by samples, "
    "summed over its rails); Total = every rail.",
    window=WindowCombine.TIME,
)
POWER_RAIL = MetricSpec(
    "power.rail.{rail}",
    "mW",
    Direction.LOWER,
    Aggregation.MEAN,
    Grouping.RAIL,
    title="rail power",
    description="Average power of one measured rail over the iteration (energy / time covered by its samples).",
    window=WindowCombine.TIME,
)

METRICS = (POWER_CHANNEL, POWER_RAIL)


# -- integration of the rail counters ------------------------------------------------------------
RESET_POWER_FACTOR = 2.0  # a reset / wrap is believed when it implies <= this x the rail's peak ordinary power

# Per rail, what the counter checks count (df_power_per_rail columns). Excluded: samples or steps not used,
# and what the note says about them; believed: backward steps taken as a reset or a wrap (the note says so too).
EXCLUDED = {
    "unreadable": "sample(s) without a usable reading excluded (null/NaN energy; BattOr: negative current)",
    "negative": "negative counter value(s) refused",
    "conflicting": "row(s) sharing a timestamp with different values excluded (conflicting repeated timestamps)",
    "glitches": "glitch sample(s) out of line with both neighbours excluded",
    "drops": "backward step(s) neither a plausible reset nor a wrap: those intervals not counted",
}
BELIEVED = {
    "resets": "counter reset(s) believed (new value near zero; energy before each reset in that interval lost)",
    "wraps": "counter wrap(s) at the declared range",
}
CHECK_COLUMNS = ("duplicates", *EXCLUDED, *BELIEVED)


def df_counter_samples(power_rail: pl.DataFrame) -> pl.DataFrame:
    """Every sample with the checks' verdict: rail (Utf8), ts (ns), energy_uj, status — "ok", "unreadable"
    (null/NaN energy), "negative" (< 0: a cumulative counter never is), "duplicate" (an exact repeat of an
    earlier row: collapsed, nothing lost), "conflicting" (rows of one rail at one ts with different values:
    all of them excluded), "glitch" (an interior sample outside the range of its two neighbours while they
    are in order: removing it restores a monotonic counter). The energy between the samples around an
    excluded one is still known: the step spans it."""
    s = power_rail.select(pl.col("rail").cast(pl.Utf8), "ts", pl.col("energy_uj").cast(pl.Float64)).with_row_index("_i")
    e = pl.col("energy_uj")
    s = s.with_columns(
        pl.when(e.is_null() | e.is_nan())
        .then(pl.lit("unreadable"))
        .when(e < 0)
        .then(pl.lit("negative"))
        .alias("status")
    )
    per_ts = (
        s.filter(pl.col("status").is_null())
        .group_by("rail", "ts")
        .agg(e.n_unique().alias("_values"), pl.col("_i").min().alias("_first"))
    )
    s = (
        s.join(per_ts, on=["rail", "ts"], how="left")
        .with_columns(
            pl.when(pl.col("status").is_not_null())
            .then(pl.col("status"))
            .when(pl.col("_values") > 1)
            .then(pl.lit("conflicting"))
            .when(pl.col("_i") != pl.col("_first"))
            .then(pl.lit("duplicate"))
            .alias("status")
        )
        .drop("_values", "_first")
    )
    kept = _mark_glitches(s.filter(pl.col("status").is_null()).sort("rail", "ts"))
    rest = s.filter(pl.col("status").is_not_null())
    return pl.concat([kept, rest]).sort("rail", "ts", "_i").drop("_i")


def _mark_glitches(kept: pl.DataFrame) -> pl.DataFrame:
    """status "glitch" or "ok" for readable, single-valued samples sorted by rail, ts. A backward step has two
    suspects: its upper sample (too high) and its lower one (too low); a suspect is a glitch when its two
    neighbours are in order (dropping it leaves the counter monotonic). When both suspects qualify, the one
    further from the line between its neighbours is the glitch (a spike of +G sits ~G off its line, the sample
    after it ~G/2)."""
    e, ts = pl.col("energy_uj"), pl.col("ts")
    prev, nxt = e.shift(1).over("rail"), e.shift(-1).over("rail")
    t0, t1 = ts.shift(1).over("rail"), ts.shift(-1).over("rail")
    line = prev + (nxt - prev) * (ts - t0).cast(pl.Float64) / (t1 - t0).cast(pl.Float64)
    in_order = (prev <= nxt).fill_null(False)
    k = kept.with_columns(
        (e - line).abs().alias("_dev"), (in_order & (e > nxt)).alias("_high"), (in_order & (e < prev)).alias("_low")
    )
    dev, high, low = pl.col("_dev"), pl.col("_high"), pl.col("_low")
    partner_low = (low.shift(-1).over("rail") & (dev.shift(-1).over("rail") > dev)).fill_null(False)
    partner_high = (high.shift(1).over("rail") & (dev.shift(1).over("rail") >= dev)).fill_null(False)
    glitch = (high & ~partner_low) | (low & ~partner_high)
    return k.with_columns(pl.when(glitch).then(pl.lit("glitch")).otherwise(pl.lit("ok")).alias("status")).drop(
        "_dev", "_high", "_low"
    )


def df_counter_steps(samples: pl.DataFrame, wrap_uj: dict[str, float] | None = None) -> pl.DataFrame:
    """Steps between consecutive "ok" samples of df_counter_samples: rail, ts, next_ts (ns), de_uj (energy of
    the step, null = not counted), kind — "ok" (the counter went up or stayed), "wrap" (went down; the
    rail's counter range is declared, ``wrap_uj={rail: max_energy_range_uj}``, and the wrapped delta
    value - previous + range + 1 is plausible), "reset" (went down to a value near zero: at most what the
    rail gains in the interval at RESET_POWER_FACTOR x its peak ordinary-step power; de = the new value),
    "drop" (went down otherwise: the interval is not counted).
    """
    wrap_uj = wrap_uj or {}
    wraps = pl.DataFrame(
        {"rail": list(wrap_uj), "wrap_uj": [float(v) for v in wrap_uj.values()]},
        schema={"rail": pl.Utf8, "wrap_uj": pl.Float64},
    )
    d = (
        samples.filter(pl.col("status") == "ok")
        .select("rail", "ts", "energy_uj")
        .sort("rail", "ts")
        .join(wraps, on="rail", how="left")
        .with_columns(
            pl.col("ts").shift(-1).over("rail").alias("next_ts"),
            pl.col("energy_uj").shift(-1).over("rail").alias("_next_e"),
        )
        .filter(pl.col("next_ts").is_not_null())
    )
    raw = pl.col("_next_e") - pl.col("energy_uj")
    dt = (pl.col("next_ts") - pl.col("ts")).cast(pl.Float64)
    peak = (raw / dt).filter(raw >= 0).max().over("rail").fill_null(0.0)  # uJ/ns
    allowed = RESET_POWER_FACTOR * peak * dt  # the most the rail plausibly gains in this interval, uJ
    wrapped = raw + pl.col("wrap_uj") + 1
    kind = (
        pl.when(raw >= 0)
        .then(pl.lit("ok"))
        .when(pl.col("wrap_uj").is_not_null() & (wrapped <= allowed))
        .then(pl.lit("wrap"))
        .when(pl.col("_next_e") <= allowed)
        .then(pl.lit("reset"))
        .otherwise(pl.lit("drop"))
    )
    de = (
        pl.when(raw >= 0)
        .then(raw)
        .when(pl.col("_kind") == "wrap")
        .then(wrapped)
        .when(pl.col("_kind") == "reset")
        .then(pl.col("_next_e"))
    )
    return (
        d.with_columns(kind.alias("_kind"))
        .with_columns(de.alias("de_uj"))
        .select("rail", "ts", "next_ts", "de_uj", pl.col("_kind").alias("kind"))
    )


def df_rail_power_intervals(
    power_rail: pl.DataFrame,
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
    wrap_uj: dict[str, float] | None = None,
) -> pl.DataFrame:
    """Piecewise-constant power per rail: ``rail, ts (ns), dur (ns), power_mw`` (null = not covered by samples,
    or a step not counted), clipped to the window. Samples and steps pass the counter checks first
    (df_counter_samples, df_counter_steps). Events: power_rail."""
    d = df_counter_steps(df_counter_samples(power_rail), wrap_uj)
    dt = (pl.col("next_ts") - pl.col("ts")).cast(pl.Float64)
    changes = pl.concat(
        [
            d.select("rail", "ts", pl.when(dt > 0).then(pl.col("de_uj") / dt * 1e6).alias("power_mw")),
            # after the last sample: unknown
            d.group_by("rail")
            .agg(pl.col("next_ts").max().alias("ts"))
            .with_columns(pl.lit(None, pl.Float64).alias("power_mw")),
        ]
    )
    if start_ns is None or end_ns is None:
        start_ns, end_ns = window_of(power_rail, start_ns, end_ns)
    return df_intervals(changes, "power_mw", keys="rail", start_ns=start_ns, end_ns=end_ns, merge_equal=False)


def _check_counts(
    power_rail: pl.DataFrame, wrap_uj: dict[str, float] | None, start_ns: int, end_ns: int
) -> pl.DataFrame:
    """Per rail, the counter checks' counts in the window [start_ns, end_ns]: CHECK_COLUMNS (Int64)."""
    samples = df_counter_samples(power_rail)
    st = pl.col("status")
    per_sample = (
        samples.filter(pl.col("ts").is_between(start_ns, end_ns))
        .group_by("rail")
        .agg(
            (st == "duplicate").sum().alias("duplicates"),
            (st == "unreadable").sum().alias("unreadable"),
            (st == "negative").sum().alias("negative"),
            (st == "conflicting").sum().alias("conflicting"),
            (st == "glitch").sum().alias("glitches"),
        )
    )
    k = pl.col("kind")
    per_step = (
        df_counter_steps(samples, wrap_uj)
        .filter((pl.col("ts") < end_ns) & (pl.col("next_ts") > start_ns))
        .group_by("rail")
        .agg(
            (k == "drop").sum().alias("drops"), (k == "reset").sum().alias("resets"), (k == "wrap").sum().alias("wraps")
        )
    )
    rails = samples.select(pl.col("rail").unique())
    return (
        rails.join(per_sample, on="rail", how="left")
        .join(per_step, on="rail", how="left")
        .select("rail", *(pl.col(c).fill_null(0).cast(pl.Int64) for c in CHECK_COLUMNS))
    )


def df_power_per_rail(
    power_rail: pl.DataFrame,
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
    wrap_uj: dict[str, float] | None = None,
) -> pl.DataFrame:
    """Energy and average power per rail over the window.

    Columns: rail, subsystem, energy_j (J), avg_power_mw (energy / covered time, mW), covered_ns (time of
    the window covered by counted steps), coverage_pct, samples (rows in the window), then the counter checks'
    counts in the window (CHECK_COLUMNS): duplicates (exact repeats, collapsed), unreadable, negative,
    conflicting, glitches (samples excluded), drops (steps not counted), resets, wraps (steps believed).
    Events: power_rail.
    """
    start_ns, end_ns = window_of(power_rail, start_ns, end_ns)
    iv = df_rail_power_intervals(power_rail, start_ns=start_ns, end_ns=end_ns, wrap_uj=wrap_uj)
    known = pl.col("power_mw").is_not_null()
    agg = iv.group_by("rail").agg(
        (pl.col("power_mw").filter(known) * pl.col("dur").filter(known)).sum().alias("_mw_ns"),
        pl.col("dur").filter(known).sum().alias("covered_ns"),
    )
    checks = _check_counts(power_rail, wrap_uj, start_ns, end_ns)
    inwin = power_rail.filter((pl.col("ts") >= start_ns) & (pl.col("ts") < end_ns))
    counts = inwin.group_by(pl.col("rail").cast(pl.Utf8)).agg(
        pl.len().cast(pl.Int64).alias("samples"),
        (pl.col("subsystem").cast(pl.Utf8).first() if "subsystem" in inwin.columns else pl.lit(None, pl.Utf8)).alias(
            "subsystem"
        ),
    )
    out = (
        agg.join(counts, on="rail", how="left")
        .join(checks, on="rail", how="left")
        .with_columns(pl.col("samples", *CHECK_COLUMNS).fill_null(0))
    )
    return out.select(
        "rail",
        "subsystem",
        (pl.col("_mw_ns") * 1e-12).alias("energy_j"),  # mW x ns = 1e-3 W x 1e-9 s
        pl.when(pl.col("covered_ns") > 0).then(pl.col("_mw_ns") / pl.col("covered_ns")).alias("avg_power_mw"),
        "covered_ns",
        (100.0 * pl.col("covered_ns") / max(end_ns - start_ns, 1)).alias("coverage_pct"),
        "samples",
        *CHECK_COLUMNS,
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
    source="built-in mapping for Google Pixel 6/7/8 (Tensor ODPM rail names)",
)
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


def rail_mapping(rails: list[str], explicit: dict | None = None, origin: str | None = None) -> RailMapping:
    """The rail -> channel mapping for these rail names (module docstring: explicit, device, generic). origin:
    where an explicit mapping came from (abtest.analysis.power_source names it), printed with it."""
    if explicit:
        return RailMapping(
            {ch: tuple(v) for ch, v in explicit.items() if ch not in ("CPU", "Total")},
            f"explicit mapping ({origin or 'store abtest.toml / platform rail_channels'})",
        )
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
        rows.append(
            {
                "channel": ch,
                "rails": sorted(rails),
                "avg_power_mw": sel["avg_power_mw"].sum(),
                "energy_j": sel["energy_j"].sum(),
            }
        )
    order = {c: i for i, c in enumerate(CHANNEL_ORDER)}
    rows.sort(key=lambda r: (order.get(r["channel"], len(order)), r["channel"]))
    return pl.DataFrame(
        rows, schema={"channel": pl.Utf8, "rails": pl.List(pl.Utf8), "avg_power_mw": pl.Float64, "energy_j": pl.Float64}
    )


@dataclass(frozen=True)
class CounterCheck:
    """What the counter checks did to one rail's samples in one window (one iteration): counts by kind
    (EXCLUDED and BELIEVED keys), the channels the rail feeds, and whether the rail kept a value at all."""

    rail: str
    channels: tuple[str, ...]
    counts: dict
    reported: bool = True

    def note(self) -> str:
        """One line naming every exclusion and every believed reset / wrap of the rail."""
        said = [f"{self.counts[k]} {text}" for k, text in (EXCLUDED | BELIEVED).items() if self.counts.get(k)]
        if not self.reported:
            said.append("no usable step left: the rail is not reported")
        feeds = f" ({', '.join(self.channels)})" if self.channels else ""
        return f"power rail {self.rail}{feeds}: {'; '.join(said)}"


class PowerMetrics(NamedTuple):
    """power_metrics' answer: the values, the rail -> channel mapping used, and one CounterCheck per rail
    whose samples the counter checks excluded or whose counter reset or wrapped (empty when all is clean)."""

    values: list
    mapping: RailMapping
    checks: list


def counter_checks(checks: pl.DataFrame, mapping: RailMapping, reported: set[str]) -> list[CounterCheck]:
    """CounterCheck records from _check_counts' rows that have anything to say (duplicates alone do not:
    an exact repeat changes nothing)."""
    out = []
    for row in checks.sort("rail").iter_rows(named=True):
        counts = {k: int(row[k]) for k in (*EXCLUDED, *BELIEVED) if row[k]}
        if counts or row["rail"] not in reported:
            feeds = [ch for ch, rails in mapping.channels.items() if row["rail"] in rails]
            cpu = ["CPU"] if any(ch in CPU_CHANNELS for ch in feeds) else []
            out.append(CounterCheck(row["rail"], (*feeds, *cpu, "Total"), counts, row["rail"] in reported))
    return out


def power_metrics(
    samples: pl.DataFrame,
    *,
    explicit: dict | None = None,
    origin: str | None = None,
    start_ns: int | None = None,
    end_ns: int | None = None,
) -> PowerMetrics:
    """`power.<Channel>` and `power.rail.<RAIL>` (mW) from power_rail-shaped samples, the mapping used (explicit
    from `origin`, else built in: rail_mapping), and the counter checks' records (CounterCheck) for the notes.
    Callers get samples and mapping from abtest.analysis.power_source."""
    start_ns, end_ns = window_of(samples, start_ns, end_ns)
    per_rail = df_power_per_rail(samples, start_ns=start_ns, end_ns=end_ns).filter(pl.col("avg_power_mw").is_not_null())
    mapping = rail_mapping(per_rail["rail"].to_list(), explicit, origin)
    checks = counter_checks(_check_counts(samples, None, start_ns, end_ns), mapping, set(per_rail["rail"]))
    covered = dict(per_rail.select("rail", "covered_ns").iter_rows())
    out = [
        MetricValue(POWER_RAIL, float(mw), rail, known_s=covered[rail] / 1e9)
        for rail, mw in per_rail.select("rail", "avg_power_mw").iter_rows()
    ]
    for ch, rails, mw in df_channel_power(per_rail, mapping).select("channel", "rails", "avg_power_mw").iter_rows():
        spans = {covered[r] for r in rails}  # a sum of rail means is a mean over one span only if they share it
        out.append(MetricValue(POWER_CHANNEL, float(mw), ch, known_s=spans.pop() / 1e9 if len(spans) == 1 else None))
    return PowerMetrics(out, mapping, checks)


class PowerAnalysis:
    """Measured power of one trace (``trace.power``); window = the trace's window."""

    def __init__(self, trace):
        self.trace = trace

    def df_power_per_rail(self, wrap_uj: dict | None = None) -> pl.DataFrame:
        """df_power_per_rail over the trace's window. Events: power_rail."""
        self.trace.require("power.df_power_per_rail", *EVENTS)
        return df_power_per_rail(
            self.trace.df("power_rail", windowed=False),
            wrap_uj=wrap_uj,
            start_ns=self.trace.start_ns,
            end_ns=self.trace.end_ns,
        )

    def mapping(self, explicit: dict | None = None) -> RailMapping:
        """The rail -> channel mapping for this trace's rails (explicit, else built in; module docstring)."""
        rails = self.df_power_per_rail()["rail"].to_list()
        return rail_mapping(rails, explicit or (self.trace.platform or {}).get("rail_channels"))

    def df_power_per_channel(self, explicit: dict | None = None) -> pl.DataFrame:
        """df_channel_power with this trace's mapping."""
        return df_channel_power(self.df_power_per_rail(), self.mapping(explicit))

    def plot_power_per_rail(self, ax=None):
        return plot_power_per_rail(self.df_power_per_rail(), ax=ax)
