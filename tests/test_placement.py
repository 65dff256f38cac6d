"""Task placement: per-task residency per CPU, migrations and cluster balance.

Real traces: x86-vm/*.dat and lisa/sched_load-trace.dat (Arm Juno, with its plat_info.yml: clusters
[0,3,4,5] = A53 and [1,2] = A57). Expected values come from `trace-cmd report -t` text swept in plain
Python here. The balance index is checked on hand-built frames of the uclamp seed (8 tasks on 4 little
CPUs) with values worked out by hand.
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter, defaultdict

import polars as pl
import pytest

from abtest import Trace
from abtest.analysis import placement, registry

LINE = re.compile(
    r"^\s*(?P<comm>.+?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+(?P<s>\d+)\.(?P<ns>\d{9}):\s+(?P<event>\w+):\s+(?P<body>.*)$"
)
SWITCH = re.compile(r"^(?P<pc>.*):(?P<pp>\d+) \[-?\d+\] \S+ ==> (?P<nc>.*):(?P<np>\d+) \[-?\d+\]$")
SWITCH_KV = re.compile(r"prev_comm=(?P<pc>.*) prev_pid=(?P<pp>\d+) .* next_comm=(?P<nc>.*) next_pid=(?P<np>\d+) ")
MIGRATE = re.compile(r"pid=(?P<p>\d+) prio=\d+ orig_cpu=(?P<o>\d+) dest_cpu=(?P<d>\d+)")


def report(path):
    out = subprocess.run(["trace-cmd", "report", "-t", str(path)], capture_output=True, text=True, check=True).stdout
    ev = []
    for line in out.splitlines():
        m = LINE.match(line)
        if m:
            ev.append((int(m["s"]) * 10**9 + int(m["ns"]), int(m["cpu"]), m["event"], m["body"]))
    return ev


def expected_placement(events):
    """(residency {(pid, cpu): ns}, runs per pid [(start, cpu)], migrate counts per pid)."""
    lo, hi = min(e[0] for e in events), max(e[0] for e in events)
    cur: dict[int, tuple[int, int]] = {}  # cpu -> (pid, since)
    res = defaultdict(int)
    runs = defaultdict(list)
    mig = Counter()
    for ts, cpu, ev, body in sorted(
        (e for e in events if e[2] in ("sched_switch", "sched_migrate_task")), key=lambda e: e[0]
    ):
        if ev == "sched_migrate_task":
            mig[int(MIGRATE.search(body)["p"])] += 1
            continue
        m = SWITCH.match(body) or SWITCH_KV.search(body)
        prev, nxt = int(m["pp"]), int(m["np"])
        if cpu not in cur:  # before the first switch on this CPU its prev task was running
            cur[cpu] = (prev, lo)
            runs[prev].append((lo, cpu))
        pid, since = cur[cpu]
        res[(pid, cpu)] += ts - since
        cur[cpu] = (nxt, ts)
        runs[nxt].append((ts, cpu))
    for cpu, (pid, since) in cur.items():
        res[(pid, cpu)] += hi - since
    res = {k: v for k, v in res.items() if k[0] != 0 and v > 0}
    runs = {p: [c for _, c in sorted(r)] for p, r in runs.items() if p != 0}
    return res, runs, mig


@pytest.fixture(scope="module")
def menu(traces):
    path = traces / "x86-vm" / "x86-menu-hackbench-cyclictest.dat"
    return Trace(path), expected_placement(report(path))


def test_task_residency_matches_report(menu):
    t, (exp_res, _, _) = menu
    res = t.placement.df_residency()
    got = {(r["pid"], r["cpu"]): r["time_ns"] for r in res.iter_rows(named=True)}
    assert got == exp_res  # exact, ns
    per_task = res.group_by("pid").agg(pl.col("pct").sum())
    assert per_task["pct"].to_list() == pytest.approx([100.0] * per_task.height)


def test_migrations_match_report(menu):
    t, (exp_res, runs, mig) = menu
    m = t.placement.df_migrations()
    got_mig = {r["pid"]: r["migrate_events"] for r in m.iter_rows(named=True) if r["migrate_events"]}
    assert got_mig == dict(mig)
    assert sum(got_mig.values()) == 149  # expected-counts.json: sched_migrate_task 149
    exp_changes = {p: sum(a != b for a, b in zip(c, c[1:])) for p, c in runs.items()}
    got_changes = {r["pid"]: r["observed_cpu_changes"] for r in m.iter_rows(named=True) if r["pid"] in exp_changes}
    assert got_changes == exp_changes


def test_balance_on_juno_clusters(traces):
    """Juno platform: frequency domains [0,3,4,5] and [1,2]; balance over tasks that ran >= 1 % of the window."""
    path = traces / "lisa" / "sched_load-trace.dat"
    t = Trace(path, platform=traces / "lisa" / "sched_load-plat_info.yml")
    cl = t.placement.clusters()
    assert {c: sorted(g["cpu"].to_list()) for (c,), g in cl.group_by(["cluster"])} == {0: [0, 3, 4, 5], 1: [1, 2]}
    exp_res, _, _ = expected_placement(report(path))
    window = t.end_ns - t.start_ns
    min_ns = window // 100
    total = defaultdict(int)
    for (pid, _cpu), v in exp_res.items():
        total[pid] += v
    cluster_of = {0: 0, 3: 0, 4: 0, 5: 0, 1: 1, 2: 1}
    tasks = [p for p, v in total.items() if v >= min_ns]
    home = {}
    for p in tasks:
        per = defaultdict(int)
        for (pid, cpu), v in exp_res.items():
            if pid == p:
                per[cluster_of[cpu]] += v
        home[p] = max(sorted(per), key=lambda c: per[c])
    ev = registry.evaluate(registry.PLACEMENT, t)  # what `abtest analyze` prints
    bal = ev.tables["balance"]
    vals = {v.key: v.value for v in ev.values}
    for c, cpus in ((0, [0, 3, 4, 5]), (1, [1, 2])):
        mine = [p for p in tasks if home[p] == c]
        runtime = {cpu: sum(exp_res.get((p, cpu), 0) for p in mine) for cpu in cpus}
        tot = sum(runtime.values())
        rows = {r["cpu"]: r for r in bal.filter(pl.col("cluster") == c).iter_rows(named=True)}
        assert sorted(rows) == sorted(cpus)
        assert sum(r["tasks"] for r in rows.values()) == len(mine)
        assert [r["expected_tasks_per_cpu"] for r in rows.values()] == pytest.approx(
            [len(mine) / len(cpus)] * len(cpus)
        )
        if tot:
            shares = [runtime[cpu] / tot for cpu in cpus]
            exp_bi = 1 - sum(abs(x - 1 / len(cpus)) for x in shares) / (2 * (1 - 1 / len(cpus)))
            assert rows[cpus[0]]["balance_index"] == pytest.approx(exp_bi)
            assert vals[f"placement.cluster.{c}.balance_index"] == pytest.approx(exp_bi)
            assert [rows[cpu]["runtime_share_pct"] for cpu in cpus] == pytest.approx([100 * x for x in shares])


def _seed_frames(assign: dict[int, int]) -> pl.DataFrame:
    """sched_switch rows: each task in `assign` (pid -> cpu) runs 100 ns in turn on its CPU, 10 rounds."""
    rows = []
    by_cpu = defaultdict(list)
    for pid, cpu in assign.items():
        by_cpu[cpu].append(pid)
    for cpu, pids in by_cpu.items():
        ts, prev = 0, 0
        for _ in range(10):
            for pid in pids:
                rows.append((ts, cpu, prev, pid))
                prev, ts = pid, ts + 100
        rows.append((ts, cpu, prev, 0))
    df = pl.DataFrame(rows, schema=["ts", "cpu", "prev_pid", "next_pid"], orient="row").sort("ts")
    return df.with_columns(
        pl.format("uclamp-{}", "prev_pid").alias("prev_comm"), pl.format("uclamp-{}", "next_pid").alias("next_comm")
    )


CLUSTERS = pl.DataFrame({"cpu": [0, 1, 2, 3, 4, 5, 6, 7], "cluster": [0, 0, 0, 0, 1, 1, 2, 2]})


def test_balance_seed_even():
    """8 capped tasks on 4 little CPUs, 2 per CPU: expected 2 per CPU, balance index 1."""
    sw = _seed_frames({100 + i: i // 2 for i in range(8)})
    res = placement.df_task_residency(placement.df_task_intervals(sw, start_ns=0, end_ns=2000))
    per = placement.df_balance_per_cpu(res, CLUSTERS)
    little = per.filter(pl.col("cluster") == 0)
    assert little["tasks"].to_list() == [2, 2, 2, 2]
    assert little["expected_tasks_per_cpu"].to_list() == [2.0] * 4
    b = placement.df_balance(per).filter(pl.col("cluster") == 0).row(0, named=True)
    assert (b["n_tasks"], b["n_cpus"], b["max_task_deviation"]) == (8, 4, 0.0)
    assert b["balance_index"] == pytest.approx(1.0)
    assert placement.df_balance(per).filter(pl.col("cluster") == 1)["n_tasks"][0] == 0


def test_balance_seed_packed():
    """Same 8 tasks packed 4 + 4 on CPUs 0 and 1: tasks/CPU 4,4,0,0; max deviation 2;
    shares 0.5,0.5,0,0 -> balance index 1 - (0.25+0.25+0.25+0.25) / (2 * 0.75) = 1/3."""
    sw = _seed_frames({100 + i: i // 4 for i in range(8)})
    res = placement.df_task_residency(placement.df_task_intervals(sw, start_ns=0, end_ns=4000))
    per = placement.df_balance_per_cpu(res, CLUSTERS)
    assert per.filter(pl.col("cluster") == 0)["tasks"].to_list() == [4, 4, 0, 0]
    b = placement.df_balance(per).filter(pl.col("cluster") == 0).row(0, named=True)
    assert b["max_task_deviation"] == 2.0
    assert b["balance_index"] == pytest.approx(1 / 3)
    only = placement.df_balance(placement.df_balance_per_cpu(res, CLUSTERS, tasks=["uclamp-100", 101]))
    assert only.filter(pl.col("cluster") == 0)["n_tasks"][0] == 2
