"""Overutilized, thermal, capacity and uclamp analyses against independent computations from the trace text.

Real traces: LISA's Juno text trace (sched_overutilized), trappy's Juno / Exynos traces (thermal_temperature,
cdev_update, the power allocator). No real trace available here carries per-root-domain overutilized, CPU
capacity or uclamp events (mainline has them only as bare tracepoints; LISA's kernel module or Android vendor
events emit them): those are checked on tests/data/make_kernel_views_trace.py's SYNTHETIC text trace, written
in those events' exact formats. Each expected value is a plain-Python sweep over the text lines: a value holds
until the next one of the same key, from its first sample to the window end.
"""

from __future__ import annotations

import importlib.util
import re
from collections import defaultdict
from pathlib import Path

import pytest

from abtest import Trace
from abtest.analysis import capacity, overutilized, registry, thermal

LINE = re.compile(
    r"^\s*(?P<comm>.+?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+(?P<s>\d+)\.(?P<us>\d{6}):\s+(?P<ev>\w+):\s+(?P<body>.*)$"
)


def _table_rows(analysis, t, table: str) -> dict:
    """{first column: row} of one declared table as `abtest analyze` gets it (registry.evaluate)."""
    df = registry.evaluate(analysis, t).tables[table]
    return {r[df.columns[0]]: r for r in df.iter_rows(named=True)}


def _events(path: Path, name: str):
    """(ts_ns, {field: value}) of every `name` line (key=value fields as strings)."""
    for line in path.read_text().splitlines():
        m = LINE.match(line)
        if m and m["ev"] == name:
            yield int(m["s"]) * 10**9 + int(m["us"]) * 1000, dict(re.findall(r"(\w+)=(\S+)", m["body"]))


def _sweep(samples: dict, end: int, start: int | None = None) -> dict:
    """{key: (time-weighted mean, known_ns, [(value, dur)])} for step signals {key: [(ts, value)]}."""
    out = {}
    for key, rows in samples.items():
        rows = sorted(rows)
        spans = []
        for (t, v), (t2, _) in zip(rows, rows[1:] + [(end, None)]):
            a = t if start is None else max(t, start)
            if t2 > a:
                spans.append((v, t2 - a))
        known = sum(d for _, d in spans)
        out[key] = (sum(v * d for v, d in spans) / known, known, spans)
    return out


@pytest.fixture(scope="module")
def views(tmp_path_factory):
    spec = importlib.util.spec_from_file_location(
        "make_kernel_views_trace", Path(__file__).parent / "data" / "make_kernel_views_trace.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.write(tmp_path_factory.mktemp("views") / "kernel_views_synthetic.txt")


def test_overutilized_on_lisa_juno_trace(traces):
    """Three sched_overutilized events (1 at 76.402065, 0 at 80.402065, 1 at 82.001337) in a window
    76.211513 .. 82.888010: overutilized 4.0 + 0.886673 s; 0.190552 s before the first event unknown."""
    path = traces / "lisa" / "trace_txt-trace.txt"
    t = Trace(path)
    evs = list(_events(path, "sched_overutilized"))
    assert [int(f["overutilized"]) for _, f in evs] == [1, 0, 1]
    win = t.end_ns - t.start_ns
    ou = sum(
        min(t2, t.end_ns) - t1
        for (t1, f), (t2, _) in zip(evs, evs[1:] + [(t.end_ns, None)])
        if f["overutilized"] == "1"
    )
    s = _table_rows(registry.OVERUTILIZED, t, "root_domains")[overutilized.SYSTEM]
    assert s["time_s"] == pytest.approx(ou / 1e9) == pytest.approx(4.886673)
    assert s["pct"] == pytest.approx(100.0 * ou / win)
    assert s["unknown_pct"] == pytest.approx(100.0 * (evs[0][0] - t.start_ns) / win)
    assert s["transitions"] == 2
    vals = {v.key: v.value for v in overutilized.metrics(t)}
    assert vals == {"overutilized.pct": pytest.approx(s["pct"]), "overutilized.time_s": pytest.approx(s["time_s"])}


def test_overutilized_per_root_domain(views):
    t = Trace(views)
    per = defaultdict(list)
    for ts, f in _events(views, "lisa__sched_overutilized"):
        per[f["span"]].append((ts, int(f["overutilized"])))
    sw = _sweep(per, t.end_ns)
    rds = _table_rows(registry.OVERUTILIZED, t, "root_domains")
    for span, (_, _, spans) in sw.items():
        ou = sum(d for v, d in spans if v == 1)
        assert rds[span]["time_s"] == pytest.approx(ou / 1e9)
    s = rds[overutilized.SYSTEM]
    # the system: overutilized while either root domain is (a sweep over both step signals)
    edges = sorted({ts for rows in per.values() for ts, _ in rows} | {t.end_ns})
    state = {k: None for k in per}
    ou_any = 0
    for a, b in zip(edges, edges[1:]):
        for k, rows in per.items():
            for ts, v in rows:
                if ts == a:
                    state[k] = v
        if any(v == 1 for v in state.values()):
            ou_any += b - a
    assert s["time_s"] == pytest.approx(ou_any / 1e9)
    keys = {v.key for v in overutilized.metrics(t)}
    assert {"overutilized.root_domain.0x3.pct", "overutilized.root_domain.0xc.pct", "overutilized.pct"} <= keys


@pytest.mark.parametrize("name", ["trappy/trace.txt", "trappy/trace_thermal.txt"])
def test_thermal_zones_cooling_devices_and_allocator(traces, name):
    path = traces / name
    t = Trace(path)
    temps = defaultdict(list)
    for ts, f in _events(path, "thermal_temperature"):
        temps[f["thermal_zone"]].append((ts, int(f["temp"]) / 1000.0))
    sw = _sweep(temps, t.end_ns)
    st = {r["zone"]: r for r in thermal.ThermalAnalysis(t).df_zone_stats().iter_rows(named=True)}
    assert set(st) == set(sw)
    for zone, (mean, known, spans) in sw.items():
        assert st[zone]["mean_c"] == pytest.approx(mean)
        assert st[zone]["known_ns"] == known
        assert st[zone]["max_c"] == pytest.approx(max(v for _, v in temps[zone]))
        above = sum(d for v, d in spans if v > thermal.THRESHOLD_C)
        assert st[zone]["above_threshold_pct"] == pytest.approx(100.0 * above / known)
    tables = registry.evaluate(registry.THERMAL, t).tables
    assert ("cooling_devices" in tables) == (name == "trappy/trace.txt")  # trace_thermal.txt has no cdev_update
    s = {k: {r[df.columns[0]]: r for r in df.iter_rows(named=True)} for k, df in tables.items()}
    if name == "trappy/trace.txt":
        cd = defaultdict(list)
        for ts, f in _events(path, "cdev_update"):
            cd[f["type"]].append((ts, int(f["target"])))
        for dev, (mean, known, spans) in _sweep(cd, t.end_ns).items():
            assert s["cooling_devices"][dev]["mean_state"] == pytest.approx(mean)
            assert s["cooling_devices"][dev]["active_pct"] == pytest.approx(
                100.0 * sum(d for v, d in spans if v) / known
            )
    alloc = [(ts, f) for ts, f in _events(path, "thermal_power_allocator") if ts < t.end_ns]  # window [start, end)
    pa = next(iter(s["power_allocator"].values()))
    assert pa["samples"] == len(alloc)
    assert pa["mean_granted_power_mw"] == pytest.approx(
        sum(int(f["total_granted_power"]) for _, f in alloc) / len(alloc)
    )
    last = alloc[-1][1]
    assert pa["control_temp_c"] == pytest.approx(
        (int(last["current_temperature"]) + int(last["delta_temperature"])) / 1000
    )


def test_cpu_capacity_and_uclamp(views):
    t = Trace(views)
    cap = defaultdict(list)
    orig = {}
    for ts, f in _events(views, "lisa__sched_cpu_capacity"):
        cap[int(f["cpu"])].append((ts, int(f["capacity"])))
        orig[int(f["cpu"])] = int(f["capacity_orig"])
    sw = _sweep(cap, t.end_ns)
    st = {r["cpu"]: r for r in capacity.CapacityAnalysis(t).df_capacity_stats().iter_rows(named=True)}
    for cpu, (mean, known, spans) in sw.items():
        assert st[cpu]["mean_capacity"] == pytest.approx(mean)
        assert st[cpu]["reduced_pct"] == pytest.approx(100.0 * sum(d for v, d in spans if v < orig[cpu]) / known)
        assert st[cpu]["capacity_orig"] == orig[cpu]
    # uclamp requests (uclamp_id 0 = min, 1 = max), each known from the task's first request of that kind
    req = defaultdict(lambda: defaultdict(list))
    for ts, f in _events(views, "uclamp_update_tsk"):
        req[f["comm"]]["min" if f["uclamp_id"] == "0" else "max"].append((ts, int(f["value"])))
    tc = {r["comm"]: r for r in capacity.CapacityAnalysis(t).df_task_clamps().iter_rows(named=True)}
    for comm, kinds in req.items():
        for kind in ("min", "max"):
            if kinds[kind]:
                first_any = min(ts for rows in kinds.values() for ts, _ in rows)
                # before the first request of this kind (but after the task's first update) the value is unknown
                mean = _sweep({0: kinds[kind]}, t.end_ns)[0][0]
                assert tc[comm][f"mean_uclamp_{kind}"] == pytest.approx(mean), (comm, kind, first_any)
            else:
                assert tc[comm][f"mean_uclamp_{kind}"] is None
    cfs = defaultdict(list)
    for ts, f in _events(views, "lisa__uclamp_util_cfs"):
        cfs[int(f["cpu"])].append((ts, int(f["uclamp_avg"])))
    cc = {r["cpu"]: r for r in capacity.CapacityAnalysis(t).df_cpu_clamps().iter_rows(named=True)}
    for cpu, (mean, _, _) in _sweep(cfs, t.end_ns).items():
        assert cc[cpu]["mean_uclamp_avg"] == pytest.approx(mean)
    vals = {v.key: v.value for v in capacity.metrics(t)}
    assert vals["capacity.cpu.2.mean"] == pytest.approx(sw[2][0])
    assert vals["uclamp.task.render.mean_min"] == pytest.approx(tc["render"]["mean_uclamp_min"])
    assert "uclamp.task.render.mean_max" not in vals  # never requested: no value rather than a made-up one
