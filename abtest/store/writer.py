"""Writes one iteration of the run store atomically.

    STORE/<label>/<workload>/<iteration>/{trace.dat, power.csv, metrics.json, meta.json, .complete}

Files are written into a hidden temp directory next to the final one (`.tmp-<iteration>-<pid>`, same
filesystem, so the final rename is atomic and readers skip dot-directories); `.complete` is written
last, then the directory is renamed into place. An interrupted iteration leaves only a temp directory,
which `discard_stale_temps` removes on the next run.

Safety (abtest.safe_io): label and workload names are single plain path components (`check_name`); the
label/workload directories must resolve inside the store (a symlink leading out is refused); the temp
directory is created private (0700) and opened to the umask's mode only when complete; JSON files and
`.complete` are written without following symlinks; the trace file stays owner-only (0600: it holds
kernel symbol addresses).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from abtest.safe_io import UnsafePathError, check_name, confined, make_private_dir, write_file_no_follow
from abtest.store.layout import COMPLETE_MARKER as COMPLETE
from abtest.store.layout import STORE_ENV, default_store_root, is_complete, iteration_dir  # noqa: F401 (re-exported)
from abtest.store.model import Metric


def default_store() -> Path:
    """--store default: $ABTEST_STORE, else ./results."""
    return default_store_root()


class IterationWriter:
    """Context for one iteration: `tmp` is where files go; `commit()` finalises, `discard()` drops."""

    def __init__(self, store: Path, label: str, workload: str, iteration: int):
        self.store = Path(store)
        check_name(label, "label")  # one directory level each: no separator, no `..`, no leading dot
        check_name(workload, "workload name")
        self.final = iteration_dir(store, label, workload, int(iteration))
        if is_complete(self.final):
            raise FileExistsError(f"{self.final} is already complete")
        self.store.mkdir(parents=True, exist_ok=True)
        self.final.parent.mkdir(parents=True, exist_ok=True)
        confined(self.final.parent, self.store)  # label/workload dirs must not lead out of the store
        name = f".tmp-{iteration}-{os.getpid()}"
        self.tmp = self.final.parent / name
        if self.tmp.is_symlink():
            self.tmp.unlink()
        elif self.tmp.exists():
            shutil.rmtree(self.tmp)
        make_private_dir(self.final.parent, name)

    def write_json(self, name: str, obj: dict) -> Path:
        return write_file_no_follow(self.tmp, name, json.dumps(obj, indent=1, sort_keys=False, default=str) + "\n")

    def commit(self, metrics: dict, meta: dict) -> Path:
        """Write metrics.json, meta.json, then .complete; rename into place; return the final path."""
        self.write_json("metrics.json", {"metrics": metrics})
        self.write_json("meta.json", meta)
        write_file_no_follow(self.tmp, COMPLETE, b"")
        confined(self.final.parent, self.store)
        if self.final.is_symlink():
            raise UnsafePathError(f"{self.final} is a symlink: not replacing it")
        if self.final.exists():  # a leftover without .complete (not ours: never renamed) -> replace
            shutil.rmtree(self.final)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(self.tmp, 0o777 & ~umask)  # private while written, the usual mode once complete
        os.rename(self.tmp, self.final)
        return self.final

    def discard(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def discard_stale_temps(store: Path) -> list[Path]:
    """Remove `.tmp-*` directories left by interrupted runs; return what was removed."""
    removed = []
    for p in Path(store).glob("*/*/.tmp-*"):
        if p.is_symlink() or not p.is_dir():
            continue
        try:
            confined(p, store)  # never follow a label directory that leads out of the store
        except UnsafePathError:
            continue
        shutil.rmtree(p, ignore_errors=True)
        removed.append(p)
    return removed


def write_iteration(path: str | os.PathLike, metrics: dict, meta: dict | None = None, *, complete: bool = True) -> Path:
    """Write an iteration directory in the store layout (for importers and tests): metrics.json from
    {name: {"value", "unit", "lower_is_better"}} (or Metric), meta.json, then `.complete` last."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    doc = {"metrics": {k: (v.to_json() if isinstance(v, Metric) else v) for k, v in metrics.items()}}
    (path / "metrics.json").write_text(json.dumps(doc, indent=1))
    (path / "meta.json").write_text(json.dumps(meta or {}, indent=1))
    if complete:
        (path / COMPLETE).touch()
    return path
