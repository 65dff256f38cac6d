"""Test data for abtest history: a run store of nightly builds made from real data, and a private PostgreSQL.

What is real: every iteration's power.csv is the Pixel 7 Pro's 24 ODPM power rails as recorded in
../shared/traces/PerfettoTraceScript/pixel7pro-power-rails.perfetto-trace (60 s, 5,760 cumulative energy
samples), and its metrics.json and meta.json are copied from a real iteration of the bundled store
(examples/idle-governors, recorded on this kind of machine). What is synthetic: each iteration's energies are
multiplied by (1 + step) from the step build on (a known power step) and by (1 + r), r drawn (seeded) from the
real iteration-to-iteration relative spread of the bundled store's repeated runs (their workload duration,
16 runs of two labels: CV ~0.6 %); builds get one day each, a git revision and the target name "lab-dut".
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
from shared_data import ROOT, TRACES

PIXEL = TRACES / "PerfettoTraceScript" / "pixel7pro-power-rails.perfetto-trace"
EXAMPLE = ROOT / "examples" / "idle-governors"
PG_BIN = Path("/usr/lib/postgresql/15/bin")
_RAILS = None


def pixel_rails():
    """The real rail samples (ts_ns, rail, subsystem, energy_uj) of the Pixel 7 Pro trace (decoded once)."""
    global _RAILS
    if _RAILS is None:
        from abtest import Trace

        df = Trace(PIXEL).df("power_rail", windowed=False)
        _RAILS = df.select(df["ts"].alias("ts_ns"), "rail", "subsystem", "energy_uj")
    return _RAILS


def real_spread() -> np.ndarray:
    """Relative deviations of the bundled store's repeated runs from their label's mean (workload duration)."""
    out = []
    for label in ("menu", "ladder"):
        vals = np.array(
            [
                json.loads((d / "metrics.json").read_text())["metrics"]["duration_s"]["value"]
                for d in sorted((EXAMPLE / label / "cyclictest").iterdir())
            ]
        )
        out += list(vals / vals.mean() - 1)
    return np.array(out)


def revision(k: int) -> str:
    return hashlib.sha1(f"nightly-{k}".encode()).hexdigest()


def label(k: int) -> str:
    return f"nightly-{k:03d}"


def make_history(
    store: Path,
    n_builds: int = 30,
    step_at: int = 20,
    step: float = 0.04,
    iterations: int = 3,
    seed: int = 41,
    workload: str = "video",
    builds: range | None = None,
) -> list[str]:
    """Write builds `builds` (default all n_builds) of a nightly store; returns their labels. Build k >= step_at
    has its power scaled by (1 + step)."""
    import polars as pl

    rails = pixel_rails()
    spread = real_spread()
    rng = np.random.default_rng(seed)
    draws = rng.choice(spread, size=(n_builds, iterations))
    src = EXAMPLE / "menu" / "cyclictest" / "1"
    meta0 = json.loads((src / "meta.json").read_text())
    start = datetime(2026, 10, 1, 2, 0, tzinfo=UTC)
    out = []
    for k in builds if builds is not None else range(n_builds):
        factor = 1 + (step if k >= step_at else 0.0)
        for i in range(iterations):
            d = store / label(k) / workload / str(i + 1)
            d.mkdir(parents=True, exist_ok=True)
            shutil.copy(src / "metrics.json", d / "metrics.json")
            meta = dict(meta0, label=label(k), workload=workload, iteration=i + 1)
            meta["kernel"] = dict(meta0["kernel"], release=f"6.18.0-nightly{k}")
            meta["git"] = {"revision": revision(k)}
            meta["target"] = dict(meta0["target"], name="lab-dut")
            t = start + timedelta(days=k, minutes=5 * i)
            meta["timestamps"] = {"start_utc": t.isoformat(), "end_utc": (t + timedelta(minutes=1)).isoformat()}
            (d / "meta.json").write_text(json.dumps(meta))
            scaled = rails.with_columns(pl.col("energy_uj") * (factor * (1 + draws[k, i])))
            scaled.write_csv(d / "power.csv")
            (d / ".complete").touch()
        out.append(label(k))
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """A private PostgreSQL cluster (initdb in a temporary directory, 127.0.0.1, a random port), run as the
    `postgres` user when this process is root; stopped by `stop()` (pg_ctl stop on its own data directory)."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="abtest-pg-"))
        self.port = _free_port()
        self.root = os.geteuid() == 0
        self.started = False

    def _run(self, argv: list[str]) -> None:
        if self.root:
            argv = ["runuser", "-u", "postgres", "--"] + argv
        subprocess.run(argv, check=True, capture_output=True, timeout=120)

    @property
    def url(self) -> str:
        return f"postgresql://abtest@127.0.0.1:{self.port}/abtest"

    def start(self) -> PostgresServer:
        data = self.dir / "data"
        data.mkdir()
        if self.root:
            shutil.chown(self.dir, "postgres", "postgres")
            shutil.chown(data, "postgres", "postgres")
        self._run([str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "abtest", "-E", "UTF8", "--no-sync"])
        opts = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            [
                str(PG_BIN / "pg_ctl"),
                "-D",
                str(data),
                "-o",
                opts,
                "-l",
                str(self.dir / "log"),
                "-w",
                "-t",
                "60",
                "start",
            ]
        )
        self.started = True
        self._run([str(PG_BIN / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "abtest", "abtest"])
        return self

    def stop(self) -> None:
        try:
            if self.started:
                self._run([str(PG_BIN / "pg_ctl"), "-D", str(self.dir / "data"), "-m", "immediate", "-w", "stop"])
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def wait_for(cond, timeout: float = 10.0) -> None:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError("condition not reached")
        time.sleep(0.05)
