"""Thermal: zone temperatures, cooling-device states and the power allocator's budget.

Sources (all optional; the analysis runs on whichever the trace has):

* ``thermal_temperature`` (thermal_zone, id, temp_prev, temp in m°C): the thermal core's reading each time it
  polls a zone (kernel event, ``source`` "kernel");
* the same event carried by trace_marker text (``source`` "marker"): abtest's thermal sampler
  (abtest.collectors.thermal_sampler) writes every zone's /sys/class/thermal/thermal_zone*/temp during each
  iteration as ``thermal_temperature: thermal_zone=<type> id=<n> temp_prev=<m°C> temp=<m°C>`` (device-side on
  adb targets), so zones the kernel does not poll, or polls rarely, are covered;
* ``thermal_zone_trip`` (thermal_zone, id, trip, trip_type): a trip point crossed;
* ``cdev_update`` (type, target): a cooling device's new state (0 = not throttling);
* the power allocator (IPA): ``thermal_power_allocator`` (total_req_power, total_granted_power,
  max_allocatable_power, current_temperature, delta_temperature = control temperature - current, mW / m°C;
  newer kernels name them tz_id, current_temp, delta_temp),
  ``thermal_power_cpu_limit`` (cpus mask, freq kHz, cdev_state, power) and ``thermal_power_devfreq_limit``.

Definitions: a zone's temperature holds from one sample to the next (step signal); before its first sample
it is unknown (not counted). ``mean_c`` = time-weighted mean over the known time, ``max_c`` = highest sample,
``above_threshold_pct`` = share of the known time above THRESHOLD_C (70 °C; df_zone_stats takes any
threshold). Zones are named by their type (``soc_thermal``); two zones of the same type are told apart by id
(``acpitz-1``). Cooling devices are named by their type (``thermal-cpufreq-0``); ``active_pct`` = share of
the known time in a state > 0 (throttling).
"""

from __future__ import annotations

import polars as pl

from abtest.analysis.intervals import df_intervals, window_of
from abtest.analysis.meta_events import meta_thermal_temperature
from abtest.metric_spec import Aggregation, Direction, Grouping, MetricSpec, MetricValue, TableSpec, WindowCombine
from abtest.trace.errors import MissingEventsError

EVENTS: tuple[str, ...] = ()  # any of the optional ones (MissingEventsError from metrics() when none)
OPTIONAL_EVENTS = (
    "thermal_temperature",
    "marker",
    "thermal_zone_trip",
    "cdev_update",
    "thermal_power_allocator",
    "thermal_power_allocator_pid",
    "thermal_power_cpu_limit",
    "thermal_power_devfreq_limit",
)
THRESHOLD_C = 70.0

__all__ = [
    "EVENTS",
    "OPTIONAL_EVENTS",
    "THRESHOLD_C",
    "df_zone_temperatures",
    "df_zone_stats",
    "df_cdev_stats",
    "df_power_allocator",
    "df_cpu_limits",
    "ThermalAnalysis",
    "metrics",
]


def df_zone_temperatures(thermal_temperature: pl.DataFrame | None, marker: pl.DataFrame | None = None) -> pl.DataFrame:
    """Zone temperature samples of all sources: ``ts (ns), zone (Utf8), temp_c (Float64, °C), source``
    ("kernel" | "marker"), sorted by ts. Events: thermal_temperature; optional marker (sampler)."""
    parts = []
    if thermal_temperature is not None and not thermal_temperature.is_empty():
        parts.append(
            thermal_temperature.select(
                pl.col("ts").cast(pl.Int64),
                pl.col("thermal_zone").cast(pl.Utf8),
                (pl.col("id") if "id" in thermal_temperature.columns else pl.lit(None)).cast(pl.Int64).alias("id"),
                pl.col("temp").cast(pl.Int64),
                pl.lit("kernel").alias("source"),
            )
        )
    if marker is not None and not marker.is_empty():
        parts.append(
            meta_thermal_temperature(marker).select(
                "ts",
                pl.col("thermal_zone").cast(pl.Utf8),
                pl.col("id").cast(pl.Int64),
                pl.col("temp").cast(pl.Int64),
                "source",
            )
        )
    if not parts:
        return pl.DataFrame(schema={"ts": pl.Int64, "zone": pl.Utf8, "temp_c": pl.Float64, "source": pl.Utf8})
    df = pl.concat(parts)
    # a type shared by several zone ids is told apart by the id
    ids = df.group_by("thermal_zone").agg(pl.col("id").drop_nulls().n_unique().alias("_n"))
    df = df.join(ids, on="thermal_zone", how="left").with_columns(
        pl.when(pl.col("_n") > 1)
        .then(pl.concat_str([pl.col("thermal_zone"), pl.lit("-"), pl.col("id").cast(pl.Utf8)]))
        .otherwise(pl.col("thermal_zone"))
        .alias("zone")
    )
    return df.select("ts", "zone", (pl.col("temp") / 1000.0).alias("temp_c"), "source").sort("ts", maintain_order=True)


def df_zone_stats(
    temps: pl.DataFrame, *, start_ns: int | None = None, end_ns: int | None = None, threshold_c: float = THRESHOLD_C
) -> pl.DataFrame:
    """Per zone over ``[start_ns, end_ns)``: ``zone, samples (in the window), mean_c (time-weighted over the known
    time), max_c, min_c (samples in force in the window), known_ns, above_ns (time above threshold_c),
    above_threshold_pct (% of known time), kernel_samples, marker_samples``. ``temps``: df_zone_temperatures
    (whole trace: the value in force at the window start is carried in)."""
    start_ns, end_ns = window_of(temps, start_ns, end_ns)
    iv = df_intervals(temps.select("ts", "zone", "temp_c"), "temp_c", keys="zone", start_ns=start_ns, end_ns=end_ns)
    known = iv.filter(pl.col("temp_c").is_not_null())
    w = pl.col("dur").cast(pl.Float64)
    st = known.group_by("zone").agg(
        ((pl.col("temp_c") * w).sum() / w.sum()).alias("mean_c"),
        pl.col("temp_c").max().alias("max_c"),
        pl.col("temp_c").min().alias("min_c"),
        pl.col("dur").sum().alias("known_ns"),
        pl.col("dur").filter(pl.col("temp_c") > threshold_c).sum().alias("above_ns"),
    )
    inwin = temps.filter((pl.col("ts") >= start_ns) & (pl.col("ts") < end_ns))
    cnt = inwin.group_by("zone").agg(
        pl.len().cast(pl.Int64).alias("samples"),
        (pl.col("source") == "kernel").sum().cast(pl.Int64).alias("kernel_samples"),
        (pl.col("source") == "marker").sum().cast(pl.Int64).alias("marker_samples"),
    )
    return (
        st.join(cnt, on="zone", how="left")
        .with_columns(
            pl.col("samples", "kernel_samples", "marker_samples").fill_null(0),
            (100.0 * pl.col("above_ns") / pl.col("known_ns")).alias("above_threshold_pct"),
        )
        .select(
            "zone",
            "samples",
            "mean_c",
            "max_c",
            "min_c",
            "known_ns",
            "above_ns",
            "above_threshold_pct",
            "kernel_samples",
            "marker_samples",
        )
        .sort("zone")
    )


def df_cdev_stats(cdev_update: pl.DataFrame, *, start_ns: int | None = None, end_ns: int | None = None) -> pl.DataFrame:
    """Per cooling device: ``cdev (type), updates (in the window), mean_state (time-weighted over the known time),
    max_state, active_ns (state > 0), active_pct (% of known time), known_ns``. Events: cdev_update."""
    ev = cdev_update.select(
        pl.col("ts").cast(pl.Int64),
        pl.col("type").cast(pl.Utf8).alias("cdev"),
        pl.col("target").cast(pl.Int64).alias("state"),
    )
    start_ns, end_ns = window_of(ev, start_ns, end_ns)
    iv = df_intervals(ev, "state", keys="cdev", start_ns=start_ns, end_ns=end_ns).filter(pl.col("state").is_not_null())
    w = pl.col("dur").cast(pl.Float64)
    st = iv.group_by("cdev").agg(
        ((pl.col("state") * w).sum() / w.sum()).alias("mean_state"),
        pl.col("state").max().alias("max_state"),
        pl.col("dur").sum().alias("known_ns"),
        pl.col("dur").filter(pl.col("state") > 0).sum().alias("active_ns"),
    )
    cnt = (
        ev.filter((pl.col("ts") >= start_ns) & (pl.col("ts") < end_ns))
        .group_by("cdev")
        .agg(pl.len().cast(pl.Int64).alias("updates"))
    )
    return (
        st.join(cnt, on="cdev", how="left")
        .with_columns(
            pl.col("updates").fill_null(0), (100.0 * pl.col("active_ns") / pl.col("known_ns")).alias("active_pct")
        )
        .select("cdev", "updates", "mean_state", "max_state", "active_ns", "active_pct", "known_ns")
        .sort("cdev")
    )


def df_power_allocator(
    allocator: pl.DataFrame, *, start_ns: int | None = None, end_ns: int | None = None
) -> pl.DataFrame:
    """The power allocator's budget per thermal zone id (``zone_id``, null when the event has none): samples,
    mean_req_power_mw, mean_granted_power_mw, mean_max_allocatable_power_mw (plain means of the events in the
    window: one per governor run), control_temp_c (current + delta temperature, last value), mean_current_temp_c.
    Events: thermal_power_allocator."""
    a = allocator
    if start_ns is not None:
        a = a.filter(pl.col("ts") >= start_ns)
    if end_ns is not None:
        a = a.filter(pl.col("ts") < end_ns)

    def col(*names: str) -> pl.Expr:  # field names differ across kernel versions (tz_id, current_temp, ...)
        return next((pl.col(n).cast(pl.Float64) for n in names if n in a.columns), pl.lit(None, pl.Float64))

    cur, delta = col("current_temperature", "current_temp"), col("delta_temperature", "delta_temp")
    return (
        a.with_columns(col("thermal_zone_id", "tz_id").cast(pl.Int64).alias("zone_id"))
        .sort("ts")
        .group_by("zone_id")
        .agg(
            pl.len().cast(pl.Int64).alias("samples"),
            col("total_req_power").mean().alias("mean_req_power_mw"),
            col("total_granted_power").mean().alias("mean_granted_power_mw"),
            col("max_allocatable_power").mean().alias("mean_max_allocatable_power_mw"),
            ((cur + delta).last() / 1000.0).alias("control_temp_c"),
            (cur.mean() / 1000.0).alias("mean_current_temp_c"),
        )
        .sort("zone_id")
    )


def df_cpu_limits(cpu_limit: pl.DataFrame, *, start_ns: int | None = None, end_ns: int | None = None) -> pl.DataFrame:
    """CPU frequency caps set by the power allocator, per CPU mask (``cpus``, as the event prints it): updates,
    mean_freq_limit_khz and mean_cdev_state (time-weighted over the known time), min_freq_limit_khz.
    Events: thermal_power_cpu_limit."""
    ev = cpu_limit.select(
        pl.col("ts").cast(pl.Int64),
        pl.col("cpus").cast(pl.Utf8),
        pl.col("freq").cast(pl.Int64).alias("freq_khz"),
        pl.col("cdev_state").cast(pl.Int64),
    )
    start_ns, end_ns = window_of(ev, start_ns, end_ns)
    iv = df_intervals(ev, ["freq_khz", "cdev_state"], keys="cpus", start_ns=start_ns, end_ns=end_ns).drop_nulls(
        "freq_khz"
    )
    w = pl.col("dur").cast(pl.Float64)
    cnt = (
        ev.filter((pl.col("ts") >= start_ns) & (pl.col("ts") < end_ns))
        .group_by("cpus")
        .agg(pl.len().cast(pl.Int64).alias("updates"))
    )
    return (
        iv.group_by("cpus")
        .agg(
            ((pl.col("freq_khz") * w).sum() / w.sum()).alias("mean_freq_limit_khz"),
            ((pl.col("cdev_state") * w).sum() / w.sum()).alias("mean_cdev_state"),
            pl.col("freq_khz").min().alias("min_freq_limit_khz"),
        )
        .join(cnt, on="cpus", how="left")
        .with_columns(pl.col("updates").fill_null(0))
        .sort("cpus")
    )


class ThermalAnalysis:
    """Thermal analyses of one trace (``trace.thermal``; window = the trace's window)."""

    def __init__(self, trace):
        self.trace = trace

    def _df(self, name: str) -> pl.DataFrame | None:
        return self.trace.df(name, windowed=False) if name in self.trace.tables else None

    def _win(self) -> dict:
        return {"start_ns": self.trace.start_ns, "end_ns": self.trace.end_ns}

    def df_zone_temperatures(self) -> pl.DataFrame:
        return df_zone_temperatures(self._df("thermal_temperature"), self._df("marker"))

    def df_zone_stats(self, threshold_c: float = THRESHOLD_C) -> pl.DataFrame:
        temps = self.df_zone_temperatures()
        if temps.is_empty():
            raise MissingEventsError("thermal zones", ["thermal_temperature"], str(self.trace.path))
        return df_zone_stats(temps, threshold_c=threshold_c, **self._win())

    def df_cdev_stats(self) -> pl.DataFrame:
        self.trace.require("thermal cooling devices", "cdev_update")
        return df_cdev_stats(self._df("cdev_update"), **self._win())

    def df_trips(self) -> pl.DataFrame:
        """thermal_zone_trip events in the window (ts, thermal_zone, id, trip, trip_type)."""
        self.trace.require("thermal trips", "thermal_zone_trip")
        return self.trace.df("thermal_zone_trip")

    def df_power_allocator(self) -> pl.DataFrame:
        self.trace.require("power allocator", "thermal_power_allocator")
        return df_power_allocator(self._df("thermal_power_allocator"), **self._win())

    def df_cpu_limits(self) -> pl.DataFrame:
        self.trace.require("power allocator CPU limits", "thermal_power_cpu_limit")
        return df_cpu_limits(self._df("thermal_power_cpu_limit"), **self._win())


def _present(trace, table: str, fn):
    """The rows of a declared table when the trace has `table`, else None."""
    return fn(ThermalAnalysis(trace)) if table in trace.tables else None


def _zone_rows(trace) -> pl.DataFrame | None:
    ta = ThermalAnalysis(trace)
    return None if ta.df_zone_temperatures().is_empty() else ta.df_zone_stats()


def _trip_rows(trace) -> pl.DataFrame | None:
    if "thermal_zone_trip" not in trace.tables:
        return None
    trips = ThermalAnalysis(trace).df_trips()
    return trips.group_by(pl.col("thermal_zone").cast(pl.Utf8).alias("zone")).agg(pl.len().alias("trips")).sort("zone")


TABLES = (
    TableSpec(
        "zones",
        f"Thermal zones (above threshold: {THRESHOLD_C:g} °C)",
        "zone samples kernel_samples marker_samples mean_c[°C] max_c[°C] min_c[°C] above_threshold_pct[%]",
        _zone_rows,
    ),
    TableSpec("trips", "Thermal zone trips (thermal_zone_trip events)", "zone trips", _trip_rows),
    TableSpec(
        "cooling_devices",
        "Cooling devices",
        "cdev updates mean_state max_state active_pct[%]",
        lambda t: _present(t, "cdev_update", ThermalAnalysis.df_cdev_stats),
    ),
    TableSpec(
        "power_allocator",
        "Power allocator per thermal zone",
        "zone_id samples mean_req_power_mw[mW] mean_granted_power_mw[mW] mean_max_allocatable_power_mw[mW] "
        "control_temp_c[°C] mean_current_temp_c[°C]",
        lambda t: _present(
            t,
            "thermal_power_allocator",
            lambda ta: ta.df_power_allocator().with_columns(pl.col("zone_id").cast(pl.Utf8).fill_null("none")),
        ),
    ),
    TableSpec(
        "cpu_limits",
        "Power allocator CPU frequency limits",
        "cpus updates mean_freq_limit_khz[kHz] min_freq_limit_khz[kHz] mean_cdev_state",
        lambda t: _present(t, "thermal_power_cpu_limit", ThermalAnalysis.df_cpu_limits),
    ),
)


# --------------------------------------------------------------------------------------------
# Declared metrics (abtest.analysis.registry)
# --------------------------------------------------------------------------------------------
_Z = (
    "of the thermal zone (named by its type; thermal_temperature events and abtest's sampler's readings), "
    "over the time its temperature is known"
)
ZONE_MEAN_C = MetricSpec(
    "thermal.zone.{zone}.mean_c",
    "°C",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.ZONE,
    title="mean temperature",
    description=f"Time-weighted mean temperature {_Z}.",
    window=WindowCombine.TIME,
)
ZONE_MAX_C = MetricSpec(
    "thermal.zone.{zone}.max_c",
    "°C",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.ZONE,
    title="max temperature",
    description="Highest temperature sample of the zone in the window.",
    window=WindowCombine.MAX,
)
ZONE_ABOVE_PCT = MetricSpec(
    "thermal.zone.{zone}.above_threshold_pct",
    "%",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.ZONE,
    title=f"time above {THRESHOLD_C:g} °C",
    description=f"Share of the known time the zone was above {THRESHOLD_C:g} °C.",
    window=WindowCombine.TIME,
)
CDEV_MEAN_STATE = MetricSpec(
    "thermal.cdev.{cdev}.mean_state",
    "",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.COOLING_DEVICE,
    title="cooling state",
    description="Time-weighted mean state of the cooling device (cdev_update target; 0 = not "
    "throttling) over the time it is known.",
    window=WindowCombine.TIME,
)
CDEV_ACTIVE_PCT = MetricSpec(
    "thermal.cdev.{cdev}.active_pct",
    "%",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.COOLING_DEVICE,
    title="throttling time",
    description="Share of the known time the cooling device was in a state > 0 (throttling).",
    window=WindowCombine.TIME,
)

METRICS = (ZONE_MEAN_C, ZONE_MAX_C, ZONE_ABOVE_PCT, CDEV_MEAN_STATE, CDEV_ACTIVE_PCT)


def metrics(trace, options=None) -> list[MetricValue]:
    """The declared thermal metrics (per zone, per cooling device). MissingEventsError when the trace has neither
    zone temperatures nor cdev_update."""
    ta = ThermalAnalysis(trace)
    out: list[MetricValue] = []
    temps = ta.df_zone_temperatures()
    if temps.is_empty() and "cdev_update" not in trace.tables:
        raise MissingEventsError("thermal", ["thermal_temperature"], str(trace.path))
    if not temps.is_empty():
        for r in ta.df_zone_stats().iter_rows(named=True):  # one row per zone
            out += [
                MetricValue(ZONE_MEAN_C, float(r["mean_c"]), r["zone"]),
                MetricValue(ZONE_MAX_C, float(r["max_c"]), r["zone"]),
                MetricValue(ZONE_ABOVE_PCT, float(r["above_threshold_pct"]), r["zone"]),
            ]
    if "cdev_update" in trace.tables:
        for r in ta.df_cdev_stats().iter_rows(named=True):  # one row per cooling device
            out += [
                MetricValue(CDEV_MEAN_STATE, float(r["mean_state"]), r["cdev"]),
                MetricValue(CDEV_ACTIVE_PCT, float(r["active_pct"]), r["cdev"]),
            ]
    return out
