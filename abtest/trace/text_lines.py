"""ftrace text lines -> raw event tables, vectorised (one polars pass per line kind, one per event).

Accepted line forms (leading spaces allowed everywhere):

event line     ``COMM-PID [(TGID)] [CPU] [FLAGS] SEC.FRAC: EVENT: PAYLOAD`` (or ``CPUFLAGS`` run
               together, as ``trace-cmd report -l`` prints them: ``bash-12  1d..2.  12.345: ...``)
               COMM may hold spaces, dashes, digits and colons: PID is the ``-digits`` directly
               followed by the ``(TGID)`` / ``[CPU]`` column. TGID is ``(  123)`` or ``(-----)`` (unknown -> null).
               FLAGS is the irqs-off/need-resched/hardirq/preempt column (``d..2``, ``dn.4``, ``.N.1``,
               ``d..2.``), present in tracefs output and ``trace-cmd report -l``. SEC.FRAC has 1..9
               fraction digits and becomes exact Int64 ns (integer arithmetic, never float).
               The kernel's latency format (``options/latency-format``): ``comm-pid  1d..2. 13382us+:``,
               the CPU run into the kernel's flags letters, the time in microseconds since the ring
               buffer's start (ts = that x 1000; meta ``time_origin`` "buffer start") then a delay mark.
               EVENT ``<stack trace>`` / ``<user stack trace>`` (no colon) -> kernel_stack / user_stack.
function line  ``... SEC.FRAC: func <-parent`` (function tracer) -> event ``function`` (ip, parent_ip).
syscall line   ``... SEC.FRAC: sys_read(fd: 7, count: 0x64)`` / ``sys_read -> 0x64`` (the kernel's own
               text of syscall events) -> events ``sys_enter_read`` (fd, count, ...) / ``sys_exit_read`` (ret).
raw_data line  ``... SEC.FRAC: # 3e8 buf: 00 01 02 00`` (the kernel's text of a trace_marker_raw write, no
               event name) -> event ``raw_data`` (id, buf: bytes), as trace-cmd's ``raw_data: # 3e8 00 01 ..``.
stack line     `` => symbol`` continuation of the previous event -> joined into its ``stack`` column
               (``buf`` for kernel_stack / user_stack events).
lost line      ``CPU:N [LOST M EVENTS]`` (tracefs), ``CPU:N [M EVENTS DROPPED]`` /
               ``CPU:N [EVENTS DROPPED]`` (trace-cmd report): counted per CPU in the metadata.
text line      an unrecognised line right after a ``console``, ``print``, ``bprint``, ``bputs`` or
               ``tracing_mark_write`` event (or after such lines), that does not look like an event line,
               is the rest of the message's text (a newline inside it), or a damaged line: joined to its
               payload and counted in ``import_errors`` (``continuation_line``) with a warning.
ps listing     ``USER PID PPID VSIZE ...`` / ``USER PID TID CMD`` and their rows, ``PROCESS DUMP`` titles
               (atrace followed by ``ps -t``; systrace): read into table ``process``
               (abtest.trace.text_process), which fills ``<...>`` task names and missing tgids.
function_graph the function_graph tracer's own lines (`` 0)   0.123 us    |  func();``) -> tables
               funcgraph_entry / funcgraph_exit (abtest.trace.funcgraph_text).
preamble       ``capturing trace... done``, ``TRACE:``, adb daemon messages, `trace-cmd record`'s buffer
               statistics, NUL padding: recognised and skipped (``non_event_content``).
header         ``# ...`` comments (``# tracer: X``; ``# entries-in-buffer/entries-written: X/Y   #P:N``
               gives the CPU count and, when Y > X, the events overwritten in the ring buffer),
               trace-cmd report headers ``version = N``, ``cpus=N``, ``CPU N is empty``, blank lines,
               ``--verbose``'s plugin / print-handler lines, ``-w``'s wakeup-latency summary (its
               `` Latency: N usecs`` after sched_switch lines is dropped, with a warning).
               ``--ts-diff``'s ``(+23)`` before the event name is skipped; ``--boundary`` / ``--debug``
               page-start lines, ``--debug``'s padding / time-extend / time-stamp lines and its
               ``[delta:offset:size]`` after each event are dropped (the last with a warning).

Anything else is counted in ``meta["import_errors"]`` by kind (abtest.trace.import_log) with the first
examples and their 1-based line numbers, and the good events are kept: ``unrecognised_line``,
``malformed_event_line`` (looks like an event line, e.g. a damaged head, but does not parse),
``binary_line`` (control bytes), ``line_too_long``, ``truncated_line`` (the last line of a text that does
not end with a newline, cut short), ``value_out_of_range`` (a pid, CPU or time that does not fit),
``bad_field_value`` (a field of a canonical event that must be an integer and is not),
``too_many_fields`` (the event is kept, its payload whole in ``buf``), ``orphan_stack_line``,
``ps_listing_row``. The caller (abtest.trace.ftrace_text) refuses a text with no event line at all, or
with more unparseable lines than events: it is not a trace.
Old (2.6/3.x) kernels printed trace_marker writes with event name ``0`` (the print event's ip was 0):
those become ``tracing_mark_write`` (see docs/text-formats.md).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

from abtest.trace import funcgraph_text, import_log, text_process
from abtest.trace.errors import TraceFormatError
from abtest.trace.limits import Limits, current
from abtest.trace.text_fields import (
    CANONICAL_INT_FIELDS,
    INT32_FIELDS,
    REQUIRED_FIELDS,
    TOO_MANY_NAMES,
    parse_event_payload,
)
from abtest.trace.text_flags import KERNEL_FLAG_BITS, LATENCY_FORM_FLAG_BITS, flags_columns

# The fixed middle of an event line ("-PID [(TGID)] [CPU] [FLAGS] SEC.FRAC:"), searched unanchored:
# its first match starts at the PID's dash, so COMM is everything before it (comm may hold spaces,
# dashes and digits). ASCII classes only: Unicode digit/space/word classes make polars' regex
# captures ~3x slower.
_D, _S, _NS, _W = "[0-9]", "[ \t]", "[^ \t]", "[A-Za-z0-9_]"
# CPU column: "[001]" then an optional flags column ("d..2."), or trace-cmd report -l's latency form
# where the CPU digits run straight into the flags ("1...1.", "0d..1."). trace-cmd report -l of a
# raw-clock trace runs the time (no fraction) straight into 5 flags letters ("1d..2.70077748285446:"):
# that form has regexes of its own (GLUED_*), used only for a file whose lines need them, because the
# extra alternative halves the speed of the capture regex on every other file.
_LAT_FLAGS = rf"[.a-zA-Z]{_NS}*{_S}+"
_GLUED_FLAGS = rf"[.a-zA-Z]{_NS}*{_S}+|[.a-zA-Z]{_NS}{{4}}"
# Time: SEC.FRAC, a bare count (raw clocks), or the kernel's latency format (options/latency-format):
# microseconds since the buffer's start, then a delay mark (' ', '+', '!', '#', '*', '@', '$').
_LAT_MARK = "[ +!#*@$]"
# `trace-cmd report --ts-diff`: the time since the previous event, "(+23)", before the event name
_TS_DIFF = rf"\(\+{_D}+(?:\.{_D}+)?\){_S}+"


def _event_head_re(lat_flags: str) -> str:
    cpu = rf"(?:\[{_D}+\]{_S}*(?:[.a-zA-Z]{_NS}*{_S}+)?|{_D}+(?:{lat_flags}))"
    return rf"-{_D}+{_S}+(?:\({_S}*(?:{_D}+|-+)\){_S}+)?{cpu}{_D}+(?:\.{_D}{{1,9}}|us{_LAT_MARK})?:(?:{_S}|$)"


def _event_fields_re(lat_flags: str) -> str:
    """The head again, anchored after the dash, with groups; group 1 = the whole head up to the payload."""
    cpu = rf"(?:\[({_D}+)\]{_S}*(?:([.a-zA-Z]{_NS}*){_S}+)?|({_D}+)({lat_flags}))"
    return (
        rf"^(({_D}+){_S}+(?:\(({_S}*{_D}+|-+)\){_S}+)?{cpu}"
        rf"({_D}+)(?:\.({_D}{{1,9}})|(us){_LAT_MARK})?:(?:{_S}+|$)(?:{_TS_DIFF})?"
        rf"(?:({_W}[A-Za-z0-9_.]*):(?:{_S}+|$)|(<[a-z ]+>){_S}*$)?)"
    )


EVENT_HEAD_RE, EVENT_FIELDS_RE = _event_head_re(_LAT_FLAGS), _event_fields_re(_LAT_FLAGS)
GLUED_HEAD_RE, GLUED_FIELDS_RE = _event_head_re(_GLUED_FLAGS), _event_fields_re(_GLUED_FLAGS)
(_G_HEAD, _G_PID, _G_TGID, _G_CPU, _G_FLAGS, _G_CPU_LAT, _G_FLAGS_LAT, _G_SEC, _G_FRAC, _G_US, _G_EVENT, _G_STACK) = (
    str(i) for i in range(1, 13)
)
FUNCTION_PAYLOAD_RE = r"^[^ \t]+[ \t]+<-[^ \t]+"
# The kernel prints syscall events in forms of its own, with no ``EVENT:`` name
# (kernel/trace/trace_syscalls.c): entry ``sys_read(fd: 7, buf: 0x7ffc1000, count: 0x64)`` is event
# sys_enter_read, exit ``sys_read -> 0x64`` is event sys_exit_read (trace-cmd report prints the
# `sys_enter_read:` / `sys_exit_read:` names instead, which need nothing special).
SYSCALL_ENTER_RE = r"^sys_([A-Za-z0-9_]+)\((.*)\)[ \t]*$"
SYSCALL_EXIT_RE = r"^sys_([A-Za-z0-9_]+) -> ([^ \t]+)[ \t]*$"
# The kernel prints a trace_marker_raw write (ftrace raw_data) as "# 3e8 buf: 00 01 02 00", no event name
RAW_DATA_RE = r"^# [0-9a-fA-F]+ buf:(?: [0-9a-fA-F]{2})*[ \t]*$"
# trace_printk / trace_puts / trace_marker lines (ftrace bprint / bputs / print): tracefs prints no event name,
# only the caller's symbol (`%ps`, or `%pS` with options/sym-offset), ": " and the message. The symbol shapes a
# tracepoint name cannot have mark them: "+0xOFF/0xSIZE" (sym-offset), " [module]" (a module's symbol), " <ADDR>"
# (options/sym-addr), a bare "0xADDR" (no symbol found), a leading underscore or a compiler suffix (".isra.0").
PRINTK_DECORATED_RE = (
    r"^([A-Za-z_.$][A-Za-z0-9_.$]*|0x[0-9a-f]+)((?:\+0x[0-9a-f]+/0x[0-9a-f]+)?(?: \[[A-Za-z0-9_-]+\])?"
    r"(?: <[0-9a-f]+>)?): (.*)$"
)
# A plain caller name (`on_tick: [+] tick:0`, the kernel's default `%ps` form) has a tracepoint name's shape: it is
# read as trace_printk's caller when the name is no known trace event (tracepoint_names(): the names kernel sources
# 5.10, 6.1 and 7.3 declare, drivers and debug options included, the available_events of running kernels and the
# Android vendor events perfetto knows) and not every one of its lines has a `key=value` field, as every tracepoint's
# text but a few known ones has (f2fs prints `dev = (7,0)`: spaces allowed), or a kprobe / uprobe event's
# `(func+0x0/0x30)` (the probe's name is the user's). Not in `trace-cmd report` text (a `cpus=N` / `version = N`
# header: it names trace_printk `bprint`) nor in `perf script` text (every sample names its SYSTEM:EVENT), nor with
# ABTEST_PLAIN_PRINTK=0 in the environment. The names are decided for the whole text (a long text read in blocks is
# read again when a block decided otherwise: abtest.trace.ftrace_text).
PLAIN_PRINTK_ENV = "ABTEST_PLAIN_PRINTK"
KEY_VALUE_RE = r"[A-Za-z_][A-Za-z0-9_.\[\]]*[ \t]?=|^\("
_REPORT_HEAD = r"version = \d+|cpus=\d+"  # the first lines of `trace-cmd report` text
REPORT_HEADER_RE = rf"^(?:{_REPORT_HEAD})\s*$"
PRINTK_SYMBOL_NAME_RE = r"^(?:_|0x[0-9a-f]+$)|\.(?:isra|constprop|part|cold|llvm|lto_priv|clone)(?:\.|$)"
PRINTK_MARKER_SYMBOL = "tracing_mark_write"  # the caller of a trace_marker write: event tracing_mark_write
HEADER_RE = (
    rf"^(?:{_REPORT_HEAD}|CPU \d+ is empty|CPU\d+ data recorded at offset=0x[0-9a-fA-F]+)\s*$"
    # trace-cmd report --verbose's plugin list; -w's wakeup-latency summary at the end
    r"|^(?:registering plugin: |overriding event \(\d+\) |removing override handler for event \(\d+\) )"
    r"|^(?:(?:RT )?(?:Average wakeup latency|Maximum Latency|Minimum Latency): |RT task timings:)"
    # ring-buffer page starts (--boundary; with --debug: [page ts:offset], then the page's
    # padding / time-extend / absolute-time records on lines of their own)
    r"|^CPU:\d+ \[SUBBUFFER START\](?: \[\d+:0x[0-9a-f]+\])?\s*$"
    r"|^ (?:(?:PADDING|TIME EXTEND): delta|TIME STAMP: timestamp):-?\d+ length:\d+\s*$"
)
WAKEUP_SUMMARY_RE = r"^(?:RT )?Average wakeup latency: "
# what trace-cmd report -w appends to the sched_switch that ends a measured wakeup
WAKEUP_LATENCY_SUFFIX_RE = r"[ \t]+Latency: [0-9]+\.[0-9]+ usecs$"
# trace-cmd report --debug: page starts between the events, [delta:offset:size] after each event
DEBUG_PAGE_RE = r"^CPU:\d+ \[SUBBUFFER START\] \["
DEBUG_SUFFIX_RE = r"[ \t]\[[0-9]+:0x[0-9a-f]+:[0-9]+\]$"
LOST_RE = r"^\s*CPU:(\d+) \[(?:LOST (\d+) EVENTS|(\d+) EVENTS DROPPED|EVENTS DROPPED)\]\s*$"
STACK_RE = r"^\s*=> "
ENTRIES_RE = r"^#\s*entries-in-buffer/entries-written:\s*(\d+)/(\d+)\s+#P:(\d+)"
# the same counts in the kernel's latency-format header: "# latency: 0 us, #3037/3037, CPU#0 | (M:... #P:2)"
LATENCY_HEADER_RE = r"^#\s*latency: \d+ us, #(\d+)/(\d+), CPU#\d+ \|.*#P:(\d+)\)"
BINARY_RE = "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]"
STACK_EVENT_NAMES = {"<stack trace>": "kernel_stack", "<user stack trace>": "user_stack"}
OLD_MARKER_EVENT = "0"
# Events whose text may hold newlines that carry the event on over the next lines: kernel messages
# (printk's `console` event) and marker writes (print / bprint / bputs / tracing_mark_write, and "0" of
# old kernels). Only lines that do not look like an event line (LOOKS_LIKE_EVENT_RE) are joined, and
# every joined line is counted (import_errors "continuation_line": it may as well be a damaged line).
TEXT_PAYLOAD_EVENTS = ["console", "print", "bprint", "bputs", "tracing_mark_write", OLD_MARKER_EVENT]
# Text around the trace that tools print: atrace's preamble, adb's daemon messages, `trace-cmd record`'s
# per-CPU buffer statistics and its notes.
PREAMBLE_RE = (
    r"^\s*(?:capturing trace\.\.\.(?: done)?|TRACE:|\* daemon (?:not running; starting now at \S+|"
    r"started successfully) \*|Kernel buffer statistics:|Note: \"entries\" are the entries left in the "
    r"kernel ring buffer and are not|recorded in the trace data\. They should all be zero\.)\s*$"
)
TRACECMD_STATS_RE = (
    r"^\s*(?:CPU: \d+|entries: \d+|overrun: \d+|commit overrun: \d+|bytes: \d+|"
    r"oldest event ts: +[0-9.]+|now ts: +[0-9.]+|dropped events: \d+|read events: \d+)\s*$"
)
# what a damaged event line still shows: a [CPU] column, a "SEC.FRAC:" time, or a "comm-pid" start followed
# by a TGID or CPU column
LOOKS_LIKE_EVENT_RE = r"(?:\[[0-9]{1,5}\]|\s[0-9]+\.[0-9]{3,9}:|^\s*\S+-[0-9]+\s+[\[(])"
EXPECTED_LINE = (
    "an ftrace event line 'COMM-PID [CPU] SECONDS.FRACTION: EVENT: FIELDS', a '#' comment or a trace-cmd report header"
)
INT64_MAX_SECONDS = 9_223_372_035  # SEC * 1e9 + FRAC stays within Int64 up to here


def split_lines(data: bytes, first_line: int = 1, quirks: list | None = None) -> pl.DataFrame:
    """UTF-8 bytes -> frame (``_line`` 1-based line number, ``text`` without the line terminator).

    Zero-copy: newline positions found with numpy become the offsets of an Arrow string array over
    the same buffer. Invalid UTF-8 is replaced with U+FFFD first. Line ends: LF, CRLF, CR CR LF (adb on
    Windows) and lone CR (mixed endings, counted as line ends); `quirks` gets a note when CRs were seen.
    """
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        data = data.decode("utf-8", errors="replace").encode("utf-8")
    if data.startswith(b"\xef\xbb\xbf"):  # UTF-8 byte order mark (text saved by some editors)
        data = b" " * 3 + data[3:]
    if b"\r" in data:
        crlf = data.count(b"\r\n")
        data = data.replace(b"\r\r\n", b"\n").replace(b"\r\n", b"\n")
        lone = data.count(b"\r")
        if lone:
            data = data.replace(b"\r", b"\n")
        if quirks is not None:
            quirks.append(f"line ends: {crlf} CRLF" + (f", {lone} lone CR (read as line ends)" if lone else ""))
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10) + 1
    if not data.endswith(b"\n"):
        ends = np.append(ends, len(data))
    offsets = np.zeros(len(ends) + 1, dtype=np.int64)
    offsets[1:] = ends
    arr = pa.LargeStringArray.from_buffers(len(ends), pa.py_buffer(offsets), pa.py_buffer(data))
    lines = pl.from_arrow(arr).alias("text").str.strip_suffix("\n")
    return (
        pl.DataFrame({"text": lines})
        .with_row_index("_line", offset=first_line)
        .with_columns(pl.col("_line").cast(pl.Int64))
    )


def ends_with_newline(data: bytes) -> bool:
    """True when the text's last line is complete: it ends with a line end (NUL padding after it allowed)."""
    tail = bytes(data[-4096:]).rstrip(b"\x00")
    return not tail or tail.endswith((b"\n", b"\r")) or not tail.rsplit(b"\n", 1)[-1].strip()


def unescape_js_lines(df: pl.DataFrame) -> pl.DataFrame:
    """Lines of a JavaScript string literal (``...\\n\\`` endings, legacy systrace) -> plain lines."""
    return df.with_columns(pl.col("text").str.replace(r"(?:\\n)?\\?$", ""))


def looks_js_escaped(df: pl.DataFrame) -> bool:
    first = df.filter(pl.col("text").str.strip_chars() != "").head(3)["text"]
    return first.len() > 0 and bool(first.str.ends_with("\\n\\").all())


def raise_bad_line(path, bad: pl.DataFrame, why: str) -> None:
    row = bad.row(0, named=True)
    start = row["text"][:80]
    more = f" ({bad.height - 1} more such lines)" if bad.height > 1 else ""
    raise TraceFormatError(path, f"{why}: {start!r}{more}", line=int(row["_line"]), expected=EXPECTED_LINE)


def _header_meta(other: pl.DataFrame, meta: dict) -> int | None:
    """cpus / format_version / tracer / ring-buffer overwrite from header and comment lines.
    Returns the header's entries-in-buffer count (None without that header)."""
    text = other["text"]
    tracer = text.str.extract(r"^#\s*tracer:\s*(\S+)").drop_nulls()
    if tracer.len():
        meta["tracer"] = tracer[0]
    version = text.str.extract(r"^version = (\d+)").drop_nulls()
    if version.len():
        meta["format_version"] = version[0]
    cpus = text.str.extract(r"^cpus=(\d+)").drop_nulls().cast(pl.Int64, strict=False).drop_nulls()
    entries = pl.concat(
        [text.str.extract_groups(rx).struct.unnest().drop_nulls() for rx in (ENTRIES_RE, LATENCY_HEADER_RE)]
    )
    entries = entries.select(pl.all().cast(pl.Int64, strict=False)).drop_nulls()
    in_buffer = None
    if entries.height:
        in_buffer, written, ncpu = (int(v) for v in entries.row(0))
        meta["cpus"] = max(meta.get("cpus") or 0, ncpu)
        meta["entries_in_buffer"] = in_buffer
        meta["entries_written"] = written
        if written > in_buffer:
            meta["overwritten_events"] = meta.get("overwritten_events", 0) + written - in_buffer
    if cpus.len():
        meta["cpus"] = max(meta.get("cpus") or 0, int(cpus[0]))
    empty = text.str.extract(r"^CPU (\d+) is empty").drop_nulls()
    if empty.len():
        meta["empty_cpus"] = sorted(int(c) for c in empty.to_list())
    return in_buffer


def _lost_meta(lost: pl.DataFrame, meta: dict) -> None:
    g = lost["text"].str.extract_groups(LOST_RE).struct.unnest()
    g = g.select(
        pl.col("1").cast(pl.Int64, strict=False).alias("cpu"),
        pl.coalesce(pl.col("2"), pl.col("3")).cast(pl.Int64, strict=False).alias("n"),
        (pl.col("2").is_null() & pl.col("3").is_null()).alias("unknown"),
    ).filter(pl.col("cpu").is_not_null())
    per_cpu = meta.setdefault("lost_events_per_cpu", {})
    for cpu, n, unknown in (
        g.group_by("cpu").agg(pl.col("n").sum(), pl.col("unknown").sum().alias("u")).sort("cpu").iter_rows()
    ):
        # a marker without a count stands for at least one lost event: counted as 1, as the trace.dat
        # reader counts a ring-buffer page flagged without a stored count
        per_cpu[int(cpu)] = per_cpu.get(int(cpu), 0) + int(n or 0) + int(unknown)
        if unknown:
            meta.setdefault("warnings", []).append(
                f"CPU {cpu}: {unknown} 'EVENTS DROPPED' marker(s) without a count, counted as 1 each: "
                "lost_events is a lower bound"
            )
            meta["lost_events_exact"] = False


def is_ascii(data: bytes) -> bool:
    """True when no byte is >= 0x80 (byte and character offsets agree on every line)."""
    return not data or int(np.frombuffer(data, dtype=np.uint8).max()) < 0x80


def _split_event_lines(
    lines: pl.DataFrame,
    ascii_only: bool | None = None,
    plain_printk: bool = True,
    printk_names: frozenset[str] = frozenset(),
) -> pl.DataFrame:
    """(_line, text) -> + ``_pos`` (null on lines that are not event lines), ``_comm``, the head
    groups (pid, tgid, cpu, flags, sec, frac, event name or ``<stack trace>``) and ``_rest`` (the
    payload, or ``func <-parent`` on function-tracer lines)."""
    text = pl.col("text")
    # intermediate results are materialised as columns: a polars expression reused inside another
    # expression is recomputed each time
    df = lines.with_columns(text.str.find(EVENT_HEAD_RE).alias("_pos"))
    fields_re = EVENT_FIELDS_RE
    if df["_pos"].null_count() and df.filter(pl.col("_pos").is_null())["text"].str.contains(GLUED_HEAD_RE).any():
        df = lines.with_columns(text.str.find(GLUED_HEAD_RE).alias("_pos"))
        fields_re = GLUED_FIELDS_RE
    # `find` gives a byte offset; `str.slice` counts characters: a non-ASCII comm ("bash-é", CJK) needs
    # the byte slice (the match starts at an ASCII '-', so both halves are valid UTF-8)
    if ascii_only is None:
        ascii_only = not df.select((text.str.len_bytes() != text.str.len_chars()).any()).item()
    if not ascii_only:
        as_bytes = text.cast(pl.Binary)
        comm = as_bytes.bin.slice(0, pl.col("_pos")).cast(pl.Utf8)
        tail_expr = as_bytes.bin.slice(pl.col("_pos") + 1).cast(pl.Utf8)
    else:
        comm = text.str.slice(0, pl.col("_pos"))
        tail_expr = text.str.slice(pl.col("_pos") + 1)
    df = df.with_columns(tail_expr.alias("_tail"))  # "PID [(TGID)] [CPU] ..."
    tail = pl.col("_tail")
    df = df.with_columns(tail.str.extract_groups(fields_re).alias("g")).unnest("g")
    # "_latency_form": trace-cmd report -l's flags letters (CPU digits run into the flags); the kernel's
    # own latency format prints them the same way, with the kernel's letters and a microsecond time
    df = df.with_columns(
        pl.coalesce(_G_CPU, _G_CPU_LAT).alias(_G_CPU),
        pl.coalesce(_G_FLAGS, pl.col(_G_FLAGS_LAT).str.strip_chars_end()).alias(_G_FLAGS),
        (pl.col(_G_FLAGS_LAT).is_not_null() & pl.col(_G_US).is_null()).alias("_latency_form"),
    ).drop(_G_CPU_LAT, _G_FLAGS_LAT)
    df = df.with_columns(
        comm.str.strip_chars_start().alias("_comm"),
        tail.str.slice(pl.col(_G_HEAD).str.len_chars()).alias("_rest"),
    ).drop("_tail")
    return _named_by_form(df, plain_printk, printk_names)


def _named_by_form(
    df: pl.DataFrame, plain_printk: bool = True, printk_names: frozenset[str] = frozenset()
) -> pl.DataFrame:
    """+ ``_form_event`` / ``_form_payload``: the event name and payload of lines the kernel prints with
    no ``EVENT:`` name, named by their form: syscalls (SYSCALL_ENTER_RE / SYSCALL_EXIT_RE, ``key=value``
    payload), trace_marker_raw writes (RAW_DATA_RE -> ``raw_data``) and trace_printk / trace_puts lines
    (`_printk_form`: ``bprint``, or ``tracing_mark_write`` for a marker write printed with its offset);
    null on other lines. plain_printk: also read plain caller names as trace_printk (plain_printk_names, and the
    `printk_names` the whole text decided)."""
    unnamed = pl.col(_G_EVENT).is_null() & pl.col(_G_STACK).is_null()
    syscall = unnamed & pl.col("_rest").str.starts_with("sys_")
    raw_data = unnamed & pl.col("_rest").str.starts_with("# ")
    plain = sorted(set(plain_printk_names(df)) | printk_names) if plain_printk else []
    symbol_name = (_symbol_shaped(pl.col(_G_EVENT)) | pl.col(_G_EVENT).is_in(plain)).fill_null(False)
    has_syscall, has_raw_data, has_unnamed, has_symbol = df.select(
        syscall.any().alias("s"),
        raw_data.any().alias("r"),
        (unnamed & ~syscall & ~raw_data).any().alias("u"),
        symbol_name.any().alias("n"),
    ).row(0)
    if not (has_syscall or has_raw_data or has_unnamed or has_symbol):  # the usual case: no regular expression
        return df.with_columns(
            pl.lit(None, pl.String).alias("_form_event"), pl.lit(None, pl.String).alias("_form_payload")
        )
    raw_data = raw_data & pl.col("_rest").str.contains(RAW_DATA_RE)
    events = [pl.when(raw_data).then(pl.lit("raw_data"))]
    payloads = [pl.when(raw_data).then(pl.col("_rest"))]
    if has_syscall:
        df = df.with_columns(
            pl.when(syscall).then(pl.col("_rest").str.extract_groups(SYSCALL_ENTER_RE)).alias("_enter"),
            pl.when(syscall).then(pl.col("_rest").str.extract_groups(SYSCALL_EXIT_RE)).alias("_exit"),
        )
        enter, exit_ = pl.col("_enter").struct, pl.col("_exit").struct
        # "fd: 7, buf: 0x7ffc1000" -> "fd=7 buf=0x7ffc1000" (argument values are numbers, never ", ")
        args = enter.field("2").str.replace_all(r"(?:^|, )([A-Za-z0-9_]+): ", " ${1}=").str.strip_chars()
        events += [pl.lit("sys_enter_") + enter.field("1"), pl.lit("sys_exit_") + exit_.field("1")]
        payloads += [args, pl.lit("ret=") + exit_.field("2")]
    if has_unnamed or has_symbol:
        df, event, payload = _printk_form(df, unnamed & ~syscall & ~raw_data, symbol_name)
        events.append(event)
        payloads.append(payload)
    return df.with_columns(pl.coalesce(events).alias("_form_event"), pl.coalesce(payloads).alias("_form_payload")).drop(
        "_enter", "_exit", "_printk", strict=False
    )


def _symbol_shaped(name: pl.Expr) -> pl.Expr:
    """A kernel symbol's shape that no tracepoint name has: a leading underscore, a bare address, a compiler
    suffix (``.isra.0``)."""
    return name.str.starts_with("_") | name.str.starts_with("0x") | name.str.contains(".", literal=True)


def plain_printk_enabled() -> bool:
    """False when the environment turns the plain caller rule off (ABTEST_PLAIN_PRINTK=0 / off / no / false)."""
    return os.environ.get(PLAIN_PRINTK_ENV, "1").strip().lower() not in ("0", "off", "no", "false")


@functools.cache
def tracepoint_names() -> frozenset[str]:
    """Names of known kernel trace events (tracepoint_names.txt beside this module; see its header)."""
    text = (Path(__file__).resolve().parent / "tracepoint_names.txt").read_text()
    return frozenset(ln for ln in text.split("\n") if ln and not ln.startswith("#"))


def plain_printk_names(df: pl.DataFrame) -> list[str]:
    """Event names of split lines (``_G_EVENT``, payload ``_rest``) read as trace_printk callers printed plain
    (KEY_VALUE_RE's comment): identifier-shaped, no known trace event, and some line of the name without a
    ``key=value`` field. Sorted."""
    names = df.get_column(_G_EVENT).drop_nulls().unique()
    known = tracepoint_names()
    # a name with a symbol's shape (`.isra.0`) is read as a caller anyway; `0` (old markers) is no identifier
    candidates = [n for n in names.to_list() if n not in known and n[:1].isalpha() and "." not in n]
    if not candidates:
        return []
    free_text = (
        df.lazy()
        .filter(pl.col(_G_EVENT).is_in(candidates))
        .group_by(_G_EVENT)
        .agg((~pl.col("_rest").fill_null("").str.contains(KEY_VALUE_RE)).any().alias("free"))
        .filter(pl.col("free"))
        .collect()
    )
    return sorted(free_text.get_column(_G_EVENT).to_list())


def _count_plain_printk_callers(lines: pl.DataFrame, meta: dict) -> None:
    """meta["_printk_plain_callers"] += {caller: lines} of the plain caller names read as trace_printk
    (plain_printk_names), for the one warning `printk_callers_warning` makes of every part of a text."""
    plain = lines.filter(
        (pl.col("_form_event") == "bprint") & pl.col(_G_EVENT).is_not_null() & ~_symbol_shaped(pl.col(_G_EVENT))
    )
    if plain.is_empty():
        return
    counts = meta.setdefault("_printk_plain_callers", {})
    for name, n in plain.group_by(_G_EVENT).len().iter_rows():
        counts[name] = counts.get(name, 0) + n


def printk_callers_warning(meta: dict) -> None:
    """One warning naming the plain caller names read as trace_printk, with their line counts (a judgement from
    the name and the text, which the user can check); pops meta["_printk_plain_callers"]."""
    counts = meta.pop("_printk_plain_callers", None)
    if not counts:
        return
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))  # the most lines first
    names = ", ".join(f"{n} ({c})" for n, c in ranked[:8])
    more = f" and {len(ranked) - 8} more" if len(ranked) > 8 else ""
    meta.setdefault("warnings", []).append(
        f"{sum(counts.values())} line(s) read as trace_printk (bprint) of a caller printed by name: {names}{more} "
        f"(no known trace event has the name and its text is not key=value fields; {PLAIN_PRINTK_ENV}=0 reads "
        "them as events)"
    )


def _printk_form(df: pl.DataFrame, unnamed: pl.Expr, symbol_name: pl.Expr) -> tuple[pl.DataFrame, pl.Expr, pl.Expr]:
    """trace_printk / trace_puts lines (PRINTK_DECORATED_RE, PRINTK_SYMBOL_NAME_RE) -> (df + ``_printk``,
    event, payload): event ``bprint`` with payload ``SYMBOL: MESSAGE`` (text_fields.parse_marker splits it into
    ip and buf), or ``tracing_mark_write`` with the message when the symbol is the marker's caller printed with
    its offset (options/sym-offset). tracefs text does not tell bputs from bprint: both are ``bprint``."""
    decorated = unnamed & pl.col("_rest").str.contains(PRINTK_DECORATED_RE)
    g = pl.col("_rest").str.extract_groups(PRINTK_DECORATED_RE).struct
    df = df.with_columns(
        pl.when(decorated)
        .then(
            pl.struct(g.field("1").alias("sym"), (g.field("1") + g.field("2")).alias("ip"), g.field("3").alias("msg"))
        )
        .when(symbol_name)
        .then(pl.struct(pl.col(_G_EVENT).alias("sym"), pl.col(_G_EVENT).alias("ip"), pl.col("_rest").alias("msg")))
        .alias("_printk")
    )
    p = pl.col("_printk").struct
    marker = p.field("sym") == PRINTK_MARKER_SYMBOL
    event = pl.when(marker).then(pl.lit("tracing_mark_write")).when(p.field("sym").is_not_null()).then(pl.lit("bprint"))
    msg = p.field("msg").str.strip_chars()  # as every payload: the spaces around the message are not kept
    payload = pl.when(marker).then(msg).otherwise(p.field("ip") + ": " + msg)
    return df, event, payload


def _time_columns() -> tuple[pl.Expr, pl.Expr]:
    """(ts, ok): exact Int64 ns from SEC[.FRAC] / latency-format microseconds; ok = False where the numbers
    do not fit Int64 (20-digit seconds, seconds beyond 9223372035 with a fraction)."""
    frac = pl.col(_G_FRAC)
    sec = pl.col(_G_SEC).cast(pl.Int64, strict=False)
    # no fraction: a raw clock count (counter / x86-tsc clocks, trace-cmd's instance output), kept as is;
    # the kernel's latency format: microseconds since the buffer's start
    is_us, is_raw = pl.col(_G_US).is_not_null(), frac.is_null()
    # a row that fails `ok` may wrap in the multiplication: it is dropped (and counted) by the caller
    ok = sec.is_not_null() & (
        sec
        <= pl.when(is_us)
        .then(INT64_MAX_SECONDS * 1_000_000)
        .when(is_raw)
        .then(pl.lit(2**63 - 1))
        .otherwise(INT64_MAX_SECONDS)
    )
    ts = (
        pl.when(is_us)
        .then(sec * 1000)
        .when(is_raw)
        .then(sec)
        .otherwise(sec * 1_000_000_000 + frac.str.pad_end(9, "0").cast(pl.Int64, strict=False))
    )
    return ts, ok


def _event_frame(ev: pl.DataFrame, has_tgid: bool, has_flags: bool) -> pl.DataFrame:
    """Split line parts -> _line/ts/cpu/common_pid/common_comm[/common_tgid]/event/payload
    [/common_flags/common_preempt_count] (abtest/trace/text_flags.py), + ``_in_range`` (False where the
    time, CPU, pid or tgid does not fit its column)."""
    ts, ts_ok = _time_columns()
    cpu = pl.col(_G_CPU).cast(pl.Int32, strict=False)
    pid = pl.col(_G_PID).cast(pl.Int32, strict=False)
    tgid_text = pl.col(_G_TGID).str.strip_chars()
    tgid = tgid_text.cast(pl.Int32, strict=False)
    in_range = ts_ok & cpu.is_not_null() & pid.is_not_null()
    if has_tgid:  # "(-----)" is an unknown tgid (null), a number that does not fit Int32 is out of range
        in_range = in_range & (tgid.is_not_null() | tgid_text.is_null() | tgid_text.str.starts_with("-"))
    event = pl.coalesce(
        pl.col("_form_event"), pl.col(_G_EVENT), pl.col(_G_STACK).replace(STACK_EVENT_NAMES), pl.lit("function")
    )
    cols = [
        pl.col("_line"),
        ts.alias("ts"),
        cpu.alias("cpu"),
        pid.alias("common_pid"),
        pl.col("_comm").alias("common_comm"),
    ]
    if has_tgid:
        cols.append(tgid.alias("common_tgid"))
    if "_instance" in ev.columns:
        cols.append(pl.col("_instance").alias("instance"))
    cols += [
        pl.when(event == OLD_MARKER_EVENT).then(pl.lit("tracing_mark_write")).otherwise(event).alias("event"),
        pl.coalesce(pl.col("_form_payload"), pl.col("_rest").str.strip_chars()).alias("payload"),
    ]
    if has_flags:
        cols += flags_columns(pl.col(_G_FLAGS), pl.col("_latency_form"))
    return ev.select(*cols, in_range.alias("_in_range"))


def _drop_report_annotations(events: pl.DataFrame, other_text: pl.Series, warnings: list) -> pl.DataFrame:
    """What `trace-cmd report -w` / `--debug` append to event lines (known by their summary / page-start
    lines among the other lines) is removed from the payloads, with a warning: it is not part of the events."""
    if other_text.str.contains(WAKEUP_SUMMARY_RE).any():
        suffix = events["payload"].str.contains(WAKEUP_LATENCY_SUFFIX_RE) & (events["event"] == "sched_switch")
        events = events.with_columns(
            pl.when(suffix)
            .then(pl.col("payload").str.replace(WAKEUP_LATENCY_SUFFIX_RE, ""))
            .otherwise(pl.col("payload"))
            .alias("payload")
        )
        warnings.append(
            f"trace-cmd report -w text: its wakeup latencies (' Latency: N usecs' after "
            f"{int(suffix.sum())} sched_switch lines) and summary are not read"
        )
    if other_text.str.contains(DEBUG_PAGE_RE).any():
        events = events.with_columns(pl.col("payload").str.replace(DEBUG_SUFFIX_RE, ""))
        warnings.append("trace-cmd report --debug text: its [delta:offset:size] after each event is not read")
    return events


def _join_continuations(
    lines: pl.DataFrame, others: pl.DataFrame, meta: dict, source
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Unrecognised lines that follow a free-text event (TEXT_PAYLOAD_EVENTS, with only such lines in
    between) and do not look like an event line are the rest of its text: appended to its payload after a
    newline. Returns the event lines with those payloads, and the other lines without the joined ones."""
    kind = pl.col("_kind")
    joinable = (kind == "bad") & ~pl.col("text").str.contains(LOOKS_LIKE_EVENT_RE)
    owners = (
        pl.concat(
            [
                lines.filter(pl.col("_pos").is_not_null()).select(
                    "_line",
                    pl.coalesce("_form_event", _G_EVENT).is_in(TEXT_PAYLOAD_EVENTS).fill_null(False).alias("_text"),
                ),
                others.select("_line", pl.when(~joinable).then(pl.lit(False)).alias("_text")),
            ]
        )
        .sort("_line")
        .with_columns(
            pl.when(pl.col("_text").is_not_null()).then(pl.col("_line")).forward_fill().alias("_owner"),
            pl.col("_text").forward_fill().fill_null(False).alias("_owner_text"),
        )
    )
    more = owners.filter(pl.col("_text").is_null() & pl.col("_owner_text")).select("_line", "_owner")
    if more.is_empty():
        return lines, others
    joined_lines = more.join(others.select("_line", "text"), on="_line").sort("_line")
    joined = joined_lines.group_by("_owner", maintain_order=True).agg(pl.col("text").str.join("\n").alias("_more"))
    # a line without an event head after a message may be the rest of it (a newline inside the text) or a
    # damaged line: it is joined (so no text is lost) and counted, so the user can tell which
    import_log.add_error_lines(
        meta,
        "continuation_line",
        joined_lines,
        source=source,
        detail="no event head, after a console/marker event: joined to its text as a "
        "newline inside the message (if it is a damaged line, that text holds it)",
    )
    meta.setdefault("warnings", []).append(
        f"{more.height} lines continue the text of {joined.height} console/marker events (newlines inside "
        f"the message): joined to it"
    )
    lines = (
        lines.join(joined, left_on="_line", right_on="_owner", how="left")
        .with_columns(
            pl.when(pl.col("_more").is_null())
            .then(pl.col("_rest"))
            .otherwise(pl.col("_rest") + "\n" + pl.col("_more"))
            .alias("_rest")
        )
        .drop("_more")
    )
    return lines, others.join(more, on="_line", how="anti")


def _attach_stacks(events: pl.DataFrame, stacks: pl.DataFrame, meta: dict, source) -> pl.DataFrame:
    """`` => sym`` lines -> newline-joined ``stack`` text on the event line they follow (stack lines before
    any event: import_errors ``orphan_stack_line``)."""
    if stacks.is_empty():
        return events
    owners = (
        pl.concat(
            [
                events.select("_line", pl.col("_line").alias("_owner")),
                stacks.select("_line", pl.lit(None, pl.Int64).alias("_owner"), pl.col("text")),
            ],
            how="diagonal",
        )
        .sort("_line")
        .with_columns(pl.col("_owner").forward_fill())
    )
    orphan = owners.filter(pl.col("_owner").is_null() & pl.col("text").is_not_null())
    if orphan.height:
        import_log.add_error_lines(
            meta, "orphan_stack_line", orphan, source=source, detail="stack trace line before any event"
        )
    joined = (
        owners.filter(pl.col("text").is_not_null() & pl.col("_owner").is_not_null())
        .group_by("_owner", maintain_order=True)
        .agg(pl.col("text").str.strip_chars().str.strip_prefix("=> ").str.join("\n").alias("stack"))
    )
    return events.join(joined, left_on="_line", right_on="_owner", how="left")


INSTANCE_PREFIX_RE = rf"^({_NS}+):{_S}{{2,}}"


def _split_instance_prefix(groups: pl.DataFrame, meta: dict) -> pl.DataFrame:
    """trace-cmd report of a multi-buffer trace.dat prefixes instance-buffer lines with
    ``NAME:`` and padding before the task: split it off into ``_instance`` (comm never holds ": ")."""
    has = pl.col("_comm").str.contains(INSTANCE_PREFIX_RE)
    if not groups.select(has.any()).item():
        return groups
    groups = groups.with_columns(
        pl.when(has).then(pl.col("_comm").str.extract(INSTANCE_PREFIX_RE, 1)).alias("_instance")
    )
    groups = groups.with_columns(
        pl.when(has).then(pl.col("_comm").str.replace(INSTANCE_PREFIX_RE, "")).otherwise(pl.col("_comm")).alias("_comm")
    )
    meta["instances"] = sorted(groups["_instance"].drop_nulls().unique().to_list())
    return groups


_FLAG_COLUMNS = ("common_flags", "common_preempt_count")


def _flags_meta(events: pl.DataFrame, groups: pl.DataFrame, meta: dict) -> None:
    """Which common_flags bits the text shows (text_flags.py), and rows whose flags did not decode."""
    latency_form = bool(groups["_latency_form"].any())
    meta["text_columns"]["flags_bits"] = LATENCY_FORM_FLAG_BITS if latency_form else KERNEL_FLAG_BITS
    if events.height != groups.height:  # lines dropped (out of range, truncated) or added (function_graph comments)
        groups = groups.join(events.select("_line"), on="_line", how="semi")
        events = events.join(groups.select("_line"), on="_line", how="semi")
    undecoded = int((events["common_flags"].is_null() & groups[_G_FLAGS].is_not_null()).sum())
    if latency_form:
        meta["text_columns"]["flags_note"] = (
            "flags column in trace-cmd report -l form: common_flags holds only the bits it prints "
            "(0x1f: irqs-off, need-resched, hardirq, softirq); PROCESS_RESCHED, NMI and BH_OFF are not shown".replace(
                "PROCESS_RESCHED", "PREEMPT_RESCHED"
            )
        )
    if undecoded:
        meta.setdefault("warnings", []).append(
            f"{undecoded} flags columns did not decode (unknown letters): common_flags/common_preempt_count null"
        )


def _screen_raw_lines(lines: pl.DataFrame, meta: dict, source, limits: Limits) -> pl.DataFrame:
    """NUL padding (whole lines of NULs, NULs after a line) is skipped and counted; lines holding other
    control bytes and lines longer than the limit are counted as import errors and not parsed."""
    text = pl.col("text")
    has_long, has_ctrl = lines.select(
        (text.str.len_bytes() > limits.max_line_bytes).any().alias("long"),
        text.str.contains(BINARY_RE).any().alias("ctrl"),
    ).row(0)
    if not (has_long or has_ctrl):  # the usual case: nothing to filter (a filter would copy every line)
        return lines
    too_long = lines.filter(text.str.len_bytes() > limits.max_line_bytes) if has_long else lines.clear()
    if too_long.height:
        import_log.add_error(
            meta,
            "line_too_long",
            too_long.height,
            [
                import_log.example(
                    t,
                    line=ln,
                    source=source,
                    detail=f"{len(t.encode())} bytes, limit {limits.max_line_bytes} (ABTEST_MAX_LINE_BYTES)",
                )
                for ln, t in too_long.head(import_log.MAX_EXAMPLES).iter_rows()
            ],
        )
        lines = lines.filter(text.str.len_bytes() <= limits.max_line_bytes)
    ctrl = text.str.contains(BINARY_RE)
    if not has_ctrl:
        return lines
    cleaned = text.str.strip_chars_end("\x00")
    lines = lines.with_columns(ctrl.alias("_ctrl"), cleaned.alias("_clean"))
    padded = lines.filter(pl.col("_ctrl") & (pl.col("_clean") != text))
    if padded.height:
        import_log.add_skipped(
            meta,
            "nul_padding",
            int(padded.select((text.str.len_bytes() - pl.col("_clean").str.len_bytes()).sum()).item()),
            [import_log.example(None, line=ln, source=source) for ln in padded["_line"].head(3)],
        )
    lines = lines.with_columns(pl.col("_clean").alias("text"))
    binary = lines.filter(pl.col("_ctrl") & pl.col("text").str.contains(BINARY_RE))
    if binary.height:
        import_log.add_error_lines(meta, "binary_line", binary, source=source, detail="control bytes in the line")
    keep = ~(pl.col("_ctrl") & pl.col("text").str.contains(BINARY_RE))
    return lines.filter(keep).drop("_ctrl", "_clean")


def _classify_others(others: pl.DataFrame) -> pl.DataFrame:
    """Kinds of the lines that are not event lines; unrecognised lines before the ``# tracer:`` header (a
    shell prompt, the command that dumped the trace) are preamble."""
    text = pl.col("text")
    stripped = text.str.strip_chars()
    others = others.with_columns(
        (pl.col("_line") < pl.col("_line").filter(text.str.contains(r"^#\s*tracer:")).min())
        .fill_null(False)
        .alias("_before_header")
    )
    return others.with_columns(
        pl.when(stripped == "")
        .then(pl.lit("blank"))
        .when(stripped.str.starts_with("#"))
        .then(pl.lit("comment"))
        .when(text.str.contains(HEADER_RE))
        .then(pl.lit("header"))
        .when(text.str.contains(LOST_RE))
        .then(pl.lit("lost"))
        .when(text.str.contains(STACK_RE))
        .then(pl.lit("stack"))
        .when(text.str.contains(PREAMBLE_RE) | pl.col("_before_header"))
        .then(pl.lit("preamble"))
        .when(text.str.contains(TRACECMD_STATS_RE))
        .then(pl.lit("tracecmd_stats"))
        .otherwise(pl.lit("bad"))
        .alias("_kind")
    ).drop("_before_header")


def _process_listings(
    lines: pl.DataFrame, others: pl.DataFrame, meta: dict, source
) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """ps listings / PROCESS DUMP titles among the unrecognised lines -> table ``process``; their lines
    become kind "ps" (accounted), rows that do not parse become import errors."""
    bad = others.filter(pl.col("_kind") == "bad")
    if bad.is_empty() or not bad["text"].str.contains(text_process.PS_HEADER_RE).any():
        if not bad.is_empty() and bad["text"].str.contains(text_process.PROCESS_DUMP_RE).any():
            title = others.with_columns(
                pl.when((pl.col("_kind") == "bad") & pl.col("text").str.contains(text_process.PROCESS_DUMP_RE))
                .then(pl.lit("ps"))
                .otherwise(pl.col("_kind"))
                .alias("_kind")
            )
            import_log.add_skipped_lines(meta, "process_dump", title.filter(pl.col("_kind") == "ps"), source=source)
            return title, None
        return others, None
    marked = text_process.mark_listings(
        lines.select("_line", "text", pl.col("_pos").is_not_null().alias("_ev")), pl.col("_ev")
    )
    listed = marked.filter(pl.col("_ps").is_not_null())
    process, bad_rows = text_process.process_table(listed)
    ps_lines = listed.select("_line")
    others = others.with_columns(
        pl.when(pl.col("_line").is_in(ps_lines["_line"].implode()) & (pl.col("_kind") == "bad"))
        .then(pl.lit("ps"))
        .otherwise(pl.col("_kind"))
        .alias("_kind")
    )
    import_log.add_skipped_lines(
        meta,
        "process_listing",
        listed.select("_line", "text").join(bad_rows.select("_line"), on="_line", how="anti"),
        source=source,
    )
    if bad_rows.height:
        import_log.add_error_lines(
            meta, "ps_listing_row", bad_rows, source=source, detail="a row of a ps listing that does not fit its header"
        )
    return others, process


def _function_graph(others: pl.DataFrame, meta: dict, source) -> tuple[pl.DataFrame, dict, pl.DataFrame | None]:
    """The function_graph tracer's own lines among the unrecognised ones -> (others with them accounted,
    funcgraph tables, comment-event rows)."""
    bad = pl.col("_kind") == "bad"
    cand = others.filter(bad & funcgraph_text.is_tracer_line(pl.col("text")))
    seps = others.filter(
        bad
        & (
            pl.col("text").str.contains(funcgraph_text.SEPARATOR_RE)
            | pl.col("text").str.contains(funcgraph_text.SWITCH_RE)
        )
    )
    if cand.is_empty():
        return others, {}, None
    tables, comments, unparsed, irq = funcgraph_text.parse_tracer_lines(cand)
    done = pl.concat([cand.select("_line"), seps.select("_line")]).join(
        unparsed.select("_line"), on="_line", how="anti"
    )
    others = others.with_columns(
        pl.when(pl.col("_line").is_in(done["_line"].implode()))
        .then(pl.lit("funcgraph"))
        .otherwise(pl.col("_kind"))
        .alias("_kind")
    )
    if seps.height:
        import_log.add_skipped_lines(meta, "funcgraph_task_switch", seps, source=source)
    if irq.height:
        import_log.add_skipped_lines(meta, "funcgraph_irq_mark", irq, source=source)
    meta["tracer_text"] = "function_graph"
    return others, tables, comments


def _too_many_fields(part: pl.DataFrame, limits: Limits) -> pl.Series:
    """Rows of one event whose payload holds more than limits.max_fields ``key=`` fields (only long payloads
    are counted: a field takes at least 2 characters and a separator)."""
    long = part["payload"].str.len_bytes() > 3 * limits.max_fields
    if not long.any():
        return long
    keys = part["payload"].str.count_matches(r"(?:^|\s)[A-Za-z_][A-Za-z0-9_.]*=")
    return long & (keys > limits.max_fields)


KEPT_WHOLE = "_kept_whole"  # column of _parse_event: lines kept whole in buf (too_many_fields)


def _require_fields(name: str, parsed: pl.DataFrame, meta: dict, source) -> pl.DataFrame:
    """Rows of an event that lack a field its table needs (REQUIRED_FIELDS: a line whose fields are not the
    event's, ``cpu_frequency: freq=1000 cpu=0``) are import errors (``missing_field``) and are left out (lines
    kept whole in buf as too_many_fields are left out too, counted once as such); a required field no line carries
    is added as an empty (null) text column, so the table keeps its schema."""
    fields = REQUIRED_FIELDS.get(name, ())
    absent = [f for f in fields if f not in parsed.columns]
    if absent:
        parsed = parsed.with_columns(pl.lit(None, pl.Utf8).alias(f) for f in absent)
    whole = parsed.get_column(KEPT_WHOLE).fill_null(False) if KEPT_WHOLE in parsed.columns else None
    parsed = parsed.drop(KEPT_WHOLE, strict=False)
    if not fields:
        return parsed
    lacking = parsed.select(pl.any_horizontal(pl.col(f).is_null() for f in fields).alias("_m")).to_series()
    if not lacking.any():  # the usual case
        return parsed
    # too_many_fields lines (counted already) of an event with required fields lack them: left out, not counted
    # a second time
    counted = lacking & ~whole if whole is not None else lacking
    rows = parsed.filter(counted)
    shown = [c for c in rows.columns if c not in ("_line", "ts", "cpu", "common_pid", "common_comm")]
    import_log.add_error(
        meta,
        "missing_field",
        rows.height,
        [
            import_log.example(
                f"{name}: " + " ".join(f"{c}={r[c]}" for c in shown if r[c] is not None),
                line=r["_line"],
                source=source,
                detail=f"{name} lines need the fields {', '.join(fields)}; this one lacks "
                + ", ".join(f for f in fields if r[f] is None),
            )
            for r in rows.head(import_log.MAX_EXAMPLES).iter_rows(named=True)
        ],
    )
    return parsed.filter(~lacking)


def _validate_fields(name: str, parsed: pl.DataFrame, meta: dict, source) -> pl.DataFrame:
    """Fields a canonical table needs as integers (CANONICAL_INT_FIELDS): rows where one is not an integer,
    or does not fit Int32 (pids, CPUs), are import errors (``bad_field_value`` / ``value_out_of_range``) and
    are left out; the columns become Int64."""
    fields = [f for f in CANONICAL_INT_FIELDS.get(name, ()) if f in parsed.columns]
    if not fields:
        return parsed
    text_fields = [f for f in fields if parsed.schema[f] == pl.Utf8]
    converted = parsed.with_columns(
        [pl.col(f).str.strip_chars().str.to_integer(strict=False) for f in text_fields]
        + [pl.col(f).cast(pl.Int64, strict=False) for f in fields if parsed.schema[f] not in (pl.Utf8, pl.Int64)]
    )
    bad_value = (
        pl.repeat(False, parsed.height, eager=True).alias("_bad_value")
        if not text_fields
        else pl.DataFrame({f: parsed[f].is_not_null() & converted[f].is_null() for f in text_fields})
        .select(pl.any_horizontal(pl.all()).alias("_bad_value"))
        .to_series()
    )
    wide = [f for f in fields if f in INT32_FIELDS]
    out_of_range = (
        pl.repeat(False, parsed.height, eager=True).alias("_oor")
        if not wide
        else converted.select(
            pl.any_horizontal([~pl.col(f).is_between(-(2**31), 2**31 - 1).fill_null(True) for f in wide]).alias("_oor")
        ).to_series()
    )
    if not (bad_value.any() or out_of_range.any()):  # the usual case
        return converted
    checked = converted.with_columns(bad_value, out_of_range)
    shown = parsed.with_columns(bad_value, out_of_range)  # examples show the values as printed
    for flag, kind in (("_bad_value", "bad_field_value"), ("_oor", "value_out_of_range")):
        rows = shown.filter(pl.col(flag))
        if rows.height:
            import_log.add_error(
                meta,
                kind,
                rows.height,
                [
                    import_log.example(
                        f"{name}: " + " ".join(f"{f}={r[f]}" for f in fields),
                        line=r["_line"],
                        source=source,
                        detail=f"{name} fields {', '.join(fields)} must be "
                        + ("integers" if kind == "bad_field_value" else "within Int32"),
                    )
                    for r in rows.head(import_log.MAX_EXAMPLES).iter_rows(named=True)
                ],
            )
    return checked.filter(~pl.col("_bad_value") & ~pl.col("_oor")).drop("_bad_value", "_oor")


def _truncated_last_line(events: pl.DataFrame, last_line: int) -> bool:
    """A text that does not end with a newline was cut: its last line is complete only if its ``key=`` layout
    is that of another line of the same event (`next_pid=1` cut from `next_pid=1642 next_prio=120` is not)."""
    last = events.filter(pl.col("_line") == last_line)
    if last.is_empty():
        return False
    name = last["event"][0]
    same = events.filter((pl.col("event") == name) & (pl.col("_line") != last_line))
    keys = pl.col("payload").str.extract_all(r"(?:^|\s)[A-Za-z_][A-Za-z0-9_.]*=").list.join(",")
    sig = last.select(keys).item()
    if not sig:  # free text (a marker): no layout to compare
        return False
    if same.is_empty():
        return False
    return not bool(same.select((keys == sig).any()).item())


def parse_lines(
    path,
    lines: pl.DataFrame,
    meta: dict,
    *,
    source: str | None = None,
    complete: bool = True,
    limits: Limits | None = None,
    ascii_only: bool | None = None,
    entries_check: bool = True,
    plain_printk: bool = True,
    printk_names: frozenset[str] = frozenset(),
) -> dict[str, pl.DataFrame]:
    """Frame of (``_line``, ``text``) -> raw tables keyed by event name; fills ``meta`` (import accounting in
    meta["import_errors"] / meta["non_event_content"], see the module docstring; table ``process`` when
    the text holds ps listings).

    source: how examples name the text when it is not the file itself (e.g. "inflated atrace -z stream");
    complete: False when the text does not end with a line end (its last line may be cut short).
    ascii_only: the text holds no byte >= 0x80 (`is_ascii`; None: found out here): cheaper slicing.
    entries_check: warn when the text has fewer events than its header's entries-in-buffer (False for one
    block of a longer text: the caller checks the whole). plain_printk: False where every line names its event
    (`perf script` text); `trace-cmd report` text is recognised by its header (meta["_report_text"] carries that
    to the next blocks); ABTEST_PLAIN_PRINTK=0 turns the rule off. printk_names: plain caller names the whole text
    decided (for one block of a longer text).
    Never raises for unparseable lines: the caller decides whether the text is a trace at all
    (meta["_text_event_lines"] counts the lines read as events). An input holding only
    headers/comments gives no tables and a warning."""
    limits = limits or current()
    warnings = meta.setdefault("warnings", [])
    lines = _screen_raw_lines(lines, meta, source, limits)
    plain_printk = plain_printk and plain_printk_enabled()
    if plain_printk and not meta.get("_report_text"):
        meta["_report_text"] = bool(lines["text"].head(64).str.contains(REPORT_HEADER_RE).any())
    lines = _split_event_lines(lines, ascii_only, plain_printk and not meta.get("_report_text"), printk_names)
    _count_plain_printk_callers(lines, meta)
    is_event = pl.col("_pos").is_not_null()
    others = _classify_others(lines.filter(~is_event).select("_line", "text"))
    process = None
    fg_tables: dict = {}
    fg_comments = None
    if (others["_kind"] == "bad").any():
        others, process = _process_listings(lines, others, meta, source)
        others, fg_tables, fg_comments = _function_graph(others, meta, source)
    if (others["_kind"] == "bad").any():
        lines, others = _join_continuations(lines, others, meta, source)
    for kind, what in (("preamble", "preamble"), ("tracecmd_stats", "tracecmd_stats")):
        skipped = others.filter(pl.col("_kind") == kind)
        if skipped.height:
            import_log.add_skipped_lines(meta, what, skipped, source=source)
    groups = lines.filter(is_event)
    # event heads whose payload is neither `EVENT: ...` nor a known unnamed form: damaged event lines
    unnamed = groups.filter(
        pl.col(_G_EVENT).is_null()
        & pl.col(_G_STACK).is_null()
        & pl.col("_form_event").is_null()
        & ~pl.col("_rest").str.contains(FUNCTION_PAYLOAD_RE)
    )
    if unnamed.height:
        groups = groups.join(unnamed.select("_line"), on="_line", how="anti")
    bad = pl.concat(
        [others.filter(pl.col("_kind") == "bad").select("_line", "text"), unnamed.select("_line", "text")]
    ).sort("_line")
    last_line = int(lines["_line"].max()) if lines.height else 0
    if not complete and bad.height and int(bad["_line"].max()) == last_line:
        cut = bad.filter(pl.col("_line") == last_line)
        import_log.add_error_lines(
            meta, "truncated_line", cut, source=source, detail="the text ends inside this line (no line end)"
        )
        bad = bad.filter(pl.col("_line") != last_line)
    if bad.height:
        looks = bad["text"].str.contains(LOOKS_LIKE_EVENT_RE)
        malformed, unrecognised = bad.filter(looks), bad.filter(~looks)
        tracer = others["text"].str.extract(r"^#\s*tracer:\s*(\S+)").drop_nulls()
        detail = (
            f"the {tracer[0]} tracer's own output format is not read (record trace events, or use trace.dat)"
            if tracer.len()
            and tracer[0]
            in (
                "wakeup",
                "wakeup_rt",
                "wakeup_dl",
                "irqsoff",
                "preemptoff",
                "preemptirqsoff",
                "blk",
                "mmiotrace",
                "hwlat",
                "osnoise",
                "timerlat",
            )
            else None
        )
        several = unrecognised.filter(pl.col("text").str.contains(r"^\s*\S+: cpus=\d+\s*$"))
        if several.height:  # two traces interleaved line by line: reading them as one would be wrong
            raise_bad_line(
                path,
                several,
                "a `trace-cmd report` of several input files (a 'FILE: cpus=N' header "
                "each) is not supported: report each file on its own",
            )
        import_log.add_error_lines(
            meta, "malformed_event_line", malformed, source=source, detail="looks like an event line but does not parse"
        )
        import_log.add_error_lines(meta, "unrecognised_line", unrecognised, source=source, detail=detail)
    if groups.is_empty() and not fg_tables and others.filter(pl.col("_kind") != "blank").is_empty() and bad.is_empty():
        raise TraceFormatError(path, "no trace lines (only blank lines)", line=1, expected=EXPECTED_LINE)
    in_buffer = _header_meta(others.filter(pl.col("_kind").is_in(["comment", "header"])), meta)
    if entries_check and in_buffer is not None and groups.height < in_buffer:
        warnings.append(
            f"the header says the ring buffer held {in_buffer} entries but the text has "
            f"{groups.height} events: a truncated or filtered copy of the trace"
        )
    lost = others.filter(pl.col("_kind") == "lost")
    if lost.height:
        _lost_meta(lost, meta)
    has_tgid = groups[_G_TGID].null_count() < groups.height
    groups = _split_instance_prefix(groups, meta)
    latency_us = int(groups[_G_US].is_not_null().sum())
    if latency_us:
        meta["time_origin"] = "buffer start"
        warnings.append(
            f"{latency_us} timestamps in the kernel's latency format (options/latency-format): "
            f"microseconds since the ring buffer's start, not the trace clock; comm cut to 8 "
            f"characters"
        )
    raw_clock = int((groups[_G_FRAC].is_null() & groups[_G_US].is_null()).sum())
    if raw_clock:
        warnings.append(
            f"{raw_clock} timestamps have no fraction: kept as raw clock counts (ns only if the trace clock counts ns)"
        )
    has_flags = groups[_G_FLAGS].null_count() < groups.height
    events = _event_frame(groups, has_tgid, has_flags)
    out_of_range = events.filter(~pl.col("_in_range")) if not events["_in_range"].all() else events.clear()
    if out_of_range.height:
        import_log.add_error_lines(
            meta,
            "value_out_of_range",
            groups.join(out_of_range.select("_line"), on="_line", how="semi"),
            source=source,
            detail="a time, CPU, pid or tgid that does not fit its column",
        )
        events = events.filter(pl.col("_in_range"))
    events = events.drop("_in_range")
    if (
        not complete
        and events.height
        and int(events["_line"].max()) == last_line
        and _truncated_last_line(events, last_line)
    ):
        cut = lines.filter(pl.col("_line") == last_line).select("_line", "text")
        import_log.add_error_lines(
            meta,
            "truncated_line",
            cut,
            source=source,
            detail="the text ends inside this line (no line end) and its fields are those of "
            "no other line of the event",
        )
        events = events.filter(pl.col("_line") != last_line)
    if fg_comments is not None and fg_comments.height:
        events = pl.concat([events, fg_comments], how="diagonal_relaxed").sort("_line")
    events = _drop_report_annotations(events, others["text"], warnings)
    events = _attach_stacks(events, others.filter(pl.col("_kind") == "stack"), meta, source)
    old_markers = int((groups[_G_EVENT] == OLD_MARKER_EVENT).sum())
    if old_markers:
        warnings.append(
            f"{old_markers} lines with event name '0' (trace_marker writes as old 2.6/3.x kernels "
            f"printed them: the print event's ip was 0) read as tracing_mark_write"
        )
    failed = int(events["payload"].str.starts_with("[FAILED TO PARSE]").sum())
    if failed:
        warnings.append(
            f"{failed} events marked [FAILED TO PARSE] by the tool that wrote the text: "
            f"their raw text is kept in column buf"
        )
    meta["_text_event_lines"] = (
        meta.get("_text_event_lines", 0) + events.height + sum(t.height for t in fg_tables.values())
    )
    if events.is_empty() and not fg_tables:
        warnings.append("trace holds no events (headers only)")
    meta["text_columns"] = {"tgid": has_tgid, "flags": bool(has_flags)}
    if has_flags:
        _flags_meta(events, groups, meta)
    tables: dict[str, pl.DataFrame] = {}
    for (name,), part in events.partition_by("event", as_dict=True, maintain_order=True).items():
        parsed = _parse_event(name, part.drop("event"), meta, source, limits, bool(ascii_only))
        if "stack" in parsed.columns:
            if name in STACK_EVENT_NAMES.values():  # the frames are the event's content
                parsed = parsed.drop("buf", strict=False).rename({"stack": "buf"})
            elif parsed["stack"].null_count() == parsed.height:
                parsed = parsed.drop("stack")
        if TOO_MANY_NAMES in parsed.columns:
            many = parsed.filter(pl.col(TOO_MANY_NAMES).fill_null(False))
            import_log.add_error(
                meta,
                "too_many_field_names",
                many.height,
                [
                    import_log.example(
                        b,
                        line=ln,
                        source=source,
                        detail=f"the {name} lines name more than 1024 different "
                        f"keys: not an event format; payloads kept whole in buf",
                    )
                    for ln, b in many.select("_line", "buf").head(import_log.MAX_EXAMPLES).iter_rows()
                ],
            )
            parsed = parsed.drop(TOO_MANY_NAMES)
        parsed = _validate_fields(name, _require_fields(name, parsed, meta, source), meta, source)
        if has_flags and all(c in parsed.columns for c in _FLAG_COLUMNS):  # at the end, as in trace.dat tables
            parsed = parsed.select(pl.exclude(_FLAG_COLUMNS), *_FLAG_COLUMNS)
        tables[name] = parsed
    for name, df in fg_tables.items():
        tables[name] = pl.concat([tables[name], df], how="diagonal_relaxed").sort("_line") if name in tables else df
    funcgraph_text.finish_tables(tables)
    tables = {name: df.drop("_line", strict=False) for name, df in tables.items()}
    switch = tables.get("sched_switch")
    if switch is not None and "prev_state" in switch.columns and switch["prev_state"].null_count():
        warnings.append(
            f"{switch['prev_state'].null_count()} sched_switch prev_state values are not "
            f"state letters or numbers: left null"
        )
    if process is not None and process.height:
        tables["process"] = process  # the caller fills task names from it (text_process.fill_from_process_table)
    return tables


def _parse_event(name: str, part: pl.DataFrame, meta: dict, source, limits: Limits, ascii_only: bool) -> pl.DataFrame:
    """One event's lines -> its fields (text_fields), with payloads of more than limits.max_fields fields kept
    whole in ``buf`` (import_errors ``too_many_fields``) and function_graph plugin payloads split."""
    if name in funcgraph_text.EVENTS and not part["payload"].str.starts_with("func=").all():
        plugin = ~part["payload"].str.starts_with("func=")
        rows, unfit = funcgraph_text.parse_report_payloads(part.filter(plugin), name)
        if unfit.height:
            import_log.add_error(
                meta,
                "malformed_event_line",
                unfit.height,
                [
                    import_log.example(
                        p, line=ln, source=source, detail=f"{name} payload not in the function_graph plugin form"
                    )
                    for ln, p in unfit.head(import_log.MAX_EXAMPLES).iter_rows()
                ],
            )
        parts = [rows]
        if (~plugin).any():
            parts.append(parse_event_payload(part.filter(~plugin), name, ascii_only))
        return pl.concat([p for p in parts if p.height] or [rows], how="diagonal_relaxed").sort("_line")
    many = _too_many_fields(part, limits)
    if not many.any():
        return parse_event_payload(part, name, ascii_only)
    over = part.filter(many)
    import_log.add_error(
        meta,
        "too_many_fields",
        over.height,
        [
            import_log.example(
                p,
                line=ln,
                source=source,
                detail=f"more than {limits.max_fields} key=value fields "
                f"(ABTEST_MAX_FIELDS_PER_LINE): payload kept whole in buf (the line is left out when its "
                "event needs fields, as they are then not read)",
            )
            for ln, p in over.select("_line", "payload").head(import_log.MAX_EXAMPLES).iter_rows()
        ],
    )
    whole = over.rename({"payload": "buf"}).with_columns(pl.lit(True).alias(KEPT_WHOLE))
    rest = part.filter(~many)
    if rest.is_empty():
        return whole
    return pl.concat([parse_event_payload(rest, name, ascii_only), whole], how="diagonal_relaxed").sort("_line")
