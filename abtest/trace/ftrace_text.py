"""Reader for the ftrace text family: bytes -> (raw tables keyed by event name, metadata).

Formats (``fmt`` from abtest.trace.detect; gzip/zip/zstd wrappers are already removed by readers.py):

ftrace-text     ``trace-cmd report`` output (with or without its ``version = 6`` / ``CPU N is empty`` /
                ``cpus=N`` header, plugin-formatted or ``-R`` raw), tracefs ``trace`` / ``trace_pipe``
                text with or without the TGID and flags columns, the function_graph tracer's text, and
                JavaScript-escaped systrace text (lines ending in ``\\n\\``).
atrace          ``atrace`` output: anything up to a ``TRACE:`` line is preamble (``capturing trace...
                done``, adb messages: counted in ``non_event_content``), then ftrace text; a ``ps`` listing
                after the trace (``atrace ...; ps -t``) becomes table ``process``.
atrace-z        ``atrace -z``: ``TRACE:`` then one zlib stream holding ftrace text, inflated under the limits
                of abtest.trace.limits. A stream whose line ends an ``adb shell`` pty turned into CRLF is
                repaired (meta ``text_quirks``). A truncated or corrupt stream is an error (never a
                partial trace).
systrace-html   systrace HTML: ``<script class="trace-data" type="application/text">`` blocks (the
                ``<!-- BEGIN TRACE -->`` section of newer systrace) and the legacy
                ``var linuxPerfData = "..."`` JavaScript string. Each block is classified by content:
                ftrace text (read; several are merged), ``PROCESS DUMP`` (ps listings -> table
                ``process``), JSON (systrace's metadata / clock-sync block: counted in
                ``non_event_content``; Chrome trace events in it are not imported and are counted in
                ``import_errors``), ``CGROUP DUMP`` and ``ATRACE_PROCESS_DUMP`` (counted), a BattOr log
                (power samples: abtest.trace.battor, via readers.py), base64+gzip blocks (decoded first).
                A file with no ftrace block is an error.

Raw tables: ``ts`` (Int64 ns), ``cpu`` (Int32), ``common_pid`` (Int32), ``common_comm`` (Utf8),
[``common_tgid`` (Int32, null for ``(-----)``) when the TGID column is present or a ps listing gave it],
then the event's fields (see abtest.trace.text_fields). Line parsing is in abtest.trace.text_lines;
unparseable content is accounted in meta ``import_errors`` (abtest.trace.import_log). A text is refused
only when it holds no event line at all, or more unparseable lines than events: it is not a trace.
"""

from __future__ import annotations

import base64
import binascii
import copy
import gzip
import hashlib
import html
import json
import re
import zlib
from pathlib import Path

import polars as pl

from abtest.trace import import_log
from abtest.trace.errors import TraceFormatError
from abtest.trace.inflate import inflate
from abtest.trace.limits import check_text_memory
from abtest.trace.text_lines import (
    EXPECTED_LINE,
    ends_with_newline,
    is_ascii,
    looks_js_escaped,
    parse_lines,
    printk_callers_warning,
    split_lines,
    unescape_js_lines,
)
from abtest.trace.text_process import PROCESS_SCHEMA, fill_from_process_table, merge_listings

_TRACE_DATA_BLOCK = re.compile(
    rb"<script\s+class=\"trace-data\"\s+type=\"application/text\"\s*>(.*?)</script>", re.S | re.I
)
_LEGACY_BLOCK = re.compile(rb"var\s+linuxPerfData\s*=\s*\"\\?\r?\n(.*?)(?:\";|</script>)", re.S)
_BEGIN_END = re.compile(rb"<!--\s*BEGIN TRACE\s*-->(.*?)<!--\s*END TRACE\s*-->", re.S)
_TRACE_LINE = re.compile(rb"^TRACE:[ \t\r]*\n", re.M)
JSON_PARSE_LIMIT = 64 << 20  # larger JSON blocks are counted by their "ph" keys instead of parsed
# systrace agents' block titles (catapult systrace/tracing_agents): blocks that are not ftrace text
_CGROUP_TITLE = re.compile(rb"^\s*(?:# tracer: ?\r?\n)?CGROUP DUMP\s*\n")
_ATRACE_DUMP_TITLE = re.compile(rb"^\s*ATRACE_PROCESS_DUMP\s*\n")
_BATTOR_TITLE = re.compile(rb"^\s*# BattOr")
_PROCESS_DUMP_TITLE = re.compile(rb"^\s*PROCESS DUMP\s*\n")
# A plain ftrace text longer than TEXT_BLOCK_BYTES is read block by block (issue 43: a 10 M-event, 1 GB text
# read whole peaked at ~7 GB: the line frame, its regex captures and the per-event frames are several times the
# text): blocks of about TEXT_BLOCK_BYTES, each cut before an event line that follows an event line (never inside
# a stack, a multi-line message or a ps listing), are parsed and converted on their own and the tables
# concatenated (without copying). Line numbers, import accounting and the not-a-trace rule stay those of the
# whole file. Measured in docs/robustness.md ("Long text traces").
TEXT_BLOCK_BYTES = 32 << 20
# a line that looks like an event line ("... [CPU] ... SEC.FRAC: "), searched from a block's target end
_EVENT_LINE_START = re.compile(rb"\n(?=[^\n]{0,4096}?\[[0-9]{1,5}\][^\n]{0,512}?[0-9]\.[0-9]{1,9}: )")
_EVENT_LINE = re.compile(rb"[^\n]{0,4096}?\[[0-9]{1,5}\][^\n]{0,512}?[0-9]\.[0-9]{1,9}: ")


def read(path, data, fmt: str) -> tuple[dict, dict]:
    """Decode one ftrace-text-family trace. ``data``: bytes-like (bytes or mmap).

    meta["_battor_texts"]: BattOr logs found in systrace HTML blocks, [(bytes, where)], for readers.py
    (popped there before the metadata is stored)."""
    path = Path(path)
    meta: dict = {"format": fmt, "warnings": [], "clock": None}
    blocks = fmt == "ftrace-text" and len(data) > TEXT_BLOCK_BYTES
    check_text_memory(path, len(data), blocks=blocks)
    if blocks:
        tables = _parse_text_blocks(path, data, meta)
        refuse_if_not_a_trace(path, tables, meta)
        _finish_process(tables, meta)
        _finish_meta(meta)
        return tables, meta
    raw = bytes(data)
    if fmt == "ftrace-text":
        tables = _parse_text(path, raw, 1, meta)
    elif fmt == "atrace":
        body, first_line = _after_trace_line(path, raw, meta)
        tables = _parse_text(path, body, first_line, meta)
    elif fmt == "atrace-z":
        body, after, after_line = _inflate_atrace(path, raw, meta)
        tables = _parse_text(path, body, 1, meta, source="inflated atrace -z stream")
        if after:  # text after the stream: `atrace -z ...; ps -t` puts the thread listing there
            for name, df in _parse_text(path, after, after_line, meta).items():
                tables[name] = pl.concat([tables[name], df], how="diagonal_relaxed") if name in tables else df
    elif fmt == "systrace-html":
        tables = _read_html(path, raw, meta)
    else:
        raise TraceFormatError(path, f"ftrace_text cannot read format {fmt!r}")
    refuse_if_not_a_trace(path, tables, meta)
    _finish_process(tables, meta)
    _finish_meta(meta)
    return tables, meta


def _block_ends(data, size: int) -> list[int]:
    """End offsets of the blocks of a long text: each ends with a line end followed by an event line and preceded
    by one, at or after a multiple of `size` (the last block ends at the end of the data)."""
    ends, pos, n = [], 0, len(data)
    while n - pos > size:
        target = pos + size
        end = None
        for _ in range(64):  # a few candidates: the line before the cut must be an event line too
            m = _EVENT_LINE_START.search(data, target, min(n, target + (8 << 20)))
            if m is None:
                break
            start = data.rfind(b"\n", pos, m.start()) + 1
            if start > pos and _EVENT_LINE.match(data, start, m.start()):
                end = m.start() + 1
                break
            target = m.start() + 1
        if end is None:
            break
        ends.append(end)
        pos = end
    ends.append(n)
    return ends


def _parse_text_blocks(path, data, meta: dict, printk_names: frozenset[str] | None = None) -> dict[str, pl.DataFrame]:
    """A long plain text (see TEXT_BLOCK_BYTES): block by block, the tables concatenated.

    A plain name is read as a trace_printk caller for the whole text (abtest.trace.text_lines.KEY_VALUE_RE): when
    some block read it so and another as an event (that block held none of its free-text lines), the text is read
    again with the names every block decided (`printk_names`), as the whole text read at once would have."""
    meta_before = copy.deepcopy(meta) if printk_names is None else None
    parts: dict[str, list[pl.DataFrame]] = {}
    columns: dict = {}
    first_line, start, events = 1, 0, 0
    for end in _block_ends(data, TEXT_BLOCK_BYTES):
        body = bytes(data[start:end])
        if hasattr(data, "madvise"):  # an mmap: the block's pages leave this process' memory once copied
            import mmap

            page = mmap.PAGESIZE
            lo, hi = start // page * page, end // page * page
            if hi > lo:
                data.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
        before = meta.get("_text_event_lines", 0)
        blocks = _parse_text(
            path, body, first_line, meta, entries_check=False, printk_names=printk_names or frozenset()
        )
        for name, df in blocks.items():
            parts.setdefault(name, []).append(df)
        events += meta.get("_text_event_lines", 0) - before
        cols = meta.get("text_columns") or {}
        columns = {**columns, **cols, **{k: bool(columns.get(k)) or bool(cols.get(k)) for k in ("tgid", "flags")}}
        first_line += body.count(b"\n")
        start = end
        del body
    decided = frozenset(meta.get("_printk_plain_callers", ()))
    if meta_before is not None and decided & parts.keys():
        meta.clear()
        meta.update(meta_before)
        return _parse_text_blocks(path, data, meta, decided)
    if columns:
        meta["text_columns"] = columns
    in_buffer = meta.get("entries_in_buffer")
    if in_buffer is not None and events < in_buffer:
        meta["warnings"].append(
            f"the header says the ring buffer held {in_buffer} entries but the text has "
            f"{events} events: a truncated or filtered copy of the trace"
        )
    return {n: _concat_blocks(dfs) for n, dfs in parts.items()}


def _concat_blocks(dfs: list[pl.DataFrame]) -> pl.DataFrame:
    """One event's tables of every block, without copying, in the column order of the widest (a column only some
    blocks have, such as ``stack``, where the whole text's table has it)."""
    if len(dfs) == 1:
        return dfs[0]
    order = list(max(dfs, key=lambda df: df.width).columns)
    order += [c for df in dfs for c in df.columns if c not in order]
    return pl.concat(dfs, how="diagonal_relaxed", rechunk=False).select(order)


def _parse_text(
    path,
    body: bytes,
    first_line: int,
    meta: dict,
    source: str | None = None,
    entries_check: bool = True,
    printk_names: frozenset[str] = frozenset(),
) -> dict[str, pl.DataFrame]:
    padded = len(body) - len(body.rstrip(b"\x00")) if body[-1:] == b"\x00" else 0
    if padded:  # NUL padding after the text (a file or buffer padded to a block size): skipped, counted
        body = body[: len(body) - padded]
        import_log.add_skipped(meta, "nul_padding", padded, [import_log.example(None, offset=len(body), source=source)])
    quirks = meta.setdefault("text_quirks", [])
    lines = split_lines(body, first_line, quirks)
    complete = ends_with_newline(body)
    if looks_js_escaped(lines):
        # the string's last line ends with an escaped newline and no line continuation: systrace's writer closes
        # the string that way after its final `trace_event_clock_sync: parent_ts=0.0\n` line: it is complete
        complete = complete or _ends_with_escaped_newline(lines)
        lines = unescape_js_lines(lines)
        quirks.append("JavaScript-escaped string (lines end in '\\n\\'): unescaped")
    if not quirks:
        meta.pop("text_quirks")
    where = f"{path} ({source})" if source else path
    return parse_lines(
        where,
        lines,
        meta,
        source=source,
        complete=complete,
        ascii_only=is_ascii(body),
        entries_check=entries_check,
        printk_names=printk_names,
    )


def _ends_with_escaped_newline(lines: pl.DataFrame) -> bool:
    """The last non-blank line of a JavaScript-escaped text ends with ``\\n`` (a line end in the string)."""
    last = lines.filter(pl.col("text").str.strip_chars() != "").tail(1)["text"]
    return last.len() > 0 and last[0].rstrip().endswith("\\n")


# lines that are nothing a trace file holds (as opposed to a bad value inside an event line, or a ps
# listing row that does not fit its header): these decide whether a text is a trace at all
_NOT_TRACE_KINDS = frozenset(
    {"unrecognised_line", "malformed_event_line", "binary_line", "line_too_long", "truncated_line", "continuation_line"}
)


def refuse_if_not_a_trace(path, tables: dict, meta: dict) -> None:
    """A text with unrecognisable lines and no event line, or with more unrecognisable lines than events, is
    not a trace: refused, naming the first such line."""
    events = meta.pop("_text_event_lines", 0)
    errors = sum(e["count"] for k, e in (meta.get("import_errors") or {}).items() if k in _NOT_TRACE_KINDS)
    if errors == 0 or (events and errors <= events):
        return
    entries = [e for k, e in (meta.get("import_errors") or {}).items() if k in _NOT_TRACE_KINDS]
    firsts = [ex for e in entries for ex in e["examples"][:1] if "line" in ex]
    first = min(firsts, key=lambda ex: ex["line"]) if firsts else {}
    why = (
        "no ftrace event line at all"
        if not events
        else f"{errors} of {errors + events} lines do not parse (more than the {events} event lines)"
    )
    detail = f" ({first['detail']})" if first.get("detail") else ""
    where = f" ({first['source']})" if first.get("source") else ""
    raise TraceFormatError(
        f"{path}{where}",
        f"not a trace: {why}; first unparseable line{detail}: {first.get('text', '')[:80]!r}",
        line=first.get("line"),
        expected=EXPECTED_LINE,
    )


def _after_trace_line(path, raw: bytes, meta: dict) -> tuple[bytes, int]:
    """atrace preamble: skip through the ``TRACE:`` line; return (body, 1-based line of body start)."""
    m = _TRACE_LINE.search(raw)
    if m is None:
        raise TraceFormatError(path, "no 'TRACE:' line", line=1, expected="atrace output ('TRACE:' then ftrace text)")
    _count_preamble(raw[: m.end()], meta)
    return raw[m.end() :], raw[: m.end()].count(b"\n") + 1


def _count_preamble(preamble: bytes, meta: dict) -> None:
    """The lines up to and with ``TRACE:`` (``capturing trace... done``, adb messages): non_event_content."""
    lines = preamble.split(b"\n")[:-1]
    import_log.add_skipped(
        meta,
        "atrace_preamble",
        len(lines),
        [import_log.example(t.strip(), line=i + 1) for i, t in enumerate(lines[:3])],
    )


def _inflate_atrace(path, raw: bytes, meta: dict) -> tuple[bytes, bytes, int]:
    m = _TRACE_LINE.search(raw)
    if m is None:
        raise TraceFormatError(path, "no 'TRACE:' line", offset=0, expected="'TRACE:' then a zlib stream")
    start = m.end()
    _count_preamble(raw[: m.end()], meta)
    what = "atrace -z zlib stream"
    try:
        out = inflate(path, raw[start:], "zlib", what=what, base_offset=start)
    except TraceFormatError as first_error:
        # `adb shell` through a pty turns every \n of the binary stream into \r\n (catapult's systrace
        # undoes it the same way): repair and retry once
        if b"\r\n" not in raw[start:] or "inflates beyond" in str(first_error):
            raise
        try:
            out = inflate(path, raw[start:].replace(b"\r\n", b"\n"), "zlib", what=what, base_offset=start)
        except TraceFormatError:
            raise first_error from None
        meta.setdefault("text_quirks", []).append("atrace -z stream with CRLF line ends (adb pty): repaired")
    end = start + out.consumed
    rest = out.trailing.strip()
    meta["inflated_size"] = len(out.data)
    if rest and _is_text(rest):
        return out.data, out.trailing, raw[:end].count(b"\n") + 1
    if rest:
        meta["warnings"].append(f"{len(rest)} bytes after the atrace -z zlib stream ignored")
        import_log.add_skipped(meta, "trailing_bytes", len(rest), [import_log.example(rest[:40], offset=end)])
    return out.data, b"", 0


def _is_text(data: bytes) -> bool:
    """Mostly printable (the same test as format detection)."""
    sample = data[:4096]
    printable = sum(1 for b in sample if b in (9, 10, 13) or 32 <= b < 127 or b >= 128)
    return printable >= 0.95 * len(sample)


def _html_blocks(raw: bytes) -> list[tuple[int, bytes]]:
    """(byte offset, content) of every trace block in a systrace HTML file, in file order."""
    blocks = [(m.start(1), m.group(1)) for m in _TRACE_DATA_BLOCK.finditer(raw)]
    blocks += [(m.start(1), m.group(1)) for m in _LEGACY_BLOCK.finditer(raw)]
    if not blocks:  # BEGIN/END TRACE markers around bare text
        blocks = [(m.start(1), m.group(1)) for m in _BEGIN_END.finditer(raw)]
    return sorted(blocks)


def _decode_block(content: bytes) -> tuple[str, bytes]:
    """Classify a block: (kind, content) with kind one of "json", "ftrace", "process_dump" (ps listings, read
    like text), "battor", "cgroup", "atrace_process_dump", "empty", "other" (undecodable base64)."""
    s = content.strip()
    if not s:
        return "empty", b""
    if s[:1] in (b"{", b"["):
        return "json", s
    if _BATTOR_TITLE.match(s):
        return "battor", s
    if _CGROUP_TITLE.match(content):
        return "cgroup", s
    if _ATRACE_DUMP_TITLE.match(content):
        return "atrace_process_dump", s
    if _PROCESS_DUMP_TITLE.match(content):
        return "process_dump", content
    if re.fullmatch(rb"[A-Za-z0-9+/=\s]+", s[:4096] or b"-") and s.startswith(b"H4sI"):
        try:  # base64-encoded gzip (some systrace builds)
            return _decode_block(gzip.decompress(base64.b64decode(s)))
        except (binascii.Error, OSError, EOFError, zlib.error):
            return "other", b""
    if (b"&lt;" in s or b"&gt;" in s or b"&amp;" in s) and b"<...>" not in s and b"<idle>" not in s:
        return "ftrace", html.unescape(content.decode("utf-8", "replace")).encode()  # HTML-escaped text
    return "ftrace", content


def _json_size(value) -> int:
    """Length of a JSON value's text; a value nested too deeply to serialise counts as too large."""
    try:
        return len(json.dumps(value, default=str))
    except (RecursionError, ValueError):
        return 1 << 62


def _json_block(content: bytes, line: int, meta: dict) -> None:
    """systrace's JSON block: metadata and clock-sync records (counted, metadata kept in
    meta["systrace_metadata"]); Chrome trace events in it are not imported (import_errors)."""
    events: list = []
    if len(content) <= JSON_PARSE_LIMIT:
        try:
            doc = json.loads(content)
        except ValueError:
            import_log.add_error(meta, "unparsed_json_block", 1, [import_log.example(content[:80], line=line)])
            return
        except RecursionError:  # nested deeper than the interpreter's recursion limit
            import_log.add_error(
                meta,
                "unparsed_json_block",
                1,
                [import_log.example(content[:80], line=line, detail="JSON nested too deeply to parse")],
            )
            return
        events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc if isinstance(doc, list) else []
        if isinstance(doc, dict) and isinstance(doc.get("metadata"), dict):
            small = {k: v for k, v in doc["metadata"].items() if _json_size(v) < 2048}
            meta.setdefault("systrace_metadata", {}).update(small)
        phases = [e.get("ph") if isinstance(e, dict) else None for e in events]
        names = [e.get("name") if isinstance(e, dict) else None for e in events]
    else:  # too large to parse: count the events by their phase keys
        phases = [p.decode() for p in re.findall(rb'"ph"\s*:\s*"([^"]*)"', content)]
        names = [None] * len(phases)
    meta_events = sum(1 for p, n in zip(phases, names) if p == "M" or n == "clock_sync")
    import_log.add_skipped(meta, "json_metadata", max(meta_events, 1), [import_log.example(content[:120], line=line)])
    other = len(phases) - meta_events
    if other:
        import_log.add_error(
            meta,
            "json_trace_events",
            other,
            [
                import_log.example(
                    content[:120], line=line, detail="Chrome JSON trace events in a systrace block are not imported"
                )
            ],
        )


def _read_html(path, raw: bytes, meta: dict) -> dict[str, pl.DataFrame]:
    blocks = _html_blocks(raw)
    if not blocks:
        raise TraceFormatError(
            path,
            "systrace HTML holds no trace block",
            offset=0,
            expected='a <script class="trace-data" type="application/text"> block '
            "or a 'var linuxPerfData = \"...\"' string with ftrace text",
        )
    merged: dict[str, list[pl.DataFrame]] = {}
    kinds: dict[str, int] = {}
    seen: set[bytes] = set()
    for offset, content in blocks:
        line = raw[:offset].count(b"\n") + 1
        digest = hashlib.blake2b(content, digest_size=16).digest()
        if digest in seen:  # the same block twice (a viewer that embedded the data again): read once
            import_log.add_skipped(meta, "duplicate_block", 1, [import_log.example(content[:80], line=line)])
            continue
        seen.add(digest)
        kind, body = _decode_block(content)
        kinds[kind] = kinds.get(kind, 0) + 1
        if kind == "json":
            _json_block(body, line, meta)
            continue
        if kind == "battor":
            meta.setdefault("_battor_texts", []).append((body, f"systrace HTML block at line {line}"))
            continue
        if kind in ("cgroup", "atrace_process_dump"):
            import_log.add_skipped(
                meta, f"{kind}_block", body.count(b"\n") + 1, [import_log.example(body[:80], line=line)]
            )
            continue
        if kind == "empty":
            meta["warnings"].append(f"empty trace block at line {line}")
            continue
        if kind == "other":
            import_log.add_error(meta, "undecodable_block", 1, [import_log.example(content[:80], line=line)])
            continue
        if body[:1] == b"\n":  # the block's text starts on the line after the tag
            body, line = body[1:], line + 1
        for name, df in _parse_text(path, body, line, meta).items():
            merged.setdefault(name, []).append(df)
    if kinds.get("ftrace", 0) == 0:
        what = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
        raise TraceFormatError(
            path,
            f"systrace HTML holds {len(blocks)} trace block(s) but none with ftrace "
            f"text ({what}; JSON blocks hold Chrome trace events or metadata, not ftrace)",
            offset=0,
            expected="a trace-data block with ftrace text",
        )
    meta["html_blocks"] = {"ftrace": kinds["ftrace"], "skipped": len(blocks) - kinds["ftrace"]}
    meta["html_block_kinds"] = kinds
    return {n: pl.concat(dfs, how="diagonal_relaxed") if len(dfs) > 1 else dfs[0] for n, dfs in merged.items()}


def _finish_process(tables: dict, meta: dict) -> None:
    """One ``process`` table from every listing in the file (the last listing of a thread wins); task names
    and thread groups filled from it."""
    process = tables.pop("process", None)
    if process is None or process.is_empty():
        return
    process = merge_listings(process).cast(PROCESS_SCHEMA)
    fill_from_process_table(tables, process, meta)
    tables["process"] = process


def _finish_meta(meta: dict) -> None:
    printk_callers_warning(meta)
    meta.pop("_report_text", None)
    per_cpu = meta.setdefault("lost_events_per_cpu", {})
    lost = sum(per_cpu.values())
    overwritten = meta.get("overwritten_events", 0)
    meta["lost_events"] = lost + overwritten
    if lost:
        meta["warnings"].append(
            f"{lost} events lost (lost-event lines) on CPUs {sorted(per_cpu)}: per-CPU counts in lost_events_per_cpu"
        )
    if overwritten:
        meta["warnings"].append(
            f"ring buffer overwritten: entries-written {meta['entries_written']} > entries-in-buffer "
            f"{meta['entries_in_buffer']}, {overwritten} oldest events lost"
        )
