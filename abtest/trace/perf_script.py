"""Reader for ``perf script`` text of tracepoints: bytes -> (raw tables keyed by event name, metadata).

``perf record -e sched:sched_switch -e power:cpu_idle ...`` (and ``perf sched record``) store tracepoint
samples; ``perf script`` (``perf sched script``) prints one sample per line, then its call chain when the
recording had ``-g``, then a blank line::

    swapper     0 [000]  3857.362223:       power:cpu_idle: state=8 cpu_id=0
    \tffffffffa95c44ac cpuidle_enter_state+0x17c (/usr/lib/debug/boot/vmlinux-4.19.9)
    \tffffffffa95c46b7 cpuidle_enter+0x17 (/usr/lib/debug/boot/vmlinux-4.19.9)

    lto cgu.3.rcgu. 13347 [001]   231.525793:       sched:sched_waking: comm=memfd:sealed-91 pid=8927 ...

Fields (perf's defaults for tracepoints: comm, tid, cpu, time, event, trace): COMM (right-aligned, may hold
spaces), TID or ``PID/TID`` (``-F +pid``), ``[CPU]``, ``SEC.FRAC:`` (6 digits; 9 with ``--ns``), an optional
period, ``SYSTEM:EVENT:`` and the event's text exactly as the kernel's print format writes it (the text
tracefs prints). Each head is rewritten into the ftrace form (``COMM-TID [(PID)] [CPU] SEC.FRAC: EVENT:
PAYLOAD``) and each call-chain line into a `` => symbol`` stack line, keeping its line number, so that
abtest.trace.text_lines reads them: the tables, columns, canonical mapping (sched_switch, sched_wakeup,
cpu_idle, cpu_frequency, ...) and import accounting are those of every other text reader. Table names drop
the ``SYSTEM:`` prefix (``sched:sched_switch`` -> ``sched_switch``); a call chain lands in column ``stack``
(one symbol+offset per line, innermost first; the DSO and address are dropped).

Not read (counted in ``import_errors`` like any other unparseable line): lines of samples that are not
tracepoints (``cycles:`` ...), ``perf script`` output without the cpu field, and ``--show-*-events`` lines.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from abtest.trace import import_log
from abtest.trace.errors import TraceFormatError
from abtest.trace.ftrace_text import refuse_if_not_a_trace
from abtest.trace.text_lines import (
    ends_with_newline,
    is_ascii,
    parse_lines,
    split_lines,
)

# one sample head: COMM  PID[/TID]  [CPU]  SEC.FRAC:  [PERIOD]  SYSTEM:EVENT:  PAYLOAD
HEAD_RE = (
    r"^\s*(.+?)\s+(-?[0-9]+)(?:/([0-9]+))?\s+\[([0-9]+)\]\s+([0-9]+\.[0-9]{1,9}):\s+(?:[0-9]+\s+)?"
    r"([A-Za-z0-9_]+):([A-Za-z0-9_]+):(?:\s(.*))?$"
)
# any sample head (a tracepoint or not): COMM PID[/TID] [CPU] SEC.FRAC: [PERIOD] EVENT:
SAMPLE_RE = r"^\s*.+?\s+-?[0-9]+(?:/[0-9]+)?\s+\[[0-9]+\]\s+[0-9]+\.[0-9]{1,9}:\s+(?:[0-9]+\s+)?\S+:(?:\s|$)"
# a call-chain line: ADDRESS SYMBOL+OFFSET (DSO)
CHAIN_RE = r"^\s+([0-9a-f]+)\s+(.*?)(?:\s+\(([^()]*)\))?\s*$"
EXPECTED = "perf script text of tracepoints: 'COMM TID [CPU] SECONDS.FRACTION: SYSTEM:EVENT: FIELDS'"


def read(path, data) -> tuple[dict, dict]:
    """Decode ``perf script`` text (``data``: bytes-like). Raises TraceFormatError when no line is a
    tracepoint sample with a CPU column."""
    path = Path(path)
    raw = bytes(data)
    meta: dict = {"format": "perf-script", "warnings": [], "clock": None}
    quirks: list = []
    lines = split_lines(raw, 1, quirks)
    if quirks:
        meta["text_quirks"] = quirks
    rewritten, other, samples = to_ftrace_lines(lines)
    if other.height:
        import_log.add_skipped_lines(meta, "perf_sample_not_tracepoint", other)
        meta["warnings"].append(
            f"{other.height} lines of perf samples that are not tracepoints (and their call "
            f"chains) set aside: only tracepoint samples become events"
        )
    if samples == 0:
        raise TraceFormatError(
            path,
            "no perf script tracepoint sample with a [CPU] column (record system-wide "
            "with -a, or print with perf script -F +cpu)",
            line=1,
            expected=EXPECTED,
        )
    tables = parse_lines(
        path, rewritten, meta, complete=ends_with_newline(raw), ascii_only=is_ascii(raw), plain_printk=False
    )
    refuse_if_not_a_trace(path, tables, meta)
    meta["perf_script"] = {
        "samples": samples,
        "call_chains": int(sum(df["stack"].is_not_null().sum() for df in tables.values() if "stack" in df.columns)),
    }
    return tables, meta


def to_ftrace_lines(lines: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """(_line, text) of perf script text -> (the lines in the ftrace text form: heads and call-chain lines
    rewritten, other lines as they are; the lines of samples that are not tracepoints, with their call chains;
    the number of tracepoint sample heads)."""
    text = pl.col("text")
    head = text.str.extract_groups(HEAD_RE)
    chain = text.str.extract_groups(CHAIN_RE)
    df = lines.with_columns(head.alias("_h"), chain.alias("_c"))
    h, c = pl.col("_h").struct, pl.col("_c").struct
    is_head = h.field("7").is_not_null()
    # perf indents call-chain lines with a tab (or 8+ spaces in older versions)
    is_chain = ~is_head & c.field("1").is_not_null() & text.str.contains(r"^(?:\t[ \t]*|[ ]{8,})[0-9a-f]+\s")
    # a sample that is not a tracepoint (cycles, cpu-clock: `... 3857.362619:  1  cpu-cycles:`) and the call
    # chain after it are not events of any table: set aside (counted by the caller)
    other_head = ~is_head & text.str.contains(SAMPLE_RE)
    owner = (
        pl.when(is_head)
        .then(pl.lit(False))
        .when(other_head)
        .then(pl.lit(True))
        .when(~is_chain)
        .then(pl.lit(False))
        .forward_fill()
        .fill_null(False)
    )
    df = df.with_columns(is_head.alias("_is_head"), is_chain.alias("_is_chain"), owner.alias("_skip"))
    # the ftrace pid column is the thread (common_pid); perf's PID/TID puts the process in the TGID column
    tid = pl.coalesce(h.field("3"), h.field("2"))
    tgid = pl.when(h.field("3").is_not_null()).then(pl.lit(" (") + h.field("2") + pl.lit(")")).otherwise(pl.lit(""))
    ftrace_head = pl.concat_str(
        [
            h.field("1"),
            pl.lit("-"),
            tid,
            tgid,
            pl.lit(" ["),
            h.field("4"),
            pl.lit("] "),
            h.field("5"),
            pl.lit(": "),
            h.field("7"),
            pl.lit(": "),
            h.field("8").fill_null(""),
        ]
    )
    kept = df.filter(~pl.col("_skip"))
    out = kept.select(
        "_line",
        pl.when(pl.col("_is_head"))
        .then(ftrace_head)
        .when(pl.col("_is_chain"))
        .then(pl.lit(" => ") + c.field("2"))
        .otherwise(text)
        .alias("text"),
    )
    return out, df.filter(pl.col("_skip")).select("_line", "text"), int(kept["_is_head"].sum())
