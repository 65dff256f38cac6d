"""The shared primitive: a state-change stream -> intervals clipped to a window.

Every "value in force over time" question (idle state per CPU, frequency per CPU, task running on a
CPU, a sampled counter) is answered the same way: a stream of change events
``(key..., ts, value...)`` becomes non-overlapping intervals ``(key..., ts, dur, value...)`` covering
the analysis window ``[start_ns, end_ns)`` for every key.

Rules (the contract other analyses rely on):

* ``ts`` is the interval start (Int64, ns on the trace clock), ``dur`` its length (Int64, ns, > 0).
* The value in force at ``start_ns`` is *carried in*: the last change strictly before ``start_ns``
  for that key, else ``initial`` (a dict column -> value, or one value for a single value column),
  else null ("unknown"). A null-valued interval means the state was not known there; callers decide
  whether to drop it (e.g. ``df.drop_nulls(value)``) — it is never silently filled.
* A change exactly at ``start_ns`` replaces the carried-in value (no zero-length interval).
* Changes at or after ``end_ns`` are ignored; the last interval of each key runs to ``end_ns``.
* Several changes with the same (key, ts) keep the last one in input order.
* With ``merge_equal=True`` (default), consecutive intervals of the same key with equal values
  (nulls equal to nulls) are merged, so repeated "set to same value" events do not split intervals.
* Keys with no change at all inside or before the window appear only if listed in ``all_keys``
  (one interval ``[start_ns, end_ns)`` with the ``initial`` value or null).

All functions are vectorised polars; no Python loop over events.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

__all__ = [
    "df_intervals",
    "df_intervals_join",
    "df_residency",
    "time_weighted_mean",
    "window_of",
    "df_cpu_idle_intervals",
]


def _as_list(x: str | Sequence[str]) -> list[str]:
    return [x] if isinstance(x, str) else list(x)


def window_of(df: pl.DataFrame, start_ns: int | None, end_ns: int | None) -> tuple[int, int]:
    """Resolve a window: missing bounds default to the first / last ``ts`` of ``df`` (ns)."""
    if start_ns is None or end_ns is None:
        if df.is_empty():
            raise ValueError("empty change stream and no explicit window: pass start_ns and end_ns")
        lo, hi = df.select(pl.col("ts").min().alias("lo"), pl.col("ts").max().alias("hi")).row(0)
        start_ns = int(lo) if start_ns is None else start_ns
        end_ns = int(hi) if end_ns is None else end_ns
    if end_ns < start_ns:
        raise ValueError(f"window end {end_ns} ns is before its start {start_ns} ns")
    return int(start_ns), int(end_ns)


def _initial_exprs(values: list[str], initial: Any, schema: pl.Schema) -> list[pl.Expr]:
    if isinstance(initial, dict):
        init = initial
    elif len(values) == 1:
        init = {values[0]: initial}
    elif initial is None:
        init = {}
    else:
        raise ValueError("initial must be a dict {column: value} when there are several value columns")
    return [pl.lit(init.get(v), dtype=schema[v]).alias(v) for v in values]


def df_intervals(
    changes: pl.DataFrame,
    value: str | Sequence[str],
    *,
    keys: str | Sequence[str] = (),
    start_ns: int | None = None,
    end_ns: int | None = None,
    initial: Any = None,
    all_keys: pl.DataFrame | Sequence[Any] | None = None,
    merge_equal: bool = True,
) -> pl.DataFrame:
    """State changes -> intervals ``(keys..., ts, dur, values...)`` clipped to ``[start_ns, end_ns)``.

    Args:
        changes: frame with ``ts`` (Int64 ns), the key columns and the value columns; each row says
            "from ts on, key has value". Need not be sorted.
        value: the value column(s) (e.g. ``"state"`` for cpu_idle, ``"frequency_khz"``,
            ``["next_pid", "next_comm"]`` for sched_switch keyed by cpu).
        keys: column(s) identifying independent streams (e.g. ``"cpu"``, ``"rail"``); () = one stream.
        start_ns, end_ns: the window in ns; default = first / last change ts (so the last change of
            the stream gets a zero-length interval and is dropped: pass the trace end to keep it).
        initial: value in force before the first change when nothing earlier is known (see module doc).
        all_keys: key values (a frame of key columns, or a list for a single key) that must appear
            even with no change at all, e.g. every CPU of the platform.
        merge_equal: merge consecutive equal-valued intervals of the same key.

    Returns:
        Frame sorted by keys then ts with columns keys..., ``ts`` (Int64 ns, interval start),
        ``dur`` (Int64 ns, > 0), values... (same dtypes as in ``changes``).
    """
    values = _as_list(value)
    key_cols = _as_list(keys)
    missing = [c for c in ["ts", *key_cols, *values] if c not in changes.columns]
    if missing:
        raise ValueError(f"change stream lacks columns {missing}; it has {changes.columns}")
    start_ns, end_ns = window_of(changes, start_ns, end_ns)
    cols = [*key_cols, "ts", *values]
    ch = changes.select(cols).with_columns(pl.col("ts").cast(pl.Int64))
    # one pass over the rows in (keys, ts, input order), after stable sorts (by ts only when the table is not
    # sorted: trace tables are); every step after it compares a row with its neighbours instead of grouping
    if not ch["ts"].is_sorted():
        ch = ch.sort("ts", maintain_order=True)
    if key_cols:  # stable: (keys, ts, input order); one-key sorts are much faster than a sort on several keys
        ch = ch.sort(key_cols, maintain_order=True)
    same_next = _same_key(key_cols, -1)
    ts_next = pl.col("ts").shift(-1)
    # several changes at one (key, ts): the last one; changes at or after end_ns do not matter
    ch = ch.filter(~(same_next & (ts_next == pl.col("ts"))) & (pl.col("ts") < end_ns))
    # before start_ns only the last change of each key matters: it is carried in, as the row at start_ns,
    # unless a change exactly at start_ns replaces it
    before = pl.col("ts") < start_ns
    carried = before & ~(_same_key(key_cols, -1) & (ts_next < start_ns))
    replaced = carried & _same_key(key_cols, -1) & (ts_next == start_ns)
    ch = ch.filter(~before | (carried & ~replaced))
    init_exprs = _initial_exprs(values, initial, ch.schema)
    if initial is not None:  # values carried in that are unknown take the initial ones
        ch = ch.with_columns(
            [
                pl.when(pl.col("ts") < start_ns).then(pl.coalesce(pl.col(v), e)).otherwise(pl.col(v)).alias(v)
                for v, e in zip(values, init_exprs)
            ]
        )
    ch = ch.with_columns(pl.max_horizontal("ts", pl.lit(start_ns, pl.Int64)).alias("ts"))
    # keys whose first change is inside the window (or that have none, from all_keys) start with
    # the initial value (or null = unknown) at start_ns
    first = ~_same_key(key_cols, 1)
    if key_cols:
        lead = ch.filter(first & (pl.col("ts") > start_ns)).select(key_cols)
    else:  # one stream: None = it needs a row at start_ns
        lead = pl.DataFrame() if ch.height and ch["ts"][0] == start_ns else None
    if key_cols and all_keys is not None:
        extra = all_keys if isinstance(all_keys, pl.DataFrame) else pl.DataFrame({key_cols[0]: list(all_keys)})
        extra = extra.select([pl.col(k).cast(ch.schema[k]) for k in key_cols])
        extra = extra.join(ch.select(key_cols).unique(), on=key_cols, how="anti", nulls_equal=True)
        lead = pl.concat([lead, extra]) if lead is not None else extra
    if key_cols and lead is not None and lead.height:
        rows = lead.unique(maintain_order=True).with_columns(pl.lit(start_ns, pl.Int64).alias("ts"), *init_exprs)
        ch = pl.concat([rows.select(cols), ch], how="vertical_relaxed").sort(key_cols, maintain_order=True)
    elif not key_cols and lead is None:
        ch = pl.concat(
            [pl.select(pl.lit(start_ns, pl.Int64).alias("ts"), *init_exprs).select(cols), ch], how="vertical_relaxed"
        )
    if merge_equal and ch.height > 1:
        changed = ~_same_key(key_cols, 1)
        for v in values:
            changed = changed | pl.col(v).ne_missing(pl.col(v).shift(1))
        ch = ch.filter(changed)
    dur = pl.when(_same_key(key_cols, -1)).then(pl.col("ts").shift(-1)).otherwise(pl.lit(end_ns, pl.Int64)) - pl.col(
        "ts"
    )
    return ch.with_columns(dur.alias("dur")).filter(pl.col("dur") > 0).select([*key_cols, "ts", "dur", *values])


def _same_key(key_cols: list[str], n: int) -> pl.Expr:
    """Whether the row ``n`` rows away (rows sorted by keys) has the same keys (nulls equal)."""
    same = pl.lit(True)
    for k in key_cols:
        same = same & pl.col(k).eq_missing(pl.col(k).shift(n))
    # the frame's first / last row has no neighbour there
    return same & pl.int_range(pl.len()).shift(n).is_not_null()


def df_intervals_join(a: pl.DataFrame, b: pl.DataFrame, *, keys: str | Sequence[str] = ()) -> pl.DataFrame:
    """Overlay two interval frames of the same keys into intervals where both values are constant.

    ``a`` and ``b`` are outputs of :func:`df_intervals` (keys..., ts, dur, values...) with disjoint
    value column names. The result covers the time where *both* have an interval for a key, split at
    every boundary of either: keys..., ``ts`` (ns), ``dur`` (ns), a's values..., b's values....
    Example: frequency intervals x idle-state intervals per cpu -> time at each OPP while active.
    """
    key_cols = _as_list(keys)
    a_vals = [c for c in a.columns if c not in (*key_cols, "ts", "dur")]
    b_vals = [c for c in b.columns if c not in (*key_cols, "ts", "dur")]
    clash = set(a_vals) & set(b_vals)
    if clash:
        raise ValueError(f"value columns {sorted(clash)} appear in both interval frames; rename one")
    if a.is_empty() or b.is_empty():
        return pl.DataFrame(
            schema={
                **{k: a.schema[k] for k in key_cols},
                "ts": pl.Int64,
                "dur": pl.Int64,
                **{c: a.schema[c] for c in a_vals},
                **{c: b.schema[c] for c in b_vals},
            }
        )
    ae = a.with_columns((pl.col("ts") + pl.col("dur")).alias("_a_end"))
    be = b.with_columns((pl.col("ts") + pl.col("dur")).alias("_b_end"))
    cuts = (
        pl.concat(
            [
                a.select([*key_cols, "ts"]),
                b.select([*key_cols, "ts"]),
                ae.select([*key_cols, pl.col("_a_end").alias("ts")]),
                be.select([*key_cols, pl.col("_b_end").alias("ts")]),
            ]
        )
        .unique()
        .sort([*key_cols, "ts"])
    )
    nxt = pl.col("ts").shift(-1)
    if key_cols:
        nxt = nxt.over(key_cols)
    pieces = cuts.with_columns((nxt - pl.col("ts")).alias("dur")).filter(pl.col("dur") > 0)
    by = key_cols or None
    pieces = pieces.join_asof(
        ae.sort([*key_cols, "ts"]).drop("dur"), on="ts", by=by, strategy="backward", check_sortedness=False
    )
    pieces = pieces.join_asof(
        be.sort([*key_cols, "ts"]).drop("dur"), on="ts", by=by, strategy="backward", check_sortedness=False
    )
    pieces = pieces.filter((pl.col("ts") < pl.col("_a_end")) & (pl.col("ts") < pl.col("_b_end")))
    return pieces.select([*key_cols, "ts", "dur", *a_vals, *b_vals]).sort([*key_cols, "ts"])


def df_residency(intervals: pl.DataFrame, by: str | Sequence[str]) -> pl.DataFrame:
    """Total time per group: ``by..., time_ns`` (Int64 ns) and ``pct`` (% of the group's key total).

    ``by`` = key columns + value columns, e.g. ``["cpu", "frequency_khz"]``; ``pct`` is relative to the
    total time of the first ``by`` column's group (e.g. per cpu), 0..100.
    """
    by = _as_list(by)
    res = intervals.group_by(by).agg(pl.col("dur").sum().alias("time_ns")).sort(by, nulls_last=True)
    total = pl.col("time_ns").sum().over(by[0]) if len(by) > 1 else pl.col("time_ns").sum()
    return res.with_columns((100.0 * pl.col("time_ns") / total).alias("pct"))


def time_weighted_mean(intervals: pl.DataFrame, value: str, by: str | Sequence[str] = ()) -> pl.DataFrame:
    """Time-weighted mean of ``value`` over intervals (nulls ignored): ``by..., <value>_twmean``."""
    by = _as_list(by)
    valid = intervals.filter(pl.col(value).is_not_null())
    agg = (pl.col(value).cast(pl.Float64) * pl.col("dur")).sum() / pl.col("dur").sum()
    name = f"{value}_twmean"
    if not by:
        return valid.select(agg.alias(name))
    return valid.group_by(by).agg(agg.alias(name)).sort(by)


def df_cpu_idle_intervals(
    cpu_idle: pl.DataFrame, *, start_ns: int | None = None, end_ns: int | None = None, cpus: Sequence[int] | None = None
) -> pl.DataFrame:
    """cpu_idle events -> per-CPU intervals ``cpu, ts (ns), dur (ns), state, idle``.

    ``state`` is the idle-state index (-1 = active, null = idle in an unknown state, e.g. before the first
    event); ``idle`` (Boolean) is True while idle, null when not known. Before a CPU's first event in the
    window the state is inferred from that event: an exit (-1) means the CPU was idle, an entry means it
    was active. CPUs in ``cpus`` with no event at all get null (unknown) over the whole window.
    """
    ev = cpu_idle.select(pl.col("cpu").cast(pl.Int32), pl.col("ts").cast(pl.Int64), pl.col("state").cast(pl.Int64))
    if ev.is_empty() and (start_ns is None or end_ns is None):
        raise ValueError("no cpu_idle events and no explicit window")
    start_ns, end_ns = window_of(ev, start_ns, end_ns) if not ev.is_empty() else (int(start_ns), int(end_ns))
    first = ev.sort("ts").group_by("cpu", maintain_order=True).first()
    seed = first.select(
        "cpu",
        (pl.min_horizontal(pl.col("ts"), pl.lit(start_ns)) - 1).alias("ts"),
        pl.when(pl.col("state") == -1).then(pl.lit(None, pl.Int64)).otherwise(pl.lit(-1, pl.Int64)).alias("state"),
        (pl.col("state") == -1).alias("idle"),
    )
    changes = pl.concat([seed, ev.with_columns((pl.col("state") != -1).alias("idle"))])
    return df_intervals(
        changes,
        ["state", "idle"],
        keys="cpu",
        start_ns=start_ns,
        end_ns=end_ns,
        all_keys=None if cpus is None else list(cpus),
    )
