"""Overutilized: how long EAS was switched off because the system (a root domain) was overutilized.

When a CPU's utilisation exceeds its capacity margin, the scheduler flags the root domain overutilized and
falls back from energy-aware placement to load balancing. Android kernels trace it as
``sched_overutilized: overutilized=<0|1>`` (newer ones add ``span=<CPUs of the root domain>``); LISA's
kernel module as ``lisa__sched_overutilized: overutilized=<0|1> span=<cpumask>`` (mainline has only the
bare tracepoint ``sched_overutilized_tp``, see docs/analysis-kernel-views.md for how to record it).

Definitions (workload-processor and LISA report the same quantity, ``time`` and ``percentage`` of the trace):

* the state of each root domain (``span``; one stream "all" when the event has no span) changes at its
  events; consecutive events with the same value (several CPUs racing to report it) change nothing;
* before a root domain's first event its state is **unknown**: reported as ``unknown_pct``, never counted
  as overutilized or not (LISA counts from the first event too);
* ``pct`` = overutilized time / window length x 100; the system is overutilized while any root domain is.

Tables: ``df_overutilized_intervals`` (root_domain, ts, dur, overutilized: 1/0/null unknown),
``df_overutilized`` (root_domain, overutilized_ns, known_ns, unknown_ns, pct, unknown_pct, transitions).
"""

from __future__ import annotations

import polars as pl

from abtest.analysis.intervals import df_intervals, window_of
from abtest.metric_spec import Aggregation, Direction, Grouping, MetricSpec, MetricValue, TableSpec, WindowCombine
from abtest.trace.errors import MissingEventsError

EVENT_TABLES = ("sched_overutilized", "lisa__sched_overutilized")
EVENTS: tuple[str, ...] = ()  # one of EVENT_TABLES (MissingEventsError from metrics() when neither)
OPTIONAL_EVENTS = EVENT_TABLES

SYSTEM = "all"

__all__ = [
    "EVENTS",
    "OPTIONAL_EVENTS",
    "df_overutilized_events",
    "df_overutilized_intervals",
    "df_overutilized",
    "OverutilizedAnalysis",
    "metrics",
]


def df_overutilized_events(events: pl.DataFrame) -> pl.DataFrame:
    """``ts, root_domain (Utf8: the span, or "all"), overutilized (Int8)`` from a sched_overutilized /
    lisa__sched_overutilized table, consecutive repeats of a root domain's value dropped."""
    rd = pl.col("span").cast(pl.Utf8).str.strip_chars() if "span" in events.columns else pl.lit(SYSTEM)
    ev = events.select(
        pl.col("ts").cast(pl.Int64),
        rd.alias("root_domain"),
        (pl.col("overutilized").cast(pl.Int64) != 0).cast(pl.Int8).alias("overutilized"),
    )
    ev = ev.with_row_index("_o").sort("root_domain", "ts", "_o")
    prev = pl.col("overutilized").shift(1).over("root_domain")
    return ev.filter(prev.is_null() | (prev != pl.col("overutilized"))).drop("_o").sort("ts", "root_domain")


def df_overutilized_intervals(
    events: pl.DataFrame, *, start_ns: int | None = None, end_ns: int | None = None
) -> pl.DataFrame:
    """Per root domain: ``root_domain, ts (ns), dur (ns), overutilized`` (1, 0, null = unknown before the
    first event) over ``[start_ns, end_ns)``. ``events``: df_overutilized_events (whole trace)."""
    start_ns, end_ns = window_of(events, start_ns, end_ns)
    return df_intervals(events, "overutilized", keys="root_domain", start_ns=start_ns, end_ns=end_ns)


def _system(iv: pl.DataFrame, start_ns: int, end_ns: int) -> pl.DataFrame:
    """ "all": overutilized while any root domain is; unknown while none is and some is unknown."""
    steps = (
        pl.concat(
            [
                iv.select(
                    "ts",
                    (pl.col("overutilized") == 1).cast(pl.Int64).alias("ou"),
                    pl.col("overutilized").is_null().cast(pl.Int64).alias("unk"),
                ),
                iv.select(
                    (pl.col("ts") + pl.col("dur")).alias("ts"),
                    -(pl.col("overutilized") == 1).cast(pl.Int64).alias("ou"),
                    -pl.col("overutilized").is_null().cast(pl.Int64).alias("unk"),
                ),
            ]
        )
        .group_by("ts")
        .agg(pl.col("ou").sum(), pl.col("unk").sum())
        .sort("ts")
    )
    steps = steps.with_columns(pl.col("ou").cum_sum(), pl.col("unk").cum_sum()).filter(pl.col("ts") < end_ns)
    state = (
        pl.when(pl.col("ou") > 0)
        .then(pl.lit(1, pl.Int8))
        .when(pl.col("unk") > 0)
        .then(pl.lit(None, pl.Int8))
        .otherwise(pl.lit(0, pl.Int8))
    )
    ch = steps.select("ts", state.alias("overutilized"), pl.lit(SYSTEM).alias("root_domain"))
    return df_intervals(ch, "overutilized", keys="root_domain", start_ns=start_ns, end_ns=end_ns)


def df_overutilized(events: pl.DataFrame, *, start_ns: int | None = None, end_ns: int | None = None) -> pl.DataFrame:
    """Overutilized time per root domain and for the system (``root_domain`` "all").

    Columns: root_domain, overutilized_ns, known_ns (time its state is known), unknown_ns, pct (overutilized
    time, % of window), unknown_pct (% of window before its first event), transitions (state changes in the
    window, not counting the first event). ``events``: df_overutilized_events over the whole trace.
    """
    start_ns, end_ns = window_of(events, start_ns, end_ns)
    iv = df_overutilized_intervals(events, start_ns=start_ns, end_ns=end_ns)
    rds = iv["root_domain"].unique().to_list()
    if len(rds) > 1:
        iv = pl.concat([iv, _system(iv, start_ns, end_ns)])
    elif rds and rds[0] != SYSTEM:  # one root domain: it is the system
        iv = pl.concat([iv, iv.with_columns(pl.lit(SYSTEM).alias("root_domain"))])
    win = max(end_ns - start_ns, 1)
    known = pl.col("overutilized").is_not_null()
    out = iv.group_by("root_domain").agg(
        pl.col("dur").filter(pl.col("overutilized") == 1).sum().alias("overutilized_ns"),
        pl.col("dur").filter(known).sum().alias("known_ns"),
        pl.col("dur").filter(~known).sum().alias("unknown_ns"),
        (known & known.shift(1)).sum().cast(pl.Int64).alias("transitions"),
    )
    return (
        out.with_columns(
            (100.0 * pl.col("overutilized_ns") / win).alias("pct"),
            (100.0 * pl.col("unknown_ns") / win).alias("unknown_pct"),
        )
        .select("root_domain", "overutilized_ns", "known_ns", "unknown_ns", "pct", "unknown_pct", "transitions")
        .sort(pl.col("root_domain") != SYSTEM, "root_domain")
    )


class OverutilizedAnalysis:
    """Overutilized time of one trace (``trace.overutilized``; window = the trace's window)."""

    def __init__(self, trace):
        self.trace = trace

    def table(self) -> str:
        """The trace's overutilized table name; MissingEventsError when it has none."""
        for name in EVENT_TABLES:
            if name in self.trace.tables:
                return name
        raise MissingEventsError("overutilized", ["sched_overutilized"], str(self.trace.path))

    def df_events(self) -> pl.DataFrame:
        return df_overutilized_events(self.trace.df(self.table(), windowed=False))

    def df_intervals(self) -> pl.DataFrame:
        return df_overutilized_intervals(self.df_events(), start_ns=self.trace.start_ns, end_ns=self.trace.end_ns)

    def df_overutilized(self) -> pl.DataFrame:
        return df_overutilized(self.df_events(), start_ns=self.trace.start_ns, end_ns=self.trace.end_ns)


def _overutilized_rows(trace) -> pl.DataFrame | None:
    oa = OverutilizedAnalysis(trace)
    try:
        oa.table()
    except MissingEventsError:
        return None
    df = oa.df_overutilized()
    return df.with_columns((pl.col("overutilized_ns") / 1e9).alias("time_s"))


TABLES = (
    TableSpec(
        "root_domains",
        f"Overutilized time per root domain ({SYSTEM!r} = the system: any root domain overutilized)",
        "root_domain time_s[s] pct[%] unknown_pct[%] transitions",
        _overutilized_rows,
        note="unknown: the time before the first event",
    ),
)


# --------------------------------------------------------------------------------------------
# Declared metrics (abtest.analysis.registry)
# --------------------------------------------------------------------------------------------
OVERUTILIZED_PCT = MetricSpec(
    "overutilized.pct",
    "%",
    Direction.NONE,
    Aggregation.MEAN,
    title="overutilized",
    description="Share of the window the system (any root domain) was overutilized, i.e. EAS was off "
    "(sched_overutilized / lisa__sched_overutilized; time before the first event is unknown, not counted).",
    window=WindowCombine.RATE,
)
OVERUTILIZED_TIME_S = MetricSpec(
    "overutilized.time_s",
    "s",
    Direction.NONE,
    Aggregation.MEAN,
    title="overutilized time",
    description="Time the system was overutilized in the window (workload-processor's 'time').",
    window=WindowCombine.SUM,
)
RD_OVERUTILIZED_PCT = MetricSpec(
    "overutilized.root_domain.{root_domain}.pct",
    "%",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.ROOT_DOMAIN,
    title="root domain overutilized",
    description="Share of the window the root domain (named by its CPU span) was overutilized, when the event "
    "carries a span.",
    window=WindowCombine.RATE,
)

METRICS = (OVERUTILIZED_PCT, OVERUTILIZED_TIME_S, RD_OVERUTILIZED_PCT)


def metrics(trace, options=None) -> list[MetricValue]:
    """The declared overutilized metrics (MissingEventsError without the event)."""
    df = OverutilizedAnalysis(trace).df_overutilized()
    out: list[MetricValue] = []
    for r in df.iter_rows(named=True):  # one row per root domain + the system
        if r["root_domain"] == SYSTEM:
            out += [
                MetricValue(OVERUTILIZED_PCT, float(r["pct"])),
                MetricValue(OVERUTILIZED_TIME_S, r["overutilized_ns"] / 1e9),
            ]
        else:
            out.append(MetricValue(RD_OVERUTILIZED_PCT, float(r["pct"]), r["root_domain"]))
    return out
