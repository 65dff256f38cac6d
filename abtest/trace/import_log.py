"""Import accounting for every reader, in the manner of Perfetto's import stats.

Two meta keys, both ``{kind: {"count": n, "examples": [example, ...]}}``:

``import_errors``
    content the reader could not parse: an unrecognised line, a damaged event line, a number out of range,
    a truncated last line, a trace.dat event whose format does not parse, a perfetto packet kind that is
    not imported... Each kind counts every occurrence; ``examples`` holds the first few
    (``MAX_EXAMPLES``), in file order.
``non_event_content``
    content the reader recognised as not being events and skipped or used: atrace preambles, ``ps``
    listings and systrace PROCESS DUMP blocks (used: table ``process``), systrace JSON metadata blocks,
    NUL padding, trace-cmd statistics banners. Counted the same way, so nothing a file holds goes
    unaccounted.

An example is a dict with ``text`` (the start of the content, at most ``EXAMPLE_CHARS`` characters) and
where it was: ``line`` (1-based line of the file; of the inflated stream for atrace -z, of the member for
archives, see ``source``), or ``offset`` (byte offset), and optionally ``source`` (a zip member, the
inflated atrace -z stream) or ``detail`` (why it did not parse).

Kinds used by the readers are listed in docs/ingest-policy.md.
"""

from __future__ import annotations

import polars as pl

MAX_EXAMPLES = 5
EXAMPLE_CHARS = 160

IMPORT_ERRORS = "import_errors"
NON_EVENT_CONTENT = "non_event_content"


def example(
    text: str | bytes | None = None,
    *,
    line: int | None = None,
    offset: int | None = None,
    source: str | None = None,
    detail: str | None = None,
) -> dict:
    """One example entry (see the module docstring)."""
    out: dict = {}
    if line is not None:
        out["line"] = int(line)
    if offset is not None:
        out["offset"] = int(offset)
    if source:
        out["source"] = source
    if text is not None:
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        out["text"] = text[:EXAMPLE_CHARS]
    if detail:
        out["detail"] = detail
    return out


def add(meta: dict, key: str, kind: str, count: int, examples: list[dict] = ()) -> None:
    """Add `count` occurrences of `kind` (and up to MAX_EXAMPLES examples) under meta[key]."""
    if count <= 0:
        return
    entry = meta.setdefault(key, {}).setdefault(kind, {"count": 0, "examples": []})
    entry["count"] += int(count)
    room = MAX_EXAMPLES - len(entry["examples"])
    if room > 0:
        entry["examples"].extend(list(examples)[:room])


def add_error(meta: dict, kind: str, count: int, examples: list[dict] = ()) -> None:
    """Count content that could not be parsed (meta["import_errors"])."""
    add(meta, IMPORT_ERRORS, kind, count, examples)


def add_skipped(meta: dict, kind: str, count: int, examples: list[dict] = ()) -> None:
    """Count content recognised as not being events (meta["non_event_content"])."""
    add(meta, NON_EVENT_CONTENT, kind, count, examples)


def line_examples(lines: pl.DataFrame, *, source: str | None = None, detail: str | None = None) -> list[dict]:
    """The first MAX_EXAMPLES rows of a (``_line``, ``text``) frame as examples."""
    return [
        example(text, line=ln, source=source, detail=detail)
        for ln, text in lines.select("_line", "text").head(MAX_EXAMPLES).iter_rows()
    ]


def add_error_lines(
    meta: dict, kind: str, lines: pl.DataFrame, *, source: str | None = None, detail: str | None = None
) -> None:
    """Count the rows of a (``_line``, ``text``) frame as import errors of `kind`."""
    add_error(meta, kind, lines.height, line_examples(lines, source=source, detail=detail))


def add_skipped_lines(meta: dict, kind: str, lines: pl.DataFrame, *, source: str | None = None) -> None:
    """Count the rows of a (``_line``, ``text``) frame as recognised non-event content of `kind`."""
    add_skipped(meta, kind, lines.height, line_examples(lines, source=source))


def merge(into: dict, other: dict) -> None:
    """Add the import_errors / non_event_content of meta `other` to meta `into` (examples kept in order)."""
    for key in (IMPORT_ERRORS, NON_EVENT_CONTENT):
        for kind, entry in (other.get(key) or {}).items():
            add(into, key, kind, entry["count"], entry["examples"])


def error_total(meta: dict) -> int:
    """Number of unparsed items over all kinds."""
    return sum(e["count"] for e in (meta.get(IMPORT_ERRORS) or {}).values())


def _where(ex: dict) -> str:
    parts = []
    if "source" in ex:
        parts.append(ex["source"])
    if "line" in ex:
        parts.append(f"line {ex['line']}")
    elif "offset" in ex:
        parts.append(f"byte {ex['offset']}")
    return " ".join(parts)


def import_warnings(meta: dict) -> list[str]:
    """Human-readable warnings from a trace's metadata about what was not imported or looks incomplete:
    one line per import_errors kind (count, first example with its line/offset), and the data-quality
    findings (``inferred_gaps``: sched_switch chains that do not connect). For `abtest trace info`,
    `abtest analyze` and notebooks; an empty list when the file read cleanly."""
    out = []
    for kind, entry in sorted((meta.get(IMPORT_ERRORS) or {}).items()):
        ex = entry["examples"][0] if entry["examples"] else {}
        where = _where(ex)
        sample = f": {where} {ex['text']!r}" if ex.get("text") is not None else (f": {where}" if where else "")
        detail = f" ({ex['detail']})" if ex.get("detail") else ""
        # timestamp outliers stay in their tables (docs/ingest-policy.md): only the span leaves them out
        verb = "kept out of the span" if kind == "timestamp_outlier" else "not imported"
        out.append(f"{verb}: {entry['count']} x {kind}{detail}{sample}")
    gaps = meta.get("inferred_gaps") or {}
    if gaps:
        total = sum(gaps.values())
        lost = {str(c) for c, n in (meta.get("lost_events_per_cpu") or {}).items() if n}
        per_cpu = ", ".join(
            f"CPU {c}: {n}{' (lost events recorded)' if c in lost else ''}"
            for c, n in sorted(gaps.items(), key=lambda kv: int(kv[0]))
        )
        out.append(
            f"{total} sched_switch chain breaks (prev_pid is not the previous next_pid on the CPU: events "
            f"missing; inferred_gaps) {per_cpu}. Task residency and wakeup latency across a break are "
            f"unreliable"
        )
    return out
