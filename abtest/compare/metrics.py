"""Per-iteration metrics: metrics.json + power.csv + the iteration's trace, cached next to the iteration.

Metric names (see docs/compare.md):
  <name from metrics.json>        as written by the workload (fps, soc_power_mw, jank_pct, score, ...)
  power.rail.<RAIL>_mw            average power of one rail over the iteration, mW (from power.csv)
  power.channel.<CHANNEL>_mw      average power per channel: CPU, CPU-Big, CPU-Little, CPU-Mid, GPU, Total
                                  (and Display, Memory when such rails exist; abtest.analysis.energy mapping)
  <analysis>.<key>                numeric leaves of abtest.analysis.<analysis>.summary(trace), nested keys
                                  joined with "." (analyses: idle, latency, frequency, energy, load_tracking)

Derived metrics are cached in `<iteration>/.abtest-metrics.json`, keyed on the abtest version, this module's
METRICS_VERSION, the sizes and mtimes of the trace and power.csv, and which analysis modules are importable.
A read-only store is fine: the cache is then simply not written.
"""
from __future__ import annotations

import importlib
import json
import math
from pathlib import Path

from abtest.compare.store import METRICS_CACHE_FILE, Iteration, Metric

METRICS_VERSION = 1
TRACE_ANALYSES = ("idle", "latency", "frequency", "energy", "load_tracking")
CHANNELS = ("CPU", "CPU-Big", "CPU-Little", "CPU-Mid", "GPU", "Total")  # seed table order (others follow)

# Direction of "better" for trace summary keys, by substring of the key (first match wins).
_HIGHER_IS_BETTER = ("fps", "score", "throughput", "bogo", "ops_per")
_LOWER_IS_BETTER = ("latency", "miss", "too_deep", "too_shallow", "power", "energy", "_mw", "_uj", "_j",
                    "jank", "lost", "duration")
_PER_TASK = "tasks."
_UNIT_SUFFIXES = (("_per_s", "1/s"), ("_pct", "%"), ("_us", "us"), ("_ns", "ns"), ("_ms", "ms"), ("_mw", "mW"),
                  ("_uj", "uJ"),
                  ("_j", "J"), ("_khz", "kHz"), ("_mhz", "MHz"), ("_s", "s"), ("_count", "count"))


def direction_for(key: str, analysis: str = "") -> bool | None:
    """lower_is_better for a trace-derived key, from its last component (too_deep_pct, gmean_us, ...):
    True/False by name; for the latency analysis every time value is lower-is-better; None when no
    direction is implied (residencies, wakeup counts, average frequency...)."""
    last = key.lower().rsplit(".", 1)[-1]
    if any(s in last for s in _HIGHER_IS_BETTER):
        return False
    if any(s in last for s in _LOWER_IS_BETTER):
        return True
    if analysis == "latency" and unit_for(last) in ("us", "ns", "ms", "s"):
        return True
    return None


def unit_for(key: str) -> str:
    k = key.lower()
    for suffix, unit in _UNIT_SUFFIXES:
        if k.endswith(suffix) or f"{suffix}." in k:
            return unit
    return ""


def flatten_numeric(d: dict, prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a nested dict as {"a.b.c": value}. Bools, strings and lists are skipped."""
    out: dict[str, float] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict):
            out.update(flatten_numeric(v, key))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[key] = float(v)
    return out


# ---------------------------------------------------------------- power.csv
def power_metrics(path: Path) -> dict[str, Metric]:
    """power.rail.<RAIL>_mw and power.channel.<CHANNEL>_mw for one iteration's power.csv, through
    abtest.analysis.energy (read_power_csv, df_power_per_rail, df_power_per_channel: counter wrap/reset
    rules and the rail -> channel mapping are documented there). Raises TraceFormatError on a bad file."""
    from abtest.analysis.energy import df_power_per_channel, df_power_per_rail, read_power_csv

    per_rail = df_power_per_rail(read_power_csv(path))
    src = "power.csv"
    out: dict[str, Metric] = {}
    for rail, mw in per_rail.select("rail", "avg_power_mw").iter_rows():
        if mw is not None:
            out[f"power.rail.{rail}_mw"] = Metric(float(mw), "mW", True, src)
    channels = df_power_per_channel(per_rail)
    for ch, mw in channels.select("channel", "avg_power_mw").iter_rows():
        if mw is not None:
            out[f"power.channel.{ch}_mw"] = Metric(float(mw), "mW", True, src)
    return out


# ---------------------------------------------------------------- trace
def available_analyses() -> list[str]:
    """Analysis modules (of TRACE_ANALYSES) that are importable and have summary()."""
    names = []
    for name in TRACE_ANALYSES:
        try:
            mod = importlib.import_module(f"abtest.analysis.{name}")
        except ImportError:
            continue
        if callable(getattr(mod, "summary", None)):
            names.append(name)
    return names


def trace_metrics(path: Path, analyses: list[str]) -> tuple[dict[str, Metric], list[str]]:
    """Metrics from the summaries of `analyses` on the trace at `path`, and notes (skipped analyses,
    lost events). A trace that cannot be read raises TraceFormatError."""
    from abtest import Trace
    from abtest.trace.errors import MissingEventsError

    trace = Trace(path, use_cache=False)  # the metrics themselves are cached; skip the per-table parquet cache
    notes: list[str] = []
    lost = trace.meta.get("lost_events") or 0
    if lost:
        notes.append(f"{path}: {lost} events lost in the ring buffer; trace metrics are computed from "
                     "incomplete data")
    out: dict[str, Metric] = {}
    for name in analyses:
        mod = importlib.import_module(f"abtest.analysis.{name}")
        try:
            summary = mod.summary(trace)
        except MissingEventsError as e:
            notes.append(f"{name}: skipped ({e})")
            continue
        for key, value in flatten_numeric(summary or {}).items():
            if not math.isfinite(value) or key.startswith(_PER_TASK) or f".{_PER_TASK}" in key:
                continue  # per-task entries are keyed by pid: not comparable across runs
            out[f"{name}.{key}"] = Metric(value, unit_for(key), direction_for(key, name), f"trace:{name}")
    return out, notes


# ---------------------------------------------------------------- cache + entry point
def _file_key(p: Path | None) -> list | None:
    if p is None:
        return None
    st = p.stat()
    return [p.name, st.st_size, st.st_mtime_ns]


def cache_key(it: Iteration, analyses: list[str]) -> dict:
    from abtest import __version__
    return {"abtest": __version__, "metrics_version": METRICS_VERSION, "trace": _file_key(it.trace_path),
            "power": _file_key(it.power_path), "analyses": analyses}


def derived_metrics(it: Iteration, *, use_cache: bool = True, with_trace: bool = True
                    ) -> tuple[dict[str, Metric], list[str]]:
    """Power and trace metrics of one iteration plus notes; from the cache file when it is current."""
    analyses = available_analyses() if (with_trace and it.trace_path is not None) else []
    key = cache_key(it, analyses)
    cache = it.path / METRICS_CACHE_FILE
    if use_cache and cache.is_file():
        try:
            doc = json.loads(cache.read_text())
            if doc.get("key") == key:
                return ({k: Metric.from_json(v, source=v.get("source", "")) for k, v in doc["metrics"].items()},
                        list(doc.get("notes", [])))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            pass  # stale or damaged cache: recompute
    metrics: dict[str, Metric] = {}
    notes: list[str] = []
    failed = False
    if it.power_path is not None:
        from abtest.trace.errors import TraceFormatError
        try:
            metrics.update(power_metrics(it.power_path))
        except TraceFormatError as e:
            notes.append(f"power metrics unavailable: {e}")
            failed = True
    if analyses:
        from abtest.trace.errors import TraceFormatError
        try:
            tm, tnotes = trace_metrics(it.trace_path, analyses)
        except (TraceFormatError, OSError) as e:
            tm, tnotes, failed = {}, [f"trace metrics unavailable: {e}"], True
        metrics.update(tm)
        notes.extend(tnotes)
    if use_cache and not failed:
        try:
            cache.write_text(json.dumps({"key": key, "metrics": {k: m.to_json() for k, m in metrics.items()},
                                         "notes": notes}, indent=1))
        except OSError:
            pass  # read-only store
    return metrics, notes


def iteration_metrics(it: Iteration, *, use_cache: bool = True, with_trace: bool = True
                      ) -> tuple[dict[str, Metric], list[str]]:
    """All metrics of one iteration: metrics.json entries plus derived ones (metrics.json wins on a clash),
    and notes about what could not be derived."""
    derived, notes = derived_metrics(it, use_cache=use_cache, with_trace=with_trace)
    merged = dict(derived)
    merged.update(it.metrics)
    return merged, notes
