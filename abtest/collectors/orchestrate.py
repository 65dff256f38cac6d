"""Fill a run store: labels (kernels or settings) x workloads x iterations on one target.

    plan = make_plan(labels, workloads, iterations, order="interleave")   # A B A B ... per iteration
    collect(CollectConfig(...))

For each planned iteration: activate the label (boot its kernel through the target file's boot
entry and verify `uname -r`), then under the target lock apply its settings, cool down, start ftrace
(+ power sampler), run the workload between trace markers, stop, put tracefs and the settings back, pull,
and write metrics.json + meta.json + .complete in a temp directory renamed into place. A dropped
connection / target reboot / failed workload discards the temp directory and retries (bounded); Ctrl-C
discards only the iteration in flight; `resume=True` skips iterations already complete.

Target state (abtest.collectors.host_state): a journal of the original values is written on the host
before the first change to a target, and removed when the collection ends having put them back; a run
that finds the journal of a dead run restores it first (`abtest collect --restore` does only that).
Scratch files on the target live in a private directory made by `mktemp -d` (removed at the end).
"""

from __future__ import annotations

import fnmatch
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from abtest.collectors.annotate import TraceAnnotator
from abtest.collectors.ftrace import FtraceCollector, requested_events, restore_script
from abtest.collectors.host_state import StateJournal, TargetLock, stale_journals, target_key
from abtest.collectors.meta import META_SCRIPT, collect_target_meta, host_tools, parse_meta_output
from abtest.collectors.power import PowerSampler, write_power_csv
from abtest.collectors.settings import SettingsManager
from abtest.collectors.workloads.base import Workload, WorkloadError
from abtest.collectors.workloads.base import metrics as workload_metrics
from abtest.safe_io import UnsafePathError, check_name
from abtest.store.writer import IterationWriter, discard_stale_temps, is_complete, iteration_dir
from abtest.targets.base import Target, TargetConnectionError, TargetError, TargetTimeout
from abtest.targets.config import BootEntry, TargetConfig, make_target
from abtest.targets.shell import (
    ShellNameError,
    check_clock,
    check_event,
    check_label,
    check_workload_name,
    quote,
    quote_glob,
)

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


def make_plan(
    labels: list[str], workloads: list[str], iterations: int, order: str = "interleave"
) -> list[PlannedIteration]:
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
        self.boots = 0  # reboots (and recoveries) so far: the orchestrator re-makes its scratch dir after one

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
            raise CollectError(
                f"label {label.name}: running kernel {rel} does not match "
                f"expect_release {boot.expect_release!r} and [boot.{label.name}] has no command"
            )
        old_boot_id = t.read_file("/proc/sys/kernel/random/boot_id").strip()
        self.log(f"booting {label.name} ({boot.host_command or boot.command})")
        if boot.host_command:
            subprocess.run(boot.host_command, shell=True, timeout=boot.timeout_s, check=True)
        else:
            t.reboot(boot.command)
        self.wait_rebooted(t, old_boot_id, boot.timeout_s)
        self.boots += 1
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
        self.boots += 1  # it may have rebooted on its own: scratch dir and state are looked at again
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
    remote_dir: str | None = None  # scratch dir on the target; None: a private one made with mktemp -d
    progress: bool = True
    state_dir: Path | None = None  # where the state journals live (None: host_state.state_dir())


def _workload_script(wl: Workload, marker: str | None, tag: str, remote_dir: str) -> str:
    """Workload command between trace markers, timed on the target (ns; /proc/uptime fallback)."""
    mark = (lambda text: f"echo {quote(text)} > {quote(marker)} 2>/dev/null") if marker else (lambda text: ":")
    return "\n".join(
        [
            f"cd {quote(remote_dir)} || exit 97",
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
        ]
    )


THERMAL_TEMPS = "/sys/class/thermal/thermal_zone*/temp"


def wait_cooldown(
    t: Target,
    *,
    fixed_s: float = 0.0,
    thermal_max_c: float | None = None,
    timeout_s: float = 300.0,
    temp_glob: str = THERMAL_TEMPS,
    poll_s: float = 2.0,
) -> dict:
    """Sleep fixed_s, then poll the target's thermal zones (milli-degC files matching temp_glob) until the
    hottest is at or below thermal_max_c, for at most timeout_s. Returns what happened, for meta.json:
    {"fixed_s", "thermal_max_c", "zones", "max_temp_c" (last reading), "reached", "waited_s"}."""
    out = {"fixed_s": fixed_s, "thermal_max_c": thermal_max_c, "waited_s": 0.0, "reached": True}
    t0 = time.monotonic()
    if fixed_s:
        time.sleep(fixed_s)
    if thermal_max_c is not None:
        while True:
            temps = [
                int(x) / 1000
                for x in t.run(f"cat {quote_glob(temp_glob)} 2>/dev/null", 30).stdout.split()
                if x.lstrip("-").isdigit()
            ]
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
        t,
        fixed_s=cc.cooldown_fixed_s if cc.cooldown_fixed_s is not None else float(c.get("fixed_s", 0)),
        thermal_max_c=cc.cooldown_thermal_max_c if cc.cooldown_thermal_max_c is not None else c.get("thermal_max_c"),
        timeout_s=cc.cooldown_timeout_s if cc.cooldown_timeout_s is not None else float(c.get("timeout_s", 300)),
        temp_glob=c.get("temp_glob", THERMAL_TEMPS),
    )


@dataclass
class TargetState:
    """What the orchestrator keeps per connected target across iterations.

    remote_dir: private scratch directory on the target. owner_uid: uid of the connection's login user.
    boot_id: the target's boot when remote_dir was made. lock: the target lock (this machine: the tracefs
    lock). journal: this run's state journal for the target (None for QEMU guests: their state dies with them).
    """

    target: Target
    is_local: bool
    collector: FtraceCollector | None  # or a PerfettoCollector ([trace] backend = "perfetto")
    settings: SettingsManager
    remote_dir: str = ""
    owner_uid: int | None = None
    boot_id: str = ""
    lock: TargetLock | None = None
    journal: StateJournal | None = None
    generation: int = 0
    made_remote_dir: bool = False
    prepared: set = field(default_factory=set)


_PROBE = "echo ABTEST_UID $(id -u); echo ABTEST_BOOT $(cat /proc/sys/kernel/random/boot_id)"
_MKTEMP = (
    'd=$(mktemp -d "${TMPDIR:-/tmp}/abtest.XXXXXXXXXX" 2>/dev/null || '
    'mktemp -d /data/local/tmp/abtest.XXXXXXXXXX) && chmod 700 "$d" && echo ABTEST_DIR "$d"'
)


def probe_target(t: Target, *, make_dir: bool) -> dict:
    """One round trip as the login user: its uid, the target's boot_id and (make_dir) a new private
    scratch directory (mktemp -d under $TMPDIR or /tmp, else /data/local/tmp)."""
    res = t.run(_PROBE + ("\n" + _MKTEMP if make_dir else ""), 30)
    out = {}
    for line in res.stdout.splitlines():
        key, _, value = line.partition(" ")
        if key in ("ABTEST_UID", "ABTEST_BOOT", "ABTEST_DIR") and value.strip():
            out[key[7:].lower()] = value.strip()
    if make_dir and "dir" not in out:
        raise TargetError(f"{t.name}: cannot make a private scratch directory (mktemp -d): {res.stderr.strip()[-300:]}")
    return out


def _target_desc(cc: CollectConfig, t: Target) -> dict:
    cfg = cc.target_cfg
    return {
        "name": t.name,
        "kind": cfg.kind,
        "file": str(cfg.path) if cfg.path else None,
        "connection": {k: v for k, v in cfg.connection.items() if k in ("host", "port", "user", "serial")},
    }


def make_state(
    t: Target, cc: CollectConfig, events: list[str], *, generation: int = 0, log: Callable[[str], None] = print
) -> TargetState:
    """Connect-time work for a target: probe it, restore what a dead run left (journal), open this run's
    journal, make the private scratch directory, build the collector."""
    cfg = cc.target_cfg
    info = probe_target(t, make_dir=False)
    here = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    is_local = cfg.kind == "local" or info.get("boot") == here
    key = target_key(cfg.kind, cfg.connection, is_local)
    lock = TargetLock.for_target(key)
    journal = None
    if cfg.kind != "qemu":
        restore_stale_state(t, key, info.get("boot", ""), lock, cc.state_dir, log)
        journal = StateJournal.open(key, _target_desc(cc, t), info.get("boot", ""), cc.state_dir)
    st = TargetState(
        t,
        is_local,
        None,
        SettingsManager(t, on_original=journal.record_setting if journal else None),
        owner_uid=int(info["uid"]) if info.get("uid", "").isdigit() else None,
        boot_id=info.get("boot", ""),
        lock=lock,
        journal=journal,
        generation=generation,
    )
    new_remote_dir(st, cc)
    trace_cfg = cfg.trace
    if cc.trace and trace_cfg.get("backend", "ftrace") == "perfetto":
        from abtest.collectors.perfetto_config import PerfettoCollector

        st.collector = PerfettoCollector(t, events, remote_dir=st.remote_dir)
    elif cc.trace:
        st.collector = FtraceCollector(
            t,
            events,
            buffer_size_kb=int(cc.buffer_size_kb or trace_cfg.get("buffer_size_kb", 8192)),
            clock=cc.trace_clock or trace_cfg.get("clock", "boot"),
            remote_dir=st.remote_dir,
            owner_uid=st.owner_uid,
        )
    return st


def new_remote_dir(st: TargetState, cc: CollectConfig) -> None:
    """Give the state a scratch dir: cc.remote_dir when set, else a new private one (journaled for cleanup)."""
    if cc.remote_dir:
        st.remote_dir, st.made_remote_dir = cc.remote_dir, False
    else:
        info = probe_target(st.target, make_dir=True)
        st.remote_dir, st.made_remote_dir = info["dir"], True
        st.boot_id = info.get("boot", st.boot_id)
        if st.journal:
            st.journal.record_remote_dir(st.remote_dir)
    if st.collector is not None:
        st.collector.remote_dir = st.remote_dir
    st.prepared.clear()


def after_reboot(st: TargetState, cc: CollectConfig, generation: int) -> None:
    """The target rebooted (or was recovered): its tracefs and sysfs state is the boot's, the scratch dir
    may be gone: new scratch dir, originals read again before the next change."""
    old_boot = st.boot_id
    st.generation = generation
    new_remote_dir(st, cc)
    if st.boot_id != old_boot:
        st.settings.original.clear()
        st.settings.changed.clear()
        if st.collector is not None and hasattr(st.collector, "original"):
            st.collector.original = None
        if st.journal:
            st.journal.doc.update(boot_id=st.boot_id, tracefs=None, settings={})
            st.journal.record_remote_dir(st.remote_dir)


def restore_from_journal(t: Target, doc: dict) -> list[str]:
    """Write a journal's originals back to the target (tracefs, then settings, each read back), remove the
    scratch directories it lists. Returns what could not be put back (empty: all restored)."""
    errors: list[str] = []
    tr = doc.get("tracefs")
    if tr and tr.get("path"):
        restore_sh = restore_script(tr)
        res = t.run(
            f"cd {quote(tr['path'])} || exit 90\n{restore_sh}\n"
            "echo ABTEST_ON $(cat tracing_on); echo ABTEST_CLOCK $(sed -e 's/.*\\[//' -e 's/\\].*//' trace_clock)",
            30,
            as_root=True,
        )
        got = dict(line.split(" ", 1) for line in res.stdout.splitlines() if line.startswith("ABTEST_") and " " in line)
        if res.exit_code == 90:
            errors.append(f"tracefs {tr['path']} not found")
        elif got.get("ABTEST_ON", "").strip() != str(tr.get("tracing_on")) or (
            tr.get("trace_clock") and got.get("ABTEST_CLOCK", "").strip() != tr["trace_clock"]
        ):
            errors.append(f"tracefs did not take its original values back (now {got})")
    for path, value in (doc.get("settings") or {}).items():
        res = t.run(f"echo {quote(value)} > {quote(path)}; cat {quote(path)}", 30, as_root=True)
        from abtest.collectors.settings import _current

        if _current(res.stdout) != value:
            errors.append(f"{path} is {_current(res.stdout)!r}, original {value!r}")
    dirs = [d for d in doc.get("remote_dirs", []) if re.fullmatch(r"/[\w./-]*/abtest\.[A-Za-z0-9]{10}", d)]
    if dirs:
        t.run("rm -rf " + " ".join(quote(d) for d in dirs), 60, as_root=True)
    return errors


def restore_stale_state(
    t: Target, key: str, boot_id: str, lock: TargetLock, directory: Path | None, log: Callable[[str], None] = print
) -> dict:
    """Restore every journal of `key` left by a run that died (under the target lock); drop those from an
    earlier boot of the target (a reboot reset that state). Raises CollectError when a value cannot be put
    back (the journal is kept for `abtest collect --restore`). Returns {"restored", "dropped", "live"}."""
    stale, live = stale_journals(key, directory)
    out = {"restored": 0, "dropped": 0, "live": len(live)}
    for doc in live:
        log(
            f"[yellow]note: a collection on {key} is running (host pid {doc.get('host_pid')}); "
            f"this one waits for its lock at each iteration[/]"
        )
    for i, j in enumerate(stale):
        if j.doc.get("boot_id") and boot_id and j.doc["boot_id"] != boot_id:
            log(f"state journal {j.path.name}: target rebooted since, nothing to restore (dropped)")
            j.drop()
            out["dropped"] += 1
            continue
        with lock:
            errors = restore_from_journal(t, j.doc)
        if errors:
            for rest in stale[i:]:
                rest.release()
            raise CollectError(
                f"{t.name}: a collection (host pid {j.doc.get('host_pid')}) died leaving "
                f"changed state; restoring it from {j.path} failed: {'; '.join(errors)}"
            )
        log(
            f"restored the state a dead collection (host pid {j.doc.get('host_pid')}) left on {t.name}: "
            f"{'tracefs ' if j.doc.get('tracefs') else ''}{', '.join(j.doc.get('settings') or {}) or ''}".rstrip()
        )
        j.drop()
        out["restored"] += 1
    return out


def restore_target(
    cfg: TargetConfig, *, state_directory: Path | None = None, log: Callable[[str], None] = print
) -> dict:
    """`abtest collect --restore`: connect to the target (no boot, no change) and restore what dead
    collections left on it. Returns {"restored", "dropped", "live"}."""
    t = make_target(cfg)
    try:
        info = probe_target(t, make_dir=False)
        here = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        key = target_key(cfg.kind, cfg.connection, cfg.kind == "local" or info.get("boot") == here)
        return restore_stale_state(t, key, info.get("boot", ""), TargetLock.for_target(key), state_directory, log)
    finally:
        t.close()


def run_iteration(
    st: TargetState,
    cc: CollectConfig,
    label: LabelSpec,
    wl: Workload,
    it: int,
    attempt: int,
    writer: IterationWriter,
    boot_meta: dict | None,
) -> None:
    """One iteration into writer.tmp; commits on success. Raises on any failure (caller retries).

    Under the target lock (this machine: the tracefs lock): apply the label's settings, cool down, start
    tracing, run the workload, stop, put tracefs and the settings back. Round trips to the target: settings
    (1-2 per file, when the label has settings) and their restore (1), tracefs snapshot (first iteration
    only), meta + ftrace start (1), workload between markers (1), ftrace stop + extract + tracefs restore (1),
    pull (SFTP/adb), plus the workload's own prepare (first time) and collect.
    """
    t, cfg = st.target, cc.target_cfg
    start_utc = datetime.now(UTC).isoformat()
    remote_dir = st.remote_dir
    if wl.name not in st.prepared:
        wl.prepare(t, remote_dir)
        st.prepared.add(wl.name)
    tag = f"label={label.name} workload={wl.name} iteration={it}"
    collector = st.collector
    session_meta: dict = {}
    sampler = None
    annotator = None
    phases = {}
    lock_t0 = time.monotonic()
    with st.lock:
        phases["lock_wait_s"] = time.monotonic() - lock_t0  # other collections / tests on this target
        try:
            a = time.monotonic()
            settings_now = st.settings.apply(label.settings) if label.settings else {}
            phases["settings_s"] = time.monotonic() - a
            cool = _cooldown(t, cc, cfg)
            t_work0 = time.monotonic()  # collection overhead is counted from here (cool-down excluded)
            a = time.monotonic()
            if collector is not None and getattr(collector, "original", False) is None:
                original = collector.snapshot()  # first change of tracefs in this run: journal it first
                if st.journal:
                    st.journal.record_tracefs(original)
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
                sampler = PowerSampler(
                    t,
                    kind,
                    period_s=float(cfg.power.get("period_s", 0.5)),
                    remote_dir=remote_dir,
                    sysfs=cfg.power.get("sysfs", "/sys"),
                )
                sampler.start()
            phases["start_s"] = time.monotonic() - a
            a = time.monotonic()
            script = _workload_script(wl, collector.marker_path if collector else None, tag, remote_dir)
            res = t.run(script, wl.timeout_s, as_root=True)
            phases["workload_call_s"] = time.monotonic() - a
            wl_stderr = "".join(ln for ln in res.stderr.splitlines(True) if not ln.startswith("ABTEST_WALL_NS "))
            (writer.tmp / "workload.log").write_text(
                f"$ {wl.command(remote_dir)}\n--- stdout ---\n{res.stdout}\n--- stderr ---\n{wl_stderr}\n"
                f"--- exit {res.exit_code} ---\n"
            )
            if res.exit_code != 0:
                raise WorkloadError(
                    f"{t.name}: workload {wl.name} exited {res.exit_code}: "
                    f"{(wl_stderr or res.stdout).strip()[-400:] or '(no output)'}"
                )
            wall = [ln.split() for ln in res.stderr.splitlines() if ln.startswith("ABTEST_WALL_NS ")]
            workload_s = (
                ((int(wall[-1][2]) - int(wall[-1][1])) / 1e9) if wall and len(wall[-1]) == 3 else res.duration_s
            )
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
            try:  # best effort here: the original error is the one to report; the journal keeps the originals
                st.settings.restore()
            except (TargetError, OSError, EOFError):
                pass
            raise
        a = time.monotonic()
        st.settings.restore()  # before the lock goes: the next holder finds the original values
        phases["settings_s"] += time.monotonic() - a
    metrics = wl.parse(res)
    metrics.update(wl.collect(t, writer.tmp, remote_dir))
    metrics.update(workload_metrics((wl.DURATION_METRIC, workload_s)))
    iteration_s = time.monotonic() - t_work0
    meta.update(
        {
            "label": label.name,
            "workload": wl.name,
            "iteration": it,
            "attempt": attempt,
            "target": {
                "name": cfg.name,
                "kind": cfg.kind,
                "file": str(cfg.path) if cfg.path else None,
                "emulated": cfg.kind == "qemu",
            },
            "boot": boot_meta,
            "settings": {
                "label": label.settings,
                "applied": settings_now,
                # values found before the change, put back after the iteration (state journal)
                "original": {p: st.settings.original.get(p) for p in settings_now},
                "workload": wl.describe(),
                "events_requested": collector.events if collector else [],
                "analyses": cc.analyses,
            },
            "trace": (
                {
                    **session_meta,
                    "tracefs_original": getattr(collector, "original", None),
                    **({"annotations": annotator.describe()} if annotator else {}),
                }
                if collector
                else session_meta
            ),
            "power": (
                {
                    "sampler": cfg.power.get("sampler"),
                    "period_s": cfg.power.get("period_s", 0.5),
                    "aligned": session_meta.get("trace_clock") == "boot",
                    "clock": "CLOCK_BOOTTIME",
                }
                if sampler
                else None
            ),
            "cooldown": cool,
            "tools": {**host_tools(), **{f"target:{k}": v for k, v in meta.pop("target_tools", {}).items()}},
            "timestamps": {"start_utc": start_utc, "end_utc": datetime.now(UTC).isoformat()},
            "timings": {
                "iteration_s": round(iteration_s, 4),
                "workload_s": round(workload_s, 4),
                "overhead_s": round(iteration_s - workload_s, 4),
                "cooldown_s": round(float(cool.get("waited_s", 0.0)), 4),
                **{k: round(v, 4) for k, v in phases.items()},
            },
            "platform": cfg.platform,
        }
    )
    if session_meta.get("lost_events"):
        meta.setdefault("warnings", []).append(f"{session_meta['lost_events']} trace events lost")
    writer.commit(metrics, meta)


# -- the loop -----------------------------------------------------------------------------------------
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


def collect(
    cc: CollectConfig, provider: TargetProvider | None = None, log: Callable[[str], None] | None = None
) -> dict:
    """Run the whole plan; return a summary {"done", "skipped", "retries", "iterations": [...]}.

    Raises CollectError when an iteration fails after its retries; KeyboardInterrupt propagates after
    cleaning up (completed iterations stay).
    """
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    console = Console(stderr=True)
    log = log or (lambda msg: console.print(msg, highlight=False))
    store = Path(cc.store)
    wl_by_name = {w.name: w for w in cc.workloads}
    if len(wl_by_name) != len(cc.workloads):
        raise CollectError("two workloads share a name; give one name=... to tell them apart")
    label_by_name = {l.name: l for l in cc.labels}
    check_shell_names(
        list(label_by_name),
        list(wl_by_name),
        [*cc.analysis_events, *cc.extra_events],
        cc.trace_clock or cc.target_cfg.trace.get("clock"),
    )
    plan = make_plan(list(label_by_name), list(wl_by_name), cc.iterations, cc.order)
    done_already = [p for p in plan if is_complete(iteration_dir(store, p.label, p.workload, p.iteration))]
    if done_already and not cc.resume:
        p = done_already[0]
        raise CollectError(
            f"{iteration_dir(store, p.label, p.workload, p.iteration)} is already complete "
            f"({len(done_already)} of {len(plan)} planned iterations are): pass --resume to "
            f"continue this collection, or choose another --store"
        )
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
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        disable=not cc.progress,
        transient=False,
    )
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
                        generation = getattr(provider, "boots", 0)
                        st = states.get(id(t))
                        if st is None:
                            st = states[id(t)] = make_state(t, cc, events, generation=generation, log=log)
                        elif st.generation != generation:
                            after_reboot(st, cc, generation)
                        said = len(st.settings.warnings)
                        boot_meta = vars(label.boot) if label.boot else None
                        writer = IterationWriter(store, step.label, step.workload, step.iteration)
                        try:
                            run_iteration(st, cc, label, wl, step.iteration, attempt, writer, boot_meta)
                        finally:
                            for w in st.settings.warnings[said:]:
                                log(f"[yellow]warning: {w}[/]")
                        summary["done"] += 1
                        summary["iterations"].append(str(writer.final))
                        break
                    except RETRYABLE as e:
                        if writer:
                            writer.discard()
                        if attempt > cc.retries:
                            raise CollectError(
                                f"{step.label}/{step.workload}/{step.iteration}: failed after {attempt} attempts: {e}"
                            ) from e
                        summary["retries"] += 1
                        log(
                            f"[yellow]retrying {step.label}/{step.workload}/{step.iteration} "
                            f"(attempt {attempt} failed: {e})[/]"
                        )
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
                with st.lock:
                    traced_back = st.collector.restore() if st.collector else True
                    st.settings.restore()
                if traced_back is False:
                    raise TargetError(f"{st.target.name}: putting tracefs back failed")
                if st.made_remote_dir:
                    st.target.run(["rm", "-rf", st.remote_dir], 60, as_root=True)
                if st.journal:
                    st.journal.close()  # everything is back: nothing for a later run to restore
            except (TargetError, OSError, EOFError) as e:
                log(f"[red]cleanup on {st.target.name} failed: {e}; `abtest collect --restore` retries it[/]")
        provider.close()
    return summary
