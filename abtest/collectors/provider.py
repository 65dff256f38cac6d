"""Give the Target that runs a label's kernel: boot it through the target file's [boot.LABEL] entry (a command on
the target or on the host), wait for a new boot_id, check `uname -r` against expect_release; after a dropped
connection, wait until the target answers and activate the label again. (QEMU targets: targets.qemu.QemuProvider.)
"""

from __future__ import annotations

import fnmatch
import subprocess
import time
from collections.abc import Callable

from abtest.collectors.plan import CollectError, LabelSpec
from abtest.targets.base import Target, TargetError, TargetTimeout
from abtest.targets.config import BootEntry, TargetConfig, make_target


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
