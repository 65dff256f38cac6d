"""Trace annotations: state the kernel does not trace, written into the trace buffer as "meta events".

While the trace runs, the collector writes to the target's ``trace_marker`` (one line per value, in the
kernel event's own text form), so the values land in the trace with trace-clock timestamps and every
analysis reads them from the canonical ``marker`` table (abtest.analysis.meta_events; ``source =
"marker"``):

* **cgroup snapshot** at start: every thread's cgroup, from ``/proc/<pid>/task/<tid>/cgroup`` (the cpuset
  controller's path when there is one: Android's ``/top-app``, ``/foreground``, ``/background``,
  ``/system-background``; else the cgroup v2 path), as
  ``cgroup_attach_task: dst_path=<path> pid=<tid>``. Tasks that move later are traced by the kernel's own
  ``cgroup:cgroup_attach_task`` event (enabled by the cgroups analysis).
* **thermal sampler**: every readable ``/sys/class/thermal/thermal_zone<N>/temp`` each ``period_s`` during the
  iteration, as ``thermal_temperature: thermal_zone=<type> id=<N> temp_prev=<m°C> temp=<m°C>``. It runs on
  the target (device-side over adb), in one background shell loop (builtins and ``cat``).

Settings (target file ``[trace]``): ``thermal_sample_s`` (default 1.0; 0 = off), ``cgroup_snapshot`` (default
true). Both cost one command at start (the snapshot and the loop's launch share it) and one at stop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from abtest.targets.base import Target, TargetError
from abtest.targets.shell import quote

THERMAL_ROOT = "/sys/class/thermal"


def cgroup_snapshot_script(marker: str, proc: str = "/proc") -> str:
    """Shell (POSIX sh builtins only inside the loop) writing one cgroup_attach_task line per thread."""
    m = quote(marker)
    return (
        f"for d in {proc}/[0-9]*/task/[0-9]*; do c=; v2=; "
        f"while IFS= read -r l; do case $l in *:cpuset:*) c=${{l#*:cpuset:}};; 0::*) v2=${{l#0::}};; esac; "
        f'done < $d/cgroup 2>/dev/null; [ -z "$c" ] && c=$v2; [ -n "$c" ] && '
        f'echo "cgroup_attach_task: dst_path=$c pid=${{d##*/}}" > {m}; done 2>/dev/null'
    )


def thermal_loop_script(marker: str, zones: list[tuple[int, str]], period_s: float, root: str = THERMAL_ROOT) -> str:
    """Shell loop writing each zone's temperature (m°C) to the marker every period_s."""
    m = quote(marker)
    body = []
    for zid, ztype in zones:
        typ = "".join(ch if ch.isalnum() or ch in "-_.:" else "_" for ch in ztype) or f"zone{zid}"
        body.append(
            f"t=$(cat {quote(f'{root}/thermal_zone{zid}/temp')} 2>/dev/null) && "
            f'echo "thermal_temperature: thermal_zone={typ} id={zid} temp_prev=${{p{zid}:-$t}} temp=$t" '
            f"> {m}; p{zid}=$t"
        )
    return f"while :; do {'; '.join(body)}; sleep {period_s:g}; done"


@dataclass
class TraceAnnotator:
    """Writes the cgroup snapshot at start and runs the thermal sampler until stop().

    target: where the trace runs; marker: its trace_marker path (the collector's ``marker_path``);
    thermal_period_s: seconds between zone readings (0 = no sampler); cgroups: write the snapshot;
    thermal_root / proc: sysfs and procfs locations (other roots for tests).
    """

    target: Target
    marker: str
    thermal_period_s: float = 1.0
    cgroups: bool = True
    thermal_root: str = THERMAL_ROOT
    proc: str = "/proc"
    zones: list[tuple[int, str]] = field(default_factory=list)
    pid: str | None = None
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def from_settings(cls, target: Target, collector, trace_cfg: dict) -> TraceAnnotator | None:
        """An annotator for a collector that has a trace_marker, with the target file's ``[trace]`` settings."""
        marker = getattr(collector, "marker_path", None) if collector is not None else None
        if not marker:
            return None
        period = float(trace_cfg.get("thermal_sample_s", 1.0))
        snap = bool(trace_cfg.get("cgroup_snapshot", True))
        if period <= 0 and not snap:
            return None
        return cls(target, marker, thermal_period_s=period, cgroups=snap)

    def discover_zones(self) -> list[tuple[int, str]]:
        """(id, type) of every zone whose temp is readable."""
        root = quote(self.thermal_root)
        out = self.target.run(
            f'for z in {root}/thermal_zone*; do [ -r "$z/temp" ] && cat "$z/temp" >/dev/null 2>&1 '
            f'&& echo "${{z##*thermal_zone}} $(cat "$z/type" 2>/dev/null)"; done',
            30,
            as_root=True,
        ).stdout
        zones = []
        for line in out.splitlines():
            parts = line.split(None, 1)
            if parts and parts[0].isdigit():
                zones.append((int(parts[0]), parts[1].strip() if len(parts) > 1 else ""))
        return sorted(zones)

    def start(self) -> None:
        """Write the cgroup snapshot and launch the thermal loop, in one command."""
        if self.thermal_period_s > 0:
            self.zones = self.discover_zones()
            if not self.zones:
                self.warnings.append(f"no readable {self.thermal_root}/thermal_zone*/temp: no thermal samples")
        parts = []
        if self.cgroups:
            parts.append(cgroup_snapshot_script(self.marker, self.proc))
        if self.zones:
            loop = thermal_loop_script(self.marker, self.zones, self.thermal_period_s, self.thermal_root)
            parts.append(f"nohup sh -c {quote(loop)} >/dev/null 2>&1 </dev/null & echo ABTEST_PID $!")
        if not parts:
            return
        res = self.target.run("; ".join(parts), 120, as_root=True)
        pids = [ln.split()[1] for ln in res.stdout.splitlines() if ln.startswith("ABTEST_PID ")]
        self.pid = pids[-1] if pids else None
        if self.zones and not self.pid:
            self.warnings.append(f"thermal sampler did not start: {res.stderr.strip()[-200:]}")

    def stop(self) -> None:
        """Stop the thermal loop (its last readings are already in the trace)."""
        if self.pid:
            try:
                self.target.run(f"kill {int(self.pid)} 2>/dev/null", 30, as_root=True)
            except TargetError as e:
                self.warnings.append(f"thermal sampler: kill failed: {e}")
            self.pid = None

    def describe(self) -> dict:
        """For meta.json: what was written into the trace."""
        return {
            "cgroup_snapshot": self.cgroups,
            "thermal_sample_s": self.thermal_period_s if self.zones else None,
            "thermal_zones": {str(z): t for z, t in self.zones},
            "warnings": list(self.warnings),
        }
