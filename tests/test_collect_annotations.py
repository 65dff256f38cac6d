"""Trace annotations recorded live on this machine (abtest.collectors.annotate): the cgroup snapshot and the
thermal sampler write into the real trace buffer through trace_marker, a real cgroup move fires the kernel's
cgroup_attach_task, and the trace read back gives each thread's cgroup, zone temperatures, and wakeup latency
and CPU time per cgroup.

This machine has no thermal zone (no /sys/class/thermal/thermal_zone*): the sampler reads a stand-in sysfs tree
written by the test (two zones whose temp files the test changes while the sampler runs). Everything else is
real: tracefs, the kernel's events, /proc, a cpuset cgroup (v1) created and removed by the test.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import polars as pl
import pytest

from abtest import Trace
from abtest.analysis import cgroups, registry, thermal
from abtest.collectors.annotate import TraceAnnotator
from abtest.targets.local import LocalTarget

CPUSET = Path("/sys/fs/cgroup/cpuset")
EVENTS = (
    "sched/sched_switch",
    "sched/sched_wakeup",
    "sched/sched_wakeup_new",
    "sched/sched_process_fork",
    "cgroup/cgroup_attach_task",
)


def _cpuset_path(pid: int, tid: int) -> str | None:
    """Independent reading of /proc/<pid>/task/<tid>/cgroup: the cpuset line's path, else cgroup v2's."""
    try:
        lines = Path(f"/proc/{pid}/task/{tid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    cpuset = [ln.split(":", 2)[2] for ln in lines if ln.split(":", 2)[1] == "cpuset"]
    v2 = [ln[3:] for ln in lines if ln.startswith("0::")]
    return (cpuset or v2 or [None])[0]


@pytest.mark.skipif(not (CPUSET / "tasks").exists(), reason="needs the cgroup v1 cpuset hierarchy")
def test_cgroup_snapshot_thermal_sampler_and_attach_events(tracefs_lock, tmp_path):
    fs = tracefs_lock
    zones = tmp_path / "thermal"
    for zid, typ, temp in ((0, "cpu-thermal", 45000), (3, "gpu thermal", 51000)):
        (zones / f"thermal_zone{zid}").mkdir(parents=True)
        (zones / f"thermal_zone{zid}" / "type").write_text(typ + "\n")
        (zones / f"thermal_zone{zid}" / "temp").write_text(f"{temp}\n")
    group = CPUSET / f"abtest-cgtest-{os.getpid()}"
    out = tmp_path / "annotated.dat"
    child = None
    snapshot = {}
    ann = TraceAnnotator(LocalTarget(), str(fs / "trace_marker"), thermal_period_s=0.2, thermal_root=str(zones))
    cpu = _cpu_tracing_idle_exits(fs)
    try:
        group.mkdir()
        (group / "cpuset.cpus").write_text((CPUSET / "cpuset.cpus").read_text())
        (group / "cpuset.mems").write_text((CPUSET / "cpuset.mems").read_text())
        (fs / "tracing_on").write_text("0")
        (fs / "trace").write_text("")
        for ev in EVENTS:
            (fs / "events" / ev / "enable").write_text("1")
        (fs / "tracing_on").write_text("1")
        me = os.getpid()
        snapshot = {tid: _cpuset_path(me, tid) for tid in map(int, os.listdir(f"/proc/{me}/task"))}
        ann.start()
        assert ann.zones == [(0, "cpu-thermal"), (3, "gpu thermal")] and ann.pid
        # a task that sleeps 1 ms 300 times; moved into the new cpuset group half-way. Pinned to a CPU whose
        # switch-ins from idle the kernel traces (see _cpu_tracing_idle_exits)
        child = subprocess.Popen(
            ["taskset", "-c", str(cpu), "python3", "-c", "import time\nfor _ in range(300): time.sleep(0.001)"]
        )
        time.sleep(0.25)
        (zones / "thermal_zone0" / "temp").write_text("47500\n")
        (group / "tasks").write_text(str(child.pid))
        moved_at = time.monotonic()
        child.wait(timeout=60)
        time.sleep(max(0.0, 0.45 - (time.monotonic() - moved_at)))
        ann.stop()
        (fs / "tracing_on").write_text("0")
        subprocess.run(["trace-cmd", "extract", "-o", str(out)], check=True, capture_output=True, timeout=120)
    finally:
        ann.stop()
        (fs / "tracing_on").write_text("0")
        for ev in EVENTS:
            (fs / "events" / ev / "enable").write_text("0")
        (fs / "trace").write_text("")
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
        if group.exists():
            group.rmdir()  # empty: the child has exited

    t = Trace(out)
    # 1. snapshot: every thread of this process with the path /proc gave
    ch = cgroups.CgroupAnalysis(t).df_membership_changes()
    snap = dict(ch.filter(pl.col("source") == "marker").select("pid", "cgroup").iter_rows())
    assert len(snap) > 20  # every thread of the machine
    for tid, path in snapshot.items():
        assert snap[tid] == path
    # 2. the kernel's attach event for the move, and the child's wakeups before it inherited from its parent
    moved = ch.filter((pl.col("pid") == child.pid) & (pl.col("source") == "kernel"))
    assert moved["cgroup"].to_list() == [f"/{group.name}"]
    inherited = ch.filter((pl.col("pid") == child.pid) & (pl.col("source") == "fork"))
    assert inherited["cgroup"].to_list() == [snapshot[threading_id()]]
    # 3. wakeup latency per cgroup: the child's wakeups after the move, recomputed from trace-cmd report
    exp_after = _child_wakeups(out, child.pid, int(moved["ts"][0]))
    stats = {r["cgroup"]: r for r in cgroups.CgroupAnalysis(t).df_latency_stats().iter_rows(named=True)}
    assert stats[f"/{group.name}"]["wakeups"] == len(exp_after) > 50
    rt = registry.evaluate(registry.CGROUPS, t).tables["runtime"]  # what `abtest analyze` prints
    mine = rt.filter(pl.col("cgroup") == f"/{group.name}").row(0, named=True)
    assert mine["tasks"] == 1 and mine["runtime_s"] > 0
    # 4. thermal: both zones sampled about every 0.2 s, the change written mid-run seen
    temps = thermal.ThermalAnalysis(t).df_zone_temperatures()
    by_zone = {z: sorted(set(v)) for z, v in temps.group_by("zone").agg(pl.col("temp_c")).iter_rows()}
    assert by_zone == {"cpu-thermal": [45.0, 47.5], "gpu_thermal": [51.0]}
    st = {r["zone"]: r for r in thermal.ThermalAnalysis(t).df_zone_stats().iter_rows(named=True)}
    assert st["gpu_thermal"]["marker_samples"] >= 3 and st["cpu-thermal"]["max_c"] == 47.5
    assert 45.0 < st["cpu-thermal"]["mean_c"] < 47.5


def _cpu_tracing_idle_exits(fs: Path) -> int:
    """A CPU on which the kernel traces sched_switch from the idle task to a woken task.

    Machines of this kind (6.18 firecracker guests, haltpoll cpuidle, since 2026-11-25) never trace the
    switch from idle to a task on CPU 1 (switches into idle are traced): a task sleeping there has wakeups but
    no switch-ins, so no wakeup latency. Probed here with a sleep loop on each CPU and sched_switch alone."""
    found = []
    for cpu in sorted(os.sched_getaffinity(0)):
        (fs / "tracing_on").write_text("0")
        (fs / "trace").write_text("")
        (fs / "events/sched/sched_switch/enable").write_text("1")
        (fs / "tracing_on").write_text("1")
        try:
            subprocess.run(
                ["taskset", "-c", str(cpu), "python3", "-c", "import time\nfor _ in range(50): time.sleep(0.001)"],
                check=True,
                timeout=60,
            )
        finally:
            (fs / "tracing_on").write_text("0")
            (fs / "events/sched/sched_switch/enable").write_text("0")
        text = (fs / "trace").read_text()
        (fs / "trace").write_text("")
        if len(re.findall(rf"\[{cpu:03d}\][^\n]*sched_switch: prev_comm=\S+ prev_pid=0 ", text)) >= 20:
            return cpu
        found.append(cpu)
    pytest.skip(f"this kernel traces no switch from idle to a task on CPUs {found}: no wakeup latency to measure")


def threading_id() -> int:
    """This test's own thread id (the child's parent)."""
    return int(Path("/proc/thread-self").resolve().name)


def _child_wakeups(path: Path, pid: int, after_ns: int) -> list[int]:
    """Wakeup latencies (ns) of `pid` for sched_wakeup events at or after `after_ns`, from trace-cmd report:
    pending from a wakeup while not running, until its switch-in."""
    rep = subprocess.run(["trace-cmd", "report", "-t", str(path)], capture_output=True, text=True, check=True).stdout
    # `-t` prints "<s>.<ns>", or the bare ns count for counter-like trace clocks
    line = re.compile(r"\]\s*(\d+)(?:\.(\d{9}))?:\s+(sched_wakeup|sched_switch):\s+(.*)$")
    running, pending, out = False, None, []
    for m in map(line.search, rep.splitlines()):
        if not m:
            continue
        ts = int(m[1]) * 10**9 + int(m[2]) if m[2] else int(m[1])
        ev, body = m[3], m[4]
        if ev == "sched_wakeup":
            w = re.search(r"comm=.* pid=(\d+) ", body) or re.match(r".*:(\d+) \[", body)
            if int(w[1]) == pid and not running and pending is None:
                pending = ts
        else:
            sw = re.match(r".*:(\d+) \[-?\d+\] \S+ ==> .*:(\d+) \[", body)
            prev, nxt = int(sw[1]), int(sw[2])
            if prev == pid:
                running, pending = False, None
            if nxt == pid:
                if pending is not None and pending >= after_ns:
                    out.append(ts - pending)
                running, pending = True, None
    return out
