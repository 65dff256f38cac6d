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
text line      an unrecognised line right after a ``console`` event (or after such lines) is the rest of
               the kernel message's text (a newline inside it): joined to its payload with a warning.
header         ``# ...`` comments (``# tracer: X``; ``# entries-in-buffer/entries-written: X/Y   #P:N``
               gives the CPU count and, when Y > X, the events overwritten in the ring buffer),
               trace-cmd report headers ``version = N``, ``cpus=N``, ``CPU N is empty``, blank lines,
               ``--verbose``'s plugin / print-handler lines, ``-w``'s wakeup-latency summary (its
               `` Latency: N usecs`` after sched_switch lines is dropped, with a warning).
               ``--ts-diff``'s ``(+23)`` before the event name is skipped; ``--boundary`` / ``--debug``
               page-start lines, ``--debug``'s padding / time-extend / time-stamp lines and its
               ``[delta:offset:size]`` after each event are dropped (the last with a warning).

Anything else raises TraceFormatError naming the file, the 1-based line number and the line start.
Old (2.6/3.x) kernels printed trace_marker writes with event name ``0`` (the print event's ip was 0):
those become ``tracing_mark_write`` (see docs/text-formats.md).
"""
from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa

from abtest.trace.errors import TraceFormatError
from abtest.trace.text_fields import parse_event_payload
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
    return (rf"^(({_D}+){_S}+(?:\(({_S}*{_D}+|-+)\){_S}+)?{cpu}"
            rf"({_D}+)(?:\.({_D}{{1,9}})|(us){_LAT_MARK})?:(?:{_S}+|$)(?:{_TS_DIFF})?"
            rf"(?:({_W}[A-Za-z0-9_.]*):(?:{_S}+|$)|(<[a-z ]+>){_S}*$)?)")


EVENT_HEAD_RE, EVENT_FIELDS_RE = _event_head_re(_LAT_FLAGS), _event_fields_re(_LAT_FLAGS)
GLUED_HEAD_RE, GLUED_FIELDS_RE = _event_head_re(_GLUED_FLAGS), _event_fields_re(_GLUED_FLAGS)
(_G_HEAD, _G_PID, _G_TGID, _G_CPU, _G_FLAGS, _G_CPU_LAT, _G_FLAGS_LAT, _G_SEC, _G_FRAC, _G_US, _G_EVENT,
 _G_STACK) = (str(i) for i in range(1, 13))
FUNCTION_PAYLOAD_RE = r"^[^ \t]+[ \t]+<-[^ \t]+"
# The kernel prints syscall events in forms of its own, with no ``EVENT:`` name
# (kernel/trace/trace_syscalls.c): entry ``sys_read(fd: 7, buf: 0x7ffc1000, count: 0x64)`` is event
# sys_enter_read, exit ``sys_read -> 0x64`` is event sys_exit_read (trace-cmd report prints the
# `sys_enter_read:` / `sys_exit_read:` names instead, which need nothing special).
SYSCALL_ENTER_RE = r"^sys_([A-Za-z0-9_]+)\((.*)\)[ \t]*$"
SYSCALL_EXIT_RE = r"^sys_([A-Za-z0-9_]+) -> ([^ \t]+)[ \t]*$"
# The kernel prints a trace_marker_raw write (ftrace raw_data) as "# 3e8 buf: 00 01 02 00", no event name
RAW_DATA_RE = r"^# [0-9a-fA-F]+ buf:(?: [0-9a-fA-F]{2})*[ \t]*$"
HEADER_RE = (r"^(?:version = \d+|cpus=\d+|CPU \d+ is empty|CPU\d+ data recorded at offset=0x[0-9a-fA-F]+)\s*$"
             # trace-cmd report --verbose's plugin list; -w's wakeup-latency summary at the end
             r"|^(?:registering plugin: |overriding event \(\d+\) |removing override handler for event \(\d+\) )"
             r"|^(?:(?:RT )?(?:Average wakeup latency|Maximum Latency|Minimum Latency): |RT task timings:)"
             # ring-buffer page starts (--boundary; with --debug: [page ts:offset], then the page's
             # padding / time-extend / absolute-time records on lines of their own)
             r"|^CPU:\d+ \[SUBBUFFER START\](?: \[\d+:0x[0-9a-f]+\])?\s*$"
             r"|^ (?:(?:PADDING|TIME EXTEND): delta|TIME STAMP: timestamp):-?\d+ length:\d+\s*$")
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
# (printk's `console` event). Marker writes are not joined: in atrace/systrace text nearly every line is
# one, so a garbage line would pass as the rest of one (such a line stays an error; use trace.dat).
TEXT_PAYLOAD_EVENTS = ["console"]
EXPECTED_LINE = ("an ftrace event line 'COMM-PID [CPU] SECONDS.FRACTION: EVENT: FIELDS', "
                 "a '#' comment or a trace-cmd report header")


def split_lines(data: bytes, first_line: int = 1) -> pl.DataFrame:
    """UTF-8 bytes -> frame (``_line`` 1-based line number, ``text`` without the line terminator).

    Zero-copy: newline positions found with numpy become the offsets of an Arrow string array over
    the same buffer. Invalid UTF-8 is replaced with U+FFFD first.
    """
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        data = data.decode("utf-8", errors="replace").encode("utf-8")
    if data.startswith(b"\xef\xbb\xbf"):  # UTF-8 byte order mark (text saved by some editors)
        data = b" " * 3 + data[3:]
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10) + 1
    if not data.endswith(b"\n"):
        ends = np.append(ends, len(data))
    offsets = np.zeros(len(ends) + 1, dtype=np.int64)
    offsets[1:] = ends
    arr = pa.LargeStringArray.from_buffers(len(ends), pa.py_buffer(offsets), pa.py_buffer(data))
    lines = pl.from_arrow(arr).alias("text").str.strip_suffix("\n").str.strip_suffix("\r")
    return pl.DataFrame({"text": lines}).with_row_index("_line", offset=first_line).with_columns(
        pl.col("_line").cast(pl.Int64))


def unescape_js_lines(df: pl.DataFrame) -> pl.DataFrame:
    """Lines of a JavaScript string literal (``...\\n\\`` endings, legacy systrace) -> plain lines."""
    return df.with_columns(pl.col("text").str.replace(r"(?:\\n)?\\?$", ""))


def looks_js_escaped(df: pl.DataFrame) -> bool:
    first = df.filter(pl.col("text").str.strip_chars() != "").head(3)["text"]
    return first.len() > 0 and bool(first.str.ends_with("\\n\\").all())


def _raise_bad_line(path, bad: pl.DataFrame, why: str) -> None:
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
    cpus = text.str.extract(r"^cpus=(\d+)").drop_nulls()
    entries = pl.concat([text.str.extract_groups(rx).struct.unnest().drop_nulls()
                         for rx in (ENTRIES_RE, LATENCY_HEADER_RE)])
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
    g = g.select(pl.col("1").cast(pl.Int64).alias("cpu"),
                 pl.coalesce(pl.col("2"), pl.col("3")).cast(pl.Int64).alias("n"))
    per_cpu = meta.setdefault("lost_events_per_cpu", {})
    for cpu, n, unknown in g.group_by("cpu").agg(pl.col("n").sum(), pl.col("n").null_count().alias("u")).sort("cpu").iter_rows():
        # a marker without a count stands for at least one lost event: counted as 1, as the trace.dat
        # reader counts a ring-buffer page flagged without a stored count
        per_cpu[int(cpu)] = per_cpu.get(int(cpu), 0) + int(n) + int(unknown)
        if unknown:
            meta.setdefault("warnings", []).append(
                f"CPU {cpu}: {unknown} 'EVENTS DROPPED' marker(s) without a count, counted as 1 each: "
                "lost_events is a lower bound")
            meta["lost_events_exact"] = False


def _split_event_lines(lines: pl.DataFrame) -> pl.DataFrame:
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
    df = df.with_columns(text.str.slice(pl.col("_pos") + 1).alias("_tail"))  # "PID [(TGID)] [CPU] ..."
    tail = pl.col("_tail")
    df = df.with_columns(tail.str.extract_groups(fields_re).alias("g")).unnest("g")
    # "_latency_form": trace-cmd report -l's flags letters (CPU digits run into the flags); the kernel's
    # own latency format prints them the same way, with the kernel's letters and a microsecond time
    df = df.with_columns(pl.coalesce(_G_CPU, _G_CPU_LAT).alias(_G_CPU),
                         pl.coalesce(_G_FLAGS, pl.col(_G_FLAGS_LAT).str.strip_chars_end()).alias(_G_FLAGS),
                         (pl.col(_G_FLAGS_LAT).is_not_null() & pl.col(_G_US).is_null()).alias("_latency_form"),
                         ).drop(_G_CPU_LAT, _G_FLAGS_LAT)
    df = df.with_columns(
        text.str.slice(0, pl.col("_pos")).str.strip_chars_start().alias("_comm"),
        tail.str.slice(pl.col(_G_HEAD).str.len_chars()).alias("_rest"),
    ).drop("_tail")
    return _named_by_form(df)


def _named_by_form(df: pl.DataFrame) -> pl.DataFrame:
    """+ ``_form_event`` / ``_form_payload``: the event name and payload of lines the kernel prints with
    no ``EVENT:`` name, named by their form: syscalls (SYSCALL_ENTER_RE / SYSCALL_EXIT_RE, ``key=value``
    payload) and trace_marker_raw writes (RAW_DATA_RE -> ``raw_data``); null on other lines."""
    unnamed = pl.col(_G_EVENT).is_null() & pl.col(_G_STACK).is_null()
    syscall = unnamed & pl.col("_rest").str.starts_with("sys_")
    raw_data = unnamed & pl.col("_rest").str.starts_with("# ")
    has_syscall, has_raw_data = df.select(syscall.any().alias("s"), raw_data.any().alias("r")).row(0)
    if not (has_syscall or has_raw_data):  # the usual case: no regular expression is run
        return df.with_columns(pl.lit(None, pl.String).alias("_form_event"), pl.lit(None, pl.String).alias("_form_payload"))
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
    return df.with_columns(pl.coalesce(events).alias("_form_event"),
                           pl.coalesce(payloads).alias("_form_payload")).drop("_enter", "_exit", strict=False)


def _event_frame(ev: pl.DataFrame, has_tgid: bool, has_flags: bool) -> pl.DataFrame:
    """Split line parts -> _line/ts/cpu/common_pid/common_comm[/common_tgid]/event/payload
    [/common_flags/common_preempt_count] (abtest/trace/text_flags.py)."""
    frac = pl.col(_G_FRAC)
    sec = pl.col(_G_SEC).cast(pl.Int64)
    # no fraction: a raw clock count (counter / x86-tsc clocks, trace-cmd's instance output), kept as is;
    # the kernel's latency format: microseconds since the buffer's start
    ts = (pl.when(pl.col(_G_US).is_not_null()).then(sec * 1000)
          .when(frac.is_null()).then(sec)
          .otherwise(sec * 1_000_000_000 + frac.str.pad_end(9, "0").cast(pl.Int64)))
    event = pl.coalesce(pl.col(_G_EVENT), pl.col(_G_STACK).replace(STACK_EVENT_NAMES), pl.col("_form_event"),
                        pl.lit("function"))
    cols = [
        pl.col("_line"),
        ts.alias("ts"),
        pl.col(_G_CPU).cast(pl.Int32).alias("cpu"),
        pl.col(_G_PID).cast(pl.Int32).alias("common_pid"),
        pl.col("_comm").alias("common_comm"),
    ]
    if has_tgid:
        cols.append(pl.col(_G_TGID).str.strip_chars().cast(pl.Int32, strict=False).alias("common_tgid"))
    if "_instance" in ev.columns:
        cols.append(pl.col("_instance").alias("instance"))
    cols += [
        pl.when(event == OLD_MARKER_EVENT).then(pl.lit("tracing_mark_write")).otherwise(event).alias("event"),
        pl.coalesce(pl.col("_form_payload"), pl.col("_rest").str.strip_chars()).alias("payload"),
    ]
    if has_flags:
        cols += flags_columns(pl.col(_G_FLAGS), pl.col("_latency_form"))
    return ev.select(cols)


def _drop_report_annotations(events: pl.DataFrame, other_text: pl.Series, warnings: list) -> pl.DataFrame:
    """What `trace-cmd report -w` / `--debug` append to event lines (known by their summary / page-start
    lines among the other lines) is removed from the payloads, with a warning: it is not part of the events."""
    if other_text.str.contains(WAKEUP_SUMMARY_RE).any():
        suffix = events["payload"].str.contains(WAKEUP_LATENCY_SUFFIX_RE) & (events["event"] == "sched_switch")
        events = events.with_columns(pl.when(suffix).then(pl.col("payload").str.replace(WAKEUP_LATENCY_SUFFIX_RE, ""))
                                     .otherwise(pl.col("payload")).alias("payload"))
        warnings.append(f"trace-cmd report -w text: its wakeup latencies (' Latency: N usecs' after "
                        f"{int(suffix.sum())} sched_switch lines) and summary are not read")
    if other_text.str.contains(DEBUG_PAGE_RE).any():
        events = events.with_columns(pl.col("payload").str.replace(DEBUG_SUFFIX_RE, ""))
        warnings.append("trace-cmd report --debug text: its [delta:offset:size] after each event is not read")
    return events


def _join_continuations(lines: pl.DataFrame, others: pl.DataFrame, warnings: list) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Unrecognised lines that follow a free-text event (TEXT_PAYLOAD_EVENTS, with only such lines in
    between) are the rest of its text: appended to its payload after a newline. Returns the event lines
    with those payloads, and the unrecognised lines left (an error for the caller)."""
    kind = pl.col("_kind")
    owners = pl.concat([
        lines.filter(pl.col("_pos").is_not_null())
        .select("_line", pl.col(_G_EVENT).is_in(TEXT_PAYLOAD_EVENTS).fill_null(False).alias("_text")),
        others.select("_line", pl.when(kind != "bad").then(pl.lit(False)).alias("_text")),
    ]).sort("_line").with_columns(
        pl.when(pl.col("_text").is_not_null()).then(pl.col("_line")).forward_fill().alias("_owner"),
        pl.col("_text").forward_fill().fill_null(False).alias("_owner_text"),
    )
    more = owners.filter(pl.col("_text").is_null() & pl.col("_owner_text")).select("_line", "_owner")
    if more.is_empty():
        return lines, others.filter(kind == "bad")
    joined = (more.join(others.select("_line", "text"), on="_line").sort("_line")
              .group_by("_owner", maintain_order=True).agg(pl.col("text").str.join("\n").alias("_more")))
    warnings.append(f"{more.height} lines continue the text of {joined.height} console events (newlines "
                    f"inside kernel messages): joined to it")
    lines = lines.join(joined, left_on="_line", right_on="_owner", how="left").with_columns(
        pl.when(pl.col("_more").is_null()).then(pl.col("_rest"))
        .otherwise(pl.col("_rest") + "\n" + pl.col("_more")).alias("_rest")).drop("_more")
    return lines, others.filter(kind == "bad").join(more, on="_line", how="anti")


def _attach_stacks(events: pl.DataFrame, stacks: pl.DataFrame, path) -> pl.DataFrame:
    """`` => sym`` lines -> newline-joined ``stack`` text on the event line they follow."""
    if stacks.is_empty():
        return events
    owners = pl.concat([
        events.select("_line", pl.col("_line").alias("_owner")),
        stacks.select("_line", pl.lit(None, pl.Int64).alias("_owner"), pl.col("text")),
    ], how="diagonal").sort("_line").with_columns(pl.col("_owner").forward_fill())
    orphan = owners.filter(pl.col("_owner").is_null() & pl.col("text").is_not_null())
    if orphan.height:
        _raise_bad_line(path, orphan, "stack trace line before any event")
    joined = (owners.filter(pl.col("text").is_not_null())
              .group_by("_owner", maintain_order=True)
              .agg(pl.col("text").str.strip_chars().str.strip_prefix("=> ").str.join("\n").alias("stack")))
    return events.join(joined, left_on="_line", right_on="_owner", how="left")


INSTANCE_PREFIX_RE = rf"^({_NS}+):{_S}{{2,}}"


def _split_instance_prefix(groups: pl.DataFrame, meta: dict) -> pl.DataFrame:
    """trace-cmd report of a multi-buffer trace.dat prefixes instance-buffer lines with
    ``NAME:`` and padding before the task: split it off into ``_instance`` (comm never holds ": ")."""
    has = pl.col("_comm").str.contains(INSTANCE_PREFIX_RE)
    if not groups.select(has.any()).item():
        return groups
    groups = groups.with_columns(pl.when(has).then(pl.col("_comm").str.extract(INSTANCE_PREFIX_RE, 1))
                                 .alias("_instance"))
    groups = groups.with_columns(pl.when(has).then(pl.col("_comm").str.replace(INSTANCE_PREFIX_RE, ""))
                                 .otherwise(pl.col("_comm")).alias("_comm"))
    meta["instances"] = sorted(groups["_instance"].drop_nulls().unique().to_list())
    return groups


_FLAG_COLUMNS = ("common_flags", "common_preempt_count")


def _flags_meta(events: pl.DataFrame, groups: pl.DataFrame, meta: dict) -> None:
    """Which common_flags bits the text shows (text_flags.py), and rows whose flags did not decode."""
    latency_form = bool(groups["_latency_form"].any())
    meta["text_columns"]["flags_bits"] = LATENCY_FORM_FLAG_BITS if latency_form else KERNEL_FLAG_BITS
    present = groups[_G_FLAGS].is_not_null()
    undecoded = int((events["common_flags"].is_null() & present).sum())
    if latency_form:
        meta["text_columns"]["flags_note"] = (
            "flags column in trace-cmd report -l form: common_flags holds only the bits it prints "
            "(0x1f: irqs-off, need-resched, hardirq, softirq); PREEMPT_RESCHED, NMI and BH_OFF are not shown")
    if undecoded:
        meta.setdefault("warnings", []).append(
            f"{undecoded} flags columns did not decode (unknown letters): common_flags/common_preempt_count null")


def parse_lines(path, lines: pl.DataFrame, meta: dict) -> dict[str, pl.DataFrame]:
    """Frame of (``_line``, ``text``) -> raw tables keyed by event name; fills ``meta``.

    Raises TraceFormatError on the first unrecognised line, on binary bytes in a line, and when no
    line at all is recognisable. An input holding only headers/comments gives no tables (a quiet
    system's legitimate empty trace) and a warning.
    """
    warnings = meta.setdefault("warnings", [])
    binary = lines.filter(pl.col("text").str.contains(BINARY_RE))
    if binary.height:
        _raise_bad_line(path, binary, "binary (non-text) bytes in line")
    lines = _split_event_lines(lines)
    is_event = pl.col("_pos").is_not_null()
    others = lines.filter(~is_event).select("_line", "text")
    stripped = pl.col("text").str.strip_chars()
    others = others.with_columns(
        pl.when(stripped == "").then(pl.lit("blank"))
        .when(stripped.str.starts_with("#")).then(pl.lit("comment"))
        .when(pl.col("text").str.contains(HEADER_RE)).then(pl.lit("header"))
        .when(pl.col("text").str.contains(LOST_RE)).then(pl.lit("lost"))
        .when(pl.col("text").str.contains(STACK_RE)).then(pl.lit("stack"))
        .otherwise(pl.lit("bad")).alias("_kind")
    )
    bad = others.filter(pl.col("_kind") == "bad")
    if bad.height:
        lines, bad = _join_continuations(lines, others, warnings)
    if bad.height:
        tracer = others["text"].str.extract(r"^#\s*tracer:\s*(\S+)").drop_nulls()
        if tracer.len() and tracer[0] in ("function_graph", "wakeup", "wakeup_rt", "irqsoff", "preemptoff"):
            _raise_bad_line(path, bad, f"the {tracer[0]} tracer's own output format is not supported "
                                       f"(record trace events, or use trace.dat)")
        several = bad.filter(pl.col("text").str.contains(r"^\s*\S+: cpus=\d+\s*$"))
        if several.height:
            _raise_bad_line(path, several, "a `trace-cmd report` of several input files (a 'FILE: cpus=N' "
                                           "header each) is not supported: report each file on its own")
        _raise_bad_line(path, bad, "unrecognised line")
    groups = lines.filter(is_event)
    bad = groups.filter(pl.col(_G_EVENT).is_null() & pl.col(_G_STACK).is_null() & pl.col("_form_event").is_null()
                        & ~pl.col("_rest").str.contains(FUNCTION_PAYLOAD_RE))
    if bad.height:
        _raise_bad_line(path, bad, "unrecognised line")
    if groups.is_empty() and others.filter(pl.col("_kind") != "blank").is_empty():
        raise TraceFormatError(path, "no trace lines (only blank lines)", line=1, expected=EXPECTED_LINE)
    in_buffer = _header_meta(others.filter(pl.col("_kind").is_in(["comment", "header"])), meta)
    if in_buffer is not None and groups.height < in_buffer:
        warnings.append(f"the header says the ring buffer held {in_buffer} entries but the text has "
                        f"{groups.height} events: a truncated or filtered copy of the trace")
    lost = others.filter(pl.col("_kind") == "lost")
    if lost.height:
        _lost_meta(lost, meta)
    has_tgid = groups[_G_TGID].null_count() < groups.height
    groups = _split_instance_prefix(groups, meta)
    latency_us = int(groups[_G_US].is_not_null().sum())
    if latency_us:
        meta["time_origin"] = "buffer start"
        warnings.append(f"{latency_us} timestamps in the kernel's latency format (options/latency-format): "
                        f"microseconds since the ring buffer's start, not the trace clock; comm cut to 8 "
                        f"characters")
    raw_clock = int((groups[_G_FRAC].is_null() & groups[_G_US].is_null()).sum())
    if raw_clock:
        warnings.append(f"{raw_clock} timestamps have no fraction: kept as raw clock counts (ns only if "
                        f"the trace clock counts ns)")
    has_flags = groups[_G_FLAGS].null_count() < groups.height
    events = _event_frame(groups, has_tgid, has_flags)
    events = _drop_report_annotations(events, others["text"], warnings)
    events = _attach_stacks(events, others.filter(pl.col("_kind") == "stack"), path)
    old_markers = int((groups[_G_EVENT] == OLD_MARKER_EVENT).sum())
    if old_markers:
        warnings.append(f"{old_markers} lines with event name '0' (trace_marker writes as old 2.6/3.x kernels "
                        f"printed them: the print event's ip was 0) read as tracing_mark_write")
    failed = int(events["payload"].str.starts_with("[FAILED TO PARSE]").sum())
    if failed:
        warnings.append(f"{failed} events marked [FAILED TO PARSE] by the tool that wrote the text: "
                        f"their raw text is kept in column buf")
    if events.is_empty():
        warnings.append("trace holds no events (headers only)")
    meta["text_columns"] = {"tgid": has_tgid, "flags": bool(has_flags)}
    if has_flags:
        _flags_meta(events, groups, meta)
    tables: dict[str, pl.DataFrame] = {}
    for (name,), part in events.partition_by("event", as_dict=True, maintain_order=True).items():
        parsed = parse_event_payload(part.drop("event"), name).drop("_line")
        if "stack" in parsed.columns:
            if name in STACK_EVENT_NAMES.values():  # the frames are the event's content
                parsed = parsed.drop("buf", strict=False).rename({"stack": "buf"})
            elif parsed["stack"].null_count() == parsed.height:
                parsed = parsed.drop("stack")
        if has_flags:  # at the end, where trace.dat tables have them
            parsed = parsed.select(pl.exclude(_FLAG_COLUMNS), *_FLAG_COLUMNS)
        tables[name] = parsed
    switch = tables.get("sched_switch")
    if switch is not None and "prev_state" in switch.columns and switch["prev_state"].null_count():
        warnings.append(f"{switch['prev_state'].null_count()} sched_switch prev_state values are not "
                        f"state letters or numbers: left null")
    return tables
