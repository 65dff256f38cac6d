"""Every trace clock this kernel offers (tracefs `trace_clock`: local, global, counter, uptime, perf, mono,
mono_raw, boot, tai, x86-tsc, ...), recorded live: the file names its clock and the timestamps are in
that clock's own units (ns; a bare counter for `counter`; jiffies for `uptime`; TSC cycles for `x86-tsc`,
for which trace-cmd 3.1.6 writes no TSC2NSEC conversion). Timestamps and fields must equal
`trace-cmd report` and `trace info --json` must name the clock and span. The tracefs lock is held and the
clock restored."""

from __future__ import annotations

import json
import subprocess
import sys

import tracedat_ref as ref
from live_record import record

from abtest.trace import tracedat


def test_every_trace_clock_decodes_as_trace_cmd_reports_it(tracefs_lock, tmp_path):
    fs = tracefs_lock
    offered = (fs / "trace_clock").read_text().split()
    saved = next(c for c in offered if c.startswith("[")).strip("[]")
    clocks = [c.strip("[]") for c in offered]
    assert {"local", "global", "boot"} <= set(clocks)
    files = {}
    try:
        for clock in clocks:
            (fs / "trace_clock").write_text(clock)
            files[clock] = record(
                fs,
                tmp_path / f"clock-{clock}.dat",
                ["sched/sched_switch", "sched/sched_wakeup"],
                1024,
                [["hackbench", "-l", "5"]],
            )
    finally:
        (fs / "trace_clock").write_text(saved)
    assert f"[{saved}]" in (fs / "trace_clock").read_text()

    spans = {}
    for clock, path in files.items():
        raw, meta = tracedat.read(path, path.read_bytes())
        assert meta["clock"] == clock
        reference = ref.events(str(path))
        counts = {name: df.height for name, df in raw.items()}
        assert counts == {ev: len(rows) for ev, rows in reference.items()}, clock
        assert counts.get("sched_switch", 0) > 10, (clock, counts)
        assert ref.compare_fields(raw, str(path)) == sum(counts.values()), clock  # ts, cpu, pid, fields
        info = json.loads(
            subprocess.run(
                [sys.executable, "-m", "abtest.cli", "trace", "info", "--json", "--no-cache", str(path)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )
        all_ts = [row[0] for rows in reference.values() for row in rows]
        assert (info["clock"], info["start_ns"], info["end_ns"]) == (clock, min(all_ts), max(all_ts))
        spans[clock] = info["end_ns"] - info["start_ns"]
    # the units differ: a bare counter and jiffies count far fewer ticks than the ns clocks over the run
    for ticks in ("counter", "uptime"):
        if ticks in spans:
            assert spans[ticks] < spans["local"] / 1000, spans
