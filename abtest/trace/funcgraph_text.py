"""The function_graph tracer's text -> tables ``funcgraph_entry`` / ``funcgraph_exit`` (trace-cmd's names).

Two writers print it, with the same right-hand part (kernel/trace/trace_functions_graph.c, libtraceevent's
function_graph plugin):

tracefs ``trace`` with ``current_tracer`` = function_graph (no event name on the line)::

    [ 360.774522 | ]  1)  [ bash-1234  | ]  [+] 10.123 us |      func() {
      TIME (funcgraph-abstime)   CPU  TASK-PID (funcgraph-proc)  DURATION   2 + 2 x depth spaces, then the call

``trace-cmd report`` of a function_graph trace.dat (an ordinary event line, the same part as payload)::

    bash-1234 [001] 360.774522: funcgraph_entry:       10.123 us   |      func();

The call part: ``func() {`` (entry of a function with children), ``func();`` (a leaf: the kernel and
trace-cmd print its entry and return records as this one line, with its duration), ``}`` / ``} /* func */``
(return; ``funcgraph-tail`` names the function), ``/* text */`` (another event or a trace_printk shown
inside the graph), ``==========>`` / ``<==========`` (interrupt entry / exit marks).

Rows, as trace-cmd report prints them: every ``{`` line and every leaf line is a ``funcgraph_entry`` row,
every ``}`` line a ``funcgraph_exit`` row. Columns: ts (Int64 ns; null when the text has no TIME column:
the tracer prints none by default), cpu (Int32), common_pid / common_comm (null without TASK-PID),
func (Utf8 symbol as printed; on exits from ``/* func */`` or else from the entry at the same depth and
CPU), depth (Int32), duration_ns (Int64; leaf entries and exits, from the printed microseconds, ns
resolution as printed), leaf (Boolean, entries only), overhead (Utf8: the mark before the duration:
``+`` > 10 us, ``!`` > 100 us, ``#`` > 1 ms, ``*`` > 10 ms, ``@`` > 100 ms, ``$`` > 1 s), retval (Utf8,
``funcgraph-retval``: ``ret=0x0`` / ``= -22`` as printed, without ``ret=``), args (Utf8, entries,
``funcgraph-args``: the argument list as printed, ``rq=0xffff..., prev=0x...``; null for ``()``), retaddr (Utf8,
entries, ``funcgraph-retaddr``: the caller ``__schedule+0x154/0x700``). Comment lines ``/* event: fields */``
become rows of that event (other comments: table ``funcgraph_comment``, column buf). Task-switch separators
(``------``, ``bash-1 => sleep-2``) and irq marks are counted in ``non_event_content``.
"""

from __future__ import annotations

import polars as pl

# the right-hand part (after the CPU / TASK-PID columns): [overhead] [duration us] | indent call
# groups: 1 overhead mark, 2 duration (us), 3 irq entry/exit mark, 4 indent, 5 the call
CALL_RE = r"^\s*(?:([+!#*@$])?\s*([0-9]+(?:\.[0-9]+)?)\s*us\s*|(={5,}>|<={5,})\s*)?\|(\s*)(.*?)\s*$"
# the tracer's own lines: [TIME |] CPU) [TASK-PID |] then the call part
TRACER_LINE_RE = (
    r"^\s*(?:([0-9]+)\.([0-9]{1,9})\s*\|\s*)?([0-9]+)\)\s+"
    r"(?:(\S(?:.*\S)?)-([0-9]+)\s*\|\s*)?(.*\|.*)$"
)
# ----------- separator lines and " 0)  bash-1234  =>  sleep-1235 " (funcgraph context switch)
SEPARATOR_RE = r"^\s*-{10,}\s*$"
SWITCH_RE = r"^\s*[0-9]+\)\s+\S.*-[0-9]+\s+=>\s+\S.*-[0-9]+\s*$"
IRQ_MARK_RE = r"(?:={5,}>|<={5,})"
EVENTS = ("funcgraph_entry", "funcgraph_exit")


def is_tracer_line(text: pl.Expr) -> pl.Expr:
    """Lines of the function_graph tracer's own output (not separators)."""
    return text.str.contains(TRACER_LINE_RE) & text.str.contains(r"\)\s.*\|")


# the call itself: FUNC[ [module]], its arguments (funcgraph-args: `(rq=0xffff..., prev=0x...)`, else `()`),
# then `{` (entry) or `;` (leaf), then an optional comment: `/* <-caller+0x154/0x700 */` (funcgraph-retaddr),
# `/* ret=0x0 */` (funcgraph-retval, recent kernels) or `/* = 0x0 */` (as 6.5 printed it), or both
# (`/* <-caller ret=0x1 */`)
_FUNC = r"([^\s(\[]+(?: \[[A-Za-z0-9_-]+\])?)"
ENTRY_RE = _FUNC + r"\((.*)\)\s*\{(?:\s*/\*\s*(.*?)\s*\*/)?$"
LEAF_RE = _FUNC + r"\((.*)\);(?:\s*/\*\s*(.*?)\s*\*/)?$"
# an exit: `}`, `} /* func */` (funcgraph-tail, or an exit whose entry was lost), `} /* func ret=0x0 */` /
# `} /* func = -22 */` (funcgraph-retval); old kernels print `} /* func() */`
EXIT_RE = r"^\}(?:\s*/\*\s*(.*?)\s*\*/)?$"
RETVAL_RE = r"(?:^|\s)(?:ret=|=\s*)(.+)$"
RETADDR_RE = r"(?:^|\s)<-(\S+)"


def _call_columns(call: pl.Expr) -> list[pl.Expr]:
    """The call part -> overhead, duration_ns, depth, kind ("entry" / "leaf" / "exit" / "comment" / "irq"),
    func, args, retaddr, retval, comment."""
    g = call.str.extract_groups(CALL_RE)
    body = g.struct.field("5")
    spaces = g.struct.field("4").str.len_chars()
    us = g.struct.field("2")
    int_part = us.str.extract(r"^([0-9]+)", 1).cast(pl.Int64, strict=False)
    frac = us.str.extract(r"\.([0-9]+)$", 1)
    ns = int_part * 1000 + pl.when(frac.is_null()).then(0).otherwise(
        frac.str.slice(0, 3).str.pad_end(3, "0").cast(pl.Int64, strict=False)
    )
    entry, leaf = body.str.extract_groups("^" + ENTRY_RE).struct, body.str.extract_groups("^" + LEAF_RE).struct
    tail = body.str.extract(EXIT_RE, 1)
    comment = body.str.extract(r"^/\*\s?(.*?)\s?\*/$", 1)
    kind = (
        pl.when(entry.field("1").is_not_null())
        .then(pl.lit("entry"))
        .when(leaf.field("1").is_not_null())
        .then(pl.lit("leaf"))
        .when(body.str.starts_with("}"))
        .then(pl.lit("exit"))
        .when(comment.is_not_null())
        .then(pl.lit("comment"))
        .when(g.struct.field("3").is_not_null() | body.str.contains(IRQ_MARK_RE))
        .then(pl.lit("irq"))
    )
    note = pl.coalesce(entry.field("3"), leaf.field("3"))  # the comment after an entry / a leaf
    exit_func = tail.str.replace(RETVAL_RE, "").str.strip_chars().str.strip_suffix("()")
    func = (
        pl.when(kind == "entry")
        .then(entry.field("1"))
        .when(kind == "leaf")
        .then(leaf.field("1"))
        .when(kind == "exit")
        .then(pl.when(exit_func != "").then(exit_func))
    )
    args = pl.coalesce(entry.field("2"), leaf.field("2"))
    retval = pl.coalesce(tail.str.extract(RETVAL_RE, 1), note.str.extract(RETVAL_RE, 1)).str.strip_chars()
    return [
        g.struct.field("1").alias("overhead"),
        ns.alias("duration_ns"),
        ((spaces - 2) // 2).clip(lower_bound=0).cast(pl.Int32).alias("depth"),
        kind.alias("_kind"),
        func.alias("func"),
        pl.when(args != "").then(args).alias("args"),
        note.str.extract(RETADDR_RE, 1).alias("retaddr"),
        retval.alias("retval"),
        comment.alias("_comment"),
    ]


def parse_tracer_lines(lines: pl.DataFrame) -> tuple[dict[str, pl.DataFrame], pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(``_line``, ``text``) of function_graph tracer lines -> (rows by event name, comment-event rows
    (_line, ts, cpu, common_pid, common_comm, event, payload), lines that did not parse, irq-mark lines)."""
    g = pl.col("text").str.extract_groups(TRACER_LINE_RE)
    df = lines.with_columns(g.alias("g")).unnest("g")
    sec, frac = pl.col("1"), pl.col("2")
    ts = sec.cast(pl.Int64, strict=False) * 1_000_000_000 + frac.str.pad_end(9, "0").cast(pl.Int64, strict=False)
    df = df.select(
        "_line",
        "text",
        ts.alias("ts"),
        pl.col("3").cast(pl.Int32, strict=False).alias("cpu"),
        pl.col("5").cast(pl.Int32, strict=False).alias("common_pid"),
        pl.col("4").alias("common_comm"),
        *_call_columns(pl.col("6")),
    )
    bad = df.filter(pl.col("_kind").is_null() | pl.col("cpu").is_null()).select("_line", "text")
    df = df.filter(pl.col("_kind").is_not_null() & pl.col("cpu").is_not_null())
    irq = df.filter(pl.col("_kind") == "irq").select("_line", "text")
    comments = df.filter(pl.col("_kind") == "comment")
    named = pl.col("_comment").str.extract(r"^([A-Za-z_][A-Za-z0-9_]*):\s", 1)
    as_events = comments.select(
        "_line",
        "ts",
        "cpu",
        "common_pid",
        "common_comm",
        pl.coalesce(named, pl.lit("funcgraph_comment")).alias("event"),
        pl.when(named.is_not_null())
        .then(pl.col("_comment").str.replace(r"^[A-Za-z0-9_]+:\s*", ""))
        .otherwise(pl.col("_comment"))
        .alias("payload"),
    )
    calls = df.filter(pl.col("_kind").is_in(["entry", "leaf", "exit"])).drop("text", "_comment")
    tables = {}
    entries = calls.filter(pl.col("_kind") != "exit")
    exits = calls.filter(pl.col("_kind") == "exit")
    if entries.height:
        tables["funcgraph_entry"] = entries
    if exits.height:
        tables["funcgraph_exit"] = exits
    return tables, as_events, bad, irq


def parse_report_payloads(part: pl.DataFrame, event: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """funcgraph_entry / funcgraph_exit event lines of `trace-cmd report` in the plugin form
    (``  0.123 us   |  func();``) -> (the same columns as the tracer's lines, payload dropped; the lines
    whose payload does not fit: (``_line``, ``payload``))."""
    df = part.with_columns(_call_columns(pl.col("payload")))
    want = ["exit"] if event == "funcgraph_exit" else ["entry", "leaf"]
    ok = pl.col("_kind").is_in(want).fill_null(False)
    return df.filter(ok).drop("payload", "_comment"), df.filter(~ok).select("_line", "payload")


def finish_tables(tables: dict[str, pl.DataFrame]) -> None:
    """funcgraph_entry / funcgraph_exit rows (with ``_kind``) -> their final columns: ``leaf`` on entries; an
    exit without ``/* func */`` takes the function of the last entry (with children) at its depth on its CPU."""
    entries, exits = tables.get("funcgraph_entry"), tables.get("funcgraph_exit")
    if entries is not None and "_kind" in entries.columns:
        tables["funcgraph_entry"] = entries.with_columns(
            pl.when(pl.col("_kind").is_not_null()).then(pl.col("_kind") == "leaf").alias("leaf")
        ).drop("_kind")
    if exits is not None and "_kind" in exits.columns:
        exits = exits.drop("_kind", "leaf", strict=False)
        if entries is not None and "_kind" in entries.columns and exits["func"].null_count():
            opened = (
                entries.filter(pl.col("_kind") == "entry")
                .select("_line", "cpu", "depth", pl.col("func").alias("_open"))
                .sort("_line")
            )
            exits = (
                exits.sort("_line")
                .join_asof(opened, on="_line", by=["cpu", "depth"], strategy="backward", check_sortedness=False)
                .with_columns(pl.coalesce("func", "_open").alias("func"))
                .drop("_open")
            )
        tables["funcgraph_exit"] = exits
