"""Corrupt / truncated trace.dat input: a TraceFormatError naming the file and byte offset, CLI exit 2,
never a partial result presented as complete. Lost-event accounting from ring-buffer page flags.

The inputs are real traces from ../shared/traces with bytes changed in a temporary copy.
Decision (documented in docs/ingest.md): a file whose CPU data ends inside a ring-buffer page, or
whose per-CPU data runs past the end of the file, is an error, not a shorter trace.
"""
from __future__ import annotations

import random
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from abtest.trace import tracedat_layout
from abtest.trace.errors import TraceFormatError
from abtest.trace.readers import read_trace
from shared_data import TRACES

ROOT = Path(__file__).resolve().parent.parent
V6 = TRACES / "lisa" / "sched_load-trace.dat"
V6_32BIT = TRACES / "trappy" / "trace.dat"
V7 = TRACES / "x86-vm" / "x86-menu-hackbench-cyclictest.dat"


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def _cli_info(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "abtest.cli", "trace", "info", "--json", "--no-cache", str(path)],
                          capture_output=True, text=True)


def _first_page(path: Path) -> int:
    lay = tracedat_layout.parse_layout(path, path.read_bytes())
    return next(cd.file_offset for cd in lay.cpu_data if cd.size > 0)


@pytest.mark.parametrize("src", [V6, V7, V6_32BIT], ids=["v6", "v7-zstd", "v6-32bit"])
@pytest.mark.parametrize("frac", [0.0005, 0.01, 0.3, 0.7, 0.999])
def test_truncated_file_is_an_error_with_offset(tmp_path, src, frac):
    data = src.read_bytes()
    cut = max(12, int(len(data) * frac))
    p = _write(tmp_path, "cut.dat", data[:cut])
    with pytest.raises(TraceFormatError) as ei:
        read_trace(p)
    e = ei.value
    assert e.path == str(p)
    assert e.offset is not None and 0 <= e.offset <= len(data), str(e)
    assert "byte offset" in str(e)


def test_truncated_file_cli_exit_2(tmp_path):
    data = V7.read_bytes()
    p = _write(tmp_path, "cut.dat", data[: len(data) // 2])
    r = _cli_info(p)
    assert r.returncode == 2, r.stderr
    assert str(p) in r.stderr and "offset" in r.stderr
    assert r.stdout.strip() == ""  # no JSON: no partial result


def test_page_header_commit_out_of_range(tmp_path):
    data = bytearray(V6.read_bytes())
    page = _first_page(V6)
    struct.pack_into("<Q", data, page + 8, 0x3FFF_0000)  # commit far beyond the 4 KiB page
    p = _write(tmp_path, "badpage.dat", bytes(data))
    with pytest.raises(TraceFormatError) as ei:
        read_trace(p)
    assert ei.value.offset == page + 8
    assert "commit" in str(ei.value)
    assert _cli_info(p).returncode == 2


def test_event_header_length_out_of_range(tmp_path):
    data = bytearray(V6.read_bytes())
    page = _first_page(V6)
    struct.pack_into("<II", data, page + 16, 0, 0x7FFF_FFFF)  # type_len 0 with an absurd length word
    p = _write(tmp_path, "badevent.dat", bytes(data))
    with pytest.raises(TraceFormatError) as ei:
        read_trace(p)
    assert ei.value.offset == page + 16
    assert "runs past" in str(ei.value)


def _first_zstd_chunk_offset(path: Path) -> int:
    """File offset of CPU 0's first compressed chunk header (u32 csize, u32 usize, zstd frame)."""
    seen = []
    orig = tracedat_layout._cpu_chunks

    def spy(cur, off, size, cpu, buffer=""):
        got = orig(cur, off, size, cpu, buffer)
        seen.extend(got)
        return got

    tracedat_layout._cpu_chunks = spy
    try:
        tracedat_layout.parse_layout(path, path.read_bytes())
    finally:
        tracedat_layout._cpu_chunks = orig
    return seen[0][2]


def test_bad_compression_stream(tmp_path):
    data = bytearray(V7.read_bytes())
    at = _first_zstd_chunk_offset(V7)
    assert data[at + 8: at + 12] == b"\x28\xb5\x2f\xfd"  # zstd frame magic
    data[at + 8: at + 12] = b"\x00\x00\x00\x00"
    p = _write(tmp_path, "badzstd.dat", bytes(data))
    with pytest.raises(TraceFormatError) as ei:
        read_trace(p)
    assert ei.value.offset == at
    assert "zstd" in str(ei.value)
    assert _cli_info(p).returncode == 2


def test_wrong_version(tmp_path):
    data = bytearray(V6.read_bytes())
    assert data[10:12] == b"6\0"
    data[10:12] = b"9\0"
    p = _write(tmp_path, "v9.dat", bytes(data))
    with pytest.raises(TraceFormatError) as ei:
        read_trace(p)
    assert ei.value.offset == 10 and "version" in str(ei.value)
    assert _cli_info(p).returncode == 2


def test_unknown_compression_algorithm(tmp_path):
    data = bytearray(V7.read_bytes())
    i = data.index(b"zstd\0")
    data[i:i + 4] = b"lzma"
    p = _write(tmp_path, "lzma.dat", bytes(data))
    with pytest.raises(TraceFormatError, match="compression algorithm 'lzma'"):
        read_trace(p)


def test_empty_and_magic_only(tmp_path):
    empty = _write(tmp_path, "empty.dat", b"")
    with pytest.raises(TraceFormatError) as ei:
        read_trace(empty)
    assert ei.value.offset == 0
    assert _cli_info(empty).returncode == 2
    magic = _write(tmp_path, "magic.dat", V6.read_bytes()[:10])
    with pytest.raises(TraceFormatError) as ei:
        read_trace(magic)
    assert ei.value.offset == 10


def test_random_byte_flips_never_crash(tmp_path):
    """Flipped bytes inside ring-buffer pages: either a clean decode or a TraceFormatError, never an
    IndexError / Rust panic / silent success with a bogus header."""
    data = V6.read_bytes()
    lay = tracedat_layout.parse_layout(V6, data)
    spans = [(cd.file_offset, cd.size) for cd in lay.cpu_data if cd.size]
    rng = random.Random(1234)
    outcomes = {"ok": 0, "error": 0}
    for k in range(25):
        buf = bytearray(data)
        off, size = rng.choice(spans)
        for _ in range(8):
            buf[off + rng.randrange(size)] ^= 1 << rng.randrange(8)
        p = _write(tmp_path, f"flip{k}.dat", bytes(buf))
        try:
            read_trace(p)
            outcomes["ok"] += 1
        except TraceFormatError as e:
            assert e.offset is not None and off <= e.offset < off + size, str(e)
            outcomes["error"] += 1
    assert sum(outcomes.values()) == 25


def _page_with_room(data: bytes, lay, commit_size: int = 8) -> tuple[int, int]:
    """A page of the v6 file whose committed data leaves room for a stored missed-events count."""
    for cd in lay.cpu_data:
        for page in range(cd.file_offset, cd.file_offset + cd.size, lay.page_size):
            commit = struct.unpack_from("<Q", data, page + 8)[0] & ((1 << 30) - 1)
            if 16 + commit + commit_size <= lay.page_size:
                return page, commit
    raise AssertionError("no page with room")


@pytest.mark.parametrize("pieces", [None, "3"], ids=["one-job-per-cpu", "3-pieces-per-cpu"])
def test_lost_events_counted_per_cpu(tmp_path, monkeypatch, pieces):
    """Lost events per CPU, also when each CPU's pages are decoded as 3 pieces and joined (the counts of
    a CPU's pieces add up)."""
    if pieces:
        monkeypatch.setenv("ABTEST_FUSED_PIECES", pieces)
    data = bytearray(V6.read_bytes())
    lay = tracedat_layout.parse_layout(V6, bytes(data))
    page, commit = _page_with_room(bytes(data), lay)
    cpu = next(cd.cpu for cd in lay.cpu_data if cd.file_offset <= page < cd.file_offset + cd.size)
    flags = (1 << 31) | (1 << 30)  # RB_MISSED_EVENTS | RB_MISSED_STORED
    struct.pack_into("<Q", data, page + 8, commit | flags)
    struct.pack_into("<Q", data, page + 16 + commit, 4242)
    p = _write(tmp_path, "lost.dat", bytes(data))
    d = read_trace(p)
    assert d.meta["lost_events"] == 4242
    assert d.meta["lost_events_per_cpu"][str(cpu)] == 4242
    assert any("lost" in w for w in d.meta["warnings"])
    # the events themselves are all still there
    assert sum(d.meta["events"].values()) == 3724
    r = _cli_info(p)
    assert r.returncode == 0 and "4242 events were lost" in r.stderr


@pytest.mark.parametrize("pieces", [None, "3"], ids=["one-job-per-cpu", "3-pieces-per-cpu"])
def test_lost_events_without_stored_count(tmp_path, monkeypatch, pieces):
    if pieces:
        monkeypatch.setenv("ABTEST_FUSED_PIECES", pieces)
    data = bytearray(V6.read_bytes())
    lay = tracedat_layout.parse_layout(V6, bytes(data))
    page, commit = _page_with_room(bytes(data), lay)
    struct.pack_into("<Q", data, page + 8, commit | (1 << 31))  # RB_MISSED_EVENTS, count not stored
    p = _write(tmp_path, "lost-unknown.dat", bytes(data))
    d = read_trace(p)
    assert d.meta["lost_events_exact"] is False
    assert sum(d.meta["lost_pages_without_count_per_cpu"].values()) == 1
    assert d.meta["lost_events"] >= 1  # at least one event lost before that page: reported, loudly
    assert any("lower bound" in w for w in d.meta["warnings"])
