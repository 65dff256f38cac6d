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
"""
from __future__ import annotations

import polars as pl


def inferred_gaps(switch) -> dict[str, int]:
    """{cpu: chain breaks} of a canonical sched_switch table (a polars frame sorted by ts)."""
    if switch is None:
        return {}
    counts, _ = chain_breaks(switch)
    return gaps_of(counts)


def chain_breaks(switch: pl.DataFrame, before: pl.DataFrame | None = None) -> tuple[dict, pl.DataFrame | None]:
    """({cpu: chain breaks}, last) of sched_switch rows sorted by ts. ``before``: the ``last`` of the rows
    preceding these (a table read in consecutive parts, each call given the previous one's ``last``, counts
    what the whole table counts); ``last``: the last switch of each CPU (and instance), to carry on."""
    if switch.is_empty() or not {"cpu", "prev_pid", "next_pid"} <= set(switch.columns):
        return {}, before
    by = ["cpu"] + (["instance"] if "instance" in switch.columns else [])
    rows = switch.select(*by, "prev_pid", "next_pid")
    if before is not None:  # each CPU's switch before these rows: its next_pid is what the first must follow
        rows = pl.concat([before, rows], how="vertical_relaxed")
    breaks = (rows.select("cpu", "prev_pid", pl.col("next_pid").shift(1).over(by).alias("_before"))
              .filter(pl.col("prev_pid").is_not_null() & pl.col("_before").is_not_null()
                      & (pl.col("prev_pid").cast(pl.Int64) != pl.col("_before").cast(pl.Int64)))
              .group_by("cpu").len())
    last = rows.group_by(by, maintain_order=True).last().with_columns(pl.lit(None, rows.schema["prev_pid"])
                                                                      .alias("prev_pid")).select(rows.columns)
    return {cpu: int(n) for cpu, n in breaks.iter_rows() if cpu is not None}, last


def gaps_of(counts: dict) -> dict[str, int]:
    """chain_breaks' counts as meta["inferred_gaps"]: CPUs with a break, as strings, in CPU order."""
    return {str(int(cpu)): int(n) for cpu, n in sorted(counts.items()) if n}


def cpus_with_data(tables: dict) -> list[int]:
    """Sorted CPU numbers carried by any table's ``cpu`` column."""
    seen: set[int] = set()
    for df in tables.values():
        if "cpu" in df.columns and not df.is_empty():
            seen.update(int(c) for c in df["cpu"].drop_nulls().unique().to_list())
    return sorted(seen)


def check(tables: dict, meta: dict, gaps: dict[str, int] | None = None) -> None:
    """Fill meta["inferred_gaps"], ["cpus_with_data"], ["cpus_header"], ["cpus"] and their warnings.
    ``gaps``: the inferred gaps when already counted (a trace decoded in rounds), else counted here."""
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
                f"{header} CPUs (cpus_header): the CPU numbers or the header are wrong")
    else:
        meta["cpus"] = (max(data_cpus) + 1) if data_cpus else 0
    # reported by abtest.trace.import_log.import_warnings (trace info, analyze), with the CPUs that lost events
    meta["inferred_gaps"] = gaps if gaps is not None else inferred_gaps(tables.get("sched_switch"))
