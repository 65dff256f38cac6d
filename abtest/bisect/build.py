"""Build a revision with the user's `--build` command, cached per revision in STORE/.bisect/builds/<sha>/.

The command line is split like a shell would (no shell runs it) and called with two more arguments, the
revision's full hash and the output directory, in the repository, with the same two in the environment
(ABTEST_REV, ABTEST_OUT; ABTEST_REPO is the repository). What it leaves in the output directory is what the
target boots (see abtest.bisect.boot): e.g. `bzImage` and/or `cmdline` for QEMU, anything the target file's
install hook uses for ssh/adb/local. A non-zero exit or a timeout is a build failure: the revision is skipped.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

from abtest.bisect.state import Config, state_dir

BUILD_LOG = "build.log"
COMPLETE = ".complete"


class BuildFailed(RuntimeError):
    """The build command failed for a revision (the message has the exit code and the log's tail)."""


def build_dir(store: Path, sha: str) -> Path:
    return state_dir(store) / "builds" / sha


def build(cfg: Config, store: Path, sha: str) -> Path:
    """The output directory of `sha`'s build, building it when no complete build is cached. Raises BuildFailed."""
    out = build_dir(store, sha)
    if (out / COMPLETE).is_file():
        return out
    for stale in out.parent.glob(f".tmp-{sha}-*"):  # a build cut short by a killed bisection
        shutil.rmtree(stale, ignore_errors=True)
    tmp = out.with_name(f".tmp-{sha}-{os.getpid()}")
    tmp.mkdir(parents=True)
    argv = shlex.split(cfg.build) + [sha, str(tmp)]
    env = {**os.environ, "ABTEST_REV": sha, "ABTEST_OUT": str(tmp), "ABTEST_REPO": str(cfg.repo)}
    try:
        r = subprocess.run(
            argv,
            cwd=cfg.repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=cfg.build_timeout_s,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise BuildFailed(f"build of {sha[:12]} did not finish within {cfg.build_timeout_s:.0f} s") from e
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise BuildFailed(f"build command {argv[0]!r} cannot run: {e}") from e
    log = f"$ {shlex.join(argv)}\n--- stdout ---\n{r.stdout}\n--- stderr ---\n{r.stderr}\n--- exit {r.returncode} ---\n"
    (tmp / BUILD_LOG).write_text(log)
    if r.returncode != 0:
        failed = out.with_name(f"{sha}.failed.log")
        failed.write_text(log)
        shutil.rmtree(tmp, ignore_errors=True)
        raise BuildFailed(f"build of {sha[:12]} exited {r.returncode}: {(r.stderr or r.stdout).strip()[-300:]}")
    (tmp / COMPLETE).touch()
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    return out
