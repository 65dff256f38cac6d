"""Where measured power comes from: one resolver for the samples and one for the rail -> channel mapping.

Every command that reports measured power (`compare`, `gate`, `explain`, `history`, `bisect`, `analyze`,
`Trace.metrics`, windows, `timeline`) gets its samples and its mapping here, so two commands cannot disagree
on which file or which mapping they used.

Samples (power_rail-shaped: ts ns, rail, subsystem, energy_uj cumulative), first present — one source per
iteration, and a note names a source that was present but not used:
  1. the store's ``power.csv`` of the iteration (written by the collector from the target's counters);
  2. the power rails inside the trace (perfetto PowerRails, a Catapult zip's BattOr log);
  3. a BattOr log beside the trace (``battor.txt``).

Mapping ({channel: [rail names]}), first given — its origin is named in the values' `source` and in the output:
  1. the store's ``abtest.toml`` ``[power.channels]`` (compare's options);
  2. the target file's ``[platform.rails]``, as the collector recorded it in the iteration's meta.json;
  3. a platform file's ``rail_channels`` (a platform file beside the trace, or `--platform`);
  4. built in: a device mapping when the rail names identify the device, else generic rail-name patterns
     (abtest.analysis.power.rail_mapping).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import polars as pl

from abtest.analysis.power import PowerMetrics, df_channel_power, df_power_per_rail, power_metrics, rail_mapping
from abtest.metric_spec import MetricValue

STORE_MAPPING = "store abtest.toml [power.channels]"
TARGET_MAPPING = "target file [platform.rails] (meta.json)"
PLATFORM_MAPPING = "platform file rail_channels"

TRACE_RAILS = "trace:power_rail"
POWER_CSV = "power.csv"


@dataclass(frozen=True)
class PowerSamples:
    """One source's samples: power_rail-shaped frame, the source's name (POWER_CSV, TRACE_RAILS or
    "<file> (BattOr, clock <method>)"), the window they are averaged over (ns; None: the samples' own span) and
    notes about the source (lines the reader could not import)."""

    samples: pl.DataFrame
    source: str
    start_ns: int | None = None
    end_ns: int | None = None
    notes: tuple[str, ...] = ()


def _valid_mapping(value) -> dict | None:
    if isinstance(value, dict) and value and all(isinstance(v, list | tuple) for v in value.values()):
        return {str(k): tuple(v) for k, v in value.items()}
    return None


def mapping_of(options, iteration=None, trace=None) -> tuple[dict | None, str | None]:
    """({channel: (rails)}, where it came from) by the order of the module docstring; (None, None) when none is
    given (power.rail_mapping then applies a built-in one and names it). options: a registry.MetricOptions whose
    `rail_channels` is the store's mapping, and `rail_channels_source` its origin when the caller knows it."""
    explicit = getattr(options, "rail_channels", None)
    if explicit:
        return dict(explicit), getattr(options, "rail_channels_source", None) or STORE_MAPPING
    meta = getattr(iteration, "meta", None) or {}
    platform = meta.get("platform") if isinstance(meta, dict) else None
    found = _valid_mapping(platform.get("rails")) if isinstance(platform, dict) else None
    if found:
        return found, TARGET_MAPPING
    found = _valid_mapping((getattr(trace, "platform", None) or {}).get("rail_channels")) if trace is not None else None
    if found:
        return found, PLATFORM_MAPPING
    return None, None


def with_mapping(options, iteration=None, trace=None):
    """`options` (registry.MetricOptions) with the mapping that applies set in `rail_channels` and its origin in
    `rail_channels_source` (both None: built in). What the per-iteration cache key and the analyses read."""
    mapping, origin = mapping_of(options, iteration, trace)
    return dataclasses.replace(options, rail_channels=mapping, rail_channels_source=origin)


def from_trace(trace) -> PowerSamples | None:
    """The trace's own power rails over the trace's window, or None when it has none."""
    if "power_rail" not in trace.tables:
        return None
    samples = trace.df("power_rail", windowed=False)
    if samples.height == 0:
        return None
    return PowerSamples(samples, TRACE_RAILS, trace.start_ns, trace.end_ns)


def for_iteration(iteration, trace=None) -> tuple[PowerSamples | None, list[str], bool]:
    """The iteration's one power source (module docstring), notes naming a source present but not used and a
    source that could not be read, and whether reading one failed (then nothing is cached for the iteration).
    trace: the iteration's opened Trace, or None when its trace is not read (`compare --no-trace`)."""
    from abtest.store.power import read_battor_samples, read_power_csv
    from abtest.trace.errors import TraceFormatError

    notes: list[str] = []
    chosen: PowerSamples | None = None
    failed = False
    if iteration.power_path is not None:
        try:
            chosen = PowerSamples(read_power_csv(iteration.power_path), POWER_CSV)
        except TraceFormatError as e:
            notes.append(f"power metrics unavailable: {e}")
            failed = True
    rails = from_trace(trace) if trace is not None else None
    if rails is not None:
        if chosen is not None:
            notes.append(
                "power from power.csv; the trace's own power rails were not used (one power source per iteration)"
            )
        else:  # also when power.csv could not be read (that is noted above)
            chosen = rails
    battor = iteration.battor_path
    if battor is not None:
        if chosen is not None:
            notes.append(
                f"power from {'power.csv' if chosen.source == POWER_CSV else 'the trace'}; {battor.name} was not "
                "used (one power source per iteration)"
            )
        else:
            try:
                samples, bmeta = read_battor_samples(battor)
            except (TraceFormatError, OSError) as e:
                notes.append(f"power metrics unavailable: {e}")
                return None, notes, True
            clock = (bmeta.get("clock") or {}).get("method", "unaligned")
            n_bad = sum(e["count"] for e in (bmeta.get("import_errors") or {}).values())
            bad = (f"{battor.name}: {n_bad} line(s) not imported (see abtest trace info)",) if n_bad else ()
            chosen = PowerSamples(samples, f"{battor.name} (BattOr, clock {clock})", notes=bad)
    return chosen, notes, failed


def evaluate(source: PowerSamples, options) -> PowerMetrics:
    """power.<Channel> and power.rail.<RAIL> (mW) of one source with the mapping of `options` (with_mapping);
    the mapping's `source` names where it came from."""
    mapping, origin = mapping_of(options)
    return power_metrics(
        source.samples, explicit=mapping, origin=origin, start_ns=source.start_ns, end_ns=source.end_ns
    )


def metrics(trace, options=None) -> list[MetricValue]:
    """registry.POWER's metric function: the trace's own rails (from_trace) with the mapping that applies
    (mapping_of: the caller's, else the platform file's, else built in)."""
    source = from_trace(trace)
    if source is None:
        return []
    mapping, origin = mapping_of(options, trace=trace)
    return power_metrics(
        source.samples, explicit=mapping, origin=origin, start_ns=source.start_ns, end_ns=source.end_ns
    ).values


def df_trace_rails(trace) -> pl.DataFrame | None:
    """Measured power per rail of a trace that carries power rails: rail, energy_j (J), avg_power_mw (mW),
    coverage_pct (% of the window between the rail's samples); None without rails. The rows of the analysis'
    declared table ``rails`` (abtest.analysis.registry)."""
    if not trace.has_events("power_rail"):
        return None
    per_rail = df_power_per_rail(trace.df("power_rail", windowed=False), start_ns=trace.start_ns, end_ns=trace.end_ns)
    return per_rail.select("rail", "avg_power_mw", "energy_j", "coverage_pct").sort("avg_power_mw", descending=True)


def df_trace_channels(trace, per_rail: pl.DataFrame | None = None) -> pl.DataFrame | None:
    """The rails of each power channel of a trace that carries power rails and where that mapping came from
    (mapping_of: the trace platform's rail_channels, else built in): channel, rails (comma-separated), mapping;
    None without rails. per_rail: df_trace_rails(trace) when the caller has it. The rows of the declared table
    ``channels``."""
    per_rail = df_trace_rails(trace) if per_rail is None else per_rail
    if per_rail is None:
        return None
    explicit, origin = mapping_of(None, trace=trace)
    mapping = rail_mapping(per_rail["rail"].to_list(), explicit, origin)
    return df_channel_power(per_rail, mapping).select(
        "channel", pl.col("rails").list.join(", "), pl.lit(mapping.source).alias("mapping")
    )
