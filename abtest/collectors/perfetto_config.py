"""Perfetto on Android: trace config generation and a collector that runs `perfetto` on the device.

The config is Perfetto's TraceConfig in protobuf text format (what `perfetto --txt -c -` reads):
- linux.ftrace with the kernel events the analyses need (sched/*, power/cpu_idle, power/cpu_idle_miss,
  power/cpu_frequency, sched_pelt_* where the kernel has them: traced_probes skips unknown events)
  plus atrace categories for frame markers;
- android.power with power rails (ODPM, the same counters as the sysfs sampler) and battery counters;
- android.surfaceflinger.frametimeline (expected vs actual frame timeline, jank types);
- linux.process_stats for process names.
The trace is pulled as `trace.perfetto-trace`, which abtest.Trace reads (rails become power_rail).
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from pathlib import Path

from abtest.collectors.ftrace import DEFAULT_EVENTS, KERNEL_EVENT_CANDIDATES, NOT_FTRACE
from abtest.targets.base import Target, TargetError
from abtest.targets.shell import quote

# canonical table -> perfetto "group/event" names
_GROUPS = {
    "sched": "sched",
    "cpu_idle": "power",
    "cpu_idle_miss": "power",
    "cpu_frequency": "power",
    "cpu_frequency_limits": "power",
    "clock_set_rate": "clk",
}


def ftrace_event_names(tables: list[str]) -> list[str]:
    """Canonical tables -> perfetto ftrace_events entries ("group/name"); PELT tables map to every
    known kernel spelling (sched/sched_pelt_cfs, sched/sched_load_cfs_rq, lisa/lisa__sched_pelt_cfs)."""
    out: list[str] = []
    for table in tables:
        if table in NOT_FTRACE:
            continue
        for name in KERNEL_EVENT_CANDIDATES.get(table, (table,)):
            group = (
                "lisa"
                if name.startswith("lisa__")
                else _GROUPS.get(name, "sched" if name.startswith("sched") else "power")
            )
            entry = f"{group}/{name}"
            if entry not in out:
                out.append(entry)
    return out


# What each string of the config may hold. Every value is also written as an escaped text-proto string, so
# even an allowed character cannot end the string; the checks refuse what has no business there (quotes,
# braces, newlines: a config fragment) with a clear error instead of tracing something else.
_FTRACE_EVENT = re.compile(r"^[A-Za-z0-9_]+/[A-Za-z0-9_*]+$")  # group/name
_ATRACE_CATEGORY = re.compile(r"^[A-Za-z0-9_]+$")
_ATRACE_APP = re.compile(r"^(\*|[A-Za-z0-9_.:*-]+)$")  # "*" or a package / process name (glob allowed)


class ConfigValueError(ValueError):
    """A value given for the perfetto config is not a well-formed name (the message says which)."""


def _checked(values, pattern: re.Pattern, what: str) -> list[str]:
    out = []
    for v in values:
        if not isinstance(v, str) or not pattern.match(v):
            raise ConfigValueError(f"{what} {v!r} is not a valid name (allowed: {pattern.pattern})")
        out.append(v)
    return out


def proto_string(value: str) -> str:
    """`value` as a protobuf text-format string literal (double quotes; backslash, quote and non-printable
    bytes escaped as octal)."""
    out = []
    for b in value.encode():
        if b in (0x22, 0x5C):
            out.append("\\" + chr(b))
        elif 0x20 <= b < 0x7F:
            out.append(chr(b))
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def make_trace_config(
    tables: list[str] | None = None,
    *,
    duration_s: float = 60.0,
    buffer_kb: int = 65536,
    ftrace_buffer_kb: int = 16384,
    power_rails: bool = True,
    rail_poll_ms: int = 250,
    frame_timeline: bool = True,
    atrace_categories: tuple[str, ...] = ("gfx", "view", "input"),
    atrace_apps: str | tuple[str, ...] = "*",
    extra_ftrace_events: tuple[str, ...] = (),
) -> str:
    """TraceConfig text proto. duration_s: hard stop (the collector normally stops it earlier).
    extra_ftrace_events: more "group/name" entries (e.g. "ftrace/print" for trace_marker writes).
    atrace_apps: "*" (every app) or package/process names (one string, or several). Every name is checked
    (ConfigValueError) and written escaped: no value can add anything to the config."""
    events = _checked(
        list(extra_ftrace_events) + ftrace_event_names(list(tables or DEFAULT_EVENTS)), _FTRACE_EVENT, "ftrace event"
    )
    categories = _checked(atrace_categories, _ATRACE_CATEGORY, "atrace category")
    apps = _checked([atrace_apps] if isinstance(atrace_apps, str) else list(atrace_apps), _ATRACE_APP, "atrace app")
    ft = "\n".join(f"      ftrace_events: {proto_string(e)}" for e in events)
    at = "\n".join(f"      atrace_categories: {proto_string(c)}" for c in categories)
    ap = "\n".join(f"      atrace_apps: {proto_string(a)}" for a in apps)
    parts = [
        f"buffers {{ size_kb: {int(buffer_kb)} fill_policy: RING_BUFFER }}",
        "buffers { size_kb: 4096 fill_policy: RING_BUFFER }",
        'data_sources {\n  config {\n    name: "linux.ftrace"\n    target_buffer: 0\n    ftrace_config {\n'
        f"{ft}\n{at}\n{ap}\n      buffer_size_kb: {int(ftrace_buffer_kb)}\n"
        "      drain_period_ms: 250\n      symbolize_ksyms: false\n    }\n  }\n}",
        'data_sources {\n  config {\n    name: "linux.process_stats"\n    target_buffer: 1\n'
        "    process_stats_config { scan_all_processes_on_start: true }\n  }\n}",
    ]
    if power_rails:
        parts.append(
            'data_sources {\n  config {\n    name: "android.power"\n    target_buffer: 1\n'
            f"    android_power_config {{\n      battery_poll_ms: {int(rail_poll_ms)}\n"
            "      collect_power_rails: true\n"
            "      battery_counters: BATTERY_COUNTER_CAPACITY_PERCENT\n"
            "      battery_counters: BATTERY_COUNTER_CHARGE\n"
            "      battery_counters: BATTERY_COUNTER_CURRENT\n    }\n  }\n}"
        )
    if frame_timeline:
        parts.append(
            'data_sources {\n  config {\n    name: "android.surfaceflinger.frametimeline"\n    target_buffer: 1\n  }\n}'
        )
    parts += [
        f"duration_ms: {int(duration_s * 1000)}",
        "write_into_file: true",
        "file_write_period_ms: 2500",
        "flush_period_ms: 10000",
    ]
    return "\n".join(parts) + "\n"


class PerfettoCollector:
    """Runs `perfetto --background` on the device with a generated config; stop() ends it and pulls.

    Same interface as FtraceCollector for the orchestrator (start/stop/reset/restore, marker_path,
    events, trace_name). Workload markers are written to trace_marker and recorded as ftrace print
    events (the config asks for ftrace/print).
    """

    REMOTE_TRACE = "/data/misc/perfetto-traces/abtest.perfetto-trace"  # where traced may write (SELinux)
    trace_name = "trace.perfetto-trace"

    def __init__(
        self,
        target: Target,
        events: list[str] | None = None,
        *,
        duration_s: float = 3600.0,
        config_text: str | None = None,
        remote_dir: str = "/data/local/tmp",
    ):
        self.target = target
        self.events = list(events or DEFAULT_EVENTS)
        self.config_text = config_text or make_trace_config(
            self.events, duration_s=duration_s, extra_ftrace_events=("ftrace/print",)
        )
        self.remote_dir = remote_dir  # the orchestrator's private scratch dir (mktemp -d)
        self.pid: int | None = None
        self._tracefs: str | None = None
        self._pushed: str | None = None  # remote_dir the config was pushed to

    @property
    def remote_config(self) -> str:
        return f"{self.remote_dir}/abtest.pbtxt"

    @property
    def marker_path(self) -> str:
        if self._tracefs is None:
            self._tracefs = self.target.tracefs_path()
        return f"{self._tracefs}/trace_marker"

    def start(self, preamble: str = "") -> tuple[dict, str]:
        """Push the config (once), then in one round trip run `preamble` and start perfetto in the
        background; returns ({"pid": ...}, stdout)."""
        if self._pushed != self.remote_dir:
            local_dir = tempfile.mkdtemp(prefix="abtest-perfetto-")  # private (0700) on the host
            try:
                local = Path(local_dir) / "abtest.pbtxt"
                local.write_text(self.config_text)
                self.target.push(local, self.remote_config)
            finally:
                shutil.rmtree(local_dir, ignore_errors=True)
            self._pushed = self.remote_dir
        res = self.target.run(
            f"{preamble}\nrm -f {self.REMOTE_TRACE}; perfetto --background --txt -c - "
            f"-o {self.REMOTE_TRACE} < {quote(self.remote_config)}",
            60,
            as_root=True,
        )
        pid = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else ""
        if res.exit_code != 0 or not pid.isdigit():
            raise TargetError(
                f"{self.target.name}: perfetto did not start: {(res.stderr or res.stdout).strip()[-400:]}"
            )
        self.pid = int(pid)
        return {"pid": self.pid}, res.stdout

    def stop(self, local_trace: Path, timeout_s: float = 60.0) -> PerfettoSession:
        """SIGTERM perfetto (it flushes and finalises the file), wait for it to exit, pull the trace."""
        if self.pid is not None:
            self.target.run(f"kill -TERM {self.pid}", 30, as_root=True)
            t0 = time.monotonic()
            while self.target.run(f"kill -0 {self.pid} 2>/dev/null", 30, as_root=True).exit_code == 0:
                if time.monotonic() - t0 > timeout_s:
                    raise TargetError(
                        f"{self.target.name}: perfetto (pid {self.pid}) still running after {timeout_s} s"
                    )
                time.sleep(0.5)
            self.pid = None
        self.target.pull(self.REMOTE_TRACE, local_trace)
        return PerfettoSession(self.events)

    def reset(self) -> None:
        """Stop a perfetto left running by a failed iteration (best effort)."""
        if self.pid is not None:
            try:
                self.target.run(f"kill -TERM {self.pid} 2>/dev/null", 15, as_root=True)
            except TargetError:
                pass
            self.pid = None

    def restore(self) -> None:
        self.reset()
        try:
            self.target.run(f"rm -f {quote(self.REMOTE_TRACE)} {quote(self.remote_config)}", 15, as_root=True)
        except TargetError:
            pass


class PerfettoSession:
    """meta.json "trace" entry for a perfetto capture (ring-buffer losses are in the trace's own stats:
    `abtest trace info` reports them)."""

    def __init__(self, events: list[str]):
        self.events = events

    def as_meta(self) -> dict:
        return {
            "backend": "perfetto",
            "events_requested": self.events,
            "lost_events": None,
            "lost_events_source": "perfetto trace stats (abtest trace info)",
            "trace_clock": "boot",
        }
