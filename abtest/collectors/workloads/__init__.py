"""Workload plugins. `make_workload("hackbench:groups=4,loops=200")` -> a Workload.

Each plugin says what to run on the target (`command()`), optionally pushes inputs (`prepare`) and
pulls results (`collect`), and turns the output into metrics with units (`parse`). The registry is an
explicit dict; add a plugin by adding a line to it.
"""

from __future__ import annotations

from abtest.collectors.workloads.android import (
    GameWorkload,
    GeekbenchWorkload,
    JankbenchWorkload,
    PCMarkWorkload,
    YouTubeWorkload,
)
from abtest.collectors.workloads.base import Workload, WorkloadError, parse_spec
from abtest.collectors.workloads.linux import (
    CyclictestWorkload,
    HackbenchWorkload,
    KernelBuildWorkload,
    RtAppWorkload,
    ShellWorkload,
    StressNgWorkload,
    SysbenchWorkload,
)

REGISTRY: dict[str, type[Workload]] = {
    "shell": ShellWorkload,
    "hackbench": HackbenchWorkload,
    "cyclictest": CyclictestWorkload,
    "stress-ng": StressNgWorkload,
    "sysbench": SysbenchWorkload,
    "rt-app": RtAppWorkload,
    "kbuild": KernelBuildWorkload,
    "youtube": YouTubeWorkload,
    "game": GameWorkload,
    "jankbench": JankbenchWorkload,
    "geekbench": GeekbenchWorkload,
    "pcmark": PCMarkWorkload,
}


def make_workload(spec: str) -> Workload:
    """`NAME[:key=value,key=value]` -> a configured workload (WorkloadError for unknown names/params)."""
    name, params = parse_spec(spec)
    if name not in REGISTRY:
        raise WorkloadError(f"unknown workload {name!r}; known: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name](**params)


__all__ = ["REGISTRY", "Workload", "WorkloadError", "make_workload", "parse_spec"]
