"""Kernel events carried as trace_marker text (abtest.analysis.meta_events): devlib's frequencies in LISA's real
Juno traces, and the other forms (the kernel's own names, a tracing_mark_write: prefix, cpu_idle as an initial
state) on marker rows written in the test."""

from __future__ import annotations

import re

import polars as pl

from abtest import Trace
from abtest.analysis import meta_events
from abtest.trace.model import TraceData


def test_devlib_frequencies_in_lisa_traces(traces):
    for name, n in (("lisa/trace_txt-trace.txt", 12), ("lisa/sched_load-trace.dat", 6)):
        t = Trace(traces / name)
        got = meta_events.meta_cpu_frequency(t.df("marker", windowed=False))
        assert got.height == n
        assert set(got["source"]) == {"marker"}
        if name.endswith(".txt"):  # independent: the text lines
            want = [
                (int(c), int(s))
                for s, c in re.findall(r"cpu_frequency_devlib:\s+state=(\d+) cpu_id=(\d+)", (traces / name).read_text())
            ]
            assert list(zip(got["cpu"].to_list(), got["frequency_khz"].to_list())) == want


def test_marker_forms():
    marker = pl.DataFrame(
        {
            "ts": [1, 2, 3, 4, 5, 6],
            "cpu": [0, 0, 1, 1, 0, 0],
            "pid": [9] * 6,
            "text": [
                "cpu_frequency: state=1100000 cpu_id=1",
                "tracing_mark_write: cpu_idle: state=4294967295 cpu_id=1",
                "cpu_idle_devlib: state=2 cpu_id=0",
                "cpu_frequency: no fields here",
                "thermal_temperature: thermal_zone=cpu-thermal id=3 temp_prev=45000 temp=46000",
                "cpu_frequency_devlibx: state=1 cpu_id=1",
            ],  # another name: not a meta event of cpu_frequency
        }
    )
    f = meta_events.meta_cpu_frequency(marker)
    assert f.select("ts", "cpu", "frequency_khz").rows() == [(1, 1, 1100000)]
    i = meta_events.meta_cpu_idle(marker)
    assert i.select("ts", "cpu", "state").rows() == [(2, 1, -1), (3, 0, 2)]
    th = meta_events.meta_thermal_temperature(marker)
    assert th.select("ts", "thermal_zone", "id", "temp").rows() == [(5, "cpu-thermal", 3, 46000)]


def test_marker_cpu_idle_gives_the_initial_state(traces):
    """The x86 VM's CPU1 has no cpu_idle event at all (its whole window is unknown); a marker-carried cpu_idle
    (as devlib-style tools write) at some time gives its state from then on; wakeups still count kernel events."""
    t = Trace(traces / "x86-vm" / "x86-menu-hackbench-cyclictest.dat")
    tables = {n: t.df(n, windowed=False) for n in t.tables}
    ts = t.start_ns + 100_000_000
    extra = pl.DataFrame(
        {"ts": [ts], "cpu": [1], "pid": [1], "text": ["cpu_idle: state=1 cpu_id=1"]},
        schema={"ts": pl.Int64, "cpu": pl.Int32, "pid": pl.Int32, "text": pl.Utf8},
    )
    tables["marker"] = pl.concat([tables["marker"].select("ts", "cpu", "pid", pl.col("text").cast(pl.Utf8)), extra])
    t2 = Trace(t.path, _data=TraceData(tables=tables, meta=dict(t.meta)))
    before = t.idle.df_residency().filter(pl.col("cpu") == 1)
    assert before["state"].drop_nulls().len() == 0  # unknown throughout
    res = t2.idle.df_residency().filter(pl.col("cpu") == 1)
    assert dict(zip(res["state"].to_list(), res["time_ns"].to_list()))[1] == t.end_ns - ts
    assert t2.idle.df_wakeups().height == t.idle.df_wakeups().height
