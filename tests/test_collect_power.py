"""`abtest collect` with the RAPL power sampler over counter files that change during the run (a sysfs-shaped
tree in tmp_path: this machine has no power counters). Checks power.csv in the store (columns, unwrapped
monotonic energy) and that its timestamps sit on the trace clock: inside the workload's trace markers."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import polars as pl
import pytest

from abtest import Trace

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.tracefs


def test_collect_with_rapl_sampler_aligned_to_trace(tmp_path):
    sysfs = tmp_path / "sys"
    domains = {"intel-rapl:0": ("package-0", 262143328850), "intel-rapl:0:0": ("core", 3_000_000)}
    for d, (name, rng) in domains.items():
        p = sysfs / "class/powercap" / d
        p.mkdir(parents=True)
        (p / "name").write_text(name + "\n")
        (p / "max_energy_range_uj").write_text(f"{rng}\n")
        (p / "energy_uj").write_text("2900000\n")
    stop = threading.Event()

    def counters():  # ~5 W package, ~2 W core (wraps at 3 J within the first second)
        e_pkg, e_core = 2_900_000, 2_900_000
        while not stop.is_set():
            e_pkg += 50_000
            e_core = (e_core + 20_000) % (3_000_000 + 1)
            for d, v in (("intel-rapl:0", e_pkg), ("intel-rapl:0:0", e_core)):
                f = sysfs / "class/powercap" / d / "energy_uj"
                f.with_suffix(".new").write_text(f"{v}\n")
                f.with_suffix(".new").replace(f)
            time.sleep(0.01)

    target = tmp_path / "t.toml"
    target.write_text(
        f'name = "local-rapl"\nkind = "local"\n[power]\nsampler = "rapl"\nperiod_s = 0.1\n'
        f'sysfs = "{sysfs}"\n[trace]\nbuffer_size_kb = 1024\n'
    )
    th = threading.Thread(target=counters)
    th.start()
    try:
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "abtest.cli",
                "collect",
                "--target",
                str(target),
                "--label",
                "x",
                "--workload",
                "shell:name=sleep,cmd='sleep 1.5'",
                "-n",
                "1",
                "--store",
                str(tmp_path / "store"),
                "--no-progress",
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
        )
    finally:
        stop.set()
        th.join()
    assert r.returncode == 0, r.stderr[-2000:]
    d = tmp_path / "store/x/sleep/1"
    power = pl.read_csv(d / "power.csv")
    assert power.columns == ["ts_ns", "rail", "subsystem", "energy_uj"]
    assert set(power["rail"]) == {"package-0:0", "core:0:0"}
    for rail, g in power.group_by("rail"):
        e = g.sort("ts_ns")["energy_uj"].to_list()
        assert len(e) >= 10 and all(b >= a for a, b in zip(e, e[1:])), (rail, e)
    core = power.filter(pl.col("rail") == "core:0:0")["energy_uj"]
    assert core.max() > 3_000_000  # the wrap was unwrapped
    meta = json.loads((d / "meta.json").read_text())
    assert meta["power"]["aligned"] is True and meta["power"]["sampler"] == "rapl"
    # alignment: CLOCK_BOOTTIME samples fall inside the workload markers of the boot-clock trace
    t = Trace(d / "trace.dat")
    marks = t.df("marker")
    begin = marks.filter(pl.col("text").str.starts_with("abtest_workload_begin"))["ts"][0]
    end = marks.filter(pl.col("text").str.starts_with("abtest_workload_end"))["ts"][0]
    inside = power.filter((pl.col("ts_ns") >= begin - 50_000_000) & (pl.col("ts_ns") <= end + 50_000_000))
    assert inside.height >= 0.8 * power.height, (begin, end, power["ts_ns"].min(), power["ts_ns"].max())
    assert power["ts_ns"].max() - power["ts_ns"].min() >= 1_000_000_000  # ~1.5 s of sampling
