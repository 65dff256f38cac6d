"""Linux workloads: shell command, hackbench, stress-ng, sysbench, rt-app JSON profile, kernel build."""

from __future__ import annotations

import re
from pathlib import Path

from abtest.collectors.workloads.base import Workload, WorkloadError, metrics
from abtest.results import specs
from abtest.targets.base import RunResult, Target
from abtest.targets.shell import quote


class ShellWorkload(Workload):
    """Any shell command (`cmd`), run as root by the target's shell exactly as written (that is its purpose:
    pipes, loops, redirections; whoever can pass `--workload` can run commands as root on the target);
    metric: the common duration_s only."""

    KIND = "shell"
    DEFAULTS = {"cmd": ""}

    def __init__(self, **params):
        super().__init__(**params)
        if not self.params["cmd"]:
            raise WorkloadError("workload 'shell' needs cmd=...")

    def command(self, remote_dir: str) -> str:
        return self.params["cmd"]


class HackbenchWorkload(Workload):
    """hackbench (rt-tests): `groups` groups x 20 senders/receivers, `loops` messages; threads or processes,
    pipes or sockets. Metric hackbench_time_s = the time hackbench itself reports (s, lower is better)."""

    KIND = "hackbench"
    DEFAULTS = {"groups": 2, "loops": 100, "threads": False, "pipe": False, "datasize": 100}
    TOOLS = ("hackbench",)

    def command(self, remote_dir: str) -> str:
        p = self.params
        argv = ["hackbench", "-g", str(p["groups"]), "-l", str(p["loops"]), "-s", str(p["datasize"])]
        argv += ["-T"] if p["threads"] else ["-P"]
        if p["pipe"]:
            argv.append("-p")
        return " ".join(argv)

    def parse(self, res: RunResult) -> dict:
        m = re.search(r"^Time:\s*([0-9.]+)", res.stdout, re.M)
        if not m:
            raise WorkloadError(f"hackbench printed no 'Time:' line: {res.stdout[-300:]!r} {res.stderr[-300:]!r}")
        return metrics((specs.HACKBENCH_TIME, float(m.group(1))))


class StressNgWorkload(Workload):
    """stress-ng `stressor` with `workers` instances for `duration_s` seconds.
    Metric bogo_ops_per_s (real time, higher is better) from its --metrics-brief line."""

    KIND = "stress-ng"
    DEFAULTS = {"stressor": "cpu", "workers": 1, "duration_s": 5.0}
    TOOLS = ("stress-ng",)

    def command(self, remote_dir: str) -> str:
        p = self.params
        return f"stress-ng --{quote(p['stressor'])} {int(p['workers'])} --timeout {p['duration_s']:g}s --metrics-brief"

    def parse(self, res: RunResult) -> dict:
        text = res.stdout + res.stderr
        rx = (
            r"metrc: \[\d+\]\s+"
            + re.escape(self.params["stressor"])
            + r"\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)"
        )
        m = re.search(rx, text)
        if not m:
            raise WorkloadError(f"stress-ng printed no metrics line for {self.params['stressor']!r}: {text[-400:]!r}")
        return metrics((specs.BOGO_OPS, int(m.group(1))), (specs.BOGO_OPS_PER_S, float(m.group(5))))


class SysbenchWorkload(Workload):
    """sysbench `test` (cpu, memory, threads...) with `threads` for `duration_s`.
    Metrics events_per_s (higher is better), latency_avg_ms / latency_p95_ms (lower is better)."""

    KIND = "sysbench"
    DEFAULTS = {"test": "cpu", "threads": 1, "duration_s": 5.0}
    TOOLS = ("sysbench",)

    def command(self, remote_dir: str) -> str:
        p = self.params
        return f"sysbench {quote(p['test'])} --threads={int(p['threads'])} --time={int(p['duration_s'])} run"

    def parse(self, res: RunResult) -> dict:
        out = {}
        eps = re.search(r"events per second:\s*([0-9.]+)", res.stdout)
        total = re.search(r"total number of events:\s*(\d+)", res.stdout)
        time_s = re.search(r"total time:\s*([0-9.]+)s", res.stdout)
        if eps:
            out.update(metrics((specs.EVENTS_PER_S, float(eps.group(1)))))
        elif total and time_s and float(time_s.group(1)) > 0:
            out.update(metrics((specs.EVENTS_PER_S, int(total.group(1)) / float(time_s.group(1)))))
        for key, spec in (("avg", specs.SYSBENCH_LAT_AVG), ("95th percentile", specs.SYSBENCH_LAT_P95)):
            m = re.search(rf"^\s*{re.escape(key)}:\s*([0-9.]+)", res.stdout, re.M)
            if m:
                out.update(metrics((spec, float(m.group(1)))))
        if not out:
            raise WorkloadError(f"sysbench output has no statistics: {res.stdout[-400:]!r}")
        return out


class RtAppWorkload(Workload):
    """rt-app with a JSON profile (`profile`: host path, pushed to the target).
    Metric: the common duration_s; rt-app's per-thread logs stay on the target."""

    KIND = "rt-app"
    DEFAULTS = {"profile": ""}
    TOOLS = ("rt-app",)

    def __init__(self, **params):
        super().__init__(**params)
        if not self.params["profile"] or not Path(self.params["profile"]).is_file():
            raise WorkloadError(
                f"workload 'rt-app' needs profile=<JSON file on the host>; got {self.params['profile']!r}"
            )

    def prepare(self, target: Target, remote_dir: str) -> None:
        super().prepare(target, remote_dir)
        target.push(self.params["profile"], f"{remote_dir}/abtest-rtapp.json")

    def command(self, remote_dir: str) -> str:
        return f"cd {quote(remote_dir)} && rt-app {quote(remote_dir + '/abtest-rtapp.json')}"


class KernelBuildWorkload(Workload):
    """`make -j<jobs> <make_target>` in the target directory `src` (a kernel tree, or any make project),
    after `make clean` when clean=true (clean time not counted). Metric build_time_s (lower is better): the
    collector's measured wall time of the make command."""

    KIND = "kbuild"
    DURATION_METRIC = specs.BUILD_TIME
    DEFAULTS = {"src": "", "jobs": 0, "make_target": "", "clean": True}
    TOOLS = ("make",)

    def __init__(self, **params):
        super().__init__(**params)
        if not self.params["src"]:
            raise WorkloadError("workload 'kbuild' needs src=<source directory on the target>")

    def prepare(self, target: Target, remote_dir: str) -> None:
        super().prepare(target, remote_dir)
        src = quote(self.params["src"])
        if self.params["clean"]:
            target.run(f"make -C {src} clean >/dev/null 2>&1", self.timeout_s, check=False)

    def command(self, remote_dir: str) -> str:
        jobs = self.params["jobs"] or "$(nproc)"
        tgt = quote(self.params["make_target"]) if self.params["make_target"] else ""
        return f"make -C {quote(self.params['src'])} -j{jobs} {tgt} >/dev/null"

    def parse(self, res: RunResult) -> dict:
        return {}  # build_time_s is the measured workload duration (written by the orchestrator)


class CyclictestWorkload(Workload):
    """cyclictest (rt-tests): `threads` timer threads waking every `interval_us` for `loops` periods at
    SCHED_FIFO `priority`. `dma_latency_us` is written to /dev/cpu_dma_latency for the run (cyclictest's
    own default of 0 keeps every CPU out of its idle states, which hides what an idle governor does, so
    the default here leaves idle states usable). Metrics from its summary lines (us, lower is better):
    latency_avg_us (mean of the per-thread averages), latency_max_us (max over threads),
    latency_min_us (min over threads)."""

    KIND = "cyclictest"
    DEFAULTS = {"threads": 2, "interval_us": 2000, "loops": 500, "priority": 90, "dma_latency_us": 1000000}
    TOOLS = ("cyclictest",)

    def command(self, remote_dir: str) -> str:
        p = self.params
        return (
            f"cyclictest -q -t {int(p['threads'])} -i {int(p['interval_us'])} -l {int(p['loops'])} "
            f"-p {int(p['priority'])} --latency={int(p['dma_latency_us'])}"
        )

    def parse(self, res: RunResult) -> dict:
        rows = re.findall(r"^T:\s*\d+.*?Min:\s*(\d+)\s+Act:\s*\d+\s+Avg:\s*(\d+)\s+Max:\s*(\d+)", res.stdout, re.M)
        if not rows:
            raise WorkloadError(
                f"cyclictest printed no 'T:' summary lines: {res.stdout[-300:]!r} {res.stderr[-300:]!r}"
            )
        mins, avgs, maxs = ([int(r[i]) for r in rows] for i in range(3))
        return metrics(
            (specs.CYCLICTEST_AVG, sum(avgs) / len(avgs)),
            (specs.CYCLICTEST_MAX, max(maxs)),
            (specs.CYCLICTEST_MIN, min(mins)),
        )
