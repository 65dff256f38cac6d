"""abtest.analysis: canonical tables (abtest.trace.schema) -> metrics.

Convention (every module follows it; ``abtest analyze`` and the A/B compare rely on it):

* One module per concept: ``abtest.analysis.<name>`` (load_tracking, frequency, energy, idle, latency,
  placement, ...).
* Module-level ``EVENTS``: tuple of canonical table names the module's main analyses need;
  ``OPTIONAL_EVENTS``: tables used when present (e.g. cpu_idle to split active from idle time).
  Collectors enable these; a trace lacking them gets MissingEventsError naming them.
* Pure functions ``df_*(frames..., *, options) -> pl.DataFrame`` (tables) and ``plot_*(...) ->
  matplotlib Figure`` (figures). They take polars frames, not a Trace, so they are testable on hand-built
  frames. Every column name or docstring states its unit (``*_ns``, ``*_khz``, ``*_mw``, ``*_j``, ``pct``).
  Each df_* docstring lists the events it needs.
* A class ``<Name>Analysis(trace)`` exposing the same ``df_*``/``plot_*`` bound to a Trace: each method calls
  ``trace.require("<analysis>", *events)`` first (MissingEventsError names what is missing), then the pure
  function with ``trace.df(...)`` frames and the trace window (``trace.start_ns``/``trace.end_ns``).
  Declared as the ``facade`` of the module's registry entry (abtest.analysis.registry), which makes it a
  property of Trace: ``trace.load_tracking``, ``trace.frequency``, ``trace.energy``, ``trace.idle``, ...
* "Does not apply" is said by raising MissingEventsError (absent events) or AnalysisNotApplicable (platform
  data the trace lacks, an empty table; abtest.trace.errors): the callers that run every analysis skip those
  two with their message and report any other exception as a failure of the analysis.
* ``METRICS`` / ``metrics(trace, options)``: the declared metric values (abtest.metric_spec.MetricSpec: unit,
  direction, aggregation, grouping), and ``TABLES``: the declared non-scalar tables (TableSpec: columns with
  units), both gathered by abtest.analysis.registry; ``abtest analyze``, Trace.metrics, windows and compare read
  them through ``registry.evaluate`` / ``registry.compute``. Absent inputs give absent values (never made-up
  zeros).
* Every "value over time" question goes through :mod:`abtest.analysis.intervals`
  (state changes -> ``(key, ts, dur, value)`` clipped to the window, value at window start carried in).
  No analysis re-derives deltas on its own. No per-event Python loops: polars expressions, numpy, or the
  Rust core.

Times are Int64 ns on the trace clock; ``dur`` is ns.
"""
