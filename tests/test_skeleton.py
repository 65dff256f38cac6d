"""Smoke tests of the package skeleton: CLI entry point, format detection and bad-input errors."""

import subprocess
import sys
from pathlib import Path

import pytest

from abtest.trace.detect import detect_format
from abtest.trace.errors import TraceFormatError
from abtest.trace.readers import read_trace

ROOT = Path(__file__).resolve().parent.parent
ABTEST = (
    [str(ROOT / ".venv" / "bin" / "abtest")]
    if (ROOT / ".venv/bin/abtest").exists()
    else [sys.executable, "-m", "abtest.cli"]
)


def test_cli_version():
    out = subprocess.run(ABTEST + ["--version"], capture_output=True, text=True, check=True)
    assert "abtest" in out.stdout


def test_detect_formats(traces):
    assert detect_format((traces / "x86-vm/x86-menu-hackbench-cyclictest.dat").read_bytes()[:4096]) == "trace.dat"
    assert detect_format((traces / "systing/trace.pb").read_bytes()[:4096]) == "perfetto"
    assert detect_format((traces / "catapult/compressed_atrace_data.txt").read_bytes()[:4096]) == "atrace-z"
    assert detect_format((traces / "trappy/trace_systrace.html").read_bytes()[:4096]) == "systrace-html"
    assert detect_format((traces / "tracecompass/trace-android-sched").read_bytes()[:4096]) == "ftrace-text"
    assert detect_format(b"") is None


def test_empty_file_is_a_clear_error(tmp_path):
    p = tmp_path / "empty.dat"
    p.write_bytes(b"")
    with pytest.raises(TraceFormatError, match="empty"):
        read_trace(p)


def test_binary_garbage_is_a_clear_error(tmp_path):
    p = tmp_path / "garbage.bin"
    p.write_bytes(bytes(range(256)) * 8)
    with pytest.raises(TraceFormatError, match="unrecognised format"):
        read_trace(p)


def test_zip_without_trace(tmp_path):
    import zipfile

    p = tmp_path / "notrace.zip"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("README.bin", bytes(range(256)) * 4)
    with pytest.raises(TraceFormatError, match="holds no trace"):
        read_trace(p)
    r = subprocess.run(ABTEST + ["trace", "info", str(p), "--json"], capture_output=True, text=True)
    assert r.returncode == 2
    assert "notrace.zip" in r.stderr and "holds no trace" in r.stderr
