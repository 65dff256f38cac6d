"""Wakeup latency against an independent computation.

Real traces: x86-vm/*.dat (sched_waking / sched_wakeup / sched_wakeup_new / sched_switch, hackbench +
cyclictest). The expected latencies come from `trace-cmd report -t` text, parsed with regexes and matched
by a plain-Python state machine walking the events in report order:

* a task's wakeup is *pending* from the first wakeup event seen while the task is not known to be
  running, until the task is switched in (-> one latency sample) or switched out (it was in fact
  running: the wakeup found it on its CPU, no sample);
* wakeups of a running task are ignored; pid 0 is ignored.
"""
from __future__ import annotations

import math
import re
import subprocess

import numpy as np
import polars as pl
import pytest

from abtest import Trace
from abtest.analysis import latency
from abtest.trace.model import TraceData

X86 = ["x86-haltpoll-hackbench-cyclictest.dat", "x86-ladder-hackbench-cyclictest.dat",
       "x86-menu-hackbench-cyclictest.dat"]
LINE = re.compile(r"^\s*(?P<comm>.+?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+(?P<s>\d+)\.(?P<ns>\d{9}):\s+(?P<event>\w+):\s+(?P<body>.*)$")
SWITCH = re.compile(r"^(?P<pc>.*):(?P<pp>\d+) \[-?\d+\] \S+ ==> (?P<nc>.*):(?P<np>\d+) \[-?\d+\]$")
WAKE_NEW = re.compile(r"^(?P<c>.*):(?P<p>\d+) \[-?\d+\] CPU:\d+$")
WAKE_KV = re.compile(r"comm=(?P<c>.*) pid=(?P<p>\d+) prio=")


def report_events(path):
    out = subprocess.run(["trace-cmd", "report", "-t", str(path)], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        m = LINE.match(line)
        if m:
            yield int(m["s"]) * 10**9 + int(m["ns"]), m["event"], m["body"]


def expected_latencies(path, wake_events: tuple[str, ...]) -> list[tuple[int, str, int]]:
    """[(pid, comm, latency_ns)] from the state machine described in the module docstring."""
    running: dict[int, bool] = {}
    pending: dict[int, tuple[int, str]] = {}
    out = []
    for ts, ev, body in report_events(path):
        if ev == "sched_switch":
            m = SWITCH.match(body)
            prev, nxt = int(m["pp"]), int(m["np"])
            if prev:
                running[prev] = False
                pending.pop(prev, None)
            if nxt:
                if nxt in pending:
                    wts, comm = pending.pop(nxt)
                    out.append((nxt, comm, ts - wts))
                running[nxt] = True
        elif ev in wake_events:
            m = WAKE_KV.search(body) or WAKE_NEW.match(body)
            pid = int(m["p"])
            if pid and not running.get(pid, False) and pid not in pending:
                pending[pid] = (ts, m["c"])
    return out


@pytest.fixture(scope="module")
def x86_traces(traces):
    return {name: Trace(traces / "x86-vm" / name) for name in X86}


@pytest.mark.parametrize("name", X86)
def test_latency_matches_report_state_machine(x86_traces, name):
    t = x86_traces[name]
    exp = expected_latencies(t.path, ("sched_waking", "sched_wakeup_new"))
    lat = t.latency.df_latency()
    assert lat.height == len(exp) > 3000
    assert sorted(lat["latency_ns"].to_list()) == sorted(e[2] for e in exp)  # exact, ns
    got_pairs = sorted(zip(lat["pid"].to_list(), lat["latency_ns"].to_list()))
    assert got_pairs == sorted((p, d) for p, _, d in exp)
    us = np.array([e[2] for e in exp]) / 1e3
    st = latency.df_latency_stats(lat, by=None).row(0, named=True)
    assert st["wakeups"] == len(exp)
    assert st["mean_us"] == pytest.approx(us.mean())
    assert st["p50_us"] == pytest.approx(np.percentile(us, 50))
    assert st["p95_us"] == pytest.approx(np.percentile(us, 95))
    assert st["p99_us"] == pytest.approx(np.percentile(us, 99))
    assert st["gmean_us"] == pytest.approx(math.exp(np.log(us[us > 0]).mean()))


def test_cyclictest_thread_latency(x86_traces):
    """The 2 ms cyclictest measurement thread (500 loops): per-task stats equal the state machine's."""
    t = x86_traces["x86-menu-hackbench-cyclictest.dat"]
    exp = expected_latencies(t.path, ("sched_waking", "sched_wakeup_new"))
    per = latency.df_latency_stats(t.latency.df_latency())
    top = per.row(0, named=True)
    assert top["comm"] == "cyclictest"
    mine = np.array([d for p, c, d in exp if p == top["pid"]]) / 1e3
    assert top["wakeups"] == len(mine) >= 500
    assert top["p50_us"] == pytest.approx(np.percentile(mine, 50))
    assert top["p99_us"] == pytest.approx(np.percentile(mine, 99))
    assert top["gmean_us"] == pytest.approx(math.exp(np.log(mine).mean()))


def test_sched_wakeup_used_when_waking_absent(x86_traces):
    t = x86_traces["x86-ladder-hackbench-cyclictest.dat"]
    tables = {n: t.df(n, windowed=False) for n in ("sched_switch", "sched_wakeup", "sched_wakeup_new")}
    t2 = Trace(t.path, _data=TraceData(tables=tables, meta=dict(t.meta)))
    assert t2.latency.wakeup_event() == "sched_wakeup"
    exp = expected_latencies(t.path, ("sched_wakeup", "sched_wakeup_new"))
    lat = t2.latency.df_latency()
    assert sorted(lat["latency_ns"].to_list()) == sorted(e[2] for e in exp)
    # sched_wakeup fires after sched_waking (enqueue done): latencies are never longer by that measure
    with_waking = t.latency.df_stats().row(0, named=True)
    assert lat["latency_us"].median() <= with_waking["p50_us"]


def test_summary(x86_traces):
    t = x86_traces["x86-haltpoll-hackbench-cyclictest.dat"]
    s = latency.summary(t, top_tasks=3)
    exp = expected_latencies(t.path, ("sched_waking", "sched_wakeup_new"))
    assert s["wakeup_event"] == "sched_waking"
    assert s["matched_wakeups"] == len(exp)
    assert s["wakeups"] == s["matched_wakeups"] + s["unmatched_wakeups"]
    assert s["wakeups"] == t.df("sched_waking").filter(pl.col("pid") != 0).height + t.df("sched_wakeup_new").height
    assert len(s["tasks"]) == 3
    assert s["p50_us"] == pytest.approx(np.percentile(np.array([e[2] for e in exp]) / 1e3, 50))


def test_matching_rules_on_hand_built_frames():
    # pid 7: first ever event is the wakeup, then switched in -> 20 ns
    # pid 8: woken while it is (unknown to the trace) still running: next event is a switch-out -> dropped
    # pid 6: woken at 50 while running (dropped), switched out at 60, woken at 70 and 75 -> 100 - 70
    # pid 5: switched out at 100, woken at 150, in at 180 -> 30
    sw = pl.DataFrame({"ts": [10, 35, 40, 60, 100, 100, 180], "cpu": [0, 1, 1, 0, 0, 1, 1],
                       "prev_pid": [0, 8, 0, 6, 5, 7, 0], "next_pid": [6, 0, 7, 0, 6, 0, 5]})
    wk = pl.DataFrame({"ts": [20, 30, 50, 70, 75, 150], "pid": [7, 8, 6, 6, 6, 5],
                       "comm": ["c7", "c8", "c6", "c6", "c6", "c5"], "target_cpu": [1] * 6})
    lat = latency.df_wakeup_latency(wk, sw)
    assert lat.select("pid", "wakeup_ts", "switch_in_ts", "latency_ns").rows() == [
        (7, 20, 40, 20), (6, 70, 100, 30), (5, 150, 180, 30)]


def test_missing_events(traces):
    from abtest.trace.errors import MissingEventsError

    t = Trace(traces / "PerfettoTraceScript" / "pixel7pro-power-rails.perfetto-trace")
    with pytest.raises(MissingEventsError, match="sched_waking"):
        t.latency.df_latency()
