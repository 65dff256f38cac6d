"""Shared fixtures: paths to the real test traces, a per-session cache dir, and the tracefs lock."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest
from shared_data import PLATFORMS, TRACES  # ../shared beside the checkout (or $ABTEST_SHARED)

from abtest.collectors.ftrace import TracefsLock

ROOT = Path(__file__).resolve().parent.parent
TRACEFS = Path("/sys/kernel/tracing")


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    """Every test session gets its own parquet cache dir (no stale entries from earlier runs)."""
    old = os.environ.get("ABTEST_CACHE_DIR")
    os.environ["ABTEST_CACHE_DIR"] = str(tmp_path_factory.mktemp("abtest-cache"))
    yield
    if old is None:
        os.environ.pop("ABTEST_CACHE_DIR", None)
    else:
        os.environ["ABTEST_CACHE_DIR"] = old


@pytest.fixture(scope="session")
def traces() -> Path:
    """../shared/traces (real traces from real systems)."""
    if not TRACES.is_dir():
        pytest.fail(
            f"{TRACES} is missing: the shared test traces must sit beside the repository "
            "(or set ABTEST_SHARED to the directory holding traces/ and platforms/)"
        )
    return TRACES


@pytest.fixture(scope="session")
def platforms() -> Path:
    return PLATFORMS


def ensure_tracefs() -> Path:
    if not (TRACEFS / "events").is_dir():
        subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], check=True)
    return TRACEFS


@pytest.fixture
def tracefs_lock():
    """Serialise use of this machine's (global) tracefs across tests and processes.

    Yields the tracefs mount point. Anything that writes tracefs must hold this lock: it is the lock
    `abtest collect` takes for this machine (abtest.collectors.host_state: /run/abtest/tracefs.lock, plus
    the legacy /tmp/abtest-tracefs.lock that older checkouts take).
    """
    with TracefsLock(True):
        yield ensure_tracefs()


@pytest.fixture(scope="session")
def bench_trace() -> Path:
    """The >= 2 M-event trace.dat bench/ingest.py benchmarks (~/.cache/abtest/bench/hackbench-sched-power.dat),
    recorded live on this machine (tracefs + hackbench + `trace-cmd extract`, ~30-60 s) when it is missing."""
    spec = importlib.util.spec_from_file_location("abtest_bench_ingest", ROOT / "bench" / "ingest.py")
    ingest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ingest)
    ensure_tracefs()
    path, events = ingest.ensure_bench_trace(min_events=2_000_000)
    assert events >= 2_000_000
    return path
