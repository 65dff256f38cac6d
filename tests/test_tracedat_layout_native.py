"""The native fast paths of the trace.dat layout pass (native/src/tracedat_layout.rs) give exactly what
the Python loops and regular expressions they replace give, on every real trace.dat under ../shared/traces
(and the bench trace when recorded), and hand anything unusual back to Python (None / False) instead of
guessing: truncated chunk lists or format sections, invalid UTF-8, non-ASCII format text."""
from __future__ import annotations

import struct
from pathlib import Path

import pytest

from abtest import _native
from abtest.trace import tracedat, tracedat_layout
from abtest.trace.errors import TraceFormatError
from shared_data import TRACES

ROOT = Path(__file__).resolve().parent.parent
BENCH = Path.home() / ".cache" / "abtest" / "bench" / "hackbench-sched-power.dat"
FILES = sorted(TRACES.rglob("*.dat")) + ([BENCH] if BENCH.exists() else [])


def _regex_ids(text: str):
    m_id, m_name = tracedat._ID_RE.search(text), tracedat._NAME_RE.search(text)
    return (int(m_id.group(1)), m_name.group(1)) if m_id and m_name else None


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name if p == BENCH else str(p.relative_to(TRACES)))
def test_layout_fast_paths_equal_the_python_loops(path, monkeypatch):
    data = path.read_bytes()
    fast = tracedat_layout.parse_layout(path, data, inflate=False)
    texts = fast.ftrace_formats + [t for _, t in fast.event_formats]
    assert len(texts) > 20
    assert _native.tracedat_format_ids(texts) == [_regex_ids(t) for t in texts]
    # the same file with the native walks disabled: the Python loops give the same layout
    monkeypatch.setattr(_native, "tracedat_event_formats", lambda *a: None)
    monkeypatch.setattr(_native, "tracedat_chunk_spans", lambda *a: None)
    slow = tracedat_layout.parse_layout(path, data, inflate=False)
    assert slow.event_formats == fast.event_formats and slow.chunks == fast.chunks
    assert tracedat._format_index(path, slow) == tracedat._format_index(path, fast)


EDGE_TEXTS = [
    "name: sched_switch\nID: 316\nformat:\n", "ID: 5\nname: a", "x ID: 5\nname: a", "xID: 5\nname: a\n",
    "ID:\n\n  42\nname:\n\t b c", "ID: abc\nID: 7\nname: n", "name: n\rID: 8", "name: n\nID:", "",
    "name: n\nID:\x1c\x1d 9", "name:\x1fx\x1ey\nID: 1", "name: n\nID: 0007", "name: é\nID: 1",
    "name: n\nID: 1234567890123456789012345", "name: n\nID: 3\x00\nname: m", "\nID: 11\n\nname: z\n",
]


def test_format_ids_edge_cases():
    got = _native.tracedat_format_ids(EDGE_TEXTS)
    for text, g in zip(EDGE_TEXTS, got):
        if g is False:  # left to the regular expressions: only for non-ASCII text / huge ids
            assert not text.isascii() or "1234567890123456789" in text
        else:
            assert g == _regex_ids(text), text
    assert got[EDGE_TEXTS.index("name: é\nID: 1")] is False
    assert got[EDGE_TEXTS.index("name: n\nID: 1234567890123456789012345")] is False


def test_chunk_spans_truncated_returns_none():
    chunks = struct.pack("<I", 2) + struct.pack("<II", 3, 100) + b"abc" + struct.pack("<II", 5, 200) + b"12345"
    assert _native.tracedat_chunk_spans(chunks, 0, len(chunks), False) == [(12, 3, 100), (23, 5, 200)]
    for cut in range(len(chunks)):
        assert _native.tracedat_chunk_spans(chunks, 0, cut, False) is None
    be = struct.pack(">I", 1) + struct.pack(">II", 2, 9) + b"xy"
    assert _native.tracedat_chunk_spans(be, 0, len(be), True) == [(12, 2, 9)]


def test_event_format_section_truncated_or_not_utf8_returns_none():
    sec = struct.pack("<I", 1) + b"sched\0" + struct.pack("<I", 2)
    sec += struct.pack("<Q", 3) + b"abc" + struct.pack("<Q", 2) + b"de"
    assert _native.tracedat_event_formats(sec, 0, len(sec), False) == (len(sec), [("sched", ["abc", "de"])])
    for cut in range(len(sec)):
        assert _native.tracedat_event_formats(sec, 0, cut, False) is None
    bad = sec.replace(b"abc", b"a\xffc")
    assert _native.tracedat_event_formats(bad, 0, len(bad), False) is None


def test_truncated_chunk_list_same_error_with_and_without_the_fast_path(monkeypatch):
    """A v7 file cut inside CPU 1's chunk list: the located-only layout pass raises the Python walk's error."""
    src = TRACES / "x86-vm" / "x86-menu-hackbench-cyclictest.dat"
    data = src.read_bytes()
    lay = tracedat_layout.parse_layout(src, data, inflate=False)
    cpu, spans = lay.chunks[-1]
    cut = data[:spans[len(spans) // 2][0] + 3]

    def err():
        with pytest.raises(TraceFormatError) as ei:
            tracedat_layout.parse_layout(src, cut, inflate=False)
        return str(ei.value), ei.value.offset

    fast = err()
    monkeypatch.setattr(_native, "tracedat_chunk_spans", lambda *a: None)
    assert err() == fast
