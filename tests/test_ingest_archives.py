"""Containers by content (abtest.trace.archive): zip / tar / gzip / zstd holding several members, members
chosen by content never by order, corrupt members, and the inflate limits against decompression bombs
(issue 27 items 5-6). Archives are built in tmp_path around real traces."""

from __future__ import annotations

import gzip
import io
import subprocess
import sys
import tarfile
import zipfile
import zlib
from pathlib import Path

import pytest
import zstandard

from abtest.trace.errors import TraceFormatError
from abtest.trace.readers import read_trace

ROOT = Path(__file__).resolve().parent.parent


def _zip(path: Path, members: list[tuple[str, bytes]]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members:
            zf.writestr(name, data)
    return path


def test_zip_whose_first_member_is_a_readme(traces, tmp_path):
    readme = (ROOT / "README.md").read_bytes()
    trace = (traces / "lisa/trace_txt-trace.txt").read_bytes()
    data = read_trace(_zip(tmp_path / "a.zip", [("README.md", readme), ("trace.txt", trace)]))
    assert data.meta["events"] == read_trace(traces / "lisa/trace_txt-trace.txt").meta["events"]
    assert data.meta["wrapper"] == "zip:trace.txt"
    assert data.meta["non_event_content"]["archive_member"]["examples"][0]["source"] == "README.md"
    roles = {m["name"]: m["role"] for m in data.meta["archive"]["members"]}
    assert roles == {"README.md": "other", "trace.txt": "trace"}


def test_zip_with_two_traces_reads_the_richest_and_counts_the_other(traces, tmp_path):
    dat = traces / "lisa/sched_load-trace.dat"
    report = subprocess.run(["trace-cmd", "report", str(dat)], check=True, capture_output=True).stdout
    data = read_trace(_zip(tmp_path / "two.zip", [("report.txt", report), ("trace.dat", dat.read_bytes())]))
    assert data.meta["format"] == "trace.dat" and data.meta["wrapper"] == "zip:trace.dat"
    assert data.meta["events"] == read_trace(dat).meta["events"]
    ex = data.meta["import_errors"]["archive_member_not_imported"]["examples"][0]
    assert ex["source"] == "report.txt" and "trace.dat" in ex["detail"]


def _corrupt_member(path: Path, name: str) -> None:
    """Flip bytes in the middle of member `name`'s compressed data (the central directory stays valid)."""
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(name)
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    mid = start + info.compress_size // 2
    raw[mid : mid + 64] = bytes(64)
    path.write_bytes(bytes(raw))


def test_corrupt_member_is_counted_and_the_good_one_read(traces, tmp_path):
    good = (traces / "trappy/trace.txt").read_bytes()
    bad = (traces / "lisa/trace_txt-trace.txt").read_bytes()
    path = _zip(tmp_path / "c.zip", [("broken.txt", bad), ("good.txt", good)])
    _corrupt_member(path, "broken.txt")
    data = read_trace(path)
    assert data.meta["events"] == read_trace(traces / "trappy/trace.txt").meta["events"]
    assert data.meta["import_errors"]["archive_member_corrupt"]["examples"][0]["source"] == "broken.txt"


def test_only_trace_member_corrupt_is_a_clear_error(traces, tmp_path):
    path = _zip(
        tmp_path / "d.zip",
        [("README.md", b"notes\n"), ("trace.txt", (traces / "lisa/trace_txt-trace.txt").read_bytes())],
    )
    _corrupt_member(path, "trace.txt")
    with pytest.raises(TraceFormatError) as e:
        read_trace(path)
    assert "trace.txt is corrupt" in str(e.value)
    r = subprocess.run(
        [sys.executable, "-m", "abtest.cli", "trace", "info", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr and "corrupt" in r.stderr


def test_tar_gz_and_nested_compression(traces, tmp_path):
    dat = traces / "trappy/trace_idle.dat"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, data in (
            ("capture/notes.txt", b"kernel 4.x, idle test\n"),
            ("capture/trace.dat.gz", gzip.compress(dat.read_bytes())),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    path = tmp_path / "capture.tar.gz"
    path.write_bytes(gzip.compress(buf.getvalue()))
    data = read_trace(path)
    assert data.meta["events"] == read_trace(dat).meta["events"]
    assert data.meta["wrapper"] == "gzip+tar+gzip:capture/trace.dat.gz"


def _write_bomb(path: Path, kind: str, payload: bytes) -> None:
    if kind == "gzip":
        path.write_bytes(gzip.compress(payload, 6))
    elif kind == "zstd":
        path.write_bytes(zstandard.ZstdCompressor(level=19).compress(payload))
    elif kind == "zip":
        _zip(path, [("trace.txt", payload)])
    else:
        path.write_bytes(b"TRACE:\n" + zlib.compress(payload, 6))


def _assert_refused_at_limit(path: Path) -> None:
    with pytest.raises(TraceFormatError) as e:
        read_trace(path)
    msg = str(e.value)
    assert "inflates beyond" in msg and "ABTEST_MAX_INFLATE" in msg and str(path) in msg
    assert e.value.offset is not None
    r = subprocess.run(
        [sys.executable, "-m", "abtest.cli", "trace", "info", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "inflates beyond" in r.stderr and "Traceback" not in r.stderr


def test_zstd_bomb_stops_at_the_default_limit(traces, tmp_path):
    """~70 KB of zstd that would inflate to 1 GiB (issue 27 item 6: it reached an 8 GiB allocation): stops
    at the default 64 MiB floor."""
    payload = (traces / "trappy/trace_sched.txt").read_bytes() + bytes(1 << 30)
    path = tmp_path / "bomb.zst"
    path.write_bytes(zstandard.ZstdCompressor(level=3).compress(payload))
    assert path.stat().st_size < (1 << 20)
    _assert_refused_at_limit(path)


@pytest.mark.parametrize("kind", ["gzip", "zstd", "zip", "atrace-z"])
def test_decompression_bombs_stop_at_the_limit(traces, tmp_path, kind, monkeypatch):
    """A real trace followed by 24 MiB of NUL padding (inflating > 1000x), under an 8 MiB floor set through
    the environment: refused naming the file, offset and limit; with the limit raised the same file reads
    (the padding counted, not parsed)."""
    monkeypatch.setenv("ABTEST_MAX_INFLATE_FLOOR_BYTES", str(8 << 20))
    payload = (traces / "trappy/trace_sched.txt").read_bytes() + bytes(24 << 20)
    path = tmp_path / f"bomb.{kind}"
    _write_bomb(path, kind, payload)
    assert path.stat().st_size < (1 << 20)
    _assert_refused_at_limit(path)
    monkeypatch.setenv("ABTEST_MAX_INFLATE_FLOOR_BYTES", str(32 << 20))
    data = read_trace(path)
    assert data.meta["events"] == read_trace(traces / "trappy/trace_sched.txt").meta["events"]
    assert data.meta["non_event_content"]["nul_padding"]["count"] == 24 << 20


def test_declared_zip_member_size_is_checked_before_reading(traces, tmp_path, monkeypatch):
    monkeypatch.setenv("ABTEST_MAX_INFLATED_BYTES", str(100_000))  # the member declares 448,682 bytes
    path = _zip(tmp_path / "big.zip", [("trace.txt", (traces / "lisa/trace_txt-trace.txt").read_bytes())])
    with pytest.raises(TraceFormatError, match="declared"):
        read_trace(path)
