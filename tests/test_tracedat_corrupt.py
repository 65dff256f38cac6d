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
from shared_data import TRACES

from abtest.trace import tracedat
from abtest.trace.errors import TraceFormatError
from abtest.trace.readers import read_trace

ROOT = Path(__file__).resolve().parent.parent
V6 = TRACES / "lisa" / "sched_load-trace.dat"
V6_32BIT = TRACES / "trappy" / "trace.dat"
V7 = TRACES / "x86-vm" / "x86-menu-hackbench-cyclictest.dat"


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def _cli_info(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "abtest.cli", "trace", "info", "--json", "--no-cache", str(path)],
        capture_output=True,
        text=True,
    )


def _cpu_spans(path: Path, data: bytes | None = None) -> list[tuple[int, int, int]]:
    """(cpu, file offset, size) of the top buffer's stored per-CPU data with pages."""
    lay = tracedat.layout(path, data if data is not None else path.read_bytes())
    return [(c["cpu"], c["offset"], c["size"]) for c in lay["buffers"][0]["cpus"] if c["size"]]


def _first_page(path: Path) -> int:
    return _cpu_spans(path)[0][1]


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
    """File offset of the first CPU's first compressed chunk header (u32 csize, u32 usize, zstd frame)."""
    lay = tracedat.layout(path, path.read_bytes())
    return lay["buffers"][0]["cpus"][0]["chunks"][0][0] - 8


def test_bad_compression_stream(tmp_path):
    data = bytearray(V7.read_bytes())
    at = _first_zstd_chunk_offset(V7)
    assert data[at + 8 : at + 12] == b"\x28\xb5\x2f\xfd"  # zstd frame magic
    data[at + 8 : at + 12] = b"\x00\x00\x00\x00"
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
    data[i : i + 4] = b"lzma"
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
    spans = [(off, size) for _cpu, off, size in _cpu_spans(V6)]
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


def _page_with_room(data: bytes, commit_size: int = 8) -> tuple[int, int, int]:
    """(cpu, page offset, commit) of a page of the v6 file whose committed data leaves room for a stored
    missed-events count."""
    for cpu, off, size in _cpu_spans(V6, data):
        for page in range(off, off + size, 4096):
            commit = struct.unpack_from("<Q", data, page + 8)[0] & ((1 << 30) - 1)
            if 16 + commit + commit_size <= 4096:
                return cpu, page, commit
    raise AssertionError("no page with room")


def test_lost_events_counted_per_cpu(tmp_path):
    data = bytearray(V6.read_bytes())
    cpu, page, commit = _page_with_room(bytes(data))
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


def test_lost_events_without_stored_count(tmp_path):
    data = bytearray(V6.read_bytes())
    _cpu, page, commit = _page_with_room(bytes(data))
    struct.pack_into("<Q", data, page + 8, commit | (1 << 31))  # RB_MISSED_EVENTS, count not stored
    p = _write(tmp_path, "lost-unknown.dat", bytes(data))
    d = read_trace(p)
    assert d.meta["lost_events_exact"] is False
    assert sum(d.meta["lost_pages_without_count_per_cpu"].values()) == 1
    assert d.meta["lost_events"] >= 1  # at least one event lost before that page: reported, loudly
    assert any("lower bound" in w for w in d.meta["warnings"])
