"""The run store: iterations of workloads run on kernels, as collectors leave them on disk.

Layout (a fixed contract; collectors, interop converters and users' own scripts write it)::

    STORE/<kernel label>/<workload>/<iteration>/
        trace.dat | *.perfetto-trace | *.pftrace | trace.txt | ...   (optional, any format abtest.Trace reads)
        power.csv      optional; columns ts_ns, rail, subsystem, energy_uj (cumulative counter per rail, uJ)
        metrics.json   {"metrics": {"<name>": {"value": <number>, "unit": "<unit>", "lower_is_better": <bool>}}}
        meta.json      kernel release/version/cmdline, hardware, governors, thermal, tool versions, timestamps
        .complete      empty; written last. Without it the iteration is incomplete: it is reported, never used.

The default STORE is ./results, overridden by `--store` or the ABTEST_STORE environment variable.

A label directory may instead be a Workload Automation 3 output directory (a `__meta` directory and/or
`result.json` at its root); it is then converted by `abtest.interop.wa.load_wa_output(path)` when that
module is available.

Everything here is plain data loading: no statistics, no trace decoding.
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

STORE_ENV = "ABTEST_STORE"
DEFAULT_STORE = "results"
COMPLETE_MARKER = ".complete"
METRICS_FILE = "metrics.json"
META_FILE = "meta.json"
POWER_FILE = "power.csv"
METRICS_CACHE_FILE = ".abtest-metrics.json"

# Files in an iteration directory that are never the trace.
_NOT_TRACE = {COMPLETE_MARKER, METRICS_FILE, META_FILE, POWER_FILE, METRICS_CACHE_FILE}
# Trace file names in order of preference (exact names first, then suffixes).
_TRACE_NAMES = ("trace.dat", "trace.perfetto-trace", "trace.pftrace", "trace.pb", "trace.html",
                "trace.ctrace", "trace.txt")
_TRACE_SUFFIXES = (".dat", ".perfetto-trace", ".pftrace", ".perfetto", ".pb", ".html", ".ctrace",
                   ".atrace", ".systrace", ".txt", ".gz", ".zst", ".zip")


class StoreError(ValueError):
    """A store, label or iteration directory is missing or malformed. The message names the path."""


@dataclass(frozen=True)
class Metric:
    """One scalar measured in one iteration.

    value: the number, in `unit`.  lower_is_better: direction of "better" (power, jank, latency: True;
    fps, score: False; None: no preferred direction, e.g. a residency).  source: where it came from
    ("metrics.json", "power.csv", "trace:<module>").
    """
    value: float
    unit: str = ""
    lower_is_better: bool | None = True
    source: str = METRICS_FILE

    def to_json(self) -> dict:
        return {"value": self.value, "unit": self.unit, "lower_is_better": self.lower_is_better,
                "source": self.source}

    @classmethod
    def from_json(cls, obj, *, where: str = "", source: str = METRICS_FILE) -> "Metric":
        """Build from the metrics.json entry form `{"value", "unit", "lower_is_better"}` (or a Metric)."""
        if isinstance(obj, Metric):
            return obj
        if not isinstance(obj, dict) or "value" not in obj:
            raise StoreError(f"{where}: expected an object with 'value', 'unit', 'lower_is_better'; got {obj!r}")
        raw = obj["value"]
        if raw is None:
            value = math.nan
        elif isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise StoreError(f"{where}: 'value' must be a number, got {raw!r}")
        else:
            value = float(raw)
        lib = obj.get("lower_is_better", True)
        if lib is not None and not isinstance(lib, bool):
            raise StoreError(f"{where}: 'lower_is_better' must be true, false or null, got {lib!r}")
        return cls(value=value, unit=str(obj.get("unit", "")), lower_is_better=lib,
                   source=str(obj.get("source", source)))


@dataclass
class Iteration:
    """One run of one workload on one kernel.

    label: kernel label (the directory under STORE).  workload: workload name.  index: iteration number
    (trailing digits of the directory name, else its position).  path: the iteration directory.
    complete: `.complete` present.  metrics: name -> Metric (from metrics.json; derived metrics are added by
    abtest.compare.metrics).  meta: meta.json contents.  trace_path / power_path: files or None.
    name: directory name.  problems: why the iteration is unusable (empty when fine).
    """
    label: str
    workload: str
    index: int
    path: Path
    complete: bool
    metrics: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    trace_path: Path | None = None
    power_path: Path | None = None
    name: str = ""
    problems: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        if not self.name:
            self.name = self.path.name
        # Accept plain metrics.json-style dicts (e.g. from interop converters).
        self.metrics = {k: Metric.from_json(v, where=f"{self.path}: metric {k!r}") for k, v in self.metrics.items()}

    @property
    def usable(self) -> bool:
        """Complete and nothing wrong with it."""
        return self.complete and not self.problems


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


def default_store_root() -> Path:
    """ABTEST_STORE if set, else ./results."""
    return Path(os.environ.get(STORE_ENV) or DEFAULT_STORE)


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
    try:
        from abtest.interop.wa import load_wa_output
    except ModuleNotFoundError as e:
        raise StoreError(f"{path} is a Workload Automation output directory but abtest.interop.wa "
                         f"is not available ({e})") from e
    return list(load_wa_output(path, label=label))


def _iteration_index(name: str, position: int) -> int:
    m = re.search(r"(\d+)$", name)
    return int(m.group(1)) if m else position


def find_trace(directory: Path) -> Path | None:
    """The trace file in an iteration directory (preferred names first), or None."""
    for n in _TRACE_NAMES:
        if (directory / n).is_file():
            return directory / n
    files = [f for f in sorted(directory.iterdir()) if f.is_file() and f.name not in _NOT_TRACE
             and not f.name.startswith(".")]
    for suffix in _TRACE_SUFFIXES:
        for f in files:
            if f.name.endswith(suffix):
                return f
    return None


def read_metrics_json(path: Path) -> dict[str, Metric]:
    """Parse metrics.json. Raises StoreError naming the file and what was expected."""
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise StoreError(f"{path}: line {e.lineno} column {e.colno}: invalid JSON ({e.msg}); expected "
                         '{"metrics": {"<name>": {"value": <number>, "unit": "<unit>", '
                         '"lower_is_better": <bool>}}}') from e
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
            meta = json.loads(meta_path.read_text())
            if not isinstance(meta, dict):
                problems.append(f"{meta_path}: expected a JSON object")
                meta = {}
        except json.JSONDecodeError as e:
            problems.append(f"{meta_path}: line {e.lineno}: invalid JSON ({e.msg})")
    power = path / POWER_FILE
    return Iteration(
        label=label, workload=workload, index=_iteration_index(path.name, position), path=path,
        complete=(path / COMPLETE_MARKER).exists(), metrics=metrics, meta=meta,
        trace_path=find_trace(path), power_path=power if power.is_file() else None,
        name=path.name, problems=problems,
    )


def write_iteration(path: str | os.PathLike, metrics: dict, meta: dict | None = None, *,
                    complete: bool = True) -> Path:
    """Write an iteration directory in the store layout (for importers and tests): metrics.json from
    {name: {"value", "unit", "lower_is_better"}} (or Metric), meta.json, then `.complete` last."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    doc = {"metrics": {k: (v.to_json() if isinstance(v, Metric) else v) for k, v in metrics.items()}}
    (path / METRICS_FILE).write_text(json.dumps(doc, indent=1))
    (path / META_FILE).write_text(json.dumps(meta or {}, indent=1))
    if complete:
        (path / COMPLETE_MARKER).touch()
    return path
