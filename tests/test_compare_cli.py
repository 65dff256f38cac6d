"""`abtest compare` end to end on a store built from the real x86-vm traces, plus bad-input handling.

What is real: the three traces in ../shared/traces/x86-vm were recorded on an x86_64 VM (2 CPUs, Linux
6.18, cpuidle driver haltpoll) under the haltpoll, menu and ladder cpuidle governors running the same workload
(hackbench, then `cyclictest -t 2 -i 2000 -l 500`). There is one trace per governor, so the iterations are
TIME WINDOWS of each trace: `trace-cmd split` (the real tool) cuts the cyclictest phase (the 0.9 s before the
"workload end" marker) into 150 ms trace.dat files, one iteration each. Labels = governors. No power data
exists for these traces (no meter on that VM), so the power side is not exercised here (see
test_seed_tables.py). The expected per-iteration metrics are computed in this test from `trace-cmd report -t`
text with plain Python (not with abtest), and the verdicts are checked against p-values computed here with
scipy directly and the documented rule.
"""

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from scipy import stats as sps
from shared_data import TRACES

from abtest.cli import cli
from abtest.store.writer import write_iteration

X86 = TRACES / "x86-vm"
WINDOW_MS = 150
WINDOWS = {"haltpoll": 6, "ladder": 6, "menu": 3}
# `trace-cmd report -t` prints seconds with 9 decimals, or integer ns (no decimal point, no space) for
# counter-like clocks such as "boot"
LINE = re.compile(
    r"^\s*(?P<comm>.*?)-(?P<tid>\d+)\s+\[(?P<cpu>\d+)\]\s*(?P<ts>\d+(?:\.\d+)?):\s+(?P<event>\w+):\s+(?P<body>.*)$"
)


def _seconds(ts: str) -> float:
    return float(ts) if "." in ts else int(ts) / 1e9


pytestmark = pytest.mark.skipif(shutil.which("trace-cmd") is None, reason="trace-cmd not installed")


def _report(path: Path) -> list[re.Match]:
    out = subprocess.run(
        ["trace-cmd", "report", "-t", str(path)], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    return [m for m in map(LINE.match, out.splitlines()) if m]


def independent_metrics(path: Path) -> dict:
    """From trace-cmd's own decoding: too-shallow idle misses (cpu_idle_miss type=below), idle exits
    (cpu_idle state=4294967295), and wakeup latency = sched_wakeup / sched_wakeup_new of a task that is not
    running -> its next switch-in (the latest wakeup before the switch counts), geometric mean in us."""
    below = exits = idle_events = 0
    running: dict[int, int] = {}
    pending: dict[int, tuple[float, str]] = {}
    lat_us = []
    per_comm: dict[str, list[float]] = {}
    first = last = None
    for m in _report(path):
        ev, body, ts = m["event"], m["body"], _seconds(m["ts"])
        first = ts if first is None else first
        last = ts
        if ev == "cpu_idle_miss" and "type=below" in body:
            below += 1
        elif ev == "cpu_idle":
            idle_events += 1
            exits += "state=4294967295" in body
        elif ev in ("sched_wakeup", "sched_wakeup_new"):
            kv = re.search(r"\bcomm=(.*?) pid=(\d+)", body) or re.match(r"^(.*):(\d+) \[-?\d+\] CPU:\d+$", body)
            pid = int(kv[2])
            if pid != 0 and pid not in running.values():
                pending[pid] = (ts, kv[1])
        elif ev == "sched_switch":
            nxt = int(re.search(r"==> .*:(\d+) \[", body)[1])
            running[int(m["cpu"])] = nxt
            if nxt in pending:
                woken, comm = pending.pop(nxt)
                lat_us.append((ts - woken) * 1e6)
                per_comm.setdefault(comm, []).append(lat_us[-1])

    def gm(xs):
        return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None

    gmean = gm(lat_us)
    return {
        "idle.too_shallow_pct": 100.0 * below / exits if exits else None,
        "idle.wakeups_per_s": exits / (last - first),
        "latency.gmean_us": gmean,
        "cpu_idle_events": idle_events,
        "task_gmean_us": {c: gm(v) for c, v in per_comm.items()},
    }


def _split(src: Path, out_dir: Path, n: int) -> list[Path]:
    end = next(_seconds(m["ts"]) for m in _report(src) if "workload end" in m["body"])
    start = end - 0.9
    out_dir.mkdir(parents=True)
    subprocess.run(
        [
            "trace-cmd",
            "split",
            "-i",
            str(src),
            "-o",
            str(out_dir / "w.dat"),
            "-m",
            str(WINDOW_MS),
            "-r",
            f"{start:.6f}",
        ],
        capture_output=True,
        check=True,
        timeout=120,
    )
    files = sorted(out_dir.glob("w.dat.*"))
    assert len(files) >= n
    return files[: n + 1]


@pytest.fixture(scope="module")
def governor_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("gov")
    store = root / "results"
    expected = {}
    for gov, n in WINDOWS.items():
        files = _split(X86 / f"x86-{gov}-hackbench-cyclictest.dat", root / "split" / gov, n)
        expected[gov] = []
        for i, f in enumerate(files[:n]):
            it = write_iteration(
                store / gov / "cyclictest" / f"{i + 1}",
                {},
                {
                    "kernel": {"release": "6.18 (per ../shared/traces/README.md)", "machine": "x86_64"},
                    "hardware": {"cpus": 2, "cpu_model": "x86_64 virtual machine"},
                    "governors": {"cpuidle_driver": "haltpoll", "cpuidle": gov},
                    "settings": {"window": f"trace-cmd split window {i + 1} ({WINDOW_MS} ms)"},
                },
                complete=False,
            )
            (it / "metrics.json").unlink()  # trace-only iterations
            shutil.move(str(f), it / "trace.dat")
            (it / ".complete").touch()
            expected[gov].append(independent_metrics(it / "trace.dat"))
        if gov == "menu":  # one more window, never marked complete: must be reported and excluded
            it = store / gov / "cyclictest" / f"{n + 1}"
            it.mkdir()
            shutil.move(str(files[n]), it / "trace.dat")
    return store, expected


def _compare_json(store, a, b, *extra):
    r = CliRunner().invoke(cli, ["compare", a, b, "--store", str(store), "--format", "json", *extra])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def _expected_verdict(va, vb, lower_is_better, alpha=0.05, min_effect=1.0, aggregation="mean"):
    """The documented rule, computed here with scipy directly (a gmean metric: on the logarithms, delta =
    ratio of geometric means - 1)."""
    if aggregation == "gmean":
        va, vb = np.log(va), np.log(vb)
    p_w = sps.ttest_ind(va, vb, equal_var=False).pvalue
    p_u = sps.mannwhitneyu(va, vb, alternative="two-sided").pvalue
    d = (
        100 * (np.exp(np.mean(vb) - np.mean(va)) - 1)
        if aggregation == "gmean"
        else 100 * (np.mean(vb) - np.mean(va)) / abs(np.mean(va))
    )
    if p_w < alpha and p_u < alpha and abs(d) >= min_effect:
        if lower_is_better is None:
            return {"changed"}, p_w, p_u, d
        worse = d > 0 if lower_is_better else d < 0
        return {"regression" if worse else "improvement"}, p_w, p_u, d
    return {"no change", "inconclusive"}, p_w, p_u, d


def test_real_traces_end_to_end(governor_store):
    store, expected = governor_store
    doc = _compare_json(store, "haltpoll", "ladder")
    (w,) = doc["workloads"]
    assert w["n_a"] == 6 and w["n_b"] == 6 and w["iterations_a"] == ["1", "2", "3", "4", "5", "6"]
    metrics = {m["name"]: m for m in w["metrics"]}
    for name, exact in (("idle.too_shallow_pct", True), ("idle.wakeups_per_s", True), ("latency.gmean_us", False)):
        m = metrics[name]
        exp_a = [e[name] for e in expected["haltpoll"]]
        exp_b = [e[name] for e in expected["ladder"]]
        if exact:
            assert m["values_a"] == pytest.approx(exp_a, rel=1e-9) and m["values_b"] == pytest.approx(
                exp_b, rel=1e-9
            ), name
        else:
            assert m["values_a"] == pytest.approx(exp_a, rel=0.02), name
            assert m["values_b"] == pytest.approx(exp_b, rel=0.02), name
        verdicts, p_w, p_u, d = _expected_verdict(exp_a, exp_b, m["lower_is_better"], aggregation=m["aggregation"])
        assert m["verdict"] in verdicts, (name, m["verdict"], p_w, p_u, d)
        assert m["delta_pct"] == pytest.approx(d, rel=0.05 if not exact else 1e-9)
        if exact:
            assert m["p_welch"] == pytest.approx(p_w) and m["p_mannwhitney"] == pytest.approx(p_u)
    # the finding on this data: ladder wakes cyclictest later than haltpoll (gmean ~+40 %)
    lat = metrics["latency.gmean_us"]
    assert lat["verdict"] == "regression" and lat["delta_pct"] > 20 and lat["unit"] == "us"
    assert metrics["idle.wakeups_per_s"]["lower_is_better"] is None  # a rate of wakeups has no "better"
    assert lat["aggregation"] == "gmean" and lat["value_b"] / lat["value_a"] - 1 == pytest.approx(
        lat["delta_pct"] / 100
    )
    assert w["meta_b"]["governors.cpuidle"] == "ladder"
    idle_table = next(t for t in doc["tables"] if t["key"] == "idle")
    assert [r[1] for r in idle_table["rows"]] == ["haltpoll", "ladder", "perc_diff"]


def test_per_task_metrics_by_name(governor_store):
    """Per-task wakeup latency is keyed by the task's name (pids differ between runs) and equals trace-cmd's
    own decoding, per name, in every iteration; --task selects the names compared."""
    store, expected = governor_store
    doc = _compare_json(store, "haltpoll", "ladder", "--task", "cyclictest", "--task", "no_such_task")
    (w,) = doc["workloads"]
    m = next(m for m in w["metrics"] if m["name"] == "latency.task.cyclictest.gmean_us")
    assert m["key_template"] == "latency.task.{task}.gmean_us" and m["group"] == "cyclictest"
    for key, label in (("values_a", "haltpoll"), ("values_b", "ladder")):
        assert m[key] == pytest.approx([e["task_gmean_us"]["cyclictest"] for e in expected[label]], rel=0.02)
    tasks = {x["group"] for x in w["metrics"] if x["grouping"] == "task"}
    assert tasks == {"cyclictest"}  # only the named ones
    assert any("no_such_task never seen" in n for n in w["notes"])
    table = next(t for t in doc["tables"] if t["key"] == "tasks")
    assert {r[1] for r in table["rows"]} == {"cyclictest"}
    # without --task: the busiest names present in every iteration, cyclictest among them
    doc = _compare_json(store, "haltpoll", "ladder")
    names = {x["group"] for x in doc["workloads"][0]["metrics"] if x["grouping"] == "task"}
    assert "cyclictest" in names and 0 < len(names) <= 10


def test_three_labels_incomplete_excluded_and_cache(governor_store):
    store, expected = governor_store
    r = CliRunner().invoke(cli, ["compare", "haltpoll", "menu", "--store", str(store), "--format", "markdown"])
    assert r.exit_code == 0, r.output
    assert "menu/cyclictest: 1 iteration(s) excluded, 3 used" in r.output
    assert "cyclictest/4: incomplete (no .complete marker)" in r.output
    assert "| governors.cpuidle | haltpoll | menu |" in r.output
    assert (store / "menu" / "cyclictest" / "1" / ".abtest-metrics.json").is_file()
    assert not (store / "menu" / "cyclictest" / "4" / ".abtest-metrics.json").exists()
    doc = _compare_json(store, "menu", "ladder")
    w = doc["workloads"][0]
    got = w["metrics"][[m["name"] for m in w["metrics"]].index("idle.too_shallow_pct")]["values_a"]
    assert got == pytest.approx([e["idle.too_shallow_pct"] for e in expected["menu"]], rel=1e-9)


def test_label_paths_and_html(governor_store, tmp_path):
    store, _ = governor_store
    out = tmp_path / "r.html"
    r = CliRunner().invoke(
        cli,
        [
            "compare",
            str(store / "haltpoll"),
            str(store / "ladder"),
            "--store",
            str(tmp_path / "elsewhere"),
            "--html",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    html = out.read_text()
    assert "idle-state residency" in html and html.count("data:image/png;base64,") >= 2
    assert "no power per channel figure" in html  # missing power data is said, not hidden


# ------------------------------------------------------------------ bad input (constructed stores)
def _m(v, lib=True):
    return {"value": v, "unit": "mW", "lower_is_better": lib}


def _mk(root, label, workload, values, **kw):
    for i, v in enumerate(values):
        write_iteration(root / label / workload / str(i), {"p": _m(v)}, **kw)


def _run(*args):
    return CliRunner().invoke(cli, ["compare", *args, "--no-trace"])


def test_missing_label(tmp_path):
    _mk(tmp_path, "a", "w", [1, 2, 3])
    r = _run("a", "zz", "--store", str(tmp_path))
    assert r.exit_code == 2 and "label 'zz' not found" in r.output and "labels in the store: a" in r.output
    r = _run("a", "b", "--store", str(tmp_path / "nostore"))
    assert r.exit_code == 2 and "does not exist" in r.output


def test_mismatched_workloads(tmp_path):
    _mk(tmp_path, "a", "youtube", [1, 2, 3])
    _mk(tmp_path, "b", "game", [1, 2, 3])
    r = _run("a", "b", "--store", str(tmp_path))
    assert r.exit_code == 2 and "no workload in common" in r.output and "a: ['youtube']" in r.output
    r = _run("a", "b", "--store", str(tmp_path), "--workload", "youtube")
    assert r.exit_code == 2 and "workload 'youtube' not found under b" in r.output


def test_single_iteration(tmp_path):
    _mk(tmp_path, "a", "w", [10.0, 10.1, 9.9])
    _mk(tmp_path, "b", "w", [12.0])
    r = _run("a", "b", "--store", str(tmp_path))
    assert r.exit_code == 2
    assert "insufficient data (n = 3 vs 1" in r.output  # the table is still printed
    assert "not enough data: b/w: 1 usable iteration(s)" in r.output


def test_nan_metric_is_reported(tmp_path):
    _mk(tmp_path, "a", "w", [10.0, 10.1, 9.9, 10.0])
    _mk(tmp_path, "b", "w", [10.0, None, 9.9, 10.05])
    r = _run("a", "b", "--store", str(tmp_path), "--format", "json")
    assert r.exit_code == 0, r.output
    m = json.loads(r.output)["workloads"][0]["metrics"][0]
    assert m["b"]["n"] == 3 and len(m["nan_iterations"]) == 1 and m["nan_iterations"][0].endswith("b/w/1")
    r = _run("a", "b", "--store", str(tmp_path))
    assert "metric p is NaN/null in" in r.output


def test_missing_power_data(tmp_path):
    _mk(tmp_path, "a", "w", [10.0, 10.1, 9.9])
    _mk(tmp_path, "b", "w", [10.0, 10.1, 9.9])
    for i in range(3):
        (tmp_path / "a" / "w" / str(i) / "power.csv").write_text(
            "ts_ns,rail,subsystem,energy_uj\n0,VDD_CPUCL0,cpu,0\n1000000000,VDD_CPUCL0,cpu,100000\n"
        )
    r = _run("a", "b", "--store", str(tmp_path))
    assert r.exit_code == 0, r.output
    assert "metrics only in a: power.CPU, power.CPU-Little" in r.output
    _mk(tmp_path, "c", "w", [1.0, 2.0], complete=False)
    for i in range(2):
        (tmp_path / "c" / "w" / str(i) / "metrics.json").write_text('{"metrics": {}}')
        (tmp_path / "c" / "w" / str(i) / ".complete").touch()
    r = _run("b", "c", "--store", str(tmp_path))
    assert r.exit_code == 2 and "no metric in common" in r.output


def test_same_label_twice(tmp_path):
    _mk(tmp_path, "a", "w", [1, 2, 3])
    r = _run("a", str(tmp_path / "a"), "--store", str(tmp_path))
    assert r.exit_code == 2 and "same label directory" in r.output


# ------------------------------------------------------------------ live: abtest collect -> abtest compare
@pytest.mark.tracefs
def test_live_collect_then_compare(tmp_path):
    """A real recording on this machine: `abtest collect` (the collectors helper's command; it takes
    /tmp/abtest-tracefs.lock itself and restores the cpuidle governor) runs hackbench 3 times under the menu
    and haltpoll governors, then `abtest compare` reads that store. The per-iteration idle exits are checked
    against `trace-cmd report` of each recorded trace.dat; hackbench_time_s against metrics.json."""
    # this project's machines (DESIGN.md) switch cpuidle governors: their absence is a failure, not a skip
    assert Path("/sys/devices/system/cpu/cpuidle/current_governor").exists(), "no cpuidle governors here"
    store = tmp_path / "results"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "abtest.cli",
            "collect",
            "--target",
            "localhost",
            "--label",
            "menu",
            "--label",
            "haltpoll",
            "--workload",
            "hackbench:groups=2,loops=50",
            "-n",
            "3",
            "--store",
            str(store),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    doc = _compare_json(store, "haltpoll", "menu")
    (w,) = doc["workloads"]
    assert w["workload"] == "hackbench" and w["n_a"] == 3 and w["n_b"] == 3 and w["excluded"] == []
    assert w["meta_a"]["governors.cpuidle"] == "haltpoll" and w["meta_b"]["governors.cpuidle"] == "menu"
    assert w["meta_a"]["kernel.release"] == w["meta_b"]["kernel.release"] == os.uname().release
    metrics = {m["name"]: m for m in w["metrics"]}
    exits = {}
    for label, key in (("haltpoll", "values_a"), ("menu", "values_b")):
        its = [
            store / label / "hackbench" / name for name in w["iterations_a" if key == "values_a" else "iterations_b"]
        ]
        recorded = [json.loads((it / "metrics.json").read_text())["metrics"]["hackbench_time_s"]["value"] for it in its]
        assert metrics["hackbench_time_s"][key] == recorded
        indep = [independent_metrics(it / "trace.dat") for it in its]
        # on a saturated machine (other jobs on both CPUs) a CPU may never go idle during the run: then the
        # trace has no cpu_idle event, the idle analysis is skipped for that iteration and the notes say so
        exits[key] = [e["idle.wakeups_per_s"] for e in indep if e["cpu_idle_events"]]
        skipped = [n for n in w["notes"] if n.startswith(f"{label}/hackbench/") and "idle: skipped" in n]
        assert len(skipped) == sum(1 for e in indep if not e["cpu_idle_events"])
    if exits["values_a"] and exits["values_b"]:
        for key in ("values_a", "values_b"):
            assert metrics["idle.wakeups_per_s"][key] == pytest.approx(exits[key], rel=1e-9)
    else:
        assert "idle.wakeups_per_s" not in metrics
        side = "metrics_only_in_a" if exits["values_a"] else "metrics_only_in_b"
        assert ("idle.wakeups_per_s" in w[side]) == bool(exits["values_a"] or exits["values_b"])
    assert metrics["hackbench_time_s"]["verdict"] in ("regression", "improvement", "no change", "inconclusive")
