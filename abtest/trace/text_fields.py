"""Event payload text -> typed columns, vectorised with polars string expressions.

One function per payload family; each takes the frame of *one event's* lines (column ``payload``,
Utf8) and returns the frame with the event's fields added as columns (``payload`` dropped).
No Python loop runs per line: the only loops are over events and over the few distinct
``key=`` layouts ("signatures") one event shows in a file.

prev_state letters -> kernel bit values
---------------------------------------
Text traces print ``sched_switch`` ``prev_state`` as letters; trace.dat carries the integer. We map
letters back to integers so the canonical column is Int64 whatever the source. The kernel's own
format (include/trace/events/sched.h, kernels >= 4.14) prints::

    R = 0 (running/runnable)   S = 0x1    D = 0x2    T = 0x4    t = 0x8
    X = 0x10 (EXIT_DEAD)       Z = 0x20 (EXIT_ZOMBIE)  P = 0x40 (TASK_PARKED)
    I = 0x80 (TASK_REPORT_IDLE)   "+" suffix = 0x100 (TASK_REPORT_MAX: preempted while runnable)

several letters joined by "|" are OR-ed. Letters only older kernels print (< 4.14: x = TASK_DEAD
0x40, K = TASK_WAKEKILL 0x80, W = TASK_WAKING 0x100, N = TASK_NOLOAD 0x400) keep their old values.
Caveat: before 4.14 the bits differed (Z was 0x10 and X 0x20, P 0x200, "+" was TASK_STATE_MAX:
0x400..0x1000 depending on version), so on such traces the integers follow the >= 4.14 meaning of
each letter, not the exact value that kernel stored. 0 always means "runnable", S/D always 1/2.

``trace-cmd report`` text is different: its sched_switch plugin (libtraceevent) prints
``comm:pid [prio] STATE ==> comm:pid [prio]`` with its own table ``S D T t Z X x W`` = bits
0..7 and "R" when none of those bits is set. We invert *that* table for plugin-format lines, which
gives back the trace.dat integer exactly except that bits >= 0x100 (the 4.14+ preempt bit) are not
printed by the plugin and read back as 0. Use ``trace-cmd report -R`` for exact values.
"""

from __future__ import annotations

import re

import polars as pl

# kernel (>= 4.14) sched_switch prev_state letters, plus letters only pre-4.14 kernels print
KERNEL_STATE_BITS: dict[str, int] = {
    "R": 0,
    "S": 0x1,
    "D": 0x2,
    "T": 0x4,
    "t": 0x8,
    "X": 0x10,
    "Z": 0x20,
    "P": 0x40,
    "I": 0x80,
    "x": 0x40,
    "K": 0x80,
    "W": 0x100,
    "N": 0x400,
    "+": 0x100,
}
# libtraceevent sched_switch plugin (trace-cmd report): bit i <-> "SDTtZXxW"[i]
TRACECMD_PLUGIN_STATE_BITS: dict[str, int] = {
    "R": 0,
    "S": 0x1,
    "D": 0x2,
    "T": 0x4,
    "t": 0x8,
    "Z": 0x10,
    "X": 0x20,
    "x": 0x40,
    "W": 0x80,
}

# Fields whose values are integers even when printed in hex (0x..) -- converted to Int64.
KNOWN_INT_FIELDS = frozenset(
    {
        "pid",
        "prio",
        "target_cpu",
        "orig_cpu",
        "dest_cpu",
        "cpu",
        "cpu_id",
        "success",
        "prev_pid",
        "prev_prio",
        "next_pid",
        "next_prio",
        "state",
        "freq",
        "frequency",
        "min_freq",
        "max_freq",
        "util",
        "util_avg",
        "load",
        "load_avg",
        "runnable_avg",
    }
)
MARKER_LIKE = frozenset({"print", "bprint", "bputs"})
# Fields the canonical tables (abtest.trace.schema) need as integers: a row where one is not an integer is
# not imported (abtest.trace.text_lines counts it in import_errors as bad_field_value); INT32_FIELDS must
# also fit Int32 (the kernel's pid_t / CPU numbers), else value_out_of_range.
_WAKE_FIELDS = ("pid", "prio", "target_cpu")
CANONICAL_INT_FIELDS: dict[str, tuple[str, ...]] = {
    "sched_switch": ("prev_pid", "prev_prio", "next_pid", "next_prio"),
    "sched_wakeup": _WAKE_FIELDS,
    "sched_waking": _WAKE_FIELDS,
    "sched_wakeup_new": _WAKE_FIELDS,
    "sched_migrate_task": ("pid", "prio", "orig_cpu", "dest_cpu"),
    "cpu_idle": ("state", "cpu_id"),
    "cpu_frequency": ("state", "cpu_id"),
    "cpu_idle_miss": ("state", "cpu_id"),
    "cpu_frequency_limits": ("min_freq", "max_freq", "cpu_id"),
    # not canonical tables, but read as integers by abtest.analysis.thermal
    "thermal_temperature": ("id", "temp_prev", "temp"),
    "cdev_update": ("target",),
    "thermal_power_cpu_limit": ("freq", "cdev_state", "power"),
    "thermal_power_allocator": (
        "thermal_zone_id",
        "tz_id",
        "total_req_power",
        "total_granted_power",
        "max_allocatable_power",
        "current_temperature",
        "current_temp",
        "delta_temperature",
        "delta_temp",
    ),
    # PELT signals, read as numbers by abtest.analysis.load_tracking (every name of abtest.trace.schema's
    # sched_pelt_* tables; each field checked where the event has it)
    **{
        name: ("util", "load", "runnable", "util_avg", "load_avg", "runnable_avg", "utilization", "pid", "field_cpu")
        for name in (
            "sched_load_cfs_rq",
            "sched_load_se",
            "sched_load_rt_rq",
            "sched_load_dl_rq",
            "sched_load_irq",
            "sched_load_avg_cpu",
            "sched_load_avg_task",
            "lisa__sched_pelt_cfs",
            "lisa__sched_pelt_se",
            "lisa__sched_pelt_rt",
            "lisa__sched_pelt_dl",
            "lisa__sched_pelt_irq",
            "lisa__sched_pelt_thermal",
        )
    },
}
# Fields every line of the event must carry for its table to keep the canonical schema (abtest.trace.schema) and
# the analyses to read it: a line without one (``cpu_frequency: freq=1000 cpu=0``, ``cpu_idle: foo=1``) is not
# imported (import_errors ``missing_field``), and a table whose every line lacks it still has the column (empty).
_WAKE_REQUIRED = ("comm", "pid", "prio", "target_cpu")
REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "sched_switch": ("prev_comm", "prev_pid", "prev_prio", "prev_state", "next_comm", "next_pid", "next_prio"),
    "sched_wakeup": _WAKE_REQUIRED,
    "sched_waking": _WAKE_REQUIRED,
    "sched_wakeup_new": _WAKE_REQUIRED,
    "sched_migrate_task": ("comm", "pid", "prio", "orig_cpu", "dest_cpu"),
    "cpu_idle": ("state", "cpu_id"),
    "cpu_frequency": ("state", "cpu_id"),
    "cpu_idle_miss": ("state", "cpu_id"),
    "cpu_frequency_limits": ("min_freq", "max_freq", "cpu_id"),
    "thermal_temperature": ("thermal_zone", "temp"),
    "cdev_update": ("type", "target"),
    "thermal_power_cpu_limit": ("cpus", "freq", "cdev_state"),
}
INT32_FIELDS = frozenset({"prev_pid", "next_pid", "pid", "target_cpu", "orig_cpu", "dest_cpu", "cpu_id", "field_cpu"})
# Columns every raw table starts with; an event field of the same name is renamed field_<name>
# (e.g. sched_load_avg_cpu's own ``cpu=7`` -> field_cpu; ``cpu`` stays the ring-buffer CPU).
COMMON_COLUMNS = frozenset({"ts", "cpu", "common_pid", "common_comm", "common_tgid", "stack"})

_KEY_RE = r"(?:^|\s)([A-Za-z_][\w.]*)="
_KEY_PY_RE = re.compile(_KEY_RE)
_TRACECMD_SWITCH_RE = r"^.*:-?[0-9]+ \[-?[0-9]+\] [A-Za-z|+]+ ==> .*:-?[0-9]+ \[-?[0-9]+\]$"
_TRACECMD_WAKE_RE = r"^.*:-?[0-9]+ \[-?[0-9]+\](?: success=[0-9]+)? CPU:[0-9]+$"
_INT_RE = r"^[+-]?[0-9]+$"
_INT_WITH_UNIT_RE = r"^[+-]?[0-9]+ \[ns\]$"


def state_letters_to_bits(col: pl.Expr, table: dict[str, int]) -> pl.Expr:
    """Utf8 prev_state ("S", "D|K", "R+", "64") -> Int64 bits; numbers pass through; unknown -> null."""
    total = pl.lit(0, pl.Int64)
    for letter, bit in table.items():
        if bit == 0:
            continue
        total = total + pl.when(col.str.contains(letter, literal=True)).then(bit).otherwise(0)
    known = "".join(k for k in table if k not in "|")
    only_letters = col.str.contains(r"^[" + known.replace("+", r"\+") + r"|]+$")
    return (
        pl.when(col.str.contains(_INT_RE))
        .then(col.str.to_integer(strict=False))
        .when(only_letters)
        .then(total)
        .otherwise(None)
        .cast(pl.Int64)
    )


def _typed(df: pl.DataFrame, name: str) -> pl.Series:
    """Utf8 column -> Int64 when every non-null value is a decimal integer that fits (or hex in a known
    numeric field); zero-padded 8+ digit values (hex cpumasks such as ``cpus=00000006``) stay Utf8."""
    s = df[name].str.strip_chars()
    nonnull = s.drop_nulls()
    if nonnull.len() == 0:
        return s
    if nonnull.str.contains(r"^0[0-9]{7,}$").any():  # zero-padded 8+ digits: a hex cpumask ("00000010")
        return s
    as_int = s.str.to_integer(strict=False)
    if as_int.null_count() == s.null_count():  # every value an integer that fits Int64
        return as_int.cast(pl.Int64)
    if nonnull.str.contains(_INT_WITH_UNIT_RE).all():  # sched_stat_*: "runtime=7778999 [ns]"
        return s.str.strip_suffix(" [ns]").str.to_integer(strict=False).cast(pl.Int64)
    if name in KNOWN_INT_FIELDS and nonnull.str.contains(r"^(?:0x[0-9a-fA-F]+|[+-]?\d+)$").all():
        hex_part = s.str.strip_prefix("0x").str.to_integer(base=16, strict=False)
        dec = s.str.to_integer(strict=False)
        out = pl.select(pl.when(s.str.starts_with("0x")).then(hex_part).otherwise(dec)).to_series()
        if out.null_count() == s.null_count():
            return out.cast(pl.Int64).alias(name)
    return s


def _regex_escape(key: str) -> str:
    return key.replace(".", r"\.")


def _field_names(keys: list[str]) -> list[str]:
    return _dedupe(["buf"] + [f"field_{k}" if k in COMMON_COLUMNS else k for k in keys])


def _simple_pairs(df: pl.DataFrame, max_layouts: int = 8) -> tuple[list[pl.DataFrame], pl.DataFrame]:
    """Fast path: payloads that are exactly ``k1=v1 k2=v2 ...`` with no spaces inside values.

    The layout (key list) is read from the first remaining line; every line is split on single
    spaces (literal, no regex) and checked to hold exactly those ``key=`` tokens in that order;
    matched lines are done, the rest go round again. Returns the
    parsed parts and the lines left for the general path (values with spaces, text before the keys).
    """
    parts: list[pl.DataFrame] = []
    odd: list[pl.DataFrame] = []  # lines whose own layout is not simple: general path
    remaining = df
    for _ in range(max_layouts):
        if remaining.is_empty():
            break
        keys = _KEY_PY_RE.findall(remaining["payload"][0])
        if not keys:
            odd.append(remaining.head(1))
            remaining = remaining.slice(1)
            continue
        names = _field_names(keys)[1:]
        tokens = [f"_tok{i}" for i in range(len(keys))]
        split = remaining.with_columns(
            pl.col("payload").str.split_exact(" ", len(keys) - 1).struct.rename_fields(tokens).alias("_tokens"),
            (pl.col("payload").str.count_matches(" ", literal=True) == len(keys) - 1).alias("_ok"),
        ).unnest("_tokens")
        checks = [pl.col(t).str.starts_with(k + "=") for t, k in zip(tokens, keys)]
        if len(checks) <= 16:  # the usual event: a short chain is the cheapest
            ok = pl.col("_ok")
            for c in checks:
                ok = ok & c
        else:  # one flat AND (a chain of `&` nests one level per field: quadratic planning on wide payloads)
            ok = pl.all_horizontal(pl.col("_ok"), *checks)
        split = split.with_columns(ok.alias("_ok"))
        hit = split.filter("_ok")
        if hit.height:
            parts.append(
                hit.with_columns(
                    pl.col(t).str.strip_prefix(k + "=").alias(n) for t, k, n in zip(tokens, keys, names)
                ).drop("payload", "_ok", *tokens)
            )
        first_ok = bool(split["_ok"][0])
        remaining = split.filter(~pl.col("_ok")).drop("_ok", *tokens)
        if not first_ok:  # e.g. "comm=GPU completion ...": its layout has values with spaces
            odd.append(remaining.head(1))
            remaining = remaining.slice(1)
    if odd:
        remaining = pl.concat([*odd, remaining])
    return parts, remaining


def _general_pairs(df: pl.DataFrame) -> list[pl.DataFrame]:
    """General path: values may hold spaces; text before the first key goes to ``buf``."""
    keys = pl.col("payload").str.extract_all(_KEY_RE).list.eval(pl.element().str.strip_chars(" \t="))
    df = df.with_columns(keys.list.join(",").alias("_sig"))
    parts = []
    for (sig,), part in df.partition_by("_sig", as_dict=True, maintain_order=True).items():
        part = part.drop("_sig")
        if not sig:
            parts.append(part.rename({"payload": "buf"}).with_columns(pl.col("buf").str.strip_chars()))
            continue
        if sig.count(",") >= _REGEX_MAX_KEYS:  # a regex of that many lazy groups backtracks badly
            parts.append(_exploded_pairs(part))
            continue
        names = _field_names(sig.split(","))
        pattern = (
            "^(.*?)"
            + "".join(
                ("(?:^|\\s)" if i == 0 else "\\s+") + _regex_escape(k) + "=(.*?)" for i, k in enumerate(sig.split(","))
            )
            + "$"
        )
        pattern = pattern[: -len("(.*?)$")] + "(.*)$"  # last value runs to the end of the line
        groups = pl.col("payload").str.extract_groups(pattern)
        fields = part.select(
            groups.struct.field("1").str.strip_chars().alias(names[0]),
            *[groups.struct.field(str(i + 2)).alias(n) for i, n in enumerate(names[1:])],
        )
        if fields[names[0]].eq("").all():
            fields = fields.drop(names[0])
        parts.append(pl.concat([part.drop("payload"), fields], how="horizontal"))
    return parts


_MANY_LAYOUTS = 32
_REGEX_MAX_KEYS = 48


def _exploded_pairs(df: pl.DataFrame) -> pl.DataFrame:
    """General path for payloads of many different ``key=`` layouts (one regex per layout would cost a pass
    each): every payload is cut at its keys, the pieces exploded to (row, key, value) and pivoted back into
    columns. Linear in the input whatever the number of layouts. Same rules as `_general_pairs`."""
    marked = pl.col("payload").str.replace_all(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_.]*)=", "\x1f${1}\x1e")
    rows = df.with_row_index("_row")
    pieces = (
        rows.select("_row", marked.str.split("\x1f").alias("_p"))
        .explode("_p")
        .with_columns(pl.int_range(pl.len()).over("_row").alias("_i"))
    )
    buf = pieces.filter(pl.col("_i") == 0).select("_row", pl.col("_p").str.strip_chars().alias("buf"))
    kv = (
        pieces.filter(pl.col("_i") > 0)
        .select("_row", "_i", pl.col("_p").str.split_exact("\x1e", 1).struct.rename_fields(["_k", "_v"]).alias("s"))
        .unnest("s")
    )
    kv = kv.with_columns(
        pl.when(pl.col("_k").is_in(list(COMMON_COLUMNS)))
        .then(pl.lit("field_") + pl.col("_k"))
        .otherwise(pl.col("_k"))
        .alias("_k"),
        pl.col("_v").str.strip_chars_end(" \t"),
    )
    nth = pl.int_range(pl.len()).over("_row", "_k")  # a key repeated in one payload: k, k_1, k_2 (as _dedupe)
    kv = kv.with_columns(
        pl.when(nth == 0).then(pl.col("_k")).otherwise(pl.col("_k") + "_" + nth.cast(pl.Utf8)).alias("_k")
    )
    order = (
        kv.group_by("_k")
        .agg(pl.col("_row").min().alias("_first"), pl.col("_i").min().alias("_pos"))
        .sort("_first", "_pos")["_k"]
        .to_list()
    )
    wide = (
        kv.pivot(on="_k", index="_row", values="_v", aggregate_function="first")
        if kv.height
        else pl.DataFrame({"_row": pl.Series([], dtype=pl.UInt32)})
    )
    out = rows.drop("payload").join(buf, on="_row", how="left").join(wide, on="_row", how="left")
    if out["buf"].eq("").all():
        out = out.drop("buf")
    return out.select(
        [c for c in out.columns if c not in order and c != "_row"] + [c for c in order if c in out.columns]
    )


TOO_MANY_NAMES = "_too_many_field_names"


def parse_key_values(df: pl.DataFrame, max_field_names: int = 1024) -> pl.DataFrame:
    """Generic ``key=value key2=value two`` payloads.

    A value runs up to the next `` key=`` (so values may hold spaces: ``comm=GPU completion``,
    ``load={24 19}``, ``cpumask=ARRAY[0f, 00]``). Text before the first key (e.g. the clock name of
    ``clock_set_rate``, or ``[FAILED TO PARSE]``) goes to ``buf``; payloads with no key at all go
    to ``buf`` whole. Columns whose values are all integers become Int64. When the payloads that do not
    share one layout name more than `max_field_names` different keys (not an event format: damage, or
    free text full of ``=``), they keep their text whole in ``buf`` and column TOO_MANY_NAMES is True on
    them (the caller counts them).
    """
    parts, remaining = _simple_pairs(df)
    if not remaining.is_empty():
        keys = remaining.select(pl.col("payload").str.extract_all(_KEY_RE).alias("k"))["k"]
        layouts = keys.list.join(",").n_unique()
        names = keys.explode().n_unique() if layouts > _MANY_LAYOUTS else 0
        if names > max_field_names:  # a table of that many columns is not an event's format: keep the text
            parts.append(remaining.rename({"payload": "buf"}).with_columns(pl.lit(True).alias(TOO_MANY_NAMES)))
        else:
            parts += [_exploded_pairs(remaining)] if layouts > _MANY_LAYOUTS else _general_pairs(remaining)
    out = pl.concat(parts, how="diagonal") if len(parts) > 1 else parts[0]
    if len(parts) > 1 and "_line" in out.columns:
        out = out.sort("_line")
    untyped = COMMON_COLUMNS | {"_line", "buf", TOO_MANY_NAMES}
    return out.with_columns([_typed(out, c) for c in out.columns if c not in untyped and out.schema[c] == pl.Utf8])


def _dedupe(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for n in names:
        if n in seen:
            seen[n] += 1
            out.append(f"{n}_{seen[n]}")
        else:
            seen[n] = 0
            out.append(n)
    return out


def _split_forms(df: pl.DataFrame, pattern: str, kernel_prefix: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(lines in the trace-cmd plugin form ``pattern``, the rest). Lines starting with the kernel
    form's first key (``kernel_prefix``) skip the regex."""
    payload = pl.col("payload")
    df = df.with_columns((~payload.str.starts_with(kernel_prefix)).alias("_maybe"))
    if not df["_maybe"].any():
        return df.clear().drop("_maybe"), df.drop("_maybe")
    df = df.with_columns((pl.col("_maybe") & payload.str.contains(pattern)).alias("_maybe"))
    return df.filter("_maybe").drop("_maybe"), df.filter(~pl.col("_maybe")).drop("_maybe")


def _byte_slice(col: pl.Expr, start: pl.Expr | int, length: pl.Expr | None = None) -> pl.Expr:
    """Slice text by byte offsets (what `str.find` returns), valid when the cut points are ASCII characters:
    `str.slice` counts characters, so a non-ASCII comm would shift the cut."""
    return col.cast(pl.Binary).bin.slice(start, length).cast(pl.Utf8)


def _task_prio_columns(df: pl.DataFrame, src: str, prefix: str, ascii_only: bool = False) -> pl.DataFrame:
    """trace-cmd plugin ``comm:pid [prio][ STATE]`` in column ``src`` -> ``{prefix}comm``,
    ``{prefix}pid``, ``{prefix}prio`` (text, typed by the caller's validation) and ``_state`` (text after
    ``]``). comm may hold spaces, colons and non-ASCII characters: the pid is the first ``:digits [``.
    Intermediate results are materialised column by column (a polars expression reused inside another is
    recomputed every time). ascii_only: the text has no multi-byte character (character slices are then
    byte slices, and cheaper)."""

    def cut(e: pl.Expr, start, length=None) -> pl.Expr:
        return e.str.slice(start, length) if ascii_only else _byte_slice(e, start, length)

    col = pl.col(src)
    df = df.with_columns(col.str.find(r":-?[0-9]+ \[").alias("_b"))
    df = df.with_columns(cut(col, 0, pl.col("_b")).alias(f"{prefix}comm"), cut(col, pl.col("_b") + 1).alias("_r"))
    r = pl.col("_r")
    df = df.with_columns(r.str.find(" [", literal=True).alias("_c"), r.str.find("]", literal=True).alias("_d"))
    c, d = pl.col("_c"), pl.col("_d")
    return df.with_columns(
        cut(r, 0, c).alias(f"{prefix}pid"),
        cut(r, c + 2, d - c - 2).alias(f"{prefix}prio"),
        cut(r, d + 1).str.strip_chars().alias("_state"),
    ).drop("_b", "_r", "_c", "_d")


def parse_sched_switch(df: pl.DataFrame, ascii_only: bool = False) -> pl.DataFrame:
    """Kernel form ``prev_comm=.. prev_state=S ==> next_comm=..``, trace-cmd plugin form
    ``comm:pid [prio] S ==> comm:pid [prio]`` or numeric ``-R`` form -> kernel field names."""
    plugin, kernel = _split_forms(df, _TRACECMD_SWITCH_RE, "prev_comm=")
    parts = []
    if plugin.height:
        p = pl.col("payload")
        plugin = plugin.with_columns(p.str.find(" ==> ", literal=True).alias("_a"))
        # str.find gives a byte offset: character slicing is right only for ASCII text
        plugin = plugin.with_columns(
            (p.str.slice(0, pl.col("_a")) if ascii_only else _byte_slice(p, 0, pl.col("_a"))).alias("_prev"),
            (p.str.slice(pl.col("_a") + 5) if ascii_only else _byte_slice(p, pl.col("_a") + 5)).alias("_next"),
        )
        plugin = _task_prio_columns(plugin, "_prev", "prev_", ascii_only)
        plugin = plugin.with_columns(
            state_letters_to_bits(pl.col("_state"), TRACECMD_PLUGIN_STATE_BITS).alias("prev_state")
        )
        plugin = _task_prio_columns(plugin.drop("_state"), "_next", "next_", ascii_only)
        parts.append(plugin.drop("_a", "_prev", "_next", "_state", "payload"))
    if kernel.height:
        kernel = kernel.with_columns(pl.col("payload").str.replace(" ==> ", " ", literal=True))
        kv = parse_key_values(kernel)
        if "prev_state" in kv.columns and kv.schema["prev_state"] == pl.Utf8:
            kv = kv.with_columns(state_letters_to_bits(pl.col("prev_state"), KERNEL_STATE_BITS))
        parts.append(kv)
    return pl.concat(parts, how="diagonal_relaxed") if len(parts) > 1 else parts[0]


def parse_sched_wakeup(df: pl.DataFrame, ascii_only: bool = False) -> pl.DataFrame:
    """sched_wakeup / sched_waking / sched_wakeup_new: kernel ``comm=.. pid=..`` form or the
    trace-cmd plugin form ``comm:pid [prio] [success=1] CPU:002``."""
    plugin, kernel = _split_forms(df, _TRACECMD_WAKE_RE, "comm=")
    parts = []
    if plugin.height:
        plugin = _task_prio_columns(plugin, "payload", "", ascii_only)
        state = pl.col("_state")  # "CPU:002" or "success=1 CPU:002"
        plugin = plugin.with_columns(state.str.find("CPU:", literal=True).alias("_t"))
        cols = [
            (state.str.slice(pl.col("_t") + 4) if ascii_only else _byte_slice(state, pl.col("_t") + 4)).alias(
                "target_cpu"
            )
        ]
        if plugin["_state"].str.starts_with("success=").any():
            cols.append(state.str.extract(r"^success=([0-9]+)", 1).cast(pl.Int64, strict=False).alias("success"))
        parts.append(plugin.with_columns(cols).drop("_t", "_state", "payload"))
    if kernel.height:
        parts.append(parse_key_values(kernel))
    return pl.concat(parts, how="diagonal_relaxed") if len(parts) > 1 else parts[0]


def parse_marker(df: pl.DataFrame, event: str) -> pl.DataFrame:
    """print / bprint / bputs / tracing_mark_write payloads -> ``ip`` (where printed) and ``buf``.

    tracefs prints a trace_marker write as ``tracing_mark_write: TEXT`` (the symbol of the print
    event's ip); trace-cmd report prints ``print: IP: TEXT`` and, with -R, ``print: ip=IP buf=TEXT``
    (bputs: ``str=``; bprint: ``fmt=.. buf=..``). TEXT is kept verbatim in ``buf``.
    """
    if event not in MARKER_LIKE:
        return df.rename({"payload": "buf"})
    raw_re = r"^ip=(\S+)(?: fmt=(\S+))? (?:buf|str)=(.*)$"
    plugin_re = r"^(\S+(?: \[[A-Za-z0-9_-]+\])?(?: <[0-9a-f]+>)?): (.*)$"  # ip may name its module, its address
    payload = pl.col("payload")
    raw = payload.str.extract_groups(raw_re)
    plug = payload.str.extract_groups(plugin_re)
    is_raw = payload.str.contains(raw_re)
    is_plug = payload.str.contains(plugin_re)
    return df.with_columns(
        pl.when(is_raw)
        .then(raw.struct.field("1"))
        .when(is_plug)
        .then(plug.struct.field("1"))
        .otherwise(None)
        .alias("ip"),
        pl.when(is_raw)
        .then(raw.struct.field("3"))
        .when(is_plug)
        .then(plug.struct.field("2"))
        .otherwise(payload)
        .alias("buf"),
    ).drop("payload")


def parse_raw_data(df: pl.DataFrame) -> pl.DataFrame:
    """trace_marker_raw writes (ftrace ``raw_data``) -> ``id`` (UInt32) and ``buf`` (Binary), as the trace.dat
    reader gives them: the kernel prints ``# 3e8 buf: 00 01 02 00``, trace-cmd report ``# 3e8 00 01 02 00``
    (the id in hex, then the record's bytes: those written plus the alignment padding). Payloads in
    another form (trace-cmd report -R's ``id=03e8 buf=...``, whose bytes it prints as text) keep their
    key=value parse."""
    printed = r"^#[ \t]*([0-9a-fA-F]+)(?:[ \t]+buf:)?((?:[ \t]+[0-9a-fA-F]{2})*)[ \t]*$"
    if not df["payload"].str.contains(printed).all():
        return parse_key_values(df)
    g = pl.col("payload").str.extract_groups(printed)
    return df.with_columns(
        g.struct.field("1").str.to_integer(base=16).cast(pl.UInt32).alias("id"),
        g.struct.field("2").str.replace_all(r"[ \t]", "").str.decode("hex").alias("buf"),
    ).drop("payload")


def parse_function(df: pl.DataFrame) -> pl.DataFrame:
    """function tracer lines ``func <-parent`` -> ip, parent_ip (symbols as printed)."""
    g = pl.col("payload").str.extract_groups(r"^(\S+)\s+<-(\S+)")
    return df.with_columns(g.struct.field("1").alias("ip"), g.struct.field("2").alias("parent_ip")).drop("payload")


def parse_event_payload(df: pl.DataFrame, event: str, ascii_only: bool = False) -> pl.DataFrame:
    """Dispatch one event's lines to its payload parser (ascii_only: no multi-byte character in them)."""
    if event == "sched_switch":
        return parse_sched_switch(df, ascii_only)
    if event in ("sched_wakeup", "sched_waking", "sched_wakeup_new"):
        return parse_sched_wakeup(df, ascii_only)
    if event in MARKER_LIKE or event == "tracing_mark_write":
        return parse_marker(df, event)
    if event == "function":
        return parse_function(df)
    if event == "raw_data":
        return parse_raw_data(df)
    if event in ("kernel_stack", "user_stack"):
        return df.rename({"payload": "buf"})
    return parse_key_values(df)
