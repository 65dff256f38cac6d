"""abtest: trace analysis and A/B power-regression toolkit for kernel scheduler and power work.

Open a trace of any supported format and get canonical polars tables::

    from abtest import Trace
    t = Trace("trace.dat")
    t.events                      # {"sched_switch": 6228, ...}
    t.df("cpu_idle")              # polars DataFrame: ts [ns], cpu, state (-1 = exit)
"""
from abtest.version import __version__
from abtest.trace.errors import TraceFormatError, MissingEventsError

__all__ = ["Trace", "TraceFormatError", "MissingEventsError", "__version__"]


def __getattr__(name: str):
    # Trace (and with it polars) is imported on first use: the command line sets polars' allocator up
    # before polars loads (abtest.cli)
    if name == "Trace":
        from abtest.session import Trace
        return Trace
    raise AttributeError(f"module 'abtest' has no attribute {name!r}")


def explain(a, b, *, store=None, workload: str | None = None, channels: tuple[str, ...] = (), platform=None,
            **compare_kw):
    """Where a power change came from, A -> B: a list of abtest.compare.explain.Explanation (one per workload),
    each with `.narrative`, `.df_contributions()`, `.df_tasks()` (polars) and `.to_json()`.

    a, b: label names in `store` (default ./results or $ABTEST_STORE) or paths to label directories.
    channels: power channels to decompose (default: those that changed significantly). platform: a platform
    file (or dict) with an energy model for traces without platform.yml beside them.
    """
    from pathlib import Path

    from abtest.compare.explain import explain as _explain
    from abtest.store.layout import default_store_root
    from abtest.store.reader import load_label
    root = Path(store) if store is not None else default_store_root()
    la = load_label(root / a if (root / a).is_dir() else Path(a))
    lb = load_label(root / b if (root / b).is_dir() else Path(b))
    return _explain(la, lb, workload=workload, channels=tuple(channels), platform=platform, **compare_kw)


__all__.append("explain")
