"""`trace-cmd report` text saved with the options a kernel engineer uses: `-l` (latency-form flags, comm cut
to 8 characters), `--ts-diff` (`(+23)` before the event name), `-w` (wakeup latencies appended to
sched_switch lines and a summary at the end), `--verbose` (plugin and handler lines first), `--boundary`
(ring-buffer page starts between the events), `--debug` (those with the page's time and offset, padding /
time-extend / time-stamp records, `[delta:offset:size]` after each event), `-t`, and their
combinations. Each must give the tables of the plain report: same events, lost events and every field.

Two real files: a shared trace.dat whose clock trace-cmd prints as SEC.USEC, and a trace recorded here with
the `boot` clock, which trace-cmd 3.1.6 prints as a raw count; with `-l` that count runs straight into
the flags column (`1d..2.70077748285446:`).
"""

from __future__ import annotations

import re
import subprocess

from live_record import record

from abtest.trace.readers import read_trace

VARIANTS = [
    ["-l"],
    ["--ts-diff"],
    ["-l", "--ts-diff"],
    ["-w"],
    ["--verbose"],
    ["--boundary"],
    ["--debug"],
    ["-t"],
    ["-t", "-l", "--ts-diff"],
]


def _report(dat, opts: list[str], out):
    out.write_text(
        subprocess.run(
            ["trace-cmd", "report", "-i", str(dat), *opts], check=True, capture_output=True, text=True
        ).stdout
    )
    return out


def _assert_variants_match(dat, tmp_path) -> dict[str, str]:
    """Every variant against the plain report; returns {variant: its text} for further checks."""
    plain = read_trace(_report(dat, [], tmp_path / "plain.txt"))
    assert plain.meta["events"].get("sched_switch", 0) > 100
    texts = {}
    for opts in VARIANTS:
        label = " ".join(opts)
        path = _report(dat, opts, tmp_path / f"report{label.replace(' ', '')}.txt")
        texts[label] = path.read_text()
        got = read_trace(path)
        assert got.meta["events"] == plain.meta["events"], label
        assert got.meta["lost_events_per_cpu"] == plain.meta["lost_events_per_cpu"], label
        for name, want in plain.tables.items():
            table = got.tables[name]
            skip = {"common_comm"} if "-l" in opts else set()  # -l prints the comm cut to 8 characters
            if "-t" in opts:
                skip.add("ts")  # ns where the plain report prints microseconds
            cols = [
                c
                for c in want.columns
                if c not in skip and not c.startswith("common_flags") and c != "common_preempt_count"
            ]
            assert table.select(cols).equals(want.select(cols)), (label, name)
            if "-l" in opts and "common_comm" in want.columns:
                assert table["common_comm"].cast(str).equals(want["common_comm"].cast(str).str.slice(0, 8)), name
        if "-w" in opts:
            assert any("report -w" in w for w in got.meta["warnings"]), got.meta["warnings"]
        if "--debug" in opts:
            assert any("report --debug" in w for w in got.meta["warnings"]), got.meta["warnings"]
    return texts


def test_report_variants_of_a_shared_trace(traces, tmp_path):
    texts = _assert_variants_match(traces / "x86-vm/x86-menu-hackbench-cyclictest.dat", tmp_path)
    assert re.search(r"\] +\d+\.\d{6}: \(\+\d+\) ", texts["--ts-diff"])
    assert "Average wakeup latency:" in texts["-w"] and " Latency: " in texts["-w"]
    assert "[SUBBUFFER START]" in texts["--boundary"] and " TIME STAMP: timestamp:" in texts["--debug"]


def test_report_variants_of_a_raw_clock_trace(tracefs_lock, tmp_path):
    fs = tracefs_lock
    assert "boot" in (fs / "trace_clock").read_text()  # the boot clock: Linux 4.10+
    saved = next(c for c in (fs / "trace_clock").read_text().split() if c.startswith("[")).strip("[]")
    try:
        (fs / "trace_clock").write_text("boot")
        dat = record(
            fs,
            tmp_path / "boot.dat",
            ["sched/sched_switch", "sched/sched_wakeup", "sched/sched_waking"],
            1024,
            [["hackbench", "-l", "10"]],
        )
    finally:
        (fs / "trace_clock").write_text(saved)
    texts = _assert_variants_match(dat, tmp_path)
    # the raw count glued to the flags column, as trace-cmd 3.1.6 prints it with -l
    assert re.search(r"^ *\S+-\d+ +\d[.a-zA-Z]\S{4}\d+: ", texts["-l"], re.M), texts["-l"][:400]
