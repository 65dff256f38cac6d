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

import pytest
import tracedat_ref as ref
from live_record import record

from abtest.trace import tracedat
from abtest.trace.readers import read_trace

EVENTS = ("sched/sched_switch", "sched/sched_wakeup", "sched/sched_waking", "power/cpu_idle", "power/cpu_idle_miss")


@pytest.fixture
def live_trace(tracefs_lock, tmp_path):
    """Record a short real trace; yields the trace.dat path (the tracefs `trace` text of the same buffer is
    next to it, suffix .txt, for tests/test_text_flags.py). Restores tracefs even on failure."""
    out = tmp_path / "live.dat"
    yield record(
        tracefs_lock,
        out,
        list(EVENTS),
        8192,
        [["hackbench", "-l", "50"], ["cyclictest", "-q", "-t", "1", "-i", "2000", "-l", "250"]],
        text_copy=out.with_suffix(".txt"),
    )


def test_live_trace_matches_trace_cmd_report(live_trace, tmp_path):
    variants = {"extracted": live_trace}
    for version, comp in (("6", "none"), ("7", "none")):
        out = tmp_path / f"live-v{version}-{comp}.dat"
        subprocess.run(
            [
                "trace-cmd",
                "convert",
                "-i",
                str(live_trace),
                "-o",
                str(out),
                "--file-version",
                version,
                "--compression",
                comp,
            ],
            check=True,
            capture_output=True,
        )
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
    info = json.loads(
        subprocess.run(
            [sys.executable, "-m", "abtest.cli", "trace", "info", "--json", "--no-cache", str(live_trace)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    assert info["events"] == d.meta["events"]
    all_ts = [r[0] for rows in ref.events(str(live_trace)).values() for r in rows]
    assert (info["start_ns"], info["end_ns"]) == (min(all_ts), max(all_ts))
    assert info["lost_events"] == 0
