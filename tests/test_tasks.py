"""Task states and activations per task name (abtest.analysis.tasks) against a plain-Python state machine over
`trace-cmd report -R` text (x86-vm trace.dat, kernel 6.18; -R prints prev_state as recorded: trace-cmd's
sched_switch plugin letters predate 4.14's TASK_REPORT bits, it prints 0x80 (I) as "W") and over LISA's Juno
text trace (numeric pre-4.14 prev_state: 4096 = preempted, 64 = TASK_DEAD, 130 = D|WAKEKILL)."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import polars as pl
import pytest
from test_latency import SWITCH, SWITCH_KV, WAKE_KV, WAKE_NEW, report_events

from abtest import Trace
from abtest.analysis import registry, tasks


def _state(st: str, pre_4_14: bool) -> str | None:
    """sched_switch prev_state (report letters or a number) -> state; None = exited."""
    if st.isdigit():
        v = int(st)
        if v & 0xFF == 0:
            return "runnable"
        if v & 1:
            return "sleeping"
        if v & 2:
            return "uninterruptible"
        if v & (0x70 if pre_4_14 else 0x30):
            return None
        return "sleeping" if v & 0xFF == 0x80 else "other"
    if st.startswith("R"):
        return "runnable"
    if "S" in st or st == "I":
        return "sleeping"
    if "D" in st:
        return "uninterruptible"
    if "X" in st or "Z" in st:
        return None
    return "other"


def expected_states(path, start, end, pre_4_14=False):
    """{comm: {state: ns}} and {comm: [run durations]} from the report, walking events in order."""
    state: dict[int, tuple[str | None, str, int]] = {}  # pid -> (state, comm, since)
    seen: set[int] = set()
    cpus: dict[int, int | None] = {}
    acc: dict[str, dict] = defaultdict(lambda: defaultdict(int))
    runs: dict[str, list[int]] = defaultdict(list)

    def close(pid, ts):
        st, comm, since = state[pid]
        a, b = max(since, start), min(ts, end)
        if st is not None and b > a:
            acc[comm][st] += b - a
            if st == "running":
                runs[comm].append(b - a)

    def set_state(pid, st, comm, ts, cpu=None):
        if pid in state:
            if (state[pid][0], state[pid][1], cpus.get(pid)) == (st, comm, cpu):
                return  # no change (e.g. a switch-in of a task the trace shows running already: one run, as LISA)
            close(pid, ts)
        state[pid] = (st, comm, ts)
        cpus[pid] = cpu
        seen.add(pid)

    for ts, cpu, ev, body in report_events(path, raw=True):
        if ev == "sched_switch":
            m = SWITCH.match(body) or SWITCH_KV.search(body)
            prev, nxt = int(m["pp"]), int(m["np"])
            if prev:
                if prev not in seen:
                    state[prev] = ("running", m["pc"], start)  # first event switches it out: it was running
                    cpus[prev] = cpu
                set_state(prev, _state(m["st"], pre_4_14), m["pc"], ts)
            if nxt:
                set_state(nxt, "running", m["nc"], ts, cpu)
        elif ev in ("sched_wakeup", "sched_wakeup_new"):
            m = WAKE_KV.search(body) or WAKE_NEW.match(body)
            pid = int(m["p"])
            if not pid:
                continue
            if pid not in seen or (state[pid][0] in ("sleeping", "uninterruptible", "other")):
                set_state(pid, "runnable", m["c"], ts)
    for pid in list(state):
        close(pid, end)
    return acc, runs


@pytest.mark.parametrize(
    "name,pre_4_14", [("x86-vm/x86-menu-hackbench-cyclictest.dat", False), ("lisa/trace_txt-trace.txt", True)]
)
def test_task_states_match_the_report(traces, name, pre_4_14):
    t = Trace(traces / name)
    iv = tasks.TasksAnalysis(t).df_state_intervals()
    exp, runs = expected_states(t.path, t.start_ns, t.end_ns, pre_4_14)
    got = {r["comm"]: r for r in tasks.df_task_states(iv).iter_rows(named=True)}
    assert set(got) == {c for c, d in exp.items() if sum(d.values())}
    for comm, d in exp.items():
        if not sum(d.values()):
            continue
        for s in tasks.STATES:
            assert got[comm][f"{s}_ns"] == d.get(s, 0), (comm, s)
        assert got[comm]["known_ns"] == sum(d.values())
        assert sum(got[comm][f"{s}_pct"] for s in tasks.STATES) == pytest.approx(100.0)
    act = {
        r["comm"]: r
        for r in tasks.df_activation_stats(tasks.df_activations(iv), window_ns=t.end_ns - t.start_ns).iter_rows(
            named=True
        )
    }
    for comm, durs in runs.items():
        assert act[comm]["activations"] == len(durs)
        ms = np.array(durs) / 1e6
        assert act[comm]["mean_ms"] == pytest.approx(ms.mean())
        assert act[comm]["p95_ms"] == pytest.approx(np.percentile(ms, 95))
    if pre_4_14:  # rt-app's "ramp" task of LISA's test: mostly running, no time lost to a dead state
        assert got["ramp"]["other_pct"] == 0 and got["ramp"]["running_pct"] > 80


def test_tables_and_metrics(traces):
    t = Trace(traces / "x86-vm" / "x86-menu-hackbench-cyclictest.dat")
    ev = registry.evaluate(registry.TASKS, t)  # what `abtest analyze` prints
    states = {r["comm"]: r for r in ev.tables["states"].iter_rows(named=True)}
    assert len(states) == 10
    cyc = states["cyclictest"]
    assert cyc["threads"] == 3 and cyc["sleeping_pct"] > 95 and cyc["activations"] > 500
    running = ev.tables["cluster_running"].filter(pl.col("comm") == "cyclictest")
    assert dict(running.select("cluster", "pct").iter_rows()) == {"cpu0-1": pytest.approx(100.0)}
    vals = {v.key: v.value for v in ev.values}
    assert vals == {v.key: v.value for v in tasks.metrics(t)}
    assert vals["tasks.task.hackbench.runnable_pct"] == pytest.approx(states["hackbench"]["runnable_pct"])
    assert vals["tasks.task.cyclictest.activation_p95_ms"] == pytest.approx(cyc["p95_ms"])
    stats = t.tasks.df_activation_stats().filter(pl.col("comm") == "cyclictest").row(0, named=True)
    assert (cyc["activations"], cyc["p95_ms"]) == (stats["activations"], pytest.approx(stats["p95_ms"]))
