"""Long traces in bounded memory: the declared metrics of a trace computed window by window, then combined.

A trace of 100 M events has ~3.6 GB of tables; analysing it at once needs several times that. Here the trace's
span is cut into consecutive windows of `window_s` seconds; each window is analysed on a view that reads
only the rows of ``[start - history, end + history)`` of each table (a slice of the memory-mapped cache,
`Trace.window(..., history_ns=)`), and is dropped before the next one, so peak memory follows the window,
not the trace. Each declared metric says how its per-window values combine into the whole span's value
(`MetricSpec.window`, abtest.metric_spec.WindowCombine): time-weighted means, event-weighted (geometric)
means with the declared event-rate metric as the weight, sums, extremes; percentiles are approximated.

What is exact and what is not (measured against the whole-trace analysis in tests/test_windowed.py and
docs/analysis-speed.md):

- a window's value needs the state carried into it (the idle state, the frequency, the task's state, the
  PELT signals, a wakeup's pending switch-in): the view sees `history_s` before the window (and after it,
  for a wakeup whose switch-in comes after the window's end). State older than that is unknown to the window
  (a CPU whose frequency did not change for longer than the history), and PELT signals are simulated from
  zero at the history's start (they converge within ~0.35 s: a 32 ms half-life);
- the combination is exact for RATE, SUM, MAX, MIN, weighted EVENTS / EVENTS_GEO, and TIME values that report
  their known time (MetricValue.known_s: windows weigh by it); other TIME values (weighed by window length),
  TIME_APPROX and QUANTILE are approximations, flagged in the output (``exact`` is False);
- per-task values cover every task name in every window (no top-N); an event-weighted per-task value needs
  min_task_wakeups events over the whole span (df_combine).

Pure functions: `window_edges` (span -> windows), `df_window_metrics` (trace -> per-window values),
`df_combine` (per-window values -> one value per key).
"""

from __future__ import annotations

import math
import multiprocessing
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

import polars as pl

from abtest.analysis import registry
from abtest.metric_spec import Grouping, WindowCombine
from abtest.trace.errors import AnalysisNotApplicable, MissingEventsError

DEFAULT_HISTORY_S = 2.0

_PER_WINDOW_SCHEMA = {
    "window": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "analysis": pl.Utf8,
    "key": pl.Utf8,
    "key_template": pl.Utf8,
    "group": pl.Utf8,
    "value": pl.Float64,
    "known_s": pl.Float64,
}


def window_edges(start_ns: int, end_ns: int, window_ns: int) -> list[tuple[int, int]]:
    """Consecutive [start, end) windows of `window_ns` covering [start_ns, end_ns) (the last one shorter)."""
    if window_ns <= 0:
        raise ValueError(f"window length must be > 0 ns, got {window_ns}")
    if end_ns <= start_ns:
        return []
    return [(t, min(t + window_ns, end_ns)) for t in range(int(start_ns), int(end_ns), int(window_ns))]


class WindowAnalysisError(RuntimeError):
    """An analysis failed on one window (not for want of events): names the window and the analysis."""


def _window_rows(trace, index: int, lo: int, hi: int, history_ns: int, analyses, options) -> list[dict]:
    view = trace.window(lo, hi, history_ns=history_ns)
    rows = []
    for a in analyses:
        try:
            vals = registry.compute(a, view, options)
        except (MissingEventsError, AnalysisNotApplicable):
            continue
        except Exception as e:  # noqa: BLE001 - named with its window, never dropped silently
            raise WindowAnalysisError(
                f"{trace.path}: analysis {a.name} failed on window {index} [{lo}, {hi}) ns: {type(e).__name__}: {e}"
            ) from e
        rows += [
            {
                "window": index,
                "start_ns": lo,
                "end_ns": hi,
                "analysis": a.name,
                "key": v.key,
                "key_template": v.spec.key,
                "group": v.group,
                "value": float(v.value),
                "known_s": v.known_s,
            }
            for v in vals
        ]
    return rows


def _worker(trace, windows: list[tuple[int, int, int]], history_ns: int, names: list[str], options) -> list[dict]:
    """One process' share of the windows (spawned; `trace` arrives pickled without tables: it maps the cache)."""
    chosen = [registry.BY_NAME[n] for n in names]
    rows = []
    for index, lo, hi in windows:
        rows += _window_rows(trace, index, lo, hi, history_ns, chosen, options)
    return rows


def df_window_metrics(
    trace,
    window_s: float,
    *,
    history_s: float = DEFAULT_HISTORY_S,
    analyses: Iterable[str] | None = None,
    options: registry.MetricOptions = registry.MetricOptions(),
    jobs: int = 1,
    on_window: Callable[[int, int], None] | None = None,
) -> pl.DataFrame:
    """The declared metrics of every `window_s`-second window of the trace (abtest.session.Trace; its
    window, if any, is the span cut into windows).

    history_s: seconds of each table read before (and after) a window for the state carried across its edges.
    analyses: registry names (default: every trace analysis and power). jobs > 1: windows shared among that
    many spawned processes (each maps the cache; needs a cached trace). on_window(done, total): progress.
    Returns window, start_ns, end_ns, analysis, key, key_template, group, value, known_s (one row per window
    and value; known_s: MetricValue.known_s).
    """
    if trace.start_ns is None or trace.end_ns is None:
        raise ValueError(f"{trace.path}: no events, no span to cut into windows")
    chosen = [registry.BY_NAME[n] for n in analyses] if analyses else list(registry.TRACE_ANALYSES) + [registry.POWER]
    edges = window_edges(trace.start_ns, trace.end_ns, int(round(window_s * 1e9)))
    history_ns = int(round(history_s * 1e9))
    # every task name in every window (a name's top-N rank and the minimum wakeup count are properties of
    # the whole span: df_combine applies the minimum to the combined count)
    options = replace(options, top_tasks=1 << 30, min_task_wakeups=1)
    trace.release()  # the tables a first open keeps: each window maps its own slices
    rows: list[dict] = []
    entry = getattr(trace, "_entry", None)
    if jobs > 1 and entry is not None and len(edges) > 1:
        work = [(i, lo, hi) for i, (lo, hi) in enumerate(edges)]
        # one task per window keeps the workers' memory at one window each and the progress fine-grained
        ctx = multiprocessing.get_context("spawn")
        names = [a.name for a in chosen]
        with ProcessPoolExecutor(max_workers=min(jobs, len(work)), mp_context=ctx) as pool:
            futures = [pool.submit(_worker, trace, [w], history_ns, names, options) for w in work]
            for done, fut in enumerate(futures, 1):
                rows += fut.result()
                if on_window:
                    on_window(done, len(edges))
    else:
        for i, (lo, hi) in enumerate(edges):
            rows += _window_rows(trace, i, lo, hi, history_ns, chosen, options)
            if on_window:
                on_window(i + 1, len(edges))
    return pl.DataFrame(rows, schema=_PER_WINDOW_SCHEMA)


def df_combine(per_window: pl.DataFrame, *, min_task_wakeups: int = 10) -> pl.DataFrame:
    """Per-window values (df_window_metrics) -> one value per key, combined as its spec declares.

    RATE keys count 0 in the windows where their analysis gave values but not to them; an event-weighted
    per-task or per-cgroup key is kept when its events over the span number at least `min_task_wakeups`
    (the windows are analysed with no minimum and every task name). Returns analysis, key, key_template, group, value,
    unit, direction, aggregation, window (the
    WindowCombine), exact (the combination is exact: see the module docstring for the per-window part),
    windows (how many windows had a value)."""
    schema = {
        "analysis": pl.Utf8,
        "key": pl.Utf8,
        "key_template": pl.Utf8,
        "group": pl.Utf8,
        "value": pl.Float64,
        "unit": pl.Utf8,
        "direction": pl.Utf8,
        "aggregation": pl.Utf8,
        "window": pl.Utf8,
        "exact": pl.Boolean,
        "windows": pl.Int64,
    }
    if per_window.is_empty():
        return pl.DataFrame(schema=schema)
    pw = per_window.with_columns(
        ((pl.col("end_ns") - pl.col("start_ns")) / 1e9).alias("dur_s"), pl.col("group").fill_null("")
    )
    # per analysis, the time of the windows in which it gave any value (the denominator of RATE keys)
    ran_s = dict(pw.unique(["analysis", "window"]).group_by("analysis").agg(pl.col("dur_s").sum()).iter_rows())
    rates = pw.select("window", "group", pl.col("key_template").alias("weight_template"), pl.col("value").alias("rate"))
    out = []
    for (template,), part in pw.group_by(["key_template"], maintain_order=True):
        spec = registry.spec(template)
        how = spec.window
        if how is None:
            raise ValueError(f"metric {template!r} declares no window combination (MetricSpec.window)")
        if spec.window_weight and how in (WindowCombine.EVENTS, WindowCombine.EVENTS_GEO, WindowCombine.QUANTILE):
            part = part.join(
                rates.filter(pl.col("weight_template") == spec.window_weight), on=["window", "group"], how="left"
            )
            part = part.with_columns((pl.col("rate").fill_null(0.0) * pl.col("dur_s")).alias("w"))
        elif how is WindowCombine.TIME:  # each window's known time when reported, else its length
            part = part.with_columns(pl.coalesce("known_s", "dur_s").alias("w"))
        else:
            part = part.with_columns(pl.col("dur_s").alias("w"))
        part = part.filter(pl.col("value").is_finite())
        counted = bool(spec.window_weight) and spec.group in (Grouping.TASK, Grouping.CGROUP)
        for (key,), g in part.group_by(["key"], maintain_order=True):
            if counted and g["w"].sum() < min_task_wakeups:
                continue
            if how is WindowCombine.RATE:
                value = float((g["value"] * g["dur_s"]).sum()) / ran_s[g["analysis"][0]]
            else:
                value = _combine(how, g["value"].to_list(), g["w"].to_list())
            exact = spec.exact_combination or (how is WindowCombine.TIME and g["known_s"].null_count() == 0)
            out.append(
                {
                    "analysis": g["analysis"][0],
                    "key": key,
                    "key_template": template,
                    "group": g["group"][0] or None,
                    "value": value,
                    "unit": spec.unit,
                    "direction": spec.direction.value,
                    "aggregation": spec.aggregation.value,
                    "window": how.value,
                    "exact": exact,
                    "windows": g.height,
                }
            )
    return pl.DataFrame(out, schema=schema)


def _combine(how: WindowCombine, values: list[float], weights: list[float]) -> float:
    """One key's per-window values -> its value over the span (NaN when no window has weight)."""
    if how is WindowCombine.SUM:
        return float(sum(values))
    if how is WindowCombine.MAX:
        return float(max(values))
    if how is WindowCombine.MIN:
        return float(min(values))
    if how is WindowCombine.EVENTS_GEO:
        pairs = [(v, w) for v, w in zip(values, weights) if v > 0 and w > 0]
        total = sum(w for _, w in pairs)
        return math.exp(sum(w * math.log(v) for v, w in pairs) / total) if total > 0 else math.nan
    total = sum(w for w in weights if w > 0)
    if total <= 0:
        return math.nan
    return sum(v * w for v, w in zip(values, weights) if w > 0) / total


def windowed_metrics(
    trace, window_s: float, *, options: registry.MetricOptions = registry.MetricOptions(), **kwargs
) -> pl.DataFrame:
    """df_combine(df_window_metrics(...)): the trace's declared metrics in bounded memory."""
    return df_combine(
        df_window_metrics(trace, window_s, options=options, **kwargs), min_task_wakeups=options.min_task_wakeups
    )
