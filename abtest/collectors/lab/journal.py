"""STORE/.lab/journal.json: every job a lab collection submitted, so `--resume` can continue it.

    {"version": 1, "lab": {url, device_type, ...}, "attempts": [
        {"label", "workload", "iteration", "attempt", "key", "job_id", "state", "reason", "submitted_utc"}]}

state: submitted (in the lab; --resume polls it again instead of resubmitting), harvested (its iteration
is complete in the store), failed (reason says why; counted against the retries), canceled (abtest
canceled it when interrupted; not counted), lost (a --resume found the lab no longer knows the job, e.g.
a lava-run job of an abtest process that died; not counted). The file is rewritten atomically (temp file + rename) after
every change, through abtest.safe_io's no-follow helpers: STORE/.lab is a 0700 directory of ours (a `.lab`
symlink is refused) and journal.json is written 0600 via a private temp name (a planted symlink is replaced,
never written through). The store's readers skip dot-directories, so .lab/ (journal, upload staging, lava-run job
directories) never mixes into compare.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from abtest.safe_io import ensure_private_dir, write_file_no_follow

LAB_DIR = ".lab"
JOURNAL = "journal.json"


def lab_dir(store: Path, *sub: str) -> Path:
    """STORE/.lab (and `sub` directories below it), each made 0700 without following symlinks
    (abtest.safe_io.ensure_private_dir; UnsafePathError on a planted symlink). The store itself is made
    when missing and may be a symlink the user chose."""
    root = Path(store)
    root.mkdir(parents=True, exist_ok=True)
    d = ensure_private_dir(root.resolve(), LAB_DIR)
    for name in sub:
        d = ensure_private_dir(d, name)
    return d


@dataclass
class Attempt:
    label: str
    workload: str
    iteration: int
    attempt: int
    key: str
    job_id: int | None = None
    state: str = "submitted"
    reason: str | None = None
    submitted_utc: str = field(default_factory=lambda: datetime.now(UTC).isoformat())

    @property
    def slot(self) -> tuple[str, str, int]:
        return (self.label, self.workload, self.iteration)


class Journal:
    """Attempts of one store's lab collection. `path` is STORE/.lab/journal.json."""

    def __init__(self, store: Path):
        self.dir = Path(store) / LAB_DIR
        self.path = self.dir / JOURNAL
        self.lab: dict = {}
        self.attempts: list[Attempt] = []

    @property
    def exists(self) -> bool:
        return self.path.is_file()

    def load(self) -> Journal:
        doc = json.loads(self.path.read_text())
        self.lab = doc.get("lab", {})
        self.attempts = [Attempt(**a) for a in doc.get("attempts", [])]
        return self

    def save(self) -> None:
        lab_dir(self.dir.parent)
        write_file_no_follow(
            self.dir,
            JOURNAL,
            json.dumps({"version": 1, "lab": self.lab, "attempts": [asdict(a) for a in self.attempts]}, indent=1)
            + "\n",
            mode=0o600,
        )

    def add(self, a: Attempt) -> Attempt:
        self.attempts.append(a)
        self.save()
        return a

    def update(self, a: Attempt, **changes) -> None:
        for k, v in changes.items():
            setattr(a, k, v)
        self.save()

    def for_slot(self, slot: tuple[str, str, int]) -> list[Attempt]:
        return [a for a in self.attempts if a.slot == slot]

    def failures(self, slot: tuple[str, str, int]) -> list[Attempt]:
        return [a for a in self.for_slot(slot) if a.state == "failed"]

    def pending(self) -> list[Attempt]:
        return [a for a in self.attempts if a.state == "submitted" and a.job_id is not None]
