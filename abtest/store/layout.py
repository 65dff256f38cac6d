"""The run store's on-disk layout (a fixed contract; collectors, importers and users' scripts write it)::

    STORE/<kernel label>/<workload>/<iteration>/
        trace.dat | *.perfetto-trace | *.pftrace | trace.txt | ...   (optional, any format abtest.Trace reads)
        power.csv      optional; columns ts_ns, rail, subsystem, energy_uj (cumulative counter per rail, uJ)
        battor.txt     optional; a BattOr power-monitor log (another power source)
        platform.yml   optional; the platform (capacities, OPPs, idle states, energy model: any format
                       abtest.analysis.platform reads, also platform.toml or a LISA plat_info.yml)
        metrics.json   {"metrics": {"<name>": {"value": <number>, "unit": "<unit>", "lower_is_better": <bool>}}}
        meta.json      kernel release/version/cmdline, hardware, governors, thermal, tool versions, timestamps
        .complete      empty; written last. Without it the iteration is incomplete: it is reported, never used.
    STORE/abtest.toml  optional store configuration (per-workload default task lists, rail -> channel mapping)

The default STORE is ./results, overridden by `--store` or the ABTEST_STORE environment variable.

A plain directory of traces also works as a label (no store, no markers; abtest.store.reader.load_label):
    DIR/run1.dat DIR/run2.dat ...        each trace file is one complete iteration of one workload ("traces");
                                         DIR/run1.power.csv, DIR/run1.metrics.json, DIR/run1.meta.json beside it
                                         (same name, trace suffix replaced) are its power samples, results, meta
    DIR/<run>/trace.dat [power.csv ...]  or one subdirectory per iteration holding an iteration's files
"""

from __future__ import annotations

import os
from pathlib import Path

STORE_ENV = "ABTEST_STORE"
DEFAULT_STORE = "results"
COMPLETE_MARKER = ".complete"
METRICS_FILE = "metrics.json"
META_FILE = "meta.json"
POWER_FILE = "power.csv"
BATTOR_FILES = ("battor.txt", "battor.log")
PLATFORM_FILES = ("platform.yml", "platform.yaml", "platform.toml", "plat_info.yml")
STORE_CONFIG_FILE = "abtest.toml"
METRICS_CACHE_FILE = ".abtest-metrics.json"
PLAIN_WORKLOAD = "traces"  # the one workload of a plain directory of traces
# The layouts a label argument may have, for error messages (one line each).
LAYOUT_HINT = (
    "expected a folder of trace files (each file one iteration; NAME.power.csv / NAME.metrics.json "
    "beside a trace are its own), or the run store layout STORE/<label>/<workload>/<iteration>/"
    "{trace.dat, power.csv, metrics.json, .complete}"
)
# How to repair iterations excluded for lacking their marker ({dir}: the workload directory).
INCOMPLETE_FIX = (
    "`abtest collect` writes .complete last, so a missing one means the run did not finish; if these "
    "runs did finish, mark them: `touch {dir}/*/.complete` (or compare the folder of traces directly: "
    "plain directories need no markers)"
)

# Files in an iteration directory that are never the trace.
NOT_TRACE = {COMPLETE_MARKER, METRICS_FILE, META_FILE, POWER_FILE, METRICS_CACHE_FILE, *BATTOR_FILES, *PLATFORM_FILES}
# Trace file names in order of preference (exact names first, then suffixes).
TRACE_NAMES = (
    "trace.dat",
    "trace.perfetto-trace",
    "trace.pftrace",
    "trace.pb",
    "trace.html",
    "trace.ctrace",
    "trace.txt",
)
TRACE_SUFFIXES = (
    ".dat",
    ".perfetto-trace",
    ".pftrace",
    ".perfetto",
    ".pb",
    ".html",
    ".ctrace",
    ".atrace",
    ".systrace",
    ".txt",
    ".gz",
    ".zst",
    ".zip",
)
# Files beside a trace in a plain directory of traces: `<trace stem>.power.csv` etc. (never a trace themselves).
SIDECAR_SUFFIXES = (".power.csv", ".metrics.json", ".meta.json")


def bundled_store() -> Path | None:
    """The example run store shipped in a checkout (examples/idle-governors), or None in an installed package."""
    p = Path(__file__).resolve().parent.parent.parent / "examples" / "idle-governors"
    return p if p.is_dir() else None


def default_store_root() -> Path:
    """$ABTEST_STORE if set, else ./results."""
    return Path(os.environ.get(STORE_ENV) or DEFAULT_STORE)


def iteration_dir(store: Path, label: str, workload: str, iteration: int) -> Path:
    """STORE/<label>/<workload>/<iteration>."""
    return Path(store) / label / workload / str(iteration)


def is_complete(path: Path) -> bool:
    """The iteration directory holds its `.complete` marker."""
    return (Path(path) / COMPLETE_MARKER).is_file()


def find_trace(directory: Path) -> Path | None:
    """The trace file in an iteration directory (preferred names first), or None."""
    for n in TRACE_NAMES:
        if (directory / n).is_file():
            return directory / n
    files = [
        f for f in sorted(directory.iterdir()) if f.is_file() and f.name not in NOT_TRACE and not f.name.startswith(".")
    ]
    for suffix in TRACE_SUFFIXES:
        for f in files:
            if f.name.endswith(suffix):
                return f
    return None


def find_battor(directory: Path) -> Path | None:
    """A BattOr log in an iteration directory (battor.txt / battor.log), or None."""
    for n in BATTOR_FILES:
        if (directory / n).is_file():
            return directory / n
    return None


def find_platform(directory: Path) -> Path | None:
    """A platform file in an iteration directory (PLATFORM_FILES, first found), or None."""
    for n in PLATFORM_FILES:
        if (directory / n).is_file():
            return directory / n
    return None


def is_trace_name(name: str) -> bool:
    """A file name a trace may have (TRACE_NAMES / TRACE_SUFFIXES), not an iteration's other files nor hidden."""
    if (
        name in NOT_TRACE
        or name.startswith(".")
        or name.endswith(SIDECAR_SUFFIXES)
        or name.lower().startswith("readme")
    ):
        return False
    return name in TRACE_NAMES or name.endswith(TRACE_SUFFIXES)


def trace_stem(trace: Path) -> str:
    """A trace file's name without its trace suffixes: run1.dat.gz -> run1 (the name of its sidecar files)."""
    name = trace.name
    stripped = True
    while stripped:
        stripped = False
        for suffix in TRACE_SUFFIXES:
            if name.endswith(suffix) and len(name) > len(suffix):
                name, stripped = name[: -len(suffix)], True
                break
    return name


def sidecar(trace: Path, kind: str) -> Path | None:
    """The `<stem>.<kind>` file beside a trace in a plain directory (kind: power.csv, metrics.json, meta.json),
    or None."""
    p = trace.parent / f"{trace_stem(trace)}.{kind}"
    return p if p.is_file() else None
