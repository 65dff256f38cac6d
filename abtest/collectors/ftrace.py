"""ftrace collector: enable events through tracefs, run, `trace-cmd extract`, pull trace.dat.

Works wherever tracefs is writable (this machine refuses `trace-cmd record` because function tracing
is locked down; writing tracefs files + `trace-cmd extract` works on it, in the QEMU guests and on
phones). Every step is one shell script per call, so a remote target costs few round trips.

Events: the default set plus the canonical tables the requested analyses declare (the caller passes them:
`abtest collect` asks abtest.analysis.registry.events_for), mapped to kernel event names (`sched_pelt_cfs` -> sched_pelt_cfs,
lisa__sched_pelt_cfs or sched_load_cfs_rq, whichever the kernel has). Events a kernel lacks are
reported in `FtraceSession.missing_events`, never silently dropped. Lost events come from the kernel's
own per-CPU ring buffer counters (per_cpu/cpuN/stats: overrun + dropped events) read before extract.
"""
from __future__ import annotations

import fcntl
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from abtest.targets.base import Target, TargetError

TRACEFS_LOCK = "/tmp/abtest-tracefs.lock"

DEFAULT_EVENTS = ("sched_switch", "sched_wakeup", "sched_waking", "sched_wakeup_new", "sched_migrate_task",
                  "cpu_idle", "cpu_idle_miss", "cpu_frequency")

# canonical table -> kernel event names to try, first that exists wins
KERNEL_EVENT_CANDIDATES: dict[str, tuple[str, ...]] = {
    "sched_pelt_cfs": ("sched_pelt_cfs", "lisa__sched_pelt_cfs", "sched_load_cfs_rq"),
    "sched_pelt_se": ("sched_pelt_se", "lisa__sched_pelt_se", "sched_load_se"),
    "sched_pelt_rt": ("sched_pelt_rt", "lisa__sched_pelt_rt", "sched_load_rt_rq"),
    "sched_pelt_dl": ("sched_pelt_dl", "lisa__sched_pelt_dl", "sched_load_dl_rq"),
    "sched_pelt_irq": ("sched_pelt_irq", "lisa__sched_pelt_irq", "sched_load_irq"),
}
# canonical tables that need no event enabled (markers always land in the buffer) or come from elsewhere
NOT_FTRACE = {"marker", "power_rail", "print", "bprint", "bputs", "tracing_mark_write"}


def requested_events(declared: list[str] | None = None) -> list[str]:
    """The default event set plus `declared` (canonical tables the requested analyses need or can use, in
    order, duplicates dropped)."""
    return list(dict.fromkeys(list(DEFAULT_EVENTS) + list(declared or ())))


@dataclass
class FtraceSession:
    """Outcome of one traced run.

    enabled: kernel events enabled. missing_events: requested tables the kernel has no event for.
    lost_events_per_cpu: {cpu: overrun + dropped events}. lost_events: their sum.
    clock: trace clock used. buffer_size_kb: per-CPU buffer size. trace_path: pulled trace.dat.
    """
    enabled: list[str] = field(default_factory=list)
    missing_events: list[str] = field(default_factory=list)
    lost_events_per_cpu: dict[int, int] = field(default_factory=dict)
    lost_events: int = 0
    clock: str = ""
    buffer_size_kb: int = 0
    tracefs: str = ""
    trace_path: Path | None = None
    warnings: list[str] = field(default_factory=list)

    def as_meta(self) -> dict:
        return {"events_enabled": self.enabled, "events_missing": self.missing_events,
                "lost_events": self.lost_events, "lost_events_per_cpu": self.lost_events_per_cpu,
                "trace_clock": self.clock, "buffer_size_kb": self.buffer_size_kb, "tracefs": self.tracefs,
                "warnings": self.warnings}


class TracefsLock:
    """fcntl lock on /tmp/abtest-tracefs.lock, taken only when the target is this machine."""

    def __init__(self, needed: bool, path: str = TRACEFS_LOCK):
        self.needed, self.path, self._f = needed, path, None

    def __enter__(self) -> "TracefsLock":
        if self.needed:
            self._f = open(self.path, "w")
            fcntl.flock(self._f, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc) -> None:
        if self._f is not None:
            fcntl.flock(self._f, fcntl.LOCK_UN)
            self._f.close()
            self._f = None


class FtraceCollector:
    """Start/stop ftrace on a target and bring trace.dat home.

    Args:
        target: where to trace.
        events: canonical table names (see analysis_events) to record.
        buffer_size_kb: ring buffer per CPU in KiB.
        clock: trace clock ("boot" aligns with ODPM/uptime timestamps; falls back to "mono" then "local").
        remote_dir: scratch directory on the target.
    """

    def __init__(self, target: Target, events: list[str] | None = None, *, buffer_size_kb: int = 8192,
                 clock: str = "boot", remote_dir: str = "/tmp"):
        self.target = target
        self.events = list(events or DEFAULT_EVENTS)
        self.buffer_size_kb = int(buffer_size_kb)
        self.clock = clock
        self.remote_dir = remote_dir
        self._tracefs: str | None = None
        self._saved: dict[str, str] = {}
        self.session = FtraceSession()

    trace_name = "trace.dat"

    @property
    def tracefs(self) -> str:
        if self._tracefs is None:
            self._tracefs = self.target.tracefs_path()
        return self._tracefs

    @property
    def marker_path(self) -> str:
        return f"{self.tracefs}/trace_marker"

    @property
    def remote_trace(self) -> str:
        return f"{self.remote_dir}/abtest-trace.dat"

    def start(self, preamble: str = "") -> tuple[FtraceSession, str]:
        """Stop tracing, clear the buffer, set buffer size and clock, enable events, start tracing.

        `preamble` (shell) runs first in the same round trip (e.g. the meta.json script); returns
        (session, the whole stdout) so the caller can parse its part.
        """
        self.session = FtraceSession(clock=self.clock, buffer_size_kb=self.buffer_size_kb, tracefs=self.tracefs)
        lines = [preamble, f"rm -f {shlex.quote(self.remote_trace)}",
                 f"cd {shlex.quote(self.tracefs)} || exit 90",
                 "echo ABTEST_SAVED_BUF $(cat buffer_size_kb)",
                 "echo ABTEST_SAVED_CLOCK $(sed -e 's/.*\\[//' -e 's/\\].*//' trace_clock)",
                 "echo 0 > tracing_on", "echo > set_event",
                 f"echo {self.buffer_size_kb} > buffer_size_kb || echo ABTEST_WARN buffer_size_kb",
                 ]
        clocks = [self.clock] + [c for c in ("mono", "local") if c != self.clock]
        lines.append("for c in " + " ".join(shlex.quote(c) for c in clocks) +
                     "; do if echo $c > trace_clock 2>/dev/null; then echo ABTEST_CLOCK $c; break; fi; done")
        for table in self.events:
            if table in NOT_FTRACE:
                continue
            cands = KERNEL_EVENT_CANDIDATES.get(table, (table,))
            tries = " || ".join(f"{{ echo {shlex.quote(c)} >> set_event 2>/dev/null && echo ABTEST_ON {table} {c}; }}"
                                for c in cands)
            lines.append(f"{tries} || echo ABTEST_MISSING {table}")
        lines += ["echo > trace", "echo 1 > tracing_on", "cat buffer_size_kb"]
        res = self.target.run("\n".join(lines), 60, as_root=True)
        if res.exit_code == 90:
            raise TargetError(f"{self.target.name}: cannot cd to tracefs {self.tracefs}")
        for line in res.stdout.splitlines():
            parts = line.split()
            if not parts:
                continue
            if parts[0] == "ABTEST_SAVED_BUF" and len(parts) > 1:
                self._saved.setdefault("buffer_size_kb", parts[1])
            elif parts[0] == "ABTEST_SAVED_CLOCK" and len(parts) > 1:
                self._saved.setdefault("trace_clock", parts[1])
            elif parts[0] == "ABTEST_CLOCK":
                self.session.clock = parts[1]
            elif parts[0] == "ABTEST_ON":
                self.session.enabled.append(parts[2])
            elif parts[0] == "ABTEST_MISSING":
                self.session.missing_events.append(parts[1])
            elif parts[0] == "ABTEST_WARN":
                self.session.warnings.append(f"could not set {parts[1]}")
        if self.session.clock != self.clock:
            self.session.warnings.append(f"trace clock {self.clock!r} unavailable, used {self.session.clock!r}")
        if not self.session.enabled:
            raise TargetError(f"{self.target.name}: none of the requested events exist on this kernel "
                              f"({', '.join(self.events)})")
        return self.session, res.stdout

    def marker_command(self, text: str) -> str:
        """Shell snippet writing `text` to trace_marker (embed it in the workload command: no extra round trip)."""
        return f"echo {shlex.quote(text)} > {shlex.quote(self.marker_path)}"

    def stop(self, local_trace: str | Path) -> FtraceSession:
        """Stop tracing, read lost-event counters, `trace-cmd extract`, quiesce tracefs (events off,
        buffer emptied), pull to `local_trace`. Buffer size and clock stay until `restore()`."""
        remote = self.remote_trace
        err = f"{self.remote_dir}/abtest-extract.err"
        script = "\n".join([
            f"cd {shlex.quote(self.tracefs)} || exit 90",
            "echo 0 > tracing_on",
            "for c in per_cpu/cpu*; do n=${c##*cpu}; "
            "o=$(sed -n 's/^overrun: *//p' $c/stats); d=$(sed -n 's/^dropped events: *//p' $c/stats); "
            "echo ABTEST_LOST $n ${o:-0} ${d:-0}; done",
            f"trace-cmd extract -o {shlex.quote(remote)} >/dev/null 2>{shlex.quote(err)}; rc=$?",
            "echo > set_event; echo > trace",
            f"[ $rc = 0 ] || {{ cat {shlex.quote(err)} >&2; exit 91; }}",
            f"chmod 644 {shlex.quote(remote)}",
        ])
        res = self.target.run(script, 300, as_root=True)
        if res.exit_code == 91:
            raise TargetError(f"{self.target.name}: trace-cmd extract failed: {res.stderr.strip()[-500:]}")
        if res.exit_code != 0:
            raise TargetError(f"{self.target.name}: stopping ftrace failed (exit {res.exit_code}): "
                              f"{res.stderr.strip()[-500:]}")
        for m in re.finditer(r"^ABTEST_LOST (\d+) (\d+) (\d+)$", res.stdout, re.M):
            self.session.lost_events_per_cpu[int(m.group(1))] = int(m.group(2)) + int(m.group(3))
        self.session.lost_events = sum(self.session.lost_events_per_cpu.values())
        if self.session.lost_events:
            self.session.warnings.append(
                f"{self.session.lost_events} events lost in the ring buffer (per CPU "
                f"{self.session.lost_events_per_cpu}); raise buffer_size_kb")
        self.target.pull(remote, local_trace)
        self.session.trace_path = Path(local_trace)
        return self.session

    def reset(self) -> None:
        """Tracing off, events off, buffer emptied (best effort, 15 s at most; after a failure or Ctrl-C)."""
        try:
            self.target.run(f"cd {shlex.quote(self.tracefs)} && echo 0 > tracing_on; echo > set_event; "
                            f"echo > trace", 15, as_root=True)
        except TargetError:
            pass

    def restore(self) -> None:
        """reset() + buffer size and clock as found before the first start; remove the remote trace file."""
        lines = [f"cd {shlex.quote(self.tracefs)} || exit 0", "echo 0 > tracing_on", "echo > set_event",
                 "echo > trace"]
        if "buffer_size_kb" in self._saved:
            lines.append(f"echo {shlex.quote(self._saved['buffer_size_kb'])} > buffer_size_kb")
        if "trace_clock" in self._saved:
            lines.append(f"echo {shlex.quote(self._saved['trace_clock'])} > trace_clock")
        lines.append(f"rm -f {shlex.quote(self.remote_trace)} {shlex.quote(self.remote_dir + '/abtest-extract.err')}")
        try:
            self.target.run("\n".join(lines), 15, as_root=True)
        except TargetError:
            pass
