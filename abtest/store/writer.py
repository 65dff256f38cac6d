"""Writes one iteration of the run store atomically.

    STORE/<label>/<workload>/<iteration>/{trace.dat, power.csv, metrics.json, meta.json, .complete}

Files are written into a hidden temp directory next to the final one (`.tmp-<iteration>-<pid>`, same
filesystem, so the final rename is atomic and readers skip dot-directories); `.complete` is written
last, then the directory is renamed into place. An interrupted iteration leaves only a temp directory,
which `discard_stale_temps` removes on the next run.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from abtest.store.model import Metric

from abtest.store.layout import COMPLETE_MARKER as COMPLETE
from abtest.store.layout import STORE_ENV, default_store_root, is_complete, iteration_dir  # noqa: F401 (re-exported)


def default_store() -> Path:
    """--store default: $ABTEST_STORE, else ./results."""
    return default_store_root()


class IterationWriter:
    """Context for one iteration: `tmp` is where files go; `commit()` finalises, `discard()` drops."""

    def __init__(self, store: Path, label: str, workload: str, iteration: int):
        self.final = iteration_dir(store, label, workload, iteration)
        if is_complete(self.final):
            raise FileExistsError(f"{self.final} is already complete")
        self.final.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = self.final.parent / f".tmp-{iteration}-{os.getpid()}"
        if self.tmp.exists():
            shutil.rmtree(self.tmp)
        self.tmp.mkdir()

    def write_json(self, name: str, obj: dict) -> Path:
        p = self.tmp / name
        p.write_text(json.dumps(obj, indent=1, sort_keys=False, default=str) + "\n")
        return p

    def commit(self, metrics: dict, meta: dict) -> Path:
        """Write metrics.json, meta.json, then .complete; rename into place; return the final path."""
        self.write_json("metrics.json", {"metrics": metrics})
        self.write_json("meta.json", meta)
        with open(self.tmp / COMPLETE, "w") as f:
            f.flush()
            os.fsync(f.fileno())
        if self.final.exists():  # a leftover without .complete (not ours: never renamed) -> replace
            shutil.rmtree(self.final)
        os.rename(self.tmp, self.final)
        return self.final

    def discard(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def discard_stale_temps(store: Path) -> list[Path]:
    """Remove `.tmp-*` directories left by interrupted runs; return what was removed."""
    removed = []
    for p in Path(store).glob("*/*/.tmp-*"):
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


def write_iteration(path: str | os.PathLike, metrics: dict, meta: dict | None = None, *,
                    complete: bool = True) -> Path:
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
