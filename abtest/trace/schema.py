"""The canonical tables: the contract between abtest.trace (readers) and abtest.analysis.

Every reader returns *raw* tables named after the kernel event, with columns
``ts`` (Int64, ns on the trace clock), ``cpu`` (Int32, CPU whose ring buffer held the event),
``common_pid`` (Int32, task current when the event fired; absent when the source lacks it),
followed by the event's own fields under their kernel names and widths.
``canonicalize()`` then applies the renames below, so every analysis sees the same columns
whatever the source format.

Canonical tables (all sorted by ts; comm/rail strings are Categorical):

sched_switch        ts, cpu, common_pid, prev_comm, prev_pid, prev_prio, prev_state (Int64, kernel
                    task state bits; 0 = preempted while runnable), next_comm, next_pid, next_prio
sched_wakeup, sched_waking, sched_wakeup_new
                    ts, cpu, common_pid, comm, pid, prio, target_cpu (older kernels: + success)
sched_migrate_task  ts, cpu, common_pid, comm, pid, prio, orig_cpu, dest_cpu
cpu_idle            ts, cpu (Int32, the CPU that changed state, from cpu_id),
                    state (Int64: idle state index entered; -1 = exit to active, the kernel
                    writes 4294967295 = (u32)-1)
cpu_idle_miss       ts, cpu (from cpu_id), state (Int64), type (Categorical: "above" = the state
                    was too deep for the actual sleep, "below" = a deeper state would have fitted)
cpu_frequency       ts, cpu (from cpu_id), frequency_khz (Int64, kHz)
cpu_frequency_limits ts, cpu (from cpu_id), min_khz, max_khz (Int64, kHz)
sched_pelt_cfs / sched_pelt_se / sched_pelt_rt / sched_pelt_dl / sched_pelt_irq
                    ts, cpu, [pid, comm for se], [path], util, runnable, load (PELT units,
                    0..1024 for util/runnable) -- plus any other fields of the variant
                    (raw names sched_load_cfs_rq, sched_load_se, sched_load_rt_rq, sched_load_dl_rq,
                    sched_load_irq, lisa__sched_pelt_*, sched_load_avg_cpu, sched_load_avg_task)
marker              ts, cpu, pid (Int32), text (Utf8), event (Categorical: print, bprint, bputs,
                    tracing_mark_write) -- `trace info` counts these per original event; [ip (Utf8): text
                    traces only, the caller as printed: trace_printk's function, e.g. `__schedule+0x184/0x9fc`]
power_rail          ts, rail (Categorical, e.g. S4M_VDD_CPUCL0), subsystem (Categorical),
                    energy_uj (Float64, cumulative energy counter as sampled, uJ = uWs)
process             pid (Int32, thread id), tgid (Int32), ppid (Int32), name (Utf8), user (Utf8): the
                    ps listings of systrace / atrace text (not events; abtest.trace.text_process)
any other event     a table named after it, ts, cpu, common_pid and every field of its format.

Traces with named trace instances (tracefs instances/NAME, `trace-cmd record -B NAME`) add a column
`instance` (Categorical) to every table: the instance whose ring buffer held the event, null for the
top-level buffer; meta["instances"] lists the names.
"""

from __future__ import annotations

import polars as pl

from abtest.trace import import_log

# raw event name -> canonical event name
EVENT_ALIASES: dict[str, str] = {
    "sched_load_cfs_rq": "sched_pelt_cfs",
    "sched_load_se": "sched_pelt_se",
    "sched_load_rt_rq": "sched_pelt_rt",
    "sched_load_dl_rq": "sched_pelt_dl",
    "sched_load_irq": "sched_pelt_irq",
    "sched_load_avg_cpu": "sched_pelt_cfs",
    "sched_load_avg_task": "sched_pelt_se",
    "lisa__sched_pelt_cfs": "sched_pelt_cfs",
    "lisa__sched_pelt_se": "sched_pelt_se",
    "lisa__sched_pelt_rt": "sched_pelt_rt",
    "lisa__sched_pelt_dl": "sched_pelt_dl",
    "lisa__sched_pelt_irq": "sched_pelt_irq",
    "lisa__sched_pelt_thermal": "sched_pelt_thermal",
}

MARKER_EVENTS = ("print", "bprint", "bputs", "tracing_mark_write")


def raw_names(canonical) -> frozenset[str]:
    """The raw event names a reader may give the canonical tables `canonical` under: the names themselves, the
    raw aliases of each (EVENT_ALIASES) and, for `marker`, the marker events it is built from."""
    wanted = set(canonical)
    out = wanted | {raw for raw, canon in EVENT_ALIASES.items() if canon in wanted}
    if "marker" in wanted:
        out |= set(MARKER_EVENTS)
    return frozenset(out)


# PELT field names across kernel/module versions -> canonical
_PELT_FIELD_RENAMES = {
    "util_avg": "util",
    "load_avg": "load",
    "runnable_avg": "runnable",
    "utilization": "util",  # sched_load_avg_cpu / _task on old EAS kernels
}

IDLE_EXIT_RAW = 4294967295  # (u32)-1 written by the kernel on idle exit


def _categorical(df: pl.DataFrame, cols: tuple[str, ...]) -> pl.DataFrame:
    present = [c for c in cols if c in df.columns and df.schema[c] == pl.Utf8]
    if not present:
        return df
    return df.with_columns([pl.col(c).cast(pl.Categorical) for c in present])


def _cpu_from_cpu_id(df: pl.DataFrame) -> pl.DataFrame:
    """Use the event's cpu_id (the CPU the event is about) as `cpu`."""
    if "cpu_id" not in df.columns:
        return df
    return df.drop("cpu").rename({"cpu_id": "cpu"}).with_columns(pl.col("cpu").cast(pl.Int32))


def _signed_state(col: str) -> pl.Expr:
    return (
        pl.when(pl.col(col).cast(pl.Int64) == IDLE_EXIT_RAW)
        .then(pl.lit(-1, pl.Int64))
        .otherwise(pl.col(col).cast(pl.Int64))
        .alias(col)
    )


def _canon_cpu_idle(df: pl.DataFrame) -> pl.DataFrame:
    df = _cpu_from_cpu_id(df)
    return df.with_columns(_signed_state("state")) if "state" in df.columns else df


def _canon_cpu_idle_miss(df: pl.DataFrame) -> pl.DataFrame:
    df = _cpu_from_cpu_id(df)
    if "state" in df.columns:
        df = df.with_columns(_signed_state("state"))
    if "below" in df.columns and "type" not in df.columns:
        df = df.with_columns(
            pl.when(pl.col("below").cast(pl.Int64) != 0)
            .then(pl.lit("below"))
            .otherwise(pl.lit("above"))
            .cast(pl.Categorical)
            .alias("type")
        ).drop("below")
    elif "type" in df.columns:
        df = df.with_columns(pl.col("type").cast(pl.Utf8).cast(pl.Categorical))
    return df


def _canon_cpu_frequency(df: pl.DataFrame) -> pl.DataFrame:
    df = _cpu_from_cpu_id(df)
    if "state" in df.columns:
        df = df.rename({"state": "frequency_khz"}).with_columns(pl.col("frequency_khz").cast(pl.Int64))
    return df


def _canon_cpu_frequency_limits(df: pl.DataFrame) -> pl.DataFrame:
    df = _cpu_from_cpu_id(df)
    ren = {k: v for k, v in {"min_freq": "min_khz", "max_freq": "max_khz"}.items() if k in df.columns}
    df = df.rename(ren)
    return df.with_columns([pl.col(c).cast(pl.Int64) for c in ("min_khz", "max_khz") if c in df.columns])


def _canon_pelt(df: pl.DataFrame) -> pl.DataFrame:
    ren = {k: v for k, v in _PELT_FIELD_RENAMES.items() if k in df.columns and v not in df.columns}
    return df.rename(ren)


def _marker_text_column(name: str, df: pl.DataFrame) -> pl.Expr:
    for col in ("buf", "str", "text"):
        if col in df.columns:
            return pl.col(col).cast(pl.Utf8).str.strip_chars_end("\n").alias("text")
    return pl.lit(None, pl.Utf8).alias("text")


def _build_marker(raw: dict[str, pl.DataFrame]) -> pl.DataFrame | None:
    parts = []
    for name in MARKER_EVENTS:
        df = raw.get(name)
        if df is None:
            continue
        pid = pl.col("common_pid") if "common_pid" in df.columns else pl.lit(None, pl.Int32)
        cols = [
            pl.col("ts").cast(pl.Int64),
            pl.col("cpu").cast(pl.Int32),
            pid.cast(pl.Int32).alias("pid"),
            _marker_text_column(name, df),
            pl.lit(name).alias("event"),
        ]
        if df.schema.get("ip") == pl.Utf8:  # text readers: the caller's symbol as printed (trace_printk's function)
            cols.append(pl.col("ip"))
        if "instance" in df.columns:
            cols.append(pl.col("instance").cast(pl.String))
        parts.append(df.select(cols))
    if not parts:
        return None
    marker = pl.concat(parts, how="diagonal_relaxed").sort("ts", maintain_order=True)
    return _categorical(marker.with_columns(pl.col("event").cast(pl.Categorical)), ("instance",))


# Integer fields the analyses read, per raw event, with their canonical width. A text reader gives a column
# as strings when one of its values is not a number (a corrupt line); a binary one may carry a value that does
# not fit the canonical width (a cpu_id of 4294967295). `_coerce_integers` turns such values into nulls, says
# how many in meta["warnings"], and keeps every other value of the column.
_INTEGER_FIELDS: dict[str, dict[str, pl.DataType]] = {
    "sched_switch": {"prev_pid": pl.Int32, "prev_prio": pl.Int32, "next_pid": pl.Int32, "next_prio": pl.Int32},
    "sched_wakeup": {"pid": pl.Int32, "prio": pl.Int32, "target_cpu": pl.Int32},
    "sched_waking": {"pid": pl.Int32, "prio": pl.Int32, "target_cpu": pl.Int32},
    "sched_wakeup_new": {"pid": pl.Int32, "prio": pl.Int32, "target_cpu": pl.Int32},
    "sched_migrate_task": {"pid": pl.Int32, "prio": pl.Int32, "orig_cpu": pl.Int32, "dest_cpu": pl.Int32},
    "cpu_idle": {"cpu_id": pl.Int32, "state": pl.Int64},
    "cpu_idle_miss": {"cpu_id": pl.Int32, "state": pl.Int64, "below": pl.Int64},
    "cpu_frequency": {"cpu_id": pl.Int32, "state": pl.Int64},
    "cpu_frequency_limits": {"cpu_id": pl.Int32, "min_freq": pl.Int64, "max_freq": pl.Int64},
}
_COMMON_INTEGER_FIELDS: dict[str, pl.DataType] = {"cpu": pl.Int32, "common_pid": pl.Int32}


def _coerce_integers(name: str, df: pl.DataFrame, meta: dict) -> pl.DataFrame:
    """Columns that must be integers of a width -> that width (values that are not a number, or do not fit,
    become null and are reported in meta["warnings"] with the first of them). Columns already of the
    width are left alone."""
    own = _INTEGER_FIELDS.get(name, {})
    wanted = {**_COMMON_INTEGER_FIELDS, **own}
    # text columns (a corrupt value) are coerced everywhere; an integer column changes width only in the tables
    # the analyses read (other tables keep the kernel's widths, as the decoder-to-parquet path writes them)
    cols = [
        c
        for c, t in wanted.items()
        if c in df.columns
        and df.schema[c] != t
        and (df.schema[c] in (pl.Utf8, pl.Categorical) or (c in own and df.schema[c].is_integer()))
    ]
    if not cols:
        return df
    exprs = {}
    for c in cols:
        src = pl.col(c)
        if df.schema[c] in (pl.Utf8, pl.Categorical):
            src = src.cast(pl.Utf8).str.strip_chars().cast(pl.Int64, strict=False)
        exprs[c] = src.cast(wanted[c], strict=False)
    bad = df.select([(pl.col(c).is_not_null() & e.is_null()).alias(c) for c, e in exprs.items()])
    for c in cols:
        n = int(bad[c].sum())
        if n:
            first = df.filter(bad[c]).row(0, named=True)
            meta.setdefault("warnings", []).append(
                f"{name}.{c}: {n} value(s) not an integer of the field's width set to null (first {first[c]!r}"
                + (f" at ts {first['ts']} ns)" if "ts" in first else ")")
            )
    return df.with_columns([e.alias(c) for c, e in exprs.items()])


_CANON_FUNCS = {
    "cpu_idle": _canon_cpu_idle,
    "cpu_idle_miss": _canon_cpu_idle_miss,
    "cpu_frequency": _canon_cpu_frequency,
    "cpu_frequency_limits": _canon_cpu_frequency_limits,
}

_COMM_COLUMNS = ("comm", "prev_comm", "next_comm", "common_comm", "rail", "subsystem", "instance")


def _event_cpu_convention(df: pl.DataFrame) -> pl.DataFrame:
    """One convention for events that carry their own `cpu` field: the event's field is `cpu` and the
    ring buffer's CPU is `buffer_cpu` (the binary readers do this; text readers name the event's field
    `field_cpu`)."""
    if "field_cpu" not in df.columns or "buffer_cpu" in df.columns:
        return df
    cpu = pl.col("cpu")
    if df.schema["field_cpu"] == pl.Utf8:  # "cpu=0 lock contended:0": the value is the leading number
        cpu = cpu.str.extract(r"^\s*(-?\d+)(?:\s|$)").str.to_integer(base=10, strict=False)
    return df.rename({"cpu": "buffer_cpu"}).rename({"field_cpu": "cpu"}).with_columns(cpu.cast(pl.Int32, strict=False))


def unchanged_by_canonicalize(name: str, schema: dict[str, pl.DataType]) -> bool:
    """True when `canonicalize()` returns the raw table `name` with these columns as it is, provided it
    is sorted by ts (the trace.dat decoder's tables are): no rename, cast, merge or derived column."""
    if name in MARKER_EVENTS or name in _CANON_FUNCS or EVENT_ALIASES.get(name, name) != name:
        return False
    if name.startswith("sched_pelt_") or "field_cpu" in schema:
        return False
    return not any(schema.get(c) == pl.Utf8 for c in _COMM_COLUMNS)


# Canonical columns every row of a canonical table must carry (after the renames above): a row where one is null
# (a value that did not fit the canonical width, e.g. a cpu_id of 4294967295 or 2^64-1) cannot be placed on a CPU
# or a task and is an import error instead of a row (`_drop_unfit_rows`). sched_switch prev_pid may be null: perfetto's
# compact sched format does not know the task a CPU ran before its first recorded switch.
_REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    "sched_switch": ("next_pid",),
    "sched_wakeup": ("pid",),
    "sched_waking": ("pid",),
    "sched_wakeup_new": ("pid",),
    "sched_migrate_task": ("pid", "orig_cpu", "dest_cpu"),
    "cpu_idle": ("state",),
    "cpu_idle_miss": ("state",),
    "cpu_frequency": ("frequency_khz",),
    "cpu_frequency_limits": ("min_khz", "max_khz"),
}


def _drop_unfit_rows(name: str, df: pl.DataFrame, meta: dict) -> pl.DataFrame:
    """Rows of an event table whose CPU is null or negative (a CPU number of 2^31 or more: perfetto's bundle CPU
    4294967295 reads as -1) or that lack a canonical column (_REQUIRED_COLUMNS) are moved to
    meta["import_errors"] (kind ``value_out_of_range``, count, first examples with their ts); the table keeps
    its schema and every other row."""
    if name in SAMPLE_TABLES or name in DESCRIPTION_TABLES or df.is_empty():
        return df
    need = [c for c in _REQUIRED_COLUMNS.get(name, ()) if c in df.columns]
    checks = [pl.col(c).is_null() for c in need]
    # the ring buffer's CPU places the row; an event's own `cpu` field (then the ring buffer's is `buffer_cpu`)
    # may be -1 or absent by the event's own meaning (cgroup_rstat_locked: cpu=-1) and is kept as it is
    placed_by = "buffer_cpu" if "buffer_cpu" in df.columns else "cpu"
    if placed_by in df.columns and df.schema[placed_by].is_integer():
        checks.append(pl.col(placed_by).is_null() | (pl.col(placed_by) < 0))
    if not checks:
        return df
    bad = df.select(pl.any_horizontal(checks).alias("_bad")).to_series()
    if not bad.any():  # the usual case
        return df
    rows = df.filter(bad)
    cols = [c for c in ("ts", placed_by, *need) if c in rows.columns]
    import_log.add_error(
        meta,
        "value_out_of_range",
        rows.height,
        [
            import_log.example(
                f"{name}: " + " ".join(f"{c}={r[c]}" for c in cols),
                detail=f"{name} rows need a CPU number in 0..2^31-1"
                + (f" and {', '.join(need)}" if need else "")
                + " (null: a value that does not fit the field's width)",
            )
            for r in rows.head(import_log.MAX_EXAMPLES).iter_rows(named=True)
        ],
    )
    return df.filter(~bad)


def canonicalize(raw: dict[str, pl.DataFrame], meta: dict) -> dict[str, pl.DataFrame]:
    """Raw reader tables -> canonical tables (pure; records renames in meta["event_aliases"])."""
    out: dict[str, pl.DataFrame] = {}
    aliases = meta.setdefault("event_aliases", {})
    marker = _build_marker(raw)
    if marker is not None:
        out["marker"] = marker
    for name, df in raw.items():
        if name in MARKER_EVENTS:
            continue
        df = _event_cpu_convention(df)
        df = _coerce_integers(name, df, meta)
        canon = EVENT_ALIASES.get(name, name)
        if canon != name:
            aliases[canon] = name
        if canon.startswith("sched_pelt_"):
            df = _canon_pelt(df)
        fn = _CANON_FUNCS.get(canon)
        if fn is not None:
            df = fn(df)
        df = _drop_unfit_rows(canon, df, meta)
        df = _categorical(df, _COMM_COLUMNS)
        if "ts" in df.columns and not df.is_empty():
            df = df.sort("ts", maintain_order=True)
        if canon in out:  # two raw variants of the same canonical event
            out[canon] = pl.concat([out[canon], df], how="diagonal_relaxed").sort("ts", maintain_order=True)
        else:
            out[canon] = df
    return out


# Tables that hold counter samples, not trace events: reported by `sample_counts`, not `event_counts`.
SAMPLE_TABLES = ("power_rail", "battery_counters", "cpu_frequency_polled")
# Tables that describe the system, not events: `process` (pid, tgid, ppid, name, user) from the ps listings
# of systrace / atrace text (abtest.trace.text_process). Neither events nor samples.
DESCRIPTION_TABLES = ("process",)


def sample_counts(tables: dict[str, pl.DataFrame]) -> dict[str, int]:
    """Rows of the counter-sample tables (power rails, battery counters, polled CPU frequency) in the trace."""
    return {name: tables[name].height for name in SAMPLE_TABLES if name in tables}


def event_counts(tables: dict[str, pl.DataFrame]) -> dict[str, int]:
    """Per-event counts as the kernel names the events (after variant normalisation).

    The `marker` table is split back into print / bprint / bputs / tracing_mark_write.
    Counter-sample tables (SAMPLE_TABLES) are not events and are left out.
    """
    counts: dict[str, int] = {}
    for name, df in tables.items():
        if name in SAMPLE_TABLES or name in DESCRIPTION_TABLES:
            continue
        if name == "marker":
            for row in df.group_by("event").len().iter_rows():
                counts[str(row[0])] = int(row[1])
        else:
            counts[name] = df.height
    return dict(sorted(counts.items()))
