"""Seed table reproduction: a store holding the seeds' numbers prints the seeds' diffs.

What is real here: nothing is measured. The store is CONSTRUCTED (metrics.json per iteration, and power.csv
files with constant per-rail power) so that the means are the numbers the seeds reported:
  cpu_util boost revert: YouTube 59.94 vs 59.93 FPS, SoC power 913.6 -> 720.4 mW (diff -21.15 %), and two
  games whose SoC power changes by -9.05 % and -8.37 % (1520.0 -> 1382.44 mW, 2350.0 -> 2153.3 mW);
  uclamp sum vs max: Jankbench jank %, Geekbench single/multi, average power per channel (Pixel ODPM rail
  names, synthetic constant power).
Each iteration's value is mean + a zero-sum deviation, so the means are exact.
"""

import json

import pytest
from click.testing import CliRunner

from abtest.cli import cli
from abtest.compare.comparison import compare_labels
from abtest.compare.tables import format_value, seed_tables
from abtest.store.reader import load_store
from abtest.store.writer import write_iteration

DEVIATIONS = (-2.0, -1.0, 0.0, 1.0, 2.0)  # zero-sum: mean of value * (1 + d * spread) is the value
SEED_POWER_MW = {"youtube": (913.6, 720.4), "game_pubg": (1520.0, 1382.44), "game_genshin": (2350.0, 2153.3)}
SEED_FPS = {"youtube": (59.94, 59.93), "game_pubg": (59.1, 59.3), "game_genshin": (44.8, 45.6)}
EXPECTED_DIFF = {"youtube": "-21.15 %", "game_pubg": "-9.05 %", "game_genshin": "-8.37 %"}
# uclamp seed: per-rail constant power (mW) for A and B
RAILS = {
    "S4M_VDD_CPUCL0": (120.0, 100.0),
    "S3M_VDD_CPUCL1": (210.0, 190.0),
    "S2M_VDD_CPUCL2": (400.0, 330.0),
    "S2S_VDD_G3D": (150.0, 152.0),
    "S1M_VDD_MIF": (80.0, 80.0),
}


def _m(value, unit, lower_is_better):
    return {"value": value, "unit": unit, "lower_is_better": lower_is_better}


def _meta(label):
    release = {"A": "6.1.0-cpu-util-boost", "B": "6.1.0-revert"}[label]
    return {
        "kernel": {"release": release, "version": "#1 SMP PREEMPT", "cmdline": "console=ttyS0"},
        "hardware": {"cpu_model": "Tensor G2 (constructed store)", "cpus": 8},
        "governors": {"cpuidle": "menu", "cpufreq": {"policy0": {"governor": "schedutil"}}},
        "thermal": {"skin": {"temp_c": 31.0}},
        "settings": {"brightness": "50%"},
    }


def write_power_csv(path, rails_mw: dict, seconds: int = 10):
    """Constant power per rail, one sample per second: energy_uj = mW * s * 1000."""
    lines = ["ts_ns,rail,subsystem,energy_uj"]
    for t in range(seconds + 1):
        for rail, mw in rails_mw.items():
            lines.append(f"{t * 1_000_000_000},{rail},{rail.split('_')[-1]},{mw * t * 1000:.3f}")
    path.write_text("\n".join(lines) + "\n")


def build_seed_store(root, *, spread=0.001):
    """The constructed seed store under `root`; returns root. Labels A (baseline) and B."""
    for side, label in enumerate(("A", "B")):
        for w, powers in SEED_POWER_MW.items():
            for i, d in enumerate(DEVIATIONS):
                write_iteration(
                    root / label / w / f"iter-{i}",
                    {
                        "power.Total": _m(powers[side] * (1 + d * spread), "mW", True),
                        "fps": _m(SEED_FPS[w][side] * (1 + d * spread / 10), "fps", False),
                    },
                    _meta(label),
                )
        for i, d in enumerate(DEVIATIONS):
            it = write_iteration(
                root / label / "uclamp_mix" / f"iter-{i}",
                {
                    "jank_pct": _m((4.2, 3.1)[side] * (1 + d * 0.01), "%", True),
                    "geekbench_single_core_score": _m((1000.0, 1004.0)[side] * (1 + d * spread), "points", False),
                    "geekbench_multi_core_score": _m((3000.0, 2900.0)[side] * (1 + d * spread), "points", False),
                },
                _meta(label),
                complete=False,
            )
            write_power_csv(it / "power.csv", {r: v[side] * (1 + d * spread) for r, v in RAILS.items()})
            (it / ".complete").touch()
    return root


@pytest.fixture(scope="module")
def seed_store(tmp_path_factory):
    return build_seed_store(tmp_path_factory.mktemp("seed") / "results")


def test_seed_fps_power_table(seed_store):
    st = load_store(seed_store)
    c = compare_labels(st.labels["A"], st.labels["B"], with_trace=False)
    t = next(t for t in seed_tables(c) if t.key == "fps_power")
    cols = [name for name, _ in t.columns]
    rows = {(r[0], r[1]): r for r in t.rows}
    for w, diff in EXPECTED_DIFF.items():
        b = rows[(w, "B")]
        assert format_value(b[cols.index("diff")], "diff") == diff
        assert b[cols.index("SoC Power (mW)")] == pytest.approx(SEED_POWER_MW[w][1])
        assert rows[(w, "A")][cols.index("FPS")] == pytest.approx(SEED_FPS[w][0])
        assert b[cols.index("verdict")] == "improvement"  # power is lower_is_better
    yt = c.workload("youtube")
    assert yt.metric("fps").verdict.verdict == "no change"  # 59.94 vs 59.93 FPS


def test_seed_power_channels_from_power_csv(seed_store):
    st = load_store(seed_store)
    c = compare_labels(st.labels["A"], st.labels["B"], workload="uclamp_mix", with_trace=False)
    t = next(t for t in seed_tables(c) if t.key == "power_channels")
    assert [name for name, _ in t.columns] == ["workload", "channel", "tag", "value (mW)", "perc_diff", "verdict"]
    got = {(r[1], r[2]): r for r in t.rows}
    expect = {
        "CPU-Little": ["S4M_VDD_CPUCL0"],
        "CPU-Mid": ["S3M_VDD_CPUCL1"],
        "CPU-Big": ["S2M_VDD_CPUCL2"],
        "GPU": ["S2S_VDD_G3D"],
        "CPU": ["S4M_VDD_CPUCL0", "S3M_VDD_CPUCL1", "S2M_VDD_CPUCL2"],
        "Total": list(RAILS),
    }
    for ch, rails in expect.items():
        a = sum(RAILS[r][0] for r in rails)
        b = sum(RAILS[r][1] for r in rails)
        assert got[(ch, "A")][3] == pytest.approx(a, rel=1e-9), ch
        assert got[(ch, "A")][4] == 0.0, ch
        assert got[(ch, "B")][3] == pytest.approx(b, rel=1e-9), ch
        assert got[(ch, "B")][4] == pytest.approx(100 * (b - a) / a, rel=1e-9), ch
    # seed order first: CPU, CPU-Big, CPU-Little, CPU-Mid, GPU, Total, one row per kernel tag
    assert [r[1] for r in t.rows][:12:2] == ["CPU", "CPU-Big", "CPU-Little", "CPU-Mid", "GPU", "Total"]
    assert [r[2] for r in t.rows][:2] == ["A", "B"]
    assert got[("CPU-Big", "B")][5] == "improvement"  # 400 -> 330 mW
    assert got[("GPU", "B")][5] == "regression"  # 150 -> 152 mW (+1.33 %, tight spread)
    assert got[("Memory", "B")][5] == "no change"  # 80 -> 80 mW, an extra channel after the seed six
    assert any("built-in mapping for Google Pixel 6/7/8" in n for n in t.notes)  # the mapping used is stated


def test_seed_geekbench_and_jank(seed_store):
    st = load_store(seed_store)
    c = compare_labels(st.labels["A"], st.labels["B"], workload="uclamp_mix", with_trace=False)
    tables = {t.key: t for t in seed_tables(c)}
    gb = tables["geekbench"]
    b = next(r for r in gb.rows if r[1] == "B")
    assert b[2] == pytest.approx(1004.0, rel=1e-5) and format_value(b[3], "diff") == "+0.40 %"  # gmean
    assert b[4] == pytest.approx(2900.0, rel=1e-5) and format_value(b[5], "diff") == "-3.33 %"
    jank = tables["jank"]
    b = next(r for r in jank.rows if r[1] == "B")
    assert b[2] == pytest.approx(3.1) and format_value(b[3], "diff") == "-26.19 %"
    assert c.workload("uclamp_mix").metric("geekbench_multi_core_score").verdict.verdict == "regression"  # -3.3 %


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_cli_prints_seed_diffs(seed_store, fmt):
    r = CliRunner().invoke(cli, ["compare", "A", "B", "--store", str(seed_store), "--format", fmt, "--no-trace"])
    assert r.exit_code == 0, r.output
    for diff in EXPECTED_DIFF.values():
        assert diff in r.output
    assert "6.1.0-cpu-util-boost" in r.output and "Tensor G2" in r.output


def test_cli_json_keys(seed_store):
    r = CliRunner().invoke(
        cli,
        ["compare", "A", "B", "--store", str(seed_store), "--format", "json", "--workload", "youtube", "--no-trace"],
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["schema"] == "abtest.compare/1" and doc["label_a"] == "A" and doc["label_b"] == "B"
    (w,) = doc["workloads"]
    assert w["workload"] == "youtube" and w["n_a"] == 5 and w["n_b"] == 5
    m = next(m for m in w["metrics"] if m["name"] == "power.Total")
    assert m["key_template"] == "power.{channel}" and m["group"] == "Total" and m["declared"]
    assert round(m["delta_pct"], 2) == -21.15
    assert m["verdict"] == "improvement" and m["a"]["n"] == 5 and m["unit"] == "mW"
    lo, hi = m["bootstrap_ci95_pct"]
    assert lo < m["delta_pct"] < hi
    for key in ("p_mannwhitney", "p_welch", "decision_test", "verdict_text", "need_more_iterations", "values_a"):
        assert key in m
    fps_power = next(t for t in doc["tables"] if t["key"] == "fps_power")
    assert fps_power["columns"][:3] == ["workload", "kernel", "FPS"]
    assert w["meta_a"]["kernel.release"] == "6.1.0-cpu-util-boost"
