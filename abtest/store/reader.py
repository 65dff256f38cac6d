"""The run store: iterations of workloads run on kernels, as collectors leave them on disk.

Layout: abtest.store.layout.

A label directory may instead be a Workload Automation 3 output directory (a `__meta` directory and/or
`result.json` at its root); it is then converted by `abtest.store.wa.load_wa_output(path)`.

Everything here is plain data loading: no statistics, no trace decoding.
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from abtest.store.layout import (COMPLETE_MARKER, METRICS_FILE, META_FILE, POWER_FILE, STORE_ENV, default_store_root,
                                 find_battor, find_platform, find_trace)
from abtest.store.model import Iteration, Metric, StoreError
from abtest.store.wa import load_wa_output


@dataclass
class Label:
    """All iterations of one kernel label. workloads: workload -> iterations sorted by index (all of them,
    including incomplete ones; use `complete()` for the usable ones)."""
    name: str
    path: Path
    workloads: dict = field(default_factory=dict)

    def complete(self, workload: str) -> list[Iteration]:
        return [it for it in self.workloads.get(workload, []) if it.usable]

    def excluded(self, workload: str | None = None) -> list[Iteration]:
        """Iterations that exist but are not used (incomplete or broken)."""
        names = [workload] if workload else list(self.workloads)
        return [it for w in names for it in self.workloads.get(w, []) if not it.usable]

    def meta(self, workload: str | None = None) -> dict:
        """meta.json of the first usable iteration (of `workload` if given), or {}."""
        names = [workload] if workload else sorted(self.workloads)
        for w in names:
            for it in self.workloads.get(w, []):
                if it.usable and it.meta:
                    return it.meta
        return {}


@dataclass
class Store:
    """A store root and its labels (label name -> Label)."""
    root: Path
    labels: dict = field(default_factory=dict)

    def label(self, name_or_path: str | os.PathLike) -> Label:
        """A label by name in this store, or by path to a label directory (loaded on demand)."""
        key = str(name_or_path)
        if key in self.labels:
            return self.labels[key]
        p = Path(name_or_path)
        if p.is_dir():
            return load_label(p)
        known = ", ".join(sorted(self.labels)) or "none"
        raise StoreError(f"label {key!r} not found in store {self.root} (labels there: {known}) "
                         f"and it is not a directory")


def is_wa_output(path: Path) -> bool:
    """A Workload Automation 3 output directory: `__meta/` and/or `result.json` at its root."""
    return (path / "__meta").is_dir() or (path / "result.json").is_file()


def load_store(root: str | os.PathLike | None = None) -> Store:
    """Load every label directory under `root` (default: ABTEST_STORE or ./results)."""
    root_path = Path(root) if root is not None else default_store_root()
    if not root_path.is_dir():
        raise StoreError(f"store {root_path} does not exist or is not a directory "
                         f"(set --store or {STORE_ENV})")
    store = Store(root=root_path)
    for child in sorted(root_path.iterdir()):
        if child.is_dir() and not child.name.startswith("."):
            store.labels[child.name] = load_label(child)
    return store


def load_label(path: str | os.PathLike, name: str | None = None) -> Label:
    """Load one label directory: `<label>/<workload>/<iteration>/`, or a WA3 output directory."""
    path = Path(path)
    if not path.is_dir():
        raise StoreError(f"label directory {path} does not exist")
    label = Label(name=name or path.name, path=path)
    if is_wa_output(path):
        iterations = _load_wa(path, label.name)
        for it in iterations:
            label.workloads.setdefault(it.workload, []).append(it)
    else:
        for wdir in sorted(path.iterdir()):
            if not wdir.is_dir() or wdir.name.startswith("."):
                continue
            idirs = [d for d in sorted(wdir.iterdir()) if d.is_dir() and not d.name.startswith(".")]
            label.workloads[wdir.name] = [
                load_iteration(d, label=label.name, workload=wdir.name, position=i) for i, d in enumerate(idirs)
            ]
    for its in label.workloads.values():
        its.sort(key=lambda it: (it.index, it.name))
    return label


def _load_wa(path: Path, label: str) -> list[Iteration]:
    return list(load_wa_output(path, label=label))


def _iteration_index(name: str, position: int) -> int:
    m = re.search(r"(\d+)$", name)
    return int(m.group(1)) if m else position


def read_metrics_json(path: Path) -> dict[str, Metric]:
    """Parse metrics.json. Raises StoreError naming the file and what was expected."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise StoreError(f"{path}: not UTF-8 text (byte offset {e.start}); expected JSON") from e
    except json.JSONDecodeError as e:
        raise StoreError(f"{path}: line {e.lineno} column {e.colno}: invalid JSON ({e.msg}); expected "
                         '{"metrics": {"<name>": {"value": <number>, "unit": "<unit>", '
                         '"lower_is_better": <bool>}}}') from e
    except ValueError as e:  # e.g. an integer literal longer than Python's 4300-digit conversion limit
        raise StoreError(f"{path}: {e}") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("metrics"), dict):
        raise StoreError(f"{path}: expected a top-level object with a 'metrics' object")
    return {name: Metric.from_json(m, where=f"{path}: metric {name!r}") for name, m in doc["metrics"].items()}


def load_iteration(path: str | os.PathLike, *, label: str, workload: str, position: int = 0) -> Iteration:
    """Load one iteration directory. Problems (bad JSON, ...) are recorded in `problems`, not raised,
    so that one broken iteration is reported and excluded instead of hiding the others."""
    path = Path(path)
    problems: list[str] = []
    metrics: dict[str, Metric] = {}
    meta: dict = {}
    mpath = path / METRICS_FILE
    if mpath.is_file():
        try:
            metrics = read_metrics_json(mpath)
        except StoreError as e:
            problems.append(str(e))
    meta_path = path / META_FILE
    if meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            if not isinstance(meta, dict):
                problems.append(f"{meta_path}: expected a JSON object")
                meta = {}
        except json.JSONDecodeError as e:
            problems.append(f"{meta_path}: line {e.lineno}: invalid JSON ({e.msg})")
        except UnicodeDecodeError as e:
            problems.append(f"{meta_path}: not UTF-8 text (byte offset {e.start})")
    power = path / POWER_FILE
    return Iteration(
        label=label, workload=workload, index=_iteration_index(path.name, position), path=path,
        complete=(path / COMPLETE_MARKER).exists(), metrics=metrics, meta=meta,
        trace_path=find_trace(path), power_path=power if power.is_file() else None,
        battor_path=find_battor(path), platform_path=find_platform(path),
        name=path.name, problems=problems,
    )
