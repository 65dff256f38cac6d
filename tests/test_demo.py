"""`make demo`'s main job (python -m abtest.demo) on the bundled real run store: it completes, prints the
key tables, and writes an HTML report with the seed-style tables, embedded figures and the metadata
header (kernel, hardware, governors, workload, iterations) taken from the iterations' meta.json."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STORE = ROOT / "examples" / "idle-governors"


def test_demo_report(tmp_path):
    env = dict(os.environ, COLUMNS="200", ABTEST_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("ABTEST_METRICS_CACHE", None)
    caches = {str(p): p.stat().st_mtime_ns for p in STORE.rglob(".abtest-metrics.json")}
    r = subprocess.run(
        [sys.executable, "-m", "abtest.demo", "--out", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "HTML report:" in r.stdout
    html_path = Path(re.search(r"HTML report: (\S+)", r.stdout).group(1))
    html = html_path.read_text()
    # metadata header from meta.json
    meta = json.loads((STORE / "menu/cyclictest/1/meta.json").read_text())
    assert meta["kernel"]["release"] in html and meta["hardware"]["cpu_model"] in html
    assert "menu" in html and "ladder" in html and "cyclictest" in html
    # seed-style tables and the all-metrics table, with verdicts
    assert "Idle misses and wakeup latency" in html and "All metrics" in html
    assert html.count("<table") >= 3
    # embedded figures (self-contained: no external resources)
    assert html.count("data:image/png;base64,") >= 2
    assert not re.search(r'<(img|script|link)[^>]+(src|href)="https?:', html)
    # the terminal summary shows the latency verdict
    assert "latency.gmean_us" in r.stdout
    # the bundled store stays as committed: metric caches in the user cache directory, none in examples/
    assert {str(p): p.stat().st_mtime_ns for p in STORE.rglob(".abtest-metrics.json")} == caches
    assert len(list((tmp_path / "cache" / "metrics").glob("*.json"))) == 16


def test_demo_comparison_is_a_real_difference():
    """The bundled store's wakeup-latency gmean differs between governors with significance; the
    per-iteration values behind it are recomputed here from `trace-cmd report` text (independent of abtest)."""
    from scipy import stats

    def gmean_latency_us(trace: Path) -> float:
        out = subprocess.run(
            ["trace-cmd", "report", "-R", "-t", str(trace)], capture_output=True, text=True, check=True
        ).stdout
        waking, lat, running = {}, [], {}
        for line in out.splitlines():
            # "-t": full-precision time, printed as "sec.nsec" or (clock "boot" here) as integer ns
            m = re.search(
                r"\[(\d+)\]\s*(\d+)(?:\.(\d{9}))?: (sched_waking|sched_wakeup_new|sched_switch):\s+(.*)", line
            )
            if not m:
                continue
            cpu, fields = int(m.group(1)), m.group(5)
            ts = int(m.group(2)) * 10**9 + int(m.group(3)) if m.group(3) else int(m.group(2))
            if m.group(4) != "sched_switch":
                pid = int(re.search(r"\bpid=(\d+)", fields).group(1))
                # waking a task that is still on a CPU changes nothing; the earliest pending wakeup counts
                if pid and pid not in running.values():
                    waking.setdefault(pid, ts)
            else:
                prev = int(re.search(r"prev_pid=(\d+)", fields).group(1))
                pid = int(re.search(r"next_pid=(\d+)", fields).group(1))
                waking.pop(prev, None)  # it went to sleep again before running: that wakeup is void
                running[cpu] = pid
                if pid and pid in waking:
                    lat.append((ts - waking.pop(pid)) / 1000.0)
        lat = [x for x in lat if x > 0]
        return float(stats.gmean(lat))

    a = [gmean_latency_us(p) for p in sorted(STORE.glob("menu/cyclictest/*/trace.dat"))]
    b = [gmean_latency_us(p) for p in sorted(STORE.glob("ladder/cyclictest/*/trace.dat"))]
    assert len(a) == len(b) == 8
    assert sum(b) / 8 > sum(a) / 8  # ladder wakes tasks up later
    assert stats.ttest_ind(a, b, equal_var=False).pvalue < 0.05


def test_live_variant_follows_this_machine():
    """`make demo-live` picks its A/B from this machine's cpuidle sysfs: governors only where a cpuidle driver
    with menu and ladder exists (and root can switch them), else the two kernels under QEMU."""
    from abtest.demo import CPUIDLE, GOVERNORS, KERNELS, choose_variant

    demo, why = choose_variant()
    try:
        driver = (CPUIDLE / "current_driver").read_text().strip()
        governors = set((CPUIDLE / "available_governors").read_text().split())
    except OSError:
        driver, governors = None, set()
    if driver in (None, "", "none"):
        assert demo is KERNELS and ("none" in why or "absent" in why)
    else:
        assert driver in why
        assert demo is (GOVERNORS if {"menu", "ladder"} <= governors and os.geteuid() == 0 else KERNELS)


def test_choose_variant_rules(tmp_path):
    """The decision on the sysfs files as the kernel writes them (one value per line, governors space-separated)."""
    from abtest.demo import GOVERNORS, KERNELS, choose_variant

    assert choose_variant(tmp_path / "absent")[0] is KERNELS
    (tmp_path / "current_driver").write_text("none\n")
    (tmp_path / "available_governors").write_text("ladder menu teo \n")
    demo, why = choose_variant(tmp_path)
    assert demo is KERNELS and "never runs" in why
    (tmp_path / "current_driver").write_text("haltpoll\n")
    assert choose_variant(tmp_path)[0] is (GOVERNORS if os.geteuid() == 0 else KERNELS)
    (tmp_path / "available_governors").write_text("haltpoll \n")
    demo, why = choose_variant(tmp_path)
    assert demo is KERNELS and "menu and ladder needed" in why


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("qemu-system-x86_64") is None or shutil.which("dropbear") is None,
    reason="needs qemu-system-x86 and dropbear-bin (make setup installs them)",
)
def test_demo_live_kernels(tmp_path):
    """`make demo-live`'s kernel A/B end to end (2 iterations per kernel to keep CI short): Debian 6.1 vs 6.12
    booted under QEMU, hackbench, compared; the headline lines are the comparison's JSON values, and no VM
    is left running."""

    def qemus() -> set[str]:
        return set(
            subprocess.run(
                ["pgrep", "-f", "qemu-system-x86_64.*abtest-vm-"], capture_output=True, text=True
            ).stdout.split()
        )

    before = qemus()
    env = dict(os.environ, COLUMNS="120")
    r = subprocess.run(
        [sys.executable, "-m", "abtest.demo", "--live", "--variant", "kernels", "-n", "2", "--out", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "live demo: kernels (--variant kernels)" in r.stdout
    d = json.loads((tmp_path / "demo-live-compare.json").read_text())
    w = d["workloads"][0]
    assert (d["label_a"], d["label_b"], w["workload"], w["n_a"], w["n_b"]) == ("kernelA", "kernelB", "hackbench", 2, 2)
    assert w["meta_a"]["kernel.release"].startswith("6.1.") and w["meta_b"]["kernel.release"].startswith("6.12.")
    by_name = {m["name"]: m for m in w["metrics"]}
    for key in ("hackbench_time_s", "latency.gmean_us", "latency.task.hackbench.gmean_us"):
        m = by_name[key]
        assert m["value_a"] > 0 and m["value_b"] > 0
        assert f"{key}: {m['value_a']:,.4g} -> {m['value_b']:,.4g}" in r.stdout
    assert (tmp_path / "demo-live-report.html").stat().st_size > 10_000
    assert not (tmp_path / "demo-report.html").exists()  # `make demo`'s report is never overwritten
    assert qemus() <= before
