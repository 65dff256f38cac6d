"""Fill a run store: labels (kernels or settings) x workloads x iterations on one target.

    plan = make_plan(labels, workloads, iterations, order="interleave")   # A B A B ... per iteration
    collect(CollectConfig(...))

For each planned iteration: activate the label (boot its kernel through the target file's boot
entry and verify `uname -r`, or apply its settings), cool down, start ftrace (+ power sampler), run
the workload between trace markers, stop, pull, write metrics.json + meta.json + .complete in a temp
directory and rename it into place. A dropped connection / target reboot / failed workload discards
the temp directory and retries (bounded); Ctrl-C discards only the iteration in flight; `resume=True`
skips iterations already complete.
"""
from __future__ import annotations

import fnmatch
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from abtest.collectors.annotate import TraceAnnotator
from abtest.collectors.ftrace import FtraceCollector, TracefsLock, requested_events
from abtest.collectors.meta import META_SCRIPT, collect_target_meta, host_tools, parse_meta_output
from abtest.collectors.power import PowerSampler, write_power_csv
from abtest.collectors.settings import SettingsManager
from abtest.store.writer import IterationWriter, discard_stale_temps, is_complete, iteration_dir
from abtest.collectors.workloads.base import Workload, WorkloadError
from abtest.collectors.workloads.base import metrics as workload_metrics
from abtest.targets.base import Target, TargetConnectionError, TargetError, TargetTimeout
from abtest.targets.config import BootEntry, TargetConfig, make_target

RETRYABLE = (TargetConnectionError, TargetTimeout, WorkloadError, OSError, EOFError)


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


def make_plan(labels: list[str], workloads: list[str], iterations: int, order: str = "interleave") -> list[PlannedIteration]:
    """Iteration order. interleave: for each iteration, every workload on every label (A B A B ...:
    spreads thermal drift over both labels). blocked: all iterations of a label before the next
    (A A B B: one kernel switch per label, for targets where switching is slow)."""
    if order == "interleave":
        return [PlannedIteration(l, w, i) for i in range(1, iterations + 1) for w in workloads for l in labels]
    if order == "blocked":
        return [PlannedIteration(l, w, i) for l in labels for i in range(1, iterations + 1) for w in workloads]
    raise ValueError(f"order must be 'interleave' or 'blocked', got {order!r}")


# -- target provision (boot/switch) ---------------------------------------------------------------------
class TargetProvider:
    """Gives the Target running a label's kernel; reboots through the boot entry when needed."""

    def __init__(self, cfg: TargetConfig, log: Callable[[str], None] = print):
        self.cfg = cfg
        self.target = make_target(cfg)
        self.log = log

    def release_matches(self, target: Target, boot: BootEntry) -> tuple[bool, str]:
        rel = target.uname_r()
        return (not boot.expect_release or fnmatch.fnmatch(rel, boot.expect_release)), rel

    def activate(self, label: LabelSpec) -> Target:
        t = self.target
        boot = label.boot
        if boot is None:
            return t
        ok, rel = self.release_matches(t, boot)
        if ok and boot.expect_release:
            return t  # already running that kernel
        if not (boot.command or boot.host_command):
            raise CollectError(f"label {label.name}: running kernel {rel} does not match "
                               f"expect_release {boot.expect_release!r} and [boot.{label.name}] has no command")
        old_boot_id = t.read_file("/proc/sys/kernel/random/boot_id").strip()
        self.log(f"booting {label.name} ({boot.host_command or boot.command})")
        if boot.host_command:
            subprocess.run(boot.host_command, shell=True, timeout=boot.timeout_s, check=True)
        else:
            t.reboot(boot.command)
        self.wait_rebooted(t, old_boot_id, boot.timeout_s)
        ok, rel = self.release_matches(t, boot)
        if not ok:
            raise CollectError(f"label {label.name}: booted kernel is {rel}, expected {boot.expect_release!r}")
        return t

    @staticmethod
    def wait_rebooted(t: Target, old_boot_id: str, timeout_s: float) -> None:
        """Poll until the target answers with a new boot_id (TargetTimeout after timeout_s)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            try:
                t.reconnect()
                new = t.read_file("/proc/sys/kernel/random/boot_id", timeout=15).strip()
                if new and new != old_boot_id:
                    t.root_wrap = None
                    return
            except (TargetError, OSError):
                pass
            time.sleep(2)
        raise TargetTimeout(f"{t.name}: did not come back with a new boot within {timeout_s:.0f} s")

    def recover(self, label: LabelSpec, timeout_s: float = 300) -> Target:
        """After a dropped connection: wait until the target answers, then re-activate the label."""
        self.target.wait_until_back(timeout_s)
        return self.activate(label)

    def close(self) -> None:
        self.target.close()


# -- one iteration -------------------------------------------------------------------------------------
@dataclass
class CollectConfig:
    """Everything `collect` needs. Times in seconds."""
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
    remote_dir: str = "/tmp"
    progress: bool = True


def _workload_script(wl: Workload, marker: str | None, tag: str, remote_dir: str) -> str:
    """Workload command between trace markers, timed on the target (ns; /proc/uptime fallback)."""
    mark = (lambda text: f"echo {shlex.quote(text)} > {shlex.quote(marker)} 2>/dev/null") if marker else (lambda text: ":")
    return "\n".join([
        f"cd {shlex.quote(remote_dir)} || exit 97",
        "abtest_now() { t=$(/usr/bin/date +%s%N 2>/dev/null || date +%s%N 2>/dev/null); case \"$t\" in *N*|'') "
        "t=$(awk '{printf \"%.0f\", $1*1000000000}' /proc/uptime);; esac; echo $t; }",
        mark(f"abtest_workload_begin {tag}"),
        "abtest_s=$(abtest_now)",
        f"( {wl.command(remote_dir)} )",
        "abtest_rc=$?",
        "abtest_e=$(abtest_now)",
        mark(f"abtest_workload_end {tag}"),
        "echo ABTEST_WALL_NS $abtest_s $abtest_e >&2",
        "exit $abtest_rc",
    ])


THERMAL_TEMPS = "/sys/class/thermal/thermal_zone*/temp"


def wait_cooldown(t: Target, *, fixed_s: float = 0.0, thermal_max_c: float | None = None,
                  timeout_s: float = 300.0, temp_glob: str = THERMAL_TEMPS, poll_s: float = 2.0) -> dict:
    """Sleep fixed_s, then poll the target's thermal zones (milli-degC files matching temp_glob) until the
    hottest is at or below thermal_max_c, for at most timeout_s. Returns what happened, for meta.json:
    {"fixed_s", "thermal_max_c", "zones", "max_temp_c" (last reading), "reached", "waited_s"}."""
    out = {"fixed_s": fixed_s, "thermal_max_c": thermal_max_c, "waited_s": 0.0, "reached": True}
    t0 = time.monotonic()
    if fixed_s:
        time.sleep(fixed_s)
    if thermal_max_c is not None:
        while True:
            temps = [int(x) / 1000 for x in t.run(f"cat {temp_glob} 2>/dev/null", 30).stdout.split()
                     if x.lstrip("-").isdigit()]
            out["zones"] = len(temps)
            out["max_temp_c"] = max(temps) if temps else None
            if not temps:
                out["reached"] = None  # no thermal zone to wait on
                break
            if max(temps) <= float(thermal_max_c):
                break
            if time.monotonic() - t0 > timeout_s:
                out["reached"] = False
                break
            time.sleep(poll_s)
    out["waited_s"] = round(time.monotonic() - t0, 3)
    return out


def _cooldown(t: Target, cc: CollectConfig, cfg: TargetConfig) -> dict:
    c = cfg.cooldown
    return wait_cooldown(
        t, fixed_s=cc.cooldown_fixed_s if cc.cooldown_fixed_s is not None else float(c.get("fixed_s", 0)),
        thermal_max_c=cc.cooldown_thermal_max_c if cc.cooldown_thermal_max_c is not None else c.get("thermal_max_c"),
        timeout_s=cc.cooldown_timeout_s if cc.cooldown_timeout_s is not None else float(c.get("timeout_s", 300)),
        temp_glob=c.get("temp_glob", THERMAL_TEMPS))


@dataclass
class TargetState:
    """What the orchestrator keeps per connected target across iterations."""
    target: Target
    is_local: bool
    collector: FtraceCollector | None  # or a PerfettoCollector ([trace] backend = "perfetto")
    settings: SettingsManager
    prepared: set = field(default_factory=set)


def make_state(t: Target, cc: CollectConfig, events: list[str]) -> TargetState:
    trace_cfg = cc.target_cfg.trace
    collector = None
    if cc.trace and trace_cfg.get("backend", "ftrace") == "perfetto":
        from abtest.collectors.perfetto_config import PerfettoCollector
        collector = PerfettoCollector(t, events)
    elif cc.trace:
        collector = FtraceCollector(
            t, events, buffer_size_kb=int(cc.buffer_size_kb or trace_cfg.get("buffer_size_kb", 8192)),
            clock=cc.trace_clock or trace_cfg.get("clock", "boot"), remote_dir=cc.remote_dir)
    return TargetState(t, t.is_local_machine, collector, SettingsManager(t))


def run_iteration(st: TargetState, cc: CollectConfig, label: LabelSpec, wl: Workload, it: int, attempt: int,
                  writer: IterationWriter, settings_now: dict, boot_meta: dict | None) -> None:
    """One iteration into writer.tmp; commits on success. Raises on any failure (caller retries).

    Round trips to the target: meta + ftrace start (1), workload between markers (1), ftrace stop +
    extract (1), pull (SFTP/adb), plus the workload's own prepare (first time) and collect.
    """
    t, cfg = st.target, cc.target_cfg
    t_iter0 = time.monotonic()
    start_utc = datetime.now(timezone.utc).isoformat()
    cool = _cooldown(t, cc, cfg)
    t_work0 = time.monotonic()  # collection overhead is counted from here (cool-down excluded)
    if wl.name not in st.prepared:
        wl.prepare(t, cc.remote_dir)
        st.prepared.add(wl.name)
    tag = f"label={label.name} workload={wl.name} iteration={it}"
    collector = st.collector
    session_meta: dict = {}
    sampler = None
    annotator = None
    phases = {}
    lock_t0 = time.monotonic()
    with TracefsLock(collector is not None and st.is_local):
        phases["lock_wait_s"] = time.monotonic() - lock_t0  # other users of this machine's tracefs
        try:
            a = time.monotonic()
            if collector:
                _, out = collector.start(preamble=META_SCRIPT)
                meta = parse_meta_output(out)
                annotator = TraceAnnotator.from_settings(t, collector, cfg.trace)  # cgroups + thermal into the trace
                if annotator:
                    annotator.start()
            else:
                meta = collect_target_meta(t)
            kind = cfg.power.get("sampler", "none")
            if kind != "none":
                sampler = PowerSampler(t, kind, period_s=float(cfg.power.get("period_s", 0.5)), remote_dir=cc.remote_dir,
                                       sysfs=cfg.power.get("sysfs", "/sys"))
                sampler.start()
            phases["start_s"] = time.monotonic() - a
            a = time.monotonic()
            script = _workload_script(wl, collector.marker_path if collector else None, tag, cc.remote_dir)
            res = t.run(script, wl.timeout_s, as_root=True)
            phases["workload_call_s"] = time.monotonic() - a
            wl_stderr = "".join(ln for ln in res.stderr.splitlines(True) if not ln.startswith("ABTEST_WALL_NS "))
            (writer.tmp / "workload.log").write_text(
                f"$ {wl.command(cc.remote_dir)}\n--- stdout ---\n{res.stdout}\n--- stderr ---\n{wl_stderr}\n"
                f"--- exit {res.exit_code} ---\n")
            if res.exit_code != 0:
                raise WorkloadError(f"{t.name}: workload {wl.name} exited {res.exit_code}: "
                                    f"{(wl_stderr or res.stdout).strip()[-400:] or '(no output)'}")
            wall = [ln.split() for ln in res.stderr.splitlines() if ln.startswith("ABTEST_WALL_NS ")]
            workload_s = ((int(wall[-1][2]) - int(wall[-1][1])) / 1e9) if wall and len(wall[-1]) == 3 \
                else res.duration_s
            a = time.monotonic()
            if sampler:
                power = sampler.stop(writer.tmp / ".power-raw.txt")
                (writer.tmp / ".power-raw.txt").unlink(missing_ok=True)
                write_power_csv(power, writer.tmp / "power.csv")
            if annotator:
                annotator.stop()
            if collector:
                session_meta = collector.stop(writer.tmp / getattr(collector, "trace_name", "trace.dat")).as_meta()
            phases["stop_pull_s"] = time.monotonic() - a
        except BaseException:
            if annotator:
                try:
                    annotator.stop()
                except TargetError:
                    pass
            if collector:
                collector.reset()
            if sampler and sampler.pid:
                try:
                    t.run(f"kill {int(sampler.pid)} 2>/dev/null", 30, as_root=True)
                except TargetError:
                    pass
            raise
    metrics = wl.parse(res)
    metrics.update(wl.collect(t, writer.tmp, cc.remote_dir))
    metrics.update(workload_metrics((wl.DURATION_METRIC, workload_s)))
    iteration_s = time.monotonic() - t_work0 - phases["lock_wait_s"]
    meta.update({
        "label": label.name, "workload": wl.name, "iteration": it, "attempt": attempt,
        "target": {"name": cfg.name, "kind": cfg.kind, "file": str(cfg.path) if cfg.path else None,
                   "emulated": cfg.kind == "qemu"},
        "boot": boot_meta,
        "settings": {"label": label.settings, "applied": settings_now, "workload": wl.describe(),
                     "events_requested": collector.events if collector else [], "analyses": cc.analyses},
        "trace": {**session_meta, "annotations": annotator.describe()} if annotator else session_meta,
        "power": ({"sampler": cfg.power.get("sampler"), "period_s": cfg.power.get("period_s", 0.5),
                   "aligned": session_meta.get("trace_clock") == "boot",
                   "clock": "CLOCK_BOOTTIME"} if sampler else None),
        "cooldown": cool,
        "tools": {**host_tools(), **{f"target:{k}": v for k, v in meta.pop("target_tools", {}).items()}},
        "timestamps": {"start_utc": start_utc, "end_utc": datetime.now(timezone.utc).isoformat()},
        "timings": {"iteration_s": round(iteration_s, 4), "workload_s": round(workload_s, 4),
                    "overhead_s": round(iteration_s - workload_s, 4),
                    "cooldown_s": round(t_work0 - t_iter0, 4),
                    **{k: round(v, 4) for k, v in phases.items()}},
        "platform": cfg.platform,
    })
    if session_meta.get("lost_events"):
        meta.setdefault("warnings", []).append(f"{session_meta['lost_events']} trace events lost")
    writer.commit(metrics, meta)


# -- the loop -----------------------------------------------------------------------------------------
def collect(cc: CollectConfig, provider: TargetProvider | None = None,
            log: Callable[[str], None] | None = None) -> dict:
    """Run the whole plan; return a summary {"done", "skipped", "retries", "iterations": [...]}.

    Raises CollectError when an iteration fails after its retries; KeyboardInterrupt propagates after
    cleaning up (completed iterations stay).
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    console = Console(stderr=True)
    log = log or (lambda msg: console.print(msg, highlight=False))
    store = Path(cc.store)
    wl_by_name = {w.name: w for w in cc.workloads}
    if len(wl_by_name) != len(cc.workloads):
        raise CollectError("two workloads share a name; give one name=... to tell them apart")
    label_by_name = {l.name: l for l in cc.labels}
    plan = make_plan(list(label_by_name), list(wl_by_name), cc.iterations, cc.order)
    done_already = [p for p in plan if is_complete(iteration_dir(store, p.label, p.workload, p.iteration))]
    if done_already and not cc.resume:
        p = done_already[0]
        raise CollectError(f"{iteration_dir(store, p.label, p.workload, p.iteration)} is already complete "
                           f"({len(done_already)} of {len(plan)} planned iterations are): pass --resume to "
                           f"continue this collection, or choose another --store")
    for stale in discard_stale_temps(store) if store.exists() else []:
        log(f"removed interrupted iteration {stale}")
    events = requested_events(cc.analysis_events) + [e for e in cc.extra_events]
    events = list(dict.fromkeys(events))
    if provider is None:
        if cc.target_cfg.kind == "qemu":
            from abtest.targets.qemu import QemuProvider
            provider = QemuProvider(cc.target_cfg, log=log)
        else:
            provider = TargetProvider(cc.target_cfg, log=log)
    summary = {"done": 0, "skipped": len(done_already), "retries": 0, "iterations": []}
    states: dict[int, TargetState] = {}
    todo = [p for p in plan if p not in done_already]
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("ETA"), TimeRemainingColumn(), console=console, disable=not cc.progress,
                        transient=False)
    try:
        with progress:
            task = progress.add_task("collect", total=len(plan), completed=len(done_already))
            for step in todo:
                label = label_by_name[step.label]
                wl = wl_by_name[step.workload]
                progress.update(task, description=f"{step.label} / {step.workload} #{step.iteration}")
                attempt = 0
                while True:
                    attempt += 1
                    writer = None
                    try:
                        t = provider.activate(label)
                        st = states.get(id(t))
                        if st is None:
                            st = states[id(t)] = make_state(t, cc, events)
                        said = len(st.settings.warnings)
                        applied = st.settings.apply(label.settings) if label.settings else {}
                        for w in st.settings.warnings[said:]:
                            log(f"[yellow]warning: {w}[/]")
                        boot_meta = vars(label.boot) if label.boot else None
                        writer = IterationWriter(store, step.label, step.workload, step.iteration)
                        run_iteration(st, cc, label, wl, step.iteration, attempt, writer, applied, boot_meta)
                        summary["done"] += 1
                        summary["iterations"].append(str(writer.final))
                        break
                    except RETRYABLE as e:
                        if writer:
                            writer.discard()
                        if attempt > cc.retries:
                            raise CollectError(f"{step.label}/{step.workload}/{step.iteration}: failed after "
                                               f"{attempt} attempts: {e}") from e
                        summary["retries"] += 1
                        log(f"[yellow]retrying {step.label}/{step.workload}/{step.iteration} "
                            f"(attempt {attempt} failed: {e})[/]")
                        for st in states.values():
                            st.prepared.clear()
                        try:
                            provider.recover(label)
                        except RETRYABLE as e2:
                            log(f"[yellow]target not back yet: {e2}[/]")
                    except BaseException:
                        if writer:
                            writer.discard()
                        raise
                progress.advance(task)
    finally:
        for st in states.values():
            try:
                if st.collector:
                    with TracefsLock(st.is_local):
                        st.collector.restore()
                st.settings.restore()
            except (TargetError, OSError, EOFError) as e:
                log(f"[red]cleanup on {st.target.name} failed: {e}[/]")
        provider.close()
    return summary
