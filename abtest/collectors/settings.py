"""Label settings: A/B on one kernel by changing knobs through the target.

    --label menu:cpuidle_governor=menu --label haltpoll:cpuidle_governor=haltpoll
    [labels.menu] settings = { cpuidle_governor = "menu" }          # in the target file

Keys: `cpuidle_governor`, `cpufreq_governor` (every policy), and `sysfs:<absolute path>` for any
sysfs/procfs/debugfs file (e.g. `sysfs:/proc/sys/kernel/sched_schedstats=1`). Every write is read
back and checked; the values found before the first change are restored by `restore`. The orchestrator
applies a label's settings at the start of each iteration and restores them at its end, both under the
target lock (abtest.collectors.host_state), so two collections on one target never run under each other's
settings; each original value goes to the host's state journal (`on_original`) before its file is written.
A `cpuidle_governor` on a target whose cpuidle driver is `none` (no idle states: the governor never runs)
is taken but reported in `SettingsManager.warnings`: labels that differ only by it compare one setting.
"""

from __future__ import annotations

from abtest.safe_io import UnsafePathError, check_name
from abtest.targets.base import Target, TargetError
from abtest.targets.shell import quote

CPUIDLE_GOVERNOR = "/sys/devices/system/cpu/cpuidle/current_governor"
CPUIDLE_DRIVER = "/sys/devices/system/cpu/cpuidle/current_driver"
CPUFREQ_GLOB = "/sys/devices/system/cpu/cpufreq/policy*/scaling_governor"


class SettingError(TargetError):
    """A setting is unknown, or the target did not take the value."""


def parse_label(spec: str) -> tuple[str, dict]:
    """`name:key=value,key=value` -> (name, {key: value})."""
    name, _, rest = spec.partition(":")
    settings = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq:
            raise SettingError(f"label {name!r}: setting {item!r} is not key=value")
        settings[key.strip()] = value.strip()
    if not name:
        raise SettingError(f"label spec {spec!r} has no name")
    try:  # the label is a directory of the run store
        check_name(name, "label")
    except UnsafePathError as e:
        raise SettingError(str(e)) from e
    return name, settings


def _paths(target: Target, key: str) -> list[str]:
    if key == "cpuidle_governor":
        return [CPUIDLE_GOVERNOR]
    if key == "cpufreq_governor":
        found = target.run(f"ls {CPUFREQ_GLOB} 2>/dev/null", 30).stdout.split()
        if not found:
            raise SettingError(f"{target.name}: cpufreq_governor set but the target has no cpufreq policies")
        return found
    if key.startswith("sysfs:") and key[6:].startswith("/"):
        return [key[6:]]
    raise SettingError(f"unknown setting {key!r} (known: cpuidle_governor, cpufreq_governor, sysfs:/path)")


class SettingsManager:
    """Applies label settings, remembering original values for `restore`.

    on_original(path, value): called with each file's original value before the file is first written
    (the state journal records it there).
    """

    def __init__(self, target: Target, on_original=None):
        self.target = target
        self.on_original = on_original
        self.original: dict[str, str] = {}
        self.changed: set[str] = set()  # files written since the last restore
        self.warnings: list[str] = []  # what the target cannot do with the settings, said once
        self._cpuidle_checked = False  # the cpuidle driver is looked at once per target, not per iteration

    def apply(self, settings: dict) -> dict:
        """Write each setting, verify it, return {path: value now}. Raises SettingError."""
        now = {}
        for key, value in settings.items():
            if key == "cpuidle_governor" and not self._cpuidle_checked:
                self._cpuidle_checked = True
                warning = cpuidle_governor_warning(self.target)
                if warning:
                    self.warnings.append(warning)
            for path in _paths(self.target, key):
                q = quote(path)
                if path not in self.original:
                    cur = self.target.run(["cat", path], 30, as_root=True)
                    if cur.exit_code != 0:
                        raise SettingError(f"{self.target.name}: cannot read {path}: {cur.stderr.strip()}")
                    self.original[path] = _current(cur.stdout)
                    if self.on_original is not None:
                        self.on_original(path, self.original[path])
                self.changed.add(path)
                res = self.target.run(f"echo {quote(str(value))} > {q} && cat {q}", 30, as_root=True)
                got = _current(res.stdout)
                if res.exit_code != 0 or got != str(value):
                    raise SettingError(
                        f"{self.target.name}: setting {key}={value} on {path} failed "
                        f"(now {got!r}; {res.stderr.strip()})"
                    )
                now[path] = got
        return now

    def restore(self) -> None:
        """Put back the original value of every file written since the last restore, in one round trip
        (each written, read back and checked). The originals are kept: the next `apply` does not read them
        again (between iterations the files hold them). Raises SettingError naming what did not go back."""
        paths = [p for p in self.original if p in self.changed]
        if not paths:
            return
        script = "\n".join(
            f'echo {quote(self.original[p])} > {quote(p)}; echo ABTEST_NOW {i} "$(cat {quote(p)})"'
            for i, p in enumerate(paths)
        )
        res = self.target.run(script, 30, as_root=True)
        now = {}
        for line in res.stdout.splitlines():
            if line.startswith("ABTEST_NOW "):
                idx, _, value = line[len("ABTEST_NOW ") :].partition(" ")
                if idx.isdigit() and int(idx) < len(paths):
                    now[paths[int(idx)]] = _current(value)
        bad = [f"{p} is {now.get(p)!r}, original {self.original[p]!r}" for p in paths if now.get(p) != self.original[p]]
        self.changed.clear()
        if bad:
            raise SettingError(f"{self.target.name}: restoring settings failed: " + "; ".join(bad))


def cpuidle_governor_warning(target: Target) -> str | None:
    """Why a cpuidle governor cannot act on `target` (its cpuidle driver is `none`, or it has no idle state
    on any CPU), or None when it can."""
    res = target.run(
        f"cat {CPUIDLE_DRIVER} 2>/dev/null; ls -d /sys/devices/system/cpu/cpu[0-9]*/cpuidle/state[0-9]* "
        "2>/dev/null | wc -l",
        30,
    )
    lines = res.stdout.split()
    driver = lines[0] if len(lines) == 2 else "unknown"
    states = int(lines[-1]) if lines and lines[-1].isdigit() else 0
    if driver == "none" or states == 0:
        return (
            f"{target.name}: cpuidle driver is {driver!r} and no CPU has an idle state: the cpuidle governor "
            f"never runs there, so labels that differ only by cpuidle_governor compare the same system"
        )
    return None


def _current(text: str) -> str:
    """Value of a sysfs file; for choice files like `[menu] ladder` the bracketed entry."""
    text = text.strip()
    if "[" in text and "]" in text:
        return text[text.index("[") + 1 : text.index("]")]
    return text
