"""A trace recorded live on this machine during the test, decoded by abtest and cross-checked against
`trace-cmd report` on the same file.

tracefs is global: the test holds /tmp/abtest-tracefs.lock (fixture `tracefs_lock`), enables
sched_switch / sched_wakeup / sched_waking / cpu_idle / cpu_idle_miss through tracefs files, runs
hackbench and a short cyclictest (whose 2 ms sleeps produce cpu_idle / cpu_idle_miss), stops tracing
and runs `trace-cmd extract` (`trace-cmd record` is not usable here). The tracefs state it touched is
restored afterwards, also on failure. The extracted file (trace.dat v7, zstd) is also rewritten by
`trace-cmd convert` as v6 and as uncompressed v7, and all three are checked.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import tracedat_ref as ref
from abtest.trace import tracedat
from abtest.trace.readers import read_trace

EVENTS = ("sched/sched_switch", "sched/sched_wakeup", "sched/sched_waking", "power/cpu_idle",
          "power/cpu_idle_miss")


def _read(path: Path) -> str:
    return path.read_text()


@pytest.fixture
def live_trace(tracefs_lock, tmp_path):
    """Record a short real trace; yields the trace.dat path (the tracefs `trace` text of the same buffer is
    next to it, suffix .txt). Restores tracefs even on failure."""
    fs: Path = tracefs_lock
    available = [e for e in EVENTS if (fs / "events" / e / "enable").exists()]
    saved = {
        "tracing_on": _read(fs / "tracing_on").strip(),
        "buffer_size_kb": _read(fs / "buffer_size_kb").split()[0],
        "enabled": {e: _read(fs / "events" / e / "enable").strip() for e in available},
    }
    out = tmp_path / "live.dat"
    try:
        (fs / "tracing_on").write_text("0")
        (fs / "trace").write_text("")
        (fs / "buffer_size_kb").write_text("8192")
        for e in available:
            (fs / "events" / e / "enable").write_text("1")
        (fs / "tracing_on").write_text("1")
        subprocess.run(["hackbench", "-l", "50"], check=True, capture_output=True, timeout=120)
        subprocess.run(["cyclictest", "-q", "-t", "1", "-i", "2000", "-l", "250"], check=True,
                       capture_output=True, timeout=120)
        (fs / "tracing_on").write_text("0")
        # the kernel's own text of the same ring buffer, before `trace-cmd extract` consumes it
        # (tests/test_text_flags.py compares it with the extracted file)
        out.with_suffix(".txt").write_text((fs / "trace").read_text())
        subprocess.run(["trace-cmd", "extract", "-o", str(out)], check=True, capture_output=True, timeout=120)
        yield out
    finally:
        (fs / "tracing_on").write_text("0")
        for e, state in saved["enabled"].items():
            (fs / "events" / e / "enable").write_text(state if state in ("0", "1") else "0")
        (fs / "trace").write_text("")
        (fs / "buffer_size_kb").write_text(saved["buffer_size_kb"])
        (fs / "tracing_on").write_text(saved["tracing_on"])


def test_live_trace_matches_trace_cmd_report(live_trace, tmp_path):
    variants = {"extracted": live_trace}
    for version, comp in (("6", "none"), ("7", "none")):
        out = tmp_path / f"live-v{version}-{comp}.dat"
        subprocess.run(["trace-cmd", "convert", "-i", str(live_trace), "-o", str(out), "--file-version", version,
                        "--compression", comp], check=True, capture_output=True)
        variants[f"v{version}-{comp}"] = out
    first = None
    for label, path in variants.items():
        raw, meta = tracedat.read(path, path.read_bytes())
        counts = {name: df.height for name, df in raw.items()}
        reference = ref.events(str(path))
        assert counts == {ev: len(rows) for ev, rows in reference.items()}, label
        for ev in ("sched_switch", "sched_wakeup", "sched_waking"):
            assert counts.get(ev, 0) > 100, (label, ev, counts)
        checked = ref.compare_fields(raw, str(path))
        assert checked == sum(counts.values()), label
        if first is None:
            first = raw
        else:  # every file version decodes to the very same tables
            assert sorted(raw) == sorted(first)
            for name in raw:
                assert raw[name].equals(first[name]), (label, name)
    # the canonical view and the CLI contract on the live file
    d = read_trace(live_trace)
    if "cpu_idle" in d.tables:  # a loaded machine may not idle during the workload
        assert d.tables["cpu_idle"]["state"].min() >= -1
    info = json.loads(subprocess.run([sys.executable, "-m", "abtest.cli", "trace", "info", "--json", "--no-cache",
                                      str(live_trace)], check=True, capture_output=True, text=True).stdout)
    assert info["events"] == d.meta["events"]
    all_ts = [r[0] for rows in ref.events(str(live_trace)).values() for r in rows]
    assert (info["start_ns"], info["end_ns"]) == (min(all_ts), max(all_ts))
    assert info["lost_events"] == 0
