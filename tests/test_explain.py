"""`abtest explain`: the decomposition adds up to the delta, names the cluster / OPP / task a known transformation
changed, with the share computed independently here; rails without a model are explained honestly; without any
power the latency change is read against idle behaviour.

Stores are built in the tests from real traces:
* Juno (LISA's sched_load trace.dat, its plat_info.yml energy model): A = `trace-cmd report` text of the real
  trace; B = the same text with every frequency of the big cluster (CPUs 1 and 2, kernel events and devlib
  markers alike) raised to the next OPP of the model (450 -> 625 -> 800 -> 950 -> 1100 MHz);
* Pixel 7 Pro (perfetto, 24 power rails, no energy model for Tensor G2 here): A = power.csv of the rail samples,
  B = the same with the big cluster's rail (S2M_VDD_CPUCL2) x 1.10, both x (0.99, 1.00, 1.01) per iteration.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from shared_data import TRACES

from abtest import Trace
from abtest.analysis.platform import load_platform
from abtest.cli import cli
from abtest.compare.explain import explain
from abtest.store.reader import load_label

ROOT = Path(__file__).resolve().parent.parent
JUNO = TRACES / "lisa" / "sched_load-trace.dat"
JUNO_PLAT = TRACES / "lisa" / "sched_load-plat_info.yml"
PIXEL = TRACES / "PerfettoTraceScript" / "pixel7pro-power-rails.perfetto-trace"
BIG = (1, 2)
UP = {450000: 625000, 625000: 800000, 800000: 950000, 950000: 1100000, 1100000: 1100000}
FREQ = re.compile(r"(cpu_frequency(?:_devlib)?:\s+state=)(\d+)( cpu_id=)(\d+)")


def _shift(line: str) -> str:
    m = FREQ.search(line)
    if not m or int(m[4]) not in BIG:
        return line
    return line[: m.start(2)] + str(UP[int(m[2])]) + line[m.end(2) :]


@pytest.fixture(scope="module")
def juno_report() -> str:
    return subprocess.run(
        ["trace-cmd", "report", str(JUNO)], capture_output=True, text=True, check=True, timeout=120
    ).stdout


@pytest.fixture(scope="module")
def juno_store(tmp_path_factory, juno_report):
    root = tmp_path_factory.mktemp("juno") / "store"
    shifted = "\n".join(_shift(x) for x in juno_report.splitlines()) + "\n"
    for label, text in (("A", juno_report), ("B", shifted)):
        for i in range(3):
            d = root / label / "boot" / str(i)
            d.mkdir(parents=True)
            (d / "trace.txt").write_text(text)
            shutil.copy(JUNO_PLAT, d / "platform.yml")
            (d / ".complete").touch()
    return root


def _expected_big_delta_mw(report: str) -> tuple[float, dict]:
    """Independent of abtest's attribution: from the report text, each big CPU's busy time (cpu_idle state
    4294967295 -> busy, any other state -> idle; before a CPU's first cpu_idle event, busy if that event is an
    entry into a state) at each known frequency (kernel events and devlib markers), priced with the model's
    per-CPU OPP power after and before the shift; mW over the window from the first to the last event."""
    plat = load_platform(JUNO_PLAT)
    dom = next(d for d in plat["domains"] if set(d["cpus"]) == set(BIG))
    price = {o["frequency_khz"]: o["power_mw"] for o in dom["opps"]}
    line = re.compile(r"\[(\d+)\]\s+(\d+\.\d+): (cpu_idle|print|cpu_frequency):.*?state=(\d+) cpu_id=(\d+)")
    ts_all = [float(m) for m in re.findall(r"\[\d+\]\s+(\d+\.\d+):", report)]
    t0, t1 = min(ts_all), max(ts_all)
    events = {c: [] for c in BIG}
    for m in line.finditer(report):
        cpu = int(m[5])
        if cpu in BIG and (m[3] == "cpu_idle" or "cpu_frequency" in m[0]):
            events[cpu].append((float(m[2]), "idle" if m[3] == "cpu_idle" else "freq", int(m[4])))
    busy_at: dict[int, float] = {}
    for _cpu, evs in events.items():
        evs.sort()
        first_idle = next(e for e in evs if e[1] == "idle")
        busy = first_idle[2] != 4294967295  # before an entry into a state the CPU was busy
        freq, t = None, t0
        for ts, kind, val in evs + [(t1, "end", 0)]:
            if busy and freq is not None:
                busy_at[freq] = busy_at.get(freq, 0.0) + (ts - t)
            t = ts
            if kind == "idle":
                busy = val == 4294967295
            elif kind == "freq":
                freq = val
    window = t1 - t0
    delta = sum(sec * (price[UP[f]] - price[f]) for f, sec in busy_at.items()) / window
    return delta, busy_at


def test_juno_opp_shift_is_attributed_to_the_big_cluster(juno_store, juno_report):
    (ex,) = explain(load_label(juno_store / "A"), load_label(juno_store / "B"), jobs=1)
    (ch,) = ex.channels
    assert ch.model_source == "LISA plat_info.yml (juno)" and "no measured power" in ch.source
    # the identity: domain rows, and the OPP-level rows, each add up to the delta
    assert sum(c.delta_mw for c in ch.domains) == pytest.approx(ch.delta_mw, rel=1e-9, abs=1e-9)
    assert sum(c.delta_mw for c in ch.contributions) == pytest.approx(ch.delta_mw, rel=1e-9, abs=1e-9)
    top = ch.domains[0]
    assert (top.kind, top.domain) == ("active", "cpu1-2")
    expected, busy_at = _expected_big_delta_mw(juno_report)
    assert top.delta_mw == pytest.approx(expected, rel=1e-4)
    assert top.share_pct == pytest.approx(100 * expected / ch.delta_mw, rel=1e-4)
    # the OPP that gained the most: the frequency with the most busy time, raised by one OPP
    busiest = max(busy_at, key=busy_at.get)
    gain = max((c for c in ch.contributions if c.kind == "active" and c.domain == "cpu1-2"), key=lambda c: c.delta_mw)
    assert gain.opp_khz == UP[busiest] and gain.dtime_ms_per_s > 0
    # tasks: the same run time, priced higher
    assert ch.tasks[0].domain == "cpu1-2" and abs(ch.tasks[0].dtime_ms_per_s) < 1e-6 and ch.tasks[0].delta_mw > 0
    assert sum(c.delta_mw for c in ch.tasks) <= top.delta_mw + 1e-9
    assert "active time moved from 800 MHz to 950 MHz" in " ".join(ex.narrative)


def _rail_store(root: Path, rail: str, label_scales: dict[str, float]) -> Path:
    """A store of the Pixel 7 Pro's real rail samples as power.csv: per label, `rail` x the label's scale, every
    rail x (0.99, 1.00, 1.01) per iteration (workload "video", 3 iterations)."""
    pr = Trace(PIXEL).df("power_rail")
    for label, up in label_scales.items():
        for i, s in enumerate((0.99, 1.0, 1.01)):
            d = root / label / "video" / str(i)
            d.mkdir(parents=True)
            scale = pl.when(pl.col("rail") == rail).then(up * s).otherwise(s)
            pr.select(
                pl.col("ts").alias("ts_ns"),
                pl.col("rail").cast(pl.Utf8),
                pl.col("subsystem").cast(pl.Utf8),
                (pl.col("energy_uj") * scale).alias("energy_uj"),
            ).write_csv(d / "power.csv")
            (d / ".complete").touch()
    return root


@pytest.fixture(scope="module")
def pixel_store(tmp_path_factory):
    root = _rail_store(tmp_path_factory.mktemp("pixel") / "store", "S2M_VDD_CPUCL2", {"A": 1.0, "B": 1.10})
    for trace_dir in root.glob("*/video/*"):
        (trace_dir / "trace.perfetto-trace").symlink_to(PIXEL)
    return root


def test_rails_without_a_model_are_explained_honestly(pixel_store):
    r = CliRunner().invoke(
        cli,
        ["explain", "A", "B", "--store", str(pixel_store), "--channel", "CPU-Big", "--format", "json", "--jobs", "1"],
    )
    assert r.exit_code == 0, r.output
    (w,) = json.loads(r.output)["workloads"]
    (ch,) = w["channels"]
    assert ch["channel"] == "CPU-Big" and ch["delta_pct"] == pytest.approx(10.0, abs=1e-6)
    (c,) = ch["contributions"]
    assert c["kind"] == "unmodelled" and c["share_pct"] == pytest.approx(100.0)
    assert any("no energy model" in x for x in ch["limits"])
    assert ch["source"].startswith("measured: power.csv")


def test_demo_store_without_power_reads_latency_against_idle(tmp_path):
    store = tmp_path / "demo"
    shutil.copytree(ROOT / "examples" / "idle-governors", store)
    r = CliRunner().invoke(cli, ["explain", "menu", "ladder", "--store", str(store), "--format", "text", "--jobs", "1"])
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())
    # latency.* is sched_wakeup -> switch-in (the definition LISA, runqlat and the wakeup tracer use)
    assert "Wakeup latency: latency.gmean_us 12.47 -> 14.2 us (+13.9 %, regression)" in flat
    assert "idle.state.state0.residency_pct" in flat and "power cannot be attributed" in flat


def test_compare_explain_and_html_section(juno_store, tmp_path):
    out = tmp_path / "r.html"
    r = CliRunner().invoke(
        cli, ["compare", "A", "B", "--store", str(juno_store), "--explain", "--html", str(out), "--jobs", "1"]
    )
    assert r.exit_code == 0, r.output
    assert "Where CPU (energy model estimate) went" in r.output
    html = out.read_text()
    assert '<h2 id="explain">' in html and 'class="explain"' in html and "active time moved from" in html


@pytest.fixture(scope="module")
def mapped_store(tmp_path_factory):
    """Pixel 7 Pro rails; the store's abtest.toml maps CPU-Big to the mid cluster's rail (S3M_VDD_CPUCL1), and B
    raises only that rail by 5 % (the built-in mapping would read CPU-Big from S2M_VDD_CPUCL2: unchanged)."""
    root = tmp_path_factory.mktemp("mapped") / "store"
    root.mkdir()
    (root / "abtest.toml").write_text(
        '[power.channels]\n"CPU-Big" = ["S3M_VDD_CPUCL1"]\n"CPU-Little" = ["S4M_VDD_CPUCL0"]\n'
    )
    return _rail_store(root, "S3M_VDD_CPUCL1", {"A": 1.0, "B": 1.05})


def test_explain_reads_the_values_compare_computed_with_the_store_mapping(mapped_store):
    """explain and compare agree on every channel of a store with a [power.channels] mapping (issue 39): explain
    used to recompute each iteration with the built-in mapping (CPU-Big +0.00 % while compare said +5.00 %) and
    overwrote the iterations' metrics caches with that other key."""
    args = ["--store", str(mapped_store), "--format", "json", "--jobs", "1"]
    r = CliRunner().invoke(cli, ["compare", "A", "B", *args])
    assert r.exit_code == 0, r.output
    (w,) = json.loads(r.output)["workloads"]
    compared = {
        m["name"]: m["delta_pct"]
        for m in w["metrics"]
        if m["name"].startswith("power.") and not m["name"].startswith("power.rail.")
    }
    assert compared["power.CPU-Big"] == pytest.approx(5.0, abs=1e-6)
    caches = {p: p.read_bytes() for p in mapped_store.rglob(".abtest-metrics.json")}
    assert len(caches) == 6
    for channel in ("CPU-Big", "CPU-Little"):
        r = CliRunner().invoke(cli, ["explain", "A", "B", *args, "--channel", channel])
        assert r.exit_code == 0, r.output
        (ew,) = json.loads(r.output)["workloads"]
        (ch,) = ew["channels"]
        assert ch["delta_pct"] == pytest.approx(compared[f"power.{channel}"], abs=1e-9), channel
    # explain wrote no cache entry of its own: the next compare reads the caches compare wrote
    assert {p: p.read_bytes() for p in mapped_store.rglob(".abtest-metrics.json")} == caches
