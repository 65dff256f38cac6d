"""Data-quality checks run on every trace, whatever its format, over the canonical tables.

``inferred_gaps`` ({cpu as a string: count}; only CPUs with at least one)
    sched_switch chain breaks: on one CPU (and trace instance), consecutive switches where ``prev_pid`` is
    not the previous switch's ``next_pid``. The kernel writes a switch each time the CPU changes task, so a
    break means events are missing although the trace may record no loss (a filtered or truncated copy,
    a buffer overwritten without a count, a text file with lines dropped). Analyses that follow the chain
    (task residency, wakeup latency) are unreliable across a break. Switches with an unknown prev_pid
    (perfetto's compact scheduling data starts each CPU with one) are not counted.
``cpus_with_data`` (sorted CPU numbers)
    the CPUs the events are on (the ``cpu`` column of every table).
``cpus_header``
    the CPU count the file itself states (trace.dat header, ``#P:N`` / ``cpus=N``, perfetto's SystemInfo),
    or None. ``cpus`` stays that count when the file states one (analyses size per-CPU results with it;
    an idle CPU has no events), else it is the highest CPU with data + 1; a warning says when events lie on
    CPUs beyond the stated count.
``timestamp_outliers`` ({count, tables {name: count}, body_start_ns, body_end_ns, rule}; absent without any)
    events stamped far outside the trace's body (`timestamp_outliers`, docs/ingest-policy.md): kept in their
    tables, left out of the span (start_ns / end_ns), counted in import_errors ``timestamp_outlier``.
"""

from __future__ import annotations

import numpy as np
import polars as pl

# Timestamp outliers (docs/ingest-policy.md): at most this share of the events (and at most OUTLIER_MAX_EVENTS,
# at least 1) at each end of the trace may be outliers; an outlier is separated from the rest of the trace by
# an empty gap longer than OUTLIER_GAP_FACTOR times the trace's robust span and longer than OUTLIER_MIN_GAP_NS.
OUTLIER_MAX_SHARE = 0.001
OUTLIER_MAX_EVENTS = 1000
OUTLIER_GAP_FACTOR = 10
OUTLIER_MIN_GAP_NS = 10_000_000_000
OUTLIER_RULE = (
    f"an event is a timestamp outlier when an empty gap longer than {OUTLIER_GAP_FACTOR} x the trace's "
    f"robust span (and longer than {OUTLIER_MIN_GAP_NS / 1e9:g} s) separates it from the rest of the "
    f"trace, with at most {OUTLIER_MAX_SHARE:.1%} of the events (at least 1, at most "
    f"{OUTLIER_MAX_EVENTS}) beyond the gap at either end"
)


class ChainBreaks:
    """sched_switch chain breaks per CPU (``inferred_gaps``, above), counted once for every reader by the
    ingestion driver (abtest.trace.readers.Ingest) over a canonical sched_switch table (sorted by ts) given
    whole or in consecutive parts (a trace decoded in rounds): each CPU's last switch of one part is carried
    to the next, so the parts count what the whole table counts."""

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}
        self._last: pl.DataFrame | None = None  # the last switch of each CPU (and instance) so far

    def add(self, switch: pl.DataFrame | None) -> None:
        """Count the breaks of the next rows of the table (the rows before them already added)."""
        if switch is None or switch.is_empty() or not {"cpu", "prev_pid", "next_pid"} <= set(switch.columns):
            return
        rows = switch.select(c for c in ("cpu", "instance", "prev_pid", "next_pid") if c in switch.columns)
        if self._last is not None:  # each CPU's switch before these rows: its next_pid is what the first must follow
            rows = pl.concat([self._last, rows], how="diagonal_relaxed")
        by = ["cpu"] + (["instance"] if "instance" in rows.columns else [])
        breaks = (
            rows.select("cpu", "prev_pid", pl.col("next_pid").shift(1).over(by).alias("_before"))
            .filter(
                pl.col("prev_pid").is_not_null()
                & pl.col("_before").is_not_null()
                & (pl.col("prev_pid").cast(pl.Int64) != pl.col("_before").cast(pl.Int64))
            )
            .group_by("cpu")
            .len()
        )
        for cpu, n in breaks.iter_rows():
            if cpu is not None:
                self._counts[int(cpu)] = self._counts.get(int(cpu), 0) + int(n)
        self._last = (
            rows.group_by(by, maintain_order=True)
            .last()
            .with_columns(pl.lit(None, rows.schema["prev_pid"]).alias("prev_pid"))
            .select(rows.columns)
        )

    def gaps(self) -> dict[str, int]:
        """The counts as meta["inferred_gaps"]: CPUs with a break, as strings, in CPU order."""
        return {str(cpu): n for cpu, n in sorted(self._counts.items()) if n}


def cpus_with_data(tables: dict) -> list[int]:
    """Sorted CPU numbers carried by any table's ``cpu`` column."""
    seen: set[int] = set()
    for df in tables.values():
        if "cpu" in df.columns and not df.is_empty():
            seen.update(int(c) for c in df["cpu"].drop_nulls().unique().to_list())
    return sorted(seen)


def check(tables: dict, meta: dict, gaps: dict[str, int]) -> None:
    """Fill meta["inferred_gaps"] (``gaps``: ChainBreaks.gaps() of the trace's sched_switch), ["cpus_with_data"],
    ["cpus_header"], ["cpus"] and their warnings."""
    header = meta.get("cpus") or None
    meta["cpus_header"] = int(header) if header else None
    data_cpus = meta.get("cpus_with_data")
    if not isinstance(data_cpus, list) or not data_cpus:
        data_cpus = cpus_with_data(tables)
    meta["cpus_with_data"] = [int(c) for c in data_cpus]
    if header:
        beyond = [c for c in data_cpus if c >= header]
        if beyond:
            meta.setdefault("warnings", []).append(
                f"events on CPUs {beyond[:8]}{'...' if len(beyond) > 8 else ''} although the file states "
                f"{header} CPUs (cpus_header): the CPU numbers or the header are wrong"
            )
    else:
        meta["cpus"] = (max(data_cpus) + 1) if data_cpus else 0
    # reported by abtest.trace.import_log.import_warnings (trace info, analyze), with the CPUs that lost events
    meta["inferred_gaps"] = gaps


def _edge_times(tables: dict, k: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(the k + 1 smallest, the k + 1 largest event timestamps over all tables, each sorted ascending; the
    number of timestamps). Tables without a ``ts`` column or with null ``ts`` are left out."""
    lows, highs, n = [], [], 0
    for df in tables.values():
        if df.is_empty() or "ts" not in df.columns:
            continue
        ts = df["ts"].drop_nulls()
        n += ts.len()
        if ts.len():
            lows.append(ts.bottom_k(k + 1).to_numpy())
            highs.append(ts.top_k(k + 1).to_numpy())
    if not n:
        return np.empty(0, np.int64), np.empty(0, np.int64), 0
    low = np.sort(np.concatenate(lows).astype(np.int64))[: k + 1]
    high = np.sort(np.concatenate(highs).astype(np.int64))[-(k + 1) :]
    return low, high, n


def outlier_cuts(tables: dict) -> tuple[int | None, int | None]:
    """(low_cut, high_cut) in ns: events with ts < low_cut or ts > high_cut are timestamp outliers (None: no
    outlier at that end). See OUTLIER_RULE."""
    probe = 1
    for df in tables.values():
        if "ts" in df.columns:
            probe += df.height
    k = max(1, min(OUTLIER_MAX_EVENTS, int(probe * OUTLIER_MAX_SHARE)))
    low, high, n = _edge_times(tables, k)
    if n < 3:
        return None, None
    k = min(k, (n - 1) // 2)
    # the span of the trace without its k first and k last timestamps: robust to the outliers themselves
    inner_lo = int(low[min(k, len(low) - 1)])
    inner_hi = int(high[max(len(high) - 1 - k, 0)])
    gap_min = max(OUTLIER_GAP_FACTOR * max(inner_hi - inner_lo, 0), OUTLIER_MIN_GAP_NS)
    low_cut = high_cut = None
    low_gaps = np.diff(low[: k + 1])  # low_gaps[i]: between the (i+1)-th and (i+2)-th smallest
    for i in range(len(low_gaps) - 1, -1, -1):  # the widest split: the most events before the gap
        if low_gaps[i] > gap_min:
            low_cut = int(low[i + 1])
            break
    high_gaps = np.diff(high[-(k + 1) :])
    for i in range(len(high_gaps)):
        if high_gaps[i] > gap_min:
            high_cut = int(high[-(k + 1) :][i])
            break
    return low_cut, high_cut


def timestamp_outliers(tables: dict) -> dict | None:
    """{count, tables {name: count}, body_start_ns, body_end_ns, examples [{table, ts}], rule} of the events
    stamped far outside the trace's body (OUTLIER_RULE); None when there is none."""
    low_cut, high_cut = outlier_cuts(tables)
    if low_cut is None and high_cut is None:
        return None
    per_table: dict[str, int] = {}
    examples: list[dict] = []
    body_lo, body_hi = [], []
    for name, df in tables.items():
        if df.is_empty() or "ts" not in df.columns:
            continue
        ts = pl.col("ts")
        out = (ts < low_cut if low_cut is not None else pl.lit(False)) | (
            ts > high_cut if high_cut is not None else pl.lit(False)
        )
        flagged = df.filter(out.fill_null(False))
        if flagged.height:
            per_table[name] = flagged.height
            examples += [{"table": name, "ts": int(t)} for t in flagged["ts"].head(3).to_list()]
        body = df.filter(~out.fill_null(True))["ts"]
        if body.len():
            body_lo.append(body.min())
            body_hi.append(body.max())
    return {
        "count": sum(per_table.values()),
        "tables": per_table,
        "body_start_ns": int(min(body_lo)) if body_lo else None,
        "body_end_ns": int(max(body_hi)) if body_hi else None,
        "examples": examples[:5],
        "rule": OUTLIER_RULE,
    }
