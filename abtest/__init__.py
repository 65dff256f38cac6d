"""abtest: trace analysis and A/B power-regression toolkit for kernel scheduler and power work.

Open a trace of any supported format and get canonical polars tables::

    from abtest import Trace
    t = Trace("trace.dat")
    t.events                      # {"sched_switch": 6228, ...}
    t.df("cpu_idle")              # polars DataFrame: ts [ns], cpu, state (-1 = exit)

Everything is exported lazily: importing any part of abtest (abtest.metric_spec, abtest.trace,
...) runs nothing else, and the command line sets polars' allocator up before polars loads (abtest.cli).
"""

__all__ = ["Trace", "TraceFormatError", "MissingEventsError", "AnalysisNotApplicable", "explain", "__version__"]


def __getattr__(name: str):
    """The public names, imported on first use."""
    if name == "Trace":
        from abtest.session import Trace

        return Trace
    if name in ("TraceFormatError", "MissingEventsError", "AnalysisNotApplicable"):
        from abtest.trace import errors

        return getattr(errors, name)
    if name == "explain":
        from abtest.compare.explain import explain_store

        return explain_store
    if name == "__version__":
        from abtest import version

        return version.get()
    raise AttributeError(f"module 'abtest' has no attribute {name!r}")
