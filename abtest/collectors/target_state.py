"""What a collection keeps per connected target, and how it leaves the target as it found it.

A probe (one round trip) gives the login uid and the target's boot_id; a private scratch directory is made with
`mktemp -d` (made again after a reboot). The state journal (abtest.collectors.host_state) records on the host the
original tracefs values, label settings and scratch directories before the first change; a run that finds the
journal of a dead run restores it first, and `abtest collect --restore` (restore_target) does only that.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from abtest.collectors.ftrace import FtraceCollector, restore_script
from abtest.collectors.host_state import StateJournal, TargetLock, stale_journals, target_key
from abtest.collectors.plan import CollectConfig, CollectError
from abtest.collectors.settings import SettingsManager, _current
from abtest.targets.base import Target, TargetError
from abtest.targets.config import TargetConfig, make_target
from abtest.targets.shell import quote


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


def _identity(cfg: TargetConfig, info: dict) -> tuple[bool, str]:
    """(the target is this machine: kind local, or the probe's boot_id is ours; its key for locks and journals)."""
    is_local = cfg.kind == "local" or info.get("boot") == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return is_local, target_key(cfg.kind, cfg.connection, is_local)


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
    is_local, key = _identity(cfg, info)
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
    if cc.trace and cfg.trace.get("backend", "ftrace") == "perfetto":
        from abtest.collectors.perfetto_config import PerfettoCollector

        st.collector = PerfettoCollector(t, events, remote_dir=st.remote_dir)
    elif cc.trace:
        st.collector = FtraceCollector(
            t,
            events,
            buffer_size_kb=cc.buffer_kb,
            clock=cc.clock,
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
        key = _identity(cfg, info)[1]
        return restore_stale_state(t, key, info.get("boot", ""), TargetLock.for_target(key), state_directory, log)
    finally:
        t.close()
