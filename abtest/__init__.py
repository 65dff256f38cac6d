"""abtest: trace analysis and A/B power-regression toolkit for kernel scheduler and power work.

Open a trace of any supported format and get canonical polars tables::

    from abtest import Trace
    t = Trace("trace.dat")
    t.events                      # {"sched_switch": 6228, ...}
    t.df("cpu_idle")              # polars DataFrame: ts [ns], cpu, state (-1 = exit)
"""
from abtest.version import __version__
from abtest.trace.errors import TraceFormatError, MissingEventsError
from abtest.session import Trace

__all__ = ["Trace", "TraceFormatError", "MissingEventsError", "__version__"]
