"""Boot a revision's build on the target: the collector's provider for `abtest bisect`.

Per target kind (the target file's optional [bisect] table):
- qemu: the build directory's `bzImage` (or `vmlinuz`) is booted, else the kernel of [bisect] package (a Debian
  package glob, as [boot.*] package; default: the first [boot.*] entry's), with the build directory's `cmdline`
  file appended to the kernel command line (after [qemu] append). A guest that does not boot is a boot failure.
  Up to two guests stay up (the endpoints interleave without reboots).
- ssh / adb / local: [bisect] install = "host command" runs on this machine with ABTEST_REV, ABTEST_OUT (the build
  directory) and ABTEST_TARGET in its environment (copy the kernel, flash it, write a knob ...); with
  [bisect] reboot = true the target must come back with a new boot_id within [bisect] timeout_s (default 300).
  A failing hook is a boot failure (the revision is skipped); a target that does not come back is dead
  ([bisect] recover_timeout_s, default 60: how long a target that stopped answering is waited for).
BootFailed: skip this revision. TargetDead: abort the bisection (its state is kept).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from abtest.collectors.orchestrate import TargetProvider
from abtest.targets.base import Target, TargetError, TargetTimeout
from abtest.targets.config import TargetConfig, make_target


class BootFailed(RuntimeError):
    """The revision's build did not boot / install (skip the revision)."""


class TargetDead(RuntimeError):
    """The target does not answer any more (abort the bisection, keep the state)."""


class RevisionProvider:
    """Gives the collector a target running a revision's build. `builds`: label -> build directory (set by the
    caller before collecting that label). close() is a no-op (the collector calls it after every batch);
    shutdown() stops what this provider started."""

    def __init__(self, cfg: TargetConfig, log: Callable[[str], None] = print):
        self.cfg, self.log = cfg, log
        self.opts = dict(cfg.raw.get("bisect") or {})
        self.builds: dict[str, Path] = {}
        self.boots = 0
        self.current: str | None = None
        self._target: Target | None = None
        self._vms: dict = {}  # qemu: label -> (QemuVM, SshTarget), oldest first

    # -- the collector's provider interface
    def activate(self, label) -> Target:
        if self.cfg.kind == "qemu":
            return self._qemu(label.name)
        if self._target is None:
            self._target = make_target(self.cfg)
        if self.current != label.name:
            self._install(label.name)
            self.current = label.name
        return self._target

    def recover(self, label, timeout_s: float | None = None) -> Target:
        if self.cfg.kind == "qemu":
            self._drop(label.name)
            return self._qemu(label.name)
        try:
            self._target.wait_until_back(
                float(self.opts.get("recover_timeout_s", 60) if timeout_s is None else timeout_s)
            )
        except TargetError as e:
            raise TargetDead(f"{self.cfg.name} does not answer: {e}") from e
        return self._target

    def close(self) -> None:
        """Kept running between batches (see shutdown)."""

    def shutdown(self) -> None:
        for label in list(self._vms):
            self._drop(label)
        if self._target is not None:
            self._target.close()
            self._target = None
        self.current = None

    # -- ssh / adb / local
    def _install(self, label: str) -> None:
        hook = self.opts.get("install", "")
        if not hook:
            return
        build = self.builds[label]
        env = {**os.environ, "ABTEST_REV": build.name, "ABTEST_OUT": str(build), "ABTEST_TARGET": self.cfg.name}
        t = self._target
        old_boot = t.read_file("/proc/sys/kernel/random/boot_id").strip() if self.opts.get("reboot") else ""
        self.log(f"installing {label} ({hook})")
        try:
            r = subprocess.run(
                hook,
                shell=True,
                env=env,
                capture_output=True,
                text=True,
                timeout=float(self.opts.get("install_timeout_s", 1800)),
            )
        except subprocess.TimeoutExpired as e:
            raise BootFailed(f"{label}: install hook timed out") from e
        if r.returncode != 0:
            raise BootFailed(f"{label}: install hook exited {r.returncode}: {(r.stderr or r.stdout).strip()[-300:]}")
        if self.opts.get("reboot"):
            try:
                TargetProvider.wait_rebooted(t, old_boot, float(self.opts.get("timeout_s", 300)))
            except TargetTimeout as e:
                raise TargetDead(str(e)) from e
            self.boots += 1

    # -- qemu
    def _qemu(self, label: str) -> Target:
        from abtest.targets.qemu import KernelImage, QemuVM, build_initramfs, fetch_kernel

        if label in self._vms:
            vm, t = self._vms[label]
            if vm.alive():
                return t
            self._drop(label)
        build = self.builds[label]
        image = next((build / n for n in ("bzImage", "vmlinuz") if (build / n).is_file()), None)
        q = self.cfg.qemu
        try:
            base = fetch_kernel(self._package(), log=self.log)
        except TargetError as e:
            raise TargetDead(f"no kernel to boot: {e}") from e
        kernel = KernelImage(base.package, base.release, image, base.modules) if image else base
        cmdline = (build / "cmdline").read_text().strip() if (build / "cmdline").is_file() else ""
        initrd = build_initramfs(kernel, tuple(q.get("extra_binaries", ())))
        while len(self._vms) >= 2:
            self._drop(next(iter(self._vms)))
        vm = QemuVM(
            kernel,
            initrd,
            memory_mb=int(q.get("memory_mb", 512)),
            smp=int(q.get("smp", 2)),
            append=f"{q.get('append', '')} {cmdline}".strip(),
        )
        self.log(f"booting {label} under QEMU ({cmdline or 'default command line'})")
        try:
            vm.start(timeout_s=float(q.get("boot_timeout_s", 120)))
        except TargetError as e:
            vm.stop()
            raise BootFailed(f"{label}: guest did not boot: {str(e)[:300]}") from e
        self.boots += 1
        self.log(f"{label}: {kernel.release} up in {vm.boot_s:.1f} s")
        t = vm.target(f"{self.cfg.name}:{label}")
        t.platform = self.cfg.platform
        self._vms[label] = (vm, t)
        return t

    def _package(self) -> str:
        pkg = self.opts.get("package") or next((b.package for b in self.cfg.boot.values() if b.package), "")
        if not pkg:
            raise TargetDead(
                f'{self.cfg.name}: a qemu target needs [bisect] package = "linux-image-..." '
                "(or a [boot.*] package) when the build leaves no bzImage"
            )
        return pkg

    def _drop(self, label: str) -> None:
        vm, t = self._vms.pop(label, (None, None))
        if t is not None:
            t.close()
        if vm is not None:
            vm.stop()
