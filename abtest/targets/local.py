"""LocalTarget: this machine, through /bin/sh and plain file copies."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from abtest.targets.base import RunResult, Target, TargetTimeout


@dataclass
class LocalTarget(Target):
    """Runs commands with `/bin/sh -c` on this machine."""

    name: str = "local"

    def _run(self, shell_cmd: str, timeout: float | None) -> RunResult:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            ["/bin/sh", "-c", shell_cmd],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: only what this command started
            proc.communicate()
            raise TargetTimeout(f"{self.name}: `{shell_cmd}` did not finish within {timeout} s") from None
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
        return RunResult(
            proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"), time.monotonic() - t0
        )

    def push(self, local: str | Path, remote: str) -> None:
        shutil.copyfile(local, remote)

    def pull(self, remote: str, local: str | Path) -> None:
        shutil.copyfile(remote, local)

    def is_up(self) -> bool:
        return True

    @property
    def is_local_machine(self) -> bool:
        return True
