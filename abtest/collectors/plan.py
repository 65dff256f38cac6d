"""What a collection is: one configuration for every way of running it (a local, ssh, adb or qemu target through
abtest.collectors.orchestrate, or a LAVA lab through abtest.collectors.lab), its iteration order, and the checks
made before anything reaches a target.

    cc = CollectConfig(target_cfg, labels, workloads, iterations=5)          # lab=parse_lab(...) for a lab
    plan = make_plan(labels, workloads, iterations, order="interleave")   # A B A B ... per iteration
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from abtest.collectors.ftrace import requested_events
from abtest.collectors.workloads.base import Workload
from abtest.safe_io import UnsafePathError, check_name
from abtest.store.writer import discard_stale_temps, is_complete, iteration_dir
from abtest.targets.config import BootEntry, TargetConfig
from abtest.targets.shell import ShellNameError, check_clock, check_event, check_label, check_workload_name

if TYPE_CHECKING:
    from abtest.collectors.lab.config import LabConfig


class CollectError(RuntimeError):
    """Collection cannot go on (the message says which iteration and why)."""


@dataclass
class LabelSpec:
    """A column of the A/B: a kernel (boot entry) and/or settings applied on the running kernel."""

    name: str
    boot: BootEntry | None = None
    settings: dict = field(default_factory=dict)


@dataclass(frozen=True)
class PlannedIteration:
    label: str
    workload: str
    iteration: int


@dataclass
class CollectConfig:
    """Everything a collection needs. Times in seconds.

    lab: run every iteration as a LAVA job (the parsed [lab] table; its `retries` apply there). The cool-down,
    remote_dir and state_dir fields concern targets abtest drives itself (a lab job has its own device).
    """

    target_cfg: TargetConfig
    labels: list[LabelSpec]
    workloads: list[Workload]
    iterations: int = 3
    store: Path = Path("results")
    resume: bool = False
    order: str = "interleave"
    analyses: list[str] | None = None
    analysis_events: list[str] = field(default_factory=list)  # canonical tables the analyses declare
    extra_events: list[str] = field(default_factory=list)
    trace: bool = True
    buffer_size_kb: int | None = None
    trace_clock: str | None = None
    retries: int = 2
    cooldown_fixed_s: float | None = None
    cooldown_thermal_max_c: float | None = None
    cooldown_timeout_s: float | None = None
    remote_dir: str | None = None  # scratch dir on the target; None: a private one made with mktemp -d
    progress: bool = True
    state_dir: Path | None = None  # where the state journals live (None: host_state.state_dir())
    lab: LabConfig | None = None

    def events(self) -> list[str]:
        """The default event set, the analyses' tables and the extra events, in order, each once."""
        return list(dict.fromkeys(requested_events(self.analysis_events) + list(self.extra_events)))

    @property
    def buffer_kb(self) -> int:
        """ftrace buffer per CPU [KiB]: the option, else [trace] buffer_size_kb of the target file, else 8192."""
        return int(self.buffer_size_kb or self.target_cfg.trace.get("buffer_size_kb", 8192))

    @property
    def clock(self) -> str:
        """Trace clock: the option, else [trace] clock of the target file, else boot."""
        return self.trace_clock or self.target_cfg.trace.get("clock", "boot")


def make_plan(
    labels: list[str], workloads: list[str], iterations: int, order: str = "interleave", *, alternate: bool = False
) -> list[PlannedIteration]:
    """Iteration order. interleave: for each iteration, every workload on every label (A B A B ...:
    spreads thermal drift over both labels); with `alternate`, the labels' direction turns every iteration
    (A B | B A | A B ...: a lab handing jobs to devices first come first served). blocked: all iterations of a
    label before the next (A A B B: one kernel switch per label, for targets where switching is slow)."""
    if order == "interleave":
        return [
            PlannedIteration(l, w, i)
            for i in range(1, iterations + 1)
            for w in workloads
            for l in (labels[::-1] if alternate and not i % 2 else labels)
        ]
    if order == "blocked":
        return [PlannedIteration(l, w, i) for l in labels for i in range(1, iterations + 1) for w in workloads]
    raise ValueError(f"order must be 'interleave' or 'blocked', got {order!r}")


def check_shell_names(labels: list[str], workloads: list[str], events: list[str], clock: str | None = None) -> None:
    """Refuse, before anything runs, a label or workload name that is not a plain store directory name
    (abtest.safe_io.check_name) or falls outside the label alphabet, an event name outside the ftrace-event
    alphabet and a trace clock outside its alphabet (abtest.targets.shell; docs/collect.md "Names").
    Raises CollectError naming the first offender."""
    try:
        for name in labels:
            check_label(check_name(name, "label"))
        for name in workloads:
            check_workload_name(check_name(name, "workload name"))
        for event in events:
            check_event(event)
        if clock:
            check_clock(clock)
    except (UnsafePathError, ShellNameError) as e:
        raise CollectError(str(e)) from e


def checked_plan(
    cc: CollectConfig, *, alternate: bool = False
) -> tuple[list[PlannedIteration], list[PlannedIteration]]:
    """The checks every collection makes before anything runs (workload names unique, every name reaching a
    shell inside its alphabet), then (the plan, its iterations already complete in the store)."""
    names = [w.name for w in cc.workloads]
    if len(set(names)) != len(names):
        raise CollectError("two workloads share a name; give one name=... to tell them apart")
    labels = list(dict.fromkeys(l.name for l in cc.labels))
    check_shell_names(labels, names, [*cc.analysis_events, *cc.extra_events], cc.clock)
    plan = make_plan(labels, names, cc.iterations, cc.order, alternate=alternate)
    store = Path(cc.store)
    return plan, [p for p in plan if is_complete(iteration_dir(store, p.label, p.workload, p.iteration))]


def discard_interrupted(store: Path, log: Callable[[str], None]) -> None:
    """Remove the temp directories of iterations an interrupted run left in the store."""
    for stale in discard_stale_temps(store) if store.exists() else []:
        log(f"removed interrupted iteration {stale}")


def console_and_log(log: Callable[[str], None] | None):
    """(a rich Console on stderr, `log` or a function printing rich markup there)."""
    from rich.console import Console

    console = Console(stderr=True)
    return console, log or (lambda msg: console.print(msg, highlight=False))


def progress_bar(console, enabled: bool, *, eta: bool = True):
    """The collection's progress bar (rich): description, bar, done/total, elapsed (and ETA)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    if eta:
        columns += [TextColumn("ETA"), TimeRemainingColumn()]
    return Progress(*columns, console=console, disable=not enabled, transient=False)
