"""abtest: trace analysis and A/B power-regression toolkit for kernel scheduler and power work.

Open a trace of any supported format and get canonical polars tables::

    from abtest import Trace
    t = Trace("trace.dat")
    t.events                      # {"sched_switch": 6228, ...}
    t.df("cpu_idle")              # polars DataFrame: ts [ns], cpu, state (-1 = exit)
"""
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("abtest")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+src"

from abtest.trace.errors import TraceFormatError, MissingEventsError  # noqa: E402
from abtest.session import Trace  # noqa: E402

__all__ = ["Trace", "TraceFormatError", "MissingEventsError", "__version__"]
