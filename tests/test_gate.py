"""`abtest gate`: exit codes 0 / 1 / 2, thresholds file handling, JUnit XML (parsed).

Stores here are constructed (metrics.json values chosen by the test, stated next to each case)."""

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from abtest.cli import cli
from abtest.compare.gate import ThresholdsError, load_thresholds
from abtest.store.writer import write_iteration

REPO = Path(__file__).resolve().parents[1]
DEV = (-2.0, -1.0, 0.0, 1.0, 2.0)  # zero-sum deviations, x 1 % of the value: CV ~1.6 %


def _store(root, b_power_factor, *, n_b=5, nan_in_b=False, fps=True, power_key="soc_power_mw"):
    """soc_power_mw: a user's own metrics.json key (declared by the file); power.Total: the declared channel."""
    for label, factor, n in (("base", 1.0, 5), ("cand", b_power_factor, n_b)):
        for i in range(n):
            d = DEV[i]
            metrics = {power_key: {"value": 1000.0 * factor * (1 + 0.01 * d), "unit": "mW", "lower_is_better": True}}
            if fps:
                metrics["fps"] = {"value": 60.0 * (1 + 0.001 * d), "unit": "fps", "lower_is_better": False}
            if nan_in_b and label == "cand" and i == 2:
                metrics[power_key]["value"] = None  # JSON null: a failed measurement
            write_iteration(root / label / "video" / f"{i}", metrics, {"kernel": {"release": label}})
    return root


THRESHOLDS = """alpha = 0.05
[metrics.soc_power_mw]
max_regression_pct = 3.0
[metrics.fps]
max_regression_pct = 1.0
"""


def _gate(store, thresholds_text, tmp_path, *extra):
    th = tmp_path / "thresholds.toml"
    th.write_text(thresholds_text)
    junit = tmp_path / "junit.xml"
    r = CliRunner().invoke(
        cli,
        [
            "gate",
            "base",
            "cand",
            "--store",
            str(store),
            "--thresholds",
            str(th),
            "--junit",
            str(junit),
            "--no-trace",
            *extra,
        ],
    )
    return r, junit


def _junit(path):
    root = ET.parse(path).getroot()
    suite = root.find("testsuite")
    cases = {(c.get("classname"), c.get("name")): c for c in suite.iter("testcase")}
    return suite, cases


def test_regression_beyond_threshold_exits_1(tmp_path):
    store = _store(tmp_path / "s", 1.05)  # power +5 % (CV 1.6 %, n = 5): significant, beyond 3 %
    r, junit = _gate(store, THRESHOLDS, tmp_path)
    assert r.exit_code == 1, r.output
    assert "FAIL  video/soc_power_mw" in r.output and "+5.00 %" in r.output
    suite, cases = _junit(junit)
    assert suite.get("failures") == "1" and suite.get("errors") == "0" and suite.get("tests") == "2"
    fail = cases[("abtest.gate.video", "soc_power_mw")].find("failure")
    assert fail is not None and fail.get("type") == "regression" and "+5.00 %" in fail.get("message")
    assert cases[("abtest.gate.video", "fps")].find("failure") is None
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["exit_code"] == "1" and props["label_a"] == "base"


def test_small_regression_and_improvement_pass(tmp_path):
    r, junit = _gate(_store(tmp_path / "small", 1.01), THRESHOLDS, tmp_path)  # +1 %: under the 3 % limit
    assert r.exit_code == 0, r.output
    suite, _ = _junit(junit)
    assert suite.get("failures") == "0" and suite.get("errors") == "0"
    r, _ = _gate(_store(tmp_path / "better", 0.90), THRESHOLDS, tmp_path)  # -10 % power: improvement
    assert r.exit_code == 0, r.output
    assert "improvement" in r.output


def test_single_iteration_is_not_enough_data(tmp_path):
    r, junit = _gate(_store(tmp_path / "s", 1.05, n_b=1), THRESHOLDS, tmp_path)
    assert r.exit_code == 2, r.output
    assert "not enough data: n = 5 vs 1" in r.output
    suite, cases = _junit(junit)
    assert int(suite.get("errors")) >= 1
    assert cases[("abtest.gate.video", "soc_power_mw")].find("error").get("type") == "bad_input"


def test_nan_metric_is_bad_input(tmp_path):
    r, _ = _gate(_store(tmp_path / "s", 1.0, nan_in_b=True), THRESHOLDS, tmp_path)
    assert r.exit_code == 2, r.output
    assert "NaN/null values in" in r.output and "cand/video/2" in r.output


def test_missing_gated_metric(tmp_path):
    store = _store(tmp_path / "s", 1.0, fps=False)
    r, _ = _gate(store, THRESHOLDS, tmp_path)
    assert r.exit_code == 2 and "gated metric fps was found in no compared workload" in r.output
    r, _ = _gate(
        store, THRESHOLDS.replace("max_regression_pct = 1.0", "max_regression_pct = 1.0\nrequired = false"), tmp_path
    )
    assert r.exit_code == 0, r.output


def test_regression_wins_over_errors(tmp_path):
    # a significant regression is reported as exit 1 even when another gated metric lacks data
    store = _store(tmp_path / "s", 1.05, fps=False)
    r, _ = _gate(store, THRESHOLDS, tmp_path)
    assert r.exit_code == 1, r.output


@pytest.mark.parametrize(
    "text,needle",
    [
        ("alpha = 0.05\n", "no [metrics.<name>] tables"),
        ("[metrics.fps]\nmax_regression = 1\n", "missing max_regression_pct"),
        ("alpha = 2\n[metrics.fps]\nmax_regression_pct = 1\n", "alpha: value 2 out of range"),
        ("[metrics.fps\n", "invalid TOML"),
    ],
)
def test_bad_thresholds_file(tmp_path, text, needle):
    store = _store(tmp_path / "s", 1.0)
    r, _ = _gate(store, text, tmp_path)
    assert r.exit_code == 2 and needle in r.output, r.output
    assert "thresholds.toml" in r.output


def test_unknown_label_and_missing_thresholds(tmp_path):
    store = _store(tmp_path / "s", 1.0)
    r = CliRunner().invoke(
        cli, ["gate", "base", "nope", "--store", str(store), "--thresholds", str(REPO / "ci" / "thresholds.toml")]
    )
    assert r.exit_code == 2 and "label 'nope' not found" in r.output and "base, cand" in r.output
    with pytest.raises(ThresholdsError, match="not found"):
        load_thresholds(tmp_path / "absent.toml")


def test_shipped_thresholds_and_real_exit_code(tmp_path):
    """ci/thresholds.toml parses; the installed entry point (abtest.cli:main) returns the gate's exit code."""
    th = load_thresholds(REPO / "ci" / "thresholds.toml")
    assert th.alpha == 0.05 and {m.name for m in th.metrics} >= {"power.Total", "fps"}
    store = _store(tmp_path / "s", 1.05, power_key="power.Total")
    junit = tmp_path / "j.xml"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "abtest.cli",
            "gate",
            "base",
            "cand",
            "--store",
            str(store),
            "--thresholds",
            str(REPO / "ci" / "thresholds.toml"),
            "--junit",
            str(junit),
            "--no-trace",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 1, p.stdout + p.stderr
    assert "gate FAILED" in p.stderr
    suite, cases = _junit(junit)
    assert cases[("abtest.gate.video", "power.Total")].find("failure") is not None
    # optional metrics absent from the store are skipped, not errors
    skipped = {name for (_, name), c in cases.items() if c.find("skipped") is not None}
    assert skipped == {"power.CPU", "jank_pct", "latency.gmean_us"} and suite.get("skipped") == "3"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "abtest.cli",
            "gate",
            "base",
            "missing",
            "--store",
            str(store),
            "--thresholds",
            str(REPO / "ci" / "thresholds.toml"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and "not found" in p.stderr


# ---------------------------------------------------------------- statistics at the edges (issue 27, 11-14)
def _jank_store(root, a_values, b_values, metric="jank_pct"):
    unit = "mW" if metric.startswith("power.") else "%"  # the declared unit (another one would not be compared)
    for label, vals in (("base", a_values), ("cand", b_values)):
        for i, v in enumerate(vals):
            write_iteration(root / label / "ui" / str(i), {metric: {"value": v, "unit": unit, "lower_is_better": True}})
    return root


def test_zero_baseline_regression_fails_the_gate(tmp_path):
    """jank 0 % in every A iteration, ~10 % in B: no percent scale exists, the change is significant and in the
    bad direction, so the gate fails (it used to say "changed" and pass)."""
    store = _jank_store(tmp_path / "s", [0.0] * 5, [9.8, 10.1, 10.0, 9.9, 10.2])
    r, junit = _gate(store, "[metrics.jank_pct]\nmax_regression_pct = 5.0\n", tmp_path)
    assert r.exit_code == 1, r.output
    assert "A's mean is 0" in r.output and "regression" in r.output
    suite, cases = _junit(junit)
    assert cases[("abtest.gate.ui", "jank_pct")].find("failure") is not None


def test_zero_baseline_improvement_and_all_zero(tmp_path):
    store = _jank_store(tmp_path / "s", [0.0] * 5, [0.0] * 5)
    r, _ = _gate(store, "[metrics.jank_pct]\nmax_regression_pct = 5.0\n", tmp_path)
    assert r.exit_code == 0 and "no change" in r.output, r.output


def test_many_iterations_do_not_overflow(tmp_path):
    """600 iterations per side (the exact Mann-Whitney minimum p used 2 / C(n_a + n_b, n_a), which overflows a
    float beyond ~515 per side): compare and gate give a verdict."""
    import numpy as np

    rng = np.random.default_rng(7)
    a = list(100 + rng.normal(0, 1, 600))
    b = list(103 + rng.normal(0, 1, 600))
    store = _jank_store(tmp_path / "s", a, b, metric="power.Total")
    r, _ = _gate(store, '[metrics."power.Total"]\nmax_regression_pct = 1.0\n', tmp_path)
    assert r.exit_code == 1 and "n = 600 vs 600" in r.output, r.output


def test_huge_values_do_not_overflow(tmp_path):
    """Values near 1e308: the mean of A (and B's +15 %) must not overflow to inf; the gate sees the regression."""
    import json

    a = [1.0e308, 1.01e308, 0.99e308, 1.0e308, 1.005e308]
    b = [1.15e308, 1.16e308, 1.14e308, 1.15e308, 1.155e308]
    store = _jank_store(tmp_path / "s", a, b, metric="power.Total")
    r, _ = _gate(store, '[metrics."power.Total"]\nmax_regression_pct = 3.0\n', tmp_path)
    assert r.exit_code == 1 and "power.Total +14.99 %" in r.output, r.output
    r = CliRunner().invoke(cli, ["compare", "base", "cand", "--store", str(store), "--format", "json", "--no-trace"])
    assert r.exit_code == 0, r.output
    m = json.loads(r.output)["workloads"][0]["metrics"][0]
    assert m["value_a"] == pytest.approx(sum(x / 1e308 for x in a) / 5 * 1e308, rel=1e-12)
    assert m["delta_pct"] == pytest.approx(15.0, abs=0.1)


def test_unreadable_numbers_and_bytes_are_bad_input(tmp_path):
    store = _jank_store(tmp_path / "s", [1.0] * 3, [1.0] * 3)
    (store / "cand" / "ui" / "0" / "metrics.json").write_text(
        '{"metrics": {"jank_pct": {"value": 1' + "0" * 400 + "}}}"
    )
    (store / "cand" / "ui" / "1" / "meta.json").write_bytes(b'{"kernel": "\xff\xfe"}')
    r = CliRunner().invoke(cli, ["compare", "base", "cand", "--store", str(store), "--no-trace"])
    flat = " ".join(r.output.split())  # the terminal form wraps long notes
    assert "out of the range of a float" in flat and "not UTF-8 text" in flat, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    th = tmp_path / "bad.toml"
    th.write_bytes(b"[metrics.jank_pct]\nmax_regression_pct = 3.0 # \xff\n")
    r = CliRunner().invoke(cli, ["gate", "base", "cand", "--store", str(store), "--thresholds", str(th)])
    assert r.exit_code == 2 and "not UTF-8 text" in r.output, r.output


def test_gate_lists_excluded_iterations(tmp_path):
    store = _store(tmp_path / "s", 1.0)
    write_iteration(store / "cand" / "video" / "9", {"soc_power_mw": {"value": 1.0, "unit": "mW"}}, complete=False)
    r, junit = _gate(store, THRESHOLDS, tmp_path)
    assert "note  excluded cand/video:" in r.output and "incomplete (no .complete marker)" in r.output
    suite, _ = _junit(junit)
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["excluded_iterations"] == "1"
    assert "incomplete (no .complete marker)" in suite.find("system-out").text


# -- power counters through the gate (issue 43): stores built here, power.csv in the run-store format --------------
POWER_TH = 'alpha = 0.05\n[metrics."power.Total"]\nmax_regression_pct = 3.0\n'


def _rail_csv(mw: float, inject: str | None, *, n: int = 1001, step_ns: int = 1_000_000, base_uj: float = 5e9) -> str:
    """One rail sampled at 1 kHz for 1 s at a steady `mw`, its counter 5000 J into the boot (base_uj); `inject`
    puts one defect in the middle: a +10 mJ glitch, a sample stamped with an earlier sample's time, a second row
    at a sample's time with another value, or a negative last value."""
    rows = [[i * step_ns, base_uj + mw * i * step_ns * 1e-6] for i in range(n)]  # mW x ns = 1e-6 uJ
    k = n // 2
    if inject == "glitch":
        rows[k][1] += 10_000.0
    elif inject == "repeated_ts":
        rows[k][0] = rows[k - 3][0]
    elif inject == "conflicting":
        rows.append([rows[k][0], rows[k][1] + 10_000.0])
    elif inject == "negative":
        rows[-1][1] = -rows[-1][1]
    return "ts_ns,rail,subsystem,energy_uj\n" + "".join(f"{t},VSYS_PWR_SOC,SoC,{e:.1f}\n" for t, e in rows)


def _power_store(root, inject: str, *, cand_factor: float = 1.0, n: int = 3, defective=(0, 1, 2)):
    for label, factor in (("base", 1.0), ("cand", cand_factor)):
        for i in range(n):
            d = write_iteration(root / label / "w" / str(i), {}, {"kernel": {"release": label}}, complete=False)
            bad = inject if label == "cand" and i in defective else None
            (d / "power.csv").write_text(_rail_csv(1000.0 * factor * (1 + 0.002 * DEV[i]), bad))
            (d / ".complete").touch()
    return root


@pytest.mark.parametrize(
    "inject, said",
    [
        ("glitch", "1 glitch sample(s) out of line with both neighbours excluded"),
        ("repeated_ts", "2 row(s) sharing a timestamp with different values excluded"),
        ("conflicting", "2 row(s) sharing a timestamp with different values excluded"),
        ("negative", "1 negative counter value(s) refused"),
    ],
)
def test_identical_power_rails_pass_and_the_notes_name_the_excluded_samples(tmp_path, inject, said):
    """Identical 1 W rails on both sides; every candidate iteration has one defective counter sample. Before the
    fix the backward step was a reset counting the whole 5000 J counter: +500,051 % (gate failed), or
    -500,100 % for the negative value (an "improvement")."""
    store = _power_store(tmp_path / "s", inject)
    r, _ = _gate(store, POWER_TH, tmp_path)
    assert r.exit_code == 0, r.output
    assert "power.Total +0.00 %" in r.output and "no change" in r.output
    assert f"note  w: power.csv: power rail VSYS_PWR_SOC (Total): {said}" in r.output
    assert "in 3 iterations: cand 0-2" in r.output


def test_real_regression_with_one_glitched_iteration_is_still_a_regression(tmp_path):
    """+20 % power on the candidate, 5 iterations a side, a 10 mJ glitch in one candidate iteration: before the
    fix +100,032 %, inconclusive, gate passed."""
    store = _power_store(tmp_path / "s", "glitch", cand_factor=1.2, n=5, defective=(1,))
    r, _ = _gate(store, POWER_TH, tmp_path)
    assert r.exit_code == 1, r.output
    assert "FAIL  w/power.Total: significant regression: power.Total +20.00 %" in r.output
    assert "glitch sample(s) out of line with both neighbours excluded — in 1 iteration: cand 1" in r.output
