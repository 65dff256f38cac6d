"""Bad perfetto input: truncated files, lengths past the end, random bytes, empty files, corrupt
compressed packets. Damage in the first packet (or before any data) gives a TraceFormatError naming the file
and the byte offset, and the CLI exits with status 2; damage after good packets (a capture cut short, a stale
tail) keeps the packets before it, counted as one `damaged_packets` import error naming the offsets.
Truncated copies are derived in tmp_path from the real Pixel 7 Pro trace."""

from __future__ import annotations

import random
import re
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from abtest.trace.errors import TraceFormatError
from abtest.trace.readers import read_trace

PIXEL = "PerfettoTraceScript/pixel7pro-power-rails.perfetto-trace"


from pb_writer import ld as _ld  # noqa: E402
from pb_writer import varint as _varint  # noqa: E402


def _packet_starts(data: bytes) -> set[int]:
    """Offsets where a top-level TracePacket starts (tiny independent walker: tag 0x0a, varint length)."""
    starts, pos = set(), 0
    while pos < len(data):
        starts.add(pos)
        assert data[pos] == 0x0A
        pos += 1
        length = shift = 0
        while True:
            b = data[pos]
            pos += 1
            length |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        pos += length
    starts.add(len(data))
    return starts


def _cli_info(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "abtest.cli", "trace", "info", "--no-cache", str(path)], capture_output=True, text=True
    )


def _assert_error(path: Path, max_offset: int | None = None) -> TraceFormatError:
    with pytest.raises(TraceFormatError) as ei:
        read_trace(path)
    e = ei.value
    assert str(path) in str(e)
    if max_offset is not None:
        assert e.offset is not None and 0 <= e.offset <= max_offset
        assert re.search(r"byte offset \d+", str(e))
    return e


@pytest.fixture(scope="module")
def pixel_bytes(traces) -> bytes:
    return (traces / PIXEL).read_bytes()


def _assert_prefix_kept(path: Path, good: bytes, damage_at: int, tmp_path: Path) -> dict:
    """`path` reads as exactly the packets in `good` (its first bytes, whole packets) plus one damaged_packets
    import error whose offset is at or after the first byte not kept; returns the meta."""
    ref_path = tmp_path / "prefix.perfetto-trace"
    ref_path.write_bytes(good)
    ref, got = read_trace(ref_path), read_trace(path)
    assert got.meta["events"] == ref.meta["events"]
    for name, df in ref.tables.items():
        assert got.tables[name].equals(df), name
    (err,) = got.meta["import_errors"]["damaged_packets"]["examples"]
    assert got.meta["import_errors"]["damaged_packets"]["count"] == 1
    assert len(good) <= err["offset"] <= damage_at
    assert got.meta["perfetto"]["damaged_from_offset"] == len(good)
    assert f"from byte {len(good)}" in " ".join(got.meta["warnings"])
    return got.meta


@pytest.mark.parametrize("frac", [0.0001, 0.13, 0.5, 0.87, 0.99999])
def test_truncated_inside_a_packet_keeps_the_packets_before_it(pixel_bytes, tmp_path, frac):
    """A capture cut inside a packet (issue 43: trace_processor keeps what precedes the damage): the complete
    packets before the cut are read, and the cut is reported with its offset."""
    starts = _packet_starts(pixel_bytes)
    cut = int(len(pixel_bytes) * frac)
    while cut in starts:  # cutting between two packets leaves a valid (shorter) trace
        cut += 1
    path = tmp_path / "truncated.perfetto-trace"
    path.write_bytes(pixel_bytes[:cut])
    prev = max(s for s in starts if s < cut)
    ref = tmp_path / "ref.perfetto-trace"
    ref.write_bytes(pixel_bytes[:prev])
    if prev == 0 or not read_trace(ref).meta["events"]:  # damage before any data: nothing to keep
        e = _assert_error(path, max_offset=cut)
        assert "truncated" in str(e) or "remain" in str(e)
        return
    _assert_prefix_kept(path, pixel_bytes[:prev], cut, tmp_path)
    if frac in (0.5, 0.99999):
        r = _cli_info(path)
        assert r.returncode == 0, r.stderr
        assert "damaged" in r.stdout + r.stderr


def test_stale_tail_after_valid_packets(pixel_bytes, tmp_path):
    """A capture interrupted while writing over an older, longer trace: valid packets up to a byte offset, then
    a stale copy of a trace's end starting mid-packet. The valid packets are read, the rest is accounted."""
    starts = sorted(_packet_starts(pixel_bytes))
    end = starts[len(starts) // 3]
    stale_from = next(s for s in starts if s > len(pixel_bytes) * 0.7) + 3  # inside a packet: not a boundary
    path = tmp_path / "stale-tail.perfetto-trace"
    path.write_bytes(pixel_bytes[:end] + pixel_bytes[stale_from:])
    meta = _assert_prefix_kept(path, pixel_bytes[:end], len(pixel_bytes), tmp_path)
    (err,) = meta["import_errors"]["damaged_packets"]["examples"]
    assert f"({len(pixel_bytes) - stale_from} bytes) were not read" in err["detail"]


def test_packet_length_past_end_of_file(tmp_path):
    path = tmp_path / "len.pftrace"
    path.write_bytes(b"\x0a" + _varint(1000) + b"\x08\x01" * 5)
    e = _assert_error(path, max_offset=1)
    assert e.offset == 1
    assert "1000 bytes" in str(e)
    assert _cli_info(path).returncode == 2


def test_nested_length_past_end_of_packet(tmp_path):
    # TracePacket{ftrace_events (field 1) declaring 127 bytes with only 3 present}
    path = tmp_path / "nested.pftrace"
    path.write_bytes(_ld(1, b"\x0a\x7f\x08\x01\x10"))
    e = _assert_error(path, max_offset=10)
    assert e.offset == 3


def test_corrupt_ftrace_event_inside_real_trace(pixel_bytes, tmp_path):
    # keep the first packets of the real trace intact, then append a bundle whose event has a bad wire type:
    # the packets before it are read, the bad one is reported with its offset and what was wrong
    bad_event = b"\x08\x05" + b"\x0f"  # timestamp=5, then tag with wire type 7 (invalid)
    bundle = b"\x08\x00" + _ld(2, bad_event)
    prefix = pixel_bytes[: sorted(_packet_starts(pixel_bytes))[20]]
    path = tmp_path / "bad-event.pftrace"
    path.write_bytes(prefix + _ld(1, _ld(1, bundle)))
    meta = _assert_prefix_kept(path, prefix, len(prefix) + 20, tmp_path)
    assert "wire type" in meta["import_errors"]["damaged_packets"]["examples"][0]["detail"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_bytes(tmp_path, seed):
    rnd = random.Random(seed)
    body = bytes(rnd.randrange(256) for _ in range(4096))
    plain, framed = tmp_path / f"random{seed}.bin", tmp_path / f"random{seed}.pftrace"
    plain.write_bytes(body)
    framed.write_bytes(b"\x0a\x05" + body)  # looks like a TracePacket at first, garbage after it
    _assert_error(plain)
    _assert_error(framed, max_offset=len(body) + 2)
    assert _cli_info(framed).returncode == 2


def test_empty_file(tmp_path):
    path = tmp_path / "empty.perfetto-trace"
    path.write_bytes(b"")
    _assert_error(path)
    r = _cli_info(path)
    assert r.returncode == 2 and "empty" in r.stderr


def _compact_sched_trace(columns: dict[int, list[int]]) -> bytes:
    """A Trace with one FtraceEventBundle (cpu 0) holding a CompactSched of these packed columns (field
    number -> values) and an intern table with one comm."""
    compact = _ld(5, b"task") + b"".join(_ld(f, b"".join(_varint(v) for v in vals)) for f, vals in columns.items())
    return _ld(1, _ld(1, b"\x08\x00" + _ld(4, compact)))


@pytest.mark.parametrize(
    "short, message",
    [
        (2, "CompactSched switch_prev_state has 1 entries, switch_timestamp has 2"),
        (6, "CompactSched switch_next_comm_index has 1 entries, switch_timestamp has 2"),
        (9, "CompactSched waking_target_cpu has 1 entries, waking_timestamp has 2"),
    ],
)
def test_compact_sched_columns_of_unequal_length(tmp_path, short, message):
    """CompactSched's columns must have one entry per event: a column that is short is named, with the
    offset of the bundle's compact_sched field; the same columns of equal length decode to 2 + 2 rows."""
    switch = {1: [10, 5], 2: [0, 1], 3: [101, 102], 4: [120, 120], 6: [0, 0]}
    waking = {7: [3, 4], 8: [101, 102], 9: [1, 0], 10: [120, 120], 11: [0, 0]}
    ok = tmp_path / "compact-ok.pftrace"
    ok.write_bytes(_compact_sched_trace({**switch, **waking}))
    d = read_trace(ok)
    assert d.tables["sched_switch"]["ts"].to_list() == [10, 15]
    assert d.tables["sched_waking"]["target_cpu"].to_list() == [1, 0]
    cols = {**switch, **waking}
    cols[short] = cols[short][:1]
    bad = tmp_path / "compact-short.pftrace"
    bad.write_bytes(_compact_sched_trace(cols))
    e = _assert_error(bad, max_offset=12)
    assert message in str(e)


def test_corrupt_compressed_packets(tmp_path):
    good = zlib.compress(_ld(1, b"\x40\x01"))  # a Trace with one packet {timestamp(8)=1}
    p = tmp_path / "zlib.pftrace"
    p.write_bytes(_ld(1, _ld(50, good[:-6] + b"\x00" * 6)))
    e = _assert_error(p, max_offset=20)
    assert "compressed_packets" in str(e)
    # a valid zlib stream whose content is not a Trace
    q = tmp_path / "zlib-garbage.pftrace"
    q.write_bytes(_ld(1, _ld(50, zlib.compress(b"\x0a\xff\xff\xff\x0f"))))
    e = _assert_error(q, max_offset=20)
    assert "decompressed" in str(e)


def test_truncated_large_trace_reports_absolute_offset(pixel_bytes, tmp_path):
    """A trace cut in its second half: the damage is reported at its offset in the file."""
    blob = pixel_bytes * 4
    starts = _packet_starts(blob)
    cut = int(len(blob) * 0.8)
    while cut in starts:
        cut += 1
    path = tmp_path / "big-truncated.perfetto-trace"
    path.write_bytes(blob[:cut])
    meta = read_trace(path).meta
    (err,) = meta["import_errors"]["damaged_packets"]["examples"]
    assert len(blob) // 2 < err["offset"] <= cut
    assert meta["perfetto"]["damaged_from_offset"] == max(s for s in starts if s < cut)


def test_mutated_bytes_give_a_result_or_a_format_error(pixel_bytes, tmp_path):
    """Random byte changes inside a real trace: the reader either decodes (the change kept the protobuf
    valid, or the packets before the damage are kept and the damage counted) or raises TraceFormatError -
    never another exception, a crash or a hang."""
    end = max(s for s in _packet_starts(pixel_bytes) if s <= 300_000)
    base = pixel_bytes[:end]
    rnd = random.Random(11)
    outcomes = {"decoded": 0, "damaged": 0, "error": 0}
    path = tmp_path / "mutated.perfetto-trace"
    for _ in range(60):
        blob = bytearray(base)
        for _ in range(rnd.randint(1, 8)):
            blob[rnd.randrange(16, len(blob))] = rnd.randrange(256)
        path.write_bytes(bytes(blob))
        try:
            errors = read_trace(path).meta.get("import_errors") or {}
            outcomes["damaged" if "damaged_packets" in errors else "decoded"] += 1
        except TraceFormatError as e:
            assert e.offset is not None and 0 <= e.offset <= len(blob)
            outcomes["error"] += 1
    assert outcomes["damaged"] + outcomes["error"] > 0
