"""Reader for the ftrace text family: bytes -> (raw tables keyed by event name, metadata).

Formats (``fmt`` from abtest.trace.detect; gzip/zip/zstd wrappers are already removed by readers.py):

ftrace-text     ``trace-cmd report`` output (with or without its ``version = 6`` / ``CPU N is empty`` /
                ``cpus=N`` header, plugin-formatted or ``-R`` raw), tracefs ``trace`` / ``trace_pipe``
                text with or without the TGID and flags columns, and JavaScript-escaped systrace text
                (lines ending in ``\\n\\``).
atrace          ``atrace`` output: anything up to a ``TRACE:`` line is preamble, then ftrace text.
atrace-z        ``atrace -z``: ``TRACE:`` then one zlib stream holding ftrace text. A truncated or
                corrupt stream is an error (never a partial trace).
systrace-html   systrace HTML: ``<script class="trace-data" type="application/text">`` blocks (the
                ``<!-- BEGIN TRACE -->`` section of newer systrace) and the legacy
                ``var linuxPerfData = "..."`` JavaScript string. Blocks holding JSON (Chrome trace
                events) are skipped with a warning in ``meta["warnings"]``; a file with no ftrace block
                is an error.

Raw tables: ``ts`` (Int64 ns), ``cpu`` (Int32), ``common_pid`` (Int32), ``common_comm`` (Utf8),
[``common_tgid`` (Int32, null for ``(-----)``) when the TGID column is present], then the event's
fields (see abtest.trace.text_fields). Line parsing is in abtest.trace.text_lines.
"""
from __future__ import annotations

import base64
import binascii
import gzip
import re
import zlib
from pathlib import Path

import polars as pl

from abtest.trace.errors import TraceFormatError
from abtest.trace.text_lines import looks_js_escaped, parse_lines, split_lines, unescape_js_lines

_TRACE_DATA_BLOCK = re.compile(
    rb"<script\s+class=\"trace-data\"\s+type=\"application/text\"\s*>(.*?)</script>", re.S | re.I)
_LEGACY_BLOCK = re.compile(rb"var\s+linuxPerfData\s*=\s*\"\\?\r?\n(.*?)(?:\";|</script>)", re.S)
_BEGIN_END = re.compile(rb"<!--\s*BEGIN TRACE\s*-->(.*?)<!--\s*END TRACE\s*-->", re.S)


def read(path, data, fmt: str) -> tuple[dict[str, pl.DataFrame], dict]:
    """Decode one ftrace-text-family trace. ``data``: bytes-like (bytes or mmap)."""
    path = Path(path)
    raw = bytes(data)
    meta: dict = {"format": fmt, "warnings": [], "clock": None}
    if fmt == "ftrace-text":
        tables = _parse_text(path, raw, 1, meta)
    elif fmt == "atrace":
        body, first_line = _after_trace_line(path, raw)
        tables = _parse_text(path, body, first_line, meta)
    elif fmt == "atrace-z":
        body = _inflate_atrace(path, raw, meta)
        tables = _parse_text(f"{path} (inflated atrace -z stream)", body, 1, meta)
    elif fmt == "systrace-html":
        tables = _read_html(path, raw, meta)
    else:
        raise TraceFormatError(path, f"ftrace_text cannot read format {fmt!r}")
    _finish_meta(meta)
    return tables, meta


def _parse_text(path, body: bytes, first_line: int, meta: dict) -> dict[str, pl.DataFrame]:
    lines = split_lines(body, first_line)
    if looks_js_escaped(lines):
        lines = unescape_js_lines(lines)
        meta.setdefault("text_quirks", []).append("JavaScript-escaped string (lines end in '\\n\\'): unescaped")
    return parse_lines(path, lines, meta)


def _after_trace_line(path, raw: bytes) -> tuple[bytes, int]:
    """atrace preamble: skip through the ``TRACE:`` line; return (body, 1-based line of body start)."""
    m = re.search(rb"^TRACE:[ \t]*\r?\n", raw, re.M)
    if m is None:
        raise TraceFormatError(path, "no 'TRACE:' line", line=1, expected="atrace output ('TRACE:' then ftrace text)")
    return raw[m.end():], raw[: m.end()].count(b"\n") + 1


def _inflate_atrace(path, raw: bytes, meta: dict) -> bytes:
    m = re.search(rb"^TRACE:[ \t]*\r?\n", raw, re.M)
    if m is None:
        raise TraceFormatError(path, "no 'TRACE:' line", offset=0, expected="'TRACE:' then a zlib stream")
    start = m.end()
    inflater = zlib.decompressobj()
    try:
        body = inflater.decompress(raw[start:])
    except zlib.error as e:
        raise TraceFormatError(path, f"corrupt atrace -z zlib stream ({e})", offset=start,
                               expected="a complete zlib stream after 'TRACE:'") from e
    if not inflater.eof:
        raise TraceFormatError(path, f"truncated atrace -z zlib stream: it ends after {len(raw) - start} "
                               f"compressed bytes without its end marker ({len(body)} bytes inflated so far)",
                               offset=len(raw), expected="a complete zlib stream after 'TRACE:'")
    rest = inflater.unused_data.strip()
    if rest:
        meta["warnings"].append(f"{len(rest)} bytes after the atrace -z zlib stream ignored")
    meta["inflated_size"] = len(body)
    return body


def _html_blocks(raw: bytes) -> list[tuple[int, bytes]]:
    """(byte offset, content) of every trace block in a systrace HTML file, in file order."""
    blocks = [(m.start(1), m.group(1)) for m in _TRACE_DATA_BLOCK.finditer(raw)]
    blocks += [(m.start(1), m.group(1)) for m in _LEGACY_BLOCK.finditer(raw)]
    if not blocks:  # BEGIN/END TRACE markers around bare text
        blocks = [(m.start(1), m.group(1)) for m in _BEGIN_END.finditer(raw)]
    return sorted(blocks)


def _decode_block(content: bytes) -> tuple[str, bytes]:
    """Classify a block: ("json", b""), ("ftrace", text) or ("other", b"")."""
    s = content.strip()
    if s[:1] in (b"{", b"["):
        return "json", b""
    if re.fullmatch(rb"[A-Za-z0-9+/=\s]+", s[:4096] or b"-") and s.startswith(b"H4sI"):
        try:  # base64-encoded gzip (some systrace builds)
            return _decode_block(gzip.decompress(base64.b64decode(s)))
        except (binascii.Error, OSError, EOFError, zlib.error):
            return "other", b""
    return "ftrace", content


def _read_html(path, raw: bytes, meta: dict) -> dict[str, pl.DataFrame]:
    blocks = _html_blocks(raw)
    if not blocks:
        raise TraceFormatError(path, "systrace HTML holds no trace block", offset=0,
                               expected="a <script class=\"trace-data\" type=\"application/text\"> block "
                                        "or a 'var linuxPerfData = \"...\"' string with ftrace text")
    merged: dict[str, list[pl.DataFrame]] = {}
    parsed = 0
    for offset, content in blocks:
        line = raw[:offset].count(b"\n") + 1
        kind, body = _decode_block(content)
        if kind != "ftrace":
            what = "JSON (Chrome trace events)" if kind == "json" else "undecodable data"
            meta["warnings"].append(f"skipped trace block at line {line}: it holds {what}, not ftrace text")
            continue
        if not body.strip():
            meta["warnings"].append(f"empty trace block at line {line}")
            continue
        parsed += 1
        for name, df in _parse_text(path, body, line, meta).items():
            merged.setdefault(name, []).append(df)
    if parsed == 0:
        raise TraceFormatError(path, f"systrace HTML holds {len(blocks)} trace block(s) but none with ftrace "
                               f"text ({'; '.join(meta['warnings'])})", offset=0,
                               expected="a trace-data block with ftrace text")
    meta["html_blocks"] = {"ftrace": parsed, "skipped": len(blocks) - parsed}
    return {n: pl.concat(dfs, how="diagonal_relaxed") if len(dfs) > 1 else dfs[0] for n, dfs in merged.items()}


def _finish_meta(meta: dict) -> None:
    per_cpu = meta.setdefault("lost_events_per_cpu", {})
    lost = sum(per_cpu.values())
    overwritten = meta.get("overwritten_events", 0)
    meta["lost_events"] = lost + overwritten
    if lost:
        meta["warnings"].append(f"{lost} events lost (lost-event lines) on CPUs "
                                f"{sorted(per_cpu)}: per-CPU counts in lost_events_per_cpu")
    if overwritten:
        meta["warnings"].append(
            f"ring buffer overwritten: entries-written {meta['entries_written']} > entries-in-buffer "
            f"{meta['entries_in_buffer']}, {overwritten} oldest events lost")
