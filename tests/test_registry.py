"""The metric registry: declarations are unique and complete, every computed value is declared, every declared
metric reaches `abtest compare --format json` with its unit and direction, docs/metrics.md is generated from
it, and the Android rails path (perfetto power rails -> power.<Channel> -> power table -> gate) works on the
real Pixel 7 Pro trace."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from shared_data import TRACES

from abtest import Trace
from abtest.analysis import registry
from abtest.cli import cli
from abtest.commands.metrics import registry_markdown
from abtest.metric_spec import Aggregation, Direction, Grouping, MetricSpec, MetricValue
from abtest.store.writer import write_iteration

ROOT = Path(__file__).resolve().parent.parent
PIXEL = TRACES / "PerfettoTraceScript" / "pixel7pro-power-rails.perfetto-trace"
X86 = TRACES.parent / "traces" / "x86-vm"
JUNO = TRACES / "lisa" / "sched_load-trace.dat"
JUNO_PLAT = TRACES / "lisa" / "sched_load-plat_info.yml"
EXPECTED = json.loads((TRACES / "expected-counts.json").read_text())
TRACE_FILES = sorted(k for k in EXPECTED if not k.endswith(".yml"))


def test_declarations_are_unique_and_resolvable():
    seen = set()
    for _a, s in registry.all_specs():
        assert s.key not in seen
        seen.add(s.key)
        assert s.unit is not None and isinstance(s.direction, Direction) and isinstance(s.aggregation, Aggregation)
        assert s.description, f"{s.key}: every metric says what it is"
        group = None if s.group is Grouping.NONE else "Some-Name.x"
        assert registry.resolve(s.full_key(group)) == (s, group), s.key
    assert registry.resolve("no.such.metric") is None


def test_compute_refuses_an_undeclared_value():
    other = MetricSpec("elsewhere.x", "", Direction.NONE)
    rogue = registry.Analysis(
        "rogue",
        "a deliberately wrong analysis",
        (),
        (),
        (registry.idle.TOO_DEEP_PCT,),
        compute=lambda trace, opts: [MetricValue(other, 1.0)],
    )
    with pytest.raises(registry.UndeclaredMetricError, match="elsewhere.x"):
        registry.compute(rogue, Trace(TRACES / "trappy" / "trace_idle.dat"))


@pytest.mark.parametrize("name", TRACE_FILES)
def test_every_value_on_every_shared_trace_is_declared(name):
    """registry.compute() checks each value against the analysis' declarations; here every analysis runs on every
    shared trace, so a module that computes an undeclared metric fails this test."""
    t = Trace(TRACES / name)
    for a in list(registry.TRACE_ANALYSES) + [registry.POWER]:
        try:
            vals = registry.compute(a, t)
        except registry.MissingEventsError:
            continue
        except ValueError:  # e.g. a platform the trace does not carry
            continue
        for v in vals:
            assert v.spec in a.metrics and v.key == v.spec.full_key(v.group)


def test_docs_metrics_md_is_generated_from_the_registry():
    doc = (ROOT / "docs" / "metrics.md").read_text()
    assert doc == registry_markdown() + "\n", "regenerate: abtest metrics --format markdown > docs/metrics.md"


def test_metrics_command_lists_every_declaration():
    r = CliRunner().invoke(cli, ["metrics", "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    keys = [m["key"] for a in doc["analyses"] for m in a["metrics"]]
    assert sorted(keys) == sorted(s.key for _, s in registry.all_specs())
    power = next(a for a in doc["analyses"] if a["name"] == "power")
    assert power["events"] == ["power_rail"]
    assert {"key": "power.{channel}", "unit": "mW", "direction": "lower"}.items() <= power["metrics"][0].items()


# ---------------------------------------------------------------- every declared metric reaches compare
WORKLOAD_VALUES = {
    "fps": 59.9,
    "jank_pct": 3.0,
    "mean_frame_ms": 9.0,
    "p95_frame_ms": 14.0,
    "geekbench_single_core_score": 1000.0,
    "geekbench_multi_core_score": 3000.0,
    "pcmark_work": 9000.0,
    "hackbench_time_s": 1.5,
    "bogo_ops": 1000.0,
    "bogo_ops_per_s": 100.0,
    "events_per_s": 500.0,
    "latency_avg_ms": 2.0,
    "latency_p95_ms": 5.0,
    "latency_avg_us": 40.0,
    "latency_max_us": 400.0,
    "latency_min_us": 10.0,
    "build_time_s": 300.0,
    "duration_s": 10.0,
}


def _link(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(src, dst)


@pytest.fixture(scope="module")
def everything_store(tmp_path_factory):
    """Labels A and B, 3 iterations each, of workloads built from real files: the Pixel 7 Pro trace (power
    rails, frequency, idle, placement), an x86 trace (idle misses, wakeup latency), the Juno trace with its
    plat_info.yml beside it (energy-model estimate), LISA's Juno text trace (overutilized), trappy's thermal trace,
    and the synthetic kernel-views trace (capacity, uclamp, root domains, cgroups); metrics.json of every workload
    metric (constructed values, +1 % per iteration so that they are not constant)."""
    root = tmp_path_factory.mktemp("all") / "store"
    spec = importlib.util.spec_from_file_location(
        "make_kernel_views_trace", ROOT / "tests" / "data" / "make_kernel_views_trace.py"
    )
    views = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(views)
    sources = {
        "android": (PIXEL, "trace.perfetto-trace", None),
        "x86": (X86 / "x86-menu-hackbench-cyclictest.dat", "trace.dat", None),
        "juno": (JUNO, "trace.dat", JUNO_PLAT),
        # sched_overutilized (real, LISA's Juno text trace); thermal zones, cooling devices (real, trappy)
        "juno_txt": (TRACES / "lisa" / "trace_txt-trace.txt", "trace.txt", None),
        "thermal": (TRACES / "trappy" / "trace.txt", "trace.txt", None),
        # capacity, uclamp, per-root-domain overutilized, cgroups: no real trace here has them; SYNTHETIC
        "views": (views.write(root.parent / "kernel_views_synthetic.txt"), "trace.txt", None),
    }
    for label in ("A", "B"):
        for wl, (src, name, plat) in sources.items():
            for i in range(3 if wl in ("android", "x86", "juno") else 2):  # 2 are enough to reach compare
                d = root / label / wl / str(i)
                values = (
                    {
                        k: {"value": v * (1 + 0.01 * i), "unit": "fps" if k == "fps" else "", "lower_is_better": None}
                        for k, v in WORKLOAD_VALUES.items()
                    }
                    if wl == "x86"
                    else {}
                )
                write_iteration(d, values, {"kernel": {"release": label}}, complete=False)
                _link(src, d / name)
                if plat:
                    _link(plat, d / "platform.yml")
                (d / ".complete").touch()
    return root


def test_every_declared_metric_appears_in_compare_json(everything_store):
    r = CliRunner().invoke(
        cli, ["compare", "A", "B", "--store", str(everything_store), "--format", "json", "--jobs", "1"]
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    seen: dict[str, dict] = {}
    for w in doc["workloads"]:
        for m in w["metrics"]:
            seen.setdefault(m["key_template"], m)
    declared = {s.key: s for _, s in registry.all_specs()}
    missing = sorted(set(declared) - set(seen))
    assert not missing, f"declared but never compared: {missing}"
    for key, m in seen.items():
        s = declared[key]
        assert m["declared"] and m["unit"] == s.unit and m["direction"] == s.direction.value, key
        assert m["aggregation"] == s.aggregation.value and m["grouping"] == s.group.value, key
    # metrics.json's own unit and direction are overridden by the declaration; a unit that disagrees is noted
    x86 = next(w for w in doc["workloads"] if w["workload"] == "x86")
    fps = next(m for m in x86["metrics"] if m["name"] == "fps")
    assert fps["unit"] == "frames/s" and fps["lower_is_better"] is False
    assert any("metric fps: metrics.json says unit 'fps', the registry declares 'frames/s'" in n for n in x86["notes"])


# ---------------------------------------------------------------- the Android rails path, on the real Pixel trace
def _rails_by_hand(path: Path) -> dict[str, float]:
    """Average power per rail (mW) from the rail samples: (last - first cumulative energy) / (last - first time),
    for rails whose counter never decreases (all 24 of this trace's)."""
    pr = Trace(path).df("power_rail")
    out = {}
    for rail, g in pr.group_by(pl.col("rail").cast(pl.Utf8)):
        g = g.sort("ts")
        e, ts = g["energy_uj"].to_list(), g["ts"].to_list()
        assert all(b >= a for a, b in zip(e, e[1:]))
        out[rail[0]] = (e[-1] - e[0]) / ((ts[-1] - ts[0]) / 1e9) / 1000.0
    return out


def _power_csv(path: Path, dst: Path, scale: float) -> None:
    """power.csv written from the real trace's rail samples, energy scaled by `scale` (a known transformation)."""
    pr = Trace(path).df("power_rail")
    pr.select(
        pl.col("ts").alias("ts_ns"),
        pl.col("rail").cast(pl.Utf8),
        pl.col("subsystem").cast(pl.Utf8),
        (pl.col("energy_uj") * scale).alias("energy_uj"),
    ).write_csv(dst)


@pytest.fixture(scope="module")
def pixel_store(tmp_path_factory):
    """A/A: labels A and A2, 3 iterations each linking the real Pixel trace (its 24 perfetto power rails).
    B: the same trace, plus a power.csv of its rail samples scaled by 1.05 x (0.99, 1.00, 1.01); C: the same
    scales without the 1.05 (so B vs C is a +5.00 % change on every rail and channel)."""
    root = tmp_path_factory.mktemp("pixel") / "store"
    for label, scales in (("A", None), ("A2", None), ("B", (1.05 * 0.99, 1.05, 1.05 * 1.01)), ("C", (0.99, 1.0, 1.01))):
        for i in range(3):
            d = root / label / "idle_screen" / str(i)
            write_iteration(d, {}, {"kernel": {"release": "5.10.107"}}, complete=False)
            (d / "metrics.json").unlink()
            _link(PIXEL, d / "trace.perfetto-trace")
            if scales:
                _power_csv(PIXEL, d / "power.csv", scales[i])
            (d / ".complete").touch()
    return root


def test_pixel_rails_give_the_seed_power_table(pixel_store):
    r = CliRunner().invoke(cli, ["compare", "A", "A2", "--store", str(pixel_store), "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    (w,) = doc["workloads"]
    by = {m["name"]: m for m in w["metrics"]}
    hand = _rails_by_hand(PIXEL)
    assert by["power.CPU-Little"]["value_a"] == pytest.approx(hand["S4M_VDD_CPUCL0"], rel=1e-3)
    assert round(by["power.CPU-Little"]["value_a"], 2) == 26.51
    assert by["power.Total"]["value_a"] == pytest.approx(sum(hand.values()), rel=1e-3)
    assert round(by["power.Total"]["value_a"], 1) == 469.4
    assert by["power.CPU"]["value_a"] == pytest.approx(
        hand["S4M_VDD_CPUCL0"] + hand["S3M_VDD_CPUCL1"] + hand["S2M_VDD_CPUCL2"], rel=1e-3
    )
    for ch in ("CPU", "CPU-Big", "CPU-Little", "CPU-Mid", "GPU", "Total"):
        m = by[f"power.{ch}"]
        assert m["verdict"] == "no change" and m["unit"] == "mW" and m["source"].startswith("trace:power_rail")
    table = next(t for t in doc["tables"] if t["key"] == "power_channels")
    assert [r[1] for r in table["rows"]][:12:2] == ["CPU", "CPU-Big", "CPU-Little", "CPU-Mid", "GPU", "Total"]
    assert any("built-in mapping for Google Pixel 6/7/8" in n for n in table["notes"])
    # the terminal form prints the same table under the seeds' title
    r = CliRunner().invoke(cli, ["compare", "A", "A2", "--store", str(pixel_store)])
    assert "Average power" in r.output and "CPU-Little" in r.output


def test_pixel_gate_passes_a_and_detects_scaled_rails(pixel_store, tmp_path):
    th = tmp_path / "th.toml"
    th.write_text('[metrics."power.Total"]\nmax_regression_pct = 3.0\n')
    r = CliRunner().invoke(cli, ["gate", "A", "A2", "--store", str(pixel_store), "--thresholds", str(th)])
    assert r.exit_code == 0, r.output
    assert "ok    idle_screen/power.Total" in r.output
    r = CliRunner().invoke(cli, ["gate", "C", "B", "--store", str(pixel_store), "--thresholds", str(th)])
    assert r.exit_code == 1, r.output
    assert "FAIL  idle_screen/power.Total: significant regression: power.Total +5.00 %" in r.output
    doc = json.loads(
        CliRunner().invoke(cli, ["compare", "C", "B", "--store", str(pixel_store), "--format", "json"]).output
    )
    by = {m["name"]: m for m in doc["workloads"][0]["metrics"]}
    for ch in ("CPU-Little", "GPU", "Total"):
        assert by[f"power.{ch}"]["delta_pct"] == pytest.approx(5.0, abs=1e-6)
        assert by[f"power.{ch}"]["verdict"] == "regression" and by[f"power.{ch}"]["source"].startswith("power.csv")
    assert any("one power source per iteration" in n for n in doc["workloads"][0]["notes"])


# ---------------------------------------------------------------- the example thresholds on the bundled demo store
def test_example_thresholds_work_on_the_demo_store(tmp_path):
    store = tmp_path / "demo"
    shutil.copytree(ROOT / "examples" / "idle-governors", store)
    r = CliRunner().invoke(
        cli,
        [
            "gate",
            "menu",
            "ladder",
            "--store",
            str(store),
            "--thresholds",
            str(ROOT / "ci" / "thresholds.toml"),
            "--junit",
            str(tmp_path / "g.xml"),
        ],
    )
    assert r.exit_code in (0, 1), r.output  # a decision, not "bad input"
    assert "cyclictest/latency.gmean_us: latency.gmean_us (gmean) +13.93 %" in r.output
    assert "skip  cyclictest/power.Total" in r.output  # declared, measured nowhere here, required = false
    assert (tmp_path / "g.xml").read_text().count("<testcase") == 5
