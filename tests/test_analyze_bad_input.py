"""`analyze` on files `trace info` accepts (issue 27 item 10), built from real shared traces mutated here:
- a non-numeric prev_pid in a text trace: the value becomes null with a warning, every analysis still runs;
- a perfetto trace cut after its first packets (no event at all): a clear "no analysis applies" exit 2;
- a text trace whose cpu_id field is empty (a fuzz case): read, the bad value reported."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from abtest import Trace
from abtest.commands.analyze import analyze_dict
from abtest.trace.readers import read_trace

ROOT = Path(__file__).resolve().parent.parent


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, i


def perfetto_prefix(data: bytes, packets: int) -> bytes:
    """The first `packets` top-level TracePackets of a perfetto trace (field 1, length-delimited)."""
    i = 0
    for _ in range(packets):
        assert data[i] == 0x0A, "not a perfetto packet tag"
        n, j = _varint(data, i + 1)
        i = j + n
    return data[:i]


def test_non_numeric_prev_pid_is_nulled_with_a_warning(traces, tmp_path):
    text = (traces / "lisa/trace_txt-trace.txt").read_text()
    assert "prev_comm=sh prev_pid=1642 prev_prio" in text
    bad = tmp_path / "prev_pid.txt"
    bad.write_text(text.replace("prev_comm=sh prev_pid=1642 prev_prio", "prev_comm=sh prev_pid=16x2 prev_prio", 1))
    t = Trace(bad, use_cache=False)
    sw = t.df("sched_switch")
    assert sw.schema["prev_pid"] == pl.Int32
    # the ingestion policy (docs/ingest-policy.md): the damaged line is counted with its line number and text,
    # every other event is kept
    assert sw.height == 1855
    err = t.meta["import_errors"]["bad_field_value"]
    assert err["count"] == 1 and "prev_pid=16x2" in err["examples"][0]["text"]
    out = analyze_dict(t)
    per_s = {k: m["value"] for k, m in out["latency"]["metrics"].items()}
    matched, unmatched = (
        per_s[k] * out["duration_s"] for k in ("latency.wakeups_per_s", "latency.unmatched_wakeups_per_s")
    )
    assert matched + unmatched == pytest.approx(1068) and matched > 1000
    assert out["placement"] is not None


def test_perfetto_without_events_is_a_clear_exit_2(traces, tmp_path):
    for name in ("systing/trace.pb", "nowinandroid/trace.perfetto-trace"):
        cut = tmp_path / (Path(name).stem + "-head.pb")
        cut.write_bytes(perfetto_prefix((traces / name).read_bytes(), 3))
        info = read_trace(cut)  # trace info accepts it
        assert info.meta["start_ns"] is None and not info.meta["events"]
        out = analyze_dict(Trace(cut, use_cache=False))
        assert out["idle"] is None and "cpu_idle" in out["skipped"]["idle"]
        res = subprocess.run(
            [sys.executable, "-m", "abtest.cli", "analyze", str(cut)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        assert res.returncode == 2 and "no analysis applies" in res.stderr, res.stderr[-2000:]
        assert "Traceback" not in res.stderr


def test_empty_cpu_id_is_nulled_not_a_crash(traces, tmp_path):
    lines = (traces / "trappy/trace_idle_unsorted.txt").read_text().splitlines(keepends=True)
    i = next(k for k, ln in enumerate(lines) if "cpu_idle:" in ln and "cpu_id=" in ln)
    head, _, tail = lines[i].partition("cpu_id=")
    lines[i] = head + "cpu_id=" + tail.lstrip("0123456789")  # `cpu_id=` with no number
    bad = tmp_path / "cpu_id.txt"
    bad.write_text("".join(lines))
    data = read_trace(bad)
    idle = data.tables["cpu_idle"]
    assert idle.schema["cpu"] == pl.Int32 and idle.height == 7  # 8 cpu_idle lines, the damaged one counted
    err = data.meta["import_errors"]["bad_field_value"]
    assert err["count"] == 1 and err["examples"][0]["text"].endswith("cpu_id=")
