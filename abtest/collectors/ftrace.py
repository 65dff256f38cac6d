"""ftrace collector: enable events through tracefs, run, `trace-cmd extract`, pull trace.dat.

Works wherever tracefs is writable (this machine refuses `trace-cmd record` because function tracing
is locked down; writing tracefs files + `trace-cmd extract` works on it, in the QEMU guests and on
phones). Every step is one shell script per call, so a remote target costs few round trips.

Events: the default set plus the canonical tables the requested analyses declare (the caller passes them:
`abtest collect` asks abtest.analysis.registry.events_for), mapped to kernel event names (`sched_pelt_cfs` ->
sched_pelt_cfs,
lisa__sched_pelt_cfs or sched_load_cfs_rq, whichever the kernel has). Events a kernel lacks are
reported in `FtraceSession.missing_events`, never silently dropped. Lost events come from the kernel's
own per-CPU ring buffer counters (per_cpu/cpuN/stats: overrun + dropped events) read before extract.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from abtest.collectors.host_state import TargetLock
from abtest.targets.base import Target, TargetError
from abtest.targets.shell import check_clock, check_event, quote

DEFAULT_EVENTS = (
    "sched_switch",
    "sched_wakeup",
    "sched_waking",
    "sched_wakeup_new",
    "sched_migrate_task",
    "cpu_idle",
    "cpu_idle_miss",
    "cpu_frequency",
)

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


def check_events(events) -> list[str]:
    """The event names, each checked against the ftrace-event alphabet (abtest.targets.shell); raises
    ShellNameError naming the first that is not a plain event name (before anything reaches a target)."""
    return [check_event(e) for e in events]


def enable_line(table: str, candidates) -> str:
    """Shell line (run in the tracefs directory) enabling the first kernel event of `candidates` that exists
    and printing `ABTEST_ON <table> <event>`, else `ABTEST_MISSING <table>`. Every name is checked against
    the event alphabet and quoted (issue 43: an unquoted `$(...)` here ran as root on the target)."""
    table_sh = quote(check_event(table))
    tries_sh = " || ".join(
        f"{{ echo {quote(check_event(c))} >> set_event 2>/dev/null && echo ABTEST_ON {table_sh} {quote(c)}; }}"
        for c in candidates
    )
    return f"{tries_sh} || echo ABTEST_MISSING {table_sh}"


def requested_events(declared: list[str] | None = None) -> list[str]:
    """The default event set plus `declared` (canonical tables the requested analyses need or can use, in
    order, duplicates dropped)."""
    return list(dict.fromkeys(list(DEFAULT_EVENTS) + list(declared or ())))


def setup_lines(events, buffer_size_kb: int, clock: str) -> list[str]:
    """The tracefs set-up of a collection, for the ftrace collector and the lab's iteration script alike: shell
    lines run in the tracefs directory that turn tracing and every event off, set the per-CPU buffer size and the
    clock (falling back to mono, then local), enable each requested event (the first kernel name that exists,
    KERNEL_EVENT_CANDIDATES; marker-like tables need none), empty the buffer and turn tracing on. They report
    `ABTEST_WARN buffer_size_kb`, `ABTEST_CLOCK <clock>`, `ABTEST_ON <table> <event>` / `ABTEST_MISSING <table>`
    and `ABTEST_BUFFER_KB <kb>` (FtraceSession.read_start). Names are checked against their alphabets first."""
    clocks = [check_clock(clock)] + [c for c in ("mono", "local") if c != clock]
    return [
        "echo 0 > tracing_on; echo > set_event",
        f"echo {int(buffer_size_kb)} > buffer_size_kb || echo ABTEST_WARN buffer_size_kb",
        "for c in "
        + " ".join(quote(c) for c in clocks)
        + '; do if echo "$c" > trace_clock 2>/dev/null; then echo ABTEST_CLOCK "$c"; break; fi; done',
        *[enable_line(t, KERNEL_EVENT_CANDIDATES.get(t, (t,))) for t in events if t not in NOT_FTRACE],
        "echo > trace",
        "echo 1 > tracing_on",
        "echo ABTEST_BUFFER_KB $(cat buffer_size_kb)",
    ]


# First lines of a stop (in the tracefs directory): tracing off, each CPU's lost events (FtraceSession.read_stop).
STOP_LINES = (
    "echo 0 > tracing_on",
    "for c in per_cpu/cpu*; do n=${c##*cpu}; "
    "o=$(sed -n 's/^overrun: *//p' $c/stats); d=$(sed -n 's/^dropped events: *//p' $c/stats); "
    "echo ABTEST_LOST $n ${o:-0} ${d:-0}; done",
)


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

    def read_start(self, stdout: str, requested_clock: str) -> FtraceSession:
        """Take in the report lines of setup_lines (and ABTEST_TRACEFS of the lab's tracefs discovery)."""
        for line in stdout.splitlines():
            p = line.split()
            if len(p) < 2:
                continue
            if p[0] == "ABTEST_TRACEFS":
                self.tracefs = p[1]
            elif p[0] == "ABTEST_CLOCK":
                self.clock = p[1]
            elif p[0] == "ABTEST_ON" and len(p) > 2:
                self.enabled.append(p[2])
            elif p[0] == "ABTEST_MISSING":
                self.missing_events.append(p[1])
            elif p[0] == "ABTEST_WARN":
                self.warnings.append(f"could not set {p[1]}")
            elif p[0] == "ABTEST_BUFFER_KB" and p[1].isdigit():
                self.buffer_size_kb = int(p[1])
        if self.clock != requested_clock:
            self.warnings.append(f"trace clock {requested_clock!r} unavailable, used {self.clock!r}")
        return self

    def read_stop(self, stdout: str) -> FtraceSession:
        """Take in the per-CPU lost-event counters STOP_LINES print (ABTEST_LOST cpu overrun dropped)."""
        for m in re.finditer(r"^ABTEST_LOST (\d+) (\d+) (\d+)$", stdout, re.M):
            self.lost_events_per_cpu[int(m.group(1))] = int(m.group(2)) + int(m.group(3))
        self.lost_events = sum(self.lost_events_per_cpu.values())
        if self.lost_events:
            self.warnings.append(
                f"{self.lost_events} events lost in the ring buffer (per CPU {self.lost_events_per_cpu}); "
                "raise buffer_size_kb"
            )
        return self

    def as_meta(self) -> dict:
        return {
            "events_enabled": self.enabled,
            "events_missing": self.missing_events,
            "lost_events": self.lost_events,
            "lost_events_per_cpu": self.lost_events_per_cpu,
            "trace_clock": self.clock,
            "buffer_size_kb": self.buffer_size_kb,
            "tracefs": self.tracefs,
            "warnings": self.warnings,
        }


def TracefsLock(needed: bool = True) -> TargetLock:
    """This machine's tracefs lock (abtest.collectors.host_state: /run/abtest/tracefs.lock as root, plus the
    legacy /tmp/abtest-tracefs.lock when it is ours), taken only when `needed` (the target is this machine)."""
    return TargetLock.tracefs(needed)


# Tracefs values a collection changes and puts back (FtraceCollector.snapshot / restore_script).
SNAPSHOT_SCRIPT = "\n".join(
    [
        "echo ABTEST_ORIG tracing_on $(cat tracing_on)",
        "echo ABTEST_ORIG trace_clock $(sed -e 's/.*\\[//' -e 's/\\].*//' trace_clock)",
        "echo ABTEST_ORIG buffer_size_kb $(cut -d' ' -f1 buffer_size_kb)",
        "for c in per_cpu/cpu*; do echo ABTEST_ORIG_CPUBUF ${c##*cpu} $(cut -d' ' -f1 $c/buffer_size_kb); done",
        "sed 's/^/ABTEST_ORIG_EVENT /' set_event",
    ]
)
_EVENT_NAME = re.compile(r"^[A-Za-z0-9_]+:[A-Za-z0-9_*]+$")


def parse_snapshot(stdout: str, tracefs: str) -> dict:
    """SNAPSHOT_SCRIPT output -> {"path", "tracing_on", "trace_clock", "buffer_size_kb", "buffer_size_kb_per_cpu",
    "set_event": [group:event, ...]} (values as strings, the way tracefs shows them)."""
    orig: dict = {"path": tracefs, "set_event": [], "buffer_size_kb_per_cpu": {}}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "ABTEST_ORIG":
            orig[parts[1]] = parts[2]
        elif len(parts) == 3 and parts[0] == "ABTEST_ORIG_CPUBUF":
            orig["buffer_size_kb_per_cpu"][parts[1]] = parts[2]
        elif len(parts) == 2 and parts[0] == "ABTEST_ORIG_EVENT" and _EVENT_NAME.match(parts[1]):
            orig["set_event"].append(parts[1])
    return orig


def restore_script(orig: dict) -> str:
    """Shell lines (run in the tracefs directory) that put back the values of a snapshot: tracing off, the
    buffer emptied, the original events, buffer size (per CPU when they differed), clock, then tracing_on."""
    lines = ["echo 0 > tracing_on", "echo > set_event"]
    lines += [f"echo {quote(e)} >> set_event" for e in orig.get("set_event", []) if _EVENT_NAME.match(e)]
    buf = str(orig.get("buffer_size_kb", ""))
    if buf.isdigit():
        lines.append(f"echo {int(buf)} > buffer_size_kb")
    else:  # "X": the CPUs' sizes differed
        lines += [
            f"echo {int(v)} > per_cpu/cpu{int(c)}/buffer_size_kb"
            for c, v in orig.get("buffer_size_kb_per_cpu", {}).items()
            if str(v).isdigit() and str(c).isdigit()
        ]
    if orig.get("trace_clock"):
        lines.append(f"echo {quote(orig['trace_clock'])} > trace_clock")
    lines.append("echo > trace")
    if str(orig.get("tracing_on")) in ("0", "1"):
        lines.append(f"echo {int(orig['tracing_on'])} > tracing_on")
    return "\n".join(lines)


class FtraceCollector:
    """Start/stop ftrace on a target and bring trace.dat home.

    Args:
        target: where to trace.
        events: canonical table names (see analysis_events) to record.
        buffer_size_kb: ring buffer per CPU in KiB.
        clock: trace clock ("boot" aligns with ODPM/uptime timestamps; falls back to "mono" then "local").
        remote_dir: private scratch directory on the target (the orchestrator makes one with mktemp -d).
        owner_uid: uid that must be able to pull the trace (the login user of the connection); the trace file
            is chown'ed to it and made 0600 (never world-readable: it holds kernel symbol addresses).

    Tracefs state: `snapshot()` reads what a collection changes (tracing_on, enabled events, buffer size,
    clock) into `original`; `stop()`, `reset()` and `restore()` put those values back (the orchestrator
    journals them on the host first, abtest.collectors.host_state).
    """

    def __init__(
        self,
        target: Target,
        events: list[str] | None = None,
        *,
        buffer_size_kb: int = 8192,
        clock: str = "boot",
        remote_dir: str = "/tmp",
        owner_uid: int | None = None,
    ):
        self.target = target
        self.events = check_events(events or DEFAULT_EVENTS)
        self.buffer_size_kb = int(buffer_size_kb)
        self.clock = check_clock(clock)
        self.remote_dir = remote_dir
        self.owner_uid = owner_uid
        self._tracefs: str | None = None
        self.original: dict | None = None
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

    def snapshot(self) -> dict:
        """Read the tracefs values a collection changes (one round trip); sets and returns `original`."""
        res = self.target.run(f"cd {quote(self.tracefs)} || exit 90\n{SNAPSHOT_SCRIPT}", 30, as_root=True)
        if res.exit_code != 0:
            raise TargetError(
                f"{self.target.name}: cannot read tracefs state in {self.tracefs} "
                f"(exit {res.exit_code}): {res.stderr.strip()[-300:]}"
            )
        self.original = parse_snapshot(res.stdout, self.tracefs)
        return self.original

    def _restore_lines(self) -> str:
        if self.original is None:  # nothing snapshotted: quiesce only
            return "echo 0 > tracing_on\necho > set_event\necho > trace"
        return restore_script(self.original)

    def start(self, preamble: str = "") -> tuple[FtraceSession, str]:
        """Stop tracing, clear the buffer, set buffer size and clock, enable events, start tracing.

        `preamble` (shell) runs first in the same round trip (e.g. the meta.json script); returns
        (session, the whole stdout) so the caller can parse its part.
        """
        self.session = FtraceSession(clock=self.clock, buffer_size_kb=self.buffer_size_kb, tracefs=self.tracefs)
        lines = [preamble, f"rm -f {quote(self.remote_trace)}", f"cd {quote(self.tracefs)} || exit 90"]
        res = self.target.run(
            "\n".join(lines + setup_lines(self.events, self.buffer_size_kb, self.clock)), 60, as_root=True
        )
        if res.exit_code == 90:
            raise TargetError(f"{self.target.name}: cannot cd to tracefs {self.tracefs}")
        self.session.read_start(res.stdout, self.clock)
        if not self.session.enabled:
            raise TargetError(
                f"{self.target.name}: none of the requested events exist on this kernel ({', '.join(self.events)})"
            )
        return self.session, res.stdout

    def marker_command(self, text: str) -> str:
        """Shell snippet writing `text` to trace_marker (embed it in the workload command: no extra round trip)."""
        return f"echo {quote(text)} > {quote(self.marker_path)}"

    def stop(self, local_trace: str | Path) -> FtraceSession:
        """Stop tracing, read lost-event counters, `trace-cmd extract`, put tracefs back as snapshotted (events,
        buffer size, clock, tracing_on; buffer emptied), pull to `local_trace` (owner-only there too)."""
        remote = self.remote_trace
        err = f"{self.remote_dir}/abtest-extract.err"
        script = "\n".join(
            [
                f"cd {quote(self.tracefs)} || exit 90",
                *STOP_LINES,
                f"trace-cmd extract -o {quote(remote)} >/dev/null 2>{quote(err)}; rc=$?",
                self._restore_lines(),
                f"[ $rc = 0 ] || {{ cat {quote(err)} >&2; exit 91; }}",
                f"chmod 600 {quote(remote)}",
            ]
            + ([f"chown {int(self.owner_uid)} {quote(remote)}"] if self.owner_uid not in (None, 0) else [])
        )
        res = self.target.run(script, 300, as_root=True)
        if res.exit_code == 91:
            raise TargetError(f"{self.target.name}: trace-cmd extract failed: {res.stderr.strip()[-500:]}")
        if res.exit_code != 0:
            raise TargetError(
                f"{self.target.name}: stopping ftrace failed (exit {res.exit_code}): {res.stderr.strip()[-500:]}"
            )
        self.session.read_stop(res.stdout)
        self.target.pull(remote, local_trace)
        if Path(local_trace).is_file() and not Path(local_trace).is_symlink():  # never a device node or a link's target
            os.chmod(local_trace, 0o600)
        self.session.trace_path = Path(local_trace)
        return self.session

    def reset(self) -> None:
        """Tracefs put back as snapshotted (tracing off and events off when nothing was snapshotted); best
        effort, 15 s at most; after a failure or Ctrl-C."""
        try:
            self.target.run(f"cd {quote(self.tracefs)} || exit 0\n{self._restore_lines()}", 15, as_root=True)
        except TargetError:
            pass

    def restore(self) -> bool:
        """reset() + remove the remote trace file (end of a collection). True when the target ran it."""
        lines = [
            f"cd {quote(self.tracefs)} || exit 90",
            self._restore_lines(),
            f"rm -f {quote(self.remote_trace)} {quote(self.remote_dir + '/abtest-extract.err')}",
        ]
        try:
            return self.target.run("\n".join(lines), 15, as_root=True).exit_code == 0
        except TargetError:
            return False
