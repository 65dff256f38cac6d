"""Write kernel_views_synthetic.txt: a SYNTHETIC ftrace text trace (not device data) in the exact text formats of
events that no real trace available to this project carries: LISA's kernel-module events
``lisa__sched_cpu_capacity``, ``lisa__uclamp_util_se``, ``lisa__uclamp_util_cfs``, ``lisa__sched_overutilized``
(with a root-domain span; formats from lisa/_assets/kmodules/lisa/ftrace_events.h), the ``uclamp_update_tsk``
tracepoint's fields (pid, comm, uclamp_id, value) and the kernel's ``cgroup_attach_task``, around ordinary
sched_switch / sched_wakeup / cpu_frequency traffic on 4 CPUs (two clusters: 0-1 and 2-3).

Deterministic (fixed seed). Not committed (about 1 MB): the tests write it into their temporary directory
with ``write(path)``; `python tests/data/make_kernel_views_trace.py` writes it beside this script.
"""
from __future__ import annotations

import random
from pathlib import Path

OUT = Path(__file__).with_name("kernel_views_synthetic.txt")
CPUS = 4
ORIG = {0: 446, 1: 446, 2: 1024, 3: 1024}
TASKS = {101: ("render", "/top-app"), 102: ("audio", "/foreground"), 103: ("sync", "/background"),
         104: ("indexer", "/background")}


def _line(comm: str, pid: int, cpu: int, t_us: int, event: str, body: str) -> tuple[int, str]:
    return t_us, f"{comm[:16]:>16}-{pid:<5} [{cpu:03d}] {t_us // 1_000_000:5d}.{t_us % 1_000_000:06d}: {event}: {body}"


def build() -> list[str]:
    rng = random.Random(23)
    t0 = 100_000_000  # us
    rows: list[tuple[int, str]] = []
    running = {c: 0 for c in range(CPUS)}
    # each task: wakes every period on a fixed cluster, runs a little, sleeps
    plan = {101: (0, 8_000, 2_500), 102: (1, 5_000, 600), 103: (2, 20_000, 6_000), 104: (3, 30_000, 9_000)}
    for pid, (cpu, period, run) in plan.items():
        comm = TASKS[pid][0]
        t = t0 + rng.randrange(0, period)
        while t < t0 + 2_000_000 - period:
            lat = rng.randrange(5, 400)
            rows.append(_line("swapper/%d" % cpu, 0, cpu, t, "sched_wakeup",
                              f"comm={comm} pid={pid} prio=120 target_cpu={cpu:03d}"))
            rows.append(_line(f"swapper/{cpu}", 0, cpu, t + lat, "sched_switch",
                              f"prev_comm=swapper/{cpu} prev_pid=0 prev_prio=120 prev_state=0 ==> "
                              f"next_comm={comm} next_pid={pid} next_prio=120"))
            dur = max(50, int(rng.gauss(run, run / 4)))
            rows.append(_line(comm, pid, cpu, t + lat + dur, "sched_switch",
                              f"prev_comm={comm} prev_pid={pid} prev_prio=120 prev_state=1 ==> "
                              f"next_comm=swapper/{cpu} next_pid=0 next_prio=120"))
            t += period
    del running
    # CPU capacity every 4 ms per CPU, some pressure now and then
    for cpu in range(CPUS):
        for k in range(500):
            t = t0 + 2_000 + k * 4_000 + cpu
            press = rng.choice([0, 0, 0, 12, 40])
            curr = ORIG[cpu] * rng.choice([4, 6, 8, 10]) // 10
            rows.append(_line("kworker/%d:1" % cpu, 20 + cpu, cpu, t, "lisa__sched_cpu_capacity",
                              f"cpu={cpu} capacity={ORIG[cpu] - press} capacity_orig={ORIG[cpu]} capacity_curr={curr}"))
            util = rng.randrange(0, ORIG[cpu])
            umin, umax = rng.choice([(0, 1024), (0, 1024), (128, 1024), (0, 512)])
            rows.append(_line("kworker/%d:1" % cpu, 20 + cpu, cpu, t + 1, "lisa__uclamp_util_cfs",
                              f"cpu={cpu} util_avg={util} uclamp_avg={min(max(util, umin), umax)} "
                              f"uclamp_min={umin} uclamp_max={umax}"))
    for k in range(400):
        pid = 101 + k % 4
        comm, cpu = TASKS[pid][0], plan[pid][0]
        t = t0 + 3_000 + k * 5_000
        util = rng.randrange(0, 600)
        rows.append(_line(comm, pid, cpu, t, "lisa__uclamp_util_se",
                          f"pid={pid} comm={comm} cpu={cpu} util_avg={util} uclamp_avg={max(util, 200 if pid == 101 else 0)} "
                          f"uclamp_min={200 if pid == 101 else 0} uclamp_max=1024"))
    # uclamp requests: render boosted (min 200, then 300), indexer capped (max 256)
    for t, pid, cid, val in ((t0 + 10_000, 101, 0, 200), (t0 + 1_200_000, 101, 0, 300), (t0 + 50_000, 104, 1, 256),
                             (t0 + 60_000, 102, 0, 0)):
        rows.append(_line("system_server", 900, 0, t, "uclamp_update_tsk",
                          f"pid={pid} comm={TASKS[pid][0]} uclamp_id={cid} value={val}"))
    # two root domains (CPUs 0-1, 2-3), overutilized toggling
    for rd, span in ((0, "3"), (1, "c")):
        t, ou = t0 + 100_000 + rd * 7_000, 1
        while t < t0 + 1_900_000:
            rows.append(_line("swapper/%d" % (2 * rd), 0, 2 * rd, t, "lisa__sched_overutilized",
                              f"overutilized={ou} span=0x{span}"))
            t += rng.randrange(50_000, 300_000)
            ou ^= 1
    # cgroups: apps placed at start, "sync" moved to the foreground half-way
    for i, (pid, (comm, path)) in enumerate(TASKS.items()):
        rows.append(_line("init", 1, 0, t0 + 500 + i, "cgroup_attach_task",
                          f"dst_root=3 dst_id={10 + i} dst_level=1 dst_path={path} pid={pid} comm={comm}"))
    rows.append(_line("system_server", 900, 1, t0 + 1_000_000, "cgroup_attach_task",
                      "dst_root=3 dst_id=11 dst_level=1 dst_path=/foreground pid=103 comm=sync"))
    # cpufreq: clusters 0-1 and 2-3
    for c0, freqs in ((0, (600000, 1200000, 1800000)), (2, (800000, 1600000, 2400000))):
        for k in range(20):
            f = freqs[k % 3]
            for c in (c0, c0 + 1):
                rows.append(_line("sugov:%d" % c0, 30 + c0, c0, t0 + 1_000 + k * 90_000, "cpu_frequency",
                                  f"state={f} cpu_id={c}"))
    rows.sort(key=lambda r: r[0])
    return [f"# synthetic: written by tests/data/make_kernel_views_trace.py (not device data)", "cpus=4"] + \
        [r[1] for r in rows]


def write(path: Path = OUT) -> Path:
    path.write_text("\n".join(build()) + "\n")
    return path


if __name__ == "__main__":
    print(f"wrote {write()}")
