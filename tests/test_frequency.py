"""abtest.analysis.frequency on real traces; expected values computed independently in the test
(from `trace-cmd report` text parsed with a regex, or with a plain sweep over the reader's rows)."""

from __future__ import annotations

import re
import subprocess
from collections import defaultdict

import polars as pl
import pytest

from abtest import Trace
from abtest.analysis import frequency as fq
from abtest.analysis import registry

JUNO = "lisa/sched_load-trace.dat"
LINE = re.compile(
    r"^\s*(?P<comm>.+?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+(?P<s>\d+)\.(?P<frac>\d{6,9}):\s+(?P<ev>\w+):\s+(?P<rest>.*)$"
)


def _ns(sec: str, frac: str) -> int:
    return int(sec) * 1_000_000_000 + int(frac.ljust(9, "0"))


@pytest.fixture(scope="module")
def juno_report(traces, tmp_path_factory):
    """`trace-cmd report -t` (full ns timestamps) of the Juno trace: (text path, list of (ts_ns, event, rest))."""
    out = subprocess.run(
        ["trace-cmd", "report", "-t", str(traces / JUNO)], capture_output=True, text=True, check=True
    ).stdout
    rows = [(_ns(m["s"], m["frac"]), m["ev"], m["rest"]) for m in map(LINE.match, out.splitlines()) if m]
    path = tmp_path_factory.mktemp("juno") / "juno-report.txt"
    path.write_text(out)
    return path, rows


def _expected_residency(rows, start, end):
    """Plain sweep: per cpu {khz|None: [total_ns, active_ns]} from cpu_frequency + cpu_idle rows."""
    events = defaultdict(list)
    first_idle = {}
    for ts, ev, rest in rows:
        if ev == "cpu_frequency":
            khz, cpu = map(int, re.match(r"state=(\d+) cpu_id=(\d+)", rest).groups())
            events[cpu].append((ts, "f", khz))
        elif ev == "cpu_idle":
            state, cpu = map(int, re.match(r"state=(\d+) cpu_id=(\d+)", rest).groups())
            events[cpu].append((ts, "i", state))
            first_idle.setdefault(cpu, state)
    result = {}
    for cpu, evs in events.items():
        if not any(kind == "f" for _, kind, _ in evs):
            continue
        evs.sort(key=lambda e: e[0])
        freq = None
        idle = first_idle.get(cpu) == 4294967295  # first event is an exit -> it was idle before
        acc = defaultdict(lambda: [0, 0])
        t = start
        for ts, kind, val in evs + [(end, "end", None)]:
            acc[freq][0] += ts - t
            if not idle:
                acc[freq][1] += ts - t
            t = ts
            if kind == "f":
                freq = val
            elif kind == "i":
                idle = val != 4294967295
        result[cpu] = dict(acc)
    return result


@pytest.fixture(scope="module", params=["trace.dat", "report-text"])
def juno_trace(request, traces, juno_report):
    return Trace(traces / JUNO) if request.param == "trace.dat" else Trace(juno_report[0])


def test_juno_opp_residency_matches_report(juno_trace, juno_report):
    rows = juno_report[1]
    start, end = rows[0][0], max(r[0] for r in rows)
    assert (juno_trace.start_ns, juno_trace.end_ns) == (start, end)
    expected = _expected_residency(rows, start, end)
    res = juno_trace.frequency.df_opp_residency()
    got = {(c, f): (t, a) for c, f, t, a in res.select("cpu", "frequency_khz", "time_ns", "active_ns").iter_rows()}
    want = {(c, f): tuple(v) for c, d in expected.items() for f, v in d.items() if v[0] > 0}
    assert got == want
    assert sum(1 for r in rows if r[1] == "cpu_frequency") == 16
    # a window: totals add up to the window length for every CPU
    w = juno_trace.window(start + 150_000_000, start + 300_000_000)
    tot = w.frequency.df_opp_residency().group_by("cpu").agg(pl.col("time_ns").sum())
    assert set(tot["time_ns"]) == {150_000_000}


def _freq_stream(rows):
    """Per cpu [(ts, khz, source)] from report rows: kernel cpu_frequency events and devlib's trace_marker
    lines (`print: ... cpu_frequency_devlib: state=K cpu_id=C`), in trace order."""
    per_cpu = defaultdict(list)
    for ts, ev, rest in rows:
        m = re.search(r"state=(\d+) cpu_id=(\d+)", rest)
        if ev == "cpu_frequency":
            per_cpu[int(m[2])].append((ts, int(m[1]), "kernel"))
        elif ev == "print" and "cpu_frequency_devlib:" in rest:
            per_cpu[int(m[2])].append((ts, int(m[1]), "marker"))
    return per_cpu


def _total_trans(evs):
    """cpufreq total_trans: kernel events changing the value in force (any source), the first one when
    nothing was known before it."""
    n, cur = 0, None
    for _, khz, src in evs:
        if src == "kernel" and khz != cur:
            n += 1
        cur = khz
    return n


def test_juno_stats_transitions_and_domains(juno_trace, juno_report):
    rows = juno_report[1]
    start, end = rows[0][0], max(r[0] for r in rows)
    per_cpu = _freq_stream(rows)
    stats = {r["cpu"]: r for r in juno_trace.frequency.df_frequency_stats().iter_rows(named=True)}
    for cpu, evs in per_cpu.items():
        kernel = [(t, k) for t, k, src in evs if src == "kernel"]
        changes = _total_trans(evs)
        # the first kernel event of a CPU is a transition: cpufreq emits the event only on a change
        assert changes == 1 + sum(1 for (_, a), (_, b) in zip(kernel, kernel[1:]) if a != b)
        assert stats[cpu]["transitions"] == changes
        assert stats[cpu]["transitions_per_s"] == pytest.approx(changes / ((end - start) / 1e9))
        assert stats[cpu]["marker_samples"] == sum(1 for *_, src in evs if src == "marker") == 1
        weighted = sum(k * (t2 - t1) for (t1, k, _), (t2, *_) in zip(evs, evs[1:] + [(end, None, None)]))
        assert stats[cpu]["time_weighted_khz"] == pytest.approx(weighted / (end - evs[0][0]))
        assert stats[cpu]["unknown_ns"] == evs[0][0] - start
        assert stats[cpu]["event_mean_khz"] == pytest.approx(sum(k for _, k in kernel) / len(kernel))
    doms = fq.df_cpu_domains(juno_trace.df("cpu_frequency"))
    assert dict(doms.iter_rows()) == {0: 0, 1: 1, 2: 1, 3: 0, 4: 0, 5: 0}  # Juno: LITTLE 0,3,4,5; big 1,2
    dres = juno_trace.frequency.df_domain_opp_residency()
    assert dres.group_by("domain").agg(pl.col("time_ns").sum())["time_ns"].to_list() == [end - start] * 2
    # per domain: the first CPU's figures; OPP shares + the unknown lead-in sum to 100 %
    dom = {r["cluster"]: r for r in juno_trace.frequency.df_domain_frequency_stats().iter_rows(named=True)}
    assert set(dom) == {"cpu0,3-5", "cpu1-2"}
    for name, lead in (("cpu0,3-5", 0), ("cpu1-2", 1)):
        assert dom[name]["mean_khz"] == pytest.approx(stats[lead]["time_weighted_khz"])
        assert dom[name]["transitions"] == stats[lead]["transitions"]
        assert dom[name]["unknown_ns"] == stats[lead]["unknown_ns"]
        shares = dres.filter(pl.col("domain") == lead)["pct"].sum()
        assert shares == pytest.approx(100.0)
    v = {x.key: x.value for x in registry.evaluate(registry.FREQUENCY, juno_trace).values}
    opp = sum(x for k, x in v.items() if k.startswith("frequency.opp.cpu1@"))
    assert opp + v["frequency.cluster.cpu1-2.unknown_pct"] == pytest.approx(100.0)
    assert v["frequency.cluster.cpu1-2.unknown_pct"] == pytest.approx(100.0 * stats[1]["unknown_ns"] / (end - start))


def test_lisa_marker_frequencies_fill_a_trace_without_kernel_events(traces):
    """LISA's trace_txt test trace (Juno r2) has no cpu_frequency event at all: the CPUs never changed
    frequency. devlib wrote each CPU's frequency into the trace at start and stop; those marker lines are
    the only frequency information, and now give every CPU a known frequency after its first marker."""
    path = traces / "lisa" / "trace_txt-trace.txt"
    t = Trace(path)
    assert "cpu_frequency" not in t.tables
    first, value = {}, {}
    for line in path.read_text().splitlines():  # independent: the text itself
        m = re.search(r"\s(\d+)\.(\d{6}): print: .*cpu_frequency_devlib:\s+state=(\d+) cpu_id=(\d+)", line)
        if m:
            cpu = int(m[4])
            first.setdefault(cpu, _ns(m[1], m[2]))
            value.setdefault(cpu, set()).add(int(m[3]))
    assert set(first) == set(range(6)) and all(len(v) == 1 for v in value.values())
    stats = {r["cpu"]: r for r in t.frequency.df_frequency_stats().iter_rows(named=True)}
    for cpu in range(6):
        assert stats[cpu]["time_weighted_khz"] == next(iter(value[cpu]))
        assert stats[cpu]["unknown_ns"] == first[cpu] - t.start_ns
        assert (stats[cpu]["events"], stats[cpu]["marker_samples"], stats[cpu]["transitions"]) == (0, 2, 0)
    vals = {v.key: v.value for v in fq.metrics(t)}
    assert vals["frequency.cluster.cpu1-2.mean_mhz"] == 1200.0 and vals["frequency.cluster.cpu0,3-5.mean_mhz"] == 950.0
    assert vals["frequency.opp.cpu1@1200000.residency_pct"] + vals[
        "frequency.cluster.cpu1-2.unknown_pct"
    ] == pytest.approx(100.0)


def test_marker_values_are_state_not_transitions():
    # cpu0: marker 500 MHz, kernel 500 (no change: not a transition), kernel 800 (one), marker 800 (state)
    # cpu1: kernel 300 first (a transition: nothing known before), marker 600 (state), kernel 600 (no change)
    ch = pl.DataFrame(
        {
            "ts": [10, 20, 30, 40, 10, 20, 30],
            "cpu": [0, 0, 0, 0, 1, 1, 1],
            "frequency_khz": [500, 500, 800, 800, 300, 600, 600],
            "source": ["marker", "kernel", "kernel", "marker", "kernel", "marker", "kernel"],
        }
    )
    tr = fq.df_transitions(ch)
    assert tr.select("cpu", "ts", "from_khz", "to_khz", "held_ns").rows() == [
        (0, 30, 500, 800, 20),
        (1, 10, None, 300, None),
    ]
    st = {r["cpu"]: r for r in fq.df_frequency_stats(ch, start_ns=0, end_ns=50).iter_rows(named=True)}
    assert (st[0]["events"], st[0]["marker_samples"], st[0]["transitions"], st[0]["unknown_ns"]) == (2, 2, 1, 10)
    assert st[1]["time_weighted_khz"] == pytest.approx((300 * 10 + 600 * 30) / 40)


def test_oscillation_detection_on_square_wave():
    # hand-built square wave: 300 MHz <-> 2 GHz every 4 ms on cpu 0, a slow ramp on cpu 1
    ts = [i * 4_000_000 for i in range(11)]
    f0 = [300_000 if i % 2 == 0 else 2_000_000 for i in range(11)]
    f1 = [300_000 + i * 100_000 for i in range(11)]
    ev = pl.DataFrame({"ts": ts * 2, "cpu": [0] * 11 + [1] * 11, "frequency_khz": f0 + f1})
    osc = fq.df_oscillations(ev, span_pct=50, within_ms=10, start_ns=0, end_ns=44_000_000)
    r0, r1 = osc.row(0, named=True), osc.row(1, named=True)
    # cpu0: 11 transitions (the first event counts: nothing was known before it), 10 of them full-range swings
    # after 4 ms; 9 of those reverse the previous one
    assert (r0["transitions"], r0["rapid_transitions"], r0["oscillations"]) == (11, 10, 9)
    assert (r1["transitions"], r1["rapid_transitions"], r1["oscillations"]) == (11, 0, 0)
    assert fq.df_oscillations(ev, span_pct=50, within_ms=3, start_ns=0, end_ns=44_000_000)["oscillations"][0] == 0


def test_missing_events_error_names_event(traces):
    from abtest.trace.errors import MissingEventsError

    t = Trace(traces / "catapult" / "android_systrace.txt")
    with pytest.raises(MissingEventsError, match="cpu_frequency"):
        t.frequency.df_opp_residency()
    with pytest.raises(MissingEventsError, match="cpu_frequency"):  # `abtest analyze`: skipped, naming it
        registry.evaluate(registry.FREQUENCY, t)


def test_pixel7pro_opp_residency_plain_sweep(traces):
    """Pixel 7 Pro perfetto trace: residency recomputed with a plain per-event sweep over the decoded rows."""
    t = Trace(traces / "PerfettoTraceScript" / "pixel7pro-power-rails.perfetto-trace")
    freq = t.df("cpu_frequency")
    assert freq.height == 11998
    rows = [(ts, "i", c, s) for ts, c, s in t.df("cpu_idle").select("ts", "cpu", "state").iter_rows()]
    rows += [(ts, "f", c, k) for ts, c, k in freq.select("ts", "cpu", "frequency_khz").iter_rows()]
    # polled sys_stats samples count only before the CPU's first cpu_frequency event
    first_event = {}
    for ts, c in sorted(freq.select("ts", "cpu").iter_rows()):
        first_event.setdefault(c, ts)
    rows += [
        (ts, "f", c, k)
        for ts, c, k in t.df("cpu_frequency_polled").select("ts", "cpu", "frequency_khz").iter_rows()
        if ts < first_event.get(c, 1 << 62)
    ]
    first_idle = {}
    for _ts, _kind, c, v in sorted(r for r in rows if r[1] == "i"):
        first_idle.setdefault(c, v)
    start, end = t.start_ns, t.end_ns
    state = {c: [None, first_idle.get(c) == -1, start] for c in range(8)}  # freq, idle, since
    acc = defaultdict(lambda: [0, 0])
    for ts, kind, c, v in sorted(rows, key=lambda r: (r[0], r[1] == "f")) + [(end, "end", c, None) for c in range(8)]:
        f, idle, since = state[c]
        acc[(c, f)][0] += ts - since
        if not idle:
            acc[(c, f)][1] += ts - since
        state[c][2] = ts
        if kind == "f":
            state[c][0] = v
        elif kind == "i":
            state[c][1] = v != -1
    want = {k: tuple(v) for k, v in acc.items() if v[0] > 0}
    assert len(want) > 40  # 8 CPUs x their OPPs actually visited
    got = {
        (c, f): (tn, an)
        for c, f, tn, an in t.frequency.df_opp_residency()
        .select("cpu", "frequency_khz", "time_ns", "active_ns")
        .iter_rows()
    }
    assert got == want
    doms = dict(fq.df_cpu_domains(freq).iter_rows())
    assert doms == {0: 0, 1: 0, 2: 0, 3: 0, 4: 4, 5: 4, 6: 6, 7: 6}  # Tensor G2: 4 little, 2 mid, 2 big
    # the X1 CPUs (6, 7) have no cpu_frequency event for the first 17.95 s: the polled samples cover
    # that, so only the time before the first poll stays unknown
    unknown = {c: tn for (c, f), (tn, _) in got.items() if f is None}
    assert first_event[6] - start > 17_000_000_000 and unknown[6] < 300_000_000 and unknown[7] < 300_000_000
    stats = t.frequency.df_frequency_stats()
    assert stats["transitions"].sum() <= 11998 and (stats["transitions_per_s"] > 0).all()
