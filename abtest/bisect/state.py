"""A bisection's state, kept in the run store so that a killed `abtest bisect run` resumes where it stopped.

    STORE/.bisect/state.json        configuration, the revision range, per-revision status, the log, the result
    STORE/.bisect/builds/<sha>/     what `--build` produced for a revision (`.complete` written last)
    STORE/bisect-<sha12>/<workload>/<iteration>/   the runs of each tested revision: an ordinary store label

The runs themselves are never in state.json: they are the store's iterations (written atomically by the
collector), read back on every step, so no completed measurement is lost to a kill. state.json is replaced
atomically (write to a temporary file, fsync, rename).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

STATE_DIR = ".bisect"
STATE_FILE = "state.json"
LABEL_PREFIX = "bisect-"
POSTERIOR = "posterior"
CLASSIC = "classic"
UNTESTED, TESTABLE, UNTESTABLE = "untested", "testable", "untestable"


class BisectError(RuntimeError):
    """A bisection cannot start or go on (bad range, no state, nothing to bisect); the message says why."""


class BisectAbort(BisectError):
    """The target is dead (it does not come back): stop, keep the state, `abtest bisect run` resumes."""


@dataclass
class Config:
    """What `abtest bisect start` was given. min_effect_pct: smallest change (percent) the decision rule calls a
    regression. confidence: posterior probability of the culprit block to stop at. max_iterations: run budget of
    the whole bisection (endpoints included). per_step_cap: runs per revision before it is given up ("skip").
    direction: "lower" / "higher" is better, or "" for the metric's declaration."""

    good: str
    bad: str
    repo: str
    build: str
    target: str
    workload: str
    metric: str
    min_effect_pct: float = 2.0
    confidence: float = 0.95
    max_iterations: int = 400
    per_step_cap: int = 40
    batch: int = 2
    mode: str = POSTERIOR
    direction: str = ""
    trace: bool = False
    build_timeout_s: float = 3600.0


@dataclass
class BisectState:
    """The whole bisection. revisions: full hashes, position 0 = good, last = bad (first-parent order).
    status: per revision UNTESTED / TESTABLE / UNTESTABLE; why: the reason a revision is untestable.
    log: events (dicts with "utc", "event" and details). result: set when the bisection has finished."""

    config: Config
    revisions: list[str]
    subjects: list[str]
    status: list[str] = field(default_factory=list)
    why: dict = field(default_factory=dict)
    lower_is_better: bool | None = None
    log: list[dict] = field(default_factory=list)
    result: dict | None = None

    def __post_init__(self) -> None:
        if not self.status:
            self.status = [UNTESTED] * len(self.revisions)

    @property
    def n(self) -> int:
        return len(self.revisions)

    def label(self, pos: int) -> str:
        return label_of(self.revisions[pos])

    def event(self, event: str, **details) -> dict:
        entry = {"utc": datetime.now(UTC).isoformat(timespec="seconds"), "event": event, **details}
        self.log.append(entry)
        return entry

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict) -> BisectState:
        doc = dict(doc)
        doc["config"] = Config(**doc["config"])
        return cls(**doc)


def label_of(sha: str) -> str:
    """The store label of a revision: bisect-<first 12 hex digits>."""
    return LABEL_PREFIX + sha[:12]


def state_dir(store: Path) -> Path:
    return Path(store) / STATE_DIR


def state_path(store: Path) -> Path:
    return state_dir(store) / STATE_FILE


def save(store: Path, st: BisectState) -> None:
    """Replace STORE/.bisect/state.json atomically."""
    d = state_dir(store)
    d.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".state-", dir=d)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(st.to_json(), f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, state_path(store))
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load(store: Path) -> BisectState:
    p = state_path(store)
    if not p.is_file():
        raise BisectError(f"no bisection in {store} (start one with `abtest bisect start`)")
    return BisectState.from_json(json.loads(p.read_text()))


def git(repo: str | Path, *args: str) -> str:
    """stdout of `git -C repo args...` (BisectError with git's message when it fails)."""
    r = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise BisectError(f"git {' '.join(args)} failed in {repo}: {r.stderr.strip()[-400:]}")
    return r.stdout


def revision_range(repo: str | Path, good: str, bad: str) -> tuple[list[str], list[str]]:
    """(hashes, subjects) from good to bad inclusive along bad's first-parent chain; good must be an ancestor."""
    g = git(repo, "rev-parse", "--verify", f"{good}^{{commit}}").strip()
    b = git(repo, "rev-parse", "--verify", f"{bad}^{{commit}}").strip()
    if g == b:
        raise BisectError(f"--good and --bad are the same commit {g[:12]}")
    if subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", g, b]).returncode != 0:
        raise BisectError(f"--good {good} ({g[:12]}) is not an ancestor of --bad {bad} ({b[:12]})")
    lines = git(repo, "log", "--first-parent", "--reverse", "--format=%H %s", f"{g}..{b}").splitlines()
    hashes = [g] + [ln.split(" ", 1)[0] for ln in lines]
    subjects = [git(repo, "log", "-1", "--format=%s", g).strip()] + [(ln.split(" ", 1) + [""])[1] for ln in lines]
    if hashes[-1] != b:
        raise BisectError(f"{good}..{bad}: the first-parent chain from {bad} does not reach {good}")
    return hashes, subjects
