"""WA3 output directories as run stores (abtest.store.wa) and LISA plat_info through the platform loader.

The WA-shaped directories are built here in WA3's real on-disk structure (result.json Result pods,
.run_state.json, __meta/run_info.json, target_info.json, jobs.json, <id>-<label>-<iteration>/ job dirs with
artifacts), around the real x86 traces in ../shared/traces/x86-vm (symlinked, not copied). The metric
values and energy CSV samples are CONSTRUCTED test inputs (chosen so the expected averages are exact);
the traces are real.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from abtest.store.reader import StoreError, load_label
from abtest.store.wa import energy_csv_to_samples, load_wa_output

X86 = "x86-vm"


def _pod_result(status, metrics=(), artifacts=(), classifiers=None):
    return {
        "_pod_version": 1,
        "_pod_serialization_version": 1,
        "status": status,
        "metrics": [
            {
                "_pod_version": 1,
                "_pod_serialization_version": 1,
                "name": n,
                "value": v,
                "units": u,
                "lower_is_better": lib,
                "classifiers": c,
            }
            for n, v, u, lib, c in metrics
        ],
        "artifacts": [
            {
                "_pod_version": 1,
                "_pod_serialization_version": 1,
                "name": n,
                "path": p,
                "kind": k,
                "description": d,
                "classifiers": {},
            }
            for n, p, k, d in artifacts
        ],
        "events": [],
        "classifiers": classifiers or {},
        "metadata": {},
    }


def make_wa_run(
    root: Path, *, kernel: str, trace: Path, times_s: list[float], power_w: float, failed_extra: bool = False
) -> Path:
    """A WA3 run: job wk1 'hackbench' x len(times_s) iterations, trace-cmd + energy_measurement artifacts."""
    (root / "__meta").mkdir(parents=True)
    (root / "__meta" / "run_info.json").write_text(
        json.dumps(
            {
                "_pod_version": 1,
                "_pod_serialization_version": 1,
                "uuid": "6f1c9d2e-0000-4000-8000-00000000000" + kernel[-1],
                "run_name": f"hackbench-{kernel}",
                "project": "abtest-interop",
                "project_stage": None,
                "start_time": "2026-11-21T10:00:00",
                "end_time": "2026-11-21T10:05:00",
                "duration": 300.0,
            }
        )
    )
    (root / "__meta" / "target_info.json").write_text(
        json.dumps(
            {
                "format_version": 2,
                "target": "LinuxTarget",
                "abi": "x86_64",
                "os": "linux",
                "os_version": {},
                "cpus": [{"name": "cpu0"}, {"name": "cpu1"}],
                "system_id": "x",
                "hostid": 1,
                "hostname": "x86-vm",
                "is_rooted": True,
                "kernel_release": f"6.1.0-{kernel}",
                "kernel_version": "#1 SMP PREEMPT_DYNAMIC",
                "kernel_config": {},
                "sched_features": ["GENTLE_FAIR_SLEEPERS"],
                "page_size_kb": 4,
            }
        )
    )
    (root / "__meta" / "jobs.json").write_text(
        json.dumps(
            {
                "jobs": [
                    {
                        "id": "wk1",
                        "workload_name": "hackbench",
                        "label": "hackbench",
                        "iterations": len(times_s),
                        "classifiers": {"kernel": kernel},
                        "workload_parameters": {"datasize": 100, "groups": 10},
                        "runtime_parameters": {},
                        "augmentations": ["trace-cmd", "energy_measurement"],
                    }
                ]
            }
        )
    )
    jobs = []
    for i, t in enumerate(times_s, start=1):
        d = root / f"wk1-hackbench-{i}"
        d.mkdir()
        os.symlink(trace, d / "trace.dat")
        n = 51  # 5 s at 10 Hz
        pl.DataFrame(
            {
                "timestamp": [k * 0.1 for k in range(n)],
                "cpu_power": [power_w] * n,
                "gpu_energy": [k * 0.1 * 0.25 for k in range(n)],
            }
        ).write_csv(d / "energy_instrument_output.csv")
        (d / "result.json").write_text(
            json.dumps(
                _pod_result(
                    "OK",
                    metrics=[
                        ("execution_time", t, "seconds", True, {}),
                        ("latency", t / 10, "ms", True, {"test": "pipe"}),
                    ],
                    artifacts=[
                        ("trace-cmd-bin", "trace.dat", "data", "trace-cmd generated ftrace dump."),
                        ("energy_instrument_output", "energy_instrument_output.csv", "data", ""),
                    ],
                    classifiers={"kernel": kernel},
                )
            )
        )
        jobs.append(
            {
                "_pod_version": 1,
                "id": "wk1",
                "label": "hackbench",
                "iteration": i,
                "status": "OK",
                "retries": 0,
                "timestamp": "2026-11-21T10:01:00",
            }
        )
    if failed_extra:
        d = root / f"wk1-hackbench-{len(times_s) + 1}"
        d.mkdir()
        (d / "result.json").write_text(json.dumps(_pod_result("FAILED")))
        jobs.append(
            {
                "_pod_version": 1,
                "id": "wk1",
                "label": "hackbench",
                "iteration": len(times_s) + 1,
                "status": "FAILED",
                "retries": 2,
                "timestamp": "2026-11-21T10:02:00",
            }
        )
    (root / ".run_state.json").write_text(
        json.dumps({"_pod_version": 1, "status": "OK", "timestamp": "2026-11-21T10:05:00", "jobs": jobs})
    )
    (root / "result.json").write_text(json.dumps(_pod_result("OK", classifiers={"kernel": kernel})))
    return root


@pytest.fixture
def wa_runs(tmp_path, traces):
    a = make_wa_run(
        tmp_path / "wa-menu",
        kernel="menu",
        trace=traces / X86 / "x86-menu-hackbench-cyclictest.dat",
        times_s=[10.1, 10.3, 10.2, 10.0, 10.2],
        power_w=2.0,
        failed_extra=True,
    )
    b = make_wa_run(
        tmp_path / "wa-ladder",
        kernel="ladder",
        trace=traces / X86 / "x86-ladder-hackbench-cyclictest.dat",
        times_s=[12.0, 12.2, 11.9, 12.1, 12.0],
        power_w=2.5,
    )
    return a, b


def test_mapping(wa_runs):
    a, _ = wa_runs
    its = load_wa_output(a)
    assert [(it.label, it.workload, it.index) for it in its] == [("menu", "hackbench", i) for i in range(1, 7)]
    good, failed = its[:5], its[5]
    assert all(it.usable for it in good)
    assert not failed.usable and "WA job status FAILED" in failed.problems
    it = good[0]
    assert it.metrics["execution_time"].value == 10.1 and it.metrics["execution_time"].unit == "seconds"
    assert it.metrics["execution_time"].lower_is_better
    assert "latency[test=pipe]" in it.metrics
    assert it.trace_path.name == "trace.dat" and it.trace_path.resolve().name == "x86-menu-hackbench-cyclictest.dat"
    assert it.meta["kernel"]["release"] == "6.1.0-menu"
    assert it.meta["wa"]["workload_parameters"] == {"datasize": 100, "groups": 10}
    assert it.meta["hardware"]["cpus"] == 2


def test_energy_csv_conversion(wa_runs):
    a, _ = wa_runs
    it = load_wa_output(a)[0]
    power = pl.read_csv(it.power_path)
    assert set(power.columns) == {"ts_ns", "rail", "subsystem", "energy_uj"}
    last = power.group_by("rail").agg(pl.col("ts_ns").max(), pl.col("energy_uj").max()).sort("rail")
    # cpu: 2.0 W for 5 s -> 10 J; gpu: cumulative energy column, 0.25 W -> 1.25 J
    assert last.rows() == [("cpu", 5_000_000_000, pytest.approx(10e6)), ("gpu", 5_000_000_000, pytest.approx(1.25e6))]
    from abtest.analysis.power import power_metrics
    from abtest.store.power import read_power_csv

    vals, mapping, _checks = power_metrics(read_power_csv(it.power_path))
    m = {v.key: v for v in vals}
    assert m["power.rail.cpu"].value == pytest.approx(2000.0)
    assert m["power.rail.gpu"].value == pytest.approx(250.0)
    assert m["power.GPU"].value == pytest.approx(250.0) and m["power.Total"].value == pytest.approx(2250.0)
    assert mapping.source.startswith("generic rail-name patterns")


def test_energy_csv_errors(tmp_path):
    bad = tmp_path / "energy.csv"
    bad.write_text("foo,bar\n1,2\n")
    with pytest.raises(StoreError, match="no time column"):
        energy_csv_to_samples(bad)
    bad.write_text("timestamp,foo\n0,2\n")
    with pytest.raises(StoreError, match="_energy or <site>_power"):
        energy_csv_to_samples(bad)


def test_not_wa_and_broken(tmp_path):
    with pytest.raises(StoreError, match="not a Workload Automation 3"):
        load_wa_output(tmp_path)
    (tmp_path / "result.json").write_text("{broken")
    with pytest.raises(StoreError, match="line 1"):
        load_wa_output(tmp_path)


def test_store_label_detects_wa(wa_runs):
    a, _ = wa_runs
    label = load_label(a)
    assert list(label.workloads) == ["hackbench"]
    assert len(label.complete("hackbench")) == 5 and len(label.excluded()) == 1


def test_compare_cli_on_wa_runs(wa_runs):
    a, b = wa_runs
    r = subprocess.run(
        [sys.executable, "-m", "abtest.cli", "compare", str(a), str(b), "--format", "json", "--no-trace"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    (w,) = doc["workloads"]
    assert w["workload"] == "hackbench" and w["n_a"] == 5 and w["n_b"] == 5  # the FAILED job is not used
    by = {m["name"]: m for m in w["metrics"]}
    assert by["execution_time"]["a"]["mean"] == pytest.approx(10.16)
    assert by["execution_time"]["b"]["mean"] == pytest.approx(12.04)
    assert by["execution_time"]["verdict"] == "regression"  # longer run time, lower is better
    assert by["power.rail.cpu"]["a"]["mean"] == pytest.approx(2000.0)
    assert by["power.rail.cpu"]["b"]["mean"] == pytest.approx(2500.0)
    assert "latency[test=pipe]" in by


def test_lisa_plat_info_through_platform_loader(traces):
    from abtest.analysis.platform import load_platform
    from abtest.session import Trace

    plat = load_platform(traces / "lisa" / "sched_load-plat_info.yml")
    t = Trace(traces / "lisa" / "sched_load-trace.dat", platform=traces / "lisa" / "sched_load-plat_info.yml")
    assert t.platform == plat
    text = json.dumps(plat, default=str)
    assert "1024" in text and "446" in text  # Juno capacities: 2x A57 1024, 4x A53 446


def test_wa_trace_artifact_feeds_trace_metrics(wa_runs):
    """The trace-cmd artifact of a WA job is decoded by abtest (real x86 trace) into trace metrics."""
    from abtest.compare.metrics import derived_metrics

    a, _ = wa_runs
    it = load_wa_output(a)[0]
    values, notes = derived_metrics(it, use_cache=False)
    metrics = {m.key: m for m in values}
    assert any(m.analysis == "idle" for m in values), notes
    assert metrics["power.rail.cpu"].value == pytest.approx(2000.0)
