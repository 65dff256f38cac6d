"""`Trace`: the user-facing handle on one trace file (the session: reads through abtest.trace, reaches the
analyses of abtest.analysis).

    t = Trace("trace.dat")                 # decodes once, then served from the parquet cache
    t.meta["cpus"], t.events               # metadata, per-event counts
    t.df("sched_switch")                   # canonical table (polars DataFrame), ts in ns
    w = t.window(start_ns, end_ns)         # same trace, tables clipped to [start_ns, end_ns)
    t.idle.df_residency()                  # analyses (abtest.analysis.*) hang off the trace: idle, latency,
                                           # frequency, load_tracking, placement, energy, power, tasks,
                                           # overutilized, thermal, capacity, cgroups
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import polars as pl

from abtest.analysis import registry
from abtest.trace import cache
from abtest.trace.errors import AnalysisNotApplicable, MissingEventsError
from abtest.trace.model import TraceData
from abtest.trace.readers import read_trace
from abtest.trace.schema import EVENT_ALIASES, MARKER_EVENTS


def _reach_span(window: tuple[int | None, int | None] | None, history_ns: int) -> tuple[int | None, int | None]:
    """[start - history_ns, end + history_ns) of `window` (None: open end)."""
    if not window:
        return None, None
    return (
        None if window[0] is None else int(window[0]) - history_ns,
        None if window[1] is None else int(window[1]) + history_ns,
    )


def _reach(df: pl.DataFrame, window: tuple[int | None, int | None] | None, history_ns: int) -> pl.DataFrame:
    """The rows of `df` with ts in _reach_span(window, history_ns): a zero-copy slice when ts is sorted (the
    decoders' tables are), a filter otherwise."""
    if "ts" not in df.columns or not window:
        return df
    lo, hi = _reach_span(window, history_ns)
    ts = df["ts"]
    if ts.is_sorted():
        i = 0 if lo is None else int(ts.search_sorted(lo, side="left"))
        j = df.height if hi is None else int(ts.search_sorted(hi, side="left"))
        return df.slice(i, max(j - i, 0))
    keep = pl.lit(True)
    if lo is not None:
        keep = keep & (pl.col("ts") >= lo)
    if hi is not None:
        keep = keep & (pl.col("ts") < hi)
    return df.filter(keep)


class Trace:
    """A decoded trace with lazy table access.

    Args:
        path: trace file (trace.dat, ftrace text, systrace HTML, atrace, perfetto; gzip/zip wrapped ok).
        use_cache: read/write the content-keyed parquet cache (see abtest.trace.cache).
        platform: platform description (dict, or a path to a platform file: YAML/TOML/LISA plat_info.yml)
            used by analyses when the trace itself carries none.
        window: optional (start_ns, end_ns) time window applied to every table.

    Analyses hang off it as properties, one per abtest.analysis.registry entry that declares a facade:
    t.idle, t.latency, t.frequency, t.load_tracking, t.placement, t.power, t.energy, t.tasks, t.overutilized,
    t.thermal, t.capacity, t.cgroups (help(Trace.idle) says what each is).
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        use_cache: bool = True,
        platform: dict | str | os.PathLike | None = None,
        window: tuple[int | None, int | None] | None = None,
        _entry: Path | None = None,
        _data: TraceData | None = None,
        _history_ns: int | None = None,
    ):
        self.path = Path(path)
        self._platform_arg = platform
        self._window = window
        self._history_ns = _history_ns
        self._entry = _entry
        self._data = _data
        self._frames: dict[str, pl.DataFrame] = {}
        self._loading = threading.Lock()
        if self._entry is None and self._data is None:
            self._load(use_cache)
        self._meta = cache.read_meta(self._entry) if self._entry is not None else self._data.meta

    # -- loading -------------------------------------------------------------------------------
    def _load(self, use_cache: bool) -> None:
        if not use_cache:
            self._data = read_trace(self.path)
            return
        key = cache.content_key(self.path)
        entry = cache.cache_root() / key
        if not cache.is_complete(entry) and not self._write_in_rounds(entry):
            data = read_trace(self.path)
            try:
                cache.write_tables(data, entry, fmt="ipc")
            except OSError:  # read-only cache dir: keep going uncached
                self._data = data
                return
            # the tables are read back from the entry just written (mapped: a column's pages are read when it
            # is used) rather than kept as decoded: the decode's memory goes back before any analysis runs
            # (a first `abtest analyze` of the bench trace peaks 20-30 MB lower, as fast: docs/analysis-speed.md)
            del data
        self._entry = entry

    def _write_in_rounds(self, entry: Path) -> bool:
        """A long trace.dat: decoded in rounds into the cache entry, in bounded memory (abtest.trace.streamed).
        False when it does not apply (or the file cannot be cut into rounds in time order)."""
        from abtest.trace import streamed

        try:
            return streamed.write_if_long(self.path, entry) is not None
        except OSError:  # read-only cache dir: decoded whole, kept uncached
            return False

    # -- metadata ------------------------------------------------------------------------------
    @property
    def meta(self) -> dict:
        """Metadata dict (format, clock, cpus, start_ns, end_ns, lost_events, kernel, platform, events...)."""
        return self._meta

    @property
    def events(self) -> dict[str, int]:
        """Per-event counts over the whole file (kernel event names, variants normalised). `df(name)` takes these
        names as well as the canonical table names of `tables` (print, bprint, bputs and tracing_mark_write are
        rows of the `marker` table)."""
        return dict(self._meta.get("events", {}))

    @property
    def tables(self) -> list[str]:
        if self._entry is not None:
            return cache.table_names(self._entry)
        return sorted(self._data.tables)

    @property
    def cpus(self) -> int:
        return int(self._meta.get("cpus") or 0)

    @property
    def start_ns(self) -> int | None:
        """Start of the analysed span in ns (window start if a window is set)."""
        if self._window and self._window[0] is not None:
            return int(self._window[0])
        return self._meta.get("start_ns")

    @property
    def reach_start_ns(self) -> int | None:
        """Where the state carried into the span is rebuilt from: start_ns, or for a view with a history
        (window(..., history_ns=)) the history's start (not before the trace's first event)."""
        start = self.start_ns
        if self._history_ns is None or start is None:
            return start
        first = self._meta.get("start_ns")
        return max(start - self._history_ns, first) if first is not None else start - self._history_ns

    @property
    def end_ns(self) -> int | None:
        """End of the analysed span in ns (window end if a window is set)."""
        if self._window and self._window[1] is not None:
            return int(self._window[1])
        return self._meta.get("end_ns")

    @property
    def platform(self) -> dict | None:
        """Platform description: the one given to the constructor, else the trace's own, else None."""
        if self._platform_arg is None:
            return self._meta.get("platform")
        if isinstance(self._platform_arg, dict):
            return self._platform_arg
        from abtest.analysis.platform import load_platform

        self._platform_arg = load_platform(self._platform_arg)
        return self._platform_arg

    # -- tables --------------------------------------------------------------------------------
    def has_events(self, *names: str) -> bool:
        return all(n in self.tables for n in names)

    def require(self, analysis: str, *names: str) -> None:
        """Raise MissingEventsError naming the absent events (and how to record them)."""
        missing = [n for n in names if n not in self.tables]
        if missing:
            raise MissingEventsError(analysis, missing, str(self.path))

    def df(self, name: str, *, windowed: bool = True) -> pl.DataFrame:
        """Canonical table `name` (see abtest.trace.schema), clipped to the window unless windowed=False.

        A kernel event name that the canonical tables hold under another name works too: `print`, `bprint`,
        `bputs`, `tracing_mark_write` give the rows of that event in the `marker` table (its `event` column
        says which), and a renamed event (`sched_load_cfs_rq`, ...) gives its canonical table (`sched_pelt_cfs`).
        Raises MissingEventsError if the trace has no such table.
        """
        name, marker_event = self._resolve(name)
        with self._loading:  # analyses may run in threads (abtest analyze): each table is read once
            self._load_table(name)
        df = self._frames[name]
        if marker_event is not None:
            df = df.filter(pl.col("event") == marker_event)
        if windowed and self._window and "ts" in df.columns:
            lo, hi = self._window
            if lo is not None:
                df = df.filter(pl.col("ts") >= lo)
            if hi is not None:
                df = df.filter(pl.col("ts") < hi)
        return df

    def _resolve(self, name: str) -> tuple[str, str | None]:
        """(table, marker event or None) of a name given to df(): the table itself, or where the canonical
        tables put that kernel event (see df)."""
        if name in self.tables:
            return name, None
        if name in MARKER_EVENTS and "marker" in self.tables:
            return "marker", name
        canon = EVENT_ALIASES.get(name)
        if canon is not None and canon in self.tables:
            return canon, None
        return name, None

    def _load_table(self, name: str) -> None:
        if name not in self._frames:
            if name not in self.tables:
                raise MissingEventsError(f"table {name!r}", [name], str(self.path))
            if self._entry is not None and self._history_ns is not None:
                lo, hi = _reach_span(self._window, self._history_ns)
                df = cache.read_table_range(self._entry, name, lo, hi)
            elif self._entry is not None:
                df = cache.read_table(self._entry, name)
            else:
                df = self._data.tables[name]
                if self._history_ns is not None:
                    df = _reach(df, self._window, self._history_ns)
            self._frames[name] = df

    def window(self, start_ns: int | None, end_ns: int | None, *, history_ns: int | None = None) -> Trace:
        """A view of the same trace restricted to [start_ns, end_ns) (ns on the trace clock).

        history_ns: None (default): the analyses see the whole trace around the window (the state carried
        into it comes from any earlier event). A number: the view reads only the rows of
        [start_ns - history_ns, end_ns + history_ns) of each table, in its own frames (a slice of the
        memory-mapped cache), so its memory is bounded by the window whatever the trace's length; state older
        than history_ns before the window is unknown to it (abtest.analysis.windowed).
        """
        view = Trace(
            self.path,
            platform=self._platform_arg,
            window=(start_ns, end_ns),
            _entry=self._entry,
            _data=self._data,
            _history_ns=history_ns,
        )
        if history_ns is None:
            view._frames, view._loading = self._frames, self._loading
        return view

    def __getstate__(self) -> dict:
        """Pickled (to a worker process) without its tables and lock: the worker reads the cache itself."""
        state = dict(self.__dict__)
        state["_frames"] = {} if self._entry is not None else state["_frames"]
        del state["_loading"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._loading = threading.Lock()

    def release(self) -> None:
        """Drop the tables this handle holds in memory (the decoded tables a first open keeps, the mapped
        cache files); they are read again from the cache when asked for."""
        if self._entry is not None:
            self._frames.clear()

    def to_dir(self, out_dir: str | os.PathLike) -> Path:
        """Write every table as parquet + meta.json into out_dir (layout of abtest.trace.cache)."""
        data = TraceData(tables={n: self.df(n, windowed=False) for n in self.tables}, meta=dict(self.meta))
        return cache.write_tables(data, out_dir)

    # -- analyses: t.idle, t.latency, ... are made from the registry below (_analysis_properties) --------
    def metrics(self, analyses: list[str] | None = None, *, tasks: tuple[str, ...] = (), options=None) -> pl.DataFrame:
        """Every declared metric this trace yields (abtest.analysis.registry), one row per value:
        analysis, key (full), key_template, group, value, unit, direction, aggregation. Analyses whose
        required events are absent are left out (`abtest analyze` says why). options: a
        registry.MetricOptions (default: MetricOptions(tasks=tasks)). For a long trace in bounded memory:
        abtest.analysis.windowed.windowed_metrics(trace, window_s)."""
        options = options or registry.MetricOptions(tasks=tuple(tasks))
        rows = []
        chosen = (
            [registry.BY_NAME[n] for n in analyses] if analyses else list(registry.TRACE_ANALYSES) + [registry.POWER]
        )
        for a in chosen:
            try:
                vals = registry.compute(a, self, options)
            except (MissingEventsError, AnalysisNotApplicable):  # anything else is a failure: raised
                continue
            rows += [
                {
                    "analysis": a.name,
                    "key": v.key,
                    "key_template": v.spec.key,
                    "group": v.group,
                    "value": float(v.value),
                    "unit": v.spec.unit,
                    "direction": v.spec.direction.value,
                    "aggregation": v.spec.aggregation.value,
                }
                for v in vals
            ]
        schema = {
            "analysis": pl.Utf8,
            "key": pl.Utf8,
            "key_template": pl.Utf8,
            "group": pl.Utf8,
            "value": pl.Float64,
            "unit": pl.Utf8,
            "direction": pl.Utf8,
            "aggregation": pl.Utf8,
        }
        return pl.DataFrame(rows, schema=schema)

    def __repr__(self) -> str:
        n = sum(self.events.values())
        return f"Trace({str(self.path)!r}, format={self.meta.get('format')!r}, cpus={self.cpus}, events={n})"

    def sql(self, query: str, *, engine: str | None = None) -> pl.DataFrame:
        """Run PerfettoSQL on this trace file with Perfetto's trace_processor (an independent engine, not
        abtest's readers); see abtest.trace.perfetto_engine for engine discovery. Ignores the window."""
        from abtest.trace.perfetto_engine import query as tp_query

        return tp_query(self.path, query, engine=engine)


def _facade_property(a: registry.Analysis) -> property:
    """Trace.<a.trace_attribute>: a new a.facade bound to the trace, documented from the registry entry."""
    facade = a.facade

    def get(self: Trace):
        return facade(self)

    get.__name__ = a.trace_attribute
    get.__qualname__ = f"Trace.{a.trace_attribute}"
    get.__annotations__ = {"return": facade}
    get.__doc__ = f"{a.title} ({a.doc}): {facade.__module__}.{facade.__qualname__} bound to this trace.\n\n" + (
        facade.__doc__ or ""
    )
    return property(get, doc=get.__doc__)


def _analysis_properties() -> None:
    """One property per registry analysis that declares a facade (t.idle, t.energy, ...)."""
    for a in registry.ANALYSES:
        if a.facade is None:
            continue
        if hasattr(Trace, a.trace_attribute):
            raise RuntimeError(f"analysis {a.name}: Trace already has an attribute {a.trace_attribute!r}")
        setattr(Trace, a.trace_attribute, _facade_property(a))


_analysis_properties()
