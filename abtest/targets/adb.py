"""AdbTarget: an Android device through the stock `adb` client (Debian package adb).

Serial selection (`serial`, e.g. "1A2B3C" or "192.168.1.5:5555"; network serials are `adb connect`ed
first), a private adb server port (`server_port`: every call gets `-P PORT`, so a test never touches
another adb server), root through `adb root` when the build allows it with a fallback to `su -c`, and
tracefs discovery (/sys/kernel/tracing vs /sys/kernel/debug/tracing, from the base class).
Exit codes arrive through adb's shell v2 protocol (adb >= 1.0.36 on both ends).
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from abtest.targets.base import RunResult, Target, TargetConnectionError, TargetError, TargetTimeout

# what the adb client prints when the transport (not the command) failed
_ADB_TRANSPORT_ERROR = re.compile(
    r"^(adb: )?error: (device .*not found|no devices|closed|device offline|device unauthorized|protocol fault"
    r"|more than one device|failed to)"
)


@dataclass
class AdbTarget(Target):
    """A device driven by the stock adb client.

    Attributes:
        serial: device serial (`adb devices`), or HOST:PORT for adb over TCP.
        server_port: adb server port for this target (None: adb's default 5037).
        adb: path of the adb binary.
    """

    name: str = "adb"
    serial: str | None = None
    server_port: int | None = None
    adb: str = "adb"

    def _adb_argv(self, *args: str) -> list[str]:
        argv = [self.adb]
        if self.server_port:
            argv += ["-P", str(self.server_port)]
        if self.serial:
            argv += ["-s", self.serial]
        return argv + list(args)

    def adb_call(self, *args: str, timeout: float | None = 60) -> RunResult:
        """Run `adb [-P port] [-s serial] ARGS...` on the host."""
        t0 = time.monotonic()
        try:
            p = subprocess.run(self._adb_argv(*args), capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise TargetTimeout(f"{self.name}: adb {' '.join(args)[:200]} did not finish within {timeout} s") from None
        return RunResult(
            p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace"), time.monotonic() - t0
        )

    def connect(self) -> None:
        """`adb connect` a network serial (HOST:PORT); no-op for USB serials."""
        if self.serial and ":" in self.serial:
            argv = [self.adb] + (["-P", str(self.server_port)] if self.server_port else []) + ["connect", self.serial]
            p = subprocess.run(argv, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
            out = p.stdout.decode(errors="replace")
            if "connected to" not in out:
                raise TargetConnectionError(
                    f"{self.name}: adb connect {self.serial} failed: {out.strip()} "
                    f"{p.stderr.decode(errors='replace').strip()}"
                )

    def reconnect(self) -> None:
        self.connect()

    def _run(self, shell_cmd: str, timeout: float | None) -> RunResult:
        res = self.adb_call("shell", shell_cmd, timeout=timeout)
        if res.exit_code != 0 and _ADB_TRANSPORT_ERROR.match(res.stderr):
            raise TargetConnectionError(f"{self.name}: adb shell failed: {res.stderr.strip()}")
        return res

    def ensure_root(self) -> str:
        """Root via `adb root` (userdebug/eng builds), else `su -c` (rooted user builds)."""
        if self._run("id -u", 30).stdout.strip() == "0":
            self.root_wrap = ""
            return ""
        res = self.adb_call("root", timeout=30)
        if res.exit_code == 0 and "cannot run as root" not in res.stdout + res.stderr:
            self.adb_call("wait-for-device", timeout=60)
            self.connect()
            if self._run("id -u", 30).stdout.strip() == "0":
                self.root_wrap = ""
                return ""
        if self._run("su -c 'id -u'", 30).stdout.strip() == "0":
            self.root_wrap = "su -c"
            return self.root_wrap
        raise TargetError(f"{self.name}: cannot become root (`adb root` refused and no working su)")

    def push(self, local: str | Path, remote: str) -> None:
        res = self.adb_call("push", str(local), remote, timeout=600)
        if res.exit_code != 0:
            raise TargetError(f"{self.name}: adb push {local} {remote} failed: {(res.stderr or res.stdout).strip()}")

    def pull(self, remote: str, local: str | Path) -> None:
        res = self.adb_call("pull", remote, str(local), timeout=600)
        if res.exit_code != 0:
            text = (res.stderr or res.stdout).strip()
            if "No such file" in text or "does not exist" in text:
                raise FileNotFoundError(f"{self.name}: {remote}: {text}")
            raise TargetError(f"{self.name}: adb pull {remote} {local} failed: {text}")

    def is_up(self) -> bool:
        res = self.adb_call("get-state", timeout=15)
        return res.exit_code == 0 and res.stdout.strip() == "device"

    def reboot(self, command: str | None = None) -> None:
        """`adb reboot`, or `command` run on the device in the background (e.g. `reboot bootloader`).
        Host-side steps (fastboot boot IMG) belong in the boot entry's host_command."""
        if command:
            super().reboot(command)
        else:
            self.adb_call("reboot", timeout=60)

    def wait_until_back(self, timeout: float = 300, poll_s: float = 2.0, *, gone_first: bool = False) -> float:
        """Wait for the device and for sys.boot_completed=1; seconds waited."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            try:
                self.connect()
            except TargetConnectionError:
                time.sleep(poll_s)
                continue
            if self.is_up() and self._run("getprop sys.boot_completed 2>/dev/null || echo 1", 15).stdout.strip() in (
                "1",
                "",
            ):
                self.root_wrap = None
                return time.monotonic() - t0
            time.sleep(poll_s)
        raise TargetTimeout(f"{self.name}: device {self.serial} not back after {timeout:.0f} s")
