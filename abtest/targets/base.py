"""The Target protocol: what abtest needs from a machine it collects on.

A target runs commands (exit code, stdout, stderr, timeout), moves files both ways, reads and writes
files, reboots and waits until it is back, and can run things as root. Implementations:
`abtest.targets.local.LocalTarget` (this machine), `abtest.targets.ssh.SshTarget` (OpenSSH/dropbear via
paramiko) and `abtest.targets.adb.AdbTarget` (stock `adb` client).

Commands are given either as an argv list (each element quoted with abtest.targets.shell.quote before it reaches a
remote shell: no injection) or as a string, which is passed to the target's shell unchanged (use
that only for shell syntax you wrote yourself: pipes, redirections, loops).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from abtest.targets.shell import quote

Command = str | Sequence[str]


class TargetError(RuntimeError):
    """A target operation failed (the message says which target and what)."""


class TargetConnectionError(TargetError):
    """The connection to the target dropped or could not be made (retrying may help)."""


class TargetCommandError(TargetError):
    """A command exited non-zero when success was required (`check=True`)."""

    def __init__(self, target: str, cmd: str, result: RunResult):
        self.result = result
        tail = (result.stderr or result.stdout).strip()[-800:]
        super().__init__(f"{target}: `{cmd}` exited {result.exit_code}: {tail}")


class TargetTimeout(TargetError):
    """A command did not finish within its timeout (seconds)."""


@dataclass
class RunResult:
    """Outcome of one command: exit_code (int), stdout/stderr (str, utf-8 with replacement),
    duration_s (float, wall-clock seconds measured on the host)."""

    exit_code: int
    stdout: str
    stderr: str
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def to_shell(cmd: Command) -> str:
    """An argv list -> one shell-quoted string; a string is returned unchanged."""
    if isinstance(cmd, str):
        return cmd
    return " ".join(quote(str(a)) for a in cmd)


@dataclass
class Target:
    """Base class: implementations override `_run`, `push`, `pull`, `_reboot_command`, `is_up`.

    Attributes:
        name: label used in messages and meta.json.
        platform: the target file's [platform] table (dict) or None.
        root_wrap: how a shell command is made to run as root: '' (already root), 'sudo -n' or
            'su -c'; None until `ensure_root` has found out.
    """

    name: str = "target"
    platform: dict | None = None
    root_wrap: str | None = field(default=None, repr=False)

    # -- to implement --------------------------------------------------------------------------
    def _run(self, shell_cmd: str, timeout: float | None) -> RunResult:  # pragma: no cover
        raise NotImplementedError

    def push(self, local: str | Path, remote: str) -> None:  # pragma: no cover
        """Copy the host file `local` to `remote` on the target."""
        raise NotImplementedError

    def pull(self, remote: str, local: str | Path) -> None:  # pragma: no cover
        """Copy the target file `remote` to `local` on the host."""
        raise NotImplementedError

    def is_up(self) -> bool:  # pragma: no cover
        """True when the target answers a trivial command now."""
        raise NotImplementedError

    def reconnect(self) -> None:
        """Drop and re-open the connection (no-op for local)."""

    def close(self) -> None:
        """Release the connection."""

    @property
    def is_local_machine(self) -> bool:
        """True when commands run on this very machine (same kernel boot_id): tracefs is shared."""
        try:
            here = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
            there = self.run(["cat", "/proc/sys/kernel/random/boot_id"], timeout=30).stdout.strip()
        except (OSError, TargetError):
            return False
        return here == there

    # -- provided ------------------------------------------------------------------------------
    def run(self, cmd: Command, timeout: float | None = 60, *, as_root: bool = False, check: bool = False) -> RunResult:
        """Run `cmd` on the target; return its RunResult.

        Args:
            cmd: argv list (quoted for the shell) or a shell string (passed unchanged).
            timeout: seconds before TargetTimeout is raised (None: wait forever).
            as_root: run through the root wrapper found by `ensure_root`.
            check: raise TargetCommandError on a non-zero exit code.
        """
        shell_cmd = to_shell(cmd)
        if as_root:
            shell_cmd = self.wrap_root(shell_cmd)
        res = self._run(shell_cmd, timeout)
        if check and res.exit_code != 0:
            raise TargetCommandError(self.name, shell_cmd, res)
        return res

    def wrap_root(self, shell_cmd: str) -> str:
        """`shell_cmd` rewritten to run as root on this target."""
        if self.root_wrap is None:
            self.ensure_root()
        if not self.root_wrap:
            return shell_cmd
        if self.root_wrap == "su -c":
            return "su -c " + quote(shell_cmd)
        return f"{self.root_wrap} sh -c {quote(shell_cmd)}"

    def ensure_root(self) -> str:
        """Find how to be root: already root -> '', passwordless sudo -> 'sudo -n', su -> 'su -c'.

        Raises TargetError when none works.
        """
        if self._run("id -u", 30).stdout.strip() == "0":
            self.root_wrap = ""
        elif self._run("sudo -n id -u", 30).stdout.strip() == "0":
            self.root_wrap = "sudo -n"
        elif self._run("su -c 'id -u'", 30).stdout.strip() == "0":
            self.root_wrap = "su -c"
        else:
            raise TargetError(f"{self.name}: cannot become root (not root, no passwordless sudo, no su)")
        return self.root_wrap

    def read_file(self, path: str, *, as_root: bool = False, timeout: float = 60) -> str:
        """Text content of the target file `path` (TargetCommandError if unreadable)."""
        return self.run(["cat", path], timeout, as_root=as_root, check=True).stdout

    def write_file(self, path: str, content: str, *, as_root: bool = False, timeout: float = 60) -> None:
        """Write `content` to the target file `path` (printf through the shell; fine for sysfs/tracefs
        values and small files; use push for large ones)."""
        cmd = f"printf %s {quote(content)} > {quote(path)}"
        self.run(cmd, timeout, as_root=as_root, check=True)

    def exists(self, path: str) -> bool:
        return self.run(["test", "-e", path], 30).exit_code == 0

    def uname_r(self) -> str:
        """Kernel release of the running target kernel (`uname -r`)."""
        return self.run(["uname", "-r"], 30, check=True).stdout.strip()

    def tracefs_path(self) -> str:
        """Where tracefs is: /sys/kernel/tracing, else /sys/kernel/debug/tracing (mounting if needed).

        Raises TargetError when neither can be found or mounted.
        """
        script = (
            "for d in /sys/kernel/tracing /sys/kernel/debug/tracing; do "
            "[ -e $d/trace_marker ] && { echo $d; exit 0; }; done; "
            "mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null && "
            "[ -e /sys/kernel/tracing/trace_marker ] && { echo /sys/kernel/tracing; exit 0; }; "
            "mount -t debugfs nodev /sys/kernel/debug 2>/dev/null; "
            "[ -e /sys/kernel/debug/tracing/trace_marker ] && { echo /sys/kernel/debug/tracing; exit 0; }; "
            "exit 1"
        )
        res = self.run(script, 30, as_root=True)
        if res.exit_code != 0 or not res.stdout.strip():
            raise TargetError(
                f"{self.name}: no tracefs at /sys/kernel/tracing or /sys/kernel/debug/tracing "
                f"and mounting failed ({res.stderr.strip()})"
            )
        return res.stdout.strip().splitlines()[-1]

    def reboot(self, command: str | None = None) -> None:
        """Reboot the target (or run `command` on it, e.g. a kexec or `reboot <entry>` line) without
        waiting; the connection is expected to drop."""
        cmd_sh = command or "reboot"  # shell text by contract (the target file's reboot line)
        try:
            self.run(f"({cmd_sh}) >/dev/null 2>&1 &", 30, as_root=True)
        except TargetError:
            pass  # the connection dropping under us is the expected outcome

    def wait_until_back(self, timeout: float = 300, poll_s: float = 2.0, *, gone_first: bool = False) -> float:
        """Wait until the target answers again; return the seconds waited.

        Args:
            timeout: give up after this many seconds (TargetTimeout).
            poll_s: seconds between attempts.
            gone_first: first wait until the target stops answering (after a reboot command).
        """
        t0 = time.monotonic()
        if gone_first:
            while time.monotonic() - t0 < timeout and self._probe():
                time.sleep(poll_s)
        while time.monotonic() - t0 < timeout:
            if self._probe():
                return time.monotonic() - t0
            time.sleep(poll_s)
        raise TargetTimeout(f"{self.name}: not back after {timeout:.0f} s")

    def _probe(self) -> bool:
        try:
            self.reconnect()
            return self.is_up()
        except (TargetError, OSError):
            return False
