"""Exit codes as a contract, and bad run-store input never read as a regression or an improvement (issue 43).

`abtest compare` / `gate` / `explain` exit 0 (ok), 1 (gate: a significant regression, and nothing else) or 2 (bad
input, not enough data, any unexpected error: one line on stderr). The stores are real: 3 iterations per label
copied from examples/idle-governors into a temporary directory (metrics.json only: --no-trace keeps each run
about a second), then damaged the way a careless tool or a hostile file would: units that differ between A and
B, deeply nested JSON, a 5,000-digit integer, `power = 1` in abtest.toml, control characters in a label.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from abtest.units import unit_factor

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "idle-governors"
ITERATIONS = ("2", "3", "5")


def abtest(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The installed command line, as a user runs it."""
    exe = Path(sys.executable).with_name("abtest")
    return subprocess.run(
        [str(exe), *args], capture_output=True, text=True, timeout=300, cwd=ROOT, env={**os.environ, **(env or {})}
    )


@pytest.fixture
def store(tmp_path) -> Path:
    """ladder and menu, 3 iterations each, metrics.json / meta.json / .complete only (no trace)."""
    root = tmp_path / "store"
    for label in ("ladder", "menu"):
        for it in ITERATIONS:
            src = EXAMPLES / label / "cyclictest" / it
            dst = root / label / "cyclictest" / it
            dst.mkdir(parents=True)
            for name in ("metrics.json", "meta.json", ".complete"):
                shutil.copy2(src / name, dst / name)
    return root


def _edit_metrics(it_dir: Path, fn) -> None:
    p = it_dir / "metrics.json"
    doc = json.loads(p.read_text())
    fn(doc["metrics"])
    p.write_text(json.dumps(doc))


def _iterations(store: Path, label: str) -> list[Path]:
    return sorted((store / label / "cyclictest").iterdir())


def _compare_json(store: Path) -> dict:
    r = abtest("compare", "ladder", "menu", "--store", str(store), "--no-trace", "--format", "json")
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def test_unit_factors():
    assert unit_factor("ms", "us") == 1000.0 and unit_factor("s", "ms") == 1000.0
    assert unit_factor("W", "mW") == 1000.0 and unit_factor("uJ", "J") == 1e-6 and unit_factor("mWh", "J") == 3.6
    assert unit_factor("µs", "us") == 1.0 and unit_factor("1/s", "Hz") == 1.0
    assert unit_factor("MW", "mW") == 1e9  # case matters: megawatt, not milliwatt
    assert unit_factor("points", "ms") is None and unit_factor("°C", "K") is None and unit_factor("", "ms") is None


def test_units_that_differ_are_converted_and_the_gate_sees_the_real_regression(store, tmp_path):
    """A writes its own metric in ms, B in s with a real +20 %: before, compare read -99.88 % (an improvement) and
    the gate passed. The declared latency_avg_us written in ms by B is converted to us as well."""
    for i, it in enumerate(_iterations(store, "ladder")):
        _edit_metrics(
            it, lambda m, i=i: m.update(frame_time={"value": 1000.0 + i, "unit": "ms", "lower_is_better": True})
        )
    for i, it in enumerate(_iterations(store, "menu")):

        def to_ms_and_slower(m, i=i):
            m["frame_time"] = {"value": 1.2 * (1000.0 + i) / 1000, "unit": "s", "lower_is_better": True}
            m["latency_avg_us"] = {**m["latency_avg_us"], "value": m["latency_avg_us"]["value"] / 1000, "unit": "ms"}

        _edit_metrics(it, to_ms_and_slower)
    doc = _compare_json(store)
    w = doc["workloads"][0]
    by = {m["name"]: m for m in w["metrics"]}
    assert by["frame_time"]["unit"] == "ms" and by["frame_time"]["delta_pct"] == pytest.approx(20.0, abs=0.01)
    assert by["frame_time"]["verdict"] == "regression"
    assert any("frame_time: units differ" in n and "converted to 'ms'" in n for n in w["notes"]), w["notes"]
    # the declared metric: B's values back in us, the same numbers as in the untouched example store
    assert by["latency_avg_us"]["value_b"] == pytest.approx(47.5)
    assert any(
        "metric latency_avg_us: metrics.json says unit 'ms', the registry declares 'us': value converted (x 1000)" in n
        for n in w["notes"]
    ), w["notes"]
    th = tmp_path / "th.toml"
    th.write_text("[metrics.frame_time]\nmax_regression_pct = 5.0\n")
    r = abtest("gate", "ladder", "menu", "--store", str(store), "--no-trace", "--thresholds", str(th))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAIL  cyclictest/frame_time: significant regression: frame_time +20.00 %" in r.stdout


def test_units_that_do_not_convert_refuse_the_metric(store):
    for it in _iterations(store, "ladder"):
        _edit_metrics(it, lambda m: m.update(score={"value": 10.0, "unit": "points", "lower_is_better": False}))
    for it in _iterations(store, "menu"):
        _edit_metrics(
            it,
            lambda m: m.update(
                score={"value": 9000.0, "unit": "ms", "lower_is_better": False},
                latency_max_us={"value": 3.0, "unit": "frames", "lower_is_better": True},
            ),
        )
    w = _compare_json(store)["workloads"][0]
    names = {m["name"] for m in w["metrics"]}
    assert "score" not in names and "score" not in w["metrics_only_in_a"] + w["metrics_only_in_b"]
    assert any("metric score: units differ" in n and "not compared" in n for n in w["notes"]), w["notes"]
    # a declared metric in a unit that does not convert: B's values are refused, never read as us
    assert "latency_max_us" in w["metrics_only_in_a"]
    assert any("latency_max_us" in n and "do not convert: value not used" in n for n in w["notes"])


@pytest.mark.parametrize("case", ["nested_metrics", "long_int_meta", "nested_meta"])
def test_hostile_json_excludes_the_iteration_naming_file_and_key(store, case):
    """Before: a RecursionError / ValueError traceback and exit 1 (what CI reads as "regression")."""
    it = _iterations(store, "menu")[0]
    if case == "nested_metrics":
        (it / "metrics.json").write_text('{"metrics": ' + "[" * 5000 + "]" * 5000 + "}")
        want = f"{it / 'metrics.json'}: nested deeper than"
    elif case == "long_int_meta":
        meta = it / "meta.json"
        meta.write_text(meta.read_text().replace('"attempt": 1', '"attempt": ' + "7" * 5000))
        want = f"{meta}: key attempt: an integer of 5000 digits (at most 4300 are read)"
    else:
        meta = it / "meta.json"
        doc = json.loads(meta.read_text())
        doc["hardware"]["deep"] = json.loads("[" * 40 + "]" * 40)
        meta.write_text(json.dumps(doc))
        want = f"{meta}: key hardware.deep" + "[0]" * 6 + " ...: nested deeper than 32 levels"
    r = abtest("compare", "ladder", "menu", "--store", str(store), "--no-trace", "--format", "json")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    excluded = json.loads(r.stdout)["workloads"][0]["excluded"]
    assert len(excluded) == 1 and excluded[0]["reason"].startswith(want), excluded
    # the same damage in every iteration of B: nothing left to compare, exit 2 naming the file (gate too)
    for other in _iterations(store, "menu")[1:]:
        for name in ("metrics.json", "meta.json"):
            shutil.copy2(it / name, other / name)
    for cmd in (["compare"], ["gate", "--thresholds", str(ROOT / "ci" / "thresholds.toml")]):
        r = abtest(cmd[0], "ladder", "menu", "--store", str(store), "--no-trace", *cmd[1:])
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
        assert want.split(":")[0] in r.stderr


@pytest.mark.parametrize(
    "toml, key",
    [
        ("power = 1\n", "key power: expected a table"),
        ("workloads = 3\n", "key workloads: expected a table"),
        ('[workloads]\ncyclictest = "x"\n', "key workloads.cyclictest: expected"),
        ("power = [1]\n", "key power: expected a table"),
    ],
)
def test_wrong_typed_store_config_is_exit_2_naming_file_and_key(store, toml, key):
    """Before: `power = 1` in abtest.toml was an AttributeError traceback and exit 1."""
    (store / "abtest.toml").write_text(toml)
    r = abtest("compare", "ladder", "menu", "--store", str(store), "--no-trace")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert f"{store / 'abtest.toml'}: {key}" in r.stderr


def test_control_characters_in_a_label_give_junit_xml_that_parses(store, tmp_path):
    """A label directory named with an ESC sequence and a SOH: ElementTree wrote them raw, and no XML parser
    accepted the file. They are now written as visible escapes."""
    label = "menu\x1b[31m\x01"
    (store / "menu").rename(store / label)
    junit = tmp_path / "gate.xml"
    th = tmp_path / "th.toml"
    th.write_text("[metrics.latency_avg_us]\nmax_regression_pct = 50.0\n")
    r = abtest(
        "gate", "ladder", label, "--store", str(store), "--no-trace", "--thresholds", str(th), "--junit", str(junit)
    )
    assert r.returncode == 0, r.stdout + r.stderr
    root = ET.parse(junit).getroot()
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props["label_b"] == "menu\\x1b[31m\\x01"
    assert root.find("testsuite").get("name") == "abtest gate menu\\x1b[31m\\x01 vs ladder"


_CRASH = """
import sys
import abtest.compare.comparison as comparison
def boom(*args, **kwargs):
    raise RuntimeError("injected fault\\nsecond line")
comparison.compare_labels = boom
from abtest.cli import main
sys.argv = ["abtest", *sys.argv[1:]]
main()
"""


@pytest.mark.parametrize("cmd", ["compare", "gate"])
def test_unexpected_error_is_exit_2_one_line(store, cmd):
    """Fault injection (a stand-in for a bug): compare_labels raises. The process exits 2, never 1, with one line
    naming the command and the error; ABTEST_DEBUG=1 adds the traceback."""
    args = ["ladder", "menu", "--store", str(store)]
    args += ["--no-trace"] + (["--thresholds", str(ROOT / "ci" / "thresholds.toml")] if cmd == "gate" else [])
    r = subprocess.run(
        [sys.executable, "-c", _CRASH, cmd, *args], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert r.returncode == 2, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"abtest {cmd} failed on its input: RuntimeError: injected fault second line" in lines[0]
    r = subprocess.run(
        [sys.executable, "-c", _CRASH, cmd, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "ABTEST_DEBUG": "1"},
    )
    assert r.returncode == 2 and "Traceback" in r.stderr and "boom" in r.stderr
