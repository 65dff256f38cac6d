"""The run store: iterations of workloads run on kernels, as collectors leave them on disk.

Layout: abtest.store.layout.

A label directory may also be a plain directory of traces (each trace file, or each subdirectory holding one,
is a complete iteration of the one workload "traces"; no markers; see abtest.store.layout), or a Workload
Automation 3 output directory (a `__meta` directory and/or `result.json` at its root); it is then converted by
`abtest.store.wa.load_wa_output(path)`.

Everything here is plain data loading: no statistics, no trace decoding.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from abtest.store.layout import (
    COMPLETE_MARKER,
    META_FILE,
    METRICS_FILE,
    PLAIN_WORKLOAD,
    POWER_FILE,
    STORE_ENV,
    default_store_root,
    find_battor,
    find_platform,
    find_trace,
    is_trace_name,
    sidecar,
    trace_stem,
)
from abtest.store.model import Iteration, Metric, StoreError, read_json
from abtest.store.wa import load_wa_output


@dataclass
class Label:
    """All iterations of one kernel label. workloads: workload -> iterations sorted by index (all of them,
    including incomplete ones; use `complete()` for the usable ones)."""

    name: str
    path: Path
    workloads: dict = field(default_factory=dict)
    plain: bool = False  # a plain directory of traces (no store layout, no markers): one workload, PLAIN_WORKLOAD

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
        raise StoreError(
            f"label {key!r} not found in store {self.root} (labels there: {known}) and it is not a directory"
        )


def align_plain(a: Label, b: Label) -> tuple[Label, Label]:
    """When exactly one of two labels is a plain directory of traces and the other has one workload, the plain
    label's workload takes that name, so a folder of traces compares with a store label."""

    def renamed(plain: Label, other: Label) -> Label:
        (name,) = other.workloads
        its = [dataclasses.replace(it, workload=name) for it in plain.workloads.get(PLAIN_WORKLOAD, [])]
        return Label(plain.name, plain.path, {name: its}, plain=True)

    if a.plain != b.plain and len(a.workloads) == len(b.workloads) == 1:
        return (renamed(a, b), b) if a.plain else (a, renamed(b, a))
    return a, b


def is_wa_output(path: Path) -> bool:
    """A Workload Automation 3 output directory: `__meta/` and/or `result.json` at its root."""
    return (path / "__meta").is_dir() or (path / "result.json").is_file()


def load_store(root: str | os.PathLike | None = None) -> Store:
    """Load every label directory under `root` (default: ABTEST_STORE or ./results)."""
    root_path = Path(root) if root is not None else default_store_root()
    if not root_path.is_dir():
        raise StoreError(f"store {root_path} does not exist or is not a directory (set --store or {STORE_ENV})")
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
    elif _plain_files(path) or _plain_dirs(path):
        label.plain = True
        label.workloads[PLAIN_WORKLOAD] = _load_plain(path, label.name)
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


def _plain_files(path: Path) -> list[Path]:
    """The trace files directly in `path` (a plain directory of traces; a store label holds none)."""
    return [f for f in sorted(path.iterdir()) if f.is_file() and is_trace_name(f.name)]


def _holds_one_iteration(d: Path) -> bool:
    """`d` holds an iteration's files (a trace, metrics.json or power.csv) and no subdirectories."""
    if d.name.startswith(".") or not d.is_dir():
        return False
    children = list(d.iterdir())
    return not any(c.is_dir() for c in children) and (
        find_trace(d) is not None or (d / METRICS_FILE).is_file() or (d / POWER_FILE).is_file()
    )


def _plain_dirs(path: Path) -> list[Path]:
    """Subdirectories of `path` that each hold one iteration's files, when `path` holds no deeper tree (a store
    label's subdirectories are workloads, which hold iteration directories)."""
    subdirs = [d for d in sorted(path.iterdir()) if d.is_dir() and not d.name.startswith(".")]
    if not subdirs or not all(_holds_one_iteration(d) for d in subdirs):
        return []
    return subdirs


def _load_plain(path: Path, label: str) -> list[Iteration]:
    """Iterations of a plain directory: one per trace file (with its `<stem>.power.csv|metrics.json|meta.json`),
    else one per subdirectory. No `.complete` marker is needed, except that when some subdirectories have one
    (a store's workload directory given as a label), those without it are incomplete."""
    files = _plain_files(path)
    if files:
        its = [_plain_file_iteration(f, label=label, position=i) for i, f in enumerate(files)]
    else:
        dirs = _plain_dirs(path)
        marked = any((d / COMPLETE_MARKER).exists() for d in dirs)
        its = []
        for i, d in enumerate(dirs):
            it = load_iteration(d, label=label, workload=PLAIN_WORKLOAD, position=i)
            it.complete = it.complete or not marked
            its.append(it)
    return its


def _plain_file_iteration(trace: Path, *, label: str, position: int) -> Iteration:
    """One trace file of a plain directory as a complete iteration (path: the trace file itself)."""
    problems: list[str] = []
    metrics: dict[str, Metric] = {}
    mpath = sidecar(trace, "metrics.json")
    if mpath is not None:
        try:
            metrics = read_metrics_json(mpath)
        except StoreError as e:
            problems.append(str(e))
    meta = _read_meta(sidecar(trace, "meta.json"), problems)
    stem = trace_stem(trace)
    return Iteration(
        label=label,
        workload=PLAIN_WORKLOAD,
        index=_iteration_index(stem, position),
        path=trace,
        complete=True,
        metrics=metrics,
        meta=meta,
        trace_path=trace,
        power_path=sidecar(trace, "power.csv"),
        name=trace.name,
        problems=problems,
    )


def _load_wa(path: Path, label: str) -> list[Iteration]:
    return list(load_wa_output(path, label=label))


def _iteration_index(name: str, position: int) -> int:
    m = re.search(r"(\d+)$", name)
    return int(m.group(1)) if m else position


def read_metrics_json(path: Path) -> dict[str, Metric]:
    """Parse metrics.json. Raises StoreError naming the file and what was expected."""
    doc = read_json(path, '{"metrics": {"<name>": {"value": <number>, "unit": "<unit>", "lower_is_better": <bool>}}}')
    if not isinstance(doc, dict) or not isinstance(doc.get("metrics"), dict):
        raise StoreError(f"{path}: expected a top-level object with a 'metrics' object")
    return {name: Metric.from_json(m, where=f"{path}: metric {name!r}") for name, m in doc["metrics"].items()}


def load_iteration(path: str | os.PathLike, *, label: str, workload: str, position: int = 0) -> Iteration:
    """Load one iteration directory. Problems (bad JSON, ...) are recorded in `problems`, not raised,
    so that one broken iteration is reported and excluded instead of hiding the others."""
    path = Path(path)
    problems: list[str] = []
    metrics: dict[str, Metric] = {}
    mpath = path / METRICS_FILE
    if mpath.is_file():
        try:
            metrics = read_metrics_json(mpath)
        except StoreError as e:
            problems.append(str(e))
    meta_path = path / META_FILE
    meta = _read_meta(meta_path if meta_path.is_file() else None, problems)
    power = path / POWER_FILE
    return Iteration(
        label=label,
        workload=workload,
        index=_iteration_index(path.name, position),
        path=path,
        complete=(path / COMPLETE_MARKER).exists(),
        metrics=metrics,
        meta=meta,
        trace_path=find_trace(path),
        power_path=power if power.is_file() else None,
        battor_path=find_battor(path),
        platform_path=find_platform(path),
        name=path.name,
        problems=problems,
    )


def _read_meta(meta_path: Path | None, problems: list[str]) -> dict:
    """meta.json as a dict ({} when absent); a malformed one is recorded in `problems`."""
    if meta_path is None:
        return {}
    try:
        meta = read_json(meta_path)
    except StoreError as e:  # not UTF-8, invalid JSON, nested too deep, a too-long integer
        problems.append(str(e))
        return {}
    if not isinstance(meta, dict):
        problems.append(f"{meta_path}: expected a JSON object")
        return {}
    return meta
